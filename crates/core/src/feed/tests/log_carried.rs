//! Topics carried by a shared log: positions assigned elsewhere.

use super::*;

/// A topic carried by a shared log (positions assigned elsewhere), epoch 5.
fn log_carried(name: &str) -> Arc<Topic> {
    let config = TopicConfig {
        channel_capacity: 8,
        history_len: 8,
        history_ttl: Duration::from_secs(60),
        log_carried: true,
        lag_policy: None,
        delta: false,
    };
    Arc::new(Topic::with_epoch(TopicName::new(name).unwrap(), &config, 5))
}

fn text(v: &str) -> Payload {
    Payload::from_value(&serde_json::json!(v))
}

#[tokio::test]
async fn a_direct_subscriber_whose_log_moves_to_another_epoch_is_told_then_gets_the_message() {
    let a = log_carried("a");
    a.ingest(Cursor::new(5, 1), None, text("before")).unwrap();
    let socket = Socket::with_room(usize::MAX);
    let mut feed = linked(&a, &socket);
    a.ingest(Cursor::new(5, 2), None, text("direct")).unwrap();
    assert_eq!(socket.frames().0, ["direct"]);
    // The log lost its data: its next message is in a new epoch.
    a.ingest(Cursor::new(9, 1), None, text("after")).unwrap();
    assert_eq!(drain(&mut feed), ["lost a epoch", "a:1"]);
    assert_eq!(socket.frames().0, ["direct"]);
}

#[tokio::test]
async fn a_log_carried_topic_s_gapped_positions_are_written_directly_without_waking_the_task() {
    // A Redis stream's ids or a shared Kafka partition's offsets: one topic's positions
    // are not consecutive numbers.
    let a = log_carried("a");
    a.ingest(Cursor::new(5, 10), None, text("before")).unwrap();
    let socket = Socket::with_room(usize::MAX);
    let mut feed = linked(&a, &socket);
    for (seq, data) in [(25, "one"), (26, "two"), (4_000, "three")] {
        a.ingest(Cursor::new(5, seq), None, text(data)).unwrap();
        assert!(feed.is_direct(), "parked at {seq}");
    }
    assert_eq!(socket.frames().0, ["one", "two", "three"]);
    assert!(drain(&mut feed).is_empty(), "the task is not given them");
    let positions: Vec<_> = feed.positions().map(|(t, c)| format!("{t}={c}")).collect();
    assert_eq!(positions, ["a=5-4000"]);
}

#[tokio::test]
async fn a_queue_overflow_parks_direct_subscribers_who_recover_under_the_lag_policy() {
    let a = topic("a", 2, 2);
    let socket = Socket::with_room(usize::MAX);
    let mut feed = linked(&a, &socket);
    // Hold the fan-out so that messages queue past the channel's capacity.
    let cohorts = a.direct.running_for_test();
    let running: Vec<_> = cohorts.iter().map(|g| g.running.lock()).collect();
    publish(&a, 5);
    drop(running);
    publish(&a, 1);
    assert!(!feed.is_direct());
    assert_eq!(drain(&mut feed), ["lost a lagged", "a:5", "a:6"]);
}

#[tokio::test]
async fn merges_topics_and_tracks_positions() {
    let (a, b) = (topic("a", 8, 8), topic("b", 8, 8));
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe(a.clone(), None).unwrap();
    feed.subscribe(b.clone(), None).unwrap();
    publish(&a, 2);
    publish(&b, 1);
    let mut got = drain(&mut feed);
    got.sort();
    assert_eq!(got, ["a:1", "a:2", "b:1"]);
    let positions: Vec<_> = feed.positions().map(|(t, c)| format!("{t}={c}")).collect();
    assert_eq!(positions, ["a=5-2", "b=5-1"]);
}

