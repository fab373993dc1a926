//! Copies of a commit: what [`SectionStore::export`] names for a copy elsewhere, and an
//! [`Import`] that writes a copy's files back (by parts, in any order) and opens it, every
//! file checked against its checksum.

use std::fmt;
use std::path::Path;
use std::sync::Mutex;

use tantivy::Index;
use tantivy::directory::{Directory, MmapDirectory, RamDirectory};

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
    dir: Option<std::path::PathBuf>,
}

impl fmt::Debug for Import {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Import")
            .field("dir", &self.dir)
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
fn write_all_at(file: &std::fs::File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

#[cfg(windows)]
fn write_all_at(file: &std::fs::File, mut bytes: &[u8], mut offset: u64) -> std::io::Result<()> {
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
        let directory: Box<dyn Directory> = match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Box::new(MmapDirectory::open(dir)?)
            }
            None => Box::new(RamDirectory::create()),
        };
        Ok(Import {
            directory,
            dir: dir.map(Path::to_path_buf),
        })
    }

    /// Starts copying file `name` (a plain file name) of `size` bytes.
    pub fn file(&self, name: &str, size: u64) -> StoreResult<ImportFile> {
        if name.is_empty()
            || name.contains(['/', '\\'])
            || name.starts_with('.')
            || name == "meta.json"
        {
            return Err(StoreError(format!("{name:?} is no index file name")));
        }
        let target = match &self.dir {
            Some(dir) => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(dir.join(name))?;
                file.set_len(size)?;
                ImportTarget::Disk(file)
            }
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

    /// Writes `meta` and opens the index, checking every file against its checksum.
    pub fn open(self, meta: &str) -> StoreResult<SectionStore> {
        self.directory
            .atomic_write(Path::new("meta.json"), meta.as_bytes())?;
        let index = Index::open(self.directory.box_clone())?;
        let broken = index.validate_checksum()?;
        if !broken.is_empty() {
            return Err(StoreError(format!(
                "{} copied index files fail their checksum",
                broken.len()
            )));
        }
        SectionStore::with_index(index, self.directory)
    }
}
