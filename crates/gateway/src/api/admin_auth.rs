//! Credentials on the admin listener (`admin.api_keys`): every route but `/healthz`,
//! `/readyz` and, when `admin.public_metrics` is on, `/metrics` needs a key, sent as
//! `x-api-key: KEY` or `Authorization: Bearer KEY`. Without keys configured the listener is
//! open, which [`crate::config::AdminConfig::validate`] allows on loopback only (or when told
//! it is insecure).

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, StatusCode};
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

/// Middleware of the admin router: 401 with a reason unless the request may pass.
pub async fn require(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let config = &state.config().admin;
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
