//! The world marker and the genesis tip.
//!
//! The marker (`<prefix>marker`) names the world and the format; it is written once, after
//! the genesis checkpoint, and never on the commit path. A world starts at sequence
//! [`GENESIS_SEQUENCE`] (checkpoint zero, an empty world) whose tip is [`genesis_tip`]: the
//! first slot (sequence 2) names it as its `prev`. The tip is derived from the world id, so a
//! slot of one world can never chain onto another world's genesis.

use serde::{Deserialize, Serialize};

use crate::cbor;
use crate::ids::{Hash, WorldId};

/// The sequence of checkpoint zero; the first slot is `GENESIS_SEQUENCE + 1`.
pub const GENESIS_SEQUENCE: u64 = 1;
/// The marker's schema number.
pub const MARKER_SCHEMA: u32 = 1;
/// The marker's format name: what a reader checks before trusting anything else.
pub const MARKER_FORMAT: &str = "quire-world";

/// The hash the first slot of `world` names as its predecessor.
pub fn genesis_tip(world: WorldId) -> Hash {
    Hash(blake3::derive_key("quire world genesis tip v1", &world.0))
}

/// The world marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    pub world: WorldId,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MarkerWire {
    schema: u32,
    format: String,
    world: WorldId,
}

impl Marker {
    pub fn encode(&self) -> Vec<u8> {
        cbor::encode(&MarkerWire {
            schema: MARKER_SCHEMA,
            format: MARKER_FORMAT.into(),
            world: self.world,
        })
    }

    /// Decodes a marker strictly; the error says why the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Result<Marker, String> {
        let wire: MarkerWire = cbor::decode_strict(bytes)?;
        if wire.format != MARKER_FORMAT {
            return Err(format!("format {:?} is not {MARKER_FORMAT:?}", wire.format));
        }
        if wire.schema != MARKER_SCHEMA {
            return Err(format!("unsupported marker schema {}", wire.schema));
        }
        Ok(Marker { world: wire.world })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trips_and_tips_differ_per_world() {
        let a = Marker {
            world: WorldId([1; 16]),
        };
        assert_eq!(Marker::decode(&a.encode()).unwrap(), a);
        let mut bad = a.encode();
        bad.push(0);
        assert!(Marker::decode(&bad).is_err());
        assert!(Marker::decode(b"{\"schema\":2}").is_err());
        assert_ne!(genesis_tip(WorldId([1; 16])), genesis_tip(WorldId([2; 16])));
    }
}
