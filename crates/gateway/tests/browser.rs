//! Headless Chromium against a real gateway: the demo page as a person uses it (connected as
//! it opens, moved to another topic, Disconnect and Connect), the native
//! WebSocket with permessage-deflate, the browser's native `EventSource` reconnecting and
//! resuming by itself, and `EventSource` over HTTP/2 with TLS.
//!
//! Needs Debian's `chromium` and the npm packages of `tests/browser` (`npm ci` there);
//! `deploy/test.sh` installs both. Set `HERALD_SKIP_BROWSER=1` to skip on a machine without
//! them; otherwise a missing browser is a failure, not a silent pass.

#[path = "support/browser.rs"]
mod browser_support;

use std::path::Path;
use std::time::Duration;

use herald_gateway::{Config, Gateway};

const USER_SECRET: &str = "browser-test-secret-0123456789abcdef";

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
    // The page's own topics are open to all (`demo`, which the demo page connects to as it
    // opens, and `demo-page`, by prefix); `browser-user`'s token is checked.
    config.auth.hs256_secret = Some(USER_SECRET.into());
    config.auth.public_prefixes = vec!["demo".into(), "browser".into()];
    let user_token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({"sub": "browser-user", "topics": ["private-room"], "exp": 4_000_000_000u64}),
        &jsonwebtoken::EncodingKey::from_secret(USER_SECRET.as_bytes()),
    )
    .unwrap();
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
    let args = [public, admin, tls_public, tls_admin];
    tokio::task::spawn_blocking(move || {
        let token: &std::ffi::OsStr = user_token.as_ref();
        browser_support::run_node(&dir, "browser.mjs", &args, &[("HERALD_USER_TOKEN", token)])
    })
    .await
    .unwrap();
    gw.stop().await.unwrap();
    secure.stop().await.unwrap();
}
