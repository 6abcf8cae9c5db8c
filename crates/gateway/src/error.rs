//! The error type of request handling: an HTTP status, a stable code and a reason, answered
//! as JSON `{"code": ..., "reason": ...}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use herald_core::{CursorError, RegistryError, TopicNameError};
use std::time::Duration;

/// A request the gateway refuses, and why.
#[derive(Clone, Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    reason: String,
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with this status, code and reason.
    pub(crate) fn new(status: StatusCode, code: &'static str, reason: impl Into<String>) -> Self {
        Self {
            status,
            code,
            reason: reason.into(),
            retry_after: None,
        }
    }

    /// 429 with a `retry-after` of `wait` (whole seconds, at least 1).
    pub(crate) fn rate_limited(
        code: &'static str,
        reason: impl Into<String>,
        wait: Duration,
    ) -> Self {
        Self {
            retry_after: Some(wait.as_secs_f64().ceil().max(1.0) as u64),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, code, reason)
        }
    }

    /// 400 with `code`.
    pub(crate) fn bad_request(code: &'static str, reason: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, reason)
    }

    /// The stable code.
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    /// The status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.reason)
    }
}

impl From<TopicNameError> for ApiError {
    fn from(e: TopicNameError) -> Self {
        Self::bad_request("bad_topic", e.to_string())
    }
}

impl From<CursorError> for ApiError {
    fn from(e: CursorError) -> Self {
        Self::bad_request("bad_cursor", e.to_string())
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "topic_limit",
            e.to_string(),
        )
    }
}

impl ApiError {
    /// The JSON body: `{"code": ..., "reason": ...}`.
    pub(crate) fn json_body(&self) -> String {
        serde_json::json!({ "code": self.code, "reason": self.reason }).to_string()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        tracing::debug!(status = self.status.as_u16(), code = self.code, reason = %self.reason, "request refused");
        let body = serde_json::json!({ "code": self.code, "reason": self.reason });
        let mut response = (self.status, Json(body)).into_response();
        if let Some(wait) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(wait),
            );
        }
        response
    }
}
