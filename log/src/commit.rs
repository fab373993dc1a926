//! The group committer: one per world per store, committing every queued write through
//! create-if-absent slots.
//!
//! # How a write travels
//!
//! 1. [`Committer::submit`] queues the request with a fresh operation id. There is no
//!    timer: whatever is queued joins the newest open batch at once.
//! 2. Members build in queue order, each on the tip plus the members before it. A member
//!    whose precondition fails (conflict, archived, collision, quota, policy) or that changes
//!    nothing gets its own answer; the others become the slot's entries. Version bytes up to
//!    the inline limit ride in the slot; larger ones are staged as blobs at once.
//! 3. Up to [`CommitterConfig::pipeline`] batches exist at once: the one whose slot is being
//!    created and the ones built and staged behind it, each on the previous one's result. A
//!    batch takes members until it holds its limit, which starts at
//!    [`CommitterConfig::batch_start`] and doubles up to [`CommitterConfig::batch_max`] while
//!    batches fill and the queue stays deep (a short batch resets it). A batch is sealed into
//!    its slot when it reaches the front with nothing in flight, taking in the batches
//!    behind it while the slot has room (each was built on the one before), so writes that
//!    arrive while slot `k` is being created, or while the store holds for a peer, ride
//!    slot `k + 1`. Slot `k + 1` is created only after slot
//!    `k` is confirmed, and every member (answers included) is answered only once its batch's
//!    base is confirmed.
//! 4. The slot create is decided without guessing: an ambiguous or failed-with-retry create
//!    is read back: absent → the identical create is retried; our bytes → won; other bytes
//!    → lost.
//! 5. Losing a race: the winning slot is applied, only the members whose path, ancestors,
//!    descendants (or, for members with a precondition, the publish policy document) it
//!    touched are rebuilt, the rest are kept as built, and the batch takes the next name.
//!    Batches staged behind it are rebuilt from the queue. A blind publish whose base changed
//!    in between is a conflict, so two blind writers never both silently succeed.
//!    A store that loses four in a row trails the log and jumps to its end by listing.
//! 6. Several stores on one world: a store that applied another store's slot within
//!    [`CommitterConfig::yield_window`] waits a random pause up to
//!    [`CommitterConfig::yield_jitter`] after each win before its next create (without hints
//!    within that window, up to [`CommitterConfig::unhinted_yield_creates`] of its own
//!    slot-create latencies). A busy store that saw no peer for
//!    [`CommitterConfig::listen_every`] leaves one name free for a slot create after a win,
//!    so a peer starving unseen takes it and its slot, which names its store, makes it seen:
//!    without hints no store starves, at the price of that pause for a store alone. While a peer is active, a store reads each slot name it creates just
//!    after its create would land, so a peer's winning slot is in hand about when the
//!    refusal arrives and its next create follows at once, and batches may grow to
//!    [`CommitterConfig::contended_batch_max`]. A winner learns of a loser only through peer hints: the loser's
//!    [`CommitterConfig::on_committed`] reports the winning slot, a server forwards it, and
//!    the winner's [`Committer::follow`] sees a sequence inside its own slot and holds its
//!    next create (at most [`CommitterConfig::handoff_wait`]) until the peer's slot appears;
//!    a hint beyond what it serves makes it read the peer's slots up to the hinted sequence
//!    (by name, one read each) before its next create instead of losing that name to them.
//!    While hints flow and a peer contended within [`CommitterConfig::yield_window`] (lost
//!    a slot to this store, beat it to one, or took a turn it held), contending stores take
//!    the names in a rotation: the stores that wrote the newest [`ROTATION_SLOTS`] slots of
//!    the tail, with this one, in store id order, each name going to the store after the
//!    writer of the slot before it. A store whose turn it is not holds its next create until
//!    the tail moves, at most 1.5 times its own slot read plus create latency per turn ahead
//!    of its own, from when the tail's slot landed; the store right after the owner reads
//!    the owner's name from when its create would land, every half read, so it has the
//!    owner's slot about as it lands instead of one read after the owner's hint, and a
//!    hand-off costs about a create.
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
//! # Size
//!
//! This file is long (over 2,000 lines) because the pipeline, the race handling and the tip
//! proofs share one state machine; its seams are the batch builder, the staging of blobs,
//! slot creation with read-back, and rebuilding after a lost race, and it is to be split
//! along them.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use quire_blob::BlobStore;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::build::{self, BuildLimits, Built, Change, Mutation, PreparedWrite};
use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::ids::{Hash, OperationId, StoreId};
use crate::keys;
use crate::model::{DocSummary, HistoryBlockRef, Location, VersionRecord};
use crate::path::DocPath;
use crate::recent::{DEFAULT_RECENT_BYTES, DEFAULT_RECENT_SLOTS, RecentSlots};
use crate::slot::{DEFAULT_INLINE_LIMIT, EncodedSlot, MAX_SLOT_ENTRIES, Slot};
use crate::state::WorldState;
use crate::tip;
use crate::version::StoredVersion;

/// A check a write must pass, run after the store's own checks (conflict, archive, no-op) on
/// the state the write builds on, and again whenever the write is rebuilt. Its error is the
/// write's answer, unchanged.
///
/// `pending` holds the bytes of the versions in `state` that are still in the committer's
/// pipeline: `state` records them as blobs whatever their slot will say, and the bucket may
/// not hold them yet, so a check that reads a version looks there first.
#[async_trait]
pub trait Precondition: Send + Sync + fmt::Debug {
    async fn check(
        &self,
        state: &WorldState,
        write: &PreparedWrite,
        pending: &PendingVersions,
    ) -> Result<()>;
}

