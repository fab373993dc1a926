//! Several real `quire serve` processes on one world: `cargo xtask bench replicas [--
//! --rate R --seconds S --processes 1,3 --in-flight F --no-hints --latency real-gcs]`.
//!
//! For each process count `N` (one run each, in the order given; default `1,3`): `N`
//! processes serve one world from one fresh prefix of the local S3 server (the
//! `QUIRE_TEST_S3_*` environment `cargo xtask servers` prints; `cargo xtask bench replicas`
//! starts it when the environment has none), peers of each other over `[peers]` (one
//! replica certificate from `quire peers cert`) unless `--no-hints`. An open-loop load
//! generator offers `R` writes per second in total, split evenly over the processes, each
//! write a new document on paths of its own process. Sends follow a fixed schedule whatever
//! the answers do, and each latency is measured from the write's scheduled send time, so a
//! stalled server shows as latency instead of as fewer samples (no coordinated omission);
//! at most `F` writes per process are outstanding, and a send waiting for one of them is
//! late by that wait. `--latency real-gcs` makes every process's bucket answer with the
//! simulated real-GCS latencies (`simulate_latency` in the bucket's configuration).
//!
//! Prints per process: writes acknowledged within the `S` seconds (and per second), its
//! share, p50/p99/p999 latency, refusals and failures, and from its /metrics the slot
//! races it lost, the pauses its committer took for peers (yields, hand-offs, listening
//! pauses), the hints it sent and followed, and its bucket requests; then the total, its
//! ratio to the one-process run of the same invocation, and bucket requests per write.
//!
//! Every process, the S3 server and the load generator share this machine's cores: the
//! figures are of that whole.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quire_server::auth::{Operation, TokenEntrySpec, TokenSecret};
use support::quantile;
use tokio::sync::Semaphore;
use tokio::time::Instant;

struct Args {
    rate: f64,
    seconds: f64,
    processes: Vec<usize>,
    in_flight: usize,
    hints: bool,
    latency: Option<String>,
}

fn args() -> Args {
    let mut args = Args {
        rate: 3000.0,
        seconds: 10.0,
        processes: vec![1, 3],
        in_flight: 1024,
        hints: true,
        latency: None,
    };
    let given: Vec<String> = std::env::args().skip(1).collect();
    let mut at = 0;
    while at < given.len() {
        let value = |what: &str| {
            given
                .get(at + 1)
                .unwrap_or_else(|| panic!("{} needs {what}", given[at]))
                .clone()
        };
        match given[at].as_str() {
            "--rate" => args.rate = value("writes/s").parse().expect("--rate R"),
            "--seconds" => args.seconds = value("seconds").parse().expect("--seconds S"),
            "--in-flight" => args.in_flight = value("a count").parse().expect("--in-flight F"),
            "--processes" => {
                args.processes = value("counts")
                    .split(',')
                    .map(|n| n.trim().parse().expect("--processes 1,3"))
                    .collect()
            }
            "--latency" => args.latency = Some(value("a latency profile")),
            "--no-hints" => {
                args.hints = false;
                at += 1;
                continue;
            }
            // `cargo bench` passes `--bench`; anything else unknown is ignored the same way.
            _ => {
                at += 1;
                continue;
            }
        }
        at += 2;
    }
    assert!(
        args.rate > 0.0 && args.seconds > 0.0,
        "--rate and --seconds must be above zero"
    );
    assert!(
        args.processes.iter().all(|&n| n >= 1),
        "process counts are at least 1"
    );
    args
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .expect("a UDP port")
        .local_addr()
        .expect("its address")
        .port()
}

