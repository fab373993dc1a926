//! A long-running writer sheds what checkpoints hold: after each checkpoint the committer's
//! states keep only the versions the checkpoint does not cover, and equal the state of a
//! replica resting on that checkpoint.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use quire_checkpoint::format::DEFAULT_WIDTHS;
use quire_checkpoint::{OpenOptions, Replica};
use quire_log::commit::{CommitRequest, Committer, CommitterConfig, Folded};
use quire_log::{ManualClock, Timestamp};

const FRESHEN: Duration = Duration::from_secs(1800);
const DOCS: usize = 12;

fn committer(store: &Arc<dyn quire_blob::BlobStore>, replica: &Replica) -> Committer {
    let config = CommitterConfig {
        prefix: PREFIX.into(),
        store: STORE,
        ..CommitterConfig::default()
    };
    Committer::start(
        store.clone(),
        replica.state().clone(),
        Arc::new(ManualClock::new(Timestamp(1_767_225_600))),
        config,
    )
}

/// Rewrites every document `times` times, one write at a time.
async fn rewrite(committer: &Committer, round: usize, times: usize) {
    for t in 0..times {
        for d in 0..DOCS {
            let body = format!("# Doc {d}\n\nround {round} pass {t}\n");
            committer
                .submit(CommitRequest::new(publish(&format!("/docs/{d}.md"), &body)))
                .await
                .unwrap();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_long_running_writer_keeps_only_what_the_newest_checkpoint_does_not_hold() {
    let store = memory();
    new_world(store.clone(), DEFAULT_WIDTHS).await;
    let mut replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    let shedding = committer(&store, &replica);
    // The same workload on a committer that is never told of checkpoints.
    let control_store = memory();
    new_world(control_store.clone(), DEFAULT_WIDTHS).await;
    let control_replica = Replica::open(control_store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    let control = committer(&control_store, &control_replica);

    let (per_round, after_checkpoint) = (4, 2);
    for round in 0..30 {
        rewrite(&shedding, round, per_round).await;
        rewrite(&control, round, per_round).await;
        replica.catch_up().await.unwrap();
        let before = replica.state().clone();
        replica.checkpoint(FRESHEN).await.unwrap().unwrap();
        let folded = Folded::from_state(replica.state(), before.changed_paths(replica.state()));
        assert_eq!(folded.len(), DOCS, "round {round}");
        // Writes the checkpoint does not hold: committed before the committer hears of it
        // on even rounds, in flight while it sheds on odd ones.
        if round % 2 == 0 {
            rewrite(&shedding, round, after_checkpoint).await;
            shedding.shed(folded).await;
        } else {
            tokio::join!(
                rewrite(&shedding, round, after_checkpoint),
                shedding.shed(folded)
            );
        }
        rewrite(&control, round, after_checkpoint).await;

        // Only the versions after the checkpoint remain, however long the writer runs.
        let retained = shedding.retained_versions();
        assert_eq!(retained, (DOCS * after_checkpoint) as u64, "round {round}");
        let written = (DOCS * (per_round + after_checkpoint) * (round + 1)) as u64;
        assert_eq!(control.retained_versions(), written, "round {round}");

        // What readers see is unchanged: the replica, resting on the checkpoint and caught
        // up, holds the same state document by document, history blocks included.
        replica.catch_up().await.unwrap();
        assert_eq!(*replica.state(), shedding.state(), "round {round}");
    }
    shedding.close().await;
    control.close().await;
}

#[tokio::test(start_paused = true)]
async fn shedding_what_a_stale_checkpoint_holds_changes_nothing() {
    let store = memory();
    new_world(store.clone(), DEFAULT_WIDTHS).await;
    let mut replica = Replica::open(store.clone(), PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    let committer = committer(&store, &replica);
    rewrite(&committer, 0, 3).await;
    replica.catch_up().await.unwrap();
    let before = replica.state().clone();
    replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let stale = Folded::from_state(replica.state(), before.changed_paths(replica.state()));
    rewrite(&committer, 1, 3).await;
    replica.catch_up().await.unwrap();
    let before = replica.state().clone();
    replica.checkpoint(FRESHEN).await.unwrap().unwrap();
    let newer = Folded::from_state(replica.state(), before.changed_paths(replica.state()));
    committer.shed(newer).await;
    assert_eq!(committer.retained_versions(), 0);
    let shed = committer.state();
    // An older checkpoint's history arriving late is ignored.
    committer.shed(stale).await;
    assert_eq!(committer.state(), shed);
    assert_eq!(*replica.state(), shed);
    committer.close().await;
}