/// The bytes of versions built in the committer's pipeline, by version hash (see
/// [`Precondition`]): those of batches not yet confirmed, then those of confirmed ones
/// still in the committer's version cache.
#[derive(Clone, Default)]
pub struct PendingVersions {
    pipeline: Arc<[(Hash, Bytes)]>,
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
        self.pipeline
            .iter()
            .find(|(h, _)| h == hash)
            .map(|(_, bytes)| bytes.clone())
            .or_else(|| {
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
pub struct WriteRequest {
    pub mutation: Mutation,
    /// While still queued past this instant the request is dropped, never committed.
    pub deadline: Option<Instant>,
    pub precondition: Option<Arc<dyn Precondition>>,
}

impl WriteRequest {
    pub fn new(mutation: Mutation) -> Self {
        WriteRequest {
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
}

/// How many of the newest batch sizes [`CommitStats::batch_sizes`] keeps.
pub const BATCH_SIZES_KEPT: usize = 1024;

/// What a checkpoint holds of one document: its versions through `through`, in the history
/// blocks `history` (the checkpoint's list for the document, oldest first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    pub path: DocPath,
    pub history: Arc<[HistoryBlockRef]>,
    pub through: u64,
}

impl Folded {
    /// What `checkpointed`, a state resting on a checkpoint, holds folded for each of
    /// `paths`; documents it holds no history blocks for are skipped.
    pub fn from_state(
        checkpointed: &WorldState,
        paths: impl IntoIterator<Item = DocPath>,
    ) -> Vec<Folded> {
        paths
            .into_iter()
            .filter_map(|path| {
                let doc = checkpointed.doc(&path)?;
                let through = doc.history.last()?.last;
                Some(Folded {
                    history: doc.history.clone(),
                    through,
                    path,
                })
            })
            .collect()
    }
}

/// Folds what a checkpoint holds of one document into `state`, when `state` has the
/// document at or past `through` and does not already hold that much folded. What readers
/// see does not change.
fn fold_into(state: &mut WorldState, folded: &Folded) {
    let Some(doc) = state.doc(&folded.path) else {
        return;
    };
    let covered = doc.history.last().map_or(0, |b| b.last);
    if folded.through <= covered || folded.through > doc.current {
        return;
    }
    if let Err(e) = state.fold_history(&folded.path, folded.history.clone(), folded.through) {
        tracing::warn!("could not shed the history of {}: {e}", folded.path);
    }
}

/// How many documents the committer folds per turn of its loop, so shedding a large
/// checkpoint does not hold up commits.
const SHED_PER_TURN: usize = 256;

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const ABANDONED: u8 = 2;

struct Pending {
    id: OperationId,
    /// The request's place in arrival order (see [`Settled`]).
    arrival: u64,
    request: WriteRequest,
    reply: oneshot::Sender<Result<Outcome>>,
    ticket: Arc<AtomicU8>,
    blind_seen: Option<Option<Hash>>,
}

enum Msg {
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
struct Settled {
    sequence: u64,
    arrivals: u64,
}

impl Settled {
    /// Whether a request that arrived `arrival`-th may be judged on a state at `sequence`.
    fn covers(self, sequence: u64, arrival: u64) -> bool {
        self.sequence == sequence && arrival < self.arrivals
    }
}

struct Shared {
    config: CommitterConfig,
    store: Arc<dyn BlobStore>,
    clock: Arc<dyn Clock>,
    served: watch::Sender<WorldState>,
    /// The newest sequence the committer itself learned (own wins and lost races).
    committed: watch::Sender<u64>,
    stats: Mutex<CommitStats>,
    peer_seen: Mutex<Option<Instant>>,
    /// When the last peer hint arrived.
    hint_seen: Mutex<Option<Instant>>,
    rng: Mutex<SmallRng>,
    latencies: Arc<Mutex<Latencies>>,
    /// Requests submitted so far: each takes the next number as its arrival.
    arrivals: AtomicU64,
    settled: Mutex<Settled>,
    /// Every slot this committer created or read, published before the state holding it is
    /// installed, so a reader woken by the install finds it here.
    recent: Arc<RecentSlots>,
}

impl Shared {
    /// The number the next request will take: every request numbered below it has arrived.
    fn arrivals_now(&self) -> u64 {
        self.arrivals.load(Ordering::SeqCst)
    }

    /// Records that `sequence` was the tip after the first `arrivals` requests arrived.
    fn settle(&self, sequence: u64, arrivals: u64) {
        let mut settled = self.settled.lock().expect("settled lock poisoned");
        *settled = (*settled).max(Settled { sequence, arrivals });
    }

    fn settled(&self) -> Settled {
        *self.settled.lock().expect("settled lock poisoned")
    }

    /// Installs `state` if it is ahead of the served one.
    fn install(&self, state: &WorldState) {
        self.served.send_if_modified(|current| {
            if state.sequence() > current.sequence() {
                *current = state.clone();
                true
            } else {
                false
            }
        });
    }

    fn report(&self, sequence: u64) {
        self.committed.send_if_modified(|current| {
            let newer = sequence > *current;
            if newer {
                *current = sequence;
            }
            newer
        });
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, CommitStats> {
        self.stats.lock().expect("stats lock poisoned")
    }

    fn note_peer(&self) {
        *self.peer_seen.lock().expect("peer lock poisoned") = Some(Instant::now());
    }

    fn peer_active(&self) -> bool {
        self.peer_seen
            .lock()
            .expect("peer lock poisoned")
            .is_some_and(|at| at.elapsed() <= self.config.yield_window)
    }

    fn note_hint(&self) {
        *self.hint_seen.lock().expect("hint lock poisoned") = Some(Instant::now());
    }

    fn hinted(&self) -> bool {
        self.hint_seen
            .lock()
            .expect("hint lock poisoned")
            .is_some_and(|at| at.elapsed() <= self.config.yield_window)
    }

    /// The longest pause after a win while a peer is active: the configured jitter while
    /// hints arrive, else a share of this store's slot-create latency (see
    /// [`CommitterConfig::unhinted_yield_creates`]).
    fn yield_ceiling(&self) -> Duration {
        if self.hinted() {
            return self.config.yield_jitter;
        }
        self.unhinted_yield()
    }

    /// How long a store that saw no peer leaves a name free: two slot creates, so a peer
    /// that lost the name before (and read the slot that beat it) lands first.
    fn listening_pause(&self) -> Duration {
        let create = self
            .latencies
            .lock()
            .expect("latency lock poisoned")
            .create
            .unwrap_or_default();
        self.config.yield_jitter.max(create * 2)
    }

    /// The longest pause after a win without hints.
    fn unhinted_yield(&self) -> Duration {
        let hinted = self.config.yield_jitter;
        let create = self
            .latencies
            .lock()
            .expect("latency lock poisoned")
            .create
            .unwrap_or_default();
        hinted.max(create * self.config.unhinted_yield_creates)
    }

    fn next_seed(&self) -> u64 {
        self.rng.lock().expect("rng lock poisoned").random()
    }
}

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
        let limit = shared.config.batch_start;
        let actor = Actor {
            shared: shared.clone(),
            rx,
            rx_open: true,
            queue: VecDeque::new(),
            batches: VecDeque::new(),
            tail: shared.served.borrow().clone(),
            creating: None,
            staging: JoinSet::new(),
            staging_ids: HashMap::new(),
            create_arrivals: 0,
            probe_front: false,
            staged: HashSet::new(),
            staging_now: HashSet::new(),
            stage_failed: HashMap::new(),
            limit,
            yield_until: None,
            handoff_until: None,
            contended: None,
            writers: VecDeque::new(),
            tail_landed: Instant::now(),
            turn_until: None,
            peek: None,
            hint_arrived: Instant::now(),
            last_listened: Instant::now(),
            own_slots: VecDeque::new(),
            shedding: VecDeque::new(),
            shed_waiters: Vec::new(),
            lost_streak: 0,
            read_ahead: None,
            cache: Arc::default(),
            warming: Arc::default(),
            closing: None,
        };
        tokio::spawn(actor.run());
        let seed = shared.next_seed();
        Committer {
            shared,
            tx,
            next_id: Arc::new(Mutex::new(SmallRng::seed_from_u64(seed))),
        }
    }

    /// Commits one write and answers once its slot is confirmed (or with its own error).
    pub async fn submit(&self, request: WriteRequest) -> Result<Outcome> {
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

struct AbandonOnDrop(Arc<AtomicU8>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        abandon(&self.0);
    }
}

/// Marks a queued request abandoned; false when the committer already took it.
fn abandon(ticket: &AtomicU8) -> bool {
    match ticket.compare_exchange(QUEUED, ABANDONED, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => true,
        Err(state) => state == ABANDONED,
    }
}

/// Version bytes of confirmed or read versions by hash, so appends need no read. Bounded by
/// entries and bytes; versions of batches still in the pipeline are found in the batches.
#[derive(Default)]
struct VersionCache {
    bytes: HashMap<Hash, Bytes>,
    order: VecDeque<Hash>,
    total: usize,
}

impl VersionCache {
    const MAX_ENTRIES: usize = 4096;
    const MAX_BYTES: usize = 64 << 20;

    fn get(&self, hash: &Hash) -> Option<Bytes> {
        self.bytes.get(hash).cloned()
    }

    fn insert(&mut self, hash: Hash, bytes: Bytes) {
        let len = bytes.len();
        if self.bytes.insert(hash, bytes).is_some() {
            return;
        }
        self.total += len;
        self.order.push_back(hash);
        while self.order.len() > Self::MAX_ENTRIES || self.total > Self::MAX_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.bytes.remove(&old) {
                self.total -= gone.len();
            }
        }
    }
}

/// A read-ahead of version bytes that several waiters can await.
type Warming = futures::future::Shared<futures::future::BoxFuture<'static, Option<Bytes>>>;

/// What one member of a batch came to.
enum Result1 {
    /// An entry of the batch's slot.
    Write {
        change: Box<Change>,
        summary: DocSummary,
    },
    /// Answered without a change of its own (failure or no-op).
    Answer(Result<Outcome>),
}

struct Member {
    pending: Pending,
    path: Option<DocPath>,
    result: Result1,
}

/// A batch's slot, settled when the batch reaches the front of the pipeline.
struct Sealed {
    /// `None` when no member writes.
    slot: Option<EncodedSlot>,
    result: WorldState,
}

/// Members committed together. A batch stays open, taking newly queued members, until it
/// reaches the front with nothing in flight; then it is sealed into its slot.
struct Batch {
    members: Vec<Member>,
    /// The most members the batch takes.
    cap: usize,
    /// The state after every member, with provisional version locations: what later
    /// members and batches build on.
    working: WorldState,
    inline_used: usize,
    /// Blobs the batch's versions need created before its slot.
    blobs: Vec<(Hash, Bytes)>,
    sealed: Option<Sealed>,
}

impl Batch {
    fn open(working: WorldState, cap: usize) -> Batch {
        Batch {
            members: Vec::new(),
            cap,
            working,
            inline_used: 0,
            blobs: Vec::new(),
            sealed: None,
        }
    }

    fn has_room(&self) -> bool {
        self.sealed.is_none() && self.members.len() < self.cap
    }
}

enum Event {
    Message(Option<Msg>),
    Created(CreateOutcome),
    Peeked(Result<Option<EncodedSlot>>),
    Staged(std::result::Result<(tokio::task::Id, (Hash, Result<()>)), tokio::task::JoinError>),
    Timer,
}

enum CreateOutcome {
    Won,
    Lost(Box<EncodedSlot>),
    Failed(Error),
}

struct Actor {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<Msg>,
    rx_open: bool,
    queue: VecDeque<Pending>,
    batches: VecDeque<Batch>,
    /// The newest state this pipeline knows is committed: the base of the front's slot.
    tail: WorldState,
    creating: Option<JoinHandle<CreateOutcome>>,
    staging: JoinSet<(Hash, Result<()>)>,
    /// The blob each staging task creates, so a task that panicked fails its blob.
    staging_ids: HashMap<tokio::task::Id, Hash>,
    /// Requests that had arrived when the slot being created was sealed: its win settles
    /// its result for them.
    create_arrivals: u64,
    /// The front writes nothing and no probe since its members arrived confirmed its base:
    /// probe the tip before answering it.
    probe_front: bool,
    staged: HashSet<Hash>,
    staging_now: HashSet<Hash>,
    stage_failed: HashMap<Hash, Error>,
    limit: usize,
    yield_until: Option<Instant>,
    handoff_until: Option<Instant>,
    /// When a peer last contended for this store's names with hints flowing: lost a slot
    /// to it, beat it to one, or took a turn it was offered.
    contended: Option<Instant>,
    /// The stores that wrote the newest slots of the tail, oldest first (at most
    /// [`ROTATION_SLOTS`]): with this store, the rotation contending stores take turns in.
    writers: VecDeque<StoreId>,
    /// About when the tail's newest slot landed in the bucket.
    tail_landed: Instant,
    /// While it is another store's turn in the rotation: hold the next create until then
    /// (or until the tail moves).
    turn_until: Option<Instant>,
    /// A read of the next name, timed to land just after the store whose turn it is would
    /// have created it.
    peek: Option<JoinHandle<Result<Option<EncodedSlot>>>>,
    /// When the hint that set `read_ahead` arrived.
    hint_arrived: Instant,
    /// When this store last left a name free, or last saw a peer (see
    /// [`CommitterConfig::listen_every`]).
    last_listened: Instant,
    /// `(first, last)` of this store's recent slots, oldest first.
    own_slots: VecDeque<(u64, u64)>,
    /// What checkpoints hold and the committer's states do not yet fold, oldest first.
    shedding: VecDeque<Folded>,
    /// Answered once `shedding` is empty.
    shed_waiters: Vec<oneshot::Sender<()>>,
    /// Races lost since the last win.
    lost_streak: u32,
    /// A peer hinted at slots this store has not read: read them before the next create
    /// rather than lose its name to them.
    read_ahead: Option<u64>,
    /// Version bytes by hash, shared with warm-up reads.
    cache: Arc<Mutex<VersionCache>>,
    /// Reads ahead for queued appends, by version hash; a build waits on one in flight.
    warming: Arc<Mutex<HashMap<Hash, Warming>>>,
    closing: Option<Vec<oneshot::Sender<()>>>,
}

fn closed_error(pending: &Pending) -> Error {
    Error::new(
        pending.request.mutation.op(),
        pending.request.mutation.raw_path(),
        ErrorKind::Closed,
        "the committer is closed",
    )
}

impl Actor {
    async fn run(mut self) {
        loop {
            while let Ok(msg) = self.rx.try_recv() {
                self.receive(msg);
            }
            if self.closing.is_some() {
                for pending in std::mem::take(&mut self.queue) {
                    let err = closed_error(&pending);
                    let _ = pending.reply.send(Err(err));
                }
            }
            self.expire_queue();
            self.shed_some();
            if self.closing.is_none() {
                self.fill_pipeline().await;
                // A peek in flight finds the next slot within half a read of its landing,
                // sooner than a read begun now: the hint waits for it.
                if self.read_ahead.is_some() && self.creating.is_none() && self.peek.is_none() {
                    self.read_ahead().await;
                    // Reading ahead returned the batches behind the front to the queue: they
                    // are rebuilt before the front is sealed, so it can take them in.
                    self.fill_pipeline().await;
                }
            }
            self.advance_front();
            while std::mem::take(&mut self.probe_front) && self.closing.is_none() {
                self.probe_front_batch().await;
                self.advance_front();
            }
            if self.closing.is_some() && self.creating.is_none() {
                for batch in std::mem::take(&mut self.batches) {
                    for member in batch.members {
                        let err = closed_error(&member.pending);
                        let _ = member.pending.reply.send(Err(err));
                    }
                }
                for done in self.closing.take().unwrap_or_default() {
                    let _ = done.send(());
                }
                return;
            }
            self.wait().await;
        }
    }

    /// Folds up to [`SHED_PER_TURN`] documents of what checkpoints hold into every state the
    /// committer keeps: the tail, each batch's working and sealed states, and the served
    /// state (without waking its watchers: what they see does not change).
    fn shed_some(&mut self) {
        let take = self.shedding.len().min(SHED_PER_TURN);
        if take == 0 {
            return;
        }
        let chunk: Vec<Folded> = self.shedding.drain(..take).collect();
        for folded in &chunk {
            fold_into(&mut self.tail, folded);
            for batch in &mut self.batches {
                fold_into(&mut batch.working, folded);
                if let Some(sealed) = &mut batch.sealed {
                    fold_into(&mut sealed.result, folded);
                }
            }
        }
        let tail = &self.tail;
        self.shared.served.send_if_modified(|served| {
            if served.sequence() == tail.sequence() {
                *served = tail.clone();
            } else {
                for folded in &chunk {
                    fold_into(served, folded);
                }
            }
            false
        });
        if self.shedding.is_empty() {
            for done in self.shed_waiters.drain(..) {
                let _ = done.send(());
            }
        }
    }

    fn cache_insert(&self, hash: Hash, bytes: Bytes) {
        self.cache
            .lock()
            .expect("cache lock poisoned")
            .insert(hash, bytes);
    }

    /// Reads ahead the current version an append will build on, while it waits in the queue,
    /// so building its batch needs no read (once per version).
    fn warm(&self, mutation: &Mutation) {
        let Mutation::Append { .. } = mutation else {
            return;
        };
        let Ok(path) = mutation.path() else {
            return;
        };
        let Some(record) = self
            .shared
            .served
            .borrow()
            .doc(&path)
            .map(|d| d.head.clone())
        else {
            return;
        };
        if self
            .cache
            .lock()
            .expect("cache lock poisoned")
            .get(&record.hash)
            .is_some()
        {
            return;
        }
        let mut warming = self.warming.lock().expect("warming lock poisoned");
        if warming.contains_key(&record.hash) {
            return;
        }
        let store = self.shared.store.clone();
        let prefix = self.shared.config.prefix.clone();
        let cache = self.cache.clone();
        let registry = self.warming.clone();
        let hash = record.hash;
        let read: futures::future::BoxFuture<'static, Option<Bytes>> = Box::pin(async move {
            let bytes = read_version(store.as_ref(), &prefix, &record).await.ok();
            if let Some(bytes) = &bytes {
                cache
                    .lock()
                    .expect("cache lock poisoned")
                    .insert(hash, bytes.clone());
            }
            registry
                .lock()
                .expect("warming lock poisoned")
                .remove(&hash);
            bytes
        });
        let shared = read.shared();
        warming.insert(hash, shared.clone());
        tokio::spawn(shared);
    }

    fn receive(&mut self, msg: Msg) {
        match msg {
            Msg::Submit(pending) => {
                if self.closing.is_some() {
                    let err = closed_error(&pending);
                    let _ = pending.reply.send(Err(err));
                } else {
                    self.warm(&pending.request.mutation);
                    self.queue.push_back(pending);
                }
            }
            Msg::Shed(folded, done) => {
                self.shedding.extend(folded);
                self.shed_waiters.push(done);
            }
            Msg::Close(done) => self.closing.get_or_insert_with(Vec::new).push(done),
            Msg::Follow(sequence) => {
                self.shared.note_hint();
                let ours = self
                    .own_slots
                    .iter()
                    .any(|(first, last)| (*first..=*last).contains(&sequence));
                if ours {
                    self.shared.note_peer();
                    self.contended = Some(Instant::now());
                    if self.turn_position().is_some() {
                        // The rotation says whose turn the next name is.
                        self.decide_turn();
                        if self.turn_until.is_some() {
                            self.shared.stats().handoffs += 1;
                        }
                    } else {
                        self.handoff_until = Some(Instant::now() + self.shared.config.handoff_wait);
                        self.shared.stats().handoffs += 1;
                    }
                } else if sequence > self.shared.served.borrow().sequence() {
                    self.shared.note_peer();
                    if self.handoff_until.take().is_some() || self.turn_until.is_some() {
                        // The peer took the turn this store held for it.
                        self.contended = Some(Instant::now());
                    }
                    if self.read_ahead.is_none() {
                        self.hint_arrived = Instant::now();
                    }
                    self.read_ahead = self.read_ahead.max(Some(sequence));
                }
            }
        }
    }

    /// Waits for the next thing that can move the committer forward.
    async fn wait(&mut self) {
        // A pause that has passed must not stay armed: its timer would fire at once, forever,
        // while the front waits on something else (a paused clock would never advance).
        let now = Instant::now();
        self.yield_until = self.yield_until.filter(|until| *until > now);
        self.handoff_until = self.handoff_until.filter(|until| *until > now);
        self.turn_until = self.turn_until.filter(|until| *until > now);
        let next_deadline = self
            .queue
            .iter()
            .filter(|p| p.ticket.load(Ordering::SeqCst) == QUEUED)
            .filter_map(|p| p.request.deadline)
            .min();
        let hold_until = self
            .yield_until
            .into_iter()
            .chain(self.handoff_until)
            .chain(self.turn_until)
            .max()
            .filter(|_| self.creating.is_none() && !self.batches.is_empty());
        let mut creating = self.creating.take();
        let mut peek = self.peek.take();
        // Biased, so a run replays from its seed (tokio's random branch order is not
        // seeded); completions come first, as they are finite, then requests, then timers.
        let event = tokio::select! {
            biased;
            outcome = async { creating.as_mut().expect("guarded").await }, if creating.is_some() => {
                Event::Created(outcome.unwrap_or_else(|e| CreateOutcome::Failed(Error::new(
                    Op::Commit, "", ErrorKind::Storage, format!("slot create task failed: {e}"),
                ))))
            }
            Some(done) = self.staging.join_next_with_id(), if !self.staging.is_empty() => Event::Staged(done),
            read = async { peek.as_mut().expect("guarded").await }, if peek.is_some() => {
                Event::Peeked(read.unwrap_or_else(|e| Err(Error::new(
                    Op::Read, "", ErrorKind::Storage, format!("peek task failed: {e}"),
                ))))
            }
            msg = self.rx.recv(), if self.rx_open => Event::Message(msg),
            () = sleep_until_opt(hold_until), if hold_until.is_some() => Event::Timer,
            () = sleep_until_opt(next_deadline), if next_deadline.is_some() => Event::Timer,
            // More to shed: take another turn once nothing else is ready.
            () = std::future::ready(()), if !self.shedding.is_empty() => Event::Timer,
        };
        if !matches!(event, Event::Created(_)) {
            self.creating = creating;
        }
        if !matches!(event, Event::Peeked(_)) {
            self.peek = peek;
        }
        match event {
            Event::Message(Some(msg)) => self.receive(msg),
            Event::Message(None) => {
                self.rx_open = false;
                self.closing.get_or_insert_with(Vec::new);
            }
            Event::Created(outcome) => self.on_created(outcome).await,
            Event::Peeked(read) => self.on_peeked(read).await,
            Event::Staged(Ok((id, (hash, result)))) => {
                self.staging_ids.remove(&id);
                self.staging_now.remove(&hash);
                match result {
                    Ok(()) => {
                        self.staged.insert(hash);
                    }
                    Err(e) => {
                        self.stage_failed.insert(hash, e);
                    }
                }
            }
            Event::Staged(Err(e)) => {
                // A staging task that panicked fails its blob: the batches waiting on it are
                // answered instead of waiting for it forever.
                tracing::error!("blob staging task failed: {e}");
                if let Some(hash) = self.staging_ids.remove(&e.id()) {
                    self.staging_now.remove(&hash);
                    self.stage_failed.insert(
                        hash,
                        Error::new(
                            Op::Stage,
                            keys::blob_key(&self.shared.config.prefix, &hash),
                            ErrorKind::Storage,
                            format!("blob staging task failed: {e}"),
                        ),
                    );
                }
            }
            Event::Timer => {}
        }
    }

    /// Answers queued requests that were abandoned or whose deadline passed.
    fn expire_queue(&mut self) {
        let now = Instant::now();
        self.queue
            .retain(|p| p.ticket.load(Ordering::SeqCst) != ABANDONED);
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for pending in std::mem::take(&mut self.queue) {
            if pending.request.deadline.is_some_and(|d| d <= now) && abandon(&pending.ticket) {
                let err = Error::new(
                    pending.request.mutation.op(),
                    pending.request.mutation.raw_path(),
                    ErrorKind::Canceled,
                    "deadline passed while queued",
                );
                let _ = pending.reply.send(Err(err));
            } else {
                kept.push_back(pending);
            }
        }
        self.queue = kept;
    }

    /// Takes the next live request off the queue (abandoned ones are dropped).
    fn take_next(&mut self) -> Option<Pending> {
        while let Some(pending) = self.queue.pop_front() {
            let was =
                pending
                    .ticket
                    .compare_exchange(QUEUED, TAKEN, Ordering::SeqCst, Ordering::SeqCst);
            // A re-queued member was taken before and stays taken.
            if was.is_ok() || was == Err(TAKEN) {
                return Some(pending);
            }
        }
        None
    }

    /// Moves queued requests into open batches: the last batch while it has room, else a new
    /// batch while the pipeline has room.
    async fn fill_pipeline(&mut self) {
        loop {
            let joinable = self.batches.back().is_some_and(Batch::has_room);
            if !joinable && self.batches.len() >= self.shared.config.pipeline {
                return;
            }
            let Some(pending) = self.take_next() else {
                return;
            };
            if !joinable {
                let working = match self.batches.back() {
                    Some(last) => last.working.clone(),
                    None => {
                        // Nothing in flight: start from the newest state known, which a
                        // refresh may have moved past this pipeline's own.
                        let served = self.shared.served.borrow().clone();
                        if served.sequence() > self.tail.sequence() {
                            self.tail = served;
                            // Who wrote the slots a refresh applied is not known here.
                            self.writers.clear();
                            self.tail_moved([], Instant::now());
                        }
                        // The store was idle: the log may have moved since it last looked.
                        // One probe puts the tail at the tip for this request (and every
                        // one queued before it), so a replica that was only behind judges
                        // it on every write acknowledged before it arrived.
                        if !self
                            .shared
                            .settled()
                            .covers(self.tail.sequence(), pending.arrival)
                        {
                            // A failed probe was logged; the create or a later probe settles.
                            let _ = self.confirm_tip().await;
                        }
                        self.tail.clone()
                    }
                };
                self.limit = self.limit.min(self.batch_ceiling());
                self.batches.push_back(Batch::open(working, self.limit));
            }
            let mut batch = self.batches.pop_back().expect("a batch to join");
            self.add_member(&mut batch, pending).await;
            if batch.members.len() == batch.cap && !self.queue.is_empty() {
                self.limit = (self.limit * 2).min(self.batch_ceiling());
            }
            self.batches.push_back(batch);
        }
    }

    /// Probes the tip from the tail and catches up to it, settling the result for every
    /// request that arrived before the probe began; returns the slots it applied and what
    /// they touched. A failed probe keeps what it applied and settles nothing.
    async fn confirm_tip(&mut self) -> (usize, Touched, Result<()>) {
        let arrivals = self.shared.arrivals_now();
        let mut next = self.tail.clone();
        let mut touched = Touched::default();
        let policy = self.shared.config.policy_path.clone();
        let own = self.shared.config.store;
        let mut peer = false;
        let store = self.shared.store.clone();
        let recent = &self.shared.recent;
        let mut writers = Vec::new();
        let read = tip::catch_up_observed(
            store.as_ref(),
            &self.shared.config.prefix,
            &mut next,
            |slot| {
                touched.add(slot, policy.as_ref());
                peer |= slot.slot.store != own;
                writers.push(slot.slot.store);
                recent.publish(slot);
            },
        )
        .await;
        if peer {
            self.shared.note_peer();
        }
        let applied = (next.sequence() - self.tail.sequence()) as usize;
        if applied > 0 {
            self.tail = next;
            self.tail_moved(writers, Instant::now());
            self.shared.install(&self.tail);
        }
        match read {
            Ok(_) => {
                self.shared.settle(self.tail.sequence(), arrivals);
                (applied, touched, Ok(()))
            }
            Err(e) => {
                tracing::warn!("probing the log's tip failed: {e}");
                (applied, touched, Err(e))
            }
        }
    }

    /// Confirms the base of a front that writes nothing (see [`Actor::advance_front`]):
    /// when the tip moved, the front is rebuilt on it; when the probe fails, its members are
    /// answered with that failure (nothing was written).
    async fn probe_front_batch(&mut self) {
        let (applied, touched, read) = self.confirm_tip().await;
        if read.is_err() || applied > 0 {
            let Some(front) = self.batches.pop_front() else {
                return;
            };
            self.requeue_later_batches();
            if let Err(e) = read {
                for member in front.members {
                    let mutation = &member.pending.request.mutation;
                    let err = Error::new(
                        mutation.op(),
                        mutation.raw_path(),
                        e.kind(),
                        format!("could not confirm the log's tip: {e}"),
                    );
                    let _ = member.pending.reply.send(Err(err));
                }
                return;
            }
            let base = self.tail.clone();
            let rebuilt = self.rebuild(base, front.members, front.cap, touched).await;
            self.batches.push_front(rebuilt);
        }
    }

    /// The most members a batch may grow to now.
    fn batch_ceiling(&self) -> usize {
        let config = &self.shared.config;
        if self.shared.peer_active() {
            config.contended_batch_max
        } else {
            config.batch_max
        }
    }

    /// Builds `pending` on the batch's working state and adds it.
    async fn add_member(&mut self, batch: &mut Batch, mut pending: Pending) {
        let path = pending.request.mutation.path().ok();
        let result = self.build_member(batch, &mut pending).await;
        if let Some(blob) = blob_of(&result) {
            self.stage_blob(&blob);
            batch.blobs.push(blob);
        }
        batch.members.push(Member {
            pending,
            path,
            result,
        });
    }

    /// Rebuilds `members` on `base` after a lost race. A member whose dependencies the
    /// touched paths do not reach keeps its result (its preconditions are not run again);
    /// the others are rebuilt, and what they touch counts for the members after them.
    async fn rebuild(
        &mut self,
        base: WorldState,
        members: Vec<Member>,
        cap: usize,
        mut touched: Touched,
    ) -> Batch {
        let mut batch = Batch::open(base, cap);
        let mut kept = 0u64;
        let mut rebuilt = 0u64;
        let quota = self.shared.config.max_documents != 0;
        for member in members {
            // A kept create of a new path was counted against the quota on the old base; the
            // winner may have filled the world since, so it is judged again.
            let recount = quota && creates_document(&member.result);
            if !recount && !touched.reaches(&member) {
                let applies = match &member.result {
                    Result1::Write { change, .. } => batch
                        .working
                        .apply_entry(&change.entry, Some(provisional_record(change)))
                        .is_ok(),
                    Result1::Answer(_) => true,
                };
                if applies {
                    kept += 1;
                    let mut member = member;
                    if let Result1::Write { change, summary } = &mut member.result {
                        let inline = change.entry.write.as_ref().and_then(|w| w.inline.as_ref());
                        batch.inline_used += inline.map_or(0, Bytes::len);
                        if let Some(doc) = batch.working.doc(&change.entry.path) {
                            *summary = doc.summary();
                        }
                    }
                    if let Some(blob) = blob_of(&member.result) {
                        self.stage_blob(&blob);
                        batch.blobs.push(blob);
                    }
                    batch.members.push(member);
                    continue;
                }
                // Cannot happen while the dependency rule holds; rebuild to be safe.
                tracing::warn!("a kept member no longer applies; rebuilding it");
            }
            rebuilt += 1;
            if let Some(path) = &member.path {
                touched.paths.push(path.clone());
            }
            self.add_member(&mut batch, member.pending).await;
        }
        let mut stats = self.shared.stats();
        stats.members_kept += kept;
        stats.members_rebuilt += rebuilt;
        batch
    }

    async fn build_member(&mut self, batch: &mut Batch, pending: &mut Pending) -> Result1 {
        let mutation = &pending.request.mutation;
        let base = match mutation {
            Mutation::Append { .. } => match self.append_base(batch, mutation).await {
                Ok(base) => base,
                Err(e) => return Result1::Answer(Err(e)),
            },
            _ => None,
        };
        let config = &self.shared.config;
        let limits = BuildLimits {
            max_documents: config.max_documents,
        };
        let versions = pending
            .request
            .precondition
            .as_ref()
            .map(|_| self.pending_versions(batch));
        let working = &mut batch.working;
        let built = build::build(
            working,
            mutation,
            pending.id,
            self.shared.clock.now(),
            limits,
            &mut pending.blind_seen,
            base.as_ref(),
        );
        let mut change = match built {
            Err(e) => return Result1::Answer(Err(e)),
            Ok(Built::Unchanged(doc)) => {
                return Result1::Answer(Ok(Outcome {
                    doc,
                    changed: false,
                    sequence: None,
                    prune: None,
                }));
            }
            Ok(Built::Change(change)) => change,
        };
        if let (Some(precondition), Some(versions)) = (&pending.request.precondition, &versions)
            && let Err(e) = precondition
                .check(working, &change.prepared, versions)
                .await
        {
            return Result1::Answer(Err(e));
        }
        if let (Some(write), Some(bytes)) = (change.entry.write.as_mut(), &change.version_bytes)
            && bytes.len() <= config.inline_limit
            && batch.inline_used + bytes.len() <= config.slot_inline_budget
        {
            batch.inline_used += bytes.len();
            write.inline = Some(bytes.clone());
        }
        if let Err(why) = working.apply_entry(&change.entry, Some(provisional_record(&change))) {
            return Result1::Answer(Err(Error::integrity(
                mutation.op(),
                mutation.raw_path(),
                format!("a built write does not apply: {why}"),
            )));
        }
        let summary = working
            .doc(&change.entry.path)
            .map(|d| d.summary())
            .expect("a document just written exists");
        Result1::Write { change, summary }
    }

    /// The current version of an append's document: built in the pipeline, cached, being
    /// read ahead, or read now.
    /// What a precondition judged on `batch`'s working state may read before the bucket
    /// holds it: the versions built in `batch` and every batch in the pipeline.
    fn pending_versions(&self, batch: &Batch) -> PendingVersions {
        let pipeline: Vec<(Hash, Bytes)> = std::iter::once(batch)
            .chain(self.batches.iter())
            .flat_map(|b| &b.members)
            .filter_map(|m| match &m.result {
                Result1::Write { change, .. } => change
                    .entry
                    .write
                    .as_ref()
                    .map(|w| w.hash)
                    .zip(change.version_bytes.clone()),
                Result1::Answer(_) => None,
            })
            .collect();
        PendingVersions {
            pipeline: pipeline.into(),
            cache: Some(self.cache.clone()),
        }
    }

    async fn append_base(
        &mut self,
        batch: &Batch,
        mutation: &Mutation,
    ) -> Result<Option<StoredVersion>> {
        let Ok(path) = mutation.path() else {
            return Ok(None);
        };
        let Some(doc) = batch.working.doc(&path) else {
            return Ok(None);
        };
        let record = doc.head.clone();
        let built = |b: &Batch| {
            b.members.iter().find_map(|m| match &m.result {
                Result1::Write { change, .. } => change
                    .entry
                    .write
                    .as_ref()
                    .filter(|w| w.hash == record.hash)
                    .and(change.version_bytes.clone()),
                Result1::Answer(_) => None,
            })
        };
        let mut cached = built(batch)
            .or_else(|| self.batches.iter().find_map(built))
            .or_else(|| {
                self.cache
                    .lock()
                    .expect("cache lock poisoned")
                    .get(&record.hash)
            });
        if cached.is_none() {
            let warming = self
                .warming
                .lock()
                .expect("warming lock poisoned")
                .get(&record.hash)
                .cloned();
            if let Some(read) = warming {
                cached = read.await;
            }
        }
        let bytes = match cached {
            Some(bytes) => bytes,
            None => {
                let bytes = read_version(
                    self.shared.store.as_ref(),
                    &self.shared.config.prefix,
                    &record,
                )
                .await
                .map_err(|e| Error::new(mutation.op(), path.as_str(), e.kind(), e.to_string()))?;
                self.cache_insert(record.hash, bytes.clone());
                bytes
            }
        };
        StoredVersion::decode(&bytes)
            .map(Some)
            .map_err(|why| Error::integrity(Op::Read, path.as_str(), why))
    }

    /// Encodes the front batch's slot on the tail and computes its result.
    fn seal(&self, batch: &Batch) -> Result<Sealed> {
        let entries: Vec<_> = batch
            .members
            .iter()
            .filter_map(|m| match &m.result {
                Result1::Write { change, .. } => Some(change.entry.clone()),
                Result1::Answer(_) => None,
            })
            .collect();
        if entries.is_empty() {
            return Ok(Sealed {
                slot: None,
                result: self.tail.clone(),
            });
        }
        let first = self.tail.sequence() + 1;
        let slot = Slot {
            world: self.tail.world(),
            first,
            store: self.shared.config.store,
            prev: self.tail.tip(),
            entries,
        };
        let key = keys::slot_key(&self.shared.config.prefix, first);
        let encoded = EncodedSlot::encode(slot, &key)?;
        let result = self.tail.apply(&encoded)?;
        Ok(Sealed {
            slot: Some(encoded),
            result,
        })
    }

    /// Starts creating a blob unless it is created or being created.
    fn stage_blob(&mut self, (hash, bytes): &(Hash, Bytes)) {
        if self.staged.contains(hash) || self.staging_now.contains(hash) {
            return;
        }
        self.stage_failed.remove(hash);
        self.staging_now.insert(*hash);
        let store = self.shared.store.clone();
        let key = keys::blob_key(&self.shared.config.prefix, hash);
        let bytes = bytes.clone();
        let hash = *hash;
        let retry = self.retry_policy();
        let task = self
            .staging
            .spawn(async move { (hash, create_blob(store, key, bytes, retry).await) });
        self.staging_ids.insert(task.id(), hash);
    }

    fn retry_policy(&self) -> RetryPolicy {
        let config = &self.shared.config;
        RetryPolicy {
            attempts: config.create_attempts.max(1),
            base: config.backoff_base,
            cap: config.backoff_cap,
            seed: self.shared.next_seed(),
        }
    }

    /// Moves the front of the pipeline: fails a batch whose blobs could not be staged; once
    /// nothing is in flight, no pause is pending and its blobs are in, seals the front and
    /// answers it at once when it writes nothing, or starts creating its slot.
    fn advance_front(&mut self) {
        while self.creating.is_none() {
            let Some(front) = self.batches.front() else {
                return;
            };
            if let Some(err) = front
                .blobs
                .iter()
                .find_map(|(h, _)| self.stage_failed.get(h))
            {
                let err = err.duplicate();
                for (h, _) in &front.blobs {
                    self.stage_failed.remove(h);
                }
                let batch = self.batches.pop_front().expect("front exists");
                self.fail_front(batch, &err);
                continue;
            }
            if front.sealed.is_none() {
                if !front.blobs.iter().all(|(h, _)| self.staged.contains(h))
                    || self.closing.is_some()
                {
                    return;
                }
                let now = Instant::now();
                if self.yield_until.is_some_and(|until| now < until)
                    || self.handoff_until.is_some_and(|until| now < until)
                    || self.turn_until.is_some_and(|until| now < until)
                {
                    return;
                }
                self.absorb_behind();
                let front = self.batches.front().expect("front exists");
                if writes_nothing(front) {
                    let settled = self.shared.settled();
                    let sequence = self.tail.sequence();
                    let confirmed = front
                        .members
                        .iter()
                        .all(|m| settled.covers(sequence, m.pending.arrival));
                    if !confirmed {
                        // Its answers are judged on the tail, which no probe, listing or
                        // win since these requests arrived showed to be the tip. A batch
                        // behind that writes settles it with its slot: the answers join it.
                        // Alone, the front waits for a probe.
                        if self.batches.len() > 1 {
                            let front = self.batches.pop_front().expect("front exists");
                            let next = self.batches.front_mut().expect("a batch behind");
                            let mut members = front.members;
                            members.append(&mut next.members);
                            next.members = members;
                            continue;
                        }
                        self.probe_front = true;
                        return;
                    }
                }
                self.yield_until = None;
                self.handoff_until = None;
                self.turn_until = None;
                let sealed = self.seal(front);
                let size = front.members.len();
                let short = size < front.cap;
                {
                    let mut stats = self.shared.stats();
                    stats.batch_sizes.push(size);
                    let slot = sealed.as_ref().ok().and_then(|s| s.slot.as_ref());
                    if let Some(slot) = slot {
                        *stats
                            .slots_by_entries
                            .entry(slot.slot.entries.len())
                            .or_default() += 1;
                    }
                    let excess = stats.batch_sizes.len().saturating_sub(BATCH_SIZES_KEPT);
                    // Trimmed in chunks, so each push stays O(1) amortized.
                    if excess >= BATCH_SIZES_KEPT / 4 {
                        stats.batch_sizes.drain(..excess);
                    }
                }
                if short {
                    self.limit = self.shared.config.batch_start;
                }
                match sealed {
                    Ok(sealed) => {
                        self.batches.front_mut().expect("front exists").sealed = Some(sealed);
                    }
                    Err(e) => {
                        // The committer built something apply refuses: answer its writers
                        // with that rather than commit it.
                        tracing::error!("refusing to commit a slot that does not apply: {e}");
                        let batch = self.batches.pop_front().expect("front exists");
                        self.fail_front(batch, &e);
                        continue;
                    }
                }
            }
            let front = self.batches.front().expect("front exists");
            let Some(slot) = front.sealed.as_ref().and_then(|s| s.slot.as_ref()) else {
                let batch = self.batches.pop_front().expect("front exists");
                answer_batch(batch, None);
                continue;
            };
            let store = self.shared.store.clone();
            let key = keys::slot_key(&self.shared.config.prefix, slot.slot.first);
            let bytes = slot.bytes.clone();
            let first = slot.slot.first;
            let retry = self.retry_policy();
            // A store alone never reads behind its creates: only contention makes them pay.
            let read_behind = if self.shared.peer_active() {
                self.shared
                    .latencies
                    .lock()
                    .expect("latency lock poisoned")
                    .read_behind()
            } else {
                None
            };
            let latencies = self.shared.latencies.clone();
            self.create_arrivals = self.shared.arrivals_now();
            self.creating = Some(tokio::spawn(create_slot(
                store,
                SlotCreate {
                    key,
                    first,
                    bytes,
                    retry,
                    read_behind,
                    latencies,
                },
            )));
            return;
        }
    }

    /// Moves the batches behind the front, about to be sealed, into it while the slot has
    /// room for them: each was built on the one before it, so the members stay in order on
    /// the same states. Writes that overflowed the front while it waited (on a create, or on
    /// a peer's turn) ride this slot instead of waiting for the next. Having to absorb means
    /// the limit is short of what arrives per slot: it doubles.
    fn absorb_behind(&mut self) {
        let ceiling = self.batch_ceiling();
        let budget = self.shared.config.slot_inline_budget;
        let mut absorbed = false;
        while let [front, next, ..] = &self.batches.make_contiguous()[..] {
            let fits = front.members.len() + next.members.len() <= ceiling
                && front.inline_used + next.inline_used <= budget
                && next.blobs.iter().all(|(h, _)| self.staged.contains(h));
            if !fits {
                break;
            }
            let next = self.batches.remove(1).expect("a batch behind the front");
            let front = self.batches.front_mut().expect("front exists");
            front.members.extend(next.members);
            front.blobs.extend(next.blobs);
            front.inline_used += next.inline_used;
            front.working = next.working;
            front.cap = front.cap.max(next.cap);
            absorbed = true;
        }
        if absorbed {
            self.limit = (self.limit * 2).min(ceiling);
            self.shared.stats().batches_absorbed += 1;
        }
    }

    async fn on_created(&mut self, outcome: CreateOutcome) {
        let Some(front) = self.batches.pop_front() else {
            return;
        };
        let Some(sealed) = front.sealed.as_ref() else {
            return;
        };
        match outcome {
            CreateOutcome::Won => {
                if let Some(slot) = &sealed.slot {
                    // The bytes the bucket now holds under its name.
                    self.shared.recent.publish(slot);
                }
                self.tail = sealed.result.clone();
                // The name was absent when the create landed, after it was sent.
                self.shared
                    .settle(self.tail.sequence(), self.create_arrivals);
                self.shared.install(&self.tail);
                self.shared.report(self.tail.sequence());
                self.shared.stats().slots_won += 1;
                self.lost_streak = 0;
                let first = sealed.slot.as_ref().map(|s| s.slot.first);
                if let Some(slot) = &sealed.slot {
                    self.own_slots
                        .push_back((slot.slot.first, slot.slot.last()));
                    if self.own_slots.len() > 64 {
                        self.own_slots.pop_front();
                    }
                }
                for member in &front.members {
                    if let Result1::Write { change, .. } = &member.result
                        && let (Some(write), Some(bytes)) =
                            (&change.entry.write, &change.version_bytes)
                    {
                        self.cache_insert(write.hash, bytes.clone());
                    }
                }
                // Forget staged blobs no batch still waits on, so the set stays small.
                for (hash, _) in &front.blobs {
                    let needed = self
                        .batches
                        .iter()
                        .any(|b| b.blobs.iter().any(|(h, _)| h == hash));
                    if !needed {
                        self.staged.remove(hash);
                    }
                }
                answer_batch(front, first);
                let me = self.shared.config.store;
                self.tail_moved([me], Instant::now());
                let contending = self
                    .contended
                    .is_some_and(|at| at.elapsed() <= self.shared.config.yield_window);
                if self.turn_until.is_some() {
                    // Peers take the next names in the rotation: hold until they did.
                    self.shared.stats().yields += 1;
                    self.last_listened = Instant::now();
                } else if self.shared.peer_active() && self.shared.hinted() && contending {
                    // Peers want names too and hints say when they took one: hold the next
                    // create for them (until a hint shows their slot, at most a hand-off
                    // wait) instead of racing them for it.
                    self.handoff_until = Some(Instant::now() + self.shared.config.handoff_wait);
                    self.shared.stats().yields += 1;
                    self.last_listened = Instant::now();
                } else if self.shared.peer_active() {
                    let jitter = self.shared.yield_ceiling().as_micros() as u64;
                    if jitter > 0 {
                        let pause = self
                            .shared
                            .rng
                            .lock()
                            .expect("rng lock poisoned")
                            .random_range(1..=jitter);
                        self.yield_until = Some(Instant::now() + Duration::from_micros(pause));
                        self.shared.stats().yields += 1;
                    }
                    self.last_listened = Instant::now();
                } else {
                    let every = self.shared.config.listen_every;
                    let busy = !self.batches.is_empty() || !self.queue.is_empty();
                    if busy && !every.is_zero() && self.last_listened.elapsed() >= every {
                        self.last_listened = Instant::now();
                        self.yield_until = Some(Instant::now() + self.shared.listening_pause());
                        self.shared.stats().listening_pauses += 1;
                    }
                }
            }
            CreateOutcome::Lost(winner) => {
                self.shared.stats().slots_lost += 1;
                if winner.slot.store != self.shared.config.store {
                    self.shared.note_peer();
                    self.contended = Some(Instant::now());
                }
                let mut next = match self.tail.apply(&winner) {
                    Ok(next) => next,
                    Err(e) => {
                        tracing::error!("the slot that won our name does not apply: {e}");
                        self.fail_front(front, &e);
                        return;
                    }
                };
                self.shared.recent.publish(&winner);
                let mut touched = Touched::default();
                touched.add(&winner, self.shared.config.policy_path.as_ref());
                self.lost_streak += 1;
                let mut writers = vec![winner.slot.store];
                if self.lost_streak.is_multiple_of(TRAILING_LOSSES) {
                    // Losing again means this store trails the log: jump to its end.
                    let store = self.shared.store.clone();
                    let policy = self.shared.config.policy_path.clone();
                    let own = self.shared.config.store;
                    let mut peer = false;
                    let recent = &self.shared.recent;
                    let replayed = tip::replay_observed(
                        store.as_ref(),
                        &self.shared.config.prefix,
                        &mut next,
                        |slot| {
                            touched.add(slot, policy.as_ref());
                            peer |= slot.slot.store != own;
                            writers.push(slot.slot.store);
                            recent.publish(slot);
                        },
                    )
                    .await;
                    if peer {
                        self.shared.note_peer();
                    }
                    if let Err(e) = replayed {
                        tracing::warn!("catching up after a lost race stopped early: {e}");
                    }
                }
                self.tail = next.clone();
                self.tail_moved(writers, Instant::now());
                self.shared.install(&next);
                self.shared.report(next.sequence());
                self.requeue_later_batches();
                let cap = front.cap;
                let rebuilt = self.rebuild(next, front.members, cap, touched).await;
                self.batches.push_front(rebuilt);
            }
            CreateOutcome::Failed(err) => self.fail_front(front, &err),
        }
    }

    /// Answers the writers of the (popped) front batch with `err`, and returns everything
    /// judged on its writes to the queue: its other members (their answers assumed writes
    /// that did not commit) and every batch behind it.
    fn fail_front(&mut self, batch: Batch, err: &Error) {
        let mut rejudge = Vec::new();
        for member in batch.members {
            match member.result {
                Result1::Write { .. } => {
                    let _ = member.pending.reply.send(Err(err.duplicate()));
                }
                Result1::Answer(_) => rejudge.push(member.pending),
            }
        }
        self.requeue_later_batches();
        for pending in rejudge.into_iter().rev() {
            self.queue.push_front(pending);
        }
    }

    /// Reads the slots a peer hinted at and rebuilds the pipeline on them (as after a lost
    /// race, without the failed create), reporting how far the log got so the peer knows it
    /// is this store's turn after it.
    async fn read_ahead(&mut self) {
        let Some(hinted) = self.read_ahead.take() else {
            return;
        };
        let arrivals = self.shared.arrivals_now();
        let mut next = self.tail.clone();
        let mut touched = Touched::default();
        let policy = self.shared.config.policy_path.clone();
        let own = self.shared.config.store;
        let mut peer = false;
        let store = self.shared.store.clone();
        let recent = &self.shared.recent;
        let mut writers = Vec::new();
        let mut observe = |slot: &EncodedSlot| {
            touched.add(slot, policy.as_ref());
            peer |= slot.slot.store != own;
            writers.push(slot.slot.store);
            recent.publish(slot);
        };
        // The hint names how far the log reached: read the slots up to it by name, one
        // read each, and no probe past it (the next create settles whether more came). Far
        // behind, a listing finds them all at once.
        let read = if hinted.saturating_sub(next.sequence()) > READ_AHEAD_BY_NAME {
            tip::catch_up_observed(
                store.as_ref(),
                &self.shared.config.prefix,
                &mut next,
                &mut observe,
            )
            .await
            .map(|_| true)
        } else {
            read_up_to(
                store.as_ref(),
                &self.shared.config.prefix,
                &mut next,
                hinted,
                &mut observe,
            )
            .await
        };
        match read {
            // Reached the tip: the next name was found absent.
            Ok(true) => self.shared.settle(next.sequence(), arrivals),
            Ok(false) => {}
            Err(e) => tracing::warn!("reading ahead after a peer hint stopped early: {e}"),
        }
        if next.sequence() == self.tail.sequence() {
            return;
        }
        if peer {
            self.shared.note_peer();
        }
        self.adopt(next, touched).await;
        self.tail_moved(writers, self.hint_arrived);
    }

    /// Moves the tail to `next`, read from the log ahead of any race, and rebuilds the
    /// front on it (as after a lost race, without the failed create), reporting how far the
    /// log got so the peer knows this store saw its slot.
    async fn adopt(&mut self, next: WorldState, touched: Touched) {
        self.tail = next.clone();
        self.shared.install(&next);
        self.shared.report(next.sequence());
        if let Some(front) = self.batches.pop_front() {
            self.requeue_later_batches();
            let rebuilt = self.rebuild(next, front.members, front.cap, touched).await;
            self.batches.push_front(rebuilt);
        }
    }

    /// A peek at the next name came back: a slot there is the turn it waited for, taken in
    /// as a read ahead would; an absent name or a failed read leaves the hint to bring it.
    async fn on_peeked(&mut self, read: Result<Option<EncodedSlot>>) {
        let slot = match read {
            Ok(Some(slot)) => slot,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("peeking at the next slot name failed: {e}");
                return;
            }
        };
        if self.creating.is_some() || slot.slot.first != self.tail.sequence() + 1 {
            return;
        }
        let mut next = self.tail.clone();
        if let Err(e) = next.apply_in_place(&slot) {
            tracing::warn!("a peeked slot does not apply: {e}");
            return;
        }
        self.shared.recent.publish(&slot);
        let mut touched = Touched::default();
        touched.add(&slot, self.shared.config.policy_path.as_ref());
        if slot.slot.store != self.shared.config.store {
            self.shared.note_peer();
        }
        self.adopt(next, touched).await;
        self.tail_moved([slot.slot.store], Instant::now());
    }

    /// Records that the tail moved onto slots `writers` wrote (oldest first), the newest
    /// landing about `landed`, and decides whose turn the next name is.
    fn tail_moved(&mut self, writers: impl IntoIterator<Item = StoreId>, landed: Instant) {
        for writer in writers {
            self.writers.push_back(writer);
            if self.writers.len() > ROTATION_SLOTS {
                self.writers.pop_front();
            }
        }
        self.tail_landed = landed;
        self.turn_until = None;
        if let Some(peek) = self.peek.take() {
            peek.abort();
        }
        self.decide_turn();
    }

    /// While hints flow and peers contend, contending stores take the log's names in a
    /// rotation: the stores that wrote its newest [`ROTATION_SLOTS`] slots, with this one,
    /// in store id order, each name going to the store after the one that wrote the slot
    /// before it. How many turns come before this store's: 0 when the next name is its
    /// turn, `None` when no rotation applies.
    fn turn_position(&self) -> Option<usize> {
        let contending = self
            .contended
            .is_some_and(|at| at.elapsed() <= self.shared.config.yield_window);
        if !(contending && self.shared.peer_active() && self.shared.hinted()) {
            return None;
        }
        let last = *self.writers.back()?;
        let me = self.shared.config.store;
        let mut rotation: Vec<StoreId> = self.writers.iter().copied().chain([me]).collect();
        rotation.sort_unstable();
        rotation.dedup();
        let n = rotation.len();
        if n < 2 {
            return None;
        }
        let owner = (rotation.binary_search(&last).ok()? + 1) % n;
        let mine = rotation.binary_search(&me).ok()?;
        Some((mine + n - owner) % n)
    }

    /// Holds the next create while the next name is another store's turn: for `position`
    /// turns of one slot read and create each (at 1.5 times this store's own latencies),
    /// counted from when the tail's slot landed, or until the tail moves. The store right
    /// after the owner peeks at the name just after the owner's create would land, so it
    /// has the owner's slot about when it lands instead of one read after its hint.
    fn decide_turn(&mut self) {
        let Some(position) = self.turn_position().filter(|p| *p > 0) else {
            self.turn_until = None;
            return;
        };
        let (create, read) = {
            let latencies = self.shared.latencies.lock().expect("latency lock poisoned");
            (latencies.create, latencies.read)
        };
        let turn = match (create, read) {
            (Some(create), Some(read)) => (create + read) * 3 / 2,
            _ => self.shared.config.handoff_wait,
        };
        let until = self.tail_landed + turn * position as u32;
        self.turn_until = Some(until);
        if position == 1
            && self.peek.is_none()
            && let (Some(create), Some(read)) = (create, read)
        {
            // The first read lands when the owner's create would if it started as the
            // tail's slot landed; later ones follow every half read until the turn ends.
            // A store that wrote none of the rotation's slots is not in its peers'
            // rotations: where their turns and its own collide, the first to have the
            // slot before wins, so it reads twice as often until its slot gets it in.
            let first = self.tail_landed + create.saturating_sub(read);
            let newcomer = !self.writers.contains(&self.shared.config.store);
            let every = (read / if newcomer { 4 } else { 2 }).max(Duration::from_millis(1));
            let store = self.shared.store.clone();
            let prefix = self.shared.config.prefix.clone();
            let sequence = self.tail.sequence() + 1;
            self.peek = Some(tokio::spawn(peek_slot(
                store, prefix, sequence, first, every, until,
            )));
        }
    }

    /// Returns the members of every batch left in the pipeline (the caller has taken the
    /// front) to the head of the queue in queue order, to be rebuilt on the new front.
    fn requeue_later_batches(&mut self) {
        let later: Vec<Pending> = self
            .batches
            .drain(..)
            .flat_map(|b| b.members.into_iter().map(|m| m.pending))
            .collect();
        for pending in later.into_iter().rev() {
            self.queue.push_front(pending);
        }
    }
}

/// The blob a member's version needs, if it is not inline.
fn blob_of(result: &Result1) -> Option<(Hash, Bytes)> {
    match result {
        Result1::Write { change, .. } => {
            let write = change.entry.write.as_ref()?;
            match (&write.inline, &change.version_bytes) {
                (None, Some(bytes)) => Some((write.hash, bytes.clone())),
                _ => None,
            }
        }
        Result1::Answer(_) => None,
    }
}

/// Whether a member's write creates a document (and so counts against the quota).
fn creates_document(result: &Result1) -> bool {
    matches!(result, Result1::Write { change, .. }
        if change.entry.write.as_ref().is_some_and(|w| w.previous.is_none()))
}

/// Whether no member of `batch` writes: its slot would be empty.
fn writes_nothing(batch: &Batch) -> bool {
    batch
        .members
        .iter()
        .all(|m| matches!(m.result, Result1::Answer(_)))
}

/// The paths a winning slot touched, for deciding which members to rebuild.
#[derive(Default)]
struct Touched {
    paths: Vec<DocPath>,
    policy: bool,
}

impl Touched {
    fn add(&mut self, slot: &EncodedSlot, policy: Option<&DocPath>) {
        for entry in &slot.slot.entries {
            self.policy |= policy == Some(&entry.path);
            self.paths.push(entry.path.clone());
        }
    }

