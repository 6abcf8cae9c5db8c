//! History on demand: `GET /v1/topics/{topic}/history?since=<id>&limit=N`, on the admin
//! listener for any topic and on the public one for topics the client may subscribe to.
//!
//! The answer is one JSON object whose messages are the same objects a WebSocket `message`
//! frame carries (encoded once per message, shared with every subscriber):
//!
//! ```json
//! {"topic":"news","messages":[{"type":"message","topic":"news","id":"9f86d081884c7d65-42","data":1}],
//!  "lost":null,"more":false,"next":"9f86d081884c7d65-42"}
//! ```
//!
//! Without `since`, the newest `limit` messages; with it (a message `id`), the first `limit`
//! after it, and `more` says whether to ask again with `since=<next>`. When messages after
//! `since` are no longer all held (`lost`: `expired`, or `epoch` for an id from another life of
//! the topic), the page starts at the oldest message held. A page stops once it holds
//! `limits.max_answer_bytes` of messages (at least one), with `more` (see
//! [`crate::transport::answer`]).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use herald_core::Cursor;
use serde::Deserialize;

use super::query::{self, ApiPath, ApiQuery};
use crate::app::AppState;
use crate::error::ApiError;
use crate::transport::access;
use crate::transport::answer::{Budget, JsonAnswer};

/// The most messages one page holds (and the default `limit` is 100).
pub(crate) const MAX_LIMIT: usize = 1000;

/// Query of a history request.
#[derive(Debug, Deserialize)]
pub(crate) struct HistoryQuery {
    /// The id of the last message the client has; omitted: the newest messages.
    since: Option<String>,
    /// Messages in the page, 1 to [`MAX_LIMIT`] (default 100): read as text, so that a bad
    /// one is `bad_limit` ([`query::limit`]).
    limit: Option<String>,
    /// A token, for clients that cannot send `Authorization` (public listener only).
    token: Option<String>,
}

/// `GET /v1/topics/{topic}/history` on the admin listener: any topic.
pub(crate) async fn admin(
    State(state): State<AppState>,
    ApiPath(topic): ApiPath<String>,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Response, ApiError> {
    page(&state, &topic, &query).await
}

/// `GET /v1/topics/{topic}/history` on the public listener: a topic the client may subscribe
/// to (the subscribe hook decides when configured, else the token or the public prefixes:
/// [`access::may_subscribe`]).
pub(crate) async fn public(
    State(state): State<AppState>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    ApiPath(topic): ApiPath<String>,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Response, ApiError> {
    let answer = async {
        // Who the client is, as every transport's connect check has it (no connect hook: a
        // read opens no connection), then the one subscribe decision.
        let admitted = access::identify(&state, &headers, query.token.as_deref())?;
        herald_core::name::validate_topic(&topic)?;
        let remote = access::peer_of(&extensions);
        let caller = admitted.caller("http", None, remote);
        access::may_subscribe(&state, &caller, &[topic.as_str()]).await?;
        // A read of a topic this node does not hold may make it follow one more partition
        // of the cluster's log: charged to the client, after every other refusal.
        let client = state.client_key(admitted.who.sub.as_deref(), remote);
        state.charge_cold(&client, &[topic.as_str()])?;
        page(&state, &topic, &query).await
    };
    answer
        .await
        .inspect_err(|e| crate::telemetry::metrics::client_error("http", e.code()))
}

/// One page of `name`'s history. On a node that did not follow the topic's partition of the
/// cluster's log until now, it first reads the partition's history ([`AppState::backfill`]).
async fn page(state: &AppState, name: &str, query: &HistoryQuery) -> Result<Response, ApiError> {
    herald_core::name::validate_topic(name)?;
    let limit = query::limit(query.limit.as_deref(), 100, 1..=MAX_LIMIT)?;
    let since: Option<Cursor> = match &query.since {
        Some(s) => Some(s.parse().map_err(|e: herald_core::CursorError| {
            ApiError::bad_request("bad_cursor", format!("since: {e}"))
        })?),
        None => None,
    };
    state.backfill(&[name], false).await?;
    let Some(topic) = state.registry().get(name) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_topic",
            "no such topic on this node",
        ));
    };
    let mut page = topic.history(since, limit);
    // No more than `limits.max_answer_bytes` of messages (at least one): `more` and `next`
    // then continue after the last one given.
    let fit = Budget::new(limit, state.config().limits.max_answer_bytes).fits(&page.messages);
    if fit < page.messages.len() {
        page.messages.truncate(fit);
        page.more = true;
    }
    let next = page
        .messages
        .last()
        .map(|m| m.cursor())
        .or(since)
        .unwrap_or_else(|| topic.head());
    // The messages' shared frames by reference, not one fresh copy of them all.
    let mut body = JsonAnswer::default();
    body.text(br#"{"topic":""#);
    body.text(name.as_bytes());
    body.text(br#"","messages":["#);
    body.frames(
        page.messages
            .iter()
            .map(|m| herald_core::Outbound::new(m, false)),
    );
    body.text(br#"],"lost":"#);
    match page.lost {
        Some(reason) => body.text(format!(r#""{}""#, reason.as_str()).as_bytes()),
        None => body.text(b"null"),
    }
    body.text(format!(r#","more":{},"next":"{next}"}}"#, page.more).as_bytes());
    let mut response = body.into_body().into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
