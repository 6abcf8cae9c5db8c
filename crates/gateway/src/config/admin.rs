//! Access to the admin listener: credentials, which routes stay open, and the rule that a
//! listener others can reach is never left open by accident.

use std::net::SocketAddr;

use anyhow::{bail, ensure};
use serde::{Deserialize, Serialize};

/// Shortest admin API key accepted.
pub const MIN_KEY_LEN: usize = 16;

/// Access to the admin listener (publish API, topic and cluster stats, `/metrics`,
/// `/healthz`, `/readyz`). With keys set, every admin route but `/healthz`, `/readyz` and
/// (unless `public_metrics` is off) `/metrics` needs one. A listener that is not on a loopback
/// address (as in a container) must have keys, or Herald refuses to start, unless `insecure`
/// is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Keys that open the admin API, sent as `x-api-key: KEY` or `Authorization: Bearer KEY`;
    /// at least 16 visible ASCII characters each. Prefer the `HERALD_ADMIN_API_KEYS`
    /// environment variable to keeping them in a file; they are never logged or printed.
    #[serde(skip_serializing)]
    pub api_keys: Vec<String>,
    /// Serve `/metrics` without credentials (Prometheus scrapers often have none). Off:
    /// `/metrics` needs a key like the rest of the admin API.
    pub public_metrics: bool,
    /// Allow an admin listener on a non-loopback address without keys. Only for a network
    /// where every peer that can reach the listener may publish and read stats.
    pub insecure: bool,
    /// Browser origins (`https://ops.example.com`) whose pages may call the admin API besides
    /// the listener's own (the console). A request from any other page (`Origin` set and
    /// neither the listener's own nor listed here) is refused with 403 `origin_not_allowed`,
    /// so a web page an operator visits cannot publish or disconnect users through the
    /// operator's browser. Bound: at most 64 entries.
    pub allowed_origins: Vec<String>,
    /// Host names the listener answers to besides IP addresses and `localhost`, while it has
    /// no keys: a request naming another host (`Host: rebind.evil.example`, a DNS rebinding
    /// page) is refused with 403 `host_not_allowed`. With keys set every host is answered
    /// (the key is the protection). Bound: at most 64 entries.
    pub allowed_hosts: Vec<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            api_keys: Vec::new(),
            public_metrics: true,
            insecure: false,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
        }
    }
}

impl AdminConfig {
    /// Whether requests must carry a key.
    pub fn requires_credentials(&self) -> bool {
        !self.api_keys.is_empty()
    }

    /// Checks the keys, and that an admin listener at `admin_listen` is not left open to
    /// other hosts.
    pub fn validate(&self, admin_listen: SocketAddr) -> anyhow::Result<()> {
        ensure!(
            self.api_keys
                .iter()
                .all(|k| k.len() >= MIN_KEY_LEN && k.bytes().all(|b| b.is_ascii_graphic())),
            "admin.api_keys entries must be at least {MIN_KEY_LEN} visible ASCII characters (no spaces)"
        );
        ensure!(
            self.allowed_origins.len() <= 64 && self.allowed_hosts.len() <= 64,
            "admin.allowed_origins and admin.allowed_hosts take at most 64 entries each"
        );
        ensure!(
            self.allowed_origins
                .iter()
                .all(|o| o.starts_with("http://") || o.starts_with("https://")),
            "admin.allowed_origins entries are origins: scheme://host[:port], e.g. https://ops.example.com"
        );
        ensure!(
            self.allowed_hosts
                .iter()
                .all(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic() && b != b'/')),
            "admin.allowed_hosts entries are host names (with a port or not), e.g. herald-admin.internal"
        );
        if !admin_listen.ip().to_canonical().is_loopback()
            && !self.requires_credentials()
            && !self.insecure
        {
            bail!(
                "the admin listener {admin_listen} is not on a loopback address, so it needs credentials: \
                 set admin.api_keys (HERALD_ADMIN_API_KEYS or --admin-api-keys), or, if only trusted peers \
                 can reach it, admin.insecure = true (HERALD_ADMIN_INSECURE=true or --admin-insecure)"
            );
        }
        Ok(())
    }
}

/// Command-line flags of [`AdminConfig`], each with its `HERALD_*` environment twin.
#[derive(Debug, Default, clap::Args)]
pub struct AdminArgs {
    /// Admin API keys, comma-separated (use the environment variable; never logged).
    #[arg(
        long,
        env = "HERALD_ADMIN_API_KEYS",
        value_name = "KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub admin_api_keys: Option<Vec<String>>,
    /// Serve /metrics without admin credentials.
    #[arg(long, env = "HERALD_ADMIN_PUBLIC_METRICS", value_name = "BOOL")]
    pub admin_public_metrics: Option<bool>,
    /// Allow a non-loopback admin listener without credentials (trusted networks only).
    #[arg(long, env = "HERALD_ADMIN_INSECURE", num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub admin_insecure: Option<bool>,
}

impl AdminArgs {
    /// Overlays the flags that were given on `config`.
    pub fn apply(&self, config: &mut AdminConfig) {
        if let Some(v) = &self.admin_api_keys {
            config.api_keys = v.iter().filter(|k| !k.is_empty()).cloned().collect();
        }
        if let Some(v) = self.admin_public_metrics {
            config.public_metrics = v;
        }
        if let Some(v) = self.admin_insecure {
            config.insecure = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_needs_nothing_other_addresses_need_keys_or_insecure() {
        let open = AdminConfig::default();
        open.validate(addr("127.0.0.1:9090")).unwrap();
        open.validate(addr("[::1]:9090")).unwrap();
        open.validate(addr("[::ffff:127.0.0.1]:9090")).unwrap();
        for public in ["0.0.0.0:9090", "[::]:9090", "10.1.2.3:9090"] {
            let err = open.validate(addr(public)).unwrap_err().to_string();
            assert!(err.contains("HERALD_ADMIN_API_KEYS"), "{err}");
        }
        let keyed = AdminConfig {
            api_keys: vec!["0123456789abcdef".into()],
            ..AdminConfig::default()
        };
        keyed.validate(addr("0.0.0.0:9090")).unwrap();
        let insecure = AdminConfig {
            insecure: true,
            ..AdminConfig::default()
        };
        insecure.validate(addr("0.0.0.0:9090")).unwrap();
    }

    #[test]
    fn short_or_blank_keys_are_refused() {
        for bad in ["short", "0123456789 abcdef", "0123456789abcdé"] {
            let config = AdminConfig {
                api_keys: vec![bad.into()],
                ..AdminConfig::default()
            };
            let err = config
                .validate(addr("127.0.0.1:9090"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("admin.api_keys"), "{err}");
        }
    }
}
