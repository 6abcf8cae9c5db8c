//! The attack catalogue: names, what each expects from a well-behaved Herald node, and the
//! exact bytes each variant sends (planned here, without I/O, so that it can be tested).

use std::time::Duration;

pub(crate) use super::attack::Attack;
pub(crate) use super::exp::{Exp, is_expected};
use super::raw::{self, Rng};

mod frames;
mod http2;
mod requests;
mod trace;
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
    /// An HTTP/2 attack over TLS ([`super::http2`]).
    H2(super::http2::H2Attack),
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
    /// The public listener over TLS, serving HTTP/2 (`--h2-url`).
    H2,
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

impl PlanEnv {
    /// The `Host` header of `listener` (the public one's when the admin listener is unknown;
    /// HTTP/2 attacks name theirs at connect time).
    pub(crate) fn host_of(&self, listener: Listener) -> &str {
        match listener {
            Listener::Admin => self.admin_host.as_deref().unwrap_or(&self.host),
            Listener::Public | Listener::H2 => &self.host,
        }
    }
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
    match attack {
        Attack::MalformedRequestLine => requests::malformed_request_line(v, env),
        Attack::GarbageBytes => requests::garbage_bytes(v, rng),
        Attack::OversizedHead => requests::oversized_head(v, env),
        Attack::Slowloris => requests::slowloris(v, env),
        Attack::HugeLastEventId => requests::huge_last_event_id(v, env),
        Attack::CraftedLastEventId => requests::crafted_last_event_id(v, env),
        Attack::TopicControlChars => requests::topic_control_chars(v, env),
        Attack::TopicUnicode => requests::topic_unicode(v, env),
        Attack::TopicPathTraversal => requests::topic_path_traversal(v, env),
        Attack::TooManyTopics => requests::too_many_topics(v, env),
        Attack::WsBadOrigin => requests::ws_bad_origin(v, env, rng),
        Attack::WsBadKey => requests::ws_bad_key(v, env),
        Attack::WsBadVersion => requests::ws_bad_version(v, env, rng),
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
        Attack::TraceState | Attack::TraceParent => trace::plan(attack, v, env, rng),
        Attack::H2Streams
        | Attack::H2RapidReset
        | Attack::H2HeaderList
        | Attack::H2ControlFlood => http2::plan(attack, v, env),
        Attack::JwtExpired | Attack::JwtForged | Attack::JwtAlgNone | Attack::JwtGarbage => {
            requests::jwt(attack, v, env, rng)
        }
        Attack::TopicSpray => requests::topic_spray(v, env),
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

/// Variant `v` of `a` planned for [`test_env`], and what it sends first, as text.
#[cfg(test)]
fn plan_str(a: Attack, v: u64) -> (Planned, String) {
    let p = plan(a, v, &test_env(), &mut Rng::new(v + 1));
    let s = String::from_utf8_lossy(sent(&p)).into_owned();
    (p, s)
}

/// The bytes an attack sends first (the request, or the frames after the handshake).
#[cfg(test)]
fn sent(p: &Planned) -> &[u8] {
    match &p.action {
        Action::Http(b) | Action::Refusal(b) => b,
        Action::Hold { req, .. } | Action::SlowRead { req, .. } => req,
        Action::Ws(w) => &w.frames,
        Action::Trickle { prefix, .. } => prefix,
        Action::H2(_) => &[],
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
