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
//! This file is long (over 1,500 lines) because it holds tokens, the tokens file, path
//! patterns and their tests together; patterns and the file format are its seams for a split.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use globset::{GlobBuilder, GlobMatcher};
use rand::TryRngCore as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::describe_toml_error;
use crate::mark::Status;

/// What every generated token starts with, so a leaked secret is recognisable.
pub const TOKEN_PREFIX: &str = "quire_";
/// What every stored hash starts with: the algorithm's name.
pub const HASH_PREFIX: &str = "sha256-";
/// Random bytes in a generated token.
const TOKEN_RANDOM_BYTES: usize = 32;
/// A path every reader may fetch, whatever the tokens say.
pub const AGENT_MANIFEST_PATH: &str = "/.well-known/agent-manifest.md";

/// The operation an [`Error`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    Load,
    Reload,
    Generate,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Load => "load",
            Op::Reload => "reload",
            Op::Generate => "generate",
        })
    }
}

/// What went wrong with tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The tokens file breaks the format or the rules.
    Invalid,
    /// The file or the random source could not be read.
    Io,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::Io => "i/o failure",
        })
    }
}

/// A tokens failure: `tokens <op> "<key>": <kind>: <detail>`; the key is the file path.
pub type Error = crate::failure::Failure<Op, ErrorKind>;

impl crate::failure::Subject for Op {
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

/// A token's secret, as handed to its holder once. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl TokenSecret {
    /// A new secret from the operating system's random source.
    pub fn generate() -> Result<TokenSecret, Error> {
        let mut random = [0u8; TOKEN_RANDOM_BYTES];
        rand::rngs::OsRng
            .try_fill_bytes(&mut random)
            .map_err(|error| {
                Error::new(
                    Op::Generate,
                    "",
                    ErrorKind::Io,
                    format!("random source: {error}"),
                )
            })?;
        Ok(TokenSecret::from_random(random))
    }

    /// A secret made from the given random bytes (tests and seeded tools).
    pub fn from_random(random: [u8; TOKEN_RANDOM_BYTES]) -> TokenSecret {
        TokenSecret(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(random)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn hash(&self) -> TokenHash {
        TokenHash::of_secret(&self.0)
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(…)")
    }
}

/// The stored form of a token: SHA-256 of the secret's bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of a presented secret (whatever its shape).
    pub fn of_secret(secret: &str) -> TokenHash {
        TokenHash(Sha256::digest(secret.as_bytes()).into())
    }

    /// Reads `sha256-<64 lowercase hex>`.
    pub fn parse(text: &str) -> Result<TokenHash, String> {
        let hex_digits = text
            .strip_prefix(HASH_PREFIX)
            .ok_or_else(|| format!("hash must start with {HASH_PREFIX:?}"))?;
        if hex_digits.len() != 64
            || !hex_digits
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(format!(
                "hash must be {HASH_PREFIX:?} and 64 lowercase hex digits"
            ));
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_digits, &mut bytes).map_err(|error| error.to_string())?;
        Ok(TokenHash(bytes))
    }

    fn matches(&self, other: &TokenHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl fmt::Display for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{HASH_PREFIX}{}", hex::encode(self.0))
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({self})")
    }
}

impl TryFrom<String> for TokenHash {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        TokenHash::parse(&text)
    }
}

impl<'de> Deserialize<'de> for TokenHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TokenHash::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One segment of a pattern.
#[derive(Clone, Debug)]
enum Segment {
    Literal(String),
    Glob(GlobMatcher),
}

impl Segment {
    fn compile(text: &str, pattern: &str) -> Result<Segment, String> {
        if text.contains(['{', '}']) {
            return Err(format!(
                "pattern {pattern:?}: braces are not pattern syntax; write [{{]"
            ));
        }
        if !text.contains(['*', '?', '[', '\\']) {
            return Ok(Segment::Literal(text.to_owned()));
        }
        let glob = GlobBuilder::new(text)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|error| format!("pattern {pattern:?}: {}", error.kind()))?;
        Ok(Segment::Glob(glob.compile_matcher()))
    }

    fn matches(&self, segment: &str) -> bool {
        match self {
            Segment::Literal(literal) => literal == segment,
            Segment::Glob(glob) => glob.is_match(segment),
        }
    }
}

/// What a pattern does after its leading segments.
#[derive(Clone, Debug)]
enum Shape {
    /// Exactly these segments.
    Exact,
    /// `prefix/**`: at least one more segment.
    Subtree,
    /// `prefix/**/suffix`: any number of segments, then the suffix.
    Infix(Vec<Segment>),
    /// `prefix/`: the bare name or anything below.
    Directory,
}

/// A compiled path pattern (see the module docs for the language).
#[derive(Clone, Debug)]
pub struct PathPattern {
    text: String,
    prefix: Vec<Segment>,
    shape: Shape,
}

