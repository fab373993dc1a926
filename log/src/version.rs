//! Stored version bytes: the exact bytes a version is kept as, whose blake3 hash is its ETag.
//!
//! ```text
//! ---
//! version: 3
//! previous-hash: blake3-<64 hex of the previous version's stored bytes>
//! type: Note
//! tags: [alpha, beta]
//! meta.importance: 0.7
//! ---
//! <body, verbatim>
//! ```
//!
//! `version` always comes first; `previous-hash` follows for every version but the first;
//! then the OKF names bare in [`OKF_KEYS`] order (tags as a
//! `[a, b]` list), then every other key with a `meta.` prefix in key order. Each line is
//! `key: value` with the value verbatim to the end of the line. The body follows the closing
//! fence byte for byte, so a body that starts with its own `---` block survives untouched.
//! Decoding is strict: bytes that do not re-encode identically are refused.
//!
//! [`OKF_KEYS`]: crate::metadata::OKF_KEYS

use bytes::Bytes;
use quire_blob::BlobStore;

use crate::error::{Error, Op, Result};
use crate::ids::Hash;
use crate::keys;
use crate::metadata::{self, Metadata, OKF_KEYS};
use crate::model::{Location, VersionRecord};

/// One decoded version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredVersion {
    pub version: u64,
    /// The hash of the previous version's stored bytes; `None` exactly for version 1.
    pub previous: Option<Hash>,
    /// Publisher metadata in normal form.
    pub metadata: Metadata,
    pub body: String,
}

const FENCE: &str = "---\n";

impl StoredVersion {
    /// The stored bytes.
    pub fn encode(&self) -> Bytes {
        let mut out = String::with_capacity(64 + self.body.len());
        out.push_str(FENCE);
        out.push_str(&format!("version: {}\n", self.version));
        if let Some(previous) = &self.previous {
            out.push_str(&format!("previous-hash: {}\n", previous.content_hash()));
        }
        for key in OKF_KEYS {
            if let Some(value) = self.metadata.get(key) {
                out.push_str(&format!("{key}: {}\n", metadata::stored_value(key, value)));
            }
        }
        for (key, value) in &self.metadata {
            if !metadata::is_okf_key(key) {
                out.push_str(&format!("meta.{key}: {value}\n"));
            }
        }
        out.push_str(FENCE);
        out.push_str(&self.body);
        Bytes::from(out)
    }

    /// The ETag: the hash of the stored bytes.
    pub fn hash(&self) -> Hash {
        Hash::of(&self.encode())
    }

    /// Decodes stored bytes, refusing anything that is not the canonical encoding of a valid
    /// version (the error says why).
    pub fn decode(bytes: &[u8]) -> Result<StoredVersion, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "version bytes are not UTF-8")?;
        let rest = text
            .strip_prefix(FENCE)
            .ok_or("version bytes do not open with a frontmatter fence")?;
        let mut version = None;
        let mut previous = None;
        let mut meta = Metadata::new();
        let mut offset = 0;
        let body_start = loop {
            let line_end = rest[offset..]
                .find('\n')
                .ok_or("unterminated store frontmatter")?
                + offset;
            let line = &rest[offset..line_end];
            offset = line_end + 1;
            if line == "---" {
                break offset;
            }
            let (key, value) = line.split_once(": ").ok_or("malformed frontmatter line")?;
            match key {
                "version" => {
                    version = Some(value.parse::<u64>().map_err(|_| "malformed version")?);
                }
                "previous-hash" => {
                    let hex = value
                        .strip_prefix("blake3-")
                        .ok_or("malformed previous-hash")?;
                    previous = Some(Hash::from_hex(hex).ok_or("malformed previous-hash")?);
                }
                "tags" => {
                    let inner = value
                        .strip_prefix('[')
                        .and_then(|v| v.strip_suffix(']'))
                        .ok_or("malformed tags list")?;
                    meta.insert(
                        "tags".into(),
                        inner.split(", ").collect::<Vec<_>>().join(","),
                    );
                }
                k if metadata::is_okf_key(k) => {
                    meta.insert(k.into(), value.into());
                }
                k => {
                    let bare = k.strip_prefix("meta.").ok_or("unknown store field")?;
                    if metadata::is_okf_key(bare) {
                        return Err("OKF key stored with a meta. prefix".into());
                    }
                    meta.insert(bare.into(), value.into());
                }
            }
        };
        let version = version.ok_or("missing version")?;
        if version == 0 {
            return Err("version 0".into());
        }
        if (version == 1) != previous.is_none() {
            return Err(if previous.is_none() {
                "missing previous-hash".into()
            } else {
                "previous-hash on version 1".into()
            });
        }
        if !metadata::is_normal(&meta) {
            return Err("stored metadata is not valid".into());
        }
        let decoded = StoredVersion {
            version,
            previous,
            metadata: meta,
            body: rest[body_start..].to_owned(),
        };
        if decoded.encode() != bytes {
            return Err("version bytes are not in canonical form".into());
        }
        Ok(decoded)
    }
}

