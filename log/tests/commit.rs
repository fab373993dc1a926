//! The group committer on the memory driver, with latency, holds and ambiguity injected by
//! the simulated store. Time is tokio's paused clock: latency is simulated, nothing sleeps.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::committers::*;
use common::*;
use futures::future::join_all;
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Fault, FaultRule, LatencyProfile, Op, Simulated};
use quire_log::build::Mutation;
use quire_log::commit::{CommitRequest, Committer, Outcome};
use quire_log::{DocPath, ErrorKind, Result, WorldState};

fn append(path: &str, expected: u64, body: &str) -> Mutation {
    Mutation::Append {
        path: path.into(),
        expected,
        body: Bytes::copy_from_slice(body.as_bytes()),
        metadata: Default::default(),
    }
}

fn doc_version(state: &WorldState, path: &str) -> Option<u64> {
    state.doc(&DocPath::parse(path).unwrap()).map(|d| d.current)
}

/// Holds slot creates on `test` and submits `mutation` to `c`: returns once its create is
/// held, with the hold (dropping it lets the create through) and the write's answer.
async fn first_write_held(
    test: &Simulated,
    c: &Committer,
    mutation: Mutation,
) -> (quire_blob::Hold, tokio::task::JoinHandle<Result<Outcome>>) {
    let hold = test.hold(Op::Create, "w/log/");
    let first = tokio::spawn({
        let c = c.clone();
        async move { submit(&c, mutation).await }
    });
    hold.wait_held(1).await;
    (hold, first)
}

/// Lets the two writes `later` submits queue behind the held first slot, releases it, and
/// returns the versions the two writes were given.
async fn versions_after_release(
    hold: quire_blob::Hold,
    first: tokio::task::JoinHandle<Result<Outcome>>,
    later: tokio::task::JoinHandle<(Result<Outcome>, Result<Outcome>)>,
) -> (u64, u64) {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    drop(hold);
    first.await.unwrap().unwrap();
    let (two, three) = later.await.unwrap();
    (two.unwrap().doc.version, three.unwrap().doc.version)
}

#[tokio::test(start_paused = true)]
async fn single_store_semantics() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let c = start(memory.clone(), WorldState::genesis(WORLD), 1, |_| {});
    let created = submit(&c, publish("/a.md", "line1")).await.unwrap();
    assert!(created.changed);
    assert_eq!((created.doc.version, created.sequence), (1, Some(2)));

    // Identical body and metadata: answered with the current version, nothing committed.
    let same = submit(&c, publish("/a.md", "line1")).await.unwrap();
    assert!(!same.changed);
    assert_eq!(same.doc.version, 1);
    assert_eq!(c.state().sequence(), 2);

    let appended = submit(&c, append("/a.md", 1, "line2")).await.unwrap();
    assert_eq!(appended.doc.version, 2);
    let stale = submit(&c, cas("/a.md", 1, "x")).await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::Conflict);
    assert_eq!(stale.current().unwrap().version, 2);
    let exists = submit(&c, cas("/a.md", 0, "x")).await.unwrap_err();
    assert_eq!(exists.kind(), ErrorKind::Conflict);

    let collision = submit(&c, publish("/a.md/b.md", "x")).await.unwrap_err();
    assert_eq!(collision.kind(), ErrorKind::PathCollision);
    submit(&c, publish("/dir/doc.md", "d")).await.unwrap();
    let onto_dir = submit(&c, publish("/dir", "x")).await.unwrap_err();
    assert_eq!(onto_dir.kind(), ErrorKind::PathCollision);

    let archived = submit(&c, archive("/a.md", true)).await.unwrap();
    assert!(archived.changed && archived.doc.archived && archived.doc.version == 2);
    assert!(!submit(&c, archive("/a.md", true)).await.unwrap().changed);
    assert_eq!(
        submit(&c, publish("/a.md", "new"))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Archived
    );
    submit(&c, archive("/a.md", false)).await.unwrap();
    assert_eq!(
        submit(&c, archive("/missing.md", true))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        submit(&c, publish("/../x.md", "x"))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    for i in 0..3 {
        submit(&c, publish("/r.md", &format!("v{i}")))
            .await
            .unwrap();
    }
    let pruned = submit(&c, publish_with("/r.md", "v3", meta(&[("retention", "2")])))
        .await
        .unwrap();
    assert_eq!(pruned.prune, Some((1, 2)));
    assert_eq!((pruned.doc.version, pruned.doc.first), (4, 3));

    // A large body travels as a blob; appending to it reads it back.
    let big = "x".repeat(20_000);
    submit(&c, publish("/big.md", &big)).await.unwrap();
    let fresh = start(memory.clone(), c.state(), 2, |_| {});
    let grown = submit(&fresh, append("/big.md", 1, "tail")).await.unwrap();
    assert_eq!(grown.doc.version, 2);

    // Replaying the log from genesis gives exactly the committer's state.
    let state = fresh.state();
    assert!(replayed(memory.as_ref()).await == state);
    state.check_indexes().unwrap();
}

