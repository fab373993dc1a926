//! The time the generation fence relies on: a run is capped, its `now` advances while it
//! runs, and a drop after a write judges ages by the bucket's clock.
#![allow(
    clippy::disallowed_methods,
    reason = "the fence is checked against the bucket's real stamps"
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::*;
use quire_blob::{BlobStore, Op as BlobOp, Simulated};
use quire_checkpoint::keys::checkpoint_key;
use quire_checkpoint::objects::{Fence, Put, put};
use quire_checkpoint::write::RUN_CAP;
use quire_checkpoint::{CompactionPolicy, Compactor, Op, OpenOptions, Replica, Step};
use quire_log::{ManualClock, Timestamp};

const FRESHEN: Duration = Duration::from_secs(1800);

#[tokio::test(start_paused = true)]
async fn a_checkpoint_run_stops_at_its_cap_without_naming_anything() {
    let simulated = Arc::new(Simulated::new(memory(), 1));
    let store: Arc<dyn BlobStore> = simulated.clone();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    writer
        .commit(&[publish("/a.md", "a\n"), publish("/b.md", "b\n")])
        .await;
    let replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    let sequence = replica.state().sequence();
    // The checkpoint object's create never answers: the run must give up at the cap.
    let hold = simulated.hold(BlobOp::Create, "w/checkpoints/");
    let began = tokio::time::Instant::now();
    let run = tokio::time::timeout(2 * RUN_CAP, replica.prepare(FRESHEN).run())
        .await
        .expect("the run is capped");
    let err = run.unwrap_err();
    assert!(err.to_string().contains("cap"), "{err}");
    assert!(began.elapsed() >= RUN_CAP && began.elapsed() < RUN_CAP + Duration::from_secs(1));
    hold.release();
    let key = checkpoint_key(PREFIX, sequence);
    assert!(store.head(&key).await.unwrap_err().is_not_found());
}

#[tokio::test(start_paused = true)]
async fn the_fence_measures_age_when_it_writes_not_when_the_run_began() {
    let store = memory();
    let key = "w/shards/aged";
    let bytes = Bytes::from_static(b"shard bytes");
    store.create(key, bytes.clone()).await.unwrap();
    let fence = Fence::new(SystemTime::now(), Duration::from_secs(60));
    assert_eq!(
        put(&*store, key, bytes.clone(), &fence, Op::Write)
            .await
            .unwrap(),
        Put::Reused
    );
    // The run goes on: what was young when it began is old by the time it is written.
    tokio::time::advance(Duration::from_secs(120)).await;
    assert_eq!(
        put(&*store, key, bytes, &fence, Op::Write).await.unwrap(),
        Put::Freshened
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_after_a_write_judges_ages_by_the_buckets_clock() {
    let store = memory();
    let mut writer = new_world(store.clone(), SMALL_WIDTHS).await;
    let mut honest = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    for i in 0..5 {
        writer
            .commit(&[publish(&format!("/{i}.md"), &format!("{i}\n"))])
            .await;
        honest.catch_up().await.unwrap();
        honest.checkpoint(FRESHEN).await.unwrap().unwrap();
    }
    writer.commit(&[publish("/last.md", "last\n")]).await;
    // This store's clock runs two hours ahead of the bucket's: by it every checkpoint
    // above is past the one-hour grace, by the bucket's none is.
    let ahead = SystemTime::now() + Duration::from_secs(7200);
    let clock = Arc::new(ManualClock::new(Timestamp(
        ahead.duration_since(UNIX_EPOCH).unwrap().as_secs(),
    )));
    let options = OpenOptions {
        clock: clock.clone(),
        ..OpenOptions::default()
    };
    let mut skewed = Replica::open(store.clone(), PREFIX, &options)
        .await
        .unwrap();
    let policy = CompactionPolicy {
        slots: 1,
        max_delay: Duration::ZERO,
        defer: Duration::ZERO,
        ..CompactionPolicy::default()
    };
    let mut compactor = Compactor::new(policy, clock, 3);
    let Step::Written { dropped, .. } = compactor.step(&mut skewed).await.unwrap() else {
        panic!("due: one slot past the newest checkpoint");
    };
    assert!(dropped.dropped.is_empty(), "{dropped:?}");
    assert_eq!(dropped.kept.len(), 7, "{dropped:?}");
}
