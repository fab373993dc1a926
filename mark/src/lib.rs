//! The Mark protocol wire codec: requests, responses, their metadata blocks, the WATCH block
//! stream and their size limits, as bytes. Transports (QUIC streams, tests, fuzzers) feed it
//! bytes; handlers never see the wire.
//!
//! # Requests
//!
//! ```text
//! PUBLISH /docs/a.md\n          request line: a known verb, one space, the path, LF
//! ---\n                         optional metadata block
//! expected-version: "2"\n
//! ---\n
//! # A\n                         body: every byte after the block (or after the line)
//! ```
//!
//! - The request line is at most [`MAX_REQUEST_LINE`] bytes (without its LF). The verb is one of
//!   [`Verb`]; the path starts with `/` and holds no NUL, no control character other than TAB
//!   and no DEL. Paths are not percent-decoded: the wire carries them as they are.
//! - A metadata block is present exactly when the bytes after the request line start with
//!   `---\n`; it ends at the first line that is exactly `---` (followed by LF, or ending the
//!   message). Its text, between the fences, is at most [`MAX_METADATA`] bytes.
//! - The body is at most [`MAX_BODY`] bytes.
//!
//! # Responses
//!
//! A metadata block that always carries `status`, then the body. Keys are written sorted the
//! way the reference encoder sorts them, and values that a YAML reader would type (numbers,
//! booleans, null words, timestamps) are double-quoted, so `version: "3"`, `complete: "true"`,
//! `modified: "2026-01-01T00:00:00Z"` but `status: ok`, `tags: alpha,wire`. Error responses
//! carry the body `"\n# <Title>\n\n<message>\n"` ([`error_body`]).
//!
//! # WATCH streams
//!
//! A WATCH response is a stream of metadata blocks without bodies ([`WatchBlock`]), each at
//! most [`MAX_WATCH_BLOCK`] bytes with its fences. A block with a `status` is a control
//! block (the acknowledgement and heartbeats say `ok`; any other status ends the stream); a
//! block without one is an event (`cursor`, `path`, `version`, `op`, optional `hash` and
//! `agent`). Readers ignore keys they do not know. Cursors are `<epoch>:<sequence>`
//! ([`WatchCursor`]). [`WatchDecoder`] splits a byte stream into blocks however it is chunked.
//!
//! # The metadata grammar
//!
//! A metadata block is a flat map from string to string: a strict subset of YAML that every
//! YAML reader decodes to the same map, parsed here by a small parser because no YAML crate
//! keeps scalars as their source text. One entry per line, `key: value`:
//! - keys start at column 0; indented lines, sequences, nested maps, flow collections (`[`,
//!   `{`), anchors, aliases, tags and block scalars (`|`, `>`) are refused;
//! - a value is plain (the text, trimmed, up to a ` #` comment), single-quoted (`''` is a
//!   quote) or double-quoted (YAML escapes: `\n`, `\t`, `\"`, `\\`, `\xXX`, `\uXXXX`, …);
//!   quoted values close on their own line;
//! - a plain value must not contain `: ` or end in `:` and must not start with an indicator
//!   (`, [ ] { } # & * ! | > % @` and backquote, or `- ? :` followed by a space): quote it;
//! - an empty value and the null words `~`, `null`, `Null`, `NULL` decode to the empty string;
//!   every other plain value is kept as written (`3` is `"3"`, `true` is `"true"`);
//! - blank lines and `#` comment lines are skipped; a key given twice is refused;
//! - raw control characters (other than TAB), DEL, C1 controls, NEL, U+2028/U+2029 and U+FEFF
//!   are refused anywhere in the block (the encoder escapes them in double quotes).
//!
//! Keys and values may be any string: the encoder quotes whatever would not read back as
//! itself, so `parse(encode(x)) == x` for every request and response.
//!
//! # Errors
//!
//! Every failure is an [`Error`] naming the operation and the key (the request path once the
//! request line has been read, else empty) with one [`ErrorKind`]: [`ErrorKind::Malformed`]
//! (grammar: answer `bad-request`), [`ErrorKind::TooLarge`] (a limit was exceeded) or
//! [`ErrorKind::Read`] (the transport failed). The reference answers the last two with
//! `server-error` ("could not read request"); [`Error::status`] says so.
//!
//!
//! # Modules
//!
//! - `verb`: [`Verb`], [`Status`] and [`error_body`];
//! - `error`: [`Error`], [`Op`], [`ErrorKind`];
//! - `message`: [`Request`], [`Response`], their limits, parsers, encoders and async
//!   readers, over one framing state machine;
//! - `metadata`: [`Metadata`], the block parser and encoder ([`encode_metadata_block`]);
//! - `watch`: [`WatchBlock`], [`WatchCursor`], [`WatchDecoder`], [`read_watch_block`].
//!
//! The crate knows bytes only: no transport, no handler, no storage. It depends on `bytes`,
//! `tokio`'s I/O traits (for the async readers) and `quire-failure` (the error shape).

mod error;
mod message;
mod metadata;
mod verb;
mod watch;

#[cfg(test)]
mod testing;

pub use error::{Error, ErrorKind, Op};
pub use message::{
    MAX_BODY, MAX_METADATA, MAX_REQUEST_LINE, MAX_RESPONSE_BODY, Request, RequestHead,
    RequestLimits, Response, ResponseLimits, read_request, read_request_head, read_response,
    validate_path,
};
pub use metadata::{Metadata, encode_metadata_block};
pub use verb::{Status, Verb, error_body};
pub use watch::{
    MAX_EPOCH, MAX_WATCH_BLOCK, WatchBlock, WatchCursor, WatchDecoder, WatchEvent, read_watch_block,
};
