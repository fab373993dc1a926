//! What a message that could not be read, parsed or encoded reports: [`Error`], naming the
//! operation ([`Op`]), the key and one [`ErrorKind`].

use std::io;

use crate::{Response, Status};

quire_failure::names! {
    /// The operation an [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        ReadRequest => "read request",
        ParseRequest => "parse request",
        EncodeRequest => "encode request",
        ReadResponse => "read response",
        ParseResponse => "parse response",
        EncodeWatchBlock => "encode watch block",
        ParseWatchBlock => "parse watch block",
        ReadWatchBlock => "read watch block",
    }
}

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "mark";
}

quire_failure::names! {
    /// What went wrong with a message.
    #[non_exhaustive]
    pub enum ErrorKind {
        /// The bytes break the grammar: unknown verb, bad path, bad metadata block.
        Malformed => "malformed",
        /// A part exceeded its limit (request line, metadata block or body).
        TooLarge => "too large",
        /// The transport failed while the message was read.
        Read => "read failed",
    }
}

quire_failure::error_type! {
    /// A message that could not be read, parsed or encoded: `mark <op> "<key>": <kind>:
    /// <detail>`; the key is the request path when the request line had been read, else empty.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Error(Op, ErrorKind);
}

impl Error {
    pub(crate) fn read(op: Op, key: impl Into<String>, source: io::Error) -> Self {
        let detail = source.to_string();
        Error::new(op, key, ErrorKind::Read, detail).with_source(source)
    }

    /// The status a server answers this error with: `bad-request` for grammar errors,
    /// `server-error` for oversize input and read failures (as the reference does).
    pub fn status(&self) -> Status {
        match self.kind() {
            ErrorKind::Malformed => Status::BadRequest,
            ErrorKind::TooLarge | ErrorKind::Read => Status::ServerError,
        }
    }

    /// The message for the error body: the grammar problem for `bad-request`, else the
    /// reference's "could not read request" plus what was exceeded.
    pub fn message(&self) -> String {
        match self.kind() {
            ErrorKind::Malformed => self.detail().to_owned(),
            ErrorKind::TooLarge => format!("could not read request: {}", self.detail()),
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
