//! The group committer: one per world per store, committing every queued write through
//! create-if-absent slots.
//!
//! # How a write travels
//!
//! 1. [`Committer::submit`] queues the request with a fresh operation id. There is no
//!    timer: whatever is queued joins the newest open batch at once.
//!
//! 2. Members build in queue order, each on the tip plus the members before it.
//!
//!    A member whose check fails (conflict, archived, collision, quota, policy) or that
//!    changes nothing gets its own answer; the others become the slot's entries.
//!
//!    Version bytes up to the inline limit ride in the slot; larger ones are staged as
//!    blobs at once.
//!
//! 3. Up to [`CommitterConfig::pipeline`] batches exist at once: the one whose slot is being
//!    created and the ones built and staged behind it, each on the previous one's result.
//!
//!    A batch takes members until it holds its limit. The limit starts at
//!    [`CommitterConfig::batch_start`] and doubles up to [`CommitterConfig::batch_max`]
//!    while batches fill and the queue stays deep; a short batch resets it.
//!
//!    A batch is sealed into its slot when it reaches the front with nothing in flight (after
//!    a win, it may first wait a fraction of a create for as many writers as the win
//!    answered: [`CommitterConfig::gather`]). It
//!    takes in the batches behind it while the slot has room (each was built on the one
//!    before), so writes that arrive while slot `k` is being created, or while the store
//!    holds for a peer, ride slot `k + 1`. Sealing a batch built on the tail settles its
//!    working state (the slot's inline versions located) into the slot's result rather
//!    than applying the slot to the tail a second time.
//!
//!    Slot `k + 1` is created only after slot `k` is confirmed, and every member (answers
//!    included) is answered only once its batch's base is confirmed.
//!
//! 4. The slot create is decided without guessing: an ambiguous or failed-with-retry create
//!    is read back: absent → the identical create is retried; our bytes → won; other bytes
//!    → lost.
//!
//! 5. Losing a race: the winning slot is applied. Only the members whose path, ancestors,
//!    descendants (or, for members with a check, the publish policy document) it touched
//!    are rebuilt; the rest are kept as built, and the batch takes the next name. Batches
//!    staged behind it are rebuilt from the queue.
//!
//!    A blind publish whose base changed in between is a conflict, so two blind writers
//!    never both silently succeed.
//!
//!    A store that loses four in a row trails the log and jumps to its end by listing.
//!
//! 6. Several stores on one world.
//!
//!    *Yielding.* A store that applied another store's slot within
//!    [`CommitterConfig::yield_window`] waits a random pause up to
//!    [`CommitterConfig::yield_jitter`] after each win before its next create (without hints
//!    within that window, up to [`CommitterConfig::unhinted_yield_creates`] of its own
//!    slot-create latencies).
//!
//!    *Listening.* A busy store that saw no peer for [`CommitterConfig::listen_every`]
//!    leaves one name free for a slot create after a win, so a peer starving unseen takes it
//!    and its slot, which names its store, makes it seen: without hints no store starves, at
//!    the price of that pause for a store alone.
//!
//!    *Reading behind.* While a peer is active, a store reads each slot name it creates just
//!    after its create would land, so a peer's winning slot is in hand about when the
//!    refusal arrives and its next create follows at once; batches may then grow to
//!    [`CommitterConfig::contended_batch_max`].
//!
//!    *Hand-off.* A winner learns of a loser only through peer hints: the loser's
//!    [`CommitterConfig::on_committed`] reports the winning slot, a server forwards it, and
//!    the winner's [`Committer::follow`] sees a sequence inside its own slot and holds its
//!    next create (at most [`CommitterConfig::handoff_wait`]) until the peer's slot appears.
//!    A hint beyond what it serves makes it read the peer's slots up to the hinted sequence
//!    (by name, one read each) before its next create instead of losing that name to them.
//!
//!    *Rotation.* While hints flow and a peer contended within
//!    [`CommitterConfig::yield_window`] (lost a slot to this store, beat it to one, or took a
//!    turn it held), contending stores take the names in a rotation: the stores that wrote
//!    the newest `ROTATION_SLOTS` slots of the tail, with this one, in store id order, each
//!    name going to the store after the writer of the slot before it.
//!
//!    A store whose turn it is not holds its next create until the tail moves, at most 1.5
//!    times its own slot read plus create latency per turn ahead of its own, from when the
//!    tail's slot landed. The store right after the owner reads the owner's name from when
//!    its create would land, every half read, so it has the owner's slot about as it lands
//!    instead of one read after the owner's hint, and a hand-off costs about a create.
//!
//! # Every answer at the tip
//!
//! A write is judged on a base, and its answer (a commit, or a no-op, conflict, not-found,
//! archived, quota or policy refusal) must hold against every write acknowledged anywhere
//! before it arrived. Requests are numbered as they arrive; the committer remembers the
//! newest proof that a state was the log's tip after the first `n` of them arrived: a probe
//! that found the next slot name absent (or a listing), or a slot create that won, each begun
//! after them. Then:
//!
//! - When the pipeline is empty (the store was idle), the first request taken that no such
//!   proof covers makes the committer probe the tip and catch up before building on it:
//!   one read per idle-to-busy transition, so a store that was only behind judges the
//!   request on the true tip. A blind publish there supersedes what was acknowledged
//!   before it; two blind writers conflict only when their writes really overlapped.
//! - A batch that writes a slot needs nothing more: winning the name proves its base.
//! - A batch that writes nothing is answered only when a proof covers every member on its
//!   base. Otherwise its members join the next batch that writes (its win proves them), or,
//!   alone, it probes: absent, it is answered; present, the committer catches up and
//!   rebuilds it there.
//!
//! The served state ([`Committer::state`]) advances only by installing states that are
//! further along the log: this store's confirmed slots, slots that beat it, and refreshes.
//!
//! Every state the committer holds records each document's versions committed since the
//! checkpoint it started from, so a long-running writer would hold every version it ever
//! wrote. [`Committer::shed`] hands it what a newer checkpoint holds: the documents' history
//! blocks replace their recent versions up to the checkpoint, so what it retains is bounded
//! by what the newest checkpoint does not cover.
//!
//! # What it keeps for the store's other readers
//!
//! Every slot the committer created (once confirmed) or read goes into
//! [`Committer::recent`], a bounded ring ([`crate::recent`]), before the state holding it is
//! installed: the store's compactor and change feed take slots from there instead of
//! downloading them.
//!
//! # Parts
//!
//! | file | holds |
//! | --- | --- |
//! | `mod.rs` | the public API: [`Committer`], its configuration, requests and answers |
//! | `shared.rs` | what the handle and the actor share: queued requests, tip proofs, peer sightings |
//! | `pipeline.rs` | the actor: its loop, the pipeline of batches, the front, won and lost races |
//! | `batch.rs` | batches and their members: building, rebuilding, sealing, staging blobs |
//! | `create.rs` | deciding a slot create: retries, read-back, latencies, turns and reads ahead |
//! | `shed.rs` | folding what a checkpoint holds into the committer's states |
//! | `warm.rs` | reading ahead the versions queued appends build on |

