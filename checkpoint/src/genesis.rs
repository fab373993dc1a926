//! A new world: checkpoint zero (an empty root at sequence 1 whose tip is the world's
//! genesis tip) and then the marker, last, so a marker always has a checkpoint. Every object
//! is a function of the world id and the tier widths, so racing creators write the same
//! bytes. A prefix holding anything else is refused: a wrong bucket or prefix must not become
//! a world.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use quire_blob::BlobStore;
use quire_log::marker::{GENESIS_SEQUENCE, Marker, genesis_tip};
use quire_log::{Hash, WorldId, keys as log_keys};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::format::{Checkpoint, Root, TIERS, Tier, widths_are_valid};
use crate::keys::{checkpoint_key, root_key};
use crate::objects::{Fence, put, put_addressed};

/// The genesis root and checkpoint of `world`.
pub fn genesis_objects(world: WorldId, widths: [u64; TIERS - 1]) -> (Root, Checkpoint) {
    let mut tiers: Vec<Tier> = widths
        .iter()
        .map(|_| Tier::empty(0, GENESIS_SEQUENCE, 0))
        .collect();
    tiers.push(Tier::empty(GENESIS_SEQUENCE, GENESIS_SEQUENCE, 0));
    let root = Root {
        world,
        documents: 0,
        widths,
        tiers,
    };
    let checkpoint = Checkpoint {
        world,
        sequence: GENESIS_SEQUENCE,
        root: Hash::of(&root.encode()),
        tip: genesis_tip(world),
        documents: 0,
    };
    (root, checkpoint)
}

/// Creates `world` under `prefix` unless it exists. Refuses another world's marker and a
/// prefix holding objects that are not this world's genesis.
pub async fn create_world(
    store: &dyn BlobStore,
    prefix: &str,
    world: WorldId,
    widths: [u64; TIERS - 1],
) -> Result<()> {
    let op = Op::Genesis;
    let mkey = log_keys::marker_key(prefix);
    if !widths_are_valid(&widths) {
        return Err(Error::new(
            op,
            mkey,
            ErrorKind::Precondition,
            format!("invalid tier widths {widths:?}"),
        ));
    }
    let marker = Bytes::from(Marker { world }.encode());
    match store.get(&mkey).await {
        Ok(found) if found.data == marker => return Ok(()),
        Ok(found) => {
            let why = match Marker::decode(&found.data) {
                Ok(other) => format!("the prefix holds world {}", other.world),
                Err(why) => format!("the marker is not a world marker: {why}"),
            };
            return Err(Error::new(op, mkey, ErrorKind::Precondition, why));
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(Error::storage(op, e)),
    }
    let (root, checkpoint) = genesis_objects(world, widths);
    let rkey = root_key(prefix, &checkpoint.root);
    let ckey = checkpoint_key(prefix, GENESIS_SEQUENCE);
    let listed = quire_blob::list_all(store, prefix, "")
        .await
        .map_err(|e| Error::storage(op, e))?;
    if let Some(foreign) = listed.iter().find(|a| a.key != rkey && a.key != ckey) {
        return Err(Error::new(
            op,
            foreign.key.clone(),
            ErrorKind::Precondition,
            "the prefix holds objects but no world marker",
        ));
    }
    // Genesis objects are never dropped (`drop` keeps checkpoint zero, so a whole replay
    // can always be asked for), so the fence never needs to rewrite them.
    let fence = Fence::new(SystemTime::now(), Duration::MAX);
    put_addressed(store, &rkey, root.encode(), &fence, op).await?;
    put(store, &ckey, checkpoint.encode(), &fence, op).await?;
    put(store, &mkey, marker, &fence, op).await?;
    Ok(())
}
