//! The file store's own promises beyond the contract: the layout a person reads, one writer
//! per directory, recovery from a crash between files, refusal of foreign or damaged
//! directories, read-only opens, and the change hub.

use std::path::Path;
use std::sync::Arc;

use quire_backend::file::{FileOptions, FileStore};
use quire_backend::{ArchiveRequest, ChangeSource, Ctx, DocPath, ErrorKind, Store, WriteRequest};
use quire_log::version::StoredVersion;
use quire_log::{ManualClock, Timestamp};

fn options() -> FileOptions {
    FileOptions {
        clock: Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        ..FileOptions::default()
    }
}

async fn publish(store: &FileStore, path: &str, body: &str) -> quire_backend::Document {
    store
        .publish(&Ctx::new(), WriteRequest::new(path, body.to_owned()))
        .await
        .unwrap()
}

async fn current(store: &FileStore, path: &str) -> quire_backend::Result<quire_backend::Document> {
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await?;
    view.get(&ctx, path, 0).await
}

#[tokio::test]
async fn documents_are_markdown_files_with_versions_beside_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    let store = FileStore::open(&root, options()).await.unwrap();
    let request = WriteRequest::new("/notes/a.md", "# A\n\nfirst\n").meta("tags", "x, y");
    store.publish(&Ctx::new(), request).await.unwrap();
    let second = publish(&store, "/notes/a.md", "# A\n\nsecond\n").await;
    publish(&store, "/versions/v.md", "named like the history directory").await;

    let document = std::fs::read_to_string(root.join("notes/a.md")).unwrap();
    assert!(
        document.starts_with("---\nversion: 2\nprevious-hash: blake3-"),
        "{document}"
    );
    assert!(document.ends_with("---\n# A\n\nsecond\n"));
    assert_eq!(
        blake3::hash(document.as_bytes()).to_hex().as_str(),
        second.etag.to_hex()
    );
    let v1 = std::fs::read(root.join("notes/versions/a.md/1.md")).unwrap();
    let decoded = StoredVersion::decode(&v1).unwrap();
    assert_eq!(decoded.body, "# A\n\nfirst\n");
    assert_eq!(decoded.metadata["tags"], "x,y");
    let state = std::fs::read_to_string(root.join("notes/versions/a.md/state.json")).unwrap();
    assert!(state.contains("\"archived\": false"), "{state}");
    assert!(state.contains("2026-01-01T00:00:00Z"), "{state}");
    assert!(root.join("%versions/v.md").is_file());
    assert!(root.join("%versions/versions/v.md/1.md").is_file());
    store.close().await;
}

#[tokio::test]
async fn one_writer_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = FileStore::open(dir.path(), options()).await.unwrap();
    let err = FileStore::open(dir.path(), options()).await.unwrap_err();
    assert!(err.to_string().contains("another store"), "{err}");
    let reader = FileStore::open(
        dir.path(),
        FileOptions {
            read_only: true,
            ..options()
        },
    )
    .await;
    assert!(reader.is_err(), "a reader opened beside a writer");
    first.close().await;
    let second = FileStore::open(dir.path(), options()).await.unwrap();
    assert_eq!(second.world(), first.world());
}

#[tokio::test]
async fn reopening_recovers_from_a_crash_between_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), options()).await.unwrap();
    publish(&store, "/a.md", "one").await;
    publish(&store, "/a.md", "two").await;
    store.close().await;
    drop(store);
    // A crash after the version file and before the state: version 3 exists on disk only.
    let history = dir.path().join("versions/a.md");
    std::fs::write(history.join("3.md"), "---\nversion: 3\n---\norphan").unwrap();
    // A crash before the document file was renamed into place, and a leftover temporary.
    std::fs::write(dir.path().join("a.md"), "stale mirror").unwrap();
    std::fs::write(dir.path().join(".quire/tmp/9-9.tmp"), "partial").unwrap();

    let store = FileStore::open(dir.path(), options()).await.unwrap();
    assert!(
        !history.join("3.md").exists(),
        "the orphan version survived"
    );
    let mirror = std::fs::read_to_string(dir.path().join("a.md")).unwrap();
    assert!(mirror.ends_with("---\ntwo"), "{mirror}");
    assert_eq!(
        std::fs::read_dir(dir.path().join(".quire/tmp"))
            .unwrap()
            .count(),
        0
    );
    let doc = current(&store, "/a.md").await.unwrap();
    assert_eq!((doc.version, doc.content.as_str()), (2, "two"));
    let next = publish(&store, "/a.md", "three").await;
    assert_eq!(next.version, 3);
}

