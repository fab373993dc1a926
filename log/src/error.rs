//! The error every log operation returns: which operation, which key (a document path or an
//! object key), which kind, and for conflicts the document as it currently stands.

use std::fmt;

use crate::model::DocSummary;

/// The operation an [`Error`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    Publish,
    Append,
    Archive,
    /// Applying a slot to a world state.
    Apply,
    /// Decoding a stored object (slot, marker, version bytes).
    Decode,
    /// Reading the log: probing the next slot name, listing, replaying.
    Read,
    /// Creating version blobs ahead of a slot.
    Stage,
    /// Creating a slot.
    Commit,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Publish => "publish",
            Op::Append => "append",
            Op::Archive => "archive",
            Op::Apply => "apply",
            Op::Decode => "decode",
            Op::Read => "read",
            Op::Stage => "stage",
            Op::Commit => "commit",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong. Mirrors the backend contract's error classes, so a layer above maps each
/// kind to one answer without looking at messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The path, version or object names nothing (also: a path that is not a canonical
    /// document path, so that invalid paths reveal nothing about the tree).
    NotFound,
    /// The expected version did not hold, or a blind writer raced another writer on the same
    /// path. [`Error::current`] carries the document as it stands.
    Conflict,
    /// The document is archived; unarchive it first.
    Archived,
    /// A document may not lie beneath another document, nor where a directory exists.
    PathCollision,
    /// Publisher metadata breaks the rules (reserved or malformed keys, caps, retention).
    InvalidMetadata,
    /// The body is not valid UTF-8, or an append carries no body.
    InvalidContent,
    /// The body (or an appended body) exceeds the size limit.
    SizeLimit,
    /// Stored state is corrupt or a transition no writer could have committed.
    Integrity,
    /// A new document would exceed the world's document quota.
    Quota,
    /// A write precondition (publish policy) refused the write.
    Rejected,
    /// The committer is closed.
    Closed,
    /// The request was canceled or its deadline passed before it was committed; nothing was
    /// committed for it.
    Canceled,
    /// The request was taken into a batch and its deadline passed before the slot was
    /// decided: it may or may not have been committed.
    OutcomeUnknown,
    /// The object store failed; [`Error::blob_kind`] says how.
    Storage,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Archived => "archived",
            ErrorKind::PathCollision => "path collision",
            ErrorKind::InvalidMetadata => "invalid metadata",
            ErrorKind::InvalidContent => "invalid content",
            ErrorKind::SizeLimit => "size limit exceeded",
            ErrorKind::Integrity => "integrity violation",
            ErrorKind::Quota => "document quota exceeded",
            ErrorKind::Rejected => "rejected",
            ErrorKind::Closed => "closed",
            ErrorKind::Canceled => "canceled",
            ErrorKind::OutcomeUnknown => "outcome unknown",
            ErrorKind::Storage => "storage failure",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed log operation: `log <op> "<key>": <kind>: <detail>`.
#[derive(Debug, thiserror::Error)]
#[error("log {op} {key:?}: {kind}{}", detail_suffix(.detail))]
pub struct Error {
    op: Op,
    key: String,
    kind: ErrorKind,
    detail: String,
    current: Option<Box<DocSummary>>,
    blob_kind: Option<quire_blob::ErrorKind>,
    #[source]
    source: Option<Source>,
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

impl Error {
    /// An error of `kind` for `op` on `key`, with a human-readable detail (may be empty).
    pub fn new(op: Op, key: impl Into<String>, kind: ErrorKind, detail: impl Into<String>) -> Self {
        Error {
            op,
            key: key.into(),
            kind,
            detail: detail.into(),
            current: None,
            blob_kind: None,
            source: None,
        }
    }

    /// A storage failure wrapping the blob error; a blob integrity failure stays integrity.
    pub fn storage(op: Op, err: quire_blob::Error) -> Self {
        let kind = match err.kind() {
            quire_blob::ErrorKind::Integrity => ErrorKind::Integrity,
            _ => ErrorKind::Storage,
        };
        let mut out = Error::new(op, err.key().to_owned(), kind, err.to_string());
        out.blob_kind = Some(err.kind());
        out.source = Some(Box::new(err));
        out
    }

    /// An integrity error: stored state that no correct writer produced.
    pub fn integrity(op: Op, key: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::new(op, key, ErrorKind::Integrity, detail)
    }

    /// Attaches the document as it currently stands (conflicts).
    pub fn with_current(mut self, current: DocSummary) -> Self {
        self.current = Some(Box::new(current));
        self
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    pub fn op(&self) -> Op {
        self.op
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// For conflicts: the document as it stands.
    pub fn current(&self) -> Option<&DocSummary> {
        self.current.as_deref()
    }

    /// Takes the underlying cause (e.g. a layer above's own error carried through a
    /// precondition), consuming the error.
    pub fn into_source(self) -> Option<Box<dyn std::error::Error + Send + Sync + 'static>> {
        self.source
    }

    /// For storage failures: what the object store reported.
    pub fn blob_kind(&self) -> Option<quire_blob::ErrorKind> {
        self.blob_kind
    }

    /// A copy for answering several waiters with one failure (the source is kept as text).
    #[allow(dead_code)]
    pub(crate) fn duplicate(&self) -> Self {
        Error {
            op: self.op,
            key: self.key.clone(),
            kind: self.kind,
            detail: self.detail.clone(),
            current: self.current.clone(),
            blob_kind: self.blob_kind,
            source: None,
        }
    }
}

/// The result of a log operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_operation_key_and_kind() {
        let err = Error::new(Op::Publish, "/a.md", ErrorKind::Archived, "unarchive first");
        assert_eq!(
            err.to_string(),
            "log publish \"/a.md\": archived: unarchive first"
        );
    }

    #[test]
    fn storage_keeps_the_blob_kind() {
        let blob = quire_blob::Error::new(
            quire_blob::Op::Get,
            "log/0000000000000002",
            quire_blob::ErrorKind::Unavailable,
            "down",
        );
        let err = Error::storage(Op::Read, blob);
        assert_eq!(err.kind(), ErrorKind::Storage);
        assert_eq!(err.key(), "log/0000000000000002");
        assert_eq!(err.blob_kind(), Some(quire_blob::ErrorKind::Unavailable));
        let corrupt = quire_blob::Error::new(
            quire_blob::Op::Get,
            "k",
            quire_blob::ErrorKind::Integrity,
            "",
        );
        assert_eq!(
            Error::storage(Op::Read, corrupt).kind(),
            ErrorKind::Integrity
        );
    }
}
