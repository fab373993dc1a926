//! The blob suite on the file driver, in a fresh temporary directory.

use std::sync::Arc;

use quire_blob::file::DirBlobStore;
use quire_conformance::{Capabilities, fresh_root, run_blob_suite};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_driver_passes_the_blob_suite() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirBlobStore::open(dir.path().join("store")).unwrap();
    let report = run_blob_suite(
        Arc::new(store),
        &fresh_root("file"),
        Capabilities::default(),
    )
    .await;
    report.assert_complete(&quire_conformance::blob_case_names());
}
