//! Acting on live connections from the server side: disconnecting a user's connections or one
//! connection, with a reason the client sees, and subscribing them to topics or unsubscribing
//! them (server-side subscriptions). Join and leave events ([`super::join_leave`]) travel the
//! same way, to the subscribers of a topic ([`Target::Topic`]).
//!
//! Every SSE and WebSocket connection of this node is in [`Connections`] while it lives, under
//! its id and its user (a token's `sub`). A [`Command`] is carried out here at once and, when
//! the node is in a cluster, relayed to every other node through a Redis stream
//! (`<prefix>:control`), so it reaches the connection whichever node holds it.
//!
//! Bounds: the table holds one entry per open connection (limited by `limits.max_connections`)
//! and is touched only when a connection opens or closes and when a command arrives, never on
//! delivery. The stream is trimmed to [`STREAM_LEN`] commands; a node reads it from where it
//! joined, so a command never reaches connections that open after it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub(crate) use super::presence_event::PresenceEvent;
use crate::bridge::redis_conn::{Purpose, RedisTarget, SharedConn};

/// The connections of this node subscribed to a topic whose members are kept, but one
/// ([`super::members::Members`]): where a [`Target::Topic`] command goes.
pub(crate) trait TopicSubscribers: Send + Sync {
    /// The ids of `topic`'s subscribers on this node, but `except`.
    fn ids_of(&self, topic: &str, except: u64) -> Vec<u64>;
}

/// Most commands the control stream keeps (older ones are trimmed; a node that was away
/// longer than they take to arrive has lost its connections anyway).
pub(crate) const STREAM_LEN: usize = 10_000;
/// Longest reason a client is shown (bytes); a WebSocket close reason must fit in 123.
pub(crate) const MAX_REASON: usize = 120;

/// What a disconnected client is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Disconnect {
    /// Why, for the client (at most [`MAX_REASON`] bytes).
    pub reason: String,
    /// Whether the client should come back (false: it should stay away, e.g. logged out).
    pub reconnect: bool,
}

/// Which connections a command is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Target {
    /// Every connection of a user (a token's `sub`), on every node.
    User(String),
    /// One connection, by its id.
    Connection(u64),
    /// Every connection subscribed to a topic whose members are kept, on every node (as
    /// [`super::members`] lists them): for join and leave events only.
    Topic(String),
}

/// What a command does to each connection it is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    /// End the connection, telling the client why.
    Disconnect(Disconnect),
    /// Subscribe the connection to these topics (valid names), from their live head (as
    /// nodes before [`Action::SubscribeAfter`] sent it).
    Subscribe(Vec<String>),
    /// Subscribe the connection to these topics (valid names), each after the position (a
    /// cursor's text) it had on the node the application asked when it asked, so that a
    /// message published after the answer reaches the connection whichever arrives first;
    /// from the connection node's live head where the position is empty (a topic that node
    /// did not hold in a known epoch).
    SubscribeAfter(Vec<(String, String)>),
    /// Drop these topics from the connection's subscriptions.
    Unsubscribe(Vec<String>),
    /// A message was sent to the connection's user on `topic` (their personal topic): be
    /// subscribed to it, resuming after `after` (the position just before the message), so
    /// the message arrives whether this command or the message reaches the node first.
    Receive {
        /// The personal topic.
        topic: String,
        /// The position the subscription resumes after (a cursor's text).
        after: String,
    },
    /// A member joined or left one of the connection's topics: tell the client. Never sent
    /// for a connection's own join.
    Presence(PresenceEvent),
}

/// Topics a server-side subscription adds, each with the position it resumes after (`None`:
/// the live head).
pub(crate) type ServerSubscription = Vec<(String, Option<herald_core::Cursor>)>;

impl Action {
    /// The topics a subscribing action adds, each with the position it resumes after
    /// (`None`: the live head); `None` for any other action.
    pub(crate) fn subscription(&self) -> Option<ServerSubscription> {
        match self {
            Action::Subscribe(topics) => Some(topics.iter().map(|t| (t.clone(), None)).collect()),
            Action::SubscribeAfter(topics) => Some(
                (topics.iter())
                    .map(|(t, after)| (t.clone(), after.parse().ok()))
                    .collect(),
            ),
            Action::Receive { topic, after } => Some(vec![(topic.clone(), after.parse().ok())]),
            _ => None,
        }
    }
}

/// A command for live connections, as relayed between nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Command {
    /// Who it is for.
    pub target: Target,
    /// What it does.
    pub action: Action,
}

