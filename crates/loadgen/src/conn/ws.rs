//! WebSocket subscriber: Herald's JSON protocol, or raw mode (count any frame).

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

use super::lifecycle::{Client, Session};
use super::receiver::Receiver;
use super::{ConnCtx, ConnOutcome, Role, topics_of};
use crate::clock::unix_micros;
use crate::error::{ConnError, ErrorKind};
use crate::proto::herald_ws::{ServerFrame, classify, subscribe_frame};
use crate::spec::WorkerSpec;
use crate::target::Target;

/// A WebSocket client stream.
pub(crate) type Ws = WebSocketStream<TcpStream>;

/// Small buffers: tungstenite allocates its read buffer eagerly, and at 100k connections the
/// default 128 KiB would cost 12 GiB.
pub(crate) fn ws_config(read_buffer: usize, max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(read_buffer.max(256))
        .write_buffer_size(0)
        .max_write_buffer_size(1 << 20)
        .max_message_size(Some(max_message.max(1024)))
        .max_frame_size(Some(max_message.max(1024)))
}

/// Completes the WebSocket handshake over a connected socket.
pub(crate) async fn handshake(
    spec: &WorkerSpec,
    target: &Target,
    stream: TcpStream,
) -> Result<Ws, ConnError> {
    let request = target
        .ws_url()
        .into_client_request()
        .map_err(|e| ConnError::WsHandshake(e.to_string()))?;
    let cfg = ws_config(spec.read_buffer, spec.max_event);
    let (ws, _resp) = tokio_tungstenite::client_async_with_config(request, stream, Some(cfg))
        .await
        .map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(resp) => {
                ConnError::Status(resp.status().as_u16())
            }
            tokio_tungstenite::tungstenite::Error::Io(io) => ConnError::Io(io),
            other => ConnError::WsHandshake(other.to_string()),
        })?;
    Ok(ws)
}

/// Maps a tungstenite error on an open connection.
pub(crate) fn ws_err(e: tokio_tungstenite::tungstenite::Error) -> ConnError {
    use tokio_tungstenite::tungstenite::Error as E;
    match e {
        E::Io(io) => ConnError::Io(io),
        E::ConnectionClosed | E::AlreadyClosed => ConnError::ClosedByServer,
        other => ConnError::Io(std::io::Error::other(other.to_string())),
    }
}

/// Maps a server close frame: 1012/1001 are shutdown/restart, 1008 a slow-consumer kick.
pub(crate) fn close_error(
    frame: Option<&tokio_tungstenite::tungstenite::protocol::CloseFrame>,
) -> ConnError {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    match frame.map(|f| f.code) {
        Some(CloseCode::Restart | CloseCode::Away) => ConnError::ServerShutdown,
        Some(CloseCode::Policy) => ConnError::ServerDisconnect,
        _ => ConnError::ClosedByServer,
    }
}

/// A data frame, once control frames and ends are dealt with.
pub(crate) enum Data {
    /// A text frame.
    Text(Utf8Bytes),
    /// A binary frame.
    Binary(Bytes),
}

/// Reads what `ws.next()` gave: a data frame, nothing to do (a ping is answered here), or
/// the end of the connection.
pub(crate) async fn data(
    ws: &mut Ws,
    msg: Option<Result<Message, WsError>>,
) -> Result<Option<Data>, ConnError> {
    match msg {
        Some(Ok(Message::Text(t))) => Ok(Some(Data::Text(t))),
        Some(Ok(Message::Binary(b))) => Ok(Some(Data::Binary(b))),
        // tungstenite queued the pong; push it out now
        Some(Ok(Message::Ping(_))) => ws.flush().await.map(|()| None).map_err(ws_err),
        Some(Ok(Message::Close(frame))) => Err(close_error(frame.as_ref())),
        Some(Ok(_)) => Ok(None),
        Some(Err(e)) => Err(ws_err(e)),
        None => Err(ConnError::ClosedByServer),
    }
}

/// Sends a close frame, waiting briefly for it to go out.
pub(crate) async fn close(ws: &mut Ws) {
    let _ = tokio::time::timeout(Duration::from_millis(200), ws.close(None)).await;
}

/// A WebSocket subscriber before it is connected.
pub(crate) struct WsClient {
    /// Raw mode: no subscription; every frame counts.
    raw: bool,
    init_frame: Option<String>,
    topics: Vec<(u32, String)>,
    hint: usize,
    churn: bool,
}

