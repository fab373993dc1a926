//! History blocks: decoding never panics, and a block that decodes encodes to exactly its
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_checkpoint::format::{decode_block, encode_block};
use quire_fuzz::take_u64;
use quire_log::Hash;

fuzz_target!(|data: &[u8]| {
    let Some((path, rest)) = data.split_first_chunk::<32>() else {
        return;
    };
    let (first, rest) = take_u64(rest);
    let (last, bytes) = take_u64(rest);
    let path = Hash(*path);
    if let Ok(records) = decode_block("w/history", bytes, path, first, last) {
        assert_eq!(encode_block(path, &records), bytes);
    }
});
