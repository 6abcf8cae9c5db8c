//! Who is subscribed to each topic on this node, for `GET /v1/presence/{topic}?members=true`:
//! every subscription of a connection (SSE, WebSocket, or a long-poll while it waits) is a
//! member of its topic, with the connection's id, its user (a token's `sub`), its transport, when it
//! subscribed, and the token's `info` claim.
//!
//! A lone node answers from this table. In a cluster, [`super::presence`] writes the changes
//! to Redis with the rest of the node's presence, every `cluster.presence_interval`, in the
//! same pipeline: the table keeps which (topic, connection) pairs changed since the last
//! flush, not a queue of events.
//!
//! Bounds: one entry per subscription, so at most open connections (waiting polls included)
//! × `limits.max_subscriptions` entries, each about 40 bytes plus its map's overhead; a
//! connection's user and `info` (at most [`crate::auth::MAX_INFO_BYTES`]) are shared by all
//! of its entries. The pairs changed between two flushes are bounded by [`MAX_CHANGES`]; past
//! it the flusher rewrites the node's members. The table is touched when a connection
//! subscribes, unsubscribes, changes its token or closes, never on delivery.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use herald_core::TopicName;

use super::control::TopicSubscribers as _;
pub(crate) use super::presence_event::Who;

/// Most (topic, connection) pairs remembered as changed between two flushes; past it the
/// next flush rewrites every member of the node instead.
pub(crate) const MAX_CHANGES: usize = 1_000_000;

/// One subscription of one connection to one topic.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// When the connection subscribed to the topic (Unix milliseconds).
    pub since: u64,
    /// Who it is.
    pub who: Arc<Who>,
}

impl Member {
    /// The member as stored in Redis: `{"since":..,"transport":..,"user":..,"info":{..}}`
    /// (`user` null when anonymous; no `info` when the token had none).
    pub(crate) fn to_json(&self) -> String {
        let mut text = serde_json::json!({
            "since": self.since,
            "transport": self.who.transport,
            "user": self.who.user.as_deref(),
        })
        .to_string();
        if let Some(info) = &self.who.info {
            text.pop(); // the closing brace
            text.push_str(r#","info":"#);
            text.push_str(info);
            text.push('}');
        }
        text
    }

    /// The member as the admin API lists it, on `node` under connection id `conn`.
    pub(crate) fn listed(&self, conn: u64, node: &str) -> serde_json::Value {
        let mut value = serde_json::json!({
            "conn": conn.to_string(),
            "node": node,
            "since": self.since,
            "transport": self.who.transport,
            "user": self.who.user.as_deref(),
        });
        if let Some(info) = self
            .who
            .info
            .as_deref()
            .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok())
        {
            value["info"] = info;
        }
        value
    }
}

/// Which topics' members are kept: `topics.presence`, and `presence` of each namespace
/// that sets it ([`crate::config::NamespaceConfig::presence`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Kept {
    default: bool,
    namespaces: HashMap<String, bool>,
}

impl Kept {
    /// As the configuration says.
    pub(crate) fn from_config(config: &crate::config::Config) -> Self {
        Self {
            default: config.topics.presence,
            namespaces: config
                .namespaces
                .iter()
                .filter_map(|(name, ns)| Some((name.clone(), ns.presence?)))
                .collect(),
        }
    }

    /// Every topic's members (for tests).
    #[cfg(test)]
    pub(crate) fn all() -> Self {
        Self {
            default: true,
            namespaces: HashMap::new(),
        }
    }

    /// Whether the members of any topic are kept: when none are, connections hold nothing
    /// for them.
    pub(crate) fn any(&self) -> bool {
        self.default || self.namespaces.values().any(|&kept| kept)
    }

    /// Whether the members of `topic` are kept.
    pub(crate) fn keeps(&self, topic: &str) -> bool {
        crate::config::namespaces::namespace_of(topic)
            .and_then(|ns| self.namespaces.get(ns))
            .copied()
            .unwrap_or(self.default)
    }
}

/// The members of every topic on this node.
#[derive(Debug)]
pub(crate) struct Members {
    table: parking_lot::Mutex<Table>,
    /// Whether a flusher takes the changes ([`Self::take_changes`]); a lone node keeps none.
    tracked: bool,
    /// Which topics' members are kept.
    kept: Kept,
    /// Who tells the subscribers of a topic when a member joins or leaves, when any
    /// namespace asks for it ([`super::join_leave`]).
    announcer: Option<super::join_leave::Announcer>,
}

#[derive(Debug, Default)]
struct Table {
    /// Topic → its members by connection id (ordered: a page starts after an id).
    topics: HashMap<TopicName, BTreeMap<u64, Member>>,
    /// The (topic, connection) pairs changed since the flusher last took them.
    changed: HashMap<TopicName, HashSet<u64>>,
    /// How many pairs `changed` holds.
    changes: usize,
    /// More than [`MAX_CHANGES`] changed: the flusher must rewrite everything.
    overflow: bool,
}

