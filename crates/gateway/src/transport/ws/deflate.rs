//! permessage-deflate (RFC 7692): the handshake's negotiation, and what a connection that
//! negotiated it sends compressed (a `Session`'s own side of it is `compressed.rs`).
//!
//! Herald accepts the first valid offer and always answers `server_no_context_takeover` and
//! `client_no_context_takeover` (the RFC lets a server add both): each message is compressed
//! on its own, so a message's compressed frame is made once and shared by every subscriber
//! ([`herald_core::Message::ws_deflate_wire_frame`]), and a message from the client is
//! inflated on its own by the thread's inflater ([`herald_core::deflate::inflate`]). No
//! connection holds a compressor, an inflater or a window: the cost per connection is a few
//! bytes (measured in BENCHMARKS.md).
//!
//! `server_max_window_bits=N` is honoured without a compressor per window size: a message
//! compressed on its own refers back at most its own length, so one no longer than 2^N bytes
//! fits a window of N bits, and a longer one goes uncompressed to a client that asked for
//! fewer than 15 bits (the compressor's own window).
//! `client_max_window_bits` needs nothing: Herald inflates with the largest window.
//!
//! tungstenite has no extensions: [`super::inbound::Inbound`] clears RSV1 on the first frame of
//! a compressed message before tungstenite reads it (and marks it binary, so that tungstenite
//! does not check compressed bytes as UTF-8) and remembers, in order, which messages were
//! compressed; outbound compressed frames are written as raw frames with RSV1 set.

use axum::http::HeaderMap;
use bytes::Bytes;
use herald_core::Outbound;
use tungstenite::Message as WsMessage;
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::frame::coding::{Data, OpCode};

/// The extension's name in `Sec-WebSocket-Extensions`.
const NAME: &str = "permessage-deflate";

/// The longest reply of a connection's own (pong, error, `subscribed`...) that goes
/// compressed; longer ones go as they are (RSV1 clear, as RFC 7692 lets each message choose).
/// Unlike a message, compressed once for all its subscribers, such a reply is compressed for
/// one connection, and the client chooses its size: a pong echoes the ping's data, an error
/// may quote the frame. Compressing 64 KB of it cost 4-6 ms of CPU per ping against 0.4 ms
/// without (11-14x); up to this bound it costs at most a few times sending it as it is
/// (BENCHMARKS.md, "Replies a client causes").
pub(crate) const REPLY_DEFLATE_MAX: usize = 4096;

/// What a connection negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Deflate {
    /// `server_max_window_bits` as the client asked (8 to 15), `None` when it did not.
    window_bits: Option<u8>,
}

impl Deflate {
    /// The first acceptable permessage-deflate offer of the request's
    /// `Sec-WebSocket-Extensions` headers. Offers with an unknown or repeated parameter, or
    /// a value out of range, are declined (RFC 7692 section 5), and the next one is tried;
    /// `None` when none is acceptable (the connection goes uncompressed).
    pub(super) fn negotiate(headers: &HeaderMap) -> Option<Self> {
        headers
            .get_all("sec-websocket-extensions")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .find_map(offer)
    }

    /// The `Sec-WebSocket-Extensions` value of the 101 answer.
    pub(super) fn response(self) -> String {
        let mut out = format!("{NAME}; server_no_context_takeover; client_no_context_takeover");
        if let Some(bits) = self.window_bits {
            out.push_str(&format!("; server_max_window_bits={bits}"));
        }
        out
    }

    /// Whether a frame of `len` bytes goes compressed: at least `min_size`, and within the
    /// client's window when it asked for one smaller than the compressor's (15 bits).
    pub(super) fn compresses(self, len: usize, min_size: usize) -> bool {
        len >= min_size
            && match self.window_bits {
                None | Some(15) => true,
                Some(bits) => len <= 1usize << bits,
            }
    }
}

/// One offer (`permessage-deflate; param; param=value`), if it is this extension's and valid.
fn offer(element: &str) -> Option<Deflate> {
    let mut parts = element.split(';').map(str::trim);
    if parts.next()? != NAME {
        return None;
    }
    let mut seen: Vec<&str> = Vec::with_capacity(4);
    let mut window_bits = None;
    for param in parts {
        let (name, value) = match param.split_once('=') {
            Some((name, value)) => (name.trim(), Some(unquote(value.trim())?)),
            None => (param, None),
        };
        if seen.contains(&name) {
            return None; // repeated
        }
        seen.push(name);
        match (name, value) {
            ("server_no_context_takeover" | "client_no_context_takeover", None) => {}
            ("server_max_window_bits", Some(value)) => window_bits = Some(bits(value)?),
            ("client_max_window_bits", None) => {}
            ("client_max_window_bits", Some(value)) => {
                bits(value)?;
            }
            _ => return None, // unknown, or a value where none belongs (or none where one does)
        }
    }
    Some(Deflate { window_bits })
}

