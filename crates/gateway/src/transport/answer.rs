//! The JSON answers that carry a batch of messages: a long-poll answer and a history page.
//!
//! - Bounded: messages are added while the answer holds fewer than its count limit and fewer
//!   than `limits.max_answer_bytes` bytes of frames ([`Budget`]); the cursor (poll) or
//!   `next` (history) then continues after the last one given, and `more` says to ask again.
//!   An answer always takes at least one message, so a message larger than the budget still
//!   goes through: one holds at most the budget plus one message.
//! - Not copied: each message's WebSocket frame (the JSON object, encoded once and shared by
//!   every subscriber) is a chunk of the body by reference ([`Chunks`]); only the text
//!   around them, and frames shorter than [`COPY_BELOW`], are copied into the chunks between.
//!   The body has an exact length (`content-length` on HTTP/1.1).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use herald_core::{Message, Outbound};
use http_body::{Frame, SizeHint};

/// Frames shorter than this are copied into the running chunk instead of being a chunk of
/// their own: a copy of a few hundred bytes costs less than a chunk (on HTTP/2, a DATA
/// frame each).
pub(crate) const COPY_BELOW: usize = 1024;

/// How many messages an answer may still take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    messages: usize,
    bytes: usize,
}

impl Budget {
    /// At most `messages` messages, and no more once `bytes` bytes of frames are held.
    pub(crate) fn new(messages: usize, bytes: usize) -> Self {
        Self { messages, bytes }
    }

    /// Whether the answer is full: ask no more of the feed.
    pub(crate) fn full(&self) -> bool {
        self.messages == 0 || self.bytes == 0
    }

    /// Counts `message` as taken.
    pub(crate) fn take(&mut self, sent: Outbound<'_>) {
        self.messages = self.messages.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(sent.ws_frame().len() + 1);
    }

    /// How many of `messages` fit, in order (at least one when there is one).
    pub(crate) fn fits(mut self, messages: &[std::sync::Arc<Message>]) -> usize {
        let mut n = 0;
        for m in messages {
            if self.full() {
                break;
            }
            self.take(Outbound::new(m, false));
            n += 1;
        }
        n
    }
}

/// A JSON answer written as text and shared frames.
#[derive(Debug, Default)]
pub(crate) struct JsonAnswer {
    chunks: Vec<Bytes>,
    text: BytesMut,
    len: u64,
}

impl JsonAnswer {
    /// Appends `text` (copied).
    pub(crate) fn text(&mut self, text: &[u8]) {
        self.text.extend_from_slice(text);
    }

    /// Appends `messages`' WebSocket frames, comma-separated: by reference from
    /// [`COPY_BELOW`] bytes, copied below.
    pub(crate) fn frames<'a>(&mut self, messages: impl IntoIterator<Item = Outbound<'a>>) {
        for (i, m) in messages.into_iter().enumerate() {
            if i > 0 {
                self.text(b",");
            }
            let frame = m.ws_frame();
            if frame.len() < COPY_BELOW {
                self.text(frame);
            } else {
                self.cut();
                self.push(frame.clone());
            }
        }
    }

    /// Ends the running text chunk.
    fn cut(&mut self) {
        if !self.text.is_empty() {
            let text = self.text.split().freeze();
            self.push(text);
        }
    }

    fn push(&mut self, chunk: Bytes) {
        self.len += chunk.len() as u64;
        self.chunks.push(chunk);
    }

    /// The body: its chunks in order, with its exact length.
    pub(crate) fn into_body(mut self) -> Body {
        self.cut();
        Body::new(Chunks {
            remaining: self.len,
            chunks: self.chunks.into_iter(),
        })
    }
}

/// A body of ready chunks with a known length.
struct Chunks {
    chunks: std::vec::IntoIter<Bytes>,
    remaining: u64,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        Poll::Ready(this.chunks.next().map(|chunk| {
            this.remaining -= chunk.len() as u64;
            Ok(Frame::data(chunk))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use herald_core::{Payload, Registry, RegistryConfig, TopicName};
    use serde_json::json;

    use super::*;

    fn messages(sizes: &[usize]) -> Vec<Arc<Message>> {
        let registry = Registry::new(RegistryConfig::default());
        let topic = TopicName::new("t").unwrap();
        for &n in sizes {
            let payload = Payload::from_value(&json!("x".repeat(n)));
            registry.publish(&topic, None, payload).unwrap();
        }
        registry.get("t").unwrap().history(None, 100).messages
    }

    #[test]
    fn a_budget_stops_once_reached_and_always_takes_one() {
        let held = messages(&[2000, 2000, 2000]);
        let frame = held[0].ws_frame().len() + 1;
        assert_eq!(Budget::new(10, 1).fits(&held), 1, "one, however large");
        assert_eq!(Budget::new(10, frame).fits(&held), 1);
        assert_eq!(Budget::new(10, frame + 1).fits(&held), 2);
        assert_eq!(Budget::new(2, usize::MAX).fits(&held), 2);
        assert_eq!(Budget::new(10, usize::MAX).fits(&held), 3);
        assert_eq!(Budget::new(10, 1).fits(&[]), 0);
    }

    #[tokio::test]
    async fn large_frames_are_chunks_of_their_own_and_the_body_is_exact() {
        let held = messages(&[10, 4000, 10]);
        let mut answer = JsonAnswer::default();
        answer.text(b"[");
        answer.frames(held.iter().map(|m| Outbound::new(m, false)));
        answer.text(b"]");
        let expected: Vec<u8> = {
            let mut v = b"[".to_vec();
            for (i, m) in held.iter().enumerate() {
                if i > 0 {
                    v.push(b',');
                }
                v.extend_from_slice(m.ws_frame());
            }
            v.push(b']');
            v
        };
        let shared = held[1].ws_frame().as_ptr();
        assert!(
            answer.chunks.iter().any(|c| c.as_ptr() == shared),
            "the large frame is sent by reference"
        );
        let body = answer.into_body();
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(expected.len() as u64)
        );
        let got = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        assert_eq!(got, expected);
    }
}
