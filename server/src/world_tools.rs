//! World tools: `quire world verify`, `quire world export DIR` and `quire world import DIR`,
//! run on one configured world opened through a [`StoreFactory`] and read and written only
//! through the backend contract.
//!
//! - **verify** walks every document (archived ones and hidden names included) in one read view, reads
//!   every retained version with [`Reader::get`] (which checks the stored bytes against
//!   their hash and record), checks it against [`Reader::versions`], and runs
//!   [`Reader::verify_chain`]. Every problem is a [`Failure`] naming the document.
//! - **export** writes each document's current version to `DIR/<path>` as markdown (see
//!   [`render_markdown`]). With `--all-versions`, every retained version also goes to
//!   `DIR/<parent>/versions/<name>/v<N>.md`; `versions` is a hidden name in the world model,
//!   so an import of the same folder skips that history. Archived documents are left out
//!   unless `--include-archived`. A non-empty `DIR` is refused unless `--force` (which
//!   overwrites the files it writes and leaves others alone).
//! - **import** publishes every `*.md` file under `DIR` as the document at its relative path.
//!   Hidden names (a leading `.`, or `versions`) are skipped with everything under them, as
//!   are other files. A file's frontmatter becomes its publisher metadata
//!   ([`parse_markdown`]); nothing else is added (no default `type`), so exporting what was
//!   imported gives back the same files. Identical content is a no-op, so importing twice
//!   changes nothing. An invalid file (bad frontmatter or metadata, not UTF-8, empty body, an
//!   archived document, a path the world refuses) is reported with its path and skipped; the
//!   rest are imported and the command exits with status 1.
//!
//! Verify and export walk every document, those under hidden names too (the publish policy
//! under `/.well-known/`, a publisher's `/notes/.x.md`): the walk lists with
//! `include_hidden`, which readers never get. Import still skips hidden names, so restoring
//! such a document is a publish by hand.
//!
//! Long work shows a progress bar on standard error when it is a terminal.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use quire_backend::{
    Ctx, ErrorKind as StoreErrorKind, ListOptions, Metadata, Reader, Store, WriteRequest,
};
use quire_log::DocPath;
use quire_log::metadata::{self, CONTROL_KEYS, OKF_KEYS};
use quire_log::path::is_hidden_name;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::worlds::StoreFactory;

/// How many entries one listing call asks for while walking the world.
const LIST_PAGE: usize = 1000;
/// How many publishes an import keeps in flight (the committer batches them).
const IMPORT_CONCURRENCY: usize = 16;
/// The history folder an export with every version writes beside documents.
pub const VERSIONS_DIR: &str = "versions";

quire_failure::names! {
    /// The operation an [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        Open => "open",
        Verify => "verify",
        Export => "export",
        Import => "import",
    }
}

quire_failure::names! {
    /// What stopped a world tool.
    #[non_exhaustive]
    pub enum ErrorKind {
        /// No such world in the configuration, or no world named when there are several.
        UnknownWorld => "unknown world",
        /// The world refused or failed an operation.
        Store => "store failure",
        /// A local file or folder could not be read or written.
        Io => "i/o failure",
        /// The export folder holds files and `--force` was not given.
        NotEmpty => "folder not empty",
    }
}

/// A world tool failure: `world <op> "<key>": <kind>: <detail>`.
pub type Error = quire_failure::Failure<Op, ErrorKind>;

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "world";
}

fn store_error(op: Op, error: &quire_backend::Error) -> Error {
    Error::new(op, error.key(), ErrorKind::Store, error.to_string())
}

fn io_error(op: Op, path: &Path, error: impl fmt::Display) -> Error {
    Error::new(
        op,
        path.display().to_string(),
        ErrorKind::Io,
        error.to_string(),
    )
}

/// One problem found with one document or file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The document path (verify, export) or the file path (import).
    pub path: String,
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.detail)
    }
}

/// Whether long work draws a progress bar (on standard error, and only when it is a
/// terminal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Terminal,
    Hidden,
}

impl Progress {
    fn bar(self, len: usize, message: &'static str) -> ProgressBar {
        if self == Progress::Hidden {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {wide_msg} ({eta})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(message);
        bar
    }

    fn spinner(self, message: &'static str) -> ProgressBar {
        if self == Progress::Hidden {
            return ProgressBar::hidden();
        }
        let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {pos}") {
            spinner.set_style(style);
        }
        spinner.set_message(message);
        spinner
    }
}

