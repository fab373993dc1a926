//! One version of a world's section index: a committed [`Base`] of the stored index plus a
//! small in-memory delta (a [`SectionIndex`] of the documents changed since that commit, and
//! the set of every path changed, removed ones included), answering as one index.
//!
//! Both halves rank by the same rules ([`crate::body`]) over shared statistics: N, the mean
//! section length and each term's df add the base's and the delta's. A base section whose path
//! the delta changed is never a row (the delta holds that document's current state or its
//! removal). A clone is O(1): the base is a shared searcher and the delta persistent maps.

use std::sync::Arc;

use imbl::OrdSet;
use quire_log::DocPath;

use crate::body::SectionIndex;
use crate::body::{EntryKey, Ranking, Source, average_len, finish, idf_of, order};
use crate::catalog::{Admission, CatalogMatch};
use crate::query::CatalogQuery;
use crate::store::{self, Base, StoreResult, key_digest};
use crate::tokens::{self, Term};

/// A section index version: base plus delta.
#[derive(Clone, Debug, Default)]
pub struct IndexVersion {
    base: Option<Base>,
    delta: SectionIndex,
    changed: OrdSet<DocPath>,
}

impl IndexVersion {
    /// A version holding exactly `base` (or nothing).
    pub fn new(base: Option<Base>) -> IndexVersion {
        IndexVersion {
            base,
            delta: SectionIndex::new(),
            changed: OrdSet::new(),
        }
    }

    /// The commit under the delta.
    pub fn base(&self) -> Option<&Base> {
        self.base.as_ref()
    }

    /// The documents indexed since the base.
    pub fn delta(&self) -> &SectionIndex {
        &self.delta
    }

    /// Every path changed since the base (indexed anew or removed).
    pub fn changed(&self) -> &OrdSet<DocPath> {
        &self.changed
    }

    /// Whether `path` is indexed under `key`.
    pub fn is_current(&self, path: &DocPath, key: &EntryKey) -> bool {
        if self.changed.contains(path) {
            return self.delta.key(path) == Some(key);
        }
        self.base
            .as_ref()
            .and_then(|b| b.key(path))
            .is_some_and(|d| d == key_digest(key))
    }

    /// Whether `path` is indexed at all.
    pub fn holds(&self, path: &DocPath) -> bool {
        if self.changed.contains(path) {
            return self.delta.key(path).is_some();
        }
        self.base.as_ref().and_then(|b| b.key(path)).is_some()
    }

    /// Indexes `path` with `body` under `key` (in the delta), unless indexed so already.
    pub fn upsert(&mut self, path: &DocPath, key: EntryKey, body: &str) {
        if self.is_current(path, &key) {
            return;
        }
        self.changed.insert(path.clone());
        self.delta.upsert(path, key, body);
    }

    /// Removes `path`.
    pub fn remove(&mut self, path: &DocPath) {
        if !self.holds(path) {
            return;
        }
        self.changed.insert(path.clone());
        self.delta.remove(path);
    }

