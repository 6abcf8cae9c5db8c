//! The WebSocket handshake: the upgrade request checked, the connect check
//! ([`crate::transport::access::admit`]), the `101` with the negotiated subprotocol and
//! compression, and the [`Session`] started on a task of its own.

use axum::http::{HeaderMap, StatusCode};
use herald_core::batch::BatchFormat;
use tungstenite::protocol::{Role, WebSocketConfig};

use super::format::Format;
use super::session::{Flow, Opened, Session};
use super::{deflate, direct, format, inbound, socket};
use crate::app::AppState;
use crate::error::ApiError;
use crate::limits::Rate;
use crate::server::stream::{ClientStream, PeerStream};
use crate::telemetry::metrics::{self, Transport};
use crate::transport::access::admit;

/// Whether `key` is a `Sec-WebSocket-Key`: base64 of 16 bytes (RFC 6455 4.1), which is 22
/// base64 characters, the last carrying 2 bits only, and `==`.
fn is_websocket_key(key: &str) -> bool {
    let b = key.as_bytes();
    b.len() == 24
        && b[..22]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
        && matches!(b[21], b'A' | b'Q' | b'g' | b'w')
        && &b[22..] == b"=="
}

/// Answers a WebSocket handshake on `stream` and runs the connection on a task of its own.
/// `headers` are the request's; a request that is not a valid version-13 handshake gets a
/// JSON error and is closed.
pub(crate) async fn upgrade_raw(
    state: &AppState,
    mut stream: ClientStream,
    headers: &HeaderMap,
    query: Option<&str>,
    peer: std::net::IpAddr,
    permits: crate::limits::Permits,
) {
    let id = state.cluster().next_id();
    let handshake = async {
        let key = validate_handshake(state, headers)?;
        let query = || form_urlencoded::parse(query.unwrap_or("").as_bytes());
        let token = query()
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned());
        let batch = batch_asked(query().find(|(k, _)| k == "batch").map(|(_, v)| v))?;
        // No topics yet: a WebSocket subscribes by command.
        let admitted = admit(state, headers, token.as_deref(), &[], "ws", Some(id), peer).await?;
        Ok::<_, ApiError>((key, admitted, batch))
    }
    .await;
    let (format, subprotocol) = format::negotiate(headers);
    let (key, admitted, batch) = match handshake {
        Ok(pair) => pair,
        Err(e) => {
            metrics::client_error("ws", e.code());
            let extra: &[(&str, &str)] = if e.status() == StatusCode::UPGRADE_REQUIRED {
                &[("sec-websocket-version", "13")]
            } else {
                &[]
            };
            let _ =
                crate::server::head::write_response(&mut stream, e.status(), extra, &e.json_body())
                    .await;
            return;
        }
    };
    let protocol_line = subprotocol
        .map(|p| format!("sec-websocket-protocol: {p}\r\n"))
        .unwrap_or_default();
    let deflate = state
        .config()
        .ws
        .permessage_deflate
        .then(|| deflate::Deflate::negotiate(headers))
        .flatten();
    let extensions = deflate.map_or(String::new(), |d| {
        format!("sec-websocket-extensions: {}\r\n", d.response())
    });
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: {}\r\n{protocol_line}{extensions}\r\n",
        tungstenite::handshake::derive_accept_key(key.as_bytes())
    );
    let write = async {
        tokio::io::AsyncWriteExt::write_all(&mut stream, response.as_bytes()).await?;
        tokio::io::AsyncWriteExt::flush(&mut stream).await
    };
    if !matches!(
        tokio::time::timeout(state.config().limits.write_timeout, write).await,
        Ok(Ok(()))
    ) {
        return;
    }
    // A compressed connection gets each message's frame compressed once for all its
    // subscribers: no batches there.
    let batch = (batch && deflate.is_none()).then_some(match format {
        Format::Json => BatchFormat::Json,
        Format::Msgpack => BatchFormat::Msgpack,
    });
    let who = admitted.who;
    let opened = Opened {
        id: Some(id),
        forwarded: admitted.forwarded,
        granted: admitted.granted,
        format,
        deflate,
        batch,
    };
    match stream {
        // Plain TCP is shared with the topic's fan-out while the connection is idle.
        ClientStream::Plain(tcp) if state.config().topics.direct_delivery => {
            let socket = direct::SharedSocket::new(
                tcp,
                format,
                deflate,
                state.config().ws.deflate_min_size,
                metrics::transport(Transport::Ws),
                batch,
            );
            serve(state, socket, who, opened, permits).await;
        }
        stream => serve(state, stream, who, opened, permits).await,
    }
}

