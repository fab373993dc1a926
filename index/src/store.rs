//! The stored section index: sections in a tantivy index (in memory, or files in a
//! directory), one tantivy document per section, and the search of one committed state of it.
//!
//! - **Documents.** Every section of a document is one tantivy document carrying the
//!   document's path (indexed, for deletes and scope, and a column to name rows), its ancestor
//!   directories (for scope), the words of its text, of its trail (heading by heading) and of
//!   the document's entry (title and each tag) with their positions, the union of its text
//!   and trail tokens (whose document frequency is the df of a term), its exact token count,
//!   its number in the document, the digest of the document's [`EntryKey`] (what tells
//!   whether it is current), its prior (importance and journal demotion, so a score is final
//!   while postings are read), and stored anchor, heading and text (for rows and snippets).
//! - **Words** fields hold every word run and compound token of their part (`store/words.rs`),
//!   so one field serves both words and phrases. The token union holds tokens only, joined by
//!   spaces under tantivy's whitespace tokenizer (tokens hold no whitespace).
//! - **Queries** keep only the best rows while reading postings (the cap and a margin, and of
//!   each segment's ties with the worst kept the same number, the first in path order): only
//!   those are named (in ordinal order, a batch at a time), checked against the catalog and
//!   read from the store. Ties are named in path order, one run of one score in one segment
//!   at a time, and a run stops once it holds the cap; a cut run that refusals leave short
//!   makes the query ask again keeping more. A catalog answer is one candidate per document
//!   (its first section). Postings are read in two passes: first the sections some term
//!   meets in a trail or an entry (boosted, so they score highest), then the sections only
//!   text meets — skipped when the kept rows all beat the best such a section could score,
//!   and read during the first pass when that walks all of a term's sections anyway and the
//!   kept rows do not yet beat them. Segments are read smallest first. Each walk is driven
//!   by the shortest lists a row must stand in: once the kept rows score high enough, a
//!   section missing a term in its trail or entry (or entry alone) cannot reach them, so
//!   that term's other lists drive no walk, and when every term must stand in its entry
//!   only catalog answers are read. Any section is skipped before its columns (or a
//!   phrase's positions) are read when its best possible score misses the kept rows.
//! - **Commits** carry the sequence of the snapshot the index covers as their payload.
//! - **Statistics** are tantivy's: a superseded or deleted section still counts in N, the mean
//!   length and df until a merge drops it (as in any segment index); the match rule never
//!   depends on them.
//!
//! A [`Base`] is one commit: a tantivy searcher, so it stays valid (its files kept) while it
//! is held, whatever the writer commits or merges meanwhile.
//!
//! The rows a search keeps are in `store/kept.rs`, the walk over one segment's postings in
//! `store/walk.rs` (the lists that drive it in `store/driver.rs`), the naming and checking
//! of the kept rows in `store/resolve.rs`, copies of a commit (export and import) in
//! `store/copy.rs`, and the files of a copy that arrive after it opens in
//! `store/deferred.rs`.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use quire_log::{DocPath, Hash};
use tantivy::columnar::{Column, StrColumn};

use tantivy::directory::{Directory, MmapDirectory, RamDirectory};
use tantivy::postings::SegmentPostings;
use tantivy::schema::{
    FAST, Field, IndexRecordOption, STORED, STRING, Schema, TantivyDocument, TextFieldIndexing,
    TextOptions, Value,
};
use tantivy::{
    DocId, DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, SegmentReader, TERMINATED,
    Term as TantivyTerm,
};

use crate::body::{self, EntryKey, IndexedDoc, Ranked, Ranking};
use crate::catalog::Admission;
use crate::query::CatalogQuery;
use crate::tokens::{self, MAX_PREFIX_EXPANSION, Term};

mod copy;
mod deferred;
mod driver;
mod kept;
mod resolve;
mod walk;
mod words;
pub use copy::{Export, Import, ImportFile};
pub use deferred::{DeferredFile, PartClaim, PartFetch, is_deferrable};
use kept::{Top, below, kept_for, text_only_bound};
use resolve::in_order;
use words::{WORDS_TOKENIZER, WordsTokenizer};

