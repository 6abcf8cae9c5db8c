//! A [`Session`]'s life driven over an in-memory pipe: no socket, no server.

use std::time::SystemTime;

use herald_core::{Payload, TopicName};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use super::session::{Opened, Session};
use super::*;
use crate::app::AppState;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tungstenite::Message as WsMessage;
use tungstenite::protocol::Role;
use tungstenite::protocol::frame::CloseFrame;

use crate::limits::Rate;

struct Client {
    ws: WebSocketStream<DuplexStream>,
    state: AppState,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn connect(config: crate::config::Config, who: crate::auth::Identity) -> Client {
    let (state, shutdown) = AppState::for_test(config);
    let (server, client) = tokio::io::duplex(64 * 1024);
    let ws = &state.config().ws;
    let server = inbound::Inbound::new(server, Rate::new(ws.inbound_rate, ws.inbound_burst));
    let server = socket::WebSocket::new(server, Role::Server, None);
    let client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
    let task = tokio::spawn(Session::new(state.clone(), server, who, Opened::default()).run());
    Client {
        ws: client,
        state,
        shutdown,
        task,
    }
}

impl Client {
    async fn send(&mut self, frame: Value) {
        self.ws
            .send(WsMessage::Text(frame.to_string().into()))
            .await
            .unwrap();
    }

    /// The next text frame, as JSON (pings skipped).
    async fn next(&mut self) -> Value {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(5), self.ws.next())
                .await
                .expect("a frame in time")
                .expect("the connection is open")
                .unwrap();
            match frame {
                WsMessage::Text(text) => return serde_json::from_str(&text).unwrap(),
                WsMessage::Ping(_) | WsMessage::Pong(_) => {}
                other => panic!("expected a text frame, got {other:?}"),
            }
        }
    }

    /// The close frame the server sends, and the connection's task ending after it.
    async fn closed(mut self) -> (u16, String) {
        let close = loop {
            let frame = tokio::time::timeout(Duration::from_secs(5), self.ws.next())
                .await
                .expect("a close in time");
            match frame {
                Some(Ok(WsMessage::Close(Some(frame)))) => {
                    break (u16::from(frame.code), frame.reason.to_string());
                }
                Some(Ok(_)) => {}
                other => panic!("expected a close frame, got {other:?}"),
            }
        };
        drop(self.ws);
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the connection ends")
            .unwrap();
        close
    }
}

#[tokio::test]
async fn a_subscriber_gets_its_messages_and_its_close_back() {
    let mut client = connect(crate::config::Config::default(), Default::default()).await;
    client
        .send(json!({"type": "subscribe", "topics": ["news"]}))
        .await;
    let subscribed = client.next().await;
    assert_eq!(subscribed["type"], "subscribed");
    assert_eq!(subscribed["topics"], json!(["news"]));
    let topic = TopicName::new("news").unwrap();
    let published = client
        .state
        .registry()
        .publish(&topic, None, Payload::from_value(&json!({"n": 1})))
        .unwrap();
    let message = client.next().await;
    assert_eq!(message["type"], "message");
    assert_eq!(message["data"], json!({"n": 1}));
    assert_eq!(message["id"], published.cursor().to_string());

    client
        .ws
        .send(WsMessage::Close(Some(CloseFrame {
            code: 4321.into(),
            reason: "bye".into(),
        })))
        .await
        .unwrap();
    assert_eq!(client.closed().await.0, 4321, "the client's own code back");
}

#[tokio::test]
async fn commands_are_answered_and_bad_frames_get_an_error() {
    let mut client = connect(crate::config::Config::default(), Default::default()).await;
    client.send(json!({"type": "ping"})).await;
    assert_eq!(client.next().await["type"], "pong");
    client
        .ws
        .send(WsMessage::Text("not json".into()))
        .await
        .unwrap();
    let error = client.next().await;
    assert_eq!(
        (error["type"].clone(), error["code"].clone()),
        (json!("error"), json!("bad_json"))
    );
    client
        .ws
        .send(WsMessage::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    assert_eq!(client.next().await["code"], "unsupported_frame");
    client
        .send(json!({"type": "subscribe", "topics": ["no spaces"]}))
        .await;
    assert_eq!(client.next().await["type"], "error");
    // Still open and answering.
    client.send(json!({"type": "ping"})).await;
    assert_eq!(client.next().await["type"], "pong");
}

#[tokio::test]
async fn a_drain_closes_with_1012() {
    let client = connect(crate::config::Config::default(), Default::default()).await;
    client.shutdown.cancel();
    assert_eq!(client.closed().await.0, close_code::RESTART);
}

#[tokio::test]
async fn an_expired_token_closes_with_1008() {
    let mut who = crate::auth::Identity::default();
    who.expires = Some(SystemTime::now() + Duration::from_millis(200));
    let client = connect(crate::config::Config::default(), who).await;
    assert_eq!(
        client.closed().await,
        (close_code::POLICY, "token expired".to_string())
    );
}

#[tokio::test]
async fn a_silent_client_is_closed_after_the_idle_timeout() {
    let mut config = crate::config::Config::default();
    config.ws.ping_interval = Duration::from_millis(100);
    config.ws.idle_timeout = Duration::from_millis(300);
    let client = connect(config, Default::default()).await;
    // The client reads nothing (so answers no ping) and sends nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        client.closed().await,
        (close_code::GOING_AWAY, "idle timeout".to_string())
    );
}
