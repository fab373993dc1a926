//! The Mark protocol wire codec: requests, responses, their metadata blocks and size limits.
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
//! This file is long (about 3,000 lines): the request and response codec, metadata value
//! encoding and the WATCH block stream share the grammar's helpers here; those three are the
//! seams it is to be split along.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest request line, in bytes, without its LF.
pub const MAX_REQUEST_LINE: usize = 4096;
/// The longest metadata block text (between the fences), in bytes.
pub const MAX_METADATA: usize = 64 * 1024;
/// The longest request body, in bytes.
pub const MAX_BODY: usize = 1024 * 1024;
/// The longest response body a client accepts by default, in bytes: a generated listing or
/// version history may exceed a document's 1 MiB.
pub const MAX_RESPONSE_BODY: usize = 8 * 1024 * 1024;

const FENCE: &[u8] = b"---\n";
const CLOSING_FENCE: &[u8] = b"\n---\n";
const CLOSING_FENCE_AT_END: &[u8] = b"\n---";
/// How much one read asks of the transport; also the most a reader holds beyond the limits.
const READ_CHUNK: usize = 16 * 1024;

/// Metadata: a flat map of strings, in key order.
pub type Metadata = BTreeMap<String, String>;

/// A request verb. A ninth verb is a protocol change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    Fetch,
    List,
    Versions,
    Publish,
    Append,
    Archive,
    Lookup,
    Watch,
}

impl Verb {
    /// Every verb, in the order the protocol lists them.
    pub const ALL: [Verb; 8] = [
        Verb::Fetch,
        Verb::List,
        Verb::Versions,
        Verb::Publish,
        Verb::Append,
        Verb::Archive,
        Verb::Lookup,
        Verb::Watch,
    ];

    /// The verb as the request line spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Fetch => "FETCH",
            Verb::List => "LIST",
            Verb::Versions => "VERSIONS",
            Verb::Publish => "PUBLISH",
            Verb::Append => "APPEND",
            Verb::Archive => "ARCHIVE",
            Verb::Lookup => "LOOKUP",
            Verb::Watch => "WATCH",
        }
    }

    /// The verb spelled exactly `name` (upper case), if any.
    pub fn from_name(name: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|verb| verb.as_str() == name)
    }

    /// Whether the verb changes the world (and so needs the `publish` capability).
    pub fn is_write(self) -> bool {
        matches!(self, Verb::Publish | Verb::Append | Verb::Archive)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A response status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    Ok,
    Created,
    NotModified,
    NotFound,
    Archived,
    Unauthorized,
    NotPermitted,
    Conflict,
    BadRequest,
    ServerError,
    RateLimited,
    /// WATCH only: the client must resume from the cursor given.
    Resync,
    /// WATCH only: the server is draining.
    Closing,
    /// Reserved by the protocol; the reference answers oversize input with `server-error`.
    TooLarge,
    /// Reserved by the protocol.
    Unavailable,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 15] = [
        Status::Ok,
        Status::Created,
        Status::NotModified,
        Status::NotFound,
        Status::Archived,
        Status::Unauthorized,
        Status::NotPermitted,
        Status::Conflict,
        Status::BadRequest,
        Status::ServerError,
        Status::RateLimited,
        Status::Resync,
        Status::Closing,
        Status::TooLarge,
        Status::Unavailable,
    ];

    /// The status as the `status` field spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Created => "created",
            Status::NotModified => "not-modified",
            Status::NotFound => "not-found",
            Status::Archived => "archived",
            Status::Unauthorized => "unauthorized",
            Status::NotPermitted => "not-permitted",
            Status::Conflict => "conflict",
            Status::BadRequest => "bad-request",
            Status::ServerError => "server-error",
            Status::RateLimited => "rate-limited",
            Status::Resync => "resync",
            Status::Closing => "closing",
            Status::TooLarge => "too-large",
            Status::Unavailable => "unavailable",
        }
    }

    /// The status spelled exactly `name`, if any.
    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == name)
    }

    /// The heading of an error body: first letter upper-cased, `-` as a space
    /// (`not-found` → `Not found`).
    pub fn title(self) -> String {
        let spaced = self.as_str().replace('-', " ");
        let mut chars = spaced.chars();
        match chars.next() {
            Some(first) => first.to_uppercase().chain(chars).collect(),
            None => String::new(),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of an error response: `"\n# <Title>\n\n<message>\n"`.
pub fn error_body(status: Status, message: &str) -> String {
    format!("\n# {}\n\n{message}\n", status.title())
}

/// The operation an [`Error`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    ReadRequest,
    ParseRequest,
    EncodeRequest,
    ReadResponse,
    ParseResponse,
    EncodeWatchBlock,
    ParseWatchBlock,
    ReadWatchBlock,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::ReadRequest => "read request",
            Op::ParseRequest => "parse request",
            Op::EncodeRequest => "encode request",
            Op::ReadResponse => "read response",
            Op::ParseResponse => "parse response",
            Op::EncodeWatchBlock => "encode watch block",
            Op::ParseWatchBlock => "parse watch block",
            Op::ReadWatchBlock => "read watch block",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The bytes break the grammar: unknown verb, bad path, bad metadata block.
    Malformed,
    /// A part exceeded its limit (request line, metadata block or body).
    TooLarge,
    /// The transport failed while the message was read.
    Read,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Malformed => "malformed",
            ErrorKind::TooLarge => "too large",
            ErrorKind::Read => "read failed",
        })
    }
}

/// A message that could not be read, parsed or encoded: `mark <op> "<key>": <kind>: <detail>`.
#[derive(Debug, thiserror::Error)]
#[error("mark {op} {key:?}: {kind}: {detail}")]
pub struct Error {
    op: Op,
    key: String,
    kind: ErrorKind,
    detail: String,
    #[source]
    source: Option<io::Error>,
}

impl Error {
    pub fn new(op: Op, key: impl Into<String>, kind: ErrorKind, detail: impl Into<String>) -> Self {
        Error {
            op,
            key: key.into(),
            kind,
            detail: detail.into(),
            source: None,
        }
    }

    fn read(op: Op, key: impl Into<String>, source: io::Error) -> Self {
        let detail = source.to_string();
        Error {
            source: Some(source),
            ..Error::new(op, key, ErrorKind::Read, detail)
        }
    }

    pub fn op(&self) -> Op {
        self.op
    }

    /// The request path when the request line had been read, else empty.
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The status a server answers this error with: `bad-request` for grammar errors,
    /// `server-error` for oversize input and read failures (as the reference does).
    pub fn status(&self) -> Status {
        match self.kind {
            ErrorKind::Malformed => Status::BadRequest,
            ErrorKind::TooLarge | ErrorKind::Read => Status::ServerError,
        }
    }

    /// The message for the error body: the grammar problem for `bad-request`, else the
    /// reference's "could not read request" plus what was exceeded.
    pub fn message(&self) -> String {
        match self.kind {
            ErrorKind::Malformed => self.detail.clone(),
            ErrorKind::TooLarge => format!("could not read request: {}", self.detail),
            ErrorKind::Read => "could not read request".to_owned(),
        }
    }

    /// The whole error response a server sends for this error.
    pub fn to_response(&self) -> Response {
        Response::error(self.status(), &self.message())
    }
}

/// The limits a server applies to requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Request line bytes, without the LF.
    pub request_line: usize,
    /// Metadata block text bytes, between the fences.
    pub metadata: usize,
    /// Body bytes.
    pub body: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            request_line: MAX_REQUEST_LINE,
            metadata: MAX_METADATA,
            body: MAX_BODY,
        }
    }
}

/// The limits a client applies to responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseLimits {
    pub metadata: usize,
    pub body: usize,
}

impl Default for ResponseLimits {
    fn default() -> Self {
        ResponseLimits {
            metadata: MAX_METADATA,
            body: MAX_RESPONSE_BODY,
        }
    }
}

/// One request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub verb: Verb,
    pub path: String,
    pub metadata: Metadata,
    pub body: Bytes,
}

impl Request {
    /// A request without metadata or body.
    pub fn new(verb: Verb, path: impl Into<String>) -> Self {
        Request {
            verb,
            path: path.into(),
            metadata: Metadata::new(),
            body: Bytes::new(),
        }
    }

    pub fn with_meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Parses a whole request under the protocol's limits.
    pub fn parse(bytes: &[u8]) -> Result<Request, Error> {
        Request::parse_with_limits(bytes, RequestLimits::default())
    }

    pub fn parse_with_limits(bytes: &[u8], limits: RequestLimits) -> Result<Request, Error> {
        let mut assembler = Assembler::new(Mode::Request(limits));
        for piece in bytes.chunks(READ_CHUNK) {
            assembler.push(piece)?;
        }
        assembler.finish_request()
    }

    /// The request's bytes. Fails only for a path the grammar refuses. Writes an empty
    /// metadata block when there is no metadata but the body itself starts with `---\n`, so
    /// the body reads back as a body.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        validate_path(&self.path).map_err(|detail| {
            Error::new(Op::EncodeRequest, &self.path, ErrorKind::Malformed, detail)
        })?;
        let mut out = Vec::with_capacity(self.path.len() + self.body.len() + 64);
        out.extend_from_slice(self.verb.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.path.as_bytes());
        out.push(b'\n');
        if !self.metadata.is_empty() || self.body.starts_with(FENCE) {
            let entries = self.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            out.extend_from_slice(encode_entries(entries).as_bytes());
        }
        out.extend_from_slice(&self.body);
        Ok(out)
    }
}

/// One response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: Status,
    /// Every field but `status`.
    pub metadata: Metadata,
    pub body: Bytes,
}

impl Response {
    pub fn new(status: Status) -> Self {
        Response {
            status,
            metadata: Metadata::new(),
            body: Bytes::new(),
        }
    }

    /// An error response: the status and the body from [`error_body`].
    pub fn error(status: Status, message: &str) -> Self {
        Response::new(status).with_body(error_body(status, message))
    }

    pub fn with_meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// The response's bytes. A `status` key in `metadata` is ignored: the status field
    /// always comes from [`Response::status`].
    pub fn encode(&self) -> Vec<u8> {
        let entries = self
            .metadata
            .iter()
            .filter(|(key, _)| key.as_str() != "status")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain([("status", self.status.as_str())]);
        let block = encode_entries(entries);
        let mut out = Vec::with_capacity(block.len() + self.body.len());
        out.extend_from_slice(block.as_bytes());
        out.extend_from_slice(&self.body);
        out
    }

    /// Parses a whole response under the default client limits.
    pub fn parse(bytes: &[u8]) -> Result<Response, Error> {
        Response::parse_with_limits(bytes, ResponseLimits::default())
    }

    pub fn parse_with_limits(bytes: &[u8], limits: ResponseLimits) -> Result<Response, Error> {
        let mut assembler = Assembler::new(Mode::Response(limits));
        for piece in bytes.chunks(READ_CHUNK) {
            assembler.push(piece)?;
        }
        assembler.finish_response()
    }
}

/// Reads one request to the end of the stream, refusing it as soon as a part exceeds its
/// limit: at most the limits plus one read chunk are ever held.
pub async fn read_request<R>(reader: &mut R, limits: RequestLimits) -> Result<Request, Error>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let mut assembler = Assembler::new(Mode::Request(limits));
    read_all(reader, &mut assembler).await?;
    assembler.finish_request()
}

/// A request whose line and metadata block have been read; its body has not (or not all of
/// it). What a server needs to admit a request before it buffers the body.
#[derive(Debug)]
pub struct RequestHead {
    assembler: Assembler,
    /// The stream ended with the head: nothing more to read.
    ended: bool,
}

impl RequestHead {
    /// The request so far: its line and metadata, with no body.
    pub fn request(&self) -> Request {
        let (verb, path) = self
            .assembler
            .line
            .clone()
            .expect("a head has its request line");
        Request {
            verb,
            path,
            metadata: self.assembler.metadata.clone(),
            body: Bytes::new(),
        }
    }

    /// Reads the rest of the request to the end of the stream.
    pub async fn read_body<R>(mut self, reader: &mut R) -> Result<Request, Error>
    where
        R: AsyncRead + Unpin + ?Sized,
    {
        if !self.ended {
            read_all(reader, &mut self.assembler).await?;
        }
        self.assembler.finish_request()
    }
}

