//! What the server's integration tests build again and again: tokens granted in code, a
//! world on a file store, and real server processes ([`process`]). Each test file uses the
//! parts it needs.
#![allow(dead_code)]

pub(crate) mod process;

use std::path::Path;
use std::sync::Arc;

use quire_backend::file::{FileOptions, FileStore};
use quire_server::auth::{
    Authorizer, Operation, PathPattern, Token, TokenHash, TokenRegistry, TokenStore,
};
use quire_server::handlers::World;
use quire_server::limits::LimitSettings;

/// The secret of the test token that may publish.
pub(crate) const WRITER: &str = "quire_writer-secret";
/// The secret of the test token that may read `/private/**`.
pub(crate) const READER: &str = "quire_reader-secret";

/// A token labelled `label` for `secret`, granting `operations` on `patterns`, not expiring.
pub(crate) fn token(
    label: &str,
    secret: &str,
    operations: &[Operation],
    patterns: &[&str],
) -> Token {
    Token::new(
        label,
        TokenHash::of_secret(secret),
        operations.iter().copied(),
        patterns
            .iter()
            .map(|pattern| PathPattern::parse(pattern).unwrap()),
        None,
    )
}

/// An authorizer over a fixed set of tokens (no tokens file to reload).
pub(crate) fn authorizer(tokens: impl IntoIterator<Item = Token>) -> Authorizer {
    let tokens = TokenStore::new(tokens).unwrap();
    Authorizer::new(Some(Arc::new(TokenRegistry::fixed(tokens))))
}

/// The writer (`publish` on `writer_paths`) and the reader (`read` on `/private/**`).
pub(crate) fn writer_and_reader(writer_paths: &[&str]) -> Authorizer {
    authorizer([
        token("writer", WRITER, &[Operation::Publish], writer_paths),
        token("reader", READER, &[Operation::Read], &["/private/**"]),
    ])
}

/// World `name` on a file store in `dir` (not durable: tests need no fsync).
pub(crate) async fn file_world(
    name: &str,
    dir: &Path,
    options: FileOptions,
    auth: Authorizer,
    limits: LimitSettings,
) -> World {
    let options = FileOptions {
        durable: false,
        ..options
    };
    let store = FileStore::open(dir, options).await.unwrap();
    World::new(name, Arc::new(store), auth).with_limits(limits)
}