/// Whether a world is opened for reading only (verify, export) or for writing (import).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    ReadOnly,
    Writable,
}

/// Opens world `name` of `config` (the only world when `name` is `None` and there is one)
/// through `factory`, under its publish policy as the server opens it. Returns the world's
/// name and its store.
pub async fn open_world(
    config: &Config,
    name: Option<&str>,
    factory: &dyn StoreFactory,
    access: OpenMode,
) -> Result<(String, Arc<dyn Store>), Error> {
    let names = || {
        config
            .worlds
            .iter()
            .map(|w| w.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let world = match name {
        Some(name) => config.world(name).ok_or_else(|| {
            Error::new(
                Op::Open,
                name,
                ErrorKind::UnknownWorld,
                format!("the configuration names {}", names()),
            )
        })?,
        None => match config.worlds.as_slice() {
            [only] => only,
            _ => {
                return Err(Error::new(
                    Op::Open,
                    "",
                    ErrorKind::UnknownWorld,
                    format!("name one with --world: {}", names()),
                ));
            }
        },
    };
    let mut world = world.clone();
    if access == OpenMode::ReadOnly {
        world.read_only = true;
    }
    let store = factory.open(&world).await.map_err(|error| {
        Error::new(
            Op::Open,
            world.name.as_str(),
            ErrorKind::Store,
            error.to_string(),
        )
    })?;
    // The world's publish policy judges imported documents as it judges served writes.
    let store = crate::policy::open(store, &world.policy, world.read_only)
        .await
        .map_err(|detail| Error::new(Op::Open, world.name.as_str(), ErrorKind::Store, detail))?;
    Ok((world.name.as_str().to_owned(), store))
}

/// Every document path under `/` (archived ones and hidden names included), in byte order,
/// and the directories that could not be listed.
async fn walk(ctx: &Ctx, reader: &dyn Reader, progress: Progress) -> (Vec<String>, Vec<Failure>) {
    let spinner = progress.spinner("listing documents");
    let mut documents = BTreeSet::new();
    let mut failures = Vec::new();
    // An exact read first pins the view on a state holding every write acknowledged by any
    // replica; the listings that follow (catalog reads) then read that same state.
    if let Err(error) = reader.is_dir(ctx, "/").await {
        failures.push(Failure {
            path: "/".to_owned(),
            detail: error.to_string(),
        });
        return (Vec::new(), failures);
    }
    let mut directories = vec!["/".to_owned()];
    while let Some(dir) = directories.pop() {
        let mut options = ListOptions {
            after: String::new(),
            limit: LIST_PAGE,
            include_archived: true,
            include_hidden: true,
        };
        loop {
            let entries = match reader.list_entries(ctx, &dir, &options).await {
                Ok(entries) => entries,
                Err(error) => {
                    failures.push(Failure {
                        path: dir.clone(),
                        detail: error.to_string(),
                    });
                    break;
                }
            };
            for entry in &entries {
                let path = if dir == "/" {
                    format!("/{}", entry.name)
                } else {
                    format!("{dir}/{}", entry.name)
                };
                if entry.is_dir {
                    directories.push(path);
                } else {
                    documents.insert(path);
                    spinner.inc(1);
                }
            }
            match entries.last() {
                Some(last) if entries.len() == LIST_PAGE => options.after = last.name.clone(),
                _ => break,
            }
        }
    }
    spinner.finish_and_clear();
    (documents.into_iter().collect(), failures)
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub documents: usize,
    /// Versions read and checked.
    pub versions: usize,
    pub failures: Vec<Failure>,
}

impl VerifyReport {
    pub fn is_healthy(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Checks the chain and the integrity of every retained version of every listed document.
/// Problems are collected in the report; only failing to open a view is an error.
pub async fn verify(store: &dyn Store, progress: Progress) -> Result<VerifyReport, Error> {
    let ctx = Ctx::new();
    let view = store
        .open_view(&ctx)
        .await
        .map_err(|error| store_error(Op::Verify, &error))?;
    let (paths, mut failures) = walk(&ctx, view.as_ref(), progress).await;
    let bar = progress.bar(paths.len(), "verifying");
    let mut report = VerifyReport {
        documents: paths.len(),
        ..VerifyReport::default()
    };
    for path in &paths {
        let (checked, problems) = verify_document(&ctx, view.as_ref(), path).await;
        report.versions += checked;
        failures.extend(problems.into_iter().map(|detail| Failure {
            path: path.clone(),
            detail,
        }));
        bar.inc(1);
    }
    bar.finish_and_clear();
    view.close();
    report.failures = failures;
    Ok(report)
}

/// How many versions of `path` were checked, and what was wrong with them.
async fn verify_document(ctx: &Ctx, reader: &dyn Reader, path: &str) -> (usize, Vec<String>) {
    let mut problems = Vec::new();
    let versions = match reader.versions(ctx, path).await {
        Ok(versions) => versions,
        Err(error) => return (0, vec![error.to_string()]),
    };
    if versions.is_empty() {
        problems.push("no retained version".to_owned());
    }
    for info in &versions {
        match reader.get(ctx, path, info.version).await {
            Ok(document) => {
                if document.version != info.version {
                    problems.push(format!(
                        "version {} reads as version {}",
                        info.version, document.version
                    ));
                }
                if document.etag != info.etag {
                    problems.push(format!(
                        "version {}: stored hash {} disagrees with the history's {}",
                        info.version, document.etag, info.etag
                    ));
                }
            }
            Err(error) => problems.push(error.to_string()),
        }
    }
    if let Err(error) = reader.verify_chain(ctx, path).await {
        problems.push(error.to_string());
    }
    (versions.len(), problems)
}

/// How [`export`] writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// Also write every retained version under `versions/<name>/v<N>.md`.
    pub all_versions: bool,
    /// Write into a folder that already holds files.
    pub force: bool,
    /// Also write archived documents.
    pub include_archived: bool,
}

/// What [`export`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Documents written (current versions).
    pub documents: usize,
    /// Version files written under `versions/` (with `all_versions`).
    pub versions: usize,
    /// Archived documents left out.
    pub archived_skipped: usize,
}

/// Writes every listed document to `dir` (see the module docs for the layout). Any document
/// that cannot be read stops the export with an error naming it.
pub async fn export(
    store: &dyn Store,
    dir: &Path,
    options: ExportOptions,
    progress: Progress,
) -> Result<ExportReport, Error> {
    prepare_export_dir(dir, options.force)?;
    let ctx = Ctx::new();
    let view = store
        .open_view(&ctx)
        .await
        .map_err(|error| store_error(Op::Export, &error))?;
    let (paths, failures) = walk(&ctx, view.as_ref(), progress).await;
    if let Some(failure) = failures.first() {
        return Err(Error::new(
            Op::Export,
            &failure.path,
            ErrorKind::Store,
            &failure.detail,
        ));
    }
    let bar = progress.bar(paths.len(), "exporting");
    let mut report = ExportReport::default();
    for path in &paths {
        let current = view
            .get(&ctx, path, 0)
            .await
            .map_err(|error| store_error(Op::Export, &error))?;
        bar.inc(1);
        if current.archived && !options.include_archived {
            report.archived_skipped += 1;
            continue;
        }
        let doc_path = DocPath::parse(path)
            .map_err(|why| Error::new(Op::Export, path, ErrorKind::Store, why.to_string()))?;
        write_file(
            dir,
            &relative_file(&doc_path),
            &render_markdown(current.metadata.as_ref(), &current.content),
        )?;
        report.documents += 1;
        if options.all_versions {
            let history = history_dir(&doc_path);
            let versions = view
                .versions(&ctx, path)
                .await
                .map_err(|error| store_error(Op::Export, &error))?;
            for info in versions {
                let document = view
                    .get(&ctx, path, info.version)
                    .await
                    .map_err(|error| store_error(Op::Export, &error))?;
                write_file(
                    dir,
                    &history.join(format!("v{}.md", info.version)),
                    &render_markdown(document.metadata.as_ref(), &document.content),
                )?;
                report.versions += 1;
            }
        }
    }
    bar.finish_and_clear();
    view.close();
    Ok(report)
}

/// Creates `dir` if needed; refuses one holding anything unless `force`.
fn prepare_export_dir(dir: &Path, force: bool) -> Result<(), Error> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() && !force {
                return Err(Error::new(
                    Op::Export,
                    dir.display().to_string(),
                    ErrorKind::NotEmpty,
                    "the folder holds files; pass --force to write into it",
                ));
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|error| io_error(Op::Export, dir, error))
        }
        Err(error) => Err(io_error(Op::Export, dir, error)),
    }
}

