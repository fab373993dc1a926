//! The file driver: a [`BlobStore`] over one local directory, safe to share between threads and
//! between processes on one machine.
//!
//! # Layout
//!
//! A key is split at `/` into segments. Every segment but the last names a directory
//! `<escaped>.d`; the last names a file `<escaped>.o`, so `a` and `a/b` live side by side as
//! `a.o` and `a.d/b.o`. Escaping keeps `a-z`, `0-9`, `_` and `-` and writes every other byte as
//! `%XX` (upper-case hex): names are plain ASCII, never `.` or `..`, never contain `/`, and stay
//! distinct on case-insensitive file systems. A segment whose escaped form is longer than
//! 240 bytes is cut: its leading chunks become directories `<escaped>.c` ("the
//! segment continues inside"), which listing flattens back into one segment. The mapping is
//! reversible and canonical; names that do not decode to the canonical path of a valid key
//! (temporary files `.tmp-<random>`, anything else put there by hand) are never listed.
//!
//! Listing reads only the directories that can hold keys of the page, sorts each one's entries
//! into key byte order (a directory `s.d` sorts as `s/`), and stops after
//! [`MAX_LIST_PAGE`]` + 1` keys.
//!
//! # Object files
//!
//! `QUIREOBJ`, a format version byte and a 128-bit random generation, then the bytes. A file
//! without that header is reported as [`ErrorKind::Integrity`]. `modified` is the file's mtime.
//!
//! # Concurrency and durability
//!
//! Every mutation first writes a temporary file next to its target and fsyncs it.
//! - create publishes it with `link(2)`, which fails when the name exists, so exactly one of
//!   any number of racing creators (in any process) wins; then the directory is fsynced.
//! - replace and delete take an exclusive `flock` on the object file itself, check that the key
//!   still names the locked file (a waiter may wake up on a file already replaced), compare the
//!   generation, then `rename` over it or unlink it and fsync the directory. Locking the object's
//!   own inode needs no lock files, so there is nothing to clean up or hide from listings.
//! - readers take no lock: a published file is never modified, and rename and link are atomic.
//! - delete removes the directories it leaves empty; a create whose directory vanished under it
//!   (removed by such a delete in another process) starts over.

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use rustix::fs::{FlockOperation, flock};

use crate::BlobStore;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::list::{ListRequest, MAX_LIST_PAGE};
use crate::types::{Attributes, Generation, ListPage, Object, validate_key, validate_range};

const MAGIC: [u8; 8] = *b"QUIREOBJ";
const FORMAT_VERSION: u8 = 1;
const GENERATION_LEN: usize = 16;
const HEADER_LEN: usize = MAGIC.len() + 1 + GENERATION_LEN;

/// The longest escaped text in one file name; with its two-byte suffix well under the 255
/// bytes file systems allow.
const MAX_ESCAPED_NAME: usize = 240;
const TEMP_PREFIX: &str = ".tmp-";

/// How often a create starts over because a concurrent delete removed its directory, or a
/// conditional mutation re-locks because the object moved on while it waited, before giving up.
const MAX_ATTEMPTS: usize = 1000;

/// What a name in the tree stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NameKind {
    /// The key's last segment: an object file.
    Object,
    /// A segment followed by `/`: a directory.
    Dir,
    /// The leading chunk of a segment too long for one name: a directory holding the rest.
    Continuation,
}

impl NameKind {
    const ALL: [NameKind; 3] = [NameKind::Object, NameKind::Dir, NameKind::Continuation];

    fn suffix(self) -> &'static str {
        match self {
            NameKind::Object => ".o",
            NameKind::Dir => ".d",
            NameKind::Continuation => ".c",
        }
    }
}

fn is_plain(byte: u8) -> bool {
    byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-'
}

fn escaped_len(byte: u8) -> usize {
    if is_plain(byte) { 1 } else { 3 }
}

