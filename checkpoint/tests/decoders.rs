//! The decoders of every stored object, against damaged copies of real objects: decoding
//! never panics, and whatever decodes encodes to exactly the bytes it came from (the
//! encodings are canonical). The coverage-guided form of these properties is in `fuzz/`.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use proptest::prelude::*;
use quire_checkpoint::format::{
    Checkpoint, DEFAULT_WIDTHS, LEGACY_SCHEMA, PackedBlock, Root, decode_block, decode_shard,
    encode_block, encode_shard, encode_shard_entries, path_hash,
};
use quire_checkpoint::keys::{
    checkpoint_key, history_key, pack_key, parse_checkpoint_key, root_key, shard_key,
};
use quire_checkpoint::{OpenOptions, Replica};
use quire_log::Hash;
use quire_log::keys::{parse_slot_key, slot_key};
use quire_log::marker::Marker;
use quire_log::slot::EncodedSlot;

/// One stored object and how to decode it.
#[derive(Clone, Debug)]
enum Object {
    Slot(u64, Bytes),
    Marker(Bytes),
    Checkpoint(u64, Bytes),
    Root(Checkpoint, Bytes),
    /// Schema, bits, index, checkpoint sequence.
    Shard(u32, u8, u32, u64, Bytes),
    History(Hash, u64, u64, Bytes),
}

impl Object {
    fn bytes(&self) -> &Bytes {
        match self {
            Object::Slot(_, b)
            | Object::Marker(b)
            | Object::Checkpoint(_, b)
            | Object::Root(_, b)
            | Object::Shard(_, _, _, _, b)
            | Object::History(_, _, _, b) => b,
        }
    }

    /// Decodes `bytes` as this kind of object; when it decodes, checks that it encodes back
    /// to exactly `bytes`.
    fn decodes_canonically(&self, bytes: &[u8]) -> Result<bool, String> {
        let decoded_again = |encoded: &[u8]| {
            if encoded == bytes {
                Ok(true)
            } else {
                Err(format!("{self:?} decoded but encodes to other bytes"))
            }
        };
        match self {
            Object::Slot(sequence, _) => {
                let key = slot_key(PREFIX, *sequence);
                match EncodedSlot::decode(&key, *sequence, Bytes::copy_from_slice(bytes)) {
                    Ok(slot) => decoded_again(&EncodedSlot::encode(slot.slot, &key).unwrap().bytes),
                    Err(_) => Ok(false),
                }
            }
            Object::Marker(_) => match Marker::decode(bytes) {
                Ok(marker) => decoded_again(&marker.encode()),
                Err(_) => Ok(false),
            },
            Object::Checkpoint(sequence, _) => {
                let key = checkpoint_key(PREFIX, *sequence);
                match Checkpoint::decode(&key, *sequence, bytes) {
                    Ok(checkpoint) => decoded_again(&checkpoint.encode()),
                    Err(_) => Ok(false),
                }
            }
            Object::Root(checkpoint, _) => match Root::decode("root", bytes, checkpoint) {
                Ok(root) => decoded_again(&root.encode()),
                Err(_) => Ok(false),
            },
            Object::Shard(schema, bits, index, sequence, _) => {
                match decode_shard("shard", bytes, *schema, *bits, *index, *sequence) {
                    Ok(docs) if *schema == LEGACY_SCHEMA => {
                        let pairs: Vec<_> = docs.iter().map(|(d, _)| (d, &d.history[..])).collect();
                        decoded_again(&encode_shard(*bits, *index, &pairs).unwrap())
                    }
                    Ok(docs) => {
                        let entries: Vec<_> = docs
                            .iter()
                            .map(|(d, changed)| (d, &d.history[..], *changed))
                            .collect();
                        decoded_again(&encode_shard_entries(*bits, *index, &entries))
                    }
                    Err(_) => Ok(false),
                }
            }
            Object::History(path, first, last, _) => {
                match decode_block("history", bytes, *path, *first, *last) {
                    Ok(records) => decoded_again(&encode_block(*path, &records)),
                    Err(_) => Ok(false),
                }
            }
        }
    }
}

