//! Worlds written by the schema-1 checkpoint format (before history packs): a world written
//! by that code (`fixtures/schema1-world.bin`) opens, serves every version, is adopted, and
//! moves to schema 2 at the next checkpoint; later checkpoints pack ended epochs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use quire_blob::BlobStore;
use quire_checkpoint::format::{SCHEMA, shard_bits};
use quire_checkpoint::{OpenOptions, Replica, state_digest};

const FRESHEN: Duration = Duration::from_secs(1800);
const FIXTURE: &[u8] = include_bytes!("fixtures/schema1-world.bin");

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_1_world_opens_is_adopted_and_moves_to_schema_2() {
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

    // The next checkpoint writes schema 2: every tier, its shard bits from its own count.
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

    // The peer still on schema 1 adopts the schema-2 checkpoint.
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
    let reopened = open(&store, None).await;
    assert_eq!(state_digest(reopened.state()), state_digest(&writer.state));
    let live = export_all(&store, &writer.state).await;
    assert_eq!(export_all(&store, reopened.state()).await, live);
    assert_eq!(
        export_all(&store, open(&store, Some(1)).await.state()).await,
        live,
        "a whole replay agrees"
    );
}