/// Reads a request up to the end of its metadata block (or of the stream), refusing it as
/// soon as the line or the block exceeds its limit: at most those limits plus one read
/// chunk are held. [`RequestHead::read_body`] reads the rest.
pub async fn read_request_head<R>(
    reader: &mut R,
    limits: RequestLimits,
) -> Result<RequestHead, Error>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let mut assembler = Assembler::new(Mode::Request(limits));
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        if let BlockState::Done { .. } = assembler.block {
            return Ok(RequestHead {
                assembler,
                ended: false,
            });
        }
        let read = match reader.read(&mut chunk).await {
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(Error::read(assembler.read_op(), assembler.key(), error)),
        };
        if read == 0 {
            assembler.advance(true)?;
            return Ok(RequestHead {
                assembler,
                ended: true,
            });
        }
        assembler.push(&chunk[..read])?;
    }
}

/// Reads one response to the end of the stream (client side), under `limits`.
pub async fn read_response<R>(reader: &mut R, limits: ResponseLimits) -> Result<Response, Error>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let mut assembler = Assembler::new(Mode::Response(limits));
    read_all(reader, &mut assembler).await?;
    assembler.finish_response()
}

async fn read_all<R>(reader: &mut R, assembler: &mut Assembler) -> Result<(), Error>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let read = match reader.read(&mut chunk).await {
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(Error::read(assembler.read_op(), assembler.key(), error)),
        };
        if read == 0 {
            return Ok(());
        }
        assembler.push(&chunk[..read])?;
    }
}

/// The metadata block for `metadata`, fences included: what a WATCH event block is.
pub fn encode_metadata_block(metadata: &Metadata) -> String {
    encode_entries(metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

// ---------------------------------------------------------------------------------------
// Framing: one state machine shared by the synchronous parsers and the async readers, so
// both refuse the same input for the same reason.

#[derive(Clone, Copy, Debug)]
enum Mode {
    Request(RequestLimits),
    Response(ResponseLimits),
}

#[derive(Clone, Copy, Debug)]
enum BlockState {
    /// Not enough bytes after the request line to tell whether a block follows.
    Undecided,
    /// Inside a block; the closing fence is searched from `search_from`.
    Open { search_from: usize },
    /// The block (if any) is parsed; the body starts at `body_start`.
    Done { body_start: usize },
}

#[derive(Debug)]
struct Assembler {
    mode: Mode,
    buf: Vec<u8>,
    /// Request mode: the parsed request line; `line_scanned` bytes hold no LF.
    line: Option<(Verb, String)>,
    line_scanned: usize,
    /// Where the part after the request line begins.
    rest_start: usize,
    block: BlockState,
    metadata: Metadata,
}

impl Assembler {
    fn new(mode: Mode) -> Self {
        Assembler {
            mode,
            buf: Vec::new(),
            line: None,
            line_scanned: 0,
            rest_start: 0,
            block: BlockState::Undecided,
            metadata: Metadata::new(),
        }
    }

    fn parse_op(&self) -> Op {
        match self.mode {
            Mode::Request(_) => Op::ParseRequest,
            Mode::Response(_) => Op::ParseResponse,
        }
    }

    fn read_op(&self) -> Op {
        match self.mode {
            Mode::Request(_) => Op::ReadRequest,
            Mode::Response(_) => Op::ReadResponse,
        }
    }

    fn key(&self) -> &str {
        self.line.as_ref().map_or("", |(_, path)| path)
    }

    fn fail(&self, kind: ErrorKind, detail: impl Into<String>) -> Error {
        Error::new(self.parse_op(), self.key(), kind, detail)
    }

    fn metadata_limit(&self) -> usize {
        match self.mode {
            Mode::Request(limits) => limits.metadata,
            Mode::Response(limits) => limits.metadata,
        }
    }

    fn body_limit(&self) -> usize {
        match self.mode {
            Mode::Request(limits) => limits.body,
            Mode::Response(limits) => limits.body,
        }
    }

    fn push(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.buf.extend_from_slice(bytes);
        self.advance(false)
    }

    /// Moves through the message as far as the bytes allow, checking each part as soon as
    /// it is complete (or as soon as it cannot fit its limit any more).
    fn advance(&mut self, eof: bool) -> Result<(), Error> {
        let pending_line = match self.mode {
            Mode::Request(limits) if self.line.is_none() => Some(limits),
            _ => None,
        };
        if let Some(limits) = pending_line {
            let newline = self.buf[self.line_scanned..]
                .iter()
                .position(|&byte| byte == b'\n')
                .map(|offset| self.line_scanned + offset);
            match newline {
                Some(end) if end > limits.request_line => {
                    return Err(self.fail(
                        ErrorKind::TooLarge,
                        format!("request line exceeds {} bytes", limits.request_line),
                    ));
                }
                Some(end) => {
                    let line = parse_request_line(&self.buf[..end])
                        .map_err(|detail| self.fail(ErrorKind::Malformed, detail))?;
                    self.line = Some(line);
                    self.rest_start = end + 1;
                }
                None => {
                    self.line_scanned = self.buf.len();
                    if self.buf.len() > limits.request_line {
                        return Err(self.fail(
                            ErrorKind::TooLarge,
                            format!("request line exceeds {} bytes", limits.request_line),
                        ));
                    }
                    if eof {
                        let detail = if self.buf.is_empty() {
                            "empty request"
                        } else {
                            "request line does not end with a newline"
                        };
                        return Err(self.fail(ErrorKind::Malformed, detail));
                    }
                    return Ok(());
                }
            }
        }

        if let BlockState::Undecided = self.block {
            let rest = &self.buf[self.rest_start..];
            if rest.len() < FENCE.len() && !eof {
                return Ok(());
            }
            if rest.starts_with(FENCE) {
                self.block = BlockState::Open {
                    search_from: self.rest_start + FENCE.len() - 1,
                };
            } else if let Mode::Response(_) = self.mode {
                return Err(self.fail(
                    ErrorKind::Malformed,
                    "response does not start with a `---` line",
                ));
            } else {
                self.block = BlockState::Done {
                    body_start: self.rest_start,
                };
            }
        }

        if let BlockState::Open { search_from } = self.block {
            let text_start = self.rest_start + FENCE.len();
            let limit = self.metadata_limit();
            let closing = find(&self.buf[search_from..], CLOSING_FENCE).map(|at| search_from + at);
            match closing {
                Some(at) => {
                    self.close_block(text_start..at.max(text_start), at + CLOSING_FENCE.len())?
                }
                None if self.buf.len() >= text_start + limit + CLOSING_FENCE.len() => {
                    return Err(self.fail(
                        ErrorKind::TooLarge,
                        format!("metadata block exceeds {limit} bytes"),
                    ));
                }
                None if eof => {
                    let len = self.buf.len();
                    if self.buf.ends_with(CLOSING_FENCE_AT_END)
                        && len - CLOSING_FENCE_AT_END.len() >= search_from
                    {
                        let text_end = (len - CLOSING_FENCE_AT_END.len()).max(text_start);
                        self.close_block(text_start..text_end, len)?;
                    } else {
                        return Err(self.fail(
                            ErrorKind::Malformed,
                            "metadata block is not closed by a `---` line",
                        ));
                    }
                }
                None => {
                    // Keep an overlap so a fence split across reads is still found.
                    let resume = self.buf.len().saturating_sub(CLOSING_FENCE.len() - 1);
                    self.block = BlockState::Open {
                        search_from: resume.max(search_from),
                    };
                    return Ok(());
                }
            }
        }

        if let BlockState::Done { body_start } = self.block {
            let limit = self.body_limit();
            if self.buf.len() - body_start > limit {
                return Err(self.fail(ErrorKind::TooLarge, format!("body exceeds {limit} bytes")));
            }
        }
        Ok(())
    }

    fn close_block(
        &mut self,
        text: std::ops::Range<usize>,
        body_start: usize,
    ) -> Result<(), Error> {
        let limit = self.metadata_limit();
        if text.len() > limit {
            return Err(self.fail(
                ErrorKind::TooLarge,
                format!("metadata block exceeds {limit} bytes"),
            ));
        }
        let text = std::str::from_utf8(&self.buf[text])
            .map_err(|_| self.fail(ErrorKind::Malformed, "metadata block is not valid UTF-8"))?;
        self.metadata = parse_block(text)
            .map_err(|detail| self.fail(ErrorKind::Malformed, format!("metadata {detail}")))?;
        self.block = BlockState::Done { body_start };
        Ok(())
    }

    /// Ends the message and hands back its metadata and body.
    fn finish(&mut self) -> Result<(Metadata, Bytes), Error> {
        self.advance(true)?;
        let BlockState::Done { body_start } = self.block else {
            unreachable!("advance(eof) always decides the block or fails");
        };
        let body = Bytes::from(std::mem::take(&mut self.buf)).slice(body_start..);
        Ok((std::mem::take(&mut self.metadata), body))
    }

    fn finish_request(mut self) -> Result<Request, Error> {
        let (metadata, body) = self.finish()?;
        let (verb, path) = self.line.take().expect("a finished request has its line");
        Ok(Request {
            verb,
            path,
            metadata,
            body,
        })
    }

    fn finish_response(mut self) -> Result<Response, Error> {
        let (mut metadata, body) = self.finish()?;
        let status = metadata
            .remove("status")
            .ok_or_else(|| self.fail(ErrorKind::Malformed, "response has no status"))?;
        let status = Status::from_name(&status)
            .ok_or_else(|| self.fail(ErrorKind::Malformed, format!("unknown status {status:?}")))?;
        Ok(Response {
            status,
            metadata,
            body,
        })
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn parse_request_line(line: &[u8]) -> Result<(Verb, String), String> {
    let Some(space) = line.iter().position(|&byte| byte == b' ') else {
        return Err("request line is not `VERB /path`".to_owned());
    };
    let verb_name = &line[..space];
    let verb = std::str::from_utf8(verb_name)
        .ok()
        .and_then(Verb::from_name)
        .ok_or_else(|| format!("unknown verb {:?}", String::from_utf8_lossy(verb_name)))?;
    let path = String::from_utf8(line[space + 1..].to_vec())
        .map_err(|_| "path is not valid UTF-8".to_owned())?;
    validate_path(&path)?;
    Ok((verb, path))
}

/// Checks the request-path grammar: starts with `/`, no NUL, no control character other than
/// TAB, no DEL. Canonical form (`..`, `//`) is the handlers' business, not the wire's.
pub fn validate_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("path {path:?} does not start with /"));
    }
    if let Some(bad) = path
        .chars()
        .find(|&c| (c < ' ' && c != '\t') || c == '\u{7f}')
    {
        return Err(format!(
            "path contains the control character U+{:04X}",
            u32::from(bad)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The metadata block parser.

/// Whether `c` may appear raw in a metadata block (YAML's printable set, minus the
/// characters YAML 1.1 readers treat as line breaks, minus the byte-order mark).
fn allowed_raw(c: char) -> bool {
    matches!(c, '\t' | ' '..='~' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
        && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}')
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Parses the text between the fences. Errors name the line (1 = first line of the block).
fn parse_block(text: &str) -> Result<Metadata, String> {
    let mut metadata = Metadata::new();
    if text.is_empty() {
        return Ok(metadata);
    }
    for (index, line) in text.split('\n').enumerate() {
        let number = index + 1;
        if let Some(bad) = line.chars().find(|&c| !allowed_raw(c)) {
            return Err(format!(
                "line {number}: character U+{:04X} must be escaped in a double-quoted value",
                u32::from(bad)
            ));
        }
        let content = line.trim_start_matches(is_blank);
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if content.len() != line.len() {
            return Err(format!(
                "line {number}: indented line (metadata is a flat map of strings)"
            ));
        }
        let (key, rest) = parse_key(line).map_err(|e| format!("line {number}: {e}"))?;
        let value = parse_value(rest).map_err(|e| format!("line {number}: {e}"))?;
        if metadata.contains_key(&key) {
            return Err(format!("line {number}: key {key:?} given twice"));
        }
        metadata.insert(key, value);
    }
    Ok(metadata)
}

/// Splits `key: rest`, returning the decoded key and what follows the colon.
fn parse_key(line: &str) -> Result<(String, &str), String> {
    let (key, after) = match line.chars().next() {
        Some('"') => parse_double_quoted(line)?,
        Some('\'') => parse_single_quoted(line)?,
        _ => {
            let colon = line
                .char_indices()
                .find(|&(at, c)| c == ':' && line[at + 1..].chars().next().is_none_or(is_blank))
                .map(|(at, _)| at)
                .ok_or("expected `key: value`")?;
            let key = line[..colon].trim_end_matches(is_blank);
            if key.is_empty() {
                return Err("empty key".to_owned());
            }
            check_plain(key).map_err(|e| format!("key {key:?}: {e}"))?;
            (key.to_owned(), &line[colon..])
        }
    };
    let after = after.trim_start_matches(is_blank);
    let Some(rest) = after.strip_prefix(':') else {
        return Err(format!("expected `:` after the key {key:?}"));
    };
    if !rest.chars().next().is_none_or(is_blank) {
        return Err(format!("expected a space after `{key}:`"));
    }
    Ok((key, rest))
}

fn parse_value(rest: &str) -> Result<String, String> {
    let value = rest.trim_start_matches(is_blank);
    match value.chars().next() {
        None | Some('#') => Ok(String::new()),
        Some('"') => {
            let (decoded, after) = parse_double_quoted(value)?;
            check_trailing(after)?;
            Ok(decoded)
        }
        Some('\'') => {
            let (decoded, after) = parse_single_quoted(value)?;
            check_trailing(after)?;
            Ok(decoded)
        }
        Some(_) => {
            let end = value
                .char_indices()
                .find(|&(at, c)| c == '#' && at > 0 && value[..at].ends_with(is_blank))
                .map_or(value.len(), |(at, _)| at);
            let plain = value[..end].trim_end_matches(is_blank);
            check_plain(plain).map_err(|e| format!("value {plain:?}: {e}"))?;
            Ok(match plain {
                "~" | "null" | "Null" | "NULL" => String::new(),
                _ => plain.to_owned(),
            })
        }
    }
}

/// Refuses a plain scalar that a YAML reader would not read as this same string.
fn check_plain(plain: &str) -> Result<(), &'static str> {
    let mut chars = plain.chars();
    let first = chars.next().ok_or("empty")?;
    let second = chars.next();
    if matches!(
        first,
        ',' | '['
            | ']'
            | '{'
            | '}'
            | '#'
            | '&'
            | '*'
            | '!'
            | '|'
            | '>'
            | '%'
            | '@'
            | '`'
            | '"'
            | '\''
    ) {
        return Err("starts with a YAML indicator: quote it");
    }
    if matches!(first, '-' | '?' | ':') && second.is_none_or(is_blank) {
        return Err("starts with a YAML indicator: quote it");
    }
    if plain.ends_with(':') || plain.contains(": ") || plain.contains(":\t") {
        return Err("contains `: `: quote it");
    }
    if plain.contains(" #") || plain.contains("\t#") {
        return Err("contains ` #`: quote it");
    }
    Ok(())
}

/// After a quoted value only blanks and a comment may follow.
fn check_trailing(after: &str) -> Result<(), String> {
    let trimmed = after.trim_start_matches(is_blank);
    if trimmed.is_empty() || (trimmed.starts_with('#') && trimmed.len() < after.len()) {
        Ok(())
    } else {
        Err(format!("unexpected {trimmed:?} after a quoted value"))
    }
}

/// Decodes a double-quoted scalar at the start of `text`; returns it and what follows.
fn parse_double_quoted(text: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &text[at + 1..])),
            '\\' => {
                let (_, escape) = chars
                    .next()
                    .ok_or("double-quoted value is not closed on its line")?;
                let decoded = match escape {
                    '0' => '\0',
                    'a' => '\u{7}',
                    'b' => '\u{8}',
                    't' | '\t' => '\t',
                    'n' => '\n',
                    'v' => '\u{b}',
                    'f' => '\u{c}',
                    'r' => '\r',
                    'e' => '\u{1b}',
                    ' ' => ' ',
                    '"' => '"',
                    '/' => '/',
                    '\\' => '\\',
                    'N' => '\u{85}',
                    '_' => '\u{a0}',
                    'L' => '\u{2028}',
                    'P' => '\u{2029}',
                    'x' | 'u' | 'U' => {
                        let width = match escape {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let mut code = 0u32;
                        for _ in 0..width {
                            let digit = chars
                                .next()
                                .and_then(|(_, d)| d.to_digit(16))
                                .ok_or_else(|| format!("bad \\{escape} escape"))?;
                            code = code * 16 + digit;
                        }
                        char::from_u32(code)
                            .ok_or_else(|| format!("\\{escape} escape names no character"))?
                    }
                    other => return Err(format!("unknown escape \\{other}")),
                };
                out.push(decoded);
            }
            other => out.push(other),
        }
    }
    Err("double-quoted value is not closed on its line".to_owned())
}

/// Decodes a single-quoted scalar at the start of `text`; returns it and what follows.
fn parse_single_quoted(text: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((at, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().is_some_and(|&(_, next)| next == '\'') {
                chars.next();
                out.push('\'');
            } else {
                return Ok((out, &text[at + 1..]));
            }
        } else {
            out.push(c);
        }
    }
    Err("single-quoted value is not closed on its line".to_owned())
}

// ---------------------------------------------------------------------------------------
// The metadata block encoder: the reference encoder's (go-yaml v3) key order and quoting.

fn encode_entries<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut entries: Vec<(&str, &str)> = entries.collect();
    sort_tolerating(&mut entries, |a, b| reference_key_order(a.0, b.0));
    let mut out = String::from("---\n");
    for (key, value) in entries {
        write_scalar(&mut out, key);
        out.push_str(": ");
        write_scalar(&mut out, value);
        out.push('\n');
    }
    out.push_str("---\n");
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
}

fn write_scalar(out: &mut String, text: &str) {
    match scalar_style(text) {
        Style::Plain => out.push_str(text),
        Style::SingleQuoted => {
            out.push('\'');
            out.push_str(&text.replace('\'', "''"));
            out.push('\'');
        }
        Style::DoubleQuoted => write_double_quoted(out, text),
    }
}

/// Printable as YAML emitters judge it (TAB is not: it is escaped).
fn is_printable(c: char) -> bool {
    matches!(c, '\n' | ' '..='~' | '\u{85}' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
        && c != '\u{FEFF}'
}

fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn scalar_style(text: &str) -> Style {
    // The reference writes multi-line strings as block scalars; one double-quoted line reads
    // back the same and keeps every entry on one line.
    if text.chars().any(|c| !is_printable(c) || is_break(c)) {
        return Style::DoubleQuoted;
    }
    if resolves_to_non_string(text) || is_base60_float(text) || is_yaml11_bool(text) {
        return Style::DoubleQuoted;
    }
    if plain_allowed(text) {
        Style::Plain
    } else {
        Style::SingleQuoted
    }
}

/// Whether an emitter may write `text` as a plain scalar in a block mapping.
fn plain_allowed(text: &str) -> bool {
    if text.is_empty() || text.starts_with("---") || text.starts_with("...") {
        return false;
    }
    if text.starts_with(' ') || text.ends_with(' ') {
        return false;
    }
    let chars: Vec<char> = text.chars().collect();
    for (index, &c) in chars.iter().enumerate() {
        let followed_by_blank = chars.get(index + 1).is_none_or(|&next| next == ' ');
        let preceded_by_blank = index == 0 || chars[index - 1] == ' ';
        let indicator = if index == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => true,
                '?' | ':' | '-' => followed_by_blank,
                _ => false,
            }
        } else {
            match c {
                ':' => followed_by_blank,
                '#' => preceded_by_blank,
                _ => false,
            }
        };
        if indicator {
            return false;
        }
    }
    true
}

