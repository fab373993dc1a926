//! What a replica keeps for its next checkpoint beside the world state: each document's
//! last change, the states at the newest base and run grid points, each ended run's and
//! epoch's documents, and the state at the newest epoch cut. `track` records them as slots
//! are applied; moving the base (`adopt`) drops what it holds.

use std::collections::VecDeque;
use std::sync::Arc;

use imbl::OrdMap;
use quire_log::slot::EncodedSlot;
use quire_log::{DocPath, DocState, Hash, WorldState};

use super::Replica;
use crate::format::{epoch_width, grid};

/// The state at a tier's grid point, kept until a checkpoint holds that tier.
#[derive(Clone, Debug)]
pub(crate) struct Cut {
    pub grid: u64,
    pub state: WorldState,
    pub changes: OrdMap<DocPath, u64>,
}

/// What the next checkpoint needs to know about the log since the base.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tracker {
    /// Per document changed after the base tier's cut: the last sequence of the slot that
    /// last changed it. Documents loaded from an upper tier carry that tier's cut instead,
    /// which classifies them the same way against every later grid point.
    pub changes: OrdMap<DocPath, u64>,
    /// The state at the newest grid point of the base width crossed but not yet held by a
    /// checkpoint.
    pub base_cut: Option<Cut>,
    /// The state at the newest grid point of the run width crossed but not yet held by a
    /// checkpoint: a schema-2 checkpoint's middle tier.
    pub middle_cut: Option<Cut>,
    /// The runs ended after the newest base grid point and not yet held by a checkpoint,
    /// oldest first.
    pub runs: Vec<Run>,
    /// Documents changed after the newest run grid point's cut, each with the sequence of
    /// the change (a path repeats when it changed again).
    pub run_changes: Vec<(DocPath, u64)>,
    /// Slots applied after the base: their last sequence and hash.
    pub slots: VecDeque<(u64, Hash)>,
    /// The cut of the newest history-epoch grid point the state has reached: changes after
    /// it are in the open epoch.
    pub open_cut: u64,
    /// The base's sealed cut: documents whose last change is at or before it have their
    /// history where the base names it.
    pub base_sealed: u64,
    /// Documents changed after `open_cut`, each with the sequence of the change (a path
    /// repeats when it changed again).
    pub epoch_changes: Vec<(DocPath, u64)>,
    /// Epochs ended after the base's sealed cut, oldest first: their packs are the next
    /// checkpoint's to write.
    pub sealed: Vec<Sealed>,
    /// The state at `open_cut`, when this replica crossed it after its base: a checkpoint
    /// there has no open epoch (see [`Replica::prepare_sealed`]).
    pub sealed_state: Option<WorldState>,
}

/// A run that ended: the documents whose last change falls after the cut of the run grid
/// point before it, as they stood at the cut of its own, in path order. Only these are
/// kept, not the state: a replica that writes no checkpoint for a base period keeps up to
/// [`crate::format::MAX_RUNS`] of them.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    pub grid: u64,
    pub cut: u64,
    pub docs: Vec<(Arc<DocState>, u64)>,
}

/// A history epoch that ended: the documents whose last change falls in it, as they stood
/// at its cut, in path order.
#[derive(Clone, Debug)]
pub(crate) struct Sealed {
    pub cut: u64,
    pub docs: Vec<(Arc<DocState>, u64)>,
}

/// Change marks collected while a replica replays, inserted into its tracker when the
/// replay ends however it ends: finished, failed part way, or dropped part way.
pub(super) struct Marking<'a> {
    pub(super) replica: &'a mut Replica,
    pub(super) pending: Vec<(DocPath, u64)>,
}

impl Drop for Marking<'_> {
    fn drop(&mut self) {
        self.replica.mark_changes(&mut self.pending);
    }
}

/// The documents `changes` names (in any order, a path repeating when it changed again),
/// each as `state` holds it with its last change, in path order.
pub(super) fn latest_docs(
    state: &WorldState,
    mut changes: Vec<(DocPath, u64)>,
) -> Vec<(Arc<DocState>, u64)> {
    changes.sort_unstable();
    changes.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            earlier.1 = earlier.1.max(later.1);
            true
        } else {
            false
        }
    });
    changes
        .into_iter()
        .filter_map(|(path, changed)| state.doc(&path).map(|d| (d.clone(), changed)))
        .collect()
}

