//! Adding topics to a feed: the one path for SSE and long-poll opening ([`open_feed`]), the
//! WebSocket `subscribe` command and server-side subscriptions ([`subscribe_from_server`]):
//! the per-connection limit, the topics found or created and charged, patterns and resume
//! positions ([`add_topics`]).

use std::sync::Arc;

use herald_core::{Cursor, Feed, ResumeList, Start, Topic, TopicName};

use super::access::topic_limit;
use crate::app::AppState;
use crate::error::ApiError;
use crate::limits::QuotaCharge;

/// The topics a subscription created, charged to its client while it lasts (see
/// [`crate::limits::TopicQuota`]).
pub(crate) type Charges = Vec<QuotaCharge>;

/// The topic `name` for a subscription by `client` (a [`crate::limits::publisher_key`]):
/// found, or created, in which case the client is charged for it (the charge is returned,
/// to be held as long as the subscription).
pub(crate) fn topic_for_subscriber(
    state: &AppState,
    name: &TopicName,
    client: &str,
) -> Result<(Arc<Topic>, Option<QuotaCharge>), ApiError> {
    if let Some(topic) = state.registry().get(name.as_str()) {
        return Ok((topic, None));
    }
    let charge = state.topic_quota().charge(client)?;
    let (topic, created) = state.registry().get_or_create_for_subscriber(name)?;
    Ok((topic, created.then_some(charge)))
}

/// The charge for a pattern that `client`'s subscription makes new on this node (none when
/// the node holds it already): a new pattern pins a channel on the node as a new topic pins
/// a topic, so it counts against a per-client quota of its own
/// (`limits.max_new_patterns_per_client`), and a few clients cannot take the node's
/// `topics.max_patterns` from everyone else.
pub(crate) fn pattern_charge(
    state: &AppState,
    pattern: &TopicName,
    client: &str,
) -> Result<Option<QuotaCharge>, ApiError> {
    if state.registry().patterns().holds(pattern.prefix()) {
        return Ok(None);
    }
    state.pattern_quota().charge(client).map(Some)
}

/// Topics to add to a feed, checked and parsed by the caller.
#[derive(Debug, Default)]
pub(crate) struct Wanted {
    /// The topics, each with where it starts.
    pub(crate) topics: Vec<(TopicName, Start)>,
    /// Prefix patterns (`orders.*`).
    pub(crate) patterns: Vec<TopicName>,
    /// Positions the client reached on topics the patterns match: each such topic resumes
    /// from its position ([`Feed::subscribe_pattern`]).
    pub(crate) resume: Vec<(TopicName, Cursor)>,
}

impl Wanted {
    /// The topics of an SSE or long-poll request: each resumed from its entry in `resume`
    /// when it has one, else started with the newest `last` messages or live; the patterns
    /// resume the topics of `resume` they match (`last` does not apply to them).
    fn from_query(topics: &[TopicName], resume: &ResumeList, last: Option<usize>) -> Self {
        let (patterns, topics): (Vec<&TopicName>, Vec<&TopicName>) =
            topics.iter().partition(|t| t.is_pattern());
        Self {
            topics: (topics.into_iter())
                .map(|t| (t.clone(), start_of(resume.get(t.as_str()), last)))
                .collect(),
            patterns: patterns.into_iter().cloned().collect(),
            resume: resume.iter().map(|(t, c)| (t.clone(), *c)).collect(),
        }
    }

    /// Topics and patterns, counted once per entry, that `feed` does not hold yet.
    fn new_to(&self, feed: &Feed) -> usize {
        (self.topics.iter().map(|(n, _)| n))
            .chain(&self.patterns)
            .filter(|n| !feed.holds(n.as_str()))
            .count()
    }

    /// Whether a feed holding `feed` would stay within the per-connection topic limit.
    pub(crate) fn fit(&self, state: &AppState, feed: &Feed) -> Result<(), ApiError> {
        topic_limit(
            feed.len() + self.new_to(feed),
            state.config().limits.max_subscriptions,
        )
    }
}

