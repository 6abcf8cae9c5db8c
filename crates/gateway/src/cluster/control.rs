//! Acting on live connections from the server side: disconnecting a user's connections or one
//! connection, with a reason the client sees.
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::bridge::redis_conn::{Purpose, RedisTarget, SharedConn};

/// Most commands the control stream keeps (older ones are trimmed; a node that was away
/// longer than they take to arrive has lost its connections anyway).
pub const STREAM_LEN: usize = 10_000;
/// Longest reason a client is shown (bytes); a WebSocket close reason must fit in 123.
pub const MAX_REASON: usize = 120;

/// What a disconnected client is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disconnect {
    /// Why, for the client (at most [`MAX_REASON`] bytes).
    pub reason: String,
    /// Whether the client should come back (false: it should stay away, e.g. logged out).
    pub reconnect: bool,
}

/// Which connections a command is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Every connection of a user (a token's `sub`), on every node.
    User(String),
    /// One connection, by its id.
    Connection(u64),
}

/// A command for live connections, as relayed between nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// Who it is for.
    pub target: Target,
    /// What they are told.
    pub disconnect: Disconnect,
}

/// The live connections of this node that the server can act on.
#[derive(Debug, Default)]
pub struct Connections {
    table: parking_lot::Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    by_id: HashMap<u64, Entry>,
    by_user: HashMap<Arc<str>, Vec<u64>>,
}

#[derive(Debug)]
struct Entry {
    user: Option<Arc<str>>,
    kick: oneshot::Sender<Disconnect>,
}

impl Connections {
    /// Enters connection `id` of `user`; the receiver hears when a command ends it.
    pub fn enter(&self, id: u64, user: Option<&str>) -> oneshot::Receiver<Disconnect> {
        let (kick, kicked) = oneshot::channel();
        let mut table = self.table.lock();
        let user = user.map(|u| table.index(u, id));
        table.by_id.insert(id, Entry { user, kick });
        kicked
    }

    /// Files connection `id` under `user` from now on.
    pub fn set_user(&self, id: u64, user: Option<&str>) {
        let mut table = self.table.lock();
        let old = match table.by_id.get_mut(&id) {
            Some(entry) if entry.user.as_deref() != user => entry.user.take(),
            _ => return,
        };
        if let Some(old) = old {
            table.unindex(&old, id);
        }
        let new = user.map(|u| table.index(u, id));
        if let Some(entry) = table.by_id.get_mut(&id) {
            entry.user = new;
        }
    }

    /// Removes connection `id` (it closed).
    pub fn leave(&self, id: u64) {
        let mut table = self.table.lock();
        if let Some(Entry { user: Some(u), .. }) = table.by_id.remove(&id) {
            table.unindex(&u, id);
        }
    }

    /// Ends the connections `command` is for on this node; returns how many.
    pub fn apply(&self, command: &Command) -> usize {
        let mut table = self.table.lock();
        let ids = match &command.target {
            Target::Connection(id) => vec![*id],
            Target::User(user) => table
                .by_user
                .get(user.as_str())
                .cloned()
                .unwrap_or_default(),
        };
        let mut ended = 0;
        for id in ids {
            let Some(entry) = table.by_id.remove(&id) else {
                continue;
            };
            if let Some(u) = &entry.user {
                table.unindex(u, id);
            }
            // A connection that is closing anyway has dropped its receiver.
            if entry.kick.send(command.disconnect.clone()).is_ok() {
                ended += 1;
            }
        }
        ended
    }

    /// The ids of `user`'s connections on this node.
    pub fn of_user(&self, user: &str) -> Vec<u64> {
        self.table
            .lock()
            .by_user
            .get(user)
            .cloned()
            .unwrap_or_default()
    }

    /// How many connections are entered (for tests and stats).
    pub fn len(&self) -> usize {
        self.table.lock().by_id.len()
    }

