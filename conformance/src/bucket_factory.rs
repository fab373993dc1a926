//! The bucket store's factories: each world under a fresh prefix of one bucket, and replica
//! worlds whose replicas are separate bucket stores over that prefix.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use quire_backend::Ctx;
use quire_backend::Store;
use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_blob::BlobStore;
use quire_log::clock::ManualElapsed;
use quire_log::{Clock, DocPath, Location, keys};

use crate::harness::{BackendFactory, FreshWorld, ReplicaFactory, ReplicaWorld, Tamper};

/// Bucket-store worlds under fresh prefixes of one bucket.
pub struct BucketFactory {
    blobs: Arc<dyn BlobStore>,
    root: String,
    next: AtomicU64,
}

impl BucketFactory {
    /// Worlds at `world-<n>/` of a bucket nobody else writes.
    pub fn new(blobs: Arc<dyn BlobStore>) -> BucketFactory {
        BucketFactory::under(blobs, "")
    }

    /// Worlds at `<root>world-<n>/`, for a bucket shared with other runs (`root` empty or
    /// ending in `/`).
    pub fn under(blobs: Arc<dyn BlobStore>, root: &str) -> BucketFactory {
        BucketFactory {
            blobs,
            root: root.to_owned(),
            next: AtomicU64::new(0),
        }
    }

    fn options(&self, clock: Arc<dyn Clock>) -> BucketOptions {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        BucketOptions {
            prefix: format!("{}world-{n}/", self.root),
            clock,
            compaction: None,
            seed: n,
            change_ring: 64,
            ..BucketOptions::default()
        }
    }
}

/// Overwrites one version's bytes where the store keeps them: inside its slot (the same
/// length, so the slot still reads) or its blob.
fn bucket_tamper(store: BucketStore, blobs: Arc<dyn BlobStore>) -> Tamper {
    Arc::new(move |path: DocPath, version, bytes: Bytes| {
        let store = store.clone();
        let blobs = blobs.clone();
        Box::pin(async move {
            let record = store
                .version_record(&Ctx::new(), &path, version)
                .await
                .map_err(|e| e.to_string())?;
            let (key, data) = match record.location {
                Location::Inline { slot, offset } => {
                    let key = keys::slot_key(store.prefix(), slot);
                    let object = blobs.get(&key).await.map_err(|e| e.to_string())?;
                    let mut data = object.data.to_vec();
                    let range = offset as usize..(offset + record.size) as usize;
                    let mut forged = bytes.to_vec();
                    forged.resize(record.size as usize, b' ');
                    data[range].copy_from_slice(&forged);
                    (key, (data, object.attributes.generation))
                }
                Location::Blob => {
                    let key = keys::blob_key(store.prefix(), &record.hash);
                    let attributes = blobs.head(&key).await.map_err(|e| e.to_string())?;
                    (key, (bytes.to_vec(), attributes.generation))
                }
            };
            let (data, generation) = data;
            blobs
                .replace(&key, &generation, Bytes::from(data))
                .await
                .map(|_| ())
                .map_err(|e| format!("tampering with {key}: {e}"))
        })
    })
}

#[async_trait]
impl BackendFactory for BucketFactory {
    async fn open(&self, clock: Arc<dyn Clock>) -> Result<FreshWorld, String> {
        let store = BucketStore::open(self.blobs.clone(), self.options(clock))
            .await
            .map_err(|e| e.to_string())?;
        Ok(FreshWorld {
            tamper: Some(bucket_tamper(store.clone(), self.blobs.clone())),
            store: Arc::new(store),
        })
    }
}

/// Real replicas: every call opens another bucket store over the same prefix.
struct BucketWorld {
    blobs: Arc<dyn BlobStore>,
    options: BucketOptions,
    joined: AtomicU64,
    /// Every replica's freshness clock.
    elapsed: Arc<ManualElapsed>,
}

#[async_trait]
impl ReplicaWorld for BucketWorld {
    async fn replica(&self) -> Result<Arc<dyn Store>, String> {
        let mut options = self.options.clone();
        options.seed += 1000 * self.joined.fetch_add(1, Ordering::Relaxed);
        let store = BucketStore::open(self.blobs.clone(), options)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(store))
    }

    fn lapse(&self, by: Duration) {
        self.elapsed.advance(by);
    }
}

#[async_trait]
impl ReplicaFactory for BucketFactory {
    async fn open_world(&self, clock: Arc<dyn Clock>) -> Result<Box<dyn ReplicaWorld>, String> {
        let elapsed = Arc::new(ManualElapsed::default());
        let options = BucketOptions {
            elapsed: elapsed.clone(),
            ..self.options(clock)
        };
        // The first replica creates the world; the others join it.
        let first = BucketStore::open(self.blobs.clone(), options.clone())
            .await
            .map_err(|e| e.to_string())?;
        first.close().await;
        Ok(Box::new(BucketWorld {
            blobs: self.blobs.clone(),
            options: BucketOptions {
                world: Some(first.world()),
                ..options
            },
            joined: AtomicU64::new(0),
            elapsed,
        }))
    }
}

impl std::fmt::Debug for BucketFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketFactory")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}