/// Who asks for the topics: what differs between the paths on purpose.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Asker<'a> {
    /// A client opening a feed (SSE, long-poll), identified by `client` (a
    /// [`crate::limits::publisher_key`]): topics and patterns it creates are charged to it.
    /// Its topics are subscribed before its patterns (their replays come first); a refusal
    /// leaves a feed to drop.
    Opening(&'a str),
    /// A client's command on a live feed (the WebSocket `subscribe`), charged as
    /// [`Asker::Opening`]: all or nothing, its patterns first (the node may refuse one, and
    /// those added are then dropped again), and every topic asked for is answered with its
    /// position, held before or not.
    Command(&'a str),
    /// The application (a server-side subscription): topics created are not charged to the
    /// client (the application asked, and the registry's own limit holds), and only those
    /// that are new to the feed are answered.
    Server,
}

/// What [`add_topics`] added.
#[derive(Debug, Default)]
pub(crate) struct Added {
    /// The topics subscribed, each with the position it starts after (see [`Asker`] for
    /// which are named).
    pub(crate) started: Vec<(TopicName, Cursor)>,
    /// The topics and patterns this created, charged to the client while it holds them.
    pub(crate) charges: Vec<(TopicName, QuotaCharge)>,
}

/// Adds `wanted` to `feed` for `asker`: within the per-connection limit, the node first made
/// to read what the topics need from the cluster's logs ([`AppState::prepare`]: on a node that
/// did not follow their groups until now, this waits for their history), then every topic
/// found or created (and charged) before any is subscribed, so that a refusal part-way (the
/// node's topic limit, a quota) leaves the feed as it was; patterns with their resume
/// positions. The one way topics are added to a feed.
pub(crate) async fn add_topics(
    state: &AppState,
    feed: &mut Feed,
    wanted: Wanted,
    asker: Asker<'_>,
) -> Result<Added, ApiError> {
    wanted.fit(state, feed)?;
    let names: Vec<&str> = (wanted.topics.iter())
        .filter(|(n, _)| !feed.holds(n.as_str()))
        .map(|(n, _)| n.as_str())
        .collect();
    let patterns = wanted.patterns.iter().any(|p| !feed.holds(p.as_str()));
    if !names.is_empty() || patterns {
        state.prepare(&names, patterns).await?;
    }
    let mut added = Added::default();
    let mut found = Vec::with_capacity(wanted.topics.len());
    for (name, start) in wanted.topics {
        let topic = match asker {
            Asker::Opening(client) | Asker::Command(client) => {
                let (topic, charge) = topic_for_subscriber(state, &name, client)?;
                added.charges.extend(charge.map(|c| (name, c)));
                topic
            }
            Asker::Server => state.registry().get_or_create(&name)?,
        };
        found.push((topic, start));
    }
    let patterns = |feed: &mut Feed, added: &mut Added| {
        add_patterns(state, feed, &wanted.patterns, &wanted.resume, asker, added)
    };
    let patterns_first = matches!(asker, Asker::Command(_));
    if patterns_first {
        patterns(feed, &mut added)?;
    }
    for (topic, start) in found {
        let name = topic.name().clone();
        if matches!(asker, Asker::Server) && feed.holds(name.as_str()) {
            continue; // held already: nothing to tell
        }
        let start = feed
            .subscribe_from(topic, start)
            .map_err(|e| ApiError::bad_request("too_many_topics", e.to_string()))?;
        added.started.push((name, start));
    }
    if !patterns_first {
        patterns(feed, &mut added)?;
    }
    Ok(added)
}

/// The patterns of [`add_topics`], each charged to its client when it is new on the node;
/// those already held are skipped. On a refusal, the patterns this call added are dropped
/// again.
fn add_patterns(
    state: &AppState,
    feed: &mut Feed,
    patterns: &[TopicName],
    resume: &[(TopicName, Cursor)],
    asker: Asker<'_>,
    added: &mut Added,
) -> Result<(), ApiError> {
    let mut new: Vec<&TopicName> = Vec::new();
    for pattern in patterns {
        if feed.holds(pattern.as_str()) {
            continue;
        }
        let subscribed = (match asker {
            Asker::Opening(client) | Asker::Command(client) => {
                pattern_charge(state, pattern, client)
            }
            Asker::Server => Ok(None),
        })
        .and_then(|charge| {
            let resume = resume.iter().map(|(t, c)| (t, *c));
            feed.subscribe_pattern(state.registry(), pattern.clone(), resume)
                .map_err(feed_error)?;
            Ok(charge)
        });
        match subscribed {
            Ok(charge) => {
                new.push(pattern);
                added.charges.extend(charge.map(|c| (pattern.clone(), c)));
            }
            Err(e) => {
                for pattern in new {
                    feed.unsubscribe(pattern.as_str());
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

/// A server-side subscription (the admin API's `POST /v1/users/{user}/subscribe`, or a
/// message sent to a user): `topics` added to `feed` from their live head (or after
/// `after`), created when new and not charged to the client ([`Asker::Server`]); all or
/// nothing within the connection's topic limit. Returns each added topic with its starting
/// position.
pub(crate) async fn subscribe_from_server(
    state: &AppState,
    feed: &mut Feed,
    topics: &[String],
    after: Option<Cursor>,
) -> Result<Vec<(TopicName, Cursor)>, ApiError> {
    let topics = topics
        .iter()
        .map(|t| Ok((TopicName::new(t)?, start_of(after, None))))
        .collect::<Result<Vec<_>, ApiError>>()?;
    let wanted = Wanted {
        topics,
        ..Wanted::default()
    };
    Ok(add_topics(state, feed, wanted, Asker::Server)
        .await?
        .started)
}

/// A server-side unsubscription: the topics of `topics` that `feed` held, now dropped.
pub(crate) fn unsubscribe_from_server(feed: &mut Feed, topics: &[String]) -> Vec<String> {
    topics
        .iter()
        .filter(|t| feed.unsubscribe(t))
        .cloned()
        .collect()
}

/// A feed subscribed to `topics` for `client`, each resumed from its entry in `resume` when
/// it has one, else started with the newest `last` messages or live; all or nothing. Returns
/// the charges for the topics it created. A pattern among `topics` (`orders.*`) resumes the
/// topics of `resume` it matches and delivers the others it matches live
/// ([`Feed::subscribe_pattern`]; `last` does not apply to it).
pub(crate) async fn open_feed(
    state: &AppState,
    topics: &[TopicName],
    resume: &ResumeList,
    last: Option<usize>,
    client: &str,
) -> Result<(Feed, Charges), ApiError> {
    let config = state.config();
    let mut feed = Feed::new(config.lag_policy, config.limits.max_subscriptions);
    let wanted = Wanted::from_query(topics, resume, last);
    let added = add_topics(state, &mut feed, wanted, Asker::Opening(client)).await?;
    Ok((feed, added.charges.into_iter().map(|(_, c)| c).collect()))
}

/// A feed's refusal: the connection's limit (`400 too_many_topics`) or the node's
/// (`503 topic_limit`).
pub(crate) fn feed_error(e: herald_core::FeedError) -> ApiError {
    match e {
        herald_core::FeedError::Registry(e) => e.into(),
        other => ApiError::bad_request("too_many_topics", other.to_string()),
    }
}

/// Where a subscription starts: after the client's cursor when it gave one, else with the
/// newest `last` messages when it asked for them, else live.
pub(crate) fn start_of(cursor: Option<Cursor>, last: Option<usize>) -> Start {
    match (cursor, last) {
        (Some(cursor), _) => Start::After(cursor),
        (None, Some(n)) => Start::Last(n),
        (None, None) => Start::Live,
    }
}
