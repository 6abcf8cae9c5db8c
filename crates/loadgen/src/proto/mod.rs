//! Wire formats: HTTP response heads, chunked bodies, SSE streams and Herald's WebSocket frames.

pub(crate) mod chunked;
pub(crate) mod herald_ws;
pub(crate) mod http_head;
pub(crate) mod sse;
