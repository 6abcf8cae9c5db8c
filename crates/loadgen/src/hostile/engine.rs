//! The attack engine: C attacker loops, each opening a connection per attack and taking the
//! next attack of the catalogue in turn, plus an optional health checker; counts how the
//! server answered.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::HostileConfig;
use super::attack::Gate;
use super::catalogue::{self, Action, Attack, Listener, PlanEnv, Planned};
use super::http2;
use super::outcome::Outcome;
use super::raw::{self, Rng};
use crate::conn::dial::dial;
use crate::histogram::{self, Hist};
use crate::target::Target;

/// Counts of one attack.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    /// Attacks that ended with an outcome.
    pub total: u64,
    /// Of those, with an expected outcome.
    pub expected: u64,
    /// By outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// Unexpected outcomes by (variant, outcome).
    pub unexpected: BTreeMap<(String, String), u64>,
    /// Outcomes by variant.
    pub variants: BTreeMap<String, BTreeMap<String, u64>>,
    /// Still in progress when the run ended, and abandoned.
    pub cancelled: u64,
    /// Time from connect to outcome (µs).
    pub time: Hist,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            total: 0,
            expected: 0,
            outcomes: BTreeMap::new(),
            unexpected: BTreeMap::new(),
            variants: BTreeMap::new(),
            cancelled: 0,
            time: histogram::new_hist(),
        }
    }
}

/// Live counters of the engine.
#[derive(Debug, Default)]
pub(crate) struct HostileStats {
    /// Attacks started.
    pub started: AtomicU64,
    /// Attacks that ended with an outcome.
    pub finished: AtomicU64,
    /// Of those, unexpected.
    pub unexpected: AtomicU64,
    tallies: Mutex<BTreeMap<Attack, Tally>>,
}

impl HostileStats {
    fn record(&self, attack: Attack, p: &Planned, o: &Outcome, took: Duration) {
        let expected = catalogue::is_expected(p.expect, o);
        self.finished.fetch_add(1, Relaxed);
        if !expected {
            self.unexpected.fetch_add(1, Relaxed);
        }
        let mut t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let tally = t.entry(attack).or_default();
        tally.total += 1;
        *tally.outcomes.entry(o.to_string()).or_default() += 1;
        *tally
            .variants
            .entry(p.variant.to_owned())
            .or_default()
            .entry(o.to_string())
            .or_default() += 1;
        if expected {
            tally.expected += 1;
        } else {
            *tally
                .unexpected
                .entry((p.variant.to_owned(), o.to_string()))
                .or_default() += 1;
        }
        histogram::record(&mut tally.time, took.as_micros() as u64);
    }

    fn cancel(&self, attack: Attack) {
        let mut t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        t.entry(attack).or_default().cancelled += 1;
    }

