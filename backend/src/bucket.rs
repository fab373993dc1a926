//! The bucket store: a world whose only durable state is objects under one key prefix of any
//! [`BlobStore`], composed of the log (slots and the group committer), checkpoints (cold
//! start, the compactor) and the catalog carried by each [`Snapshot`].
//!
//! - **World creation.** A writable open of an empty prefix creates a world: checkpoint
//!   zero first, the marker last, so a marker always has a checkpoint. Stores opening one
//!   empty prefix at once all join one world: checkpoint zero is created if absent, one
//!   opener's takes the name and the others adopt its world (a random proposal, or the same
//!   [`BucketOptions::world`], joins; another explicit world is refused). A prefix holding
//!   this format's objects but no world yet is waited for (up to [`WORLD_CREATION_WAIT`]);
//!   a prefix holding objects that are not a world's is refused, naming them, and so are
//!   another world's marker (when [`BucketOptions::world`] names one) and a damaged marker.
//! - **Read-only opens never write**: no genesis, no committer, no compactor; writes answer
//!   [`ErrorKind::ReadOnly`].
//! - **Freshness.** Exact reads probe the log's next slot (and replay what they find) before
//!   pinning; catalog reads reuse the served state while a probe that started less than
//!   [`SEARCH_FRESHNESS`] ago confirmed it; this store's acknowledged writes are in the
//!   served state before they are answered, so both classes see them at once. Each new
//!   snapshot is the previous one advanced by the documents that changed, so the catalog is
//!   carried forward, never rebuilt.
//! - **Peer hints.** [`Follower::follow`] passes the hint to the committer (turn-taking with
//!   contending stores) and, when it is beyond the served state, makes the next catalog read
//!   probe the log instead of reusing the served state.
//! - **Own slots are never downloaded.** The committer publishes every slot it created or
//!   read into a bounded ring ([`quire_log::recent`]) before installing the state holding
//!   it; the compactor's replica and the change feed take slots from there, so a store
//!   alone reads none of its slots back. Only a slot the ring never held or lost to its
//!   bound (a peer's the committer has not read, or a backlog past the bound) is read from
//!   the bucket; a restarted store starts with an empty ring and reads the bucket.
//! - **The compactor** (`compaction.rs`) runs in the background on its own replica of the
//!   world (it takes the committer's slots from the ring 20 ms of commits at a time, and
//!   reads from the bucket only what the ring lacks; its checkpoint uploads are paced by the
//!   committer's create latency, `upload_pace.rs`), looks at the bucket only while its replica
//!   holds slots no checkpoint folds or after the store learned of new commits (its own,
//!   races, hints, reads), so an idle world makes no request; it writes checkpoints when due by
//!   [`BucketOptions::compaction`] (the policy reads time from the injected clock), adopts
//!   peers' checkpoints and drops old ones. [`Store::close`] stops it.
//! - **Changes.** With [`BucketOptions::change_ring`] > 0 a writable store feeds a
//!   [`ChangeHub`] from the log: the entries of every slot its committer installs (its own,
//!   and peers' it learned of) are published, each slot taken from the ring. The epoch is
//!   the world id, since sequences are the log's own: WATCH resumes across restarts and
//!   replicas. The store
//!   learns of peers' commits from hints ([`Follower::follow`]), from its own reads and
//!   writes, and, while a watcher waits in the hub, from a poll of the log every
//!   [`FOLLOW_POLL`].
//! - **Stats.** Every blob request the store makes (reads, the committer's slot creates,
//!   the compactor's checkpoints) is counted by a [`Metered`] wrapper; with the committer's
//!   counters they are [`Store::stats`].
//! - **Body search.** Every snapshot the store installs is offered to the world's
//!   [`BodySearch`] (a queue push, nothing more, on the commit path): the section index is
//!   built on the first body search, follows the installed snapshots in the background and is
//!   evicted when idle ([`BucketOptions::search`]; see [`crate::search`]). Its copies in the
//!   bucket ([`crate::search_shelf`], under `search/`) follow the compactor: after a checkpoint
//!   is written the index puts a copy and the shelf is collected by the checkpoints kept.
//! - **The `committed` hook** ([`BucketOptions::on_committed`]) sees every sequence this
//!   store's committer learned the log reached: a server forwards them to peers as hints.
//!
//! Served snapshots keep the history of documents loaded from a checkpoint in its history
//! blocks; [`SnapshotSource::records`] reads them when a view asks for old versions.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use quire_blob::{BlobStore, HedgePolicy, Hedged, Metered};
use quire_checkpoint::format::DEFAULT_WIDTHS;
use quire_checkpoint::genesis::{Joined, join_or_create_world};
use quire_checkpoint::{CompactionPolicy, OpenOptions, Replica, Step};
use quire_log::build::{Mutation, PreparedWrite};
use quire_log::commit::{self, CommittedHook, Committer, CommitterConfig};
use quire_log::{
    Clock, DocPath, DocState, StoreId, SystemClock, VersionRecord, WorldId, WorldState, keys, tip,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::changes::{ChangeEvent, ChangeHub};
use crate::compaction::{Compaction, start_compactor};
use crate::contract::{ChangeSource, Follower, Precondition, ReadView, SEARCH_FRESHNESS, Store};
use crate::ctx::Ctx;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::search::{BodySearch, SearchOptions};
use crate::search_shelf::BucketShelf;
use crate::snapshot::{Freshness, LogPrecondition, Snapshot, SnapshotSource, SnapshotView};
use crate::types::{
    ArchiveRequest, ArchiveResult, CommitCounters, Document, Prune, StoreStats, WriteRequest,
};
use quire_log::clock::{Elapsed, TokioElapsed};

/// How often a store whose change hub has watchers probes the log for peers' commits (a
/// backstop for lost peer hints).
pub const FOLLOW_POLL: Duration = Duration::from_secs(5);

/// How a bucket store behaves. [`Default`] gives production values.
#[derive(Clone)]
pub struct BucketOptions {
    /// The world's key prefix (empty, or ending in `/`).
    pub prefix: String,
    /// The world expected under the prefix; another world's marker is refused. A writable
    /// open of an empty prefix creates this world (a random one when `None`).
    pub world: Option<WorldId>,
    /// Where `modified` times and the compactor's ages come from.
    pub clock: Arc<dyn Clock>,
    /// Never write to the bucket; refuse every write.
    pub read_only: bool,
    /// The most distinct documents (0: unlimited).
    pub max_documents: u64,
    /// When checkpoints are written; `None` runs no compactor.
    pub compaction: Option<CompactionPolicy>,
    /// How often the compactor looks (plus the policy's random delay).
    pub compact_every: Duration,
    /// Sees every sequence this store's committer learned the log reached.
    pub on_committed: Option<CommittedHook>,
    /// Seeds the committer's jitter and the compactor's delays.
    pub seed: u64,
    /// The store's id in the slots it writes; `None` draws a random one. Every store of a
    /// world needs its own: a simulation pins them (with [`BucketOptions::seed`]) so a seed
    /// replays a run.
    pub store: Option<StoreId>,
    /// Events the change hub keeps (0, or a read-only store: no hub, WATCH unsupported).
    pub change_ring: usize,
    /// Measures the catalog freshness window ([`SEARCH_FRESHNESS`]).
    pub elapsed: Arc<dyn Elapsed>,
    /// The publish policy document, when writes carry a policy precondition: a slot another
    /// store won that touched it makes every queued member with a precondition rebuild, so
    /// a rebased write is judged by the policy as it now stands.
    pub policy_path: Option<DocPath>,
    /// Body search: how long it waits for an index version, when an idle index goes.
    pub search: SearchOptions,
    /// Hedge slow gets and creates (`quire_blob::Hedged`), as the server does on the network
    /// drivers; `None` sends every request once. Hedges are counted in [`StoreStats`] and,
    /// being requests, in the blob meter.
    pub hedge: Option<HedgePolicy>,
}

impl Default for BucketOptions {
    fn default() -> Self {
        BucketOptions {
            prefix: String::new(),
            world: None,
            clock: Arc::new(SystemClock),
            read_only: false,
            max_documents: 0,
            compaction: Some(CompactionPolicy::default()),
            compact_every: Duration::from_secs(10),
            on_committed: None,
            seed: quire_log::clock::seed(),
            store: None,
            change_ring: 0,
            elapsed: Arc::new(TokioElapsed::default()),
            policy_path: None,
            search: SearchOptions::default(),
            hedge: None,
        }
    }
}

impl fmt::Debug for BucketOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketOptions")
            .field("prefix", &self.prefix)
            .field("world", &self.world)
            .field("read_only", &self.read_only)
            .field("max_documents", &self.max_documents)
            .field("compaction", &self.compaction)
            .field("compact_every", &self.compact_every)
            .field("change_ring", &self.change_ring)
            .field("policy_path", &self.policy_path)
            .field("search", &self.search)
            .finish_non_exhaustive()
    }
}

