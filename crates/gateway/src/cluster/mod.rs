//! The node's place in the cluster, seen through its client connections: the connection
//! registry and topic presence kept in Redis ([`presence`]), and client events produced to
//! Kafka ([`upstream`]). Both are [`ConnectionObserver`]s: told when a connection opens and
//! closes, never in the way of delivery.
//!
//! The logs that carry messages between nodes are in [`crate::bridge`]; this module uses the
//! bridges' connection settings ([`crate::bridge::redis_conn`], [`crate::bridge::kafka_props`])
//! and nothing imports it but the state and the server's start-up. Connection ids are unique
//! across the cluster and across restarts ([`ids`]), with node numbers leased from Redis
//! ([`lease`]). The server acts on live connections, whichever node holds them, through
//! [`control`]. Which connections are subscribed to each topic is in [`members`], which
//! presence writes to Redis in a cluster.

pub(crate) mod control;
pub(crate) mod ids;
pub(crate) mod join_leave;
pub(crate) mod lease;
pub(crate) mod members;
pub(crate) mod observer;
pub(crate) mod presence;
pub(crate) mod presence_event;
pub(crate) mod upstream;

pub(crate) use observer::ConnectionObserver;

use std::sync::Arc;

use crate::telemetry::metrics::{CloseReason, ConnectionGuard, Transport};

/// Who observes client connections besides the cluster's own bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct Observers {
    /// The connection registry and topic presence in Redis.
    pub presence: Option<Arc<presence::Presence>>,
    /// Client events produced to Kafka.
    pub upstream: Option<Arc<upstream::Upstream>>,
    /// Others (tests, embedders).
    pub others: Vec<Arc<dyn ConnectionObserver>>,
}

/// This node in the cluster as its connections see it, built once at start-up: connection
/// ids, the node's leases, and the observers of connections.
#[derive(Debug)]
pub(crate) struct Cluster {
    ids: Arc<ids::ConnectionIds>,
    lease: Option<Arc<lease::Lease>>,
    connections: Arc<control::Connections>,
    members: Arc<members::Members>,
    relay: Option<Arc<control::Relay>>,
    observers: Arc<[Arc<dyn ConnectionObserver>]>,
    presence: Option<Arc<presence::Presence>>,
    upstream: Option<Arc<upstream::Upstream>>,
}

impl Cluster {
    /// A node alone: no observer, no lease; the members of the topics `kept` names listed.
    #[cfg(test)]
    pub(crate) fn alone(kept: members::Kept) -> Self {
        Self::alone_announcing(kept, join_leave::Rules::none())
    }

    /// Like [`Self::alone`], announcing joins and leaves as `rules` say.
    pub(crate) fn alone_announcing(kept: members::Kept, rules: join_leave::Rules) -> Self {
        Self::new(
            Arc::new(ids::ConnectionIds::new(0)),
            None,
            Observers::default(),
            None,
            kept,
            rules,
        )
    }

    /// A node making connection ids with `ids` (its number leased by `lease` when Redis is
    /// configured), observed by `observers`, relaying commands for connections through
    /// `relay` when in a cluster, announcing joins and leaves as `rules` say.
    pub(crate) fn new(
        ids: Arc<ids::ConnectionIds>,
        lease: Option<Arc<lease::Lease>>,
        observers: Observers,
        relay: Option<Arc<control::Relay>>,
        kept: members::Kept,
        rules: join_leave::Rules,
    ) -> Self {
        let Observers {
            presence,
            upstream,
            others,
        } = observers;
        let mut all: Vec<Arc<dyn ConnectionObserver>> = others;
        if let Some(p) = &presence {
            all.push(p.clone());
        }
        if let Some(u) = &upstream {
            all.push(u.clone());
        }
        let connections: Arc<control::Connections> = Arc::default();
        let announcer = join_leave::Announcer::new(rules, connections.clone(), relay.clone());
        Self {
            ids,
            lease,
            // Presence takes the changes and writes them to Redis.
            members: Arc::new(members::Members::with_announcer(
                presence.is_some(),
                kept,
                announcer,
            )),
            connections,
            relay,
            observers: all.into(),
            presence,
            upstream,
        }
    }

    /// The cluster's presence and connection registry, when Redis is configured.
    pub(crate) fn presence(&self) -> Option<&Arc<presence::Presence>> {
        self.presence.as_ref()
    }

    /// The upstream event producer, when configured.
    pub(crate) fn upstream(&self) -> Option<&Arc<upstream::Upstream>> {
        self.upstream.as_ref()
    }

    /// The node's leases on its id and number, when Redis is configured.
    pub(crate) fn lease(&self) -> Option<&Arc<lease::Lease>> {
        self.lease.as_ref()
    }

