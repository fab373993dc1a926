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
//!   are there. Only parts the bucket lacks are sent; files the replica put or took before
//!   are named from memory, not read again.
//! - **Never trusted**: every part must hash to its manifest entry and every file pass its
//!   checksum; the documents of the copy are then compared, key by key, with the snapshot it
//!   serves, and only those that agree are kept. A missing or damaged object costs a rebuild.
//! - **Answering before it is whole**: into a directory, positions and stored sections arrive
//!   after the index opens (their last parts, which opening reads, before): the rest
//!   downloads behind the first answers, a search fetches the parts it touches first, and
//!   each such file passes its checksum once whole ([`Taken::rest`]).
//! - **Collected with the checkpoints**: after a checkpoint drop, manifests of sequences below
//!   the oldest kept checkpoint go (the newest manifest always stays), then every part no
//!   manifest names once it is older than the grace (a copy being written names its parts
//!   only when done).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{FutureExt, StreamExt, TryStreamExt};
use quire_blob::BlobStore;
use quire_index::{DeferredFile, Export, Import, ImportFile, PartClaim, PartFetch, SectionStore};
use quire_log::Hash;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::search::{IndexShelf, Taken};

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

/// A part to fetch before the copy opens.
enum Fetch {
    /// Part of a file that comes whole: key, hash, the file, offset, length.
    Whole(String, String, Arc<ImportFile>, u64, usize),
    /// A claimed part of a late file.
    Late(PartClaim, Arc<LateParts>),
}

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    world: String,
    sequence: u64,
    /// tantivy's `meta.json` of the commit.
    meta: String,
    files: Vec<FileEntry>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
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
    /// [`PART_BYTES`] unless told otherwise; smaller in tests, so small files span parts.
    /// One world's copies must share it: a file's parts are keyed by its name and index alone.
    part_bytes: usize,
    /// The files of the last copy this shelf put or took, by name: index file names are
    /// unique and a file's bytes never change, so the next copy that names one whose parts
    /// are all in the bucket reuses its entry instead of reading, hashing and sending it again.
    known: std::sync::Mutex<HashMap<String, FileEntry>>,
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
            known: Default::default(),
        }
    }

    /// Cuts files into parts of `part_bytes` ([`SearchOptions::copy_part_bytes`]; at least
    /// one byte).
    ///
    /// [`SearchOptions::copy_part_bytes`]: crate::SearchOptions::copy_part_bytes
    pub fn with_part_bytes(mut self, part_bytes: usize) -> Self {
        self.part_bytes = part_bytes.max(1);
        self
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, FileEntry>> {
        self.known.lock().expect("shelf entries poisoned")
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
            check_part(&key, &hash, len, &data)?;
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

/// A part must be as long as its place in the file and hash to its manifest entry.
fn check_part(key: &str, hash: &str, len: usize, data: &[u8]) -> Result<()> {
    if data.len() != len || Hash::of(data).to_hex() != hash {
        return Err(damaged(key, "the part does not match its manifest"));
    }
    Ok(())
}

/// Where the parts of one file that arrives after its index opens come from.
#[derive(Debug)]
struct LateParts {
    blobs: Arc<dyn BlobStore>,
    /// Per part, its key and its manifest hash.
    parts: Vec<(String, String)>,
}

impl LateParts {
    async fn get(&self, part: usize) -> Result<(String, String, Bytes)> {
        let (key, hash) = self
            .parts
            .get(part)
            .cloned()
            .ok_or_else(|| failed(format!("no part {part}")))?;
        let found = self.blobs.get(&key).await.map_err(failed)?;
        Ok((key, hash, found.data))
    }

    /// Fetches a claimed part into its file (checked and written on the blocking pool). A
    /// fetch that fails, or is dropped, leaves the part missing (its claim settles it).
    async fn fetch_into(&self, claim: PartClaim) -> Result<()> {
        let (key, hash, data) = self.get(claim.part()).await?;
        tokio::task::spawn_blocking(move || {
            write_late(claim.file(), claim.part(), &key, &hash, &data)?;
            claim.written();
            Ok(())
        })
        .await
        .map_err(failed)?
    }

    /// What a read of `file` calls, off the runtime, for a part nobody fetches: the part is
    /// fetched on `runtime` and checked and written by the reading thread.
    fn fetch_blocking(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        file: &DeferredFile,
        part: usize,
    ) -> std::result::Result<(), quire_index::StoreError> {
        let (sent, arrived) = std::sync::mpsc::sync_channel(1);
        let parts = self.clone();
        runtime.spawn(async move {
            // The reader waits on `arrived`; one gone (its thread ended) needs nothing.
            let _ = sent.send(parts.get(part).await);
        });
        let as_store =
            |e: Error| quire_index::StoreError::from(std::io::Error::other(e.to_string()));
        let (key, hash, data) = arrived
            .recv()
            .map_err(|_| as_store(failed("the runtime stopped before the part came")))?
            .map_err(as_store)?;
        write_late(file, part, &key, &hash, &data).map_err(as_store)
    }
}

fn write_late(file: &DeferredFile, part: usize, key: &str, hash: &str, data: &[u8]) -> Result<()> {
    let range = file.part_range(part);
    check_part(key, hash, (range.end - range.start) as usize, data)?;
    file.write_part(part, data).map_err(failed)
}

/// Fetches every part of the late files nobody fetched yet, [`PARALLEL`] at once, file by
/// file.
async fn fetch_late(late: Vec<(Arc<DeferredFile>, Arc<LateParts>)>) -> Result<()> {
    let wanted = late
        .into_iter()
        .flat_map(|(file, parts)| (0..file.parts()).map(move |i| (file.clone(), parts.clone(), i)));
    futures::stream::iter(wanted)
        .map(|(file, parts, part)| async move {
            match file.claim(part) {
                Some(claim) => parts.fetch_into(claim).await,
                None => Ok(()),
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<()>()
        .await
}

#[async_trait]
impl IndexShelf for BucketShelf {
    async fn put(&self, sequence: u64, store: Arc<SectionStore>, export: Export) -> Result<()> {
        let started = tokio::time::Instant::now();
        // What is in the bucket now: a file is reused, and a part sent, only by that.
        let present: HashSet<String> =
            quire_blob::list_all(self.blobs.as_ref(), &self.files_dir(), "")
                .await
                .map_err(failed)?
                .into_iter()
                .map(|a| a.key)
                .collect();
        let all_present = |entry: &FileEntry| {
            (0..entry.parts.len()).all(|i| present.contains(&self.part_key(&entry.name, i)))
        };
        let mut files = Vec::with_capacity(export.files.len());
        let (mut reused, mut sent) = (0usize, 0usize);
        for name in &export.files {
            let known = self.known().get(name).cloned();
            if let Some(entry) = known.filter(|e| all_present(e)) {
                files.push(entry);
                reused += 1;
                continue;
            }
            // Off the runtime: a file of a copy still arriving waits for its parts.
            let (reading, named) = (store.clone(), name.clone());
            let bytes = tokio::task::spawn_blocking(move || reading.read(&named))
                .await
                .map_err(failed)?
                .map_err(failed)?;
            let bytes = bytes.as_slice();
            let size = self.part_bytes;
            let count = bytes.len().div_ceil(size).max(1);
            let part = |i: usize| &bytes[i * size..((i + 1) * size).min(bytes.len())];
            let hashes = (0..count).map(|i| Hash::of(part(i)).to_hex()).collect();
            let missing: Vec<usize> = (0..count)
                .filter(|i| !present.contains(&self.part_key(name, *i)))
                .collect();
            sent += missing.len();
            futures::stream::iter(missing)
                .map(|i| self.create(self.part_key(name, i), Bytes::copy_from_slice(part(i))))
                .buffer_unordered(PARALLEL)
                .try_collect::<Vec<()>>()
                .await?;
            let entry = FileEntry {
                name: name.clone(),
                size: bytes.len() as u64,
                parts: hashes,
            };
            self.known().insert(name.clone(), entry.clone());
            files.push(entry);
        }
        // Files merged away since are named by no later copy of this index.
        self.known()
            .retain(|name, _| export.files.binary_search(name).is_ok());
        tracing::info!(
            files = files.len(),
            reused,
            parts_sent = sent,
            put_ms = started.elapsed().as_millis() as u64,
            "section index copy put"
        );
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

    async fn take(&self, into: Import, refused: Option<u64>) -> Result<Option<Taken>> {
        let started = tokio::time::Instant::now();
        let Some((sequence, newest)) = self.manifests().await?.pop() else {
            return Ok(None);
        };
        if refused == Some(sequence) {
            return Ok(None);
        }
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
        // Positions and stored sections arrive after the index opens (a search fetches the
        // parts it touches first); opening reads every file's end, so each late file's last
        // part comes before, with every part of the other files.
        let runtime = tokio::runtime::Handle::current();
        let mut whole = Vec::new();
        let mut late = Vec::new();
        let mut first = Vec::new();
        for entry in &manifest.files {
            let keys = (0..entry.parts.len()).map(|i| self.part_key(&entry.name, i));
            if into.defers() && quire_index::is_deferrable(&entry.name) {
                let parts = Arc::new(LateParts {
                    blobs: self.blobs.clone(),
                    parts: keys.zip(entry.parts.iter().cloned()).collect(),
                });
                let fetch: PartFetch = {
                    let (parts, runtime) = (parts.clone(), runtime.clone());
                    Arc::new(move |file: &DeferredFile, part| {
                        parts.fetch_blocking(&runtime, file, part)
                    })
                };
                let file = into
                    .deferred_file(&entry.name, entry.size, size as u64, fetch)
                    .map_err(|e| damaged(&newest.key, e))?;
                if let Some(claim) = file.claim(file.parts() - 1) {
                    first.push(Fetch::Late(claim, parts.clone()));
                }
                late.push((file, parts));
                continue;
            }
            let out = Arc::new(
                into.file(&entry.name, entry.size)
                    .map_err(|e| damaged(&newest.key, e))?,
            );
            for (i, (key, hash)) in keys.zip(&entry.parts).enumerate() {
                let offset = (i * size) as u64;
                let len = (entry.size - offset).min(size as u64) as usize;
                first.push(Fetch::Whole(key, hash.clone(), out.clone(), offset, len));
            }
            whole.push(out);
        }
        // Every part wanted before opening in one stream, so small files download in
        // parallel too; each part is checked and written at its place on the blocking pool as
        // it arrives.
        futures::stream::iter(first)
            .map(|fetch| async move {
                match fetch {
                    Fetch::Whole(key, hash, out, offset, len) => {
                        self.fetch_part(key, hash, out, offset, len).await
                    }
                    Fetch::Late(claim, parts) => parts.fetch_into(claim).await,
                }
            })
            .buffer_unordered(PARALLEL)
            .try_collect::<()>()
            .await?;
        for out in whole {
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
            late = late.len(),
            "section index copy taken"
        );
        let rest = (!late.is_empty()).then(|| fetch_late(late).boxed());
        // A later copy of this index names these files again: their parts are in the bucket,
        // and each is checked against these entries before anything reads it.
        *self.known() = manifest
            .files
            .into_iter()
            .map(|f| (f.name.clone(), f))
            .collect();
        Ok(Some(Taken {
            sequence: manifest.sequence,
            store,
            rest,
        }))
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

    /// The newest copy on `shelf`, taken into files in `dir` (so its late files arrive after
    /// it opens).
    async fn take_into(shelf: &BucketShelf, dir: &tempfile::TempDir) -> Taken {
        shelf
            .take(Import::new(Some(dir.path())).unwrap(), None)
            .await
            .unwrap()
            .unwrap()
    }

    /// Reads each of `files` from `copy` on a blocking thread, as tantivy reads a late part,
    /// and requires the original's bytes.
    async fn reads_as_original(
        copy: &Arc<SectionStore>,
        original: &SectionStore,
        files: Vec<String>,
    ) {
        for name in files {
            let (reading, named) = (copy.clone(), name.clone());
            let read = tokio::task::spawn_blocking(move || reading.read(&named).unwrap())
                .await
                .unwrap();
            assert_eq!(
                read.as_slice(),
                original.read(&name).unwrap().as_slice(),
                "{name}"
            );
        }
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
            let taken = shelf
                .take(Import::new(into).unwrap(), None)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(taken.sequence, 7);
            assert_eq!(taken.rest.is_some(), into.is_some());
            assert_eq!(
                taken.store.base().unwrap().keys().unwrap(),
                original.base().unwrap().keys().unwrap()
            );
            if let Some(rest) = taken.rest {
                rest.await.unwrap();
                taken.store.verify_deferred().unwrap();
            }
        }
        let again = shelf.take(Import::new(None).unwrap(), Some(7)).await;
        assert!(again.as_ref().is_ok_and(Option::is_none), "{again:?}");

        // One part replaced by bytes of the same length: the first of a file that arrives
        // after its index opens, so a copy into a directory opens and its rest fails.
        let part = parts
            .iter()
            .find(|p| p.key.contains(".store/") && p.key.ends_with("/00000000"))
            .unwrap();
        let bytes = blobs.get(&part.key).await.unwrap().data;
        let wrong = Bytes::from(vec![b'x'; bytes.len()]);
        blobs
            .replace(&part.key, &part.generation, wrong)
            .await
            .unwrap();
        let refused = shelf.take(Import::new(None).unwrap(), None).await;
        assert!(refused.is_err(), "{refused:?}");
        let dir = tempfile::tempdir().unwrap();
        let taken = take_into(&shelf, &dir).await;
        let failed = taken.rest.unwrap().await;
        assert!(
            failed
                .as_ref()
                .is_err_and(|e| e.to_string().contains("does not match")),
            "{failed:?}"
        );

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
        let refused = shelf.take(Import::new(None).unwrap(), None).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("parts for")),
            "{refused:?}"
        );
    }

    /// A copy into a directory answers before its late files are whole: a read fetches the
    /// parts it touches (from a thread off the runtime) while nothing else fetches them,
    /// and every byte read is the original's.
    #[tokio::test]
    async fn a_read_fetches_the_late_parts_it_touches_before_the_rest_arrives() {
        let blobs = Arc::new(MemoryStore::new());
        let original = store(40);
        let shelf = shelf(&blobs);
        let export = original.export().unwrap();
        shelf
            .put(7, original.clone(), export.clone())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let taken = take_into(&shelf, &dir).await;
        let copy = Arc::new(taken.store);
        // `rest` is not polled: every late part read below is fetched by the read itself.
        let rest = taken.rest.unwrap();
        reads_as_original(&copy, &original, export.files).await;
        rest.await.unwrap();
        let checking = copy.clone();
        tokio::task::spawn_blocking(move || checking.verify_deferred())
            .await
            .unwrap()
            .unwrap();
    }

    /// A copy whose files are in the bucket already sends none of them again: a replica that
    /// put or took them names them from memory, and only a part gone from the bucket (or a
    /// file it never saw) is read, hashed and sent.
    #[tokio::test]
    async fn a_copy_sends_only_the_parts_the_bucket_lacks() {
        use quire_blob::{Op, Simulated};
        let memory = Arc::new(MemoryStore::new());
        let blobs = Arc::new(Simulated::new(memory.clone(), 0));
        let parts_sent = blobs.calls(&[Op::Create], "w/search/v1/files/");
        let shelf =
            BucketShelf::new(blobs.clone(), "w/", "world", Duration::ZERO).with_part_bytes(64);
        let original = store(40);
        let export = original.export().unwrap();
        shelf
            .put(7, original.clone(), export.clone())
            .await
            .unwrap();
        let all = parts_sent.count();
        assert!(all > 4 * export.files.len() as u64, "{all} parts");

        shelf
            .put(8, original.clone(), export.clone())
            .await
            .unwrap();
        assert_eq!(parts_sent.count(), all, "nothing sent again");

        // One part gone from the bucket: that part alone is sent again.
        let gone = quire_blob::list_all(memory.as_ref(), &shelf.files_dir(), "")
            .await
            .unwrap()
            .swap_remove(3);
        memory.delete(&gone.key, &gone.generation).await.unwrap();
        shelf
            .put(9, original.clone(), export.clone())
            .await
            .unwrap();
        assert_eq!(parts_sent.count(), all + 1);

        // A replica that took the copy names its files from the manifest.
        let cold =
            BucketShelf::new(blobs.clone(), "w/", "world", Duration::ZERO).with_part_bytes(64);
        let taken = cold
            .take(Import::new(None).unwrap(), None)
            .await
            .unwrap()
            .unwrap();
        let copy = Arc::new(taken.store);
        cold.put(10, copy.clone(), copy.export().unwrap())
            .await
            .unwrap();
        assert_eq!(parts_sent.count(), all + 1, "the taken copy sends nothing");
        let manifest = |sequence| {
            let key = shelf.manifest_key(sequence);
            let memory = memory.clone();
            async move {
                let found = memory.get(&key).await.unwrap();
                serde_json::from_slice::<Manifest>(&found.data)
                    .unwrap()
                    .files
            }
        };
        let (first, last) = (manifest(7).await, manifest(10).await);
        assert_eq!(
            serde_json::to_string(&first).unwrap(),
            serde_json::to_string(&last).unwrap(),
            "the same files, sizes and part hashes"
        );
    }

    /// Parts the background download had taken when it was stopped (the index dropped, the
    /// copy refused) are left to the readers: a read of them fetches them itself instead of
    /// waiting for a fetch that will never end.
    #[tokio::test]
    async fn a_stopped_download_leaves_its_parts_to_the_readers() {
        use quire_blob::{Op, Simulated};
        let blobs = Arc::new(Simulated::new(Arc::new(MemoryStore::new()), 0));
        let shelf =
            BucketShelf::new(blobs.clone(), "w/", "world", Duration::ZERO).with_part_bytes(64);
        let original = store(40);
        let export = original.export().unwrap();
        shelf
            .put(7, original.clone(), export.clone())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let taken = take_into(&shelf, &dir).await;
        let copy = Arc::new(taken.store);

        // The download takes parts and waits on their reads; then it is stopped.
        let hold = blobs.hold(Op::Get, "w/search/v1/files/");
        let rest = tokio::spawn(taken.rest.unwrap());
        hold.wait_held(1).await;
        rest.abort();
        assert!(rest.await.unwrap_err().is_cancelled());
        hold.stop_catching();

        tokio::time::timeout(
            Duration::from_secs(60),
            reads_as_original(&copy, &original, export.files),
        )
        .await
        .expect("no read waits for the stopped download");
    }
}
