//! The rules: configured tokens, the order [`TokenStore::authorize`] checks in, which
//! paths are read-protected, and why a request was refused ([`Denial`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use super::{AGENT_MANIFEST_PATH, Error, ErrorKind, Op, Operation, PathPattern, TokenHash};
use crate::mark::Status;

/// One configured token.
#[derive(Clone, Debug)]
pub struct Token {
    pub(super) label: Arc<str>,
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
    pub(super) tokens: Vec<Token>,
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::auth::*;

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
