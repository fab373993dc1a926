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
//!
//! One file per kind of object: `root` (the checkpoint, the root and its tiers), `shard`
//! (shard entries in both schemas) and `block` (history blocks and packs). This file keeps
//! the schema numbers, the layout constants and the grid and shard arithmetic they share.

use quire_log::{Hash, Location};

mod block;
mod root;
mod shard;

pub use block::*;
pub use root::*;
pub use shard::*;

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

pub(crate) type WireLocation = Option<(u64, u64)>;

pub(crate) fn wire_location(location: Location) -> WireLocation {
    match location {
        Location::Inline { slot, offset } => Some((slot, offset)),
        Location::Blob => None,
    }
}

pub(crate) fn location_of(wire: WireLocation) -> Location {
    match wire {
        Some((slot, offset)) => Location::Inline { slot, offset },
        None => Location::Blob,
    }
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
}