impl Table {
    fn changed(&mut self, topic: &TopicName, id: u64) {
        if self.overflow {
            return;
        }
        if self.changes >= MAX_CHANGES {
            self.overflow = true;
            self.changed = HashMap::new();
            self.changes = 0;
            return;
        }
        if self.changed.entry(topic.clone()).or_default().insert(id) {
            self.changes += 1;
        }
    }
}

/// What changed in one topic since the last flush.
#[derive(Debug, PartialEq)]
pub(crate) struct TopicChange {
    /// The topic.
    pub topic: TopicName,
    /// Members added or changed: connection id → stored JSON ([`Member::to_json`]).
    pub set: Vec<(u64, String)>,
    /// Members gone.
    pub del: Vec<u64>,
    /// Whether the topic has no member left on this node.
    pub empty: bool,
}

/// What changed since the last flush.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Changes {
    /// Too much changed to remember: rewrite every member.
    pub overflow: bool,
    /// Each changed topic, by name.
    pub topics: Vec<TopicChange>,
}

impl Members {
    /// An empty table of the members of the topics `kept` names; `tracked` when a flusher
    /// will take its changes (in a cluster).
    #[cfg(test)]
    pub(crate) fn new(tracked: bool, kept: Kept) -> Self {
        Self::with_announcer(tracked, kept, None)
    }

    /// Like [`Self::new`], announcing joins and leaves with `announcer`.
    pub(crate) fn with_announcer(
        tracked: bool,
        kept: Kept,
        announcer: Option<super::join_leave::Announcer>,
    ) -> Self {
        Self {
            table: parking_lot::Mutex::default(),
            tracked,
            kept,
            announcer,
        }
    }

    /// Tells the subscribers of `topics` that connection `id` (as `who`) joined or left them
    /// (`kind`), when their namespace asks for it.
    fn announce(
        &self,
        kind: super::presence_event::PresenceKind,
        id: u64,
        who: &Who,
        topics: &[TopicName],
    ) {
        if let Some(announcer) = &self.announcer {
            for topic in topics {
                announcer.announce(|| self.ids_of(topic.as_str(), id), kind, id, who, topic);
            }
        }
    }

    /// Which topics' members are kept.
    pub(crate) fn kept(&self) -> &Kept {
        &self.kept
    }

    /// Connection `id` (as `who`) is now a member of `put` (since `now` where it was not
    /// already; where it was, its entry takes `who` and keeps its time) and no longer of
    /// `remove`.
    fn update(&self, id: u64, who: &Arc<Who>, put: &[TopicName], remove: &[TopicName], now: u64) {
        if put.is_empty() && remove.is_empty() {
            return;
        }
        let mut table = self.table.lock();
        for topic in put {
            table
                .topics
                .entry(topic.clone())
                .or_default()
                .entry(id)
                .and_modify(|m| m.who = who.clone())
                .or_insert_with(|| Member {
                    since: now,
                    who: who.clone(),
                });
            if self.tracked {
                table.changed(topic, id);
            }
        }
        for topic in remove {
            let Some(members) = table.topics.get_mut(topic) else {
                continue;
            };
            members.remove(&id);
            if members.is_empty() {
                table.topics.remove(topic);
            }
            if self.tracked {
                table.changed(topic, id);
            }
        }
    }

    /// Up to `limit` members of `topic`, by connection id after `after`, and whether more
    /// follow.
    pub(crate) fn page(
        &self,
        topic: &str,
        after: Option<u64>,
        limit: usize,
    ) -> (Vec<(u64, Member)>, bool) {
        let table = self.table.lock();
        let Some(members) = table.topics.get(topic) else {
            return (Vec::new(), false);
        };
        let from = match after {
            Some(id) => std::ops::Bound::Excluded(id),
            None => std::ops::Bound::Unbounded,
        };
        let mut page: Vec<(u64, Member)> = members
            .range((from, std::ops::Bound::Unbounded))
            .take(limit.saturating_add(1))
            .map(|(id, m)| (*id, m.clone()))
            .collect();
        let more = page.len() > limit;
        page.truncate(limit);
        (page, more)
    }

