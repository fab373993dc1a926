//! What a write costs in bucket requests and bytes, on simulated GCS.
//!
//! ```text
//! cargo bench -p quire-checkpoint --bench cost -- [--docs N] [--rate W] [--interval S]
//!     [--intervals K] [--per-slot P]
//! ```
//!
//! A world of `N` documents (default 1,000,000) is built in memory and checkpointed, then
//! `K` intervals of `S` seconds (default 60) of uniform random rewrites at `W` writes a
//! second (default 250), committed `P` writes to a slot (default 10: the 0.10 slots per
//! write the committer reaches at that rate), each interval followed by a checkpoint. `K`
//! defaults to one base period: enough intervals to pass the base tier's grid width, so the
//! run holds one base rebuild and the checkpoints that add runs or rewrite only the top
//! between two base rebuilds, in the proportions a store that keeps writing sees them (a shorter run
//! that happens to cross the base grid overstates the bytes a write costs, one that does
//! not understates them). Every request goes through the real-GCS latency model (ADR 0036)
//! on a paused clock, so simulated seconds are the bucket's and wall seconds are this
//! machine's CPU.
//! Requests and bytes are counted per role:
//! - commit: the writer creating its slots;
//! - checkpoint: the writing store's checkpoint job (what it creates and what it reads, and
//!   the history blocks its replica reads ahead as epochs end);
//! - own reads: the writing store's compactor catching up on the slots it wrote, taken from
//!   the ring its committer publishes into, as the server's compactor does;
//! - own, no ring: the same catch-up read from the bucket (a store whose ring lost them, or
//!   before the ring): a replica that only catches up;
//! - follower: a second replica catching up on the slots and adopting each checkpoint.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]

mod generator;

use std::sync::Arc;
use std::time::{Duration, Instant};

use generator::{Generator, PREFIX, WORLD};
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, MeterReading, Metered, Op, Simulated};
use quire_checkpoint::format::DEFAULT_WIDTHS;
use quire_checkpoint::genesis::create_world;
use quire_checkpoint::{OpenOptions, Replica, WriteStats};
use quire_log::recent::RecentSlots;
use rand::SeedableRng;

const FRESHEN: Duration = Duration::from_secs(1800);
const WORKERS: usize = 64;
/// Slots the writer creates between two applications of its ring by the compactor.
const APPLY_EVERY: u64 = 10;

struct Args {
    docs: u64,
    rate: u64,
    interval: u64,
    intervals: Option<usize>,
    per_slot: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        docs: 1_000_000,
        rate: 250,
        interval: 60,
        intervals: None,
        per_slot: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--docs" => args.docs = value().parse().expect("--docs N"),
            "--rate" => args.rate = value().parse().expect("--rate W"),
            "--interval" => args.interval = value().parse().expect("--interval S"),
            "--intervals" => args.intervals = Some(value().parse().expect("--intervals K")),
            "--per-slot" => args.per_slot = value().parse().expect("--per-slot P"),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

async fn open(store: Arc<dyn BlobStore>) -> Replica {
    let options = OpenOptions {
        workers: WORKERS,
        ..OpenOptions::default()
    };
    Replica::open(store, PREFIX, &options).await.unwrap()
}

/// What one role cost over the measured intervals.
#[derive(Default)]
struct Role {
    reading: MeterReading,
}

impl Role {
    fn add(&mut self, r: &MeterReading) {
        for (total, n) in self.reading.requests.iter_mut().zip(r.requests) {
            *total += n;
        }
        self.reading.bytes_up += r.bytes_up;
        self.reading.bytes_down += r.bytes_down;
    }

    fn objects(&self) -> u64 {
        self.reading.requests(Op::Create) + self.reading.requests(Op::Replace)
    }

