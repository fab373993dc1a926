//! Listing arguments and the driver-independent cursor.
//!
//! Every driver lists "keys under a prefix sorting strictly after some key", so a cursor needs
//! to carry only the last key of the page it ended. The cursor is
//! `base64url(version ‖ binding ‖ last key)`, where the binding is a hash of the prefix and
//! start-after it was issued for: a cursor reused with other arguments, or garbage, is a
//! precondition error rather than a silently wrong page.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{Error, ErrorKind, Op, Result};
use crate::types::{Attributes, ListPage, MAX_KEY_LEN, validate_prefix, validate_start_after};

/// The most keys one listing page holds.
pub const MAX_LIST_PAGE: usize = 1000;

const CURSOR_VERSION: u8 = 1;
const BINDING_LEN: usize = 8;

/// A validated listing request: the prefix, and the key the page starts strictly after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListRequest {
    pub prefix: String,
    /// The caller's start-after, which the cursor is bound to.
    pub start_after: String,
    /// Where this page starts: the later of `start_after` and the cursor's last key.
    pub after: String,
}

fn binding(prefix: &str, start_after: &str) -> [u8; BINDING_LEN] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&(prefix.len() as u64).to_be_bytes());
    hasher.update(prefix.as_bytes());
    hasher.update(start_after.as_bytes());
    let mut out = [0u8; BINDING_LEN];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..BINDING_LEN]);
    out
}

impl ListRequest {
    /// Validates the arguments of [`BlobStore::list`](crate::BlobStore::list).
    pub fn parse(prefix: &str, start_after: &str, cursor: Option<&str>) -> Result<Self> {
        validate_prefix(prefix)?;
        validate_start_after(prefix, start_after)?;
        let mut after = start_after.to_owned();
        if let Some(cursor) = cursor {
            let bad = |why: &str| {
                Error::new(
                    Op::List,
                    prefix,
                    ErrorKind::Precondition,
                    format!("invalid list cursor: {why}"),
                )
            };
            let raw = URL_SAFE_NO_PAD
                .decode(cursor)
                .map_err(|_| bad("not base64url"))?;
            if raw.len() <= 1 + BINDING_LEN || raw[0] != CURSOR_VERSION {
                return Err(bad("unknown format"));
            }
            if raw[1..1 + BINDING_LEN] != binding(prefix, start_after) {
                return Err(bad("issued for another prefix or start_after"));
            }
            let last =
                std::str::from_utf8(&raw[1 + BINDING_LEN..]).map_err(|_| bad("not UTF-8"))?;
            if last.len() > MAX_KEY_LEN || !last.starts_with(prefix) || last <= start_after {
                return Err(bad("position outside the listing"));
            }
            after = last.to_owned();
        }
        Ok(ListRequest {
            prefix: prefix.to_owned(),
            start_after: start_after.to_owned(),
            after,
        })
    }

    /// Whether `key` belongs in this listing.
    pub fn admits(&self, key: &str) -> bool {
        key.starts_with(self.prefix.as_str()) && key > self.after.as_str()
    }

    /// The key a driver should start listing from (exclusive), never before the prefix.
    pub fn effective_after(&self) -> &str {
        &self.after
    }

    /// Builds the page from what a driver found. `objects` must already be in byte order, all
    /// admitted, at most [`MAX_LIST_PAGE`]; `more` says whether keys remain after the last one.
    /// A provider that broke those rules is reported as [`ErrorKind::Integrity`].
    pub fn page(&self, objects: Vec<Attributes>, more: bool) -> Result<ListPage> {
        let integrity = |why: String| Error::new(Op::List, &self.prefix, ErrorKind::Integrity, why);
        if objects.len() > MAX_LIST_PAGE {
            return Err(integrity(format!(
                "store returned {} keys in one page",
                objects.len()
            )));
        }
        let mut previous = self.after.as_str();
        for attrs in &objects {
            if !attrs.key.starts_with(self.prefix.as_str()) {
                return Err(integrity(format!(
                    "store listed {:?} outside the prefix",
                    attrs.key
                )));
            }
            if attrs.key.as_str() <= previous {
                return Err(integrity(format!(
                    "store listed {:?} out of order (after {previous:?})",
                    attrs.key
                )));
            }
            previous = attrs.key.as_str();
        }
        let next_cursor = match objects.last() {
            Some(last) if more => Some(self.cursor_after(&last.key)),
            _ => None,
        };
        Ok(ListPage {
            objects,
            next_cursor,
        })
    }

    fn cursor_after(&self, key: &str) -> String {
        let mut raw = Vec::with_capacity(1 + BINDING_LEN + key.len());
        raw.push(CURSOR_VERSION);
        raw.extend_from_slice(&binding(&self.prefix, &self.start_after));
        raw.extend_from_slice(key.as_bytes());
        URL_SAFE_NO_PAD.encode(raw)
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::types::Generation;

    fn attrs(key: &str) -> Attributes {
        Attributes {
            key: key.into(),
            size: 0,
            generation: Generation::new("1"),
            modified: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn cursor_round_trips_and_is_bound() {
        let req = ListRequest::parse("p/", "", None).unwrap();
        let page = req.page(vec![attrs("p/a"), attrs("p/b")], true).unwrap();
        let cursor = page.next_cursor.unwrap();
        let next = ListRequest::parse("p/", "", Some(&cursor)).unwrap();
        assert_eq!(next.after, "p/b");
        for (prefix, start_after) in [("q/", ""), ("p/", "p/0")] {
            let err = ListRequest::parse(prefix, start_after, Some(&cursor)).unwrap_err();
            assert!(err.is_precondition(), "{err}");
        }
        assert!(
            ListRequest::parse("p/", "", Some("garbage!"))
                .unwrap_err()
                .is_precondition()
        );
    }

    #[test]
    fn last_page_has_no_cursor() {
        let req = ListRequest::parse("p/", "", None).unwrap();
        assert_eq!(
            req.page(vec![attrs("p/a")], false).unwrap().next_cursor,
            None
        );
        assert_eq!(req.page(vec![], true).unwrap().next_cursor, None);
    }

    #[test]
    fn provider_disorder_is_integrity() {
        let req = ListRequest::parse("p/", "", None).unwrap();
        for objects in [
            vec![attrs("p/b"), attrs("p/a")],
            vec![attrs("q/a")],
            vec![attrs("p/a"), attrs("p/a")],
        ] {
            let err = req.page(objects, false).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Integrity);
        }
    }
}
