//! The stored section index: sections in a tantivy index (in memory, or files in a
//! directory), one tantivy document per section, and the search of one committed state of it.
//!
//! - **Documents.** Every section of a document is one tantivy document carrying the
//!   document's path (indexed, for deletes and scope, and a column to name rows), its ancestor
//!   directories (for scope), its text tokens with counts, its trail tokens, the document's
//!   entry tokens (tags and title), the union of text and trail tokens (whose document
//!   frequency is the df of a term), its exact token count, its number in the document, the
//!   digest of the document's [`EntryKey`] (what tells whether it is current), and stored
//!   anchor, heading, text, trail, title and tags (for snippets and phrases). Tokens follow
//!   [`crate::tokens`]; they hold no whitespace, so they are handed to tantivy joined by
//!   spaces under its whitespace tokenizer.
//! - **Commits** carry the sequence of the snapshot the index covers as their payload.
//! - **Statistics** are tantivy's: a superseded or deleted section still counts in N, the mean
//!   length and df until a merge drops it (as in any segment index); the match rule never
//!   depends on them.
//!
//! A [`Base`] is one commit: a tantivy searcher, so it stays valid (its files kept) while it
//! is held, whatever the writer commits or merges meanwhile.

use std::collections::{BinaryHeap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use quire_log::{DocPath, Hash};
use std::io::Write;
use tantivy::columnar::StrColumn;

use tantivy::directory::{Directory, MmapDirectory, RamDirectory, TerminatingWrite};
use tantivy::postings::{Postings, SegmentPostings};
use tantivy::schema::{
    FAST, Field, IndexRecordOption, STORED, STRING, Schema, TantivyDocument, TextFieldIndexing,
    TextOptions, Value,
};
use tantivy::{
    DocId, DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, SegmentReader, TERMINATED,
    Term as TantivyTerm,
};

use crate::body::{
    self, EntryKey, IndexedDoc, Ranked, Ranking, Source, catalog_score, phrase_in, prior,
    term_score,
};
use crate::catalog::CatalogIndex;
use crate::query::CatalogQuery;
use crate::tokens::{self, MAX_PREFIX_EXPANSION, Term};

/// Memory the writer may buffer before it writes a segment.
const WRITER_BUDGET: usize = 50_000_000;
/// Decompressed stored blocks kept per segment.
const STORE_CACHE_BLOCKS: usize = 4;

/// Why the stored index failed.
#[derive(Debug)]
pub struct StoreError(String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "section store: {}", self.0)
    }
}

impl std::error::Error for StoreError {}

impl From<tantivy::TantivyError> for StoreError {
    fn from(e: tantivy::TantivyError) -> Self {
        StoreError(e.to_string())
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError(e.to_string())
    }
}

impl From<tantivy::directory::error::OpenDirectoryError> for StoreError {
    fn from(e: tantivy::directory::error::OpenDirectoryError) -> Self {
        StoreError(e.to_string())
    }
}

pub type StoreResult<T> = std::result::Result<T, StoreError>;

/// The fields of the schema.
#[derive(Clone, Copy, Debug)]
struct Fields {
    path: Field,
    dirs: Field,
    text: Field,
    trail: Field,
    entry: Field,
    any: Field,
    len: Field,
    number: Field,
    key: Field,
    anchor: Field,
    heading: Field,
    stored_text: Field,
    stored_trail: Field,
    title: Field,
    tags: Field,
}

fn tokens_indexing(option: IndexRecordOption) -> TextOptions {
    TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("whitespace")
            .set_index_option(option)
            .set_fieldnorms(false),
    )
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let fields = Fields {
        path: b.add_text_field("path", STRING | FAST),
        dirs: b.add_text_field("dirs", STRING),
        text: b.add_text_field("text", tokens_indexing(IndexRecordOption::WithFreqs)),
        trail: b.add_text_field("trail", tokens_indexing(IndexRecordOption::Basic)),
        entry: b.add_text_field("entry", tokens_indexing(IndexRecordOption::Basic)),
        any: b.add_text_field("any", tokens_indexing(IndexRecordOption::Basic)),
        len: b.add_u64_field("len", FAST),
        number: b.add_u64_field("number", FAST),
        key: b.add_u64_field("key", FAST),
        anchor: b.add_text_field("anchor", TextOptions::default().set_fast("raw") | STORED),
        heading: b.add_text_field("heading", STORED),
        stored_text: b.add_text_field("stored_text", STORED),
        stored_trail: b.add_text_field("stored_trail", STORED),
        title: b.add_text_field("title", STORED),
        tags: b.add_text_field("tags", STORED),
    };
    (b.build(), fields)
}

