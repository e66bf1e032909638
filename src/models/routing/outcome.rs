//! What a failed attempt means: whether the request moves on to another
//! target, and whether the failure counts against the target's health.
//!
//! | failure | retried (nothing reached the client yet) | counts against the target |
//! |---|---|---|
//! | connection refused or reset, closed before the head | yes | yes |
//! | no head within the provider's `timeout_s` | yes | yes |
//! | status 429 or 5xx | yes | yes |
//! | connection broken after the head, before anything reached the client | yes (a reset) | yes |
//! | any other status (4xx, an unfollowed 3xx) | never | no: the target answered |
//! | too slow after the head (body or stream) | no (only a timeout before the head is retried) | yes |
//! | a 2xx answer the gateway cannot use | no | yes |
//!
//! Once anything reached the client (a stream's first bytes), nothing is retried.

/// How an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Refused, reset, DNS failure, or closed before the response head.
    Connect,
    /// No response head within the provider's timeout.
    TimeoutBeforeHead,
    /// The upstream answered this status (not 2xx).
    Status(u16),
    /// The connection broke after the head (body or stream cut off).
    CutOff,
    /// The body, or the next stream event, did not come in time.
    TimeoutAfterHead,
    /// A 2xx answer the gateway cannot use (not JSON, wrong shape).
    BadAnswer,
}

/// A failure's label in `/metrics` (a fixed set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    Connect,
    Timeout,
    Status429,
    Status5xx,
    Status4xx,
    OtherStatus,
    CutOff,
    BadAnswer,
}

impl Cause {
    pub const ALL: [Cause; 8] = [
        Cause::Connect,
        Cause::Timeout,
        Cause::Status429,
        Cause::Status5xx,
        Cause::Status4xx,
        Cause::OtherStatus,
        Cause::CutOff,
        Cause::BadAnswer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Connect => "connect",
            Cause::Timeout => "timeout",
            Cause::Status429 => "status_429",
            Cause::Status5xx => "status_5xx",
            Cause::Status4xx => "status_4xx",
            Cause::OtherStatus => "status_other",
            Cause::CutOff => "cut_off",
            Cause::BadAnswer => "bad_answer",
        }
    }
}

impl Failure {
    pub fn cause(self) -> Cause {
        match self {
            Failure::Connect => Cause::Connect,
            Failure::TimeoutBeforeHead | Failure::TimeoutAfterHead => Cause::Timeout,
            Failure::Status(429) => Cause::Status429,
            Failure::Status(500..=599) => Cause::Status5xx,
            Failure::Status(400..=499) => Cause::Status4xx,
            Failure::Status(_) => Cause::OtherStatus,
            Failure::CutOff => Cause::CutOff,
            Failure::BadAnswer => Cause::BadAnswer,
        }
    }
}

/// The consequences of one failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Try the next target (if any attempt is left).
    pub retry: bool,
    /// Count it as one of the target's failures in a row (else the target
    /// answered, which resets them).
    pub against_target: bool,
}

/// Judges a failure; `client_got_bytes`: something was already sent to the client.
pub fn judge(failure: Failure, client_got_bytes: bool) -> Verdict {
    let (retry, against_target) = match failure {
        Failure::Connect | Failure::TimeoutBeforeHead | Failure::CutOff => (true, true),
        Failure::Status(s) if s == 429 || (500..=599).contains(&s) => (true, true),
        Failure::Status(_) => (false, false),
        Failure::TimeoutAfterHead | Failure::BadAnswer => (false, true),
    };
    Verdict {
        retry: retry && !client_got_bytes,
        against_target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retried(f: Failure) -> bool {
        judge(f, false).retry
    }

    #[test]
    fn connection_failures_and_timeouts_before_the_head_are_retried() {
        assert!(retried(Failure::Connect));
        assert!(retried(Failure::TimeoutBeforeHead));
        assert!(retried(Failure::CutOff));
    }

    #[test]
    fn status_429_and_5xx_are_retried() {
        for s in [429, 500, 502, 503, 504, 599] {
            assert!(retried(Failure::Status(s)), "{s}");
            assert!(judge(Failure::Status(s), false).against_target, "{s}");
        }
    }

    #[test]
    fn other_4xx_are_never_retried_and_do_not_count_against_the_target() {
        for s in [400, 401, 403, 404, 413, 422, 499] {
            assert_eq!(
                judge(Failure::Status(s), false),
                Verdict {
                    retry: false,
                    against_target: false
                },
                "{s}"
            );
        }
        assert!(!retried(Failure::Status(302)));
    }

    #[test]
    fn slow_bodies_and_unusable_answers_are_not_retried_but_count() {
        for f in [Failure::TimeoutAfterHead, Failure::BadAnswer] {
            assert_eq!(
                judge(f, false),
                Verdict {
                    retry: false,
                    against_target: true
                }
            );
        }
    }

    #[test]
    fn nothing_is_retried_once_the_client_got_bytes() {
        for f in [
            Failure::Connect,
            Failure::TimeoutBeforeHead,
            Failure::Status(503),
            Failure::Status(429),
            Failure::CutOff,
        ] {
            let v = judge(f, true);
            assert!(!v.retry, "{f:?}");
            assert!(v.against_target, "{f:?}");
        }
    }

    #[test]
    fn causes_have_fixed_labels() {
        assert_eq!(Failure::Status(429).cause().as_str(), "status_429");
        assert_eq!(Failure::Status(503).cause().as_str(), "status_5xx");
        assert_eq!(Failure::Status(404).cause().as_str(), "status_4xx");
        assert_eq!(Failure::TimeoutAfterHead.cause(), Cause::Timeout);
        assert_eq!(Failure::Connect.cause().as_str(), "connect");
        let mut labels: Vec<_> = Cause::ALL.iter().map(|c| c.as_str()).collect();
        labels.dedup();
        assert_eq!(labels.len(), Cause::ALL.len());
    }
}