    /// The changes since the last call, each resolved against the table now (a member that
    /// came and went between two flushes is a deletion), sorted by topic and id.
    pub(crate) fn take_changes(&self) -> Changes {
        let mut table = self.table.lock();
        let changed = std::mem::take(&mut table.changed);
        table.changes = 0;
        let overflow = std::mem::take(&mut table.overflow);
        let mut topics: Vec<TopicChange> = changed
            .into_iter()
            .map(|(topic, ids)| {
                let members = table.topics.get(&topic);
                let mut change = TopicChange {
                    empty: members.is_none(),
                    topic,
                    set: Vec::new(),
                    del: Vec::new(),
                };
                for id in ids {
                    match members.and_then(|m| m.get(&id)) {
                        Some(member) => change.set.push((id, member.to_json())),
                        None => change.del.push(id),
                    }
                }
                change.set.sort_unstable_by_key(|(id, _)| *id);
                change.del.sort_unstable();
                change
            })
            .collect();
        drop(table);
        topics.sort_unstable_by(|a, b| a.topic.cmp(&b.topic));
        Changes { overflow, topics }
    }

    /// Every member of every topic, for a rewrite (entries are copied under the lock, their
    /// JSON made after it).
    pub(crate) fn snapshot(&self) -> Vec<(TopicName, Vec<(u64, String)>)> {
        let copied: Vec<(TopicName, Vec<(u64, Member)>)> = {
            let table = self.table.lock();
            table
                .topics
                .iter()
                .map(|(t, m)| {
                    (
                        t.clone(),
                        m.iter().map(|(id, m)| (*id, m.clone())).collect(),
                    )
                })
                .collect()
        };
        let mut all: Vec<_> = copied
            .into_iter()
            .map(|(t, m)| (t, m.into_iter().map(|(id, m)| (id, m.to_json())).collect()))
            .collect();
        all.sort_unstable_by(|a: &(TopicName, Vec<_>), b| a.0.cmp(&b.0));
        all
    }

    /// How many subscriptions the table holds (every topic's members).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.lock().topics.values().map(BTreeMap::len).sum()
    }

    /// Whether no connection is subscribed to anything.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.table.lock().topics.is_empty()
    }
}

/// The `info` members carry: a token's is bounded already, a connect hook's may be larger
/// (up to its answer's size) and is then left out, to keep each entry bounded.
fn listed(info: Option<Arc<String>>) -> Option<Arc<String>> {
    info.filter(|i| i.len() <= crate::auth::MAX_INFO_BYTES)
}

/// One connection's place in [`Members`]: the topics it is a member
/// of, until it is dropped.
#[derive(Debug)]
pub(crate) struct Membership {
    id: u64,
    who: Arc<Who>,
    /// Sorted, without duplicates.
    topics: Vec<TopicName>,
    members: Arc<Members>,
}

impl super::control::TopicSubscribers for Members {
    /// The connections subscribed to `topic` on this node, but `except`, in id order (the
    /// receivers of a join or leave event: O(the topic's members), under the table's lock).
    fn ids_of(&self, topic: &str, except: u64) -> Vec<u64> {
        let table = self.table.lock();
        table.topics.get(topic).map_or_else(Vec::new, |members| {
            members.keys().copied().filter(|&id| id != except).collect()
        })
    }
}

impl Membership {
    /// Connection `id`, as `who`, a member of nothing yet.
    pub(crate) fn new(members: Arc<Members>, id: u64, who: Who) -> Self {
        let who = Who {
            info: listed(who.info),
            ..who
        };
        Self {
            id,
            who: Arc::new(who),
            topics: Vec::new(),
            members,
        }
    }