/// Most commands waiting for one connection to take them; past it a command skips the
/// connection (it is not counted as reached).
pub(crate) const MAX_PENDING: usize = 16;

/// The live connections of this node that the server can act on.
///
/// Per connection the table holds its id and its task's waker (no allocation of its own);
/// the connection holds its id and user. A connection learns that a command ended it by one
/// atomic load per wake-up ([`Self::poll_action`]): the table is locked only after a command.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    table: parking_lot::Mutex<Table>,
    /// Bumped by every command that ended a connection here.
    commands: AtomicU64,
}

#[derive(Debug, Default)]
struct Table {
    /// Every live connection no command ended, with the waker of its task once it was polled.
    wakers: HashMap<u64, Option<Waker>>,
    /// The connections of each user (ended ones too, until they close).
    by_user: HashMap<Arc<str>, Vec<u64>>,
    /// Commands a connection has not taken yet (at most [`MAX_PENDING`] each).
    pending: HashMap<u64, VecDeque<Action>>,
}

/// Where a connection stands with the commands: kept by the connection, passed to
/// [`Connections::poll_action`].
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// The command count when the connection last looked.
    commands: u64,
    /// Whether its waker is in the table.
    registered: bool,
}

impl Connections {
    /// Enters connection `id` of `user`; returns the user's name as the table shares it.
    pub(crate) fn enter(&self, id: u64, user: Option<&str>) -> Option<Arc<str>> {
        let mut table = self.table.lock();
        table.wakers.insert(id, None);
        user.map(|u| table.index(u, id))
    }

    /// Files connection `id` under `user` instead of `old`; returns the new name, shared.
    pub(crate) fn set_user(
        &self,
        id: u64,
        old: Option<&Arc<str>>,
        user: Option<&str>,
    ) -> Option<Arc<str>> {
        let mut table = self.table.lock();
        if let Some(old) = old {
            table.unindex(old, id);
        }
        user.map(|u| table.index(u, id))
    }

    /// Removes connection `id` of `user` (it closed).
    pub(crate) fn leave(&self, id: u64, user: Option<&Arc<str>>) {
        let mut table = self.table.lock();
        table.wakers.remove(&id);
        table.pending.remove(&id);
        if let Some(u) = user {
            table.unindex(u, id);
        }
    }

    /// Hands `command` to the connections it is for on this node; returns how many took it.
    /// A topic's subscribers are found in the members table ([`hand_out`]): here a
    /// [`Target::Topic`] reaches none.
    pub(crate) fn apply(&self, command: &Command) -> usize {
        let mut table = self.table.lock();
        let ids = match &command.target {
            Target::Connection(id) => vec![*id],
            Target::User(user) => table
                .by_user
                .get(user.as_str())
                .cloned()
                .unwrap_or_default(),
            Target::Topic(_) => return 0,
        };
        Self::hand(&self.commands, &mut table, ids, &command.action)
    }

    /// Hands `action` to connections `ids` of this node (those still open, with room in
    /// their queue); returns how many took it.
    pub(crate) fn apply_to(&self, ids: Vec<u64>, action: &Action) -> usize {
        if ids.is_empty() {
            return 0;
        }
        let mut table = self.table.lock();
        Self::hand(&self.commands, &mut table, ids, action)
    }

    fn hand(commands: &AtomicU64, table: &mut Table, ids: Vec<u64>, action: &Action) -> usize {
        // An end always fits (it replaces what waits); anything else needs room.
        let ends = matches!(action, Action::Disconnect(_));
        let ids: Vec<u64> = ids
            .into_iter()
            .filter(|id| {
                table.wakers.contains_key(id)
                    && (ends || table.pending.get(id).is_none_or(|q| q.len() < MAX_PENDING))
            })
            .collect();
        if ids.is_empty() {
            return 0;
        }
        // Counted before any task is woken: a woken task sees the new count.
        commands.fetch_add(1, Ordering::AcqRel);
        for &id in &ids {
            let queue = table.pending.entry(id).or_default();
            let waker = match action {
                Action::Disconnect(_) => {
                    // Nothing after an end: what was waiting is moot.
                    queue.clear();
                    queue.push_back(action.clone());
                    table.wakers.remove(&id).flatten()
                }
                _ => {
                    queue.push_back(action.clone());
                    table.wakers.get(&id).cloned().flatten()
                }
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
        ids.len()
    }

    /// The next command for connection `id`, in the order they came. Called from the
    /// connection's own task (its waker is kept from the first call).
    pub(crate) fn poll_action(
        &self,
        id: u64,
        seen: &mut Seen,
        cx: &mut Context<'_>,
    ) -> Poll<Action> {
        let now = self.commands.load(Ordering::Acquire);
        if seen.registered && now == seen.commands {
            return Poll::Pending;
        }
        let mut table = self.table.lock();
        if let Some(queue) = table.pending.get_mut(&id)
            && let Some(action) = queue.pop_front()
        {
            if queue.is_empty() {
                table.pending.remove(&id);
            }
            // `seen` stays behind: the next call looks again.
            return Poll::Ready(action);
        }
        seen.commands = now;
        if let Some(slot) = table.wakers.get_mut(&id) {
            if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *slot = Some(cx.waker().clone());
            }
            seen.registered = true;
        }
        Poll::Pending
    }

    /// The ids of `user`'s live connections on this node (not those a command ended), in
    /// the order they opened.
    pub(crate) fn of_user(&self, user: &str) -> Vec<u64> {
        let table = self.table.lock();
        let ids = table.by_user.get(user).map_or(&[][..], Vec::as_slice);
        ids.iter()
            .copied()
            .filter(|id| table.wakers.contains_key(id))
            .collect()
    }

    /// How many connections are live and not ended (for tests and stats).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table.lock().wakers.len()
    }