fn fields_of(schema: &Schema) -> StoreResult<Fields> {
    let f = |name: &str| {
        schema
            .get_field(name)
            .map_err(|_| StoreError(format!("the stored index has no field {name}")))
    };
    Ok(Fields {
        path: f("path")?,
        dirs: f("dirs")?,
        text: f("text")?,
        trail: f("trail")?,
        entry: f("entry")?,
        any: f("any")?,
        len: f("len")?,
        number: f("number")?,
        key: f("key")?,
        anchor: f("anchor")?,
        heading: f("heading")?,
        stored_text: f("stored_text")?,
        stored_trail: f("stored_trail")?,
        title: f("title")?,
        tags: f("tags")?,
    })
}

/// The digest of an entry key, as the stored index keeps it.
pub fn key_digest(key: &EntryKey) -> u64 {
    let mut bytes = key.body_hash.0.to_vec();
    bytes.extend_from_slice(key.title.as_bytes());
    for tag in &key.tags {
        bytes.push(0);
        bytes.extend_from_slice(tag.as_bytes());
    }
    let hash = Hash::of(&bytes);
    u64::from_le_bytes(hash.0[..8].try_into().expect("8 bytes"))
}

/// The directories above `path`, outermost first (`/a/b/c.md` → `/a`, `/a/b`).
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .map(|(i, _)| &path[..i])
        .filter(|d| !d.is_empty())
}

/// A world's stored section index and its one writer.
pub struct SectionStore {
    index: Index,
    /// The directory under tantivy's managed one: its files as stored, footers included.
    raw: Box<dyn Directory>,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    fields: Fields,
}

impl fmt::Debug for SectionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SectionStore").finish_non_exhaustive()
    }
}

