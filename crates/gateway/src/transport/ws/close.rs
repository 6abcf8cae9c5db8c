//! How a [`Session`] ends: a close frame, then a lingering close.

use std::time::Duration;

use futures_util::SinkExt as _;
use tungstenite::Message as WsMessage;
use tungstenite::Utf8Bytes;
use tungstenite::protocol::frame::CloseFrame;

use super::session::Session;
use crate::server::stream::PeerStream;

/// How long a closing connection drains what the client still sends.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes a closing connection drains (a client still sending a 4 MiB frame when its
/// 1009 goes out gets the close frame; one sending more is cut off).
const LINGER_BYTES: usize = 16 << 20;

impl<S: PeerStream> Session<S> {
    /// Sends a close frame (best effort, bounded in time), then closes the TCP connection
    /// with a lingering close.
    pub(super) async fn close(&mut self, code: u16, reason: &str) {
        let frame = CloseFrame {
            code: code.into(),
            reason: Utf8Bytes::from(reason),
        };
        let limit = Duration::from_secs(1).min(self.state.config().limits.write_timeout);
        self.rest_first();
        let _ = tokio::time::timeout(limit, self.socket.send(WsMessage::Close(Some(frame)))).await;
        self.linger().await;
    }

    /// Half-closes and drains what the client still sends (its close reply, the rest of a
    /// frame too big to read), up to [`LINGER`] and [`LINGER_BYTES`]. Closing a socket with
    /// unread input makes the kernel reset it, and a reset can destroy the close frame before
    /// the client reads it (it would see 1006 instead of the code sent).
    pub(super) async fn linger(&mut self) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let stream = self.socket.get_mut().get_mut();
        let _ = tokio::time::timeout(LINGER, async {
            let _ = stream.shutdown().await;
            let mut scratch = vec![0u8; 16 * 1024];
            let mut drained = 0;
            while drained < LINGER_BYTES {
                match stream.read(&mut scratch).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
        })
        .await;
    }
}
