//! A tiny in-test server speaking the subset of Herald's protocol the loadgen uses:
//! `GET /v1/sse`, `GET /v1/ws`, `POST /v1/publish`, `GET /healthz` (admin), plus a generic
//! WebSocket echo at `/echo`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::{get, post};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

/// One published message.
#[derive(Clone, Debug)]
pub(crate) struct Msg {
    topic: String,
    id: u64,
    event: Option<String>,
    data: Value,
}

/// Server state.
#[derive(Clone, Default)]
pub(crate) struct Hub {
    topics: Arc<Mutex<HashMap<String, broadcast::Sender<Msg>>>>,
    next_id: Arc<AtomicU64>,
    /// Publish requests answered.
    pub published: Arc<AtomicU64>,
    /// Fault injection for SSE streams: (drop every Nth message, duplicate every Mth).
    pub faults: Option<(u64, u64)>,
}

impl Hub {
    fn sender(&self, topic: &str) -> broadcast::Sender<Msg> {
        let mut t = self.topics.lock().unwrap();
        t.entry(topic.to_owned())
            .or_insert_with(|| broadcast::channel(65_536).0)
            .clone()
    }

    /// Subscribes to `topics`, forwarding into one channel per connection.
    fn subscribe(&self, topics: &[String], tx: mpsc::Sender<Msg>) {
        for t in topics {
            let mut rx = self.sender(t).subscribe();
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(m) => {
                            if tx.send(m).await.is_err() {
                                break;
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => break,
                    }
                }
            });
        }
    }
}

fn topics_of(query: Option<String>) -> Vec<String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.strip_prefix("topic="))
        .map(|t| t.replace("%3A", ":"))
        .collect()
}

fn data_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

async fn sse(State(hub): State<Hub>, RawQuery(q): RawQuery) -> impl IntoResponse {
    let topics = topics_of(q);
    if topics.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"code":"no_topic","reason":"no topic"})),
        )
            .into_response();
    }
    let (tx, rx) = mpsc::channel::<Msg>(65_536);
    hub.subscribe(&topics, tx);
    let preamble = futures_util::stream::once(async {
        Ok::<_, Infallible>(Event::default().retry(Duration::from_millis(3000)).id("0"))
    });
    let faults = hub.faults;
    let messages = futures_util::stream::unfold(rx, move |mut rx| async move {
        let mut m = rx.recv().await?;
        let mut copies = 1;
        if let Some((drop_every, dup_every)) = faults {
            while m.id % drop_every == 0 {
                m = rx.recv().await?;
            }
            if m.id % dup_every == 0 {
                copies = 2;
            }
        }
        let mut ev = Event::default()
            .id(format!("{}={}", m.topic, m.id))
            .data(data_text(&m.data));
        if let Some(e) = &m.event {
            ev = ev.event(e.clone());
        }
        let evs: Vec<Result<Event, Infallible>> = (0..copies).map(|_| Ok(ev.clone())).collect();
        Some((futures_util::stream::iter(evs), rx))
    })
    .flatten();
    Sse::new(preamble.chain(messages))
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("ping"),
        )
        .into_response()
}

async fn ws(State(hub): State<Hub>, up: WebSocketUpgrade) -> impl IntoResponse {
    up.on_upgrade(move |socket| ws_session(hub, socket))
}

async fn ws_session(hub: Hub, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Msg>(65_536);
    let (out_tx, mut out_rx) = mpsc::channel::<String>(1024);
    let writer = tokio::spawn(async move {
        loop {
            let text = tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => {
                        let mut v = json!({"type":"message","topic":m.topic,"id":m.id.to_string(),"data":m.data});
                        if let Some(e) = m.event { v["event"] = json!(e); }
                        v.to_string()
                    }
                    None => break,
                },
                t = out_rx.recv() => match t { Some(t) => t, None => break },
            };
            if sink.send(Message::Text(text.into())).await.is_err() {
                break;
            }
        }
    });
    while let Some(Ok(msg)) = stream.next().await {
        let Message::Text(t) = msg else { continue };
        let Ok(v) = serde_json::from_str::<Value>(&t) else {
            let _ = out_tx
                .send(json!({"type":"error","code":"bad_json","reason":"x"}).to_string())
                .await;
            continue;
        };
        match v["type"].as_str() {
            Some("subscribe") => {
                let topics: Vec<String> = v["topics"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|t| t.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                hub.subscribe(&topics, tx.clone());
                let _ = out_tx
                    .send(json!({"type":"subscribed","topics":topics,"cursors":{}}).to_string())
                    .await;
            }
            Some("ping") => {
                let reply = match v.get("data") {
                    Some(d) => json!({"type":"pong","data":d}),
                    None => json!({"type":"pong"}),
                };
                let _ = out_tx.send(reply.to_string()).await;
            }
            _ => {
                let _ = out_tx
                    .send(json!({"type":"error","code":"bad_frame","reason":"x"}).to_string())
                    .await;
            }
        }
    }
    writer.abort();
}

