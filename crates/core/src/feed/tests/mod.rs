//! The feed's tests: replay, lag and loss here; direct delivery, log-carried topics and
//! patterns in their own files.

use super::*;
use crate::cursor::Cursor;
use crate::direct::DirectSub;
use crate::error::FeedError;
use crate::message::{Message, Payload};
use crate::name::TopicName;
use crate::topic::Topic;
use crate::topic::TopicConfig;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

mod delta;
mod direct;
mod log_carried;
mod patterns;

fn topic(name: &str, capacity: usize, history_len: usize) -> Arc<Topic> {
    let config = TopicConfig {
        channel_capacity: capacity,
        history_len,
        history_ttl: Duration::from_secs(60),
        log_carried: false,
        lag_policy: None,
        delta: false,
    };
    Arc::new(Topic::with_epoch(TopicName::new(name).unwrap(), &config, 5))
}

fn publish(t: &Topic, n: u64) {
    for i in 0..n {
        t.publish(None, Payload::from_value(&serde_json::json!(i)));
    }
}

fn drain(feed: &mut Feed) -> Vec<String> {
    std::iter::from_fn(|| feed.try_next())
        .map(|e| match e {
            FeedEvent::Message(m) => format!("{}:{}", m.topic(), m.cursor().seq),
            FeedEvent::Delta(m) => format!("{}:{} delta", m.topic(), m.cursor().seq),
            FeedEvent::Lost { topic, reason } => format!("lost {topic} {}", reason.as_str()),
            FeedEvent::Recovered { topic, missed } => format!("recovered {topic} {missed}"),
            FeedEvent::Coalesced { topic, skipped } => format!("coalesced {topic} {skipped}"),
            FeedEvent::Disconnect { topic, .. } => format!("disconnect {topic}"),
            FeedEvent::Rest(rest) => format!("rest {}", String::from_utf8_lossy(&rest)),
        })
        .collect()
}

/// A socket in memory for direct delivery: takes up to `room` bytes, then would block.
#[derive(Clone, Default)]
struct Socket {
    written: Arc<parking_lot::Mutex<Vec<u8>>>,
    room: Arc<std::sync::atomic::AtomicUsize>,
}

impl Socket {
    fn with_room(room: usize) -> Self {
        let socket = Self::default();
        socket.room.store(room, std::sync::atomic::Ordering::SeqCst);
        socket
    }

    /// The data of every whole SSE frame written, in order, and what follows the last.
    fn frames(&self) -> (Vec<String>, String) {
        let text = String::from_utf8(self.written.lock().clone()).unwrap();
        let mut parts: Vec<&str> = text.split("\n\n").collect();
        let tail = parts.pop().unwrap_or_default().to_string();
        let data = parts
            .iter()
            .map(|f| {
                f.lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap()
                    .to_string()
            })
            .collect();
        (data, tail)
    }
}

impl crate::DirectWriter for Socket {
    fn frame<'m>(&self, message: &'m Message, delta: bool) -> &'m Bytes {
        if delta {
            crate::message::Outbound::new(message, true).sse_json_frame()
        } else {
            message.sse_frame()
        }
    }

    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.room.load(std::sync::atomic::Ordering::SeqCst);
        if room == 0 {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let n = room.min(buf.len());
        self.room.fetch_sub(n, std::sync::atomic::Ordering::SeqCst);
        self.written.lock().extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn counter(&self) -> &'static dyn crate::DeliveryCounter {
        &NO_COUNT
    }
}

struct NoCount;

impl crate::DeliveryCounter for NoCount {
    fn delivered(&self, _n: u64, _bytes: u64, _latency: Duration) {}
}

static NO_COUNT: NoCount = NoCount;

#[test]
fn a_coalescing_topic_s_slow_subscriber_skips_to_the_newest_message() {
    let config = TopicConfig {
        channel_capacity: 4,
        history_len: 8,
        history_ttl: Duration::from_secs(60),
        log_carried: false,
        lag_policy: Some(LagPolicy::Coalesce),
        delta: false,
    };
    let ticker = Arc::new(Topic::with_epoch(TopicName::new("t").unwrap(), &config, 5));
    // The feed's own policy is to disconnect; the topic's wins.
    let mut feed = Feed::new(LagPolicy::Disconnect, 4);
    feed.subscribe(ticker.clone(), None).unwrap();
    publish(&ticker, 10);
    let got = drain(&mut feed);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].starts_with("coalesced t "), "{got:?}");
    assert_eq!(got[1], "t:10");
    publish(&ticker, 1);
    assert_eq!(drain(&mut feed), ["t:11"]);
    let positions: Vec<_> = feed.positions().map(|(t, c)| format!("{t}={c}")).collect();
    assert_eq!(positions, ["t=5-11"]);
}

#[tokio::test]
async fn a_parked_direct_subscriber_of_a_coalescing_topic_skips_to_the_newest() {
    // History covers the gap (64 > 10), the channel does not (2): a lag all the same.
    let config = TopicConfig {
        channel_capacity: 2,
        history_len: 64,
        history_ttl: Duration::from_secs(60),
        log_carried: false,
        lag_policy: Some(LagPolicy::Coalesce),
        delta: false,
    };
    let a = Arc::new(Topic::with_epoch(TopicName::new("a").unwrap(), &config, 5));
    let socket = Socket::with_room(usize::MAX);
    let mut feed = linked(&a, &socket);
    let cohorts = a.direct.running_for_test();
    let running: Vec<_> = cohorts.iter().map(|g| g.running.lock()).collect();
    publish(&a, 9);
    drop(running);
    publish(&a, 1);
    assert!(!feed.is_direct());
    assert_eq!(drain(&mut feed), ["coalesced a 9", "a:10"]);
}

#[test]
fn a_subscription_can_start_with_the_last_n_messages_held() {
    let a = topic("a", 16, 4);
    publish(&a, 6); // seq 1..=6; history holds 3..=6
    let start = |n| {
        let mut feed = Feed::new(LagPolicy::default(), 4);
        let after = feed.subscribe_from(a.clone(), Start::Last(n)).unwrap();
        (after.seq, drain(&mut feed))
    };
    assert_eq!(start(2), (4, vec!["a:5".into(), "a:6".into()]));
    assert_eq!(start(0), (6, vec![]));
    // More than history holds: what it holds, and no loss signal.
    let (after, all) = start(10);
    assert_eq!((after, all.len()), (2, 4), "{all:?}");
    assert_eq!(all[0], "a:3");
    // Live messages follow the replay without a gap or a duplicate.
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe_from(a.clone(), Start::Last(1)).unwrap();
    publish(&a, 1);
    assert_eq!(drain(&mut feed), ["a:6", "a:7"]);
}

fn linked(t: &Arc<Topic>, socket: &Socket) -> Feed {
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe(t.clone(), None).unwrap();
    assert!(feed.link(Arc::new(DirectSub::new(socket.clone()))));
    assert!(feed.try_next().is_none());
    assert!(feed.is_direct(), "an idle linked feed goes direct");
    feed
}
