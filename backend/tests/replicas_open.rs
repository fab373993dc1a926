//! Replicas opening one prefix: concurrent opens of an empty prefix join one world, a world
//! being created is waited for, objects that are not a world's are refused by name, and the
//! catalog's freshness bound holds from the moment of the open, and an open rides out
//! transient bucket errors by itself. Memory driver behind the simulated bucket, on tokio's
//! paused clock.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quire_backend::bucket::{BucketOptions, BucketStore, WORLD_CREATION_WAIT};
use quire_backend::{CatalogQuery, Ctx, SEARCH_FRESHNESS, Store, WriteRequest};
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Op};
use quire_blob::{LatencyProfile, Simulated};
use quire_checkpoint::format::DEFAULT_WIDTHS;
use quire_checkpoint::genesis::genesis_objects;
use quire_checkpoint::keys::{checkpoint_key, root_key};
use quire_log::clock::ManualElapsed;
use quire_log::marker::{GENESIS_SEQUENCE, Marker};
use quire_log::{ManualClock, Timestamp, WorldId, keys};

fn options(prefix: &str) -> BucketOptions {
    BucketOptions {
        prefix: prefix.into(),
        clock: Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        compaction: None,
        seed: 7,
        ..BucketOptions::default()
    }
}

async fn publish(store: &BucketStore, path: &str, body: &str) {
    store
        .publish(&Ctx::new(), WriteRequest::new(path, body.to_owned()))
        .await
        .unwrap();
}

async fn content(store: &BucketStore, path: &str) -> String {
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.unwrap();
    view.get(&ctx, path, 0).await.unwrap().content
}

async fn catalog_paths(store: &BucketStore) -> Vec<String> {
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.unwrap();
    let found = view.lookup(&ctx, &CatalogQuery::new("*")).await.unwrap();
    found.iter().map(|m| m.path.to_string()).collect()
}

/// A bucket where every request takes the same time (on the paused clock), so concurrent
/// opens interleave the same way every run.
fn lockstep(inner: Arc<dyn BlobStore>) -> Arc<dyn BlobStore> {
    let mut sim = Simulated::new(inner, 1);
    for op in Op::ALL {
        sim = sim.with_latency(op, LatencyProfile::Fixed(Duration::from_millis(5)));
    }
    Arc::new(sim)
}

#[tokio::test(start_paused = true)]
async fn replicas_opening_an_empty_prefix_with_their_own_world_ids_join_one_world() {
    let bucket = lockstep(Arc::new(MemoryStore::new()));
    // Openers a little apart, so each finds the others somewhere between their writes.
    let opens = (0..6u64).map(|i| {
        let bucket = bucket.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2 * i)).await;
            BucketStore::open(
                bucket,
                BucketOptions {
                    seed: i,
                    ..options("w/")
                },
            )
            .await
        })
    });
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().expect("every replica opens"));
    }
    let world = stores[0].world();
    for (i, store) in stores.iter().enumerate() {
        assert_eq!(store.world(), world);
        publish(store, &format!("/from-{i}.md"), "x").await;
    }
    for store in &stores {
        for i in 0..stores.len() {
            assert_eq!(content(store, &format!("/from-{i}.md")).await, "x");
        }
    }
    // One checkpoint zero, one root, one marker: nothing of the losers' proposals is left.
    let listed = quire_blob::list_all(bucket.as_ref(), "w/", "")
        .await
        .unwrap();
    let genesis: Vec<&str> = listed
        .iter()
        .map(|a| a.key.as_str())
        .filter(|k| !k.starts_with("w/log/"))
        .collect();
    assert_eq!(genesis.len(), 3, "{genesis:?}");
    for store in &stores {
        store.close().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_explicit_world_id_is_refused_when_another_world_won_the_prefix() {
    let bucket = lockstep(Arc::new(MemoryStore::new()));
    let open = |world: u8| {
        let bucket = bucket.clone();
        tokio::spawn(async move {
            BucketStore::open(
                bucket,
                BucketOptions {
                    world: Some(WorldId([world; 16])),
                    ..options("w/")
                },
            )
            .await
        })
    };
    let (a, b) = (open(1), open(2));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert!(a.is_ok() != b.is_ok(), "exactly one explicit world wins");
}

#[tokio::test(start_paused = true)]
async fn an_open_waits_for_a_world_another_opener_is_creating() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let world = WorldId([5; 16]);
    let (root, checkpoint) = genesis_objects(world, DEFAULT_WIDTHS);
    // A creator that writes the root first has not got further yet.
    memory
        .create(&root_key("w/", &checkpoint.root), root.encode())
        .await
        .unwrap();
    let opening = tokio::spawn({
        let memory = memory.clone();
        async move { BucketStore::open(memory, options("w/")).await }
    });
    tokio::time::sleep(WORLD_CREATION_WAIT / 3).await;
    assert!(!opening.is_finished(), "refused instead of waiting");
    memory
        .create(&checkpoint_key("w/", GENESIS_SEQUENCE), checkpoint.encode())
        .await
        .unwrap();
    memory
        .create(
            &keys::marker_key("w/"),
            Bytes::from(Marker { world }.encode()),
        )
        .await
        .unwrap();
    let store = opening.await.unwrap().expect("joins the finished world");
    assert_eq!(store.world(), world);
    publish(&store, "/a.md", "a").await;
    store.close().await;
}

