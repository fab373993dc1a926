//! A bucket store's compactor: the background task that follows the log into a replica
//! (taking its committer's slots from memory), writes and adopts checkpoints, and has the
//! committer shed what they hold.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quire_checkpoint::{CompactionPolicy, Compactor, Replica, Step};
use quire_log::WorldState;
use quire_log::commit::{Committer, Folded};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::bucket::BucketOptions;
use crate::search::BodySearch;
use crate::upload_pace::CommitterPace;

/// The background compactor and how to stop it.
pub(crate) struct Compaction {
    pub(crate) stop: CancellationToken,
    pub(crate) done: Mutex<Option<oneshot::Receiver<()>>>,
    pub(crate) steps: watch::Receiver<Option<Step>>,
}

/// How long the compactor lets its committer's new slots gather before applying them. Applied
/// a slot after every commit, the work lands on the moment each commit answers its writers,
/// who then come back for the next slot on the same cores; applied a few commits at a time
/// (yielding between slots), it mostly does not, and the change marks of several slots go
/// into the tracker in one sorted pass. The ring holds seconds of slots, far more than this.
const RECENT_GATHER: Duration = Duration::from_millis(20);

/// Waits for the next state the committer installs; never, without a committer.
async fn learned_changed(
    learned: &mut Option<watch::Receiver<WorldState>>,
) -> std::result::Result<(), watch::error::RecvError> {
    match learned {
        Some(learned) => learned.changed().await,
        None => std::future::pending().await,
    }
}

pub(crate) fn start_compactor(
    mut replica: Replica,
    committer: Option<Committer>,
    policy: CompactionPolicy,
    options: &BucketOptions,
    search: BodySearch,
) -> Compaction {
    if let Some(committer) = &committer {
        // Own slots, and peers' the committer read, reach the compactor from memory.
        replica.set_recent(committer.recent());
        // Checkpoint uploads make way while the store's slot creates slow down.
        replica.set_upload_pace(Arc::new(CommitterPace::new(committer.clone())));
    }
    let stop = CancellationToken::new();
    let (done_tx, done) = oneshot::channel();
    let (steps_tx, steps) = watch::channel(None);
    let compactor = Compactor::new(policy, options.clock.clone(), options.seed);
    let every = options.compact_every;
    let token = stop.clone();
    tokio::spawn(async move {
        compact(
            replica, committer, compactor, every, token, steps_tx, search,
        )
        .await;
        let _ = done_tx.send(());
    });
    Compaction {
        stop,
        done: Mutex::new(Some(done)),
        steps,
    }
}

/// The compactor's loop: wait (taking the committer's recent slots a gather at a time), replay
/// what the log gained, step; until stopped. A step cut short by the stop costs only what it
/// wrote (an unfinished checkpoint is never named).
/// After a checkpoint is written or adopted, the committer sheds what it holds.
async fn compact(
    mut replica: Replica,
    committer: Option<Committer>,
    mut compactor: Compactor,
    every: Duration,
    stop: CancellationToken,
    steps: watch::Sender<Option<Step>>,
    search: BodySearch,
) {
    // What the store learned of the log: its own commits, races, hints and reads.
    let mut learned = committer.as_ref().map(Committer::subscribe);
    loop {
        // An idle world costs nothing: with everything folded and nothing learned since the
        // last step, the bucket is not looked at until a commit or a hint.
        if let Some(learned) = &mut learned
            && replica.slots_since_base() == 0
            && learned.borrow_and_update().sequence() <= replica.state().sequence()
        {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = learned.changed() => if changed.is_err() { return },
            }
        }
        let wake = tokio::time::Instant::now() + every + compactor.delay();
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(wake) => break,
                // The slots the committer learns of are taken from its ring as they come, so
                // the ring need only hold what arrives during one step: those of
                // `RECENT_GATHER` at a time.
                changed = learned_changed(&mut learned) => {
                    if changed.is_err() {
                        return;
                    }
                    tokio::select! {
                        biased;
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(RECENT_GATHER) => {}
                    }
                    if let Err(e) = replica.apply_recent().await {
                        tracing::warn!(error = %e, "applying recent slots failed");
                    }
                }
            }
        }
        let mut before = None;
        let step = async {
            replica.catch_up().await?;
            before = Some(replica.state().clone());
            compactor.step(&mut replica).await
        };
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            result = step => match result {
                Ok(step) => {
                    let moved = matches!(step, Step::Written { .. } | Step::Adopted(_));
                    if let (true, Some(committer), Some(before)) = (moved, &committer, before) {
                        let paths = before.changed_paths(replica.state());
                        committer.shed(Folded::from_state(replica.state(), paths)).await;
                    }
                    if let Step::Written { sequence, dropped, .. } = &step {
                        // Off the commit path: copies of the section index follow the
                        // checkpoints (put after one is written, collected with the drop).
                        search.checkpointed(
                            dropped
                                .kept
                                .iter()
                                .copied()
                                .filter(|s| *s > quire_log::marker::GENESIS_SEQUENCE)
                                .min()
                                .unwrap_or(*sequence),
                        );
                    }
                    steps.send_replace(Some(step));
                }
                Err(e) => tracing::warn!(error = %e, "compaction step failed"),
            },
        }
    }
}
