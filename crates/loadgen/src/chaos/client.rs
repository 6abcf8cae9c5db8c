//! One chaos client: a seeded sequence of legs (node, transport, how long), each a session
//! resumed with the client's cursors; failures retried with backoff on the next node. What
//! arrives goes through the client's [`StreamCheck`]; reconnects are counted by cause, and the
//! time from losing a connection to being subscribed again is kept per fault kind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::checker::{Here, StreamCheck};
use super::fault::FaultKind;
use super::ledger::Ledger;
use super::schedule::{ClientPlan, ClientShape, Transport};
use super::timeline::Timeline;
use super::wire::{self, Dial, End, Event, Sink};
use crate::target::Target;

/// What every client shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Per node: SSE, WebSocket and poll endpoints.
    pub(crate) sse: Vec<Target>,
    pub(crate) ws: Vec<Target>,
    pub(crate) poll: Vec<Target>,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) timeline: Arc<Timeline>,
    pub(crate) t0: Instant,
    pub(crate) seed: u64,
    pub(crate) shape: ClientShape,
    pub(crate) connect_timeout: Duration,
    pub(crate) stop: CancellationToken,
}

impl Shared {
    pub(crate) fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }
}

/// What a client hands back.
#[derive(Debug)]
pub(crate) struct ClientOutcome {
    pub(crate) id: u64,
    pub(crate) check: StreamCheck,
    /// Reconnects by cause (`scheduled`, `switch`, and each [`End`] that is a failure).
    pub(crate) reconnects: BTreeMap<&'static str, u64>,
    /// Resume latencies (ms), by the fault in force when the connection was lost.
    pub(crate) resumes: Vec<(Option<FaultKind>, u64)>,
    /// Sessions opened, per transport.
    pub(crate) sessions: BTreeMap<Transport, u64>,
    /// Whether its last session was open when the run stopped.
    pub(crate) open_at_end: bool,
    /// When it last lost its connection without getting it back (ms), if so.
    pub(crate) down_since_ms: Option<u64>,
    /// Messages that came as deltas and applied, and deltas that did not apply.
    pub(crate) deltas_applied: u64,
    pub(crate) delta_failures: u64,
}

struct ClientSink<'a> {
    check: &'a mut StreamCheck,
    cursors: &'a mut BTreeMap<String, String>,
    shared: &'a Shared,
    client: u64,
    transport: Transport,
    node: usize,
    /// When the session was opened (subscribed), in ms of the run; `None` if it never was.
    opened: Option<u64>,
    /// Deltas applied, and deltas that did not apply.
    deltas: &'a mut (u64, u64),
}

impl Sink for ClientSink<'_> {
    fn opened(&mut self) {
        self.opened.get_or_insert_with(|| self.shared.now_ms());
        self.check.on_open(&*self.shared.ledger);
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::Cursor { topic, id } => {
                if self.check.slot(&topic).is_some() {
                    self.cursors.insert(topic, id);
                }
            }
            Event::Lost { topic, reason } => {
                if let Some(slot) = self.check.slot(&topic) {
                    self.check.on_loss(slot, &reason);
                }
            }
            Event::DeltaApplied => self.deltas.0 += 1,
            Event::DeltaFailed => self.deltas.1 += 1,
            Event::Message { topic, id, seq } => {
                if let Some(slot) = self.check.slot(&topic) {
                    let here = Here {
                        client: self.client,
                        transport: self.transport,
                        node: self.node,
                        now_ms: self.shared.now_ms(),
                    };
                    self.check.on_message(
                        slot,
                        seq,
                        &id,
                        here,
                        &*self.shared.ledger,
                        &self.shared.timeline,
                    );
                }
            }
        }
    }
}

/// Runs client `id` on `topics` (ledger index, name) until the run stops, asking for deltas
/// if `delta` (every topic is then in a namespace that allows them).
pub(crate) async fn run(
    id: u64,
    topics: Vec<(usize, String)>,
    delta: bool,
    shared: Arc<Shared>,
) -> ClientOutcome {
    let names: Vec<String> = topics.iter().map(|(_, n)| n.clone()).collect();
    let mut out = ClientOutcome {
        id,
        check: StreamCheck::new(topics),
        reconnects: BTreeMap::new(),
        resumes: Vec::new(),
        sessions: BTreeMap::new(),
        open_at_end: false,
        down_since_ms: None,
        deltas_applied: 0,
        delta_failures: 0,
    };
    let mut deltas = (0, 0);
    let mut cursors = BTreeMap::new();
    let mut plan = ClientPlan::new(shared.seed, id, shared.shape.clone());
    let mut leg = plan.next_leg();
    let mut until = Instant::now() + Duration::from_millis(leg.hold_ms);
    let mut node = leg.node;
    let mut attempt = 0u32;
    let mut lost: Option<(u64, Option<FaultKind>)> = None;
    let nodes = shared.sse.len().max(1);
    // bounded: every pass either waits for its leg, backs off, or ends on `stop`
    while !shared.stop.is_cancelled() {
        let transport = leg.transport;
        let target = match transport {
            Transport::Sse => &shared.sse[node],
            Transport::Ws => &shared.ws[node],
            Transport::Poll => &shared.poll[node],
        };
        let snapshot = cursors.clone();
        let dial = Dial {
            target,
            topics: &names,
            cursors: &snapshot,
            connect_timeout: shared.connect_timeout,
            delta,
        };
        let mut sink = ClientSink {
            check: &mut out.check,
            cursors: &mut cursors,
            shared: &shared,
            client: id,
            transport,
            node,
            opened: None,
            deltas: &mut deltas,
        };
        let end = match transport {
            Transport::Sse => wire::sse::run(dial, until, &shared.stop, &mut sink).await,
            Transport::Ws => wire::ws::run(dial, until, &shared.stop, &mut sink).await,
            Transport::Poll => wire::poll::run(dial, until, &shared.stop, &mut sink).await,
        };
        let opened = sink.opened.is_some();
        let now = shared.now_ms();
        if let Some(at) = sink.opened {
            *out.sessions.entry(transport).or_default() += 1;
            attempt = 0;
            // Resumed when the session opened, not when it ended.
            if let Some((since, kind)) = lost.take() {
                out.resumes.push((kind, at.saturating_sub(since)));
            }
        }
        match end {
            End::Stopped => {
                out.open_at_end = opened;
                break;
            }
            End::Scheduled => {
                leg = plan.next_leg();
                *out.reconnects
                    .entry(if leg.switched { "switch" } else { "scheduled" })
                    .or_default() += 1;
                node = leg.node;
                until = Instant::now() + Duration::from_millis(leg.hold_ms);
            }
            failure => {
                *out.reconnects.entry(failure.name()).or_default() += 1;
                if lost.is_none() {
                    lost = Some((now, shared.timeline.blame(now, now).map(|f| f.kind)));
                }
                attempt += 1;
                // the next node: a client that loses its node goes to another one
                node = (node + 1) % nodes;
                let pause = Duration::from_millis(plan.backoff_ms(attempt));
                tokio::select! {
                    _ = shared.stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
                if Instant::now() >= until {
                    leg = plan.next_leg();
                    until = Instant::now() + Duration::from_millis(leg.hold_ms);
                }
            }
        }
    }
    out.down_since_ms = lost.map(|(since, _)| since);
    (out.deltas_applied, out.delta_failures) = deltas;
    out
}
