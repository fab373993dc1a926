//! Shedding: folding what a newer checkpoint holds into every state the committer keeps,
//! so what it retains stays bounded.

use std::sync::Arc;

use super::pipeline::Actor;
use crate::model::HistoryBlockRef;
use crate::path::DocPath;
use crate::state::WorldState;

/// What a checkpoint holds of one document: its versions through `through`, in the history
/// blocks `history` (the checkpoint's list for the document, oldest first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    pub path: DocPath,
    pub history: Arc<[HistoryBlockRef]>,
    pub through: u64,
}

impl Folded {
    /// What `checkpointed`, a state resting on a checkpoint, holds folded for each of
    /// `paths`; documents it holds no history blocks for are skipped.
    pub fn from_state(
        checkpointed: &WorldState,
        paths: impl IntoIterator<Item = DocPath>,
    ) -> Vec<Folded> {
        paths
            .into_iter()
            .filter_map(|path| {
                let doc = checkpointed.doc(&path)?;
                let through = doc.history.last()?.last;
                Some(Folded {
                    history: doc.history.clone(),
                    through,
                    path,
                })
            })
            .collect()
    }
}

/// Folds what a checkpoint holds of one document into `state`, when `state` has the
/// document at or past `through` and does not already hold that much folded. What readers
/// see does not change.
fn fold_into(state: &mut WorldState, folded: &Folded) {
    let Some(doc) = state.doc(&folded.path) else {
        return;
    };
    let covered = doc.history.last().map_or(0, |b| b.last);
    if folded.through <= covered || folded.through > doc.current {
        return;
    }
    if let Err(e) = state.fold_history(&folded.path, folded.history.clone(), folded.through) {
        tracing::warn!("could not shed the history of {}: {e}", folded.path);
    }
}

/// How many documents the committer folds per turn of its loop, so shedding a large
/// checkpoint does not hold up commits.
const SHED_PER_TURN: usize = 256;

impl Actor {
    /// Folds up to [`SHED_PER_TURN`] documents of what checkpoints hold into every state the
    /// committer keeps: the tail, each batch's working and sealed states, and the served
    /// state (without waking its watchers: what they see does not change).
    pub(super) fn shed_some(&mut self) {
        let take = self.shedding.len().min(SHED_PER_TURN);
        if take == 0 {
            return;
        }
        let chunk: Vec<Folded> = self.shedding.drain(..take).collect();
        for folded in &chunk {
            fold_into(&mut self.tail, folded);
            for batch in &mut self.batches {
                fold_into(&mut batch.working, folded);
                if let Some(sealed) = &mut batch.sealed {
                    fold_into(&mut sealed.result, folded);
                }
            }
        }
        let tail = &self.tail;
        self.shared.served.send_if_modified(|served| {
            if served.sequence() == tail.sequence() {
                *served = tail.clone();
            } else {
                for folded in &chunk {
                    fold_into(served, folded);
                }
            }
            false
        });
        if self.shedding.is_empty() {
            for done in self.shed_waiters.drain(..) {
                let _ = done.send(());
            }
        }
    }
}
