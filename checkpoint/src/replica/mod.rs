//! A replica's world state resting on a checkpoint: cold start, applying slots, adopting a
//! peer's checkpoint, and installing one this replica wrote.
//!
//! Besides the [`WorldState`], a replica tracks what the next checkpoint needs and cannot
//! read back cheaply (`tracker`): the sequence of each document's last change since the base
//! tier's cut, the states at the newest base and run grid points (persistent snapshots, so
//! O(1) to keep) and each ended run's and epoch's documents. See `docs/FORMAT.md` for the
//! tiers.
//!
//! This file holds the replica, cold start and applying slots; `load` reads checkpoints,
//! roots and shards; `tracker` records what the next checkpoint needs; `adopt` moves the
//! base to a checkpoint written here or by a peer.
//!
//! A replica given its store's ring of recent slots ([`Replica::set_recent`]) applies the
//! slots it holds without a request and reads the bucket only for what it lacks, so a store's
//! compactor never downloads the slots its committer created or already read.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use quire_blob::BlobStore;
use quire_log::marker::{GENESIS_SEQUENCE, Marker, genesis_tip};
use quire_log::recent::RecentSlots;
use quire_log::slot::EncodedSlot;
use quire_log::{Clock, DocPath, Hash, Timestamp, WorldId, WorldState, keys as log_keys, tip};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::format::{Checkpoint, Root};
use crate::history::ReadAhead;
use crate::keys::{checkpoint_key, checkpoint_prefix};
use crate::objects::{get_retrying, retrying};
use crate::pace::UploadPace;

mod adopt;
mod load;
mod tracker;

pub use load::list_checkpoints;
use load::{epoch_cut, load_groups};
pub(crate) use load::{read_checkpoint, read_shards};
use tracker::Marking;
pub(crate) use tracker::Tracker;

/// How many shards cold start and adoption read at once, by default.
pub const DEFAULT_LOAD_WORKERS: usize = 32;
/// How many slots replay reads at once.
const REPLAY_READERS: usize = tip::REPLAY_READERS;

/// The checkpoint a replica's state rests on.
#[derive(Clone, Debug)]
pub struct Base {
    pub checkpoint: Checkpoint,
    pub root: Arc<Root>,
}

impl Base {
    pub fn sequence(&self) -> u64 {
        self.checkpoint.sequence
    }
}

/// Options for [`Replica::open`].
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// The world the caller expects; another world's marker is refused.
    pub world: Option<WorldId>,
    /// Load this checkpoint instead of the newest (e.g. 1: replay the whole log).
    pub checkpoint: Option<u64>,
    /// How many shards to read at once.
    pub workers: usize,
    pub clock: Arc<dyn Clock>,
    /// Where generations are not unique: how long a checkpoint's objects settle before it
    /// names them (see `objects`; [`crate::objects::SETTLE`] unless a test shortens it).
    pub settle: Duration,
    /// Whether, once it has written a checkpoint, the replica reads ahead the history
    /// blocks its next checkpoint will fold as each epoch ends (see `history::ReadAhead`).
    pub read_history_ahead: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            world: None,
            checkpoint: None,
            workers: DEFAULT_LOAD_WORKERS,
            clock: Arc::new(quire_log::SystemClock),
            settle: crate::objects::SETTLE,
            read_history_ahead: true,
        }
    }
}

/// A world state resting on a checkpoint, with what the next checkpoint needs.
#[derive(Debug)]
pub struct Replica {
    pub(crate) store: Arc<dyn BlobStore>,
    pub(crate) prefix: String,
    pub(crate) state: WorldState,
    pub(crate) base: Base,
    pub(crate) tracker: Tracker,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) workers: usize,
    pub(crate) settle: Duration,
    /// When the first slot after the base was applied.
    pending_since: Option<Timestamp>,
    /// Newer checkpoints cold start could not use (see [`Replica::open`]).
    skipped: Vec<u64>,
    /// Slots the store created or read, taken before the bucket (see [`Replica::catch_up`]).
    recent: Option<Arc<RecentSlots>>,
    /// How wide a checkpoint's uploads may run (see [`Replica::set_upload_pace`]).
    pub(crate) pace: Option<Arc<dyn UploadPace>>,
    /// Whether this replica reads ahead the history blocks of each epoch as it ends: only
    /// while it wrote the newest checkpoint it knows (a store deferring to a peer's
    /// checkpoints would read them for nothing).
    reads_ahead: bool,
    /// [`OpenOptions::read_history_ahead`].
    may_read_ahead: bool,
    pub(crate) read_ahead: Arc<ReadAhead>,
    /// The reads ahead in flight: aborted when the replica stops reading ahead or is dropped.
    reading_ahead: tokio::task::JoinSet<()>,
}

