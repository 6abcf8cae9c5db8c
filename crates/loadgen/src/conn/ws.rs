//! WebSocket subscriber: Herald's JSON protocol, or raw mode (count any frame).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::receiver::Receiver;
use super::{ConnCtx, ConnOutcome, Life, Role, dial::dial, hold_timer};
use crate::clock::unix_micros;
use crate::error::{ConnError, ErrorKind};
use crate::proto::herald_ws::{ServerFrame, classify, subscribe_frame};

/// A WebSocket client stream.
pub type Ws = WebSocketStream<TcpStream>;

/// Small buffers: tungstenite allocates its read buffer eagerly, and at 100k connections the
/// default 128 KiB would cost 12 GiB.
pub fn ws_config(read_buffer: usize, max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(read_buffer.max(256))
        .write_buffer_size(0)
        .max_write_buffer_size(1 << 20)
        .max_message_size(Some(max_message.max(1024)))
        .max_frame_size(Some(max_message.max(1024)))
}

/// Dials and completes the WebSocket handshake for connection `conn`.
pub async fn handshake(ctx: &ConnCtx, conn: u64) -> Result<Ws, ConnError> {
    let spec = &ctx.spec;
    let target = spec.target_for(conn);
    let timeout = Duration::from_millis(spec.connect_timeout_ms);
    let stream = dial(target.addr, spec.source_for(conn), timeout).await?;
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
pub fn ws_err(e: tokio_tungstenite::tungstenite::Error) -> ConnError {
    use tokio_tungstenite::tungstenite::Error as E;
    match e {
        E::Io(io) => ConnError::Io(io),
        E::ConnectionClosed | E::AlreadyClosed => ConnError::ClosedByServer,
        other => ConnError::Io(std::io::Error::other(other.to_string())),
    }
}

/// Maps a server close frame: 1012/1001 are shutdown/restart, 1008 a slow-consumer kick.
pub fn close_error(
    frame: Option<&tokio_tungstenite::tungstenite::protocol::CloseFrame>,
) -> ConnError {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    match frame.map(|f| f.code) {
        Some(CloseCode::Restart | CloseCode::Away) => ConnError::ServerShutdown,
        Some(CloseCode::Policy) => ConnError::ServerDisconnect,
        _ => ConnError::ClosedByServer,
    }
}

/// Handles what a client does the same whatever it reads (a ping answered, a close or an
/// error ending the connection) and hands back text and binary frames.
pub async fn frame(
    ws: &mut Ws,
    msg: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
) -> Result<Option<Message>, ConnError> {
    match msg {
        Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => Ok(Some(m)),
        // tungstenite queued the pong; push it out now
        Some(Ok(Message::Ping(_))) => ws.flush().await.map(|()| None).map_err(ws_err),
        Some(Ok(Message::Close(frame))) => Err(close_error(frame.as_ref())),
        Some(Ok(_)) => Ok(None),
        Some(Err(e)) => Err(ws_err(e)),
        None => Err(ConnError::ClosedByServer),
    }
}

/// A WebSocket client's end: counted ([`Life::end`]), and closed politely when it stayed
/// until told to close. Returns whether it stayed.
pub async fn end(
    life: Life<'_>,
    mut ws: Ws,
    result: &Result<(), ConnError>,
    stopped: bool,
) -> bool {
    let stopped = life.end(result, stopped);
    if stopped {
        let _ = tokio::time::timeout(Duration::from_millis(200), ws.close(None)).await;
    }
    stopped
}

async fn open(
    ctx: &ConnCtx,
    conn: u64,
    raw: bool,
    init: Option<&str>,
    topics: &[String],
) -> Result<Ws, ConnError> {
    let mut ws = handshake(ctx, conn).await?;
    if raw {
        if let Some(frame) = init {
            ws.send(Message::Text(frame.to_owned().into()))
                .await
                .map_err(ws_err)?;
        }
        return Ok(ws);
    }
    if topics.is_empty() {
        return Ok(ws);
    }
    ws.send(Message::Text(subscribe_frame(topics).into()))
        .await
        .map_err(ws_err)?;
    let wait = Duration::from_millis(ctx.spec.subscribe_timeout_ms);
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
    match acked {
        Ok(Ok(())) => Ok(ws),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ConnError::SubscribeTimeout),
    }
}

/// Runs one WebSocket subscriber.
pub async fn run(
    ctx: Arc<ConnCtx>,
    conn: u64,
    role: Role,
    raw: bool,
    init: Option<String>,
) -> ConnOutcome {
    let spec = &ctx.spec;
    let stats = &ctx.stats;
    let life = Life::begin(&ctx, conn, role);
    let churn = life.churn();
    let topics: Vec<(u32, String)> = if raw {
        Vec::new()
    } else {
        spec.topics
            .topics_for(conn)
            .into_iter()
            .map(|i| (i, spec.topics.name(i)))
            .collect()
    };
    let names: Vec<String> = topics.iter().map(|(_, n)| n.clone()).collect();
    let limit = Duration::from_millis(
        spec.connect_timeout_ms + if raw { 0 } else { spec.subscribe_timeout_ms },
    );
    let Some(mut ws) = life
        .open(limit, open(&ctx, conn, raw, init.as_deref(), &names))
        .await
    else {
        return ConnOutcome::default();
    };
    let hint = conn as usize;
    let cohort = life.cohort();
    let mut rx = Receiver::new(stats.clone(), hint, topics, churn, raw);
    let hold = hold_timer(role);
    tokio::pin!(hold);
    let mut stopped = false;
    let mut result: Result<(), ConnError> = Ok(());
    while result.is_ok() {
        tokio::select! {
            biased;
            _ = ctx.stop.cancelled() => { stopped = true; break; }
            _ = &mut hold => { stopped = true; break; }
            msg = ws.next() => {
                let now = unix_micros();
                match frame(&mut ws, msg).await {
                    Ok(Some(Message::Text(t))) => {
                        if raw {
                            rx.on_message(None, t.as_bytes(), now);
                        } else {
                            match classify(&t) {
                                ServerFrame::Message { topic, .. } => rx.on_message(topic, t.as_bytes(), now),
                                ServerFrame::Lost { topic } => rx.on_lost(topic),
                                ServerFrame::Error => stats.error(ErrorKind::ServerErrorFrame),
                                ServerFrame::Subscribed | ServerFrame::Pong(_) => {}
                                ServerFrame::Unknown => stats.error(ErrorKind::BadFrame),
                            }
                        }
                        rx.flush();
                    }
                    Ok(Some(Message::Binary(b))) => {
                        if raw {
                            rx.on_message(None, &b, now);
                            rx.flush();
                        } else {
                            stats.error(ErrorKind::BadFrame);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => result = Err(e),
                }
            }
        }
    }
    let stopped = end(life, ws, &result, stopped).await;
    ConnOutcome {
        ready: true,
        cohort,
        stayed: stopped,
        topics: if churn { Vec::new() } else { rx.into_topics() },
        echo: None,
    }
}
