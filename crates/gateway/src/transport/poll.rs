//! `GET /v1/poll`: long-polling. Answers at once when messages after the cursor exist, else
//! holds the request until one arrives or the timeout passes, and always returns the cursor
//! to send next. A poll that waits on a topic announcing joins and leaves also answers when
//! one arrives, in `presence` (only those that arrive while it waits: a poll holds no
//! subscription between requests).

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use herald_core::{FeedEvent, LossReason, ResumeList};

use super::access::authorize;
use super::answer::{Budget, JsonAnswer};
use super::{Delivery, SubscribeQuery, deliver, lost_json, open_query_feed};
use crate::app::AppState;
use crate::cluster::control::{Action, Disconnect, PresenceEvent};
use crate::error::ApiError;
use crate::telemetry::metrics::{self, CloseReason, Transport};

/// Answers one poll: `{"messages":[...],"lost":[...],"cursor":"..."}`.
pub(crate) async fn handler(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let peer = super::peer_ip(&request);
    let result = poll(&state, request.headers(), request.uri().query(), peer).await;
    if let Err(e) = &result {
        metrics::client_error("poll", e.code());
    }
    result
}

async fn poll(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    query: Option<&str>,
    peer: std::net::IpAddr,
) -> Result<Response, ApiError> {
    let config = state.config();
    let hooked = state.hooks().has(crate::hooks::Hook::Connect);
    let mut query = SubscribeQuery::parse(query, config.limits.max_subscriptions, hooked)?;
    let resume: ResumeList = match &query.cursor {
        Some(c) => c.parse()?,
        None => ResumeList::new(),
    };
    let timeout = match &query.timeout {
        Some(t) => {
            let secs: f64 = t
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| {
                    ApiError::bad_request("bad_timeout", "timeout must be a number of seconds")
                })?;
            // Huge values (1e300) do not fit a Duration: they mean "the longest allowed".
            Duration::try_from_secs_f64(secs)
                .unwrap_or(Duration::MAX)
                .min(config.poll.timeout)
        }
        None => config.poll.timeout,
    };
    let id = state.cluster().next_id();
    // CORS headers come from the router's layer (`api::cors`).
    let who = authorize(state, headers, &mut query, "poll", Some(id), peer)
        .await?
        .who;
    let client = state.client_key(who.sub.as_deref(), peer);
    let (mut feed, _charges) = open_query_feed(state, &query, &resume, &client).await?;
    let metrics = metrics::transport(Transport::Poll);
    let mut disconnect = None;
    let mut presence: Vec<PresenceEvent> = Vec::new();

    let mut answer = Collected {
        messages: Vec::new(),
        lost: Vec::new(),
        // At most `poll.max_batch` messages, and no more once `limits.max_answer_bytes`.
        budget: Budget::new(config.poll.max_batch, config.limits.max_answer_bytes),
    };
    answer.fill(&mut feed, config);
    if answer.messages.is_empty() && answer.lost.is_empty() && !timeout.is_zero() {
        // A waiting poll is a connection the admin API can end (`disconnect` in the answer),
        // and a presence member of its topics while it waits. One answered at once is not:
        // a client polling in a tight loop does not churn the cluster's registry.
        let mut connection = state.open_connection_as(id, Transport::Poll, &who);
        connection.closing(CloseReason::Done);
        connection.subscribed_to(feed.positions().map(|(t, _)| t));
        tokio::select! {
            event = feed.next() => {
                answer.take(event, config);
                answer.fill(&mut feed, config);
            }
            _ = tokio::time::sleep(timeout) => {}
            _ = state.shutdown().cancelled() => connection.closing(CloseReason::Shutdown),
            news = heard(&mut connection) => match news {
                Heard::Ended(ended) => disconnect = Some(ended),
                Heard::Presence(event) => {
                    presence.push(event);
                    // Those queued behind it come with it.
                    while let Some(more) =
                        futures_util::FutureExt::now_or_never(heard(&mut connection))
                    {
                        match more {
                            Heard::Presence(event) => presence.push(event),
                            Heard::Ended(ended) => {
                                disconnect = Some(ended);
                                break;
                            }
                        }
                    }
                }
            },
        }
    } else {
        // Counted as a poll all the same.
        metrics.open().closing(CloseReason::Done);
    }

    let cursor = {
        let mut s = String::new();
        ResumeList::write_entries(&mut s, feed.resume_positions());
        s
    };
    // The messages' shared frames by reference, not one fresh copy of them all.
    let mut body = JsonAnswer::default();
    body.text(br#"{"messages":["#);
    let sent = || (answer.messages.iter()).map(|(m, delta)| herald_core::Outbound::new(m, *delta));
    for m in sent() {
        metrics.delivered(m.ws_frame().len(), m.message().published_at().elapsed());
    }
    body.frames(sent());
    body.text(br#"],"lost":["#);
    body.text(answer.lost.join(",").as_bytes());
    body.text(br#"],"cursor":""#);
    body.text(cursor.as_bytes());
    // `more`: the answer stopped at its budget; poll again at once.
    let more: &[u8] = if answer.budget.full() {
        br#"","more":true"#
    } else {
        br#"","more":false"#
    };
    body.text(more);
    if !presence.is_empty() {
        body.text(br#","presence":["#);
        for (i, event) in presence.iter().enumerate() {
            if i > 0 {
                body.text(b",");
            }
            body.text(event.typed_json().as_bytes());
        }
        body.text(b"]");
    }
    if let Some(disconnect) = disconnect {
        body.text(br#","disconnect":"#);
        body.text(&serde_json::to_vec(&disconnect).unwrap_or_default());
    }
    body.text(b"}");
    let mut response = body.into_body().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// What a poll answers with: messages within its budget and loss signals.
struct Collected {
    /// Each message, and whether it goes as a delta.
    messages: Vec<(std::sync::Arc<herald_core::Message>, bool)>,
    lost: Vec<String>,
    budget: Budget,
}

impl Collected {
    /// Takes what the feed holds ready, until the budget is spent.
    fn fill(&mut self, feed: &mut herald_core::Feed, config: &crate::config::Config) {
        while !self.budget.full() {
            match feed.try_next() {
                Some(event) => self.take(event, config),
                None => break,
            }
        }
    }

    fn take(&mut self, event: FeedEvent, config: &crate::config::Config) {
        match deliver(event, "poll", config) {
            Delivery::Message(m, delta) => {
                self.budget.take(herald_core::Outbound::new(&m, delta));
                self.messages.push((m, delta));
            }
            Delivery::Lost { topic, reason } => self.lost.push(lost_json(&topic, reason)),
            // A poll's feed is not linked to direct delivery: it writes no partial frames.
            Delivery::Nothing | Delivery::Rest(_) => {}
            // A poll ends with its answer anyway: the client is told it lost messages.
            Delivery::Disconnect { topic } => {
                self.lost.push(lost_json(&topic, LossReason::Lagged));
            }
        }
    }
}

/// What a waiting poll hears from the server.
enum Heard {
    /// The admin API ended it.
    Ended(Disconnect),
    /// A member joined or left one of its topics.
    Presence(PresenceEvent),
}

/// Waits until the admin API ends the poll's connection or a join or leave event arrives
/// (other commands are skipped). A poll holds no
/// subscriptions of its own between requests, so server-side (un)subscriptions and sends
/// are not for it: the application reaches a polling client through its topics (e.g. the
/// personal topic).
async fn heard(connection: &mut crate::cluster::Connection) -> Heard {
    loop {
        match connection.next_action().await {
            Action::Disconnect(d) => return Heard::Ended(d),
            Action::Presence(event) => return Heard::Presence(event),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use herald_core::{Payload, TopicName};
    use serde_json::{Value, json};
    use tower::ServiceExt as _;

    use super::*;

    async fn get(state: &AppState, query: &str) -> Value {
        let request = axum::http::Request::get(format!("/v1/poll?{query}"))
            .body(Body::empty())
            .unwrap();
        let response = crate::routes::public_router(state.clone())
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    fn enc(cursor: &Value) -> String {
        form_urlencoded::byte_serialize(cursor.as_str().unwrap().as_bytes()).collect()
    }

    #[tokio::test]
    async fn the_cursor_carries_each_topic_s_position_from_poll_to_poll() {
        let (state, _shutdown) = AppState::for_test(crate::config::Config::default());
        let publish = |topic: &str, n: i64| {
            let topic = TopicName::new(topic).unwrap();
            state
                .registry()
                .publish(&topic, None, Payload::from_value(&json!(n)))
                .unwrap()
                .cursor()
        };
        // A first poll with nothing to say still gives a cursor: where each topic stands.
        let empty = get(&state, "topic=a&topic=b&timeout=0").await;
        assert_eq!(empty["messages"], json!([]));
        let start = empty["cursor"].clone();
        let a1 = publish("a", 1);
        let b1 = publish("b", 2);
        let a2 = publish("a", 3);
        let batch = get(
            &state,
            &format!("topic=a&topic=b&timeout=0&cursor={}", enc(&start)),
        )
        .await;
        let data: Vec<&Value> = batch["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["data"])
            .collect();
        assert_eq!(data.len(), 3);
        let cursor = batch["cursor"].as_str().unwrap();
        assert!(
            cursor.contains(&format!("a={a2}")) && cursor.contains(&format!("b={b1}")),
            "{cursor}"
        );
        assert!(!cursor.contains(&a1.to_string()), "{cursor}");
        // From that cursor: nothing new, and the same cursor back.
        let again = get(
            &state,
            &format!("topic=a&topic=b&timeout=0&cursor={}", enc(&batch["cursor"])),
        )
        .await;
        assert_eq!(again["messages"], json!([]));
        assert_eq!(again["cursor"], batch["cursor"]);
    }
}
