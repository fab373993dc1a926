//! `quire-conformance`: the suites any blob store (and, later, any backend) must pass.
//!
//! A driver proves itself by running [`run_blob_suite`] against a fresh root prefix and
//! asserting the report; `cargo xtask conformance` runs every suite over every driver and
//! prints one table. Suites never reach past the public contract: what they check is exactly
//! what callers may rely on.
//!
//! Adding a blob driver: implement `quire_blob::BlobStore`, then add a test that calls
//! `run_blob_suite(Arc::new(store), "<unique prefix>/", Capabilities::default())` and
//! `.assert_passed()`, and name the driver in xtask's conformance targets.

mod blob;

pub use blob::{Capabilities, Outcome, SuiteReport, blob_case_names, run_blob_suite};

/// A prefix no earlier run used, so suites can share a persistent bucket.
pub fn fresh_root(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("conformance/{label}-{nanos:x}-{:x}/", std::process::id())
}
