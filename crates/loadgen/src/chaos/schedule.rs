//! The seeded schedules: which fault happens when, against what, for how long; and when each
//! client reconnects, to which node, over which transport. Pure functions of the seed and the
//! run's shape, so a run is reproducible from its seed (`--plan-only` prints them).

use std::time::Duration;

use serde::Serialize;

use super::fault::FaultKind;
use super::rng::Rng;

/// Stream ids of the generator (one per consumer).
pub(crate) const STREAM_FAULTS: u64 = 1;
pub(crate) const STREAM_PUBLISH: u64 = 2;
pub(crate) const STREAM_TOPICS: u64 = 3;
/// Client `i` draws its legs from stream `STREAM_CLIENTS + i`...
pub(crate) const STREAM_CLIENTS: u64 = 1 << 32;
/// ...and its backoffs after failures from `STREAM_BACKOFF + i`, so that failures (which
/// depend on timing) never shift its own schedule.
pub(crate) const STREAM_BACKOFF: u64 = 2 << 32;
/// Topic `i`'s publisher draws the pauses between retries from `STREAM_RETRY + i` (its node
/// choices stay those of the seed, however many retries it makes).
pub(crate) const STREAM_RETRY: u64 = 3 << 32;

/// The shape of the run that the fault schedule depends on.
#[derive(Debug, Clone)]
pub(crate) struct FaultShape {
    /// Faults start from here (after the clients are connected)...
    pub(crate) start: Duration,
    /// ...and every fault has ended by here.
    pub(crate) end: Duration,
    /// Pause between the end of one fault and the start of the next.
    pub(crate) gap: (Duration, Duration),
    /// Kinds to draw from.
    pub(crate) kinds: Vec<FaultKind>,
    /// Herald nodes (targets `node1`..).
    pub(crate) nodes: usize,
    /// Whether Kafka is part of the cluster (a net target).
    pub(crate) kafka: bool,
}

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PlannedFault {
    /// Offset from the run's start.
    pub(crate) at_ms: u64,
    /// How long it lasts before it is healed.
    pub(crate) hold_ms: u64,
    /// What happens.
    pub(crate) kind: FaultKind,
    /// What it is aimed at: `node2`, `redis`, `kafka`, `clients-node1`.
    pub(crate) target: String,
    /// The kind's parameter: latency ms, bandwidth KB/s; 0 otherwise.
    pub(crate) param: u64,
}

/// The shortest and longest hold of a kind (ms).
fn hold_range(kind: FaultKind) -> (u64, u64) {
    match kind {
        FaultKind::NodeKill => (1_000, 4_000),
        FaultKind::NodePause => (1_000, 5_000),
        // long enough for Sentinel to notice (down-after) and promote the replica
        FaultKind::RedisFailover => (5_000, 8_000),
        // the kill is instantaneous: the hold is the time the nodes have to resubscribe and
        // repair before the next fault
        FaultKind::PubsubKill => (1_000, 3_000),
        FaultKind::KafkaRestart => (1_000, 3_000),
        FaultKind::NetLatency | FaultKind::NetBandwidth => (2_000, 6_000),
        FaultKind::NetCut | FaultKind::NetStall => (1_000, 4_000),
    }
}

/// How long healing a kind takes beyond its hold, as planned (ms): the broker's start, the
/// wait for Sentinel's promotion and the old master's resync, a node's restart. The schedule
/// leaves this room after the hold so that the faults do not drift into `--settle`.
pub(crate) fn heal_ms(kind: FaultKind) -> u64 {
    match kind {
        FaultKind::KafkaRestart => 10_000,
        FaultKind::RedisFailover => 5_000,
        FaultKind::NodeKill => 2_000,
        _ => 0,
    }
}

fn hold_ms(kind: FaultKind, r: &mut Rng) -> u64 {
    let (lo, hi) = hold_range(kind);
    r.range(lo, hi)
}

