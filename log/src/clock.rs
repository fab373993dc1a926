//! Wall-clock time enters the log only through [`Clock`], so tests pin `modified` times;
//! fresh randomness (ids, seeds) enters only through [`seed`] and [`rng`].
//!
//! Durations (backoff, the yield jitter, deadlines) use tokio's timer instead, which tests
//! pause and advance; a component that compares instants it keeps (the catalog's freshness
//! window) reads them through [`Elapsed`], so a test can also let a window lapse by hand. Nothing in the workspace reads the system time except [`SystemClock`],
//! or the operating system's randomness except [`seed`] and [`rng`]: the workspace's
//! `clippy.toml` refuses those reads anywhere else.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::ids::Timestamp;

/// A source of the current UTC time in whole seconds.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Timestamp;
}

/// The system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods, reason = "the system clock itself")]
    fn now(&self) -> Timestamp {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Timestamp(secs)
    }
}

/// A fresh seed from the operating system, for a component that then draws from its own
/// seeded rng (a test passes a fixed seed instead).
#[allow(
    clippy::disallowed_methods,
    reason = "the one source of fresh randomness"
)]
pub fn seed() -> u64 {
    rand::random()
}

/// An rng seeded from [`seed`], for the ids a process draws once (worlds, stores,
/// operations of a store without a seed of its own).
pub fn rng() -> SmallRng {
    SmallRng::seed_from_u64(seed())
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

/// Time elapsed since an arbitrary origin; never goes backwards.
pub trait Elapsed: Send + Sync + Debug {
    fn now(&self) -> Duration;
}

/// Tokio's monotonic clock (so a paused test runtime pauses it too).
#[derive(Debug)]
pub struct TokioElapsed {
    origin: tokio::time::Instant,
}

impl Default for TokioElapsed {
    fn default() -> Self {
        TokioElapsed {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Elapsed for TokioElapsed {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that stands still until [`ManualElapsed::advance`] moves it.
#[derive(Debug, Default)]
pub struct ManualElapsed {
    nanos: AtomicU64,
}

impl ManualElapsed {
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl Elapsed for ManualElapsed {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
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

    #[test]
    fn fresh_seeds_differ() {
        let seeds: std::collections::HashSet<u64> = (0..8).map(|_| seed()).collect();
        assert!(seeds.len() > 1);
    }

    #[test]
    fn manual_time_moves_only_when_told() {
        let clock = ManualElapsed::default();
        assert_eq!(clock.now(), Duration::ZERO);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), Duration::from_millis(1500));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_time_follows_the_runtime_clock() {
        let clock = TokioElapsed::default();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(clock.now(), Duration::from_secs(2));
    }
}
