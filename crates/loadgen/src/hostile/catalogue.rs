//! The attack catalogue: names, what each expects from a well-behaved Herald node, and the
//! exact bytes each variant sends (planned here, without I/O, so that it can be tested).

use std::time::Duration;

pub(crate) use super::attack::Attack;
pub(crate) use super::exp::{Exp, is_expected};
use super::jwt;
use super::raw::{self, Rng};
use crate::target::encode_component;

mod frames;
mod trust;

#[cfg(test)]
pub(crate) use trust::TRUST;

/// What the attack does on the wire.
#[derive(Debug, Clone)]
pub(crate) enum Action {
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
    /// A valid WebSocket handshake, then frames; wait for a decisive answer.
    Ws(WsAttack),
    /// A valid SSE request: expect 200, hold the stream for `hold`, leave.
    Hold {
        /// The request.
        req: Vec<u8>,
        /// How long to hold an accepted stream.
        hold: Duration,
    },
    /// Send these bytes; a refusal with a JSON body is told apart by its `code`
    /// ([`super::outcome::Outcome::Refused`]).
    Refusal(Vec<u8>),
    /// Send these bytes, then read an accepted answer slowly: `chunk` bytes every `every` for
    /// at most `hold`, through a small receive buffer.
    SlowRead {
        /// The request.
        req: Vec<u8>,
        /// Bytes per read.
        chunk: usize,
        /// Time between reads.
        every: Duration,
        /// Longest time spent reading.
        hold: Duration,
    },
}

/// A WebSocket attack: a valid handshake on `target`, then `frames`.
#[derive(Debug, Clone)]
pub(crate) struct WsAttack {
    /// Request target of the upgrade.
    pub target: String,
    /// Handshake headers besides the upgrade's own (subprotocol, extensions, cookies).
    pub headers: Vec<String>,
    /// Frames to send, already masked.
    pub frames: Vec<u8>,
    /// Reply types that count as the answer.
    pub want: &'static [&'static str],
    /// How many such replies to wait for (an error or a close ends the wait).
    pub need: usize,
    /// Once answered as wanted, stay connected this long (holding what was subscribed).
    pub hold: Duration,
}

/// Which listener of the server an attack goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    /// The public listener (`--url`).
    Public,
    /// The admin listener (`--admin-url`).
    Admin,
}

/// One planned attack.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    /// The variant's name.
    pub variant: &'static str,
    /// Acceptable answers.
    pub expect: &'static [Exp],
    /// What to do.
    pub action: Action,
    /// Where.
    pub listener: Listener,
}

impl Planned {
    /// An attack on the public listener.
    pub(crate) fn public(variant: &'static str, expect: &'static [Exp], action: Action) -> Self {
        Self {
            variant,
            expect,
            action,
            listener: Listener::Public,
        }
    }
}

/// What planning needs to know about the target and the server's limits.
#[derive(Debug, Clone)]
pub(crate) struct PlanEnv {
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
    /// `Host` header value of the admin listener, when attacks may go there.
    pub admin_host: Option<String>,
    /// Time bound of one attack (slow reads and holds end before it).
    pub attack_timeout: Duration,
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

/// The handshake request of a `Ws` action, with its extra `headers`.
pub(crate) fn ws_handshake(host: &str, target: &str, headers: &[String], rng: &mut Rng) -> Vec<u8> {
    let mut h = upgrade_headers(Some(&rng.ws_key()), Some("13"));
    h.extend_from_slice(headers);
    raw::get(target, host, &h)
}

/// A WebSocket attack on `/v1/ws` without extra headers, waiting for one reply.
fn ws_attack(frames: Vec<u8>, want: &'static [&'static str]) -> WsAttack {
    WsAttack {
        target: "/v1/ws".into(),
        headers: Vec::new(),
        frames,
        want,
        need: 1,
        hold: Duration::ZERO,
    }
}

/// [`ws_attack`] as an action.
fn ws(frames: Vec<u8>, want: &'static [&'static str]) -> Action {
    Action::Ws(ws_attack(frames, want))
}

/// Plans variant `v` of `attack`.
pub(crate) fn plan(attack: Attack, v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
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
        Attack::WsInvalidUtf8
        | Attack::WsInvalidJson
        | Attack::WsUnknownType
        | Attack::WsBinaryFrame
        | Attack::WsFragmented
        | Attack::WsOversizedFrame
        | Attack::WsPingFlood
        | Attack::WsSubscribe10k => frames::plan(attack, v, env, rng),
        Attack::HistoryAmplification
        | Attack::WsDeflatePing
        | Attack::WsMsgpackNils
        | Attack::AdminCrossSite
        | Attack::WsCookieCrossSite
        | Attack::HookUnavailableAllow
        | Attack::PatternLockout
        | Attack::PatternPastHook
        | Attack::BadLimit
        | Attack::BadPath => trust::plan(attack, v, env, rng),
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
            let hold = Duration::from_millis(200);
            let action = Action::Hold {
                req: sse(env, &q, &[]),
                hold,
            };
            p("64_new_topics", STREAM, action)
        }
    }
}

/// A planning environment for unit tests: every gate open.
#[cfg(test)]
fn test_env() -> PlanEnv {
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
        admin_host: Some("127.0.0.1:9090".into()),
        attack_timeout: Duration::from_secs(5),
    }
}

/// The bytes an attack sends first (the request, or the frames after the handshake).
#[cfg(test)]
fn sent(p: &Planned) -> &[u8] {
    match &p.action {
        Action::Http(b) | Action::Refusal(b) => b,
        Action::Hold { req, .. } | Action::SlowRead { req, .. } => req,
        Action::Ws(w) => &w.frames,
        Action::Trickle { prefix, .. } => prefix,
    }
}

#[cfg(test)]
mod tests {
    use super::frames::{BAD_JSON, CLOSE_1009, FLOOD, PONG, PROTOCOL, short_names};
    use super::*;
    use crate::hostile::outcome::Outcome;

    fn env() -> PlanEnv {
        test_env()
    }

    fn bytes(p: &Planned) -> usize {
        sent(p).len()
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
        let hs = String::from_utf8(ws_handshake("h", "/v1/ws", &[], &mut rng)).unwrap();
        assert!(hs.contains("Sec-WebSocket-Version: 13\r\n"));
        assert!(hs.contains("Upgrade: websocket\r\n"));
    }
}
