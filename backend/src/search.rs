//! Body search for backends built on snapshots: a world's section index, one immutable
//! version per snapshot sequence, built lazily, kept current and evicted when idle.
//!
//! - **Lazy.** Nothing is indexed until a world's first body search; that search starts the
//!   worker, which reads the body of every live document of the snapshot it was offered.
//! - **Kept current.** While the worker runs, every snapshot the store installs (its own
//!   commits and peers' it replayed) is offered to it ([`BodySearch::offer`]); it advances
//!   the index by the documents that changed — reading only bodies whose hash, title or tags
//!   changed — and publishes a version for that sequence. More than [`MAX_QUEUED`] waiting
//!   snapshots collapse into one step to the newest. Nothing of this runs on the commit path:
//!   offering is a queue push.
//! - **Exact or nothing.** A body search answers from the version of exactly the sequence its
//!   view pinned. It waits at most [`SearchOptions::wait`] for it; when none comes in time,
//!   or the worker moved past that sequence without building it, the search fails with
//!   [`ErrorKind::BodyMatchUnavailable`] and the caller answers from the catalog.
//! - **Retained.** A version stays for [`SearchOptions::retain`] after a newer one replaced
//!   it, so a request pinned to it meanwhile still finds it.
//! - **Evicted.** After [`SearchOptions::evict_after`] without a body search the worker drops
//!   every version and stops; the next body search builds again.
//! - **Damaged bodies** (unreadable, or not hashing to their record) are logged and leave
//!   their document without sections: recall degrades, nothing fails.
//!
//! - **Stored, plus a delta.** A version is a commit of the world's stored index (tantivy:
//!   files in [`SearchOptions::cache_dir`], or memory without one) plus an in-memory delta of
//!   the documents changed since ([`IndexVersion`]). The worker folds the delta into the store
//!   and commits when it holds [`SearchOptions::fold_documents`] documents or is
//!   [`SearchOptions::fold_every`] old, so a new snapshot costs only its changed documents and
//!   the store commits at most about once per `fold_every`. Memory stays bounded by the
//!   writer's budget and the delta; the store's files are in the page cache.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use quire_index::{
    CatalogMatch, CatalogQuery, EntryKey, Export, Import, IndexVersion, SectionStore, StoreError,
};
use quire_log::version::StoredVersion;
use quire_log::{DocPath, DocState, Hash, WorldState};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::contract::SEARCH_FRESHNESS;
use crate::ctx::Ctx;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::snapshot::{Snapshot, SnapshotSource};

/// Where a world keeps copies of its section index for cold replicas (the bucket store's
/// [`crate::search_shelf::BucketShelf`]). Every call runs off the commit path.
#[async_trait]
pub trait IndexShelf: Send + Sync + fmt::Debug {
    /// Stores a copy of `store`'s last commit (`export`), which covers `sequence`.
    async fn put(&self, sequence: u64, store: Arc<SectionStore>, export: Export) -> Result<()>;
    /// Copies the newest stored index into `into`, verified object by object; `None` when
    /// there is none, or when the newest covers `refused` (a copy found damaged after it
    /// was taken).
    async fn take(&self, into: Import, refused: Option<u64>) -> Result<Option<Taken>>;
    /// Drops copies older than the oldest kept checkpoint and parts nothing names; returns
    /// the objects deleted.
    async fn collect(&self, oldest_kept: u64) -> Result<u64>;
}

/// A copy of a section index, taken from a shelf.
pub struct Taken {
    /// The sequence of the snapshot it covers.
    pub sequence: u64,
    /// The opened index.
    pub store: SectionStore,
    /// The download of the files that arrive after it opened (a read fetches the parts it
    /// touches first): done when every part is written, failed when one is damaged or
    /// cannot be had. `None` when every file came before it opened.
    pub rest: Option<futures::future::BoxFuture<'static, Result<()>>>,
}

impl fmt::Debug for Taken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Taken")
            .field("sequence", &self.sequence)
            .field("late", &self.rest.is_some())
            .finish_non_exhaustive()
    }
}

/// Waiting snapshots beyond which the worker steps straight to the newest.
pub const MAX_QUEUED: usize = 1024;

