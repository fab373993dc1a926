//! The error every checkpoint operation returns: which operation, which key, which kind.

quire_failure::names! {
    /// The operation an [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        /// Creating a new world's genesis objects.
        Genesis => "genesis",
        /// Cold start: marker, checkpoint, root, shards, replay.
        Load => "load",
        /// Applying slots after the checkpoint (replay, catch-up).
        Replay => "replay",
        /// Writing a checkpoint.
        Write => "write",
        /// Adopting a peer's checkpoint.
        Adopt => "adopt",
        /// Dropping old checkpoints.
        Drop => "drop",
        /// Reading history blocks and version bytes.
        Read => "read",
        /// Decoding a stored object.
        Decode => "decode",
    }
}

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "checkpoint";
}

quire_failure::names! {
    /// What went wrong.
    #[non_exhaustive]
    pub enum ErrorKind {
        /// Stored state is corrupt, foreign, or disagrees with the log: nothing built on it may
        /// be served.
        Integrity => "integrity violation",
        /// The object store failed; [`Error::blob_kind`] says how.
        Storage => "storage failure",
        /// There is no world under the prefix (no marker).
        NotFound => "not found",
        /// The request cannot be met as asked: another world's marker, a bucket holding foreign
        /// objects, a checkpoint this replica cannot build (it did not see the state it needs).
        Precondition => "precondition failed",
    }
}

quire_failure::error_type! {
    /// A failed checkpoint operation: `checkpoint <op> "<key>": <kind>: <detail>`; the extra
    /// is what the object store reported, for storage failures.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Error(Op, ErrorKind, Option<quire_blob::ErrorKind>);
}

impl Error {
    /// An integrity error: stored state no correct writer produced.
    pub fn integrity(op: Op, key: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::new(op, key, ErrorKind::Integrity, detail)
    }

    /// A storage failure wrapping the blob error; a blob integrity failure stays integrity.
    pub fn storage(op: Op, err: quire_blob::Error) -> Self {
        let kind = match err.kind() {
            quire_blob::ErrorKind::Integrity => ErrorKind::Integrity,
            _ => ErrorKind::Storage,
        };
        let mut out = Error::new(op, err.key().to_owned(), kind, err.to_string());
        *out.extra_mut() = Some(err.kind());
        out.with_source(err)
    }

    /// A log error met while loading or replaying, keeping its key and class.
    pub fn from_log(op: Op, err: quire_log::Error) -> Self {
        let kind = match err.kind() {
            quire_log::ErrorKind::Storage => ErrorKind::Storage,
            quire_log::ErrorKind::NotFound => ErrorKind::NotFound,
            _ => ErrorKind::Integrity,
        };
        let mut out = Error::new(op, err.key().to_owned(), kind, err.to_string());
        *out.extra_mut() = err.blob_kind();
        out.with_source(err)
    }

    /// For storage failures: what the object store reported.
    pub fn blob_kind(&self) -> Option<quire_blob::ErrorKind> {
        *self.extra()
    }

    pub fn is_integrity(&self) -> bool {
        self.kind() == ErrorKind::Integrity
    }
}

/// The result of a checkpoint operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_operation_key_and_kind() {
        let err = Error::integrity(Op::Load, "shards/ab", "entries out of order");
        assert_eq!(
            err.to_string(),
            "checkpoint load \"shards/ab\": integrity violation: entries out of order"
        );
        let blob = quire_blob::Error::new(
            quire_blob::Op::Get,
            "roots/x",
            quire_blob::ErrorKind::Unavailable,
            "down",
        );
        let err = Error::storage(Op::Load, blob);
        assert_eq!(err.kind(), ErrorKind::Storage);
        assert_eq!(err.key(), "roots/x");
        assert_eq!(err.blob_kind(), Some(quire_blob::ErrorKind::Unavailable));
    }
}
