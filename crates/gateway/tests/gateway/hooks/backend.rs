//! The backend the hook tests program: a small axum server on 127.0.0.1:0 inside each test
//! that answers the gateway's hook requests (and records them), and the requests real clients
//! make over each path that serves them.

pub(crate) use std::sync::{Arc, Mutex};
pub(crate) use std::time::{Duration, Instant};

pub(crate) use axum::extract::{Path as UrlPath, State};
pub(crate) use axum::http::HeaderMap;
pub(crate) use bytes::Bytes;
pub(crate) use herald_gateway::config::OnUnavailable;
pub(crate) use herald_gateway::{Config, Gateway};
pub(crate) use http_body_util::{BodyExt as _, Empty};
pub(crate) use hyper_util::rt::TokioIo;
pub(crate) use serde_json::{Value, json};
pub(crate) use tokio::net::TcpStream;

pub(crate) use crate::common::*;

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
    pub(crate) most_held: std::sync::atomic::AtomicUsize,
}

impl Crowd {
    pub(crate) fn new(size: usize) -> Arc<Self> {
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

pub(crate) type Decide = dyn Fn(&str, &Value) -> Reply + Send + Sync;

/// The requests a backend received: hook name, JSON body, headers.
pub(crate) type Calls = Arc<Mutex<Vec<(String, Value, HeaderMap)>>>;

/// A backend the test programs: every request (hook name, JSON body, headers) is recorded.
pub(crate) struct Backend {
    url: String,
    calls: Calls,
}

#[derive(Clone)]
pub(crate) struct BackendState {
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
    pub(crate) async fn start_tls(
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

pub(crate) async fn sse_get(gw: &Gateway, query: &str, headers: &[(&str, &str)]) -> (u16, Value) {
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
pub(crate) async fn subscribe_on(
    gw: &Gateway,
    path: Path,
    query: &str,
    cookie: &str,
) -> (u16, Value) {
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
        Path::TlsH2 => crate::tls::h2_request(gw, request).await,
    };
    let status = response.status().as_u16();
    if status == 200 {
        return (status, Value::Null);
    }
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

pub(crate) async fn http1<I>(
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
