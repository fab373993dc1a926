//! The blob suite on the in-memory driver.

use std::sync::Arc;

use quire_blob::memory::MemoryStore;
use quire_conformance::{Capabilities, fresh_root, run_blob_suite};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_driver_passes_the_blob_suite() {
    let report = run_blob_suite(
        Arc::new(MemoryStore::new()),
        &fresh_root("memory"),
        Capabilities::default(),
    )
    .await;
    report.assert_complete(&quire_conformance::blob_case_names());
}