fn write_double_quoted(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        let escape = match c {
            '\0' => Some('0'),
            '\u{7}' => Some('a'),
            '\u{8}' => Some('b'),
            '\t' => Some('t'),
            '\n' => Some('n'),
            '\u{b}' => Some('v'),
            '\u{c}' => Some('f'),
            '\r' => Some('r'),
            '\u{1b}' => Some('e'),
            '"' => Some('"'),
            '\\' => Some('\\'),
            '\u{85}' => Some('N'),
            '\u{2028}' => Some('L'),
            '\u{2029}' => Some('P'),
            _ => None,
        };
        match escape {
            Some(letter) => {
                out.push('\\');
                out.push(letter);
            }
            None if is_printable(c) => out.push(c),
            None => {
                let code = u32::from(c);
                let _ = match code {
                    0..=0xFF => write!(out, "\\x{code:02X}"),
                    0x100..=0xFFFF => write!(out, "\\u{code:04X}"),
                    _ => write!(out, "\\U{code:08X}"),
                };
            }
        }
    }
    out.push('"');
}

/// Whether a YAML reader resolves the plain scalar `text` to something other than a string
/// (null, bool, int, float, timestamp, merge key), following the reference encoder's rules.
fn resolves_to_non_string(text: &str) -> bool {
    const SPECIAL: [&str; 24] = [
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", ".nan",
        ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
        "-.INF", "<<",
    ];
    if SPECIAL.contains(&text) {
        return true;
    }
    match text.as_bytes()[0] {
        b'.' => is_float_syntax(text) && finite(text),
        b'+' | b'-' | b'0'..=b'9' => {
            if is_timestamp(text) {
                return true;
            }
            let plain: String = text.chars().filter(|&c| c != '_').collect();
            fits_int(&plain) || (is_float_syntax(&plain) && finite(&plain))
        }
        _ => false,
    }
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_float_syntax(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    let digits = |from: usize| {
        bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let integer = digits(at);
    at += integer;
    if bytes.get(at) == Some(&b'.') {
        let fraction = digits(at + 1);
        if integer == 0 && fraction == 0 {
            return false;
        }
        at += 1 + fraction;
    } else if integer == 0 {
        return false;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let exponent = digits(at);
        if exponent == 0 {
            return false;
        }
        at += exponent;
    }
    at == bytes.len()
}

/// A float that overflows is not a float to the reference reader: it stays a string.
fn finite(text: &str) -> bool {
    text.parse::<f64>().is_ok_and(f64::is_finite)
}

/// Whether `text` is an integer (optional sign; `0x`, `0o`, `0b` or leading-`0` octal
/// prefixes) that fits 64 bits, signed or unsigned.
fn fits_int(text: &str) -> bool {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = unsigned.to_ascii_lowercase();
    let (radix, digits) = if let Some(hex) = lower.strip_prefix("0x") {
        (16, hex)
    } else if let Some(octal) = lower.strip_prefix("0o") {
        (8, octal)
    } else if let Some(binary) = lower.strip_prefix("0b") {
        (2, binary)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return false;
    }
    match u128::from_str_radix(digits, radix) {
        Ok(value) if negative => value <= 1u128 << 63,
        Ok(value) => value <= u128::from(u64::MAX),
        Err(_) => false,
    }
}

/// `YYYY-M-D`, `YYYY-M-D[Tt]h:m:s[.frac](Z|±hh:mm)` or `YYYY-M-D h:m:s[.frac]`, with the
/// calendar checked, as the reference reader recognises timestamps.
fn is_timestamp(text: &str) -> bool {
    struct Cursor<'a> {
        bytes: &'a [u8],
        at: usize,
    }
    impl Cursor<'_> {
        fn number(&mut self, min: usize, max: usize) -> Option<u32> {
            let count = self.bytes[self.at..]
                .iter()
                .take(max)
                .take_while(|b| b.is_ascii_digit())
                .count();
            if count < min {
                return None;
            }
            // Saturating: a fraction may have any number of digits, and only small fields
            // (year, month, day, time, zone) are ever compared.
            let value = self.bytes[self.at..self.at + count]
                .iter()
                .fold(0u32, |acc, b| {
                    acc.saturating_mul(10).saturating_add(u32::from(b - b'0'))
                });
            self.at += count;
            Some(value)
        }
        fn eat(&mut self, byte: u8) -> bool {
            let found = self.bytes.get(self.at) == Some(&byte);
            self.at += usize::from(found);
            found
        }
        fn done(&self) -> bool {
            self.at == self.bytes.len()
        }
    }

    let mut cursor = Cursor {
        bytes: text.as_bytes(),
        at: 0,
    };
    let Some(year) = cursor.number(4, 4) else {
        return false;
    };
    if !cursor.eat(b'-') {
        return false;
    }
    let (Some(month), true, Some(day)) =
        (cursor.number(1, 2), cursor.eat(b'-'), cursor.number(1, 2))
    else {
        return false;
    };
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return false;
    }
    if cursor.done() {
        return true;
    }
    let zoned = match cursor.bytes[cursor.at] {
        b'T' | b't' => true,
        b' ' => false,
        _ => return false,
    };
    cursor.at += 1;
    let time = (
        cursor.number(1, 2),
        cursor.eat(b':'),
        cursor.number(1, 2),
        cursor.eat(b':'),
        cursor.number(1, 2),
    );
    let (Some(hour), true, Some(minute), true, Some(second)) = time else {
        return false;
    };
    if hour > 23 || minute > 59 || second > 59 {
        return false;
    }
    if cursor.eat(b'.') && cursor.number(1, usize::MAX).is_none() {
        return false;
    }
    if !zoned {
        return cursor.done();
    }
    if cursor.eat(b'Z') {
        return cursor.done();
    }
    if !(cursor.eat(b'+') || cursor.eat(b'-')) {
        return false;
    }
    let zone = (cursor.number(2, 2), cursor.eat(b':'), cursor.number(2, 2));
    matches!(zone, (Some(hours), true, Some(minutes)) if hours <= 24 && minutes <= 60)
        && cursor.done()
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// YAML 1.1 sexagesimal numbers (`1:20`, `-3:25:45.5`), which older readers take as floats.
fn is_base60_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    if !bytes.get(at).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    at += 1;
    while bytes
        .get(at)
        .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
    {
        at += 1;
    }
    let mut groups = 0;
    while bytes.get(at) == Some(&b':') {
        at += 1;
        match (bytes.get(at), bytes.get(at + 1)) {
            (Some(b'0'..=b'5'), Some(b'0'..=b'9')) => at += 2,
            (Some(b'0'..=b'9'), _) => at += 1,
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        while bytes
            .get(at)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
        {
            at += 1;
        }
    }
    at == bytes.len()
}

