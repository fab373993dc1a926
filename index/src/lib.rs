//! `quire-index`: the catalog (LOOKUP over titles, tags, metadata, filters and scope) and the
//! section index (markdown sections, tokens, BM25, snippets) behind LOOKUP `match: body`.
//!
//! | module | owns |
//! | --- | --- |
//! | [`query`] | what a LOOKUP asks: terms, scope, filters (and their text grammar), the cap |
//! | [`catalog`] | [`CatalogIndex`], the persistent catalog kept current per changed document |
//! | [`section`] | markdown sections: headings, anchors, own text, trails, the line cleaning |
//! | [`tokens`] | the token rule and the terms of a body query (words, `term*`, phrases) |
//! | [`body`] | [`SectionIndex`], the persistent section index, its match rule and ranking |
//!
//! The catalog answers from indexes, never from a scan of every document: tag terms from a
//! tag index, title terms from a trigram index over lowercased titles, `*` from an index in
//! rank order. Both indexes are sets of persistent maps (`imbl`), so a clone is O(1) and a
//! read view (or an index version) pins one cheaply while writers keep updating theirs.
//!
//! Invariants: the section index answers only over documents the catalog of the **same**
//! snapshot admits (live, in scope, passing the filters), so a body answer never mixes
//! states; neither index reads storage — callers hand them bodies and catalog records.

pub mod body;
pub mod catalog;
pub mod query;
pub mod section;
pub mod tokens;

pub use body::{EntryKey, SectionHit, SectionIndex};
pub use catalog::{CatalogIndex, CatalogMatch};
pub use query::{
    CatalogQuery, DEFAULT_LIMIT, Filter, MAX_LIMIT, MAX_TERMS, MIN_QUERY_CHARS, MatchMode, Terms,
    parse_time, validate_query_text,
};
