//! `POST /v1/publish` and `POST /v1/publish/batch`: each handler parses its request into
//! [`Draft`]s and calls the publish pipeline ([`crate::publish`]) once, for the message
//! ([`publish::one`]) or the batch ([`publish::batch`]), then answers with what it gave back.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::net::SocketAddr;

use crate::app::AppState;
use crate::auth::Identity;
use crate::config::Config;
use crate::error::ApiError;
use crate::hooks::{Caller, Forwarded, Hook};
use crate::publish::{self, Data, Draft, Publisher, Routed, bad_json, bad_msgpack};
use crate::telemetry::metrics;
use crate::telemetry::trace::Carried;

/// Largest request body accepted: room for a batch of maximal payloads.
pub(crate) fn body_limit(config: &Config) -> usize {
    (config.limits.max_payload_bytes + 1024)
        .saturating_mul(2)
        .max(config.limits.max_payload_bytes.saturating_mul(4))
        .min(64 << 20)
}

/// A request body, read whole within `limits.body_read_timeout` and under [`body_limit`]:
/// a body declared larger gets 413 before anything is read, one that arrives too slowly 408
/// (a trickling body would otherwise hold its connection for as long as the client likes).
#[derive(Debug)]
pub(crate) struct RequestBody(pub Bytes);

impl FromRequest<AppState> for RequestBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = body_limit(state.config());
        let too_large = || {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("request body is over the size limit of {limit} bytes"),
            )
        };
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(too_large());
        }
        let timeout = state.config().limits.body_read_timeout;
        match tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), limit)).await {
            Ok(Ok(body)) => Ok(Self(body)),
            Ok(Err(e)) if is_length_limit(&e) => Err(too_large()),
            Ok(Err(e)) => Err(ApiError::bad_request("bad_body", e.to_string())),
            Err(_) => Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "request body not received within {}",
                    humantime::format_duration(timeout)
                ),
            )),
        }
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// One message to publish.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishRequest {
    /// Topic name.
    topic: String,
    /// Any JSON value.
    data: Box<RawValue>,
    /// Optional event name.
    #[serde(default)]
    event: Option<String>,
    /// Optional idempotency key: a retry with the same key to the same topic within
    /// `cluster.idempotency_window` is answered with the first publish's id.
    #[serde(default)]
    idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchRequest {
    messages: Vec<Box<RawValue>>,
}

/// Whether a request body is MessagePack: `Content-Type: application/msgpack` (or the
/// older `application/x-msgpack`, `application/vnd.msgpack`); any other body is JSON.
pub(crate) fn is_msgpack(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            let v = v.trim();
            [
                "application/msgpack",
                "application/x-msgpack",
                "application/vnd.msgpack",
            ]
            .iter()
            .any(|t| v.eq_ignore_ascii_case(t))
        })
}

/// A message's draft from its JSON request.
fn json_draft(request: &PublishRequest) -> Draft<'_> {
    Draft {
        topic: &request.topic,
        event: request.event.as_deref(),
        data: Data::Json(&request.data),
        idempotency: request.idempotency_key.as_deref(),
    }
}

/// A message's draft from a MessagePack map with the fields of [`PublishRequest`]: `topic` (a
/// string), `data` (any value with a JSON form, carried as given), `event` and
/// `idempotency_key` (a string or nil).
fn msgpack_draft(body: &[u8]) -> Result<Draft<'_>, ApiError> {
    use herald_core::msgpack;
    let fields = msgpack::map_fields(body).map_err(bad_msgpack)?;
    let (mut topic, mut event, mut data, mut idempotency) = (None, None, None, None);
    for (key, raw) in fields {
        let string = |field: &str| {
            msgpack::as_str(raw).ok_or_else(|| {
                ApiError::bad_request("bad_msgpack", format!("{field:?} must be a string"))
            })
        };
        match key {
            "topic" => topic = Some(string("topic")?),
            "event" if msgpack::is_nil(raw) => event = None,
            "event" => event = Some(string("event")?),
            "idempotency_key" if msgpack::is_nil(raw) => idempotency = None,
            "idempotency_key" => idempotency = Some(string("idempotency_key")?),
            "data" => data = Some(raw),
            other => {
                return Err(ApiError::bad_request(
                    "bad_msgpack",
                    format!(
                        "unknown field {other:?}, expected topic, data, event or idempotency_key"
                    ),
                ));
            }
        }
    }
    let missing =
        |field: &str| ApiError::bad_request("bad_msgpack", format!("missing field {field:?}"));
    Ok(Draft {
        topic: topic.ok_or_else(|| missing("topic"))?,
        event,
        data: Data::Msgpack(data.ok_or_else(|| missing("data"))?),
        idempotency,
    })
}

