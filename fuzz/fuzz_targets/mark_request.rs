//! Mark requests: parsing never panics; a request read in any chunking is the request
//! parsed whole; a parsed request encodes, and its encoding parses back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_fuzz::{Chunked, chunk_and_rest};
use quire_mark::{Request, RequestLimits, read_request};

fuzz_target!(|data: &[u8]| {
    let Some((chunk, bytes)) = chunk_and_rest(data) else {
        return;
    };
    let whole = Request::parse(bytes);
    let mut reader = Chunked::new(bytes, chunk);
    let streamed = futures::executor::block_on(read_request(&mut reader, RequestLimits::default()));
    match (&whole, &streamed) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        _ => panic!("whole {whole:?} but streamed {streamed:?}"),
    }
    if let Ok(request) = whole {
        let encoded = request.encode().expect("a parsed request encodes");
        let again = Request::parse(&encoded).expect("an encoded request parses");
        assert_eq!(again, request);
    }
});
