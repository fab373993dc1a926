//! The persistent world state and [`WorldState::apply`], the one function that advances it
//! (as a new state, or in place with [`WorldState::apply_in_place`]).
//!
//! A state is the world after some sequence: every document, the directory-children counters
//! listings and topology checks read, and the body-hash index of live documents. It is built
//! from persistent ordered maps, so a clone is O(1) and a snapshot pinned by a reader never
//! sees later changes; applying in place changes only the nodes no snapshot shares.
//!
//! `apply` accepts exactly the slots a correct writer could have committed on this state, and
//! refuses everything else as an integrity error:
//! - the slot belongs to this world, starts at `sequence + 1` and names `tip` as `prev`;
//! - a write to a new path is version 1 (first retained 1), live, and the topology allows the
//!   path: no document at any ancestor, no document beneath it;
//! - a write to an existing path needs it live, advances `current` by exactly one, names the
//!   current version's hash as `previous`, and moves the first retained version exactly as
//!   its `retention` metadata says (not at all without it);
//! - an archive transition names the document's current version, body hash, modification time
//!   and first retained version exactly, and flips the archived flag.
//!
//! Entries apply in order, so one slot may touch a path more than once.
//!
//! | file | owns |
//! | --- | --- |
//! | `mod.rs` | the state, its accessors, `apply` and the per-entry step |
//! | `restore.rs` | building a state from a checkpoint's documents, in bulk |
//! | `directory.rs` | the directory counters, topology searches and listings |

mod directory;
mod restore;

use std::sync::Arc;

use imbl::{OrdMap, OrdSet};

use crate::error::{Error, ErrorKind, Op, Result};
use crate::ids::{Hash, WorldId};
use crate::metadata::{self, DocCatalog};
use crate::model::{DocState, HistoryBlockRef, Location, RecentVersions, VersionRecord};
use crate::path::DocPath;
use crate::slot::{EncodedSlot, Entry};

pub use restore::{ordmap_from_sorted, ordset_from_sorted};

/// Counters of one directory child (`dir`, `name`): the documents at or beneath it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildCounts {
    /// Documents at or beneath the child.
    pub docs: u64,
    /// Of those, documents with no hidden segment from the child down.
    pub visible: u64,
    /// Of the visible ones, those not archived.
    pub live: u64,
    /// Whether the child is a document (otherwise a directory).
    pub is_doc: bool,
}

/// `(directory, child name)`.
type ChildKey = (Arc<str>, Arc<str>);

/// Whether applying an entry that creates a document searches for documents above and
/// beneath its path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Topology {
    Check,
    /// The entry's build judged it on this same state.
    Judged,
}

/// An entry's path and the document there before it (`None`: there was none).
type Undo = (DocPath, Option<DocState>);

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub is_dir: bool,
}

/// The world after some sequence. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WorldState {
    world: WorldId,
    sequence: u64,
    tip: Hash,
    docs: OrdMap<DocPath, Arc<DocState>>,
    /// Counters of every directory child; a document child's are derived from the document.
    children: OrdMap<ChildKey, ChildCounts>,
    hashes: OrdSet<(Hash, DocPath)>,
}

impl PartialEq for WorldState {
    /// Equal when both hold the same world at the same sequence with the same documents (the
    /// derived indexes follow from the documents).
    fn eq(&self, other: &Self) -> bool {
        self.world == other.world
            && self.sequence == other.sequence
            && self.tip == other.tip
            && self.docs == other.docs
            && self.children == other.children
            && self.hashes == other.hashes
    }
}

impl WorldState {
    pub fn world(&self) -> WorldId {
        self.world
    }

    /// The last sequence applied.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The hash the next slot must name as `prev`.
    pub fn tip(&self) -> Hash {
        self.tip
    }

    pub fn doc(&self, path: &DocPath) -> Option<&Arc<DocState>> {
        self.docs.get(path)
    }

    pub fn doc_count(&self) -> u64 {
        self.docs.len() as u64
    }