impl Replica {
    /// Cold start: reads the marker, finds the newest checkpoint (or the one asked for),
    /// loads its root and shards in parallel, builds the world state and replays every slot
    /// after it. No document body is read.
    ///
    /// A checkpoint that fails verification or is incomplete (an integrity error while
    /// loading it, checking its tip or replaying after it) costs only replay: the next older
    /// one is tried, down to the genesis checkpoint. The ones passed over are
    /// [`Replica::skipped`]. A checkpoint asked for by sequence is loaded or refused, never
    /// replaced by another.
    pub async fn open(
        store: Arc<dyn BlobStore>,
        prefix: &str,
        options: &OpenOptions,
    ) -> Result<Replica> {
        let op = Op::Load;
        let mkey = log_keys::marker_key(prefix);
        let marker = match get_retrying(&*store, &mkey).await {
            Ok(object) => {
                Marker::decode(&object.data).map_err(|why| Error::integrity(op, &mkey, why))?
            }
            Err(e) if e.is_not_found() => {
                return Err(Error::new(op, mkey, ErrorKind::NotFound, "no world marker"));
            }
            Err(e) => return Err(Error::storage(op, e)),
        };
        if let Some(expected) = options.world
            && expected != marker.world
        {
            return Err(Error::new(
                op,
                mkey,
                ErrorKind::Precondition,
                format!("the marker names world {}, not {expected}", marker.world),
            ));
        }
        let listed = list_checkpoints(&*store, prefix, op).await?;
        let candidates: Vec<u64> = match options.checkpoint {
            Some(wanted) => vec![
                listed
                    .iter()
                    .map(|(s, _)| *s)
                    .find(|s| *s == wanted)
                    .ok_or_else(|| {
                        Error::new(
                            op,
                            checkpoint_key(prefix, wanted),
                            ErrorKind::NotFound,
                            "no such checkpoint",
                        )
                    })?,
            ],
            None => listed.iter().rev().map(|(s, _)| *s).collect(),
        };
        if candidates.is_empty() {
            return Err(Error::integrity(
                op,
                checkpoint_prefix(prefix),
                "a world marker without a checkpoint",
            ));
        }
        let mut skipped = Vec::new();
        let mut failed = None;
        for sequence in candidates {
            match Replica::open_at(store.clone(), prefix, options, marker.world, sequence).await {
                Ok(mut replica) => {
                    replica.skipped = skipped;
                    return Ok(replica);
                }
                Err(e) if e.is_integrity() && options.checkpoint.is_none() => {
                    tracing::warn!(sequence, error = %e, "checkpoint unusable; trying an older one");
                    skipped.push(sequence);
                    failed = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        // Even the genesis checkpoint failed: the fault is in the log (or the genesis).
        Err(failed.expect("at least one candidate was tried"))
    }

    /// Cold start from checkpoint `sequence` of `world`.
    async fn open_at(
        store: Arc<dyn BlobStore>,
        prefix: &str,
        options: &OpenOptions,
        world: WorldId,
        sequence: u64,
    ) -> Result<Replica> {
        let op = Op::Load;
        let base = read_checkpoint(&*store, prefix, sequence, world, op).await?;
        let (docs, marks) = load_groups(&store, prefix, &base, options.workers).await?;
        // Schema 2 marks are each document's last change: those after the sealed cut are
        // the open epoch's. A schema-1 base seals nothing before itself.
        let (open_cut, epoch_changes) = match base.root.sealed {
            Some(sealed) => (
                sealed,
                marks
                    .iter()
                    .filter(|(_, changed)| *changed > sealed)
                    .cloned()
                    .collect(),
            ),
            None => {
                // A schema-1 base: its documents' blocks stand alone. The epoch holding it
                // is open from its grid point's cut, found in the log; every document marked
                // after that cut is the open epoch's (marks are tier cuts there).
                let cut = epoch_cut(&store, prefix, &base, op).await?;
                (
                    cut,
                    marks
                        .iter()
                        .filter(|(_, changed)| *changed > cut)
                        .cloned()
                        .collect(),
                )
            }
        };
        // Documents changed after the newest run's (or middle tier's) cut lie in the run
        // the next run grid point ends.
        let run_cut = base.root.tiers[base.root.tiers.len() - 2].cut;
        let run_changes: Vec<(DocPath, u64)> = (marks.iter())
            .filter(|(_, changed)| *changed > run_cut)
            .cloned()
            .collect();
        // The tracker's map builds beside the world state, on a scoped thread rather than
        // the blocking pool: the open takes as long either way, and no other task runs
        // while it does, so a simulation's schedule does not depend on which finishes first.
        let tip = base.checkpoint.tip;
        let (state, marks) = std::thread::scope(|scope| {
            let marks = scope.spawn(move || {
                let mut marks = marks;
                marks.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                quire_log::state::ordmap_from_sorted(marks)
            });
            let state = WorldState::restore_shared(world, sequence, tip, docs);
            (state, marks.join())
        });
        let state = state.map_err(|e| Error::from_log(op, e))?;
        let tracker = Tracker {
            run_changes,
            changes: marks.map_err(|_| {
                Error::new(op, "", ErrorKind::Storage, "the tracker's loader panicked")
            })?,
            open_cut,
            base_sealed: open_cut,
            epoch_changes,
            ..Tracker::default()
        };
        let mut replica = Replica {
            store,
            prefix: prefix.to_owned(),
            state,
            base,
            tracker,
            clock: options.clock.clone(),
            workers: options.workers,
            settle: options.settle,
            pending_since: None,
            skipped: Vec::new(),
            recent: None,
            pace: None,
            reads_ahead: false,
            may_read_ahead: options.read_history_ahead,
            read_ahead: Arc::default(),
            reading_ahead: tokio::task::JoinSet::new(),
        };
        let applied = replica.catch_up().await?;
        if applied == 0 && sequence > GENESIS_SEQUENCE {
            replica
                .verify_tip(sequence, replica.base.checkpoint.tip, op)
                .await?;
        }
        Ok(replica)
    }

    /// The checkpoints cold start passed over because they failed verification or were
    /// incomplete, newest first.
    pub fn skipped(&self) -> &[u64] {
        &self.skipped
    }

    /// Checks that the slot ending at `sequence` hashes to `tip`.
    async fn verify_tip(&self, sequence: u64, tip_hash: Hash, op: Op) -> Result<()> {
        let key = checkpoint_key(&self.prefix, sequence);
        if sequence == GENESIS_SEQUENCE {
            return if tip_hash == genesis_tip(self.state.world()) {
                Ok(())
            } else {
                Err(Error::integrity(
                    op,
                    key,
                    "checkpoint zero names the wrong tip",
                ))
            };
        }
        if let Some((_, hash)) = self
            .tracker
            .slots
            .iter()
            .find(|(last, _)| *last == sequence)
        {
            return if *hash == tip_hash {
                Ok(())
            } else {
                Err(Error::integrity(
                    op,
                    key,
                    "checkpoint tip differs from the slot chain",
                ))
            };
        }
        let slot = retrying(
            || tip::find_slot_holding(&*self.store, &self.prefix, sequence),
            quire_log::Error::blob_kind,
        )
        .await
        .map_err(|e| Error::from_log(op, e))?;
        match slot {
            Some(slot) if slot.slot.last() == sequence && slot.hash == tip_hash => Ok(()),
            Some(_) => Err(Error::integrity(
                op,
                key,
                "checkpoint tip differs from the slot chain",
            )),
            None => Err(Error::integrity(
                op,
                key,
                "no slot ends at the checkpoint's sequence",
            )),
        }
    }

    pub fn state(&self) -> &WorldState {
        &self.state
    }

    pub fn base(&self) -> &Base {
        &self.base
    }

    pub fn store(&self) -> &Arc<dyn BlobStore> {
        &self.store
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Slots applied since the checkpoint the state rests on.
    pub fn slots_since_base(&self) -> u64 {
        self.tracker.slots.len() as u64
    }

    /// When the first slot after the base was applied, if any was.
    pub fn pending_since(&self) -> Option<Timestamp> {
        self.pending_since
    }

    /// Applies a slot (it must follow the state) in place; a refused slot leaves the state
    /// and what the next checkpoint needs as they were.
    pub fn apply(&mut self, slot: &EncodedSlot) -> Result<()> {
        let before = self.state.sequence();
        self.state
            .apply_in_place(slot)
            .map_err(|e| Error::from_log(Op::Replay, e))?;
        self.track(slot, before, None);
        Ok(())
    }

    /// [`Replica::apply`], collecting the tracker's change marks in `pending` rather than
    /// inserting them one by one (the caller hands them to [`Replica::mark_changes`]).
    fn apply_collecting(
        &mut self,
        slot: &EncodedSlot,
        pending: &mut Vec<(DocPath, u64)>,
    ) -> Result<()> {
        let before = self.state.sequence();
        self.state
            .apply_in_place(slot)
            .map_err(|e| Error::from_log(Op::Replay, e))?;
        self.track(slot, before, Some(pending));
        Ok(())
    }

    /// Takes `after`, the state a committer computed by applying `slot` to this replica's
    /// state, recording what the next checkpoint needs.
    pub fn observe(&mut self, slot: &EncodedSlot, after: WorldState) {
        let before = self.state.sequence();
        self.state = after;
        self.track(slot, before, None);
    }

    /// Waits until the history blocks read ahead for the epochs ended so far are in (for
    /// tests and benchmarks: a checkpoint never waits for them).
    pub async fn read_ahead_done(&mut self) {
        while self.reading_ahead.join_next().await.is_some() {}
    }

    /// Takes slots from `recent` (the ring its store's committer publishes into) before
    /// reading the bucket: see [`Replica::catch_up`].
    pub fn set_recent(&mut self, recent: Arc<RecentSlots>) {
        self.recent = Some(recent);
    }

    /// Lets `pace` set how many of a checkpoint's uploads run at once (at most the
    /// replica's workers): a store's committer slows them while its creates slow down.
    pub fn set_upload_pace(&mut self, pace: Arc<dyn UploadPace>) {
        self.pace = Some(pace);
    }

    /// Brings the state to the log's tip as far as the store knows it. Without a ring of
    /// recent slots ([`Replica::set_recent`]) that is the bucket's tip: probe the next slot
    /// name and replay every later slot. With one, the slots it holds after the state are
    /// applied from memory, and once the state reaches its newest slot nothing is read: the
    /// replica follows what its store created and read. Where the ring lacks the next slot
    /// (it never held it, or lost it to its bound) the bucket is read as without a ring,
    /// each listed slot the ring holds taken from it. Returns how many slots were applied.
    pub async fn catch_up(&mut self) -> Result<usize> {
        let from_memory = self.apply_recent().await?;
        let known = self.recent.as_ref().and_then(|r| r.newest());
        if known.is_some_and(|newest| newest <= self.state.sequence()) {
            return Ok(from_memory);
        }
        Ok(from_memory + self.catch_up_bucket().await?)
    }

    /// [`Replica::catch_up`] to the bucket's tip whatever the ring knows: a peer's
    /// checkpoint may be ahead of what this store has seen.
    async fn catch_up_tip(&mut self) -> Result<usize> {
        let from_memory = self.apply_recent().await?;
        Ok(from_memory + self.catch_up_bucket().await?)
    }

    /// Applies the ring's slots that follow the state, in order, without reading anything.
    /// Returns how many applied. It yields to the runtime after each slot: a store's
    /// compactor shares the runtime with the writers its committer answers, and one slot's
    /// apply is a fraction of a millisecond they need not wait behind.
    pub async fn apply_recent(&mut self) -> Result<usize> {
        let Some(recent) = self.recent.clone() else {
            return Ok(0);
        };
        let mut marking = Marking {
            replica: self,
            pending: Vec::new(),
        };
        let Marking { replica, pending } = &mut marking;
        let mut applied = 0;
        while let Some(slot) = recent.slot(replica.state.sequence() + 1) {
            replica.apply_collecting(&slot, pending)?;
            applied += 1;
            tokio::task::yield_now().await;
        }
        Ok(applied)
    }

    /// Probes the next slot name in the bucket and replays every later slot.
    async fn catch_up_bucket(&mut self) -> Result<usize> {
        let op = Op::Replay;
        let probe = self.state.sequence() + 1;
        let next = retrying(
            || tip::read_slot(&*self.store, &self.prefix, probe),
            quire_log::Error::blob_kind,
        )
        .await
        .map_err(|e| Error::from_log(op, e))?;
        let Some(next) = next else {
            return Ok(0);
        };
        self.apply(&next)?;
        let mut marking = Marking {
            replica: self,
            pending: Vec::new(),
        };
        let Marking { replica, pending } = &mut marking;
        Ok(1 + replica.replay_after_probe(pending).await?)
    }

    /// The rest of [`Replica::catch_up_bucket`] once the probed slot applied: lists the log
    /// after the state and applies every slot listed (read, unless the ring holds it),
    /// change marks collected in `pending`.
    async fn replay_after_probe(&mut self, pending: &mut Vec<(DocPath, u64)>) -> Result<usize> {
        let op = Op::Replay;
        let log = log_keys::log_prefix(&self.prefix);
        let after = log_keys::slot_key(&self.prefix, self.state.sequence());
        let listed = retrying(
            || quire_blob::list_all(&*self.store, &log, &after),
            |e: &quire_blob::Error| Some(e.kind()),
        )
        .await
        .map_err(|e| Error::storage(op, e))?;
        let mut sequences = Vec::with_capacity(listed.len());
        for attrs in &listed {
            let sequence = log_keys::parse_slot_key(&self.prefix, &attrs.key).ok_or_else(|| {
                Error::integrity(op, attrs.key.clone(), "object under log/ is not a slot")
            })?;
            sequences.push(sequence);
        }
        let store = self.store.clone();
        let prefix = self.prefix.clone();
        let recent = self.recent.clone();
        let mut reads = futures::stream::iter(sequences)
            .map(|sequence| {
                let store = store.clone();
                let prefix = prefix.clone();
                let held = recent.as_ref().and_then(|r| r.slot(sequence));
                // Spawned, so slots decode on the other workers while this one applies.
                let read = tokio::spawn(async move {
                    if let Some(slot) = held {
                        return Ok(slot);
                    }
                    let slot = retrying(
                        || tip::read_slot(&*store, &prefix, sequence),
                        quire_log::Error::blob_kind,
                    )
                    .await
                    .map_err(|e| Error::from_log(op, e))?;
                    slot.map(Arc::new).ok_or_else(|| {
                        Error::integrity(
                            op,
                            log_keys::slot_key(&prefix, sequence),
                            "listed slot is missing",
                        )
                    })
                });
                async move {
                    read.await.map_err(|e| {
                        Error::new(
                            op,
                            "",
                            ErrorKind::Storage,
                            format!("slot reader failed: {e}"),
                        )
                    })?
                }
            })
            .buffered(REPLAY_READERS);
        let mut applied = 0;
        while let Some(slot) = reads.try_next().await? {
            if slot.slot.first != self.state.sequence() + 1 {
                return Err(Error::integrity(
                    op,
                    log_keys::slot_key(&self.prefix, slot.slot.first),
                    format!("gap in the log after sequence {}", self.state.sequence()),
                ));
            }
            self.apply_collecting(&slot, pending)?;
            applied += 1;
        }
        Ok(applied)
    }

    /// The newest checkpoint listed, with its attributes.
    pub async fn newest_checkpoint(&self) -> Result<Option<(u64, quire_blob::Attributes)>> {
        Ok(list_checkpoints(&*self.store, &self.prefix, Op::Adopt)
            .await?
            .pop())
    }

    /// How long ago (by the replica's clock) the first slot after the base was applied.
    pub fn pending_for(&self) -> Option<Duration> {
        let since = self.pending_since?;
        Some(Duration::from_secs(
            self.clock.now().0.saturating_sub(since.0),
        ))
    }
}