mod batch;
mod create;
mod pipeline;
mod shared;
mod shed;
mod warm;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use quire_blob::BlobStore;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::build::{Mutation, PreparedWrite};
use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{Hash, OperationId, StoreId};
use crate::model::DocSummary;
use crate::path::DocPath;
use crate::recent::{DEFAULT_RECENT_BYTES, DEFAULT_RECENT_SLOTS, RecentSlots};
use crate::slot::{DEFAULT_INLINE_LIMIT, MAX_SLOT_ENTRIES};
use crate::state::WorldState;
use crate::tip;
use pipeline::Actor;
use shared::{AbandonOnDrop, Msg, Pending, QUEUED, Shared, abandon};
pub use shed::Folded;
use warm::VersionCache;

/// A check a write must pass, run after the store's own checks (conflict, archive, no-op) on
/// the state the write builds on, and again whenever the write is rebuilt. Its error is the
/// write's answer, unchanged.
///
/// `pending` holds the bytes of the versions in `state` that are still in the committer's
/// pipeline: `state` records them as blobs whatever their slot will say, and the bucket may
/// not hold them yet, so a check that reads a version looks there first.
#[async_trait]
pub trait CommitCheck: Send + Sync + fmt::Debug {
    async fn check(
        &self,
        state: &WorldState,
        write: &PreparedWrite,
        pending: &PendingVersions,
    ) -> Result<()>;
}

