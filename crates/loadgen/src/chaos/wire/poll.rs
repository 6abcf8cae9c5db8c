//! A long-poll session: polls on one keep-alive connection, each with the resume list the
//! last answer gave, until the leg's time is up.

use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use serde_json::value::RawValue;

use super::{
    Bases, Decoded, Dial, End, Event, Sink, decode, decode_value, report_resume_list, resume_list,
};
use crate::publish::http::{PostError, Poster};

/// Seconds a poll is held when nothing is ready.
const HOLD_S: u64 = 5;

#[derive(Deserialize)]
struct Answer {
    /// Kept as text: a delta's base is the exact text of the data before it.
    messages: Vec<Box<RawValue>>,
    #[serde(default)]
    lost: Vec<serde_json::Value>,
    cursor: String,
    disconnect: Option<serde_json::Value>,
}

/// The first poll of a session is answered at once (`timeout=0`), so that being back is
/// known without waiting for a message; the next ones are held.
fn path(d: &Dial<'_>, cursor: &str, first: bool) -> String {
    let hold = if first {
        "0".to_owned()
    } else {
        HOLD_S.to_string()
    };
    let mut params: Vec<(&str, &str)> = d.topics.iter().map(|t| ("topic", t.as_str())).collect();
    if !cursor.is_empty() {
        params.push(("cursor", cursor));
    }
    params.push(("timeout", &hold));
    if d.delta {
        params.push(("delta", "fossil"));
    }
    d.target.with_query(&params)
}

/// Runs polls until `until`, `stop`, or a failure.
pub(crate) async fn run(
    d: Dial<'_>,
    until: Instant,
    stop: &CancellationToken,
    sink: &mut (dyn Sink + Send),
) -> End {
    // held polls answer within HOLD_S; a stalled link shows as a timeout
    let timeout = Duration::from_secs(HOLD_S) + d.connect_timeout;
    let mut poster = Poster::new(d.target.clone(), None, timeout);
    let mut cursor = resume_list(d.cursors);
    let mut opened = false;
    let mut bases = Bases::new(d.delta);
    loop {
        let p = path(&d, &cursor, !opened);
        let answer = tokio::select! {
            _ = stop.cancelled() => return End::Stopped,
            _ = tokio::time::sleep_until(until) => return End::Scheduled,
            r = poster.get(&p) => r,
        };
        let body = match answer {
            Ok((_, body)) => body,
            Err(PostError::Status(_)) => return End::Status,
            Err(PostError::Connect(_)) => return End::Connect,
            Err(PostError::Timeout) => return if opened { End::Stall } else { End::Connect },
            Err(PostError::Http(_)) => return if opened { End::Closed } else { End::Connect },
        };
        let Ok(a) = serde_json::from_slice::<Answer>(&body) else {
            return End::Broken;
        };
        if !opened {
            opened = true;
            sink.opened();
        }
        for l in a.lost {
            if let Decoded::Events(ev) = decode_value(l, true) {
                ev.into_iter().for_each(|e| sink.event(e));
            }
        }
        for m in a.messages {
            match decode(m.get().as_bytes(), false, &mut bases) {
                // with deltas, each message's own position is kept too: a delta that does
                // not apply ends the session mid-answer, to resume after the last one taken
                Decoded::Events(ev) => ev
                    .into_iter()
                    .filter(|e| d.delta || !matches!(e, Event::Cursor { .. }))
                    .for_each(|e| sink.event(e)),
                Decoded::DeltaFailed => {
                    sink.event(Event::DeltaFailed);
                    return End::Delta;
                }
                _ => {}
            }
        }
        report_resume_list(&a.cursor, sink);
        cursor = a.cursor;
        if a.disconnect.is_some() {
            return End::Closed;
        }
    }
}
