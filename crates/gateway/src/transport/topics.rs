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
/// to be held as long as the subscription). `charged` is a charge taken for it already
/// ([`precharge_topic`]): used when the topic is created, dropped when it is found.
pub(crate) fn topic_for_subscriber(
    state: &AppState,
    name: &TopicName,
    client: &str,
    charged: Option<QuotaCharge>,
) -> Result<(Arc<Topic>, Option<QuotaCharge>), ApiError> {
    if let Some(topic) = state.registry().get(name.as_str()) {
        return Ok((topic, None));
    }
    let charge = match charged {
        Some(charge) => charge,
        None => state.topic_quota().charge(client)?,
    };
    let (topic, created) = state.registry().get_or_create_for_subscriber(name)?;
    Ok((topic, created.then_some(charge)))
}

/// The charge `client` would owe for subscribing to `name`, taken before the node is made to
/// read anything for it: none when the node holds the topic; otherwise one against
/// `limits.max_new_topics_per_client`, refused past it. [`topic_for_subscriber`] keeps it
/// when it creates the topic and drops it when the topic came (from the cluster's log, or
/// another client) in the meantime.
fn precharge_topic(
    state: &AppState,
    name: &TopicName,
    client: &str,
) -> Result<Option<QuotaCharge>, ApiError> {
    if state.registry().get(name.as_str()).is_some() {
        return Ok(None);
    }
    state.topic_quota().charge(client).map(Some)
}

/// The charge for a pattern that `client`'s subscription makes new on this node (none when
/// the node holds it already): a new pattern pins a channel on the node as a new topic pins
/// a topic, so it counts against a per-client quota of its own
/// (`limits.max_new_patterns_per_client`), and a few clients cannot take the node's
/// `topics.max_patterns` from everyone else. `None` for the application (`client` `None`),
/// which is not charged; a pattern the node has no room for is refused for both
/// (`topics.max_patterns`, `503 topic_limit`), before anything is read for it.
pub(crate) fn pattern_charge(
    state: &AppState,
    pattern: &TopicName,
    client: Option<&str>,
) -> Result<Option<QuotaCharge>, ApiError> {
    let patterns = state.registry().patterns();
    if patterns.holds(pattern.prefix()) {
        return Ok(None);
    }
    let max = state.registry().config().max_patterns;
    if patterns.len() >= max {
        return Err(herald_core::RegistryError::TooManyPatterns { max }.into());
    }
    match client {
        Some(client) => state.pattern_quota().charge(client).map(Some),
        None => Ok(None),
    }
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
    /// The client asked for deltas (`delta=fossil`): each topic's namespace must allow them,
    /// and its subscription takes them ([`Feed::want_deltas`]).
    pub(crate) delta: bool,
}

