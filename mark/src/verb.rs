//! The vocabulary: the eight request verbs, the response statuses and the error body.

use std::fmt;

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
