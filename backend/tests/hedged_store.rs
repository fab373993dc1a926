//! A bucket store that hedges (`BucketOptions::hedge`), as the server opens one on S3 or GCS: a write
//! whose first slot create stalls is finished by the hedge, whether the stalled attempt never
//! reached the bucket or landed and lost its answer.

use std::sync::Arc;
use std::time::Duration;

use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::{Ctx, Store, WriteRequest};
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, HedgeCounts, HedgePolicy, Op, Simulated};
use quire_log::{ManualClock, Timestamp, keys};

const PREFIX: &str = "w/";

fn options() -> BucketOptions {
    BucketOptions {
        prefix: PREFIX.into(),
        clock: Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        compaction: None,
        seed: 7,
        hedge: Some(HedgePolicy::default()),
        ..BucketOptions::default()
    }
}

async fn read(store: &BucketStore, path: &str) -> String {
    let view = store.open_view(&Ctx::new()).await.unwrap();
    view.get(&Ctx::new(), path, 0).await.unwrap().content
}

async fn slots(bucket: &dyn BlobStore) -> usize {
    quire_blob::list_all(bucket, &keys::log_prefix(PREFIX), "")
        .await
        .unwrap()
        .len()
}

fn hedges(store: &BucketStore) -> HedgeCounts {
    store.stats().hedges.expect("the store hedges")
}

/// Publishes `/a.md` while the next slot create is held by `hold` (made on the simulated
/// bucket), and lets later creates pass; returns the hedge counts the write caused.
async fn publish_past(store: &Arc<BucketStore>, hold: quire_blob::Hold) -> HedgeCounts {
    let before = hedges(store);
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .publish(&Ctx::new(), WriteRequest::new("/a.md", "# A\n"))
                .await
        })
    };
    hold.wait_held(1).await;
    hold.stop_catching();
    let written = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the hedge finishes the write while the first attempt is parked")
        .unwrap()
        .unwrap();
    assert_eq!(written.version, 1);
    let after = hedges(store);
    HedgeCounts {
        sent: after.sent - before.sent,
        won: after.won - before.won,
    }
}

async fn open() -> (Arc<dyn BlobStore>, Arc<Simulated>, Arc<BucketStore>) {
    let bucket: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let simulated = Arc::new(Simulated::new(bucket.clone(), 0));
    let store = BucketStore::open(simulated.clone(), options())
        .await
        .unwrap();
    (bucket, simulated, Arc::new(store))
}

/// The first attempt never reached the bucket: the hedge creates the slot and answers first.
#[tokio::test(start_paused = true)]
async fn a_slot_create_stalled_on_the_way_is_finished_by_its_hedge() {
    let (bucket, simulated, store) = open().await;
    let slots_before = slots(&*bucket).await;
    let hold = simulated.hold(Op::Create, keys::log_prefix(PREFIX));
    let counts = publish_past(&store, hold).await;
    assert_eq!((counts.sent, counts.won), (1, 1), "{counts:?}");
    assert_eq!(slots(&*bucket).await, slots_before + 1);
    assert_eq!(read(&store, "/a.md").await, "# A\n");
}

/// The first attempt landed but its answer stalls: the hedge finds the name taken, which
/// may be itself, so the create is ambiguous and the store reads the slot back to decide.
/// The write is acknowledged once, and the log holds one slot for it.
#[tokio::test(start_paused = true)]
async fn a_slot_create_whose_answer_stalls_is_decided_by_reading_back() {
    let (bucket, simulated, store) = open().await;
    let slots_before = slots(&*bucket).await;
    let hold = simulated.hold_response(Op::Create, keys::log_prefix(PREFIX));
    let counts = publish_past(&store, hold).await;
    assert_eq!(counts.sent, 1, "{counts:?}");
    assert_eq!(slots(&*bucket).await, slots_before + 1);
    // The hedge is a request like any other: the meter counts both creates.
    let creates = store.stats().blobs.unwrap().requests(Op::Create);
    assert!(creates >= 2, "{creates}");
    assert_eq!(read(&store, "/a.md").await, "# A\n");
    let next = store
        .publish(&Ctx::new(), WriteRequest::new("/b.md", "# B\n"))
        .await
        .unwrap();
    assert_eq!(next.version, 1);
    assert_eq!(slots(&*bucket).await, slots_before + 2);
    assert_eq!(read(&store, "/a.md").await, "# A\n");
}
