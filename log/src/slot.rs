//! The slot object: one committed batch, the unit of the hash chain.
//!
//! A slot at `log/<first>` holds, in canonical CBOR, the map
//! `{schema, world, first, store, prev, entries, inline}`:
//! - `prev` is the blake3 hash of the previous slot's bytes (the genesis tip for the first);
//! - entry `i` has sequence `first + i` and carries the document's full state after the
//!   change (see [`Entry`]), so applying a slot needs no further reads;
//! - `inline` is the last field: the stored bytes of every inline version, concatenated in
//!   entry order. Being last, it ends the object, so an inline version is also readable with a
//!   range get at a known offset ([`Location::Inline`]). Larger versions are blobs created
//!   before the slot.
//!
//! Decoding checks everything that can be checked without the world state: canonical
//! encoding, schema, key/sequence agreement, entry shapes, unique operation ids, inline bytes
//! that tile the payload, hash to their record and decode to the entry's version, body hash
//! and catalog record.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::cbor;
use crate::error::{Error, Op, Result};
use crate::ids::{Hash, OperationId, StoreId, Timestamp, WorldId};
use crate::marker::GENESIS_SEQUENCE;
use crate::metadata::{self, Catalog};
use crate::model::Location;
use crate::path::DocPath;
use crate::version::StoredVersion;

/// The slot schema number.
pub const SLOT_SCHEMA: u32 = 1;
/// The most entries a slot may hold. Readers find the slot holding a sequence within this many
/// names below it, so raising it needs a new schema.
pub const MAX_SLOT_ENTRIES: usize = 256;
/// Default largest version (stored bytes) carried inline in a slot.
pub const DEFAULT_INLINE_LIMIT: usize = 8 * 1024;
/// The largest stored version the log accepts: a 1 MiB body plus its frontmatter.
pub const MAX_VERSION_SIZE: u64 = (1 << 20) + 4096;

/// What an entry did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryOp {
    Publish,
    Append,
    /// Archiving. Unarchiving is reported as a publish without a new version.
    Archive,
}

/// The new version an entry writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryWrite {
    pub catalog: Catalog,
    /// The hash of the stored version bytes (the ETag).
    pub hash: Hash,
    /// The hash of the previous version's stored bytes; `None` for version 1.
    pub previous: Option<Hash>,
    pub size: u64,
    /// The stored bytes when carried inline; `None` for a blob.
    pub inline: Option<Bytes>,
}

/// One change, carrying the document's full state after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub operation: OperationId,
    pub op: EntryOp,
    /// The writer's `agent` metadata, if any.
    pub agent: Option<String>,
    pub path: DocPath,
    pub current: u64,
    /// The oldest retained version after the change.
    pub first: u64,
    pub archived: bool,
    pub body_hash: Hash,
    pub modified: Timestamp,
    /// The version written; `None` for an archive transition.
    pub write: Option<EntryWrite>,
}

/// A slot's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub world: WorldId,
    pub first: u64,
    pub store: StoreId,
    pub prev: Hash,
    pub entries: Vec<Entry>,
}

impl Slot {
    /// The sequence of the last entry.
    pub fn last(&self) -> u64 {
        self.first + self.entries.len() as u64 - 1
    }
}

