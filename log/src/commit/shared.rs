//! What the [`Committer`](super::Committer) handle and its actor share: queued requests,
//! the proofs of the tip requests are judged on, and when peers were last seen.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quire_blob::BlobStore;
use rand::Rng;
use rand::rngs::SmallRng;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::create::Latencies;
use super::shed::Folded;
use super::{CommitRequest, CommitStats, CommitterConfig, Outcome};
use crate::clock::Clock;
use crate::error::Result;
use crate::ids::{Hash, OperationId};
use crate::recent::RecentSlots;
use crate::state::WorldState;

pub(super) const QUEUED: u8 = 0;
pub(super) const TAKEN: u8 = 1;
pub(super) const ABANDONED: u8 = 2;

pub(super) struct Pending {
    pub(super) id: OperationId,
    /// The request's place in arrival order (see [`Settled`]).
    pub(super) arrival: u64,
    pub(super) request: CommitRequest,
    pub(super) reply: oneshot::Sender<Result<Outcome>>,
    pub(super) ticket: Arc<AtomicU8>,
    pub(super) blind_seen: Option<Option<Hash>>,
}

pub(super) enum Msg {
    Submit(Pending),
    Follow(u64),
    Shed(Vec<Folded>, oneshot::Sender<()>),
    Close(oneshot::Sender<()>),
}

/// What this store last learned of the log's tip: `sequence` was the tip at a moment after
/// the first `arrivals` requests had arrived (a probe that found the next name absent, a
/// listing, or a winning create, each begun after them). A state at `sequence` is then a
/// true base for judging any of those requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Settled {
    pub(super) sequence: u64,
    pub(super) arrivals: u64,
}

impl Settled {
    /// Whether a request that arrived `arrival`-th may be judged on a state at `sequence`.
    pub(super) fn covers(self, sequence: u64, arrival: u64) -> bool {
        self.sequence == sequence && arrival < self.arrivals
    }
}

pub(super) struct Shared {
    pub(super) config: CommitterConfig,
    pub(super) store: Arc<dyn BlobStore>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) served: watch::Sender<WorldState>,
    /// The newest sequence the committer itself learned (own wins and lost races).
    pub(super) committed: watch::Sender<u64>,
    pub(super) stats: Mutex<CommitStats>,
    pub(super) peer_seen: Mutex<Option<Instant>>,
    /// When the last peer hint arrived.
    pub(super) hint_seen: Mutex<Option<Instant>>,
    pub(super) rng: Mutex<SmallRng>,
    pub(super) latencies: Arc<Mutex<Latencies>>,
    /// Requests submitted so far: each takes the next number as its arrival.
    pub(super) arrivals: AtomicU64,
    pub(super) settled: Mutex<Settled>,
    /// Every slot this committer created or read, published before the state holding it is
    /// installed, so a reader woken by the install finds it here.
    pub(super) recent: Arc<RecentSlots>,
}

impl Shared {
    /// The number the next request will take: every request numbered below it has arrived.
    pub(super) fn arrivals_now(&self) -> u64 {
        self.arrivals.load(Ordering::SeqCst)
    }

    /// Records that `sequence` was the tip after the first `arrivals` requests arrived.
    pub(super) fn settle(&self, sequence: u64, arrivals: u64) {
        let mut settled = self.settled.lock().expect("settled lock poisoned");
        *settled = (*settled).max(Settled { sequence, arrivals });
    }

    pub(super) fn settled(&self) -> Settled {
        *self.settled.lock().expect("settled lock poisoned")
    }

    /// Installs `state` if it is ahead of the served one.
    pub(super) fn install(&self, state: &WorldState) {
        drop(self.install_keeping(state));
    }

    /// [`Shared::install`], returning the state it replaced so the caller chooses when to
    /// free it (not under the channel's lock, and not before the writers are answered).
    pub(super) fn install_keeping(&self, state: &WorldState) -> Option<WorldState> {
        let mut replaced = None;
        self.served.send_if_modified(|current| {
            if state.sequence() > current.sequence() {
                replaced = Some(std::mem::replace(current, state.clone()));
                true
            } else {
                false
            }
        });
        replaced
    }

    pub(super) fn report(&self, sequence: u64) {
        self.committed.send_if_modified(|current| {
            let newer = sequence > *current;
            if newer {
                *current = sequence;
            }
            newer
        });
    }

    pub(super) fn stats(&self) -> std::sync::MutexGuard<'_, CommitStats> {
        self.stats.lock().expect("stats lock poisoned")
    }

    pub(super) fn note_peer(&self) {
        *self.peer_seen.lock().expect("peer lock poisoned") = Some(Instant::now());
    }

    pub(super) fn peer_active(&self) -> bool {
        self.peer_seen
            .lock()
            .expect("peer lock poisoned")
            .is_some_and(|at| at.elapsed() <= self.config.yield_window)
    }

    pub(super) fn note_hint(&self) {
        *self.hint_seen.lock().expect("hint lock poisoned") = Some(Instant::now());
    }

    pub(super) fn hinted(&self) -> bool {
        self.hint_seen
            .lock()
            .expect("hint lock poisoned")
            .is_some_and(|at| at.elapsed() <= self.config.yield_window)
    }

    /// The longest pause after a win while a peer is active: the configured jitter while
    /// hints arrive, else a share of this store's slot-create latency (see
    /// [`CommitterConfig::unhinted_yield_creates`](super::CommitterConfig::unhinted_yield_creates)).
    pub(super) fn yield_ceiling(&self) -> Duration {
        if self.hinted() {
            return self.config.yield_jitter;
        }
        self.unhinted_yield()
    }

    /// This store's recent slot-create latency (zero until a create was timed).
    fn create_latency(&self) -> Duration {
        self.latencies
            .lock()
            .expect("latency lock poisoned")
            .create
            .unwrap_or_default()
    }

    /// How long the next seal may wait for writers after a win: a quarter of a slot create,
    /// at most [`CommitterConfig::gather`](super::CommitterConfig::gather); nothing until a
    /// create was timed.
    pub(super) fn gather_window(&self) -> Duration {
        let create = self.create_latency();
        self.config.gather.min(create / 4)
    }

    /// How long a store that saw no peer leaves a name free: two slot creates, so a peer
    /// that lost the name before (and read the slot that beat it) lands first.
    pub(super) fn listening_pause(&self) -> Duration {
        let create = self.create_latency();
        self.config.yield_jitter.max(create * 2)
    }

    /// The longest pause after a win without hints.
    fn unhinted_yield(&self) -> Duration {
        let hinted = self.config.yield_jitter;
        let create = self.create_latency();
        hinted.max(create * self.config.unhinted_yield_creates)
    }

    pub(super) fn next_seed(&self) -> u64 {
        self.rng.lock().expect("rng lock poisoned").random()
    }
}

pub(super) struct AbandonOnDrop(pub(super) Arc<AtomicU8>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        abandon(&self.0);
    }
}

/// Marks a queued request abandoned; false when the committer already took it.
pub(super) fn abandon(ticket: &AtomicU8) -> bool {
    match ticket.compare_exchange(QUEUED, ABANDONED, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => true,
        Err(state) => state == ABANDONED,
    }
}