#[tokio::test(start_paused = true)]
async fn quota_refuses_new_paths_only() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let c = start(memory, WorldState::genesis(WORLD), 1, |c| {
        c.max_documents = 2
    });
    submit(&c, publish("/a.md", "a")).await.unwrap();
    submit(&c, publish("/b.md", "b")).await.unwrap();
    assert_eq!(
        submit(&c, publish("/c.md", "c")).await.unwrap_err().kind(),
        ErrorKind::Quota
    );
    submit(&c, publish("/a.md", "a2")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn batch_sizes_grow_under_a_deep_queue() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let c = start(memory.clone(), WorldState::genesis(WORLD), 1, |c| {
        c.batch_max = 32
    });
    let writes = (0..60).map(|i| submit(&c, publish(&format!("/d/{i}.md"), "x")));
    for result in join_all(writes).await {
        result.unwrap();
    }
    assert_eq!(c.stats().batch_sizes, [16, 32, 12]);

    let c = start(memory, c.state(), 2, |_| {});
    let writes = (0..200).map(|i| submit(&c, publish(&format!("/e/{i}.md"), "x")));
    let results = join_all(writes).await;
    assert!(results.iter().all(Result::is_ok));
    // The first batch, sealed with two behind it, takes the first of them in.
    assert_eq!(c.stats().batch_sizes, [48, 64, 64, 24]);
    // Every member of a batch shares its slot: sequences are contiguous and unique.
    let mut sequences: Vec<u64> = results
        .iter()
        .map(|r| r.as_ref().unwrap().sequence.unwrap())
        .collect();
    sequences.sort_unstable();
    assert_eq!(sequences, (62..262).collect::<Vec<_>>());
}

/// Closed-loop writers answered by a slot come back a moment later (each thinks 0.05-1.2 ms,
/// as a client's round trip; a slot create takes 20 ms, a read 1). Sealing at once, the
/// writers that miss one slot ride the next one alone, and the store alternates between
/// slots of the many and slots of the few; waiting a moment after each win (`gather`) for as
/// many writers as it answered puts them back in one slot.
#[tokio::test(start_paused = true)]
async fn writers_a_slot_answered_ride_the_next_one() {
    async fn slots_for(gather: Duration) -> (u64, Vec<usize>) {
        let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
        let store = Arc::new(
            Simulated::new(memory, 7)
                .with_latency(Op::Create, LatencyProfile::Fixed(Duration::from_millis(20)))
                .with_latency(Op::Get, LatencyProfile::Fixed(Duration::from_millis(1))),
        );
        let c = start(store, WorldState::genesis(WORLD), 1, |c| c.gather = gather);
        let writers = (0..24u64).map(|w| {
            let c = c.clone();
            async move {
                for round in 0..20 {
                    // Simulated think time on the paused clock: the writer's own round trip.
                    tokio::time::sleep(Duration::from_micros(50 * (w + 1))).await;
                    submit(&c, publish(&format!("/w{w}/{round}.md"), "x"))
                        .await
                        .unwrap();
                }
            }
        });
        join_all(writers).await;
        let stats = c.stats();
        (stats.slots_won, stats.batch_sizes)
    }
    let (gathered, sizes) = slots_for(Duration::from_millis(2)).await;
    let (at_once, at_once_sizes) = slots_for(Duration::ZERO).await;
    // 480 writes. Sealing at once: slots of 20 and of the 4 that missed them, by turns.
    assert!(
        at_once >= 38,
        "{at_once} slots sealed at once: {at_once_sizes:?}"
    );
    assert!(at_once_sizes.iter().all(|&n| n < 24), "{at_once_sizes:?}");
    // Gathering: every writer rides one slot, and a quarter fewer slots carry the writes.
    assert!(gathered <= 32, "{gathered} slots gathering: {sizes:?}");
    assert!(sizes.contains(&24), "{sizes:?}");
}