fn target(kind: FaultKind, shape: &FaultShape, r: &mut Rng) -> String {
    let node = 1 + r.below(shape.nodes.max(1) as u64);
    match kind {
        FaultKind::NodeKill | FaultKind::NodePause => format!("node{node}"),
        FaultKind::RedisFailover | FaultKind::PubsubKill => "redis".into(),
        FaultKind::KafkaRestart => "kafka".into(),
        _ => {
            let links = 2 + u64::from(shape.kafka);
            match r.below(links) {
                0 => format!("clients-node{node}"),
                1 => "redis".into(),
                _ => "kafka".into(),
            }
        }
    }
}

fn param(kind: FaultKind, r: &mut Rng) -> u64 {
    match kind {
        FaultKind::NetLatency => r.range(100, 1_500),
        FaultKind::NetBandwidth => r.range(2, 32),
        _ => 0,
    }
}

/// The fault schedule of a seed: faults one after another, never overlapping, so that each
/// gap or reconnect can be attributed to the one fault in force; each is planned to be healed
/// (its hold and [`heal_ms`]) by `shape.end`. The first round has every
/// kind of `shape.kinds` once, in a seeded order, so that a short run tries them all: a
/// fault of that round whose drawn hold would leave too little time for the kinds still to
/// come is held for its kind's shortest time (and followed by the shortest gap), and a kind
/// that does not fit even so is left out only when the window is too short for it. Then
/// kinds are drawn at random until the window ends.
pub(crate) fn plan_faults(seed: u64, shape: &FaultShape) -> Vec<PlannedFault> {
    let mut r = Rng::new(seed, STREAM_FAULTS);
    let mut out = Vec::new();
    if shape.kinds.is_empty() {
        return out;
    }
    let (gmin, gmax) = (
        shape.gap.0.as_millis() as u64,
        shape.gap.1.as_millis() as u64,
    );
    let end = shape.end.as_millis() as u64;
    let mut t = shape.start.as_millis() as u64 + r.range(gmin, gmax);
    // the first round: each kind once (a kind named twice in --faults is one kind)
    let mut first: Vec<FaultKind> = Vec::new();
    for k in &shape.kinds {
        if !first.contains(k) {
            first.push(*k);
        }
    }
    for i in (1..first.len()).rev() {
        first.swap(i, r.below(i as u64 + 1) as usize);
    }
    // what the kinds after each one need at the least: the shortest gap before each, and
    // its shortest hold
    let least =
        |kinds: &[FaultKind]| -> u64 { kinds.iter().map(|k| gmin.max(1) + least_hold(*k)).sum() };
    for (i, kind) in first.iter().copied().enumerate() {
        let rest = least(&first[i + 1..]);
        let mut hold = hold_ms(kind, &mut r);
        let target = target(kind, shape, &mut r);
        let param = param(kind, &mut r);
        let mut gap = r.range(gmin, gmax).max(1);
        let heal = heal_ms(kind);
        if t + hold + heal + gap + rest > end {
            hold = hold_range(kind).0;
            gap = gmin.max(1);
        }
        if t + hold + heal > end {
            // too short a window for this kind (a shorter one may still fit)
            continue;
        }
        out.push(PlannedFault {
            at_ms: t,
            hold_ms: hold,
            kind,
            target,
            param,
        });
        t += hold + heal + gap;
    }
    // then at random; bounded: every fault takes at least a second plus its gap
    while out.len() < 100_000 {
        let kind = shape.kinds[r.below(shape.kinds.len() as u64) as usize];
        let hold = hold_ms(kind, &mut r);
        let target = target(kind, shape, &mut r);
        let param = param(kind, &mut r);
        let heal = heal_ms(kind);
        if t + hold + heal > end {
            break;
        }
        out.push(PlannedFault {
            at_ms: t,
            hold_ms: hold,
            kind,
            target,
            param,
        });
        t += hold + heal + r.range(gmin, gmax).max(1);
    }
    out
}

/// The least time a fault of `kind` takes: its shortest hold and its healing.
fn least_hold(kind: FaultKind) -> u64 {
    hold_range(kind).0 + heal_ms(kind)
}

/// The transports a chaos client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Transport {
    Sse,
    Ws,
    Poll,
}

impl Transport {
    const ALL: [Transport; 3] = [Transport::Sse, Transport::Ws, Transport::Poll];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::Sse => "sse",
            Transport::Ws => "ws",
            Transport::Poll => "poll",
        }
    }
}

