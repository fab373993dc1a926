//! The section index: every live document's sections with their tokens, an inverted index
//! from token to documents, and LOOKUP in body mode over it.
//!
//! # Match rule
//!
//! For the query's terms (see [`crate::tokens`]):
//! - a document whose **entry** (the tokens of its tags and title) meets every term is one
//!   row, its bare path (the *catalog answer*), and none of its sections is;
//! - otherwise a section is a row when every term is met by its text, its trail or the entry,
//!   and at least one by its text or trail.
//!
//! Only documents the catalog admits (live, under the scope, passing every filter) are rows.
//!
//! # Ranking
//!
//! BM25 (k1 [`K1`], b [`B`]) of each term in the section's text, with idf = ln(1 + (N − df +
//! 0.5)/(df + 0.5)) where N counts every indexed section and df the sections holding the term
//! in text or trail, and length normalised by the mean section length; plus idf ×
//! [`TRAIL_BOOST`] for a term in the trail and idf × [`ENTRY_BOOST`] for one in the entry. A
//! catalog answer scores its entry terms × [`CATALOG_ROW_BOOST`]. Every score is multiplied by
//! the prior 0.3 + 0.7 × importance and by [`JOURNAL_DEMOTION`] when a path segment is
//! `journal`. Rows order by score (descending), then path, then anchor; the cap applies last.
//!
//! # Versions
//!
//! The index is a set of persistent maps (`imbl`): a clone is O(1) and shares everything, so
//! an index version per snapshot costs only the documents that changed between them.

use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use quire_log::{DocPath, Hash};

use crate::catalog::{Admission, CatalogMatch};
use crate::query::CatalogQuery;
use crate::section::{self, Section};
use crate::tokens::{self, MAX_PREFIX_EXPANSION, Term};

/// BM25 term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25 length normalisation.
pub const B: f64 = 0.75;
/// idf multiple for a term in the section's trail.
pub const TRAIL_BOOST: f64 = 1.5;
/// idf multiple for a term in the document's tags or title.
pub const ENTRY_BOOST: f64 = 2.0;
/// Multiple of a catalog answer's score.
pub const CATALOG_ROW_BOOST: f64 = 2.0;
/// Multiple of a score whose path has a `journal` segment.
pub const JOURNAL_DEMOTION: f64 = 0.5;
/// The most bytes of a snippet (before the `...` that marks a cut).
pub const SNIPPET_BYTES: usize = 240;
/// Term frequencies are capped here.
pub(crate) const MAX_TF: u32 = 255;

/// What a body row adds to its catalog fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SectionHit {
    /// The section's anchor; empty for the bare section and for a catalog answer.
    pub anchor: String,
    /// The section's heading; empty for the bare section and for a catalog answer.
    pub heading: String,
    /// The line of the section's text holding the most query terms, cut to
    /// [`SNIPPET_BYTES`] on a character boundary (`...` appended when cut).
    pub snippet: String,
    /// Byte ranges of `snippet` where query terms occur, in order, not overlapping.
    pub highlights: Vec<(usize, usize)>,
}

/// What decides whether a document's index entry is current: what its sections, entry
/// tokens and prior are made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryKey {
    pub body_hash: Hash,
    pub title: String,
    pub tags: Vec<String>,
    /// The catalog's importance (the stored index keeps the prior it gives).
    pub importance: String,
}

/// One indexed section.
#[derive(Clone, Debug)]
struct Indexed {
    anchor: String,
    heading: String,
    text: String,
    trail: Vec<String>,
    /// Distinct text tokens with their frequency, sorted by token.
    tf: Vec<(Arc<str>, u32)>,
    /// Text tokens counted with repeats.
    len: u32,
    /// Distinct trail tokens, sorted.
    trail_tokens: Vec<Arc<str>>,
}

impl Indexed {
    fn tf(&self, word: &str) -> u32 {
        self.tf
            .binary_search_by(|(t, _)| (**t).cmp(word))
            .map_or(0, |i| self.tf[i].1)
    }

    fn tf_prefix(&self, stem: &str) -> u32 {
        let start = self.tf.partition_point(|(t, _)| &**t < stem);
        self.tf[start..]
            .iter()
            .take_while(|(t, _)| t.starts_with(stem))
            .map(|(_, n)| *n)
            .sum::<u32>()
            .min(MAX_TF)
    }

