//! `cargo xtask bench peers`: Quire's commit path against SlateDB on one local S3 server, the
//! same workload one run after the other, in one table.
//!
//! The runs: SlateDB (benches/peers-slatedb, its own workspace and lockfile, built here in
//! release into `target/peers-slatedb`) at each WAL flush interval asked for (100, 10 and 1 ms
//! by default), then Quire's bucket store in-process and a real `quire serve` over HTTP
//! (server/benches/peers.rs). Every run reaches the bucket through one counting proxy, so
//! bucket requests and bytes are counted the same way for both; each bench marks its
//! measured window on stdout and the proxy's counters are read at the two marks. The proxy
//! also times each PUT to the bucket's answer, so the table shows how much of a write's
//! latency is the bucket's own round trip.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::counting_proxy::{CountingProxy, Kind, Reading};
use crate::servers;

/// The SlateDB version benches/peers-slatedb/Cargo.toml pins, as the table names it.
const SLATEDB: &str = "SlateDB 0.18.0";

/// Arguments after `cargo xtask bench peers --`.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
struct PeersArgs {
    /// Measured seconds of each run.
    #[arg(long, default_value_t = 15.0)]
    seconds: f64,
    /// Unmeasured seconds before each run's measured ones.
    #[arg(long, default_value_t = 2.0)]
    warmup_seconds: f64,
    /// Closed-loop writers.
    #[arg(long, default_value_t = 64)]
    writers: usize,
    /// Bytes of each written value (SlateDB) or document body (Quire).
    #[arg(long, default_value_t = 300)]
    value_bytes: usize,
    /// SlateDB's WAL flush intervals, in milliseconds, one run each.
    #[arg(long, value_delimiter = ',', default_value = "100,10,1")]
    flush_ms: Vec<u64>,
    /// Which sides run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "slatedb,quire-in-process,quire-http"
    )]
    only: Vec<Side>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Side {
    Slatedb,
    QuireInProcess,
    QuireHttp,
}

/// One run's figures: what the bench printed and what the proxy counted in its window.
#[derive(Debug)]
struct Row {
    label: String,
    writes: u64,
    seconds: f64,
    failed: u64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    bucket: Reading,
    /// The bucket's PUT latencies in the window, sorted.
    puts: Vec<Duration>,
}

pub(crate) async fn run(args: &[String]) -> Result<()> {
    let args = PeersArgs::try_parse_from(args)?;
    let root = servers::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());

    // Built before any run, so no run shares the cores with a compiler.
    let slatedb_target = root.join("target").join("peers-slatedb");
    let manifest = root.join("benches/peers-slatedb/Cargo.toml");
    if args.only.contains(&Side::Slatedb) {
        let status = Command::new(&cargo)
            .args(["build", "--release", "--locked", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&slatedb_target)
            .status()
            .await
            .context("building the SlateDB bench")?;
        if !status.success() {
            bail!("building the SlateDB bench failed: {status}");
        }
    }
    let quire_bench = ["bench", "-p", "quire-server", "--bench", "peers"];
    if args.only.iter().any(|s| *s != Side::Slatedb) {
        let status = Command::new(&cargo)
            .current_dir(&root)
            .args(quire_bench)
            .arg("--no-run")
            .status()
            .await
            .context("building the Quire peers bench")?;
        if !status.success() {
            bail!("building the Quire peers bench failed: {status}");
        }
    }

    // The local S3 server: the one the environment names, else one started for this run.
    let mut _started = None;
    let mut env: Vec<(String, String)> = match std::env::var("QUIRE_TEST_S3_ENDPOINT") {
        Ok(endpoint) => {
            let mut env = vec![("QUIRE_TEST_S3_ENDPOINT".to_owned(), endpoint)];
            for name in [
                "QUIRE_TEST_S3_BUCKET",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_REGION",
            ] {
                if let Ok(value) = std::env::var(name) {
                    env.push((name.to_owned(), value));
                }
            }
            env
        }
        Err(_) => {
            let scratch = tempfile::Builder::new()
                .prefix("quire-servers-")
                .tempdir()
                .context("creating a scratch directory")?;
            let server = servers::seaweedfs::start(scratch.path()).await?;
            let env = server.env.clone();
            _started = Some((scratch, server));
            env
        }
    };
    let upstream = env
        .iter()
        .find(|(k, _)| k == "QUIRE_TEST_S3_ENDPOINT")
        .map(|(_, v)| v.clone())
        .context("no S3 endpoint")?;
    let proxy = CountingProxy::start(&upstream).await?;
    for (name, value) in &mut env {
        if name == "QUIRE_TEST_S3_ENDPOINT" {
            value.clone_from(&proxy.endpoint);
        }
    }

    let common = [
        "--writers".to_owned(),
        args.writers.to_string(),
        "--seconds".to_owned(),
        args.seconds.to_string(),
        "--warmup-seconds".to_owned(),
        args.warmup_seconds.to_string(),
        "--value-bytes".to_owned(),
        args.value_bytes.to_string(),
    ];
    eprintln!(
        "xtask: peers: {} closed-loop writers, {}-byte values, {} s measured after {} s of warm-up per run, on {upstream} through a counting proxy",
        args.writers, args.value_bytes, args.seconds, args.warmup_seconds
    );
    let mut rows = Vec::new();
    if args.only.contains(&Side::Slatedb) {
        let binary = slatedb_target
            .join("release")
            .join("quire-bench-peers-slatedb");
        for &flush in &args.flush_ms {
            let mut command = Command::new(&binary);
            command
                .arg("--flush-ms")
                .arg(flush.to_string())
                .args(&common);
            let label = format!("{SLATEDB}, flush {flush} ms");
            rows.push(one_run(&label, command, &env, &proxy).await?);
        }
    }
    for (side, mode, label) in [
        (Side::QuireInProcess, "in-process", "Quire in-process"),
        (Side::QuireHttp, "http", "Quire over HTTP"),
    ] {
        if !args.only.contains(&side) {
            continue;
        }
        let mut command = Command::new(&cargo);
        command
            .current_dir(&root)
            .args(quire_bench)
            .args(["--", "--mode", mode])
            .args(&common);
        rows.push(one_run(label, command, &env, &proxy).await?);
    }
    print_table(&args, &rows);
    Ok(())
}

