//! The coordinator: starts workers, drives the phases (ramp → measured → drain → stop),
//! runs the built-in publisher, samples servers, shows progress and gathers the results.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::assemble::{Inputs, assemble};
use super::fleet::Fleet;
use super::plan::RunPlan;
use super::progress::Progress;
use super::servers::{Mark, ServerWatch};
use crate::histogram;
use crate::hostile::engine::{Engine, HostileResult, HostileStats};
use crate::hostile::report::Window;
use crate::publish::{PublishStats, Publisher};
use crate::report::model::{Report, TimelinePoint};
use crate::worker::link::{WorkerLink, spawn_in_process, spawn_process};
use crate::worker::protocol::{Control, PublishSummary, WorkerMsg};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PumpEnd {
    Done,
    Deadline,
    Interrupted,
}

struct Coordinator {
    plan: RunPlan,
    links: Vec<WorkerLink>,
    events: mpsc::Receiver<(usize, WorkerMsg)>,
    fleet: Fleet,
    servers: ServerWatch,
    progress: Progress,
    timeline: Vec<TimelinePoint>,
    t0: Instant,
    last_tick: Instant,
    last_requests: u64,
    interrupt: CancellationToken,
    interrupted: bool,
    publish_stats: Option<std::sync::Arc<PublishStats>>,
    hostile_stats: Option<std::sync::Arc<HostileStats>>,
    last_attacks: u64,
}

impl Coordinator {
    async fn broadcast(&self, c: Control) {
        for l in &self.links {
            let _ = l.control.send(c.clone()).await;
        }
    }

    fn on_tick(&mut self, phase: &str) {
        let rss = self.servers.sample(Mark::Tick);
        let now = Instant::now();
        let dt = now.duration_since(self.last_tick).as_secs_f64().max(1e-3);
        self.last_tick = now;
        let total = self.fleet.total();
        let (receipt_rate, echo_rate) = self.fleet.rates();
        let rate = if matches!(self.plan.kind, crate::spec::ClientKind::Echo { .. }) {
            echo_rate
        } else {
            receipt_rate
        };
        let requests = self
            .publish_stats
            .as_ref()
            .map_or(0, |s| s.requests.load(std::sync::atomic::Ordering::Relaxed));
        let pub_rate = requests.saturating_sub(self.last_requests) as f64 / dt;
        self.last_requests = requests;
        let lat = histogram::summarize(&self.fleet.interval_latency);
        self.fleet.interval_latency.reset();
        let t = self.t0.elapsed().as_secs_f64();
        let mut line = format!(
            "[{t:7.1}s] {phase:<8} open {}/{} fail {} drop {} | recv {:.0}/s p99 {:.2}ms | pub {:.0}/s | err {}",
            total.open,
            self.plan.conns,
            total.failed,
            total.dropped,
            rate,
            lat.p99_ms,
            pub_rate,
            total.error_total()
        );
        let mut attack_rate = 0.0;
        if let Some(h) = &self.hostile_stats {
            use std::sync::atomic::Ordering::Relaxed;
            let done = h.finished.load(Relaxed);
            attack_rate = done.saturating_sub(self.last_attacks) as f64 / dt;
            self.last_attacks = done;
            line.push_str(&format!(
                " | attacks {attack_rate:.0}/s unexpected {}",
                h.unexpected.load(Relaxed)
            ));
            if let Some(kb) = rss.first() {
                line.push_str(&format!(" | rss {:.1} MiB", *kb as f64 / 1024.0));
            }
        }
        self.progress.update(&line, false);
        self.timeline.push(TimelinePoint {
            t_secs: t,
            phase: phase.to_owned(),
            open: total.open,
            deliveries_per_sec: rate,
            publish_per_sec: pub_rate,
            p50_ms: lat.p50_ms,
            p90_ms: lat.p90_ms,
            p99_ms: lat.p99_ms,
            p999_ms: lat.p999_ms,
            max_ms: lat.max_ms,
            latency_samples: lat.count,
            attacks_per_sec: attack_rate,
            server_rss_kb: rss,
        });
    }