/// How a world's body search behaves. [`Default`] gives production values.
#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// How long a body search waits for the version of its snapshot.
    pub wait: Duration,
    /// Idle time after which the index is dropped.
    pub evict_after: Duration,
    /// How long a superseded version stays (the request timeout).
    pub retain: Duration,
    /// Bodies read at once while building.
    pub readers: usize,
    /// Where the stored index keeps its files (a fresh directory inside it per build,
    /// removed on eviction); `None` keeps them in memory.
    pub cache_dir: Option<PathBuf>,
    /// Delta size at which the worker folds it into the stored index.
    pub fold_documents: usize,
    /// Delta age at which the worker folds it into the stored index.
    pub fold_every: Duration,
    /// How old a part of a copy on the shelf must be before a collection may take it when no
    /// manifest names it (a copy being written names its parts only when done).
    pub shelf_grace: Duration,
    /// The bytes a copy's files are cut into on the shelf. Every replica of a world must use
    /// the same (a part is keyed by its file and its number, and a reader cuts by its own);
    /// tests shrink it so small files span many parts.
    pub copy_part_bytes: usize,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            wait: SEARCH_FRESHNESS,
            evict_after: Duration::from_secs(30 * 60),
            retain: Duration::from_secs(30),
            readers: 16,
            cache_dir: None,
            fold_documents: 4096,
            fold_every: Duration::from_secs(2),
            shelf_grace: Duration::from_secs(3600),
            copy_part_bytes: crate::search_shelf::PART_BYTES,
        }
    }
}

/// What the worker has, for tests and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchStatus {
    /// Whether a worker runs (an index is built or being built).
    pub active: bool,
    /// The sequences that have a version, ascending.
    pub sequences: Vec<u64>,
    /// The newest sequence the worker finished (built, or stepped past).
    pub reached: u64,
    /// Full builds since the store opened.
    pub builds: u64,
    /// Evictions since the store opened.
    pub evictions: u64,
    /// Deltas folded into the stored index since the store opened.
    pub folds: u64,
    /// Builds that started from a copy on the shelf instead of every body.
    pub downloads: u64,
    /// Downloaded copies whose late files (positions and stored sections, which arrive
    /// after the copy answers) all arrived and passed their checksums.
    pub copies_whole: u64,
    /// Copies put on the shelf.
    pub exports: u64,
    /// Shelf collections finished (after checkpoint drops).
    pub collections: u64,
}

#[derive(Debug)]
struct Version {
    index: IndexVersion,
    /// When a newer version replaced it.
    superseded: Option<Instant>,
}

#[derive(Debug, Default)]
struct Published {
    versions: BTreeMap<u64, Version>,
    status: SearchStatus,
}

/// The worker's inbox and what decides eviction.
#[derive(Debug)]
struct Run {
    queue: VecDeque<Arc<Snapshot>>,
    /// The newest sequence queued or built.
    offered: u64,
    last_search: Instant,
}

struct SearchInner {
    options: SearchOptions,
    shelf: Option<Arc<dyn IndexShelf>>,
    /// A checkpoint was written since the last copy: put the next commit on the shelf.
    export_due: std::sync::atomic::AtomicBool,
    /// The oldest kept checkpoint to collect the shelf by once the copy is put.
    collect_after: Mutex<Option<u64>>,
    /// The sequence of a copy found damaged after it was taken: not taken again.
    refused_copy: Mutex<Option<u64>>,
    run: Mutex<Option<Run>>,
    wake: Notify,
    published: Arc<watch::Sender<Published>>,
    stop: CancellationToken,
}

/// A world's body search. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct BodySearch {
    inner: Arc<SearchInner>,
}

impl fmt::Debug for BodySearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodySearch")
            .field("options", &self.inner.options)
            .field("status", &self.status())
            .finish()
    }
}

impl Default for BodySearch {
    fn default() -> Self {
        BodySearch::new(SearchOptions::default())
    }
}

fn unavailable(scope: &str, detail: impl Into<String>) -> Error {
    Error::new(Op::Lookup, scope, ErrorKind::BodyMatchUnavailable, detail)
}