#[tokio::test(start_paused = true)]
async fn ambiguous_creates_that_landed_are_wins() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let test = simulated(memory.clone());
    let slot_creates = test.calls(&[Op::Create], "w/log/");
    let blob_creates = test.calls(&[Op::Create], "w/blobs/");
    // Slots first.
    test.add_fault(FaultRule::new(Op::Create, "w/log/", Fault::AmbiguousAfterApply).first(2));
    let c = start(test.clone(), WorldState::genesis(WORLD), 1, |_| {});
    let a = submit(&c, publish("/a.md", "a")).await.unwrap();
    let b = submit(&c, publish("/b.md", "b")).await.unwrap();
    assert_eq!((a.sequence, b.sequence), (Some(2), Some(3)));
    // Each landed create was answered ambiguous, read back, and recognised: exactly one
    // attempt per slot, no duplicate writes, no lost race reported.
    assert_eq!(test.injected().ambiguous_after_apply, 2);
    assert_eq!(slot_creates.count(), 2);

    // Then a blob: a body over the inline limit is staged, its create lands and is
    // answered ambiguous, and the blob is read back rather than created again.
    test.add_fault(FaultRule::new(Op::Create, "w/blobs/", Fault::AmbiguousAfterApply).first(1));
    let big = "big\n".repeat(quire_log::slot::DEFAULT_INLINE_LIMIT);
    let written = submit(&c, publish("/big.md", &big)).await.unwrap();
    assert_eq!(written.sequence, Some(4));
    assert_eq!(test.injected().ambiguous_after_apply, 3);
    assert_eq!(blob_creates.count(), 1);
    assert_eq!(slot_creates.count(), 3);
    assert_eq!(c.stats().slots_lost, 0);
    let state = replayed(memory.as_ref()).await;
    assert_eq!(state.sequence(), 4);
    assert!(state == c.state());
    let doc = state.doc(&DocPath::parse("/big.md").unwrap()).unwrap();
    assert_eq!(doc.head.location, quire_log::Location::Blob);
    let bytes = quire_log::version::read_version(memory.as_ref(), PREFIX, &doc.head)
        .await
        .unwrap();
    let stored = quire_log::version::StoredVersion::decode(&bytes).unwrap();
    assert_eq!(stored.body, big);
}

#[tokio::test(start_paused = true)]
async fn expired_queued_requests_never_commit() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let test = simulated(memory.clone());
    let c = start(test.clone(), WorldState::genesis(WORLD), 1, |c| {
        c.pipeline = 1
    });
    let (hold, first) = first_write_held(&test, &c, publish("/first.md", "1")).await;
    let mut late = CommitRequest::new(publish("/late.md", "2"));
    late.deadline = Some(tokio::time::Instant::now() + Duration::from_millis(100));
    let queued = tokio::spawn({
        let c = c.clone();
        async move { c.submit(late).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(hold);
    assert_eq!(
        queued.await.unwrap().unwrap_err().kind(),
        ErrorKind::Canceled
    );
    first.await.unwrap().unwrap();
    submit(&c, publish("/after.md", "3")).await.unwrap();
    let state = replayed(memory.as_ref()).await;
    assert_eq!(doc_version(&state, "/late.md"), None);
    assert_eq!(doc_version(&state, "/after.md"), Some(1));
}

#[tokio::test(start_paused = true)]
async fn close_refuses_queued_and_later_writes() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let c = start(memory, WorldState::genesis(WORLD), 1, |_| {});
    submit(&c, publish("/a.md", "a")).await.unwrap();
    c.close().await;
    assert_eq!(
        submit(&c, publish("/b.md", "b")).await.unwrap_err().kind(),
        ErrorKind::Closed
    );
}

#[tokio::test(start_paused = true)]
async fn committed_hook_reports_sequences() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let (hook, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let c = start(memory, WorldState::genesis(WORLD), 1, move |c| {
        c.on_committed = Some(Arc::new(move |s| {
            let _ = hook.send(s);
        }));
    });
    for i in 0..3 {
        submit(&c, publish(&format!("/{i}.md"), "x")).await.unwrap();
        tokio::task::yield_now().await;
    }
    assert_eq!(next_sequences(&mut seen, 3).await, [2, 3, 4]);
}

/// The next `n` sequences a committed hook reported, in order (waits for them).
async fn next_sequences(
    hook: &mut tokio::sync::mpsc::UnboundedReceiver<u64>,
    n: usize,
) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(hook.recv().await.expect("the committer keeps its hook"));
    }
    out
}

