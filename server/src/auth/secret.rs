//! Token secrets and their stored hashes: generation from the operating system's random
//! source, the `quire_` prefix, SHA-256 hashing and the constant-time comparison.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::TryRngCore as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Error, ErrorKind, Op};

/// What every generated token starts with, so a leaked secret is recognisable.
pub const TOKEN_PREFIX: &str = "quire_";
/// What every stored hash starts with: the algorithm's name.
pub const HASH_PREFIX: &str = "sha256-";
/// Random bytes in a generated token.
const TOKEN_RANDOM_BYTES: usize = 32;

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

    pub(super) fn matches(&self, other: &TokenHash) -> bool {
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

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
}