#[tokio::test]
async fn archive_state_and_retention_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), options()).await.unwrap();
    for n in 1..=3 {
        publish(&store, "/r.md", &format!("v{n}")).await;
    }
    let pruned = store
        .publish(
            &Ctx::new(),
            WriteRequest::new("/r.md", "v4").meta("retention", "2"),
        )
        .await
        .unwrap();
    assert_eq!(pruned.prune.map(|p| (p.from, p.to)), Some((1, 2)));
    assert!(!dir.path().join("versions/r.md/1.md").exists());
    publish(&store, "/gone.md", "bye").await;
    store
        .set_archived(&Ctx::new(), ArchiveRequest::new("/gone.md", true))
        .await
        .unwrap();
    store.close().await;
    drop(store);

    let store = FileStore::open(dir.path(), options()).await.unwrap();
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.unwrap();
    let versions: Vec<u64> = view
        .versions(&ctx, "/r.md")
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(versions, [4, 3]);
    view.verify_chain(&ctx, "/r.md").await.unwrap();
    assert!(view.get(&ctx, "/gone.md", 0).await.unwrap().archived);
}

#[tokio::test]
async fn refuses_foreign_and_damaged_directories() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.md"), "someone's file").unwrap();
    let err = FileStore::open(dir.path(), options()).await.unwrap_err();
    assert!(err.to_string().contains("no world"), "{err}");

    let damaged = dir.path().join("damaged");
    let store = FileStore::open(&damaged, options()).await.unwrap();
    publish(&store, "/d.md", "fine").await;
    store.close().await;
    drop(store);
    std::fs::write(
        damaged.join("versions/d.md/1.md"),
        "edited behind the store",
    )
    .unwrap();
    let err = FileStore::open(&damaged, options()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
    assert_eq!(err.op(), quire_backend::Op::Open);
}

#[tokio::test]
async fn read_only_stores_never_write() {
    let dir = tempfile::tempdir().unwrap();
    let missing = FileStore::open(
        dir.path().join("none"),
        FileOptions {
            read_only: true,
            ..options()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    assert!(!dir.path().join("none").exists());

    let writer = FileStore::open(dir.path(), options()).await.unwrap();
    publish(&writer, "/a.md", "x").await;
    writer.close().await;
    let reader = FileStore::open(
        dir.path(),
        FileOptions {
            read_only: true,
            ..options()
        },
    )
    .await
    .unwrap();
    let err = reader
        .publish(&Ctx::new(), WriteRequest::new("/b.md", "y"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReadOnly);
    assert_eq!(current(&reader, "/a.md").await.unwrap().content, "x");
}

#[tokio::test]
async fn the_change_hub_follows_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(
        dir.path(),
        FileOptions {
            change_ring: 16,
            ..options()
        },
    )
    .await
    .unwrap();
    let hub = store.changes().expect("a hub when the ring is on");
    let start = hub.head();
    publish(&store, "/a.md", "one").await;
    store
        .append(
            &Ctx::new(),
            WriteRequest::new("/a.md", "two")
                .expected(1)
                .meta("agent", "me"),
        )
        .await
        .unwrap();
    store
        .set_archived(&Ctx::new(), ArchiveRequest::new("/a.md", true))
        .await
        .unwrap();
    // Neither a no-op nor a refused write is an event.
    store
        .set_archived(&Ctx::new(), ArchiveRequest::new("/a.md", true))
        .await
        .unwrap();
    let events = hub.since(start).unwrap();
    let ops: Vec<_> = events
        .iter()
        .map(|e| (e.sequence - start, e.version, e.op, e.agent.clone()))
        .collect();
    use quire_log::EntryOp::{Append, Archive, Publish};
    assert_eq!(
        ops,
        [
            (1, 1, Publish, None),
            (2, 2, Append, Some("me".to_owned())),
            (3, 2, Archive, Some("me".to_owned())),
        ]
    );
    assert_eq!(events[0].path, DocPath::parse("/a.md").unwrap());
    store.close().await;
    assert!(hub.is_closed());
    assert!(
        FileStore::open(dir.path().join("x"), options())
            .await
            .unwrap()
            .changes()
            .is_none()
    );
}

#[tokio::test]
async fn a_path_too_long_for_the_filesystem_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), options()).await.unwrap();
    let long = format!("/{}.md", "n".repeat(300));
    let err = store
        .publish(&Ctx::new(), WriteRequest::new(long.as_str(), "x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(Path::new(dir.path()).join(".quire").is_dir());
}
