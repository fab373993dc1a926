//! Corrupt, foreign or inconsistent objects are integrity errors, never a panic: a damaged
//! checkpoint is refused when asked for by name and passed over by cold start, which falls
//! back to an older one and replays.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use quire_blob::BlobStore;
use quire_checkpoint::format::{Checkpoint, DEFAULT_WIDTHS, Root, Tier, encode_shard, shard_bits};
use quire_checkpoint::keys::{checkpoint_key, root_key, shard_key};
use quire_checkpoint::{ErrorKind, OpenOptions, Replica, state_digest};
use quire_log::slot::EncodedSlot;
use quire_log::{DocPath, DocState, Hash};

const FRESHEN: Duration = Duration::from_secs(1800);

/// A world of a few documents with a checkpoint, one more slot after it, and the documents as
/// a checkpoint holds them.
async fn world() -> (Arc<dyn BlobStore>, SlotWriter, Vec<DocState>) {
    let store = memory();
    let mut writer = new_world(store.clone(), DEFAULT_WIDTHS).await;
    writer
        .commit(&[
            publish("/a.md", "a\n"),
            publish("/b.md", "b\n"),
            publish("/c/d.md", "d\n"),
        ])
        .await;
    let mut replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    replica.checkpoint(FRESHEN).await.unwrap();
    let loaded = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    let docs = loaded.state().docs().map(|d| (**d).clone()).collect();
    writer.commit(&[publish("/e.md", "e\n")]).await;
    (store, writer, docs)
}

/// Plants a checkpoint at the writer's sequence whose top tier holds `shards` (bits, index
/// as labelled, documents) in a single-shard layout, naming `documents` in the root.
async fn plant(
    store: &Arc<dyn BlobStore>,
    writer: &SlotWriter,
    shard: Option<Bytes>,
    documents: u64,
    tier_documents: u64,
    tip: Hash,
) {
    let s = writer.state.sequence();
    let mut top = Tier::empty(s, s, documents);
    top.documents = tier_documents;
    if let Some(bytes) = shard {
        let hash = Hash::of(&bytes);
        // The honest checkpoint may hold the same shard already.
        let _ = store.create(&shard_key(PREFIX, &hash), bytes).await;
        top.shards[0] = Some(hash);
    }
    let root = Root {
        world: WORLD,
        documents,
        widths: DEFAULT_WIDTHS,
        tiers: vec![Tier::empty(0, 1, 0), Tier::empty(0, 1, 0), top],
        sealed: None,
        runs: false,
    };
    let bytes = root.encode();
    let hash = Hash::of(&bytes);
    let _ = store.create(&root_key(PREFIX, &hash), bytes).await;
    let checkpoint = Checkpoint {
        world: WORLD,
        sequence: s,
        root: hash,
        tip,
        documents,
    };
    store
        .create(&checkpoint_key(PREFIX, s), checkpoint.encode())
        .await
        .unwrap();
}

fn shard_of(docs: &[&DocState]) -> Bytes {
    shard_labelled(0, docs)
}

fn shard_labelled(bits: u8, docs: &[&DocState]) -> Bytes {
    let entries: Vec<(&DocState, &[quire_log::model::HistoryBlockRef])> =
        docs.iter().map(|d| (*d, &*d.history)).collect();
    encode_shard(bits, 0, &entries).unwrap()
}

async fn open_fails(store: &Arc<dyn BlobStore>, why: &str) {
    let err = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
    assert!(err.to_string().contains(why), "{err} should say {why:?}");
}

/// Checkpoint `sequence` asked for by name fails with an integrity error saying `why`, and
/// cold start passes over it to an older one: the state is the writer's all the same.
async fn checkpoint_refused(
    store: &Arc<dyn BlobStore>,
    writer: &SlotWriter,
    sequence: u64,
    why: &str,
) {
    let exactly = OpenOptions {
        checkpoint: Some(sequence),
        ..OpenOptions::default()
    };
    let err = Replica::open(store.clone(), PREFIX, &exactly)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
    assert!(err.to_string().contains(why), "{err} should say {why:?}");
    let replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    assert!(replica.base().sequence() < sequence);
    assert_eq!(replica.skipped().first(), Some(&sequence));
    assert_eq!(state_digest(replica.state()), state_digest(&writer.state));
}

