//! HTTP hooks against a real backend: a small axum server on 127.0.0.1:0 inside each test
//! answers the gateway's hook requests, and real SSE, WebSocket, long-poll and HTTP clients
//! see the decisions.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use bytes::Bytes;
use herald_gateway::config::OnUnavailable;
use herald_gateway::{Config, Gateway};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::common::*;

/// What the backend answers.
pub(crate) enum Reply {
    /// 200 with this JSON.
    Json(Value),
    /// This status, an empty body.
    Status(u16),
    /// 200 with this raw body.
    Raw(String),
    /// Waits, then answers 200 with this JSON.
    Slow(Duration, Value),
    /// Holds the request until the crowd has gathered, then answers 200 with this JSON.
    Together(Arc<Crowd>, Value),
}

/// Requests held until `size` have arrived (at most 10 s), so that only requests made at the
/// same time are answered soon; counts the most held at once.
pub(crate) struct Crowd {
    size: usize,
    arrived: tokio::sync::watch::Sender<usize>,
    held: std::sync::atomic::AtomicUsize,
    most_held: std::sync::atomic::AtomicUsize,
}

impl Crowd {
    fn new(size: usize) -> Arc<Self> {
        Arc::new(Self {
            size,
            arrived: tokio::sync::watch::Sender::new(0),
            held: Default::default(),
            most_held: Default::default(),
        })
    }

    async fn join(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let held = self.held.fetch_add(1, SeqCst) + 1;
        self.most_held.fetch_max(held, SeqCst);
        self.arrived.send_modify(|n| *n += 1);
        let mut arrived = self.arrived.subscribe();
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            arrived.wait_for(|n| *n >= self.size),
        )
        .await;
        self.held.fetch_sub(1, SeqCst);
    }
}

type Decide = dyn Fn(&str, &Value) -> Reply + Send + Sync;

/// The requests a backend received: hook name, JSON body, headers.
type Calls = Arc<Mutex<Vec<(String, Value, HeaderMap)>>>;

/// A backend the test programs: every request (hook name, JSON body, headers) is recorded.
pub(crate) struct Backend {
    url: String,
    calls: Calls,
}

#[derive(Clone)]
struct BackendState {
    decide: Arc<Decide>,
    calls: Calls,
}

async fn hook(
    State(state): State<BackendState>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let body: Value = serde_json::from_slice(&body).expect("the gateway sends JSON");
    state
        .calls
        .lock()
        .unwrap()
        .push((name.clone(), body.clone(), headers));
    match (state.decide)(&name, &body) {
        Reply::Json(v) => axum::Json(v).into_response(),
        Reply::Status(s) => axum::http::StatusCode::from_u16(s).unwrap().into_response(),
        Reply::Raw(s) => s.into_response(),
        Reply::Slow(wait, v) => {
            tokio::time::sleep(wait).await;
            axum::Json(v).into_response()
        }
        Reply::Together(crowd, v) => {
            crowd.join().await;
            axum::Json(v).into_response()
        }
    }
}

impl Backend {
    pub(crate) async fn start(
        decide: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let (app, calls) = Self::app(decide);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, calls }
    }

    /// The backend over TLS (HTTP/1.1) on `ip`, with the test CA's certificate for `localhost`
    /// and `127.0.0.1` (`tests/fixtures/tls/server-a.pem`).
    async fn start_tls(
        ip: &str,
        decide: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> Self {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (app, calls) = Self::app(decide);
        let chain = CertificateDer::pem_file_iter(crate::tls::fixture("server-a.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(crate::tls::fixture("server-a.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let url = format!("https://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    // A client that does not trust the certificate ends the handshake here.
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { url, calls }
    }

    fn app(
        decide: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> (axum::Router, Calls) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/hooks/{name}", axum::routing::post(hook))
            .with_state(BackendState {
                decide: Arc::new(decide),
                calls: calls.clone(),
            });
        (app, calls)
    }

    /// The URL of hook `name`.
    pub(crate) fn url(&self, name: &str) -> Option<String> {
        Some(format!("{}/{name}", self.url))
    }

    /// The requests made to hook `name`, in order.
    pub(crate) fn calls(&self, name: &str) -> Vec<(Value, HeaderMap)> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, b, h)| (b.clone(), h.clone()))
            .collect()
    }
}

