//! What one request of a client may make the gateway hold or spend, driven as a hostile
//! client would: long-poll answers and history pages bounded in bytes on every path that
//! serves them (a client asking for everything gets a page and `more`, and paging gets every
//! message exactly once), and replies on a client's own WebSocket never compressed or
//! converted at a cost out of proportion to sending them as they are.

use bytes::Bytes;
use herald_gateway::{Config, Gateway};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::common::*;

/// `limits.max_answer_bytes` in these tests.
const BUDGET: usize = 64 * 1024;
/// Messages per topic, and topics.
const PER_TOPIC: usize = 12;
const TOPICS: [&str; 4] = ["big0", "big1", "big2", "big3"];

#[derive(Clone, Copy, Debug)]
enum Via {
    /// Plain HTTP/1.1 (hyper and the router).
    Http1,
    /// TLS, HTTP/2 (hyper's HTTP/2 and the router).
    TlsH2,
}

fn config(via: Via) -> Config {
    let mut config = match via {
        Via::Http1 => test_config(),
        Via::TlsH2 => crate::tls::tls_config(),
    };
    config.limits.max_answer_bytes = BUDGET;
    config.limits.max_payload_bytes = 256 * 1024;
    config
}

/// A message of about 16 KB.
fn big(i: usize) -> Value {
    json!({"i": i, "pad": "x".repeat(16_000)})
}

/// Fills each topic's history with [`PER_TOPIC`] large messages, and `huge` with one
/// message larger than the budget.
async fn fill(gw: &Gateway) {
    for i in 0..PER_TOPIC {
        for topic in TOPICS {
            publish(gw, topic, big(i)).await;
        }
    }
    publish(gw, "huge", json!("y".repeat(2 * BUDGET))).await;
}

/// `GET path` on the public listener over `via`: the status and the whole body.
async fn fetch(gw: &Gateway, via: Via, path: &str) -> (u16, Bytes) {
    let response = match via {
        Via::Http1 => {
            let request = hyper::Request::get(path)
                .header("host", "localhost")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let tcp = TcpStream::connect(gw.public_addr).await.unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .unwrap();
            tokio::spawn(conn);
            sender.send_request(request).await.unwrap()
        }
        Via::TlsH2 => {
            let request = hyper::Request::get(format!("https://localhost{path}"))
                .body(Empty::<Bytes>::new())
                .unwrap();
            crate::tls::h2_request(gw, request).await
        }
    };
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

/// The most bytes an answer of [`big`] messages may hold: the budget, one more message (the
/// one that reached it), and the answer's own fields.
const MOST: usize = BUDGET + 17_000 + 1024;

/// Each message's `(topic, data.i)` in `answer`.
fn seen(answer: &Value) -> Vec<(String, u64)> {
    answer["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let topic = m["topic"].as_str().unwrap().to_string();
            (topic, m["data"]["i"].as_u64().unwrap_or(u64::MAX))
        })
        .collect()
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

async fn a_poll_for_everything_gets_a_bounded_answer(via: Via) {
    let gw = spawn_gateway(config(via)).await;
    fill(&gw).await;
    let topics: String = TOPICS.iter().map(|t| format!("topic={t}&")).collect();
    // ~90 bytes asking for every message held: one answer within the budget, and `more`.
    let (status, body) = fetch(&gw, via, &format!("/v1/poll?{topics}last=256&timeout=0")).await;
    assert_eq!(status, 200);
    assert!(body.len() <= MOST, "{via:?}: {} bytes", body.len());
    let mut answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["more"], true, "{via:?}");
    let mut got = seen(&answer);
    assert!(!got.is_empty() && got.len() < PER_TOPIC * TOPICS.len());
    // Paging with the cursor gives every message exactly once, in order per topic.
    for _ in 0..100 {
        if answer["more"] == false {
            break;
        }
        let cursor = enc(answer["cursor"].as_str().unwrap());
        let query = format!("/v1/poll?{topics}last=256&timeout=0&cursor={cursor}");
        let (status, body) = fetch(&gw, via, &query).await;
        assert_eq!(status, 200);
        assert!(body.len() <= MOST, "{} bytes", body.len());
        answer = serde_json::from_slice(&body).unwrap();
        got.extend(seen(&answer));
    }
    assert_eq!(answer["more"], false, "{via:?}: paging ends");
    for topic in TOPICS {
        let of_topic: Vec<u64> = got
            .iter()
            .filter(|(t, _)| t == topic)
            .map(|(_, i)| *i)
            .collect();
        assert_eq!(
            of_topic,
            (0..PER_TOPIC as u64).collect::<Vec<_>>(),
            "{topic}"
        );
    }
    // One message larger than the budget still goes through, whole.
    let (_, body) = fetch(&gw, via, "/v1/poll?topic=huge&last=5&timeout=0").await;
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["messages"][0]["data"], json!("y".repeat(2 * BUDGET)));
    assert!(body.len() <= 3 * BUDGET + 1024, "{} bytes", body.len());
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_poll_for_everything_gets_a_bounded_answer_over_http1() {
    a_poll_for_everything_gets_a_bounded_answer(Via::Http1).await;
}

