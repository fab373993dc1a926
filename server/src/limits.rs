//! Per-world admission limits for a shared service: how many requests run at once and how
//! many start per second, for each client and for the world, how many WATCH streams stay
//! open, how long a request may wait for a slot and how long it may take.
//!
//! Every request asks its world's [`Limiter`] first, as a client ([`ClientKey`]: the label of
//! the token it presents, else the peer address). Client shares keep one client from taking
//! what the others need; the world caps are a backstop for the sum:
//! - **concurrency** — each client has [`LimitSettings::client_concurrent_requests`] slots,
//!   the world [`LimitSettings::max_concurrent_requests`]. A request waits for both, in a
//!   short queue: at most [`LimitSettings::queue_wait`], and at most
//!   [`LimitSettings::max_queued`] requests wait in a world at once (beyond that, refused at
//!   once). Refused with a one-second hint;
//! - **rate** — token buckets (GCRA, from `governor`): one per client refilling
//!   [`LimitSettings::client_requests_per_second`] up to [`LimitSettings::client_burst`],
//!   and the world's refilling [`LimitSettings::requests_per_second`] up to
//!   [`LimitSettings::burst`]; the refusal carries the exact time until the next token. A
//!   request refused for concurrency spends no token;
//! - **watches** — open WATCH streams, at most [`LimitSettings::client_watches`] per client
//!   and [`LimitSettings::max_watches`] per world; a WATCH spends one rate token when it
//!   opens and none while it stays open, and holds no request slot (it is also exempt from
//!   the request timeout);
//! - **watches per connection** — [`ConnectionWatches`], which a transport keeps for each
//!   connection: at most half the connection's stream limit (at least one), so WATCH streams
//!   never take every stream a client may open.
//!
//! Refusals answer `rate-limited` (HTTP 429) with a `Retry-After` in whole seconds, rounded
//! up and at least 1 ([`Refusal::retry_after_secs`]). The rate limiter reads an injectable
//! clock ([`Limiter::with_clock`]), so tests drive it with `governor`'s `FakeRelativeClock`;
//! the queue wait uses tokio's timer, so tests pause it. A client's state lives while it has
//! a request or watch open (its rate bucket until it is full again), so the state is bounded
//! by the clients active at once.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::HashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::mark::Status;

/// The hint given when every request slot is taken: slots free up within a request's
/// lifetime, so a second is a sensible first retry.
const CONCURRENCY_RETRY_HINT: Duration = Duration::from_secs(1);
/// How many admissions pass between two sweeps of idle clients' rate buckets.
const SWEEP_EVERY: u64 = 4096;

/// A world's limits, as configured (`[worlds.limits]`). Every field is optional.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSettings {
    /// Requests running at once in the world, every client together (WATCH streams
    /// excluded). Default 256.
    pub max_concurrent_requests: NonZeroU32,
    /// Requests running at once for one client. Default 32.
    pub client_concurrent_requests: NonZeroU32,
    /// Sustained requests per second in the world. Default 5000.
    pub requests_per_second: NonZeroU32,
    /// Requests the world admits at once after a quiet spell. Default 10000.
    pub burst: NonZeroU32,
    /// Sustained requests per second for one client. Default 1000.
    pub client_requests_per_second: NonZeroU32,
    /// Requests one client is admitted at once after a quiet spell. Default 2000.
    pub client_burst: NonZeroU32,
    /// How long one request may run before it is answered with an error. Default 10 s.
    #[serde(deserialize_with = "duration")]
    pub request_timeout: Duration,
    /// WATCH streams open at once in the world. Default 1024.
    pub max_watches: NonZeroU32,
    /// WATCH streams open at once for one client. Default 64.
    pub client_watches: NonZeroU32,
    /// How long a request may wait for a free slot before it is refused. Default 1 s.
    #[serde(deserialize_with = "duration")]
    pub queue_wait: Duration,
    /// Requests waiting for a slot at once in the world; more are refused at once.
    /// Default 1024.
    pub max_queued: NonZeroU32,
}

