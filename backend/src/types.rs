//! The values that cross the backend contract: documents, versions, listing options, write
//! and archive requests, and the counters a store reports for metrics.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use quire_blob::{HedgeCounts, MeterReading};
use quire_log::metadata::Metadata;
use quire_log::version::StoredVersion;
use quire_log::{DocPath, DocSummary, Hash, Timestamp};

use crate::contract::Precondition;

/// One version of a document as a reader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub path: DocPath,
    /// The body only (the store frontmatter stripped; a body's own frontmatter kept).
    pub content: String,
    /// Publisher metadata in normal form; `None` when there is none (never an empty map).
    pub metadata: Option<Metadata>,
    pub version: u64,
    pub modified: Timestamp,
    /// Whether the document is archived (set only when the current version was asked for).
    pub archived: bool,
    /// The hash of the stored version bytes (frontmatter included): the same on every backend.
    pub etag: Hash,
    /// The hash of the body (`content_hash.content_hash()` is the `content-hash` shown).
    pub content_hash: Hash,
    /// For writes: versions retention removed.
    pub prune: Option<Prune>,
}

impl Document {
    /// The document a decoded stored version shows.
    pub fn from_stored(
        path: DocPath,
        stored: StoredVersion,
        etag: Hash,
        modified: Timestamp,
        archived: bool,
    ) -> Document {
        Document {
            path,
            content_hash: Hash::of(stored.body.as_bytes()),
            content: stored.body,
            metadata: (!stored.metadata.is_empty()).then_some(stored.metadata),
            version: stored.version,
            modified,
            archived,
            etag,
            prune: None,
        }
    }
}

/// Versions `from..=to` removed by retention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prune {
    pub from: u64,
    pub to: u64,
}

/// One retained version in a history listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionInfo {
    pub version: u64,
    pub modified: Timestamp,
    pub etag: Hash,
}

pub use quire_log::state::DirEntry;

/// Which entries of a directory to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Start after this name (exclusive; empty for the start). It need not be an entry.
    pub after: String,
    /// The most entries (0: no limit).
    pub limit: usize,
    /// Also list entries holding only archived documents.
    pub include_archived: bool,
    /// List every child holding a document, hidden names (and archived documents) too: for
    /// backups and verification, never for what readers are shown.
    pub include_hidden: bool,
}

/// A publish or an append.
#[derive(Clone)]
pub struct WriteRequest {
    /// The document path (canonicalised by the store; an invalid path is not found).
    pub path: String,
    /// `None`: write on top of whatever is current (publish only). `Some(0)`: create only.
    /// `Some(n)`: version `n` must be current (appends require it, `n ≥ 1`).
    pub expected_version: Option<u64>,
    /// The body (publish) or the addition (append); must be UTF-8.
    pub content: Bytes,
    /// Publisher metadata (control keys already stripped by the handler).
    pub metadata: Metadata,
    /// Run inside the commit after the store's own checks; see [`Precondition`].
    pub precondition: Option<Arc<dyn Precondition>>,
}

impl WriteRequest {
    pub fn new(path: impl Into<String>, content: impl Into<Bytes>) -> Self {
        WriteRequest {
            path: path.into(),
            expected_version: None,
            content: content.into(),
            metadata: Metadata::new(),
            precondition: None,
        }
    }

    pub fn expected(mut self, version: u64) -> Self {
        self.expected_version = Some(version);
        self
    }

    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// Adds one metadata pair.
    pub fn meta(mut self, key: &str, value: &str) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    pub fn precondition(mut self, precondition: Arc<dyn Precondition>) -> Self {
        self.precondition = Some(precondition);
        self
    }
}

impl fmt::Debug for WriteRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteRequest")
            .field("path", &self.path)
            .field("expected_version", &self.expected_version)
            .field("content_len", &self.content.len())
            .field("metadata", &self.metadata)
            .field("precondition", &self.precondition.is_some())
            .finish()
    }
}

/// An archive or unarchive.
#[derive(Clone)]
pub struct ArchiveRequest {
    pub path: String,
    pub archived: bool,
    /// Run after the not-found and no-op checks; see [`Precondition`].
    pub precondition: Option<Arc<dyn Precondition>>,
}

impl ArchiveRequest {
    pub fn new(path: impl Into<String>, archived: bool) -> Self {
        ArchiveRequest {
            path: path.into(),
            archived,
            precondition: None,
        }
    }

    pub fn precondition(mut self, precondition: Arc<dyn Precondition>) -> Self {
        self.precondition = Some(precondition);
        self
    }
}

impl fmt::Debug for ArchiveRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArchiveRequest")
            .field("path", &self.path)
            .field("archived", &self.archived)
            .field("precondition", &self.precondition.is_some())
            .finish()
    }
}

/// What an archive request did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveResult {
    /// The document after the request (version, ETag and modified never change).
    pub document: DocSummary,
    /// Whether the archived flag changed (false: it already was as asked).
    pub changed: bool,
}

/// What a store reports about its own work, for metrics: counters since it opened. A part the
/// store does not have (a file store commits no slots and makes no blob requests) is `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub commits: Option<CommitCounters>,
    /// Requests, failures and bytes per blob operation.
    pub blobs: Option<MeterReading>,
    /// Hedges sent and won, when the store hedges.
    pub hedges: Option<HedgeCounts>,
}

/// The group committer's work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitCounters {
    /// Slots sealed by the number of writes they carry (a slot rebuilt after a lost race
    /// counts again).
    pub batches_by_size: BTreeMap<usize, u64>,
    /// Slot creates this store won.
    pub slots_won: u64,
    /// Slot races lost to another store.
    pub slots_lost: u64,
    /// Members rebuilt (preconditions run again) after a lost race.
    pub members_rebuilt: u64,
    /// Members kept as built after a lost race.
    pub members_kept: u64,
    /// Pauses after wins while a peer was active (turn-taking).
    pub yields: u64,
    /// Creates held back for a peer that lost a slot to this store (peer hints).
    pub handoffs: u64,
    /// Names left free by a busy store that saw no peer, so a starving one is seen.
    pub listening_pauses: u64,
}
