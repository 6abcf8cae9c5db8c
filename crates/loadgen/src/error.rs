//! Error kinds counted in reports, and the connection error type that maps onto them.

use std::io;

use serde::{Deserialize, Serialize};

/// A bounded set of error kinds; reports count errors by kind, never by free text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorKind {
    /// The TCP connect was refused.
    ConnectRefused,
    /// The TCP connect (or the whole handshake) did not finish in time.
    ConnectTimeout,
    /// No local address/port left (ephemeral port exhaustion on a source IP).
    PortsExhausted,
    /// The process ran out of file descriptors.
    TooManyOpenFiles,
    /// Any other connect error.
    ConnectOther,
    /// The server answered the upgrade/stream request with a non-success status.
    HttpStatus,
    /// The HTTP response head or body framing was malformed or too large.
    BadResponse,
    /// The WebSocket handshake failed.
    WsHandshake,
    /// No `subscribed` acknowledgement arrived in time.
    SubscribeTimeout,
    /// The server sent a WebSocket `{"type":"error"}` frame.
    ServerErrorFrame,
    /// An SSE line or event exceeded the configured bound.
    SseTooLarge,
    /// The server closed a stream that should have stayed open.
    ClosedByServer,
    /// The server ended a stream with `herald.shutdown` (or WebSocket close 1012/1001).
    ServerShutdown,
    /// The server disconnected a slow consumer (`herald.disconnect`, WebSocket close 1008).
    ServerDisconnect,
    /// A read or write on an open connection failed (reset, broken pipe...).
    Io,
    /// A publish request got a non-2xx status.
    PublishStatus,
    /// A publish request timed out.
    PublishTimeout,
    /// A publish request failed at the connection level.
    PublishIo,
    /// An echo request got no answer before the end of the drain period.
    EchoUnanswered,
    /// A frame that could not be understood (bad JSON, unknown type).
    BadFrame,
    /// A Fossil delta that did not apply (no base, malformed, bad checksum): its message is
    /// not delivered.
    DeltaApply,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub(crate) const ALL: [ErrorKind; 21] = [
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectTimeout,
        ErrorKind::PortsExhausted,
        ErrorKind::TooManyOpenFiles,
        ErrorKind::ConnectOther,
        ErrorKind::HttpStatus,
        ErrorKind::BadResponse,
        ErrorKind::WsHandshake,
        ErrorKind::SubscribeTimeout,
        ErrorKind::ServerErrorFrame,
        ErrorKind::SseTooLarge,
        ErrorKind::ClosedByServer,
        ErrorKind::ServerShutdown,
        ErrorKind::ServerDisconnect,
        ErrorKind::Io,
        ErrorKind::PublishStatus,
        ErrorKind::PublishTimeout,
        ErrorKind::PublishIo,
        ErrorKind::EchoUnanswered,
        ErrorKind::BadFrame,
        ErrorKind::DeltaApply,
    ];

    /// Number of kinds.
    pub(crate) const COUNT: usize = Self::ALL.len();

    /// Stable snake_case name used in reports.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::PortsExhausted => "ports_exhausted",
            ErrorKind::TooManyOpenFiles => "too_many_open_files",
            ErrorKind::ConnectOther => "connect_other",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::WsHandshake => "ws_handshake",
            ErrorKind::SubscribeTimeout => "subscribe_timeout",
            ErrorKind::ServerErrorFrame => "server_error_frame",
            ErrorKind::SseTooLarge => "sse_too_large",
            ErrorKind::ClosedByServer => "closed_by_server",
            ErrorKind::ServerShutdown => "server_shutdown",
            ErrorKind::ServerDisconnect => "server_disconnect",
            ErrorKind::Io => "io",
            ErrorKind::PublishStatus => "publish_status",
            ErrorKind::PublishTimeout => "publish_timeout",
            ErrorKind::PublishIo => "publish_io",
            ErrorKind::EchoUnanswered => "echo_unanswered",
            ErrorKind::BadFrame => "bad_frame",
            ErrorKind::DeltaApply => "delta_apply",
        }
    }

    /// Index into a counter array.
    pub(crate) fn index(self) -> usize {
        Self::ALL
            .iter()
            .position(|k| *k == self)
            .unwrap_or(Self::COUNT - 1)
    }

    /// Classifies an I/O error raised while connecting.
    pub(crate) fn from_connect_io(err: &io::Error) -> Self {
        match err.raw_os_error() {
            Some(24) | Some(23) => return ErrorKind::TooManyOpenFiles, // EMFILE, ENFILE
            Some(99) | Some(98) => return ErrorKind::PortsExhausted,   // EADDRNOTAVAIL, EADDRINUSE
            _ => {}
        }
        match err.kind() {
            io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
            io::ErrorKind::TimedOut => ErrorKind::ConnectTimeout,
            io::ErrorKind::AddrNotAvailable | io::ErrorKind::AddrInUse => ErrorKind::PortsExhausted,
            _ => ErrorKind::ConnectOther,
        }
    }
}

/// Why one client connection failed or ended early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// Connecting failed.
    #[error("connect failed: {0}")]
    Connect(#[source] io::Error),
    /// Connecting took longer than the configured timeout.
    #[error("connect timed out")]
    ConnectTimeout,
    /// The server answered with a non-success status.
    #[error("server answered HTTP {0}")]
    Status(u16),
    /// The response was not valid HTTP or SSE framing.
    #[error("malformed response: {0}")]
    BadResponse(&'static str),
    /// An SSE line/event exceeded the bound.
    #[error("SSE event larger than the configured bound")]
    SseTooLarge,
    /// The WebSocket handshake failed.
    #[error("websocket handshake failed: {0}")]
    WsHandshake(String),
    /// No subscription acknowledgement in time.
    #[error("no subscribed acknowledgement in time")]
    SubscribeTimeout,
    /// The server closed the stream.
    #[error("closed by server")]
    ClosedByServer,
    /// The server announced shutdown.
    #[error("server shutdown")]
    ServerShutdown,
    /// The server disconnected us as a slow consumer.
    #[error("disconnected by the server (slow consumer)")]
    ServerDisconnect,
    /// I/O on an established connection failed.
    #[error("i/o error: {0}")]
    Io(#[source] io::Error),
}

impl ConnError {
    /// The counted kind of this error.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            ConnError::Connect(e) => ErrorKind::from_connect_io(e),
            ConnError::ConnectTimeout => ErrorKind::ConnectTimeout,
            ConnError::Status(_) => ErrorKind::HttpStatus,
            ConnError::BadResponse(_) => ErrorKind::BadResponse,
            ConnError::SseTooLarge => ErrorKind::SseTooLarge,
            ConnError::WsHandshake(_) => ErrorKind::WsHandshake,
            ConnError::SubscribeTimeout => ErrorKind::SubscribeTimeout,
            ConnError::ClosedByServer => ErrorKind::ClosedByServer,
            ConnError::ServerShutdown => ErrorKind::ServerShutdown,
            ConnError::ServerDisconnect => ErrorKind::ServerDisconnect,
            ConnError::Io(_) => ErrorKind::Io,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_are_unique_and_dense() {
        for (i, k) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
    }

    #[test]
    fn classifies_connect_errors() {
        let e = io::Error::from_raw_os_error(99);
        assert_eq!(ErrorKind::from_connect_io(&e), ErrorKind::PortsExhausted);
        let e = io::Error::from_raw_os_error(24);
        assert_eq!(ErrorKind::from_connect_io(&e), ErrorKind::TooManyOpenFiles);
        let e = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(ErrorKind::from_connect_io(&e), ErrorKind::ConnectRefused);
    }
}
