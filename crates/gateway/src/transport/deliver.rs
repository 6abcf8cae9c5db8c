//! What a feed event means for a client, whatever its transport ([`deliver`]).

use std::sync::Arc;

use herald_core::TopicName;

/// What a feed event means for a client, whatever its transport; each transport writes it
/// in its own framing (SSE event, WebSocket frame, poll entry).
#[derive(Debug)]
pub(crate) enum Delivery {
    /// Deliver the message; as its delta when the flag is set and it has one in the form the
    /// transport sends ([`herald_core::Sent`]).
    Message(Arc<herald_core::Message>, bool),
    /// Tell the client that messages of `topic` were lost (JSON: [`lost_json`]).
    Lost {
        /// The topic.
        topic: TopicName,
        /// Why.
        reason: herald_core::LossReason,
    },
    /// Nothing to send (a lag recovered from history; the replay follows).
    Nothing,
    /// Close the connection: too slow on `topic`.
    Disconnect {
        /// The topic it lagged on.
        topic: TopicName,
    },
    /// Bytes to write as they are: the rest of a frame the topic's fan-out wrote in part to
    /// a directly served socket (only a feed the transport linked gives these).
    Rest(bytes::Bytes),
}

/// Maps a feed event to what the client sees, counting the slow-consumer outcomes in one
/// place for every transport.
pub(crate) fn deliver(
    event: herald_core::FeedEvent,
    transport: &'static str,
    config: &crate::config::Config,
) -> Delivery {
    use crate::telemetry::metrics::slow_consumer_in;
    use herald_core::{FeedEvent, LossReason};
    let namespace = |topic: &TopicName| {
        config
            .namespace(topic.as_str())
            .map_or("default", |(n, _)| n)
    };
    match event {
        FeedEvent::Message(message) => Delivery::Message(message, false),
        FeedEvent::Delta(message) => Delivery::Message(message, true),
        FeedEvent::Lost { topic, reason } => {
            if reason == LossReason::Lagged {
                slow_consumer_in("lost", namespace(&topic));
            }
            Delivery::Lost { topic, reason }
        }
        FeedEvent::Recovered { topic, .. } => {
            slow_consumer_in("recovered", namespace(&topic));
            Delivery::Nothing
        }
        FeedEvent::Coalesced { topic, skipped } => {
            slow_consumer_in("coalesced", namespace(&topic));
            tracing::trace!(%topic, skipped, transport, "a slow consumer skipped to the newest");
            Delivery::Nothing
        }
        FeedEvent::Disconnect { topic, missed } => {
            slow_consumer_in("disconnected", namespace(&topic));
            tracing::debug!(%topic, missed, transport, "disconnecting a slow consumer");
            Delivery::Disconnect { topic }
        }
        FeedEvent::Rest(rest) => Delivery::Rest(rest),
    }
}

/// The JSON of a loss signal: `{"topic":..,"reason":..}`.
pub(crate) fn lost_json(topic: &TopicName, reason: herald_core::LossReason) -> String {
    format!(r#"{{"topic":"{topic}","reason":"{}"}}"#, reason.as_str())
}
