//! The bucket store's own promises beyond the contract: the compactor runs in the background
//! and stops at close, a store cold-started from a checkpoint reads history from its blocks,
//! catalog reads reuse a recently confirmed snapshot without touching the bucket, peer hints
//! end that reuse, the committed hook reports this store's commits, the store reports its
//! slots and blob traffic as stats, and a write's precondition reads versions still being
//! committed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::{CatalogQuery, Ctx, Follower, SEARCH_FRESHNESS, Store, WriteRequest};
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Metered};
use quire_checkpoint::{CompactionPolicy, Step};
use quire_log::{ManualClock, Timestamp};
use tokio::sync::mpsc;

fn options(prefix: &str) -> BucketOptions {
    BucketOptions {
        prefix: prefix.into(),
        clock: Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        compaction: None,
        seed: 7,
        ..BucketOptions::default()
    }
}

async fn publish(store: &BucketStore, path: &str, body: &str) -> quire_backend::Document {
    store
        .publish(&Ctx::new(), WriteRequest::new(path, body.to_owned()))
        .await
        .unwrap()
}

async fn versions(store: &BucketStore, path: &str) -> Vec<u64> {
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.unwrap();
    let found = view.versions(&ctx, path).await.unwrap();
    view.verify_chain(&ctx, path).await.unwrap();
    found.iter().map(|v| v.version).collect()
}

async fn content(store: &BucketStore, path: &str, version: u64) -> String {
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.unwrap();
    view.get(&ctx, path, version).await.unwrap().content
}

