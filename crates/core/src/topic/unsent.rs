//! Topics whose fan-out waits: a publisher of several messages in a row
//! ([`Topic::publish_unsent`], [`Topic::ingest_unsent`]) counts them here, and they are fanned
//! out once, when it is done ([`Unsent`] dropped), so that each subscriber the publisher
//! writes to itself takes them in one write.

use std::sync::Arc;

use super::Topic;

/// Topics whose direct fan-out waits, each with how many of its messages wait. A topic is
/// fanned out as soon as `channel_capacity` of its messages wait: its fan-out queue holds
/// that many, and one more would overflow it and park its subscribers, who would then
/// recover from history and lose what history no longer holds (a batch longer than both).
/// Every topic is fanned out when this is dropped.
#[derive(Default)]
pub struct Unsent {
    /// (topic, messages waiting, its `channel_capacity`).
    topics: Vec<(Arc<Topic>, usize, usize)>,
}

impl Unsent {
    /// Counts a message published to `topic` without its fan-out.
    pub fn add(&mut self, topic: &Arc<Topic>) {
        let at = match self.topics.iter().position(|(t, ..)| Arc::ptr_eq(t, topic)) {
            Some(at) => at,
            None => {
                let capacity = topic.channel_capacity().max(1);
                self.topics.push((topic.clone(), 0, capacity));
                self.topics.len() - 1
            }
        };
        let (topic, waiting, capacity) = &mut self.topics[at];
        *waiting += 1;
        if *waiting >= *capacity {
            *waiting = 0;
            topic.fan_out();
        }
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        for (topic, waiting, _) in self.topics.drain(..) {
            if waiting > 0 {
                topic.fan_out();
            }
        }
    }
}

impl std::fmt::Debug for Unsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsent")
            .field("topics", &self.topics.len())
            .finish()
    }
}