    /// Every document in path order.
    pub fn docs(&self) -> impl Iterator<Item = &Arc<DocState>> {
        self.docs.values()
    }

    /// The smallest live path whose current body hashes to `body_hash`.
    pub fn lookup_hash(&self, body_hash: &Hash) -> Option<&DocPath> {
        self.hashes
            .range((*body_hash, DocPath::min_bound())..)
            .next()
            .filter(|(h, _)| h == body_hash)
            .map(|(_, p)| p)
    }

    /// Applies a slot, returning the next state; `self` is unchanged either way.
    pub fn apply(&self, slot: &EncodedSlot) -> Result<WorldState> {
        let mut next = self.clone();
        next.apply_slot(slot, None)?;
        Ok(next)
    }

    /// Applies a slot to this state in place: the maps' nodes and documents no other state
    /// shares are changed where they are, not copied (a snapshot cloned earlier still sees
    /// the old state). A refused slot leaves the state exactly as it was: the entries it had
    /// applied are undone.
    pub fn apply_in_place(&mut self, slot: &EncodedSlot) -> Result<()> {
        let mut undo = Vec::with_capacity(slot.slot.entries.len());
        let applied = self.apply_slot(slot, Some(&mut undo));
        if applied.is_err() {
            for (path, prior) in undo.into_iter().rev() {
                self.restore_doc(&path, prior);
            }
        }
        applied
    }

    /// The checks and entries of `apply`, recording in `undo` (when given) each entry's path
    /// and the document there before it.
    fn apply_slot(&mut self, slot: &EncodedSlot, mut undo: Option<&mut Vec<Undo>>) -> Result<()> {
        let key = || format!("log/{:016x}", slot.slot.first);
        let bad = |why: String| Error::integrity(Op::Apply, key(), why);
        if slot.slot.world != self.world {
            return Err(bad(format!(
                "slot of world {} applied to world {}",
                slot.slot.world, self.world
            )));
        }
        if slot.slot.first != self.sequence + 1 {
            return Err(bad(format!(
                "slot starts at {} but the state is at {}",
                slot.slot.first, self.sequence
            )));
        }
        if slot.slot.prev != self.tip {
            return Err(bad("slot does not chain onto the tip".into()));
        }
        for (i, entry) in slot.slot.entries.iter().enumerate() {
            let record = entry.write.as_ref().map(|w| VersionRecord {
                version: entry.current,
                hash: w.hash,
                body_hash: entry.body_hash,
                modified: entry.modified,
                size: w.size,
                location: slot.location(i),
            });
            let prior = self
                .step(entry, record, undo.is_some(), Topology::Check)
                .map_err(|why| bad(format!("entry {i} ({}): {why}", entry.path)))?;
            if let Some(undo) = undo.as_deref_mut() {
                undo.push((entry.path.clone(), prior));
            }
        }
        self.sequence = slot.slot.last();
        self.tip = slot.hash;
        Ok(())
    }

    /// Makes this state, built by [`WorldState::apply_entry`] from the state `slot` follows
    /// with provisional locations for the slot's versions, the state `apply` gives: the
    /// slot's inline versions are located in it, and its sequence and tip move past it.
    ///
    /// The committer seals a batch this way instead of applying the slot again to the state
    /// before it: each entry was already checked by the same step on the same state, and
    /// locating touches only the nodes the batch itself copied. Refuses a slot that does not
    /// follow this state's sequence and tip, or a version this state does not hold.
    pub(crate) fn settle(&mut self, slot: &EncodedSlot) -> Result<()> {
        let key = || format!("log/{:016x}", slot.slot.first);
        let bad = |why: String| Error::integrity(Op::Apply, key(), why);
        if slot.slot.world != self.world
            || slot.slot.first != self.sequence + 1
            || slot.slot.prev != self.tip
        {
            return Err(bad("slot does not follow the state it settles".into()));
        }
        for (i, entry) in slot.slot.entries.iter().enumerate() {
            let location = slot.location(i);
            if entry.write.is_none() || location == Location::Blob {
                continue;
            }
            let Some(handle) = self.docs.get_mut(&entry.path) else {
                return Err(bad(format!("entry {i} ({}): no document", entry.path)));
            };
            if entry.current < handle.first {
                // A later entry of the slot pruned the version.
                continue;
            }
            let doc = Arc::make_mut(handle);
            if doc.head.version == entry.current {
                doc.head.location = location;
            }
            if !doc.recent.locate(entry.current, location) {
                return Err(bad(format!(
                    "entry {i} ({}): version {} is not held",
                    entry.path, entry.current
                )));
            }
        }
        self.sequence = slot.slot.last();
        self.tip = slot.hash;
        Ok(())
    }

