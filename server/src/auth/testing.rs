//! Helpers the unit tests of the auth modules share.

use std::time::{Duration, SystemTime};

use super::*;

pub(super) const EPOCH_2026: u64 = 1_767_225_600; // 2026-01-01T00:00:00Z

pub(super) fn at(seconds_after_2026: i64) -> SystemTime {
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_2026);
    if seconds_after_2026 >= 0 {
        base + Duration::from_secs(seconds_after_2026 as u64)
    } else {
        base - Duration::from_secs(seconds_after_2026.unsigned_abs())
    }
}

pub(super) fn hash_of(secret: &str) -> String {
    TokenHash::of_secret(secret).to_string()
}

pub(super) fn sample_store() -> TokenStore {
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
