//! WebSocket close codes used by Herald.

/// Idle timeout: nothing heard from the client.
pub(crate) const GOING_AWAY: u16 = 1001;
/// A frame that breaks RFC 6455 (an orphan continuation, an oversized control frame, ...).
pub(crate) const PROTOCOL: u16 = 1002;
/// Invalid UTF-8 in a text frame.
pub(crate) const INVALID_DATA: u16 = 1007;
/// Policy violation: slow consumer.
pub(crate) const POLICY: u16 = 1008;
/// Inbound message over the size limit.
pub(crate) const TOO_BIG: u16 = 1009;
/// The server is restarting: reconnect (with a little random delay).
pub(crate) const RESTART: u16 = 1012;
/// The server ended the connection on a command (the admin API); the client may come
/// back. The close reason is the command's.
pub(crate) const DISCONNECTED: u16 = 4000;
/// As [`DISCONNECTED`], and the client should not come back (logged out, banned).
pub(crate) const DISCONNECTED_STAY_AWAY: u16 = 4001;
