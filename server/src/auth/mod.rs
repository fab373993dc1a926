//! Capability tokens: who may publish where, and which paths need a token to read.
//!
//! # Tokens
//!
//! A token is a random secret with a recognisable prefix (`quire_` and 43 base64url
//! characters: 256 bits from the operating system). Clients send it as the `auth` metadata
//! field (or an HTTP bearer header); the server hashes what it receives and looks the hash
//! up. Only hashes are stored: `sha256-` followed by 64 lowercase hex digits of SHA-256 over
//! the secret's bytes. SHA-256 rather than blake3 because the hash format is the reference's,
//! so an existing tokens file keeps working, and the algorithm is named in the value, so
//! another can be added without ambiguity; speed is irrelevant at one hash per request. The
//! lookup compares the presented hash with every stored hash in constant time.
//!
//! # The tokens file (TOML, strict: unknown keys, bad values and duplicates are refused with
//! their line)
//!
//! ```toml
//! [tokens.alice]                       # the label, used in audit logs
//! hash = "sha256-…"                    # required
//! operations = ["publish", "read"]     # required, non-empty
//! paths = ["/docs/**", "/notes/*.md"]  # required, non-empty
//! expires = "2027-01-01T00:00:00Z"     # optional, RFC 3339 (quoted or a TOML datetime)
//! ```
//!
//! # Path patterns
//!
//! Patterns start with `/` and match segment by segment, so nothing but `**` ever crosses a
//! `/`:
//! - in a segment, `*` matches any run of characters, `?` one character, `[abc]`/`[a-z]`/
//!   `[!a]` one character of a class, `\` escapes; braces are refused (write `[{]`);
//! - a trailing `/**` matches every path strictly below the prefix (`/docs/**` matches
//!   `/docs/` and `/docs/a/b.md`, not `/docs`); `/**` alone matches every path;
//! - an infix `/**/` matches zero or more segments (`/docs/**/a.md` matches `/docs/a.md`
//!   and `/docs/x/y/a.md`);
//! - a pattern ending in `/` names a directory: it matches the directory's bare name and
//!   everything below (`/team/` matches `/team`, `/team/` and `/team/x.md`);
//! - at most one `**` per pattern, only as a whole segment, and not in a directory pattern.
//!
//! # Rules
//!
//! - Writes (PUBLISH, APPEND, ARCHIVE) need a token with `publish` on the path. With no
//!   tokens configured for a world, every write is refused ([`Denial::NoAuthConfigured`]).
//! - Reads are public unless protected: a path is protected when some configured token
//!   grants `read` on a pattern matching it. A protected path needs a valid token with
//!   `read` on it; on a public path any token, even a bad one, is ignored.
//!   [`AGENT_MANIFEST_PATH`] is always public.
//! - [`TokenStore::authorize`] checks in this order: no token, unknown token, expired
//!   (strictly after `expires`), operation not granted, no pattern matches.
//! - Callers pass the path canonicalised, keeping a trailing `/` on directory paths (except
//!   `/`) so directory patterns apply to listings; the time comes from the caller's clock.
//! - [`TokenRegistry::reload`] re-reads the file and swaps the set atomically; requests in
//!   flight keep the set they started with, and a failed reload keeps the old set.
//!
//! # Modules
//!
//! - `secret`: [`TokenSecret`] and [`TokenHash`];
//! - `pattern`: [`PathPattern`];
//! - `file`: the tokens file ([`TokenStore::from_toml`], [`TokenEntrySpec`]);
//! - `rules`: [`Token`], [`TokenStore`], [`Denial`], [`Access`];
//! - `registry`: [`TokenRegistry`] and [`Authorizer`].

use std::fmt;

use serde::{Deserialize, Serialize};

mod file;
mod pattern;
mod registry;
mod rules;
mod secret;

#[cfg(test)]
mod testing;

pub use file::TokenEntrySpec;
pub use pattern::PathPattern;
pub use registry::{Authorizer, TokenRegistry};
pub use rules::{Access, Denial, Token, TokenStore};
pub use secret::{HASH_PREFIX, TOKEN_PREFIX, TokenHash, TokenSecret};

/// A path every reader may fetch, whatever the tokens say.
pub const AGENT_MANIFEST_PATH: &str = "/.well-known/agent-manifest.md";

quire_failure::names! {
    /// The operation an [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        Load => "load",
        Reload => "reload",
        Generate => "generate",
    }
}

/// What went wrong: the file breaks its rules, or could not be read or written.
pub use quire_failure::FileKind as ErrorKind;

/// A tokens failure: `tokens <op> "<key>": <kind>: <detail>`; the key is the file path.
pub type Error = quire_failure::Failure<Op, ErrorKind>;

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "tokens";
}

/// An operation a token may grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Read,
    Publish,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Publish => "publish",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
