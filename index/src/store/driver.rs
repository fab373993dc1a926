//! The lists that drive a walk over one segment's postings: the sections any of them holds,
//! in order. A term's prefix drives by up to three lists per expansion, so beyond a few lists
//! the next section is found through a heap rather than by asking every list.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tantivy::postings::SegmentPostings;
use tantivy::{DocId, DocSet, TERMINATED};

use super::List;

/// Up to this many lists, each is asked for its section at every step.
const ASKED_IN_TURN: usize = 8;

/// A list a driver steps through.
pub(super) trait Stepped {
    type Set: DocSet;
    fn postings(&self) -> &Self::Set;
    fn postings_mut(&mut self) -> &mut Self::Set;
}

impl Stepped for List {
    type Set = SegmentPostings;
    fn postings(&self) -> &SegmentPostings {
        &self.postings
    }
    fn postings_mut(&mut self) -> &mut SegmentPostings {
        &mut self.postings
    }
}

/// The lists driving one walk, and where each stands.
pub(super) struct Driver<L = List> {
    lists: Vec<L>,
    /// Past [`ASKED_IN_TURN`] lists, each list's section and its place in `lists`, the
    /// earliest on top.
    heap: Option<BinaryHeap<Reverse<(DocId, usize)>>>,
}

impl<L: Stepped> Driver<L> {
    pub(super) fn new(lists: Vec<L>) -> Driver<L> {
        let heap = (lists.len() > ASKED_IN_TURN).then(|| {
            (lists.iter().enumerate())
                .map(|(i, l)| Reverse((l.postings().doc(), i)))
                .collect()
        });
        Driver { lists, heap }
    }

    /// Moves every list that stands before `target` to it or past it.
    pub(super) fn seek(&mut self, target: DocId) {
        let Some(heap) = self.heap.as_mut() else {
            for list in &mut self.lists {
                if list.postings().doc() < target {
                    list.postings_mut().seek(target);
                }
            }
            return;
        };
        // The top is moved in place: one sift down rather than a pop and a push.
        while let Some(mut top) = heap.peek_mut()
            && top.0.0 < target
        {
            let i = top.0.1;
            top.0 = (self.lists[i].postings_mut().seek(target), i);
        }
    }

    /// The next section any list holds ([`TERMINATED`] when none does): each list holding
    /// it is shown to `holds` and stepped past it.
    pub(super) fn next(&mut self, mut holds: impl FnMut(&L)) -> DocId {
        let Some(heap) = self.heap.as_mut() else {
            let doc = (self.lists.iter())
                .map(|l| l.postings().doc())
                .min()
                .unwrap_or(TERMINATED);
            if doc != TERMINATED {
                for list in &mut self.lists {
                    if list.postings().doc() == doc {
                        holds(list);
                        list.postings_mut().advance();
                    }
                }
            }
            return doc;
        };
        let Some(&Reverse((doc, _))) = heap.peek() else {
            return TERMINATED;
        };
        if doc == TERMINATED {
            return doc;
        }
        while let Some(mut top) = heap.peek_mut()
            && top.0.0 == doc
        {
            let list = &mut self.lists[top.0.1];
            holds(list);
            top.0.0 = list.postings_mut().advance();
        }
        doc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of sections in memory.
    struct Sections {
        docs: Vec<DocId>,
        at: usize,
    }

    impl DocSet for Sections {
        fn advance(&mut self) -> DocId {
            self.at = (self.at + 1).min(self.docs.len());
            self.doc()
        }
        fn doc(&self) -> DocId {
            self.docs.get(self.at).copied().unwrap_or(TERMINATED)
        }
        fn size_hint(&self) -> u32 {
            self.docs.len() as u32
        }
    }

    impl Stepped for Sections {
        type Set = Sections;
        fn postings(&self) -> &Sections {
            self
        }
        fn postings_mut(&mut self) -> &mut Sections {
            self
        }
    }

    /// Every section any list holds, once, in order, with how many lists hold it; the same
    /// asked in turn and through the heap, with a seek between.
    #[test]
    fn a_driver_steps_through_the_union_of_its_lists() {
        for copies in [1, 5] {
            let mut lists = Vec::new();
            for _ in 0..copies {
                for docs in [vec![1, 4, 9, 30], vec![4, 5, 31], vec![], vec![2, 9]] {
                    lists.push(Sections { docs, at: 0 });
                }
            }
            let mut driver = Driver::new(lists);
            assert_eq!(driver.heap.is_some(), copies > 1);
            let mut seen = Vec::new();
            loop {
                let mut holding = 0;
                let doc = driver.next(|_| holding += 1);
                if doc == TERMINATED {
                    break;
                }
                seen.push((doc, holding / copies));
                if doc == 5 {
                    driver.seek(30);
                }
            }
            assert_eq!(seen, [(1, 1), (2, 1), (4, 2), (5, 1), (30, 1), (31, 1)]);
        }
    }
}
