//! A replica's world state resting on a checkpoint: cold start, applying slots, adopting a
//! peer's checkpoint, and installing one this replica wrote.
//!
//! Besides the [`WorldState`], a replica tracks what the next checkpoint needs and cannot
//! read back cheaply: the sequence of each document's last change since the base tier's cut,
//! and the state at each tier grid point crossed since the checkpoint it rests on (a
//! persistent snapshot, so O(1) to keep). See `docs/FORMAT.md` for the tiers.
//!
//! A replica given its store's ring of recent slots ([`Replica::set_recent`]) applies the
//! slots it holds without a request and reads the bucket only for what it lacks, so a store's
//! compactor never downloads the slots its committer created or already read.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use imbl::OrdMap;
use quire_blob::BlobStore;
use quire_log::marker::{GENESIS_SEQUENCE, Marker, genesis_tip};
use quire_log::model::HistoryBlockRef;
use quire_log::recent::RecentSlots;
use quire_log::slot::EncodedSlot;
use quire_log::{
    Clock, DocPath, DocState, Hash, Timestamp, WorldId, WorldState, keys as log_keys, tip,
};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::format::{Checkpoint, Root, decode_shard, epoch_width, grid, path_hash, shard_of};
use crate::history::ReadAhead;
use crate::keys::{checkpoint_key, checkpoint_prefix, parse_checkpoint_key, root_key, shard_key};
use crate::objects::{get_retrying, read_verified, retrying};

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

/// The state at a tier's grid point, kept until a checkpoint holds that tier.
#[derive(Clone, Debug)]
pub(crate) struct Cut {
    pub grid: u64,
    pub state: WorldState,
    pub changes: OrdMap<DocPath, u64>,
}

/// What the next checkpoint needs to know about the log since the base.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tracker {
    /// Per document changed after the base tier's cut: the last sequence of the slot that
    /// last changed it. Documents loaded from an upper tier carry that tier's cut instead,
    /// which classifies them the same way against every later grid point.
    pub changes: OrdMap<DocPath, u64>,
    /// The state at the newest grid point of the base width crossed but not yet held by a
    /// checkpoint.
    pub base_cut: Option<Cut>,
    /// The state at the newest grid point of the run width crossed but not yet held by a
    /// checkpoint: a schema-2 checkpoint's middle tier.
    pub middle_cut: Option<Cut>,
    /// The runs ended after the newest base grid point and not yet held by a checkpoint,
    /// oldest first.
    pub runs: Vec<Run>,
    /// Documents changed after the newest run grid point's cut, each with the sequence of
    /// the change (a path repeats when it changed again).
    pub run_changes: Vec<(DocPath, u64)>,
    /// Slots applied after the base: their last sequence and hash.
    pub slots: VecDeque<(u64, Hash)>,
    /// The cut of the newest history-epoch grid point the state has reached: changes after
    /// it are in the open epoch.
    pub open_cut: u64,
    /// The base's sealed cut: documents whose last change is at or before it have their
    /// history where the base names it.
    pub base_sealed: u64,
    /// Documents changed after `open_cut`, each with the sequence of the change (a path
    /// repeats when it changed again).
    pub epoch_changes: Vec<(DocPath, u64)>,
    /// Epochs ended after the base's sealed cut, oldest first: their packs are the next
    /// checkpoint's to write.
    pub sealed: Vec<Sealed>,
    /// The state at `open_cut`, when this replica crossed it after its base: a checkpoint
    /// there has no open epoch (see [`Replica::prepare_sealed`]).
    pub sealed_state: Option<WorldState>,
}

/// A run that ended: the documents whose last change falls after the cut of the run grid
/// point before it, as they stood at the cut of its own, in path order. Only these are
/// kept, not the state: a replica that writes no checkpoint for a base period keeps up to
/// [`crate::format::MAX_RUNS`] of them.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    pub grid: u64,
    pub cut: u64,
    pub docs: Vec<(Arc<DocState>, u64)>,
}

/// A history epoch that ended: the documents whose last change falls in it, as they stood
/// at its cut, in path order.
#[derive(Clone, Debug)]
pub(crate) struct Sealed {
    pub cut: u64,
    pub docs: Vec<(Arc<DocState>, u64)>,
}

