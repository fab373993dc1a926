//! `quire-blob`: the one object-store abstraction every other Quire layer stands on.
//!
//! The whole design rests on three conditional mutations behaving exactly alike on every
//! driver, so this crate owns the [`BlobStore`] contract, its error kinds, the drivers and the
//! wrappers that later layers compose around a driver.
//!
//! # The contract
//!
//! | operation | succeeds when | otherwise |
//! | --- | --- | --- |
//! | [`create`](BlobStore::create) | the key is absent; it then holds exactly these bytes | [`ErrorKind::Precondition`], nothing changed |
//! | [`get`](BlobStore::get), [`get_range`](BlobStore::get_range), [`head`](BlobStore::head) | the key exists | [`ErrorKind::NotFound`] |
//! | [`replace`](BlobStore::replace) | the key exists at exactly that generation | [`ErrorKind::Precondition`], nothing changed |
//! | [`delete`](BlobStore::delete) | the key exists at exactly that generation | [`ErrorKind::Precondition`], nothing changed |
//! | [`list`](BlobStore::list) | always: one page of at most [`MAX_LIST_PAGE`] keys under the prefix sorting strictly after `start_after`, in byte order | [`ErrorKind::Precondition`] for a bad cursor or argument |
//!
//! Invariants every driver keeps, and the conformance suite in `quire-conformance` checks:
//! - Two racing creates of one key: exactly one wins. Two racing replaces at one generation:
//!   exactly one wins.
//! - A failed call returns no partial value: there is no attribute, object or page to misuse.
//! - A mutation's attributes are what a read then shows, except `modified`, which may be
//!   up to [`MUTATION_DATE_SLACK`] later (never earlier).
//! - Returned bytes never alias stored state ([`Bytes`] is immutable and reference-counted).
//! - Keys: non-empty, not `.` or `..`, at most [`MAX_KEY_LEN`] bytes, UTF-8 (guaranteed by
//!   `&str`), no CR or LF. Prefixes follow the same text rules but may be empty, `.` or `..`.
//!
//! # Generations
//!
//! A [`Generation`] is an opaque token compared only for equality:
//! - memory driver: a process-wide counter, never reused;
//! - file driver: 128 random bits written into the object's header, so a re-created key never
//!   repeats an earlier generation, even across processes;
//! - S3: the object's ETag. For a single-part upload the ETag is the MD5 of the bytes, so a key
//!   deleted and re-created, or replaced, **with identical bytes** keeps the same generation
//!   ([`BlobStore::unique_generations`] is false). Callers that delete objects which may be
//!   rewritten with identical content (garbage collection) cannot rely on the generation
//!   alone, as `quire-checkpoint`'s generation fence explains;
//! - GCS: the object generation, unique per key for the life of the bucket.
//!
//! # Errors
//!
//! Every error is an [`Error`] naming the operation and the key (the prefix for `list`) and
//! carrying one [`ErrorKind`]; see that type for what each kind promises. Mutations whose
//! outcome is unknown (a lost response, a retried conditional request, a hedged create that met
//! itself) are [`ErrorKind::Ambiguous`] and must be decided by reading the key back; a driver
//! never reports such an outcome as a clean win or a clean loss.
//!
//! # Cancellation
//!
//! Dropping a future cancels it; a mutation dropped mid-flight may or may not have landed, and
//! a driver guarantees only that the key then holds either the old or the new bytes, never a
//! mix. [`Cancelable`] turns a cancellation token into errors: [`ErrorKind::Canceled`] when the
//! call was canceled before it reached the store, [`ErrorKind::Ambiguous`] when a mutation was
//! canceled while in flight.

mod cancel;
mod driver;
mod error;
pub mod file;
#[cfg(feature = "gcs")]
pub mod gcs;
mod hedged;
mod list;
pub mod memory;
mod metered;
#[cfg(any(feature = "s3", feature = "gcs"))]
mod range;
#[cfg(feature = "s3")]
pub mod s3;
mod simulated;
mod types;

use std::ops::Range;

use async_trait::async_trait;
pub use bytes::Bytes;

pub use cancel::Cancelable;
pub use driver::{Credentials, DriverConfig, OpenError};
pub use error::{Error, ErrorKind, Op, Result};
pub use hedged::{HedgeCounts, HedgePolicy, Hedged};
pub use list::{ListRequest, MAX_LIST_PAGE};
pub use metered::{MeterReading, Metered};
pub use simulated::{
    Calls, Fault, FaultCounts, FaultRule, FaultRuleId, Hold, LatencyProfile, Simulated, Trigger,
    real_gcs_latency,
};
pub use types::{
    Attributes, Generation, ListPage, MAX_KEY_LEN, MUTATION_DATE_SLACK, Object, validate_key,
    validate_prefix, validate_start_after,
};

/// An object store with create-if-absent, generation-conditioned replace and delete, and
/// ordered listing. Used as `Arc<dyn BlobStore>`; see the crate docs for the full contract.
#[async_trait]
pub trait BlobStore: Send + Sync + std::fmt::Debug {
    /// Creates `key` holding `data` if and only if the key is absent.
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes>;

    /// Reads the whole object.
    async fn get(&self, key: &str) -> Result<Object>;

    /// Reads `range` of the object's bytes. A range reaching past the end is cut at the end; a
    /// range starting past the end, or an inverted range, is [`ErrorKind::Precondition`].
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes>;

    /// Reads the object's attributes.
    async fn head(&self, key: &str) -> Result<Attributes>;

    /// Replaces the object only if it currently has `generation`; the new generation differs
    /// from every earlier one of the key (see the crate docs for S3's caveat).
    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes>;

    /// Deletes the object only if it currently has `generation`.
    async fn delete(&self, key: &str, generation: &Generation) -> Result<()>;

    /// One page of keys under `prefix` sorting strictly after `start_after` (empty: from the
    /// start), continuing from `cursor` when given. The cursor is bound to `prefix` and
    /// `start_after`; reusing it with others is [`ErrorKind::Precondition`].
    async fn list(&self, prefix: &str, start_after: &str, cursor: Option<&str>)
    -> Result<ListPage>;

    /// Whether every write gives its key a generation the key never had before, even when
    /// it stores the bytes already there (a replace with identical bytes, a re-create). True
    /// for memory, file and GCS; false for S3, whose generation is the MD5 of the bytes.
    /// Where it is false, a generation-conditioned delete cannot tell an object from an
    /// identical rewrite of it (see the generation fence in `quire-checkpoint`). Wrappers
    /// report their inner store's answer.
    fn unique_generations(&self) -> bool {
        true
    }
}

/// Lists every key under `prefix` after `start_after`, following cursors to the end.
pub async fn list_all(
    store: &dyn BlobStore,
    prefix: &str,
    start_after: &str,
) -> Result<Vec<Attributes>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.list(prefix, start_after, cursor.as_deref()).await?;
        out.extend(page.objects);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(out),
        }
    }
}
