//! The reliability gate (ADR 0036): a whole world run in deterministic simulation, then
//! audited.
//!
//! One memory bucket behind two [`Simulated`] layers (latency like a real bucket's plus
//! write faults; then lost responses on reads) carries a world of [`GateConfig::documents`]
//! documents. Two writing bucket stores (each with its compactor) take
//! [`GateConfig::rate`] blind publishes per simulated second for [`GateConfig::duration`],
//! a read-only replica follows them with exact reads of acknowledged writes, one writing
//! store is dropped without close (its bucket access cut, as a crash cuts it) and reopened
//! every [`GateConfig::restart_every`], and a replica cold-starts half-way through.
//!
//! The auditor then checks, on the bare bucket: every acknowledged write at its version
//! with its bytes (an acknowledged write that is not is **lost**), every touched document's
//! versions contiguous and its hash chain whole, every store at one digest of the touched
//! documents, that the compactors wrote checkpoints during the run, and the newest
//! checkpoint's state equal to a replay of the whole log.
//!
//! [`run_gate`] must run on a current-thread tokio runtime whose clock starts paused
//! (`#[tokio::test(start_paused = true)]`): simulated minutes then take seconds, and a seed
//! replays a run exactly. Everything a run depends on comes from the seed or from tokio's
//! clock: the bucket's `modified` times and the stores' wall clock are simulated time, and
//! the stores' ids are drawn from the seed. [`GateReport::outcome`] digests every
//! acknowledged write and every figure, so two runs of one seed can be compared whole.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::{Ctx, ErrorKind, Store, WriteRequest};
use quire_blob::memory::{MemoryStore, WallClock};
use quire_blob::{
    BlobStore, Cancelable, Fault, FaultCounts, FaultRule, LatencyProfile, Op as BlobOp, Simulated,
    real_gcs_latency,
};
use quire_checkpoint::replica::list_checkpoints;
use quire_checkpoint::{CompactionPolicy, Op as CheckpointOp, OpenOptions, Replica, state_digest};
use quire_log::marker::GENESIS_SEQUENCE;
use quire_log::{Clock, Hash, StoreId, Timestamp, WorldId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const PREFIX: &str = "gate/";
const WORLD: WorldId = WorldId([0x6a; 16]);
/// The simulated wall clock starts here (2026-01-01), and advances with tokio's clock.
const EPOCH: u64 = 1_767_225_600;
/// Publishes in flight while the world is populated.
const POPULATE_IN_FLIGHT: usize = 2048;
/// Exact reads of acknowledged writes the follower makes each simulated second.
const FOLLOWER_READS: usize = 8;
/// Acknowledged writes the replica cold-started half-way reads back.
const COLD_READS: usize = 200;

/// What the gate runs.
#[derive(Clone, Debug)]
pub struct GateConfig {
    /// Seeds the simulated bucket (latency and faults), the load and the stores' jitter.
    pub seed: u64,
    /// Documents in the world before the load starts.
    pub documents: u64,
    /// Simulated time the load runs.
    pub duration: Duration,
    /// Writes offered per simulated second (open loop: not slowed by answers).
    pub rate: u64,
    /// Probability of each injected fault per call: ambiguous-after-apply creates,
    /// throttled and unavailable calls, lost read responses.
    pub fault_rate: f64,
    /// One writing store is dropped without close and reopened this often.
    pub restart_every: Duration,
    /// How long a writer waits for its answer.
    pub write_timeout: Duration,
    /// When the writing stores' compactors write checkpoints.
    pub compaction: CompactionPolicy,
    /// How often each compactor looks (plus the policy's random delay).
    pub compact_every: Duration,
}

impl GateConfig {
    /// ADR 0036's gate: 250 writes/s for 10 simulated minutes on a million documents.
    pub fn full(seed: u64) -> GateConfig {
        GateConfig {
            seed,
            documents: 1_000_000,
            duration: Duration::from_secs(600),
            rate: 250,
            fault_rate: 0.01,
            restart_every: Duration::from_secs(150),
            write_timeout: Duration::from_secs(30),
            compaction: CompactionPolicy::default(),
            compact_every: Duration::from_secs(10),
        }
    }

    /// The short form CI runs: one simulated minute on 10,000 documents. Its compactors
    /// run on a scaled-down policy (due after 256 slots or 10 s, deferring to a peer for
    /// 15 s), so checkpoints are written, adopted and deferred to within the minute
    /// despite a restart every 20 s.
    pub fn short(seed: u64) -> GateConfig {
        GateConfig {
            documents: 10_000,
            duration: Duration::from_secs(60),
            restart_every: Duration::from_secs(20),
            compaction: CompactionPolicy {
                slots: 256,
                age: Duration::from_secs(10),
                max_delay: Duration::from_secs(5),
                defer: Duration::from_secs(15),
                ..CompactionPolicy::default()
            },
            compact_every: Duration::from_secs(5),
            ..GateConfig::full(seed)
        }
    }
}

/// What a gate run saw.
#[derive(Clone, Debug, Default)]
pub struct GateReport {
    pub seed: u64,
    pub documents: u64,
    pub simulated: Duration,
    pub offered: u64,
    pub acknowledged: u64,
    /// Acknowledged writes the audit did not find at their version with their bytes.
    pub lost: u64,
    /// Refused as conflicts (blind writers that overlapped).
    pub conflicts: u64,
    /// Answered outcome-unknown (they may or may not have landed).
    pub unknown: u64,
    /// Refused otherwise (a store down or restarting, storage errors, timeouts in queue).
    pub refused: u64,
    /// Acknowledged write latency, in simulated time.
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    /// Faults the write-fault layer injected, by kind.
    pub faults: FaultCounts,
    /// Read responses the second layer lost.
    pub lost_read_responses: u64,
    pub restarts: u64,
    /// Exact reads of acknowledged writes made by the follower and the cold-started replica.
    pub exact_reads: u64,
    /// The sequence of the newest checkpoint at the end, and of the one written before the
    /// load.
    pub checkpoint: u64,
    pub initial_checkpoint: u64,
    /// Checkpoints the compactors wrote during the run (listed at the end).
    pub checkpoints_written: u64,
    /// The log's sequence at the end.
    pub sequence: u64,
    /// Everything the audit found wrong (empty when the run passed).
    pub violations: Vec<String>,
    /// A digest of the whole outcome: every acknowledged write (path, version, bytes, when
    /// it was offered and answered, in the order answered), every refusal, the faults and
    /// the figures above. Two runs of one seed give the same digest.
    pub outcome: String,
}

impl GateReport {
    pub fn passed(&self) -> bool {
        self.lost == 0 && self.violations.is_empty()
    }
}

impl fmt::Display for GateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        writeln!(
            f,
            "gate seed {} ({} documents, {} s simulated)",
            self.seed,
            self.documents,
            self.simulated.as_secs()
        )?;
        writeln!(
            f,
            "  writes offered {}  acknowledged {}  lost {}  (conflicts {}, outcome unknown {}, refused {})",
            self.offered, self.acknowledged, self.lost, self.conflicts, self.unknown, self.refused
        )?;
        writeln!(
            f,
            "  latency p50 {:.1} ms  p99 {:.1} ms  p999 {:.1} ms (simulated)",
            ms(self.p50),
            ms(self.p99),
            ms(self.p999)
        )?;
        writeln!(
            f,
            "  faults injected {}: ambiguous-after-apply {}, throttled {}, unavailable {}, lost read responses {}; restarts {}",
            self.faults.total() + self.lost_read_responses,
            self.faults.ambiguous_after_apply,
            self.faults.throttled,
            self.faults.unavailable,
            self.lost_read_responses,
            self.restarts
        )?;
        writeln!(
            f,
            "  exact reads checked {}; log at {}; checkpoints {} -> {} ({} written during the run)",
            self.exact_reads,
            self.sequence,
            self.initial_checkpoint,
            self.checkpoint,
            self.checkpoints_written
        )?;
        writeln!(f, "  outcome digest {}", self.outcome)?;
        if self.violations.is_empty() {
            write!(f, "  audit: clean")
        } else {
            writeln!(f, "  audit: {} violations", self.violations.len())?;
            for v in self.violations.iter().take(20) {
                writeln!(f, "    {v}")?;
            }
            Ok(())
        }
    }
}