/// The longest `request_timeout` and `queue_wait` a configuration may give (a day): longer
/// is a mistake, and deadlines far enough away overflow the clock.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

impl Default for LimitSettings {
    fn default() -> Self {
        let n = |value: u32| NonZeroU32::new(value).expect("non-zero");
        LimitSettings {
            max_concurrent_requests: n(256),
            client_concurrent_requests: n(32),
            requests_per_second: n(5000),
            burst: n(10_000),
            client_requests_per_second: n(1000),
            client_burst: n(2000),
            request_timeout: Duration::from_secs(10),
            max_watches: n(1024),
            client_watches: n(64),
            queue_wait: Duration::from_secs(1),
            max_queued: n(1024),
        }
    }
}

impl LimitSettings {
    /// Checks what the types cannot: every client share of slots is below the world's cap
    /// (so no client can take every slot), and the timeouts are usable. (A client's rate
    /// above the world's is allowed: the world's bucket is the backstop.)
    pub fn validate(&self) -> Result<(), String> {
        let share = |name: &str, client: NonZeroU32, world_name: &str, world: NonZeroU32| {
            if world.get() > 1 && client >= world {
                Err(format!(
                    "{name} ({client}) must be below {world_name} ({world}): one client could take every slot"
                ))
            } else {
                Ok(())
            }
        };
        share(
            "client_concurrent_requests",
            self.client_concurrent_requests,
            "max_concurrent_requests",
            self.max_concurrent_requests,
        )?;
        share(
            "client_watches",
            self.client_watches,
            "max_watches",
            self.max_watches,
        )?;
        if self.request_timeout.is_zero() || self.request_timeout > MAX_WAIT {
            return Err(format!(
                "request_timeout {:?} must be above zero and at most a day",
                self.request_timeout
            ));
        }
        if self.queue_wait > MAX_WAIT {
            return Err(format!(
                "queue_wait {:?} must be at most a day",
                self.queue_wait
            ));
        }
        Ok(())
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

/// Who a request counts against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// The label of the (valid) token the request presents.
    Token(Arc<str>),
    /// The peer's address, for a request without a valid token.
    Peer(IpAddr),
    /// A caller in this process (no transport): all such callers share one share.
    Local,
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientKey::Token(label) => write!(f, "token {label}"),
            ClientKey::Peer(address) => write!(f, "peer {address}"),
            ClientKey::Local => f.write_str("local"),
        }
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// Every request slot of the world was taken (or its queue was full).
    Concurrency,
    /// Every request slot of the client was taken.
    ClientConcurrency,
    /// The world's request rate was spent.
    Rate,
    /// The client's request rate was spent.
    ClientRate,
    /// Every WATCH slot of the world was taken.
    Watches,
    /// Every WATCH slot of the client was taken.
    ClientWatches,
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
            RefusalReason::ClientConcurrency => "too many requests in progress for this client",
            RefusalReason::Rate => "request rate exceeded",
            RefusalReason::ClientRate => "request rate of this client exceeded",
            RefusalReason::Watches => "too many open watches",
            RefusalReason::ClientWatches => "too many open watches for this client",
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

/// One client's live state: its request slots and its open watches.
#[derive(Debug)]
struct ClientState {
    requests: Arc<Semaphore>,
    watches: u32,
}

/// Every client with a request or watch open.
#[derive(Debug)]
struct Clients {
    slots_each: usize,
    map: Mutex<HashMap<ClientKey, ClientState>>,
}

impl Clients {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, ClientState>> {
        self.map.lock().expect("client map poisoned")
    }

    /// The client's request slots (created on first use).
    fn requests(&self, client: &ClientKey) -> Arc<Semaphore> {
        let mut map = self.lock();
        map.entry(client.clone())
            .or_insert_with(|| ClientState {
                requests: Arc::new(Semaphore::new(self.slots_each)),
                watches: 0,
            })
            .requests
            .clone()
    }

