//! A new world: checkpoint zero (an empty root at sequence 1 whose tip is the world's
//! genesis tip) and then the marker, last, so a marker always has a checkpoint. Every object
//! is a function of the world id and the tier widths. Checkpoint zero is created first and
//! decides the world when several openers race on an empty prefix: the others read it and
//! write the same root and marker, so all join one world. A prefix holding anything that is
//! not a world's is refused: a wrong bucket or prefix must not become a world.

use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use quire_blob::BlobStore;
use quire_log::marker::{GENESIS_SEQUENCE, Marker, genesis_tip};
use quire_log::{Clock, Hash, SystemClock, WorldId, keys as log_keys};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::format::{Checkpoint, Root, TIERS, Tier, widths_are_valid};
use crate::keys::{checkpoint_key, root_key};
use crate::objects::{Fence, get_retrying, put, put_addressed, retrying};

/// The genesis root and checkpoint of `world`.
pub fn genesis_objects(world: WorldId, widths: [u64; TIERS - 1]) -> (Root, Checkpoint) {
    let mut tiers: Vec<Tier> = widths
        .iter()
        .map(|_| Tier::empty(0, GENESIS_SEQUENCE, 0))
        .collect();
    tiers.push(Tier::empty(GENESIS_SEQUENCE, GENESIS_SEQUENCE, 0));
    // The empty root keeps the schema-1 layout: checkpoint zero is the same object
    // whichever version created the world.
    let root = Root {
        world,
        documents: 0,
        widths,
        tiers,
        sealed: None,
        runs: false,
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

/// What [`join_or_create_world`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Joined {
    /// The prefix holds a complete world (found, completed or created now).
    World(WorldId),
    /// The prefix holds this format's objects but no marker, and nothing here can complete
    /// them into a world yet (a creator is between its writes, or runs another layout):
    /// look again later. The keys are named.
    Pending(String),
}

/// Whether `key` (under `prefix`) is one of this format's objects.
fn is_world_object(prefix: &str, key: &str) -> bool {
    let Some(name) = key.strip_prefix(prefix) else {
        return false;
    };
    name == "marker"
        || [
            "log/",
            "blobs/",
            crate::keys::CHECKPOINT_DIR,
            crate::keys::ROOT_DIR,
            crate::keys::SHARD_DIR,
            crate::keys::HISTORY_DIR,
        ]
        .iter()
        .any(|dir| name.starts_with(dir))
}

/// Joins the world under `prefix`, or creates `proposed` there when the prefix is empty.
/// Every opener of one empty prefix converges on one world, whatever world it proposed:
/// checkpoint zero is created first with create-if-absent, so exactly one creator's
/// checkpoint takes the name; every opener (the winner, the losers, a later one finding a
/// creator that stopped half-way) then derives that world's root and marker from it and
/// writes them with identical bytes, the marker last, so a marker always has a complete
/// checkpoint. A prefix holding objects of another kind is refused, naming them. Each read
/// retries transient errors (throttled, unavailable, a lost response) with bounded backoff
/// on tokio's clock, as every checkpoint read does.
pub async fn join_or_create_world(
    store: &dyn BlobStore,
    prefix: &str,
    proposed: WorldId,
    widths: [u64; TIERS - 1],
    clock: &dyn Clock,
) -> Result<Joined> {
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
    match get_retrying(store, &mkey).await {
        Ok(found) => {
            return Marker::decode(&found.data)
                .map(|m| Joined::World(m.world))
                .map_err(|why| {
                    Error::new(
                        op,
                        mkey,
                        ErrorKind::Precondition,
                        format!("the marker is not a world marker: {why}"),
                    )
                });
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(Error::storage(op, e)),
    }
    // Genesis objects are never dropped (`drop` keeps checkpoint zero, so a whole replay
    // can always be asked for), so the fence never needs to rewrite them.
    let fence = Fence::new(
        UNIX_EPOCH + Duration::from_secs(clock.now().0),
        Duration::MAX,
    );
    let ckey = checkpoint_key(prefix, GENESIS_SEQUENCE);
    let mut looks = 0;
    let checkpoint = loop {
        looks += 1;
        match get_retrying(store, &ckey).await {
            Ok(found) => break Checkpoint::decode(&ckey, GENESIS_SEQUENCE, &found.data)?,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(Error::storage(op, e)),
        }
        let listed = retrying(
            || quire_blob::list_all(store, prefix, ""),
            |e: &quire_blob::Error| Some(e.kind()),
        )
        .await
        .map_err(|e| Error::storage(op, e))?;
        let foreign: Vec<&str> = listed
            .iter()
            .map(|a| a.key.as_str())
            .filter(|k| !is_world_object(prefix, k))
            .collect();
        if !foreign.is_empty() {
            return Err(Error::new(
                op,
                foreign[0],
                ErrorKind::Precondition,
                format!(
                    "the prefix holds objects that are not a world's: {}",
                    name_some(&foreign)
                ),
            ));
        }
        // Another opener created checkpoint zero since it was read: read it again.
        if looks < 3 && listed.iter().any(|a| a.key == ckey) {
            continue;
        }
        if !listed.is_empty() {
            let keys: Vec<&str> = listed.iter().map(|a| a.key.as_str()).collect();
            return Ok(Joined::Pending(format!(
                "world objects without a marker or checkpoint zero: {}",
                name_some(&keys)
            )));
        }
        let (_, checkpoint) = genesis_objects(proposed, widths);
        match put(store, &ckey, checkpoint.encode(), &fence, op).await {
            Ok(_) => break checkpoint,
            // Another opener's checkpoint zero took the name: join its world.
            Err(e) if e.kind() == ErrorKind::Integrity => continue,
            Err(e) => return Err(e),
        }
    };
    let world = checkpoint.world;
    if checkpoint.tip != genesis_tip(world) || checkpoint.documents != 0 {
        return Err(Error::integrity(
            op,
            ckey,
            "checkpoint zero is not an empty world's",
        ));
    }
    let (root, derived) = genesis_objects(world, widths);
    if derived != checkpoint {
        // Written with other tier widths: only its creator can write its root.
        let rkey = root_key(prefix, &checkpoint.root);
        match retrying(|| store.head(&rkey), |e: &quire_blob::Error| Some(e.kind())).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {
                return Ok(Joined::Pending(format!(
                    "checkpoint zero of world {world} waits for its root {rkey}"
                )));
            }
            Err(e) => return Err(Error::storage(op, e)),
        }
    } else {
        put_addressed(
            store,
            &root_key(prefix, &checkpoint.root),
            root.encode(),
            &fence,
            op,
        )
        .await?;
    }
    put(
        store,
        &mkey,
        Bytes::from(Marker { world }.encode()),
        &fence,
        op,
    )
    .await?;
    Ok(Joined::World(world))
}

/// Up to three keys, and how many more.
fn name_some(keys: &[&str]) -> String {
    let shown = keys.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    match keys.len() {
        0..=3 => shown,
        n => format!("{shown} and {} more", n - 3),
    }
}

/// Creates `world` under `prefix` unless it exists ([`join_or_create_world`]). Refuses a
/// prefix that holds or becomes another world, and one holding objects that are not a
/// world's or no world yet. The genesis objects' fence reads the system clock.
pub async fn create_world(
    store: &dyn BlobStore,
    prefix: &str,
    world: WorldId,
    widths: [u64; TIERS - 1],
) -> Result<()> {
    let mkey = log_keys::marker_key(prefix);
    match join_or_create_world(store, prefix, world, widths, &SystemClock).await? {
        Joined::World(found) if found == world => Ok(()),
        Joined::World(other) => Err(Error::new(
            Op::Genesis,
            mkey,
            ErrorKind::Precondition,
            format!("the prefix holds world {other}"),
        )),
        Joined::Pending(why) => Err(Error::new(
            Op::Genesis,
            mkey,
            ErrorKind::Precondition,
            format!("the prefix holds no world yet: {why}"),
        )),
    }
}
