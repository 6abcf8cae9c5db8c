//! Starting workers in this process or as child processes, and the child's entry point.

use std::process::Stdio;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::protocol::{Control, WorkerMsg};
use super::run::run_worker;
use crate::spec::WorkerSpec;

/// Name of the hidden subcommand that runs a child worker.
pub(crate) const WORKER_SUBCOMMAND: &str = "__worker";

/// The coordinator's handle on one worker.
#[derive(Debug)]
pub(crate) struct WorkerLink {
    /// Sends phase changes.
    pub control: mpsc::Sender<Control>,
    /// The child process, for child workers.
    pub child: Option<Child>,
}

/// Starts a worker as tasks of this process. Its messages arrive on `events` tagged with its id.
pub(crate) fn spawn_in_process(
    spec: WorkerSpec,
    events: mpsc::Sender<(usize, WorkerMsg)>,
) -> WorkerLink {
    let id = spec.worker_id;
    let (ctl_tx, ctl_rx) = mpsc::channel(16);
    let (out_tx, mut out_rx) = mpsc::channel::<WorkerMsg>(64);
    tokio::spawn(run_worker(spec, ctl_rx, out_tx, false));
    tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            if events.send((id, m)).await.is_err() {
                break;
            }
        }
    });
    WorkerLink {
        control: ctl_tx,
        child: None,
    }
}

/// Starts a worker as a child process running this same executable.
pub(crate) async fn spawn_process(
    spec: WorkerSpec,
    events: mpsc::Sender<(usize, WorkerMsg)>,
) -> anyhow::Result<WorkerLink> {
    let id = spec.worker_id;
    let exe = std::env::current_exe().context("cannot locate the loadgen executable")?;
    let mut child = Command::new(exe)
        .arg(WORKER_SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start a worker process")?;
    let mut stdin = child.stdin.take().context("worker stdin")?;
    let stdout = child.stdout.take().context("worker stdout")?;
    let mut first = serde_json::to_string(&spec)?;
    first.push('\n');
    stdin
        .write_all(first.as_bytes())
        .await
        .context("cannot send the spec to a worker")?;
    let (ctl_tx, mut ctl_rx) = mpsc::channel::<Control>(16);
    tokio::spawn(async move {
        while let Some(c) = ctl_rx.recv().await {
            let Ok(mut line) = serde_json::to_string(&c) else {
                continue;
            };
            line.push('\n');
            if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
        // dropping stdin tells the child to stop
    });
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut finished = false;
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<WorkerMsg>(&line) {
                Ok(m) => {
                    finished |= matches!(m, WorkerMsg::Final(_));
                    if events.send((id, m)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let error = format!("unreadable worker message: {e}");
                    let _ = events.send((id, WorkerMsg::Fatal { error })).await;
                }
            }
        }
        if !finished {
            let _ = events
                .send((
                    id,
                    WorkerMsg::Fatal {
                        error: "worker process exited without a final report".into(),
                    },
                ))
                .await;
        }
    });
    Ok(WorkerLink {
        control: ctl_tx,
        child: Some(child),
    })
}

/// Entry point of a child worker: spec on the first stdin line, control lines after it,
/// messages as JSON lines on stdout. Closing stdin stops the worker.
pub(crate) fn child_main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    let result = rt.block_on(async {
        // A Ctrl-C on the terminal reaches the whole process group: the coordinator decides
        // when workers stop, so the worker ignores SIGINT instead of dying with its counts.
        tokio::spawn(async { while tokio::signal::ctrl_c().await.is_ok() {} });
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        let first = lines
            .next_line()
            .await?
            .context("no worker spec on stdin")?;
        let spec: WorkerSpec = serde_json::from_str(&first).context("invalid worker spec")?;
        let (ctl_tx, ctl_rx) = mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<Control>(&line) {
                    Ok(c) => {
                        if ctl_tx.send(c).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => eprintln!("herald-loadgen worker: ignoring bad control line: {e}"),
                }
            }
        });
        let (out_tx, mut out_rx) = mpsc::channel::<WorkerMsg>(64);
        let worker = tokio::spawn(run_worker(spec, ctl_rx, out_tx, true));
        let mut stdout = tokio::io::stdout();
        while let Some(m) = out_rx.recv().await {
            let mut line = serde_json::to_string(&m)?;
            line.push('\n');
            stdout.write_all(line.as_bytes()).await?;
            stdout.flush().await?;
        }
        let _ = worker.await;
        anyhow::Ok(())
    });
    // The stdin reader may still be blocked in a read: do not wait for it.
    rt.shutdown_background();
    result
}
