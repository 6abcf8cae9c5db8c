//! HTTP hooks: the application's backend decides who may connect, subscribe, publish and stay
//! connected (`crate::hooks` calls them; README "HTTP hooks" and docs/protocol.md say what
//! the backend and the clients see).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, ensure};
use serde::{Deserialize, Serialize};

/// Most header names `hooks.forward_headers` may list.
pub const MAX_FORWARD_HEADERS: usize = 16;

/// Headers Herald sets itself on a hook request, or that describe a connection rather than a
/// request: never forwarded.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "expect",
];

/// HTTP hooks to the application's backend. Each hook is a URL Herald `POST`s a JSON request
/// to, and whose JSON answer allows (`{"result":"allow"}`), denies (`{"result":"deny",
/// "reason":"..."}`, the reason shown to the client) or, for `connect`, allows with data
/// (`"user"`, `"topics"`, `"info"`). A hook with no URL is not called, and the token rules
/// (`[auth]`) decide as they do without hooks. A hook that does not answer in time, answers
/// with a status other than 2xx, a body over 64 KiB or not one of those JSON objects, or is
/// not asked because `max_in_flight` requests are already waiting, is unavailable:
/// `on_unavailable` decides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HooksConfig {
    /// Called before a client connection is accepted (an SSE stream, a WebSocket upgrade, a
    /// long-poll request). Allow-with-data may name the user (it replaces the token's `sub`),
    /// topics the connection is subscribed to on the application's behalf, and `info` kept
    /// with the connection and sent with its later hook requests. `http://` or `https://`
    /// (the server's certificate checked against the system's trust store and `ca_file`);
    /// the password of a `user:password@` URL is never printed.
    #[serde(serialize_with = "super::secrets::serialize_redacted_url")]
    pub connect_url: Option<String>,
    /// Called when a client subscribes (the topics of an SSE or long-poll request, a WebSocket
    /// `subscribe`): its answer replaces the token rules for those topics.
    #[serde(serialize_with = "super::secrets::serialize_redacted_url")]
    pub subscribe_url: Option<String>,
    /// Called when a client publishes (WebSocket `publish`, or `POST /v1/publish` on the
    /// public listener with a token or, with this hook set, no credentials at all): its
    /// answer replaces the token's `publish` claim. API keys and the admin listener are not
    /// asked about.
    #[serde(serialize_with = "super::secrets::serialize_redacted_url")]
    pub publish_url: Option<String>,
    /// Called when a WebSocket or SSE connection's credentials expire (the token's `exp`, or
    /// the `expires_in` a connect or refresh answer gave): allow with `"expires_in"` (seconds)
    /// extends the connection, anything else ends it as an expired token does.
    #[serde(serialize_with = "super::secrets::serialize_redacted_url")]
    pub refresh_url: Option<String>,
    /// Longest wait for a hook's answer, connection and body included.
    /// Bound: 1ms to 60s.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Hook requests waiting for an answer at once, all hooks together; past it a hook is not
    /// called and counts as unavailable (`herald_hook_requests_total{result="overloaded"}`).
    /// Bound: 1 to 100000.
    pub max_in_flight: usize,
    /// What an unavailable hook means: `deny` (the client gets 503 `hook_unavailable` or, on
    /// an open WebSocket, an error frame with that code) or `allow` (the token rules decide,
    /// as without the hook).
    pub on_unavailable: OnUnavailable,
    /// What a prefix pattern (`rooms.*`) is where the subscribe hook decides its namespace:
    /// `refuse` (403 `pattern_not_allowed`: a hook that allows `rooms.` and denies
    /// `rooms.secret` would otherwise be asked about `rooms.*` as one name, allow it, and
    /// let it deliver `rooms.secret`), or `ask` (the hook is asked, the pattern listed in the
    /// request's `patterns` too, and its allow covers every topic the pattern matches).
    pub subscribe_patterns: SubscribePatterns,
    /// Headers of the client's request copied onto hook requests (names, case-insensitive),
    /// e.g. `authorization` and `cookie` for a backend that authenticates the client itself.
    /// A WebSocket connection's hook requests carry those of its upgrade request.
    /// Bound: at most 16; not `host`, `content-type`, `content-length` or hop-by-hop headers.
    pub forward_headers: Vec<String>,
    /// PEM file of CA certificates trusted for `https://` hook URLs besides the system's
    /// trust store (a backend with a certificate from a private CA). Read at start-up.
    /// Bound: only with an `https://` hook URL.
    pub ca_file: Option<PathBuf>,
}

/// What a prefix pattern is where the subscribe hook decides ([`HooksConfig::subscribe_patterns`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum SubscribePatterns {
    /// Refused: 403 `pattern_not_allowed`.
    #[default]
    Refuse,
    /// Asked about as a pattern; an allow covers every topic it matches.
    Ask,
}

/// What an unavailable hook means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum OnUnavailable {
    /// Refuse: 503 `hook_unavailable`.
    #[default]
    Deny,
    /// Let the token rules decide, as if the hook were not configured.
    Allow,
}

impl Default for HooksConfig {
    fn default() -> Self {
        Self {
            connect_url: None,
            subscribe_url: None,
            publish_url: None,
            refresh_url: None,
            timeout: Duration::from_secs(1),
            max_in_flight: 1000,
            on_unavailable: OnUnavailable::Deny,
            subscribe_patterns: SubscribePatterns::Refuse,
            forward_headers: vec!["authorization".into(), "cookie".into()],
            ca_file: None,
        }
    }
}

impl HooksConfig {
    /// Whether any hook is configured.
    pub fn any(&self) -> bool {
        self.urls().any(|(_, url)| url.is_some())
    }