#[tokio::test(start_paused = true)]
async fn world_objects_that_never_become_a_world_are_refused_after_the_wait() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let stray = keys::slot_key("w/", 2);
    memory
        .create(&stray, Bytes::from_static(b"x"))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = BucketStore::open(memory, options("w/")).await.unwrap_err();
    assert!(started.elapsed() >= WORLD_CREATION_WAIT);
    assert!(err.to_string().contains(&stray), "{err}");
}

#[tokio::test(start_paused = true)]
async fn objects_that_are_not_a_worlds_are_refused_at_once_by_name() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    memory
        .create("w/notes.txt", Bytes::from_static(b"mine"))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = BucketStore::open(memory.clone(), options("w/"))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(err.to_string().contains("w/notes.txt"), "{err}");
    // Nothing was written.
    assert_eq!(
        quire_blob::list_all(memory.as_ref(), "w/", "")
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn the_catalog_bound_counts_from_before_the_replay_of_an_open() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let writer = BucketStore::open(memory.clone(), options("p/"))
        .await
        .unwrap();
    publish(&writer, "/a.md", "a").await;
    let sim = Arc::new(Simulated::new(memory.clone(), 3));
    let elapsed = Arc::new(ManualElapsed::default());
    // The open's replay has listed the log; a peer commits before the open finishes.
    let listed = sim.hold_response(Op::List, "p/log/");
    let opening = tokio::spawn({
        let sim: Arc<dyn BlobStore> = sim.clone();
        let elapsed = elapsed.clone();
        async move {
            BucketStore::open(
                sim,
                BucketOptions {
                    elapsed,
                    ..options("p/")
                },
            )
            .await
        }
    });
    listed.wait_held(1).await;
    publish(&writer, "/late.md", "late").await;
    elapsed.advance(SEARCH_FRESHNESS / 2);
    listed.release();
    let reader = opening.await.unwrap().unwrap();
    // More than the bound after /late.md was acknowledged: a catalog read must show it.
    elapsed.advance(SEARCH_FRESHNESS * 3 / 4);
    assert_eq!(catalog_paths(&reader).await, ["/a.md", "/late.md"]);
    writer.close().await;
    reader.close().await;
}

/// The first reads an open makes (the marker, the listings, the checkpoint, the log's tip)
/// fail as throttled, or unavailable as a lost response is: the
/// open retries each with backoff on tokio's clock and succeeds, writable and read-only,
/// without the caller retrying.
#[tokio::test(start_paused = true)]
async fn an_open_retries_transient_bucket_errors_itself() {
    use quire_blob::{Fault, FaultRule};

    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let first = BucketStore::open(memory.clone(), options("w/"))
        .await
        .unwrap();
    publish(&first, "/a.md", "before").await;
    first.close().await;

    for read_only in [false, true] {
        let flaky = Arc::new(Simulated::new(memory.clone(), 3));
        flaky.add_fault(FaultRule::new(Op::Get, "", Fault::Throttled).first(2));
        flaky.add_fault(FaultRule::new(Op::List, "", Fault::Unavailable).first(2));
        flaky.add_fault(FaultRule::new(Op::Head, "", Fault::Throttled).first(1));
        let began = tokio::time::Instant::now();
        let store = BucketStore::open(
            flaky.clone(),
            BucketOptions {
                read_only,
                ..options("w/")
            },
        )
        .await
        .unwrap_or_else(|e| panic!("read-only {read_only}: the open gave up: {e}"));
        let injected = flaky.injected();
        assert!(
            injected.throttled >= 2 && injected.unavailable >= 2,
            "{injected:?}"
        );
        assert!(began.elapsed() < Duration::from_secs(30), "bounded backoff");
        assert_eq!(content(&store, "/a.md").await, "before");
        store.close().await;
    }
}
