//! The world model: what the log knows about each document and each of its versions.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ids::{Hash, Timestamp};
use crate::metadata::DocCatalog;
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
    pub catalog: DocCatalog,
    /// The record of version `current`.
    pub head: VersionRecord,
    /// History folded into the checkpoint this snapshot started from (empty for documents
    /// created since).
    pub history: Arc<[HistoryBlockRef]>,
    /// Versions committed since that checkpoint, oldest first, none below `first`.
    pub recent: RecentVersions,
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

/// Up to this many recent versions live in one shared slice: a push copies at most this
/// many records, and a document written once since its checkpoint costs one small
/// allocation (a persistent vector's first chunk holds 64 records, about 7 KB).
const SHORT_RECENT: usize = 32;

/// A document's versions committed since its checkpoint, oldest first. Cheap to clone;
/// short lists are one shared slice, long ones a persistent vector so pushes stay cheap.
#[derive(Clone, Debug, Default)]
pub struct RecentVersions(Recent);

#[derive(Clone, Debug, Default)]
enum Recent {
    #[default]
    Empty,
    Short(Arc<[VersionRecord]>),
    Long(Arc<imbl::Vector<VersionRecord>>),
}

impl RecentVersions {
    pub fn len(&self) -> usize {
        match &self.0 {
            Recent::Empty => 0,
            Recent::Short(s) => s.len(),
            Recent::Long(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The oldest record.
    pub fn front(&self) -> Option<&VersionRecord> {
        self.get(0)
    }

    /// The newest record.
    pub fn back(&self) -> Option<&VersionRecord> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    pub fn get(&self, index: usize) -> Option<&VersionRecord> {
        match &self.0 {
            Recent::Empty => None,
            Recent::Short(s) => s.get(index),
            Recent::Long(v) => v.get(index),
        }
    }

    pub fn iter(&self) -> RecentIter<'_> {
        match &self.0 {
            Recent::Empty => RecentIter::Slice([].iter()),
            Recent::Short(s) => RecentIter::Slice(s.iter()),
            Recent::Long(v) => RecentIter::Vector(v.iter()),
        }
    }

    /// Appends the newest record.
    pub fn push_back(&mut self, record: VersionRecord) {
        match &mut self.0 {
            Recent::Empty => self.0 = Recent::Short(Arc::from([record])),
            Recent::Short(s) if s.len() < SHORT_RECENT => {
                let mut grown = Vec::with_capacity(s.len() + 1);
                grown.extend_from_slice(s);
                grown.push(record);
                *s = Arc::from(grown);
            }
            Recent::Short(s) => {
                let mut v: imbl::Vector<VersionRecord> = s.iter().cloned().collect();
                v.push_back(record);
                self.0 = Recent::Long(Arc::new(v));
            }
            Recent::Long(v) => Arc::make_mut(v).push_back(record),
        }
    }

    /// Sets where version `version`'s bytes live; `false` when no record holds it.
    pub fn locate(&mut self, version: u64, location: Location) -> bool {
        let Some(index) = self.iter().position(|r| r.version == version) else {
            return false;
        };
        match &mut self.0 {
            Recent::Empty => return false,
            Recent::Short(s) => Arc::make_mut(s)[index].location = location,
            Recent::Long(v) => {
                if let Some(record) = Arc::make_mut(v).get_mut(index) {
                    record.location = location;
                }
            }
        }
        true
    }

    /// Removes and returns the oldest record.
    pub fn pop_front(&mut self) -> Option<VersionRecord> {
        let front = self.front()?.clone();
        let rest: Vec<VersionRecord> = match &mut self.0 {
            Recent::Long(v) if v.len() > SHORT_RECENT + 1 => {
                Arc::make_mut(v).pop_front();
                return Some(front);
            }
            _ => self.iter().skip(1).cloned().collect(),
        };
        *self = rest.into_iter().collect();
        Some(front)
    }
}

/// An iterator over [`RecentVersions`], oldest first.
pub enum RecentIter<'a> {
    Slice(std::slice::Iter<'a, VersionRecord>),
    Vector(imbl::vector::Iter<'a, VersionRecord, imbl::shared_ptr::DefaultSharedPtr>),
}

impl std::fmt::Debug for RecentIter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentIter")
            .field("left", &self.size_hint().0)
            .finish()
    }
}

impl<'a> Iterator for RecentIter<'a> {
    type Item = &'a VersionRecord;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RecentIter::Slice(i) => i.next(),
            RecentIter::Vector(i) => i.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            RecentIter::Slice(i) => i.size_hint(),
            RecentIter::Vector(i) => i.size_hint(),
        }
    }
}

impl<'a> IntoIterator for &'a RecentVersions {
    type Item = &'a VersionRecord;
    type IntoIter = RecentIter<'a>;

    fn into_iter(self) -> RecentIter<'a> {
        self.iter()
    }
}

impl FromIterator<VersionRecord> for RecentVersions {
    fn from_iter<I: IntoIterator<Item = VersionRecord>>(records: I) -> Self {
        let records: Vec<VersionRecord> = records.into_iter().collect();
        RecentVersions(match records.len() {
            0 => Recent::Empty,
            n if n <= SHORT_RECENT => Recent::Short(Arc::from(records)),
            _ => Recent::Long(Arc::new(records.into_iter().collect())),
        })
    }
}

impl PartialEq for RecentVersions {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for RecentVersions {}

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
