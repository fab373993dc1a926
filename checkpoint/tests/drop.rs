//! Dropping old checkpoints: what is kept under the grace, after a crash, reused shards, the
//! generation fence; and the compactor's choices between writing, adopting and deferring.
#![allow(
    clippy::disallowed_methods,
    reason = "the drop grace is checked against the bucket's real stamps"
)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use quire_blob::{BlobStore, Fault, FaultRule, Op as BlobOp, Simulated};
use quire_checkpoint::drop::drop_old;
use quire_checkpoint::keys::{root_key, shard_key};
use quire_checkpoint::objects::{Fence, Put, put};
use quire_checkpoint::{CompactionPolicy, Compactor, Op, OpenOptions, Replica, Step, state_digest};
use quire_log::marker::GENESIS_SEQUENCE;
use quire_log::{Hash, ManualClock, Timestamp};

const GRACE: Duration = Duration::from_secs(3600);
const FRESHEN: Duration = Duration::from_secs(1800);

/// Opens a replica; on a store without unique generations its checkpoints settle for a
/// moment rather than two minutes (the race tests order the drop with holds instead).
async fn open(store: &Arc<dyn BlobStore>) -> Replica {
    let options = OpenOptions {
        settle: Duration::from_millis(10),
        ..OpenOptions::default()
    };
    Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap()
}

/// A world of 600 documents with seven checkpoints (zero and six written), each after a few
/// changes.
async fn checkpointed(store: Arc<dyn BlobStore>) -> SlotWriter {
    checkpointed_with_laggard(store, None).await.0
}

/// [`checkpointed`], and when a clock is given a laggard: a replica on that clock opened
/// when the log reached the second checkpoint's sequence and never caught up since, so a
/// checkpoint it writes is the second checkpoint again.
async fn checkpointed_with_laggard(
    store: Arc<dyn BlobStore>,
    laggard_clock: Option<Arc<ManualClock>>,
) -> (SlotWriter, Option<Replica>) {
    // With a laggard every round rewrites the same two documents, so each checkpoint's top
    // shards hold versions no later checkpoint holds.
    let churn = laggard_clock.is_some();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    for chunk in 0..3 {
        let slot: Vec<_> = (0..200)
            .map(|i| publish(&format!("/d/{}.md", chunk * 200 + i), "first\n"))
            .collect();
        writer.commit(&slot).await;
    }
    let mut replica = open(&store).await;
    let mut laggard = None;
    for r in 0..6 {
        for i in 0..2 {
            writer
                .commit(&[publish(
                    &format!("/d/{}.md", if churn { i } else { (r * 3 + i) % 40 }),
                    &format!("r{r} i{i}\n"),
                )])
                .await;
        }
        if r == 0
            && let Some(clock) = &laggard_clock
        {
            let options = OpenOptions {
                clock: clock.clone(),
                settle: Duration::from_millis(10),
                ..OpenOptions::default()
            };
            laggard = Some(
                Replica::open(store.clone(), PREFIX, &options)
                    .await
                    .unwrap(),
            );
        }
        replica.catch_up().await.unwrap();
        replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    }
    (writer, laggard)
}

/// Shards and root of every checkpoint, by sequence.
async fn references(store: &Arc<dyn BlobStore>) -> Vec<(u64, Hash, HashSet<Hash>)> {
    let mut out = Vec::new();
    for (sequence, _) in quire_checkpoint::replica::list_checkpoints(&**store, PREFIX, Op::Drop)
        .await
        .unwrap()
    {
        let options = OpenOptions {
            checkpoint: Some(sequence),
            ..OpenOptions::default()
        };
        let base = Replica::open(store.clone(), PREFIX, &options)
            .await
            .unwrap()
            .base()
            .clone();
        let shards = base
            .root
            .tiers
            .iter()
            .flat_map(|t| t.shards.iter().flatten().copied())
            .collect();
        out.push((sequence, base.checkpoint.root, shards));
    }
    out
}

