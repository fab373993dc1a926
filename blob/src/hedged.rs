//! Hedged requests: a second attempt for a `get` or `create` that runs past its kind's recent
//! p95 latency, so one stalled request does not stall the caller.
//!
//! A hedge is sent only if the hedge budget allows: every call earns a fraction of a hedge, the
//! bank is capped, and it starts full, so a store that turns slow as a whole costs at most a
//! bounded share of extra requests. The first decisive answer wins (a success, not-found or
//! precondition failure); a retryable failure of one attempt waits for the other.
//!
//! A hedged create that is told the key exists may have met its own other attempt, so it
//! reports [`ErrorKind::Ambiguous`], which callers resolve by reading the key back. All timing
//! goes through `tokio::time`, so tests on a paused clock are exact.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::time::Instant;

use crate::BlobStore;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::types::{Attributes, Generation, ListPage, Object};

/// When to hedge and how often. The defaults are the reference design's numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct HedgePolicy {
    /// The latency quantile past which an attempt is hedged.
    pub quantile: f64,
    /// The hedge delay never drops below this...
    pub min_delay: Duration,
    /// ...nor rises above this.
    pub max_delay: Duration,
    /// The hedge delay before a kind has any latency samples.
    pub initial_delay: Duration,
    /// Latency samples kept per kind (the most recent ones).
    pub window: usize,
    /// The delay is recomputed from the window after this many new samples.
    pub recompute_every: usize,
    /// Calls needed to earn one hedge (each call earns `1 / calls_per_hedge`).
    pub calls_per_hedge: u32,
    /// Hedges the bank holds at most; it starts full.
    pub max_banked_hedges: u32,
    /// Creates are timed separately below each of these sizes (bytes) and above the last.
    pub create_size_buckets: [usize; 2],
}

impl Default for HedgePolicy {
    fn default() -> Self {
        HedgePolicy {
            quantile: 0.95,
            min_delay: Duration::from_millis(25),
            max_delay: Duration::from_secs(1),
            initial_delay: Duration::from_millis(100),
            window: 256,
            recompute_every: 32,
            calls_per_hedge: 10,
            max_banked_hedges: 10,
            create_size_buckets: [64 << 10, 1 << 20],
        }
    }
}

/// How many hedges a [`Hedged`] store has sent, and how many answered first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HedgeCounts {
    pub sent: u64,
    pub won: u64,
}

/// Recent latencies of one kind of request and the hedge delay derived from them.
#[derive(Debug)]
struct LatencyWindow {
    samples: VecDeque<Duration>,
    since_recompute: usize,
    delay: Duration,
}

impl LatencyWindow {
    fn new(policy: &HedgePolicy) -> Self {
        LatencyWindow {
            samples: VecDeque::with_capacity(policy.window),
            since_recompute: 0,
            delay: policy.initial_delay,
        }
    }

    fn record(&mut self, policy: &HedgePolicy, latency: Duration) {
        if self.samples.len() == policy.window.max(1) {
            self.samples.pop_front();
        }
        self.samples.push_back(latency);
        self.since_recompute += 1;
        // The first sample replaces the initial guess; after that, every `recompute_every`.
        if self.samples.len() == 1 || self.since_recompute >= policy.recompute_every {
            self.since_recompute = 0;
            let mut sorted: Vec<Duration> = self.samples.iter().copied().collect();
            sorted.sort_unstable();
            let rank = (sorted.len() as f64 * policy.quantile).ceil() as usize;
            let quantile = sorted[rank.clamp(1, sorted.len()) - 1];
            self.delay = quantile.clamp(policy.min_delay, policy.max_delay);
        }
    }
}

#[derive(Debug)]
struct HedgeState {
    get: LatencyWindow,
    creates: [LatencyWindow; 3],
    /// The budget in call credits: a hedge costs `calls_per_hedge` credits.
    credits: u64,
}

/// Which latency window a request belongs to.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Get,
    Create(usize),
}

