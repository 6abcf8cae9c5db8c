//! Upstream events: what clients do, produced to a Kafka topic for backend services.
//!
//! Records (value: JSON; headers carry routing so consumers need not decode):
//!
//! | `herald-type` | value | other headers |
//! | --- | --- | --- |
//! | `connect` | `{"connection":..,"node":..,"transport":..,"ts":..}` | `herald-connection`, `herald-node` |
//! | `disconnect` | the same plus `"reason"` | same |
//! | `publish` | the published JSON | `herald-topic`, `herald-event` (when named), `herald-connection`, `herald-node` |
//!
//! Producing never blocks a connection: records go to librdkafka's bounded queue and, when it
//! is full (Kafka away for long), are dropped and counted
//! (`herald_bridge_messages_total{bridge="kafka_upstream",direction="dropped"}`).

use std::time::Duration;

use herald_core::{EventName, Payload, TopicName};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::observer::ConnectionObserver;
use crate::bridge::kafka_props::{self, KafkaContext};
use crate::bridge::now_ms;
use crate::telemetry::metrics;

const NAME: &str = "kafka_upstream";

/// Produces client events to one Kafka topic.
pub(crate) struct Upstream {
    producer: FutureProducer<KafkaContext>,
    topic: String,
    node_id: String,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// A producer for `topic` on `brokers`, with `properties` (`cluster.kafka_properties`)
    /// applied over Herald's defaults.
    pub(crate) fn new(
        brokers: &str,
        topic: &str,
        node_id: &str,
        properties: &std::collections::BTreeMap<String, String>,
    ) -> anyhow::Result<Self> {
        let producer = kafka_props::client_config(
            brokers,
            &[
                ("linger.ms", "5"),
                ("queue.buffering.max.messages", "100000"),
                ("message.timeout.ms", "300000"),
            ],
            properties,
            &[],
        )
        .create_with_context(KafkaContext::new("kafka_upstream"))
        .map_err(|e| anyhow::anyhow!("kafka upstream producer: {e}"))?;
        Ok(Self {
            producer,
            topic: topic.to_string(),
            node_id: node_id.to_string(),
        })
    }

    /// The `publish` event: a client published (the WebSocket `publish` command).
    pub(crate) fn publish_event(
        &self,
        connection: &str,
        topic: &TopicName,
        event: Option<&EventName>,
        data: &Payload,
    ) {
        self.send("publish", connection, Some(topic), event, data.as_bytes());
    }

    fn send(
        &self,
        kind: &str,
        connection: &str,
        topic: Option<&TopicName>,
        event: Option<&EventName>,
        value: &[u8],
    ) {
        let mut headers = OwnedHeaders::new()
            .insert(Header {
                key: "herald-type",
                value: Some(kind),
            })
            .insert(Header {
                key: "herald-connection",
                value: Some(connection),
            })
            .insert(Header {
                key: "herald-node",
                value: Some(self.node_id.as_str()),
            });
        if let Some(topic) = topic {
            headers = headers.insert(Header {
                key: "herald-topic",
                value: Some(topic.as_str()),
            });
        }
        if let Some(event) = event {
            headers = headers.insert(Header {
                key: "herald-event",
                value: Some(event.as_str()),
            });
        }
        let record = FutureRecord::to(&self.topic)
            .key(connection)
            .payload(value)
            .headers(headers);
        match self.producer.send_result(record) {
            // Delivery is librdkafka's job from here; nobody waits for the report.
            Ok(delivery) => drop(delivery),
            Err((e, _)) => {
                metrics::bridge_message(NAME, "dropped");
                tracing::debug!(error = %e, "upstream event dropped");
            }
        }
    }

    fn connection_event(
        &self,
        kind: &str,
        connection: &str,
        transport: &str,
        reason: Option<&str>,
        user: Option<&str>,
    ) {
        let mut value = serde_json::json!({
            "connection": connection, "node": self.node_id, "transport": transport, "ts": now_ms(),
        });
        if let Some(reason) = reason {
            value["reason"] = reason.into();
        }
        if let Some(user) = user {
            value["user"] = user.into();
        }
        self.send(kind, connection, None, None, value.to_string().as_bytes());
    }

    /// Waits up to `timeout` for queued events to be delivered (at shutdown).
    pub(crate) fn flush(&self, timeout: Duration) {
        use rdkafka::producer::Producer as _;
        let _ = self.producer.flush(timeout);
    }
}

impl ConnectionObserver for Upstream {
    fn opened(&self, id: &str, transport: &'static str, user: Option<&str>) {
        self.connection_event("connect", id, transport, None, user);
    }

    fn closed(&self, id: &str, transport: &'static str, reason: &'static str) {
        self.connection_event("disconnect", id, transport, Some(reason), None);
    }
}
