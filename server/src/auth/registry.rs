//! A world's tokens at run time: the reloadable [`TokenRegistry`] and the [`Authorizer`]
//! the handlers ask.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;

use super::{Access, Denial, Error, Op, Operation, TokenStore};

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

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::auth::*;

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
}
