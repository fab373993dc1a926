//! Where each part of a file-store world lives on disk, and the per-document state file.
//!
//! ```text
//! <root>/
//!   .quire/world             world id and format (text)
//!   .quire/lock              held (flock) by the one store writing the directory
//!   .quire/tmp/              new files are written here, fsynced, then renamed into place
//!   notes/a.md               the current version's stored bytes: frontmatter + body
//!   notes/versions/a.md/
//!     1.md 2.md 3.md         every retained version's stored bytes
//!     state.json             archived flag and one record per retained version
//! ```
//!
//! `state.json` is each document's commit point: a version exists once the state naming it
//! is renamed into place. Names the layout reserves — `versions`, `.quire`, and any name
//! starting with `%` — are stored with one more leading `%`, so a document or directory may
//! be called anything.

use std::path::{Path, PathBuf};

use quire_log::{DocPath, DocState, Hash, Location, Timestamp, VersionRecord};
use serde::{Deserialize, Serialize};

/// The store's own directory under the root.
pub const SYSTEM_DIR: &str = ".quire";
/// The history directory beside documents.
pub const VERSIONS_DIR: &str = "versions";
/// The per-document state file in its history directory.
pub const STATE_FILE: &str = "state.json";
/// The longest on-disk name most filesystems take.
pub const MAX_NAME: usize = 255;
/// The state file format.
pub const STATE_FORMAT: u32 = 1;

/// The on-disk name of one path segment.
pub fn escape(segment: &str) -> String {
    if segment == VERSIONS_DIR || segment == SYSTEM_DIR || segment.starts_with('%') {
        format!("%{segment}")
    } else {
        segment.to_owned()
    }
}

/// The segment an on-disk name stores; `None` for names the layout reserves.
pub fn unescape(name: &str) -> Option<String> {
    match name.strip_prefix('%') {
        Some(rest) => Some(rest.to_owned()),
        None if name == VERSIONS_DIR || name == SYSTEM_DIR => None,
        None => Some(name.to_owned()),
    }
}

/// The files of one document.
#[derive(Clone, Debug)]
pub struct DocFiles {
    /// The document file (the current version's stored bytes).
    pub doc: PathBuf,
    /// `versions/<name>/` beside it.
    pub history: PathBuf,
}

impl DocFiles {
    /// The files of `path` under `root`, or why the path cannot be stored on disk.
    pub fn of(root: &Path, path: &DocPath) -> Result<DocFiles, String> {
        let mut dir = root.to_path_buf();
        let mut names: Vec<String> = path.edges().map(|(_, name)| escape(name)).collect();
        if let Some(long) = names.iter().find(|n| n.len() > MAX_NAME) {
            return Err(format!(
                "a name of {} bytes exceeds the file store's limit of {MAX_NAME}",
                long.len()
            ));
        }
        let name = names.pop().expect("a document path has a name");
        for segment in names {
            dir.push(segment);
        }
        Ok(DocFiles {
            doc: dir.join(&name),
            history: dir.join(VERSIONS_DIR).join(&name),
        })
    }

    pub fn version(&self, version: u64) -> PathBuf {
        self.history.join(format!("{version}.md"))
    }

    pub fn state(&self) -> PathBuf {
        self.history.join(STATE_FILE)
    }
}

/// What `state.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocRecord {
    pub format: u32,
    pub archived: bool,
    /// Every retained version, oldest first.
    pub versions: Vec<VersionLine>,
}

/// One retained version in `state.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionLine {
    pub version: u64,
    /// The ETag: hex of the hash of the stored bytes.
    pub hash: String,
    /// Hex of the hash of the body.
    pub body_hash: String,
    /// Seconds since the Unix epoch, UTC.
    pub modified: u64,
    /// The stored bytes' length.
    pub size: u64,
    /// `modified` in RFC 3339, for people reading the file (ignored on load).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
}

impl DocRecord {
    /// The record of a document's state.
    pub fn of(doc: &DocState) -> DocRecord {
        DocRecord {
            format: STATE_FORMAT,
            archived: doc.archived,
            versions: doc
                .recent
                .iter()
                .map(|r| VersionLine {
                    version: r.version,
                    hash: r.hash.to_hex(),
                    body_hash: r.body_hash.to_hex(),
                    modified: r.modified.0,
                    size: r.size,
                    at: r.modified.to_string(),
                })
                .collect(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("state encodes");
        out.push(b'\n');
        out
    }

    /// Decodes and checks a state file: known format, versions contiguous and positive.
    pub fn decode(bytes: &[u8]) -> Result<DocRecord, String> {
        let record: DocRecord =
            serde_json::from_slice(bytes).map_err(|e| format!("unreadable state: {e}"))?;
        if record.format != STATE_FORMAT {
            return Err(format!("unknown state format {}", record.format));
        }
        let Some(first) = record.versions.first() else {
            return Err("a state with no version".into());
        };
        if first.version == 0 {
            return Err("version 0".into());
        }
        for (i, line) in record.versions.iter().enumerate() {
            if line.version != first.version + i as u64 {
                return Err("versions are not contiguous".into());
            }
        }
        Ok(record)
    }

    /// The version records, checked.
    pub fn records(&self) -> Result<Vec<VersionRecord>, String> {
        self.versions
            .iter()
            .map(|line| {
                let hash = |text: &str| {
                    Hash::from_hex(text).ok_or_else(|| format!("malformed hash {text:?}"))
                };
                Ok(VersionRecord {
                    version: line.version,
                    hash: hash(&line.hash)?,
                    body_hash: hash(&line.body_hash)?,
                    modified: Timestamp(line.modified),
                    size: line.size,
                    location: Location::Blob,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_escape_and_round_trip() {
        for (segment, stored) in [
            ("a.md", "a.md"),
            ("versions", "%versions"),
            (".quire", "%.quire"),
            ("%x", "%%x"),
            (".hidden.md", ".hidden.md"),
        ] {
            assert_eq!(escape(segment), stored);
            assert_eq!(unescape(stored).as_deref(), Some(segment));
        }
        assert_eq!(unescape("versions"), None);
        assert_eq!(unescape(".quire"), None);
    }

    #[test]
    fn document_files_sit_beside_their_history() {
        let root = Path::new("/r");
        let files = DocFiles::of(root, &DocPath::parse("/docs/versions/a.md").unwrap()).unwrap();
        assert_eq!(files.doc, Path::new("/r/docs/%versions/a.md"));
        assert_eq!(files.history, Path::new("/r/docs/%versions/versions/a.md"));
        assert_eq!(
            files.version(3),
            Path::new("/r/docs/%versions/versions/a.md/3.md")
        );
        let long = format!("/{}", "x".repeat(MAX_NAME + 1));
        assert!(DocFiles::of(root, &DocPath::parse(&long).unwrap()).is_err());
    }

    #[test]
    fn state_round_trips_and_refuses_gaps() {
        let record = DocRecord {
            format: STATE_FORMAT,
            archived: true,
            versions: vec![VersionLine {
                version: 2,
                hash: Hash::of(b"a").to_hex(),
                body_hash: Hash::of(b"b").to_hex(),
                modified: 5,
                size: 9,
                at: String::new(),
            }],
        };
        assert_eq!(DocRecord::decode(&record.encode()).unwrap(), record);
        let mut gap = record.clone();
        let mut next = gap.versions[0].clone();
        next.version = 4;
        gap.versions.push(next);
        assert!(DocRecord::decode(&gap.encode()).is_err());
        assert!(DocRecord::decode(b"{}").is_err());
    }
}