/// YAML 1.1 booleans that YAML 1.2 readers take as strings; quoted so both agree.
fn is_yaml11_bool(text: &str) -> bool {
    matches!(
        text,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "on"
            | "On"
            | "ON"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "off"
            | "Off"
            | "OFF"
    )
}

/// Sorts `items` by `order`, stably, in O(n log n), without assuming `order` is a total
/// order: the reference's key order is not one for some keys (long digit runs overflow,
/// leading zeros), and the standard sorts may panic on such an order, which a document's
/// keys must never make an encoder do. Where `order` is total the result is the standard
/// sort's. A bottom-up merge sort: the standard library has no sort that tolerates this.
fn sort_tolerating<T: Copy>(items: &mut Vec<T>, order: impl Fn(&T, &T) -> Ordering) {
    let n = items.len();
    let mut from = items.clone();
    let mut to = Vec::with_capacity(n);
    let mut width = 1;
    while width < n {
        to.clear();
        for start in (0..n).step_by(2 * width) {
            let middle = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut left, mut right) = (start, middle);
            while left < middle && right < end {
                // The left run wins ties, which keeps the sort stable.
                if order(&from[right], &from[left]) == Ordering::Less {
                    to.push(from[right]);
                    right += 1;
                } else {
                    to.push(from[left]);
                    left += 1;
                }
            }
            to.extend_from_slice(&from[left..middle]);
            to.extend_from_slice(&from[right..end]);
        }
        std::mem::swap(&mut from, &mut to);
        width *= 2;
    }
    *items = from;
}

/// The reference encoder's key order: letters compare by code point, a letter sorts after a
/// non-letter (before it right after a digit), and digit runs compare by numeric value.
fn reference_key_order(a: &str, b: &str) -> Ordering {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut after_digit = false;
    for index in 0..a.len().min(b.len()) {
        let (ca, cb) = (a[index], b[index]);
        if ca == cb {
            after_digit = ca.is_numeric();
            continue;
        }
        let (a_letter, b_letter) = (ca.is_alphabetic(), cb.is_alphabetic());
        if a_letter && b_letter {
            return ca.cmp(&cb);
        }
        if a_letter || b_letter {
            let a_first = if after_digit { a_letter } else { b_letter };
            return if a_first {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let leading_zero_run = if ca == '0' || cb == '0' {
            a[..index]
                .iter()
                .rev()
                .take_while(|c| c.is_ascii_digit())
                .any(|&c| c != '0')
        } else {
            false
        };
        let run = |s: &[char]| -> (i64, usize) {
            let mut value: i64 = i64::from(leading_zero_run);
            let mut end = index;
            while let Some(digit) = s.get(end).and_then(|c| c.to_digit(10)) {
                value = value.wrapping_mul(10).wrapping_add(i64::from(digit));
                end += 1;
            }
            (value, end)
        };
        let ((a_value, a_end), (b_value, b_end)) = (run(&a), run(&b));
        if a_value != b_value {
            return a_value.cmp(&b_value);
        }
        if a_end != b_end {
            return a_end.cmp(&b_end);
        }
        return ca.cmp(&cb);
    }
    a.len().cmp(&b.len())
}

// ---------------------------------------------------------------------------------------
// WATCH blocks: a response stream of fenced metadata blocks without bodies.

/// The longest WATCH block, fences included.
pub const MAX_WATCH_BLOCK: usize = 8192;
/// The longest cursor epoch.
pub const MAX_EPOCH: usize = 64;

/// A position in a world's change feed: `<epoch>:<sequence>`. The epoch (1 to
/// [`MAX_EPOCH`] characters of `[A-Za-z0-9._-]`) names the sequence space; the sequence is
/// decimal without leading zeros, so every cursor reads back as the text it was written as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WatchCursor {
    epoch: String,
    pub sequence: u64,
}

impl WatchCursor {
    /// A cursor; `None` when the epoch breaks the grammar.
    pub fn new(epoch: impl Into<String>, sequence: u64) -> Option<WatchCursor> {
        let epoch = epoch.into();
        valid_epoch(&epoch).then_some(WatchCursor { epoch, sequence })
    }

    /// The cursor written as `text`, if it is one.
    pub fn parse(text: &str) -> Option<WatchCursor> {
        let (epoch, sequence) = text.rsplit_once(':')?;
        let canonical = sequence == "0"
            || (!sequence.is_empty()
                && !sequence.starts_with('0')
                && sequence.bytes().all(|b| b.is_ascii_digit()));
        if !canonical {
            return None;
        }
        WatchCursor::new(epoch, sequence.parse().ok()?)
    }

    pub fn epoch(&self) -> &str {
        &self.epoch
    }
}

impl fmt::Display for WatchCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.epoch, self.sequence)
    }
}

fn valid_epoch(epoch: &str) -> bool {
    (1..=MAX_EPOCH).contains(&epoch.len())
        && epoch
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// One committed change as a WATCH event block carries it (no `status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// Resume after this event with it.
    pub cursor: WatchCursor,
    pub path: String,
    /// The version created (for an archive: the current one).
    pub version: u64,
    /// `publish`, `append` or `archive`; clients skip operations they do not know.
    pub op: String,
    /// The content hash of that version.
    pub hash: Option<String>,
    pub agent: Option<String>,
}

/// One block of a WATCH stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchBlock {
    /// A block with a `status`: the acknowledgement and heartbeats (`ok`), or a terminal
    /// (`resync`, `closing`, `unauthorized`, `not-permitted`, …) ending the stream.
    Control {
        status: Status,
        cursor: Option<WatchCursor>,
    },
    /// A change.
    Event(WatchEvent),
}

impl WatchBlock {
    pub fn control(status: Status, cursor: WatchCursor) -> WatchBlock {
        WatchBlock::Control {
            status,
            cursor: Some(cursor),
        }
    }

    /// Whether the stream ends after this block: a control block whose status is not `ok`.
    pub fn is_terminal(&self) -> bool {
        matches!(self, WatchBlock::Control { status, .. } if *status != Status::Ok)
    }

    /// The block's cursor, if it carries one.
    pub fn cursor(&self) -> Option<&WatchCursor> {
        match self {
            WatchBlock::Control { cursor, .. } => cursor.as_ref(),
            WatchBlock::Event(event) => Some(&event.cursor),
        }
    }

    fn key(&self) -> String {
        match self {
            WatchBlock::Event(event) => event.path.clone(),
            WatchBlock::Control { cursor, .. } => {
                cursor.as_ref().map(ToString::to_string).unwrap_or_default()
            }
        }
    }

    /// The block's bytes, fences included. Refused: a value holding a line break
    /// ([`ErrorKind::Malformed`]) and a block over [`MAX_WATCH_BLOCK`] bytes
    /// ([`ErrorKind::TooLarge`]).
    pub fn encode(&self) -> Result<Bytes, Error> {
        let mut metadata = Metadata::new();
        match self {
            WatchBlock::Control { status, cursor } => {
                metadata.insert("status".into(), status.as_str().into());
                if let Some(cursor) = cursor {
                    metadata.insert("cursor".into(), cursor.to_string());
                }
            }
            WatchBlock::Event(event) => {
                metadata.insert("cursor".into(), event.cursor.to_string());
                metadata.insert("path".into(), event.path.clone());
                metadata.insert("version".into(), event.version.to_string());
                metadata.insert("op".into(), event.op.clone());
                if let Some(hash) = &event.hash {
                    metadata.insert("hash".into(), hash.clone());
                }
                if let Some(agent) = &event.agent {
                    metadata.insert("agent".into(), agent.clone());
                }
            }
        }
        let fail =
            |kind, detail: String| Error::new(Op::EncodeWatchBlock, self.key(), kind, detail);
        if let Some((key, _)) = metadata.iter().find(|(_, v)| v.chars().any(is_break)) {
            return Err(fail(
                ErrorKind::Malformed,
                format!("value of {key:?} holds a line break"),
            ));
        }
        let block = encode_metadata_block(&metadata);
        if block.len() > MAX_WATCH_BLOCK {
            return Err(fail(
                ErrorKind::TooLarge,
                format!("block of {} bytes exceeds {MAX_WATCH_BLOCK}", block.len()),
            ));
        }
        Ok(Bytes::from(block))
    }

    /// Reads one whole block (fences included). Unknown keys are ignored; a block with a
    /// `status` is a control block, any other needs `cursor`, `path`, `version` and `op`.
    pub fn parse(bytes: &[u8]) -> Result<WatchBlock, Error> {
        let fail =
            |detail: String| Error::new(Op::ParseWatchBlock, "", ErrorKind::Malformed, detail);
        if bytes.len() > MAX_WATCH_BLOCK {
            return Err(Error::new(
                Op::ParseWatchBlock,
                "",
                ErrorKind::TooLarge,
                format!("block of {} bytes exceeds {MAX_WATCH_BLOCK}", bytes.len()),
            ));
        }
        let text = bytes
            .strip_prefix(FENCE)
            .and_then(|rest| {
                if rest == FENCE {
                    Some(&rest[..0])
                } else {
                    rest.strip_suffix(CLOSING_FENCE)
                }
            })
            .ok_or_else(|| fail("a block is `---` lines around metadata".into()))?;
        let text =
            std::str::from_utf8(text).map_err(|_| fail("block is not valid UTF-8".into()))?;
        let mut metadata = parse_block(text).map_err(|detail| fail(format!("block {detail}")))?;
        let cursor = match metadata.remove("cursor") {
            None => None,
            Some(text) => Some(
                WatchCursor::parse(&text)
                    .ok_or_else(|| fail(format!("invalid cursor {text:?}")))?,
            ),
        };
        if let Some(status) = metadata.remove("status") {
            let status = Status::from_name(&status)
                .ok_or_else(|| fail(format!("unknown status {status:?}")))?;
            return Ok(WatchBlock::Control { status, cursor });
        }
        let mut take = |key: &str| {
            metadata
                .remove(key)
                .ok_or_else(|| fail(format!("event block has no {key}")))
        };
        let cursor = cursor.ok_or_else(|| fail("event block has no cursor".into()))?;
        let path = take("path")?;
        let version = take("version")?;
        let op = take("op")?;
        let version = version
            .parse()
            .map_err(|_| fail(format!("invalid version {version:?}")))?;
        Ok(WatchBlock::Event(WatchEvent {
            cursor,
            path,
            version,
            op,
            hash: metadata.remove("hash"),
            agent: metadata.remove("agent"),
        }))
    }
}