/// Wall time for the stores, following tokio's (paused) clock.
#[derive(Debug)]
struct SimClock {
    start: Instant,
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        Timestamp(EPOCH + self.start.elapsed().as_secs())
    }
}

/// One acknowledged write.
#[derive(Clone, Debug)]
struct Acked {
    path: String,
    version: u64,
    body: Bytes,
    offered: Instant,
    at: Instant,
}

#[derive(Debug, Default)]
struct Tally {
    acked: Vec<Acked>,
    latencies: Vec<Duration>,
    conflicts: u64,
    unknown: u64,
    refused: u64,
    /// Paths written at all (acknowledged or not).
    touched: BTreeMap<String, ()>,
    violations: Vec<String>,
    exact_reads: u64,
}

/// A writing store that can crash: its bucket access goes through a token a crash cancels.
struct Writer {
    store: BucketStore,
    access: CancellationToken,
}

#[derive(Clone)]
struct World {
    bucket: Arc<dyn BlobStore>,
    clock: Arc<dyn Clock>,
    seed: u64,
    compaction: CompactionPolicy,
    compact_every: Duration,
}

impl World {
    fn options(&self, seed: u64, read_only: bool) -> BucketOptions {
        BucketOptions {
            prefix: PREFIX.to_owned(),
            world: Some(WORLD),
            clock: self.clock.clone(),
            read_only,
            compaction: (!read_only).then(|| self.compaction.clone()),
            compact_every: self.compact_every,
            seed: self.seed ^ seed,
            store: Some(StoreId::random(&mut StdRng::seed_from_u64(
                self.seed ^ seed ^ 0x5702e,
            ))),
            ..BucketOptions::default()
        }
    }

