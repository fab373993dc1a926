//! The file store: a world kept as a plain directory of markdown files a person can read,
//! with every document's history in a `versions/` directory beside it (see [`layout`] for
//! the exact layout).
//!
//! - **Same bytes as the bucket store.** Every version file holds the stored version bytes of
//!   `quire_log::version` and its ETag is their hash, so a document moved between backends
//!   keeps its ETags. Writes are built by `quire_log::build`, so every write rule is the
//!   bucket store's.
//! - **One writer per directory.** A store holds an exclusive `flock` on `.quire/lock` while
//!   open (read-only stores hold a shared one); a second writer fails to open. Within the
//!   store, writes are serialised; reads never wait for writes.
//! - **Crash-safe.** Every file is replaced by writing a new file, fsyncing it, renaming it
//!   into place and fsyncing the directory. A version exists once `state.json` names it; on
//!   open, version files the state does not name are removed and a document file that does
//!   not hold the current version is rewritten from its version file.
//! - **The document file is a mirror.** Edits made to it by hand are not imported; the next
//!   open puts the current version back.
//! - **Exact reads.** One process serves the directory, so every read sees every
//!   acknowledged write. [`Follower::follow`] is ignored.
//! - **Changes.** With `change_ring > 0` the store feeds a [`ChangeHub`] whose epoch is new at
//!   every open (the journal is not kept on disk yet): WATCH resumes within one run and
//!   resyncs across restarts.
//!
//! - **Body search.** Each committed snapshot is offered to the world's section index
//!   (built on the first body search, evicted when idle; see [`crate::search`]).
//!
//! Limits beyond the contract's: each path segment must fit the filesystem's 255-byte name
//! limit once escaped (a reserved name takes one byte more); a longer one is not found. The
//! directory must be on one case-sensitive filesystem.

mod disk;
pub mod layout;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use quire_log::build::{self, BuildLimits, Built, Change, Mutation};
use quire_log::marker::{GENESIS_SEQUENCE, genesis_tip};
use quire_log::metadata::{Catalog, DocCatalog};
use quire_log::slot::{EncodedSlot, Slot};
use quire_log::version::StoredVersion;
use quire_log::{
    Clock, DocPath, DocState, Hash, OperationId, StoreId, SystemClock, VersionRecord, WorldId,
    WorldState,
};
use tokio::sync::Mutex as AsyncMutex;

use crate::changes::{ChangeEvent, ChangeHub};
use crate::contract::{ChangeSource, Follower, Precondition, ReadView, Store};
use crate::ctx::Ctx;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::search::{BodySearch, SearchOptions};
use crate::snapshot::{Freshness, Snapshot, SnapshotSource, SnapshotView};
use crate::types::{ArchiveRequest, ArchiveResult, Document, Prune, WriteRequest};
use disk::Disk;
use layout::{DocFiles, DocRecord, SYSTEM_DIR};

/// The world marker file under `.quire/`.
const WORLD_FILE: &str = "world";
const LOCK_FILE: &str = "lock";
const WORLD_FORMAT: &str = "quire-file-world 1";

/// How a file store behaves. [`Default`] gives production values.
#[derive(Clone)]
pub struct FileOptions {
    /// Where `modified` times come from.
    pub clock: Arc<dyn Clock>,
    /// Refuse every write; never change the directory.
    pub read_only: bool,
    /// The most distinct documents (0: unlimited).
    pub max_documents: u64,
    /// Events the change hub keeps (0: no hub, WATCH unsupported).
    pub change_ring: usize,
    /// fsync every file and directory change. Turn off only for throwaway worlds.
    pub durable: bool,
    /// Body search: how long it waits for an index version, when an idle index goes.
    pub search: SearchOptions,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            clock: Arc::new(SystemClock),
            read_only: false,
            max_documents: 0,
            change_ring: 0,
            durable: true,
            search: SearchOptions::default(),
        }
    }
}

impl fmt::Debug for FileOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileOptions")
            .field("read_only", &self.read_only)
            .field("max_documents", &self.max_documents)
            .field("change_ring", &self.change_ring)
            .field("durable", &self.durable)
            .field("search", &self.search)
            .finish_non_exhaustive()
    }
}

/// What reads and the writer share.
#[derive(Debug)]
struct Shared {
    disk: Disk,
    served: RwLock<Arc<Snapshot>>,
    /// Offered every snapshot served.
    search: BodySearch,
}

impl Shared {
    fn served(&self) -> Arc<Snapshot> {
        self.served.read().expect("served lock poisoned").clone()
    }

