//! Building a [`WorldState`] from a checkpoint's documents: one by one, or in bulk with the
//! maps packed full.

use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use rustc_hash::FxHashMap;

use super::directory::child_path;
use super::{ChildCounts, ChildKey, WorldState};
use crate::error::{Error, Op, Result};
use crate::ids::{Hash, WorldId};
use crate::marker::{GENESIS_SEQUENCE, genesis_tip};
use crate::model::DocState;
use crate::path::{DocPath, is_hidden_name};

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::state::tests::doc;

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
}
