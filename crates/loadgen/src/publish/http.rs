//! A keep-alive HTTP/1.1 POST client (hyper's low-level connection API over our own
//! `TcpStream`, so that it binds the same source addresses as the subscribers).

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, header};
use hyper_util::rt::TokioIo;

use crate::conn::dial::dial;
use crate::error::{ConnError, ErrorKind};
use crate::target::Target;

/// Largest response body read (the rest is an error): a long-poll answer of up to 1,000
/// messages fits.
const MAX_RESPONSE: usize = 1024 * 1024;

/// Why a POST failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PostError {
    /// Non-2xx status.
    #[error("HTTP status {0}")]
    Status(u16),
    /// No answer in time.
    #[error("timed out")]
    Timeout,
    /// Connecting failed.
    #[error("connect: {0}")]
    Connect(#[source] ConnError),
    /// The connection failed mid-request.
    #[error("http: {0}")]
    Http(String),
}

impl PostError {
    /// The counted kind.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            PostError::Status(_) => ErrorKind::PublishStatus,
            PostError::Timeout => ErrorKind::PublishTimeout,
            PostError::Connect(e) => e.kind(),
            PostError::Http(_) => ErrorKind::PublishIo,
        }
    }
}

/// One keep-alive connection to one target; reconnects after any failure.
pub(crate) struct Poster {
    target: Target,
    source: Option<IpAddr>,
    timeout: Duration,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Poster {
    /// A poster for `target` (path and query are taken from it).
    pub(crate) fn new(target: Target, source: Option<IpAddr>, timeout: Duration) -> Self {
        Self {
            target,
            source,
            timeout,
            sender: None,
        }
    }

    async fn connect(&mut self) -> Result<(), PostError> {
        let stream = dial(self.target.addr, self.source, self.timeout)
            .await
            .map_err(PostError::Connect)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| PostError::Http(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        self.sender = Some(sender);
        Ok(())
    }

    /// POSTs a JSON body; returns the status code of a 2xx answer.
    pub(crate) async fn post(&mut self, body: Bytes) -> Result<u16, PostError> {
        let path = self.target.path_and_query.clone();
        self.send(hyper::Method::POST, &path, Some(body))
            .await
            .map(|(status, _)| status)
    }

    /// GETs `path_and_query` on the same connection; returns the status and body of a 2xx
    /// answer (the chaos run's long-poll client).
    pub(crate) async fn get(&mut self, path_and_query: &str) -> Result<(u16, Bytes), PostError> {
        self.send(hyper::Method::GET, path_and_query, None).await
    }

    async fn send(
        &mut self,
        method: hyper::Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(u16, Bytes), PostError> {
        let timeout = self.timeout;
        let r = tokio::time::timeout(timeout, self.send_inner(method, path, body)).await;
        let r = r.unwrap_or(Err(PostError::Timeout));
        if matches!(
            r,
            Err(PostError::Timeout | PostError::Http(_) | PostError::Connect(_))
        ) {
            self.sender = None;
        }
        r
    }

    async fn send_inner(
        &mut self,
        method: hyper::Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(u16, Bytes), PostError> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            self.connect().await?;
        }
        let Some(sender) = self.sender.as_mut() else {
            return Err(PostError::Http("no connection".into()));
        };
        sender
            .ready()
            .await
            .map_err(|e| PostError::Http(e.to_string()))?;
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, self.target.host_header.as_str())
            .header(header::USER_AGENT, "herald-loadgen");
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| PostError::Http(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| PostError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| PostError::Http(e.to_string()))?
            .to_bytes();
        if (200..300).contains(&status) {
            Ok((status, body))
        } else {
            Err(PostError::Status(status))
        }
    }
}