    /// Whether no connection is entered.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Hands `command` to the connections it is for on this node, a topic's subscribers as
/// `members` lists them (but the member itself); returns how many took it.
pub(crate) fn hand_out(
    connections: &Connections,
    members: &dyn TopicSubscribers,
    command: &Command,
) -> usize {
    match (&command.target, &command.action) {
        (Target::Topic(topic), Action::Presence(event)) => {
            connections.apply_to(members.ids_of(topic, event.conn), &command.action)
        }
        (Target::Topic(_), _) => 0,
        _ => connections.apply(command),
    }
}

impl Table {
    /// Files `id` under `user`; returns the user's name as the table shares it.
    fn index(&mut self, user: &str, id: u64) -> Arc<str> {
        let shared: Arc<str> = match self.by_user.get_key_value(user) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(user),
        };
        self.by_user.entry(shared.clone()).or_default().push(id);
        shared
    }

    fn unindex(&mut self, user: &Arc<str>, id: u64) {
        if let Some(ids) = self.by_user.get_mut(user) {
            ids.retain(|&i| i != id);
            if ids.is_empty() {
                self.by_user.remove(user);
            }
        }
    }
}

/// Relays commands to every node through the control stream in Redis.
#[derive(Debug)]
pub(crate) struct Relay {
    target: Arc<RedisTarget>,
    conn: SharedConn,
    key: String,
    /// This node's id: a node skips the commands it sent itself (it has carried them out).
    node: String,
    /// Whether the node reads the stream now (it is not ready before: a command sent then
    /// would not reach its connections).
    reading: std::sync::atomic::AtomicBool,
    /// Commands queued to be sent without waiting (join and leave events, [`Self::queue`]).
    outbox: tokio::sync::mpsc::Sender<Command>,
    /// The other end, until [`Self::forward`] takes it.
    inbox: parking_lot::Mutex<Option<tokio::sync::mpsc::Receiver<Command>>>,
}

/// Most commands queued for [`Relay::forward`]; past it [`Relay::queue`] refuses.
pub(crate) const OUTBOX_LEN: usize = 1024;

#[derive(Serialize, Deserialize)]
struct Relayed {
    from: String,
    #[serde(flatten)]
    command: Command,
}

