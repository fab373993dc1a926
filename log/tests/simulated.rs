//! The committer on the shared `Simulated` bucket: real-GCS latencies, lost responses,
//! unavailability and throttling, holds to order races. Time is tokio's paused clock.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::committers::*;
use common::*;
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, Fault, FaultRule, Op, Simulated};
use quire_log::commit::{Committer, CommitterConfig};
use quire_log::{DocPath, ErrorKind, ManualClock, StoreId, Timestamp, WorldState};

#[tokio::test(start_paused = true)]
async fn a_create_whose_response_was_lost_is_a_win() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let sim = Simulated::real_gcs(memory.clone(), 1);
    sim.add_fault(FaultRule::new(Op::Create, "w/log/", Fault::AmbiguousAfterApply).first(3));
    let c = start(Arc::new(sim.clone()), WorldState::genesis(WORLD), 1, |_| {});
    for i in 0..3 {
        let out = submit(&c, publish(&format!("/{i}.md"), "x")).await.unwrap();
        assert_eq!(out.sequence, Some(2 + i));
    }
    assert_eq!(sim.injected().get(Fault::AmbiguousAfterApply), 3);
    assert_eq!(c.stats().slots_lost, 0);
    assert!(replayed(memory.as_ref()).await == c.state());
}

#[tokio::test(start_paused = true)]
async fn a_held_create_loses_to_the_peer_and_conflicts() {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let setup = start(memory.clone(), WorldState::genesis(WORLD), 9, |_| {});
    submit(&setup, publish("/a.md", "v1")).await.unwrap();
    let slow = Simulated::real_gcs(memory.clone(), 2);
    let fast = Simulated::real_gcs(memory.clone(), 3);
    let a = start(Arc::new(fast), setup.state(), 1, |_| {});
    let b = start(Arc::new(slow.clone()), setup.state(), 2, |_| {});
    let hold = slow.hold(Op::Create, "w/log/");
    let b_write = tokio::spawn({
        let b = b.clone();
        async move { submit(&b, cas("/a.md", 1, "from b")).await }
    });
    hold.wait_held(1).await;
    submit(&a, cas("/a.md", 1, "from a")).await.unwrap();
    hold.release();
    let err = b_write.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.current().unwrap().version, 2);
}

/// Two and three stores, each on its own simulated link to one bucket, with lost responses,
/// unavailability and throttling on creates and reads: every acknowledged write is in the
/// log exactly once and every store converges.
async fn faulty_stores_lose_nothing(stores: u8) {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let mut links = Vec::new();
    let mut committers = Vec::new();
    for s in 0..stores {
        let sim = Simulated::real_gcs(memory.clone(), 100 + u64::from(s));
        for prefix in ["w/log/", "w/blobs/"] {
            sim.add_fault(
                FaultRule::new(Op::Create, prefix, Fault::AmbiguousAfterApply)
                    .with_probability(0.1),
            );
            sim.add_fault(
                FaultRule::new(Op::Create, prefix, Fault::AmbiguousBeforeApply)
                    .with_probability(0.05),
            );
            sim.add_fault(
                FaultRule::new(Op::Create, prefix, Fault::Throttled).with_probability(0.05),
            );
        }
        sim.add_fault(FaultRule::new(Op::Get, "w/log/", Fault::Unavailable).with_probability(0.05));
        committers.push(start(
            Arc::new(sim.clone()),
            WorldState::genesis(WORLD),
            s + 1,
            |_| {},
        ));
        links.push(sim);
    }
    let mut tasks = Vec::new();
    for (s, c) in committers.iter().enumerate() {
        for w in 0..8 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                for r in 0..4 {
                    // Every third write is large enough to travel as a blob.
                    let pad = if r % 3 == 0 {
                        "b".repeat(9000)
                    } else {
                        String::new()
                    };
                    let own = format!("/s{s}/w{w}/{r}.md");
                    let body = format!("own {s} {w} {r}{pad}");
                    let out = submit(&c, publish(&own, &body)).await.unwrap();
                    acked.push((own, out.doc.version, body));
                    let body = format!("shared {s} {w} {r}");
                    if let Ok(out) = submit(&c, publish("/shared.md", &body)).await {
                        acked.push(("/shared.md".to_owned(), out.doc.version, body));
                    }
                }
                acked
            }));
        }
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    let state = replayed(memory.as_ref()).await;
    let mut shared = Vec::new();
    for (path, version, body) in &acked {
        let doc = state.doc(&DocPath::parse(path).unwrap()).unwrap();
        let record = doc.recent_version(*version).unwrap();
        let bytes = quire_log::version::read_version(memory.as_ref(), PREFIX, record)
            .await
            .unwrap();
        assert_eq!(
            &quire_log::version::StoredVersion::decode(&bytes)
                .unwrap()
                .body,
            body
        );
        if path == "/shared.md" {
            shared.push(*version);
        }
    }
    shared.sort_unstable();
    let current = state
        .doc(&DocPath::parse("/shared.md").unwrap())
        .unwrap()
        .current;
    assert_eq!(shared, (1..=current).collect::<Vec<_>>());
    let own: BTreeMap<&str, u64> = acked
        .iter()
        .filter(|a| a.0 != "/shared.md")
        .map(|a| (a.0.as_str(), a.1))
        .collect();
    assert_eq!(own.len(), stores as usize * 8 * 4);
    for c in &committers {
        let mut refreshed = c.refresh().await;
        while let Err(e) = &refreshed {
            assert_eq!(e.kind(), ErrorKind::Storage, "{e}");
            refreshed = c.refresh().await;
        }
        assert!(refreshed.unwrap() == state);
    }
    let injected: u64 = links.iter().map(|l| l.injected().total()).sum();
    assert!(injected > 0);
    state.check_indexes().unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_faulty_stores_lose_nothing() {
    faulty_stores_lose_nothing(2).await;
}

