//! `quire-backend`: the backend contract — [`Store`], [`ReadView`], [`ChangeSource`],
//! [`Follower`], close — with its errors and freshness classes, and its implementations.
//!
//! The server sees a world only through this contract: swapping one backend for another
//! changes one constructor. Every backend passes the suites in `quire-conformance`.
//!
//! | module | owns |
//! | --- | --- |
//! | [`contract`] | the traits, the freshness classes, [`SEARCH_FRESHNESS`] |
//! | `error` | [`Error`] and its [`ErrorKind`]s (one per protocol answer) |
//! | `ctx` | [`Ctx`], the request context: cancellation and deadline |
//! | [`types`] | documents, versions, listing options, write and archive requests |
//! | [`changes`] | the change hub WATCH reads |
//! | [`snapshot`] | reads of a pinned snapshot of the log's world model, shared by backends |
//! | [`search`] | body search over snapshots: the section index versions, built lazily, evicted |
//! | [`bucket`] | the bucket store: blob + log + checkpoints + catalog over any blob store |
//! | `compaction` | the bucket store's compactor task: replica, checkpoints, shedding |
//! | `upload_pace` | narrowing the bucket store's checkpoint uploads while its slot creates slow down |
//! | [`file`](mod@file) | the file store: a directory of markdown files with `versions/` beside them |
//!
//! # The world model is the log's
//!
//! Paths ([`DocPath`]), publisher metadata rules, the stored version bytes (whose hash is the
//! ETag, identical on every backend), document and version records, the catalog record and
//! the world state with its topology and listing rules all come from `quire-log`; every
//! backend builds writes with `quire_log::build`, so publish semantics (conflicts, no-ops,
//! retention, append merging, quota) cannot drift between backends.

pub mod bucket;
pub mod changes;
mod compaction;
pub mod contract;
mod ctx;
mod error;
pub mod file;
pub mod search;
pub mod search_shelf;
pub mod snapshot;
pub mod types;
mod upload_pace;

pub use changes::{ChangeEvent, ChangeHub, Resync};
pub use contract::{
    ChangeSource, Follower, Precondition, ReadView, Reader, SEARCH_FRESHNESS, Store,
};
pub use ctx::Ctx;
pub use error::{Error, ErrorKind, Op, Result};
pub use quire_index::{CatalogMatch, CatalogQuery, Filter, MatchMode, SectionHit};
pub use quire_log::build::PreparedWrite;
pub use quire_log::metadata::Metadata;
pub use quire_log::{DocPath, DocSummary, Hash, Timestamp};
pub use search::{BodySearch, IndexShelf, SearchOptions, SearchStatus, Taken};
pub use types::{
    ArchiveRequest, ArchiveResult, CommitCounters, DirEntry, Document, ListOptions, Prune,
    StoreStats, VersionInfo, WriteRequest,
};
