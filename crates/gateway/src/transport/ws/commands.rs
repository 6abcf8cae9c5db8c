//! A [`Session`]'s input: frames from the client and their commands, and the application's
//! commands for the connection (the admin API).

use std::time::Duration;

use futures_util::SinkExt as _;
use herald_core::protocol::{self, Command};
use tungstenite::Message as WsMessage;

use super::session::{Flow, FrameError, Session};
use super::{close_code, format, inbound};
use crate::cluster::control::Action;
use crate::publish;
use crate::server::stream::PeerStream;
use crate::telemetry::metrics::{self, CloseReason};
use crate::telemetry::trace::Carried;
use format::Format;

impl<S: PeerStream> Session<S> {
    /// A command of the application's (the admin API): an end with its reason, or a
    /// server-side subscription told to the client as if it had asked (`"by": "server"`);
    /// or a member's join or leave (`{"type":"join",...}`, [`crate::cluster::join_leave`]).
    pub(super) async fn on_action(&mut self, action: Action) -> Flow {
        if let Some(topics) = action.subscription() {
            return self.subscribed_by_server(&topics).await;
        }
        match action {
            Action::Disconnect(disconnect) => {
                let code = if disconnect.reconnect {
                    close_code::DISCONNECTED
                } else {
                    close_code::DISCONNECTED_STAY_AWAY
                };
                self.close(code, &disconnect.reason).await;
                Flow::Close(CloseReason::Disconnected)
            }
            // Taken above.
            Action::Subscribe(_) | Action::SubscribeAfter(_) | Action::Receive { .. } => {
                Flow::Continue
            }
            Action::Presence(event) => self.send_text(event.typed_json()).await,
            Action::Unsubscribe(topics) => {
                let removed = crate::transport::unsubscribe_from_server(&mut self.feed, &topics);
                if removed.is_empty() {
                    return Flow::Continue;
                }
                self.members_follow();
                self.charges
                    .retain(|(name, _)| !removed.iter().any(|r| r == name.as_str()));
                let reply = serde_json::json!({ "type": "unsubscribed", "topics": removed, "by": "server" });
                self.send_text(reply.to_string()).await
            }
        }
    }

    /// Subscribes to `topics` on the application's command (each after its position, or from
    /// its head), telling the client with a `subscribed` frame marked `"by": "server"` when
    /// anything is new; a refusal is counted.
    pub(super) async fn subscribed_by_server(
        &mut self,
        topics: &crate::cluster::control::ServerSubscription,
    ) -> Flow {
        match crate::transport::subscribe_from_server(&self.state, &mut self.feed, topics).await {
            Ok(started) if started.is_empty() => Flow::Continue,
            Ok(started) => {
                self.members_follow();
                let cursors: serde_json::Map<String, serde_json::Value> = started
                    .iter()
                    .map(|(t, c)| (t.to_string(), c.to_string().into()))
                    .collect();
                let names: Vec<&String> = cursors.keys().collect();
                let reply = serde_json::json!({
                    "type": "subscribed", "topics": names, "cursors": cursors, "by": "server",
                });
                self.send_text(reply.to_string()).await
            }
            Err(e) => {
                metrics::client_error("ws", e.code());
                Flow::Continue
            }
        }
    }