/// Two stores race one path from the same base: exactly one write wins.
async fn race_two(
    first: Mutation,
    second: Mutation,
    base: &[Mutation],
) -> (Result<Outcome>, Result<Outcome>, WorldState) {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let setup = start(memory.clone(), WorldState::genesis(WORLD), 9, |_| {});
    for m in base {
        submit(&setup, m.clone()).await.unwrap();
    }
    let state = setup.state();
    let slow = simulated(memory.clone());
    let a = start(memory.clone(), state.clone(), 1, |_| {});
    let b = start(slow.clone(), state, 2, |_| {});
    let hold = slow.hold(Op::Create, "w/log/");
    let b_write = tokio::spawn({
        let b = b.clone();
        async move { submit(&b, second).await }
    });
    hold.wait_held(1).await;
    // B's slot is built and its create is on its way; A takes the name first.
    let a_result = submit(&a, first).await;
    drop(hold);
    let b_result = b_write.await.unwrap();
    (a_result, b_result, replayed(memory.as_ref()).await)
}

#[tokio::test(start_paused = true)]
async fn same_path_expected_version_race_has_one_winner() {
    let (a, b, state) = race_two(
        cas("/a.md", 1, "from a"),
        cas("/a.md", 1, "from b"),
        &[publish("/a.md", "v1")],
    )
    .await;
    assert!(a.is_ok());
    assert_eq!(b.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(doc_version(&state, "/a.md"), Some(2));
}

#[tokio::test(start_paused = true)]
async fn blind_writers_racing_one_path_never_both_succeed() {
    let (a, b, state) = race_two(
        publish("/a.md", "from a"),
        publish("/a.md", "from b"),
        &[publish("/a.md", "v1")],
    )
    .await;
    assert!(a.is_ok());
    let err = b.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.current().unwrap().version, 2);
    assert_eq!(doc_version(&state, "/a.md"), Some(2));
    // Blind creates of a new path race the same way.
    let (a, b, _) = race_two(publish("/n.md", "a"), publish("/n.md", "b"), &[]).await;
    assert!(a.is_ok());
    assert_eq!(b.unwrap_err().kind(), ErrorKind::Conflict);
}

#[tokio::test(start_paused = true)]
async fn document_versus_child_race_has_one_winner() {
    let (a, b, state) = race_two(publish("/a", "doc"), publish("/a/b", "child"), &[]).await;
    assert!(a.is_ok());
    assert_eq!(b.unwrap_err().kind(), ErrorKind::PathCollision);
    assert_eq!(doc_version(&state, "/a"), Some(1));
    assert_eq!(doc_version(&state, "/a/b"), None);
    let (a, b, _) = race_two(publish("/a/b", "child"), publish("/a", "doc"), &[]).await;
    assert!(a.is_ok());
    assert_eq!(b.unwrap_err().kind(), ErrorKind::PathCollision);
}

#[tokio::test(start_paused = true)]
async fn a_peer_slot_rebuilds_only_the_members_it_touched() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let setup = start(memory.clone(), WorldState::genesis(WORLD), 9, |_| {});
    submit(&setup, publish("/x.md", "x1")).await.unwrap();
    let state = setup.state();
    let slow = simulated(memory.clone());
    let (hook, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let a = start(slow.clone(), state.clone(), 1, move |c| {
        c.on_committed = Some(Arc::new(move |s| {
            let _ = hook.send(s);
        }));
    });
    let peer = start(memory.clone(), state, 2, |_| {});
    let hold = slow.hold(Op::Create, "w/log/");
    let blob_creates = slow.calls(&[Op::Create], "w/blobs/");
    // Five large writes in one batch: each stages a blob before the slot create.
    let big = |tag: &str| format!("{tag}\n{}", "y".repeat(10_000));
    let batch = vec![
        cas("/p1.md", 0, &big("p1")),
        cas("/x.md", 1, &big("x2")),
        cas("/p2.md", 0, &big("p2")),
        cas("/p3.md", 0, &big("p3")),
        cas("/d/p4.md", 0, &big("p4")),
    ];
    let writes = tokio::spawn({
        let a = a.clone();
        async move { join_all(batch.into_iter().map(|m| submit(&a, m))).await }
    });
    hold.wait_held(1).await;
    assert_eq!(blob_creates.count(), 5);
    // The peer takes the next name with a conflicting write to /x.md.
    submit(&peer, cas("/x.md", 1, "peer")).await.unwrap();
    drop(hold);
    let results = writes.await.unwrap();
    assert_eq!(results[1].as_ref().unwrap_err().kind(), ErrorKind::Conflict);
    for i in [0, 2, 3, 4] {
        assert_eq!(
            results[i].as_ref().unwrap().sequence,
            Some(4 + [0, 0, 1, 2, 3][i])
        );
    }
    let stats = a.stats();
    assert_eq!((stats.slots_lost, stats.slots_won), (1, 1));
    assert_eq!((stats.members_kept, stats.members_rebuilt), (4, 1));
    // Nothing was staged again.
    assert_eq!(blob_creates.count(), 5);
    let state = replayed(memory.as_ref()).await;
    assert!(state == a.state());
    assert_eq!(state.sequence(), 7);
    // The hook reported the slot that beat this store, then its own.
    assert_eq!(next_sequences(&mut seen, 2).await, [3, 7]);
    // A refresh that installs a peer's slot (8) is not this committer's news: the next
    // sequence the hook reports is this store's own next commit (9).
    submit(&peer, publish("/later.md", "l")).await.unwrap();
    a.refresh().await.unwrap();
    assert_eq!(a.state().sequence(), 8);
    submit(&a, publish("/own.md", "o")).await.unwrap();
    assert_eq!(next_sequences(&mut seen, 1).await, [9]);
}

