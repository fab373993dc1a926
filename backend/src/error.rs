//! The error every backend operation returns: which operation, which key (a document path, a
//! directory or a hash), which kind, and for conflicts and no-ops the document as it stands.

use std::fmt;

use quire_log::DocSummary;

/// The operation an [`Error`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    Open,
    OpenView,
    Get,
    ListEntries,
    IsDir,
    Versions,
    LookupHash,
    VerifyChain,
    Lookup,
    Publish,
    Append,
    Archive,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::OpenView => "open_view",
            Op::Get => "get",
            Op::ListEntries => "list_entries",
            Op::IsDir => "is_dir",
            Op::Versions => "versions",
            Op::LookupHash => "lookup_hash",
            Op::VerifyChain => "verify_chain",
            Op::Lookup => "lookup",
            Op::Publish => "publish",
            Op::Append => "append",
            Op::Archive => "archive",
        }
    }

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

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong. Each kind maps to one protocol answer; handlers never read messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The path, version or hash names nothing a reader may see (also: a path that is not a
    /// canonical document path, so that invalid paths reveal nothing). → `not-found`
    NotFound,
    /// The expected version did not hold, or a blind writer raced another writer on the same
    /// path. [`Error::current`] carries the document as it stands. → `conflict`
    Conflict,
    /// The write changes nothing (same body and metadata as the current version); nothing was
    /// stored. [`Error::current`] carries the unchanged document. → `ok`
    NotModified,
    /// The document is archived; unarchive it first. → `archived`
    Archived,
    /// A document may not lie beneath another document, nor where a directory exists; nothing
    /// was stored. → `bad-request`
    PathCollision,
    /// Publisher metadata breaks the rules (reserved or malformed keys, caps, retention).
    /// → `bad-request`
    InvalidMetadata,
    /// The body is not valid UTF-8, or an append carries no body. → `bad-request`
    InvalidContent,
    /// The body (or an appended body) exceeds the size limit. → `server-error`
    SizeLimit,
    /// Stored state is corrupt: a version's bytes do not match their record, a broken hash
    /// chain, a transition no writer could have made. → `server-error` (VERSIONS reports a
    /// broken chain as `chain-valid: false`)
    Integrity,
    /// A new document would exceed the world's document quota. → `not-permitted`
    Quota,
    /// A write precondition (publish policy) refused the write; [`Error::rejection_message`]
    /// is the text to show. → `bad-request`
    Rejected,
    /// The store was opened read-only. → `not-permitted` ("server is read-only")
    ReadOnly,
    /// The store is closed: writes are refused (reads keep working). → `server-error`
    Closed,
    /// A read on a view after its close. → `server-error`
    ViewClosed,
    /// The caller's context was canceled or its deadline passed first; nothing was stored.
    Canceled,
    /// The deadline passed while the write was being committed: it may or may not have
    /// landed. → `server-error`
    OutcomeUnknown,
    /// Body match is not available for this snapshot (the section index is not ready): the
    /// handler answers from the catalog instead.
    BodyMatchUnavailable,
    /// The underlying storage failed. → `server-error`
    Storage,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::NotModified => "not modified",
            ErrorKind::Archived => "archived",
            ErrorKind::PathCollision => "path collision",
            ErrorKind::InvalidMetadata => "invalid metadata",
            ErrorKind::InvalidContent => "invalid content",
            ErrorKind::SizeLimit => "size limit exceeded",
            ErrorKind::Integrity => "integrity violation",
            ErrorKind::Quota => "document quota exceeded",
            ErrorKind::Rejected => "rejected",
            ErrorKind::ReadOnly => "read-only",
            ErrorKind::Closed => "store closed",
            ErrorKind::ViewClosed => "view closed",
            ErrorKind::Canceled => "canceled",
            ErrorKind::OutcomeUnknown => "outcome unknown",
            ErrorKind::BodyMatchUnavailable => "body match unavailable",
            ErrorKind::Storage => "storage failure",
        }
    }

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

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed backend operation: `backend <op> "<key>": <kind>: <detail>`.
#[derive(Debug, thiserror::Error)]
#[error("backend {op} {key:?}: {kind}{}", detail_suffix(.detail))]
pub struct Error {
    op: Op,
    key: String,
    kind: ErrorKind,
    detail: String,
    current: Option<Box<DocSummary>>,
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
            source: None,
        }
    }

    /// A precondition's refusal: [`ErrorKind::Rejected`] whose message is shown to the writer.
    pub fn rejected(op: Op, key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::new(op, key, ErrorKind::Rejected, message)
    }

    /// Attaches the document as it currently stands (conflicts, no-ops).
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

    /// For conflicts and no-ops: the document as it stands (`None` for a conflict on a path
    /// that holds no document).
    pub fn current(&self) -> Option<&DocSummary> {
        self.current.as_deref()
    }

    /// For [`ErrorKind::Rejected`]: the message to show the writer.
    pub fn rejection_message(&self) -> Option<&str> {
        (self.kind == ErrorKind::Rejected).then_some(self.detail.as_str())
    }

    /// Whether this is an [`ErrorKind::NotFound`].
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }
}

impl From<quire_log::Error> for Error {
    /// Carries a log error over: its kind, key, detail and current document. A backend error
    /// the log carried as the cause (a precondition's refusal) comes back unchanged.
    fn from(err: quire_log::Error) -> Self {
        if err.current().is_none()
            && std::error::Error::source(&err).is_some_and(|s| s.is::<Error>())
        {
            let carried = err
                .into_source()
                .and_then(|s| s.downcast::<Error>().ok())
                .expect("the source was checked to be a backend error");
            return *carried;
        }
        let mut out = Error::new(
            Op::from_log(err.op()),
            err.key().to_owned(),
            ErrorKind::from_log(err.kind()),
            err.detail().to_owned(),
        );
        out.current = err.current().cloned().map(Box::new);
        out.source = Some(Box::new(err));
        out
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
