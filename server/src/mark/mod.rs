//! The Mark protocol as bytes: [`wire`] owns the request and response formats, the WATCH
//! block stream, their size limits and the typed errors a transport turns into
//! `bad-request` or `server-error`.
//! Transports (QUIC streams, tests) feed it bytes; handlers never see the wire.

pub mod wire;

pub use wire::{
    Error, ErrorKind, MAX_BODY, MAX_METADATA, MAX_REQUEST_LINE, MAX_WATCH_BLOCK, Metadata, Op,
    Request, RequestHead, RequestLimits, Response, ResponseLimits, Status, Verb, WatchBlock,
    WatchCursor, WatchDecoder, WatchEvent, encode_metadata_block, error_body, read_request,
    read_request_head, read_response, read_watch_block,
};
