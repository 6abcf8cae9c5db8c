//! The one reconnect-with-backoff loop every bridge (and the control relay) runs its passes in.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::telemetry::metrics;

/// How a bridge's pass (one connected run of its reader, from a connect to what ends it)
/// ended: `Err` with what failed, `Ok` when it ended on its own.
pub(crate) type PassResult = Result<(), String>;

/// The reconnect-with-backoff loop of every bridge: runs `pass` until `stop`, and after
/// each end marks the bridge down (`ended`, with the error), counts a reconnect and waits,
/// doubling the wait from `first_backoff` up to 5 s. A pass that ran for 5 s or more (it
/// connected and worked: a connection killed under it, not an engine that refuses) starts the
/// backoff over.
pub(crate) async fn reconnect_loop<S, F>(
    bridge: &'static str,
    stop: &CancellationToken,
    first_backoff: Duration,
    mut pass: S,
    mut ended: impl FnMut(Option<String>),
) where
    S: FnMut() -> F,
    F: Future<Output = PassResult>,
{
    let mut backoff = first_backoff;
    loop {
        let started = Instant::now();
        let result = tokio::select! {
            _ = stop.cancelled() => break,
            result = pass() => result,
        };
        if started.elapsed() >= Duration::from_secs(5) {
            backoff = first_backoff;
        }
        if let Err(e) = &result {
            tracing::warn!(bridge, error = %e, retry_in = ?backoff, "bridge disconnected");
        }
        ended(result.err());
        metrics::bridge_reconnect(bridge);
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    ended(None);
}
