//! Who may connect and subscribe: the subscribe query of SSE and long-poll, the one connect
//! check every transport's opening asks ([`admit`]; [`authorize`] adds the query's topics for
//! SSE and long-poll), and the one subscribe decision ([`may_subscribe`]).

use axum::http::HeaderMap;
use herald_core::TopicName;

use crate::app::AppState;
use crate::auth::Identity;
use crate::config::hooks::SubscribePatterns;
use crate::config::namespaces::DeltaCodec;
use crate::error::ApiError;
use crate::hooks::{Caller, Forwarded, Grant, Hook, SubscribeVerdict};

/// The form of an SSE stream's messages (`format` query parameter); not to be confused
/// with a WebSocket connection's wire format (`ws::format::Format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SseForm {
    /// `format=text` (the default): `event:` when named, the payload as `data:` lines, as a
    /// browser's `EventSource` expects it.
    #[default]
    Text,
    /// `format=json`: one `data:` line per message holding `{"type":"message","topic":..,
    /// "id":..,"event":..,"data":..}` (the WebSocket frame); long-poll always answers in it.
    Json,
}

/// A subscribe request given as a URL query (SSE and long-poll):
/// `topic=a&topic=b&lastEventId=...&cursor=...&timeout=...&format=...`.
#[derive(Debug, Default)]
pub(crate) struct SubscribeQuery {
    /// The topics, in order, without duplicates.
    pub topics: Vec<TopicName>,
    /// `lastEventId`: resume list for clients that cannot set the `Last-Event-ID` header.
    pub last_event_id: Option<String>,
    /// `cursor`: the long-poll resume list.
    pub cursor: Option<String>,
    /// `last`: topics without a resume position start with the newest `last` messages
    /// history holds.
    pub last: Option<usize>,
    /// `heartbeat`: the SSE heartbeat the client asks for, in seconds (not yet checked
    /// against the bounds: [`super::asked_interval`]).
    pub heartbeat: Option<f64>,
    /// `timeout`: seconds a long-poll may be held.
    pub timeout: Option<String>,
    /// `token`: a JWT, for clients that cannot set `Authorization`.
    pub token: Option<String>,
    /// `format`: `text` or `json`.
    pub format: SseForm,
    /// `delta=fossil`: the client takes deltas where the topics' namespaces allow them
    /// (every topic's must: [`deltas_allowed`]). On SSE it implies the JSON form.
    pub delta: bool,
}

