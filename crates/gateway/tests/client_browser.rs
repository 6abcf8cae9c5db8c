//! herald-client (clients/js), built, in headless Chromium against real `herald` processes:
//! transport fallback through a test proxy and back, a drain and restart, a node killed in a
//! 3-node Redis cluster, SSE from another origin with credentials (`tests/browser/client.mjs`
//! says what is checked).
//!
//! Needs Debian's `chromium`, the npm packages of `tests/browser` and the built client
//! (`npm ci && npm run build` in clients/js), and a Redis (`HERALD_TEST_REDIS_URL`);
//! `deploy/test.sh` provides all of them. Set `HERALD_SKIP_BROWSER=1` to skip on a machine
//! without a browser; otherwise anything missing is a failure, not a silent pass.

use std::path::Path;
use std::process::Command;

#[test]
fn client_resumes_exactly_across_fallbacks_drains_and_node_loss() {
    if std::env::var("HERALD_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!("HERALD_SKIP_BROWSER=1: browser test skipped");
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest.join("tests/browser");
    let dist = manifest.join("../../clients/js/dist");
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
    assert!(
        dist.join("herald.js").exists(),
        "the client is not built: run `npm ci && npm run build` in clients/js (deploy/test.sh does)"
    );
    let redis = std::env::var("HERALD_TEST_REDIS_URL").expect(
        "HERALD_TEST_REDIS_URL is not set: run the suite with deploy/test.sh, which starts a real Redis",
    );
    let out = Command::new("node")
        .arg("client.mjs")
        .current_dir(&dir)
        .env("HERALD_BIN", env!("CARGO_BIN_EXE_herald"))
        .env("HERALD_CLIENT_DIST", &dist)
        .env("HERALD_TEST_REDIS_URL", redis)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "client browser test failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}");
}
