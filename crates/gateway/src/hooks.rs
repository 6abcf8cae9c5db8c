//! HTTP hooks: the application's backend decides who may connect, subscribe, publish and stay
//! connected ([`crate::config::HooksConfig`]).
//!
//! Each hook is one `POST` of a JSON request to its URL through one shared, pooled HTTP
//! client. The answer is a *verdict*: `{"result":"allow"}`, `{"result":"deny","reason":".."}`,
//! or allow with data (`user`, `topics`, `info`, `expires_in`). Anything else — no answer
//! within `hooks.timeout`, a status other than 2xx, a body over [`MAX_ANSWER_BYTES`], JSON
//! that is not a verdict, or `hooks.max_in_flight` requests already waiting — makes the hook
//! *unavailable*, and `hooks.on_unavailable` decides: refuse (503 `hook_unavailable`), or let
//! the token rules decide as if the hook were not configured.
//!
//! The callers are the places where the token rules are applied, one per decision, so that
//! every path that serves a client asks the same way: [`crate::transport::access::admit`]
//! (the connect hook: SSE on the raw socket and through hyper, HTTP/2, TLS; long-poll; the
//! WebSocket handshake), [`crate::transport::may_subscribe`] (the WebSocket `subscribe` command, public history
//! reads), the publish pipeline ([`crate::publish::prepare`]), and the token-expiry branch of
//! the SSE and WebSocket lifecycles (refresh).
//!
//! Metrics: `herald_hook_requests_total{hook,result}` (`allow`, `deny`, `unavailable`,
//! `timeout`, `overloaded`), `herald_hook_duration_seconds{hook}` and
//! `herald_hooks_in_flight`.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::Semaphore;

use crate::auth::Identity;
use crate::config::{HooksConfig, OnUnavailable};
use crate::error::ApiError;
use crate::telemetry::metrics;

/// Largest hook answer read; a larger one makes the hook unavailable.
pub(crate) const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Longest deny reason passed on to the client (longer ones are cut at a character boundary;
/// a WebSocket close reason is cut further, to 120 bytes).
pub(crate) const MAX_REASON_BYTES: usize = 256;

/// Longest user name a connect or refresh answer may give.
const MAX_USER_BYTES: usize = 256;

pub(crate) use crate::config::hooks::Hook;

/// The headers of a client's request that hook requests carry (`hooks.forward_headers`),
/// and the page's `Origin` (sent as the `origin` field, so that a backend authenticating a
/// browser by its cookies can tell another site's page from its own): one word, and no
/// allocation when there are none (a WebSocket connection keeps them).
#[derive(Clone, Debug, Default)]
pub(crate) struct Forwarded(Option<Box<HeaderList>>);

#[derive(Clone, Debug)]
struct HeaderList {
    headers: Vec<(HeaderName, HeaderValue)>,
    origin: Option<String>,
}

/// Who a hook request is about: the client, as the gateway knows it.
#[derive(Debug)]
pub(crate) struct Caller<'a> {
    /// `sse`, `ws` or `poll` (or `http` for the publish API).
    pub transport: &'static str,
    /// The connection's id (unique in the cluster), when it has one.
    pub client: Option<u64>,
    /// The client's address.
    pub remote: IpAddr,
    /// Its identity: token claims, the user and `info` a connect hook gave.
    pub who: &'a Identity,
    /// The request headers forwarded.
    pub headers: &'a Forwarded,
}

/// What a connect (or refresh) hook allowed, beyond the connection itself.
#[derive(Debug, Default)]
pub(crate) struct Grant {
    /// The user the connection acts for, replacing the token's `sub`.
    pub user: Option<String>,
    /// Topics to subscribe the connection to on the application's behalf.
    pub topics: Vec<String>,
    /// Data about the connection, kept with it and sent with its later hook requests.
    pub info: Option<Arc<String>>,
    /// How long the connection's credentials last from now (then the refresh hook is asked).
    pub expires_in: Option<Duration>,
    /// The connect hook was unavailable and `hooks.on_unavailable = "allow"` let the client
    /// in: it gets only what its token and the public prefixes allow, never the open default
    /// of a gateway without token keys (the application could not vouch for it).
    pub unvouched: bool,
}