/// The served snapshot and when a probe last confirmed it was the log's tip.
#[derive(Debug)]
struct Served {
    snapshot: Arc<Snapshot>,
    /// When the probe that confirmed the served state began; `None` after a peer hint
    /// beyond it.
    confirmed: Option<Duration>,
}

/// What views and writes share.
struct Shared {
    blobs: Arc<dyn BlobStore>,
    prefix: String,
    /// `None` for a read-only store.
    committer: Option<Committer>,
    served: Mutex<Served>,
    elapsed: Arc<dyn Elapsed>,
    /// Offered every snapshot served.
    search: BodySearch,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("prefix", &self.prefix)
            .field("sequence", &self.served().state.sequence())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().expect("served lock poisoned")
    }

    fn served(&self) -> Arc<Snapshot> {
        self.lock().snapshot.clone()
    }

    /// The newest state this store knows without reading the bucket.
    fn known(&self) -> WorldState {
        match &self.committer {
            Some(committer) => committer.state(),
            None => self.served().state.clone(),
        }
    }

    /// Serves `state` if it is ahead (advancing the catalog by the changed documents) and
    /// returns the served snapshot; `confirmed` marks a probe that began then.
    fn install(&self, state: WorldState, confirmed: Option<Duration>) -> Arc<Snapshot> {
        let mut served = self.lock();
        if let Some(at) = confirmed
            && served.confirmed.is_none_or(|old| old < at)
            && state.sequence() >= served.snapshot.state.sequence()
        {
            served.confirmed = Some(at);
        }
        if state.sequence() > served.snapshot.state.sequence() {
            let changed = served.snapshot.state.changed_paths(&state);
            served.snapshot = Arc::new(served.snapshot.advance(state, &changed));
            self.search.offer(&served.snapshot);
        }
        served.snapshot.clone()
    }

    /// Probes the log's tip and replays what it finds.
    async fn refresh(&self) -> Result<Arc<Snapshot>> {
        let started = self.elapsed.now();
        let state = match &self.committer {
            Some(committer) => committer.refresh().await?,
            None => {
                let mut state = self.served().state.clone();
                tip::catch_up(self.blobs.as_ref(), &self.prefix, &mut state).await?;
                state
            }
        };
        Ok(self.install(state, Some(started)))
    }
}

