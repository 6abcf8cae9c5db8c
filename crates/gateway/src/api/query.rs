//! Query strings of the HTTP APIs, read so that a bad one gets the documented JSON error
//! ([`ApiError`]) rather than axum's `text/plain` rejection.
//!
//! - [`ApiQuery`] is the extractor every API handler that reads a query string takes: a query
//!   that does not deserialize is `400 bad_query` with serde's reason.
//! - [`ApiPath`] is the extractor every handler that reads path segments takes: a segment
//!   that is not valid percent-encoded UTF-8 is `400 bad_path`.
//! - Numbers are read as text and parsed by the handler ([`limit`]), so that a bad `limit`
//!   (`abc`, `-1`, `1e3`, `2^64`) gets its own code, `bad_limit`, and says what is allowed.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A query string deserialized into `T`; `400 bad_query` (JSON) when it does not fit `T`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Self(q.0))
            .map_err(|e| ApiError::bad_request("bad_query", e.body_text()))
    }
}

/// Path segments (`/v1/topics/{topic}/history`) deserialized into `T`; `400 bad_path` (JSON)
/// when they do not fit `T` or are not valid percent-encoded UTF-8 (`/v1/topics/%FF`), in
/// place of axum's plain-text 400.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(path) => Ok(Self(path.0)),
            Err(e) => Err(ApiError::bad_request("bad_path", e.body_text())),
        }
    }
}

/// A `limit` parameter: `default` when absent, else a whole number within `range`;
/// `400 bad_limit` otherwise.
pub(crate) fn limit(
    raw: Option<&str>,
    default: usize,
    range: std::ops::RangeInclusive<usize>,
) -> Result<usize, ApiError> {
    let Some(text) = raw else {
        return Ok(default);
    };
    text.parse::<usize>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            ApiError::bad_request(
                "bad_limit",
                format!(
                    "limit must be a whole number from {} to {}",
                    range.start(),
                    range.end()
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_a_whole_number_in_range() {
        assert_eq!(limit(None, 100, 1..=1000).unwrap(), 100);
        assert_eq!(limit(Some("1000"), 100, 1..=1000).unwrap(), 1000);
        for bad in [
            "abc",
            "-1",
            "1e3",
            "18446744073709551616",
            "",
            "0",
            "1001",
            " 5",
        ] {
            let e = limit(Some(bad), 100, 1..=1000).unwrap_err();
            assert_eq!(e.code(), "bad_limit", "{bad}");
        }
    }
}
