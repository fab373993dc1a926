//! The Mark protocol in the server: the codec is the `quire-mark` crate (requests,
//! responses, the WATCH block stream, their size limits and typed errors), re-exported here
//! so transports and handlers name it `crate::mark::...`; [`client`] is the QUIC client the
//! CLI and tests use (`mark://` URLs, trust choices).
//! Transports (QUIC streams, tests) feed the codec bytes; handlers never see the wire.

pub mod client;

pub use quire_mark::{
    Error, ErrorKind, MAX_BODY, MAX_METADATA, MAX_REQUEST_LINE, MAX_WATCH_BLOCK, Metadata, Op,
    Request, RequestHead, RequestLimits, Response, ResponseLimits, Status, Verb, WatchBlock,
    WatchCursor, WatchDecoder, WatchEvent, encode_metadata_block, error_body, read_request,
    read_request_head, read_response, read_watch_block, validate_path,
};
