//! `herald`: parse flags, validate the configuration (exit 64 on a bad one, before binding
//! anything), bind, serve, drain.

use std::process::ExitCode;

use anyhow::Context as _;
use herald_gateway::config::Cli;

use tokio_util::sync::CancellationToken;

/// mimalloc, not glibc's malloc: it keeps objects of one size together in pages of their
/// own, so the links a topic's fan-out walks (one per subscriber, opened one after another)
/// sit side by side instead of scattered among each connection's other allocations — fewer
/// pages per broadcast, fewer TLB misses. Measured (BENCHMARKS.md, "The allocator"): W2
/// 5.47 / 5.49 µs per delivery against 5.77 / 5.70 with glibc in one sitting. Built with
/// `no_thp`: with transparent huge pages it was a little faster still, but idle memory per
/// SSE connection wandered between 2.9 and 3.1 KB with where the huge pages fell.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `EX_USAGE` from sysexits.h: bad flags or configuration.
const EX_USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EX_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Some(command) = &cli.command {
        return herald_gateway::health_main(&cli, command);
    }
    let (config, loaded) = match cli.load().and_then(|c| c.validate().map(|l| (c, l))) {
        Ok(valid) => valid,
        Err(e) => {
            eprintln!("herald: invalid configuration: {e:#}");
            return ExitCode::from(EX_USAGE);
        }
    };
    if cli.print_config {
        print!("{}", toml::to_string(&config).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    herald_gateway::init_logging(&config);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if config.worker_threads > 0 {
        builder.worker_threads(config.worker_threads);
    }
    // Named for `top -H` and the like (the blocking pool's threads share the name).
    builder.thread_name("herald-worker");
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("herald: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let (public, admin) = herald_gateway::bind_listeners(&config)?;
        let public = tokio::net::TcpListener::from_std(public)?;
        let admin = tokio::net::TcpListener::from_std(admin)?;
        let token = CancellationToken::new();
        herald_gateway::spawn_signal_handler(token.clone())
            .context("cannot install signal handlers")?;
        herald_gateway::run_validated(public, admin, config, loaded, token).await
    });
    // Connections still open after the grace period are dropped with the runtime.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "herald failed");
            eprintln!("herald: {e:#}");
            ExitCode::FAILURE
        }
    }
}