#[tokio::test]
async fn a_planted_well_formed_checkpoint_loads() {
    // The baseline the other cases break one thing of.
    let (store, writer, docs) = world().await;
    let all: Vec<&DocState> = docs.iter().collect();
    let n = docs.len() as u64;
    assert_eq!(shard_bits(n), 0);
    plant(
        &store,
        &writer,
        Some(shard_of(&all)),
        n,
        n,
        writer.state.tip(),
    )
    .await;
    let replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    assert_eq!(replica.base().sequence(), writer.state.sequence());
    assert_eq!(replica.state().doc_count(), n);
}

#[tokio::test]
async fn a_wrong_shard_label_fails() {
    let (store, writer, docs) = world().await;
    let all: Vec<&DocState> = docs.iter().collect();
    let n = docs.len() as u64;
    plant(
        &store,
        &writer,
        Some(shard_labelled(1, &all)),
        n,
        n,
        writer.state.tip(),
    )
    .await;
    checkpoint_refused(&store, &writer, writer.state.sequence(), "labelled").await;
}

#[tokio::test]
async fn unsorted_or_duplicate_entries_fail() {
    let (store, writer, docs) = world().await;
    let reversed: Vec<&DocState> = docs.iter().rev().collect();
    let n = docs.len() as u64;
    plant(
        &store,
        &writer,
        Some(shard_of(&reversed)),
        n,
        n,
        writer.state.tip(),
    )
    .await;
    checkpoint_refused(&store, &writer, writer.state.sequence(), "path-sorted").await;

    let (store, writer, docs) = world().await;
    let twice = vec![&docs[0], &docs[0], &docs[1], &docs[2]];
    plant(
        &store,
        &writer,
        Some(shard_of(&twice)),
        4,
        4,
        writer.state.tip(),
    )
    .await;
    checkpoint_refused(&store, &writer, writer.state.sequence(), "path-sorted").await;
}

#[tokio::test]
async fn a_document_under_a_document_fails() {
    let (store, writer, docs) = world().await;
    let a = docs.iter().find(|d| d.path.as_str() == "/a.md").unwrap();
    let under = DocState {
        path: DocPath::parse("/a.md/x.md").unwrap(),
        ..a.clone()
    };
    let all = vec![a, &under, &docs[1], &docs[2]];
    plant(
        &store,
        &writer,
        Some(shard_of(&all)),
        4,
        4,
        writer.state.tip(),
    )
    .await;
    checkpoint_refused(&store, &writer, writer.state.sequence(), "/a.md is a").await;
}

#[tokio::test]
async fn wrong_counts_fail() {
    let (store, writer, docs) = world().await;
    let all: Vec<&DocState> = docs.iter().collect();
    let n = docs.len() as u64;
    plant(
        &store,
        &writer,
        Some(shard_of(&all)),
        n + 1,
        n + 1,
        writer.state.tip(),
    )
    .await;
    checkpoint_refused(&store, &writer, writer.state.sequence(), "shards hold").await;

    let (store, writer, docs) = world().await;
    let all: Vec<&DocState> = docs.iter().collect();
    plant(
        &store,
        &writer,
        Some(shard_of(&all)),
        n,
        n + 1,
        writer.state.tip(),
    )
    .await;
    checkpoint_refused(&store, &writer, writer.state.sequence(), "do not fit").await;
}

#[tokio::test]
async fn a_checkpoint_off_the_slot_chain_fails() {
    let (store, writer, docs) = world().await;
    let all: Vec<&DocState> = docs.iter().collect();
    let n = docs.len() as u64;
    plant(
        &store,
        &writer,
        Some(shard_of(&all)),
        n,
        n,
        Hash::of(b"elsewhere"),
    )
    .await;
    checkpoint_refused(&store, &writer, writer.state.sequence(), "slot chain").await;
}

