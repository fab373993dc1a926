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

use std::ops::Bound;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use rustc_hash::FxHashMap;

use crate::error::{Error, ErrorKind, Op, Result};
use crate::ids::{Hash, WorldId};
use crate::marker::{GENESIS_SEQUENCE, genesis_tip};
use crate::metadata::{self, DocCatalog};
use crate::model::{DocState, HistoryBlockRef, Location, RecentVersions, VersionRecord};
use crate::path::{DocPath, is_hidden_name};
use crate::slot::{EncodedSlot, Entry};

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

/// A persistent map of `sorted` (strictly increasing keys) with full leaves.
///
/// Inserting keys in order leaves every B-tree leaf half full (each split keeps the lower
/// half, which no later key reaches). Inserting every other key first and then the rest puts
/// exactly one of the second pass's keys between each pair of neighbours in a half-full
/// leaf, so every leaf but the last ends full: half the nodes, and still ordinary inserts.
pub fn ordmap_from_sorted<K: Ord + Clone, V: Clone>(sorted: Vec<(K, V)>) -> OrdMap<K, V> {
    let mut map = OrdMap::new();
    let mut rest = Vec::with_capacity(sorted.len() / 2);
    for (i, (k, v)) in sorted.into_iter().enumerate() {
        if i % 2 == 0 {
            map.insert(k, v);
        } else {
            rest.push((k, v));
        }
    }
    for (k, v) in rest {
        map.insert(k, v);
    }
    map
}

/// [`ordmap_from_sorted`] for a set.
pub fn ordset_from_sorted<K: Ord + Clone>(sorted: Vec<K>) -> OrdSet<K> {
    let mut set = OrdSet::new();
    let mut rest = Vec::with_capacity(sorted.len() / 2);
    for (i, k) in sorted.into_iter().enumerate() {
        if i % 2 == 0 {
            set.insert(k);
        } else {
            rest.push(k);
        }
    }
    for k in rest {
        set.insert(k);
    }
    set
}

/// Sorts documents by path: their paths and positions are sorted (the two halves on two
/// threads, then merged), so a comparison reads the path without first reading the
/// document, and the documents are then moved into that order.
fn sort_by_path(docs: &mut Vec<Arc<DocState>>) {
    let mut keys: Vec<(&str, usize)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| (d.path.as_str(), i))
        .collect();
    if keys.len() < 1 << 14 {
        keys.sort_unstable();
    } else {
        let (left, right) = keys.split_at_mut(docs.len() / 2);
        std::thread::scope(|scope| {
            scope.spawn(|| right.sort_unstable());
            left.sort_unstable();
        });
        let mut merged = Vec::with_capacity(keys.len());
        let (left, right) = keys.split_at(docs.len() / 2);
        let (mut l, mut r) = (0, 0);
        while l < left.len() && r < right.len() {
            if right[r] < left[l] {
                merged.push(right[r]);
                r += 1;
            } else {
                merged.push(left[l]);
                l += 1;
            }
        }
        merged.extend_from_slice(&left[l..]);
        merged.extend_from_slice(&right[r..]);
        keys = merged;
    }
    let order: Vec<usize> = keys.into_iter().map(|(_, i)| i).collect();
    let mut slots: Vec<Option<Arc<DocState>>> =
        std::mem::take(docs).into_iter().map(Some).collect();
    *docs = order
        .into_iter()
        .map(|i| slots[i].take().expect("each document is placed once"))
        .collect();
}

/// The path of child `name` of directory `dir`: where a document named so would live, and
/// the prefix (with a `/` after it) of everything beneath a directory named so.
fn child_path(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// What a document counts as a child of its own directory.
fn leaf_counts(doc: &DocState) -> ChildCounts {
    let visible = !is_hidden_name(doc.path.name());
    ChildCounts {
        docs: 1,
        visible: u64::from(visible),
        live: u64::from(visible && !doc.archived),
        is_doc: true,
    }
}

/// One pass over path-sorted documents gathering what the indexes are built from, each
/// document's memory touched once: the document map's entries, the live body hashes, the
/// directory counters, and the first document whose path repeats its predecessor's.
///
/// Documents sharing a directory sit together in path order, so each run of them is counted
/// once and added to its directory's edges once.
struct Gathered<'a> {
    entries: Vec<(DocPath, Arc<DocState>)>,
    live: Vec<(Hash, DocPath)>,
    dir_edges: FxHashMap<(&'a str, &'a str), ChildCounts>,
    duplicate: Option<usize>,
}