    /// The connection is subscribed to exactly `topics` now (its feed's topics): those new
    /// join since now, those gone leave.
    pub(crate) fn set_topics<'a>(&mut self, topics: impl IntoIterator<Item = &'a TopicName>) {
        let kept = &self.members.kept;
        let mut now: Vec<TopicName> = topics
            .into_iter()
            .filter(|t| kept.keeps(t.as_str()))
            .cloned()
            .collect();
        now.sort_unstable();
        now.dedup();
        if now == self.topics {
            return;
        }
        let added: Vec<TopicName> = now
            .iter()
            .filter(|t| self.topics.binary_search(t).is_err())
            .cloned()
            .collect();
        let removed: Vec<TopicName> = self
            .topics
            .iter()
            .filter(|t| now.binary_search(t).is_err())
            .cloned()
            .collect();
        self.members.update(
            self.id,
            &self.who,
            &added,
            &removed,
            crate::bridge::now_ms(),
        );
        self.topics = now;
        use super::presence_event::PresenceKind::{Join, Leave};
        self.members.announce(Leave, self.id, &self.who, &removed);
        self.members.announce(Join, self.id, &self.who, &added);
    }

    /// The connection now acts for `user`, with the token's `info`: its entries say so.
    pub(crate) fn set_who(&mut self, user: Option<Arc<str>>, info: Option<Arc<String>>) {
        let info = listed(info);
        if self.who.user == user && self.who.info == info {
            return;
        }
        self.who = Arc::new(Who {
            transport: self.who.transport,
            user,
            info,
        });
        self.members.update(
            self.id,
            &self.who,
            &self.topics,
            &[],
            crate::bridge::now_ms(),
        );
    }

    /// The token's `info` the entries carry.
    #[cfg(test)]
    pub(crate) fn info(&self) -> Option<&Arc<String>> {
        self.who.info.as_ref()
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.members
            .update(self.id, &self.who, &[], &self.topics, 0);
        let leave = super::presence_event::PresenceKind::Leave;
        self.members
            .announce(leave, self.id, &self.who, &self.topics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<TopicName> {
        list.iter().map(|t| TopicName::new(t).unwrap()).collect()
    }

    fn who(user: Option<&str>, info: Option<&str>) -> Who {
        Who {
            transport: "ws",
            user: user.map(Arc::from),
            info: info.map(|i| Arc::new(i.to_string())),
        }
    }

    #[test]
    fn a_membership_follows_its_topics_and_leaves_when_dropped() {
        let members = Arc::new(Members::new(false, Kept::all()));
        let mut a = Membership::new(members.clone(), 1, who(Some("ann"), Some(r#"{"x":1}"#)));
        let mut b = Membership::new(members.clone(), 2, who(None, None));
        a.set_topics(&names(&["news", "chat"]));
        b.set_topics(&names(&["news"]));
        let (page, more) = members.page("news", None, 10);
        assert!(!more);
        assert_eq!(page.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(
            page[0].1.listed(1, "n1"),
            serde_json::json!({"conn": "1", "node": "n1", "since": page[0].1.since,
                "transport": "ws", "user": "ann", "info": {"x": 1}})
        );
        assert_eq!(page[1].1.listed(2, "n1")["user"], serde_json::Value::Null);
        let since = page[0].1.since;

        // A new token: the same subscriptions, the same times, the new user.
        a.set_who(Some(Arc::from("bob")), None);
        a.set_topics(&names(&["news"]));
        let (page, _) = members.page("news", None, 1);
        assert_eq!(page[0].1.since, since);
        assert_eq!(page[0].1.who.user.as_deref(), Some("bob"));
        assert!(members.page("chat", None, 10).0.is_empty());
        assert_eq!(members.page("news", Some(1), 10).0.len(), 1);
        assert_eq!(members.len(), 2);
        drop(a);
        drop(b);
        assert!(members.is_empty());
        assert_eq!(members.take_changes(), Changes::default(), "untracked");
    }

    #[test]
    fn pages_list_every_member_once_in_id_order() {
        let members = Arc::new(Members::new(false, Kept::all()));
        let held: Vec<Membership> = (0..25)
            .map(|id| {
                let mut m = Membership::new(members.clone(), id, who(None, None));
                m.set_topics(&names(&["t"]));
                m
            })
            .collect();
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let (page, more) = members.page("t", after, 10);
            seen.extend(page.iter().map(|(id, _)| *id));
            after = page.last().map(|(id, _)| *id);
            if !more {
                break;
            }
        }
        assert_eq!(seen, (0..25).collect::<Vec<_>>());
        drop(held);
    }

    #[test]
    fn changes_are_resolved_against_the_table_when_taken() {
        let members = Arc::new(Members::new(true, Kept::all()));
        let mut a = Membership::new(members.clone(), 1, who(Some("ann"), None));
        a.set_topics(&names(&["news", "chat"]));
        let taken = members.take_changes();
        assert!(!taken.overflow);
        let json = |since: u64| format!(r#"{{"since":{since},"transport":"ws","user":"ann"}}"#);
        let since = members.page("news", None, 1).0[0].1.since;
        assert_eq!(
            taken.topics,
            [
                TopicChange {
                    topic: TopicName::new("chat").unwrap(),
                    set: vec![(1, json(since))],
                    del: vec![],
                    empty: false,
                },
                TopicChange {
                    topic: TopicName::new("news").unwrap(),
                    set: vec![(1, json(since))],
                    del: vec![],
                    empty: false,
                },
            ]
        );
        assert_eq!(members.take_changes(), Changes::default());

        // One that comes and goes between flushes is a deletion; a topic left empty says so.
        let mut b = Membership::new(members.clone(), 2, who(None, None));
        b.set_topics(&names(&["news"]));
        drop(b);
        a.set_topics(&names(&["news"]));
        let taken = members.take_changes();
        assert_eq!(taken.topics.len(), 2);
        assert_eq!(
            (&taken.topics[0].del, taken.topics[0].empty),
            (&vec![1], true)
        );
        assert_eq!(
            (&taken.topics[1].del, taken.topics[1].empty),
            (&vec![2], false)
        );
        assert_eq!(
            members.snapshot(),
            [(TopicName::new("news").unwrap(), vec![(1, json(since))])]
        );
    }
}
