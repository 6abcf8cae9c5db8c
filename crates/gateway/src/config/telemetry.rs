//! `[telemetry]`: OpenTelemetry traces of messages, exported over OTLP (docs/operations.md).
//! Off unless an endpoint is set.

use anyhow::ensure;
use serde::{Deserialize, Serialize};

/// OpenTelemetry traces: a publish, its append to the log, and each node's ingest and fan-out
/// of it, exported over OTLP to a collector (or Jaeger, Tempo, ...). With no `otlp_endpoint`
/// (the default) nothing is traced, parsed or exported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Where spans are sent: the collector's base URL, `http://host:4317` for `grpc`,
    /// `http://host:4318` for `http` (Herald adds `/v1/traces`; `https://` with `http` only).
    /// Setting it turns tracing on. `OTEL_EXPORTER_OTLP_ENDPOINT` is read when neither the
    /// file, `HERALD_OTLP_ENDPOINT` nor the flag sets it.
    pub otlp_endpoint: Option<String>,
    /// OTLP transport: `grpc` (protobuf over gRPC) or `http` (protobuf over HTTP).
    pub otlp_protocol: OtlpProtocol,
    /// Share of publishes arriving without a sampled trace context that start a trace of
    /// their own, 0.0 to 1.0. A publish whose `traceparent` is sampled is always traced, one
    /// whose `traceparent` is not sampled never is; 0: Herald starts no trace itself.
    pub trace_sample_ratio: f64,
    /// `service.name` of the spans. `OTEL_SERVICE_NAME` is read when the file does not set
    /// it. Every node's spans also carry its `cluster.node_id` as `service.instance.id`.
    pub service_name: String,
}

/// How spans travel to the collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum OtlpProtocol {
    /// OTLP/gRPC (port 4317 by convention).
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318 by convention).
    Http,
}

/// The default `service_name`.
pub const DEFAULT_SERVICE_NAME: &str = "herald";

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::Grpc,
            trace_sample_ratio: 0.01,
            service_name: DEFAULT_SERVICE_NAME.into(),
        }
    }
}

impl TelemetryConfig {
    /// Whether spans are made and exported.
    pub fn tracing(&self) -> bool {
        self.otlp_endpoint.is_some()
    }

    /// Checks the endpoint, the protocol and the ratio.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            (0.0..=1.0).contains(&self.trace_sample_ratio),
            "telemetry.trace_sample_ratio must be between 0.0 and 1.0"
        );
        ensure!(
            !self.service_name.is_empty() && self.service_name.len() <= 255,
            "telemetry.service_name must be 1 to 255 characters"
        );
        if let Some(endpoint) = &self.otlp_endpoint {
            let https = endpoint.starts_with("https://");
            ensure!(
                endpoint.starts_with("http://") || https,
                "telemetry.otlp_endpoint must be an http:// or https:// URL, e.g. http://127.0.0.1:4317"
            );
            ensure!(
                !(https && self.otlp_protocol == OtlpProtocol::Grpc),
                "telemetry.otlp_endpoint: https:// needs otlp_protocol = \"http\" (OTLP/gRPC is sent \
                 without TLS, to a collector beside the node)"
            );
            ensure!(
                endpoint.len() > "https://".len() && !endpoint.contains(char::is_whitespace),
                "telemetry.otlp_endpoint {endpoint:?} is not a URL"
            );
        }
        Ok(())
    }
}

/// The flags of `[telemetry]`.
#[derive(Debug, clap::Args)]
pub struct TelemetryArgs {
    /// OTLP collector URL (e.g. `http://127.0.0.1:4317`): turns on traces of messages.
    #[arg(long, env = "HERALD_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport: grpc or http.
    #[arg(long, env = "HERALD_OTLP_PROTOCOL", value_name = "PROTOCOL")]
    pub otlp_protocol: Option<OtlpProtocol>,
    /// Share of publishes without a sampled traceparent that are traced (0.0 to 1.0).
    #[arg(long, env = "HERALD_TRACE_SAMPLE_RATIO", value_name = "RATIO")]
    pub trace_sample_ratio: Option<f64>,
}

impl TelemetryArgs {
    /// Overlays the flags that were given on `config`, then the standard OpenTelemetry
    /// variables of `env` where nothing of Herald's set the same thing: the endpoint
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT`) and the service name (`OTEL_SERVICE_NAME`).
    pub fn apply(
        &self,
        config: &mut TelemetryConfig,
        env: impl IntoIterator<Item = (String, String)>,
    ) {
        if let Some(v) = &self.otlp_endpoint {
            config.otlp_endpoint = Some(v.clone());
        }
        if let Some(v) = self.otlp_protocol {
            config.otlp_protocol = v;
        }
        if let Some(v) = self.trace_sample_ratio {
            config.trace_sample_ratio = v;
        }
        for (name, value) in env {
            match name.as_str() {
                "OTEL_EXPORTER_OTLP_ENDPOINT"
                    if config.otlp_endpoint.is_none() && !value.is_empty() =>
                {
                    config.otlp_endpoint = Some(value);
                }
                "OTEL_SERVICE_NAME"
                    if config.service_name == DEFAULT_SERVICE_NAME && !value.is_empty() =>
                {
                    config.service_name = value;
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn no_flags() -> TelemetryArgs {
        TelemetryArgs {
            otlp_endpoint: None,
            otlp_protocol: None,
            trace_sample_ratio: None,
        }
    }

    #[test]
    fn the_standard_variables_fill_in_only_what_herald_s_own_settings_leave_unset() {
        let standard = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_SERVICE_NAME", "push"),
        ]);
        let mut config = TelemetryConfig::default();
        no_flags().apply(&mut config, standard.clone());
        assert_eq!(
            config.otlp_endpoint.as_deref(),
            Some("http://collector:4317")
        );
        assert_eq!(config.service_name, "push");

        let mut config = TelemetryConfig {
            service_name: "from-file".into(),
            ..TelemetryConfig::default()
        };
        let flags = TelemetryArgs {
            otlp_endpoint: Some("http://mine:4318".into()),
            otlp_protocol: Some(OtlpProtocol::Http),
            trace_sample_ratio: Some(1.0),
        };
        flags.apply(&mut config, standard);
        assert_eq!(config.otlp_endpoint.as_deref(), Some("http://mine:4318"));
        assert_eq!(config.service_name, "from-file");
        assert_eq!(config.otlp_protocol, OtlpProtocol::Http);
        assert_eq!(config.trace_sample_ratio, 1.0);
    }

    #[test]
    fn validation_refuses_a_bad_ratio_a_non_url_and_grpc_over_https() {
        let with = |endpoint: &str, protocol, ratio| TelemetryConfig {
            otlp_endpoint: Some(endpoint.into()),
            otlp_protocol: protocol,
            trace_sample_ratio: ratio,
            ..TelemetryConfig::default()
        };
        TelemetryConfig::default().validate().unwrap();
        with("http://127.0.0.1:4317", OtlpProtocol::Grpc, 0.0)
            .validate()
            .unwrap();
        with("https://otlp.example.com", OtlpProtocol::Http, 1.0)
            .validate()
            .unwrap();
        for (bad, why) in [
            (with("http://c:4317", OtlpProtocol::Grpc, 1.5), "ratio"),
            (with("http://c:4317", OtlpProtocol::Grpc, f64::NAN), "ratio"),
            (with("collector:4317", OtlpProtocol::Grpc, 0.1), "URL"),
            (with("https://c:4317", OtlpProtocol::Grpc, 0.1), "https"),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