/// A parameter value, without the quotes of a quoted string.
fn unquote(value: &str) -> Option<&str> {
    match value.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"'),
        None => Some(value),
    }
}

/// A window size in bits: 8 to 15, decimal without a leading zero (RFC 7692 section 7.1.2).
fn bits(value: &str) -> Option<u8> {
    if value.starts_with('0') || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().filter(|b| (8..=15).contains(b))
}

/// `message`'s compressed wire frame for a connection that negotiated `deflate`, when
/// [`Deflate::compresses`] says so (compressed once per message and shared,
/// [`Message::ws_deflate_wire_frame`]): what direct delivery ([`super::direct`]) writes.
pub(super) fn wire_frame(deflate: Deflate, min_size: usize, sent: Outbound<'_>) -> Option<&Bytes> {
    if deflate.compresses(sent.ws_frame().len(), min_size) {
        sent.ws_deflate_wire_frame()
    } else {
        None
    }
}

/// What a direct delivery whose frame was `written` bytes long counts: the compressed
/// payload when the frame went compressed (what crossed the wire), `None` when it did not.
pub(super) fn counted_bytes(written: usize, sent: Outbound<'_>) -> Option<usize> {
    match sent.ws_deflate_wire_frame() {
        Some(packed) if packed.len() == written => Some(packed.len() - header_len(packed.len())),
        _ => None,
    }
}

/// The length of the header of a server's frame `total` bytes long in all (RFC 6455 5.2).
fn header_len(total: usize) -> usize {
    match total {
        0..=127 => 2,
        128..=0x1_0003 => 4,
        _ => 10,
    }
}

/// A compressed text message as tungstenite writes it: `payload` already compressed, RSV1 set.
pub(super) fn text_frame(payload: Bytes) -> WsMessage {
    let mut frame = Frame::message(payload, OpCode::Data(Data::Text), true);
    frame.header_mut().rsv1 = true;
    WsMessage::Frame(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn negotiate(values: &[&str]) -> Option<Deflate> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("sec-websocket-extensions", v.parse().unwrap());
        }
        Deflate::negotiate(&headers)
    }

    #[test]
    fn accepts_the_first_valid_offer() {
        let plain = Some(Deflate { window_bits: None });
        assert_eq!(negotiate(&["permessage-deflate"]), plain);
        assert_eq!(
            negotiate(&["permessage-deflate; client_max_window_bits"]),
            plain
        );
        assert_eq!(
            negotiate(&[
                "permessage-deflate; server_no_context_takeover; client_no_context_takeover; client_max_window_bits=10"
            ]),
            plain
        );
        // Chrome's offer, and a quoted value.
        assert_eq!(
            negotiate(&["permessage-deflate; client_max_window_bits"]),
            plain
        );
        assert_eq!(
            negotiate(&[r#"permessage-deflate; server_max_window_bits="10""#]),
            Some(Deflate {
                window_bits: Some(10)
            })
        );
        // An invalid first offer is declined and the next one taken, across headers too.
        assert_eq!(
            negotiate(&[
                "x-other, permessage-deflate; server_max_window_bits=16",
                "permessage-deflate; server_max_window_bits=9"
            ]),
            Some(Deflate {
                window_bits: Some(9)
            })
        );
    }

    #[test]
    fn declines_invalid_offers() {
        for offer in [
            "x-webkit-deflate-frame",
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; client_max_window_bits=16",
            "permessage-deflate; client_max_window_bits=ten",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
            "permessage-deflate; mystery",
            r#"permessage-deflate; server_max_window_bits="10"#,
        ] {
            assert_eq!(negotiate(&[offer]), None, "{offer}");
        }
        assert_eq!(negotiate(&[]), None);
    }

    #[test]
    fn answers_with_what_it_honours() {
        assert_eq!(
            Deflate { window_bits: None }.response(),
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
        );
        let small = Deflate {
            window_bits: Some(9),
        };
        assert!(small.response().ends_with("; server_max_window_bits=9"));
        assert!(small.compresses(512, 256) && !small.compresses(513, 256));
        assert!(!small.compresses(255, 256));
        assert!(Deflate { window_bits: None }.compresses(1 << 20, 0));
        let full = Deflate {
            window_bits: Some(15),
        };
        assert!(full.compresses(1 << 20, 0));
    }
}
