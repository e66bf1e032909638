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

#[derive(Default)]
pub struct Metrics {
    requests: DashMap<(String, String, u16), AtomicU64>,
    latency: DashMap<String, Histogram>,
}

impl Metrics {
    pub fn observe(&self, method: &str, route: &str, status: u16, ms: f64) {
        let key = (method.to_string(), route.to_string(), status);
        // Read lock on the common path; the guard must be gone before entry() write-locks.
        let counted = self
            .requests
            .get(&key)
            .map(|c| c.fetch_add(1, Ordering::Relaxed))
            .is_some();
        if !counted {
            self.requests
                .entry(key)
                .or_default()
                .fetch_add(1, Ordering::Relaxed);
        }
        let observed = self.latency.get(route).map(|h| h.observe(ms)).is_some();
        if !observed {
            self.latency
                .entry(route.to_string())
                .or_default()
                .observe(ms);
        }
    }

    pub fn render(&self, extra: &[(&str, &str, u64)]) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str(
            "# HELP gatehouse_http_requests_total HTTP requests by method, route and status.\n",
        );
        out.push_str("# TYPE gatehouse_http_requests_total counter\n");
        let mut rows: Vec<_> = self
            .requests
            .iter()
            .map(|e| (e.key().clone(), e.value().load(Ordering::Relaxed)))
            .collect();
        rows.sort();
        for ((method, route, status), n) in rows {
            let _ = writeln!(
                out,
                "gatehouse_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP gatehouse_http_request_duration_seconds Time to the response head, by route.\n",
        );
        out.push_str("# TYPE gatehouse_http_request_duration_seconds histogram\n");
        let mut routes: Vec<String> = self.latency.iter().map(|e| e.key().clone()).collect();
        routes.sort();
        for route in routes {
            let Some(h) = self.latency.get(&route) else {
                continue;
            };
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
