//! The publish pipeline every publish goes through, whoever sends it (HTTP on either
//! listener, batches, the admin API's `send`, WebSocket `publish`): [`prepare`] (topic,
//! rights, rate, event name, payload) then [`route`] (to the log that carries the topic, or the
//! local registry, through [`AppState::append`]).
//!
//! A caller parses its request into a [`Draft`] (or the draft's fields) and calls the pipeline
//! once: [`one`] for a message, [`batch`] for a batch, both prepare then route. The WebSocket
//! command calls [`prepare`] and [`route`] itself, because it reports the prepared message
//! upstream in between. The HTTP handlers are in [`crate::api::publish`]; the WebSocket
//! command in `transport::ws`.

use axum::http::StatusCode;
use herald_core::{Cursor, EventName, Payload, TopicName};
use serde_json::value::RawValue;

use crate::app::AppState;
use crate::bridge::idempotency::IdempotencyKey;
use crate::error::ApiError;
use crate::hooks::{Caller, Hook};
use crate::telemetry::metrics;
use crate::telemetry::trace::Carried;

/// Who publishes.
pub(crate) enum Publisher<'a> {
    /// The admin listener, dev mode, or a valid API key: any topic.
    Trusted,
    /// A client (a WebSocket connection, or a request with a token on the public listener):
    /// what the publish hook allows when it is configured, else the topics its token's
    /// `publish` claim allows.
    Client(Caller<'a>),
}

/// A publish that passed the pipeline's checks, ready to route.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The topic.
    pub topic: TopicName,
    /// The event name, if any.
    pub event: Option<EventName>,
    /// The payload, compact.
    pub payload: Payload,
    /// The publisher's idempotency key, if it gave one: a retry of it within
    /// `cluster.idempotency_window` is answered with the first publish's position.
    pub idempotency: Option<IdempotencyKey>,
}

/// A payload as a publisher sent it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Data<'a> {
    /// One JSON value.
    Json(&'a RawValue),
    /// One MessagePack value (`application/msgpack`, the `herald.msgpack` subprotocol),
    /// carried as given; it must have a JSON form ([`herald_core::msgpack`]).
    Msgpack(&'a [u8]),
}

/// A message as its publisher sent it, before the pipeline: what a request parses into.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draft<'a> {
    /// The topic's name, unchecked.
    pub(crate) topic: &'a str,
    /// The event name, unchecked.
    pub(crate) event: Option<&'a str>,
    /// The payload.
    pub(crate) data: Data<'a>,
    /// The idempotency key, unchecked.
    pub(crate) idempotency: Option<&'a str>,
}

/// Where a routed message went: its topic and the position it was given.
pub(crate) type Routed = (TopicName, Cursor);

/// The whole pipeline for one message: [`prepare`] then [`route`].
pub(crate) async fn one(
    state: &AppState,
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
    draft: Draft<'_>,
    source: &'static str,
    trace: Carried<'_>,
) -> Result<Routed, ApiError> {
    let prepared = prepare_draft(state, publisher, rate_key, draft).await?;
    route(state, prepared, source, trace).await
}

/// The whole pipeline for a batch: counts it whole against `rate_key`'s publish rate (when
/// given), then prepares and routes its messages in order, each refused on its own (a draft
/// the caller could not parse as it is). The publish hook, when a client publishes, is asked
/// about several at once ([`crate::hooks::Hooks::batch_window`]), and kept polled while the
/// messages before them are routed: asked one after another, a batch of 100 behind a backend
/// that answers in 10 ms took a second (and 100 s behind one that times out). Each message
/// of a traced batch (`trace`, the request's context) is a trace's publish of its own.
pub(crate) async fn batch(
    state: &AppState,
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
    drafts: Vec<Result<Draft<'_>, ApiError>>,
    source: &'static str,
    trace: Carried<'_>,
) -> Result<Vec<Result<Routed, ApiError>>, ApiError> {
    if let Some(key) = rate_key {
        admit(state, key, drafts.len())?;
    }
    let routed = route_batch(state, publisher, drafts, source, trace);
    Ok(crate::app::unsent_until_done(routed).await)
}

