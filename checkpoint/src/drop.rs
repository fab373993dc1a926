//! Dropping old checkpoints, and the shards and roots only they use.
//!
//! Kept: the newest `keep` checkpoints, and every checkpoint whose successor is younger than
//! the grace (a compactor building on it may still be running). A dropped checkpoint takes
//! its shards that no kept root names, then its root, then the checkpoint object, so a drop
//! cut short is resumed by the next one through the checkpoint object; a missing root means
//! its shards already went. Every delete is conditioned on the generation read, and only
//! objects older than the grace when the drop began are deleted: a writer that reuses stored
//! bytes older than half the grace rewrites them first (see the generation fence in
//! `objects`), so a delete racing it fails. Where generations are not unique (S3) a delete
//! is sent only within [`DELETE_WINDOW`] of reading the generation it names, and writers
//! let what they wrote settle before naming it. The genesis checkpoint is always kept.
//! History blocks, slots and blobs are not collected.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use quire_blob::{Attributes, BlobStore};
use quire_log::marker::GENESIS_SEQUENCE;
use quire_log::{Hash, WorldId};
use tokio::time::Instant;

use crate::error::{Error, Op, Result};
use crate::format::{Checkpoint, Root};
use crate::keys::{root_key, shard_key};
use crate::objects::{DELETE_WINDOW, get_retrying, head_retrying};
use crate::replica::list_checkpoints;

/// What a drop did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropReport {
    /// Checkpoints whose object was deleted.
    pub dropped: Vec<u64>,
    /// Checkpoints kept.
    pub kept: Vec<u64>,
    /// Shards and roots deleted.
    pub deleted: u64,
    /// Objects left because they were younger than the grace or rewritten meanwhile.
    pub spared: u64,
}

fn older_than(attrs: &Attributes, grace: Duration, now: SystemTime) -> bool {
    now.duration_since(attrs.modified)
        .is_ok_and(|age| age > grace)
}

/// Which listed checkpoints (oldest first) a drop at `now` keeps: the genesis checkpoint
/// (two small objects, so a whole replay can always be asked for), the newest `keep`, and
/// every one whose successor is younger than the grace.
pub fn kept(
    listed: &[(u64, Attributes)],
    keep: usize,
    grace: Duration,
    now: SystemTime,
) -> Vec<bool> {
    let n = listed.len();
    (0..n)
        .map(|i| {
            listed[i].0 == GENESIS_SEQUENCE
                || i + keep >= n
                || !older_than(&listed[i + 1].1, grace, now)
        })
        .collect()
}