    /// Applies one entry (its version record already located). Used by `apply` and by the
    /// committer to chain members of a batch being built.
    pub(crate) fn apply_entry(
        &mut self,
        entry: &Entry,
        record: Option<VersionRecord>,
    ) -> Result<(), String> {
        self.step(entry, record, false, Topology::Check).map(drop)
    }

    /// [`WorldState::apply_entry`] for an entry [`crate::build::build`] just built on this
    /// very state: it already found the topology allows a new path, so that is not searched
    /// again.
    pub(crate) fn apply_built(
        &mut self,
        entry: &Entry,
        record: Option<VersionRecord>,
    ) -> Result<(), String> {
        self.step(entry, record, false, Topology::Judged).map(drop)
    }

    /// Applies one entry, or refuses it leaving the state untouched. With `keep_prior`,
    /// returns the document at the path before (`None` for a new one; a copy that shares
    /// its records with the document it was).
    ///
    /// The document map is searched once: an existing document is checked and changed
    /// through the one mutable handle (nodes and document copied only where shared).
    fn step(
        &mut self,
        entry: &Entry,
        record: Option<VersionRecord>,
        keep_prior: bool,
        topology: Topology,
    ) -> Result<Option<DocState>, String> {
        if let Some(write) = &entry.write
            && !write.catalog.derives_from_metadata()
        {
            return Err("catalog record does not derive from its metadata".into());
        }
        let Some(handle) = self.docs.get_mut(&entry.path) else {
            return match (&entry.write, record) {
                (Some(write), Some(record)) => {
                    if entry.current != 1 || entry.first != 1 {
                        return Err("a new document must start at version 1".into());
                    }
                    if topology == Topology::Check {
                        self.topology_allows(&entry.path)?;
                    }
                    self.insert_new(DocState {
                        path: entry.path.clone(),
                        current: 1,
                        first: 1,
                        archived: false,
                        body_hash: entry.body_hash,
                        modified: entry.modified,
                        catalog: DocCatalog::from(&write.catalog),
                        head: record.clone(),
                        history: Arc::from(Vec::<HistoryBlockRef>::new()),
                        recent: RecentVersions::from_iter([record]),
                    });
                    Ok(None)
                }
                (None, _) => Err("archive transition of a missing document".into()),
                (Some(_), None) => Err("write without a version record".into()),
            };
        };
        let old: &DocState = handle;
        match (&entry.write, record) {
            (Some(write), Some(record)) => {
                if old.archived {
                    return Err("write to an archived document".into());
                }
                if entry.current != old.current + 1 {
                    return Err(format!(
                        "version {} does not follow {}",
                        entry.current, old.current
                    ));
                }
                if write.previous != Some(old.head.hash) {
                    return Err("previous hash does not name the current version".into());
                }
                // Retention is the only thing that moves the first retained version, and only
                // the version that carries it: versions at or below current − R go.
                let retention = write
                    .catalog
                    .metadata
                    .get("retention")
                    .and_then(|r| metadata::parse_retention(r));
                let expected_first = match retention {
                    Some(keep) if entry.current > u64::from(keep) => {
                        (entry.current - u64::from(keep) + 1).max(old.first)
                    }
                    _ => old.first,
                };
                if entry.first != expected_first {
                    return Err(format!(
                        "first retained version {} where retention gives {expected_first}",
                        entry.first
                    ));
                }
                // An unchanged catalog keeps the record the document already shares.
                let same_catalog = old.catalog.title() == write.catalog.title
                    && old.catalog.metadata_is(&write.catalog.metadata);
                let prior = keep_prior.then(|| old.clone());
                let old_hash = old.body_hash;
                let doc = Arc::make_mut(handle);
                doc.current = entry.current;
                doc.first = entry.first;
                doc.body_hash = entry.body_hash;
                doc.modified = entry.modified;
                if !same_catalog {
                    doc.catalog = DocCatalog::from(&write.catalog);
                }
                doc.head = record.clone();
                doc.recent.push_back(record);
                while doc.recent.front().is_some_and(|r| r.version < doc.first) {
                    doc.recent.pop_front();
                }
                if old_hash != entry.body_hash {
                    self.hashes.remove(&(old_hash, entry.path.clone()));
                    self.hashes.insert((entry.body_hash, entry.path.clone()));
                }
                Ok(prior)
            }
            (None, _) => {
                if entry.current != old.current
                    || entry.first != old.first
                    || entry.body_hash != old.body_hash
                    || entry.modified != old.modified
                {
                    return Err("archive transition does not name the current version".into());
                }
                if entry.archived == old.archived {
                    return Err("archive transition does not change the archived flag".into());
                }
                let prior = keep_prior.then(|| old.clone());
                Arc::make_mut(handle).archived = entry.archived;
                // Counted as the new flag before uncounted as the old, so no counter empties.
                self.count(&entry.path, entry.archived, 1);
                self.count(&entry.path, !entry.archived, -1);
                let indexed = (entry.body_hash, entry.path.clone());
                if entry.archived {
                    self.hashes.remove(&indexed);
                } else {
                    self.hashes.insert(indexed);
                }
                Ok(prior)
            }
            (Some(_), None) => Err("write without a version record".into()),
        }
    }

