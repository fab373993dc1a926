//! A replica taking slots from a ring of recent slots (what its store's committer created or
//! read): slots the ring holds are applied without a request, slots it lost are read from
//! the bucket, and either way the replica reaches the state and checkpoint a replay of the
//! bucket reaches.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{PREFIX, SMALL_WIDTHS, SlotWriter, memory, new_world, publish};
use quire_blob::{Metered, Op};
use quire_checkpoint::{OpenOptions, Replica, state_digest};
use quire_log::recent::RecentSlots;

const FRESHEN: Duration = Duration::from_secs(1800);

async fn open(store: Arc<dyn quire_blob::BlobStore>, checkpoint: Option<u64>) -> Replica {
    let options = OpenOptions {
        checkpoint,
        // These tests count the slots a replica reads, not history read ahead.
        read_history_ahead: false,
        ..OpenOptions::default()
    };
    Replica::open(store, PREFIX, &options).await.unwrap()
}

/// Commits `slots` slots of one or two rewrites each, publishing each into `ring`.
async fn write(writer: &mut SlotWriter, ring: &RecentSlots, slots: u64) {
    for i in 0..slots {
        let first = publish(&format!("/notes/{}.md", i % 11), &format!("rewrite {i}"));
        let slot = if i % 3 == 0 {
            let second = publish(&format!("/other/{}.md", i % 5), &format!("and {i}"));
            writer.commit(&[first, second]).await
        } else {
            writer.commit(&[first]).await
        };
        ring.publish(&slot);
    }
}

#[tokio::test]
async fn held_slots_cost_no_request_and_a_lossy_ring_reaches_the_replayed_checkpoint() {
    let bucket = memory();
    let mut writer = new_world(bucket.clone(), SMALL_WIDTHS).await;
    let metered = Metered::new(bucket.clone());
    let mut replica = open(Arc::new(metered.clone()), None).await;

    // Every slot held: the catch-up is free, and the state is the writer's.
    let whole = Arc::new(RecentSlots::new(1024, 1 << 20));
    replica.set_recent(whole.clone());
    write(&mut writer, &whole, 40).await;
    let before = metered.reading();
    assert_eq!(replica.catch_up().await.unwrap(), 40);
    let reads = metered.reading().since(&before);
    assert_eq!(reads.total_requests(), 0, "{reads:?}");
    assert_eq!(state_digest(replica.state()), state_digest(&writer.state));
    // Caught up with everything the ring knows: nothing is looked at.
    assert_eq!(replica.catch_up().await.unwrap(), 0);
    assert_eq!(metered.reading().since(&before).total_requests(), 0);
    replica.checkpoint(FRESHEN).await.unwrap().unwrap();

    // A ring of 8 slots that lost the rest (crossing the small tiers' grid points): only the
    // lost slots are read, once each, and the ring's are taken from memory.
    let lossy = Arc::new(RecentSlots::new(8, 1 << 20));
    replica.set_recent(lossy.clone());
    let from = replica.state().sequence();
    write(&mut writer, &lossy, 100).await;
    assert_eq!(lossy.held().0, 8);
    let held_from = (from + 1..)
        .find(|s| lossy.slot(*s).is_some())
        .expect("the ring holds slots");
    let lost = quire_blob::list_all(bucket.as_ref(), &format!("{PREFIX}log/"), "")
        .await
        .unwrap()
        .iter()
        .filter_map(|a| quire_log::keys::parse_slot_key(PREFIX, &a.key))
        .filter(|s| *s > from && *s < held_from)
        .count() as u64;
    assert_eq!(lost, 92);
    let before = metered.reading();
    assert_eq!(replica.catch_up().await.unwrap(), 100);
    let reads = metered.reading().since(&before);
    assert_eq!(reads.requests(Op::Get), lost, "{reads:?}");
    assert_eq!(reads.requests(Op::List), 1, "{reads:?}");
    assert_eq!(state_digest(replica.state()), state_digest(&writer.state));

    // The checkpoint it writes is the one a replay of the whole log from the bucket holds.
    replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let written = replica.base().sequence();
    assert_eq!(written, writer.state.sequence());
    let replayed = open(bucket.clone(), Some(1)).await;
    let loaded = open(bucket.clone(), Some(written)).await;
    assert_eq!(
        state_digest(replayed.state()),
        state_digest(replica.state())
    );
    assert_eq!(state_digest(loaded.state()), state_digest(replayed.state()));
    let unringed = open(bucket.clone(), Some(1)).await;
    let job = unringed.prepare(FRESHEN).run().await.unwrap().unwrap();
    assert!(
        !job.stats.own,
        "a replay's checkpoint at the same sequence is byte-identical: {:?}",
        job.stats
    );
}

#[tokio::test]
async fn a_ring_behind_or_empty_leaves_the_replica_to_the_bucket() {
    let bucket = memory();
    let mut writer = new_world(bucket.clone(), SMALL_WIDTHS).await;
    let metered = Metered::new(bucket.clone());
    let mut replica = open(Arc::new(metered.clone()), None).await;
    let ring = Arc::new(RecentSlots::new(1024, 1 << 20));
    replica.set_recent(ring.clone());
    // Slots the ring never saw (a peer's, or a restarted store's): read from the bucket.
    let unseen = RecentSlots::new(0, 0);
    write(&mut writer, &unseen, 5).await;
    let before = metered.reading();
    assert_eq!(replica.catch_up().await.unwrap(), 5);
    assert!(metered.reading().since(&before).requests(Op::Get) >= 5);
    assert_eq!(state_digest(replica.state()), state_digest(&writer.state));
}
