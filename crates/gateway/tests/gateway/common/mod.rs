//! Test helpers: a real gateway on 127.0.0.1:0, real SSE/WebSocket/HTTP clients, and
//! `eventually` instead of sleeps.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use herald_gateway::{Config, Gateway};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message as WsMessage;

pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Ends the test early, saying why, when an engine variable is not set (see [`engine`]).
#[allow(unused_macros)]
macro_rules! skip_without {
    ($($var:literal),+) => {
        // Every variable is looked at, so that the message names each one missing.
        let missing = [$($var),+]
            .into_iter()
            .filter(|var| $crate::common::engine(var).is_none())
            .count();
        if missing > 0 {
            return;
        }
    };
}

/// The engine variable `name` (a real Redis, Kafka or Jaeger that `deploy/engines.sh`
/// started), or `None` after writing on stderr which test skips for want of it. A plain
/// `cargo test` runs without the engines, so their tests pass without running there, and say
/// so; `deploy/test.sh` (the README's test command) starts them, sets the variables and
/// `HERALD_REQUIRE_ENGINES=1`, under which a missing variable fails the test instead.
pub(crate) fn engine(name: &str) -> Option<String> {
    use std::io::Write as _;
    if let Some(value) = std::env::var(name).ok().filter(|v| !v.is_empty()) {
        return Some(value);
    }
    // libtest names each test's thread after the test.
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let why = format!(
        "{name} is not set (deploy/test.sh starts the engines with deploy/engines.sh and sets it)"
    );
    assert!(
        std::env::var("HERALD_REQUIRE_ENGINES").as_deref() != Ok("1"),
        "{test}: {why}, and HERALD_REQUIRE_ENGINES=1 requires every engine test to run"
    );
    // Straight to stderr, past the test harness's capture, so a passing run shows it too.
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {why}");
    None
}

/// A config on ephemeral loopback ports.
pub(crate) fn test_config() -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    }
}

/// The Redis the cluster tests use (`deploy/test.sh` starts it and sets the variable).
pub(crate) fn test_redis_url() -> String {
    std::env::var("HERALD_TEST_REDIS_URL").expect(
        "HERALD_TEST_REDIS_URL is not set: run the suite with deploy/test.sh, which starts a real Redis",
    )
}

/// A node of a test cluster bridged by Redis under `prefix` (isolates concurrent tests).
pub(crate) fn cluster_config(prefix: &str, node: &str) -> Config {
    let mut config = test_config();
    config.cluster.redis_url = Some(test_redis_url());
    config.cluster.redis_prefix = prefix.to_string();
    config.cluster.redis_shards = 4;
    config.cluster.node_id = node.to_string();
    config
}

/// Waits until `/readyz` answers `status`.
pub(crate) async fn wait_ready(gw: &Gateway, status: u16) {
    wait_ready_at(gw.admin_addr, status).await;
}

/// Waits until `/readyz` on the admin listener at `admin` answers `status`.
pub(crate) async fn wait_ready_at(admin: std::net::SocketAddr, status: u16) {
    let url = format!("http://{admin}/readyz");
    eventually(Duration::from_secs(20), || {
        let url = url.clone();
        async move {
            http()
                .get(url)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .ok()
                == Some(status)
        }
    })
    .await;
}

/// GETs a JSON document.
pub(crate) async fn get_json(url: String) -> Value {
    get(url, &[]).await.json().await.unwrap()
}

/// The Prometheus text of `gw`.
pub(crate) async fn metrics_text(gw: &Gateway) -> String {
    get(format!("http://{}/metrics", gw.admin_addr), &[])
        .await
        .text()
        .await
        .unwrap()
}

