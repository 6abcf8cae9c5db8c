//! A WebSocket session: `subscribe` with the client's cursors, then messages; a `ping` every
//! few seconds so that a stalled connection shows as silence.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

use super::{Bases, Decoded, Dial, End, Event, STALL, Sink, decode};
use crate::conn::dial::dial;
use crate::conn::ws::ws_config;

/// How often the client pings (Herald answers `pong`).
const PING_EVERY: Duration = Duration::from_secs(4);

pub(crate) fn subscribe_frame(d: &Dial<'_>) -> String {
    let mut v =
        serde_json::json!({ "type": "subscribe", "topics": d.topics, "cursors": d.cursors });
    if d.delta {
        v["delta"] = "fossil".into();
    }
    v.to_string()
}

/// Runs one WebSocket session until `until`, `stop`, or a failure.
pub(crate) async fn run(
    d: Dial<'_>,
    until: Instant,
    stop: &CancellationToken,
    sink: &mut (dyn Sink + Send),
) -> End {
    let Ok(stream) = dial(d.target.addr, None, d.connect_timeout).await else {
        return End::Connect;
    };
    let Ok(request) = d.target.ws_url().into_client_request() else {
        return End::Broken;
    };
    let handshake = tokio_tungstenite::client_async_with_config(
        request,
        stream,
        Some(ws_config(16 * 1024, 1 << 20)),
    );
    let mut ws = match tokio::time::timeout(d.connect_timeout, handshake).await {
        Ok(Ok((ws, _))) => ws,
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(_))) => return End::Status,
        _ => return End::Connect,
    };
    if ws.send(Message::text(subscribe_frame(&d))).await.is_err() {
        return End::Connect;
    }
    let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    let mut subscribed = false;
    let mut bases = Bases::new(d.delta);
    let end = loop {
        tokio::select! {
            _ = stop.cancelled() => break End::Stopped,
            _ = tokio::time::sleep_until(until) => break End::Scheduled,
            _ = ping.tick() => {
                if ws.send(Message::text(r#"{"type":"ping"}"#)).await.is_err() {
                    break End::Broken;
                }
            }
            r = tokio::time::timeout(STALL, ws.next()) => match r {
                Err(_) => break if subscribed { End::Stall } else { End::Connect },
                Ok(None) | Ok(Some(Ok(Message::Close(_)))) => break End::Closed,
                Ok(Some(Err(_))) => break End::Broken,
                Ok(Some(Ok(Message::Text(t)))) => match decode(t.as_bytes(), false, &mut bases) {
                    Decoded::Events(ev) => ev.into_iter().for_each(|e| sink.event(e)),
                    Decoded::Subscribed(ev) => {
                        ev.into_iter().for_each(|e| sink.event(e));
                        if !subscribed {
                            subscribed = true;
                            sink.opened();
                        }
                    }
                    Decoded::Error => break End::Status,
                    Decoded::DeltaFailed => {
                        sink.event(Event::DeltaFailed);
                        break End::Delta;
                    }
                    Decoded::Other => {}
                },
                Ok(Some(Ok(_))) => {}
            },
        }
    };
    // best effort, bounded: a stalled peer must not hold the client
    let _ = tokio::time::timeout(Duration::from_millis(200), ws.close(None)).await;
    end
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::target::parse_target;

    #[test]
    fn subscribe_carries_the_cursors() {
        let t = parse_target("ws://127.0.0.1:8080", "/v1/ws", false).unwrap();
        let topics = vec!["a".to_owned()];
        let mut cursors = BTreeMap::new();
        cursors.insert("a".to_owned(), "e-3".to_owned());
        let d = Dial {
            target: &t,
            topics: &topics,
            cursors: &cursors,
            connect_timeout: Duration::from_secs(1),
            delta: false,
        };
        let v: serde_json::Value = serde_json::from_str(&subscribe_frame(&d)).unwrap();
        assert_eq!(v["cursors"]["a"], "e-3");
        assert_eq!(v["topics"][0], "a");
        assert!(v.get("delta").is_none());
        let v: serde_json::Value =
            serde_json::from_str(&subscribe_frame(&Dial { delta: true, ..d })).unwrap();
        assert_eq!(v["delta"], "fossil");
    }
}
