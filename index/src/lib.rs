//! `quire-index`: the catalog (LOOKUP over titles, tags, metadata, filters and scope) and the
//! section index (markdown sections, tokens, BM25, snippets) behind LOOKUP `match: body`.
//!
//! | module | owns |
//! | --- | --- |
//! | [`query`] | what a LOOKUP asks: terms, scope, filters (and their text grammar), the cap |
//! | [`catalog`] | [`CatalogIndex`], the persistent catalog kept current per changed document |
//! | [`section`] | markdown sections: headings, anchors, own text, trails, the line cleaning |
//! | [`tokens`] | the token rule and the terms of a body query (words, `term*`, phrases) |
//! | [`body`] | [`SectionIndex`], the in-memory section index, its match rule and ranking |
//! | [`store`] | [`SectionStore`], the stored section index (tantivy), its commits ([`Base`]) and copies |
//! | [`version`] | [`IndexVersion`]: a committed base plus an in-memory delta, answering as one |
//!
//! The catalog answers from indexes, never from a scan of every document: tag terms from a
//! tag index, title terms from a trigram index over lowercased titles, `*` from an index in
//! rank order. Both indexes are sets of persistent maps (`imbl`), so a clone is O(1) and a
//! read view (or an index version) pins one cheaply while writers keep updating theirs.
//!
//! The section index of a big world lives in tantivy (files in a directory, or memory) behind
//! these types: a version is one tantivy commit plus the documents changed since, both ranked
//! by the rules of [`body`] over shared statistics, so a version per snapshot costs only the
//! documents that changed.
//!
//! Invariants: the section index answers only over documents the catalog of the **same**
//! snapshot admits (live, in scope, passing the filters), so a body answer never mixes
//! states; a base section whose path the delta changed is never a row; neither index reads
//! the bucket — callers hand them bodies and catalog records, and the parts of a copy's late
//! files through a fetch of their own ([`store::PartFetch`]).

pub mod body;
pub mod catalog;
pub mod query;
pub mod section;
pub mod store;
pub mod tokens;
pub mod version;

pub use body::{EntryKey, SectionHit, SectionIndex};
pub use catalog::{Admission, CatalogIndex, CatalogMatch};
pub use query::{
    CatalogQuery, DEFAULT_LIMIT, Filter, MAX_LIMIT, MAX_TERMS, MIN_QUERY_CHARS, MatchMode, Terms,
    parse_time, validate_query_text,
};
pub use store::{
    Base, DeferredFile, Export, Import, ImportFile, PartClaim, PartFetch, SectionStore, StoreError,
    is_deferrable,
};
pub use version::IndexVersion;
