//! HTTP/2 attacks over TLS (ALPN `h2`, as Herald serves HTTP/2): many concurrent streams
//! owed large answers, rapid reset and huge header lists through the `h2` crate, an honest
//! request for the probe; SETTINGS and PING floods, which no HTTP/2 client sends, as raw
//! frames ([`frames`]).

pub(crate) mod frames;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::outcome::Outcome;
use super::raw;
use crate::conn::dial::dial;
use crate::target::{Target, parse_target};

/// How long opening one more stream may wait (for the server's stream limit) before the
/// attack stops opening.
const OPEN_WAIT: Duration = Duration::from_secs(1);

/// The server's public listener over TLS, where HTTP/2 is served.
#[derive(Clone)]
pub(crate) struct H2Target {
    /// Address connected to; its `host_header` is the `:authority`.
    pub target: Target,
    /// The name the certificate is checked against.
    pub server_name: ServerName<'static>,
    /// Client TLS settings: the given CA trusted, ALPN `h2` only.
    pub tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for H2Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Target")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl H2Target {
    /// The `https://` URL `url`, whose certificate is signed by the CA in the PEM file `ca`.
    pub(crate) fn new(url: &str, ca: &Path, allow_non_loopback: bool) -> Result<Self, String> {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("--h2-url `{url}` is not an https:// URL"))?;
        let mut target = parse_target(&format!("http://{rest}"), "/", allow_non_loopback)
            .map_err(|e| e.to_string())?;
        target.url = url.to_owned();
        let host = url::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()))
            .ok_or_else(|| format!("--h2-url `{url}` has no host"))?;
        let server_name = ServerName::try_from(host).map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in
            CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))?
        {
            let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self {
            target,
            server_name,
            tls: Arc::new(tls),
        })
    }

    fn request(&self, path: &str, headers: &[(String, String)]) -> http::Request<()> {
        let mut b = http::Request::get(format!("https://{}{path}", self.target.host_header));
        for (name, value) in headers {
            b = b.header(name, value);
        }
        b.body(())
            .expect("the attacks' header names and values are valid")
    }
}

/// What an HTTP/2 attack does on its connection.
#[derive(Debug, Clone)]
pub(crate) enum H2Attack {
    /// Opens `streams` streams (as many as the server allows at once) of `GET path`, holds
    /// their answers unread for `hold`: each is owed more than its first flow-control window.
    Streams {
        /// Request target of every stream.
        path: String,
        /// Streams opened.
        streams: usize,
        /// How long the unread answers are held.
        hold: Duration,
    },
    /// `resets` streams of `GET path`, each cancelled (RST_STREAM) as soon as it is sent, then
    /// `GET honest` on the same connection.
    RapidReset {
        /// Request target of the cancelled streams.
        path: String,
        /// Streams opened and cancelled.
        resets: usize,
        /// Request target of the final request.
        honest: String,
    },
    /// `GET path` with these extra headers (a header list far over the server's limit).
    HeaderList {
        /// Request target.
        path: String,
        /// The extra headers.
        headers: Vec<(String, String)>,
    },
    /// Raw: the preface, `count` control frames of this kind, then `GET honest` on stream 1.
    Flood {
        /// SETTINGS or PING.
        frame: frames::Control,
        /// Frames sent.
        count: usize,
        /// Request target of the final request.
        honest: String,
    },
}

/// Runs one HTTP/2 attack on a fresh connection to `t` from `source`.
pub(crate) async fn execute(
    a: &H2Attack,
    t: &H2Target,
    source: Option<IpAddr>,
    connect_timeout: Duration,
) -> Outcome {
    let tls = match connect(t.target.addr, t, source, connect_timeout).await {
        Ok(s) => s,
        Err(o) => return o,
    };
    match a {
        H2Attack::Streams {
            path,
            streams,
            hold,
        } => {
            with_client(tls, *streams, |c| {
                open_and_hold(c, t, path, *streams, *hold)
            })
            .await
        }
        H2Attack::RapidReset {
            path,
            resets,
            honest,
        } => with_client(tls, 100, |c| rapid_reset(c, t, path, *resets, honest)).await,
        H2Attack::HeaderList { path, headers } => {
            with_client(tls, 1, |c| answer(c, t.request(path, headers))).await
        }
        H2Attack::Flood {
            frame,
            count,
            honest,
        } => frames::flood(tls, *frame, *count, honest, &t.target.host_header).await,
    }
}

/// An honest `GET path` on a fresh connection: its status (the probe of a good client while
/// the HTTP/2 attacks run).
pub(crate) async fn honest_get(t: &H2Target, path: &str, limit: Duration) -> Outcome {
    match connect(t.target.addr, t, None, limit).await {
        Ok(tls) => with_client(tls, 1, |c| answer(c, t.request(path, &[]))).await,
        Err(o) => o,
    }
}

/// TCP, then TLS offering `h2` only; the server must pick it.
async fn connect(
    addr: SocketAddr,
    t: &H2Target,
    source: Option<IpAddr>,
    limit: Duration,
) -> Result<TlsStream<TcpStream>, Outcome> {
    let tcp = dial(addr, source, limit)
        .await
        .map_err(|e| Outcome::Connect(e.kind().as_str()))?;
    let tls = tokio_rustls::TlsConnector::from(t.tls.clone())
        .connect(t.server_name.clone(), tcp)
        .await
        .map_err(|e| raw::io_outcome(&e))?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(Outcome::BadResponse);
    }
    Ok(tls)
}

