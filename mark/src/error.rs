//! What a message that could not be read, parsed or encoded reports: [`Error`], naming the
//! operation ([`Op`]), the key and one [`ErrorKind`].

use std::fmt;
use std::io;

use crate::{Response, Status};

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

    pub(crate) fn read(op: Op, key: impl Into<String>, source: io::Error) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use crate::*;

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
}
