use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use herald_core::LagPolicy;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::common::*;

const MESSAGES: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_clients_each_get_every_message_once_in_order() {
    let gw = spawn_gateway(test_config()).await;
    let mut sse_clients = Vec::new();
    for _ in 0..150 {
        let mut sse = SseClient::connect(&gw, "topic=fan", None).await;
        sse.next_block().await.unwrap();
        sse_clients.push(sse);
    }
    let mut ws_clients = Vec::new();
    for _ in 0..150 {
        let mut ws = ws_connect(&gw).await;
        ws_subscribe(&mut ws, &["fan"]).await;
        ws_clients.push(ws);
    }
    let sse_tasks: Vec<_> = sse_clients
        .into_iter()
        .map(|mut sse| {
            tokio::spawn(async move {
                let mut got = Vec::new();
                while got.len() < MESSAGES {
                    got.push(
                        sse.next_event()
                            .await
                            .unwrap()
                            .data
                            .unwrap()
                            .parse::<usize>()
                            .unwrap(),
                    );
                }
                got
            })
        })
        .collect();
    let ws_tasks: Vec<_> = ws_clients
        .into_iter()
        .map(|mut ws| {
            tokio::spawn(async move {
                let mut got = Vec::new();
                while got.len() < MESSAGES {
                    got.push(ws_next(&mut ws).await["data"].as_u64().unwrap() as usize);
                }
                got
            })
        })
        .collect();
    for i in 0..MESSAGES {
        publish(&gw, "fan", json!(i)).await;
    }
    let expected: Vec<usize> = (0..MESSAGES).collect();
    for task in sse_tasks.into_iter().chain(ws_tasks) {
        assert_eq!(task.await.unwrap(), expected);
    }
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_is_disconnected_without_holding_back_the_others() {
    let mut config = test_config();
    config.topics.channel_capacity = 8;
    config.topics.history_len = 8;
    config.lag_policy = LagPolicy::Disconnect;
    config.limits.write_timeout = Duration::from_secs(2);
    let gw = spawn_gateway(config).await;

    let mut slow = ws_connect(&gw).await;
    ws_subscribe(&mut slow, &["big"]).await;
    let mut fast = ws_connect(&gw).await;
    ws_subscribe(&mut fast, &["big"]).await;
    let fast_task = tokio::spawn(async move {
        let mut got = Vec::new();
        while got.len() < 150 {
            got.push(ws_next(&mut fast).await["data"]["n"].as_u64().unwrap());
        }
        got
    });
    let pad = "x".repeat(32 * 1024);
    for n in 0..150u64 {
        publish(&gw, "big", json!({"n": n, "pad": pad})).await;
    }
    let got = tokio::time::timeout(Duration::from_secs(30), fast_task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, (0..150).collect::<Vec<_>>());

    // The slow client, reading at last, finds that it was cut off with a reason (or, if the
    // server gave up on a blocked write, that the connection is gone).
    let mut received = 0;
    let ended_with = loop {
        match tokio::time::timeout(WAIT, slow.next())
            .await
            .expect("slow client stalled")
        {
            Some(Ok(WsMessage::Text(_))) => received += 1,
            Some(Ok(WsMessage::Close(frame))) => {
                break frame.map(|f| (u16::from(f.code), f.reason.to_string()));
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => break None,
        }
    };
    assert!(received < 150, "the slow client was not cut off");
    // A close frame cannot pass a write the client blocks; when it does arrive, it says why.
    if let Some((code, reason)) = ended_with {
        assert_eq!((code, reason.as_str()), (1008, "slow consumer"));
    }
    // Either way the server decided it, once: the gateway's own count (a lag is the topic's
    // namespace's, `default`; a blocked write no topic's, `none`).
    let counted = |namespace: &'static str| {
        let series = format!(
            r#"herald_slow_consumer_events_total{{outcome="disconnected",namespace="{namespace}"}}"#
        );
        let gw = &gw;
        async move { metric(gw, &series).await }
    };
    assert_eq!(counted("default").await + counted("none").await, 1.0);
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sse_consumer_is_dropped_after_the_write_timeout() {
    use tokio::io::AsyncWriteExt as _;
    let mut config = test_config();
    config.limits.write_timeout = Duration::from_millis(500);
    let gw = spawn_gateway(config).await;
    // Connects and never reads.
    let mut stuck = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    stuck
        .write_all(b"GET /v1/sse?topic=slow HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut fast = SseClient::connect(&gw, "topic=slow", None).await;
    fast.next_block().await.unwrap();
    let subscribers = || topic_subscribers(&gw, "slow");
    eventually(WAIT, || async { subscribers().await == 2 }).await;
    let pad = "x".repeat(60_000);
    for n in 0..120 {
        publish(&gw, "slow", json!({"n": n, "pad": pad})).await;
        let event = fast.next_event().await.unwrap();
        assert!(event.data.unwrap().starts_with(&format!("{{\"n\":{n},")));
    }
    // The stuck client's socket buffers are full: it is dropped, the fast one stays.
    eventually(WAIT, || async { subscribers().await == 1 }).await;
    publish(&gw, "slow", json!("still here")).await;
    assert_eq!(
        fast.next_event().await.unwrap().data.as_deref(),
        Some("still here")
    );
    drop(stuck);
    gw.stop().await.unwrap();
}

/// Publishes `count` messages of about 50 KB to `topic`, numbered from `from`: more than a
/// loopback socket's buffers hold, so a client that does not read makes the server's writes
/// block part-way through a frame.
async fn flood(gw: &herald_gateway::Gateway, topic: &str, from: u64, count: u64) {
    let pad = "y".repeat(50_000);
    for n in from..from + count {
        publish(gw, topic, json!({"n": n, "pad": pad})).await;
    }
}

fn stall_config() -> herald_gateway::config::Config {
    let mut config = test_config();
    config.topics.history_len = 512;
    config.topics.channel_capacity = 512;
    config.limits.write_timeout = Duration::from_secs(30);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_frames_stay_whole_when_a_stalled_client_pings_and_reads_again() {
    let gw = spawn_gateway(stall_config()).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["stall"]).await;
    // Idle now: the topic's publisher writes to the socket itself.
    publish(&gw, "stall", json!({"n": 0})).await;
    assert_eq!(ws_next(&mut ws).await["data"]["n"], 0);
    flood(&gw, "stall", 1, 300).await;
    // The server's side is full: the client's requests are answered between the frames the
    // fan-out left half-written and the rest.
    ws_send(&mut ws, json!({"type": "ping", "data": "p1"})).await;
    ws.send(WsMessage::Ping("raw".into())).await.unwrap();
    let (mut got, mut pong) = (Vec::new(), false);
    while got.len() < 300 || !pong {
        let frame = ws_next(&mut ws).await;
        match frame["type"].as_str() {
            Some("message") => got.push(frame["data"]["n"].as_u64().unwrap()),
            Some("pong") => {
                assert_eq!(frame["data"], "p1");
                pong = true;
            }
            other => panic!("unexpected frame {other:?}: {frame}"),
        }
    }
    assert_eq!(got, (1..=300).collect::<Vec<_>>());
    // Caught up: written directly again.
    publish(&gw, "stall", json!({"n": 301})).await;
    assert_eq!(ws_next(&mut ws).await["data"]["n"], 301);
    assert_eq!(topic_subscribers(&gw, "stall").await, 1);
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_that_stalls_and_reads_again_gets_every_event_whole() {
    let gw = spawn_gateway(stall_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=stall", None).await;
    sse.next_block().await.unwrap();
    publish(&gw, "stall", json!({"n": 0})).await;
    let first = sse.next_event().await.unwrap();
    assert!(first.data.unwrap().starts_with(r#"{"n":0"#));
    // The client's body is not read while the flood goes out.
    flood(&gw, "stall", 1, 300).await;
    for n in 1..=301u64 {
        if n == 301 {
            publish(&gw, "stall", json!({"n": n})).await;
        }
        let event = sse.next_event().await.unwrap();
        let data: serde_json::Value = serde_json::from_str(&event.data.unwrap()).unwrap();
        assert_eq!(data["n"], n);
        let id = event.id.unwrap();
        assert!(
            id.starts_with("stall=") && id.ends_with(&format!("-{}", n + 1)),
            "{id}"
        );
    }
    assert_eq!(topic_subscribers(&gw, "stall").await, 1);
    gw.stop().await.unwrap();
}
