//! The reference model: the backend contract written the obvious way — one map of documents
//! with every version's bytes, copied on write, every read a scan. It shares with real
//! backends only the world model's vocabulary (path canonicalisation, metadata rules, stored
//! version bytes, the catalog record) and decides everything else on its own: write checks
//! and their order, retention, topology, listings, hash lookup, chain verification and LOOKUP
//! ranking. The differential suite runs backends against it.
//!
//! Body lookups are the exception: they index the live documents afresh with `quire_index`'s
//! section rules, so they check what a store adds to those rules, not the rules themselves.
//!
//! Not a backend to serve: no persistence, no change hub, O(documents) reads.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use quire_backend::{
    ArchiveRequest, ArchiveResult, CatalogMatch, CatalogQuery, ChangeHub, ChangeSource, Ctx,
    DirEntry, DocPath, DocSummary, Document, Error, ErrorKind, Filter, Follower, Hash, ListOptions,
    MatchMode, Metadata, Op, PreparedWrite, Prune, ReadView, Reader, Result, Store, Timestamp,
    VersionInfo, WriteRequest,
};
use quire_index::{CatalogIndex, EntryKey, SectionIndex};
use quire_log::Clock;
use quire_log::metadata::{self, Catalog, DocCatalog};
use quire_log::path::{clean, is_hidden_name};
use quire_log::version::StoredVersion;

const MAX_BODY: usize = 1 << 20;

#[derive(Clone, Debug)]
struct Version {
    bytes: Bytes,
    stored: StoredVersion,
    modified: Timestamp,
}

#[derive(Clone, Debug)]
struct Doc {
    /// Retained versions.
    versions: BTreeMap<u64, Version>,
    archived: bool,
}

impl Doc {
    fn current(&self) -> (u64, &Version) {
        let (n, v) = self
            .versions
            .last_key_value()
            .expect("a document has a version");
        (*n, v)
    }

    fn summary(&self, path: &DocPath) -> DocSummary {
        let (n, v) = self.current();
        DocSummary {
            path: path.clone(),
            version: n,
            first: *self.versions.keys().next().expect("a version"),
            archived: self.archived,
            etag: Hash::of(&v.bytes),
            body_hash: Hash::of(v.stored.body.as_bytes()),
            modified: v.modified,
        }
    }
}

type World = BTreeMap<DocPath, Doc>;

/// The reference model store.
pub struct ModelStore {
    /// Shared with views, which pin the world at their first read.
    world: Arc<Mutex<Arc<World>>>,
    clock: Arc<dyn Clock>,
    max_documents: u64,
    closed: AtomicBool,
    writer: tokio::sync::Mutex<()>,
}

impl fmt::Debug for ModelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelStore")
            .field("documents", &self.snapshot().len())
            .finish_non_exhaustive()
    }
}

impl ModelStore {
    pub fn new(clock: Arc<dyn Clock>) -> ModelStore {
        ModelStore::with_quota(clock, 0)
    }

    /// A model refusing new documents beyond `max_documents` (0: unlimited).
    pub fn with_quota(clock: Arc<dyn Clock>, max_documents: u64) -> ModelStore {
        ModelStore {
            world: Arc::new(Mutex::new(Arc::new(World::new()))),
            clock,
            max_documents,
            closed: AtomicBool::new(false),
            writer: tokio::sync::Mutex::new(()),
        }
    }

    fn snapshot(&self) -> Arc<World> {
        self.world.lock().expect("model poisoned").clone()
    }

    fn err(op: Op, key: &str, kind: ErrorKind, detail: &str) -> Error {
        Error::new(op, key, kind, detail)
    }

