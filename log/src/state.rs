//! The persistent world state and [`WorldState::apply`], the one function that advances it.
//!
//! A state is the world after some sequence: every document, the directory-children counters
//! listings and topology checks read, and the body-hash index of live documents. It is built
//! from persistent ordered maps, so a clone is O(1) and a snapshot pinned by a reader never
//! sees later changes.
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

use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use rustc_hash::FxHashMap;

use crate::error::{Error, ErrorKind, Op, Result};
use crate::ids::{Hash, WorldId};
use crate::marker::{GENESIS_SEQUENCE, genesis_tip};
use crate::metadata;
use crate::model::{DocState, HistoryBlockRef, RecentVersions, VersionRecord};
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

/// Sorts documents by path, the two halves on two threads, then merges them.
fn sort_by_path(docs: &mut Vec<Arc<DocState>>) {
    let by_path = |a: &Arc<DocState>, b: &Arc<DocState>| a.path.cmp(&b.path);
    if docs.len() < 1 << 14 {
        docs.sort_by(by_path);
        return;
    }
    let mut right = docs.split_off(docs.len() / 2);
    std::thread::scope(|scope| {
        scope.spawn(|| right.sort_by(by_path));
        docs.sort_by(by_path);
    });
    let mut merged = Vec::with_capacity(docs.len() + right.len());
    let mut left = std::mem::take(docs).into_iter().peekable();
    let mut right = right.into_iter().peekable();
    while let (Some(l), Some(r)) = (left.peek(), right.peek()) {
        let next = if r.path < l.path {
            right.next()
        } else {
            left.next()
        };
        merged.extend(next);
    }
    merged.extend(left);
    merged.extend(right);
    *docs = merged;
}

