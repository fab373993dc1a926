//! Dropping old checkpoints: what is kept under the grace, after a crash, reused shards, the
//! generation fence; and the compactor's choices between writing, adopting and deferring.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use quire_blob::{BlobStore, Fault, FaultRule, Op as BlobOp, Simulated};
use quire_checkpoint::drop::drop_old;
use quire_checkpoint::keys::{root_key, shard_key};
use quire_checkpoint::objects::{Fence, Put, put};
use quire_checkpoint::{Compactor, Op, OpenOptions, Policy, Replica, Step, state_digest};
use quire_log::{Hash, ManualClock, Timestamp};

const GRACE: Duration = Duration::from_secs(3600);
const FRESHEN: Duration = Duration::from_secs(1800);

async fn open(store: &Arc<dyn BlobStore>) -> Replica {
    Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap()
}

/// A world of 600 documents with seven checkpoints (zero and six written), each after a few
/// changes.
async fn checkpointed(store: Arc<dyn BlobStore>) -> Writer {
    let mut writer = Writer::create(store.clone(), SMALL_WIDTHS).await;
    for chunk in 0..3 {
        let slot: Vec<_> = (0..200)
            .map(|i| publish(&format!("/d/{}.md", chunk * 200 + i), "first\n"))
            .collect();
        writer.commit(&slot).await;
    }
    let mut replica = open(&store).await;
    for r in 0..6 {
        for i in 0..2 {
            writer
                .commit(&[publish(
                    &format!("/d/{}.md", (r * 3 + i) % 40),
                    &format!("r{r} i{i}\n"),
                )])
                .await;
        }
        replica.catch_up().await.unwrap();
        replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    }
    writer
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
    assert_eq!(report.dropped, sequences[..4]);
    assert_eq!(report.kept, sequences[4..]);
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
    for (_, root, shards) in &before[..4] {
        assert!(!exists(&store, &root_key(PREFIX, root)).await);
        for shard in shards.iter().filter(|h| !kept_shards.contains(h)) {
            assert!(!exists(&store, &shard_key(PREFIX, shard)).await);
        }
    }
    let cold = open(&store).await;
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
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
    let err = drop_old(&*store, PREFIX, WORLD, 3, GRACE, later)
        .await
        .unwrap_err();
    assert_eq!(err.blob_kind(), Some(quire_blob::ErrorKind::Unavailable));
    simulated.remove_fault(fault);
    let cold = open(&store).await;
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));

    let report = drop_old(&*store, PREFIX, WORLD, 3, GRACE, later)
        .await
        .unwrap();
    assert!(!report.dropped.is_empty());
    let left = references(&store).await;
    assert_eq!(left.len(), 3);
    let kept_roots: HashSet<String> = left.iter().map(|(_, r, _)| root_key(PREFIX, r)).collect();
    let roots: HashSet<String> = quire_blob::list_all(&*store, "w/roots/", "")
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.key)
        .collect();
    assert_eq!(roots, kept_roots, "no root of a dropped checkpoint is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_shard_rewritten_during_a_drop_survives_it() {
    let memory = memory();
    let simulated = Arc::new(Simulated::new(memory.clone(), 5));
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

    let later = SystemTime::now() + 2 * GRACE;
    let hold = simulated.hold(BlobOp::Delete, "w/shards/");
    let dropping = {
        let store = store.clone();
        tokio::spawn(async move { drop_old(&*store, PREFIX, WORLD, 3, GRACE, later).await })
    };
    hold.wait_held(1).await;
    hold.stop_catching();
    // A checkpoint being written now reuses these shards: the fence rewrites them first.
    let fence = Fence {
        now: later,
        freshen_after: GRACE / 2,
    };
    for hash in &doomed {
        let key = shard_key(PREFIX, hash);
        let bytes = store.get(&key).await.unwrap().data;
        assert_eq!(
            put(&*store, &key, bytes, fence, Op::Write).await.unwrap(),
            Put::Freshened
        );
    }
    hold.release();
    let report = dropping.await.unwrap().unwrap();
    assert!(report.spared >= 1, "{report:?}");
    let survivors = futures::future::join_all(doomed.iter().map(|h| {
        let store = store.clone();
        async move { exists(&store, &shard_key(PREFIX, h)).await }
    }))
    .await;
    assert!(
        survivors.iter().any(|s| *s),
        "the delete racing the rewrite failed"
    );
    // The checkpoint whose shard survived is kept for the next drop to resume.
    assert!(report.dropped.len() < 4, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compactor_writes_adopts_and_defers() {
    let store = memory();
    let mut writer = Writer::create(store.clone(), SMALL_WIDTHS).await;
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let clock = Arc::new(ManualClock::new(Timestamp(start)));
    let options = OpenOptions {
        clock: clock.clone(),
        ..OpenOptions::default()
    };
    let mut a = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    let mut b = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    let policy = Policy {
        slots: 4,
        max_delay: Duration::ZERO,
        ..Policy::default()
    };
    let mut ca = Compactor::new(policy.clone(), clock.clone(), 1);
    let mut cb = Compactor::new(policy, clock.clone(), 2);
    async fn slots(writer: &mut Writer, n: usize, tag: &str) {
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