impl Grant {
    /// Applies the grant's user, info and lifetime to `who`.
    pub(crate) fn apply(&self, who: &mut Identity) {
        if let Some(user) = &self.user {
            who.sub = Some(user.clone());
        }
        if let Some(info) = &self.info {
            who.info = Some(info.clone());
        }
        if let Some(left) = self.expires_in {
            who.expires = Some(std::time::SystemTime::now() + left);
        }
        if self.unvouched {
            who.unvouched = true;
        }
    }
}

/// The answer of the backend, as it may write it.
#[derive(Debug, Deserialize)]
struct Answer {
    result: Verdict,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    topics: Vec<String>,
    #[serde(default)]
    info: Option<Box<RawValue>>,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Verdict {
    Allow,
    Deny,
}

/// What the subscribe hook said of a set of topics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubscribeVerdict {
    /// The application allowed them.
    Allowed,
    /// The hook is not configured: the token rules decide.
    Rules,
    /// The hook was unavailable under `hooks.on_unavailable = "allow"`: only what the
    /// client's token and the public prefixes allow, never the open default of a gateway
    /// without token keys.
    Unvouched,
}

/// Whether a hook was asked, and what it came to.
enum Asked {
    /// The hook is not configured.
    NotConfigured,
    /// It answered: allowed (with its answer) or refused.
    Answered(Result<Answer, ApiError>),
    /// It was unavailable, and `hooks.on_unavailable = "allow"` lets the token rules decide.
    Unavailable,
}

/// What asking a hook came to.
enum Outcome {
    Allowed(Answer),
    Denied(String),
    /// Not asked, or no usable answer: `hooks.on_unavailable` decides.
    Unavailable,
}

/// The hooks of a gateway: the URLs, the shared HTTP client and the bound on requests in
/// flight. Without any URL configured nothing is built and every check is a no-op.
#[derive(Debug)]
pub(crate) struct Hooks(Option<Inner>);

#[derive(Debug)]
struct Inner {
    client: reqwest::Client,
    urls: [Option<reqwest::Url>; 4],
    timeout: Duration,
    permits: Arc<Semaphore>,
    /// `hooks.max_in_flight`.
    max_in_flight: usize,
    on_unavailable: OnUnavailable,
    forward: Box<[HeaderName]>,
    /// When each hook's failure was last logged at `warn` (ms after `started`, 0: never).
    warned: [AtomicU64; 4],
    started: Instant,
}

/// Most of a batch's messages put to the publish hook at once ([`Hooks::batch_window`]).
pub(crate) const MAX_BATCH_WINDOW: usize = 16;

