//! Signals: the first SIGTERM or SIGINT starts a graceful drain; a second one exits at once.
//! And the drain signal as connections wait for it ([`Drain`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio_util::sync::CancellationToken;

/// Runs a connection's future on `tracker`. A panic in it (a bug: every input is supposed to
/// be answered with an error, never a panic) ends that connection only, and is logged and
/// counted in `herald_task_panics_total{task}` rather than lost silently with the task.
pub fn spawn_connection<F>(tracker: &tokio_util::task::TaskTracker, task: &'static str, fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    use futures_util::FutureExt as _;
    // Combinators, not an `async move` block: a block would keep `fut` as a captured value
    // beside the future it awaits, doubling every connection's task (measured: +3.4 KB per
    // idle SSE stream).
    tracker.spawn(
        std::panic::AssertUnwindSafe(fut)
            .catch_unwind()
            .map(move |result| {
                if let Err(panic) = result {
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic without a message".into());
                    crate::telemetry::metrics::task_panic(task);
                    tracing::error!(task, panic = %message, "a connection task panicked; it was closed");
                }
            }),
    );
}

/// Cancels `token` on the first SIGTERM or SIGINT and exits the process on the second.
pub fn spawn_signal_handler(token: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(
            signal = name,
            "draining connections; send the signal again to exit at once"
        );
        token.cancel();
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::warn!("second signal: exiting without waiting");
        std::process::exit(130);
    });
    Ok(())
}

/// The drain signal as client connections wait for it: one atomic load per wake-up.
///
/// Every SSE and WebSocket task selects on the drain beside its feed, so the wait is polled
/// on every delivery. `CancellationToken`'s future takes the token's mutex and the `Notify`
/// list's lock on each poll — two locks shared by every connection, per delivery. A
/// [`DrainWait`] registers with the `Notify` once and afterwards checks an atomic flag only.
#[derive(Clone, Debug)]
pub(crate) struct Drain(Arc<DrainInner>);

#[derive(Debug)]
struct DrainInner {
    draining: AtomicBool,
    notify: Arc<Notify>,
}

impl Drain {
    /// A drain that starts when `token` is cancelled (a task follows the token).
    pub(crate) fn following(token: CancellationToken) -> Self {
        let drain = Self(Arc::new(DrainInner {
            draining: AtomicBool::new(false),
            notify: Arc::new(Notify::new()),
        }));
        let follower = drain.clone();
        tokio::spawn(async move {
            token.cancelled().await;
            follower.start();
        });
        drain
    }

    /// Starts the drain: every [`DrainWait`] completes.
    pub(crate) fn start(&self) {
        self.0.draining.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }

    /// Whether the drain has started.
    pub(crate) fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::Acquire)
    }

    /// A future that completes when the drain starts. Keep it for the connection's life
    /// (pinned) rather than making one per wait.
    pub(crate) fn wait(&self) -> DrainWait {
        DrainWait {
            // Made before the flag is next read: a start after this point completes it
            // (`notify_waiters` counts for every `Notified` that already exists).
            notified: Box::pin(self.0.notify.clone().notified_owned()),
            drain: self.clone(),
            registered: None,
        }
    }
}

/// Completes when the drain starts. See [`Drain`].
#[derive(Debug)]
pub(crate) struct DrainWait {
    drain: Drain,
    notified: Pin<Box<OwnedNotified>>,
    /// The waker the `Notify` holds for us, once registered.
    registered: Option<Waker>,
}

impl Future for DrainWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.drain.is_draining() {
            return Poll::Ready(());
        }
        if this
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        // First poll, or polled from another task: (re-)register this task's waker.
        if this.notified.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        this.registered = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn waits_complete_when_the_token_is_cancelled() {
        let token = CancellationToken::new();
        let drain = Drain::following(token.clone());
        let mut early = drain.wait();
        // Polled (registered) before the start, and made but not polled before the start.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), &mut early)
                .await
                .is_err()
        );
        let unpolled = drain.wait();
        let waiting = tokio::spawn(early);
        token.cancel();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a registered wait completes")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), unpolled)
            .await
            .expect("a wait made before the start completes");
        assert!(drain.is_draining());
        // Made after the start: ready at once.
        tokio::time::timeout(Duration::from_millis(100), drain.wait())
            .await
            .expect("ready after the start");
    }
}