/// Which attempt's answer a hedged call returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// No hedge was sent.
    Single,
    /// A hedge was sent; the first attempt answered.
    FirstWon,
    /// A hedge was sent and answered.
    HedgeWon,
}

/// Wraps a store and hedges slow `get` and `create` calls; other operations pass through.
/// Clones share latency windows, budget and counters.
#[derive(Debug, Clone)]
pub struct Hedged {
    inner: Arc<dyn BlobStore>,
    policy: Arc<HedgePolicy>,
    state: Arc<Mutex<HedgeState>>,
    sent: Arc<AtomicU64>,
    won: Arc<AtomicU64>,
}

/// Whether an answer ends the race: it would not change on the other attempt.
fn is_decisive<T>(result: &Result<T>) -> bool {
    match result {
        Ok(_) => true,
        Err(err) => matches!(err.kind(), ErrorKind::NotFound | ErrorKind::Precondition),
    }
}

impl Hedged {
    /// Hedges with the default [`HedgePolicy`].
    pub fn new(inner: Arc<dyn BlobStore>) -> Self {
        Hedged::with_policy(inner, HedgePolicy::default())
    }

    pub fn with_policy(inner: Arc<dyn BlobStore>, policy: HedgePolicy) -> Self {
        let state = HedgeState {
            get: LatencyWindow::new(&policy),
            creates: std::array::from_fn(|_| LatencyWindow::new(&policy)),
            credits: u64::from(policy.max_banked_hedges) * u64::from(policy.calls_per_hedge),
        };
        Hedged {
            inner,
            policy: Arc::new(policy),
            state: Arc::new(Mutex::new(state)),
            sent: Arc::default(),
            won: Arc::default(),
        }
    }

    pub fn policy(&self) -> &HedgePolicy {
        &self.policy
    }

    /// Hedges sent and won so far.
    pub fn counts(&self) -> HedgeCounts {
        HedgeCounts {
            sent: self.sent.load(Ordering::Relaxed),
            won: self.won.load(Ordering::Relaxed),
        }
    }

    /// How long a `get` runs before it is hedged, as things stand.
    pub fn get_delay(&self) -> Duration {
        self.lock().get.delay
    }

    /// How long a `create` of `size` bytes runs before it is hedged, as things stand.
    pub fn create_delay(&self, size: usize) -> Duration {
        let bucket = self.create_bucket(size);
        self.lock().creates[bucket].delay
    }