impl SectionStore {
    /// A new, empty stored index: files in `dir` (which must hold no index), or in memory.
    pub fn create(dir: Option<&Path>) -> StoreResult<SectionStore> {
        let (schema, _) = schema();
        let raw: Box<dyn Directory> = match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Box::new(MmapDirectory::open(dir)?)
            }
            None => Box::new(RamDirectory::create()),
        };
        let index = Index::create(raw.box_clone(), schema, Default::default())?;
        SectionStore::with_index(index, raw)
    }

    /// The stored index in `dir`, as last committed.
    pub fn open(dir: &Path) -> StoreResult<SectionStore> {
        let raw: Box<dyn Directory> = Box::new(MmapDirectory::open(dir)?);
        let index = Index::open(raw.box_clone())?;
        let broken = index.validate_checksum()?;
        if !broken.is_empty() {
            return Err(StoreError(format!(
                "{} stored index files fail their checksum",
                broken.len()
            )));
        }
        SectionStore::with_index(index, raw)
    }

    fn with_index(index: Index, raw: Box<dyn Directory>) -> StoreResult<SectionStore> {
        let fields = fields_of(&index.schema())?;
        let writer = index.writer_with_num_threads(1, WRITER_BUDGET)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .doc_store_cache_num_blocks(STORE_CACHE_BLOCKS)
            .try_into()?;
        Ok(SectionStore {
            index,
            raw,
            reader,
            writer: Mutex::new(writer),
            fields,
        })
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, IndexWriter> {
        self.writer.lock().expect("section writer poisoned")
    }

    /// Adds the sections of `body` for `path` (which the store must not hold uncommitted).
    pub fn add(&self, path: &DocPath, key: EntryKey, body: &str) -> StoreResult<()> {
        let doc = body::index_doc(key.clone(), body);
        self.add_doc(path, &key, IndexedDoc(&doc))
    }

    fn add_doc(&self, path: &DocPath, key: &EntryKey, doc: IndexedDoc<'_>) -> StoreResult<()> {
        let f = self.fields;
        let digest = key_digest(key);
        let entry = doc.entry_tokens().collect::<Vec<_>>().join(" ");
        let tags = key.tags.join("\n");
        let writer = self.writer();
        for (number, s) in doc.sections().enumerate() {
            let mut d = TantivyDocument::new();
            d.add_text(f.path, path.as_str());
            for dir in ancestors(path.as_str()) {
                d.add_text(f.dirs, dir);
            }
            let mut text = String::new();
            for (token, count) in s.tf {
                for _ in 0..*count {
                    text.push_str(token);
                    text.push(' ');
                }
            }
            d.add_text(f.text, &text);
            let trail = s.trail_tokens.iter().map(|t| &**t).collect::<Vec<_>>();
            d.add_text(f.trail, trail.join(" "));
            d.add_text(f.entry, &entry);
            let mut any: Vec<&str> = s.tf.iter().map(|(t, _)| &**t).chain(trail).collect();
            any.sort_unstable();
            any.dedup();
            d.add_text(f.any, any.join(" "));
            d.add_u64(f.len, u64::from(s.len));
            d.add_u64(f.number, number as u64);
            d.add_u64(f.key, digest);
            d.add_text(f.anchor, s.anchor);
            d.add_text(f.heading, s.heading);
            d.add_text(f.stored_text, s.text);
            d.add_text(f.stored_trail, s.trail.join("\n"));
            d.add_text(f.title, &key.title);
            d.add_text(f.tags, &tags);
            writer.add_document(d)?;
        }
        Ok(())
    }

    /// Drops every section of `path`.
    pub fn delete(&self, path: &DocPath) {
        self.writer().delete_term(TantivyTerm::from_field_text(
            self.fields.path,
            path.as_str(),
        ));
    }

    /// Writes the version's delta into the store: its changed paths replaced by its documents.
    pub fn fold(&self, version: &crate::version::IndexVersion) -> StoreResult<()> {
        for path in version.changed() {
            self.delete(path);
        }
        for (path, key, doc) in version.delta().documents() {
            self.add_doc(path, key, doc)?;
        }
        Ok(())
    }

    /// Commits what was added and deleted as the state of `sequence`, and returns it.
    pub fn commit(&self, sequence: u64) -> StoreResult<Base> {
        {
            let mut writer = self.writer();
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&sequence.to_string());
            prepared.commit()?;
        }
        self.reader.reload()?;
        self.base()
    }

    /// The last commit.
    pub fn base(&self) -> StoreResult<Base> {
        let payload = self.index.load_metas()?.payload.unwrap_or_default();
        let sequence = if payload.is_empty() {
            0
        } else {
            payload
                .parse()
                .map_err(|_| StoreError(format!("the commit payload {payload:?} is no sequence")))?
        };
        Ok(Base {
            searcher: Arc::new(self.reader.searcher()),
            fields: self.fields,
            sequence,
            totals: Arc::default(),
        })
    }

    /// The files of the last commit, and its `meta.json`, to copy the index elsewhere. The
    /// caller holds a [`Base`] of that commit while it reads them, so none is collected.
    pub fn export(&self) -> StoreResult<Export> {
        let metas = self.index.load_metas()?;
        let meta = serde_json::to_string(&metas).map_err(|e| StoreError(e.to_string()))?;
        let directory = self.index.directory();
        let mut files: Vec<String> = Vec::new();
        for path in metas.list_segment_files() {
            if directory.exists(&path).unwrap_or(false) {
                files.push(path.to_string_lossy().into_owned());
            }
        }
        files.sort();
        Ok(Export { meta, files })
    }

    /// The bytes of one file [`SectionStore::export`] named.
    pub fn read(&self, name: &str) -> StoreResult<tantivy::directory::OwnedBytes> {
        let slice = self
            .raw
            .open_read(Path::new(name))
            .map_err(|e| StoreError(e.to_string()))?;
        Ok(slice.read_bytes()?)
    }

    /// Waits for merges and stops the writer.
    pub fn close(self) -> StoreResult<()> {
        let writer = self.writer.into_inner().expect("section writer poisoned");
        writer.wait_merging_threads()?;
        Ok(())
    }
}