async fn catalog_paths(store: &BucketStore) -> Vec<String> {
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.unwrap();
    let found = view.lookup(&ctx, &CatalogQuery::new("*")).await.unwrap();
    found.iter().map(|m| m.path.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn the_compactor_checkpoints_in_the_background_and_stops_at_close() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let store = BucketStore::open(
        blobs.clone(),
        BucketOptions {
            compaction: Some(CompactionPolicy {
                slots: 4,
                max_delay: Duration::ZERO,
                ..CompactionPolicy::default()
            }),
            compact_every: Duration::from_secs(5),
            ..options("w/")
        },
    )
    .await
    .unwrap();
    for i in 1..=6 {
        publish(&store, "/notes/a.md", &format!("version {i}")).await;
    }
    publish(&store, "/b.md", "other").await;
    let mut steps = store.compaction_steps().expect("a compactor runs");
    let written = steps
        .wait_for(|step| matches!(step, Some(Step::Written { .. })))
        .await
        .unwrap()
        .clone();
    let Some(Step::Written { sequence, .. }) = written else {
        unreachable!()
    };
    assert!(sequence >= 5, "checkpoint at {sequence}");
    let checkpoints = quire_blob::list_all(blobs.as_ref(), "w/checkpoints/", "")
        .await
        .unwrap();
    assert_eq!(
        checkpoints.len(),
        2,
        "genesis and one written: {checkpoints:?}"
    );

    store.close().await;
    // The compactor's task ended: its step channel is closed.
    assert!(steps.changed().await.is_err());

    // Dropping a store without close stops its compactor too.
    let dropped = BucketStore::open(
        blobs.clone(),
        BucketOptions {
            compaction: Some(CompactionPolicy::default()),
            ..options("w/")
        },
    )
    .await
    .unwrap();
    let mut dropped_steps = dropped.compaction_steps().unwrap();
    drop(dropped);
    assert!(dropped_steps.changed().await.is_err());

    // A cold start rests on the checkpoint: old versions come from its history blocks.
    let history = quire_blob::list_all(blobs.as_ref(), "w/history/", "")
        .await
        .unwrap();
    assert!(!history.is_empty(), "the checkpoint wrote no history block");
    let metered = Arc::new(Metered::new(blobs.clone()));
    let reopened = BucketStore::open(metered.clone(), options("w/"))
        .await
        .unwrap();
    let before = metered.reading();
    let ctx = Ctx::new();
    let view = reopened.open_view(&ctx).await.unwrap();
    assert_eq!(view.versions(&ctx, "/notes/a.md").await.unwrap().len(), 6);
    let reads = metered.reading().since(&before);
    let found = reads.requests(quire_blob::Op::Get) - reads.failures(quire_blob::Op::Get);
    assert!(found > 0, "no history block was read: {reads:?}");
    assert_eq!(versions(&reopened, "/notes/a.md").await, [6, 5, 4, 3, 2, 1]);
    assert_eq!(content(&reopened, "/notes/a.md", 2).await, "version 2");
    assert_eq!(content(&reopened, "/notes/a.md", 0).await, "version 6");
    publish(&reopened, "/notes/a.md", "version 7").await;
    assert_eq!(
        versions(&reopened, "/notes/a.md").await,
        [7, 6, 5, 4, 3, 2, 1]
    );
    reopened.close().await;
}

#[tokio::test(start_paused = true)]
async fn catalog_reads_reuse_a_confirmed_snapshot_until_a_hint_or_the_bound() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let (hints_tx, mut hints) = mpsc::unbounded_channel();
    let target: Arc<Mutex<Option<BucketStore>>> = Arc::default();
    let forward = target.clone();
    let writer = BucketStore::open(
        memory.clone(),
        BucketOptions {
            on_committed: Some(Arc::new(move |sequence| {
                if let Some(peer) = &*forward.lock().unwrap() {
                    peer.follow(sequence);
                }
                let _ = hints_tx.send(sequence);
            })),
            ..options("p/")
        },
    )
    .await
    .unwrap();
    let metered = Arc::new(Metered::new(memory.clone()));
    let reader = BucketStore::open(metered.clone(), options("p/"))
        .await
        .unwrap();
    assert!(catalog_paths(&reader).await.is_empty());

    // Without a hint, a catalog read within the bound reuses the snapshot: no request.
    let first = publish(&writer, "/a.md", "a").await;
    assert_eq!(hints.recv().await, Some(2));
    assert_eq!(first.version, 1);
    let before = metered.reading();
    assert!(catalog_paths(&reader).await.is_empty());
    assert_eq!(metered.reading().since(&before).total_requests(), 0);
    // An exact read probes and sees it; the catalog then serves that state.
    assert_eq!(content(&reader, "/a.md", 0).await, "a");
    assert_eq!(catalog_paths(&reader).await, ["/a.md"]);

    // A peer hint beyond the served state makes the next catalog read probe.
    *target.lock().unwrap() = Some(reader.clone());
    publish(&writer, "/b.md", "b").await;
    assert_eq!(hints.recv().await, Some(3));
    assert_eq!(catalog_paths(&reader).await, ["/a.md", "/b.md"]);

    // Past the bound, a catalog read probes without a hint.
    *target.lock().unwrap() = None;
    publish(&writer, "/c.md", "c").await;
    assert_eq!(hints.recv().await, Some(4));
    assert_eq!(catalog_paths(&reader).await, ["/a.md", "/b.md"]);
    tokio::time::advance(SEARCH_FRESHNESS).await;
    assert_eq!(catalog_paths(&reader).await, ["/a.md", "/b.md", "/c.md"]);

    // A store's own writes are in its next catalog read at once.
    publish(&reader, "/d.md", "d").await;
    assert_eq!(
        catalog_paths(&reader).await,
        ["/a.md", "/b.md", "/c.md", "/d.md"]
    );
    writer.close().await;
    reader.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_opening_an_empty_prefix_at_once_create_one_world() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let world = quire_log::WorldId([3; 16]);
    let opens = (0..4).map(|i| {
        let blobs = blobs.clone();
        tokio::spawn(async move {
            BucketStore::open(
                blobs,
                BucketOptions {
                    world: Some(world),
                    seed: i,
                    ..options("race/")
                },
            )
            .await
        })
    });
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().unwrap());
    }
    for (i, store) in stores.iter().enumerate() {
        assert_eq!(store.world(), world);
        publish(store, &format!("/from-{i}.md"), "x").await;
    }
    for store in &stores {
        for i in 0..stores.len() {
            assert_eq!(content(store, &format!("/from-{i}.md"), 0).await, "x");
        }
        store.close().await;
    }
}

