//! The attack catalogue: names, what each expects from a well-behaved Herald node, and the
//! exact bytes each variant sends (planned here, without I/O, so that it can be tested).

use std::time::Duration;

use super::jwt;
use super::outcome::Outcome;
use super::raw::{self, Rng, op};
use crate::target::encode_component;

/// One kind of attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attack {
    /// Request lines that are not HTTP/1.1.
    MalformedRequestLine,
    /// Bytes that are not HTTP at all (random, NUL, TLS hello, HTTP/2 preface).
    GarbageBytes,
    /// A request head over 64 KiB.
    OversizedHead,
    /// A request head trickled slower than the server's header timeout.
    Slowloris,
    /// A `Last-Event-ID` of megabytes.
    HugeLastEventId,
    /// About 8 KB of crafted resume list.
    CraftedLastEventId,
    /// SSE topic names holding control characters.
    TopicControlChars,
    /// SSE topic names with unicode look-alikes, invisible characters, invalid UTF-8.
    TopicUnicode,
    /// SSE topic names and paths with `../` segments.
    TopicPathTraversal,
    /// SSE requests naming too many topics.
    TooManyTopics,
    /// WebSocket upgrade from a forbidden browser origin (`--origin-forbidden`).
    WsBadOrigin,
    /// WebSocket upgrade with a missing or malformed `Sec-WebSocket-Key`.
    WsBadKey,
    /// WebSocket upgrade with a version other than 13.
    WsBadVersion,
    /// A text frame that is not UTF-8.
    WsInvalidUtf8,
    /// A text frame that is not JSON.
    WsInvalidJson,
    /// A JSON frame of an unknown or malformed type.
    WsUnknownType,
    /// A binary frame.
    WsBinaryFrame,
    /// Fragmented messages, valid and invalid.
    WsFragmented,
    /// A message over the server's maximum size.
    WsOversizedFrame,
    /// Thousands of pings, then an application ping that must still be answered.
    WsPingFlood,
    /// A subscribe (and an unsubscribe) naming 10,000 topics.
    WsSubscribe10k,
    /// An expired token.
    JwtExpired,
    /// A token with a forged signature.
    JwtForged,
    /// An `alg: none` token.
    JwtAlgNone,
    /// Garbage where a token should be.
    JwtGarbage,
    /// Opt-in: valid SSE subscriptions to 64 never-seen topics each (topics are server state).
    TopicSpray,
}

impl Attack {
    /// Every attack, in catalogue order.
    pub const ALL: [Attack; 26] = [
        Attack::MalformedRequestLine,
        Attack::GarbageBytes,
        Attack::OversizedHead,
        Attack::Slowloris,
        Attack::HugeLastEventId,
        Attack::CraftedLastEventId,
        Attack::TopicControlChars,
        Attack::TopicUnicode,
        Attack::TopicPathTraversal,
        Attack::TooManyTopics,
        Attack::WsBadOrigin,
        Attack::WsBadKey,
        Attack::WsBadVersion,
        Attack::WsInvalidUtf8,
        Attack::WsInvalidJson,
        Attack::WsUnknownType,
        Attack::WsBinaryFrame,
        Attack::WsFragmented,
        Attack::WsOversizedFrame,
        Attack::WsPingFlood,
        Attack::WsSubscribe10k,
        Attack::JwtExpired,
        Attack::JwtForged,
        Attack::JwtAlgNone,
        Attack::JwtGarbage,
        Attack::TopicSpray,
    ];

