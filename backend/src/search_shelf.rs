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
/// The manifest format this release writes and reads (3: one positional words field per
/// part, compound tokens beside the runs, and zstd stored blocks; 2 had separate token
/// fields).
const FORMAT: u32 = 3;

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
    /// [`PART_BYTES`]; smaller in tests, so small files span parts. One world's copies must
    /// share it: a file's parts are keyed by its name and index alone.
    part_bytes: usize,
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
            part_bytes: PART_BYTES,
        }
    }

    #[cfg(test)]
    fn with_part_bytes(mut self, part_bytes: usize) -> Self {
        self.part_bytes = part_bytes;
        self
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

    /// Fetches one part, checks it against its manifest hash and its expected length, and
    /// writes it at `offset` of `out`.
    async fn fetch_part(
        &self,
        key: String,
        hash: String,
        out: Arc<ImportFile>,
        offset: u64,
        len: usize,
    ) -> Result<()> {
        let found = self.blobs.get(&key).await.map_err(failed)?;
        let data = found.data;
        // Off the task that polls every part, so parts hash and write on all cores at once.
        tokio::task::spawn_blocking(move || {
            if data.len() != len || Hash::of(&data).to_hex() != hash {
                return Err(damaged(&key, "the part does not match its manifest"));
            }
            out.write_at(offset, &data).map_err(failed)
        })
        .await
        .map_err(failed)?
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
            let size = self.part_bytes;
            let count = bytes.len().div_ceil(size).max(1);
            let part = |i: usize| &bytes[i * size..((i + 1) * size).min(bytes.len())];
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
        // Every file is cut at the part size, so its size fixes how many parts it has and
        // where each one goes; a manifest that disagrees is refused before anything is fetched.
        let size = self.part_bytes;
        for file in &manifest.files {
            let count =
                usize::try_from(file.size.div_ceil(size as u64)).map_or(usize::MAX, |n| n.max(1));
            if file.parts.len() != count {
                return Err(damaged(
                    &newest.key,
                    format!(
                        "{:?} has {} parts for {} bytes",
                        file.name,
                        file.parts.len(),
                        file.size
                    ),
                ));
            }
        }
        let files: Vec<Arc<ImportFile>> = manifest
            .files
            .iter()
            .map(|f| into.file(&f.name, f.size).map(Arc::new))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| damaged(&newest.key, e))?;
        // Every part of every file in one stream, so small files download in parallel too;
        // each part is checked and written at its place on the blocking pool as it arrives.
        let mut wanted = Vec::new();
        for (entry, out) in manifest.files.iter().zip(&files) {
            for (i, hash) in entry.parts.iter().enumerate() {
                let offset = (i * size) as u64;
                let len = (entry.size - offset).min(size as u64) as usize;
                let key = self.part_key(&entry.name, i);
                wanted.push((key, hash.clone(), out.clone(), offset, len));
            }
        }
        futures::stream::iter(wanted)
            .map(|(key, hash, out, offset, len)| self.fetch_part(key, hash, out, offset, len))
            .buffer_unordered(PARALLEL)
            .try_collect::<()>()
            .await?;
        for out in files {
            let out =
                Arc::into_inner(out).ok_or_else(|| failed("a part is still being written"))?;
            into.finish(out).map_err(failed)?;
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

#[cfg(test)]
mod tests {
    use quire_blob::memory::MemoryStore;
    use quire_index::EntryKey;
    use quire_log::DocPath;

    use super::*;

    /// A committed store of `docs` documents whose files span many 64-byte parts.
    fn store(docs: usize) -> Arc<SectionStore> {
        let store = SectionStore::create(None).unwrap();
        for i in 0..docs {
            let body = format!("# Note {i}\n\nword{i} common text\n\n## More\n\nsecond {i}\n");
            let key = EntryKey {
                body_hash: Hash::of(body.as_bytes()),
                title: format!("Note {i}"),
                tags: vec!["t".into()],
                importance: "0.5".into(),
            };
            let path = DocPath::parse(&format!("/n/{i:03}.md")).unwrap();
            store.add(&path, key, &body).unwrap();
        }
        store.commit(7).unwrap();
        Arc::new(store)
    }

    fn shelf(blobs: &Arc<MemoryStore>) -> BucketShelf {
        BucketShelf::new(blobs.clone(), "w/", "world", Duration::ZERO).with_part_bytes(64)
    }

    /// Parts land in any order, in parallel, into files on disk or in memory: the copy holds
    /// exactly the original's documents, and a part that differs from its manifest, or a
    /// manifest whose part count disagrees with a file's size, is refused.
    #[tokio::test]
    async fn a_copy_cut_into_many_parts_arrives_whole_and_a_wrong_part_is_refused() {
        let blobs = Arc::new(MemoryStore::new());
        let original = store(40);
        let shelf = shelf(&blobs);
        shelf
            .put(7, original.clone(), original.export().unwrap())
            .await
            .unwrap();
        let parts = quire_blob::list_all(blobs.as_ref(), &shelf.files_dir(), "")
            .await
            .unwrap();
        let files = original.export().unwrap().files.len();
        assert!(
            parts.len() > 4 * files,
            "{} parts of {files} files",
            parts.len()
        );

        let dir = tempfile::tempdir().unwrap();
        for into in [Some(dir.path()), None] {
            let (sequence, copy) = shelf
                .take(Import::new(into).unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(sequence, 7);
            assert_eq!(
                copy.base().unwrap().keys().unwrap(),
                original.base().unwrap().keys().unwrap()
            );
        }

        // One part replaced by bytes of the same length.
        let part = &parts[parts.len() / 2];
        let bytes = blobs.get(&part.key).await.unwrap().data;
        let wrong = Bytes::from(vec![b'x'; bytes.len()]);
        blobs
            .replace(&part.key, &part.generation, wrong)
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let refused = shelf.take(Import::new(Some(dir.path())).unwrap()).await;
        assert!(refused.is_err(), "{refused:?}");

        // A manifest whose file claims one byte more than its parts hold.
        let key = shelf.manifest_key(7);
        let found = blobs.get(&key).await.unwrap();
        let mut manifest: Manifest = serde_json::from_slice(&found.data).unwrap();
        let file = manifest
            .files
            .iter_mut()
            .find(|f| f.parts.len() > 1)
            .unwrap();
        file.size = (file.parts.len() * 64) as u64 + 1;
        let encoded = Bytes::from(serde_json::to_vec(&manifest).unwrap());
        blobs
            .replace(&key, &found.attributes.generation, encoded)
            .await
            .unwrap();
        let refused = shelf.take(Import::new(None).unwrap()).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("parts for")),
            "{refused:?}"
        );
    }
}
