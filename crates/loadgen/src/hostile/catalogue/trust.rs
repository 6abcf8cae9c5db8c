//! The nine attacks of the second trust review: memory and CPU amplification (whole histories
//! read slowly, compressed and MessagePack pings), cross-site requests to the admin listener
//! and to a hooked WebSocket, hooks that fail open, wildcard patterns as a lock-out and past a
//! subscribe hook, and `limit` values a framework answers for the server.
//!
//! Topic and namespace names are the soak's (`deploy/hostile-soak.sh`): it publishes large
//! messages to [`BIG_TOPICS`], and its hook backend denies `rooms:secret`, answers 503 for
//! `secret:` topics (an unavailable hook) and is not asked about `lock:` topics.

use std::time::Duration;

use super::frames::text;
use super::{
    Action, Attack, Exp, Listener, PlanEnv, Planned, WsAttack, sse, upgrade_headers, ws_attack,
};
use crate::hostile::codec;
use crate::hostile::raw::{self, Rng, op};

// What a fixed Herald answers, in one place: adjust here if a fix settles on another code.
// (429 and 503 are accepted for every attack: a limit refusing.)

/// Whole histories: served (the check is the server's RSS, not the answer).
const AMPLIFIED: &[Exp] = &[Exp::Status(200)];
/// Compressed 64 KiB pings: answered, refused by an error frame, or closed for the rate.
const DEFLATE_PING: &[Exp] = &[
    Exp::WsReply("pong"),
    Exp::WsError("too_large"),
    Exp::WsError("rate_limited"),
    Exp::WsClose(1008),
    Exp::WsClose(1009),
];
/// 60,000 nils: a (binary) pong or an error frame; the check is the server's CPU.
const MSGPACK_NILS: &[Exp] = &[
    Exp::WsReply("pong"),
    Exp::WsError("too_large"),
    Exp::WsError("bad_frame"),
    Exp::WsError("bad_json"),
    Exp::WsClose(1009),
];
/// A foreign `Origin` on the admin listener (a state-changing body may be refused first).
const ADMIN_ORIGIN: &[Exp] = &[
    Exp::Refused(403, "origin_not_allowed"),
    Exp::Refused(415, "unsupported_media_type"),
];
/// A state-changing admin request whose body is not JSON (what a form can send cross-site).
const ADMIN_NOT_JSON: &[Exp] = &[Exp::Refused(415, "unsupported_media_type")];
/// A `Host` that is not the admin listener's (DNS rebinding).
const ADMIN_HOST: &[Exp] = &[Exp::Refused(403, "host_not_allowed")];
/// A request with two `Host` headers.
const ADMIN_TWO_HOSTS: &[Exp] = &[Exp::Refused(400, "bad_host")];
/// A cross-site WebSocket upgrade carrying a cookie to a server whose hook reads cookies.
const COOKIE_ORIGIN: &[Exp] = &[Exp::Refused(403, "origin_not_allowed")];
/// A topic whose subscribe hook is unavailable: never opened by `on_unavailable = "allow"`.
const UNAVAILABLE_HTTP: &[Exp] = &[Exp::Refused(403, "forbidden")];
const UNAVAILABLE_WS: &[Exp] = &[Exp::WsError("forbidden")];
/// New patterns: accepted within the client's share, then refused (429 `pattern_quota` is
/// accepted as any 429); refused outright where a subscribe hook applies.
const LOCKOUT_HTTP: &[Exp] = &[Exp::Status(200), Exp::Refused(403, "pattern_not_allowed")];
const LOCKOUT_WS: &[Exp] = &[
    Exp::WsReply("subscribed"),
    Exp::WsError("pattern_quota"),
    Exp::WsError("pattern_not_allowed"),
];
/// A pattern over a namespace a subscribe hook decides: refused.
const PAST_HOOK_HTTP: &[Exp] = &[Exp::Refused(403, "pattern_not_allowed")];
const PAST_HOOK_WS: &[Exp] = &[Exp::WsError("pattern_not_allowed")];
/// A `limit` that is not a number in range: the server's own JSON 400 (a text/plain 400 from
/// the framework's query parser is unexpected).
const BAD_LIMIT: &[Exp] = &[Exp::Refused(400, "bad_limit")];
/// A path segment that is not percent-encoded UTF-8: the server's own JSON 400 (axum's
/// text/plain 400 is unexpected).
const BAD_PATH: &[Exp] = &[Exp::Refused(400, "bad_path")];