    fn files(&self, op: Op, path: &DocPath) -> Result<DocFiles> {
        DocFiles::of(self.disk.root(), path)
            .map_err(|why| Error::new(op, path.as_str(), ErrorKind::NotFound, why))
    }
}

#[derive(Debug)]
struct FileSource(Arc<Shared>);

#[async_trait]
impl SnapshotSource for FileSource {
    async fn snapshot(&self, _ctx: &Ctx, _freshness: Freshness) -> Result<Arc<Snapshot>> {
        Ok(self.0.served())
    }

    fn body_search(&self) -> Option<&BodySearch> {
        Some(&self.0.search)
    }

    async fn read_version(
        &self,
        _ctx: &Ctx,
        path: &DocPath,
        record: &VersionRecord,
    ) -> Result<Bytes> {
        let file = self.0.files(Op::Get, path)?.version(record.version);
        match tokio::fs::read(&file).await {
            Ok(bytes) => Ok(Bytes::from(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A view pinned before retention removed the version finds it gone.
                let pruned = self
                    .0
                    .served()
                    .state
                    .doc(path)
                    .is_some_and(|d| d.first > record.version);
                let kind = if pruned {
                    ErrorKind::NotFound
                } else {
                    ErrorKind::Integrity
                };
                Err(Error::new(
                    Op::Get,
                    path.as_str(),
                    kind,
                    format!("version {} has no file", record.version),
                ))
            }
            Err(e) => Err(storage(Op::Get, path.as_str(), "read a version file", e)),
        }
    }
}

fn storage(op: Op, key: &str, what: &str, err: std::io::Error) -> Error {
    Error::new(op, key, ErrorKind::Storage, format!("{what}: {err}")).with_source(err)
}

/// A world in a directory. Cheap to clone; clones share the store.
#[derive(Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    source: Arc<FileSource>,
    options: FileOptions,
    world: WorldId,
    store: StoreId,
    writer: Arc<AsyncMutex<()>>,
    closed: AtomicBool,
    lock: Mutex<Option<std::fs::File>>,
    hub: Option<Arc<ChangeHub>>,
}

