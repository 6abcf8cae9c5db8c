//! Join and leave events (`namespaces.<name>.join_leave`): when a connection's membership of
//! a topic begins ([`super::members::Membership::set_topics`] adds it) or ends (it
//! unsubscribes or closes), the topic's other subscribers are told, on every node.
//!
//! An event is a [`control::Action::Presence`] for [`control::Target::Topic`]: handed at once
//! to the topic's subscribers on this node (found in the members table, which the namespace
//! must keep) and queued for the other nodes through the control relay, which skips the
//! sender's own commands. Each connection takes it from its command queue like any other
//! command ([`control::MAX_PENDING`]: a connection whose queue is full misses the event), so
//! nothing of it is on the per-message delivery path.
//!
//! Bound: each node announces at most `join_leave_rate` events per second per topic (a token
//! bucket holding one second's worth); past it events are dropped and counted
//! (`herald_presence_events_dropped_total{reason="rate"}`). One event costs, on every node,
//! a lock of the members table and one queued command per local subscriber of the topic, so
//! a topic costs at most `join_leave_rate × nodes × its subscribers on a node` commands per
//! second per node. The buckets are kept per topic that announced within the last second or
//! so: idle ones are swept once the map doubles.
//!
//! Not announced: a connection's own join to itself; the coming and going of a long-poll
//! (each poll request would be a join and a leave, and pollers woken by each other's joins
//! would never rest). A long-poll still receives the events that arrive while it waits.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use herald_core::TopicName;

use super::control::{self, Action, Command, Target};
use super::presence_event::{PresenceEvent, PresenceKind, Who};

/// Which namespaces announce joins and leaves, and how many per second per topic.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rules {
    /// This node's id, named in each event.
    node: Arc<str>,
    /// Namespace → events per second per topic.
    rates: HashMap<String, u32>,
}

impl Rules {
    /// As the configuration says: the namespaces with `join_leave = true` (validation made
    /// sure their members are kept).
    pub(crate) fn from_config(config: &crate::config::Config) -> Self {
        Self {
            node: Arc::from(config.cluster.node_id.as_str()),
            rates: config
                .namespaces
                .iter()
                .filter(|(_, ns)| ns.join_leave == Some(true))
                .map(|(name, ns)| {
                    let rate = ns
                        .join_leave_rate
                        .unwrap_or(crate::config::namespaces::DEFAULT_JOIN_LEAVE_RATE);
                    (name.clone(), rate.max(1))
                })
                .collect(),
        }
    }

    /// No namespace announces anything.
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// Whether any namespace announces.
    pub(crate) fn any(&self) -> bool {
        !self.rates.is_empty()
    }

    /// `topic`'s namespace and its rate, when it announces.
    fn of(&self, topic: &str) -> Option<(&str, u32)> {
        let ns = crate::config::namespaces::namespace_of(topic)?;
        self.rates
            .get_key_value(ns)
            .map(|(name, rate)| (name.as_str(), *rate))
    }
}

/// Announces joins and leaves to the subscribers of their topics.
#[derive(Debug)]
pub(crate) struct Announcer {
    rules: Rules,
    connections: Arc<control::Connections>,
    relay: Option<Arc<control::Relay>>,
    buckets: parking_lot::Mutex<Buckets>,
}