/// What a copy of a commit holds: its `meta.json` and the names of its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    pub meta: String,
    pub files: Vec<String>,
}

/// Builds a stored index from copied files: files in `dir`, or in memory.
pub struct Import {
    directory: Box<dyn Directory>,
}

impl fmt::Debug for Import {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Import").finish_non_exhaustive()
    }
}

/// One file being copied in.
pub struct ImportFile(tantivy::directory::WritePtr);

impl fmt::Debug for ImportFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportFile").finish_non_exhaustive()
    }
}

impl ImportFile {
    pub fn write(&mut self, bytes: &[u8]) -> StoreResult<()> {
        Ok(self.0.write_all(bytes)?)
    }

    pub fn finish(mut self) -> StoreResult<()> {
        self.0.flush()?;
        let inner = self.0.into_inner().map_err(|e| StoreError(e.to_string()))?;
        Ok(inner.terminate()?)
    }
}

impl Import {
    pub fn new(dir: Option<&Path>) -> StoreResult<Import> {
        let directory: Box<dyn Directory> = match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Box::new(MmapDirectory::open(dir)?)
            }
            None => Box::new(RamDirectory::create()),
        };
        Ok(Import { directory })
    }

    /// Starts copying file `name` (a plain file name).
    pub fn file(&self, name: &str) -> StoreResult<ImportFile> {
        if name.contains(['/', '\\']) || name.starts_with('.') || name == "meta.json" {
            return Err(StoreError(format!("{name:?} is no index file name")));
        }
        let ptr = self
            .directory
            .open_write(Path::new(name))
            .map_err(|e| StoreError(e.to_string()))?;
        Ok(ImportFile(ptr))
    }

    /// Writes `meta` and opens the index, checking every file against its checksum.
    pub fn open(self, meta: &str) -> StoreResult<SectionStore> {
        self.directory
            .atomic_write(Path::new("meta.json"), meta.as_bytes())?;
        let index = Index::open(self.directory.box_clone())?;
        let broken = index.validate_checksum()?;
        if !broken.is_empty() {
            return Err(StoreError(format!(
                "{} copied index files fail their checksum",
                broken.len()
            )));
        }
        SectionStore::with_index(index, self.directory)
    }
}

/// One committed state of a [`SectionStore`]. Cheap to clone.
#[derive(Clone)]
pub struct Base {
    searcher: Arc<tantivy::Searcher>,
    fields: Fields,
    sequence: u64,
    /// Sections counted by the statistics and their summed length, read once.
    totals: Arc<OnceLock<(u64, u64)>>,
}

impl fmt::Debug for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Base")
            .field("sequence", &self.sequence)
            .field("sections", &self.searcher.num_docs())
            .finish()
    }
}

/// A posting list of one token in one field of one segment.
struct List {
    postings: SegmentPostings,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Trail,
    Entry,
}

/// What one query term reads in a segment: the posting lists any of which meets it (for a
/// phrase, one group per word, every group needed).
struct Need {
    groups: Vec<Vec<List>>,
}

/// Moves `list` to `doc` (if it is behind) and tells whether it holds it.
fn at(list: &mut List, doc: DocId) -> bool {
    if list.postings.doc() < doc {
        list.postings.seek(doc);
    }
    list.postings.doc() == doc
}

/// What one term found in one candidate section.
#[derive(Clone, Copy, Default)]
struct Met {
    count: u32,
    trail: bool,
    entry: bool,
}

/// A scored candidate before its path is known.
#[derive(Clone, Copy)]
struct Candidate {
    score: f64,
    segment: u32,
    doc: DocId,
    catalog: bool,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.segment.cmp(&self.segment))
            .then_with(|| other.doc.cmp(&self.doc))
    }
}