    pub(super) async fn on_frame(
        &mut self,
        frame: Option<Result<WsMessage, tungstenite::Error>>,
    ) -> Flow {
        let message = match frame {
            None => return Flow::Close(CloseReason::Client),
            Some(Ok(message)) => message,
            Some(Err(e)) => return self.on_read_error(e).await,
        };
        if let WsMessage::Text(_) | WsMessage::Binary(_) = &message {
            let sent = self.socket.get_mut().next_message();
            if let (
                inbound::Sent::DeflatedText | inbound::Sent::DeflatedBinary,
                WsMessage::Binary(data),
            ) = (sent, &message)
            {
                return self.on_deflated(sent, data).await;
            }
        }
        match (message, self.format) {
            (WsMessage::Text(text), Format::Json) => match self.on_command(&text, None).await {
                Ok(flow) => flow,
                Err(e) => self.error_frame(e).await,
            },
            (WsMessage::Binary(frame), Format::Msgpack) => {
                match Box::pin(self.on_msgpack_command(&frame)).await {
                    Ok(flow) => flow,
                    Err(e) => self.error_frame(e).await,
                }
            }
            (WsMessage::Binary(_), Format::Json) => {
                self.error_frame(FrameError::new(
                    "unsupported_frame",
                    "binary frames are not supported; send JSON text frames (or connect with \
                     the herald.msgpack subprotocol)",
                ))
                .await
            }
            (WsMessage::Text(_), Format::Msgpack) => {
                self.error_frame(FrameError::new(
                    "unsupported_frame",
                    "text frames are not supported on a herald.msgpack connection; send \
                     MessagePack binary frames",
                ))
                .await
            }
            (WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_), _) => Flow::Continue,
            (WsMessage::Close(_), _) => {
                // tungstenite queued the reply (the client's code echoed, 1002 for an invalid
                // one): send it, then close the TCP connection cleanly.
                let limit = Duration::from_secs(1).min(self.state.config().limits.write_timeout);
                self.rest_first();
                let _ = tokio::time::timeout(limit, self.socket.flush()).await;
                self.linger().await;
                Flow::Close(CloseReason::Client)
            }
        }
    }

    async fn on_read_error(&mut self, error: tungstenite::Error) -> Flow {
        if let Some(violation) = self.socket.get_ref().violation() {
            metrics::client_error("ws", violation.metric());
            self.close(close_code::POLICY, violation.reason()).await;
            return Flow::Close(CloseReason::Protocol);
        }
        match error {
            tungstenite::Error::Capacity(e) => {
                metrics::client_error("ws", "too_big");
                let reason = format!("message too big: {e}");
                self.close(close_code::TOO_BIG, &reason).await;
                Flow::Close(CloseReason::Protocol)
            }
            tungstenite::Error::Utf8(_) => {
                metrics::client_error("ws", "invalid_utf8");
                self.close(close_code::INVALID_DATA, "text frame is not valid UTF-8")
                    .await;
                Flow::Close(CloseReason::Protocol)
            }
            // A client that just went away (closed its socket without a close frame).
            tungstenite::Error::Protocol(
                tungstenite::error::ProtocolError::ResetWithoutClosingHandshake,
            ) => Flow::Close(CloseReason::Client),
            tungstenite::Error::Protocol(e) => {
                metrics::client_error("ws", "protocol");
                tracing::debug!(error = %e, "websocket protocol error");
                let reason = format!("protocol error: {e}");
                self.close(close_code::PROTOCOL, &reason).await;
                Flow::Close(CloseReason::Protocol)
            }
            _ => Flow::Close(CloseReason::Client),
        }
    }

    /// A `herald.msgpack` command: read as its JSON form, so that the same rules apply, with
    /// its `data` carried as sent (checked, never converted to JSON).
    pub(super) async fn on_msgpack_command(&mut self, frame: &[u8]) -> Result<Flow, FrameError> {
        // `data` is checked, not converted: a ping's is echoed as given, a publish's payload
        // is made from the bytes.
        let read =
            protocol::command_from_msgpack(frame).map_err(|e| FrameError::new(e.code, e.reason))?;
        let data = read.data.unwrap_or(&[0xc0]);
        self.on_command(&read.json, Some(data)).await
    }

    /// A command; `msgpack` is the MessagePack bytes of its `data` on a `herald.msgpack`
    /// connection (nil when it has none).
    pub(super) async fn on_command(
        &mut self,
        text: &str,
        msgpack: Option<&[u8]>,
    ) -> Result<Flow, FrameError> {
        let command = protocol::parse(text).map_err(|e| FrameError::new(e.code, e.reason))?;
        match command {
            Command::Subscribe {
                topics,
                cursors,
                last,
                delta,
            } => self.subscribe(topics, cursors, last, delta).await,
            Command::Unsubscribe { topics } => {
                let mut removed = Vec::with_capacity(topics.len());
                for topic in topics
                    .iter()
                    .take(self.state.config().limits.max_subscriptions)
                {
                    if self.feed.unsubscribe(topic) {
                        removed.push(topic.as_str());
                        self.charges.retain(|(name, _)| name.as_str() != topic);
                    }
                }
                let reply = serde_json::json!({ "type": "unsubscribed", "topics": removed });
                if !removed.is_empty() {
                    self.members_follow();
                }
                Ok(self.send_text(reply.to_string()).await)
            }
            Command::Auth { token } => self.authenticate(&token).await,
            Command::Heartbeat { interval } => {
                let ws = &self.state.config().ws;
                let asked = crate::transport::asked_interval(
                    interval,
                    ws.min_ping_interval,
                    ws.max_ping_interval,
                )?;
                // At most `ws.max_ping_interval`: 4 bytes rather than a `Duration`'s 16.
                self.ping_ms = u32::try_from(asked.as_millis()).unwrap_or(u32::MAX);
                let reply = format!(
                    r#"{{"type":"heartbeat","interval":{}}}"#,
                    asked.as_secs_f64()
                );
                Ok(self.send_text(reply).await)
            }
            Command::Ping { data } if msgpack.is_some() => {
                let pong = format::msgpack_pong(data.and(msgpack));
                self.metrics.sent(pong.len());
                Ok(self.send(WsMessage::Binary(pong.into())).await)
            }
            Command::Ping { data } => {
                let reply = match data {
                    Some(data) => format!(r#"{{"type":"pong","data":{}}}"#, data.get()),
                    None => r#"{"type":"pong"}"#.to_string(),
                };
                Ok(self.send_text(reply).await)
            }
            Command::Publish {
                topic,
                event,
                data,
                traceparent,
                tracestate,
                idempotency_key,
            } => {
                let data = match msgpack {
                    Some(bytes) => publish::Data::Msgpack(bytes),
                    None => publish::Data::Json(data),
                };
                let trace = Carried {
                    traceparent: traceparent.as_deref(),
                    tracestate: tracestate.as_deref(),
                };
                let key = idempotency_key.as_deref();
                self.publish(&topic, data, event.as_deref(), trace, key)
                    .await
            }
        }
    }
}
