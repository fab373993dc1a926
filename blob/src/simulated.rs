//! A store wrapper that injects latency, faults and holds, seeded and deterministic: the
//! simulated bucket behind benchmarks and fault tests.
//!
//! Each call passes these stages in order:
//! 0. **Call logs**: every matching [`Calls`] from [`Simulated::calls`] notes the call's key
//!    (and, once it is answered, whether it succeeded), so a test can count what reached the
//!    bucket without a wrapper of its own.
//! 1. **Request hold**: a matching [`Hold`] from [`Simulated::hold`] parks the call before it
//!    reaches the store, until the test releases it.
//! 2. **Latency**: a delay drawn from the operation's [`LatencyProfile`] with a seeded RNG and
//!    slept with `tokio::time::sleep`, so tests on a paused clock run instantly.
//! 3. **Faults**: the first armed [`FaultRule`] that fires decides what the call does instead
//!    of (or after) reaching the inner store; see [`Fault`].
//! 4. **Response hold**: a matching [`Hold`] from [`Simulated::hold_response`] parks the call
//!    after the store answered (a mutation has landed) and before the caller sees the answer.
//!
//! Latency draws and fault probabilities come from two RNG streams derived from one seed, so
//! arming a fault never shifts the latency sequence. Draws are taken in call order: on a
//! current-thread runtime (what `#[tokio::test]` uses) a run is reproducible from its seed.

use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{Semaphore, watch};

use crate::BlobStore;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::types::{Attributes, Generation, ListPage, Object};

/// The standard normal quantile at 0.99: a log-normal's p99 sits this many sigmas above its
/// median in log space.
const Z_P99: f64 = 2.326_347_874_040_841;

/// Mixed into the seed for the fault stream, so the two streams differ.
const FAULT_STREAM: u64 = 0x9e37_79b9_7f4a_7c15;

/// How long one kind of operation takes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum LatencyProfile {
    /// No delay at all (the call does not even yield).
    #[default]
    Zero,
    /// Always the same delay.
    Fixed(Duration),
    /// Evenly spread over `min..=max`.
    Uniform { min: Duration, max: Duration },
    /// Log-normal with the given median and 99th percentile (`p99 >= p50`); the tail above p99
    /// is unbounded, as a real store's is.
    LogNormal { p50: Duration, p99: Duration },
}

impl LatencyProfile {
    /// One delay drawn from this profile.
    pub fn draw(&self, rng: &mut impl Rng) -> Duration {
        match *self {
            LatencyProfile::Zero => Duration::ZERO,
            LatencyProfile::Fixed(delay) => delay,
            LatencyProfile::Uniform { min, max } => {
                if max <= min {
                    return min;
                }
                let span = (max - min).as_secs_f64();
                min + Duration::from_secs_f64(span * rng.random::<f64>())
            }
            LatencyProfile::LogNormal { p50, p99 } => {
                if p50.is_zero() {
                    return Duration::ZERO;
                }
                let mu = p50.as_secs_f64().ln();
                let sigma = ((p99.max(p50).as_secs_f64()).ln() - mu) / Z_P99;
                Duration::from_secs_f64((mu + sigma * standard_normal(rng)).exp())
            }
        }
    }
}

/// A standard normal draw (Box–Muller); one function does not justify another dependency.
fn standard_normal(rng: &mut impl Rng) -> f64 {
    // `random` yields [0, 1); the logarithm needs (0, 1].
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The ADR 0036 real-GCS figures for `op`, for small objects: create p50 40 ms / p99 50 ms;
/// metadata read (head) 11–14 ms; get ~30 ms; list ~30 ms. The ADR gives no spread for get and
/// list, nor any figure for get_range, replace or delete: get, get_range and list use p50 30 ms
/// with create's p99/p50 ratio (p99 37.5 ms); replace and delete are taken to cost a create.
pub fn real_gcs_latency(op: Op) -> LatencyProfile {
    let ms = Duration::from_millis;
    match op {
        Op::Head => LatencyProfile::Uniform {
            min: ms(11),
            max: ms(14),
        },
        Op::Get | Op::GetRange | Op::List => LatencyProfile::LogNormal {
            p50: ms(30),
            p99: Duration::from_micros(37_500),
        },
        Op::Create | Op::Replace | Op::Delete => LatencyProfile::LogNormal {
            p50: ms(40),
            p99: ms(50),
        },
    }
}

/// What an injected fault does to a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Refused with [`ErrorKind::Throttled`]; nothing reaches the store.
    Throttled,
    /// Refused with [`ErrorKind::Unavailable`]; nothing reaches the store.
    Unavailable,
    /// Mutations only: the mutation lands on the inner store, then the caller gets
    /// [`ErrorKind::Ambiguous`] (a lost response).
    AmbiguousAfterApply,
    /// Mutations only: nothing reaches the store, yet the caller gets [`ErrorKind::Ambiguous`]
    /// (a request lost on the way).
    AmbiguousBeforeApply,
    /// Reads only (get, get_range, head, list): the caller gets [`ErrorKind::Integrity`] instead
    /// of the store's answer (a corrupt response).
    Integrity,
    /// The call panics before it reaches the store (a driver bug), so a test can check that
    /// the task running it is contained.
    Panic,
}

