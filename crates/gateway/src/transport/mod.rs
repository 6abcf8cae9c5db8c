//! Client transports: SSE, WebSocket and long-poll, and what they share.

pub mod poll;
pub mod sse;
pub mod ws;

use herald_core::{Feed, ResumeList, TopicName};

use crate::app::AppState;
use crate::error::ApiError;

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
    /// `timeout`: seconds a long-poll may be held.
    pub timeout: Option<String>,
    /// `token`: a JWT, for clients that cannot set `Authorization`.
    pub token: Option<String>,
    /// `format`: `text` or `json`.
    pub format: Format,
}

impl SubscribeQuery {
    /// Parses the query; unknown parameters are ignored (cache busters and the like).
    pub fn parse(query: Option<&str>, max_topics: usize) -> Result<Self, ApiError> {
        let mut parsed = Self::default();
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*key {
                "topic" => {
                    let topic = TopicName::new(&value)?;
                    if !parsed.topics.contains(&topic) {
                        if parsed.topics.len() >= max_topics {
                            return Err(ApiError::bad_request(
                                "too_many_topics",
                                format!("at most {max_topics} topics per connection"),
                            ));
                        }
                        parsed.topics.push(topic);
                    }
                }
                "lastEventId" => parsed.last_event_id = Some(value.into_owned()),
                "cursor" => parsed.cursor = Some(value.into_owned()),
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
        if parsed.topics.is_empty() {
            return Err(ApiError::bad_request(
                "no_topic",
                "give at least one topic: ?topic=NAME (repeat for more)",
            ));
        }
        Ok(parsed)
    }
}

/// Checks the browser origin and the client's token, and that it may subscribe to every one
/// of `topics`. Returns the origin to allow in CORS headers, and who the client is.
pub fn authorize(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    query: &SubscribeQuery,
) -> Result<(Option<String>, crate::auth::Identity), ApiError> {
    let origin = state.auth().check_origin(headers)?.map(str::to_owned);
    let who = state.auth().identify(headers, query.token.as_deref())?;
    if let Some(denied) = query
        .topics
        .iter()
        .find(|t| !state.auth().may_subscribe(&who, t.as_str()))
    {
        return Err(crate::auth::forbidden(denied.as_str()));
    }
    Ok((origin, who))
}

/// A feed subscribed to `topics`, each resumed from its entry in `resume` when it has one.
pub fn open_feed(
    state: &AppState,
    topics: &[TopicName],
    resume: &ResumeList,
) -> Result<Feed, ApiError> {
    let config = state.config();
    let mut feed = Feed::new(config.lag_policy, config.limits.max_subscriptions);
    for name in topics {
        let topic = state.registry().get_or_create(name)?;
        feed.subscribe(topic, resume.get(name.as_str()))
            .map_err(|e| ApiError::bad_request("too_many_topics", e.to_string()))?;
    }
    Ok(feed)
}

/// The JSON of a loss signal: `{"topic":..,"reason":..}`.
pub fn lost_json(topic: &TopicName, reason: herald_core::LossReason) -> String {
    format!(r#"{{"topic":"{topic}","reason":"{}"}}"#, reason.as_str())
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
