//! The self-contained HTML report: summary tables and inline SVG charts, no scripts and no
//! external resources, so it opens offline.

use std::fmt::Write as _;

use super::model::Report;
use super::svg::{Series, esc, line_chart};

fn latency(r: &Report, name: &str, f: impl Fn(&super::model::TimelinePoint) -> f64) -> Series {
    Series {
        name: name.to_owned(),
        points: r
            .timeline
            .iter()
            .filter(|p| p.latency_samples > 0)
            .map(|p| (p.t_secs, f(p)))
            .collect(),
    }
}

fn series(r: &Report, name: &str, f: impl Fn(&super::model::TimelinePoint) -> f64) -> Series {
    Series {
        name: name.to_owned(),
        points: r.timeline.iter().map(|p| (p.t_secs, f(p))).collect(),
    }
}

/// Renders the report as one HTML document.
pub(crate) fn render(r: &Report) -> String {
    let mut o = String::new();
    let title = format!("herald-loadgen {} report", r.command);
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>\
body{{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:920px}}\
h1{{font-size:22px}}h2{{font-size:17px;margin-top:28px}}\
table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ddd;padding:4px 10px;text-align:left;font-size:13px}}\
th{{background:#f5f5f5}}.ok{{color:#1a7f37;font-weight:bold}}.bad{{color:#c62828;font-weight:bold}}\
pre{{background:#f7f7f7;padding:10px;font-size:12px;overflow-x:auto}}svg{{max-width:100%;height:auto;margin:6px 0}}\
</style></head><body><h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    if r.verdict.ok {
        o.push_str("<p class=\"ok\">Verdict: OK</p>");
    } else {
        o.push_str("<p class=\"bad\">Verdict: problems</p><ul>");
        for p in &r.verdict.problems {
            let _ = write!(o, "<li>{}</li>", esc(p));
        }
        o.push_str("</ul>");
    }
    let _ = write!(o, "<p>Command: <code>{}</code></p>", esc(&r.args.join(" ")));
    o.push_str("<h2>Summary</h2><pre>");
    o.push_str(&esc(&super::text::render(r)));
    o.push_str("</pre>");
    if let Some(d) = &r.delivery
        && !d.per_topic.is_empty()
        && d.per_topic.len() <= 200
    {
        o.push_str("<h2>Per topic</h2><table><tr><th>topic</th><th>subscribers</th><th>published</th><th>expected</th><th>delivered</th><th>missing</th><th>duplicates</th><th>lost events</th></tr>");
        for t in &d.per_topic {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&t.topic),
                t.subscribers,
                t.published,
                t.expected,
                t.delivered,
                t.missing,
                t.duplicates,
                t.lost_events
            );
        }
        o.push_str("</table>");
    }
    o.push_str("<h2>Over time</h2>");
    o.push_str(&line_chart(
        "Open connections",
        "seconds",
        "connections",
        &[series(r, "open", |p| p.open as f64)],
    ));
    let mut rates = vec![series(
        r,
        if r.echo.is_some() {
            "echo answers/s"
        } else {
            "deliveries/s"
        },
        |p| p.deliveries_per_sec,
    )];
    if r.publish.is_some() {
        rates.push(series(r, "publish/s", |p| p.publish_per_sec));
    }
    o.push_str(&line_chart("Throughput", "seconds", "per second", &rates));
    o.push_str(&line_chart(
        "Latency percentiles (per interval)",
        "seconds",
        "ms",
        &[
            latency(r, "p50", |p| p.p50_ms),
            latency(r, "p90", |p| p.p90_ms),
            latency(r, "p99", |p| p.p99_ms),
            latency(r, "p99.9", |p| p.p999_ms),
            latency(r, "max", |p| p.max_ms),
        ],
    ));
    let rss: Vec<Series> = r
        .servers
        .iter()
        .enumerate()
        .map(|(i, s)| Series {
            name: format!("pid {}", s.pid),
            points: r
                .timeline
                .iter()
                .filter_map(|p| {
                    p.server_rss_kb
                        .get(i)
                        .map(|kb| (p.t_secs, *kb as f64 / 1024.0))
                })
                .collect(),
        })
        .collect();
    o.push_str(&line_chart("Server RSS", "seconds", "MiB", &rss));
    o.push_str("<h2>Raw report</h2><details><summary>JSON</summary><pre>");
    o.push_str(&esc(&serde_json::to_string_pretty(r).unwrap_or_default()));
    o.push_str("</pre></details></body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{TimelinePoint, Verdict};

    #[test]
    fn html_is_self_contained() {
        let r = Report {
            command: "sse".into(),
            timeline: (0..5)
                .map(|i| TimelinePoint {
                    t_secs: i as f64,
                    open: 10,
                    deliveries_per_sec: 100.0,
                    p99_ms: 2.0,
                    latency_samples: 10,
                    ..TimelinePoint::default()
                })
                .collect(),
            verdict: Verdict {
                ok: false,
                problems: vec!["<bad>".into()],
            },
            ..Report::default()
        };
        let html = render(&r);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("<script"));
        assert!(!html.contains("http://") || html.contains("http://www.w3.org/2000/svg"));
        assert_eq!(html.matches("<svg").count(), 4);
        assert!(html.contains("&lt;bad&gt;"));
    }
}
