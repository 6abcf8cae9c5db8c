//! A [`Session`]'s `subscribe` command: the frame checked and read into the topics it wants,
//! the subscribe decision ([`crate::transport::may_subscribe`]), then the one path that adds
//! topics to a feed ([`crate::transport::topics::add_topics`]), all or nothing, answered with
//! `subscribed` and each topic's position.

use std::collections::HashMap;

use herald_core::{Cursor, TopicName};

use super::session::{Flow, FrameError, Session};
use crate::error::ApiError;
use crate::server::stream::PeerStream;
use crate::telemetry::metrics::CloseReason;
use crate::transport::access::{delta_codec, topic_limit};
use crate::transport::topics::{Asker, Wanted, add_topics};
use crate::transport::{may_subscribe, start_of};

impl<S: PeerStream> Session<S> {
    pub(super) async fn subscribe(
        &mut self,
        topics: Vec<String>,
        cursors: HashMap<String, String>,
        last: Option<usize>,
        delta: Option<String>,
    ) -> Result<Flow, FrameError> {
        let max = self.state.config().limits.max_subscriptions;
        // A frame naming more topics than a connection may hold is refused unread.
        topic_limit(topics.len(), max)?;
        // One cursor per topic named, and as many for topics of patterns as a connection's
        // patterns track: a longer list is refused, not read (each entry is a history read).
        let most_cursors = max + herald_core::pattern::MAX_PATTERN_TOPICS;
        if cursors.len() > most_cursors {
            return Err(FrameError::new(
                "bad_cursor",
                format!("at most {most_cursors} cursors in one subscribe"),
            ));
        }
        let mut wanted = Wanted {
            delta: delta.is_some(),
            ..Wanted::default()
        };
        if let Some(delta) = &delta {
            delta_codec(delta)?;
        }
        for topic in &topics {
            let name = TopicName::subscription(topic).map_err(ApiError::from)?;
            if name.is_pattern() {
                if cursors.contains_key(topic) {
                    return Err(FrameError::new(
                        "bad_cursor",
                        format!(
                            "a pattern has no cursor: give the cursors of the topics of {topic:?} it delivered"
                        ),
                    ));
                }
                if !wanted.patterns.contains(&name) {
                    wanted.patterns.push(name);
                }
                continue;
            }
            let from = match cursors.get(topic) {
                Some(c) => Some(c.parse::<Cursor>().map_err(ApiError::from)?),
                None => None,
            };
            wanted.topics.push((name, start_of(from, last)));
        }
        // The cursors of topics a pattern matches resume them under the pattern.
        for (name, cursor) in &cursors {
            if topics.contains(name) {
                continue;
            }
            if !(wanted.patterns.iter()).any(|p| herald_core::pattern::matches(p.prefix(), name)) {
                return Err(FrameError::new(
                    "bad_cursor",
                    format!("cursor for {name:?}, which is not in topics nor matched by a pattern"),
                ));
            }
            let topic = TopicName::new(name).map_err(ApiError::from)?;
            let cursor = cursor.parse::<Cursor>().map_err(ApiError::from)?;
            wanted.resume.push((topic, cursor));
        }
        // Within the limit before the application is asked.
        wanted.fit(&self.state, &self.feed)?;
        let Some(peer) = self.socket.get_ref().get_ref().peer_ip() else {
            return Ok(Flow::Close(CloseReason::Client)); // the socket is gone
        };
        let names: Vec<&str> = (wanted.topics.iter().map(|(n, _)| n))
            .chain(&wanted.patterns)
            .map(TopicName::as_str)
            .collect();
        may_subscribe(&self.state, &self.caller(peer), &names).await?;
        let patterns: Vec<String> = wanted.patterns.iter().map(TopicName::to_string).collect();
        let client = self.state.client_key(self.who.sub.as_deref(), peer);
        let added =
            add_topics(&self.state, &mut self.feed, wanted, Asker::Command(&client)).await?;
        self.charges.extend(added.charges);
        let mut started = serde_json::Map::new();
        let mut names: Vec<String> = Vec::with_capacity(added.started.len() + patterns.len());
        for (name, start) in added.started {
            let name = name.to_string();
            names.push(name.clone());
            started.insert(name, start.to_string().into());
        }
        names.extend(patterns);
        self.members_follow();
        let reply =
            serde_json::json!({ "type": "subscribed", "topics": names, "cursors": started });
        Ok(self.send_text(reply.to_string()).await)
    }
}
