use super::*;

fn open(id: &str, user: Option<&str>) -> Change {
    Change::Opened {
        id: id.into(),
        transport: "ws",
        user: user.map(str::to_owned),
    }
}

fn closed(id: &str) -> Change {
    Change::Closed { id: id.into() }
}

fn counts(pairs: &[(&str, usize)]) -> HashMap<String, usize> {
    pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
}

fn set(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_first_flush_writes_everything_then_only_what_changed() {
    let mut held = Held::default();
    held.apply(open("n-0", Some("ann")), 5);
    held.apply(open("n-1", Some("ann")), 6);
    held.apply(open("n-2", None), 7);
    let writes = held.writes(&counts(&[("news", 2), ("chat", 1)]));
    assert!(writes.rewrite);
    assert_eq!(writes.users.set, set(&[("ann", "n-0,n-1")]));
    assert_eq!(
        writes.conns.set,
        set(&[
            ("n-0", r#"{"transport":"ws","since":5,"user":"ann"}"#),
            ("n-1", r#"{"transport":"ws","since":6,"user":"ann"}"#),
            ("n-2", r#"{"transport":"ws","since":7}"#),
        ])
    );
    assert_eq!(writes.presence.set, set(&[("chat", "1"), ("news", "2")]));
    held.flushed(counts(&[("news", 2), ("chat", 1)]), HashSet::new());

    // Nothing changed: nothing but the refresh.
    let idle = held.writes(&counts(&[("news", 2), ("chat", 1)]));
    assert_eq!(
        (idle.rewrite, idle.users, idle.conns, idle.presence),
        (
            false,
            HashWrites::default(),
            HashWrites::default(),
            HashWrites::default()
        )
    );

    // One of ann's connections closes, one opens and closes between flushes, a topic
    // empties and another changes.
    held.apply(closed("n-0"), 8);
    held.apply(open("n-3", Some("bob")), 9);
    held.apply(closed("n-3"), 10);
    let writes = held.writes(&counts(&[("news", 3)]));
    assert!(!writes.rewrite);
    assert_eq!(writes.users.set, set(&[("ann", "n-1")]));
    assert_eq!(writes.users.del, ["bob"]);
    assert_eq!(writes.conns.set, set(&[]));
    assert_eq!(writes.conns.del, ["n-0", "n-3"]);
    assert_eq!(writes.presence.set, set(&[("news", "3")]));
    assert_eq!(writes.presence.del, ["chat"]);
}

#[test]
fn a_failed_flush_is_followed_by_a_rewrite_of_what_is_held() {
    let mut held = Held::default();
    held.apply(open("n-0", Some("ann")), 1);
    held.flushed(counts(&[("news", 1)]), HashSet::new());
    held.apply(closed("n-0"), 2);
    held.apply(open("n-1", None), 3);
    held.failed();
    let writes = held.writes(&counts(&[("news", 1)]));
    assert!(
        writes.rewrite,
        "Redis may hold anything after a failed flush"
    );
    assert_eq!(writes.users.set, set(&[]));
    assert_eq!(
        writes.conns.set,
        set(&[("n-1", r#"{"transport":"ws","since":3}"#)])
    );
    assert_eq!(writes.presence.set, set(&[("news", "1")]));
}

fn topic(name: &str) -> TopicName {
    TopicName::new(name).unwrap()
}

fn topics(list: &[&str]) -> HashSet<TopicName> {
    list.iter().map(|t| topic(t)).collect()
}

#[test]
fn member_changes_set_delete_and_drop_the_hashes_of_emptied_topics() {
    use crate::cluster::members::TopicChange;
    let mut held = Held {
        member_topics: topics(&["chat", "news"]),
        ..Held::default()
    };
    let changes = Changes {
        overflow: false,
        topics: vec![
            TopicChange {
                topic: topic("chat"),
                set: vec![],
                del: vec![7],
                empty: true,
            },
            TopicChange {
                topic: topic("fresh"),
                set: vec![(9, "{}".into())],
                del: vec![],
                empty: false,
            },
            TopicChange {
                topic: topic("gone"),
                set: vec![],
                del: vec![3],
                empty: true,
            },
            TopicChange {
                topic: topic("news"),
                set: vec![(1, "{}".into())],
                del: vec![2],
                empty: false,
            },
        ],
    };
    let writes = held.member_changes(changes);
    assert_eq!(
        writes.del,
        [topic("chat")],
        "a topic never written is not deleted"
    );
    assert!(!writes.clear_index);
    assert_eq!(writes.index_rem, [topic("chat")]);
    assert_eq!(writes.index_add, [topic("fresh")]);
    assert_eq!(
        writes.hashes,
        [
            (
                topic("fresh"),
                HashWrites {
                    set: set(&[("9", "{}")]),
                    del: vec![]
                }
            ),
            (
                topic("news"),
                HashWrites {
                    set: set(&[("1", "{}")]),
                    del: vec!["2".into()]
                }
            ),
        ]
    );
    assert_eq!(writes.after, topics(&["fresh", "news"]));
    held.flushed(HashMap::new(), writes.after);
    assert_eq!(held.member_topics, topics(&["fresh", "news"]));
}

#[test]
fn a_member_rewrite_deletes_whatever_redis_may_hold_first() {
    let held = Held {
        member_topics: topics(&["old"]),
        ..Held::default()
    };
    let all = vec![(topic("news"), vec![(1, "{}".to_string()), (2, "{}".into())])];
    let writes = held.member_rewrite(&["stale".into(), "news".into()], all);
    assert_eq!(writes.del, [topic("news"), topic("old"), topic("stale")]);
    assert!(writes.clear_index);
    assert_eq!(writes.index_add, [topic("news")]);
    assert_eq!(writes.hashes[0].1.set, set(&[("1", "{}"), ("2", "{}")]));
    assert_eq!(writes.after, topics(&["news"]));
}