/// Least time between two `warn` lines about the same hook's failures.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// TLS for the hooks' client (rustls with ring, as the public listener; HTTP/1.1). With an
/// `https://` hook, the backend's certificate is checked (chain and name) against the system's
/// trust store (`/etc/ssl/certs`, or `SSL_CERT_FILE` / `SSL_CERT_DIR`) and the CA
/// certificates of `hooks.ca_file`. Without one, no certificate is trusted (reqwest builds its
/// TLS either way, and no `https://` request can come from plain URLs with redirects off).
fn client_tls(config: &HooksConfig) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    if config.any_https() {
        if let Some(path) = &config.ca_file {
            let certs = crate::server::tls::read_certificates(path)
                .map_err(|e| anyhow::anyhow!("hooks.ca_file: {e:#}"))?;
            for (n, cert) in certs.into_iter().enumerate() {
                roots.add(cert).map_err(|e| {
                    anyhow::anyhow!(
                        "hooks.ca_file: certificate {} in {} cannot be parsed ({e})",
                        n + 1,
                        path.display()
                    )
                })?;
            }
        }
        // Unreadable system certificates are skipped, as the system's own clients do.
        let system = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(system.certs);
        if let Some(e) = system.errors.first() {
            // A wrong SSL_CERT_FILE or SSL_CERT_DIR replaces the system's paths.
            tracing::warn!(error = %e, "hooks: the system's CA certificates were not all read");
        }
        anyhow::ensure!(
            !roots.is_empty(),
            "hooks: an https:// hook needs CA certificates to check it with, and none were \
             read from the system{}: install ca-certificates, or set hooks.ca_file",
            system
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("hooks: TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

impl Hooks {
    /// The hooks `config` names (validated: [`HooksConfig::validate`]). An `https://` hook's
    /// certificate is checked against the system's trust store and `hooks.ca_file`, both read
    /// here: an unreadable file, or no CA certificate in either, is an error.
    pub(crate) fn from_config(config: &HooksConfig) -> anyhow::Result<Self> {
        if !config.any() {
            return Ok(Self(None));
        }
        let url = |u: &Option<String>| u.as_deref().and_then(|u| reqwest::Url::parse(u).ok());
        let client = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .tls_backend_preconfigured(client_tls(config)?)
            .build()
            .context("hooks: the HTTP client")?;
        Ok(Self(Some(Inner {
            client,
            urls: [
                url(&config.connect_url),
                url(&config.subscribe_url),
                url(&config.publish_url),
                url(&config.refresh_url),
            ],
            timeout: config.timeout,
            permits: Arc::new(Semaphore::new(config.max_in_flight)),
            max_in_flight: config.max_in_flight,
            on_unavailable: config.on_unavailable,
            forward: config
                .forward_headers
                .iter()
                .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok())
                .collect(),
            warned: Default::default(),
            started: Instant::now(),
        })))
    }

    /// How many of a batch's messages may be put to the publish hook at once: at most
    /// [`MAX_BATCH_WINDOW`], and at most a sixteenth of `hooks.max_in_flight` (at least one), so
    /// that one batch neither finds its own requests refused as overloaded nor takes the
    /// permits other clients' hooks need.
    pub(crate) fn batch_window(&self) -> usize {
        self.0.as_ref().map_or(1, |i| {
            (i.max_in_flight / MAX_BATCH_WINDOW).clamp(1, MAX_BATCH_WINDOW)
        })
    }

    /// Whether `hook` is configured.
    pub(crate) fn has(&self, hook: Hook) -> bool {
        self.0
            .as_ref()
            .is_some_and(|i| i.urls[hook as usize].is_some())
    }

    /// The headers of `headers` that hook requests carry; nothing when no hook is configured.
    pub(crate) fn forwarded(&self, headers: &HeaderMap) -> Forwarded {
        let Some(inner) = &self.0 else {
            return Forwarded::default();
        };
        let found: Vec<_> = inner
            .forward
            .iter()
            .flat_map(|name| {
                headers
                    .get_all(name)
                    .iter()
                    .map(|v| (name.clone(), v.clone()))
            })
            .collect();
        let origin = headers
            .get(axum::http::header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Forwarded((!found.is_empty() || origin.is_some()).then(|| {
            Box::new(HeaderList {
                headers: found,
                origin,
            })
        }))
    }

    /// Asks the connect hook about a client that asked for `topics`: `Ok(None)` when the
    /// token rules decide (no hook, or it is unavailable and `on_unavailable = "allow"`),
    /// `Ok(Some(grant))` when the application allowed, else the refusal to answer.
    pub(crate) async fn connect(
        &self,
        caller: &Caller<'_>,
        topics: &[&str],
    ) -> Result<Option<Grant>, ApiError> {
        let body = serde_json::json!({ "topics": topics });
        match self.ask(Hook::Connect, caller, body).await {
            Asked::NotConfigured => Ok(None),
            Asked::Unavailable => Ok(Some(Grant {
                unvouched: true,
                ..Grant::default()
            })),
            Asked::Answered(answer) => grant(Hook::Connect, answer).map(Some),
        }
    }

    /// Asks the subscribe hook about `topics` (all or nothing; a prefix pattern among them
    /// is listed in `patterns` too, and an allow covers every topic it matches): what it
    /// decided, or the refusal.
    pub(crate) async fn subscribe(
        &self,
        caller: &Caller<'_>,
        topics: &[&str],
    ) -> Result<SubscribeVerdict, ApiError> {
        let patterns: Vec<&str> = topics
            .iter()
            .copied()
            .filter(|t| t.ends_with('*'))
            .collect();
        let body = serde_json::json!({ "topics": topics, "patterns": patterns });
        match self.ask(Hook::Subscribe, caller, body).await {
            Asked::NotConfigured => Ok(SubscribeVerdict::Rules),
            Asked::Unavailable => Ok(SubscribeVerdict::Unvouched),
            Asked::Answered(answer) => answer.map(|_| SubscribeVerdict::Allowed),
        }
    }

    /// Asks the publish hook about a message: `Ok(true)` when the application allowed it,
    /// `Ok(false)` when the token rules decide, else the refusal.
    pub(crate) async fn publish(
        &self,
        caller: &Caller<'_>,
        topic: &str,
        event: Option<&str>,
        data: &RawValue,
    ) -> Result<bool, ApiError> {
        let body = serde_json::json!({ "topic": topic, "event": event, "data": data });
        match self.ask(Hook::Publish, caller, body).await {
            // Publishing has no open default: the token's claim or an API key decides.
            Asked::NotConfigured | Asked::Unavailable => Ok(false),
            Asked::Answered(answer) => answer.map(|_| true),
        }
    }

    /// Asks the refresh hook whether an expiring connection may go on: `Ok(Some(grant))`
    /// with its new lifetime (`expires_in`; a grant without one is a refusal), `Ok(None)`
    /// when the token rules decide (no hook, or it is unavailable under either policy: the
    /// credentials have expired), else the application's refusal.
    pub(crate) async fn refresh(&self, caller: &Caller<'_>) -> Result<Option<Grant>, ApiError> {
        let answer = match self.ask(Hook::Refresh, caller, serde_json::json!({})).await {
            // Unavailable: whatever the policy, the credentials have expired.
            Asked::NotConfigured | Asked::Unavailable => return Ok(None),
            Asked::Answered(Err(e)) if e.code() == "hook_unavailable" => return Ok(None),
            Asked::Answered(answer) => answer,
        };
        let grant = grant(Hook::Refresh, answer)?;
        if grant.expires_in.is_none() {
            return Err(denied(
                "the refresh hook allowed without expires_in".to_string(),
            ));
        }
        Ok(Some(grant))
    }

    /// Asks `hook` (when configured) with `body` plus what the caller is: the answer when
    /// it allowed; a refusal (denied, or unavailable under `on_unavailable = "deny"`) comes
    /// back as the error.
    async fn ask(&self, hook: Hook, caller: &Caller<'_>, mut body: serde_json::Value) -> Asked {
        let Some(url) = self
            .0
            .as_ref()
            .and_then(|inner| inner.urls[hook as usize].as_ref().map(|url| (inner, url)))
        else {
            return Asked::NotConfigured;
        };
        let (inner, url) = url;
        let fields = body.as_object_mut().expect("a JSON object");
        fields.insert("hook".into(), hook.as_str().into());
        fields.insert("transport".into(), caller.transport.into());
        fields.insert(
            "client".into(),
            caller.client.map(|id| id.to_string()).into(),
        );
        fields.insert("remote_addr".into(), caller.remote.to_string().into());
        fields.insert(
            "origin".into(),
            caller
                .headers
                .0
                .as_ref()
                .and_then(|h| h.origin.clone())
                .into(),
        );
        fields.insert("user".into(), caller.who.sub.clone().into());
        fields.insert("token".into(), caller.who.token_claims());
        if let Some(info) = &caller.who.info {
            fields.insert(
                "info".into(),
                serde_json::from_str(info).unwrap_or_default(),
            );
        }
        match inner.call(hook, url, caller.headers, &body).await {
            Outcome::Allowed(answer) => Asked::Answered(Ok(answer)),
            Outcome::Denied(reason) => Asked::Answered(Err(denied(reason))),
            Outcome::Unavailable => match inner.on_unavailable {
                OnUnavailable::Allow => Asked::Unavailable,
                OnUnavailable::Deny => Asked::Answered(Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "hook_unavailable",
                    format!(
                        "the application's {} hook did not answer; try again later",
                        hook.as_str()
                    ),
                ))),
            },
        }
    }
}

/// Turns an allowing answer into a grant (bounded), or a refusal.
fn grant(hook: Hook, answer: Result<Answer, ApiError>) -> Result<Grant, ApiError> {
    let answer = answer?;
    if let Some(user) = &answer.user
        && (user.is_empty() || user.len() > MAX_USER_BYTES)
    {
        tracing::warn!(
            hook = hook.as_str(),
            len = user.len(),
            "hook answered a user name that is empty or over 256 bytes; ignored"
        );
    }
    Ok(Grant {
        user: answer
            .user
            .filter(|u| !u.is_empty() && u.len() <= MAX_USER_BYTES),
        topics: if hook == Hook::Connect {
            answer.topics
        } else {
            Vec::new()
        },
        info: answer.info.map(|i| Arc::new(i.get().to_owned())),
        expires_in: answer
            .expires_in
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(s.min(10 * 365 * 86_400))),
        unvouched: false,
    })
}

