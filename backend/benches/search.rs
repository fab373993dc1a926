//! Body search (LOOKUP `match: body`) on a bucket store over the file driver.
//!
//! ```text
//! cargo bench -p quire-backend --bench search -- [--docs N] [--seed S] [--queries Q]
//!     [--dir PATH] [--write-only] [--exit-when-warm] [--limit L] [--exit-after-queries]
//! ```
//!
//! A generator publishes `N` realistic markdown documents (headings, lists, code fences,
//! links, tags; 0.5–4 KB bodies; a Zipf vocabulary; fixed seed) through a writer store, many
//! writes in flight so the committer batches them, and waits for the writer's checkpoint to
//! cover them (as a server's compactor does, a second after writes stop). Then a second store
//! opens the world cold from that checkpoint and the bench reports:
//! - the first body answer on that cold replica (nothing built: it reads every body) and the
//!   indexing throughput it implies (documents/s, and per CPU-second of the process);
//! - resident memory before and after the index is built (the process's RSS, and its
//!   anonymous and file-backed parts: the index files are mapped, so their pages count as
//!   file-backed and the kernel may reclaim them);
//! - the index's bytes on disk against the bodies' bytes;
//! - the first body answer on a third, cold replica when the bucket holds a copy of the
//!   index (put by the second replica as after a checkpoint, and how long that put took),
//!   with the phases of the copy's download logged at info (`RUST_LOG` overrides); when the
//!   second replica itself started from a copy, how long after its first answer the copy's
//!   positions and stored sections were all in (the warm figures wait for that);
//! - p50/p99 latency of 1-, 2- and 3-term queries and of two-word phrases (`Q` each), at a
//!   limit of 1000 (the most the server asks) and of 10 (the default limit, what the server
//!   asks first), and the process's CPU time per query (what the latency is on an idle core),
//!   with the three slowest queries of each;
//! - how long after a commit the write is searchable on its own replica and on a peer told
//!   by a hint.
//!
//! `--dir PATH` keeps the bucket in PATH. When PATH already holds a world (from an earlier run
//! with the same `--docs` and `--seed`, e.g. one with `--write-only`, which exits once the
//! writer's checkpoint covers the corpus), the corpus is not written again and the writer
//! store is opened only after the warm figures, so they are one replica's alone.
//!
//! `--limit L` measures queries at that limit alone; `--exit-after-queries` stops after them.
//!
//! `--exit-when-warm` exits right after the warm figures, without freeing anything, so a heap
//! profiler run over the bench reports what the warm replica holds as still allocated.
//!
//! The machine's load is part of every figure: say what else ran.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::{
    CatalogQuery, Ctx, ErrorKind, Follower, MatchMode, SearchOptions, Store, WriteRequest,
};
use quire_blob::BlobStore;
use quire_blob::file::DirBlobStore;
use quire_checkpoint::compactor::{CompactionPolicy, Step};
use quire_log::commit::CommittedHook;
use quire_log::marker::GENESIS_SEQUENCE;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The server's allocator, so resident memory is what a server's would be.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug)]
struct Args {
    docs: usize,
    seed: u64,
    queries: usize,
    dir: Option<PathBuf>,
    write_only: bool,
    exit_when_warm: bool,
    /// The limits queries are measured at.
    limits: Vec<usize>,
    exit_after_queries: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        docs: 1_000_000,
        seed: 36,
        queries: 200,
        dir: None,
        write_only: false,
        exit_when_warm: false,
        limits: vec![1000, 10],
        exit_after_queries: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--docs" => args.docs = value().parse().expect("--docs N"),
            "--seed" => args.seed = value().parse().expect("--seed S"),
            "--queries" => args.queries = value().parse().expect("--queries Q"),
            "--dir" => args.dir = Some(PathBuf::from(value())),
            "--write-only" => args.write_only = true,
            "--exit-when-warm" => args.exit_when_warm = true,
            "--limit" => args.limits = vec![value().parse().expect("--limit L")],
            "--exit-after-queries" => args.exit_after_queries = true,
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

/// A vocabulary of pronounceable words; draws follow a Zipf-like law (rank^-1.1).
struct Vocabulary {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocabulary {
    fn new(rng: &mut StdRng, size: usize) -> Vocabulary {
        const CONSONANTS: &[u8] = b"bcdfghklmnprstvz";
        const VOWELS: &[u8] = b"aeiou";
        let mut words = Vec::with_capacity(size);
        let mut seen = std::collections::HashSet::new();
        while words.len() < size {
            let syllables = rng.random_range(1..=4);
            let mut word = String::new();
            for _ in 0..syllables {
                word.push(CONSONANTS[rng.random_range(0..CONSONANTS.len())] as char);
                word.push(VOWELS[rng.random_range(0..VOWELS.len())] as char);
            }
            if seen.insert(word.clone()) {
                words.push(word);
            }
        }
        let mut total = 0.0;
        let cumulative = (1..=size)
            .map(|rank| {
                total += (rank as f64).powf(-1.1);
                total
            })
            .collect();
        Vocabulary { words, cumulative }
    }

