//! What a member of a topic is, and what its subscribers are told when it joins or leaves:
//! the words the members table ([`super::members`]), the join and leave events
//! ([`super::join_leave`]) and the commands that carry them ([`super::control`]) share.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Who a member is: shared by every subscription of one connection.
#[derive(Debug)]
pub(crate) struct Who {
    /// `sse`, `ws` or `poll`.
    pub transport: &'static str,
    /// The user (a token's `sub`); `None` for an anonymous client.
    pub user: Option<Arc<str>>,
    /// The token's `info` claim (or the connect hook's `info`), JSON text of at most
    /// [`crate::auth::MAX_INFO_BYTES`]: a hook's larger `info` is not listed.
    pub info: Option<Arc<String>>,
}

/// Whether a member joined or left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PresenceKind {
    /// It subscribed to the topic.
    Join,
    /// It unsubscribed or closed.
    Leave,
}

impl PresenceKind {
    /// `join` or `leave`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Join => "join",
            Self::Leave => "leave",
        }
    }
}

/// A member joined or left a topic ([`super::join_leave`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PresenceEvent {
    /// Joined or left.
    pub kind: PresenceKind,
    /// The member's connection, which is not told of its own join.
    pub conn: u64,
    /// What subscribers are shown, a JSON object made once and shared by every connection it
    /// reaches: `{"topic":..,"conn":..,"node":..,"transport":..,"user":..,"info":..}`.
    #[serde(with = "shared_str")]
    pub member: Arc<str>,
}

impl PresenceEvent {
    /// The member object with `"type":"join"` or `"leave"` first: a WebSocket frame, and an
    /// entry of a long-poll's `presence`.
    pub(crate) fn typed_json(&self) -> String {
        let body = self.member.strip_prefix('{').unwrap_or(&self.member);
        let mut text = String::with_capacity(body.len() + 20);
        text.push_str(r#"{"type":""#);
        text.push_str(self.kind.as_str());
        text.push_str(r#"","#);
        text.push_str(body);
        text
    }
}

mod shared_str {
    use std::sync::Arc;

    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(text: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(d).map(Arc::from)
    }
}