/// The value of one `series` (`name{labels}` as Prometheus prints it) in `gw`'s `/metrics`,
/// 0 when absent. Each gateway under test has its own recorder, so this counts `gw`'s own.
pub(crate) async fn metric(gw: &Gateway, series: &str) -> f64 {
    let text = metrics_text(gw).await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Subscribers of `topic` on `gw`, from the admin API.
pub(crate) async fn topic_subscribers(gw: &Gateway, topic: &str) -> u64 {
    let stats = get_json(format!("http://{}/v1/topics/{topic}", gw.admin_addr)).await;
    stats["subscribers"].as_u64().unwrap()
}

pub(crate) async fn spawn_gateway(config: Config) -> Gateway {
    Gateway::start(config).await.expect("gateway starts")
}

/// A gateway that has said it is ready (`/readyz` 200): its engines are connected.
pub(crate) async fn spawn_ready(config: Config) -> Gateway {
    let gw = spawn_gateway(config).await;
    wait_ready(&gw, 200).await;
    gw
}

/// Polls `condition` until it holds or `timeout` passes.
pub(crate) async fn eventually<F, Fut>(timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_some(timeout, "condition", || {
        let met = condition();
        async move { met.await.then_some(()) }
    })
    .await
}

/// Polls `found` until it gives a value or `timeout` passes (then fails, saying `what` was
/// not found).
pub(crate) async fn eventually_some<T, F, Fut>(timeout: Duration, what: &str, mut found: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = found().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} not met within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn http() -> reqwest::Client {
    http_builder().pool_max_idle_per_host(0).build().unwrap()
}

/// A builder for a test's HTTP client. reqwest is built with rustls and no crypto provider of
/// its own (the gateway's hooks pass theirs, ring): a client built here gets ring, installed
/// once as the process's default.
pub(crate) fn http_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// A GET with the given headers, sent by a fresh client; the response whatever its status.
pub(crate) async fn get(url: impl reqwest::IntoUrl, headers: &[(&str, &str)]) -> reqwest::Response {
    send(http().get(url), headers).await
}

/// A POST of `body` as JSON with the given headers; the response whatever its status.
pub(crate) async fn post_json(
    url: impl reqwest::IntoUrl,
    headers: &[(&str, &str)],
    body: &Value,
) -> reqwest::Response {
    send(http().post(url).json(body), headers).await
}

async fn send(mut request: reqwest::RequestBuilder, headers: &[(&str, &str)]) -> reqwest::Response {
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Publishes through the admin API; returns the message id.
pub(crate) async fn publish(gw: &Gateway, topic: &str, data: Value) -> String {
    publish_event(gw, topic, data, None).await
}

pub(crate) async fn publish_event(
    gw: &Gateway,
    topic: &str,
    data: Value,
    event: Option<&str>,
) -> String {
    let mut body = json!({ "topic": topic, "data": data });
    if let Some(e) = event {
        body["event"] = json!(e);
    }
    let resp = post_json(format!("http://{}/v1/publish", gw.admin_addr), &[], &body).await;
    assert_eq!(
        resp.status(),
        200,
        "publish answered {}",
        resp.text().await.unwrap()
    );
    let reply: Value = resp.json().await.unwrap();
    reply["id"].as_str().unwrap().to_string()
}

/// One SSE event as a client sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Option<String>,
    pub retry: Option<u64>,
}

/// A response body as a stream of chunks, whatever the HTTP client.
pub(crate) type BodyStream = std::pin::Pin<
    Box<
        dyn futures_util::Stream<
                Item = Result<bytes::Bytes, Box<dyn std::error::Error + Send + Sync>>,
            > + Send,
    >,
>;

/// A minimal, spec-following SSE client over a real HTTP connection.
pub(crate) struct SseClient {
    stream: BodyStream,
    buf: String,
    pub headers: reqwest::header::HeaderMap,
    pub last_event_id: Option<String>,
}

impl SseClient {
    pub(crate) async fn connect(gw: &Gateway, query: &str, last_event_id: Option<&str>) -> Self {
        let resp = Self::request(gw, query, last_event_id).await;
        assert_eq!(resp.status(), 200);
        Self::from_response(resp)
    }

    /// A client reading an opened (200) response.
    pub(crate) fn from_response(resp: reqwest::Response) -> Self {
        Self {
            headers: resp.headers().clone(),
            stream: Box::pin(resp.bytes_stream().map(|c| c.map_err(Into::into))),
            buf: String::new(),
            last_event_id: None,
        }
    }

    /// A client reading an already opened response body.
    pub(crate) fn from_body(stream: BodyStream) -> Self {
        Self {
            stream,
            buf: String::new(),
            headers: Default::default(),
            last_event_id: None,
        }
    }

    pub(crate) async fn request(
        gw: &Gateway,
        query: &str,
        last_event_id: Option<&str>,
    ) -> reqwest::Response {
        let mut req = http().get(format!("http://{}/v1/sse?{query}", gw.public_addr));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        req.send().await.unwrap()
    }

    /// The next block (including data-less ones such as the opening `retry:`/`id:`), or
    /// `None` when the stream ends.
    pub(crate) async fn next_block(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut event = SseEvent::default();
                let mut data: Vec<&str> = Vec::new();
                let mut comment_only = true;
                for line in block.lines() {
                    if line.starts_with(':') || line.is_empty() {
                        continue;
                    }
                    comment_only = false;
                    let (field, value) = line
                        .split_once(':')
                        .map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
                    match field {
                        "id" => event.id = Some(value.to_string()),
                        "event" => event.event = Some(value.to_string()),
                        "data" => data.push(value),
                        "retry" => event.retry = value.parse().ok(),
                        _ => {}
                    }
                }
                if comment_only {
                    continue;
                }
                if !data.is_empty() {
                    event.data = Some(data.join("\n"));
                }
                if let Some(id) = &event.id {
                    self.last_event_id = Some(id.clone());
                }
                return Some(event);
            }
            match tokio::time::timeout(WAIT, self.stream.next())
                .await
                .expect("SSE stream stalled")
            {
                Some(Ok(chunk)) => self.buf.push_str(std::str::from_utf8(&chunk).unwrap()),
                _ => return None,
            }
        }
    }

    /// The next event that carries data (what `EventSource` would dispatch). Heartbeats
    /// keep a stream from stalling, so the wait for data has a bound of its own: a test fails
    /// instead of hanging on a stream that only pings.
    pub(crate) async fn next_event(&mut self) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + 6 * WAIT;
        loop {
            let block = tokio::time::timeout_at(deadline, self.next_block())
                .await
                .expect("no SSE event with data in time (only heartbeats)")?;
            if block.data.is_some() {
                return Some(block);
            }
        }
    }

    /// Raw bytes until the stream ends (or `limit` passes).
    pub(crate) async fn rest(&mut self, limit: Duration) -> String {
        let mut out = std::mem::take(&mut self.buf);
        let _ = tokio::time::timeout(limit, async {
            while let Some(Ok(chunk)) = self.stream.next().await {
                out.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await;
        out
    }
}

pub(crate) type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) async fn ws_connect(gw: &Gateway) -> WsStream {
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws", gw.public_addr))
        .await
        .expect("websocket connects");
    ws
}

pub(crate) async fn ws_send(ws: &mut WsStream, frame: Value) {
    ws.send(WsMessage::Text(frame.to_string().into()))
        .await
        .unwrap();
}

/// The next data frame (control frames skipped), on any stream (plain or TLS).
pub(crate) async fn ws_next_frame<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> WsMessage
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("websocket stalled")
            .expect("websocket ended")
            .expect("websocket error");
        match msg {
            WsMessage::Ping(_) | WsMessage::Pong(_) => continue,
            other => return other,
        }
    }
}