    /// Puts `prior` (or nothing) back at `path` in place of what an applied entry left there,
    /// with the indexes.
    fn restore_doc(&mut self, path: &DocPath, prior: Option<DocState>) {
        if let Some(current) = self.docs.remove(path) {
            self.index(&current, -1);
        }
        if let Some(prior) = prior {
            self.index(&prior, 1);
            self.docs.insert(path.clone(), Arc::new(prior));
        }
    }

    /// Adds (`sign` 1) or removes (-1) a document's entries in the derived indexes.
    fn index(&mut self, doc: &DocState, sign: i64) {
        self.count(&doc.path, doc.archived, sign);
        if !doc.archived {
            let indexed = (doc.body_hash, doc.path.clone());
            if sign > 0 {
                self.hashes.insert(indexed);
            } else {
                self.hashes.remove(&indexed);
            }
        }
    }

    fn insert_new(&mut self, doc: DocState) {
        self.index(&doc, 1);
        self.docs.insert(doc.path.clone(), Arc::new(doc));
    }

    /// Records that a checkpoint holds `path`'s versions through `through` in the history
    /// blocks `history`: the document's folded history becomes `history` and its recent
    /// versions at or below `through` are dropped. What readers see does not change. Refuses
    /// a missing document, one that never reached `through`, or a history that does not end
    /// at `through`.
    pub fn fold_history(
        &mut self,
        path: &DocPath,
        history: Arc<[HistoryBlockRef]>,
        through: u64,
    ) -> Result<()> {
        let bad = |why: &str| Error::integrity(Op::Apply, path.as_str(), why.to_owned());
        let Some(old) = self.docs.get(path) else {
            return Err(bad("folded history of a missing document"));
        };
        if through > old.current {
            return Err(bad("folded history reaches past the current version"));
        }
        if history.last().map(|b| b.last) != Some(through) {
            return Err(bad("folded history does not end at the version it holds"));
        }
        let mut doc = (**old).clone();
        doc.history = history;
        doc.recent = doc
            .recent
            .iter()
            .filter(|r| r.version > through)
            .cloned()
            .collect();
        self.docs.insert(path.clone(), Arc::new(doc));
        Ok(())
    }

