//! The error every blob operation returns: which operation, which key, which kind.

quire_failure::names! {
    /// The operation an [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        Create => "create",
        Get => "get",
        GetRange => "get_range",
        Head => "head",
        Replace => "replace",
        Delete => "delete",
        List => "list",
    }
}

impl Op {
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

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "blob";
}

quire_failure::names! {
    /// What went wrong, and so what the caller may conclude.
    #[non_exhaustive]
    pub enum ErrorKind {
        /// The key does not exist (reads only; a conditional mutation of a missing key is a
        /// precondition failure). Nothing changed.
        NotFound => "not found",
        /// The condition did not hold (key exists on create, generation differs or key missing
        /// on replace/delete) or the input was invalid. Nothing changed; retrying the same call
        /// fails the same way.
        Precondition => "precondition failed",
        /// The store asked us to slow down. Nothing changed for reads; a throttled mutation was
        /// refused before it applied. Retry after a pause.
        Throttled => "throttled",
        /// The store could not be reached or failed. For reads nothing changed; a mutation that
        /// may have applied is reported as [`ErrorKind::Ambiguous`] instead.
        Unavailable => "unavailable",
        /// The store returned something that cannot be right (bad checksum, inconsistent
        /// attributes, a listing out of order). Not retryable.
        Integrity => "integrity violation",
        /// A mutation's outcome is unknown: it may or may not have applied. Decide by reading
        /// the key back; never treat it as a win or a loss.
        Ambiguous => "outcome unknown (ambiguous)",
        /// The call was canceled before it reached the store; nothing changed.
        Canceled => "canceled",
    }
}

impl ErrorKind {
    /// Whether repeating the call may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Throttled | ErrorKind::Unavailable | ErrorKind::Ambiguous
        )
    }
}

quire_failure::error_type! {
    /// A failed blob operation: `blob <op> "<key>": <kind>: <detail>`; the key is the prefix
    /// for `list`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Error(Op, ErrorKind);
}

impl Error {
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }

    pub fn is_precondition(&self) -> bool {
        self.kind() == ErrorKind::Precondition
    }

    pub fn is_ambiguous(&self) -> bool {
        self.kind() == ErrorKind::Ambiguous
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
