//! Prometheus metrics: requests by route and status, a latency histogram by
//! route, and the usage writer's counters. Plain atomics; rendering is cheap.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

const BUCKETS_MS: [f64; 14] = [
    0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
];

#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_MS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, ms: f64) {
        for (i, b) in BUCKETS_MS.iter().enumerate() {
            if ms <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((ms * 1000.0) as u64, Ordering::Relaxed);
    }
}

/// One route's figures: its latency, and its request counts by method and status.
#[derive(Default)]
struct RouteStats {
    latency: Histogram,
    counts: parking_lot::RwLock<Vec<(&'static str, u16, AtomicU64)>>,
}

/// Adds one to the count of `method` and `status`, if it has one yet.
fn bump(counts: &[(&'static str, u16, AtomicU64)], method: &str, status: u16) -> bool {
    counts
        .iter()
        .find(|(m, s, _)| *m == method && *s == status)
        .map(|(_, _, n)| n.fetch_add(1, Ordering::Relaxed))
        .is_some()
}

/// Keyed by route with borrowed lookups, so counting a request allocates
/// nothing once its route, method and status have been seen.
#[derive(Default)]
pub struct Metrics {
    routes: DashMap<String, RouteStats>,
}

impl Metrics {
    pub fn observe(&self, method: &'static str, route: &str, status: u16, ms: f64) {
        let count = |stats: &RouteStats| {
            stats.latency.observe(ms);
            if !bump(&stats.counts.read(), method, status) {
                let mut counts = stats.counts.write();
                // Another request may have added it between the two locks.
                if !bump(&counts, method, status) {
                    counts.push((method, status, AtomicU64::new(1)));
                }
            }
        };
        // Read lock on the common path; the guard must be gone before entry() write-locks.
        if let Some(stats) = self.routes.get(route) {
            count(&stats);
            return;
        }
        count(&self.routes.entry(route.to_string()).or_default());
    }

    pub fn render(&self, extra: &[(&str, &str, u64)]) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str(
            "# HELP gatehouse_http_requests_total HTTP requests by method, route and status.\n",
        );
        out.push_str("# TYPE gatehouse_http_requests_total counter\n");
        let mut rows: Vec<(&'static str, String, u16, u64)> = Vec::new();
        for e in self.routes.iter() {
            for (method, status, n) in e.value().counts.read().iter() {
                rows.push((method, e.key().clone(), *status, n.load(Ordering::Relaxed)));
            }
        }
        rows.sort();
        for (method, route, status, n) in rows {
            let _ = writeln!(
                out,
                "gatehouse_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP gatehouse_http_request_duration_seconds Time to the response head, by route.\n",
        );
        out.push_str("# TYPE gatehouse_http_request_duration_seconds histogram\n");
        let mut routes: Vec<String> = self.routes.iter().map(|e| e.key().clone()).collect();
        routes.sort();
        for route in routes {
            let Some(stats) = self.routes.get(&route) else {
                continue;
            };
            let h = &stats.latency;
            for (i, b) in BUCKETS_MS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "gatehouse_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{}\"}} {}",
                    b / 1000.0,
                    h.buckets[i].load(Ordering::Relaxed)
                );
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ = writeln!(out, "gatehouse_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {count}");
            let _ = writeln!(
                out,
                "gatehouse_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum_us.load(Ordering::Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "gatehouse_http_request_duration_seconds_count{{route=\"{route}\"}} {count}"
            );
        }
        for (name, help, v) in extra {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_method_route_and_status_and_rendered_in_order() {
        let m = Metrics::default();
        m.observe("POST", "/v1/chat/completions", 200, 0.4);
        m.observe("POST", "/v1/chat/completions", 200, 3.0);
        m.observe("POST", "/v1/chat/completions", 429, 0.1);
        m.observe("GET", "/v1/models", 200, 0.2);
        m.observe("GET", "/v1/chat/completions", 405, 0.1);
        let text = m.render(&[("gatehouse_usage_records_written_total", "Written.", 7)]);
        let requests: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("gatehouse_http_requests_total{"))
            .collect();
        assert_eq!(
            requests,
            [
                r#"gatehouse_http_requests_total{method="GET",route="/v1/chat/completions",status="405"} 1"#,
                r#"gatehouse_http_requests_total{method="GET",route="/v1/models",status="200"} 1"#,
                r#"gatehouse_http_requests_total{method="POST",route="/v1/chat/completions",status="200"} 2"#,
                r#"gatehouse_http_requests_total{method="POST",route="/v1/chat/completions",status="429"} 1"#,
            ]
        );
        // Latency by route, whatever the method and status: 0.4, 3.0, 0.1, 0.1 ms.
        assert!(text.contains(
            r#"gatehouse_http_request_duration_seconds_bucket{route="/v1/chat/completions",le="0.0005"} 3"#
        ));
        assert!(text.contains(
            r#"gatehouse_http_request_duration_seconds_bucket{route="/v1/chat/completions",le="0.005"} 4"#
        ));
        assert!(
            text.contains(r#"gatehouse_http_request_duration_seconds_count{route="/v1/models"} 1"#)
        );
        assert!(text.contains("gatehouse_usage_records_written_total 7"));
    }
}