impl Fault {
    /// Every fault, in the order [`FaultCounts`] reports them.
    pub const ALL: [Fault; 6] = [
        Fault::Throttled,
        Fault::Unavailable,
        Fault::AmbiguousAfterApply,
        Fault::AmbiguousBeforeApply,
        Fault::Integrity,
        Fault::Panic,
    ];

    /// Whether this fault means something for `op`.
    pub fn applies_to(self, op: Op) -> bool {
        match self {
            Fault::Throttled | Fault::Unavailable | Fault::Panic => true,
            Fault::AmbiguousAfterApply | Fault::AmbiguousBeforeApply => op.is_mutation(),
            Fault::Integrity => !op.is_mutation(),
        }
    }

    fn index(self) -> usize {
        Fault::ALL
            .iter()
            .position(|f| *f == self)
            .expect("every fault is in Fault::ALL")
    }
}

/// Which of a rule's matching calls it fires on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trigger {
    /// Every matching call.
    Always,
    /// Only the n-th matching call (counting from 1).
    Nth(u64),
    /// The first n matching calls.
    First(u64),
    /// Each matching call with this probability, drawn from the seeded fault stream.
    Probability(f64),
}

/// A fault armed for one operation on keys starting with a prefix (for `list`, the listing's
/// prefix argument is the key).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    pub op: Op,
    pub key_prefix: String,
    pub fault: Fault,
    pub trigger: Trigger,
    /// The error kind the caller gets instead of the fault's own (see
    /// [`FaultRule::reporting`]).
    pub reporting: Option<ErrorKind>,
}

impl FaultRule {
    /// A rule firing on every matching call; narrow it with [`FaultRule::on_call`],
    /// [`FaultRule::first`] or [`FaultRule::with_probability`].
    pub fn new(op: Op, key_prefix: impl Into<String>, fault: Fault) -> Self {
        FaultRule {
            op,
            key_prefix: key_prefix.into(),
            fault,
            trigger: Trigger::Always,
            reporting: None,
        }
    }

    /// The caller gets `kind` instead of the fault's own error kind; where the fault applies
    /// (before or after the store) stays the same. `AmbiguousAfterApply` reporting
    /// `Integrity` is a create that landed with an unreadable answer; `AmbiguousBeforeApply`
    /// reporting `Precondition` a refusal that wrote nothing.
    pub fn reporting(mut self, kind: ErrorKind) -> Self {
        self.reporting = Some(kind);
        self
    }

    /// Fires only on the n-th matching call (counting from 1).
    pub fn on_call(mut self, n: u64) -> Self {
        self.trigger = Trigger::Nth(n);
        self
    }

    /// Fires on the first n matching calls.
    pub fn first(mut self, n: u64) -> Self {
        self.trigger = Trigger::First(n);
        self
    }

    /// Fires on each matching call with probability `p`.
    pub fn with_probability(mut self, p: f64) -> Self {
        self.trigger = Trigger::Probability(p);
        self
    }

    fn matches(&self, op: Op, key: &str) -> bool {
        self.op == op && key.starts_with(&self.key_prefix)
    }
}

/// Names an armed rule, for [`Simulated::remove_fault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultRuleId(u64);

/// How many faults a [`Simulated`] store has injected, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub throttled: u64,
    pub unavailable: u64,
    pub ambiguous_after_apply: u64,
    pub ambiguous_before_apply: u64,
    pub integrity: u64,
    pub panicked: u64,
}

impl FaultCounts {
    pub fn get(&self, fault: Fault) -> u64 {
        match fault {
            Fault::Throttled => self.throttled,
            Fault::Unavailable => self.unavailable,
            Fault::AmbiguousAfterApply => self.ambiguous_after_apply,
            Fault::AmbiguousBeforeApply => self.ambiguous_before_apply,
            Fault::Integrity => self.integrity,
            Fault::Panic => self.panicked,
        }
    }

    pub fn total(&self) -> u64 {
        Fault::ALL.iter().map(|f| self.get(*f)).sum()
    }
}

#[derive(Debug)]
struct ArmedRule {
    id: FaultRuleId,
    rule: FaultRule,
    matched: u64,
}

#[derive(Debug)]
struct FaultState {
    rules: Vec<ArmedRule>,
    next_id: u64,
    rng: StdRng,
}

#[derive(Debug)]
struct LatencyState {
    profiles: [LatencyProfile; Op::ALL.len()],
    rng: StdRng,
}

/// Where a hold parks calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HoldPoint {
    /// Before the call reaches the store.
    Request,
    /// After the store answered, before the caller sees it.
    Response,
}

#[derive(Debug)]
struct HoldShared {
    op: Op,
    key_prefix: String,
    point: HoldPoint,
    /// Permits let held calls through in arrival order; closing it lets everything through.
    gate: Semaphore,
    catching: AtomicBool,
    held: watch::Sender<usize>,
    caught: AtomicU64,
    first_key: std::sync::OnceLock<String>,
}

