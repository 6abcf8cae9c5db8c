//! Shared fixtures of Herald's criterion benchmarks (`cargo bench -p herald-benches`).

use std::sync::Arc;
use std::time::Duration;

use herald_core::{Payload, Topic, TopicConfig, TopicName};

/// A typical small payload: a JSON object of about 100 bytes.
pub fn small_payload() -> Payload {
    Payload::from_value(&serde_json::json!({
        "order": 123456, "status": "shipped", "carrier": "dhl", "eta": "2026-11-23T10:00:00Z"
    }))
}

/// A topic whose live channel holds `capacity` messages.
pub fn topic(name: &str, capacity: usize) -> Arc<Topic> {
    let config = TopicConfig {
        channel_capacity: capacity,
        history_len: 64,
        history_ttl: Duration::from_secs(60),
        log_carried: false,
        lag_policy: None,
        delta: false,
    };
    Arc::new(Topic::new(
        TopicName::new(name).expect("valid name"),
        &config,
    ))
}
