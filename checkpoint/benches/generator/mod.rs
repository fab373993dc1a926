//! Slots a generator writes the way the committer would, shared by the checkpoint
//! benchmarks: each publish built like `quire_log::build` builds one, with inline version
//! bytes, and no world state (the generator knows every document's head).

// Each benchmark uses part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use quire_blob::BlobStore;
use quire_checkpoint::Replica;
use quire_log::metadata::{Catalog, Metadata};
use quire_log::slot::{EncodedSlot, Entry, EntryOp, EntryWrite, Slot};
use quire_log::version::StoredVersion;
use quire_log::{DocPath, Hash, OperationId, StoreId, Timestamp, WorldId, keys};
use rand::Rng;

pub(crate) const WORLD: WorldId = WorldId([0x42; 16]);
pub(crate) const STORE: StoreId = StoreId([0x24; 16]);
pub(crate) const PREFIX: &str = "bench/";

pub(crate) fn doc_path(i: u64) -> String {
    format!("/team{:03}/notes/{i:07}.md", i % 500)
}

fn metadata(i: u64) -> Metadata {
    let mut m = Metadata::new();
    m.insert("tags".into(), format!("notes,t{}", i % 50));
    m
}

pub(crate) struct Generator {
    pub store: Arc<dyn BlobStore>,
    pub next: u64,
    pub tip: Hash,
    pub operations: u64,
}

impl Generator {
    /// A generator writing after genesis.
    pub(crate) fn after_genesis(store: Arc<dyn BlobStore>) -> Generator {
        Generator {
            store,
            next: 2,
            tip: quire_log::marker::genesis_tip(WORLD),
            operations: 0,
        }
    }

    /// A generator writing after `replica`'s state; operation ids start at `salt` times
    /// its sequence, away from any an earlier run used.
    pub(crate) fn after(store: Arc<dyn BlobStore>, replica: &Replica, salt: u64) -> Generator {
        Generator {
            store,
            next: replica.state().sequence() + 1,
            tip: replica.state().tip(),
            operations: replica.state().sequence() * salt,
        }
    }

    pub(crate) fn entry(&mut self, i: u64, version: u64, previous: Option<Hash>) -> (Entry, Hash) {
        self.operations += 1;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.operations.to_be_bytes());
        let path = DocPath::parse(&doc_path(i)).unwrap();
        let meta = metadata(i);
        let body = format!(
            "# Note {i}\n\nVersion {version} of note {i}: a paragraph of ordinary text standing in for \
             what people write, long enough to look like a short note.\n"
        );
        let stored = StoredVersion {
            version,
            previous,
            metadata: meta.clone(),
            body,
        };
        let bytes = stored.encode();
        let hash = Hash::of(&bytes);
        let entry = Entry {
            operation: OperationId(id),
            op: EntryOp::Publish,
            agent: None,
            path: path.clone(),
            current: version,
            first: 1,
            archived: false,
            body_hash: Hash::of(stored.body.as_bytes()),
            modified: Timestamp(1_767_225_600 + self.operations / 250),
            write: Some(EntryWrite {
                catalog: Catalog::derive(&path, &meta, &stored.body),
                hash,
                previous,
                size: bytes.len() as u64,
                inline: Some(bytes),
            }),
        };
        (entry, hash)
    }

    /// Creates the slot holding `entries`; returns it.
    pub(crate) async fn commit(&mut self, entries: Vec<Entry>) -> EncodedSlot {
        let n = entries.len() as u64;
        let key = keys::slot_key(PREFIX, self.next);
        let slot = Slot {
            world: WORLD,
            first: self.next,
            store: STORE,
            prev: self.tip,
            entries,
        };
        let encoded = EncodedSlot::encode(slot, &key).unwrap();
        self.store
            .create(&key, encoded.bytes.clone())
            .await
            .unwrap();
        self.tip = encoded.hash;
        self.next += n;
        encoded
    }

    /// Writes `docs` new documents in slots of 256.
    pub(crate) async fn documents(&mut self, docs: u64) {
        let mut i = 0;
        while i < docs {
            let n = (docs - i).min(256);
            let entries: Vec<Entry> = (i..i + n).map(|k| self.entry(k, 1, None).0).collect();
            self.commit(entries).await;
            i += n;
        }
    }

    /// Commits `writes` uniform random rewrites in slots of `per_slot`, reading each
    /// document's head from `replica` unless this run rewrote it already; calls `after`
    /// with each slot written.
    pub(crate) async fn rewrites(
        &mut self,
        replica: &Replica,
        docs: u64,
        writes: u64,
        per_slot: usize,
        rng: &mut impl Rng,
        mut after: impl FnMut(EncodedSlot),
    ) {
        let mut heads: HashMap<u64, (u64, Hash)> = HashMap::new();
        let mut left = writes;
        while left > 0 {
            let mut entries = Vec::new();
            let mut in_slot = std::collections::HashSet::new();
            while entries.len() < per_slot && left > 0 {
                let i = rng.random_range(0..docs);
                if !in_slot.insert(i) {
                    continue;
                }
                let (version, hash) = *heads.entry(i).or_insert_with(|| {
                    let doc = replica
                        .state()
                        .doc(&DocPath::parse(&doc_path(i)).unwrap())
                        .unwrap();
                    (doc.current, doc.head.hash)
                });
                let (entry, new_hash) = self.entry(i, version + 1, Some(hash));
                heads.insert(i, (version + 1, new_hash));
                entries.push(entry);
                left -= 1;
            }
            after(self.commit(entries).await);
        }
    }
}