/// Change marks collected while a replica replays, inserted into its tracker when the
/// replay ends however it ends: finished, failed part way, or dropped part way.
struct Marking<'a> {
    replica: &'a mut Replica,
    pending: Vec<(DocPath, u64)>,
}

impl Drop for Marking<'_> {
    fn drop(&mut self) {
        self.replica.mark_changes(&mut self.pending);
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

/// Lists every checkpoint sequence under `prefix`, oldest first, with its attributes. A key
/// under `checkpoints/` that is not a checkpoint name is an integrity error.
pub async fn list_checkpoints(
    store: &dyn BlobStore,
    prefix: &str,
    op: Op,
) -> Result<Vec<(u64, quire_blob::Attributes)>> {
    let under = checkpoint_prefix(prefix);
    let listed = retrying(
        || quire_blob::list_all(store, &under, ""),
        |e: &quire_blob::Error| Some(e.kind()),
    )
    .await
    .map_err(|e| Error::storage(op, e))?;
    listed
        .into_iter()
        .map(|attrs| match parse_checkpoint_key(prefix, &attrs.key) {
            Some(sequence) => Ok((sequence, attrs)),
            None => Err(Error::integrity(
                op,
                attrs.key.clone(),
                "object under checkpoints/ is not a checkpoint",
            )),
        })
        .collect()
}

/// Reads and decodes checkpoint `sequence` and its root.
pub(crate) async fn read_checkpoint(
    store: &dyn BlobStore,
    prefix: &str,
    sequence: u64,
    world: WorldId,
    op: Op,
) -> Result<Base> {
    let key = checkpoint_key(prefix, sequence);
    let object = get_retrying(store, &key).await.map_err(|e| {
        if e.is_not_found() {
            Error::integrity(op, &key, "listed checkpoint is missing")
        } else {
            Error::storage(op, e)
        }
    })?;
    let checkpoint = Checkpoint::decode(&key, sequence, &object.data)?;
    if checkpoint.world != world {
        return Err(Error::integrity(op, key, "checkpoint of another world"));
    }
    if sequence == GENESIS_SEQUENCE
        && (checkpoint.tip != genesis_tip(world) || checkpoint.documents != 0)
    {
        return Err(Error::integrity(
            op,
            key,
            "checkpoint zero is not the genesis",
        ));
    }
    let rkey = root_key(prefix, &checkpoint.root);
    let bytes = read_verified(store, &rkey, &checkpoint.root, op).await?;
    let root = Root::decode(&rkey, &bytes, &checkpoint)?;
    Ok(Base {
        checkpoint,
        root: Arc::new(root),
    })
}

/// The documents `changes` names (in any order, a path repeating when it changed again),
/// each as `state` holds it with its last change, in path order.
fn latest_docs(state: &WorldState, mut changes: Vec<(DocPath, u64)>) -> Vec<(Arc<DocState>, u64)> {
    changes.sort_unstable();
    changes.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            earlier.1 = earlier.1.max(later.1);
            true
        } else {
            false
        }
    });
    changes
        .into_iter()
        .filter_map(|(path, changed)| state.doc(&path).map(|d| (d.clone(), changed)))
        .collect()
}

/// The documents of one shard (each with its last change), with the index of its tier.
pub(crate) type TierDocs = (usize, Vec<(DocState, u64)>);

