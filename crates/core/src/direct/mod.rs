//! Direct delivery: a topic's publisher writes each message to the sockets of its idle
//! subscribers itself, in one loop, instead of waking one task per subscriber per message.
//!
//! A subscriber whose transport can write without waiting (a plain TCP socket and a frame
//! encoded once per message) keeps its socket, as a [`DirectWriter`], in a [`DirectSub`] link
//! and attaches the link to its topic through its [`crate::Feed`]. While its feed is idle (nothing to replay, nothing on its live receiver)
//! it is *direct*: the feed drops its live receiver, so a publish does not wake its task, and
//! the topic's fan-out (`DirectSet::fan_out`) writes the message's frame straight to the
//! socket when it is the subscriber's next one.
//!
//! A subscriber that cannot take a frame at once (the socket would block, or took only part
//! of it), or that is offered a message that is not its next one, is *parked*: the fan-out
//! stops writing to it and wakes its task, which finishes the partial frame, subscribes again
//! from the position reached (replaying from history, under the lag policy like any
//! subscriber that fell behind) and goes direct again once it has caught up. The task also
//! parks its subscriber itself before it writes anything of its own (a heartbeat, a control
//! event), so the socket has one writer at a time and frames never interleave.
//!
//! Ordering: a topic's messages are queued in order under the topic's lock and fanned out by
//! one thread at a time (the first publisher that finds the fan-out free drains the queue;
//! the others leave their messages to it), and each subscriber takes only the message right
//! after its position. The per-connection order, the cursor semantics and the slow-consumer
//! policy are those of the feed.

mod cohort;
mod link;
mod writer;

pub(crate) use cohort::DirectSet;
#[cfg(test)]
use cohort::Entry;
pub use link::{DirectSub, Handover};
pub use writer::{DeliveryCounter, DirectWriter};

#[cfg(test)]
mod tests;
