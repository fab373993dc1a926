//! Reads of one pinned world snapshot, shared by every backend built on the log's world
//! model: a backend supplies a [`SnapshotSource`] (where snapshots and version bytes come
//! from) and gets [`SnapshotView`], a complete [`ReadView`], from it.
//!
//! Every read validates what it touches: version bytes must hash to their record and decode
//! to the version asked for, so a damaged store answers [`ErrorKind::Integrity`], never wrong
//! content.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use quire_index::{Admission, CatalogIndex, CatalogMatch, CatalogQuery, MatchMode};
use quire_log::commit::PendingVersions;
use quire_log::path::clean;
use quire_log::version::StoredVersion;
use quire_log::{DocPath, DocState, DocSummary, Hash, VersionRecord, WorldState};
use tokio::sync::OnceCell;

use crate::contract::{ReadView, Reader};
use crate::ctx::Ctx;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::search::BodySearch;
use crate::types::{DirEntry, Document, ListOptions, VersionInfo};

/// A world state with its catalog: what one view reads.
///
/// The catalog is built from the state on first use and then carried forward one changed
/// document at a time by [`Snapshot::advance`], so a store pays the full build once (at
/// cold start, or never if nobody looks up) and a snapshot made only to show a precondition
/// the state costs nothing.
#[derive(Debug)]
pub struct Snapshot {
    pub state: WorldState,
    catalog: OnceLock<CatalogIndex>,
}

impl Snapshot {
    /// A snapshot of `state`; its catalog is built when first needed.
    pub fn new(state: WorldState) -> Snapshot {
        Snapshot {
            state,
            catalog: OnceLock::new(),
        }
    }

    /// A snapshot of `state` whose catalog is `catalog` (which must index exactly it).
    pub fn with_catalog(state: WorldState, catalog: CatalogIndex) -> Snapshot {
        Snapshot {
            state,
            catalog: OnceLock::from(catalog),
        }
    }

    /// The catalog of every live document.
    pub fn catalog(&self) -> &CatalogIndex {
        self.catalog.get_or_init(|| {
            let started = tokio::time::Instant::now();
            let catalog = CatalogIndex::from_state(&self.state);
            tracing::info!(
                sequence = self.state.sequence(),
                build_ms = started.elapsed().as_millis() as u64,
                "catalog index built"
            );
            catalog
        })
    }

    /// Where a body lookup reads its rows' catalog fields: the catalog when it is built,
    /// else the state (the same answers, without building a catalog of every document).
    pub fn admission(&self) -> &dyn Admission {
        match self.catalog.get() {
            Some(catalog) => catalog,
            None => &self.state,
        }
    }

    /// The snapshot after `next` replaced this state, where only `paths` changed. The
    /// catalog follows incrementally when this snapshot's was built.
    pub fn advance<'a>(
        &self,
        next: WorldState,
        paths: impl IntoIterator<Item = &'a DocPath>,
    ) -> Snapshot {
        match self.catalog.get() {
            Some(catalog) => {
                let mut catalog = catalog.clone();
                catalog.sync(&next, paths);
                Snapshot::with_catalog(next, catalog)
            }
            None => Snapshot::new(next),
        }
    }
}

/// The freshness class of the read that pins a view (see the contract's freshness rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Freshness {
    /// Sees every write acknowledged on any replica.
    Exact,
    /// May trail another replica's writes by at most `SEARCH_FRESHNESS`.
    Catalog,
}

impl Freshness {
    fn of(op: Op) -> Freshness {
        match op {
            Op::ListEntries | Op::LookupHash | Op::Lookup => Freshness::Catalog,
            _ => Freshness::Exact,
        }
    }
}

/// Where a backend's snapshots and version bytes come from.
#[async_trait]
pub trait SnapshotSource: Send + Sync + fmt::Debug {
    /// The snapshot a view pins when its first read has class `freshness`.
    async fn snapshot(&self, ctx: &Ctx, freshness: Freshness) -> Result<Arc<Snapshot>>;