    /// Opens a writing store, retrying what the faults refuse.
    async fn writer(&self, seed: u64) -> Writer {
        let access = CancellationToken::new();
        let bucket: Arc<dyn BlobStore> =
            Arc::new(Cancelable::new(self.bucket.clone(), access.clone()));
        let store = open_retrying(bucket, self.options(seed, false)).await;
        Writer { store, access }
    }

    async fn reader(&self, seed: u64) -> BucketStore {
        open_retrying(self.bucket.clone(), self.options(seed, true)).await
    }
}

async fn open_retrying(bucket: Arc<dyn BlobStore>, options: BucketOptions) -> BucketStore {
    let mut attempt = 0u32;
    loop {
        match BucketStore::open(bucket.clone(), options.clone()).await {
            Ok(store) => return store,
            Err(e) => {
                attempt += 1;
                assert!(attempt < 100, "a store could not open in 100 attempts: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn path_of(doc: u64) -> String {
    format!("/d/{:03}/{doc:07}.md", doc % 1000)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the gate (see the module docs); on a paused current-thread runtime.
pub async fn run_gate(config: &GateConfig) -> GateReport {
    let start = Instant::now();
    // The bucket stamps objects with the simulated wall time the stores read: the
    // compactors judge checkpoints' ages by both.
    let wall: WallClock = Arc::new(move || {
        std::time::UNIX_EPOCH + Duration::from_secs(EPOCH + start.elapsed().as_secs())
    });
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::with_clock(wall));
    let faulty = Arc::new(Simulated::new(memory.clone(), config.seed));
    let lossy = Arc::new(Simulated::new(faulty.clone(), config.seed ^ 0x5eed));
    let world = World {
        bucket: lossy.clone(),
        clock: Arc::new(SimClock { start }),
        seed: config.seed,
        compaction: config.compaction.clone(),
        compact_every: config.compact_every,
    };
    let mut report = GateReport {
        seed: config.seed,
        documents: config.documents,
        ..GateReport::default()
    };

    // The world, populated through a store before any fault or latency.
    let first = world.writer(1).await;
    populate(&first.store, config.documents).await;
    let mut replica = Replica::open(memory.clone(), PREFIX, &OpenOptions::default())
        .await
        .expect("the populated world opens");
    replica
        .checkpoint(Duration::from_secs(1800))
        .await
        .expect("the first checkpoint writes");
    report.initial_checkpoint = replica.base().sequence();
    drop(replica);

    for op in BlobOp::ALL {
        faulty.set_latency(op, real_gcs_latency(op));
    }
    let p = config.fault_rate;
    faulty.add_fault(
        FaultRule::new(BlobOp::Create, "", Fault::AmbiguousAfterApply).with_probability(p),
    );
    for op in BlobOp::ALL {
        faulty.add_fault(FaultRule::new(op, "", Fault::Throttled).with_probability(p));
        faulty.add_fault(FaultRule::new(op, "", Fault::Unavailable).with_probability(p));
    }
    for op in [BlobOp::Get, BlobOp::GetRange, BlobOp::Head, BlobOp::List] {
        lossy.add_fault(FaultRule::new(op, "", Fault::Unavailable).with_probability(p));
    }

    let second = world.writer(2).await;
    let follower = world.reader(3).await;
    let writers: Arc<[Mutex<Arc<Writer>>; 2]> =
        Arc::new([Mutex::new(Arc::new(first)), Mutex::new(Arc::new(second))]);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let load_start = Instant::now();
    let end = load_start + config.duration;

    // Crashes: every `restart_every`, one writer (in turn) loses its bucket and is dropped
    // without close; a new store opens in its place.
    let restarts = {
        let writers = writers.clone();
        let every = config.restart_every;
        let world = world.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            let mut next = load_start + every;
            while next < end {
                tokio::time::sleep_until(next).await;
                let slot = (n % 2) as usize;
                let dead = writers[slot].lock().expect("writers lock").clone();
                // The crash: from now on nothing of this store reaches the bucket.
                dead.access.cancel();
                let fresh = world.writer(10 + n).await;
                *writers[slot].lock().expect("writers lock") = Arc::new(fresh);
                // Only its memory is reclaimed: every call it makes now fails.
                tokio::spawn(async move { dead.store.close().await });
                n += 1;
                next += every;
            }
            n
        })
    };

    // The follower: exact reads of writes acknowledged before each read began.
    let following = {
        let tally = tally.clone();
        let follower = follower.clone();
        let seed = config.seed;
        tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed ^ 0xf011);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while Instant::now() < end {
                tick.tick().await;
                let sample: Vec<Acked> = {
                    let tally = tally.lock().expect("tally lock");
                    (0..FOLLOWER_READS)
                        .filter(|_| !tally.acked.is_empty())
                        .map(|_| tally.acked[rng.random_range(0..tally.acked.len())].clone())
                        .collect()
                };
                let checked = check_exact(&follower, &sample, "the follower").await;
                let mut tally = tally.lock().expect("tally lock");
                tally.exact_reads += checked.0;
                tally.violations.extend(checked.1);
            }
        })
    };

    // The replica cold-starting half-way.
    let cold = {
        let tally = tally.clone();
        let world = world.clone();
        let at = load_start + config.duration / 2;
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let store = world.reader(4).await;
            let sample: Vec<Acked> = {
                let tally = tally.lock().expect("tally lock");
                let n = tally.acked.len();
                tally.acked[n.saturating_sub(COLD_READS)..].to_vec()
            };
            let checked = check_exact(&store, &sample, "the cold-started replica").await;
            let mut tally = tally.lock().expect("tally lock");
            tally.exact_reads += checked.0;
            tally.violations.extend(checked.1);
            store
        })
    };

    // The load: open loop, `rate` blind publishes per second over the world's documents.
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x10ad);
    let mut tick = tokio::time::interval(Duration::from_secs(1) / config.rate as u32);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut writes = Vec::new();
    let total = config.rate * config.duration.as_secs();
    for n in 0..total {
        tick.tick().await;
        let doc = rng.random_range(0..config.documents);
        let slot = rng.random_range(0..2usize);
        let path = path_of(doc);
        let body = Bytes::from(format!("# {doc}\nwrite {n} of seed {}\n", config.seed));
        let writer = writers[slot].lock().expect("writers lock").clone();
        let tally = tally.clone();
        let timeout = config.write_timeout;
        writes.push(tokio::spawn(async move {
            let offered = Instant::now();
            let request = WriteRequest::new(path.clone(), body.clone());
            let result = writer
                .store
                .publish(&Ctx::with_timeout(timeout), request)
                .await;
            let mut tally = tally.lock().expect("tally lock");
            tally.touched.insert(path.clone(), ());
            match result {
                Ok(doc) => {
                    tally.latencies.push(offered.elapsed());
                    tally.acked.push(Acked {
                        path,
                        version: doc.version,
                        body,
                        offered,
                        at: Instant::now(),
                    });
                }
                Err(e) => match e.kind() {
                    ErrorKind::Conflict => tally.conflicts += 1,
                    ErrorKind::OutcomeUnknown => tally.unknown += 1,
                    _ => tally.refused += 1,
                },
            }
        }));
    }
    report.offered = total;
    for write in writes {
        write.await.expect("a write task panicked");
    }
    report.restarts = restarts.await.expect("the restart task panicked");
    following.await.expect("the follower panicked");
    let cold = cold.await.expect("the cold start panicked");
    report.simulated = load_start.elapsed();

    // The audit runs without faults or latency: what it checks is what was stored.
    report.faults = faulty.injected();
    report.lost_read_responses = lossy.injected().unavailable;
    faulty.clear_faults();
    lossy.clear_faults();
    for op in BlobOp::ALL {
        faulty.set_latency(op, LatencyProfile::Zero);
    }
    let mut tally = std::mem::take(&mut *tally.lock().expect("tally lock"));
    report.conflicts = tally.conflicts;
    report.unknown = tally.unknown;
    report.refused = tally.refused;
    report.acknowledged = tally.acked.len() as u64;
    report.exact_reads = tally.exact_reads;
    tally.latencies.sort_unstable();
    report.p50 = percentile(&tally.latencies, 0.50);
    report.p99 = percentile(&tally.latencies, 0.99);
    report.p999 = percentile(&tally.latencies, 0.999);
    report.violations = std::mem::take(&mut tally.violations);

    let touched: Vec<String> = tally.touched.keys().cloned().collect();
    let live: Vec<(String, BucketStore)> = {
        let [a, b] = &*writers;
        vec![
            (
                "writer A".into(),
                a.lock().expect("writers lock").store.clone(),
            ),
            (
                "writer B".into(),
                b.lock().expect("writers lock").store.clone(),
            ),
            ("the follower".into(), follower),
            ("the cold-started replica".into(), cold),
        ]
    };
    let auditor = BucketStore::open(memory.clone(), world.options(5, true))
        .await
        .expect("the auditor opens the bare bucket");
    let reference = digest(&auditor, &touched).await;
    for (name, store) in &live {
        let seen = digest(store, &touched).await;
        if seen != reference {
            report.violations.push(format!(
                "{name} is at digest {seen}, the bucket at {reference}"
            ));
        }
        store.close().await;
    }
    drop(live);
    report.lost = audit_acknowledged(&auditor, &tally.acked, &mut report.violations).await;
    audit_histories(&auditor, &touched, &mut report.violations).await;
    drop(auditor);

    let listed: Vec<u64> = list_checkpoints(&*memory, PREFIX, CheckpointOp::Load)
        .await
        .expect("the checkpoints list")
        .into_iter()
        .map(|(sequence, _)| sequence)
        .collect();
    report.checkpoints_written = listed
        .iter()
        .filter(|s| **s > report.initial_checkpoint)
        .count() as u64;
    if report.checkpoints_written == 0 {
        report
            .violations
            .push("the compactors wrote no checkpoint during the run".into());
    }
    let newest = Replica::open(memory.clone(), PREFIX, &OpenOptions::default())
        .await
        .expect("the world opens from its newest checkpoint");
    report.checkpoint = newest.base().sequence();
    if listed.last() != Some(&report.checkpoint) {
        report.violations.push(format!(
            "cold start rests on checkpoint {}, not the newest of {listed:?}",
            report.checkpoint
        ));
    }
    report.sequence = newest.state().sequence();
    if !newest.skipped().is_empty() {
        report.violations.push(format!(
            "cold start passed over checkpoints {:?}",
            newest.skipped()
        ));
    }
    let newest_digest = state_digest(newest.state());
    drop(newest);
    let replay = Replica::open(
        memory.clone(),
        PREFIX,
        &OpenOptions {
            checkpoint: Some(GENESIS_SEQUENCE),
            ..OpenOptions::default()
        },
    )
    .await
    .expect("the whole log replays");
    if state_digest(replay.state()) != newest_digest {
        report
            .violations
            .push("the newest checkpoint's state differs from a replay of the log".into());
    }
    report.outcome = outcome(&report, &tally.acked, start, &listed);
    report
}

