//! What is told about every client connection's life: a [`ConnectionObserver`].

/// Something told about every client connection's life (upstream events, the cluster's
/// connection registry). Called on the connection's own task: must not block.
pub(crate) trait ConnectionObserver: Send + Sync + std::fmt::Debug {
    /// Connection `id` opened over `transport`, for `user` (a token's `sub`) when known.
    fn opened(&self, id: &str, transport: &'static str, user: Option<&str>);
    /// Connection `id` closed for `reason`.
    fn closed(&self, id: &str, transport: &'static str, reason: &'static str);
}
