//! WATCH block streams: the decoder never panics, yields the same blocks whatever the
//! chunking, and every block it yields encodes to bytes that parse back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_fuzz::chunk_and_rest;
use quire_mark::{WatchBlock, WatchDecoder};

/// The blocks of `bytes` pushed `chunk` bytes at a time, up to the first error.
fn decode(bytes: &[u8], chunk: usize) -> (Vec<WatchBlock>, bool) {
    let mut decoder = WatchDecoder::new();
    let mut blocks = Vec::new();
    for piece in bytes.chunks(chunk) {
        decoder.push(piece);
        loop {
            match decoder.next_block() {
                Ok(Some(block)) => blocks.push(block),
                Ok(None) => break,
                Err(_) => return (blocks, true),
            }
        }
    }
    (blocks, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((chunk, bytes)) = chunk_and_rest(data) else {
        return;
    };
    let (chunked, chunked_failed) = decode(bytes, chunk);
    let (whole, whole_failed) = decode(bytes, bytes.len().max(1));
    assert_eq!(chunked, whole);
    assert_eq!(chunked_failed, whole_failed);
    for block in whole {
        let encoded = block.encode().expect("a parsed block encodes");
        assert_eq!(
            WatchBlock::parse(&encoded).expect("an encoded block parses"),
            block
        );
    }
});