    /// The stored bytes of `record`, a version of `path` (the caller checks them against the
    /// record's hash).
    async fn read_version(
        &self,
        ctx: &Ctx,
        path: &DocPath,
        record: &VersionRecord,
    ) -> Result<Bytes>;

    /// The records of every retained version of `doc`, oldest first. The default serves
    /// documents whose retained versions are all in `doc.recent`; a backend whose snapshots
    /// fold history elsewhere (checkpoint history blocks) overrides it.
    async fn records(&self, _ctx: &Ctx, doc: &DocState) -> Result<Vec<VersionRecord>> {
        let records: Vec<VersionRecord> = doc.recent.iter().cloned().collect();
        let complete = records.first().map(|r| r.version) == Some(doc.first)
            && records.last().map(|r| r.version) == Some(doc.current)
            && records.len() as u64 == doc.current - doc.first + 1;
        if !complete {
            return Err(Error::new(
                Op::Versions,
                doc.path.as_str(),
                ErrorKind::Integrity,
                "the snapshot does not hold every retained version",
            ));
        }
        Ok(records)
    }

    /// The world's body search, when the backend has one (body lookups are unavailable
    /// without it).
    fn body_search(&self) -> Option<&BodySearch> {
        None
    }

    /// The record of one retained version of `doc`.
    async fn record(&self, ctx: &Ctx, doc: &DocState, version: u64) -> Result<VersionRecord> {
        if let Some(record) = doc.recent_version(version) {
            return Ok(record.clone());
        }
        self.records(ctx, doc)
            .await?
            .into_iter()
            .find(|r| r.version == version)
            .ok_or_else(|| {
                Error::new(
                    Op::Get,
                    doc.path.as_str(),
                    ErrorKind::Integrity,
                    format!("no record of retained version {version}"),
                )
            })
    }
}

/// A read view over a [`SnapshotSource`], pinned at its first read.
pub struct SnapshotView {
    source: Arc<dyn SnapshotSource>,
    pinned: OnceCell<Arc<Snapshot>>,
    closed: AtomicBool,
}

impl fmt::Debug for SnapshotView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotView")
            .field("sequence", &self.pinned.get().map(|s| s.state.sequence()))
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

fn not_found(op: Op, key: &str, detail: &str) -> Error {
    Error::new(op, key, ErrorKind::NotFound, detail)
}

fn integrity(op: Op, key: &str, detail: impl Into<String>) -> Error {
    Error::new(op, key, ErrorKind::Integrity, detail)
}

fn doc_path(op: Op, raw: &str) -> Result<DocPath> {
    DocPath::parse(raw).map_err(|why| not_found(op, raw, &why.to_string()))
}

impl SnapshotView {
    /// A view that pins its snapshot at its first read.
    pub fn new(source: Arc<dyn SnapshotSource>) -> SnapshotView {
        SnapshotView {
            source,
            pinned: OnceCell::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// A view of `snapshot` (what a precondition is shown).
    pub fn pinned(source: Arc<dyn SnapshotSource>, snapshot: Arc<Snapshot>) -> SnapshotView {
        SnapshotView {
            source,
            pinned: OnceCell::new_with(Some(snapshot)),
            closed: AtomicBool::new(false),
        }
    }

    async fn snapshot(&self, ctx: &Ctx, op: Op, key: &str) -> Result<Arc<Snapshot>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::new(
                op,
                key,
                ErrorKind::ViewClosed,
                "the view is closed",
            ));
        }
        ctx.check(op, key)?;
        let snapshot = self
            .pinned
            .get_or_try_init(|| ctx.run(op, key, self.source.snapshot(ctx, Freshness::of(op))))
            .await?;
        Ok(snapshot.clone())
    }

    async fn doc(&self, ctx: &Ctx, op: Op, raw: &str) -> Result<(Arc<Snapshot>, Arc<DocState>)> {
        let snapshot = self.snapshot(ctx, op, raw).await?;
        let path = doc_path(op, raw)?;
        let doc = snapshot
            .state
            .doc(&path)
            .cloned()
            .ok_or_else(|| not_found(op, raw, "no such document"))?;
        Ok((snapshot, doc))
    }

    /// Reads and checks one version's bytes.
    async fn version_bytes(
        &self,
        ctx: &Ctx,
        op: Op,
        doc: &DocState,
        record: &VersionRecord,
    ) -> Result<Bytes> {
        let key = doc.path.as_str();
        let bytes = ctx
            .run(op, key, self.source.read_version(ctx, &doc.path, record))
            .await?;
        Ok(bytes)
    }
}

