//! The one place that names concrete backends: the store factory the world manager opens
//! every world with. Everything else sees worlds through `quire_backend::Store`.

use std::sync::Arc;

use async_trait::async_trait;
use quire_backend::Store;
use quire_backend::file::{FileOptions, FileStore};

use crate::config::{BackendConfig, WorldConfig};
use crate::worlds::{OpenError, StoreFactory};

/// Whether this build can open bucket stores.
pub const BUCKET_AVAILABLE: bool = false;

/// Opens file stores (and bucket stores, when the build has them).
#[derive(Debug, Default)]
pub struct Backends;

#[async_trait]
impl StoreFactory for Backends {
    async fn open(&self, world: &WorldConfig) -> Result<Arc<dyn Store>, OpenError> {
        let name = world.name.as_str();
        match &world.backend {
            BackendConfig::File { root } => {
                let options = FileOptions {
                    read_only: world.read_only,
                    max_documents: world.max_documents.map_or(0, |n| n.get()),
                    ..FileOptions::default()
                };
                let store = FileStore::open(root.clone(), options)
                    .await
                    .map_err(|error| OpenError::new(name, error.to_string()))?;
                Ok(Arc::new(store))
            }
            BackendConfig::Bucket { .. } => Err(OpenError::new(
                name,
                "bucket backend not available in this build",
            )),
        }
    }
}