/// The refusal a client sees when the application denied: 403 `forbidden`, as a refusal by
/// the token rules (clients already treat it as final), with the application's reason.
fn denied(reason: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", reason)
}

/// `reason` cut to fit a WebSocket close frame (120 bytes), at a character boundary.
pub(crate) fn close_reason(reason: &str) -> String {
    let mut end = reason.len().min(120);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_string()
}

/// Cuts `reason` to [`MAX_REASON_BYTES`] at a character boundary; an empty one is named.
fn bounded_reason(reason: Option<String>) -> String {
    let mut reason = reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "denied by the application".to_string());
    if reason.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// A failed request's causes, innermost last ("error sending request: client error
/// (Connect): invalid peer certificate: UnknownIssuer"), without the URL (logged beside it).
fn failure(e: reqwest::Error) -> String {
    format!("{:#}", anyhow::Error::new(e.without_url()))
}

impl Inner {
    /// One hook request, bounded in time, size and concurrency, counted.
    async fn call(
        &self,
        hook: Hook,
        url: &reqwest::Url,
        headers: &Forwarded,
        body: &serde_json::Value,
    ) -> Outcome {
        let Ok(_permit) = self.permits.clone().try_acquire_owned() else {
            metrics::hook_request(hook.as_str(), "overloaded");
            tracing::debug!(
                hook = hook.as_str(),
                "hook not called: hooks.max_in_flight reached"
            );
            return Outcome::Unavailable;
        };
        let in_flight = metrics::hooks_in_flight();
        in_flight.increment(1.0);
        let started = Instant::now();
        let mut request = self
            .client
            .post(url.clone())
            .header("content-type", "application/json")
            .body(body.to_string());
        for (name, value) in headers.0.iter().flat_map(|h| h.headers.iter()) {
            request = request.header(name, value);
        }
        let answer = tokio::time::timeout(self.timeout, async {
            let mut response = request.send().await.map_err(failure)?;
            if !response.status().is_success() {
                return Err(format!("status {}", response.status()));
            }
            if response
                .content_length()
                .is_some_and(|l| l > MAX_ANSWER_BYTES as u64)
            {
                return Err("answer over 64 KiB".to_string());
            }
            let mut bytes = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(failure)? {
                if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err("answer over 64 KiB".to_string());
                }
                bytes.extend_from_slice(&chunk);
            }
            serde_json::from_slice::<Answer>(&bytes).map_err(|e| format!("not a verdict: {e}"))
        })
        .await;
        in_flight.decrement(1.0);
        metrics::hook_duration(hook.as_str(), started.elapsed());
        let (result, outcome) = match answer {
            Ok(Ok(answer)) if answer.result == Verdict::Allow => {
                ("allow", Outcome::Allowed(answer))
            }
            Ok(Ok(answer)) => ("deny", Outcome::Denied(bounded_reason(answer.reason))),
            Ok(Err(why)) => {
                self.log_failure(hook, url, &why);
                ("unavailable", Outcome::Unavailable)
            }
            Err(_) => {
                let why = format!("no answer within {:?}", self.timeout);
                self.log_failure(hook, url, &why);
                ("timeout", Outcome::Unavailable)
            }
        };
        metrics::hook_request(hook.as_str(), result);
        outcome
    }

    /// Logs a failed hook request: at `warn` at most once every [`WARN_EVERY`] per hook (a
    /// backend that is down would otherwise log every client's request), else at `debug`.
    /// The URL's password is never logged.
    fn log_failure(&self, hook: Hook, url: &reqwest::Url, why: &str) {
        let url = crate::config::secrets::redact_url(url.as_str());
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = &self.warned[hook as usize];
        let previous = last.load(Ordering::Relaxed);
        let due = previous == 0 || now.saturating_sub(previous) >= WARN_EVERY.as_millis() as u64;
        if due
            && last
                .compare_exchange(previous, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(hook = hook.as_str(), %url, error = %why, "hook unavailable (more failures of it in the next 10 s are logged at debug; see herald_hook_requests_total)");
        } else {
            tracing::debug!(hook = hook.as_str(), %url, error = %why, "hook unavailable");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_reasons_are_bounded() {
        let a: Answer = serde_json::from_str(
            r#"{"result":"allow","user":"u1","topics":["a"],"info":{"name":"Ann"},"extra":1}"#,
        )
        .unwrap();
        let g = grant(Hook::Connect, Ok(a)).unwrap();
        assert_eq!(g.user.as_deref(), Some("u1"));
        assert_eq!(g.topics, ["a"]);
        assert_eq!(g.info.unwrap().as_str(), r#"{"name":"Ann"}"#);
        assert!(serde_json::from_str::<Answer>(r#"{"result":"maybe"}"#).is_err());
        assert!(serde_json::from_str::<Answer>(r#"{}"#).is_err());
        assert_eq!(bounded_reason(None), "denied by the application");
        let long = "é".repeat(200);
        let cut = bounded_reason(Some(long));
        assert!(cut.len() <= MAX_REASON_BYTES && cut.chars().all(|c| c == 'é'));
    }

    /// The client builds with its own TLS (ring), no process-wide crypto provider installed:
    /// reqwest would panic building one without.
    #[test]
    fn the_client_builds_for_plain_and_https_hooks_and_sizes_a_batch_by_max_in_flight() {
        let mut config = HooksConfig {
            connect_url: Some("http://127.0.0.1:9/connect".into()),
            ..HooksConfig::default()
        };
        let hooks = Hooks::from_config(&config).unwrap();
        assert_eq!(hooks.batch_window(), MAX_BATCH_WINDOW, "1000 in flight");
        config.publish_url = Some("https://127.0.0.1:9/publish".into());
        config.ca_file = Some(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls/ca.pem"),
        );
        for (in_flight, window) in [(1, 1), (4, 1), (64, 4), (100, 6), (100_000, 16)] {
            config.max_in_flight = in_flight;
            assert_eq!(Hooks::from_config(&config).unwrap().batch_window(), window);
        }
        config.ca_file = Some("/nonexistent/ca.pem".into());
        let e = Hooks::from_config(&config).unwrap_err().to_string();
        assert!(
            e.starts_with("hooks.ca_file: cannot read certificates"),
            "{e}"
        );
    }

    #[test]
    fn no_hook_configured_builds_nothing() {
        let hooks = Hooks::from_config(&HooksConfig::default()).unwrap();
        assert!(!hooks.has(Hook::Connect));
        let mut headers = HeaderMap::new();
        headers.insert("cookie", HeaderValue::from_static("s=1"));
        assert!(hooks.forwarded(&headers).0.is_none());
    }
}
