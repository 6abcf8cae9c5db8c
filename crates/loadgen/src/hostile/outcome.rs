//! How the server answered one attack.

use std::fmt;

/// The first decisive thing the server did after an attack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Outcome {
    /// An HTTP response with this status (101: a WebSocket upgrade was accepted).
    Status(u16),
    /// An HTTP refusal whose JSON body (`content-type: application/json`) named this `code`:
    /// tells a server's own refusal from a framework's text/plain one with the same status.
    Refused(u16, String),
    /// A WebSocket close frame, with its code when it had one.
    WsClose(Option<u16>),
    /// A WebSocket `{"type":"error","code":..}` frame (the connection stays open).
    WsError(String),
    /// A WebSocket text frame of this `type` (an answer the attack was waiting for).
    WsReply(String),
    /// The server closed the connection without answering.
    Closed,
    /// The connection was reset (RST, broken pipe) without an answer.
    Reset,
    /// No answer within the attack's time bound.
    Timeout,
    /// Something came back that is neither HTTP nor WebSocket framing we can read.
    BadResponse,
    /// Another I/O error.
    Io,
    /// An HTTP/2 stream was reset (RST_STREAM) with this error code before an answer.
    H2Reset(u32),
    /// The HTTP/2 connection was ended (GOAWAY) with this error code before an answer.
    H2GoAway(u32),
    /// The TCP connect failed (the loadgen's error kind: `connect_refused`, `connect_timeout`...).
    Connect(&'static str),
}

/// Keeps server-provided codes bounded and printable.
fn sanitize(code: &str) -> String {
    let ok = !code.is_empty()
        && code.len() <= 40
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok { code.to_owned() } else { "other".into() }
}

impl Outcome {
    /// A WebSocket error frame with a (sanitized) code.
    pub(crate) fn ws_error(code: &str) -> Self {
        Outcome::WsError(sanitize(code))
    }

    /// An HTTP refusal with a JSON body naming a (sanitized) code.
    pub(crate) fn refused(status: u16, code: &str) -> Self {
        Outcome::Refused(status, sanitize(code))
    }

    /// A WebSocket reply of a (sanitized) type.
    pub(crate) fn ws_reply(ty: &str) -> Self {
        Outcome::WsReply(sanitize(ty))
    }

    /// Whether the server gave no answer at all: it closed, reset or stayed silent.
    pub(crate) fn is_silent(&self) -> bool {
        matches!(
            self,
            Outcome::Closed | Outcome::Reset | Outcome::Timeout | Outcome::Io
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Status(s) => write!(f, "status_{s}"),
            Outcome::Refused(s, c) => write!(f, "status_{s}_{c}"),
            Outcome::WsClose(Some(c)) => write!(f, "ws_close_{c}"),
            Outcome::WsClose(None) => f.write_str("ws_close_no_code"),
            Outcome::WsError(c) => write!(f, "ws_error_{c}"),
            Outcome::WsReply(t) => write!(f, "ws_reply_{t}"),
            Outcome::Closed => f.write_str("closed"),
            Outcome::Reset => f.write_str("reset"),
            Outcome::Timeout => f.write_str("timeout"),
            Outcome::BadResponse => f.write_str("bad_response"),
            Outcome::Io => f.write_str("io_error"),
            Outcome::H2Reset(c) => write!(f, "h2_reset_{c}"),
            Outcome::H2GoAway(c) => write!(f, "h2_goaway_{c}"),
            Outcome::Connect(k) => f.write_str(k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_bounded() {
        assert_eq!(Outcome::Status(431).to_string(), "status_431");
        assert_eq!(Outcome::WsClose(Some(1009)).to_string(), "ws_close_1009");
        assert_eq!(Outcome::WsClose(None).to_string(), "ws_close_no_code");
        assert_eq!(
            Outcome::ws_error("bad_json").to_string(),
            "ws_error_bad_json"
        );
        assert_eq!(Outcome::ws_error("<script>").to_string(), "ws_error_other");
        assert_eq!(
            Outcome::refused(400, "bad_limit").to_string(),
            "status_400_bad_limit"
        );
        assert_eq!(
            Outcome::Connect("connect_refused").to_string(),
            "connect_refused"
        );
        assert_eq!(Outcome::H2GoAway(11).to_string(), "h2_goaway_11");
        assert_eq!(Outcome::H2Reset(7).to_string(), "h2_reset_7");
        assert!(Outcome::Reset.is_silent());
        assert!(!Outcome::Status(400).is_silent());
    }
}
