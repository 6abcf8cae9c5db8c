//! What happens to a subscriber that falls behind: chosen per feed, or per topic by its
//! namespace ([`crate::TopicConfig::lag_policy`]). Below both [`crate::feed`] and
//! [`crate::topic`], which use it.

use serde::{Deserialize, Serialize};

/// What happens to a subscriber that falls behind its topic's live channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LagPolicy {
    /// Replay the missed messages from history; if history no longer covers them, tell the
    /// client that messages were lost and go on live.
    #[default]
    RecoverOrNotify,
    /// Replay from history; if history no longer covers the gap, disconnect the client.
    RecoverOrDisconnect,
    /// Disconnect at once.
    Disconnect,
    /// Skip to the newest message: the subscriber gets the newest message history holds and
    /// goes on live from there, without a loss signal (for tickers and state feeds, where
    /// only the latest value matters).
    Coalesce,
}
