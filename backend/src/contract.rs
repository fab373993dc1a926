//! The backend contract: what the server may ask of a world, whatever stores it.
//!
//! # Freshness
//!
//! A backend may be served by several replicas at once (the bucket store); every answer
//! comes from one committed state, and reads fall in two classes:
//!
//! - **exact** — [`Reader::get`], [`Reader::is_dir`], [`Reader::versions`],
//!   [`Reader::verify_chain`]: see every write acknowledged by **any** replica before the
//!   read began (the bucket store probes the log's next slot first).
//! - **catalog** — [`Reader::list_entries`], [`Reader::lookup_hash`], [`Reader::lookup`]:
//!   may miss a write acknowledged on another replica for at most [`SEARCH_FRESHNESS`]
//!   (one second).
//!
//! A replica's own acknowledged writes are visible to its next read of either class at once.
//! Write preconditions (expected version, topology, archive state, policy) are always judged
//! against every acknowledged write. A single-process backend (the file store) is exact for
//! every read.
//!
//! # Views
//!
//! A [`ReadView`] answers every read from **one** snapshot, chosen at its first read (with
//! that read's class), so one request never mixes states. Closing a view is idempotent; every
//! read after it fails with [`ErrorKind::ViewClosed`](crate::ErrorKind::ViewClosed).
//!
//! # Close
//!
//! [`Store::close`] stops background work (following, compaction, watches: the change hub is
//! closed), lets a write being committed finish, and refuses later writes with
//! [`ErrorKind::Closed`](crate::ErrorKind::Closed). Reads keep working. Idempotent.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use quire_index::{CatalogMatch, CatalogQuery};
use quire_log::build::PreparedWrite;
use quire_log::{DocPath, DocSummary, Hash};

use crate::changes::ChangeHub;
use crate::ctx::Ctx;
use crate::error::Result;
use crate::types::{
    ArchiveRequest, ArchiveResult, DirEntry, Document, ListOptions, StoreStats, VersionInfo,
    WriteRequest,
};

/// How far a catalog read may trail a write acknowledged on another replica.
pub const SEARCH_FRESHNESS: Duration = Duration::from_secs(1);

/// Reads of one world state. Every method takes the request context first; a done context
/// fails with [`ErrorKind::Canceled`](crate::ErrorKind::Canceled).
#[async_trait]
pub trait Reader: Send + Sync {
    /// Version `version` of the document (0: the current one). An archived document reads as
    /// archived through version 0 (FETCH answers `archived`); its pinned versions read as
    /// usual, not marked. Exact.
    async fn get(&self, ctx: &Ctx, path: &str, version: u64) -> Result<Document>;

    /// The current version's summary (version, ETag, body hash, archive state) without
    /// reading its bytes where the backend can: what a precondition needs to tell whether a
    /// document changed. Exact. The default reads the document.
    async fn current(&self, ctx: &Ctx, path: &str) -> Result<DocSummary> {
        let doc = self.get(ctx, path, 0).await?;
        let first = self
            .versions(ctx, path)
            .await?
            .last()
            .map_or(doc.version, |v| v.version);
        Ok(DocSummary {
            path: doc.path,
            version: doc.version,
            first,
            archived: doc.archived,
            etag: doc.etag,
            body_hash: doc.content_hash,
            modified: doc.modified,
        })
    }

    /// The immediate children of directory `dir` (`/` for the root): unique names in
    /// strictly increasing byte order, windowed by `options` (`after` exclusive, `limit`).
    /// Hidden names (a leading `.`, or `versions`) appear only with `include_hidden`; a child
    /// holding only archived documents (or only hidden ones) appears only with
    /// `include_archived` (never, for hidden ones) or `include_hidden` (which lists every
    /// child holding any document). Not a directory (a document, or nothing) → not found.
    /// Catalog class.
    async fn list_entries(
        &self,
        ctx: &Ctx,
        dir: &str,
        options: &ListOptions,
    ) -> Result<Vec<DirEntry>>;

    /// Whether `path` is a directory: `/` always; a document → false; nothing → not found.
    /// Exact.
    async fn is_dir(&self, ctx: &Ctx, path: &str) -> Result<bool>;

    /// The retained versions, newest first. Exact.
    async fn versions(&self, ctx: &Ctx, path: &str) -> Result<Vec<VersionInfo>>;

    /// The smallest path of a live (not archived) document whose current body hashes to
    /// `body_hash`. Catalog class.
    async fn lookup_hash(&self, ctx: &Ctx, body_hash: &Hash) -> Result<DocPath>;

