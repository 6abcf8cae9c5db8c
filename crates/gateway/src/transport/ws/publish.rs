//! A [`Session`]'s `publish` command: the connection's own rate, then the publish pipeline
//! ([`crate::publish`]).

use super::session::{Flow, FrameError, Session};
use crate::limits::Rate;
use crate::publish::{self, Publisher};
use crate::server::stream::PeerStream;
use crate::telemetry::metrics::{self, CloseReason};
use crate::telemetry::trace::Carried;

impl<S: PeerStream> Session<S> {
    pub(super) async fn publish(
        &mut self,
        topic: &str,
        data: publish::Data<'_>,
        event: Option<&str>,
        trace: Carried<'_>,
        idempotency: Option<&str>,
    ) -> Result<Flow, FrameError> {
        self.admit_connection_publish()?;
        // The peer is asked for only when publishing (rare), rather than kept per connection.
        let Some(peer) = self.socket.get_ref().get_ref().peer_ip() else {
            return Ok(Flow::Close(CloseReason::Client)); // the socket is gone
        };
        let publisher = if self.state.config().dev {
            Publisher::Trusted
        } else {
            Publisher::Client(self.caller(peer))
        };
        let key = self.state.client_key(self.who.sub.as_deref(), peer);
        let rate = Some(key.as_str());
        let prepared = publish::prepare(
            &self.state,
            &publisher,
            rate,
            topic,
            event,
            data,
            idempotency,
        )
        .await
        .map_err(|e| {
            if e.code() == "publish_rate" {
                metrics::client_error("ws", "publish_rate");
                FrameError::new("rate_limited", FrameError::from(e).reason)
            } else {
                FrameError::from(e)
            }
        })?;
        if let Some(upstream) = self.state.upstream() {
            upstream.publish_event(
                &self.connection.id().to_string(),
                &prepared.topic,
                prepared.event.as_ref(),
                &prepared.payload,
            );
        }
        let (name, id) = publish::route(&self.state, prepared, "ws", trace).await?;
        let reply = format!(r#"{{"type":"published","topic":"{name}","id":"{id}"}}"#);
        Ok(self.send_text(reply).await)
    }

    /// Counts one publish against this connection's own rate (the publisher's rate is the
    /// pipeline's).
    fn admit_connection_publish(&mut self) -> Result<(), FrameError> {
        let limits = &self.state.config().limits;
        if let Some(rate) = Rate::new(
            limits.publish_rate_per_connection,
            limits.publish_burst_per_connection,
        ) {
            let bucket = self
                .publish_bucket
                .get_or_insert_with(|| Box::new(rate.bucket()));
            bucket.take(rate, 1.0).map_err(|wait| {
                metrics::client_error("ws", "publish_rate");
                FrameError::new(
                    "rate_limited",
                    format!(
                        "over the publish rate of {}/s per connection; retry in {} ms",
                        limits.publish_rate_per_connection,
                        wait.as_millis().max(1)
                    ),
                )
            })?;
        }
        Ok(())
    }
}