    /// Decides a write and returns the new document state, or the answer when nothing changes.
    fn decide(
        &self,
        world: &World,
        op: Op,
        raw: &str,
        expected: Option<u64>,
        content: &Bytes,
        request_meta: &Metadata,
    ) -> Result<(DocPath, Doc, Option<Prune>, PreparedWrite)> {
        let path = DocPath::parse(raw)
            .map_err(|e| Self::err(op, raw, ErrorKind::NotFound, &e.to_string()))?;
        let key = path.as_str().to_owned();
        let fail = |kind: ErrorKind, detail: &str| Self::err(op, &key, kind, detail);
        let existing = world.get(&path);
        if op == Op::Append && expected.unwrap_or(0) == 0 {
            return Err(fail(
                ErrorKind::InvalidContent,
                "append needs an expected version",
            ));
        }
        if content.len() > MAX_BODY {
            return Err(fail(ErrorKind::SizeLimit, "body too large"));
        }
        let text = std::str::from_utf8(content)
            .map_err(|_| fail(ErrorKind::InvalidContent, "not UTF-8"))?;
        let (body, meta) = if op == Op::Append {
            if text.is_empty() {
                return Err(fail(ErrorKind::InvalidContent, "append requires a body"));
            }
            let doc = existing.ok_or_else(|| fail(ErrorKind::NotFound, "no such document"))?;
            if doc.archived {
                return Err(fail(ErrorKind::Archived, "archived"));
            }
            let (current, version) = doc.current();
            if expected != Some(current) {
                return Err(fail(ErrorKind::Conflict, "stale").with_current(doc.summary(&path)));
            }
            let mut joined = version.stored.body.clone();
            if !joined.is_empty() && !joined.ends_with('\n') {
                joined.push('\n');
            }
            joined.push_str(text);
            if joined.len() > MAX_BODY {
                return Err(fail(ErrorKind::SizeLimit, "joined body too large"));
            }
            let request = metadata::normalize(request_meta)
                .map_err(|w| fail(ErrorKind::InvalidMetadata, &w))?;
            let mut merged = version.stored.metadata.clone();
            merged.remove("retention");
            merged.extend(request);
            let merged =
                metadata::normalize(&merged).map_err(|w| fail(ErrorKind::InvalidMetadata, &w))?;
            (joined, merged)
        } else {
            let meta = metadata::normalize(request_meta)
                .map_err(|w| fail(ErrorKind::InvalidMetadata, &w))?;
            (text.to_owned(), meta)
        };
        let (next, previous, mut doc) = match existing {
            None => {
                if let Some(e) = expected
                    && e != 0
                {
                    return Err(fail(ErrorKind::Conflict, "no document"));
                }
                if self.max_documents != 0 && world.len() as u64 >= self.max_documents {
                    return Err(fail(ErrorKind::Quota, "quota"));
                }
                let blocked = path
                    .ancestors()
                    .any(|a| world.keys().any(|p| p.as_str() == a))
                    || world.keys().any(|p| path.is_ancestor_of(p));
                if blocked {
                    return Err(fail(ErrorKind::PathCollision, "topology"));
                }
                (
                    1,
                    None,
                    Doc {
                        versions: BTreeMap::new(),
                        archived: false,
                    },
                )
            }
            Some(doc) => {
                let (current, version) = doc.current();
                if let Some(e) = expected
                    && e != current
                {
                    return Err(fail(ErrorKind::Conflict, "stale").with_current(doc.summary(&path)));
                }
                if doc.archived {
                    return Err(fail(ErrorKind::Archived, "archived"));
                }
                if version.stored.body == body && version.stored.metadata == meta {
                    return Err(
                        fail(ErrorKind::NotModified, "same").with_current(doc.summary(&path))
                    );
                }
                (current + 1, Some(Hash::of(&version.bytes)), doc.clone())
            }
        };
        let stored = StoredVersion {
            version: next,
            previous,
            metadata: meta.clone(),
            body: body.clone(),
        };
        doc.versions.insert(
            next,
            Version {
                bytes: stored.encode(),
                stored,
                modified: self.clock.now(),
            },
        );
        let mut prune = None;
        if let Some(keep) = meta
            .get("retention")
            .and_then(|r| metadata::parse_retention(r))
        {
            let keep = u64::from(keep);
            let oldest = *doc.versions.keys().next().expect("a version");
            if next > keep && next - keep + 1 > oldest {
                let first = next - keep + 1;
                doc.versions.retain(|n, _| *n >= first);
                prune = Some(Prune {
                    from: oldest,
                    to: first - 1,
                });
            }
        }
        let prepared = PreparedWrite {
            path: path.clone(),
            content: Some((body, meta)),
            archived: None,
        };
        Ok((path, doc, prune, prepared))
    }

