//! History blocks: folding a document's versions into absolute 256-version blocks, reading
//! ahead the blocks the next checkpoint's folds will read, and reading version records and
//! version bytes back.
//!
//! A document's history is the list of blocks tiling its retained versions `first..=current`
//! (block `k` holds versions `256k+1..=256(k+1)`, clipped to the retained range). Folding
//! reuses every block whose range is unchanged and builds the others from the document's
//! recent versions and, where a block gains versions or loses pruned ones, the old block's
//! records. Version bytes are never copied: an inline version's record names its slot and
//! the byte range inside it. A reference names a block stored alone by its hash, or a block
//! inside a history pack by where it lies there ([`crate::format::PackedBlock`]); which one
//! is the checkpoint writer's to decide (see `write`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use quire_blob::BlobStore;
use quire_log::model::HistoryBlockRef;
use quire_log::{DocState, Hash, VersionRecord};
use tokio::sync::Mutex;

use crate::error::{Error, Op, Result};
use crate::format::{PackedBlock, block_ranges, decode_block, encode_block, path_hash};
use crate::keys::{history_key, pack_key};
use crate::objects::{read_verified, retrying};

/// Blocks read during one job, so two documents' folds never read one block twice.
#[derive(Debug, Default)]
pub(crate) struct BlockCache {
    blocks: Mutex<Blocks>,
}

impl BlockCache {
    /// A cache holding what was read ahead (see [`ReadAhead`]).
    pub(crate) fn from_read_ahead(ahead: &ReadAhead) -> BlockCache {
        let epochs = ahead.epochs.lock().expect("read-ahead lock poisoned");
        let blocks = epochs
            .values()
            .flatten()
            .map(|(h, b)| (*h, b.clone()))
            .collect();
        BlockCache {
            blocks: Mutex::new(blocks),
        }
    }
}

/// Blocks a replica that writes checkpoints reads as each history epoch ends, by the epoch's
/// cut: the ones the next checkpoint's folds of that epoch's documents would read (each
/// document's block that gains its new versions). The checkpoint then waits on none of these
/// reads, which came spread over the epochs instead of at once. Entries are named by their
/// reference, so they are only ever used for the block they are.
#[derive(Debug, Default)]
pub(crate) struct ReadAhead {
    epochs: std::sync::Mutex<BTreeMap<u64, Blocks>>,
}

/// Decoded history blocks by their reference's name.
type Blocks = HashMap<Hash, Arc<Vec<VersionRecord>>>;

/// Blocks held ahead at most: about four minutes of writes at 250 a second.
const READ_AHEAD_BLOCKS: usize = 1 << 16;
/// Reads in flight for one epoch's read-ahead.
const READ_AHEAD_READERS: usize = 32;

impl ReadAhead {
    fn held(&self) -> usize {
        let epochs = self.epochs.lock().expect("read-ahead lock poisoned");
        epochs.values().map(Blocks::len).sum()
    }

    pub(crate) fn clear(&self) {
        self.epochs
            .lock()
            .expect("read-ahead lock poisoned")
            .clear();
    }

    /// Forgets the blocks of epochs ending at or before `cut` (a checkpoint sealed them).
    pub(crate) fn forget_through(&self, cut: u64) {
        let mut epochs = self.epochs.lock().expect("read-ahead lock poisoned");
        *epochs = epochs.split_off(&(cut + 1));
    }

    /// Reads the blocks the folds of `docs` (an epoch ending at `cut`, as they stood there)
    /// will read. Failed reads are left to the fold, which reads again and reports.
    pub(crate) async fn read(
        self: Arc<Self>,
        store: Arc<dyn BlobStore>,
        prefix: String,
        cut: u64,
        docs: Vec<Arc<DocState>>,
    ) {
        if self.held() >= READ_AHEAD_BLOCKS {
            return;
        }
        let wanted = docs
            .iter()
            .flat_map(|doc| {
                let path = path_hash(doc.path.as_str());
                fold_reads(doc).into_iter().map(move |r| (path, r))
            })
            .collect::<Vec<_>>();
        let (store, prefix) = (&store, &prefix);
        let mut reads = futures::stream::iter(wanted)
            .map(|(path, r)| async move { (r.hash, read_block(&**store, prefix, path, &r).await) })
            .buffer_unordered(READ_AHEAD_READERS);
        while let Some((hash, read)) = reads.next().await {
            if let Ok(records) = read {
                let mut epochs = self.epochs.lock().expect("read-ahead lock poisoned");
                epochs
                    .entry(cut)
                    .or_default()
                    .insert(hash, Arc::new(records));
            }
        }
    }
}

