//! Carries out the fault schedule through the control script the run is given:
//! `CONTROL start <kind> <target> <param>` when a fault begins and
//! `CONTROL stop <kind> <target> <param>` when it is healed (restart the node, SIGCONT,
//! restart the old Redis master as a replica, start the broker, remove the toxic). Each is
//! recorded in the [`Timeline`] with its time.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Command;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::schedule::PlannedFault;
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

/// Runs the schedule from `t0`; a fault in force when `stop` fires is still healed.
pub(crate) async fn run(
    plan: Vec<PlannedFault>,
    script: PathBuf,
    timeline: Arc<Timeline>,
    t0: Instant,
    stop: CancellationToken,
) {
    for f in plan {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(t0 + Duration::from_millis(f.at_ms)) => {}
        }
        let now = || t0.elapsed().as_millis() as u64;
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
            return;
        }
    }
}