#[async_trait]
impl Reader for SnapshotView {
    async fn get(&self, ctx: &Ctx, raw: &str, requested: u64) -> Result<Document> {
        let op = Op::Get;
        let (_, doc) = self.doc(ctx, op, raw).await?;
        let version = if requested == 0 {
            doc.current
        } else {
            requested
        };
        if version < doc.first || version > doc.current {
            return Err(not_found(op, raw, &format!("no version {version}")));
        }
        let record = ctx
            .run(op, raw, self.source.record(ctx, &doc, version))
            .await?;
        let bytes = self.version_bytes(ctx, op, &doc, &record).await?;
        if Hash::of(&bytes) != record.hash {
            return Err(integrity(
                op,
                raw,
                format!("version {version}: stored bytes do not match their hash"),
            ));
        }
        let stored = StoredVersion::decode(&bytes)
            .map_err(|why| integrity(op, raw, format!("version {version}: {why}")))?;
        if stored.version != version || Hash::of(stored.body.as_bytes()) != record.body_hash {
            return Err(integrity(
                op,
                raw,
                format!("version {version}: stored bytes disagree with the record"),
            ));
        }
        Ok(Document::from_stored(
            doc.path.clone(),
            stored,
            record.hash,
            record.modified,
            requested == 0 && doc.archived,
        ))
    }

    /// From the snapshot's record alone: no bytes read.
    async fn current(&self, ctx: &Ctx, raw: &str) -> Result<DocSummary> {
        let (_, doc) = self.doc(ctx, Op::Get, raw).await?;
        Ok(doc.summary())
    }

    async fn list_entries(
        &self,
        ctx: &Ctx,
        raw: &str,
        options: &ListOptions,
    ) -> Result<Vec<DirEntry>> {
        let op = Op::ListEntries;
        let snapshot = self.snapshot(ctx, op, raw).await?;
        let dir = clean(raw).map_err(|why| not_found(op, raw, &why.to_string()))?;
        let is_doc = dir != "/" && snapshot.state.doc(&doc_path(op, &dir)?).is_some();
        if is_doc || !snapshot.state.is_dir(&dir) {
            return Err(not_found(op, raw, "not a directory"));
        }
        Ok(if options.include_hidden {
            snapshot
                .state
                .list_everything(&dir, &options.after, options.limit)
        } else {
            snapshot.state.list(
                &dir,
                &options.after,
                options.limit,
                options.include_archived,
            )
        })
    }

    async fn is_dir(&self, ctx: &Ctx, raw: &str) -> Result<bool> {
        let op = Op::IsDir;
        let snapshot = self.snapshot(ctx, op, raw).await?;
        let dir = clean(raw).map_err(|why| not_found(op, raw, &why.to_string()))?;
        if dir == "/" {
            return Ok(true);
        }
        if snapshot.state.doc(&doc_path(op, &dir)?).is_some() {
            return Ok(false);
        }
        if snapshot.state.is_dir(&dir) {
            return Ok(true);
        }
        Err(not_found(op, raw, "no such document or directory"))
    }

    async fn versions(&self, ctx: &Ctx, raw: &str) -> Result<Vec<VersionInfo>> {
        let op = Op::Versions;
        let (_, doc) = self.doc(ctx, op, raw).await?;
        let records = ctx.run(op, raw, self.source.records(ctx, &doc)).await?;
        Ok(records
            .iter()
            .rev()
            .map(|r| VersionInfo {
                version: r.version,
                modified: r.modified,
                etag: r.hash,
            })
            .collect())
    }

