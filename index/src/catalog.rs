//! The catalog index: every live document's catalog record, kept current one changed document
//! at a time, and LOOKUP in catalog mode over it.
//!
//! # Matching and ranking
//!
//! A term matches a document when it equals one of its tags (case-insensitively) or occurs in
//! its title (case-insensitive substring, every character literal: `%`, `_`, `\` and `*` are
//! plain text). A document's score is the number of distinct terms it matches; documents with
//! no match are not results. Results rank by score, then importance, then newer `modified`,
//! then path, and are cut at the cap. The query `*` matches every document with score 0.
//! Scope and filters apply to both.
//!
//! # Indexes
//!
//! - `tags`: (lowercased tag, path) pairs — a term's tag matches are one range.
//! - `grams`: trigram → paths, over each lowercased title padded at its end with two
//!   marks, so every character starts one trigram (one set per trigram: an insert compares
//!   paths only within its trigram, and a trigram's count is its set's length). A term of three or more characters is
//!   looked up under its rarest trigram and confirmed on the title; a shorter term is a prefix
//!   of the trigram starting where it occurs, so its candidates are one range of trigrams
//!   starting with it.
//! - `ranked`: (importance, modified, path) in result order, for `*`.
//!
//! Archived documents are not in the index; [`CatalogIndex::sync`] adds and removes documents
//! as their state changes.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use quire_log::metadata::DocCatalog;
use quire_log::{DocPath, DocState, Timestamp, WorldState};

use crate::body::SectionHit;
use crate::query::{CatalogQuery, Filter, Terms};

/// What a building thread made; its panic goes on in the caller.
fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    match handle.join() {
        Ok(built) => built,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Pads the end of a title in the trigram index, so every character of a title starts a
/// trigram (a title's text may hold it too; matches are always confirmed on the title).
const END: char = '\u{3}';

/// One indexed document.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Indexed {
    catalog: DocCatalog,
    modified: Timestamp,
    lower_title: Arc<str>,
    lower_tags: Vec<Arc<str>>,
    importance: u64,
}

impl Indexed {
    fn new(catalog: DocCatalog, modified: Timestamp) -> Indexed {
        let lower_title: Arc<str> = catalog.title().to_lowercase().into();
        let mut lower_tags: Vec<Arc<str>> = Vec::new();
        for tag in catalog.tags() {
            let lower: Arc<str> = tag.to_lowercase().into();
            if !lower_tags.contains(&lower) {
                lower_tags.push(lower);
            }
        }
        Indexed {
            importance: importance_key(&catalog.importance()),
            catalog,
            modified,
            lower_title,
            lower_tags,
        }
    }

    fn grams(&self) -> Vec<Arc<str>> {
        self.gram_chars()
            .into_iter()
            .map(|g| g.iter().collect::<String>().into())
            .collect()
    }

    /// The title's distinct trigrams as characters (no allocation per trigram).
    fn gram_chars(&self) -> Vec<[char; 3]> {
        let padded: Vec<char> = self.lower_title.chars().chain([END, END]).collect();
        let mut out: Vec<[char; 3]> = padded.windows(3).map(|w| [w[0], w[1], w[2]]).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn rank(&self, path: &Arc<str>) -> RankKey {
        (
            Reverse(self.importance),
            Reverse(self.modified),
            path.clone(),
        )
    }
}

/// Importance as an order-preserving integer (canonical importance is a decimal in [0, 1],
/// whose non-negative `f64` bits order like the number).
fn importance_key(importance: &str) -> u64 {
    importance
        .parse::<f64>()
        .map_or(0, |v| v.max(0.0).to_bits())
}

type Pair = (Arc<str>, Arc<str>);

type RankKey = (Reverse<u64>, Reverse<Timestamp>, Arc<str>);

/// A path in a trigram's set: ordered by a hash of the path first, so building and updating a
/// set with a million paths compares integers held in place, not strings behind pointers
/// (the order within a set means nothing: its paths are candidates, checked on the title).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct GramPath(u64, Arc<str>);

impl GramPath {
    fn new(path: &Arc<str>) -> GramPath {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        path.hash(&mut hasher);
        GramPath(hasher.finish(), path.clone())
    }
}

/// One LOOKUP result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogMatch {
    pub path: DocPath,
    pub title: String,
    /// Tags in declared order and case.
    pub tags: Vec<String>,
    /// Canonical decimal in [0, 1].
    pub importance: String,
    pub modified: Timestamp,
    /// Distinct terms matched (0 for `*`).
    pub score: usize,
    /// The section a body lookup matched (`None` in catalog mode).
    pub section: Option<SectionHit>,
}