/// Writes `text` to `relative` under the export folder `root`, never through a symbolic
/// link: a link on the way (a folder or the file itself) is refused, and the file is
/// written under a fresh name and renamed into place, so a link swapped in meanwhile is
/// replaced rather than followed.
fn write_file(root: &Path, relative: &Path, text: &str) -> Result<(), Error> {
    let mut at = root.to_path_buf();
    for component in relative.components() {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(found) if found.file_type().is_symlink() => {
                return Err(io_error(
                    Op::Export,
                    &at,
                    "a symbolic link; export never writes through one",
                ));
            }
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
            Err(error) => return Err(io_error(Op::Export, &at, error)),
        }
    }
    let target = root.join(relative);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|error| io_error(Op::Export, parent, error))?;
    }
    let mut fresh = target.as_os_str().to_owned();
    fresh.push(".export-new");
    let fresh = PathBuf::from(fresh);
    match std::fs::remove_file(&fresh) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error(Op::Export, &fresh, error)),
    }
    {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&fresh)
            .map_err(|error| io_error(Op::Export, &fresh, error))?;
        file.write_all(text.as_bytes())
            .map_err(|error| io_error(Op::Export, &fresh, error))?;
    }
    std::fs::rename(&fresh, &target).map_err(|error| io_error(Op::Export, &target, error))
}

