//! What a presence flush writes: the members held since the last one, and the Redis writes they
//! come to.

use super::*;

/// What a node holds and what changed since its last flush to Redis.
#[derive(Debug)]
pub(super) struct Held {
    /// Connection id → its entry (JSON).
    pub(super) conns: HashMap<String, String>,
    /// User → the ids of its connections.
    pub(super) users: HashMap<String, BTreeSet<String>>,
    pub(super) conn_user: HashMap<String, String>,
    pub(super) changed_users: HashSet<String>,
    pub(super) added: Vec<String>,
    pub(super) removed: Vec<String>,
    /// Subscribers per topic as last written.
    pub(super) presence: HashMap<String, usize>,
    /// Topics whose member hash Redis may hold (after a failed flush, more than it does).
    pub(super) member_topics: HashSet<TopicName>,
    /// Write everything (first flush, after a failed one, after dropped changes).
    pub(super) rewrite: bool,
}

impl Default for Held {
    fn default() -> Self {
        Self {
            conns: HashMap::new(),
            users: HashMap::new(),
            conn_user: HashMap::new(),
            changed_users: HashSet::new(),
            added: Vec::new(),
            removed: Vec::new(),
            presence: HashMap::new(),
            member_topics: HashSet::new(),
            rewrite: true,
        }
    }
}

/// One hash's writes in a flush: replace it whole, or set and delete fields.
#[derive(Debug, Default, PartialEq)]
pub(super) struct HashWrites {
    pub(super) set: Vec<(String, String)>,
    pub(super) del: Vec<String>,
}

/// The names of `topics`, as Redis arguments.
pub(super) fn names(topics: &[TopicName]) -> Vec<&str> {
    topics.iter().map(TopicName::as_str).collect()
}

/// A flush's writes to the node's member hashes and their index (the set of their topics).
#[derive(Debug, Default, PartialEq)]
pub(super) struct MemberWrites {
    /// Hashes deleted whole, first: on a rewrite every one Redis may hold, else those of the
    /// topics left without members.
    pub(super) del: Vec<TopicName>,
    /// Whether the index is deleted (a rewrite), before it is added to.
    pub(super) clear_index: bool,
    pub(super) index_rem: Vec<TopicName>,
    pub(super) index_add: Vec<TopicName>,
    /// Members set and deleted, per topic (connection ids as decimal text).
    pub(super) hashes: Vec<(TopicName, HashWrites)>,
    /// The topics with a member hash once the flush is done (their TTL is refreshed).
    pub(super) after: HashSet<TopicName>,
}

/// A flush's writes to the node's three hashes; `rewrite` replaces each whole.
#[derive(Debug, PartialEq)]
pub(super) struct Writes {
    pub(super) rewrite: bool,
    pub(super) users: HashWrites,
    pub(super) conns: HashWrites,
    pub(super) presence: HashWrites,
}

impl Writes {
    /// Adds `hash`'s writes to `key` to `pipe`, 1000 fields a command.
    pub(super) fn hash(&self, pipe: &mut redis::Pipeline, key: &str, hash: &HashWrites) {
        if self.rewrite {
            pipe.del(key).ignore();
        }
        for chunk in hash.set.chunks(1000) {
            pipe.hset_multiple(key, chunk).ignore();
        }
        for chunk in hash.del.chunks(1000) {
            pipe.hdel(key, chunk).ignore();
        }
    }
}

impl Held {
    pub(super) fn apply(&mut self, change: Change, now_ms: u64) {
        match change {
            Change::Opened {
                id,
                transport,
                user,
            } => {
                let mut entry = serde_json::json!({ "transport": transport, "since": now_ms });
                if let Some(user) = &user {
                    entry["user"] = user.as_str().into();
                    self.users
                        .entry(user.clone())
                        .or_default()
                        .insert(id.clone());
                    self.conn_user.insert(id.clone(), user.clone());
                    self.changed_users.insert(user.clone());
                }
                self.conns.insert(id.clone(), entry.to_string());
                self.added.push(id);
            }
            Change::Closed { id } => {
                self.conns.remove(&id);
                if let Some(user) = self.conn_user.remove(&id) {
                    if let Some(ids) = self.users.get_mut(&user) {
                        ids.remove(&id);
                        if ids.is_empty() {
                            self.users.remove(&user);
                        }
                    }
                    self.changed_users.insert(user);
                }
                self.removed.push(id);
            }
        }
    }

