//! Admin endpoints that act on live connections, on whichever node holds them:
//! `POST /v1/users/{user}/disconnect`, `POST /v1/connections/{id}/disconnect`, and
//! `POST /v1/users/{user}/subscribe` / `unsubscribe`, and `POST /v1/users/{user}/send` and
//! `POST /v1/connections/{id}/send`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::query::ApiPath;
use crate::api::publish::RequestBody;
use crate::app::AppState;
use crate::cluster::control::{Action, Command, Disconnect, MAX_REASON, Target};
use crate::error::ApiError;
use crate::publish::bad_json;
use crate::telemetry::trace::Carried;

/// Body of a disconnect: both fields optional, the body too.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DisconnectRequest {
    /// What the client is told (default "disconnected").
    reason: Option<String>,
    /// Whether the client should come back (default true).
    reconnect: Option<bool>,
}

fn disconnect_of(body: &[u8]) -> Result<Disconnect, ApiError> {
    let request: DisconnectRequest = if body.iter().all(u8::is_ascii_whitespace) {
        DisconnectRequest::default()
    } else {
        serde_json::from_slice(body).map_err(bad_json)?
    };
    let reason = request.reason.unwrap_or_else(|| "disconnected".into());
    if reason.len() > MAX_REASON {
        return Err(ApiError::bad_request(
            "bad_reason",
            format!("reason is limited to {MAX_REASON} bytes (a WebSocket close reason)"),
        ));
    }
    Ok(Disconnect {
        reason,
        reconnect: request.reconnect.unwrap_or(true),
    })
}

/// Carries out `command` here and relays it to the other nodes; answers how many
/// connections took it on this node (under `counted`) and whether it went to the others.
async fn command(
    state: &AppState,
    command: Command,
    counted: &str,
) -> Result<Json<serde_json::Value>, ApiError> {
    let cluster = state.cluster();
    let here = cluster.command(&command).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "cluster_unavailable",
            format!("done on this node only: the other nodes cannot be reached ({e})"),
        )
    })?;
    Ok(Json(serde_json::json!({
        counted: here,
        "relayed": cluster.relay().is_some(),
    })))
}

/// `POST /v1/users/{user}/disconnect {"reason"?, "reconnect"?}`: ends every connection of the
/// user (a token's `sub`) on every node.
pub(crate) async fn disconnect_user(
    State(state): State<AppState>,
    ApiPath(user): ApiPath<String>,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let action = |body: &[u8]| disconnect_of(body).map(Action::Disconnect);
    for_user(&state, user, body, action, "disconnected_here").await
}

/// `POST /v1/connections/{id}/disconnect {"reason"?, "reconnect"?}`: ends one connection, by
/// the id its client was given, on whichever node holds it.
pub(crate) async fn disconnect_connection(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let RequestBody(body) = body?;
    let id = connection_id(&id)?;
    let disconnect = disconnect_of(&body)?;
    command(
        &state,
        Command {
            target: Target::Connection(id),
            action: Action::Disconnect(disconnect),
        },
        "disconnected_here",
    )
    .await
}

/// A connection id from a path: the decimal number its client was given.
fn connection_id(id: &str) -> Result<u64, ApiError> {
    id.parse()
        .map_err(|_| ApiError::bad_request("bad_connection", "a connection id is a decimal number"))
}

/// A command for every connection of `user`, its action read from the body by `action`.
async fn for_user(
    state: &AppState,
    user: String,
    body: Result<RequestBody, ApiError>,
    action: impl FnOnce(&[u8]) -> Result<Action, ApiError>,
    counted: &str,
) -> Result<Json<serde_json::Value>, ApiError> {
    let RequestBody(body) = body?;
    check_user(&user)?;
    let action = action(&body)?;
    let target = Target::User(user);
    command(state, Command { target, action }, counted).await
}

fn check_user(user: &str) -> Result<(), ApiError> {
    if user.is_empty() || user.len() > 1024 {
        return Err(ApiError::bad_request(
            "bad_user",
            "a user is 1 to 1024 bytes",
        ));
    }
    Ok(())
}

/// Body of a server-side (un)subscription.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicsRequest {
    topics: Vec<String>,
}

/// The topics of a (un)subscription: 1 to `limits.max_subscriptions` valid names.
fn topics_of(state: &AppState, body: &[u8]) -> Result<Vec<String>, ApiError> {
    let request: TopicsRequest = serde_json::from_slice(body).map_err(bad_json)?;
    let max = state.config().limits.max_subscriptions;
    if request.topics.is_empty() || request.topics.len() > max {
        return Err(ApiError::bad_request(
            "bad_topics",
            format!("topics must list 1 to {max} topics"),
        ));
    }
    for topic in &request.topics {
        herald_core::TopicName::new(topic)?;
    }
    Ok(request.topics)
}

