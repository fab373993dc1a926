//! Factories for the backends this workspace ships without a bucket: the reference model and
//! the file store (one fresh directory per world under a scratch root).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use quire_backend::Store;
use quire_backend::file::{FileOptions, FileStore};
use quire_log::Clock;

use crate::harness::{BackendFactory, FreshWorld, ReplicaFactory, ReplicaWorld, Tamper};
use crate::model::ModelStore;

/// Opens reference-model worlds.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModelFactory;

#[async_trait]
impl BackendFactory for ModelFactory {
    async fn open(&self, clock: Arc<dyn Clock>) -> Result<FreshWorld, String> {
        Ok(FreshWorld {
            store: Arc::new(ModelStore::new(clock)),
            tamper: None,
        })
    }
}

/// Opens file-store worlds in fresh directories under `root`.
#[derive(Debug)]
pub struct FileFactory {
    root: PathBuf,
    durable: bool,
    next: AtomicU64,
}

impl FileFactory {
    /// Worlds under `root` (which should be a scratch directory); `durable: false` skips
    /// fsync, for throwaway worlds.
    pub fn new(root: impl Into<PathBuf>, durable: bool) -> FileFactory {
        FileFactory {
            root: root.into(),
            durable,
            next: AtomicU64::new(0),
        }
    }

    async fn open_store(&self, clock: Arc<dyn Clock>) -> Result<FileStore, String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let options = FileOptions {
            clock,
            durable: self.durable,
            change_ring: 64,
            ..FileOptions::default()
        };
        FileStore::open(self.root.join(format!("world-{n}")), options)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Overwrites a version file of `store` directly.
pub fn file_tamper(store: FileStore) -> Tamper {
    Arc::new(move |path, version, bytes| {
        let file = store.version_file(&path, version);
        Box::pin(async move {
            let file = file.ok_or("the path has no file")?;
            tokio::fs::write(&file, &bytes)
                .await
                .map_err(|e| format!("tampering with {}: {e}", file.display()))
        })
    })
}

#[async_trait]
impl BackendFactory for FileFactory {
    async fn open(&self, clock: Arc<dyn Clock>) -> Result<FreshWorld, String> {
        let store = self.open_store(clock).await?;
        Ok(FreshWorld {
            tamper: Some(file_tamper(store.clone())),
            store: Arc::new(store),
        })
    }
}

/// The file store has one writer per directory, so every "replica" of a world is the same
/// store: the replica suite then checks one store shared by concurrent callers.
#[async_trait]
impl ReplicaFactory for FileFactory {
    async fn open_world(&self, clock: Arc<dyn Clock>) -> Result<Box<dyn ReplicaWorld>, String> {
        let store: Arc<dyn Store> = Arc::new(self.open_store(clock).await?);
        Ok(Box::new(SharedReplica(store)))
    }
}

/// A world whose every replica is one store.
#[derive(Debug)]
pub struct SharedReplica(pub Arc<dyn Store>);

#[async_trait]
impl ReplicaWorld for SharedReplica {
    async fn replica(&self) -> Result<Arc<dyn Store>, String> {
        Ok(self.0.clone())
    }

    /// One shared store reads its own writes: it has no freshness window.
    fn lapse(&self, _by: Duration) {}
}

/// Every model "replica" is the same model store.
#[async_trait]
impl ReplicaFactory for ModelFactory {
    async fn open_world(&self, clock: Arc<dyn Clock>) -> Result<Box<dyn ReplicaWorld>, String> {
        Ok(Box::new(SharedReplica(Arc::new(ModelStore::new(clock)))))
    }
}
