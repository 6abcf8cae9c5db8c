//! A feed's link to its topic's fan-out ([`crate::direct`]): while linked and idle, the
//! topic's publisher writes the feed's messages to the socket itself.

use std::sync::Arc;

use bytes::Bytes;

use super::live::LiveStream;
use super::topics::{Feed, FeedEvent, Link, coalesce};
use crate::direct::DirectSub;
use crate::history::LossReason;
use crate::lag::LagPolicy;

impl Feed {
    /// Lets the topic's publisher write this feed's messages itself through the connection's
    /// `link` while the feed is idle, instead of waking the feed's task for each
    /// ([`crate::direct`]). Only for a feed of one topic; subscribing to another topic ends
    /// it. False when not taken (or when `link` is attached elsewhere).
    ///
    /// The transport must call [`Self::park`] before it writes anything itself, and write
    /// what it returns first, and write [`FeedEvent::Rest`] when it comes.
    pub fn link(&mut self, link: Arc<DirectSub>) -> bool {
        if self.subs.len() != 1 || self.link.is_some() || self.has_patterns() {
            return false;
        }
        let sub = &self.subs[0];
        if !sub.topic.attach_direct(&link, sub.position) {
            return false;
        }
        self.link = Some(Link {
            sub: link,
            live: false,
        });
        true
    }

    /// Stops direct delivery for a moment, before the transport writes something of its own:
    /// the live receiver takes over from the position reached. Returns the rest of a frame
    /// the fan-out wrote in part, to write first. The feed goes direct again when it is idle.
    pub fn park(&mut self) -> Option<Bytes> {
        if self.link.as_ref().is_some_and(|l| l.live) {
            self.take_over();
        }
        self.rest.take().map(|rest| *rest)
    }

    /// The link to the topic's fan-out, while the feed has one.
    pub fn direct_link(&self) -> Option<&Arc<DirectSub>> {
        self.link.as_ref().map(|l| &l.sub)
    }

    /// When the topic's publisher last wrote to the socket itself.
    pub fn last_direct_write(&self) -> Option<std::time::Instant> {
        self.link.as_ref().and_then(|l| l.sub.last_write())
    }

    /// Whether the topic's publisher writes this feed's messages now.
    pub fn is_direct(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|l| l.live && l.sub.is_direct())
    }

    /// The linked subscriber was parked (or is being held): take its position and partial
    /// frame, and subscribe again live from there.
    pub(super) fn take_over(&mut self) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        let handover = link.sub.take();
        let was_live = std::mem::replace(&mut link.live, false);
        if let Some(rest) = handover.rest {
            // Boxed: rare (a partial write), and every idle feed carries the field.
            self.rest = Some(Box::new(rest));
        }
        let Some(sub) = self.subs.first_mut() else {
            return;
        };
        sub.position = handover.position;
        sub.based = handover.based;
        if was_live {
            self.resume_after_park();
        }
    }

    /// Subscribes the linked topic live again from the position the fan-out reached, with
    /// what it missed meanwhile from history. A gap history no longer covers is a lag, under
    /// the feed's policy.
    pub(super) fn resume_after_park(&mut self) {
        let Some(sub) = self.subs.first_mut() else {
            return;
        };
        let name = sub.topic.name().clone();
        let policy = sub.topic.lag_policy().unwrap_or(self.policy);
        if sub.position.seq == 0 && sub.topic.head().epoch != sub.position.epoch {
            // Nothing seen yet, and the topic's log set its epoch since: as `accept` does,
            // take what the topic holds in that epoch.
            return self.reopen(name);
        }
        let mut again = sub.topic.subscribe(Some(sub.position));
        match again.lost {
            // Parked further behind than the live channel holds: a lag, as a receiver would
            // report it (a park for the transport's own write is not one).
            None if policy == LagPolicy::Coalesce
                && again.replay.len() > sub.topic.channel_capacity() =>
            {
                // All but the newest are skipped.
                let skipped = again.replay.len() as u64 - 1;
                again = coalesce(sub, &mut self.pending, skipped);
            }
            None => {}
            Some(reason @ LossReason::Epoch) => {
                // The topic's log moved to another epoch: told, then given everything the
                // topic holds in the new one, as `accept` does for a live subscriber.
                again = sub.topic.subscribe_all();
                sub.position = again.start;
                sub.based = false;
                self.pending.push_back(FeedEvent::Lost {
                    topic: name.clone(),
                    reason,
                });
            }
            Some(_) if policy == LagPolicy::Coalesce => {
                again = coalesce(sub, &mut self.pending, 0);
            }
            Some(_) if policy == LagPolicy::RecoverOrNotify => {
                // Told, then given what history still holds, as a lagging receiver would.
                again = sub.topic.subscribe_all();
                sub.position = again.start;
                sub.based = false;
                self.pending.push_back(FeedEvent::Lost {
                    topic: name.clone(),
                    reason: LossReason::Lagged,
                });
            }
            Some(_) => self.pending.push_back(FeedEvent::Disconnect {
                topic: name.clone(),
                missed: 0,
            }),
        }
        self.pending
            .extend(again.replay.into_iter().map(FeedEvent::Message));
        self.streams.insert(name, LiveStream::new(again.receiver));
    }

    /// Ends direct delivery for good (a second topic, an unsubscribe, the end).
    pub(super) fn unlink(&mut self) {
        if self.link.is_none() {
            return;
        }
        self.take_over();
        if let (Some(link), Some(sub)) = (self.link.take(), self.subs.first()) {
            sub.topic.detach_direct(&link.sub);
        }
    }

    /// Goes direct when idle and the topic has nothing this feed has not seen.
    pub(super) fn try_go_direct(&mut self) -> bool {
        let (Some(link), [sub]) = (self.link.as_mut(), self.subs.as_slice()) else {
            return false;
        };
        if link.live || !self.pending.is_empty() || self.rest.is_some() || !link.sub.writer_ready()
        {
            return false;
        }
        if !sub
            .topic
            .try_direct(&link.sub, sub.position, sub.delta, sub.based)
        {
            return false;
        }
        link.live = true;
        let name = sub.topic.name().clone();
        self.streams.remove(&name);
        true
    }
}
