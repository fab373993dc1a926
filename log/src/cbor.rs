//! Canonical CBOR: the one encoding of every log object, and the strict decoder that refuses
//! any other spelling of the same value.
//!
//! Structs encode as definite-length maps with their fields in declaration order, integers
//! in their shortest form, byte strings for hashes and ids, no floats. Decoding refuses
//! unknown fields, trailing bytes and any input that does not re-encode to exactly the same
//! bytes (non-shortest integers, indefinite lengths, reordered or duplicated keys, explicit
//! nulls for absent fields).

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encodes `value` canonically.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("encoding into memory cannot fail");
    out
}

/// Decodes `bytes`, refusing anything but the canonical encoding of one value.
pub fn decode_strict<T: DeserializeOwned + Serialize>(bytes: &[u8]) -> Result<T, String> {
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

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        a: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        b: Option<String>,
    }

    #[test]
    fn refuses_non_canonical_input() {
        let good = encode(&Sample { a: 1, b: None });
        assert_eq!(
            decode_strict::<Sample>(&good).unwrap(),
            Sample { a: 1, b: None }
        );
        // {"a": 1} with the integer in a two-byte form.
        let long_int = [0xa1, 0x61, b'a', 0x18, 0x01];
        assert!(decode_strict::<Sample>(&long_int).is_err());
        // {"a": 1, "b": null}: an explicit null for an absent field.
        let null = [0xa2, 0x61, b'a', 0x01, 0x61, b'b', 0xf6];
        assert!(decode_strict::<Sample>(&null).is_err());
        // Indefinite-length map.
        let indefinite = [0xbf, 0x61, b'a', 0x01, 0xff];
        assert!(decode_strict::<Sample>(&indefinite).is_err());
        // Unknown field.
        let unknown = [0xa2, 0x61, b'a', 0x01, 0x61, b'c', 0x01];
        assert!(decode_strict::<Sample>(&unknown).is_err());
        // Trailing byte.
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode_strict::<Sample>(&trailing).is_err());
    }
}
