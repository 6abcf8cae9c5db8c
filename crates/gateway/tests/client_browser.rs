//! Headless Chromium against real `herald` processes, driven by node and playwright-core:
//!
//! - heraldpush (clients/js), built: transport fallback through a test proxy and back, a
//!   drain and restart, a node killed in a 3-node Redis cluster, SSE from another origin with
//!   credentials (`tests/browser/client.mjs` says what is checked);
//! - the admin console as an operator uses it (`tests/browser/console.mjs`).
//!
//! Needs Debian's `chromium`, the npm packages of `tests/browser`, the built client
//! (`npm ci && npm run build` in clients/js), and a Redis (`HERALD_TEST_REDIS_URL`);
//! `deploy/test.sh` provides all of them. Set `HERALD_SKIP_BROWSER=1` to skip on a machine
//! without a browser; otherwise anything missing is a failure, not a silent pass.

#[path = "support/browser.rs"]
mod browser_support;

use browser_support::{browser_dir, run_node, skip};
use std::path::Path;
use std::sync::Mutex;

/// One browser and its herald processes at a time: the machine may have two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn redis_url() -> String {
    std::env::var("HERALD_TEST_REDIS_URL").expect(
        "HERALD_TEST_REDIS_URL is not set: run the suite with deploy/test.sh, which starts a real Redis",
    )
}

/// Runs `node <script>` in tests/browser with `env`; fails with its output unless it passes.
fn run(script: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bin: &std::ffi::OsStr = env!("CARGO_BIN_EXE_herald").as_ref();
    let env: Vec<(&str, &std::ffi::OsStr)> = [("HERALD_BIN", bin)]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    run_node(&browser_dir(), script, &[], &env);
}

#[test]
fn client_resumes_exactly_across_fallbacks_drains_and_node_loss() {
    if skip() {
        return;
    }
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/js/dist");
    assert!(
        dist.join("herald.js").exists(),
        "the client is not built: run `npm ci && npm run build` in clients/js (deploy/test.sh does)"
    );
    let redis = redis_url();
    run(
        "client.mjs",
        &[
            ("HERALD_CLIENT_DIST", dist.as_os_str()),
            ("HERALD_TEST_REDIS_URL", redis.as_ref()),
        ],
    );
}

#[test]
fn admin_console_shows_nodes_connections_and_a_published_message() {
    if skip() {
        return;
    }
    let redis = redis_url();
    run("console.mjs", &[("HERALD_TEST_REDIS_URL", redis.as_ref())]);
}
