//! Charts as inline SVG drawn here on the server: no script, and every label
//! goes through maud's escaping like any other text.

use maud::{html, Markup};

const W: f64 = 640.0;
const H: f64 = 170.0;
const LEFT: f64 = 48.0;
const BOTTOM: f64 = 22.0;

fn short_time(ms: i64, bucket_ms: i64) -> String {
    let fmt = if bucket_ms >= 86_400_000 {
        "%m-%d"
    } else {
        "%m-%d %H:%M"
    };
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format(fmt).to_string())
        .unwrap_or_default()
}

/// Columns over time: one per bucket from `start_ms`, with an optional
/// second series (errors) drawn over the first. With `empty` (the range had
/// no requests) the chart is that sentence instead of bare axes.
pub fn over_time(
    title: &str,
    unit: &str,
    values: &[i64],
    overlay: Option<(&str, &[i64])>,
    start_ms: i64,
    bucket_ms: i64,
    empty: Option<&str>,
) -> Markup {
    if let Some(sentence) = empty {
        return html! {
            figure.chart {
                figcaption { (title) }
                p.empty { (sentence) }
            }
        };
    }
    let max = values.iter().copied().max().unwrap_or(0).max(1);
    let n = values.len().max(1) as f64;
    let plot_w = W - LEFT - 8.0;
    let plot_h = H - BOTTOM - 10.0;
    let bw = plot_w / n;
    let y = |v: i64| 10.0 + plot_h - (v as f64 / max as f64) * plot_h;
    let total: i64 = values.iter().sum();
    html! {
        figure.chart {
            figcaption { (title) }
            svg viewBox=(format!("0 0 {W} {H}")) role="img" aria-label=(title) xmlns="http://www.w3.org/2000/svg" {
                line x1=(LEFT) y1=(10.0 + plot_h) x2=(W - 8.0) y2=(10.0 + plot_h) stroke="#999" stroke-width="1" {}
                text x=(LEFT - 4.0) y="18" text-anchor="end" font-size="11" fill="#555" { (max) }
                text x=(LEFT - 4.0) y=(10.0 + plot_h) text-anchor="end" font-size="11" fill="#555" { "0" }
                @for (i, v) in values.iter().enumerate() {
                    @let x = LEFT + i as f64 * bw;
                    @let at = start_ms + i as i64 * bucket_ms;
                    rect x=(format!("{:.1}", x + bw * 0.1)) y=(format!("{:.1}", y(*v)))
                        width=(format!("{:.1}", (bw * 0.8).max(1.0))) height=(format!("{:.1}", 10.0 + plot_h - y(*v)))
                        fill="#2f6fab" {
                        title { (short_time(at, bucket_ms)) ": " (v) " " (unit) }
                    }
                    @if let Some((name, o)) = overlay {
                        @let ov = o.get(i).copied().unwrap_or(0);
                        @if ov > 0 {
                            rect x=(format!("{:.1}", x + bw * 0.1)) y=(format!("{:.1}", y(ov)))
                                width=(format!("{:.1}", (bw * 0.8).max(1.0))) height=(format!("{:.1}", 10.0 + plot_h - y(ov)))
                                fill="#c0392b" {
                                title { (short_time(at, bucket_ms)) ": " (ov) " " (name) }
                            }
                        }
                    }
                }
                text x=(LEFT) y=(H - 6.0) font-size="11" fill="#555" { (short_time(start_ms, bucket_ms)) }
                text x=(W - 8.0) y=(H - 6.0) text-anchor="end" font-size="11" fill="#555" {
                    (short_time(start_ms + (values.len() as i64) * bucket_ms, bucket_ms))
                }
            }
            p.legend {
                span.key.blue {} (unit)
                // A sum of averages means nothing: latency shows its peak.
                @if unit == "ms" { " (peak " (max) ")" } @else { " (total " (total) ")" }
                @if let Some((name, o)) = overlay {
                    " " span.key.red {} (name) " (total " (o.iter().sum::<i64>()) ")"
                }
            }
        }
    }
}