/// The digest of a run's whole outcome (see [`GateReport::outcome`]).
fn outcome(report: &GateReport, acked: &[Acked], start: Instant, checkpoints: &[u64]) -> String {
    let mut seen = Vec::new();
    for write in acked {
        seen.extend_from_slice(write.path.as_bytes());
        seen.extend_from_slice(&write.version.to_be_bytes());
        seen.extend_from_slice(&Hash::of(&write.body).0);
        for at in [write.offered, write.at] {
            seen.extend_from_slice(&(at.duration_since(start).as_nanos() as u64).to_be_bytes());
        }
    }
    for sequence in checkpoints {
        seen.extend_from_slice(&sequence.to_be_bytes());
    }
    // Every figure the report prints, the digest itself aside.
    seen.extend_from_slice(format!("{report}").as_bytes());
    Hash::of(&seen).to_string()
}

/// Publishes `documents` documents, many in flight at once.
async fn populate(store: &BucketStore, documents: u64) {
    use futures::StreamExt;
    futures::stream::iter(0..documents)
        .map(|doc| async move {
            let request = WriteRequest::new(path_of(doc), format!("# {doc}\nfirst\n"));
            store
                .publish(&Ctx::new(), request)
                .await
                .unwrap_or_else(|e| panic!("populating document {doc}: {e}"));
        })
        .buffer_unordered(POPULATE_IN_FLIGHT)
        .collect::<()>()
        .await;
}