#[tokio::test(start_paused = true)]
async fn three_faulty_stores_lose_nothing() {
    faulty_stores_lose_nothing(3).await;
}

/// The hook that hints every committer in `peers` but store `s` of each commit.
fn hints_to_the_others(
    peers: &Arc<std::sync::Mutex<Vec<Committer>>>,
    s: u8,
) -> quire_log::commit::CommittedHook {
    let peers = peers.clone();
    Arc::new(move |sequence| {
        for (i, other) in peers.lock().unwrap().iter().enumerate() {
            if i != usize::from(s) {
                other.follow(sequence);
            }
        }
    })
}

/// `stores` stores on real-GCS links, with or without peer hints wired between them, each
/// kept busy by closed-loop writers for `seconds`: the commits each store made (nothing is
/// lost: the log holds exactly their sum).
async fn contending_stores_commits(stores: u8, hints: bool, seconds: u64) -> Vec<u64> {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let end = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let peers: Arc<std::sync::Mutex<Vec<Committer>>> = Arc::default();
    let mut committers = Vec::new();
    let mut tasks = Vec::new();
    for s in 0..stores {
        let hook = hints_to_the_others(&peers, s);
        let config = CommitterConfig {
            prefix: PREFIX.into(),
            store: StoreId([s + 1; 16]),
            seed: u64::from(s),
            on_committed: hints.then_some(hook),
            ..CommitterConfig::default()
        };
        let sim = Simulated::real_gcs(memory.clone(), 40 + u64::from(s));
        let c = Committer::start(
            Arc::new(sim),
            WorldState::genesis(WORLD),
            Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
            config,
        );
        committers.push(c.clone());
        for w in 0..96 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0u64;
                let mut i = 0;
                while tokio::time::Instant::now() < end {
                    i += 1;
                    submit(&c, publish(&format!("/s{s}/w{w}/{i}.md"), "x"))
                        .await
                        .unwrap();
                    done += 1;
                }
                (usize::from(s), done)
            }));
        }
    }
    *peers.lock().unwrap() = committers;
    let mut done = vec![0u64; usize::from(stores)];
    for task in tasks {
        let (s, d) = task.await.unwrap();
        done[s] += d;
    }
    peers.lock().unwrap().clear();
    let total: u64 = done.iter().sum();
    assert!(total > 0);
    let state = replayed(memory.as_ref()).await;
    assert_eq!(
        state.sequence(),
        WorldState::genesis(WORLD).sequence() + total
    );
    done
}

