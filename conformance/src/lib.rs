//! `quire-conformance`: the suites every blob store and every backend must pass.
//!
//! Suites never reach past the public contract: what they check is exactly what callers may
//! rely on. Each returns a [`SuiteReport`] (one [`Outcome`] per case) that tests assert with
//! [`SuiteReport::assert_passed`] and `cargo xtask conformance` prints as a table.
//!
//! | suite | entry | cases |
//! | --- | --- | --- |
//! | blob | [`run_blob_suite`] | the `BlobStore` contract, per driver |
//! | document store | [`run_store_suite`] | [`store_case_names`]: writes, reads, conflicts, no-ops, archive, append, listings, retention, topology, limits, metadata rules, cancellation, preconditions, closed views and stores, chain tampering |
//! | catalog | [`run_catalog_suite`] | [`catalog_case_names`]: LOOKUP in catalog mode |
//! | body | [`run_body_suite`] | [`body_case_names`]: LOOKUP in body mode (sections, ranking, scope, filters, updates, the fallback rule) |
//! | replica | [`run_replica_suite`] | [`replica_case_names`]: freshness across replicas, no lost writes |
//! | differential | [`run_differential`] | one case per seed: random operations against a reference, answers and [`observe`]d snapshots compared |
//! | reliability gate | [`gate::run_gate`] | a whole bucket-store world in simulation under faults and crashes, then audited: no acknowledged write lost |
//!
//! # Adding a blob driver
//!
//! Implement `quire_blob::BlobStore` and declare the driver in `quire_blob::DriverConfig`;
//! then give it a row in [`DRIVERS`] and an arm in [`driver_target`] (the variables that name
//! its local server, and its [`Capabilities`]) and its name in `conformance/tests/drivers.rs`.
//! The blob table of `cargo xtask conformance` and the bucket-store tables then run on it.
//!
//! # Adding a backend
//!
//! A backend implements `quire_backend::Store` (with `ChangeSource` and `Follower`) and
//! returns views implementing `quire_backend::ReadView`. Backends built on the log's world
//! model get their views for free: implement `quire_backend::snapshot::SnapshotSource`
//! (where snapshots and version bytes come from) and hand out `SnapshotView`s. Then:
//!
//! 1. Implement [`BackendFactory`]: `open(clock)` returns a [`FreshWorld`] — a store over a **new,
//!    empty** world whose `modified` times come from `clock`, and a [`Tamper`] hook that
//!    overwrites one version's stored bytes behind the store's back.
//! 2. If replicas can share a world, implement [`ReplicaFactory`]: `open_world(clock)` and
//!    then one store per [`ReplicaWorld::replica`] call. A single-writer backend returns the
//!    same store for every replica ([`SharedReplica`]).
//! 3. In a test (multi-threaded tokio runtime):
//!
//! ```ignore
//! let factory = MyFactory::new(..);
//! run_store_suite(&factory).await.assert_passed();
//! run_catalog_suite(&factory).await.assert_passed();
//! run_body_suite(&factory).await.assert_passed();
//! run_replica_suite(&factory, ReplicaLoad::default()).await.assert_passed();
//! run_differential(&ModelFactory, &factory, &DifferentialPlan::default()).await.assert_passed();
//! ```
//!
//! The reference for the differential suite is [`ModelFactory`] (the [`model`] store) or any
//! backend already trusted; [`FileFactory`] opens file stores and [`BucketFactory`] bucket
//! stores over any blob store. `conformance/tests/` shows
//! each suite run on the shipped backends.

mod blob;
mod body;
mod bucket_factory;
mod catalog;
mod differential;
mod factories;
pub mod gate;
mod harness;
pub mod model;
mod replica;
mod report;
mod store;
mod targets;

pub use blob::{Capabilities, blob_case_names, run_blob_suite};
pub use body::{body_case_names, run_body_suite};
pub use bucket_factory::BucketFactory;
pub use catalog::{catalog_case_names, run_catalog_suite};
pub use differential::{DIRS, DifferentialPlan, PATHS, observe, run_differential, run_operations};
pub use factories::{FileFactory, ModelFactory, SharedReplica, file_tamper};
pub use harness::{
    BackendFactory, FreshWorld, ReplicaFactory, ReplicaWorld, SUITE_EPOCH, Tamper, ViewPerCall,
};
pub use replica::{ReplicaLoad, replica_case_names, run_replica_suite};
pub use report::{CaseError, CaseResult, Outcome, SuiteReport};
pub use store::{run_store_suite, store_case_names};
pub use targets::{DRIVERS, DriverTarget, REQUIRE_SERVERS, driver_target, driver_target_from_env};

/// A prefix no earlier run used, so suites can share a persistent bucket.
#[allow(
    clippy::disallowed_methods,
    reason = "unique across runs sharing a real bucket"
)]
pub fn fresh_root(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("conformance/{label}-{nanos:x}-{:x}/", std::process::id())
}