    async fn write(&self, ctx: &Ctx, op: Op, request: WriteRequest) -> Result<Document> {
        ctx.check(op, &request.path)?;
        if self.closed.load(Ordering::Acquire) {
            return Err(Self::err(op, &request.path, ErrorKind::Closed, "closed"));
        }
        let _guard = self.writer.lock().await;
        let world = self.snapshot();
        let (path, doc, prune, prepared) = self.decide(
            &world,
            op,
            &request.path,
            request.expected_version,
            &request.content,
            &request.metadata,
        )?;
        if let Some(precondition) = &request.precondition {
            let state = ModelView::pinned(world.clone());
            precondition.check(ctx, &state, &prepared).await?;
        }
        ctx.check(op, &request.path)?;
        let (n, version) = doc.current();
        let mut answer = document(&path, n, version, false);
        answer.prune = prune;
        let mut next = (*world).clone();
        next.insert(path, doc);
        *self.world.lock().expect("model poisoned") = Arc::new(next);
        Ok(answer)
    }
}

fn document(path: &DocPath, n: u64, version: &Version, archived: bool) -> Document {
    Document {
        path: path.clone(),
        content: version.stored.body.clone(),
        metadata: (!version.stored.metadata.is_empty()).then(|| version.stored.metadata.clone()),
        version: n,
        modified: version.modified,
        archived,
        etag: Hash::of(&version.bytes),
        content_hash: Hash::of(version.stored.body.as_bytes()),
        prune: None,
    }
}

#[async_trait]
impl Store for ModelStore {
    async fn open_view(&self, ctx: &Ctx) -> Result<Box<dyn ReadView>> {
        ctx.check(Op::OpenView, "")?;
        Ok(Box::new(ModelView {
            source: Some(self.world.clone()),
            pinned: OnceLock::new(),
            closed: AtomicBool::new(false),
        }))
    }

    async fn publish(&self, ctx: &Ctx, request: WriteRequest) -> Result<Document> {
        self.write(ctx, Op::Publish, request).await
    }

    async fn append(&self, ctx: &Ctx, request: WriteRequest) -> Result<Document> {
        self.write(ctx, Op::Append, request).await
    }

    async fn set_archived(&self, ctx: &Ctx, request: ArchiveRequest) -> Result<ArchiveResult> {
        let op = Op::Archive;
        ctx.check(op, &request.path)?;
        if self.closed.load(Ordering::Acquire) {
            return Err(Self::err(op, &request.path, ErrorKind::Closed, "closed"));
        }
        let _guard = self.writer.lock().await;
        let world = self.snapshot();
        let path = DocPath::parse(&request.path)
            .map_err(|e| Self::err(op, &request.path, ErrorKind::NotFound, &e.to_string()))?;
        let doc = world
            .get(&path)
            .ok_or_else(|| Self::err(op, path.as_str(), ErrorKind::NotFound, "no such document"))?;
        if doc.archived == request.archived {
            return Ok(ArchiveResult {
                document: doc.summary(&path),
                changed: false,
            });
        }
        if let Some(precondition) = &request.precondition {
            let prepared = PreparedWrite {
                path: path.clone(),
                content: None,
                archived: Some(request.archived),
            };
            precondition
                .check(ctx, &ModelView::pinned(world.clone()), &prepared)
                .await?;
        }
        ctx.check(op, &request.path)?;
        let mut changed = doc.clone();
        changed.archived = request.archived;
        let summary = changed.summary(&path);
        let mut next = (*world).clone();
        next.insert(path, changed);
        *self.world.lock().expect("model poisoned") = Arc::new(next);
        Ok(ArchiveResult {
            document: summary,
            changed: true,
        })
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        drop(self.writer.lock().await);
    }
}

impl ChangeSource for ModelStore {
    fn changes(&self) -> Option<Arc<ChangeHub>> {
        None
    }
}

impl Follower for ModelStore {
    fn follow(&self, _sequence: u64) {}
}

/// A view of the model, pinned at its first read.
struct ModelView {
    source: Option<Arc<Mutex<Arc<World>>>>,
    pinned: OnceLock<Arc<World>>,
    closed: AtomicBool,
}

impl fmt::Debug for ModelView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelView").finish_non_exhaustive()
    }
}

impl ModelView {
    fn pinned(world: Arc<World>) -> ModelView {
        let pinned = OnceLock::new();
        let _ = pinned.set(world);
        ModelView {
            source: None,
            pinned,
            closed: AtomicBool::new(false),
        }
    }