/// The blocks [`fold`] reads for `doc`: for each block whose range is not kept as it is,
/// the old blocks holding its versions before the recent ones.
pub(crate) fn fold_reads(doc: &DocState) -> Vec<HistoryBlockRef> {
    if folded(doc) {
        return Vec::new();
    }
    let recent_first = recent_first(doc);
    let mut reads: Vec<HistoryBlockRef> = Vec::new();
    for (lo, hi) in block_ranges(doc.first, doc.current) {
        if kept_block(doc, recent_first, lo, hi).is_some() {
            continue;
        }
        for version in lo..=hi.min(recent_first.saturating_sub(1)) {
            if let Some(r) = holding(doc, version)
                && !reads.contains(r)
            {
                reads.push(*r);
            }
        }
    }
    reads
}

/// Whether `doc`'s history already tiles its retained versions: nothing to fold.
fn folded(doc: &DocState) -> bool {
    doc.recent.is_empty() && tiles(&doc.history, doc.first, doc.current)
}

/// The first of `doc`'s recent versions (none: past every version).
fn recent_first(doc: &DocState) -> u64 {
    doc.recent.front().map_or(u64::MAX, |r| r.version)
}

/// The stored block a fold keeps as it is for the range `lo..=hi`: one covering exactly
/// that range, none of whose versions is recent.
fn kept_block(doc: &DocState, recent_first: u64, lo: u64, hi: u64) -> Option<&HistoryBlockRef> {
    if hi >= recent_first {
        return None;
    }
    doc.history.iter().find(|r| r.first == lo && r.last == hi)
}

/// The stored block holding `version` of `doc`.
fn holding(doc: &DocState, version: u64) -> Option<&HistoryBlockRef> {
    doc.history
        .iter()
        .find(|r| r.first <= version && version <= r.last)
}

/// A document's history as a checkpoint names it, and the blocks that must be stored first.
#[derive(Debug)]
pub(crate) struct FoldedHistory {
    pub refs: Arc<[HistoryBlockRef]>,
    pub new_blocks: Vec<(Hash, Bytes)>,
}

/// Whether `history` exactly tiles `first..=current`.
fn tiles(history: &[HistoryBlockRef], first: u64, current: u64) -> bool {
    let mut expected = block_ranges(first, current);
    history
        .iter()
        .all(|r| expected.next() == Some((r.first, r.last)))
        && expected.next().is_none()
}

/// The bytes of the block `r` names: a range read of its pack for a packed block (checked
/// against the name's share of its blake3), else the whole object stored under its hash.
pub(crate) async fn read_block_bytes(
    store: &dyn BlobStore,
    prefix: &str,
    r: &HistoryBlockRef,
) -> Result<(String, Bytes)> {
    if let Some(packed) = PackedBlock::from_name(&r.hash) {
        let key = pack_key(prefix, &packed.pack);
        let start = u64::from(packed.offset);
        let range = start..start + u64::from(packed.len);
        match retrying(
            || store.get_range(&key, range.clone()),
            |e: &quire_blob::Error| Some(e.kind()),
        )
        .await
        {
            Ok(bytes) if packed.holds(&bytes) => return Ok((key, bytes)),
            Ok(_) => {
                return Err(Error::integrity(
                    Op::Read,
                    key,
                    "a packed history block does not match its name",
                ));
            }
            // A block stored alone whose hash happens to start like a packed name.
            Err(e) if e.is_not_found() || e.is_precondition() => {}
            Err(e) => return Err(Error::storage(Op::Read, e)),
        }
    }
    let key = history_key(prefix, &r.hash);
    let bytes = read_verified(store, &key, &r.hash, Op::Read).await?;
    Ok((key, bytes))
}

/// Reads the block `r` of the document whose path hashes to `path`.
pub(crate) async fn read_block(
    store: &dyn BlobStore,
    prefix: &str,
    path: Hash,
    r: &HistoryBlockRef,
) -> Result<Vec<VersionRecord>> {
    let (key, bytes) = read_block_bytes(store, prefix, r).await?;
    decode_block(&key, &bytes, path, r.first, r.last)
}

