//! `herald`: parse flags, validate the configuration (exit 64 on a bad one, before binding
//! anything), bind, serve, drain.

use std::process::ExitCode;

use anyhow::Context as _;
use herald_gateway::config::{Cli, LogFormat};

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
    // A misspelled variable would otherwise be ignored without a word.
    let unknown = Cli::unknown_env_vars(std::env::vars_os())
        .into_iter()
        .map(|(name, closest)| match closest {
            Some(closest) => format!("{name} is not a Herald setting (ignored); did you mean {closest}?"),
            None => format!("{name} is not a Herald setting (ignored); `herald --help` lists the HERALD_* variables"),
        });
    // A former name still works; the node says once that it is deprecated.
    let deprecated = cli.deprecated_names();
    if cli.print_config {
        unknown.for_each(|warning| eprintln!("herald: warning: {warning}"));
        (deprecated.iter()).for_each(|warning| eprintln!("herald: warning: {warning}"));
        return match cli.printed_config(&config) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("herald: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    herald_gateway::init_logging(&config);
    unknown.for_each(|warning| tracing::warn!("unknown environment variable: {warning}"));
    (deprecated.iter()).for_each(|warning| tracing::warn!("deprecated setting: {warning}"));
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
    let config_log_format = config.log_format;
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
            // Once: as a log line where logs are read by machines, else as plain text (the
            // text log line would repeat it).
            match config_log_format {
                LogFormat::Json => tracing::error!(error = format!("{e:#}"), "herald failed"),
                LogFormat::Text => eprintln!("herald: {e:#}"),
            }
            ExitCode::FAILURE
        }
    }
}