impl Wanted {
    /// The topics of an SSE or long-poll request: each resumed from its entry in `resume`
    /// when it has one, else started with the newest `last` messages or live; the patterns
    /// resume the topics of `resume` they match (`last` does not apply to them).
    fn from_query(
        topics: &[TopicName],
        resume: &ResumeList,
        last: Option<usize>,
        delta: bool,
    ) -> Self {
        let (patterns, topics): (Vec<&TopicName>, Vec<&TopicName>) =
            topics.iter().partition(|t| t.is_pattern());
        Self {
            topics: (topics.into_iter())
                .map(|t| (t.clone(), start_of(resume.get(t.as_str()), last)))
                .collect(),
            patterns: patterns.into_iter().cloned().collect(),
            resume: resume.iter().map(|(t, c)| (t.clone(), *c)).collect(),
            delta,
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

/// Adds `wanted` to `feed` for `asker`: within the per-connection limit; every refusal
/// first (the topics and patterns charged to the client, the node's room for patterns, the
/// client's `limits.cold_topics_per_minute`), then the node made to read what the topics
/// need from the cluster's logs ([`AppState::backfill`]: on a node that did not follow their
/// partitions until now, this waits for their history), so that a refused subscription makes
/// the node read nothing; then every topic found or created before any is subscribed, so
/// that a refusal part-way (the node's topic limit) leaves the feed as it was; patterns
/// with their resume positions. The one way topics are added to a feed.
pub(crate) async fn add_topics(
    state: &AppState,
    feed: &mut Feed,
    wanted: Wanted,
    asker: Asker<'_>,
) -> Result<Added, ApiError> {
    wanted.fit(state, feed)?;
    if wanted.delta {
        let names = (wanted.topics.iter().map(|(n, _)| n)).chain(&wanted.patterns);
        super::access::deltas_allowed(state.config(), names)?;
    }
    let client = match asker {
        Asker::Opening(client) | Asker::Command(client) => Some(client),
        Asker::Server => None,
    };
    // Every refusal before anything is read: the charges are taken now and held.
    let mut pattern_charges = Vec::with_capacity(wanted.patterns.len());
    for pattern in &wanted.patterns {
        pattern_charges.push(if feed.holds(pattern.as_str()) {
            None
        } else {
            pattern_charge(state, pattern, client)?
        });
    }
    let mut topic_charges = Vec::with_capacity(wanted.topics.len());
    for (name, _) in &wanted.topics {
        topic_charges.push(match client {
            Some(client) if !feed.holds(name.as_str()) => precharge_topic(state, name, client)?,
            _ => None,
        });
    }
    let names: Vec<&str> = (wanted.topics.iter())
        .filter(|(n, _)| !feed.holds(n.as_str()))
        .map(|(n, _)| n.as_str())
        .collect();
    if let Some(client) = client {
        state.charge_cold(client, &names)?;
    }
    let patterns = wanted.patterns.iter().any(|p| !feed.holds(p.as_str()));
    if !names.is_empty() || patterns {
        state.backfill(&names, patterns).await?;
    }
    let mut added = Added::default();
    let mut found = Vec::with_capacity(wanted.topics.len());
    for ((name, start), charged) in wanted.topics.into_iter().zip(topic_charges) {
        let topic = match client {
            Some(client) => {
                let (topic, charge) = topic_for_subscriber(state, &name, client, charged)?;
                added.charges.extend(charge.map(|c| (name, c)));
                topic
            }
            None => state.registry().get_or_create(&name)?,
        };
        found.push((topic, start));
    }
    let patterns = |feed: &mut Feed, added: &mut Added, charges| {
        add_patterns(
            state,
            feed,
            &wanted.patterns,
            charges,
            &wanted.resume,
            added,
        )
    };
    let patterns_first = matches!(asker, Asker::Command(_));
    let mut pattern_charges = Some(pattern_charges);
    if patterns_first {
        patterns(feed, &mut added, pattern_charges.take().unwrap_or_default())?;
    }
    for (topic, start) in found {
        let name = topic.name().clone();
        if matches!(asker, Asker::Server) && feed.holds(name.as_str()) {
            continue; // held already: nothing to tell
        }
        let start = feed
            .subscribe_from(topic, start)
            .map_err(|e| ApiError::bad_request("too_many_topics", e.to_string()))?;
        if wanted.delta {
            feed.want_deltas(name.as_str());
        }
        added.started.push((name, start));
    }
    if let Some(charges) = pattern_charges {
        patterns(feed, &mut added, charges)?;
    }
    Ok(added)
}

/// The patterns of [`add_topics`], each with the charge taken for it (`charges`, one per
/// pattern: [`pattern_charge`]); those already held are skipped. On a refusal, the patterns
/// this call added are dropped again.
fn add_patterns(
    state: &AppState,
    feed: &mut Feed,
    patterns: &[TopicName],
    charges: Vec<Option<QuotaCharge>>,
    resume: &[(TopicName, Cursor)],
    added: &mut Added,
) -> Result<(), ApiError> {
    let mut new: Vec<&TopicName> = Vec::new();
    for (pattern, charge) in patterns.iter().zip(charges) {
        if feed.holds(pattern.as_str()) {
            continue;
        }
        let resume = resume.iter().map(|(t, c)| (t, *c));
        let subscribed = feed
            .subscribe_pattern(state.registry(), pattern.clone(), resume)
            .map_err(feed_error);
        match subscribed {
            Ok(()) => {
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
/// message sent to a user): `topics` added to `feed`, each after its position when it has one
/// else from its live head, created when new and not charged to the client ([`Asker::Server`]); all or
/// nothing within the connection's topic limit. Returns each added topic with its starting
/// position.
pub(crate) async fn subscribe_from_server(
    state: &AppState,
    feed: &mut Feed,
    topics: &crate::cluster::control::ServerSubscription,
) -> Result<Vec<(TopicName, Cursor)>, ApiError> {
    let topics = topics
        .iter()
        .map(|(t, after)| Ok((TopicName::new(t)?, start_of(*after, None))))
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
/// it has one, else started with the newest `last` messages or live, taking deltas when
/// `delta` (refused where a namespace does not allow them); all or nothing. Returns
/// the charges for the topics it created. A pattern among `topics` (`orders.*`) resumes the
/// topics of `resume` it matches and delivers the others it matches live
/// ([`Feed::subscribe_pattern`]; `last` does not apply to it).
pub(crate) async fn open_feed(
    state: &AppState,
    topics: &[TopicName],
    resume: &ResumeList,
    last: Option<usize>,
    delta: bool,
    client: &str,
) -> Result<(Feed, Charges), ApiError> {
    let config = state.config();
    let mut feed = Feed::new(config.lag_policy, config.limits.max_subscriptions);
    let wanted = Wanted::from_query(topics, resume, last, delta);
    let added = add_topics(state, &mut feed, wanted, Asker::Opening(client)).await?;
    Ok((feed, added.charges.into_iter().map(|(_, c)| c).collect()))
}

/// [`open_feed`] for an SSE or long-poll request: its topics, `last` and `delta`, resumed
/// from `resume`.
pub(crate) async fn open_query_feed(
    state: &AppState,
    query: &super::access::SubscribeQuery,
    resume: &ResumeList,
    client: &str,
) -> Result<(Feed, Charges), ApiError> {
    open_feed(
        state,
        &query.topics,
        resume,
        query.last,
        query.delta,
        client,
    )
    .await
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use herald_core::{Cursor, EventName, Payload, ResumeList, TopicName};
    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    use super::open_feed;
    use crate::app::AppState;
    use crate::bridge::logs::{BoxFuture, Bridge, BridgeError, Ingest, Logs, Share};
    use crate::config::Config;
    use crate::telemetry::trace::Carried;

    /// A log that records what the node was made to read (each `backfill`).
    #[derive(Debug, Default)]
    struct Watched {
        backfilled: parking_lot::Mutex<Vec<(Vec<String>, bool)>>,
    }

    impl Bridge for Watched {
        fn name(&self) -> &'static str {
            "watched"
        }
        fn append<'a>(
            &'a self,
            _: &'a TopicName,
            _: Option<&'a EventName>,
            _: &'a Payload,
            _: Carried<'a>,
            _: Option<&'a str>,
        ) -> BoxFuture<'a, Result<Cursor, BridgeError>> {
            Box::pin(async { Ok(Cursor::new(1, 1)) })
        }
        fn run(self: Arc<Self>, _: Ingest, _: CancellationToken) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
        fn backfill<'a>(
            &'a self,
            topics: &'a [&'a str],
            patterns: bool,
        ) -> BoxFuture<'a, Result<(), BridgeError>> {
            let topics = topics.iter().map(|t| t.to_string()).collect();
            self.backfilled.lock().push((topics, patterns));
            Box::pin(async { Ok(()) })
        }
        fn is_ready(&self) -> bool {
            true
        }
    }

    fn node(config: Config) -> (AppState, Arc<Watched>) {
        let log = Arc::new(Watched::default());
        let access = crate::validate::Access::load(&config).unwrap();
        let state = AppState::clustered(
            config,
            access,
            CancellationToken::new(),
            TaskTracker::new(),
            crate::telemetry::Telemetry::untraced(crate::telemetry::metrics::install()),
            Arc::new(Logs::none().with(log.clone(), Share::Rest)),
            crate::cluster::Cluster::alone(crate::cluster::members::Kept::all()),
        );
        (state, log)
    }

    fn names(names: &[&str]) -> Vec<TopicName> {
        names
            .iter()
            .map(|n| TopicName::subscription(n).unwrap())
            .collect()
    }

    async fn open(state: &AppState, topics: &[&str], client: &str) -> Result<(), &'static str> {
        open_feed(
            state,
            &names(topics),
            &ResumeList::new(),
            None,
            false,
            client,
        )
        .await
        .map(drop)
        .map_err(|e| e.code())
    }

    #[tokio::test]
    async fn a_refused_subscription_makes_the_node_read_nothing() {
        let mut config = Config::default();
        config.topics.max_patterns = 0;
        config.limits.max_new_topics_per_client = 2;
        let (state, log) = node(config);
        // No room for patterns on the node: refused before anything is read.
        assert_eq!(open(&state, &["x.*"], "addr:a").await, Err("topic_limit"));
        assert_eq!(
            open(&state, &["t1", "x.*"], "addr:a").await,
            Err("topic_limit")
        );
        // Three new topics for a client whose quota is two.
        assert_eq!(
            open(&state, &["t1", "t2", "t3"], "addr:a").await,
            Err("topic_quota")
        );
        assert!(
            log.backfilled.lock().is_empty(),
            "{:?}",
            log.backfilled.lock()
        );
        // Nothing was charged by the refusals: the whole quota is still there.
        open(&state, &["t1", "t2"], "addr:a").await.unwrap();
        assert_eq!(log.backfilled.lock().len(), 1);
    }

    #[tokio::test]
    async fn a_pattern_over_the_client_s_quota_makes_the_node_read_nothing() {
        let mut config = Config::default();
        config.limits.max_new_patterns_per_client = 1;
        let (state, log) = node(config);
        let (_held, _charges) = open_feed(
            &state,
            &names(&["a.*"]),
            &ResumeList::new(),
            None,
            false,
            "addr:a",
        )
        .await
        .unwrap();
        assert_eq!(*log.backfilled.lock(), vec![(vec![], true)]);
        assert_eq!(open(&state, &["b.*"], "addr:a").await, Err("pattern_quota"));
        assert_eq!(
            log.backfilled.lock().len(),
            1,
            "the refused pattern read nothing"
        );
        // Another client may.
        open(&state, &["b.*"], "addr:b").await.unwrap();
        assert_eq!(log.backfilled.lock().len(), 2);
    }

    #[tokio::test]
    async fn polls_walking_new_topics_are_refused_past_the_client_s_budget() {
        let mut config = Config::default();
        config.limits.max_subscriptions = 16;
        config.limits.cold_topics_per_minute = 64;
        let (state, log) = node(config);
        let walk = |i: usize| (0..16).map(|k| format!("w{i}.{k}")).collect::<Vec<_>>();
        for i in 0..4 {
            let topics = walk(i);
            let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
            open(&state, &topics, "addr:a").await.unwrap();
        }
        let topics = walk(4);
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        assert_eq!(open(&state, &topics, "addr:a").await, Err("cold_topics"));
        assert_eq!(
            log.backfilled.lock().len(),
            4,
            "the refused poll read nothing"
        );
        // Another client has a budget of its own; the admin's tail is not limited.
        open(&state, &topics, "addr:b").await.unwrap();
        open(&state, &["w9.0"], crate::limits::ADMIN_CLIENT)
            .await
            .unwrap();
        // Topics the node holds cost nothing.
        state
            .registry()
            .get_or_create(&names(&["held"])[0])
            .unwrap();
        open(&state, &["held"], "addr:a").await.unwrap();
    }
}