async fn cached_block(
    store: &dyn BlobStore,
    prefix: &str,
    path: Hash,
    r: &HistoryBlockRef,
    cache: &BlockCache,
) -> Result<Arc<Vec<VersionRecord>>> {
    if let Some(found) = cache.blocks.lock().await.get(&r.hash) {
        return Ok(found.clone());
    }
    let records = Arc::new(read_block(store, prefix, path, r).await?);
    cache.blocks.lock().await.insert(r.hash, records.clone());
    Ok(records)
}

/// Folds `doc`'s retained versions into blocks.
pub(crate) async fn fold(
    store: &dyn BlobStore,
    prefix: &str,
    doc: &DocState,
    cache: &BlockCache,
) -> Result<FoldedHistory> {
    if folded(doc) {
        return Ok(FoldedHistory {
            refs: doc.history.clone(),
            new_blocks: Vec::new(),
        });
    }
    let path = path_hash(doc.path.as_str());
    let recent_first = recent_first(doc);
    let mut refs = Vec::new();
    let mut new_blocks = Vec::new();
    for (lo, hi) in block_ranges(doc.first, doc.current) {
        if let Some(old) = kept_block(doc, recent_first, lo, hi) {
            refs.push(*old);
            continue;
        }
        let mut records = Vec::with_capacity((hi - lo + 1) as usize);
        for version in lo..=hi {
            let record = if version >= recent_first {
                doc.recent
                    .get((version - recent_first) as usize)
                    .filter(|r| r.version == version)
                    .cloned()
            } else {
                let Some(old) = holding(doc, version) else {
                    return Err(Error::integrity(
                        Op::Write,
                        doc.path.as_str(),
                        format!("version {version} is in neither history nor recent versions"),
                    ));
                };
                let block = cached_block(store, prefix, path, old, cache).await?;
                block.get((version - old.first) as usize).cloned()
            };
            let Some(record) = record else {
                return Err(Error::integrity(
                    Op::Write,
                    doc.path.as_str(),
                    format!("version {version} is missing from the document's records"),
                ));
            };
            records.push(record);
        }
        let bytes = encode_block(path, &records);
        let hash = Hash::of(&bytes);
        refs.push(HistoryBlockRef {
            first: lo,
            last: hi,
            hash,
        });
        new_blocks.push((hash, bytes));
    }
    Ok(FoldedHistory {
        refs: refs.into(),
        new_blocks,
    })
}

/// The record of `version` of `doc`: from its recent versions, else the one block holding it.
/// `None` for a version outside the retained range.
pub async fn version_record(
    store: &dyn BlobStore,
    prefix: &str,
    doc: &DocState,
    version: u64,
) -> Result<Option<VersionRecord>> {
    if version < doc.first || version > doc.current {
        return Ok(None);
    }
    if let Some(record) = doc.recent_version(version) {
        return Ok(Some(record.clone()));
    }
    let Some(r) = holding(doc, version) else {
        return Err(Error::integrity(
            Op::Read,
            doc.path.as_str(),
            format!("no history block holds version {version}"),
        ));
    };
    let records = read_block(store, prefix, path_hash(doc.path.as_str()), r).await?;
    Ok(records.into_iter().nth((version - r.first) as usize))
}

/// Every retained record of `doc`, oldest first, reading each block once.
pub async fn all_records(
    store: &dyn BlobStore,
    prefix: &str,
    doc: &DocState,
) -> Result<Vec<VersionRecord>> {
    let path = path_hash(doc.path.as_str());
    let recent_first = doc.recent.front().map_or(u64::MAX, |r| r.version);
    let mut out = Vec::new();
    for r in doc.history.iter() {
        if r.first >= recent_first || r.last < doc.first {
            continue;
        }
        for record in read_block(store, prefix, path, r).await? {
            if record.version >= doc.first && record.version < recent_first {
                out.push(record);
            }
        }
    }
    out.extend(
        doc.recent
            .iter()
            .filter(|r| r.version >= doc.first)
            .cloned(),
    );
    let expected: Vec<u64> = (doc.first..=doc.current).collect();
    if out.iter().map(|r| r.version).collect::<Vec<_>>() != expected
        || out.last() != Some(&doc.head)
    {
        return Err(Error::integrity(
            Op::Read,
            doc.path.as_str(),
            "history does not hold every retained version",
        ));
    }
    Ok(out)
}
