//! The error every checkpoint operation returns: which operation, which key, which kind.

use std::fmt;

/// The operation an [`Error`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Creating a new world's genesis objects.
    Genesis,
    /// Cold start: marker, checkpoint, root, shards, replay.
    Load,
    /// Applying slots after the checkpoint (replay, catch-up).
    Replay,
    /// Writing a checkpoint.
    Write,
    /// Adopting a peer's checkpoint.
    Adopt,
    /// Dropping old checkpoints.
    Drop,
    /// Reading history blocks and version bytes.
    Read,
    /// Decoding a stored object.
    Decode,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Genesis => "genesis",
            Op::Load => "load",
            Op::Replay => "replay",
            Op::Write => "write",
            Op::Adopt => "adopt",
            Op::Drop => "drop",
            Op::Read => "read",
            Op::Decode => "decode",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Stored state is corrupt, foreign, or disagrees with the log: nothing built on it may be
    /// served.
    Integrity,
    /// The object store failed; [`Error::blob_kind`] says how.
    Storage,
    /// There is no world under the prefix (no marker).
    NotFound,
    /// The request cannot be met as asked: another world's marker, a bucket holding foreign
    /// objects, a checkpoint this replica cannot build (it did not see the state it needs).
    Precondition,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::Integrity => "integrity violation",
            ErrorKind::Storage => "storage failure",
            ErrorKind::NotFound => "not found",
            ErrorKind::Precondition => "precondition failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed checkpoint operation: `checkpoint <op> "<key>": <kind>: <detail>`.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint {op} {key:?}: {kind}{}", detail_suffix(.detail))]
pub struct Error {
    op: Op,
    key: String,
    kind: ErrorKind,
    detail: String,
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
            blob_kind: None,
            source: None,
        }
    }

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
        out.blob_kind = Some(err.kind());
        out.source = Some(Box::new(err));
        out
    }

    /// A log error met while loading or replaying, keeping its key and class.
    pub fn from_log(op: Op, err: quire_log::Error) -> Self {
        let kind = match err.kind() {
            quire_log::ErrorKind::Storage => ErrorKind::Storage,
            quire_log::ErrorKind::NotFound => ErrorKind::NotFound,
            _ => ErrorKind::Integrity,
        };
        let mut out = Error::new(op, err.key().to_owned(), kind, err.to_string());
        out.blob_kind = err.blob_kind();
        out.source = Some(Box::new(err));
        out
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

    /// For storage failures: what the object store reported.
    pub fn blob_kind(&self) -> Option<quire_blob::ErrorKind> {
        self.blob_kind
    }

    pub fn is_integrity(&self) -> bool {
        self.kind == ErrorKind::Integrity
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
