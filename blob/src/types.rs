//! Values the contract speaks in, and the input rules every driver applies before any I/O.

use std::fmt;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Op, Result};

/// The longest key or prefix, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// How much later than the stored modification time a mutation may report it (never
/// earlier). S3's `PutObject` answer carries no modification time, so that driver reports the
/// answer's `Date`, which can fall in the next second; a later time only makes age fences more
/// careful.
pub const MUTATION_DATE_SLACK: Duration = Duration::from_secs(2);

/// An object's revision token. Opaque: compare for equality only.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Generation(String);

impl Generation {
    /// Wraps a driver's token. An empty token is not a generation; drivers never produce one.
    pub fn new(token: impl Into<String>) -> Self {
        Generation(token.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Generation({})", self.0)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a store knows about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub key: String,
    pub size: u64,
    pub generation: Generation,
    /// When the object was last written, by the store's clock. Used only for age fences
    /// (grace periods), never for ordering.
    pub modified: SystemTime,
}

/// An object's bytes with its attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub data: Bytes,
    pub attributes: Attributes,
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Keys in byte order with their current attributes.
    pub objects: Vec<Attributes>,
    /// Where the next page starts; `None` when this page is the last.
    pub next_cursor: Option<String>,
}

fn check_text(op: Op, what: &str, shown: &str, value: &str) -> Result<()> {
    let fail = |why: &str| {
        Err(Error::new(
            op,
            shown,
            ErrorKind::Precondition,
            format!("invalid {what}: {why}"),
        ))
    };
    if value.len() > MAX_KEY_LEN {
        return fail(&format!("longer than {MAX_KEY_LEN} bytes"));
    }
    if value.contains(['\r', '\n']) {
        return fail("contains CR or LF");
    }
    Ok(())
}

/// Checks a key: non-empty, not `.`/`..`, at most [`MAX_KEY_LEN`] bytes, no CR/LF.
pub fn validate_key(op: Op, key: &str) -> Result<()> {
    if key.is_empty() || key == "." || key == ".." {
        return Err(Error::new(
            op,
            key,
            ErrorKind::Precondition,
            "invalid key: empty, \".\" or \"..\"",
        ));
    }
    check_text(op, "key", key, key)
}

/// Checks a listing prefix: like a key, but empty, `.` and `..` are allowed.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    check_text(Op::List, "prefix", prefix, prefix)
}

/// Checks a listing start-after value: empty, or text a key could be.
pub fn validate_start_after(prefix: &str, start_after: &str) -> Result<()> {
    check_text(Op::List, "start_after", prefix, start_after)
}

/// Validates a byte range before any I/O: it must not be inverted.
pub(crate) fn validate_range(op: Op, key: &str, range: &std::ops::Range<u64>) -> Result<()> {
    if range.start > range.end {
        return Err(Error::new(
            op,
            key,
            ErrorKind::Precondition,
            format!("inverted range {}..{}", range.start, range.end),
        ));
    }
    Ok(())
}

/// Cuts `range` out of a whole object's bytes: cut at the end, refused when it starts past it.
pub(crate) fn cut_range(key: &str, data: &Bytes, range: std::ops::Range<u64>) -> Result<Bytes> {
    validate_range(Op::GetRange, key, &range)?;
    let len = data.len() as u64;
    if range.start > len || (range.start == len && range.end > range.start) {
        return Err(Error::new(
            Op::GetRange,
            key,
            ErrorKind::Precondition,
            format!("range starts at {} past the end ({len} bytes)", range.start),
        ));
    }
    let end = range.end.min(len);
    Ok(data.slice(range.start as usize..end as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        for bad in ["", ".", "..", "a\nb", "a\rb"] {
            assert!(validate_key(Op::Create, bad).unwrap_err().is_precondition());
        }
        assert!(
            validate_key(Op::Create, &"k".repeat(MAX_KEY_LEN + 1))
                .unwrap_err()
                .is_precondition()
        );
        validate_key(Op::Create, &"k".repeat(MAX_KEY_LEN)).unwrap();
        validate_key(Op::Create, "log/0000000000000001").unwrap();
    }

    #[test]
    fn prefixes_allow_dots_and_empty() {
        for good in ["", ".", "..", "log/"] {
            validate_prefix(good).unwrap();
        }
        assert!(validate_prefix("a\n").unwrap_err().is_precondition());
    }
}
