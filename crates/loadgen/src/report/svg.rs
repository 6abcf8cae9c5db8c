//! Minimal inline SVG line charts (no scripts, no external resources).

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points, x ascending.
    pub points: Vec<(f64, f64)>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Escapes text for XML/HTML.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" tick step for a range (1, 2 or 5 × 10^k).
pub(crate) fn nice_step(range: f64, ticks: usize) -> f64 {
    if !(range.is_finite() && range > 0.0) {
        return 1.0;
    }
    let raw = range / ticks.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let f = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    f * mag
}

fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Renders a line chart.
pub(crate) fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    const PER_ROW: usize = 6;
    let legend_rows = series.len().div_ceil(PER_ROW).max(1);
    let (ml, mr, mt) = (70.0, 20.0, 34.0);
    let mb = 40.0 + 18.0 * legend_rows as f64;
    let (w, ph) = (860.0, 242.0);
    let h = mt + ph + mb;
    let pw = w - ml - mr;
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let x_min = xs.clone().fold(f64::INFINITY, f64::min);
    let x_max = xs.fold(f64::NEG_INFINITY, f64::max);
    let y_max_raw = ys.fold(0.0_f64, f64::max);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{t}"><rect width="100%" height="100%" fill="#fff"/><text x="{cx}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{t}</text>"##,
        t = esc(title),
        cx = w / 2.0
    );
    if !x_min.is_finite() || !x_max.is_finite() {
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="middle" font-size="13" fill="#888">no data</text></svg>"##,
            w / 2.0,
            h / 2.0
        );
        return svg;
    }
    let x_span = (x_max - x_min).max(1e-9);
    let y_step = nice_step(y_max_raw.max(1e-9), 5);
    let y_max = (y_max_raw / y_step).ceil().max(1.0) * y_step;
    let sx = |x: f64| ml + (x - x_min) / x_span * pw;
    let sy = |y: f64| mt + ph - (y / y_max) * ph;
    // grid and y ticks
    let mut y = 0.0;
    while y <= y_max + y_step * 0.01 {
        let py = sy(y);
        let _ = write!(
            svg,
            r##"<line x1="{ml}" y1="{py:.1}" x2="{x2}" y2="{py:.1}" stroke="#e5e5e5"/><text x="{tx}" y="{ty:.1}" text-anchor="end" font-size="11">{v}</text>"##,
            x2 = ml + pw,
            tx = ml - 6.0,
            ty = py + 4.0,
            v = fmt_num(y)
        );
        y += y_step;
    }
    // x ticks
    let x_step = nice_step(x_span, 8);
    let mut x = (x_min / x_step).ceil() * x_step;
    while x <= x_max + x_step * 0.01 {
        let px = sx(x);
        let _ = write!(
            svg,
            r##"<line x1="{px:.1}" y1="{y1}" x2="{px:.1}" y2="{y2}" stroke="#999"/><text x="{px:.1}" y="{ty}" text-anchor="middle" font-size="11">{v}</text>"##,
            y1 = mt + ph,
            y2 = mt + ph + 4.0,
            ty = mt + ph + 17.0,
            v = fmt_num(x)
        );
        x += x_step;
    }
    let _ = write!(
        svg,
        r##"<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#999"/><text x="{cx}" y="{xl}" text-anchor="middle" font-size="12">{xlab}</text><text transform="translate(16 {cy}) rotate(-90)" text-anchor="middle" font-size="12">{ylab}</text>"##,
        cx = ml + pw / 2.0,
        xl = mt + ph + 34.0,
        cy = mt + ph / 2.0,
        xlab = esc(x_label),
        ylab = esc(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        if !s.points.is_empty() {
            let pts: Vec<String> = s
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
                .collect();
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{}"/>"#,
                pts.join(" ")
            );
        }
        let lx = ml + 10.0 + (i % PER_ROW) as f64 * 125.0;
        let ly = mt + ph + 56.0 + 18.0 * (i / PER_ROW) as f64;
        let _ = write!(
            svg,
            r#"<rect x="{lx}" y="{ry}" width="12" height="4" fill="{color}"/><text x="{tx}" y="{ly}" font-size="11">{name}</text>"#,
            ry = ly - 6.0,
            tx = lx + 16.0,
            name = esc(&s.name)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(100.0, 5), 20.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(0.0, 5), 1.0);
        assert!((nice_step(0.3, 5) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn renders_series_and_empty_charts() {
        let s = line_chart(
            "t<1>",
            "s",
            "ms",
            &[Series {
                name: "p99".into(),
                points: vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)],
            }],
        );
        assert!(s.starts_with("<svg"));
        assert!(s.ends_with("</svg>"));
        assert!(s.contains("<polyline"));
        assert!(s.contains("t&lt;1&gt;"));
        let e = line_chart("empty", "s", "y", &[]);
        assert!(e.contains("no data"));
    }
}