fn escape_into(bytes: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in bytes {
        if is_plain(byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Reverses [`escape_into`], refusing anything it would not have written.
fn unescape(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if is_plain(byte) {
            out.push(byte);
            at += 1;
        } else if byte == b'%' {
            let high = hex_value(*bytes.get(at + 1)?)?;
            let low = hex_value(*bytes.get(at + 2)?)?;
            let decoded = (high << 4) | low;
            // Plain bytes are never escaped, and a segment never holds `/`.
            if is_plain(decoded) || decoded == b'/' {
                return None;
            }
            out.push(decoded);
            at += 3;
        } else {
            return None;
        }
    }
    Some(out)
}

/// Appends the names storing one segment: continuation chunks while the rest is too long for
/// one name, then the rest under `last`.
fn segment_names(segment: &[u8], last: NameKind, out: &mut Vec<String>) {
    let mut rest = segment;
    loop {
        let total: usize = rest.iter().map(|&byte| escaped_len(byte)).sum();
        if total <= MAX_ESCAPED_NAME {
            let mut name = String::with_capacity(total + 2);
            escape_into(rest, &mut name);
            name.push_str(last.suffix());
            out.push(name);
            return;
        }
        let mut used = 0;
        let mut cut = 0;
        while used + escaped_len(rest[cut]) <= MAX_ESCAPED_NAME {
            used += escaped_len(rest[cut]);
            cut += 1;
        }
        let mut name = String::with_capacity(used + 2);
        escape_into(&rest[..cut], &mut name);
        name.push_str(NameKind::Continuation.suffix());
        out.push(name);
        rest = &rest[cut..];
    }
}

/// The path of `key` below the root, one name per level.
fn key_names(key: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut segments = key.as_bytes().split(|&byte| byte == b'/').peekable();
    while let Some(segment) = segments.next() {
        let kind = if segments.peek().is_some() {
            NameKind::Dir
        } else {
            NameKind::Object
        };
        segment_names(segment, kind, &mut names);
    }
    names
}

fn parse_name(name: &str) -> Option<(NameKind, Vec<u8>)> {
    if name.starts_with(TEMP_PREFIX) {
        return None;
    }
    NameKind::ALL.into_iter().find_map(|kind| {
        let body = name.strip_suffix(kind.suffix())?;
        Some((kind, unescape(body)?))
    })
}

/// The key stored at `names` below the root, when that is the key's canonical path.
#[cfg(test)]
fn names_key(names: &[String]) -> Option<String> {
    let mut key = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let (kind, bytes) = parse_name(name)?;
        key.extend_from_slice(&bytes);
        match kind {
            NameKind::Object if index + 1 == names.len() => {}
            NameKind::Object => return None,
            NameKind::Dir => key.push(b'/'),
            NameKind::Continuation => {}
        }
    }
    let key = String::from_utf8(key).ok()?;
    (key_names(&key) == names).then_some(key)
}

/// Where an entry of a directory sorts among its siblings: its segment, with `/` appended for
/// a directory, since every key below it continues with `/`. Segments hold no `/`, so the
/// sibling ranges never interleave.
fn sibling_order(segment: &[u8], kind: NameKind) -> Vec<u8> {
    let mut order = segment.to_vec();
    if kind == NameKind::Dir {
        order.push(b'/');
    }
    order
}

fn generation_text(generation: &[u8; GENERATION_LEN]) -> String {
    generation
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn is_absent(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn io_failure(op: Op, key: &str, kind: ErrorKind, what: &str, err: io::Error) -> Error {
    Error::new(op, key, kind, format!("{what}: {err}")).with_source(err)
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Opens the directory a mutation publishes into, before publishing: once the object is in
/// place another process may delete it and remove the directory before it is fsynced.
fn open_dir(op: Op, key: &str, dir: &Path) -> Result<File> {
    File::open(dir)
        .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "open directory", err))
}

/// An open, header-checked object file.
#[derive(Debug)]
struct OpenObject {
    file: File,
    metadata: Metadata,
    generation: String,
}

impl OpenObject {
    fn size(&self) -> u64 {
        self.metadata.len() - HEADER_LEN as u64
    }

    fn attributes(&self, op: Op, key: &str) -> Result<Attributes> {
        let modified = self
            .metadata
            .modified()
            .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "reading mtime", err))?;
        Ok(Attributes {
            key: key.to_owned(),
            size: self.size(),
            generation: Generation::new(self.generation.clone()),
            modified,
        })
    }
}