async fn exists(store: &Arc<dyn BlobStore>, key: &str) -> bool {
    store.head(key).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_keeps_the_newest_three_and_whatever_the_grace_protects() {
    let store = memory();
    let writer = checkpointed(store.clone()).await;
    let before = references(&store).await;
    assert_eq!(before.len(), 7);

    let now = SystemTime::now();
    let report = drop_old(&*store, PREFIX, WORLD, 3, GRACE, now)
        .await
        .unwrap();
    assert!(
        report.dropped.is_empty(),
        "every successor is younger than the grace"
    );
    assert_eq!(report.kept.len(), 7);

    let later = now + 2 * GRACE;
    let report = drop_old(&*store, PREFIX, WORLD, 3, GRACE, later)
        .await
        .unwrap();
    let sequences: Vec<u64> = before.iter().map(|(s, _, _)| *s).collect();
    // The genesis checkpoint is kept: a whole replay can always be asked for.
    assert_eq!(report.dropped, sequences[1..4]);
    assert_eq!(report.kept[0], sequences[0]);
    assert_eq!(report.kept[1..], sequences[4..]);
    assert!(report.deleted > 0);

    let kept_shards: HashSet<Hash> = before[4..]
        .iter()
        .flat_map(|(_, _, s)| s.iter().copied())
        .collect();
    let reused: Vec<&Hash> = before[..4]
        .iter()
        .flat_map(|(_, _, s)| s.iter())
        .filter(|h| kept_shards.contains(h))
        .collect();
    assert!(
        !reused.is_empty(),
        "some dropped checkpoint shares a shard with a kept one"
    );
    for (_, root, shards) in &before[4..] {
        assert!(exists(&store, &root_key(PREFIX, root)).await);
        for shard in shards {
            assert!(
                exists(&store, &shard_key(PREFIX, shard)).await,
                "kept shard {shard}"
            );
        }
    }
    for (_, root, shards) in &before[1..4] {
        assert!(!exists(&store, &root_key(PREFIX, root)).await);
        for shard in shards.iter().filter(|h| !kept_shards.contains(h)) {
            assert!(!exists(&store, &shard_key(PREFIX, shard)).await);
        }
    }
    let cold = open(&store).await;
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
    let replayed = Replica::open(
        store.clone(),
        PREFIX,
        &OpenOptions {
            checkpoint: Some(GENESIS_SEQUENCE),
            ..OpenOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(replayed.base().sequence(), GENESIS_SEQUENCE);
    assert_eq!(state_digest(replayed.state()), state_digest(&writer.state));
}

#[tokio::test(start_paused = true)]
async fn a_drop_cut_short_is_finished_by_the_next() {
    let memory = memory();
    let simulated = Arc::new(Simulated::new(memory.clone(), 3));
    let store: Arc<dyn BlobStore> = simulated.clone();
    let writer = checkpointed(store.clone()).await;
    let later = SystemTime::now() + 2 * GRACE;
    let fault = simulated
        .add_fault(FaultRule::new(BlobOp::Delete, "w/roots/", Fault::Unavailable).on_call(2));
    // A refused delete does not stop the drop: its root, and the checkpoint naming it,
    // are left for the next.
    let report = drop_old(&*store, PREFIX, WORLD, 3, GRACE, later)
        .await
        .unwrap();
    assert_eq!(report.dropped.len(), 2, "{report:?}");
    assert!(report.spared >= 1, "{report:?}");
    simulated.remove_fault(fault);
    let listed = quire_blob::list_all(&*store, "w/checkpoints/", "")
        .await
        .unwrap();
    assert_eq!(listed.len(), 5, "one dropped checkpoint is left");
    let cold = open(&store).await;
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));

    let report = drop_old(&*store, PREFIX, WORLD, 3, GRACE, later)
        .await
        .unwrap();
    assert!(!report.dropped.is_empty());
    let left = references(&store).await;
    assert_eq!(left.len(), 4, "the genesis and the newest three");
    let kept_roots: HashSet<String> = left.iter().map(|(_, r, _)| root_key(PREFIX, r)).collect();
    let roots: HashSet<String> = quire_blob::list_all(&*store, "w/roots/", "")
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.key)
        .collect();
    assert_eq!(roots, kept_roots, "no root of a dropped checkpoint is left");
}