/// Memory the writer may buffer before it writes a segment.
const WRITER_BUDGET: usize = 50_000_000;
/// Bytes of stored sections compressed together: a row reads (and decompresses) one such
/// block, so small blocks keep a row cheap (tantivy's default is 16 KiB).
const STORE_BLOCK_BYTES: usize = 4096;
/// How stored blocks are compressed: zstd holds sections' text in about two thirds of lz4's
/// bytes (the stored text is half of a built index, and every byte of it is downloaded by a
/// cold replica), and a row still decompresses only its 4 KiB block.
const STORE_COMPRESSOR: tantivy::store::Compressor =
    tantivy::store::Compressor::Zstd(tantivy::store::ZstdCompressor {
        compression_level: Some(3),
    });
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
    any: Field,
    text_words: Field,
    trail_words: Field,
    entry_words: Field,
    len: Field,
    number: Field,
    key: Field,
    prior: Field,
    anchor: Field,
    heading: Field,
    stored_text: Field,
}

const POSITIONS: IndexRecordOption = IndexRecordOption::WithFreqsAndPositions;

fn tokens_indexing(tokenizer: &str, option: IndexRecordOption) -> TextOptions {
    TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(tokenizer)
            .set_index_option(option)
            .set_fieldnorms(false),
    )
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let fields = Fields {
        path: b.add_text_field("path", STRING | FAST),
        dirs: b.add_text_field("dirs", STRING),
        any: b.add_text_field(
            "any",
            tokens_indexing("whitespace", IndexRecordOption::Basic),
        ),
        text_words: b.add_text_field("text_words", tokens_indexing(WORDS_TOKENIZER, POSITIONS)),
        trail_words: b.add_text_field("trail_words", tokens_indexing(WORDS_TOKENIZER, POSITIONS)),
        entry_words: b.add_text_field("entry_words", tokens_indexing(WORDS_TOKENIZER, POSITIONS)),
        len: b.add_u64_field("len", FAST),
        number: b.add_u64_field("number", FAST),
        key: b.add_u64_field("key", FAST),
        prior: b.add_f64_field("prior", FAST),
        anchor: b.add_text_field("anchor", TextOptions::default().set_fast("raw") | STORED),
        heading: b.add_text_field("heading", STORED),
        stored_text: b.add_text_field("stored_text", STORED),
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
        any: f("any")?,
        text_words: f("text_words")?,
        trail_words: f("trail_words")?,
        entry_words: f("entry_words")?,
        len: f("len")?,
        number: f("number")?,
        key: f("key")?,
        prior: f("prior")?,
        anchor: f("anchor")?,
        heading: f("heading")?,
        stored_text: f("stored_text")?,
    })
}

/// The digest of an entry key, as the stored index keeps it.
pub fn key_digest(key: &EntryKey) -> u64 {
    key_digest_of(
        &key.body_hash,
        &key.title,
        key.tags.iter().map(String::as_str),
        &key.importance,
    )
}

