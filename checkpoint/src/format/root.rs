//! The checkpoint object, the root and its tiers: their canonical CBOR and the checks a
//! reader makes on them against each other and the grid layout.

use bytes::Bytes;
use quire_log::{Hash, WorldId};
use serde::{Deserialize, Serialize};

use super::*;
use crate::error::{Error, Op, Result};
use quire_log::cbor;

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

#[cfg(test)]
mod tests {
    use super::*;

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