#[tokio::test(start_paused = true)]
async fn a_drop_reads_through_throttling() {
    let memory = memory();
    let simulated = Arc::new(Simulated::new(memory.clone(), 5));
    let store: Arc<dyn BlobStore> = simulated.clone();
    checkpointed(store.clone()).await;
    let later = SystemTime::now() + 2 * GRACE;
    for (op, under) in [
        (BlobOp::Get, "w/checkpoints/"),
        (BlobOp::Get, "w/roots/"),
        (BlobOp::Head, "w/shards/"),
    ] {
        simulated.add_fault(FaultRule::new(op, under, Fault::Throttled).first(2));
    }
    let report = drop_old(&*store, PREFIX, WORLD, 3, GRACE, later)
        .await
        .unwrap();
    assert_eq!(report.dropped.len(), 3, "{report:?}");
    assert_eq!(
        references(&store).await.len(),
        4,
        "the genesis and the newest three"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_shard_rewritten_during_a_drop_survives_it() {
    let aged = Arc::new(Aged::new(memory()));
    let simulated = Arc::new(Simulated::new(aged.clone(), 5));
    let store: Arc<dyn BlobStore> = simulated.clone();
    checkpointed(store.clone()).await;
    let before = references(&store).await;
    let kept_shards: HashSet<Hash> = before[4..]
        .iter()
        .flat_map(|(_, _, s)| s.iter().copied())
        .collect();
    let doomed: Vec<Hash> = before[..4]
        .iter()
        .flat_map(|(_, _, s)| s.iter().copied())
        .filter(|h| !kept_shards.contains(h))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    assert!(!doomed.is_empty());

    // Two hours pass: what the checkpoints wrote is past the grace.
    let later = SystemTime::now() + 2 * GRACE;
    aged.set_now(later);
    let hold = simulated.hold(BlobOp::Delete, "w/shards/");
    let dropping = {
        let store = store.clone();
        tokio::spawn(async move { drop_old(&*store, PREFIX, WORLD, 3, GRACE, later).await })
    };
    hold.wait_held(1).await;
    hold.stop_catching();
    // A checkpoint being written now reuses these shards: the fence rewrites them first.
    let fence = Fence::new(later, GRACE / 2);
    for hash in &doomed {
        let key = shard_key(PREFIX, hash);
        let bytes = store.get(&key).await.unwrap().data;
        assert_eq!(
            put(&*store, &key, bytes, &fence, Op::Write).await.unwrap(),
            Put::Freshened
        );
    }
    hold.release();
    let report = dropping.await.unwrap().unwrap();
    assert!(report.spared >= 1, "{report:?}");
    for hash in &doomed {
        // The held delete met a new generation; every later one found the shard young.
        assert!(
            exists(&store, &shard_key(PREFIX, hash)).await,
            "freshened shard {hash} was deleted"
        );
    }
}

/// The drop race with a real writer: a replica that fell behind writes a checkpoint (the
/// second one again, byte for byte) while a drop is deleting that very checkpoint's shards.
/// Its write reuses and freshens them; afterwards every object its new base names exists,
/// and the checkpoint it writes next (carrying those shards) opens. Where generations are
/// unique the held delete meets a new generation; where they are not (S3), the delete lands
/// while the writer lets its objects settle, and the writer creates the shard again.
async fn a_checkpoint_rewritten_during_a_drop_keeps_what_it_names(bucket: Arc<dyn BlobStore>) {
    let aged = Arc::new(Aged::new(bucket));
    let simulated = Arc::new(Simulated::new(aged.clone(), 11));
    let store: Arc<dyn BlobStore> = simulated.clone();
    let later = SystemTime::now() + 2 * GRACE;
    let clock = Arc::new(ManualClock::new(Timestamp(
        later.duration_since(UNIX_EPOCH).unwrap().as_secs(),
    )));
    let (writer, laggard) = checkpointed_with_laggard(store.clone(), Some(clock)).await;
    let mut laggard = laggard.unwrap();
    let before = references(&store).await;
    let (second, _, second_shards) = before[1].clone();
    assert_eq!(laggard.state().sequence(), second);
    let kept_shards: HashSet<Hash> = before[2..]
        .iter()
        .flat_map(|(_, _, s)| s.iter().copied())
        .collect();
    assert!(
        second_shards.iter().any(|h| !kept_shards.contains(h)),
        "the second checkpoint has shards no kept one names"
    );

    // Two hours pass. Keeping five drops only the second checkpoint: its own shards are
    // what it deletes.
    aged.set_now(later);
    let hold_delete = simulated.hold(BlobOp::Delete, "w/shards/");
    let dropping = {
        let store = store.clone();
        tokio::spawn(async move { drop_old(&*store, PREFIX, WORLD, 5, GRACE, later).await })
    };
    hold_delete.wait_held(1).await;
    hold_delete.stop_catching();
    // The hold, not the settle time, orders the race here: the writer's settling read of
    // the very shard whose delete is parked waits until that delete landed (its reads of
    // other shards may run at any time).
    let deleted = hold_delete
        .first_key()
        .expect("a delete is parked")
        .to_owned();
    let job = laggard.prepare(FRESHEN).with_settle(Duration::ZERO);
    let hold_head = simulated.hold(BlobOp::Head, deleted);
    let mut running = tokio::spawn(job.run());
    let finished = tokio::select! {
        written = &mut running => Some(written),
        () = hold_head.wait_held(1) => None,
    };
    let written = match finished {
        Some(written) => {
            // Nothing settled (generations are unique): the write is done, then the drop.
            hold_head.release();
            hold_delete.release();
            dropping.await.unwrap().unwrap();
            written
        }
        None => {
            // The writer is settling what it wrote: the drop's delete lands now.
            hold_head.stop_catching();
            hold_delete.release();
            dropping.await.unwrap().unwrap();
            hold_head.release();
            running.await
        }
    };
    let written = written.unwrap().unwrap().unwrap();
    assert_eq!(written.base.sequence(), second);
    assert!(written.stats.freshened > 0, "{:?}", written.stats);
    if !store.unique_generations() {
        assert!(written.stats.recreated >= 1, "{:?}", written.stats);
    }
    laggard.install(written).unwrap();
    for shard in &second_shards {
        assert!(
            exists(&store, &shard_key(PREFIX, shard)).await,
            "shard {shard} of the laggard's base is gone"
        );
    }
    laggard.catch_up().await.unwrap();
    laggard.checkpoint(FRESHEN).await.unwrap().unwrap();
    let next = laggard.base().sequence();
    let options = OpenOptions {
        checkpoint: Some(next),
        ..OpenOptions::default()
    };
    let cold = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_rewritten_during_a_drop_keeps_what_it_names_on_memory() {
    a_checkpoint_rewritten_during_a_drop_keeps_what_it_names(memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_rewritten_during_a_drop_keeps_what_it_names_on_s3() {
    let Some(s3) = s3().await else { return };
    assert!(!s3.unique_generations());
    a_checkpoint_rewritten_during_a_drop_keeps_what_it_names(s3).await;
}

/// A settable clock standing at the wall clock's second (the bucket stamps real time), open
/// options on it, and that second.
fn clock_at_now() -> (Arc<ManualClock>, OpenOptions, u64) {
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let clock = Arc::new(ManualClock::new(Timestamp(start)));
    let options = OpenOptions {
        clock: clock.clone(),
        ..OpenOptions::default()
    };
    (clock, options, start)
}

/// Due every 4 slots (or by age), stepping without a delay.
fn every_four_slots() -> CompactionPolicy {
    CompactionPolicy {
        slots: 4,
        max_delay: Duration::ZERO,
        ..CompactionPolicy::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compactor_writes_adopts_and_defers() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    let (clock, options, _) = clock_at_now();
    let mut a = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    let mut b = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    let policy = every_four_slots();
    let mut ca = Compactor::new(policy.clone(), clock.clone(), 1);
    let mut cb = Compactor::new(policy, clock.clone(), 2);
    async fn slots(writer: &mut SlotWriter, n: usize, tag: &str) {
        for i in 0..n {
            writer
                .commit(&[publish(&format!("/{tag}/{i}.md"), &format!("{tag} {i}\n"))])
                .await;
        }
    }

    slots(&mut writer, 3, "a").await;
    a.catch_up().await.unwrap();
    assert_eq!(
        ca.step(&mut a).await.unwrap(),
        Step::Idle,
        "3 slots are not due"
    );
    clock.advance(61);
    let Step::Written {
        sequence: first, ..
    } = ca.step(&mut a).await.unwrap()
    else {
        panic!("due by age");
    };

    b.catch_up().await.unwrap();
    assert_eq!(cb.step(&mut b).await.unwrap(), Step::Adopted(first));
    assert_eq!(state_digest(b.state()), state_digest(a.state()));

    slots(&mut writer, 5, "b").await;
    b.catch_up().await.unwrap();
    assert!(cb.due(&b));
    assert_eq!(
        cb.step(&mut b).await.unwrap(),
        Step::Deferred(first),
        "a peer checkpointed a moment ago"
    );
    a.catch_up().await.unwrap();
    let Step::Written {
        sequence: second, ..
    } = ca.step(&mut a).await.unwrap()
    else {
        panic!("its own checkpoint does not defer it");
    };
    assert_eq!(cb.step(&mut b).await.unwrap(), Step::Adopted(second));

    clock.advance(600);
    slots(&mut writer, 5, "c").await;
    b.catch_up().await.unwrap();
    let Step::Written {
        sequence: third, ..
    } = cb.step(&mut b).await.unwrap()
    else {
        panic!("the peer's checkpoint is old: this store writes");
    };
    assert_eq!(third, writer.state.sequence());
    let cold = open(&store).await;
    assert_eq!(cold.base().sequence(), third);
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
}

/// A bucket whose clock is a day ahead of the stores' stamps a peer's checkpoint in the
/// future: a store defers to it for the policy's `defer` after first seeing it, not until
/// the local clock catches up with the bucket's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_checkpoint_stamped_ahead_defers_only_for_the_policy() {
    let start = 1_767_225_600;
    let bucket_time = UNIX_EPOCH + Duration::from_secs(start + 86_400);
    let store: Arc<dyn BlobStore> = Arc::new(quire_blob::memory::MemoryStore::with_clock(
        Arc::new(move || bucket_time),
    ));
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    let clock = Arc::new(ManualClock::new(Timestamp(start)));
    let options = OpenOptions {
        clock: clock.clone(),
        ..OpenOptions::default()
    };
    let mut peer = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    let mut ours = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    let policy = CompactionPolicy {
        slots: 2,
        max_delay: Duration::ZERO,
        ..CompactionPolicy::default()
    };
    let defer = policy.defer.as_secs();
    let mut compactor = Compactor::new(policy, clock.clone(), 1);
    for i in 0..2 {
        writer
            .commit(&[publish(&format!("/p/{i}.md"), "peer\n")])
            .await;
    }
    peer.catch_up().await.unwrap();
    peer.checkpoint(FRESHEN).await.unwrap().expect("written");
    let peers = peer.base().sequence();
    for i in 0..2 {
        writer
            .commit(&[publish(&format!("/o/{i}.md"), "ours\n")])
            .await;
    }
    ours.catch_up().await.unwrap();
    assert_eq!(
        compactor.step(&mut ours).await.unwrap(),
        Step::Adopted(peers)
    );
    ours.catch_up().await.unwrap();
    assert_eq!(
        compactor.step(&mut ours).await.unwrap(),
        Step::Deferred(peers),
        "the peer checkpointed a moment ago"
    );
    clock.advance(defer + 1);
    let Step::Written { sequence, .. } = compactor.step(&mut ours).await.unwrap() else {
        panic!("deferred past the policy: the bucket's clock is ahead, not the peer busy");
    };
    assert_eq!(sequence, writer.state.sequence());
}

/// A busy store's compactor checkpoints the state at the newest history-epoch cut: every
/// last block is in a pack, none stored alone for the open epoch, and the slots after the
/// cut wait a full age before they are due by age. With no epoch ended since its base, it
/// checkpoints the current state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compactor_checkpoints_at_the_newest_epoch_cut() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    let epoch = SMALL_WIDTHS[1];
    let (clock, options, start) = clock_at_now();
    let mut replica = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    let policy = every_four_slots();
    let mut compactor = Compactor::new(policy, clock.clone(), 1);
    // Slots of 7 until two epochs ended and a slot lies past the second one's cut.
    let (mut cut, mut n) = (0, 0);
    while cut == 0 || writer.state.sequence() == cut {
        let before = writer.state.sequence();
        let slot: Vec<_> = (0..7)
            .map(|i| publish(&format!("/d/{}.md", n * 7 + i), "text\n"))
            .collect();
        writer.commit(&slot).await;
        n += 1;
        let now = writer.state.sequence();
        if now / epoch > before / epoch && now / epoch >= 2 {
            cut = now;
        }
    }
    assert!(writer.state.sequence() > cut);
    replica.catch_up().await.unwrap();
    let Step::Written {
        sequence, stats, ..
    } = compactor.step(&mut replica).await.unwrap()
    else {
        panic!("due by slots");
    };
    assert_eq!(sequence, cut, "checkpointed at the epoch cut");
    assert_eq!(
        stats.blocks, stats.packs,
        "no block stored alone: {stats:?}"
    );
    let cold = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    assert_eq!(cold.base().sequence(), cut);
    assert!(cold.slots_since_base() > 0);
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
    assert_eq!(
        replica.pending_since(),
        Some(Timestamp(start)),
        "counted from now"
    );
    assert_eq!(compactor.step(&mut replica).await.unwrap(), Step::Idle);

    // No epoch ends before the next age: the current state.
    clock.advance(61);
    let Step::Written {
        sequence, stats, ..
    } = compactor.step(&mut replica).await.unwrap()
    else {
        panic!("due by age");
    };
    assert_eq!(sequence, writer.state.sequence());
    assert!(
        stats.blocks > stats.packs,
        "the open epoch's blocks: {stats:?}"
    );
    let cold = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
}