/// [`key_digest`] of an entry key's fields, borrowed (a cold replica digests every document
/// it compares with a copy).
pub fn key_digest_of<'a>(
    body_hash: &Hash,
    title: &str,
    tags: impl IntoIterator<Item = &'a str>,
    importance: &str,
) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&body_hash.0);
    hasher.update(title.as_bytes());
    for tag in tags {
        hasher.update(&[0]);
        hasher.update(tag.as_bytes());
    }
    hasher.update(&[1]);
    hasher.update(importance.as_bytes());
    let hash = hasher.finalize();
    u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
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
    /// Files of a copy that arrived after it opened, checked against their checksums by
    /// [`SectionStore::verify_deferred`] once whole.
    deferred: Vec<Arc<DeferredFile>>,
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
        let settings = tantivy::IndexSettings {
            docstore_blocksize: STORE_BLOCK_BYTES,
            docstore_compression: STORE_COMPRESSOR,
            ..Default::default()
        };
        let index = Index::create(raw.box_clone(), schema, settings)?;
        SectionStore::with_index(index, raw, Vec::new())
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
        SectionStore::with_index(index, raw, Vec::new())
    }

    fn with_index(
        index: Index,
        raw: Box<dyn Directory>,
        deferred: Vec<Arc<DeferredFile>>,
    ) -> StoreResult<SectionStore> {
        let fields = fields_of(&index.schema())?;
        index.tokenizers().register(WORDS_TOKENIZER, WordsTokenizer);
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
            deferred,
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
        let prior = body::prior(&key.importance, path);
        let writer = self.writer();
        for (number, s) in doc.sections().enumerate() {
            let mut d = TantivyDocument::new();
            d.add_text(f.path, path.as_str());
            for dir in ancestors(path.as_str()) {
                d.add_text(f.dirs, dir);
            }
            let trail = s.trail_tokens.iter().map(|t| &**t);
            let mut any: Vec<&str> = s.tf.iter().map(|(t, _)| &**t).chain(trail).collect();
            any.sort_unstable();
            any.dedup();
            d.add_text(f.any, any.join(" "));
            d.add_u64(f.len, u64::from(s.len));
            d.add_u64(f.number, number as u64);
            d.add_u64(f.key, digest);
            d.add_f64(f.prior, prior);
            d.add_text(f.text_words, s.text);
            for heading in s.trail {
                d.add_text(f.trail_words, heading);
            }
            d.add_text(f.entry_words, &key.title);
            for tag in &key.tags {
                d.add_text(f.entry_words, tag);
            }
            d.add_text(f.anchor, s.anchor);
            d.add_text(f.heading, s.heading);
            d.add_text(f.stored_text, s.text);
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
        let searcher = self.reader.searcher();
        let columns = searcher
            .segment_readers()
            .iter()
            .map(Columns::of)
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Base {
            searcher: Arc::new(searcher),
            columns: Arc::new(columns),
            fields: self.fields,
            sequence,
            totals: Arc::default(),
            positions_read: Arc::default(),
            sections_walked: Arc::default(),
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

    /// Waits until every file of a copy that arrived after it opened is whole (fetching the
    /// parts nobody fetches) and checks each against its checksum: what
    /// [`Import::open`] checks of the other files.
    pub fn verify_deferred(&self) -> StoreResult<()> {
        let mut broken = Vec::new();
        for file in &self.deferred {
            // A merge may have replaced and deleted the file meanwhile: nothing reads it.
            let exists = self.raw.exists(Path::new(file.name()));
            if !exists.map_err(|e| StoreError(format!("{}: {e}", file.name())))? {
                continue;
            }
            if !file.checksum_ok()? {
                broken.push(file.name());
            }
        }
        if !broken.is_empty() {
            return Err(StoreError(format!(
                "copied index files fail their checksum: {}",
                broken.join(", ")
            )));
        }
        Ok(())
    }

    /// Waits for merges and stops the writer.
    pub fn close(self) -> StoreResult<()> {
        let writer = self.writer.into_inner().expect("section writer poisoned");
        writer.wait_merging_threads()?;
        Ok(())
    }
}

/// One committed state of a [`SectionStore`]. Cheap to clone.
#[derive(Clone)]
pub struct Base {
    searcher: Arc<tantivy::Searcher>,
    /// Per segment, its columns, opened once per commit (opening one reads its block
    /// headers, which cost as much as a small query).
    columns: Arc<Vec<Columns>>,
    fields: Fields,
    sequence: u64,
    /// Sections counted by the statistics and their summed length, read once.
    totals: Arc<OnceLock<(u64, u64)>>,
    /// Sections whose phrase positions searches of this commit have read: the costly part
    /// of a phrase, which the bounds exist to spare.
    positions_read: Arc<AtomicU64>,
    /// Sections the walks over postings of this commit's searches have stepped to: what
    /// choosing the lists that drive a walk exists to spare.
    sections_walked: Arc<AtomicU64>,
}

impl fmt::Debug for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Base")
            .field("sequence", &self.sequence)
            .field("sections", &self.searcher.num_docs())
            .finish()
    }
}

/// The columns of one segment a query reads.
struct Columns {
    paths: StrColumn,
    anchors: StrColumn,
    lens: Column<u64>,
    priors: Column<f64>,
    numbers: Column<u64>,
    keys: Column<u64>,
}

impl Columns {
    /// The highest prior a section of the segment has, from the column's statistics (an
    /// upper bound): a world whose documents set no importance is bounded by its default
    /// prior instead of the highest there is, so kept rows pass over far more sections.
    fn prior_bound(&self) -> f64 {
        let max = self.priors.max_value();
        if !max.is_finite() {
            return f64::INFINITY;
        }
        // A section without a value scores at the highest prior.
        if self.priors.get_cardinality() == tantivy::columnar::Cardinality::Full {
            max.max(0.0)
        } else {
            max.max(kept::MAX_PRIOR)
        }
    }

