//! A feed linked to its topic's fan-out (direct delivery).

use super::*;

#[tokio::test]
async fn an_idle_linked_feed_is_written_by_the_publisher_and_counted_once() {
    let a = topic("a", 8, 8);
    let socket = Socket::with_room(usize::MAX);
    let mut feed = linked(&a, &socket);
    assert_eq!(a.subscriber_count(), 1);
    publish(&a, 3);
    assert_eq!(
        socket.frames(),
        (vec!["0".into(), "1".into(), "2".into()], String::new())
    );
    assert!(
        drain(&mut feed).is_empty(),
        "the task is not given them again"
    );
    let positions: Vec<_> = feed.positions().map(|(t, c)| format!("{t}={c}")).collect();
    assert_eq!(positions, ["a=5-3"]);
    assert_eq!(a.subscriber_count(), 1);
    drop(feed);
    assert_eq!(a.subscriber_count(), 0);
    publish(&a, 1);
    assert_eq!(
        socket.frames().0.len(),
        3,
        "nothing is written after the end"
    );
}

#[tokio::test]
async fn a_socket_that_would_block_parks_the_feed_which_resumes_from_history() {
    let a = topic("a", 8, 8);
    let first = a.publish(None, Payload::from_value(&serde_json::json!(0)));
    let frame_len = first.sse_frame().len();
    // Room for one frame and a half of the next (frames are the same length here).
    let socket = Socket::with_room(frame_len + frame_len / 2);
    let mut feed = linked(&a, &socket);
    publish(&a, 4); // data 0..=3 at seq 2..=5
    let (whole, tail) = socket.frames();
    assert_eq!(whole, ["0"]);
    assert!(!tail.is_empty(), "half a frame is on the wire");
    assert!(!feed.is_direct());
    // The task writes the rest of the frame first, then the messages from history.
    let got = drain(&mut feed);
    assert!(got[0].starts_with("rest "), "{got:?}");
    assert_eq!(format!("{tail}{}", &got[0][5..]), first_frame_of(&a, 3));
    assert_eq!(got[1..], ["a:4", "a:5"]);
    // Caught up and idle: direct again, and the next message is written by the publisher.
    assert!(feed.try_next().is_none());
    assert!(feed.is_direct());
    socket
        .room
        .store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
    publish(&a, 1);
    let written = String::from_utf8(socket.written.lock().clone()).unwrap();
    assert!(written.ends_with(&first_frame_of(&a, 6)), "{written}");
    assert!(drain(&mut feed).is_empty());
}

fn first_frame_of(t: &Topic, seq: u64) -> String {
    let page = t.history(None, 64);
    let m = page
        .messages
        .iter()
        .find(|m| m.cursor().seq == seq)
        .unwrap();
    String::from_utf8(m.sse_frame().to_vec()).unwrap()
}

#[tokio::test]
async fn park_hands_the_stream_to_the_task_until_it_is_idle_again() {
    let a = topic("a", 8, 8);
    let socket = Socket::with_room(usize::MAX);
    let mut feed = linked(&a, &socket);
    publish(&a, 1);
    assert_eq!(feed.park(), None);
    assert!(!feed.is_direct());
    publish(&a, 2);
    assert_eq!(
        socket.frames().0,
        ["0"],
        "parked: the publisher does not write"
    );
    assert_eq!(drain(&mut feed), ["a:2", "a:3"]);
    assert!(feed.is_direct());
    assert_eq!(a.subscriber_count(), 1);
}

#[tokio::test]
async fn a_second_topic_ends_direct_delivery() {
    let (a, b) = (topic("a", 8, 8), topic("b", 8, 8));
    let socket = Socket::with_room(usize::MAX);
    let mut feed = linked(&a, &socket);
    publish(&a, 1);
    feed.subscribe(b.clone(), None).unwrap();
    assert!(!feed.is_direct());
    publish(&a, 1);
    publish(&b, 1);
    let mut got = drain(&mut feed);
    got.sort();
    assert_eq!(got, ["a:2", "b:1"]);
    assert_eq!(socket.frames().0, ["0"]);
    assert_eq!(a.subscriber_count(), 1);
}

#[test]
fn publishers_on_several_threads_are_written_in_order_once() {
    let a = topic("a", 1024, 1024);
    let sockets: Vec<Socket> = (0..8).map(|_| Socket::with_room(usize::MAX)).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let mut feeds: Vec<Feed> = sockets.iter().map(|s| linked(&a, s)).collect();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| publish(&a, 100));
        }
    });
    for (socket, feed) in sockets.iter().zip(&mut feeds) {
        // Written by the fan-out, or (had it parked) by the task: together, every
        // position once, in order.
        let text = String::from_utf8(socket.written.lock().clone()).unwrap();
        let mut seqs: Vec<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("id: a="))
            .map(|id| id.parse::<Cursor>().unwrap().seq)
            .collect();
        seqs.extend(drain(feed).iter().map(|e| e[2..].parse::<u64>().unwrap()));
        assert_eq!(seqs, (1..=400).collect::<Vec<_>>());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_topic_is_fanned_out_by_cohorts_on_several_tasks_in_order() {
    let a = topic("a", 64, 64);
    let sockets: Vec<Socket> = (0..2500).map(|_| Socket::with_room(usize::MAX)).collect();
    let _feeds: Vec<Feed> = sockets.iter().map(|s| linked(&a, s)).collect();
    assert_eq!(a.subscriber_count(), 2500);
    publish(&a, 20);
    let expected: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for socket in &sockets {
        while socket.frames().0.len() < 20 {
            assert!(
                std::time::Instant::now() < deadline,
                "a cohort was not fanned out"
            );
            tokio::task::yield_now().await;
        }
        assert_eq!(socket.frames(), (expected.clone(), String::new()));
    }
}
