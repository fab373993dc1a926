//! The checkpoint objects, their canonical CBOR encodings and every check a reader makes on
//! one object alone. See `docs/FORMAT.md` for the layout and the reasons behind it.
//!
//! - **checkpoint** `{schema, world, sequence, root, tip, documents}`;
//! - **root** `{schema, world, documents, widths, tiers, sealed}`: the base tier, the runs
//!   (one per grid point of the narrower width since the base's; schema 2 has one middle
//!   tier instead) and the top tier, each `{grid, cut, documents, bits, shards}` with exactly
//!   `2^bits` shard references (`null` for an empty shard);
//! - **shard** `{schema, bits, shard, entries}`: entries strictly path-sorted, each an array
//!   `[path, current, first, archived, body_hash, modified, title, metadata, etag, size,
//!   location, history]`, every path hashing into this shard;
//! - **history block** `{schema, path, first, last, versions}`: the version records
//!   `first..=last` of one document (named by its path hash), inside one absolute block of
//!   [`HISTORY_BLOCK`] versions, each an array `[hash, body_hash, modified, size, location]`.
//!
//! A location is `[slot, offset]` for version bytes inline in a slot (read with a range get
//! of `size` bytes at `offset`), or `null` for a content-addressed blob.

use std::sync::Arc;

use bytes::Bytes;
use quire_log::metadata::{self, DocCatalog, Metadata};
use quire_log::model::HistoryBlockRef;
use quire_log::slot::MAX_VERSION_SIZE;
use quire_log::{DocPath, DocState, Hash, Location, Timestamp, VersionRecord, WorldId};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Op, Result};
use crate::strict::{Read as ReadResult, Reader};
use quire_log::cbor;

/// The schema number of the roots this format writes: schema 3 (between the base and the top
/// tier, one run per grid point of the narrower width, each written once).
pub const SCHEMA: u32 = 3;
/// The schema of roots with one middle tier rebuilt at each grid point (history packed by
/// epoch, a tier's shard bits from its own count, entries naming their last change): read,
/// and written until a checkpoint can write runs (see [`Root::runs`]).
pub const PACKED_SCHEMA: u32 = 2;
/// The schema of the shards roots of [`PACKED_SCHEMA`] and [`SCHEMA`] name: a run's shard is
/// encoded as a middle tier's was.
pub const SHARD_SCHEMA: u32 = 2;
/// The schema of roots and shards written before packs: read, and moved to a later schema by
/// the next checkpoint. Checkpoint objects and history blocks keep this number: their bytes
/// did not change.
pub const LEGACY_SCHEMA: u32 = 1;
/// The schema number of checkpoint objects and history blocks.
pub const BLOCK_SCHEMA: u32 = 1;
/// The widest history epoch (in sequences): the history blocks of the documents whose last
/// change falls in one epoch are packed together once the epoch ends.
pub const EPOCH_WIDTH: u64 = 1024;
/// About how many documents one shard holds.
pub const DOCS_PER_SHARD: u64 = 256;
/// The most shard bits: at most 65,536 shards per tier.
pub const MAX_SHARD_BITS: u8 = 16;
/// The most documents a world may hold.
pub const MAX_DOCUMENTS: u64 = DOCS_PER_SHARD << MAX_SHARD_BITS;
/// Versions per absolute history block: block `k` holds versions `256k+1..=256(k+1)`.
pub const HISTORY_BLOCK: u64 = 256;
/// Tiers in a schema-1 or schema-2 root: the base, the middle and the top tier. A root of
/// [`SCHEMA`] has the base, its runs and the top; either is laid out by `TIERS - 1` widths.
pub const TIERS: usize = 3;
/// The grid widths (in sequences) a new world gets: the base tier's, and the runs' (a
/// schema-2 world's middle tier's).
pub const DEFAULT_WIDTHS: [u64; TIERS - 1] = [1 << 19, 1 << 13];
/// The most runs a root may hold: a world whose base width is more than `MAX_RUNS + 1`
/// times its run width keeps schema 2.
pub const MAX_RUNS: u64 = 1023;

