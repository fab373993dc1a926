//! Body search on the shipped stores: built on the first body search, one version per
//! snapshot (a view keeps answering from its own), kept current as this store's and peers'
//! writes arrive without a body search, superseded versions dropped after the retention,
//! evicted when idle and built again on the next search. Time is tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::file::{FileOptions, FileStore};
use quire_backend::{
    BodySearch, CatalogQuery, Ctx, ErrorKind, MatchMode, ReadView, SearchOptions, SearchStatus,
    Store, WriteRequest,
};
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Simulated};
use quire_log::{ManualClock, Timestamp};

fn search() -> SearchOptions {
    SearchOptions {
        evict_after: Duration::from_secs(600),
        retain: Duration::from_secs(30),
        ..SearchOptions::default()
    }
}

fn options() -> BucketOptions {
    BucketOptions {
        clock: Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        compaction: None,
        seed: 7,
        search: search(),
        ..BucketOptions::default()
    }
}

async fn publish(store: &dyn Store, path: &str, body: &str) -> u64 {
    store
        .publish(&Ctx::new(), WriteRequest::new(path, body.to_owned()))
        .await
        .unwrap()
        .version
}

/// `path#anchor` rows of a body lookup on `view`, or the error kind.
async fn rows(view: &dyn ReadView, text: &str) -> Result<Vec<String>, ErrorKind> {
    let query = CatalogQuery::new(text).mode(MatchMode::Body);
    let found = view
        .lookup(&Ctx::new(), &query)
        .await
        .map_err(|e| e.kind())?;
    Ok(found
        .iter()
        .map(|m| {
            let anchor = m.section.as_ref().map_or("", |s| s.anchor.as_str());
            format!("{}#{anchor}", m.path)
        })
        .collect())
}

/// Waits for the body search's status to satisfy `done`; on the paused clock a wait that
/// never ends fails after a minute instead of hanging.
async fn signal(search: &BodySearch, done: impl Fn(&SearchStatus) -> bool) {
    tokio::time::timeout(Duration::from_secs(60), search.wait_until(done))
        .await
        .expect("the body search reached the awaited status");
}

async fn fresh_rows(store: &dyn Store, text: &str) -> Result<Vec<String>, ErrorKind> {
    let view = store.open_view(&Ctx::new()).await.unwrap();
    let found = rows(view.as_ref(), text).await;
    view.close();
    found
}

#[tokio::test(start_paused = true)]
async fn a_view_answers_from_the_version_of_its_own_snapshot() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let store = BucketStore::open(blobs, options()).await.unwrap();
    assert!(
        !store.body_search().status().active,
        "nothing built before a body search"
    );
    publish(&store, "/a.md", "# One\n\nold words\n").await;
    let pinned = store.open_view(&Ctx::new()).await.unwrap();
    assert_eq!(
        rows(pinned.as_ref(), "old").await,
        Ok(vec!["/a.md#one".into()])
    );
    assert_eq!(store.body_search().status().builds, 1);

    publish(&store, "/a.md", "# Two\n\nnew words\n").await;
    assert_eq!(
        fresh_rows(&store, "new").await,
        Ok(vec!["/a.md#two".into()])
    );
    assert_eq!(fresh_rows(&store, "old").await, Ok(vec![]));
    // The view pinned before the write still reads its own snapshot's sections.
    assert_eq!(
        rows(pinned.as_ref(), "old").await,
        Ok(vec!["/a.md#one".into()])
    );
    assert_eq!(rows(pinned.as_ref(), "new").await, Ok(vec![]));
    assert_eq!(
        store.body_search().status().builds,
        1,
        "advanced, not rebuilt"
    );

    // Past the retention a superseded version goes with the next one built.
    tokio::time::advance(Duration::from_secs(31)).await;
    publish(&store, "/b.md", "other\n").await;
    assert_eq!(fresh_rows(&store, "other").await, Ok(vec!["/b.md#".into()]));
    let kept = store.body_search().status().sequences;
    assert_eq!(
        kept.len(),
        2,
        "the previous version is kept, older ones dropped: {kept:?}"
    );
    assert_eq!(
        rows(pinned.as_ref(), "old").await,
        Err(ErrorKind::BodyMatchUnavailable),
        "its version is gone: no body answer from another snapshot"
    );
    store.close().await;
}

#[tokio::test(start_paused = true)]
async fn without_an_index_of_the_snapshot_in_time_a_body_lookup_is_unavailable() {
    let simulated = Simulated::new(Arc::new(MemoryStore::new()), 3);
    let blobs: Arc<dyn BlobStore> = Arc::new(simulated.clone());
    let writer = BucketStore::open(blobs.clone(), options()).await.unwrap();
    publish(&writer, "/a.md", "held words\n").await;
    writer.close().await;
    // A store holds the slots it wrote in memory; one opened after the write reads the
    // inline bodies from their slot with a ranged get: park those reads.
    let store = BucketStore::open(blobs, options()).await.unwrap();
    let hold = simulated.hold(quire_blob::Op::GetRange, "log/");
    assert_eq!(
        fresh_rows(&store, "held").await,
        Err(ErrorKind::BodyMatchUnavailable),
        "the build is parked: after the one-second wait the lookup gives up"
    );
    hold.wait_held(1).await;
    hold.release();
    assert_eq!(body_rows(&store, "held").await, ["/a.md#"]);
    store.close().await;
}