/// The catalog of every live document. Cheap to clone; clones are independent.
#[derive(Clone, Debug, Default)]
pub struct CatalogIndex {
    docs: OrdMap<DocPath, Indexed>,
    tags: OrdSet<Pair>,
    grams: OrdMap<Arc<str>, OrdSet<GramPath>>,
    ranked: OrdSet<RankKey>,
}

impl CatalogIndex {
    pub fn new() -> CatalogIndex {
        CatalogIndex::default()
    }

    /// The catalog of every live document of `state`.
    pub fn from_state(state: &WorldState) -> CatalogIndex {
        CatalogIndex::from_entries(
            state
                .docs()
                .filter(|d| !d.archived)
                .map(|d| (d.path.clone(), d.catalog.clone(), d.modified)),
        )
    }

    /// The catalog of `entries` (distinct paths, in order), built at once: no lookups before
    /// each insert, every set filled in its own order, and the title grams, the tags with
    /// the ranking, and the documents each on a thread of their own.
    fn from_entries(
        entries: impl Iterator<Item = (DocPath, DocCatalog, Timestamp)>,
    ) -> CatalogIndex {
        let entries: Vec<(DocPath, Arc<str>, Indexed)> = entries
            .map(|(path, catalog, modified)| {
                let key: Arc<str> = path.as_str().into();
                (path, key, Indexed::new(catalog, modified))
            })
            .collect();
        std::thread::scope(|scope| {
            let grams = scope.spawn(|| {
                let mut by_gram: HashMap<[char; 3], Vec<GramPath>> = HashMap::new();
                for (_, key, entry) in &entries {
                    let path = GramPath::new(key);
                    for gram in entry.gram_chars() {
                        by_gram.entry(gram).or_default().push(path.clone());
                    }
                }
                by_gram
                    .into_iter()
                    .map(|(gram, mut paths)| {
                        // Inserted in order, each insert walks the right edge of the set.
                        paths.sort_unstable();
                        let gram: Arc<str> = gram.iter().collect::<String>().into();
                        (gram, paths.into_iter().collect::<OrdSet<_>>())
                    })
                    .collect::<OrdMap<_, _>>()
            });
            let ordered = scope.spawn(|| {
                let mut tags: Vec<Pair> = entries
                    .iter()
                    .flat_map(|(_, key, entry)| {
                        entry
                            .lower_tags
                            .iter()
                            .map(|tag| (tag.clone(), key.clone()))
                    })
                    .collect();
                tags.sort_unstable();
                let mut ranked: Vec<RankKey> = entries
                    .iter()
                    .map(|(_, key, entry)| entry.rank(key))
                    .collect();
                ranked.sort_unstable();
                // Inserted in order, each insert walks the right edge of the set.
                (
                    tags.into_iter().collect::<OrdSet<_>>(),
                    ranked.into_iter().collect::<OrdSet<_>>(),
                )
            });
            let mut index = CatalogIndex::new();
            for (path, _, entry) in &entries {
                index.docs.insert(path.clone(), entry.clone());
            }
            (index.tags, index.ranked) = join(ordered);
            index.grams = join(grams);
            index
        })
    }

