//! What an attack accepts as an answer.

use super::outcome::Outcome;

/// An acceptable answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exp {
    /// This HTTP status.
    Status(u16),
    /// This HTTP status with a JSON body naming this `code`.
    Refused(u16, &'static str),
    /// A close frame with this code.
    WsClose(u16),
    /// An error frame with this code.
    WsError(&'static str),
    /// A text frame of this type.
    WsReply(&'static str),
    /// An HTTP/2 RST_STREAM with this error code.
    H2Reset(u32),
    /// An HTTP/2 GOAWAY with this error code.
    H2GoAway(u32),
    /// The connection was reset: the server closed it with the attack's bytes still coming
    /// (acceptable where closing is the refusal: HTTP/2 abuse ended by GOAWAY and close).
    Reset,
    /// The connection closed without an answer (acceptable for non-HTTP bytes and protocol
    /// violations, where there is nothing meaningful to answer).
    Closed,
}

/// Whether `o` is one of `expect`, or a refusal by the connection limits (429, 503), which is
/// a clear answer to any attack.
pub(crate) fn is_expected(expect: &[Exp], o: &Outcome) -> bool {
    if matches!(
        o,
        Outcome::Status(429 | 503) | Outcome::Refused(429 | 503, _)
    ) {
        return true;
    }
    expect.iter().any(|e| match (e, o) {
        (Exp::Status(a), Outcome::Status(b)) => a == b,
        (Exp::Refused(a, c), Outcome::Refused(b, d)) => a == b && *c == d.as_str(),
        (Exp::WsClose(a), Outcome::WsClose(Some(b))) => a == b,
        (Exp::WsError(a), Outcome::WsError(b)) => *a == b.as_str(),
        (Exp::WsReply(a), Outcome::WsReply(b)) => *a == b.as_str(),
        (Exp::H2Reset(a), Outcome::H2Reset(b)) | (Exp::H2GoAway(a), Outcome::H2GoAway(b)) => a == b,
        (Exp::Closed, Outcome::Closed) | (Exp::Reset, Outcome::Reset) => true,
        _ => false,
    })
}
