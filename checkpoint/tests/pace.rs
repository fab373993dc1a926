//! A store's pace bounds how many of a checkpoint's uploads are in flight at once.

mod common;

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use quire_blob::{Attributes, BlobStore, Generation, ListPage, Object};
use quire_checkpoint::{OpenOptions, Replica, UploadPace};

/// Counts the creates in flight at once; each takes a millisecond, so uploads overlap as
/// far as the writer lets them.
#[derive(Debug)]
struct Widest {
    inner: Arc<dyn BlobStore>,
    now: AtomicUsize,
    most: AtomicUsize,
}

#[async_trait::async_trait]
impl BlobStore for Widest {
    async fn create(&self, key: &str, data: Bytes) -> quire_blob::Result<Attributes> {
        let running = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(running, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let created = self.inner.create(key, data).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        created
    }
    async fn get(&self, key: &str) -> quire_blob::Result<Object> {
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> quire_blob::Result<Bytes> {
        self.inner.get_range(key, range).await
    }
    async fn head(&self, key: &str) -> quire_blob::Result<Attributes> {
        self.inner.head(key).await
    }
    async fn replace(
        &self,
        key: &str,
        generation: &Generation,
        data: Bytes,
    ) -> quire_blob::Result<Attributes> {
        self.inner.replace(key, generation, data).await
    }
    async fn delete(&self, key: &str, generation: &Generation) -> quire_blob::Result<()> {
        self.inner.delete(key, generation).await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> quire_blob::Result<ListPage> {
        self.inner.list(prefix, start_after, cursor).await
    }
    fn unique_generations(&self) -> bool {
        self.inner.unique_generations()
    }
}

#[derive(Debug)]
struct Fixed(usize);

impl UploadPace for Fixed {
    fn in_flight(&self, _most: usize) -> usize {
        self.0
    }
}

/// Writes a world of 400 documents in 40 slots and checkpoints it under `pace`; returns the
/// most creates the checkpoint had in flight at once. The checkpoint must cold-start to the
/// state it was written from.
async fn widest_checkpoint(pace: Option<usize>) -> usize {
    let store = Arc::new(Widest {
        inner: memory(),
        now: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
    });
    let dyn_store: Arc<dyn BlobStore> = store.clone();
    let mut writer = new_world(dyn_store.clone(), SMALL_WIDTHS).await;
    for s in 0..40 {
        let slot: Vec<_> = (0..10)
            .map(|d| publish(&format!("/d{d}/{s}.md"), &format!("body {s} {d}\n")))
            .collect();
        writer.commit(&slot).await;
    }
    let mut replica = Replica::open(dyn_store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    if let Some(width) = pace {
        replica.set_upload_pace(Arc::new(Fixed(width)));
    }
    store.most.store(0, Ordering::SeqCst);
    let written = replica
        .checkpoint(Duration::from_secs(1800))
        .await
        .unwrap()
        .expect("a checkpoint is written");
    assert!(
        written.created > 8,
        "enough objects to overlap: {written:?}"
    );
    let reopened = Replica::open(dyn_store, PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    assert_eq!(
        reopened.state(),
        replica.state(),
        "the paced checkpoint is whole"
    );
    store.most.load(Ordering::SeqCst)
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_runs_its_uploads_no_wider_than_its_pace() {
    let unpaced = widest_checkpoint(None).await;
    assert!(unpaced > 2, "without a pace uploads overlap: {unpaced}");
    assert_eq!(widest_checkpoint(Some(2)).await, 2);
    assert_eq!(widest_checkpoint(Some(1)).await, 1);
}
