//! Code shared by the integration tests: building valid slots by hand.
#![allow(dead_code)]

pub mod committers;
pub mod stores;

use bytes::Bytes;
use quire_log::build::{BuildLimits, Built, Change, Mutation, build};
use quire_log::metadata::Metadata;
use quire_log::slot::EncodedSlot;
use quire_log::version::StoredVersion;
use quire_log::{OperationId, Slot, StoreId, Timestamp, WorldId, WorldState, keys};

pub const WORLD: WorldId = WorldId([7; 16]);
pub const STORE: StoreId = StoreId([9; 16]);

pub fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

pub fn publish(path: &str, body: &str) -> Mutation {
    Mutation::Publish {
        path: path.into(),
        expected: None,
        body: Bytes::copy_from_slice(body.as_bytes()),
        metadata: Metadata::new(),
    }
}

pub fn publish_with(path: &str, body: &str, metadata: Metadata) -> Mutation {
    Mutation::Publish {
        path: path.into(),
        expected: None,
        body: Bytes::copy_from_slice(body.as_bytes()),
        metadata,
    }
}

pub fn archive(path: &str, archived: bool) -> Mutation {
    Mutation::SetArchived {
        path: path.into(),
        archived,
    }
}

/// Builds a change on `state` (for tests: no quota, fixed clock, inline bytes when
/// `inline`). Appends read their base from the head's inline bytes.
pub fn change(
    state: &WorldState,
    mutation: &Mutation,
    op: u8,
    inline: bool,
    bases: &[Bytes],
) -> Change {
    let base = match mutation {
        Mutation::Append { path, .. } => {
            let doc = state
                .doc(&quire_log::DocPath::parse(path).unwrap())
                .unwrap();
            let bytes = bases
                .iter()
                .find(|b| quire_log::Hash::of(b) == doc.head.hash)
                .expect("base bytes");
            Some(StoredVersion::decode(bytes).unwrap())
        }
        _ => None,
    };
    let built = build(
        state,
        mutation,
        OperationId([op; 16]),
        Timestamp(1_767_225_600 + u64::from(op)),
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
    let first = state.sequence() + 1;
    let slot = Slot {
        world: state.world(),
        first,
        store: STORE,
        prev: state.tip(),
        entries: changes.iter().map(|c| c.entry.clone()).collect(),
    };
    EncodedSlot::encode(slot, &keys::slot_key("", first)).unwrap()
}

/// Builds each mutation in order on the state left by the ones before, seals one slot, and
/// applies it. Returns the slot and the version bytes written.
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
