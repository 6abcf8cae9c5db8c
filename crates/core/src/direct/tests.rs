use super::*;
use crate::TopicName;
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