/// The bytes of versions built in the committer's pipeline, by version hash (see
/// [`CommitCheck`]): those of batches not yet confirmed, then those of confirmed ones
/// still in the committer's version cache.
#[derive(Clone, Default)]
pub struct PendingVersions {
    /// A persistent map, so handing it to each member's check costs nothing.
    pipeline: imbl::HashMap<Hash, Bytes>,
    cache: Option<Arc<Mutex<VersionCache>>>,
}

impl fmt::Debug for PendingVersions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingVersions")
            .field("pipeline", &self.pipeline.len())
            .finish_non_exhaustive()
    }
}

impl PendingVersions {
    /// The bytes of the version whose stored bytes hash to `hash`, when it was built here.
    pub fn get(&self, hash: &Hash) -> Option<Bytes> {
        self.pipeline.get(hash).cloned().or_else(|| {
            self.cache
                .as_ref()
                .and_then(|cache| cache.lock().expect("cache lock poisoned").get(hash))
        })
    }
}

/// Called with every sequence this store's committer learned the log reached: the last
/// sequence of each slot it created and of each slot that beat it to a name (newest only when
/// several arrive at once, in order). A server forwards these as peer hints; a peer that
/// receives one inside its own slot learns it won a race against this store
/// ([`Committer::follow`]). States installed by refreshes are not reported.
pub type CommittedHook = Arc<dyn Fn(u64) + Send + Sync>;

/// How a committer behaves. [`Default`] gives the production values.
#[derive(Clone)]
pub struct CommitterConfig {
    /// The world's key prefix.
    pub prefix: String,
    /// This store's id, written into its slots.
    pub store: StoreId,
    /// The first batch limit, and the one a short batch resets to.
    pub batch_start: usize,
    /// The ceiling the limit doubles up to (at most [`MAX_SLOT_ENTRIES`]).
    pub batch_max: usize,
    /// The ceiling while a peer is active (at least `batch_max`): contending stores share
    /// the world's slots and each hand-off costs more than a create, so bigger slots keep
    /// the world's throughput at a lone store's.
    pub contended_batch_max: usize,
    /// Batches in the pipeline: the one being created plus those built and staged behind it.
    pub pipeline: usize,
    /// The largest stored version carried inside a slot.
    pub inline_limit: usize,
    /// The most inline bytes one slot carries; later versions become blobs.
    pub slot_inline_budget: usize,
    /// The most distinct documents (0: unlimited).
    pub max_documents: u64,
    /// The publish policy document: a slot touching it makes every member with a
    /// precondition rebuild.
    pub policy_path: Option<DocPath>,
    /// How long after applying a peer's slot this store yields after its wins.
    pub yield_window: Duration,
    /// The longest pause a yielding store takes while peer hints arrive.
    pub yield_jitter: Duration,
    /// Without hints (none within `yield_window`), a yielding store pauses a random share of
    /// this many of its own slot-create latencies: long enough that a peer which just lost a
    /// slot to it can take the next one, so neither starves (the peer's slots in the log are
    /// all that tells it a peer is there).
    pub unhinted_yield_creates: u32,
    /// A busy store that has seen no peer for this long leaves the next slot name free for
    /// one pause after a win (two slot creates): a peer starving unseen behind
    /// it takes that name, and its slot, which names its store, tells this store a peer is
    /// there. Zero never pauses.
    pub listen_every: Duration,
    /// After a win, the longest the next slot waits for as many writers as that slot
    /// answered (at most a quarter of this store's slot-create latency): writers that come
    /// straight back after their answer then ride the next slot, rather than the one after
    /// it, for a fraction of a create's wait. Zero seals at once.
    pub gather: Duration,
    /// The longest a store that learned a peer lost a slot to it holds its next create,
    /// giving the peer the next name (see [`Committer::follow`]); in the rotation of
    /// contending stores, the length of a turn until this store has measured its own slot
    /// read and create latencies.
    pub handoff_wait: Duration,
    /// Attempts for one create before giving up.
    pub create_attempts: u32,
    /// The first retry pause; it doubles per attempt up to `backoff_cap`.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// Seeds the jitter.
    pub seed: u64,
    pub on_committed: Option<CommittedHook>,
    /// Bounds of the ring of recent slots ([`Committer::recent`]): slots, and their bytes.
    pub recent_slots: usize,
    pub recent_bytes: usize,
}