    fn world(&self, ctx: &Ctx, op: Op, key: &str) -> Result<Arc<World>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::new(op, key, ErrorKind::ViewClosed, "closed view"));
        }
        ctx.check(op, key)?;
        Ok(self
            .pinned
            .get_or_init(|| {
                self.source
                    .as_ref()
                    .map(|s| s.lock().expect("model poisoned").clone())
                    .unwrap_or_default()
            })
            .clone())
    }

    fn doc<'w>(world: &'w World, op: Op, raw: &str) -> Result<(DocPath, &'w Doc)> {
        let path = DocPath::parse(raw)
            .map_err(|e| Error::new(op, raw, ErrorKind::NotFound, e.to_string()))?;
        let doc = world
            .get(&path)
            .ok_or_else(|| Error::new(op, raw, ErrorKind::NotFound, "no such document"))?;
        Ok((path, doc))
    }

    /// The directory `raw` names: `Ok(None)` for a document, `Err` for nothing.
    fn dir(world: &World, op: Op, raw: &str) -> Result<Option<String>> {
        let dir =
            clean(raw).map_err(|e| Error::new(op, raw, ErrorKind::NotFound, e.to_string()))?;
        if dir == "/" {
            return Ok(Some(dir));
        }
        if world.keys().any(|p| p.as_str() == dir) {
            return Ok(None);
        }
        let prefix = format!("{dir}/");
        if world.keys().any(|p| p.as_str().starts_with(&prefix)) {
            return Ok(Some(dir));
        }
        Err(Error::new(op, raw, ErrorKind::NotFound, "nothing here"))
    }
}

#[async_trait]
impl Reader for ModelView {
    async fn get(&self, ctx: &Ctx, raw: &str, version: u64) -> Result<Document> {
        let world = self.world(ctx, Op::Get, raw)?;
        let (path, doc) = Self::doc(&world, Op::Get, raw)?;
        let n = if version == 0 {
            doc.current().0
        } else {
            version
        };
        let v = doc
            .versions
            .get(&n)
            .ok_or_else(|| Error::new(Op::Get, raw, ErrorKind::NotFound, "no such version"))?;
        Ok(document(&path, n, v, version == 0 && doc.archived))
    }

    async fn list_entries(
        &self,
        ctx: &Ctx,
        raw: &str,
        options: &ListOptions,
    ) -> Result<Vec<DirEntry>> {
        let op = Op::ListEntries;
        let world = self.world(ctx, op, raw)?;
        let dir = Self::dir(&world, op, raw)?
            .ok_or_else(|| Error::new(op, raw, ErrorKind::NotFound, "a document"))?;
        let prefix = if dir == "/" {
            "/".to_owned()
        } else {
            format!("{dir}/")
        };
        let mut shown: BTreeMap<String, bool> = BTreeMap::new();
        for (path, doc) in world.iter() {
            let Some(rest) = path.as_str().strip_prefix(&prefix) else {
                continue;
            };
            let segments: Vec<&str> = rest.split('/').collect();
            if segments.iter().any(|s| is_hidden_name(s)) {
                continue;
            }
            if doc.archived && !options.include_archived {
                continue;
            }
            shown.insert(segments[0].to_owned(), segments.len() > 1);
        }
        let mut out: Vec<DirEntry> = shown
            .into_iter()
            .filter(|(name, _)| name.as_str() > options.after.as_str())
            .map(|(name, is_dir)| DirEntry { name, is_dir })
            .collect();
        if options.limit != 0 {
            out.truncate(options.limit);
        }
        Ok(out)
    }

    async fn is_dir(&self, ctx: &Ctx, raw: &str) -> Result<bool> {
        let world = self.world(ctx, Op::IsDir, raw)?;
        Ok(Self::dir(&world, Op::IsDir, raw)?.is_some())
    }

    async fn versions(&self, ctx: &Ctx, raw: &str) -> Result<Vec<VersionInfo>> {
        let world = self.world(ctx, Op::Versions, raw)?;
        let (_, doc) = Self::doc(&world, Op::Versions, raw)?;
        Ok(doc
            .versions
            .iter()
            .rev()
            .map(|(n, v)| VersionInfo {
                version: *n,
                modified: v.modified,
                etag: Hash::of(&v.bytes),
            })
            .collect())
    }

    async fn lookup_hash(&self, ctx: &Ctx, hash: &Hash) -> Result<DocPath> {
        let key = hash.content_hash();
        let world = self.world(ctx, Op::LookupHash, &key)?;
        world
            .iter()
            .find(|(_, d)| !d.archived && Hash::of(d.current().1.stored.body.as_bytes()) == *hash)
            .map(|(p, _)| p.clone())
            .ok_or_else(|| Error::new(Op::LookupHash, key, ErrorKind::NotFound, "no such body"))
    }

