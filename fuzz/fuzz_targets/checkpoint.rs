//! Checkpoints: decoding never panics, and a decoded checkpoint encodes to exactly its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_checkpoint::format::Checkpoint;
use quire_checkpoint::keys::checkpoint_key;
use quire_fuzz::take_u64;

fuzz_target!(|data: &[u8]| {
    let (sequence, bytes) = take_u64(data);
    let key = checkpoint_key("w/", sequence);
    if let Ok(checkpoint) = Checkpoint::decode(&key, sequence, bytes) {
        assert_eq!(checkpoint.encode(), bytes);
    }
});
