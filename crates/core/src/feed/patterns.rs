//! A feed's prefix pattern subscriptions: every topic a pattern matches, topics created
//! later included, each message once whatever else matches it.

use std::sync::Arc;

use super::live::LiveStream;
use super::topics::{Feed, FeedEvent};
use crate::cursor::Cursor;
use crate::error::FeedError;
use crate::history::LossReason;
use crate::lag::LagPolicy;
use crate::message::Message;
use crate::name::TopicName;
use crate::pattern;
use crate::registry::Registry;

impl Feed {
    /// Subscribes to the prefix pattern `pattern` (a [`TopicName::is_pattern`] name): every
    /// message published from now on to a topic of `registry` that the pattern matches,
    /// topics created later included, comes out of [`Self::next`] with its own topic and
    /// position. A message several of the feed's subscriptions match (another pattern, or
    /// its topic named too) is delivered once: they share the topic's one position.
    ///
    /// `resume` holds positions the client reached (any topics; those the pattern matches
    /// are taken): each such topic replays its history after its position, or reports a
    /// loss, as [`Self::subscribe`] does. A matching topic not in `resume` is delivered from
    /// now on only. Subscribing again to a pattern held changes nothing.
    pub fn subscribe_pattern<'a>(
        &mut self,
        registry: &Registry,
        pattern: TopicName,
        resume: impl IntoIterator<Item = (&'a TopicName, Cursor)>,
    ) -> Result<(), FeedError> {
        debug_assert!(pattern.is_pattern());
        if self.holds(pattern.as_str()) {
            return Ok(());
        }
        if self.len() >= self.max_subscriptions as usize {
            return Err(FeedError::TooManySubscriptions {
                max: self.max_subscriptions as usize,
            });
        }
        self.unlink();
        let policy = registry.config().topic_config(pattern.prefix()).lag_policy;
        let prefix = pattern.prefix().to_owned();
        let patterns = self.patterns.get_or_insert_with(Box::default);
        // The live channel first: a message published while the history is read is then in
        // both, and the position check drops the second.
        let receiver = patterns.add(pattern.clone(), registry.patterns().clone(), policy)?;
        for (topic, cursor) in resume {
            // The feed's patterns track at most MAX_PATTERN_TOPICS positions together: a
            // longer resume list would replay histories whose positions are then forgotten
            // (and could deliver twice). The rest are live from now on.
            if patterns.tracked() >= pattern::MAX_PATTERN_TOPICS {
                break;
            }
            if !pattern::matches(&prefix, topic.as_str())
                || self.subs.iter().any(|s| s.topic.name() == topic)
                || patterns.position(topic.as_str()).is_some()
            {
                continue;
            }
            let Some(found) = registry.get(topic.as_str()) else {
                // Not on this node (yet): what arrives up to the position is skipped.
                patterns.set_position(topic, cursor, false);
                continue;
            };
            let sub = found.subscribe(Some(cursor));
            if let Some(reason) = sub.lost {
                self.pending.push_back(FeedEvent::Lost {
                    topic: topic.clone(),
                    reason,
                });
            }
            self.pending
                .extend(sub.replay.into_iter().map(FeedEvent::Message));
            patterns.set_position(topic, sub.start, false);
        }
        self.streams.insert(pattern, LiveStream::new(receiver));
        Ok(())
    }

    pub(super) fn unsubscribe_pattern(&mut self, pattern: &str) -> bool {
        let Some(patterns) = self.patterns.as_mut() else {
            return false;
        };
        let key = self.streams.keys().find(|k| k.as_str() == pattern).cloned();
        if let Some(key) = key {
            self.streams.remove(&key);
        }
        let removed = patterns.remove(pattern);
        // What the pattern had queued (a resume's replay) goes with it, so that subscribing
        // and unsubscribing in a loop cannot pile up replays faster than they are sent.
        if removed && !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            self.pending = pending
                .into_iter()
                .filter(|e| e.topic().is_none_or(|t| self.is_subscribed(t)))
                .collect();
        }
        removed
    }

    /// Whether the message `message`, read from `pattern`'s channel, is for this feed to
    /// take: `pattern` is the held pattern that delivers its topic. (A topic also subscribed
    /// to by name comes on both its own receiver and the pattern's; both pass its one
    /// position check, so whichever comes first is delivered, once, without a gap.)
    pub(super) fn pattern_delivers(&self, pattern: &TopicName, message: &Message) -> bool {
        // A topic also subscribed to by name is delivered by its own receiver alone: the
        // pattern's channel, shared by all its topics, may lag (or skip ahead after a lag)
        // while the topic's own receiver does not, and the one position check would then
        // drop the named topic's messages the pattern skipped.
        !self.subs.iter().any(|s| s.topic.name() == message.topic())
            && self
                .patterns
                .as_ref()
                .and_then(|p| p.deliverer(message.topic().as_str()))
                == Some(pattern)
    }

    /// A pattern's channel lagged: its subscriber missed `missed` messages of topics it
    /// cannot name, so nothing is recovered from history. Under `Coalesce` it goes on with
    /// what the channel still holds; under `RecoverOrNotify` it is told (the loss names the
    /// pattern); otherwise it is disconnected.
    pub(super) fn on_pattern_lag(&mut self, pattern: TopicName, missed: u64) {
        let policy = (self.patterns.as_ref())
            .and_then(|p| p.policy(pattern.as_str()))
            .unwrap_or(self.policy);
        self.pending.push_back(match policy {
            LagPolicy::Coalesce => FeedEvent::Coalesced {
                topic: pattern,
                skipped: missed,
            },
            LagPolicy::RecoverOrNotify => FeedEvent::Lost {
                topic: pattern,
                reason: LossReason::Lagged,
            },
            LagPolicy::RecoverOrDisconnect | LagPolicy::Disconnect => FeedEvent::Disconnect {
                topic: pattern,
                missed,
            },
        });
    }

    /// Passes `message` of a topic a pattern covers when it is the next one on its topic.
    pub(super) fn accept_matched(&mut self, message: Arc<Message>) -> Option<FeedEvent> {
        let patterns = self.patterns.as_mut()?;
        let topic = message.topic();
        if !patterns.covers(topic.as_str()) {
            return None;
        }
        let cursor = message.cursor();
        match patterns.position(topic.as_str()) {
            // A topic followed through a pattern alone is forgotten when its history
            // expires (no receiver of its own keeps it) and comes back in a new epoch at its
            // next publish: its first message, after a position reached live, loses nothing.
            Some(position)
                if position.epoch != cursor.epoch
                    && position.seq != 0
                    && !(cursor.seq == 1 && patterns.delivered_live(topic.as_str())) =>
            {
                // As `accept` does: a new epoch is a loss for a subscriber that saw any of
                // the old one; the message follows the signal.
                let topic = topic.clone();
                patterns.set_position(&topic, Cursor::new(cursor.epoch, 0), true);
                self.pending.push_front(FeedEvent::Message(message));
                return Some(FeedEvent::Lost {
                    topic,
                    reason: LossReason::Epoch,
                });
            }
            Some(position) if position.epoch == cursor.epoch && cursor.seq <= position.seq => {
                return None;
            }
            _ => {}
        }
        patterns.set_position(topic, cursor, true);
        Some(FeedEvent::Message(message))
    }
}
