//! Monotonic time for the catalog freshness window, injectable so tests can let the window
//! lapse without waiting for it.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