#[tokio::test]
async fn replay_then_live_without_duplicates() {
    let a = topic("a", 8, 8);
    publish(&a, 3);
    let mut feed = Feed::new(LagPolicy::default(), 4);
    assert_eq!(
        feed.subscribe(a.clone(), Some(Cursor::new(5, 1))).unwrap(),
        Cursor::new(5, 1)
    );
    publish(&a, 2);
    assert_eq!(drain(&mut feed), ["a:2", "a:3", "a:4", "a:5"]);
}

#[tokio::test]
async fn lost_cursor_is_signalled_first() {
    let a = topic("a", 8, 2);
    publish(&a, 5);
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe(a.clone(), Some(Cursor::new(5, 1))).unwrap();
    publish(&a, 1);
    assert_eq!(drain(&mut feed), ["lost a expired", "a:6"]);
}

#[tokio::test]
async fn lagging_subscriber_recovers_from_history() {
    let a = topic("a", 2, 64);
    let mut feed = Feed::new(LagPolicy::RecoverOrNotify, 4);
    feed.subscribe(a.clone(), None).unwrap();
    publish(&a, 10);
    let got = drain(&mut feed);
    assert_eq!(got[0], "recovered a 8");
    let expected: Vec<String> = (1..=10).map(|i| format!("a:{i}")).collect();
    assert_eq!(got[1..], expected[..]);
}

#[tokio::test]
async fn lag_beyond_history_follows_the_policy() {
    for (policy, first) in [
        (LagPolicy::RecoverOrNotify, "lost a lagged"),
        (LagPolicy::RecoverOrDisconnect, "disconnect a"),
        (LagPolicy::Disconnect, "disconnect a"),
    ] {
        let a = topic("a", 2, 3);
        let mut feed = Feed::new(policy, 4);
        feed.subscribe(a.clone(), None).unwrap();
        publish(&a, 10);
        let got = drain(&mut feed);
        assert_eq!(got[0], first, "{policy:?}");
        if policy == LagPolicy::RecoverOrNotify {
            assert_eq!(got[1..], ["a:9", "a:10"]);
        }
    }
}

#[tokio::test]
async fn unsubscribe_drops_queued_events_and_the_limit_still_applies() {
    let (a, b) = (topic("a", 8, 8), topic("b", 8, 8));
    publish(&a, 2);
    let mut feed = Feed::new(LagPolicy::default(), 1);
    feed.subscribe(a.clone(), Some(Cursor::new(5, 0))).unwrap();
    assert_eq!(
        feed.subscribe(b, None),
        Err(FeedError::TooManySubscriptions { max: 1 })
    );
    assert!(feed.unsubscribe("a"));
    assert!(!feed.unsubscribe("a"));
    publish(&a, 1);
    assert!(drain(&mut feed).is_empty());
    assert!(feed.is_empty());
    assert_eq!(a.subscriber_count(), 0);
}

#[tokio::test]
async fn follows_the_topic_into_a_new_epoch() {
    let a = topic("a", 8, 8);
    let data = || Payload::from_value(&serde_json::json!(0));
    let mut fresh = Feed::new(LagPolicy::default(), 4);
    fresh.subscribe(a.clone(), None).unwrap();
    let mut seasoned = Feed::new(LagPolicy::default(), 4);
    seasoned.subscribe(a.clone(), None).unwrap();
    publish(&a, 1);
    assert_eq!(drain(&mut seasoned), ["a:1"]);
    assert_eq!(drain(&mut fresh), ["a:1"]);
    // The log's epoch arrives: both follow; whoever had seen messages is told.
    a.ingest(Cursor::new(77, 40), None, data());
    let mut newcomer = Feed::new(LagPolicy::default(), 4);
    let b = topic("b", 8, 8);
    newcomer.subscribe(b.clone(), None).unwrap();
    b.ingest(Cursor::new(77, 3), None, data());
    assert_eq!(drain(&mut newcomer), ["b:3"]);
    assert_eq!(drain(&mut seasoned), ["lost a epoch", "a:40"]);
    a.ingest(Cursor::new(77, 41), None, data());
    assert_eq!(drain(&mut seasoned), ["a:41"]);
}