impl HoldShared {
    fn is_active(&self) -> bool {
        self.catching.load(Ordering::Acquire) && !self.gate.is_closed()
    }
}

#[derive(Debug)]
struct Shared {
    latency: Mutex<LatencyState>,
    faults: Mutex<FaultState>,
    holds: Mutex<Vec<Arc<HoldShared>>>,
    calls: Mutex<Vec<Arc<CallsShared>>>,
    injected: [AtomicU64; Fault::ALL.len()],
}

#[derive(Debug)]
struct CallsShared {
    ops: Vec<Op>,
    key_prefix: String,
    /// The key of every matching call, in the order they arrived.
    keys: Mutex<Vec<String>>,
    /// The key of every matching call answered with success, in the order they were answered.
    answered: Mutex<Vec<String>>,
}

impl CallsShared {
    fn matches(&self, op: Op, key: &str) -> bool {
        self.ops.contains(&op) && key.starts_with(&self.key_prefix)
    }
}

/// Wraps a store and injects latency, faults and holds (see the module docs for the order).
/// Clones share profiles, rules, holds, RNG streams and counters.
#[derive(Debug, Clone)]
pub struct Simulated {
    inner: Arc<dyn BlobStore>,
    shared: Arc<Shared>,
}

fn op_index(op: Op) -> usize {
    Op::ALL
        .iter()
        .position(|o| *o == op)
        .expect("every op is in Op::ALL")
}

impl Simulated {
    /// A wrapper with no latency and no faults; `seed` fixes every later random draw.
    pub fn new(inner: Arc<dyn BlobStore>, seed: u64) -> Self {
        Simulated {
            inner,
            shared: Arc::new(Shared {
                latency: Mutex::new(LatencyState {
                    profiles: [LatencyProfile::Zero; Op::ALL.len()],
                    rng: StdRng::seed_from_u64(seed),
                }),
                faults: Mutex::new(FaultState {
                    rules: Vec::new(),
                    next_id: 0,
                    rng: StdRng::seed_from_u64(seed ^ FAULT_STREAM),
                }),
                holds: Mutex::default(),
                calls: Mutex::default(),
                injected: Default::default(),
            }),
        }
    }

    /// A wrapper with the ADR 0036 real-GCS figures for every operation
    /// (see [`real_gcs_latency`]).
    pub fn real_gcs(inner: Arc<dyn BlobStore>, seed: u64) -> Self {
        let simulated = Simulated::new(inner, seed);
        for op in Op::ALL {
            simulated.set_latency(op, real_gcs_latency(op));
        }
        simulated
    }

    /// Sets `op`'s latency profile (builder form of [`Simulated::set_latency`]).
    pub fn with_latency(self, op: Op, profile: LatencyProfile) -> Self {
        self.set_latency(op, profile);
        self
    }

    /// Sets `op`'s latency profile from now on.
    pub fn set_latency(&self, op: Op, profile: LatencyProfile) {
        self.lock_latency().profiles[op_index(op)] = profile;
    }

    /// `op`'s current latency profile.
    pub fn latency(&self, op: Op) -> LatencyProfile {
        self.lock_latency().profiles[op_index(op)]
    }

    /// Arms a fault rule. Rules are consulted in the order they were added; every matching rule
    /// counts the call, and the first that fires decides it.
    ///
    /// # Panics
    /// When the fault means nothing for the rule's operation (see [`Fault::applies_to`]).
    pub fn add_fault(&self, rule: FaultRule) -> FaultRuleId {
        assert!(
            rule.fault.applies_to(rule.op),
            "fault {:?} cannot be injected into {}",
            rule.fault,
            rule.op
        );
        let mut faults = self.lock_faults();
        let id = FaultRuleId(faults.next_id);
        faults.next_id += 1;
        faults.rules.push(ArmedRule {
            id,
            rule,
            matched: 0,
        });
        id
    }

    /// Disarms one rule; returns whether it was armed.
    pub fn remove_fault(&self, id: FaultRuleId) -> bool {
        let mut faults = self.lock_faults();
        let before = faults.rules.len();
        faults.rules.retain(|armed| armed.id != id);
        faults.rules.len() != before
    }

    /// Disarms every rule.
    pub fn clear_faults(&self) {
        self.lock_faults().rules.clear();
    }

    /// How many faults have been injected so far.
    pub fn injected(&self) -> FaultCounts {
        let count = |fault: Fault| self.shared.injected[fault.index()].load(Ordering::Relaxed);
        FaultCounts {
            throttled: count(Fault::Throttled),
            unavailable: count(Fault::Unavailable),
            ambiguous_after_apply: count(Fault::AmbiguousAfterApply),
            ambiguous_before_apply: count(Fault::AmbiguousBeforeApply),
            integrity: count(Fault::Integrity),
            panicked: count(Fault::Panic),
        }
    }