/// Exact reads of `sample` on `store`: each must show at least the acknowledged version,
/// and that version's bytes when it is still current. Returns the reads made and what was
/// wrong. A read the faults refused is not counted.
async fn check_exact(store: &BucketStore, sample: &[Acked], who: &str) -> (u64, Vec<String>) {
    let mut reads = 0;
    let mut wrong = Vec::new();
    for acked in sample {
        let began = Instant::now();
        if acked.at > began {
            continue;
        }
        let ctx = Ctx::new();
        let Ok(view) = store.open_view(&ctx).await else {
            continue;
        };
        let Ok(doc) = view.get(&ctx, &acked.path, 0).await else {
            continue;
        };
        reads += 1;
        if doc.version < acked.version {
            wrong.push(format!(
                "{who} read {} at version {} after version {} was acknowledged",
                acked.path, doc.version, acked.version
            ));
        } else if doc.version == acked.version && doc.content.as_bytes() != acked.body {
            wrong.push(format!(
                "{who} read other bytes at {} version {}",
                acked.path, acked.version
            ));
        }
    }
    (reads, wrong)
}

/// A digest of the touched documents as `store` serves them: path, version, stored hash.
async fn digest(store: &BucketStore, touched: &[String]) -> String {
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.expect("a view opens");
    let mut seen = Vec::new();
    for path in touched {
        seen.extend_from_slice(path.as_bytes());
        match view.current(&ctx, path).await {
            Ok(summary) => {
                seen.extend_from_slice(&summary.version.to_be_bytes());
                seen.extend_from_slice(&summary.etag.0);
            }
            Err(e) => seen.extend_from_slice(e.kind().to_string().as_bytes()),
        }
    }
    Hash::of(&seen).to_string()
}