    /// Handles events and ticks until `done` holds, `deadline` passes, or Ctrl-C.
    async fn pump<F: FnMut(&Fleet) -> bool>(
        &mut self,
        phase: &str,
        deadline: Instant,
        mut done: F,
    ) -> PumpEnd {
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::from_std(self.last_tick + self.plan.tick),
            self.plan.tick,
        );
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let deadline = tokio::time::Instant::from_std(deadline);
        loop {
            if done(&self.fleet) {
                return PumpEnd::Done;
            }
            tokio::select! {
                ev = self.events.recv() => match ev {
                    Some((id, msg)) => self.fleet.absorb(id, msg),
                    None => return PumpEnd::Done,
                },
                _ = ticker.tick() => self.on_tick(phase),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = tokio::time::sleep_until(deadline) => return PumpEnd::Deadline,
                _ = self.interrupt.cancelled(), if !self.interrupted => {
                    self.interrupted = true;
                    self.progress.note("interrupted: finishing the run (Ctrl-C again to abort)");
                    return PumpEnd::Interrupted;
                }
            }
        }
    }
}

fn spawn_interrupt_watch() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            t.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    token
}

/// How the ramp ended.
struct Ramp {
    /// Why it stopped pumping.
    end: PumpEnd,
    /// Seconds from the start of the run to the end of the ramp.
    secs: f64,
}

/// What the measured phase gathered (nothing when the ramp was interrupted).
struct Measured {
    /// What the publisher sent.
    summary: Option<PublishSummary>,
    /// When it began.
    start: Instant,
    /// Its length without the drain.
    secs: f64,
    /// How long the publisher ran.
    publish_secs: f64,
    /// The attackers' results, and when they attacked.
    hostile: Option<(HostileResult, Window)>,
}

impl Measured {
    /// A measured phase that did not run.
    fn skipped() -> Self {
        Self {
            summary: None,
            start: Instant::now(),
            secs: 0.0,
            publish_secs: 0.0,
            hostile: None,
        }
    }
}

/// Runs a subscriber/echo/churn plan to completion and returns its report.
pub(crate) async fn run(plan: RunPlan, args: Vec<String>, nofile: u64) -> anyhow::Result<Report> {
    let started_unix_ms = crate::clock::unix_micros() / 1000;
    let mut c = Coordinator::start(plan).await?;
    let ramp = c.ramp().await;
    let measured = if c.interrupted {
        Measured::skipped()
    } else {
        c.measure().await
    };
    let drain_secs = (Instant::now() - measured.start).as_secs_f64() - measured.secs;
    c.servers.sample(Mark::MeasureEnd);
    let window_secs = measured.start.elapsed().as_secs_f64();
    c.stop(measured.summary.clone()).await;
    let own_cpu_us = crate::procstat::own_cpu_micros();
    let Coordinator {
        plan,
        fleet,
        servers,
        timeline,
        interrupted,
        publish_stats,
        t0,
        ..
    } = c;
    let mut report = assemble(Inputs {
        plan: &plan,
        args,
        started_unix_ms,
        fleet: &fleet,
        summary: measured.summary.as_ref(),
        publish_stats: publish_stats.as_deref(),
        publish_secs: measured.publish_secs,
        servers: &servers,
        timeline,
        ramp_secs: ramp.secs,
        measured_secs: measured.secs,
        drain_secs,
        window_secs,
        total_secs: t0.elapsed().as_secs_f64(),
        interrupted: interrupted || ramp.end == PumpEnd::Interrupted,
        own_cpu_us,
        nofile,
    });
    if let Some(cfg) = &plan.hostile {
        match measured.hostile {
            Some((result, window)) => {
                crate::hostile::report::attach(&mut report, result, cfg, window);
            }
            None if !interrupted => {
                report
                    .verdict
                    .problems
                    .push("the attackers did not report".into());
                report.verdict.ok = false;
            }
            None => {}
        }
    }
    Ok(report)
}

impl Coordinator {
    /// Starts the workers (processes or tasks) and the server watch.
    async fn start(plan: RunPlan) -> anyhow::Result<Self> {
        let t0 = Instant::now();
        let servers = ServerWatch::new(&plan.server_pids);
        let progress = Progress::new(Duration::from_secs(5));
        for pid in servers.missing() {
            progress.note(&format!(
                "warning: server pid {pid} not found; it will not be sampled"
            ));
        }
        let (ev_tx, ev_rx) = mpsc::channel(1024);
        let mut links = Vec::new();
        for spec in plan.worker_specs() {
            let link = if plan.processes {
                spawn_process(spec, ev_tx.clone()).await?
            } else {
                spawn_in_process(spec, ev_tx.clone())
            };
            links.push(link);
        }
        Ok(Self {
            fleet: Fleet::new(links.len()),
            links,
            events: ev_rx,
            servers,
            progress,
            timeline: Vec::new(),
            t0,
            last_tick: t0,
            last_requests: 0,
            interrupt: spawn_interrupt_watch(),
            interrupted: false,
            publish_stats: None,
            hostile_stats: None,
            last_attacks: 0,
            plan,
        })
    }

