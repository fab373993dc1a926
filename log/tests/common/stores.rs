//! Test wrappers around a blob store: latency, ambiguity after a create lands, holds on
//! creates, and per-prefix create counters.
#![allow(dead_code)]

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use quire_blob::{
    Attributes, BlobStore, Error, ErrorKind, Generation, ListPage, Object, Op, Result,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;

/// Wraps a store with optional latency, ambiguity injection, holds and counters.
#[derive(Debug)]
pub struct TestStore {
    inner: Arc<dyn BlobStore>,
    /// Latency per call, drawn uniformly from this range (milliseconds), seeded.
    latency: Option<(Range<u64>, Mutex<SmallRng>)>,
    /// Creates under this key fragment land and then report this kind, this many times.
    ambiguous_after: Mutex<Option<(String, usize, ErrorKind)>>,
    /// Creates of keys containing this fragment wait until released.
    hold: Mutex<Option<(String, Arc<Notify>)>>,
    /// Creates under this key fragment fail with this kind before reaching the store.
    fail_before: Mutex<Option<(String, ErrorKind, usize)>>,
    pub held: AtomicUsize,
    pub slot_creates: AtomicU64,
    pub blob_creates: AtomicU64,
    /// Creates that landed and were then answered with an injected error.
    pub failed_after_apply: AtomicU64,
}

impl TestStore {
    pub fn new(inner: Arc<dyn BlobStore>) -> Self {
        TestStore {
            inner,
            latency: None,
            ambiguous_after: Mutex::new(None),
            hold: Mutex::new(None),
            fail_before: Mutex::new(None),
            held: AtomicUsize::new(0),
            slot_creates: AtomicU64::new(0),
            blob_creates: AtomicU64::new(0),
            failed_after_apply: AtomicU64::new(0),
        }
    }

    pub fn with_latency(mut self, millis: Range<u64>, seed: u64) -> Self {
        self.latency = Some((millis, Mutex::new(SmallRng::seed_from_u64(seed))));
        self
    }

    /// The next `times` creates of keys containing `fragment` land, then report ambiguous.
    pub fn ambiguous_after_apply(&self, fragment: &str, times: usize) {
        self.fail_after_apply(fragment, ErrorKind::Ambiguous, times);
    }

    /// The next `times` creates of keys containing `fragment` land, then report `kind` (as a
    /// driver does when a success answer's body cannot be read).
    pub fn fail_after_apply(&self, fragment: &str, kind: ErrorKind, times: usize) {
        *self.ambiguous_after.lock().unwrap() = Some((fragment.into(), times, kind));
    }

    /// The next `times` creates of keys containing `fragment` fail with `kind` unapplied.
    pub fn fail_before_apply(&self, fragment: &str, kind: ErrorKind, times: usize) {
        *self.fail_before.lock().unwrap() = Some((fragment.into(), kind, times));
    }

    /// Creates of keys containing `fragment` wait for the returned notify (`notify_waiters`
    /// releases the ones waiting; clear the hold first to let later ones pass).
    pub fn hold(&self, fragment: &str) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        *self.hold.lock().unwrap() = Some((fragment.into(), notify.clone()));
        notify
    }

    pub fn release(&self) {
        if let Some((_, notify)) = self.hold.lock().unwrap().take() {
            notify.notify_waiters();
        }
    }

    async fn delay(&self) {
        let pause = match &self.latency {
            Some((range, rng)) => rng.lock().unwrap().random_range(range.clone()),
            None => return,
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

#[async_trait]
impl BlobStore for TestStore {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        if key.contains("log/") {
            self.slot_creates.fetch_add(1, Ordering::SeqCst);
        } else if key.contains("blobs/") {
            self.blob_creates.fetch_add(1, Ordering::SeqCst);
        }
        let hold = self
            .hold
            .lock()
            .unwrap()
            .as_ref()
            .filter(|(fragment, _)| key.contains(fragment.as_str()))
            .map(|(_, n)| n.clone());
        if let Some(notify) = hold {
            let waiting = notify.notified();
            self.held.fetch_add(1, Ordering::SeqCst);
            waiting.await;
        }
        self.delay().await;
        let injected = {
            let mut slot = self.fail_before.lock().unwrap();
            match slot.as_mut() {
                Some((fragment, kind, times)) if *times > 0 && key.contains(fragment.as_str()) => {
                    *times -= 1;
                    Some(*kind)
                }
                _ => None,
            }
        };
        if let Some(kind) = injected {
            return Err(Error::new(Op::Create, key, kind, "injected"));
        }
        let result = self.inner.create(key, data).await;
        let after = {
            let mut slot = self.ambiguous_after.lock().unwrap();
            match slot.as_mut() {
                Some((fragment, times, kind))
                    if *times > 0 && key.contains(fragment.as_str()) && result.is_ok() =>
                {
                    *times -= 1;
                    Some(*kind)
                }
                _ => None,
            }
        };
        if let Some(kind) = after {
            self.failed_after_apply.fetch_add(1, Ordering::SeqCst);
            return Err(Error::new(Op::Create, key, kind, "response lost"));
        }
        result
    }

    async fn get(&self, key: &str) -> Result<Object> {
        self.delay().await;
        self.inner.get(key).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.delay().await;
        self.inner.get_range(key, range).await
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        self.delay().await;
        self.inner.head(key).await
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        self.delay().await;
        self.inner.replace(key, generation, data).await
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        self.delay().await;
        self.inner.delete(key, generation).await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        self.delay().await;
        self.inner.list(prefix, start_after, cursor).await
    }
}
