//! Tip probing and replay over a memory bucket: the log's end is found, slots replay in
//! order, and gaps, foreign objects, corrupt or missing slots are integrity errors.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, LatencyProfile};
use quire_log::{ErrorKind, WorldState, keys, tip};

const PREFIX: &str = "world/";

/// Writes `slots` slots of two writes each to a fresh bucket; returns it and the state.
async fn bucket(slots: usize) -> (Arc<MemoryStore>, WorldState) {
    let store = Arc::new(MemoryStore::new());
    let mut state = WorldState::genesis(WORLD);
    let mut bases = Vec::new();
    for i in 0..slots {
        let slot = commit(
            &mut state,
            &[
                publish(&format!("/d/{i}.md"), "x"),
                publish("/shared.md", &format!("v{i}")),
            ],
            true,
            &mut bases,
        );
        store
            .create(&keys::slot_key(PREFIX, slot.slot.first), slot.bytes.clone())
            .await
            .unwrap();
    }
    (store, state)
}

#[tokio::test]
async fn catch_up_finds_the_end_of_the_log() {
    let (store, want) = bucket(40).await;
    let mut state = WorldState::genesis(WORLD);
    let applied = tip::catch_up(store.as_ref(), PREFIX, &mut state)
        .await
        .unwrap();
    assert_eq!(applied, 40);
    assert!(state == want);
    // At the tip: one probe, nothing applied.
    assert_eq!(
        tip::catch_up(store.as_ref(), PREFIX, &mut state)
            .await
            .unwrap(),
        0
    );
    // The slot holding any sequence is found with one bounded listing.
    for sequence in [2, 3, 40, 81] {
        let slot = tip::find_slot_holding(store.as_ref(), PREFIX, sequence)
            .await
            .unwrap()
            .unwrap();
        assert!(slot.slot.first <= sequence && sequence <= slot.slot.last());
    }
    assert!(
        tip::find_slot_holding(store.as_ref(), PREFIX, 82)
            .await
            .unwrap()
            .is_none()
    );
    // Objects of other worlds sharing the bucket are not this log.
    store
        .create("other/log/0000000000000002", Bytes::from_static(b"x"))
        .await
        .unwrap();
    let mut again = WorldState::genesis(WORLD);
    tip::catch_up(store.as_ref(), PREFIX, &mut again)
        .await
        .unwrap();
    assert!(again == want);
}

#[tokio::test]
async fn a_gap_in_the_log_is_an_integrity_error() {
    let (store, _) = bucket(5).await;
    let key = keys::slot_key(PREFIX, 6);
    let object = store.get(&key).await.unwrap();
    store
        .delete(&key, &object.attributes.generation)
        .await
        .unwrap();
    let mut state = WorldState::genesis(WORLD);
    let err = tip::catch_up(store.as_ref(), PREFIX, &mut state)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity);
    // Progress up to the gap is kept.
    assert_eq!(state.sequence(), 5);
}

#[tokio::test]
async fn foreign_and_corrupt_objects_are_integrity_errors() {
    let (store, _) = bucket(3).await;
    store
        .create(
            &format!("{PREFIX}log/stray.json"),
            Bytes::from_static(b"{}"),
        )
        .await
        .unwrap();
    let mut state = WorldState::genesis(WORLD);
    let err = tip::catch_up(store.as_ref(), PREFIX, &mut state)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity);

    let (store, _) = bucket(3).await;
    // A slot of another world at the next name.
    let mut other = WorldState::genesis(quire_log::WorldId([1; 16]));
    let mut bases = Vec::new();
    let mut state = WorldState::genesis(WORLD);
    tip::catch_up(store.as_ref(), PREFIX, &mut state)
        .await
        .unwrap();
    for _ in 0..state.sequence() - 1 {
        let body = format!("{}", other.sequence());
        commit(&mut other, &[publish("/o.md", &body)], true, &mut bases);
    }
    let foreign = commit(&mut other, &[publish("/o.md", "late")], true, &mut bases);
    assert_eq!(foreign.slot.first, state.sequence() + 1);
    store
        .create(
            &keys::slot_key(PREFIX, foreign.slot.first),
            foreign.bytes.clone(),
        )
        .await
        .unwrap();
    let err = tip::catch_up(store.as_ref(), PREFIX, &mut state)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity);

    // Garbage bytes at the next name.
    let (store, _) = bucket(1).await;
    store
        .create(&keys::slot_key(PREFIX, 4), Bytes::from_static(b"\xa0"))
        .await
        .unwrap();
    let mut state = WorldState::genesis(WORLD);
    let err = tip::catch_up(store.as_ref(), PREFIX, &mut state)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity);
    assert_eq!(state.sequence(), 3);
}

#[tokio::test(start_paused = true)]
async fn replay_keeps_many_slot_reads_in_flight() {
    // Every get and listing takes a bucket's round trip; the clock is paused, so elapsed
    // time counts round trips, not work.
    let round_trip = std::time::Duration::from_millis(30);
    let (memory, want) = bucket(300).await;
    let store = quire_blob::Simulated::new(memory, 1)
        .with_latency(quire_blob::Op::Get, LatencyProfile::Fixed(round_trip))
        .with_latency(quire_blob::Op::List, LatencyProfile::Fixed(round_trip));
    let mut state = WorldState::genesis(WORLD);
    let started = tokio::time::Instant::now();
    let applied = tip::catch_up(&store, PREFIX, &mut state).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(applied, 300);
    assert!(state == want);
    // The probe, one listing, then the other 299 slots in waves of REPLAY_READERS reads
    // (one read after another would take 300 round trips).
    let waves = 299usize.div_ceil(tip::REPLAY_READERS) as u32;
    assert!(
        elapsed <= round_trip * (2 + waves + 1),
        "{elapsed:?} for {waves} waves"
    );
}