    /// Answers a body lookup over the documents `catalog` admits (it must index the same
    /// snapshot). Each match carries its section.
    pub fn lookup(
        &self,
        query: &CatalogQuery,
        catalog: &dyn Admission,
    ) -> StoreResult<Vec<CatalogMatch>> {
        let Some(base) = self.base.as_ref() else {
            return Ok(self.delta.lookup(query, catalog));
        };
        let terms = tokens::query_terms(&query.query);
        let Some(scope) = query.canonical_scope() else {
            return Ok(Vec::new());
        };
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let expansions: Vec<Vec<Arc<str>>> = terms
            .iter()
            .map(|t| match t {
                Term::Prefix(stem) => store::expand(Some(base), &self.delta, stem),
                _ => Vec::new(),
            })
            .collect();
        let (base_sections, base_len) = base.totals();
        let (delta_sections, delta_len) = self.delta.totals();
        let sections = base_sections + delta_sections;
        let df = |token: &str| base.section_df(token) + self.delta.section_df(token);
        let mut idf = Vec::with_capacity(terms.len());
        for (term, expanded) in terms.iter().zip(&expansions) {
            let found = match term {
                // A word held nowhere finds no rows in either half.
                Term::Word(w) => Some(df(w)),
                Term::Prefix(_) => expanded.iter().map(|t| df(t)).max(),
                Term::Phrase(words) => words
                    .iter()
                    .filter(|w| w.chars().nth(1).is_some() && w.len() <= tokens::MAX_TOKEN_BYTES)
                    .map(|w| df(w))
                    .min(),
            };
            let Some(found) = found else {
                return Ok(Vec::new());
            };
            idf.push(idf_of(sections, found));
        }
        let stats = Ranking {
            idf,
            average: average_len(sections, base_len + delta_len),
        };
        let changed = |p: &DocPath| self.changed.contains(p);
        let mut rows = base.rows(&terms, &expansions, &stats, &scope, query, catalog, changed)?;
        rows.extend(
            self.delta
                .rows(&terms, &stats, &scope, query, catalog, |_| false),
        );
        order(&mut rows, query.max);
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (anchor, heading, text) = match row.source {
                Source::Base {
                    segment,
                    doc,
                    catalog,
                } => {
                    let stored = base.stored(segment, doc, catalog.then_some(&row.path))?;
                    if catalog {
                        (String::new(), String::new(), stored.text)
                    } else {
                        (stored.anchor, stored.heading, stored.text)
                    }
                }
                Source::Delta(_) => self.delta.section_text(&row),
            };
            out.push(finish(row.entry, &terms, anchor, heading, text));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests_support {
    use quire_log::metadata::{Catalog, DocCatalog, Metadata};
    use quire_log::{Hash, Timestamp};

    use super::*;
    use crate::catalog::CatalogIndex;
    use crate::query::Filter;
    use crate::store::SectionStore;

    pub(super) const DEBUGGING: &str = "# Debugging\n\nGeneral notes.\n\n## QUIC UDP buffer\n\nThe UDP buffer is too small: raise it with sysctl.\nWARNING: needs root.\n\n### Workaround\n\nSet rmem_max and restart. Warning: reboot.\n\n## Poison lock\n\nA panic in path.Match poisons the lock.\n";

    pub(super) type Doc = (&'static str, Vec<(&'static str, &'static str)>, String);

    pub(super) fn corpus() -> Vec<Doc> {
        let mut docs: Vec<Doc> = vec![
            (
                "/kb/debugging.md",
                vec![
                    ("tags", "network,ops"),
                    ("importance", "0.7"),
                    ("title", "Debug notes"),
                ],
                DEBUGGING.into(),
            ),
            ("/a.md", vec![], "plain words only\n".into()),
            (
                "/b.md",
                vec![],
                "preamble words\n\n# Head\n\nunder words\n".into(),
            ),
            (
                "/lo.md",
                vec![("importance", "0.1")],
                "shared term\n".into(),
            ),
            (
                "/hi.md",
                vec![("importance", "0.9")],
                "shared term\n".into(),
            ),
            (
                "/journal/c.md",
                vec![("importance", "1")],
                "equal thing shared\n".into(),
            ),
            (
                "/x.md",
                vec![],
                "# One\nkey\n# Two\nkey key\n# Three\nkey\n# Four\nkey other\n".into(),
            ),
            ("/docs/a.md", vec![("tags", "t")], "alpha beta\n".into()),
            ("/docs/sub/b.md", vec![], "alpha words\n".into()),
            (
                "/other/c.md",
                vec![("tags", "t,alpha")],
                "alpha\n## Sub\nbeta gamma\n".into(),
            ),
            (
                "/compound.md",
                vec![("tags", "rust-lang,ops"), ("title", "Web.Config guide")],
                "# Node.js Setup\nrun node.js twice: Node.js, then node js.\n## İstanbul\nxİy-z\n"
                    .into(),
            ),
        ];
        for i in 0..30 {
            docs.push((
                leak(format!("/gen/{i:02}.md")),
                vec![("importance", ["0.2", "0.5", "0.8"][i % 3])],
                format!(
                    "# Part {i}\nkey words number{i} and sys{}\n## Deep\nbuffer udp {}\n",
                    i % 7,
                    "key ".repeat(i % 4)
                ),
            ));
        }
        docs
    }

    pub(super) fn parts(doc: &Doc) -> (DocPath, DocCatalog, EntryKey) {
        let path = DocPath::parse(doc.0).unwrap();
        let meta: Metadata = doc
            .1
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        let catalog = Catalog::derive(&path, &meta, &doc.2);
        let key = EntryKey {
            body_hash: Hash::of(doc.2.as_bytes()),
            title: catalog.title.clone(),
            tags: catalog.tags.clone(),
            importance: catalog.importance.clone(),
        };
        (path, DocCatalog::from(&catalog), key)
    }

    pub(super) const QUERIES: &[&str] = &[
        "udp buffer",
        "SYSCTL",
        "udp poison",
        "warning",
        "network sysctl",
        "network debug",
        "path.Match",
        "match",
        "rmem_max x",
        "plain",
        "preamble",
        "under",
        "shared",
        "equal",
        "key",
        "alpha",
        "alpha beta",
        "beta",
        "\"udp buffer\"",
        "\"buffer udp\"",
        "sysc*",
        "sys*",
        "\"poison lock\" panic",
        "\"udp buffer\" rais*",
        "key words",
        "number7",
        "deep buffer",
        "\"debug notes\"",
        "\"notes debug\"",
        "\"buffer workaround\"",
        "\"network ops\"",
        "\"notes network\"",
        "\"part 3\" deep",
        "\"key key\"",
        "node.js",
        "\"node js\"",
        "node",
        "rust-lang",
        "\"rust lang\"",
        "web.config setup",
        "istanbul",
        "xİy-z",
        "xi",
    ];

    pub(super) fn queries() -> Vec<CatalogQuery> {
        let mut out: Vec<CatalogQuery> = QUERIES.iter().map(|q| CatalogQuery::new(*q)).collect();
        out.push(CatalogQuery::new("key").max(3));
        out.push(CatalogQuery::new("key").max(0));
        out.push(CatalogQuery::new("alpha").scope("/docs/sub"));
        out.push(
            CatalogQuery::new("alpha")
                .filter(Filter::tag("T"))
                .scope("/docs"),
        );
        out.push(CatalogQuery::new("alpha").scope("/oth"));
        out.push(CatalogQuery::new("buffer").scope("/gen").max(5));
        out
    }

    /// A store holding every document (uncommitted) and the catalog.
    pub(super) fn stored(docs: &[Doc]) -> (SectionStore, CatalogIndex) {
        let store = SectionStore::create(None).unwrap();
        let mut catalog = CatalogIndex::new();
        for doc in docs {
            let (path, entry, key) = parts(doc);
            catalog.upsert(&path, entry, Timestamp(1));
            store.add(&path, key, &doc.2).unwrap();
        }
        (store, catalog)
    }

    /// The memory index of every document, the catalog, and a version holding the first
    /// `in_base` documents in a stored base and the rest in its delta.
    pub(super) fn build(
        docs: &[Doc],
        in_base: usize,
    ) -> (SectionIndex, CatalogIndex, IndexVersion) {
        build_in_segments(docs, in_base, usize::MAX)
    }

    /// As [`build`], the base committed every `per_segment` documents (a segment each).
    pub(super) fn build_in_segments(
        docs: &[Doc],
        in_base: usize,
        per_segment: usize,
    ) -> (SectionIndex, CatalogIndex, IndexVersion) {
        let mut oracle = SectionIndex::new();
        let mut catalog = CatalogIndex::new();
        let store = SectionStore::create(None).unwrap();
        for (i, doc) in docs.iter().enumerate() {
            let (path, entry, key) = parts(doc);
            catalog.upsert(&path, entry, Timestamp(1));
            oracle.upsert(&path, key.clone(), &doc.2);
            if i < in_base {
                store.add(&path, key, &doc.2).unwrap();
                if i % per_segment == per_segment - 1 && i + 1 < in_base {
                    store.commit(i as u64).unwrap();
                }
            }
        }
        let mut version = IndexVersion::new(Some(store.commit(7).unwrap()));
        for doc in &docs[in_base.min(docs.len())..] {
            let (path, _, key) = parts(doc);
            version.upsert(&path, key, &doc.2);
        }
        (oracle, catalog, version)
    }

    /// A path that lives as long as the tests (a [`Doc`] names its path as `&'static str`).
    pub(super) fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    /// Asks `version` each of `texts` at each cap (the query shaped by `shape`) and requires
    /// the memory index's answer, never empty; returns each query with its answer.
    pub(super) fn same_as_oracle(
        (oracle, catalog, version): &(SectionIndex, CatalogIndex, IndexVersion),
        texts: &[&str],
        caps: &[usize],
        shape: impl Fn(CatalogQuery) -> CatalogQuery,
    ) -> Vec<(CatalogQuery, Vec<CatalogMatch>)> {
        let mut answers = Vec::new();
        for text in texts {
            for max in caps {
                let q = shape(CatalogQuery::new(*text).max(*max));
                let got = version.lookup(&q, catalog).unwrap();
                assert_eq!(got, oracle.lookup(&q, catalog), "{q:?}");
                assert!(!got.is_empty(), "{q:?}");
                answers.push((q, got));
            }
        }
        answers
    }

    #[test]
    fn a_stored_base_answers_as_the_memory_index() {
        let docs = corpus();
        for in_base in [docs.len(), docs.len() / 2, 1] {
            let (oracle, catalog, version) = build(&docs, in_base);
            assert_eq!(version.base().unwrap().sequence(), 7);
            for q in queries() {
                let want = oracle.lookup(&q, &catalog);
                let got = version.lookup(&q, &catalog).unwrap();
                assert_eq!(got, want, "{in_base} in base: {q:?}");
            }
            assert!(
                !oracle
                    .lookup(&CatalogQuery::new("key"), &catalog)
                    .is_empty()
            );
        }
    }

    pub(super) fn rows(found: Vec<CatalogMatch>) -> Vec<String> {
        let mut out: Vec<String> = found
            .into_iter()
            .map(|m| {
                format!(
                    "{}#{}",
                    m.path,
                    m.section.map(|s| s.anchor).unwrap_or_default()
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_delta_replaces_and_removes_base_documents() {
        let docs = corpus();
        let (mut oracle, catalog, mut version) = build(&docs, docs.len());
        let pinned = version.clone();
        let a = DocPath::parse("/docs/a.md").unwrap();
        let (_, _, mut key) = parts(&docs[7]);
        key.body_hash = Hash::of(b"gamma");
        version.upsert(&a, key.clone(), "gamma\n");
        oracle.upsert(&a, key.clone(), "gamma\n");
        assert!(version.is_current(&a, &key));
        let gone = DocPath::parse("/kb/debugging.md").unwrap();
        version.remove(&gone);
        oracle.remove(&gone);
        assert!(!version.holds(&gone));
        for q in queries()
            .into_iter()
            .chain(["gamma", "beta", "udp"].map(CatalogQuery::new))
        {
            assert_eq!(
                rows(version.lookup(&q, &catalog).unwrap()),
                rows(oracle.lookup(&q, &catalog)),
                "{q:?}"
            );
        }
        assert!(
            rows(
                version
                    .lookup(&CatalogQuery::new("beta"), &catalog)
                    .unwrap()
            )
            .iter()
            .all(|r| !r.starts_with("/docs/a.md"))
        );
        assert_eq!(
            rows(
                pinned
                    .lookup(&CatalogQuery::new("beta alpha"), &catalog)
                    .unwrap()
            ),
            ["/docs/a.md#", "/other/c.md#sub"],
            "a version pinned before the change keeps its state"
        );
    }

    #[test]
    fn rows_past_the_kept_margin_are_found_when_the_best_are_refused() {
        let mut docs: Vec<Doc> = (0..100)
            .map(|i| {
                let path = leak(format!("/hot/{i:03}.md"));
                (path, vec![], "hot hot hot\n".to_owned())
            })
            .collect();
        for i in 0..3 {
            let path = leak(format!("/cold/{i}.md"));
            docs.push((
                path,
                vec![],
                format!("hot and {} more\n", "filler ".repeat(i + 5)),
            ));
        }
        let (mut oracle, catalog, mut version) = build(&docs, docs.len());
        for doc in &docs[..100] {
            let path = DocPath::parse(doc.0).unwrap();
            version.remove(&path);
            oracle.remove(&path);
        }
        for q in [
            CatalogQuery::new("hot").max(2),
            CatalogQuery::new("hot").max(1),
            CatalogQuery::new("hot"),
        ] {
            let got = version.lookup(&q, &catalog).unwrap();
            assert_eq!(got, oracle.lookup(&q, &catalog), "{q:?}");
            assert!(!got.is_empty());
        }
    }

    /// A segment's sections are bounded by its highest stored prior, not the highest there
    /// is: segments of low importance only, one of mixed importance, and sections met in
    /// headings and in text alone answer at every cap as the memory index does.
    #[test]
    fn bounds_taken_at_a_segments_highest_prior_change_no_answer() {
        let mut docs: Vec<Doc> = Vec::new();
        for i in 0..240 {
            // Segments of 80: the first two hold importance 0 and 0.2 only, the last all.
            let importance = match i / 80 {
                0 => ["0", "0.2"][i % 2],
                1 => "0.2",
                _ => ["1", "0", "0.6"][i % 3],
            };
            let body = match i % 4 {
                0 => format!("# Hot cold\n\nhot cold {}\n", "filler ".repeat(i % 9)),
                1 => format!(
                    "# Intro\n\nhot {}cold {}\n",
                    "hot ".repeat(i % 5),
                    "x ".repeat(i % 7)
                ),
                2 => format!("# Cold\n\nhot and cold {}\n", "cold ".repeat(i % 3)),
                _ => format!("plain hot words {i}\n"),
            };
            docs.push((
                leak(format!("/p/{i:03}.md")),
                vec![("importance", importance)],
                body,
            ));
        }
        for per_segment in [80, usize::MAX] {
            same_as_oracle(
                &build_in_segments(&docs, docs.len(), per_segment),
                &[
                    "hot",
                    "hot cold",
                    "hot words",
                    "cold hot",
                    "\"hot cold\"",
                    "co*",
                ],
                &[1, 3, 10, 30, 100, 0],
                |q| q,
            );
        }
    }

    /// The stored base reads postings in two passes (trail and entry hits, then text-only
    /// sections, skipped when the kept rows all beat the best a text-only one could score):
    /// at every cap the rows are the memory index's.
    #[test]
    fn text_only_sections_skipped_behind_boosted_rows_change_no_answer() {
        let mut docs: Vec<Doc> = Vec::new();
        // More catalog answers than the kept rows at small caps, every one above the best
        // a text-only section could score: the text-only pass is skipped there.
        for i in 0..100 {
            docs.push((
                leak(format!("/tagged/{i:03}.md")),
                vec![("tags", "hot"), ("importance", ["0.5", "1"][i % 2])],
                format!("plain words {i}\n"),
            ));
        }
        for i in 0..10 {
            docs.push((
                leak(format!("/headed/{i:02}.md")),
                vec![("importance", ["0.2", "0.9"][i % 2])],
                format!("# Hot topic\n\nsome words {}\n", "hot ".repeat(i % 3)),
            ));
        }
        for i in 0..300 {
            docs.push((
                leak(format!("/text/{i:03}.md")),
                vec![("importance", ["1", "0.4", "0"][i % 3])],
                format!("hot {}{}\n", "hot ".repeat(i % 5), "filler ".repeat(i % 7)),
            ));
        }
        for in_base in [docs.len(), 250] {
            let (oracle, catalog, version) = build(&docs, in_base);
            for text in ["hot", "hot topic", "hot words", "\"hot topic\"", "ho*"] {
                for max in [1, 10, 30, 40, 100, 110, 150, 200, 300, 0] {
                    let q = CatalogQuery::new(text).max(max);
                    let got = version.lookup(&q, &catalog).unwrap();
                    assert_eq!(got, oracle.lookup(&q, &catalog), "{in_base} in base: {q:?}");
                }
            }
            let all = version
                .lookup(&CatalogQuery::new("hot").max(0), &catalog)
                .unwrap();
            assert!(all.len() > 400, "{}", all.len());
        }
    }

    /// A common word's answers tie by the hundred: the stored base reads each run of ties in
    /// path order and stops it once it holds enough rows. Paths added out of order, over
    /// several segments, with two tying sections per document (doc order is not anchor
    /// order): at every cap the rows
    /// are the memory index's.
    #[test]
    fn runs_of_tied_rows_stop_early_and_change_no_answer() {
        let docs: Vec<Doc> = (0..240)
            .map(|i| (i * 97) % 240)
            .map(|i| {
                (
                    leak(format!("/tie/{i:03}.md")),
                    vec![("tags", "hot")],
                    "# Zeta\n\nhot words\n\n# Alpha\n\nhot words\n".to_owned(),
                )
            })
            .collect();
        let built = build_in_segments(&docs, docs.len(), 80);
        assert_eq!(built.2.base().unwrap().segments().len(), 3);
        same_as_oracle(
            &built,
            &["hot", "words", "hot words", "\"hot words\"", "ho*"],
            &[1, 2, 3, 10, 65, 100, 0],
            |q| q,
        );
    }

    #[test]
    fn tied_rows_cut_from_a_segment_are_read_again_when_filters_refuse_the_kept_ones() {
        // Three segments of 80 documents whose sections all tie; the first fills the kept
        // rows, so ties of the others are cut. Every document of the first passes the
        // filter, with late paths; the second's pass only at the end of its paths, beyond
        // the ties it keeps. The answer is the second segment's cut rows, not the first's.
        let docs: Vec<Doc> = (0..240)
            .map(|i| {
                let (segment, at) = (i / 80, i % 80);
                let rare = segment == 0 || (segment == 1 && at >= 60);
                let first_digit = [2, 0, 1][segment];
                (
                    leak(format!("/tie/{first_digit}{at:02}.md")),
                    vec![("tags", if rare { "hot,rare" } else { "hot" })],
                    "# Zeta\n\nhot words\n\n# Alpha\n\nhot words\n".to_owned(),
                )
            })
            .collect();
        let built = build_in_segments(&docs, docs.len(), 80);
        assert_eq!(built.2.base().unwrap().segments().len(), 3);
        let answers = same_as_oracle(
            &built,
            &["hot", "words", "hot words", "\"hot words\""],
            &[1, 10, 30, 0],
            |q| q.filter(Filter::tag("rare")),
        );
        for (q, got) in answers {
            assert!(
                got[0].path.as_str().starts_with("/tie/0"),
                "{q:?}: {}",
                got[0].path
            );
        }
    }

    #[test]
    fn a_rare_word_beside_a_common_one_drives_the_boosted_pass_and_changes_no_answer() {
        // "common" is in the tags of most documents and in the headings of some, so its
        // trail and entry lists are far longer than "rare"'s postings; "rare" stands in
        // text with and without "common" in a tag, heading or text beside it.
        let docs: Vec<Doc> = (0..200)
            .map(|i| {
                let tags = if i % 10 == 3 { "other" } else { "common,x" };
                let body = match i % 10 {
                    0 => "# Intro\n\nrare words here\n".to_owned(),
                    3 => "# Plain\n\ncommon and rare in text only\n".to_owned(),
                    5 => "# Common heading\n\nrare under it\n\n## Sub\n\nrare deeper\n".to_owned(),
                    _ => format!("# Doc {i}\n\nnothing to see\n"),
                };
                (leak(format!("/mix/{i:03}.md")), vec![("tags", tags)], body)
            })
            .collect();
        same_as_oracle(
            &build_in_segments(&docs, docs.len(), 70),
            &["common rare", "rare common", "rare", "\"common and\" rare"],
            &[1, 5, 25, 0],
            |q| q,
        );
    }

    #[test]
    fn phrases_passed_over_by_their_words_bound_change_no_answer() {
        // Weak phrase matches come first (once, in long sections), strong ones later
        // (often, in short sections), and the words stand apart in others: the kept rows'
        // threshold is set by weak ones before the strong ones are read. Importance varies,
        // so the bound's own length and prior are both tried against the threshold.
        let filler = "lorem ipsum dolor sit amet ".repeat(30);
        let importance = ["1", "0.3", "0", "0.7", "0.5"];
        let docs: Vec<Doc> = (0..120)
            .map(|i| {
                let body = match i % 3 {
                    _ if i < 40 => format!("# Weak\n\nalpha beta {filler}\n"),
                    0 => "# Strong\n\nalpha beta alpha beta alpha beta\n".to_owned(),
                    1 => format!("# Apart\n\nalpha {filler} beta\n"),
                    _ => "# Near\n\nbeta alpha beta\n".to_owned(),
                };
                let meta = vec![("tags", "x"), ("importance", importance[i % 5])];
                (leak(format!("/ph/{i:03}.md")), meta, body)
            })
            .collect();
        same_as_oracle(
            &build_in_segments(&docs, docs.len(), 60),
            &["\"alpha beta\"", "\"beta alpha\"", "\"alpha beta\" alpha"],
            &[1, 3, 10, 0],
            |q| q,
        );
    }

    /// Once the kept rows are catalog answers, a section missing the words in its entry
    /// cannot reach them: later segments are walked by their entry lists alone (a word, a
    /// phrase), or by the union of those (several words), not by every heading that holds
    /// the words. Four segments of 100 documents: 20 tagged with both words (two sections
    /// each, 40 sections), 80 with them in a heading and the text.
    #[test]
    fn rows_that_need_an_entry_walk_only_entry_lists_and_change_no_answer() {
        let docs: Vec<Doc> = (0..400)
            .map(|i| {
                let (meta, body) = if i % 5 == 0 {
                    (
                        vec![("title", "Tagged"), ("tags", "hot topic")],
                        "# Plain\n\nwords\n\n# More\n\nwords\n".to_owned(),
                    )
                } else {
                    (
                        vec![("title", "Plain")],
                        format!("# Hot topic\n\nhot topic words {i}\n"),
                    )
                };
                (leak(format!("/en/{i:03}.md")), meta, body)
            })
            .collect();
        let built = build_in_segments(&docs, docs.len(), 100);
        let base = built.2.base().unwrap().clone();
        assert_eq!(base.segments().len(), 4);
        for text in ["hot", "\"hot topic\"", "hot topic"] {
            let before = base.sections_walked();
            let got = same_as_oracle(&built, &[text], &[5], |q| q);
            assert!(
                got[0]
                    .1
                    .iter()
                    .all(|m| m.section.as_ref().unwrap().anchor.is_empty())
            );
            // The first segment, kept rows unknown, is walked by its trail and entry lists
            // (120 sections); each later one by its entry lists (40).
            let walked = base.sections_walked() - before;
            assert!(walked <= 120 + 3 * 40, "{text}: {walked} sections walked");
        }
        // Every row asked for: no kept rows narrow the walk, and the answers still agree.
        same_as_oracle(
            &built,
            &["hot", "\"hot topic\"", "hot topic"],
            &[0, 30],
            |q| q,
        );
    }

    #[test]
    fn a_phrase_is_bounded_by_its_rarest_word_before_its_positions_are_read() {
        // Twenty sections hold the phrase three times in six words; a hundred later ones
        // hold one word six times and the phrase once. Their words' frequencies together
        // could beat the first twenty, but the phrase stands no more often than "beta":
        // once the kept rows are the strong sections, the rest are passed over unread.
        let docs: Vec<Doc> = (0..120)
            .map(|i| {
                let body = if i < 20 {
                    "# Strong\n\nalpha beta alpha beta alpha beta\n"
                } else {
                    "# Skewed\n\nalpha alpha alpha alpha alpha alpha beta\n"
                };
                (leak(format!("/rb/{i:03}.md")), vec![], body.to_owned())
            })
            .collect();
        let built = build_in_segments(&docs, docs.len(), docs.len());
        let base = built.2.base().unwrap().clone();
        assert_eq!(base.segments().len(), 1);
        let before = base.positions_read();
        let got = same_as_oracle(&built, &["\"alpha beta\""], &[1], |q| q);
        assert!(
            got[0].1[0].path.as_str() < "/rb/020",
            "{}",
            got[0].1[0].path
        );
        assert_eq!(base.positions_read() - before, 20);
        // Unbounded, every section is read.
        let before = base.positions_read();
        same_as_oracle(&built, &["\"alpha beta\""], &[0], |q| q);
        assert_eq!(base.positions_read() - before, 120);
    }

    #[test]
    fn phrases_standing_outside_the_text_or_across_a_compound_are_found() {
        // A phrase may stand in a heading trail, a title or a tag rather than in the text,
        // or touch a compound (`path.match`): the stored index meets each as the oracle does.
        let docs: Vec<Doc> = (0..60)
            .map(|i| {
                let (meta, body) = match i % 6 {
                    0 => (
                        vec![("title", "Alpha Beta guide")],
                        "# Intro\n\nbeta alpha then\n".to_owned(),
                    ),
                    1 => (
                        vec![("tags", "alpha beta,other")],
                        "# Intro\n\nnothing here\n".to_owned(),
                    ),
                    2 => (
                        vec![],
                        "# Alpha beta\n\n## Under\n\nbeta alone alpha\n".to_owned(),
                    ),
                    3 => (vec![], "# Text\n\nsee path.match alpha beta\n".to_owned()),
                    4 => (vec![], "# Apart\n\nalpha gamma beta\n".to_owned()),
                    _ => (vec![], "# Text\n\nthe alpha beta runs\n".to_owned()),
                };
                (leak(format!("/out/{i:03}.md")), meta, body)
            })
            .collect();
        same_as_oracle(
            &build_in_segments(&docs, docs.len(), 25),
            &[
                "\"alpha beta\"",
                "\"beta alpha\"",
                "\"path.match alpha\"",
                "\"match alpha beta\"",
                "\"alpha beta guide\"",
                "\"alpha beta\" under",
            ],
            &[1, 5, 0],
            |q| q,
        );
    }

    #[test]
    fn a_folded_delta_answers_as_before() {
        let docs = corpus();
        let store = SectionStore::create(None).unwrap();
        let mut catalog = CatalogIndex::new();
        for doc in &docs {
            let (path, entry, key) = parts(doc);
            catalog.upsert(&path, entry, Timestamp(1));
            store.add(&path, key, &doc.2).unwrap();
        }
        let mut version = IndexVersion::new(Some(store.commit(3).unwrap()));
        let a = DocPath::parse("/docs/a.md").unwrap();
        let (_, _, mut key) = parts(&docs[7]);
        key.body_hash = Hash::of(b"gamma");
        version.upsert(&a, key.clone(), "gamma delta\n");
        version.remove(&DocPath::parse("/a.md").unwrap());
        store.fold(&version).unwrap();
        let folded = IndexVersion::new(Some(store.commit(4).unwrap()));
        assert_eq!(folded.base().unwrap().sequence(), 4);
        assert!(folded.is_current(&a, &key));
        assert!(!folded.holds(&DocPath::parse("/a.md").unwrap()));
        for q in queries()
            .into_iter()
            .chain(["gamma", "beta", "delta"].map(CatalogQuery::new))
        {
            assert_eq!(
                rows(folded.lookup(&q, &catalog).unwrap()),
                rows(version.lookup(&q, &catalog).unwrap()),
                "{q:?}"
            );
        }
        assert_eq!(
            folded.base().unwrap().document_count(),
            docs.len() as u64 - 1
        );
    }
}

#[cfg(test)]
mod copy_tests {
    use super::tests_support::*;
    use super::*;
    use crate::store::{Import, SectionStore};

    #[test]
    fn a_copied_commit_answers_as_its_original() {
        let docs = corpus();
        let (store, catalog) = stored(&docs);
        let original = IndexVersion::new(Some(store.commit(9).unwrap()));
        let export = store.export().unwrap();
        assert!(!export.files.is_empty());
        for dir in [None, Some(tempfile_dir())] {
            let import = Import::new(dir.as_deref()).unwrap();
            // Each file in parts of 7 bytes, last part first, as parallel downloads land.
            for name in &export.files {
                let bytes = store.read(name).unwrap();
                let file = import.file(name, bytes.len() as u64).unwrap();
                let parts: Vec<(usize, &[u8])> = bytes.as_slice().chunks(7).enumerate().collect();
                for (i, part) in parts.into_iter().rev() {
                    file.write_at(7 * i as u64, part).unwrap();
                }
                assert!(file.write_at(bytes.len() as u64, b"x").is_err());
                import.finish(file).unwrap();
            }
            let copy = import.open(&export.meta).unwrap();
            let copied = IndexVersion::new(Some(copy.base().unwrap()));
            assert_eq!(copied.base().unwrap().sequence(), 9);
            for q in queries() {
                assert_eq!(
                    copied.lookup(&q, &catalog).unwrap(),
                    original.lookup(&q, &catalog).unwrap(),
                    "{q:?}"
                );
            }
            if let Some(dir) = dir {
                std::fs::remove_dir_all(dir).unwrap();
            }
        }
        let import = Import::new(None).unwrap();
        assert!(import.file("../escape", 1).is_err());
        assert!(import.file("meta.json", 1).is_err());
        assert!(import.file("huge", u64::MAX).is_err());
        let _ = SectionStore::create(None).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "quire-index-copy-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }
}

#[cfg(test)]
mod random_tests {
    use proptest::prelude::*;

    use super::tests_support::*;
    use crate::CatalogQuery;

    /// Words drawn skewed, so some are common (in most sections, headings and titles) and
    /// some rare: the kept rows then narrow the lists that drive a walk in every way.
    const WORDS: [&str; 6] = ["alp", "bet", "gam", "del", "eps", "zet"];

    fn word() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 4, 5]).prop_map(|i| WORDS[i])
    }

    /// A section's heading words (none: no heading) and text words.
    type Section = (Vec<&'static str>, Vec<&'static str>);

    /// One document: its sections, its title words and its importance (an index).
    fn doc() -> impl Strategy<Value = (Vec<Section>, Vec<&'static str>, usize)> {
        (
            prop::collection::vec(
                (
                    prop::collection::vec(word(), 0..3),
                    prop::collection::vec(word(), 1..9),
                ),
                1..4,
            ),
            prop::collection::vec(word(), 0..3),
            0..3usize,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Worlds of skewed words in three segments: every query of one to three words or a
        /// phrase, at every cap, answers as the memory index does.
        #[test]
        fn random_worlds_answer_as_the_memory_index(
            drawn in prop::collection::vec(doc(), 30..90),
        ) {
            let docs: Vec<Doc> = drawn
                .iter()
                .enumerate()
                .map(|(i, (sections, title, importance))| {
                    let mut body = String::new();
                    for (heading, text) in sections {
                        if !heading.is_empty() {
                            body.push_str(&format!("# {}\n\n", heading.join(" ")));
                        }
                        body.push_str(&format!("{}\n\n", text.join(" ")));
                    }
                    let mut meta = vec![("importance", ["0.2", "0.5", "1"][*importance])];
                    if !title.is_empty() {
                        meta.push(("title", leak(title.join(" "))));
                        meta.push(("tags", title[0]));
                    }
                    (leak(format!("/r/{:03}.md", (i * 37) % 1000)), meta, body)
                })
                .collect();
            let (oracle, catalog, version) =
                build_in_segments(&docs, docs.len(), docs.len() / 3 + 1);
            for text in [
                "alp", "bet", "zet", "alp bet", "bet gam", "alp del", "alp bet gam",
                "bet del eps", "\"alp bet\"", "\"alp alp\"", "\"bet alp\" gam", "al*",
            ] {
                for max in [1, 4, 12, 0] {
                    let q = CatalogQuery::new(text).max(max);
                    prop_assert_eq!(
                        version.lookup(&q, &catalog).unwrap(),
                        oracle.lookup(&q, &catalog),
                        "{:?}", q
                    );
                }
            }
        }
    }
}