/// The shard bits for `documents`: the smallest `b` ≤ 16 with `documents ≤ 256·2^b`.
pub fn shard_bits(documents: u64) -> u8 {
    let mut bits = 0;
    while bits < MAX_SHARD_BITS && documents > DOCS_PER_SHARD << bits {
        bits += 1;
    }
    bits
}

/// The blake3 hash of a path's bytes.
pub fn path_hash(path: &str) -> Hash {
    Hash::of(path.as_bytes())
}

/// The shard of a path hash under `bits`: the top `bits` bits of its first 32 bits.
pub fn shard_of(hash: &Hash, bits: u8) -> u32 {
    if bits == 0 {
        return 0;
    }
    let top = u32::from_be_bytes([hash.0[0], hash.0[1], hash.0[2], hash.0[3]]);
    top >> (32 - u32::from(bits))
}

/// A shard's label: its index in lowercase hex, `ceil(bits/4)` digits (at least one).
pub fn label(bits: u8, index: u32) -> String {
    let width = usize::from(bits.div_ceil(4).max(1));
    format!("{index:0width$x}")
}

/// The history-epoch width of a world with tier `widths`: [`EPOCH_WIDTH`], or the middle
/// tier's width if smaller, so every tier grid point is an epoch grid point.
pub fn epoch_width(widths: &[u64; TIERS - 1]) -> u64 {
    EPOCH_WIDTH.min(widths[TIERS - 2])
}

/// The grid point of a tier of `width` at `sequence`: the largest multiple of `width` not
/// above it.
pub fn grid(width: u64, sequence: u64) -> u64 {
    sequence / width * width
}

/// Whether `widths` allow runs: at most [`MAX_RUNS`] run grid points per base period.
pub fn runs_fit(widths: &[u64; TIERS - 1]) -> bool {
    widths[1] > 0 && widths[0] / widths[1] <= MAX_RUNS + 1
}

/// How many runs a root of `widths` at `sequence` holds: the grid points of the run width
/// after the base tier's, up to the sequence.
pub fn run_count(widths: &[u64; TIERS - 1], sequence: u64) -> u64 {
    (grid(widths[1], sequence) - grid(widths[0], sequence)) / widths[1]
}

/// The grid points of a root's tiers at `sequence`, base first and the top (`sequence`
/// itself) last: with `runs`, one per run grid point after the base's; else the middle
/// tier's.
pub fn tier_grids(widths: &[u64; TIERS - 1], sequence: u64, runs: bool) -> Vec<u64> {
    let base = grid(widths[0], sequence);
    let mut grids = vec![base];
    if runs {
        grids.extend((1..=run_count(widths, sequence)).map(|k| base + k * widths[1]));
    } else {
        grids.push(grid(widths[1], sequence));
    }
    grids.push(sequence);
    grids
}

/// The absolute history block holding `version` (versions start at 1).
pub fn block_of(version: u64) -> u64 {
    (version - 1) / HISTORY_BLOCK
}

/// The versions of absolute block `block` a document retaining `first..=current` keeps.
pub fn block_range(block: u64, first: u64, current: u64) -> (u64, u64) {
    let lo = (block * HISTORY_BLOCK + 1).max(first);
    let hi = ((block + 1) * HISTORY_BLOCK).min(current);
    (lo, hi)
}

/// The block ranges a document retaining `first..=current` has, oldest first.
pub fn block_ranges(first: u64, current: u64) -> impl Iterator<Item = (u64, u64)> {
    (block_of(first)..=block_of(current)).map(move |b| block_range(b, first, current))
}

type WireLocation = Option<(u64, u64)>;

fn wire_location(location: Location) -> WireLocation {
    match location {
        Location::Inline { slot, offset } => Some((slot, offset)),
        Location::Blob => None,
    }
}

fn location_of(wire: WireLocation) -> Location {
    match wire {
        Some((slot, offset)) => Location::Inline { slot, offset },
        None => Location::Blob,
    }
}

