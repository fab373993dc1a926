//! Writing a checkpoint: a deterministic function of the log through the state's sequence.
//!
//! A job is prepared from a replica (O(1): persistent snapshots) and runs without it, so a
//! store keeps committing while it writes; the replica then installs the result. The job
//! keeps every tier whose grid point has not moved since the base (the base tier, every run
//! the base names), writes each run whose grid point it passed from the documents the
//! replica kept for it, rebuilds a base tier (or a schema-2 middle tier) whose grid point
//! moved from the state kept at that point, and rewrites only the top-tier shards holding a
//! document changed since the base. History blocks are placed by the log alone:
//! the last block of a document whose history epoch ended lives in that epoch's pack (built
//! here from the documents the replica kept at the epoch's cut), every other block is stored
//! alone. Objects are written bottom-up (history blocks and packs, shards, root, checkpoint),
//! so a reader never finds a name pointing at nothing; a job cut short leaves orphans a
//! later job reuses through create-if-absent.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use quire_blob::BlobStore;
use quire_log::model::HistoryBlockRef;
use quire_log::{DocPath, DocState, Hash, WorldState};
use tokio::sync::Mutex;

use crate::error::{Error, ErrorKind, Op, Result};
use crate::format::{
    Checkpoint, PackedBlock, Root, ShardDoc, Tier, decode_block, encode_shard_entries, grid,
    pack_blocks, path_hash, runs_fit, shard_bits, shard_of, tier_grids,
};
use crate::history::{BlockCache, ReadAhead, fold, read_block_bytes};
use crate::keys::{checkpoint_key, history_key, pack_key, root_key, shard_key};
use crate::objects::{Fence, Put, put, put_addressed, settle};
use crate::pace::{UploadPace, run_paced};
use crate::replica::{Base, Replica, Tracker, read_shards};

/// Counts of what a checkpoint write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// History objects written: blocks stored alone and packs.
    pub blocks: u64,
    /// Of those, packs (one per history epoch that ended).
    pub packs: u64,
    pub shards: u64,
    /// Objects created (blocks, shards, root, checkpoint).
    pub created: u64,
    /// Objects found already stored with identical bytes.
    pub reused: u64,
    /// Reused objects rewritten under the generation fence.
    pub freshened: u64,
    /// Bytes of the objects this job wrote (created or rewritten).
    pub bytes_written: u64,
    /// Whether this job's create made the checkpoint object (not a racer's).
    pub own: bool,
    /// Objects a drop deleted while they settled, created again before being named (only
    /// where generations are not unique).
    pub recreated: u64,
    /// The newest modification time the bucket reported during the run: the bucket's
    /// clock, for a drop that follows.
    pub bucket_time: Option<std::time::SystemTime>,
}

impl WriteStats {
    fn count(&mut self, outcome: Put, len: usize) {
        match outcome {
            Put::Created => {
                self.created += 1;
                self.bytes_written += len as u64;
            }
            Put::Reused => self.reused += 1,
            Put::Freshened => {
                self.freshened += 1;
                self.bytes_written += len as u64;
            }
        }
    }
}

/// A written checkpoint, ready for [`Replica::install`].
#[derive(Debug)]
pub struct Written {
    pub base: Base,
    /// Documents the checkpoint holds in rewritten shards: their history and the version it
    /// reaches.
    pub folded: Vec<(DocPath, Arc<[HistoryBlockRef]>, u64)>,
    pub stats: WriteStats,
}

/// A checkpoint to write at the prepared state's sequence.
#[derive(Debug)]
pub struct CheckpointJob {
    store: Arc<dyn BlobStore>,
    prefix: String,
    state: WorldState,
    base: Base,
    tracker: Tracker,
    /// The blocks the replica read ahead for the sealed epochs' folds.
    read_ahead: Arc<ReadAhead>,
    fence: Fence,
    workers: usize,
    /// How wide the uploads may run, when the store paces them.
    pace: Option<Arc<dyn UploadPace>>,
    cap: Duration,
}

/// The longest a checkpoint run may take. The generation fence's margin assumes it: an
/// object found young (at most half the drop grace old) is named before it can be old
/// enough to drop, and a base stays kept while a job carries its shards. A run that reaches
/// the cap stops before naming anything; what it wrote is reused by the next.
pub const RUN_CAP: Duration = Duration::from_secs(300);