/// `stores` committers over one bucket, `writers` writers each: every acknowledged write is
/// in the log, versions of the shared documents are acknowledged exactly once each, and
/// every store converges to the replayed state.
async fn stores_share_one_log(stores: u8, writers: usize, rounds: usize) {
    stores_share_one_log_with(stores, writers, rounds, 3..12, true).await;
}

async fn stores_share_one_log_with(
    stores: u8,
    writers: usize,
    rounds: usize,
    latency: std::ops::Range<u64>,
    expect_races: bool,
) {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let committers: Vec<(Committer, Arc<Simulated>)> = (0..stores)
        .map(|i| {
            let wrapped = jittered(memory.clone(), latency.clone(), u64::from(i) + 100);
            (
                start(wrapped.clone(), WorldState::genesis(WORLD), i + 1, |_| {}),
                wrapped,
            )
        })
        .collect();
    let mut tasks = Vec::new();
    for (s, (c, _)) in committers.iter().enumerate() {
        for w in 0..writers {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let mut acked: Vec<(String, u64, String)> = Vec::new();
                for r in 0..rounds {
                    let own = format!("/s{s}/w{w}/r{r}.md");
                    let body = format!("own {s} {w} {r}");
                    let out = submit(&c, publish(&own, &body)).await.unwrap();
                    acked.push((own, out.doc.version, body));
                    let body = format!("blind {s} {w} {r}");
                    if let Ok(out) = submit(&c, publish("/shared/blind.md", &body)).await {
                        acked.push(("/shared/blind.md".into(), out.doc.version, body));
                    }
                    let current = doc_version(&c.state(), "/shared/cas.md").unwrap_or(0);
                    let body = format!("cas {s} {w} {r}");
                    match submit(&c, cas("/shared/cas.md", current, &body)).await {
                        Ok(out) => acked.push(("/shared/cas.md".into(), out.doc.version, body)),
                        Err(e) => assert_eq!(e.kind(), ErrorKind::Conflict, "{e}"),
                    }
                }
                acked
            }));
        }
    }
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.unwrap());
    }
    let state = replayed(memory.as_ref()).await;
    for (c, _) in &committers {
        let refreshed = c.refresh().await.unwrap();
        assert!(refreshed == state, "a store did not converge");
    }
    // Every acknowledged write reads back with its body.
    let mut versions: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (path, version, body) in &acked {
        let doc = state.doc(&DocPath::parse(path).unwrap()).unwrap();
        let record = doc.recent_version(*version).unwrap();
        let bytes = quire_log::version::read_version(memory.as_ref(), PREFIX, record)
            .await
            .unwrap();
        let stored = quire_log::version::StoredVersion::decode(&bytes).unwrap();
        assert_eq!(&stored.body, body);
        versions.entry(path.clone()).or_default().push(*version);
    }
    for shared in ["/shared/blind.md", "/shared/cas.md"] {
        let mut got = versions.remove(shared).unwrap_or_default();
        got.sort_unstable();
        let current = doc_version(&state, shared).unwrap();
        assert_eq!(got, (1..=current).collect::<Vec<_>>(), "{shared}");
    }
    let own = versions.values().map(Vec::len).sum::<usize>();
    assert_eq!(own, stores as usize * writers * rounds);
    if expect_races {
        // The races and batching were really exercised.
        let lost: u64 = committers.iter().map(|(c, _)| c.stats().slots_lost).sum();
        assert!(lost > 0, "no race happened");
        assert!(
            committers
                .iter()
                .any(|(c, _)| c.stats().batch_sizes.iter().any(|s| *s > 1))
        );
    }
    state.check_indexes().unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_stores_share_one_log() {
    stores_share_one_log(2, 8, 5).await;
}

