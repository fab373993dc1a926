//! Object keys of the checkpoint layer under a world's prefix:
//! `checkpoints/<16 hex sequence>`, and the content-addressed `roots/<hash>`,
//! `shards/<hash>` and `history/<hash>` (64 lowercase hex digits of the blake3 of the bytes),
//! and history packs `history/<id>` (24 hex digits: the first 12 bytes of the blake3).

use quire_log::Hash;

pub const CHECKPOINT_DIR: &str = "checkpoints/";
pub const ROOT_DIR: &str = "roots/";
pub const SHARD_DIR: &str = "shards/";
pub const HISTORY_DIR: &str = "history/";

/// `<prefix>checkpoints/<sequence as 16 lowercase hex digits>`.
pub fn checkpoint_key(prefix: &str, sequence: u64) -> String {
    format!("{prefix}{CHECKPOINT_DIR}{sequence:016x}")
}

/// `<prefix>checkpoints/`.
pub fn checkpoint_prefix(prefix: &str) -> String {
    format!("{prefix}{CHECKPOINT_DIR}")
}

/// The sequence a checkpoint key names, if `key` is exactly one under `prefix`.
pub fn parse_checkpoint_key(prefix: &str, key: &str) -> Option<u64> {
    let name = key.strip_prefix(prefix)?.strip_prefix(CHECKPOINT_DIR)?;
    quire_log::keys::parse_sequence(name)
}

pub fn root_key(prefix: &str, hash: &Hash) -> String {
    format!("{prefix}{ROOT_DIR}{hash}")
}

pub fn shard_key(prefix: &str, hash: &Hash) -> String {
    format!("{prefix}{SHARD_DIR}{hash}")
}

pub fn history_key(prefix: &str, hash: &Hash) -> String {
    format!("{prefix}{HISTORY_DIR}{hash}")
}

/// `<prefix>history/<24 lowercase hex digits>`: a pack of history blocks, named by the first
/// 12 bytes of its blake3.
pub fn pack_key(prefix: &str, id: &[u8]) -> String {
    let mut key = format!("{prefix}{HISTORY_DIR}");
    for byte in id {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_keys_round_trip_strictly() {
        assert_eq!(checkpoint_key("w/", 1), "w/checkpoints/0000000000000001");
        assert_eq!(
            parse_checkpoint_key("w/", "w/checkpoints/00000000000000ff"),
            Some(255)
        );
        for bad in [
            "w/checkpoints/00000000000000FF",
            "w/checkpoints/0000000000000000",
            "w/checkpoints/1",
            "w/log/0000000000000002",
        ] {
            assert_eq!(parse_checkpoint_key("w/", bad), None, "{bad}");
        }
    }
}