impl PathPattern {
    pub fn parse(text: &str) -> Result<PathPattern, String> {
        let Some(body) = text.strip_prefix('/') else {
            return Err(format!("pattern {text:?} does not start with /"));
        };
        // A literal no new document's path can hold (not NFC, a bidi override, …) would
        // silently protect nothing.
        if let Err(why) = quire_log::path::check_new(text) {
            return Err(format!("pattern {text:?}: {why}"));
        }
        let directory = text.len() > 1 && text.ends_with('/');
        let body = if directory {
            &body[..body.len() - 1]
        } else {
            body
        };
        // `/` alone names the root directory: everything.
        if text == "/" {
            return Ok(PathPattern {
                text: text.to_owned(),
                prefix: Vec::new(),
                shape: Shape::Subtree,
            });
        }
        let segments: Vec<&str> = body.split('/').collect();
        // Canonical paths have none of these, so such a pattern would silently match nothing
        // (`/private//**` protecting nothing).
        if segments
            .iter()
            .any(|segment| segment.is_empty() || *segment == "." || *segment == "..")
        {
            return Err(format!(
                "pattern {text:?} has an empty, . or .. segment, so it could never match a path"
            ));
        }
        let doubles: Vec<usize> = segments
            .iter()
            .enumerate()
            .filter(|(_, segment)| segment.contains("**"))
            .map(|(index, _)| index)
            .collect();
        let misplaced = doubles.iter().any(|&index| segments[index] != "**");
        if misplaced || doubles.len() > 1 || (directory && !doubles.is_empty()) {
            return Err(format!(
                "pattern {text:?}: ** must be a whole segment, at most once, as /** at the end or /**/ inside, and not in a directory pattern"
            ));
        }
        let compile = |parts: &[&str]| -> Result<Vec<Segment>, String> {
            parts
                .iter()
                .map(|part| Segment::compile(part, text))
                .collect()
        };
        let (prefix, shape) = match doubles.first() {
            None => (
                compile(&segments)?,
                if directory {
                    Shape::Directory
                } else {
                    Shape::Exact
                },
            ),
            Some(&at) if at == segments.len() - 1 => (compile(&segments[..at])?, Shape::Subtree),
            Some(&at) => (
                compile(&segments[..at])?,
                Shape::Infix(compile(&segments[at + 1..])?),
            ),
        };
        Ok(PathPattern {
            text: text.to_owned(),
            prefix,
            shape,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern covers `path` (a path starting with `/`).
    pub fn matches(&self, path: &str) -> bool {
        let Some(body) = path.strip_prefix('/') else {
            return false;
        };
        let segments: Vec<&str> = body.split('/').collect();
        let prefix_len = self.prefix.len();
        let prefix_matches = |segments: &[&str]| {
            segments.len() >= prefix_len
                && self
                    .prefix
                    .iter()
                    .zip(segments)
                    .all(|(pattern, segment)| pattern.matches(segment))
        };
        if !prefix_matches(&segments) {
            return false;
        }
        match &self.shape {
            Shape::Exact => segments.len() == prefix_len,
            Shape::Subtree => segments.len() > prefix_len,
            Shape::Directory => true,
            Shape::Infix(suffix) => {
                segments.len() >= prefix_len + suffix.len()
                    && suffix
                        .iter()
                        .zip(&segments[segments.len() - suffix.len()..])
                        .all(|(pattern, segment)| pattern.matches(segment))
            }
        }
    }
}

impl<'de> Deserialize<'de> for PathPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        PathPattern::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// An expiry instant, written as RFC 3339 (a quoted string or a TOML offset datetime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expiry(SystemTime);

impl<'de> Deserialize<'de> for Expiry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Datetime(toml::value::Datetime),
        }
        let text = match Written::deserialize(deserializer)? {
            Written::Text(text) => text,
            Written::Datetime(datetime) => datetime.to_string(),
        };
        OffsetDateTime::parse(&text, &Rfc3339)
            .map(|instant| Expiry(instant.into()))
            .map_err(|error| {
                serde::de::Error::custom(format!(
                    "expires {text:?} is not an RFC 3339 time with an offset: {error}"
                ))
            })
    }
}

fn non_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let items = Vec::<T>::deserialize(deserializer)?;
    if items.is_empty() {
        return Err(serde::de::Error::custom("must list at least one entry"));
    }
    Ok(items)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    tokens: BTreeMap<String, toml::Spanned<TokenEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    hash: TokenHash,
    #[serde(deserialize_with = "non_empty")]
    operations: Vec<Operation>,
    /// Compiled after deserialising, so an error names the pattern's own line.
    #[serde(deserialize_with = "non_empty")]
    paths: Vec<toml::Spanned<String>>,
    #[serde(default)]
    expires: Option<Expiry>,
}

/// One configured token.
#[derive(Clone, Debug)]
pub struct Token {
    label: Arc<str>,
    hash: TokenHash,
    operations: BTreeSet<Operation>,
    patterns: Vec<PathPattern>,
    expires: Option<SystemTime>,
}

