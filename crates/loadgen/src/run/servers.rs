//! Sampling the servers under test (`--server-pid`): CPU and RSS at the phase boundaries and
//! on every tick.

use crate::procstat::{self, ProcSample};

/// Samples of one server process.
#[derive(Debug, Clone, Default)]
pub(crate) struct Watched {
    /// PID.
    pub pid: u32,
    /// Process name.
    pub name: String,
    /// Before any client connected.
    pub start: Option<ProcSample>,
    /// After the ramp.
    pub after_connect: Option<ProcSample>,
    /// When the measured phase began.
    pub measure_start: Option<ProcSample>,
    /// When the drain ended.
    pub measure_end: Option<ProcSample>,
    /// Latest sample.
    pub last: Option<ProcSample>,
    /// Highest RSS seen (KiB).
    pub peak_rss_kb: u64,
}

/// All watched servers.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerWatch {
    /// One entry per `--server-pid`.
    pub servers: Vec<Watched>,
}

/// Which boundary a sample marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Before connecting.
    Start,
    /// After the ramp.
    AfterConnect,
    /// Measured phase begins.
    MeasureStart,
    /// Drain ended.
    MeasureEnd,
    /// A periodic sample.
    Tick,
}

impl ServerWatch {
    /// Watches `pids`, sampling them once now.
    pub(crate) fn new(pids: &[u32]) -> Self {
        let mut w = Self {
            servers: pids
                .iter()
                .map(|&pid| Watched {
                    pid,
                    name: procstat::name(pid).unwrap_or_else(|| "?".into()),
                    ..Watched::default()
                })
                .collect(),
        };
        w.sample(Mark::Start);
        w
    }

    /// Samples every server and records the sample at `mark`. Returns current RSS values.
    pub(crate) fn sample(&mut self, mark: Mark) -> Vec<u64> {
        self.servers
            .iter_mut()
            .map(|s| {
                let sample = procstat::sample(s.pid);
                if let Some(x) = sample {
                    s.peak_rss_kb = s.peak_rss_kb.max(x.rss_kb);
                    s.last = Some(x);
                }
                match mark {
                    Mark::Start => s.start = sample,
                    Mark::AfterConnect => s.after_connect = sample,
                    Mark::MeasureStart => s.measure_start = sample,
                    Mark::MeasureEnd => s.measure_end = sample,
                    Mark::Tick => {}
                }
                sample.map_or(0, |x| x.rss_kb)
            })
            .collect()
    }

    /// Whether any PID was given but does not exist.
    pub(crate) fn missing(&self) -> Vec<u32> {
        self.servers
            .iter()
            .filter(|s| s.start.is_none())
            .map(|s| s.pid)
            .collect()
    }
}