impl Default for CommitterConfig {
    fn default() -> Self {
        CommitterConfig {
            prefix: String::new(),
            store: StoreId([0; 16]),
            batch_start: 16,
            batch_max: 64,
            contended_batch_max: 128,
            pipeline: 3,
            inline_limit: DEFAULT_INLINE_LIMIT,
            slot_inline_budget: 1 << 20,
            max_documents: 0,
            policy_path: None,
            yield_window: Duration::from_secs(3),
            yield_jitter: Duration::from_millis(15),
            unhinted_yield_creates: 2,
            listen_every: Duration::from_secs(1),
            gather: Duration::from_millis(2),
            handoff_wait: Duration::from_millis(50),
            create_attempts: 12,
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(5),
            seed: 0,
            on_committed: None,
            recent_slots: DEFAULT_RECENT_SLOTS,
            recent_bytes: DEFAULT_RECENT_BYTES,
        }
    }
}

impl fmt::Debug for CommitterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommitterConfig")
            .field("prefix", &self.prefix)
            .field("store", &self.store)
            .field("batch_start", &self.batch_start)
            .field("batch_max", &self.batch_max)
            .field("pipeline", &self.pipeline)
            .field("inline_limit", &self.inline_limit)
            .finish_non_exhaustive()
    }
}

/// One write to commit.
#[derive(Clone, Debug)]
pub struct CommitRequest {
    pub mutation: Mutation,
    /// While still queued past this instant the request is dropped, never committed.
    pub deadline: Option<Instant>,
    pub precondition: Option<Arc<dyn CommitCheck>>,
}

impl CommitRequest {
    pub fn new(mutation: Mutation) -> Self {
        CommitRequest {
            mutation,
            deadline: None,
            precondition: None,
        }
    }
}

/// A write's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The document after the write (or as it stands, when nothing changed).
    pub doc: DocSummary,
    /// Whether the write committed a change.
    pub changed: bool,
    /// The sequence of the change, when one was committed.
    pub sequence: Option<u64>,
    /// Versions removed by retention (`from..=to`).
    pub prune: Option<(u64, u64)>,
}

/// Counters for tests and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Members per batch sealed, in order (a batch rebuilt after a lost race counts again);
    /// the newest [`BATCH_SIZES_KEPT`] only, so a long-running writer's counters stay small.
    pub batch_sizes: Vec<usize>,
    /// Slots sealed (each created or lost, never both) by their entry count: bounded, for
    /// metrics (the list above grows with every batch).
    pub slots_by_entries: BTreeMap<usize, u64>,
    pub slots_won: u64,
    pub slots_lost: u64,
    /// Members rebuilt after a lost race.
    pub members_rebuilt: u64,
    /// Members kept as built after a lost race.
    pub members_kept: u64,
    /// Pauses taken after wins because a peer was active.
    pub yields: u64,
    /// Creates held back for a peer that lost a slot to this store.
    pub handoffs: u64,
    /// Pauses a store that saw no peer took to leave a name free
    /// ([`CommitterConfig::listen_every`]).
    pub listening_pauses: u64,
    /// Times the batch about to be sealed took in the batches queued behind it (writes
    /// that overflowed it while it waited ride its slot).
    pub batches_absorbed: u64,
    /// The most versions the committer held at once for its members' checks: bounded by
    /// what its pipeline holds, however many members failed or were rebuilt.
    pub pipeline_versions_most: usize,
}

