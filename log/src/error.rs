//! The error every log operation returns: which operation, which key (a document path or an
//! object key), which kind, and for conflicts the document as it currently stands.

use crate::model::DocSummary;

quire_failure::names! {
    /// The operation an [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        Publish => "publish",
        Append => "append",
        Archive => "archive",
        /// Applying a slot to a world state.
        Apply => "apply",
        /// Decoding a stored object (slot, marker, version bytes).
        Decode => "decode",
        /// Reading the log: probing the next slot name, listing, replaying.
        Read => "read",
        /// Creating version blobs ahead of a slot.
        Stage => "stage",
        /// Creating a slot.
        Commit => "commit",
    }
}

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "log";
}

quire_failure::names! {
    /// What went wrong. Mirrors the backend contract's error classes, so a layer above maps
    /// each kind to one answer without looking at messages.
    #[non_exhaustive]
    pub enum ErrorKind {
        /// The path, version or object names nothing (also: a path that is not a canonical
        /// document path, so that invalid paths reveal nothing about the tree).
        NotFound => "not found",
        /// The expected version did not hold, or a blind writer raced another writer on the
        /// same path. [`Error::current`] carries the document as it stands.
        Conflict => "conflict",
        /// The document is archived; unarchive it first.
        Archived => "archived",
        /// A document may not lie beneath another document, nor where a directory exists.
        PathCollision => "path collision",
        /// Publisher metadata breaks the rules (reserved or malformed keys, caps, retention).
        InvalidMetadata => "invalid metadata",
        /// The body is not valid UTF-8, or an append carries no body.
        InvalidContent => "invalid content",
        /// The body (or an appended body) exceeds the size limit.
        SizeLimit => "size limit exceeded",
        /// Stored state is corrupt or a transition no writer could have committed.
        Integrity => "integrity violation",
        /// A new document would exceed the world's document quota.
        Quota => "document quota exceeded",
        /// A write precondition (publish policy) refused the write.
        Rejected => "rejected",
        /// The committer is closed.
        Closed => "closed",
        /// The request was canceled or its deadline passed before it was committed; nothing
        /// was committed for it.
        Canceled => "canceled",
        /// The request was taken into a batch and its deadline passed before the slot was
        /// decided: it may or may not have been committed.
        OutcomeUnknown => "outcome unknown",
        /// The object store failed; [`Error::blob_kind`] says how.
        Storage => "storage failure",
    }
}

/// What a log error carries beyond the shape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Carried {
    /// For conflicts: the document as it stands.
    current: Option<Box<DocSummary>>,
    /// For storage failures: what the object store reported.
    blob_kind: Option<quire_blob::ErrorKind>,
}

quire_failure::error_type! {
    /// A failed log operation: `log <op> "<key>": <kind>: <detail>`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Error(Op, ErrorKind, Carried);
}

impl Error {
    /// A storage failure wrapping the blob error; a blob integrity failure stays integrity.
    pub fn storage(op: Op, err: quire_blob::Error) -> Self {
        let kind = match err.kind() {
            quire_blob::ErrorKind::Integrity => ErrorKind::Integrity,
            _ => ErrorKind::Storage,
        };
        let mut out = Error::new(op, err.key().to_owned(), kind, err.to_string());
        out.extra_mut().blob_kind = Some(err.kind());
        out.with_source(err)
    }

    /// An integrity error: stored state that no correct writer produced.
    pub fn integrity(op: Op, key: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::new(op, key, ErrorKind::Integrity, detail)
    }

    /// Attaches the document as it currently stands (conflicts).
    pub fn with_current(mut self, current: DocSummary) -> Self {
        self.extra_mut().current = Some(Box::new(current));
        self
    }

    /// For conflicts: the document as it stands.
    pub fn current(&self) -> Option<&DocSummary> {
        self.extra().current.as_deref()
    }

    /// For storage failures: what the object store reported.
    pub fn blob_kind(&self) -> Option<quire_blob::ErrorKind> {
        self.extra().blob_kind
    }

    /// A copy for answering several waiters with one failure (the cause is shared).
    pub(crate) fn duplicate(&self) -> Self {
        self.clone()
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