/// The document's file, relative to the export folder (canonical paths hold no `.`, `..` or
/// empty segment, so this never leaves it).
fn relative_file(path: &DocPath) -> PathBuf {
    path.as_str().split('/').filter(|s| !s.is_empty()).collect()
}

/// Where the document's versions go: `<parent>/versions/<name>/`.
fn history_dir(path: &DocPath) -> PathBuf {
    let mut dir = relative_file(path);
    dir.pop();
    dir.join(VERSIONS_DIR).join(path.name())
}

/// The markdown file for a document: its publisher metadata as frontmatter (laid out as the
/// store keeps it: OKF names bare in their order, tags as `[a, b]`, every other key as
/// `meta.<key>` in key order), then the body. Without metadata the file is the body alone,
/// unless the body itself opens with `---`: then an empty frontmatter block comes first, so
/// that [`parse_markdown`] keeps the body's own block as body.
pub fn render_markdown(meta: Option<&Metadata>, body: &str) -> String {
    let meta = meta.filter(|m| !m.is_empty());
    let Some(meta) = meta else {
        if body.starts_with("---\n") || body == "---" {
            return format!("---\n---\n{body}");
        }
        return body.to_owned();
    };
    let mut out = String::from("---\n");
    for key in OKF_KEYS {
        if let Some(value) = meta.get(key) {
            if key == "tags" {
                let tags: Vec<&str> = metadata::split_tags(value).collect();
                out.push_str(&format!("tags: [{}]\n", tags.join(", ")));
            } else {
                out.push_str(&format!("{key}: {value}\n"));
            }
        }
    }
    for (key, value) in meta {
        if !metadata::is_okf_key(key) {
            out.push_str(&format!("meta.{key}: {value}\n"));
        }
    }
    out.push_str("---\n");
    out.push_str(body);
    out
}

/// Splits a markdown file into publisher metadata (normal form) and body.
///
/// A file opening with a `---` line has frontmatter up to the next `---` line; anything else
/// is all body. Each frontmatter line is `key: value` (or `key:` for an empty value), the
/// value verbatim to the end of the line. `meta.<key>` and a bare `<key>` name the same key;
/// `tags` may be a `[a, b]` list or a comma list. The keys must then pass the world model's
/// metadata rules (`quire_log::metadata::normalize`); the store's own and the request
/// control keys are refused, as are repeated keys and blank or malformed lines.
pub fn parse_markdown(text: &str) -> Result<(Metadata, String), String> {
    let Some(rest) = text.strip_prefix("---\n") else {
        return Ok((Metadata::new(), text.to_owned()));
    };
    let mut meta = Metadata::new();
    let mut offset = 0;
    let body_start = loop {
        let Some(end) = rest[offset..].find('\n').map(|i| i + offset) else {
            if &rest[offset..] == "---" {
                break rest.len();
            }
            return Err("the frontmatter has no closing --- line".into());
        };
        let line = &rest[offset..end];
        let line_number = rest[..offset].matches('\n').count() + 2;
        offset = end + 1;
        if line == "---" {
            break offset;
        }
        let (raw_key, value) = match line.split_once(':') {
            Some((key, value)) => (key, value.strip_prefix(' ').unwrap_or(value)),
            None => {
                return Err(format!(
                    "frontmatter line {line_number} is not `key: value`"
                ));
            }
        };
        let key = raw_key.strip_prefix("meta.").unwrap_or(raw_key);
        if CONTROL_KEYS.contains(&key) {
            return Err(format!(
                "frontmatter line {line_number}: {key:?} steers a request and is never stored"
            ));
        }
        let value = if key == "tags" {
            value
                .strip_prefix('[')
                .and_then(|v| v.strip_suffix(']'))
                .unwrap_or(value)
        } else {
            value
        };
        if meta.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!(
                "frontmatter line {line_number}: key {key:?} repeats"
            ));
        }
    };
    let meta = metadata::normalize(&meta)?;
    Ok((meta, rest[body_start..].to_owned()))
}