/// Checks the header of an opened object file, leaving the file positioned at its bytes.
fn check_header(op: Op, key: &str, mut file: File) -> Result<OpenObject> {
    let integrity = |why: &str| Error::new(op, key, ErrorKind::Integrity, why.to_owned());
    let metadata = file
        .metadata()
        .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "stat", err))?;
    if !metadata.is_file() {
        return Err(integrity("object path is not a regular file"));
    }
    if metadata.len() < HEADER_LEN as u64 {
        return Err(integrity("object file is shorter than its header"));
    }
    let mut header = [0u8; HEADER_LEN];
    file.read_exact(&mut header)
        .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "reading header", err))?;
    if header[..MAGIC.len()] != MAGIC {
        return Err(integrity("object file has no quire header"));
    }
    if header[MAGIC.len()] != FORMAT_VERSION {
        return Err(integrity(&format!(
            "object file has unknown format version {}",
            header[MAGIC.len()]
        )));
    }
    let mut generation = [0u8; GENERATION_LEN];
    generation.copy_from_slice(&header[MAGIC.len() + 1..]);
    Ok(OpenObject {
        file,
        metadata,
        generation: generation_text(&generation),
    })
}

/// Opens the object at `path`: `None` when there is none.
fn open_object(op: Op, key: &str, path: &Path) -> Result<Option<OpenObject>> {
    match File::open(path) {
        Ok(file) => check_header(op, key, file).map(Some),
        Err(err) if is_absent(&err) => Ok(None),
        Err(err) => Err(io_failure(op, key, ErrorKind::Unavailable, "open", err)),
    }
}

/// A fully written, fsynced object file under a temporary name, removed on drop unless it was
/// renamed into place.
#[derive(Debug)]
struct TempObject {
    path: PathBuf,
    file: File,
    generation: String,
    renamed: bool,
}

