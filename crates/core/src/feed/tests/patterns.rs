//! Prefix pattern subscriptions.

use super::*;

fn registry() -> crate::Registry {
    crate::Registry::new(crate::RegistryConfig {
        shards: 4,
        max_topics: 64,
        max_unpublished: 64,
        max_patterns: 16,
        namespaces: Default::default(),
        topic: TopicConfig {
            channel_capacity: 8,
            history_len: 8,
            ..TopicConfig::default()
        },
    })
}

fn send(r: &crate::Registry, topic: &str, n: usize) {
    for i in 0..n {
        r.publish(
            &TopicName::new(topic).unwrap(),
            None,
            Payload::from_value(&serde_json::json!(i)),
        )
        .unwrap();
    }
}

fn pattern(p: &str) -> TopicName {
    TopicName::subscription(p).unwrap()
}

#[tokio::test]
async fn a_pattern_delivers_every_matching_topic_even_ones_created_later() {
    let r = registry();
    send(&r, "orders.eu", 1);
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe_pattern(&r, pattern("orders.*"), []).unwrap();
    assert_eq!(feed.len(), 1);
    assert!(feed.has_patterns() && feed.holds("orders.*"));
    send(&r, "orders.eu", 1);
    send(&r, "orders.us", 2); // created now
    send(&r, "news", 1);
    send(&r, "ordersx", 1);
    assert_eq!(
        drain(&mut feed),
        ["orders.eu:2", "orders.us:1", "orders.us:2"]
    );
    let ids: Vec<String> = feed
        .resume_positions()
        .map(|(t, c)| format!("{t}={}", c.seq))
        .collect();
    assert_eq!(ids, ["orders.eu=2", "orders.us=2"]);
    assert_eq!(feed.positions().count(), 0, "no topic subscribed by name");
    assert!(feed.unsubscribe("orders.*"));
    assert!(r.patterns().is_empty(), "the node forgot the pattern");
    send(&r, "orders.eu", 1);
    assert!(drain(&mut feed).is_empty());
}

#[tokio::test]
async fn a_resumed_pattern_replays_the_topics_it_saw_and_the_rest_live() {
    let r = registry();
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
    send(&r, "a.x", 2);
    drain(&mut feed);
    let resume: Vec<(TopicName, Cursor)> = feed
        .resume_positions()
        .map(|(t, c)| (t.clone(), c))
        .collect();
    drop(feed);
    // Away: a.x goes on, a.y is new, b.z another topic (its resume entry is ignored).
    send(&r, "a.x", 2);
    send(&r, "a.y", 1);
    let mut resumed = Feed::new(LagPolicy::default(), 4);
    let other = TopicName::new("b.z").unwrap();
    let with_other = resume
        .iter()
        .map(|(t, c)| (t, *c))
        .chain([(&other, Cursor::new(1, 1))]);
    resumed
        .subscribe_pattern(&r, pattern("a.*"), with_other)
        .unwrap();
    send(&r, "a.y", 1);
    assert_eq!(drain(&mut resumed), ["a.x:3", "a.x:4", "a.y:2"]);
}

#[tokio::test]
async fn overlapping_subscriptions_deliver_each_message_once() {
    let r = registry();
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe_pattern(&r, pattern("a.b.*"), []).unwrap();
    feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
    let (eu, _) = r
        .get_or_create_for_subscriber(&TopicName::new("a.b.c").unwrap())
        .unwrap();
    feed.subscribe(eu, None).unwrap();
    send(&r, "a.b.c", 1);
    send(&r, "a.b.d", 1);
    send(&r, "a.e", 1);
    let mut got = drain(&mut feed);
    got.sort();
    assert_eq!(got, ["a.b.c:1", "a.b.d:1", "a.e:1"]);
    // Named while the pattern has messages of it not yet delivered: each comes once.
    send(&r, "a.e", 2);
    let (e, _) = r
        .get_or_create_for_subscriber(&TopicName::new("a.e").unwrap())
        .unwrap();
    feed.subscribe(e, None).unwrap();
    send(&r, "a.e", 1);
    assert_eq!(drain(&mut feed), ["a.e:2", "a.e:3", "a.e:4"]);
    // Unnamed again, the pattern goes on from where the name stopped.
    assert!(feed.unsubscribe("a.e"));
    send(&r, "a.e", 1);
    assert_eq!(drain(&mut feed), ["a.e:5"]);
    assert!(feed.subscribe_pattern(&r, pattern("a.e.*"), []).is_ok());
    assert!(feed.unsubscribe("a.e.*"));
    // Without the narrower pattern, the wider one delivers its topics.
    assert!(feed.unsubscribe("a.b.*"));
    send(&r, "a.b.d", 1);
    assert_eq!(drain(&mut feed), ["a.b.d:2"]);
    assert_eq!(feed.len(), 2);
}

