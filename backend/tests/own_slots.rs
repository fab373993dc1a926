//! A store never downloads a slot it created: its compactor and its change feed take its
//! own slots (and the peers' slots its committer already read) from memory. Every read of
//! the bucket goes through a simulated store whose call logs keep the key of each object
//! read and each listing, and the blob counters of [`quire_blob::Metered`] agree.

use std::sync::Arc;
use std::time::Duration;

use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::{ChangeSource, Ctx, Store, WriteRequest};
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Calls, Metered, Op, Simulated};
use quire_checkpoint::{CompactionPolicy, Step};
use quire_log::{ManualClock, StoreId, Timestamp, keys, tip};

const PREFIX: &str = "w/";
const OWN: StoreId = StoreId([1; 16]);
const PEER: StoreId = StoreId([2; 16]);

/// Records, through a simulated store, the keys of the objects a store read whole or by
/// range (found ones only: a probe of an absent name downloads nothing) and the prefixes it
/// listed.
struct Recorder {
    store: Arc<Simulated>,
    reads: Calls,
    listings: Calls,
}

impl Recorder {
    fn new(inner: Arc<dyn BlobStore>) -> Recorder {
        let store = Arc::new(Simulated::new(inner, 0));
        Recorder {
            reads: store.calls(&[Op::Get, Op::GetRange], ""),
            listings: store.calls(&[Op::List], ""),
            store,
        }
    }

    /// The sequences of the slots read.
    fn slots_read(&self) -> Vec<u64> {
        self.reads
            .answered()
            .iter()
            .filter_map(|key| keys::parse_slot_key(PREFIX, key))
            .collect()
    }

    fn log_listings(&self) -> usize {
        let log = keys::log_prefix(PREFIX);
        self.listings.keys().iter().filter(|p| **p == log).count()
    }
}

fn options(
    store: StoreId,
    compaction: Option<CompactionPolicy>,
    change_ring: usize,
) -> BucketOptions {
    BucketOptions {
        prefix: PREFIX.into(),
        clock: Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        compaction,
        compact_every: Duration::from_secs(5),
        change_ring,
        seed: 7,
        store: Some(store),
        ..BucketOptions::default()
    }
}

/// Checkpoints whatever slot is pending at each step, without a delay.
fn eager() -> CompactionPolicy {
    CompactionPolicy {
        slots: 1,
        max_delay: Duration::ZERO,
        ..CompactionPolicy::default()
    }
}

async fn publish(store: &BucketStore, path: &str, body: &str) {
    store
        .publish(&Ctx::new(), WriteRequest::new(path, body.to_owned()))
        .await
        .unwrap();
}

/// Waits for the compactor to write a checkpoint at `sequence`.
async fn checkpointed(store: &BucketStore, sequence: u64) {
    let mut steps = store.compaction_steps().expect("a compactor runs");
    steps
        .wait_for(|step| matches!(step, Some(Step::Written { sequence: s, .. }) if *s == sequence))
        .await
        .unwrap();
}

/// The store id of every slot in the bucket, by sequence.
async fn writers(bucket: &dyn BlobStore) -> Vec<(u64, StoreId)> {
    let mut out = Vec::new();
    for attrs in quire_blob::list_all(bucket, &keys::log_prefix(PREFIX), "")
        .await
        .unwrap()
    {
        let first = keys::parse_slot_key(PREFIX, &attrs.key).unwrap();
        let slot = tip::read_slot(bucket, PREFIX, first)
            .await
            .unwrap()
            .unwrap();
        out.push((first, slot.slot.store));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_lone_store_reads_none_of_its_slots_back() {
    let bucket: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let recorder = Recorder::new(bucket.clone());
    let metered = Metered::new(recorder.store.clone());
    let store = BucketStore::open(Arc::new(metered.clone()), options(OWN, Some(eager()), 64))
        .await
        .unwrap();
    let hub = store.changes().expect("a change hub");
    let start = hub.head();
    // A watcher follows the feed throughout.
    let mut head = hub.watch_head();
    let before = metered.reading();
    let writes = 24;
    for i in 0..writes {
        publish(
            &store,
            &format!("/notes/{}.md", i % 5),
            &format!("write {i}"),
        )
        .await;
    }
    let end = start + writes;
    checkpointed(&store, end).await;
    head.wait_for(|h| *h >= end).await.unwrap();

    let events = hub.since(start).unwrap();
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (start + 1..=end).collect::<Vec<_>>());
    assert_eq!(
        events.last().map(|e| e.path.to_string()),
        Some(format!("/notes/{}.md", (writes - 1) % 5))
    );
    assert_eq!(
        recorder.slots_read(),
        Vec::<u64>::new(),
        "own slots downloaded"
    );
    assert_eq!(recorder.log_listings(), 0, "the log was listed");
    let reads = metered.reading().since(&before);
    // What was downloaded is what the checkpoint run read of its own objects, if anything:
    // far below what the slots weigh.
    assert!(
        reads.bytes_down * 20 <= reads.bytes_up,
        "downloaded {} of {} uploaded",
        reads.bytes_down,
        reads.bytes_up
    );
    store.close().await;
}

#[tokio::test(start_paused = true)]
async fn with_a_peer_writing_only_the_peers_slots_are_read() {
    let bucket: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let recorder = Recorder::new(bucket.clone());
    let store = BucketStore::open(recorder.store.clone(), options(OWN, Some(eager()), 64))
        .await
        .unwrap();
    let peer = BucketStore::open(bucket.clone(), options(PEER, None, 0))
        .await
        .unwrap();
    let hub = store.changes().expect("a change hub");
    let start = hub.head();
    let mut head = hub.watch_head();
    for i in 0..8 {
        publish(&store, &format!("/own/{}.md", i % 3), &format!("own {i}")).await;
        publish(&peer, &format!("/peer/{}.md", i % 3), &format!("peer {i}")).await;
    }
    // The store's last write reads the peer's last slot before it commits.
    publish(&store, "/own/last.md", "last").await;
    let end = start + 17;
    checkpointed(&store, end).await;
    head.wait_for(|h| *h >= end).await.unwrap();
    let events = hub.since(start).unwrap();
    assert_eq!(events.len(), 17);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.path.as_str().starts_with("/peer/"))
            .count(),
        8
    );

    let writers = writers(bucket.as_ref()).await;
    let by = |first: u64| writers.iter().find(|(s, _)| *s == first).map(|(_, w)| *w);
    let read = recorder.slots_read();
    assert!(!read.is_empty(), "the peer's slots were never read");
    for first in &read {
        assert_eq!(by(*first), Some(PEER), "slot {first} read back: {read:?}");
    }
    let mut peers: Vec<u64> = read.clone();
    peers.sort_unstable();
    peers.dedup();
    let expected: Vec<u64> = writers
        .iter()
        .filter(|(s, w)| *w == PEER && *s > start)
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(peers, expected, "each peer slot read");
    store.close().await;
    peer.close().await;
}