impl TempObject {
    /// Writes `data` under a fresh generation into a new temporary file in `dir`.
    #[allow(
        clippy::disallowed_methods,
        reason = "generations must differ across processes sharing the directory"
    )]
    fn write(dir: &Path, data: &[u8]) -> io::Result<TempObject> {
        let generation: [u8; GENERATION_LEN] = rand::random();
        let path = dir.join(format!("{TEMP_PREFIX}{:032x}", rand::random::<u128>()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let mut temp = TempObject {
            path,
            file,
            generation: generation_text(&generation),
            renamed: false,
        };
        let mut header = [0u8; HEADER_LEN];
        header[..MAGIC.len()].copy_from_slice(&MAGIC);
        header[MAGIC.len()] = FORMAT_VERSION;
        header[MAGIC.len() + 1..].copy_from_slice(&generation);
        temp.file.write_all(&header)?;
        temp.file.write_all(data)?;
        temp.file.sync_all()?;
        Ok(temp)
    }

    /// The attributes of the object this file holds, once published under `key`.
    fn attributes(&self, op: Op, key: &str) -> Result<Attributes> {
        let metadata = self.file.metadata().map_err(|err| {
            io_failure(op, key, ErrorKind::Ambiguous, "stat after publishing", err)
        })?;
        let modified = metadata.modified().map_err(|err| {
            io_failure(
                op,
                key,
                ErrorKind::Ambiguous,
                "reading mtime after publishing",
                err,
            )
        })?;
        Ok(Attributes {
            key: key.to_owned(),
            size: metadata.len() - HEADER_LEN as u64,
            generation: Generation::new(self.generation.clone()),
            modified,
        })
    }
}

impl Drop for TempObject {
    fn drop(&mut self) {
        if !self.renamed
            && let Err(err) = fs::remove_file(&self.path)
            && !is_absent(&err)
        {
            tracing::warn!(path = %self.path.display(), error = %err, "could not remove a temporary object file");
        }
    }
}

/// Where one key lives.
#[derive(Debug)]
struct KeyPath {
    /// The directory names between the root and the object file.
    dirs: Vec<String>,
    parent: PathBuf,
    object: PathBuf,
}

/// A [`BlobStore`] keeping each object in a file below one local directory. Clones share the
/// directory; so may any number of processes.
///
/// Paths grow to about three bytes per key byte, so the root's own path should stay well under
/// 1000 bytes for the longest keys to fit the system's path limit.
#[derive(Clone, Debug)]
pub struct DirBlobStore {
    root: Arc<PathBuf>,
}

impl DirBlobStore {
    /// Opens the store kept in `root`, creating the directory when missing.
    pub fn open(root: impl Into<PathBuf>) -> Result<DirBlobStore, io::Error> {
        let root = root.into();
        fs::create_dir_all(&root)?;
        let root = root.canonicalize()?;
        if !fs::metadata(&root)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(DirBlobStore {
            root: Arc::new(root),
        })
    }

    /// The directory holding the store.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file `key` is (or would be) stored in, for diagnostics and repair tools.
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.key_path(key).object
    }

    fn key_path(&self, key: &str) -> KeyPath {
        let mut dirs = key_names(key);
        let object_name = dirs.pop().expect("a key maps to at least one name");
        let mut parent = PathBuf::from(self.root.as_path());
        parent.extend(&dirs);
        let object = parent.join(object_name);
        KeyPath {
            dirs,
            parent,
            object,
        }
    }

    /// Creates the directories of `dirs` that are missing, fsyncing the parent of each one
    /// created so the new entry survives a crash.
    fn make_dirs(&self, dirs: &[String]) -> io::Result<()> {
        let mut path = PathBuf::from(self.root.as_path());
        for name in dirs {
            let parent = path.clone();
            path.push(name);
            match fs::create_dir(&path) {
                Ok(()) => fsync_dir(&parent)?,
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Removes the directories of `dirs` left empty, deepest first, stopping at the first one
    /// still in use. Best effort: an empty directory left behind only costs a listing a
    /// `readdir`.
    fn remove_empty_dirs(&self, dirs: &[String]) {
        for depth in (1..=dirs.len()).rev() {
            let mut path = PathBuf::from(self.root.as_path());
            path.extend(&dirs[..depth]);
            if fs::remove_dir(&path).is_err() {
                return;
            }
        }
    }

    /// Opens the current object at `path` and locks it exclusively, or `None` when the key is
    /// absent. Holding the returned file keeps the lock.
    fn lock_current(&self, op: Op, key: &str, path: &Path) -> Result<Option<OpenObject>> {
        for _ in 0..MAX_ATTEMPTS {
            let file = match File::open(path) {
                Ok(file) => file,
                Err(err) if is_absent(&err) => return Ok(None),
                Err(err) => return Err(io_failure(op, key, ErrorKind::Unavailable, "open", err)),
            };
            flock(&file, FlockOperation::LockExclusive)
                .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "flock", err.into()))?;
            let locked = file
                .metadata()
                .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "stat", err))?;
            // While we waited for the lock, the key may have moved on to another file.
            match fs::symlink_metadata(path) {
                Ok(current) if current.dev() == locked.dev() && current.ino() == locked.ino() => {
                    return check_header(op, key, file).map(Some);
                }
                Ok(_) => continue,
                Err(err) if is_absent(&err) => return Ok(None),
                Err(err) => return Err(io_failure(op, key, ErrorKind::Unavailable, "stat", err)),
            }
        }
        Err(Error::new(
            op,
            key,
            ErrorKind::Unavailable,
            "the object kept changing while waiting for its lock",
        ))
    }

    fn create_blocking(&self, key: &str, data: &[u8]) -> Result<Attributes> {
        let op = Op::Create;
        let path = self.key_path(key);
        for _ in 0..MAX_ATTEMPTS {
            match self.make_dirs(&path.dirs) {
                Ok(()) => {}
                Err(err) if is_absent(&err) => continue,
                Err(err) => {
                    return Err(io_failure(
                        op,
                        key,
                        ErrorKind::Unavailable,
                        "creating directories",
                        err,
                    ));
                }
            }
            // The temporary file keeps its directory non-empty, so no delete removes it now.
            let temp = match TempObject::write(&path.parent, data) {
                Ok(temp) => temp,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => {
                    return Err(io_failure(
                        op,
                        key,
                        ErrorKind::Unavailable,
                        "writing temporary file",
                        err,
                    ));
                }
            };
            let dir = open_dir(op, key, &path.parent)?;
            match fs::hard_link(&temp.path, &path.object) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(Error::new(op, key, ErrorKind::Precondition, "key exists"));
                }
                Err(err) => return Err(io_failure(op, key, ErrorKind::Unavailable, "link", err)),
            }
            let attributes = temp.attributes(op, key)?;
            drop(temp);
            dir.sync_all()
                .map_err(|err| io_failure(op, key, ErrorKind::Ambiguous, "fsync directory", err))?;
            return Ok(attributes);
        }
        Err(Error::new(
            op,
            key,
            ErrorKind::Unavailable,
            "the key's directory kept vanishing under concurrent deletes",
        ))
    }

    fn read_blocking(&self, op: Op, key: &str) -> Result<OpenObject> {
        open_object(op, key, &self.key_path(key).object)?
            .ok_or_else(|| Error::new(op, key, ErrorKind::NotFound, ""))
    }

    fn get_blocking(&self, key: &str) -> Result<Object> {
        let op = Op::Get;
        let mut object = self.read_blocking(op, key)?;
        let size = object.size();
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        object
            .file
            .read_to_end(&mut data)
            .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "read", err))?;
        if data.len() as u64 != size {
            return Err(Error::new(
                op,
                key,
                ErrorKind::Integrity,
                format!(
                    "object file changed size while read ({size} then {} bytes)",
                    data.len()
                ),
            ));
        }
        Ok(Object {
            attributes: object.attributes(op, key)?,
            data: Bytes::from(data),
        })
    }

    fn get_range_blocking(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let op = Op::GetRange;
        let mut object = self.read_blocking(op, key)?;
        let size = object.size();
        if range.start > size || (range.start == size && range.end > range.start) {
            return Err(Error::new(
                op,
                key,
                ErrorKind::Precondition,
                format!(
                    "range starts at {} past the end ({size} bytes)",
                    range.start
                ),
            ));
        }
        let end = range.end.min(size);
        let wanted = end - range.start;
        object
            .file
            .seek(SeekFrom::Start(HEADER_LEN as u64 + range.start))
            .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "seek", err))?;
        let mut data = Vec::with_capacity(usize::try_from(wanted).unwrap_or(0));
        (&mut object.file)
            .take(wanted)
            .read_to_end(&mut data)
            .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "read", err))?;
        if data.len() as u64 != wanted {
            return Err(Error::new(
                op,
                key,
                ErrorKind::Integrity,
                "object file shorter than its size while read",
            ));
        }
        Ok(Bytes::from(data))
    }

    fn replace_blocking(
        &self,
        key: &str,
        expected: &Generation,
        data: &[u8],
    ) -> Result<Attributes> {
        let op = Op::Replace;
        let absent = || Error::new(op, key, ErrorKind::Precondition, "key absent");
        let differs = || Error::new(op, key, ErrorKind::Precondition, "generation differs");
        let path = self.key_path(key);
        // Refuse a stale generation before writing anything.
        match open_object(op, key, &path.object)? {
            None => return Err(absent()),
            Some(current) if current.generation != expected.as_str() => return Err(differs()),
            Some(_) => {}
        }
        let mut temp = match TempObject::write(&path.parent, data) {
            Ok(temp) => temp,
            // The directory went away with the key's last object.
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(absent()),
            Err(err) => {
                return Err(io_failure(
                    op,
                    key,
                    ErrorKind::Unavailable,
                    "writing temporary file",
                    err,
                ));
            }
        };
        let Some(current) = self.lock_current(op, key, &path.object)? else {
            return Err(absent());
        };
        if current.generation != expected.as_str() {
            return Err(differs());
        }
        let dir = open_dir(op, key, &path.parent)?;
        fs::rename(&temp.path, &path.object)
            .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "rename", err))?;
        temp.renamed = true;
        let fsynced = dir
            .sync_all()
            .map_err(|err| io_failure(op, key, ErrorKind::Ambiguous, "fsync directory", err));
        drop(current);
        fsynced?;
        temp.attributes(op, key)
    }

    fn delete_blocking(&self, key: &str, expected: &Generation) -> Result<()> {
        let op = Op::Delete;
        let path = self.key_path(key);
        let Some(current) = self.lock_current(op, key, &path.object)? else {
            return Err(Error::new(op, key, ErrorKind::Precondition, "key absent"));
        };
        if current.generation != expected.as_str() {
            return Err(Error::new(
                op,
                key,
                ErrorKind::Precondition,
                "generation differs",
            ));
        }
        let dir = open_dir(op, key, &path.parent)?;
        fs::remove_file(&path.object)
            .map_err(|err| io_failure(op, key, ErrorKind::Unavailable, "unlink", err))?;
        let fsynced = dir
            .sync_all()
            .map_err(|err| io_failure(op, key, ErrorKind::Ambiguous, "fsync directory", err));
        drop(current);
        self.remove_empty_dirs(&path.dirs);
        fsynced
    }

    fn list_blocking(&self, request: &ListRequest) -> Result<ListPage> {
        let mut walker = Walker {
            request,
            found: Vec::new(),
        };
        let mut key_prefix = Vec::new();
        walker.walk(&self.root, &mut key_prefix)?;
        let more = walker.found.len() > MAX_LIST_PAGE;
        walker.found.truncate(MAX_LIST_PAGE);
        request.page(walker.found, more)
    }
}

