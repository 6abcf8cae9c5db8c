//! A [`Session`]'s credentials: a new token (`auth` command) and their expiry (the refresh
//! hook).

use herald_core::TopicName;

use super::close_code;
use super::session::{Flow, FrameError, Session, expiry_of};
use crate::hooks::Caller;
use crate::server::stream::PeerStream;
use crate::telemetry::metrics::{self, CloseReason};
use crate::transport::access;

impl<S: PeerStream> Session<S> {
    /// A token for an anonymous connection, or a fresh one before the current one expires.
    /// Every subscription held is checked against the new identity: those it does not allow
    /// are dropped, and an error frame names them.
    pub(super) async fn authenticate(&mut self, token: &str) -> Result<Flow, FrameError> {
        let mut who = self.state.auth().verify(token)?;
        // The new token's `info` claim when it has one, else what the connection had (the
        // connect hook's, or the previous token's) while it stays the same user.
        if who.info.is_none() && who.sub == self.who.sub {
            who.info = self.who.info.take();
        }
        // The application decides again about a connection that now acts for someone else,
        // as it did at the upgrade: a token must not get past the connect hook.
        let Some(peer) = self.socket.get_ref().get_ref().peer_ip() else {
            return Ok(Flow::Close(CloseReason::Client)); // the socket is gone
        };
        let caller = Caller {
            transport: "ws",
            client: Some(self.connection.id()),
            remote: peer,
            who: &who,
            headers: &self.forwarded,
        };
        if let Some(grant) = access::ask_connect(&self.state, &caller, &[]).await? {
            grant.apply(&mut who);
        }
        // What is held is judged again by the subscribe decision, the hook not asked again
        // ([`access::may_keep`]); the connection's own topic stays.
        let own = format!("conn:{}", self.connection.id());
        let denied: Vec<TopicName> = self
            .feed
            .subscriptions()
            .filter(|topic| {
                topic.as_str() != own && !access::may_keep(&self.state, &who, topic.as_str())
            })
            .cloned()
            .collect();
        for topic in &denied {
            self.feed.unsubscribe(topic.as_str());
        }
        self.charges.retain(|(name, _)| !denied.contains(name));
        self.expiry = expiry_of(&who);
        if !denied.is_empty() {
            self.members_follow();
        }
        self.connection
            .set_identity(who.sub.as_deref(), who.info.clone());
        let expires = who
            .expires
            .and_then(|e| e.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        let reply =
            serde_json::json!({ "type": "authenticated", "sub": who.sub, "expires": expires });
        self.who = who;
        if let Flow::Close(reason) = self.send_text(reply.to_string()).await {
            return Ok(Flow::Close(reason));
        }
        if denied.is_empty() {
            return Ok(Flow::Continue);
        }
        metrics::client_error("ws", "forbidden");
        let names: Vec<&str> = denied.iter().map(TopicName::as_str).collect();
        let frame = serde_json::json!({
            "type": "error",
            "code": "forbidden",
            "reason": format!("the new token does not allow {names:?}; unsubscribed"),
            "topics": names,
        });
        Ok(self.send_text(frame.to_string()).await)
    }

    /// The credentials expired: the refresh hook, when configured, may extend them (and
    /// name the user again); otherwise, or when it refuses, the connection closes with 1008
    /// and the reason.
    pub(super) async fn on_expiry(&mut self) -> Flow {
        let mut reason = "token expired".to_string();
        if self.state.hooks().has(crate::hooks::Hook::Refresh)
            && let Some(peer) = self.socket.get_ref().get_ref().peer_ip()
        {
            match self.state.hooks().refresh(&self.caller(peer)).await {
                Ok(Some(grant)) => {
                    grant.apply(&mut self.who);
                    self.connection
                        .set_identity(self.who.sub.as_deref(), self.who.info.clone());
                    self.expiry = expiry_of(&self.who);
                    return Flow::Continue;
                }
                Ok(None) => {}
                Err(e) => reason = crate::hooks::close_reason(&FrameError::from(e).reason),
            }
        }
        self.close(close_code::POLICY, &reason).await;
        Flow::Close(CloseReason::Expired)
    }
}