impl SubscribeQuery {
    /// Parses the query; unknown parameters are ignored (cache busters and the like). A
    /// query without a topic is refused unless `topics_may_come` (the connect hook may give
    /// them; [`authorize`] checks again).
    pub(crate) fn parse(
        query: Option<&str>,
        max_topics: usize,
        topics_may_come: bool,
    ) -> Result<Self, ApiError> {
        let mut parsed = Self::default();
        let mut text_asked = false;
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*key {
                "topic" => parsed.add(TopicName::subscription(&value)?, max_topics)?,
                "lastEventId" => parsed.last_event_id = Some(value.into_owned()),
                "cursor" => parsed.cursor = Some(value.into_owned()),
                "last" => {
                    parsed.last = Some(value.parse().map_err(|_| {
                        ApiError::bad_request("bad_last", "last must be a whole number of messages")
                    })?)
                }
                "heartbeat" => {
                    parsed.heartbeat = Some(value.parse().map_err(|_| {
                        ApiError::bad_request("bad_heartbeat", "heartbeat is a number of seconds")
                    })?)
                }
                "timeout" => parsed.timeout = Some(value.into_owned()),
                "token" => parsed.token = Some(value.into_owned()),
                "delta" => {
                    delta_codec(&value)?;
                    parsed.delta = true;
                }
                "format" => {
                    text_asked = &*value == "text";
                    parsed.format = match &*value {
                        "text" => SseForm::Text,
                        "json" => SseForm::Json,
                        other => {
                            return Err(ApiError::bad_request(
                                "bad_format",
                                format!("format must be `text` or `json`, not {other:?}"),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        if parsed.delta {
            // A delta must be marked, and its base exact: the JSON form.
            if text_asked {
                return Err(ApiError::bad_request(
                    "bad_format",
                    "delta=fossil sends the JSON form: leave out format=text",
                ));
            }
            parsed.format = SseForm::Json;
        }
        if parsed.topics.is_empty() && !topics_may_come {
            return Err(no_topic());
        }
        Ok(parsed)
    }

    /// Adds `topic` unless it is there already, within `max` topics.
    fn add(&mut self, topic: TopicName, max: usize) -> Result<(), ApiError> {
        if !self.topics.contains(&topic) {
            topic_limit(self.topics.len() + 1, max)?;
            self.topics.push(topic);
        }
        Ok(())
    }
}

/// A client's `delta` value: `fossil`, else `400 bad_delta`.
pub(crate) fn delta_codec(value: &str) -> Result<DeltaCodec, ApiError> {
    DeltaCodec::parse(value).ok_or_else(|| {
        ApiError::bad_request(
            "bad_delta",
            format!("delta must be `fossil`, not {value:?}"),
        )
    })
}

/// Refuses deltas for any of `names` (topics or patterns) whose namespace does not allow
/// them (`delta = "fossil"` in its `[namespaces.<name>]`): `400 delta_not_allowed`.
pub(crate) fn deltas_allowed<'a>(
    config: &crate::config::Config,
    names: impl IntoIterator<Item = &'a TopicName>,
) -> Result<(), ApiError> {
    for name in names {
        if config
            .namespace(name.as_str())
            .and_then(|(_, ns)| ns.delta)
            .is_none()
        {
            let hint = match crate::config::namespaces::namespace_of(name.as_str()) {
                Some(ns) => format!("set delta = \"fossil\" in [namespaces.{ns}]"),
                None => "only topics of a namespace (`<namespace>:...`) that allows them".into(),
            };
            return Err(ApiError::bad_request(
                "delta_not_allowed",
                format!("{name}: deltas are not allowed here ({hint})"),
            ));
        }
    }
    Ok(())
}

/// What the connect check settled: who the client is, the origin to allow in CORS headers,
/// the topics the connect hook gave, and the request's headers the hooks forward.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// The browser origin, when the request had an allowed one.
    pub(crate) origin: Option<String>,
    /// Who the client is, the connect hook's grant applied.
    pub(crate) who: Identity,
    /// Topics the connect hook subscribed the client to (no further check: the application
    /// asked).
    pub(crate) granted: Vec<String>,
    /// The request's headers the hooks forward.
    pub(crate) forwarded: Forwarded,
}

impl Admitted {
    /// The client, as the hooks are told of it: `transport`, `client` (the connection's id,
    /// when it has one) and `peer` besides what was settled.
    pub(crate) fn caller(
        &self,
        transport: &'static str,
        client: Option<u64>,
        peer: std::net::IpAddr,
    ) -> Caller<'_> {
        Caller {
            transport,
            client,
            remote: peer,
            who: &self.who,
            headers: &self.forwarded,
        }
    }
}

/// Who a request is, before any hook is asked: the browser origin (a page from an origin that
/// is not allowed is refused), the client's credentials (its headers, or `token` from the
/// query) and the headers the hooks forward. The first half of the connect check
/// ([`admit`]), and all of it for a read that opens no connection (history).
pub(crate) fn identify(
    state: &AppState,
    headers: &HeaderMap,
    token: Option<&str>,
) -> Result<Admitted, ApiError> {
    // A page from an origin that is not allowed gets no stream and no socket (cross-site
    // WebSocket hijacking included), whatever credentials its browser attaches.
    let origin = state.auth().check_origin(headers)?.map(str::to_owned);
    let who = state.auth().identify(headers, token)?;
    let forwarded = state.hooks().forwarded(headers);
    Ok(Admitted {
        origin,
        who,
        granted: Vec::new(),
        forwarded,
    })
}

/// The one connect check of every transport (SSE on every path, long-poll, the WebSocket
/// handshake): who the request is ([`identify`]), then the application's connect hook
/// ([`ask_connect`]), told the `topics` the client asked for (none on a WebSocket, which
/// subscribes by command). `transport`, `client` (the connection's id, when it will have
/// one) and `peer` are what the hooks are told.
pub(crate) async fn admit(
    state: &AppState,
    headers: &HeaderMap,
    token: Option<&str>,
    topics: &[TopicName],
    transport: &'static str,
    client: Option<u64>,
    peer: std::net::IpAddr,
) -> Result<Admitted, ApiError> {
    let mut admitted = identify(state, headers, token)?;
    let names: Vec<&str> = topics.iter().map(TopicName::as_str).collect();
    let caller = admitted.caller(transport, client, peer);
    // The application decides before anything is answered, so that a refusal is an HTTP
    // answer with its reason.
    if let Some(grant) = ask_connect(state, &caller, &names).await? {
        grant.apply(&mut admitted.who);
        admitted.granted = grant.topics;
    }
    Ok(admitted)
}

/// The application's connect hook, asked about the client `caller` names (asking for
/// `topics`): its grant, to apply to the client's identity, or `None` when the hook is not
/// configured. Asked by the connect check ([`admit`]) and again by the WebSocket `auth`
/// command, so that a token never gets past the hook.
pub(crate) async fn ask_connect(
    state: &AppState,
    caller: &Caller<'_>,
    topics: &[&str],
) -> Result<Option<Grant>, ApiError> {
    if !state.hooks().has(Hook::Connect) {
        return Ok(None);
    }
    state.hooks().connect(caller, topics).await
}

/// The connect check ([`admit`]) for a subscribe query (SSE and long-poll), then that the
/// client may subscribe to every one of the query's topics ([`may_subscribe`]). Topics the
/// connect hook gave are added to the query (they need no further check: the application
/// asked); a query left with no topic is refused. Every path that serves SSE and long-poll
/// decides here.
pub(crate) async fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    query: &mut SubscribeQuery,
    transport: &'static str,
    client: Option<u64>,
    peer: std::net::IpAddr,
) -> Result<Admitted, ApiError> {
    if query.delta {
        // Refused before any hook is asked (`HEAD /v1/sse` included).
        deltas_allowed(state.config(), &query.topics)?;
    }
    let mut admitted = admit(
        state,
        headers,
        query.token.as_deref(),
        &query.topics,
        transport,
        client,
        peer,
    )
    .await?;
    let asked: Vec<&str> = query
        .topics
        .iter()
        .map(TopicName::as_str)
        .filter(|t| !admitted.granted.iter().any(|g| g == t))
        .collect();
    let caller = admitted.caller(transport, client, peer);
    may_subscribe(state, &caller, &asked).await?;
    let max = state.config().limits.max_subscriptions;
    for topic in std::mem::take(&mut admitted.granted) {
        query.add(TopicName::new(&topic)?, max)?;
    }
    if query.topics.is_empty() {
        return Err(no_topic());
    }
    Ok(admitted)
}

/// Whether the client `caller` names may subscribe to `topics` (all or nothing): the
/// application's subscribe hook decides when it is configured; otherwise, or when it is
/// unavailable and `hooks.on_unavailable = "allow"`, the token rules do. The one decision
/// for every transport (SSE, long-poll, the WebSocket `subscribe` command).
pub(crate) async fn may_subscribe(
    state: &AppState,
    caller: &Caller<'_>,
    topics: &[&str],
) -> Result<(), ApiError> {
    // The hook decides for the topics of namespaces it applies to; the token rules for the
    // rest, and for all when the hook is not configured (or unavailable under `allow`).
    // Personal topics keep Herald's own rule (`user:<sub>` for that user only), and a
    // namespace closed to anonymous clients stays closed to them whatever the hook says.
    if let Some(closed) = topics
        .iter()
        .find(|t| state.auth().closed_to(caller.who, t))
    {
        return Err(crate::auth::forbidden(closed));
    }
    let (asked, mut ruled): (Vec<&str>, Vec<&str>) =
        topics.iter().partition(|t| hook_may_decide(state, t));
    if let Some(pattern) = asked.iter().find(|t| t.ends_with('*'))
        && state.hooks().has(Hook::Subscribe)
        && state.config().hooks.subscribe_patterns == SubscribePatterns::Refuse
    {
        return Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "pattern_not_allowed",
            format!(
                "{pattern:?} is a pattern, and the subscribe hook decides its topics one by one; subscribe to topics (hooks.subscribe_patterns)"
            ),
        ));
    }
    let mut unvouched = Vec::new();
    if !asked.is_empty() {
        match state.hooks().subscribe(caller, &asked).await? {
            SubscribeVerdict::Allowed => {}
            SubscribeVerdict::Rules => ruled.extend(asked),
            SubscribeVerdict::Unvouched => unvouched = asked,
        }
    }
    let auth = state.auth();
    match ruled
        .iter()
        .find(|t| !auth.may_subscribe(caller.who, t))
        .or_else(|| {
            unvouched
                .iter()
                .find(|t| !auth.may_subscribe_unvouched(caller.who, t))
        }) {
        Some(denied) => Err(crate::auth::forbidden(denied)),
        None => Ok(()),
    }
}