/// A row's stored fields.
pub(crate) struct Stored {
    pub anchor: String,
    pub heading: String,
    pub text: String,
}

impl Base {
    /// The sequence of the snapshot this commit covers.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Live sections.
    pub fn section_count(&self) -> u64 {
        self.searcher.num_docs()
    }

    fn segments(&self) -> &[SegmentReader] {
        self.searcher.segment_readers()
    }

    /// Sections counted by the statistics (live and not yet merged away) and their summed
    /// length.
    pub(crate) fn totals(&self) -> (u64, u64) {
        *self.totals.get_or_init(|| {
            let mut sections = 0;
            let mut len = 0;
            for s in self.segments() {
                sections += u64::from(s.max_doc());
                if let Ok(lens) = s.fast_fields().u64("len") {
                    len += (0..s.max_doc()).filter_map(|d| lens.first(d)).sum::<u64>();
                }
            }
            (sections, len)
        })
    }

    /// Sections holding `token` in text or trail, as the statistics count them.
    pub(crate) fn section_df(&self, token: &str) -> u64 {
        let term = TantivyTerm::from_field_text(self.fields.any, token);
        self.segments()
            .iter()
            .filter_map(|s| s.inverted_index(self.fields.any).ok())
            .map(|inv| u64::from(inv.doc_freq(&term).unwrap_or(0)))
            .sum()
    }

    /// Tokens of text, trail or entry starting with `stem`, with the sections holding each.
    pub(crate) fn tokens_from(&self, stem: &str) -> Vec<(Arc<str>, u64)> {
        let mut found: std::collections::BTreeMap<Arc<str>, u64> = Default::default();
        for s in self.segments() {
            for field in [self.fields.any, self.fields.entry] {
                let Ok(inv) = s.inverted_index(field) else {
                    continue;
                };
                let Ok(mut stream) = inv.terms().range().ge(stem.as_bytes()).into_stream() else {
                    continue;
                };
                while stream.advance() {
                    let Ok(token) = std::str::from_utf8(stream.key()) else {
                        continue;
                    };
                    if !token.starts_with(stem) {
                        break;
                    }
                    *found.entry(token.into()).or_default() += u64::from(stream.value().doc_freq);
                }
            }
        }
        found.into_iter().collect()
    }

