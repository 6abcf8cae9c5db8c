//! The attacks made of one HTTP/1.1 request: request lines, heads and bytes that are not
//! HTTP, resume lists, topic names, WebSocket upgrades and tokens; one function per attack,
//! each planning its variants.

use std::time::Duration;

use super::{
    Action, HTTP_400, HTTP_400_404, HTTP_400_431, HTTP_401, HTTP_403, HTTP_408, HTTP_426, HTTP_431,
    MALFORMED, NOT_HTTP, PlanEnv, Planned, STREAM, sse, upgrade_headers,
};
use crate::hostile::attack::Attack;
use crate::hostile::jwt;
use crate::hostile::raw::{self, Rng};
use crate::target::encode_component;

/// Plans variant `v` of `malformed_request_line`.
pub(super) fn malformed_request_line(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
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

/// Plans variant `v` of `garbage_bytes`.
pub(super) fn garbage_bytes(v: u64, rng: &mut Rng) -> Planned {
    let p = Planned::public;
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

/// Plans variant `v` of `oversized_head`.
pub(super) fn oversized_head(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
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

/// Plans variant `v` of `slowloris`.
pub(super) fn slowloris(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
    let (variant, mut prefix) = match v % 3 {
        0 => (
            "sse",
            b"GET /v1/sse?topic=hostile-slow HTTP/1.1\r\n".to_vec(),
        ),
        1 => (
            "ws_upgrade",
            b"GET /v1/ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n".to_vec(),
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

/// Plans variant `v` of `huge_last_event_id`.
pub(super) fn huge_last_event_id(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
    let list: String = "hostile=1-1,".repeat(env.huge_bytes / 12 + 1);
    if v.is_multiple_of(2) {
        let req = sse(env, "topic=hostile", &[format!("Last-Event-ID: {list}")]);
        p("header", HTTP_431, Action::Http(req))
    } else {
        let q = format!("topic=hostile&lastEventId={}", encode_component(&list));
        p("query", HTTP_431, Action::Http(sse(env, &q, &[])))
    }
}

/// Plans variant `v` of `crafted_last_event_id`.
pub(super) fn crafted_last_event_id(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
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

/// An SSE request for `topic` (written as is), which the server must refuse with 400.
fn bad_topic(variant: &'static str, topic: &str, env: &PlanEnv) -> Planned {
    let req = sse(env, &format!("topic={topic}"), &[]);
    Planned::public(variant, HTTP_400, Action::Http(req))
}

/// Plans variant `v` of `topic_control_chars`.
pub(super) fn topic_control_chars(v: u64, env: &PlanEnv) -> Planned {
    let (variant, topic) = match v % 6 {
        0 => ("nul", "hostile%00x"),
        1 => ("crlf_header_injection", "hostile%0D%0ASet-Cookie:%20x=1"),
        2 => ("ansi_escape", "%1B%5B31mred"),
        3 => ("del", "hostile%7F"),
        4 => ("tab", "%09hostile"),
        _ => ("raw_control_byte", "hostile\x01x"),
    };
    bad_topic(variant, topic, env)
}

/// Plans variant `v` of `topic_unicode`.
pub(super) fn topic_unicode(v: u64, env: &PlanEnv) -> Planned {
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
    bad_topic(variant, topic, env)
}

/// Plans variant `v` of `topic_path_traversal`.
pub(super) fn topic_path_traversal(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
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

/// Plans variant `v` of `too_many_topics`.
pub(super) fn too_many_topics(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
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

/// Plans variant `v` of `ws_bad_origin`.
pub(super) fn ws_bad_origin(v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
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

/// Plans variant `v` of `ws_bad_key`.
pub(super) fn ws_bad_key(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
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

/// Plans variant `v` of `ws_bad_version`.
pub(super) fn ws_bad_version(v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
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

/// Plans variant `v` of `jwt_expired`, `jwt_forged`, `jwt_alg_none`, `jwt_garbage`.
pub(super) fn jwt(attack: Attack, v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let p = Planned::public;
    let host = env.host.as_str();
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

/// Plans variant `v` of `topic_spray`.
pub(super) fn topic_spray(v: u64, env: &PlanEnv) -> Planned {
    let p = Planned::public;
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
