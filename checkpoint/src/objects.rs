//! Creating and reading checkpoint objects.
//!
//! Every checkpoint object is written with create-if-absent. A create that finds the name
//! taken reads it back: identical bytes are a reuse (a racing compactor or an orphan of a
//! crashed one), other bytes are an integrity error. A reused object older than the fence's
//! age is rewritten in place first (a generation-matched replace), so a drop that listed its
//! old generation fails its delete; a drop that already won makes the loop create it again.
//! This is the generation fence: writers never wait for a drop and a drop never deletes what
//! a writer is about to name.
//!
//! The fence needs a rewrite to change the generation. Where it does not
//! ([`BlobStore::unique_generations`] is false: S3, whose ETag is the MD5 of the bytes), a
//! drop's delete can land after a writer rewrote the object, so two more rules hold there:
//! - a drop sends a delete only within [`DELETE_WINDOW`] of reading the generation it names
//!   (`drop`), so a delete can land at most that long (plus one request) after the drop
//!   last saw the object old;
//! - a writer, after writing the objects a checkpoint names and before naming them, waits
//!   [`Fence::settle`] (longer than that window and a request) and reads each one again,
//!   creating any that a drop deleted meanwhile ([`settle`]). Every object it then names was
//!   written after every drop that saw it old stopped sending deletes, and is young to every
//!   later drop.
//!
//! The fence's ages are measured at the moment of each write: `now` is the local clock when
//! the run began plus the monotonic time since, and never earlier than the newest
//! modification time the bucket reported during the run, so neither a long run nor a local
//! clock behind the bucket's makes an old object look young.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use quire_blob::BlobStore;
use quire_log::Hash;

use crate::error::{Error, Op, Result};

/// How many times a create is retried before giving up.
const ATTEMPTS: u32 = 12;

/// The longest a drop waits between reading an object's generation and sending the delete
/// that names it, where generations are not unique.
pub const DELETE_WINDOW: Duration = Duration::from_secs(30);

/// How long a writer lets written objects settle before naming them, where generations are
/// not unique: the delete window, a request's time limit (30 s for the S3 driver) and as
/// much again to spare.
pub const SETTLE: Duration = Duration::from_secs(120);

/// A difference between the local clock and the bucket's worth a warning: it eats into the
/// fence's margin (half the drop grace).
const SKEW_WARNING: Duration = Duration::from_secs(60);

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

/// When a reused object must be rewritten: stored more than `freshen_after` before now.
#[derive(Clone, Debug)]
pub struct Fence {
    /// The local clock when the run began.
    pub started: SystemTime,
    /// The same moment on the monotonic clock.
    pub began: tokio::time::Instant,
    pub freshen_after: Duration,
    /// Where generations are not unique: how long written objects settle before they are
    /// named (see the module docs).
    pub settle: Duration,
    /// The newest modification time the bucket reported during the run (seconds since the
    /// epoch; 0: none yet).
    bucket_seen: Arc<AtomicU64>,
}

impl Fence {
    /// A fence for a run beginning now, at `now` by the local clock.
    pub fn new(now: SystemTime, freshen_after: Duration) -> Fence {
        Fence {
            started: now,
            began: tokio::time::Instant::now(),
            freshen_after,
            settle: SETTLE,
            bucket_seen: Arc::default(),
        }
    }

    /// The same fence with another settle time.
    pub fn settling(mut self, settle: Duration) -> Fence {
        self.settle = settle;
        self
    }

    /// Now, by the local clock as the run began plus the time since, but never before a
    /// modification time the bucket reported.
    pub fn now(&self) -> SystemTime {
        let local = self.started + self.began.elapsed();
        local.max(self.bucket_time().unwrap_or(UNIX_EPOCH))
    }

    /// The newest modification time the bucket reported during the run.
    pub fn bucket_time(&self) -> Option<SystemTime> {
        match self.bucket_seen.load(Ordering::Relaxed) {
            0 => None,
            secs => Some(UNIX_EPOCH + Duration::from_secs(secs)),
        }
    }

