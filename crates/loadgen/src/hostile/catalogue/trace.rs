//! The trace-context attacks (issue 39, item 1): publishes with a sampled `traceparent` and
//! the largest `tracestate` a request head holds, or an oversized `traceparent`, sent to the
//! admin listener's publish API of a node with tracing on.
//!
//! The answer is the publish being taken (or the head refused when over the head limit);
//! that Herald keeps and exports no more than 32 members and 512 characters of a
//! `tracestate` is checked where the spans arrive (deploy/hostile-hooks.py, the soak's OTLP
//! collector). The attacks' trace ids begin with [`TRACE_ID_PREFIX`], so that the collector
//! tells their spans apart.

use super::{Action, Attack, Exp, Listener, PlanEnv, Planned};
use crate::hostile::raw::{self, Rng};

/// The first 8 hex digits (`hstl`) of every trace id these attacks send.
pub(crate) const TRACE_ID_PREFIX: &str = "6873746c";

/// The topic the attacks publish to (no good client reads it).
const TOPIC: &str = "hostile-trace";

/// Taken (the trace context cut, not refused).
const TAKEN: &[Exp] = &[Exp::Status(200)];
/// A head over the server's limit (`limits.max_header_bytes`, 16 KiB by default).
const TOO_LARGE: &[Exp] = &[Exp::Status(431)];

/// A head larger than the server's default 16 KiB limit.
const OVER_HEAD_LIMIT: usize = 20 * 1024;

/// Plans variant `v` of [`Attack::TraceState`] or [`Attack::TraceParent`].
pub(super) fn plan(attack: Attack, v: u64, env: &PlanEnv, rng: &mut Rng) -> Planned {
    let parent = sampled_parent(rng);
    let (variant, expect, headers, batch) = match attack {
        Attack::TraceState => trace_state(v, &parent),
        Attack::TraceParent => trace_parent(v, &parent),
        _ => unreachable!("{} is not a trace attack", attack.name()),
    };
    Planned {
        listener: Listener::Admin,
        ..Planned::public(variant, expect, Action::Http(publish(env, &headers, batch)))
    }
}

/// A sampled `traceparent` of a new trace whose id begins with [`TRACE_ID_PREFIX`].
fn sampled_parent(rng: &mut Rng) -> String {
    let trace = format!(
        "{TRACE_ID_PREFIX}{:016x}{:08x}",
        rng.next_u64(),
        rng.next_u64() as u32
    );
    format!("00-{trace}-{:016x}-01", rng.next_u64() | 1)
}

/// `count` tracestate members `key=value` of `size` characters each, keys distinct.
fn members(count: usize, size: usize, tag: char) -> String {
    (0..count)
        .map(|i| {
            let key = format!("{tag}{i:03}@hostile=");
            format!("{key}{}", "v".repeat(size.saturating_sub(key.len())))
        })
        .collect::<Vec<_>>()
        .join(",")
}

type Variant = (&'static str, &'static [Exp], Vec<String>, bool);

fn trace_state(v: u64, parent: &str) -> Variant {
    let tp = format!("traceparent: {parent}");
    let one = |state: String| vec![tp.clone(), format!("tracestate: {state}")];
    match v % 6 {
        // the attack of the issue: 32 members of ~240 characters, 7.6 KB
        0 => (
            "32_members_of_240",
            TAKEN,
            one(members(32, 240, 'm')),
            false,
        ),
        1 => (
            "600_short_members",
            TAKEN,
            one(members(600, 16, 's')),
            false,
        ),
        2 => (
            "one_12k_member",
            TAKEN,
            one(members(1, 12 * 1024, 'l')),
            false,
        ),
        3 => {
            let mut h = vec![tp.clone()];
            h.extend((0..40).map(|_| format!("tracestate: {}", members(24, 12, 'r'))));
            ("40_tracestate_headers", TAKEN, h, false)
        }
        4 => ("batch_of_16", TAKEN, one(members(32, 240, 'b')), true),
        _ => {
            let state = members(OVER_HEAD_LIMIT / 240, 240, 'o');
            ("over_the_head_limit", TOO_LARGE, one(state), false)
        }
    }
}

