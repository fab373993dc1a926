//! Building one write against a world state: every precondition the store itself judges
//! (path, content, metadata, quota, expected version, archive state, topology, no-op) and the
//! entry and version bytes the write commits. Pure and synchronous; the committer supplies
//! the base version's bytes for appends and runs publish-policy preconditions afterwards.

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Op, Result};
use crate::ids::{Hash, OperationId, Timestamp};
use crate::metadata::{self, Catalog, Metadata};
use crate::model::{DocSummary, Location, VersionRecord};
use crate::path::DocPath;
use crate::slot::{Entry, EntryOp, EntryWrite};
use crate::state::WorldState;
use crate::version::StoredVersion;

/// The largest body a version may hold: 1 MiB.
pub const MAX_BODY: usize = 1 << 20;

/// A change a writer asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Writes a new version with this body and metadata. `expected`: `None` writes on top of
    /// whatever is current ("blind"), `Some(0)` only creates, `Some(n)` needs version `n`.
    Publish {
        path: String,
        expected: Option<u64>,
        body: Bytes,
        metadata: Metadata,
    },
    /// Appends to the body of version `expected` (which must be current), merging metadata.
    Append {
        path: String,
        expected: u64,
        body: Bytes,
        metadata: Metadata,
    },
    /// Archives or unarchives; never writes a version.
    SetArchived { path: String, archived: bool },
}

impl Mutation {
    pub fn op(&self) -> Op {
        match self {
            Mutation::Publish { .. } => Op::Publish,
            Mutation::Append { .. } => Op::Append,
            Mutation::SetArchived { .. } => Op::Archive,
        }
    }

    pub fn raw_path(&self) -> &str {
        match self {
            Mutation::Publish { path, .. }
            | Mutation::Append { path, .. }
            | Mutation::SetArchived { path, .. } => path,
        }
    }

    /// The canonical path, or not-found for a path that is not a document path.
    pub fn path(&self) -> Result<DocPath> {
        DocPath::parse(self.raw_path()).map_err(|why| {
            Error::new(
                self.op(),
                self.raw_path(),
                ErrorKind::NotFound,
                why.to_string(),
            )
        })
    }
}

/// What a precondition is shown: the write as it would be stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedWrite {
    pub path: DocPath,
    /// For writes: the final body (joined for appends) and the metadata as stored.
    pub content: Option<(String, Metadata)>,
    /// For archive changes: the requested state.
    pub archived: Option<bool>,
}

/// Limits the store applies while building.
#[derive(Clone, Copy, Debug)]
pub struct BuildLimits {
    /// The most distinct documents (0: unlimited). A new path beyond it is refused.
    pub max_documents: u64,
}

/// The outcome of building one mutation.
#[derive(Clone, Debug)]
pub enum Built {
    /// A change to commit.
    Change(Box<Change>),
    /// Nothing to commit: the document already is as asked.
    Unchanged(DocSummary),
}

/// A change ready to commit.
#[derive(Clone, Debug)]
pub struct Change {
    /// The entry, with `write.inline` unset (the committer decides inline or blob).
    pub entry: Entry,
    /// The stored version bytes, for writes.
    pub version_bytes: Option<Bytes>,
    /// Versions removed by retention (`from..=to`).
    pub prune: Option<(u64, u64)>,
    pub prepared: PreparedWrite,
}

impl Change {
    /// A version record for chaining changes before their slot exists: its location is
    /// settled when the slot is sealed ([`WorldState::settle`]).
    pub(crate) fn provisional_record(&self) -> VersionRecord {
        let write = self.entry.write.as_ref();
        VersionRecord {
            version: self.entry.current,
            hash: write.map_or(Hash([0; 32]), |w| w.hash),
            body_hash: self.entry.body_hash,
            modified: self.entry.modified,
            size: write.map_or(0, |w| w.size),
            location: Location::Blob,
        }
    }
}

fn err(op: Op, path: &DocPath, kind: ErrorKind, detail: impl Into<String>) -> Error {
    Error::new(op, path.as_str(), kind, detail)
}

fn conflict(op: Op, path: &DocPath, detail: String, current: Option<DocSummary>) -> Error {
    let e = err(op, path, ErrorKind::Conflict, detail);
    match current {
        Some(c) => e.with_current(c),
        None => e,
    }
}

