//! Shards (a hand-written strict CBOR reader): decoding never panics, and the documents a
//! shard decodes to encode to exactly its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_checkpoint::format::{decode_shard, encode_shard};
use quire_fuzz::take_u64;

fuzz_target!(|data: &[u8]| {
    let Some((&bits, rest)) = data.split_first() else {
        return;
    };
    let bits = bits % 17;
    let (index, rest) = take_u64(rest);
    let index = (index as u32) & ((1u32 << bits) - 1);
    let (sequence, bytes) = take_u64(rest);
    let Ok(docs) = decode_shard("w/shard", bytes, bits, index, sequence) else {
        return;
    };
    let pairs: Vec<_> = docs.iter().map(|d| (d, &d.history[..])).collect();
    let encoded = encode_shard(bits, index, &pairs).expect("decoded documents encode");
    assert_eq!(encoded, bytes);
});
