//! Tokens files (input: the file, NUL, a secret, NUL, a path): loading never panics; every loaded pattern reads back as the pattern it
//! was written as; judging any path against the loaded tokens never panics.
#![no_main]

use std::time::SystemTime;

use libfuzzer_sys::fuzz_target;
use quire_fuzz::fields;
use quire_server::auth::{Operation, PathPattern, TokenStore};

fuzz_target!(|data: &[u8]| {
    let Some(fields) = fields(data) else {
        return;
    };
    let (text, secret, path) = match fields[..] {
        [text, secret, path, ..] => (text, secret, path),
        [text, secret] => (text, secret, "/a.md"),
        [text] => (text, "", "/a.md"),
        [] => return,
    };
    if let Ok(pattern) = PathPattern::parse(text) {
        let again = PathPattern::parse(pattern.as_str()).expect("a pattern reparses");
        assert_eq!(again.as_str(), pattern.as_str());
        assert_eq!(again.matches(path), pattern.matches(path));
    }
    let Ok(store) = TokenStore::from_toml(text, "tokens.toml") else {
        return;
    };
    for token in store.tokens() {
        assert!(!token.label().is_empty());
        let _ = token.covers(path);
    }
    let _ = store.is_read_protected(path);
    let now = SystemTime::now();
    for operation in [Operation::Read, Operation::Publish] {
        let _ = store.authorize(Some(secret), path, operation, now);
    }
});
