//! The conformance table: every suite over every driver.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use quire_blob::BlobStore;
use quire_blob::file::FileStore;
use quire_blob::memory::MemoryStore;
use quire_conformance::{Capabilities, Outcome, blob_case_names, fresh_root, run_blob_suite};

use crate::servers::Server;

struct Target {
    name: &'static str,
    store: Arc<dyn BlobStore>,
    capabilities: Capabilities,
}

fn targets(scratch: &Path, _servers: &[Server]) -> Result<Vec<Target>> {
    let file_root = scratch.join("file-driver");
    let file = FileStore::open(&file_root)
        .with_context(|| format!("opening a file store at {}", file_root.display()))?;
    Ok(vec![
        Target {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            capabilities: Capabilities::default(),
        },
        Target {
            name: "file",
            store: Arc::new(file),
            capabilities: Capabilities::default(),
        },
    ])
}

/// Runs the blob suite over every target and prints a case × driver table; fails if any case
/// failed anywhere.
pub async fn run_table(scratch: &Path, servers: &[Server]) -> Result<()> {
    let targets = targets(scratch, servers)?;
    let mut columns = Vec::new();
    for target in &targets {
        let report = run_blob_suite(
            target.store.clone(),
            &fresh_root(target.name),
            target.capabilities,
        )
        .await;
        columns.push(report);
    }
    let cases = blob_case_names();
    let width = cases.iter().map(|c| c.len()).max().unwrap_or(4).max(10);
    print!("{:width$}", "blob case");
    for target in &targets {
        print!(" | {:12}", target.name);
    }
    println!();
    let mut failures = Vec::new();
    for (row, case) in cases.iter().enumerate() {
        print!("{case:width$}");
        for (column, report) in columns.iter().enumerate() {
            let outcome = &report.outcomes[row].1;
            print!(" | {:12}", outcome.label());
            match outcome {
                Outcome::Failed(why) => {
                    failures.push(format!("{} {case}: {why}", targets[column].name))
                }
                Outcome::Gap(why) => eprintln!("gap: {} {case}: {why}", targets[column].name),
                Outcome::Passed => {}
            }
        }
        println!();
    }
    if !failures.is_empty() {
        bail!("conformance failures:\n  {}", failures.join("\n  "));
    }
    println!(
        "conformance: every case passed on {} drivers",
        targets.len()
    );
    Ok(())
}
