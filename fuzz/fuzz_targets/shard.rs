//! Shards (a hand-written strict CBOR reader): decoding never panics, and the documents a
//! shard decodes to encode to exactly its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_checkpoint::format::{
    LEGACY_SCHEMA, SHARD_SCHEMA, decode_shard, encode_shard, encode_shard_entries,
};
use quire_fuzz::take_u64;

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    // The high bit picks the schema (clear: the schema before packs), the rest the bits.
    let schema = if head & 0x80 == 0 {
        LEGACY_SCHEMA
    } else {
        SHARD_SCHEMA
    };
    let bits = (head & 0x7f) % 17;
    let (index, rest) = take_u64(rest);
    let index = (index as u32) & ((1u32 << bits) - 1);
    let (sequence, bytes) = take_u64(rest);
    let Ok(docs) = decode_shard("w/shard", bytes, schema, bits, index, sequence) else {
        return;
    };
    let encoded = if schema == LEGACY_SCHEMA {
        let pairs: Vec<_> = docs.iter().map(|(d, _)| (d, &d.history[..])).collect();
        encode_shard(bits, index, &pairs).expect("decoded documents encode")
    } else {
        let entries: Vec<_> = docs
            .iter()
            .map(|(d, changed)| (d, &d.history[..], *changed))
            .collect();
        encode_shard_entries(bits, index, &entries)
    };
    assert_eq!(encoded, bytes);
});
