//! Per-world admission limits: how many requests run at once, how many start per second,
//! how many WATCH streams stay open, and how long a request may take.
//!
//! Every request asks its world's [`Limiter`] first. A request is refused, never queued
//! without bound, and the refusal says when to come back:
//! - **concurrency** — a semaphore of [`LimitSettings::max_concurrent_requests`] slots. A
//!   request waits at most [`LimitSettings::queue_wait`] (default: not at all) for a slot,
//!   then is refused with a one-second hint;
//! - **rate** — a token bucket (GCRA, from `governor`) refilling
//!   [`LimitSettings::requests_per_second`] and holding at most [`LimitSettings::burst`];
//!   the refusal carries the exact time until the next token. A request refused for
//!   concurrency spends no token;
//! - **watches** — a separate cap, [`LimitSettings::max_watches`]; a WATCH spends one rate
//!   token when it opens and none while it stays open, and holds no request slot (it is
//!   also exempt from the request timeout);
//! - **watches per connection** — [`ConnectionWatches`], which a transport keeps for each
//!   connection: at most half the connection's stream limit (at least one), so WATCH streams
//!   never take every stream a client may open.
//!
//! Refusals answer `rate-limited` (HTTP 429) with a `Retry-After` in whole seconds, rounded
//! up and at least 1 ([`Refusal::retry_after_secs`]). The rate limiter reads an injectable
//! clock ([`Limiter::with_clock`]), so tests drive it with `governor`'s `FakeRelativeClock`;
//! the concurrency wait uses tokio's timer, so tests pause it.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::mark::Status;

/// The hint given when every request slot is taken: slots free up within a request's
/// lifetime, so a second is a sensible first retry.
const CONCURRENCY_RETRY_HINT: Duration = Duration::from_secs(1);

/// A world's limits, as configured (`[worlds.limits]`). Every field is optional.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSettings {
    /// Requests running at once (WATCH streams excluded). Default 32.
    pub max_concurrent_requests: NonZeroU32,
    /// Sustained requests per second. Default 50.
    pub requests_per_second: NonZeroU32,
    /// Requests admitted at once after a quiet spell. Default 100.
    pub burst: NonZeroU32,
    /// How long one request may run before it is answered with an error. Default 10 s.
    #[serde(deserialize_with = "duration")]
    pub request_timeout: Duration,
    /// WATCH streams open at once. Default 1024.
    pub max_watches: NonZeroU32,
    /// How long a request may wait for a free slot before it is refused. Default 0.
    #[serde(deserialize_with = "duration")]
    pub queue_wait: Duration,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            max_concurrent_requests: NonZeroU32::new(32).expect("non-zero"),
            requests_per_second: NonZeroU32::new(50).expect("non-zero"),
            burst: NonZeroU32::new(100).expect("non-zero"),
            request_timeout: Duration::from_secs(10),
            max_watches: NonZeroU32::new(1024).expect("non-zero"),
            queue_wait: Duration::ZERO,
        }
    }
}

/// Reads a duration written as text: `"10s"`, `"250ms"`, `"1m 30s"`.
pub(crate) fn duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(&text).map_err(|error| {
        serde::de::Error::custom(format!(
            "{text:?} is not a duration such as \"10s\" or \"250ms\": {error}"
        ))
    })
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// Every request slot was taken.
    Concurrency,
    /// The world's request rate was spent.
    Rate,
    /// Every WATCH slot was taken.
    Watches,
    /// Every WATCH slot of the connection was taken.
    ConnectionWatches,
}

/// A refused request: answer `rate-limited` with the retry hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RefusalReason,
    /// How long until a retry may succeed.
    pub retry_after: Duration,
}

impl Refusal {
    /// The status a handler answers with.
    pub fn status(&self) -> Status {
        Status::RateLimited
    }

