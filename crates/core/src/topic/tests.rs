use super::*;
use serde_json::json;

fn topic(history_len: usize) -> Topic {
    let config = TopicConfig {
        channel_capacity: 4,
        history_len,
        history_ttl: Duration::from_secs(60),
        log_carried: false,
        lag_policy: None,
        delta: false,
    };
    Topic::with_epoch(TopicName::new("t").unwrap(), &config, 7)
}

fn publish(t: &Topic, n: u64) {
    for i in 0..n {
        t.publish(None, Payload::from_value(&json!(i)));
    }
}

#[test]
fn history_pages_from_the_newest_or_after_a_position() {
    let t = topic(5);
    publish(&t, 8); // positions 1..=8, history holds 4..=8
    let seqs = |p: &HistoryPage| {
        p.messages
            .iter()
            .map(|m| m.cursor().seq)
            .collect::<Vec<_>>()
    };
    let newest = t.history(None, 3);
    assert_eq!(
        (seqs(&newest), newest.lost, newest.more),
        (vec![6, 7, 8], None, false)
    );
    let page = t.history(Some(Cursor::new(7, 4)), 2);
    assert_eq!(
        (seqs(&page), page.lost, page.more),
        (vec![5, 6], None, true)
    );
    let last = t.history(Some(Cursor::new(7, 6)), 2);
    assert_eq!((seqs(&last), last.more), (vec![7, 8], false));
    let expired = t.history(Some(Cursor::new(7, 1)), 10);
    assert_eq!(
        (seqs(&expired), expired.lost),
        (vec![4, 5, 6, 7, 8], Some(LossReason::Expired))
    );
    let other = t.history(Some(Cursor::new(99, 5)), 2);
    assert_eq!(
        (seqs(&other), other.lost, other.more),
        (vec![4, 5], Some(LossReason::Epoch), true)
    );
    let ahead = t.history(Some(Cursor::new(7, 20)), 2);
    assert_eq!((seqs(&ahead), ahead.lost), (vec![], None));
}

#[tokio::test]
async fn ingest_keeps_log_positions_and_drops_duplicates() {
    let t = topic(8);
    let mut sub = t.subscribe(None);
    let data = || Payload::from_value(&json!(1));
    assert!(t.ingest(Cursor::new(9, 100), None, data()).is_some());
    assert!(
        t.ingest(Cursor::new(9, 100), None, data()).is_none(),
        "duplicate"
    );
    assert!(
        t.ingest(Cursor::new(9, 50), None, data()).is_none(),
        "replayed older record"
    );
    assert!(t.ingest(Cursor::new(9, 105), None, data()).is_some());
    assert_eq!(t.head(), Cursor::new(9, 105));
    assert_eq!(
        sub.receiver.recv().await.unwrap().cursor(),
        Cursor::new(9, 100)
    );
    assert_eq!(
        sub.receiver.recv().await.unwrap().cursor(),
        Cursor::new(9, 105)
    );
    // Resume works on log positions, gaps included.
    let resumed = t.subscribe(Some(Cursor::new(9, 100)));
    assert_eq!(resumed.replay.len(), 1);
    // A new epoch (the log was reset) starts an empty history.
    assert!(t.ingest(Cursor::new(10, 1), None, data()).is_some());
    assert_eq!(t.stats().history_len, 1);
    assert_eq!(
        t.subscribe(Some(Cursor::new(9, 105))).lost,
        Some(LossReason::Epoch)
    );
}

#[test]
fn positions_grow_from_one() {
    let t = topic(8);
    assert_eq!(t.head(), Cursor::new(7, 0));
    publish(&t, 3);
    assert_eq!(t.head(), Cursor::new(7, 3));
}

#[tokio::test]
async fn resume_replays_then_goes_live_without_gap() {
    let t = topic(8);
    publish(&t, 5);
    let mut sub = t.subscribe(Some(Cursor::new(7, 2)));
    assert_eq!(sub.lost, None);
    assert_eq!(sub.start, Cursor::new(7, 2));
    let replayed: Vec<u64> = sub.replay.iter().map(|m| m.cursor().seq).collect();
    assert_eq!(replayed, [3, 4, 5]);
    publish(&t, 1);
    assert_eq!(sub.receiver.recv().await.unwrap().cursor().seq, 6);
}

#[test]
fn expired_and_foreign_cursors_are_reported_lost() {
    let t = topic(2);
    publish(&t, 5);
    let sub = t.subscribe(Some(Cursor::new(7, 1)));
    assert_eq!(sub.lost, Some(LossReason::Expired));
    assert_eq!(sub.start, Cursor::new(7, 5));
    assert!(sub.replay.is_empty());
    assert_eq!(
        t.subscribe(Some(Cursor::new(8, 4))).lost,
        Some(LossReason::Epoch)
    );
    assert_eq!(t.subscribe(Some(Cursor::new(7, 3))).lost, None);
}

#[test]
fn a_cursor_ahead_of_the_head_is_not_arrived_yet() {
    let t = topic(8);
    publish(&t, 2);
    let sub = t.subscribe(Some(Cursor::new(7, 5)));
    assert_eq!(sub.lost, None, "ahead is not lost");
    assert_eq!(sub.start, Cursor::new(7, 5));
    assert!(sub.replay.is_empty());
}

#[test]
fn a_log_carried_topic_waits_for_its_log_to_name_the_epoch() {
    let config = TopicConfig {
        log_carried: true,
        ..TopicConfig::default()
    };
    let t = Topic::with_epoch(TopicName::new("t").unwrap(), &config, 7);
    // Not known yet: the cursor is kept, nothing is reported lost.
    let sub = t.subscribe(Some(Cursor::new(9, 4)));
    assert_eq!((sub.lost, sub.start), (None, Cursor::new(9, 4)));
    t.ingest(Cursor::new(9, 3), None, Payload::from_value(&json!(1)));
    // Now the epoch is the log's: another one is lost, as on a local topic.
    assert_eq!(
        t.subscribe(Some(Cursor::new(8, 4))).lost,
        Some(LossReason::Epoch)
    );
    assert_eq!(t.subscribe(Some(Cursor::new(9, 3))).lost, None);
}

#[test]
fn idle_only_without_subscribers_and_history() {
    let t = topic(2);
    assert!(!t.is_idle(Instant::now(), false));
    assert!(t.is_idle(Instant::now() + Duration::from_secs(61), false));
    let sub = t.subscribe(None);
    assert!(!t.is_idle(Instant::now(), false));
    drop(sub);
    t.touch();
    // Kept for the history window after its last subscriber left...
    assert!(!t.is_idle(Instant::now(), false));
    assert!(t.is_idle(Instant::now() + Duration::from_secs(61), false));
    publish(&t, 1);
    assert!(!t.is_idle(Instant::now(), false));
    assert!(t.is_idle(Instant::now() + Duration::from_secs(61), false));
}