/// A directory entry that is part of the key space, with continuations flattened.
#[derive(Debug)]
struct LevelEntry {
    /// See [`sibling_order`].
    order: Vec<u8>,
    kind: NameKind,
    path: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    /// The page is full, or every remaining key sorts past the prefix.
    Stop,
}

/// One listing page's walk through the tree, in key byte order.
#[derive(Debug)]
struct Walker<'a> {
    request: &'a ListRequest,
    /// Up to one more than a page, to learn whether another page follows.
    found: Vec<Attributes>,
}

impl Walker<'_> {
    fn prefix(&self) -> &[u8] {
        self.request.prefix.as_bytes()
    }

    fn after(&self) -> &[u8] {
        self.request.effective_after().as_bytes()
    }

    /// Whether a subtree whose keys all start with `start` may hold keys of this page.
    fn may_hold(&self, start: &[u8]) -> bool {
        let (prefix, after) = (self.prefix(), self.after());
        let meets_prefix = start.starts_with(prefix) || prefix.starts_with(start);
        let all_before = start < after && !after.starts_with(start);
        meets_prefix && !all_before
    }

    /// Whether keys starting with `start`, and every later one, sort past the prefix's keys.
    fn past_prefix(&self, start: &[u8]) -> bool {
        let prefix = self.prefix();
        start > prefix && !start.starts_with(prefix)
    }

    fn list_error(&self, err: io::Error, dir: &Path) -> Error {
        io_failure(
            Op::List,
            &self.request.prefix,
            ErrorKind::Unavailable,
            &format!("reading directory {}", dir.display()),
            err,
        )
    }

    /// Collects the entries of `dir` (and of the continuation directories below it) that may
    /// hold keys of the page. `partial` is the segment text of the continuations passed through,
    /// `chain` their names.
    fn read_level(
        &self,
        dir: &Path,
        key_prefix: &[u8],
        partial: &[u8],
        chain: &[String],
        out: &mut Vec<LevelEntry>,
    ) -> Result<()> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            // Removed by a concurrent delete: it holds no keys any more.
            Err(err) if is_absent(&err) => return Ok(()),
            Err(err) => return Err(self.list_error(err, dir)),
        };
        for entry in entries {
            let entry = entry.map_err(|err| self.list_error(err, dir))?;
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str() else {
                continue;
            };
            let Some((kind, chunk)) = parse_name(name) else {
                continue;
            };
            let mut segment = partial.to_vec();
            segment.extend_from_slice(&chunk);
            let mut names = chain.to_vec();
            names.push(name.to_owned());
            let mut start = key_prefix.to_vec();
            start.extend_from_slice(&segment);
            if kind == NameKind::Continuation {
                if self.may_hold(&start) {
                    self.read_level(&entry.path(), key_prefix, &segment, &names, out)?;
                }
                continue;
            }
            let mut canonical = Vec::with_capacity(names.len());
            segment_names(&segment, kind, &mut canonical);
            if canonical != names {
                continue;
            }
            let wanted = match kind {
                NameKind::Object => start.as_slice() > self.after(),
                _ => {
                    start.push(b'/');
                    self.may_hold(&start)
                }
            };
            if wanted {
                out.push(LevelEntry {
                    order: sibling_order(&segment, kind),
                    kind,
                    path: entry.path(),
                });
            }
        }
        Ok(())
    }

    fn walk(&mut self, dir: &Path, key_prefix: &mut Vec<u8>) -> Result<Flow> {
        let mut entries = Vec::new();
        self.read_level(dir, key_prefix, &[], &[], &mut entries)?;
        entries.sort_unstable_by(|a, b| a.order.cmp(&b.order));
        for entry in entries {
            let base = key_prefix.len();
            key_prefix.extend_from_slice(&entry.order);
            let flow = if self.past_prefix(key_prefix) {
                Flow::Stop
            } else if entry.kind == NameKind::Object {
                self.visit_object(key_prefix, &entry.path)?
            } else if self.may_hold(key_prefix) {
                self.walk(&entry.path, key_prefix)?
            } else {
                Flow::Continue
            };
            key_prefix.truncate(base);
            if flow == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    fn visit_object(&mut self, key: &[u8], path: &Path) -> Result<Flow> {
        let Ok(key) = std::str::from_utf8(key) else {
            return Ok(Flow::Continue);
        };
        if !self.request.admits(key) || validate_key(Op::List, key).is_err() {
            return Ok(Flow::Continue);
        }
        let reported = |err: Error| {
            Error::new(
                Op::List,
                &self.request.prefix,
                err.kind(),
                format!("object {key:?}: {}", err.detail()),
            )
            .with_source(err)
        };
        // Gone since the directory was read: deleted concurrently, so not listed.
        let Some(object) = open_object(Op::List, key, path).map_err(reported)? else {
            return Ok(Flow::Continue);
        };
        let attributes = object.attributes(Op::List, key).map_err(reported)?;
        self.found.push(attributes);
        Ok(if self.found.len() > MAX_LIST_PAGE {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }
}

/// Runs filesystem work off the async runtime. A task that died is reported as ambiguous for
/// a mutation (it may have published) and unavailable for a read.
async fn blocking<T: Send + 'static>(
    op: Op,
    key: &str,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| {
            let kind = if op.is_mutation() {
                ErrorKind::Ambiguous
            } else {
                ErrorKind::Unavailable
            };
            Err(Error::new(
                op,
                key,
                kind,
                format!("file system task failed: {err}"),
            ))
        })
}

#[async_trait]
impl BlobStore for DirBlobStore {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        validate_key(Op::Create, key)?;
        let (store, owned) = (self.clone(), key.to_owned());
        blocking(Op::Create, key, move || {
            store.create_blocking(&owned, &data)
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Object> {
        validate_key(Op::Get, key)?;
        let (store, owned) = (self.clone(), key.to_owned());
        blocking(Op::Get, key, move || store.get_blocking(&owned)).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        validate_key(Op::GetRange, key)?;
        validate_range(Op::GetRange, key, &range)?;
        let (store, owned) = (self.clone(), key.to_owned());
        blocking(Op::GetRange, key, move || {
            store.get_range_blocking(&owned, range)
        })
        .await
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        validate_key(Op::Head, key)?;
        let (store, owned) = (self.clone(), key.to_owned());
        blocking(Op::Head, key, move || {
            store
                .read_blocking(Op::Head, &owned)?
                .attributes(Op::Head, &owned)
        })
        .await
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        validate_key(Op::Replace, key)?;
        let (store, owned, expected) = (self.clone(), key.to_owned(), generation.clone());
        blocking(Op::Replace, key, move || {
            store.replace_blocking(&owned, &expected, &data)
        })
        .await
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        validate_key(Op::Delete, key)?;
        let (store, owned, expected) = (self.clone(), key.to_owned(), generation.clone());
        blocking(Op::Delete, key, move || {
            store.delete_blocking(&owned, &expected)
        })
        .await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        let request = ListRequest::parse(prefix, start_after, cursor)?;
        let store = self.clone();
        blocking(Op::List, prefix, move || store.list_blocking(&request)).await
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::sample::Index;

    use super::*;
    use crate::list_all;
    use crate::memory::MemoryStore;
    use crate::types::MAX_KEY_LEN;

    /// Keys drawn from bytes that stress the mapping: separators, bytes sorting around `/`,
    /// escaped and plain characters, non-ASCII, and runs long enough to need continuations.
    fn key_strategy() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("/".to_owned()),
            Just("a".to_owned()),
            Just("b".to_owned()),
            Just("A".to_owned()),
            Just(".".to_owned()),
            Just("-".to_owned()),
            Just(" ".to_owned()),
            Just("%".to_owned()),
            Just("\0".to_owned()),
            Just("é".to_owned()),
            Just("\u{10ffff}".to_owned()),
            (1usize..300).prop_map(|n| "z".repeat(n)),
            (1usize..120).prop_map(|n| "~".repeat(n)),
        ];
        proptest::collection::vec(piece, 1..12)
            .prop_map(|pieces| cut(&pieces.concat(), MAX_KEY_LEN))
            .prop_filter("a valid key", |key| validate_key(Op::Create, key).is_ok())
    }

    /// The longest start of `text` at most `len` bytes long that ends on a character boundary.
    fn cut(text: &str, len: usize) -> String {
        let mut end = len.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_owned()
    }

    /// How the walk orders two keys: level by level, siblings by [`sibling_order`], with
    /// continuations flattened into their segment.
    fn walk_order(a: &str, b: &str) -> std::cmp::Ordering {
        let (mut a_segments, mut b_segments) = (a.split('/'), b.split('/'));
        loop {
            let (a_segment, b_segment) = (a_segments.next(), b_segments.next());
            let (Some(a_segment), Some(b_segment)) = (a_segment, b_segment) else {
                unreachable!("two distinct keys part before one of them ends");
            };
            let a_kind = if a_segments.clone().next().is_some() {
                NameKind::Dir
            } else {
                NameKind::Object
            };
            let b_kind = if b_segments.clone().next().is_some() {
                NameKind::Dir
            } else {
                NameKind::Object
            };
            if a_segment == b_segment && a_kind == NameKind::Dir && b_kind == NameKind::Dir {
                continue;
            }
            return sibling_order(a_segment.as_bytes(), a_kind)
                .cmp(&sibling_order(b_segment.as_bytes(), b_kind));
        }
    }

    proptest! {
        #[test]
        fn mapping_round_trips_within_name_limits(key in key_strategy()) {
            let names = key_names(&key);
            for name in &names {
                prop_assert!(name.len() <= 255, "{name:?} too long");
                prop_assert!(name.is_ascii());
                prop_assert!(!name.contains('/') && name != "." && name != "..");
                prop_assert!(!name.starts_with(TEMP_PREFIX));
            }
            prop_assert_eq!(names_key(&names), Some(key));
        }

        #[test]
        fn walk_order_is_byte_order(a in key_strategy(), b in key_strategy()) {
            prop_assume!(a != b);
            prop_assert_eq!(walk_order(&a, &b), a.as_bytes().cmp(b.as_bytes()));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn listing_matches_the_memory_driver(
            keys in proptest::collection::btree_set(key_strategy(), 1..40),
            probes in proptest::collection::vec(
                (any::<Index>(), 0usize..1100, any::<Index>(), 0usize..1100),
                6,
            ),
        ) {
            let keys: Vec<String> = keys.into_iter().collect();
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            runtime.block_on(async {
                let dir = tempfile::tempdir().unwrap();
                let store = DirBlobStore::open(dir.path()).unwrap();
                let model = MemoryStore::new();
                for key in &keys {
                    store.create(key, Bytes::from(key.clone())).await.unwrap();
                    model.create(key, Bytes::from(key.clone())).await.unwrap();
                }
                let listed = listed_keys(&store, "", "").await;
                assert_eq!(listed, keys, "BTreeSet order is byte order");
                // Prefixes and start-afters cut from stored keys, so they meet the key space.
                for (prefix_of, prefix_len, after_of, after_len) in &probes {
                    let prefix = cut(prefix_of.get::<String>(&keys), *prefix_len);
                    for start_after in [String::new(), cut(after_of.get::<String>(&keys), *after_len)] {
                        assert_eq!(
                            listed_keys(&store, &prefix, &start_after).await,
                            listed_keys(&model, &prefix, &start_after).await,
                            "prefix {prefix:?} start_after {start_after:?}",
                        );
                    }
                }
            });
        }
    }

    async fn listed_keys(store: &dyn BlobStore, prefix: &str, start_after: &str) -> Vec<String> {
        list_all(store, prefix, start_after)
            .await
            .unwrap()
            .into_iter()
            .map(|attributes| attributes.key)
            .collect()
    }

    #[test]
    fn names_are_readable_and_distinct_from_temporaries() {
        assert_eq!(key_names("a"), ["a.o"]);
        assert_eq!(key_names("a/b"), ["a.d", "b.o"]);
        assert_eq!(key_names("A.b/"), ["%41%2Eb.d", ".o"]);
        assert_eq!(key_names("/"), [".d", ".o"]);
        let long = "x".repeat(500);
        let names = key_names(&long);
        assert_eq!(names.len(), 3);
        assert!(names[..2].iter().all(|name| name.ends_with(".c")));
        assert_eq!(parse_name(".tmp-0123"), None);
        assert_eq!(
            parse_name("%61.o"),
            None,
            "escaped plain bytes are not canonical"
        );
        assert_eq!(parse_name("%6.o"), None);
        assert_eq!(parse_name("README"), None);
    }
}
