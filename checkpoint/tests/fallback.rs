//! A bad checkpoint costs only replay: cold start falls back to the next older checkpoint
//! (down to genesis) when the newest is incomplete or damaged, and the compactor passes over
//! a checkpoint it cannot adopt and writes one at a later sequence.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use quire_blob::BlobStore;
use quire_checkpoint::keys::{checkpoint_key, shard_key};
use quire_checkpoint::{CompactionPolicy, Compactor, OpenOptions, Replica, Step, state_digest};
use quire_log::{Hash, SystemClock};

const FRESHEN: Duration = Duration::from_secs(1800);

#[derive(Clone, Copy, Debug)]
enum Damage {
    /// One shard of the newest checkpoint is deleted.
    DeleteShard,
    /// One shard of the newest checkpoint holds other bytes.
    CorruptShard,
    /// The newest checkpoint object itself holds other bytes.
    CorruptCheckpoint,
}

async fn open(store: &Arc<dyn BlobStore>) -> Replica {
    Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap()
}

fn shards(replica: &Replica) -> HashSet<Hash> {
    replica
        .base()
        .root
        .tiers
        .iter()
        .flat_map(|t| t.shards.iter().flatten().copied())
        .collect()
}

async fn overwrite(store: &Arc<dyn BlobStore>, key: &str, bytes: &'static [u8]) {
    let attrs = store.head(key).await.unwrap();
    store
        .replace(key, &attrs.generation, Bytes::from_static(bytes))
        .await
        .unwrap();
}

/// A world with an older checkpoint, a newest one damaged as `damage` says (in an object the
/// older does not name) and a slot after it. Returns the writer, the older checkpoint's
/// sequence, the newest's, and a replica that rested on the older one before the newest was
/// written.
async fn damaged_world(
    store: &Arc<dyn BlobStore>,
    damage: Damage,
) -> (SlotWriter, u64, u64, Replica) {
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    for chunk in 0..2 {
        let slot: Vec<_> = (0..150)
            .map(|i| publish(&format!("/d/{}.md", chunk * 150 + i), "first\n"))
            .collect();
        writer.commit(&slot).await;
    }
    let mut first = open(store).await;
    first.checkpoint(FRESHEN).await.unwrap().unwrap();
    let older = first.base().sequence();
    let behind = open(store).await;
    assert_eq!(behind.base().sequence(), older);

    for i in 0..5 {
        writer
            .commit(&[publish(&format!("/d/{i}.md"), "second\n")])
            .await;
    }
    first.catch_up().await.unwrap();
    let older_shards = shards(&first);
    first.checkpoint(FRESHEN).await.unwrap().unwrap();
    let newest = first.base().sequence();
    assert!(newest > older);
    let only_newest = shards(&first)
        .difference(&older_shards)
        .copied()
        .next()
        .expect("the newest checkpoint rewrote a shard");
    let shard = shard_key(PREFIX, &only_newest);
    match damage {
        Damage::DeleteShard => {
            let attrs = store.head(&shard).await.unwrap();
            store.delete(&shard, &attrs.generation).await.unwrap();
        }
        Damage::CorruptShard => overwrite(store, &shard, b"\xa0").await,
        Damage::CorruptCheckpoint => {
            overwrite(store, &checkpoint_key(PREFIX, newest), b"not a checkpoint").await;
        }
    }
    writer
        .commit(&[publish("/after.md", "after the newest\n")])
        .await;
    (writer, older, newest, behind)
}

fn policy() -> CompactionPolicy {
    CompactionPolicy {
        slots: 1,
        max_delay: Duration::ZERO,
        // The older checkpoint was written a moment ago; do not defer to its writer.
        defer: Duration::ZERO,
        ..CompactionPolicy::default()
    }
}

async fn cold_start_falls_back_and_the_compactor_writes_past(damage: Damage) {
    let store = memory();
    let (mut writer, older, newest, _) = damaged_world(&store, damage).await;

    let mut cold = open(&store).await;
    assert_eq!(cold.base().sequence(), older, "{damage:?}");
    assert_eq!(cold.skipped(), [newest], "{damage:?}");
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
    let replayed = Replica::open(
        store.clone(),
        PREFIX,
        &OpenOptions {
            checkpoint: Some(quire_log::marker::GENESIS_SEQUENCE),
            ..OpenOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(state_digest(cold.state()), state_digest(replayed.state()));

    let mut compactor = Compactor::new(policy(), Arc::new(SystemClock), 1);
    let step = compactor.step(&mut cold).await.unwrap();
    let Step::Written { sequence, .. } = step else {
        panic!("{damage:?}: expected a checkpoint past the bad one, got {step:?}");
    };
    assert!(sequence > newest, "{damage:?}");
    assert!(compactor.unadoptable().contains(&newest));
    writer.commit(&[publish("/later.md", "later\n")]).await;

    let healed = open(&store).await;
    assert_eq!(healed.base().sequence(), sequence, "{damage:?}");
    assert!(healed.skipped().is_empty(), "{damage:?}");
    assert_eq!(state_digest(healed.state()), state_digest(&writer.state));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newest_checkpoint_missing_a_shard_costs_only_replay() {
    cold_start_falls_back_and_the_compactor_writes_past(Damage::DeleteShard).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newest_checkpoint_with_corrupt_bytes_costs_only_replay() {
    cold_start_falls_back_and_the_compactor_writes_past(Damage::CorruptShard).await;
    cold_start_falls_back_and_the_compactor_writes_past(Damage::CorruptCheckpoint).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_compactor_passes_over_a_checkpoint_it_cannot_adopt() {
    for damage in [
        Damage::DeleteShard,
        Damage::CorruptShard,
        Damage::CorruptCheckpoint,
    ] {
        let store = memory();
        let (writer, older, newest, mut behind) = damaged_world(&store, damage).await;
        let mut compactor = Compactor::new(policy(), Arc::new(SystemClock), 2);
        behind.catch_up().await.unwrap();
        let step = compactor.step(&mut behind).await.unwrap();
        let Step::Written { sequence, .. } = step else {
            panic!("{damage:?}: expected a checkpoint past the bad one, got {step:?}");
        };
        assert!(sequence > newest, "{damage:?}");
        assert!(compactor.unadoptable().contains(&newest), "{damage:?}");
        assert_eq!(state_digest(behind.state()), state_digest(&writer.state));
        // The refused adoption left the state resting where it was until the write.
        assert!(older < newest);
        let cold = open(&store).await;
        assert_eq!(cold.base().sequence(), sequence, "{damage:?}");
        assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_checkpoint_bad_falls_back_to_genesis() {
    let store = memory();
    let (writer, older, _, _) = damaged_world(&store, Damage::CorruptCheckpoint).await;
    overwrite(&store, &checkpoint_key(PREFIX, older), b"also damaged").await;
    let cold = open(&store).await;
    assert_eq!(cold.base().sequence(), quire_log::marker::GENESIS_SEQUENCE);
    assert_eq!(cold.skipped().len(), 2);
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
}