/// An HTTP/2 error as an outcome: GOAWAY and RST_STREAM by their code, I/O as on HTTP/1.
fn h2_outcome(e: &::h2::Error) -> Outcome {
    match (e.reason(), e.get_io()) {
        (Some(r), _) if e.is_go_away() => Outcome::H2GoAway(r.into()),
        (Some(r), _) => Outcome::H2Reset(r.into()),
        (None, Some(io)) => raw::io_outcome(io),
        (None, None) => Outcome::Closed,
    }
}

/// Runs `attack` with an `h2` client on `tls` whose connection window holds the first
/// window of `streams` streams, driving the connection meanwhile. The connection ending in
/// an error first is the outcome.
async fn with_client<F, Fut>(tls: TlsStream<TcpStream>, streams: usize, attack: F) -> Outcome
where
    F: FnOnce(::h2::client::SendRequest<Bytes>) -> Fut,
    Fut: Future<Output = Outcome>,
{
    let window = 65_535u32.saturating_mul(u32::try_from(streams.max(1)).unwrap_or(u32::MAX));
    let handshake = ::h2::client::Builder::new()
        .initial_window_size(65_535)
        .initial_connection_window_size(window)
        .handshake::<_, Bytes>(tls)
        .await;
    let (client, conn) = match handshake {
        Ok(pair) => pair,
        Err(e) => return h2_outcome(&e),
    };
    let mut conn = std::pin::pin!(conn);
    let mut attack = std::pin::pin!(attack(client));
    tokio::select! {
        biased;
        o = &mut attack => o,
        ended = &mut conn => match ended {
            Err(e) => h2_outcome(&e),
            Ok(()) => attack.await,
        },
    }
}

/// `client` once it may open another stream; `Err(None)` when it may not within
/// [`OPEN_WAIT`] (the server's stream limit reached).
async fn ready(
    client: &::h2::client::SendRequest<Bytes>,
) -> Result<::h2::client::SendRequest<Bytes>, Option<Outcome>> {
    match tokio::time::timeout(OPEN_WAIT, client.clone().ready()).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(Some(h2_outcome(&e))),
        Err(_) => Err(None),
    }
}

/// Sends `request` and waits for its answer's head: its status.
async fn answer(client: ::h2::client::SendRequest<Bytes>, request: http::Request<()>) -> Outcome {
    let mut client = match ready(&client).await {
        Ok(c) => c,
        Err(o) => return o.unwrap_or(Outcome::Timeout),
    };
    match client.send_request(request, true) {
        Ok((response, _)) => match response.await {
            Ok(r) => Outcome::Status(r.status().as_u16()),
            Err(e) => h2_outcome(&e),
        },
        Err(e) => h2_outcome(&e),
    }
}

/// Opens `streams` streams of `GET path`, waits up to `hold` for their answers' heads, then
/// holds them all (answered or not) for `hold`, bodies unread. `200` when the streams answered
/// in time, at least one, were all answered 200.
async fn open_and_hold(
    client: ::h2::client::SendRequest<Bytes>,
    t: &H2Target,
    path: &str,
    streams: usize,
    hold: Duration,
) -> Outcome {
    let mut pending = Vec::with_capacity(streams);
    for _ in 0..streams {
        let mut c = match ready(&client).await {
            Ok(c) => c,
            Err(Some(o)) => return o,
            Err(None) => break,
        };
        match c.send_request(t.request(path, &[]), true) {
            Ok((response, _)) => pending.push(response),
            Err(e) => return h2_outcome(&e),
        }
    }
    // answers' heads are waited for as long as the streams are then held; those not answered
    // by then stay open, owed their answers, all the same
    let heads_by = tokio::time::Instant::now() + hold;
    let mut held = Vec::with_capacity(pending.len());
    let mut unanswered = Vec::new();
    let mut first_other = None;
    for mut response in pending {
        match tokio::time::timeout_at(heads_by, &mut response).await {
            Ok(Ok(r)) if r.status() == http::StatusCode::OK => held.push(r.into_body()),
            Ok(Ok(r)) => {
                first_other.get_or_insert(Outcome::Status(r.status().as_u16()));
            }
            Ok(Err(e)) => {
                first_other.get_or_insert(h2_outcome(&e));
            }
            Err(_) => unanswered.push(response),
        }
    }
    if held.is_empty() && first_other.is_none() {
        return Outcome::Timeout; // not one stream was answered
    }
    // what came of each answer stays in its window: no capacity is released
    tokio::time::sleep(hold).await;
    drop((held, unanswered));
    first_other.unwrap_or(Outcome::Status(200))
}

/// Opens `resets` streams of `GET path`, each cancelled (its handles dropped: RST_STREAM
/// CANCEL) as soon as it is sent; then the status of `GET honest` on the same connection.
async fn rapid_reset(
    client: ::h2::client::SendRequest<Bytes>,
    t: &H2Target,
    path: &str,
    resets: usize,
    honest: &str,
) -> Outcome {
    for _ in 0..resets {
        let mut c = match ready(&client).await {
            Ok(c) => c,
            Err(o) => return o.unwrap_or(Outcome::Timeout),
        };
        match c.send_request(t.request(path, &[]), true) {
            Ok(cancelled) => drop(cancelled),
            Err(e) => return h2_outcome(&e),
        }
    }
    answer(client, t.request(honest, &[])).await
}