/// Whether a client that is now `who` (a new token on a WebSocket: the `auth` command) may
/// keep `topic`, which it was allowed before: the subscribe decision ([`may_subscribe`])
/// without asking the hook again. A topic the subscribe hook decides stays (the application
/// allowed it, and a new token changes nothing there); personal topics and the rest are
/// judged by the token rules; a namespace closed to anonymous clients stays closed to them.
pub(crate) fn may_keep(state: &AppState, who: &Identity, topic: &str) -> bool {
    if state.auth().closed_to(who, topic) {
        return false;
    }
    if state.hooks().has(Hook::Subscribe) && hook_may_decide(state, topic) {
        return true;
    }
    state.auth().may_subscribe(who, topic)
}

/// Whether the subscribe hook decides `topic` when it is configured: not a personal topic
/// (their rule is Herald's own), and of a namespace the hook applies to.
fn hook_may_decide(state: &AppState, topic: &str) -> bool {
    !crate::auth::is_personal(topic) && state.config().hook_applies(Hook::Subscribe, topic)
}

/// The per-connection topic limit: a connection may hold `count` topics when it is at most
/// `max` (`limits.max_subscriptions`), else `400 too_many_topics`. Every path checks here.
pub(crate) fn topic_limit(count: usize, max: usize) -> Result<(), ApiError> {
    if count > max {
        return Err(ApiError::bad_request(
            "too_many_topics",
            format!("at most {max} topics per connection"),
        ));
    }
    Ok(())
}

fn no_topic() -> ApiError {
    ApiError::bad_request(
        "no_topic",
        "give at least one topic: ?topic=NAME (repeat for more)",
    )
}

/// The client's address, as the accept loop attached it to the request (unspecified when
/// a request is served without one, as in router tests).
pub(crate) fn peer_ip<B>(request: &axum::http::Request<B>) -> std::net::IpAddr {
    peer_of(request.extensions())
}

/// [`peer_ip`], from a request's extensions (a handler that took them apart).
pub(crate) fn peer_of(extensions: &axum::http::Extensions) -> std::net::IpAddr {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0.ip())
}