impl Relay {
    /// A relay through the Redis at `target`, for node `node`.
    pub(crate) fn new(target: Arc<RedisTarget>, node: &str) -> Self {
        let (outbox, inbox) = tokio::sync::mpsc::channel(OUTBOX_LEN);
        Self {
            outbox,
            inbox: parking_lot::Mutex::new(Some(inbox)),
            key: format!("{}:control", target.presence_prefix()),
            conn: SharedConn::new(target.clone()),
            target,
            node: node.to_string(),
            reading: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether commands from the other nodes reach this one now.
    pub(crate) fn is_reading(&self) -> bool {
        self.reading.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sends `command` to the other nodes.
    pub(crate) async fn send(&self, command: &Command) -> redis::RedisResult<()> {
        self.send_all(std::slice::from_ref(command)).await
    }

    /// Sends `commands` to the other nodes, in order, in one round trip.
    async fn send_all(&self, commands: &[Command]) -> redis::RedisResult<()> {
        let mut pipe = redis::pipe();
        for command in commands {
            let body = serde_json::to_string(&Relayed {
                from: self.node.clone(),
                command: command.clone(),
            })
            .expect("a command serialises");
            pipe.cmd("XADD")
                .arg(&self.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(STREAM_LEN)
                .arg("*")
                .arg("c")
                .arg(body)
                .ignore();
        }
        self.conn.query::<()>(&pipe).await
    }

    /// Queues `command` for the other nodes without waiting ([`Self::forward`] sends it);
    /// false when [`OUTBOX_LEN`] commands wait already (it is dropped).
    pub(crate) fn queue(&self, command: Command) -> bool {
        self.outbox.try_send(command).is_ok()
    }

    /// Sends the queued commands ([`Self::queue`]) until `stop`, up to 64 per round trip. A
    /// batch Redis refuses is dropped (logged): these are join and leave events, which a
    /// client can make up for by listing the members.
    pub(crate) async fn forward(self: Arc<Self>, stop: CancellationToken) {
        let Some(mut inbox) = self.inbox.lock().take() else {
            return;
        };
        let mut batch = Vec::with_capacity(64);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                n = inbox.recv_many(&mut batch, 64) => if n == 0 { return },
            }
            if let Err(e) = self.send_all(&batch).await {
                tracing::warn!(error = %e, dropped = batch.len(), "join and leave events not relayed");
            }
            batch.clear();
        }
    }

    /// Carries out on `connections` every command another node sends, from now until `stop`
    /// (a topic's subscribers as `members` lists them).
    pub(crate) async fn run(
        self: Arc<Self>,
        connections: Arc<Connections>,
        members: Arc<dyn TopicSubscribers>,
        stop: CancellationToken,
    ) {
        // Where this node is in the stream: "$" (only what comes next) until it read one.
        let last = parking_lot::Mutex::new("$".to_string());
        crate::bridge::reconnect_loop(
            "control",
            &stop,
            Duration::from_millis(200),
            || self.pass(&connections, &*members, &last),
            |_| {
                self.reading
                    .store(false, std::sync::atomic::Ordering::Relaxed)
            },
        )
        .await;
    }

    /// One pass of the relay's reader: a connection reading the command stream from `last`
    /// until it fails.
    async fn pass(
        &self,
        connections: &Connections,
        members: &dyn TopicSubscribers,
        last: &parking_lot::Mutex<String>,
    ) -> crate::bridge::PassResult {
        let mut conn = self
            .target
            .connect(Purpose::BlockingReads)
            .await
            .map_err(|e| e.to_string())?;
        if last.lock().as_str() == "$" {
            // Pin "now" to an id, so a command sent while this pass reconnects is read.
            let newest: redis::streams::StreamRangeReply = conn
                .xrevrange_count(&self.key, "+", "-", 1)
                .await
                .map_err(|e| e.to_string())?;
            *last.lock() = newest
                .ids
                .first()
                .map_or_else(|| "0-0".to_string(), |e| e.id.clone());
        }
        let options = redis::streams::StreamReadOptions::default()
            .block(2_000)
            .count(100);
        self.reading
            .store(true, std::sync::atomic::Ordering::Relaxed);
        loop {
            let from = last.lock().clone();
            let reply: Option<redis::streams::StreamReadReply> = conn
                .xread_options(&[&self.key], &[&from], &options)
                .await
                .map_err(|e| e.to_string())?;
            for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
                *last.lock() = entry.id.clone();
                let Some(body) = entry.get::<String>("c") else {
                    continue;
                };
                match serde_json::from_str::<Relayed>(&body) {
                    Ok(relayed) if relayed.from != self.node => {
                        hand_out(connections, members, &relayed.command);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "unreadable control command skipped"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disconnect(reason: &str) -> Disconnect {
        Disconnect {
            reason: reason.into(),
            reconnect: false,
        }
    }

    fn for_user(user: &str, reason: &str) -> Command {
        Command {
            target: Target::User(user.into()),
            action: Action::Disconnect(disconnect(reason)),
        }
    }

    /// A connection as its task sees the table.
    struct Conn {
        id: u64,
        seen: Seen,
    }

    impl Conn {
        fn poll(&mut self, table: &Connections) -> Option<Disconnect> {
            match self.next(table) {
                Some(Action::Disconnect(d)) => Some(d),
                Some(other) => panic!("not a disconnect: {other:?}"),
                None => None,
            }
        }

        fn next(&mut self, table: &Connections) -> Option<Action> {
            let mut cx = Context::from_waker(Waker::noop());
            match table.poll_action(self.id, &mut self.seen, &mut cx) {
                Poll::Ready(a) => Some(a),
                Poll::Pending => None,
            }
        }
    }

    fn conn(id: u64) -> Conn {
        Conn {
            id,
            seen: Seen::default(),
        }
    }

    #[test]
    fn a_user_command_ends_each_of_the_users_connections_once() {
        let table = Connections::default();
        let ann = table.enter(1, Some("ann"));
        table.enter(2, Some("ann"));
        table.enter(3, Some("bob"));
        table.enter(4, None);
        let (mut a1, mut a2, mut b, mut anon) = (conn(1), conn(2), conn(3), conn(4));
        assert!(a1.poll(&table).is_none() && b.poll(&table).is_none());
        assert_eq!(table.apply(&for_user("ann", "logged out")), 2);
        assert_eq!(a1.poll(&table), Some(disconnect("logged out")));
        assert_eq!(a2.poll(&table).unwrap().reason, "logged out");
        assert!(b.poll(&table).is_none() && anon.poll(&table).is_none());
        assert_eq!(
            table.apply(&for_user("ann", "again")),
            0,
            "each is ended once"
        );
        table.leave(1, ann.as_ref());
        table.leave(2, ann.as_ref());
        assert_eq!(table.len(), 2);

        let one = Command {
            target: Target::Connection(4),
            action: Action::Disconnect(disconnect("bye")),
        };
        assert_eq!(table.apply(&one), 1);
        assert_eq!(anon.poll(&table).unwrap().reason, "bye");
        table.leave(4, None);
        table.leave(3, Some(&Arc::from("bob")));
        assert!(table.is_empty());
        let t = table.table.lock();
        assert!(t.by_user.is_empty() && t.pending.is_empty());
    }

    #[test]
    fn a_polled_connection_is_woken_by_the_command_that_ends_it() {
        use std::sync::atomic::AtomicBool;
        struct Flag(AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let table = Connections::default();
        table.enter(7, Some("cy"));
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut seen = Seen::default();
        let mut cx = Context::from_waker(&waker);
        assert!(table.poll_action(7, &mut seen, &mut cx).is_pending());
        assert_eq!(table.apply(&for_user("cy", "x")), 1);
        assert!(flag.0.load(Ordering::SeqCst), "woken");
        assert!(table.poll_action(7, &mut seen, &mut cx).is_ready());
    }

    #[test]
    fn a_connection_that_changes_user_is_reached_by_the_new_one_only() {
        let table = Connections::default();
        let none = table.enter(5, None);
        let dee = table.set_user(5, none.as_ref(), Some("dee"));
        assert_eq!(table.of_user("dee"), [5]);
        let eve = table.set_user(5, dee.as_ref(), Some("eve"));
        assert!(table.of_user("dee").is_empty());
        assert_eq!(table.apply(&for_user("dee", "x")), 0);
        assert_eq!(table.apply(&for_user("eve", "x")), 1);
        table.leave(5, eve.as_ref());
        assert!(table.table.lock().by_user.is_empty());
    }

    #[test]
    fn subscriptions_arrive_in_order_bounded_and_a_disconnect_drops_what_waits() {
        let table = Connections::default();
        table.enter(1, Some("fay"));
        let mut c = conn(1);
        assert!(c.next(&table).is_none());
        let subscribe = |t: &str| Command {
            target: Target::User("fay".into()),
            action: Action::Subscribe(vec![t.into()]),
        };
        assert_eq!(table.apply(&subscribe("a")), 1);
        assert_eq!(table.apply(&subscribe("b")), 1);
        assert_eq!(c.next(&table), Some(Action::Subscribe(vec!["a".into()])));
        assert_eq!(c.next(&table), Some(Action::Subscribe(vec!["b".into()])));
        assert!(c.next(&table).is_none());
        for _ in 0..MAX_PENDING {
            assert_eq!(table.apply(&subscribe("x")), 1);
        }
        assert_eq!(table.apply(&subscribe("y")), 0, "a full queue skips");
        assert_eq!(
            table.apply(&for_user("fay", "bye")),
            1,
            "an end always fits"
        );
        assert_eq!(c.poll(&table).unwrap().reason, "bye");
        assert!(c.next(&table).is_none());
        assert_eq!(
            table.apply(&subscribe("z")),
            0,
            "an ended connection takes nothing"
        );
    }

    #[test]
    fn a_closed_connection_is_not_counted() {
        let table = Connections::default();
        let cy = table.enter(9, Some("cy"));
        table.leave(9, cy.as_ref());
        assert_eq!(table.apply(&for_user("cy", "x")), 0);
    }
}
