use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use super::*;
use crate::TopicName;
use crate::batch::{self, BatchFormat};
use crate::cursor::Cursor;
use crate::message::Message;
use crate::message::Payload;
use crate::topic::{Topic, TopicConfig};

/// A socket that takes everything.
#[derive(Default)]
struct Taken(Mutex<Vec<u8>>);

impl DirectWriter for Taken {
    fn frame<'m>(&self, message: &'m Message, _delta: bool) -> &'m Bytes {
        message.sse_frame()
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn counter(&self) -> &'static dyn DeliveryCounter {
        &NoCount
    }
}

struct NoCount;

impl DeliveryCounter for NoCount {
    fn delivered(&self, _n: u64, _bytes: u64, _latency: std::time::Duration) {}
}

#[test]
fn a_frame_of_the_transport_s_own_is_written_while_direct_without_parking() {
    let topic = Topic::with_epoch(TopicName::new("t").unwrap(), &TopicConfig::default(), 5);
    let socket = Arc::new(DirectSub::new(Taken::default()));
    let link: Arc<DirectSub> = socket.clone();
    assert!(
        !link.write_while_direct(b"ping"),
        "not attached: written the ordinary way"
    );
    assert!(topic.direct.attach(&link, Cursor::new(5, 0)));
    assert!(
        !link.write_while_direct(b"ping"),
        "attached, not direct yet"
    );
    assert!(link.go_direct(Cursor::new(5, 0), false, false));
    assert!(link.write_while_direct(b"ping"));
    assert!(link.is_direct(), "still direct");
    assert_eq!(&socket.writer().0.lock()[..], b"ping");
    // A rest the fan-out left goes first: the frame is not written now.
    link.state.lock().rest = Some(Bytes::from_static(b"rest"));
    assert!(!link.write_while_direct(b"ping"));
    assert_eq!(&socket.writer().0.lock()[..], b"ping");
    topic.direct.detach(&link);
}

#[test]
fn a_fan_out_still_walking_an_earlier_attachment_does_not_write_to_the_link() {
    let topic = |name| Topic::with_epoch(TopicName::new(name).unwrap(), &TopicConfig::default(), 5);
    let (a, b) = (topic("a"), topic("b"));
    let socket = Arc::new(DirectSub::new(Taken::default()));
    let link: Arc<DirectSub> = socket.clone();
    assert!(a.direct.attach(&link, Cursor::new(5, 0)));
    assert!(
        !b.direct.attach(&link, Cursor::new(5, 0)),
        "a link is attached to one topic at a time"
    );
    // A fan-out of `a` took its list, then the connection moved to `b` and went direct.
    let stale = a.direct.running_for_test()[0].snapshot();
    a.direct.detach(&link);
    assert_eq!((a.direct.len(), b.direct.len()), (0, 0));
    assert!(b.direct.attach(&link, Cursor::new(5, 0)));
    assert!(link.go_direct(Cursor::new(5, 0), false, false));
    assert_eq!(b.direct.direct_now(), 1);
    // `a`'s first message has the cursor `b`'s next one will have: not written, and the
    // link is not parked for it.
    let message = a.publish(None, Payload::from_value(&serde_json::json!("from a")));
    let offer = |entry: &Entry| {
        entry
            .sub
            .offer(
                &message,
                Cursor::new(5, 0),
                Instant::now(),
                entry.generation,
            )
            .is_some()
    };
    assert!(!offer(&stale[0]));
    assert!(socket.writer().0.lock().is_empty());
    assert!(link.is_direct());
    let fresh = b.direct.running_for_test()[0].snapshot();
    assert!(offer(&fresh[0]));
    assert!(!socket.writer().0.lock().is_empty());
    b.direct.detach(&link);
    assert_eq!((b.direct.len(), b.direct.direct_now()), (0, 0));
    assert!(!link.is_direct());
}

/// A socket that takes up to `room` bytes, counts its writes, and takes batches in `form`.
struct Batching {
    written: Mutex<Vec<u8>>,
    writes: AtomicUsize,
    room: AtomicUsize,
    form: Option<BatchFormat>,
}

impl Batching {
    fn new(form: Option<BatchFormat>, room: usize) -> Arc<DirectSub<Self>> {
        Arc::new(DirectSub::new(Self {
            written: Mutex::default(),
            writes: AtomicUsize::new(0),
            room: AtomicUsize::new(room),
            form,
        }))
    }
}