/// [`batch`]'s messages, prepared and routed in order. Whatever it published locally is
/// fanned out before it waits for a message to be prepared (a hook) and when it ends.
async fn route_batch(
    state: &AppState,
    publisher: &Publisher<'_>,
    drafts: Vec<Result<Draft<'_>, ApiError>>,
    source: &'static str,
    trace: Carried<'_>,
) -> Vec<Result<Routed, ApiError>> {
    use futures_util::FutureExt as _;
    use futures_util::StreamExt as _;
    let window = state.hooks().batch_window();
    let mut results = Vec::with_capacity(drafts.len());
    let mut drafts = drafts.into_iter();
    let mut preparing = futures_util::stream::FuturesOrdered::new();
    // Prepared while an earlier message was being routed, in order.
    let mut prepared = std::collections::VecDeque::new();
    loop {
        while preparing.len() + prepared.len() < window
            && let Some(draft) = drafts.next()
        {
            preparing.push_back(async move { prepare_draft(state, publisher, None, draft?).await });
        }
        let next = match prepared.pop_front() {
            Some(next) => next,
            None => {
                let ready = match preparing.next().now_or_never() {
                    Some(ready) => ready,
                    None => {
                        // A pause (a hook is asked): what was published goes out now.
                        crate::app::fan_out_unsent();
                        preparing.next().await
                    }
                };
                match ready {
                    Some(next) => next,
                    None => break,
                }
            }
        };
        let result = match next {
            Ok(message) => {
                let mut routing = std::pin::pin!(route(state, message, source, trace));
                loop {
                    tokio::select! {
                        biased;
                        routed = &mut routing => break routed,
                        Some(next) = preparing.next(), if !preparing.is_empty() => {
                            prepared.push_back(next);
                        }
                    }
                }
            }
            Err(e) => Err(e),
        };
        results.push(result);
    }
    crate::app::fan_out_unsent();
    results
}

async fn prepare_draft(
    state: &AppState,
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
    draft: Draft<'_>,
) -> Result<Prepared, ApiError> {
    prepare(
        state,
        publisher,
        rate_key,
        draft.topic,
        draft.event,
        draft.data,
        draft.idempotency,
    )
    .await
}

/// The pipeline's first step, up to routing: validate the topic and the idempotency key (a
/// client's key scoped to the client, [`IdempotencyKey::for_client`]; a retry is checked as
/// the first publish was: a publisher that may not publish it now is refused, not answered
/// the first one's id), authorise `publisher` for it,
/// count it against `rate_key`'s publish rate (when given; a batch is counted whole before
/// its messages come through here), then validate the event name and the payload. With the
/// publish hook configured, a client is authorised last, once the message is known valid,
/// by the application ([`crate::hooks::Hooks::publish`]), which sees a MessagePack payload in
/// its JSON form.
pub(crate) async fn prepare(
    state: &AppState,
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
    topic: &str,
    event: Option<&str>,
    data: Data<'_>,
    idempotency: Option<&str>,
) -> Result<Prepared, ApiError> {
    let topic = TopicName::new(topic)?;
    let idempotency = match (idempotency, publisher) {
        (None, _) => None,
        (Some(key), Publisher::Trusted) => Some(IdempotencyKey::new(key)?),
        // A client's keys are its own (its token's user, else its address).
        (Some(key), Publisher::Client(caller)) => {
            let who = match caller.who.sub.as_deref() {
                Some(sub) => format!("sub:{sub}"),
                None => format!("addr:{}", caller.remote),
            };
            Some(IdempotencyKey::for_client(key, &who)?)
        }
    };
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
        idempotency,
    })
}

/// Counts `n` publishes against `key`'s rate limit.
fn admit(state: &AppState, key: &str, n: usize) -> Result<(), ApiError> {
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

/// The pipeline's last step: hands the prepared message to the state, which appends it to the
/// log that carries its topic or to the local registry ([`AppState::append`]; a retry of an
/// idempotency key gets the first publish's position); counted in
/// `herald_messages_published_total{source}`. Traced (the `herald.publish` span, its log
/// lines with the trace id) when the publisher's context `trace` is sampled, or without one
/// by `telemetry.trace_sample_ratio`.
pub(crate) async fn route(
    state: &AppState,
    prepared: Prepared,
    source: &'static str,
    trace: Carried<'_>,
) -> Result<Routed, ApiError> {
    use tracing::Instrument as _;
    let Prepared {
        topic,
        event,
        payload,
        idempotency,
    } = prepared;
    let key = idempotency.as_ref();
    let id = match state
        .tracing()
        .publish(trace, source, &topic, payload.len())
    {
        None => state.append(&topic, event, payload, None, key).await?,
        Some(mut span) => {
            let appended = state.append(&topic, event, payload, Some(&span), key);
            let appended = appended.instrument(span.log_span()).await;
            match &appended {
                Ok(id) => span.set_id(*id),
                Err(e) => span.fail(e),
            }
            appended?
        }
    };
    metrics::published(source);
    Ok((topic, id))
}

fn too_large(reason: String) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", reason)
}