    /// A copy of the per-attack counts.
    pub(crate) fn tallies(&self) -> BTreeMap<Attack, Tally> {
        self.tallies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Results of the health checker.
#[derive(Debug, Clone)]
pub(crate) struct HealthTally {
    /// URL checked.
    pub url: String,
    /// Checks made.
    pub checks: u64,
    /// Answered 200.
    pub ok: u64,
    /// Failures by outcome.
    pub failures: BTreeMap<String, u64>,
    /// Answer time (µs) of every check.
    pub time: Hist,
}

/// What the engine hands back.
#[derive(Debug, Clone)]
pub(crate) struct HostileResult {
    /// Per-attack counts.
    pub tallies: BTreeMap<Attack, Tally>,
    /// Attacks started.
    pub started: u64,
    /// Health checks, when asked for.
    pub health: Option<HealthTally>,
    /// The good client's new-pattern probes, when `pattern_lockout` ran.
    pub probe: Option<HealthTally>,
    /// The good HTTP/2 client's requests, when an HTTP/2 attack ran.
    pub h2_probe: Option<HealthTally>,
    /// Seconds from start to the end of new attacks.
    pub secs: f64,
}

struct Ctx {
    cfg: HostileConfig,
    envs: Vec<(Target, PlanEnv)>,
    stats: Arc<HostileStats>,
    /// No new attacks.
    soft: CancellationToken,
    /// Abandon attacks in progress.
    hard: CancellationToken,
    slow: AtomicUsize,
    sources: AtomicU64,
    variants: Vec<AtomicU64>,
}

/// A running engine.
pub(crate) struct Engine {
    ctx: Arc<Ctx>,
    loops: JoinSet<()>,
    health: Option<JoinHandle<HealthTally>>,
    probe: Option<JoinHandle<HealthTally>>,
    h2_probe: Option<JoinHandle<HealthTally>>,
    started: Instant,
    stopped: Option<Instant>,
}

impl Engine {
    /// Starts `cfg.conns` attacker loops (and the health checker) on the current runtime.
    pub(crate) fn start(cfg: HostileConfig) -> Self {
        let now_secs = crate::clock::unix_micros() / 1_000_000;
        let run_id = crate::clock::unix_micros();
        let envs = cfg
            .targets
            .iter()
            .map(|t| {
                let env = PlanEnv {
                    host: t.host_header.clone(),
                    origin_forbidden: cfg.origin_forbidden.clone(),
                    jwt_secret: cfg.jwt_secret.clone(),
                    max_ws_message: cfg.max_ws_message,
                    huge_bytes: cfg.huge_bytes,
                    ping_flood: cfg.ping_flood,
                    slowloris_every: cfg.slowloris_every,
                    now_secs,
                    run_id,
                    admin_host: cfg.admin.as_ref().map(|a| a.host_header.clone()),
                    attack_timeout: cfg.attack_timeout,
                };
                (t.clone(), env)
            })
            .collect();
        let ctx = Arc::new(Ctx {
            variants: cfg.attacks.iter().map(|_| AtomicU64::new(0)).collect(),
            envs,
            stats: Arc::new(HostileStats::default()),
            soft: CancellationToken::new(),
            hard: CancellationToken::new(),
            slow: AtomicUsize::new(0),
            sources: AtomicU64::new(0),
            cfg,
        });
        let mut loops = JoinSet::new();
        if !ctx.cfg.attacks.is_empty() {
            for id in 0..ctx.cfg.conns {
                loops.spawn(attacker(ctx.clone(), id, run_id));
            }
        }
        let limit = ctx.cfg.health_timeout;
        let health = ctx.cfg.health.clone().map(|t| {
            let request = raw::get(&t.path_and_query, &t.host_header, &[]);
            let url = t.url.clone();
            let check = move |_| http_check(t.clone(), request.clone(), limit);
            tokio::spawn(check_loop(ctx.clone(), url, ctx.cfg.health_every, check))
        });
        // a good client subscribing to a new pattern now and then: a pattern lock-out shows
        // as its failures
        let probe = ctx
            .cfg
            .attacks
            .contains(&Attack::PatternLockout)
            .then(|| ctx.cfg.targets.first().cloned())
            .flatten()
            .map(|t| {
                let url = t.url.clone();
                let check = move |n| {
                    let target = format!("/v1/sse?topic=lock:probe-{run_id:x}-{n}.*");
                    let accept = ["Accept: text/event-stream".to_owned()];
                    let request = raw::get(&target, &t.host_header, &accept);
                    http_check(t.clone(), request, limit)
                };
                tokio::spawn(check_loop(ctx.clone(), url, ctx.cfg.probe_every, check))
            });
        // a good HTTP/2 client's requests while the HTTP/2 attacks run
        let h2_probe = ctx
            .cfg
            .attacks
            .iter()
            .any(|a| a.gate() == Some(Gate::H2))
            .then(|| ctx.cfg.h2.clone())
            .flatten()
            .map(|h2| {
                let url = h2.target.url.clone();
                let check = move |n| {
                    let h2 = h2.clone();
                    async move {
                        let path = format!("/v1/poll?topic=h2-probe-{n}&timeout=0");
                        http2::honest_get(&h2, &path, limit).await
                    }
                };
                tokio::spawn(check_loop(ctx.clone(), url, ctx.cfg.probe_every, check))
            });
        Self {
            ctx,
            loops,
            health,
            probe,
            h2_probe,
            started: Instant::now(),
            stopped: None,
        }
    }

    /// Live counters.
    pub(crate) fn stats(&self) -> Arc<HostileStats> {
        self.ctx.stats.clone()
    }

    /// Stops starting attacks (the health checker goes on until [`Self::finish`]).
    pub(crate) fn stop_attacks(&mut self) {
        if self.stopped.is_none() {
            self.stopped = Some(Instant::now());
        }
        self.ctx.soft.cancel();
    }

    /// Stops: no new attacks; attacks in progress get a grace period (bounded by the attack
    /// timeout, at most 3 s), then are abandoned and counted as cancelled.
    pub(crate) async fn finish(mut self) -> HostileResult {
        self.stop_attacks();
        let grace = self.ctx.cfg.attack_timeout.min(Duration::from_secs(3));
        let joined = tokio::time::timeout(grace, async {
            while self.loops.join_next().await.is_some() {}
        })
        .await;
        if joined.is_err() {
            self.ctx.hard.cancel();
            let again = tokio::time::timeout(Duration::from_secs(2), async {
                while self.loops.join_next().await.is_some() {}
            })
            .await;
            if again.is_err() {
                self.loops.abort_all();
            }
        }
        self.ctx.hard.cancel();
        let mut health = None;
        let mut probe = None;
        let mut h2_probe = None;
        for (task, slot) in [
            (self.health.take(), &mut health),
            (self.probe.take(), &mut probe),
            (self.h2_probe.take(), &mut h2_probe),
        ] {
            if let Some(h) = task {
                *slot = tokio::time::timeout(Duration::from_secs(5), h)
                    .await
                    .ok()
                    .and_then(Result::ok);
            }
        }
        let end = self.stopped.unwrap_or_else(Instant::now);
        HostileResult {
            tallies: self.ctx.stats.tallies(),
            started: self.ctx.stats.started.load(Relaxed),
            health,
            probe,
            h2_probe,
            secs: end.duration_since(self.started).as_secs_f64(),
        }
    }
}

impl Ctx {
    fn source(&self) -> Option<IpAddr> {
        let ips = &self.cfg.source_ips;
        if ips.is_empty() {
            return None;
        }
        let i = self.sources.fetch_add(1, Relaxed) as usize % ips.len();
        Some(ips[i])
    }

    fn try_slow(&self) -> bool {
        self.slow
            .fetch_update(Relaxed, Relaxed, |n| {
                (n < self.cfg.max_slow.max(1)).then_some(n + 1)
            })
            .is_ok()
    }
}

/// Picks the next attack of loop position `k` in round-robin order, skipping slow attacks while
/// the slow pool is full. Returns (catalogue index, attack, holds a slow permit).
fn pick(ctx: &Ctx, k: &mut usize) -> Option<(usize, Attack, bool)> {
    let n = ctx.cfg.attacks.len();
    for _ in 0..n {
        let idx = *k % n;
        *k += 1;
        let a = ctx.cfg.attacks[idx];
        if !a.is_slow() {
            return Some((idx, a, false));
        }
        if ctx.try_slow() {
            return Some((idx, a, true));
        }
    }
    None
}

async fn attacker(ctx: Arc<Ctx>, id: usize, seed: u64) {
    let mut rng = Rng::new(seed ^ ((id as u64) << 20) ^ 0x5eed);
    let mut k = id;
    while !ctx.soft.is_cancelled() {
        let Some((idx, attack, slow)) = pick(&ctx, &mut k) else {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = ctx.soft.cancelled() => {}
            }
            continue;
        };
        let v = ctx.variants[idx].fetch_add(1, Relaxed);
        let (target, env) = &ctx.envs[(v as usize) % ctx.envs.len()];
        let planned = catalogue::plan(attack, v, env, &mut rng);
        let bound = if slow {
            ctx.cfg.slowloris_max
        } else {
            ctx.cfg.attack_timeout
        };
        let source = ctx.source();
        let target = match (planned.listener, &ctx.cfg.admin) {
            (Listener::Admin, Some(admin)) => admin,
            _ => target,
        };
        ctx.stats.started.fetch_add(1, Relaxed);
        let t0 = Instant::now();
        let run = execute(&planned, target, &ctx.cfg, source, &mut rng);
        let outcome = tokio::select! {
            r = tokio::time::timeout(bound, run) => Some(r.unwrap_or(Outcome::Timeout)),
            _ = ctx.hard.cancelled() => None,
        };
        if slow {
            ctx.slow.fetch_sub(1, Relaxed);
        }
        match outcome {
            Some(o) => ctx.stats.record(attack, &planned, &o, t0.elapsed()),
            None => {
                ctx.stats.cancel(attack);
                break;
            }
        }
    }
}

/// Runs one planned attack on a fresh connection (an HTTP/2 one to `cfg.h2`).
pub(crate) async fn execute(
    p: &Planned,
    target: &Target,
    cfg: &HostileConfig,
    source: Option<IpAddr>,
    rng: &mut Rng,
) -> Outcome {
    if let Action::H2(a) = &p.action {
        return match &cfg.h2 {
            Some(h2) => http2::execute(a, h2, source, cfg.connect_timeout).await,
            None => Outcome::Connect("no_h2_url"),
        };
    }
    let mut stream = match dial(target.addr, source, cfg.connect_timeout).await {
        Ok(s) => s,
        Err(e) => return Outcome::Connect(e.kind().as_str()),
    };
    let mut buf = Vec::new();
    match &p.action {
        Action::Http(req) => match raw::exchange(&mut stream, req, &mut buf).await {
            Ok(h) => Outcome::Status(h.status),
            Err(o) => o,
        },
        Action::Trickle {
            prefix,
            trickle,
            every,
        } => match raw::trickle(&mut stream, prefix, trickle, *every, &mut buf).await {
            Ok(h) => Outcome::Status(h.status),
            Err(o) => o,
        },
        Action::Hold { req, hold } => match raw::exchange(&mut stream, req, &mut buf).await {
            Ok(h) if h.status == 200 => {
                tokio::time::sleep(*hold).await;
                Outcome::Status(200)
            }
            Ok(h) => raw::refusal(&mut stream, &h, &mut buf).await,
            Err(o) => o,
        },
        Action::Refusal(req) => match raw::exchange(&mut stream, req, &mut buf).await {
            Ok(h) => raw::refusal(&mut stream, &h, &mut buf).await,
            Err(o) => o,
        },
        Action::SlowRead {
            req,
            chunk,
            every,
            hold,
        } => {
            // the hold counts from the request, so that a slow answer still ends in time
            let until = Instant::now() + *hold;
            match raw::exchange(&mut stream, req, &mut buf).await {
                Ok(h) if h.status == 200 => {
                    let left = until.saturating_duration_since(Instant::now());
                    raw::slow_read(&mut stream, &h, buf.len(), *chunk, *every, left).await;
                    Outcome::Status(200)
                }
                Ok(h) => raw::refusal(&mut stream, &h, &mut buf).await,
                Err(o) => o,
            }
        }
        Action::Ws(super::catalogue::WsAttack {
            target: path,
            headers,
            frames,
            want,
            need,
            hold,
        }) => {
            let hs = catalogue::ws_handshake(&target.host_header, path, headers, rng);
            let head = match raw::exchange(&mut stream, &hs, &mut buf).await {
                Ok(h) if h.status == 101 => h,
                Ok(h) => return raw::refusal(&mut stream, &h, &mut buf).await,
                Err(o) => return o,
            };
            buf.drain(..head.head_len.min(buf.len()));
            let awaited = raw::Awaited { want, need: *need };
            let o = raw::ws_exchange(&mut stream, frames, &mut buf, awaited).await;
            if matches!(o, Outcome::WsReply(_)) && !hold.is_zero() {
                tokio::time::sleep(*hold).await;
            }
            if !o.is_silent() {
                raw::ws_goodbye(&mut stream, rng.mask()).await;
            }
            o
        }
        Action::H2(_) => unreachable!("served above"),
    }
}

/// Runs `check(n)` (the n-th check) every `every` until the run ends, each bounded by the
/// health timeout: a 200 is a success, anything else a failure by outcome.
async fn check_loop<F, Fut>(ctx: Arc<Ctx>, url: String, every: Duration, check: F) -> HealthTally
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    let mut t = HealthTally {
        url,
        checks: 0,
        ok: 0,
        failures: BTreeMap::new(),
        time: histogram::new_hist(),
    };
    let mut every = tokio::time::interval(every);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let limit = ctx.cfg.health_timeout;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = ctx.hard.cancelled() => break,
        }
        let t0 = Instant::now();
        let outcome = tokio::time::timeout(limit, check(t.checks))
            .await
            .unwrap_or(Outcome::Timeout);
        t.checks += 1;
        histogram::record(&mut t.time, t0.elapsed().as_micros() as u64);
        if outcome == Outcome::Status(200) {
            t.ok += 1;
        } else {
            *t.failures.entry(outcome.to_string()).or_default() += 1;
        }
    }
    t
}

