//! Requests and responses: their size limits, the synchronous parsers and encoders, the async
//! readers, and the one framing state machine both share, so both refuse the same input for
//! the same reason.

use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::metadata::{
    CLOSING_FENCE, CLOSING_FENCE_AT_END, FENCE, encode_entries, find, parse_block,
};
use crate::{Error, ErrorKind, Metadata, Op, Status, Verb, error_body};

/// The longest request line, in bytes, without its LF.
pub const MAX_REQUEST_LINE: usize = 4096;
/// The longest metadata block text (between the fences), in bytes.
pub const MAX_METADATA: usize = 64 * 1024;
/// The longest request body, in bytes.
pub const MAX_BODY: usize = 1024 * 1024;
/// The longest response body a client accepts by default, in bytes: a generated listing or
/// version history may exceed a document's 1 MiB.
pub const MAX_RESPONSE_BODY: usize = 8 * 1024 * 1024;

/// How much one read asks of the transport; also the most a reader holds beyond the limits.
const READ_CHUNK: usize = 16 * 1024;

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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tokio::io::AsyncReadExt as _;

    use super::*;
    use crate::testing::*;

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

    proptest! {
        #![proptest_config(crate::testing::proptest_config())]

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
        fn arbitrary_bytes_never_panic_the_parsers(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Request::parse(&bytes);
            let _ = Response::parse(&bytes);
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
}
