//! Wall-clock time enters the log only through [`Clock`], so tests pin `modified` times.
//!
//! Durations (backoff, the yield jitter, deadlines) use tokio's timer instead, which tests
//! pause and advance; nothing in this crate reads the system time except [`SystemClock`].

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ids::Timestamp;

/// A source of the current UTC time in whole seconds.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Timestamp;
}

/// The system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Timestamp(secs)
    }
}

/// A clock that stands still until told otherwise.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock(AtomicU64::new(start.0))
    }

    pub fn set(&self, now: Timestamp) {
        self.0.store(now.0, Ordering::SeqCst);
    }

    pub fn advance(&self, seconds: u64) {
        self.0.fetch_add(seconds, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp(100));
        assert_eq!(clock.now(), Timestamp(100));
        clock.advance(5);
        assert_eq!(clock.now(), Timestamp(105));
        clock.set(Timestamp(7));
        assert_eq!(clock.now(), Timestamp(7));
        assert!(SystemClock.now().0 > 1_700_000_000);
    }
}