    /// Why the node should not take clients (another process holds its node id, or commands
    /// for connections cannot reach it yet), if so.
    pub(crate) fn not_ready_reason(&self) -> Option<String> {
        if let Some(reason) = self.lease.as_ref().and_then(|l| l.not_ready_reason()) {
            return Some(reason);
        }
        match &self.relay {
            Some(relay) if !relay.is_reading() => Some("not reading the control stream yet".into()),
            _ => None,
        }
    }

    /// This node's live connections, for commands ([`control`]).
    pub(crate) fn connections(&self) -> &Arc<control::Connections> {
        &self.connections
    }

    /// Who is subscribed to each topic on this node.
    pub(crate) fn members(&self) -> &Arc<members::Members> {
        &self.members
    }

    /// The relay of commands to the other nodes, when Redis is configured.
    pub(crate) fn relay(&self) -> Option<&Arc<control::Relay>> {
        self.relay.as_ref()
    }

    /// Carries out `command` on this node's connections and, in a cluster, sends it to the
    /// other nodes. Returns how many connections it ended here, or why it could not be sent.
    pub(crate) async fn command(&self, command: &control::Command) -> Result<usize, String> {
        let here = control::hand_out(&self.connections, &*self.members, command);
        if let Some(relay) = &self.relay {
            relay.send(command).await.map_err(|e| e.to_string())?;
        }
        Ok(here)
    }

    /// Opens a connection of `transport` for `user` (whose token's `info` is `info`): given an
    /// id unique in the cluster ([`ids`]), counted in the metrics, entered among the
    /// connections commands reach and, when anything observes connections, reported. Its
    /// subscriptions are entered in [`members`] as the transport reports them
    /// ([`Connection::subscribed_to`]).
    pub(crate) fn open(
        &self,
        transport: Transport,
        user: Option<&str>,
        info: Option<Arc<String>>,
    ) -> Connection {
        self.open_as(self.ids.next(), transport, user, info)
    }

    /// A connection id unique in the cluster, for a connection that is not open yet (the
    /// hooks name it before it opens with [`Self::open_as`]).
    pub(crate) fn next_id(&self) -> u64 {
        self.ids.next()
    }

    /// Like [`Self::open`], with an id from [`Self::next_id`].
    pub(crate) fn open_as(
        &self,
        id: u64,
        transport: Transport,
        user: Option<&str>,
        info: Option<Arc<String>>,
    ) -> Connection {
        let guard = crate::telemetry::metrics::transport(transport).open();
        let named = self.connections.enter(id, user);
        let observed = (!self.observers.is_empty()).then(|| {
            let id = id.to_string();
            for o in self.observers.iter() {
                o.opened(&id, transport.as_str(), user);
            }
            Box::new(Observed {
                id,
                observers: self.observers.clone(),
            })
        });
        let who = presence_event::Who {
            transport: transport.as_str(),
            user: named.clone(),
            info,
        };
        Connection {
            guard,
            id,
            // Nothing at all when no topic's members are kept (the default).
            membership: self
                .members
                .kept()
                .any()
                .then(|| Box::new(members::Membership::new(self.members.clone(), id, who))),
            user: named,
            seen: control::Seen::default(),
            heard: false,
            connections: self.connections.clone(),
            observed,
        }
    }
}

/// One open client connection: counted as open, and reported to the observers, until dropped.
#[derive(Debug)]
pub(crate) struct Connection {
    guard: ConnectionGuard,
    id: u64,
    /// The user it acts for (a token's `sub`), as the command table shares the name.
    user: Option<Arc<str>>,
    /// Where it stands with the commands, and whether one ended it already.
    seen: control::Seen,
    heard: bool,
    connections: Arc<control::Connections>,
    /// The topics it is subscribed to, as [`members`] lists them.
    membership: Option<Box<members::Membership>>,
    /// The connection's id and who is told about its life (boxed: none on a lone node).
    observed: Option<Box<Observed>>,
}

#[derive(Debug)]
struct Observed {
    id: String,
    observers: Arc<[Arc<dyn ConnectionObserver>]>,
}

impl Connection {
    /// Sets the reason reported when the connection closes.
    pub(crate) fn closing(&mut self, reason: CloseReason) {
        self.guard.closing(reason);
    }

    /// The connection's id, unique in the cluster.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The connection now acts for `user` (a WebSocket client sent a new token): commands
    /// for that user reach it, those for the one before no longer do.
    #[cfg(test)]
    pub(crate) fn set_user(&mut self, user: Option<&str>) {
        let info = self.membership.as_ref().and_then(|m| m.info().cloned());
        self.set_identity(user, info);
    }