/// Reads a version's stored bytes (a range get inside its slot, or its blob) and checks
/// their size and hash against the record.
pub async fn read_version(
    store: &dyn BlobStore,
    prefix: &str,
    record: &VersionRecord,
) -> Result<Bytes> {
    let bytes = version_bytes(store, prefix, record)
        .await
        .map_err(|e| Error::storage(Op::Read, e))?;
    if bytes.len() as u64 != record.size || Hash::of(&bytes) != record.hash {
        return Err(Error::integrity(
            Op::Read,
            version_key(prefix, record),
            format!(
                "bytes of version {} do not match its record",
                record.version
            ),
        ));
    }
    Ok(bytes)
}

/// A version's stored bytes as the bucket holds them, unchecked: for a reader that verifies
/// them itself (chain verification must see what is stored, damage included).
pub async fn version_bytes(
    store: &dyn BlobStore,
    prefix: &str,
    record: &VersionRecord,
) -> quire_blob::Result<Bytes> {
    match record.location {
        Location::Inline { slot, offset } => {
            let key = keys::slot_key(prefix, slot);
            store.get_range(&key, offset..offset + record.size).await
        }
        Location::Blob => {
            let key = keys::blob_key(prefix, &record.hash);
            Ok(store.get(&key).await?.data)
        }
    }
}

/// The key of the object holding a version's bytes.
fn version_key(prefix: &str, record: &VersionRecord) -> String {
    match record.location {
        Location::Inline { slot, .. } => keys::slot_key(prefix, slot),
        Location::Blob => keys::blob_key(prefix, &record.hash),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sample() -> StoredVersion {
        let metadata = [
            ("tags", "alpha,beta"),
            ("importance", "0.7"),
            ("type", "Note"),
            ("zeta", ""),
        ]
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
        StoredVersion {
            version: 3,
            previous: Some(Hash::of(b"v2")),
            metadata,
            body: "---\nown: frontmatter\n---\n# Body\n".into(),
        }
    }

    #[test]
    fn layout_is_fixed() {
        let v = sample();
        let text = String::from_utf8(v.encode().to_vec()).unwrap();
        let want = format!(
            "---\nversion: 3\nprevious-hash: blake3-{}\ntype: Note\ntags: [alpha, beta]\nmeta.importance: 0.7\nmeta.zeta: \n---\n---\nown: frontmatter\n---\n# Body\n",
            Hash::of(b"v2")
        );
        assert_eq!(text, want);
        assert_eq!(StoredVersion::decode(text.as_bytes()).unwrap(), v);
    }

    #[test]
    fn first_version_has_no_previous_hash() {
        let v = StoredVersion {
            version: 1,
            previous: None,
            metadata: Metadata::new(),
            body: String::new(),
        };
        assert_eq!(&v.encode()[..], b"---\nversion: 1\n---\n");
        assert_eq!(StoredVersion::decode(&v.encode()).unwrap(), v);
    }

    #[test]
    fn refuses_tampering() {
        let good = String::from_utf8(sample().encode().to_vec()).unwrap();
        let cases = [
            good.replace("version: 3\n", "version: 03\n"),
            good.replace("version: 3\n", ""),
            good.replace("previous-hash", "previous-hush"),
            good.replacen("type: Note\n", "", 1)
                .replace("meta.zeta: \n", "meta.zeta: \ntype: Note\n"),
            good.replace("[alpha, beta]", "[alpha,beta]"),
            good.replace("meta.zeta", "meta.Zeta"),
            good.replace("meta.importance", "meta.version"),
            good.replacen("---\n", "", 1),
            "plain bytes".to_owned(),
            "---\nversion: 2\n---\nbody".to_owned(),
        ];
        for bad in cases {
            assert!(StoredVersion::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(StoredVersion::decode(&[0xff, 0xfe]).is_err());
    }

    proptest! {
        #[test]
        fn round_trips(
            version in 1u64..1_000_000,
            body in "\\PC{0,64}",
            tags in proptest::collection::vec("[a-z:]{1,6}", 0..4),
            extra in proptest::collection::btree_map("[a-z][a-z0-9.-]{0,8}", "[ -~]{0,12}", 0..4),
        ) {
            let mut metadata: Metadata = extra
                .into_iter()
                .filter(|(k, _)| !crate::metadata::RESERVED_KEYS.contains(&k.as_str()) && k != "retention")
                .collect();
            if !tags.is_empty() {
                metadata.insert("tags".into(), tags.join(","));
            }
            let metadata = crate::metadata::normalize(&metadata).unwrap();
            let previous = (version > 1).then(|| Hash::of(&version.to_le_bytes()));
            let v = StoredVersion { version, previous, metadata, body };
            prop_assert_eq!(StoredVersion::decode(&v.encode()).unwrap(), v);
        }
    }
}
