//! The directory counters of a [`WorldState`], the searches that judge where a document
//! may be created, and directory listings.

use std::ops::Bound;
use std::sync::Arc;

use super::{ChildCounts, DirEntry, WorldState};
use crate::model::DocState;
use crate::path::{DocPath, is_hidden_name};

/// The path of child `name` of directory `dir`: where a document named so would live, and
/// the prefix (with a `/` after it) of everything beneath a directory named so.
pub(super) fn child_path(dir: &str, name: &str) -> String {
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

fn hidden_below(path: &DocPath, depth: usize) -> bool {
    path.edges()
        .skip(depth)
        .any(|(_, name)| is_hidden_name(name))
}

impl WorldState {
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

    /// Adds (`sign` 1) or removes (-1) a document's contribution to the directory counters
    /// (the document's own edge is not stored: [`WorldState::child`] derives it).
    pub(super) fn count(&mut self, path: &DocPath, archived: bool, sign: i64) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Hash, WorldId};
    use crate::state::tests::doc;

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
}
