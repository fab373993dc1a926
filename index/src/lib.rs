//! `quire-index`: the catalog (LOOKUP over titles, tags, metadata, filters and scope) and the
//! section index (markdown sections, tokens, BM25, snippets).
//!
//! Not built yet: this crate holds only its charter until the catalog work lands.