impl DirectWriter for Batching {
    fn frame<'m>(&self, message: &'m Message, delta: bool) -> &'m Bytes {
        let sent = crate::message::Outbound::new(message, delta);
        match self.form {
            Some(BatchFormat::Msgpack) => sent.ws_msgpack_wire_frame(),
            _ => sent.ws_wire_frame(),
        }
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.try_write_vectored(&[io::IoSlice::new(buf)])
    }

    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        let room = self.room.load(Ordering::SeqCst);
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let n = room.min(all.len());
        self.room.fetch_sub(n, Ordering::SeqCst);
        self.written.lock().extend_from_slice(&all[..n]);
        Ok(n)
    }

    fn counter(&self) -> &'static dyn DeliveryCounter {
        &NoCount
    }

    fn batch(&self) -> Option<BatchFormat> {
        self.form
    }
}

/// The (opcode, payload) of each whole server frame in `wire`.
fn ws_frames(wire: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let (len, head) = match wire[at + 1] {
            126 => (
                usize::from(u16::from_be_bytes([wire[at + 2], wire[at + 3]])),
                4,
            ),
            127 => (
                usize::try_from(u64::from_be_bytes(
                    wire[at + 2..at + 10].try_into().unwrap(),
                ))
                .unwrap(),
                10,
            ),
            n => (usize::from(n), 2),
        };
        out.push((wire[at], wire[at + head..at + head + len].to_vec()));
        at += head + len;
    }
    assert_eq!(at, wire.len(), "a frame cut short");
    out
}

/// A topic (deltas on when `delta`) with `socket` attached and direct at its head.
fn direct_topic<W: DirectWriter>(
    socket: &Arc<DirectSub<W>>,
    delta: bool,
) -> (Topic, Arc<DirectSub>) {
    let config = TopicConfig {
        delta,
        ..TopicConfig::default()
    };
    let topic = Topic::with_epoch(TopicName::new("t").unwrap(), &config, 5);
    let link: Arc<DirectSub> = socket.clone();
    assert!(topic.direct.attach(&link, Cursor::new(5, 0)));
    assert!(link.go_direct(Cursor::new(5, 0), delta, false));
    (topic, link)
}

fn publish_unsent(topic: &Topic, n: usize) -> Vec<Arc<Message>> {
    (0..n)
        .map(|i| topic.publish_unsent(None, Payload::from_value(&serde_json::json!({"n": i}))))
        .collect()
}

#[test]
fn a_burst_reaches_a_batching_subscriber_in_one_batch_frame() {
    let socket = Batching::new(Some(BatchFormat::Json), usize::MAX);
    let (topic, link) = direct_topic(&socket, false);
    let sent = publish_unsent(&topic, 5);
    assert!(
        socket.writer().written.lock().is_empty(),
        "nothing before the fan-out"
    );
    topic.fan_out();
    assert_eq!(
        socket.writer().writes.load(Ordering::SeqCst),
        1,
        "one write"
    );
    let frames = ws_frames(&socket.writer().written.lock());
    assert_eq!(frames.len(), 1, "one frame");
    assert_eq!(frames[0].0, 0x81, "text");
    let batch: Vec<serde_json::Value> = serde_json::from_slice(&frames[0].1).unwrap();
    let want: Vec<serde_json::Value> = sent
        .iter()
        .map(|m| serde_json::from_slice(m.ws_frame()).unwrap())
        .collect();
    assert_eq!(batch, want);
    assert!(link.is_direct(), "still direct");
    assert_eq!(link.position(), sent[4].cursor());
    // One message alone goes as its own frame.
    socket.writer().written.lock().clear();
    let one = topic.publish(None, Payload::from_value(&serde_json::json!("one")));
    assert_eq!(
        &socket.writer().written.lock()[..],
        &one.ws_wire_frame()[..]
    );
    topic.direct.detach(&link);
}

#[test]
fn a_burst_to_a_subscriber_without_batches_is_one_write_of_its_frames() {
    let socket = Batching::new(None, usize::MAX);
    let (topic, link) = direct_topic(&socket, false);
    let sent = publish_unsent(&topic, 5);
    topic.fan_out();
    assert_eq!(
        socket.writer().writes.load(Ordering::SeqCst),
        1,
        "one write"
    );
    let want: Vec<u8> = sent
        .iter()
        .flat_map(|m| m.ws_wire_frame().to_vec())
        .collect();
    assert_eq!(*socket.writer().written.lock(), want);
    topic.direct.detach(&link);
}