fn gather(docs: &[Arc<DocState>]) -> Gathered<'_> {
    let mut out = Gathered {
        entries: Vec::with_capacity(docs.len()),
        live: Vec::with_capacity(docs.len()),
        dir_edges: FxHashMap::default(),
        duplicate: None,
    };
    let mut add_run = |first: usize, run: ChildCounts| {
        let mut edges: Vec<(&str, &str)> = docs[first].path.edges().collect();
        edges.pop();
        // Visible from a depth down: no hidden directory name from there to the run (the
        // run's own names are in its counts).
        let mut visible = true;
        for edge in edges.into_iter().rev() {
            visible &= !is_hidden_name(edge.1);
            let c = out.dir_edges.entry(edge).or_default();
            c.docs += run.docs;
            if visible {
                c.visible += run.visible;
                c.live += run.live;
            }
        }
    };
    let mut run_start = 0;
    let mut run_parent = "";
    let mut run = ChildCounts::default();
    let mut previous = "";
    for (i, doc) in docs.iter().enumerate() {
        let path = doc.path.as_str();
        if path == previous && out.duplicate.is_none() {
            out.duplicate = Some(i - 1);
        }
        previous = path;
        let slash = path.rfind('/').unwrap_or(0);
        let (parent, name) = (&path[..slash], &path[slash + 1..]);
        if i == 0 {
            run_parent = parent;
        } else if parent != run_parent {
            add_run(run_start, run);
            (run_start, run_parent, run) = (i, parent, ChildCounts::default());
        }
        let visible = !is_hidden_name(name);
        run.docs += 1;
        run.visible += u64::from(visible);
        run.live += u64::from(visible && !doc.archived);
        out.entries.push((doc.path.clone(), doc.clone()));
        if !doc.archived {
            out.live.push((doc.body_hash, doc.path.clone()));
        }
    }
    if !docs.is_empty() {
        add_run(run_start, run);
    }
    out
}

/// The directory counters from `dir_edges` (gathered from `docs`, path-sorted without
/// duplicates), refusing a document that lies beneath another.
fn children_from(
    docs: &[Arc<DocState>],
    dir_edges: FxHashMap<(&str, &str), ChildCounts>,
) -> Result<OrdMap<ChildKey, ChildCounts>> {
    // A document whose path is also a directory lies above the documents in it: name the
    // first such document in path order, at the first document beneath it.
    let above = dir_edges
        .keys()
        .map(|(dir, name)| child_path(dir, name))
        .filter(|path| {
            docs.binary_search_by(|d| d.path.as_str().cmp(path.as_str()))
                .is_ok()
        })
        .min();
    if let Some(above) = above {
        let below = format!("{above}/");
        let first_below = docs.partition_point(|d| d.path.as_str() < below.as_str());
        let at = docs
            .get(first_below)
            .map_or(above.as_str(), |d| d.path.as_str());
        return Err(Error::integrity(
            Op::Apply,
            at,
            format!("{above} is a document"),
        ));
    }
    // One shared string per directory, not one per child.
    let mut dirs: FxHashMap<&str, Arc<str>> = FxHashMap::default();
    let mut children: Vec<(ChildKey, ChildCounts)> = dir_edges
        .into_iter()
        .map(|((d, n), c)| {
            let dir = dirs.entry(d).or_insert_with(|| Arc::from(d)).clone();
            ((dir, Arc::from(n)), c)
        })
        .collect();
    drop(dirs);
    children.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(ordmap_from_sorted(children))
}

fn hidden_below(path: &DocPath, depth: usize) -> bool {
    path.edges()
        .skip(depth)
        .any(|(_, name)| is_hidden_name(name))
}

impl WorldState {
    /// An empty world at checkpoint zero.
    pub fn genesis(world: WorldId) -> WorldState {
        WorldState {
            world,
            sequence: GENESIS_SEQUENCE,
            tip: genesis_tip(world),
            docs: OrdMap::new(),
            children: OrdMap::new(),
            hashes: OrdSet::new(),
        }
    }

