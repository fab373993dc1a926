//! History blocks and the packs of ended epochs: their canonical CBOR, and the names a
//! packed block goes by.

use bytes::Bytes;
use quire_log::{Hash, Timestamp, VersionRecord};
use serde::{Deserialize, Serialize};

use super::*;
use crate::error::{Error, Op, Result};
use quire_log::cbor;

#[derive(Serialize, Deserialize)]
struct RecordWire(Hash, Hash, Timestamp, u64, WireLocation);

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryWire {
    schema: u32,
    path: Hash,
    first: u64,
    last: u64,
    versions: Vec<RecordWire>,
}

/// Encodes the history block of the document whose path hashes to `path`: `records` are
/// contiguous versions inside one absolute block.
pub fn encode_block(path: Hash, records: &[VersionRecord]) -> Bytes {
    let first = records.first().map_or(0, |r| r.version);
    let last = records.last().map_or(0, |r| r.version);
    Bytes::from(cbor::encode(&HistoryWire {
        schema: BLOCK_SCHEMA,
        path,
        first,
        last,
        versions: records
            .iter()
            .map(|r| {
                RecordWire(
                    r.hash,
                    r.body_hash,
                    r.modified,
                    r.size,
                    wire_location(r.location),
                )
            })
            .collect(),
    }))
}

/// Decodes the history block at `key` that a document whose path hashes to `path` names for
/// versions `first..=last`.
pub fn decode_block(
    key: &str,
    bytes: &[u8],
    path: Hash,
    first: u64,
    last: u64,
) -> Result<Vec<VersionRecord>> {
    let bad = |why: String| Error::integrity(Op::Decode, key, why);
    let wire: HistoryWire = cbor::decode_strict(bytes).map_err(bad)?;
    if wire.schema != BLOCK_SCHEMA {
        return Err(bad(format!("unsupported history schema {}", wire.schema)));
    }
    if wire.path != path {
        return Err(bad("history block of another document".into()));
    }
    if wire.first != first || wire.last != last || first == 0 || block_of(first) != block_of(last) {
        return Err(bad(format!(
            "block holds versions {}..={} where {first}..={last} was named",
            wire.first, wire.last
        )));
    }
    if wire.versions.len() as u64 != last - first + 1 {
        return Err(bad("block holds the wrong number of versions".into()));
    }
    Ok(wire
        .versions
        .into_iter()
        .zip(first..)
        .map(
            |(RecordWire(hash, body_hash, modified, size, location), version)| VersionRecord {
                version,
                hash,
                body_hash,
                modified,
                size,
                location: location_of(location),
            },
        )
        .collect())
}

/// Bytes of a pack's content address: the first 12 bytes (96 bits) of its blake3.
pub const PACK_ID: usize = 12;
/// The four bytes a packed block's name starts with.
const PACKED_MAGIC: [u8; 4] = *b"qpk\x02";

/// Where a sealed epoch's pack holds a history block, as the 32 bytes a history reference
/// names the block by: `"qpk" 0x02`, the pack's id, the block's offset and length in the
/// pack (big-endian), and the first 8 bytes of the block's blake3. A reference whose bytes
/// do not start so names a block stored alone under its blake3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedBlock {
    pub pack: [u8; PACK_ID],
    pub offset: u32,
    pub len: u32,
    pub check: [u8; 8],
}

impl PackedBlock {
    /// The 32 bytes a history reference carries.
    pub fn name(&self) -> Hash {
        let mut out = [0u8; 32];
        out[..4].copy_from_slice(&PACKED_MAGIC);
        out[4..16].copy_from_slice(&self.pack);
        out[16..20].copy_from_slice(&self.offset.to_be_bytes());
        out[20..24].copy_from_slice(&self.len.to_be_bytes());
        out[24..].copy_from_slice(&self.check);
        Hash(out)
    }

    /// The packed block a reference names, if it names one.
    pub fn from_name(name: &Hash) -> Option<PackedBlock> {
        let b = &name.0;
        if b[..4] != PACKED_MAGIC {
            return None;
        }
        let len = u32::from_be_bytes([b[20], b[21], b[22], b[23]]);
        if len == 0 {
            return None;
        }
        Some(PackedBlock {
            pack: b[4..16].try_into().expect("12 bytes"),
            offset: u32::from_be_bytes([b[16], b[17], b[18], b[19]]),
            len,
            check: b[24..].try_into().expect("8 bytes"),
        })
    }

    /// Whether `bytes`, read at this block's range, are the block it names.
    pub fn holds(&self, bytes: &[u8]) -> bool {
        bytes.len() as u64 == u64::from(self.len) && Hash::of(bytes).0[..8] == self.check
    }
}

/// Packs history blocks, in the order given, into one object: the pack's bytes (the
/// blocks back to back), its id and each block's name. `None` when the pack would pass
/// 4 GiB (an offset no longer fits).
pub fn pack_blocks(blocks: &[Bytes]) -> Option<(Bytes, [u8; PACK_ID], Vec<Hash>)> {
    let total: usize = blocks.iter().map(Bytes::len).sum();
    if u32::try_from(total).is_err() {
        return None;
    }
    let mut pack = Vec::with_capacity(total);
    let mut spans = Vec::with_capacity(blocks.len());
    for block in blocks {
        spans.push((pack.len() as u32, block.len() as u32, Hash::of(block)));
        pack.extend_from_slice(block);
    }
    let id: [u8; PACK_ID] = Hash::of(&pack).0[..PACK_ID].try_into().expect("12 bytes");
    let names = spans
        .into_iter()
        .map(|(offset, len, hash)| {
            PackedBlock {
                pack: id,
                offset,
                len,
                check: hash.0[..8].try_into().expect("8 bytes"),
            }
            .name()
        })
        .collect();
    Some((Bytes::from(pack), id, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_names_round_trip_and_check_their_bytes() {
        let blocks = [Bytes::from_static(b"one block"), Bytes::from_static(b"two")];
        let (pack, id, names) = pack_blocks(&blocks).unwrap();
        assert_eq!(&pack[..], b"one blocktwo");
        assert_eq!(id[..], Hash::of(&pack).0[..PACK_ID]);
        let second = PackedBlock::from_name(&names[1]).unwrap();
        assert_eq!((second.offset, second.len), (9, 3));
        assert!(second.holds(b"two"));
        assert!(!second.holds(b"twp"));
        assert_eq!(second.name(), names[1]);
        // A block stored alone is named by its hash, which does not read as packed.
        assert_eq!(PackedBlock::from_name(&Hash::of(b"two")), None);
    }
}
