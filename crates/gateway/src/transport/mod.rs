//! Client transports: SSE, WebSocket and long-poll, and what they share.

pub(crate) mod answer;
pub mod poll;
pub mod sse;
pub mod ws;

use std::sync::Arc;

use std::time::Duration;

use herald_core::{Feed, ResumeList, Start, Topic, TopicName};

use crate::app::AppState;
use crate::config::hooks::SubscribePatterns;
use crate::error::ApiError;
use crate::hooks::{Caller, Hook, SubscribeVerdict};
use crate::limits::QuotaCharge;

/// The form of an SSE stream's messages (`format` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
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
pub struct SubscribeQuery {
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
    /// against the bounds: [`asked_interval`]).
    pub heartbeat: Option<f64>,
    /// `timeout`: seconds a long-poll may be held.
    pub timeout: Option<String>,
    /// `token`: a JWT, for clients that cannot set `Authorization`.
    pub token: Option<String>,
    /// `format`: `text` or `json`.
    pub format: Format,
}

impl SubscribeQuery {
    /// Parses the query; unknown parameters are ignored (cache busters and the like). A
    /// query without a topic is refused unless `topics_may_come` (the connect hook may give
    /// them; [`authorize`] checks again).
    pub fn parse(
        query: Option<&str>,
        max_topics: usize,
        topics_may_come: bool,
    ) -> Result<Self, ApiError> {
        let mut parsed = Self::default();
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*key {
                "topic" => {
                    let topic = TopicName::subscription(&value)?;
                    if !parsed.topics.contains(&topic) {
                        if parsed.topics.len() >= max_topics {
                            return Err(too_many_topics(max_topics));
                        }
                        parsed.topics.push(topic);
                    }
                }
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
                "format" => {
                    parsed.format = match &*value {
                        "text" => Format::Text,
                        "json" => Format::Json,
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
        if parsed.topics.is_empty() && !topics_may_come {
            return Err(no_topic());
        }
        Ok(parsed)
    }
}

/// Checks the browser origin, the client's token and the application's connect hook, and
/// that the client may subscribe to every one of the query's topics ([`may_subscribe`]).
/// Topics the connect hook gave are added to the query (they need no further check: the
/// application asked); a query left with no topic is refused. `transport`, `client` (the
/// connection's id, when it will have one) and `peer` are what the hooks are told. Returns
/// the origin to allow in CORS headers, and who the client is. Every path that serves SSE
/// and long-poll decides here.
pub async fn authorize(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    query: &mut SubscribeQuery,
    transport: &'static str,
    client: Option<u64>,
    peer: std::net::IpAddr,
) -> Result<(Option<String>, crate::auth::Identity), ApiError> {
    let origin = state.auth().check_origin(headers)?.map(str::to_owned);
    let mut who = state.auth().identify(headers, query.token.as_deref())?;
    let forwarded = state.hooks().forwarded(headers);
    let mut granted = Vec::new();
    if state.hooks().has(Hook::Connect) {
        let names: Vec<&str> = query.topics.iter().map(TopicName::as_str).collect();
        let caller = Caller {
            transport,
            client,
            remote: peer,
            who: &who,
            headers: &forwarded,
        };
        if let Some(grant) = state.hooks().connect(&caller, &names).await? {
            grant.apply(&mut who);
            granted = grant.topics;
        }
    }
    let asked: Vec<&str> = query
        .topics
        .iter()
        .map(TopicName::as_str)
        .filter(|t| !granted.iter().any(|g| g == t))
        .collect();
    let caller = Caller {
        transport,
        client,
        remote: peer,
        who: &who,
        headers: &forwarded,
    };
    may_subscribe(state, &caller, &asked).await?;
    let max = state.config().limits.max_subscriptions;
    for topic in granted {
        let topic = TopicName::new(&topic)?;
        if !query.topics.contains(&topic) {
            if query.topics.len() >= max {
                return Err(too_many_topics(max));
            }
            query.topics.push(topic);
        }
    }
    if query.topics.is_empty() {
        return Err(no_topic());
    }
    Ok((origin, who))
}

/// Whether the client `caller` names may subscribe to `topics` (all or nothing): the
/// application's subscribe hook decides when it is configured; otherwise, or when it is
/// unavailable and `hooks.on_unavailable = "allow"`, the token rules do. The one decision
/// for every transport (SSE, long-poll, the WebSocket `subscribe` command).
pub async fn may_subscribe(
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
    let (asked, mut ruled): (Vec<&str>, Vec<&str>) = topics.iter().partition(|t| {
        !crate::auth::is_personal(t)
            && state
                .config()
                .hook_applies(crate::hooks::Hook::Subscribe, t)
    });
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

fn too_many_topics(max: usize) -> ApiError {
    ApiError::bad_request(
        "too_many_topics",
        format!("at most {max} topics per connection"),
    )
}

fn no_topic() -> ApiError {
    ApiError::bad_request(
        "no_topic",
        "give at least one topic: ?topic=NAME (repeat for more)",
    )
}

/// The topics a subscription created, charged to its client while it lasts (see
/// [`crate::limits::TopicQuota`]).
pub type Charges = Vec<QuotaCharge>;

/// The topic `name` for a subscription by `client` (a [`crate::limits::publisher_key`]):
/// found, or created, in which case the client is charged for it (the charge is returned,
/// to be held as long as the subscription).
pub fn topic_for_subscriber(
    state: &AppState,
    name: &TopicName,
    client: &str,
) -> Result<(Arc<Topic>, Option<QuotaCharge>), ApiError> {
    if let Some(topic) = state.registry().get(name.as_str()) {
        return Ok((topic, None));
    }
    let charge = state.topic_quota().charge(client)?;
    let (topic, created) = state.registry().get_or_create_for_subscriber(name)?;
    Ok((topic, created.then_some(charge)))
}

/// The charge for a pattern that `client`'s subscription makes new on this node (none when
/// the node holds it already): a new pattern pins a channel on the node as a new topic pins
/// a topic, so it counts against a per-client quota of its own
/// (`limits.max_new_patterns_per_client`), and a few clients cannot take the node's
/// `topics.max_patterns` from everyone else.
pub fn pattern_charge(
    state: &AppState,
    pattern: &TopicName,
    client: &str,
) -> Result<Option<QuotaCharge>, ApiError> {
    if state.registry().patterns().holds(pattern.prefix()) {
        return Ok(None);
    }
    state.pattern_quota().charge(client).map(Some)
}

/// A server-side subscription (the admin API's `POST /v1/users/{user}/subscribe`, or a
/// message sent to a user): `topics` added to `feed` from their live head (or after `after`), created when new and not charged to the client (the
/// application asked, and the registry's own limit holds); all or nothing within the
/// connection's topic limit. Returns each added topic with its starting position.
pub fn subscribe_from_server(
    state: &AppState,
    feed: &mut Feed,
    topics: &[String],
    after: Option<herald_core::Cursor>,
) -> Result<Vec<(TopicName, herald_core::Cursor)>, ApiError> {
    let names = topics
        .iter()
        .map(|t| TopicName::new(t).map_err(ApiError::from))
        .collect::<Result<Vec<_>, _>>()?;
    let new = names
        .iter()
        .filter(|n| !feed.positions().any(|(t, _)| t == *n))
        .count();
    let max = state.config().limits.max_subscriptions;
    if feed.len() + new > max {
        return Err(ApiError::bad_request(
            "too_many_topics",
            format!("at most {max} topics per connection"),
        ));
    }
    let found = names
        .iter()
        .map(|n| state.registry().get_or_create(n).map_err(ApiError::from))
        .collect::<Result<Vec<_>, _>>()?;
    let mut started = Vec::with_capacity(found.len());
    for topic in found {
        let name = topic.name().clone();
        if feed.positions().any(|(t, _)| *t == name) {
            continue; // held already: nothing to tell
        }
        let start = feed
            .subscribe(topic, after)
            .map_err(|e| ApiError::bad_request("too_many_topics", e.to_string()))?;
        started.push((name, start));
    }
    Ok(started)
}

/// A server-side unsubscription: the topics of `topics` that `feed` held, now dropped.
pub fn unsubscribe_from_server(feed: &mut Feed, topics: &[String]) -> Vec<String> {
    topics
        .iter()
        .filter(|t| feed.unsubscribe(t))
        .cloned()
        .collect()
}

/// A feed subscribed to `topics` for `client`, each resumed from its entry in `resume` when
/// it has one, else started with the newest `last` messages or live; all or nothing. Returns
/// the charges for the topics it created. A pattern among `topics` (`orders.*`) resumes the
/// topics of `resume` it matches and delivers the others it matches live
/// ([`Feed::subscribe_pattern`]; `last` does not apply to it).
pub fn open_feed(
    state: &AppState,
    topics: &[TopicName],
    resume: &ResumeList,
    last: Option<usize>,
    client: &str,
) -> Result<(Feed, Charges), ApiError> {
    let config = state.config();
    let mut charges = Charges::new();
    let mut found = Vec::with_capacity(topics.len());
    for name in topics.iter().filter(|t| !t.is_pattern()) {
        let (topic, charge) = topic_for_subscriber(state, name, client)?;
        charges.extend(charge);
        found.push(topic);
    }
    let mut feed = Feed::new(config.lag_policy, config.limits.max_subscriptions);
    for topic in found {
        let from = start_of(resume.get(topic.name().as_str()), last);
        feed.subscribe_from(topic, from)
            .map_err(|e| ApiError::bad_request("too_many_topics", e.to_string()))?;
    }
    for pattern in topics.iter().filter(|t| t.is_pattern()) {
        charges.extend(pattern_charge(state, pattern, client)?);
        let resume = resume.iter().map(|(t, c)| (t, *c));
        feed.subscribe_pattern(state.registry(), pattern.clone(), resume)
            .map_err(feed_error)?;
    }
    Ok((feed, charges))
}

/// A feed's refusal: the connection's limit (`400 too_many_topics`) or the node's
/// (`503 topic_limit`).
pub fn feed_error(e: herald_core::FeedError) -> ApiError {
    match e {
        herald_core::FeedError::Registry(e) => e.into(),
        other => ApiError::bad_request("too_many_topics", other.to_string()),
    }
}

/// When a keep-alive timer (a WebSocket ping, an SSE heartbeat) with interval `every`, last
/// reset at `after`, fires: the first point at or after `after + every` of a grid shared by
/// every connection ([`on_grid`]).
pub fn next_keep_alive(after: tokio::time::Instant, every: Duration) -> tokio::time::Instant {
    on_grid(after + every, every)
}

/// The first point at or after `at` of a grid shared by every connection, its step a
/// sixteenth of `every` (the timer's interval) and at most a second.
///
/// Why: a connection's timer follows the time it opened, so 15,000 connections pinged every
/// 30 s wake the process 500 times a second, at 500 different moments, and their pongs come
/// back one at a time: an idle thread woken for each. On the grid, the timers due within the
/// same second fire together, in one wake-up, and their pongs arrive together (measured in
/// BENCHMARKS.md, "Keep-alive timers on a grid"). A timer fires at most one step late.
fn on_grid(at: tokio::time::Instant, every: Duration) -> tokio::time::Instant {
    static EPOCH: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(tokio::time::Instant::now);
    let step = (every / 16).clamp(Duration::from_millis(1), Duration::from_secs(1));
    let since = at.saturating_duration_since(epoch).as_nanos();
    let step_ns = step.as_nanos();
    let steps = since.div_ceil(step_ns);
    // Past `u64` nanoseconds (584 years) there is nothing to align to.
    u64::try_from(steps * step_ns).map_or(at, |ns| epoch + Duration::from_nanos(ns))
}

/// A heartbeat interval a client asked for, `seconds`, if it lies within `[min, max]`
/// (`sse.min_heartbeat`..`sse.max_heartbeat`, `ws.min_ping_interval`..`ws.max_ping_interval`).
pub fn asked_interval(seconds: f64, min: Duration, max: Duration) -> Result<Duration, ApiError> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| (min..=max).contains(d))
        .ok_or_else(|| {
            ApiError::bad_request(
                "bad_heartbeat",
                format!(
                    "a heartbeat is {} to {} seconds",
                    min.as_secs_f64(),
                    max.as_secs_f64()
                ),
            )
        })
}

/// Where a subscription starts: after the client's cursor when it gave one, else with the
/// newest `last` messages when it asked for them, else live.
pub fn start_of(cursor: Option<herald_core::Cursor>, last: Option<usize>) -> Start {
    match (cursor, last) {
        (Some(cursor), _) => Start::After(cursor),
        (None, Some(n)) => Start::Last(n),
        (None, None) => Start::Live,
    }
}

/// What a feed event means for a client, whatever its transport; each transport writes it
/// in its own framing (SSE event, WebSocket frame, poll entry).
#[derive(Debug)]
pub enum Delivery {
    /// Deliver the message.
    Message(Arc<herald_core::Message>),
    /// Tell the client that messages of `topic` were lost (JSON: [`lost_json`]).
    Lost {
        /// The topic.
        topic: TopicName,
        /// Why.
        reason: herald_core::LossReason,
    },
    /// Nothing to send (a lag recovered from history; the replay follows).
    Nothing,
    /// Close the connection: too slow on `topic`.
    Disconnect {
        /// The topic it lagged on.
        topic: TopicName,
    },
    /// Bytes to write as they are: the rest of a frame the topic's fan-out wrote in part to
    /// a directly served socket (only a feed the transport linked gives these).
    Rest(bytes::Bytes),
}

/// Maps a feed event to what the client sees, counting the slow-consumer outcomes in one
/// place for every transport.
pub fn deliver(
    event: herald_core::FeedEvent,
    transport: &'static str,
    config: &crate::Config,
) -> Delivery {
    use crate::telemetry::metrics::slow_consumer_in;
    use herald_core::{FeedEvent, LossReason};
    let namespace = |topic: &TopicName| {
        config
            .namespace(topic.as_str())
            .map_or("default", |(n, _)| n)
    };
    match event {
        FeedEvent::Message(message) => Delivery::Message(message),
        FeedEvent::Lost { topic, reason } => {
            if reason == LossReason::Lagged {
                slow_consumer_in("lost", namespace(&topic));
            }
            Delivery::Lost { topic, reason }
        }
        FeedEvent::Recovered { topic, .. } => {
            slow_consumer_in("recovered", namespace(&topic));
            Delivery::Nothing
        }
        FeedEvent::Coalesced { topic, skipped } => {
            slow_consumer_in("coalesced", namespace(&topic));
            tracing::trace!(%topic, skipped, transport, "a slow consumer skipped to the newest");
            Delivery::Nothing
        }
        FeedEvent::Disconnect { topic, missed } => {
            slow_consumer_in("disconnected", namespace(&topic));
            tracing::debug!(%topic, missed, transport, "disconnecting a slow consumer");
            Delivery::Disconnect { topic }
        }
        FeedEvent::Rest(rest) => Delivery::Rest(rest),
    }
}

/// The JSON of a loss signal: `{"topic":..,"reason":..}`.
pub fn lost_json(topic: &TopicName, reason: herald_core::LossReason) -> String {
    format!(r#"{{"topic":"{topic}","reason":"{}"}}"#, reason.as_str())
}

/// The client's address, as the accept loop attached it to the request (unspecified when
/// a request is served without one, as in router tests).
pub fn peer_ip<B>(request: &axum::http::Request<B>) -> std::net::IpAddr {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0.ip())
}

/// A random duration up to `max`, to spread reconnections.
pub fn jitter(max: std::time::Duration) -> std::time::Duration {
    let ms = max.as_millis().min(u64::MAX as u128) as u64;
    std::time::Duration::from_millis(if ms == 0 {
        0
    } else {
        rand::random_range(0..=ms)
    })
}

#[cfg(test)]
mod tests {
    use super::{next_keep_alive, on_grid};
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn keep_alive_timers_due_within_one_step_fire_together() {
        let every = Duration::from_secs(30); // a step of 1 s
        let base = on_grid(Instant::now() + every, every);
        // Timers due anywhere within the step before a grid point all fire at that point.
        for late in [1, 250, 999] {
            let at = base + Duration::from_millis(late);
            let fires = on_grid(at, every);
            assert_eq!(fires, base + Duration::from_secs(1), "due {late} ms after");
        }
        // A point on the grid is its own.
        assert_eq!(on_grid(base, every), base);
    }

    #[test]
    fn two_connections_reset_apart_are_pinged_in_one_wake_up() {
        let every = Duration::from_secs(30);
        // Take a moment just past a grid point, so that both resets fall in one step.
        let first = on_grid(Instant::now(), every) + Duration::from_millis(10);
        let second = first + Duration::from_millis(300);
        let due = next_keep_alive(first, every);
        assert_eq!(due, next_keep_alive(second, every));
        assert!(due >= second + every && due - (first + every) <= Duration::from_secs(1));
    }

    #[test]
    fn the_grid_step_is_a_sixteenth_of_the_interval_at_most_a_second() {
        for (every, step) in [
            (Duration::from_secs(5), Duration::from_micros(312_500)),
            (Duration::from_secs(16), Duration::from_secs(1)),
            (Duration::from_secs(300), Duration::from_secs(1)),
        ] {
            let start = on_grid(Instant::now() + every, every);
            for offset in [Duration::from_millis(1), step / 2, step] {
                let fires = on_grid(start + offset, every);
                assert!(fires >= start + offset, "never early");
                assert!(fires - start <= step, "at most one step late ({every:?})");
            }
        }
    }
}