    /// A state restored from a checkpoint: `docs` at `sequence`, the next slot naming `tip`.
    /// Refuses a set of documents no log could have produced (a document beneath another).
    pub fn restore(
        world: WorldId,
        sequence: u64,
        tip: Hash,
        docs: impl IntoIterator<Item = DocState>,
    ) -> Result<WorldState> {
        let mut state = WorldState {
            sequence,
            tip,
            ..WorldState::genesis(world)
        };
        for doc in docs {
            let key = doc.path.as_str().to_owned();
            if state.docs.contains_key(&doc.path) {
                return Err(Error::integrity(Op::Apply, key, "duplicate document"));
            }
            if let Err(why) = state.topology_allows(&doc.path) {
                return Err(Error::integrity(Op::Apply, key, why));
            }
            state.insert_new(doc);
        }
        Ok(state)
    }

    /// [`WorldState::restore`] for a whole checkpoint at once: the same checks and the same
    /// state, built from the documents sorted by path with hashed look-ups and the three
    /// maps built on two threads, so a million documents load in a fraction of the time
    /// one-by-one inserts take.
    pub fn restore_bulk(
        world: WorldId,
        sequence: u64,
        tip: Hash,
        docs: Vec<DocState>,
    ) -> Result<WorldState> {
        WorldState::restore_shared(
            world,
            sequence,
            tip,
            docs.into_iter().map(Arc::new).collect(),
        )
    }

    /// [`WorldState::restore_bulk`] for documents already shared (so a loader that builds
    /// them on several threads moves pointers, not documents). Runs of path-sorted documents
    /// (one shard's, say) sort cheaply.
    pub fn restore_shared(
        world: WorldId,
        sequence: u64,
        tip: Hash,
        mut docs: Vec<Arc<DocState>>,
    ) -> Result<WorldState> {
        sort_by_path(&mut docs);
        // Two threads: each gathers half the documents; then one builds the document map
        // while the other builds the directory counters and the body-hash index.
        let (left, right) = docs.split_at(docs.len() / 2);
        let (mut first, second) = std::thread::scope(|scope| {
            let second = scope.spawn(|| gather(right));
            (
                gather(left),
                second.join().expect("index gatherer panicked"),
            )
        });
        let boundary =
            (!left.is_empty() && !right.is_empty() && left[left.len() - 1].path == right[0].path)
                .then(|| left.len() - 1);
        let duplicate = first
            .duplicate
            .or(boundary)
            .or(second.duplicate.map(|i| i + left.len()));
        if let Some(i) = duplicate {
            return Err(Error::integrity(
                Op::Apply,
                docs[i].path.as_str(),
                "duplicate document",
            ));
        }
        for (edge, c) in second.dir_edges {
            let total = first.dir_edges.entry(edge).or_default();
            total.docs += c.docs;
            total.visible += c.visible;
            total.live += c.live;
        }
        let mut entries = first.entries;
        entries.extend(second.entries);
        let mut live = first.live;
        live.extend(second.live);
        let dir_edges = first.dir_edges;
        let (docs_map, hashes, children) = std::thread::scope(|scope| {
            let indexer = scope.spawn(|| {
                let children = children_from(&docs, dir_edges);
                live.sort_unstable();
                (children, ordset_from_sorted(live))
            });
            let docs_map = ordmap_from_sorted(entries);
            let (children, hashes) = indexer.join().expect("index builder panicked");
            (docs_map, hashes, children)
        });
        let children = children?;
        Ok(WorldState {
            world,
            sequence,
            tip,
            docs: docs_map,
            children,
            hashes,
        })
    }

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

    /// Whether `dir` (canonical, `/` for the root) is a directory: the root always is; any
    /// other path is one while some document lies beneath it.
    pub fn is_dir(&self, dir: &str) -> bool {
        dir == "/" || self.has_descendant(dir)
    }

