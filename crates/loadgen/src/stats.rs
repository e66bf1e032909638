//! Latency samples and percentiles.

/// Nearest-rank percentile of an ascending-sorted slice: the smallest sample
/// such that at least `p` percent of the samples are less than or equal to it.
/// `None` for an empty slice. `p` is clamped to 0..=100 (0 gives the minimum).
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let p = p.clamp(0.0, 100.0);
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// Nanoseconds to milliseconds.
pub fn ms(nanos: u64) -> f64 {
    nanos as f64 / 1e6
}

/// A JSON number in milliseconds with microsecond precision, or `null`.
pub fn json_ms(nanos: Option<u64>) -> String {
    match nanos {
        Some(n) => format!("{:.3}", ms(n)),
        None => "null".to_string(),
    }
}

/// utime + stime (clock ticks) from the text of a /proc/PID/stat file.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace().skip(11); // fields 3..=13
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_has_no_percentile() {
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn single_sample_is_every_percentile() {
        for p in [0.0, 1.0, 50.0, 99.0, 100.0] {
            assert_eq!(percentile(&[7], p), Some(7));
        }
    }

    #[test]
    fn nearest_rank_on_one_to_hundred() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 99.5), Some(100));
        assert_eq!(percentile(&v, 100.0), Some(100));
    }

    #[test]
    fn nearest_rank_on_small_sets() {
        // Ten samples: p50 is the 5th, p99 is the 10th (ceil(9.9) = 10).
        let v: Vec<u64> = (10..=100).step_by(10).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 90.0), Some(90));
        assert_eq!(percentile(&v, 99.0), Some(100));
        // Four samples: p50 is the 2nd, p51 the 3rd.
        let v = [1, 2, 3, 4];
        assert_eq!(percentile(&v, 50.0), Some(2));
        assert_eq!(percentile(&v, 51.0), Some(3));
        // Out-of-range p is clamped.
        assert_eq!(percentile(&v, -5.0), Some(1));
        assert_eq!(percentile(&v, 250.0), Some(4));
    }

    #[test]
    fn cpu_ticks_from_proc_stat() {
        let stat = "4242 (a b) c) S 1 4242 4242 0 -1 4194560 2000 0 0 0 150 25 0 0 20 0 3 0";
        assert_eq!(cpu_ticks(stat), Some(175));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn milliseconds_formatting() {
        assert_eq!(json_ms(Some(1_234_567)), "1.235");
        assert_eq!(json_ms(Some(42_000)), "0.042");
        assert_eq!(json_ms(None), "null");
    }
}
