//! Mark responses: parsing never panics; a response read in any chunking is the response
//! parsed whole; a parsed response encodes to bytes that parse back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_fuzz::{Chunked, chunk_and_rest};
use quire_mark::{Response, ResponseLimits, read_response};

fuzz_target!(|data: &[u8]| {
    let Some((chunk, bytes)) = chunk_and_rest(data) else {
        return;
    };
    let whole = Response::parse(bytes);
    let mut reader = Chunked::new(bytes, chunk);
    let streamed =
        futures::executor::block_on(read_response(&mut reader, ResponseLimits::default()));
    match (&whole, &streamed) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        _ => panic!("whole {whole:?} but streamed {streamed:?}"),
    }
    if let Ok(response) = whole {
        let again = Response::parse(&response.encode()).expect("an encoded response parses");
        assert_eq!(again, response);
    }
});