    /// Whether no connection is entered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
pub struct Relay {
    target: Arc<RedisTarget>,
    conn: SharedConn,
    key: String,
    /// This node's id: a node skips the commands it sent itself (it has carried them out).
    node: String,
    /// Whether the node reads the stream now (it is not ready before: a command sent then
    /// would not reach its connections).
    reading: std::sync::atomic::AtomicBool,
}

#[derive(Serialize, Deserialize)]
struct Relayed {
    from: String,
    #[serde(flatten)]
    command: Command,
}

impl Relay {
    /// A relay through the Redis at `target`, for node `node`.
    pub fn new(target: Arc<RedisTarget>, node: &str) -> Self {
        Self {
            key: format!("{}:control", target.presence_prefix()),
            conn: SharedConn::new(target.clone()),
            target,
            node: node.to_string(),
            reading: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether commands from the other nodes reach this one now.
    pub fn is_reading(&self) -> bool {
        self.reading.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sends `command` to the other nodes.
    pub async fn send(&self, command: &Command) -> redis::RedisResult<()> {
        let body = serde_json::to_string(&Relayed {
            from: self.node.clone(),
            command: command.clone(),
        })
        .expect("a command serialises");
        let mut pipe = redis::pipe();
        pipe.cmd("XADD")
            .arg(&self.key)
            .arg("MAXLEN")
            .arg("~")
            .arg(STREAM_LEN)
            .arg("*")
            .arg("c")
            .arg(body)
            .ignore();
        self.conn.query::<()>(&pipe).await
    }

    /// Carries out on `connections` every command another node sends, from now until `stop`.
    pub async fn run(self: Arc<Self>, connections: Arc<Connections>, stop: CancellationToken) {
        // Where this node is in the stream: "$" (only what comes next) until it read one.
        let last = parking_lot::Mutex::new("$".to_string());
        crate::bridge::follow(
            "control",
            &stop,
            Duration::from_millis(200),
            || self.session(&connections, &last),
            |_| {
                self.reading
                    .store(false, std::sync::atomic::Ordering::Relaxed)
            },
        )
        .await;
    }

    async fn session(
        &self,
        connections: &Connections,
        last: &parking_lot::Mutex<String>,
    ) -> crate::bridge::SessionResult {
        let mut conn = self
            .target
            .connect(Purpose::BlockingReads)
            .await
            .map_err(|e| e.to_string())?;
        if last.lock().as_str() == "$" {
            // Pin "now" to an id, so a command sent while this session reconnects is read.
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
                        connections.apply(&relayed.command);
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

    #[test]
    fn a_user_command_ends_each_of_the_users_connections_once() {
        let table = Connections::default();
        let mut a1 = table.enter(1, Some("ann"));
        let mut a2 = table.enter(2, Some("ann"));
        let mut b = table.enter(3, Some("bob"));
        let mut anon = table.enter(4, None);
        let command = Command {
            target: Target::User("ann".into()),
            disconnect: disconnect("logged out"),
        };
        assert_eq!(table.apply(&command), 2);
        assert_eq!(a1.try_recv().unwrap(), disconnect("logged out"));
        assert_eq!(a2.try_recv().unwrap().reason, "logged out");
        assert!(b.try_recv().is_err() && anon.try_recv().is_err());
        assert_eq!(table.apply(&command), 0, "ann has no connection left");
        assert_eq!(table.len(), 2);

        let one = Command {
            target: Target::Connection(4),
            disconnect: disconnect("bye"),
        };
        assert_eq!(table.apply(&one), 1);
        assert_eq!(anon.try_recv().unwrap().reason, "bye");
        table.leave(3);
        assert!(table.is_empty());
        assert!(table.table.lock().by_user.is_empty());
    }

    #[test]
    fn a_connection_that_changes_user_is_reached_by_the_new_one_only() {
        let table = Connections::default();
        let mut c = table.enter(5, None);
        table.set_user(5, Some("dee"));
        assert_eq!(table.of_user("dee"), [5]);
        table.set_user(5, Some("eve"));
        assert!(table.of_user("dee").is_empty());
        let for_dee = Command {
            target: Target::User("dee".into()),
            disconnect: disconnect("x"),
        };
        assert_eq!(table.apply(&for_dee), 0);
        let for_eve = Command {
            target: Target::User("eve".into()),
            ..for_dee
        };
        assert_eq!(table.apply(&for_eve), 1);
        assert!(c.try_recv().is_ok());
        assert!(table.table.lock().by_user.is_empty());
    }

    #[test]
    fn a_closed_connection_is_not_counted() {
        let table = Connections::default();
        drop(table.enter(9, Some("cy")));
        let command = Command {
            target: Target::User("cy".into()),
            disconnect: disconnect("x"),
        };
        assert_eq!(table.apply(&command), 0);
    }
}
