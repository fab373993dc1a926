//! The backend suites on the file store, each world in a fresh temporary directory, and the
//! differential suite with the reference model as the reference.

use quire_conformance::{
    DifferentialPlan, FileFactory, ModelFactory, Outcome, ReplicaLoad, body_case_names,
    catalog_case_names, replica_case_names, run_body_suite, run_catalog_suite, run_differential,
    run_replica_suite, run_store_suite, store_case_names,
};

fn factory(dir: &tempfile::TempDir) -> FileFactory {
    FileFactory::new(dir.path(), true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_passes_the_document_store_suite() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_store_suite(&factory(&dir)).await;
    report.assert_complete(&store_case_names());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_passes_the_catalog_suite() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_catalog_suite(&factory(&dir)).await;
    report.assert_complete(&catalog_case_names());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_passes_the_body_suite() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_body_suite(&factory(&dir)).await;
    report.assert_complete(&body_case_names());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_passes_the_replica_suite_as_one_shared_replica() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_replica_suite(&factory(&dir), ReplicaLoad::default()).await;
    report.assert_complete(&replica_case_names());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_matches_the_reference_model() {
    let dir = tempfile::tempdir().unwrap();
    // Throwaway worlds: fsync adds nothing to what the comparison proves.
    let candidate = FileFactory::new(dir.path(), false);
    let plan = DifferentialPlan::default();
    let report = run_differential(&ModelFactory, &candidate, &plan).await;
    report.assert_passed();
    assert_eq!(report.outcomes.len(), plan.seeds.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reference_model_passes_the_contract_suites() {
    let store = run_store_suite(&ModelFactory).await;
    store.assert_passed();
    let gaps: Vec<&str> = store
        .outcomes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Gap(_)))
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(gaps, ["verify_chain_tampered", "verify_chain_tampered_tip"]);
    run_catalog_suite(&ModelFactory).await.assert_passed();
    run_body_suite(&ModelFactory).await.assert_passed();
    run_replica_suite(&ModelFactory, ReplicaLoad::default())
        .await
        .assert_passed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_shows_the_same_world_after_reopening() {
    use std::sync::Arc;

    use quire_backend::Store;
    use quire_backend::file::{FileOptions, FileStore};
    use quire_conformance::{SUITE_EPOCH, ViewPerCall, observe, run_operations};
    use quire_log::ManualClock;

    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(SUITE_EPOCH));
    let options = FileOptions {
        clock: clock.clone(),
        ..FileOptions::default()
    };
    let store: Arc<dyn Store> =
        Arc::new(FileStore::open(dir.path(), options.clone()).await.unwrap());
    let answers = run_operations(store.clone(), &clock, 42, 300)
        .await
        .unwrap();
    assert!(
        answers.iter().filter(|a| a.contains(" v")).count() > 50,
        "too few writes landed"
    );
    let before = observe(&ViewPerCall::new(store.clone())).await;
    store.close().await;
    drop(store);
    let reopened: Arc<dyn Store> = Arc::new(FileStore::open(dir.path(), options).await.unwrap());
    let after = observe(&ViewPerCall::new(reopened)).await;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(b, a, "line {i} changed across reopening");
    }
    assert_eq!(before.len(), after.len());
}
