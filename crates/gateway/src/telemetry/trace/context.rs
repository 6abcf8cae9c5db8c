//! W3C Trace Context (`traceparent`, `tracestate`) as publishers and log records carry it:
//! read into an OpenTelemetry [`SpanContext`], and written from one.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

/// A trace context as it arrived, unparsed: the `traceparent` and `tracestate` of an HTTP
/// request's headers, a WebSocket publish frame's fields, a Kafka record's headers or a Redis
/// stream entry's fields. Parsed only when tracing is on.
#[derive(Clone, Copy, Debug, Default)]
pub struct Carried<'a> {
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
        // A malformed tracestate is dropped, the parent kept (W3C Trace Context, 3.3.1).
        let state = (self.tracestate)
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        Some(SpanContext::new(trace_id, span_id, flags, true, state))
    }
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