    /// What the next flush writes, given the topics' subscriber counts now: everything on a
    /// rewrite, else only what changed since the last flush.
    pub(super) fn writes(&self, subscribers: &HashMap<String, usize>) -> Writes {
        let joined =
            |ids: &BTreeSet<String>| ids.iter().map(String::as_str).collect::<Vec<_>>().join(",");
        let pairs = |m: &HashMap<String, usize>, keep: &dyn Fn(&String, usize) -> bool| {
            let mut v: Vec<(String, String)> = m
                .iter()
                .filter(|(k, n)| keep(k, **n))
                .map(|(k, n)| (k.clone(), n.to_string()))
                .collect();
            v.sort();
            v
        };
        if self.rewrite {
            let mut users: Vec<_> = self
                .users
                .iter()
                .map(|(u, ids)| (u.clone(), joined(ids)))
                .collect();
            let mut conns: Vec<_> = self
                .conns
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            users.sort();
            conns.sort();
            return Writes {
                rewrite: true,
                users: HashWrites {
                    set: users,
                    del: Vec::new(),
                },
                conns: HashWrites {
                    set: conns,
                    del: Vec::new(),
                },
                presence: HashWrites {
                    set: pairs(subscribers, &|_, _| true),
                    del: Vec::new(),
                },
            };
        }
        let mut users = HashWrites::default();
        let mut changed: Vec<&String> = self.changed_users.iter().collect();
        changed.sort();
        for user in changed {
            match self.users.get(user) {
                Some(ids) => users.set.push((user.clone(), joined(ids))),
                None => users.del.push(user.clone()),
            }
        }
        let conns = HashWrites {
            set: self
                .added
                .iter()
                .filter_map(|id| self.conns.get(id).map(|e| (id.clone(), e.clone())))
                .collect(),
            del: self
                .removed
                .iter()
                .filter(|id| !self.conns.contains_key(*id))
                .cloned()
                .collect(),
        };
        let mut zeroed: Vec<String> = self
            .presence
            .keys()
            .filter(|t| !subscribers.contains_key(*t))
            .cloned()
            .collect();
        zeroed.sort();
        let presence = HashWrites {
            set: pairs(subscribers, &|t, n| self.presence.get(t) != Some(&n)),
            del: zeroed,
        };
        Writes {
            rewrite: false,
            users,
            conns,
            presence,
        }
    }

    /// The member writes that replace what Redis holds with `all` (every member of the node,
    /// by topic), deleting first the hashes of `stale` (what the index names) and of every
    /// topic written before.
    pub(super) fn member_rewrite(
        &self,
        stale: &[String],
        all: Vec<(TopicName, Vec<(u64, String)>)>,
    ) -> MemberWrites {
        let mut del: BTreeSet<TopicName> = self.member_topics.iter().cloned().collect();
        del.extend(stale.iter().filter_map(|t| TopicName::new(t).ok()));
        let hashes: Vec<(TopicName, HashWrites)> = all
            .into_iter()
            .map(|(topic, members)| {
                let set = members
                    .into_iter()
                    .map(|(id, json)| (id.to_string(), json))
                    .collect();
                (topic, HashWrites { set, del: vec![] })
            })
            .collect();
        MemberWrites {
            del: del.into_iter().collect(),
            clear_index: true,
            index_rem: Vec::new(),
            index_add: hashes.iter().map(|(t, _)| t.clone()).collect(),
            after: hashes.iter().map(|(t, _)| t.clone()).collect(),
            hashes,
        }
    }

    /// The member writes of `changes` (taken since the last flush).
    pub(super) fn member_changes(&self, changes: Changes) -> MemberWrites {
        let mut writes = MemberWrites {
            after: self.member_topics.clone(),
            ..MemberWrites::default()
        };
        for change in changes.topics {
            let written = self.member_topics.contains(&change.topic);
            if change.empty {
                if written {
                    writes.after.remove(&change.topic);
                    writes.index_rem.push(change.topic.clone());
                    writes.del.push(change.topic);
                }
                continue;
            }
            if !written {
                writes.index_add.push(change.topic.clone());
                writes.after.insert(change.topic.clone());
            }
            let hash = HashWrites {
                set: change
                    .set
                    .into_iter()
                    .map(|(id, json)| (id.to_string(), json))
                    .collect(),
                del: change.del.iter().map(u64::to_string).collect(),
            };
            writes.hashes.push((change.topic, hash));
        }
        writes
    }

    /// The flush succeeded: `subscribers` is what Redis holds now, and the member hashes of
    /// `member_topics`.
    pub(super) fn flushed(
        &mut self,
        subscribers: HashMap<String, usize>,
        member_topics: HashSet<TopicName>,
    ) {
        self.member_topics = member_topics;
        self.rewrite = false;
        self.changed_users.clear();
        self.added.clear();
        self.removed.clear();
        self.presence = subscribers;
    }

    /// The flush failed: the next one writes everything.
    pub(super) fn failed(&mut self) {
        self.rewrite = true;
        self.added.clear();
        self.removed.clear();
    }
}