    /// Stable snake_case name (reports, `--attacks`).
    pub fn name(self) -> &'static str {
        match self {
            Attack::MalformedRequestLine => "malformed_request_line",
            Attack::GarbageBytes => "garbage_bytes",
            Attack::OversizedHead => "oversized_head",
            Attack::Slowloris => "slowloris",
            Attack::HugeLastEventId => "huge_last_event_id",
            Attack::CraftedLastEventId => "crafted_last_event_id",
            Attack::TopicControlChars => "topic_control_chars",
            Attack::TopicUnicode => "topic_unicode",
            Attack::TopicPathTraversal => "topic_path_traversal",
            Attack::TooManyTopics => "too_many_topics",
            Attack::WsBadOrigin => "ws_bad_origin",
            Attack::WsBadKey => "ws_bad_key",
            Attack::WsBadVersion => "ws_bad_version",
            Attack::WsInvalidUtf8 => "ws_invalid_utf8",
            Attack::WsInvalidJson => "ws_invalid_json",
            Attack::WsUnknownType => "ws_unknown_type",
            Attack::WsBinaryFrame => "ws_binary_frame",
            Attack::WsFragmented => "ws_fragmented",
            Attack::WsOversizedFrame => "ws_oversized_frame",
            Attack::WsPingFlood => "ws_ping_flood",
            Attack::WsSubscribe10k => "ws_subscribe_10k",
            Attack::JwtExpired => "jwt_expired",
            Attack::JwtForged => "jwt_forged",
            Attack::JwtAlgNone => "jwt_alg_none",
            Attack::JwtGarbage => "jwt_garbage",
            Attack::TopicSpray => "topic_spray",
        }
    }

    /// The attack called `name`.
    pub fn from_name(name: &str) -> Option<Attack> {
        Self::ALL.iter().copied().find(|a| a.name() == name)
    }

    /// Holds its connection for seconds (run by a bounded number of loops at once).
    pub fn is_slow(self) -> bool {
        matches!(self, Attack::Slowloris)
    }

    /// Part of the default catalogue (`ws_bad_origin` also needs `--origin-forbidden`).
    pub fn is_default(self) -> bool {
        !matches!(self, Attack::TopicSpray)
    }
}

/// An acceptable answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exp {
    /// This HTTP status.
    Status(u16),
    /// A close frame with this code.
    WsClose(u16),
    /// An error frame with this code.
    WsError(&'static str),
    /// A text frame of this type.
    WsReply(&'static str),
    /// The connection closed without an answer (acceptable for non-HTTP bytes and protocol
    /// violations, where there is nothing meaningful to answer).
    Closed,
}

/// Whether `o` is one of `expect`, or a refusal by the connection limits (429, 503), which is
/// a clear answer to any attack.
pub fn is_expected(expect: &[Exp], o: &Outcome) -> bool {
    if matches!(o, Outcome::Status(429 | 503)) {
        return true;
    }
    expect.iter().any(|e| match (e, o) {
        (Exp::Status(a), Outcome::Status(b)) => a == b,
        (Exp::WsClose(a), Outcome::WsClose(Some(b))) => a == b,
        (Exp::WsError(a), Outcome::WsError(b)) => *a == b.as_str(),
        (Exp::WsReply(a), Outcome::WsReply(b)) => *a == b.as_str(),
        (Exp::Closed, Outcome::Closed) => true,
        _ => false,
    })
}

/// What the attack does on the wire.
#[derive(Debug, Clone)]
pub enum Action {
    /// Send these bytes (while reading), wait for a response head.
    Http(Vec<u8>),
    /// Send `prefix`, then one byte of `trickle` every `every` until answered.
    Trickle {
        /// Sent at once.
        prefix: Vec<u8>,
        /// Trickled, cycled.
        trickle: Vec<u8>,
        /// Time between bytes.
        every: Duration,
    },
    /// A valid WebSocket handshake on `target`, then `frames`; wait for a decisive answer.
    Ws {
        /// Request target of the upgrade.
        target: String,
        /// Frames to send, already masked.
        frames: Vec<u8>,
        /// Reply types that count as the answer.
        want: &'static [&'static str],
    },
    /// A valid SSE request: expect 200, hold the stream briefly, leave.
    Hold(Vec<u8>),
}

/// One planned attack.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The variant's name.
    pub variant: &'static str,
    /// Acceptable answers.
    pub expect: &'static [Exp],
    /// What to do.
    pub action: Action,
}

/// What planning needs to know about the target and the server's limits.
#[derive(Debug, Clone)]
pub struct PlanEnv {
    /// `Host` header value.
    pub host: String,
    /// Forbidden origin, if the server has an allow-list.
    pub origin_forbidden: Option<String>,
    /// HS256 secret of the server, if known (an expired token is then validly signed).
    pub jwt_secret: Vec<u8>,
    /// The server's `ws.max_message_size`.
    pub max_ws_message: usize,
    /// Size of the huge `Last-Event-ID`.
    pub huge_bytes: usize,
    /// Pings in a flood.
    pub ping_flood: usize,
    /// Slowloris: time between bytes.
    pub slowloris_every: Duration,
    /// Unix seconds now (token expiry).
    pub now_secs: u64,
    /// Distinguishes this run's sprayed topic names.
    pub run_id: u64,
}