/// A running `quire serve`, killed when dropped.
struct Server {
    child: Child,
    base: String,
    _stdout: BufReader<ChildStdout>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` processes on one fresh prefix, peers of each other when `hints`.
fn start_processes(dir: &Path, s3: &support::S3, n: usize, args: &Args) -> Vec<Server> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    let prefix = format!("bench-replicas/{n}-{nanos}-{}", std::process::id());
    let ports: Vec<u16> = (0..n).map(|_| free_udp_port()).collect();
    let latency = args
        .latency
        .as_ref()
        .map(|profile| format!("simulate_latency = \"{profile}\"\n"))
        .unwrap_or_default();
    let mut servers = Vec::new();
    for (k, port) in ports.iter().enumerate() {
        let peers = if args.hints && n > 1 {
            let others: Vec<String> = ports
                .iter()
                .filter(|p| *p != port)
                .map(|p| format!("\"127.0.0.1:{p}\""))
                .collect();
            format!(
                "[peers]\nlisten = \"127.0.0.1:{port}\"\naddresses = [{}]\ncert = \"replica-cert.pem\"\nkey = \"replica-key.pem\"\n\n",
                others.join(", ")
            )
        } else {
            String::new()
        };
        let config = format!(
            "[listen]\nhttp = \"127.0.0.1:0\"\nquic = \"127.0.0.1:0\"\n\n{peers}[[worlds]]\nname = \"shared\"\n\n\
             [worlds.backend]\nkind = \"bucket\"\ndriver = \"s3\"\nbucket = \"{}\"\nprefix = \"{prefix}\"\n\
             endpoint = \"{}\"\nregion = \"{}\"\n{latency}\n[worlds.auth]\ntokens_file = \"tokens.toml\"\n\n{limits}",
            s3.bucket,
            s3.endpoint,
            s3.region,
            limits = support::LIMITS
        );
        let path = dir.join(format!("p{k}.toml"));
        std::fs::write(&path, config).expect("a configuration");
        servers.push(spawn(dir, &path, &format!("p{k}")));
        // The first process creates the world; the others open it.
        if k == 0 {
            block_until_serving(&mut servers[0]);
        }
    }
    for server in servers.iter_mut().skip(1) {
        block_until_serving(server);
    }
    servers
}

fn spawn(dir: &Path, config: &Path, name: &str) -> Server {
    let log = dir.join(format!("{name}.log"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_quire"))
        .arg("serve")
        .arg("--config")
        .arg(config)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("quire serve starts");
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    Server {
        child,
        base: String::new(),
        _stdout: stdout,
    }
}

/// Reads the process's stdout until it names its HTTP address.
fn block_until_serving(server: &mut Server) {
    let mut line = String::new();
    loop {
        line.clear();
        let read = server
            ._stdout
            .read_line(&mut line)
            .expect("readable stdout");
        assert!(
            read > 0,
            "quire serve exited before it served (see its log)"
        );
        if let Some(base) = line.trim_end().strip_prefix("serving HTTP on ") {
            server.base = base.to_owned();
            return;
        }
    }
}

/// One process's series from /metrics, summed over labels, by metric name.
async fn metrics(http: &reqwest::Client, server: &Server) -> BTreeMap<String, f64> {
    let text = http
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .expect("/metrics answers")
        .text()
        .await
        .expect("/metrics is text");
    let mut sums = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        // `name{labels}` → `name`, except the hint outcomes kept apart.
        let name = match series.split_once('{') {
            Some(("quire_peer_hints_total", labels)) => {
                format!("quire_peer_hints_total{{{labels}")
            }
            Some((name, _)) => name.to_owned(),
            None => series.to_owned(),
        };
        *sums.entry(name).or_insert(0.0) += value;
    }
    sums
}

/// What one process's load came to.
#[derive(Default)]
struct Load {
    offered: u64,
    /// Acknowledged (200/201) within the measured window.
    acknowledged: u64,
    /// Acknowledged after it, while the outstanding writes drained.
    acknowledged_late: u64,
    /// Latencies of every acknowledged write, from its scheduled send, sorted.
    latencies: Vec<Duration>,
    refused: u64,
    failed: u64,
}

/// Offers `rate` writes per second to `server` for `seconds`, open loop.
async fn offer(
    server_base: String,
    token: String,
    process: usize,
    rate: f64,
    seconds: f64,
    in_flight: usize,
) -> Load {
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(in_flight)
        .build()
        .expect("an HTTP client");
    let interval = Duration::from_secs_f64(1.0 / rate);
    let total = (rate * seconds).round() as u64;
    let permits = Arc::new(Semaphore::new(in_flight));
    let start = Instant::now();
    let window_end = start + Duration::from_secs_f64(seconds);
    let mut sends = tokio::task::JoinSet::new();
    for i in 0..total {
        let scheduled = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(scheduled).await;
        let permit = permits.clone().acquire_owned().await.expect("open");
        let (http, token) = (http.clone(), token.clone());
        let url = format!("{server_base}/bench/p{process}/d{i}.md");
        sends.spawn(async move {
            let answer = http
                .put(url)
                .bearer_auth(token)
                .body(format!("# Document {i}\n\nfrom process {process}\n"))
                .send()
                .await;
            let done = Instant::now();
            drop(permit);
            let status = answer.map(|r| r.status().as_u16()).unwrap_or(0);
            (status, done - scheduled, done <= window_end)
        });
    }
    let mut load = Load {
        offered: total,
        ..Load::default()
    };
    while let Some(done) = sends.join_next().await {
        let (status, latency, in_window) = done.expect("a send task");
        match status {
            200 | 201 => {
                load.latencies.push(latency);
                if in_window {
                    load.acknowledged += 1;
                } else {
                    load.acknowledged_late += 1;
                }
            }
            429 | 503 => load.refused += 1,
            _ => load.failed += 1,
        }
    }
    load.latencies.sort();
    load
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The counters one process's metrics moved by during the load.
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, name: &str) -> u64 {
    let at = |m: &BTreeMap<String, f64>| m.get(name).copied().unwrap_or(0.0);
    (at(after) - at(before)).max(0.0).round() as u64
}

/// One run with `n` processes; returns the writes per second acknowledged in total.
async fn run(dir: &Path, s3: &support::S3, token: &str, n: usize, args: &Args) -> f64 {
    let servers = start_processes(dir, s3, n, args);
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("an HTTP client");
    // One write through each process first: every one has opened the world and met it.
    for (k, server) in servers.iter().enumerate() {
        let status = http
            .put(format!("{}/bench/warm-{k}.md", server.base))
            .bearer_auth(token)
            .body("# Warm\n")
            .send()
            .await
            .expect("a warm-up write")
            .status();
        assert!(status.is_success(), "warm-up write on p{k}: {status}");
    }
    let mut before = Vec::new();
    for server in &servers {
        before.push(metrics(&http, server).await);
    }
    let per_process = args.rate / n as f64;
    let loads: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(k, server)| {
            tokio::spawn(offer(
                server.base.clone(),
                token.to_owned(),
                k,
                per_process,
                args.seconds,
                args.in_flight,
            ))
        })
        .collect();
    let mut results = Vec::new();
    for load in loads {
        results.push(load.await.expect("a load task"));
    }
    let mut after = Vec::new();
    for server in &servers {
        after.push(metrics(&http, server).await);
    }
    drop(servers);

    let acknowledged: u64 = results.iter().map(|l| l.acknowledged).sum();
    let total_rate = acknowledged as f64 / args.seconds;
    let hints = |m: &BTreeMap<String, f64>, direction: &str, outcome: &str| {
        m.get(&format!(
            "quire_peer_hints_total{{direction=\"{direction}\",outcome=\"{outcome}\"}}"
        ))
        .copied()
        .unwrap_or(0.0)
    };
    let mut bucket_requests = 0;
    println!(
        "{n} process{}, {:.0} writes/s offered to each:",
        if n == 1 { "" } else { "es" },
        per_process
    );
    for (k, load) in results.iter().enumerate() {
        let (b, a) = (&before[k], &after[k]);
        let requests = delta(b, a, "quire_blob_requests_total");
        bucket_requests += requests;
        let share = if acknowledged == 0 {
            0.0
        } else {
            load.acknowledged as f64 / acknowledged as f64
        };
        let slots = delta(b, a, "quire_commit_batch_size_count");
        let per_slot = if slots == 0 {
            0.0
        } else {
            delta(b, a, "quire_commit_batch_size_sum") as f64 / slots as f64
        };
        println!(
            "  p{k}: {} acknowledged ({:.0}/s, share {:.0}%; {} more after the window) of {} offered, \
             p50 {}, p99 {}, p999 {}, {} refused, {} failed; slots won {}, races lost {}, \
             {per_slot:.1} writes per sealed slot, yields {}, hand-offs {}, listening pauses {}; \
             hints sent {}, followed {}; {} bucket requests",
            load.acknowledged,
            load.acknowledged as f64 / args.seconds,
            share * 100.0,
            load.acknowledged_late,
            load.offered,
            ms(quantile(&load.latencies, 0.5)),
            ms(quantile(&load.latencies, 0.99)),
            ms(quantile(&load.latencies, 0.999)),
            load.refused,
            load.failed,
            delta(b, a, "quire_commit_slots_won_total"),
            delta(b, a, "quire_commit_slot_races_lost_total"),
            delta(b, a, "quire_commit_yields_total"),
            delta(b, a, "quire_commit_handoffs_total"),
            delta(b, a, "quire_commit_listening_pauses_total"),
            (hints(a, "sent", "delivered") - hints(b, "sent", "delivered")).round(),
            (hints(a, "received", "followed") - hints(b, "received", "followed")).round(),
            requests,
        );
    }
    let mut all: Vec<Duration> = results.iter().flat_map(|l| l.latencies.clone()).collect();
    all.sort();
    println!(
        "  total: {acknowledged} acknowledged, {total_rate:.0} writes/s, p50 {}, p99 {}, p999 {}; {:.2} bucket requests per write",
        ms(quantile(&all, 0.5)),
        ms(quantile(&all, 0.99)),
        ms(quantile(&all, 0.999)),
        if acknowledged == 0 {
            0.0
        } else {
            bucket_requests as f64 / acknowledged as f64
        },
    );
    total_rate
}

#[tokio::main]
async fn main() {
    let args = args();
    let s3 = support::s3("replicas");
    let dir = tempfile::tempdir().expect("a scratch folder");
    // The shared replica certificate, as an operator makes it.
    let status = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args([
            "peers",
            "cert",
            "--cert",
            "replica-cert.pem",
            "--key",
            "replica-key.pem",
        ])
        .current_dir(dir.path())
        .status()
        .expect("quire peers cert runs");
    assert!(status.success(), "quire peers cert failed: {status}");
    let secret = TokenSecret::generate().expect("a token");
    let entry = TokenEntrySpec {
        hash: secret.hash().to_string(),
        operations: vec![Operation::Publish],
        paths: vec!["/**".into()],
        expires: None,
    };
    std::fs::write(dir.path().join("tokens.toml"), entry.to_toml("bench")).expect("tokens");
    println!(
        "replicas: {} writes/s offered in total for {} s, at most {} outstanding per process, hints {}, bucket latency {}",
        args.rate,
        args.seconds,
        args.in_flight,
        if args.hints { "on" } else { "off" },
        args.latency.as_deref().unwrap_or("none (local S3)"),
    );
    let mut one = None;
    for &n in &args.processes {
        let total = run(dir.path(), &s3, secret.as_str(), n, &args).await;
        if n == 1 {
            one.get_or_insert(total);
        }
        if let Some(one) = one.filter(|_| n > 1) {
            println!("  {n} processes / 1 process: {:.2}×", total / one);
        }
    }
}