    fn in_trail(&self, term: &Term) -> bool {
        match term {
            Term::Word(w) => self.trail_tokens.binary_search_by(|t| (**t).cmp(w)).is_ok(),
            Term::Prefix(p) => {
                let start = self.trail_tokens.partition_point(|t| &**t < p.as_str());
                self.trail_tokens
                    .get(start)
                    .is_some_and(|t| t.starts_with(p.as_str()))
            }
            Term::Phrase(words) => self.trail.iter().any(|h| phrase_in(h, words) > 0),
        }
    }

    /// How often `term` occurs in the text.
    fn text_count(&self, term: &Term) -> u32 {
        match term {
            Term::Word(w) => self.tf(w),
            Term::Prefix(p) => self.tf_prefix(p),
            Term::Phrase(words) => {
                if words
                    .iter()
                    .filter(|w| w.chars().nth(1).is_some() && w.len() <= tokens::MAX_TOKEN_BYTES)
                    .any(|w| self.tf(w) == 0)
                {
                    return 0;
                }
                (phrase_in(&self.text, words) as u32).min(MAX_TF)
            }
        }
    }
}

pub(crate) fn phrase_in(text: &str, words: &[String]) -> usize {
    let runs = tokens::word_runs(text);
    tokens::phrase_count(runs.iter().map(|(_, r)| r.as_str()), words)
}

/// One indexed document.
#[derive(Clone, Debug)]
pub(crate) struct Doc {
    key: EntryKey,
    sections: Vec<Indexed>,
    /// Distinct entry (tags and title) tokens, sorted.
    entry_tokens: Vec<Arc<str>>,
    /// Every distinct token of text, trail and entry: the document's postings.
    vocabulary: Vec<Arc<str>>,
    /// Per vocabulary token, the sections holding it in text or trail.
    section_counts: Vec<u32>,
}

impl Doc {
    fn entry_meets(&self, term: &Term) -> bool {
        match term {
            Term::Word(w) => self.entry_tokens.binary_search_by(|t| (**t).cmp(w)).is_ok(),
            Term::Prefix(p) => {
                let start = self.entry_tokens.partition_point(|t| &**t < p.as_str());
                self.entry_tokens
                    .get(start)
                    .is_some_and(|t| t.starts_with(p.as_str()))
            }
            Term::Phrase(words) => {
                phrase_in(&self.key.title, words) > 0
                    || self.key.tags.iter().any(|t| phrase_in(t, words) > 0)
            }
        }
    }
}

/// Documents holding a token anywhere, and how many sections hold it in text or trail.
#[derive(Clone, Debug, Default)]
struct Posting {
    sections: u64,
    docs: OrdSet<DocPath>,
}

/// The section index of every live document. Cheap to clone; clones are independent.
#[derive(Clone, Debug, Default)]
pub struct SectionIndex {
    docs: OrdMap<DocPath, Arc<Doc>>,
    postings: OrdMap<Arc<str>, Posting>,
    sections: u64,
    total_len: u64,
}

fn sorted_distinct(mut items: Vec<Arc<str>>) -> Vec<Arc<str>> {
    items.sort();
    items.dedup();
    items
}

pub(crate) fn index_doc(key: EntryKey, body: &str) -> Doc {
    let mut interned: HashMap<String, Arc<str>> = HashMap::new();
    let mut intern = |t: &str| -> Arc<str> {
        if let Some(found) = interned.get(t) {
            return found.clone();
        }
        let token: Arc<str> = t.into();
        interned.insert(t.to_owned(), token.clone());
        token
    };
    let sections: Vec<Indexed> = section::sections(body)
        .into_iter()
        .map(
            |Section {
                 anchor,
                 heading,
                 text,
                 trail,
                 ..
             }| {
                let mut counts: HashMap<Arc<str>, u32> = HashMap::new();
                let mut len = 0u32;
                tokens::for_each_token(&text, |t| {
                    *counts.entry(intern(t)).or_default() += 1;
                    len += 1;
                });
                let mut tf: Vec<(Arc<str>, u32)> = counts
                    .into_iter()
                    .map(|(t, n)| (t, n.min(MAX_TF)))
                    .collect();
                tf.sort();
                let mut trail_tokens = Vec::new();
                for heading in &trail {
                    tokens::for_each_token(heading, |t| trail_tokens.push(intern(t)));
                }
                Indexed {
                    anchor,
                    heading,
                    text,
                    trail,
                    tf,
                    len,
                    trail_tokens: sorted_distinct(trail_tokens),
                }
            },
        )
        .collect();
    let mut entry = Vec::new();
    tokens::for_each_token(&key.title, |t| entry.push(intern(t)));
    for tag in &key.tags {
        tokens::for_each_token(tag, |t| entry.push(intern(t)));
    }
    let entry_tokens = sorted_distinct(entry);
    let mut per_section: HashMap<Arc<str>, u32> = HashMap::new();
    for s in &sections {
        let mut seen: HashSet<&Arc<str>> = s.tf.iter().map(|(t, _)| t).collect();
        seen.extend(s.trail_tokens.iter());
        for t in seen {
            *per_section.entry(t.clone()).or_default() += 1;
        }
    }
    for t in &entry_tokens {
        per_section.entry(t.clone()).or_default();
    }
    let mut vocab: Vec<(Arc<str>, u32)> = per_section.into_iter().collect();
    vocab.sort();
    Doc {
        key,
        sections,
        entry_tokens,
        vocabulary: vocab.iter().map(|(t, _)| t.clone()).collect(),
        section_counts: vocab.iter().map(|(_, n)| *n).collect(),
    }
}