    async fn lookup_hash(&self, ctx: &Ctx, body_hash: &Hash) -> Result<DocPath> {
        let op = Op::LookupHash;
        let key = body_hash.content_hash();
        let snapshot = self.snapshot(ctx, op, &key).await?;
        snapshot
            .state
            .lookup_hash(body_hash)
            .cloned()
            .ok_or_else(|| not_found(op, &key, "no live document has this body"))
    }

    async fn verify_chain(&self, ctx: &Ctx, raw: &str) -> Result<()> {
        let op = Op::VerifyChain;
        let (_, doc) = self.doc(ctx, op, raw).await?;
        let records = ctx.run(op, raw, self.source.records(ctx, &doc)).await?;
        let mut previous: Option<Hash> = None;
        let mut mismatched: Option<u64> = None;
        for record in &records {
            let bytes = self.version_bytes(ctx, op, &doc, record).await?;
            let actual = Hash::of(&bytes);
            if let Some(previous) = previous {
                match StoredVersion::decode(&bytes).ok().and_then(|v| v.previous) {
                    None => {
                        return Err(integrity(
                            op,
                            raw,
                            format!("version {}: missing previous-hash", record.version),
                        ));
                    }
                    Some(named) if named != previous => {
                        return Err(integrity(
                            op,
                            raw,
                            format!("chain broken at version {}", record.version),
                        ));
                    }
                    Some(_) => {}
                }
            }
            if actual != record.hash && mismatched.is_none() {
                mismatched = Some(record.version);
            }
            previous = Some(actual);
        }
        match mismatched {
            Some(version) => Err(integrity(
                op,
                raw,
                format!("version {version}: stored bytes do not match their recorded hash"),
            )),
            None => Ok(()),
        }
    }

    async fn lookup(&self, ctx: &Ctx, query: &CatalogQuery) -> Result<Vec<CatalogMatch>> {
        let op = Op::Lookup;
        let snapshot = self.snapshot(ctx, op, &query.scope).await?;
        if query.mode == MatchMode::Body {
            let Some(search) = self.source.body_search() else {
                return Err(Error::new(
                    op,
                    &query.scope,
                    ErrorKind::BodyMatchUnavailable,
                    "this backend has no section index",
                ));
            };
            return search.lookup(ctx, &self.source, &snapshot, query).await;
        }
        Ok(snapshot.catalog().lookup(query))
    }
}

impl ReadView for SnapshotView {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// A backend [`Precondition`](crate::Precondition) where the log's committer asks for one:
/// it shows the precondition the state the write builds on (through a [`SnapshotView`] over
/// `source`) and carries its error through the log unchanged — converting the log's error
/// back with `Error::from` returns the precondition's own error.
pub struct LogPrecondition {
    inner: Arc<dyn crate::contract::Precondition>,
    source: Arc<dyn SnapshotSource>,
    ctx: Ctx,
}

impl LogPrecondition {
    pub fn new(
        inner: Arc<dyn crate::contract::Precondition>,
        source: Arc<dyn SnapshotSource>,
        ctx: Ctx,
    ) -> LogPrecondition {
        LogPrecondition { inner, source, ctx }
    }
}

impl fmt::Debug for LogPrecondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogPrecondition")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl quire_log::commit::CommitCheck for LogPrecondition {
    async fn check(
        &self,
        state: &WorldState,
        write: &quire_log::build::PreparedWrite,
        pending: &PendingVersions,
    ) -> quire_log::Result<()> {
        let source = Arc::new(WithPending {
            inner: self.source.clone(),
            pending: pending.clone(),
        });
        let view = SnapshotView::pinned(source, Arc::new(Snapshot::new(state.clone())));
        self.inner
            .check(&self.ctx, &view, write)
            .await
            .map_err(|e| {
                let op = if write.archived.is_some() {
                    quire_log::Op::Archive
                } else {
                    quire_log::Op::Publish
                };
                quire_log::Error::new(
                    op,
                    write.path.as_str(),
                    quire_log::ErrorKind::Rejected,
                    e.detail().to_owned(),
                )
                .with_source(e)
            })
    }
}

