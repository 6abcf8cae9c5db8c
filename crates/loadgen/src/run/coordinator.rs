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

/// Runs a subscriber/echo/churn plan to completion and returns its report.
pub(crate) async fn run(plan: RunPlan, args: Vec<String>, nofile: u64) -> anyhow::Result<Report> {
    let started_unix_ms = crate::clock::unix_micros() / 1000;
    let t0 = Instant::now();
    let servers = ServerWatch::new(&plan.server_pids);
    let progress = Progress::new(Duration::from_secs(5));
    for pid in servers.missing() {
        progress.note(&format!(
            "warning: server pid {pid} not found; it will not be sampled"
        ));
    }
    let specs = plan.worker_specs();
    let (ev_tx, ev_rx) = mpsc::channel(1024);
    let mut links = Vec::new();
    for spec in specs {
        let link = if plan.processes {
            spawn_process(spec, ev_tx.clone()).await?
        } else {
            spawn_in_process(spec, ev_tx.clone())
        };
        links.push(link);
    }
    drop(ev_tx);
    let n = links.len();
    let mut c = Coordinator {
        fleet: Fleet::new(n),
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
    };

    // Ramp: bounded by the time the ramp should take plus the connect timeouts.
    let ramp_budget = if c.plan.ramp > 0.0 {
        Duration::from_secs_f64(c.plan.conns as f64 / c.plan.ramp)
    } else {
        Duration::ZERO
    } + c.plan.connect_timeout
        + c.plan.subscribe_timeout
        + Duration::from_secs(30);
    let ramp_end = c
        .pump("ramp", Instant::now() + ramp_budget, Fleet::all_ready)
        .await;
    if ramp_end == PumpEnd::Deadline {
        c.progress
            .note("warning: ramp did not finish in time; starting the measured phase anyway");
    }
    c.servers.sample(Mark::AfterConnect);
    let ramp_done = Instant::now();

    // Measured phase.
    let mut summary: Option<PublishSummary> = None;
    let mut measure_start = Instant::now();
    let mut measured_secs = 0.0;
    let mut publish_secs = 0.0;
    let mut hostile_result: Option<HostileResult> = None;
    let (mut hostile_start, mut hostile_end) = (0.0, 0.0);
    if !c.interrupted {
        c.broadcast(Control::Start).await;
        c.pump(
            "start",
            Instant::now() + Duration::from_secs(10),
            Fleet::all_started,
        )
        .await;
        c.servers.sample(Mark::MeasureStart);
        let publisher = c.plan.publisher.clone().map(Publisher::start);
        c.publish_stats = publisher.as_ref().map(|p| p.stats().clone());
        let mut hostile = c.plan.hostile.clone().map(Engine::start);
        c.hostile_stats = hostile.as_ref().map(Engine::stats);
        measure_start = Instant::now();
        hostile_start = measure_start.duration_since(t0).as_secs_f64();
        c.pump("measure", measure_start + c.plan.duration, |_| false)
            .await;
        measured_secs = measure_start.elapsed().as_secs_f64();
        hostile_end = t0.elapsed().as_secs_f64();
        if let Some(h) = hostile.as_mut() {
            h.stop_attacks();
        }
        c.broadcast(Control::Quiesce).await;
        if let Some(h) = hostile {
            let handle: JoinHandle<HostileResult> = tokio::spawn(h.finish());
            c.pump("finish", Instant::now() + Duration::from_secs(30), |_| {
                handle.is_finished()
            })
            .await;
            hostile_result = if handle.is_finished() {
                handle.await.ok()
            } else {
                handle.abort();
                None
            };
        }
        if let Some(p) = publisher {
            publish_secs = p.elapsed().as_secs_f64();
            let handle: JoinHandle<PublishSummary> = tokio::spawn(p.finish());
            c.pump("finish", Instant::now() + Duration::from_secs(60), |_| {
                handle.is_finished()
            })
            .await;
            summary = if handle.is_finished() {
                handle.await.ok()
            } else {
                handle.abort();
                None
            };
        }
        let drain_end = Instant::now() + c.plan.drain;
        c.pump("drain", drain_end, |_| false).await;
    }
    let drain_secs = (Instant::now() - measure_start).as_secs_f64() - measured_secs;
    c.servers.sample(Mark::MeasureEnd);
    let window_secs = measure_start.elapsed().as_secs_f64();

    // Stop and collect.
    c.broadcast(Control::Stop {
        summary: summary.clone(),
    })
    .await;
    let end = c
        .pump(
            "stop",
            Instant::now() + Duration::from_secs(40),
            Fleet::all_final,
        )
        .await;
    if end != PumpEnd::Done {
        c.progress
            .note("warning: not every worker sent its final report");
    }
    c.on_tick("end");
    c.progress.finish();
    for link in &mut c.links {
        if let Some(child) = link.child.as_mut()
            && tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .is_err()
        {
            let _ = child.kill().await;
        }
    }
    let own_cpu_us = crate::procstat::own_cpu_micros();
    let Coordinator {
        plan,
        fleet,
        servers,
        timeline,
        interrupted,
        publish_stats,
        ..
    } = c;
    let mut report = assemble(Inputs {
        plan: &plan,
        args,
        started_unix_ms,
        fleet: &fleet,
        summary: summary.as_ref(),
        publish_stats: publish_stats.as_deref(),
        publish_secs,
        servers: &servers,
        timeline,
        ramp_secs: ramp_done.duration_since(t0).as_secs_f64(),
        measured_secs,
        drain_secs,
        window_secs,
        total_secs: t0.elapsed().as_secs_f64(),
        interrupted: interrupted || ramp_end == PumpEnd::Interrupted,
        own_cpu_us,
        nofile,
    });
    if let Some(cfg) = &plan.hostile {
        match hostile_result {
            Some(result) => crate::hostile::report::attach(
                &mut report,
                result,
                cfg,
                crate::hostile::report::Window {
                    start: hostile_start,
                    end: hostile_end,
                },
            ),
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