impl WsClient {
    /// Subscriber `conn` of the worker; `raw` mode sends `init_frame` instead of subscribing.
    pub(crate) fn new(
        ctx: &ConnCtx,
        conn: u64,
        role: Role,
        raw: bool,
        init_frame: Option<String>,
    ) -> Self {
        Self {
            raw,
            init_frame,
            topics: if raw {
                Vec::new()
            } else {
                topics_of(&ctx.spec, conn)
            },
            hint: conn as usize,
            churn: matches!(role, Role::Churn { .. }),
        }
    }

    /// Subscribes and waits for the acknowledgement.
    async fn subscribe(&self, ws: &mut Ws, spec: &WorkerSpec) -> Result<(), ConnError> {
        let names: Vec<String> = self.topics.iter().map(|(_, n)| n.clone()).collect();
        ws.send(Message::Text(
            subscribe_frame(&names, spec.topics.delta).into(),
        ))
        .await
        .map_err(ws_err)?;
        let wait = Duration::from_millis(spec.subscribe_timeout_ms);
        let acked = tokio::time::timeout(wait, async {
            while let Some(msg) = ws.next().await {
                match msg.map_err(ws_err)? {
                    Message::Text(t) => match classify(&t) {
                        ServerFrame::Subscribed => return Ok(()),
                        ServerFrame::Error => {
                            return Err(ConnError::WsHandshake(
                                "server refused the subscription".into(),
                            ));
                        }
                        _ => {}
                    },
                    Message::Close(_) => return Err(ConnError::ClosedByServer),
                    _ => {}
                }
            }
            Err(ConnError::ClosedByServer)
        })
        .await;
        acked.unwrap_or(Err(ConnError::SubscribeTimeout))
    }
}

impl Client for WsClient {
    type Session = WsSession;

    fn handshake_allowance(&self, spec: &WorkerSpec) -> Duration {
        if self.raw {
            Duration::ZERO
        } else {
            Duration::from_millis(spec.subscribe_timeout_ms)
        }
    }

    async fn open(
        self,
        ctx: &ConnCtx,
        target: &Target,
        stream: TcpStream,
    ) -> Result<WsSession, ConnError> {
        let mut ws = handshake(&ctx.spec, target, stream).await?;
        if self.raw {
            if let Some(frame) = &self.init_frame {
                ws.send(Message::Text(frame.clone().into()))
                    .await
                    .map_err(ws_err)?;
            }
        } else if !self.topics.is_empty() {
            self.subscribe(&mut ws, &ctx.spec).await?;
        }
        Ok(WsSession {
            ws,
            raw: self.raw,
            delta: ctx.spec.topics.delta && !self.raw,
            rx: Receiver::new(
                ctx.stats.clone(),
                self.hint,
                self.topics,
                self.churn,
                self.raw,
            ),
        })
    }
}

/// A ready WebSocket subscriber.
pub(crate) struct WsSession {
    ws: Ws,
    raw: bool,
    /// The subscription asked for deltas: message frames go through the delta decoder.
    delta: bool,
    rx: Receiver,
}

impl Session for WsSession {
    type Event = Option<Result<Message, WsError>>;

    async fn next(&mut self, _ctx: &ConnCtx) -> Self::Event {
        self.ws.next().await
    }

    async fn handle(&mut self, ctx: &ConnCtx, msg: Self::Event) -> Result<(), ConnError> {
        let now = unix_micros();
        let stats = &ctx.stats;
        match data(&mut self.ws, msg).await? {
            Some(Data::Text(t)) if self.raw => self.rx.on_message(None, t.as_bytes(), now),
            Some(Data::Text(t)) => match classify(&t) {
                ServerFrame::Message { .. } if self.delta => {
                    self.rx.on_json_frame(t.as_bytes(), now)
                }
                ServerFrame::Message { topic, .. } => self.rx.on_message(topic, t.as_bytes(), now),
                ServerFrame::Lost { topic } => self.rx.on_lost(topic),
                ServerFrame::Error => stats.error(ErrorKind::ServerErrorFrame),
                ServerFrame::Subscribed | ServerFrame::Pong(_) => {}
                ServerFrame::Unknown => stats.error(ErrorKind::BadFrame),
            },
            Some(Data::Binary(b)) if self.raw => self.rx.on_message(None, &b, now),
            Some(Data::Binary(_)) => {
                stats.error(ErrorKind::BadFrame);
                return Ok(());
            }
            None => return Ok(()),
        }
        self.rx.flush();
        Ok(())
    }

    async fn close(&mut self) {
        close(&mut self.ws).await;
    }

    fn finish(self, churn: bool, outcome: &mut ConnOutcome) {
        if !churn {
            outcome.topics = self.rx.into_topics();
        }
    }
}
