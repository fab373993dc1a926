//! Counting requests and bytes, for benchmarks (objects and bytes per write) and metrics.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use crate::BlobStore;
use crate::error::{Op, Result};
use crate::types::{Attributes, Generation, ListPage, Object};

#[derive(Debug, Default)]
struct Counters {
    requests: [AtomicU64; Op::ALL.len()],
    failures: [AtomicU64; Op::ALL.len()],
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

/// Wraps a store and counts every request by operation, failures, and bytes up and down.
/// Clones share the counters.
#[derive(Debug, Clone)]
pub struct Metered {
    inner: Arc<dyn BlobStore>,
    counters: Arc<Counters>,
}

/// A point-in-time copy of a [`Metered`] store's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeterReading {
    /// Requests per operation, indexed like [`Op::ALL`].
    pub requests: [u64; Op::ALL.len()],
    /// Failed requests per operation, indexed like [`Op::ALL`].
    pub failures: [u64; Op::ALL.len()],
    /// Bytes sent to the store (create and replace bodies).
    pub bytes_up: u64,
    /// Bytes received from the store (get and range bodies).
    pub bytes_down: u64,
}

fn index(op: Op) -> usize {
    Op::ALL
        .iter()
        .position(|o| *o == op)
        .expect("every op is in Op::ALL")
}

impl MeterReading {
    pub fn requests(&self, op: Op) -> u64 {
        self.requests[index(op)]
    }

    pub fn failures(&self, op: Op) -> u64 {
        self.failures[index(op)]
    }

    pub fn total_requests(&self) -> u64 {
        self.requests.iter().sum()
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &MeterReading) -> MeterReading {
        let mut out = MeterReading {
            bytes_up: self.bytes_up - earlier.bytes_up,
            bytes_down: self.bytes_down - earlier.bytes_down,
            ..MeterReading::default()
        };
        for i in 0..Op::ALL.len() {
            out.requests[i] = self.requests[i] - earlier.requests[i];
            out.failures[i] = self.failures[i] - earlier.failures[i];
        }
        out
    }
}

impl Metered {
    pub fn new(inner: Arc<dyn BlobStore>) -> Self {
        Metered {
            inner,
            counters: Arc::default(),
        }
    }

    pub fn reading(&self) -> MeterReading {
        let c = &self.counters;
        MeterReading {
            requests: std::array::from_fn(|i| c.requests[i].load(Ordering::Relaxed)),
            failures: std::array::from_fn(|i| c.failures[i].load(Ordering::Relaxed)),
            bytes_up: c.bytes_up.load(Ordering::Relaxed),
            bytes_down: c.bytes_down.load(Ordering::Relaxed),
        }
    }

    fn count<T>(
        &self,
        op: Op,
        up: usize,
        result: Result<T>,
        down: impl Fn(&T) -> usize,
    ) -> Result<T> {
        let i = index(op);
        self.counters.requests[i].fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_up
            .fetch_add(up as u64, Ordering::Relaxed);
        match &result {
            Ok(value) => {
                self.counters
                    .bytes_down
                    .fetch_add(down(value) as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.counters.failures[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }
}

#[async_trait]
impl BlobStore for Metered {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        let up = data.len();
        let result = self.inner.create(key, data).await;
        self.count(Op::Create, up, result, |_| 0)
    }

    async fn get(&self, key: &str) -> Result<Object> {
        let result = self.inner.get(key).await;
        self.count(Op::Get, 0, result, |o| o.data.len())
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let result = self.inner.get_range(key, range).await;
        self.count(Op::GetRange, 0, result, Bytes::len)
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        let result = self.inner.head(key).await;
        self.count(Op::Head, 0, result, |_| 0)
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        let up = data.len();
        let result = self.inner.replace(key, generation, data).await;
        self.count(Op::Replace, up, result, |_| 0)
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        let result = self.inner.delete(key, generation).await;
        self.count(Op::Delete, 0, result, |_| 0)
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        let result = self.inner.list(prefix, start_after, cursor).await;
        self.count(Op::List, 0, result, |_| 0)
    }
    fn unique_generations(&self) -> bool {
        self.inner.unique_generations()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    #[tokio::test]
    async fn counts_requests_failures_and_bytes() {
        let metered = Metered::new(Arc::new(MemoryStore::new()));
        let before = metered.reading();
        metered
            .create("a", Bytes::from_static(b"hello"))
            .await
            .unwrap();
        metered
            .create("a", Bytes::from_static(b"again"))
            .await
            .unwrap_err();
        metered.get("a").await.unwrap();
        metered.get("missing").await.unwrap_err();
        let delta = metered.reading().since(&before);
        assert_eq!(delta.requests(Op::Create), 2);
        assert_eq!(delta.failures(Op::Create), 1);
        assert_eq!(delta.requests(Op::Get), 2);
        assert_eq!(delta.failures(Op::Get), 1);
        assert_eq!(delta.bytes_up, 10);
        assert_eq!(delta.bytes_down, 5);
        assert_eq!(delta.total_requests(), 4);
    }
}
