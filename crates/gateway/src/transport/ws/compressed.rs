//! A [`Session`]'s compressed frames (permessage-deflate, [`super::deflate`]): a compressed
//! message from the client inflated, and what the connection sends compressed.

use bytes::Bytes;
use herald_core::Outbound;
use herald_core::deflate::{InflateError, compress, inflate};
use tungstenite::Message as WsMessage;

use super::close_code;
use super::deflate::{Deflate, REPLY_DEFLATE_MAX, text_frame};
use super::format::Format;
use super::inbound::Sent;
use super::session::{Flow, FrameError, Session};
use crate::server::stream::PeerStream;
use crate::telemetry::metrics::{self, CloseReason};

impl<S: PeerStream> Session<S> {
    /// A compressed message from the client, tungstenite having yielded it as binary
    /// ([`super::inbound`]). Inflated to at most `ws.max_message_size` bytes: a message that
    /// would inflate to more closes the connection with 1009 (nothing past the limit is
    /// allocated), invalid DEFLATE data with 1002 (RFC 7692 section 8), invalid UTF-8 in a
    /// text message with 1007. A message of the kind the connection's format refuses (binary on
    /// JSON, text on `herald.msgpack`) is refused before it is inflated, as it is uncompressed.
    pub(super) async fn on_deflated(&mut self, sent: Sent, data: &Bytes) -> Flow {
        match (sent, self.format) {
            (Sent::DeflatedText, Format::Json) | (Sent::DeflatedBinary, Format::Msgpack) => {}
            (_, Format::Json) => {
                return self
                    .error_frame(FrameError::new(
                        "unsupported_frame",
                        "binary frames are not supported; send JSON text frames (or connect \
                         with the herald.msgpack subprotocol)",
                    ))
                    .await;
            }
            (_, Format::Msgpack) => {
                return self
                    .error_frame(FrameError::new(
                        "unsupported_frame",
                        "text frames are not supported on a herald.msgpack connection; send \
                         MessagePack binary frames",
                    ))
                    .await;
            }
        }
        let limit = self.state.config().ws.max_message_size;
        let (code, metric, reason) = match inflate(data, limit) {
            Ok(bytes) if self.format == Format::Msgpack => {
                return match Box::pin(self.on_msgpack_command(&bytes)).await {
                    Ok(flow) => flow,
                    Err(e) => self.error_frame(e).await,
                };
            }
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => {
                    return match self.on_command(&text, None).await {
                        Ok(flow) => flow,
                        Err(e) => self.error_frame(e).await,
                    };
                }
                Err(_) => (
                    close_code::INVALID_DATA,
                    "invalid_utf8",
                    "text frame is not valid UTF-8".to_string(),
                ),
            },
            Err(e @ InflateError::TooBig(_)) => (
                close_code::TOO_BIG,
                "too_big",
                format!("message too big: {e}"),
            ),
            Err(e @ InflateError::Corrupt) => (
                close_code::PROTOCOL,
                "protocol",
                format!("protocol error: compressed message {e}"),
            ),
        };
        metrics::client_error("ws", metric);
        self.close(code, &reason).await;
        Flow::Close(CloseReason::Protocol)
    }

    /// The compression of this connection's outbound frames: its negotiated permessage-deflate
    /// on a JSON connection; none on a `herald.msgpack` one, whose frames go uncompressed
    /// (inbound, a compressed frame is inflated whatever the format).
    pub(super) fn json_deflate(&self) -> Option<Deflate> {
        self.deflate.filter(|_| self.format == Format::Json)
    }

    /// `message`'s compressed frame for this connection, when it negotiated compression, the
    /// frame is long enough and compressing shrank it (compressed once per message, shared).
    pub(super) fn deflated_message(&self, sent: Outbound<'_>) -> Option<WsMessage> {
        let deflate = self.json_deflate()?;
        let min_size = self.state.config().ws.deflate_min_size;
        if !deflate.compresses(sent.ws_frame().len(), min_size) {
            return None;
        }
        sent.ws_deflate_payload().map(text_frame)
    }

    /// A reply of this connection's own, compressed when that applies as for
    /// [`Self::deflated_message`] and it is at most [`REPLY_DEFLATE_MAX`] bytes long.
    pub(super) fn deflated_text(&self, text: String) -> WsMessage {
        let min_size = self.state.config().ws.deflate_min_size;
        match self.json_deflate() {
            Some(deflate)
                if text.len() <= REPLY_DEFLATE_MAX && deflate.compresses(text.len(), min_size) =>
            {
                match compress(text.as_bytes()) {
                    Some(packed) => text_frame(packed.into()),
                    None => WsMessage::Text(text.into()),
                }
            }
            _ => WsMessage::Text(text.into()),
        }
    }
}
