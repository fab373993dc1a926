//! The blob suite on every driver, each opened as the server opens it
//! (`quire_conformance::driver_target_from_env`). The network drivers need the local servers
//! `cargo xtask servers` starts; without them those cases are skipped, unless
//! QUIRE_TEST_REQUIRE_SERVERS=1.

use quire_conformance::{DRIVERS, Outcome};
use quire_conformance::{blob_case_names, driver_target_from_env, fresh_root, run_blob_suite};

/// The cases a target may report as gaps: what its server cannot show.
const EXPECTED_GAPS: &[(&str, &[&str])] = &[("gcs", &["delete_cas", "delete_recreate_aba"])];

async fn passes_the_blob_suite(name: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let Some(target) = driver_target_from_env(name, scratch.path()) else {
        return;
    };
    let store = target.open().await.unwrap();
    let report = run_blob_suite(store, &fresh_root(name), target.capabilities).await;
    report.assert_complete(&blob_case_names());
    let allowed = EXPECTED_GAPS
        .iter()
        .find(|(driver, _)| *driver == name)
        .map_or(&[][..], |(_, cases)| *cases);
    for (case, outcome) in &report.outcomes {
        if let Outcome::Gap(why) = outcome {
            assert!(
                allowed.contains(case),
                "unexpected gap on {name} in {case}: {why}"
            );
        }
    }
}

macro_rules! the_blob_suite_on {
    ($($driver:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $driver() {
                passes_the_blob_suite(stringify!($driver)).await;
            }
        )*

        #[test]
        fn every_driver_has_its_test() {
            assert_eq!([$(stringify!($driver)),*], DRIVERS);
        }
    };
}

mod the_blob_suite_passes_on {
    use super::*;

    the_blob_suite_on!(memory, file, s3, gcs);
}