/// A URL nothing listens on.
pub(crate) async fn dead_url() -> Option<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    Some(format!("http://{addr}/hooks/connect"))
}

pub(crate) fn allow() -> Reply {
    Reply::Json(json!({"result": "allow"}))
}

pub(crate) fn deny(reason: &str) -> Reply {
    Reply::Json(json!({"result": "deny", "reason": reason}))
}

async fn sse_get(gw: &Gateway, query: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let resp = get(format!("http://{}/v1/sse?{query}", gw.public_addr), headers).await;
    let status = resp.status().as_u16();
    if status == 200 {
        return (status, Value::Null);
    }
    (status, resp.json().await.unwrap())
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Path {
    /// HTTP/1.1 on the raw socket (the fast path).
    Direct,
    /// HTTP/1.1 absolute-form: hyper and the router.
    AbsoluteForm,
    /// TLS, HTTP/1.1: the fast path on the TLS stream.
    TlsDirect,
    /// TLS, HTTP/2: hyper's HTTP/2 and the router.
    TlsH2,
    /// Long-poll through the router.
    Poll,
}

pub(crate) const PATHS: [Path; 5] = [
    Path::Direct,
    Path::AbsoluteForm,
    Path::TlsDirect,
    Path::TlsH2,
    Path::Poll,
];

/// The status and (for a refusal) JSON body of a subscribe request over `path`.
async fn subscribe_on(gw: &Gateway, path: Path, query: &str, cookie: &str) -> (u16, Value) {
    subscribe_with(gw, path, query, &[("cookie", cookie)]).await
}

/// [`subscribe_on`] with these request headers (the request names the host `localhost`).
pub(crate) async fn subscribe_with(
    gw: &Gateway,
    path: Path,
    query: &str,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let (route, timeout) = match path {
        Path::Poll => ("/v1/poll", "&timeout=0"),
        _ => ("/v1/sse", ""),
    };
    let uri = match path {
        Path::AbsoluteForm => format!("http://{}{route}?{query}{timeout}", gw.public_addr),
        Path::TlsH2 => format!("https://localhost{route}?{query}{timeout}"),
        _ => format!("{route}?{query}{timeout}"),
    };
    let mut request = hyper::Request::get(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if path != Path::TlsH2 {
        request = request.header("host", "localhost");
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    let response = match path {
        Path::Direct | Path::AbsoluteForm | Path::Poll => {
            let tcp = TcpStream::connect(gw.public_addr).await.unwrap();
            http1(TokioIo::new(tcp), request).await
        }
        Path::TlsDirect => {
            let tls = crate::tls::tls_connect(gw, &[b"http/1.1"]).await;
            http1(TokioIo::new(tls), request).await
        }
        Path::TlsH2 => {
            let tls = crate::tls::tls_connect(gw, &[b"h2"]).await;
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            sender.send_request(request).await.unwrap()
        }
    };
    let status = response.status().as_u16();
    if status == 200 {
        return (status, Value::Null);
    }
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

async fn http1<I>(
    io: I,
    request: hyper::Request<Empty<Bytes>>,
) -> hyper::Response<hyper::body::Incoming>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    sender.send_request(request).await.unwrap()
}

pub(crate) fn hooked(mut config: Config, backend: &Backend, hooks: &[&str]) -> Config {
    for h in hooks {
        let url = backend.url(h);
        match *h {
            "connect" => config.hooks.connect_url = url,
            "subscribe" => config.hooks.subscribe_url = url,
            "publish" => config.hooks.publish_url = url,
            "refresh" => config.hooks.refresh_url = url,
            other => panic!("no hook {other}"),
        }
    }
    config
}

#[tokio::test]
async fn the_connect_hook_allows_and_denies_with_its_reason_on_every_path() {
    let calls = Arc::new(Mutex::new(0usize));
    let counted = calls.clone();
    let backend = Backend::start(move |_, _| {
        *counted.lock().unwrap() += 1;
        deny("sign in first")
    })
    .await;
    for path in PATHS {
        let tls = matches!(path, Path::TlsDirect | Path::TlsH2);
        let base = if tls {
            crate::tls::tls_config()
        } else {
            test_config()
        };
        let gw = spawn_gateway(hooked(base, &backend, &["connect"])).await;
        let (status, body) = subscribe_on(&gw, path, "topic=news", "session=nope").await;
        assert_eq!(status, 403, "{path:?}: {body}");
        assert_eq!(body["code"], "forbidden", "{path:?}");
        assert_eq!(body["reason"], "sign in first", "{path:?}");
        gw.stop().await.unwrap();
    }
    assert_eq!(*calls.lock().unwrap(), PATHS.len());
    let (request, headers) = backend.calls("connect").pop().unwrap();
    assert_eq!(headers["cookie"], "session=nope", "the cookie is forwarded");
    assert_eq!(request["hook"], "connect");
    assert_eq!(request["transport"], "poll");
    assert_eq!(request["topics"], json!(["news"]));
    assert_eq!(request["remote_addr"], "127.0.0.1");

    let allowing = Backend::start(|_, _| allow()).await;
    for path in PATHS {
        let tls = matches!(path, Path::TlsDirect | Path::TlsH2);
        let base = if tls {
            crate::tls::tls_config()
        } else {
            test_config()
        };
        let gw = spawn_gateway(hooked(base, &allowing, &["connect"])).await;
        let (status, body) = subscribe_on(&gw, path, "topic=news", "session=ok").await;
        assert_eq!(status, 200, "{path:?}: {body}");
        gw.stop().await.unwrap();
    }
    let calls = allowing.calls("connect");
    assert!(
        calls.iter().all(|(c, _)| c["client"]
            .as_str()
            .is_some_and(|id| id.parse::<u64>().is_ok())),
        "every SSE stream and poll names its connection id: {calls:?}"
    );
}

#[tokio::test]
async fn allow_with_data_names_the_user_and_subscribes_the_hooks_topics() {
    let backend = Backend::start(|_, _| {
        Reply::Json(json!({
            "result": "allow", "user": "u42", "topics": ["user:u42", "news"],
            "info": {"name": "Ann"},
        }))
    })
    .await;
    let gw = spawn_gateway(hooked(test_config(), &backend, &["connect", "publish"])).await;
    // SSE: no topic asked, the hook's two are subscribed; `user:u42` is this user's.
    let mut sse = SseClient::connect(&gw, "format=text", None).await;
    sse.next_block().await.unwrap();
    publish(&gw, "user:u42", json!({"for": "u42"})).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"for":"u42"}"#)
    );
    publish(&gw, "news", json!(2)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("2"));

    // WebSocket: told with a server-side `subscribed`; later hook requests carry the user
    // and the info.
    let mut ws = ws_connect(&gw).await;
    let subscribed = ws_next(&mut ws).await;
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    assert_eq!(subscribed["by"], "server");
    assert_eq!(subscribed["topics"], json!(["user:u42", "news"]));
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "news", "data": 3}),
    )
    .await;
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(ws_next(&mut ws).await["type"].as_str().unwrap().to_string());
    }
    got.sort();
    assert_eq!(got, ["message", "published"]);
    let (publish, _) = backend.calls("publish").pop().unwrap();
    assert_eq!(publish["user"], "u42");
    assert_eq!(publish["info"], json!({"name": "Ann"}));
    assert_eq!(publish["transport"], "ws");
    assert_eq!(publish["topic"], "news");
    assert_eq!(publish["data"], 3);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_websocket_refused_by_the_connect_hook_gets_a_403_before_the_upgrade() {
    let backend = Backend::start(|_, _| deny("banned")).await;
    let gw = spawn_gateway(hooked(test_config(), &backend, &["connect"])).await;
    let err = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws", gw.public_addr))
        .await
        .expect_err("refused");
    match err {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status(), 403);
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            assert_eq!(body, json!({"code": "forbidden", "reason": "banned"}));
        }
        other => panic!("expected an HTTP refusal, got {other}"),
    }
    assert_eq!(backend.calls("connect")[0].0["transport"], "ws");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_subscribe_hook_decides_instead_of_the_token_rules() {
    let backend = Backend::start(|_, body| {
        if body["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "secret")
        {
            deny("not yours")
        } else {
            allow()
        }
    })
    .await;
    // Tokens are required for non-public topics, yet the hook lets an anonymous client in.
    let gw = spawn_gateway(hooked(token_config(), &backend, &["subscribe"])).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["private", "secret"]}),
    )
    .await;
    let refused = ws_next(&mut ws).await;
    assert_eq!(
        refused,
        json!({"type": "error", "code": "forbidden", "reason": "not yours"})
    );
    ws_subscribe(&mut ws, &["private"]).await;
    publish(&gw, "private", json!(1)).await;
    assert_eq!(ws_next(&mut ws).await["data"], 1);
    let (sse, body) = sse_get(&gw, "topic=secret", &[]).await;
    assert_eq!((sse, body["reason"].as_str()), (403, Some("not yours")));
    assert_eq!(sse_get(&gw, "topic=private", &[]).await.0, 200);
    let history = get(
        format!("http://{}/v1/topics/secret/history", gw.public_addr),
        &[],
    )
    .await;
    assert_eq!(history.status(), 403, "history reads ask the same hook");
    let calls = backend.calls("subscribe");
    assert_eq!(calls[0].0["topics"], json!(["private", "secret"]));
    assert_eq!(calls[0].0["transport"], "ws");
    assert_eq!(calls[0].0["user"], Value::Null);
    assert_eq!(calls[0].0["token"], Value::Null, "no token, no claims");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_publish_hook_decides_for_http_and_websocket_clients() {
    let backend = Backend::start(|_, body| {
        if body["topic"] == "locked" {
            deny("read-only topic")
        } else {
            allow()
        }
    })
    .await;
    let gw = spawn_gateway(hooked(token_config(), &backend, &["publish"])).await;
    let url = format!("http://{}/v1/publish", gw.public_addr);
    // No token, no API key: the hook decides (and sees the forwarded Authorization).
    let ok = post_json(
        &url,
        &[("cookie", "s=1")],
        &json!({"topic": "chat", "data": 1}),
    )
    .await;
    assert_eq!(ok.status(), 200);
    let refused = post_json(&url, &[], &json!({"topic": "locked", "data": 1})).await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code": "forbidden", "reason": "read-only topic"})
    );
    let (first, headers) = backend.calls("publish")[0].clone();
    assert_eq!(first["transport"], "http");
    assert_eq!(first["data"], 1);
    assert_eq!(headers["cookie"], "s=1");

    // A token whose claim allows `locked` is still refused: the hook replaces the claim.
    let t = token(json!({"sub": "w", "exp": unix_now() + 600, "publish": ["*"]}));
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws?token={t}", gw.public_addr))
            .await
            .unwrap();
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "locked", "data": 2}),
    )
    .await;
    assert_eq!(
        ws_next(&mut ws).await,
        json!({"type": "error", "code": "forbidden", "reason": "read-only topic"})
    );
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "chat", "data": 2}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "published");
    let (last, _) = backend.calls("publish").pop().unwrap();
    assert_eq!(last["user"], "w");
    assert_eq!(last["token"]["publish"], json!(["*"]));
    gw.stop().await.unwrap();
}