    fn create_bucket(&self, size: usize) -> usize {
        self.policy
            .create_size_buckets
            .iter()
            .position(|limit| size < *limit)
            .unwrap_or(self.policy.create_size_buckets.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HedgeState> {
        self.state.lock().expect("hedge state lock poisoned")
    }

    fn window(state: &mut HedgeState, kind: Kind) -> &mut LatencyWindow {
        match kind {
            Kind::Get => &mut state.get,
            Kind::Create(bucket) => &mut state.creates[bucket],
        }
    }

    /// Earns this call's share of a hedge and returns the delay before hedging it.
    fn begin(&self, kind: Kind) -> Duration {
        let cap = u64::from(self.policy.max_banked_hedges) * u64::from(self.policy.calls_per_hedge);
        let mut state = self.lock();
        state.credits = (state.credits + 1).min(cap);
        Hedged::window(&mut state, kind).delay
    }

    fn try_spend(&self) -> bool {
        let cost = u64::from(self.policy.calls_per_hedge);
        let mut state = self.lock();
        if state.credits < cost {
            return false;
        }
        state.credits -= cost;
        true
    }

    fn record<T>(&self, kind: Kind, started: Instant, result: &Result<T>) {
        if is_decisive(result) {
            let mut state = self.lock();
            Hedged::window(&mut state, kind).record(&self.policy, started.elapsed());
        }
    }

    /// Runs `attempt`, and once more if the first runs past the kind's delay and the budget
    /// allows. Returns the answer and which attempt gave it.
    async fn race<T, F>(&self, kind: Kind, attempt: impl Fn() -> F) -> (Result<T>, Outcome)
    where
        F: Future<Output = Result<T>>,
    {
        let delay = self.begin(kind);
        let first_started = Instant::now();
        let mut first = pin!(attempt());
        tokio::select! {
            biased;
            result = &mut first => {
                self.record(kind, first_started, &result);
                return (result, Outcome::Single);
            }
            () = tokio::time::sleep(delay) => {}
        }
        if !self.try_spend() {
            let result = first.await;
            self.record(kind, first_started, &result);
            return (result, Outcome::Single);
        }
        self.sent.fetch_add(1, Ordering::Relaxed);
        let hedge_started = Instant::now();
        let mut hedge = pin!(attempt());
        let mut first_failed: Option<Error> = None;
        let mut hedge_failed: Option<Error> = None;
        loop {
            tokio::select! {
                biased;
                result = &mut first, if first_failed.is_none() => {
                    if is_decisive(&result) {
                        self.record(kind, first_started, &result);
                        return (result, Outcome::FirstWon);
                    }
                    first_failed = result.err();
                }
                result = &mut hedge, if hedge_failed.is_none() => {
                    if is_decisive(&result) {
                        self.record(kind, hedge_started, &result);
                        self.won.fetch_add(1, Ordering::Relaxed);
                        return (result, Outcome::HedgeWon);
                    }
                    hedge_failed = result.err();
                }
            }
            match (first_failed.take(), hedge_failed.take()) {
                // Both failed: an ambiguous failure outweighs a clean one, since that attempt
                // may have landed; otherwise the first attempt speaks.
                (Some(first_err), Some(hedge_err)) => {
                    let err = if hedge_err.is_ambiguous() {
                        hedge_err
                    } else {
                        first_err
                    };
                    return (Err(err), Outcome::FirstWon);
                }
                (first_err, hedge_err) => (first_failed, hedge_failed) = (first_err, hedge_err),
            }
        }
    }
}

#[async_trait]
impl BlobStore for Hedged {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        let kind = Kind::Create(self.create_bucket(data.len()));
        let (result, outcome) = self
            .race(kind, || self.inner.create(key, data.clone()))
            .await;
        match result {
            Err(err) if err.is_precondition() && outcome != Outcome::Single => Err(Error::new(
                Op::Create,
                key,
                ErrorKind::Ambiguous,
                "key exists after a hedged attempt went out; it may have met its own other attempt",
            )
            .with_source(err)),
            other => other,
        }
    }

    async fn get(&self, key: &str) -> Result<Object> {
        self.race(Kind::Get, || self.inner.get(key)).await.0
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.inner.get_range(key, range).await
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        self.inner.head(key).await
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        self.inner.replace(key, generation, data).await
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        self.inner.delete(key, generation).await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        self.inner.list(prefix, start_after, cursor).await
    }
    fn unique_generations(&self) -> bool {
        self.inner.unique_generations()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;
    use crate::simulated::{Fault, FaultRule, LatencyProfile, Simulated};
    use futures::future::join_all;

    const MS: Duration = Duration::from_millis(1);

    async fn store_with(key: &str) -> Arc<MemoryStore> {
        let store = Arc::new(MemoryStore::new());
        store
            .create(key, Bytes::from_static(b"value"))
            .await
            .unwrap();
        store
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_get_is_hedged_and_the_hedge_answers() {
        let simulated = Arc::new(Simulated::new(store_with("k").await, 1));
        let hedged = Hedged::new(simulated.clone());
        let stall = simulated.hold(Op::Get, "k");
        let start = Instant::now();
        let (object, ()) = tokio::join!(hedged.get("k"), async {
            stall.wait_held(1).await;
            stall.stop_catching();
        });
        assert_eq!(object.unwrap().data, Bytes::from_static(b"value"));
        // Hedged after the initial delay, answered at once; the stalled attempt was dropped.
        assert_eq!(start.elapsed(), 100 * MS);
        assert_eq!(hedged.counts(), HedgeCounts { sent: 1, won: 1 });
        assert_eq!((stall.held_count(), stall.caught_count()), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_get_of_a_missing_key_takes_the_hedges_not_found() {
        let simulated = Arc::new(Simulated::new(Arc::new(MemoryStore::new()), 1));
        let hedged = Hedged::new(simulated.clone());
        let stall = simulated.hold(Op::Get, "k");
        let (result, ()) = tokio::join!(hedged.get("k"), async {
            stall.wait_held(1).await;
            stall.stop_catching();
        });
        assert!(result.unwrap_err().is_not_found());
        assert_eq!(hedged.counts(), HedgeCounts { sent: 1, won: 1 });
    }

    #[tokio::test(start_paused = true)]
    async fn fast_gets_are_not_hedged() {
        let simulated = Simulated::new(store_with("k").await, 1)
            .with_latency(Op::Get, LatencyProfile::Fixed(10 * MS));
        let hedged = Hedged::new(Arc::new(simulated));
        for _ in 0..5 {
            hedged.get("k").await.unwrap();
        }
        assert_eq!(hedged.counts(), HedgeCounts::default());
        // 10 ms is below the floor.
        assert_eq!(hedged.get_delay(), 25 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn the_delay_follows_the_recent_p95_recomputed_every_32_samples() {
        let simulated = Arc::new(
            Simulated::new(store_with("k").await, 1)
                .with_latency(Op::Get, LatencyProfile::Fixed(300 * MS)),
        );
        let hedged = Hedged::new(simulated.clone());
        assert_eq!(hedged.get_delay(), 100 * MS);
        // The first call outruns the initial guess and is hedged; its sample replaces the guess.
        hedged.get("k").await.unwrap();
        assert_eq!(hedged.counts().sent, 1);
        assert_eq!(hedged.get_delay(), 300 * MS);

        simulated.set_latency(Op::Get, LatencyProfile::Fixed(50 * MS));
        for _ in 0..31 {
            hedged.get("k").await.unwrap();
        }
        assert_eq!(hedged.get_delay(), 300 * MS);
        hedged.get("k").await.unwrap();
        assert_eq!(hedged.get_delay(), 50 * MS);
        assert_eq!(hedged.counts().sent, 1);

        simulated.set_latency(Op::Get, LatencyProfile::Fixed(5 * MS));
        for _ in 0..300 {
            hedged.get("k").await.unwrap();
        }
        assert_eq!(hedged.get_delay(), 25 * MS, "clamped to the floor");
        simulated.set_latency(Op::Get, LatencyProfile::Fixed(3_000 * MS));
        for _ in 0..300 {
            hedged.get("k").await.unwrap();
        }
        assert_eq!(hedged.get_delay(), 1_000 * MS, "clamped to the ceiling");
    }

    #[tokio::test(start_paused = true)]
    async fn creates_are_timed_by_size() {
        let simulated = Simulated::new(Arc::new(MemoryStore::new()), 1)
            .with_latency(Op::Create, LatencyProfile::Fixed(60 * MS));
        let hedged = Hedged::new(Arc::new(simulated));
        for i in 0..4 {
            hedged
                .create(&format!("small/{i}"), Bytes::from(vec![0; 1024]))
                .await
                .unwrap();
        }
        hedged
            .create("medium", Bytes::from(vec![0; 64 << 10]))
            .await
            .unwrap();
        assert_eq!(hedged.create_delay(0), 60 * MS);
        assert_eq!(hedged.create_delay((64 << 10) - 1), 60 * MS);
        assert_eq!(hedged.create_delay(64 << 10), 60 * MS);
        assert_eq!(hedged.create_delay((1 << 20) - 1), 60 * MS);
        assert_eq!(
            hedged.create_delay(1 << 20),
            100 * MS,
            "no large create yet"
        );
        assert_eq!(hedged.get_delay(), 100 * MS, "gets are timed apart");
        assert_eq!(hedged.counts().sent, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedged_create_that_met_itself_is_ambiguous() {
        let store = Arc::new(MemoryStore::new());
        let simulated = Arc::new(Simulated::new(store.clone(), 1));
        let hedged = Hedged::new(simulated.clone());
        // The first attempt lands but its answer stalls; the hedge then finds the key taken.
        let stall = simulated.hold_response(Op::Create, "k");
        let (result, ()) = tokio::join!(hedged.create("k", Bytes::from_static(b"mine")), async {
            stall.wait_held(1).await;
            stall.stop_catching();
        });
        let err = result.unwrap_err();
        assert_eq!(
            (err.op(), err.key(), err.kind()),
            (Op::Create, "k", ErrorKind::Ambiguous)
        );
        assert_eq!(
            store.get("k").await.unwrap().data,
            Bytes::from_static(b"mine")
        );
        assert_eq!(hedged.counts().sent, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedged_create_whose_hedge_lands_succeeds() {
        let store = Arc::new(MemoryStore::new());
        let simulated = Arc::new(Simulated::new(store.clone(), 1));
        let hedged = Hedged::new(simulated.clone());
        // The first attempt never reaches the store; the hedge creates the key.
        let stall = simulated.hold(Op::Create, "k");
        let (result, ()) = tokio::join!(hedged.create("k", Bytes::from_static(b"mine")), async {
            stall.wait_held(1).await;
            stall.stop_catching();
        });
        let attributes = result.unwrap();
        assert_eq!(store.head("k").await.unwrap(), attributes);
        assert_eq!(hedged.counts(), HedgeCounts { sent: 1, won: 1 });
        // Unhedged, a taken key is a clean precondition failure.
        let err = hedged
            .create("k", Bytes::from_static(b"again"))
            .await
            .unwrap_err();
        assert!(err.is_precondition());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retryable_failure_waits_for_the_other_attempt() {
        let simulated = Arc::new(
            Simulated::new(store_with("k").await, 1)
                .with_latency(Op::Get, LatencyProfile::Fixed(200 * MS)),
        );
        simulated.add_fault(FaultRule::new(Op::Get, "k", Fault::Unavailable).on_call(1));
        let hedged = Hedged::new(simulated.clone());
        let start = Instant::now();
        hedged.get("k").await.unwrap();
        // The first attempt failed at 200 ms; the hedge sent at 100 ms answered at 300 ms.
        assert_eq!(start.elapsed(), 300 * MS);
        assert_eq!(hedged.counts(), HedgeCounts { sent: 1, won: 1 });

        simulated.add_fault(FaultRule::new(Op::Get, "k", Fault::Unavailable));
        let err = hedged.get("k").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_limits_hedges() {
        let simulated = Simulated::new(store_with("k").await, 1)
            .with_latency(Op::Get, LatencyProfile::Fixed(500 * MS));
        // A ceiling below the store's latency: every call wants a hedge.
        let policy = HedgePolicy {
            max_delay: 50 * MS,
            ..HedgePolicy::default()
        };
        let hedged = Hedged::with_policy(Arc::new(simulated), policy);
        let wave = |n: usize| join_all((0..n).map(|_| hedged.get("k")));

        // The bank starts full at 10 hedges; what 30 calls earn cannot rise above the cap.
        assert!(wave(30).await.iter().all(Result::is_ok));
        assert_eq!(hedged.counts().sent, 10);
        // Ten calls earn one hedge...
        wave(10).await;
        assert_eq!(hedged.counts().sent, 11);
        // ...and nine do not.
        wave(9).await;
        assert_eq!(hedged.counts().sent, 11);
        assert_eq!(hedged.counts().won, 0, "the first attempts answered first");
    }

    #[tokio::test(start_paused = true)]
    async fn other_operations_pass_through() {
        let store = store_with("k").await;
        let simulated = Arc::new(Simulated::new(store, 1));
        let hedged = Hedged::new(simulated.clone());
        let stall = simulated.hold(Op::Head, "k");
        let (attributes, ()) = tokio::join!(hedged.head("k"), async {
            stall.wait_held(1).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(hedged.counts().sent, 0);
            stall.release();
        });
        attributes.unwrap();
        assert_eq!(stall.caught_count(), 1);
    }
}
