//! The stream's lifecycle driven without a socket: a sink in memory stands for the client.
//! The tests wait on what the client sees (a chunk written, its input read), never by polling.

use super::*;
use herald_core::{Payload, TopicName};
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A client in memory: takes chunks (or, when `stalled`, never does), may send input.
#[derive(Clone, Default)]
struct TestClient {
    chunks: Arc<Mutex<Vec<Bytes>>>,
    /// Told of every chunk taken.
    wrote: Arc<Notify>,
    stalled: bool,
    input: Arc<Mutex<Vec<usize>>>,
    /// Told when input is sent ([`TestClient::send`]).
    sent: Arc<Notify>,
    /// Told when the stream has read a piece of input.
    read: Arc<Notify>,
    aborted: Arc<AtomicBool>,
}

impl TestClient {
    /// Sends `pieces` of input (bytes each) to the stream.
    fn send(&self, pieces: impl IntoIterator<Item = usize>) {
        self.input.lock().unwrap().extend(pieces);
        self.sent.notify_one();
    }

    /// Waits until what the stream wrote contains `needle` (woken by each write).
    async fn until_written(&self, needle: &str) {
        let written = async {
            while !text(self).contains(needle) {
                // A write between the check and the wait leaves its permit: not missed.
                self.wrote.notified().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), written)
            .await
            .unwrap_or_else(|_| panic!("{needle:?} not written: {:?}", text(self)));
    }
}

impl Sink for TestClient {
    async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        if self.stalled {
            std::future::pending::<()>().await;
        }
        self.chunks.lock().unwrap().push(chunk);
        self.wrote.notify_one();
        Ok(())
    }

    async fn peer_input(&mut self) -> PeerInput {
        loop {
            let next = self.input.lock().unwrap().pop();
            if let Some(n) = next {
                self.read.notify_one();
                return PeerInput::Sent(n);
            }
            self.sent.notified().await;
        }
    }

    fn abort(&mut self) {
        self.aborted.store(true, Ordering::Release);
    }
}

fn state() -> (AppState, CancellationToken) {
    let mut config = crate::config::Config::default();
    config.limits.write_timeout = Duration::from_millis(200);
    config.sse.heartbeat = Duration::from_secs(60);
    AppState::for_test(config)
}

fn text(client: &TestClient) -> String {
    let chunks = client.chunks.lock().unwrap();
    chunks
        .iter()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect()
}

/// A stream on topic `t` for a client at 127.0.0.1 that sent no headers.
async fn open_t(state: &AppState) -> SseStream {
    open(
        state,
        &HeaderMap::new(),
        Some("topic=t"),
        [127, 0, 0, 1].into(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn delivers_then_ends_on_the_drain_with_a_retry_hint() {
    let (state, shutdown) = state();
    let sse = open_t(&state).await;
    let client = TestClient::default();
    let served = tokio::spawn(serve(client.clone(), sse, Duration::from_millis(200)));
    let topic = TopicName::new("t").unwrap();
    state
        .registry()
        .publish(
            &topic,
            None,
            Payload::from_value(&serde_json::json!({"n": 1})),
        )
        .unwrap();
    client.until_written(r#"data: {"n":1}"#).await;
    assert!(text(&client).starts_with("retry: "), "{}", text(&client));
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the stream ends on the drain")
        .unwrap();
    assert!(text(&client).contains("event: herald.shutdown"));
    assert!(!client.aborted.load(Ordering::Acquire));
}

#[tokio::test]
async fn a_client_that_takes_nothing_is_dropped_within_the_write_timeout() {
    let (state, _shutdown) = state();
    let sse = open_t(&state).await;
    let client = TestClient {
        stalled: true,
        ..Default::default()
    };
    let served = serve(client.clone(), sse, Duration::from_millis(200));
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("dropped as slow");
    assert!(
        client.aborted.load(Ordering::Acquire),
        "the body is aborted"
    );
    assert_eq!(
        state.registry().get("t").unwrap().subscriber_count(),
        0,
        "its subscription is gone"
    );
}

#[tokio::test]
async fn a_client_that_keeps_sending_is_closed() {
    let (state, _shutdown) = state();
    let sse = open_t(&state).await;
    let client = TestClient::default();
    // A few stray bytes are tolerated...
    client.send([100]);
    let served = tokio::spawn(serve(client.clone(), sse, Duration::from_millis(200)));
    tokio::time::timeout(Duration::from_secs(5), client.read.notified())
        .await
        .expect("the input is read");
    assert!(!served.is_finished());
    // ...a stream of them is not.
    client.send(std::iter::repeat_n(1024, 70));
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("closed")
        .unwrap();
}
