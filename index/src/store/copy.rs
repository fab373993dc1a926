//! Copies of a commit: what [`SectionStore::export`] names for a copy elsewhere, and an
//! [`Import`] that writes a copy's files back (by parts, in any order) and opens it, every
//! file checked against its checksum — a deferred file ([`DeferredFile`]) once it is whole,
//! after the index opened.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tantivy::Index;
use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, RamDirectory, WatchCallback,
    WatchHandle, WritePtr,
};

use super::deferred::{DeferredFile, DeferredHandle, PartFetch};
use super::{SectionStore, StoreError, StoreResult};

/// What a copy of a commit holds: its `meta.json` and the names of its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    pub meta: String,
    pub files: Vec<String>,
}

/// Builds a stored index from copied files: files in `dir`, or in memory. Files are written
/// by parts in any order, from any thread, and never synced: a copy is a cache in a fresh
/// directory, verified when opened and downloaded again if lost.
pub struct Import {
    directory: Box<dyn Directory>,
    dir: Option<(PathBuf, MmapDirectory)>,
    deferred: Mutex<Vec<Arc<DeferredFile>>>,
}

impl fmt::Debug for Import {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Import")
            .field("dir", &self.dir.as_ref().map(|(path, _)| path))
            .finish_non_exhaustive()
    }
}

/// One file being copied in: its bytes are written at their offsets, in any order.
pub struct ImportFile {
    name: String,
    size: u64,
    target: ImportTarget,
}

enum ImportTarget {
    Disk(std::fs::File),
    Memory(Mutex<Vec<u8>>),
}

impl fmt::Debug for ImportFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportFile")
            .field("name", &self.name)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl ImportFile {
    /// Writes `bytes` at `offset`; refused past the file's size.
    pub fn write_at(&self, offset: u64, bytes: &[u8]) -> StoreResult<()> {
        let end = offset.checked_add(bytes.len() as u64);
        if end.is_none_or(|end| end > self.size) {
            return Err(StoreError(format!(
                "{} bytes at {offset} pass the end of {:?} ({} bytes)",
                bytes.len(),
                self.name,
                self.size
            )));
        }
        match &self.target {
            ImportTarget::Disk(file) => Ok(write_all_at(file, bytes, offset)?),
            ImportTarget::Memory(data) => {
                let start = offset as usize;
                data.lock().expect("import buffer poisoned")[start..start + bytes.len()]
                    .copy_from_slice(bytes);
                Ok(())
            }
        }
    }
}

#[cfg(unix)]
pub(super) fn write_all_at(file: &std::fs::File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

#[cfg(unix)]
pub(super) fn read_exact_at(
    file: &std::fs::File,
    into: &mut [u8],
    offset: u64,
) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, into, offset)
}

#[cfg(windows)]
pub(super) fn read_exact_at(
    file: &std::fs::File,
    mut into: &mut [u8],
    mut offset: u64,
) -> std::io::Result<()> {
    while !into.is_empty() {
        let read = std::os::windows::fs::FileExt::seek_read(file, into, offset)?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        into = &mut into[read..];
        offset += read as u64;
    }
    Ok(())
}

#[cfg(windows)]
pub(super) fn write_all_at(
    file: &std::fs::File,
    mut bytes: &[u8],
    mut offset: u64,
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let written = std::os::windows::fs::FileExt::seek_write(file, bytes, offset)?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[written..];
        offset += written as u64;
    }
    Ok(())
}