/// The documents one term may be met in.
enum Candidates<'a> {
    Posting(&'a OrdSet<DocPath>),
    Set(HashSet<&'a DocPath>),
}

impl<'a> Candidates<'a> {
    fn len(&self) -> usize {
        match self {
            Candidates::Posting(set) => set.len(),
            Candidates::Set(set) => set.len(),
        }
    }

    fn contains(&self, path: &DocPath) -> bool {
        match self {
            Candidates::Posting(set) => set.contains(path),
            Candidates::Set(set) => set.contains(path),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &'a DocPath> + '_> {
        match self {
            Candidates::Posting(set) => Box::new(set.iter()),
            Candidates::Set(set) => Box::new(set.iter().copied()),
        }
    }
}

impl SectionIndex {
    pub fn new() -> SectionIndex {
        SectionIndex::default()
    }

    /// How many documents the index holds.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// How many sections the index holds.
    pub fn section_count(&self) -> u64 {
        self.sections
    }

    /// The key `path` was indexed under, if it is indexed.
    pub fn key(&self, path: &DocPath) -> Option<&EntryKey> {
        self.docs.get(path).map(|d| &d.key)
    }

    /// Indexes (or re-indexes) `path` with `body`, unless it is indexed under `key` already.
    pub fn upsert(&mut self, path: &DocPath, key: EntryKey, body: &str) {
        if self.key(path) == Some(&key) {
            return;
        }
        self.remove(path);
        let doc = index_doc(key, body);
        for (token, count) in doc.vocabulary.iter().zip(&doc.section_counts) {
            match self.postings.get_mut(token) {
                Some(posting) => {
                    posting.sections += u64::from(*count);
                    posting.docs.insert(path.clone());
                }
                None => {
                    let posting = Posting {
                        sections: u64::from(*count),
                        docs: OrdSet::unit(path.clone()),
                    };
                    self.postings.insert(token.clone(), posting);
                }
            }
        }
        self.sections += doc.sections.len() as u64;
        self.total_len += doc.sections.iter().map(|s| u64::from(s.len)).sum::<u64>();
        self.docs.insert(path.clone(), Arc::new(doc));
    }

    /// Removes `path`, if indexed.
    pub fn remove(&mut self, path: &DocPath) {
        let Some(doc) = self.docs.remove(path) else {
            return;
        };
        for (token, count) in doc.vocabulary.iter().zip(&doc.section_counts) {
            let emptied = match self.postings.get_mut(token) {
                Some(posting) => {
                    posting.sections = posting.sections.saturating_sub(u64::from(*count));
                    posting.docs.remove(path);
                    posting.docs.is_empty()
                }
                None => false,
            };
            if emptied {
                self.postings.remove(token);
            }
        }
        self.sections = self.sections.saturating_sub(doc.sections.len() as u64);
        self.total_len = self
            .total_len
            .saturating_sub(doc.sections.iter().map(|s| u64::from(s.len)).sum::<u64>());
    }

    /// The tokens a prefix expands to, most frequent first, at most
    /// [`MAX_PREFIX_EXPANSION`].
    fn expand(&self, stem: &str) -> Vec<(&Arc<str>, &Posting)> {
        let from: Arc<str> = stem.into();
        let mut found: Vec<(&Arc<str>, &Posting)> = self
            .postings
            .range((Bound::Included(from), Bound::Unbounded))
            .take_while(|(t, _)| t.starts_with(stem))
            .collect();
        found.sort_by(|a, b| b.1.docs.len().cmp(&a.1.docs.len()).then(a.0.cmp(b.0)));
        found.truncate(MAX_PREFIX_EXPANSION);
        found
    }

    /// The documents that may meet `term`, and the df its idf uses; `None` for a term no
    /// document can meet.
    fn candidates(&self, term: &Term) -> Option<(Candidates<'_>, u64)> {
        match term {
            Term::Word(w) => {
                let p = self.postings.get(w.as_str())?;
                Some((Candidates::Posting(&p.docs), p.sections))
            }
            Term::Prefix(stem) => {
                let found = self.expand(stem);
                let df = found.iter().map(|(_, p)| p.sections).max()?;
                let docs: HashSet<&DocPath> =
                    found.iter().flat_map(|(_, p)| p.docs.iter()).collect();
                Some((Candidates::Set(docs), df))
            }
            Term::Phrase(words) => {
                let indexed: Vec<&Posting> = words
                    .iter()
                    .filter(|w| w.chars().nth(1).is_some() && w.len() <= tokens::MAX_TOKEN_BYTES)
                    .map(|w| self.postings.get(w.as_str()))
                    .collect::<Option<Vec<_>>>()?;
                let smallest = indexed.iter().min_by_key(|p| p.docs.len())?;
                let docs = smallest
                    .docs
                    .iter()
                    .filter(|d| indexed.iter().all(|p| p.docs.contains(*d)))
                    .collect();
                Some((
                    Candidates::Set(docs),
                    indexed.iter().map(|p| p.sections).min()?,
                ))
            }
        }
    }

    /// Answers a body lookup over the documents `catalog` admits (it must index the same
    /// snapshot). Each match carries its [`SectionHit`].
    pub fn lookup(&self, query: &CatalogQuery, catalog: &dyn Admission) -> Vec<CatalogMatch> {
        let terms = tokens::query_terms(&query.query);
        let Some(scope) = query.canonical_scope() else {
            return Vec::new();
        };
        if terms.is_empty() {
            return Vec::new();
        }
        let mut idf = Vec::with_capacity(terms.len());
        for term in &terms {
            let Some((_, df)) = self.candidates(term) else {
                return Vec::new();
            };
            idf.push(idf_of(self.sections, df));
        }
        let stats = Ranking {
            idf,
            average: average_len(self.sections, self.total_len),
        };
        let mut rows = self.rows(&terms, &stats, &scope, query, catalog, |_| false);
        order(&mut rows, query.max);
        rows.into_iter()
            .map(|row| {
                let (anchor, heading, text) = self.section_text(&row);
                finish(row.entry, &terms, anchor, heading, text)
            })
            .collect()
    }

    /// The rows of this index for `terms`, scored with `stats` (which may count more than
    /// this index), unordered; documents `skip` names are left out.
    pub(crate) fn rows(
        &self,
        terms: &[Term],
        stats: &Ranking,
        scope: &str,
        query: &CatalogQuery,
        catalog: &dyn Admission,
        skip: impl Fn(&DocPath) -> bool,
    ) -> Vec<Ranked> {
        let mut per_term: Vec<Candidates<'_>> = Vec::with_capacity(terms.len());
        for term in terms {
            let Some((docs, _)) = self.candidates(term) else {
                return Vec::new();
            };
            per_term.push(docs);
        }
        let idf = &stats.idf;
        let average = stats.average;
        // Walk the rarest term's documents; the others are only asked about them.
        let smallest = per_term
            .iter()
            .enumerate()
            .min_by_key(|(_, d)| d.len())
            .map(|(i, _)| i)
            .unwrap_or(0);
        let walk: Vec<&DocPath> = per_term[smallest].iter().collect();
        let others: Vec<&Candidates<'_>> = per_term
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != smallest)
            .map(|(_, d)| d)
            .collect();
        let mut rows: Vec<Ranked> = Vec::new();
        for path in &walk {
            if skip(path) || !others.iter().all(|set| set.contains(path)) {
                continue;
            }
            let Some(entry) = catalog.admitted(scope, &query.filters, path) else {
                continue;
            };
            let Some((path, doc)) = self.docs.get_key_value(*path) else {
                continue;
            };
            let prior = prior(&entry.importance, path);
            let in_entry: Vec<bool> = terms.iter().map(|t| doc.entry_meets(t)).collect();
            if in_entry.iter().all(|m| *m) {
                rows.push(Ranked {
                    score: catalog_score(idf) * prior,
                    path: path.clone(),
                    anchor: String::new(),
                    entry,
                    source: Source::Delta(None),
                });
                continue;
            }
            for (number, section) in doc.sections.iter().enumerate() {
                let mut score = 0.0;
                let mut own = false;
                let mut all = true;
                for (i, term) in terms.iter().enumerate() {
                    let count = section.text_count(term);
                    let trail = section.in_trail(term);
                    if count == 0 && !trail && !in_entry[i] {
                        all = false;
                        break;
                    }
                    own |= count > 0 || trail;
                    score += term_score(idf[i], count, trail, in_entry[i], section.len, average);
                }
                if all && own {
                    rows.push(Ranked {
                        score: score * prior,
                        path: path.clone(),
                        anchor: section.anchor.clone(),
                        entry: entry.clone(),
                        source: Source::Delta(Some(number)),
                    });
                }
            }
        }
        rows
    }

    /// The anchor, heading and text a row of this index shows (a catalog answer shows its
    /// first section's text).
    pub(crate) fn section_text(&self, row: &Ranked) -> (String, String, String) {
        let Some(doc) = self.docs.get(&row.path) else {
            return Default::default();
        };
        match row.source {
            Source::Delta(Some(n)) => doc.sections.get(n).map_or_else(Default::default, |s| {
                (s.anchor.clone(), s.heading.clone(), s.text.clone())
            }),
            _ => (
                String::new(),
                String::new(),
                doc.sections
                    .first()
                    .map_or_else(String::new, |s| s.text.clone()),
            ),
        }
    }

    /// Sections counted and their summed length (the corpus statistics of this index).
    pub(crate) fn totals(&self) -> (u64, u64) {
        (self.sections, self.total_len)
    }

    /// Sections holding `token` in text or trail.
    pub(crate) fn section_df(&self, token: &str) -> u64 {
        self.postings.get(token).map_or(0, |p| p.sections)
    }

    /// Tokens starting with `stem`, with the documents holding each.
    pub(crate) fn tokens_from(&self, stem: &str) -> Vec<(Arc<str>, u64)> {
        let from: Arc<str> = stem.into();
        self.postings
            .range((Bound::Included(from), Bound::Unbounded))
            .take_while(|(t, _)| t.starts_with(stem))
            .map(|(t, p)| (t.clone(), p.docs.len() as u64))
            .collect()
    }

    /// Every indexed document with its key and its sections.
    pub(crate) fn documents(&self) -> impl Iterator<Item = (&DocPath, &EntryKey, IndexedDoc<'_>)> {
        self.docs.iter().map(|(p, d)| (p, &d.key, IndexedDoc(d)))
    }
}

/// One document of a [`SectionIndex`], as folded into the stored index.
pub(crate) struct IndexedDoc<'a>(pub(crate) &'a Doc);

impl IndexedDoc<'_> {
    /// Per section: anchor, heading, text, trail, text tokens with counts, length and trail
    /// tokens.
    pub(crate) fn sections(&self) -> impl Iterator<Item = SectionParts<'_>> {
        self.0.sections.iter().map(|s| SectionParts {
            anchor: &s.anchor,
            heading: &s.heading,
            text: &s.text,
            trail: &s.trail,
            tf: &s.tf,
            len: s.len,
            trail_tokens: &s.trail_tokens,
        })
    }
}

