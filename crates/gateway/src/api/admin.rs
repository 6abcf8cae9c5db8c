//! Admin endpoints: topic stats, health, readiness and metrics.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use herald_core::TopicStats;
use serde::Deserialize;

use crate::app::AppState;
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
pub struct TopicsQuery {
    /// Most topics listed (default 100, at most 10000).
    limit: Option<usize>,
}

/// `GET /v1/topics`: the topic count and the most subscribed topics with their subscriber
/// counts (presence on this node).
pub async fn topics(
    State(state): State<AppState>,
    Query(q): Query<TopicsQuery>,
) -> Json<serde_json::Value> {
    let limit = q.limit.unwrap_or(100).min(10_000);
    let list: Vec<_> = state
        .registry()
        .stats(limit)
        .iter()
        .map(stats_json)
        .collect();
    Json(serde_json::json!({ "count": state.registry().len(), "topics": list }))
}

/// `GET /v1/topics/{topic}`: one topic's subscribers, head position and history length.
pub async fn topic(
    State(state): State<AppState>,
    Path(name): Path<String>,
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
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 while accepting clients and following every bridge; 503 while
/// draining, or with one line per bridge that is not ready and why.
pub async fn readyz(State(state): State<AppState>) -> Response {
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
pub async fn metrics(State(state): State<AppState>) -> Response {
    metrics::topics(state.registry().len());
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

/// `GET /v1/presence/{topic}`: subscribers of a topic across the cluster (each live node's
/// count, refreshed every `cluster.presence_interval`), or on this node when it runs alone.
pub async fn presence(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    herald_core::name::validate_topic(&name)?;
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

/// `GET /v1/cluster/nodes`: live nodes and their open connections (needs Redis).
pub async fn nodes(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let Some(presence) = state.presence() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_cluster",
            "this node runs alone (no Redis configured)",
        ));
    };
    let nodes: Vec<serde_json::Value> = presence
        .connections()
        .await
        .map_err(unavailable)?
        .into_iter()
        .map(|(node, connections)| serde_json::json!({ "node": node, "connections": connections }))
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
pub async fn user_connections(
    State(state): State<AppState>,
    Path(user): Path<String>,
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