/// Publishes `messages` as one batch on the public listener; the results.
async fn publish_batch(gw: &Gateway, messages: &[Value]) -> Vec<Value> {
    let resp = post_json(
        format!("http://{}/v1/publish/batch", gw.public_addr),
        &[],
        &json!({ "messages": messages }),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let results: Value = resp.json().await.unwrap();
    results["results"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_batchs_messages_are_put_to_the_publish_hook_together_and_published_in_order() {
    // The backend answers only once 16 requests are waiting at once: asked one after another,
    // every message would time out.
    let crowd = Crowd::new(16);
    let held = crowd.clone();
    let backend = Backend::start(move |_, body| {
        if body["data"] == 30 {
            return deny("not thirty");
        }
        Reply::Together(held.clone(), json!({"result": "allow"}))
    })
    .await;
    let mut config = hooked(token_config(), &backend, &["publish"]);
    config.hooks.timeout = Duration::from_secs(5);
    let gw = spawn_gateway(config.clone()).await;
    let mut sse = SseClient::connect(&gw, "topic=public.batch", None).await;
    // Message 35 is not a message (no `data`): refused in its place, never put to the hook.
    let messages: Vec<Value> = (0..40)
        .map(|i| match i {
            35 => json!({"topic": "public.batch"}),
            i => json!({"topic": "public.batch", "data": i}),
        })
        .collect();
    let results = publish_batch(&gw, &messages).await;
    assert_eq!(results.len(), 40);
    assert_eq!(results[30]["code"], "forbidden", "{}", results[30]);
    assert_eq!(results[30]["reason"], "not thirty");
    assert_eq!(results[35]["code"], "bad_json", "{}", results[35]);
    assert_eq!(
        crowd.most_held.load(std::sync::atomic::Ordering::SeqCst),
        16,
        "16 messages of a batch are put to the hook at once, no more"
    );
    assert_eq!(backend.calls("publish").len(), 39);
    for i in (0..40).filter(|&i| i != 30 && i != 35) {
        let event = sse.next_event().await.unwrap();
        assert_eq!(
            event.data.as_deref(),
            Some(i.to_string().as_str()),
            "in order"
        );
        // An SSE event's id is `topic=cursor`; a result's `id` is the cursor.
        assert_eq!(
            event.id,
            Some(format!(
                "public.batch={}",
                results[i]["id"].as_str().unwrap()
            )),
            "message {i}'s result names it"
        );
    }
    gw.stop().await.unwrap();

    // With room for four hook requests in all, a batch asks about one message at a time
    // rather than finding its own requests refused as overloaded.
    let allowing =
        Backend::start(|_, _| Reply::Slow(Duration::from_millis(5), json!({"result": "allow"})))
            .await;
    let mut config = hooked(token_config(), &allowing, &["publish"]);
    config.hooks.max_in_flight = 4;
    let gw = spawn_gateway(config).await;
    let messages: Vec<Value> = (0..10)
        .map(|i| json!({"topic": "public.batch", "data": i}))
        .collect();
    let results = publish_batch(&gw, &messages).await;
    assert!(results.iter().all(|r| r["id"].is_string()), "{results:?}");
    assert_eq!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="publish",result="allow"}"#
        )
        .await,
        10.0
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_backend_that_is_down_denies_or_falls_back_to_the_token_rules() {
    let mut config = token_config();
    config.hooks.connect_url = dead_url().await;
    config.hooks.subscribe_url = dead_url().await;
    let gw = spawn_gateway(config.clone()).await;
    let (status, body) = sse_get(&gw, "topic=public.news", &[]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("hook_unavailable"))
    );
    let mut ws = None;
    if let Err(tokio_tungstenite::tungstenite::Error::Http(r)) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws", gw.public_addr)).await
    {
        ws = Some(r.status().as_u16());
    }
    assert_eq!(ws, Some(503));
    assert!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="connect",result="unavailable"}"#
        )
        .await
            >= 2.0
    );
    gw.stop().await.unwrap();

    config.hooks.on_unavailable = OnUnavailable::Allow;
    let gw = spawn_gateway(config).await;
    // The token rules decide: a public topic is open, a private one needs a token.
    assert_eq!(sse_get(&gw, "topic=public.news", &[]).await.0, 200);
    let (status, body) = sse_get(&gw, "topic=private", &[]).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    let t = token(json!({"sub": "a", "exp": unix_now() + 600, "topics": ["private"]}));
    assert_eq!(
        sse_get(
            &gw,
            "topic=private",
            &[("authorization", &format!("Bearer {t}"))]
        )
        .await
        .0,
        200
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_https_hook_is_trusted_through_hooks_ca_file_and_refused_without_it() {
    let backend = Backend::start_tls("127.0.0.1", |_, _| deny("checked over TLS")).await;
    let mut config = hooked(test_config(), &backend, &["connect"]);
    assert!(
        config
            .hooks
            .connect_url
            .as_deref()
            .unwrap()
            .starts_with("https://127.0.0.1:")
    );
    config.hooks.ca_file = Some(crate::tls::fixture("ca.pem"));
    let gw = spawn_gateway(config.clone()).await;
    for path in [Path::Direct, Path::AbsoluteForm, Path::Poll] {
        let (status, body) = subscribe_on(&gw, path, "topic=news", "session=s1").await;
        assert_eq!(status, 403, "{path:?}: {body}");
        assert_eq!(body["reason"], "checked over TLS", "{path:?}");
    }
    let calls = backend.calls("connect");
    assert_eq!(calls.len(), 3, "every decision was asked over TLS");
    assert_eq!(calls[0].1["cookie"], "session=s1");
    gw.stop().await.unwrap();

    // The backend's certificate does not check out: the handshake fails, the hook is
    // unavailable, and the request never reaches the backend. Trusting the system's store
    // alone (which does not hold the test CA); trusting another certificate (a leaf, not the
    // backend's CA); and the right CA with a backend whose address the certificate does not
    // name (127.0.0.2).
    let elsewhere = Backend::start_tls("127.0.0.2", |_, _| allow()).await;
    let mut misnamed = hooked(test_config(), &elsewhere, &["connect"]);
    misnamed.hooks.ca_file = Some(crate::tls::fixture("ca.pem"));
    let mut system_only = config.clone();
    system_only.hooks.ca_file = None;
    let mut other_ca = config.clone();
    other_ca.hooks.ca_file = Some(crate::tls::fixture("server-b.pem"));
    for (case, config) in [
        ("system store", system_only),
        ("another certificate", other_ca),
        ("misnamed", misnamed),
    ] {
        if case == "system store"
            && let Err(e) = config.validate()
        {
            // A machine with no CA certificates at all refuses to start instead.
            let e = e.to_string();
            assert!(
                e.contains("install ca-certificates, or set hooks.ca_file"),
                "{e}"
            );
            continue;
        }
        let gw = spawn_gateway(config).await;
        let (status, body) = sse_get(&gw, "topic=news", &[]).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (503, Some("hook_unavailable")),
            "{case}: {body}"
        );
        assert_eq!(
            metric(
                &gw,
                r#"herald_hook_requests_total{hook="connect",result="unavailable"}"#
            )
            .await,
            1.0,
            "{case}"
        );
        gw.stop().await.unwrap();
    }
    assert_eq!(
        backend.calls("connect").len() + elsewhere.calls("connect").len(),
        3,
        "nothing sent past a failed handshake"
    );

    // A CA file that cannot be read stops the start, naming the key.
    config.hooks.ca_file = Some(crate::tls::fixture("missing.pem"));
    let e = config.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("hooks.ca_file: cannot read certificates from"),
        "{e}"
    );
}