    /// The connection now acts for `user` with a token whose `info` claim is `info` (a
    /// WebSocket client sent a new token): commands for that user reach it, and its entries
    /// in [`members`] name the new user and info.
    pub(crate) fn set_identity(&mut self, user: Option<&str>, info: Option<Arc<String>>) {
        if self.user.as_deref() != user {
            self.user = self.connections.set_user(self.id, self.user.as_ref(), user);
        }
        if let Some(m) = &mut self.membership {
            m.set_who(self.user.clone(), info);
        }
    }

    /// The connection is subscribed to exactly `topics` now (its feed's topics, after it
    /// subscribed or unsubscribed): [`members`] lists it under those. Called only when the
    /// subscriptions change, never on delivery.
    pub(crate) fn subscribed_to<'a>(
        &mut self,
        topics: impl IntoIterator<Item = &'a herald_core::TopicName>,
    ) {
        if let Some(m) = &mut self.membership {
            m.set_topics(topics);
        }
    }

    /// The next command for this connection (in the order they came); never after one that
    /// ended it. Cancel-safe; polled from the connection's own task.
    pub(crate) async fn next_action(&mut self) -> control::Action {
        if self.heard {
            return std::future::pending().await;
        }
        let action =
            std::future::poll_fn(|cx| self.connections.poll_action(self.id, &mut self.seen, cx))
                .await;
        if matches!(action, control::Action::Disconnect(_)) {
            self.heard = true;
            self.guard.closing(CloseReason::Disconnected);
        }
        action
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.connections.leave(self.id, self.user.as_ref());
        if let Some(o) = &self.observed {
            let (transport, reason) = (self.guard.transport(), self.guard.reason());
            for observer in o.observers.iter() {
                observer.closed(&o.id, transport.as_str(), reason.as_str());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Log(parking_lot::Mutex<Vec<String>>);

    impl ConnectionObserver for Log {
        fn opened(&self, id: &str, transport: &'static str, user: Option<&str>) {
            self.0
                .lock()
                .push(format!("open {id} {transport} {user:?}"));
        }
        fn closed(&self, id: &str, transport: &'static str, reason: &'static str) {
            self.0
                .lock()
                .push(format!("close {id} {transport} {reason}"));
        }
    }

    #[test]
    fn observers_see_each_connection_open_and_close_with_its_reason() {
        let log = Arc::new(Log::default());
        let cluster = Cluster::new(
            Arc::new(ids::ConnectionIds::new(7)),
            None,
            Observers {
                others: vec![log.clone()],
                ..Default::default()
            },
            None,
            members::Kept::all(),
            join_leave::Rules::none(),
        );
        let mut a = cluster.open(Transport::Ws, Some("ann"), None);
        let b = cluster.open(Transport::Sse, None, None);
        let (ia, ib) = (a.id(), b.id());
        assert!(ia < ib);
        assert_eq!((ids::node_of(ia), ids::node_of(ib)), (7, 7));
        let (ia, ib) = (ia.to_string(), ib.to_string());
        a.closing(CloseReason::Slow);
        drop(a);
        drop(b);
        assert_eq!(
            *log.0.lock(),
            [
                format!("open {ia} ws Some(\"ann\")"),
                format!("open {ib} sse None"),
                format!("close {ia} ws slow"),
                format!("close {ib} sse client"),
            ]
        );
        let alone = Cluster::alone(members::Kept::all());
        let c = alone.open(Transport::Poll, None, None);
        assert_eq!(ids::node_of(c.id()), 0);
        assert_eq!(alone.connections().len(), 1);
        drop(c);
        assert!(alone.connections().is_empty());
    }

    #[test]
    fn a_connection_s_subscriptions_are_members_until_it_closes() {
        let cluster = Cluster::alone(members::Kept::all());
        let info = Arc::new(r#"{"app":"x"}"#.to_string());
        let mut a = cluster.open(Transport::Ws, Some("ann"), Some(info.clone()));
        let topics: Vec<herald_core::TopicName> = ["news", "chat"]
            .iter()
            .map(|t| herald_core::TopicName::new(t).unwrap())
            .collect();
        a.subscribed_to(&topics);
        let members = cluster.members();
        let (page, _) = members.page("news", None, 10);
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].0, a.id());
        assert_eq!(page[0].1.who.user.as_deref(), Some("ann"));
        assert_eq!(page[0].1.who.info, Some(info.clone()));
        a.set_user(Some("bob"));
        let (page, _) = members.page("chat", None, 10);
        assert_eq!(page[0].1.who.user.as_deref(), Some("bob"));
        assert_eq!(page[0].1.who.info, Some(info.clone()), "kept");
        a.subscribed_to(&topics[..1]);
        assert!(members.page("chat", None, 10).0.is_empty());
        let mut poll = cluster.open(Transport::Poll, None, None);
        poll.subscribed_to(&topics[..1]);
        assert_eq!(members.len(), 2);
        drop(a);
        drop(poll);
        assert!(members.is_empty());
    }
}