/// The directory counters of `docs` (path-sorted, no duplicates), refusing a document that
/// lies beneath another.
fn children_of(docs: &[Arc<DocState>]) -> Result<OrdMap<ChildKey, ChildCounts>> {
    // A document's own edge is its alone; only directory edges (few) need counting in a
    // map, and a document whose own edge is also a directory edge lies above another.
    let mut dir_edges: FxHashMap<(&str, &str), ChildCounts> = FxHashMap::default();
    let mut leaves: Vec<((&str, &str), ChildCounts)> = Vec::with_capacity(docs.len());
    let mut edges: Vec<(&str, &str)> = Vec::new();
    for doc in docs {
        edges.clear();
        edges.extend(doc.path.edges());
        let last = edges.len() - 1;
        // Visible from a depth down: no hidden name from there to the document.
        let mut visible = true;
        for (depth, &edge) in edges.iter().enumerate().rev() {
            visible &= !is_hidden_name(edge.1);
            let live = visible && !doc.archived;
            if depth == last {
                leaves.push((
                    edge,
                    ChildCounts {
                        docs: 1,
                        visible: u64::from(visible),
                        live: u64::from(live),
                        is_doc: true,
                    },
                ));
            } else {
                let c = dir_edges.entry(edge).or_default();
                c.docs += 1;
                c.visible += u64::from(visible);
                c.live += u64::from(live);
            }
        }
    }
    if let Some(i) = leaves.iter().position(|(e, _)| dir_edges.contains_key(e)) {
        let above = &docs[i].path;
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
    let mut children: Vec<(ChildKey, ChildCounts)> =
        Vec::with_capacity(leaves.len() + dir_edges.len());
    // Path order puts siblings together: most documents share the last one's directory.
    let mut last: Option<(&str, Arc<str>)> = None;
    for ((d, n), c) in dir_edges.into_iter().chain(leaves) {
        let dir = match &last {
            Some((name, dir)) if *name == d => dir.clone(),
            _ => {
                let dir = dirs.entry(d).or_insert_with(|| Arc::from(d)).clone();
                last = Some((d, dir.clone()));
                dir
            }
        };
        children.push(((dir, Arc::from(n)), c));
    }
    drop(dirs);
    children.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(children.into_iter().collect())
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
        if let Some(pair) = docs.windows(2).find(|p| p[0].path == p[1].path) {
            return Err(Error::integrity(
                Op::Apply,
                pair[0].path.as_str(),
                "duplicate document",
            ));
        }
        // Two threads: the directory counters (with the topology checks) on one, the
        // document map and the body-hash index on the other.
        let (docs_map, hashes, children) = std::thread::scope(|scope| {
            let counter = scope.spawn(|| children_of(&docs));
            let mut live: Vec<(Hash, DocPath)> = docs
                .iter()
                .filter(|d| !d.archived)
                .map(|d| (d.body_hash, d.path.clone()))
                .collect();
            live.sort_unstable();
            let hashes: OrdSet<(Hash, DocPath)> = live.into_iter().collect();
            let docs_map: OrdMap<DocPath, Arc<DocState>> =
                docs.iter().map(|d| (d.path.clone(), d.clone())).collect();
            let children = counter.join().expect("directory counter panicked");
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
        dir == "/" || self.first_child(dir).is_some()
    }

    fn first_child(&self, dir: &str) -> Option<(&ChildKey, &ChildCounts)> {
        let from: (Arc<str>, Arc<str>) = (dir.into(), "".into());
        self.children
            .range(from..)
            .next()
            .filter(|((d, _), _)| &**d == dir)
    }

    /// The counters of `name` in `dir`.
    pub fn child(&self, dir: &str, name: &str) -> Option<ChildCounts> {
        self.children.get(&(dir.into(), name.into())).copied()
    }

    /// Immediate children of `dir` after `after` (exclusive; empty for the start), at most
    /// `limit` (0 for no limit): hidden names never, children holding only archived documents
    /// only with `include_archived`.
    pub fn list(
        &self,
        dir: &str,
        after: &str,
        limit: usize,
        include_archived: bool,
    ) -> Vec<DirEntry> {
        let from: (Arc<str>, Arc<str>) = (dir.into(), after.into());
        let mut out = Vec::new();
        for ((d, name), counts) in self.children.range(from..) {
            if &**d != dir {
                break;
            }
            if &**name == after || is_hidden_name(name) {
                continue;
            }
            let shown = if include_archived {
                counts.visible
            } else {
                counts.live
            };
            if shown == 0 {
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
        if self.first_child(path.as_str()).is_some() {
            return Err(format!("{path} is a directory"));
        }
        Ok(())
    }

    /// Applies a slot, returning the next state; `self` is unchanged either way.
    pub fn apply(&self, slot: &EncodedSlot) -> Result<WorldState> {
        let key = format!("log/{:016x}", slot.slot.first);
        let bad = |why: String| Error::integrity(Op::Apply, key.clone(), why);
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
        let mut next = self.clone();
        for (i, entry) in slot.slot.entries.iter().enumerate() {
            let record = entry.write.as_ref().map(|w| VersionRecord {
                version: entry.current,
                hash: w.hash,
                body_hash: entry.body_hash,
                modified: entry.modified,
                size: w.size,
                location: slot.location(i),
            });
            next.apply_entry(entry, record)
                .map_err(|why| bad(format!("entry {i} ({}): {why}", entry.path)))?;
        }
        next.sequence = slot.slot.last();
        next.tip = slot.hash;
        Ok(next)
    }

    /// Applies one entry (its version record already located). Used by `apply` and by the
    /// committer to chain members of a batch being built.
    pub(crate) fn apply_entry(
        &mut self,
        entry: &Entry,
        record: Option<VersionRecord>,
    ) -> Result<(), String> {
        let old = self.docs.get(&entry.path).cloned();
        match (&entry.write, record, old) {
            (Some(write), Some(record), None) => {
                if entry.current != 1 || entry.first != 1 {
                    return Err("a new document must start at version 1".into());
                }
                self.topology_allows(&entry.path)?;
                self.insert_new(DocState {
                    path: entry.path.clone(),
                    current: 1,
                    first: 1,
                    archived: false,
                    body_hash: entry.body_hash,
                    modified: entry.modified,
                    catalog: Arc::new(write.catalog.clone()),
                    head: record.clone(),
                    history: Arc::from(Vec::<HistoryBlockRef>::new()),
                    recent: RecentVersions::from_iter([record]),
                });
                Ok(())
            }
            (Some(write), Some(record), Some(old)) => {
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
                let mut doc = (*old).clone();
                doc.current = entry.current;
                doc.first = entry.first;
                doc.body_hash = entry.body_hash;
                doc.modified = entry.modified;
                doc.catalog = Arc::new(write.catalog.clone());
                doc.head = record.clone();
                doc.recent.push_back(record);
                while doc.recent.front().is_some_and(|r| r.version < doc.first) {
                    doc.recent.pop_front();
                }
                self.replace(&old, doc);
                Ok(())
            }
            (None, _, Some(old)) => {
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
                let mut doc = (*old).clone();
                doc.archived = entry.archived;
                self.replace(&old, doc);
                Ok(())
            }
            (None, _, None) => Err("archive transition of a missing document".into()),
            (Some(_), None, _) => Err("write without a version record".into()),
        }
    }

    fn insert_new(&mut self, doc: DocState) {
        self.count(&doc, 1);
        if !doc.archived {
            self.hashes.insert((doc.body_hash, doc.path.clone()));
        }
        self.docs.insert(doc.path.clone(), Arc::new(doc));
    }

    fn replace(&mut self, old: &DocState, doc: DocState) {
        if old.archived != doc.archived {
            self.count(old, -1);
            self.count(&doc, 1);
        }
        if !old.archived {
            self.hashes.remove(&(old.body_hash, old.path.clone()));
        }
        if !doc.archived {
            self.hashes.insert((doc.body_hash, doc.path.clone()));
        }
        self.docs.insert(doc.path.clone(), Arc::new(doc));
    }

    /// Adds (`sign` 1) or removes (-1) a document's contribution to the directory counters.
    fn count(&mut self, doc: &DocState, sign: i64) {
        let edges: Vec<(usize, &str, &str)> = doc
            .path
            .edges()
            .enumerate()
            .map(|(depth, (dir, name))| (depth, dir, name))
            .collect();
        let last = edges.len() - 1;
        for (depth, dir, name) in edges {
            let key: (Arc<str>, Arc<str>) = (dir.into(), name.into());
            let mut counts = self.children.get(&key).copied().unwrap_or_default();
            let visible = !hidden_below(&doc.path, depth);
            let step = |v: &mut u64, on: bool| {
                if on {
                    *v = v
                        .checked_add_signed(sign)
                        .expect("directory counter out of range");
                }
            };
            step(&mut counts.docs, true);
            step(&mut counts.visible, visible);
            step(&mut counts.live, visible && !doc.archived);
            counts.is_doc = depth == last;
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
            catalog: Arc::new(Catalog::derive(&path, &Metadata::new(), "")),
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
}