/// Runs one bench, echoing its output, and reads the proxy at its window marks.
async fn one_run(
    label: &str,
    mut command: Command,
    env: &[(String, String)],
    proxy: &CountingProxy,
) -> Result<Row> {
    eprintln!("xtask: peers: {label}");
    let mut child = command
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {label}"))?;
    let stdout = child.stdout.take().context("piped stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let (mut open, mut closed, mut result) = (None, None, None);
    while let Some(line) = lines.next_line().await? {
        match line.as_str() {
            "peers-window open" => open = Some(proxy.reading()),
            "peers-window closed" => closed = Some(proxy.reading()),
            _ => match line.strip_prefix("peers-result ") {
                Some(figures) => result = Some(figures.to_owned()),
                None => println!("  {line}"),
            },
        }
    }
    let status = child.wait().await?;
    if !status.success() {
        bail!("{label} failed: {status}");
    }
    let (Some(open), Some(closed), Some(result)) = (open, closed, result) else {
        bail!("{label} printed no measured window and result");
    };
    let figure = |name: &str| -> Result<f64> {
        result
            .split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .with_context(|| format!("{label}'s result has no {name}: {result}"))?
            .parse()
            .with_context(|| format!("{label}'s {name} is not a number: {result}"))
    };
    Ok(Row {
        label: label.to_owned(),
        writes: figure("writes")? as u64,
        seconds: figure("seconds")?,
        failed: figure("failed")? as u64,
        p50_us: figure("p50_us")? as u64,
        p99_us: figure("p99_us")? as u64,
        p999_us: figure("p999_us")? as u64,
        bucket: closed.since(&open),
        puts: proxy.put_latencies(&open, &closed),
    })
}

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

/// The `q` quantile of sorted latencies, in ms (`-` when there are none).
fn quantile_ms(sorted: &[Duration], q: f64) -> String {
    if sorted.is_empty() {
        return "-".into();
    }
    let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    format!("{:.1}", sorted[at].as_secs_f64() * 1000.0)
}

fn print_table(args: &PeersArgs, rows: &[Row]) {
    println!();
    println!(
        "peers: {} closed-loop writers, unique keys, {}-byte values, acknowledged when durable in the bucket, {} s each (latency from when the writer was ready to send; bucket requests counted by a proxy over the measured window; PUT p50/p99: the bucket's answer time to each PUT through the proxy, ms)",
        args.writers, args.value_bytes, args.seconds
    );
    println!(
        "| {:<28} | {:>8} | {:>7} | {:>7} | {:>8} | {:>9} | {:>23} | {:>8} | {:>10} | {:>11} | {:>6} |",
        "run",
        "writes/s",
        "p50 ms",
        "p99 ms",
        "p999 ms",
        "req/write",
        "PUT/GET/LIST/other",
        "B up/w",
        "B down/w",
        "PUT p50/p99",
        "failed"
    );
    println!(
        "|{:-<30}|{:->10}|{:->9}|{:->9}|{:->10}|{:->11}|{:->25}|{:->10}|{:->12}|{:->13}|{:->8}|",
        "", "", "", "", "", "", "", "", "", "", ""
    );
    for row in rows {
        let writes = row.writes.max(1) as f64;
        let per = |n: u64| n as f64 / writes;
        let split = format!(
            "{:.3}/{:.3}/{:.3}/{:.3}",
            per(row.bucket.requests(Kind::Put)),
            per(row.bucket.requests(Kind::Get)),
            per(row.bucket.requests(Kind::List)),
            per(row.bucket.requests(Kind::Other)),
        );
        println!(
            "| {:<28} | {:>8.0} | {:>7} | {:>7} | {:>8} | {:>9.3} | {:>23} | {:>8.0} | {:>10.0} | {:>11} | {:>6} |",
            row.label,
            row.writes as f64 / row.seconds,
            ms(row.p50_us),
            ms(row.p99_us),
            ms(row.p999_us),
            per(row.bucket.total()),
            split,
            per(row.bucket.bytes_up),
            per(row.bucket.bytes_down),
            format!(
                "{}/{}",
                quantile_ms(&row.puts, 0.5),
                quantile_ms(&row.puts, 0.99)
            ),
            row.failed,
        );
    }
}
