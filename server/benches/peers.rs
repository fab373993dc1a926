//! Quire's side of `cargo xtask bench peers`: the peer table's workload on Quire's commit
//! path, on the local S3 server.
//!
//! ```text
//! cargo bench -p quire-server --bench peers -- --mode in-process|http [--writers W]
//!     [--seconds S] [--warmup-seconds S] [--value-bytes B]
//! ```
//!
//! It reads the S3 server from the environment `cargo xtask servers` prints
//! (`QUIRE_TEST_S3_*`, `AWS_*`) and makes one world on a fresh prefix of that bucket:
//! - `in-process`: a bucket store on the S3 driver, opened as `quire serve` opens a bucket
//!   world (the same driver configuration, a change ring, the default compactor), written
//!   through the backend contract (`Store::publish`), no HTTP;
//! - `http`: a real `quire serve` process serving that world, written with `PUT` over HTTP
//!   keep-alive, its limits far above the load so it measures commits, not admission.
//!
//! `W` closed-loop writers each publish new documents (unique paths, `B`-byte markdown
//! bodies); a write is acknowledged when the store answers, which it does only once the
//! write's slot is in the bucket. First `warmup` seconds unmeasured, then `S` seconds
//! measured. A writer's latency is measured from the moment it was ready to send, taken
//! before the request is built, so no time the writer spent is hidden from the figure (in a
//! closed loop that moment is the write's intended start).
//!
//! It prints, on stdout, `peers-window open` when the measured phase starts, `peers-window
//! closed` when every measured write is answered, then one `peers-result` line of
//! `key=value` figures, the contract with xtask (which counts bucket requests between the two
//! window lines in its proxy and prints the table). In-process, it also prints the store's
//! own counters for the window: slots won, writes per slot, blob requests by operation.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::changes::DEFAULT_RING;
use quire_backend::{Ctx, Store, StoreStats, WriteRequest};
use quire_blob::Op;
use quire_blob::{Credentials, DriverConfig, HedgePolicy};
use quire_server::auth::{Operation, TokenEntrySpec, TokenSecret};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    InProcess,
    Http,
}

struct Args {
    mode: Mode,
    writers: usize,
    seconds: f64,
    warmup_seconds: f64,
    value_bytes: usize,
}

fn args() -> Args {
    let mut args = Args {
        mode: Mode::InProcess,
        writers: 64,
        seconds: 15.0,
        warmup_seconds: 2.0,
        value_bytes: 300,
    };
    let given: Vec<String> = std::env::args().skip(1).collect();
    let mut at = 0;
    while at < given.len() {
        let value = || {
            given
                .get(at + 1)
                .unwrap_or_else(|| panic!("{} needs a value", given[at]))
                .as_str()
        };
        match given[at].as_str() {
            "--mode" => {
                args.mode = match value() {
                    "in-process" => Mode::InProcess,
                    "http" => Mode::Http,
                    other => panic!("--mode in-process|http, not {other}"),
                }
            }
            "--writers" => args.writers = value().parse().expect("--writers W"),
            "--seconds" => args.seconds = value().parse().expect("--seconds S"),
            "--warmup-seconds" => {
                args.warmup_seconds = value().parse().expect("--warmup-seconds S")
            }
            "--value-bytes" => args.value_bytes = value().parse().expect("--value-bytes B"),
            // `cargo bench` passes `--bench`.
            "--bench" => {
                at += 1;
                continue;
            }
            other => panic!("unknown argument {other}"),
        }
        at += 2;
    }
    assert!(
        args.writers > 0 && args.seconds > 0.0 && args.warmup_seconds >= 0.0,
        "--writers and --seconds must be above zero"
    );
    args
}

fn fresh_prefix(mode: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    format!("bench-peers/quire-{mode}-{nanos}/")
}

/// A body of `bytes` bytes, different for every document.
fn body(bytes: usize, writer: usize, i: u64) -> String {
    let mut body = format!("# Document {i}\n\nwritten by writer {writer}.\n");
    while body.len() < bytes {
        body.push_str("lorem ipsum ");
    }
    body.truncate(bytes);
    body
}

