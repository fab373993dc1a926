//! Slots: decoding never panics, and a decoded slot encodes to exactly its bytes (the
//! encoding is canonical: one slot, one spelling).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use quire_fuzz::take_u64;
use quire_log::EncodedSlot;
use quire_log::keys::slot_key;

fuzz_target!(|data: &[u8]| {
    let (sequence, bytes) = take_u64(data);
    let key = slot_key("w/", sequence);
    let Ok(decoded) = EncodedSlot::decode(&key, sequence, Bytes::copy_from_slice(bytes)) else {
        return;
    };
    let again = EncodedSlot::encode(decoded.slot.clone(), &key).expect("a decoded slot encodes");
    assert_eq!(again.bytes, decoded.bytes);
    assert_eq!(again.hash, decoded.hash);
    assert_eq!(again.slot, decoded.slot);
});