async fn echo(up: WebSocketUpgrade) -> impl IntoResponse {
    up.on_upgrade(|mut socket| async move {
        while let Some(Ok(msg)) = socket.next().await {
            let reply = match msg {
                Message::Text(t) => Message::Text(t),
                Message::Binary(b) => Message::Binary(b),
                Message::Close(_) => break,
                _ => continue,
            };
            if socket.send(reply).await.is_err() {
                break;
            }
        }
    })
}

async fn publish(State(hub): State<Hub>, Json(body): Json<Value>) -> impl IntoResponse {
    let Some(topic) = body["topic"].as_str().map(str::to_owned) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"code":"bad_topic"})));
    };
    let id = hub.next_id.fetch_add(1, Ordering::Relaxed) + 1;
    let msg = Msg {
        topic: topic.clone(),
        id,
        event: body["event"].as_str().map(str::to_owned),
        data: body["data"].clone(),
    };
    let _ = hub.sender(&topic).send(msg);
    hub.published.fetch_add(1, Ordering::Relaxed);
    (
        StatusCode::OK,
        Json(json!({"id": id.to_string(), "topic": topic})),
    )
}

/// A running test server.
pub(crate) struct TestServer {
    /// Public address (SSE, WebSocket, echo).
    pub addr: SocketAddr,
    /// Admin address (publish).
    pub admin: SocketAddr,
    /// State.
    pub hub: Hub,
}

/// Starts the server on 127.0.0.1:0 (public and admin listeners) in a background runtime.
pub(crate) fn spawn_server() -> TestServer {
    spawn_server_with(Hub::default())
}

/// A server whose SSE streams drop every `drop_every`th and duplicate every `dup_every`th message.
pub(crate) fn spawn_faulty_server(drop_every: u64, dup_every: u64) -> TestServer {
    spawn_server_with(Hub {
        faults: Some((drop_every, dup_every)),
        ..Hub::default()
    })
}

fn spawn_server_with(hub: Hub) -> TestServer {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = hub.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let public = Router::new()
                .route("/v1/sse", get(sse))
                .route("/v1/ws", get(ws))
                .route("/echo", get(echo))
                .with_state(h.clone());
            let admin = Router::new()
                .route("/v1/publish", post(publish))
                .route("/healthz", get(|| async { "ok" }))
                .with_state(h);
            let l1 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let l2 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send((l1.local_addr().unwrap(), l2.local_addr().unwrap()))
                .unwrap();
            let a = tokio::spawn(async move { axum::serve(l1, public).await });
            let b = tokio::spawn(async move { axum::serve(l2, admin).await });
            let _ = tokio::join!(a, b);
        });
    });
    let (addr, admin) = rx.recv().unwrap();
    TestServer { addr, admin, hub }
}

/// A temporary file path unique to this test process.
pub(crate) fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("herald-loadgen-test-{}-{name}", std::process::id()))
}

/// Runs the loadgen binary with `args`, bounded in time. Its output is read while it runs, so
/// that a full pipe never blocks it.
pub(crate) fn run_loadgen(args: &[String]) -> Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_herald-loadgen"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start herald-loadgen");
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = pipe.read_to_end(&mut all);
            all
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("herald-loadgen did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Runs the loadgen and parses its JSON report.
pub(crate) fn run_report(args: &[String], name: &str) -> (Value, Output) {
    let path = temp_path(&format!("{name}.json"));
    let mut all = args.to_vec();
    all.push("--json".into());
    all.push(path.display().to_string());
    let out = run_loadgen(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "loadgen failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no report ({e})\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    let _ = std::fs::remove_file(&path);
    (serde_json::from_str(&text).unwrap(), out)
}

/// Strings from &str.
pub(crate) fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A command line: `line` split at white space, then `paths` as they are.
pub(crate) fn cmd(line: &str, paths: &[&Path]) -> Vec<String> {
    line.split_whitespace()
        .map(str::to_owned)
        .chain(paths.iter().map(|p| p.display().to_string()))
        .collect()
}

impl TestServer {
    /// [`cmd`] with `{addr}`, `{admin}` (this server's addresses) and `{pid}` (this process)
    /// filled in.
    pub(crate) fn cmd(&self, line: &str, paths: &[&Path]) -> Vec<String> {
        let line = line
            .replace("{addr}", &self.addr.to_string())
            .replace("{admin}", &self.admin.to_string())
            .replace("{pid}", &std::process::id().to_string());
        cmd(&line, paths)
    }
}
