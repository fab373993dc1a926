//! The rows a search keeps while it reads postings: scored candidates before their paths
//! are named, the best of them with each segment's first ties of the worst kept in path
//! order, and the bounds that let a section be passed over before its columns are read.

use std::collections::{BinaryHeap, HashMap};

use tantivy::DocId;

use crate::body::{self, Ranking, term_score};

/// A scored candidate before its path is known.
#[derive(Clone, Copy)]
pub(super) struct Candidate {
    /// The final score, with the stored prior.
    pub(super) score: f64,
    /// The score before the prior.
    pub(super) raw: f64,
    pub(super) segment: u32,
    pub(super) doc: DocId,
    pub(super) catalog: bool,
    /// The ordinal of its path in its segment's path column (ordinals follow path order),
    /// so a run of ties is kept and read in path order.
    pub(super) path_ord: u64,
    /// Whether it is the last kept of its segment's candidates at the worst kept score when
    /// later ones (in path order) were left out: a reader that needs more of that run than
    /// it holds must ask again with more kept.
    pub(super) ends_cut_run: bool,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
/// Better first is greater: a higher score, then (ties) an earlier segment, path, section.
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.segment.cmp(&self.segment))
            .then_with(|| other.path_ord.cmp(&self.path_ord))
            .then_with(|| other.doc.cmp(&self.doc))
    }
}

/// The highest prior (importance 1, no journal demotion).
pub(super) const MAX_PRIOR: f64 = 1.0;

/// Whether a score of at most `bound` surely ranks below `threshold` (with a margin for
/// rounding, so a tie is never left out).
pub(super) fn below(bound: f64, threshold: f64) -> bool {
    bound * (1.0 + 1e-9) < threshold
}

/// The most a section met by every term in its text only can score: each term at the
/// capped frequency in the shortest section, at `prior` (the highest prior it may have).
pub(super) fn text_only_bound(stats: &Ranking, prior: f64) -> f64 {
    stats
        .idf
        .iter()
        .map(|idf| term_score(*idf, body::MAX_TF, false, false, 0, stats.average))
        .sum::<f64>()
        * prior
}

/// How many rows are kept while reading postings for a cap of `want`: the cap and a margin
/// for rows the catalog or a skip refuses (a sixteenth of the cap, at least 8 and at most
/// 64). The margin lowers the score a section must beat to be kept, so a small cap keeps a
/// small one; when refusals eat it the search asks again keeping more.
pub(super) fn kept_for(want: usize) -> usize {
    want.saturating_add((want / 16).clamp(8, 64))
}

/// The best candidates seen: at most `keep` of them, plus candidates tying with the worst
/// kept (rows that tie order by path, and paths of different segments compare only by name),
/// at most `keep` of each segment's, the first in path order.
pub(super) struct Top {
    keep: usize,
    /// A min-heap of the best.
    heap: BinaryHeap<std::cmp::Reverse<Candidate>>,
    /// Per segment (by number), candidates with the score of the heap's worst that did not
    /// fit in it: a heap whose top is the one latest in path order.
    ties: Vec<BinaryHeap<std::cmp::Reverse<Candidate>>>,
    /// Per segment, whether some of its ties at the worst score were left out.
    cut: Vec<bool>,
    /// Whether a candidate was left out.
    pub(super) dropped: bool,
}

impl Top {
    pub(super) fn new(keep: usize) -> Top {
        Top {
            keep,
            heap: BinaryHeap::new(),
            ties: Vec::new(),
            cut: Vec::new(),
            dropped: false,
        }
    }

    pub(super) fn push(&mut self, c: Candidate) {
        if self.heap.len() < self.keep {
            self.heap.push(std::cmp::Reverse(c));
            return;
        }
        let Some(worst) = self.heap.peek().map(|w| w.0.score) else {
            self.dropped = true;
            return;
        };
        match c.score.total_cmp(&worst) {
            std::cmp::Ordering::Less => self.dropped = true,
            std::cmp::Ordering::Equal => self.tie(c),
            std::cmp::Ordering::Greater => {
                self.heap.push(std::cmp::Reverse(c));
                let out = self.heap.pop().expect("a full heap").0;
                let worst = self.heap.peek().map_or(out.score, |w| w.0.score);
                if out.score.total_cmp(&worst).is_eq() {
                    self.tie(out);
                } else {
                    self.dropped = true;
                    self.ties.iter_mut().for_each(BinaryHeap::clear);
                    self.cut.fill(false);
                }
            }
        }
    }

