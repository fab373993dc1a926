//! Writing a checkpoint: a deterministic function of the log through the state's sequence.
//!
//! A job is prepared from a replica (O(1): persistent snapshots) and runs without it, so a
//! store keeps committing while it writes; the replica then installs the result. The job
//! keeps every tier whose grid point has not moved since the base, rebuilds the tiers whose
//! grid point moved from the state kept at that point, and rewrites only the top-tier shards
//! holding a document changed since the base. Objects are written bottom-up (history blocks,
//! shards, root, checkpoint), so a reader never finds a name pointing at nothing; a job cut
//! short leaves orphans a later job reuses through create-if-absent.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use quire_blob::BlobStore;
use quire_log::model::HistoryBlockRef;
use quire_log::{DocPath, DocState, Hash, WorldState};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::format::{
    Checkpoint, Root, TIERS, Tier, encode_shard, grid, path_hash, shard_bits, shard_of,
};
use crate::history::{BlockCache, fold};
use crate::keys::{checkpoint_key, history_key, root_key, shard_key};
use crate::objects::{Fence, Put, put, put_addressed, settle};
use crate::replica::{Base, Replica, Tracker};

/// Counts of what a checkpoint write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub blocks: u64,
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
    fence: Fence,
    workers: usize,
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
            fence: Fence::new(now, freshen_after).settling(self.settle),
            workers: self.workers,
            cap: RUN_CAP,
        }
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

/// A document with the history its entry names.
type FoldedDoc = (Arc<DocState>, Arc<[HistoryBlockRef]>);

/// One shard to encode: its tier, bits, index and documents in path order.
struct ShardBuild {
    tier: usize,
    bits: u8,
    index: u32,
    docs: Vec<Arc<DocState>>,
}