    /// The digest of the entry key `path` is indexed under, if it is.
    pub fn key(&self, path: &DocPath) -> Option<u64> {
        let term = TantivyTerm::from_field_text(self.fields.path, path.as_str());
        for s in self.segments() {
            let Ok(inv) = s.inverted_index(self.fields.path) else {
                continue;
            };
            let Ok(Some(mut postings)) = inv.read_postings(&term, IndexRecordOption::Basic) else {
                continue;
            };
            let Ok(keys) = s.fast_fields().u64("key") else {
                continue;
            };
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if !s.is_deleted(doc) {
                    return keys.first(doc);
                }
                doc = postings.advance();
            }
        }
        None
    }

    /// Every indexed path with its key digest, in path order.
    pub fn keys(&self) -> StoreResult<Vec<(String, u64)>> {
        let mut out = Vec::new();
        for s in self.segments() {
            let paths = path_column(s)?;
            let keys = s.fast_fields().u64("key")?;
            let numbers = s.fast_fields().u64("number")?;
            let mut name = String::new();
            for doc in s.doc_ids_alive() {
                if numbers.first(doc) != Some(0) {
                    continue;
                }
                let Some(ord) = paths.ords().first(doc) else {
                    continue;
                };
                name.clear();
                if paths.ord_to_str(ord, &mut name)? {
                    out.push((name.clone(), keys.first(doc).unwrap_or(0)));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Documents stored.
    pub fn document_count(&self) -> u64 {
        self.keys().map_or(0, |k| k.len() as u64)
    }

    fn need(&self, s: &SegmentReader, term: &Term, expansions: &[Arc<str>]) -> Option<Need> {
        let open = |field: Field, token: &str, option| -> Option<SegmentPostings> {
            let inv = s.inverted_index(field).ok()?;
            inv.read_postings(&TantivyTerm::from_field_text(field, token), option)
                .ok()
                .flatten()
        };
        let group = |tokens: &[&str]| -> Vec<List> {
            let mut lists = Vec::new();
            for token in tokens {
                for (field, kind, option) in [
                    (self.fields.text, Kind::Text, IndexRecordOption::WithFreqs),
                    (self.fields.trail, Kind::Trail, IndexRecordOption::Basic),
                    (self.fields.entry, Kind::Entry, IndexRecordOption::Basic),
                ] {
                    if let Some(postings) = open(field, token, option) {
                        lists.push(List { postings, kind });
                    }
                }
            }
            lists
        };
        let groups = match term {
            Term::Word(w) => vec![group(&[w.as_str()])],
            Term::Prefix(_) => {
                let tokens: Vec<&str> = expansions.iter().map(|t| &**t).collect();
                vec![group(&tokens)]
            }
            Term::Phrase(words) => words
                .iter()
                .filter(|w| w.chars().nth(1).is_some() && w.len() <= tokens::MAX_TOKEN_BYTES)
                .map(|w| group(&[w.as_str()]))
                .collect(),
        };
        if groups.is_empty() || groups.iter().any(Vec::is_empty) {
            return None;
        }
        Some(Need { groups })
    }

    /// The rows of this commit for `terms`, scored with `stats`, best first, enough of them
    /// that no row left out could rank among the first `query.max` (all when 0); paths
    /// `skip` names are left out.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rows(
        &self,
        terms: &[Term],
        expansions: &[Vec<Arc<str>>],
        stats: &Ranking,
        scope: &str,
        query: &CatalogQuery,
        catalog: &CatalogIndex,
        skip: impl Fn(&DocPath) -> bool,
    ) -> StoreResult<Vec<Ranked>> {
        let mut candidates = Vec::new();
        for (number, s) in self.segments().iter().enumerate() {
            self.segment_candidates(
                number as u32,
                s,
                terms,
                expansions,
                stats,
                scope,
                &mut candidates,
            )?;
        }
        let mut heap = BinaryHeap::from(candidates);
        let want = if query.max == 0 {
            usize::MAX
        } else {
            query.max
        };
        let mut rows: Vec<Ranked> = Vec::new();
        // The `want`-th best final score so far (a min-heap of the best `want`).
        let mut best: BinaryHeap<std::cmp::Reverse<OrdF64>> = BinaryHeap::new();
        let mut catalog_rows: HashSet<DocPath> = HashSet::new();
        let mut columns: Vec<Option<(StrColumn, StrColumn)>> = vec![None; self.segments().len()];
        let mut name = String::new();
        while let Some(c) = heap.pop() {
            if best.len() >= want && best.peek().is_some_and(|m| c.score < m.0.0) {
                // The prior is at most 1, so nothing left can reach the cut.
                break;
            }
            let s = &self.segments()[c.segment as usize];
            let slot = &mut columns[c.segment as usize];
            if slot.is_none() {
                *slot = Some((path_column(s)?, anchor_column(s)?));
            }
            let (paths, anchors) = slot.as_ref().expect("just set");
            let Some(ord) = paths.ords().first(c.doc) else {
                continue;
            };
            name.clear();
            if !paths.ord_to_str(ord, &mut name)? {
                continue;
            }
            let Ok(path) = DocPath::parse(&name) else {
                continue;
            };
            if skip(&path) {
                continue;
            }
            let Some(entry) = catalog.admitted(scope, &query.filters, &path) else {
                continue;
            };
            if c.catalog && !catalog_rows.insert(path.clone()) {
                continue;
            }
            let anchor = if c.catalog {
                String::new()
            } else {
                let mut a = String::new();
                if let Some(ord) = anchors.ords().first(c.doc) {
                    anchors.ord_to_str(ord, &mut a)?;
                }
                a
            };
            let score = c.score * prior(&entry.importance, &path);
            best.push(std::cmp::Reverse(OrdF64(score)));
            if best.len() > want {
                best.pop();
            }
            rows.push(Ranked {
                score,
                path,
                anchor,
                entry,
                source: Source::Base {
                    segment: c.segment,
                    doc: c.doc,
                    catalog: c.catalog,
                },
            });
        }
        Ok(rows)
    }

    #[allow(clippy::too_many_arguments)]
    fn segment_candidates(
        &self,
        number: u32,
        s: &SegmentReader,
        terms: &[Term],
        expansions: &[Vec<Arc<str>>],
        stats: &Ranking,
        scope: &str,
        out: &mut Vec<Candidate>,
    ) -> StoreResult<()> {
        let mut needs = Vec::with_capacity(terms.len());
        for (i, term) in terms.iter().enumerate() {
            match self.need(s, term, &expansions[i]) {
                Some(need) => needs.push(need),
                None => return Ok(()),
            }
        }
        let mut scope_list = if scope == "/" {
            None
        } else {
            let inv = s.inverted_index(self.fields.dirs)?;
            let term = TantivyTerm::from_field_text(self.fields.dirs, scope);
            match inv.read_postings(&term, IndexRecordOption::Basic)? {
                Some(p) => Some(p),
                None => return Ok(()),
            }
        };
        let lens = s.fast_fields().u64("len")?;
        let has_phrase = terms.iter().any(|t| matches!(t, Term::Phrase(_)));
        // Drive by the rarest group; every other group is asked about its documents.
        let (drive_term, drive_group) = needs
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                n.groups.iter().enumerate().map(move |(g, lists)| {
                    (
                        (i, g),
                        lists
                            .iter()
                            .map(|l| u64::from(l.postings.doc_freq()))
                            .sum::<u64>(),
                    )
                })
            })
            .min_by_key(|(_, cost)| *cost)
            .map(|(at, _)| at)
            .unwrap_or((0, 0));
        let mut driver = std::mem::take(&mut needs[drive_term].groups[drive_group]);
        let mut met = vec![Met::default(); terms.len()];
        loop {
            let doc = driver
                .iter()
                .map(|l| l.postings.doc())
                .min()
                .unwrap_or(TERMINATED);
            if doc == TERMINATED {
                break;
            }
            let mut driven = Met::default();
            for list in driver.iter_mut() {
                if list.postings.doc() == doc {
                    record(&mut driven, list);
                    list.postings.advance();
                }
            }
            if s.is_deleted(doc) {
                continue;
            }
            if let Some(list) = scope_list.as_mut() {
                if list.doc() < doc {
                    list.seek(doc);
                }
                if list.doc() != doc {
                    continue;
                }
            }
            let mut all = true;
            for (i, need) in needs.iter_mut().enumerate() {
                let mut m = if i == drive_term {
                    driven
                } else {
                    Met::default()
                };
                let mut groups_met = true;
                for (g, lists) in need.groups.iter_mut().enumerate() {
                    if i == drive_term && g == drive_group {
                        continue;
                    }
                    let mut any = false;
                    for list in lists.iter_mut() {
                        if at(list, doc) {
                            any = true;
                            record(&mut m, list);
                        }
                    }
                    groups_met &= any;
                }
                if !groups_met {
                    all = false;
                    break;
                }
                met[i] = m;
            }
            if !all {
                continue;
            }
            if has_phrase {
                let stored: TantivyDocument =
                    self.searcher.doc(tantivy::DocAddress::new(number, doc))?;
                let text = first_text(&stored, self.fields.stored_text);
                let trail = first_text(&stored, self.fields.stored_trail);
                let title = first_text(&stored, self.fields.title);
                let tags = first_text(&stored, self.fields.tags);
                let mut gone = false;
                for (i, term) in terms.iter().enumerate() {
                    if let Term::Phrase(words) = term {
                        let count = (phrase_in(&text, words) as u32).min(255);
                        let trail = trail.lines().any(|h| phrase_in(h, words) > 0);
                        let entry = phrase_in(&title, words) > 0
                            || tags.lines().any(|t| phrase_in(t, words) > 0);
                        met[i] = Met {
                            count,
                            trail,
                            entry,
                        };
                        gone |= count == 0 && !trail && !entry;
                    }
                }
                if gone {
                    continue;
                }
            }
            if met.iter().all(|m| m.entry) {
                out.push(Candidate {
                    score: catalog_score(&stats.idf),
                    segment: number,
                    doc,
                    catalog: true,
                });
                continue;
            }
            if !met.iter().any(|m| m.count > 0 || m.trail) {
                continue;
            }
            let len = lens.first(doc).unwrap_or(0) as u32;
            let score = met
                .iter()
                .zip(&stats.idf)
                .map(|(m, idf)| term_score(*idf, m.count, m.trail, m.entry, len, stats.average))
                .sum();
            out.push(Candidate {
                score,
                segment: number,
                doc,
                catalog: false,
            });
        }
        Ok(())
    }

    /// The anchor, heading and text a row from this commit shows (a catalog answer shows its
    /// document's first section).
    pub(crate) fn stored(&self, segment: u32, doc: DocId, catalog: bool) -> StoreResult<Stored> {
        let doc = if catalog {
            self.first_section(segment, doc)?
        } else {
            doc
        };
        let stored: TantivyDocument = self.searcher.doc(tantivy::DocAddress::new(segment, doc))?;
        Ok(Stored {
            anchor: first_text(&stored, self.fields.anchor),
            heading: first_text(&stored, self.fields.heading),
            text: first_text(&stored, self.fields.stored_text),
        })
    }

    fn first_section(&self, segment: u32, doc: DocId) -> StoreResult<DocId> {
        let s = &self.segments()[segment as usize];
        let paths = path_column(s)?;
        let Some(ord) = paths.ords().first(doc) else {
            return Ok(doc);
        };
        let mut name = String::new();
        paths.ord_to_str(ord, &mut name)?;
        let numbers = s.fast_fields().u64("number")?;
        let inv = s.inverted_index(self.fields.path)?;
        let term = TantivyTerm::from_field_text(self.fields.path, &name);
        let Some(mut postings) = inv.read_postings(&term, IndexRecordOption::Basic)? else {
            return Ok(doc);
        };
        let mut d = postings.doc();
        while d != TERMINATED {
            if !s.is_deleted(d) && numbers.first(d) == Some(0) {
                return Ok(d);
            }
            d = postings.advance();
        }
        Ok(doc)
    }
}

