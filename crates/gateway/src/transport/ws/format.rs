//! The WebSocket wire formats and their subprotocols (`Sec-WebSocket-Protocol`, RFC 6455
//! 1.9 and 4.2.2).
//!
//! - `herald.msgpack`: every frame both ways is a binary frame holding the JSON protocol's
//!   object as a MessagePack map ([`herald_core::msgpack`]); a message's `data` is carried as
//!   its publisher sent it.
//! - `herald.json`, or no subprotocol at all: JSON text frames, as always.
//!
//! The server takes the first of the client's offers that it knows, in the client's order of
//! preference, and names it in its answer. A client that offers only subprotocols the server
//! does not know gets JSON and no `Sec-WebSocket-Protocol` in the answer, as RFC 6455 lets a
//! server do (a browser then fails the connection itself, as the RFC asks of clients).

use axum::http::HeaderMap;

/// The MessagePack subprotocol.
pub(crate) const MSGPACK: &str = "herald.msgpack";
/// The JSON subprotocol, the default without one.
pub(crate) const JSON: &str = "herald.json";

/// A connection's wire format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Format {
    /// JSON text frames.
    #[default]
    Json,
    /// MessagePack binary frames.
    Msgpack,
}

/// The format a handshake's `Sec-WebSocket-Protocol` offers pick, and the subprotocol to
/// name in the answer (none when the client offered none the server knows).
pub(crate) fn negotiate(headers: &HeaderMap) -> (Format, Option<&'static str>) {
    let offers = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim);
    for offer in offers {
        // Subprotocol names are tokens compared as written (RFC 6455 4.1).
        match offer {
            MSGPACK => return (Format::Msgpack, Some(MSGPACK)),
            JSON => return (Format::Json, Some(JSON)),
            _ => {}
        }
    }
    (Format::Json, None)
}

/// A control frame of the server's (`subscribed`, `error`, `pong`, `lost`, `join`...) built as
/// JSON text, in the MessagePack form: the same object as a map. Control frames are rare next
/// to messages, whose frames are made once per message ([`herald_core::Message`]).
pub(crate) fn json_to_msgpack(text: &str) -> Vec<u8> {
    // Every control frame is built by the server as a JSON object.
    herald_core::msgpack::from_json_text(text.as_bytes()).unwrap_or_else(|| {
        herald_core::msgpack::from_json(&serde_json::json!({
            "type": "error", "code": "internal", "reason": "unencodable frame",
        }))
    })
}

/// `{"type":"pong","data":<data as the client sent it>}` in MessagePack, or without `data`.
pub(crate) fn msgpack_pong(data: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + data.map_or(0, <[u8]>::len));
    // Writing to a Vec cannot fail.
    let _ = rmp::encode::write_map_len(&mut out, 1 + u32::from(data.is_some()));
    let _ = rmp::encode::write_str(&mut out, "type");
    let _ = rmp::encode::write_str(&mut out, "pong");
    if let Some(data) = data {
        let _ = rmp::encode::write_str(&mut out, "data");
        out.extend_from_slice(data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("sec-websocket-protocol", v.parse().unwrap());
        }
        headers
    }

    #[test]
    fn the_first_known_offer_wins() {
        assert_eq!(negotiate(&offer(&[])), (Format::Json, None));
        assert_eq!(
            negotiate(&offer(&["chat, herald.msgpack"])),
            (Format::Msgpack, Some(MSGPACK))
        );
        assert_eq!(
            negotiate(&offer(&["herald.json", "herald.msgpack"])),
            (Format::Json, Some(JSON))
        );
        assert_eq!(negotiate(&offer(&["chat", "mqtt"])), (Format::Json, None));
        assert_eq!(
            negotiate(&offer(&["Herald.MsgPack"])),
            (Format::Json, None),
            "tokens are compared as written"
        );
    }
}