async fn read_root(
    store: &dyn BlobStore,
    prefix: &str,
    checkpoint: &Checkpoint,
) -> Result<Option<(Root, Attributes)>> {
    let key = root_key(prefix, &checkpoint.root);
    match get_retrying(store, &key).await {
        Ok(object) => {
            if Hash::of(&object.data) != checkpoint.root {
                return Err(Error::integrity(
                    Op::Drop,
                    key,
                    "root bytes do not hash to their name",
                ));
            }
            Ok(Some((
                Root::decode(&key, &object.data, checkpoint)?,
                object.attributes,
            )))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(Error::storage(Op::Drop, e)),
    }
}

async fn read_checkpoint_object(
    store: &dyn BlobStore,
    key: &str,
    sequence: u64,
) -> Result<Option<Checkpoint>> {
    match get_retrying(store, key).await {
        Ok(object) => Ok(Some(Checkpoint::decode(key, sequence, &object.data)?)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(Error::storage(Op::Drop, e)),
    }
}

/// Deletes the object `attrs` describes (read at `read`) at its generation if it is older
/// than the grace. Where generations are not unique, attributes read more than
/// [`DELETE_WINDOW`] ago are read again first (see `objects`). Returns whether the object
/// is gone.
async fn delete_if_old(
    store: &dyn BlobStore,
    attrs: &Attributes,
    read: Instant,
    grace: Duration,
    now: SystemTime,
) -> Result<bool> {
    let mut attrs = attrs.clone();
    let mut read = read;
    loop {
        if !older_than(&attrs, grace, now) {
            return Ok(false);
        }
        if store.unique_generations() || read.elapsed() <= DELETE_WINDOW {
            break;
        }
        attrs = match head_retrying(store, &attrs.key).await {
            Ok(fresh) => fresh,
            Err(e) if e.is_not_found() => return Ok(true),
            Err(e) => return Err(Error::storage(Op::Drop, e)),
        };
        read = Instant::now();
    }
    match store.delete(&attrs.key, &attrs.generation).await {
        Ok(()) => Ok(true),
        Err(e) if e.is_precondition() => Ok(false),
        // A refused or unanswered delete leaves the object (and what names it) for the
        // next drop: one transient fault does not stop this one.
        Err(e) if e.kind().is_retryable() => {
            tracing::debug!(key = %attrs.key, error = %e, "delete left for the next drop");
            Ok(false)
        }
        Err(e) => Err(Error::storage(Op::Drop, e)),
    }
}

/// Deletes `key` (read now for its generation) if it is older than the grace; a missing
/// object counts as gone.
async fn delete_key_if_old(
    store: &dyn BlobStore,
    key: &str,
    grace: Duration,
    now: SystemTime,
) -> Result<bool> {
    let read = Instant::now();
    match head_retrying(store, key).await {
        Ok(attrs) => delete_if_old(store, &attrs, read, grace, now).await,
        Err(e) if e.is_not_found() => Ok(true),
        Err(e) => Err(Error::storage(Op::Drop, e)),
    }
}

/// Drops the checkpoints of `world` that neither the newest `keep` nor the grace protects.
/// `now` is when the drop begins.
pub async fn drop_old(
    store: &dyn BlobStore,
    prefix: &str,
    world: WorldId,
    keep: usize,
    grace: Duration,
    now: SystemTime,
) -> Result<DropReport> {
    let listed_at = Instant::now();
    let listed = list_checkpoints(store, prefix, Op::Drop).await?;
    let keeps = kept(&listed, keep.max(1), grace, now);
    let mut report = DropReport::default();
    let mut used: HashSet<Hash> = HashSet::new();
    for ((sequence, attrs), keep) in listed.iter().zip(&keeps) {
        if !keep {
            continue;
        }
        report.kept.push(*sequence);
        // A kept checkpoint that is unreadable or incomplete protects nothing: cold start
        // and the compactor pass over it, so it does not stop the drop either.
        let checkpoint = match read_checkpoint_object(store, &attrs.key, *sequence).await {
            Ok(Some(checkpoint)) => checkpoint,
            Ok(None) => {
                tracing::warn!(key = %attrs.key, "a kept checkpoint vanished");
                continue;
            }
            Err(e) if e.is_integrity() => {
                tracing::warn!(error = %e, "a kept checkpoint is unreadable");
                continue;
            }
            Err(e) => return Err(e),
        };
        used.insert(checkpoint.root);
        let root = match read_root(store, prefix, &checkpoint).await {
            Ok(Some((root, _))) => root,
            Ok(None) => {
                tracing::warn!(key = %attrs.key, "a kept checkpoint's root is missing");
                continue;
            }
            Err(e) if e.is_integrity() => {
                tracing::warn!(error = %e, "a kept checkpoint's root is unreadable");
                continue;
            }
            Err(e) => return Err(e),
        };
        used.extend(
            root.tiers
                .iter()
                .flat_map(|t| t.shards.iter().flatten().copied()),
        );
    }
    for ((sequence, attrs), keep) in listed.iter().zip(&keeps) {
        if *keep {
            continue;
        }
        let checkpoint = match read_checkpoint_object(store, &attrs.key, *sequence).await {
            Ok(Some(checkpoint)) => checkpoint,
            Ok(None) => continue,
            Err(e) if e.is_integrity() => {
                // Its root and shards cannot be known; the object itself goes.
                if delete_if_old(store, attrs, listed_at, grace, now).await? {
                    report.dropped.push(*sequence);
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if checkpoint.world != world {
            return Err(Error::integrity(
                Op::Drop,
                &attrs.key,
                "checkpoint of another world",
            ));
        }
        let mut root_gone = true;
        let root_read = Instant::now();
        let root = if used.contains(&checkpoint.root) {
            None
        } else {
            match read_root(store, prefix, &checkpoint).await {
                Ok(root) => root,
                // An unreadable root names nothing a drop can know: it stays, the
                // checkpoint object goes.
                Err(e) if e.is_integrity() => None,
                Err(e) => return Err(e),
            }
        };
        if let Some((root, root_attrs)) = root {
            let mut shards_gone = true;
            let shards: HashSet<Hash> = root
                .tiers
                .iter()
                .flat_map(|t| t.shards.iter().flatten().copied())
                .filter(|h| !used.contains(h))
                .collect();
            for hash in shards {
                if delete_key_if_old(store, &shard_key(prefix, &hash), grace, now).await? {
                    report.deleted += 1;
                } else {
                    report.spared += 1;
                    shards_gone = false;
                }
            }
            root_gone =
                shards_gone && delete_if_old(store, &root_attrs, root_read, grace, now).await?;
            if root_gone {
                report.deleted += 1;
            } else {
                report.spared += 1;
            }
        }
        if root_gone && delete_if_old(store, attrs, listed_at, grace, now).await? {
            report.dropped.push(*sequence);
        }
    }
    Ok(report)
}