/// `POST /v1/users/{user}/subscribe {"topics": [..]}`: subscribes every live connection of
/// the user, on every node, to the topics from where they are when it is called (the client
/// is told: a WebSocket `subscribed` frame with `"by": "server"`, an SSE `herald.subscribed`
/// event), so a message published after the answer reaches every connection.
pub(crate) async fn subscribe_user(
    State(state): State<AppState>,
    ApiPath(user): ApiPath<String>,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let action = |body: &[u8]| {
        let topics = topics_of(&state, body)?;
        // Where each topic is now, on this node: the connections resume after it, so a
        // message published once this answers reaches them whichever comes first.
        let mut after = Vec::with_capacity(topics.len());
        for topic in topics {
            let name = herald_core::TopicName::new(&topic)?;
            let held = match state.registry().get(name.as_str()) {
                Some(held) => Some(held),
                // A topic of this node alone: made now, its opening id known.
                None if !state.registry().config().topic.log_carried => {
                    Some(state.registry().get_or_create(&name)?)
                }
                None => None,
            };
            let at = held.and_then(|t| t.anchored_head());
            after.push((topic, at.map(|c| c.to_string()).unwrap_or_default()));
        }
        Ok(Action::SubscribeAfter(after))
    };
    for_user(&state, user, body, action, "subscribed_here").await
}

/// `POST /v1/users/{user}/unsubscribe {"topics": [..]}`: the reverse of [`subscribe_user`].
pub(crate) async fn unsubscribe_user(
    State(state): State<AppState>,
    ApiPath(user): ApiPath<String>,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let action = |body: &[u8]| topics_of(&state, body).map(Action::Unsubscribe);
    for_user(&state, user, body, action, "unsubscribed_here").await
}

/// Body of a message sent to a user.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SendRequest {
    data: Box<serde_json::value::RawValue>,
    #[serde(default)]
    event: Option<String>,
}

/// The personal topic of `user`: `user:<user>`, when that is a valid topic name.
pub(crate) fn personal_topic(user: &str) -> Result<herald_core::TopicName, ApiError> {
    herald_core::TopicName::new(&format!("user:{user}")).map_err(|_| {
        ApiError::bad_request(
            "bad_user",
            "a user whose name is not made of topic characters ([A-Za-z0-9_.:@-]) has no personal topic",
        )
    })
}

/// `POST /v1/users/{user}/send {"data", "event"?}`: publishes to the user's personal topic
/// `user:<user>` (through the log that carries it, so it has an id, history and resume like any
/// message) and subscribes every live connection of the user to that topic, on every node,
/// from just before the message, so each gets it once whichever arrives first.
pub(crate) async fn send_user(
    State(state): State<AppState>,
    ApiPath(user): ApiPath<String>,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let RequestBody(body) = body?;
    check_user(&user)?;
    let topic = personal_topic(&user)?;
    send(&state, topic, Target::User(user), &body).await
}

/// `POST /v1/connections/{id}/send {"data", "event"?}`: a message to one connection, on
/// whichever node holds it: published to the connection's own topic `conn:<id>` and the
/// connection subscribed to it from just before the message, as [`send_user`] does for a
/// user.
pub(crate) async fn send_connection(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let RequestBody(body) = body?;
    let id = connection_id(&id)?;
    let topic = herald_core::TopicName::new(&format!("conn:{id}"))?;
    send(&state, topic, Target::Connection(id), &body).await
}

/// Publishes the message in `body` to `topic` and has `target`'s connections receive it.
async fn send(
    state: &AppState,
    topic: herald_core::TopicName,
    target: Target,
    body: &[u8],
) -> Result<Json<serde_json::Value>, ApiError> {
    let request: SendRequest = serde_json::from_slice(body).map_err(bad_json)?;
    let draft = crate::publish::Draft {
        topic: topic.as_str(),
        event: request.event.as_deref(),
        data: crate::publish::Data::Json(&request.data),
        // A send is a publish plus a command to connections: not retried as one.
        idempotency: None,
    };
    let publisher = crate::publish::Publisher::Trusted;
    let (topic, id) =
        crate::publish::one(state, &publisher, None, draft, "http", Carried::NONE).await?;
    let after = herald_core::Cursor::new(id.epoch, id.seq.saturating_sub(1));
    let action = Action::Receive {
        topic: topic.to_string(),
        after: after.to_string(),
    };
    let Json(mut answer) = command(state, Command { target, action }, "reached_here").await?;
    answer["topic"] = topic.as_str().into();
    answer["id"] = id.to_string().into();
    Ok(Json(answer))
}
