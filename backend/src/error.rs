//! The error every backend operation returns: which operation, which key (a document path, a
//! directory or a hash), which kind, and for conflicts and no-ops the document as it stands.

use quire_log::DocSummary;

quire_failure::names! {
    /// The operation an [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        Open => "open",
        OpenView => "open_view",
        Get => "get",
        ListEntries => "list_entries",
        IsDir => "is_dir",
        Versions => "versions",
        LookupHash => "lookup_hash",
        VerifyChain => "verify_chain",
        Lookup => "lookup",
        Publish => "publish",
        Append => "append",
        Archive => "archive",
    }
}

impl Op {
    /// Whether the operation changes the world.
    pub fn is_write(self) -> bool {
        matches!(self, Op::Publish | Op::Append | Op::Archive)
    }

    fn from_log(op: quire_log::Op) -> Op {
        match op {
            quire_log::Op::Append => Op::Append,
            quire_log::Op::Archive => Op::Archive,
            _ => Op::Publish,
        }
    }
}

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "backend";
}

quire_failure::names! {
    /// What went wrong. Each kind maps to one protocol answer; handlers never read messages.
    #[non_exhaustive]
    pub enum ErrorKind {
        /// The path, version or hash names nothing a reader may see (also: a path that is not a
        /// canonical document path, so that invalid paths reveal nothing). → `not-found`
        NotFound => "not found",
        /// The expected version did not hold, or a blind writer raced another writer on the same
        /// path. [`Error::current`] carries the document as it stands. → `conflict`
        Conflict => "conflict",
        /// The write changes nothing (same body and metadata as the current version); nothing was
        /// stored. [`Error::current`] carries the unchanged document. → `ok`
        NotModified => "not modified",
        /// The document is archived; unarchive it first. → `archived`
        Archived => "archived",
        /// A document may not lie beneath another document, nor where a directory exists; nothing
        /// was stored. → `bad-request`
        PathCollision => "path collision",
        /// Publisher metadata breaks the rules (reserved or malformed keys, caps, retention).
        /// → `bad-request`
        InvalidMetadata => "invalid metadata",
        /// The body is not valid UTF-8, or an append carries no body. → `bad-request`
        InvalidContent => "invalid content",
        /// The body (or an appended body) exceeds the size limit. → `server-error`
        SizeLimit => "size limit exceeded",
        /// Stored state is corrupt: a version's bytes do not match their record, a broken hash
        /// chain, a transition no writer could have made. → `server-error` (VERSIONS reports a
        /// broken chain as `chain-valid: false`)
        Integrity => "integrity violation",
        /// A new document would exceed the world's document quota. → `not-permitted`
        Quota => "document quota exceeded",
        /// A write precondition (publish policy) refused the write; [`Error::rejection_message`]
        /// is the text to show. → `bad-request`
        Rejected => "rejected",
        /// The store was opened read-only. → `not-permitted` ("server is read-only")
        ReadOnly => "read-only",
        /// The store is closed: writes are refused (reads keep working). → `server-error`
        Closed => "store closed",
        /// A read on a view after its close. → `server-error`
        ViewClosed => "view closed",
        /// The caller's context was canceled or its deadline passed first; nothing was stored.
        Canceled => "canceled",
        /// The deadline passed while the write was being committed: it may or may not have
        /// landed. → `server-error`
        OutcomeUnknown => "outcome unknown",
        /// Body match is not available for this snapshot (the section index is not ready): the
        /// handler answers from the catalog instead.
        BodyMatchUnavailable => "body match unavailable",
        /// The underlying storage failed. → `server-error`
        Storage => "storage failure",
    }
}