#[tokio::test]
async fn foreign_missing_and_damaged_objects_fail() {
    let (store, _, _) = world().await;
    store
        .create("w/checkpoints/notes.txt", Bytes::from_static(b"hi"))
        .await
        .unwrap();
    open_fails(&store, "not a checkpoint").await;

    let (store, writer, _) = world().await;
    let replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    let s = replica.base().sequence();
    let shard = replica.base().root.tiers.last().unwrap().shards[0].unwrap();
    let key = shard_key(PREFIX, &shard);
    let attrs = store.head(&key).await.unwrap();
    store
        .replace(&key, &attrs.generation, Bytes::from_static(b"\xa0"))
        .await
        .unwrap();
    checkpoint_refused(&store, &writer, s, "do not hash").await;
    let attrs = store.head(&key).await.unwrap();
    store.delete(&key, &attrs.generation).await.unwrap();
    checkpoint_refused(&store, &writer, s, "missing").await;
}

#[tokio::test]
async fn every_flipped_byte_of_every_checkpoint_object_is_an_integrity_error() {
    let (store, mut writer, _) = world().await;
    for i in 0..20 {
        writer
            .commit(&[publish(&format!("/more/{i}.md"), &format!("# {i}\n"))])
            .await;
    }
    let mut replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    replica.checkpoint(FRESHEN).await.unwrap();
    let s = replica.base().sequence();
    let exactly = OpenOptions {
        checkpoint: Some(s),
        ..OpenOptions::default()
    };
    let newest_objects: Vec<String> = {
        let base = replica.base();
        let mut keys = vec![
            checkpoint_key(PREFIX, s),
            root_key(PREFIX, &base.checkpoint.root),
        ];
        keys.extend(
            base.root
                .tiers
                .iter()
                .flat_map(|t| t.shards.iter().flatten())
                .map(|h| shard_key(PREFIX, h)),
        );
        keys
    };
    for key in newest_objects {
        let original = store.get(&key).await.unwrap().data;
        for at in (0..original.len()).step_by(5) {
            let mut damaged = original.to_vec();
            damaged[at] ^= 0x41;
            let attrs = store.head(&key).await.unwrap();
            store
                .replace(&key, &attrs.generation, Bytes::from(damaged))
                .await
                .unwrap();
            let err = Replica::open(store.clone(), PREFIX, &exactly)
                .await
                .expect_err(&format!("{key} byte {at}"));
            assert_eq!(err.kind(), ErrorKind::Integrity, "{key} byte {at}: {err}");
            // Cold start passes over the damaged checkpoint: it costs only replay.
            let fallen_back = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
                .await
                .unwrap();
            assert!(fallen_back.base().sequence() < s, "{key} byte {at}");
            assert_eq!(
                state_digest(fallen_back.state()),
                state_digest(&writer.state),
                "{key} byte {at}"
            );
        }
        let attrs = store.head(&key).await.unwrap();
        store
            .replace(&key, &attrs.generation, original)
            .await
            .unwrap();
    }
    Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
}

/// A slot whose first entries apply and whose last cannot is refused by replay as a whole:
/// the replica keeps the state and the tracking it had before the slot, and the honest slot
/// still applies after.
#[tokio::test]
async fn a_slot_refused_part_way_leaves_the_replica_as_it_was() {
    let (store, mut writer, _) = world().await;
    let mut replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    let before = state_digest(replica.state());
    let slots = replica.slots_since_base();
    let honest = writer
        .commit(&[
            publish("/a.md", "a2\n"),
            publish("/f/g.md", "g\n"),
            archive("/b.md", true),
        ])
        .await;
    // The last entry names a version the document never had.
    let key = quire_log::keys::slot_key(PREFIX, honest.slot.first);
    let generation = store.head(&key).await.unwrap().generation;
    store.delete(&key, &generation).await.unwrap();
    let mut tampered = honest.slot.clone();
    tampered.entries.last_mut().unwrap().current += 1;
    let tampered = EncodedSlot::encode(tampered, &key).unwrap();
    store.create(&key, tampered.bytes.clone()).await.unwrap();

    let err = replica.catch_up().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
    assert_eq!(state_digest(replica.state()), before);
    assert_eq!(replica.slots_since_base(), slots);
    replica.state().check_indexes().unwrap();
    let err = replica.apply(&tampered).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
    assert_eq!(state_digest(replica.state()), before);

    replica.apply(&honest).unwrap();
    assert_eq!(state_digest(replica.state()), state_digest(&writer.state));
    assert_eq!(replica.slots_since_base(), slots + 1);
}
