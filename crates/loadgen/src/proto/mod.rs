//! Wire formats: HTTP response heads, chunked bodies, SSE streams and Herald's WebSocket frames.

pub mod chunked;
pub mod herald_ws;
pub mod http_head;
pub mod sse;
