//! Naming and checking the rows a search kept: candidates best first, their paths and
//! anchors read from the columns in ordinal order a chunk at a time, each checked against
//! the catalog (and the caller's skip) until the cap is filled and no candidate left could
//! tie with the last.

use std::collections::{BinaryHeap, HashSet};

use quire_log::DocPath;
use tantivy::columnar::StrColumn;

use super::kept::{Candidate, OrdF64, kept_for};
use super::{Base, StoreResult};
use crate::body::{Ranked, Source, prior};
use crate::catalog::Admission;
use crate::query::CatalogQuery;

impl Base {
    /// Names and checks `candidates` (best first) until `want` rows are accepted and no
    /// candidate left could tie with the last; tells whether that many were.
    ///
    /// Candidates are named a chunk at a time (the first as big as `want` and the margin,
    /// then doubling), each chunk's paths and anchors read from their columns in ordinal
    /// order: one pass over each dictionary block instead of a block decoded per row.
    pub(super) fn resolve(
        &self,
        candidates: Vec<Candidate>,
        want: usize,
        scope: &str,
        query: &CatalogQuery,
        catalog: &dyn Admission,
        skip: &impl Fn(&DocPath) -> bool,
    ) -> StoreResult<(Vec<Ranked>, bool)> {
        let mut rows: Vec<Ranked> = Vec::new();
        // The `want` best final scores so far (a min-heap).
        let mut best: BinaryHeap<std::cmp::Reverse<OrdF64>> = BinaryHeap::new();
        let mut catalog_rows: HashSet<DocPath> = HashSet::new();
        let mut start = 0;
        let mut chunk = kept_for(want);
        // The run of candidates with one score in one segment being read (in path order),
        // its accepted rows and the path ordinal of the last.
        let mut run: Option<(u64, u32)> = None;
        let (mut run_rows, mut run_last_ord) = (0usize, 0u64);
        // Read past the end of a cut run holding fewer than `want` rows, the answer could
        // miss what was cut from it: the caller asks again keeping more.
        let mut cut_run_ended = false;
        while start < candidates.len() {
            let end = start.saturating_add(chunk).min(candidates.len());
            let batch = &candidates[start..end];
            let names = self.names(batch)?;
            let mut next = end;
            for (at, (c, name)) in batch.iter().zip(names).enumerate() {
                if cut_run_ended && run_rows < want {
                    return Ok((rows, false));
                }
                cut_run_ended = c.ends_cut_run;
                if best.len() >= want && best.peek().is_some_and(|m| c.score < m.0.0) {
                    return Ok((rows, true));
                }
                let key = (c.score.to_bits(), c.segment);
                if run != Some(key) {
                    run = Some(key);
                    run_rows = 0;
                }
                if run_rows >= want
                    && c.path_ord > run_last_ord
                    && best.peek().is_some_and(|m| c.score <= m.0.0)
                {
                    // The rest of this run ties at best, behind `want` rows of the same
                    // score with earlier paths: none of it can be among the first `want`
                    // (rows that tie order by path). A common word's catalog answers are
                    // such a run of thousands.
                    let from = start + at;
                    next = candidates[from..]
                        .iter()
                        .position(|x| (x.score.to_bits(), x.segment) != key)
                        .map_or(candidates.len(), |n| from + n);
                    break;
                }
                let Some((path, anchor)) = name else {
                    continue;
                };
                if skip(&path) {
                    continue;
                }
                let Some(entry) = catalog.admitted(scope, &query.filters, &path) else {
                    continue;
                };
                if c.catalog && !catalog_rows.insert(path.clone()) {
                    continue;
                }
                // The catalog's prior; the stored one is the same while the entry key is
                // current, which the version guarantees.
                let score = c.raw * prior(&entry.importance, &path);
                best.push(std::cmp::Reverse(OrdF64(score)));
                if best.len() > want {
                    best.pop();
                }
                run_rows += 1;
                run_last_ord = c.path_ord;
                rows.push(Ranked {
                    score,
                    path,
                    anchor,
                    entry,
                    source: Source::Base {
                        segment: c.segment,
                        doc: c.doc,
                        catalog: c.catalog,
                    },
                });
            }
            start = next;
            chunk = chunk.saturating_mul(2);
        }
        let enough = best.len() >= want && !(cut_run_ended && run_rows < want);
        Ok((rows, enough))
    }

    /// The path and anchor (empty for a catalog answer) of each of `batch`, in its order;
    /// `None` for a candidate whose path is missing or no document path.
    fn names(&self, batch: &[Candidate]) -> StoreResult<Vec<Option<(DocPath, String)>>> {
        let mut paths: Vec<Option<String>> = vec![None; batch.len()];
        let mut anchors: Vec<String> = vec![String::new(); batch.len()];
        for (number, columns) in self.columns.iter().enumerate() {
            if !batch.iter().any(|c| c.segment as usize == number) {
                continue;
            }
            let (path_col, anchor_col) = (&columns.paths, &columns.anchors);
            let in_segment = || {
                batch
                    .iter()
                    .enumerate()
                    .filter(move |(_, c)| c.segment as usize == number)
            };
            let mut wanted: Vec<(u64, usize)> = in_segment()
                .filter_map(|(i, c)| path_col.ords().first(c.doc).map(|ord| (ord, i)))
                .collect();
            in_order(path_col, &mut wanted, |i, name| paths[i] = Some(name))?;
            let mut wanted: Vec<(u64, usize)> = in_segment()
                .filter(|(_, c)| !c.catalog)
                .filter_map(|(i, c)| anchor_col.ords().first(c.doc).map(|ord| (ord, i)))
                .collect();
            in_order(anchor_col, &mut wanted, |i, anchor| anchors[i] = anchor)?;
        }
        Ok(paths
            .into_iter()
            .zip(anchors)
            .map(|(path, anchor)| Some((DocPath::parse(&path?).ok()?, anchor)))
            .collect())
    }
}

/// Reads the terms of `wanted` (ordinal, caller's index) from `column` in ordinal order
/// and hands each to `found` with its index.
pub(super) fn in_order(
    column: &StrColumn,
    wanted: &mut [(u64, usize)],
    mut found: impl FnMut(usize, String),
) -> StoreResult<()> {
    wanted.sort_unstable();
    let ords: Vec<u64> = wanted.iter().map(|(ord, _)| *ord).collect();
    let mut at = 0;
    column.dictionary().sorted_ords_to_term_cb(&ords, |bytes| {
        if let Some((_, i)) = wanted.get(at) {
            found(*i, String::from_utf8_lossy(bytes).into_owned());
        }
        at += 1;
    })?;
    Ok(())
}