/// A 400 `bad_msgpack` with the reason (malformed, or a value with no JSON form).
pub(crate) fn bad_msgpack(e: herald_core::msgpack::MsgpackError) -> ApiError {
    ApiError::bad_request("bad_msgpack", e.to_string())
}

/// A 400 `bad_json` with the parser's words.
pub(crate) fn bad_json(e: serde_json::Error) -> ApiError {
    ApiError::bad_request("bad_json", e.to_string())
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use serde_json::json;

    use super::*;
    use crate::auth::Identity;
    use crate::config::Config;
    use crate::hooks::Forwarded;

    fn raw(value: serde_json::Value) -> Box<RawValue> {
        RawValue::from_string(value.to_string()).unwrap()
    }

    fn draft<'a>(topic: &'a str, event: Option<&'a str>, data: &'a RawValue) -> Draft<'a> {
        Draft {
            topic,
            event,
            data: Data::Json(data),
            idempotency: None,
        }
    }

    /// The refusal's status and code, for a message `publisher` sends through `prepare`.
    async fn refused(
        state: &AppState,
        publisher: &Publisher<'_>,
        rate_key: Option<&str>,
        draft: Draft<'_>,
    ) -> (StatusCode, &'static str) {
        let e = prepare_draft(state, publisher, rate_key, draft)
            .await
            .expect_err("the pipeline must refuse it");
        (e.status(), e.code())
    }

    #[tokio::test]
    async fn prepare_refuses_a_bad_topic_name_and_a_bad_event_name() {
        let (state, _shutdown) = AppState::for_test(Config::default());
        let data = raw(json!({"n": 1}));
        let bad_topic = refused(&state, &Publisher::Trusted, None, draft("a b", None, &data)).await;
        assert_eq!(bad_topic.0, StatusCode::BAD_REQUEST);
        let bad_event = draft("t", Some("bad\nevent"), &data);
        assert_eq!(
            refused(&state, &Publisher::Trusted, None, bad_event).await,
            (StatusCode::BAD_REQUEST, "bad_event")
        );
        // The same message with good names passes.
        let good = prepare_draft(
            &state,
            &Publisher::Trusted,
            None,
            draft("t", Some("e"), &data),
        )
        .await
        .unwrap();
        assert_eq!(good.topic.as_str(), "t");
        assert_eq!(good.event.as_ref().map(|e| e.as_str()), Some("e"));
        assert!(
            state.registry().get("t").is_none(),
            "prepare routes nothing"
        );
    }

    #[tokio::test]
    async fn prepare_refuses_a_payload_over_the_limit_json_or_msgpack() {
        let mut config = Config::default();
        config.limits.max_payload_bytes = 16;
        let (state, _shutdown) = AppState::for_test(config);
        let fits = raw(json!("0123456789"));
        prepare_draft(&state, &Publisher::Trusted, None, draft("t", None, &fits))
            .await
            .expect("12 bytes of JSON fit in 16");
        let big = raw(json!("0123456789abcdef"));
        assert_eq!(
            refused(&state, &Publisher::Trusted, None, draft("t", None, &big)).await,
            (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
        );
        let msgpack = rmp_serde::to_vec(&"0123456789abcdefghij").unwrap();
        let big_msgpack = Draft {
            topic: "t",
            event: None,
            data: Data::Msgpack(&msgpack),
            idempotency: None,
        };
        assert_eq!(
            refused(&state, &Publisher::Trusted, None, big_msgpack).await,
            (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
        );
    }

    #[tokio::test]
    async fn prepare_refuses_a_client_whose_token_does_not_allow_the_topic() {
        let (state, _shutdown) = AppState::for_test(Config::default());
        let who = Identity::default();
        let headers = Forwarded::default();
        let client = Publisher::Client(Caller {
            transport: "http",
            client: None,
            remote: IpAddr::V4(Ipv4Addr::LOCALHOST),
            who: &who,
            headers: &headers,
        });
        let data = raw(json!(1));
        assert_eq!(
            refused(&state, &client, None, draft("t", None, &data)).await,
            (StatusCode::FORBIDDEN, "forbidden")
        );
        // The same message from a trusted publisher passes.
        prepare_draft(&state, &Publisher::Trusted, None, draft("t", None, &data))
            .await
            .unwrap();
    }

    /// A state whose publishers get a burst of 2 and (in a test's time) nothing more.
    fn burst_of_two() -> (AppState, tokio_util::sync::CancellationToken) {
        let mut config = Config::default();
        config.limits.publish_rate_per_key = 0.001;
        config.limits.publish_burst_per_key = 2.0;
        AppState::for_test(config)
    }

    #[tokio::test]
    async fn prepare_refuses_a_key_over_its_publish_rate_and_only_that_key() {
        let (state, _shutdown) = burst_of_two();
        let data = raw(json!(1));
        let send = |key| prepare_draft(&state, &Publisher::Trusted, key, draft("t", None, &data));
        send(Some("a")).await.unwrap();
        send(Some("a")).await.unwrap();
        let e = send(Some("a")).await.expect_err("the burst of 2 is spent");
        assert_eq!(
            (e.status(), e.code()),
            (StatusCode::TOO_MANY_REQUESTS, "publish_rate")
        );
        send(Some("b"))
            .await
            .expect("another key has its own bucket");
        send(None).await.expect("no key: not counted");
    }

    #[tokio::test]
    async fn alone_route_appends_to_the_registry_at_the_position_it_answers() {
        let (state, _shutdown) = AppState::for_test(Config::default());
        let data = raw(json!({"n": 1}));
        let send = || {
            one(
                &state,
                &Publisher::Trusted,
                None,
                draft("t", None, &data),
                "http",
                Carried::NONE,
            )
        };
        let (topic, first) = send().await.unwrap();
        let (_, second) = send().await.unwrap();
        assert_eq!(topic.as_str(), "t");
        assert_eq!(
            (second.epoch, second.seq),
            (first.epoch, first.seq + 1),
            "{first} then {second}"
        );
        let stats = state.registry().get("t").expect("the topic exists").stats();
        assert_eq!((stats.head, stats.messages), (second, 2));
    }

    #[tokio::test]
    async fn a_batch_routes_the_good_messages_in_order_and_refuses_the_bad_one() {
        let (state, _shutdown) = AppState::for_test(Config::default());
        let (a, b) = (raw(json!("a")), raw(json!("b")));
        let drafts = vec![
            Ok(draft("t", None, &a)),
            Ok(draft("bad topic", None, &a)),
            Err(ApiError::bad_request("bad_json", "unparsable")),
            Ok(draft("t", None, &b)),
        ];
        let results = batch(
            &state,
            &Publisher::Trusted,
            None,
            drafts,
            "http",
            Carried::NONE,
        )
        .await
        .unwrap();
        let codes: Vec<_> = results
            .iter()
            .map(|r| r.as_ref().err().map(ApiError::code))
            .collect();
        assert_eq!(codes[2], Some("bad_json"));
        assert!(codes[1].is_some() && codes[0].is_none() && codes[3].is_none());
        let (first, last) = (
            &results[0].as_ref().unwrap().1,
            &results[3].as_ref().unwrap().1,
        );
        assert_eq!((last.epoch, last.seq), (first.epoch, first.seq + 1));
        assert_eq!(state.registry().get("t").unwrap().stats().messages, 2);
    }

    #[tokio::test]
    async fn a_batch_is_counted_whole_against_the_rate() {
        let (state, _shutdown) = burst_of_two();
        let data = raw(json!(1));
        let drafts = vec![Ok(draft("t", None, &data)); 3];
        let e = batch(
            &state,
            &Publisher::Trusted,
            Some("k"),
            drafts,
            "http",
            Carried::NONE,
        )
        .await
        .expect_err("3 messages do not fit a burst of 2");
        assert_eq!(e.code(), "publish_rate");
        assert!(
            state.registry().get("t").is_none(),
            "nothing of it published"
        );
    }
}
