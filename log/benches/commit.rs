//! Commit throughput and latency of one store on a simulated bucket.
//!
//! The bucket is the memory driver behind `Simulated::real_gcs`: seeded latencies with ADR
//! 0036's real-GCS figures (small create p50 40 ms, p99 50 ms; reads about 30 ms). Time is
//! tokio's paused clock, so each measurement reports *simulated* time: `saturation` is writes acknowledged per
//! simulated second with a deep queue; `open_loop_250` offers 250 writes/s and reports the
//! p99 acknowledge latency as its time (p50/p99/p999 and objects/bytes per write are printed).
//! `closed_loop_{n}_stores` runs 1, 2 or 3 stores on one world, each with its own link to
//! the one bucket and no peer hints between them, every store kept busy by closed-loop
//! writers; it prints total writes/s, each store's share of the commits and its p99
//! acknowledge latency, with and without hints. 2 and 3 stores, with and without hints, are
//! also offered 250 writes/s in total (open loop), printing each store's share and p99.
//! `QUIRE_BENCH_STATS=1` prints each store's slot races, yields and pauses;
//! `QUIRE_BENCH_OPEN_LOOP_STORES=1` runs only the open-loop figures of 2 and 3 stores;
//! `QUIRE_BENCH_TIMELINE=1` prints after each of those where its slowest writes' time went
//! (see `timeline`).

mod timeline;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Metered, Op, Simulated};
use quire_log::build::Mutation;
use quire_log::commit::{CommitRequest, Committer, CommitterConfig};
use quire_log::{ManualClock, StoreId, Timestamp, WorldId, WorldState};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn committer(seed: u64) -> (Committer, Metered) {
    committer_on(Arc::new(MemoryStore::new()), seed, 2, None)
}

/// A committer with its own simulated link to `bucket`.
fn committer_on(
    bucket: Arc<dyn BlobStore>,
    seed: u64,
    store: u8,
    on_committed: Option<quire_log::commit::CommittedHook>,
) -> (Committer, Metered) {
    recorded_committer_on(bucket, seed, store, on_committed, None)
}

/// [`committer_on`], its link's calls on the log recorded into `calls` when given.
fn recorded_committer_on(
    bucket: Arc<dyn BlobStore>,
    seed: u64,
    store: u8,
    on_committed: Option<quire_log::commit::CommittedHook>,
    calls: Option<&timeline::Calls>,
) -> (Committer, Metered) {
    let mut simulated: Arc<dyn BlobStore> = Arc::new(Simulated::real_gcs(bucket, seed));
    if let Some(calls) = calls {
        simulated = Arc::new(timeline::Recorder {
            inner: simulated,
            store: usize::from(store) - 1,
            calls: calls.clone(),
        });
    }
    let metered = Metered::new(simulated);
    let world = WorldId([1; 16]);
    let config = CommitterConfig {
        prefix: "bench/".into(),
        store: StoreId([store; 16]),
        seed,
        on_committed,
        ..CommitterConfig::default()
    };
    let c = Committer::start(
        Arc::new(metered.clone()),
        WorldState::genesis(world),
        Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        config,
    );
    (c, metered)
}

/// A small create: a ~300-byte body with a little metadata.
fn write(i: u64) -> CommitRequest {
    let metadata = [
        ("type".to_owned(), "Note".to_owned()),
        ("tags".to_owned(), "bench".to_owned()),
    ]
    .into();
    CommitRequest::new(Mutation::Publish {
        path: format!("/docs/{}/{i}.md", i % 97),
        expected: None,
        body: Bytes::from(format!(
            "# Note {i}\n\n{}\n",
            "lorem ipsum dolor sit amet ".repeat(10)
        )),
        metadata,
    })
}

const SATURATION_WRITES: u64 = 2000;

/// Simulated time to acknowledge `SATURATION_WRITES` writes offered at once.
fn saturation_run(seed: u64) -> Duration {
    runtime().block_on(async {
        let (c, _) = committer(seed);
        let start = tokio::time::Instant::now();
        let writes = (0..SATURATION_WRITES).map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.submit(write(i)).await })
        });
        for w in futures::future::join_all(writes).await {
            w.unwrap().unwrap();
        }
        start.elapsed()
    })
}