    /// Whether a candidate scoring `score` is surely left out (it scores less than the worst
    /// of a full heap), so what only a kept one needs is not read; says it was left out.
    pub(super) fn refuses(&mut self, score: f64) -> bool {
        let refused = self.threshold().is_some_and(|worst| score < worst);
        self.dropped |= refused;
        refused
    }

    /// Keeps `c`, which ties with the worst kept, when it is among its segment's first
    /// `keep` such in path order.
    fn tie(&mut self, c: Candidate) {
        let segment = c.segment as usize;
        if self.ties.len() <= segment {
            self.ties.resize_with(segment + 1, BinaryHeap::new);
            self.cut.resize(segment + 1, false);
        }
        let ties = &mut self.ties[segment];
        if ties.len() < self.keep {
            ties.push(std::cmp::Reverse(c));
            return;
        }
        self.dropped = true;
        self.cut[segment] = true;
        // The heap's top (reversed) is the worst of the ties: the latest in path order.
        if ties.peek().is_some_and(|latest| c > latest.0) {
            ties.pop();
            ties.push(std::cmp::Reverse(c));
        }
    }

    /// The worst kept score once `keep` are kept: a candidate scoring less is left out.
    pub(super) fn threshold(&self) -> Option<f64> {
        if self.heap.len() < self.keep {
            return None;
        }
        self.heap.peek().map(|w| w.0.score)
    }

    /// Everything kept, best first: by score, then segment, path and section. In a segment
    /// whose ties were cut, candidates at the worst score that come after the last tie kept
    /// are left out too (what was cut came before them), and that last tie says so.
    pub(super) fn into_best_first(self) -> Vec<Candidate> {
        let worst = self.heap.peek().map(|w| w.0.score);
        // Per cut segment, its last kept tie.
        let ends: HashMap<u32, Candidate> = self
            .cut
            .iter()
            .zip(&self.ties)
            .filter(|(cut, _)| **cut)
            .filter_map(|(_, ties)| Some(ties.peek()?.0))
            .map(|end| (end.segment, end))
            .collect();
        let mut all: Vec<Candidate> = self
            .heap
            .into_iter()
            .map(|c| c.0)
            .filter(|c| {
                let after_end = ends.get(&c.segment).is_some_and(|end| *c < *end);
                !(after_end && Some(c.score) == worst)
            })
            .collect();
        all.extend(self.ties.into_iter().flatten().map(|c| c.0));
        for c in &mut all {
            c.ends_cut_run = ends.get(&c.segment).is_some_and(|end| end == c);
        }
        all.sort_by(|a, b| b.cmp(a));
        all
    }
}

/// An f64 ordered totally.
#[derive(Clone, Copy, Debug)]
pub(super) struct OrdF64(pub(super) f64);
impl PartialEq for OrdF64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(score: f64, doc: DocId) -> Candidate {
        Candidate {
            score,
            raw: score,
            segment: 0,
            doc,
            catalog: false,
            path_ord: 0,
            ends_cut_run: false,
        }
    }

    fn scores(top: Top) -> Vec<(u64, DocId)> {
        top.into_best_first()
            .iter()
            .map(|c| (c.score as u64, c.doc))
            .collect()
    }

    #[test]
    fn top_keeps_the_best_and_every_tie_with_the_worst_kept() {
        let mut top = Top::new(2);
        for (score, doc) in [(1.0, 0), (5.0, 1), (3.0, 2), (3.0, 3), (3.0, 4), (2.0, 5)] {
            top.push(candidate(score, doc));
        }
        assert!(top.dropped);
        assert_eq!(scores(top), [(5, 1), (3, 2), (3, 3), (3, 4)]);
        let mut top = Top::new(2);
        for (score, doc) in [(3.0, 0), (3.0, 1), (3.0, 2), (4.0, 3), (5.0, 4)] {
            top.push(candidate(score, doc));
        }
        assert_eq!(scores(top), [(5, 4), (4, 3)], "ties of a worse score go");
        let mut top = Top::new(5);
        top.push(candidate(1.0, 0));
        assert!(!top.dropped);
        assert_eq!(scores(top), [(1, 0)]);
    }
}