/// How clients reconnect on their own.
#[derive(Debug, Clone)]
pub(crate) struct ClientShape {
    /// Time between a client's own reconnects.
    pub(crate) every: (Duration, Duration),
    /// Probability that a reconnect also switches transport.
    pub(crate) switch: f64,
    /// Herald nodes to choose from.
    pub(crate) nodes: usize,
}

/// One session of a client's plan: the node and transport it uses, and how long it keeps
/// it before reconnecting on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Leg {
    pub(crate) node: usize,
    pub(crate) transport: Transport,
    pub(crate) hold_ms: u64,
    /// This leg changed transport from the previous one.
    pub(crate) switched: bool,
}

/// A client's reconnect plan: an endless, seeded sequence of legs.
#[derive(Debug, Clone)]
pub(crate) struct ClientPlan {
    rng: Rng,
    backoff: Rng,
    shape: ClientShape,
    transport: Transport,
    first: bool,
}

impl ClientPlan {
    pub(crate) fn new(seed: u64, client: u64, shape: ClientShape) -> Self {
        let mut rng = Rng::new(seed, STREAM_CLIENTS + client);
        let transport = Transport::ALL[rng.below(3) as usize];
        ClientPlan {
            rng,
            backoff: Rng::new(seed, STREAM_BACKOFF + client),
            shape,
            transport,
            first: true,
        }
    }

    /// The next leg.
    pub(crate) fn next_leg(&mut self) -> Leg {
        let r = &mut self.rng;
        let switched = !self.first && r.chance(self.shape.switch);
        if switched {
            let others: Vec<Transport> = Transport::ALL
                .into_iter()
                .filter(|t| *t != self.transport)
                .collect();
            self.transport = others[r.below(2) as usize];
        }
        self.first = false;
        let (lo, hi) = self.shape.every;
        Leg {
            node: r.below(self.shape.nodes.max(1) as u64) as usize,
            transport: self.transport,
            hold_ms: r.range(lo.as_millis() as u64, hi.as_millis() as u64),
            switched,
        }
    }

