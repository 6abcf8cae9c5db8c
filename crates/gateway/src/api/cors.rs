//! CORS for browsers calling the public listener from another origin: preflight (`OPTIONS`)
//! answers for SSE, long-poll and the public publish API, and the CORS headers on every
//! answer of the router, refusals included, so that a page can read why it was refused.
//!
//! The origin is checked against `auth.allowed_origins` (empty: any) and echoed, never `*`,
//! so that `auth.cors_credentials` can allow cookies. WebSocket upgrades do not use CORS;
//! they check `Origin` themselves. HTTP/1.1 SSE streams are answered by the accept loop
//! (`crate::fast_path`), which adds the same headers with [`raw_headers`]. The headers
//! themselves are written in one place, `transport::cors`.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::AppState;

/// Request headers a page may send: tokens, API keys, JSON bodies, SSE resume ids, the W3C
/// trace context of a traced publish, a publish's idempotency key.
const ALLOW_HEADERS: &str = "authorization, x-api-key, content-type, last-event-id, \
    cache-control, traceparent, tracestate, idempotency-key";
/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE: &str = "600";

/// The methods a path answers cross-origin, if it is one that does.
fn methods(state: &AppState, path: &str) -> Option<&'static str> {
    match path {
        crate::transport::sse::PATH | "/v1/poll" => Some("GET"),
        "/v1/publish" | "/v1/publish/batch" if state.publishes_publicly() => Some("POST"),
        p if p.starts_with("/v1/topics/") && p.ends_with("/history") => Some("GET"),
        _ => None,
    }
}

/// The middleware of the public router.
pub(crate) async fn layer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let origin = match state.auth().check_origin(request.headers()) {
        Ok(origin) => origin.map(str::to_owned),
        // A preflight from an origin that is not allowed: refused, without CORS headers.
        Err(e) if request.method() == Method::OPTIONS => return e.into_response(),
        // Anything else goes on without CORS headers (SSE and poll refuse the origin
        // themselves; a browser keeps the answer from the page).
        Err(_) => None,
    };
    if request.method() == Method::OPTIONS {
        return preflight(&state, request.uri().path(), request.headers(), origin);
    }
    let mut response = next.run(request).await;
    if let Some(origin) = origin {
        add(&state, response.headers_mut(), &origin);
    }
    response
}

fn preflight(
    state: &AppState,
    path: &str,
    headers: &HeaderMap,
    origin: Option<String>,
) -> Response {
    let Some(methods) = methods(state, path) else {
        return crate::error::ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such route for a cross-origin request",
        )
        .into_response();
    };
    let Some(origin) = origin else {
        return crate::error::ApiError::bad_request(
            "not_a_preflight",
            "an OPTIONS request without Origin is not a CORS preflight",
        )
        .into_response();
    };
    if headers
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|m| !methods.split(", ").any(|allowed| allowed == m))
    {
        return crate::error::ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{path} answers {methods} only"),
        )
        .into_response();
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    add(state, h, &origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOW_HEADERS),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(MAX_AGE),
    );
    response
}

/// Adds the CORS headers of an answer to `origin` (an allowed one).
fn add(state: &AppState, h: &mut HeaderMap, origin: &str) {
    crate::transport::cors::insert(state, h, origin);
}

/// The CORS headers for an answer written on the raw socket to a request with `headers`:
/// none when the request has no allowed `Origin`.
pub(crate) fn raw_headers(state: &AppState, headers: &HeaderMap) -> Vec<(&'static str, String)> {
    let Ok(Some(origin)) = state.auth().check_origin(headers) else {
        return Vec::new();
    };
    crate::transport::cors::headers(state, origin)
        .into_iter()
        .filter_map(|(name, value)| Some((name, value.to_str().ok()?.to_owned())))
        .collect()
}