/// A source that reads versions still in the committer's pipeline from its memory: their
/// records in the state a precondition judges say "blob" whatever their slot will say, and
/// the bucket may hold neither yet.
#[derive(Debug)]
struct WithPending {
    inner: Arc<dyn SnapshotSource>,
    pending: PendingVersions,
}

#[async_trait]
impl SnapshotSource for WithPending {
    async fn snapshot(&self, ctx: &Ctx, freshness: Freshness) -> Result<Arc<Snapshot>> {
        self.inner.snapshot(ctx, freshness).await
    }

    async fn read_version(
        &self,
        ctx: &Ctx,
        path: &DocPath,
        record: &VersionRecord,
    ) -> Result<Bytes> {
        match self.pending.get(&record.hash) {
            Some(bytes) => Ok(bytes),
            None => self.inner.read_version(ctx, path, record).await,
        }
    }

    async fn records(&self, ctx: &Ctx, doc: &DocState) -> Result<Vec<VersionRecord>> {
        self.inner.records(ctx, doc).await
    }

    fn body_search(&self) -> Option<&BodySearch> {
        self.inner.body_search()
    }

    async fn record(&self, ctx: &Ctx, doc: &DocState, version: u64) -> Result<VersionRecord> {
        self.inner.record(ctx, doc, version).await
    }
}

#[cfg(test)]
mod tests {
    use quire_log::WorldId;
    use quire_log::build::PreparedWrite;
    use quire_log::commit::CommitCheck as _;

    use super::*;
    use crate::contract::Precondition;

    #[derive(Debug)]
    struct Empty;

    #[async_trait]
    impl SnapshotSource for Empty {
        async fn snapshot(&self, _: &Ctx, _: Freshness) -> Result<Arc<Snapshot>> {
            Ok(Arc::new(Snapshot::new(WorldState::genesis(WorldId(
                [7; 16],
            )))))
        }

        async fn read_version(&self, _: &Ctx, path: &DocPath, _: &VersionRecord) -> Result<Bytes> {
            Err(not_found(Op::Get, path.as_str(), "nothing stored"))
        }
    }

    #[derive(Debug)]
    struct RefuseUnlessRootIsADir;

    #[async_trait]
    impl Precondition for RefuseUnlessRootIsADir {
        async fn check(&self, ctx: &Ctx, state: &dyn Reader, write: &PreparedWrite) -> Result<()> {
            let found = state.lookup(ctx, &CatalogQuery::new("*")).await?;
            if state.is_dir(ctx, "/").await? && found.is_empty() {
                return Err(Error::rejected(
                    Op::Publish,
                    write.path.as_str(),
                    "seen, refused",
                ));
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_log_precondition_shows_the_state_and_returns_the_error_unchanged() {
        let bridge = LogPrecondition::new(
            Arc::new(RefuseUnlessRootIsADir),
            Arc::new(Empty),
            Ctx::new(),
        );
        let write = PreparedWrite {
            path: DocPath::parse("/a.md").unwrap(),
            content: Some(("x".into(), Default::default())),
            archived: None,
        };
        let state = WorldState::genesis(WorldId([7; 16]));
        let err = Error::from(
            bridge
                .check(&state, &write, &PendingVersions::default())
                .await
                .unwrap_err(),
        );
        assert_eq!(err.rejection_message(), Some("seen, refused"));
        assert_eq!(err.key(), "/a.md");
    }

    #[tokio::test]
    async fn views_pin_at_the_first_read_and_refuse_after_close() {
        let view = SnapshotView::new(Arc::new(Empty));
        let ctx = Ctx::new();
        assert!(view.is_dir(&ctx, "/").await.unwrap());
        assert_eq!(
            view.is_dir(&ctx, "/x").await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
        let body = view
            .lookup(&ctx, &CatalogQuery::new("*").mode(MatchMode::Body))
            .await;
        assert_eq!(body.unwrap_err().kind(), ErrorKind::BodyMatchUnavailable);
        view.close();
        assert_eq!(
            view.is_dir(&ctx, "/").await.unwrap_err().kind(),
            ErrorKind::ViewClosed
        );
    }
}