    /// A backoff before retrying after a failure (100 ms to 2 s).
    pub(crate) fn backoff_ms(&mut self, attempt: u32) -> u64 {
        let cap = (100u64 << attempt.min(5)).min(2_000);
        self.backoff.range(cap / 2, cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> FaultShape {
        FaultShape {
            start: Duration::from_secs(5),
            end: Duration::from_secs(110),
            gap: (Duration::from_secs(2), Duration::from_secs(5)),
            kinds: FaultKind::ALL.to_vec(),
            nodes: 3,
            kafka: true,
        }
    }

    #[test]
    fn same_seed_same_faults_other_seed_other_faults() {
        let a = plan_faults(42, &shape());
        assert_eq!(a, plan_faults(42, &shape()));
        assert_ne!(a, plan_faults(43, &shape()));
        assert!(a.len() > 5, "{a:?}");
    }

    #[test]
    fn faults_do_not_overlap_and_end_in_time() {
        let a = plan_faults(9, &shape());
        for w in a.windows(2) {
            assert!(w[0].at_ms + w[0].hold_ms < w[1].at_ms, "{w:?}");
        }
        assert!(
            a.iter()
                .all(|f| f.at_ms >= 5_000 && f.at_ms + f.hold_ms <= 110_000)
        );
        for f in &a {
            match f.kind {
                FaultKind::NodeKill | FaultKind::NodePause => assert!(f.target.starts_with("node")),
                FaultKind::NetLatency => assert!(f.param >= 100),
                _ => {}
            }
        }
    }

    fn kinds_of(plan: &[PlannedFault]) -> std::collections::BTreeSet<FaultKind> {
        plan.iter().map(|f| f.kind).collect()
    }

    /// The 2-minute soak's shape (deploy/chaos.sh 2m: warmup 8 s, settle 20 s).
    fn short_soak() -> FaultShape {
        FaultShape {
            start: Duration::from_secs(8),
            end: Duration::from_secs(100),
            ..shape()
        }
    }

    #[test]
    fn every_kind_comes_first_once_then_at_random() {
        let mut more = 0;
        for seed in 0..500 {
            let a = plan_faults(seed, &short_soak());
            let n = FaultKind::ALL.len();
            assert_eq!(kinds_of(&a).len(), n, "seed {seed}: {a:?}");
            assert_eq!(kinds_of(&a[..n]).len(), n, "seed {seed}: the first round");
            more += usize::from(a.len() > n);
            assert!(
                a.iter()
                    .all(|f| f.at_ms + f.hold_ms + heal_ms(f.kind) <= 100_000)
            );
            for w in a.windows(2) {
                assert!(w[0].at_ms + w[0].hold_ms + heal_ms(w[0].kind) < w[1].at_ms);
            }
        }
        // room for random faults after the first round, most of the time
        assert!(more > 250, "{more} of 500");
        // the order of the first round is the seed's
        let order = |seed| plan_faults(seed, &short_soak())[..3].to_vec();
        assert_ne!(order(1), order(2));
    }

    #[test]
    fn a_tight_window_still_gets_every_kind_with_the_shortest_holds() {
        // the least every kind needs: 9 gaps of 2 s and the shortest holds and healing
        // (32 s in all), after a first gap of up to 5 s
        let least: u64 = FaultKind::ALL.iter().map(|k| 2_000 + least_hold(*k)).sum();
        assert_eq!(least, 50_000);
        let s = FaultShape {
            start: Duration::from_secs(8),
            end: Duration::from_millis(8_000 + 5_000 + least),
            ..shape()
        };
        for seed in 0..300 {
            let a = plan_faults(seed, &s);
            assert_eq!(
                kinds_of(&a).len(),
                FaultKind::ALL.len(),
                "seed {seed}: {a:?}"
            );
            assert!(
                a.iter()
                    .all(|f| f.at_ms + f.hold_ms + heal_ms(f.kind) <= s.end.as_millis() as u64)
            );
            for w in a.windows(2) {
                assert!(w[0].at_ms + w[0].hold_ms < w[1].at_ms, "{w:?}");
            }
        }
    }

    #[test]
    fn a_window_too_short_for_every_kind_plans_what_fits() {
        let s = FaultShape {
            start: Duration::from_secs(8),
            end: Duration::from_secs(22),
            ..shape()
        };
        for seed in 0..100 {
            let a = plan_faults(seed, &s);
            assert!(!a.is_empty(), "{a:?}");
            assert!(kinds_of(&a).len() < FaultKind::ALL.len(), "{a:?}");
            assert!(a.iter().all(|f| f.at_ms + f.hold_ms <= 22_000));
        }
        // a kind named twice is still tried once first, and a single kind repeats
        let s = FaultShape {
            kinds: vec![FaultKind::PubsubKill, FaultKind::PubsubKill],
            ..short_soak()
        };
        let a = plan_faults(4, &s);
        assert!(a.len() > 5 && a.iter().all(|f| f.kind == FaultKind::PubsubKill));
        assert!(a.iter().all(|f| f.target == "redis" && f.param == 0));
    }

    #[test]
    fn without_kafka_no_kafka_link() {
        let mut s = shape();
        s.kafka = false;
        s.kinds = vec![FaultKind::NetCut];
        assert!(plan_faults(3, &s).iter().all(|f| f.target != "kafka"));
    }

    #[test]
    fn client_plans_are_reproducible_and_switch() {
        let cs = ClientShape {
            every: (Duration::from_secs(1), Duration::from_secs(9)),
            switch: 0.5,
            nodes: 3,
        };
        let legs = |seed, c| {
            let mut p = ClientPlan::new(seed, c, cs.clone());
            (0..50).map(|_| p.next_leg()).collect::<Vec<_>>()
        };
        assert_eq!(legs(1, 4), legs(1, 4));
        assert_ne!(legs(1, 4), legs(1, 5));
        let l = legs(1, 4);
        assert!(l.iter().any(|x| x.switched));
        assert!(!l[0].switched);
        assert!(
            l.iter()
                .all(|x| x.node < 3 && (1_000..=9_000).contains(&x.hold_ms))
        );
    }
}