impl Import {
    pub fn new(dir: Option<&Path>) -> StoreResult<Import> {
        let (directory, dir): (Box<dyn Directory>, _) = match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                let mapped = MmapDirectory::open(dir)?;
                (Box::new(mapped.clone()), Some((dir.to_path_buf(), mapped)))
            }
            None => (Box::new(RamDirectory::create()), None),
        };
        Ok(Import {
            directory,
            dir,
            deferred: Mutex::new(Vec::new()),
        })
    }

    /// Whether files may arrive after the index opens ([`Import::deferred_file`]): only into
    /// a directory, whose files are mapped, not into memory.
    pub fn defers(&self) -> bool {
        self.dir.is_some()
    }

    /// Starts copying file `name` (a plain file name) of `size` bytes, cut in parts of
    /// `part_bytes`, whose parts may arrive after [`Import::open`]: a read of the opened
    /// index waits for the parts it touches, and `fetch`es those nobody fetches.
    pub fn deferred_file(
        &self,
        name: &str,
        size: u64,
        part_bytes: u64,
        fetch: PartFetch,
    ) -> StoreResult<Arc<DeferredFile>> {
        check_name(name)?;
        let Some((dir, _)) = &self.dir else {
            return Err(StoreError(format!(
                "{name:?} cannot arrive late into memory"
            )));
        };
        let file = create_sized(&dir.join(name), size)?;
        let deferred = Arc::new(DeferredFile::new(name, size, part_bytes, file, fetch)?);
        self.deferred
            .lock()
            .expect("import list poisoned")
            .push(deferred.clone());
        Ok(deferred)
    }

    /// Starts copying file `name` (a plain file name) of `size` bytes.
    pub fn file(&self, name: &str, size: u64) -> StoreResult<ImportFile> {
        check_name(name)?;
        let target = match &self.dir {
            Some((dir, _)) => ImportTarget::Disk(create_sized(&dir.join(name), size)?),
            None => {
                // A size no allocation holds is refused, not an abort.
                let too_large = || StoreError(format!("{name:?} is too large for memory"));
                let size = usize::try_from(size).map_err(|_| too_large())?;
                let mut data = Vec::new();
                data.try_reserve_exact(size).map_err(|_| too_large())?;
                data.resize(size, 0);
                ImportTarget::Memory(Mutex::new(data))
            }
        };
        Ok(ImportFile {
            name: name.to_owned(),
            size,
            target,
        })
    }

    /// Ends copying `file`, every byte of which was written.
    pub fn finish(&self, file: ImportFile) -> StoreResult<()> {
        match file.target {
            ImportTarget::Disk(_) => Ok(()),
            ImportTarget::Memory(data) => {
                let data = data.into_inner().expect("import buffer poisoned");
                Ok(self.directory.atomic_write(Path::new(&file.name), &data)?)
            }
        }
    }

    /// Writes `meta` and opens the index, checking every file but the deferred ones against
    /// its checksum ([`SectionStore::verify_deferred`] checks those once they are whole).
    pub fn open(self, meta: &str) -> StoreResult<SectionStore> {
        self.directory
            .atomic_write(Path::new("meta.json"), meta.as_bytes())?;
        let deferred = self.deferred.into_inner().expect("import list poisoned");
        let directory: Box<dyn Directory> = match self.dir {
            Some((_, mapped)) if !deferred.is_empty() => Box::new(CopyDirectory {
                mapped,
                deferred: Arc::new(
                    deferred
                        .iter()
                        .map(|f| (PathBuf::from(f.name()), f.clone()))
                        .collect(),
                ),
            }),
            _ => self.directory,
        };
        let index = Index::open(directory.box_clone())?;
        let late: Vec<&str> = deferred.iter().map(|f| f.name()).collect();
        let mut broken = 0;
        for path in index.load_metas()?.list_segment_files() {
            let name = path.to_string_lossy();
            if late.contains(&name.as_ref()) || !directory.exists(&path).unwrap_or(false) {
                continue;
            }
            if !index
                .directory()
                .validate_checksum(&path)
                .map_err(|e| StoreError(e.to_string()))?
            {
                broken += 1;
            }
        }
        if broken > 0 {
            return Err(StoreError(format!(
                "{broken} copied index files fail their checksum"
            )));
        }
        SectionStore::with_index(index, directory, deferred)
    }
}

/// A copied file's name must be a plain index file name: no directory, no hidden file, not
/// the `meta.json` the copy's manifest carries.
fn check_name(name: &str) -> StoreResult<()> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') || name == "meta.json"
    {
        return Err(StoreError(format!("{name:?} is no index file name")));
    }
    Ok(())
}

/// A new file of `size` bytes (a hole until written), refused if it exists; readable too,
/// so a deferred file's checksum is read through it.
fn create_sized(path: &Path, size: u64) -> StoreResult<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)?;
    file.set_len(size)?;
    Ok(file)
}

/// The directory of an index opened before its deferred files are whole: every call goes
/// to the mapped directory, but a deferred file is read through its [`DeferredHandle`].
#[derive(Clone, Debug)]
struct CopyDirectory {
    mapped: MmapDirectory,
    deferred: Arc<HashMap<PathBuf, Arc<DeferredFile>>>,
}

impl Directory for CopyDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        let mapped = self.mapped.get_file_handle(path)?;
        Ok(match self.deferred.get(path) {
            Some(file) => Arc::new(DeferredHandle {
                file: file.clone(),
                mapped,
            }),
            None => mapped,
        })
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.mapped.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.mapped.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        self.mapped.open_write(path)
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        if let Some(file) = self.deferred.get(path) {
            file.ensure_all().map_err(|e| {
                OpenReadError::wrap_io_error(std::io::Error::other(e.0), path.into())
            })?;
        }
        self.mapped.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        self.mapped.atomic_write(path, data)
    }

    fn sync_directory(&self) -> std::io::Result<()> {
        self.mapped.sync_directory()
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.mapped.acquire_lock(lock)
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.mapped.watch(watch_callback)
    }
}