/// A slot with its exact bytes, their hash and where each inline version sits.
#[derive(Clone, Debug)]
pub struct EncodedSlot {
    pub slot: Slot,
    pub bytes: Bytes,
    /// The blake3 hash of `bytes`: the next slot's `prev`.
    pub hash: Hash,
    /// Per entry: the absolute offset of its inline version bytes.
    offsets: Vec<Option<u64>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlotWire {
    schema: u32,
    world: WorldId,
    first: u64,
    store: StoreId,
    prev: Hash,
    entries: Vec<EntryWire>,
    inline: serde_bytes::ByteBuf,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryWire {
    operation: OperationId,
    op: EntryOp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    path: String,
    current: u64,
    first: u64,
    archived: bool,
    body_hash: Hash,
    modified: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    catalog: Option<Catalog>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<VersionWire>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionWire {
    hash: Hash,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<Hash>,
    size: u64,
    inline: bool,
}

impl EncodedSlot {
    /// Encodes `slot`. The slot must be well formed (the committer builds only such slots);
    /// encoding checks the shape and refuses otherwise.
    pub fn encode(slot: Slot, key: &str) -> Result<EncodedSlot> {
        check_shape(&slot, key)?;
        let mut inline = Vec::new();
        let entries = slot
            .entries
            .iter()
            .map(|e| EntryWire {
                operation: e.operation,
                op: e.op,
                agent: e.agent.clone(),
                path: e.path.as_str().to_owned(),
                current: e.current,
                first: e.first,
                archived: e.archived,
                body_hash: e.body_hash,
                modified: e.modified,
                catalog: e.write.as_ref().map(|w| w.catalog.clone()),
                version: e.write.as_ref().map(|w| {
                    if let Some(bytes) = &w.inline {
                        inline.extend_from_slice(bytes);
                    }
                    VersionWire {
                        hash: w.hash,
                        previous: w.previous,
                        size: w.size,
                        inline: w.inline.is_some(),
                    }
                }),
            })
            .collect();
        let wire = SlotWire {
            schema: SLOT_SCHEMA,
            world: slot.world,
            first: slot.first,
            store: slot.store,
            prev: slot.prev,
            entries,
            inline: serde_bytes::ByteBuf::from(inline),
        };
        let bytes = Bytes::from(cbor::encode(&wire));
        let offsets = inline_offsets(&slot, bytes.len() as u64, wire.inline.len() as u64);
        Ok(EncodedSlot {
            hash: Hash::of(&bytes),
            slot,
            bytes,
            offsets,
        })
    }

    /// Decodes the slot stored at `key` (a slot key; `sequence` is the sequence it names).
    pub fn decode(key: &str, sequence: u64, bytes: Bytes) -> Result<EncodedSlot> {
        let bad = |why: String| Error::integrity(Op::Decode, key, why);
        let wire: SlotWire = cbor::decode_strict(&bytes).map_err(&bad)?;
        if wire.schema != SLOT_SCHEMA {
            return Err(bad(format!("unsupported slot schema {}", wire.schema)));
        }
        if wire.first != sequence {
            return Err(bad(format!(
                "slot names first sequence {} under the key of {sequence}",
                wire.first
            )));
        }
        let payload_len = wire.inline.len() as u64;
        let payload_start = bytes.len() as u64 - payload_len;
        let mut cursor = payload_start;
        let mut entries = Vec::with_capacity(wire.entries.len());
        for (i, e) in wire.entries.into_iter().enumerate() {
            let path = DocPath::canonical(&e.path)
                .map_err(|why| bad(format!("entry {i}: path {:?}: {why}", e.path)))?;
            let write = match (e.catalog, e.version) {
                (None, None) => None,
                (Some(catalog), Some(v)) => {
                    let inline = if v.inline {
                        let end = cursor
                            .checked_add(v.size)
                            .filter(|end| *end <= bytes.len() as u64)
                            .ok_or_else(|| {
                                bad(format!("entry {i}: inline bytes overrun the payload"))
                            })?;
                        let slice = bytes.slice(cursor as usize..end as usize);
                        cursor = end;
                        Some(slice)
                    } else {
                        None
                    };
                    Some(EntryWrite {
                        catalog,
                        hash: v.hash,
                        previous: v.previous,
                        size: v.size,
                        inline,
                    })
                }
                _ => {
                    return Err(bad(format!(
                        "entry {i}: catalog and version must come together"
                    )));
                }
            };
            entries.push(Entry {
                operation: e.operation,
                op: e.op,
                agent: e.agent,
                path,
                current: e.current,
                first: e.first,
                archived: e.archived,
                body_hash: e.body_hash,
                modified: e.modified,
                write,
            });
        }
        if cursor != bytes.len() as u64 {
            return Err(bad("inline payload holds bytes no entry names".into()));
        }
        let slot = Slot {
            world: wire.world,
            first: wire.first,
            store: wire.store,
            prev: wire.prev,
            entries,
        };
        check_shape(&slot, key)?;
        let offsets = inline_offsets(&slot, bytes.len() as u64, payload_len);
        Ok(EncodedSlot {
            hash: Hash::of(&bytes),
            slot,
            bytes,
            offsets,
        })
    }

    /// Where entry `index`'s version bytes live.
    pub fn location(&self, index: usize) -> Location {
        match self.offsets.get(index).copied().flatten() {
            Some(offset) => Location::Inline {
                slot: self.slot.first,
                offset,
            },
            None => Location::Blob,
        }
    }
}

fn inline_offsets(slot: &Slot, total: u64, payload_len: u64) -> Vec<Option<u64>> {
    let mut cursor = total - payload_len;
    slot.entries
        .iter()
        .map(|e| match e.write.as_ref().and_then(|w| w.inline.as_ref()) {
            Some(bytes) => {
                let at = cursor;
                cursor += bytes.len() as u64;
                Some(at)
            }
            None => None,
        })
        .collect()
}

/// Everything about a slot that holds whatever the world state is.
fn check_shape(slot: &Slot, key: &str) -> Result<()> {
    let bad = |why: String| Error::integrity(Op::Decode, key, why);
    if slot.first <= GENESIS_SEQUENCE {
        return Err(bad(format!(
            "slot sequence {} is not after genesis",
            slot.first
        )));
    }
    if slot.entries.is_empty() || slot.entries.len() > MAX_SLOT_ENTRIES {
        return Err(bad(format!(
            "{} entries (1..={MAX_SLOT_ENTRIES} allowed)",
            slot.entries.len()
        )));
    }
    if slot.first.checked_add(slot.entries.len() as u64).is_none() {
        return Err(bad("sequence overflow".into()));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, e) in slot.entries.iter().enumerate() {
        let at = |why: &str| bad(format!("entry {i} ({}): {why}", e.path));
        if !seen.insert(e.operation) {
            return Err(at("duplicate operation id"));
        }
        if e.current == 0 || e.first == 0 || e.first > e.current {
            return Err(at("version range out of order"));
        }
        if let Some(agent) = &e.agent
            && (agent.is_empty() || !metadata::value_is_valid(agent))
        {
            return Err(at("malformed agent"));
        }
        match &e.write {
            Some(w) => {
                if !matches!(e.op, EntryOp::Publish | EntryOp::Append) || e.archived {
                    return Err(at("a write must be a live publish or append"));
                }
                if (e.current == 1) != w.previous.is_none() {
                    return Err(at("previous hash must be present exactly after version 1"));
                }
                if w.size > MAX_VERSION_SIZE {
                    return Err(at("version exceeds the size limit"));
                }
                if !metadata::is_normal(&w.catalog.metadata) {
                    return Err(at("catalog metadata is not valid"));
                }
                let declared = w.catalog.metadata.get("agent").filter(|a| !a.is_empty());
                if e.agent.as_ref() != declared {
                    return Err(at("agent differs from the version's agent metadata"));
                }
                if let Some(bytes) = &w.inline {
                    check_inline(e, w, bytes).map_err(|why| at(&why))?;
                }
            }
            None => {
                let expected = if e.archived {
                    EntryOp::Archive
                } else {
                    EntryOp::Publish
                };
                if e.op != expected {
                    return Err(at("archive transition with the wrong op"));
                }
            }
        }
    }
    Ok(())
}

fn check_inline(entry: &Entry, write: &EntryWrite, bytes: &Bytes) -> Result<(), String> {
    if bytes.len() as u64 != write.size || Hash::of(bytes) != write.hash {
        return Err("inline bytes do not match their hash".into());
    }
    let stored = StoredVersion::decode(bytes)?;
    if stored.version != entry.current || stored.previous != write.previous {
        return Err("inline version disagrees with the entry".into());
    }
    if Hash::of(stored.body.as_bytes()) != entry.body_hash {
        return Err("inline body does not match the body hash".into());
    }
    if Catalog::derive(&entry.path, &stored.metadata, &stored.body) != write.catalog {
        return Err("catalog record does not match the version".into());
    }
    Ok(())
}
