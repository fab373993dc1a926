//! Reading checkpoints for cold start and adoption: listing them, reading one with its
//! root, reading shards, and loading a whole root in groups of paths.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use quire_blob::BlobStore;
use quire_log::marker::{GENESIS_SEQUENCE, genesis_tip};
use quire_log::{DocPath, DocState, Hash, WorldId, tip};

use super::Base;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::format::{Checkpoint, Root, decode_shard, epoch_width, grid, path_hash, shard_of};
use crate::keys::{checkpoint_key, checkpoint_prefix, parse_checkpoint_key, root_key, shard_key};
use crate::objects::{get_retrying, read_verified, retrying};

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
                let docs = read_shard(&*store, &key, &hash, schema, bits, index, sequence, op);
                Ok::<_, Error>((tier, docs.await?))
            })
        })
        .buffer_unordered(workers.max(1))
        .map(|joined| reader_joined(joined, op))
        .try_collect()
        .await
}

/// Reads shard `index` (under `bits`, in `schema`) from `key`, verified against `hash`, and
/// decodes its documents as of `sequence`.
#[allow(
    clippy::too_many_arguments,
    reason = "one shard's coordinates, all needed"
)]
async fn read_shard(
    store: &dyn BlobStore,
    key: &str,
    hash: &Hash,
    schema: u32,
    bits: u8,
    index: u32,
    sequence: u64,
    op: Op,
) -> Result<Vec<(DocState, u64)>> {
    let bytes = read_verified(store, key, hash, op).await?;
    decode_shard(key, &bytes, schema, bits, index, sequence)
}

/// The result of a shard-reading task, a task that failed to finish being a storage error.
fn reader_joined<T>(
    joined: std::result::Result<Result<T>, tokio::task::JoinError>,
    op: Op,
) -> Result<T> {
    joined.map_err(|e| {
        Error::new(
            op,
            "",
            ErrorKind::Storage,
            format!("shard reader failed: {e}"),
        )
    })?
}

/// The cut of the history-epoch grid point at or before a schema-1 base: the end of the
/// slot holding it, read from the log (1 at or before genesis).
pub(super) async fn epoch_cut(
    store: &Arc<dyn BlobStore>,
    prefix: &str,
    base: &Base,
    op: Op,
) -> Result<u64> {
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
pub(super) async fn load_groups(
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
                            let docs = read_shard(
                                &*store, &skey, &hash, schema, bits, index, sequence, op,
                            );
                            Ok::<_, Error>((j, docs.await?))
                        });
                    }
                }
                let mut shards = futures::future::try_join_all(reads).await?;
                shards.extend(handed);
                merge_group(&root, shards, &key)
            })
        })
        .buffer_unordered(workers.max(1))
        .map(|joined| reader_joined(joined, op))
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
