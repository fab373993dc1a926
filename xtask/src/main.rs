//! Quire's developer tasks. `cargo xtask --help` lists them.
//!
//! - `test`: everything CI checks. Starts the local S3 and GCS servers, installs the
//!   independent clients the end-to-end tests drive (`clients`), runs the workspace's tests
//!   against them, then the conformance table.
//! - `conformance`: the conformance suites over every driver, printed as one table.
//! - `servers`: starts the local servers and prints the environment tests read, until Ctrl-C.
//! - `bench`: the benchmarks (`commit`, `state`, `coldstart`, `search`, `cost`, `flood`, `writes`,
//!   `replicas`, or `all`), in the release profile. `replicas` runs on the local S3 server,
//!   started for it unless the environment already names one.
//! - `bench peers`: Quire's commit path (in-process and over HTTP) against a pinned SlateDB
//!   (its own crate outside the workspace, built in release on demand) on the local S3
//!   server, one table (`peers.rs`, `counting_proxy.rs`).
//! - `gate`: the reliability gate at full size, in the release profile (its short form runs
//!   with the tests).

mod clients;
mod conformance;
mod counting_proxy;
mod gate;
mod peers;
mod servers;

use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Quire's developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Start the local servers, run every test against them, then the conformance table.
    Test,
    /// Run the conformance suites over every driver and print the table.
    Conformance,
    /// Start the local S3 and GCS servers, install the end-to-end clients, and print their
    /// environment until interrupted.
    Servers,
    /// Run the reliability gate: a million-document world for ten simulated minutes under
    /// faults and crashes, then audited (`QUIRE_SIM_SEED=N` or `--seed N` replays a run).
    Gate(gate::GateArgs),
    /// Run a benchmark: `commit` (group commit on a simulated bucket), `coldstart` (a
    /// million-document world on the file driver), `search` (body search over generated
    /// markdown on the file driver), `cost` (what a write costs in bucket requests and
    /// bytes on simulated GCS), `flood` (a real server's memory and a normal client's
    /// latency under a flood of slow connections), `writes` (writes/s one client and several
    /// get from the embedded default), `replicas` (several real processes on one world of
    /// the local S3 server, peers of each other, under an open-loop load), `peers` (Quire's
    /// commit path in-process and over HTTP against SlateDB on the local S3 server, one
    /// table), or `all`.
    /// Arguments after `--` go to the
    /// benchmark (e.g. `cargo xtask bench coldstart -- --docs 100000`).
    Bench {
        #[arg(value_enum, default_value = "all")]
        which: Bench,
        #[arg(last = true)]
        args: Vec<String>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Bench {
    Commit,
    State,
    Coldstart,
    Search,
    Cost,
    Flood,
    Writes,
    Replicas,
    Peers,
    All,
}

/// The benchmarks: (name, package, bench target).
const BENCHES: &[(Bench, &str, &str)] = &[
    (Bench::Commit, "quire-log", "commit"),
    (Bench::State, "quire-log", "state"),
    (Bench::Coldstart, "quire-checkpoint", "coldstart"),
    (Bench::Search, "quire-backend", "search"),
    (Bench::Cost, "quire-checkpoint", "cost"),
    (Bench::Flood, "quire-server", "flood"),
    (Bench::Writes, "quire-server", "writes"),
    (Bench::Replicas, "quire-server", "replicas"),
];

/// The benchmarks that need the local S3 server.
const ON_S3: &[Bench] = &[Bench::Replicas];

async fn bench(which: Bench, args: &[String]) -> Result<()> {
    // Started once, for the benchmarks that need it, unless one is already configured.
    let mut s3: Option<(tempfile::TempDir, servers::Server)> = None;
    for &(name, package, target) in BENCHES {
        if which != Bench::All && which != name {
            continue;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        if ON_S3.contains(&name) && std::env::var_os("QUIRE_TEST_S3_ENDPOINT").is_none() {
            if s3.is_none() {
                let scratch = tempfile::Builder::new()
                    .prefix("quire-servers-")
                    .tempdir()
                    .context("creating a scratch directory")?;
                let server = servers::seaweedfs::start(scratch.path()).await?;
                s3 = Some((scratch, server));
            }
            if let Some((_, server)) = &s3 {
                command.envs(server.env.iter().map(|(k, v)| (k, v)));
            }
        }
        let status = command
            .current_dir(servers::project_root())
            .args(["bench", "-p", package, "--bench", target, "--"])
            .args(args)
            .status()
            .with_context(|| format!("running the {target} benchmark"))?;
        if !status.success() {
            bail!("the {target} benchmark failed: {status}");
        }
    }
    // Its own orchestration: several benches, one of them outside the workspace.
    if which == Bench::Peers || which == Bench::All {
        drop(s3);
        peers::run(args).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Test => test().await,
        Task::Bench { which, args } => bench(which, &args).await,
        Task::Gate(args) => gate::run(&args),
        Task::Conformance => {
            let (scratch, servers) = start_servers().await?;
            conformance::run_table(scratch.path(), &servers).await
        }
        Task::Servers => {
            let (_scratch, servers) = start_servers().await?;
            for server in &servers {
                for (name, value) in &server.env {
                    println!("export {name}={value}");
                }
            }
            for (name, value) in clients::install()? {
                println!("export {name}={value}");
            }
            eprintln!("xtask: servers running; Ctrl-C stops them");
            tokio::signal::ctrl_c().await?;
            Ok(())
        }
    }
}

/// Starts every local server under one scratch directory, removed when dropped.
async fn start_servers() -> Result<(tempfile::TempDir, Vec<servers::Server>)> {
    let scratch = tempfile::Builder::new()
        .prefix("quire-servers-")
        .tempdir()
        .context("creating a scratch directory")?;
    let s3 = servers::seaweedfs::start(scratch.path()).await?;
    let gcs = servers::fake_gcs::start(scratch.path()).await?;
    Ok((scratch, vec![s3, gcs]))
}

async fn test() -> Result<()> {
    let (scratch, servers) = start_servers().await?;
    let clients = clients::install()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(servers::project_root())
        .args(["test", "--workspace", "--all-features"])
        .env("QUIRE_TEST_REQUIRE_SERVERS", "1");
    for server in &servers {
        command.envs(server.env.iter().map(|(k, v)| (k, v)));
    }
    command.envs(clients);
    let status = command.status().context("running cargo test")?;
    if !status.success() {
        bail!("cargo test failed: {status}");
    }
    conformance::run_table(scratch.path(), &servers).await
}
