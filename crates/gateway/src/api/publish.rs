//! `POST /v1/publish` and `POST /v1/publish/batch`.

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
use crate::limits::publisher_key;
use crate::publish::{Data, Publisher, admit, bad_json, bad_msgpack, prepare_data, route};
use crate::telemetry::metrics;

/// Largest request body accepted: room for a batch of maximal payloads.
pub fn body_limit(config: &Config) -> usize {
    (config.limits.max_payload_bytes + 1024)
        .saturating_mul(2)
        .max(config.limits.max_payload_bytes.saturating_mul(4))
        .min(64 << 20)
}

/// A request body, read whole within `limits.body_read_timeout` and under [`body_limit`]:
/// a body declared larger gets 413 before anything is read, one that arrives too slowly 408
/// (a trickling body would otherwise hold its connection for as long as the client likes).
#[derive(Debug)]
pub struct RequestBody(pub Bytes);

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
pub struct PublishRequest {
    /// Topic name.
    topic: String,
    /// Any JSON value.
    data: Box<RawValue>,
    /// Optional event name.
    #[serde(default)]
    event: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchRequest {
    messages: Vec<Box<RawValue>>,
}

/// Whether a request body is MessagePack: `Content-Type: application/msgpack` (or the
/// older `application/x-msgpack`, `application/vnd.msgpack`); any other body is JSON.
pub fn is_msgpack(headers: &HeaderMap) -> bool {
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

/// One message of a request, JSON or MessagePack.
struct OneRequest<'a> {
    topic: &'a str,
    event: Option<&'a str>,
    data: Data<'a>,
}

impl<'a> OneRequest<'a> {
    /// Through the publish pipeline ([`prepare_data`]), up to routing.
    async fn prepare(
        self,
        state: &AppState,
        publisher: &Publisher<'_>,
        rate_key: Option<&str>,
    ) -> Result<crate::publish::Prepared, ApiError> {
        prepare_data(
            state, publisher, rate_key, self.topic, self.event, self.data,
        )
        .await
    }

    fn json(request: &'a PublishRequest) -> Self {
        Self {
            topic: &request.topic,
            event: request.event.as_deref(),
            data: Data::Json(&request.data),
        }
    }

    /// A MessagePack map with the fields of [`PublishRequest`]: `topic` (a string), `data`
    /// (any value with a JSON form, carried as given), `event` (a string or nil).
    fn msgpack(body: &'a [u8]) -> Result<Self, ApiError> {
        use herald_core::msgpack;
        let fields = msgpack::map_fields(body).map_err(bad_msgpack)?;
        let (mut topic, mut event, mut data) = (None, None, None);
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
                "data" => data = Some(raw),
                other => {
                    return Err(ApiError::bad_request(
                        "bad_msgpack",
                        format!("unknown field {other:?}, expected topic, data or event"),
                    ));
                }
            }
        }
        let missing =
            |field: &str| ApiError::bad_request("bad_msgpack", format!("missing field {field:?}"));
        Ok(Self {
            topic: topic.ok_or_else(|| missing("topic"))?,
            event,
            data: Data::Msgpack(data.ok_or_else(|| missing("data"))?),
        })
    }
}

/// Publishes one message; answers `{"id": cursor, "topic": name}`. The body is JSON, or
/// MessagePack with `Content-Type: application/msgpack`.
pub async fn publish(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    counted(async {
        let RequestBody(body) = body?;
        publish_body(&state, &headers, &body, &Publisher::Trusted, None).await
    })
    .await
}

/// One message from a request's body, in the format its Content-Type names.
async fn publish_body(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if is_msgpack(headers) {
        let request = OneRequest::msgpack(body)?;
        return publish_one(state, request, publisher, rate_key)
            .await
            .map(Json);
    }
    let request: PublishRequest = serde_json::from_slice(body).map_err(bad_json)?;
    publish_one(state, OneRequest::json(&request), publisher, rate_key)
        .await
        .map(Json)
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
        return Ok((None, publisher_key(None, peer)));
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
            let key = publisher_key(who.sub.as_deref(), peer);
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
pub async fn publish_public(
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
        publish_body(&state, &headers, &body, &publisher, Some(&key)).await
    })
    .await
}