/// A checkpoint: the world through `sequence`, held by `root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub world: WorldId,
    pub sequence: u64,
    /// The hash of the root object's bytes.
    pub root: Hash,
    /// The hash the next slot names as `prev`: the blake3 of the bytes of the slot ending at
    /// `sequence` (the genesis tip for checkpoint zero).
    pub tip: Hash,
    pub documents: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckpointWire {
    schema: u32,
    world: WorldId,
    sequence: u64,
    root: Hash,
    tip: Hash,
    documents: u64,
}

impl Checkpoint {
    pub fn encode(&self) -> Bytes {
        Bytes::from(cbor::encode(&CheckpointWire {
            schema: BLOCK_SCHEMA,
            world: self.world,
            sequence: self.sequence,
            root: self.root,
            tip: self.tip,
            documents: self.documents,
        }))
    }

    /// Decodes the checkpoint stored at `key`, which names `sequence`.
    pub fn decode(key: &str, sequence: u64, bytes: &[u8]) -> Result<Checkpoint> {
        let bad = |why: String| Error::integrity(Op::Decode, key, why);
        let wire: CheckpointWire = cbor::decode_strict(bytes).map_err(bad)?;
        if wire.schema != BLOCK_SCHEMA {
            return Err(bad(format!(
                "unsupported checkpoint schema {}",
                wire.schema
            )));
        }
        if wire.sequence != sequence {
            return Err(bad(format!(
                "checkpoint names sequence {} under the key of {sequence}",
                wire.sequence
            )));
        }
        if wire.documents > MAX_DOCUMENTS {
            return Err(bad(format!("{} documents is too many", wire.documents)));
        }
        Ok(Checkpoint {
            world: wire.world,
            sequence: wire.sequence,
            root: wire.root,
            tip: wire.tip,
            documents: wire.documents,
        })
    }
}

/// One tier of a root: documents whose last change falls in the tier's range, as they stood
/// at the tier's cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// The grid point the tier was cut at (the checkpoint's sequence for the top tier).
    pub grid: u64,
    /// The sequence of the state the tier holds: the end of the slot holding `grid` (1 for a
    /// grid point at or before genesis).
    pub cut: u64,
    /// Entries in the tier.
    pub documents: u64,
    /// Shard bits: from the world's document count at the cut.
    pub bits: u8,
    /// `2^bits` shard references, `None` for an empty shard.
    pub shards: Vec<Option<Hash>>,
}

impl Tier {
    /// An empty tier cut at `grid` (state `cut`) of a world holding `world_documents` there.
    pub fn empty(grid: u64, cut: u64, world_documents: u64) -> Tier {
        let bits = shard_bits(world_documents);
        Tier {
            grid,
            cut,
            documents: 0,
            bits,
            shards: vec![None; 1 << bits],
        }
    }
}