    /// Starts logging the calls of any of `ops` on keys starting with `key_prefix` (for
    /// `list`, its prefix argument), faulted and held ones included. The log lives as long
    /// as the returned [`Calls`].
    pub fn calls(&self, ops: &[Op], key_prefix: impl Into<String>) -> Calls {
        let calls = Arc::new(CallsShared {
            ops: ops.to_vec(),
            key_prefix: key_prefix.into(),
            keys: Mutex::default(),
            answered: Mutex::default(),
        });
        self.lock_calls().push(calls.clone());
        Calls {
            calls,
            shared: self.shared.clone(),
        }
    }

    fn lock_calls(&self) -> std::sync::MutexGuard<'_, Vec<Arc<CallsShared>>> {
        lock_calls(&self.shared)
    }

    /// Parks calls of `op` on keys starting with `key_prefix` **before** they reach the inner
    /// store (nothing has been sent; a parked mutation has not landed) until the returned
    /// [`Hold`] lets them go. When several holds match a call, the oldest parks it.
    pub fn hold(&self, op: Op, key_prefix: impl Into<String>) -> Hold {
        self.add_hold(op, key_prefix.into(), HoldPoint::Request)
    }

    /// Parks calls of `op` on keys starting with `key_prefix` **after** the inner store
    /// answered (a parked mutation has landed) and before the caller sees the answer.
    pub fn hold_response(&self, op: Op, key_prefix: impl Into<String>) -> Hold {
        self.add_hold(op, key_prefix.into(), HoldPoint::Response)
    }

    fn add_hold(&self, op: Op, key_prefix: String, point: HoldPoint) -> Hold {
        let hold = Arc::new(HoldShared {
            op,
            key_prefix,
            point,
            gate: Semaphore::new(0),
            catching: AtomicBool::new(true),
            held: watch::Sender::new(0),
            caught: AtomicU64::new(0),
            first_key: std::sync::OnceLock::new(),
        });
        self.lock_holds().push(hold.clone());
        Hold {
            hold,
            shared: self.shared.clone(),
        }
    }

    fn lock_latency(&self) -> std::sync::MutexGuard<'_, LatencyState> {
        self.shared
            .latency
            .lock()
            .expect("simulated latency lock poisoned")
    }

    fn lock_faults(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.shared
            .faults
            .lock()
            .expect("simulated fault lock poisoned")
    }

    fn lock_holds(&self) -> std::sync::MutexGuard<'_, Vec<Arc<HoldShared>>> {
        lock_holds(&self.shared)
    }

    async fn pass_holds(&self, op: Op, key: &str, point: HoldPoint) {
        let hold = self
            .lock_holds()
            .iter()
            .find(|h| {
                h.point == point && h.op == op && key.starts_with(&h.key_prefix) && h.is_active()
            })
            .cloned();
        let Some(hold) = hold else { return };
        hold.caught.fetch_add(1, Ordering::Relaxed);
        let _ = hold.first_key.set(key.to_owned());
        hold.held.send_modify(|held| *held += 1);
        // Counts the call out again however it leaves, including when its future is dropped.
        let _parked = Parked(&hold);
        if let Ok(permit) = hold.gate.acquire().await {
            permit.forget();
        }
    }

    fn draw_latency(&self, op: Op) -> Duration {
        let mut latency = self.lock_latency();
        let profile = latency.profiles[op_index(op)];
        profile.draw(&mut latency.rng)
    }

    fn pick_fault(&self, op: Op, key: &str) -> Option<(Fault, Option<ErrorKind>)> {
        let mut faults = self.lock_faults();
        let FaultState { rules, rng, .. } = &mut *faults;
        let mut chosen = None;
        for armed in rules.iter_mut().filter(|armed| armed.rule.matches(op, key)) {
            armed.matched += 1;
            let fires = match armed.rule.trigger {
                Trigger::Always => true,
                Trigger::Nth(n) => armed.matched == n,
                Trigger::First(n) => armed.matched <= n,
                Trigger::Probability(p) => rng.random::<f64>() < p,
            };
            if fires && chosen.is_none() {
                chosen = Some((armed.rule.fault, armed.rule.reporting));
            }
        }
        if let Some((fault, _)) = chosen {
            self.shared.injected[fault.index()].fetch_add(1, Ordering::Relaxed);
        }
        chosen
    }

    async fn run<T, F>(&self, op: Op, key: &str, call: impl FnOnce() -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let logs: Vec<Arc<CallsShared>> = self
            .lock_calls()
            .iter()
            .filter(|c| c.matches(op, key))
            .cloned()
            .collect();
        for log in &logs {
            lock(&log.keys).push(key.to_owned());
        }
        self.pass_holds(op, key, HoldPoint::Request).await;
        let delay = self.draw_latency(op);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let (fault, reporting) = self.pick_fault(op, key).unzip();
        let injected = |kind: ErrorKind, detail: &str| {
            Err(Error::new(
                op,
                key,
                reporting.flatten().unwrap_or(kind),
                detail,
            ))
        };
        let result = match fault {
            None => call().await,
            Some(Fault::Throttled) => injected(ErrorKind::Throttled, "injected: throttled"),
            Some(Fault::Unavailable) => injected(ErrorKind::Unavailable, "injected: unavailable"),
            Some(Fault::AmbiguousBeforeApply) => injected(
                ErrorKind::Ambiguous,
                "injected: request lost before it applied",
            ),
            Some(Fault::AmbiguousAfterApply) => {
                // The store's own answer is what the lost response would have carried.
                let _lost = call().await;
                injected(
                    ErrorKind::Ambiguous,
                    "injected: response lost after it applied",
                )
            }
            Some(Fault::Integrity) => injected(ErrorKind::Integrity, "injected: corrupt response"),
            Some(Fault::Panic) => panic!("injected: a panic in a {} of {key}", op.name()),
        };
        if result.is_ok() {
            for log in &logs {
                lock(&log.answered).push(key.to_owned());
            }
        }
        self.pass_holds(op, key, HoldPoint::Response).await;
        result
    }
}

