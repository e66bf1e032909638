//! The login throttle, shared by every server through the database
//! (contract, "Hardening"): at most `max_failures` counted failures per
//! account and `max_failures_per_addr` per client address within a sliding
//! window. An attempt is counted *before* its password is checked, so however
//! many arrive at once, on however many servers, no more than the limit are
//! checked per window; a refused attempt is not counted (it does not extend
//! the lockout), and the lockout ends when the oldest counted failure
//! leaves the window. A login that succeeds un-counts itself and forgives
//! the account's earlier failures.

use std::net::IpAddr;

use crate::store::Store;

use super::rules::retry_after_secs;

/// Counted failures of one key: how many, and when the oldest was made (ms).
pub type KeyCount = (i64, Option<i64>);

/// Whether one more attempt may be counted: every key below its maximum.
pub fn admits(counts: &[KeyCount], maxes: &[u32]) -> bool {
    counts
        .iter()
        .zip(maxes)
        .all(|((n, _), max)| *n < i64::from(*max))
}

/// Seconds until an attempt may be counted again: when, for every key at
/// its maximum, the oldest counted failure leaves the window.
pub fn retry_after(counts: &[KeyCount], maxes: &[u32], now_ms: i64, window_ms: i64) -> u64 {
    let wait_ms = counts
        .iter()
        .zip(maxes)
        .filter(|((n, _), max)| *n >= i64::from(**max))
        .map(|((_, oldest), _)| oldest.map_or(window_ms, |o| o + window_ms - now_ms))
        .max()
        .unwrap_or(0)
        // An attempt that waited for the key's lock may find failures
        // stamped a moment after its own clock reading: never past a window.
        .min(window_ms);
    retry_after_secs(wait_ms)
}

pub struct LoginThrottle {
    store: Store,
    window_ms: i64,
    max_per_account: u32,
    max_per_addr: u32,
}

/// An attempt that was counted; tell the throttle if the password was right.
#[derive(Debug)]
pub struct CountedAttempt {
    ids: Vec<String>,
    account_key: String,
}

fn account_key(email: &str) -> String {
    format!("acct:{email}")
}

fn addr_key(addr: IpAddr) -> String {
    format!("addr:{addr}")
}

impl LoginThrottle {
    pub fn new(store: Store, window_s: u64, max_per_account: u32, max_per_addr: u32) -> Self {
        LoginThrottle {
            store,
            window_ms: i64::try_from(window_s.max(1).saturating_mul(1000)).unwrap_or(i64::MAX),
            max_per_account,
            max_per_addr,
        }
    }

    /// Counts an attempt for `email` (normalised) from `addr`, before its
    /// password is checked. `Ok(Err(seconds))`: refused, retry after that.
    pub async fn attempt(
        &self,
        email: &str,
        addr: IpAddr,
    ) -> Result<Result<CountedAttempt, u64>, sqlx::Error> {
        self.attempt_at(email, addr, crate::store::now_ms()).await
    }

    pub async fn attempt_at(
        &self,
        email: &str,
        addr: IpAddr,
        now_ms: i64,
    ) -> Result<Result<CountedAttempt, u64>, sqlx::Error> {
        let account = account_key(email);
        let keys = [account.clone(), addr_key(addr)];
        let maxes = [self.max_per_account, self.max_per_addr];
        let cutoff = now_ms - self.window_ms;
        match self
            .store
            .login_attempt(&keys, cutoff, now_ms, |c| admits(c, &maxes))
            .await?
        {
            Ok(ids) => Ok(Ok(CountedAttempt {
                ids,
                account_key: account,
            })),
            Err(counts) => Ok(Err(retry_after(&counts, &maxes, now_ms, self.window_ms))),
        }
    }

    /// The password was right: the attempt was no failure.
    pub async fn succeeded(&self, attempt: CountedAttempt) -> Result<(), sqlx::Error> {
        self.store
            .login_succeeded(&attempt.ids, &attempt.account_key)
            .await
    }

    /// Forgets failures no window can see (run now and then).
    pub async fn cleanup(&self) -> Result<(), sqlx::Error> {
        self.store
            .login_cleanup(crate::store::now_ms() - self.window_ms)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_admitted_only_while_every_key_is_below_its_maximum() {
        let maxes = [5, 50];
        assert!(admits(&[(0, None), (0, None)], &maxes));
        assert!(admits(&[(4, Some(1)), (49, Some(1))], &maxes));
        assert!(!admits(&[(5, Some(1)), (0, None)], &maxes));
        assert!(!admits(&[(0, None), (50, Some(1))], &maxes));
        assert!(!admits(&[(6, Some(1)), (0, None)], &maxes));
    }

    #[test]
    fn the_lockout_ends_when_the_oldest_counted_failure_leaves_the_window() {
        let maxes = [5, 50];
        let window = 300_000;
        let now = 1_000_000;
        // Oldest failure 100 s ago: it leaves in 200 s.
        let c = [(5, Some(now - 100_000)), (5, Some(now - 100_000))];
        assert_eq!(retry_after(&c, &maxes, now, window), 200);
        // Only keys at their maximum count; the longest wait wins.
        let c = [(5, Some(now - 299_500)), (50, Some(now - 10_000))];
        assert_eq!(retry_after(&c, &maxes, now, window), 290);
        // Rounded up, never below one second.
        let c = [(5, Some(now - 299_999)), (0, None)];
        assert_eq!(retry_after(&c, &maxes, now, window), 1);
        // A failure stamped just after this attempt's clock reading.
        let c = [(5, Some(now + 40)), (0, None)];
        assert_eq!(retry_after(&c, &maxes, now, window), 300);
    }
}
