//! Copies of the section index in the bucket: put after a checkpoint by a replica with a
//! built index, downloaded by a cold replica (which reads only the bodies that changed
//! since), never trusted when damaged or missing (a rebuild), and collected with the
//! checkpoints. Time is tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::{
    ArchiveRequest, BodySearch, CatalogQuery, Ctx, ErrorKind, MatchMode, SearchOptions,
    SearchStatus, Store, WriteRequest,
};

use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Calls, Op, Simulated};
use quire_checkpoint::{CompactionPolicy, Step};
use quire_log::{ManualClock, Timestamp};

/// Counts reads of document bodies (`blobs/` keys) through a simulated store.
struct Counting {
    store: Arc<Simulated>,
    body: Calls,
}

impl Counting {
    fn new(inner: Arc<dyn BlobStore>) -> Counting {
        let store = Arc::new(Simulated::new(inner, 0));
        Counting {
            body: store.calls(&[Op::Get, Op::GetRange], "w/blobs/"),
            store,
        }
    }

    fn body_reads(&self) -> u64 {
        self.body.count()
    }
}

fn options() -> BucketOptions {
    BucketOptions {
        prefix: "w/".into(),
        clock: Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        compaction: None,
        seed: 7,
        search: SearchOptions {
            evict_after: Duration::from_secs(600),
            shelf_grace: Duration::ZERO,
            // Small parts, so the index files span several and a copy's late files (read
            // after it opens) have parts that come after it opens.
            copy_part_bytes: 512,
            ..SearchOptions::default()
        },
        ..BucketOptions::default()
    }
}

/// [`options`] with the index files in `dir` (so a copy's postings, positions and stored
/// sections arrive after it opens) instead of memory.
fn on_disk(dir: &tempfile::TempDir) -> BucketOptions {
    let mut options = options();
    options.search.cache_dir = Some(dir.path().to_owned());
    options
}

async fn publish(store: &dyn Store, path: &str, body: &str) {
    store
        .publish(&Ctx::new(), WriteRequest::new(path, body.to_owned()))
        .await
        .unwrap();
}

/// `path#anchor` rows of a body lookup on a fresh view, asked again after the body search
/// moves while the index of that view's snapshot is being built.
async fn rows(store: &BucketStore, text: &str) -> Vec<String> {
    loop {
        let before = store.body_search().status();
        let ctx = Ctx::new();
        let view = store.open_view(&ctx).await.unwrap();
        let query = CatalogQuery::new(text).mode(MatchMode::Body);
        match view.lookup(&ctx, &query).await {
            Ok(found) => {
                let mut out: Vec<String> = found
                    .iter()
                    .map(|m| {
                        let anchor = m.section.as_ref().map_or("", |s| s.anchor.as_str());
                        format!("{}#{anchor}", m.path)
                    })
                    .collect();
                out.sort();
                return out;
            }
            Err(e) if e.kind() == ErrorKind::BodyMatchUnavailable => {
                signal(store.body_search(), |now| *now != before).await;
            }
            Err(e) => panic!("body lookup: {e}"),
        }
    }
}

async fn signal(search: &BodySearch, done: impl Fn(&SearchStatus) -> bool) {
    tokio::time::timeout(Duration::from_secs(120), search.wait_until(done))
        .await
        .expect("the body search reached the awaited status");
}

const DOCS: usize = 12;

/// `text` with a tail section long enough that the body is stored as a blob, not inline in
/// its slot (so reading it shows as a `blobs/` read).
fn big(text: &str) -> String {
    format!("{text}\n## Tail\n\n{}\n", "padding text ".repeat(700))
}

async fn seed(store: &dyn Store) {
    for i in 0..DOCS {
        publish(
            store,
            &format!("/notes/n{i}.md"),
            &big(&format!("# Note {i}\n\ncommon words word{i}\n")),
        )
        .await;
    }
}

async fn manifests(blobs: &dyn BlobStore) -> Vec<String> {
    quire_blob::list_all(blobs, "w/search/v1/index/", "")
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.key)
        .collect()
}