/// What the stored index keeps of one section.
pub(crate) struct SectionParts<'a> {
    pub anchor: &'a str,
    pub heading: &'a str,
    pub text: &'a str,
    pub trail: &'a [String],
    pub tf: &'a [(Arc<str>, u32)],
    pub len: u32,
    pub trail_tokens: &'a [Arc<str>],
}

/// The statistics a ranking uses: per query term its idf, and the mean section length.
#[derive(Clone, Debug)]
pub(crate) struct Ranking {
    pub idf: Vec<f64>,
    pub average: f64,
}

/// Where a row comes from.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// A [`SectionIndex`]: the section's number, `None` for a catalog answer.
    Delta(Option<usize>),
    /// The stored index: segment, document, and whether it is a catalog answer.
    Base {
        segment: u32,
        doc: u32,
        catalog: bool,
    },
}

/// One scored row before it is turned into a match.
#[derive(Clone, Debug)]
pub(crate) struct Ranked {
    pub score: f64,
    pub path: DocPath,
    /// Empty for the bare section and a catalog answer.
    pub anchor: String,
    pub entry: CatalogMatch,
    pub source: Source,
}

/// idf of a term held by `df` of `sections` sections.
pub(crate) fn idf_of(sections: u64, df: u64) -> f64 {
    let n = sections as f64;
    let df = df as f64;
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// Mean section length (at least 1).
pub(crate) fn average_len(sections: u64, total_len: u64) -> f64 {
    if sections == 0 {
        1.0
    } else {
        (total_len as f64 / sections as f64).max(1.0)
    }
}

/// A catalog answer's score before its prior.
pub(crate) fn catalog_score(idf: &[f64]) -> f64 {
    idf.iter().map(|i| i * ENTRY_BOOST).sum::<f64>() * CATALOG_ROW_BOOST
}

/// One term's part of a section's score before its prior.
pub(crate) fn term_score(
    idf: f64,
    count: u32,
    trail: bool,
    entry: bool,
    len: u32,
    average: f64,
) -> f64 {
    let mut score = 0.0;
    if count > 0 {
        let tf = f64::from(count.min(MAX_TF));
        let norm = K1 * (1.0 - B + B * f64::from(len) / average);
        score += idf * tf * (K1 + 1.0) / (tf + norm);
    }
    if trail {
        score += idf * TRAIL_BOOST;
    }
    if entry {
        score += idf * ENTRY_BOOST;
    }
    score
}

/// Orders rows by score (descending), path, anchor, and keeps the first `max` (0: all).
pub(crate) fn order(rows: &mut Vec<Ranked>, max: usize) {
    rows.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.path.cmp(&b.path))
            .then_with(|| a.anchor.cmp(&b.anchor))
    });
    if max != 0 {
        rows.truncate(max);
    }
}