/// Runs an accepted WebSocket connection on `stream`, on a task of its own.
async fn serve<S: PeerStream>(
    state: &AppState,
    stream: S,
    who: crate::auth::Identity,
    mut opened: Opened,
    permits: crate::limits::Permits,
) {
    let ws = &state.config().ws;
    let mut stream = inbound::Inbound::new(stream, Rate::new(ws.inbound_rate, ws.inbound_burst));
    if opened.deflate.is_some() {
        stream.expect_deflate();
    }
    let config = WebSocketConfig::default()
        .read_buffer_size(ws.read_buffer_size)
        .write_buffer_size(ws.write_buffer_size)
        .max_write_buffer_size(ws.max_message_size.max(ws.write_buffer_size + 1) * 4)
        .max_message_size(Some(ws.max_message_size))
        .max_frame_size(Some(ws.max_message_size));
    let socket = socket::WebSocket::new(stream, Role::Server, Some(config));
    let granted = std::mem::take(&mut opened.granted);
    let mut session = Session::new(state.clone(), socket, who, opened);
    // The connect hook's topics are subscribed and told here, before the connection's task
    // starts, so that its state holds nothing for them.
    if !granted.is_empty()
        && let Flow::Close(reason) = session.subscribed_by_server(&live(&granted)).await
    {
        session.connection.closing(reason);
        return;
    }
    // Combinators, not an `async move` block (see `spawn_connection`): a block would keep the
    // connection a second time beside `run`'s state (measured: ~1 KB per idle connection).
    use futures_util::FutureExt as _;
    let served = session.run().map(move |()| drop(permits));
    crate::shutdown::spawn_connection(state.tracker(), "ws", served);
}

/// Whether the client asked for batch frames (`batch=1`; `batch=0` or none: not).
fn batch_asked(value: Option<std::borrow::Cow<'_, str>>) -> Result<bool, ApiError> {
    match value.as_deref() {
        None | Some("0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(_) => Err(ApiError::bad_request(
            "bad_batch",
            "batch must be 1 (batch frames) or 0 (a frame per message)",
        )),
    }
}

fn validate_handshake(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    if state.shutdown().is_cancelled() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down; reconnect to another node",
        ));
    }
    let has_token = |name: &str, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if !has_token("connection", "upgrade") || !has_token("upgrade", "websocket") {
        return Err(ApiError::bad_request(
            "bad_handshake",
            "a WebSocket upgrade needs Connection: Upgrade and Upgrade: websocket",
        ));
    }
    if headers
        .get("sec-websocket-version")
        .and_then(|v| v.to_str().ok())
        != Some("13")
    {
        return Err(ApiError::new(
            StatusCode::UPGRADE_REQUIRED,
            "bad_handshake",
            "only WebSocket version 13 is supported",
        ));
    }
    match headers
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
    {
        Some(key) if is_websocket_key(key) => Ok(key.to_string()),
        _ => Err(ApiError::bad_request(
            "bad_handshake",
            "missing or malformed Sec-WebSocket-Key",
        )),
    }
}

/// `topics`, each from its live head (a server-side subscription's starts).
fn live(topics: &[String]) -> crate::cluster::control::ServerSubscription {
    topics.iter().map(|t| (t.clone(), None)).collect()
}

#[cfg(test)]
mod tests {
    use super::is_websocket_key;

    #[test]
    fn websocket_keys_are_base64_of_16_bytes() {
        assert!(is_websocket_key("dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(is_websocket_key("AAAAAAAAAAAAAAAAAAAAAA=="));
        assert!(
            !is_websocket_key("dGhlIHNhbXBsZSBub25jZR=="),
            "extra bits set"
        );
        assert!(!is_websocket_key("!!!!!!!!!!!!!!!!!!!!!!=="));
        assert!(!is_websocket_key("dGhlIHNhbXBsZSBub25jZQ=!"));
        assert!(!is_websocket_key("123456789012345678901234"));
        assert!(!is_websocket_key("dGhlIHNhbXBsZSBub25jZQ="));
    }
}
