//! The public listener's fast path ([`crate::server::FastPath`]), beside the routers
//! ([`crate::routes`]): which HTTP/1.1 requests it serves on the socket itself, and serving
//! them with the transports. `GET /v1/sse` streams (why:
//! `server/` module docs) and `GET /v1/ws` upgrades; everything else goes to the router.
//!
//! The router's layers do not see these requests, so what they would do is done here or in
//! the transport: CORS headers on an SSE answer or refusal (`api::cors::raw_headers`, the
//! same headers the layer adds), the WebSocket `Origin` check in the handshake. The body
//! limit does not apply: neither takes a body. docs/architecture.md lists each layer.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use crate::app::AppState;
use crate::limits::Permits;
use crate::server::stream::ClientStream;
use crate::server::{FastPath, HeadShape, RawRequest, head};

use crate::transport::{sse, ws};

/// The public listener's fast path, serving with `state`: what it takes is served on the raw
/// socket (not to be confused with direct delivery, core's `direct`, where the publisher
/// writes to the socket).
#[derive(Debug)]
pub(crate) struct RawSocket(pub AppState);

impl FastPath for RawSocket {
    fn classify(&self, path: &str, shape: HeadShape) -> Option<&'static str> {
        match path {
            sse::PATH if !shape.upgrade => Some(sse::PATH),
            // A WebSocket client waits for the 101 before it sends frames: bytes past the
            // head mean something else is going on, and hyper gets them. An upgrade needs
            // HTTP/1.1 (RFC 6455 4.1); an HTTP/1.0 one goes to the router, which answers 426.
            ws::PATH if shape.upgrade && shape.http11 && !shape.body_follows => Some(ws::PATH),
            _ => None,
        }
    }

    fn serve(
        &self,
        request: RawRequest,
        stream: ClientStream,
        peer: SocketAddr,
        permits: Permits,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let state = &self.0;
            let RawRequest {
                route,
                query,
                headers,
            } = request;
            if route == ws::PATH {
                ws::upgrade_raw(
                    state,
                    stream,
                    &headers,
                    query.as_deref(),
                    peer.ip(),
                    permits,
                )
                .await;
                return;
            }
            let mut stream = stream;
            let opened = sse::open(state, &headers, query.as_deref(), peer.ip()).await;
            let cors = match &opened {
                Ok(_) => Vec::new(),
                Err(_) => crate::api::cors::raw_headers(state, &headers),
            };
            drop((headers, query));
            match opened {
                Ok(sse) => {
                    // A task of its own, sized for the stream alone rather than for the
                    // accept loop's connection task (hyper's connection state).
                    let write_timeout = state.config().limits.write_timeout;
                    // Combinators, not an `async move` block (see `spawn_connection`).
                    use futures_util::FutureExt as _;
                    let served =
                        sse::serve_raw(stream, sse, write_timeout).map(move |()| drop(permits));
                    crate::shutdown::spawn_connection(state.tracker(), "sse", served);
                }
                Err(e) => {
                    // With CORS headers, so that a page can read why.
                    let extra: Vec<(&str, &str)> =
                        cors.iter().map(|(n, v)| (*n, v.as_str())).collect();
                    let _ =
                        head::write_response(&mut stream, e.status(), &extra, &e.json_body()).await;
                }
            }
        })
    }
}
