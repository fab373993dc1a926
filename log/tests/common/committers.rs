//! Starting committers and driving them, for the committer's integration tests.

use std::sync::Arc;

use bytes::Bytes;
use quire_blob::BlobStore;
use quire_log::build::Mutation;
use quire_log::commit::{CommitRequest, Committer, CommitterConfig, Outcome};
use quire_log::{ManualClock, Result, StoreId, Timestamp, WorldState, tip};

use quire_log::testing::{EPOCH, PREFIX, WORLD};

/// A committer for store `id` on `state`, its config adjusted by `tweak`; the clock stands
/// still at 2026-01-01.
pub(crate) fn start(
    store: Arc<dyn BlobStore>,
    state: WorldState,
    id: u8,
    tweak: impl FnOnce(&mut CommitterConfig),
) -> Committer {
    let mut config = CommitterConfig {
        prefix: PREFIX.into(),
        store: StoreId([id; 16]),
        seed: u64::from(id),
        ..CommitterConfig::default()
    };
    tweak(&mut config);
    Committer::start(
        store,
        state,
        Arc::new(ManualClock::new(Timestamp(EPOCH))),
        config,
    )
}

pub(crate) async fn submit(c: &Committer, m: Mutation) -> Result<Outcome> {
    c.submit(CommitRequest::new(m)).await
}

/// A publish that expects `expected` to be the current version.
pub(crate) fn cas(path: &str, expected: u64, body: &str) -> Mutation {
    Mutation::Publish {
        path: path.into(),
        expected: Some(expected),
        body: Bytes::copy_from_slice(body.as_bytes()),
        metadata: Default::default(),
    }
}

/// Replays the whole log from genesis.
pub(crate) async fn replayed(store: &dyn BlobStore) -> WorldState {
    let mut state = WorldState::genesis(WORLD);
    tip::catch_up(store, PREFIX, &mut state).await.unwrap();
    state
}