#[tokio::test]
async fn bad_answers_count_as_unavailable() {
    for reply in ["500", "not json", "big", "maybe"] {
        let backend = Backend::start(move |_, _| match reply {
            "500" => Reply::Status(500),
            "not json" => Reply::Raw("allow".into()),
            "big" => Reply::Json(json!({"result": "allow", "info": "x".repeat(70 * 1024)})),
            _ => Reply::Json(json!({"result": "maybe"})),
        })
        .await;
        let gw = spawn_gateway(hooked(test_config(), &backend, &["connect"])).await;
        let (status, body) = sse_get(&gw, "topic=news", &[]).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (503, Some("hook_unavailable")),
            "{reply}"
        );
        gw.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_slow_backend_times_out_into_the_unavailable_policy() {
    let backend =
        Backend::start(|_, _| Reply::Slow(Duration::from_secs(3), json!({"result": "allow"})))
            .await;
    let mut config = hooked(test_config(), &backend, &["connect"]);
    config.hooks.timeout = Duration::from_millis(200);
    let gw = spawn_gateway(config).await;
    let started = Instant::now();
    let (status, body) = sse_get(&gw, "topic=news", &[]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("hook_unavailable"))
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="connect",result="timeout"}"#
        )
        .await,
        1.0
    );
    assert!(
        metrics_text(&gw)
            .await
            .contains("herald_hook_duration_seconds_bucket")
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn requests_past_max_in_flight_are_not_sent_and_count_as_unavailable() {
    let backend =
        Backend::start(|_, _| Reply::Slow(Duration::from_secs(1), json!({"result": "allow"})))
            .await;
    let mut config = hooked(test_config(), &backend, &["connect"]);
    config.hooks.max_in_flight = 1;
    config.hooks.timeout = Duration::from_secs(5);
    let gw = Arc::new(spawn_gateway(config).await);
    let first = {
        let gw = gw.clone();
        tokio::spawn(async move { sse_get(&gw, "topic=news", &[]).await.0 })
    };
    eventually(WAIT, || async { backend.calls("connect").len() == 1 }).await;
    assert_eq!(metric(&gw, "herald_hooks_in_flight").await, 1.0);
    let (status, body) = sse_get(&gw, "topic=news", &[]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("hook_unavailable"))
    );
    assert_eq!(backend.calls("connect").len(), 1, "the second was not sent");
    assert_eq!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="connect",result="overloaded"}"#
        )
        .await,
        1.0
    );
    assert_eq!(first.await.unwrap(), 200, "the first is answered");
    assert_eq!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="connect",result="allow"}"#
        )
        .await,
        1.0
    );
}

