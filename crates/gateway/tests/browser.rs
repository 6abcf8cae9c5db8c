//! Headless Chromium against a real gateway: the demo page as a person uses it, and the
//! browser's native `EventSource` reconnecting and resuming by itself, and `EventSource` over
//! HTTP/2 with TLS.
//!
//! Needs Debian's `chromium` and the npm packages of `tests/browser` (`npm ci` there);
//! `deploy/test.sh` installs both. Set `HERALD_SKIP_BROWSER=1` to skip on a machine without
//! them; otherwise a missing browser is a failure, not a silent pass.

#[path = "support/browser.rs"]
mod browser_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use herald_gateway::{Config, Gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_page_and_native_eventsource_reconnect() {
    if browser_support::skip() {
        return;
    }
    let dir = browser_support::browser_dir();

    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    config.sse.max_lifetime = Duration::from_secs(3);
    config.sse.retry = Duration::from_millis(1500);
    let gw = Gateway::start(config.clone()).await.unwrap();
    let public = format!("http://{}", gw.public_addr);
    let admin = format!("http://{}", gw.admin_addr);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    config.tls.cert_file = Some(fixtures.join("server-a.pem"));
    config.tls.key_file = Some(fixtures.join("server-a.key"));
    let secure = Gateway::start(config).await.unwrap();
    let tls_public = format!("https://localhost:{}", secure.public_addr.port());
    let tls_admin = format!("http://{}", secure.admin_addr);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("browser.mjs")
            .arg(public)
            .arg(admin)
            .arg(tls_public)
            .arg(tls_admin)
            .current_dir(dir)
            .output()
            .expect("node runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "browser test failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}");
    gw.stop().await.unwrap();
    secure.stop().await.unwrap();
}