/// Builds `mutation` on `state`.
///
/// `blind_seen` makes blind publishes safe across rebuilds: the first build records the hash
/// of the version it wrote on top of (`Some(None)`: no document), and a later build that finds
/// another version there refuses with a conflict, so two blind writers racing on one path
/// never both silently succeed. `base` is the current version's stored bytes, needed by
/// appends only.
pub fn build(
    state: &WorldState,
    mutation: &Mutation,
    operation: OperationId,
    now: Timestamp,
    limits: BuildLimits,
    blind_seen: &mut Option<Option<Hash>>,
    base: Option<&StoredVersion>,
) -> Result<Built> {
    let op = mutation.op();
    let path = mutation.path()?;
    let doc = state.doc(&path);
    let (body, meta, expected) = match mutation {
        Mutation::SetArchived { archived, .. } => {
            let Some(doc) = doc else {
                return Err(err(op, &path, ErrorKind::NotFound, "no such document"));
            };
            if doc.archived == *archived {
                return Ok(Built::Unchanged(doc.summary()));
            }
            let entry = Entry {
                operation,
                op: if *archived {
                    EntryOp::Archive
                } else {
                    EntryOp::Publish
                },
                agent: doc
                    .catalog
                    .get("agent")
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned),
                path: path.clone(),
                current: doc.current,
                first: doc.first,
                archived: *archived,
                body_hash: doc.body_hash,
                modified: doc.modified,
                write: None,
            };
            return Ok(Built::Change(Box::new(Change {
                entry,
                version_bytes: None,
                prune: None,
                prepared: PreparedWrite {
                    path,
                    content: None,
                    archived: Some(*archived),
                },
            })));
        }
        Mutation::Publish {
            body,
            metadata,
            expected,
            ..
        } => {
            let body = checked_body(op, &path, body)?;
            let meta = metadata::normalize(metadata)
                .map_err(|why| err(op, &path, ErrorKind::InvalidMetadata, why))?;
            (body, meta, *expected)
        }
        Mutation::Append {
            body,
            metadata,
            expected,
            ..
        } => {
            if *expected == 0 {
                return Err(err(
                    op,
                    &path,
                    ErrorKind::InvalidContent,
                    "append needs an expected version of at least 1",
                ));
            }
            let addition = checked_body(op, &path, body)?;
            if addition.is_empty() {
                return Err(err(
                    op,
                    &path,
                    ErrorKind::InvalidContent,
                    "append requires a body",
                ));
            }
            let Some(doc) = doc else {
                return Err(err(op, &path, ErrorKind::NotFound, "no such document"));
            };
            if doc.archived {
                return Err(err(
                    op,
                    &path,
                    ErrorKind::Archived,
                    "document is archived; unarchive first",
                ));
            }
            if *expected != doc.current {
                return Err(conflict(
                    op,
                    &path,
                    format!("expected version {expected}, current is {}", doc.current),
                    Some(doc.summary()),
                ));
            }
            let base = base.ok_or_else(|| {
                err(
                    op,
                    &path,
                    ErrorKind::Integrity,
                    "base version bytes unavailable",
                )
            })?;
            if base.version != doc.current || Hash::of(&base.encode()) != doc.head.hash {
                return Err(err(
                    op,
                    &path,
                    ErrorKind::Integrity,
                    "base version bytes do not match the document",
                ));
            }
            let mut joined = base.body.clone();
            if !joined.is_empty() && !joined.ends_with('\n') {
                joined.push('\n');
            }
            joined.push_str(&addition);
            if joined.len() > MAX_BODY {
                return Err(err(
                    op,
                    &path,
                    ErrorKind::SizeLimit,
                    format!("appended body exceeds {MAX_BODY} bytes"),
                ));
            }
            let request = metadata::normalize(metadata)
                .map_err(|why| err(op, &path, ErrorKind::InvalidMetadata, why))?;
            let merged = metadata::merge_for_append(&base.metadata, &request);
            let meta = metadata::normalize(&merged)
                .map_err(|why| err(op, &path, ErrorKind::InvalidMetadata, why))?;
            (joined, meta, Some(*expected))
        }
    };
    let body_hash = Hash::of(body.as_bytes());
    let (version, previous, old_first) = match doc {
        None => {
            if let Some(e) = expected
                && e != 0
            {
                return Err(conflict(
                    op,
                    &path,
                    format!("expected version {e}, but no document exists"),
                    None,
                ));
            }
            if expected.is_none() && matches!(blind_seen, Some(Some(_))) {
                return Err(conflict(
                    op,
                    &path,
                    "the document this blind write saw is gone".into(),
                    None,
                ));
            }
            if limits.max_documents != 0 && state.doc_count() >= limits.max_documents {
                return Err(err(
                    op,
                    &path,
                    ErrorKind::Quota,
                    format!(
                        "the world holds its limit of {} documents",
                        limits.max_documents
                    ),
                ));
            }
            state
                .topology_allows(&path)
                .map_err(|why| err(op, &path, ErrorKind::PathCollision, why))?;
            if expected.is_none() {
                *blind_seen = Some(None);
            }
            (1, None, 1)
        }
        Some(doc) => {
            match expected {
                Some(0) => {
                    return Err(conflict(
                        op,
                        &path,
                        format!(
                            "a document already exists at this path (version {})",
                            doc.current
                        ),
                        Some(doc.summary()),
                    ));
                }
                Some(e) if e != doc.current => {
                    return Err(conflict(
                        op,
                        &path,
                        format!("expected version {e}, current is {}", doc.current),
                        Some(doc.summary()),
                    ));
                }
                None => match blind_seen {
                    Some(seen) if *seen != Some(doc.head.hash) => {
                        return Err(conflict(
                            op,
                            &path,
                            format!("another write landed first (now version {})", doc.current),
                            Some(doc.summary()),
                        ));
                    }
                    _ => *blind_seen = Some(Some(doc.head.hash)),
                },
                Some(_) => {}
            }
            if doc.archived {
                return Err(err(
                    op,
                    &path,
                    ErrorKind::Archived,
                    "document is archived; unarchive first",
                ));
            }
            if doc.body_hash == body_hash && doc.catalog.metadata_is(&meta) {
                return Ok(Built::Unchanged(doc.summary()));
            }
            let next = doc
                .current
                .checked_add(1)
                .ok_or_else(|| err(op, &path, ErrorKind::SizeLimit, "version numbers exhausted"))?;
            (next, Some(doc.head.hash), doc.first)
        }
    };
    let (first, prune) = match meta
        .get("retention")
        .and_then(|r| metadata::parse_retention(r))
    {
        Some(keep) if version > u64::from(keep) => {
            let first = (version - u64::from(keep) + 1).max(old_first);
            let prune = (first > old_first).then_some((old_first, first - 1));
            (first, prune)
        }
        _ => (old_first, None),
    };
    let stored = StoredVersion {
        version,
        previous,
        metadata: meta.clone(),
        body,
    };
    let bytes = stored.encode();
    let catalog = Catalog::derive(&path, &meta, &stored.body);
    let entry = Entry {
        operation,
        op: match mutation {
            Mutation::Append { .. } => EntryOp::Append,
            _ => EntryOp::Publish,
        },
        agent: meta.get("agent").cloned().filter(|a| !a.is_empty()),
        path: path.clone(),
        current: version,
        first,
        archived: false,
        body_hash,
        modified: now,
        write: Some(EntryWrite {
            catalog,
            hash: Hash::of(&bytes),
            previous,
            size: bytes.len() as u64,
            inline: None,
        }),
    };
    Ok(Built::Change(Box::new(Change {
        entry,
        version_bytes: Some(bytes),
        prune,
        prepared: PreparedWrite {
            path,
            content: Some((stored.body, meta)),
            archived: None,
        },
    })))
}

fn checked_body(op: Op, path: &DocPath, body: &Bytes) -> Result<String> {
    if body.len() > MAX_BODY {
        return Err(err(
            op,
            path,
            ErrorKind::SizeLimit,
            format!("body exceeds {MAX_BODY} bytes"),
        ));
    }
    String::from_utf8(body.to_vec()).map_err(|_| {
        err(
            op,
            path,
            ErrorKind::InvalidContent,
            "body is not valid UTF-8",
        )
    })
}