    /// Whether some document lies beneath `dir`.
    fn has_descendant(&self, dir: &str) -> bool {
        if dir.is_empty() {
            return false;
        }
        let prefix = child_path(dir, "");
        self.docs
            .range::<_, str>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .next()
            .is_some_and(|(path, _)| path.as_str().starts_with(&prefix))
    }

    /// The counters of `name` in `dir`.
    pub fn child(&self, dir: &str, name: &str) -> Option<ChildCounts> {
        if let Some(counts) = self.children.get(&(dir.into(), name.into())) {
            return Some(*counts);
        }
        if dir.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        self.docs
            .get(child_path(dir, name).as_str())
            .map(|doc| leaf_counts(doc))
    }

    /// The first document directly in the directory whose prefix (with its `/`) is
    /// `prefix`, at or after `from`; documents deeper down are skipped a subdirectory at a
    /// time.
    fn next_doc_child(&self, prefix: &str, from: Bound<String>) -> Option<&Arc<DocState>> {
        let mut from = from;
        loop {
            let bound = match &from {
                Bound::Included(p) => Bound::Included(p.as_str()),
                Bound::Excluded(p) => Bound::Excluded(p.as_str()),
                Bound::Unbounded => Bound::Unbounded,
            };
            let (path, doc) = self
                .docs
                .range::<_, str>((bound, Bound::Unbounded))
                .next()?;
            let rest = path.as_str().strip_prefix(prefix)?;
            match rest.find('/') {
                None => return Some(doc),
                // Past everything under `prefix + sub/`: `0` follows `/`.
                Some(i) => from = Bound::Included(format!("{prefix}{}0", &rest[..i])),
            }
        }
    }

    /// Immediate children of `dir` after `after` (exclusive; empty for the start), at most
    /// `limit` (0 for no limit): hidden names never, children holding only archived documents
    /// only with `include_archived`.
    ///
    /// Directories come from the directory counters, documents from the document map; the
    /// two are merged by name.
    pub fn list(
        &self,
        dir: &str,
        after: &str,
        limit: usize,
        include_archived: bool,
    ) -> Vec<DirEntry> {
        self.list_counted(dir, after, limit, |name, counts| {
            if is_hidden_name(name) {
                0
            } else if include_archived {
                counts.visible
            } else {
                counts.live
            }
        })
    }

    /// [`WorldState::list`] with hidden names and archived documents too: every child
    /// holding any document, what a backup or a verification walks.
    pub fn list_everything(&self, dir: &str, after: &str, limit: usize) -> Vec<DirEntry> {
        self.list_counted(dir, after, limit, |_, counts| counts.docs)
    }

    /// The children of `dir` after `after` for which `shown` counts a document.
    fn list_counted(
        &self,
        dir: &str,
        after: &str,
        limit: usize,
        shown: impl Fn(&str, ChildCounts) -> u64,
    ) -> Vec<DirEntry> {
        let mut out = Vec::new();
        if dir.is_empty() {
            return out;
        }
        let from: (Arc<str>, Arc<str>) = (dir.into(), after.into());
        let mut dirs = self
            .children
            .range(from..)
            .take_while(|((d, _), _)| &**d == dir)
            .map(|((_, name), counts)| (&**name, *counts))
            .peekable();
        let prefix = child_path(dir, "");
        let mut next_doc = self.next_doc_child(&prefix, Bound::Included(child_path(dir, after)));
        loop {
            let doc_child = next_doc.map(|doc| (doc.path.name(), leaf_counts(doc)));
            let (name, counts) = match (dirs.peek().copied(), doc_child) {
                (None, None) => break,
                (Some(d), Some(f)) if d.0 < f.0 => {
                    dirs.next();
                    d
                }
                (Some(d), None) => {
                    dirs.next();
                    d
                }
                (_, Some(f)) => {
                    let path = next_doc.map(|doc| doc.path.as_str().to_owned());
                    next_doc = path.and_then(|p| self.next_doc_child(&prefix, Bound::Excluded(p)));
                    f
                }
            };
            if name == after || shown(name, counts) == 0 {
                continue;
            }
            out.push(DirEntry {
                name: name.to_string(),
                is_dir: !counts.is_doc,
            });
            if limit != 0 && out.len() == limit {
                break;
            }
        }
        out
    }

