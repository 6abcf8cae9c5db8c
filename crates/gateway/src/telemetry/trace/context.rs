//! W3C Trace Context (`traceparent`, `tracestate`) as publishers and log records carry it:
//! read into an OpenTelemetry [`SpanContext`], and written from one.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

/// A trace context as it arrived, unparsed: the `traceparent` and `tracestate` of an HTTP
/// request's headers, a WebSocket publish frame's fields, a Kafka record's headers or a Redis
/// stream entry's fields. Parsed only when tracing is on.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Carried<'a> {
    /// `00-<trace id>-<parent id>-<flags>`.
    pub traceparent: Option<&'a str>,
    /// Vendor entries, `key=value,...`.
    pub tracestate: Option<&'a str>,
}

impl<'a> Carried<'a> {
    /// No trace context.
    pub(crate) const NONE: Carried<'static> = Carried {
        traceparent: None,
        tracestate: None,
    };

    /// The `traceparent` and `tracestate` headers of a request (the first of each).
    pub(crate) fn from_headers(headers: &'a axum::http::HeaderMap) -> Self {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        Self {
            traceparent: header("traceparent"),
            tracestate: header("tracestate"),
        }
    }

    /// The span context it names, marked remote; `None` when there is none or it is
    /// malformed (then the publish is treated as one without a context).
    pub(crate) fn span_context(&self) -> Option<SpanContext> {
        let (trace_id, span_id, flags) = parse_traceparent(self.traceparent?)?;
        // A malformed tracestate is dropped, the parent kept (W3C Trace Context, 3.3.1);
        // what is kept, and carried on, is bounded first (`bounded_tracestate`).
        let state = (self.tracestate)
            .and_then(|s| bounded_tracestate(s).parse::<TraceState>().ok())
            .unwrap_or_default();
        Some(SpanContext::new(trace_id, span_id, flags, true, state))
    }
}

/// Most list members a `tracestate` has (W3C Trace Context, 3.3.1.1).
pub(crate) const TRACESTATE_MAX_MEMBERS: usize = 32;
/// Characters of a `tracestate` kept and carried on: the 512 that W3C Trace Context
/// (3.3.1.5) asks every participant to propagate at least.
pub(crate) const TRACESTATE_MAX_CHARS: usize = 512;
/// A list member longer than this is the first to go when a `tracestate` is cut (3.3.1.5).
pub(crate) const TRACESTATE_MAX_MEMBER_CHARS: usize = 128;

/// `tracestate` as Herald keeps and carries it: as given when it is within
/// [`TRACESTATE_MAX_MEMBERS`] members and [`TRACESTATE_MAX_CHARS`] characters; else cut as
/// W3C Trace Context (3.3.1.5) suggests, first its members longer than
/// [`TRACESTATE_MAX_MEMBER_CHARS`], then members from the end until it fits. Empty members
/// (`a=1,,b=2`) are left out. A publisher's 32 members of ~240 characters (7.6 KB) would
/// otherwise be parsed, exported and written to the log with every message it publishes.
pub(crate) fn bounded_tracestate(value: &str) -> std::borrow::Cow<'_, str> {
    let members = || {
        value
            .split(',')
            .map(|m| m.trim_matches([' ', '\t']))
            .filter(|m| !m.is_empty())
    };
    if value.len() <= TRACESTATE_MAX_CHARS && members().count() <= TRACESTATE_MAX_MEMBERS {
        return std::borrow::Cow::Borrowed(value);
    }
    let mut kept = String::with_capacity(TRACESTATE_MAX_CHARS);
    let short = members().filter(|m| m.len() <= TRACESTATE_MAX_MEMBER_CHARS);
    for member in short.take(TRACESTATE_MAX_MEMBERS) {
        let comma = usize::from(!kept.is_empty());
        if kept.len() + comma + member.len() > TRACESTATE_MAX_CHARS {
            break; // this one and every one after it: removed from the end
        }
        if comma == 1 {
            kept.push(',');
        }
        kept.push_str(member);
    }
    std::borrow::Cow::Owned(kept)
}

/// The `traceparent` of `context`: `00-<trace id>-<span id>-<flags>`.
pub(crate) fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

