//! Shards: their entries' canonical CBOR in both schemas, and the checks a reader makes on
//! each entry against its shard and the entry before it.

use std::sync::Arc;

use bytes::Bytes;
use quire_log::metadata::{self, DocCatalog, Metadata};
use quire_log::model::HistoryBlockRef;
use quire_log::slot::MAX_VERSION_SIZE;
use quire_log::{DocPath, DocState, Hash, Timestamp, VersionRecord};
use serde::Serialize;

use super::*;
use crate::error::{Error, Op, Result};
use crate::strict::{Read as ReadResult, Reader};
use quire_log::cbor;

#[derive(Serialize)]
struct EntryWire(
    String,
    u64,
    u64,
    bool,
    Hash,
    Timestamp,
    String,
    Metadata,
    Hash,
    u64,
    WireLocation,
    Vec<(u64, u64, Hash)>,
);

#[derive(Serialize)]
struct EntryWireV2(
    String,
    u64,
    u64,
    bool,
    Hash,
    Timestamp,
    String,
    Metadata,
    Hash,
    u64,
    WireLocation,
    Vec<(u64, u64, Hash)>,
    u64,
);

#[derive(Serialize)]
struct ShardWire<E> {
    schema: u32,
    bits: u8,
    shard: u32,
    entries: Vec<E>,
}

/// One document of a shard: its state, the history references naming its versions and
/// the sequence of its last change (0 in the base tier).
pub type ShardDoc<'a> = (&'a DocState, &'a [HistoryBlockRef], u64);

/// The owned fields of an entry: path, title, metadata, location and history references.
type EntryFields = (
    String,
    String,
    Metadata,
    WireLocation,
    Vec<(u64, u64, Hash)>,
);

fn entry_fields(doc: &DocState, history: &[HistoryBlockRef]) -> EntryFields {
    (
        doc.path.as_str().to_owned(),
        doc.catalog.title().to_owned(),
        doc.catalog.metadata_map(),
        wire_location(doc.head.location),
        history.iter().map(|b| (b.first, b.last, b.hash)).collect(),
    )
}

