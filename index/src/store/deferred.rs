//! Files of a copy that arrive after the index opens: a segment's positions and stored
//! sections (three fifths of its bytes) are read by range, only by the searches that touch
//! them (and whole by merges and copies), so a cold replica answers once the rest is in and
//! fetches them behind it. A read waits
//! for every part it touches: a part being fetched is waited for, a part nobody fetches yet
//! is fetched by the reader itself (through the import's [`PartFetch`]).
//!
//! Invariant: a byte of a deferred file is read only after its whole part was written and
//! its fetch said so ([`PartClaim::written`]); parts are written once, in place, so a
//! mapping of the file never sees a byte change after it is read. A fetch that ends any
//! other way (failed, cancelled, unwound) leaves its part missing again, so no reader waits
//! for it forever.

use std::fmt;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tantivy::HasLen;
use tantivy::directory::{FileHandle, OwnedBytes};

use super::{StoreError, StoreResult};

/// Fetches part `part` of `file` and writes it ([`DeferredFile::write_part`]), blocking the
/// calling thread until it is written or failed. Called off any async runtime's workers.
pub type PartFetch = Arc<dyn Fn(&DeferredFile, usize) -> StoreResult<()> + Send + Sync>;

/// The tantivy index file names whose bytes may arrive after the index opens: positions and
/// stored sections, which only searches, merges and copies read, all off async runtimes'
/// workers. Postings are not: bringing a copy to its snapshot looks documents up by path on
/// the runtime.
pub fn is_deferrable(name: &str) -> bool {
    Path::new(name)
        .extension()
        .is_some_and(|e| e == "pos" || e == "store")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Missing,
    Fetching,
    Written,
}

/// One file of a copy whose parts arrive in any order, each written at its place.
pub struct DeferredFile {
    name: String,
    size: u64,
    part_bytes: u64,
    file: std::fs::File,
    parts: Mutex<Vec<Part>>,
    settled: Condvar,
    /// Every part written: reads skip the lock.
    complete: AtomicBool,
    fetch: PartFetch,
}

impl fmt::Debug for DeferredFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferredFile")
            .field("name", &self.name)
            .field("size", &self.size)
            .field("complete", &self.is_complete())
            .finish_non_exhaustive()
    }
}

