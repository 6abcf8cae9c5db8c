//! Errors of the broadcast core.

use thiserror::Error;

/// Why a topic name was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopicNameError {
    /// The name is empty.
    #[error("topic name is empty")]
    Empty,
    /// The name is longer than [`crate::name::MAX_TOPIC_LEN`] bytes.
    #[error("topic name is longer than {max} bytes")]
    TooLong {
        /// The limit.
        max: usize,
    },
    /// The name holds a character outside `[A-Za-z0-9_.:@-]`.
    #[error("topic name contains {0:?}; allowed are A-Z a-z 0-9 and _ . : @ -")]
    BadChar(char),
    /// A subscription pattern that is not `<prefix>*` with a prefix ending in `.` or `:`
    /// ([`crate::pattern`]).
    #[error("bad pattern: {0}")]
    BadPattern(&'static str),
}

/// Why an event name was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EventNameError {
    /// The name is empty.
    #[error("event name is empty")]
    Empty,
    /// The name is longer than [`crate::name::MAX_EVENT_LEN`] bytes.
    #[error("event name is longer than {max} bytes")]
    TooLong {
        /// The limit.
        max: usize,
    },
    /// The name holds a character outside `[A-Za-z0-9_.:-]`.
    #[error("event name contains {0:?}; allowed are A-Z a-z 0-9 and _ . : -")]
    BadChar(char),
    /// Names starting with `herald.` are reserved for the gateway's own events.
    #[error("event names starting with \"herald.\" are reserved")]
    Reserved,
}

/// Why a cursor could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CursorError {
    /// The text is not `<epoch hex>-<seq decimal>`.
    #[error("cursor is not of the form <epoch>-<seq>")]
    Malformed,
    /// The text is longer than any cursor Herald writes.
    #[error("cursor is longer than {max} bytes")]
    TooLong {
        /// The limit.
        max: usize,
    },
    /// A resume list (`topic=cursor,...`) names more topics than allowed.
    #[error("resume list names more than {max} topics")]
    TooManyTopics {
        /// The limit.
        max: usize,
    },
    /// A resume list entry is not `topic=cursor`.
    #[error("resume list entry {0:?} is not topic=cursor")]
    BadEntry(String),
    /// A resume list entry names an invalid topic.
    #[error("resume list: {0}")]
    Topic(#[from] TopicNameError),
}

/// Errors of the topic registry.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegistryError {
    /// The registry holds its maximum number of topics and none could be reclaimed.
    #[error("the gateway holds its maximum of {max} topics")]
    TooManyTopics {
        /// The limit.
        max: usize,
    },
    /// Subscriptions created as many topics without a message as allowed
    /// ([`crate::RegistryConfig::max_unpublished`]).
    #[error(
        "the gateway holds its maximum of {max} topics that no message was published to; subscribe to an existing topic, or retry once one is published"
    )]
    TooManyUnpublished {
        /// The limit.
        max: usize,
    },
    /// Subscriptions hold as many distinct prefix patterns as a node allows
    /// ([`crate::RegistryConfig::max_patterns`]).
    #[error(
        "the gateway holds its maximum of {max} distinct patterns; subscribe to a pattern in use, or retry later"
    )]
    TooManyPatterns {
        /// The limit.
        max: usize,
    },
}

/// Errors of a subscriber's [`crate::feed::Feed`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FeedError {
    /// The connection already holds its maximum of subscriptions.
    #[error("a connection may hold at most {max} subscriptions")]
    TooManySubscriptions {
        /// The limit.
        max: usize,
    },
    /// The registry refused (a limit of the node, not of the connection).
    #[error(transparent)]
    Registry(#[from] RegistryError),
}