#[tokio::test]
async fn the_refresh_hook_extends_expiring_connections_then_ends_them_with_its_reason() {
    // Connections get one second; the first refresh of each extends by one more, the second
    // refuses.
    let refreshed = Arc::new(Mutex::new(std::collections::HashMap::<String, u32>::new()));
    let seen = refreshed.clone();
    let backend = Backend::start(move |hook, body| match hook {
        "connect" => Reply::Json(json!({"result": "allow", "user": "r", "expires_in": 1})),
        _ => {
            let mut seen = seen.lock().unwrap();
            let n = seen.entry(body["client"].to_string()).or_default();
            *n += 1;
            if *n == 1 {
                Reply::Json(json!({"result": "allow", "expires_in": 1}))
            } else {
                deny("session ended")
            }
        }
    })
    .await;
    let gw = spawn_gateway(hooked(test_config(), &backend, &["connect", "refresh"])).await;
    let started = Instant::now();
    let mut ws = ws_connect(&gw).await;
    let mut sse = SseClient::connect(&gw, "topic=news", None).await;
    assert_eq!(
        ws_close_code(&mut ws).await,
        (1008, "session ended".to_string())
    );
    let end = sse.rest(WAIT).await;
    assert!(
        end.contains("event: herald.disconnect\ndata: {\"reason\":\"session ended\"}"),
        "{end}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "extended once"
    );
    let calls = backend.calls("refresh");
    assert_eq!(calls.len(), 4, "two per connection");
    assert_eq!(calls[0].0["user"], "r");
    gw.stop().await.unwrap();
}