    /// Checks the hash chain over the retained versions, oldest to newest: each version after
    /// the oldest names the hash of the previous one's stored bytes. A break is
    /// [`ErrorKind::Integrity`](crate::ErrorKind::Integrity) whose detail says
    /// `chain broken at version N` or `version N: missing previous-hash`. Exact.
    async fn verify_chain(&self, ctx: &Ctx, path: &str) -> Result<()>;

    /// LOOKUP: matches under the query's scope. Catalog mode follows `quire_index::catalog`;
    /// body mode (`quire_index::body`) answers section rows, each carrying its
    /// [`SectionHit`](crate::SectionHit), from a section index of exactly the pinned snapshot,
    /// or [`ErrorKind::BodyMatchUnavailable`](crate::ErrorKind::BodyMatchUnavailable) when no
    /// such index is ready within [`SEARCH_FRESHNESS`] (the caller then answers from the
    /// catalog and says so). Catalog class.
    async fn lookup(&self, ctx: &Ctx, query: &CatalogQuery) -> Result<Vec<CatalogMatch>>;
}

/// A [`Reader`] pinned to one snapshot at its first read, until [`ReadView::close`].
pub trait ReadView: Reader + Debug {
    /// Releases the snapshot; idempotent. Later reads fail with `ViewClosed`.
    fn close(&self);
}

/// A check run inside the commit, after the store's own checks — for writes: conflict,
/// archive state and no-op; for archive changes: not found and no-op — and before anything is
/// stored. `state` shows the world the change applies to (including, in a batch, the changes
/// committed before it). Its error is the write's answer, unchanged. A commit that is rebuilt
/// (a lost race) runs it again.
#[async_trait]
pub trait Precondition: Send + Sync + Debug {
    async fn check(&self, ctx: &Ctx, state: &dyn Reader, write: &PreparedWrite) -> Result<()>;
}

/// Where WATCH finds the world's changes.
pub trait ChangeSource {
    /// The change hub, or `None` when change tracking is off (WATCH unsupported).
    fn changes(&self) -> Option<Arc<ChangeHub>>;
}

/// Learns from peers how far the world's log has reached.
pub trait Follower {
    /// A peer replica committed through `sequence`: read ahead unless this store already
    /// serves it. Never blocks; a store whose reads are always current ignores it.
    fn follow(&self, sequence: u64);
}

/// A world: read views, the three writes, the change source, the follower and close.
///
/// Freshness (see the module docs): exact reads (`get`, `is_dir`, `versions`,
/// `verify_chain`) see every write acknowledged on any replica; catalog reads
/// (`list_entries`, `lookup_hash`, `lookup`) trail another replica's writes by at most
/// [`SEARCH_FRESHNESS`]; this store's own acknowledged writes are visible to both at once.
///
/// Writes are atomic and keep every index (listing, hash lookup, catalog) current; there is
/// no separate index API. A write whose context is already done is refused with
/// [`ErrorKind::Canceled`](crate::ErrorKind::Canceled) and stores nothing.
#[async_trait]
pub trait Store: ChangeSource + Follower + Send + Sync + Debug {
    /// A view for one request. `ctx` bounds acquiring it only.
    async fn open_view(&self, ctx: &Ctx) -> Result<Box<dyn ReadView>>;

    /// Writes a new version of the body and metadata given. Identical body and metadata to
    /// the current version → `NotModified` carrying it (nothing stored, precondition not
    /// run). Errors: `Conflict` (carrying the current document), `Archived`,
    /// `PathCollision`, `InvalidMetadata`, `InvalidContent`, `SizeLimit`, `Quota`,
    /// `ReadOnly`, `Closed`, `Canceled`, or the precondition's error.
    async fn publish(&self, ctx: &Ctx, request: WriteRequest) -> Result<Document>;

    /// Appends to the current body (joined with one newline unless it already ends with
    /// one), merging metadata (request keys win; `retention` is never inherited). The
    /// expected version is required and must be current. The returned document holds the
    /// joined body.
    async fn append(&self, ctx: &Ctx, request: WriteRequest) -> Result<Document>;

    /// Archives or unarchives; never writes a version. Already as asked → `changed: false`
    /// (precondition not run).
    async fn set_archived(&self, ctx: &Ctx, request: ArchiveRequest) -> Result<ArchiveResult>;

    /// Stops background work and refuses later writes; reads keep working. Idempotent.
    async fn close(&self);

    /// Counters of the store's own work since it opened, for metrics. Cheap; never blocks
    /// on storage. The default reports nothing.
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }
}
