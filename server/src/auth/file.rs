//! The tokens file: its strict TOML form (unknown keys, bad values and duplicates refused
//! with their line), parsing it into a [`TokenStore`], and the entry `quire token new`
//! prints.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{Error, ErrorKind, Op, Operation, PathPattern, Token, TokenHash, TokenStore};
use crate::describe_toml_error;

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

impl TokenStore {
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
    use super::super::testing::*;
    use super::*;
    use crate::auth::*;

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
}
