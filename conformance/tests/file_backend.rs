//! The backend suites on the file store, each world in a fresh temporary directory, and the
//! differential suite with the reference model as the reference.

use quire_conformance::{
    DifferentialPlan, FileFactory, ModelFactory, Outcome, ReplicaLoad, catalog_case_names,
    replica_case_names, run_catalog_suite, run_differential, run_replica_suite, run_store_suite,
    store_case_names,
};

fn factory(dir: &tempfile::TempDir) -> FileFactory {
    FileFactory::new(dir.path(), true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_passes_the_document_store_suite() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_store_suite(&factory(&dir)).await;
    report.assert_passed();
    assert_eq!(report.outcomes.len(), store_case_names().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_passes_the_catalog_suite() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_catalog_suite(&factory(&dir)).await;
    report.assert_passed();
    assert_eq!(report.outcomes.len(), catalog_case_names().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_passes_the_replica_suite_as_one_shared_replica() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_replica_suite(&factory(&dir), ReplicaLoad::default()).await;
    report.assert_passed();
    assert_eq!(report.outcomes.len(), replica_case_names().len());
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
    run_replica_suite(&ModelFactory, ReplicaLoad::default())
        .await
        .assert_passed();
}