    /// The `Retry-After` value: whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        retry_after_secs(self.retry_after)
    }

    /// The message for the error body.
    pub fn message(&self) -> String {
        let what = match self.reason {
            RefusalReason::Concurrency => "too many requests in progress",
            RefusalReason::Rate => "request rate exceeded",
            RefusalReason::Watches => "too many open watches",
            RefusalReason::ConnectionWatches => "too many open watches on this connection",
        };
        format!("{what}; retry after {} s", self.retry_after_secs())
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// Whole seconds to wait, rounded up, at least 1 (`Retry-After` has no fractions and 0
/// invites an immediate retry storm).
pub fn retry_after_secs(wait: Duration) -> u64 {
    let whole = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    whole.max(1)
}

/// A running request's slot; released when dropped.
#[derive(Debug)]
pub struct Admission {
    _slot: OwnedSemaphorePermit,
}

/// An open WATCH stream's slot; released when dropped.
#[derive(Debug)]
pub struct WatchAdmission {
    _slot: OwnedSemaphorePermit,
}

/// One connection's WATCH slots: at most half its stream limit, at least one. Cheap to
/// clone; clones share the slots.
#[derive(Clone, Debug)]
pub struct ConnectionWatches {
    slots: Arc<Semaphore>,
}

/// An open WATCH stream's slot on its connection; released when dropped.
#[derive(Debug)]
pub struct ConnectionWatchAdmission {
    _slot: OwnedSemaphorePermit,
}

impl ConnectionWatches {
    /// The slots of a connection that may open `max_streams` streams at once.
    pub fn for_stream_limit(max_streams: u32) -> ConnectionWatches {
        let half = usize::try_from(max_streams / 2).unwrap_or(Semaphore::MAX_PERMITS);
        ConnectionWatches {
            slots: Arc::new(Semaphore::new(half.clamp(1, Semaphore::MAX_PERMITS))),
        }
    }

    /// Slots free right now.
    pub fn free(&self) -> usize {
        self.slots.available_permits()
    }

    /// Admits a WATCH stream on this connection now or refuses it.
    pub fn try_admit(&self) -> Result<ConnectionWatchAdmission, Refusal> {
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal {
                reason: RefusalReason::ConnectionWatches,
                retry_after: CONCURRENCY_RETRY_HINT,
            })?;
        Ok(ConnectionWatchAdmission { _slot: slot })
    }
}

type Bucket<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One world's admission control.
pub struct Limiter<C: Clock = DefaultClock> {
    settings: LimitSettings,
    requests: Arc<Semaphore>,
    watches: Arc<Semaphore>,
    rate: Bucket<C>,
    clock: C,
}

impl<C: Clock> fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("settings", &self.settings)
            .field("free_request_slots", &self.requests.available_permits())
            .field("free_watch_slots", &self.watches.available_permits())
            .finish_non_exhaustive()
    }
}

