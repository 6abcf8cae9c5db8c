//! An [`SseStream`]'s chunks: the opening, messages, heartbeats, server-side subscriptions,
//! expiry and the end.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use herald_core::{Feed, FeedEvent, ResumeList};
use tokio::time::{Instant, Sleep};

use crate::app::AppState;
use crate::cluster::control::Action;
use crate::shutdown::DrainWait;
use crate::telemetry::metrics::{self, CloseReason, TransportMetrics};
use crate::transport::{Delivery, deliver, jitter, lost_json};

const PING: Bytes = Bytes::from_static(b": ping\n\n");

/// One subscriber's stream of SSE chunks.
pub(crate) struct SseStream {
    pub(super) feed: Feed,
    pub(super) multi: bool,
    /// `format=json`: messages in their JSON form.
    pub(super) json: bool,
    pub(super) metrics: &'static TransportMetrics,
    pub(super) connection: crate::cluster::Connection,
    /// For server-side subscriptions (the registry, the topic limit).
    pub(super) state: AppState,
    /// The heartbeat interval, in milliseconds (`sse.heartbeat`, or the client's `heartbeat`).
    pub(super) heartbeat_ms: u32,
    /// Fires `heartbeat` after the last write. Not re-armed on every message (that takes
    /// the timer wheel's lock on every delivery): when it fires early it is moved to
    /// `last_write + heartbeat`.
    pub(super) sleep: Pin<Box<Sleep>>,
    pub(super) last_write: Instant,
    /// The drain, waited for with one atomic load per wake-up (see [`crate::shutdown::Drain`]).
    pub(super) shutdown: DrainWait,
    /// Scratch space for the multi-topic `id:` line.
    pub(super) id: String,
    /// A chunk to send before anything else (the body after a multi-topic `id:` line).
    pub(super) queued: Option<Bytes>,
    /// A server-side subscription being made (it may wait for the node to read its topics'
    /// history), kept here so that a `next_chunk` cancelled part-way takes it up again.
    pub(super) pending: Option<Box<crate::cluster::control::ServerSubscription>>,
    pub(super) done: bool,
    /// When the client's token expires, if it presented one (boxed only then).
    pub(super) expiry: Option<Pin<Box<Sleep>>>,
    /// The browser origin allowed to read the stream (CORS), when the request had one.
    pub(super) cors: Option<Box<str>>,
    /// When the stream ends by itself (`sse.max_lifetime`), if ever (boxed only when set).
    pub(super) lifetime: Option<Pin<Box<Sleep>>>,
    /// The topics this stream's subscription created, charged to its client.
    pub(super) _charges: Box<[crate::limits::QuotaCharge]>,
    /// What the refresh hook is told, when it is configured and the stream's credentials
    /// expire (boxed, only then).
    pub(super) refresh: Option<Box<Refresh>>,
}

/// An SSE client as the refresh hook is told about it.
pub(super) struct Refresh {
    pub(super) who: crate::auth::Identity,
    pub(super) peer: std::net::IpAddr,
    pub(super) forwarded: crate::hooks::Forwarded,
}

/// `event: herald.disconnect` for a connection the server ended on a command.
fn disconnect_event(disconnect: &crate::cluster::control::Disconnect) -> Bytes {
    let data = serde_json::to_string(disconnect).expect("a disconnect serialises");
    Bytes::from(format!("event: herald.disconnect\ndata: {data}\n\n"))
}

/// The end of a stream's life: `max` ±10 % at random, or never for zero.
pub(super) fn lifetime_deadline(max: Duration) -> Option<Pin<Box<Sleep>>> {
    if max.is_zero() {
        return None;
    }
    let spread = max / 5;
    let life = max - max / 10 + jitter(spread);
    Some(Box::pin(tokio::time::sleep(life)))
}