/// Reads the shards `refs` names (tier, index, hash) with `workers` at once, decoding on the
/// runtime's worker threads.
pub(crate) async fn read_shards(
    store: &Arc<dyn BlobStore>,
    prefix: &str,
    root: &Root,
    sequence: u64,
    refs: Vec<(usize, u32, Hash)>,
    workers: usize,
    op: Op,
) -> Result<Vec<TierDocs>> {
    futures::stream::iter(refs)
        .map(|(tier, index, hash)| {
            let store = store.clone();
            let key = shard_key(prefix, &hash);
            let bits = root.tiers[tier].bits;
            let schema = root.shard_schema();
            tokio::spawn(async move {
                let bytes = read_verified(&*store, &key, &hash, op).await?;
                let docs = decode_shard(&key, &bytes, schema, bits, index, sequence)?;
                Ok::<_, Error>((tier, docs))
            })
        })
        .buffer_unordered(workers.max(1))
        .map(|joined| {
            joined.map_err(|e| {
                Error::new(
                    op,
                    "",
                    ErrorKind::Storage,
                    format!("shard reader failed: {e}"),
                )
            })?
        })
        .try_collect()
        .await
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

    /// Inserts collected change marks into the tracker. In path order, each insert finds
    /// the map's nodes the one before it just walked still in cache, where marks in log
    /// order would each walk a cold path; for a path marked twice the later mark wins.
    fn mark_changes(&mut self, pending: &mut Vec<(DocPath, u64)>) {
        pending.sort_unstable();
        for (path, last) in pending.drain(..) {
            self.tracker.changes.insert(path, last);
        }
    }

    /// Takes `after`, the state a committer computed by applying `slot` to this replica's
    /// state, recording what the next checkpoint needs.
    pub fn observe(&mut self, slot: &EncodedSlot, after: WorldState) {
        let before = self.state.sequence();
        self.state = after;
        self.track(slot, before, None);
    }

    /// Records what the next checkpoint needs of `slot`, just applied to the state (which
    /// was at `before`). Change marks go into `pending` when given, else into the tracker.
    fn track(
        &mut self,
        slot: &EncodedSlot,
        before: u64,
        pending: Option<&mut Vec<(DocPath, u64)>>,
    ) {
        let last = slot.slot.last();
        self.tracker
            .epoch_changes
            .extend(slot.slot.entries.iter().map(|e| (e.path.clone(), last)));
        self.tracker
            .run_changes
            .extend(slot.slot.entries.iter().map(|e| (e.path.clone(), last)));
        let marks = slot.slot.entries.iter().map(|e| (e.path.clone(), last));
        let pending = match pending {
            Some(pending) => {
                pending.extend(marks);
                Some(pending)
            }
            None => {
                for (path, last) in marks {
                    self.tracker.changes.insert(path, last);
                }
                None
            }
        };
        let widths = self.base.root.widths;
        let epoch = epoch_width(&widths);
        if grid(epoch, last) > grid(epoch, before) {
            self.seal_epoch(last);
        }
        let [base_width, run_width] = widths;
        let (from, to) = (grid(run_width, before), grid(run_width, last));
        if to > from {
            if let Some(pending) = pending {
                self.mark_changes(pending);
            }
            let base_grid = grid(base_width, last);
            let cut = Cut {
                grid: to,
                state: self.state.clone(),
                changes: self.tracker.changes.clone(),
            };
            if base_grid > grid(base_width, before) {
                self.tracker.base_cut = Some(Cut {
                    grid: base_grid,
                    ..cut.clone()
                });
                // Runs start again after the base.
                self.tracker.runs.clear();
            }
            self.tracker.middle_cut = Some(cut);
            // A slot holding several grid points is the cut of each: the documents lie in
            // the window the first one ends (the base's, when that is a base grid point),
            // and the others are empty.
            let mut docs = latest_docs(&self.state, std::mem::take(&mut self.tracker.run_changes));
            for k in from / run_width + 1..=to / run_width {
                let docs = std::mem::take(&mut docs);
                if k * run_width > base_grid {
                    self.tracker.runs.push(Run {
                        grid: k * run_width,
                        cut: last,
                        docs,
                    });
                }
            }
        }
        self.tracker.slots.push_back((last, slot.hash));
        if self.pending_since.is_none() {
            self.pending_since = Some(self.clock.now());
        }
    }

    /// Ends the open history epoch at `cut` (the state's sequence, the end of the slot
    /// holding the epoch's grid point): keeps each document changed in it as it stands now.
    fn seal_epoch(&mut self, cut: u64) {
        let changes = std::mem::take(&mut self.tracker.epoch_changes);
        let docs = latest_docs(&self.state, changes);
        if self.reads_ahead
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let ahead = self.read_ahead.clone();
            let folded = docs.iter().map(|(d, _)| d.clone()).collect();
            let read = ahead.read(self.store.clone(), self.prefix.clone(), cut, folded);
            while self.reading_ahead.try_join_next().is_some() {}
            self.reading_ahead.spawn_on(read, &runtime);
        }
        self.tracker.sealed.push(Sealed { cut, docs });
        self.tracker.open_cut = cut;
        self.tracker.sealed_state = Some(self.state.clone());
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

    /// Brings the state to the log's tip as far as the store knows it. Without a ring of
    /// recent slots ([`Replica::set_recent`]) that is the bucket's tip: probe the next slot
    /// name and replay every later slot. With one, the slots it holds after the state are
    /// applied from memory, and once the state reaches its newest slot nothing is read: the
    /// replica follows what its store created and read. Where the ring lacks the next slot
    /// (it never held it, or lost it to its bound) the bucket is read as without a ring,
    /// each listed slot the ring holds taken from it. Returns how many slots were applied.
    pub async fn catch_up(&mut self) -> Result<usize> {
        let from_memory = self.apply_recent()?;
        let known = self.recent.as_ref().and_then(|r| r.newest());
        if known.is_some_and(|newest| newest <= self.state.sequence()) {
            return Ok(from_memory);
        }
        Ok(from_memory + self.catch_up_bucket().await?)
    }

    /// [`Replica::catch_up`] to the bucket's tip whatever the ring knows: a peer's
    /// checkpoint may be ahead of what this store has seen.
    async fn catch_up_tip(&mut self) -> Result<usize> {
        let from_memory = self.apply_recent()?;
        Ok(from_memory + self.catch_up_bucket().await?)
    }

    /// Applies the ring's slots that follow the state, in order, without reading anything.
    /// Returns how many applied.
    pub fn apply_recent(&mut self) -> Result<usize> {
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

    /// Rests the state on `written`, a checkpoint this replica (or a job prepared from it)
    /// wrote: folds the documents it holds into their history blocks.
    pub fn install(&mut self, written: crate::write::Written) -> Result<()> {
        if written.base.sequence() <= self.base.sequence() {
            return Ok(());
        }
        for (path, history, through) in &written.folded {
            self.fold(path, history.clone(), *through, Op::Write)?;
        }
        self.rest_on(written.base);
        self.reads_ahead = self.may_read_ahead;
        Ok(())
    }

    fn fold(
        &mut self,
        path: &DocPath,
        history: Arc<[HistoryBlockRef]>,
        through: u64,
        op: Op,
    ) -> Result<()> {
        let Some(doc) = self.state.doc(path) else {
            return Err(Error::integrity(
                op,
                path.as_str(),
                "checkpoint holds a document the log does not",
            ));
        };
        let covered = doc.history.last().map_or(0, |r| r.last);
        // The same versions under other references: a sealed epoch moved their block into
        // its pack.
        let moved = through == covered && doc.history != history;
        if (through <= covered && !moved) || through > doc.current {
            return Ok(());
        }
        self.state
            .fold_history(path, history, through)
            .map_err(|e| Error::from_log(op, e))
    }

    fn rest_on(&mut self, base: Base) {
        let old_base_cut = self.base.root.tiers[0].cut;
        let tracker = &mut self.tracker;
        if (tracker.base_cut.as_ref()).is_some_and(|c| c.grid <= base.root.tiers[0].grid) {
            tracker.base_cut = None;
        }
        // The highest tier below the top: the newest run (or the base), or the middle tier.
        let held = base.root.tiers[base.root.tiers.len() - 2].grid;
        if (tracker.middle_cut.as_ref()).is_some_and(|c| c.grid <= held) {
            tracker.middle_cut = None;
        }
        tracker.runs.retain(|r| r.grid > held);
        let base_cut = base.root.tiers[0].cut;
        if base_cut > old_base_cut {
            self.tracker.changes = self
                .tracker
                .changes
                .iter()
                .filter(|(_, changed)| **changed > base_cut)
                .map(|(path, changed)| (path.clone(), *changed))
                .collect();
        }
        // Epochs the base sealed are written; a schema-1 base holds every change before it
        // in blocks of its own, so the open epoch restarts after it.
        if let Some(sealed) = base.root.sealed {
            self.tracker.sealed.retain(|epoch| epoch.cut > sealed);
            self.tracker.base_sealed = sealed;
            self.read_ahead.forget_through(sealed);
        }
        while self
            .tracker
            .slots
            .front()
            .is_some_and(|(last, _)| *last <= base.sequence())
        {
            self.tracker.slots.pop_front();
        }
        if (self.tracker.sealed_state.as_ref()).is_some_and(|s| s.sequence() <= base.sequence()) {
            self.tracker.sealed_state = None;
        }
        // Slots after a checkpoint behind the state (at an epoch cut) stay pending, counted
        // from now: the next checkpoint is due a full age later, not at once.
        self.pending_since = match self.tracker.slots.is_empty() {
            true => None,
            false => Some(self.clock.now()),
        };
        self.base = base;
    }

    /// Adopts checkpoint `sequence` written by a peer: catches up to it if needed, checks it
    /// against the slot chain, reads only the shards whose references differ from the base's
    /// and folds the documents they hold. Returns whether the base moved.
    pub async fn adopt(&mut self, sequence: u64) -> Result<bool> {
        let op = Op::Adopt;
        if sequence <= self.base.sequence() {
            return Ok(false);
        }
        if self.state.sequence() < sequence {
            self.catch_up_tip().await?;
        }
        let key = checkpoint_key(&self.prefix, sequence);
        if self.state.sequence() < sequence {
            return Err(Error::integrity(op, key, "checkpoint ahead of the log"));
        }
        let base =
            read_checkpoint(&*self.store, &self.prefix, sequence, self.state.world(), op).await?;
        if base.root.sealed.is_none() && self.base.root.sealed.is_some() {
            return Err(Error::integrity(
                op,
                key,
                "a schema-1 checkpoint after this format's: written by an older version",
            ));
        }
        if base.root.widths != self.base.root.widths {
            return Err(Error::integrity(
                op,
                key,
                "checkpoint changes the world's tier widths",
            ));
        }
        self.verify_tip(sequence, base.checkpoint.tip, op).await?;
        // A shard the base names anywhere holds nothing the state lacks: the same bytes
        // were loaded or adopted into it (a run keeps its shards as the base named them).
        let held: std::collections::HashSet<Hash> = self
            .base
            .root
            .tiers
            .iter()
            .flat_map(|t| t.shards.iter().flatten().copied())
            .collect();
        let mut changed = Vec::new();
        for (j, tier) in base.root.tiers.iter().enumerate() {
            for (i, hash) in tier.shards.iter().enumerate() {
                let Some(hash) = hash else { continue };
                if held.contains(hash) {
                    continue;
                }
                changed.push((j, i as u32, *hash));
            }
        }
        let loaded = read_shards(
            &self.store,
            &self.prefix,
            &base.root,
            sequence,
            changed,
            self.workers,
            op,
        )
        .await?;
        let mut newest: HashMap<DocPath, DocState> = HashMap::new();
        for (_, docs) in loaded {
            for (doc, _) in docs {
                match newest.get(&doc.path) {
                    Some(have) if have.current >= doc.current => {}
                    _ => {
                        newest.insert(doc.path.clone(), doc);
                    }
                }
            }
        }
        let mut checked = Vec::with_capacity(newest.len());
        for (path, doc) in newest {
            let Some(ours) = self.state.doc(&path) else {
                return Err(Error::integrity(
                    op,
                    path.as_str(),
                    "checkpoint holds a document the log does not",
                ));
            };
            if doc.current > ours.current {
                return Err(Error::integrity(
                    op,
                    path.as_str(),
                    "checkpoint is ahead of the log",
                ));
            }
            let ours_record = if ours.current == doc.current {
                Some(&ours.head)
            } else {
                ours.recent_version(doc.current)
            };
            if ours_record.is_some_and(|r| r.hash != doc.head.hash) {
                return Err(Error::integrity(
                    op,
                    path.as_str(),
                    "checkpoint disagrees with the log",
                ));
            }
            checked.push((path, doc.history, doc.current));
        }
        // Folded only once every document checked: a refused checkpoint leaves the state as
        // it was, so the replica can keep its base and write past it.
        for (path, history, current) in checked {
            self.fold(&path, history, current, op)?;
        }
        self.rest_on(base);
        // A peer writes the checkpoints now.
        self.reads_ahead = false;
        self.reading_ahead.abort_all();
        self.read_ahead.clear();
        Ok(true)
    }

    /// How long ago (by the replica's clock) the first slot after the base was applied.
    pub fn pending_for(&self) -> Option<Duration> {
        let since = self.pending_since?;
        Some(Duration::from_secs(
            self.clock.now().0.saturating_sub(since.0),
        ))
    }
}

/// The cut of the history-epoch grid point at or before a schema-1 base: the end of the
/// slot holding it, read from the log (1 at or before genesis).
async fn epoch_cut(store: &Arc<dyn BlobStore>, prefix: &str, base: &Base, op: Op) -> Result<u64> {
    let point = grid(epoch_width(&base.root.widths), base.sequence());
    if point <= GENESIS_SEQUENCE {
        return Ok(GENESIS_SEQUENCE);
    }
    let slot = retrying(
        || tip::find_slot_holding(&**store, prefix, point),
        quire_log::Error::blob_kind,
    )
    .await
    .map_err(|e| Error::from_log(op, e))?;
    match slot {
        Some(slot) if slot.slot.last() <= base.sequence() => Ok(slot.slot.last()),
        _ => Err(Error::integrity(
            op,
            checkpoint_key(prefix, base.sequence()),
            format!("no slot holds sequence {point} before the checkpoint"),
        )),
    }
}

/// The documents of a loaded root, and the cut marking each one held above the base tier.
type Merged = (Vec<Arc<DocState>>, Vec<(DocPath, u64)>);

/// One group's documents, marks and entries per tier.
type GroupLoad = (Vec<Arc<DocState>>, Vec<(DocPath, u64)>, Vec<u64>);

/// Loads every shard of `base`'s root and merges the tiers: each document as its highest
/// tier holds it. Shards are read in groups that share a hash range ([`group_bits`]), each
/// group read, decoded and merged on a worker thread; the documents of tiers with fewer
/// shards than groups are read first and handed to their groups. Checks the tier counts, the
/// root's count and that a higher tier never holds an older state.
async fn load_groups(
    store: &Arc<dyn BlobStore>,
    prefix: &str,
    base: &Base,
    workers: usize,
) -> Result<Merged> {
    let op = Op::Load;
    let root = base.root.clone();
    let sequence = base.sequence();
    let key = checkpoint_key(prefix, sequence);
    let low = group_bits(&root);
    // Tiers of fewer shards than groups are read first and their documents handed to the
    // groups their paths hash into.
    let small: Vec<(usize, u32, Hash)> = (root.tiers.iter().enumerate())
        .filter(|(_, t)| t.bits < low)
        .flat_map(|(j, t)| {
            (t.shards.iter().enumerate()).filter_map(move |(i, h)| h.map(|h| (j, i as u32, h)))
        })
        .collect();
    let mut handed: Vec<Vec<TierDocs>> = (0..1usize << low).map(|_| Vec::new()).collect();
    for (j, docs) in read_shards(store, prefix, &root, sequence, small, workers, op).await? {
        let mut split: Vec<Vec<(DocState, u64)>> = vec![Vec::new(); 1 << low];
        for (doc, changed) in docs {
            split[shard_of(&path_hash(doc.path.as_str()), low) as usize].push((doc, changed));
        }
        for (group, docs) in split.into_iter().enumerate() {
            if !docs.is_empty() {
                handed[group].push((j, docs));
            }
        }
    }
    let loaded: Vec<GroupLoad> = futures::stream::iter(handed.into_iter().enumerate())
        .map(|(group, handed)| {
            let group = group as u32;
            let store = store.clone();
            let root = root.clone();
            let prefix = prefix.to_owned();
            let key = key.clone();
            tokio::spawn(async move {
                let mut reads = Vec::new();
                for (j, tier) in root.tiers.iter().enumerate() {
                    if tier.bits < low {
                        continue;
                    }
                    let shift = tier.bits - low;
                    for index in (group << shift)..((group + 1) << shift) {
                        let Some(Some(hash)) = tier.shards.get(index as usize) else {
                            continue;
                        };
                        let store = store.clone();
                        let skey = shard_key(&prefix, hash);
                        let (hash, bits, schema) = (*hash, tier.bits, root.shard_schema());
                        reads.push(async move {
                            let bytes = read_verified(&*store, &skey, &hash, op).await?;
                            let docs = decode_shard(&skey, &bytes, schema, bits, index, sequence)?;
                            Ok::<_, Error>((j, docs))
                        });
                    }
                }
                let mut shards = futures::future::try_join_all(reads).await?;
                shards.extend(handed);
                merge_group(&root, shards, &key)
            })
        })
        .buffer_unordered(workers.max(1))
        .map(|joined| {
            joined.map_err(|e| {
                Error::new(
                    op,
                    "",
                    ErrorKind::Storage,
                    format!("shard reader failed: {e}"),
                )
            })?
        })
        .try_collect()
        .await?;
    let mut counts = vec![0u64; root.tiers.len()];
    let mut docs = Vec::with_capacity(root.documents as usize);
    let mut marks = Vec::new();
    for (group_docs, group_marks, group_counts) in loaded {
        docs.extend(group_docs);
        marks.extend(group_marks);
        for (total, n) in counts.iter_mut().zip(group_counts) {
            *total += n;
        }
    }
    let bad = |why: String| Error::integrity(op, &key, why);
    for (j, tier) in root.tiers.iter().enumerate() {
        if counts[j] != tier.documents {
            return Err(bad(format!(
                "tier {j} names {} documents but its shards hold {}",
                tier.documents, counts[j]
            )));
        }
    }
    if docs.len() as u64 != root.documents {
        return Err(bad(format!(
            "root names {} documents but its tiers hold {}",
            root.documents,
            docs.len()
        )));
    }
    Ok((docs, marks))
}

/// The fewest shard bits a tier of at least [`GROUP_BITS`] has (the most a tier has when none
/// does): a load reads and merges the tiers in `2^bits` groups of paths, each holding whole
/// shards of those tiers. A smaller tier (the top, a few documents after a run ended) does
/// not make the groups few.
fn group_bits(root: &Root) -> u8 {
    let used = || {
        root.tiers
            .iter()
            .filter(|t| t.documents > 0)
            .map(|t| t.bits)
    };
    (used().filter(|b| *b >= GROUP_BITS).min())
        .or_else(|| used().max())
        .unwrap_or(0)
}

/// The fewest groups (in bits) a load prefers, so both cores merge while shards are read.
const GROUP_BITS: u8 = 5;

/// Merges the shards of one group: a path held by several tiers keeps its highest tier's
/// state, which must not be older.
fn merge_group(
    root: &Root,
    shards: Vec<(usize, Vec<(DocState, u64)>)>,
    key: &str,
) -> Result<GroupLoad> {
    let mut counts = vec![0u64; root.tiers.len()];
    let mut entries: Vec<(usize, DocState)> = Vec::new();
    let mut changes: Vec<u64> = Vec::new();
    for (tier, docs) in shards {
        counts[tier] += docs.len() as u64;
        // Schema 2: a document's change lies in its tier (none named in the base tier).
        if root.sealed.is_some() {
            let low = if tier == 0 {
                0
            } else {
                root.tiers[tier - 1].cut
            };
            let fits = |changed: u64| {
                if tier == 0 {
                    changed == 0
                } else {
                    low < changed && changed <= root.tiers[tier].cut
                }
            };
            if let Some((doc, changed)) = docs.iter().find(|(_, c)| !fits(*c)) {
                return Err(Error::integrity(
                    Op::Load,
                    key,
                    format!("{}: changed at {changed}, outside tier {tier}", doc.path),
                ));
            }
        }
        for (doc, changed) in docs {
            entries.push((tier, doc));
            changes.push(changed);
        }
    }
    let mut order: Vec<usize> = (0..entries.len()).collect();
    // Path order, highest tier first within a path.
    order.sort_unstable_by(|a, b| {
        let (ta, da) = &entries[*a];
        let (tb, db) = &entries[*b];
        da.path.cmp(&db.path).then(tb.cmp(ta))
    });
    let mut keep = vec![false; entries.len()];
    let mut previous: Option<usize> = None;
    for &i in &order {
        match previous {
            Some(p) if entries[p].1.path == entries[i].1.path => {
                let (newer, older) = (&entries[p].1, &entries[i].1);
                if newer.current < older.current || newer.first < older.first {
                    return Err(Error::integrity(
                        Op::Load,
                        key,
                        format!("{}: a higher tier holds an older state", newer.path),
                    ));
                }
            }
            _ => {
                keep[i] = true;
                previous = Some(i);
            }
        }
    }
    let mut docs = Vec::with_capacity(entries.len());
    let mut marks = Vec::new();
    for (((tier, doc), keep), changed) in entries.into_iter().zip(keep).zip(changes) {
        if !keep {
            continue;
        }
        if tier > 0 {
            let mark = if root.sealed.is_some() {
                changed
            } else {
                root.tiers[tier].cut
            };
            marks.push((doc.path.clone(), mark));
        }
        docs.push(Arc::new(doc));
    }
    Ok((docs, marks, counts))
}
