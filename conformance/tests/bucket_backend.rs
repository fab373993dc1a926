//! The backend suites on the bucket store, over the in-memory and the file blob drivers:
//! document store, catalog, body, replica (several bucket stores over one shared bucket) and the
//! differential suite against the file store. Also: a prefix holding foreign objects is
//! refused, and a read-only open writes nothing.

use std::sync::Arc;

use bytes::Bytes;
use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::{Ctx, ErrorKind, Store, WriteRequest};
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Metered};
use quire_conformance::{
    BucketFactory, DifferentialPlan, FileFactory, ReplicaLoad, SUITE_EPOCH, ViewPerCall,
    body_case_names, catalog_case_names, replica_case_names, run_body_suite, run_catalog_suite,
    run_differential, run_replica_suite, run_store_suite, store_case_names,
};
use quire_log::ManualClock;

fn memory() -> BucketFactory {
    BucketFactory::new(Arc::new(MemoryStore::new()))
}

fn file_driver(dir: &tempfile::TempDir) -> BucketFactory {
    let blobs = quire_blob::file::DirBlobStore::open(dir.path().join("bucket")).unwrap();
    BucketFactory::new(Arc::new(blobs))
}

async fn all_suites(factory: &BucketFactory) {
    let store = run_store_suite(factory).await;
    store.assert_complete(&store_case_names());
    let catalog = run_catalog_suite(factory).await;
    catalog.assert_complete(&catalog_case_names());
    let body = run_body_suite(factory).await;
    body.assert_complete(&body_case_names());
    let replica = run_replica_suite(factory, ReplicaLoad::default()).await;
    replica.assert_complete(&replica_case_names());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bucket_store_on_memory_passes_the_backend_suites() {
    all_suites(&memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bucket_store_on_the_file_driver_passes_the_backend_suites() {
    let dir = tempfile::tempdir().unwrap();
    all_suites(&file_driver(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bucket_store_on_memory_matches_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let reference = FileFactory::new(dir.path(), false);
    let plan = DifferentialPlan {
        seeds: (1..=8).collect(),
        ..DifferentialPlan::default()
    };
    let report = run_differential(&reference, &memory(), &plan).await;
    report.assert_passed();
    assert_eq!(report.outcomes.len(), plan.seeds.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bucket_store_on_the_file_driver_matches_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let reference = FileFactory::new(dir.path().join("reference"), false);
    let plan = DifferentialPlan {
        seeds: (1..=4).collect(),
        ..DifferentialPlan::default()
    };
    let report = run_differential(&reference, &file_driver(&dir), &plan).await;
    report.assert_passed();
    assert_eq!(report.outcomes.len(), plan.seeds.len());
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(SUITE_EPOCH))
}

#[tokio::test]
async fn a_prefix_holding_foreign_objects_is_refused() {
    let blobs = Arc::new(MemoryStore::new());
    blobs
        .create("shared/notes.txt", Bytes::from_static(b"not a world"))
        .await
        .unwrap();
    let options = BucketOptions {
        prefix: "shared/".into(),
        clock: clock(),
        compaction: None,
        ..BucketOptions::default()
    };
    let err = BucketStore::open(blobs.clone(), options.clone())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
    assert!(
        err.to_string().contains("not a world's: shared/notes.txt"),
        "{err}"
    );
    let listed = quire_blob::list_all(blobs.as_ref(), "", "").await.unwrap();
    assert_eq!(listed.len(), 1, "the refused open wrote {listed:?}");

    // Another world's marker is refused too.
    let fresh = BucketOptions {
        prefix: "other/".into(),
        ..options
    };
    let first = BucketStore::open(blobs.clone(), fresh.clone())
        .await
        .unwrap();
    first.close().await;
    let mut elsewhere = fresh;
    elsewhere.world = Some(quire_log::WorldId([9; 16]));
    let err = BucketStore::open(blobs, elsewhere).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
}

#[tokio::test]
async fn a_read_only_open_writes_nothing() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let options = BucketOptions {
        prefix: "ro/".into(),
        clock: clock(),
        compaction: None,
        ..BucketOptions::default()
    };
    let writer = BucketStore::open(memory.clone(), options.clone())
        .await
        .unwrap();
    let direct = ViewPerCall::new(Arc::new(writer.clone()));
    direct.write("/a.md", None, "one", &[]).await.unwrap();
    direct.write("/a.md", None, "two", &[]).await.unwrap();

    let metered = Arc::new(Metered::new(memory.clone()));
    let readonly = BucketStore::open(
        metered.clone(),
        BucketOptions {
            read_only: true,
            ..options.clone()
        },
    )
    .await
    .unwrap();
    let reader = ViewPerCall::new(Arc::new(readonly.clone()));
    assert_eq!(reader.get("/a.md", 0).await.unwrap().content, "two");
    // A write on the writer is seen by the reader's next exact read.
    direct.write("/a.md", None, "three", &[]).await.unwrap();
    assert_eq!(reader.get("/a.md", 0).await.unwrap().content, "three");
    assert_eq!(reader.versions("/a.md").await.unwrap().len(), 3);
    let refused = readonly
        .publish(&Ctx::new(), WriteRequest::new("/b.md", "x"))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ReadOnly);
    readonly.close().await;
    let reading = metered.reading();
    let writes: u64 = [
        quire_blob::Op::Create,
        quire_blob::Op::Replace,
        quire_blob::Op::Delete,
    ]
    .into_iter()
    .map(|op| reading.requests(op))
    .sum();
    assert!(reading.total_requests() > 0, "the reader read nothing");
    assert_eq!(writes, 0, "a read-only store wrote: {reading:?}");

    // A read-only open of an empty prefix finds no world and creates none.
    let empty = BucketStore::open(
        metered.clone(),
        BucketOptions {
            prefix: "empty/".into(),
            read_only: true,
            ..options
        },
    )
    .await
    .unwrap_err();
    assert_eq!(empty.kind(), ErrorKind::NotFound, "{empty}");
    assert!(
        quire_blob::list_all(memory.as_ref(), "empty/", "")
            .await
            .unwrap()
            .is_empty()
    );
}