/// A writer whose compactor wrote a checkpoint after its body search built an index, so a
/// copy of that index is on the shelf.
async fn writer_with_a_copy(blobs: Arc<dyn BlobStore>) -> BucketStore {
    let writer = BucketStore::open(
        blobs,
        BucketOptions {
            compaction: Some(CompactionPolicy {
                slots: 4,
                max_delay: Duration::ZERO,
                ..CompactionPolicy::default()
            }),
            compact_every: Duration::from_secs(5),
            ..options()
        },
    )
    .await
    .unwrap();
    // The index runs before the checkpoint comes, so the checkpoint finds one to copy.
    assert!(rows(&writer, "common").await.is_empty());
    seed(&writer).await;
    assert_eq!(rows(&writer, "common").await.len(), DOCS);
    let mut steps = writer.compaction_steps().unwrap();
    steps
        .wait_for(|s| matches!(s, Some(Step::Written { .. })))
        .await
        .unwrap();
    signal(writer.body_search(), |s| s.exports >= 1).await;
    writer
}

#[tokio::test(start_paused = true)]
async fn a_cold_replica_downloads_the_copy_and_reads_only_what_changed_since() {
    cold_replica_downloads_the_copy(options()).await;
}

/// The same with files on disk: the copy answers while its late files arrive.
#[tokio::test(start_paused = true)]
async fn a_cold_replica_with_files_on_disk_answers_while_the_copy_arrives() {
    let dir = tempfile::tempdir().unwrap();
    cold_replica_downloads_the_copy(on_disk(&dir)).await;
}

async fn cold_replica_downloads_the_copy(cold_options: BucketOptions) {
    let on_disk = cold_options.search.cache_dir.is_some();
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    writer_with_a_copy(blobs.clone()).await.close().await;
    assert!(!manifests(blobs.as_ref()).await.is_empty());
    // After the copy (and with no compactor to put another): one new document, one
    // changed, one archived.
    let writer = BucketStore::open(blobs.clone(), options()).await.unwrap();
    publish(&writer, "/notes/fresh.md", &big("fresh words")).await;
    publish(&writer, "/notes/n0.md", &big("# Note 0\n\nreplaced body")).await;
    writer
        .set_archived(&Ctx::new(), ArchiveRequest::new("/notes/n1.md", true))
        .await
        .unwrap();

    let counting = Counting::new(blobs.clone());
    let cold = BucketStore::open(counting.store.clone(), cold_options)
        .await
        .unwrap();
    let before = counting.body_reads();
    assert_eq!(rows(&cold, "fresh").await, ["/notes/fresh.md#"]);
    let status = cold.body_search().status();
    assert_eq!((status.downloads, status.builds), (1, 1), "{status:?}");
    assert_eq!(
        counting.body_reads() - before,
        2,
        "only the new and the changed body are read"
    );
    assert_eq!(rows(&cold, "replaced").await, ["/notes/n0.md#note-0"]);
    assert!(
        rows(&cold, "word0").await.is_empty(),
        "the copy's old n0 is gone"
    );
    assert!(rows(&cold, "word1").await.is_empty(), "archived");
    assert_eq!(rows(&cold, "word5").await, ["/notes/n5.md#note-5"]);
    assert_eq!(rows(&cold, "common").await.len(), DOCS - 2);
    // On disk, the copy's positions and stored sections arrived and passed their checksums.
    if on_disk {
        signal(cold.body_search(), |s| s.copies_whole == 1).await;
    }
    assert_eq!(cold.body_search().status().copies_whole, u64::from(on_disk));
    cold.close().await;
    writer.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_damaged_or_missing_copy_costs_only_a_rebuild() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let writer = writer_with_a_copy(blobs.clone()).await;
    writer.close().await;
    let parts = quire_blob::list_all(blobs.as_ref(), "w/search/v1/files/", "")
        .await
        .unwrap();
    let store_part = parts
        .iter()
        .find(|a| a.key.contains(".store/"))
        .expect("a stored-fields part");
    blobs
        .replace(
            &store_part.key,
            &store_part.generation,
            Bytes::from_static(b"not the part"),
        )
        .await
        .unwrap();
    let counting = Counting::new(blobs.clone());
    let cold = BucketStore::open(counting.store.clone(), options())
        .await
        .unwrap();
    assert_eq!(rows(&cold, "common").await.len(), DOCS);
    let status = cold.body_search().status();
    assert_eq!((status.downloads, status.builds), (0, 1), "{status:?}");
    assert!(
        counting.body_reads() >= DOCS as u64,
        "rebuilt from the bodies"
    );
    cold.close().await;

    for manifest in quire_blob::list_all(blobs.as_ref(), "w/search/v1/index/", "")
        .await
        .unwrap()
    {
        blobs
            .delete(&manifest.key, &manifest.generation)
            .await
            .unwrap();
    }
    let cold = BucketStore::open(blobs.clone(), options()).await.unwrap();
    assert_eq!(rows(&cold, "word3").await, ["/notes/n3.md#note-3"]);
    let status = cold.body_search().status();
    assert_eq!((status.downloads, status.builds), (0, 1), "{status:?}");
    cold.close().await;
}

