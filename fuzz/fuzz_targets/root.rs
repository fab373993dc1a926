//! Roots: decoding against a checkpoint never panics, and a root that decodes encodes to
//! exactly its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_checkpoint::format::{Checkpoint, Root};
use quire_fuzz::take_u64;
use quire_log::{Hash, WorldId};

fuzz_target!(|data: &[u8]| {
    let (sequence, rest) = take_u64(data);
    let (documents, rest) = take_u64(rest);
    let Some((world, bytes)) = rest.split_first_chunk::<16>() else {
        return;
    };
    let checkpoint = Checkpoint {
        world: WorldId(*world),
        sequence,
        root: Hash::of(bytes),
        tip: Hash([0; 32]),
        documents,
    };
    if let Ok(root) = Root::decode("w/root", bytes, &checkpoint) {
        assert_eq!(root.encode(), bytes);
    }
});