impl Replica {
    /// Inserts collected change marks into the tracker. In path order, each insert finds
    /// the map's nodes the one before it just walked still in cache, where marks in log
    /// order would each walk a cold path; for a path marked twice the later mark wins.
    pub(super) fn mark_changes(&mut self, pending: &mut Vec<(DocPath, u64)>) {
        pending.sort_unstable();
        for (path, last) in pending.drain(..) {
            self.tracker.changes.insert(path, last);
        }
    }

    /// Records what the next checkpoint needs of `slot`, just applied to the state (which
    /// was at `before`). Change marks go into `pending` when given, else into the tracker.
    pub(super) fn track(
        &mut self,
        slot: &EncodedSlot,
        before: u64,
        pending: Option<&mut Vec<(DocPath, u64)>>,
    ) {
        let last = slot.slot.last();
        self.tracker
            .epoch_changes
            .extend(slot.slot.entries.iter().map(|e| (e.path.clone(), last)));
        self.tracker
            .run_changes
            .extend(slot.slot.entries.iter().map(|e| (e.path.clone(), last)));
        let marks = slot.slot.entries.iter().map(|e| (e.path.clone(), last));
        let pending = match pending {
            Some(pending) => {
                pending.extend(marks);
                Some(pending)
            }
            None => {
                for (path, last) in marks {
                    self.tracker.changes.insert(path, last);
                }
                None
            }
        };
        let widths = self.base.root.widths;
        let epoch = epoch_width(&widths);
        if grid(epoch, last) > grid(epoch, before) {
            self.seal_epoch(last);
        }
        let [base_width, run_width] = widths;
        let (from, to) = (grid(run_width, before), grid(run_width, last));
        if to > from {
            if let Some(pending) = pending {
                self.mark_changes(pending);
            }
            let base_grid = grid(base_width, last);
            let cut = Cut {
                grid: to,
                state: self.state.clone(),
                changes: self.tracker.changes.clone(),
            };
            if base_grid > grid(base_width, before) {
                self.tracker.base_cut = Some(Cut {
                    grid: base_grid,
                    ..cut.clone()
                });
                // Runs start again after the base.
                self.tracker.runs.clear();
            }
            self.tracker.middle_cut = Some(cut);
            // A slot holding several grid points is the cut of each: the documents lie in
            // the window the first one ends (the base's, when that is a base grid point),
            // and the others are empty.
            let mut docs = latest_docs(&self.state, std::mem::take(&mut self.tracker.run_changes));
            for k in from / run_width + 1..=to / run_width {
                let docs = std::mem::take(&mut docs);
                if k * run_width > base_grid {
                    self.tracker.runs.push(Run {
                        grid: k * run_width,
                        cut: last,
                        docs,
                    });
                }
            }
        }
        self.tracker.slots.push_back((last, slot.hash));
        if self.pending_since.is_none() {
            self.pending_since = Some(self.clock.now());
        }
    }

    /// Ends the open history epoch at `cut` (the state's sequence, the end of the slot
    /// holding the epoch's grid point): keeps each document changed in it as it stands now.
    pub(super) fn seal_epoch(&mut self, cut: u64) {
        let changes = std::mem::take(&mut self.tracker.epoch_changes);
        let docs = latest_docs(&self.state, changes);
        if self.reads_ahead
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let ahead = self.read_ahead.clone();
            let folded = docs.iter().map(|(d, _)| d.clone()).collect();
            let read = ahead.read(self.store.clone(), self.prefix.clone(), cut, folded);
            while self.reading_ahead.try_join_next().is_some() {}
            self.reading_ahead.spawn_on(read, &runtime);
        }
        self.tracker.sealed.push(Sealed { cut, docs });
        self.tracker.open_cut = cut;
        self.tracker.sealed_state = Some(self.state.clone());
    }
}