impl DeferredFile {
    pub(super) fn new(
        name: &str,
        size: u64,
        part_bytes: u64,
        file: std::fs::File,
        fetch: PartFetch,
    ) -> StoreResult<DeferredFile> {
        if part_bytes == 0 {
            return Err(StoreError(
                "a deferred file needs parts of some size".into(),
            ));
        }
        let count = usize::try_from(size.div_ceil(part_bytes).max(1))
            .map_err(|_| StoreError(format!("{name:?} has too many parts")))?;
        Ok(DeferredFile {
            name: name.to_owned(),
            size,
            part_bytes,
            file,
            parts: Mutex::new(vec![Part::Missing; count]),
            settled: Condvar::new(),
            complete: AtomicBool::new(false),
            fetch,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many parts the file has.
    pub fn parts(&self) -> usize {
        self.lock().len()
    }

    /// The bytes part `part` covers.
    pub fn part_range(&self, part: usize) -> Range<u64> {
        let start = (part as u64).saturating_mul(self.part_bytes).min(self.size);
        start..start.saturating_add(self.part_bytes).min(self.size)
    }

    pub fn is_complete(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Part>> {
        self.parts.lock().expect("deferred parts poisoned")
    }

    /// Takes part `part` to fetch: `None` when it is written or another fetch has it.
    pub fn claim(self: &Arc<Self>, part: usize) -> Option<PartClaim> {
        PartClaim::take(self.clone(), part)
    }

    /// Marks a missing part as being fetched; `false` when it is not missing.
    fn start(&self, part: usize) -> bool {
        let mut parts = self.lock();
        match parts.get_mut(part) {
            Some(state @ Part::Missing) => {
                *state = Part::Fetching;
                true
            }
            _ => false,
        }
    }

    /// Writes the bytes of part `part` (exactly its length) at its place.
    pub fn write_part(&self, part: usize, bytes: &[u8]) -> StoreResult<()> {
        let range = self.part_range(part);
        if part >= self.parts() || bytes.len() as u64 != range.end - range.start {
            return Err(StoreError(format!(
                "{} bytes are no part {part} of {:?}",
                bytes.len(),
                self.name
            )));
        }
        Ok(super::copy::write_all_at(&self.file, bytes, range.start)?)
    }

    /// Ends the fetch of a claimed part: written, or missing again (a later read fetches it).
    fn settle(&self, part: usize, written: bool) {
        let mut parts = self.lock();
        if let Some(state) = parts.get_mut(part) {
            *state = if written {
                Part::Written
            } else {
                Part::Missing
            };
        }
        if parts.iter().all(|p| *p == Part::Written) {
            self.complete.store(true, Ordering::Release);
        }
        drop(parts);
        self.settled.notify_all();
    }

    /// Returns once every part holding a byte of `range` is written, fetching those nobody
    /// fetches.
    pub fn ensure(&self, range: Range<u64>) -> StoreResult<()> {
        if self.is_complete() || range.start >= range.end {
            return Ok(());
        }
        let first = range.start / self.part_bytes;
        let last = (range.end - 1) / self.part_bytes;
        for part in first..=last {
            let part = usize::try_from(part).map_err(|_| StoreError("part out of range".into()))?;
            self.ensure_part(part)?;
        }
        Ok(())
    }

    /// Every part written, fetching those nobody fetches.
    pub fn ensure_all(&self) -> StoreResult<()> {
        self.ensure(0..self.size)
    }

    /// Whether the whole file matches the checksum in its tantivy footer (a JSON footer
    /// holding the crc32 of the bytes before it, then its length and a magic number, each a
    /// little-endian u32). Read through the file, not its mapping, so checking a copy does
    /// not leave every page of it mapped into the process.
    pub fn checksum_ok(&self) -> StoreResult<bool> {
        const MAGIC: u32 = 1337;
        // The longest footer tantivy opens: a longer one is foreign, and is not read.
        const FOOTER_MAX_LEN: u32 = 50_000;
        self.ensure_all()?;
        let broken = |why: &str| StoreError(format!("{:?}: {why}", self.name));
        let mut tail = [0u8; 8];
        let Some(tail_at) = self.size.checked_sub(8) else {
            return Err(broken("shorter than a footer"));
        };
        super::copy::read_exact_at(&self.file, &mut tail, tail_at)?;
        let footer_len = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes"));
        if u32::from_le_bytes(tail[4..].try_into().expect("4 bytes")) != MAGIC {
            return Err(broken("no footer"));
        }
        if footer_len > FOOTER_MAX_LEN {
            return Err(broken("a footer longer than tantivy writes"));
        }
        let Some(body_len) = tail_at.checked_sub(u64::from(footer_len)) else {
            return Err(broken("a footer longer than the file"));
        };
        let mut footer = vec![0; footer_len as usize];
        super::copy::read_exact_at(&self.file, &mut footer, body_len)?;
        let footer: tantivy::directory::footer::Footer =
            serde_json::from_slice(&footer).map_err(|e| broken(&e.to_string()))?;
        let mut hasher = crc32fast::Hasher::new();
        let mut chunk = vec![0; 1 << 20];
        let mut at = 0;
        while at < body_len {
            let n = (body_len - at).min(chunk.len() as u64) as usize;
            super::copy::read_exact_at(&self.file, &mut chunk[..n], at)?;
            hasher.update(&chunk[..n]);
            at += n as u64;
        }
        Ok(hasher.finalize() == footer.crc)
    }

    fn ensure_part(&self, part: usize) -> StoreResult<()> {
        let mut parts = self.lock();
        loop {
            match parts.get(part).copied() {
                None => return Err(StoreError(format!("{:?} has no part {part}", self.name))),
                Some(Part::Written) => return Ok(()),
                Some(Part::Fetching) => {
                    parts = self.settled.wait(parts).expect("deferred parts poisoned");
                }
                Some(Part::Missing) => {
                    parts[part] = Part::Fetching;
                    drop(parts);
                    let claim = PartClaim {
                        file: self,
                        part,
                        written: false,
                    };
                    (self.fetch)(self, part)?;
                    claim.written();
                    return Ok(());
                }
            }
        }
    }
}

/// A part taken to fetch (from an `Arc` of its file, or a borrow of it): settled written by
/// [`PartClaim::written`], missing again when dropped otherwise.
pub struct PartClaim<F: Deref<Target = DeferredFile> = Arc<DeferredFile>> {
    file: F,
    part: usize,
    written: bool,
}

impl<F: Deref<Target = DeferredFile>> PartClaim<F> {
    fn take(file: F, part: usize) -> Option<PartClaim<F>> {
        // Built only once the part is taken: a claim dropped settles its part.
        if !file.start(part) {
            return None;
        }
        Some(PartClaim {
            file,
            part,
            written: false,
        })
    }

    pub fn file(&self) -> &DeferredFile {
        &self.file
    }

    pub fn part(&self) -> usize {
        self.part
    }

    /// Ends the fetch: the part was written whole ([`DeferredFile::write_part`]).
    pub fn written(mut self) {
        self.written = true;
    }
}

impl<F: Deref<Target = DeferredFile>> Drop for PartClaim<F> {
    fn drop(&mut self) {
        self.file.settle(self.part, self.written);
    }
}

impl<F: Deref<Target = DeferredFile>> fmt::Debug for PartClaim<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartClaim")
            .field("file", &self.file.name)
            .field("part", &self.part)
            .finish()
    }
}

/// A reader's handle on a deferred file: its bytes through the mapping of the file, once
/// the parts a read touches are written.
#[derive(Debug)]
pub(super) struct DeferredHandle {
    pub(super) file: Arc<DeferredFile>,
    pub(super) mapped: Arc<dyn FileHandle>,
}

impl HasLen for DeferredHandle {
    fn len(&self) -> usize {
        self.mapped.len()
    }
}

impl FileHandle for DeferredHandle {
    fn read_bytes(&self, range: Range<usize>) -> std::io::Result<OwnedBytes> {
        self.file
            .ensure(range.start as u64..range.end as u64)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        self.mapped.read_bytes(range)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A new file of `size` zero bytes at `path`, open to read and write.
    fn sized_file(path: &std::path::Path, size: u64) -> std::fs::File {
        let handle = std::fs::OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        handle.set_len(size).unwrap();
        handle
    }

    /// A deferred file of `size` bytes in parts of 4, whose part `i` holds bytes `i`, and
    /// whose fetches are counted (and fail while `failing` is set).
    fn file(
        dir: &tempfile::TempDir,
        size: u64,
    ) -> (Arc<DeferredFile>, Arc<AtomicUsize>, Arc<AtomicBool>) {
        let (fetches, failing) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (counted, refused) = (fetches.clone(), failing.clone());
        let fetch: PartFetch = Arc::new(move |file: &DeferredFile, part| {
            counted.fetch_add(1, Ordering::SeqCst);
            if refused.load(Ordering::SeqCst) {
                return Err(StoreError("the part cannot be had".into()));
            }
            let range = file.part_range(part);
            file.write_part(part, &vec![part as u8; (range.end - range.start) as usize])
        });
        let path = dir.path().join("f.store");
        let handle = sized_file(&path, size);
        let file = DeferredFile::new("f.store", size, 4, handle, fetch).unwrap();
        (Arc::new(file), fetches, failing)
    }

    #[test]
    fn a_read_fetches_each_part_it_touches_once_and_a_failed_fetch_is_tried_again() {
        let dir = tempfile::tempdir().unwrap();
        let (file, fetches, failing) = file(&dir, 10);
        assert_eq!(file.parts(), 3);
        assert_eq!(file.part_range(2), 8..10);

        // Parts 0 and 1, each fetched once however many readers wait for them.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| file.ensure(3..5).unwrap());
            }
        });
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        assert!(!file.is_complete());
        let bytes = std::fs::read(dir.path().join("f.store")).unwrap();
        assert_eq!(&bytes[..8], &[0, 0, 0, 0, 1, 1, 1, 1]);

        // A claimed part is left to its claimer; a failed fetch leaves it missing.
        assert!(file.claim(0).is_none());
        failing.store(true, Ordering::SeqCst);
        assert!(file.ensure(9..10).is_err());
        failing.store(false, Ordering::SeqCst);
        let claim = file.claim(2).unwrap();
        file.write_part(2, &[2, 2]).unwrap();
        claim.written();
        assert!(file.is_complete());
        file.ensure_all().unwrap();
        assert_eq!(fetches.load(Ordering::SeqCst), 3, "complete: nothing more");
        assert!(
            file.write_part(2, &[2]).is_err(),
            "a part is its whole length"
        );
    }