/// Encodes shard `index` under `bits` in [`SHARD_SCHEMA`]: each document with the history
/// references that hold its versions and its last change. `docs` must be path-sorted and
/// belong to the shard.
pub fn encode_shard_entries(bits: u8, index: u32, docs: &[ShardDoc<'_>]) -> Bytes {
    let entries = docs
        .iter()
        .map(|(doc, history, changed)| {
            let (path, title, metadata, location, refs) = entry_fields(doc, history);
            EntryWireV2(
                path,
                doc.current,
                doc.first,
                doc.archived,
                doc.body_hash,
                doc.modified,
                title,
                metadata,
                doc.head.hash,
                doc.head.size,
                location,
                refs,
                *changed,
            )
        })
        .collect();
    Bytes::from(cbor::encode(&ShardWire {
        schema: SHARD_SCHEMA,
        bits,
        shard: index,
        entries,
    }))
}

/// Encodes shard `index` under `bits` in [`LEGACY_SCHEMA`], as worlds written before packs
/// hold it (nothing writes it now but tests building such worlds).
pub fn encode_shard(
    bits: u8,
    index: u32,
    docs: &[(&DocState, &[HistoryBlockRef])],
) -> Result<Bytes> {
    let entries = docs
        .iter()
        .map(|(doc, history)| {
            let (path, title, metadata, location, refs) = entry_fields(doc, history);
            EntryWire(
                path,
                doc.current,
                doc.first,
                doc.archived,
                doc.body_hash,
                doc.modified,
                title,
                metadata,
                doc.head.hash,
                doc.head.size,
                location,
                refs,
            )
        })
        .collect();
    Ok(Bytes::from(cbor::encode(&ShardWire {
        schema: LEGACY_SCHEMA,
        bits,
        shard: index,
        entries,
    })))
}

/// Decodes the shard at `key`, which a root of `schema` names as shard `index` under
/// `bits`, into documents (with no recent versions) and the sequence of each one's last
/// change (0 in a schema-1 shard). `sequence` is the checkpoint's: no version may live in a
/// later slot, and no change happen after it.
pub fn decode_shard(
    key: &str,
    bytes: &[u8],
    schema: u32,
    bits: u8,
    index: u32,
    sequence: u64,
) -> Result<Vec<(DocState, u64)>> {
    let bad = |why: String| Error::integrity(Op::Decode, key, why);
    let mut r = Reader::new(bytes);
    let (wire_schema, wire_bits, wire_shard, n) = shard_header(&mut r).map_err(bad)?;
    if wire_schema != u64::from(schema) {
        return Err(bad(format!(
            "shard schema {wire_schema} under a root of schema {schema}"
        )));
    }
    if wire_bits != u64::from(bits) || wire_shard != u64::from(index) {
        return Err(bad(format!(
            "shard labelled {wire_bits}/{wire_shard:x} where the root names {}/{}",
            bits,
            label(bits, index)
        )));
    }
    let mut docs: Vec<(DocState, u64)> = Vec::with_capacity(n);
    let mut pairs = Vec::new();
    for i in 0..n {
        let previous = docs.last().map(|(d, _)| d);
        let doc = decode_entry(&mut r, schema, bits, index, sequence, previous, &mut pairs)
            .map_err(|why| bad(format!("entry {i} {why}")))?;
        docs.push(doc);
    }
    r.finish().map_err(bad)?;
    Ok(docs)
}

/// A shard's `{schema, bits, shard, entries}` up to the entries: the three numbers and the
/// entry count.
fn shard_header(r: &mut Reader<'_>) -> ReadResult<(u64, u64, u64, usize)> {
    if r.map()? != 4 {
        return Err("a shard is a map of four fields".into());
    }
    r.key("schema")?;
    let schema = r.uint()?;
    r.key("bits")?;
    let bits = r.uint()?;
    r.key("shard")?;
    let shard = r.uint()?;
    if u32::try_from(schema).is_err()
        || u8::try_from(bits).is_err()
        || u32::try_from(shard).is_err()
    {
        return Err("shard header out of range".into());
    }
    r.key("entries")?;
    Ok((schema, bits, shard, r.array()?))
}

/// One shard entry, checked against the shard and the entry before it.
fn decode_entry<'a>(
    r: &mut Reader<'a>,
    schema: u32,
    bits: u8,
    index: u32,
    sequence: u64,
    previous: Option<&DocState>,
    pairs: &mut Vec<(&'a str, &'a str)>,
) -> ReadResult<(DocState, u64)> {
    let fields = if schema == LEGACY_SCHEMA { 12 } else { 13 };
    if r.array()? != fields {
        return Err(format!("is not an array of {fields} fields"));
    }
    let path = r.text()?;
    let at = |why: &str| format!("({path:?}): {why}");
    let doc_path = DocPath::canonical(path).map_err(|why| at(&why.to_string()))?;
    if previous.is_some_and(|p| p.path >= doc_path) {
        return Err(at("entries are not strictly path-sorted"));
    }
    if shard_of(&path_hash(path), bits) != index {
        return Err(at("path does not belong to this shard"));
    }
    let current = r.uint()?;
    let first = r.uint()?;
    let archived = r.bool()?;
    let body_hash = r.hash()?;
    let modified = Timestamp(r.uint()?);
    let title = r.text()?;
    r.text_pairs(pairs)?;
    let etag = r.hash()?;
    let size = r.uint()?;
    let location = if r.null()? {
        None
    } else {
        if r.array()? != 2 {
            return Err(at("a location is a slot and an offset"));
        }
        Some((r.uint()?, r.uint()?))
    };
    let blocks = r.array()?;
    let mut history_ref = || -> ReadResult<HistoryBlockRef> {
        if r.array()? != 3 {
            return Err(at("a history reference is three fields"));
        }
        Ok(HistoryBlockRef {
            first: r.uint()?,
            last: r.uint()?,
            hash: r.hash()?,
        })
    };
    // Most documents have one block: shared without an intermediate list.
    let history: Arc<[HistoryBlockRef]> = if blocks == 1 {
        Arc::new([history_ref()?])
    } else {
        let mut history = Vec::with_capacity(blocks.min(64));
        for _ in 0..blocks {
            history.push(history_ref()?);
        }
        Arc::from(history)
    };
    let changed = if schema == LEGACY_SCHEMA {
        0
    } else {
        r.uint()?
    };
    if changed > sequence {
        return Err(at("changed after the checkpoint"));
    }
    if current == 0 || first == 0 || first > current {
        return Err(at("version range out of order"));
    }
    if title.is_empty() || !metadata::pairs_are_normal(pairs.iter().copied()) {
        return Err(at("catalog record is not valid"));
    }
    if size > MAX_VERSION_SIZE {
        return Err(at("version exceeds the size limit"));
    }
    if let Some((slot, _)) = location
        && (slot <= quire_log::marker::GENESIS_SEQUENCE || slot > sequence)
    {
        return Err(at(
            "inline version lives in a slot the checkpoint does not cover",
        ));
    }
    if history.len() as u64 != block_of(current) - block_of(first) + 1
        || history
            .iter()
            .zip(block_ranges(first, current))
            .any(|(h, e)| (h.first, h.last) != e)
    {
        return Err(at("history blocks do not tile the retained versions"));
    }
    Ok((
        DocState {
            path: doc_path,
            current,
            first,
            archived,
            body_hash,
            modified,
            catalog: DocCatalog::new(title, pairs.iter().copied()),
            head: VersionRecord {
                version: current,
                hash: etag,
                body_hash,
                modified,
                size,
                location: location_of(location),
            },
            history,
            recent: Default::default(),
        },
        changed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(path: &str, current: u64, location: Location) -> DocState {
        let mut meta = Metadata::new();
        meta.insert("importance".into(), "0.7".into());
        meta.insert("tags".into(), "a,b".into());
        let record = VersionRecord {
            version: current,
            hash: Hash::of(path.as_bytes()),
            body_hash: Hash::of(b"body"),
            modified: Timestamp(1_767_225_600),
            size: 300,
            location,
        };
        DocState {
            path: DocPath::parse(path).unwrap(),
            current,
            first: 2,
            archived: current > 300,
            body_hash: record.body_hash,
            modified: record.modified,
            catalog: DocCatalog::new(
                "A title",
                meta.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            ),
            head: record,
            history: block_ranges(2, current)
                .map(|(first, last)| HistoryBlockRef {
                    first,
                    last,
                    hash: Hash::of(&last.to_be_bytes()),
                })
                .collect(),
            recent: Default::default(),
        }
    }

    #[test]
    fn shards_round_trip_and_refuse_other_spellings() {
        let a = sample(
            "/a.md",
            3,
            Location::Inline {
                slot: 7,
                offset: 90,
            },
        );
        let b = sample("/b/c.md", 600, Location::Blob);
        let docs = [(&a, &a.history[..]), (&b, &b.history[..])];
        let changes = [(&a, &a.history[..], 5), (&b, &b.history[..], 9)];
        let bytes = encode_shard_entries(0, 0, &changes);
        assert_eq!(
            decode_shard("k", &bytes, SHARD_SCHEMA, 0, 0, 9).unwrap(),
            [(a.clone(), 5), (b.clone(), 9)]
        );
        // A shard of the other schema than its root's.
        assert!(
            decode_shard("k", &bytes, LEGACY_SCHEMA, 0, 0, 9)
                .unwrap_err()
                .is_integrity()
        );
        let legacy = encode_shard(0, 0, &docs).unwrap();
        assert_eq!(
            decode_shard("k", &legacy, LEGACY_SCHEMA, 0, 0, 9).unwrap(),
            [(a.clone(), 0), (b.clone(), 0)]
        );
        let bytes = legacy;
        // The same shard under another label, or past the checkpoint's slots.
        assert!(
            decode_shard("k", &bytes, LEGACY_SCHEMA, 1, 0, 9)
                .unwrap_err()
                .is_integrity()
        );
        assert!(
            decode_shard("k", &bytes, LEGACY_SCHEMA, 0, 0, 6)
                .unwrap_err()
                .is_integrity()
        );
        // The schema number (1) spelled in two bytes instead of one.
        let schema_at = bytes.windows(7).position(|w| w == b"\x66schema").unwrap() + 7;
        assert_eq!(bytes[schema_at], 0x01);
        let mut long = bytes[..schema_at].to_vec();
        long.extend_from_slice(&[0x18, 0x01]);
        long.extend_from_slice(&bytes[schema_at + 1..]);
        assert!(
            decode_shard("k", &long, LEGACY_SCHEMA, 0, 0, 9)
                .unwrap_err()
                .is_integrity()
        );
        let mut trailing = bytes.to_vec();
        trailing.push(0xf6);
        assert!(
            decode_shard("k", &trailing, LEGACY_SCHEMA, 0, 0, 9)
                .unwrap_err()
                .is_integrity()
        );
        assert!(decode_shard("k", &bytes[..bytes.len() - 1], LEGACY_SCHEMA, 0, 0, 9).is_err());
    }
}