const HTTP_400: &[Exp] = &[Exp::Status(400)];
const HTTP_401: &[Exp] = &[Exp::Status(401)];
const HTTP_403: &[Exp] = &[Exp::Status(403)];
const HTTP_408: &[Exp] = &[Exp::Status(408)];
const HTTP_426: &[Exp] = &[Exp::Status(426)];
const HTTP_431: &[Exp] = &[Exp::Status(431), Exp::Status(414)];
const HTTP_400_404: &[Exp] = &[Exp::Status(400), Exp::Status(404)];
const HTTP_400_431: &[Exp] = &[Exp::Status(400), Exp::Status(431)];
const MALFORMED: &[Exp] = &[Exp::Status(400), Exp::Status(505)];
const NOT_HTTP: &[Exp] = &[Exp::Status(400), Exp::Closed];
const CLOSE_1007: &[Exp] = &[Exp::WsClose(1007)];
const CLOSE_1009: &[Exp] = &[Exp::WsClose(1009)];
const PROTOCOL: &[Exp] = &[Exp::WsClose(1002), Exp::Closed];
const BAD_JSON: &[Exp] = &[Exp::WsError("bad_json")];
const BAD_FRAME: &[Exp] = &[Exp::WsError("bad_frame")];
const ANY_ANSWER: &[Exp] = &[
    Exp::WsError("bad_json"),
    Exp::WsError("bad_frame"),
    Exp::WsReply("pong"),
];
const UNSUPPORTED: &[Exp] = &[Exp::WsError("unsupported_frame")];
const PONG: &[Exp] = &[Exp::WsReply("pong")];
/// A flood is answered in full, or the flooder is closed for its rate (1008, policy).
const FLOOD: &[Exp] = &[Exp::WsReply("pong"), Exp::WsClose(1008)];
const TOO_MANY: &[Exp] = &[Exp::WsError("too_many_topics")];
const UNSUBSCRIBED: &[Exp] = &[Exp::WsReply("unsubscribed")];
const STREAM: &[Exp] = &[Exp::Status(200)];

fn sse(env: &PlanEnv, query: &str, extra: &[String]) -> Vec<u8> {
    let mut h = vec!["Accept: text/event-stream".to_owned()];
    h.extend_from_slice(extra);
    raw::get(&format!("/v1/sse?{query}"), &env.host, &h)
}

fn upgrade_headers(key: Option<&str>, version: Option<&str>) -> Vec<String> {
    let mut h = vec![
        "Connection: Upgrade".to_owned(),
        "Upgrade: websocket".to_owned(),
    ];
    if let Some(v) = version {
        h.push(format!("Sec-WebSocket-Version: {v}"));
    }
    if let Some(k) = key {
        h.push(format!("Sec-WebSocket-Key: {k}"));
    }
    h
}

/// The handshake request of a `Ws` action.
pub fn ws_handshake(host: &str, target: &str, rng: &mut Rng) -> Vec<u8> {
    raw::get(
        target,
        host,
        &upgrade_headers(Some(&rng.ws_key()), Some("13")),
    )
}

fn ws(frames: Vec<u8>, want: &'static [&'static str]) -> Action {
    Action::Ws {
        target: "/v1/ws".into(),
        frames,
        want,
    }
}

fn text(payload: &[u8], rng: &mut Rng) -> Vec<u8> {
    raw::frame(op::TEXT, true, payload, rng.mask())
}

