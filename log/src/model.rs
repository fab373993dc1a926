//! The world model: what the log knows about each document and each of its versions.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ids::{Hash, Timestamp};
use crate::metadata::Catalog;
use crate::path::DocPath;

/// Where a version's stored bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Location {
    /// Inside the slot whose first sequence is `slot`, at byte `offset` of the slot object
    /// (the version's `size` bytes from there): read with a range get.
    Inline { slot: u64, offset: u64 },
    /// A content-addressed blob, `blobs/<hash>` under the world prefix.
    Blob,
}

/// One version of a document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionRecord {
    pub version: u64,
    /// The hash of the stored bytes: the version's ETag.
    pub hash: Hash,
    /// The hash of the body alone (the content hash).
    pub body_hash: Hash,
    pub modified: Timestamp,
    /// The stored bytes' length.
    pub size: u64,
    pub location: Location,
}

/// A reference to a checkpoint's history block: versions `first..=last` of one document,
/// stored under the block's hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryBlockRef {
    pub first: u64,
    pub last: u64,
    pub hash: Hash,
}

/// A document's state in one world snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocState {
    pub path: DocPath,
    /// The newest version.
    pub current: u64,
    /// The oldest retained version (retention moves it forward, never back).
    pub first: u64,
    pub archived: bool,
    pub body_hash: Hash,
    pub modified: Timestamp,
    pub catalog: Arc<Catalog>,
    /// The record of version `current`.
    pub head: VersionRecord,
    /// History folded into the checkpoint this snapshot started from (empty for documents
    /// created since).
    pub history: Arc<[HistoryBlockRef]>,
    /// Versions committed since that checkpoint, oldest first, none below `first`.
    pub recent: imbl::Vector<VersionRecord>,
}

impl DocState {
    /// What a writer is told about the document.
    pub fn summary(&self) -> DocSummary {
        DocSummary {
            path: self.path.clone(),
            version: self.current,
            first: self.first,
            archived: self.archived,
            etag: self.head.hash,
            body_hash: self.body_hash,
            modified: self.modified,
        }
    }

    /// The record of `version` if this snapshot holds it without reading history blocks.
    pub fn recent_version(&self, version: u64) -> Option<&VersionRecord> {
        if version == self.current {
            return Some(&self.head);
        }
        self.recent.iter().find(|r| r.version == version)
    }
}

/// A document as a write's answer (or a conflict) reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocSummary {
    pub path: DocPath,
    pub version: u64,
    /// The oldest retained version.
    pub first: u64,
    pub archived: bool,
    /// The hash of the current version's stored bytes.
    pub etag: Hash,
    pub body_hash: Hash,
    pub modified: Timestamp,
}