/// A WebSocket that sends a token after the upgrade is put to the connect hook again: the
/// token must not get a user past it that the hook refuses on every other path.
#[tokio::test]
async fn a_token_sent_over_a_websocket_is_put_to_the_connect_hook() {
    let backend = Backend::start(|_, body| {
        if body["user"] == "mallory" {
            deny("banned")
        } else {
            allow()
        }
    })
    .await;
    let gw = spawn_gateway(hooked(token_config(), &backend, &["connect"])).await;
    let mallory = token(json!({"sub": "mallory", "exp": unix_now() + 600, "topics": ["*"]}));
    assert_eq!(
        sse_get(&gw, &format!("topic=news&token={mallory}"), &[])
            .await
            .0,
        403
    );
    let mut ws = ws_connect(&gw).await; // anonymous: allowed
    ws_send(&mut ws, json!({"type": "auth", "token": mallory})).await;
    let refused = ws_next(&mut ws).await;
    assert_forbidden(&refused, "banned");
    let ann = token(json!({"sub": "ann", "exp": unix_now() + 600}));
    ws_send(&mut ws, json!({"type": "auth", "token": ann})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    assert_eq!(
        backend.calls("connect").len(),
        4,
        "asked at the upgrade and for each token"
    );
    gw.stop().await.unwrap();
}

/// Personal topics keep Herald's own rule whatever the subscribe hook says: `user:<sub>` for
/// that user only, `conn:<id>` for no client, and a new token drops the old user's.
#[tokio::test]
async fn the_subscribe_hook_does_not_open_personal_topics() {
    let backend = Backend::start(|_, _| allow()).await;
    let gw = spawn_gateway(hooked(token_config(), &backend, &["subscribe"])).await;
    let mut ws = ws_connect(&gw).await;
    for topic in ["user:alice", "conn:123"] {
        ws_send(&mut ws, json!({"type": "subscribe", "topics": [topic]})).await;
        assert_eq!(ws_next(&mut ws).await["code"], "forbidden", "{topic}");
    }
    let alice = token(json!({"sub": "alice", "exp": unix_now() + 600}));
    let bob = token(json!({"sub": "bob", "exp": unix_now() + 600}));
    ws_send(&mut ws, json!({"type": "auth", "token": alice})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    ws_subscribe(&mut ws, &["user:alice", "room"]).await;
    ws_send(&mut ws, json!({"type": "auth", "token": bob})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    let dropped = ws_next(&mut ws).await;
    assert_eq!(dropped["topics"], json!(["user:alice"]), "{dropped}");
    publish(&gw, "user:alice", json!("for alice only")).await;
    publish(&gw, "room", json!("for the room")).await;
    assert_eq!(ws_next(&mut ws).await["data"], "for the room");
    gw.stop().await.unwrap();
}

/// The publish hook sees a MessagePack payload in its JSON form (binary as base64), and its
/// refusal reaches a `herald.msgpack` client as a MessagePack error frame with its reason.
#[tokio::test]
async fn the_publish_hook_sees_a_msgpack_payload_in_its_json_form() {
    use crate::msgpack::{field, kind, map, mp_next, mp_send};
    use rmpv::Value as Mp;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let backend = Backend::start(|_, body| {
        if body["topic"] == "locked" {
            deny("read-only topic")
        } else {
            allow()
        }
    })
    .await;
    let gw = spawn_gateway(hooked(token_config(), &backend, &["publish"])).await;
    let mut request = format!("ws://{}/v1/ws", gw.public_addr)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "herald.msgpack".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let publish = |topic: &str| {
        map(vec![
            ("type", "publish".into()),
            ("topic", topic.into()),
            ("data", map(vec![("b", Mp::Binary(vec![1, 2, 3]))])),
        ])
    };
    mp_send(&mut ws, publish("chat")).await;
    assert_eq!(kind(&mp_next(&mut ws).await), "published");
    let (call, _) = backend.calls("publish").pop().unwrap();
    assert_eq!(call["data"], json!({"b": "AQID"}));
    mp_send(&mut ws, publish("locked")).await;
    let refused = mp_next(&mut ws).await;
    assert_eq!(field(&refused, "code").as_str(), Some("forbidden"));
    assert_eq!(field(&refused, "reason").as_str(), Some("read-only topic"));
    gw.stop().await.unwrap();
}

/// With `hooks.subscribe_patterns = "ask"`, a prefix pattern is put to the subscribe hook as
/// it is: the application decides for every topic it can match at once.
#[tokio::test]
async fn the_subscribe_hook_is_asked_about_a_pattern_as_a_whole() {
    let backend = Backend::start(|_, body| {
        if body["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "orders.*")
        {
            allow()
        } else {
            deny("patterns of orders only")
        }
    })
    .await;
    let mut config = hooked(token_config(), &backend, &["subscribe"]);
    config.hooks.subscribe_patterns = herald_gateway::config::hooks::SubscribePatterns::Ask;
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["news.*"]})).await;
    assert_eq!(
        ws_next(&mut ws).await,
        json!({"type": "error", "code": "forbidden", "reason": "patterns of orders only"})
    );
    ws_subscribe(&mut ws, &["orders.*"]).await;
    publish(&gw, "orders.new", json!(1)).await;
    let frame = ws_next(&mut ws).await;
    assert_eq!(
        (&frame["topic"], &frame["data"]),
        (&json!("orders.new"), &json!(1))
    );
    assert_eq!(sse_get(&gw, "topic=orders.*", &[]).await.0, 200);
    let calls = backend.calls("subscribe");
    assert_eq!(calls[1].0["topics"], json!(["orders.*"]));
    // Personal topics stay out of reach whatever the hook says.
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["user:*"]})).await;
    assert_eq!(ws_next(&mut ws).await["code"], "bad_topic");
    gw.stop().await.unwrap();
}
