//! Blocking file operations of the file store: crash-safe replacement of a file (write a new
//! file, fsync it, rename it over the target, fsync the directory), directory creation that
//! survives a crash, the directory lock, and the scan that finds every document at open.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use quire_log::DocPath;
use rustix::fs::{FlockOperation, flock};

use super::layout::{STATE_FILE, SYSTEM_DIR, VERSIONS_DIR, unescape};

/// Writes under one root.
#[derive(Debug)]
pub(super) struct Disk {
    root: PathBuf,
    tmp: PathBuf,
    /// Whether to fsync (off only for throwaway worlds in tests).
    durable: bool,
    counter: AtomicU64,
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Disk {
    pub(super) fn new(root: PathBuf, durable: bool) -> Disk {
        let tmp = root.join(SYSTEM_DIR).join("tmp");
        Disk {
            root,
            tmp,
            durable,
            counter: AtomicU64::new(0),
        }
    }

    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the temporary directory and empties it of a crashed run's leftovers.
    pub(super) fn prepare(&self) -> io::Result<()> {
        self.ensure_dir(&self.tmp)?;
        for entry in fs::read_dir(&self.tmp)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }

    /// Creates `dir` and its missing ancestors below the root, each made durable in its parent.
    pub(super) fn ensure_dir(&self, dir: &Path) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        if let Some(parent) = dir.parent()
            && parent != self.root
            && parent.starts_with(&self.root)
        {
            self.ensure_dir(parent)?;
        }
        match fs::create_dir(dir) {
            Ok(()) => {
                if self.durable
                    && let Some(parent) = dir.parent()
                {
                    fsync_dir(parent)?;
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Replaces `target` with `bytes` atomically: readers see the old file or the new one,
    /// and after a crash the target holds one of them whole.
    pub(super) fn replace(&self, target: &Path, bytes: &[u8]) -> io::Result<()> {
        let parent = target
            .parent()
            .ok_or_else(|| io::Error::other("a target without a directory"))?;
        self.ensure_dir(parent)?;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let temp = self.tmp.join(format!("{}-{n}.tmp", std::process::id()));
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temp)?;
            file.write_all(bytes)?;
            if self.durable {
                file.sync_all()?;
            }
            fs::rename(&temp, target)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written?;
        if self.durable {
            fsync_dir(parent)?;
        }
        Ok(())
    }

    /// Removes `path` if present.
    pub(super) fn remove(&self, path: &Path) -> io::Result<()> {
        match fs::remove_file(path) {
            Ok(()) => {
                if self.durable
                    && let Some(parent) = path.parent()
                {
                    fsync_dir(parent)?;
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Takes the directory lock: exclusive for a writer, shared for read-only stores. Fails at
/// once (`WouldBlock`) when another store holds it.
pub(super) fn lock(path: &Path, exclusive: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let operation = if exclusive {
        FlockOperation::NonBlockingLockExclusive
    } else {
        FlockOperation::NonBlockingLockShared
    };
    flock(&file, operation).map_err(io::Error::from)?;
    Ok(file)
}

/// Every document the directory holds: its path and its history directory (one holding a
/// state file). Symbolic links are not followed.
pub(super) fn scan(root: &Path) -> io::Result<Vec<(DocPath, PathBuf)>> {
    let mut found = Vec::new();
    let mut stack: Vec<(PathBuf, String)> = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, logical)) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if logical.is_empty() && name == SYSTEM_DIR {
                continue;
            }
            if name == VERSIONS_DIR {
                for history in fs::read_dir(entry.path())? {
                    let history = history?;
                    let Some(doc_name) = history.file_name().to_str().and_then(unescape) else {
                        continue;
                    };
                    if !history.file_type()?.is_dir() || !history.path().join(STATE_FILE).is_file()
                    {
                        continue;
                    }
                    let raw = format!("{logical}/{doc_name}");
                    let path = DocPath::canonical(&raw).map_err(|why| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{raw:?} is not a document path: {why}"),
                        )
                    })?;
                    found.push((path, history.path()));
                }
                continue;
            }
            if let Some(segment) = unescape(&name) {
                stack.push((entry.path(), format!("{logical}/{segment}")));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_creates_directories_and_leaves_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::new(dir.path().to_path_buf(), true);
        disk.prepare().unwrap();
        let target = dir.path().join("a/b/c.md");
        disk.replace(&target, b"one").unwrap();
        disk.replace(&target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        assert_eq!(
            fs::read_dir(dir.path().join(".quire/tmp")).unwrap().count(),
            0
        );
        disk.remove(&target).unwrap();
        disk.remove(&target).unwrap();
        assert!(!target.exists());
    }

    #[test]
    fn the_lock_admits_one_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = lock(&path, true).unwrap();
        assert!(lock(&path, true).is_err());
        assert!(lock(&path, false).is_err());
        drop(held);
        let reader = lock(&path, false).unwrap();
        let _second_reader = lock(&path, false).unwrap();
        assert!(lock(&path, true).is_err());
        drop(reader);
    }
}