/// `POST /v1/publish/batch` on the public listener, with the rules of [`publish_public`].
pub async fn publish_batch_public(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    counted(async {
        let (who, key) = public_publisher(&state, &headers, peer.ip())?;
        let forwarded = state.hooks().forwarded(&headers);
        let publisher = client_publisher(who.as_ref(), peer.ip(), &forwarded);
        batch(&state, &headers, body, &publisher, Some(&key)).await
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

/// Publishes up to `limits.max_batch_publish` messages in order; answers
/// `{"results": [{"id":..,"topic":..} | {"code":..,"reason":..}, ...]}`, one per message, so
/// that one bad message does not stop the others.
pub async fn publish_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    counted(batch(&state, &headers, body, &Publisher::Trusted, None)).await
}

/// A batch; `limit_key` names the publisher's rate limit (public listener), which the whole
/// batch must fit in.
async fn batch(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<RequestBody, ApiError>,
    publisher: &Publisher<'_>,
    limit_key: Option<&str>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let RequestBody(body) = body?;
    let msgpack = is_msgpack(headers);
    let messages: Vec<&[u8]> = if msgpack {
        // `{"messages": [...]}` as a MessagePack map.
        let fields = herald_core::msgpack::map_fields(&body).map_err(bad_msgpack)?;
        match &fields[..] {
            [("messages", raw)] => herald_core::msgpack::array_items(raw).map_err(bad_msgpack)?,
            _ => {
                return Err(ApiError::bad_request(
                    "bad_msgpack",
                    "a batch is a map with one field, \"messages\", an array",
                ));
            }
        }
    } else {
        let batch: BatchRequest = serde_json::from_slice(&body).map_err(bad_json)?;
        // Kept as the JSON text of each message, parsed one by one below.
        return json_batch(state, batch, publisher, limit_key).await;
    };
    let max = state.config().limits.max_batch_publish;
    if messages.len() > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!("a batch holds at most {max} messages"),
        ));
    }
    if let Some(key) = limit_key {
        admit(state, key, messages.len())?;
    }
    let requests = messages.into_iter().map(OneRequest::msgpack).collect();
    Ok(publish_in_order(state, requests, publisher).await)
}

/// Publishes a batch's messages in order, each refused on its own. The publish hook, when a
/// client publishes, is asked about several at once ([`crate::hooks::Hooks::batch_window`]),
/// and kept polled while the messages before them are published: asked one after another, a
/// batch of 100 behind a backend that answers in 10 ms took a second (and 100 s behind one
/// that times out).
async fn publish_in_order(
    state: &AppState,
    requests: Vec<Result<OneRequest<'_>, ApiError>>,
    publisher: &Publisher<'_>,
) -> Json<serde_json::Value> {
    use futures_util::StreamExt as _;
    let window = state.hooks().batch_window();
    let mut results = Vec::with_capacity(requests.len());
    let mut requests = requests.into_iter();
    let mut preparing = futures_util::stream::FuturesOrdered::new();
    // Prepared while an earlier message was being published, in order.
    let mut prepared = std::collections::VecDeque::new();
    loop {
        while preparing.len() + prepared.len() < window
            && let Some(request) = requests.next()
        {
            preparing.push_back(prepare_one(state, publisher, request));
        }
        let next = match prepared.pop_front() {
            Some(next) => next,
            None => match preparing.next().await {
                Some(next) => next,
                None => break,
            },
        };
        let result = match next {
            Ok(message) => {
                let mut route = std::pin::pin!(routed(state, message));
                loop {
                    tokio::select! {
                        biased;
                        routed = &mut route => break routed,
                        Some(next) = preparing.next(), if !preparing.is_empty() => {
                            prepared.push_back(next);
                        }
                    }
                }
            }
            Err(e) => Err(e),
        };
        results.push(result.unwrap_or_else(|e| batch_error(&e)));
    }
    Json(serde_json::json!({ "results": results }))
}

/// One of a batch's messages through the pipeline (a refused one as it is).
async fn prepare_one(
    state: &AppState,
    publisher: &Publisher<'_>,
    request: Result<OneRequest<'_>, ApiError>,
) -> Result<crate::publish::Prepared, ApiError> {
    request?.prepare(state, publisher, None).await
}

/// A batch's result for a message that was refused.
fn batch_error(e: &ApiError) -> serde_json::Value {
    let text = e.to_string();
    let reason = text.split_once(": ").map_or(text.as_str(), |(_, r)| r);
    serde_json::json!({ "code": e.code(), "reason": reason })
}

async fn json_batch(
    state: &AppState,
    batch: BatchRequest,
    publisher: &Publisher<'_>,
    limit_key: Option<&str>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let max = state.config().limits.max_batch_publish;
    if batch.messages.len() > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!("a batch holds at most {max} messages"),
        ));
    }
    if let Some(key) = limit_key {
        admit(state, key, batch.messages.len())?;
    }
    let parsed: Vec<Result<PublishRequest, ApiError>> = batch
        .messages
        .iter()
        .map(|raw| serde_json::from_str(raw.get()).map_err(bad_json))
        .collect();
    let requests = parsed
        .iter()
        .map(|p| match p {
            Ok(request) => Ok(OneRequest::json(request)),
            Err(e) => Err(e.clone()),
        })
        .collect();
    Ok(publish_in_order(state, requests, publisher).await)
}

async fn publish_one(
    state: &AppState,
    request: OneRequest<'_>,
    publisher: &Publisher<'_>,
    rate_key: Option<&str>,
) -> Result<serde_json::Value, ApiError> {
    let prepared = request.prepare(state, publisher, rate_key).await?;
    routed(state, prepared).await
}

/// Publishes a prepared message; answers its id and topic.
async fn routed(
    state: &AppState,
    prepared: crate::publish::Prepared,
) -> Result<serde_json::Value, ApiError> {
    let (topic, id) = route(state, prepared, "http").await?;
    Ok(serde_json::json!({ "id": id.to_string(), "topic": topic.as_str() }))
}
