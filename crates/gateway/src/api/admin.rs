//! Admin endpoints: topic stats, presence (counts and members), health, readiness and
//! metrics.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use herald_core::TopicStats;
use serde::Deserialize;

use super::query::{self, ApiPath, ApiQuery};
use crate::app::AppState;
use crate::cluster::presence::NodeCursor;
use crate::error::ApiError;
use crate::telemetry::metrics;

fn stats_json(s: &TopicStats) -> serde_json::Value {
    serde_json::json!({
        "topic": s.name.as_str(),
        "subscribers": s.subscribers,
        "head": s.head.to_string(),
        "history": s.history_len,
        "messages": s.messages,
    })
}

/// Query of `GET /v1/topics`.
#[derive(Debug, Deserialize)]
pub(crate) struct TopicsQuery {
    /// Most topics listed: a whole number (default 100; above 10000 lists 10000).
    limit: Option<String>,
}

/// `GET /v1/topics`: the topic count and the most subscribed topics with their subscriber
/// counts (presence on this node).
pub(crate) async fn topics(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<TopicsQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let limit = query::limit(q.limit.as_deref(), 100, 0..=usize::MAX)?.min(10_000);
    let list: Vec<_> = state
        .registry()
        .stats(limit)
        .iter()
        .map(stats_json)
        .collect();
    Ok(Json(
        serde_json::json!({ "count": state.registry().len(), "topics": list }),
    ))
}

/// `GET /v1/topics/{topic}`: one topic's subscribers, head position and history length.
pub(crate) async fn topic(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    herald_core::name::validate_topic(&name)?;
    match state.registry().get(&name) {
        Some(topic) => Ok(Json(stats_json(&topic.stats()))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_topic",
            "no such topic on this node",
        )),
    }
}

/// `GET /healthz`: the process is alive.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 while accepting clients and following every bridge; 503 while
/// draining, or with one line per bridge that is not ready and why.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    if state.is_ready() {
        return (StatusCode::OK, "ready\n").into_response();
    }
    let bridges = state.not_ready();
    let body = if state.shutdown().is_cancelled() || bridges.is_empty() {
        "draining\n".to_string()
    } else {
        bridges
            .iter()
            .map(|(name, why)| format!("{name}: not ready: {why}\n"))
            .collect()
    };
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

/// `GET /metrics`: Prometheus text exposition.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    metrics::topics(state.registry().len());
    metrics::patterns(state.registry().patterns().len());
    crate::telemetry::process::collect();
    metrics::node_state(
        state.is_ready(),
        state.shutdown().is_cancelled(),
        state.config().limits.max_connections,
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.render_metrics(),
    )
        .into_response()
}

/// Query of `GET /v1/presence/{topic}`: `members=true` lists the members, a page of
/// `limit` at a time from `cursor`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PresenceQuery {
    members: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// Members listed per page when the query gives no `limit`.
pub(crate) const MEMBERS_PAGE: usize = 100;
/// Most members listed per page.
pub(crate) const MAX_MEMBERS_PAGE: usize = 1000;

/// `GET /v1/presence/{topic}`: subscribers of a topic across the cluster (each live node's
/// count, refreshed every `cluster.presence_interval`), or on this node when it runs alone.
///
/// With `members=true`: the subscribers themselves, `{"user","conn","node","since",
/// "transport","info"?}` each, a page of `limit` (default [`MEMBERS_PAGE`], at most
/// [`MAX_MEMBERS_PAGE`]) at a time; `next` is the `cursor` of the next page, null after the
/// last. In a cluster the listing is as fresh as the nodes' last flush, and a member that
/// joins or leaves while the pages are read may be listed twice or missed (see
/// [`crate::cluster::presence::Presence::topic_members`]).
pub(crate) async fn presence(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<PresenceQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    herald_core::name::validate_topic(&name)?;
    match q.members.as_deref() {
        Some("true") => return members(&state, name, &q).await,
        None | Some("false") => {}
        Some(other) => {
            return Err(ApiError::bad_request(
                "bad_members",
                format!("members must be `true` or `false`, not {other:?}"),
            ));
        }
    }
    if q.limit.is_some() || q.cursor.is_some() {
        return Err(ApiError::bad_request(
            "bad_query",
            "limit and cursor page the member list: add members=true",
        ));
    }
    let Some(presence) = state.presence() else {
        let local = state
            .registry()
            .get(&name)
            .map_or(0, |t| t.subscriber_count());
        return Ok(Json(
            serde_json::json!({ "topic": name, "subscribers": local, "nodes": {} }),
        ));
    };
    let counts = presence.topic_presence(&name).await.map_err(unavailable)?;
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let nodes: serde_json::Map<String, serde_json::Value> = counts
        .into_iter()
        .map(|(node, n)| (node, n.into()))
        .collect();
    Ok(Json(
        serde_json::json!({ "topic": name, "subscribers": total, "nodes": nodes }),
    ))
}

/// Where a page of members starts: after a connection id (a node alone), or at a place
/// in the walk over the cluster's nodes.
#[derive(Debug, PartialEq)]
enum PageCursor {
    Local(u64),
    Node(NodeCursor),
}