/// Waits for the stream's end of life; never, when it has none.
async fn end_of_life(lifetime: &mut Option<Pin<Box<Sleep>>>) {
    match lifetime {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

impl SseStream {
    pub(super) fn opening(&mut self, retry: Duration) -> Bytes {
        self.id_line();
        Bytes::from(format!("retry: {}\n{}\n", retry.as_millis(), self.id))
    }

    /// Subscribes to `topics` on the application's command (each after its position, or from
    /// its head): an event naming them, with the `id:` of every position (so that a resume
    /// includes them), or `None` when there is nothing new or it was refused (counted).
    /// Cancel-safe: the subscription is kept in `pending` until it is made, and the next call
    /// of [`Self::next_chunk`] takes it up again.
    async fn subscribed_by_server(
        &mut self,
        topics: crate::cluster::control::ServerSubscription,
    ) -> Option<Bytes> {
        let topics = self.pending.insert(Box::new(topics)).clone();
        let made =
            crate::transport::subscribe_from_server(&self.state, &mut self.feed, &topics).await;
        self.pending = None;
        match made {
            Ok(started) if started.is_empty() => None,
            Ok(started) => {
                self.multi = self.feed.len() > 1 || self.feed.has_patterns();
                self.connection
                    .subscribed_to(self.feed.positions().map(|(t, _)| t));
                let names: Vec<String> = started.iter().map(|(t, _)| t.to_string()).collect();
                Some(self.topics_event("herald.subscribed", &names))
            }
            Err(e) => {
                metrics::client_error("sse", e.code());
                None
            }
        }
    }

    /// The credentials expired: the refresh hook, when configured, may extend them;
    /// otherwise, or when it refuses, the stream ends with `herald.disconnect` and the
    /// reason. `None`: extended.
    async fn on_expiry(&mut self) -> Option<Bytes> {
        let mut reason = "token expired".to_string();
        if let Some(refresh) = &mut self.refresh {
            let caller = crate::hooks::Caller {
                transport: "sse",
                client: Some(self.connection.id()),
                remote: refresh.peer,
                who: &refresh.who,
                headers: &refresh.forwarded,
            };
            match self.state.hooks().refresh(&caller).await {
                Ok(Some(grant)) => {
                    grant.apply(&mut refresh.who);
                    self.connection
                        .set_identity(refresh.who.sub.as_deref(), refresh.who.info.clone());
                    self.expiry = refresh
                        .who
                        .time_left()
                        .map(|left| Box::pin(tokio::time::sleep(left)));
                    return None;
                }
                Ok(None) => {}
                Err(e) => {
                    let text = e.to_string();
                    reason = text
                        .split_once(": ")
                        .map_or(text.clone(), |(_, r)| r.to_string());
                }
            }
        }
        self.done = true;
        self.connection.closing(CloseReason::Expired);
        let data = serde_json::json!({ "reason": reason });
        Some(Bytes::from(format!(
            "event: herald.disconnect\ndata: {data}\n\n"
        )))
    }

    /// `event: <event>` with `data: {"topics": [...]}` and the `id:` of every position.
    fn topics_event(&mut self, event: &str, topics: &[String]) -> Bytes {
        self.id_line();
        let data = serde_json::json!({ "topics": topics });
        self.last_write = Instant::now();
        Bytes::from(format!("{}event: {event}\ndata: {data}\n\n", self.id))
    }

    /// `id: topic=cursor,...\n` for every subscribed topic, into `self.id`.
    fn id_line(&mut self) {
        let mut list = std::mem::take(&mut self.id);
        ResumeList::write_entries(&mut list, self.feed.resume_positions());
        self.id = format!("id: {list}\n");
    }

    /// The next chunk to write, or `None` when the stream is over. Cancel-safe.
    pub(crate) async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(chunk) = self.queued.take() {
            return Some(chunk);
        }
        if self.done {
            return None;
        }
        loop {
            // A server-side subscription is made here, outside the `select!` (whose arms then
            // hold nothing across an await) and boxed: a rare path whose future (the
            // subscription, its wait for the log) would otherwise size every stream's task.
            if let Some(pending) = self.pending.take()
                && let Some(chunk) = Box::pin(self.subscribed_by_server(*pending)).await
            {
                return Some(chunk);
            }
            tokio::select! {
                biased;
                _ = &mut self.shutdown => {
                    self.done = true;
                    self.connection.closing(CloseReason::Shutdown);
                    let retry = jitter(self.state.config().shutdown.reconnect_jitter).as_millis();
                    let frame = format!(
                        "retry: {retry}\nevent: herald.shutdown\ndata: {{\"reason\":\"shutdown\",\"retry_ms\":{retry}}}\n\n"
                    );
                    return Some(Bytes::from(frame));
                }
                action = self.connection.next_action() => match action {
                    Action::Disconnect(disconnect) => {
                        self.done = true;
                        return Some(disconnect_event(&disconnect));
                    }
                    Action::Subscribe(_) | Action::SubscribeAfter(_) | Action::Receive { .. } => {
                        self.pending = action.subscription().map(Box::new);
                    }
                    Action::Presence(event) => {
                        // Not a message: no `id:` line, the client's position stays.
                        let frame = format!(
                            "event: herald.{}\ndata: {}\n\n",
                            event.kind.as_str(),
                            event.member
                        );
                        self.metrics.sent(frame.len());
                        self.last_write = Instant::now();
                        return Some(Bytes::from(frame));
                    }
                    Action::Unsubscribe(topics) => {
                        let removed = crate::transport::unsubscribe_from_server(&mut self.feed, &topics);
                        if !removed.is_empty() {
                            self.connection
                                .subscribed_to(self.feed.positions().map(|(t, _)| t));
                            return Some(self.topics_event("herald.unsubscribed", &removed));
                        }
                    }
                },
                _ = end_of_life(&mut self.expiry) => {
                    if let Some(chunk) = Box::pin(self.on_expiry()).await {
                        return Some(chunk);
                    }
                }
                _ = end_of_life(&mut self.lifetime) => {
                    self.done = true;
                    self.connection.closing(CloseReason::Done);
                    // The lifetime itself is jittered; the client comes back after `sse.retry`.
                    let retry = self.state.config().sse.retry;
                    return Some(Bytes::from(format!("retry: {}\n\n", retry.as_millis())));
                }
                event = self.feed.next() => {
                    if let Some(chunk) = self.on_event(event) {
                        self.last_write = Instant::now();
                        return Some(chunk);
                    }
                }
                _ = self.sleep.as_mut() => {
                    // The topic's fan-out writes too, while the stream is direct.
                    let direct = self.feed.last_direct_write().map(Instant::from_std);
                    let last = direct.map_or(self.last_write, |d| d.max(self.last_write));
                    let heartbeat = Duration::from_millis(self.heartbeat_ms.into());
                    let due = crate::transport::next_keep_alive(last, heartbeat);
                    if due > Instant::now() {
                        self.sleep.as_mut().reset(due);
                        continue;
                    }
                    self.last_write = Instant::now();
                    let next = crate::transport::next_keep_alive(self.last_write, heartbeat);
                    self.sleep.as_mut().reset(next);
                    self.metrics.sent(PING.len());
                    // While the topic's fan-out writes this stream, its link writes the
                    // heartbeat under the fan-out's lock and the stream stays direct (as a
                    // WebSocket's ping): no leaving direct delivery and coming back for it.
                    if self.feed.is_direct()
                        && let Some(link) = self.feed.direct_link()
                        && link.write_while_direct(&PING)
                    {
                        continue;
                    }
                    return Some(PING);
                }
            }
        }
    }

    fn on_event(&mut self, event: FeedEvent) -> Option<Bytes> {
        match deliver(event, "sse", self.state.config()) {
            Delivery::Message(message, delta) => {
                let since = message.published_at().elapsed();
                // A delta only in the JSON form (`delta=fossil` implies it).
                let sent = herald_core::Outbound::new(&message, delta && self.json);
                let frame = if self.multi {
                    self.id_line();
                    let body = if self.json {
                        sent.sse_json_body()
                    } else {
                        message.sse_body()
                    };
                    self.metrics.delivered(self.id.len() + body.len(), since);
                    self.queued = Some(body);
                    Bytes::from(self.id.clone())
                } else {
                    let frame = if self.json {
                        sent.sse_json_frame()
                    } else {
                        message.sse_frame()
                    }
                    .clone();
                    self.metrics.delivered(frame.len(), since);
                    frame
                };
                Some(frame)
            }
            Delivery::Lost { topic, reason } => {
                self.id_line();
                let frame = format!(
                    "{}event: herald.lost\ndata: {}\n\n",
                    self.id,
                    lost_json(&topic, reason)
                );
                self.metrics.sent(frame.len());
                Some(Bytes::from(frame))
            }
            Delivery::Nothing => None,
            Delivery::Rest(rest) => Some(rest),
            Delivery::Disconnect { topic } => {
                self.done = true;
                self.connection.closing(CloseReason::Slow);
                Some(Bytes::from(format!(
                    "event: herald.disconnect\ndata: {{\"reason\":\"slow consumer\",\"topic\":\"{topic}\"}}\n\n"
                )))
            }
        }
    }
}