#[tokio::test]
async fn a_poll_for_everything_gets_a_bounded_answer_over_http2() {
    a_poll_for_everything_gets_a_bounded_answer(Via::TlsH2).await;
}

/// Pages through `big0`'s history from `first` (a history path without `since`), each page
/// within the budget; returns every `data.i` seen.
async fn page_through(first: impl AsyncFn(&str) -> Bytes) -> Vec<u64> {
    let mut got = Vec::new();
    let mut query = "limit=1000".to_string();
    for _ in 0..100 {
        let body = first(&query).await;
        assert!(body.len() <= MOST, "{} bytes", body.len());
        let page: Value = serde_json::from_slice(&body).unwrap();
        got.extend(seen(&page).into_iter().map(|(_, i)| i));
        if page["more"] == false {
            return got;
        }
        query = format!("limit=1000&since={}", page["next"].as_str().unwrap());
    }
    panic!("paging did not end");
}

async fn a_history_page_is_bounded(via: Via) {
    let gw = spawn_gateway(config(via)).await;
    fill(&gw).await;
    let all: Vec<u64> = (0..PER_TOPIC as u64).collect();
    // Public listener, over `via`.
    let public = page_through(async |query: &str| {
        let (status, body) = fetch(&gw, via, &format!("/v1/topics/big0/history?{query}")).await;
        assert_eq!(status, 200);
        body
    })
    .await;
    assert_eq!(public, all, "{via:?}");
    // Admin listener.
    let admin = gw.admin_addr;
    let from_admin = page_through(async |query: &str| {
        let url = format!("http://{admin}/v1/topics/big0/history?{query}");
        let resp = get(url.as_str(), &[]).await;
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap()
    })
    .await;
    assert_eq!(from_admin, all);
    // One message larger than the budget: a page of it alone.
    let (_, body) = fetch(&gw, via, "/v1/topics/huge/history").await;
    let page: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(page["messages"][0]["data"], json!("y".repeat(2 * BUDGET)));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_history_page_is_bounded_on_both_listeners_over_http1() {
    a_history_page_is_bounded(Via::Http1).await;
}

#[tokio::test]
async fn a_history_page_is_bounded_on_both_listeners_over_http2() {
    a_history_page_is_bounded(Via::TlsH2).await;
}

/// The process's resident memory, in bytes (Linux).
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// One HTTP/2 connection over TLS whose client never reads past the first flow-control
/// window (64 KiB for the connection and for each stream).
async fn stingy_h2(gw: &Gateway) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    let tls = crate::tls::tls_connect(gw, &[b"h2"]).await;
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .adaptive_window(false)
            .handshake(TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

/// Issue 39, item 5: an HTTP/2 connection may hold 100 streams, each owed a ~1 MiB poll
/// answer or history page; 4 connections × 100 streams whose client never reads past the
/// first window cost the node what the answers' own fields take, not 400 copies of 1 MiB,
/// because the answers are the messages' shared frames (`transport::answer`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_owed_large_answers_hold_shared_frames_not_copies() {
    let mut config = crate::tls::tls_config();
    config.limits.max_payload_bytes = 256 * 1024;
    let gw = spawn_gateway(config).await;
    // ~1.1 MiB of history: every answer below is a whole 1 MiB budget.
    for i in 0..70 {
        publish(&gw, "owed", big(i)).await;
    }
    let paths = [
        "/v1/topics/owed/history?limit=1000",
        "/v1/poll?topic=owed&last=1000&timeout=0",
    ];
    // One of each read whole first: the answer is ~1 MiB, and what one costs is warmed up.
    for path in paths {
        let (status, body) = fetch(&gw, Via::TlsH2, path).await;
        assert_eq!(status, 200);
        assert!(body.len() > 1_000_000, "{path}: {} bytes", body.len());
    }
    let before = resident();
    let (mut held, mut senders) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        let sender = stingy_h2(&gw).await;
        let asked = (0..100).map(|i| {
            let mut sender = sender.clone();
            let request = hyper::Request::get(format!("https://localhost{}", paths[i % 2]))
                .body(Empty::<Bytes>::new())
                .unwrap();
            async move {
                sender.ready().await.unwrap();
                sender.send_request(request).await.unwrap()
            }
        });
        for response in futures_util::future::join_all(asked).await {
            assert_eq!(response.status(), 200);
            held.push(response); // its body never read
        }
        senders.push(sender);
    }
    // The answers are all made (the heads came with them); what is left is what they hold.
    let grown = resident().saturating_sub(before);
    eprintln!(
        "400 streams owed ~1 MiB each: the process grew by {:.1} MiB",
        grown as f64 / f64::from(1 << 20)
    );
    assert!(
        grown < 48 << 20,
        "400 unread ~1 MiB answers grew the process by {grown} bytes: copies, not shared frames"
    );
    drop((held, senders));
    gw.stop().await.unwrap();
}
