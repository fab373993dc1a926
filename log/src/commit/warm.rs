//! Reading ahead the version bytes queued appends build on, and the bounded cache that
//! keeps them, so building a batch needs no read.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use futures::FutureExt;

use super::pipeline::Actor;
use crate::build::Mutation;
use crate::ids::Hash;
use crate::version::read_version;

/// Version bytes of confirmed or read versions by hash, so appends need no read. Bounded by
/// entries and bytes; versions of batches still in the pipeline are found in the batches.
#[derive(Default)]
pub(super) struct VersionCache {
    pub(super) bytes: HashMap<Hash, Bytes>,
    pub(super) order: VecDeque<Hash>,
    total: usize,
}

impl VersionCache {
    const MAX_ENTRIES: usize = 4096;
    const MAX_BYTES: usize = 64 << 20;

    pub(super) fn get(&self, hash: &Hash) -> Option<Bytes> {
        self.bytes.get(hash).cloned()
    }

    pub(super) fn insert(&mut self, hash: Hash, bytes: Bytes) {
        let len = bytes.len();
        if self.bytes.insert(hash, bytes).is_some() {
            return;
        }
        self.total += len;
        self.order.push_back(hash);
        while self.order.len() > Self::MAX_ENTRIES || self.total > Self::MAX_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.bytes.remove(&old) {
                self.total -= gone.len();
            }
        }
    }
}

/// A read-ahead of version bytes that several waiters can await.
pub(super) type Warming =
    futures::future::Shared<futures::future::BoxFuture<'static, Option<Bytes>>>;

impl Actor {
    pub(super) fn cache_insert(&self, hash: Hash, bytes: Bytes) {
        self.cache
            .lock()
            .expect("cache lock poisoned")
            .insert(hash, bytes);
    }

    /// Reads ahead the current version an append will build on, while it waits in the queue,
    /// so building its batch needs no read (once per version).
    pub(super) fn warm(&self, mutation: &Mutation) {
        let Mutation::Append { .. } = mutation else {
            return;
        };
        let Ok(path) = mutation.path() else {
            return;
        };
        let Some(record) = self
            .shared
            .served
            .borrow()
            .doc(&path)
            .map(|d| d.head.clone())
        else {
            return;
        };
        if self
            .cache
            .lock()
            .expect("cache lock poisoned")
            .get(&record.hash)
            .is_some()
        {
            return;
        }
        let mut warming = self.warming.lock().expect("warming lock poisoned");
        if warming.contains_key(&record.hash) {
            return;
        }
        let store = self.shared.store.clone();
        let prefix = self.shared.config.prefix.clone();
        let cache = self.cache.clone();
        let registry = self.warming.clone();
        let hash = record.hash;
        let read: futures::future::BoxFuture<'static, Option<Bytes>> = Box::pin(async move {
            let bytes = read_version(store.as_ref(), &prefix, &record).await.ok();
            if let Some(bytes) = &bytes {
                cache
                    .lock()
                    .expect("cache lock poisoned")
                    .insert(hash, bytes.clone());
            }
            registry
                .lock()
                .expect("warming lock poisoned")
                .remove(&hash);
            bytes
        });
        let shared = read.shared();
        warming.insert(hash, shared.clone());
        tokio::spawn(shared);
    }
}