/// What [`import`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// New documents.
    pub created: usize,
    /// Documents that got a new version.
    pub updated: usize,
    /// Files identical to their document's current version.
    pub unchanged: usize,
    /// Files passed over: not markdown, or under a hidden name.
    pub ignored: usize,
    /// Invalid files, not imported.
    pub invalid: Vec<Failure>,
}

/// One markdown file to publish.
struct ImportFile {
    file: PathBuf,
    document: String,
}

/// Publishes every markdown file under `dir` (see the module docs for the rules). Invalid
/// files are reported and skipped; a store that refuses every write (read-only, closed) stops
/// the import with an error.
pub async fn import(
    store: &Arc<dyn Store>,
    dir: &Path,
    progress: Progress,
) -> Result<ImportReport, Error> {
    let mut report = ImportReport::default();
    let files = markdown_files(dir, &mut report)?;
    let bar = progress.bar(files.len(), "importing");
    let mut pending = files.into_iter();
    let mut running: JoinSet<(PathBuf, Result<Outcome, String>)> = JoinSet::new();
    let mut fatal = None;
    loop {
        while fatal.is_none() && running.len() < IMPORT_CONCURRENCY {
            let Some(file) = pending.next() else { break };
            let store = store.clone();
            running.spawn(async move {
                let outcome = import_file(store.as_ref(), &file).await;
                (file.file, outcome)
            });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (file, outcome) = joined.map_err(|error| {
            Error::new(
                Op::Import,
                dir.display().to_string(),
                ErrorKind::Io,
                error.to_string(),
            )
        })?;
        bar.inc(1);
        match outcome {
            Ok(Outcome::Created) => report.created += 1,
            Ok(Outcome::Updated) => report.updated += 1,
            Ok(Outcome::Unchanged) => report.unchanged += 1,
            Ok(Outcome::Fatal(error)) => {
                fatal.get_or_insert(error);
            }
            Err(detail) => report.invalid.push(Failure {
                path: file.display().to_string(),
                detail,
            }),
        }
    }
    bar.finish_and_clear();
    if let Some(error) = fatal {
        return Err(error);
    }
    report.invalid.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(report)
}

enum Outcome {
    Created,
    Updated,
    Unchanged,
    /// The store refuses every write: stop.
    Fatal(Error),
}

/// The markdown files under `dir` with their document paths, in path order; invalid names
/// and ignored files are counted in `report`.
fn markdown_files(dir: &Path, report: &mut ImportReport) -> Result<Vec<ImportFile>, Error> {
    let metadata = std::fs::metadata(dir).map_err(|error| io_error(Op::Import, dir, error))?;
    if !metadata.is_dir() {
        return Err(io_error(Op::Import, dir, "not a folder"));
    }
    let mut files = Vec::new();
    let walker = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| !entry.file_name().to_str().is_some_and(is_hidden_name));
    for entry in walker {
        let entry = entry.map_err(|error| {
            let at = error.path().unwrap_or(dir).to_path_buf();
            io_error(Op::Import, &at, error)
        })?;
        if entry.file_type().is_dir() {
            continue;
        }
        let is_markdown =
            entry.file_type().is_file() && entry.path().extension().is_some_and(|ext| ext == "md");
        if !is_markdown {
            report.ignored += 1;
            continue;
        }
        let relative = entry.path().strip_prefix(dir).unwrap_or(entry.path());
        match document_path(relative) {
            Ok(document) => files.push(ImportFile {
                file: entry.path().to_path_buf(),
                document,
            }),
            Err(detail) => report.invalid.push(Failure {
                path: entry.path().display().to_string(),
                detail,
            }),
        }
    }
    Ok(files)
}