impl fmt::Debug for FileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileStore")
            .field("root", &self.inner.shared.disk.root())
            .field("world", &self.inner.world)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl FileStore {
    /// Opens the world in `root`, creating an empty world when the directory is empty or
    /// missing. Refuses a directory that holds files but no world, a directory another store
    /// is writing, and a world whose files are damaged.
    pub async fn open(root: impl Into<PathBuf>, options: FileOptions) -> Result<FileStore> {
        let root = root.into();
        let opened = tokio::task::spawn_blocking(move || open_blocking(root, options))
            .await
            .map_err(|e| Error::new(Op::Open, "", ErrorKind::Storage, e.to_string()))??;
        Ok(opened)
    }

    pub fn root(&self) -> &Path {
        self.inner.shared.disk.root()
    }

    pub fn world(&self) -> WorldId {
        self.inner.world
    }

    /// The world's body search (its status, for tests and metrics).
    pub fn body_search(&self) -> &BodySearch {
        &self.inner.shared.search
    }

    /// The file holding version `version` of `path` (whether or not it exists).
    pub fn version_file(&self, path: &DocPath, version: u64) -> Option<PathBuf> {
        DocFiles::of(self.root(), path)
            .ok()
            .map(|f| f.version(version))
    }

    /// The document file of `path` (the mirror of its current version).
    pub fn document_file(&self, path: &DocPath) -> Option<PathBuf> {
        DocFiles::of(self.root(), path).ok().map(|f| f.doc)
    }

    async fn write(
        &self,
        ctx: &Ctx,
        op: Op,
        mutation: Mutation,
        precondition: Option<Arc<dyn Precondition>>,
    ) -> Result<Committed> {
        let key = mutation.raw_path().to_owned();
        ctx.check(op, &key)?;
        let inner = &self.inner;
        if inner.options.read_only {
            return Err(Error::new(
                op,
                key,
                ErrorKind::ReadOnly,
                "the store is read-only",
            ));
        }
        let closed = || Error::new(op, &key, ErrorKind::Closed, "the store is closed");
        if inner.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        let guard = ctx
            .run(op, &key, async {
                Ok(inner.writer.clone().lock_owned().await)
            })
            .await?;
        if inner.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        let snapshot = inner.shared.served();
        let path = mutation.path()?;
        let files = inner.shared.files(op, &path)?;
        let base = match (&mutation, snapshot.state.doc(&path)) {
            (Mutation::Append { .. }, Some(doc)) if !doc.archived => {
                let bytes = inner.source.read_version(ctx, &path, &doc.head).await?;
                if Hash::of(&bytes) != doc.head.hash {
                    return Err(Error::new(
                        op,
                        &key,
                        ErrorKind::Integrity,
                        "the current version's bytes do not match their hash",
                    ));
                }
                Some(StoredVersion::decode(&bytes).map_err(|why| {
                    Error::new(
                        op,
                        &key,
                        ErrorKind::Integrity,
                        format!("current version: {why}"),
                    )
                })?)
            }
            _ => None,
        };
        let operation = OperationId::random(&mut quire_log::clock::rng());
        let limits = BuildLimits {
            max_documents: inner.options.max_documents,
        };
        let built = build::build(
            &snapshot.state,
            &mutation,
            operation,
            inner.options.clock.now(),
            limits,
            &mut None,
            base.as_ref(),
        )?;
        let change = match built {
            Built::Unchanged(summary) => return Ok(Committed::Unchanged(summary)),
            Built::Change(change) => change,
        };
        if let Some(precondition) = precondition {
            let state = SnapshotView::pinned(inner.source.clone(), snapshot.clone());
            precondition.check(ctx, &state, &change.prepared).await?;
        }
        ctx.check(op, &key)?;
        let next = advance(&snapshot.state, inner.store, &change)?;
        // The commit runs to its end even if the caller goes away, so disk and memory agree.
        let store = self.clone();
        tokio::spawn(async move {
            let _guard = guard;
            store.commit(op, files, change, snapshot, next).await
        })
        .await
        .map_err(|e| Error::new(op, key, ErrorKind::Storage, e.to_string()))?
    }

    /// Writes a built change to disk and installs the state after it.
    async fn commit(
        &self,
        op: Op,
        files: DocFiles,
        change: Box<Change>,
        snapshot: Arc<Snapshot>,
        next: WorldState,
    ) -> Result<Committed> {
        let inner = &self.inner;
        let path = change.entry.path.clone();
        let doc = next.doc(&path).cloned().ok_or_else(|| {
            Error::new(
                op,
                path.as_str(),
                ErrorKind::Integrity,
                "the change lost its document",
            )
        })?;
        let record = DocRecord::of(&doc);
        let shared = inner.shared.clone();
        let bytes = change.version_bytes.clone();
        let version = change.entry.current;
        let prune = change.prune;
        let key = path.as_str().to_owned();
        tokio::task::spawn_blocking(move || -> Result<()> {
            let disk = &shared.disk;
            let io = |what: &str| {
                let key = key.clone();
                let what = what.to_owned();
                move |e| storage(op, &key, &what, e)
            };
            if let Some(bytes) = &bytes {
                disk.replace(&files.version(version), bytes)
                    .map_err(io("write the version file"))?;
            }
            // The commit point.
            disk.replace(&files.state(), &record.encode())
                .map_err(io("write the state file"))?;
            if let Some(bytes) = &bytes
                && let Err(e) = disk.replace(&files.doc, bytes)
            {
                tracing::warn!(path = %key, error = %e, "document file not updated; the next open rewrites it");
            }
            if let Some((from, to)) = prune {
                for old in from..=to {
                    if let Err(e) = disk.remove(&files.version(old)) {
                        tracing::warn!(path = %key, version = old, error = %e, "pruned version file not removed; the next open removes it");
                    }
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| Error::new(op, path.as_str(), ErrorKind::Storage, e.to_string()))??;
        let installed = Arc::new(snapshot.advance(next.clone(), [&path]));
        *inner.shared.served.write().expect("served lock poisoned") = installed.clone();
        inner.shared.search.offer(&installed);
        if let Some(hub) = &inner.hub {
            hub.publish(ChangeEvent {
                sequence: next.sequence(),
                path: path.clone(),
                version: doc.current,
                body_hash: doc.body_hash,
                op: change.entry.op,
                agent: change.entry.agent.clone(),
            });
        }
        Ok(Committed::Changed { change, doc })
    }
}

/// A write's outcome before it is shaped into an answer.
enum Committed {
    Unchanged(quire_log::DocSummary),
    Changed {
        change: Box<Change>,
        doc: Arc<DocState>,
    },
}

/// The state after `change`: the log's `apply`, through a one-entry slot that never leaves
/// memory, so every transition is checked exactly as on the bucket store.
fn advance(state: &WorldState, store: StoreId, change: &Change) -> quire_log::Result<WorldState> {
    let slot = Slot {
        world: state.world(),
        first: state.sequence() + 1,
        store,
        prev: state.tip(),
        entries: vec![change.entry.clone()],
    };
    let key = format!("local/{:016x}", slot.first);
    state.apply(&EncodedSlot::encode(slot, &key)?)
}

fn written(change: &Change, doc: &DocState) -> Document {
    let (body, metadata) = change.prepared.content.clone().unwrap_or_default();
    Document {
        path: doc.path.clone(),
        content: body,
        metadata: (!metadata.is_empty()).then_some(metadata),
        version: doc.current,
        modified: doc.modified,
        archived: doc.archived,
        etag: doc.head.hash,
        content_hash: doc.body_hash,
        prune: change.prune.map(|(from, to)| Prune { from, to }),
    }
}

fn open_error(root: &Path, kind: ErrorKind, detail: impl Into<String>) -> Error {
    Error::new(Op::Open, root.display().to_string(), kind, detail)
}

fn open_blocking(root: PathBuf, options: FileOptions) -> Result<FileStore> {
    let io = |what: &'static str| {
        let root = root.clone();
        move |e: std::io::Error| {
            open_error(&root, ErrorKind::Storage, format!("{what}: {e}")).with_source(e)
        }
    };
    if !options.read_only {
        std::fs::create_dir_all(&root).map_err(io("create the directory"))?;
    } else if !root.is_dir() {
        return Err(open_error(&root, ErrorKind::NotFound, "no such directory"));
    }
    let root = root.canonicalize().map_err(io("find the directory"))?;
    let system = root.join(SYSTEM_DIR);
    let world_file = system.join(WORLD_FILE);
    let disk = Disk::new(root.clone(), options.durable);
    let world = if world_file.is_file() {
        let text = std::fs::read_to_string(&world_file).map_err(io("read the world file"))?;
        parse_world(&text).ok_or_else(|| {
            open_error(
                &root,
                ErrorKind::Integrity,
                "the world file is not a quire world",
            )
        })?
    } else {
        if options.read_only {
            return Err(open_error(
                &root,
                ErrorKind::NotFound,
                "no world here, and a read-only store does not create one",
            ));
        }
        let foreign = std::fs::read_dir(&root)
            .map_err(io("read the directory"))?
            .filter_map(|e| e.ok())
            .find(|e| e.file_name() != SYSTEM_DIR);
        if let Some(entry) = foreign {
            return Err(open_error(
                &root,
                ErrorKind::Integrity,
                format!(
                    "the directory holds {:?} but no world; refusing to adopt it",
                    entry.file_name()
                ),
            ));
        }
        let world = WorldId::random(&mut quire_log::clock::rng());
        disk.ensure_dir(&system)
            .map_err(io("create the system directory"))?;
        disk.prepare()
            .map_err(io("prepare the temporary directory"))?;
        disk.replace(&world_file, format!("{WORLD_FORMAT}\n{world}\n").as_bytes())
            .map_err(io("write the world file"))?;
        world
    };
    let lock = disk::lock(&system.join(LOCK_FILE), !options.read_only).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            open_error(
                &root,
                ErrorKind::Storage,
                "another store has this directory open",
            )
        } else {
            io("lock the directory")(e)
        }
    })?;
    if !options.read_only {
        disk.prepare()
            .map_err(io("prepare the temporary directory"))?;
    }
    let mut docs = Vec::new();
    for (path, history) in disk::scan(&root).map_err(io("scan the directory"))? {
        docs.push(load_doc(&disk, &path, &history, !options.read_only)?);
    }
    let state = WorldState::restore(world, GENESIS_SEQUENCE, genesis_tip(world), docs)
        .map_err(|e| open_error(&root, ErrorKind::Integrity, e.to_string()))?;
    let hub = (options.change_ring > 0).then(|| {
        let epoch: u64 = quire_log::clock::seed();
        Arc::new(ChangeHub::new(
            format!("{:012x}", epoch >> 16),
            state.sequence(),
            options.change_ring,
        ))
    });
    let shared = Arc::new(Shared {
        disk,
        served: RwLock::new(Arc::new(Snapshot::new(state))),
        search: BodySearch::new(options.search.clone()),
    });
    Ok(FileStore {
        inner: Arc::new(Inner {
            source: Arc::new(FileSource(shared.clone())),
            shared,
            options,
            world,
            store: StoreId::random(&mut quire_log::clock::rng()),
            writer: Arc::new(AsyncMutex::new(())),
            closed: AtomicBool::new(false),
            lock: Mutex::new(Some(lock)),
            hub,
        }),
    })
}