impl Token {
    pub fn new(
        label: impl Into<Arc<str>>,
        hash: TokenHash,
        operations: impl IntoIterator<Item = Operation>,
        patterns: impl IntoIterator<Item = PathPattern>,
        expires: Option<SystemTime>,
    ) -> Token {
        Token {
            label: label.into(),
            hash,
            operations: operations.into_iter().collect(),
            patterns: patterns.into_iter().collect(),
            expires,
        }
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn hash(&self) -> &TokenHash {
        &self.hash
    }

    pub fn grants(&self, operation: Operation) -> bool {
        self.operations.contains(&operation)
    }

    pub fn covers(&self, path: &str) -> bool {
        self.patterns.iter().any(|pattern| pattern.matches(path))
    }

    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.expires.is_some_and(|expires| now > expires)
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Denial {
    /// The world has no tokens configured, so it accepts no writes.
    NoAuthConfigured,
    /// No token was presented (or an empty one).
    NoToken,
    /// The token is not configured.
    InvalidToken,
    /// The token's expiry has passed.
    Expired,
    /// The token does not grant this operation on this path.
    NotPermitted,
}

impl Denial {
    /// Whether the caller failed to authenticate (as opposed to lacking a grant).
    pub fn is_unauthenticated(self) -> bool {
        matches!(
            self,
            Denial::NoToken | Denial::InvalidToken | Denial::Expired
        )
    }

    /// The status a handler answers with.
    pub fn status(self) -> Status {
        if self.is_unauthenticated() {
            Status::Unauthorized
        } else {
            Status::NotPermitted
        }
    }

    /// The message for the error body; never says which check failed beyond the status.
    pub fn message(self) -> &'static str {
        match self {
            Denial::NoAuthConfigured => "publishing requires auth configuration",
            Denial::NoToken | Denial::InvalidToken | Denial::Expired => "authentication required",
            Denial::NotPermitted => "insufficient permissions",
        }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Denial::NoAuthConfigured => "no tokens configured",
            Denial::NoToken => "no token",
            Denial::InvalidToken => "invalid token",
            Denial::Expired => "token expired",
            Denial::NotPermitted => "not permitted",
        })
    }
}

/// How a read was allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// The path is public; no token was needed (any presented one was ignored).
    Public,
    /// The token with this label grants the read.
    Token(Arc<str>),
}

/// An immutable set of tokens (one load of a tokens file).
#[derive(Clone, Debug, Default)]
pub struct TokenStore {
    tokens: Vec<Token>,
}

impl TokenStore {
    /// A set from tokens built in code (a development token). Fails on a repeated hash.
    pub fn new(tokens: impl IntoIterator<Item = Token>) -> Result<TokenStore, Error> {
        let tokens: Vec<Token> = tokens.into_iter().collect();
        let mut seen = BTreeMap::new();
        for token in &tokens {
            if let Some(other) = seen.insert(token.hash.clone(), token.label.clone()) {
                return Err(Error::new(
                    Op::Load,
                    "",
                    ErrorKind::Invalid,
                    format!("tokens {other:?} and {:?} share one hash", token.label),
                ));
            }
        }
        Ok(TokenStore { tokens })
    }