/// Splits a WATCH byte stream into blocks, whatever the transport's chunking.
#[derive(Debug, Default)]
pub struct WatchDecoder {
    buf: Vec<u8>,
}

impl WatchDecoder {
    pub fn new() -> WatchDecoder {
        WatchDecoder::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole block, or `None` until more bytes arrive.
    pub fn next_block(&mut self) -> Result<Option<WatchBlock>, Error> {
        let shown = FENCE.len().min(self.buf.len());
        if self.buf[..shown] != FENCE[..shown] {
            return Err(Error::new(
                Op::ParseWatchBlock,
                "",
                ErrorKind::Malformed,
                "a block does not start with a `---` line",
            ));
        }
        let end = if self.buf.len() < FENCE.len() {
            None
        } else {
            find(&self.buf[FENCE.len() - 1..], CLOSING_FENCE)
                .map(|at| FENCE.len() - 1 + at + CLOSING_FENCE.len())
        };
        match end {
            Some(end) => {
                let block = WatchBlock::parse(&self.buf[..end]);
                self.buf.drain(..end);
                block.map(Some)
            }
            None if self.buf.len() >= MAX_WATCH_BLOCK => Err(Error::new(
                Op::ParseWatchBlock,
                "",
                ErrorKind::TooLarge,
                format!("block exceeds {MAX_WATCH_BLOCK} bytes"),
            )),
            None => Ok(None),
        }
    }

    /// Whether bytes of an unfinished block are held (a stream ending now was cut short).
    pub fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// Reads the next block from `reader` (client side); `None` at a clean end of the stream.
pub async fn read_watch_block<R>(
    reader: &mut R,
    decoder: &mut WatchDecoder,
) -> Result<Option<WatchBlock>, Error>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let mut chunk = vec![0u8; 1024];
    loop {
        if let Some(block) = decoder.next_block()? {
            return Ok(Some(block));
        }
        let read = match reader.read(&mut chunk).await {
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(Error::read(Op::ReadWatchBlock, "", error)),
        };
        if read == 0 {
            if decoder.has_partial() {
                return Err(Error::new(
                    Op::ReadWatchBlock,
                    "",
                    ErrorKind::Malformed,
                    "the stream ended inside a block",
                ));
            }
            return Ok(None);
        }
        decoder.push(&chunk[..read]);
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt as _, ReadBuf};

    use super::*;

    fn parse_err(bytes: &[u8]) -> Error {
        Request::parse(bytes).expect_err("request should be refused")
    }

    fn assert_malformed(bytes: &[u8], detail_contains: &str) {
        let error = parse_err(bytes);
        assert_eq!(error.kind(), ErrorKind::Malformed, "{error}");
        assert_eq!(error.status(), Status::BadRequest);
        assert!(
            error.detail().contains(detail_contains),
            "{:?} should mention {detail_contains:?}",
            error.detail()
        );
    }

    fn meta(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn block_of(line: &str) -> Result<Metadata, Error> {
        Request::parse(format!("PUBLISH /a.md\n---\n{line}\n---\n").as_bytes())
            .map(|request| request.metadata)
    }

    // -- requests: golden examples ------------------------------------------------------

    #[test]
    fn parses_a_bare_request_line() {
        let request = Request::parse(b"FETCH /docs/a.md\n").unwrap();
        assert_eq!(request, Request::new(Verb::Fetch, "/docs/a.md"));
    }

    #[test]
    fn parses_every_verb() {
        for verb in Verb::ALL {
            let request = Request::parse(format!("{verb} /x\n").as_bytes()).unwrap();
            assert_eq!(request.verb, verb);
            assert_eq!(Verb::from_name(verb.as_str()), Some(verb));
        }
        assert!(Verb::Publish.is_write() && Verb::Append.is_write() && Verb::Archive.is_write());
        assert!(!Verb::Fetch.is_write() && !Verb::Watch.is_write() && !Verb::Lookup.is_write());
    }

    #[test]
    fn parses_metadata_and_body() {
        let bytes = b"PUBLISH /docs/a.md\n---\nexpected-version: 2\ntitle: \"A: b\"\ntags: alpha,wire\n---\n# A\n\ntext\n";
        let request = Request::parse(bytes).unwrap();
        assert_eq!(request.verb, Verb::Publish);
        assert_eq!(request.path, "/docs/a.md");
        assert_eq!(
            request.metadata,
            meta(&[
                ("expected-version", "2"),
                ("tags", "alpha,wire"),
                ("title", "A: b")
            ])
        );
        assert_eq!(&request.body[..], b"# A\n\ntext\n");
    }

    #[test]
    fn a_body_without_metadata_starts_right_after_the_line() {
        let request = Request::parse(b"APPEND /a.md\nmore text\n").unwrap();
        assert!(request.metadata.is_empty());
        assert_eq!(&request.body[..], b"more text\n");
        // Three dashes without a newline are body, not a fence.
        let request = Request::parse(b"PUBLISH /a.md\n---").unwrap();
        assert_eq!(&request.body[..], b"---");
    }

    #[test]
    fn a_body_that_starts_with_its_own_frontmatter_is_kept_byte_exact() {
        let bytes = b"PUBLISH /a.md\n---\nk: v\n---\n---\nx: y\n---\nbody";
        let request = Request::parse(bytes).unwrap();
        assert_eq!(request.metadata, meta(&[("k", "v")]));
        assert_eq!(&request.body[..], b"---\nx: y\n---\nbody");
    }

    #[test]
    fn an_empty_block_and_a_block_closed_at_the_end_are_accepted() {
        let request = Request::parse(b"PUBLISH /a.md\n---\n---\n---\nx").unwrap();
        assert!(request.metadata.is_empty());
        assert_eq!(&request.body[..], b"---\nx");

        let request = Request::parse(b"LIST /docs\n---\npage-size: 10\n---").unwrap();
        assert_eq!(request.metadata, meta(&[("page-size", "10")]));
        assert!(request.body.is_empty());

        let request = Request::parse(b"LIST /docs\n---\n---").unwrap();
        assert!(request.metadata.is_empty());
    }

    #[test]
    fn a_path_may_hold_tabs_spaces_and_any_printable_text() {
        let request = Request::parse("FETCH /notes/my file\t2 é.md\n".as_bytes()).unwrap();
        assert_eq!(request.path, "/notes/my file\t2 é.md");
    }

    #[test]
    fn encodes_a_request() {
        let request = Request::new(Verb::Publish, "/docs/a.md")
            .with_meta("expected-version", "0")
            .with_meta("title", "Hello")
            .with_body("# Hello\n");
        let bytes = request.encode().unwrap();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            "PUBLISH /docs/a.md\n---\nexpected-version: \"0\"\ntitle: Hello\n---\n# Hello\n"
        );
        assert_eq!(Request::parse(&bytes).unwrap(), request);
        assert_eq!(
            Request::new(Verb::Fetch, "/").encode().unwrap(),
            b"FETCH /\n".to_vec()
        );
    }

    #[test]
    fn encoding_fences_a_body_that_looks_like_a_block() {
        let request = Request::new(Verb::Publish, "/a.md").with_body("---\ntitle: x\n---\n");
        let bytes = request.encode().unwrap();
        assert_eq!(&bytes[..], b"PUBLISH /a.md\n---\n---\n---\ntitle: x\n---\n");
        assert_eq!(Request::parse(&bytes).unwrap(), request);
    }

    #[test]
    fn encoding_refuses_a_bad_path() {
        for path in ["", "docs/a.md", "/a\nb", "/a\0"] {
            let error = Request::new(Verb::Fetch, path).encode().unwrap_err();
            assert_eq!(error.op(), Op::EncodeRequest);
            assert_eq!(error.kind(), ErrorKind::Malformed);
            assert_eq!(error.key(), path);
        }
    }

    // -- requests: every error path -----------------------------------------------------

    #[test]
    fn refuses_bad_request_lines() {
        assert_malformed(b"", "empty request");
        assert_malformed(b"FETCH /a.md", "does not end with a newline");
        assert_malformed(b"FETCH\n", "not `VERB /path`");
        assert_malformed(b"GET /a.md\n", "unknown verb \"GET\"");
        assert_malformed(b"fetch /a.md\n", "unknown verb");
        assert_malformed(b"FETCH  /a.md\n", "does not start with /");
        assert_malformed(b"FETCH a.md\n", "does not start with /");
        assert_malformed(b"FETCH \n", "does not start with /");
        assert_malformed(b"FETCH /a\0b\n", "U+0000");
        assert_malformed(b"FETCH /a\x01b\n", "U+0001");
        assert_malformed(b"FETCH /a.md\r\n", "U+000D");
        assert_malformed(b"FETCH /a\x7fb\n", "U+007F");
        assert_malformed(b"FETCH /\xff\n", "not valid UTF-8");
        assert_malformed(b"\xff\xfe /a\n", "unknown verb");
    }

    #[test]
    fn errors_name_the_operation_the_path_and_the_status() {
        let error = parse_err(b"PUBLISH /docs/a.md\n---\nbad line\n---\n");
        assert_eq!(error.op(), Op::ParseRequest);
        assert_eq!(error.key(), "/docs/a.md");
        assert_eq!(error.kind(), ErrorKind::Malformed);
        assert_eq!(error.detail(), "metadata line 1: expected `key: value`");
        assert_eq!(
            error.to_string(),
            "mark parse request \"/docs/a.md\": malformed: metadata line 1: expected `key: value`"
        );
        let response = error.to_response();
        assert_eq!(response.status, Status::BadRequest);
        assert_eq!(
            &response.body[..],
            b"\n# Bad request\n\nmetadata line 1: expected `key: value`\n"
        );

        // Before the request line is read there is no path to name.
        assert_eq!(parse_err(b"NOPE /a\n").key(), "");
    }

    #[test]
    fn the_request_line_limit_is_4096_bytes() {
        let path = format!("/{}", "a".repeat(MAX_REQUEST_LINE - "FETCH /".len()));
        let line = format!("FETCH {path}\n");
        assert_eq!(line.len(), MAX_REQUEST_LINE + 1);
        assert_eq!(Request::parse(line.as_bytes()).unwrap().path, path);

        let too_long = format!("FETCH {path}a\n");
        let error = parse_err(too_long.as_bytes());
        assert_eq!(error.kind(), ErrorKind::TooLarge);
        assert_eq!(error.status(), Status::ServerError);
        assert!(error.message().starts_with("could not read request"));

        // No newline at all and already past the limit: too large, not "no newline".
        let error = parse_err(&vec![b'A'; MAX_REQUEST_LINE + 1]);
        assert_eq!(error.kind(), ErrorKind::TooLarge);
    }

    #[test]
    fn the_metadata_limit_is_64_kib_of_block_text() {
        let value_len = MAX_METADATA - "k: ".len();
        let exact = format!(
            "PUBLISH /a.md\n---\nk: {}\n---\nbody",
            "v".repeat(value_len)
        );
        let request = Request::parse(exact.as_bytes()).unwrap();
        assert_eq!(request.metadata["k"].len(), value_len);
        assert_eq!(&request.body[..], b"body");

        let over = format!(
            "PUBLISH /a.md\n---\nk: {}\n---\n",
            "v".repeat(value_len + 1)
        );
        assert_eq!(parse_err(over.as_bytes()).kind(), ErrorKind::TooLarge);

        // Closed only by the end of the message: the same limit.
        let over_at_end = format!("PUBLISH /a.md\n---\nk: {}\n---", "v".repeat(value_len + 1));
        assert_eq!(
            parse_err(over_at_end.as_bytes()).kind(),
            ErrorKind::TooLarge
        );

        // Never closed and already too long: too large, whatever follows.
        let unclosed = format!("PUBLISH /a.md\n---\nk: {}", "v".repeat(MAX_METADATA + 10));
        assert_eq!(parse_err(unclosed.as_bytes()).kind(), ErrorKind::TooLarge);
    }

    #[test]
    fn an_unclosed_block_is_malformed() {
        assert_malformed(b"PUBLISH /a.md\n---\nk: v\n", "not closed");
        assert_malformed(b"PUBLISH /a.md\n---\n", "not closed");
        assert_malformed(b"PUBLISH /a.md\n---\nk: v\n--", "not closed");
    }

    #[test]
    fn the_body_limit_is_1_mib() {
        let mut exact = b"PUBLISH /a.md\n---\nk: v\n---\n".to_vec();
        exact.extend(std::iter::repeat_n(b'x', MAX_BODY));
        assert_eq!(Request::parse(&exact).unwrap().body.len(), MAX_BODY);
        exact.push(b'x');
        let error = parse_err(&exact);
        assert_eq!(error.kind(), ErrorKind::TooLarge);
        assert_eq!(error.key(), "/a.md");
        assert_eq!(error.detail(), "body exceeds 1048576 bytes");

        let mut without_block = b"PUBLISH /a.md\n".to_vec();
        without_block.extend(std::iter::repeat_n(b'x', MAX_BODY + 1));
        assert_eq!(parse_err(&without_block).kind(), ErrorKind::TooLarge);
    }

    #[test]
    fn limits_are_configurable() {
        let limits = RequestLimits {
            request_line: 16,
            metadata: 8,
            body: 4,
        };
        assert!(Request::parse_with_limits(b"FETCH /abcdefghi\n", limits).is_ok());
        let kind = |bytes: &[u8]| {
            Request::parse_with_limits(bytes, limits)
                .unwrap_err()
                .kind()
        };
        assert_eq!(kind(b"FETCH /abcdefghij\n"), ErrorKind::TooLarge);
        assert_eq!(
            kind(b"FETCH /a\n---\nk: 123456\n---\n"),
            ErrorKind::TooLarge
        );
        assert!(Request::parse_with_limits(b"FETCH /a\n---\nk: 12345\n---\n", limits).is_ok());
        assert_eq!(kind(b"FETCH /a\nbody!"), ErrorKind::TooLarge);
        assert!(Request::parse_with_limits(b"FETCH /a\nbody", limits).is_ok());
    }

    // -- the metadata grammar -----------------------------------------------------------

    #[test]
    fn metadata_values_are_kept_as_written() {
        let parsed = block_of(
            "version: 3\nflag: true\nratio: 0.7\nwhen: 2026-01-01T00:00:00Z\nhex: 0x1F\nword: hello world\nurl: http://x/y?a=b#frag\ncolon: a:b\ndash: -x",
        )
        .unwrap();
        assert_eq!(
            parsed,
            meta(&[
                ("colon", "a:b"),
                ("dash", "-x"),
                ("flag", "true"),
                ("hex", "0x1F"),
                ("ratio", "0.7"),
                ("url", "http://x/y?a=b#frag"),
                ("version", "3"),
                ("when", "2026-01-01T00:00:00Z"),
                ("word", "hello world"),
            ])
        );
    }

    #[test]
    fn null_words_and_empty_values_decode_to_empty_strings() {
        let parsed =
            block_of("a:\nb: ~\nc: null\nd: Null\ne: NULL\nf: # only a comment\ng: nil").unwrap();
        assert_eq!(
            parsed,
            meta(&[
                ("a", ""),
                ("b", ""),
                ("c", ""),
                ("d", ""),
                ("e", ""),
                ("f", ""),
                ("g", "nil")
            ])
        );
    }

    #[test]
    fn quoted_values_comments_and_blank_lines() {
        let parsed = block_of(concat!(
            "# a comment line\n",
            "\n",
            "   \n",
            "  # an indented comment\n",
            "a: \"x: y # not a comment\"   # a comment\n",
            "b: 'it''s'\n",
            "c: \"tab\\there\\nnew \\\"q\\\" \\\\ \\x41\\u00e9\\U0001F600\\N\\_\\L\\P\\0\\a\\b\\v\\f\\r\\e\\ \\/\"\n",
            "d: plain # trailing comment\n",
            "e: a#b\n",
            "'quoted key': 1\n",
            "\"dq key\" : 2\n",
            "f:\tafter a tab",
        ))
        .unwrap();
        assert_eq!(parsed["a"], "x: y # not a comment");
        assert_eq!(parsed["b"], "it's");
        assert_eq!(
            parsed["c"],
            "tab\there\nnew \"q\" \\ Aé😀\u{85}\u{a0}\u{2028}\u{2029}\0\u{7}\u{8}\u{b}\u{c}\r\u{1b} /"
        );
        assert_eq!(parsed["d"], "plain");
        assert_eq!(parsed["e"], "a#b");
        assert_eq!(parsed["quoted key"], "1");
        assert_eq!(parsed["dq key"], "2");
        assert_eq!(parsed["f"], "after a tab");
        assert_eq!(parsed.len(), 8);
    }

    #[test]
    fn refuses_metadata_that_is_not_a_flat_string_map() {
        let cases: &[(&str, &str)] = &[
            ("a: b\n  c: d", "line 2: indented"),
            ("a:\n  - x", "indented"),
            ("- x", "expected `key: value`"),
            ("just text", "expected `key: value`"),
            ("key:value", "expected `key: value`"),
            ("...", "expected `key: value`"),
            (": v", "empty key"),
            ("a: 1\na: 2", "line 2: key \"a\" given twice"),
            ("a: [1, 2]", "indicator"),
            ("a: {b: c}", "indicator"),
            ("a: &anchor x", "indicator"),
            ("a: *alias", "indicator"),
            ("a: !tag x", "indicator"),
            ("a: |", "indicator"),
            ("a: >", "indicator"),
            ("a: %x", "indicator"),
            ("a: @x", "indicator"),
            ("a: `x", "indicator"),
            ("a: - x", "indicator"),
            ("a: ? x", "indicator"),
            ("a: -", "indicator"),
            ("a: b: c", "`: `"),
            ("a: b:", "`: `"),
            ("&k: v", "indicator"),
            ("a #b: v", "` #`"),
            ("a: \"open", "not closed"),
            ("a: 'open", "not closed"),
            ("a: \"bad \\q\"", "unknown escape \\q"),
            ("a: \"\\x4\"", "bad \\x escape"),
            ("a: \"\\uD800\"", "names no character"),
            ("a: \"x\" y", "after a quoted value"),
            ("a: \"x\"#c", "after a quoted value"),
            ("\"k\" v", "expected `:` after the key"),
            ("\"k\":v", "expected a space"),
            ("a: b\u{1}", "U+0001"),
            ("a: b\r", "U+000D"),
            ("a: \u{7f}", "U+007F"),
            ("a: \u{85}", "U+0085"),
            ("a: \u{2028}", "U+2028"),
            ("a: \u{feff}x", "U+FEFF"),
        ];
        for (line, expected) in cases {
            let error = block_of(line).expect_err(line);
            assert_eq!(error.kind(), ErrorKind::Malformed, "{line:?}");
            assert!(
                error.detail().contains(expected),
                "{line:?}: {:?} should mention {expected:?}",
                error.detail()
            );
            assert!(error.detail().starts_with("metadata line "), "{line:?}");
        }
    }

    #[test]
    fn refuses_a_block_that_is_not_utf8() {
        assert_malformed(b"PUBLISH /a.md\n---\nk: \xff\n---\n", "not valid UTF-8");
    }

    // -- responses ----------------------------------------------------------------------

    #[test]
    fn encodes_the_reference_fetch_golden() {
        let response = Response::new(Status::Ok)
            .with_meta(
                "content-hash",
                "sha256-2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
            )
            .with_meta(
                "etag",
                "69307a0f5b4c7e0dbfa3ef8aa9bd6e4d2c5a1e0b7d3c9f8e1a2b3c4d5e6f7a8b",
            )
            .with_meta("importance", "0.7")
            .with_meta("modified", "2026-01-01T00:00:00Z")
            .with_meta("tags", "alpha,wire")
            .with_meta("type", "Note")
            .with_meta("version", "3")
            .with_body("# A\n");
        let expected = concat!(
            "---\n",
            "content-hash: sha256-2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n",
            "etag: 69307a0f5b4c7e0dbfa3ef8aa9bd6e4d2c5a1e0b7d3c9f8e1a2b3c4d5e6f7a8b\n",
            "importance: \"0.7\"\n",
            "modified: \"2026-01-01T00:00:00Z\"\n",
            "status: ok\n",
            "tags: alpha,wire\n",
            "type: Note\n",
            "version: \"3\"\n",
            "---\n",
            "# A\n",
        );
        assert_eq!(String::from_utf8(response.encode()).unwrap(), expected);
        assert_eq!(Response::parse(expected.as_bytes()).unwrap(), response);
    }

    #[test]
    fn encodes_the_reference_archive_and_list_goldens() {
        let archive = Response::new(Status::Ok)
            .with_meta("archived", "true")
            .with_meta("version", "3");
        assert_eq!(
            archive.encode(),
            b"---\narchived: \"true\"\nstatus: ok\nversion: \"3\"\n---\n".to_vec()
        );
        let list = Response::new(Status::Ok)
            .with_meta("complete", "false")
            .with_meta("entries", "1")
            .with_meta("next-cursor", "AQAABS9kb2NzYS5tZA")
            .with_body("\n# Index of /docs/\n\n- [a.md](a.md)\n");
        assert_eq!(
            String::from_utf8(list.encode()).unwrap(),
            "---\ncomplete: \"false\"\nentries: \"1\"\nnext-cursor: AQAABS9kb2NzYS5tZA\nstatus: ok\n---\n\n# Index of /docs/\n\n- [a.md](a.md)\n"
        );
    }

    #[test]
    fn error_bodies_follow_the_reference() {
        assert_eq!(
            error_body(Status::NotFound, "/docs/missing.md not found"),
            "\n# Not found\n\n/docs/missing.md not found\n"
        );
        let response = Response::error(Status::Conflict, "version mismatch");
        assert_eq!(
            response.encode(),
            b"---\nstatus: conflict\n---\n\n# Conflict\n\nversion mismatch\n".to_vec()
        );
        let titles: Vec<String> = [
            Status::NotModified,
            Status::NotPermitted,
            Status::BadRequest,
            Status::ServerError,
            Status::RateLimited,
            Status::Ok,
        ]
        .into_iter()
        .map(Status::title)
        .collect();
        assert_eq!(
            titles,
            [
                "Not modified",
                "Not permitted",
                "Bad request",
                "Server error",
                "Rate limited",
                "Ok"
            ]
        );
        for status in Status::ALL {
            assert_eq!(Status::from_name(status.as_str()), Some(status));
        }
    }

    #[test]
    fn the_status_field_always_comes_from_the_status() {
        let response = Response::new(Status::NotFound).with_meta("status", "ok");
        assert_eq!(response.encode(), b"---\nstatus: not-found\n---\n".to_vec());
    }

    #[test]
    fn parses_responses_and_refuses_bad_ones() {
        let parsed =
            Response::parse(b"---\nstatus: created\nversion: \"4\"\nextra: kept\n---\n").unwrap();
        assert_eq!(parsed.status, Status::Created);
        assert_eq!(
            parsed.metadata,
            meta(&[("extra", "kept"), ("version", "4")])
        );
        assert!(parsed.body.is_empty());

        let cases: &[(&[u8], ErrorKind, &str)] = &[
            (
                b"",
                ErrorKind::Malformed,
                "does not start with a `---` line",
            ),
            (
                b"status: ok\n",
                ErrorKind::Malformed,
                "does not start with a `---` line",
            ),
            (b"---\nversion: 1\n---\n", ErrorKind::Malformed, "no status"),
            (
                b"---\nstatus: great\n---\n",
                ErrorKind::Malformed,
                "unknown status \"great\"",
            ),
            (b"---\nstatus: ok\n", ErrorKind::Malformed, "not closed"),
            (
                b"---\nstatus: [ok]\n---\n",
                ErrorKind::Malformed,
                "indicator",
            ),
        ];
        for (bytes, kind, detail) in cases {
            let error = Response::parse(bytes).unwrap_err();
            assert_eq!(error.op(), Op::ParseResponse);
            assert_eq!(error.kind(), *kind, "{error}");
            assert!(error.detail().contains(detail), "{error}");
        }

        let limits = ResponseLimits {
            metadata: 64,
            body: 3,
        };
        assert!(Response::parse_with_limits(b"---\nstatus: ok\n---\nabc", limits).is_ok());
        let error = Response::parse_with_limits(b"---\nstatus: ok\n---\nabcd", limits).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::TooLarge);
    }