fn parse_world(text: &str) -> Option<WorldId> {
    let mut lines = text.lines();
    if lines.next()? != WORLD_FORMAT {
        return None;
    }
    WorldId::parse(lines.next()?.trim())
}

/// Loads one document's state from its history directory; with `repair`, removes version
/// files the state does not name and rewrites a stale document file.
fn load_doc(disk: &Disk, path: &DocPath, history: &Path, repair: bool) -> Result<DocState> {
    let key = path.as_str();
    let bad = |why: String| Error::new(Op::Open, key, ErrorKind::Integrity, why);
    let io = |what: &'static str| move |e: std::io::Error| storage(Op::Open, key, what, e);
    let files = DocFiles::of(disk.root(), path).map_err(bad)?;
    debug_assert_eq!(files.history, history);
    let state_bytes = std::fs::read(files.state()).map_err(io("read the state file"))?;
    let record =
        DocRecord::decode(&state_bytes).map_err(|why| bad(format!("state.json: {why}")))?;
    let records = record
        .records()
        .map_err(|why| bad(format!("state.json: {why}")))?;
    let head = records
        .last()
        .cloned()
        .expect("a decoded state has a version");
    let first = records[0].version;
    let bytes =
        std::fs::read(files.version(head.version)).map_err(io("read the current version"))?;
    if Hash::of(&bytes) != head.hash || bytes.len() as u64 != head.size {
        return Err(bad(format!(
            "version {}: the file does not match its recorded hash",
            head.version
        )));
    }
    let stored = StoredVersion::decode(&bytes)
        .map_err(|why| bad(format!("version {}: {why}", head.version)))?;
    if stored.version != head.version || Hash::of(stored.body.as_bytes()) != head.body_hash {
        return Err(bad(format!(
            "version {}: the file disagrees with its record",
            head.version
        )));
    }
    let catalog = Catalog::derive(path, &stored.metadata, &stored.body);
    if repair {
        for entry in std::fs::read_dir(history).map_err(io("read the history directory"))? {
            let entry = entry.map_err(io("read the history directory"))?;
            let name = entry.file_name();
            let Some(version) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".md"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if version < first || version > head.version {
                disk.remove(&entry.path())
                    .map_err(io("remove a stale version file"))?;
            }
        }
        if std::fs::read(&files.doc).ok().as_deref() != Some(&bytes[..]) {
            disk.replace(&files.doc, &bytes)
                .map_err(io("rewrite the document file"))?;
        }
    }
    Ok(DocState {
        path: path.clone(),
        current: head.version,
        first,
        archived: record.archived,
        body_hash: head.body_hash,
        modified: head.modified,
        catalog: DocCatalog::from(&catalog),
        head,
        history: Arc::from(Vec::new()),
        recent: records.into_iter().collect(),
    })
}