fn record(m: &mut Met, list: &List) {
    match list.kind {
        Kind::Text => m.count = (m.count + list.postings.term_freq()).min(255),
        Kind::Trail => m.trail = true,
        Kind::Entry => m.entry = true,
    }
}

fn first_text(doc: &TantivyDocument, field: Field) -> String {
    doc.get_first(field)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned()
}

fn path_column(s: &SegmentReader) -> StoreResult<StrColumn> {
    s.fast_fields()
        .str("path")?
        .ok_or_else(|| StoreError("the stored index has no path column".into()))
}

fn anchor_column(s: &SegmentReader) -> StoreResult<StrColumn> {
    s.fast_fields()
        .str("anchor")?
        .ok_or_else(|| StoreError("the stored index has no anchor column".into()))
}

/// An f64 ordered totally.
#[derive(Clone, Copy, Debug)]
struct OrdF64(f64);
impl PartialEq for OrdF64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The prefix expansion of `stem` over a base and a delta: the most frequent tokens first,
/// at most [`MAX_PREFIX_EXPANSION`].
pub(crate) fn expand(
    base: Option<&Base>,
    delta: &crate::SectionIndex,
    stem: &str,
) -> Vec<Arc<str>> {
    let mut found: std::collections::BTreeMap<Arc<str>, u64> = Default::default();
    if let Some(base) = base {
        for (t, n) in base.tokens_from(stem) {
            *found.entry(t).or_default() += n;
        }
    }
    for (t, n) in delta.tokens_from(stem) {
        *found.entry(t).or_default() += n;
    }
    let mut found: Vec<(Arc<str>, u64)> = found.into_iter().collect();
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    found.truncate(MAX_PREFIX_EXPANSION);
    found.into_iter().map(|(t, _)| t).collect()
}