    /// The paths whose document differs between this state and `newer` (added, changed or
    /// gone). Subtrees the two states share are skipped, so a state a few slots ahead costs
    /// little more than its changes.
    pub fn changed_paths(&self, newer: &WorldState) -> Vec<DocPath> {
        self.docs
            .diff(&newer.docs)
            .map(|item| match item {
                imbl::ordmap::DiffItem::Add(path, _) | imbl::ordmap::DiffItem::Remove(path, _) => {
                    path.clone()
                }
                imbl::ordmap::DiffItem::Update { new: (path, _), .. } => path.clone(),
            })
            .collect()
    }

    /// Checks that the state's derived indexes match its documents (a self-test for replay
    /// and checkpoint restore; O(documents)).
    pub fn check_indexes(&self) -> Result<()> {
        let rebuilt = WorldState::restore(
            self.world,
            self.sequence,
            self.tip,
            self.docs.values().map(|d| (**d).clone()),
        )?;
        if rebuilt.children != self.children || rebuilt.hashes != self.hashes {
            return Err(Error::new(
                Op::Apply,
                "",
                ErrorKind::Integrity,
                "derived indexes disagree with the documents",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Timestamp;
    use crate::metadata::{Catalog, Metadata};

    /// A live or archived document at `path`, version 1, its body the path.
    pub(in crate::state) fn doc(path: &str, archived: bool) -> DocState {
        let path = DocPath::parse(path).unwrap();
        let body_hash = Hash::of(path.as_str().as_bytes());
        let head = VersionRecord {
            version: 1,
            hash: body_hash,
            body_hash,
            modified: Timestamp(1),
            size: 1,
            location: Location::Blob,
        };
        DocState {
            catalog: DocCatalog::from(&Catalog::derive(&path, &Metadata::new(), "")),
            path,
            current: 1,
            first: 1,
            archived,
            body_hash,
            modified: Timestamp(1),
            head,
            history: Arc::from(Vec::new()),
            recent: RecentVersions::default(),
        }
    }

    /// A batch built entry by entry with provisional locations, then settled, is the state
    /// its slot applied to the state before gives: inline and blob versions, one path
    /// written twice with the second pruning the first, an archive.
    #[test]
    fn a_settled_batch_is_its_slot_applied() {
        use crate::testing::{archive, change, commit, meta, publish, publish_with, seal};
        let mut base = WorldState::genesis(crate::testing::WORLD);
        let mut bases = Vec::new();
        commit(
            &mut base,
            &[publish("/old.md", "one"), publish("/gone.md", "two")],
            true,
            &mut bases,
        );
        let mutations = [
            (publish("/new.md", "inline"), true),
            (publish("/blob.md", "stored apart"), false),
            (publish("/old.md", "second"), true),
            (
                publish_with("/old.md", "third", meta(&[("retention", "1")])),
                true,
            ),
            (archive("/gone.md", true), true),
        ];
        let mut working = base.clone();
        let mut changes = Vec::new();
        for (i, (mutation, inline)) in mutations.iter().enumerate() {
            let c = change(&working, mutation, 40 + i as u8, *inline, &bases);
            working
                .apply_entry(&c.entry, Some(c.provisional_record()))
                .unwrap();
            changes.push(c);
        }
        let slot = seal(&base, &changes);
        let applied = base.apply(&slot).unwrap();
        assert_ne!(
            working, applied,
            "provisional locations differ before settling"
        );
        let mut settled = working.clone();
        settled.settle(&slot).unwrap();
        assert_eq!(settled, applied);
        let new = settled.doc(&DocPath::parse("/new.md").unwrap()).unwrap();
        assert!(matches!(new.head.location, Location::Inline { .. }));
        // A state the slot does not follow is refused and left as it was.
        let mut behind = working.clone();
        behind.settle(&slot).unwrap();
        let err = behind.settle(&slot).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Integrity);
        assert_eq!(behind, applied);
    }
}