/// Simulated time for `stores` stores sharing one bucket (peer hints wired between them) to
/// acknowledge `SATURATION_WRITES` writes offered at once, split evenly.
fn contended_run(seed: u64, stores: u8) -> Duration {
    runtime().block_on(async {
        let bucket: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
        let peers: Arc<std::sync::Mutex<Vec<Committer>>> = Arc::default();
        let mut committers = Vec::new();
        for s in 0..stores {
            let hint_to = peers.clone();
            let hook: quire_log::commit::CommittedHook = Arc::new(move |sequence| {
                for (i, peer) in hint_to.lock().unwrap().iter().enumerate() {
                    if i != usize::from(s) {
                        peer.follow(sequence);
                    }
                }
            });
            let (c, _) = committer_on(bucket.clone(), seed * 16 + u64::from(s), s + 1, Some(hook));
            committers.push(c);
        }
        *peers.lock().unwrap() = committers.clone();
        let start = tokio::time::Instant::now();
        let writes = (0..SATURATION_WRITES).map(|i| {
            let c = committers[(i % u64::from(stores)) as usize].clone();
            tokio::spawn(async move { c.submit(write(i)).await })
        });
        for w in futures::future::join_all(writes).await {
            w.unwrap().unwrap();
        }
        let elapsed = start.elapsed();
        if seed == 0 {
            let stats: Vec<_> = committers.iter().map(|c| c.stats()).collect();
            eprintln!(
                "{stores} stores: {:?} slots won, {:?} lost, {:?} handoffs",
                stats.iter().map(|s| s.slots_won).collect::<Vec<_>>(),
                stats.iter().map(|s| s.slots_lost).collect::<Vec<_>>(),
                stats.iter().map(|s| s.handoffs).collect::<Vec<_>>(),
            );
        }
        peers.lock().unwrap().clear();
        elapsed
    })
}

/// Writers per store in the closed-loop runs: enough to keep batches of 64 full with
/// two batches staged behind the one being created.
const CLOSED_LOOP_WRITERS: usize = 192;

/// What one closed-loop run measured.
struct ClosedLoop {
    writes_per_second: f64,
    /// Per store: its share of all commits and its p99 acknowledge latency.
    stores: Vec<(f64, Duration)>,
}

/// `stores` stores on one world (with or without peer hints between them), each driven by
/// closed-loop writers for `seconds` simulated seconds.
fn closed_loop_run(seed: u64, stores: u8, hints: bool, seconds: u64) -> ClosedLoop {
    runtime().block_on(async {
        let bucket: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
        let start = tokio::time::Instant::now();
        let end = start + Duration::from_secs(seconds);
        let peers: Arc<std::sync::Mutex<Vec<Committer>>> = Arc::default();
        let mut committers = Vec::new();
        let mut per_store = Vec::new();
        for s in 0..stores {
            let hint_to = peers.clone();
            let hook: quire_log::commit::CommittedHook = Arc::new(move |sequence| {
                for (i, peer) in hint_to.lock().unwrap().iter().enumerate() {
                    if i != usize::from(s) {
                        peer.follow(sequence);
                    }
                }
            });
            let hook = hints.then_some(hook);
            let (c, _) = committer_on(bucket.clone(), seed * 16 + u64::from(s), s + 1, hook);
            committers.push(c.clone());
            let writers: Vec<_> = (0..CLOSED_LOOP_WRITERS)
                .map(|w| {
                    let c = c.clone();
                    tokio::spawn(async move {
                        let mut latencies = Vec::new();
                        let mut i = 0u64;
                        while tokio::time::Instant::now() < end {
                            let offered = tokio::time::Instant::now();
                            let n = (u64::from(s) << 40) | ((w as u64) << 20) | i;
                            c.submit(write(n)).await.unwrap();
                            latencies.push(offered.elapsed());
                            i += 1;
                        }
                        latencies
                    })
                })
                .collect();
            per_store.push(writers);
        }
        *peers.lock().unwrap() = committers;
        let mut latencies_per_store = Vec::new();
        for writers in per_store {
            let mut latencies = Vec::new();
            for w in futures::future::join_all(writers).await {
                latencies.extend(w.unwrap());
            }
            latencies.sort_unstable();
            latencies_per_store.push(latencies);
        }
        let elapsed = start.elapsed();
        if std::env::var_os("QUIRE_BENCH_STATS").is_some() {
            for c in peers.lock().unwrap().iter() {
                let s = c.counters();
                eprintln!(
                    "  won {} lost {} yields {} handoffs {}",
                    s.slots_won, s.slots_lost, s.yields, s.handoffs
                );
            }
        }
        peers.lock().unwrap().clear();
        let total: usize = latencies_per_store.iter().map(Vec::len).sum();
        ClosedLoop {
            writes_per_second: total as f64 / elapsed.as_secs_f64(),
            stores: latencies_per_store
                .iter()
                .map(|l| (l.len() as f64 / total as f64, percentile(l, 0.99)))
                .collect(),
        }
    })
}