    fn reaches(&self, member: &Member) -> bool {
        if self.policy && member.pending.request.precondition.is_some() {
            return true;
        }
        match &member.path {
            Some(path) => self.paths.iter().any(|t| t.overlaps(path)),
            None => false,
        }
    }
}

/// A version record for chaining members before the slot exists (its location is settled
/// when the slot is sealed).
fn provisional_record(change: &Change) -> VersionRecord {
    let write = change.entry.write.as_ref();
    VersionRecord {
        version: change.entry.current,
        hash: write.map_or(Hash([0; 32]), |w| w.hash),
        body_hash: change.entry.body_hash,
        modified: change.entry.modified,
        size: write.map_or(0, |w| w.size),
        location: Location::Blob,
    }
}

/// Answers every member of a confirmed batch (`first`: its slot's first sequence).
fn answer_batch(batch: Batch, first: Option<u64>) {
    let mut index = 0u64;
    for member in batch.members {
        let answer = match member.result {
            Result1::Write { change, summary } => {
                let sequence = first.map(|f| f + index);
                index += 1;
                Ok(Outcome {
                    doc: summary,
                    changed: true,
                    sequence,
                    prune: change.prune,
                })
            }
            Result1::Answer(answer) => answer,
        };
        let _ = member.pending.reply.send(answer);
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[derive(Clone, Copy)]
struct RetryPolicy {
    attempts: u32,
    base: Duration,
    cap: Duration,
    seed: u64,
}

impl RetryPolicy {
    fn pause(&self, attempt: u32, rng: &mut SmallRng) -> Duration {
        let step = self.base.saturating_mul(1 << attempt.min(6)).min(self.cap);
        let jitter = step.as_micros() as u64 / 2;
        step + Duration::from_micros(if jitter == 0 {
            0
        } else {
            rng.random_range(0..=jitter)
        })
    }
}

/// Races lost in a row after which a store takes itself to trail the log by more than a
/// slot and jumps to its end by listing. Under fair contention between three stores, losing
/// two in a row is common and a listing would only cost a turn.
const TRAILING_LOSSES: u32 = 4;

/// Observed latencies of this store's slot creates and slot reads (moving averages), for
/// timing reads behind creates.
#[derive(Default)]
struct Latencies {
    create: Option<Duration>,
    read: Option<Duration>,
}

impl Latencies {
    fn note(average: &mut Option<Duration>, sample: Duration) {
        *average = Some(match *average {
            None => sample,
            Some(old) => (old * 7 + sample) / 8,
        });
    }

    /// How long after starting a slot create to start reading the same name, so the read
    /// reaches the bucket just after the create would have: a peer's slot that beat it is
    /// then in hand about when the create's refusal would arrive, instead of one read later.
    fn read_behind(&self) -> Option<Duration> {
        let (create, read) = (self.create?, self.read?);
        Some(create.saturating_sub(read) + create / 10)
    }
}

/// How many of the log's newest slots name the stores in the rotation of turns: a store
/// that wrote none of them has stopped contending and is skipped.
const ROTATION_SLOTS: usize = 8;

/// How many sequences past its tail a peer hint may name for a store to read the slots by
/// name (a read each) rather than list the log.
const READ_AHEAD_BY_NAME: u64 = MAX_SLOT_ENTRIES as u64 * 4;

/// Applies the slots after `state` by name until it reaches `target` (or a name is absent).
/// Returns whether it found the log's end (an absent name); reaching `target` proves
/// nothing about later slots.
async fn read_up_to(
    store: &dyn BlobStore,
    prefix: &str,
    state: &mut WorldState,
    target: u64,
    observe: &mut impl FnMut(&EncodedSlot),
) -> Result<bool> {
    while state.sequence() < target {
        let Some(slot) = tip::read_slot(store, prefix, state.sequence() + 1).await? else {
            return Ok(true);
        };
        state.apply_in_place(&slot)?;
        observe(&slot);
    }
    Ok(false)
}

/// Reads slot name `sequence` from `first` on, a new read every `every` while reads
/// started before `until` find it absent: the first that finds the slot answers. `None`
/// when none did (or the last failed).
async fn peek_slot(
    store: Arc<dyn BlobStore>,
    prefix: String,
    sequence: u64,
    first: Instant,
    every: Duration,
    until: Instant,
) -> Result<Option<EncodedSlot>> {
    let mut reads = futures::stream::FuturesUnordered::new();
    let mut next = first;
    let mut last = Ok(None);
    loop {
        let more = next <= until;
        tokio::select! {
            biased;
            Some(read) = futures::StreamExt::next(&mut reads), if !reads.is_empty() => match read {
                Ok(Some(slot)) => return Ok(Some(slot)),
                other => last = other,
            },
            () = tokio::time::sleep_until(next), if more => {
                let (store, prefix) = (store.clone(), prefix.clone());
                reads.push(async move { tip::read_slot(store.as_ref(), &prefix, sequence).await });
                next += every;
            }
            else => return last,
        }
    }
}

/// One slot create: its name, bytes and how to pursue it.
struct SlotCreate {
    key: String,
    first: u64,
    bytes: Bytes,
    retry: RetryPolicy,
    /// When contending: start reading the name this long after the create starts.
    read_behind: Option<Duration>,
    latencies: Arc<Mutex<Latencies>>,
}

/// Creates a slot and decides the outcome. With a read behind the create, whichever
/// settles the name first decides: other bytes under the name mean the create cannot win
/// (names are create-if-absent and slots are never replaced), our bytes mean it did.
async fn create_slot(store: Arc<dyn BlobStore>, create: SlotCreate) -> CreateOutcome {
    let Some(offset) = create.read_behind else {
        return decide_create(store, &create).await;
    };
    let read = read_behind(store.clone(), &create, offset);
    let decide = decide_create(store.clone(), &create);
    tokio::pin!(read, decide);
    tokio::select! {
        biased;
        outcome = &mut decide => outcome,
        Some(outcome) = &mut read => outcome,
    }
}

/// Reads the name `offset` after a create started; `None` when that settles nothing.
async fn read_behind(
    store: Arc<dyn BlobStore>,
    create: &SlotCreate,
    offset: Duration,
) -> Option<CreateOutcome> {
    tokio::time::sleep(offset).await;
    let started = Instant::now();
    let object = store.get(&create.key).await.ok()?;
    Latencies::note(
        &mut create.latencies.lock().expect("latency lock poisoned").read,
        started.elapsed(),
    );
    if object.data == create.bytes {
        return Some(CreateOutcome::Won);
    }
    let winner = EncodedSlot::decode(&create.key, create.first, object.data).ok()?;
    Some(CreateOutcome::Lost(Box::new(winner)))
}

/// Creates a slot and decides the outcome, reading the name back whenever the create's
/// answer does not settle it.
async fn decide_create(store: Arc<dyn BlobStore>, create: &SlotCreate) -> CreateOutcome {
    let SlotCreate {
        key,
        first,
        bytes,
        retry,
        latencies,
        ..
    } = create;
    let (first, retry) = (*first, *retry);
    let note = |which: fn(&mut Latencies) -> &mut Option<Duration>, started: Instant| {
        let mut latencies = latencies.lock().expect("latency lock poisoned");
        Latencies::note(which(&mut latencies), started.elapsed());
    };
    let mut rng = SmallRng::seed_from_u64(retry.seed);
    let mut last_error = None;
    for attempt in 0..retry.attempts {
        if attempt > 0 {
            tokio::time::sleep(retry.pause(attempt - 1, &mut rng)).await;
        }
        let started = Instant::now();
        let created = store.create(key, bytes.clone()).await;
        if created
            .as_ref()
            .map_or_else(|e| e.is_precondition(), |_| true)
        {
            note(|l| &mut l.create, started);
        }
        match created {
            Ok(_) => return CreateOutcome::Won,
            // Every failure is read back: even one that looks definite may have come after
            // the create landed (an answer that could not be read, say).
            Err(e) => {
                let started = Instant::now();
                let read = store.get(key).await;
                if read.is_ok() {
                    note(|l| &mut l.read, started);
                }
                match read {
                    Ok(object) if object.data == *bytes => return CreateOutcome::Won,
                    Ok(object) => {
                        return match EncodedSlot::decode(key, first, object.data) {
                            Ok(winner) => CreateOutcome::Lost(Box::new(winner)),
                            Err(err) => CreateOutcome::Failed(err),
                        };
                    }
                    // Absent after a definite refusal: it did not land, and trying again
                    // would be refused the same way.
                    Err(read)
                        if read.is_not_found()
                            && !(e.is_precondition() || e.kind().is_retryable()) =>
                    {
                        return CreateOutcome::Failed(Error::storage(Op::Commit, e));
                    }
                    // Absent: the create did not land; retry the identical create. Any other
                    // failure leaves the outcome open: retry, and read back again.
                    Err(read) => last_error = Some(if read.is_not_found() { e } else { read }),
                }
            }
        }
    }
    let err = last_error.map_or_else(
        || {
            Error::new(
                Op::Commit,
                key.clone(),
                ErrorKind::Storage,
                "no attempt made",
            )
        },
        |e| Error::storage(Op::Commit, e),
    );
    CreateOutcome::Failed(Error::new(
        Op::Commit,
        key,
        ErrorKind::OutcomeUnknown,
        format!(
            "slot create undecided after {} attempts: {err}",
            retry.attempts
        ),
    ))
}

/// Creates a content-addressed blob. A create that did not plainly succeed is settled by
/// reading the key back: the blob is staged only when the object there holds exactly these
/// bytes (a refusal such as an invalid-request answer never counts as "already stored").
async fn create_blob(
    store: Arc<dyn BlobStore>,
    key: String,
    bytes: Bytes,
    retry: RetryPolicy,
) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(retry.seed);
    let mut last = None;
    for attempt in 0..retry.attempts {
        if attempt > 0 {
            tokio::time::sleep(retry.pause(attempt - 1, &mut rng)).await;
        }
        let refused = match store.create(&key, bytes.clone()).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        match store.get(&key).await {
            Ok(found) if found.data == bytes => return Ok(()),
            Ok(_) => {
                return Err(Error::integrity(
                    Op::Stage,
                    key,
                    "the object under this blob's hash holds other bytes",
                ));
            }
            // Absent: the create did not land. A precondition answer for a key that is
            // not there, or a retryable failure, is tried again; other refusals are final.
            Err(read) if read.is_not_found() => {
                if !(refused.is_precondition() || refused.kind().is_retryable()) {
                    return Err(Error::storage(Op::Stage, refused));
                }
                last = Some(refused);
            }
            Err(read) => last = Some(read),
        }
    }
    Err(last.map_or_else(
        || Error::new(Op::Stage, key, ErrorKind::Storage, "no attempt made"),
        |e| Error::storage(Op::Stage, e),
    ))
}

/// Reads a version's stored bytes (a range get inside its slot, or its blob) and checks
/// their size and hash against the record.
pub async fn read_version(
    store: &dyn BlobStore,
    prefix: &str,
    record: &VersionRecord,
) -> Result<Bytes> {
    let (key, bytes) = match record.location {
        Location::Inline { slot, offset } => {
            let key = keys::slot_key(prefix, slot);
            let bytes = store
                .get_range(&key, offset..offset + record.size)
                .await
                .map_err(|e| Error::storage(Op::Read, e))?;
            (key, bytes)
        }
        Location::Blob => {
            let key = keys::blob_key(prefix, &record.hash);
            let object = store
                .get(&key)
                .await
                .map_err(|e| Error::storage(Op::Read, e))?;
            (key, object.data)
        }
    };
    if bytes.len() as u64 != record.size || Hash::of(&bytes) != record.hash {
        return Err(Error::integrity(
            Op::Read,
            key,
            format!(
                "bytes of version {} do not match its record",
                record.version
            ),
        ));
    }
    Ok(bytes)
}