#[async_trait]
impl Store for FileStore {
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
        match self
            .write(ctx, Op::Publish, mutation, request.precondition)
            .await?
        {
            Committed::Changed { change, doc } => Ok(written(&change, &doc)),
            Committed::Unchanged(current) => Err(Error::new(
                Op::Publish,
                current.path.as_str(),
                ErrorKind::NotModified,
                "the body and metadata equal the current version",
            )
            .with_current(current)),
        }
    }

    async fn append(&self, ctx: &Ctx, request: WriteRequest) -> Result<Document> {
        let mutation = Mutation::Append {
            path: request.path,
            expected: request.expected_version.unwrap_or(0),
            body: request.content,
            metadata: request.metadata,
        };
        match self
            .write(ctx, Op::Append, mutation, request.precondition)
            .await?
        {
            Committed::Changed { change, doc } => Ok(written(&change, &doc)),
            Committed::Unchanged(current) => Err(Error::new(
                Op::Append,
                current.path.as_str(),
                ErrorKind::NotModified,
                "nothing to append",
            )
            .with_current(current)),
        }
    }

    async fn set_archived(&self, ctx: &Ctx, request: ArchiveRequest) -> Result<ArchiveResult> {
        let mutation = Mutation::SetArchived {
            path: request.path,
            archived: request.archived,
        };
        Ok(
            match self
                .write(ctx, Op::Archive, mutation, request.precondition)
                .await?
            {
                Committed::Changed { doc, .. } => ArchiveResult {
                    document: doc.summary(),
                    changed: true,
                },
                Committed::Unchanged(current) => ArchiveResult {
                    document: current,
                    changed: false,
                },
            },
        )
    }

    async fn close(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::Release);
        // Waits for a write being committed.
        drop(inner.writer.lock().await);
        inner.shared.search.close();
        if let Some(hub) = &inner.hub {
            hub.close();
        }
        inner.lock.lock().expect("lock slot poisoned").take();
    }
}

impl ChangeSource for FileStore {
    fn changes(&self) -> Option<Arc<ChangeHub>> {
        self.inner.hub.clone()
    }
}

impl Follower for FileStore {
    fn follow(&self, _sequence: u64) {}
}
