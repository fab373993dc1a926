//! Test support for this crate's and the crates above's tests (the `testing` feature): a
//! world and store id, mutations in one line, slots built by hand with the crate's own build
//! and encode functions, and [`SlotWriter`], which creates such slots in a store (what the
//! committer does, without batching or races).
//!
//! Nothing here is for production: builds use a fixed clock, fixed operation ids and no
//! quota.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use quire_blob::BlobStore;

use crate::build::{BuildLimits, Built, Change, Mutation, build};
use crate::metadata::Metadata;
use crate::slot::{DEFAULT_INLINE_LIMIT, EncodedSlot};
use crate::version::StoredVersion;
use crate::{
    DocPath, Entry, Hash, OperationId, Slot, StoreId, Timestamp, WorldId, WorldState, keys,
};

/// The world the tests write.
pub const WORLD: WorldId = WorldId([7; 16]);
/// The store that writes the slots built here.
pub const STORE: StoreId = StoreId([9; 16]);
/// The world's key prefix in [`SlotWriter`]'s store.
pub const PREFIX: &str = "w/";
/// 2026-01-01T00:00:00Z, the time every build here is stamped near.
pub const EPOCH: u64 = 1_767_225_600;

/// Metadata from `(key, value)` pairs.
pub fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

/// A blind publish of `body` without metadata.
pub fn publish(path: &str, body: &str) -> Mutation {
    publish_with(path, body, Metadata::new())
}

/// A blind publish of `body` with `metadata`.
pub fn publish_with(path: &str, body: &str, metadata: Metadata) -> Mutation {
    Mutation::Publish {
        path: path.into(),
        expected: None,
        body: Bytes::copy_from_slice(body.as_bytes()),
        metadata,
    }
}

/// Archives (or restores) a document.
pub fn archive(path: &str, archived: bool) -> Mutation {
    Mutation::SetArchived {
        path: path.into(),
        archived,
    }
}

/// Builds a change on `state` with operation id `[op; 16]`, its bytes inline when `inline`.
/// Appends read their base from `bases`, the version bytes written so far.
pub fn change(
    state: &WorldState,
    mutation: &Mutation,
    op: u8,
    inline: bool,
    bases: &[Bytes],
) -> Change {
    let base = match mutation {
        Mutation::Append { path, .. } => {
            let doc = state.doc(&DocPath::parse(path).unwrap()).unwrap();
            let bytes = bases
                .iter()
                .find(|b| Hash::of(b) == doc.head.hash)
                .expect("base bytes");
            Some(StoredVersion::decode(bytes).unwrap())
        }
        _ => None,
    };
    let built = build(
        state,
        mutation,
        OperationId([op; 16]),
        Timestamp(EPOCH + u64::from(op)),
        BuildLimits { max_documents: 0 },
        &mut None,
        base.as_ref(),
    )
    .unwrap();
    let Built::Change(change) = built else {
        panic!("unchanged");
    };
    let mut change = *change;
    if inline && let (Some(w), Some(bytes)) = (change.entry.write.as_mut(), &change.version_bytes) {
        w.inline = Some(bytes.clone());
    }
    change
}

/// Encodes a slot of `changes` on top of `state`.
pub fn seal(state: &WorldState, changes: &[Change]) -> EncodedSlot {
    seal_entries(state, changes.iter().map(|c| c.entry.clone()).collect())
}

/// Encodes a slot of `entries` on top of `state`, written by [`STORE`].
pub fn seal_entries(state: &WorldState, entries: Vec<Entry>) -> EncodedSlot {
    let first = state.sequence() + 1;
    let slot = Slot {
        world: state.world(),
        first,
        store: STORE,
        prev: state.tip(),
        entries,
    };
    EncodedSlot::encode(slot, &keys::slot_key("", first)).unwrap()
}

/// Builds each mutation in order on the state left by the ones before, seals one slot, and
/// applies it to `state`. Returns the slot; the version bytes written join `bases`.
pub fn commit(
    state: &mut WorldState,
    mutations: &[Mutation],
    inline: bool,
    bases: &mut Vec<Bytes>,
) -> EncodedSlot {
    let mut working = state.clone();
    let mut changes = Vec::new();
    for (i, m) in mutations.iter().enumerate() {
        let c = change(
            &working,
            m,
            (state.sequence() as u8)
                .wrapping_mul(31)
                .wrapping_add(i as u8),
            inline,
            bases,
        );
        if let Some(bytes) = &c.version_bytes {
            bases.push(bytes.clone());
        }
        let one = seal(&working, std::slice::from_ref(&c));
        working = working.apply(&one).unwrap();
        changes.push(c);
    }
    let slot = seal(state, &changes);
    *state = state.apply(&slot).unwrap();
    slot
}

/// Writes slots straight into a store under [`PREFIX`].
#[derive(Debug)]
pub struct SlotWriter {
    pub store: Arc<dyn BlobStore>,
    pub state: WorldState,
    versions: HashMap<Hash, Bytes>,
    operations: u64,
}

impl SlotWriter {
    /// A writer at `state`, whose slots the store holds (the world's marker included).
    pub fn new(store: Arc<dyn BlobStore>, state: WorldState) -> SlotWriter {
        SlotWriter {
            store,
            state,
            versions: HashMap::new(),
            operations: 0,
        }
    }

    /// A writer at `state` of a world another writer wrote: its operation ids start far
    /// from any a fixture's writer used.
    pub fn resume(store: Arc<dyn BlobStore>, state: WorldState) -> SlotWriter {
        SlotWriter {
            operations: 1 << 40,
            ..SlotWriter::new(store, state)
        }
    }

    /// Commits one slot holding `mutations` (each built on the ones before it). Versions up
    /// to the inline limit travel inline; larger ones become blobs first.
    pub async fn commit(&mut self, mutations: &[Mutation]) -> EncodedSlot {
        let mut working = self.state.clone();
        let mut entries = Vec::new();
        for mutation in mutations {
            self.operations += 1;
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&self.operations.to_be_bytes());
            let base = match mutation {
                Mutation::Append { path, .. } => {
                    let doc = working.doc(&DocPath::parse(path).unwrap()).unwrap();
                    Some(StoredVersion::decode(&self.versions[&doc.head.hash]).unwrap())
                }
                _ => None,
            };
            let built = build(
                &working,
                mutation,
                OperationId(id),
                Timestamp(EPOCH + self.operations),
                BuildLimits { max_documents: 0 },
                &mut None,
                base.as_ref(),
            )
            .unwrap();
            let Built::Change(change) = built else {
                continue;
            };
            let mut entry = change.entry;
            if let (Some(w), Some(bytes)) = (entry.write.as_mut(), change.version_bytes) {
                self.versions.insert(w.hash, bytes.clone());
                if bytes.len() <= DEFAULT_INLINE_LIMIT {
                    w.inline = Some(bytes);
                } else {
                    let key = keys::blob_key(PREFIX, &w.hash);
                    match self.store.create(&key, bytes).await {
                        Ok(_) => {}
                        Err(e) if e.is_precondition() => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            let one = seal_entries(&working, vec![entry.clone()]);
            working = working.apply(&one).unwrap();
            entries.push(entry);
        }
        assert!(!entries.is_empty(), "nothing to commit");
        let slot = seal_entries(&self.state, entries);
        let key = keys::slot_key(PREFIX, slot.slot.first);
        self.store.create(&key, slot.bytes.clone()).await.unwrap();
        self.state = self.state.apply(&slot).unwrap();
        slot
    }
}