    /// Brings the entries of `paths` in line with `state` (after `state` changed them):
    /// live documents are added or updated, archived or absent ones removed.
    pub fn sync<'a>(&mut self, state: &WorldState, paths: impl IntoIterator<Item = &'a DocPath>) {
        for path in paths {
            self.sync_doc(path, state.doc(path));
        }
    }

    /// Brings one document's entry in line with its state (`None`: no such document).
    pub fn sync_doc(&mut self, path: &DocPath, doc: Option<&Arc<DocState>>) {
        match doc.filter(|d| !d.archived) {
            Some(doc) => self.upsert(path, doc.catalog.clone(), doc.modified),
            None => self.remove(path),
        }
    }

    /// How many documents the index holds.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Adds or replaces the entry of `path`.
    pub fn upsert(&mut self, path: &DocPath, catalog: DocCatalog, modified: Timestamp) {
        let entry = Indexed::new(catalog, modified);
        if self.docs.get(path) == Some(&entry) {
            return;
        }
        self.remove(path);
        let key: Arc<str> = path.as_str().into();
        for tag in &entry.lower_tags {
            self.tags.insert((tag.clone(), key.clone()));
        }
        let gram_path = GramPath::new(&key);
        for gram in entry.grams() {
            self.grams
                .entry(gram)
                .or_default()
                .insert(gram_path.clone());
        }
        self.ranked.insert(entry.rank(&key));
        self.docs.insert(path.clone(), entry);
    }

    /// Removes the entry of `path`, if any.
    pub fn remove(&mut self, path: &DocPath) {
        let Some(old) = self.docs.remove(path) else {
            return;
        };
        let key: Arc<str> = path.as_str().into();
        for tag in &old.lower_tags {
            self.tags.remove(&(tag.clone(), key.clone()));
        }
        let gram_path = GramPath::new(&key);
        for gram in old.grams() {
            let emptied = self.grams.get_mut(&gram).is_some_and(|paths| {
                paths.remove(&gram_path);
                paths.is_empty()
            });
            if emptied {
                self.grams.remove(&gram);
            }
        }
        self.ranked.remove(&old.rank(&key));
    }

    /// Answers a catalog lookup (the query's match mode is the caller's concern).
    pub fn lookup(&self, query: &CatalogQuery) -> Vec<CatalogMatch> {
        let Some(scope) = query.canonical_scope() else {
            return Vec::new();
        };
        let in_scope = |path: &str| {
            scope == "/"
                || (path.starts_with(&scope) && path.as_bytes().get(scope.len()) == Some(&b'/'))
        };
        let accept = |path: &str, doc: &Indexed| {
            in_scope(path) && query.filters.iter().all(|f| holds(f, doc))
        };
        match query.terms() {
            Terms::All => {
                let mut out = Vec::new();
                for (_, _, path) in self.ranked.iter() {
                    let Some((doc_path, doc)) = self.docs.get_key_value(&**path) else {
                        continue;
                    };
                    if accept(path, doc) {
                        out.push(to_match(doc_path, doc, 0));
                        if query.max != 0 && out.len() == query.max {
                            break;
                        }
                    }
                }
                out
            }
            Terms::Words(words) => {
                let mut scores: HashMap<Arc<str>, usize> = HashMap::new();
                for word in &words {
                    for path in self.matching(word) {
                        *scores.entry(path).or_default() += 1;
                    }
                }
                let mut hits: Vec<(usize, RankKey)> = scores
                    .into_iter()
                    .filter_map(|(path, score)| {
                        let doc = self.docs.get(&*path)?;
                        accept(&path, doc).then(|| (score, doc.rank(&path)))
                    })
                    .collect();
                hits.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
                if query.max != 0 {
                    hits.truncate(query.max);
                }
                hits.into_iter()
                    .filter_map(|(score, (_, _, path))| {
                        let (doc_path, doc) = self.docs.get_key_value(&*path)?;
                        Some(to_match(doc_path, doc, score))
                    })
                    .collect()
            }
        }
    }

    /// The catalog fields of `path` when it is live, under `scope` (canonical, as
    /// [`CatalogQuery::canonical_scope`] gives) and passes every filter. Score 0.
    pub fn admitted(
        &self,
        scope: &str,
        filters: &[Filter],
        path: &DocPath,
    ) -> Option<CatalogMatch> {
        if !in_scope(scope, path) {
            return None;
        }
        let doc = self.docs.get(path)?;
        filters
            .iter()
            .all(|f| holds(f, doc))
            .then(|| to_match(path, doc, 0))
    }

    /// The paths `word` (lowercased) matches, each once.
    fn matching(&self, word: &str) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = pairs_with_first(&self.tags, word, true).collect();
        let chars: Vec<char> = word.chars().collect();
        if chars.is_empty() {
            return out;
        }
        let mut candidates: Vec<Arc<str>> = if chars.len() < 3 {
            // Every trigram starting with the term.
            self.grams
                .range::<_, str>((Bound::Included(word), Bound::Unbounded))
                .take_while(|(gram, _)| gram.starts_with(word))
                .flat_map(|(_, paths)| paths.iter().map(|p| p.1.clone()))
                .collect()
        } else {
            // The rarest trigram bounds the candidates.
            let rarest = chars
                .windows(3)
                .map(|window| {
                    let gram: String = window.iter().collect();
                    self.grams.get(gram.as_str())
                })
                .min_by_key(|paths| paths.map_or(0, OrdSet::len));
            match rarest.flatten() {
                Some(paths) => paths.iter().map(|p| p.1.clone()).collect(),
                None => Vec::new(),
            }
        };
        candidates.sort();
        candidates.dedup();
        candidates.retain(|path| {
            self.docs
                .get(&**path)
                .is_some_and(|doc| doc.lower_title.contains(word))
        });
        out.extend(candidates);
        out.sort();
        out.dedup();
        out
    }
}