fn from_checkpoint(op: Op, err: quire_checkpoint::Error) -> Error {
    use quire_checkpoint::ErrorKind as C;
    let kind = match err.kind() {
        C::NotFound => ErrorKind::NotFound,
        C::Storage => ErrorKind::Storage,
        _ => ErrorKind::Integrity,
    };
    Error::new(op, err.key().to_owned(), kind, err.detail().to_owned()).with_source(err)
}

#[derive(Debug)]
struct BucketSource(Arc<Shared>);

#[async_trait]
impl SnapshotSource for BucketSource {
    async fn snapshot(&self, _ctx: &Ctx, freshness: Freshness) -> Result<Arc<Snapshot>> {
        let shared = &self.0;
        if freshness == Freshness::Catalog {
            let fresh = shared
                .lock()
                .confirmed
                .is_some_and(|at| shared.elapsed.now().saturating_sub(at) < SEARCH_FRESHNESS);
            if fresh {
                // Own writes are in the committer's state before they are answered.
                return Ok(shared.install(shared.known(), None));
            }
        }
        shared.refresh().await
    }

    /// The stored bytes as they are: the view checks them, so a damaged version reads as
    /// what it holds (chain verification names the break).
    async fn read_version(
        &self,
        _ctx: &Ctx,
        path: &DocPath,
        record: &VersionRecord,
    ) -> Result<Bytes> {
        let shared = &self.0;
        // Always the bucket, never the ring of recent slots: this is what chain verification
        // checks, so it must be what is stored.
        let read =
            quire_log::version::version_bytes(shared.blobs.as_ref(), &shared.prefix, record).await;
        read.map_err(|e| {
            let kind = if e.is_not_found() {
                ErrorKind::Integrity
            } else {
                ErrorKind::Storage
            };
            Error::new(
                Op::Get,
                path.as_str(),
                kind,
                format!("version {}: {e}", record.version),
            )
            .with_source(e)
        })
    }