/// `stores` stores with peer hints between them, offered `rate` writes/s in total (spread
/// round-robin) for `seconds` simulated seconds, each write timed from its offer: per store,
/// its share of the commits and its p99.
fn open_loop_stores_run(
    seed: u64,
    stores: u8,
    hints: bool,
    rate: u64,
    seconds: u64,
) -> Vec<(f64, Duration)> {
    runtime().block_on(async {
        let bucket: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
        let peers: Arc<std::sync::Mutex<Vec<Committer>>> = Arc::default();
        let calls = std::env::var_os("QUIRE_BENCH_TIMELINE")
            .is_some()
            .then(timeline::Calls::default);
        let mut committers = Vec::new();
        for s in 0..stores {
            let hint_to = peers.clone();
            let hook: quire_log::commit::CommittedHook = Arc::new(move |sequence| {
                for (i, peer) in hint_to.lock().unwrap().iter().enumerate() {
                    if i != usize::from(s) {
                        peer.follow(sequence);
                    }
                }
            });
            let hook = hints.then_some(hook);
            let (c, _) = recorded_committer_on(
                bucket.clone(),
                seed * 16 + u64::from(s),
                s + 1,
                hook,
                calls.as_ref(),
            );
            committers.push(c);
        }
        *peers.lock().unwrap() = committers.clone();
        let count = rate * seconds;
        let start = tokio::time::Instant::now();
        let mut tasks = Vec::with_capacity(count as usize);
        for i in 0..count {
            let offered = start + Duration::from_micros(i * 1_000_000 / rate);
            let store = (i % u64::from(stores)) as usize;
            let c = committers[store].clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(offered).await;
                c.submit(write(i)).await.unwrap();
                (store, offered, tokio::time::Instant::now())
            }));
        }
        let mut per_store = vec![Vec::new(); usize::from(stores)];
        let mut writes = Vec::new();
        for t in tasks {
            let (store, offered, answered) = t.await.unwrap();
            per_store[store].push(answered - offered);
            writes.push(timeline::Write {
                store,
                offered,
                answered,
            });
        }
        if std::env::var_os("QUIRE_BENCH_STATS").is_some() {
            for c in &committers {
                let s = c.counters();
                eprintln!(
                    "  won {} lost {} yields {} handoffs {} listening {} absorbed {}",
                    s.slots_won,
                    s.slots_lost,
                    s.yields,
                    s.handoffs,
                    s.listening_pauses,
                    s.batches_absorbed
                );
            }
        }
        if let Some(calls) = calls {
            let calls = calls.lock().unwrap().clone();
            timeline::explain(bucket.as_ref(), &calls, &writes, usize::from(stores)).await;
        }
        peers.lock().unwrap().clear();
        let total: usize = per_store.iter().map(Vec::len).sum();
        per_store
            .into_iter()
            .map(|mut l| {
                l.sort_unstable();
                (l.len() as f64 / total as f64, percentile(&l, 0.99))
            })
            .collect()
    })
}