impl Limiter<DefaultClock> {
    /// A limiter on the monotonic clock.
    pub fn new(settings: LimitSettings) -> Self {
        Limiter::with_clock(settings, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Limiter<C> {
    /// A limiter whose rate bucket reads `clock`.
    pub fn with_clock(settings: LimitSettings, clock: C) -> Self {
        let quota = Quota::per_second(settings.requests_per_second).allow_burst(settings.burst);
        Limiter {
            requests: Arc::new(Semaphore::new(slots(settings.max_concurrent_requests))),
            watches: Arc::new(Semaphore::new(slots(settings.max_watches))),
            rate: RateLimiter::direct_with_clock(quota, clock.clone()),
            clock,
            settings,
        }
    }

    pub fn settings(&self) -> &LimitSettings {
        &self.settings
    }

    /// How long a request may run.
    pub fn request_timeout(&self) -> Duration {
        self.settings.request_timeout
    }

    /// Request slots free right now.
    pub fn free_request_slots(&self) -> usize {
        self.requests.available_permits()
    }

    /// Admits a request now or refuses it; never waits.
    pub fn try_admit(&self) -> Result<Admission, Refusal> {
        let slot = self
            .requests
            .clone()
            .try_acquire_owned()
            .map_err(|_| concurrency_refusal())?;
        self.spend_rate_token()?;
        Ok(Admission { _slot: slot })
    }

    /// Admits a request, waiting at most [`LimitSettings::queue_wait`] for a free slot.
    pub async fn admit(&self) -> Result<Admission, Refusal> {
        let wait = self.settings.queue_wait;
        let slot = if wait.is_zero() {
            self.requests.clone().try_acquire_owned().ok()
        } else {
            tokio::time::timeout(wait, self.requests.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
        };
        let slot = slot.ok_or_else(concurrency_refusal)?;
        self.spend_rate_token()?;
        Ok(Admission { _slot: slot })
    }

    /// Admits a WATCH stream now or refuses it.
    pub fn try_admit_watch(&self) -> Result<WatchAdmission, Refusal> {
        let slot = self
            .watches
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal {
                reason: RefusalReason::Watches,
                retry_after: CONCURRENCY_RETRY_HINT,
            })?;
        self.spend_rate_token()?;
        Ok(WatchAdmission { _slot: slot })
    }

    fn spend_rate_token(&self) -> Result<(), Refusal> {
        self.rate.check().map_err(|not_until| Refusal {
            reason: RefusalReason::Rate,
            retry_after: not_until.wait_time_from(self.clock.now()),
        })
    }
}

fn slots(count: NonZeroU32) -> usize {
    usize::try_from(count.get()).unwrap_or(Semaphore::MAX_PERMITS)
}

fn concurrency_refusal() -> Refusal {
    Refusal {
        reason: RefusalReason::Concurrency,
        retry_after: CONCURRENCY_RETRY_HINT,
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn settings(concurrent: u32, per_second: u32, burst: u32) -> LimitSettings {
        LimitSettings {
            max_concurrent_requests: NonZeroU32::new(concurrent).unwrap(),
            requests_per_second: NonZeroU32::new(per_second).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
            ..LimitSettings::default()
        }
    }

    fn limiter(settings: LimitSettings) -> (Limiter<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (Limiter::with_clock(settings, clock.clone()), clock)
    }

    #[test]
    fn defaults_follow_the_reference() {
        let defaults = LimitSettings::default();
        assert_eq!(defaults.max_concurrent_requests.get(), 32);
        assert_eq!(defaults.requests_per_second.get(), 50);
        assert_eq!(defaults.burst.get(), 100);
        assert_eq!(defaults.request_timeout, Duration::from_secs(10));
        assert_eq!(defaults.max_watches.get(), 1024);
        assert_eq!(defaults.queue_wait, Duration::ZERO);
        let limiter = Limiter::new(defaults);
        assert_eq!(limiter.request_timeout(), Duration::from_secs(10));
        assert_eq!(limiter.free_request_slots(), 32);
    }

    #[test]
    fn reads_settings_from_toml() {
        let parsed: LimitSettings = toml::from_str(
            "max_concurrent_requests = 4\nrequests_per_second = 5\nburst = 6\nrequest_timeout = \"2s 500ms\"\nmax_watches = 7\nqueue_wait = \"250ms\"\n",
        )
        .unwrap();
        assert_eq!(
            parsed,
            LimitSettings {
                max_concurrent_requests: NonZeroU32::new(4).unwrap(),
                requests_per_second: NonZeroU32::new(5).unwrap(),
                burst: NonZeroU32::new(6).unwrap(),
                request_timeout: Duration::from_millis(2500),
                max_watches: NonZeroU32::new(7).unwrap(),
                queue_wait: Duration::from_millis(250),
            }
        );
        let partial: LimitSettings = toml::from_str("burst = 9\n").unwrap();
        assert_eq!(partial.burst.get(), 9);
        assert_eq!(partial.requests_per_second.get(), 50);

        for (text, mentions) in [
            ("burst = 0\n", "nonzero"),
            ("burts = 3\n", "unknown field `burts`"),
            ("request_timeout = 10\n", "invalid type"),
            ("request_timeout = \"soon\"\n", "not a duration"),
            ("requests_per_second = -1\n", "invalid value"),
        ] {
            let error = toml::from_str::<LimitSettings>(text).unwrap_err();
            assert!(
                error.message().contains(mentions),
                "{text:?}: {:?} should mention {mentions:?}",
                error.message()
            );
        }
    }

    #[test]
    fn the_rate_bucket_admits_a_burst_then_one_per_interval() {
        let (limiter, clock) = limiter(settings(100, 10, 3));
        for _ in 0..3 {
            drop(limiter.try_admit().unwrap());
        }
        let refusal = limiter.try_admit().unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::Rate);
        assert_eq!(refusal.retry_after, Duration::from_millis(100));
        assert_eq!(refusal.retry_after_secs(), 1);
        assert_eq!(refusal.status(), Status::RateLimited);
        assert_eq!(refusal.message(), "request rate exceeded; retry after 1 s");

        clock.advance(Duration::from_millis(60));
        assert_eq!(
            limiter.try_admit().unwrap_err().retry_after,
            Duration::from_millis(40)
        );
        clock.advance(Duration::from_millis(40));
        drop(limiter.try_admit().unwrap());
        assert!(limiter.try_admit().is_err());

        // A long quiet spell refills only up to the burst.
        clock.advance(Duration::from_secs(60));
        for _ in 0..3 {
            drop(limiter.try_admit().unwrap());
        }
        assert_eq!(limiter.try_admit().unwrap_err().reason, RefusalReason::Rate);
    }

    #[test]
    fn a_slow_rate_gives_a_longer_retry_hint() {
        let (limiter, _clock) = limiter(settings(10, 1, 1));
        drop(limiter.try_admit().unwrap());
        let refusal = limiter.try_admit().unwrap_err();
        assert_eq!(refusal.retry_after, Duration::from_secs(1));
        assert_eq!(refusal.retry_after_secs(), 1);
    }

    #[test]
    fn concurrency_is_capped_and_slots_return_on_drop() {
        let (limiter, _clock) = limiter(settings(2, 1000, 1000));
        let first = limiter.try_admit().unwrap();
        let _second = limiter.try_admit().unwrap();
        assert_eq!(limiter.free_request_slots(), 0);
        let refusal = limiter.try_admit().unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::Concurrency);
        assert_eq!(refusal.retry_after_secs(), 1);
        assert_eq!(
            refusal.message(),
            "too many requests in progress; retry after 1 s"
        );
        drop(first);
        assert_eq!(limiter.free_request_slots(), 1);
        assert!(limiter.try_admit().is_ok());
    }

    #[test]
    fn a_refusal_for_concurrency_spends_no_rate_token() {
        let (limiter, _clock) = limiter(settings(1, 1, 3));
        let held = limiter.try_admit().unwrap();
        for _ in 0..10 {
            assert_eq!(
                limiter.try_admit().unwrap_err().reason,
                RefusalReason::Concurrency
            );
        }
        drop(held);
        drop(limiter.try_admit().unwrap());
        drop(limiter.try_admit().unwrap());
        assert_eq!(limiter.try_admit().unwrap_err().reason, RefusalReason::Rate);
        assert_eq!(
            limiter.free_request_slots(),
            1,
            "a rate refusal keeps no slot"
        );
    }

    #[test]
    fn watches_have_their_own_cap_and_spend_one_token_each() {
        let (limiter, _clock) = limiter(LimitSettings {
            max_watches: NonZeroU32::new(2).unwrap(),
            ..settings(1, 1, 3)
        });
        let first = limiter.try_admit_watch().unwrap();
        let _second = limiter.try_admit_watch().unwrap();
        let refusal = limiter.try_admit_watch().unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::Watches);
        assert_eq!(refusal.message(), "too many open watches; retry after 1 s");
        // Open watches hold no request slot.
        assert_eq!(limiter.free_request_slots(), 1);
        drop(limiter.try_admit().unwrap());
        // Two watches and one request spent the burst of three.
        drop(first);
        assert_eq!(
            limiter.try_admit_watch().unwrap_err().reason,
            RefusalReason::Rate
        );
    }

    #[test]
    fn a_connection_keeps_half_its_streams_for_other_requests() {
        let connection = ConnectionWatches::for_stream_limit(5);
        assert_eq!(connection.free(), 2);
        let first = connection.try_admit().unwrap();
        let _second = connection.clone().try_admit().unwrap();
        let refusal = connection.try_admit().unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::ConnectionWatches);
        assert_eq!(refusal.status(), Status::RateLimited);
        assert_eq!(
            refusal.message(),
            "too many open watches on this connection; retry after 1 s"
        );
        drop(first);
        assert!(connection.try_admit().is_ok());
        assert_eq!(ConnectionWatches::for_stream_limit(1).free(), 1);
        assert_eq!(ConnectionWatches::for_stream_limit(0).free(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn admit_waits_for_a_slot_at_most_the_queue_wait() {
        let (limiter, _clock) = limiter(LimitSettings {
            queue_wait: Duration::from_millis(50),
            ..settings(1, 1000, 1000)
        });
        let limiter = Arc::new(limiter);
        let held = limiter.admit().await.unwrap();

        // Nobody frees the slot: refused once the wait is over, not before.
        let started = tokio::time::Instant::now();
        let refusal = limiter.admit().await.unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::Concurrency);
        assert_eq!(started.elapsed(), Duration::from_millis(50));

        // The slot is freed while the request waits: admitted.
        let waiter = tokio::spawn({
            let limiter = limiter.clone();
            async move { limiter.admit().await.map(drop) }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the request waits for the slot");
        drop(held);
        assert_eq!(waiter.await.unwrap(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn admit_without_a_queue_wait_refuses_at_once() {
        let (limiter, _clock) = limiter(settings(1, 1000, 1000));
        let _held = limiter.admit().await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(
            limiter.admit().await.unwrap_err().reason,
            RefusalReason::Concurrency
        );
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_never_says_zero() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(999)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(30)), 30);
    }
}