/// Where a body lookup finds the catalog fields of its rows: a built [`CatalogIndex`], or the
/// world state it would be built from (a body search then never waits for a catalog of
/// every document, which takes seconds at a million). Both admit exactly the same rows.
pub trait Admission {
    /// As [`CatalogIndex::admitted`].
    fn admitted(&self, scope: &str, filters: &[Filter], path: &DocPath) -> Option<CatalogMatch>;
}

impl Admission for CatalogIndex {
    fn admitted(&self, scope: &str, filters: &[Filter], path: &DocPath) -> Option<CatalogMatch> {
        CatalogIndex::admitted(self, scope, filters, path)
    }
}

impl Admission for WorldState {
    /// A live document's fields read from its state, checked as an indexed one is.
    fn admitted(&self, scope: &str, filters: &[Filter], path: &DocPath) -> Option<CatalogMatch> {
        if !in_scope(scope, path) {
            return None;
        }
        let doc = self.doc(path).filter(|d| !d.archived)?;
        let has_tag = |tag: &str| doc.catalog.tags().any(|t| t.to_lowercase() == tag);
        filters
            .iter()
            .all(|f| passes(f, &doc.catalog, doc.modified, has_tag))
            .then(|| match_of(path, &doc.catalog, doc.modified, 0))
    }
}

/// Whether `path` is under `scope` (canonical: `/`, or a directory without its slash).
fn in_scope(scope: &str, path: &DocPath) -> bool {
    scope == "/"
        || (path.as_str().starts_with(scope)
            && path.as_str().as_bytes().get(scope.len()) == Some(&b'/'))
}

/// The second halves of `(first, second)` pairs whose first equals `key` (`exact`) or
/// starts with it.
fn pairs_with_first<'a>(
    set: &'a OrdSet<Pair>,
    key: &'a str,
    exact: bool,
) -> impl Iterator<Item = Arc<str>> + 'a {
    let from: Pair = (key.into(), "".into());
    set.range((Bound::Included(from), Bound::Unbounded))
        .take_while(move |(first, _)| {
            if exact {
                &**first == key
            } else {
                first.starts_with(key)
            }
        })
        .map(|(_, path)| path.clone())
}