    /// Whether hook requests carry the client's cookies, which a browser attaches to a
    /// request from any site's page (`forward_headers` lists `cookie` and a hook is set).
    pub fn forwards_cookies(&self) -> bool {
        self.any()
            && self
                .forward_headers
                .iter()
                .any(|h| h.eq_ignore_ascii_case("cookie"))
    }

    /// Each hook's key and URL.
    pub fn urls(&self) -> impl Iterator<Item = (&'static str, Option<&str>)> {
        [
            ("hooks.connect_url", self.connect_url.as_deref()),
            ("hooks.subscribe_url", self.subscribe_url.as_deref()),
            ("hooks.publish_url", self.publish_url.as_deref()),
            ("hooks.refresh_url", self.refresh_url.as_deref()),
        ]
        .into_iter()
    }

    /// Whether any hook URL is `https://`.
    pub fn any_https(&self) -> bool {
        self.urls()
            .filter_map(|(_, url)| url)
            .any(|url| reqwest::Url::parse(url).is_ok_and(|u| u.scheme() == "https"))
    }

    /// Checks every URL (absolute `http://` or `https://` with a host), the bounds and the
    /// header names.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (key, url) in self.urls() {
            let Some(url) = url else { continue };
            let parsed = match reqwest::Url::parse(url) {
                Ok(u) => u,
                Err(e) => bail!(
                    "{key} {:?} is not a URL: {e}",
                    super::secrets::redact_url(url)
                ),
            };
            ensure!(
                matches!(parsed.scheme(), "http" | "https"),
                "{key} must be an http:// or https:// URL, not {}://",
                parsed.scheme()
            );
            ensure!(
                parsed.host_str().is_some_and(|h| !h.is_empty()),
                "{key} needs a host"
            );
        }
        ensure!(
            self.ca_file.is_none() || self.any_https(),
            "hooks.ca_file is set but no hook URL is https://"
        );
        ensure!(
            self.timeout >= Duration::from_millis(1) && self.timeout <= Duration::from_secs(60),
            "hooks.timeout must be within 1ms..=60s"
        );
        ensure!(
            (1..=100_000).contains(&self.max_in_flight),
            "hooks.max_in_flight must be within 1..=100000"
        );
        ensure!(
            self.forward_headers.len() <= MAX_FORWARD_HEADERS,
            "hooks.forward_headers must list at most {MAX_FORWARD_HEADERS} headers"
        );
        for name in &self.forward_headers {
            ensure!(
                axum::http::HeaderName::from_bytes(name.as_bytes()).is_ok(),
                "hooks.forward_headers: {name:?} is not a header name"
            );
            ensure!(
                !RESERVED_HEADERS
                    .iter()
                    .any(|r| r.eq_ignore_ascii_case(name)),
                "hooks.forward_headers: {name:?} is set by Herald or is hop-by-hop; it is not forwarded"
            );
        }
        Ok(())
    }
}

/// A hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    /// A client connects.
    Connect,
    /// A client subscribes.
    Subscribe,
    /// A client publishes.
    Publish,
    /// A connection's credentials expire.
    Refresh,
}

impl Hook {
    /// The name: the `hook` label and the request's `hook` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Subscribe => "subscribe",
            Self::Publish => "publish",
            Self::Refresh => "refresh",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_headers_are_checked_with_their_key() {
        let mut hooks = HooksConfig::default();
        hooks.validate().unwrap();
        assert!(!hooks.any());
        hooks.connect_url = Some("http://127.0.0.1:8000/herald/connect".into());
        hooks.validate().unwrap();
        assert!(hooks.any());
        hooks.subscribe_url = Some("backend/subscribe".into());
        let e = hooks.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("hooks.subscribe_url \"backend/subscribe\" is not a URL"),
            "{e}"
        );
        hooks.subscribe_url = Some("ftp://backend/subscribe".into());
        let e = hooks.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("hooks.subscribe_url must be an http:// or https:// URL, not ftp://"),
            "{e}"
        );
        hooks.subscribe_url = None;
        hooks.ca_file = Some("/etc/herald/hooks-ca.pem".into());
        assert_eq!(
            hooks.validate().unwrap_err().to_string(),
            "hooks.ca_file is set but no hook URL is https://"
        );
        hooks.subscribe_url = Some("https://backend.internal/subscribe".into());
        hooks.validate().unwrap();
        assert!(hooks.any_https());
        hooks.subscribe_url = None;
        hooks.ca_file = None;
        hooks.forward_headers.push("Content-Length".into());
        let e = hooks.validate().unwrap_err().to_string();
        assert!(e.contains("\"Content-Length\" is set by Herald"), "{e}");
        hooks.forward_headers = vec!["bad header".into()];
        assert!(hooks.validate().is_err());
        hooks.forward_headers = vec!["x-session".into()];
        hooks.timeout = Duration::ZERO;
        assert_eq!(
            hooks.validate().unwrap_err().to_string(),
            "hooks.timeout must be within 1ms..=60s"
        );
    }

    #[test]
    fn a_password_in_a_hook_url_is_never_printed() {
        let hooks = HooksConfig {
            publish_url: Some("http://herald:s3cret@10.0.0.5:3000/publish".into()),
            ..HooksConfig::default()
        };
        hooks.validate().unwrap();
        let text = toml::to_string(&hooks).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("10.0.0.5:3000/publish"), "{text}");
        let bad = HooksConfig {
            connect_url: Some("ftp://herald:s3cret@backend/connect".into()),
            ..HooksConfig::default()
        };
        assert!(!bad.validate().unwrap_err().to_string().contains("s3cret"));
    }
}
