//! Copies of a world's section index in its bucket, so a cold replica downloads one instead
//! of reading every body (docs/FORMAT.md, "Section index copies").
//!
//! - **Keys**, under the world's prefix: `search/v1/index/<sequence, 16 lowercase hex>` is a
//!   manifest naming the copy of an index covering that snapshot; `search/v1/files/<file
//!   name>/<part, 8 lowercase hex>` holds part of one index file. Index file names are unique
//!   (tantivy segment ids), so a file is written once however many copies name it; every
//!   object is created, never replaced.
//! - **Written off the commit path**, by a replica with a built index after its compactor
//!   wrote a checkpoint: parts first, the manifest last, so a manifest only names files that
//!   are there.
//! - **Never trusted**: every part must hash to its manifest entry and every file pass its
//!   checksum; the documents of the copy are then compared, key by key, with the snapshot it
//!   serves, and only those that agree are kept. A missing or damaged object costs a rebuild.
//! - **Collected with the checkpoints**: after a checkpoint drop, manifests of sequences below
//!   the oldest kept checkpoint go (the newest manifest always stays), then every part no
//!   manifest names once it is older than the grace (a copy being written names its parts
//!   only when done).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use quire_blob::BlobStore;
use quire_index::{Export, Import, ImportFile, SectionStore};
use quire_log::Hash;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::search::IndexShelf;

/// Key directory of the copies, under the world's prefix.
pub const SEARCH_DIR: &str = "search/v1/";
/// The most bytes of one part.
pub const PART_BYTES: usize = 4 << 20;
/// Parts moved at once.
const PARALLEL: usize = 16;
/// The manifest format this release writes and reads (2: the index schema with stored
/// priors and positional word runs).
const FORMAT: u32 = 2;

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    world: String,
    sequence: u64,
    /// tantivy's `meta.json` of the commit.
    meta: String,
    files: Vec<FileEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileEntry {
    name: String,
    size: u64,
    /// The blake3 of each part, in order.
    parts: Vec<String>,
}

/// The bucket store's shelf of section index copies.
#[derive(Debug)]
pub struct BucketShelf {
    blobs: Arc<dyn BlobStore>,
    prefix: String,
    world: String,
    grace: Duration,
}

fn failed(why: impl std::fmt::Display) -> Error {
    Error::new(Op::Lookup, "", ErrorKind::Storage, why.to_string())
}

fn damaged(key: &str, why: impl std::fmt::Display) -> Error {
    Error::new(Op::Lookup, key, ErrorKind::Integrity, why.to_string())
}

impl BucketShelf {
    /// The shelf of the world `world` under `prefix`; parts no manifest names go once older
    /// than `grace`.
    pub fn new(blobs: Arc<dyn BlobStore>, prefix: &str, world: &str, grace: Duration) -> Self {
        BucketShelf {
            blobs,
            prefix: prefix.to_owned(),
            world: world.to_owned(),
            grace,
        }
    }

    fn manifest_dir(&self) -> String {
        format!("{}{SEARCH_DIR}index/", self.prefix)
    }

    fn manifest_key(&self, sequence: u64) -> String {
        format!("{}{sequence:016x}", self.manifest_dir())
    }

    fn files_dir(&self) -> String {
        format!("{}{SEARCH_DIR}files/", self.prefix)
    }

    fn part_key(&self, name: &str, part: usize) -> String {
        format!("{}{name}/{part:08x}", self.files_dir())
    }

    fn sequence_of(&self, key: &str) -> Option<u64> {
        let name = key.strip_prefix(&self.manifest_dir())?;
        (name.len() == 16
            && name
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| u64::from_str_radix(name, 16).ok())
        .flatten()
    }

    async fn create(&self, key: String, data: Bytes) -> Result<()> {
        match self.blobs.create(&key, data).await {
            Ok(_) => Ok(()),
            // Written before (file names are unique; a manifest of one sequence is the same
            // commit's copy): nothing to do.
            Err(e) if e.is_precondition() => Ok(()),
            Err(e) => Err(failed(e)),
        }
    }

    async fn fetch_part(&self, key: String, hash: String) -> Result<Bytes> {
        let found = self.blobs.get(&key).await.map_err(failed)?;
        // Hashed off the task that polls every part, so parts hash on all cores at once.
        let data = found.data;
        let (data, matches) = tokio::task::spawn_blocking(move || {
            let matches = Hash::of(&data).to_hex() == hash;
            (data, matches)
        })
        .await
        .map_err(failed)?;
        if !matches {
            return Err(damaged(&key, "the part does not match its manifest"));
        }
        Ok(data)
    }

    async fn manifests(&self) -> Result<Vec<(u64, quire_blob::Attributes)>> {
        let listed = quire_blob::list_all(self.blobs.as_ref(), &self.manifest_dir(), "")
            .await
            .map_err(failed)?;
        let mut out: Vec<(u64, quire_blob::Attributes)> = listed
            .into_iter()
            .filter_map(|a| self.sequence_of(&a.key).map(|s| (s, a)))
            .collect();
        out.sort_by_key(|(s, _)| *s);
        Ok(out)
    }

    async fn read_manifest(&self, key: &str) -> Result<Manifest> {
        let found = self.blobs.get(key).await.map_err(failed)?;
        let manifest: Manifest =
            serde_json::from_slice(&found.data).map_err(|e| damaged(key, e))?;
        if manifest.format != FORMAT || manifest.world != self.world {
            return Err(damaged(key, "a manifest of another format or world"));
        }
        if self.sequence_of(key) != Some(manifest.sequence) {
            return Err(damaged(key, "the manifest names another sequence"));
        }
        Ok(manifest)
    }
}