/// Where the writes go.
#[derive(Clone)]
enum Target {
    Store(Arc<BucketStore>),
    Http {
        client: reqwest::Client,
        base: String,
        token: String,
    },
}

impl Target {
    /// Publishes one document; `Ok` once it is acknowledged (durable in the bucket).
    async fn write(&self, path: String, body: String) -> Result<(), String> {
        match self {
            Target::Store(store) => store
                .publish(&Ctx::new(), WriteRequest::new(path, body))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Target::Http {
                client,
                base,
                token,
            } => {
                let answer = client
                    .put(format!("{base}{path}"))
                    .bearer_auth(token)
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                match answer.status().as_u16() {
                    200 | 201 => Ok(()),
                    status => Err(format!(
                        "{status}: {}",
                        answer.text().await.unwrap_or_default()
                    )),
                }
            }
        }
    }
}

/// What one writer did in one phase.
#[derive(Default)]
struct Written {
    latencies: Vec<Duration>,
    failed: u64,
}

/// `writers` closed-loop writers until `until`, on paths under `label`.
async fn phase(target: &Target, args: &Args, label: &str, until: Instant) -> Vec<Written> {
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..args.writers {
        let target = target.clone();
        let label = label.to_owned();
        let value_bytes = args.value_bytes;
        tasks.spawn(async move {
            let mut written = Written::default();
            let mut i = 0u64;
            loop {
                // Ready to send: the write's intended start.
                let ready = Instant::now();
                if ready >= until {
                    break;
                }
                let path = format!("/{label}/w{w}/d{i}.md");
                let body = body(value_bytes, w, i);
                i += 1;
                match target.write(path, body).await {
                    Ok(()) => written.latencies.push(ready.elapsed()),
                    Err(e) => {
                        written.failed += 1;
                        if written.failed == 1 {
                            eprintln!("quire: writer {w}: {e}");
                        }
                    }
                }
            }
            written
        });
    }
    tasks.join_all().await
}

/// A running `quire serve`, killed when dropped.
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `quire serve` on one bucket world of `s3` under `prefix`, with the one token `token`.
fn serve(dir: &Path, s3: &support::S3, prefix: &str, token: &TokenSecret) -> Served {
    let entry = TokenEntrySpec {
        hash: token.hash().to_string(),
        operations: vec![Operation::Publish],
        paths: vec!["/**".into()],
        expires: None,
    };
    std::fs::write(dir.join("tokens.toml"), entry.to_toml("bench")).expect("a tokens file");
    let config = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\nquic = \"127.0.0.1:0\"\n\n[[worlds]]\nname = \"peers\"\n\n\
         [worlds.backend]\nkind = \"bucket\"\ndriver = \"s3\"\nbucket = \"{}\"\nprefix = \"{prefix}\"\n\
         endpoint = \"{}\"\nregion = \"{}\"\n\n[worlds.auth]\ntokens_file = \"tokens.toml\"\n\n{limits}",
        s3.bucket,
        s3.endpoint,
        s3.region,
        limits = support::LIMITS
    );
    let path = dir.join("quire.toml");
    std::fs::write(&path, config).expect("a configuration");
    let mut child = Command::new(env!("CARGO_BIN_EXE_quire"))
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("quire.log")).expect("a log file"))
        .spawn()
        .expect("quire serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("quire serve says where it listens (see its log)")
            .expect("readable stdout");
        if let Some(base) = line.trim_end().strip_prefix("serving HTTP on ") {
            break base.to_owned();
        }
    };
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Served { child, base }
}