struct OpenLoop {
    latencies: Vec<Duration>,
    creates_per_write: f64,
    bytes_per_write: f64,
}

/// 250 writes/s for `seconds` simulated seconds, each write timed from its offer.
fn open_loop_run(seed: u64, seconds: u64) -> OpenLoop {
    runtime().block_on(async {
        let (c, metered) = committer(seed);
        let count = 250 * seconds;
        let start = tokio::time::Instant::now();
        let mut tasks = Vec::with_capacity(count as usize);
        for i in 0..count {
            let offered = start + Duration::from_millis(i * 4);
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(offered).await;
                c.submit(write(i)).await.unwrap();
                offered.elapsed()
            }));
        }
        let mut latencies = Vec::with_capacity(tasks.len());
        for t in tasks {
            latencies.push(t.await.unwrap());
        }
        latencies.sort_unstable();
        let reading = metered.reading();
        OpenLoop {
            latencies,
            creates_per_write: reading.requests(Op::Create) as f64 / count as f64,
            bytes_per_write: reading.bytes_up as f64 / count as f64,
        }
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Prints 2 and 3 stores offered 250 writes/s in total, with and without hints.
fn open_loop_stores() {
    for (stores, hints) in [(2u8, true), (3, true), (2, false), (3, false)] {
        let run = open_loop_stores_run(7, stores, hints, 250, 10);
        let shares: Vec<String> = run
            .iter()
            .map(|(share, p99)| format!("{:.0}% p99 {p99:?}", share * 100.0))
            .collect();
        eprintln!(
            "open loop 250 writes/s in total over {stores} stores, peer hints {hints} (simulated): {}",
            shares.join(", "),
        );
    }
}

fn bench(c: &mut Criterion) {
    if std::env::var_os("QUIRE_BENCH_OPEN_LOOP_STORES").is_some() {
        open_loop_stores();
        return;
    }
    let mut group = c.benchmark_group("commit");
    group.sample_size(10);
    group.throughput(Throughput::Elements(SATURATION_WRITES));
    group.bench_function("saturation_simulated", |b| {
        b.iter_custom(|iters| (0..iters).map(saturation_run).sum())
    });
    for stores in [2u8, 3] {
        group.bench_function(format!("saturation_{stores}_stores_simulated"), |b| {
            b.iter_custom(|iters| (0..iters).map(|i| contended_run(i, stores)).sum())
        });
    }
    for (stores, hints) in [(1u8, false), (2, false), (3, false), (2, true), (3, true)] {
        let run = closed_loop_run(7, stores, hints, 4);
        let shares: Vec<String> = run
            .stores
            .iter()
            .map(|(share, p99)| format!("{:.0}% p99 {p99:?}", share * 100.0))
            .collect();
        eprintln!(
            "closed loop, {stores} store(s) on one world, peer hints {hints} (simulated): {:.0} writes/s; {}",
            run.writes_per_second,
            shares.join(", "),
        );
        // Reported as the time for a fixed count at the measured rate, so criterion's
        // throughput is the total writes/s.
        if hints {
            continue;
        }
        group.bench_function(format!("closed_loop_{stores}_stores_simulated"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|i| {
                        let rate = closed_loop_run(i, stores, false, 2).writes_per_second;
                        Duration::from_secs_f64(SATURATION_WRITES as f64 / rate)
                    })
                    .sum()
            })
        });
    }
    open_loop_stores();
    let summary = open_loop_run(7, 10);
    eprintln!(
        "open loop 250 writes/s for 10 s (simulated): p50 {:?} p99 {:?} p999 {:?}; {:.3} creates/write, {:.0} bytes up/write",
        percentile(&summary.latencies, 0.50),
        percentile(&summary.latencies, 0.99),
        percentile(&summary.latencies, 0.999),
        summary.creates_per_write,
        summary.bytes_per_write,
    );
    group.throughput(Throughput::Elements(1));
    group.bench_function("open_loop_250_p99_simulated", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|i| percentile(&open_loop_run(i, 4).latencies, 0.99))
                .sum()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
