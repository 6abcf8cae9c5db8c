//! Carries out the fault schedule through the control script the run is given:
//! `CONTROL start <kind> <target> <param>` when a fault begins and
//! `CONTROL stop <kind> <target> <param>` when it is healed (restart the node, SIGCONT,
//! restart the old Redis master as a replica, start the broker, remove the toxic). Each is
//! recorded in the [`Timeline`] with its time.
//!
//! A fault whose healing took longer than planned delays the next one; a fault that would no
//! longer be healed (its hold and [`heal_ms`]) by the end of the fault window, `--settle`
//! before the run's end, is skipped with every one after it, so that the clients and the
//! publishers' retries have the settle time without faults.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Command;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::schedule::{PlannedFault, heal_ms};
use super::timeline::Timeline;

/// Longest a control command may take (a broker start takes ~10 s).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(60);

async fn control(script: &PathBuf, verb: &str, f: &PlannedFault) -> Result<(), String> {
    let mut cmd = Command::new(script);
    cmd.arg(verb)
        .arg(f.kind.name())
        .arg(&f.target)
        .arg(f.param.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(CONTROL_TIMEOUT, cmd.output()).await {
        Err(_) => Err(format!("{verb} {}: timed out", f.kind.name())),
        Ok(Err(e)) => Err(format!("{verb} {}: {e}", f.kind.name())),
        Ok(Ok(o)) if o.status.success() => Ok(()),
        Ok(Ok(o)) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let tail: String = err
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            Err(format!(
                "{verb} {} {}: {}: {}",
                f.kind.name(),
                f.target,
                o.status,
                tail.trim()
            ))
        }
    }
}

/// Whether a fault starting at `now_ms` is still healed by `window_end_ms`.
fn fits(f: &PlannedFault, now_ms: u64, window_end_ms: u64) -> bool {
    now_ms.max(f.at_ms) + f.hold_ms + heal_ms(f.kind) <= window_end_ms
}

/// Runs the schedule from `t0` until `window_end` (from `t0`); a fault in force when `stop`
/// fires is still healed. Returns the faults skipped because they slipped past the window.
pub(crate) async fn run(
    plan: Vec<PlannedFault>,
    script: PathBuf,
    timeline: Arc<Timeline>,
    t0: Instant,
    window_end: Duration,
    stop: CancellationToken,
) -> usize {
    let total = plan.len();
    let window_end_ms = window_end.as_millis() as u64;
    for (done, f) in plan.into_iter().enumerate() {
        tokio::select! {
            _ = stop.cancelled() => return 0,
            _ = tokio::time::sleep_until(t0 + Duration::from_millis(f.at_ms)) => {}
        }
        let now = || t0.elapsed().as_millis() as u64;
        if !fits(&f, now(), window_end_ms) {
            let skipped = total - done;
            eprintln!(
                "[chaos] {:>8.1}s {skipped} faults skipped ({} first): the faults slipped past the window, which ends at {:.1}s",
                now() as f64 / 1e3,
                f.kind.name(),
                window_end_ms as f64 / 1e3
            );
            return skipped;
        }
        let i = timeline.begin(f.kind, &f.target, f.param, now());
        eprintln!(
            "[chaos] {:>8.1}s start {} {} {}",
            now() as f64 / 1e3,
            f.kind.name(),
            f.target,
            f.param
        );
        if let Err(e) = control(&script, "start", &f).await {
            eprintln!("[chaos] control error: {e}");
            timeline.note_error(i, e);
        }
        // held for its planned time from when it really began (healing the one before may
        // have taken longer than planned)
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(f.hold_ms)) => {}
        }
        let healed = control(&script, "stop", &f).await;
        if let Err(e) = &healed {
            eprintln!("[chaos] control error: {e}");
        }
        eprintln!(
            "[chaos] {:>8.1}s healed {} {}",
            now() as f64 / 1e3,
            f.kind.name(),
            f.target
        );
        timeline.end(i, now(), healed.err());
        if stop.is_cancelled() {
            return 0;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::super::fault::FaultKind;
    use super::*;

    #[test]
    fn a_fault_that_slipped_past_the_window_does_not_fit() {
        let f = PlannedFault {
            at_ms: 80_000,
            hold_ms: 3_000,
            kind: FaultKind::KafkaRestart,
            target: "kafka".into(),
            param: 0,
        };
        // on time: 80 + 3 + 10 (the broker's start)
        assert!(fits(&f, 80_000, 93_000));
        assert!(!fits(&f, 80_000, 92_999));
        // 8 s late
        assert!(!fits(&f, 88_000, 100_000));
        assert!(fits(&f, 87_000, 100_000));
        let g = PlannedFault {
            kind: FaultKind::PubsubKill,
            ..f
        };
        assert!(fits(&g, 97_000, 100_000));
    }
}
