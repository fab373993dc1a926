//! The conformance table: every suite over every driver.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use quire_blob::BlobStore;
use quire_conformance::{
    BucketFactory, Capabilities, DRIVERS, FileFactory, Outcome, ReplicaLoad, SuiteReport,
    driver_target, fresh_root, run_blob_suite, run_body_suite, run_catalog_suite,
    run_replica_suite, run_store_suite,
};

use crate::servers::Server;

/// A driver opened for the table.
struct Target {
    name: &'static str,
    store: Arc<dyn BlobStore>,
    capabilities: Capabilities,
}

/// The value of `name` in the environment of whichever server provides it.
fn server_var(servers: &[Server], name: &str) -> Option<String> {
    servers
        .iter()
        .flat_map(|server| server.env.iter())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.clone())
}

/// Every driver, on the servers just started.
async fn targets(scratch: &Path, servers: &[Server]) -> Result<Vec<Target>> {
    let lookup = |name: &str| server_var(servers, name);
    let mut targets = Vec::new();
    for name in DRIVERS {
        let target = driver_target(name, scratch, &lookup)
            .map_err(anyhow::Error::msg)?
            .with_context(|| format!("no local server is running for the {name} driver"))?;
        targets.push(Target {
            name: target.name(),
            store: target.open().await?,
            capabilities: target.capabilities,
        });
    }
    Ok(targets)
}

/// One suite's results: a column per target, a row per case.
struct Table {
    title: &'static str,
    columns: Vec<(String, SuiteReport)>,
}

impl Table {
    /// Prints the table; returns the failures and gaps it holds.
    fn print(&self) -> (Vec<String>, Vec<String>) {
        let (mut failures, mut gaps) = (Vec::new(), Vec::new());
        let Some((_, first)) = self.columns.first() else {
            return (failures, gaps);
        };
        let cases: Vec<&str> = first.outcomes.iter().map(|(case, _)| *case).collect();
        let width = cases
            .iter()
            .map(|c| c.len())
            .max()
            .unwrap_or(4)
            .max(self.title.len());
        print!("{:width$}", self.title);
        for (name, _) in &self.columns {
            print!(" | {name:13}");
        }
        println!();
        for (row, case) in cases.iter().enumerate() {
            print!("{case:width$}");
            for (name, report) in &self.columns {
                let outcome = report
                    .outcomes
                    .get(row)
                    .map(|(_, outcome)| outcome.clone())
                    .unwrap_or_else(|| Outcome::Failed("case missing from the report".into()));
                print!(" | {:13}", outcome.label());
                match outcome {
                    Outcome::Failed(why) => failures.push(format!("{name} {case}: {why}")),
                    Outcome::Gap(why) => gaps.push(format!("{name} {case}: {why}")),
                    Outcome::Passed => {}
                }
            }
            println!();
        }
        println!();
        (failures, gaps)
    }
}

/// Runs the blob suite over every driver, and the backend suites (document store, catalog,
/// body, replica) over the file store and the bucket store on every driver; prints one table per
/// suite and fails if any case failed anywhere.
/// The longest one suite may take on one target: a suite that outlives it fails the table,
/// naming itself, instead of holding the run until its overall limit.
const SUITE_DEADLINE: Duration = Duration::from_secs(600);

/// Runs one suite on one target, saying so on stderr first, so a run that stops shows where.
async fn suite<T>(suite: &str, target: &str, run: impl Future<Output = T>) -> Result<T> {
    eprintln!("xtask: conformance: the {suite} suite on {target}");
    tokio::time::timeout(SUITE_DEADLINE, run)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the {suite} suite on {target} did not finish within {SUITE_DEADLINE:?}"
            )
        })
}

pub(crate) async fn run_table(scratch: &Path, servers: &[Server]) -> Result<()> {
    let targets = targets(scratch, servers).await?;
    let mut blob = Table {
        title: "blob case",
        columns: Vec::new(),
    };
    for target in &targets {
        let report = suite(
            "blob",
            target.name,
            run_blob_suite(
                target.store.clone(),
                &fresh_root(target.name),
                target.capabilities,
            ),
        )
        .await?;
        blob.columns.push((target.name.to_owned(), report));
    }

    let mut store = Table {
        title: "document-store case",
        columns: Vec::new(),
    };
    let mut catalog = Table {
        title: "catalog case",
        columns: Vec::new(),
    };
    let mut body = Table {
        title: "body case",
        columns: Vec::new(),
    };
    let mut replica = Table {
        title: "replica case",
        columns: Vec::new(),
    };
    let file_store = FileFactory::new(scratch.join("file-store"), true);
    let on = "the file store";
    store.columns.push((
        "file store".into(),
        suite("document-store", on, run_store_suite(&file_store)).await?,
    ));
    catalog.columns.push((
        "file store".into(),
        suite("catalog", on, run_catalog_suite(&file_store)).await?,
    ));
    body.columns.push((
        "file store".into(),
        suite("body", on, run_body_suite(&file_store)).await?,
    ));
    replica.columns.push((
        "file store".into(),
        suite(
            "replica",
            on,
            run_replica_suite(&file_store, ReplicaLoad::default()),
        )
        .await?,
    ));
    for target in &targets {
        let name = format!("bucket/{}", target.name);
        let bucket =
            BucketFactory::under(target.store.clone(), &fresh_root(&name.replace('/', "-")));
        let report = suite("document-store", &name, run_store_suite(&bucket)).await?;
        store.columns.push((name.clone(), report));
        let report = suite("catalog", &name, run_catalog_suite(&bucket)).await?;
        catalog.columns.push((name.clone(), report));
        let report = suite("body", &name, run_body_suite(&bucket)).await?;
        body.columns.push((name.clone(), report));
        let load = ReplicaLoad::default();
        let report = suite("replica", &name, run_replica_suite(&bucket, load)).await?;
        replica.columns.push((name, report));
    }

    let (mut failures, mut gaps) = (Vec::new(), Vec::new());
    for table in [&blob, &store, &catalog, &body, &replica] {
        let (f, g) = table.print();
        failures.extend(f);
        gaps.extend(g);
    }
    // A gap is a case the target cannot show; it counts as skipped, never as passed.
    for gap in &gaps {
        println!("emulator gap: {gap}");
    }
    let total: usize = [&blob, &store, &catalog, &body, &replica]
        .iter()
        .flat_map(|t| t.columns.iter())
        .map(|(_, report)| report.outcomes.len())
        .sum();
    println!(
        "conformance: {} passed, {} failed, {} skipped",
        total - failures.len() - gaps.len(),
        failures.len(),
        gaps.len()
    );
    if !failures.is_empty() {
        bail!("conformance failures:\n  {}", failures.join("\n  "));
    }
    Ok(())
}