    // -- the encoder's quoting ----------------------------------------------------------

    #[test]
    fn quotes_what_a_yaml_reader_would_type() {
        let cases: &[(&str, &str)] = &[
            ("ok", "ok"),
            ("alpha,wire", "alpha,wire"),
            ("AQAABS9kb2NzYS5tZA", "AQAABS9kb2NzYS5tZA"),
            ("hello world", "hello world"),
            ("it's", "it's"),
            ("a#b", "a#b"),
            ("-x", "-x"),
            ("a:b", "a:b"),
            ("1.2.3", "1.2.3"),
            ("v1", "v1"),
            ("2026-13-01", "2026-13-01"),
            ("2026-02-30", "2026-02-30"),
            ("9:61", "9:61"),
            ("1e400", "1e400"),
            ("0x", "0x"),
            ("é", "é"),
            ("3", "\"3\""),
            ("0", "\"0\""),
            ("-1", "\"-1\""),
            ("+1", "\"+1\""),
            ("0.7", "\"0.7\""),
            (".5", "\".5\""),
            ("1e5", "\"1e5\""),
            ("08", "\"08\""),
            ("0777", "\"0777\""),
            ("0x1F", "\"0x1F\""),
            ("0b101", "\"0b101\""),
            ("0o17", "\"0o17\""),
            ("1_000", "\"1_000\""),
            ("18446744073709551615", "\"18446744073709551615\""),
            ("99999999999999999999999", "\"99999999999999999999999\""),
            ("1:20", "\"1:20\""),
            ("-3:25:45.5", "\"-3:25:45.5\""),
            ("true", "\"true\""),
            ("False", "\"False\""),
            ("yes", "\"yes\""),
            ("off", "\"off\""),
            ("Y", "\"Y\""),
            ("null", "\"null\""),
            ("~", "\"~\""),
            ("", "\"\""),
            (".inf", "\".inf\""),
            ("-.Inf", "\"-.Inf\""),
            (".NaN", "\".NaN\""),
            ("<<", "\"<<\""),
            ("2026-01-01", "\"2026-01-01\""),
            ("2026-1-2", "\"2026-1-2\""),
            ("2024-02-29", "\"2024-02-29\""),
            ("2026-01-01T00:00:00Z", "\"2026-01-01T00:00:00Z\""),
            (
                "2026-01-01t10:20:30.5+02:00",
                "\"2026-01-01t10:20:30.5+02:00\"",
            ),
            ("2026-01-01 10:20:30", "\"2026-01-01 10:20:30\""),
            ("2023-02-29", "2023-02-29"),
            ("2026-01-01T00:00:00", "2026-01-01T00:00:00"),
            ("a: b", "'a: b'"),
            ("a:", "'a:'"),
            (" lead", "' lead'"),
            ("trail ", "'trail '"),
            ("'q", "'''q'"),
            ("\"q", "'\"q'"),
            ("#x", "'#x'"),
            ("a #x", "'a #x'"),
            ("- x", "'- x'"),
            ("-", "'-'"),
            ("? x", "'? x'"),
            (":x", ":x"),
            (": x", "': x'"),
            ("---x", "'---x'"),
            ("...", "'...'"),
            ("[a]", "'[a]'"),
            ("{a}", "'{a}'"),
            ("&a", "'&a'"),
            ("line\nbreak", "\"line\\nbreak\""),
            ("tab\there", "\"tab\\there\""),
            ("back\\slash", "back\\slash"),
            ("q\"uote\tx", "\"q\\\"uote\\tx\""),
            ("\u{7f}", "\"\\x7F\""),
            ("\u{80}", "\"\\x80\""),
            ("\u{85}", "\"\\N\""),
            ("\u{feff}", "\"\\uFEFF\""),
            ("\u{fffe}", "\"\\uFFFE\""),
            ("\u{2028}", "\"\\L\""),
            ("\0", "\"\\0\""),
        ];
        for (value, expected) in cases {
            let mut out = String::new();
            write_scalar(&mut out, value);
            assert_eq!(&out, expected, "encoding {value:?}");
            let parsed = block_of(&format!("k: {out}")).unwrap();
            assert_eq!(parsed["k"], *value, "reading back {out:?}");
        }
    }