#[tokio::test(start_paused = true)]
async fn peers_writes_reach_the_index_without_a_body_search() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let writer = BucketStore::open(blobs.clone(), options()).await.unwrap();
    publish(&writer, "/first.md", "first words\n").await;
    let reader = BucketStore::open(blobs, options()).await.unwrap();
    assert_eq!(
        fresh_rows(&reader, "first").await,
        Ok(vec!["/first.md#".into()])
    );
    let search = reader.body_search().clone();
    let before = search.status().reached;

    publish(&writer, "/second.md", "second words\n").await;
    // An exact read probes the log and installs the peer's slot; the index follows it on
    // its own, before any body search asks for it.
    let ctx = Ctx::new();
    let view = reader.open_view(&ctx).await.unwrap();
    view.is_dir(&ctx, "/").await.unwrap();
    signal(&search, |s| s.reached > before).await;
    assert_eq!(search.status().builds, 1);
    assert_eq!(
        rows(view.as_ref(), "second").await,
        Ok(vec!["/second.md#".into()])
    );
    writer.close().await;
    reader.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_index_is_evicted_and_built_again_on_the_next_body_search() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let store = BucketStore::open(blobs, options()).await.unwrap();
    publish(&store, "/a.md", "kept words\n").await;
    assert_eq!(fresh_rows(&store, "kept").await, Ok(vec!["/a.md#".into()]));
    let search = store.body_search().clone();
    assert!(search.status().active);
    // A write keeps the index current but is no body search: it does not delay eviction.
    tokio::time::advance(Duration::from_secs(300)).await;
    publish(&store, "/b.md", "more words\n").await;
    tokio::time::advance(Duration::from_secs(301)).await;
    signal(&search, |s| !s.active).await;
    let status = search.status();
    assert_eq!((status.evictions, status.sequences.len()), (1, 0));
    assert_eq!(fresh_rows(&store, "more").await, Ok(vec!["/b.md#".into()]));
    assert_eq!(search.status().builds, 2);
    store.close().await;
    assert_eq!(
        fresh_rows(&store, "more").await,
        Err(ErrorKind::BodyMatchUnavailable),
        "a closed store answers body lookups from the catalog"
    );
}

/// Asks until the store answers in body mode (its index of the view's snapshot may take
/// longer than the wait on a loaded machine; each ask waits for it).
async fn body_rows(store: &dyn Store, text: &str) -> Vec<String> {
    for _ in 0..30 {
        match fresh_rows(store, text).await {
            Err(ErrorKind::BodyMatchUnavailable) => continue,
            found => return found.unwrap(),
        }
    }
    panic!("no body answer for {text:?}");
}

#[tokio::test]
async fn the_file_store_answers_body_lookups_and_follows_its_writes() {
    let dir = tempfile::tempdir().unwrap();
    let options = FileOptions {
        durable: false,
        search: search(),
        ..FileOptions::default()
    };
    let store = FileStore::open(dir.path(), options).await.unwrap();
    publish(&store, "/notes/a.md", "# Setup\n\nraise the udp buffer\n").await;
    assert_eq!(body_rows(&store, "udp buffer").await, ["/notes/a.md#setup"]);
    publish(&store, "/notes/a.md", "# Setup\n\nlower it again\n").await;
    assert_eq!(body_rows(&store, "lower").await, ["/notes/a.md#setup"]);
    assert_eq!(body_rows(&store, "udp").await, Vec::<String>::new());
    assert_eq!(store.body_search().status().builds, 1);
    store.close().await;
}

fn files_under(dir: &std::path::Path) -> usize {
    walk(dir).len()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The index keeps its files in the configured cache directory (in a directory of its own
/// per build), folds writes into them once the delta is big enough, and removes them when
/// it is evicted.
#[tokio::test(start_paused = true)]
async fn the_index_lives_in_the_cache_directory_and_leaves_with_the_eviction() {
    let cache = tempfile::tempdir().unwrap();
    let store = BucketStore::open(
        Arc::new(MemoryStore::new()),
        BucketOptions {
            search: SearchOptions {
                cache_dir: Some(cache.path().to_owned()),
                fold_documents: 2,
                fold_every: Duration::from_secs(3600),
                ..search()
            },
            ..options()
        },
    )
    .await
    .unwrap();
    publish(&store, "/a.md", "# One\n\nfirst words\n").await;
    assert_eq!(body_rows(&store, "first").await, ["/a.md#one"]);
    let builds: Vec<_> = std::fs::read_dir(cache.path()).unwrap().flatten().collect();
    assert_eq!(builds.len(), 1, "one directory per build");
    assert!(files_under(cache.path()) > 0, "the index has files");
    let search = store.body_search().clone();
    assert_eq!(search.status().folds, 0);
    publish(&store, "/b.md", "second words\n").await;
    publish(&store, "/c.md", "third words\n").await;
    assert_eq!(body_rows(&store, "words").await.len(), 3);
    assert_eq!(
        search.status().folds,
        1,
        "two changed documents were folded"
    );
    assert_eq!(body_rows(&store, "third").await, ["/c.md#"]);

    tokio::time::advance(Duration::from_secs(601)).await;
    signal(&search, |s| !s.active).await;
    assert_eq!(files_under(cache.path()), 0, "evicted with its files");
    store.close().await;
}
