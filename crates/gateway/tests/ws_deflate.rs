//! Node's `ws` client negotiating permessage-deflate with a real gateway, over plain TCP and
//! TLS: the negotiation variants, a large compressible payload both ways, a client without
//! the extension, and a decompression bomb (tests/browser/deflate.mjs).
//!
//! Needs Node and the npm packages of `tests/browser` (`npm ci` there); `deploy/test.sh`
//! installs them. `HERALD_SKIP_BROWSER=1` skips it with the browser tests; otherwise missing
//! packages are a failure, not a silent pass.

#[path = "support/browser.rs"]
#[allow(dead_code)] // `browser_dir`: no Chromium here
mod browser_support;

use std::path::Path;

use herald_gateway::{Config, Gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ws_negotiates_permessage_deflate() {
    if browser_support::skip() {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        dir.join("node_modules/ws").exists(),
        "run `npm ci` in {} (deploy/test.sh does) or set HERALD_SKIP_BROWSER=1",
        dir.display()
    );
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        dev: true, // publish over the WebSocket
        ..Config::default()
    };
    config.ws.max_message_size = 1 << 20;
    config.limits.max_payload_bytes = 1 << 20;
    let plain = Gateway::start(config.clone()).await.unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    config.tls.cert_file = Some(fixtures.join("server-a.pem"));
    config.tls.key_file = Some(fixtures.join("server-a.key"));
    let tls = Gateway::start(config).await.unwrap();
    let args = [
        format!("ws://{}", plain.public_addr),
        format!("http://{}", plain.admin_addr),
        format!("wss://localhost:{}", tls.public_addr.port()),
        format!("http://{}", tls.admin_addr),
    ];
    let stdout = tokio::task::spawn_blocking(move || {
        browser_support::run_node(&dir, "deflate.mjs", &args, &[])
    })
    .await
    .unwrap();
    assert!(
        stdout.ends_with("ok\n"),
        "node ws test did not finish:\n{stdout}"
    );
    plain.stop().await.unwrap();
    tls.stop().await.unwrap();
}