    async fn verify_chain(&self, ctx: &Ctx, raw: &str) -> Result<()> {
        let world = self.world(ctx, Op::VerifyChain, raw)?;
        let (_, doc) = Self::doc(&world, Op::VerifyChain, raw)?;
        let mut previous: Option<Hash> = None;
        for (n, v) in &doc.versions {
            if let Some(previous) = previous
                && v.stored.previous != Some(previous)
            {
                return Err(Error::new(
                    Op::VerifyChain,
                    raw,
                    ErrorKind::Integrity,
                    format!("chain broken at version {n}"),
                ));
            }
            previous = Some(Hash::of(&v.bytes));
        }
        Ok(())
    }

    async fn lookup(&self, ctx: &Ctx, query: &CatalogQuery) -> Result<Vec<CatalogMatch>> {
        let op = Op::Lookup;
        let world = self.world(ctx, op, &query.scope)?;
        if query.mode == MatchMode::Body {
            return Ok(body_lookup(&world, query));
        }
        let Ok(scope) = clean(&query.scope) else {
            return Ok(Vec::new());
        };
        let text = query.query.trim();
        let all = text == "*";
        let mut terms: Vec<String> = Vec::new();
        for word in text.split_whitespace() {
            let word = word.to_lowercase();
            if !terms.contains(&word) {
                terms.push(word);
            }
        }
        let mut hits: Vec<(usize, f64, Timestamp, CatalogMatch)> = Vec::new();
        for (path, doc) in world.iter() {
            if doc.archived {
                continue;
            }
            if scope != "/" && !path.as_str().starts_with(&format!("{scope}/")) {
                continue;
            }
            let (_, v) = doc.current();
            let catalog = Catalog::derive(path, &v.stored.metadata, &v.stored.body);
            let tags: Vec<String> = catalog.tags.iter().map(|t| t.to_lowercase()).collect();
            let title = catalog.title.to_lowercase();
            let passes = query.filters.iter().all(|f| match f {
                Filter::Tag(t) => tags.contains(t),
                Filter::ModifiedAfter(at) => v.modified > *at,
                Filter::ModifiedBefore(at) => v.modified < *at,
                Filter::Equals(k, value) => v.stored.metadata.get(k) == Some(value),
            });
            if !passes {
                continue;
            }
            let score = if all {
                0
            } else {
                let s = terms
                    .iter()
                    .filter(|t| tags.contains(t) || title.contains(t.as_str()))
                    .count();
                if s == 0 {
                    continue;
                }
                s
            };
            let importance: f64 = catalog.importance.parse().unwrap_or(0.0);
            hits.push((
                score,
                importance,
                v.modified,
                CatalogMatch {
                    path: path.clone(),
                    title: catalog.title,
                    tags: catalog.tags,
                    importance: catalog.importance,
                    modified: v.modified,
                    score,
                    section: None,
                },
            ));
        }
        hits.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(b.1.total_cmp(&a.1))
                .then(b.2.cmp(&a.2))
                .then(a.3.path.cmp(&b.3.path))
        });
        let mut out: Vec<CatalogMatch> = hits.into_iter().map(|h| h.3).collect();
        if query.max != 0 {
            out.truncate(query.max);
        }
        Ok(out)
    }
}

/// Body mode indexes every live document afresh: the section rules are `quire_index`'s own
/// (the model checks what a store adds to them: snapshots, archive state, updates, scope).
fn body_lookup(world: &World, query: &CatalogQuery) -> Vec<CatalogMatch> {
    let mut catalog = CatalogIndex::new();
    let mut sections = SectionIndex::new();
    for (path, doc) in world.iter() {
        if doc.archived {
            continue;
        }
        let (_, v) = doc.current();
        let derived = Catalog::derive(path, &v.stored.metadata, &v.stored.body);
        let key = EntryKey {
            body_hash: Hash::of(v.stored.body.as_bytes()),
            title: derived.title.clone(),
            tags: derived.tags.clone(),
            importance: derived.importance.clone(),
        };
        catalog.upsert(path, DocCatalog::from(&derived), v.modified);
        sections.upsert(path, key, &v.stored.body);
    }
    sections.lookup(query, &catalog)
}

impl ReadView for ModelView {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}
