//! The in-memory driver: for tests, simulation and benchmarks. Generations come from one
//! process-wide counter, so they never repeat, not even across stores or re-created keys.
//! Objects' `modified` times come from the system clock, or from the clock a simulation
//! gives [`MemoryStore::with_clock`], so stored ages follow simulated time.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

use crate::BlobStore;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::list::{ListRequest, MAX_LIST_PAGE};
use crate::types::{Attributes, Generation, ListPage, Object, cut_range, validate_key};

static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

#[derive(Clone, Debug)]
struct Stored {
    data: Bytes,
    generation: Generation,
    modified: SystemTime,
}

impl Stored {
    fn attributes(&self, key: &str) -> Attributes {
        Attributes {
            key: key.to_owned(),
            size: self.data.len() as u64,
            generation: self.generation.clone(),
            modified: self.modified,
        }
    }
}

/// Where a memory store's `modified` times come from.
pub type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// A [`BlobStore`] held in memory.
#[derive(Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, Stored>>,
    max_object_size: Option<u64>,
    /// `None`: the system clock.
    clock: Option<WallClock>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("max_object_size", &self.max_object_size)
            .field("clock", &self.clock.as_ref().map(|_| "injected"))
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store refusing objects larger than `limit` bytes (as a precondition error).
    pub fn with_max_object_size(limit: u64) -> Self {
        MemoryStore {
            max_object_size: Some(limit),
            ..MemoryStore::default()
        }
    }

    /// A store stamping objects' `modified` times from `clock` rather than the system
    /// clock (a simulation's wall time).
    pub fn with_clock(clock: WallClock) -> Self {
        MemoryStore {
            clock: Some(clock),
            ..MemoryStore::default()
        }
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "without an injected clock, stamps are wall time, as a bucket's"
    )]
    fn now(&self) -> SystemTime {
        match &self.clock {
            Some(clock) => clock(),
            None => SystemTime::now(),
        }
    }

    fn new_stored(&self, op: Op, key: &str, data: Bytes) -> Result<Stored> {
        if let Some(limit) = self.max_object_size
            && data.len() as u64 > limit
        {
            return Err(Error::new(
                op,
                key,
                ErrorKind::Precondition,
                format!(
                    "object of {} bytes exceeds the limit of {limit}",
                    data.len()
                ),
            ));
        }
        let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
        Ok(Stored {
            data,
            generation: Generation::new(generation.to_string()),
            modified: self.now(),
        })
    }

    fn lookup(&self, op: Op, key: &str) -> Result<Stored> {
        validate_key(op, key)?;
        let objects = self.objects.lock().expect("memory store lock poisoned");
        objects
            .get(key)
            .cloned()
            .ok_or_else(|| Error::new(op, key, ErrorKind::NotFound, ""))
    }
}

#[async_trait]
impl BlobStore for MemoryStore {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        validate_key(Op::Create, key)?;
        let stored = self.new_stored(Op::Create, key, data)?;
        let mut objects = self.objects.lock().expect("memory store lock poisoned");
        if objects.contains_key(key) {
            return Err(Error::new(
                Op::Create,
                key,
                ErrorKind::Precondition,
                "key exists",
            ));
        }
        let attrs = stored.attributes(key);
        objects.insert(key.to_owned(), stored);
        Ok(attrs)
    }

    async fn get(&self, key: &str) -> Result<Object> {
        let stored = self.lookup(Op::Get, key)?;
        Ok(Object {
            attributes: stored.attributes(key),
            data: stored.data,
        })
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        crate::types::validate_range(Op::GetRange, key, &range)?;
        let stored = self.lookup(Op::GetRange, key)?;
        cut_range(key, &stored.data, range)
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        Ok(self.lookup(Op::Head, key)?.attributes(key))
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        validate_key(Op::Replace, key)?;
        let stored = self.new_stored(Op::Replace, key, data)?;
        let mut objects = self.objects.lock().expect("memory store lock poisoned");
        match objects.get_mut(key) {
            Some(current) if current.generation == *generation => {
                *current = stored;
                Ok(current.attributes(key))
            }
            Some(_) => Err(Error::new(
                Op::Replace,
                key,
                ErrorKind::Precondition,
                "generation differs",
            )),
            None => Err(Error::new(
                Op::Replace,
                key,
                ErrorKind::Precondition,
                "key absent",
            )),
        }
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        validate_key(Op::Delete, key)?;
        let mut objects = self.objects.lock().expect("memory store lock poisoned");
        match objects.get(key) {
            Some(current) if current.generation == *generation => {
                objects.remove(key);
                Ok(())
            }
            Some(_) => Err(Error::new(
                Op::Delete,
                key,
                ErrorKind::Precondition,
                "generation differs",
            )),
            None => Err(Error::new(
                Op::Delete,
                key,
                ErrorKind::Precondition,
                "key absent",
            )),
        }
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        let request = ListRequest::parse(prefix, start_after, cursor)?;
        let objects = self.objects.lock().expect("memory store lock poisoned");
        let mut found = Vec::new();
        let mut more = false;
        // Start at the prefix when the caller's position sorts before it.
        let start = if request.effective_after() < prefix {
            std::ops::Bound::Included(prefix.to_owned())
        } else {
            std::ops::Bound::Excluded(request.effective_after().to_owned())
        };
        let range = (start, std::ops::Bound::Unbounded);
        for (key, stored) in objects.range::<String, _>(range) {
            if !request.admits(key) {
                // Keys under one prefix are contiguous in byte order: past them, stop.
                break;
            }
            if found.len() == MAX_LIST_PAGE {
                more = true;
                break;
            }
            found.push(stored.attributes(key));
        }
        drop(objects);
        request.page(found, more)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[tokio::test]
    async fn an_injected_clock_stamps_modified_times() {
        let secs = Arc::new(AtomicU64::new(1_000));
        let clock = secs.clone();
        let store = MemoryStore::with_clock(Arc::new(move || {
            UNIX_EPOCH + Duration::from_secs(clock.load(Ordering::SeqCst))
        }));
        let first = store.create("a", Bytes::from_static(b"1")).await.unwrap();
        assert_eq!(first.modified, UNIX_EPOCH + Duration::from_secs(1_000));
        secs.store(2_000, Ordering::SeqCst);
        let replaced = store
            .replace("a", &first.generation, Bytes::from_static(b"2"))
            .await
            .unwrap();
        assert_eq!(replaced.modified, UNIX_EPOCH + Duration::from_secs(2_000));
        assert_eq!(store.head("a").await.unwrap().modified, replaced.modified);
    }
}
