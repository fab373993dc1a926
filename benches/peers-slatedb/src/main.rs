//! SlateDB's side of `cargo xtask bench peers`: the peer table's workload on a pinned SlateDB,
//! on the local S3 server.
//!
//! ```text
//! cargo run --release --locked -- --flush-ms F [--writers W] [--seconds S]
//!     [--warmup-seconds S] [--value-bytes B]
//! ```
//!
//! It reads the S3 server from the environment `cargo xtask servers` prints
//! (`QUIRE_TEST_S3_ENDPOINT`, `QUIRE_TEST_S3_BUCKET`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`) and opens a database on a fresh path of that bucket
//! with a `F` ms WAL flush interval (everything else SlateDB's defaults). `W` closed-loop
//! writers each put unique keys with `B`-byte values and wait until each write is durable in
//! the bucket (`WriteHandle::await_durable`) before the next: the first `warmup` seconds
//! unmeasured, then `S` seconds measured. A writer's latency is measured from the moment it
//! was ready to send, taken before the key and value are built, so no time the writer spent
//! is hidden from the figure (in a closed loop that moment is the write's intended start).
//!
//! It prints, on stdout, `peers-window open` when the measured phase starts, `peers-window
//! closed` when every measured write is acknowledged, then one `peers-result` line of
//! `key=value` figures, the contract with xtask (which counts bucket requests between the two
//! window lines in its proxy and prints the table).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::Parser;
use slatedb::config::{PutOptions, WriteOptions};
use slatedb::object_store::ObjectStore;
use slatedb::object_store::aws::AmazonS3Builder;
use slatedb::{Db, Settings};

#[derive(Parser, Debug)]
struct Args {
    /// The WAL flush interval, in milliseconds.
    #[arg(long)]
    flush_ms: u64,
    /// Closed-loop writers.
    #[arg(long, default_value_t = 64)]
    writers: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 15.0)]
    seconds: f64,
    /// Unmeasured seconds before them.
    #[arg(long, default_value_t = 2.0)]
    warmup_seconds: f64,
    /// Bytes of each value.
    #[arg(long, default_value_t = 300)]
    value_bytes: usize,
}

fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is unset: run `cargo xtask bench peers`, or export what `cargo xtask servers` prints")
    })
}

fn bucket() -> Result<Arc<dyn ObjectStore>> {
    let store = AmazonS3Builder::new()
        .with_endpoint(env("QUIRE_TEST_S3_ENDPOINT")?)
        .with_allow_http(true)
        .with_bucket_name(env("QUIRE_TEST_S3_BUCKET")?)
        .with_access_key_id(env("AWS_ACCESS_KEY_ID")?)
        .with_secret_access_key(env("AWS_SECRET_ACCESS_KEY")?)
        .with_region(std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()))
        .build()
        .context("an S3 client")?;
    Ok(Arc::new(store))
}

/// What one writer did in one phase.
#[derive(Default)]
struct Written {
    latencies_us: Vec<u64>,
    failed: u64,
}

/// `writers` closed-loop writers until `until`, on keys under `label`.
async fn phase(db: &Arc<Db>, args: &Args, label: &str, until: Instant) -> Vec<Written> {
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..args.writers {
        let db = db.clone();
        let label = label.to_owned();
        let value_bytes = args.value_bytes;
        tasks.spawn(async move {
            let mut written = Written::default();
            let mut i = 0u64;
            let put = PutOptions::default();
            let write = WriteOptions::default();
            loop {
                // Ready to send: the write's intended start.
                let ready = Instant::now();
                if ready >= until {
                    break;
                }
                let key = format!("{label}/w{w}/d{i}");
                let value = value(value_bytes, w, i);
                i += 1;
                let durable = match db.put_with_options(&key, &value, &put, &write).await {
                    Ok(handle) => handle.await_durable().await,
                    Err(e) => Err(e),
                };
                match durable {
                    Ok(()) => written
                        .latencies_us
                        .push(ready.elapsed().as_micros() as u64),
                    Err(e) => {
                        written.failed += 1;
                        if written.failed == 1 {
                            eprintln!("slatedb: writer {w}: {e}");
                        }
                    }
                }
            }
            written
        });
    }
    tasks.join_all().await
}

/// A value of `bytes` bytes, different for every key.
fn value(bytes: usize, writer: usize, i: u64) -> Vec<u8> {
    let mut value = format!("writer {writer} write {i} ").into_bytes();
    value.resize(bytes, b'.');
    value
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let path = format!("bench-peers/slatedb-{}ms-{nanos}", args.flush_ms);
    let settings = Settings {
        flush_interval: Some(Duration::from_millis(args.flush_ms)),
        ..Settings::default()
    };
    let db = Arc::new(
        Db::builder(path.as_str(), bucket()?)
            .with_settings(settings)
            .build()
            .await
            .context("opening SlateDB")?,
    );

    let warm_until = Instant::now() + Duration::from_secs_f64(args.warmup_seconds);
    phase(&db, &args, "warm", warm_until).await;

    println!("peers-window open");
    let started = Instant::now();
    let written = phase(
        &db,
        &args,
        "measured",
        started + Duration::from_secs_f64(args.seconds),
    )
    .await;
    let elapsed = started.elapsed();
    println!("peers-window closed");

    let failed: u64 = written.iter().map(|w| w.failed).sum();
    let mut latencies: Vec<u64> = written.into_iter().flat_map(|w| w.latencies_us).collect();
    latencies.sort_unstable();
    println!(
        "peers-result writes={} seconds={:.3} p50_us={} p99_us={} p999_us={} max_us={} failed={failed}",
        latencies.len(),
        elapsed.as_secs_f64(),
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.99),
        quantile(&latencies, 0.999),
        latencies.last().copied().unwrap_or(0),
    );
    db.close().await.context("closing SlateDB")?;
    Ok(())
}