fn lock_holds(shared: &Shared) -> std::sync::MutexGuard<'_, Vec<Arc<HoldShared>>> {
    shared.holds.lock().expect("simulated hold lock poisoned")
}

fn lock_calls(shared: &Shared) -> std::sync::MutexGuard<'_, Vec<Arc<CallsShared>>> {
    lock(&shared.calls)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().expect("simulated call log lock poisoned")
}

/// The log of the calls a [`Simulated`] store saw of some operations under a key prefix
/// (see [`Simulated::calls`]). Dropping it stops the logging.
#[derive(Debug)]
pub struct Calls {
    calls: Arc<CallsShared>,
    shared: Arc<Shared>,
}

impl Calls {
    /// How many matching calls arrived, whatever they were answered.
    pub fn count(&self) -> u64 {
        lock(&self.calls.keys).len() as u64
    }

    /// The keys of the matching calls, in arrival order.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.calls.keys).clone()
    }

    /// The keys of the matching calls answered with success, in the order they were answered
    /// (a read of an absent key, or a faulted call, is not among them).
    pub fn answered(&self) -> Vec<String> {
        lock(&self.calls.answered).clone()
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        lock_calls(&self.shared).retain(|c| !Arc::ptr_eq(c, &self.calls));
    }
}

struct Parked<'a>(&'a HoldShared);

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.held.send_modify(|held| *held -= 1);
    }
}

/// Parks matching calls of a [`Simulated`] store until released; lets a test order races
/// without sleeping. Dropping it releases every parked call and stops catching new ones.
#[derive(Debug)]
pub struct Hold {
    hold: Arc<HoldShared>,
    shared: Arc<Shared>,
}

impl Hold {
    /// How many calls are parked right now.
    pub fn held_count(&self) -> usize {
        *self.hold.held.borrow()
    }

    /// How many calls this hold has parked in all.
    pub fn caught_count(&self) -> u64 {
        self.hold.caught.load(Ordering::Relaxed)
    }

    /// The key of the first call this hold parked, if any (which of several racing calls
    /// came first, so a test can hold what follows on that very key).
    pub fn first_key(&self) -> Option<&str> {
        self.hold.first_key.get().map(String::as_str)
    }

    /// Waits until at least `n` calls are parked at once.
    pub async fn wait_held(&self, n: usize) {
        let mut parked = self.hold.held.subscribe();
        parked
            .wait_for(|held| *held >= n)
            .await
            .expect("the hold's sender lives as long as the hold");
    }

    /// Lets one call through: the longest-parked one, or the next to arrive if none is parked.
    pub fn release_one(&self) {
        self.hold.gate.add_permits(1);
    }

    /// Lets every parked call through, and every later call pass without parking.
    pub fn release(&self) {
        self.hold.gate.close();
    }

    /// Keeps the parked calls parked, but lets later calls pass (for instance: park a first
    /// attempt and let its retry or hedge through).
    pub fn stop_catching(&self) {
        self.hold.catching.store(false, Ordering::Release);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.hold.gate.close();
        lock_holds(&self.shared).retain(|h| !Arc::ptr_eq(h, &self.hold));
    }
}