#[tokio::test]
async fn the_change_hub_carries_own_and_peer_commits_and_closes_with_the_store() {
    use quire_backend::{ArchiveRequest, ChangeSource};
    use quire_log::EntryOp;

    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let store = BucketStore::open(
        blobs.clone(),
        BucketOptions {
            change_ring: 16,
            ..options("c/")
        },
    )
    .await
    .unwrap();
    let hub = store.changes().expect("a change hub");
    assert_eq!(hub.epoch(), store.world().to_string());
    let start = hub.head();
    publish(&store, "/a.md", "one").await;
    publish(&store, "/a.md", "two").await;
    store
        .set_archived(&Ctx::new(), ArchiveRequest::new("/a.md", true))
        .await
        .unwrap();
    let peer = BucketStore::open(blobs.clone(), options("c/"))
        .await
        .unwrap();
    assert!(peer.changes().is_none(), "no hub without a ring");
    publish(&peer, "/p.md", "from a peer").await;
    // The exact read makes the store learn of the peer's slot.
    assert_eq!(content(&store, "/p.md", 0).await, "from a peer");
    let mut head = hub.watch_head();
    head.wait_for(|h| *h >= start + 4).await.unwrap();
    let events = hub.since(start).unwrap();
    let seen: Vec<(String, u64, EntryOp)> = events
        .iter()
        .map(|e| (e.path.to_string(), e.version, e.op))
        .collect();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[0].0, "/a.md");
    assert_eq!((seen[1].1, seen[3].0.as_str()), (2, "/p.md"));
    assert_ne!(
        seen[2].2, seen[1].2,
        "the archive is its own kind of change"
    );
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [start + 1, start + 2, start + 3, start + 4]);
    store.close().await;
    assert!(hub.is_closed());
    peer.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_watched_hub_polls_the_log_for_peer_commits_without_hints() {
    use quire_backend::ChangeSource;
    use quire_backend::bucket::FOLLOW_POLL;

    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let follower = BucketStore::open(
        blobs.clone(),
        BucketOptions {
            change_ring: 16,
            ..options("w/")
        },
    )
    .await
    .unwrap();
    let writer = BucketStore::open(blobs.clone(), options("w/"))
        .await
        .unwrap();
    let hub = follower.changes().expect("a change hub");
    let start = hub.head();

    // Nobody watches: the peer's commit is not looked for.
    publish(&writer, "/unwatched.md", "x").await;
    tokio::time::sleep(FOLLOW_POLL * 3).await;
    assert_eq!(hub.head(), start, "no poll without watchers");

    // A watcher waits: the next poll brings both commits in, in log order.
    let mut head = hub.watch_head();
    publish(&writer, "/watched.md", "y").await;
    tokio::time::timeout(
        FOLLOW_POLL + Duration::from_secs(1),
        head.wait_for(|h| *h >= start + 2),
    )
    .await
    .expect("the poll brings the peer's commits within one interval")
    .unwrap();
    let paths: Vec<String> = hub
        .since(start)
        .unwrap()
        .iter()
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(paths, ["/unwatched.md", "/watched.md"]);
    writer.close().await;
    follower.close().await;
}

#[tokio::test]
async fn stats_count_slots_and_blob_traffic_and_current_reads_no_bytes() {
    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let store = BucketStore::open(blobs.clone(), options("w/"))
        .await
        .unwrap();
    let opened = store.stats().blobs.unwrap();
    publish(&store, "/a.md", "alpha").await;
    publish(&store, "/b.md", "beta").await;
    let stats = store.stats();
    let commits = stats.commits.unwrap();
    let slots: u64 = commits.batches_by_size.values().sum();
    let writes: u64 = commits
        .batches_by_size
        .iter()
        .map(|(size, slots)| *size as u64 * slots)
        .sum();
    assert_eq!((slots, writes), (commits.slots_won, 2), "{commits:?}");
    assert_eq!(commits.slots_lost, 0);
    let traffic = stats.blobs.unwrap().since(&opened);
    assert!(
        traffic.requests(quire_blob::Op::Create) >= slots,
        "{traffic:?}"
    );
    assert!(traffic.bytes_up > 0);

    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.unwrap();
    let before = store.stats().blobs.unwrap();
    let current = view.current(&ctx, "/a.md").await.unwrap();
    assert_eq!((current.version, current.archived), (1, false));
    assert_eq!(store.stats().blobs.unwrap().since(&before).bytes_down, 0);
    let doc = view.get(&ctx, "/a.md", 0).await.unwrap();
    assert_eq!(
        (doc.etag, doc.content_hash),
        (current.etag, current.body_hash)
    );
    // The body is read where it is stored, though this store wrote it.
    assert!(store.stats().blobs.unwrap().since(&before).bytes_down > 0);
    view.close();
    // A store opened after the write downloads it.
    let other = BucketStore::open(blobs, options("w/")).await.unwrap();
    let view = other.open_view(&ctx).await.unwrap();
    let before = other.stats().blobs.unwrap();
    assert_eq!(view.get(&ctx, "/a.md", 0).await.unwrap().etag, current.etag);
    assert!(other.stats().blobs.unwrap().since(&before).bytes_down > 0);
    view.close();
}