    fn of(s: &SegmentReader) -> StoreResult<Columns> {
        let fast = s.fast_fields();
        Ok(Columns {
            paths: path_column(s)?,
            anchors: anchor_column(s)?,
            lens: fast.u64("len")?,
            priors: fast.f64("prior")?,
            numbers: fast.u64("number")?,
            keys: fast.u64("key")?,
        })
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

/// The two passes over a commit's postings: first the sections some term meets in a trail
/// or an entry (the boosted ones, which score highest), then the rest, which only text meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Boosted,
    TextOnly,
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

    /// Sections whose phrase positions searches of this commit have read so far.
    pub fn positions_read(&self) -> u64 {
        self.positions_read.load(Ordering::Relaxed)
    }

    /// Sections the walks of searches of this commit have stepped to so far.
    pub fn sections_walked(&self) -> u64 {
        self.sections_walked.load(Ordering::Relaxed)
    }

    /// Live sections.
    pub fn section_count(&self) -> u64 {
        self.searcher.num_docs()
    }

    pub(crate) fn segments(&self) -> &[SegmentReader] {
        self.searcher.segment_readers()
    }

    /// Sections counted by the statistics (live and not yet merged away) and their summed
    /// length.
    pub(crate) fn totals(&self) -> (u64, u64) {
        *self.totals.get_or_init(|| {
            let mut sections = 0;
            let mut len = 0;
            for (s, columns) in self.segments().iter().zip(self.columns.iter()) {
                sections += u64::from(s.max_doc());
                len += (0..s.max_doc())
                    .filter_map(|d| columns.lens.first(d))
                    .sum::<u64>();
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
            for field in [self.fields.any, self.fields.entry_words] {
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
                    // Entry words hold every run, and a run past the token length is no token.
                    if !tokens::keep(token) {
                        continue;
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
        for (s, columns) in self.segments().iter().zip(self.columns.iter()) {
            let Ok(inv) = s.inverted_index(self.fields.path) else {
                continue;
            };
            let Ok(Some(mut postings)) = inv.read_postings(&term, IndexRecordOption::Basic) else {
                continue;
            };
            let keys = &columns.keys;
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
        for (s, columns) in self.segments().iter().zip(self.columns.iter()) {
            let (paths, keys, numbers) = (&columns.paths, &columns.keys, &columns.numbers);
            let mut digests = Vec::new();
            let mut wanted: Vec<(u64, usize)> = Vec::new();
            for doc in s.doc_ids_alive() {
                if numbers.first(doc) != Some(0) {
                    continue;
                }
                if let Some(ord) = paths.ords().first(doc) {
                    wanted.push((ord, digests.len()));
                    digests.push(keys.first(doc).unwrap_or(0));
                }
            }
            // Named in ordinal order: one pass over the path dictionary.
            in_order(paths, &mut wanted, |i, name| out.push((name, digests[i])))?;
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
                    (
                        self.fields.text_words,
                        Kind::Text,
                        IndexRecordOption::WithFreqs,
                    ),
                    (
                        self.fields.trail_words,
                        Kind::Trail,
                        IndexRecordOption::Basic,
                    ),
                    (
                        self.fields.entry_words,
                        Kind::Entry,
                        IndexRecordOption::Basic,
                    ),
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
    ///
    /// Every section's score is exact while its postings are read (the prior is stored
    /// with it), so only the best `query.max` (and a margin for rows the catalog or `skip`
    /// refuses) are kept, and only those are named and checked; when refusals eat the
    /// margin, the segments are read again keeping more.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rows(
        &self,
        terms: &[Term],
        expansions: &[Vec<Arc<str>>],
        stats: &Ranking,
        scope: &str,
        query: &CatalogQuery,
        catalog: &dyn Admission,
        skip: impl Fn(&DocPath) -> bool,
    ) -> StoreResult<Vec<Ranked>> {
        let want = if query.max == 0 {
            usize::MAX
        } else {
            query.max
        };
        let mut keep = kept_for(want);
        loop {
            let mut top = Top::new(keep);
            // The smallest segments first: the rows they keep set a threshold that narrows
            // the lists driving the walks of the big ones.
            let mut order: Vec<(usize, &SegmentReader)> =
                self.segments().iter().enumerate().collect();
            order.sort_by_key(|(_, s)| s.max_doc());
            // Segments whose text-only sections were read with their boosted ones.
            let mut text_read = vec![false; order.len()];
            for pass in [Pass::Boosted, Pass::TextOnly] {
                for &(number, s) in &order {
                    // A section of this segment met only in text scores at most this: once
                    // the kept rows all beat it, none of them can be among them.
                    let text_misses = top.threshold().is_some_and(|t| {
                        below(
                            text_only_bound(stats, self.columns[number].prior_bound()),
                            t,
                        )
                    });
                    if pass == Pass::TextOnly && text_read[number] {
                        continue;
                    }
                    if pass == Pass::TextOnly && text_misses {
                        top.dropped = true;
                        continue;
                    }
                    text_read[number] = self.segment_candidates(
                        number as u32,
                        s,
                        terms,
                        expansions,
                        stats,
                        scope,
                        pass,
                        pass == Pass::Boosted && !text_misses,
                        &mut top,
                    )?;
                }
            }
            let dropped = top.dropped;
            let candidates = top.into_best_first();
            let (rows, enough) = self.resolve(candidates, want, scope, query, catalog, &skip)?;
            if enough || !dropped {
                return Ok(rows);
            }
            keep = keep.saturating_mul(8);
        }
    }

    /// The positional postings of a phrase's words in one field; `None` when a word is not
    /// in the field (the phrase is then nowhere in it).
    fn phrase_lists(
        &self,
        s: &SegmentReader,
        field: Field,
        words: &[String],
    ) -> Option<Vec<SegmentPostings>> {
        let inv = s.inverted_index(field).ok()?;
        words
            .iter()
            .map(|w| {
                inv.read_postings(
                    &TantivyTerm::from_field_text(field, w),
                    IndexRecordOption::WithFreqsAndPositions,
                )
                .ok()
                .flatten()
            })
            .collect()
    }

    /// The anchor, heading and text a row from this commit shows (a catalog answer, `path`'s,
    /// shows its document's first section).
    pub(crate) fn stored(
        &self,
        segment: u32,
        doc: DocId,
        catalog: Option<&DocPath>,
    ) -> StoreResult<Stored> {
        let doc = match catalog {
            Some(path) => self.first_section(segment, doc, path)?,
            None => doc,
        };
        let stored: TantivyDocument = self.searcher.doc(tantivy::DocAddress::new(segment, doc))?;
        Ok(Stored {
            anchor: first_text(&stored, self.fields.anchor),
            heading: first_text(&stored, self.fields.heading),
            text: first_text(&stored, self.fields.stored_text),
        })
    }

    /// The live first section of `path` in the segment of `doc` (one of its sections).
    fn first_section(&self, segment: u32, doc: DocId, path: &DocPath) -> StoreResult<DocId> {
        let s = &self.segments()[segment as usize];
        let numbers = &self.columns[segment as usize].numbers;
        let inv = s.inverted_index(self.fields.path)?;
        let term = TantivyTerm::from_field_text(self.fields.path, path.as_str());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies in buckets hold digests of the body hash, title, each tag after a 0 byte, and
    /// the importance after a 1 byte, hashed at once: borrowed fields give the same digest.
    #[test]
    fn a_key_digest_is_that_of_its_fields_laid_end_to_end() {
        let key = EntryKey {
            body_hash: Hash::of(b"body"),
            title: "Title".into(),
            tags: vec!["a".into(), "bc".into()],
            importance: "0.5".into(),
        };
        let mut bytes = key.body_hash.0.to_vec();
        bytes.extend_from_slice(b"Title\0a\0bc\x010.5");
        let hash = Hash::of(&bytes);
        let expected = u64::from_le_bytes(hash.0[..8].try_into().unwrap());
        assert_eq!(key_digest(&key), expected);
        let untagged = EntryKey {
            tags: Vec::new(),
            ..key
        };
        assert_ne!(key_digest(&untagged), expected);
    }
}