    fn body_search(&self) -> Option<&BodySearch> {
        Some(&self.0.search)
    }

    async fn records(&self, _ctx: &Ctx, doc: &DocState) -> Result<Vec<VersionRecord>> {
        let shared = &self.0;
        quire_checkpoint::history::all_records(shared.blobs.as_ref(), &shared.prefix, doc)
            .await
            .map_err(|e| from_checkpoint(Op::Versions, e))
    }

    async fn record(&self, _ctx: &Ctx, doc: &DocState, version: u64) -> Result<VersionRecord> {
        let shared = &self.0;
        quire_checkpoint::history::version_record(
            shared.blobs.as_ref(),
            &shared.prefix,
            doc,
            version,
        )
        .await
        .map_err(|e| from_checkpoint(Op::Get, e))?
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

/// Runs the caller's precondition (if any) and keeps the write it last passed: the body and
/// metadata the answer shows (for an append, the joined body).
#[derive(Debug)]
struct Capture {
    inner: Option<LogPrecondition>,
    passed: Mutex<Option<PreparedWrite>>,
}

#[async_trait]
impl commit::CommitCheck for Capture {
    async fn check(
        &self,
        state: &WorldState,
        write: &PreparedWrite,
        pending: &commit::PendingVersions,
    ) -> quire_log::Result<()> {
        if let Some(inner) = &self.inner {
            inner.check(state, write, pending).await?;
        }
        *self.passed.lock().expect("capture lock poisoned") = Some(write.clone());
        Ok(())
    }
}

/// A world in a bucket. Cheap to clone; clones share the store.
#[derive(Clone)]
pub struct BucketStore {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    source: Arc<BucketSource>,
    world: WorldId,
    read_only: bool,
    closed: AtomicBool,
    compaction: Option<Compaction>,
    hub: Option<Arc<ChangeHub>>,
    /// Stops the change feed.
    feed: CancellationToken,
    /// Counts every blob request the store makes.
    meter: Metered,
    hedged: Option<Arc<Hedged>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A store dropped without close still stops its compactor.
        if let Some(compaction) = &self.compaction {
            compaction.stop.cancel();
        }
        self.feed.cancel();
        self.shared.search.close();
    }
}

impl fmt::Debug for BucketStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketStore")
            .field("prefix", &self.inner.shared.prefix)
            .field("world", &self.inner.world)
            .field("read_only", &self.inner.read_only)
            .finish()
    }
}

fn open_error(prefix: &str, kind: ErrorKind, detail: impl Into<String>) -> Error {
    Error::new(Op::Open, keys::marker_key(prefix), kind, detail)
}

/// How long a writable open waits for a world another opener is creating under the prefix.
pub const WORLD_CREATION_WAIT: Duration = Duration::from_secs(30);
/// How often it looks again meanwhile.
const WORLD_CREATION_POLL: Duration = Duration::from_millis(200);

/// Joins the world under `prefix`, creating one if the prefix is empty (see the module
/// docs). A prefix holding this format's objects but no world yet is waited for, up to
/// [`WORLD_CREATION_WAIT`] of tokio time.
async fn join_world(
    blobs: &dyn BlobStore,
    prefix: &str,
    world: Option<WorldId>,
    clock: &dyn Clock,
) -> Result<()> {
    let proposed = world.unwrap_or_else(|| WorldId::random(&mut quire_log::clock::rng()));
    let give_up = tokio::time::Instant::now() + WORLD_CREATION_WAIT;
    loop {
        let joined = join_or_create_world(blobs, prefix, proposed, DEFAULT_WIDTHS, clock)
            .await
            .map_err(|e| from_checkpoint(Op::Open, e))?;
        match joined {
            // Another world than `world` asked for is refused when the replica opens.
            Joined::World(_) => return Ok(()),
            Joined::Pending(why) if tokio::time::Instant::now() >= give_up => {
                return Err(open_error(
                    prefix,
                    ErrorKind::Integrity,
                    format!(
                        "the prefix holds no world after waiting {}s for one: {why}",
                        WORLD_CREATION_WAIT.as_secs()
                    ),
                ));
            }
            Joined::Pending(why) => {
                tracing::info!(prefix, "waiting for a world being created: {why}");
                tokio::time::sleep(WORLD_CREATION_POLL).await;
            }
        }
    }
}