impl Replica {
    /// Prepares a checkpoint of the current state. `freshen_after` is the generation fence's
    /// age (half the drop grace); the run is capped at [`RUN_CAP`].
    pub fn prepare(&self, freshen_after: Duration) -> CheckpointJob {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(self.clock.now().0);
        CheckpointJob {
            store: self.store.clone(),
            prefix: self.prefix.clone(),
            state: self.state.clone(),
            base: self.base.clone(),
            tracker: self.tracker.clone(),
            read_ahead: self.read_ahead.clone(),
            fence: Fence::new(now, freshen_after).settling(self.settle),
            workers: self.workers,
            pace: self.pace.clone(),
            cap: RUN_CAP,
        }
    }

    /// Prepares a checkpoint of the state at the newest history-epoch cut, when an epoch
    /// ended since the base and after sequence `past` (a checkpoint that could not be
    /// adopted holds that name); else of the current state. Such a checkpoint has no open epoch:
    /// every document's last block is in a pack or where the base names it, so a busy store's
    /// checkpoint writes packs, runs and the top tier, and no block stored alone for a
    /// document changed since the cut (about half an epoch of them). It trails the state by
    /// less than an epoch (1024 sequences), which a cold start replays.
    pub fn prepare_sealed(&self, freshen_after: Duration, past: u64) -> CheckpointJob {
        let mut job = self.prepare(freshen_after);
        let floor = self.base.sequence().max(past);
        if let Some(state) =
            (self.tracker.sealed_state.as_ref()).filter(|state| state.sequence() > floor)
        {
            job.state = state.clone();
        }
        job
    }

    /// Writes a checkpoint of the current state and installs it.
    pub async fn checkpoint(&mut self, freshen_after: Duration) -> Result<Option<WriteStats>> {
        let Some(written) = self.prepare(freshen_after).run().await? else {
            return Ok(None);
        };
        let stats = written.stats;
        self.install(written)?;
        Ok(Some(stats))
    }
}

/// How many documents a job folds at once: most folds read one small history block (by
/// range, from a pack), so the job waits on the bucket's latency, not on bandwidth.
const HISTORY_READERS: usize = 256;

/// A document of a shard build (its index) with its last change, its references and the
/// blocks to store alone first.
type Resolved = (
    usize,
    Arc<DocState>,
    u64,
    Arc<[HistoryBlockRef]>,
    Vec<(Hash, Bytes)>,
);

/// A document with the history its entry names and its last change.
type FoldedDoc = (Arc<DocState>, Arc<[HistoryBlockRef]>, u64);

/// One shard to encode: its tier, bits, index and documents (each with its last change) in
/// path order. `given`: the documents' references are the ones to write (a schema-1 tier
/// moved as it stands).
struct ShardBuild {
    tier: usize,
    bits: u8,
    index: u32,
    docs: Vec<(Arc<DocState>, u64)>,
    given: bool,
}

/// Encodes and hashes shards (bits, index, documents) on the blocking pool, a run of them per
/// task (in place on a current-thread runtime), and returns them in order with their
/// documents: a checkpoint that rebuilds a tier
/// encodes every document in it, which one thread does in seconds at a million.
async fn encode_shards(
    jobs: Vec<(u8, u32, Vec<FoldedDoc>)>,
) -> std::result::Result<Vec<(Hash, Bytes, Vec<FoldedDoc>)>, String> {
    let mut runs: Vec<Vec<(u8, u32, Vec<FoldedDoc>)>> = vec![Vec::new()];
    let mut in_run = 0;
    for job in jobs {
        if in_run >= ENCODE_RUN_ENTRIES {
            runs.push(Vec::new());
            in_run = 0;
        }
        in_run += job.2.len();
        runs.last_mut().expect("a run").push(job);
    }
    let encode = |run: Vec<(u8, u32, Vec<FoldedDoc>)>| -> Vec<(Hash, Bytes, Vec<FoldedDoc>)> {
        run.into_iter().map(encode_shard).collect()
    };
    // A current-thread runtime (a simulation on paused time) encodes in place: a blocking
    // task ending at a moment of real time would let the other tasks run a varying number of
    // steps first, and a seed would no longer replay exactly.
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::CurrentThread
    {
        return Ok(runs.into_iter().flat_map(encode).collect());
    }
    let tasks = runs
        .into_iter()
        .map(|run| tokio::task::spawn_blocking(move || encode(run)));
    // In the order of `jobs`: try_join_all answers in the order of its futures.
    let done = futures::future::try_join_all(tasks)
        .await
        .map_err(|e| format!("encoding shards stopped: {e}"))?;
    Ok(done.into_iter().flatten().collect())
}