impl BodySearch {
    pub fn new(options: SearchOptions) -> BodySearch {
        BodySearch::with_shelf(options, None)
    }

    /// A body search that downloads its first index from `shelf` when it holds one, and puts
    /// a copy there after each checkpoint ([`BodySearch::checkpointed`]).
    pub fn with_shelf(options: SearchOptions, shelf: Option<Arc<dyn IndexShelf>>) -> BodySearch {
        BodySearch {
            inner: Arc::new(SearchInner {
                options,
                shelf,
                export_due: Default::default(),
                collect_after: Mutex::new(None),
                refused_copy: Mutex::new(None),
                run: Mutex::new(None),
                wake: Notify::new(),
                published: Arc::new(watch::Sender::new(Published::default())),
                stop: CancellationToken::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Run>> {
        self.inner.run.lock().expect("search lock poisoned")
    }

    /// A snapshot the store now serves: queued for the worker when one runs. Never blocks.
    pub fn offer(&self, snapshot: &Arc<Snapshot>) {
        let mut run = self.lock();
        if let Some(run) = run.as_mut() {
            queue(run, snapshot);
            self.inner.wake.notify_one();
        }
    }

    /// A checkpoint was written and checkpoints older than `oldest_kept` dropped: the shelf
    /// is collected, and a running index puts a copy of its next commit there. Never blocks.
    pub fn checkpointed(&self, oldest_kept: u64) {
        let Some(shelf) = self.inner.shelf.clone() else {
            return;
        };
        if self.lock().is_some() {
            // The worker puts its copy first, then collects (so it never takes the parts
            // of the copy it is writing).
            let mut collect = self
                .inner
                .collect_after
                .lock()
                .expect("search lock poisoned");
            *collect = Some(collect.map_or(oldest_kept, |c| c.max(oldest_kept)));
            self.inner
                .export_due
                .store(true, std::sync::atomic::Ordering::Relaxed);
            self.inner.wake.notify_one();
            return;
        }
        tokio::spawn(collect(shelf, self.inner.published.clone(), oldest_kept));
    }

    /// What the worker has now.
    pub fn status(&self) -> SearchStatus {
        self.inner.published.borrow().status.clone()
    }

    /// Waits until the status satisfies `done` (a signal for tests; no polling).
    pub async fn wait_until(&self, done: impl Fn(&SearchStatus) -> bool) {
        let mut rx = self.inner.published.subscribe();
        let _ = rx.wait_for(|p| done(&p.status)).await;
    }

    /// Stops the worker and drops the index; later searches are unavailable.
    pub fn close(&self) {
        self.inner.stop.cancel();
        self.inner.wake.notify_one();
    }

    /// Answers a body lookup on `snapshot` (the view's pinned one), from the version of its
    /// sequence. Starts the worker (reading bodies through `source`) when none runs.
    pub async fn lookup(
        &self,
        ctx: &Ctx,
        source: &Arc<dyn SnapshotSource>,
        snapshot: &Arc<Snapshot>,
        query: &CatalogQuery,
    ) -> Result<Vec<CatalogMatch>> {
        if self.inner.stop.is_cancelled() {
            return Err(unavailable(&query.scope, "body search is closed"));
        }
        let sequence = snapshot.state.sequence();
        {
            let mut run = self.lock();
            match run.as_mut() {
                Some(run) => {
                    run.last_search = Instant::now();
                    queue(run, snapshot);
                }
                None => {
                    let mut fresh = Run {
                        queue: VecDeque::new(),
                        offered: 0,
                        last_search: Instant::now(),
                    };
                    queue(&mut fresh, snapshot);
                    *run = Some(fresh);
                    self.inner.published.send_modify(|p| {
                        p.status.active = true;
                        p.status.builds += 1;
                    });
                    tokio::spawn(work(self.inner.clone(), Arc::downgrade(source)));
                }
            }
        }
        self.inner.wake.notify_one();
        let mut rx = self.inner.published.subscribe();
        let deadline = Instant::now() + self.inner.options.wait;
        let index = loop {
            {
                let published = rx.borrow_and_update();
                if let Some(version) = published.versions.get(&sequence) {
                    break version.index.clone();
                }
                if published.status.reached >= sequence {
                    return Err(unavailable(
                        &query.scope,
                        format!("no section index of sequence {sequence}"),
                    ));
                }
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    return Err(unavailable(&query.scope, "body search stopped"));
                },
                () = tokio::time::sleep_until(deadline) => {
                    return Err(unavailable(
                        &query.scope,
                        format!("the section index of sequence {sequence} is not ready"),
                    ));
                }
                () = ctx.token().cancelled() => {
                    return Err(Error::new(Op::Lookup, &query.scope, ErrorKind::Canceled, "canceled"));
                }
            }
        };
        // A body answer walks postings for up to a few hundred milliseconds of CPU: on the
        // blocking pool, so it never holds a runtime worker that other requests wait on.
        let (snapshot, owned) = (snapshot.clone(), query.clone());
        tokio::task::spawn_blocking(move || index.lookup(&owned, snapshot.admission()))
            .await
            .map_err(|e| unavailable(&query.scope, e.to_string()))?
            .map_err(|e| unavailable(&query.scope, e.to_string()))
    }
}

/// Queues `snapshot` unless something as new is queued or built; too long a queue keeps
/// only its newest.
fn queue(run: &mut Run, snapshot: &Arc<Snapshot>) {
    let sequence = snapshot.state.sequence();
    if sequence <= run.offered {
        return;
    }
    run.offered = sequence;
    run.queue.push_back(snapshot.clone());
    if run.queue.len() > MAX_QUEUED {
        let newest = run.queue.pop_back();
        run.queue.clear();
        run.queue.extend(newest);
    }
}

/// The body `doc` currently holds, checked against its records.
async fn read_body(source: &dyn SnapshotSource, doc: &DocState) -> Result<String> {
    let ctx = Ctx::new();
    let bytes = source.read_version(&ctx, &doc.path, &doc.head).await?;
    let damaged =
        |why: String| Error::new(Op::Lookup, doc.path.as_str(), ErrorKind::Integrity, why);
    if Hash::of(&bytes) != doc.head.hash {
        return Err(damaged("stored bytes do not match their hash".into()));
    }
    let stored = StoredVersion::decode(&bytes).map_err(|e| damaged(e.to_string()))?;
    if Hash::of(stored.body.as_bytes()) != doc.body_hash {
        return Err(damaged("the body does not match its hash".into()));
    }
    Ok(stored.body)
}

fn entry_key(doc: &DocState) -> EntryKey {
    EntryKey {
        body_hash: doc.body_hash,
        title: doc.catalog.title().to_owned(),
        tags: doc.catalog.tags().map(str::to_owned).collect(),
        importance: doc.catalog.importance(),
    }
}

/// Brings `version` in line with `state` for `paths`, reading the bodies that changed.
async fn sync(
    source: &dyn SnapshotSource,
    readers: usize,
    version: &mut IndexVersion,
    state: &WorldState,
    paths: impl IntoIterator<Item = DocPath>,
) {
    let mut reads = Vec::new();
    for path in paths {
        match state.doc(&path).filter(|d| !d.archived) {
            Some(doc) => {
                let key = entry_key(doc);
                if !version.is_current(&path, &key) {
                    reads.push((doc.clone(), key));
                }
            }
            None => version.remove(&path),
        }
    }
    let mut bodies = futures::stream::iter(reads)
        .map(|(doc, key)| async move {
            let body = read_body(source, &doc).await;
            (doc, key, body)
        })
        .buffer_unordered(readers.max(1));
    while let Some((doc, key, body)) = bodies.next().await {
        version.upsert(&doc.path, key, &body_or_nothing(&doc, body));
    }
}

/// A body read for indexing; a damaged one indexes as no text.
fn body_or_nothing(doc: &DocState, body: Result<String>) -> String {
    body.unwrap_or_else(|error| {
        tracing::warn!(path = %doc.path, %error, "body not indexed");
        String::new()
    })
}

/// Bodies handed to the stored index's writer at once while building.
const BUILD_BATCH: usize = 256;

/// The stored index of a world and where its files are.
struct Stored {
    store: Arc<SectionStore>,
    /// Removed (with the files) when the index is dropped.
    _dir: Option<tempfile::TempDir>,
    last_fold: Instant,
    /// The late files of the copy it was taken from, while they arrive (see
    /// [`Stored::arrive`]).
    late: Option<Arrival>,
}

/// The arrival of a copy's late files in the background.
struct Arrival {
    /// The sequence of the copy.
    sequence: u64,
    /// Cancelled once a late file proves damaged.
    damaged: CancellationToken,
    /// Stops the arrival when the index is dropped.
    _stop: tokio_util::sync::DropGuard,
}

impl Stored {
    fn new(store: Arc<SectionStore>, dir: Option<tempfile::TempDir>) -> Stored {
        Stored {
            store,
            _dir: dir,
            last_fold: Instant::now(),
            late: None,
        }
    }

    /// Lets the late files of the copy of `sequence` arrive in the background (`rest`), then
    /// checks them against their checksums; a failure of either marks the store damaged.
    fn arrive(
        &mut self,
        published: Arc<watch::Sender<Published>>,
        sequence: u64,
        rest: futures::future::BoxFuture<'static, Result<()>>,
    ) {
        let (damaged, stop) = (CancellationToken::new(), CancellationToken::new());
        let store = self.store.clone();
        let marking = damaged.clone();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let arrived = tokio::select! {
                arrived = rest => arrived.map_err(store_error),
                () = stopped.cancelled() => return,
            };
            let checked = match arrived {
                Ok(()) => blocking(move || store.verify_deferred()).await,
                Err(error) => Err(error),
            };
            match checked {
                Ok(()) => {
                    tracing::info!("the late files of the section index copy arrived");
                    published.send_modify(|p| p.status.copies_whole += 1);
                }
                Err(error) => {
                    tracing::warn!(%error, "the section index copy is damaged; dropping it");
                    marking.cancel();
                }
            }
        });
        self.late = Some(Arrival {
            sequence,
            damaged,
            _stop: stop.drop_guard(),
        });
    }

    /// The sequence of the copy it was taken from, once that proved damaged.
    fn damaged_copy(&self) -> Option<u64> {
        self.late
            .as_ref()
            .and_then(|late| late.damaged.is_cancelled().then_some(late.sequence))
    }
}

fn store_error(e: impl fmt::Display) -> StoreError {
    StoreError::from(std::io::Error::other(e.to_string()))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, StoreError> + Send + 'static,
) -> std::result::Result<T, StoreError> {
    tokio::task::spawn_blocking(f).await.map_err(store_error)?
}

/// A fresh directory for a stored index inside the cache directory (none without one).
fn fresh_dir(
    options: &SearchOptions,
) -> std::result::Result<Option<tempfile::TempDir>, StoreError> {
    match &options.cache_dir {
        Some(root) => {
            std::fs::create_dir_all(root)?;
            Ok(Some(
                tempfile::Builder::new()
                    .prefix("sections-")
                    .tempdir_in(root)?,
            ))
        }
        None => Ok(None),
    }
}

/// The index of `state` from the newest copy on the shelf: downloaded, verified, compared
/// with `state` document by document, and brought to it by reading only the bodies that
/// differ. `None` when the shelf holds no usable copy (or only one found damaged before).
async fn download(
    inner: &SearchInner,
    shelf: &Arc<dyn IndexShelf>,
    source: &dyn SnapshotSource,
    state: &WorldState,
) -> std::result::Result<Option<(Stored, IndexVersion)>, StoreError> {
    let options = &inner.options;
    let dir = fresh_dir(options)?;
    let import = Import::new(dir.as_ref().map(|d| d.path()))?;
    let started = Instant::now();
    // What the copy is compared with does not depend on it: the state's key digests are
    // taken on the blocking pool while the copy downloads, and stopped (by `wanted`'s guard)
    // when there is no copy to compare.
    let (live, wanted) = (state.clone(), CancellationToken::new());
    let digests = {
        let wanted = wanted.clone();
        tokio::task::spawn_blocking(move || state_digests(&live, &wanted))
    };
    let _stop_digests = wanted.drop_guard();
    let refused = *inner.refused_copy.lock().expect("search lock poisoned");
    let (store, late) = match shelf.take(import, refused).await {
        Ok(Some(taken)) => (
            Arc::new(taken.store),
            taken.rest.map(|rest| (taken.sequence, rest)),
        ),
        Ok(None) => return Ok(None),
        Err(error) => {
            tracing::warn!(%error, "the section index copy is unusable; building from the bodies");
            return Ok(None);
        }
    };
    let taken = started.elapsed();
    let base = store.base()?;
    let reading = base.clone();
    let keys = blocking(move || reading.keys()).await?;
    let keyed = started.elapsed();
    let digests = digests.await.map_err(store_error)?;
    let changed = blocking(move || Ok(differing_paths(&keys, &digests))).await?;
    let compared = started.elapsed();
    let differing = changed.len();
    let mut version = IndexVersion::new(Some(base));
    sync(source, options.readers, &mut version, state, changed).await;
    tracing::info!(
        take_ms = taken.as_millis() as u64,
        keys_ms = (keyed - taken).as_millis() as u64,
        compare_ms = (compared - keyed).as_millis() as u64,
        sync_ms = (started.elapsed() - compared).as_millis() as u64,
        differing,
        "section index copy downloaded"
    );
    let mut stored = Stored::new(store, dir);
    if let Some((sequence, rest)) = late {
        stored.arrive(inner.published.clone(), sequence, rest);
    }
    Ok(Some((stored, version)))
}

/// Every live document of `state`, in path order, with the digest of its entry key as a
/// copy of the section index stores it; cut short (its answer then unused) once `wanted`
/// is cancelled.
fn state_digests(state: &WorldState, wanted: &CancellationToken) -> Vec<(Arc<DocState>, u64)> {
    state
        .docs()
        .filter(|d| !d.archived)
        .enumerate()
        .take_while(|(i, _)| i % 4096 != 0 || !wanted.is_cancelled())
        .map(|(_, doc)| {
            let catalog = &doc.catalog;
            let digest = quire_index::store::key_digest_of(
                &doc.body_hash,
                catalog.title(),
                catalog.tags(),
                &catalog.importance(),
            );
            (doc.clone(), digest)
        })
        .collect()
}

/// The paths where a copy's keys (path-sorted) and the state's digests (path-sorted)
/// disagree: a document missing from either side or indexed under another key.
fn differing_paths(copied: &[(String, u64)], live: &[(Arc<DocState>, u64)]) -> Vec<DocPath> {
    let mut changed: Vec<DocPath> = Vec::new();
    let mut copied = copied.iter().peekable();
    for (doc, digest) in live {
        while let Some((path, _)) = copied.next_if(|(p, _)| p.as_str() < doc.path.as_str()) {
            changed.extend(DocPath::parse(path).ok());
        }
        match copied.next_if(|(p, _)| p.as_str() == doc.path.as_str()) {
            Some((_, stored)) if stored == digest => {}
            _ => changed.push(doc.path.clone()),
        }
    }
    changed.extend(copied.filter_map(|(p, _)| DocPath::parse(p).ok()));
    changed
}

/// A new stored index holding every live document of `state`, committed at its sequence.
async fn build(
    options: &SearchOptions,
    source: &dyn SnapshotSource,
    state: &WorldState,
) -> std::result::Result<(Stored, IndexVersion), StoreError> {
    let dir = fresh_dir(options)?;
    let path = dir.as_ref().map(|d| d.path().to_owned());
    let store = Arc::new(blocking(move || SectionStore::create(path.as_deref())).await?);
    let docs: Vec<Arc<DocState>> = state.docs().filter(|d| !d.archived).cloned().collect();
    let mut bodies = futures::stream::iter(docs)
        .map(|doc| async move {
            let body = read_body(source, &doc).await;
            (doc, body)
        })
        .buffered(options.readers.max(1))
        .chunks(BUILD_BATCH);
    while let Some(batch) = bodies.next().await {
        let store = store.clone();
        blocking(move || {
            for (doc, body) in batch {
                let body = body_or_nothing(&doc, body);
                store.add(&doc.path, entry_key(&doc), &body)?;
            }
            Ok(())
        })
        .await?;
    }
    let sequence = state.sequence();
    let committing = store.clone();
    let base = blocking(move || committing.commit(sequence)).await?;
    Ok((Stored::new(store, dir), IndexVersion::new(Some(base))))
}

/// Folds `version`'s delta into the store when it is big or old enough; returns the version
/// over the new commit (the same documents).
async fn maybe_fold(
    options: &SearchOptions,
    stored: &mut Stored,
    version: IndexVersion,
    sequence: u64,
) -> std::result::Result<(IndexVersion, bool), StoreError> {
    let size = version.changed().len();
    let due = size >= options.fold_documents
        || (size > 0 && stored.last_fold.elapsed() >= options.fold_every);
    if !due {
        return Ok((version, false));
    }
    let store = stored.store.clone();
    let folding = version.clone();
    let base = blocking(move || {
        store.fold(&folding)?;
        store.commit(sequence)
    })
    .await?;
    stored.last_fold = Instant::now();
    Ok((IndexVersion::new(Some(base)), true))
}

/// Collects the shelf by the oldest kept checkpoint.
async fn collect(
    shelf: Arc<dyn IndexShelf>,
    published: Arc<watch::Sender<Published>>,
    oldest_kept: u64,
) {
    match shelf.collect(oldest_kept).await {
        Ok(_) => published.send_modify(|p| p.status.collections += 1),
        Err(error) => tracing::warn!(%error, "collecting section index copies failed"),
    }
}

/// Publishes `version` as the one of `sequence`, superseding older ones.
fn publish(inner: &SearchInner, sequence: u64, version: &IndexVersion) {
    let retain = inner.options.retain;
    inner.published.send_modify(|p| {
        let now = Instant::now();
        for (at, old) in p.versions.iter_mut() {
            if *at != sequence {
                old.superseded.get_or_insert(now);
            }
        }
        p.versions
            .retain(|_, v| v.superseded.is_none_or(|at| now < at + retain));
        p.versions.insert(
            sequence,
            Version {
                index: version.clone(),
                superseded: None,
            },
        );
        p.status.reached = p.status.reached.max(sequence);
        p.status.sequences = p.versions.keys().copied().collect();
    });
}

/// The first index of a run: downloaded from the shelf when it holds a usable copy, else
/// built from every body.
async fn first(
    inner: &Arc<SearchInner>,
    source: &dyn SnapshotSource,
    state: &WorldState,
) -> std::result::Result<(Stored, IndexVersion), StoreError> {
    if let Some(shelf) = &inner.shelf
        && let Some(found) = download(inner, shelf, source, state).await?
    {
        inner.published.send_modify(|p| p.status.downloads += 1);
        return Ok(found);
    }
    build(&inner.options, source, state).await
}

/// When a checkpoint asked for a copy: folds the delta (so the commit covers `sequence`) and
/// puts the commit on the shelf in the background. Returns the version to publish.
async fn export(
    inner: &Arc<SearchInner>,
    stored: &mut Stored,
    version: IndexVersion,
    sequence: u64,
) -> IndexVersion {
    let Some(shelf) = inner.shelf.clone() else {
        return version;
    };
    if !inner
        .export_due
        .swap(false, std::sync::atomic::Ordering::Relaxed)
    {
        return version;
    }
    let store = stored.store.clone();
    let folding = version.clone();
    let committed = blocking(move || {
        if !folding.changed().is_empty() {
            store.fold(&folding)?;
        }
        let base = store.commit(sequence)?;
        let export = store.export()?;
        Ok((base, export))
    })
    .await;
    let (base, copy) = match committed {
        Ok(done) => done,
        Err(error) => {
            tracing::warn!(%error, "section index commit for a copy failed");
            return version;
        }
    };
    stored.last_fold = Instant::now();
    let store = stored.store.clone();
    let published = inner.published.clone();
    let held = base.clone();
    let collect_after = inner
        .collect_after
        .lock()
        .expect("search lock poisoned")
        .take();
    tokio::spawn(async move {
        // `held` keeps the commit's files while they are read.
        match shelf.put(sequence, store, copy).await {
            Ok(()) => published.send_modify(|p| p.status.exports += 1),
            Err(error) => tracing::warn!(%error, "putting a section index copy failed"),
        }
        drop(held);
        if let Some(oldest_kept) = collect_after {
            collect(shelf, published, oldest_kept).await;
        }
    });
    IndexVersion::new(Some(base))
}

/// Drops every version; the caller holds the run lock (so a search starting a new worker
/// is ordered after it).
fn clear(inner: &SearchInner, evicted: bool) {
    inner.published.send_modify(|p| {
        p.versions.clear();
        p.status.active = false;
        p.status.sequences.clear();
        p.status.reached = 0;
        p.status.evictions += u64::from(evicted);
    });
}

/// The worker: takes queued snapshots in order, advances the index to each and publishes its
/// version; stops when closed, evicted, the store is gone or the stored index fails.
async fn work(inner: Arc<SearchInner>, source: Weak<dyn SnapshotSource>) {
    let mut current: Option<(WorldState, IndexVersion)> = None;
    let mut stored: Option<Stored> = None;
    loop {
        if let Some(sequence) = stored.as_ref().and_then(Stored::damaged_copy) {
            *inner.refused_copy.lock().expect("search lock poisoned") = Some(sequence);
            break;
        }
        let next = {
            let mut guard = inner.run.lock().expect("search lock poisoned");
            let Some(run) = guard.as_mut() else { return };
            let idle_until = run.last_search + inner.options.evict_after;
            match run.queue.pop_front() {
                _ if inner.stop.is_cancelled() => None,
                Some(next) => Some(Ok(next)),
                None if Instant::now() >= idle_until => {
                    *guard = None;
                    clear(&inner, true);
                    return;
                }
                None => Some(Err(idle_until)),
            }
        };
        let snapshot = match next {
            None => break,
            Some(Ok(snapshot)) => snapshot,
            Some(Err(idle_until)) => {
                if inner.export_due.load(std::sync::atomic::Ordering::Relaxed)
                    && let (Some((state, version)), Some(store)) = (current.take(), stored.as_mut())
                {
                    let sequence = state.sequence();
                    let version = export(&inner, store, version, sequence).await;
                    publish(&inner, sequence, &version);
                    current = Some((state, version));
                    continue;
                }
                let damaged = stored
                    .as_ref()
                    .and_then(|s| s.late.as_ref().map(|late| late.damaged.clone()))
                    .unwrap_or_default();
                tokio::select! {
                    () = inner.stop.cancelled() => {}
                    () = inner.wake.notified() => {}
                    () = damaged.cancelled() => {}
                    () = tokio::time::sleep_until(idle_until) => {}
                }
                continue;
            }
        };
        let Some(source) = source.upgrade() else {
            break;
        };
        let state = snapshot.state.clone();
        let readers = inner.options.readers;
        let sequence = state.sequence();
        let version = match (current.take(), stored.as_mut()) {
            (Some((old, version)), _) if old.sequence() >= sequence => {
                current = Some((old, version));
                continue;
            }
            (Some((old, mut version)), Some(store)) => {
                let changed = old.changed_paths(&state);
                sync(source.as_ref(), readers, &mut version, &state, changed).await;
                match maybe_fold(&inner.options, store, version, sequence).await {
                    Ok((version, folded)) => {
                        if folded {
                            inner.published.send_modify(|p| p.status.folds += 1);
                        }
                        version
                    }
                    Err(error) => {
                        tracing::warn!(%error, "section index fold failed; dropping the index");
                        break;
                    }
                }
            }
            _ => match first(&inner, source.as_ref(), &state).await {
                Ok((store, version)) => {
                    stored = Some(store);
                    version
                }
                Err(error) => {
                    tracing::warn!(%error, "section index build failed");
                    break;
                }
            },
        };
        drop(source);
        let version = match stored.as_mut() {
            Some(store) => export(&inner, store, version, sequence).await,
            None => version,
        };
        publish(&inner, sequence, &version);
        current = Some((state, version));
    }
    let mut guard = inner.run.lock().expect("search lock poisoned");
    *guard = None;
    clear(&inner, false);
}