#[async_trait]
impl IndexShelf for BucketShelf {
    async fn put(&self, sequence: u64, store: Arc<SectionStore>, export: Export) -> Result<()> {
        let mut files = Vec::with_capacity(export.files.len());
        for name in &export.files {
            let bytes = store.read(name).map_err(failed)?;
            let bytes = bytes.as_slice();
            let count = bytes.len().div_ceil(PART_BYTES).max(1);
            let part = |i: usize| &bytes[i * PART_BYTES..((i + 1) * PART_BYTES).min(bytes.len())];
            let hashes = (0..count).map(|i| Hash::of(part(i)).to_hex()).collect();
            futures::stream::iter(0..count)
                .map(|i| self.create(self.part_key(name, i), Bytes::copy_from_slice(part(i))))
                .buffer_unordered(PARALLEL)
                .try_collect::<Vec<()>>()
                .await?;
            files.push(FileEntry {
                name: name.clone(),
                size: bytes.len() as u64,
                parts: hashes,
            });
        }
        let manifest = Manifest {
            format: FORMAT,
            world: self.world.clone(),
            sequence,
            meta: export.meta,
            files,
        };
        let encoded = serde_json::to_vec(&manifest).map_err(failed)?;
        self.create(self.manifest_key(sequence), Bytes::from(encoded))
            .await
    }

    async fn take(&self, into: Import) -> Result<Option<(u64, SectionStore)>> {
        let started = tokio::time::Instant::now();
        let Some((_, newest)) = self.manifests().await?.pop() else {
            return Ok(None);
        };
        let manifest = self.read_manifest(&newest.key).await?;
        if manifest.files.iter().any(|f| f.parts.is_empty()) {
            return Err(damaged(
                &newest.key,
                "the manifest names a file of no parts",
            ));
        }
        // Every part of every file in one ordered stream, so small files download in
        // parallel too; each part is checked as it arrives and written in order.
        let wanted: Vec<(usize, String, String)> = manifest
            .files
            .iter()
            .enumerate()
            .flat_map(|(f, file)| {
                file.parts
                    .iter()
                    .enumerate()
                    .map(move |(i, hash)| (f, self.part_key(&file.name, i), hash.clone()))
            })
            .collect();
        let mut parts = futures::stream::iter(wanted)
            .map(|(f, key, hash)| async move { (f, self.fetch_part(key, hash).await) })
            .buffered(PARALLEL);
        let finish = |f: usize, out: ImportFile, size: u64| -> Result<()> {
            let file = &manifest.files[f];
            if size != file.size {
                return Err(damaged(
                    &file.name,
                    "the file has another size than its manifest",
                ));
            }
            out.finish().map_err(failed)
        };
        let mut open: Option<(usize, ImportFile, u64)> = None;
        while let Some((f, part)) = parts.next().await {
            let part = part?;
            let (_, out, size) = match open.take() {
                Some(current) if current.0 == f => open.insert(current),
                previous => {
                    if let Some((prev, out, size)) = previous {
                        finish(prev, out, size)?;
                    }
                    let out = into
                        .file(&manifest.files[f].name)
                        .map_err(|e| damaged(&newest.key, e))?;
                    open.insert((f, out, 0))
                }
            };
            *size += part.len() as u64;
            out.write(&part).map_err(failed)?;
        }
        drop(parts);
        if let Some((f, out, size)) = open.take() {
            finish(f, out, size)?;
        }
        let fetched = started.elapsed();
        let meta = manifest.meta;
        let store = tokio::task::spawn_blocking(move || into.open(&meta))
            .await
            .map_err(failed)?
            .map_err(|e| damaged(&newest.key, e))?;
        tracing::info!(
            fetch_ms = fetched.as_millis() as u64,
            open_ms = (started.elapsed() - fetched).as_millis() as u64,
            files = manifest.files.len(),
            "section index copy taken"
        );
        Ok(Some((manifest.sequence, store)))
    }

    async fn collect(&self, oldest_kept: u64) -> Result<u64> {
        let mut manifests = self.manifests().await?;
        let newest = manifests.pop();
        let mut deleted = 0;
        let mut kept = Vec::new();
        for (sequence, attrs) in manifests {
            if sequence < oldest_kept {
                match self.blobs.delete(&attrs.key, &attrs.generation).await {
                    Ok(()) => deleted += 1,
                    Err(e) if e.is_not_found() || e.is_precondition() => {}
                    Err(e) => return Err(failed(e)),
                }
            } else {
                kept.push(attrs);
            }
        }
        kept.extend(newest.map(|(_, a)| a));
        let mut named: HashSet<String> = HashSet::new();
        for attrs in &kept {
            // A manifest that cannot be read names nothing worth keeping.
            if let Ok(manifest) = self.read_manifest(&attrs.key).await {
                for file in manifest.files {
                    for i in 0..file.parts.len() {
                        named.insert(self.part_key(&file.name, i));
                    }
                }
            }
        }
        // Compared with the parts' modification times, which the bucket stamps by its own
        // clock: the local wall clock is the nearest to it, as the drop grace assumes.
        #[allow(
            clippy::disallowed_methods,
            reason = "compared with the bucket's stamps"
        )]
        let now = SystemTime::now();
        let parts = quire_blob::list_all(self.blobs.as_ref(), &self.files_dir(), "")
            .await
            .map_err(failed)?;
        for part in parts {
            let old = now
                .duration_since(part.modified)
                .is_ok_and(|age| age >= self.grace);
            if named.contains(&part.key) || !old {
                continue;
            }
            match self.blobs.delete(&part.key, &part.generation).await {
                Ok(()) => deleted += 1,
                Err(e) if e.is_not_found() || e.is_precondition() => {}
                Err(e) => return Err(failed(e)),
            }
        }
        Ok(deleted)
    }
}
