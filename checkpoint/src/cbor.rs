//! Canonical CBOR for checkpoint objects, with the same strict rule as the log's: decoding
//! refuses unknown fields, trailing bytes and any input that does not re-encode to exactly
//! the same bytes.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encodes `value` canonically.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("encoding into memory cannot fail");
    out
}

/// Decodes `bytes`, refusing anything but the canonical encoding of one value.
pub(crate) fn decode_strict<T: DeserializeOwned + Serialize>(bytes: &[u8]) -> Result<T, String> {
    let mut rest = bytes;
    let value: T = ciborium::from_reader(&mut rest).map_err(|e| format!("malformed CBOR: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes", rest.len()));
    }
    if !encodes_to(&value, bytes) {
        return Err("not in canonical encoding".into());
    }
    Ok(value)
}

/// Whether `value` encodes to exactly `bytes`, compared as the encoder writes rather than
/// through a second buffer.
fn encodes_to<T: Serialize>(value: &T, bytes: &[u8]) -> bool {
    let mut compare = Compare { rest: bytes };
    ciborium::into_writer(value, &mut compare).is_ok() && compare.rest.is_empty()
}

/// A writer that checks each write against the bytes still expected, failing at the first
/// difference.
struct Compare<'a> {
    rest: &'a [u8],
}

impl std::io::Write for Compare<'_> {
    fn write(&mut self, written: &[u8]) -> std::io::Result<usize> {
        match self.rest.strip_prefix(written) {
            Some(rest) => {
                self.rest = rest;
                Ok(written.len())
            }
            None => Err(std::io::Error::other("differs from the input")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