/// How many of the newest batch sizes [`CommitStats::batch_sizes`] keeps.
pub const BATCH_SIZES_KEPT: usize = 1024;

/// The handle to a world's committer. Clones share it; the committer stops when
/// [`Committer::close`] is called or every handle is dropped.
#[derive(Clone)]
pub struct Committer {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Msg>,
    next_id: Arc<Mutex<SmallRng>>,
}

impl fmt::Debug for Committer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Committer")
            .field("store", &self.shared.config.store)
            .field("sequence", &self.shared.served.borrow().sequence())
            .finish()
    }
}

impl Committer {
    /// Starts a committer on `state` (which must be a true prefix of the log) on the current
    /// tokio runtime.
    pub fn start(
        store: Arc<dyn BlobStore>,
        state: WorldState,
        clock: Arc<dyn Clock>,
        mut config: CommitterConfig,
    ) -> Committer {
        config.batch_max = config.batch_max.clamp(1, MAX_SLOT_ENTRIES);
        config.contended_batch_max = config
            .contended_batch_max
            .clamp(config.batch_max, MAX_SLOT_ENTRIES);
        config.batch_start = config.batch_start.clamp(1, config.batch_max);
        config.pipeline = config.pipeline.max(1);
        let recent = Arc::new(RecentSlots::new(config.recent_slots, config.recent_bytes));
        let (committed, _) = watch::channel(state.sequence());
        let (served, _) = watch::channel(state);
        let shared = Arc::new(Shared {
            committed,
            rng: Mutex::new(SmallRng::seed_from_u64(config.seed)),
            config,
            store,
            clock,
            served,
            stats: Mutex::default(),
            peer_seen: Mutex::default(),
            hint_seen: Mutex::default(),
            latencies: Arc::default(),
            arrivals: AtomicU64::new(0),
            settled: Mutex::default(),
            recent,
        });
        if let Some(hook) = shared.config.on_committed.clone() {
            let mut changes = shared.committed.subscribe();
            tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    let sequence = *changes.borrow_and_update();
                    hook(sequence);
                }
            });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        Actor::spawn(shared.clone(), rx);
        let seed = shared.next_seed();
        Committer {
            shared,
            tx,
            next_id: Arc::new(Mutex::new(SmallRng::seed_from_u64(seed))),
        }
    }

    /// Commits one write and answers once its slot is confirmed (or with its own error).
    pub async fn submit(&self, request: CommitRequest) -> Result<Outcome> {
        let op = request.mutation.op();
        let key = request.mutation.raw_path().to_owned();
        let deadline = request.deadline;
        let ticket = Arc::new(AtomicU8::new(QUEUED));
        let (reply, answer) = oneshot::channel();
        let id = OperationId::random(&mut *self.next_id.lock().expect("id lock poisoned"));
        let arrival = self.shared.arrivals.fetch_add(1, Ordering::SeqCst);
        let pending = Pending {
            id,
            arrival,
            request,
            reply,
            ticket: ticket.clone(),
            blind_seen: None,
        };
        if self.tx.send(Msg::Submit(pending)).is_err() {
            return Err(Error::new(
                op,
                key,
                ErrorKind::Closed,
                "the committer is closed",
            ));
        }
        // Dropping this future abandons a request still queued, so it never commits.
        let guard = AbandonOnDrop(ticket.clone());
        let result = match deadline {
            None => answer.await,
            Some(deadline) => tokio::select! {
                biased;
                answer = answer => answer,
                () = tokio::time::sleep_until(deadline) => {
                    return Err(if abandon(&ticket) {
                        Error::new(op, key, ErrorKind::Canceled, "deadline passed while queued")
                    } else {
                        Error::new(op, key, ErrorKind::OutcomeUnknown, "deadline passed while the write was being committed")
                    });
                }
            },
        };
        drop(guard);
        result.unwrap_or_else(|_| {
            Err(Error::new(
                op,
                key,
                ErrorKind::Closed,
                "the committer stopped",
            ))
        })
    }

    /// The newest state this store knows is committed.
    pub fn state(&self) -> WorldState {
        self.shared.served.borrow().clone()
    }

    /// The slots this committer created or read, each published before the state holding it
    /// is installed: a reader following [`Committer::subscribe`] takes them from here rather
    /// than from the bucket.
    pub fn recent(&self) -> Arc<RecentSlots> {
        self.shared.recent.clone()
    }

    /// Follows every installed state.
    pub fn subscribe(&self) -> watch::Receiver<WorldState> {
        self.shared.served.subscribe()
    }

    /// Follows the sequences reported to [`CommitterConfig::on_committed`].
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.shared.committed.subscribe()
    }

    /// Installs a state read elsewhere (a refresh or a checkpoint) if it is ahead.
    pub fn install(&self, state: &WorldState) {
        self.shared.install(state);
    }

    /// A peer says the log reached `sequence` (a peer hint; never blocks). A sequence inside
    /// one of this store's own recent slots means a peer lost that slot to it: the store
    /// holds its next create for up to [`CommitterConfig::handoff_wait`] so the peer gets the
    /// next name, and both take turns. A sequence beyond what this store serves ends such a
    /// hold (the peer's slot exists) and marks the peer active.
    pub fn follow(&self, sequence: u64) {
        let _ = self.tx.send(Msg::Follow(sequence));
    }

    /// Brings the served state to the log's tip (probe, then replay) and returns it.
    pub async fn refresh(&self) -> Result<WorldState> {
        let arrivals = self.shared.arrivals_now();
        let mut state = self.state();
        let own = self.shared.config.store;
        let mut peer = false;
        let recent = &self.shared.recent;
        let result = tip::catch_up_observed(
            self.shared.store.as_ref(),
            &self.shared.config.prefix,
            &mut state,
            |slot| {
                peer |= slot.slot.store != own;
                recent.publish(slot);
            },
        )
        .await;
        if peer {
            // Another store writes this world: yield after wins (see the module docs).
            self.shared.note_peer();
        }
        self.shared.install(&state);
        if result.is_ok() {
            self.shared.settle(state.sequence(), arrivals);
        }
        result.map(|_| self.state())
    }

    pub fn stats(&self) -> CommitStats {
        self.shared.stats().clone()
    }

    /// The moving average of this store's slot-create latency; `None` until a create was
    /// timed. Other work on the same bucket (a checkpoint's uploads) watches it to keep out
    /// of the commits' way.
    pub fn create_latency(&self) -> Option<Duration> {
        self.shared
            .latencies
            .lock()
            .expect("latency lock poisoned")
            .create
    }

    /// The counters without the per-batch list: cheap to take at every metrics scrape.
    pub fn counters(&self) -> CommitStats {
        let stats = self.shared.stats();
        CommitStats {
            batch_sizes: Vec::new(),
            slots_by_entries: stats.slots_by_entries.clone(),
            slots_won: stats.slots_won,
            slots_lost: stats.slots_lost,
            members_rebuilt: stats.members_rebuilt,
            members_kept: stats.members_kept,
            yields: stats.yields,
            handoffs: stats.handoffs,
            listening_pauses: stats.listening_pauses,
            batches_absorbed: stats.batches_absorbed,
            pipeline_versions_most: stats.pipeline_versions_most,
        }
    }

    /// Sheds what a checkpoint holds: each document of `folded` takes its history blocks in
    /// every state the committer keeps, dropping its recent versions up to the checkpoint.
    /// Answers once the committer holds only the shed states (or has stopped). What
    /// readers see does not change.
    pub async fn shed(&self, folded: Vec<Folded>) {
        if folded.is_empty() {
            return;
        }
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Shed(folded, done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// How many version records the served state keeps besides the checkpoint's history
    /// blocks (every document's recent versions). O(documents): for tests and occasional
    /// metrics.
    pub fn retained_versions(&self) -> u64 {
        self.shared
            .served
            .borrow()
            .docs()
            .map(|d| d.recent.len() as u64)
            .sum()
    }

    /// Refuses queued and later writes with [`ErrorKind::Closed`], lets a slot being
    /// created finish, and waits for the committer to stop.
    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Close(done)).is_ok() {
            let _ = wait.await;
        }
    }
}
