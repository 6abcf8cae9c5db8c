//! The CORS headers of an answer, written in one place ([`headers`]) for every answer the
//! public listener gives a page on another origin: the router's (`api::cors`), the SSE head
//! and refusals written on the socket, long-poll answers.

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::app::AppState;

/// The CORS headers of an answer to a request from `origin` (an allowed one; see
/// `auth.allowed_origins`): the origin echoed (never `*`, so that `auth.cors_credentials` can
/// allow cookies), `vary: origin`, the response headers a page may read, and the credentials
/// flag when configured. None when `origin` cannot be a header value.
pub(crate) fn headers(state: &AppState, origin: &str) -> Vec<(&'static str, HeaderValue)> {
    let Ok(origin) = HeaderValue::from_str(origin) else {
        return Vec::new();
    };
    let mut lines = vec![
        ("access-control-allow-origin", origin),
        ("vary", HeaderValue::from_static("origin")),
        (
            "access-control-expose-headers",
            HeaderValue::from_static("retry-after"),
        ),
    ];
    if state.config().auth.cors_credentials {
        lines.push((
            "access-control-allow-credentials",
            HeaderValue::from_static("true"),
        ));
    }
    lines
}

/// [`headers`] into `map` (an answer through hyper).
pub(crate) fn insert(state: &AppState, map: &mut HeaderMap, origin: &str) {
    for (name, value) in headers(state, origin) {
        map.insert(HeaderName::from_static(name), value);
    }
}

/// [`headers`] as `name: value\r\n` lines (an answer written on the socket).
pub(crate) fn lines(state: &AppState, origin: &str) -> String {
    let mut lines = String::new();
    for (name, value) in headers(state, origin) {
        // Made from a `&str` above: always text.
        let value = value.to_str().unwrap_or_default();
        lines.push_str(&format!("{name}: {value}\r\n"));
    }
    lines
}