/// Every object of a small world with a checkpoint, each with what its decoder is told.
fn objects() -> Vec<Object> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = memory();
        let mut writer = new_world(store.clone(), DEFAULT_WIDTHS).await;
        let tagged = meta(&[("tags", "a,b"), ("title", "Tagged")]);
        for round in 0..3 {
            writer
                .commit(&[
                    publish("/a.md", &format!("# A {round}\n")),
                    publish_with("/notes/b.md", &format!("b {round}\n"), tagged.clone()),
                    publish(&format!("/c/{round}.md"), "d\n"),
                ])
                .await;
        }
        writer.commit(&[archive("/a.md", true)]).await;
        let mut replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
            .await
            .unwrap();
        replica.checkpoint(Duration::from_secs(1800)).await.unwrap();
        let stored = contents(&*store, PREFIX).await;
        let get = |key: &str| {
            stored
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, bytes)| bytes.clone())
                .unwrap()
        };
        let mut objects = Vec::new();
        for (key, bytes) in &stored {
            if let Some(sequence) = parse_slot_key(PREFIX, key) {
                objects.push(Object::Slot(sequence, bytes.clone()));
            }
            if key.ends_with("marker") {
                objects.push(Object::Marker(bytes.clone()));
            }
            let Some(sequence) = parse_checkpoint_key(PREFIX, key) else {
                continue;
            };
            objects.push(Object::Checkpoint(sequence, bytes.clone()));
            let checkpoint =
                Checkpoint::decode(&checkpoint_key(PREFIX, sequence), sequence, bytes).unwrap();
            let root_bytes = get(&root_key(PREFIX, &checkpoint.root));
            let root = Root::decode("root", &root_bytes, &checkpoint).unwrap();
            objects.push(Object::Root(checkpoint, root_bytes));
            for tier in &root.tiers {
                for (index, shard) in tier.shards.iter().enumerate() {
                    let Some(hash) = shard else { continue };
                    let shard_bytes = get(&shard_key(PREFIX, hash));
                    let docs = decode_shard(
                        "shard",
                        &shard_bytes,
                        root.shard_schema(),
                        tier.bits,
                        index as u32,
                        sequence,
                    )
                    .unwrap();
                    objects.push(Object::Shard(
                        root.shard_schema(),
                        tier.bits,
                        index as u32,
                        sequence,
                        shard_bytes,
                    ));
                    for (doc, _) in docs {
                        for block in doc.history.iter() {
                            // A block in a sealed epoch's pack is the pack's bytes at its range.
                            let bytes = match PackedBlock::from_name(&block.hash) {
                                Some(packed) => {
                                    let pack = get(&pack_key(PREFIX, &packed.pack));
                                    let start = packed.offset as usize;
                                    pack.slice(start..start + packed.len as usize)
                                }
                                None => get(&history_key(PREFIX, &block.hash)),
                            };
                            objects.push(Object::History(
                                path_hash(doc.path.as_str()),
                                block.first,
                                block.last,
                                bytes,
                            ));
                        }
                    }
                }
            }
        }
        objects
    })
}

/// A damaged copy: bytes overwritten, inserted or removed at chosen places.
#[derive(Clone, Debug)]
enum Damage {
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Truncate(usize),
}

fn damaged(bytes: &[u8], damage: &[Damage]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for d in damage {
        let len = out.len().max(1);
        match *d {
            Damage::Set(at, byte) if !out.is_empty() => out[at % len] = byte,
            Damage::Insert(at, byte) => out.insert(at % (out.len() + 1), byte),
            Damage::Remove(at) if !out.is_empty() => {
                out.remove(at % len);
            }
            Damage::Truncate(at) => out.truncate(at % (out.len() + 1)),
            _ => {}
        }
    }
    out
}

fn any_damage() -> impl Strategy<Value = Vec<Damage>> {
    proptest::collection::vec(
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Damage::Set(at, b)),
            (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Damage::Insert(at, b)),
            any::<usize>().prop_map(Damage::Remove),
            any::<usize>().prop_map(Damage::Truncate),
        ],
        1..4,
    )
}

#[test]
fn every_real_object_decodes_and_encodes_to_its_own_bytes() {
    let objects = objects();
    for kind in ["Slot", "Marker", "Checkpoint", "Root", "Shard", "History"] {
        assert!(
            objects.iter().any(|o| format!("{o:?}").starts_with(kind)),
            "the world holds a {kind}"
        );
    }
    for object in &objects {
        assert_eq!(
            object.decodes_canonically(object.bytes()),
            Ok(true),
            "{object:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn damaged_objects_are_refused_or_decode_canonically(
        pick in any::<usize>(),
        damage in any_damage(),
    ) {
        let objects = OBJECTS.get_or_init(objects);
        let object = &objects[pick % objects.len()];
        let bytes = damaged(object.bytes(), &damage);
        prop_assert!(object.decodes_canonically(&bytes).is_ok(), "{:?} {:?}", object, damage);
    }
}

static OBJECTS: std::sync::OnceLock<Vec<Object>> = std::sync::OnceLock::new();