/// Entries one encoding task takes: enough to outweigh handing it over, few enough that a
/// tier of a million spreads over every core.
const ENCODE_RUN_ENTRIES: usize = 16_384;

fn encode_shard((bits, index, docs): (u8, u32, Vec<FoldedDoc>)) -> (Hash, Bytes, Vec<FoldedDoc>) {
    let entries: Vec<ShardDoc<'_>> = docs.iter().map(|(d, h, c)| (&**d, &**h, *c)).collect();
    let bytes = encode_shard_entries(bits, index, &entries);
    (Hash::of(&bytes), bytes, docs)
}

fn group(tier: usize, bits: u8, docs: Vec<(Arc<DocState>, u64)>) -> Vec<ShardBuild> {
    let mut shards: Vec<Vec<(Arc<DocState>, u64)>> = vec![Vec::new(); 1 << bits];
    for (doc, changed) in docs {
        shards[shard_of(&path_hash(doc.path.as_str()), bits) as usize].push((doc, changed));
    }
    shards
        .into_iter()
        .enumerate()
        .filter(|(_, docs)| !docs.is_empty())
        .map(|(index, docs)| ShardBuild {
            tier,
            bits,
            index: index as u32,
            docs,
            given: false,
        })
        .collect()
}

/// A document's history as a checkpoint names it: its references, the blocks that must be
/// stored alone first and, for a document whose epoch ended, its last block's bytes (its
/// reference is renamed once the pack is built).
struct Placed {
    refs: Vec<HistoryBlockRef>,
    new_blocks: Vec<(Hash, Bytes)>,
    last: Option<Bytes>,
}

/// Reading and placing history blocks during one job.
struct History<'a> {
    store: &'a dyn BlobStore,
    prefix: &'a str,
    read: Mutex<HashMap<Hash, Bytes>>,
    /// Blocks read for folds, starting with those read ahead.
    blocks: BlockCache,
}

impl History<'_> {
    /// The bytes of the block `r` names, checked to be that block of `doc`.
    async fn bytes_of(&self, doc: &DocState, r: &HistoryBlockRef) -> Result<Bytes> {
        if let Some(found) = self.read.lock().await.get(&r.hash) {
            return Ok(found.clone());
        }
        let (key, bytes) = read_block_bytes(self.store, self.prefix, r).await?;
        decode_block(&key, &bytes, path_hash(doc.path.as_str()), r.first, r.last)?;
        self.read.lock().await.insert(r.hash, bytes.clone());
        Ok(bytes)
    }

    /// Folds `doc` and places its blocks: every block but the last stands alone, and the
    /// last goes into a pack (`packed`: the document's epoch ended) or stands alone.
    async fn place(&self, doc: &DocState, packed: bool) -> Result<Placed> {
        let folded = fold(self.store, self.prefix, doc, &self.blocks).await?;
        let fresh: HashMap<Hash, Bytes> = folded.new_blocks.into_iter().collect();
        let mut refs = folded.refs.to_vec();
        let mut new_blocks = Vec::new();
        let mut last = None;
        let n = refs.len();
        for (i, r) in refs.iter_mut().enumerate() {
            let new = fresh.get(&r.hash).cloned();
            if packed && i + 1 == n {
                last = Some(match new {
                    Some(bytes) => bytes,
                    None => self.bytes_of(doc, r).await?,
                });
                continue;
            }
            match new {
                Some(bytes) => new_blocks.push((r.hash, bytes)),
                None if PackedBlock::from_name(&r.hash).is_some() => {
                    let bytes = self.bytes_of(doc, r).await?;
                    let hash = Hash::of(&bytes);
                    if hash != r.hash {
                        r.hash = hash;
                        new_blocks.push((hash, bytes));
                    }
                }
                None => {}
            }
        }
        if packed && last.is_none() {
            return Err(Error::integrity(
                Op::Write,
                doc.path.as_str(),
                "a document without versions",
            ));
        }
        Ok(Placed {
            refs,
            new_blocks,
            last,
        })
    }
}