/// `POST /v1/publish` on the admin listener: publishes one message; answers
/// `{"id": cursor, "topic": name}`. The body is JSON, or MessagePack with
/// `Content-Type: application/msgpack`.
pub(crate) async fn post_one(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    counted(async {
        let RequestBody(body) = body?;
        answer_one(&state, &headers, &body, &Publisher::Trusted, None).await
    })
    .await
}

/// One message from a request's body, in the format its Content-Type names, through the
/// pipeline.
async fn answer_one(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let request: PublishRequest;
    let mut draft = if is_msgpack(headers) {
        msgpack_draft(body)?
    } else {
        request = serde_json::from_slice(body).map_err(bad_json)?;
        json_draft(&request)
    };
    if let Some(header) = idempotency_header(headers)? {
        if draft.idempotency.is_some_and(|body| body != header) {
            return Err(ApiError::bad_request(
                "bad_idempotency_key",
                "the Idempotency-Key header and the body's idempotency_key differ",
            ));
        }
        draft.idempotency = Some(header);
    }
    let routed = publish::one(
        state,
        publisher,
        rate_key,
        draft,
        "http",
        carried(state, headers),
    )
    .await?;
    Ok(Json(receipt(&routed)))
}

/// The `Idempotency-Key` header of a single publish, when it has one (a value that is not
/// visible ASCII is refused here, the rest by the pipeline).
fn idempotency_header(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    value.to_str().map(Some).map_err(|_| {
        ApiError::bad_request(
            "bad_idempotency_key",
            "an idempotency key is visible ASCII (! to ~, no space)",
        )
    })
}

/// The header of a single publish's idempotency key (the IETF draft's name).
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The request's trace context (`traceparent`, `tracestate` headers), read when tracing is on.
fn carried<'a>(state: &AppState, headers: &'a HeaderMap) -> Carried<'a> {
    match state.tracing().is_on() {
        true => Carried::from_headers(headers),
        false => Carried::NONE,
    }
}

/// Counts a refused publish in `herald_client_errors_total{transport="http",reason=code}`.
async fn counted<T>(handler: impl Future<Output = Result<T, ApiError>>) -> Result<T, ApiError> {
    handler
        .await
        .inspect_err(|e| metrics::client_error("http", e.code()))
}

/// Who publishes on the public listener, with the key of their rate limit: `None` for a
/// trusted publisher (an API key, dev mode), else the client's identity (a token's; none at
/// all when the publish hook decides).
fn public_publisher(
    state: &AppState,
    headers: &HeaderMap,
    peer: std::net::IpAddr,
) -> Result<(Option<Identity>, String), ApiError> {
    if state.auth().api_key_ok(headers) {
        let key = headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        return Ok((None, format!("key:{key}")));
    }
    if state.config().dev {
        return Ok((None, state.client_key(None, peer)));
    }
    if headers.contains_key("x-api-key") {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "unknown API key",
        ));
    }
    // A client publishing in its own name is checked as its subscriptions are: a page of a
    // site not allowed (or of another site, while the hooks read cookies) is refused, so
    // that a form on another site cannot publish with the user's cookies.
    state.auth().check_origin(headers)?;
    match state.auth().identify(headers, None)? {
        // Without credentials only where the publish hook or a namespace open to client
        // publishing (`publish = true`) may allow it: the pipeline decides per topic.
        who if who.sub.is_some()
            || who.expires.is_some()
            || state.hooks().has(Hook::Publish)
            || state.config().clients_publish_somewhere() =>
        {
            let key = state.client_key(who.sub.as_deref(), peer);
            Ok((Some(who), key))
        }
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "publishing here needs an x-api-key header or a bearer token allowed to publish",
        )),
    }
}

/// `POST /v1/publish` on the public listener: needs an API key or a token allowed to publish
/// to the topic (dev mode: nothing).
pub(crate) async fn post_one_public(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    counted(async {
        let (who, key) = public_publisher(&state, &headers, peer.ip())?;
        let forwarded = state.hooks().forwarded(&headers);
        let publisher = client_publisher(who.as_ref(), peer.ip(), &forwarded);
        let RequestBody(body) = body?;
        answer_one(&state, &headers, &body, &publisher, Some(&key)).await
    })
    .await
}

/// `POST /v1/publish/batch` on the public listener, with the rules of [`post_one_public`].
pub(crate) async fn post_batch_public(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    counted(async {
        let (who, key) = public_publisher(&state, &headers, peer.ip())?;
        let forwarded = state.hooks().forwarded(&headers);
        let publisher = client_publisher(who.as_ref(), peer.ip(), &forwarded);
        answer_batch(&state, &headers, body, &publisher, Some(&key)).await
    })
    .await
}

