//! A subscription's live receiver as a stream the feed's `StreamMap` polls.

use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::message::Message;

/// What a subscription's live receiver yields.
pub(super) enum Live {
    Message(Arc<Message>),
    Lagged(u64),
    /// The topic replaced its channel (its first message gave it the full one): subscribe
    /// again from the position reached.
    Closed,
}

/// A topic's live receiver as a stream that says when its channel closed, rather than
/// ending silently inside the `StreamMap`. The receiver becomes a stream (a boxed future)
/// only when first polled: a feed that goes direct before that never allocates one.
pub(super) enum LiveStream {
    Receiver(broadcast::Receiver<Arc<Message>>),
    Stream(BroadcastStream<Arc<Message>>),
    Closed,
}

impl LiveStream {
    pub(super) fn new(receiver: broadcast::Receiver<Arc<Message>>) -> Self {
        Self::Receiver(receiver)
    }
}

impl std::fmt::Debug for LiveStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveStream")
    }
}

impl tokio_stream::Stream for LiveStream {
    type Item = Live;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Live>> {
        if let Self::Receiver(_) = &*self {
            let Self::Receiver(receiver) = std::mem::replace(&mut *self, Self::Closed) else {
                unreachable!("matched above")
            };
            *self = Self::Stream(BroadcastStream::new(receiver));
        }
        let Self::Stream(stream) = &mut *self else {
            return Poll::Ready(None);
        };
        match std::pin::Pin::new(stream).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(message))) => Poll::Ready(Some(Live::Message(message))),
            Poll::Ready(Some(Err(BroadcastStreamRecvError::Lagged(n)))) => {
                Poll::Ready(Some(Live::Lagged(n)))
            }
            Poll::Ready(None) => {
                *self = Self::Closed;
                Poll::Ready(Some(Live::Closed))
            }
        }
    }
}