/// The match of a row showing `text`.
pub(crate) fn finish(
    mut entry: CatalogMatch,
    terms: &[Term],
    anchor: String,
    heading: String,
    text: String,
) -> CatalogMatch {
    entry.score = terms.len();
    let (snippet, highlights) = snippet(&text, terms);
    entry.section = Some(SectionHit {
        anchor,
        heading,
        snippet,
        highlights,
    });
    entry
}

/// The importance prior times the journal demotion.
pub(crate) fn prior(importance: &str, path: &DocPath) -> f64 {
    let importance = importance.parse::<f64>().unwrap_or(0.5).clamp(0.0, 1.0);
    let demotion = if path.as_str().split('/').any(|s| s == "journal") {
        JOURNAL_DEMOTION
    } else {
        1.0
    };
    (0.3 + 0.7 * importance) * demotion
}

/// Byte ranges of `line` where `terms` occur.
fn highlight(line: &str, terms: &[Term]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let runs = tokens::word_runs(line);
    for term in terms {
        match term {
            Term::Word(_) | Term::Prefix(_) => {
                let mut offset = 0;
                for field in line.split_whitespace() {
                    let at = offset + line[offset..].find(field).unwrap_or(0);
                    offset = at + field.len();
                    let trimmed = field.trim_matches(|c: char| !tokens::is_word_char(c));
                    let start = at + field.find(trimmed).unwrap_or(0);
                    if term.matches_token(&trimmed.to_lowercase()) {
                        out.push((start, start + trimmed.len()));
                        continue;
                    }
                    for (range, run) in &runs {
                        if range.start >= start
                            && range.end <= start + trimmed.len()
                            && term.matches_token(run)
                        {
                            out.push((range.start, range.end));
                        }
                    }
                }
            }
            Term::Phrase(words) => {
                for window in runs.windows(words.len()) {
                    if window.iter().zip(words).all(|((_, r), w)| r == w) {
                        out.push((window[0].0.start, window[words.len() - 1].0.end));
                    }
                }
            }
        }
    }
    out.sort();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (s, e) in out {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// The snippet of `text` for `terms` and its highlights: its first line meeting the most
/// terms (built only for the rows returned; the scan stops at a line meeting all of them).
pub(crate) fn snippet(text: &str, terms: &[Term]) -> (String, Vec<(usize, usize)>) {
    let mut best: Option<(&str, usize)> = None;
    let mut met = vec![false; terms.len()];
    for line in text.lines() {
        met.fill(false);
        tokens::for_each_token(line, |t| {
            for (i, term) in terms.iter().enumerate() {
                met[i] |= term.matches_token(t);
            }
        });
        for (i, term) in terms.iter().enumerate() {
            if let Term::Phrase(words) = term {
                met[i] = phrase_in(line, words) > 0;
            }
        }
        let count = met.iter().filter(|m| **m).count();
        if best.is_none_or(|(_, n)| count > n) {
            best = Some((line, count));
        }
        if count == terms.len() {
            break;
        }
    }
    let line = best.map_or("", |(l, _)| l);
    let (cut, was_cut) = if line.len() > SNIPPET_BYTES {
        let mut end = SNIPPET_BYTES;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        (&line[..end], true)
    } else {
        (line, false)
    };
    let highlights = highlight(cut, terms);
    let mut out = cut.to_owned();
    if was_cut {
        out.push_str("...");
    }
    (out, highlights)
}

#[cfg(test)]
mod tests {
    use quire_log::Timestamp;
    use quire_log::metadata::{Catalog, DocCatalog, Metadata};

    use super::*;
    use crate::catalog::CatalogIndex;
    use crate::query::Filter;

    struct World {
        catalog: CatalogIndex,
        sections: SectionIndex,
    }

    impl World {
        fn new() -> World {
            World {
                catalog: CatalogIndex::new(),
                sections: SectionIndex::new(),
            }
        }

        fn add(&mut self, path: &str, meta: &[(&str, &str)], body: &str) {
            let path = DocPath::parse(path).unwrap();
            let meta: Metadata = meta
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect();
            let catalog = Catalog::derive(&path, &meta, body);
            let key = EntryKey {
                body_hash: Hash::of(body.as_bytes()),
                title: catalog.title.clone(),
                tags: catalog.tags.clone(),
                importance: catalog.importance.clone(),
            };
            self.catalog
                .upsert(&path, DocCatalog::from(&catalog), Timestamp(1));
            self.sections.upsert(&path, key, body);
        }

        fn find(&self, query: CatalogQuery) -> Vec<String> {
            self.sections
                .lookup(&query, &self.catalog)
                .into_iter()
                .map(|m| {
                    let anchor = m.section.map(|s| s.anchor).unwrap_or_default();
                    if anchor.is_empty() {
                        m.path.to_string()
                    } else {
                        format!("{}#{anchor}", m.path)
                    }
                })
                .collect()
        }

        fn q(&self, text: &str) -> Vec<String> {
            self.find(CatalogQuery::new(text))
        }
    }

    const DEBUGGING: &str = "# Debugging\n\nGeneral notes.\n\n## QUIC UDP buffer\n\nThe UDP buffer is too small: raise it with sysctl.\nWARNING: needs root.\n\n### Workaround\n\nSet rmem_max and restart. Warning: reboot.\n\n## Poison lock\n\nA panic in path.Match poisons the lock.\n";

    fn debugging() -> World {
        let mut w = World::new();
        w.add(
            "/kb/debugging.md",
            &[
                ("tags", "network,ops"),
                ("importance", "0.7"),
                ("title", "Debug notes"),
            ],
            DEBUGGING,
        );
        w
    }

    #[test]
    fn recall_over_sections() {
        let w = debugging();
        let mut got = w.q("udp buffer");
        got.sort();
        assert_eq!(
            got,
            [
                "/kb/debugging.md#quic-udp-buffer",
                "/kb/debugging.md#workaround"
            ],
            "via trail"
        );
        assert_eq!(w.q("SYSCTL"), ["/kb/debugging.md#quic-udp-buffer"]);
        assert!(w.q("udp poison").is_empty());
        let mut warn = w.q("warning");
        warn.sort();
        assert_eq!(
            warn,
            [
                "/kb/debugging.md#quic-udp-buffer",
                "/kb/debugging.md#workaround"
            ]
        );
        assert_eq!(
            w.q("network sysctl"),
            ["/kb/debugging.md#quic-udp-buffer"],
            "tags meet a term"
        );
        assert_eq!(w.q("network debug"), ["/kb/debugging.md"], "catalog answer");
        assert_eq!(w.q("path.Match"), ["/kb/debugging.md#poison-lock"]);
        assert_eq!(w.q("match"), ["/kb/debugging.md#poison-lock"]);
        assert_eq!(w.q("rmem_max"), ["/kb/debugging.md#workaround"]);
        assert_eq!(
            w.q("rmem_max x"),
            ["/kb/debugging.md#workaround"],
            "single chars dropped"
        );
        assert!(w.q("a").is_empty());
        let row = &w.sections.lookup(&CatalogQuery::new("sysctl"), &w.catalog)[0];
        assert_eq!(
            (row.title.as_str(), row.importance.as_str(), row.tags.len()),
            ("Debug notes", "0.7", 2)
        );
        let hit = row.section.as_ref().unwrap();
        assert_eq!(hit.heading, "QUIC UDP buffer");
        assert!(hit.snippet.contains("sysctl"), "{hit:?}");
        let (s, e) = hit.highlights[0];
        assert_eq!(&hit.snippet[s..e], "sysctl");
    }

    #[test]
    fn headingless_and_preamble_rows_are_bare() {
        let mut w = World::new();
        w.add("/a.md", &[], "plain words only\n");
        w.add("/b.md", &[], "preamble words\n\n# Head\n\nunder words\n");
        assert_eq!(w.q("plain"), ["/a.md"]);
        assert_eq!(w.q("preamble"), ["/b.md"]);
        assert_eq!(w.q("under"), ["/b.md#head"]);
        let rows = w.sections.lookup(&CatalogQuery::new("plain"), &w.catalog);
        let hit = rows[0].section.as_ref().unwrap();
        assert_eq!((hit.anchor.as_str(), hit.heading.as_str()), ("", ""));
    }

    #[test]
    fn importance_prior_journal_demotion_and_ties() {
        let mut w = World::new();
        w.add("/lo.md", &[("importance", "0.1")], "shared term\n");
        w.add("/hi.md", &[("importance", "0.9")], "shared term\n");
        w.add("/other.md", &[("importance", "1")], "nothing here\n");
        w.add("/b.md", &[], "equal thing\n");
        w.add("/a.md", &[], "equal thing\n");
        w.add("/journal/c.md", &[("importance", "1")], "equal thing\n");
        assert_eq!(w.q("shared"), ["/hi.md", "/lo.md"]);
        assert_eq!(w.q("equal"), ["/a.md", "/b.md", "/journal/c.md"]);
    }

    #[test]
    fn limit_takes_the_head_of_the_unlimited_order() {
        let mut w = World::new();
        w.add(
            "/x.md",
            &[],
            "# One\nkey\n# Two\nkey key\n# Three\nkey\n# Four\nkey other\n",
        );
        let all = w.q("key");
        assert_eq!(all.len(), 4);
        assert_eq!(w.find(CatalogQuery::new("key").max(2)), all[..2]);
    }

    #[test]
    fn scope_filters_and_updates() {
        let mut w = World::new();
        w.add("/docs/a.md", &[("tags", "t")], "alpha beta\n");
        w.add("/docs/sub/b.md", &[], "alpha\n");
        w.add("/other/c.md", &[("tags", "t")], "alpha\n");
        assert_eq!(
            w.find(CatalogQuery::new("alpha").scope("/docs/sub")),
            ["/docs/sub/b.md"]
        );
        assert_eq!(
            w.find(
                CatalogQuery::new("alpha")
                    .filter(Filter::tag("T"))
                    .scope("/docs")
            ),
            ["/docs/a.md"]
        );
        assert!(w.find(CatalogQuery::new("alpha").scope("/oth")).is_empty());
        let pinned = w.sections.clone();
        w.add("/docs/a.md", &[("tags", "t")], "gamma\n");
        assert!(w.q("beta").is_empty());
        assert_eq!(w.q("gamma"), ["/docs/a.md"]);
        assert_eq!(
            pinned.lookup(&CatalogQuery::new("beta"), &w.catalog).len(),
            1
        );
        w.sections.remove(&DocPath::parse("/docs/a.md").unwrap());
        assert!(w.q("gamma").is_empty());
        w.sections
            .remove(&DocPath::parse("/docs/sub/b.md").unwrap());
        w.sections.remove(&DocPath::parse("/other/c.md").unwrap());
        assert_eq!(
            (
                w.sections.postings.len(),
                w.sections.sections,
                w.sections.total_len
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn phrases_and_prefixes() {
        let w = debugging();
        let mut phrase = w.q("\"udp buffer\"");
        phrase.sort();
        assert_eq!(
            phrase,
            [
                "/kb/debugging.md#quic-udp-buffer",
                "/kb/debugging.md#workaround"
            ]
        );
        assert!(w.q("\"buffer udp\"").is_empty());
        assert_eq!(w.q("sysc*"), ["/kb/debugging.md#quic-udp-buffer"]);
        assert_eq!(
            w.q("\"poison lock\" panic"),
            ["/kb/debugging.md#poison-lock"],
            "phrase in the trail"
        );
        let rows = w
            .sections
            .lookup(&CatalogQuery::new("\"udp buffer\" rais*"), &w.catalog);
        let hit = rows[0].section.as_ref().unwrap();
        let marked: Vec<&str> = hit
            .highlights
            .iter()
            .map(|(s, e)| &hit.snippet[*s..*e])
            .collect();
        assert_eq!(marked, ["UDP buffer", "raise"]);
    }

    #[test]
    fn snippets_pick_the_line_with_most_terms_and_cut_at_240_bytes() {
        let long = format!("{} é{}", "word ".repeat(47), "z".repeat(20));
        let (cut, _) = snippet(
            &format!("first\n{long}\nterm word"),
            &[Term::Word("word".into()), Term::Word("term".into())],
        );
        assert_eq!(cut, "term word");
        let (cut, marks) = snippet(&long, &[Term::Word("word".into())]);
        assert!(
            cut.ends_with("...") && cut.len() <= SNIPPET_BYTES + 3,
            "{cut}"
        );
        assert_eq!(marks.len(), 47);
        let (first, _) = snippet("one\ntwo", &[Term::Word("none".into())]);
        assert_eq!(first, "one");
    }
}
