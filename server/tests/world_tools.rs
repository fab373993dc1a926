//! The world tools over a bucket world on the file driver, opened through the real store
//! factory: import → export gives back the same files, import twice changes nothing, verify
//! passes on a healthy world and names the document whose stored version was damaged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use quire_backend::{Ctx, Store};
use quire_server::config::Config;
use quire_server::wiring;
use quire_server::world_tools::{
    self, ErrorKind, ExportOptions, OpenMode, Progress, export, import, open_world, verify,
};

const WORLD_ID: &str = "0b5e7f2a-4c1d-4e8f-9a3b-2d6c8e1f0a47";

fn config_text(bucket: &Path) -> String {
    format!(
        r#"[[worlds]]
name = "notes"

[worlds.backend]
kind = "bucket"
driver = "file"
location = {location:?}
world_id = "{WORLD_ID}"
"#,
        location = bucket.display().to_string()
    )
}

async fn open(bucket: &Path, access: OpenMode) -> Arc<dyn Store> {
    let config = Config::parse(&config_text(bucket), "test").unwrap();
    let (name, store) = open_world(&config, None, &wiring::Backends, access)
        .await
        .unwrap();
    assert_eq!(name, "notes");
    store
}

fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Every file under `root`, by relative path.
fn files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            (
                e.path().strip_prefix(root).unwrap().to_path_buf(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// A tree of valid documents: plain, with frontmatter, nested, and one whose body opens with
/// its own `---` block.
fn sample_tree(root: &Path) {
    write(root, "index.md", "# Index\n\nSee [a](notes/a.md).\n");
    write(
        root,
        "notes/a.md",
        "---\ntype: Note\ntitle: A note\ntags: [alpha, beta]\nmeta.importance: 0.7\n---\n# A\n",
    );
    write(root, "notes/deep/b.md", "# B\n");
    write(
        root,
        "notes/own-block.md",
        "---\n---\n---\nlayout: post\n---\nBody after its own block.\n",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_then_export_gives_back_the_same_files() {
    let bucket = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    sample_tree(source.path());
    // Passed over: hidden names (with what is under them) and files that are not markdown.
    write(source.path(), ".hidden.md", "# Hidden\n");
    write(source.path(), ".drafts/c.md", "# Draft\n");
    write(source.path(), "notes/versions/a.md/v1.md", "# Old\n");
    write(source.path(), "notes/picture.png", "not markdown");
    let expected = {
        let mut all = files(source.path());
        all.retain(|path, _| {
            let text = path.to_string_lossy();
            !text.starts_with('.') && !text.contains("versions/") && !text.ends_with(".png")
        });
        all
    };
    assert_eq!(expected.len(), 4);

    let store = open(bucket.path(), OpenMode::Writable).await;
    let report = import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    assert_eq!(report.created, 4, "{report:?}");
    assert_eq!(report.updated + report.unchanged, 0);
    assert_eq!(
        report.ignored, 1,
        "the picture; hidden names are not walked"
    );
    assert!(report.invalid.is_empty(), "{:?}", report.invalid);

    let view = store.open_view(&Ctx::new()).await.unwrap();
    let a = view.get(&Ctx::new(), "/notes/a.md", 0).await.unwrap();
    assert_eq!(a.content, "# A\n");
    let metadata = a.metadata.unwrap();
    assert_eq!(metadata["tags"], "alpha,beta");
    assert_eq!(metadata["importance"], "0.7");
    let b = view.get(&Ctx::new(), "/notes/deep/b.md", 0).await.unwrap();
    assert_eq!(b.metadata, None, "no default type is added");
    assert!(view.get(&Ctx::new(), "/.hidden.md", 0).await.is_err());
    view.close();
    store.close().await;

    let store = open(bucket.path(), OpenMode::ReadOnly).await;
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("export");
    let report = verify(store.as_ref(), Progress::Hidden).await.unwrap();
    assert!(report.is_healthy(), "{report:?}");
    assert_eq!((report.documents, report.versions), (4, 4));
    let exported = export(
        store.as_ref(),
        &target,
        ExportOptions::default(),
        Progress::Hidden,
    )
    .await
    .unwrap();
    assert_eq!(exported.documents, 4);
    assert_eq!(files(&target), expected);

    // A folder holding files is refused without --force, and written into with it.
    let refused = export(
        store.as_ref(),
        &target,
        ExportOptions::default(),
        Progress::Hidden,
    )
    .await
    .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotEmpty);
    let forced = ExportOptions {
        force: true,
        ..ExportOptions::default()
    };
    export(store.as_ref(), &target, forced, Progress::Hidden)
        .await
        .unwrap();
    assert_eq!(files(&target), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_is_idempotent_and_exports_every_version() {
    let bucket = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    sample_tree(source.path());
    write(source.path(), "broken.md", "---\nversion: 9\n---\nbody\n");
    write(source.path(), "empty.md", "");
    let store = open(bucket.path(), OpenMode::Writable).await;

    let first = import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    assert_eq!(first.created, 4);
    let invalid: Vec<_> = first.invalid.iter().map(|f| f.path.clone()).collect();
    assert_eq!(
        invalid,
        [
            source.path().join("broken.md").display().to_string(),
            source.path().join("empty.md").display().to_string(),
        ]
    );
    assert!(first.invalid[0].detail.contains("reserved"), "{first:?}");

    let again = import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    assert_eq!((again.created, again.updated, again.unchanged), (0, 0, 4));
    let view = store.open_view(&Ctx::new()).await.unwrap();
    for path in ["/index.md", "/notes/a.md", "/notes/deep/b.md"] {
        let versions = view.versions(&Ctx::new(), path).await.unwrap();
        assert_eq!(versions.len(), 1, "{path}");
    }
    view.close();

    // A changed file is a new version; the history export holds both.
    write(source.path(), "notes/deep/b.md", "# B, revised\n");
    let changed = import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    assert_eq!(
        (changed.created, changed.updated, changed.unchanged),
        (0, 1, 3)
    );
    let out = tempfile::tempdir().unwrap();
    let options = ExportOptions {
        all_versions: true,
        force: true,
        ..ExportOptions::default()
    };
    let report = export(store.as_ref(), out.path(), options, Progress::Hidden)
        .await
        .unwrap();
    assert_eq!((report.documents, report.versions), (4, 5));
    let history = out.path().join("notes/deep/versions/b.md");
    assert_eq!(
        std::fs::read_to_string(history.join("v1.md")).unwrap(),
        "# B\n"
    );
    assert_eq!(
        std::fs::read_to_string(history.join("v2.md")).unwrap(),
        "# B, revised\n"
    );
    assert_eq!(
        std::fs::read_to_string(out.path().join("notes/deep/b.md")).unwrap(),
        "# B, revised\n"
    );
    store.close().await;
}

/// The file-driver object files under `<bucket>/blobs.d/`: version blobs.
fn blob_files(bucket: &Path) -> Vec<PathBuf> {
    let dir = bucket.join("blobs.d");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_on_a_healthy_world_and_names_a_damaged_document() {
    let bucket = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    sample_tree(source.path());
    // Large enough to be kept as its own blob rather than inside a log slot.
    let big = format!("# Big\n\n{}\n", "lorem ipsum ".repeat(2000));
    write(source.path(), "archive/big.md", &big);
    let store = open(bucket.path(), OpenMode::Writable).await;
    let imported = import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    assert_eq!(imported.created, 5);
    store.close().await;

    let store = open(bucket.path(), OpenMode::ReadOnly).await;
    let healthy = verify(store.as_ref(), Progress::Hidden).await.unwrap();
    assert!(healthy.is_healthy(), "{healthy:?}");
    assert_eq!((healthy.documents, healthy.versions), (5, 5));
    store.close().await;

    let blobs = blob_files(bucket.path());
    assert_eq!(blobs.len(), 1, "one version is a blob: {blobs:?}");
    let mut bytes = std::fs::read(&blobs[0]).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x20;
    std::fs::write(&blobs[0], bytes).unwrap();

    let store = open(bucket.path(), OpenMode::ReadOnly).await;
    let damaged = verify(store.as_ref(), Progress::Hidden).await.unwrap();
    assert!(!damaged.is_healthy());
    assert_eq!(damaged.documents, 5);
    let paths: Vec<&str> = damaged.failures.iter().map(|f| f.path.as_str()).collect();
    assert!(
        paths.iter().all(|p| *p == "/archive/big.md") && !paths.is_empty(),
        "{damaged:?}"
    );
    assert!(
        damaged.failures[0].detail.contains("integrity"),
        "{damaged:?}"
    );
    store.close().await;

    // The command line says the same and exits non-zero.
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("quire.toml");
    std::fs::write(&config, config_text(bucket.path())).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(["world", "verify", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    assert!(stdout.contains("FAILED /archive/big.md"), "{stdout}");
    assert!(stdout.contains("5 documents"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_world_is_refused_by_name() {
    let bucket = tempfile::tempdir().unwrap();
    let config = Config::parse(&config_text(bucket.path()), "test").unwrap();
    let error = open_world(
        &config,
        Some("other"),
        &wiring::Backends,
        OpenMode::ReadOnly,
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), world_tools::ErrorKind::UnknownWorld);
    assert_eq!(error.key(), "other");
    assert!(error.to_string().contains("notes"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_documents_are_verified_and_exported_only_when_asked() {
    let bucket = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    sample_tree(source.path());
    let store = open(bucket.path(), OpenMode::Writable).await;
    import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    let archived = store
        .set_archived(
            &Ctx::new(),
            quire_backend::ArchiveRequest::new("/notes/deep/b.md", true),
        )
        .await
        .unwrap();
    assert!(archived.changed);

    let report = verify(store.as_ref(), Progress::Hidden).await.unwrap();
    assert!(report.is_healthy(), "{report:?}");
    assert_eq!(report.documents, 4, "archived documents are verified too");

    let out = tempfile::tempdir().unwrap();
    let live = export(
        store.as_ref(),
        &out.path().join("live"),
        ExportOptions::default(),
        Progress::Hidden,
    )
    .await
    .unwrap();
    assert_eq!((live.documents, live.archived_skipped), (3, 1));
    assert!(!out.path().join("live/notes/deep/b.md").exists());
    let everything = ExportOptions {
        include_archived: true,
        ..ExportOptions::default()
    };
    let all = export(
        store.as_ref(),
        &out.path().join("all"),
        everything,
        Progress::Hidden,
    )
    .await
    .unwrap();
    assert_eq!((all.documents, all.archived_skipped), (4, 0));
    assert_eq!(
        std::fs::read_to_string(out.path().join("all/notes/deep/b.md")).unwrap(),
        "# B\n"
    );

    // Importing onto an archived document is refused for that file only.
    let again = import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    assert_eq!(again.unchanged, 3);
    assert_eq!(again.invalid.len(), 1, "{again:?}");
    assert!(again.invalid[0].path.ends_with("b.md"), "{again:?}");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_work_on_a_world_that_is_not_a_bucket_store() {
    let root = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    sample_tree(source.path());
    let text = format!(
        "[[worlds]]\nname = \"plain\"\n\n[worlds.backend]\nkind = \"file\"\nroot = {:?}\n",
        root.path().display().to_string()
    );
    let config = Config::parse(&text, "test").unwrap();
    let (_, store) = open_world(
        &config,
        Some("plain"),
        &wiring::Backends,
        OpenMode::Writable,
    )
    .await
    .unwrap();
    let imported = import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    assert_eq!(imported.created, 4);
    let report = verify(store.as_ref(), Progress::Hidden).await.unwrap();
    assert!(report.is_healthy(), "{report:?}");
    assert_eq!(report.documents, 4);
    let out = tempfile::tempdir().unwrap();
    export(
        store.as_ref(),
        out.path(),
        ExportOptions::default(),
        Progress::Hidden,
    )
    .await
    .unwrap();
    assert_eq!(files(out.path()), files(source.path()));
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_is_judged_by_the_worlds_publish_policy() {
    let bucket = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    let policy = bucket.path().join("policy.md");
    std::fs::write(
        &policy,
        "---\nstrictness: block\nrequire_tags: domain\n---\n# Publish policy\n",
    )
    .unwrap();
    let text = format!(
        "{}\n[worlds.policy]\nrequired = true\nseed_file = {:?}\n",
        config_text(&bucket.path().join("bucket")),
        policy.display().to_string()
    );
    let config = Config::parse(&text, "test").unwrap();
    let (_, store) = open_world(&config, None, &wiring::Backends, OpenMode::Writable)
        .await
        .unwrap();
    write(
        source.path(),
        "tagged.md",
        "---\ntags: [domain:storage]\n---\n# Tagged\n",
    );
    write(source.path(), "untagged.md", "# Untagged\n");

    let report = import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();
    assert_eq!(report.created, 1, "{report:?}");
    assert_eq!(report.invalid.len(), 1, "{report:?}");
    assert_eq!(
        report.invalid[0].path,
        source.path().join("untagged.md").display().to_string()
    );
    assert!(
        report.invalid[0].detail.contains("missing-tag: domain"),
        "{report:?}"
    );
    let view = store.open_view(&Ctx::new()).await.unwrap();
    assert!(view.versions(&Ctx::new(), "/untagged.md").await.is_err());
    assert_eq!(
        view.versions(&Ctx::new(), "/tagged.md")
            .await
            .unwrap()
            .len(),
        1
    );
    view.close();
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_never_writes_through_a_symbolic_link() {
    let bucket = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    sample_tree(source.path());
    let store = open(bucket.path(), OpenMode::Writable).await;
    import(&store, source.path(), Progress::Hidden)
        .await
        .unwrap();

    let out = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = out.path().join("export");
    std::fs::create_dir_all(&target).unwrap();
    // A folder on the way links outside the export folder.
    std::os::unix::fs::symlink(outside.path(), target.join("notes")).unwrap();
    let forced = ExportOptions {
        force: true,
        ..ExportOptions::default()
    };
    let refused = export(store.as_ref(), &target, forced, Progress::Hidden)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("symbolic link"), "{refused}");
    assert!(files(outside.path()).is_empty(), "nothing written outside");

    // The file itself is a link.
    std::fs::remove_file(target.join("notes")).unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "untouched").unwrap();
    // (The refused export may have written the top-level file already.)
    let _ = std::fs::remove_file(target.join("index.md"));
    std::os::unix::fs::symlink(&victim, target.join("index.md")).unwrap();
    let refused = export(store.as_ref(), &target, forced, Progress::Hidden)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("symbolic link"), "{refused}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
    store.close().await;
}

/// Documents under hidden names (a leading `.`, such as the publish policy under
/// `/.well-known/`, or a publisher's `/notes/.x.md`) are verified and backed up like any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_and_export_reach_documents_under_hidden_names() {
    let bucket = tempfile::tempdir().unwrap();
    let store = open(bucket.path(), OpenMode::Writable).await;
    for (path, body) in [
        ("/notes/a.md", "# A\n"),
        ("/notes/.x.md", "# Hidden from listings\n"),
        ("/.drafts/deep/d.md", "# Draft\n"),
    ] {
        store
            .publish(&Ctx::new(), quire_backend::WriteRequest::new(path, body))
            .await
            .unwrap();
    }
    store.close().await;

    let store = open(bucket.path(), OpenMode::ReadOnly).await;
    let report = verify(store.as_ref(), Progress::Hidden).await.unwrap();
    assert!(report.is_healthy(), "{report:?}");
    assert_eq!((report.documents, report.versions), (3, 3));
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("export");
    let exported = export(
        store.as_ref(),
        &target,
        ExportOptions::default(),
        Progress::Hidden,
    )
    .await
    .unwrap();
    assert_eq!(exported.documents, 3);
    let written: Vec<PathBuf> = files(&target).into_keys().collect();
    assert_eq!(
        written,
        [
            PathBuf::from(".drafts/deep/d.md"),
            PathBuf::from("notes/.x.md"),
            PathBuf::from("notes/a.md"),
        ]
    );
    store.close().await;
}
