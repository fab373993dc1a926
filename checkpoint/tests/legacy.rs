//! Worlds written by earlier checkpoint formats open, serve every version, are adopted and
//! move to the current schema:
//! - schema 1 (before history packs, `fixtures/schema1-world.bin`): moves at the next
//!   checkpoint; later checkpoints pack ended epochs;
//! - schema 2 (one middle tier, `fixtures/schema2-world.bin`): keeps its middle tier until
//!   its base tier's grid point moves (the replica did not keep the states a run needs
//!   before that), then writes runs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use quire_blob::BlobStore;
use quire_checkpoint::format::{PACKED_SCHEMA, SCHEMA, grid, shard_bits};
use quire_checkpoint::{OpenOptions, Replica, state_digest};
use quire_log::WorldState;

const FRESHEN: Duration = Duration::from_secs(1800);
const FIXTURE: &[u8] = include_bytes!("fixtures/schema1-world.bin");
const SCHEMA_2_FIXTURE: &[u8] = include_bytes!("fixtures/schema2-world.bin");

async fn open(store: &Arc<dyn BlobStore>, checkpoint: Option<u64>) -> Replica {
    let options = OpenOptions {
        checkpoint,
        ..OpenOptions::default()
    };
    Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap()
}

/// Keys of history packs (24 hex digits) under the prefix.
async fn packs(store: &Arc<dyn BlobStore>) -> Vec<String> {
    quire_blob::list_all(&**store, "w/history/", "")
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.key)
        .filter(|k| k.len() == "w/history/".len() + 24)
        .collect()
}