#[tokio::test(start_paused = true)]
async fn three_stores_share_one_log() {
    stores_share_one_log(3, 8, 4).await;
}

/// The same on real threads and the real clock (short latencies), for parallelism the
/// paused single-threaded runs cannot show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_share_one_log_on_threads() {
    stores_share_one_log_with(3, 4, 3, 0..2, false).await;
}

#[tokio::test(start_paused = true)]
async fn contending_stores_take_turns() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let end = tokio::time::Instant::now() + Duration::from_millis(1500);
    let mut tasks = Vec::new();
    let mut committers: Vec<Committer> = Vec::new();
    // Peer hints: each store's committed hook tells the other store (as a server's peer
    // channel would).
    let peers: Arc<std::sync::Mutex<Vec<Committer>>> = Arc::default();
    for s in 0..2u8 {
        let wrapped = jittered(memory.clone(), 5..6, u64::from(s));
        let hint_to = peers.clone();
        let c = start(wrapped, WorldState::genesis(WORLD), s + 1, move |c| {
            c.on_committed = Some(Arc::new(move |sequence| {
                if let Some(other) = hint_to.lock().unwrap().get(1 - s as usize) {
                    other.follow(sequence);
                }
            }));
        });
        committers.push(c.clone());
        for w in 0..8 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0u64;
                let mut i = 0;
                while tokio::time::Instant::now() < end {
                    i += 1;
                    if submit(&c, publish(&format!("/s{s}/w{w}/{i}.md"), "x"))
                        .await
                        .is_ok()
                    {
                        done += 1;
                    }
                }
                (s, done)
            }));
        }
    }
    *peers.lock().unwrap() = committers.clone();
    let mut per_store: HashMap<u8, u64> = HashMap::new();
    for task in tasks {
        let (s, done) = task.await.unwrap();
        *per_store.entry(s).or_default() += done;
    }
    let total: u64 = per_store.values().sum();
    let least = *per_store.values().min().unwrap();
    assert!(total > 0);
    assert!(least * 3 >= total, "unfair split {per_store:?}");
    assert!(
        committers.iter().all(|c| c.stats().handoffs > 0),
        "no handoff"
    );
}

#[tokio::test(start_paused = true)]
async fn unapplied_failures_are_retried_and_hard_failures_answered() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let test = simulated(memory.clone());
    let slot_creates = test.calls(&[Op::Create], "w/log/");
    let c = start(test.clone(), WorldState::genesis(WORLD), 1, |_| {});
    // Unavailable before the create applied: read back (absent), retry the identical create.
    test.add_fault(FaultRule::new(Op::Create, "w/log/", Fault::Unavailable).first(2));
    let a = submit(&c, publish("/a.md", "a")).await.unwrap();
    assert_eq!(a.sequence, Some(2));
    assert_eq!(slot_creates.count(), 3);
    // Blob creates answered ambiguous after landing are retried into "exists": fine.
    test.add_fault(FaultRule::new(Op::Create, "w/blobs/", Fault::AmbiguousAfterApply).first(1));
    let big = "z".repeat(9000);
    submit(&c, publish("/big.md", &big)).await.unwrap();
    // A failure that is not retryable answers the batch's writers with it; members judged on
    // those writes are judged again; later writes go on.
    test.add_fault(
        FaultRule::new(Op::Create, "w/log/", Fault::AmbiguousBeforeApply)
            .reporting(quire_blob::ErrorKind::Integrity)
            .first(1),
    );
    let (err, under) = tokio::join!(
        submit(&c, publish("/b.md", "b")),
        submit(&c, publish("/b.md/under.md", "u")),
    );
    assert_eq!(err.unwrap_err().kind(), ErrorKind::Integrity);
    assert_eq!(under.unwrap().sequence, Some(4));
    let after = submit(&c, publish("/c.md", "c")).await.unwrap();
    assert_eq!(after.sequence, Some(5));
    let state = replayed(memory.as_ref()).await;
    assert!(state == c.state());
    assert_eq!(doc_version(&state, "/b.md"), None);
}

