//! Cold start at a million documents on the file driver, and what checkpoints cost.
//!
//! ```text
//! cargo bench -p quire-checkpoint --bench coldstart -- [--docs N] [--dir PATH]
//!     [--intervals K] [--writes W] [--runs R] [--phase all|build|coldstart|replay|writes]
//! ```
//!
//! Phases (`all` runs each in its own process, so memory figures are per phase):
//! - `build`: a generator writes the world's slots — exactly the slots the committer would
//!   write for these publishes (each built like `quire_log::build` builds a publish, inline
//!   version bytes, 256 entries per slot) — and a replica follows it, writing a checkpoint
//!   every 64 slots, as a running store would.
//! - `coldstart`: a fresh process opens the world: newest checkpoint, root, shards, replay.
//!   Reports the time, the resident set after it and its peak.
//! - `replay`: cold start, then `R` times (default 3): 1024 slots of 16 uniform random
//!   rewrites are committed and replayed by the replica (timed; wall time and CPU time, which
//!   holds on a busy machine), then the median. Replay barely depends on the world's size,
//!   so a smaller world built once (`--docs 100000 --phase build --dir D`, then
//!   `--phase replay --dir D`) measures it in seconds; each run adds its slots to the world.
//! - `writes`: cold start, then `K` intervals of `W` uniform random rewrites (default 15,000:
//!   250 writes/s for 60 s), a checkpoint after each; reports checkpoint bytes per write. The
//!   interval whose checkpoint crosses the base grid rewrites the whole index (a full
//!   checkpoint) and is reported as such.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]

mod generator;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use generator::{Generator, PREFIX, WORLD};
use quire_blob::BlobStore;
use quire_blob::file::DirBlobStore;
use quire_checkpoint::format::DEFAULT_WIDTHS;
use quire_checkpoint::genesis::create_world;
use quire_checkpoint::{OpenOptions, Replica, WriteStats};
use quire_log::slot::Entry;
use rand::SeedableRng;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// Counts heap bytes, so the loaded state's heap is reported apart from what the allocator
/// keeps resident after freeing.
#[global_allocator]
static HEAP: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Heap bytes allocated and not freed since `region` began, in MiB. A reallocation's growth
/// or shrink is already in the allocated and deallocated counts.
fn heap_mib(region: &Region<'_, std::alloc::System>) -> f64 {
    let change = region.change();
    (change.bytes_allocated as f64 - change.bytes_deallocated as f64) / (1024.0 * 1024.0)
}

const FRESHEN: Duration = Duration::from_secs(1800);
const WORKERS: usize = 64;

#[derive(Clone, Debug)]
struct Args {
    docs: u64,
    dir: PathBuf,
    intervals: usize,
    writes: u64,
    runs: usize,
    phase: String,
}

