//! Object keys under a world's prefix: `log/<16 hex>` slots, `blobs/<64 hex>` version blobs
//! and the `marker`. The prefix is the caller's (a world may share a bucket) and is used
//! verbatim: include a trailing `/` to make it a folder.

use crate::ids::Hash;

/// The folder of the log under the world prefix.
pub const LOG_DIR: &str = "log/";
/// The folder of content-addressed version blobs.
pub const BLOB_DIR: &str = "blobs/";
/// The world marker's name.
pub const MARKER_NAME: &str = "marker";

/// `<prefix>log/<sequence as 16 lowercase hex digits>`.
pub fn slot_key(prefix: &str, sequence: u64) -> String {
    format!("{prefix}{LOG_DIR}{sequence:016x}")
}

/// `<prefix>log/`.
pub fn log_prefix(prefix: &str) -> String {
    format!("{prefix}{LOG_DIR}")
}

/// The sequence a slot key names, if `key` is exactly a slot key under `prefix`.
pub fn parse_slot_key(prefix: &str, key: &str) -> Option<u64> {
    let name = key.strip_prefix(prefix)?.strip_prefix(LOG_DIR)?;
    parse_sequence(name)
}

/// Parses 16 lowercase hex digits naming a positive sequence.
pub fn parse_sequence(name: &str) -> Option<u64> {
    if name.len() != 16
        || !name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u64::from_str_radix(name, 16).ok().filter(|s| *s > 0)
}

/// `<prefix>blobs/<hash>`.
pub fn blob_key(prefix: &str, hash: &Hash) -> String {
    format!("{prefix}{BLOB_DIR}{hash}")
}

/// `<prefix>marker`.
pub fn marker_key(prefix: &str) -> String {
    format!("{prefix}{MARKER_NAME}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_round_trip_strictly() {
        assert_eq!(slot_key("w/", 2), "w/log/0000000000000002");
        assert_eq!(parse_slot_key("w/", "w/log/0000000000000002"), Some(2));
        assert_eq!(parse_slot_key("w/", "w/log/00000000000000ff"), Some(255));
        for bad in [
            "w/log/00000000000000FF",
            "w/log/0000000000000000",
            "w/log/000000000000002",
            "w/log/0000000000000002.json",
            "x/log/0000000000000002",
            "w/blobs/0000000000000002",
        ] {
            assert_eq!(parse_slot_key("w/", bad), None, "{bad}");
        }
    }
}
