//! Attacks made of WebSocket frames after a valid handshake: invalid UTF-8 and JSON, unknown
//! types, binary, fragmented, oversized frames, ping floods, huge subscribes.

use super::{Attack, PlanEnv, Planned, ws};
use crate::hostile::exp::Exp;
use crate::hostile::raw::{self, Rng, op};

pub(super) const CLOSE_1007: &[Exp] = &[Exp::WsClose(1007)];
pub(super) const CLOSE_1009: &[Exp] = &[Exp::WsClose(1009)];
pub(super) const PROTOCOL: &[Exp] = &[Exp::WsClose(1002), Exp::Closed];
pub(super) const BAD_JSON: &[Exp] = &[Exp::WsError("bad_json")];
pub(super) const BAD_FRAME: &[Exp] = &[Exp::WsError("bad_frame")];
pub(super) const ANY_ANSWER: &[Exp] = &[
    Exp::WsError("bad_json"),
    Exp::WsError("bad_frame"),
    Exp::WsReply("pong"),
];
pub(super) const UNSUPPORTED: &[Exp] = &[Exp::WsError("unsupported_frame")];
pub(super) const PONG: &[Exp] = &[Exp::WsReply("pong")];
/// A flood is answered in full, or the flooder is closed for its rate (1008, policy).
pub(super) const FLOOD: &[Exp] = &[Exp::WsReply("pong"), Exp::WsClose(1008)];
pub(super) const TOO_MANY: &[Exp] = &[Exp::WsError("too_many_topics")];
pub(super) const UNSUBSCRIBED: &[Exp] = &[Exp::WsReply("unsubscribed")];

pub(super) fn text(payload: &[u8], rng: &mut Rng) -> Vec<u8> {
    raw::frame(op::TEXT, true, payload, rng.mask())
}

/// Topic names 0..n in base 36: short, distinct, valid.
pub(super) fn short_names(n: usize) -> Vec<String> {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    (0..n)
        .map(|mut i| {
            let mut s = Vec::new();
            loop {
                s.push(DIGITS[i % 36]);
                i /= 36;
                if i == 0 {
                    break;
                }
            }
            s.reverse();
            String::from_utf8(s).unwrap_or_default()
        })
        .collect()
}

pub(super) fn ping_json(tag: &str) -> Vec<u8> {
    format!(
        r#"{{"type":"ping","data":{{"hostile":"{tag}","pad":"{}"}}}}"#,
        "p".repeat(64)
    )
    .into_bytes()
}

/// Plans variant `v` of a frame attack.
pub(super) fn plan(attack: Attack, v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    match attack {
        Attack::WsInvalidUtf8 => ws_invalid_utf8(v, rng),
        Attack::WsInvalidJson => ws_invalid_json(v, rng),
        Attack::WsUnknownType => ws_unknown_type(v, rng),
        Attack::WsBinaryFrame => ws_binary_frame(v, rng),
        Attack::WsFragmented => ws_fragmented(v, rng),
        Attack::WsOversizedFrame => ws_oversized_frame(v, env, rng),
        Attack::WsPingFlood => ws_ping_flood(v, env, rng),
        Attack::WsSubscribe10k => ws_subscribe_10k(v, rng),
        _ => unreachable!("{} is not a frame attack", attack.name()),
    }
}

/// Plans variant `v` of `ws_invalid_utf8`.
fn ws_invalid_utf8(v: u64, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let (variant, frames) = match v % 5 {
        0 => ("ff_fe", text(b"\xff\xfe", rng)),
        1 => (
            "overlong_slash",
            text(b"{\"type\":\"ping\",\"x\":\"\xc0\xaf\"}", rng),
        ),
        2 => ("surrogate", text(b"a\xed\xa0\x80b", rng)),
        3 => ("truncated_sequence", text(b"abc\xe2\x82", rng)),
        _ => {
            let mut f = raw::frame(op::TEXT, false, b"abc\xe2", rng.mask());
            raw::push_frame(&mut f, op::CONT, true, b"\x28\xa1", rng.mask());
            ("invalid_across_fragments", f)
        }
    };
    p(variant, CLOSE_1007, ws(frames, &[]))
}

