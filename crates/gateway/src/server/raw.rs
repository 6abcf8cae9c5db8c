//! What the accept loop hands to the listener's fast path: the shape of a request head it
//! asks about ([`HeadShape`]), the request the fast path takes ([`RawRequest`]), and the fast
//! path itself ([`FastPath`], the transports' classifier and server).

use std::net::SocketAddr;
use std::pin::Pin;

use super::stream::ClientStream;
use crate::limits::Permits;

/// The shape of a `GET` request head, for [`FastPath::classify`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadShape {
    /// It asks for a protocol upgrade (`Upgrade` header).
    pub upgrade: bool,
    /// It is HTTP/1.1 (not 1.0).
    pub http11: bool,
    /// Bytes followed the head in the same read (a body, or pipelined requests).
    pub body_follows: bool,
}

/// A request the fast path took: which of its routes, with the query and headers.
#[derive(Debug)]
pub(crate) struct RawRequest {
    /// The route [`FastPath::classify`] answered.
    pub route: &'static str,
    /// The query string, if any.
    pub query: Option<String>,
    /// The request headers.
    pub headers: axum::http::HeaderMap,
}

/// What the transports serve on the socket themselves (HTTP/1.1, plain or TLS, public
/// listener): the server reads each connection's first request head and asks.
pub(crate) trait FastPath: Send + Sync + std::fmt::Debug {
    /// The route that takes a `GET` of `path` with this `shape`, if one does; everything else
    /// goes to hyper and the router.
    fn classify(&self, path: &str, shape: HeadShape) -> Option<&'static str>;

    /// Serves `request` on `stream` from `peer`, holding `permits` for as long as the
    /// connection lives. What outlives the request's answer runs on a task of its own.
    fn serve(
        &self,
        request: RawRequest,
        stream: ClientStream,
        peer: SocketAddr,
        permits: Permits,
    ) -> Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}
