//! Helpers shared by the integration tests: a minimal writer that builds slots with the
//! log's own build and encode functions and creates them in a store (what the committer
//! does, without batching or races), and worlds built with it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use quire_blob::BlobStore;
use quire_blob::memory::MemoryStore;
use quire_checkpoint::export::{ExportedDocument, export};
use quire_checkpoint::format::TIERS;
use quire_checkpoint::genesis::create_world;
use quire_log::build::{BuildLimits, Built, Mutation, build};
use quire_log::metadata::Metadata;
use quire_log::slot::{DEFAULT_INLINE_LIMIT, EncodedSlot};
use quire_log::version::StoredVersion;
use quire_log::{Hash, OperationId, Slot, StoreId, Timestamp, WorldId, WorldState, keys};

pub const WORLD: WorldId = WorldId([7; 16]);
pub const STORE: StoreId = StoreId([9; 16]);
pub const PREFIX: &str = "w/";
/// Small tier widths, so tests cross grid points.
pub const SMALL_WIDTHS: [u64; TIERS - 1] = [64, 16];

pub fn memory() -> Arc<dyn BlobStore> {
    Arc::new(MemoryStore::new())
}

/// A fresh bucket on the S3 server the environment names (`cargo xtask servers` starts one
/// and prints its QUIRE_TEST_S3_* variables); `None`, and the case is skipped, without one
/// unless QUIRE_TEST_REQUIRE_SERVERS=1.
pub async fn s3() -> Option<Arc<dyn BlobStore>> {
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

pub fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

pub fn publish(path: &str, body: &str) -> Mutation {
    publish_with(path, body, Metadata::new())
}

pub fn publish_with(path: &str, body: &str, metadata: Metadata) -> Mutation {
    Mutation::Publish {
        path: path.into(),
        expected: None,
        body: Bytes::copy_from_slice(body.as_bytes()),
        metadata,
    }
}

pub fn archive(path: &str, archived: bool) -> Mutation {
    Mutation::SetArchived {
        path: path.into(),
        archived,
    }
}

/// Writes slots straight into a store.
pub struct Writer {
    pub store: Arc<dyn BlobStore>,
    pub state: WorldState,
    versions: HashMap<Hash, Bytes>,
    operations: u64,
}

impl Writer {
    /// Creates the world (genesis) and a writer at its tip.
    pub async fn create(store: Arc<dyn BlobStore>, widths: [u64; TIERS - 1]) -> Writer {
        create_world(&*store, PREFIX, WORLD, widths).await.unwrap();
        Writer {
            store,
            state: WorldState::genesis(WORLD),
            versions: HashMap::new(),
            operations: 0,
        }
    }

    /// A writer at `state` of a world already in `store` (operation ids start far from any
    /// a fixture's writer used).
    pub fn resume(store: Arc<dyn BlobStore>, state: WorldState) -> Writer {
        Writer {
            store,
            state,
            versions: HashMap::new(),
            operations: 1 << 40,
        }
    }

    /// Commits one slot holding `mutations` (each built on the ones before it). Versions up
    /// to the inline limit travel inline; larger ones become blobs first.
    pub async fn commit(&mut self, mutations: &[Mutation]) -> EncodedSlot {
        let mut working = self.state.clone();
        let mut entries = Vec::new();
        for mutation in mutations {
            self.operations += 1;
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&self.operations.to_be_bytes());
            let base = match mutation {
                Mutation::Append { path, .. } => {
                    let doc = working
                        .doc(&quire_log::DocPath::parse(path).unwrap())
                        .unwrap();
                    Some(StoredVersion::decode(&self.versions[&doc.head.hash]).unwrap())
                }
                _ => None,
            };
            let built = build(
                &working,
                mutation,
                OperationId(id),
                Timestamp(1_767_225_600 + self.operations),
                BuildLimits { max_documents: 0 },
                &mut None,
                base.as_ref(),
            )
            .unwrap();
            let Built::Change(change) = built else {
                continue;
            };
            let mut entry = change.entry;
            if let (Some(w), Some(bytes)) = (entry.write.as_mut(), change.version_bytes) {
                self.versions.insert(w.hash, bytes.clone());
                if bytes.len() <= DEFAULT_INLINE_LIMIT {
                    w.inline = Some(bytes);
                } else {
                    let key = keys::blob_key(PREFIX, &w.hash);
                    match self.store.create(&key, bytes).await {
                        Ok(_) => {}
                        Err(e) if e.is_precondition() => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            let one = seal(&working, vec![entry.clone()]);
            working = working.apply(&one).unwrap();
            entries.push(entry);
        }
        assert!(!entries.is_empty(), "nothing to commit");
        let slot = seal(&self.state, entries);
        let key = keys::slot_key(PREFIX, slot.slot.first);
        self.store.create(&key, slot.bytes.clone()).await.unwrap();
        self.state = self.state.apply(&slot).unwrap();
        slot
    }
}

fn seal(state: &WorldState, entries: Vec<quire_log::Entry>) -> EncodedSlot {
    let first = state.sequence() + 1;
    let slot = Slot {
        world: state.world(),
        first,
        store: STORE,
        prev: state.tip(),
        entries,
    };
    EncodedSlot::encode(slot, &keys::slot_key("", first)).unwrap()
}

/// Every document and version of `state`.
pub async fn export_all(store: &Arc<dyn BlobStore>, state: &WorldState) -> Vec<ExportedDocument> {
    export(store.clone(), PREFIX.to_owned(), state.clone())
        .try_collect()
        .await
        .unwrap()
}

/// A store holding the objects of a fixture file (each a 4-byte big-endian key length, the
/// key, a 4-byte big-endian length and the bytes; see `tests/fixtures/README.md`).
pub async fn from_fixture(bytes: &[u8]) -> Arc<dyn BlobStore> {
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
pub async fn contents(store: &dyn BlobStore, prefix: &str) -> Vec<(String, Bytes)> {
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
pub struct Aged {
    inner: Arc<dyn BlobStore>,
    now: std::sync::Mutex<std::time::SystemTime>,
    stamps: std::sync::Mutex<HashMap<String, std::time::SystemTime>>,
}

impl Aged {
    pub fn new(inner: Arc<dyn BlobStore>) -> Aged {
        Aged {
            inner,
            now: std::sync::Mutex::new(std::time::SystemTime::now()),
            stamps: std::sync::Mutex::default(),
        }
    }

    pub fn set_now(&self, now: std::time::SystemTime) {
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