/// Requires `/policy.md` to read as "strict", as a policy check reads the policy's body.
#[derive(Debug)]
struct ReadsPolicy;

#[async_trait::async_trait]
impl quire_backend::Precondition for ReadsPolicy {
    async fn check(
        &self,
        ctx: &Ctx,
        state: &dyn quire_backend::Reader,
        write: &quire_log::build::PreparedWrite,
    ) -> quire_backend::Result<()> {
        let policy = state.get(ctx, "/policy.md", 0).await?;
        if policy.content != "strict" {
            return Err(quire_backend::Error::new(
                quire_backend::Op::Publish,
                write.path.as_str(),
                quire_backend::ErrorKind::Conflict,
                format!("the policy reads {:?}", policy.content),
            ));
        }
        Ok(())
    }
}

/// A policy published a moment earlier, whose slot is still being created (its body inline
/// in that slot, no blob of it anywhere), reads as published in the next write's
/// precondition, not as a missing blob.
#[tokio::test(start_paused = true)]
async fn a_precondition_reads_a_version_still_being_committed() {
    use quire_blob::{LatencyProfile, Op as BlobOp, Simulated};

    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let slow = Arc::new(Simulated::new(memory, 1));
    let store = BucketStore::open(slow.clone(), options("w/"))
        .await
        .unwrap();
    slow.set_latency(
        BlobOp::Create,
        LatencyProfile::Fixed(Duration::from_millis(50)),
    );
    let policy = tokio::spawn({
        let store = store.clone();
        async move { publish(&store, "/policy.md", "strict").await }
    });
    // The policy's slot create is in flight when the guarded write is built.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let guarded = WriteRequest {
        precondition: Some(Arc::new(ReadsPolicy)),
        ..WriteRequest::new("/a.md", "guarded")
    };
    let written = store.publish(&Ctx::new(), guarded).await;
    let policy = policy.await.unwrap();
    let written = written.expect("the precondition reads the policy being committed");
    assert_eq!(written.version, 1);
    assert_eq!(policy.content, "strict");
    store.close().await;
}

/// Blob requests over hours of a paused clock.
#[tokio::test(start_paused = true)]
async fn an_idle_world_makes_no_bucket_request_and_a_watched_one_probes_at_most_every_poll() {
    use quire_backend::ChangeSource;
    use quire_backend::bucket::FOLLOW_POLL;

    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let metered = Arc::new(Metered::new(memory.clone()));
    let store = BucketStore::open(
        metered.clone(),
        BucketOptions {
            // Production values, but two slots make a checkpoint due.
            compaction: Some(CompactionPolicy {
                slots: 2,
                ..CompactionPolicy::default()
            }),
            change_ring: 16,
            ..options("w/")
        },
    )
    .await
    .unwrap();
    const HOUR: Duration = Duration::from_secs(3600);

    // Freshly created, nobody asks, nobody watches.
    let before = metered.reading();
    tokio::time::sleep(HOUR).await;
    let idle = metered.reading().since(&before);
    assert_eq!(idle.total_requests(), 0, "a new idle world: {idle:?}");

    // After writes, the compactor folds them once, then the world rests again.
    publish(&store, "/a.md", "one").await;
    publish(&store, "/b.md", "two").await;
    let mut steps = store.compaction_steps().unwrap();
    tokio::time::timeout(
        HOUR,
        steps.wait_for(|step| matches!(step, Some(Step::Written { .. }))),
    )
    .await
    .expect("the writes are checkpointed")
    .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let before = metered.reading();
    tokio::time::sleep(HOUR).await;
    let idle = metered.reading().since(&before);
    assert_eq!(
        idle.total_requests(),
        0,
        "an idle world after writes: {idle:?}"
    );

    // A watcher: one probe of the tip per poll, nothing else.
    let hub = store.changes().unwrap();
    let watch = hub.watch_head();
    let before = metered.reading();
    tokio::time::sleep(HOUR).await;
    let reading = metered.reading().since(&before);
    let polls = HOUR.as_secs() / FOLLOW_POLL.as_secs();
    assert!(
        reading.total_requests() <= polls,
        "{} requests in an hour with a watcher (at most {polls}): {reading:?}",
        reading.total_requests()
    );
    drop(watch);
    store.close().await;
}
