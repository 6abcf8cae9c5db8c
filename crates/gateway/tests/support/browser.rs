//! What the browser tests share: whether to skip them, where their Node packages and
//! Chromium are (with a clear failure when they are missing), and how a Node script runs.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `HERALD_SKIP_BROWSER=1` asks to skip the browser tests (said on stderr).
pub(crate) fn skip() -> bool {
    let skip = std::env::var("HERALD_SKIP_BROWSER").as_deref() == Ok("1");
    if skip {
        eprintln!("HERALD_SKIP_BROWSER=1: browser test skipped");
    }
    skip
}

/// The browser tests' directory, once Chromium and playwright-core are known to be there.
pub(crate) fn browser_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = std::env::var("HERALD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: run deploy/test.sh (installs Debian's chromium) or set HERALD_SKIP_BROWSER=1"
    );
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "run `npm ci` in {} (deploy/test.sh does) or set HERALD_SKIP_BROWSER=1",
        dir.display()
    );
    dir
}

/// Runs `node <script> <args>` in `dir` with `env`, and returns what it printed; fails with
/// its output unless it exits 0.
pub(crate) fn run_node(
    dir: &Path,
    script: &str,
    args: &[String],
    env: &[(&str, &OsStr)],
) -> String {
    let mut command = Command::new("node");
    command.arg(script).args(args).current_dir(dir);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    println!("{stdout}");
    stdout
}
