//! World markers: decoding never panics, and a marker that decodes encodes to exactly its
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_log::marker::Marker;

fuzz_target!(|data: &[u8]| {
    if let Ok(marker) = Marker::decode(data) {
        assert_eq!(marker.encode(), data);
    }
});