/// Plans variant `v` of `ws_invalid_json`.
fn ws_invalid_json(v: u64, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let (variant, body, expect) = match v % 6 {
        0 => ("not_json", b"{not json".to_vec(), BAD_JSON),
        1 => ("empty", Vec::new(), BAD_JSON),
        2 => ("truncated", br#"{"type":"#.to_vec(), BAD_JSON),
        3 => (
            "unbalanced_nesting_20k",
            "[".repeat(20_000).into_bytes(),
            BAD_JSON,
        ),
        4 => (
            "trailing_garbage",
            br#"{"type":"ping"} trailing"#.to_vec(),
            BAD_JSON,
        ),
        _ => {
            // valid JSON nested 20,000 deep where the server keeps raw JSON (`data`):
            // any answer will do, as long as the parser does not recurse that deep
            let body = format!(
                r#"{{"type":"ping","data":{}{}}}"#,
                "[".repeat(20_000),
                "]".repeat(20_000)
            );
            ("deep_nesting_in_data_20k", body.into_bytes(), ANY_ANSWER)
        }
    };
    p(variant, expect, ws(text(&body, rng), &["pong"]))
}

/// Plans variant `v` of `ws_unknown_type`.
fn ws_unknown_type(v: u64, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let (variant, body): (&str, &[u8]) = match v % 5 {
        0 => ("unknown", br#"{"type":"hack","topics":["a"]}"#),
        1 => ("wrong_case", br#"{"type":"SUBSCRIBE","topics":["a"]}"#),
        2 => ("missing_field", br#"{"type":"subscribe"}"#),
        3 => ("unknown_field", br#"{"type":"ping","x":1}"#),
        _ => ("type_not_string", br#"{"type":42}"#),
    };
    p(variant, BAD_FRAME, ws(text(body, rng), &[]))
}

/// Plans variant `v` of `ws_binary_frame`.
fn ws_binary_frame(v: u64, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let (variant, body) = if v.is_multiple_of(2) {
        ("random_512", rng.bytes(512))
    } else {
        ("json_as_binary", br#"{"type":"ping"}"#.to_vec())
    };
    let f = raw::frame(op::BINARY, true, &body, rng.mask());
    p(variant, UNSUPPORTED, ws(f, &[]))
}

/// Plans variant `v` of `ws_fragmented`.
fn ws_fragmented(v: u64, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let msg = ping_json("fragmented");
    match v % 5 {
        0 => {
            let (a, rest) = msg.split_at(10);
            let (b, c) = rest.split_at(20);
            let mut f = raw::frame(op::TEXT, false, a, rng.mask());
            raw::push_frame(&mut f, op::CONT, false, b, rng.mask());
            raw::push_frame(&mut f, op::CONT, true, c, rng.mask());
            p("three_fragments", PONG, ws(f, &["pong"]))
        }
        1 => {
            let (a, b) = msg.split_at(15);
            let mut f = raw::frame(op::TEXT, false, a, rng.mask());
            raw::push_frame(&mut f, op::PING, true, b"mid", rng.mask());
            raw::push_frame(&mut f, op::CONT, true, b, rng.mask());
            p("ping_between_fragments", PONG, ws(f, &["pong"]))
        }
        2 => {
            let mut f = Vec::new();
            for (i, byte) in msg.iter().enumerate() {
                let opcode = if i == 0 { op::TEXT } else { op::CONT };
                let fin = i + 1 == msg.len();
                raw::push_frame(&mut f, opcode, fin, std::slice::from_ref(byte), rng.mask());
            }
            // more fragments than a server may accept for one message (Herald: 64)
            p("one_byte_fragments", FLOOD, ws(f, &["pong"]))
        }
        3 => {
            let (a, _) = msg.split_at(10);
            let mut f = raw::frame(op::TEXT, false, a, rng.mask());
            raw::push_frame(&mut f, op::TEXT, true, &msg, rng.mask());
            p("interrupted_by_new_message", PROTOCOL, ws(f, &["pong"]))
        }
        _ => {
            let f = raw::frame(op::CONT, true, &msg, rng.mask());
            p("orphan_continuation", PROTOCOL, ws(f, &["pong"]))
        }
    }
}

/// Plans variant `v` of `ws_oversized_frame`.
fn ws_oversized_frame(v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let max = env.max_ws_message;
    match v % 4 {
        0 => {
            let body = format!(r#"{{"type":"ping","data":"{}"}}"#, "x".repeat(max + 1024));
            p(
                "single_frame_over_max",
                CLOSE_1009,
                ws(text(body.as_bytes(), rng), &["pong"]),
            )
        }
        1 => {
            let piece = vec![b'y'; 16 * 1024];
            let n = max / piece.len() + 2;
            let mut f = Vec::new();
            for i in 0..n {
                let opcode = if i == 0 { op::TEXT } else { op::CONT };
                raw::push_frame(&mut f, opcode, i + 1 == n, &piece, rng.mask());
            }
            p("fragments_over_max", CLOSE_1009, ws(f, &["pong"]))
        }
        2 => {
            let mut f = Vec::new();
            raw::frame_header(&mut f, op::TEXT, true, 1 << 40, rng.mask());
            f.extend(rng.bytes(1024));
            p("claims_1_tib", CLOSE_1009, ws(f, &["pong"]))
        }
        _ => {
            let f = raw::frame(op::PING, true, &[b'z'; 126], rng.mask());
            p("control_frame_126_bytes", PROTOCOL, ws(f, &["pong"]))
        }
    }
}

/// Plans variant `v` of `ws_ping_flood`.
fn ws_ping_flood(v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let (variant, n, size) = if v.is_multiple_of(2) {
        ("small_pings", env.ping_flood, 8)
    } else {
        ("max_size_pings", env.ping_flood / 5, 125)
    };
    let payload = vec![b'p'; size];
    let mut f = Vec::with_capacity(n * (size + 6) + 200);
    for _ in 0..n {
        raw::push_frame(&mut f, op::PING, true, &payload, rng.mask());
    }
    raw::push_frame(
        &mut f,
        op::TEXT,
        true,
        &ping_json("after-flood"),
        rng.mask(),
    );
    p(variant, FLOOD, ws(f, &["pong"]))
}

/// Plans variant `v` of `ws_subscribe_10k`.
fn ws_subscribe_10k(v: u64, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let (variant, kind, names, expect, want): (_, _, _, _, &'static [&'static str]) = match v % 3 {
        0 => (
            "10k_distinct",
            "subscribe",
            short_names(10_000),
            TOO_MANY,
            &["subscribed"],
        ),
        1 => (
            "10k_same",
            "subscribe",
            vec!["a".to_owned(); 10_000],
            TOO_MANY,
            &["subscribed"],
        ),
        _ => (
            "unsubscribe_10k",
            "unsubscribe",
            short_names(10_000),
            UNSUBSCRIBED,
            &["unsubscribed"],
        ),
    };
    let body = serde_json::json!({ "type": kind, "topics": names }).to_string();
    p(variant, expect, ws(text(body.as_bytes(), rng), want))
}