impl PageCursor {
    /// `l.<id>`, or `n.<scan>.<skip>.<node id in hex>`: opaque to clients, safe in a URL.
    fn text(&self) -> String {
        match self {
            Self::Local(after) => format!("l.{after}"),
            Self::Node(c) => {
                let hex: String = c.node.bytes().map(|b| format!("{b:02x}")).collect();
                format!("n.{}.{}.{hex}", c.scan, c.skip)
            }
        }
    }

    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let cursor = match parts.next()? {
            "l" => Self::Local(parts.next()?.parse().ok()?),
            "n" => {
                let scan = parts.next()?.parse().ok()?;
                let skip = parts.next()?.parse().ok()?;
                let hex = parts.next()?;
                if hex.len() % 2 != 0 || !hex.is_ascii() {
                    return None;
                }
                let bytes = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
                    .collect::<Option<Vec<u8>>>()?;
                let node = String::from_utf8(bytes).ok()?;
                Self::Node(NodeCursor { node, scan, skip })
            }
            _ => return None,
        };
        parts.next().is_none().then_some(cursor)
    }
}

/// `GET /v1/presence/{topic}?members=true&limit=N&cursor=C`: one page of the topic's members.
async fn members(
    state: &AppState,
    topic: String,
    q: &PresenceQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !state.config().presence_members(&topic) {
        return Err(ApiError::bad_request(
            "presence_off",
            "members are not kept for this topic: set topics.presence, or presence in its namespace's [namespaces.<name>]",
        ));
    }
    let limit = query::limit(q.limit.as_deref(), MEMBERS_PAGE, 1..=MAX_MEMBERS_PAGE)?;
    let from = match q.cursor.as_deref() {
        None => None,
        Some(text) => Some(PageCursor::parse(text).ok_or_else(|| {
            ApiError::bad_request(
                "bad_cursor",
                "cursor must be the `next` of a previous page of this listing",
            )
        })?),
    };
    let foreign = || {
        ApiError::bad_request(
            "bad_cursor",
            "this cursor comes from a listing of another kind (a node alone, or a cluster)",
        )
    };
    let (members, next) = match state.presence() {
        None => {
            let after = match from {
                None => None,
                Some(PageCursor::Local(after)) => Some(after),
                Some(PageCursor::Node(_)) => return Err(foreign()),
            };
            let node = &state.config().cluster.node_id;
            let (page, more) = state.cluster().members().page(&topic, after, limit);
            let next = more
                .then(|| page.last().map(|(id, _)| PageCursor::Local(*id)))
                .flatten();
            let members: Vec<_> = page.iter().map(|(id, m)| m.listed(*id, node)).collect();
            (members, next)
        }
        Some(presence) => {
            let from = match from {
                None => None,
                Some(PageCursor::Node(c)) => Some(c),
                Some(PageCursor::Local(_)) => return Err(foreign()),
            };
            let (members, next) = presence
                .topic_members(&topic, from.as_ref(), limit)
                .await
                .map_err(unavailable)?;
            (members, next.map(PageCursor::Node))
        }
    };
    Ok(Json(serde_json::json!({
        "topic": topic,
        "members": members,
        "next": next.map(|c| c.text()),
    })))
}

/// `GET /v1/cluster/nodes`: live nodes, their open connections, and the partitions of each
/// log they read (`"groups": {"redis": [followed, total]}`, the API's name for them; needs
/// Redis).
pub(crate) async fn nodes(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Some(presence) = state.presence() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_cluster",
            "this node runs alone (no Redis configured)",
        ));
    };
    let nodes: Vec<serde_json::Value> = presence
        .nodes()
        .await
        .map_err(unavailable)?
        .into_iter()
        .map(|(node, connections, partitions)| {
            serde_json::json!({ "node": node, "connections": connections, "groups": partitions })
        })
        .collect();
    Ok(Json(serde_json::json!({ "nodes": nodes })))
}

fn unavailable(e: redis::RedisError) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "bridge_unavailable",
        format!("redis: {e}"),
    )
}

/// `GET /v1/users/{user}/connections`: the connections of a user (a token's `sub`) on every
/// live node (a node alone: its own).
pub(crate) async fn user_connections(
    State(state): State<AppState>,
    ApiPath(user): ApiPath<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Some(presence) = state.presence() else {
        let ids: Vec<String> = state
            .cluster()
            .connections()
            .of_user(&user)
            .iter()
            .map(u64::to_string)
            .collect();
        let node = state.config().cluster.node_id.clone();
        return Ok(Json(
            serde_json::json!({ "user": user, "nodes": { node: ids } }),
        ));
    };
    let nodes: serde_json::Map<String, serde_json::Value> = presence
        .user_connections(&user)
        .await
        .map_err(unavailable)?
        .into_iter()
        .map(|(node, ids)| (node, ids.into()))
        .collect();
    Ok(Json(serde_json::json!({ "user": user, "nodes": nodes })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_cursors_read_back_and_anything_else_is_refused() {
        for cursor in [
            PageCursor::Local(42),
            PageCursor::Node(NodeCursor {
                node: "node-a.eu:1".into(),
                scan: 17,
                skip: 3,
            }),
        ] {
            let text = cursor.text();
            assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'));
            assert_eq!(PageCursor::parse(&text), Some(cursor));
        }
        for bad in [
            "",
            "l",
            "l.x",
            "l.1.2",
            "n.1.2",
            "n.1.2.6",
            "n.1.2.zz",
            "x.1",
            "n.-1.0.61",
        ] {
            assert_eq!(PageCursor::parse(bad), None, "{bad:?}");
        }
    }
}