impl BucketStore {
    /// Opens the world under `options.prefix` of `blobs`: cold start from the newest
    /// checkpoint and replay of the log after it. A writable open of an empty prefix creates
    /// the world first; a read-only open of one is not found.
    pub async fn open(blobs: Arc<dyn BlobStore>, options: BucketOptions) -> Result<BucketStore> {
        let meter = Metered::new(blobs);
        let metered: Arc<dyn BlobStore> = Arc::new(meter.clone());
        // Above the meter, so a hedge counts as the request it is.
        let hedged = options
            .hedge
            .clone()
            .map(|policy| Arc::new(Hedged::with_policy(metered.clone(), policy)));
        let blobs: Arc<dyn BlobStore> = match &hedged {
            Some(hedged) => hedged.clone(),
            None => metered,
        };
        let prefix = options.prefix.clone();
        if !options.read_only {
            join_world(
                blobs.as_ref(),
                &prefix,
                options.world,
                options.clock.as_ref(),
            )
            .await?;
        }
        // A catalog read may reuse the opened state while a probe that began less than
        // SEARCH_FRESHNESS ago confirmed it: the replay below lists the log after now.
        let opened_at = options.elapsed.now();
        let open = OpenOptions {
            world: options.world,
            clock: options.clock.clone(),
            ..OpenOptions::default()
        };
        let replica = Replica::open(blobs.clone(), &prefix, &open)
            .await
            .map_err(|e| from_checkpoint(Op::Open, e))?;
        let state = replica.state().clone();
        let world = state.world();
        let committer = (!options.read_only).then(|| {
            let config = CommitterConfig {
                prefix: prefix.clone(),
                store: options
                    .store
                    .unwrap_or_else(|| StoreId::random(&mut quire_log::clock::rng())),
                max_documents: options.max_documents,
                seed: options.seed,
                on_committed: options.on_committed.clone(),
                policy_path: options.policy_path.clone(),
                ..CommitterConfig::default()
            };
            Committer::start(blobs.clone(), state.clone(), options.clock.clone(), config)
        });
        let (blobs_for_shelf, prefix_for_shelf) = (blobs.clone(), prefix.clone());
        let shared = Arc::new(Shared {
            blobs,
            prefix,
            committer,
            served: Mutex::new(Served {
                snapshot: Arc::new(Snapshot::new(state)),
                confirmed: Some(opened_at),
            }),
            elapsed: options.elapsed.clone(),
            search: BodySearch::with_shelf(
                options.search.clone(),
                Some(Arc::new(
                    BucketShelf::new(
                        blobs_for_shelf,
                        &prefix_for_shelf,
                        &world.to_string(),
                        options.search.shelf_grace,
                    )
                    .with_part_bytes(options.search.copy_part_bytes),
                )),
            ),
        });
        let compaction = match (&options.compaction, options.read_only) {
            (Some(policy), false) => Some(start_compactor(
                replica,
                shared.committer.clone(),
                policy.clone(),
                &options,
                shared.search.clone(),
            )),
            _ => None,
        };
        let feed = CancellationToken::new();
        let hub = match &shared.committer {
            Some(committer) if options.change_ring > 0 => {
                let hub = Arc::new(ChangeHub::new(
                    world.to_string(),
                    shared.served().state.sequence(),
                    options.change_ring,
                ));
                start_feed(&shared, committer, hub.clone(), feed.clone());
                Some(hub)
            }
            _ => None,
        };
        Ok(BucketStore {
            inner: Arc::new(Inner {
                hub,
                feed,
                source: Arc::new(BucketSource(shared.clone())),
                shared,
                world,
                read_only: options.read_only,
                closed: AtomicBool::new(false),
                compaction,
                meter,
                hedged,
            }),
        })
    }

    pub fn world(&self) -> WorldId {
        self.inner.world
    }

    pub fn prefix(&self) -> &str {
        &self.inner.shared.prefix
    }

    /// The record of version `version` of `path` in the log's tip state: where its bytes
    /// live and what they hash to (for tools that inspect a bucket).
    pub async fn version_record(
        &self,
        ctx: &Ctx,
        path: &DocPath,
        version: u64,
    ) -> Result<VersionRecord> {
        let snapshot = self.inner.shared.refresh().await?;
        let doc = snapshot.state.doc(path).cloned().ok_or_else(|| {
            Error::new(
                Op::Get,
                path.as_str(),
                ErrorKind::NotFound,
                "no such document",
            )
        })?;
        self.inner.source.record(ctx, &doc, version).await
    }