/// One token bucket per topic that announced lately.
#[derive(Debug, Default)]
struct Buckets {
    map: HashMap<TopicName, Bucket>,
    /// How many buckets there may be before the idle ones are swept.
    sweep_at: usize,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets kept before the first sweep.
const SWEEP_AT_LEAST: usize = 1024;

impl Buckets {
    /// Takes a token from `topic`'s bucket (refilled at `rate` per second, holding at most
    /// `rate`); false when it is empty.
    fn take(&mut self, topic: &TopicName, rate: u32, now: Instant) -> bool {
        let rate = f64::from(rate);
        if !self.map.contains_key(topic) && self.map.len() >= self.sweep_at.max(SWEEP_AT_LEAST) {
            // A full bucket is as good as none: drop those.
            self.map.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < rate
            });
            self.sweep_at = self.map.len() * 2;
        }
        let bucket = self.map.entry(topic.clone()).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Announcer {
    /// Announces as `rules` say, to `connections` here and through `relay` to the other
    /// nodes; `None` when no namespace announces.
    pub(crate) fn new(
        rules: Rules,
        connections: Arc<control::Connections>,
        relay: Option<Arc<control::Relay>>,
    ) -> Option<Self> {
        rules.any().then(|| Self {
            rules,
            connections,
            relay,
            buckets: parking_lot::Mutex::default(),
        })
    }

    /// Connection `conn` (as `who`) joined or left (`kind`) `topic`, whose other subscribers
    /// here `subscribers` lists (asked only when the event goes out): tells them and the other
    /// nodes, within the topic's rate. Called on the connection's task, after the table
    /// changed.
    pub(crate) fn announce(
        &self,
        subscribers: impl FnOnce() -> Vec<u64>,
        kind: PresenceKind,
        conn: u64,
        who: &Who,
        topic: &TopicName,
    ) {
        if who.transport == "poll" {
            return;
        }
        let Some((namespace, rate)) = self.rules.of(topic.as_str()) else {
            return;
        };
        if !self.buckets.lock().take(topic, rate, Instant::now()) {
            crate::telemetry::metrics::presence_event_dropped("rate", namespace);
            return;
        }
        crate::telemetry::metrics::presence_event(kind.as_str(), namespace);
        let action = Action::Presence(PresenceEvent {
            kind,
            conn,
            member: Arc::from(member_json(topic, conn, &self.rules.node, who)),
        });
        self.connections.apply_to(subscribers(), &action);
        if let Some(relay) = &self.relay {
            let command = Command {
                target: Target::Topic(topic.to_string()),
                action,
            };
            if !relay.queue(command) {
                crate::telemetry::metrics::presence_event_dropped("relay", namespace);
            }
        }
    }
}

/// `{"topic":..,"conn":"..","node":..,"transport":..,"user":..,"info":{..}}` (`user` null
/// when anonymous; no `info` when the token had none).
fn member_json(topic: &TopicName, conn: u64, node: &str, who: &Who) -> String {
    let mut text = serde_json::json!({
        "topic": topic.as_str(),
        "conn": conn.to_string(),
        "node": node,
        "transport": who.transport,
        "user": who.user.as_deref(),
    })
    .to_string();
    if let Some(info) = &who.info {
        text.pop(); // the closing brace
        text.push_str(r#","info":"#);
        text.push_str(info);
        text.push('}');
    }
    text
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use super::*;
    use crate::cluster::members::{Kept, Members, Membership};

    fn topic(name: &str) -> TopicName {
        TopicName::new(name).unwrap()
    }

    #[test]
    fn a_bucket_holds_one_second_and_refills_at_its_rate() {
        let mut buckets = Buckets::default();
        let (t, start) = (topic("room:1"), Instant::now());
        assert_eq!((0..5).filter(|_| buckets.take(&t, 3, start)).count(), 3);
        assert!(!buckets.take(&t, 3, start + Duration::from_millis(300)));
        assert!(buckets.take(&t, 3, start + Duration::from_millis(340)));
        // Another topic has its own.
        assert!(buckets.take(&topic("room:2"), 3, start));
    }

    #[test]
    fn idle_buckets_are_swept_when_the_map_doubles() {
        let mut buckets = Buckets::default();
        let start = Instant::now();
        for i in 0..SWEEP_AT_LEAST {
            assert!(buckets.take(&topic(&format!("r:{i}")), 10, start));
        }
        // A second later every bucket is full again: the next new topic sweeps them all.
        assert!(buckets.take(&topic("r:new"), 10, start + Duration::from_secs(1)));
        assert_eq!(buckets.map.len(), 1);
    }

    fn next(
        connections: &control::Connections,
        id: u64,
        seen: &mut control::Seen,
    ) -> Option<Action> {
        let mut cx = Context::from_waker(Waker::noop());
        match connections.poll_action(id, seen, &mut cx) {
            Poll::Ready(a) => Some(a),
            Poll::Pending => None,
        }
    }

    #[test]
    fn subscribers_hear_of_others_joining_and_leaving_not_of_themselves() {
        let connections = Arc::new(control::Connections::default());
        let mut config = crate::config::Config::default();
        config.cluster.node_id = "n1".into();
        config.namespaces.insert(
            "room".into(),
            crate::config::NamespaceConfig {
                presence: Some(true),
                join_leave: Some(true),
                ..Default::default()
            },
        );
        let announcer = Announcer::new(Rules::from_config(&config), connections.clone(), None);
        let members = Arc::new(Members::with_announcer(
            false,
            Kept::from_config(&config),
            announcer,
        ));
        let who = |transport, user: Option<&str>| Who {
            transport,
            user: user.map(Arc::from),
            info: None,
        };
        connections.enter(1, Some("ann"));
        connections.enter(2, Some("bob"));
        let (mut seen1, mut seen2) = (control::Seen::default(), control::Seen::default());
        let room = [topic("room:1"), topic("other")];
        let mut ann = Membership::new(members.clone(), 1, who("ws", Some("ann")));
        ann.set_topics(&room);
        assert_eq!(next(&connections, 1, &mut seen1), None, "not its own join");
        let mut bob = Membership::new(members.clone(), 2, who("sse", Some("bob")));
        bob.set_topics(&room);
        let Some(Action::Presence(event)) = next(&connections, 1, &mut seen1) else {
            panic!("ann hears bob join");
        };
        assert_eq!(event.kind, PresenceKind::Join);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&event.typed_json()).unwrap(),
            serde_json::json!({"type": "join", "topic": "room:1", "conn": "2", "node": "n1",
                "transport": "sse", "user": "bob"})
        );
        assert_eq!(
            next(&connections, 1, &mut seen1),
            None,
            "`other` announces nothing"
        );
        assert_eq!(next(&connections, 2, &mut seen2), None);
        // A poll's coming and going is not announced.
        let mut poll = Membership::new(members.clone(), 3, who("poll", None));
        poll.set_topics(&room);
        drop(poll);
        assert_eq!(next(&connections, 2, &mut seen2), None);
        connections.leave(1, None);
        drop(ann);
        let Some(Action::Presence(event)) = next(&connections, 2, &mut seen2) else {
            panic!("bob hears ann leave");
        };
        assert_eq!(event.kind, PresenceKind::Leave);
        assert!(event.member.contains(r#""user":"ann""#), "{}", event.member);
        drop(bob);
    }
}
