//! A digest of what a world state says about its documents, blind to how it was reached: a
//! state loaded from any checkpoint and one replayed from the whole log digest alike when
//! they hold the same world.

use quire_log::{Hash, Location, WorldState};

fn push_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_be_bytes());
}

fn push_str(out: &mut Vec<u8>, value: &str) {
    push_u64(out, value.len() as u64);
    out.extend_from_slice(value.as_bytes());
}

/// The blake3 of the world id, sequence, tip and every document's path, versions, flags,
/// hashes, time, catalog record and current version record, in path order. How versions are
/// split between history blocks and recent records does not count.
pub fn state_digest(state: &WorldState) -> Hash {
    let mut hasher = blake3::Hasher::new();
    let mut buf = Vec::new();
    buf.extend_from_slice(&state.world().0);
    push_u64(&mut buf, state.sequence());
    buf.extend_from_slice(&state.tip().0);
    hasher.update(&buf);
    for doc in state.docs() {
        buf.clear();
        push_str(&mut buf, doc.path.as_str());
        push_u64(&mut buf, doc.current);
        push_u64(&mut buf, doc.first);
        buf.push(u8::from(doc.archived));
        buf.extend_from_slice(&doc.body_hash.0);
        push_u64(&mut buf, doc.modified.0);
        push_str(&mut buf, doc.catalog.title());
        push_u64(&mut buf, doc.catalog.tags().count() as u64);
        for tag in doc.catalog.tags() {
            push_str(&mut buf, tag);
        }
        push_str(&mut buf, &doc.catalog.importance());
        push_u64(&mut buf, doc.catalog.metadata().count() as u64);
        for (k, v) in doc.catalog.metadata() {
            push_str(&mut buf, k);
            push_str(&mut buf, v);
        }
        let head = &doc.head;
        push_u64(&mut buf, head.version);
        buf.extend_from_slice(&head.hash.0);
        buf.extend_from_slice(&head.body_hash.0);
        push_u64(&mut buf, head.modified.0);
        push_u64(&mut buf, head.size);
        match head.location {
            Location::Inline { slot, offset } => {
                buf.push(1);
                push_u64(&mut buf, slot);
                push_u64(&mut buf, offset);
            }
            Location::Blob => buf.push(0),
        }
        hasher.update(&buf);
    }
    Hash(*hasher.finalize().as_bytes())
}
