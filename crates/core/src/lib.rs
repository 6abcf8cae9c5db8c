//! Herald's broadcast core: topics, the registry, messages and their encodings, cursors,
//! history and the per-connection feed with its lag policy. No I/O: the gateway crate owns
//! sockets, HTTP and bridges.
//!
//! Fan-out model: each topic owns a `tokio::sync::broadcast` channel of `Arc<Message>`. A
//! publish takes the topic's mutex and tokio's channel mutex briefly; every subscriber then
//! receives the same `Arc`, and the message's SSE and WebSocket encodings are built once and
//! shared as `bytes::Bytes`.

pub mod batch;
pub mod cursor;
pub mod deflate;
pub mod delta;
pub mod direct;
pub mod error;
pub mod feed;
mod frame;
pub mod history;
pub mod lag;
pub mod message;
pub mod msgpack;
pub mod name;
pub mod pattern;
mod payload;
pub mod protocol;
pub mod registry;
pub mod topic;

pub use cursor::{Cursor, ResumeList};
pub use direct::{DeliveryCounter, DirectSub, DirectWriter};
pub use error::{CursorError, EventNameError, FeedError, RegistryError, TopicNameError};
pub use feed::{Feed, FeedEvent, LagPolicy, Start};
pub use history::{History, LossReason};
pub use message::{Message, Outbound, Payload};
pub use name::{EventName, TopicName};
pub use pattern::PatternIndex;
pub use registry::{Registry, RegistryConfig};
pub use topic::{HistoryPage, LogStart, Subscription, Topic, TopicConfig, TopicStats, Unsent};