/// The publisher of a public request: trusted without an identity, else a client of the
/// HTTP API (the hooks see `"transport": "http"`).
fn client_publisher<'a>(
    who: Option<&'a Identity>,
    peer: std::net::IpAddr,
    headers: &'a Forwarded,
) -> Publisher<'a> {
    match who {
        None => Publisher::Trusted,
        Some(who) => Publisher::Client(Caller {
            transport: "http",
            client: None,
            remote: peer,
            who,
            headers,
        }),
    }
}

/// `POST /v1/publish/batch` on the admin listener: publishes up to
/// `limits.max_batch_publish` messages in order; answers
/// `{"results": [{"id":..,"topic":..} | {"code":..,"reason":..}, ...]}`, one per message, so
/// that one bad message does not stop the others.
pub(crate) async fn post_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    counted(answer_batch(
        &state,
        &headers,
        body,
        &Publisher::Trusted,
        None,
    ))
    .await
}

/// A batch from a request's body, in the format its Content-Type names, through the
/// pipeline; `rate_key` names the publisher's rate limit (public listener), which the whole
/// batch must fit in.
async fn answer_batch(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<RequestBody, ApiError>,
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let RequestBody(body) = body?;
    if headers.contains_key(IDEMPOTENCY_KEY) {
        return Err(ApiError::bad_request(
            "bad_idempotency_key",
            "a batch takes an idempotency_key per message, not the Idempotency-Key header",
        ));
    }
    let routed = if is_msgpack(headers) {
        // `{"messages": [...]}` as a MessagePack map.
        let fields = herald_core::msgpack::map_fields(&body).map_err(bad_msgpack)?;
        let messages = match &fields[..] {
            [("messages", raw)] => herald_core::msgpack::array_items(raw).map_err(bad_msgpack)?,
            _ => {
                return Err(ApiError::bad_request(
                    "bad_msgpack",
                    "a batch is a map with one field, \"messages\", an array",
                ));
            }
        };
        batch_size(state, messages.len())?;
        let drafts = messages.into_iter().map(msgpack_draft).collect();
        publish::batch(
            state,
            publisher,
            rate_key,
            drafts,
            "http",
            carried(state, headers),
        )
        .await?
    } else {
        // Kept as the JSON text of each message, parsed one by one.
        let batch: BatchRequest = serde_json::from_slice(&body).map_err(bad_json)?;
        batch_size(state, batch.messages.len())?;
        let parsed: Vec<Result<PublishRequest, ApiError>> = batch
            .messages
            .iter()
            .map(|raw| serde_json::from_str(raw.get()).map_err(bad_json))
            .collect();
        let drafts = parsed
            .iter()
            .map(|p| p.as_ref().map(json_draft).map_err(Clone::clone))
            .collect();
        publish::batch(
            state,
            publisher,
            rate_key,
            drafts,
            "http",
            carried(state, headers),
        )
        .await?
    };
    let results: Vec<serde_json::Value> = routed
        .iter()
        .map(|result| match result {
            Ok(routed) => receipt(routed),
            Err(e) => batch_error(e),
        })
        .collect();
    Ok(Json(serde_json::json!({ "results": results })))
}

/// A batch holds at most `limits.max_batch_publish` messages.
fn batch_size(state: &AppState, messages: usize) -> Result<(), ApiError> {
    let max = state.config().limits.max_batch_publish;
    if messages > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!("a batch holds at most {max} messages"),
        ));
    }
    Ok(())
}

/// The answer for a message the pipeline routed: its id and topic.
fn receipt((topic, id): &Routed) -> serde_json::Value {
    serde_json::json!({ "id": id.to_string(), "topic": topic.as_str() })
}