    /// The world's body search (its status, for tests and metrics).
    pub fn body_search(&self) -> &BodySearch {
        &self.inner.shared.search
    }

    /// Each step the background compactor finished (`None` before the first); `None` when
    /// no compactor runs.
    pub fn compaction_steps(&self) -> Option<watch::Receiver<Option<Step>>> {
        self.inner.compaction.as_ref().map(|c| c.steps.clone())
    }

    async fn write(
        &self,
        ctx: &Ctx,
        mutation: Mutation,
        precondition: Option<Arc<dyn Precondition>>,
    ) -> Result<(commit::Outcome, Option<PreparedWrite>)> {
        let op = match &mutation {
            Mutation::Publish { .. } => Op::Publish,
            Mutation::Append { .. } => Op::Append,
            Mutation::SetArchived { .. } => Op::Archive,
        };
        let key = mutation.raw_path().to_owned();
        ctx.check(op, &key)?;
        let inner = &self.inner;
        let Some(committer) = inner.shared.committer.as_ref().filter(|_| !inner.read_only) else {
            return Err(Error::new(
                op,
                key,
                ErrorKind::ReadOnly,
                "the store is read-only",
            ));
        };
        if inner.closed.load(Ordering::Acquire) {
            return Err(Error::new(
                op,
                key,
                ErrorKind::Closed,
                "the store is closed",
            ));
        }
        let capture = Arc::new(Capture {
            inner: precondition.map(|p| LogPrecondition::new(p, inner.source.clone(), ctx.clone())),
            passed: Mutex::new(None),
        });
        let mut request = commit::CommitRequest::new(mutation);
        // The committer judges the deadline: still queued → canceled, nothing stored; being
        // committed → outcome unknown. A submitted write is never abandoned half-way, so a
        // cancellation after this point does not cut it short.
        request.deadline = ctx.deadline();
        request.precondition = Some(capture.clone());
        ctx.check(op, &key)?;
        let outcome = committer.submit(request).await.map_err(Error::from)?;
        let passed = capture.passed.lock().expect("capture lock poisoned").take();
        Ok((outcome, passed))
    }

    async fn written(
        &self,
        ctx: &Ctx,
        op: Op,
        mutation: Mutation,
        precondition: Option<Arc<dyn Precondition>>,
        unchanged: &str,
    ) -> Result<Document> {
        let (outcome, passed) = self.write(ctx, mutation, precondition).await?;
        let doc = outcome.doc;
        if !outcome.changed {
            return Err(
                Error::new(op, doc.path.as_str(), ErrorKind::NotModified, unchanged)
                    .with_current(doc),
            );
        }
        let Some((content, metadata)) = passed.and_then(|p| p.content) else {
            return Err(Error::new(
                op,
                doc.path.as_str(),
                ErrorKind::Integrity,
                "the committed write carried no content",
            ));
        };
        Ok(Document {
            path: doc.path,
            content,
            metadata: (!metadata.is_empty()).then_some(metadata),
            version: doc.version,
            modified: doc.modified,
            archived: doc.archived,
            etag: doc.etag,
            content_hash: doc.body_hash,
            prune: outcome.prune.map(|(from, to)| Prune { from, to }),
        })
    }
}