/// The `tracestate` of `context`, when it has entries.
pub(crate) fn tracestate(context: &SpanContext) -> Option<String> {
    let header = context.trace_state().header();
    (!header.is_empty()).then_some(header)
}

/// Reads a `traceparent` (W3C Trace Context, 3.2): version 00 exactly, a later version by
/// its first four fields; ids of lowercase hex, not all zeros; version ff refused.
fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let value = value.trim();
    let mut parts = value.split('-');
    let (version, trace_id, span_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if !hex(version, 2) || version == "ff" || !hex(trace_id, 32) || !hex(span_id, 16) {
        return None;
    }
    if !hex(flags, 2) || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    // Only the sampled bit is defined; the others are not passed on.
    Some((
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn carried(traceparent: &str) -> Option<SpanContext> {
        Carried {
            traceparent: Some(traceparent),
            tracestate: None,
        }
        .span_context()
    }

    #[test]
    fn a_traceparent_is_read_and_written_back_the_same() {
        let context = Carried {
            traceparent: Some(PARENT),
            tracestate: Some("vendor=x,other=y"),
        }
        .span_context()
        .unwrap();
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(traceparent(&context), PARENT);
        assert_eq!(tracestate(&context).as_deref(), Some("vendor=x,other=y"));
        let unsampled = carried("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.unwrap().is_sampled());
        // A later version: its first four fields, the rest ignored.
        assert!(carried(&format!("01-{}-more", &PARENT[3..])).is_some());
    }

    #[test]
    fn a_large_tracestate_is_cut_as_w3c_trace_context_suggests() {
        // Within the bounds: as given.
        let small = "a=1,b=2";
        assert_eq!(bounded_tracestate(small), small);
        // The attack: 32 members of ~240 characters (7.6 KB).
        let huge: Vec<String> = (0..32)
            .map(|i| format!("v{i}={}", "x".repeat(236)))
            .collect();
        let huge = huge.join(",");
        assert!(huge.len() > 7_000);
        assert_eq!(bounded_tracestate(&huge), "");
        // Long members go first, then members from the end until 512 characters.
        let member = |i: usize| format!("k{i:02}={}", "y".repeat(56)); // 60 characters
        let mixed: Vec<String> = (0..12)
            .map(|i| match i {
                3 => format!("long={}", "z".repeat(200)),
                _ => member(i),
            })
            .collect();
        let cut = bounded_tracestate(&mixed.join(",")).into_owned();
        let kept: Vec<&str> = cut.split(',').collect();
        assert!(cut.len() <= TRACESTATE_MAX_CHARS, "{}", cut.len());
        assert_eq!(
            kept.len(),
            8,
            "8 × 60 + 7 commas = 487; a 9th would pass 512"
        );
        assert!(!cut.contains("long="));
        assert_eq!(kept[..3], [member(0), member(1), member(2)]);
        assert_eq!(kept[3], member(4), "the order kept");
        // At most 32 members, the first ones.
        let many: Vec<String> = (0..40).map(|i| format!("m{i}=1")).collect();
        let cut = bounded_tracestate(&many.join(",")).into_owned();
        assert_eq!(cut.split(',').count(), TRACESTATE_MAX_MEMBERS);
        assert!(cut.starts_with("m0=1,m1=1,") && cut.ends_with(",m31=1"));
        // And the span context keeps, and passes on, only what was kept.
        let context = Carried {
            traceparent: Some(PARENT),
            tracestate: Some(&mixed.join(",")),
        }
        .span_context()
        .unwrap();
        let carried_on = tracestate(&context).unwrap();
        assert!(carried_on.len() <= TRACESTATE_MAX_CHARS && !carried_on.contains("long="));
        let context = Carried {
            traceparent: Some(PARENT),
            tracestate: Some(&huge),
        }
        .span_context()
        .unwrap();
        assert_eq!(
            tracestate(&context),
            None,
            "nothing of the 7.6 KB is carried"
        );
    }

    #[test]
    fn a_malformed_traceparent_is_no_context() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(carried(bad).is_none(), "{bad:?}");
        }
        assert!(Carried::NONE.span_context().is_none());
    }
}
