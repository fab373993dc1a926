//! Moving a replica's base: installing a checkpoint it wrote, adopting one a peer wrote
//! (reading only the shards no tier of its base names), and what either leaves of the
//! tracker.

use std::collections::HashMap;
use std::sync::Arc;

use quire_log::model::HistoryBlockRef;
use quire_log::{DocPath, DocState, Hash};

use super::{Base, Replica, read_checkpoint, read_shards};
use crate::error::{Error, Op, Result};
use crate::keys::checkpoint_key;

impl Replica {
    /// Rests the state on `written`, a checkpoint this replica (or a job prepared from it)
    /// wrote: folds the documents it holds into their history blocks.
    pub fn install(&mut self, written: crate::write::Written) -> Result<()> {
        if written.base.sequence() <= self.base.sequence() {
            return Ok(());
        }
        for (path, history, through) in &written.folded {
            self.fold(path, history.clone(), *through, Op::Write)?;
        }
        self.rest_on(written.base);
        self.reads_ahead = self.may_read_ahead;
        Ok(())
    }

    pub(super) fn fold(
        &mut self,
        path: &DocPath,
        history: Arc<[HistoryBlockRef]>,
        through: u64,
        op: Op,
    ) -> Result<()> {
        let Some(doc) = self.state.doc(path) else {
            return Err(Error::integrity(
                op,
                path.as_str(),
                "checkpoint holds a document the log does not",
            ));
        };
        let covered = doc.history.last().map_or(0, |r| r.last);
        // The same versions under other references: a sealed epoch moved their block into
        // its pack.
        let moved = through == covered && doc.history != history;
        if (through <= covered && !moved) || through > doc.current {
            return Ok(());
        }
        self.state
            .fold_history(path, history, through)
            .map_err(|e| Error::from_log(op, e))
    }

    pub(super) fn rest_on(&mut self, base: Base) {
        let old_base_cut = self.base.root.tiers[0].cut;
        let tracker = &mut self.tracker;
        if (tracker.base_cut.as_ref()).is_some_and(|c| c.grid <= base.root.tiers[0].grid) {
            tracker.base_cut = None;
        }
        // The highest tier below the top: the newest run (or the base), or the middle tier.
        let held = base.root.tiers[base.root.tiers.len() - 2].grid;
        if (tracker.middle_cut.as_ref()).is_some_and(|c| c.grid <= held) {
            tracker.middle_cut = None;
        }
        tracker.runs.retain(|r| r.grid > held);
        let base_cut = base.root.tiers[0].cut;
        if base_cut > old_base_cut {
            self.tracker.changes = self
                .tracker
                .changes
                .iter()
                .filter(|(_, changed)| **changed > base_cut)
                .map(|(path, changed)| (path.clone(), *changed))
                .collect();
        }
        // Epochs the base sealed are written; a schema-1 base holds every change before it
        // in blocks of its own, so the open epoch restarts after it.
        if let Some(sealed) = base.root.sealed {
            self.tracker.sealed.retain(|epoch| epoch.cut > sealed);
            self.tracker.base_sealed = sealed;
            self.read_ahead.forget_through(sealed);
        }
        while self
            .tracker
            .slots
            .front()
            .is_some_and(|(last, _)| *last <= base.sequence())
        {
            self.tracker.slots.pop_front();
        }
        if (self.tracker.sealed_state.as_ref()).is_some_and(|s| s.sequence() <= base.sequence()) {
            self.tracker.sealed_state = None;
        }
        // Slots after a checkpoint behind the state (at an epoch cut) stay pending, counted
        // from now: the next checkpoint is due a full age later, not at once.
        self.pending_since = match self.tracker.slots.is_empty() {
            true => None,
            false => Some(self.clock.now()),
        };
        self.base = base;
    }

    /// Adopts checkpoint `sequence` written by a peer: catches up to it if needed, checks it
    /// against the slot chain, reads only the shards whose references differ from the base's
    /// and folds the documents they hold. Returns whether the base moved.
    pub async fn adopt(&mut self, sequence: u64) -> Result<bool> {
        let op = Op::Adopt;
        if sequence <= self.base.sequence() {
            return Ok(false);
        }
        if self.state.sequence() < sequence {
            self.catch_up_tip().await?;
        }
        let key = checkpoint_key(&self.prefix, sequence);
        if self.state.sequence() < sequence {
            return Err(Error::integrity(op, key, "checkpoint ahead of the log"));
        }
        let base =
            read_checkpoint(&*self.store, &self.prefix, sequence, self.state.world(), op).await?;
        if base.root.sealed.is_none() && self.base.root.sealed.is_some() {
            return Err(Error::integrity(
                op,
                key,
                "a schema-1 checkpoint after this format's: written by an older version",
            ));
        }
        if base.root.widths != self.base.root.widths {
            return Err(Error::integrity(
                op,
                key,
                "checkpoint changes the world's tier widths",
            ));
        }
        self.verify_tip(sequence, base.checkpoint.tip, op).await?;
        // A shard the base names anywhere holds nothing the state lacks: the same bytes
        // were loaded or adopted into it (a run keeps its shards as the base named them).
        let held: std::collections::HashSet<Hash> = self
            .base
            .root
            .tiers
            .iter()
            .flat_map(|t| t.shards.iter().flatten().copied())
            .collect();
        let mut changed = Vec::new();
        for (j, tier) in base.root.tiers.iter().enumerate() {
            for (i, hash) in tier.shards.iter().enumerate() {
                let Some(hash) = hash else { continue };
                if held.contains(hash) {
                    continue;
                }
                changed.push((j, i as u32, *hash));
            }
        }
        let loaded = read_shards(
            &self.store,
            &self.prefix,
            &base.root,
            sequence,
            changed,
            self.workers,
            op,
        )
        .await?;
        let mut newest: HashMap<DocPath, DocState> = HashMap::new();
        for (_, docs) in loaded {
            for (doc, _) in docs {
                match newest.get(&doc.path) {
                    Some(have) if have.current >= doc.current => {}
                    _ => {
                        newest.insert(doc.path.clone(), doc);
                    }
                }
            }
        }
        let mut checked = Vec::with_capacity(newest.len());
        for (path, doc) in newest {
            let Some(ours) = self.state.doc(&path) else {
                return Err(Error::integrity(
                    op,
                    path.as_str(),
                    "checkpoint holds a document the log does not",
                ));
            };
            if doc.current > ours.current {
                return Err(Error::integrity(
                    op,
                    path.as_str(),
                    "checkpoint is ahead of the log",
                ));
            }
            let ours_record = if ours.current == doc.current {
                Some(&ours.head)
            } else {
                ours.recent_version(doc.current)
            };
            if ours_record.is_some_and(|r| r.hash != doc.head.hash) {
                return Err(Error::integrity(
                    op,
                    path.as_str(),
                    "checkpoint disagrees with the log",
                ));
            }
            checked.push((path, doc.history, doc.current));
        }
        // Folded only once every document checked: a refused checkpoint leaves the state as
        // it was, so the replica can keep its base and write past it.
        for (path, history, current) in checked {
            self.fold(&path, history, current, op)?;
        }
        self.rest_on(base);
        // A peer writes the checkpoints now.
        self.reads_ahead = false;
        self.reading_ahead.abort_all();
        self.read_ahead.clear();
        Ok(true)
    }
}