/// A batch's result for a message that was refused.
fn batch_error(e: &ApiError) -> serde_json::Value {
    let text = e.to_string();
    let reason = text.split_once(": ").map_or(text.as_str(), |(_, r)| r);
    serde_json::json!({ "code": e.code(), "reason": reason })
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use serde_json::{Value, json};
    use tower::ServiceExt as _;

    use super::*;

    /// `POST path` on the admin listener with `body` as `content_type`: the status and the
    /// JSON answer.
    async fn post(
        state: &AppState,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let request = axum::http::Request::post(path)
            .header("host", "localhost")
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap();
        let response = crate::routes::admin_router(state.clone())
            .oneshot(request)
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    fn json_body(value: Value) -> Vec<u8> {
        value.to_string().into_bytes()
    }

    fn msgpack_body(value: Value) -> Vec<u8> {
        rmp_serde::to_vec_named(&value).unwrap()
    }

    /// How many messages `topic` holds on this node.
    fn held(state: &AppState, topic: &str) -> u64 {
        state
            .registry()
            .get(topic)
            .map_or(0, |t| t.stats().messages)
    }

    #[tokio::test]
    async fn the_content_type_says_whether_the_body_is_json_or_msgpack() {
        let (state, _shutdown) = AppState::for_test(Config::default());
        let message = json!({"topic": "t", "data": {"n": 1}, "event": "e"});
        for (content_type, body) in [
            ("application/msgpack", msgpack_body(message.clone())),
            (
                "application/json; charset=utf-8",
                json_body(message.clone()),
            ),
        ] {
            let (status, answer) = post(&state, "/v1/publish", content_type, body).await;
            assert_eq!(status, StatusCode::OK, "{content_type}: {answer}");
            assert_eq!(answer["topic"], "t");
        }
        assert_eq!(held(&state, "t"), 2);
        // MessagePack bytes called JSON are read as JSON, and refused as such.
        let (status, answer) = post(
            &state,
            "/v1/publish",
            "application/json",
            msgpack_body(message),
        )
        .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("bad_json"))
        );
        // A MessagePack map with a field the JSON form does not have is refused too.
        let (status, answer) = post(
            &state,
            "/v1/publish",
            "application/x-msgpack",
            msgpack_body(json!({"topic": "t", "data": 1, "extra": true})),
        )
        .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("bad_msgpack"))
        );
        assert_eq!(held(&state, "t"), 2);
    }

    #[tokio::test]
    async fn a_msgpack_publish_carries_its_idempotency_key_as_a_json_one_does() {
        let (state, _shutdown) = AppState::for_test(Config::default());
        let message = json!({"topic": "t", "data": 1, "idempotency_key": "k-1"});
        let mut ids = Vec::new();
        for (content_type, body) in [
            ("application/msgpack", msgpack_body(message.clone())),
            ("application/json", json_body(message.clone())),
        ] {
            let (status, answer) = post(&state, "/v1/publish", content_type, body).await;
            assert_eq!(status, StatusCode::OK, "{content_type}: {answer}");
            ids.push(answer["id"].clone());
        }
        assert_eq!(ids[0], ids[1], "the JSON retry of a MessagePack publish");
        assert_eq!(held(&state, "t"), 1);
        for (key, code) in [
            (json!(5), "bad_msgpack"),
            (json!(""), "bad_idempotency_key"),
        ] {
            let body = msgpack_body(json!({"topic": "t", "data": 1, "idempotency_key": key}));
            let (status, answer) = post(&state, "/v1/publish", "application/msgpack", body).await;
            assert_eq!(
                (status, answer["code"].as_str()),
                (StatusCode::BAD_REQUEST, Some(code))
            );
        }
        assert_eq!(held(&state, "t"), 1);
    }

    #[tokio::test]
    async fn a_batch_over_the_limit_is_refused_whole_in_either_format() {
        let mut config = Config::default();
        config.limits.max_batch_publish = 2;
        let (state, _shutdown) = AppState::for_test(config);
        let message = json!({"topic": "t", "data": 1});
        let batch = json!({"messages": [message, message, message]});
        for (content_type, body) in [
            ("application/json", json_body(batch.clone())),
            ("application/msgpack", msgpack_body(batch.clone())),
        ] {
            let (status, answer) = post(&state, "/v1/publish/batch", content_type, body).await;
            assert_eq!(
                (status, answer["code"].as_str()),
                (StatusCode::PAYLOAD_TOO_LARGE, Some("batch_too_large")),
                "{content_type}"
            );
        }
        assert_eq!(held(&state, "t"), 0);
        // At the limit, it goes through.
        let (status, answer) = post(
            &state,
            "/v1/publish/batch",
            "application/json",
            json_body(json!({"messages": [message, message]})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(held(&state, "t"), 2);
    }

    #[tokio::test]
    async fn one_bad_message_in_a_batch_does_not_stop_the_others() {
        let (state, _shutdown) = AppState::for_test(Config::default());
        let batch = json!({"messages": [
            {"topic": "t", "data": "first"},
            {"topic": "t", "data": 1, "unknown": 2},
            {"topic": "no spaces", "data": 1},
            {"topic": "t", "data": "last"},
        ]});
        for (content_type, body) in [
            ("application/json", json_body(batch.clone())),
            ("application/msgpack", msgpack_body(batch.clone())),
        ] {
            let (status, answer) = post(&state, "/v1/publish/batch", content_type, body).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            let results = answer["results"].as_array().unwrap();
            assert_eq!(results.len(), 4, "{answer}");
            assert_eq!(results[0]["topic"], "t", "{answer}");
            assert!(results[1]["code"].is_string(), "{answer}");
            assert!(results[2]["code"].is_string(), "{answer}");
            assert_eq!(results[3]["topic"], "t", "{answer}");
        }
        assert_eq!(held(&state, "t"), 4);
        let history = state.registry().get("t").unwrap().history(None, 10);
        let data: Vec<String> = history
            .messages
            .iter()
            .map(|m| String::from_utf8_lossy(m.data().as_bytes()).into_owned())
            .collect();
        assert_eq!(data, [r#""first""#, r#""last""#, r#""first""#, r#""last""#]);
    }
}
