//! Helpers shared by the integration tests: worlds created with the log's slot writer
//! (`quire_log::testing`), stores to run them on, and reading them back.
#![allow(dead_code)]
#![allow(
    clippy::disallowed_methods,
    reason = "unique bucket names and a settable stamping clock start from real time"
)]

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use quire_blob::BlobStore;
use quire_blob::memory::MemoryStore;
use quire_checkpoint::export::{ExportedDocument, export};
use quire_checkpoint::format::TIERS;
use quire_checkpoint::genesis::create_world;
use quire_log::WorldState;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub(crate) use quire_log::testing::{
    PREFIX, STORE, SlotWriter, WORLD, archive, meta, publish, publish_with,
};

/// Small tier widths, so tests cross grid points.
pub(crate) const SMALL_WIDTHS: [u64; TIERS - 1] = [64, 16];

pub(crate) fn memory() -> Arc<dyn BlobStore> {
    Arc::new(MemoryStore::new())
}

/// A fresh bucket on the S3 server the environment names (`cargo xtask servers` starts one
/// and prints its QUIRE_TEST_S3_* variables); `None`, and the case is skipped, without one
/// unless QUIRE_TEST_REQUIRE_SERVERS=1.
pub(crate) async fn s3() -> Option<Arc<dyn BlobStore>> {
    use quire_blob::s3::{S3Config, S3Store};
    let Ok(endpoint) = std::env::var("QUIRE_TEST_S3_ENDPOINT") else {
        assert!(
            std::env::var("QUIRE_TEST_REQUIRE_SERVERS").as_deref() != Ok("1"),
            "QUIRE_TEST_S3_ENDPOINT is unset but QUIRE_TEST_REQUIRE_SERVERS=1"
        );
        eprintln!("skipped: QUIRE_TEST_S3_ENDPOINT is unset (`cargo xtask servers` starts one)");
        return None;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is unset"));
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let bucket = format!(
        "quire-checkpoint-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let config = S3Config {
        endpoint: Some(endpoint),
        region: Some(std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into())),
        force_path_style: true,
        ..S3Config::new(bucket)
    };
    let store = S3Store::with_static_credentials(
        config,
        &var("AWS_ACCESS_KEY_ID"),
        &var("AWS_SECRET_ACCESS_KEY"),
    )
    .expect("valid S3 configuration");
    store.ensure_bucket().await.expect("creating a test bucket");
    Some(Arc::new(store))
}

/// A writer at the genesis of a world it creates in `store` (the marker and a genesis
/// checkpoint with tier widths `widths`).
pub(crate) async fn new_world(store: Arc<dyn BlobStore>, widths: [u64; TIERS - 1]) -> SlotWriter {
    create_world(&*store, PREFIX, WORLD, widths).await.unwrap();
    SlotWriter::new(store, WorldState::genesis(WORLD))
}

/// Every document and version of `state`.
pub(crate) async fn export_all(
    store: &Arc<dyn BlobStore>,
    state: &WorldState,
) -> Vec<ExportedDocument> {
    export(store.clone(), PREFIX.to_owned(), state.clone())
        .try_collect()
        .await
        .unwrap()
}

/// A store holding the objects of a fixture file (each a 4-byte big-endian key length, the
/// key, a 4-byte big-endian length and the bytes; see `tests/fixtures/README.md`).
pub(crate) async fn from_fixture(bytes: &[u8]) -> Arc<dyn BlobStore> {
    let store = memory();
    let mut at = 0;
    let mut take = |n: usize| {
        let part = &bytes[at..at + n];
        at += n;
        part
    };
    let mut left = bytes.len();
    while left > 0 {
        let len = u32::from_be_bytes(take(4).try_into().unwrap()) as usize;
        let key = String::from_utf8(take(len).to_vec()).unwrap();
        let size = u32::from_be_bytes(take(4).try_into().unwrap()) as usize;
        let data = Bytes::copy_from_slice(take(size));
        store.create(&key, data).await.unwrap();
        left -= 8 + len + size;
    }
    store
}

/// Every object under the prefix with its bytes, in key order.
pub(crate) async fn contents(store: &dyn BlobStore, prefix: &str) -> Vec<(String, Bytes)> {
    let mut out = Vec::new();
    for attrs in quire_blob::list_all(store, prefix, "").await.unwrap() {
        let data = store.get(&attrs.key).await.unwrap().data;
        out.push((attrs.key, data));
    }
    out
}

/// A store whose modification times come from a clock the test sets, so a test can let an
/// hour pass: objects written before [`Aged::set_now`] look that much older, and every
/// write after it is stamped with the new time. Everything else is the inner store's.
#[derive(Debug)]
pub(crate) struct Aged {
    inner: Arc<dyn BlobStore>,
    now: std::sync::Mutex<std::time::SystemTime>,
    stamps: std::sync::Mutex<HashMap<String, std::time::SystemTime>>,
}

impl Aged {
    pub(crate) fn new(inner: Arc<dyn BlobStore>) -> Aged {
        Aged {
            inner,
            now: std::sync::Mutex::new(std::time::SystemTime::now()),
            stamps: std::sync::Mutex::default(),
        }
    }

    pub(crate) fn set_now(&self, now: std::time::SystemTime) {
        *self.now.lock().unwrap() = now;
    }

    fn written(&self, mut attrs: quire_blob::Attributes) -> quire_blob::Attributes {
        let now = *self.now.lock().unwrap();
        self.stamps.lock().unwrap().insert(attrs.key.clone(), now);
        attrs.modified = now;
        attrs
    }

    fn stamped(&self, mut attrs: quire_blob::Attributes) -> quire_blob::Attributes {
        if let Some(stamp) = self.stamps.lock().unwrap().get(&attrs.key) {
            attrs.modified = *stamp;
        }
        attrs
    }
}

#[async_trait::async_trait]
impl BlobStore for Aged {
    async fn create(&self, key: &str, data: Bytes) -> quire_blob::Result<quire_blob::Attributes> {
        self.inner.create(key, data).await.map(|a| self.written(a))
    }

    async fn get(&self, key: &str) -> quire_blob::Result<quire_blob::Object> {
        let mut object = self.inner.get(key).await?;
        object.attributes = self.stamped(object.attributes);
        Ok(object)
    }

    async fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> quire_blob::Result<Bytes> {
        self.inner.get_range(key, range).await
    }

    async fn head(&self, key: &str) -> quire_blob::Result<quire_blob::Attributes> {
        self.inner.head(key).await.map(|a| self.stamped(a))
    }

    async fn replace(
        &self,
        key: &str,
        generation: &quire_blob::Generation,
        data: Bytes,
    ) -> quire_blob::Result<quire_blob::Attributes> {
        self.inner
            .replace(key, generation, data)
            .await
            .map(|a| self.written(a))
    }

    async fn delete(
        &self,
        key: &str,
        generation: &quire_blob::Generation,
    ) -> quire_blob::Result<()> {
        self.inner.delete(key, generation).await?;
        self.stamps.lock().unwrap().remove(key);
        Ok(())
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> quire_blob::Result<quire_blob::ListPage> {
        let mut page = self.inner.list(prefix, start_after, cursor).await?;
        page.objects = page.objects.into_iter().map(|a| self.stamped(a)).collect();
        Ok(page)
    }

    fn unique_generations(&self) -> bool {
        self.inner.unique_generations()
    }
}