    fn draw(&self, rng: &mut StdRng) -> &str {
        let total = *self.cumulative.last().expect("a vocabulary");
        let at = rng.random::<f64>() * total;
        let i = self.cumulative.partition_point(|c| *c < at);
        &self.words[i.min(self.words.len() - 1)]
    }

    fn sentence(&self, rng: &mut StdRng, words: usize) -> String {
        (0..words)
            .map(|_| self.draw(rng))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One generated document: a body of 0.5–4 KB and its tags.
fn document(vocab: &Vocabulary, rng: &mut StdRng) -> (String, String) {
    let target = rng.random_range(500..4000);
    let mut body = format!("# {}\n\n", vocab.sentence(rng, 3));
    while body.len() < target {
        match rng.random_range(0..10) {
            0 | 1 => {
                let level = rng.random_range(2..=3);
                body.push_str(&format!(
                    "\n{} {}\n\n",
                    "#".repeat(level),
                    vocab.sentence(rng, 2)
                ));
            }
            2 => {
                for _ in 0..rng.random_range(2..5) {
                    body.push_str(&format!("- {}\n", vocab.sentence(rng, 5)));
                }
                body.push('\n');
            }
            3 => body.push_str(&format!(
                "```sh\n{}_{} --{}\n```\n\n",
                vocab.draw(rng),
                vocab.draw(rng),
                vocab.draw(rng)
            )),
            4 => body.push_str(&format!(
                "See [{}](/notes/{}.md) for more.\n\n",
                vocab.sentence(rng, 2),
                vocab.draw(rng)
            )),
            _ => {
                let words = rng.random_range(8..30);
                body.push_str(&vocab.sentence(rng, words));
                body.push_str(".\n\n");
            }
        }
    }
    let tags = format!("{},{}", vocab.draw(rng), vocab.draw(rng));
    (body, tags)
}

/// `RssAnon` and `RssFile` of this process, MiB.
fn rss_parts_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// CPU seconds (user + system) this process used so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

/// Publishes the corpus through a writer store that checkpoints as a server does, and waits
/// for its checkpoint to cover every write; returns the writer and the bodies' bytes.
async fn write_corpus(
    args: &Args,
    blobs: Arc<dyn BlobStore>,
    vocab: &Vocabulary,
    rng: &mut StdRng,
    cache: &std::path::Path,
) -> (BucketStore, usize) {
    // The writer checkpoints soon after writes stop, so the cold replicas start from a
    // checkpoint, not by replaying the whole log.
    let writer_options = BucketOptions {
        compaction: Some(CompactionPolicy {
            age: CHECKPOINT_AGE,
            max_delay: Duration::ZERO,
            ..CompactionPolicy::default()
        }),
        compact_every: CHECKPOINT_AGE,
        ..options(cache)
    };
    let writer = BucketStore::open(blobs, writer_options)
        .await
        .expect("a writer");
    let mut steps = writer.compaction_steps().expect("the writer compacts");
    let started = Instant::now();
    let mut corpus_bytes = 0usize;
    let mut in_flight = tokio::task::JoinSet::new();
    for i in 0..args.docs {
        let (body, tags) = document(vocab, rng);
        corpus_bytes += body.len();
        let request =
            WriteRequest::new(format!("/notes/d{}/n{i}.md", i % 1000), body).meta("tags", &tags);
        let store = writer.clone();
        in_flight.spawn(async move { store.publish(&Ctx::new(), request).await.map(|_| ()) });
        if in_flight.len() >= 512 {
            in_flight
                .join_next()
                .await
                .expect("a write")
                .expect("joined")
                .expect("published");
        }
    }
    while let Some(done) = in_flight.join_next().await {
        done.expect("joined").expect("published");
    }
    let wrote = started.elapsed();
    // Each publish of a new path commits one sequence after genesis's.
    let tip = GENESIS_SEQUENCE + args.docs as u64;
    let written_at = Instant::now();
    steps
        .wait_for(|step| matches!(step, Some(Step::Written { sequence, .. }) if *sequence >= tip))
        .await
        .expect("the compactor runs");
    println!(
        "corpus: {} documents, {:.1} MiB of bodies, written in {:.1} s ({:.0} writes/s)",
        args.docs,
        corpus_bytes as f64 / (1024.0 * 1024.0),
        wrote.as_secs_f64(),
        args.docs as f64 / wrote.as_secs_f64()
    );
    println!(
        "writer's checkpoint covers the corpus {:.1} s after the last write",
        written_at.elapsed().as_secs_f64()
    );
    (writer, corpus_bytes)
}

/// How soon after writes stop the writer checkpoints them.
const CHECKPOINT_AGE: Duration = Duration::from_secs(1);

fn options(cache: &std::path::Path) -> BucketOptions {
    BucketOptions {
        compaction: None,
        search: SearchOptions {
            cache_dir: Some(cache.to_owned()),
            ..SearchOptions::default()
        },
        ..BucketOptions::default()
    }
}

/// Asks until a body answer comes; returns it and how long that took.
async fn until_body(store: &dyn Store, query: &CatalogQuery) -> (usize, Duration) {
    let started = Instant::now();
    loop {
        let ctx = Ctx::new();
        let view = store.open_view(&ctx).await.expect("a view");
        match view.lookup(&ctx, query).await {
            Ok(found) => return (found.len(), started.elapsed()),
            Err(e) if e.kind() == ErrorKind::BodyMatchUnavailable => continue,
            Err(e) => panic!("body lookup: {e}"),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // Phase timings of the index's work (a copy's download) are logged at info.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,quire_backend=info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = parse_args();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| scratch.path().join("bucket"));
    let blobs: Arc<dyn BlobStore> = Arc::new(DirBlobStore::open(&dir).expect("a file driver"));
    let mut rng = StdRng::seed_from_u64(args.seed);
    let vocab = Arc::new(Vocabulary::new(&mut rng, 50_000));

    let cache = |name: &str| scratch.path().join(name);
    let reuse = args
        .dir
        .as_ref()
        .and_then(|d| std::fs::read_dir(d).ok())
        .is_some_and(|mut entries| entries.next().is_some());
    let mut writer = None;
    let corpus_bytes = if reuse {
        // The same seed draws the same documents; only their bytes are counted.
        let bytes: usize = (0..args.docs)
            .map(|_| document(&vocab, &mut rng).0.len())
            .sum();
        println!(
            "corpus: {} documents, {:.1} MiB of bodies, already in {}",
            args.docs,
            bytes as f64 / (1024.0 * 1024.0),
            dir.display()
        );
        bytes
    } else {
        let (store, bytes) =
            write_corpus(&args, blobs.clone(), &vocab, &mut rng, &cache("writer")).await;
        writer = Some(store);
        bytes
    };
    if args.write_only {
        if let Some(writer) = writer {
            writer.close().await;
        }
        return;
    }

    let opened = Instant::now();
    // The reader's commits reach the writer as peer hints, as a server forwards them; the
    // writer may be opened only after the warm figures.
    let peer: Arc<OnceLock<BucketStore>> = Arc::new(OnceLock::new());
    if let Some(writer) = &writer {
        let _ = peer.set(writer.clone());
    }
    let hinted = peer.clone();
    let hint: CommittedHook = Arc::new(move |sequence: u64| {
        if let Some(writer) = hinted.get() {
            writer.follow(sequence);
        }
    });
    let reader_options = BucketOptions {
        on_committed: Some(hint),
        ..options(&cache("reader"))
    };
    let reader = BucketStore::open(blobs.clone(), reader_options)
        .await
        .expect("a reader");
    println!(
        "cold replica opened in {:.2} s; RSS {:.0} MiB",
        opened.elapsed().as_secs_f64(),
        rss_mib()
    );
    let rss_before = rss_mib();
    // The most the server asks.
    let first = CatalogQuery::new(vocab.words[0].clone())
        .mode(MatchMode::Body)
        .max(1000);
    let cpu_before = cpu_seconds();
    let (rows, took) = until_body(&reader, &first).await;
    let cpu = cpu_seconds() - cpu_before;
    if reader.body_search().status().downloads > 0 {
        // A reused bucket may hold an earlier run's copy of the index.
        println!(
            "first body answer on a cold replica, from the copy an earlier run left in the bucket: {:.2} s ({rows} rows; {cpu:.1} CPU-s)",
            took.as_secs_f64(),
        );
        // The copy answers before its positions and stored sections are in: the warm
        // figures below are those of the whole index.
        let answered = Instant::now();
        reader
            .body_search()
            .wait_until(|s| s.copies_whole >= s.downloads || !s.active)
            .await;
        println!(
            "the rest of the copy (positions, stored sections) in {:.2} s after the first answer",
            answered.elapsed().as_secs_f64()
        );
    } else {
        println!(
            "first body answer on a cold replica, nothing built: {:.2} s ({rows} rows); {:.0} documents/s indexed, {:.0} documents per CPU-second ({cpu:.1} CPU-s)",
            took.as_secs_f64(),
            args.docs as f64 / took.as_secs_f64(),
            args.docs as f64 / cpu.max(1e-9)
        );
    }
    let (anon, file) = rss_parts_mib();
    println!(
        "RSS with the warm index: {:.0} MiB ({:+.0} MiB for the index; anonymous {anon:.0} MiB, file-backed {file:.0} MiB; bodies {:.0} MiB)",
        rss_mib(),
        rss_mib() - rss_before,
        corpus_bytes as f64 / (1024.0 * 1024.0)
    );
    let index_bytes = dir_bytes(&cache("reader"));
    println!(
        "index on disk: {:.1} MiB, {:.2} bytes per body byte",
        index_bytes as f64 / (1024.0 * 1024.0),
        index_bytes as f64 / corpus_bytes.max(1) as f64
    );
    if args.exit_when_warm {
        exit_now(&scratch);
    }

    for (label, terms, phrase) in [
        ("1 term", 1, false),
        ("2 terms", 2, false),
        ("3 terms", 3, false),
        ("phrase", 2, true),
    ] {
        // Words from the top of the vocabulary, so queries match.
        let texts: Vec<String> = (0..args.queries)
            .map(|_| {
                let words: Vec<&str> = (0..terms)
                    .map(|_| vocab.words[rng.random_range(0..200)].as_str())
                    .collect();
                if phrase {
                    format!("\"{}\"", words.join(" "))
                } else {
                    words.join(" ")
                }
            })
            .collect();
        // The server asks for the caller's limit (10 unless the caller says) and at most
        // 1000; both ends are measured over the same queries.
        for &limit in &args.limits {
            let mut times = Vec::with_capacity(args.queries);
            let mut total_rows = 0usize;
            let cpu_before = cpu_seconds();
            for text in &texts {
                let query = CatalogQuery::new(text.clone())
                    .mode(MatchMode::Body)
                    .max(limit);
                let ctx = Ctx::new();
                let view = reader.open_view(&ctx).await.expect("a view");
                let at = Instant::now();
                let found = view.lookup(&ctx, &query).await.expect("a warm body answer");
                times.push((at.elapsed(), text));
                total_rows += found.len();
            }
            let cpu = cpu_seconds() - cpu_before;
            times.sort();
            let slowest: Vec<String> = times
                .iter()
                .rev()
                .take(3)
                .map(|(took, text)| format!("{text} {:.1} ms", took.as_secs_f64() * 1e3))
                .collect();
            let times: Vec<Duration> = times.into_iter().map(|(took, _)| took).collect();
            println!(
                "{label:8} limit {limit:4}: p50 {:7.2} ms  p99 {:7.2} ms  ({:.0} rows on average; {:.2} ms of CPU per query)",
                percentile(&times, 0.5).as_secs_f64() * 1e3,
                percentile(&times, 0.99).as_secs_f64() * 1e3,
                total_rows as f64 / args.queries.max(1) as f64,
                cpu * 1e3 / args.queries.max(1) as f64
            );
            // Which queries make the tail, to look into.
            println!("  slowest: {}", slowest.join(", "));
        }
    }

    if args.exit_after_queries {
        exit_now(&scratch);
    }

    // A copy of the reader's index in the bucket (as after a checkpoint), then a third cold
    // replica's first body answer from it.
    let search = reader.body_search().clone();
    let exported = search.status().exports;
    let asked = Instant::now();
    search.checkpointed(0);
    search.wait_until(|s| s.exports > exported).await;
    println!(
        "copy put {:.2} s after the checkpoint asked for it",
        asked.elapsed().as_secs_f64()
    );
    let cold = BucketStore::open(blobs.clone(), options(&cache("cold")))
        .await
        .expect("a cold replica");
    let (rows, took) = until_body(&cold, &first).await;
    println!(
        "first body answer on a cold replica with a copy in the bucket: {:.2} s ({rows} rows; downloads {})",
        took.as_secs_f64(),
        cold.body_search().status().downloads
    );
    cold.close().await;

    // A write searchable on its own replica, then on a peer told by a hint.
    // Words and paths of this run alone, so a reused bucket takes them as new writes.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let marker = format!("zzmarker{run}");
    let request = WriteRequest::new(
        format!("/notes/fresh-{run}.md"),
        format!("# Fresh\n\n{marker} here\n"),
    );
    let at = Instant::now();
    reader
        .publish(&Ctx::new(), request)
        .await
        .expect("published");
    let query = CatalogQuery::new(marker.clone()).mode(MatchMode::Body);
    let (rows, _) = until_body(&reader, &query).await;
    assert_eq!(rows, 1, "the write is found");
    println!(
        "write searchable on its replica {:.1} ms after the commit was sent",
        at.elapsed().as_secs_f64() * 1e3
    );
    let writer = match writer {
        Some(writer) => writer,
        None => {
            let writer = BucketStore::open(blobs.clone(), options(&cache("writer")))
                .await
                .expect("a writer");
            let _ = peer.set(writer.clone());
            writer
        }
    };
    let (_, warm) = until_body(&writer, &CatalogQuery::new("warm").mode(MatchMode::Body)).await;
    println!(
        "(the writer's own first body answer took {:.2} s)",
        warm.as_secs_f64()
    );
    let marker = format!("zzpeer{run}");
    let at = Instant::now();
    reader
        .publish(
            &Ctx::new(),
            WriteRequest::new(format!("/notes/peer-{run}.md"), format!("{marker}\n")),
        )
        .await
        .expect("published");
    loop {
        let (rows, _) = until_body(
            &writer,
            &CatalogQuery::new(marker.as_str()).mode(MatchMode::Body),
        )
        .await;
        if rows == 1 {
            break;
        }
    }
    println!(
        "write searchable on a peer (hinted) {:.1} ms after the commit was sent",
        at.elapsed().as_secs_f64() * 1e3
    );
    reader.close().await;
    writer.close().await;
}

/// Ends the run without waiting on the replicas' background work, removing the scratch
/// directory first: `process::exit` runs no destructors, and each run's indexes and copies
/// there take gigabytes.
fn exit_now(scratch: &tempfile::TempDir) -> ! {
    let _ = std::fs::remove_dir_all(scratch.path());
    std::process::exit(0)
}