fn parse_args() -> Args {
    let mut args = Args {
        docs: 1_000_000,
        dir: std::env::temp_dir().join("quire-coldstart"),
        intervals: 6,
        writes: 15_000,
        runs: 3,
        phase: "all".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--docs" => args.docs = value().parse().expect("--docs N"),
            "--dir" => args.dir = PathBuf::from(value()),
            "--intervals" => args.intervals = value().parse().expect("--intervals K"),
            "--writes" => args.writes = value().parse().expect("--writes W"),
            "--runs" => args.runs = value().parse().expect("--runs R"),
            "--phase" => args.phase = value(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

/// Resident set and its peak, in MiB, from the kernel's view of this process.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds used so far, by this thread (`thread`) or the whole process: a measure that
/// holds on a machine busy with other work, where wall time does not.
fn cpu_seconds(thread: bool) -> f64 {
    let path = if thread {
        "/proc/thread-self/stat"
    } else {
        "/proc/self/stat"
    };
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and stime are the 12th
    // and 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

async fn open(store: &Arc<dyn BlobStore>) -> Replica {
    let options = OpenOptions {
        workers: WORKERS,
        ..OpenOptions::default()
    };
    Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap()
}

fn store(args: &Args) -> Arc<dyn BlobStore> {
    std::fs::create_dir_all(&args.dir).unwrap();
    Arc::new(DirBlobStore::open(&args.dir).unwrap())
}

fn report(label: &str, stats: &WriteStats, elapsed: Duration) {
    println!(
        "{label}: {:.2} s, {} blocks, {} shards, {} created, {} reused, {:.1} MB written",
        elapsed.as_secs_f64(),
        stats.blocks,
        stats.shards,
        stats.created,
        stats.reused,
        stats.bytes_written as f64 / 1e6
    );
}

async fn build(args: &Args) {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir).unwrap();
    }
    let store = store(args);
    create_world(&*store, PREFIX, WORLD, DEFAULT_WIDTHS)
        .await
        .unwrap();
    let mut generator = Generator::after_genesis(store.clone());
    let mut replica = open(&store).await;
    let started = Instant::now();
    let mut checkpoint_time = Duration::ZERO;
    let mut written = 0u64;
    let mut i = 0;
    let mut slots: u64 = 0;
    while i < args.docs {
        let n = (args.docs - i).min(256);
        let entries: Vec<Entry> = (i..i + n).map(|k| generator.entry(k, 1, None).0).collect();
        generator.commit(entries).await;
        i += n;
        slots += 1;
        if slots.is_multiple_of(64) || i == args.docs {
            replica.catch_up().await.unwrap();
            let t = Instant::now();
            let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
            checkpoint_time += t.elapsed();
            written += stats.bytes_written;
            if slots.is_multiple_of(1024) || i == args.docs {
                let (rss, _) = memory();
                println!(
                    "built {i} documents in {:.0} s (checkpoints {:.0} s, {:.0} MB), resident {rss:.0} MiB",
                    started.elapsed().as_secs_f64(),
                    checkpoint_time.as_secs_f64(),
                    written as f64 / 1e6
                );
            }
        }
    }
    println!(
        "build: {} documents at sequence {}",
        replica.state().doc_count(),
        replica.state().sequence()
    );
}

async fn coldstart(args: &Args) {
    let store = store(args);
    let (before, _) = memory();
    let region = Region::new(HEAP);
    let t = Instant::now();
    let replica = open(&store).await;
    let elapsed = t.elapsed();
    let heap = heap_mib(&region);
    let (after, peak) = memory();
    let base = replica.base();
    println!(
        "cold start: {:.2} s for {} documents (checkpoint {}, replayed {} slots), heap {heap:.0} MiB, resident {:.0} MiB (+{:.0}), peak {:.0} MiB",
        elapsed.as_secs_f64(),
        replica.state().doc_count(),
        base.sequence(),
        replica.slots_since_base(),
        after,
        after - before,
        peak
    );
    for (j, tier) in base.root.tiers.iter().enumerate() {
        println!(
            "  tier {j}: grid {} cut {} documents {} shards {}",
            tier.grid,
            tier.cut,
            tier.documents,
            tier.shards.iter().flatten().count()
        );
    }
}

async fn replay(args: &Args) {
    let store = store(args);
    let mut replica = open(&store).await;
    let mut generator = Generator::after(store.clone(), &replica, 7);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let docs = replica.state().doc_count();
    let mut walls = Vec::new();
    for run in 0..args.runs.max(1) {
        generator
            .rewrites(&replica, docs, 1024 * 16, 16, &mut rng, |_| {})
            .await;
        let region = Region::new(HEAP);
        let (cpu, applying) = (cpu_seconds(false), cpu_seconds(true));
        let t = Instant::now();
        let applied = replica.catch_up().await.unwrap();
        let wall = t.elapsed().as_secs_f64();
        println!(
            "replay {run}: {applied} slots (16 writes each) in {wall:.3} s (cpu {:.2} s, {:.2} s on the applying thread), heap +{:.0} MiB",
            cpu_seconds(false) - cpu,
            cpu_seconds(true) - applying,
            heap_mib(&region)
        );
        walls.push(wall);
    }
    walls.sort_by(f64::total_cmp);
    println!(
        "replay: median {:.3} s of {} runs",
        walls[walls.len() / 2],
        walls.len()
    );
    let t = Instant::now();
    let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    report("checkpoint after replay", &stats, t.elapsed());
}

async fn writes(args: &Args) {
    let store = store(args);
    let mut replica = open(&store).await;
    let mut generator = Generator::after(store.clone(), &replica, 11);
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let docs = replica.state().doc_count();
    let mut steady = Vec::new();
    for k in 0..args.intervals {
        let base_grid = replica.base().root.tiers[0].grid;
        // The highest tier below the top: the newest run, or the base.
        let below_top =
            |root: &quire_checkpoint::format::Root| root.tiers[root.tiers.len() - 2].grid;
        let run_grid = below_top(&replica.base().root);
        generator
            .rewrites(&replica, docs, args.writes, 16, &mut rng, |_| {})
            .await;
        replica.catch_up().await.unwrap();
        let t = Instant::now();
        let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
        let elapsed = t.elapsed();
        let per_write = stats.bytes_written as f64 / args.writes as f64;
        let full = replica.base().root.tiers[0].grid != base_grid;
        let kind = if full {
            "full (base rebuilt)"
        } else if below_top(&replica.base().root) != run_grid {
            "runs added"
        } else {
            "incremental"
        };
        report(&format!("interval {k} [{kind}]"), &stats, elapsed);
        println!("  {per_write:.0} bytes per write");
        if !full {
            steady.push(per_write);
        }
    }
    if !steady.is_empty() {
        println!(
            "mean over intervals without a base rebuild: {:.0} bytes per write",
            steady.iter().sum::<f64>() / steady.len() as f64
        );
    }
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if args.phase == "all" {
        let exe = std::env::current_exe().unwrap();
        for phase in ["build", "coldstart", "replay", "coldstart", "writes"] {
            let status = std::process::Command::new(&exe)
                .args(["--phase", phase, "--docs", &args.docs.to_string()])
                .args(["--dir", &args.dir.display().to_string()])
                .args(["--intervals", &args.intervals.to_string()])
                .args(["--writes", &args.writes.to_string()])
                .args(["--runs", &args.runs.to_string()])
                .status()
                .unwrap();
            assert!(status.success(), "phase {phase} failed");
        }
        return;
    }
    runtime.block_on(async {
        match args.phase.as_str() {
            "build" => build(&args).await,
            "coldstart" => coldstart(&args).await,
            "replay" => replay(&args).await,
            "writes" => writes(&args).await,
            other => panic!("unknown phase {other}"),
        }
    });
}