/// A part of a late file (one read after the copy opened) that proves damaged drops the
/// copy however it is found, by a read or by the rest of the download: the replica builds
/// from the bodies and does not take that copy again.
#[tokio::test(start_paused = true)]
async fn a_copy_whose_late_part_proves_damaged_is_dropped_and_not_taken_again() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    writer_with_a_copy(blobs.clone()).await.close().await;
    let parts = quire_blob::list_all(blobs.as_ref(), "w/search/v1/files/", "")
        .await
        .unwrap();
    // The first part of a multi-part stored-sections file: not its last, which comes before
    // the copy opens.
    let late = parts
        .iter()
        .find(|a| a.key.contains(".store/") && a.key.ends_with("/00000000"))
        .filter(|a| {
            parts
                .iter()
                .any(|b| b.key == a.key.replace("/00000000", "/00000001"))
        })
        .expect("a stored-sections file of several parts");
    let bytes = blobs.get(&late.key).await.unwrap().data;
    blobs
        .replace(
            &late.key,
            &late.generation,
            Bytes::from(vec![b'x'; bytes.len()]),
        )
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let counting = Counting::new(blobs.clone());
    let cold = BucketStore::open(counting.store.clone(), on_disk(&dir))
        .await
        .unwrap();
    signal_started(&cold).await;
    // The copy was taken, then dropped: the next search builds from every body.
    signal(cold.body_search(), |s| s.downloads == 1 && !s.active).await;
    let before = counting.body_reads();
    assert_eq!(rows(&cold, "common").await.len(), DOCS);
    let status = cold.body_search().status();
    assert_eq!((status.downloads, status.builds), (1, 2), "{status:?}");
    assert!(
        counting.body_reads() - before >= DOCS as u64,
        "rebuilt from the bodies"
    );
    cold.close().await;
}

/// Starts the body search of `store` with one lookup, whatever it answers.
async fn signal_started(store: &BucketStore) {
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.unwrap();
    let query = CatalogQuery::new("common").mode(MatchMode::Body);
    let _ = view.lookup(&ctx, &query).await;
}

#[tokio::test(start_paused = true)]
async fn copies_are_collected_with_the_checkpoints_they_follow() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let writer = BucketStore::open(blobs.clone(), options()).await.unwrap();
    seed(&writer).await;
    assert_eq!(rows(&writer, "common").await.len(), DOCS);
    let search = writer.body_search();
    search.checkpointed(0);
    signal(search, |s| s.exports == 1 && s.collections == 1).await;
    publish(&writer, "/notes/later.md", "later words\n").await;
    publish(&writer, "/notes/n2.md", "# Note 2\n\nrewritten\n").await;
    assert_eq!(rows(&writer, "later").await, ["/notes/later.md#"]);
    search.checkpointed(0);
    signal(search, |s| s.exports == 2 && s.collections == 2).await;
    let both = manifests(blobs.as_ref()).await;
    assert_eq!(both.len(), 2, "{both:?}");
    let newest_sequence = u64::from_str_radix(both[1].rsplit('/').next().unwrap(), 16).unwrap();

    // Checkpoints before the newest copy were dropped: the older copy goes, and so does
    // every part only it named.
    search.checkpointed(newest_sequence);
    signal(search, |s| s.collections == 3).await;
    let left = manifests(blobs.as_ref()).await;
    assert_eq!(left, both[1..], "only the newest copy is left");
    let mut named = std::collections::BTreeSet::new();
    for key in &left {
        let manifest: serde_json::Value =
            serde_json::from_slice(&blobs.get(key).await.unwrap().data).unwrap();
        for file in manifest["files"].as_array().unwrap() {
            for i in 0..file["parts"].as_array().unwrap().len() {
                named.insert(format!(
                    "w/search/v1/files/{}/{i:08x}",
                    file["name"].as_str().unwrap()
                ));
            }
        }
    }
    let parts: std::collections::BTreeSet<String> =
        quire_blob::list_all(blobs.as_ref(), "w/search/v1/files/", "")
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.key)
            .collect();
    assert_eq!(
        parts, named,
        "every part left is named, every named part is there"
    );
    writer.close().await;

    let cold = BucketStore::open(blobs.clone(), options()).await.unwrap();
    assert_eq!(rows(&cold, "rewritten").await, ["/notes/n2.md#note-2"]);
    assert_eq!(cold.body_search().status().downloads, 1);
    cold.close().await;
}
