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
//! The index lives in memory (persistent maps shared between versions); it keeps no files.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use quire_index::{CatalogMatch, CatalogQuery, EntryKey, SectionIndex};
use quire_log::version::StoredVersion;
use quire_log::{DocPath, DocState, Hash, WorldState};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::contract::SEARCH_FRESHNESS;
use crate::ctx::Ctx;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::snapshot::{Snapshot, SnapshotSource};

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
    /// The most documents a world may hold for an index to be built. The index lives
    /// in memory (about 20 bytes for every byte of body), so past this a body search is
    /// answered from the catalog rather than letting one request make a replica allocate
    /// gigabytes.
    pub max_documents: u64,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            wait: SEARCH_FRESHNESS,
            evict_after: Duration::from_secs(30 * 60),
            retain: Duration::from_secs(30),
            readers: 16,
            max_documents: 50_000,
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
}

#[derive(Debug)]
struct Version {
    index: SectionIndex,
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
    run: Mutex<Option<Run>>,
    wake: Notify,
    published: watch::Sender<Published>,
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
        BodySearch {
            inner: Arc::new(SearchInner {
                options,
                run: Mutex::new(None),
                wake: Notify::new(),
                published: watch::Sender::new(Published::default()),
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
        let documents = snapshot.state.doc_count();
        if documents > self.inner.options.max_documents {
            return Err(unavailable(
                &query.scope,
                format!(
                    "body search indexes worlds of at most {} documents; this one holds {documents}",
                    self.inner.options.max_documents
                ),
            ));
        }
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
        Ok(index.lookup(query, snapshot.catalog()))
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
    }
}

/// Brings `index` in line with `state` for `paths`, reading the bodies that changed.
async fn sync(
    source: &dyn SnapshotSource,
    readers: usize,
    index: &mut SectionIndex,
    state: &WorldState,
    paths: impl IntoIterator<Item = DocPath>,
) {
    let mut reads = Vec::new();
    for path in paths {
        match state.doc(&path).filter(|d| !d.archived) {
            Some(doc) => {
                let key = entry_key(doc);
                if index.key(&path) != Some(&key) {
                    reads.push((doc.clone(), key));
                }
            }
            None => index.remove(&path),
        }
    }
    let mut bodies = futures::stream::iter(reads)
        .map(|(doc, key)| async move {
            let body = read_body(source, &doc).await;
            (doc, key, body)
        })
        .buffer_unordered(readers.max(1));
    while let Some((doc, key, body)) = bodies.next().await {
        match body {
            Ok(body) => index.upsert(&doc.path, key, &body),
            Err(error) => {
                tracing::warn!(path = %doc.path, %error, "body not indexed");
                index.upsert(&doc.path, key, "");
            }
        }
    }
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
/// version; stops when closed, evicted or the store is gone.
async fn work(inner: Arc<SearchInner>, source: Weak<dyn SnapshotSource>) {
    let mut current: Option<(WorldState, SectionIndex)> = None;
    loop {
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
                tokio::select! {
                    () = inner.stop.cancelled() => {}
                    () = inner.wake.notified() => {}
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
        let index = match current.take() {
            Some((old, index)) if old.sequence() >= state.sequence() => {
                current = Some((old, index));
                continue;
            }
            Some((old, mut index)) => {
                let changed = old.changed_paths(&state);
                sync(source.as_ref(), readers, &mut index, &state, changed).await;
                index
            }
            None => {
                let mut index = SectionIndex::new();
                let paths: Vec<DocPath> = state.docs().map(|d| d.path.clone()).collect();
                sync(source.as_ref(), readers, &mut index, &state, paths).await;
                index
            }
        };
        drop(source);
        let sequence = state.sequence();
        let retain = inner.options.retain;
        inner.published.send_modify(|p| {
            let now = Instant::now();
            for version in p.versions.values_mut() {
                version.superseded.get_or_insert(now);
            }
            p.versions
                .retain(|_, v| v.superseded.is_none_or(|at| now < at + retain));
            p.versions.insert(
                sequence,
                Version {
                    index: index.clone(),
                    superseded: None,
                },
            );
            p.status.reached = p.status.reached.max(sequence);
            p.status.sequences = p.versions.keys().copied().collect();
        });
        current = Some((state, index));
    }
    let mut guard = inner.run.lock().expect("search lock poisoned");
    *guard = None;
    clear(&inner, false);
}