/// Every acknowledged write at its version with its bytes; returns how many were not.
async fn audit_acknowledged(
    auditor: &BucketStore,
    acked: &[Acked],
    violations: &mut Vec<String>,
) -> u64 {
    let ctx = Ctx::new();
    let view = auditor.open_view(&ctx).await.expect("a view opens");
    let mut lost = 0;
    for write in acked {
        match view.get(&ctx, &write.path, write.version).await {
            Ok(doc) if doc.content.as_bytes() == write.body => {}
            Ok(_) => {
                lost += 1;
                violations.push(format!(
                    "lost: {} version {} holds other bytes",
                    write.path, write.version
                ));
            }
            Err(e) => {
                lost += 1;
                violations.push(format!(
                    "lost: {} version {}: {e}",
                    write.path, write.version
                ));
            }
        }
    }
    lost
}

/// Every touched document's versions contiguous, its hash chain whole.
async fn audit_histories(auditor: &BucketStore, touched: &[String], violations: &mut Vec<String>) {
    let ctx = Ctx::new();
    let view = auditor.open_view(&ctx).await.expect("a view opens");
    for path in touched {
        let versions = match view.versions(&ctx, path).await {
            Ok(versions) => versions,
            Err(e) => {
                violations.push(format!("{path}: versions: {e}"));
                continue;
            }
        };
        if versions
            .windows(2)
            .any(|w| w[0].version != w[1].version + 1)
        {
            violations.push(format!("{path}: a gap in its versions"));
        }
        if let Err(e) = view.verify_chain(&ctx, path).await {
            violations.push(format!("{path}: {e}"));
        }
    }
}
