//! Creating and reading checkpoint objects.
//!
//! Every checkpoint object is written with create-if-absent. A create that finds the name
//! taken reads it back: identical bytes are a reuse (a racing compactor or an orphan of a
//! crashed one), other bytes are an integrity error. A reused object older than the fence's
//! age is rewritten in place first (a generation-matched replace), so a drop that listed its
//! old generation fails its delete; a drop that already won makes the loop create it again.
//! This is the generation fence: writers never wait for a drop and a drop never deletes what
//! a writer is about to name.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use quire_blob::BlobStore;
use quire_log::Hash;

use crate::error::{Error, Op, Result};

/// How many times a create is retried before giving up.
const ATTEMPTS: u32 = 12;

/// What a write found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// The object was created.
    Created,
    /// Identical bytes were already stored, young enough to leave alone.
    Reused,
    /// Identical bytes were stored long enough ago that a drop might be deleting them; they
    /// were rewritten so that drop's delete fails.
    Freshened,
}

/// When a reused object must be rewritten: stored more than `freshen_after` before `now`.
#[derive(Clone, Copy, Debug)]
pub struct Fence {
    pub now: SystemTime,
    pub freshen_after: Duration,
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(10 << attempt.min(6))
}

/// Creates `key` holding `bytes`, or reuses identical stored bytes under the fence.
pub async fn put(
    store: &dyn BlobStore,
    key: &str,
    bytes: Bytes,
    fence: Fence,
    op: Op,
) -> Result<Put> {
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(backoff(attempt)).await;
        }
        match store.create(key, bytes.clone()).await {
            Ok(_) => return Ok(Put::Created),
            Err(e) if e.is_precondition() || e.kind().is_retryable() => {}
            Err(e) => return Err(Error::storage(op, e)),
        }
        let stored = match store.get(key).await {
            Ok(object) => object,
            Err(e) if e.is_not_found() || e.kind().is_retryable() => continue,
            Err(e) => return Err(Error::storage(op, e)),
        };
        if stored.data != bytes {
            return Err(Error::integrity(
                op,
                key,
                "the name holds other bytes than this checkpoint derives",
            ));
        }
        let age = fence
            .now
            .duration_since(stored.attributes.modified)
            .unwrap_or_default();
        if age <= fence.freshen_after {
            return Ok(Put::Reused);
        }
        match store
            .replace(key, &stored.attributes.generation, bytes.clone())
            .await
        {
            Ok(_) => return Ok(Put::Freshened),
            Err(e) if e.is_precondition() || e.kind().is_retryable() => continue,
            Err(e) => return Err(Error::storage(op, e)),
        }
    }
    Err(Error::new(
        op,
        key,
        crate::error::ErrorKind::Storage,
        format!("gave up after {ATTEMPTS} attempts"),
    ))
}

/// Reads the content-addressed object at `key`, which must hash to `hash`; a missing object
/// is an integrity error (something names it).
pub async fn read_verified(store: &dyn BlobStore, key: &str, hash: &Hash, op: Op) -> Result<Bytes> {
    let object = store.get(key).await.map_err(|e| {
        if e.is_not_found() {
            Error::integrity(op, key, "a referenced object is missing")
        } else {
            Error::storage(op, e)
        }
    })?;
    if Hash::of(&object.data) != *hash {
        return Err(Error::integrity(
            op,
            key,
            "object bytes do not hash to their name",
        ));
    }
    Ok(object.data)
}