    /// Parses a tokens file; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<TokenStore, Error> {
        let invalid = |detail: String| Error::new(Op::Load, origin, ErrorKind::Invalid, detail);
        let file: TokensFile =
            toml::from_str(text).map_err(|error| invalid(describe_toml_error(text, &error)))?;
        let mut tokens = Vec::with_capacity(file.tokens.len());
        let mut seen: BTreeMap<TokenHash, String> = BTreeMap::new();
        for (label, entry) in file.tokens {
            let line = crate::line_of(text, entry.span().start);
            if label.is_empty() || label.chars().any(char::is_control) {
                return Err(invalid(format!(
                    "line {line}: token label {label:?} is empty or holds control characters"
                )));
            }
            let entry = entry.into_inner();
            let patterns = entry
                .paths
                .iter()
                .map(|written| {
                    PathPattern::parse(written.get_ref()).map_err(|error| {
                        invalid(format!(
                            "line {}: {error}",
                            crate::line_of(text, written.span().start)
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(other) = seen.insert(entry.hash.clone(), label.clone()) {
                return Err(invalid(format!(
                    "line {line}: tokens {other:?} and {label:?} share one hash"
                )));
            }
            tokens.push(Token::new(
                label,
                entry.hash,
                entry.operations,
                patterns,
                entry.expires.map(|expiry| expiry.0),
            ));
        }
        Ok(TokenStore { tokens })
    }

    /// Reads and parses a tokens file.
    pub fn load(path: &Path) -> Result<TokenStore, Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|error| Error::new(Op::Load, &origin, ErrorKind::Io, error.to_string()))?;
        TokenStore::from_toml(&text, &origin)
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn tokens(&self) -> impl Iterator<Item = &Token> {
        self.tokens.iter()
    }

    /// The token whose hash is the secret's. Compares against every token, in constant time
    /// per comparison, without stopping at the first match.
    pub fn find(&self, secret: &str) -> Option<&Token> {
        let presented = TokenHash::of_secret(secret);
        let mut found = None;
        for token in &self.tokens {
            if token.hash.matches(&presented) {
                found = Some(token);
            }
        }
        found
    }

    /// Checks that `secret` grants `operation` on `path` at `now`.
    pub fn authorize(
        &self,
        secret: Option<&str>,
        path: &str,
        operation: Operation,
        now: SystemTime,
    ) -> Result<&Token, Denial> {
        let secret = secret
            .filter(|secret| !secret.is_empty())
            .ok_or(Denial::NoToken)?;
        let token = self.find(secret).ok_or(Denial::InvalidToken)?;
        if token.is_expired(now) {
            return Err(Denial::Expired);
        }
        if !token.grants(operation) || !token.covers(path) {
            return Err(Denial::NotPermitted);
        }
        Ok(token)
    }

    /// Whether some token grants `read` on `path` (expired or not), making it protected.
    pub fn is_read_protected(&self, path: &str) -> bool {
        path != AGENT_MANIFEST_PATH
            && self
                .tokens
                .iter()
                .any(|token| token.grants(Operation::Read) && token.covers(path))
    }

    /// Checks a read of `path`: public paths need nothing, protected ones a `read` grant.
    pub fn authorize_read(
        &self,
        secret: Option<&str>,
        path: &str,
        now: SystemTime,
    ) -> Result<Access, Denial> {
        if !self.is_read_protected(path) {
            return Ok(Access::Public);
        }
        self.authorize(secret, path, Operation::Read, now)
            .map(|token| Access::Token(token.label.clone()))
    }
}

/// Where a registry's tokens come from.
#[derive(Clone, Debug)]
enum Source {
    File(PathBuf),
    Fixed,
}

/// A world's current token set, swapped whole on reload.
#[derive(Debug)]
pub struct TokenRegistry {
    source: Source,
    current: ArcSwap<TokenStore>,
}

impl TokenRegistry {
    /// A registry over a tokens file, loaded now.
    pub fn load(path: impl Into<PathBuf>) -> Result<TokenRegistry, Error> {
        let path = path.into();
        let store = TokenStore::load(&path)?;
        Ok(TokenRegistry {
            source: Source::File(path),
            current: ArcSwap::from_pointee(store),
        })
    }

    /// A registry whose tokens never change (a development token).
    pub fn fixed(store: TokenStore) -> TokenRegistry {
        TokenRegistry {
            source: Source::Fixed,
            current: ArcSwap::from_pointee(store),
        }
    }

    /// The current set. Hold it for a whole request so one request sees one set.
    pub fn current(&self) -> Arc<TokenStore> {
        self.current.load_full()
    }

    /// Re-reads the tokens file and swaps it in; on failure the old set stays. A fixed
    /// registry has nothing to re-read and keeps its set.
    pub fn reload(&self) -> Result<Arc<TokenStore>, Error> {
        match &self.source {
            Source::Fixed => Ok(self.current()),
            Source::File(path) => {
                let store = TokenStore::load(path).map_err(|error| {
                    Error::new(Op::Reload, error.key(), error.kind(), error.detail())
                })?;
                let store = Arc::new(store);
                self.current.store(store.clone());
                Ok(store)
            }
        }
    }
}

/// A world's authorisation: its tokens, or none (then writes are refused, reads public).
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    tokens: Option<Arc<TokenRegistry>>,
}

impl Authorizer {
    pub fn new(tokens: Option<Arc<TokenRegistry>>) -> Authorizer {
        Authorizer { tokens }
    }

    /// No tokens: every write refused, every read public.
    pub fn without_tokens() -> Authorizer {
        Authorizer { tokens: None }
    }

    pub fn registry(&self) -> Option<&Arc<TokenRegistry>> {
        self.tokens.as_ref()
    }

    /// Checks a write (PUBLISH, APPEND, ARCHIVE) of `path`; returns the token's label.
    pub fn authorize_write(
        &self,
        secret: Option<&str>,
        path: &str,
        now: SystemTime,
    ) -> Result<Arc<str>, Denial> {
        let registry = self.tokens.as_ref().ok_or(Denial::NoAuthConfigured)?;
        let store = registry.current();
        store
            .authorize(secret, path, Operation::Publish, now)
            .map(|token| token.label.clone())
    }

    /// The label of the valid (known, unexpired) token `secret` is, whatever it grants: the
    /// client a request counts against in the limits.
    pub fn label_of(&self, secret: Option<&str>, now: SystemTime) -> Option<Arc<str>> {
        let secret = secret.filter(|secret| !secret.is_empty())?;
        let store = self.tokens.as_ref()?.current();
        store
            .find(secret)
            .filter(|token| !token.is_expired(now))
            .map(|token| token.label.clone())
    }

    /// Checks a read of `path`.
    pub fn authorize_read(
        &self,
        secret: Option<&str>,
        path: &str,
        now: SystemTime,
    ) -> Result<Access, Denial> {
        match &self.tokens {
            None => Ok(Access::Public),
            Some(registry) => registry.current().authorize_read(secret, path, now),
        }
    }
}

/// A tokens-file entry to print for a new token (`quire token new`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TokenEntrySpec {
    pub hash: String,
    pub operations: Vec<Operation>,
    pub paths: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
}

impl TokenEntrySpec {
    /// The entry as a `[tokens.<label>]` table, ready to append to a tokens file.
    pub fn to_toml(&self, label: &str) -> String {
        #[derive(Serialize)]
        struct File<'a> {
            tokens: BTreeMap<&'a str, &'a TokenEntrySpec>,
        }
        let file = File {
            tokens: BTreeMap::from([(label, self)]),
        };
        toml::to_string(&file).expect("a tokens entry always serialises")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const EPOCH_2026: u64 = 1_767_225_600; // 2026-01-01T00:00:00Z

    fn at(seconds_after_2026: i64) -> SystemTime {
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_2026);
        if seconds_after_2026 >= 0 {
            base + Duration::from_secs(seconds_after_2026 as u64)
        } else {
            base - Duration::from_secs(seconds_after_2026.unsigned_abs())
        }
    }

    fn hash_of(secret: &str) -> String {
        TokenHash::of_secret(secret).to_string()
    }

    fn sample_store() -> TokenStore {
        let text = format!(
            r#"
[tokens.writer]
hash = "{}"
operations = ["publish"]
paths = ["/docs/**"]

[tokens.reader]
hash = "{}"
operations = ["read"]
paths = ["/private/**", "/**"]

[tokens.expired]
hash = "{}"
operations = ["publish", "read"]
paths = ["/**"]
expires = "2026-01-01T00:00:00Z"

[tokens.team]
hash = "{}"
operations = ["read", "publish"]
paths = ["/team/"]
expires = 2027-01-01T00:00:00+01:00
"#,
            hash_of("w-secret"),
            hash_of("r-secret"),
            hash_of("x-secret"),
            hash_of("t-secret"),
        );
        TokenStore::from_toml(&text, "tokens.toml").unwrap()
    }

    fn load_err(text: &str) -> Error {
        TokenStore::from_toml(text, "tokens.toml").expect_err("tokens file should be refused")
    }

    fn assert_invalid(text: &str, line: usize, mentions: &str) {
        let error = load_err(text);
        assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
        assert_eq!(error.op(), Op::Load);
        assert_eq!(error.key(), "tokens.toml");
        assert!(
            error.detail().starts_with(&format!("line {line}: ")),
            "{:?} should name line {line}",
            error.detail()
        );
        assert!(
            error.detail().contains(mentions),
            "{:?} should mention {mentions:?}",
            error.detail()
        );
    }

    // -- secrets and hashes -------------------------------------------------------------

    #[test]
    fn generated_tokens_are_prefixed_random_and_distinct() {
        let a = TokenSecret::generate().unwrap();
        let b = TokenSecret::generate().unwrap();
        assert_ne!(a, b);
        for secret in [&a, &b] {
            let text = secret.as_str();
            assert!(text.starts_with(TOKEN_PREFIX));
            assert_eq!(text.len(), TOKEN_PREFIX.len() + 43);
            assert!(
                text[TOKEN_PREFIX.len()..]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            );
        }
        assert_eq!(format!("{a:?}"), "TokenSecret(…)");
        assert_eq!(
            TokenSecret::from_random([0; 32]).as_str(),
            "quire_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        );
    }

    #[test]
    fn hashes_are_sha256_of_the_secret_bytes() {
        assert_eq!(
            TokenHash::of_secret("abc").to_string(),
            "sha256-ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let secret = TokenSecret::from_random([7; 32]);
        assert_eq!(secret.hash(), TokenHash::of_secret(secret.as_str()));
        let text = secret.hash().to_string();
        assert_eq!(TokenHash::parse(&text).unwrap(), secret.hash());
    }

    #[test]
    fn refuses_malformed_hashes() {
        let good = hash_of("x");
        for bad in [
            good.trim_start_matches(HASH_PREFIX).to_owned(),
            good.to_uppercase(),
            format!("{}0", good),
            good[..good.len() - 1].to_owned(),
            format!("blake3-{}", good.trim_start_matches(HASH_PREFIX)),
            format!("{}g", &good[..good.len() - 1]),
            String::new(),
        ] {
            assert!(TokenHash::parse(&bad).is_err(), "{bad:?} should be refused");
        }
    }

    // -- the tokens file ----------------------------------------------------------------

    #[test]
    fn reads_a_tokens_file() {
        let store = sample_store();
        assert_eq!(store.len(), 4);
        let labels: Vec<&str> = store.tokens().map(Token::label).collect();
        assert_eq!(labels, ["expired", "reader", "team", "writer"]);
        let team = store.find("t-secret").unwrap();
        assert!(team.grants(Operation::Read) && team.grants(Operation::Publish));
        // 2027-01-01T00:00:00+01:00 is 2026-12-31T23:00:00Z.
        assert!(!team.is_expired(at(364 * 86_400 + 23 * 3600)));
        assert!(team.is_expired(at(364 * 86_400 + 23 * 3600 + 1)));
        assert!(TokenStore::from_toml("", "empty").unwrap().is_empty());
        assert!(
            TokenStore::from_toml("[tokens]\n", "empty")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn refuses_bad_tokens_files_naming_the_line() {
        let hash = hash_of("s");
        let entry = |extra: &str| {
            format!(
                "# tokens\n[tokens.a]\nhash = \"{hash}\"\noperations = [\"publish\"]\npaths = [\"/**\"]\n{extra}"
            )
        };
        assert_invalid("version = 1\n", 1, "unknown field `version`");
        assert_invalid(
            &entry("operation = [\"read\"]\n"),
            6,
            "unknown field `operation`",
        );
        assert_invalid(
            "[tokens.a]\noperations = [\"read\"]\npaths = [\"/**\"]\n",
            1,
            "missing field `hash`",
        );
        assert_invalid(
            &format!("[tokens.a]\nhash = \"{hash}\"\npaths = [\"/**\"]\n"),
            1,
            "missing field `operations`",
        );
        assert_invalid(
            "[tokens.a]\nhash = \"sha256-abc\"\noperations = [\"read\"]\npaths = [\"/**\"]\n",
            2,
            "64 lowercase hex",
        );
        assert_invalid(
            &format!("[tokens.a]\nhash = \"{hash}\"\noperations = []\npaths = [\"/**\"]\n"),
            3,
            "at least one",
        );
        assert_invalid(
            &format!(
                "[tokens.a]\nhash = \"{hash}\"\noperations = [\"write\"]\npaths = [\"/**\"]\n"
            ),
            3,
            "unknown variant `write`",
        );
        assert_invalid(
            &format!("[tokens.a]\nhash = \"{hash}\"\noperations = [\"read\"]\npaths = []\n"),
            4,
            "at least one",
        );
        for (pattern, mentions) in [
            ("docs/**", "does not start with /"),
            ("/a**", "whole segment"),
            ("/**/x/**", "whole segment"),
            ("/a/**/", "whole segment"),
            ("/{a,b}", "braces"),
            ("/[a", "pattern \"/[a\""),
        ] {
            assert_invalid(
                &format!(
                    "[tokens.a]\nhash = \"{hash}\"\noperations = [\"read\"]\npaths = [\"/ok\", \"{pattern}\"]\n"
                ),
                4,
                mentions,
            );
        }
        assert_invalid(
            &format!(
                "[tokens.a]\nhash = \"{hash}\"\noperations = [\"read\"]\npaths = [\n  \"/ok\",\n  \"no-slash\",\n]\n"
            ),
            6,
            "does not start with /",
        );
        for expires in [
            "\"tomorrow\"",
            "\"2027-01-01T00:00:00\"",
            "2027-01-01T00:00:00",
            "2027-01-01",
        ] {
            assert_invalid(&entry(&format!("expires = {expires}\n")), 6, "RFC 3339");
        }
        assert_invalid(
            &format!(
                "[tokens.a]\nhash = \"{hash}\"\noperations = [\"read\"]\npaths = [\"/**\"]\n\n[tokens.b]\nhash = \"{hash}\"\noperations = [\"read\"]\npaths = [\"/**\"]\n"
            ),
            6,
            "tokens \"a\" and \"b\" share one hash",
        );
        assert_invalid("[tokens.a\n", 1, "");
        assert_invalid(
            &format!(
                "[tokens.\"\"]\nhash = \"{hash}\"\noperations = [\"read\"]\npaths = [\"/**\"]\n"
            ),
            1,
            "label \"\"",
        );
    }

    #[test]
    fn loading_a_missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.toml");
        let error = TokenStore::load(&path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Io);
        assert_eq!(error.key(), path.display().to_string());
        assert!(TokenRegistry::load(&path).is_err());
    }

    #[test]
    fn a_printed_entry_reads_back() {
        let secret = TokenSecret::from_random([9; 32]);
        let spec = TokenEntrySpec {
            hash: secret.hash().to_string(),
            operations: vec![Operation::Publish, Operation::Read],
            paths: vec!["/docs/**".to_owned()],
            expires: Some("2030-01-01T00:00:00Z".to_owned()),
        };
        let text = spec.to_toml("alice@example.com");
        assert!(
            text.starts_with("[tokens.\"alice@example.com\"]\n"),
            "{text}"
        );
        let store = TokenStore::from_toml(&text, "printed").unwrap();
        let token = store.find(secret.as_str()).unwrap();
        assert_eq!(token.label(), "alice@example.com");
        assert!(token.covers("/docs/a.md") && token.grants(Operation::Publish));
        assert!(!token.is_expired(at(0)));
    }

    #[test]
    fn tokens_built_in_code_must_not_share_a_hash() {
        let hash = TokenHash::of_secret("s");
        let token = |label: &str| {
            Token::new(
                label,
                hash.clone(),
                [Operation::Read],
                [PathPattern::parse("/**").unwrap()],
                None,
            )
        };
        assert_eq!(TokenStore::new([token("a")]).unwrap().len(), 1);
        let error = TokenStore::new([token("a"), token("b")]).unwrap_err();
        assert!(error.detail().contains("share one hash"));
    }

    // -- patterns -----------------------------------------------------------------------

    #[test]
    fn patterns_match_segment_by_segment() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "/docs/*.md",
                &["/docs/a.md", "/docs/.md"],
                &["/docs/x/a.md", "/docs/a.txt", "/docs", "/docs/a.md/"],
            ),
            (
                "/docs/a.md",
                &["/docs/a.md"],
                &["/docs/a.md/v2", "/docs/a.m", "/docs"],
            ),
            (
                "/docs/**",
                &["/docs/", "/docs/a", "/docs/a/b.md"],
                &["/docs", "/docsx/a", "/"],
            ),
            ("/**", &["/", "/a", "/a/b/c.md"], &[]),
            ("/", &["/", "/a", "/a/b/c.md"], &[]),
            (
                "/docs/**/a.md",
                &["/docs/a.md", "/docs/x/a.md", "/docs/x/y/a.md"],
                &["/a.md", "/docs/x/b.md", "/docsa.md", "/docs/a.md/x"],
            ),
            (
                "/docs/**/sub/*.md",
                &["/docs/a/sub/x.md", "/docs/sub/x.md", "/docs/a/b/sub/x.md"],
                &["/docs/a/sub/y/x.md", "/sub/x.md"],
            ),
            (
                "/**/index.md",
                &["/index.md", "/a/b/index.md"],
                &["/a/b/index.mdx"],
            ),
            (
                "/team/",
                &["/team", "/team/", "/team/x.md", "/team/a/b.md"],
                &["/teams", "/teamx/a", "/", "/other/team"],
            ),
            ("/t*/", &["/team", "/tools/x.md"], &["/other"]),
            ("/a?c", &["/abc"], &["/a/c", "/ac", "/abbc"]),
            ("/a[bc]d", &["/abd", "/acd"], &["/add", "/a/d"]),
            ("/a[!x]c", &["/abc"], &["/axc", "/a/c"]),
            ("/a[^x]c", &["/abc"], &["/axc", "/a/c"]),
            ("/a[--0]c", &["/a-c", "/a0c"], &["/a/c"]),
            ("/a\\*", &["/a*"], &["/ab"]),
            (
                "/notes/*",
                &["/notes/a", "/notes/"],
                &["/notes", "/notes/a/b"],
            ),
        ];
        for (pattern, matching, other) in cases {
            let compiled = PathPattern::parse(pattern).unwrap();
            assert_eq!(compiled.as_str(), *pattern);
            for path in *matching {
                assert!(compiled.matches(path), "{pattern} should match {path}");
            }
            for path in *other {
                assert!(!compiled.matches(path), "{pattern} should not match {path}");
            }
            assert!(!compiled.matches("relative/path"));
        }
    }

    #[test]
    fn refuses_malformed_patterns() {
        for pattern in [
            "/private//**",
            "//x.md",
            "/a/./b.md",
            "/a/../b.md",
            "/a//",
            "",
            "docs",
            "*",
            "/a**",
            "/**b",
            "/a/***",
            "/**/**",
            "/a/**/b/**",
            "/a/**/",
            "/**/",
            "/{a,b}",
            "/a}",
            "/[a",
        ] {
            assert!(
                PathPattern::parse(pattern).is_err(),
                "{pattern:?} should be refused"
            );
        }
    }

    // -- the rules ----------------------------------------------------------------------

    #[test]
    fn authorize_checks_in_the_reference_order() {
        let store = sample_store();
        let now = at(-10);
        let check = |secret: Option<&str>, path: &str, op| {
            store
                .authorize(secret, path, op, now)
                .map(|token| token.label().to_owned())
        };
        assert_eq!(
            check(None, "/docs/a.md", Operation::Publish),
            Err(Denial::NoToken)
        );
        assert_eq!(
            check(Some(""), "/docs/a.md", Operation::Publish),
            Err(Denial::NoToken)
        );
        assert_eq!(
            check(Some("nope"), "/docs/a.md", Operation::Publish),
            Err(Denial::InvalidToken)
        );
        assert_eq!(
            check(Some("w-secret"), "/docs/a.md", Operation::Publish),
            Ok("writer".to_owned())
        );
        assert_eq!(
            check(Some("w-secret"), "/other/a.md", Operation::Publish),
            Err(Denial::NotPermitted)
        );
        assert_eq!(
            check(Some("w-secret"), "/docs/a.md", Operation::Read),
            Err(Denial::NotPermitted)
        );
        assert_eq!(
            check(Some("r-secret"), "/docs/a.md", Operation::Publish),
            Err(Denial::NotPermitted)
        );
        assert_eq!(
            check(Some("t-secret"), "/team", Operation::Publish),
            Ok("team".to_owned())
        );
        // Not yet expired at the instant itself; expired strictly after. Expiry is checked
        // before the operation and the path.
        assert!(
            store
                .authorize(Some("x-secret"), "/a.md", Operation::Publish, at(0))
                .is_ok()
        );
        assert_eq!(
            store
                .authorize(Some("x-secret"), "/a.md", Operation::Publish, at(1))
                .unwrap_err(),
            Denial::Expired
        );
    }

    #[test]
    fn reads_are_public_unless_a_read_grant_covers_the_path() {
        let writer_only = TokenStore::from_toml(
            &format!(
                "[tokens.w]\nhash = \"{}\"\noperations = [\"publish\"]\npaths = [\"/**\"]\n\n[tokens.r]\nhash = \"{}\"\noperations = [\"read\"]\npaths = [\"/private/**\", \"/team/\"]\n",
                hash_of("w-secret"),
                hash_of("r-secret")
            ),
            "t",
        )
        .unwrap();
        let now = at(0);
        let read = |secret: Option<&str>, path: &str| writer_only.authorize_read(secret, path, now);

        // Public: nothing grants read here, and any token, even a bad one, is ignored.
        assert_eq!(read(None, "/docs/a.md"), Ok(Access::Public));
        assert_eq!(read(Some("garbage"), "/docs/a.md"), Ok(Access::Public));
        assert!(!writer_only.is_read_protected("/docs/a.md"));

        // Protected.
        assert!(writer_only.is_read_protected("/private/a.md"));
        assert!(writer_only.is_read_protected("/team"));
        assert!(writer_only.is_read_protected("/team/"));
        assert_eq!(read(None, "/private/a.md"), Err(Denial::NoToken));
        assert_eq!(
            read(Some("garbage"), "/private/a.md"),
            Err(Denial::InvalidToken)
        );
        assert_eq!(
            read(Some("w-secret"), "/private/a.md"),
            Err(Denial::NotPermitted)
        );
        assert_eq!(
            read(Some("r-secret"), "/private/a.md"),
            Ok(Access::Token("r".into()))
        );
        assert_eq!(read(None, "/team/"), Err(Denial::NoToken));
        assert_eq!(
            read(Some("r-secret"), "/team"),
            Ok(Access::Token("r".into()))
        );
    }

    #[test]
    fn the_agent_manifest_is_always_public_and_expired_grants_still_protect() {
        let store = sample_store();
        // `reader` grants read on `/**`, so everything else is protected.
        assert!(store.is_read_protected("/docs/a.md"));
        assert_eq!(
            store.authorize_read(None, AGENT_MANIFEST_PATH, at(0)),
            Ok(Access::Public)
        );
        let only_expired = TokenStore::from_toml(
            &format!(
                "[tokens.old]\nhash = \"{}\"\noperations = [\"read\"]\npaths = [\"/**\"]\nexpires = \"2020-01-01T00:00:00Z\"\n",
                hash_of("old")
            ),
            "t",
        )
        .unwrap();
        assert_eq!(
            only_expired.authorize_read(None, "/a.md", at(0)),
            Err(Denial::NoToken)
        );
        assert_eq!(
            only_expired.authorize_read(Some("old"), "/a.md", at(0)),
            Err(Denial::Expired)
        );
    }

    #[test]
    fn denials_map_to_statuses_and_messages() {
        let expected = [
            (
                Denial::NoAuthConfigured,
                Status::NotPermitted,
                "publishing requires auth configuration",
            ),
            (
                Denial::NoToken,
                Status::Unauthorized,
                "authentication required",
            ),
            (
                Denial::InvalidToken,
                Status::Unauthorized,
                "authentication required",
            ),
            (
                Denial::Expired,
                Status::Unauthorized,
                "authentication required",
            ),
            (
                Denial::NotPermitted,
                Status::NotPermitted,
                "insufficient permissions",
            ),
        ];
        for (denial, status, message) in expected {
            assert_eq!(denial.status(), status, "{denial}");
            assert_eq!(denial.message(), message, "{denial}");
        }
    }

    #[test]
    fn without_tokens_writes_are_refused_and_reads_public() {
        let authorizer = Authorizer::without_tokens();
        assert_eq!(
            authorizer.authorize_write(Some("anything"), "/a.md", at(0)),
            Err(Denial::NoAuthConfigured)
        );
        assert_eq!(
            authorizer.authorize_read(None, "/a.md", at(0)),
            Ok(Access::Public)
        );

        // Configured but empty: writes need a token that does not exist.
        let empty = Authorizer::new(Some(Arc::new(TokenRegistry::fixed(TokenStore::default()))));
        assert_eq!(
            empty.authorize_write(Some("anything"), "/a.md", at(0)),
            Err(Denial::InvalidToken)
        );
        assert_eq!(
            empty.authorize_write(None, "/a.md", at(0)),
            Err(Denial::NoToken)
        );
    }

    #[test]
    fn a_development_token_grants_what_it_says() {
        let secret = TokenSecret::from_random([1; 32]);
        let token = Token::new(
            "development",
            secret.hash(),
            [Operation::Publish, Operation::Read],
            [PathPattern::parse("/**").unwrap()],
            None,
        );
        let authorizer = Authorizer::new(Some(Arc::new(TokenRegistry::fixed(
            TokenStore::new([token]).unwrap(),
        ))));
        assert_eq!(
            authorizer.authorize_write(Some(secret.as_str()), "/a/b.md", at(0)),
            Ok(Arc::from("development"))
        );
        assert_eq!(
            authorizer.authorize_read(None, "/a/b.md", at(0)),
            Err(Denial::NoToken)
        );
        assert!(authorizer.registry().unwrap().reload().is_ok());
    }

    #[test]
    fn reload_swaps_the_set_and_a_failed_reload_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let file_for = |secret: &str| {
            format!(
                "[tokens.t]\nhash = \"{}\"\noperations = [\"publish\"]\npaths = [\"/**\"]\n",
                hash_of(secret)
            )
        };
        std::fs::write(&path, file_for("first")).unwrap();
        let registry = Arc::new(TokenRegistry::load(&path).unwrap());
        let authorizer = Authorizer::new(Some(registry.clone()));
        let write = |secret: &str| authorizer.authorize_write(Some(secret), "/a.md", at(0));
        assert!(write("first").is_ok());

        // A request in flight holds the set it started with.
        let in_flight = registry.current();

        std::fs::write(&path, file_for("second")).unwrap();
        assert!(write("first").is_ok(), "nothing changes before the reload");
        registry.reload().unwrap();
        assert_eq!(write("first"), Err(Denial::InvalidToken));
        assert!(write("second").is_ok());
        assert!(in_flight.find("first").is_some());

        std::fs::write(&path, "[tokens.t]\nhash = \"broken\"\n").unwrap();
        let error = registry.reload().unwrap_err();
        assert_eq!(error.op(), Op::Reload);
        assert_eq!(error.kind(), ErrorKind::Invalid);
        assert_eq!(error.key(), path.display().to_string());
        assert!(write("second").is_ok(), "a failed reload keeps the old set");

        std::fs::remove_file(&path).unwrap();
        assert_eq!(registry.reload().unwrap_err().kind(), ErrorKind::Io);
        assert!(write("second").is_ok());
    }

    #[test]
    fn find_picks_the_matching_token_among_many() {
        let tokens: Vec<Token> = (0..50)
            .map(|index| {
                Token::new(
                    format!("t{index}"),
                    TokenHash::of_secret(&format!("secret-{index}")),
                    [Operation::Read],
                    [PathPattern::parse("/**").unwrap()],
                    None,
                )
            })
            .collect();
        let store = TokenStore::new(tokens).unwrap();
        for index in [0, 17, 49] {
            assert_eq!(
                store.find(&format!("secret-{index}")).unwrap().label(),
                format!("t{index}")
            );
        }
        assert!(store.find("secret-50").is_none());
    }
}