    /// A fetch that ends without writing its part (failed, cancelled: its claim dropped)
    /// leaves the part missing, and a reader waiting for it fetches it itself instead of
    /// waiting forever.
    #[test]
    fn a_claim_dropped_unwritten_leaves_its_part_to_the_readers() {
        let dir = tempfile::tempdir().unwrap();
        let (file, fetches, _) = file(&dir, 10);
        let claim = file.claim(1).unwrap();
        let (reading, (done, read)) = (file.clone(), std::sync::mpsc::channel());
        std::thread::spawn(move || done.send(reading.ensure(4..6)));
        drop(claim);
        read.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the reader does not wait for the dropped claim")
            .unwrap();
        assert_eq!(fetches.load(Ordering::SeqCst), 1, "the reader fetched it");
        assert!(file.claim(1).is_none(), "written");
    }

    /// A file whose footer claims more than tantivy ever writes is refused before that
    /// length is read or allocated.
    #[test]
    fn a_footer_longer_than_tantivy_writes_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let size = 60_008u64;
        let mut bytes = vec![0u8; size as usize];
        bytes[60_000..60_004].copy_from_slice(&60_000u32.to_le_bytes());
        bytes[60_004..].copy_from_slice(&1337u32.to_le_bytes());
        let fetch: PartFetch = Arc::new(move |file: &DeferredFile, part| {
            let range = file.part_range(part);
            file.write_part(part, &bytes[range.start as usize..range.end as usize])
        });
        let path = dir.path().join("f.store");
        let handle = sized_file(&path, size);
        let file = DeferredFile::new("f.store", size, 4096, handle, fetch).unwrap();
        let refused = file.checksum_ok().unwrap_err();
        assert!(
            refused.0.contains("a footer longer than tantivy writes"),
            "{refused}"
        );
    }

    /// A copy whose positions and stored sections arrive late opens, answers the
    /// same keys as its original, and passes its checksums once whole; a late file with one
    /// byte changed fails them.
    #[test]
    fn a_copy_with_late_files_opens_and_a_changed_byte_fails_its_checksum() {
        use crate::body::EntryKey;
        use crate::store::{Import, SectionStore};
        use quire_log::{DocPath, Hash};

        let original = SectionStore::create(None).unwrap();
        for i in 0..30 {
            let body = format!("# Note {i}\n\nword{i} common text\n");
            let key = EntryKey {
                body_hash: Hash::of(body.as_bytes()),
                title: format!("Note {i}"),
                tags: vec![],
                importance: "0.5".into(),
            };
            let path = DocPath::parse(&format!("/n/{i:02}.md")).unwrap();
            original.add(&path, key, &body).unwrap();
        }
        original.commit(3).unwrap();
        let original = Arc::new(original);
        let export = original.export().unwrap();

        for changed in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let import = Import::new(Some(dir.path())).unwrap();
            let mut late = Vec::new();
            for name in &export.files {
                let mut bytes = original.read(name).unwrap().as_slice().to_vec();
                if !is_deferrable(name) {
                    let file = import.file(name, bytes.len() as u64).unwrap();
                    file.write_at(0, &bytes).unwrap();
                    import.finish(file).unwrap();
                    continue;
                }
                if changed && name.ends_with(".store") {
                    bytes[0] ^= 1;
                }
                let fetch: PartFetch = Arc::new(move |file: &DeferredFile, part| {
                    let range = file.part_range(part);
                    file.write_part(part, &bytes[range.start as usize..range.end as usize])
                });
                let size = original.read(name).unwrap().len() as u64;
                late.push(import.deferred_file(name, size, 64, fetch).unwrap());
            }
            assert!(late.len() >= 2, "positions and stored sections");
            let copy = import.open(&export.meta).unwrap();
            assert_eq!(
                copy.base().unwrap().keys().unwrap(),
                original.base().unwrap().keys().unwrap()
            );
            let verified = copy.verify_deferred();
            assert_eq!(verified.is_err(), changed, "{verified:?}");
        }
    }
}
