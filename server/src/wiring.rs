//! The one place that names concrete backends and blob drivers: the store factory the world
//! manager opens every world with. Everything else sees worlds through `quire_backend::Store`.
//! Every writable world keeps a change ring of [`DEFAULT_RING`] events, so WATCH is served.
//! With peer hints ([`HintingBackends`]) every bucket world reports its commits to the hint
//! senders and takes peers' hints under its world id.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::changes::DEFAULT_RING;
use quire_backend::file::{FileOptions, FileStore};
use quire_backend::{Follower, SearchOptions, Store};
use quire_blob::{BlobStore, HedgePolicy, Simulated};

use crate::config::{BackendConfig, SimulatedLatency, WorldConfig};
use crate::peers::Peers;
use crate::worlds::{OpenError, StoreFactory};

/// Opens file stores and bucket stores over the memory, file, S3 and GCS drivers.
#[derive(Debug, Default)]
pub struct Backends;

#[async_trait]
impl StoreFactory for Backends {
    async fn open(&self, world: &WorldConfig) -> Result<Arc<dyn Store>, OpenError> {
        open_world(world, None).await
    }
}

/// [`Backends`] whose bucket worlds send and take peer hints through `peers`.
#[derive(Debug)]
pub struct HintingBackends {
    pub peers: Arc<Peers>,
}

#[async_trait]
impl StoreFactory for HintingBackends {
    async fn open(&self, world: &WorldConfig) -> Result<Arc<dyn Store>, OpenError> {
        open_world(world, Some(&self.peers)).await
    }
}

async fn open_world(
    world: &WorldConfig,
    peers: Option<&Arc<Peers>>,
) -> Result<Arc<dyn Store>, OpenError> {
    {
        let name = world.name.as_str();
        let fail = |error: &dyn std::fmt::Display| OpenError::new(name, error.to_string());
        match &world.backend {
            BackendConfig::File { root } => {
                let options = FileOptions {
                    read_only: world.read_only,
                    max_documents: world.max_documents.map_or(0, |n| n.get()),
                    change_ring: DEFAULT_RING,
                    search: search_options(world),
                    ..FileOptions::default()
                };
                let store = FileStore::open(root.clone(), options)
                    .await
                    .map_err(|error| fail(&error))?;
                Ok(Arc::new(store))
            }
            BackendConfig::Bucket {
                driver,
                world_id,
                hedge,
                simulate_latency,
            } => {
                let expected = *world_id;
                let blobs = driver.open().await.map_err(|error| fail(&error))?;
                let blobs = match simulate_latency {
                    None => blobs,
                    Some(profile) => simulated(blobs, *profile),
                };

                // The world id is known once the store opened; nothing commits before.
                let world_id: Arc<OnceLock<String>> = Arc::default();
                let on_committed = peers.map(|peers| {
                    let peers = peers.clone();
                    let world_id = world_id.clone();
                    let hook: quire_log::commit::CommittedHook = Arc::new(move |sequence| {
                        if let Some(id) = world_id.get() {
                            peers.committed(id, sequence);
                        }
                    });
                    hook
                });
                let options = BucketOptions {
                    on_committed,
                    prefix: driver.prefix(),
                    world: expected,
                    read_only: world.read_only,
                    max_documents: world.max_documents.map_or(0, |n| n.get()),
                    policy_path: world.policy.enforce.then(crate::policy::policy_path),
                    change_ring: DEFAULT_RING,
                    search: search_options(world),
                    // Above the simulated latency, so a benchmark's slow requests are hedged
                    // as a remote bucket's would be.
                    hedge: hedge.then(HedgePolicy::default),
                    ..BucketOptions::default()
                };
                let store = Arc::new(
                    BucketStore::open(blobs, options)
                        .await
                        .map_err(|error| fail(&error))?,
                );
                if let Some(peers) = peers {
                    let id = store.world().to_string();
                    let _ = world_id.set(id.clone());
                    let follower = store.clone();
                    peers.register(id, Arc::new(move |sequence| follower.follow(sequence)));
                }
                Ok(store)
            }
        }
    }
}

/// A benchmark's bucket: `blobs` behind the named latency profile, seeded per process.
fn simulated(blobs: Arc<dyn BlobStore>, profile: SimulatedLatency) -> Arc<dyn BlobStore> {
    let seed = u64::from(std::process::id());
    match profile {
        SimulatedLatency::RealGcs => Arc::new(Simulated::real_gcs(blobs, seed)),
    }
}

/// The world's body search settings.
fn search_options(world: &WorldConfig) -> SearchOptions {
    SearchOptions {
        cache_dir: Some(world.search.cache_dir.clone()),
        evict_after: world.search.evict_after,
        fold_every: world.search.fold_every,
        fold_documents: world.search.fold_documents.get() as usize,
        ..SearchOptions::default()
    }
}