#[derive(Debug)]
struct NeedsTag(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl quire_log::commit::CommitCheck for NeedsTag {
    async fn check(
        &self,
        state: &WorldState,
        write: &quire_log::build::PreparedWrite,
        _pending: &quire_log::commit::PendingVersions,
    ) -> Result<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let policy = state.doc(&DocPath::parse("/policy.md").unwrap());
        let required = policy.is_some_and(|p| p.catalog.tags().any(|t| t == "strict"));
        let tagged = write
            .content
            .as_ref()
            .is_some_and(|(_, m)| m.contains_key("tags"));
        if required && !tagged {
            return Err(quire_log::Error::new(
                quire_log::Op::Publish,
                write.path.as_str(),
                ErrorKind::Rejected,
                "publish policy needs tags",
            ));
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn preconditions_run_after_store_checks_and_again_when_the_policy_changes() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let setup = start(memory.clone(), WorldState::genesis(WORLD), 9, |_| {});
    submit(&setup, publish("/policy.md", "lenient"))
        .await
        .unwrap();
    submit(&setup, publish("/a.md", "a")).await.unwrap();
    let state = setup.state();
    let slow = simulated(memory.clone());
    let policy = Some(DocPath::parse("/policy.md").unwrap());
    let a = start(slow.clone(), state.clone(), 1, |c| {
        c.policy_path = policy.clone()
    });
    let peer = start(memory.clone(), state, 2, |_| {});
    let check = Arc::new(NeedsTag(Default::default()));
    let with_check = |m: Mutation| CommitRequest {
        mutation: m,
        deadline: None,
        precondition: Some(check.clone()),
    };
    // A no-op never runs the precondition.
    assert!(
        !a.submit(with_check(publish("/a.md", "a")))
            .await
            .unwrap()
            .changed
    );
    assert_eq!(check.0.load(Ordering::SeqCst), 0);
    // An untagged write passes under the lenient policy, but the peer makes the policy strict
    // first: the rebuilt member runs the precondition again and is refused.
    let hold = slow.hold(Op::Create, "w/log/");
    let write = tokio::spawn({
        let a = a.clone();
        let request = with_check(publish("/b.md", "b"));
        async move { a.submit(request).await }
    });
    hold.wait_held(1).await;
    assert_eq!(check.0.load(Ordering::SeqCst), 1);
    submit(
        &peer,
        publish_with("/policy.md", "strict", meta(&[("tags", "strict")])),
    )
    .await
    .unwrap();
    drop(hold);
    let err = write.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected);
    assert_eq!(check.0.load(Ordering::SeqCst), 2);
    assert_eq!(a.stats().members_rebuilt, 1);
}

#[tokio::test(start_paused = true)]
async fn queued_appends_warm_their_document_once() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let writer = start(memory.clone(), WorldState::genesis(WORLD), 9, |_| {});
    submit(&writer, publish("/log.md", "start")).await.unwrap();
    submit(&writer, publish("/other.md", "x")).await.unwrap();
    let metered = quire_blob::Metered::new(memory.clone());
    let reader = start(Arc::new(metered.clone()), writer.state(), 1, |_| {});
    let before = metered.reading();
    let (a, b) = tokio::join!(
        submit(&reader, append("/log.md", 1, "one")),
        submit(&reader, append("/log.md", 2, "two")),
    );
    assert_eq!((a.unwrap().doc.version, b.unwrap().doc.version), (2, 3));
    // One read of the base version, and the one tip probe an idle store takes.
    let reads = metered.reading().since(&before);
    assert_eq!(
        reads.requests(quire_blob::Op::GetRange) + reads.requests(quire_blob::Op::Get),
        2
    );
    let state = replayed(memory.as_ref()).await;
    let doc = state.doc(&DocPath::parse("/log.md").unwrap()).unwrap();
    let bytes = quire_log::version::read_version(memory.as_ref(), PREFIX, &doc.head)
        .await
        .unwrap();
    let stored = quire_log::version::StoredVersion::decode(&bytes).unwrap();
    assert_eq!(stored.body, "start\none\ntwo");
}

#[tokio::test(start_paused = true)]
async fn appends_chain_on_versions_still_in_the_pipeline() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let test = simulated(memory.clone());
    let metered = quire_blob::Metered::new(test.clone());
    let c = start(
        Arc::new(metered.clone()),
        WorldState::genesis(WORLD),
        1,
        |_| {},
    );
    let (hold, first) = first_write_held(&test, &c, publish("/a.md", "one")).await;
    // While slot 2 is held, two appends build on its unconfirmed version and on each other.
    let appends = tokio::spawn({
        let c = c.clone();
        async move {
            let big = "x".repeat(10_000);
            tokio::join!(
                submit(&c, append("/a.md", 1, "two")),
                submit(&c, append("/a.md", 2, &big)),
            )
        }
    });
    assert_eq!(versions_after_release(hold, first, appends).await, (2, 3));
    // No version read: only the tip probe of the idle store taking the first write.
    let reads = metered.reading();
    assert_eq!(
        reads.requests(quire_blob::Op::Get) + reads.requests(quire_blob::Op::GetRange),
        1
    );
    let state = replayed(memory.as_ref()).await;
    let doc = state.doc(&DocPath::parse("/a.md").unwrap()).unwrap();
    let bytes = quire_log::version::read_version(memory.as_ref(), PREFIX, &doc.head)
        .await
        .unwrap();
    let body = quire_log::version::StoredVersion::decode(&bytes)
        .unwrap()
        .body;
    assert!(body.starts_with("one\ntwo\nxxx"));
}