/// The attacks of this file, in catalogue order.
#[cfg(test)]
pub(crate) const TRUST: [Attack; 10] = [
    Attack::HistoryAmplification,
    Attack::WsDeflatePing,
    Attack::WsMsgpackNils,
    Attack::AdminCrossSite,
    Attack::WsCookieCrossSite,
    Attack::HookUnavailableAllow,
    Attack::PatternLockout,
    Attack::PatternPastHook,
    Attack::BadLimit,
    Attack::BadPath,
];

/// Topics the soak fills with large messages before the attacks.
pub(crate) const BIG_TOPICS: [&str; 4] = ["big0", "big1", "big2", "big3"];

/// A foreign site.
const EVIL: &str = "http://evil.example";

/// Compressed pings per `ws_deflate_ping` (well within `ws.inbound_burst`).
const DEFLATE_PINGS: usize = 8;

/// New patterns per `pattern_lockout` connection (Herald's `limits.max_subscriptions`).
const LOCK_PATTERNS: usize = 64;

/// Plans variant `v` of one of this file's attacks (`TRUST` lists them).
pub(super) fn plan(attack: Attack, v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    match attack {
        Attack::HistoryAmplification => history_amplification(v, env),
        Attack::WsDeflatePing => ws_deflate_ping(v, env, rng),
        Attack::WsMsgpackNils => ws_msgpack_nils(v, rng),
        Attack::AdminCrossSite => admin_cross_site(v, env),
        Attack::WsCookieCrossSite => ws_cookie_cross_site(env, rng),
        Attack::HookUnavailableAllow => hook_unavailable_allow(v, env, rng),
        Attack::PatternLockout => pattern_lockout(v, env, rng),
        Attack::PatternPastHook => pattern_past_hook(v, env, rng),
        Attack::BadLimit => bad_limit(v, env),
        Attack::BadPath => bad_path(v, env),
        _ => unreachable!("{} is not a trust attack", attack.name()),
    }
}

/// Plans variant `v` of `history_amplification`.
fn history_amplification(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
    let (variant, target) = if v.is_multiple_of(2) {
        let topics: Vec<String> = BIG_TOPICS.iter().map(|t| format!("topic={t}")).collect();
        let q = topics.join("&");
        (
            "poll_4_big_topics",
            format!("/v1/poll?{q}&last=256&timeout=0"),
        )
    } else {
        let t = BIG_TOPICS[(v / 2) as usize % BIG_TOPICS.len()];
        ("history_1000", format!("/v1/topics/{t}/history?limit=1000"))
    };
    let action = Action::SlowRead {
        req: raw::get(&target, host, &[]),
        chunk: 4096,
        every: Duration::from_millis(100),
        hold: env.attack_timeout.mul_f64(0.7),
    };
    p(variant, AMPLIFIED, action)
}

