//! `cluster.kafka_properties`: librdkafka properties (security, tuning) applied to every Kafka
//! client Herald makes, their `HERALD_KAFKA_PROPERTIES_*` environment twins, the redaction of
//! secret values, and a client context that remembers the last error librdkafka reported
//! (a refused SASL login, a certificate that does not verify) so `/readyz` can say why.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::bail;

pub(crate) use crate::config::secrets::is_secret;
use parking_lot::Mutex;
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// Properties Herald sets from its own settings; setting them here is refused.
const OWN: [(&str, &str); 2] = [
    ("bootstrap.servers", "cluster.kafka_brokers"),
    ("group.id", "cluster.kafka_group_prefix"),
];

/// Checks every property with librdkafka itself (name known, value acceptable) without
/// making a client. Errors name the property, never a secret value.
pub(crate) fn validate(properties: &BTreeMap<String, String>) -> anyhow::Result<()> {
    for (key, setting) in OWN {
        if properties.contains_key(key) {
            bail!("cluster.kafka_properties must not set {key:?}: use {setting}");
        }
    }
    for (key, value) in properties {
        let mut one = ClientConfig::new();
        one.set(key, value);
        if let Err(e) = one.create_native_config() {
            let why = match &e {
                KafkaError::ClientConfig(_, description, _, _) if !is_secret(key) => {
                    description.clone()
                }
                KafkaError::ClientConfig(code, ..) => format!("{code:?}"),
                other => other.to_string(),
            };
            bail!("cluster.kafka_properties {key:?} is refused by librdkafka: {why}");
        }
    }
    Ok(())
}

/// A client config for `brokers`: Herald's `defaults`, then the user's `properties` (which
/// may override them), then the `fixed` settings Herald's correctness depends on.
pub(crate) fn client_config(
    brokers: &str,
    defaults: &[(&str, &str)],
    properties: &BTreeMap<String, String>,
    fixed: &[(&str, &str)],
) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (key, value) in defaults {
        config.set(*key, *value);
    }
    for (key, value) in properties {
        config.set(key, value);
    }
    for (key, value) in fixed {
        config.set(*key, *value);
    }
    config
}

/// A librdkafka client context that logs librdkafka's errors through `tracing` (each distinct
/// error once at warn level) and remembers the last one.
#[derive(Clone, Debug, Default)]
pub(crate) struct KafkaContext {
    client: &'static str,
    last_error: Arc<Mutex<Option<String>>>,
}

impl KafkaContext {
    /// For the client named `client` in logs.
    pub(crate) fn new(client: &'static str) -> Self {
        Self {
            client,
            last_error: Arc::default(),
        }
    }

    /// The last error librdkafka reported, if any since [`Self::clear`].
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// A context for another client of the same bridge (its producer beside its consumer)
    /// that shares this one's last error: a refused login seen by either explains why the
    /// bridge is not ready.
    pub(crate) fn sharing(&self, client: &'static str) -> Self {
        Self {
            client,
            last_error: self.last_error.clone(),
        }
    }

    /// Keeps `text` as the last error; whether it differs from the one before.
    fn remember(&self, text: &str) -> bool {
        let mut last = self.last_error.lock();
        if last.as_deref() == Some(text) {
            return false;
        }
        *last = Some(text.to_string());
        true
    }

    /// Forgets the last error (the client works again).
    pub(crate) fn clear(&self) {
        self.last_error.lock().take();
    }
}

impl ClientContext for KafkaContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(client = self.client, fac, "librdkafka: {message}");
                // Errors reach the error callback only when the client is polled; the log
                // callback hears of them at once (a refused SASL login, say).
                self.remember(message);
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(client = self.client, fac, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(client = self.client, fac, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(client = self.client, fac, "librdkafka: {message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let text = format!("{error}: {reason}");
        // "All brokers down" follows every failed connection: it must not hide the cause
        // (a refused login, a certificate that does not verify) reported just before.
        // Nor must the transport failure of the connection the broker then closes.
        if matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure)
        ) && self.last_error.lock().is_some()
        {
            tracing::debug!(client = self.client, error = %text, "kafka client error");
            return;
        }
        if self.remember(&text) {
            tracing::warn!(client = self.client, error = %text, "kafka client error");
        }
    }
}

impl ConsumerContext for KafkaContext {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::secrets::from_env;

    #[test]
    fn environment_twins_map_to_property_names() {
        let vars = [
            ("HERALD_KAFKA_PROPERTIES_SASL_PASSWORD", "pw"),
            ("HERALD_KAFKA_PROPERTIES_SECURITY_PROTOCOL", "SASL_SSL"),
            ("HERALD_KAFKA_PROPERTIES_SOME__ODD_NAME", "x"),
            ("HERALD_KAFKA_BROKERS", "h:1"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let props = from_env(vars.into_iter());
        assert_eq!(
            props.into_iter().collect::<Vec<_>>(),
            [
                ("sasl.password".to_string(), "pw".to_string()),
                ("security.protocol".into(), "SASL_SSL".into()),
                ("some_odd.name".into(), "x".into()),
            ]
        );
    }

    #[test]
    fn librdkafka_checks_names_and_values_and_secrets_stay_out_of_errors() {
        let props = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        validate(&props("security.protocol", "SASL_SSL")).unwrap();
        validate(&props("sasl.mechanisms", "SCRAM-SHA-512")).unwrap();
        let e = validate(&props("securty.protocol", "SSL"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("securty.protocol"), "{e}");
        let e = validate(&props("security.protocol", "SASL_TLS"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("security.protocol"), "{e}");
        let e = validate(&props("bootstrap.servers", "h:1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cluster.kafka_brokers"), "{e}");
        let e = validate(&props("sasl.password.typo", "hunter2-secret"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn user_properties_go_between_defaults_and_fixed_settings() {
        let props = BTreeMap::from([
            ("linger.ms".to_string(), "50".to_string()),
            ("enable.idempotence".to_string(), "false".to_string()),
        ]);
        let c = client_config(
            "h:1",
            &[("linger.ms", "5"), ("acks", "all")],
            &props,
            &[("enable.idempotence", "true")],
        );
        assert_eq!(c.get("bootstrap.servers"), Some("h:1"));
        assert_eq!(c.get("linger.ms"), Some("50"));
        assert_eq!(c.get("acks"), Some("all"));
        assert_eq!(c.get("enable.idempotence"), Some("true"));
    }

    #[test]
    fn secret_values_are_redacted() {
        assert!(is_secret("sasl.password"));
        assert!(is_secret("ssl.key.password"));
        assert!(is_secret("sasl.jaas.config"));
        assert!(is_secret("ssl.key.pem"));
        assert!(!is_secret("sasl.username"));
        assert!(!is_secret("ssl.ca.location"));
    }
}
