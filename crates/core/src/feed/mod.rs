//! A subscriber's merged view of its topics: replay, live messages, lag recovery and loss
//! signals, in one cancel-safe `next()` that every transport drives the same way.
//!
//! The feed, its topics and its events are in `topics`, its link to direct delivery in `link`,
//! its prefix pattern subscriptions in `patterns`, a subscription's live receiver in `live`.

mod link;
mod live;
mod patterns;
#[cfg(test)]
mod tests;
mod topics;

pub use crate::lag::LagPolicy;
pub use topics::{Feed, FeedEvent, Start};
