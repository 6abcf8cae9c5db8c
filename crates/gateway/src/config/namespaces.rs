//! Namespaces: options for the topics whose name starts with `<namespace>:` (`chat:room1` is
//! in `chat`). A topic without a `:`, or whose namespace is not configured, takes the
//! defaults (`[topics]`, `lag_policy`, `[auth]`, `[hooks]`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, ensure};
use herald_core::LagPolicy;
use serde::{Deserialize, Serialize};

use super::hooks::Hook;

/// Most namespaces a configuration may name (each is a metrics label value).
pub const MAX_NAMESPACES: usize = 256;

/// The options of one namespace, `[namespaces.<name>]`. Every option left out takes the
/// default the rest of the configuration gives.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NamespaceConfig {
    /// Most messages kept in history per topic (default `topics.history_len`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_len: Option<usize>,
    /// How long a message stays in history (default `topics.history_ttl`).
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub history_ttl: Option<Duration>,
    /// What happens to a subscriber that falls behind (default `lag_policy`):
    /// `recover_or_notify`, `recover_or_disconnect`, `disconnect`, or `coalesce` (skip to the
    /// newest message, for tickers: no loss signal, no disconnect).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_policy: Option<LagPolicy>,
    /// Keep the members of the namespace's topics for `GET /v1/presence/{topic}?members=true`
    /// (default `topics.presence`). Subscriber counts are kept for every topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence: Option<bool>,
    /// Tell the subscribers of the namespace's topics when a member joins or leaves (SSE
    /// `herald.join` / `herald.leave`, WebSocket `join` / `leave`, a waiting long-poll's
    /// `presence`), on every node. Needs the namespace's members kept (`presence`). Off by
    /// default. A long-poll's own coming and going is not announced (each poll would be a
    /// join and a leave).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_leave: Option<bool>,
    /// Most join and leave events announced per second per topic by each node (a token
    /// bucket holding one second's worth); past it events are dropped and counted in
    /// `herald_presence_events_dropped_total` (clients can list the members instead). Each
    /// event costs one queued command per subscriber of the topic on every node (default
    /// [`DEFAULT_JOIN_LEAVE_RATE`]).
    /// Bound: 1 to 10000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_leave_rate: Option<u32>,
    /// Whether clients without a token may subscribe: `true` opens the namespace to them (as
    /// a public prefix does), `false` closes it even where a public prefix matches (default:
    /// the `[auth]` rules decide).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<bool>,
    /// Whether clients may publish (WebSocket `publish`, `POST /v1/publish` on the public
    /// listener): `true` lets every client that may subscribe to a topic publish to it,
    /// `false` lets none (only the application, through the admin API, Redis or Kafka),
    /// whatever their token says (default: the token's `publish` claim decides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish: Option<bool>,
    /// The hooks that apply to the namespace's topics, of `subscribe` and `publish` (default:
    /// every configured hook). A hook left out is not called for these topics: the token
    /// rules decide, as without hooks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Vec<Hook>>,
    /// Delta compression the namespace's subscribers may ask for (`delta=fossil`, WebSocket
    /// `"delta": "fossil"`): each message then goes, to a subscriber that asked and holds the
    /// message before it, as a Fossil delta against that message's data. Off by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<DeltaCodec>,
}

/// A delta encoding a namespace may allow, and a client ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeltaCodec {
    /// Fossil's delta format (docs/protocol.md, "Delta compression").
    Fossil,
}

impl DeltaCodec {
    /// Parses a client's `delta` value.
    pub fn parse(value: &str) -> Option<Self> {
        (value == "fossil").then_some(Self::Fossil)
    }
}

/// Join and leave events announced per second per topic by a node, by default.
pub const DEFAULT_JOIN_LEAVE_RATE: u32 = 20;

/// Checks the namespaces' names and options; `presence` is `topics.presence` (whether a
/// namespace that does not say keeps its members).
pub fn validate(
    namespaces: &BTreeMap<String, NamespaceConfig>,
    presence: bool,
) -> anyhow::Result<()> {
    ensure!(
        namespaces.len() <= MAX_NAMESPACES,
        "namespaces: at most {MAX_NAMESPACES} namespaces ({} given)",
        namespaces.len()
    );
    for (name, ns) in namespaces {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@' | b'-'));
        ensure!(
            valid,
            "namespaces.{name:?}: a namespace is 1 to 64 topic characters ([A-Za-z0-9_.@-]), without `:`"
        );
        ensure!(
            name != "user" && name != "conn",
            "namespaces.{name}: `user` and `conn` are the personal topics' own namespaces"
        );
        if let Some(ttl) = ns.history_ttl {
            ensure!(
                !ttl.is_zero(),
                "namespaces.{name}.history_ttl must be above zero"
            );
        }
        if let Some(len) = ns.history_len {
            ensure!(
                len <= 100_000,
                "namespaces.{name}.history_len is at most 100000 (as topics.history_len)"
            );
        }
        if ns.join_leave == Some(true) {
            ensure!(
                ns.presence.unwrap_or(presence),
                "namespaces.{name}.join_leave needs the namespace's members kept: set namespaces.{name}.presence = true"
            );
        }
        if let Some(rate) = ns.join_leave_rate {
            ensure!(
                (1..=10_000).contains(&rate),
                "namespaces.{name}.join_leave_rate is 1 to 10000 events per second ({rate} given)"
            );
        }
        for hook in ns.hooks.iter().flatten() {
            if !matches!(hook, Hook::Subscribe | Hook::Publish) {
                bail!(
                    "namespaces.{name}.hooks: only `subscribe` and `publish` apply per namespace, not `{}`",
                    hook.as_str()
                );
            }
        }
    }
    Ok(())
}

/// The namespace of `topic`: the part before its first `:`, if the topic has one.
pub fn namespace_of(topic: &str) -> Option<&str> {
    topic.split_once(':').map(|(ns, _)| ns)
}