#[test]
fn a_long_burst_is_cut_into_batches_of_at_most_max_messages() {
    let socket = Batching::new(Some(BatchFormat::Msgpack), usize::MAX);
    let (topic, link) = direct_topic(&socket, false);
    let n = batch::MAX_MESSAGES + 36;
    let sent = publish_unsent(&topic, n);
    topic.fan_out();
    let frames = ws_frames(&socket.writer().written.lock());
    let sizes: Vec<usize> = frames
        .iter()
        .map(|(opcode, payload)| {
            assert_eq!(*opcode, 0x82, "binary");
            crate::msgpack::array_items(payload).unwrap().len()
        })
        .collect();
    assert_eq!(sizes, [batch::MAX_MESSAGES, 36]);
    assert_eq!(link.position(), sent[n - 1].cursor());
    topic.direct.detach(&link);
}

#[test]
fn a_batch_the_socket_takes_in_part_leaves_the_rest_to_the_task() {
    let socket = Batching::new(Some(BatchFormat::Json), 100);
    let (topic, link) = direct_topic(&socket, false);
    let sent = publish_unsent(&topic, 8);
    topic.fan_out();
    assert!(!link.is_direct(), "parked");
    let handover = link.take();
    assert_eq!(
        handover.position,
        sent[7].cursor(),
        "the whole run is the task's to finish"
    );
    let mut wire = socket.writer().written.lock().clone();
    assert_eq!(wire.len(), 100);
    wire.extend_from_slice(&handover.rest.expect("the rest of the batch"));
    let frames = ws_frames(&wire);
    assert_eq!(frames.len(), 1);
    let batch: Vec<serde_json::Value> = serde_json::from_slice(&frames[0].1).unwrap();
    assert_eq!(batch.len(), 8);
    topic.direct.detach(&link);
}

#[test]
fn deltas_inside_a_batch_apply_each_to_the_element_before() {
    let socket = Batching::new(Some(BatchFormat::Json), usize::MAX);
    let (topic, link) = direct_topic(&socket, true);
    let state = |i: usize| serde_json::json!({"score": [i, 2], "clock": "the same long text every time, a base worth a delta"});
    let sent: Vec<Arc<Message>> = (0..4)
        .map(|i| topic.publish_unsent(None, Payload::from_value(&state(i))))
        .collect();
    topic.fan_out();
    let frames = ws_frames(&socket.writer().written.lock());
    assert_eq!(frames.len(), 1);
    let batch: Vec<serde_json::Value> = serde_json::from_slice(&frames[0].1).unwrap();
    // The first is full (the subscriber held no base), each later one a delta.
    for (i, (got, message)) in batch.iter().zip(&sent).enumerate() {
        let want = crate::message::Outbound::new(message, i > 0).ws_frame();
        assert_eq!(
            got,
            &serde_json::from_slice::<serde_json::Value>(want).unwrap()
        );
        if i > 0 {
            assert_ne!(want, message.ws_frame(), "message {i} went as a delta");
        }
    }
    topic.direct.detach(&link);
}

#[test]
fn a_burst_longer_than_the_fan_out_queue_is_fanned_out_as_the_queue_fills() {
    // A queue of 4 and a history of 2: a burst of 10 fanned out only at its end would
    // overflow the queue, park the subscriber and lose what history no longer holds.
    let socket = Batching::new(Some(BatchFormat::Json), usize::MAX);
    let config = TopicConfig {
        channel_capacity: 4,
        history_len: 2,
        ..TopicConfig::default()
    };
    let topic = Arc::new(Topic::with_epoch(TopicName::new("t").unwrap(), &config, 5));
    let link: Arc<DirectSub> = socket.clone();
    assert!(topic.direct.attach(&link, Cursor::new(5, 0)));
    assert!(link.go_direct(Cursor::new(5, 0), false, false));
    let mut unsent = crate::Unsent::default();
    for n in 0..10 {
        topic.publish_unsent(None, Payload::from_value(&serde_json::json!({ "n": n })));
        unsent.add(&topic);
    }
    drop(unsent);
    assert!(link.is_direct(), "never parked");
    assert_eq!(link.position(), Cursor::new(5, 10));
    let sizes: Vec<usize> = ws_frames(&socket.writer().written.lock())
        .iter()
        .map(|(_, payload)| {
            serde_json::from_slice::<Vec<serde_json::Value>>(payload).map_or(1, |batch| batch.len())
        })
        .collect();
    assert_eq!(sizes, [4, 4, 2]);
    topic.direct.detach(&link);
}