impl ErrorKind {
    fn from_log(kind: quire_log::ErrorKind) -> ErrorKind {
        use quire_log::ErrorKind as L;
        match kind {
            L::NotFound => ErrorKind::NotFound,
            L::Conflict => ErrorKind::Conflict,
            L::Archived => ErrorKind::Archived,
            L::PathCollision => ErrorKind::PathCollision,
            L::InvalidMetadata => ErrorKind::InvalidMetadata,
            L::InvalidContent => ErrorKind::InvalidContent,
            L::SizeLimit => ErrorKind::SizeLimit,
            L::Integrity => ErrorKind::Integrity,
            L::Quota => ErrorKind::Quota,
            L::Rejected => ErrorKind::Rejected,
            L::Closed => ErrorKind::Closed,
            L::Canceled => ErrorKind::Canceled,
            L::OutcomeUnknown => ErrorKind::OutcomeUnknown,
            _ => ErrorKind::Storage,
        }
    }
}

quire_failure::error_type! {
    /// A failed backend operation: `backend <op> "<key>": <kind>: <detail>`; the extra is the
    /// document as it stands, for conflicts and no-ops.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Error(Op, ErrorKind, Option<Box<DocSummary>>);
}

impl Error {
    /// A precondition's refusal: [`ErrorKind::Rejected`] whose message is shown to the writer.
    pub fn rejected(op: Op, key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::new(op, key, ErrorKind::Rejected, message)
    }

    /// Attaches the document as it currently stands (conflicts, no-ops).
    pub fn with_current(mut self, current: DocSummary) -> Self {
        *self.extra_mut() = Some(Box::new(current));
        self
    }

    /// For conflicts and no-ops: the document as it stands (`None` for a conflict on a path
    /// that holds no document).
    pub fn current(&self) -> Option<&DocSummary> {
        self.extra().as_deref()
    }

    /// For [`ErrorKind::Rejected`]: the message to show the writer.
    pub fn rejection_message(&self) -> Option<&str> {
        (self.kind() == ErrorKind::Rejected).then_some(self.detail())
    }

    /// Whether this is an [`ErrorKind::NotFound`].
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }
}

/// Carries a log error over: its kind, key, detail and current document. A backend error the
/// log carried as the cause (a precondition's refusal) comes back unchanged.
impl From<quire_log::Error> for Error {
    fn from(err: quire_log::Error) -> Self {
        if err.current().is_none()
            && let Some(carried) =
                std::error::Error::source(&err).and_then(|s| s.downcast_ref::<Error>())
        {
            return carried.clone();
        }
        let mut out = Error::new(
            Op::from_log(err.op()),
            err.key().to_owned(),
            ErrorKind::from_log(err.kind()),
            err.detail().to_owned(),
        );
        *out.extra_mut() = err.current().cloned().map(Box::new);
        out.with_source(err)
    }
}

/// The result of a backend operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_operation_key_and_kind() {
        let err = Error::new(Op::Get, "/a.md", ErrorKind::NotFound, "no such document");
        assert_eq!(
            err.to_string(),
            "backend get \"/a.md\": not found: no such document"
        );
        let rejected = Error::rejected(Op::Publish, "/a.md", "policy says no");
        assert_eq!(rejected.rejection_message(), Some("policy says no"));
        assert_eq!(err.rejection_message(), None);
    }

    #[test]
    fn a_carried_backend_error_comes_back_unchanged() {
        let refusal = Error::rejected(Op::Append, "/p.md", "policy says no");
        let carried = quire_log::Error::new(
            quire_log::Op::Append,
            "/p.md",
            quire_log::ErrorKind::Rejected,
            "precondition",
        )
        .with_source(refusal);
        let back = Error::from(carried);
        assert_eq!(back.rejection_message(), Some("policy says no"));
        assert_eq!(
            back.to_string(),
            "backend append \"/p.md\": rejected: policy says no"
        );
    }

    #[test]
    fn log_errors_keep_kind_key_and_current() {
        let log = quire_log::Error::new(
            quire_log::Op::Append,
            "/a.md",
            quire_log::ErrorKind::PathCollision,
            "x",
        );
        let err = Error::from(log);
        assert_eq!(
            (err.op(), err.kind(), err.key()),
            (Op::Append, ErrorKind::PathCollision, "/a.md")
        );
    }
}