fn holds(filter: &Filter, doc: &Indexed) -> bool {
    passes(filter, &doc.catalog, doc.modified, |tag| {
        doc.lower_tags.iter().any(|t| **t == *tag)
    })
}

/// Whether a document of `catalog` and `modified` passes `filter`; `has_tag` tells whether
/// it holds a tag (given lowercased).
fn passes(
    filter: &Filter,
    catalog: &DocCatalog,
    modified: Timestamp,
    has_tag: impl Fn(&str) -> bool,
) -> bool {
    match filter {
        Filter::Tag(tag) => has_tag(tag),
        Filter::ModifiedAfter(at) => modified > *at,
        Filter::ModifiedBefore(at) => modified < *at,
        Filter::Equals(key, value) => catalog.get(key) == Some(value.as_str()),
    }
}

fn to_match(path: &DocPath, doc: &Indexed, score: usize) -> CatalogMatch {
    match_of(path, &doc.catalog, doc.modified, score)
}

fn match_of(
    path: &DocPath,
    catalog: &DocCatalog,
    modified: Timestamp,
    score: usize,
) -> CatalogMatch {
    CatalogMatch {
        path: path.clone(),
        title: catalog.title().to_owned(),
        tags: catalog.tags().map(str::to_owned).collect(),
        importance: catalog.importance(),
        modified,
        score,
        section: None,
    }
}

#[cfg(test)]
mod tests {
    use quire_log::metadata::{Catalog, Metadata};
    use std::collections::BTreeMap;

    use super::*;

    fn add(index: &mut CatalogIndex, path: &str, meta: &[(&str, &str)], body: &str, at: u64) {
        let path = DocPath::parse(path).unwrap();
        let meta: Metadata = meta
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        let catalog = Catalog::derive(&path, &meta, body);
        index.upsert(&path, DocCatalog::from(&catalog), Timestamp(at));
    }

    fn paths(found: &[CatalogMatch]) -> Vec<&str> {
        found.iter().map(|m| m.path.as_str()).collect()
    }