/// The canonical document path of a file at `relative` under the import folder.
fn document_path(relative: &Path) -> Result<String, String> {
    let mut path = String::new();
    for component in relative.components() {
        let name = component
            .as_os_str()
            .to_str()
            .ok_or("the file name is not UTF-8")?;
        path.push('/');
        path.push_str(name);
    }
    DocPath::parse(&path)
        .map(|p| p.as_str().to_owned())
        .map_err(|why| format!("{path} is not a document path: {why}"))
}

/// Reads a file the walk found to be a regular file, refusing it if a symbolic link was
/// swapped in since: what was opened must be the very file at the path, not a link's
/// target.
async fn read_regular_file(path: &Path) -> Result<Vec<u8>, String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Read as _;
        let mut file = std::fs::File::open(&path).map_err(|error| error.to_string())?;
        let opened = file.metadata().map_err(|error| error.to_string())?;
        let at_path = std::fs::symlink_metadata(&path).map_err(|error| error.to_string())?;
        if at_path.file_type().is_symlink() || !same_file(&opened, &at_path) {
            return Err("the file was replaced by a symbolic link; not followed".to_owned());
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|error| error.to_string())?;
        Ok(bytes)
    })
    .await
    .map_err(|error| error.to_string())?
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.len() == b.len() && a.modified().ok() == b.modified().ok()
}

async fn import_file(store: &dyn Store, file: &ImportFile) -> Result<Outcome, String> {
    let bytes = read_regular_file(&file.file).await?;
    let text = String::from_utf8(bytes).map_err(|_| "the file is not UTF-8".to_owned())?;
    let (meta, body) = parse_markdown(&text)?;
    if body.is_empty() {
        return Err("the body is empty".into());
    }
    // The same write-time rules as a PUBLISH: what is imported reads back everywhere.
    quire_log::path::check_new(&file.document).map_err(|why| why.to_string())?;
    quire_log::metadata::check_new(&meta)?;
    let request = WriteRequest::new(file.document.clone(), body).metadata(meta);
    match store.publish(&Ctx::new(), request).await {
        Ok(document) if document.version == 1 => Ok(Outcome::Created),
        Ok(_) => Ok(Outcome::Updated),
        Err(error) => match error.kind() {
            StoreErrorKind::NotModified => Ok(Outcome::Unchanged),
            StoreErrorKind::ReadOnly | StoreErrorKind::Closed | StoreErrorKind::Canceled => {
                Ok(Outcome::Fatal(store_error(Op::Import, &error)))
            }
            _ => Err(error.to_string()),
        },
    }
}

/// `quire world …`: where the world is configured.
#[derive(Debug, Args)]
pub struct WorldSelection {
    /// The configuration file (default: the embedded default, world `local` under ./data).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The world to open (default: the only configured world).
    #[arg(long)]
    pub world: Option<String>,
}

/// The world tools' subcommands.
#[derive(Debug, Subcommand)]
pub enum WorldCommand {
    /// Check the hash chain and the integrity of every version of every document.
    Verify {
        #[command(flatten)]
        selection: WorldSelection,
    },
    /// Write every document to DIR as markdown files.
    Export {
        dir: PathBuf,
        /// Also write every retained version to `<parent>/versions/<name>/v<N>.md`.
        #[arg(long)]
        all_versions: bool,
        /// Also write archived documents.
        #[arg(long)]
        include_archived: bool,
        /// Write into a folder that already holds files.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        selection: WorldSelection,
    },
    /// Publish every markdown file under DIR as the document at its relative path.
    Import {
        dir: PathBuf,
        #[command(flatten)]
        selection: WorldSelection,
    },
}

/// Runs a world tool, printing its summary; failures found make the exit status 1.
pub async fn run(command: WorldCommand, factory: &dyn StoreFactory) -> anyhow::Result<ExitCode> {
    let progress = Progress::Terminal;
    let (selection, access) = match &command {
        WorldCommand::Verify { selection } | WorldCommand::Export { selection, .. } => {
            (selection, OpenMode::ReadOnly)
        }
        WorldCommand::Import { selection, .. } => (selection, OpenMode::Writable),
    };
    let config = match &selection.config {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default(),
    };
    let (name, store) = open_world(&config, selection.world.as_deref(), factory, access).await?;
    let outcome = run_on(&command, &name, &store, progress).await;
    store.close().await;
    outcome
}

