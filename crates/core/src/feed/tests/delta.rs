//! Deltas: a subscription that asked for them gets a message as a delta only when it was
//! delivered the message the delta applies to, right before it.

use super::*;

fn delta_topic(
    name: &str,
    capacity: usize,
    history_len: usize,
    lag: Option<LagPolicy>,
) -> Arc<Topic> {
    let config = TopicConfig {
        channel_capacity: capacity,
        history_len,
        history_ttl: Duration::from_secs(60),
        log_carried: false,
        lag_policy: lag,
        delta: true,
    };
    Arc::new(Topic::with_epoch(TopicName::new(name).unwrap(), &config, 5))
}

/// A full-state payload of ~1 KB that changes a little each time: deltas pay.
fn state(n: u64) -> Payload {
    let rows: Vec<_> = (0..20)
        .map(|i| serde_json::json!({"row": i, "name": format!("name {i}"), "v": 0}))
        .collect();
    Payload::from_value(&serde_json::json!({"n": n, "rows": rows}))
}

fn publish_states(t: &Topic, n: u64) {
    for i in 0..n {
        t.publish(None, state(i));
    }
}

fn wanting(t: &Arc<Topic>, from: Start) -> Feed {
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe_from(t.clone(), from).unwrap();
    assert!(feed.want_deltas(t.name().as_str()));
    feed
}

#[test]
fn the_first_message_is_full_then_deltas_follow() {
    let t = delta_topic("s", 16, 16, None);
    let mut feed = wanting(&t, Start::Live);
    publish_states(&t, 3);
    assert_eq!(drain(&mut feed), ["s:1", "s:2 delta", "s:3 delta"]);
    // A subscription that did not ask gets full messages.
    let mut plain = Feed::new(LagPolicy::default(), 4);
    plain.subscribe(t.clone(), None).unwrap();
    publish_states(&t, 2);
    assert_eq!(drain(&mut plain), ["s:4", "s:5"]);
    assert_eq!(drain(&mut feed), ["s:4 delta", "s:5 delta"]);
    // A topic whose namespace does not allow deltas has no base: full.
    let other = topic("o", 16, 16);
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe(other.clone(), None).unwrap();
    feed.want_deltas("o");
    other.publish(None, state(0));
    other.publish(None, state(1));
    assert_eq!(drain(&mut feed), ["o:1", "o:2"]);
    assert!(!feed.want_deltas("nope"));
}

#[test]
fn a_resume_and_a_last_n_replay_start_full() {
    let t = delta_topic("s", 16, 16, None);
    publish_states(&t, 5);
    let mut resumed = wanting(&t, Start::After(Cursor::new(5, 2)));
    assert_eq!(drain(&mut resumed), ["s:3", "s:4 delta", "s:5 delta"]);
    let mut last = wanting(&t, Start::Last(2));
    assert_eq!(drain(&mut last), ["s:4", "s:5 delta"]);
    publish_states(&t, 1);
    assert_eq!(drain(&mut last), ["s:6 delta"]);
}

#[test]
fn a_coalescing_subscriber_gets_full_data_after_a_skip() {
    let t = delta_topic("s", 2, 16, Some(LagPolicy::Coalesce));
    let mut feed = wanting(&t, Start::Live);
    publish_states(&t, 1);
    assert_eq!(drain(&mut feed), ["s:1"]);
    publish_states(&t, 6);
    let got = drain(&mut feed);
    assert!(got[0].starts_with("coalesced s "), "{got:?}");
    assert_eq!(got[1], "s:7", "full after the skip: {got:?}");
    publish_states(&t, 1);
    assert_eq!(drain(&mut feed), ["s:8 delta"]);
}

#[test]
fn a_loss_signal_is_followed_by_full_data() {
    // The channel holds 2, history 2: a subscriber 6 behind has lost messages.
    let t = delta_topic("s", 2, 2, None);
    let mut feed = Feed::new(LagPolicy::RecoverOrNotify, 4);
    feed.subscribe(t.clone(), None).unwrap();
    feed.want_deltas("s");
    publish_states(&t, 1);
    assert_eq!(drain(&mut feed), ["s:1"]);
    publish_states(&t, 6);
    let got = drain(&mut feed);
    assert_eq!(got[0], "lost s lagged", "{got:?}");
    assert!(!got[1].ends_with("delta"), "full after a loss: {got:?}");
    // A resume from a cursor history no longer covers: lost, then full.
    let mut resumed = wanting(&t, Start::After(Cursor::new(5, 1)));
    let got = drain(&mut resumed);
    assert_eq!(got[0], "lost s expired", "{got:?}");
    publish_states(&t, 2);
    assert_eq!(drain(&mut resumed), ["s:8", "s:9 delta"]);
}

#[tokio::test]
async fn direct_delivery_sends_deltas_only_after_a_delivered_base() {
    let t = delta_topic("s", 16, 16, None);
    let socket = Socket::with_room(usize::MAX);
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe(t.clone(), None).unwrap();
    feed.want_deltas("s");
    assert!(feed.link(Arc::new(DirectSub::new(socket.clone()))));
    assert!(feed.try_next().is_none());
    assert!(feed.is_direct());
    publish_states(&t, 3);
    let (frames, tail) = socket.frames();
    assert_eq!(tail, "");
    assert_eq!(frames.len(), 3);
    assert!(
        frames[0].starts_with(r#"{"n":0,"#),
        "the first is full: {}",
        frames[0]
    );
    for (i, frame) in frames[1..].iter().enumerate() {
        let json: serde_json::Value = serde_json::from_str(frame).unwrap();
        assert_eq!(json["delta"], true, "{frame}");
        assert_eq!(json["id"], format!("5-{}", i + 2));
    }
    // Held for a write of the transport's own, then direct again: still based.
    assert!(feed.park().is_none());
    assert!(feed.try_next().is_none());
    assert!(feed.is_direct());
    publish_states(&t, 1);
    let (frames, _) = socket.frames();
    assert!(frames[3].contains(r#""delta":true"#), "{}", frames[3]);
}
