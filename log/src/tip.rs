//! Finding the log's tip and replaying slots.
//!
//! The tip is found by probing: read the slot named `sequence + 1`; if it is absent the state
//! is current. When it is present, a listing from that name finds every later slot at once (a
//! strongly consistent listing names every slot created before it began), and the slots are
//! read in parallel and applied in order. Any gap, foreign key under `log/`, slot that fails
//! to decode or apply, or listed slot missing on read is an integrity error: nothing built on
//! it may be served.

use futures::{StreamExt, TryStreamExt};
use quire_blob::BlobStore;

use crate::error::{Error, Op, Result};
use crate::keys;
use crate::slot::{EncodedSlot, MAX_SLOT_ENTRIES};
use crate::state::WorldState;

/// How many slots replay reads at once: over a bucket's ~30 ms gets, 1024 slots take 16
/// waves of reads, about what applying them takes. Slots read ahead of the one applying are
/// held in memory (each at most the slot's inline budget).
pub const REPLAY_READERS: usize = 64;

/// Reads and decodes the slot named `sequence`; `None` when no slot has that name.
pub async fn read_slot(
    store: &dyn BlobStore,
    prefix: &str,
    sequence: u64,
) -> Result<Option<EncodedSlot>> {
    let key = keys::slot_key(prefix, sequence);
    match store.get(&key).await {
        Ok(object) => EncodedSlot::decode(&key, sequence, object.data).map(Some),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(Error::storage(Op::Read, e)),
    }
}

/// Brings `state` to the log's tip: probes the next slot name and, when it exists, replays
/// every slot after it. On error `state` keeps the progress made. Returns how many slots
/// were applied.
pub async fn catch_up(
    store: &dyn BlobStore,
    prefix: &str,
    state: &mut WorldState,
) -> Result<usize> {
    catch_up_observed(store, prefix, state, |_| {}).await
}

/// [`catch_up`], showing each slot to `observe` after it applied.
pub async fn catch_up_observed(
    store: &dyn BlobStore,
    prefix: &str,
    state: &mut WorldState,
    mut observe: impl FnMut(&EncodedSlot),
) -> Result<usize> {
    let Some(next) = read_slot(store, prefix, state.sequence() + 1).await? else {
        return Ok(0);
    };
    state.apply_in_place(&next)?;
    observe(&next);
    Ok(1 + replay_observed(store, prefix, state, observe).await?)
}

/// Applies every slot after `state.sequence()` found by listing the log. On error `state`
/// keeps the progress made. Returns how many slots were applied.
pub async fn replay(store: &dyn BlobStore, prefix: &str, state: &mut WorldState) -> Result<usize> {
    replay_observed(store, prefix, state, |_| {}).await
}

/// [`replay`], showing each slot to `observe` after it applied.
pub async fn replay_observed(
    store: &dyn BlobStore,
    prefix: &str,
    state: &mut WorldState,
    mut observe: impl FnMut(&EncodedSlot),
) -> Result<usize> {
    let log = keys::log_prefix(prefix);
    let after = keys::slot_key(prefix, state.sequence());
    let listed = quire_blob::list_all(store, &log, &after)
        .await
        .map_err(|e| Error::storage(Op::Read, e))?;
    let mut sequences = Vec::with_capacity(listed.len());
    for attrs in &listed {
        let sequence = keys::parse_slot_key(prefix, &attrs.key).ok_or_else(|| {
            Error::integrity(
                Op::Read,
                attrs.key.clone(),
                "object under log/ is not a slot",
            )
        })?;
        sequences.push(sequence);
    }
    let mut reads = futures::stream::iter(sequences)
        .map(|sequence| async move {
            let slot = read_slot(store, prefix, sequence).await?;
            slot.ok_or_else(|| {
                Error::integrity(
                    Op::Read,
                    keys::slot_key(prefix, sequence),
                    "listed slot is missing",
                )
            })
        })
        .buffered(REPLAY_READERS);
    let mut applied = 0;
    while let Some(slot) = reads.try_next().await? {
        if slot.slot.first != state.sequence() + 1 {
            return Err(Error::integrity(
                Op::Read,
                keys::slot_key(prefix, slot.slot.first),
                format!("gap in the log after sequence {}", state.sequence()),
            ));
        }
        state.apply_in_place(&slot)?;
        observe(&slot);
        applied += 1;
    }
    Ok(applied)
}

/// Finds the slot holding `sequence` (its first at most `sequence`, its last at least) with
/// one bounded listing: slots hold at most [`MAX_SLOT_ENTRIES`] entries, so it starts at most
/// that many names below.
pub async fn find_slot_holding(
    store: &dyn BlobStore,
    prefix: &str,
    sequence: u64,
) -> Result<Option<EncodedSlot>> {
    let low = sequence.saturating_sub(MAX_SLOT_ENTRIES as u64);
    let log = keys::log_prefix(prefix);
    let after = keys::slot_key(prefix, low);
    let page = store
        .list(&log, &after, None)
        .await
        .map_err(|e| Error::storage(Op::Read, e))?;
    let candidate = page
        .objects
        .iter()
        .filter_map(|a| keys::parse_slot_key(prefix, &a.key))
        .take_while(|s| *s <= sequence)
        .last();
    let Some(first) = candidate else {
        return Ok(None);
    };
    let slot = read_slot(store, prefix, first).await?;
    Ok(slot.filter(|s| s.slot.last() >= sequence))
}