#[tokio::test]
async fn resuming_ahead_of_a_lagging_node_skips_what_the_client_saw() {
    // Node B has read n=1..2 of the log; the client saw up to n=5 on node A.
    let a = topic("a", 8, 8);
    let data = || Payload::from_value(&serde_json::json!(0));
    for seq in 1..=2 {
        a.ingest(Cursor::new(5, seq), None, data());
    }
    let mut feed = Feed::new(LagPolicy::default(), 4);
    assert_eq!(
        feed.subscribe(a.clone(), Some(Cursor::new(5, 5))).unwrap(),
        Cursor::new(5, 5)
    );
    for seq in 3..=7 {
        a.ingest(Cursor::new(5, seq), None, data());
    }
    assert_eq!(
        drain(&mut feed),
        ["a:6", "a:7"],
        "no loss signal, no duplicate"
    );
}

#[tokio::test]
async fn a_topic_created_by_a_subscriber_grows_its_channel_without_losing_a_message() {
    let registry = crate::Registry::new(crate::RegistryConfig {
        shards: 1,
        max_topics: 8,
        max_unpublished: 8,
        max_patterns: 16,
        namespaces: Default::default(),
        topic: TopicConfig {
            channel_capacity: 8,
            ..TopicConfig::default()
        },
    });
    let name = TopicName::new("lazy").unwrap();
    let (a, created) = registry.get_or_create_for_subscriber(&name).unwrap();
    assert!(created);
    let mut early = Feed::new(LagPolicy::default(), 4);
    early.subscribe(a.clone(), None).unwrap();
    // The first message swaps the one-slot channel for the full one: the early subscriber
    // gets it from history, then the rest live, each once; no lag at 5 < 8.
    publish(&a, 1);
    let mut late = Feed::new(LagPolicy::default(), 4);
    late.subscribe(a.clone(), None).unwrap();
    publish(&a, 5);
    assert_eq!(
        drain(&mut early),
        ["lazy:1", "lazy:2", "lazy:3", "lazy:4", "lazy:5", "lazy:6"]
    );
    assert_eq!(
        drain(&mut late),
        ["lazy:2", "lazy:3", "lazy:4", "lazy:5", "lazy:6"]
    );
    assert_eq!(a.subscriber_count(), 2);
}

#[tokio::test]
async fn a_log_carried_topic_created_by_a_subscriber_follows_the_log_s_epoch() {
    let registry = crate::Registry::new(crate::RegistryConfig {
        shards: 1,
        max_topics: 8,
        max_unpublished: 8,
        max_patterns: 16,
        namespaces: Default::default(),
        topic: TopicConfig {
            log_carried: true,
            lag_policy: None,
            delta: false,
            ..TopicConfig::default()
        },
    });
    let (a, _) = registry
        .get_or_create_for_subscriber(&TopicName::new("fed").unwrap())
        .unwrap();
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe(a.clone(), None).unwrap();
    let data = || Payload::from_value(&serde_json::json!(0));
    a.ingest(Cursor::new(77, 10), None, data());
    a.ingest(Cursor::new(77, 11), None, data());
    assert_eq!(drain(&mut feed), ["fed:10", "fed:11"], "no loss signal");
    // A cursor from another epoch, kept until the log spoke, is then reported lost; the
    // log's messages follow.
    let (b, _) = registry
        .get_or_create_for_subscriber(&TopicName::new("fed-b").unwrap())
        .unwrap();
    let mut resumed = Feed::new(LagPolicy::default(), 4);
    resumed
        .subscribe(b.clone(), Some(Cursor::new(5, 9)))
        .unwrap();
    b.ingest(Cursor::new(77, 3), None, data());
    assert_eq!(drain(&mut resumed), ["lost fed-b epoch", "fed-b:3"]);
}