/// Topic names 0..n in base 36: short, distinct, valid.
fn short_names(n: usize) -> Vec<String> {
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

fn ping_json(tag: &str) -> Vec<u8> {
    format!(
        r#"{{"type":"ping","data":{{"hostile":"{tag}","pad":"{}"}}}}"#,
        "p".repeat(64)
    )
    .into_bytes()
}

/// Plans variant `v` of `attack`.
pub fn plan(attack: Attack, v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = |variant, expect, action| Planned {
        variant,
        expect,
        action,
    };
    let host = env.host.as_str();
    match attack {
        Attack::MalformedRequestLine => {
            let (variant, line): (&str, &[u8]) = match v % 7 {
                0 => ("no_version", b"GET /v1/sse?topic=hostile\r\n"),
                1 => ("unknown_version", b"GET /v1/sse?topic=hostile HTTP/9.9\r\n"),
                2 => (
                    "control_byte_in_method",
                    b"G\x01T /v1/sse?topic=hostile HTTP/1.1\r\n",
                ),
                3 => ("no_spaces", b"GET/v1/sse?topic=hostileHTTP/1.1\r\n"),
                4 => (
                    "extra_tokens",
                    b"GET /v1/sse?topic=hostile HTTP/1.1 extra\r\n",
                ),
                5 => (
                    "nul_in_target",
                    b"GET /v1/\x00sse?topic=hostile HTTP/1.1\r\n",
                ),
                _ => ("bad_version_lf_only", b"GET / HTTP/1.1x\n"),
            };
            let mut req = line.to_vec();
            req.extend_from_slice(format!("Host: {host}\r\n\r\n").as_bytes());
            p(variant, MALFORMED, Action::Http(req))
        }
        Attack::GarbageBytes => {
            let (variant, bytes) = match v % 4 {
                0 => {
                    let mut b = rng.bytes(4096);
                    b[0] = 0x00; // never a token character
                    ("random_4k", b)
                }
                1 => ("nul_4k", vec![0u8; 4096]),
                2 => {
                    let mut b = vec![
                        0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4, 0x03, 0x03,
                    ];
                    b.extend(rng.bytes(200));
                    ("tls_client_hello", b)
                }
                _ => {
                    let mut b = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
                    b.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
                    ("http2_preface", b)
                }
            };
            p(variant, NOT_HTTP, Action::Http(bytes))
        }
        Attack::OversizedHead => {
            let big = 70 * 1024;
            let (variant, req) = match v % 3 {
                0 => (
                    "one_70k_header",
                    sse(
                        env,
                        "topic=hostile",
                        &[format!("X-Pad: {}", "a".repeat(big))],
                    ),
                ),
                1 => (
                    "300_headers",
                    sse(
                        env,
                        "topic=hostile",
                        &(0..300)
                            .map(|i| format!("X-Pad-{i}: {}", "b".repeat(240)))
                            .collect::<Vec<_>>(),
                    ),
                ),
                _ => (
                    "70k_request_target",
                    sse(env, &format!("topic=hostile&pad={}", "c".repeat(big)), &[]),
                ),
            };
            p(variant, HTTP_431, Action::Http(req))
        }
        Attack::Slowloris => {
            let (variant, mut prefix) = match v % 3 {
                0 => (
                    "sse",
                    b"GET /v1/sse?topic=hostile-slow HTTP/1.1\r\n".to_vec(),
                ),
                1 => (
                    "ws_upgrade",
                    b"GET /v1/ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                        .to_vec(),
                ),
                _ => (
                    "poll",
                    b"GET /v1/poll?topic=hostile-slow HTTP/1.1\r\n".to_vec(),
                ),
            };
            prefix.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
            p(
                variant,
                HTTP_408,
                Action::Trickle {
                    prefix,
                    trickle: b"X-Slow: 1\r\n".to_vec(),
                    every: env.slowloris_every,
                },
            )
        }
        Attack::HugeLastEventId => {
            let list: String = "hostile=1-1,".repeat(env.huge_bytes / 12 + 1);
            if v.is_multiple_of(2) {
                let req = sse(env, "topic=hostile", &[format!("Last-Event-ID: {list}")]);
                p("header", HTTP_431, Action::Http(req))
            } else {
                let q = format!("topic=hostile&lastEventId={}", encode_component(&list));
                p("query", HTTP_431, Action::Http(sse(env, &q, &[])))
            }
        }
        Attack::CraftedLastEventId => {
            let (variant, list) = match v % 6 {
                0 => (
                    "300_entries",
                    (0..300)
                        .map(|i| format!("resume-{i:04}=9f86d081884c7d65-{i}"))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                1 => (
                    "overlong_cursors",
                    (0..140)
                        .map(|i| format!("t{i}={}-{}", "f".repeat(24), "9".repeat(30)))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                2 => (
                    "overflowing_numbers",
                    (0..200)
                        .map(|i| format!("t{i}=1ffffffffffffffff-9999999999999999999"))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                3 => ("separator_junk", ",=,==,,=-,--,=0-0,a==0-1,".repeat(330)),
                4 => (
                    "path_topics",
                    (0..250)
                        .map(|i| format!("../../../../etc/passwd-{i:03}=0-1"))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                _ => (
                    "query_300_entries",
                    (0..300)
                        .map(|i| format!("query-{i:04}=9f86d081884c7d65-{i}"))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            };
            let req = if variant == "query_300_entries" {
                sse(
                    env,
                    &format!("topic=hostile&lastEventId={}", encode_component(&list)),
                    &[],
                )
            } else {
                sse(env, "topic=hostile", &[format!("Last-Event-ID: {list}")])
            };
            p(variant, HTTP_400, Action::Http(req))
        }
        Attack::TopicControlChars => {
            let (variant, topic) = match v % 6 {
                0 => ("nul", "hostile%00x"),
                1 => ("crlf_header_injection", "hostile%0D%0ASet-Cookie:%20x=1"),
                2 => ("ansi_escape", "%1B%5B31mred"),
                3 => ("del", "hostile%7F"),
                4 => ("tab", "%09hostile"),
                _ => ("raw_control_byte", "hostile\x01x"),
            };
            p(
                variant,
                HTTP_400,
                Action::Http(sse(env, &format!("topic={topic}"), &[])),
            )
        }
        Attack::TopicUnicode => {
            let (variant, topic) = match v % 8 {
                0 => ("cyrillic_a", "%D0%B0dmin"),
                1 => ("zero_width_space", "ad%E2%80%8Bmin"),
                2 => ("rtl_override", "%E2%80%AEnimda"),
                3 => ("fullwidth", "%EF%BC%A1dmin"),
                4 => ("overlong_dot", "%C0%AE%C0%AE"),
                5 => ("lone_surrogate", "a%ED%A0%80"),
                6 => ("beyond_u10ffff", "a%F4%90%80%80"),
                _ => ("combining_mark", "e%CC%81"),
            };
            p(
                variant,
                HTTP_400,
                Action::Http(sse(env, &format!("topic={topic}"), &[])),
            )
        }
        Attack::TopicPathTraversal => {
            let (variant, target) = match v % 8 {
                0 => (
                    "encoded_dotdot_slash",
                    "/v1/sse?topic=..%2F..%2Fetc%2Fpasswd",
                ),
                1 => ("raw_dotdot_slash", "/v1/sse?topic=../../etc/passwd"),
                2 => ("backslashes", "/v1/sse?topic=..%5C..%5Cwindows"),
                3 => ("slash_in_name", "/v1/sse?topic=a%2Fb"),
                4 => ("dotdot_in_path", "/v1/sse/../sse?topic=hostile"),
                5 => ("dotdot_before_path", "/v1/../v1/sse?topic=hostile"),
                6 => ("encoded_slash_path", "/v1/sse%2F..%2F?topic=hostile"),
                _ => ("double_slash", "//v1/sse?topic=hostile"),
            };
            let req = raw::get(target, host, &["Accept: text/event-stream".to_owned()]);
            p(variant, HTTP_400_404, Action::Http(req))
        }
        Attack::TooManyTopics => {
            let (variant, n) = match v % 3 {
                0 => ("65", 65),
                1 => ("1000", 1000),
                _ => ("10000", 10_000),
            };
            let q = (0..n)
                .map(|i| format!("topic=t{i}"))
                .collect::<Vec<_>>()
                .join("&");
            p(variant, HTTP_400_431, Action::Http(sse(env, &q, &[])))
        }
        Attack::WsBadOrigin => {
            let origin = match (&env.origin_forbidden, v % 2) {
                (Some(o), 0) => o.clone(),
                _ => "null".to_owned(),
            };
            let mut h = upgrade_headers(Some(&rng.ws_key()), Some("13"));
            h.push(format!("Origin: {origin}"));
            let variant = if v.is_multiple_of(2) {
                "forbidden_origin"
            } else {
                "null_origin"
            };
            p(
                variant,
                HTTP_403,
                Action::Http(raw::get("/v1/ws", host, &h)),
            )
        }
        Attack::WsBadKey => {
            let (variant, key) = match v % 5 {
                0 => ("missing", None),
                1 => ("short_16", Some("dGhlIHNhbXBsZSBu".to_owned())),
                2 => ("long_1000", Some("A".repeat(1000))),
                3 => ("not_base64_24", Some("!!!!!!!!!!!!!!!!!!!!!!!!".to_owned())),
                _ => (
                    "decodes_to_15_bytes",
                    Some("AAAAAAAAAAAAAAAAAAAA".to_owned()),
                ),
            };
            let h = upgrade_headers(key.as_deref(), Some("13"));
            p(
                variant,
                HTTP_400,
                Action::Http(raw::get("/v1/ws", host, &h)),
            )
        }
        Attack::WsBadVersion => {
            let (variant, version) = match v % 5 {
                0 => ("v8", Some("8")),
                1 => ("v14", Some("14")),
                2 => ("missing", None),
                3 => ("list", Some("13, 8")),
                _ => ("not_a_number", Some("abc")),
            };
            let h = upgrade_headers(Some(&rng.ws_key()), version);
            p(
                variant,
                HTTP_426,
                Action::Http(raw::get("/v1/ws", host, &h)),
            )
        }
        Attack::WsInvalidUtf8 => {
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
        Attack::WsInvalidJson => {
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
        Attack::WsUnknownType => {
            let (variant, body): (&str, &[u8]) = match v % 5 {
                0 => ("unknown", br#"{"type":"hack","topics":["a"]}"#),
                1 => ("wrong_case", br#"{"type":"SUBSCRIBE","topics":["a"]}"#),
                2 => ("missing_field", br#"{"type":"subscribe"}"#),
                3 => ("unknown_field", br#"{"type":"ping","x":1}"#),
                _ => ("type_not_string", br#"{"type":42}"#),
            };
            p(variant, BAD_FRAME, ws(text(body, rng), &[]))
        }
        Attack::WsBinaryFrame => {
            let (variant, body) = if v.is_multiple_of(2) {
                ("random_512", rng.bytes(512))
            } else {
                ("json_as_binary", br#"{"type":"ping"}"#.to_vec())
            };
            let f = raw::frame(op::BINARY, true, &body, rng.mask());
            p(variant, UNSUPPORTED, ws(f, &[]))
        }
        Attack::WsFragmented => {
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
                        raw::push_frame(
                            &mut f,
                            opcode,
                            fin,
                            std::slice::from_ref(byte),
                            rng.mask(),
                        );
                    }
                    p("one_byte_fragments", PONG, ws(f, &["pong"]))
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
        Attack::WsOversizedFrame => {
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
        Attack::WsPingFlood => {
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
        Attack::WsSubscribe10k => {
            let (variant, kind, names, expect, want): (_, _, _, _, &'static [&'static str]) =
                match v % 3 {
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
        Attack::JwtExpired | Attack::JwtForged | Attack::JwtAlgNone | Attack::JwtGarbage => {
            let token = match attack {
                Attack::JwtExpired => jwt::expired(&env.jwt_secret, env.now_secs),
                Attack::JwtForged => jwt::forged(&env.jwt_secret, env.now_secs),
                Attack::JwtAlgNone => jwt::alg_none(env.now_secs, v / 3),
                _ => jwt::garbage(v / 3, rng.next_u64()),
            };
            let (variant, req) = match v % 3 {
                0 => (
                    "sse_token_param",
                    sse(
                        env,
                        &format!("topic=hostile-jwt&token={}", encode_component(&token)),
                        &[],
                    ),
                ),
                1 => (
                    "ws_token_param",
                    raw::get(
                        &format!("/v1/ws?token={}", encode_component(&token)),
                        host,
                        &upgrade_headers(Some(&rng.ws_key()), Some("13")),
                    ),
                ),
                _ => (
                    "bearer_header",
                    sse(
                        env,
                        "topic=hostile-jwt",
                        &[format!("Authorization: Bearer {token}")],
                    ),
                ),
            };
            p(variant, HTTP_401, Action::Http(req))
        }
        Attack::TopicSpray => {
            let q = (0..64)
                .map(|j| format!("topic=spray-{:x}-{v}-{j}", env.run_id))
                .collect::<Vec<_>>()
                .join("&");
            p("64_new_topics", STREAM, Action::Hold(sse(env, &q, &[])))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> PlanEnv {
        PlanEnv {
            host: "127.0.0.1:8080".into(),
            origin_forbidden: Some("https://evil.example".into()),
            jwt_secret: b"secret".to_vec(),
            max_ws_message: 64 * 1024,
            huge_bytes: 2 << 20,
            ping_flood: 10_000,
            slowloris_every: Duration::from_secs(1),
            now_secs: 1_700_000_000,
            run_id: 1,
        }
    }

    fn bytes(p: &Planned) -> usize {
        match &p.action {
            Action::Http(b) | Action::Hold(b) => b.len(),
            Action::Ws { frames, .. } => frames.len(),
            Action::Trickle { prefix, .. } => prefix.len(),
        }
    }

    #[test]
    fn names_round_trip_and_variants_plan() {
        let mut rng = Rng::new(1);
        for a in Attack::ALL {
            assert_eq!(Attack::from_name(a.name()), Some(a));
            for v in 0..12 {
                let p = plan(a, v, &env(), &mut rng);
                assert!(!p.expect.is_empty(), "{}", a.name());
                assert!(!p.variant.is_empty());
            }
        }
        assert_eq!(Attack::from_name("nope"), None);
    }

    #[test]
    fn sizes_match_the_limits_they_probe() {
        let mut rng = Rng::new(2);
        let e = env();
        for v in 0..3 {
            assert!(bytes(&plan(Attack::OversizedHead, v, &e, &mut rng)) > 64 * 1024);
        }
        for v in 0..2 {
            assert!(bytes(&plan(Attack::HugeLastEventId, v, &e, &mut rng)) >= 2 << 20);
        }
        for v in 0..6 {
            let n = bytes(&plan(Attack::CraftedLastEventId, v, &e, &mut rng));
            assert!((6_000..16 * 1024).contains(&n), "variant {v}: {n} bytes");
        }
        // 10,000 topics fit under the server's 64 KiB message limit, so the topic count is
        // what gets refused
        for v in 0..3 {
            let n = bytes(&plan(Attack::WsSubscribe10k, v, &e, &mut rng));
            assert!(n < 64 * 1024, "variant {v}: {n} bytes");
        }
        assert!(bytes(&plan(Attack::WsOversizedFrame, 0, &e, &mut rng)) > 65 * 1024);
        assert!(bytes(&plan(Attack::WsOversizedFrame, 1, &e, &mut rng)) > 64 * 1024);
        // 10,000 pings plus the final application ping
        let flood = bytes(&plan(Attack::WsPingFlood, 0, &e, &mut rng));
        assert!(flood > 10_000 * 14);
        assert_eq!(short_names(10_000).last().map(String::as_str), Some("7pr"));
    }

    #[test]
    fn expectations() {
        assert!(is_expected(HTTP_431, &Outcome::Status(431)));
        assert!(
            is_expected(HTTP_431, &Outcome::Status(429)),
            "limits are fine"
        );
        assert!(!is_expected(HTTP_431, &Outcome::Reset));
        assert!(!is_expected(HTTP_400, &Outcome::Status(101)));
        assert!(is_expected(PROTOCOL, &Outcome::Closed));
        assert!(is_expected(CLOSE_1009, &Outcome::WsClose(Some(1009))));
        assert!(!is_expected(CLOSE_1009, &Outcome::WsClose(None)));
        assert!(is_expected(BAD_JSON, &Outcome::ws_error("bad_json")));
        assert!(!is_expected(BAD_JSON, &Outcome::ws_error("bad_frame")));
        assert!(is_expected(PONG, &Outcome::ws_reply("pong")));
        assert!(is_expected(FLOOD, &Outcome::ws_reply("pong")));
        assert!(is_expected(FLOOD, &Outcome::WsClose(Some(1008))));
        assert!(!is_expected(FLOOD, &Outcome::WsClose(Some(1011))));
    }

    #[test]
    fn requests_are_well_formed_where_they_should_be() {
        let mut rng = Rng::new(3);
        let p = plan(Attack::JwtAlgNone, 0, &env(), &mut rng);
        let Action::Http(req) = p.action else {
            panic!()
        };
        let s = String::from_utf8(req).unwrap();
        assert!(
            s.starts_with("GET /v1/sse?topic=hostile-jwt&token=eyJ"),
            "{s}"
        );
        let hs = String::from_utf8(ws_handshake("h", "/v1/ws", &mut rng)).unwrap();
        assert!(hs.contains("Sec-WebSocket-Version: 13\r\n"));
        assert!(hs.contains("Upgrade: websocket\r\n"));
    }
}