    /// The obvious scan the index must agree with.
    fn scan(docs: &BTreeMap<String, (String, Vec<String>, u64)>, word: &str) -> Vec<String> {
        docs.iter()
            .filter(|(_, (title, tags, _))| {
                title.to_lowercase().contains(word) || tags.iter().any(|t| t.to_lowercase() == word)
            })
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Built at once, the catalog holds exactly what one upsert per document gives.
    #[test]
    fn a_catalog_built_at_once_equals_one_built_by_upserts() {
        let docs: Vec<(DocPath, DocCatalog, Timestamp)> = (0..300)
            .map(|i| {
                let path = DocPath::parse(&format!("/d{}/n{i}.md", i % 7)).unwrap();
                let meta: Metadata = [
                    ("tags".to_owned(), format!("t{},Shared", i % 5)),
                    ("importance".to_owned(), format!("0.{}", i % 10)),
                ]
                .into_iter()
                .collect();
                let body = format!("# Title {i} über notes\n\ntext\n");
                let catalog = DocCatalog::from(&Catalog::derive(&path, &meta, &body));
                (path, catalog, Timestamp(1_000 + i % 13))
            })
            .collect();
        let mut upserted = CatalogIndex::new();
        for (path, catalog, at) in &docs {
            upserted.upsert(path, catalog.clone(), *at);
        }
        let built = CatalogIndex::from_entries(docs.into_iter());
        assert_eq!(built.docs, upserted.docs);
        assert_eq!(built.tags, upserted.tags);
        assert_eq!(built.grams, upserted.grams);
        assert_eq!(built.ranked, upserted.ranked);
        let pairs: usize = built.grams.values().map(OrdSet::len).sum();
        assert!(pairs > 3000, "{pairs} (trigram, path) pairs");
    }

    #[test]
    fn the_state_admits_exactly_the_rows_its_catalog_admits() {
        use quire_log::testing::{self, archive, commit, meta, publish_with};
        let mut state = WorldState::genesis(testing::WORLD);
        let mut bases = Vec::new();
        let mutations: Vec<_> = (0..40)
            .map(|i| {
                let tags = format!("T{},Shared", i % 3);
                let importance = format!("0.{}", i % 10);
                publish_with(
                    &format!("/d{}/n{i}.md", i % 4),
                    &format!("# Title {i}\n\ntext\n"),
                    meta(&[("tags", &tags), ("importance", &importance), ("kind", "k")]),
                )
            })
            .collect();
        commit(&mut state, &mutations, true, &mut bases);
        commit(
            &mut state,
            &[archive("/d1/n1.md", true), archive("/d2/n6.md", true)],
            true,
            &mut bases,
        );
        let catalog = CatalogIndex::from_state(&state);
        let (after, before) = {
            let mut stamps: Vec<Timestamp> = state.docs().map(|d| d.modified).collect();
            stamps.sort();
            (stamps[5], stamps[30])
        };
        let filter_sets = [
            vec![],
            vec![Filter::Tag("t1".into())],
            vec![Filter::Tag("shared".into()), Filter::ModifiedAfter(after)],
            vec![Filter::ModifiedBefore(before)],
            vec![Filter::Equals("kind".into(), "k".into())],
            vec![Filter::Equals("kind".into(), "other".into())],
        ];
        let mut admitted = 0;
        for scope in ["/", "/d1", "/d", "/d2"] {
            for filters in &filter_sets {
                for i in 0..42 {
                    let path = DocPath::parse(&format!("/d{}/n{i}.md", i % 4)).unwrap();
                    let want = Admission::admitted(&catalog, scope, filters, &path);
                    let got = Admission::admitted(&state, scope, filters, &path);
                    assert_eq!(got, want, "{scope} {filters:?} {path}");
                    admitted += usize::from(want.is_some());
                }
            }
        }
        // Every kind of refusal and acceptance occurred.
        assert!(
            admitted > 100 && admitted < 4 * 6 * 42 / 2,
            "{admitted} admitted"
        );
    }

    #[test]
    fn terms_match_tags_exactly_and_titles_as_substrings() {
        let mut index = CatalogIndex::new();
        add(
            &mut index,
            "/a.md",
            &[("tags", "Golang,web")],
            "# Rust notes\n",
            10,
        );
        add(&mut index, "/b.md", &[("title", "Go 100% _x_ \\")], "", 10);
        let find = |q: &str| paths(&index.lookup(&CatalogQuery::new(q))).join(" ");
        assert_eq!(find("golang"), "/a.md");
        assert_eq!(find("go"), "/b.md");
        assert_eq!(find("ust"), "/a.md");
        assert_eq!(find("100%"), "/b.md");
        assert_eq!(find("%"), "/b.md");
        assert_eq!(find("_"), "/b.md");
        assert_eq!(find("\\"), "/b.md");
        assert_eq!(find("s"), "/a.md");
        assert_eq!(find(""), "");
        let found = index.lookup(&CatalogQuery::new("GOLANG web"));
        assert_eq!(found[0].score, 2);
        assert_eq!(found[0].tags, ["Golang", "web"]);
    }

    #[test]
    fn ranking_and_cap() {
        let mut index = CatalogIndex::new();
        add(
            &mut index,
            "/z.md",
            &[("tags", "x,y"), ("importance", "0.1")],
            "",
            1,
        );
        add(
            &mut index,
            "/hi.md",
            &[("tags", "x"), ("importance", "0.9")],
            "",
            1,
        );
        add(&mut index, "/new.md", &[("tags", "x")], "", 5);
        add(&mut index, "/b.md", &[("tags", "x")], "", 1);
        add(&mut index, "/a.md", &[("tags", "x")], "", 1);
        let all = index.lookup(&CatalogQuery::new("x y"));
        assert_eq!(
            paths(&all),
            ["/z.md", "/hi.md", "/new.md", "/a.md", "/b.md"]
        );
        let star = index.lookup(&CatalogQuery::new("*").max(2));
        assert_eq!(paths(&star), ["/hi.md", "/new.md"]);
        assert!(star.iter().all(|m| m.score == 0));
    }

    #[test]
    fn scope_and_filters() {
        let mut index = CatalogIndex::new();
        add(
            &mut index,
            "/docs/a.md",
            &[("tags", "T"), ("type", "Note")],
            "",
            100,
        );
        add(&mut index, "/docs/sub/b.md", &[("tags", "t")], "", 200);
        add(&mut index, "/other/c.md", &[("tags", "t")], "", 300);
        let find = |q: CatalogQuery| paths(&index.lookup(&q)).join(" ");
        assert_eq!(
            find(CatalogQuery::new("t").scope("/docs/")),
            "/docs/sub/b.md /docs/a.md"
        );
        assert_eq!(
            find(CatalogQuery::new("t").scope("/docs/sub")),
            "/docs/sub/b.md"
        );
        assert_eq!(find(CatalogQuery::new("t").scope("/oth")), "");
        assert_eq!(find(CatalogQuery::new("t").scope("")).split(' ').count(), 3);
        assert_eq!(
            find(CatalogQuery::new("*").filter(Filter::Equals("type".into(), "Note".into()))),
            "/docs/a.md"
        );
        assert_eq!(
            find(
                CatalogQuery::new("t")
                    .filter(Filter::ModifiedAfter(Timestamp(100)))
                    .filter(Filter::ModifiedBefore(Timestamp(300)))
            ),
            "/docs/sub/b.md"
        );
        assert_eq!(
            find(CatalogQuery::new("*").filter(Filter::tag("T")))
                .split(' ')
                .count(),
            3
        );
    }

    #[test]
    fn updates_replace_and_remove_entries() {
        let mut index = CatalogIndex::new();
        add(
            &mut index,
            "/a.md",
            &[("tags", "old")],
            "# First title\n",
            1,
        );
        let pinned = index.clone();
        add(&mut index, "/a.md", &[("tags", "new")], "# Second\n", 2);
        let find = |i: &CatalogIndex, q: &str| paths(&i.lookup(&CatalogQuery::new(q))).len();
        assert_eq!((find(&index, "old"), find(&index, "first")), (0, 0));
        assert_eq!((find(&index, "new"), find(&index, "second")), (1, 1));
        assert_eq!((find(&pinned, "old"), find(&pinned, "first")), (1, 1));
        index.remove(&DocPath::parse("/a.md").unwrap());
        assert!(index.is_empty());
        assert_eq!(find(&index, "*"), 0);
        assert_eq!(index.grams.len() + index.tags.len() + index.ranked.len(), 0);
    }

    proptest::proptest! {
        #[test]
        fn index_agrees_with_a_scan(
            titles in proptest::collection::vec("[a-cA-C %_]{1,8}", 1..12),
            word in "[a-c%_ ]{1,4}",
        ) {
            let mut index = CatalogIndex::new();
            let mut docs = BTreeMap::new();
            for (i, title) in titles.iter().enumerate() {
                let path = format!("/d{i}.md");
                let title = title.trim();
                let meta: Vec<(&str, &str)> = if title.is_empty() { vec![] } else { vec![("title", title)] };
                add(&mut index, &path, &meta, "", 1);
                let p = DocPath::parse(&path).unwrap();
                let shown = if title.is_empty() { p.name().to_owned() } else { title.to_owned() };
                docs.insert(path, (shown, Vec::new(), 1));
            }
            let word = word.trim().to_lowercase();
            if !word.is_empty() && !word.contains(' ') {
                let mut want = scan(&docs, &word);
                want.sort();
                let mut got: Vec<String> = index.lookup(&CatalogQuery::new(word.clone())).into_iter().map(|m| m.path.to_string()).collect();
                got.sort();
                proptest::prop_assert_eq!(got, want);
            }
        }
    }
}