/// A cold start from the newest checkpoint and a whole replay both equal `live`, document by
/// document and version by version; returns the cold-started replica.
async fn agrees_with(store: &Arc<dyn BlobStore>, live: &WorldState) -> Replica {
    let reopened = open(store, None).await;
    assert_eq!(state_digest(reopened.state()), state_digest(live));
    let exported = export_all(store, live).await;
    assert_eq!(export_all(store, reopened.state()).await, exported);
    assert_eq!(
        export_all(store, open(store, Some(1)).await.state()).await,
        exported,
        "a whole replay agrees"
    );
    reopened
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_1_world_opens_is_adopted_and_moves_to_the_current_schema() {
    let store = from_fixture(FIXTURE).await;
    assert!(packs(&store).await.is_empty(), "the fixture predates packs");

    // It opens on its newest checkpoint (schema 1) and equals a replay of its whole log.
    let newest = open(&store, None).await;
    assert_eq!(newest.base().root.sealed, None, "a schema-1 root");
    assert!(
        newest.slots_since_base() > 0,
        "slots after the newest checkpoint replay"
    );
    let replayed = open(&store, Some(1)).await;
    let digest = state_digest(replayed.state());
    assert_eq!(state_digest(newest.state()), digest);
    let every_version = export_all(&store, replayed.state()).await;
    assert!(every_version.iter().any(|d| d.first < d.current));
    assert_eq!(export_all(&store, newest.state()).await, every_version);

    // A replica resting on an older schema-1 checkpoint adopts the newest.
    let listed =
        quire_checkpoint::replica::list_checkpoints(&*store, PREFIX, quire_checkpoint::Op::Load)
            .await
            .unwrap();
    let (older, newest_sequence) = (listed[listed.len() - 2].0, listed[listed.len() - 1].0);
    let mut peer = open(&store, Some(older)).await;
    assert!(peer.adopt(newest_sequence).await.unwrap());
    assert_eq!(state_digest(peer.state()), digest);

    // The next checkpoint writes the current schema (its middle tier was cut at the base
    // tier's grid point): every tier, its shard bits from its own count.
    let mut writer = SlotWriter::resume(store.clone(), replayed.state().clone());
    let mut replica = newest;
    for i in 0..5 {
        writer
            .commit(&[publish(&format!("/docs/{i}.md"), &format!("# moved {i}\n"))])
            .await;
    }
    replica.catch_up().await.unwrap();
    replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let root = &replica.base().root;
    assert_eq!(root.schema(), SCHEMA);
    for tier in &root.tiers {
        assert_eq!(tier.bits, shard_bits(tier.documents), "{root:?}");
    }
    let moved = open(&store, None).await;
    assert_eq!(moved.base().sequence(), replica.base().sequence());
    assert_eq!(state_digest(moved.state()), state_digest(&writer.state));
    let live = export_all(&store, &writer.state).await;
    assert_eq!(export_all(&store, moved.state()).await, live);

    // The peer still on schema 1 adopts the new checkpoint.
    assert!(peer.adopt(replica.base().sequence()).await.unwrap());
    assert_eq!(state_digest(peer.state()), state_digest(&writer.state));

    // Writes that end history epochs (16 sequences with these widths) are packed.
    for r in 0..6 {
        let slot: Vec<_> = (0..8)
            .map(|i| {
                publish(
                    &format!("/docs/{}.md", (r * 3 + i) % 24),
                    &format!("# {r} {i}\n"),
                )
            })
            .collect();
        writer.commit(&slot).await;
    }
    replica.catch_up().await.unwrap();
    let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    assert!(stats.packs > 0, "{stats:?}");
    assert!(!packs(&store).await.is_empty());
    agrees_with(&store, &writer.state).await;
}

/// Commits `n` new documents named after `tag`, `per_slot` to a slot.
async fn write_new(writer: &mut SlotWriter, tag: &str, n: usize, per_slot: usize) {
    for start in (0..n).step_by(per_slot) {
        let slot: Vec<_> = (start..n.min(start + per_slot))
            .map(|i| publish(&format!("/{tag}/{i}.md"), &format!("# {tag} {i}\n")))
            .collect();
        writer.commit(&slot).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_2_world_keeps_its_middle_tier_until_its_base_moves_then_writes_runs() {
    let store = from_fixture(SCHEMA_2_FIXTURE).await;
    let newest = open(&store, None).await;
    let root = newest.base().root.clone();
    assert_eq!(root.schema(), PACKED_SCHEMA);
    let widths = root.widths;
    assert!(
        root.tiers[1].grid > root.tiers[0].grid,
        "the fixture's middle tier is cut past its base: {root:?}"
    );
    assert!(newest.slots_since_base() > 0);
    let replayed = open(&store, Some(1)).await;
    assert_eq!(state_digest(newest.state()), state_digest(replayed.state()));
    let every_version = export_all(&store, replayed.state()).await;
    assert!(every_version.iter().any(|d| d.current - d.first >= 256));
    assert_eq!(export_all(&store, newest.state()).await, every_version);

    // A replica resting on an older schema-2 checkpoint adopts the newest.
    let listed =
        quire_checkpoint::replica::list_checkpoints(&*store, PREFIX, quire_checkpoint::Op::Load)
            .await
            .unwrap();
    let older = listed[listed.len() - 2].0;
    let mut peer = open(&store, Some(older)).await;
    assert!(peer.adopt(newest.base().sequence()).await.unwrap());
    assert_eq!(state_digest(peer.state()), state_digest(newest.state()));

    // Before the base tier's grid point moves, checkpoints keep schema 2.
    let mut writer = SlotWriter::resume(store.clone(), replayed.state().clone());
    let mut replica = newest;
    write_new(&mut writer, "before", 5, 5).await;
    let s = writer.state.sequence();
    assert_eq!(
        grid(widths[0], s),
        root.tiers[0].grid,
        "still in the base's period"
    );
    replica.catch_up().await.unwrap();
    replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    assert_eq!(replica.base().root.schema(), PACKED_SCHEMA);
    assert_eq!(
        replica.base().root.tiers[0],
        root.tiers[0],
        "the base tier is kept"
    );

    // Past the next base grid point and two run grid points after it: runs.
    let target = grid(widths[0], s) + widths[0] + 2 * widths[1] + 3;
    let n = (target - s) as usize;
    write_new(&mut writer, "after", n, 7).await;
    replica.catch_up().await.unwrap();
    replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let moved = replica.base().root.clone();
    assert_eq!(moved.schema(), SCHEMA);
    assert_eq!(moved.tiers.len(), 4, "base, two runs, top: {moved:?}");
    for tier in &moved.tiers[1..3] {
        assert!(tier.documents > 0, "{moved:?}");
    }
    let reopened = agrees_with(&store, &writer.state).await;
    assert_eq!(reopened.base().sequence(), replica.base().sequence());

    // The peer still on schema 2 adopts the runs.
    assert!(peer.adopt(replica.base().sequence()).await.unwrap());
    assert_eq!(state_digest(peer.state()), state_digest(&writer.state));

    // The next checkpoint names the runs as they stand and rewrites only the top.
    write_new(&mut writer, "later", 3, 3).await;
    replica.catch_up().await.unwrap();
    let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let next = replica.base().root.clone();
    assert_eq!(
        next.tiers[..3],
        moved.tiers[..3],
        "base and runs named unchanged"
    );
    let top = next.tiers.last().unwrap();
    let top_shards = top.shards.iter().flatten().count() as u64;
    assert_eq!(stats.shards, top_shards, "{stats:?}");
    assert_eq!(
        state_digest(open(&store, None).await.state()),
        state_digest(&writer.state)
    );
}