/// Every store's share of the commits is at least `floor`. The floors sit below the
/// benchmark's targets (0.4 / 0.25 with hints, 0.15 without): a run's order of events is not
/// fully fixed (hash-map order), and these guard against starvation (a starved store gets
/// about 0.03), not the last points of a share.
fn assert_shares(done: &[u64], floor: f64) {
    let total: u64 = done.iter().sum();
    assert!(
        done.iter().all(|d| *d as f64 >= floor * total as f64),
        "a store below {floor} of the commits: {done:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn two_hinted_stores_on_real_gcs_links_share_fairly() {
    assert_shares(&contending_stores_commits(2, true, 4).await, 1.0 / 3.0);
}

#[tokio::test(start_paused = true)]
async fn three_hinted_stores_on_real_gcs_links_share_fairly() {
    assert_shares(&contending_stores_commits(3, true, 4).await, 0.2);
}

/// Without hints a store learns of its peers only from their slots in the log; none starves.
#[tokio::test(start_paused = true)]
async fn two_stores_without_hints_neither_starves() {
    assert_shares(&contending_stores_commits(2, false, 4).await, 0.1);
}

#[tokio::test(start_paused = true)]
async fn three_stores_without_hints_none_starves() {
    assert_shares(&contending_stores_commits(3, false, 4).await, 0.1);
}

/// `stores` stores on real-GCS links with peer hints, offered 250 writes/s in total (open
/// loop, round-robin) for `seconds`: the slots they won and lost, summed, and every write's
/// acknowledge latency in simulated time, sorted.
async fn hinted_stores_at_250_per_second(
    stores: u8,
    seconds: u64,
) -> (u64, u64, Vec<std::time::Duration>) {
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let peers: Arc<std::sync::Mutex<Vec<Committer>>> = Arc::default();
    let mut committers = Vec::new();
    for s in 0..stores {
        let hook = hints_to_the_others(&peers, s);
        let config = CommitterConfig {
            prefix: PREFIX.into(),
            store: StoreId([s + 1; 16]),
            seed: u64::from(s),
            on_committed: Some(hook),
            ..CommitterConfig::default()
        };
        committers.push(Committer::start(
            Arc::new(Simulated::real_gcs(memory.clone(), 70 + u64::from(s))),
            WorldState::genesis(WORLD),
            Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
            config,
        ));
    }
    *peers.lock().unwrap() = committers.clone();
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..250 * seconds {
        let c = committers[(i % u64::from(stores)) as usize].clone();
        tasks.push(tokio::spawn(async move {
            let offered = start + std::time::Duration::from_millis(i * 4);
            tokio::time::sleep_until(offered).await;
            submit(&c, publish(&format!("/open/{i}.md"), "x"))
                .await
                .unwrap();
            offered.elapsed()
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.push(task.await.unwrap());
    }
    latencies.sort_unstable();
    peers.lock().unwrap().clear();
    let (won, lost) = committers.iter().fold((0, 0), |(won, lost), c| {
        let counters = c.counters();
        (won + counters.slots_won, lost + counters.slots_lost)
    });
    (won, lost, latencies)
}

/// Hinted stores that both have writes take turns: each holds after its wins until the
/// other's slot shows, so they seldom race for a name (racing, about one create in three
/// was lost).
#[tokio::test(start_paused = true)]
async fn hinted_stores_with_steady_writes_take_turns_instead_of_racing() {
    let (won, lost, _) = hinted_stores_at_250_per_second(2, 8).await;
    assert!(won > 0);
    assert!(lost * 10 <= won, "{lost} slot races lost against {won} won");
}

/// Three hinted stores take the names in a rotation: each name goes to the store after
/// the one that wrote the slot before it, and the others hold, so they seldom race (when
/// the two that did not write the last slot both went for the next name, about one create
/// in two was lost).
#[tokio::test(start_paused = true)]
async fn three_hinted_stores_take_names_in_rotation() {
    let (won, lost, _) = hinted_stores_at_250_per_second(3, 8).await;
    assert!(won > 0);
    assert!(lost * 10 <= won, "{lost} slot races lost against {won} won");
}

/// The store whose turn is next reads the name as the owner's create lands instead of
/// after the owner's hint, so a hand-off costs about a create, not a create and a read: two
/// hinted stores at 250 writes/s make more than 17 slots per simulated second (reading
/// after each hint, about 14) and answer 99% of writes within 200 ms (reading after each
/// hint, about 220 ms).
#[tokio::test(start_paused = true)]
async fn the_next_store_peeks_at_the_owners_slot_as_it_lands() {
    let seconds = 8;
    let (won, _, latencies) = hinted_stores_at_250_per_second(2, seconds).await;
    assert!(won > 17 * seconds, "{won} slots in {seconds} s");
    let p99 = latencies[latencies.len() * 99 / 100];
    assert!(p99 <= std::time::Duration::from_millis(200), "p99 {p99:?}");
}

/// Writes that overflow the batch waiting behind a slot create (its limit is 16 at first)
/// ride the next slot with it instead of waiting for a slot of their own: 41 writes, one
/// alone in the first slot and 40 arriving during its create, take two slots (without
/// the batch about to be sealed taking in those behind it, four: 1, 16, 16 and 8).
#[tokio::test(start_paused = true)]
async fn writes_overflowing_a_waiting_batch_ride_its_slot() {
    use quire_blob::LatencyProfile;
    let memory: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    let sim = Simulated::new(memory.clone(), 1).with_latency(
        Op::Create,
        LatencyProfile::Fixed(std::time::Duration::from_millis(40)),
    );
    let c = start(Arc::new(sim), WorldState::genesis(WORLD), 1, |_| {});
    let first = tokio::spawn({
        let c = c.clone();
        async move { submit(&c, publish("/first.md", "x")).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    let rest: Vec<_> = (0..40)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { submit(&c, publish(&format!("/{i}.md"), "x")).await })
        })
        .collect();
    first.await.unwrap().unwrap();
    for w in rest {
        w.await.unwrap().unwrap();
    }
    let stats = c.stats();
    assert_eq!(stats.batch_sizes, [1, 40]);
    assert_eq!(stats.slots_won, 2);
    assert!(stats.batches_absorbed > 0);
    assert!(replayed(memory.as_ref()).await == c.state());
}