/// Plans variant `v` of `ws_deflate_ping`.
fn ws_deflate_ping(v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let (variant, n) = if v.is_multiple_of(2) {
        ("8_compressed_64k_pings", DEFLATE_PINGS)
    } else {
        ("1_compressed_64k_ping", 1)
    };
    // under the message limit once inflated, JSON wrapper included
    let data = "herald ".repeat(env.max_ws_message.saturating_sub(128) / 7);
    let msg = format!(r#"{{"type":"ping","data":"{data}"}}"#);
    let mut frames = Vec::new();
    for _ in 0..n {
        raw::push_deflated(&mut frames, op::TEXT, msg.as_bytes(), rng.mask());
    }
    let ext = "Sec-WebSocket-Extensions: permessage-deflate; client_no_context_takeover";
    let action = Action::Ws(WsAttack {
        headers: vec![ext.to_owned()],
        need: n,
        ..ws_attack(frames, &["pong"])
    });
    p(variant, DEFLATE_PING, action)
}

/// Plans variant `v` of `ws_msgpack_nils`.
fn ws_msgpack_nils(v: u64, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let (variant, n) = if v.is_multiple_of(2) {
        ("60k_nils", 1)
    } else {
        ("60k_nils_x4", 4)
    };
    let ping = codec::msgpack_ping_of_nils(60_000);
    let mut frames = Vec::new();
    for _ in 0..n {
        raw::push_frame(&mut frames, op::BINARY, true, &ping, rng.mask());
    }
    let action = Action::Ws(WsAttack {
        headers: vec!["Sec-WebSocket-Protocol: herald.msgpack".to_owned()],
        need: n,
        ..ws_attack(frames, &["pong"])
    });
    p(variant, MSGPACK_NILS, action)
}

/// Plans `ws_cookie_cross_site` (one variant).
fn ws_cookie_cross_site(env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
    let mut h = upgrade_headers(Some(&rng.ws_key()), Some("13"));
    h.push("Cookie: session=hostile".to_owned());
    h.push(format!("Origin: {EVIL}"));
    let req = raw::get("/v1/ws", host, &h);
    p("cookie_foreign_origin", COOKIE_ORIGIN, Action::Refusal(req))
}

/// Plans variant `v` of `hook_unavailable_allow`.
fn hook_unavailable_allow(v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    refused_three_ways(v, "secret:x", [UNAVAILABLE_HTTP, UNAVAILABLE_WS], env, rng)
}

/// Variant `v` of asking for `name` over SSE, long-poll and a WebSocket `subscribe`, each
/// expected to be refused: `expect` over HTTP, then over the WebSocket.
fn refused_three_ways(
    v: u64,
    name: &str,
    [http, ws]: [&'static [Exp]; 2],
    env: &PlanEnv,
    rng: &mut Rng,
) -> Planned {
    let p = Planned::public;
    match v % 3 {
        0 => p(
            "sse",
            http,
            Action::Refusal(sse(env, &format!("topic={name}"), &[])),
        ),
        1 => {
            let target = format!("/v1/poll?topic={name}&timeout=0");
            p(
                "poll",
                http,
                Action::Refusal(raw::get(&target, &env.host, &[])),
            )
        }
        _ => p("ws_subscribe", ws, subscribe(&[name], Duration::ZERO, rng)),
    }
}

/// Plans variant `v` of `pattern_lockout`.
fn pattern_lockout(v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let patterns: Vec<String> = (0..LOCK_PATTERNS)
        .map(|j| format!("lock:{:x}-{v}-{j}.*", env.run_id))
        .collect();
    // held most of the attack's bound, so that many are held at once
    let hold = env.attack_timeout.mul_f64(0.7);
    if v.is_multiple_of(2) {
        let q: Vec<String> = patterns.iter().map(|t| format!("topic={t}")).collect();
        let req = sse(env, &q.join("&"), &[]);
        p(
            "sse_64_new_patterns",
            LOCKOUT_HTTP,
            Action::Hold { req, hold },
        )
    } else {
        let names: Vec<&str> = patterns.iter().map(String::as_str).collect();
        let action = subscribe(&names, hold, rng);
        p("ws_64_new_patterns", LOCKOUT_WS, action)
    }
}

/// Plans variant `v` of `pattern_past_hook`.
fn pattern_past_hook(v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    refused_three_ways(v, "rooms:*", [PAST_HOOK_HTTP, PAST_HOOK_WS], env, rng)
}

/// A WebSocket `subscribe` of `topics`, waiting for `subscribed`, then holding them `hold`.
fn subscribe(topics: &[&str], hold: Duration, rng: &mut Rng) -> Action {
    let body = serde_json::json!({ "type": "subscribe", "topics": topics }).to_string();
    Action::Ws(WsAttack {
        hold,
        ..ws_attack(text(body.as_bytes(), rng), &["subscribed"])
    })
}

/// Cross-site requests and DNS rebinding against the admin listener.
fn admin_cross_site(v: u64, env: &PlanEnv) -> Planned {
    let host = env.host_of(Listener::Admin);
    let post = |target: &str, headers: &[&str]| {
        let h: Vec<String> = headers.iter().map(|s| (*s).to_owned()).collect();
        let body: &[u8] = if target == "/v1/publish" {
            br#"{"topic":"hostile-csrf","data":"cross-site"}"#
        } else {
            br#"{"reason":"cross-site"}"#
        };
        raw::request("POST", target, host, &h, Some(body))
    };
    let origin = format!("Origin: {EVIL}");
    let (variant, expect, req) = match v % 8 {
        0 => (
            "publish_foreign_origin_text_plain",
            ADMIN_ORIGIN,
            post("/v1/publish", &[&origin, "Content-Type: text/plain"]),
        ),
        1 => (
            "publish_text_plain",
            ADMIN_NOT_JSON,
            post("/v1/publish", &["Content-Type: text/plain"]),
        ),
        2 => (
            "publish_form_urlencoded",
            ADMIN_NOT_JSON,
            post(
                "/v1/publish",
                &["Content-Type: application/x-www-form-urlencoded"],
            ),
        ),
        3 => (
            "publish_no_content_type",
            ADMIN_NOT_JSON,
            post("/v1/publish", &[]),
        ),
        4 => (
            "disconnect_foreign_origin",
            ADMIN_ORIGIN,
            post(
                "/v1/users/hostile-nobody/disconnect",
                &[&origin, "Content-Type: text/plain"],
            ),
        ),
        5 => {
            let port = host.rsplit_once(':').map_or("9090", |(_, p)| p);
            let rebound = format!("rebind.evil.example:{port}");
            (
                "dns_rebinding_host",
                ADMIN_HOST,
                raw::get("/v1/topics", &rebound, &[]),
            )
        }
        // An address in brackets with a name after it (issue 39, item 4).
        6 => (
            "bracketed_address_then_name",
            ADMIN_HOST,
            raw::get("/v1/topics", "[::1]evil.example", &[]),
        ),
        // A second Host after an address one.
        _ => (
            "two_hosts",
            ADMIN_TWO_HOSTS,
            raw::get(
                "/v1/topics",
                host,
                &["Host: rebind.evil.example".to_owned()],
            ),
        ),
    };
    Planned {
        listener: Listener::Admin,
        ..Planned::public(variant, expect, Action::Refusal(req))
    }
}

/// `limit` values a number parser refuses, on the public history API and, with the admin
/// listener known, on its history and topics API.
fn bad_limit(v: u64, env: &PlanEnv) -> Planned {
    const VALUES: [&str; 4] = ["abc", "-1", "1e3", "18446744073709551616"];
    const PLACES: [(Listener, &str, [&str; 4]); 3] = [
        (
            Listener::Public,
            "/v1/topics/t/history",
            [
                "history_not_a_number",
                "history_negative",
                "history_exponent",
                "history_past_u64",
            ],
        ),
        (
            Listener::Admin,
            "/v1/topics/t/history",
            [
                "admin_history_not_a_number",
                "admin_history_negative",
                "admin_history_exponent",
                "admin_history_past_u64",
            ],
        ),
        (
            Listener::Admin,
            "/v1/topics",
            [
                "admin_topics_not_a_number",
                "admin_topics_negative",
                "admin_topics_exponent",
                "admin_topics_past_u64",
            ],
        ),
    ];
    let places = if env.admin_host.is_some() { 3 } else { 1 };
    let n = v as usize % (VALUES.len() * places);
    let (listener, path, names) = PLACES[n / VALUES.len()];
    let host = env.host_of(listener);
    let req = raw::get(
        &format!("{path}?limit={}", VALUES[n % VALUES.len()]),
        host,
        &[],
    );
    Planned {
        listener,
        ..Planned::public(names[n % VALUES.len()], BAD_LIMIT, Action::Refusal(req))
    }
}

/// Path segments that are not percent-encoded UTF-8 (issue 39, item 3): on the public
/// history API and, with the admin listener known, on every admin route that reads one.
fn bad_path(v: u64, env: &PlanEnv) -> Planned {
    const PLACES: [(Listener, &str, &str); 6] = [
        (
            Listener::Public,
            "/v1/topics/%FF/history",
            "history_bad_utf8",
        ),
        (
            Listener::Public,
            "/v1/topics/%C3%28/history",
            "history_bad_sequence",
        ),
        (Listener::Admin, "/v1/topics/%FF", "admin_topic"),
        (Listener::Admin, "/v1/presence/%FF", "admin_presence"),
        (Listener::Admin, "/v1/users/%FF/connections", "admin_user"),
        (Listener::Admin, "/v1/tail/%FF", "admin_tail"),
    ];
    let places = if env.admin_host.is_some() {
        PLACES.len()
    } else {
        2
    };
    let (listener, path, variant) = PLACES[v as usize % places];
    let host = env.host_of(listener);
    Planned {
        listener,
        ..Planned::public(
            variant,
            BAD_PATH,
            Action::Refusal(raw::get(path, host, &[])),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::{plan_str, test_env};
    use super::*;
    use crate::hostile::outcome::Outcome;
    use crate::hostile::raw::parse_frame;

    #[test]
    fn every_trust_attack_plans_each_variant_once() {
        for a in TRUST {
            let mut names = std::collections::BTreeSet::new();
            for v in 0..24 {
                let (p, _) = plan_str(a, v);
                assert!(!p.expect.is_empty(), "{}", a.name());
                names.insert(p.variant);
            }
        }
    }

    #[test]
    fn big_histories_are_read_slowly_within_the_bound() {
        let (p, s) = plan_str(Attack::HistoryAmplification, 0);
        assert!(s.starts_with(
            "GET /v1/poll?topic=big0&topic=big1&topic=big2&topic=big3&last=256&timeout=0 "
        ));
        let Action::SlowRead { hold, every, .. } = p.action else {
            panic!("{:?}", p.action)
        };
        assert!(hold < test_env().attack_timeout && every < hold);
        let (_, s) = plan_str(Attack::HistoryAmplification, 1);
        assert!(
            s.starts_with("GET /v1/topics/big0/history?limit=1000 "),
            "{s}"
        );
    }

    #[test]
    fn deflated_pings_are_compressed_and_inflate_under_the_limit() {
        let (p, _) = plan_str(Attack::WsDeflatePing, 0);
        let Action::Ws(WsAttack {
            frames,
            headers,
            need,
            ..
        }) = &p.action
        else {
            panic!()
        };
        assert_eq!(*need, DEFLATE_PINGS);
        assert!(headers[0].contains("permessage-deflate"));
        assert!(
            frames.len() < 16 * 1024,
            "{} bytes on the wire",
            frames.len()
        );
        let (f, _) = parse_frame(frames, 1 << 20).unwrap().unwrap();
        assert!(f.rsv1 && f.fin && f.opcode == op::TEXT);
        let msg = codec::inflate_message(&f.payload, 1 << 20).unwrap();
        assert!(msg.len() <= test_env().max_ws_message && msg.len() > 60_000);
        assert!(msg.starts_with(br#"{"type":"ping","data":"herald "#));
        assert!(crate::hostile::exp::is_expected(
            p.expect,
            &Outcome::ws_reply("pong")
        ));
    }

    #[test]
    fn msgpack_ping_is_one_binary_frame_under_the_limit() {
        let (p, _) = plan_str(Attack::WsMsgpackNils, 0);
        let Action::Ws(WsAttack {
            frames, headers, ..
        }) = &p.action
        else {
            panic!()
        };
        assert_eq!(headers[0], "Sec-WebSocket-Protocol: herald.msgpack");
        let (f, used) = parse_frame(frames, 1 << 20).unwrap().unwrap();
        assert_eq!((f.opcode, used), (op::BINARY, frames.len()));
        assert!(f.payload.len() < test_env().max_ws_message);
        assert_eq!(codec::msgpack_str(&f.payload, "type"), Some("ping"));
    }

    #[test]
    fn admin_attacks_go_to_the_admin_listener() {
        let mut seen = Vec::new();
        for v in 0..8 {
            let (p, s) = plan_str(Attack::AdminCrossSite, v);
            assert_eq!(p.listener, Listener::Admin);
            assert!(!p.expect.contains(&Exp::Status(200)));
            seen.push((p.variant, s));
        }
        let find = |name: &str| &seen.iter().find(|(v, _)| *v == name).unwrap().1;
        let s = find("publish_foreign_origin_text_plain");
        assert!(s.starts_with("POST /v1/publish HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n"));
        assert!(s.contains("Origin: http://evil.example\r\nContent-Type: text/plain\r\n"));
        assert!(s.ends_with(r#"{"topic":"hostile-csrf","data":"cross-site"}"#));
        assert!(!find("publish_no_content_type").contains("Content-Type"));
        assert!(find("dns_rebinding_host").contains("Host: rebind.evil.example:9090\r\n"));
        assert!(find("disconnect_foreign_origin").starts_with("POST /v1/users/hostile-nobody/"));
        assert!(find("bracketed_address_then_name").contains("Host: [::1]evil.example\r\n"));
        let two = find("two_hosts");
        assert!(two.contains("Host: 127.0.0.1:9090\r\n") && two.contains("Host: rebind.evil."));
    }

    #[test]
    fn hooked_attacks_name_the_soak_namespaces() {
        let (p, s) = plan_str(Attack::WsCookieCrossSite, 0);
        assert!(s.contains("Cookie: session=hostile\r\nOrigin: http://evil.example\r\n"));
        assert!(s.contains("Upgrade: websocket\r\n"));
        assert_eq!(p.expect, COOKIE_ORIGIN);
        let (_, s) = plan_str(Attack::HookUnavailableAllow, 0);
        assert!(s.starts_with("GET /v1/sse?topic=secret:x "));
        let (p, s) = plan_str(Attack::HookUnavailableAllow, 2);
        assert_eq!(p.expect, UNAVAILABLE_WS);
        assert!(s.len() > 6, "a subscribe frame");
        let (_, s) = plan_str(Attack::PatternPastHook, 1);
        assert!(s.starts_with("GET /v1/poll?topic=rooms:*&timeout=0 "));
    }

    #[test]
    fn lockout_patterns_are_new_valid_and_held() {
        let (p, s) = plan_str(Attack::PatternLockout, 0);
        let Action::Hold { hold, .. } = p.action else {
            panic!()
        };
        assert!(hold > Duration::ZERO && hold < test_env().attack_timeout);
        assert_eq!(s.matches("topic=lock:1-0-").count(), LOCK_PATTERNS);
        assert!(s.contains("topic=lock:1-0-63.*"));
        let (_, other) = plan_str(Attack::PatternLockout, 2);
        assert!(
            other.contains("lock:1-2-0.*"),
            "each attack brings new patterns"
        );
        let (p, _) = plan_str(Attack::PatternLockout, 1);
        let Action::Ws(WsAttack { hold, want, .. }) = p.action else {
            panic!()
        };
        assert_eq!(
            (hold, want),
            (test_env().attack_timeout.mul_f64(0.7), &["subscribed"][..])
        );
    }

    #[test]
    fn bad_paths_cover_both_listeners_and_expect_the_json_code() {
        let mut variants = std::collections::BTreeSet::new();
        for v in 0..6 {
            let (p, s) = plan_str(Attack::BadPath, v);
            variants.insert(p.variant);
            assert_eq!(p.expect, BAD_PATH);
            assert_eq!(
                p.listener == Listener::Admin,
                p.variant.starts_with("admin_")
            );
            assert!(s.starts_with("GET /v1/") && s.contains('%'), "{s}");
        }
        assert_eq!(variants.len(), 6);
        let env = PlanEnv {
            admin_host: None,
            ..test_env()
        };
        for v in 0..6 {
            let p = plan(Attack::BadPath, v, &env, &mut Rng::new(1));
            assert_eq!(p.listener, Listener::Public);
        }
    }

    #[test]
    fn bad_limits_cover_both_listeners_and_expect_the_json_code() {
        let mut variants = std::collections::BTreeSet::new();
        for v in 0..12 {
            let (p, s) = plan_str(Attack::BadLimit, v);
            variants.insert(p.variant);
            assert_eq!(p.expect, BAD_LIMIT);
            assert_eq!(
                p.listener == Listener::Admin,
                p.variant.starts_with("admin_"),
                "{}",
                p.variant
            );
            assert!(s.contains("?limit="));
        }
        assert_eq!(variants.len(), 12);
        assert!(variants.contains("admin_topics_past_u64"));
        assert!(crate::hostile::exp::is_expected(
            BAD_LIMIT,
            &Outcome::refused(400, "bad_limit")
        ));
        assert!(!crate::hostile::exp::is_expected(
            BAD_LIMIT,
            &Outcome::Status(400)
        ));
        // without the admin listener, only the public variants
        let env = PlanEnv {
            admin_host: None,
            ..test_env()
        };
        for v in 0..8 {
            let p = plan(Attack::BadLimit, v, &env, &mut Rng::new(1));
            assert_eq!(p.listener, Listener::Public);
        }
    }
}