impl CheckpointJob {
    /// The sequence the checkpoint will hold.
    pub fn sequence(&self) -> u64 {
        self.state.sequence()
    }

    /// Caps the run at `cap` instead of [`RUN_CAP`] (a cap longer than the fence assumes
    /// shrinks its margin).
    pub fn with_cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }

    /// Where generations are not unique: how long written objects settle before they are
    /// named, instead of [`crate::objects::SETTLE`] (see `objects`).
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.fence.settle = settle;
        self
    }

    /// Tier `j` of a schema-1 base, moved to this schema as it stands: its documents read
    /// from its shards, with the references they name, marked with the tier's cut.
    async fn reencode(&self, j: usize, workers: usize, op: Op) -> Result<(Tier, Vec<ShardBuild>)> {
        let old = &self.base.root.tiers[j];
        let refs: Vec<(usize, u32, Hash)> = old
            .shards
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.map(|h| (j, i as u32, h)))
            .collect();
        let loaded = read_shards(
            &self.store,
            &self.prefix,
            &self.base.root,
            self.base.sequence(),
            refs,
            workers,
            op,
        )
        .await?;
        let changed = if j == 0 { 0 } else { old.cut };
        let mut docs: Vec<(Arc<DocState>, u64)> = loaded
            .into_iter()
            .flat_map(|(_, docs)| docs)
            .map(|(doc, _)| (Arc::new(doc), changed))
            .collect();
        docs.sort_unstable_by(|a, b| a.0.path.cmp(&b.0.path));
        let count = docs.len() as u64;
        let mut builds = group(j, shard_bits(count), docs);
        for build in &mut builds {
            build.given = true;
        }
        Ok((
            Tier {
                documents: count,
                ..Tier::empty(old.grid, old.cut, count)
            },
            builds,
        ))
    }

    /// Whether this checkpoint writes runs (schema 3): the base has them, or every run
    /// grid point after the base tier's was crossed since the base (its base tier moves, or
    /// its middle tier was cut at the base tier's grid point), so the replica kept the state
    /// at each. Else the world keeps its middle tier until then.
    fn writes_runs(&self) -> bool {
        let old = &self.base.root;
        let s = self.state.sequence();
        runs_fit(&old.widths)
            && (old.runs
                || grid(old.widths[0], s) != old.tiers[0].grid
                || old.tiers[1].grid == old.tiers[0].grid)
    }

    /// Writes the checkpoint; `None` when the state is the base's. A run that reaches its
    /// cap fails with a storage error and names nothing.
    pub async fn run(self) -> Result<Option<Written>> {
        let cap = self.cap;
        let key = checkpoint_key(&self.prefix, self.state.sequence());
        match tokio::time::timeout(cap, self.run_uncapped()).await {
            Ok(result) => result,
            Err(_) => Err(Error::new(
                Op::Write,
                key,
                ErrorKind::Storage,
                format!(
                    "the run reached its cap of {} s; nothing was named",
                    cap.as_secs()
                ),
            )),
        }
    }

    async fn run_uncapped(self) -> Result<Option<Written>> {
        let op = Op::Write;
        let s = self.state.sequence();
        if s <= self.base.sequence() {
            return Ok(None);
        }
        let old = &self.base.root;
        let legacy = old.sealed.is_none();
        let store = &*self.store;
        let prefix = self.prefix.as_str();
        let workers = self.workers.max(1);
        let history = History {
            store,
            prefix,
            read: Mutex::default(),
            blocks: BlockCache::from_read_ahead(&self.read_ahead),
        };

        // Sealed epochs: each one's documents fold as they stood at its cut, and their last
        // blocks go into the epoch's pack.
        let mut standalone: Vec<(Hash, Bytes)> = Vec::new();
        let mut packs: Vec<(String, Bytes)> = Vec::new();
        let mut placed: HashMap<(DocPath, u64), Arc<[HistoryBlockRef]>> = HashMap::new();
        // Every ended epoch's documents fold at once (their reads are small and
        // latency-bound), then each epoch's last blocks become its pack.
        let history = &history;
        let docs: Vec<Arc<DocState>> = self
            .tracker
            .sealed
            .iter()
            .flat_map(|epoch| epoch.docs.iter().map(|(d, _)| d.clone()))
            .collect();
        let mut folded = futures::stream::iter(docs)
            .map(|doc| async move { history.place(&doc, true).await })
            .buffered(HISTORY_READERS.max(workers))
            .try_collect::<Vec<Placed>>()
            .await?
            .into_iter();
        for epoch in &self.tracker.sealed {
            let epoch_folded: Vec<Placed> = folded.by_ref().take(epoch.docs.len()).collect();
            let blocks: Vec<Bytes> = epoch_folded
                .iter()
                .map(|placed_doc| placed_doc.last.clone().expect("a packed placement"))
                .collect();
            if blocks.is_empty() {
                continue;
            }
            let Some((pack, id, names)) = pack_blocks(&blocks) else {
                return Err(Error::new(
                    op,
                    pack_key(prefix, &[]),
                    ErrorKind::Storage,
                    "an epoch's history pack passes 4 GiB",
                ));
            };
            for (((doc, changed), placed_doc), name) in
                epoch.docs.iter().zip(epoch_folded).zip(names)
            {
                let mut refs = placed_doc.refs;
                refs.last_mut().expect("a retained version").hash = name;
                standalone.extend(placed_doc.new_blocks);
                placed.insert((doc.path.clone(), *changed), refs.into());
            }
            packs.push((pack_key(prefix, &id), pack));
        }
        let sealed = self.tracker.open_cut;
        let base_sealed = self.tracker.base_sealed;

        let runs = self.writes_runs();
        let grids = tier_grids(&old.widths, s, runs);
        let top = grids.len() - 1;
        let mut tiers: Vec<Tier> = Vec::with_capacity(grids.len());
        let mut builds: Vec<ShardBuild> = Vec::new();
        let mut lower_cut = 0;
        for (j, &g) in grids[..top].iter().enumerate() {
            // The base's tier at this place, when it holds the same documents: the base
            // tier, the middle tier or a run cut at the same grid point.
            let same = j == 0 || (runs == old.runs && j + 1 < old.tiers.len());
            if same && g == old.tiers[j].grid {
                if legacy {
                    // A schema-1 tier moves to this schema as it stands: its documents
                    // with the references its shards name.
                    let (tier, mut tier_builds) = self.reencode(j, workers, op).await?;
                    tiers.push(tier);
                    builds.append(&mut tier_builds);
                } else {
                    tiers.push(old.tiers[j].clone());
                }
                lower_cut = old.tiers[j].cut;
                continue;
            }
            if runs && j > 0 {
                let Some(run) = self.tracker.runs.iter().find(|r| r.grid == g) else {
                    return Err(Error::new(
                        op,
                        checkpoint_key(&self.prefix, s),
                        ErrorKind::Precondition,
                        format!("this replica did not keep the run at grid point {g}"),
                    ));
                };
                let count = run.docs.len() as u64;
                tiers.push(Tier {
                    documents: count,
                    ..Tier::empty(g, run.cut, count)
                });
                builds.extend(group(j, shard_bits(count), run.docs.clone()));
                lower_cut = run.cut;
                continue;
            }
            let cut = match j {
                0 => self.tracker.base_cut.as_ref(),
                _ => self.tracker.middle_cut.as_ref(),
            };
            let Some(cut) = cut.filter(|c| c.grid == g) else {
                return Err(Error::new(
                    op,
                    checkpoint_key(&self.prefix, s),
                    ErrorKind::Precondition,
                    format!("this replica did not keep the state at grid point {g}"),
                ));
            };
            let cut_sequence = cut.state.sequence();
            let docs: Vec<(Arc<DocState>, u64)> = if j == 0 {
                cut.state
                    .docs()
                    .map(|d| (d.clone(), cut.changes.get(&d.path).copied().unwrap_or(0)))
                    .collect()
            } else {
                cut.changes
                    .iter()
                    .filter(|(_, changed)| lower_cut < **changed && **changed <= cut_sequence)
                    .filter_map(|(path, changed)| {
                        cut.state.doc(path).map(|d| (d.clone(), *changed))
                    })
                    .collect()
            };
            let count = docs.len() as u64;
            tiers.push(Tier {
                documents: count,
                ..Tier::empty(g, cut_sequence, count)
            });
            builds.extend(group(j, shard_bits(count), docs));
            lower_cut = cut_sequence;
        }
        // The tracker may hold changes after the state (a checkpoint at an epoch cut).
        let top_docs: Vec<(Arc<DocState>, u64)> = self
            .tracker
            .changes
            .iter()
            .filter(|(_, changed)| lower_cut < **changed && **changed <= s)
            .filter_map(|(path, changed)| self.state.doc(path).map(|d| (d.clone(), *changed)))
            .collect();
        let count = top_docs.len() as u64;
        let bits = shard_bits(count);
        let top_builds = group(top, bits, top_docs);
        let mut top_tier = Tier {
            documents: count,
            ..Tier::empty(s, s, count)
        };
        let old_top = &old.tiers[old.tiers.len() - 1];
        let old_lower_cut = old.tiers[old.tiers.len() - 2].cut;
        if !legacy && lower_cut == old_lower_cut && old_top.bits == bits {
            // Shards holding no document changed since the base (or since its sealed cut,
            // when an epoch ended: their blocks moved into its pack) are the base's.
            let since = if self.tracker.sealed.is_empty() {
                self.base.sequence()
            } else {
                base_sealed
            };
            let touched: BTreeSet<u32> = self
                .tracker
                .changes
                .iter()
                .filter(|(_, changed)| **changed > since && **changed <= s)
                .map(|(path, _)| shard_of(&path_hash(path.as_str()), bits))
                .collect();
            top_tier.shards = old_top.shards.clone();
            for index in 0..top_tier.shards.len() as u32 {
                if touched.contains(&index) {
                    top_tier.shards[index as usize] = None;
                }
            }
            builds.extend(
                top_builds
                    .into_iter()
                    .filter(|b| touched.contains(&b.index)),
            );
        } else {
            builds.extend(top_builds);
        }
        tiers.push(top_tier);

        // Every document's references: where its base names them (last change at or before
        // the base's sealed cut), in a pack sealed here, or folded into blocks of its own
        // (the open epoch).
        let flat: Vec<(usize, Arc<DocState>, u64)> = builds
            .iter()
            .enumerate()
            .flat_map(|(b, build)| build.docs.iter().map(move |(d, c)| (b, d.clone(), *c)))
            .collect();
        let state = &self.state;
        let placed = &placed;
        let builds_ref = &builds;
        let mut resolved: Vec<(usize, Resolved)> =
            futures::stream::iter(flat.into_iter().enumerate())
                .map(|(at, (b, doc, changed))| async move {
                    if builds_ref[b].given {
                        return Ok((
                            at,
                            (b, doc.clone(), changed, doc.history.clone(), Vec::new()),
                        ));
                    }
                    if changed <= base_sealed {
                        let refs = state
                            .doc(&doc.path)
                            .map(|now| now.history.clone())
                            .unwrap_or_else(|| doc.history.clone());
                        return Ok((at, (b, doc, changed, refs, Vec::new())));
                    }
                    if changed <= sealed {
                        let Some(refs) = placed.get(&(doc.path.clone(), changed)) else {
                            return Err(Error::new(
                                op,
                                doc.path.as_str(),
                                ErrorKind::Precondition,
                                format!("no sealed epoch holds the change at {changed}"),
                            ));
                        };
                        return Ok((at, (b, doc, changed, refs.clone(), Vec::new())));
                    }
                    let placed_doc = history.place(&doc, false).await?;
                    let refs = placed_doc.refs.into();
                    Ok((at, (b, doc, changed, refs, placed_doc.new_blocks)))
                })
                .buffer_unordered(HISTORY_READERS.max(workers))
                .try_collect()
                .await?;
        // In the order the shards hold them (a fold that reads waits on no other).
        resolved.sort_unstable_by_key(|(at, _)| *at);

        let mut seen_blocks = std::collections::HashSet::new();
        let mut blocks: Vec<(Hash, Bytes)> = Vec::new();
        for (hash, bytes) in standalone {
            if seen_blocks.insert(hash) {
                blocks.push((hash, bytes));
            }
        }
        let mut per_build: Vec<Vec<FoldedDoc>> = builds
            .iter()
            .map(|b| Vec::with_capacity(b.docs.len()))
            .collect();
        for (_, (b, doc, changed, refs, new_blocks)) in resolved {
            for (hash, bytes) in new_blocks {
                if seen_blocks.insert(hash) {
                    blocks.push((hash, bytes));
                }
            }
            let changed = if builds[b].tier == 0 { 0 } else { changed };
            per_build[b].push((doc, refs, changed));
        }
        let jobs = builds
            .iter()
            .zip(per_build)
            .map(|(b, docs)| (b.bits, b.index, docs))
            .collect();
        let encoded = encode_shards(jobs)
            .await
            .map_err(|e| Error::new(op, checkpoint_key(prefix, s), ErrorKind::Precondition, e))?;
        let mut shards: Vec<(Hash, Bytes)> = Vec::with_capacity(builds.len());
        let mut folded_docs = Vec::new();
        for (build, (hash, bytes, docs)) in builds.iter().zip(encoded) {
            tiers[build.tier].shards[build.index as usize] = Some(hash);
            shards.push((hash, bytes));
            folded_docs.extend(
                docs.iter()
                    .map(|(d, h, _)| (d.path.clone(), h.clone(), d.current)),
            );
        }
        let root = Root {
            world: self.state.world(),
            documents: self.state.doc_count(),
            widths: old.widths,
            tiers,
            sealed: Some(sealed),
            runs,
        };
        let root_bytes = root.encode();
        let root_hash = Hash::of(&root_bytes);
        let checkpoint = Checkpoint {
            world: self.state.world(),
            sequence: s,
            root: root_hash,
            tip: self.state.tip(),
            documents: self.state.doc_count(),
        };

        let mut stats = WriteStats {
            blocks: (blocks.len() + packs.len()) as u64,
            packs: packs.len() as u64,
            shards: shards.len() as u64,
            ..WriteStats::default()
        };
        let fence = &self.fence;
        // What a drop may collect, kept to settle before the checkpoint names it (history
        // blocks are never collected).
        let mut collectable: Vec<(String, Bytes)> = shards
            .iter()
            .map(|(hash, bytes)| (shard_key(prefix, hash), bytes.clone()))
            .collect();
        collectable.push((root_key(prefix, &root_hash), root_bytes.clone()));
        let keyed_blocks = blocks
            .into_iter()
            .map(|(hash, bytes)| (history_key(prefix, &hash), bytes))
            .chain(packs);
        let keyed_shards = shards
            .into_iter()
            .map(|(hash, bytes)| (shard_key(prefix, &hash), bytes));
        for objects in [keyed_blocks.collect::<Vec<_>>(), keyed_shards.collect()] {
            let uploads = objects.into_iter().map(|(key, bytes)| async move {
                let len = bytes.len();
                put_addressed(store, &key, bytes, fence, op)
                    .await
                    .map(|p| (p, len))
            });
            let outcomes: Vec<(Put, usize)> =
                run_paced(uploads, workers, self.pace.as_deref()).await?;
            for (outcome, len) in outcomes {
                stats.count(outcome, len);
            }
        }
        let len = root_bytes.len();
        stats.count(
            put_addressed(store, &root_key(prefix, &root_hash), root_bytes, fence, op).await?,
            len,
        );
        stats.recreated = settle(store, &collectable, fence, workers, op).await?;
        let checkpoint_bytes = checkpoint.encode();
        let len = checkpoint_bytes.len();
        let outcome = put(
            store,
            &checkpoint_key(prefix, s),
            checkpoint_bytes,
            fence,
            op,
        )
        .await?;
        stats.bucket_time = fence.bucket_time();
        stats.own = outcome == Put::Created;
        stats.count(outcome, len);
        Ok(Some(Written {
            base: Base {
                checkpoint,
                root: Arc::new(root),
            },
            folded: folded_docs,
            stats,
        }))
    }
}