/// Publishes the entries of every slot the committer installs, taken from the committer's
/// ring of recent slots (read from the bucket only when the ring lost it). A slot that
/// cannot be read is skipped (watchers resync) rather than stalling the feed.
/// While the hub has watchers, the log is probed every [`FOLLOW_POLL`] so peers' commits
/// reach them even when no hint arrives.
fn start_feed(
    shared: &Arc<Shared>,
    committer: &Committer,
    hub: Arc<ChangeHub>,
    stop: CancellationToken,
) {
    let mut states = committer.subscribe();
    let recent = committer.recent();
    let shared = shared.clone();
    let blobs = shared.blobs.clone();
    let prefix = shared.prefix.clone();
    let mut fed = hub.head();
    let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + FOLLOW_POLL, FOLLOW_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::spawn(async move {
        loop {
            let target = states.borrow_and_update().sequence();
            while fed < target {
                // The committer published every slot it installs before installing it; the
                // bucket is read only for one its ring lost.
                let held = recent.slot(fed + 1);
                let read = match held {
                    Some(slot) => Ok(Some(slot)),
                    None => tip::read_slot(blobs.as_ref(), &prefix, fed + 1)
                        .await
                        .map(|slot| slot.map(Arc::new)),
                };
                match read {
                    Ok(Some(slot)) => {
                        for (i, entry) in slot.slot.entries.iter().enumerate() {
                            hub.publish(ChangeEvent {
                                sequence: slot.slot.first + i as u64,
                                path: entry.path.clone(),
                                version: entry.current,
                                body_hash: entry.body_hash,
                                op: entry.op,
                                agent: entry.agent.clone(),
                            });
                        }
                        fed = slot.slot.last();
                    }
                    outcome => {
                        tracing::warn!(sequence = fed + 1, ?outcome, "change feed skipped slots");
                        hub.skip(target);
                        fed = target;
                    }
                }
            }
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                changed = states.changed() => if changed.is_err() { return },
                _ = poll.tick() => {
                    if hub.watchers() > 0 && !hub.is_closed() {
                        // A refresh installs what it finds; the next turn publishes it.
                        if let Err(error) = shared.refresh().await {
                            tracing::warn!(%error, "change feed poll failed");
                        }
                    }
                }
            }
        }
    });
}

#[async_trait]
impl Store for BucketStore {
    async fn open_view(&self, ctx: &Ctx) -> Result<Box<dyn ReadView>> {
        ctx.check(Op::OpenView, "")?;
        Ok(Box::new(SnapshotView::new(self.inner.source.clone())))
    }

    async fn publish(&self, ctx: &Ctx, request: WriteRequest) -> Result<Document> {
        let mutation = Mutation::Publish {
            path: request.path,
            expected: request.expected_version,
            body: request.content,
            metadata: request.metadata,
        };
        self.written(
            ctx,
            Op::Publish,
            mutation,
            request.precondition,
            "the body and metadata equal the current version",
        )
        .await
    }

    async fn append(&self, ctx: &Ctx, request: WriteRequest) -> Result<Document> {
        let mutation = Mutation::Append {
            path: request.path,
            expected: request.expected_version.unwrap_or(0),
            body: request.content,
            metadata: request.metadata,
        };
        self.written(
            ctx,
            Op::Append,
            mutation,
            request.precondition,
            "nothing to append",
        )
        .await
    }

    async fn set_archived(&self, ctx: &Ctx, request: ArchiveRequest) -> Result<ArchiveResult> {
        let mutation = Mutation::SetArchived {
            path: request.path,
            archived: request.archived,
        };
        let (outcome, _) = self.write(ctx, mutation, request.precondition).await?;
        Ok(ArchiveResult {
            document: outcome.doc,
            changed: outcome.changed,
        })
    }

    async fn close(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::Release);
        if let Some(compaction) = &inner.compaction {
            compaction.stop.cancel();
            let done = compaction.done.lock().expect("done lock poisoned").take();
            if let Some(done) = done {
                let _ = done.await;
            }
        }
        if let Some(committer) = &inner.shared.committer {
            // Lets a slot being created finish.
            committer.close().await;
        }
        inner.feed.cancel();
        inner.shared.search.close();
        if let Some(hub) = &inner.hub {
            hub.close();
        }
    }

    fn stats(&self) -> StoreStats {
        let commits = self.inner.shared.committer.as_ref().map(|committer| {
            let counters = committer.counters();
            CommitCounters {
                batches_by_size: counters.slots_by_entries,
                slots_won: counters.slots_won,
                slots_lost: counters.slots_lost,
                members_rebuilt: counters.members_rebuilt,
                members_kept: counters.members_kept,
                yields: counters.yields,
                handoffs: counters.handoffs,
                listening_pauses: counters.listening_pauses,
            }
        });
        StoreStats {
            commits,
            blobs: Some(self.inner.meter.reading()),
            hedges: self.inner.hedged.as_ref().map(|hedged| hedged.counts()),
        }
    }
}

impl ChangeSource for BucketStore {
    fn changes(&self) -> Option<Arc<ChangeHub>> {
        self.inner.hub.clone()
    }
}

impl Follower for BucketStore {
    fn follow(&self, sequence: u64) {
        let shared = &self.inner.shared;
        if let Some(committer) = &shared.committer {
            committer.follow(sequence);
        }
        let mut served = shared.lock();
        if sequence > served.snapshot.state.sequence() {
            served.confirmed = None;
        }
    }
}