    /// The ramp, bounded by the time it should take plus the connect timeouts.
    async fn ramp(&mut self) -> Ramp {
        let budget = if self.plan.ramp > 0.0 {
            Duration::from_secs_f64(self.plan.conns as f64 / self.plan.ramp)
        } else {
            Duration::ZERO
        } + self.plan.connect_timeout
            + self.plan.subscribe_timeout
            + Duration::from_secs(30);
        let end = self
            .pump("ramp", Instant::now() + budget, Fleet::all_ready)
            .await;
        if end == PumpEnd::Deadline {
            self.progress
                .note("warning: ramp did not finish in time; starting the measured phase anyway");
        }
        self.servers.sample(Mark::AfterConnect);
        Ramp {
            end,
            secs: self.t0.elapsed().as_secs_f64(),
        }
    }

    /// The measured phase: workers started, the publisher and the attackers run for the
    /// plan's duration, then finish; then the drain.
    async fn measure(&mut self) -> Measured {
        self.broadcast(Control::Start).await;
        let started = Instant::now() + Duration::from_secs(10);
        self.pump("start", started, Fleet::all_started).await;
        self.servers.sample(Mark::MeasureStart);
        let publisher = self.plan.publisher.clone().map(Publisher::start);
        self.publish_stats = publisher.as_ref().map(|p| p.stats().clone());
        let mut hostile = self.plan.hostile.clone().map(Engine::start);
        self.hostile_stats = hostile.as_ref().map(Engine::stats);
        let start = Instant::now();
        let attacks_began = start.duration_since(self.t0).as_secs_f64();
        self.pump("measure", start + self.plan.duration, |_| false)
            .await;
        let secs = start.elapsed().as_secs_f64();
        let window = Window {
            start: attacks_began,
            end: self.t0.elapsed().as_secs_f64(),
        };
        if let Some(h) = hostile.as_mut() {
            h.stop_attacks();
        }
        self.broadcast(Control::Quiesce).await;
        let hostile = match hostile {
            Some(h) => {
                self.finish(tokio::spawn(h.finish()), Duration::from_secs(30))
                    .await
            }
            None => None,
        };
        let (summary, publish_secs) = match publisher {
            Some(p) => {
                let secs = p.elapsed().as_secs_f64();
                let finished = tokio::spawn(p.finish());
                (self.finish(finished, Duration::from_secs(60)).await, secs)
            }
            None => (None, 0.0),
        };
        self.pump("drain", Instant::now() + self.plan.drain, |_| false)
            .await;
        Measured {
            summary,
            start,
            secs,
            publish_secs,
            hostile: hostile.map(|r| (r, window)),
        }
    }

    /// What `task` returns, pumping meanwhile; `None` (and the task aborted) when it takes
    /// longer than `limit`.
    async fn finish<T>(&mut self, task: JoinHandle<T>, limit: Duration) -> Option<T> {
        self.pump("finish", Instant::now() + limit, |_| task.is_finished())
            .await;
        if task.is_finished() {
            task.await.ok()
        } else {
            task.abort();
            None
        }
    }

    /// Stops the workers, waits for their final reports, and reaps worker processes.
    async fn stop(&mut self, summary: Option<PublishSummary>) {
        self.broadcast(Control::Stop { summary }).await;
        let end = self
            .pump(
                "stop",
                Instant::now() + Duration::from_secs(40),
                Fleet::all_final,
            )
            .await;
        if end != PumpEnd::Done {
            self.progress
                .note("warning: not every worker sent its final report");
        }
        self.on_tick("end");
        self.progress.finish();
        for link in &mut self.links {
            if let Some(child) = link.child.as_mut()
                && tokio::time::timeout(Duration::from_secs(5), child.wait())
                    .await
                    .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}
