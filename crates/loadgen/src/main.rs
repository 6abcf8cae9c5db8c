//! herald-loadgen: load, soak and benchmark tool for push servers.
//!
//! See the crate README for the subcommands, the report fields and the multi-process design.

mod chaos;
mod cli;
mod clock;
mod conn;
mod error;
mod floor;
mod histogram;
mod hostile;
mod payload;
mod procstat;
mod proto;
mod publish;
mod rate;
mod report;
mod run;
mod seq;
mod source_ip;
mod spec;
mod stats;
mod target;
mod worker;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::run::plan::{PlanError, RunPlan};

/// Exit status for a bad command line (EX_USAGE).
const EXIT_USAGE: u8 = 64;
/// Exit status when `--strict` finds problems.
const EXIT_PROBLEMS: u8 = 3;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn finish(
    report: &report::model::Report,
    json: Option<&std::path::Path>,
    html: Option<&std::path::Path>,
    strict: bool,
) -> ExitCode {
    print!("{}", report::text::render(report));
    if let Err(e) = report::write_files(report, json, html) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    if strict && !report.verdict.ok {
        ExitCode::from(EXIT_PROBLEMS)
    } else {
        ExitCode::SUCCESS
    }
}

fn run_plan(plan: Result<RunPlan, PlanError>, nofile: u64) -> ExitCode {
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let outputs = plan.outputs.clone();
    let args = std::env::args().collect();
    let result = runtime().and_then(|rt| rt.block_on(run::coordinator::run(plan, args, nofile)));
    match result {
        Ok(report) => finish(
            &report,
            outputs.json.as_deref(),
            outputs.html.as_deref(),
            outputs.strict,
        ),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let nofile = procstat::raise_nofile_limit();
    match cli.command {
        Command::Worker => match worker::link::child_main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("herald-loadgen worker: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Chaos(a) => chaos::main(*a),
        Command::Sse(a) => run_plan(run::plan::sse_plan(&a), nofile),
        Command::Ws(a) => run_plan(run::plan::ws_plan(&a), nofile),
        Command::Echo(a) => run_plan(run::plan::echo_plan(&a), nofile),
        Command::Churn(a) => run_plan(run::plan::churn_plan(&a), nofile),
        Command::Hostile(a) => run_plan(run::plan::hostile_plan(&a), nofile),
        Command::Publish(a) => {
            let cfg = match run::publish_cmd::config(&a) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            let args = std::env::args().collect();
            match runtime() {
                Ok(rt) => {
                    let report = rt.block_on(run::publish_cmd::run(&a, cfg, args, nofile));
                    finish(
                        &report,
                        a.report.json.as_deref(),
                        a.report.html.as_deref(),
                        a.strict,
                    )
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Floor(a) => match floor::measure(a.conns, a.duration, a.size) {
            Ok(r) => {
                println!(
                    "floor: {} writes of {} bytes over {} loopback sockets in {:.1}s ({:.0}/s)\n  writer thread  {:.3} cpu-µs per write  (use --floor-us {:.3})\n  whole process  {:.3} cpu-µs per write (writer + readers)",
                    r.writes,
                    r.size,
                    r.conns,
                    r.seconds,
                    r.writes_per_sec,
                    r.writer_cpu_us_per_write,
                    r.writer_cpu_us_per_write,
                    r.process_cpu_us_per_write
                );
                if let Some(p) = a.json {
                    let written = serde_json::to_string_pretty(&r)
                        .map_err(anyhow::Error::from)
                        .and_then(|s| std::fs::write(&p, s).map_err(anyhow::Error::from));
                    if let Err(e) = written {
                        eprintln!("error: cannot write {}: {e}", p.display());
                        return ExitCode::FAILURE;
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(EXIT_USAGE)
            }
        },
    }
}