    /// The smallest live path whose current body hashes to `body_hash`.
    pub fn lookup_hash(&self, body_hash: &Hash) -> Option<&DocPath> {
        self.hashes
            .range((*body_hash, DocPath::min_bound())..)
            .next()
            .filter(|(h, _)| h == body_hash)
            .map(|(_, p)| p)
    }

    /// Why a new document may not be created at `path`, if it may not.
    pub fn topology_allows(&self, path: &DocPath) -> Result<(), String> {
        for ancestor in path.ancestors() {
            if self.docs.contains_key(ancestor) {
                return Err(format!("{ancestor} is a document"));
            }
        }
        if self.has_descendant(path.as_str()) {
            return Err(format!("{path} is a directory"));
        }
        Ok(())
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

    /// Adds (`sign` 1) or removes (-1) a document's contribution to the directory counters
    /// (the document's own edge is not stored: [`WorldState::child`] derives it).
    fn count(&mut self, path: &DocPath, archived: bool, sign: i64) {
        let mut edges: Vec<(&str, &str)> = path.edges().collect();
        edges.pop();
        for (depth, (dir, name)) in edges.into_iter().enumerate() {
            let key: (Arc<str>, Arc<str>) = (dir.into(), name.into());
            let mut counts = self.children.get(&key).copied().unwrap_or_default();
            let visible = !hidden_below(path, depth);
            let step = |v: &mut u64, on: bool| {
                if on {
                    *v = v
                        .checked_add_signed(sign)
                        .expect("directory counter out of range");
                }
            };
            step(&mut counts.docs, true);
            step(&mut counts.visible, visible);
            step(&mut counts.live, visible && !archived);
            if counts.docs == 0 {
                self.children.remove(&key);
            } else {
                self.children.insert(key, counts);
            }
        }
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
    use crate::model::Location;

    fn doc(path: &str, archived: bool) -> DocState {
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

    /// What `list` should answer, computed from the documents alone.
    fn naive_list(docs: &[DocState], dir: &str, after: &str, archived: bool) -> Vec<DirEntry> {
        let prefix = child_path(dir, "");
        let mut names: std::collections::BTreeMap<String, (bool, bool, bool)> = Default::default();
        for doc in docs {
            let Some(rest) = doc.path.as_str().strip_prefix(&prefix) else {
                continue;
            };
            let name = rest.split('/').next().unwrap();
            let visible = !rest.split('/').any(is_hidden_name);
            let e = names.entry(name.to_owned()).or_default();
            e.0 |= rest.contains('/');
            e.1 |= visible;
            e.2 |= visible && !doc.archived;
        }
        names
            .into_iter()
            .filter(|(name, (_, visible, live))| {
                name.as_str() > after && if archived { *visible } else { *live }
            })
            .map(|(name, (is_dir, _, _))| DirEntry { name, is_dir })
            .collect()
    }

    #[test]
    fn listings_and_children_match_the_documents() {
        let paths = [
            "/a.md",
            "/a/x.md",
            "/a/.h/y.md",
            "/a/b/c.md",
            "/a/b.md",
            "/a!.md",
            "/a0.md",
            "/a/versions/v.md",
            "/b/c/d/e.md",
            "/b/c.md",
            "/b/c0/f.md",
            "/.top.md",
            "/z.md",
        ];
        let docs: Vec<DocState> = paths
            .iter()
            .enumerate()
            .filter(|(_, p)| **p != "/a.md")
            .map(|(i, p)| doc(p, i % 3 == 0))
            .collect();
        let (world, tip) = (WorldId([4; 16]), Hash::of(b"tip"));
        let state = WorldState::restore_bulk(world, 9, tip, docs.clone()).unwrap();
        assert_eq!(
            state,
            WorldState::restore(world, 9, tip, docs.clone()).unwrap()
        );
        state.check_indexes().unwrap();
        for dir in [
            "/", "/a", "/a/b", "/b", "/b/c", "/b/c/d", "/a/.h", "/missing",
        ] {
            for archived in [false, true] {
                let all = naive_list(&docs, dir, "", archived);
                assert_eq!(state.list(dir, "", 0, archived), all, "{dir}");
                for (i, entry) in all.iter().enumerate() {
                    let rest = naive_list(&docs, dir, &entry.name, archived);
                    assert_eq!(state.list(dir, &entry.name, 0, archived), rest);
                    assert_eq!(
                        state.list(dir, &entry.name, 1, archived),
                        rest[..rest.len().min(1)]
                    );
                    assert_eq!(all[i + 1..], rest[..]);
                }
            }
        }
        assert!(state.is_dir("/") && state.is_dir("/a") && state.is_dir("/b/c/d"));
        assert!(!state.is_dir("/a/x.md") && !state.is_dir("/c") && !state.is_dir(""));
        assert!(!state.is_dir("/a/"));
        assert!(state.list("", "", 0, true).is_empty());
        let leaf = state.child("/a", "x.md").unwrap();
        assert!(leaf.is_doc && leaf.docs == 1);
        let hidden = state.child("/", ".top.md").unwrap();
        assert_eq!((hidden.docs, hidden.visible), (1, 0));
        let dir = state.child("/b", "c").unwrap();
        assert!(!dir.is_doc && dir.docs == 1);
        assert_eq!(state.child("/a", "b").map(|c| c.docs), Some(1));
        assert_eq!(state.child("/", "a/x.md"), None);
        assert_eq!(state.child("/", "missing"), None);
        assert!(
            state
                .topology_allows(&DocPath::parse("/a").unwrap())
                .is_err()
        );
        assert!(
            state
                .topology_allows(&DocPath::parse("/a/x.md/y").unwrap())
                .is_err()
        );
        assert!(
            state
                .topology_allows(&DocPath::parse("/a/new.md").unwrap())
                .is_ok()
        );
    }

    #[test]
    fn packed_maps_hold_what_inserts_hold() {
        for n in [0u64, 1, 2, 63, 64, 65, 127, 128, 129, 4097, 20_000] {
            let pairs: Vec<(u64, u64)> = (0..n).map(|i| (i * 3, i)).collect();
            let packed = ordmap_from_sorted(pairs.clone());
            let inserted: OrdMap<u64, u64> = pairs.iter().copied().collect();
            assert_eq!(packed, inserted, "{n}");
            assert!(
                packed
                    .iter()
                    .map(|(k, v)| (*k, *v))
                    .eq(pairs.iter().copied())
            );
            let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
            let set = ordset_from_sorted(keys.clone());
            assert!(set.iter().copied().eq(keys.iter().copied()), "{n}");
            // Still an ordinary map: later inserts and removals land where they belong.
            let mut grown = packed.clone();
            grown.insert(1, 1);
            grown.remove(&0);
            assert_eq!(grown.len() as u64, n.max(1));
            assert_eq!(grown.get(&1), Some(&1));
        }
    }

    #[test]
    fn bulk_restore_matches_one_by_one_restore() {
        // Enough documents for the two-thread sort, far from path order, some hidden and
        // some archived.
        let docs: Vec<DocState> = (0..20_000u64)
            .map(|i| {
                let n = i * 7919 % 20_000;
                let hidden = if n % 11 == 0 { "." } else { "" };
                doc(&format!("/d{}/{hidden}{n}.md", n % 37), n % 5 == 0)
            })
            .collect();
        let (world, tip) = (WorldId([3; 16]), Hash::of(b"tip"));
        let one = WorldState::restore(world, 9, tip, docs.clone()).unwrap();
        let bulk = WorldState::restore_bulk(world, 9, tip, docs.clone()).unwrap();
        assert_eq!(one, bulk);
        assert_eq!(bulk.child("/", "d3").map(|c| c.is_doc), Some(false));
        // A document where a directory is, named at the first document beneath it.
        let mut above = docs;
        above.push(doc("/d3", false));
        let err = WorldState::restore_bulk(world, 9, tip, above).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Integrity);
        assert!(err.to_string().contains("/d3 is a document"), "{err}");
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
            let write = c.entry.write.as_ref();
            let provisional = write.map(|w| VersionRecord {
                version: c.entry.current,
                hash: w.hash,
                body_hash: c.entry.body_hash,
                modified: c.entry.modified,
                size: w.size,
                location: Location::Blob,
            });
            working.apply_entry(&c.entry, provisional).unwrap();
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