/// Spend per day: one column per day from `start_ms`, values in nano-units,
/// labels as amounts of `currency` (up to 9 decimals).
pub fn money_per_day(title: &str, currency: &str, nanos: &[i64], start_ms: i64) -> Markup {
    let day = 86_400_000;
    let money = |n: i64| {
        let s = crate::spend::amount::format_nanos(n);
        let s = s.trim_end_matches('0');
        s.strip_suffix('.').unwrap_or(s).to_string()
    };
    if nanos.iter().all(|n| *n == 0) {
        return html! {
            figure.chart id="spend-chart" {
                figcaption { (title) }
                p.empty { "No spend in this range." }
            }
        };
    }
    let max = nanos.iter().copied().max().unwrap_or(0).max(1);
    let n = nanos.len().max(1) as f64;
    let plot_w = W - LEFT - 8.0;
    let plot_h = H - BOTTOM - 10.0;
    let bw = plot_w / n;
    let y = |v: i64| 10.0 + plot_h - (v as f64 / max as f64) * plot_h;
    let total: i64 = nanos.iter().sum();
    html! {
        figure.chart id="spend-chart" {
            figcaption { (title) }
            svg viewBox=(format!("0 0 {W} {H}")) role="img" aria-label=(title) xmlns="http://www.w3.org/2000/svg" {
                line x1=(LEFT) y1=(10.0 + plot_h) x2=(W - 8.0) y2=(10.0 + plot_h) stroke="#999" stroke-width="1" {}
                text x=(LEFT - 4.0) y="18" text-anchor="end" font-size="11" fill="#555" { (money(max)) }
                text x=(LEFT - 4.0) y=(10.0 + plot_h) text-anchor="end" font-size="11" fill="#555" { "0" }
                @for (i, v) in nanos.iter().enumerate() {
                    @let x = LEFT + i as f64 * bw;
                    @let at = start_ms + i as i64 * day;
                    rect x=(format!("{:.1}", x + bw * 0.1)) y=(format!("{:.1}", y(*v)))
                        width=(format!("{:.1}", (bw * 0.8).max(1.0))) height=(format!("{:.1}", 10.0 + plot_h - y(*v)))
                        fill="#2f6fab" {
                        title { (short_time(at, day)) ": " (money(*v)) " " (currency) }
                    }
                }
                text x=(LEFT) y=(H - 6.0) font-size="11" fill="#555" { (short_time(start_ms, day)) }
            }
            p.legend { span.key.blue {} "spend (total " (money(total)) " " (currency) ")" }
        }
    }
}

/// Horizontal bars, one per group (model, user, agent).
pub fn by_group(title: &str, unit: &str, items: &[(String, i64)]) -> Markup {
    let max = items.iter().map(|i| i.1).max().unwrap_or(0).max(1);
    let row = 22.0;
    let label_w = 200.0;
    let h = (items.len() as f64 * row).max(row) + 6.0;
    html! {
        figure.chart {
            figcaption { (title) }
            @if items.is_empty() {
                p.empty { "No requests in this range." }
            } @else {
                svg viewBox=(format!("0 0 {W} {h}")) role="img" aria-label=(title) xmlns="http://www.w3.org/2000/svg" {
                    @for (i, (label, v)) in items.iter().enumerate() {
                        @let y0 = 3.0 + i as f64 * row;
                        @let bw = (*v as f64 / max as f64) * (W - label_w - 70.0);
                        text x=(label_w - 6.0) y=(y0 + 15.0) text-anchor="end" font-size="12" fill="#222" {
                            (truncate(label, 30))
                        }
                        rect x=(label_w) y=(y0 + 3.0) width=(format!("{:.1}", bw.max(1.0))) height=(row - 6.0) fill="#2f6fab" {
                            title { (label) ": " (v) " " (unit) }
                        }
                        text x=(format!("{:.1}", label_w + bw + 6.0)) y=(y0 + 15.0) font-size="12" fill="#222" { (v) }
                    }
                }
            }
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

/// Dense series from sparse buckets: `count` buckets, zero where absent.
pub fn dense(points: &[(i64, i64)], count: usize) -> Vec<i64> {
    let mut out = vec![0; count];
    for (bucket, v) in points {
        if let Some(slot) = usize::try_from(*bucket).ok().and_then(|b| out.get_mut(b)) {
            *slot = *v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_in_svg() {
        let svg =
            by_group("t", "requests", &[("<script>alert(1)</script>".into(), 3)]).into_string();
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;"));
    }

    #[test]
    fn dense_fills_gaps_and_ignores_out_of_range() {
        assert_eq!(
            dense(&[(0, 2), (3, 5), (9, 1), (-1, 4)], 4),
            vec![2, 0, 0, 5]
        );
    }
}