    /// Forgets a client with nothing open (called with no permit of its held here).
    fn release(&self, client: &ClientKey) {
        let mut map = self.lock();
        if let Some(state) = map.get(client)
            && state.watches == 0
            // Only the map holds the semaphore: no request holds or awaits a slot.
            && Arc::strong_count(&state.requests) == 1
        {
            map.remove(client);
        }
    }

    fn open_watch(&self, client: &ClientKey, cap: u32) -> bool {
        let mut map = self.lock();
        let state = map.entry(client.clone()).or_insert_with(|| ClientState {
            requests: Arc::new(Semaphore::new(self.slots_each)),
            watches: 0,
        });
        if state.watches >= cap {
            return false;
        }
        state.watches += 1;
        true
    }

    fn close_watch(&self, client: &ClientKey) {
        if let Some(state) = self.lock().get_mut(client) {
            state.watches = state.watches.saturating_sub(1);
        }
        self.release(client);
    }

    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A running request's slots (the client's and the world's); released when dropped.
#[derive(Debug)]
pub struct Admission {
    world_slot: Option<OwnedSemaphorePermit>,
    client_slot: Option<OwnedSemaphorePermit>,
    client: ClientKey,
    clients: Arc<Clients>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.world_slot.take();
        self.client_slot.take();
        self.clients.release(&self.client);
    }
}

/// An open WATCH stream's slots (the client's and the world's); released when dropped.
#[derive(Debug)]
pub struct WatchAdmission {
    _world_slot: OwnedSemaphorePermit,
    client: ClientKey,
    clients: Arc<Clients>,
}

impl Drop for WatchAdmission {
    fn drop(&mut self) {
        self.clients.close_watch(&self.client);
    }
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
type ClientBuckets<C> =
    RateLimiter<ClientKey, HashMapStateStore<ClientKey>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One world's admission control.
pub struct Limiter<C: Clock = DefaultClock> {
    settings: LimitSettings,
    requests: Arc<Semaphore>,
    watches: Arc<Semaphore>,
    clients: Arc<Clients>,
    queued: AtomicUsize,
    admitted: AtomicU64,
    rate: Bucket<C>,
    client_rate: ClientBuckets<C>,
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
    /// A limiter whose rate buckets read `clock`.
    pub fn with_clock(settings: LimitSettings, clock: C) -> Self {
        let quota = Quota::per_second(settings.requests_per_second).allow_burst(settings.burst);
        let client_quota = Quota::per_second(settings.client_requests_per_second)
            .allow_burst(settings.client_burst);
        Limiter {
            requests: Arc::new(Semaphore::new(slots(settings.max_concurrent_requests))),
            watches: Arc::new(Semaphore::new(slots(settings.max_watches))),
            clients: Arc::new(Clients {
                slots_each: slots(settings.client_concurrent_requests),
                map: Mutex::new(HashMap::new()),
            }),
            queued: AtomicUsize::new(0),
            admitted: AtomicU64::new(0),
            rate: RateLimiter::direct_with_clock(quota, clock.clone()),
            client_rate: RateLimiter::hashmap_with_clock(client_quota, clock.clone()),
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

    /// World request slots free right now.
    pub fn free_request_slots(&self) -> usize {
        self.requests.available_permits()
    }

    /// Clients with a request or watch open right now.
    pub fn active_clients(&self) -> usize {
        self.clients.len()
    }

    /// Admits a request of `client` now or refuses it; never waits.
    pub fn try_admit(&self, client: &ClientKey) -> Result<Admission, Refusal> {
        let mut admission = self.empty_admission(client);
        admission.client_slot = Some(
            self.clients
                .requests(client)
                .try_acquire_owned()
                .map_err(|_| client_concurrency_refusal())?,
        );
        admission.world_slot = Some(
            self.requests
                .clone()
                .try_acquire_owned()
                .map_err(|_| concurrency_refusal())?,
        );
        self.spend_rate_tokens(client)?;
        Ok(admission)
    }

    /// Admits a request of `client`, waiting in the world's queue at most
    /// [`LimitSettings::queue_wait`] for its slots.
    pub async fn admit(&self, client: &ClientKey) -> Result<Admission, Refusal> {
        let wait = self.settings.queue_wait;
        if wait.is_zero() {
            return self.try_admit(client);
        }
        let mut admission = self.empty_admission(client);
        let client_slots = self.clients.requests(client);
        // Uncontended: no queue place needed.
        if let Ok(slot) = client_slots.clone().try_acquire_owned() {
            admission.client_slot = Some(slot);
        }
        if admission.client_slot.is_some()
            && let Ok(slot) = self.requests.clone().try_acquire_owned()
        {
            admission.world_slot = Some(slot);
            drop(client_slots);
            self.spend_rate_tokens(client)?;
            return Ok(admission);
        }
        let place = QueuePlace::take(&self.queued, slots(self.settings.max_queued))
            .ok_or_else(concurrency_refusal)?;
        let deadline = tokio::time::Instant::now() + wait;
        if admission.client_slot.is_none() {
            let slot = tokio::time::timeout_at(deadline, client_slots.acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or_else(client_concurrency_refusal)?;
            admission.client_slot = Some(slot);
        } else {
            drop(client_slots);
        }
        let slot = tokio::time::timeout_at(deadline, self.requests.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or_else(concurrency_refusal)?;
        admission.world_slot = Some(slot);
        drop(place);
        self.spend_rate_tokens(client)?;
        Ok(admission)
    }

    /// Admits a WATCH stream of `client` now or refuses it.
    pub fn try_admit_watch(&self, client: &ClientKey) -> Result<WatchAdmission, Refusal> {
        let watch_refusal = |reason| Refusal {
            reason,
            retry_after: CONCURRENCY_RETRY_HINT,
        };
        if !self
            .clients
            .open_watch(client, self.settings.client_watches.get())
        {
            return Err(watch_refusal(RefusalReason::ClientWatches));
        }
        // From here on, dropping the admission (or this guard) closes the client's watch.
        let world_slot = match self.watches.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                self.clients.close_watch(client);
                return Err(watch_refusal(RefusalReason::Watches));
            }
        };
        let admission = WatchAdmission {
            _world_slot: world_slot,
            client: client.clone(),
            clients: self.clients.clone(),
        };
        self.spend_rate_tokens(client)?;
        Ok(admission)
    }

    fn empty_admission(&self, client: &ClientKey) -> Admission {
        Admission {
            world_slot: None,
            client_slot: None,
            client: client.clone(),
            clients: self.clients.clone(),
        }
    }

    fn spend_rate_tokens(&self, client: &ClientKey) -> Result<(), Refusal> {
        if self.admitted.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.client_rate.retain_recent();
        }
        self.client_rate
            .check_key(client)
            .map_err(|not_until| Refusal {
                reason: RefusalReason::ClientRate,
                retry_after: not_until.wait_time_from(self.clock.now()),
            })?;
        self.rate.check().map_err(|not_until| Refusal {
            reason: RefusalReason::Rate,
            retry_after: not_until.wait_time_from(self.clock.now()),
        })
    }
}

/// A place in a world's queue; given back when dropped.
struct QueuePlace<'a>(&'a AtomicUsize);

impl<'a> QueuePlace<'a> {
    fn take(queued: &'a AtomicUsize, max: usize) -> Option<QueuePlace<'a>> {
        queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| QueuePlace(queued))
    }
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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

fn client_concurrency_refusal() -> Refusal {
    Refusal {
        reason: RefusalReason::ClientConcurrency,
        retry_after: CONCURRENCY_RETRY_HINT,
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn client(name: &str) -> ClientKey {
        ClientKey::Token(Arc::from(name))
    }

    /// World caps `concurrent`, `per_second` and `burst`; clients get the same (so one
    /// client alone meets the world caps) unless a test narrows them.
    fn settings(concurrent: u32, per_second: u32, burst: u32) -> LimitSettings {
        let n = |v| NonZeroU32::new(v).unwrap();
        LimitSettings {
            max_concurrent_requests: n(concurrent),
            client_concurrent_requests: n(concurrent),
            requests_per_second: n(per_second),
            client_requests_per_second: n(per_second),
            burst: n(burst),
            client_burst: n(burst),
            queue_wait: Duration::ZERO,
            ..LimitSettings::default()
        }
    }

    fn limiter(settings: LimitSettings) -> (Limiter<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (Limiter::with_clock(settings, clock.clone()), clock)
    }

    #[test]
    fn defaults_serve_a_shared_world() {
        let defaults = LimitSettings::default();
        assert_eq!(defaults.validate(), Ok(()));
        // One client may take 500 writes/s and a world 1000 from several clients; no client
        // holds every slot.
        assert!(defaults.client_requests_per_second.get() >= 500);
        assert!(defaults.requests_per_second.get() >= 1000);
        assert!(defaults.client_concurrent_requests < defaults.max_concurrent_requests);
        assert!(defaults.client_watches < defaults.max_watches);
        assert!(
            !defaults.queue_wait.is_zero(),
            "a short queue, not instant refusal"
        );
        assert_eq!(defaults.request_timeout, Duration::from_secs(10));
        let limiter = Limiter::new(defaults);
        assert_eq!(limiter.request_timeout(), Duration::from_secs(10));
        assert_eq!(limiter.free_request_slots(), 256);
    }

    #[test]
    fn reads_settings_from_toml() {
        let parsed: LimitSettings = toml::from_str(
            "max_concurrent_requests = 4\nclient_concurrent_requests = 2\nrequests_per_second = 5\nclient_requests_per_second = 3\nburst = 6\nclient_burst = 4\nrequest_timeout = \"2s 500ms\"\nmax_watches = 7\nclient_watches = 3\nqueue_wait = \"250ms\"\nmax_queued = 9\n",
        )
        .unwrap();
        let n = |v| NonZeroU32::new(v).unwrap();
        assert_eq!(
            parsed,
            LimitSettings {
                max_concurrent_requests: n(4),
                client_concurrent_requests: n(2),
                requests_per_second: n(5),
                client_requests_per_second: n(3),
                burst: n(6),
                client_burst: n(4),
                request_timeout: Duration::from_millis(2500),
                max_watches: n(7),
                client_watches: n(3),
                queue_wait: Duration::from_millis(250),
                max_queued: n(9),
            }
        );
        assert_eq!(parsed.validate(), Ok(()));
        let partial: LimitSettings = toml::from_str("burst = 9\n").unwrap();
        assert_eq!(partial.burst.get(), 9);
        assert_eq!(partial.requests_per_second.get(), 5000);

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
    fn validation_refuses_shares_that_take_everything_and_unusable_timeouts() {
        for (text, mentions) in [
            (
                "max_concurrent_requests = 8\nclient_concurrent_requests = 8\n",
                "client_concurrent_requests",
            ),
            ("max_watches = 4\nclient_watches = 9\n", "client_watches"),
            ("request_timeout = \"0s\"\n", "request_timeout"),
            ("request_timeout = \"300000000000y\"\n", "request_timeout"),
            ("queue_wait = \"2days\"\n", "queue_wait"),
        ] {
            let settings: LimitSettings = toml::from_str(text).unwrap();
            let error = settings.validate().unwrap_err();
            assert!(error.contains(mentions), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_rate_bucket_admits_a_burst_then_one_per_interval() {
        let (limiter, clock) = limiter(settings(100, 10, 3));
        let a = client("a");
        for _ in 0..3 {
            drop(limiter.try_admit(&a).unwrap());
        }
        let refusal = limiter.try_admit(&a).unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::ClientRate);
        assert_eq!(refusal.retry_after, Duration::from_millis(100));
        assert_eq!(refusal.retry_after_secs(), 1);
        assert_eq!(refusal.status(), Status::RateLimited);
        assert_eq!(
            refusal.message(),
            "request rate of this client exceeded; retry after 1 s"
        );

        clock.advance(Duration::from_millis(60));
        assert_eq!(
            limiter.try_admit(&a).unwrap_err().retry_after,
            Duration::from_millis(40)
        );
        clock.advance(Duration::from_millis(40));
        drop(limiter.try_admit(&a).unwrap());
        assert!(limiter.try_admit(&a).is_err());

        // A long quiet spell refills only up to the burst.
        clock.advance(Duration::from_secs(60));
        for _ in 0..3 {
            drop(limiter.try_admit(&a).unwrap());
        }
        assert_eq!(
            limiter.try_admit(&a).unwrap_err().reason,
            RefusalReason::ClientRate
        );
    }

    #[test]
    fn one_client_spending_its_rate_leaves_the_others_theirs() {
        // Counted on a clock that never moves: client a takes its whole burst, b and c still
        // get theirs, and the world bucket stops the sum.
        let (limiter, _clock) = limiter(LimitSettings {
            client_burst: NonZeroU32::new(5).unwrap(),
            ..settings(100, 1, 12)
        });
        let (a, b, c) = (
            client("a"),
            client("b"),
            ClientKey::Peer([10, 0, 0, 3].into()),
        );
        let admitted = |who: &ClientKey| {
            (0..20)
                .filter(|_| limiter.try_admit(who).map(drop).is_ok())
                .count()
        };
        assert_eq!(admitted(&a), 5);
        assert_eq!(admitted(&b), 5);
        // The world's burst of 12 is the backstop: c gets what is left.
        assert_eq!(admitted(&c), 2);
        assert_eq!(
            limiter.try_admit(&c).unwrap_err().reason,
            RefusalReason::ClientRate
        );
        let d = client("d");
        assert_eq!(
            limiter.try_admit(&d).unwrap_err().reason,
            RefusalReason::Rate
        );
    }

    #[test]
    fn no_client_can_take_every_slot() {
        let (limiter, _clock) = limiter(LimitSettings {
            client_concurrent_requests: NonZeroU32::new(3).unwrap(),
            ..settings(5, 1000, 1000)
        });
        let (a, b) = (client("a"), client("b"));
        let held_a: Vec<Admission> = (0..3).map(|_| limiter.try_admit(&a).unwrap()).collect();
        let refusal = limiter.try_admit(&a).unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::ClientConcurrency);
        assert_eq!(
            refusal.message(),
            "too many requests in progress for this client; retry after 1 s"
        );
        // b still has slots: two left in the world.
        let held_b: Vec<Admission> = (0..2).map(|_| limiter.try_admit(&b).unwrap()).collect();
        assert_eq!(limiter.free_request_slots(), 0);
        assert_eq!(
            limiter.try_admit(&b).unwrap_err().reason,
            RefusalReason::Concurrency
        );
        assert_eq!(limiter.active_clients(), 2);
        drop(held_a);
        assert_eq!(limiter.active_clients(), 1, "an idle client is forgotten");
        assert!(limiter.try_admit(&b).is_ok());
        drop(held_b);
        assert_eq!(limiter.active_clients(), 0);
    }

    #[test]
    fn concurrency_is_capped_and_slots_return_on_drop() {
        let (limiter, _clock) = limiter(settings(2, 1000, 1000));
        let a = ClientKey::Local;
        let first = limiter.try_admit(&a).unwrap();
        let _second = limiter.try_admit(&a).unwrap();
        assert_eq!(limiter.free_request_slots(), 0);
        let refusal = limiter.try_admit(&a).unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::ClientConcurrency);
        assert_eq!(refusal.retry_after_secs(), 1);
        drop(first);
        assert_eq!(limiter.free_request_slots(), 1);
        assert!(limiter.try_admit(&a).is_ok());
    }

    #[test]
    fn a_refusal_for_concurrency_spends_no_rate_token() {
        let (limiter, _clock) = limiter(settings(1, 1, 3));
        let a = client("a");
        let held = limiter.try_admit(&a).unwrap();
        for _ in 0..10 {
            assert_eq!(
                limiter.try_admit(&a).unwrap_err().reason,
                RefusalReason::ClientConcurrency
            );
        }
        drop(held);
        drop(limiter.try_admit(&a).unwrap());
        drop(limiter.try_admit(&a).unwrap());
        assert_eq!(
            limiter.try_admit(&a).unwrap_err().reason,
            RefusalReason::ClientRate
        );
        assert_eq!(
            limiter.free_request_slots(),
            1,
            "a rate refusal keeps no slot"
        );
    }

    #[test]
    fn watches_have_caps_per_client_and_per_world_and_spend_one_token_each() {
        let (limiter, _clock) = limiter(LimitSettings {
            max_watches: NonZeroU32::new(3).unwrap(),
            client_watches: NonZeroU32::new(2).unwrap(),
            ..settings(1, 1, 5)
        });
        let (a, b) = (client("a"), client("b"));
        let first = limiter.try_admit_watch(&a).unwrap();
        let _second = limiter.try_admit_watch(&a).unwrap();
        let refusal = limiter.try_admit_watch(&a).unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::ClientWatches);
        assert_eq!(
            refusal.message(),
            "too many open watches for this client; retry after 1 s"
        );
        let _third = limiter.try_admit_watch(&b).unwrap();
        let refusal = limiter.try_admit_watch(&b).unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::Watches);
        assert_eq!(refusal.message(), "too many open watches; retry after 1 s");
        // Open watches hold no request slot.
        assert_eq!(limiter.free_request_slots(), 1);
        drop(limiter.try_admit(&b).unwrap());
        // Three watches and one request spent the world's burst of five; a refused watch
        // spends nothing, so one is left.
        drop(first);
        drop(limiter.try_admit_watch(&a).unwrap());
        assert_eq!(
            limiter.try_admit_watch(&a).unwrap_err().reason,
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
    async fn admit_waits_in_a_short_queue_for_a_slot() {
        let (limiter, _clock) = limiter(LimitSettings {
            queue_wait: Duration::from_millis(50),
            ..settings(1, 1000, 1000)
        });
        let limiter = Arc::new(limiter);
        let a = client("a");
        let held = limiter.admit(&a).await.unwrap();

        // Nobody frees the slot: refused once the wait is over, not before.
        let started = tokio::time::Instant::now();
        let refusal = limiter.admit(&a).await.unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::ClientConcurrency);
        assert_eq!(started.elapsed(), Duration::from_millis(50));

        // The slot is freed while the request waits: admitted.
        let waiter = tokio::spawn({
            let limiter = limiter.clone();
            let a = a.clone();
            async move { limiter.admit(&a).await.map(drop) }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the request waits for the slot");
        drop(held);
        assert_eq!(waiter.await.unwrap(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_queue_is_bounded_and_fair_between_clients() {
        let (limiter, _clock) = limiter(LimitSettings {
            queue_wait: Duration::from_secs(1),
            max_queued: NonZeroU32::new(2).unwrap(),
            client_concurrent_requests: NonZeroU32::new(1).unwrap(),
            ..settings(2, 1000, 1000)
        });
        let limiter = Arc::new(limiter);
        let (a, b, c) = (client("a"), client("b"), client("c"));
        let held_a = limiter.admit(&a).await.unwrap();
        let held_b = limiter.admit(&b).await.unwrap();
        // Two wait (the queue's size); a third is refused at once.
        let waiters: Vec<_> = [a.clone(), c.clone()]
            .into_iter()
            .map(|who| {
                let limiter = limiter.clone();
                tokio::spawn(async move { limiter.admit(&who).await.map(drop) })
            })
            .collect();
        tokio::task::yield_now().await;
        let started = tokio::time::Instant::now();
        assert_eq!(
            limiter.admit(&b).await.unwrap_err().reason,
            RefusalReason::Concurrency
        );
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "a full queue refuses at once"
        );
        drop(held_b);
        drop(held_a);
        for waiter in waiters {
            assert_eq!(waiter.await.unwrap(), Ok(()));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn admit_without_a_queue_wait_refuses_at_once() {
        let (limiter, _clock) = limiter(settings(1, 1000, 1000));
        let _held = limiter.admit(&ClientKey::Local).await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(
            limiter.admit(&ClientKey::Local).await.unwrap_err().reason,
            RefusalReason::ClientConcurrency
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
