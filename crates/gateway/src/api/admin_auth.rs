//! Credentials on the admin listener (`admin.api_keys`): every route but `/healthz`,
//! `/readyz` and, when `admin.public_metrics` is on, `/metrics` needs a key, sent as
//! `x-api-key: KEY` or `Authorization: Bearer KEY`. Without keys configured the listener is
//! open, which [`crate::config::AdminConfig::validate`] allows on loopback only (or when told
//! it is insecure).
//!
//! Before the key, the listener refuses what only a web page would send ([`cross_site`]):
//! a foreign `Origin` (403 `origin_not_allowed`), a body that is not JSON or MessagePack
//! on a state-changing route (415 `unsupported_media_type`: a form or a `no-cors` fetch
//! can only send `text/plain`, `application/x-www-form-urlencoded` and
//! `multipart/form-data`), and, while the listener has no keys, a `Host` that is not an
//! address, `localhost` or one of `admin.allowed_hosts` (403 `host_not_allowed`: a DNS
//! rebinding page). The console, served by the listener itself, is its own origin.

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::AppState;
use crate::config::AdminConfig;
use crate::error::ApiError;
use crate::telemetry::metrics;

/// Routes answered without credentials: probes (and, if configured, the metrics scrape).
fn is_open(path: &str, config: &AdminConfig) -> bool {
    matches!(path, "/healthz" | "/readyz") || (path == "/metrics" && config.public_metrics)
}

/// The key a request presents, if any: `x-api-key`, else an `Authorization: Bearer` token.
fn presented(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(key) = headers.get("x-api-key") {
        return Some(key.as_bytes());
    }
    let auth = headers.get(AUTHORIZATION)?.as_bytes();
    let scheme = auth.get(..7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| auth[7..].trim_ascii())
}

/// Compares in time that does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `key` is one of `keys` (every key compared, whatever matches).
fn accepted(keys: &[String], key: &[u8]) -> bool {
    keys.iter()
        .fold(false, |found, k| same(k.as_bytes(), key) | found)
}

/// What a web page in an operator's browser could send and an API client would not: the
/// refusal, or `Ok` when the request may go on to the key check.
pub(crate) fn cross_site(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    config: &AdminConfig,
) -> Result<(), ApiError> {
    // One Host or none (RFC 9112 §3.2: a request with more than one is answered 400): with
    // two, which one a check reads and which one a proxy routed by could differ.
    if headers.get_all(header::HOST).iter().nth(1).is_some() {
        return Err(ApiError::bad_request(
            "bad_host",
            "a request carries at most one Host header",
        ));
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    // Probes answer any host: they tell nothing, and a prober names the host it likes.
    let probe = matches!(path, "/healthz" | "/readyz");
    if !config.requires_credentials() && !probe {
        let known = host.is_some_and(|h| {
            crate::auth::is_address_or_localhost(h)
                || config.allowed_hosts.iter().any(|a| {
                    a.eq_ignore_ascii_case(h)
                        || h.rsplit_once(':')
                            .is_some_and(|(name, _)| a.eq_ignore_ascii_case(name))
                })
        });
        if !known {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "host_not_allowed",
                format!(
                    "the admin listener answers to IP addresses, localhost and admin.allowed_hosts; not to {:?}",
                    host.unwrap_or("")
                ),
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let allowed = crate::auth::same_origin(origin, host)
            || config
                .allowed_origins
                .iter()
                .any(|o| o.eq_ignore_ascii_case(origin));
        if !allowed {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                format!("a page of {origin:?} may not use the admin API (admin.allowed_origins)"),
            ));
        }
    }
    if !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) && !api_body(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the admin API takes JSON (content-type: application/json) or MessagePack bodies",
        ));
    }
    Ok(())
}

/// Whether a request's body is one the admin API reads: JSON or MessagePack by its
/// `Content-Type`, or no body at all.
fn api_body(headers: &HeaderMap) -> bool {
    let Some(kind) = headers.get(header::CONTENT_TYPE) else {
        let empty = headers
            .get(header::CONTENT_LENGTH)
            .is_none_or(|n| n.as_bytes() == b"0");
        return empty && !headers.contains_key(header::TRANSFER_ENCODING);
    };
    let essence = kind
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
        || super::publish::is_msgpack(headers)
}

