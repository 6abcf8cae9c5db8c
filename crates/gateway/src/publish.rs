//! The publish pipeline every publish goes through, whoever sends it (HTTP on either
//! listener, batches, WebSocket `publish`): [`prepare`] (topic, rights, rate, event name,
//! payload) then [`route`] (to the log that feeds the topic, or the local registry). The HTTP
//! handlers are in [`crate::api::publish`]; the WebSocket command in `transport::ws`.

use axum::http::StatusCode;
use herald_core::{EventName, Payload, TopicName};
use serde_json::value::RawValue;

use crate::app::AppState;
use crate::error::ApiError;
use crate::hooks::{Caller, Hook};
use crate::telemetry::metrics;

/// Who publishes.
pub enum Publisher<'a> {
    /// The admin listener, dev mode, or a valid API key: any topic.
    Trusted,
    /// A client (a WebSocket connection, or a request with a token on the public listener):
    /// what the publish hook allows when it is configured, else the topics its token's
    /// `publish` claim allows.
    Client(Caller<'a>),
}

/// Counts `n` publishes against `key`'s rate limit.
pub fn admit(state: &AppState, key: &str, n: usize) -> Result<(), ApiError> {
    state.publish_limits().admit(key, n).map_err(|wait| {
        ApiError::rate_limited(
            "publish_rate",
            format!(
                "over the publish rate limit of {}/s (bursts of {}); retry later",
                state.config().limits.publish_rate_per_key,
                state.config().limits.publish_burst_per_key
            ),
            wait,
        )
    })
}

/// A publish that passed the pipeline's checks, ready to route.
#[derive(Debug)]
pub struct Prepared {
    /// The topic.
    pub topic: TopicName,
    /// The event name, if any.
    pub event: Option<EventName>,
    /// The payload, compact.
    pub payload: Payload,
}

/// A payload as a publisher sent it.
#[derive(Debug, Clone, Copy)]
pub enum Data<'a> {
    /// One JSON value.
    Json(&'a RawValue),
    /// One MessagePack value (`application/msgpack`, the `herald.msgpack` subprotocol),
    /// carried as given; it must have a JSON form ([`herald_core::msgpack`]).
    Msgpack(&'a [u8]),
}

/// [`prepare_data`] for a JSON payload.
pub async fn prepare(
    state: &AppState,
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
    topic: &str,
    event: Option<&str>,
    data: &RawValue,
) -> Result<Prepared, ApiError> {
    prepare_data(state, publisher, rate_key, topic, event, Data::Json(data)).await
}

/// The publish pipeline every publish goes through (HTTP on either listener, batches,
/// WebSocket `publish`), up to routing: validate the topic, authorise `publisher` for it,
/// count it against `rate_key`'s publish rate (when given; a batch is counted whole before
/// its messages come through here), then validate the event name and the payload. With the
/// publish hook configured, a client is authorised last, once the message is known valid,
/// by the application ([`crate::hooks::Hooks::publish`]), which sees a MessagePack payload in
/// its JSON form.
pub async fn prepare_data(
    state: &AppState,
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
    topic: &str,
    event: Option<&str>,
    data: Data<'_>,
) -> Result<Prepared, ApiError> {
    let topic = TopicName::new(topic)?;
    let hooked = state.hooks().has(Hook::Publish)
        && state.config().hook_applies(Hook::Publish, topic.as_str());
    if let Publisher::Client(caller) = publisher {
        if state.auth().publish_closed(topic.as_str()) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "clients may not publish to {:?}: its namespace is closed to them",
                    topic.as_str()
                ),
            ));
        }
        if !hooked {
            token_may_publish(state, caller, &topic)?;
        }
    }
    if let Some(key) = rate_key {
        admit(state, key, 1)?;
    }
    let event = match event {
        Some(e) => {
            Some(EventName::new(e).map_err(|e| ApiError::bad_request("bad_event", e.to_string()))?)
        }
        None => None,
    };
    let max = state.config().limits.max_payload_bytes;
    let payload = match data {
        Data::Json(data) => Payload::from_json(data.get().as_bytes()).map_err(bad_json)?,
        Data::Msgpack(bytes) => {
            if bytes.len() > max {
                return Err(too_large(format!(
                    "payload is {} bytes of MessagePack; the limit is {max}",
                    bytes.len()
                )));
            }
            Payload::from_msgpack(bytes).map_err(bad_msgpack)?
        }
    };
    if payload.len() > max {
        // A MessagePack payload is held to the limit in its JSON form too (binary grows by a
        // third in base64): every JSON subscriber gets that form.
        return Err(too_large(format!(
            "payload is {} bytes of compact JSON; the limit is {max}",
            payload.len()
        )));
    }

    if let Publisher::Client(caller) = publisher
        && hooked
    {
        let data: &RawValue = match data {
            Data::Json(data) => data,
            // The JSON form was made from a checked value: it parses.
            Data::Msgpack(_) => serde_json::from_slice(payload.as_bytes()).map_err(bad_json)?,
        };
        let event = event.as_ref().map(|e| e.as_str());
        if !state
            .hooks()
            .publish(caller, topic.as_str(), event, data)
            .await?
        {
            token_may_publish(state, caller, &topic)?;
        }
    }
    Ok(Prepared {
        topic,
        event,
        payload,
    })
}

/// The token rule for a client's publish: its `publish` claim must match the topic.
fn token_may_publish(
    state: &AppState,
    caller: &Caller<'_>,
    topic: &TopicName,
) -> Result<(), ApiError> {
    if state.auth().may_publish(caller.who, topic.as_str()) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "publishing to {:?} needs an API key or a token whose publish claim allows it",
            topic.as_str()
        ),
    ))
}

/// The pipeline's last step: to the publishing bridge, or the local registry; counted in
/// `herald_messages_published_total{source}`.
pub async fn route(
    state: &AppState,
    prepared: Prepared,
    source: &'static str,
) -> Result<(TopicName, herald_core::Cursor), ApiError> {
    let Prepared {
        topic,
        event,
        payload,
    } = prepared;
    let id = state.publish(&topic, event, payload).await?;
    metrics::published(source);
    Ok((topic, id))
}

fn too_large(reason: String) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", reason)
}

/// A 400 `bad_msgpack` with the reason (malformed, or a value with no JSON form).
pub fn bad_msgpack(e: herald_core::msgpack::MsgpackError) -> ApiError {
    ApiError::bad_request("bad_msgpack", e.to_string())
}

/// A 400 `bad_json` with the parser's words.
pub fn bad_json(e: serde_json::Error) -> ApiError {
    ApiError::bad_request("bad_json", e.to_string())
}