fn trace_parent(v: u64, parent: &str) -> Variant {
    let fields = parent.strip_prefix("00-").unwrap_or(parent);
    let (variant, expect, value) = match v % 4 {
        // a later version may add fields: read by its first four
        0 => (
            "later_version_8k_of_fields",
            TAKEN,
            format!("cc-{fields}-{}", "x".repeat(8 * 1024)),
        ),
        1 => (
            "version_00_with_8k_more",
            TAKEN,
            format!("{parent}-{}", "x".repeat(8 * 1024)),
        ),
        2 => (
            "8k_trace_id",
            TAKEN,
            format!("00-{}-{:016x}-01", "a".repeat(8 * 1024), 1),
        ),
        _ => (
            "over_the_head_limit",
            TOO_LARGE,
            format!("{parent}-{}", "x".repeat(OVER_HEAD_LIMIT)),
        ),
    };
    let headers = vec![
        format!("traceparent: {value}"),
        format!("tracestate: {}", members(8, 240, 'p')),
    ];
    (variant, expect, headers, false)
}

/// `POST /v1/publish` (or `/v1/publish/batch` of 16) of one small message to [`TOPIC`] on
/// the admin listener, with these trace headers.
fn publish(env: &PlanEnv, trace: &[String], batch: bool) -> Vec<u8> {
    let host = env.host_of(Listener::Admin);
    let message = format!(r#"{{"topic":"{TOPIC}","data":"traced"}}"#);
    let (target, body) = if batch {
        let messages = vec![message; 16].join(",");
        (
            "/v1/publish/batch",
            format!(r#"{{"messages":[{messages}]}}"#),
        )
    } else {
        ("/v1/publish", message)
    };
    let mut headers = vec!["Content-Type: application/json".to_owned()];
    headers.extend_from_slice(trace);
    raw::request("POST", target, host, &headers, Some(body.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::super::plan_str;
    use super::*;

    fn header<'a>(s: &'a str, name: &str) -> Vec<&'a str> {
        s.split("\r\n")
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
            .collect()
    }

    #[test]
    fn trace_states_are_the_largest_a_head_holds_and_sampled() {
        for v in 0..6 {
            let (p, s) = plan_str(Attack::TraceState, v);
            assert_eq!(p.listener, Listener::Admin);
            assert!(s.starts_with("POST /v1/publish"), "{s:.40}");
            assert!(s.contains("Host: 127.0.0.1:9090\r\n"));
            let parent = header(&s, "traceparent");
            assert_eq!(parent.len(), 1);
            assert!(parent[0].starts_with("00-6873746c") && parent[0].ends_with("-01"));
            assert_eq!(parent[0].len(), 55);
            let states = header(&s, "tracestate");
            let biggest = states.iter().map(|t| t.len()).max().unwrap();
            let members = states[0].split(',').count();
            let head = s.find("\r\n\r\n").unwrap();
            match p.variant {
                "over_the_head_limit" => assert!(head > 16 * 1024, "{head}"),
                _ => {
                    assert!(head < 16 * 1024 - 256, "{}: {head}", p.variant);
                    let repeated = states.len() > 1;
                    assert!(biggest > 512 || members > 32 || repeated, "{}", p.variant);
                }
            }
        }
        let (_, s) = plan_str(Attack::TraceState, 0);
        let state = header(&s, "tracestate")[0];
        assert_eq!(state.split(',').count(), 32);
        assert!(state.split(',').all(|m| m.len() == 240));
        let (_, s) = plan_str(Attack::TraceState, 4);
        assert!(s.starts_with("POST /v1/publish/batch "));
        assert_eq!(s.matches(r#""topic":"hostile-trace""#).count(), 16);
        let (_, s) = plan_str(Attack::TraceState, 3);
        assert_eq!(header(&s, "tracestate").len(), 40);
    }

    #[test]
    fn trace_parents_are_oversized() {
        let mut seen = std::collections::BTreeSet::new();
        for v in 0..4 {
            let (p, s) = plan_str(Attack::TraceParent, v);
            seen.insert(p.variant);
            let parent = header(&s, "traceparent")[0];
            assert!(parent.len() > 8 * 1024, "{}", p.variant);
            assert_eq!(p.expect == TOO_LARGE, p.variant == "over_the_head_limit");
        }
        assert_eq!(seen.len(), 4);
        let (_, s) = plan_str(Attack::TraceParent, 0);
        assert!(header(&s, "traceparent")[0].starts_with("cc-6873746c"));
    }
}