    #[test]
    fn keys_sort_as_the_reference_encoder_sorts_them() {
        let mut keys = vec![
            "b", "a10", "a2", "a1b", "A", "a-b", "a_b", "ab", "v02", "v2",
        ];
        let mut by_std = keys.clone();
        by_std.sort_by(|a, b| reference_key_order(a, b));
        sort_tolerating(&mut keys, |a, b| reference_key_order(a, b));
        assert_eq!(
            keys,
            [
                "A", "a-b", "a_b", "a1b", "a2", "a10", "ab", "b", "v2", "v02"
            ]
        );
        assert_eq!(keys, by_std);
        let mut metadata = Metadata::new();
        for key in ["x10", "x9", "x1"] {
            metadata.insert(key.to_owned(), "v".to_owned());
        }
        assert_eq!(
            encode_metadata_block(&metadata),
            "---\nx1: v\nx9: v\nx10: v\n---\n"
        );
    }

    // -- the async readers --------------------------------------------------------------

    /// Hands out at most `chunk` bytes per read.
    struct Chunked {
        data: Vec<u8>,
        at: usize,
        chunk: usize,
    }

    impl AsyncRead for Chunked {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            let take = this
                .chunk
                .min(this.data.len() - this.at)
                .min(buf.remaining());
            buf.put_slice(&this.data[this.at..this.at + take]);
            this.at += take;
            Poll::Ready(Ok(()))
        }
    }

    /// Yields its bytes, then fails.
    struct FailsAfter(Vec<u8>);

    impl AsyncRead for FailsAfter {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if this.0.is_empty() {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset")));
            }
            buf.put_slice(&std::mem::take(&mut this.0));
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn reads_a_request_delivered_one_byte_at_a_time() {
        let bytes = b"PUBLISH /a.md\n---\nk: v\nn: \"2\"\n---\nbody\n---\n".to_vec();
        let mut reader = Chunked {
            data: bytes.clone(),
            at: 0,
            chunk: 1,
        };
        let request = read_request(&mut reader, RequestLimits::default())
            .await
            .unwrap();
        assert_eq!(request, Request::parse(&bytes).unwrap());
        assert_eq!(&request.body[..], b"body\n---\n");
    }

    #[tokio::test]
    async fn reads_a_response() {
        let bytes = Response::new(Status::Ok)
            .with_meta("version", "2")
            .with_body("x")
            .encode();
        let response = read_response(&mut bytes.as_slice(), ResponseLimits::default())
            .await
            .unwrap();
        assert_eq!(response.metadata["version"], "2");
        assert_eq!(&response.body[..], b"x");
    }

    #[tokio::test]
    async fn a_transport_failure_is_a_read_error() {
        let mut reader = FailsAfter(b"PUBLISH /a.md\n---\nk: v\n".to_vec());
        let error = read_request(&mut reader, RequestLimits::default())
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Read);
        assert_eq!(error.op(), Op::ReadRequest);
        assert_eq!(error.key(), "/a.md");
        assert_eq!(error.status(), Status::ServerError);
        assert_eq!(error.message(), "could not read request");
        assert!(std::error::Error::source(&error).is_some());

        let error = read_response(
            &mut FailsAfter(b"---\n".to_vec()),
            ResponseLimits::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            (error.op(), error.kind()),
            (Op::ReadResponse, ErrorKind::Read)
        );
    }

    #[tokio::test]
    async fn an_endless_stream_is_refused_without_reading_it_all() {
        let limits = RequestLimits::default();
        // An endless request line.
        let mut endless = tokio::io::repeat(b'A');
        let error = read_request(&mut endless, limits).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::TooLarge);

        // An endless metadata block, and an endless body: each stops within one read chunk
        // of its limit.
        for (prefix, limit) in [
            (&b"PUBLISH /a.md\n---\n"[..], MAX_METADATA),
            (&b"PUBLISH /a.md\n"[..], MAX_BODY),
        ] {
            let mut reader = prefix
                .chain(tokio::io::repeat(b'x'))
                .take(100 * 1024 * 1024);
            let error = read_request(&mut reader, limits).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::TooLarge, "{error}");
            let consumed = 100 * 1024 * 1024 - reader.limit() as usize;
            assert!(
                consumed <= prefix.len() + limit + 2 * READ_CHUNK,
                "read {consumed} bytes for a {limit}-byte limit"
            );
        }
    }

    #[test]
    fn a_timestamp_with_a_long_fraction_is_quoted_and_never_overflows() {
        for value in [
            "2026-01-01T00:00:00.9999999999Z",
            "2026-01-01T00:00:00.99999999999999999999999999999999Z",
            "2026-01-01 00:00:00.4294967296",
        ] {
            let response = Response::new(Status::Ok).with_meta("agent", value);
            let encoded = String::from_utf8(response.encode()).unwrap();
            assert!(
                encoded.contains(&format!("agent: \"{value}\"")),
                "{encoded}"
            );
            assert_eq!(Response::parse(encoded.as_bytes()).unwrap(), response);
        }
    }

    // -- properties ---------------------------------------------------------------------

    fn any_text(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
    }

    fn any_path() -> impl Strategy<Value = String> {
        // Characters the path grammar refuses become `x` (mapping, not filtering, so long
        // runs never exhaust proptest's reject budget).
        proptest::collection::vec(
            any::<char>().prop_map(|c| {
                if (c < ' ' && c != '\t') || c == '\u{7f}' {
                    'x'
                } else {
                    c
                }
            }),
            0..40,
        )
        .prop_map(|chars| format!("/{}", String::from_iter(chars)))
    }

    fn any_body() -> impl Strategy<Value = Vec<u8>> {
        (
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..200),
        )
            .prop_map(|(fenced, mut body)| {
                if fenced {
                    let mut with_fence = b"---\n".to_vec();
                    with_fence.append(&mut body);
                    with_fence
                } else {
                    body
                }
            })
    }

    fn any_request() -> impl Strategy<Value = Request> {
        (
            proptest::sample::select(Verb::ALL.to_vec()),
            any_path(),
            proptest::collection::btree_map(any_text(12), any_text(24), 0..8),
            any_body(),
        )
            .prop_map(|(verb, path, metadata, body)| Request {
                verb,
                path,
                metadata,
                body: Bytes::from(body),
            })
    }

    fn chunked_read(bytes: &[u8], chunk: usize) -> Result<Request, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut reader = Chunked {
            data: bytes.to_vec(),
            at: 0,
            chunk,
        };
        runtime.block_on(read_request(&mut reader, RequestLimits::default()))
    }

    /// The head first, then the body: what the QUIC listener does around admission.
    fn head_then_body(bytes: &[u8], chunk: usize) -> Result<Request, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut reader = Chunked {
            data: bytes.to_vec(),
            at: 0,
            chunk,
        };
        runtime.block_on(async {
            let head = read_request_head(&mut reader, RequestLimits::default()).await?;
            head.read_body(&mut reader).await
        })
    }

    /// The blocks of a WATCH stream pushed `chunk` bytes at a time, and whether it failed.
    fn watch_blocks(bytes: &[u8], chunk: usize) -> (Vec<WatchBlock>, bool) {
        let mut decoder = WatchDecoder::new();
        let mut blocks = Vec::new();
        for piece in bytes.chunks(chunk.max(1)) {
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

    /// Found by the `mark_request` fuzz target: a request whose keys (long digit runs that
    /// overflow, leading zeros) make the reference order intransitive made the encoder's
    /// sort panic.
    #[test]
    fn keys_the_reference_order_cannot_rank_still_encode() {
        let request = Request::parse(include_bytes!("testdata/unrankable-keys.mark"))
            .expect("the fuzzer's request parses");
        let encoded = request.encode().expect("encodes");
        assert_eq!(Request::parse(&encoded).unwrap(), request);
    }

    proptest! {
        // 512 cases unless PROPTEST_CASES asks for another count.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(512),
            ..ProptestConfig::default()
        })]

        #[test]
        fn any_keys_of_digits_and_letters_encode_and_read_back(
            keys in proptest::collection::btree_set("[0-9a-zA]{1,24}", 0..40),
        ) {
            let mut metadata = Metadata::new();
            for key in &keys {
                metadata.insert(key.clone(), "v".to_owned());
            }
            let block = encode_metadata_block(&metadata);
            let request = Request::parse(format!("PUBLISH /a.md\n{block}").as_bytes()).unwrap();
            prop_assert_eq!(request.metadata, metadata);
        }

        #[test]
        fn requests_round_trip(request in any_request()) {
            let bytes = request.encode().unwrap();
            prop_assert_eq!(Request::parse(&bytes).unwrap(), request);
        }

        #[test]
        fn responses_round_trip(
            status in proptest::sample::select(Status::ALL.to_vec()),
            metadata in proptest::collection::btree_map(
                any_text(12).prop_filter("not the status key", |k| k != "status"),
                any_text(24),
                0..8,
            ),
            body in any_body(),
        ) {
            let response = Response { status, metadata, body: Bytes::from(body) };
            prop_assert_eq!(Response::parse(&response.encode()).unwrap(), response);
        }

        #[test]
        fn timestamp_shaped_values_encode_and_read_back(
            date in "[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}",
            time in proptest::option::of("[Tt ][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}"),
            fraction in proptest::option::of("\\.[0-9]{1,40}"),
            zone in proptest::option::of("Z|[+-][0-9]{2}:[0-9]{2}"),
        ) {
            let value = format!(
                "{date}{}{}{}",
                time.unwrap_or_default(),
                fraction.unwrap_or_default(),
                zone.unwrap_or_default()
            );
            let response = Response::new(Status::Ok).with_meta("agent", value);
            prop_assert_eq!(Response::parse(&response.encode()).unwrap(), response);
        }

        #[test]
        fn arbitrary_bytes_never_panic_the_parsers(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Request::parse(&bytes);
            let _ = Response::parse(&bytes);
        }

        #[test]
        fn arbitrary_blocks_never_panic_the_parser(
            verb in proptest::sample::select(Verb::ALL.to_vec()),
            lines in proptest::collection::vec(
                proptest::string::string_regex("[ \t#:'\"a-z0-9\\\\\\-\\[{&*!|>%@`?~.]{0,16}").unwrap(),
                0..6,
            ),
            closed in any::<bool>(),
        ) {
            let mut text = format!("{verb} /a.md\n---\n{}", lines.join("\n"));
            if closed {
                text.push_str("\n---\nbody");
            }
            if let Ok(request) = Request::parse(text.as_bytes()) {
                // Whatever was accepted encodes and reads back to the same request.
                prop_assert_eq!(Request::parse(&request.encode().unwrap()).unwrap(), request);
            }
        }

        #[test]
        fn reading_the_head_first_agrees_with_the_parser(
            bytes in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..256),
                any_request().prop_map(|request| request.encode().unwrap()),
            ],
            chunk in 1usize..64,
        ) {
            let whole = Request::parse(&bytes);
            match (whole, head_then_body(&bytes, chunk)) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => prop_assert_eq!(a.kind(), b.kind()),
                (a, b) => prop_assert!(false, "parse {:?} but read {:?}", a, b),
            }
        }

        #[test]
        fn parsed_responses_encode_and_read_back(bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            proptest::string::string_regex("---\n([a-z-]{1,8}: [ -~]{0,12}\n){0,4}---\n[ -~]{0,8}")
                .unwrap()
                .prop_map(String::into_bytes),
        ]) {
            if let Ok(response) = Response::parse(&bytes) {
                prop_assert_eq!(Response::parse(&response.encode()).unwrap(), response);
            }
        }

        #[test]
        fn watch_streams_decode_alike_in_any_chunking_and_blocks_read_back(
            bytes in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..256),
                (any_path(), 0u64..1000, proptest::option::of("[ -~]{0,16}")).prop_map(
                    |(path, sequence, agent)| {
                        let block = WatchBlock::Event(WatchEvent {
                            cursor: WatchCursor::new("e1", sequence).unwrap(),
                            path,
                            version: 1,
                            op: "publish".into(),
                            hash: None,
                            agent,
                        });
                        let mut stream = block.encode().map(|b| b.to_vec()).unwrap_or_default();
                        stream.extend_from_slice(
                            &WatchBlock::control(Status::Ok, WatchCursor::new("e1", 9).unwrap())
                                .encode()
                                .unwrap(),
                        );
                        stream
                    },
                ),
            ],
            chunk in 1usize..64,
        ) {
            let (chunked, chunked_failed) = watch_blocks(&bytes, chunk);
            let (whole, whole_failed) = watch_blocks(&bytes, bytes.len().max(1));
            prop_assert_eq!(&chunked, &whole);
            prop_assert_eq!(chunked_failed, whole_failed);
            for block in whole {
                let encoded = block.encode().unwrap();
                prop_assert_eq!(WatchBlock::parse(&encoded).unwrap(), block);
            }
        }

        #[test]
        fn the_async_reader_agrees_with_the_parser(
            bytes in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..256),
                any_request().prop_map(|request| request.encode().unwrap()),
            ],
            chunk in 1usize..64,
        ) {
            let whole = Request::parse(&bytes);
            let streamed = chunked_read(&bytes, chunk);
            match (whole, streamed) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => {
                    prop_assert_eq!(a.kind(), b.kind());
                    prop_assert_eq!(a.detail(), b.detail());
                }
                (a, b) => prop_assert!(false, "parse {:?} but read {:?}", a, b),
            }
        }
    }

    fn event(sequence: u64, path: &str) -> WatchBlock {
        WatchBlock::Event(WatchEvent {
            cursor: WatchCursor::new("w1", sequence).unwrap(),
            path: path.into(),
            version: 3,
            op: "publish".into(),
            hash: Some(format!("blake3-{}", "ab".repeat(32))),
            agent: None,
        })
    }

    #[test]
    fn watch_blocks_encode_as_sorted_fenced_metadata_and_read_back() {
        let block = event(12, "/docs/a.md");
        let bytes = block.encode().unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert_eq!(
            text,
            format!(
                "---\ncursor: w1:12\nhash: blake3-{}\nop: publish\npath: /docs/a.md\nversion: \"3\"\n---\n",
                "ab".repeat(32)
            )
        );
        assert_eq!(WatchBlock::parse(&bytes).unwrap(), block);
        assert!(!block.is_terminal());

        let ack = WatchBlock::control(Status::Ok, WatchCursor::new("w1", 0).unwrap());
        assert_eq!(
            &ack.encode().unwrap()[..],
            b"---\ncursor: w1:0\nstatus: ok\n---\n"
        );
        let resync = WatchBlock::control(Status::Resync, WatchCursor::new("w1", 9).unwrap());
        assert!(resync.is_terminal() && !ack.is_terminal());
        assert_eq!(
            WatchBlock::parse(&resync.encode().unwrap()).unwrap(),
            resync
        );
    }

    #[test]
    fn watch_blocks_ignore_unknown_keys_and_refuse_what_is_not_a_block() {
        let parsed = WatchBlock::parse(
            b"---\ncursor: e:4\nop: rename\npath: /a.md\nversion: \"1\"\nnew-key: x\n---\n",
        )
        .unwrap();
        let WatchBlock::Event(parsed) = parsed else {
            panic!("an event: {parsed:?}")
        };
        assert_eq!((parsed.op.as_str(), parsed.hash), ("rename", None));
        let control = WatchBlock::parse(b"---\nstatus: closing\nretry: soon\n---\n").unwrap();
        assert_eq!(
            control,
            WatchBlock::Control {
                status: Status::Closing,
                cursor: None
            }
        );
        for bad in [
            &b"cursor: e:1\n"[..],
            b"---\npath: /a.md\nversion: \"1\"\nop: publish\n---\n",
            b"---\ncursor: e:1\npath: /a.md\nop: publish\n---\n",
            b"---\ncursor: e:01\npath: /a.md\nversion: \"1\"\nop: publish\n---\n",
            b"---\ncursor: e:1\npath: /a.md\nversion: one\nop: publish\n---\n",
            b"---\nstatus: fine\n---\n",
        ] {
            let error = WatchBlock::parse(bad).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Malformed, "{error}");
            assert_eq!(error.op(), Op::ParseWatchBlock);
        }
    }

    #[test]
    fn watch_blocks_over_the_limit_or_with_line_breaks_are_refused() {
        let mut big = event(1, "/a.md");
        if let WatchBlock::Event(event) = &mut big {
            event.agent = Some("x".repeat(MAX_WATCH_BLOCK));
        }
        let error = big.encode().unwrap_err();
        assert_eq!(
            (error.kind(), error.op(), error.key()),
            (ErrorKind::TooLarge, Op::EncodeWatchBlock, "/a.md")
        );
        let mut broken = event(1, "/a.md");
        if let WatchBlock::Event(event) = &mut broken {
            event.agent = Some("two\nlines".into());
        }
        assert_eq!(broken.encode().unwrap_err().kind(), ErrorKind::Malformed);

        let mut fits = event(1, "/a.md");
        let overhead = fits.encode().unwrap().len() + "agent: \n".len();
        if let WatchBlock::Event(event) = &mut fits {
            event.agent = Some("y".repeat(MAX_WATCH_BLOCK - overhead));
        }
        assert_eq!(fits.encode().unwrap().len(), MAX_WATCH_BLOCK);
    }

    #[test]
    fn watch_cursors_round_trip_and_follow_the_grammar() {
        for good in ["e:0", "e:7", "A.b_c-9:18446744073709551615"] {
            assert_eq!(WatchCursor::parse(good).unwrap().to_string(), good);
        }
        let longest = format!("{}:1", "e".repeat(MAX_EPOCH));
        assert!(WatchCursor::parse(&longest).is_some());
        for bad in [
            "",
            "e",
            ":1",
            "e:",
            "e:01",
            "e:+1",
            "e:-1",
            "e: 1",
            "a b:1",
            "é:1",
            "e:18446744073709551616",
        ] {
            assert_eq!(WatchCursor::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            WatchCursor::parse(&format!("{}:1", "e".repeat(MAX_EPOCH + 1))),
            None
        );
        assert_eq!(WatchCursor::new("", 1), None);
    }

    #[test]
    fn the_watch_decoder_splits_any_chunking_into_the_same_blocks() {
        let blocks = vec![
            WatchBlock::control(Status::Ok, WatchCursor::new("w", 2).unwrap()),
            event(3, "/a.md"),
            event(4, "/docs/b.md"),
            WatchBlock::control(Status::Closing, WatchCursor::new("w", 4).unwrap()),
        ];
        let stream: Vec<u8> = blocks
            .iter()
            .flat_map(|block| block.encode().unwrap().to_vec())
            .collect();
        for chunk in 1..=stream.len() {
            let mut decoder = WatchDecoder::new();
            let mut seen = Vec::new();
            for piece in stream.chunks(chunk) {
                decoder.push(piece);
                while let Some(block) = decoder.next_block().unwrap() {
                    seen.push(block);
                }
            }
            assert!(!decoder.has_partial());
            assert_eq!(seen, blocks, "chunks of {chunk}");
        }
        let mut decoder = WatchDecoder::new();
        decoder.push(b"status: ok\n");
        assert_eq!(
            decoder.next_block().unwrap_err().kind(),
            ErrorKind::Malformed
        );
        let mut decoder = WatchDecoder::new();
        decoder.push(b"---\n");
        decoder.push(&vec![b'a'; MAX_WATCH_BLOCK]);
        assert_eq!(
            decoder.next_block().unwrap_err().kind(),
            ErrorKind::TooLarge
        );
    }

    #[tokio::test]
    async fn read_watch_block_reads_blocks_until_the_stream_ends() {
        let mut stream: Vec<u8> = event(5, "/a.md").encode().unwrap().to_vec();
        stream.extend_from_slice(&event(6, "/b.md").encode().unwrap());
        let mut reader = &stream[..];
        let mut decoder = WatchDecoder::new();
        let first = read_watch_block(&mut reader, &mut decoder).await.unwrap();
        assert_eq!(first, Some(event(5, "/a.md")));
        let second = read_watch_block(&mut reader, &mut decoder).await.unwrap();
        assert_eq!(second, Some(event(6, "/b.md")));
        assert_eq!(
            read_watch_block(&mut reader, &mut decoder).await.unwrap(),
            None
        );
        let cut = &stream[..10];
        let mut reader = cut;
        let error = read_watch_block(&mut reader, &mut WatchDecoder::new())
            .await
            .unwrap_err();
        assert_eq!(
            (error.kind(), error.op()),
            (ErrorKind::Malformed, Op::ReadWatchBlock)
        );
    }
}
