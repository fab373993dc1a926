//! The error every blob operation returns: which operation, which key, which kind.

use std::fmt;

/// The operation an [`Error`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    Create,
    Get,
    GetRange,
    Head,
    Replace,
    Delete,
    List,
}

impl Op {
    /// The operation's name, as errors and metrics spell it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Get => "get",
            Op::GetRange => "get_range",
            Op::Head => "head",
            Op::Replace => "replace",
            Op::Delete => "delete",
            Op::List => "list",
        }
    }

    /// Whether the operation changes stored state.
    pub fn is_mutation(self) -> bool {
        matches!(self, Op::Create | Op::Replace | Op::Delete)
    }

    /// Every operation, in a fixed order (for tables and metrics).
    pub const ALL: [Op; 7] = [
        Op::Create,
        Op::Get,
        Op::GetRange,
        Op::Head,
        Op::Replace,
        Op::Delete,
        Op::List,
    ];
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong, and so what the caller may conclude.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The key does not exist (reads only; a conditional mutation of a missing key is a
    /// precondition failure). Nothing changed.
    NotFound,
    /// The condition did not hold (key exists on create, generation differs or key missing on
    /// replace/delete) or the input was invalid. Nothing changed; retrying the same call fails
    /// the same way.
    Precondition,
    /// The store asked us to slow down. Nothing changed for reads; a throttled mutation was
    /// refused before it applied. Retry after a pause.
    Throttled,
    /// The store could not be reached or failed. For reads nothing changed; a mutation that may
    /// have applied is reported as [`ErrorKind::Ambiguous`] instead.
    Unavailable,
    /// The store returned something that cannot be right (bad checksum, inconsistent
    /// attributes, a listing out of order). Not retryable.
    Integrity,
    /// A mutation's outcome is unknown: it may or may not have applied. Decide by reading the
    /// key back; never treat it as a win or a loss.
    Ambiguous,
    /// The call was canceled before it reached the store; nothing changed.
    Canceled,
}

impl ErrorKind {
    /// Whether repeating the call may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Throttled | ErrorKind::Unavailable | ErrorKind::Ambiguous
        )
    }

    fn describe(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Precondition => "precondition failed",
            ErrorKind::Throttled => "throttled",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Integrity => "integrity violation",
            ErrorKind::Ambiguous => "outcome unknown (ambiguous)",
            ErrorKind::Canceled => "canceled",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed blob operation: `blob <op> "<key>": <kind>: <detail>`.
#[derive(Debug, thiserror::Error)]
#[error("blob {op} {key:?}: {kind}{}", detail_suffix(.detail))]
pub struct Error {
    op: Op,
    key: String,
    kind: ErrorKind,
    detail: String,
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
            source: None,
        }
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    pub fn op(&self) -> Op {
        self.op
    }

    /// The key, or the prefix for `list`.
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn detail(&self) -> &str {
        &self.detail
    }

    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    pub fn is_precondition(&self) -> bool {
        self.kind == ErrorKind::Precondition
    }

    pub fn is_ambiguous(&self) -> bool {
        self.kind == ErrorKind::Ambiguous
    }

    /// The same failure reported with another kind (for wrappers that learn more, such as a
    /// mutation whose failure happened after it was sent, which becomes ambiguous).
    pub fn into_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }
}

/// The result of a blob operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_operation_key_and_kind() {
        let err = Error::new(
            Op::Create,
            "log/0001",
            ErrorKind::Precondition,
            "key exists",
        );
        assert_eq!(
            err.to_string(),
            "blob create \"log/0001\": precondition failed: key exists"
        );
        let bare = Error::new(Op::Get, "k", ErrorKind::NotFound, "");
        assert_eq!(bare.to_string(), "blob get \"k\": not found");
    }

    #[test]
    fn only_transient_kinds_are_retryable() {
        assert!(ErrorKind::Ambiguous.is_retryable());
        assert!(ErrorKind::Throttled.is_retryable());
        assert!(ErrorKind::Unavailable.is_retryable());
        assert!(!ErrorKind::Precondition.is_retryable());
        assert!(!ErrorKind::NotFound.is_retryable());
        assert!(!ErrorKind::Integrity.is_retryable());
        assert!(!ErrorKind::Canceled.is_retryable());
    }
}