#[async_trait]
impl BlobStore for Simulated {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        self.run(Op::Create, key, || self.inner.create(key, data))
            .await
    }

    async fn get(&self, key: &str) -> Result<Object> {
        self.run(Op::Get, key, || self.inner.get(key)).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.run(Op::GetRange, key, || self.inner.get_range(key, range))
            .await
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        self.run(Op::Head, key, || self.inner.head(key)).await
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        self.run(Op::Replace, key, || {
            self.inner.replace(key, generation, data)
        })
        .await
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        self.run(Op::Delete, key, || self.inner.delete(key, generation))
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        self.run(Op::List, prefix, || {
            self.inner.list(prefix, start_after, cursor)
        })
        .await
    }
    fn unique_generations(&self) -> bool {
        self.inner.unique_generations()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;
    use tokio::time::Instant;

    fn memory() -> Arc<MemoryStore> {
        Arc::new(MemoryStore::new())
    }

    fn percentile(sorted: &[Duration], q: f64) -> Duration {
        sorted[((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1)]
    }

    #[test]
    fn log_normal_draws_respect_p50_and_p99() {
        let profile = LatencyProfile::LogNormal {
            p50: Duration::from_millis(40),
            p99: Duration::from_millis(50),
        };
        let mut rng = StdRng::seed_from_u64(7);
        let mut draws: Vec<Duration> = (0..20_000).map(|_| profile.draw(&mut rng)).collect();
        draws.sort();
        let p50 = percentile(&draws, 0.50).as_secs_f64() * 1e3;
        let p99 = percentile(&draws, 0.99).as_secs_f64() * 1e3;
        assert!((39.0..41.0).contains(&p50), "p50 {p50} ms");
        assert!((48.5..51.5).contains(&p99), "p99 {p99} ms");
    }

    #[test]
    fn uniform_draws_stay_in_bounds_and_spread() {
        let profile = real_gcs_latency(Op::Head);
        let mut rng = StdRng::seed_from_u64(1);
        let draws: Vec<Duration> = (0..2_000).map(|_| profile.draw(&mut rng)).collect();
        let (min, max) = (Duration::from_millis(11), Duration::from_millis(14));
        assert!(draws.iter().all(|d| (min..=max).contains(d)));
        assert!(draws.iter().any(|d| *d < Duration::from_millis(12)));
        assert!(draws.iter().any(|d| *d > Duration::from_millis(13)));
    }

    async fn timed_gets(seed: u64) -> Vec<Duration> {
        let store = memory();
        store.create("k", Bytes::from_static(b"v")).await.unwrap();
        let simulated = Simulated::real_gcs(store, seed);
        let mut out = Vec::new();
        for _ in 0..32 {
            let start = Instant::now();
            simulated.get("k").await.unwrap();
            out.push(start.elapsed());
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_reproducible_from_the_seed() {
        let first = timed_gets(42).await;
        assert_eq!(first, timed_gets(42).await);
        assert_ne!(first, timed_gets(43).await);
        assert!(first.iter().all(|d| *d > Duration::from_millis(20)));
    }

    #[tokio::test(start_paused = true)]
    async fn arming_faults_does_not_shift_latency_draws() {
        let plain = timed_gets(9).await;
        let store = memory();
        store.create("k", Bytes::from_static(b"v")).await.unwrap();
        let simulated = Simulated::real_gcs(store, 9);
        simulated.add_fault(FaultRule::new(Op::Get, "k", Fault::Unavailable).with_probability(0.5));
        let mut faulty = Vec::new();
        for _ in 0..32 {
            let start = Instant::now();
            let _ = simulated.get("k").await;
            faulty.push(start.elapsed());
        }
        assert_eq!(plain, faulty);
        assert!(simulated.injected().unavailable > 0);
    }

    #[tokio::test(start_paused = true)]
    async fn refusing_faults_apply_nothing() {
        let store = memory();
        let simulated = Simulated::new(store.clone(), 1);
        simulated.add_fault(FaultRule::new(Op::Create, "a", Fault::Throttled));
        simulated.add_fault(FaultRule::new(Op::Create, "b", Fault::Unavailable));
        simulated.add_fault(FaultRule::new(Op::Create, "c", Fault::AmbiguousBeforeApply));
        let data = Bytes::from_static(b"x");
        let cases = [
            ("a", ErrorKind::Throttled),
            ("b", ErrorKind::Unavailable),
            ("c", ErrorKind::Ambiguous),
        ];
        for (key, kind) in cases {
            let err = simulated.create(key, data.clone()).await.unwrap_err();
            assert_eq!((err.op(), err.key(), err.kind()), (Op::Create, key, kind));
            assert!(
                store.head(key).await.unwrap_err().is_not_found(),
                "{key} landed"
            );
        }
        let counts = simulated.injected();
        assert_eq!(
            (
                counts.throttled,
                counts.unavailable,
                counts.ambiguous_before_apply
            ),
            (1, 1, 1)
        );
        assert_eq!(counts.total(), 3);
        // Unmatched keys pass untouched.
        simulated.create("d", data).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn ambiguous_after_apply_lands_the_mutation() {
        let store = memory();
        let simulated = Simulated::new(store.clone(), 1);
        simulated.add_fault(FaultRule::new(
            Op::Create,
            "log/",
            Fault::AmbiguousAfterApply,
        ));
        simulated.add_fault(FaultRule::new(
            Op::Replace,
            "log/",
            Fault::AmbiguousAfterApply,
        ));
        simulated.add_fault(FaultRule::new(
            Op::Delete,
            "log/",
            Fault::AmbiguousAfterApply,
        ));

        let err = simulated
            .create("log/1", Bytes::from_static(b"one"))
            .await
            .unwrap_err();
        assert!(err.is_ambiguous());
        let landed = store.get("log/1").await.unwrap();
        assert_eq!(landed.data, Bytes::from_static(b"one"));

        let generation = landed.attributes.generation;
        let err = simulated
            .replace("log/1", &generation, Bytes::from_static(b"two"))
            .await
            .unwrap_err();
        assert!(err.is_ambiguous());
        let replaced = store.get("log/1").await.unwrap();
        assert_eq!(replaced.data, Bytes::from_static(b"two"));

        let err = simulated
            .delete("log/1", &replaced.attributes.generation)
            .await
            .unwrap_err();
        assert!(err.is_ambiguous());
        assert!(store.head("log/1").await.unwrap_err().is_not_found());
        assert_eq!(simulated.injected().ambiguous_after_apply, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn integrity_faults_replace_read_answers() {
        let store = memory();
        store.create("k", Bytes::from_static(b"v")).await.unwrap();
        let simulated = Simulated::new(store, 1);
        simulated.add_fault(FaultRule::new(Op::Get, "k", Fault::Integrity));
        simulated.add_fault(FaultRule::new(Op::List, "", Fault::Integrity));
        assert_eq!(
            simulated.get("k").await.unwrap_err().kind(),
            ErrorKind::Integrity
        );
        let err = simulated.list("", "", None).await.unwrap_err();
        assert_eq!((err.op(), err.kind()), (Op::List, ErrorKind::Integrity));
        simulated.head("k").await.unwrap();
        assert_eq!(simulated.injected().integrity, 2);
    }

    #[test]
    #[should_panic(expected = "cannot be injected")]
    fn ambiguous_faults_are_refused_for_reads() {
        Simulated::new(memory(), 1).add_fault(FaultRule::new(
            Op::Get,
            "",
            Fault::AmbiguousAfterApply,
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn triggers_fire_on_the_calls_they_name_and_rules_toggle() {
        let store = memory();
        store.create("k", Bytes::from_static(b"v")).await.unwrap();
        let simulated = Simulated::new(store, 1);
        let third =
            simulated.add_fault(FaultRule::new(Op::Head, "k", Fault::Unavailable).on_call(3));
        let mut outcomes = Vec::new();
        for _ in 0..5 {
            outcomes.push(simulated.head("k").await.is_ok());
        }
        assert_eq!(outcomes, [true, true, false, true, true]);
        assert!(simulated.remove_fault(third));
        assert!(!simulated.remove_fault(third));

        simulated.add_fault(FaultRule::new(Op::Head, "k", Fault::Throttled).first(2));
        let mut outcomes = Vec::new();
        for _ in 0..4 {
            outcomes.push(simulated.head("k").await.is_ok());
        }
        assert_eq!(outcomes, [false, false, true, true]);

        simulated.add_fault(FaultRule::new(Op::Head, "k", Fault::Throttled));
        assert!(simulated.head("k").await.is_err());
        simulated.clear_faults();
        assert!(simulated.head("k").await.is_ok());
        assert_eq!(simulated.injected().throttled, 3);
    }

    async fn probabilistic_pattern(seed: u64) -> Vec<bool> {
        let store = memory();
        store.create("k", Bytes::from_static(b"v")).await.unwrap();
        let simulated = Simulated::new(store, seed);
        simulated.add_fault(FaultRule::new(Op::Get, "k", Fault::Throttled).with_probability(0.3));
        let mut out = Vec::new();
        for _ in 0..1_000 {
            out.push(simulated.get("k").await.is_err());
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn probabilistic_faults_are_seeded() {
        let pattern = probabilistic_pattern(5).await;
        assert_eq!(pattern, probabilistic_pattern(5).await);
        assert_ne!(pattern, probabilistic_pattern(6).await);
        let fired = pattern.iter().filter(|f| **f).count();
        assert!((240..360).contains(&fired), "{fired} of 1000 fired");
    }

    #[tokio::test(start_paused = true)]
    async fn holds_park_calls_before_the_store_until_released() {
        let store = memory();
        let simulated = Arc::new(Simulated::new(store.clone(), 1));
        let hold = simulated.hold(Op::Create, "log/");
        let mut tasks = Vec::new();
        for key in ["log/1", "log/2", "log/3"] {
            let simulated = simulated.clone();
            tasks.push(tokio::spawn(async move {
                simulated.create(key, Bytes::from_static(b"x")).await
            }));
        }
        hold.wait_held(3).await;
        assert_eq!(hold.held_count(), 3);
        // Other keys and other operations pass.
        simulated
            .create("other", Bytes::from_static(b"y"))
            .await
            .unwrap();
        assert!(store.head("log/1").await.unwrap_err().is_not_found());

        // Calls leave in arrival order, one at a time.
        hold.release_one();
        tasks.remove(0).await.unwrap().unwrap();
        assert_eq!(hold.held_count(), 2);
        store.head("log/1").await.unwrap();
        assert!(store.head("log/2").await.unwrap_err().is_not_found());

        hold.release();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!((hold.held_count(), hold.caught_count()), (0, 3));
        // A released hold parks nothing more.
        simulated
            .create("log/4", Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert_eq!(hold.caught_count(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_a_hold_or_a_parked_call_releases() {
        let store = memory();
        store.create("k", Bytes::from_static(b"v")).await.unwrap();
        let simulated = Arc::new(Simulated::new(store, 1));
        let hold = simulated.hold(Op::Get, "k");

        let parked = simulated.clone();
        let task = tokio::spawn(async move { parked.get("k").await });
        hold.wait_held(1).await;
        let dropped = simulated.clone();
        let canceled = tokio::spawn(async move { dropped.get("k").await });
        hold.wait_held(2).await;
        canceled.abort();
        assert!(canceled.await.unwrap_err().is_cancelled());
        assert_eq!(hold.held_count(), 1);

        drop(hold);
        task.await.unwrap().unwrap();
        simulated.get("k").await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn response_holds_park_after_the_mutation_landed() {
        let store = memory();
        let simulated = Arc::new(Simulated::new(store.clone(), 1));
        let hold = simulated.hold_response(Op::Create, "k");
        let creating = simulated.clone();
        let task =
            tokio::spawn(async move { creating.create("k", Bytes::from_static(b"x")).await });
        hold.wait_held(1).await;
        store.head("k").await.unwrap();
        assert!(!task.is_finished());

        // Later calls pass while the parked one stays parked.
        hold.stop_catching();
        let err = simulated
            .create("k", Bytes::from_static(b"y"))
            .await
            .unwrap_err();
        assert!(err.is_precondition());
        assert_eq!(hold.held_count(), 1);

        hold.release_one();
        task.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_slept_on_the_tokio_clock() {
        let simulated = Simulated::new(memory(), 1)
            .with_latency(Op::Create, LatencyProfile::Fixed(Duration::from_millis(40)));
        assert_eq!(
            simulated.latency(Op::Create),
            LatencyProfile::Fixed(Duration::from_millis(40))
        );
        let start = Instant::now();
        simulated
            .create("k", Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(40));
        let start = Instant::now();
        simulated.head("k").await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_rule_reporting_a_kind_answers_with_it_before_or_after_the_store() {
        let store = memory();
        let simulated = Simulated::new(store.clone(), 1);
        simulated.add_fault(
            FaultRule::new(Op::Create, "a", Fault::AmbiguousBeforeApply)
                .reporting(ErrorKind::Precondition)
                .first(1),
        );
        simulated.add_fault(
            FaultRule::new(Op::Create, "b", Fault::AmbiguousAfterApply)
                .reporting(ErrorKind::Integrity)
                .first(1),
        );
        let before = simulated.create("a", Bytes::from_static(b"1")).await;
        assert_eq!(before.unwrap_err().kind(), ErrorKind::Precondition);
        assert!(store.head("a").await.unwrap_err().is_not_found());
        let after = simulated.create("b", Bytes::from_static(b"2")).await;
        assert_eq!(after.unwrap_err().kind(), ErrorKind::Integrity);
        store.head("b").await.unwrap();
        let counts = simulated.injected();
        assert_eq!(
            (counts.ambiguous_before_apply, counts.ambiguous_after_apply),
            (1, 1)
        );
        // Each rule fired once: the next creates reach the store and are answered by it.
        simulated
            .create("a", Bytes::from_static(b"1"))
            .await
            .unwrap();
        let again = simulated.create("b", Bytes::from_static(b"2")).await;
        assert!(again.unwrap_err().is_precondition());
    }

    #[tokio::test]
    async fn a_panic_fault_panics_the_task_running_the_call() {
        let simulated = Simulated::new(memory(), 1);
        simulated.add_fault(FaultRule::new(Op::Create, "blobs/", Fault::Panic).first(1));
        let panicked = tokio::spawn({
            let simulated = simulated.clone();
            async move { simulated.create("blobs/x", Bytes::from_static(b"x")).await }
        })
        .await
        .unwrap_err();
        assert!(panicked.is_panic());
        assert_eq!(simulated.injected().panicked, 1);
        simulated
            .create("blobs/x", Bytes::from_static(b"x"))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn calls_log_every_matching_call_and_the_ones_answered() {
        let simulated = Simulated::new(memory(), 1);
        let reads = simulated.calls(&[Op::Get, Op::GetRange], "log/");
        let listings = simulated.calls(&[Op::List], "");
        simulated
            .create("log/1", Bytes::from_static(b"one"))
            .await
            .unwrap();
        simulated.get("log/1").await.unwrap();
        assert!(simulated.get("log/2").await.unwrap_err().is_not_found());
        simulated.get_range("log/1", 0..1).await.unwrap();
        simulated.get("other").await.unwrap_err();
        simulated.list("log/", "", None).await.unwrap();
        assert_eq!(reads.count(), 3);
        assert_eq!(reads.keys(), ["log/1", "log/2", "log/1"]);
        assert_eq!(reads.answered(), ["log/1", "log/1"]);
        assert_eq!(listings.keys(), ["log/"]);
        drop(reads);
        simulated.get("log/1").await.unwrap();
        assert_eq!(listings.count(), 1);
    }
}