#[tokio::test]
async fn a_named_topic_keeps_every_message_when_its_pattern_lags() {
    let r = registry();
    let mut feed = Feed::new(LagPolicy::RecoverOrNotify, 4);
    feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
    let (n, _) = r
        .get_or_create_for_subscriber(&TopicName::new("a.n").unwrap())
        .unwrap();
    feed.subscribe(n, None).unwrap();
    // The pattern's channel (8 slots) overflows with a.x; a.n's own receiver does not.
    send(&r, "a.n", 1);
    send(&r, "a.x", 10);
    send(&r, "a.n", 1);
    let got = drain(&mut feed);
    let named: Vec<&String> = got.iter().filter(|e| e.starts_with("a.n")).collect();
    assert_eq!(named, ["a.n:1", "a.n:2"], "{got:?}");
    let lost: Vec<&String> = got.iter().filter(|e| e.starts_with("lost")).collect();
    assert_eq!(lost, ["lost a.* lagged"], "only the pattern lost: {got:?}");
}

#[tokio::test]
async fn unsubscribing_a_pattern_drops_its_queued_replay() {
    let r = registry();
    let mut first = Feed::new(LagPolicy::default(), 4);
    first.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
    send(&r, "a.x", 1);
    assert_eq!(drain(&mut first), ["a.x:1"]);
    let resume: Vec<(TopicName, Cursor)> = first
        .resume_positions()
        .map(|(t, c)| (t.clone(), c))
        .collect();
    send(&r, "a.x", 5);
    let mut feed = Feed::new(LagPolicy::default(), 4);
    let entries = resume.iter().map(|(t, c)| (t, *c));
    feed.subscribe_pattern(&r, pattern("a.*"), entries).unwrap();
    assert_eq!(feed.pending.len(), 5, "the replay is queued");
    assert!(feed.unsubscribe("a.*"));
    assert!(feed.pending.is_empty());
    assert!(drain(&mut feed).is_empty());
}

#[tokio::test]
async fn a_resume_list_replays_at_most_the_tracked_number_of_topics() {
    let r = registry();
    let mut first = Feed::new(LagPolicy::default(), 4);
    first.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
    let names: Vec<TopicName> = (0..crate::pattern::MAX_PATTERN_TOPICS + 8)
        .map(|i| TopicName::new(&format!("a.{i}")).unwrap())
        .collect();
    for name in &names {
        send(&r, name.as_str(), 1);
    }
    drain(&mut first);
    // A list longer than a connection tracks: only the first MAX_PATTERN_TOPICS replay.
    let entries: Vec<(TopicName, Cursor)> = names
        .iter()
        .map(|n| (n.clone(), r.get(n.as_str()).unwrap().head()))
        .map(|(n, c)| (n, Cursor::new(c.epoch, 0)))
        .collect();
    let mut feed = Feed::new(LagPolicy::default(), 4);
    let entries = entries.iter().map(|(t, c)| (t, *c));
    feed.subscribe_pattern(&r, pattern("a.*"), entries).unwrap();
    assert_eq!(feed.pending.len(), crate::pattern::MAX_PATTERN_TOPICS);
}

#[tokio::test]
async fn a_pattern_topic_forgotten_and_made_again_is_no_loss() {
    let r = crate::Registry::new(crate::RegistryConfig {
        topic: TopicConfig {
            channel_capacity: 8,
            history_len: 8,
            history_ttl: Duration::ZERO,
            ..TopicConfig::default()
        },
        ..crate::RegistryConfig::default()
    });
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
    send(&r, "a.x", 1);
    assert_eq!(drain(&mut feed), ["a.x:1"]);
    // Its history expired and no receiver of its own holds it: the topic is forgotten,
    // and its next publish makes it again in another epoch.
    assert_eq!(r.reclaim(), 1);
    send(&r, "a.x", 1);
    assert_eq!(drain(&mut feed), ["a.x:1"], "no loss signal");
}

#[tokio::test]
async fn a_pattern_counts_as_one_subscription() {
    let r = registry();
    let mut feed = Feed::new(LagPolicy::default(), 1);
    feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
    feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
    assert_eq!(
        feed.subscribe_pattern(&r, pattern("b.*"), []),
        Err(FeedError::TooManySubscriptions { max: 1 })
    );
    let b = r.get_or_create(&TopicName::new("b").unwrap()).unwrap();
    assert_eq!(
        feed.subscribe(b, None),
        Err(FeedError::TooManySubscriptions { max: 1 })
    );
}

#[tokio::test]
async fn a_lagging_pattern_follows_the_policy_naming_the_pattern() {
    for (policy, first) in [
        (LagPolicy::RecoverOrNotify, "lost a.* lagged"),
        (LagPolicy::Disconnect, "disconnect a.*"),
        (LagPolicy::Coalesce, "coalesced a.* 2"),
    ] {
        let r = registry();
        let mut feed = Feed::new(policy, 4);
        feed.subscribe_pattern(&r, pattern("a.*"), []).unwrap();
        send(&r, "a.x", 8 + 2);
        // A fresh coop budget: the previous round drained a thousand messages.
        tokio::task::yield_now().await;
        let got = drain(&mut feed);
        assert_eq!(got[0], first, "{policy:?}");
    }
}

#[tokio::test]
async fn next_waits_for_a_message() {
    let a = topic("a", 8, 8);
    let mut feed = Feed::new(LagPolicy::default(), 4);
    feed.subscribe(a.clone(), None).unwrap();
    let publisher = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        publish(&a, 1);
    });
    let event = tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .unwrap();
    assert!(matches!(event, FeedEvent::Message(m) if m.cursor().seq == 1));
    publisher.await.unwrap();
}