fn group(
    tier: usize,
    bits: u8,
    docs: impl Iterator<Item = Arc<DocState>>,
) -> (u64, Vec<ShardBuild>) {
    let mut shards: Vec<Vec<Arc<DocState>>> = vec![Vec::new(); 1 << bits];
    let mut count = 0;
    for doc in docs {
        count += 1;
        shards[shard_of(&path_hash(doc.path.as_str()), bits) as usize].push(doc);
    }
    let builds = shards
        .into_iter()
        .enumerate()
        .filter(|(_, docs)| !docs.is_empty())
        .map(|(index, docs)| ShardBuild {
            tier,
            bits,
            index: index as u32,
            docs,
        })
        .collect();
    (count, builds)
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
        let mut tiers: Vec<Tier> = Vec::with_capacity(TIERS);
        let mut builds: Vec<ShardBuild> = Vec::new();
        let mut lower_cut = 0;
        let mut lower_kept = true;
        for (j, width) in old.widths.iter().enumerate() {
            let g = grid(*width, s);
            if g == old.tiers[j].grid {
                tiers.push(old.tiers[j].clone());
                lower_cut = old.tiers[j].cut;
                continue;
            }
            lower_kept = false;
            let Some(cut) = self.tracker.cuts[j].as_ref().filter(|c| c.grid == g) else {
                return Err(Error::new(
                    op,
                    checkpoint_key(&self.prefix, s),
                    ErrorKind::Precondition,
                    format!("this replica did not keep the state at grid point {g}"),
                ));
            };
            let cut_sequence = cut.state.sequence();
            let bits = shard_bits(cut.state.doc_count());
            let (count, mut shard_builds) = if j == 0 {
                group(j, bits, cut.state.docs().cloned())
            } else {
                group(
                    j,
                    bits,
                    cut.changes
                        .iter()
                        .filter(|(_, changed)| lower_cut < **changed && **changed <= cut_sequence)
                        .filter_map(|(path, _)| cut.state.doc(path).cloned()),
                )
            };
            tiers.push(Tier {
                documents: count,
                ..Tier::empty(g, cut_sequence, cut.state.doc_count())
            });
            builds.append(&mut shard_builds);
            lower_cut = cut_sequence;
        }
        let top = TIERS - 1;
        let bits = shard_bits(self.state.doc_count());
        let (count, top_builds) = group(
            top,
            bits,
            self.tracker
                .changes
                .iter()
                .filter(|(_, changed)| lower_cut < **changed)
                .filter_map(|(path, _)| self.state.doc(path).cloned()),
        );
        let mut top_tier = Tier {
            documents: count,
            ..Tier::empty(s, s, self.state.doc_count())
        };
        let old_top = &old.tiers[top];
        if lower_kept && old_top.bits == bits {
            // Shards holding no document changed since the base are the base's.
            let touched: BTreeSet<u32> = self
                .tracker
                .changes
                .iter()
                .filter(|(_, changed)| **changed > self.base.sequence())
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

        // Fold every document's history, reading old blocks where a block changes.
        let cache = BlockCache::default();
        let store = &*self.store;
        let prefix = self.prefix.as_str();
        let flat: Vec<(usize, Arc<DocState>)> = builds
            .iter()
            .enumerate()
            .flat_map(|(b, build)| build.docs.iter().map(move |d| (b, d.clone())))
            .collect();
        let folded: Vec<(usize, Arc<DocState>, crate::history::FoldedHistory)> =
            futures::stream::iter(flat)
                .map(|(b, doc)| {
                    let cache = &cache;
                    async move {
                        let history = fold(store, prefix, &doc, cache).await?;
                        Ok::<_, Error>((b, doc, history))
                    }
                })
                .buffered(self.workers.max(1))
                .try_collect()
                .await?;

        let mut blocks: Vec<(Hash, Bytes)> = Vec::new();
        let mut seen_blocks = std::collections::HashSet::new();
        let mut per_build: Vec<Vec<FoldedDoc>> = builds
            .iter()
            .map(|b| Vec::with_capacity(b.docs.len()))
            .collect();
        for (b, doc, history) in folded {
            for (hash, bytes) in history.new_blocks {
                if seen_blocks.insert(hash) {
                    blocks.push((hash, bytes));
                }
            }
            per_build[b].push((doc, history.refs));
        }
        let mut shards: Vec<(Hash, Bytes)> = Vec::with_capacity(builds.len());
        let mut folded_docs = Vec::new();
        for (build, docs) in builds.iter().zip(&per_build) {
            let entries: Vec<(&DocState, &[HistoryBlockRef])> =
                docs.iter().map(|(d, h)| (&**d, &**h)).collect();
            let bytes = encode_shard(build.bits, build.index, &entries)?;
            let hash = Hash::of(&bytes);
            tiers[build.tier].shards[build.index as usize] = Some(hash);
            shards.push((hash, bytes));
            folded_docs.extend(
                docs.iter()
                    .map(|(d, h)| (d.path.clone(), h.clone(), d.current)),
            );
        }
        let root = Root {
            world: self.state.world(),
            documents: self.state.doc_count(),
            widths: old.widths,
            tiers,
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
            blocks: blocks.len() as u64,
            shards: shards.len() as u64,
            ..WriteStats::default()
        };
        let fence = &self.fence;
        let workers = self.workers.max(1);
        // What a drop may collect, kept to settle before the checkpoint names it (history
        // blocks are never collected).
        let mut collectable: Vec<(String, Bytes)> = shards
            .iter()
            .map(|(hash, bytes)| (shard_key(prefix, hash), bytes.clone()))
            .collect();
        collectable.push((root_key(prefix, &root_hash), root_bytes.clone()));
        let keyed_blocks = blocks
            .into_iter()
            .map(|(hash, bytes)| (history_key(prefix, &hash), bytes));
        let keyed_shards = shards
            .into_iter()
            .map(|(hash, bytes)| (shard_key(prefix, &hash), bytes));
        for objects in [keyed_blocks.collect::<Vec<_>>(), keyed_shards.collect()] {
            let outcomes: Vec<(Put, usize)> = futures::stream::iter(objects)
                .map(|(key, bytes)| async move {
                    let len = bytes.len();
                    put_addressed(store, &key, bytes, fence, op)
                        .await
                        .map(|p| (p, len))
                })
                .buffer_unordered(workers)
                .try_collect()
                .await?;
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