/// The next text frame's text, exactly as sent (control frames skipped).
pub(crate) async fn ws_next_text(ws: &mut WsStream) -> String {
    match ws_next_frame(ws).await {
        WsMessage::Text(t) => t.to_string(),
        other => panic!("unexpected frame {other:?}"),
    }
}

/// The next JSON text frame (control frames skipped).
pub(crate) async fn ws_next(ws: &mut WsStream) -> Value {
    serde_json::from_str(&ws_next_text(ws).await).unwrap()
}

/// The close frame's code and reason, reading past anything else.
pub(crate) async fn ws_close_code(ws: &mut WsStream) -> (u16, String) {
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("websocket stalled")
        {
            Some(Ok(WsMessage::Close(Some(frame)))) => {
                return (frame.code.into(), frame.reason.to_string());
            }
            Some(Ok(WsMessage::Close(None))) | None => return (1005, String::new()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("websocket error before close: {e}"),
        }
    }
}

/// `POST /v1/publish/batch` of `messages` (each `{"topic":..,"data":..}`) on the admin
/// listener; it must answer 200.
pub(crate) async fn publish_batch(gw: &Gateway, messages: Vec<Value>) {
    let resp = http()
        .post(format!("http://{}/v1/publish/batch", gw.admin_addr))
        .header("content-type", "application/json")
        .body(json!({ "messages": messages }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

pub(crate) async fn ws_subscribe(ws: &mut WsStream, topics: &[&str]) -> Value {
    ws_send(ws, json!({ "type": "subscribe", "topics": topics })).await;
    let reply = ws_next(ws).await;
    assert_eq!(reply["type"], "subscribed", "{reply}");
    reply
}

/// A WebSocket spoken by hand, to send what well-behaved client libraries never would.
pub(crate) async fn raw_ws(gw: &herald_gateway::Gateway) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut raw = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    raw.write_all(b"GET /v1/ws HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        raw.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    raw
}

pub(crate) async fn send_frame(
    raw: &mut tokio::net::TcpStream,
    fin: bool,
    opcode: u8,
    payload: &[u8],
) {
    use tokio::io::AsyncWriteExt as _;
    let mut frame = frame_header(fin, opcode, payload.len() as u64);
    frame.extend_from_slice(payload);
    raw.write_all(&frame).await.unwrap();
}

/// A client frame header claiming a payload of `len` bytes, masked with zeros so the payload
/// goes as is; tungstenite's codec writes it.
pub(crate) fn frame_header(fin: bool, opcode: u8, len: u64) -> Vec<u8> {
    use tokio_tungstenite::tungstenite::protocol::frame::{FrameHeader, coding::OpCode};
    let header = FrameHeader {
        is_final: fin,
        opcode: OpCode::from(opcode),
        mask: Some([0; 4]),
        ..FrameHeader::default()
    };
    let mut out = Vec::with_capacity(14);
    header.format(len, &mut out).unwrap();
    out
}

/// Reads one unfragmented server frame: (opcode, payload).
pub(crate) async fn read_frame(raw: &mut tokio::net::TcpStream) -> (u8, Vec<u8>) {
    use tokio::io::AsyncReadExt as _;
    let mut h = [0u8; 2];
    tokio::time::timeout(WAIT, raw.read_exact(&mut h))
        .await
        .unwrap()
        .unwrap();
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            raw.read_exact(&mut l).await.unwrap();
            u16::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    raw.read_exact(&mut payload).await.unwrap();
    (h[0] & 0x0f, payload)
}

/// The token secret of [`token_config`].
pub(crate) const SECRET: &str = "0123456789abcdef0123456789abcdef-test-secret";

/// A token with `claims`, signed with [`SECRET`].
pub(crate) fn token(claims: Value) -> String {
    hs256_token(SECRET, &claims)
}

/// A gateway that checks tokens signed with [`SECRET`], with `public.` topics open to all.
pub(crate) fn token_config() -> Config {
    let mut config = test_config();
    config.auth.hs256_secret = Some(SECRET.into());
    config.auth.public_prefixes = vec!["public.".into()];
    config
}

/// A JWT signed with HS256 by `secret`.
pub(crate) fn hs256_token(secret: &str, claims: &Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Asserts that `frame` is a WebSocket `error` frame `forbidden` whose reason says `why`.
pub(crate) fn assert_forbidden(frame: &Value, why: &str) {
    assert_eq!(
        (frame["type"].as_str(), frame["code"].as_str()),
        (Some("error"), Some("forbidden")),
        "{frame}"
    );
    assert!(
        frame["reason"].as_str().is_some_and(|r| r.contains(why)),
        "{frame}"
    );
}
