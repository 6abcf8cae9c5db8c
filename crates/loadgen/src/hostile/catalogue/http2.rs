//! The HTTP/2 attacks (issue 39, item 5), on the public listener over TLS (`--h2-url`):
//! streams owed large answers and read no further than their first window, rapid reset,
//! header lists far over the limit, and floods of control frames. Herald serves at most 100
//! streams per connection and answers from shared frames, so the first costs it little; the
//! soak checks its RSS and an honest HTTP/2 client's requests meanwhile.
//!
//! The large answers are those of the soak's big topics ([`super::trust::BIG_TOPICS`],
//! about 60 KB a message): 16 messages, ~1 MiB, per stream.

use super::trust::BIG_TOPICS;
use super::{Action, Attack, Exp, Listener, PlanEnv, Planned};
use crate::hostile::http2::H2Attack;
use crate::hostile::http2::frames::Control;

/// Every stream answered in time answered 200.
const ANSWERED: &[Exp] = &[Exp::Status(200)];
/// The request after the flood answered, or the connection ended for the abuse (GOAWAY
/// `ENHANCE_YOUR_CALM`).
const SURVIVED: &[Exp] = &[Exp::Status(200), Exp::H2GoAway(0xb)];
/// The request after the resets answered; or the connection ended for the abuse: hyper's
/// `h2` sends GOAWAY `ENHANCE_YOUR_CALM` past 20 streams reset before they were accepted and
/// closes, so the client, still sending, sees a reset, or the GOAWAY, or its last request
/// refused (`REFUSED_STREAM`, above the GOAWAY's last stream).
const RESET_ENDED: &[Exp] = &[
    Exp::Status(200),
    Exp::H2GoAway(0xb),
    Exp::H2Reset(0x7),
    Exp::Reset,
    Exp::Closed,
];
/// A header list just over the limit: 431.
const HEADERS_431: &[Exp] = &[Exp::Status(431)];
/// A header list far over the limit: hyper's `h2` stops decoding a block past
/// `SETTINGS_MAX_HEADER_LIST_SIZE` instead of buffering it, ends the connection (GOAWAY
/// `COMPRESSION_ERROR`, or `ENHANCE_YOUR_CALM` for too many CONTINUATION frames) and closes
/// it while the client is still sending: a reset, or the GOAWAY, or 431.
const HEADERS_ENDED: &[Exp] = &[
    Exp::Status(431),
    Exp::H2GoAway(0x9),
    Exp::H2GoAway(0xb),
    Exp::Reset,
    Exp::Closed,
];

/// Streams per connection: Herald's `SETTINGS_MAX_CONCURRENT_STREAMS`.
const STREAMS: usize = 100;
/// Streams opened and cancelled per rapid-reset attack (hyper's `h2` ends a connection
/// past 20 reset before it accepted them).
const RESETS: usize = 200;
/// Control frames per flood.
const FLOOD: usize = 10_000;
/// An honest request: an empty long-poll answered at once.
const HONEST: &str = "/v1/poll?topic=hostile-h2&timeout=0";

/// Plans variant `v` of one of the HTTP/2 attacks.
pub(super) fn plan(attack: Attack, v: u64, env: &PlanEnv) -> Planned {
    let big = BIG_TOPICS[(v / 2) as usize % BIG_TOPICS.len()];
    let (variant, expect, a) = match attack {
        Attack::H2Streams => {
            let (variant, path) = if v.is_multiple_of(2) {
                (
                    "100_history_answers_unread",
                    format!("/v1/topics/{big}/history?limit=16"),
                )
            } else {
                (
                    "100_poll_answers_unread",
                    format!("/v1/poll?topic={big}&last=16&timeout=0"),
                )
            };
            let hold = env.attack_timeout.mul_f64(0.3);
            let a = H2Attack::Streams {
                path,
                streams: STREAMS,
                hold,
            };
            (variant, ANSWERED, a)
        }
        Attack::H2RapidReset => {
            let (variant, path) = if v.is_multiple_of(2) {
                (
                    "200_history_cancelled",
                    format!("/v1/topics/{big}/history?limit=16"),
                )
            } else {
                ("200_sse_cancelled", "/v1/sse?topic=hostile-h2".to_owned())
            };
            let a = H2Attack::RapidReset {
                path,
                resets: RESETS,
                honest: HONEST.into(),
            };
            (variant, RESET_ENDED, a)
        }
        Attack::H2HeaderList => {
            let (variant, expect, headers) = match v % 3 {
                0 => ("one_100k_header", HEADERS_ENDED, vec![pad(0, 100 * 1024)]),
                1 => (
                    "2000_headers",
                    HEADERS_ENDED,
                    (0..2000).map(|i| pad(i, 50)).collect(),
                ),
                _ => ("one_17k_header", HEADERS_431, vec![pad(0, 17 * 1024)]),
            };
            let a = H2Attack::HeaderList {
                path: HONEST.into(),
                headers,
            };
            (variant, expect, a)
        }
        Attack::H2ControlFlood => {
            let (variant, frame) = if v.is_multiple_of(2) {
                ("10k_settings", Control::Settings)
            } else {
                ("10k_pings", Control::Ping)
            };
            let a = H2Attack::Flood {
                frame,
                count: FLOOD,
                honest: HONEST.into(),
            };
            (variant, SURVIVED, a)
        }
        _ => unreachable!("{} is not an HTTP/2 attack", attack.name()),
    };
    Planned {
        listener: Listener::H2,
        ..Planned::public(variant, expect, Action::H2(a))
    }
}

/// Header `x-pad-<i>` of `size` bytes of value.
fn pad(i: usize, size: usize) -> (String, String) {
    (format!("x-pad-{i}"), "p".repeat(size))
}

#[cfg(test)]
mod tests {
    use super::super::test_env;
    use super::*;

    fn planned(a: Attack, v: u64) -> (Planned, H2Attack) {
        let p = plan(a, v, &test_env());
        let Action::H2(h) = p.action.clone() else {
            panic!("{:?}", p.action)
        };
        (p, h)
    }

    #[test]
    fn streams_fill_the_server_limit_with_large_answers_held_in_time() {
        for v in 0..4 {
            let (p, h) = planned(Attack::H2Streams, v);
            assert_eq!(p.listener, Listener::H2);
            let H2Attack::Streams {
                path,
                streams,
                hold,
            } = h
            else {
                panic!()
            };
            assert_eq!(streams, 100);
            assert!(hold < test_env().attack_timeout);
            assert!(path.contains("big") && path.contains("16"), "{path}");
        }
    }

    #[test]
    fn resets_floods_and_header_lists_end_with_an_answer_or_a_refusal() {
        let (_, h) = planned(Attack::H2RapidReset, 1);
        let H2Attack::RapidReset {
            path,
            resets,
            honest,
        } = h
        else {
            panic!()
        };
        assert_eq!((path.as_str(), resets), ("/v1/sse?topic=hostile-h2", 200));
        assert!(honest.starts_with("/v1/poll?"));
        let (p, h) = planned(Attack::H2ControlFlood, 1);
        assert!(matches!(
            h,
            H2Attack::Flood {
                frame: Control::Ping,
                count: 10_000,
                ..
            }
        ));
        assert_eq!(p.expect, SURVIVED);
        for v in 0..3 {
            let (p, h) = planned(Attack::H2HeaderList, v);
            let H2Attack::HeaderList { headers, .. } = h else {
                panic!()
            };
            let bytes: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
            assert!(bytes > 16 * 1024, "{}: {bytes}", p.variant);
            assert!(!p.expect.contains(&Exp::Status(200)));
        }
    }
}