    fn row(&self, name: &str, writes: f64) {
        let r = &self.reading;
        println!(
            "{name:<12} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>9.4} {:>10.0} {:>10.0}",
            r.requests(Op::Create) as f64 / writes,
            (r.requests(Op::Get)) as f64 / writes,
            r.requests(Op::GetRange) as f64 / writes,
            r.requests(Op::Head) as f64 / writes,
            r.requests(Op::List) as f64 / writes,
            (r.requests(Op::Replace) + r.requests(Op::Delete)) as f64 / writes,
            r.total_requests() as f64 / writes,
            r.bytes_up as f64 / writes,
            r.bytes_down as f64 / writes,
        );
    }
}

fn report(label: &str, stats: &WriteStats, simulated: Duration, wall: Duration, writes: u64) {
    println!(
        "{label}: {:.2} s simulated, {:.2} s wall; {} history objects ({} packs), {} shards, {} created, {} reused, {:.1} MB up ({:.0} bytes/write)",
        simulated.as_secs_f64(),
        wall.as_secs_f64(),
        stats.blocks,
        stats.packs,
        stats.shards,
        stats.created,
        stats.reused,
        stats.bytes_written as f64 / 1e6,
        stats.bytes_written as f64 / writes as f64
    );
}

async fn run(args: Args) {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    create_world(&*memory, PREFIX, WORLD, DEFAULT_WIDTHS)
        .await
        .unwrap();
    let wall = Instant::now();
    Generator::after_genesis(memory.clone())
        .documents(args.docs)
        .await;
    let mut builder = open(memory.clone()).await;
    builder.checkpoint(FRESHEN).await.unwrap().unwrap();
    println!(
        "world: {} documents at sequence {}, checkpointed ({:.0} s wall to build)",
        builder.state().doc_count(),
        builder.state().sequence(),
        wall.elapsed().as_secs_f64()
    );
    drop(builder);

    let bucket: Arc<dyn BlobStore> = Arc::new(Simulated::real_gcs(memory.clone(), 1));
    let commit = Metered::new(bucket.clone());
    let own = Metered::new(bucket.clone());
    let follower = Metered::new(bucket.clone());
    let unringed = Metered::new(bucket.clone());
    let t = tokio::time::Instant::now();
    let w = Instant::now();
    let mut writer_replica = open(Arc::new(own.clone())).await;
    let cold = own.reading();
    println!(
        "cold start on simulated GCS: {:.2} s simulated, {:.2} s wall, {} requests, {:.0} MB down",
        t.elapsed().as_secs_f64(),
        w.elapsed().as_secs_f64(),
        cold.total_requests(),
        cold.bytes_down as f64 / 1e6
    );
    let mut follower_replica = open(Arc::new(follower.clone())).await;
    let mut unringed_replica = open(Arc::new(unringed.clone())).await;
    let recent = Arc::new(RecentSlots::default());
    writer_replica.set_recent(recent.clone());
    let mut generator = Generator::after(Arc::new(commit.clone()), &writer_replica, 13);
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let writes = args.rate * args.interval;
    let (mut commit_role, mut checkpoint_role, mut own_role, mut follower_role) = (
        Role::default(),
        Role::default(),
        Role::default(),
        Role::default(),
    );
    let mut unringed_role = Role::default();
    let mut written = 0u64;
    let mut slowest = (Duration::ZERO, Duration::ZERO);
    let intervals = args
        .intervals
        .unwrap_or_else(|| DEFAULT_WIDTHS[0].div_ceil(writes) as usize);
    let mut kinds: [Kind; 3] = [
        Kind::new("top only"),
        Kind::new("runs added"),
        Kind::new("base rebuilt"),
    ];
    for k in 0..intervals {
        let base_grid = writer_replica.base().root.tiers[0].grid;
        // The highest tier below the top: the newest run, or the base.
        let below_top =
            |root: &quire_checkpoint::format::Root| root.tiers[root.tiers.len() - 2].grid;
        let run_grid = below_top(&writer_replica.base().root);
        // The slots go one after the other, each as soon as the bucket took the one
        // before (a create's 40 ms, about the committer's pace at 250 writes a second);
        // the interval lasts at least its length.
        let before = commit.reading();
        let reading_ahead = own.reading();
        let end = tokio::time::Instant::now() + Duration::from_secs(args.interval);
        // The writing store's compactor takes its slots from the ring as they come (a few
        // slots at a time here), and reads history ahead as each epoch ends.
        let mut left = writes;
        while left > 0 {
            let chunk = left.min(APPLY_EVERY * args.per_slot as u64);
            generator
                .rewrites(
                    &writer_replica,
                    args.docs,
                    chunk,
                    args.per_slot,
                    &mut rng,
                    |slot| recent.publish(&slot),
                )
                .await;
            writer_replica.apply_recent().await.unwrap();
            left -= chunk;
        }
        tokio::time::sleep_until(end).await;
        commit_role.add(&commit.reading().since(&before));
        // What the compactor read ahead for the checkpoint is the checkpoint's.
        checkpoint_role.add(&own.reading().since(&reading_ahead));

        let before = own.reading();
        writer_replica.catch_up().await.unwrap();
        own_role.add(&own.reading().since(&before));
        let before = unringed.reading();
        unringed_replica.catch_up().await.unwrap();
        unringed_role.add(&unringed.reading().since(&before));
        assert_eq!(
            unringed_replica.state().sequence(),
            writer_replica.state().sequence()
        );

        let before = own.reading();
        let (t, w) = (tokio::time::Instant::now(), Instant::now());
        // As the store's compactor does: the state at the newest history-epoch cut.
        let job = writer_replica
            .prepare_sealed(FRESHEN, 0)
            .run()
            .await
            .unwrap()
            .unwrap();
        let stats = job.stats;
        writer_replica.install(job).unwrap();
        let (simulated, wall) = (t.elapsed(), w.elapsed());
        checkpoint_role.add(&own.reading().since(&before));
        slowest = (slowest.0.max(simulated), slowest.1.max(wall));
        let kind = if writer_replica.base().root.tiers[0].grid != base_grid {
            &mut kinds[2]
        } else if below_top(&writer_replica.base().root) != run_grid {
            &mut kinds[1]
        } else {
            &mut kinds[0]
        };
        kind.add(&stats, simulated);
        report(
            &format!("checkpoint {k} [{}]", kind.name),
            &stats,
            simulated,
            wall,
            writes,
        );

        let before = follower.reading();
        follower_replica.catch_up().await.unwrap();
        assert!(
            follower_replica
                .adopt(writer_replica.base().sequence())
                .await
                .unwrap()
        );
        follower_role.add(&follower.reading().since(&before));
        written += writes;
    }
    let n = written as f64;
    println!();
    println!(
        "per write ({written} writes, {} intervals of {} s at {} writes/s, {} writes a slot):",
        intervals, args.interval, args.rate, args.per_slot
    );
    println!(
        "{:<12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10}",
        "role",
        "create",
        "get",
        "range",
        "head",
        "list",
        "repl+del",
        "requests",
        "bytes up",
        "bytes down"
    );
    commit_role.row("commit", n);
    checkpoint_role.row("checkpoint", n);
    own_role.row("own reads", n);
    unringed_role.row("own, no ring", n);
    follower_role.row("follower", n);
    println!();
    println!(
        "objects created per write: commit {:.3} + checkpoint {:.3} = {:.3}",
        commit_role.objects() as f64 / n,
        checkpoint_role.objects() as f64 / n,
        (commit_role.objects() + checkpoint_role.objects()) as f64 / n
    );
    println!(
        "checkpoint bytes per write: {:.0}; slowest checkpoint {:.2} s simulated, {:.2} s wall",
        kinds.iter().map(|k| k.bytes).sum::<u64>() as f64 / n,
        slowest.0.as_secs_f64(),
        slowest.1.as_secs_f64()
    );
    println!();
    println!(
        "{:<16} {:>11} {:>15} {:>15} {:>10} {:>10}",
        "checkpoints", "how many", "objects each", "MB each", "p50 s", "max s"
    );
    for kind in &kinds {
        kind.row();
    }
    let per_write = |kind: &Kind| kind.bytes as f64 / n;
    println!(
        "checkpoint bytes per write by kind: top only {:.0} + runs added {:.0} + base rebuilt {:.0}",
        per_write(&kinds[0]),
        per_write(&kinds[1]),
        per_write(&kinds[2])
    );
}

/// The checkpoints of one kind: what they created and how long they took.
struct Kind {
    name: &'static str,
    objects: u64,
    bytes: u64,
    simulated: Vec<Duration>,
}

impl Kind {
    fn new(name: &'static str) -> Kind {
        Kind {
            name,
            objects: 0,
            bytes: 0,
            simulated: Vec::new(),
        }
    }

    fn add(&mut self, stats: &WriteStats, simulated: Duration) {
        self.objects += stats.created;
        self.bytes += stats.bytes_written;
        self.simulated.push(simulated);
    }

    fn row(&self) {
        let k = self.simulated.len();
        if k == 0 {
            println!("{:<16} {:>11}", self.name, 0);
            return;
        }
        let mut sorted = self.simulated.clone();
        sorted.sort();
        println!(
            "{:<16} {:>11} {:>15.0} {:>15.1} {:>10.2} {:>10.2}",
            self.name,
            k,
            self.objects as f64 / k as f64,
            self.bytes as f64 / k as f64 / 1e6,
            sorted[k / 2].as_secs_f64(),
            sorted[k - 1].as_secs_f64()
        );
    }
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(run(args));
}
