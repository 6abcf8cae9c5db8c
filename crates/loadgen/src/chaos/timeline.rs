//! The faults as they really happened (start and end, in ms since the run began), shared by
//! the injector that writes it and the clients that attribute gaps and reconnects to it.

use std::sync::Mutex;

use serde::Serialize;

use super::fault::FaultKind;

/// How long after a fault is healed its effects are still attributed to it (a restarted
/// node catching up, clients backing off, a replica promoted).
pub(crate) const LINGER_MS: u64 = 10_000;

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FaultRecord {
    pub(crate) kind: FaultKind,
    pub(crate) target: String,
    pub(crate) param: u64,
    pub(crate) start_ms: u64,
    /// None while in force.
    pub(crate) end_ms: Option<u64>,
    /// The control command failed (its output, shortened).
    pub(crate) error: Option<String>,
}

/// The fault a finding is blamed on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FaultRef {
    pub(crate) kind: FaultKind,
    pub(crate) target: String,
    pub(crate) start_ms: u64,
    /// The finding came after the fault was healed (within [`LINGER_MS`]).
    pub(crate) after_heal: bool,
}

/// The shared log.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    faults: Mutex<Vec<FaultRecord>>,
}

impl Timeline {
    /// Records a fault's start; returns its index.
    pub(crate) fn begin(&self, kind: FaultKind, target: &str, param: u64, now_ms: u64) -> usize {
        let mut f = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        f.push(FaultRecord {
            kind,
            target: target.to_owned(),
            param,
            start_ms: now_ms,
            end_ms: None,
            error: None,
        });
        f.len() - 1
    }

    /// Records a fault's end (and an error of its control commands, if any).
    pub(crate) fn end(&self, i: usize, now_ms: u64, error: Option<String>) {
        let mut f = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = f.get_mut(i) {
            r.end_ms = Some(now_ms);
            if r.error.is_none() {
                r.error = error;
            }
        }
    }

    /// Notes a control error while the fault is in force.
    pub(crate) fn note_error(&self, i: usize, error: String) {
        let mut f = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = f.get_mut(i) {
            r.error.get_or_insert(error);
        }
    }

    /// The fault in force at some moment of `[from_ms, to_ms]` (the latest one), counting a
    /// healed fault for [`LINGER_MS`] after its end.
    pub(crate) fn blame(&self, from_ms: u64, to_ms: u64) -> Option<FaultRef> {
        let f = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        blame_in(&f, from_ms, to_ms)
    }

    pub(crate) fn snapshot(&self) -> Vec<FaultRecord> {
        self.faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn blame_in(faults: &[FaultRecord], from_ms: u64, to_ms: u64) -> Option<FaultRef> {
    faults
        .iter()
        .rev()
        .find(|r| {
            r.start_ms <= to_ms
                && r.end_ms
                    .is_none_or(|e| e.saturating_add(LINGER_MS) >= from_ms)
        })
        .map(|r| FaultRef {
            kind: r.kind,
            target: r.target.clone(),
            start_ms: r.start_ms,
            after_heal: r.end_ms.is_some_and(|e| e < from_ms),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blames_the_fault_in_force_or_just_healed() {
        let t = Timeline::default();
        let a = t.begin(FaultKind::NodeKill, "node1", 0, 1_000);
        t.end(a, 3_000, None);
        let b = t.begin(FaultKind::NetCut, "redis", 0, 30_000);
        // inside the first fault
        let r = t.blame(1_500, 2_000).unwrap();
        assert_eq!((r.kind, r.after_heal), (FaultKind::NodeKill, false));
        // after it healed, within the linger
        let r = t.blame(5_000, 6_000).unwrap();
        assert_eq!((r.kind, r.after_heal), (FaultKind::NodeKill, true));
        // long after: nothing
        assert_eq!(t.blame(20_000, 25_000), None);
        // a window spanning both: the latest
        assert_eq!(t.blame(2_000, 31_000).unwrap().kind, FaultKind::NetCut);
        // still in force (no end yet)
        assert_eq!(t.blame(90_000, 91_000).unwrap().kind, FaultKind::NetCut);
        t.end(b, 32_000, Some("boom".into()));
        assert_eq!(t.snapshot()[1].error.as_deref(), Some("boom"));
    }
}