async fn run_on(
    command: &WorldCommand,
    name: &str,
    store: &Arc<dyn Store>,
    progress: Progress,
) -> anyhow::Result<ExitCode> {
    match command {
        WorldCommand::Verify { .. } => {
            let report = verify(store.as_ref(), progress).await?;
            for failure in &report.failures {
                println!("FAILED {failure}");
            }
            println!(
                "world {name}: {} documents, {} versions checked, {} failures",
                report.documents,
                report.versions,
                report.failures.len()
            );
            Ok(exit_code(report.is_healthy()))
        }
        WorldCommand::Export {
            dir,
            all_versions,
            include_archived,
            force,
            ..
        } => {
            let options = ExportOptions {
                all_versions: *all_versions,
                force: *force,
                include_archived: *include_archived,
            };
            let report = export(store.as_ref(), dir, options, progress).await?;
            println!(
                "world {name}: exported {} documents and {} versions to {} ({} archived left out)",
                report.documents,
                report.versions,
                dir.display(),
                report.archived_skipped
            );
            Ok(ExitCode::SUCCESS)
        }
        WorldCommand::Import { dir, .. } => {
            let report = import(store, dir, progress).await?;
            for failure in &report.invalid {
                println!("SKIPPED {failure}");
            }
            println!(
                "world {name}: {} created, {} updated, {} unchanged, {} invalid, {} ignored",
                report.created,
                report.updated,
                report.unchanged,
                report.invalid.len(),
                report.ignored
            );
            Ok(exit_code(report.invalid.is_empty()))
        }
    }
}

fn exit_code(success: bool) -> ExitCode {
    if success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn frontmatter_becomes_normalised_metadata() {
        let text = "---\ntitle: Hello\ntags: [b,  a , ]\nmeta.importance: 0.7\nowner:\n---\n# Hi\n";
        let (parsed, body) = parse_markdown(text).unwrap();
        assert_eq!(
            parsed,
            meta(&[
                ("title", "Hello"),
                ("tags", "b,a"),
                ("importance", "0.7"),
                ("owner", "")
            ])
        );
        assert_eq!(body, "# Hi\n");
    }

    #[test]
    fn canonical_files_round_trip() {
        for text in [
            "# Plain\n",
            "",
            "---\ntype: Note\ntitle: T\ntags: [a, b]\nmeta.importance: 0.7\nmeta.zeta: \n---\nbody",
            "---\n---\n---\nown: block\n---\nbody\n",
            "---\ntitle: T\n---\n---\nown: block\n---\n",
        ] {
            let (parsed, body) = parse_markdown(text).unwrap();
            let rendered = render_markdown(Some(&parsed), &body);
            assert_eq!(rendered, text, "{text:?}");
        }
    }

    #[test]
    fn invalid_frontmatter_is_refused_with_a_reason() {
        for (text, why) in [
            ("---\ntitle: T\n", "closing"),
            ("---\njust words\n---\n", "line 2"),
            ("---\nversion: 3\n---\n", "reserved"),
            ("---\nexpected-version: 3\n---\n", "never stored"),
            ("---\nTitle: x\n---\n", "invalid metadata key"),
            ("---\ntitle: a\nmeta.title: b\n---\n", "repeats"),
            ("---\nretention: 0\n---\n", "retention"),
        ] {
            let error = parse_markdown(text).unwrap_err();
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }

    #[test]
    fn document_paths_come_from_relative_file_paths() {
        assert_eq!(
            document_path(Path::new("notes/a.md")).unwrap(),
            "/notes/a.md"
        );
        assert_eq!(
            relative_file(&DocPath::parse("/notes/a.md").unwrap()),
            PathBuf::from("notes/a.md")
        );
        assert_eq!(
            history_dir(&DocPath::parse("/notes/a.md").unwrap()),
            PathBuf::from("notes/versions/a.md")
        );
        assert_eq!(
            history_dir(&DocPath::parse("/top.md").unwrap()),
            PathBuf::from("versions/top.md")
        );
    }
}