/// Reads the current version of the document it judges from what the committer holds in
/// memory, recording the bodies it found.
#[derive(Debug, Default)]
struct ReadsCurrent(std::sync::Mutex<Vec<Option<String>>>);

#[async_trait::async_trait]
impl quire_log::commit::CommitCheck for ReadsCurrent {
    async fn check(
        &self,
        state: &WorldState,
        write: &quire_log::build::PreparedWrite,
        pending: &quire_log::commit::PendingVersions,
    ) -> Result<()> {
        let body = state.doc(&write.path).and_then(|doc| {
            let bytes = pending.get(&doc.head.hash)?;
            Some(
                quire_log::version::StoredVersion::decode(&bytes)
                    .unwrap()
                    .body,
            )
        });
        self.0.lock().unwrap().push(body);
        Ok(())
    }
}

/// `mutation` with `check` as its precondition.
fn checked(mutation: Mutation, check: &Arc<ReadsCurrent>) -> CommitRequest {
    CommitRequest {
        mutation,
        deadline: None,
        precondition: Some(check.clone()),
    }
}

#[tokio::test(start_paused = true)]
async fn a_check_reads_versions_built_in_the_pipeline_and_those_just_confirmed() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let test = simulated(memory.clone());
    let c = start(test.clone(), WorldState::genesis(WORLD), 1, |_| {});
    let check = Arc::new(ReadsCurrent::default());
    let (hold, first) = first_write_held(&test, &c, publish("/a.md", "one")).await;
    // While the slot holding "one" is held, a write judged on it reads it from the pipeline,
    // and the write after it reads the version just built beside it.
    let later = tokio::spawn({
        let c = c.clone();
        let (two, three) = (
            checked(publish("/a.md", "two"), &check),
            checked(publish("/a.md", "three"), &check),
        );
        async move { tokio::join!(c.submit(two), c.submit(three)) }
    });
    assert_eq!(versions_after_release(hold, first, later).await, (2, 3));
    // Once confirmed, the newest version is read from the version cache.
    submit(&c, publish("/a.md", "four")).await.unwrap();
    let _ = c
        .submit(checked(publish("/a.md", "five"), &check))
        .await
        .unwrap();
    let seen = check.0.lock().unwrap().clone();
    let bodies: Vec<Option<&str>> = seen.iter().map(|b| b.as_deref()).collect();
    assert_eq!(bodies, [Some("one"), Some("two"), Some("four")]);
}

/// Two stores racing for one document for many rounds: every lost race rebuilds members
/// whose versions never commit, and the versions a committer keeps for its checks stay
/// bounded by its pipeline instead of piling up.
#[tokio::test(start_paused = true)]
async fn versions_of_rebuilt_members_do_not_pile_up_under_contention() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let writers = 8;
    let committers: Vec<Committer> = (0..2u8)
        .map(|i| {
            let wrapped = jittered(memory.clone(), 3..12, u64::from(i) + 7);
            start(wrapped, WorldState::genesis(WORLD), i + 1, |_| {})
        })
        .collect();
    let check = Arc::new(ReadsCurrent::default());
    let mut tasks = Vec::new();
    for (s, c) in committers.iter().enumerate() {
        for w in 0..writers {
            let (c, check) = (c.clone(), check.clone());
            tasks.push(tokio::spawn(async move {
                for r in 0..60 {
                    let body = format!("{s} {w} {r}");
                    let _ = c
                        .submit(checked(publish("/shared.md", &body), &check))
                        .await;
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for c in &committers {
        let stats = c.stats();
        assert!(stats.members_rebuilt > 100, "{stats:?}");
        // At most both pipeline batches of every writer twice over, and the slack.
        assert!(
            stats.pipeline_versions_most <= 4 * writers + 64,
            "{stats:?}"
        );
    }
}