/// Sends `request` to `target` from the good clients' address: the answer's outcome.
async fn http_check(target: Target, request: Vec<u8>, limit: Duration) -> Outcome {
    let check = async {
        let mut stream = dial(target.addr, None, limit)
            .await
            .map_err(|e| Outcome::Connect(e.kind().as_str()))?;
        let mut buf = Vec::new();
        let head = raw::exchange(&mut stream, &request, &mut buf).await?;
        if head.status == 200 {
            return Ok(Outcome::Status(200));
        }
        Ok::<_, Outcome>(raw::refusal(&mut stream, &head, &mut buf).await)
    };
    check.await.unwrap_or_else(|o| o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::parse_target;

    fn config(attacks: Vec<Attack>) -> HostileConfig {
        HostileConfig {
            targets: vec![parse_target("http://127.0.0.1:1", "/v1/sse", false).unwrap()],
            conns: 3,
            attacks,
            attack_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            slowloris_max: Duration::from_secs(2),
            slowloris_every: Duration::from_millis(100),
            max_slow: 1,
            source_ips: Vec::new(),
            origin_forbidden: None,
            jwt_secret: b"x".to_vec(),
            max_ws_message: 65536,
            huge_bytes: 1 << 20,
            ping_flood: 100,
            health: None,
            health_every: Duration::from_secs(1),
            health_timeout: Duration::from_secs(1),
            warmup: Duration::ZERO,
            max_rss_growth_kb: None,
            admin: None,
            probe_every: Duration::from_secs(1),
            h2: None,
        }
    }

    #[test]
    fn round_robin_bounds_slow_attacks() {
        let cfg = config(vec![Attack::Slowloris, Attack::GarbageBytes]);
        let ctx = Ctx {
            envs: Vec::new(),
            stats: Arc::new(HostileStats::default()),
            soft: CancellationToken::new(),
            hard: CancellationToken::new(),
            slow: AtomicUsize::new(0),
            sources: AtomicU64::new(0),
            variants: Vec::new(),
            cfg,
        };
        let mut k = 0;
        assert_eq!(pick(&ctx, &mut k), Some((0, Attack::Slowloris, true)));
        assert_eq!(pick(&ctx, &mut k), Some((1, Attack::GarbageBytes, false)));
        // the slow pool (1) is full: slowloris is skipped
        assert_eq!(pick(&ctx, &mut k), Some((1, Attack::GarbageBytes, false)));
        let only_slow = Ctx {
            cfg: config(vec![Attack::Slowloris]),
            ..ctx
        };
        only_slow.slow.store(1, Relaxed);
        assert_eq!(pick(&only_slow, &mut k), None);
    }

    #[tokio::test]
    async fn connection_refused_is_an_outcome() {
        // nothing listens on port 1
        let cfg = config(vec![Attack::GarbageBytes]);
        let mut rng = Rng::new(1);
        let env = PlanEnv {
            host: "127.0.0.1:1".into(),
            origin_forbidden: None,
            jwt_secret: Vec::new(),
            max_ws_message: 65536,
            huge_bytes: 1024,
            ping_flood: 10,
            slowloris_every: Duration::from_millis(10),
            now_secs: 0,
            run_id: 0,
            admin_host: None,
            attack_timeout: Duration::from_secs(1),
        };
        let p = catalogue::plan(Attack::GarbageBytes, 0, &env, &mut rng);
        let o = execute(&p, &cfg.targets[0], &cfg, None, &mut rng).await;
        assert_eq!(o, Outcome::Connect("connect_refused"));
    }
}
