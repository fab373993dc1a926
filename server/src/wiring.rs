//! The one place that names concrete backends and blob drivers: the store factory the world
//! manager opens every world with. Everything else sees worlds through `quire_backend::Store`.
//! Every writable world keeps a change ring of [`DEFAULT_RING`] events, so WATCH is served.
//! With peer hints ([`HintingBackends`]) every bucket world reports its commits to the hint
//! senders and takes peers' hints under its world id.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::changes::DEFAULT_RING;
use quire_backend::file::{FileOptions, FileStore};
use quire_backend::{Follower, SearchOptions, Store};
use quire_blob::file::DirBlobStore;
use quire_blob::gcs::{GcsAuth, GcsConfig, GcsStore};
use quire_blob::memory::MemoryStore;
use quire_blob::s3::{S3Config, S3Store};
use quire_blob::{BlobStore, Simulated};

use crate::config::{BackendConfig, BucketDriver, SimulatedLatency, WorldConfig};
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
                simulate_latency,
            } => {
                let expected = match world_id {
                    None => None,
                    Some(id) => Some(quire_log::WorldId::parse(id.as_str()).ok_or_else(|| {
                        fail(&format!(
                            "world_id {:?} is not a world id (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
                            id.as_str()
                        ))
                    })?),
                };
                let (blobs, prefix) = blob_store(driver).await.map_err(|error| fail(&error))?;
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
                    prefix,
                    world: expected,
                    read_only: world.read_only,
                    max_documents: world.max_documents.map_or(0, |n| n.get()),
                    policy_path: world.policy.enforce.then(crate::policy::policy_path),
                    change_ring: DEFAULT_RING,
                    search: search_options(world),
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

/// The world's key prefix: empty, or ending in `/`.
fn world_prefix(prefix: &Option<String>) -> String {
    match prefix.as_deref() {
        None | Some("") => String::new(),
        Some(p) if p.ends_with('/') => p.to_owned(),
        Some(p) => format!("{p}/"),
    }
}

/// Builds the blob store a bucket world lives in, and the world's prefix inside it.
async fn blob_store(driver: &BucketDriver) -> anyhow::Result<(Arc<dyn BlobStore>, String)> {
    Ok(match driver {
        BucketDriver::Memory => (Arc::new(MemoryStore::new()), String::new()),
        BucketDriver::File { location, prefix } => {
            let store = DirBlobStore::open(location.clone())
                .map_err(|e| anyhow::anyhow!("opening {}: {e}", location.display()))?;
            (Arc::new(store), world_prefix(prefix))
        }
        BucketDriver::S3 {
            bucket,
            prefix,
            endpoint,
            region,
        } => {
            let config = S3Config {
                endpoint: endpoint.clone(),
                region: region.clone(),
                // Custom endpoints (MinIO, SeaweedFS, …) rarely serve virtual-hosted names.
                force_path_style: endpoint.is_some(),
                ..S3Config::new(bucket)
            };
            let store = S3Store::from_env(config).await?;
            (Arc::new(store), world_prefix(prefix))
        }
        BucketDriver::Gcs {
            bucket,
            prefix,
            endpoint,
        } => {
            let mut config = GcsConfig::new(bucket, gcs_auth());
            if let Some(endpoint) = endpoint {
                config = config.with_endpoint(endpoint);
            }
            (Arc::new(GcsStore::new(config)?), world_prefix(prefix))
        }
    })
}

/// GCS credentials: `QUIRE_GCS_TOKEN` (a bearer token, e.g. for emulators), else the key file
/// `GOOGLE_APPLICATION_CREDENTIALS` names, else the metadata server of the machine.
fn gcs_auth() -> GcsAuth {
    if let Ok(token) = std::env::var("QUIRE_GCS_TOKEN") {
        return GcsAuth::StaticToken(token);
    }
    if let Ok(path) = std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
        return GcsAuth::ServiceAccountKey(PathBuf::from(path));
    }
    GcsAuth::metadata_server()
}