/// Middleware of the admin router: 403 or 415 for what a web page would send
/// ([`cross_site`]), then 401 with a reason unless the request may pass.
pub(crate) async fn require(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let config = &state.config().admin;
    if let Err(refusal) = cross_site(
        request.method(),
        request.uri().path(),
        request.headers(),
        config,
    ) {
        metrics::client_error("admin", refusal.code());
        return refusal.into_response();
    }
    if !config.requires_credentials() || is_open(request.uri().path(), config) {
        return next.run(request).await;
    }
    let reason = match presented(request.headers()) {
        Some(key) if accepted(&config.api_keys, key) => return next.run(request).await,
        Some(_) => "the admin API key is not valid",
        None => "the admin API needs a key: x-api-key or Authorization: Bearer",
    };
    metrics::client_error("admin", "unauthorized");
    (
        [(WWW_AUTHENTICATE, "Bearer realm=\"herald-admin\"")],
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", reason),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_from_either_header() {
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h), None);
        h.insert(AUTHORIZATION, "Bearer  abc ".parse().unwrap());
        assert_eq!(presented(&h), Some(&b"abc"[..]));
        h.insert(AUTHORIZATION, "bearer xyz".parse().unwrap());
        assert_eq!(presented(&h), Some(&b"xyz"[..]));
        h.insert(AUTHORIZATION, "Basic eHl6".parse().unwrap());
        assert_eq!(presented(&h), None);
        h.insert("x-api-key", "k1".parse().unwrap());
        assert_eq!(presented(&h), Some(&b"k1"[..]));
    }

    #[test]
    fn only_an_exact_key_is_accepted() {
        let keys = vec!["first-key-0123456".to_string(), "second-key-012345".into()];
        assert!(accepted(&keys, b"second-key-012345"));
        assert!(!accepted(&keys, b"second-key-01234"));
        assert!(!accepted(&keys, b"second-key-0123456"));
        assert!(!accepted(&keys, b""));
        assert!(!accepted(&[], b"first-key-0123456"));
    }

    fn headers(lines: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in lines {
            h.insert(*name, value.parse().unwrap());
        }
        h
    }

    fn refusal(
        method: Method,
        path: &str,
        lines: &[(&'static str, &str)],
        config: &AdminConfig,
    ) -> Option<&'static str> {
        cross_site(&method, path, &headers(lines), config)
            .err()
            .map(|e| e.code())
    }

    #[test]
    fn what_only_a_web_page_sends_is_refused() {
        let open = AdminConfig::default();
        let host = ("host", "127.0.0.1:9090");
        let json = ("content-type", "application/json; charset=utf-8");
        assert_eq!(
            refusal(Method::POST, "/v1/publish", &[host, json], &open),
            None
        );
        assert_eq!(
            refusal(
                Method::POST,
                "/v1/publish",
                &[host, ("content-type", "application/msgpack")],
                &open
            ),
            None
        );
        assert_eq!(
            refusal(Method::POST, "/v1/x/disconnect", &[host], &open),
            None
        );
        assert_eq!(
            refusal(
                Method::POST,
                "/v1/x/disconnect",
                &[host, ("content-length", "0")],
                &open
            ),
            None
        );
        for kind in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
        ] {
            assert_eq!(
                refusal(
                    Method::POST,
                    "/v1/publish",
                    &[host, ("content-type", kind)],
                    &open
                ),
                Some("unsupported_media_type"),
                "{kind}"
            );
        }
        assert_eq!(
            refusal(
                Method::POST,
                "/v1/publish",
                &[host, ("content-length", "12")],
                &open
            ),
            Some("unsupported_media_type")
        );
        assert_eq!(
            refusal(
                Method::POST,
                "/v1/publish",
                &[host, ("transfer-encoding", "chunked")],
                &open
            ),
            Some("unsupported_media_type")
        );
        assert_eq!(
            refusal(
                Method::GET,
                "/v1/topics",
                &[host, ("origin", "http://127.0.0.1:9090")],
                &open
            ),
            None
        );
        assert_eq!(
            refusal(
                Method::GET,
                "/v1/topics",
                &[host, ("origin", "http://127.0.0.1:9091")],
                &open
            ),
            Some("origin_not_allowed")
        );
        assert_eq!(
            refusal(
                Method::GET,
                "/v1/topics",
                &[("host", "rebind.evil.example:9090")],
                &open
            ),
            Some("host_not_allowed")
        );
        assert_eq!(
            refusal(Method::GET, "/v1/topics", &[], &open),
            Some("host_not_allowed")
        );
        assert_eq!(
            refusal(
                Method::GET,
                "/healthz",
                &[("host", "rebind.evil.example")],
                &open
            ),
            None
        );
        let listed = AdminConfig {
            allowed_hosts: vec!["admin.internal".into()],
            allowed_origins: vec!["https://ops.example.com".into()],
            ..AdminConfig::default()
        };
        assert_eq!(
            refusal(
                Method::GET,
                "/v1/topics",
                &[("host", "admin.internal:9090")],
                &listed
            ),
            None
        );
        assert_eq!(
            refusal(
                Method::GET,
                "/v1/topics",
                &[("host", "ADMIN.internal")],
                &listed
            ),
            None
        );
        assert_eq!(
            refusal(
                Method::GET,
                "/v1/topics",
                &[host, ("origin", "https://ops.example.com")],
                &listed
            ),
            None
        );
        let keyed = AdminConfig {
            api_keys: vec!["k".repeat(16)],
            ..AdminConfig::default()
        };
        assert_eq!(
            refusal(
                Method::GET,
                "/v1/topics",
                &[("host", "herald.ns.svc")],
                &keyed
            ),
            None
        );
        assert_eq!(
            refusal(
                Method::GET,
                "/v1/topics",
                &[
                    ("host", "herald.ns.svc"),
                    ("origin", "https://evil.example")
                ],
                &keyed
            ),
            Some("origin_not_allowed")
        );
    }

    #[test]
    fn probes_stay_open_and_metrics_as_configured() {
        let mut config = AdminConfig::default();
        assert!(is_open("/healthz", &config) && is_open("/readyz", &config));
        assert!(is_open("/metrics", &config));
        assert!(!is_open("/v1/publish", &config) && !is_open("/readyz/", &config));
        config.public_metrics = false;
        assert!(!is_open("/metrics", &config));
    }
}
