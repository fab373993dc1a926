//! `quire-index`: the catalog (LOOKUP over titles, tags, metadata, filters and scope) and,
//! later, the section index (markdown sections, tokens, BM25, snippets).
//!
//! | module | owns |
//! | --- | --- |
//! | [`query`] | what a LOOKUP asks: terms, scope, filters (and their text grammar), the cap |
//! | [`catalog`] | [`CatalogIndex`], the persistent catalog kept current per changed document |
//!
//! The catalog answers from indexes, never from a scan of every document: tag terms from a
//! tag index, title terms from a trigram index over lowercased titles, `*` from an index in
//! rank order. The index is a set of persistent maps (`imbl`), so a clone is O(1) and a read
//! view pins one cheaply while writers keep updating theirs.
//!
//! Body match (`match: body`, the section index) is not built yet; stores answer such a
//! request with their "body match unavailable" error and the handler falls back to the
//! catalog.

pub mod catalog;
pub mod query;

pub use catalog::{CatalogIndex, CatalogMatch};
pub use query::{
    CatalogQuery, DEFAULT_LIMIT, Filter, MAX_LIMIT, MAX_TERMS, MIN_QUERY_CHARS, MatchMode, Terms,
    parse_time, validate_query_text,
};
