//! The HTTP path and query mapping (input: a method index byte, then the request target,
//! then NUL-separated header names and values): an HTTP request target and headers either map to a
//! Mark request with a valid path that the Mark codec carries unchanged, or are refused
//! with a reason; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_fuzz::fields;
use quire_server::http::{mark_request, url_pairs, verb_for};
use quire_server::mark::Request;

use http::{HeaderMap, HeaderName, HeaderValue, Method};

const METHODS: [Method; 5] = [
    Method::GET,
    Method::HEAD,
    Method::PUT,
    Method::POST,
    Method::DELETE,
];

fuzz_target!(|data: &[u8]| {
    let Some((&method, rest)) = data.split_first() else {
        return;
    };
    let method = &METHODS[usize::from(method) % METHODS.len()];
    let Some(fields) = fields(rest) else {
        return;
    };
    let Some((target, header_list)) = fields.split_first() else {
        return;
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let Ok(query) = url_pairs(query) else {
        return;
    };
    let Ok(verb) = verb_for(method, &query) else {
        return;
    };
    let mut headers = HeaderMap::new();
    for pair in header_list.chunks(2) {
        let [name, value] = pair else {
            break;
        };
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(*name),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(name, value);
        }
    }
    let Ok(request) = mark_request(verb, path, &query, &headers) else {
        return;
    };
    assert_eq!(request.verb, verb);
    let encoded = request.encode().expect("a mapped request encodes");
    assert_eq!(Request::parse(&encoded).expect("it parses"), request);
});