/// A root: the world's documents, in tiers of shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    pub world: WorldId,
    pub documents: u64,
    /// The grid widths of the tiers below the top, fixed for a world at genesis.
    pub widths: [u64; TIERS - 1],
    /// Base first, top last: [`TIERS`] tiers, or with `runs` the base, each run and the top.
    pub tiers: Vec<Tier>,
    /// Schema 3: between the base and the top tier lie runs, one per grid point of
    /// `widths[1]` after the base's, each holding the documents whose last change falls
    /// after the run before it (or the base) as they stood at its cut. A run is written
    /// once, when a checkpoint first passes its grid point, and named unchanged until the
    /// base moves. Else (schemas 1 and 2) one middle tier holds every change since the base.
    pub runs: bool,
    /// Schema 2: the cut of the newest history-epoch grid point at or before the
    /// checkpoint (the end of the slot holding it; 1 at or before genesis): every epoch
    /// ending there or before is sealed into packs. `None`: a schema-1 root.
    pub sealed: Option<u64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootWire {
    schema: u32,
    world: WorldId,
    documents: u64,
    widths: Vec<u64>,
    tiers: Vec<Tier>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootWireV2 {
    schema: u32,
    world: WorldId,
    documents: u64,
    widths: Vec<u64>,
    tiers: Vec<Tier>,
    sealed: u64,
}

/// Whether `widths` is a usable tier layout: powers of two, each dividing the one below.
pub fn widths_are_valid(widths: &[u64; TIERS - 1]) -> bool {
    widths.iter().all(|w| w.is_power_of_two() && *w >= 2) && widths.windows(2).all(|p| p[0] >= p[1])
}

impl RootWire {
    fn with_sealed(self, sealed: Option<u64>) -> (RootWire, Option<u64>) {
        (self, sealed)
    }
}

impl Root {
    pub fn encode(&self) -> Bytes {
        match self.sealed {
            Some(sealed) => Bytes::from(cbor::encode(&RootWireV2 {
                schema: if self.runs { SCHEMA } else { PACKED_SCHEMA },
                world: self.world,
                documents: self.documents,
                widths: self.widths.to_vec(),
                tiers: self.tiers.clone(),
                sealed,
            })),
            None => Bytes::from(cbor::encode(&RootWire {
                schema: LEGACY_SCHEMA,
                world: self.world,
                documents: self.documents,
                widths: self.widths.to_vec(),
                tiers: self.tiers.clone(),
            })),
        }
    }

    /// The schema of the root.
    pub fn schema(&self) -> u32 {
        match (self.sealed, self.runs) {
            (None, _) => LEGACY_SCHEMA,
            (Some(_), false) => PACKED_SCHEMA,
            (Some(_), true) => SCHEMA,
        }
    }

    /// The schema of the shards the root names.
    pub fn shard_schema(&self) -> u32 {
        if self.sealed.is_some() {
            SHARD_SCHEMA
        } else {
            LEGACY_SCHEMA
        }
    }

    /// Decodes a root and checks it against the checkpoint naming it.
    pub fn decode(key: &str, bytes: &[u8], checkpoint: &Checkpoint) -> Result<Root> {
        let bad = |why: String| Error::integrity(Op::Decode, key, why);
        let wire = match cbor::decode_strict::<RootWireV2>(bytes) {
            Ok(v2) if v2.schema == SCHEMA || v2.schema == PACKED_SCHEMA => RootWire {
                schema: v2.schema,
                world: v2.world,
                documents: v2.documents,
                widths: v2.widths,
                tiers: v2.tiers,
            }
            .with_sealed(Some(v2.sealed)),
            Ok(v2) => return Err(bad(format!("unsupported root schema {}", v2.schema))),
            Err(_) => {
                let v1: RootWire = cbor::decode_strict(bytes).map_err(bad)?;
                if v1.schema != LEGACY_SCHEMA {
                    return Err(bad(format!("unsupported root schema {}", v1.schema)));
                }
                v1.with_sealed(None)
            }
        };
        let (wire, sealed) = wire;
        let runs = wire.schema == SCHEMA;
        let widths: [u64; TIERS - 1] = wire
            .widths
            .as_slice()
            .try_into()
            .map_err(|_| bad(format!("{} tier widths", wire.widths.len())))?;
        let root = Root {
            world: wire.world,
            documents: wire.documents,
            widths,
            tiers: wire.tiers,
            sealed,
            runs,
        };
        root.check(checkpoint).map_err(bad)?;
        Ok(root)
    }

    fn check(&self, checkpoint: &Checkpoint) -> Result<(), String> {
        let s = checkpoint.sequence;
        if self.world != checkpoint.world {
            return Err("root of another world".into());
        }
        if self.documents != checkpoint.documents || self.documents > MAX_DOCUMENTS {
            return Err(format!(
                "root holds {} documents, checkpoint says {}",
                self.documents, checkpoint.documents
            ));
        }
        if !widths_are_valid(&self.widths) {
            return Err(format!("invalid tier widths {:?}", self.widths));
        }
        if self.runs && !runs_fit(&self.widths) {
            return Err(format!("runs under tier widths {:?}", self.widths));
        }
        let expected = if self.runs {
            run_count(&self.widths, s) as usize + 2
        } else {
            TIERS
        };
        if self.tiers.len() != expected {
            return Err(format!("{} tiers, not {expected}", self.tiers.len()));
        }
        let grids = tier_grids(&self.widths, s, self.runs);
        let top = self.tiers.len() - 1;
        let mut previous: Option<&Tier> = None;
        for (j, tier) in self.tiers.iter().enumerate() {
            let expected_grid = grids[j];
            if tier.grid != expected_grid {
                return Err(format!(
                    "tier {j} cut at grid {} for sequence {s}",
                    tier.grid
                ));
            }
            let low = tier.grid.max(quire_log::marker::GENESIS_SEQUENCE);
            let slot_span = quire_log::slot::MAX_SLOT_ENTRIES as u64;
            if tier.cut < low || tier.cut > s || tier.cut - low >= slot_span {
                return Err(format!(
                    "tier {j} cut {} does not fit grid {}",
                    tier.cut, tier.grid
                ));
            }
            if j == top && tier.cut != s {
                return Err("the top tier is not cut at the checkpoint".into());
            }
            if self.sealed.is_some() && tier.bits != shard_bits(tier.documents) {
                return Err(format!(
                    "tier {j}: {} shard bits for {} documents",
                    tier.bits, tier.documents
                ));
            }
            if tier.bits > MAX_SHARD_BITS || tier.shards.len() != 1usize << tier.bits {
                return Err(format!(
                    "tier {j}: {} shard references for {} bits",
                    tier.shards.len(),
                    tier.bits
                ));
            }
            if tier.documents > DOCS_PER_SHARD << tier.bits || tier.documents > self.documents {
                return Err(format!("tier {j}: {} documents do not fit", tier.documents));
            }
            if tier.documents == 0 && tier.shards.iter().any(Option::is_some) {
                return Err(format!("tier {j} is empty but names shards"));
            }
            if let Some(p) = previous
                && (tier.cut < p.cut || (self.sealed.is_none() && tier.bits < p.bits))
            {
                return Err(format!("tier {j} is cut before the tier below it"));
            }
            previous = Some(tier);
        }
        match self.sealed {
            None if self.tiers[top].bits != shard_bits(self.documents) => {
                return Err("top tier bits do not match the document count".into());
            }
            None => {}
            Some(sealed) => {
                let low =
                    grid(epoch_width(&self.widths), s).max(quire_log::marker::GENESIS_SEQUENCE);
                let slot_span = quire_log::slot::MAX_SLOT_ENTRIES as u64;
                if sealed < low || sealed > s || sealed - low >= slot_span {
                    return Err(format!("sealed cut {sealed} does not fit sequence {s}"));
                }
            }
        }
        Ok(())
    }
}

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
    fn shard_math_matches_the_layout() {
        for (n, bits) in [
            (0, 0),
            (256, 0),
            (257, 1),
            (512, 1),
            (513, 2),
            (100_000, 9),
            (1_000_000, 12),
            (u64::MAX, 16),
        ] {
            assert_eq!(shard_bits(n), bits, "{n}");
        }
        assert_eq!(label(0, 0), "0");
        assert_eq!(label(4, 5), "5");
        assert_eq!(label(12, 0xabc), "abc");
        assert_eq!(label(9, 0x1ff), "1ff");
        let h = Hash([0xff; 32]);
        assert_eq!(shard_of(&h, 0), 0);
        assert_eq!(shard_of(&h, 12), 0xfff);
        assert_eq!(shard_of(&h, 16), 0xffff);
    }

    #[test]
    fn blocks_are_absolute_and_clipped() {
        assert_eq!(block_of(1), 0);
        assert_eq!(block_of(256), 0);
        assert_eq!(block_of(257), 1);
        assert_eq!(
            block_ranges(200, 600).collect::<Vec<_>>(),
            [(200, 256), (257, 512), (513, 600)]
        );
        assert_eq!(block_ranges(3, 3).collect::<Vec<_>>(), [(3, 3)]);
        assert_eq!(grid(64, 63), 0);
        assert_eq!(grid(64, 130), 128);
    }

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

    #[test]
    fn checkpoint_round_trips_and_refuses_other_spellings() {
        let c = Checkpoint {
            world: WorldId([1; 16]),
            sequence: 9,
            root: Hash::of(b"root"),
            tip: Hash::of(b"tip"),
            documents: 3,
        };
        let bytes = c.encode();
        assert_eq!(Checkpoint::decode("k", 9, &bytes).unwrap(), c);
        assert!(
            Checkpoint::decode("k", 10, &bytes)
                .unwrap_err()
                .is_integrity()
        );
        let mut trailing = bytes.to_vec();
        trailing.push(0);
        assert!(
            Checkpoint::decode("k", 9, &trailing)
                .unwrap_err()
                .is_integrity()
        );
    }

    /// A root of runs at `sequence` under widths `[64, 16]`: the base, one run per grid
    /// point of 16 after the base's, the top; each run holding one document.
    fn runs_root(sequence: u64) -> (Root, Checkpoint) {
        let widths = [64, 16];
        let grids = tier_grids(&widths, sequence, true);
        let last = grids.len() - 1;
        let tiers: Vec<Tier> = grids
            .iter()
            .enumerate()
            .map(|(j, &g)| Tier {
                documents: u64::from(j > 0 && j < last),
                shards: vec![(j > 0 && j < last).then(|| Hash::of(&[j as u8]))],
                ..Tier::empty(g, if j == last { sequence } else { g.max(1) }, 0)
            })
            .collect();
        let root = Root {
            world: WorldId([1; 16]),
            documents: (last - 1) as u64,
            widths,
            tiers,
            sealed: Some(grid(16, sequence).max(1)),
            runs: true,
        };
        let checkpoint = Checkpoint {
            world: root.world,
            sequence,
            root: Hash::of(&root.encode()),
            tip: Hash::of(b"tip"),
            documents: root.documents,
        };
        (root, checkpoint)
    }

    #[test]
    fn a_root_of_runs_round_trips_and_holds_exactly_its_grid_points() {
        assert_eq!(tier_grids(&[64, 16], 200, true), vec![192, 200]);
        assert_eq!(
            tier_grids(&[64, 16], 250, true),
            vec![192, 208, 224, 240, 250]
        );
        assert_eq!(tier_grids(&[64, 16], 250, false), vec![192, 240, 250]);
        let (root, checkpoint) = runs_root(250);
        assert_eq!(root.tiers.len(), 5);
        let bytes = root.encode();
        let decoded = Root::decode("k", &bytes, &checkpoint).unwrap();
        assert_eq!(decoded, root);
        assert_eq!(
            (decoded.schema(), decoded.shard_schema()),
            (SCHEMA, SHARD_SCHEMA)
        );

        let refused = |root: &Root, why: &str| {
            let bytes = root.encode();
            let err = Root::decode("k", &bytes, &checkpoint).unwrap_err();
            assert!(err.is_integrity() && err.to_string().contains(why), "{err}");
        };
        let mut missing = root.clone();
        missing.tiers.remove(2);
        refused(&missing, "4 tiers, not 5");
        let mut shifted = root.clone();
        shifted.tiers[2].grid += 16;
        refused(&shifted, "tier 2 cut at grid");
        let mut unordered = root.clone();
        unordered.tiers.swap(1, 2);
        refused(&unordered, "cut at grid");
        let mut wide = root.clone();
        wide.widths = [1 << 20, 2];
        refused(&wide, "runs under tier widths");
        // The same tiers read as schema 2 are refused: it has one middle tier.
        let mut middle = root.clone();
        middle.runs = false;
        refused(&middle, "5 tiers, not 3");
    }
}
