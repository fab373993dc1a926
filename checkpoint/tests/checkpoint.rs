//! Checkpoints against replay: cold start equals the live state, racing and crashed
//! compactors, history blocks across pruning, archive state, and the objects one change
//! costs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use quire_blob::{BlobStore, Fault, FaultRule, Metered, Op as BlobOp, Simulated};
use quire_checkpoint::format::{DEFAULT_WIDTHS, HISTORY_BLOCK, SCHEMA};
use quire_checkpoint::history::version_record;
use quire_checkpoint::keys::checkpoint_key;
use quire_checkpoint::{OpenOptions, Replica, state_digest};
use quire_log::DocPath;

const FRESHEN: Duration = Duration::from_secs(1800);

async fn open(store: &Arc<dyn BlobStore>) -> Replica {
    Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap()
}

async fn open_at(store: &Arc<dyn BlobStore>, checkpoint: u64) -> Replica {
    let options = OpenOptions {
        checkpoint: Some(checkpoint),
        ..OpenOptions::default()
    };
    Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap()
}

/// A varied workload: new documents, rewrites, metadata, a blob-sized body, retention that
/// prunes, archive and unarchive. Round `r` changes several documents.
async fn round(writer: &mut SlotWriter, r: usize) {
    let mut slot = Vec::new();
    for i in 0..6 {
        let doc = (r * 7 + i * 5) % 20;
        let body = format!("# Doc {doc}\n\nround {r} item {i}\n");
        if i.is_multiple_of(3) {
            let tags = format!("t{}, t{}", r % 3, i);
            slot.push(publish_with(
                &format!("/docs/{doc}.md"),
                &body,
                meta(&[("tags", &tags), ("importance", "0.7")]),
            ));
        } else {
            slot.push(publish(&format!("/docs/{doc}.md"), &body));
        }
    }
    writer.commit(&slot).await;
    if r == 10 {
        // The world outgrows one shard: later tiers take more shard bits.
        for half in 0..2 {
            let slot: Vec<_> = (0..150)
                .map(|i| publish(&format!("/many/{half}/{i}.md"), &format!("many {i}\n")))
                .collect();
            writer.commit(&slot).await;
        }
    }
    writer
        .commit(&[publish_with(
            "/hot.md",
            &format!("hot {r}\n"),
            meta(&[("retention", "5")]),
        )])
        .await;
    if r % 4 == 1 {
        writer
            .commit(&[publish(&format!("/big/{r}.md"), &"x".repeat(9 * 1024 + r))])
            .await;
    }
    if r.is_multiple_of(3) {
        let target = format!("/archive/{}.md", r % 2);
        if writer
            .state
            .doc(&DocPath::parse(&target).unwrap())
            .is_none()
        {
            writer
                .commit(&[publish(&target, &format!("to archive {r}\n"))])
                .await;
        }
        let archived = writer
            .state
            .doc(&DocPath::parse(&target).unwrap())
            .unwrap()
            .archived;
        writer.commit(&[archive(&target, !archived)]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_start_from_any_checkpoint_equals_the_live_state() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    let mut follower = open(&store).await;
    let mut checkpoints = vec![1];
    let mut saw_middle = false;
    for r in 0..30 {
        round(&mut writer, r).await;
        follower.catch_up().await.unwrap();
        assert_eq!(follower.state().sequence(), writer.state.sequence());
        if r % 4 == 3 {
            follower.checkpoint(FRESHEN).await.unwrap().unwrap();
            checkpoints.push(follower.base().sequence());
            let tiers = &follower.base().root.tiers;
            saw_middle |= tiers[1..tiers.len() - 1].iter().any(|t| t.documents > 0);
        }
    }
    round(&mut writer, 30).await;
    follower.catch_up().await.unwrap();
    let root = &follower.base().root;
    assert!(
        root.tiers[0].grid > 0 && root.tiers[0].documents > 0,
        "the base tier was cut: {root:?}"
    );
    assert!(saw_middle, "some checkpoint held a run");

    let live = state_digest(&writer.state);
    assert_eq!(state_digest(follower.state()), live);
    let live_export = export_all(&store, &writer.state).await;
    assert!(live_export.iter().any(|d| d.archived));
    assert!(live_export.iter().any(|d| d.first > 1));
    for at in checkpoints {
        let loaded = open_at(&store, at).await;
        assert_eq!(state_digest(loaded.state()), live, "from checkpoint {at}");
        loaded.state().check_indexes().unwrap();
        assert_eq!(
            export_all(&store, loaded.state()).await,
            live_export,
            "from checkpoint {at}"
        );
    }
    let newest = open(&store).await;
    assert_eq!(newest.base().sequence(), follower.base().sequence());
    assert_eq!(export_all(&store, follower.state()).await, live_export);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_is_a_function_of_the_log_alone() {
    // Store A checkpoints often; store B holds the same log and checkpoints once, at the end.
    let a = memory();
    let mut writer = new_world(a.clone(), SMALL_WIDTHS).await;
    let mut follower = open(&a).await;
    for r in 0..25 {
        round(&mut writer, r).await;
        if r % 3 == 2 {
            follower.catch_up().await.unwrap();
            follower.checkpoint(FRESHEN).await.unwrap();
        }
    }
    follower.catch_up().await.unwrap();
    follower.checkpoint(FRESHEN).await.unwrap();
    let s = follower.base().sequence();

    let b = memory();
    for (key, bytes) in contents(&*a, PREFIX).await {
        if key.starts_with("w/log/") || key.starts_with("w/blobs/") || key == "w/marker" {
            b.create(&key, bytes).await.unwrap();
        }
    }
    // Genesis objects too, so B's replica can start from checkpoint zero.
    let (root, zero) = quire_checkpoint::genesis::genesis_objects(WORLD, SMALL_WIDTHS);
    b.create(&format!("w/roots/{}", zero.root), root.encode())
        .await
        .unwrap();
    b.create(&checkpoint_key(PREFIX, 1), zero.encode())
        .await
        .unwrap();
    let mut fresh = open(&b).await;
    assert_eq!(fresh.state().sequence(), s);
    fresh.checkpoint(FRESHEN).await.unwrap().unwrap();
    let key = checkpoint_key(PREFIX, s);
    assert_eq!(
        a.get(&key).await.unwrap().data,
        b.get(&key).await.unwrap().data
    );
    let root_key = format!("w/roots/{}", follower.base().checkpoint.root);
    assert_eq!(
        a.get(&root_key).await.unwrap().data,
        b.get(&root_key).await.unwrap().data
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_compactors_write_identical_bytes() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    for r in 0..10 {
        round(&mut writer, r).await;
    }
    let metered = Metered::new(store.clone());
    let shared: Arc<dyn BlobStore> = Arc::new(metered.clone());
    let one = open(&shared).await;
    let two = open(&shared).await;
    let (a, b) = tokio::join!(one.prepare(FRESHEN).run(), two.prepare(FRESHEN).run());
    let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
    assert_eq!(a.base.checkpoint, b.base.checkpoint);
    assert_eq!(a.base.root, b.base.root);
    assert!(
        a.stats.own != b.stats.own,
        "exactly one create made the checkpoint"
    );
    // Every create that lost found identical bytes (an error otherwise).
    let total = a.stats.blocks + a.stats.shards + 2;
    assert_eq!(a.stats.created + b.stats.created, total);
    assert_eq!(a.stats.reused + b.stats.reused, total);
}

#[tokio::test(start_paused = true)]
async fn a_crashed_checkpoint_costs_only_replay_and_its_orphans_are_reused() {
    let memory = memory();
    let simulated = Arc::new(Simulated::new(memory.clone(), 1));
    let store: Arc<dyn BlobStore> = simulated.clone();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    for r in 0..6 {
        round(&mut writer, r).await;
    }
    let mut replica = open(&store).await;
    replica.checkpoint(FRESHEN).await.unwrap();
    for r in 6..9 {
        round(&mut writer, r).await;
    }
    replica.catch_up().await.unwrap();
    let crash = simulated.add_fault(FaultRule::new(
        BlobOp::Create,
        "w/checkpoints/",
        Fault::Unavailable,
    ));
    assert!(replica.checkpoint(FRESHEN).await.is_err());
    simulated.remove_fault(crash);

    // The newest checkpoint is the older one; replay covers the rest.
    let cold = open(&store).await;
    assert!(cold.base().sequence() < writer.state.sequence());
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));

    let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    assert_eq!(
        stats.created, 1,
        "only the checkpoint object is new: {stats:?}"
    );
    assert_eq!(stats.reused, stats.blocks + stats.shards + 1);
    let reopened = open(&store).await;
    assert_eq!(reopened.base().sequence(), writer.state.sequence());
    assert_eq!(state_digest(reopened.state()), state_digest(&writer.state));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_blocks_follow_pruning_across_block_boundaries() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    let mut replica = open(&store).await;
    let keep = meta(&[("retention", "300")]);
    for v in 1..=600u64 {
        writer
            .commit(&[publish_with(
                "/long.md",
                &format!("version {v}\n"),
                keep.clone(),
            )])
            .await;
        if v.is_multiple_of(170) || v == 256 || v == 257 {
            replica.catch_up().await.unwrap();
            replica.checkpoint(FRESHEN).await.unwrap();
        }
    }
    replica.catch_up().await.unwrap();
    replica.checkpoint(FRESHEN).await.unwrap();
    let loaded = open(&store).await;
    let path = DocPath::parse("/long.md").unwrap();
    let doc = loaded.state().doc(&path).unwrap().clone();
    assert_eq!((doc.first, doc.current), (301, 600));
    let ranges: Vec<(u64, u64)> = doc.history.iter().map(|b| (b.first, b.last)).collect();
    assert_eq!(
        ranges,
        [(301, 2 * HISTORY_BLOCK), (2 * HISTORY_BLOCK + 1, 600)]
    );
    assert!(
        version_record(&*store, PREFIX, &doc, 300)
            .await
            .unwrap()
            .is_none()
    );
    let live = writer.state.doc(&path).unwrap();
    for v in [301, 512, 513, 600] {
        let record = version_record(&*store, PREFIX, &doc, v)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(Some(&record), live.recent_version(v), "version {v}");
    }
    assert_eq!(
        export_all(&store, loaded.state()).await,
        export_all(&store, &writer.state).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_state_survives_a_checkpoint() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    writer
        .commit(&[publish("/a.md", "a\n"), publish("/b.md", "b\n")])
        .await;
    writer.commit(&[archive("/a.md", true)]).await;
    let mut replica = open(&store).await;
    replica.checkpoint(FRESHEN).await.unwrap();
    let loaded = open(&store).await;
    let a = loaded
        .state()
        .doc(&DocPath::parse("/a.md").unwrap())
        .unwrap();
    assert!(a.archived);
    assert!(
        loaded.state().lookup_hash(&a.body_hash).is_none(),
        "archived bodies are not looked up"
    );
    writer.commit(&[archive("/a.md", false)]).await;
    let mut loaded = loaded;
    loaded.catch_up().await.unwrap();
    assert!(
        !loaded
            .state()
            .doc(&DocPath::parse("/a.md").unwrap())
            .unwrap()
            .archived
    );
    assert_eq!(state_digest(loaded.state()), state_digest(&writer.state));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_changed_document_costs_one_block_one_shard_one_root_one_checkpoint() {
    let store = memory();
    let mut writer = new_world(store.clone(), DEFAULT_WIDTHS).await;
    for chunk in 0..40 {
        let slot: Vec<_> = (0..250)
            .map(|i| publish(&format!("/d/{chunk}/{i}.md"), &format!("# {chunk} {i}\n")))
            .collect();
        writer.commit(&slot).await;
    }
    assert_eq!(writer.state.doc_count(), 10_000);
    let metered = Metered::new(store.clone());
    let shared: Arc<dyn BlobStore> = Arc::new(metered.clone());
    let mut replica = open(&shared).await;
    let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    // A run holds the 8,250 documents up to the slot holding grid point 8,192 (64 shards),
    // the top tier the other 1,750 (8).
    assert_eq!(stats.shards, 72, "10,000 documents take 72 shards");
    let mut peer = open(&shared).await;
    assert_eq!(peer.base().sequence(), replica.base().sequence());

    writer.commit(&[publish("/d/3/7.md", "# changed\n")]).await;
    replica.catch_up().await.unwrap();
    let before = metered.reading();
    let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let cost = metered.reading().since(&before);
    assert_eq!(
        (stats.blocks, stats.shards, stats.created),
        (1, 1, 4),
        "{stats:?}"
    );
    assert_eq!(cost.requests(BlobOp::Create), 4);
    assert_eq!(
        cost.requests(BlobOp::Get) + cost.requests(BlobOp::GetRange),
        1,
        "the old block holding version 1 is read once"
    );
    assert_eq!(
        cost.requests(BlobOp::GetRange),
        1,
        "by range, from the pack of the epoch that created the document"
    );
    assert!(cost.bytes_up < 40_000, "{} bytes up", cost.bytes_up);

    // A peer adopts it reading the checkpoint, its root and the one changed shard.
    peer.catch_up().await.unwrap();
    let before = metered.reading();
    assert!(peer.adopt(replica.base().sequence()).await.unwrap());
    let cost = metered.reading().since(&before);
    assert_eq!(cost.requests(BlobOp::Get), 3, "{cost:?}");
    assert_eq!(state_digest(peer.state()), state_digest(&writer.state));
    let changed = peer
        .state()
        .doc(&DocPath::parse("/d/3/7.md").unwrap())
        .unwrap();
    assert!(changed.recent.is_empty() && changed.history.last().unwrap().last == 2);
}

/// A replica that wrote the newest checkpoint reads the history blocks of each epoch's
/// documents as the epoch ends, so its next checkpoint reads none of them, and writes the
/// same bytes as a replica that read nothing ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writing_replica_reads_the_next_checkpoints_history_ahead() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    let docs: Vec<_> = (0..40)
        .map(|i| publish(&format!("/d/{i}.md"), &format!("# {i}\n")))
        .collect();
    writer.commit(&docs).await;
    let metered = Metered::new(store.clone());
    let shared: Arc<dyn BlobStore> = Arc::new(metered.clone());
    let mut replica = open(&shared).await;
    replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    // A replica that never wrote a checkpoint reads nothing ahead.
    let mut quiet = open(&shared).await;

    // Rewrites of existing documents (their blocks sit in the first epoch's pack), then new
    // documents alone, so the epoch holding the rewrites ends before the checkpoint.
    for i in 0..20 {
        writer
            .commit(&[publish(&format!("/d/{i}.md"), &format!("# {i} again\n"))])
            .await;
    }
    let fresh: Vec<_> = (0..40)
        .map(|i| publish(&format!("/new/{i}.md"), "new\n"))
        .collect();
    writer.commit(&fresh).await;
    let reads =
        |r: &quire_blob::MeterReading| r.requests(BlobOp::Get) + r.requests(BlobOp::GetRange);
    let before = metered.reading();
    quiet.catch_up().await.unwrap();
    quiet.read_ahead_done().await;
    let caught_up = reads(&metered.reading().since(&before));
    let before = metered.reading();
    replica.catch_up().await.unwrap();
    replica.read_ahead_done().await;
    assert_eq!(
        reads(&metered.reading().since(&before)) - caught_up,
        20,
        "one block read per rewritten document, as its epoch ended"
    );

    let before = metered.reading();
    let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let cost = metered.reading().since(&before);
    assert_eq!(
        cost.requests(BlobOp::Get) + cost.requests(BlobOp::GetRange),
        0,
        "the checkpoint read no history block: {cost:?}"
    );
    assert!(stats.created > 0 && stats.packs > 0, "{stats:?}");
    // The replica that read nothing ahead writes the same checkpoint byte for byte.
    let again = quiet.checkpoint(FRESHEN).await.unwrap().unwrap();
    assert_eq!(again.created, 0, "{again:?}");
    assert_eq!(state_digest(quiet.state()), state_digest(replica.state()));
    assert_eq!(quiet.base().root, replica.base().root);
}

/// A replay that fails part way keeps, for the next checkpoint, the changes of the slots it
/// applied: a checkpoint written then holds their documents.
#[tokio::test(start_paused = true)]
async fn a_replay_failing_part_way_keeps_the_changes_it_applied() {
    let memory = memory();
    let simulated = Arc::new(Simulated::new(memory.clone(), 1));
    let store: Arc<dyn BlobStore> = simulated.clone();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    round(&mut writer, 0).await;
    let mut replica = open(&store).await;
    replica.checkpoint(FRESHEN).await.unwrap();
    for r in 1..6 {
        round(&mut writer, r).await;
    }
    let reached = writer.state.clone();
    let unreadable = quire_log::keys::slot_key(PREFIX, reached.sequence() + 1);
    round(&mut writer, 6).await;
    round(&mut writer, 7).await;
    let fault = simulated.add_fault(FaultRule::new(BlobOp::Get, unreadable, Fault::Unavailable));
    assert!(replica.catch_up().await.is_err());
    assert_eq!(state_digest(replica.state()), state_digest(&reached));
    simulated.remove_fault(fault);

    replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let cold = open_at(&store, reached.sequence()).await;
    assert_eq!(cold.base().sequence(), reached.sequence());
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
}

/// Copies every object of `from` that `to` lacks.
async fn copy_missing(from: &Arc<dyn BlobStore>, to: &Arc<dyn BlobStore>) {
    for (key, bytes) in contents(&**from, PREFIX).await {
        match to.create(&key, bytes).await {
            Ok(_) => {}
            Err(e) if e.is_precondition() => {}
            Err(e) => panic!("copying {key}: {e}"),
        }
    }
}

/// The checkpoint at `sequence` and its root, as stored.
async fn checkpoint_bytes(
    store: &Arc<dyn BlobStore>,
    sequence: u64,
) -> (bytes::Bytes, bytes::Bytes) {
    let checkpoint = store
        .get(&checkpoint_key(PREFIX, sequence))
        .await
        .unwrap()
        .data;
    let decoded = quire_checkpoint::format::Checkpoint::decode("c", sequence, &checkpoint).unwrap();
    let root = store
        .get(&format!("w/roots/{}", decoded.root))
        .await
        .unwrap()
        .data;
    (checkpoint, root)
}

/// A replica cold-started from a checkpoint whose upper tiers hold documents (its change
/// marks are the tiers' cuts, not the sequences the documents changed at), and one that
/// adopted that checkpoint from an older base, then both follow the log across grid points
/// and write: their checkpoints are byte for byte the one a replica writes that replayed the
/// whole log from genesis, and the one the replica that wrote every checkpoint writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_started_and_adopting_replicas_checkpoint_as_a_replay_does() {
    let a = memory();
    let mut writer = new_world(a.clone(), SMALL_WIDTHS).await;
    let mut follower = open(&a).await;
    let mut older = None;
    for r in 0..20 {
        round(&mut writer, r).await;
        if r % 4 == 3 {
            follower.catch_up().await.unwrap();
            follower.checkpoint(FRESHEN).await.unwrap().unwrap();
            older = older.or(Some(follower.base().sequence()));
        }
    }
    round(&mut writer, 20).await;
    follower.catch_up().await.unwrap();
    follower.checkpoint(FRESHEN).await.unwrap().unwrap();
    let middle = follower.base().sequence();
    let older = older.unwrap();
    let middle_root = follower.base().root.clone();
    assert!(
        middle_root.tiers[1..].iter().any(|t| t.documents > 0),
        "an upper tier holds documents: {middle_root:?}"
    );

    // Two buckets holding what A holds now: one cold-starts from the middle checkpoint, one
    // opens at an older one and adopts the middle one.
    let cold_bucket = memory();
    let adopting_bucket = memory();
    copy_missing(&a, &cold_bucket).await;
    copy_missing(&a, &adopting_bucket).await;
    let mut cold = open(&cold_bucket).await;
    assert_eq!(cold.base().sequence(), middle);
    let mut adopting = open_at(&adopting_bucket, older).await;
    adopting.catch_up().await.unwrap();
    assert!(adopting.adopt(middle).await.unwrap());
    assert_eq!(adopting.base().sequence(), middle);

    // The log grows round by round, past grid points; after each round the new slots and
    // blobs reach the other buckets, and every replica checkpoints. A replay from genesis
    // joins at the first round.
    let replayed_bucket = memory();
    let (root, zero) = quire_checkpoint::genesis::genesis_objects(WORLD, SMALL_WIDTHS);
    replayed_bucket
        .create(&format!("w/roots/{}", zero.root), root.encode())
        .await
        .unwrap();
    replayed_bucket
        .create(&checkpoint_key(PREFIX, 1), zero.encode())
        .await
        .unwrap();
    let mut replayed = None;
    let mut previous = middle_root;
    let (mut crossed, mut kept) = (false, false);
    for r in 21..40 {
        round(&mut writer, r).await;
        copy_missing(&a, &cold_bucket).await;
        copy_missing(&a, &adopting_bucket).await;
        for (key, bytes) in contents(&*a, PREFIX).await {
            if key.starts_with("w/log/") || key.starts_with("w/blobs/") || key == "w/marker" {
                let _ = replayed_bucket.create(&key, bytes).await;
            }
        }
        if replayed.is_none() {
            let fresh = open(&replayed_bucket).await;
            assert_eq!(fresh.base().sequence(), 1, "replayed from genesis");
            replayed = Some(fresh);
        }
        let replayed = replayed.as_mut().unwrap();
        follower.catch_up().await.unwrap();
        follower.checkpoint(FRESHEN).await.unwrap().unwrap();
        let end = follower.base().sequence();
        for replica in [&mut cold, &mut adopting, replayed] {
            replica.catch_up().await.unwrap();
            assert_eq!(replica.state().sequence(), end);
            replica.checkpoint(FRESHEN).await.unwrap().unwrap();
        }
        let expected = checkpoint_bytes(&a, end).await;
        for (name, bucket) in [
            ("the cold-started replica", &cold_bucket),
            ("the adopting replica", &adopting_bucket),
            ("the replay from genesis", &replayed_bucket),
        ] {
            assert_eq!(
                checkpoint_bytes(bucket, end).await,
                expected,
                "{name} after round {r}"
            );
        }
        let now = follower.base().root.clone();
        // The top tier is cut at the checkpoint itself; the ones below at grid points.
        let below_top = now.tiers.len() - 1;
        let moved = now
            .tiers
            .iter()
            .zip(&previous.tiers)
            .take(below_top)
            .any(|(now, then)| now.grid != then.grid);
        crossed |= moved;
        kept |= !moved;
        previous = now;
    }
    assert!(crossed, "some round crossed a grid point below the top");
    assert!(kept, "some round stayed between grid points");
}

/// Runs are written once: a checkpoint names every run of the one before it unchanged and
/// writes only the runs of grid points it passed and top-tier shards; a slot holding two run
/// grid points cuts both (the second run empty); when the base moves, runs start again
/// after it. Every checkpoint cold-starts to the live state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_written_once_and_named_unchanged_until_the_base_moves() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    let [base_width, run_width] = SMALL_WIDTHS;
    let mut replica = open(&store).await;
    let mut previous = replica.base().root.clone();
    let (mut kept, mut bases, mut most_runs, mut empty_run) = (0, 0, 0, false);
    for round in 0..40u64 {
        let writes = match round {
            11 => 40,
            23 => 80,
            _ => 7,
        };
        let slot: Vec<_> = (0..writes)
            .map(|i| {
                let doc = (round * 7 + i) % 30;
                publish(&format!("/d/{doc}.md"), &format!("# {round} {i}\n"))
            })
            .collect();
        writer.commit(&slot).await;
        replica.catch_up().await.unwrap();
        let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
        let root = replica.base().root.clone();
        let s = replica.base().sequence();
        assert_eq!(root.schema(), SCHEMA);
        let runs = &root.tiers[1..root.tiers.len() - 1];
        let base_grid = s / base_width * base_width;
        assert_eq!(root.tiers[0].grid, base_grid);
        for (k, run) in runs.iter().enumerate() {
            assert_eq!(run.grid, base_grid + (k as u64 + 1) * run_width, "{root:?}");
        }
        most_runs = most_runs.max(runs.len());
        empty_run |= runs.iter().any(|r| r.documents == 0);
        let shards_of = |tiers: &[quire_checkpoint::format::Tier]| -> u64 {
            tiers
                .iter()
                .map(|t| t.shards.iter().flatten().count() as u64)
                .sum()
        };
        let top = shards_of(&root.tiers[root.tiers.len() - 1..]);
        if root.tiers[0] == previous.tiers[0] {
            // Genesis has the schema-1 layout: its middle tier is not a run.
            let old_runs = match previous.runs {
                true => &previous.tiers[1..previous.tiers.len() - 1],
                false => &[],
            };
            assert_eq!(&runs[..old_runs.len()], old_runs, "runs named unchanged");
            kept += usize::from(!old_runs.is_empty());
            let new_runs = shards_of(&runs[old_runs.len()..]);
            assert!(stats.shards <= new_runs + top, "{stats:?} {root:?}");
            if runs.len() > old_runs.len() {
                assert_eq!(stats.shards, new_runs + top, "{stats:?} {root:?}");
            }
        } else {
            bases += 1;
        }
        let cold = open(&store).await;
        assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
        previous = root;
    }
    assert!(kept > 5, "checkpoints kept runs {kept} times");
    assert!(bases >= 3, "the base moved {bases} times");
    assert_eq!(most_runs, (base_width / run_width - 1) as usize);
    assert!(
        empty_run,
        "a slot holding two run grid points leaves an empty run"
    );
}

/// A checkpoint's history objects grow with the epochs that ended, not with the documents
/// that changed: the blocks of each ended epoch are one pack, read back by range and checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_objects_grow_with_epochs_not_documents() {
    let store = memory();
    let mut writer = new_world(store.clone(), DEFAULT_WIDTHS).await;
    for chunk in 0..20 {
        let slot: Vec<_> = (0..250)
            .map(|i| publish(&format!("/d/{chunk}/{i}.md"), &format!("# {chunk} {i}\n")))
            .collect();
        writer.commit(&slot).await;
    }
    let mut replica = open(&store).await;
    let first = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    // 5,000 documents through sequence 5,001: four epochs of 1,024 ended.
    assert_eq!(first.packs, 4, "{first:?}");
    let changed = 4000;
    for k in 0..changed / 16 {
        let slot: Vec<_> = (0..16)
            .map(|i| {
                let n = (k * 16 + i) * 7 % 5000;
                publish(
                    &format!("/d/{}/{}.md", n / 250, n % 250),
                    &format!("# again {k}\n"),
                )
            })
            .collect();
        writer.commit(&slot).await;
    }
    replica.catch_up().await.unwrap();
    let stats = replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    // Four more epochs ended (at 5,120 to 8,192); only the open epoch's documents have
    // blocks of their own.
    assert_eq!(stats.packs, 4, "{stats:?}");
    assert!(stats.blocks - stats.packs <= 1024, "{stats:?}");
    assert!(stats.blocks * 4 < changed as u64, "{stats:?}");
    let cold = open(&store).await;
    assert_eq!(state_digest(cold.state()), state_digest(&writer.state));
    let live = export_all(&store, &writer.state).await;
    assert_eq!(export_all(&store, cold.state()).await, live);

    // A damaged byte in a pack is an integrity error for the versions it holds.
    let doc = cold
        .state()
        .doc(&DocPath::parse("/d/0/0.md").unwrap())
        .unwrap()
        .clone();
    let packed = quire_checkpoint::format::PackedBlock::from_name(&doc.history[0].hash)
        .expect("the block holding version 1 was packed when its epoch ended");
    let key = quire_checkpoint::keys::pack_key(PREFIX, &packed.pack);
    let object = store.get(&key).await.unwrap();
    let mut damaged = object.data.to_vec();
    damaged[packed.offset as usize + 3] ^= 0x41;
    store
        .replace(&key, &object.attributes.generation, damaged.into())
        .await
        .unwrap();
    let err = version_record(&*store, PREFIX, &doc, 1).await.unwrap_err();
    assert!(err.is_integrity(), "{err}");
}