    /// Notes a modification time the bucket reported. For an object just written
    /// (`written`), warns once the clocks differ by more than a minute either way.
    fn observe(&self, modified: SystemTime, written: bool) {
        let secs = modified
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let before = self.bucket_seen.fetch_max(secs, Ordering::Relaxed);
        let local = self.started + self.began.elapsed();
        let skew = match modified.duration_since(local) {
            Ok(ahead) => ahead,
            Err(behind) => behind.duration(),
        };
        if written && before == 0 && skew > SKEW_WARNING {
            tracing::warn!(
                skew_secs = skew.as_secs(),
                "the local clock and the bucket's differ; the checkpoint fence's margin shrinks by as much"
            );
        }
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(10 << attempt.min(6))
}

/// Creates `key` holding `bytes`, or reuses identical stored bytes under the fence. Other
/// stored bytes are an integrity error.
pub async fn put(
    store: &dyn BlobStore,
    key: &str,
    bytes: Bytes,
    fence: &Fence,
    op: Op,
) -> Result<Put> {
    put_object(store, key, bytes, fence, op, false).await
}

/// [`put`] for a content-addressed object (`bytes` hash to the name): stored bytes that
/// differ cannot hash to the name, so they are damage, and are replaced (counted as
/// [`Put::Freshened`]). A damaged shard thus costs one checkpoint's replay, not every later
/// checkpoint that needs it.
pub async fn put_addressed(
    store: &dyn BlobStore,
    key: &str,
    bytes: Bytes,
    fence: &Fence,
    op: Op,
) -> Result<Put> {
    put_object(store, key, bytes, fence, op, true).await
}

async fn put_object(
    store: &dyn BlobStore,
    key: &str,
    bytes: Bytes,
    fence: &Fence,
    op: Op,
    addressed: bool,
) -> Result<Put> {
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(backoff(attempt)).await;
        }
        match store.create(key, bytes.clone()).await {
            Ok(attrs) => {
                fence.observe(attrs.modified, true);
                return Ok(Put::Created);
            }
            Err(e) if e.is_precondition() || e.kind().is_retryable() => {}
            Err(e) => return Err(Error::storage(op, e)),
        }
        let stored = match store.get(key).await {
            Ok(object) => object,
            Err(e) if e.is_not_found() || e.kind().is_retryable() => continue,
            Err(e) => return Err(Error::storage(op, e)),
        };
        let damaged = stored.data != bytes;
        if damaged && !addressed {
            return Err(Error::integrity(
                op,
                key,
                "the name holds other bytes than this checkpoint derives",
            ));
        }
        fence.observe(stored.attributes.modified, false);
        let age = fence
            .now()
            .duration_since(stored.attributes.modified)
            .unwrap_or_default();
        if !damaged && age <= fence.freshen_after {
            return Ok(Put::Reused);
        }
        if damaged {
            tracing::warn!(%key, "a stored object does not hash to its name; rewriting it");
        }
        match store
            .replace(key, &stored.attributes.generation, bytes.clone())
            .await
        {
            Ok(attrs) => {
                fence.observe(attrs.modified, true);
                return Ok(Put::Freshened);
            }
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

/// Where generations are not unique, makes sure a drop cannot delete the written `objects`
/// (key, bytes) once they are named: waits the fence's settle time, then reads each one and
/// creates again any a drop deleted meanwhile (waiting again after each such round). Returns
/// how many were created again. Where generations are unique the generation fence already
/// holds, and this returns at once.
pub async fn settle(
    store: &dyn BlobStore,
    objects: &[(String, Bytes)],
    fence: &Fence,
    workers: usize,
    op: Op,
) -> Result<u64> {
    use futures::{StreamExt, TryStreamExt};
    if store.unique_generations() || objects.is_empty() {
        return Ok(0);
    }
    let mut recreated = 0;
    let mut pending: Vec<usize> = (0..objects.len()).collect();
    while !pending.is_empty() {
        tokio::time::sleep(fence.settle).await;
        let missing: Vec<usize> = futures::stream::iter(pending)
            .map(|i| {
                let key = objects[i].0.clone();
                async move {
                    match store.head(&key).await {
                        Ok(_) => Ok(None),
                        Err(e) if e.is_not_found() => Ok(Some(i)),
                        Err(e) => Err(Error::storage(op, e)),
                    }
                }
            })
            .buffer_unordered(workers.max(1))
            .try_filter_map(|found| async move { Ok(found) })
            .try_collect()
            .await?;
        for &i in &missing {
            let (key, bytes) = &objects[i];
            tracing::warn!(%key, "a drop deleted an object this checkpoint names; creating it again");
            put_addressed(store, key, bytes.clone(), fence, op).await?;
            recreated += 1;
        }
        pending = missing;
    }
    Ok(recreated)
}

/// How many times a read refused as throttled or unavailable is tried: a transient fault
/// must not fail a cold start that reads thousands of objects.
const READ_ATTEMPTS: u32 = 6;

/// Runs `call` (a read) until it succeeds or fails otherwise than throttled or unavailable,
/// at most [`READ_ATTEMPTS`] times, pausing between attempts.
pub(crate) async fn retrying<T, E, F, Fut>(
    mut call: F,
    kind: impl Fn(&E) -> Option<quire_blob::ErrorKind>,
) -> std::result::Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, E>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Err(e) if attempt + 1 < READ_ATTEMPTS && kind(&e).is_some_and(|k| k.is_retryable()) => {
                attempt += 1;
                tokio::time::sleep(backoff(attempt)).await;
            }
            outcome => return outcome,
        }
    }
}

/// A whole object, read with [`retrying`].
pub(crate) async fn get_retrying(
    store: &dyn BlobStore,
    key: &str,
) -> quire_blob::Result<quire_blob::Object> {
    retrying(|| store.get(key), |e: &quire_blob::Error| Some(e.kind())).await
}

/// An object's attributes, read with [`retrying`].
pub(crate) async fn head_retrying(
    store: &dyn BlobStore,
    key: &str,
) -> quire_blob::Result<quire_blob::Attributes> {
    retrying(|| store.head(key), |e: &quire_blob::Error| Some(e.kind())).await
}

/// Reads the content-addressed object at `key`, which must hash to `hash`; a missing object
/// is an integrity error (something names it).
pub async fn read_verified(store: &dyn BlobStore, key: &str, hash: &Hash, op: Op) -> Result<Bytes> {
    let object = get_retrying(store, key).await.map_err(|e| {
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