/// The store's own counters over the window: slots, writes per slot, blob requests.
fn store_counters(before: &StoreStats, after: &StoreStats) {
    let (Some(b), Some(a)) = (&before.commits, &after.commits) else {
        return;
    };
    let slots = a.slots_won - b.slots_won;
    let sizes = |c: &quire_backend::CommitCounters| -> (u64, u64) {
        c.batches_by_size
            .iter()
            .fold((0, 0), |(n, w), (size, count)| {
                (n + count, w + *size as u64 * count)
            })
    };
    let ((bn, bw), (an, aw)) = (sizes(b), sizes(a));
    let sealed = an - bn;
    let per_slot = if sealed == 0 {
        0.0
    } else {
        (aw - bw) as f64 / sealed as f64
    };
    let mut requests = String::new();
    if let (Some(b), Some(a)) = (&before.blobs, &after.blobs) {
        for op in Op::ALL {
            let n = a.requests(op) - b.requests(op);
            if n > 0 {
                requests.push_str(&format!(" {op:?} {n},"));
            }
        }
        requests.push_str(&format!(
            " {} KiB up, {} KiB down",
            (a.bytes_up - b.bytes_up) / 1024,
            (a.bytes_down - b.bytes_down) / 1024
        ));
    }
    println!(
        "quire in-process: {slots} slots won, {per_slot:.1} writes per sealed slot; blob requests:{requests}"
    );
}

fn quantile_us(sorted: &[Duration], q: f64) -> u128 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize].as_micros()
}

#[tokio::main]
async fn main() {
    let args = args();
    let s3 = support::s3("peers");
    let dir = tempfile::tempdir().expect("a scratch folder");
    let mut served = None;
    let mut store = None;
    let target = match args.mode {
        Mode::InProcess => {
            // As `quire serve` opens a bucket world on the S3 driver (hedged, as by default).
            let driver = DriverConfig::S3 {
                bucket: s3.bucket.clone(),
                prefix: None,
                endpoint: Some(s3.endpoint.clone()),
                region: Some(s3.region.clone()),
                credentials: Credentials::Standard,
            };
            let blobs = driver.open().await.expect("an S3 driver");
            let options = BucketOptions {
                prefix: fresh_prefix("in-process"),
                change_ring: DEFAULT_RING,
                hedge: Some(HedgePolicy::default()),
                ..BucketOptions::default()
            };
            let opened = Arc::new(
                BucketStore::open(blobs, options)
                    .await
                    .expect("a bucket store"),
            );
            store = Some(opened.clone());
            Target::Store(opened)
        }
        Mode::Http => {
            let token = TokenSecret::generate().expect("a token");
            let server = serve(dir.path(), &s3, &fresh_prefix("http"), &token);
            let target = Target::Http {
                client: reqwest::Client::builder()
                    .no_proxy()
                    .pool_max_idle_per_host(args.writers)
                    .build()
                    .expect("an HTTP client"),
                base: server.base.clone(),
                token: token.as_str().to_owned(),
            };
            served = Some(server);
            target
        }
    };

    let warm_until = Instant::now() + Duration::from_secs_f64(args.warmup_seconds);
    phase(&target, &args, "warm", warm_until).await;

    let before = store.as_ref().map(|s| s.stats());
    println!("peers-window open");
    let started = Instant::now();
    let written = phase(
        &target,
        &args,
        "measured",
        started + Duration::from_secs_f64(args.seconds),
    )
    .await;
    let elapsed = started.elapsed();
    println!("peers-window closed");
    let after = store.as_ref().map(|s| s.stats());

    let failed: u64 = written.iter().map(|w| w.failed).sum();
    let mut latencies: Vec<Duration> = written.into_iter().flat_map(|w| w.latencies).collect();
    latencies.sort_unstable();
    println!(
        "peers-result writes={} seconds={:.3} p50_us={} p99_us={} p999_us={} max_us={} failed={failed}",
        latencies.len(),
        elapsed.as_secs_f64(),
        quantile_us(&latencies, 0.5),
        quantile_us(&latencies, 0.99),
        quantile_us(&latencies, 0.999),
        latencies.last().map_or(0, Duration::as_micros),
    );
    if let (Some(before), Some(after)) = (&before, &after) {
        store_counters(before, after);
    }
    if let Some(store) = store {
        store.close().await;
    }
    drop(served);
}
