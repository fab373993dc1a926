//! The slots a store holds in memory because it created or read them: a bounded ring that
//! the committer publishes into and that the store's other readers of the log (its
//! compactor's replica, its change feed) take slots from before they read the bucket.
//!
//! The ring holds one contiguous run of the log, newest last. Every slot in it is the one
//! stored under its name, byte for byte: a slot this store created is in it only once the
//! create was confirmed, and a slot it read is what the bucket returned (a slot's name is
//! taken once and never rewritten, so any copy of it is the copy). A slot that does not
//! extend the run at its end starts a new run; the oldest slots go once the ring holds more
//! than its bound in slots or bytes. A reader that finds the slot it needs missing reads the
//! bucket, as a store restarted with an empty ring does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::slot::EncodedSlot;

/// The default bound in slots: at a busy store's ~150 slots a second, more than the
/// compactor's pause between two catch-ups.
pub const DEFAULT_RECENT_SLOTS: usize = 8192;
/// The default bound in slot bytes.
pub const DEFAULT_RECENT_BYTES: usize = 64 << 20;

/// A bounded ring of recent slots, shared between the writer publishing into it and its
/// readers.
#[derive(Debug)]
pub struct RecentSlots {
    max_slots: usize,
    max_bytes: usize,
    ring: Mutex<Run>,
}

#[derive(Debug, Default)]
struct Run {
    /// Contiguous: each slot's `first` is the one before's `last + 1`.
    slots: VecDeque<Arc<EncodedSlot>>,
    bytes: usize,
}

impl RecentSlots {
    /// A ring keeping at most `max_slots` slots of at most `max_bytes` bytes in all (a slot
    /// larger than that is not kept).
    pub fn new(max_slots: usize, max_bytes: usize) -> RecentSlots {
        RecentSlots {
            max_slots,
            max_bytes,
            ring: Mutex::new(Run::default()),
        }
    }

    fn run(&self) -> std::sync::MutexGuard<'_, Run> {
        self.ring.lock().expect("recent slots lock poisoned")
    }

    /// Adds a slot this store created (once confirmed) or read from the bucket. A slot the
    /// ring already covers is ignored; one past a gap drops the older run.
    pub fn publish(&self, slot: &EncodedSlot) {
        let size = slot.bytes.len();
        if self.max_slots == 0 || size > self.max_bytes {
            // Too big to keep: whatever follows it starts a new run.
            let mut run = self.run();
            if run
                .slots
                .back()
                .is_some_and(|b| slot.slot.first > b.slot.last())
            {
                run.slots.clear();
                run.bytes = 0;
            }
            return;
        }
        let mut run = self.run();
        if let Some(back) = run.slots.back() {
            let next = back.slot.last() + 1;
            if slot.slot.first < next {
                return;
            }
            if slot.slot.first > next {
                run.slots.clear();
                run.bytes = 0;
            }
        }
        run.slots.push_back(Arc::new(slot.clone()));
        run.bytes += size;
        while run.slots.len() > self.max_slots || run.bytes > self.max_bytes {
            let Some(old) = run.slots.pop_front() else {
                break;
            };
            run.bytes -= old.bytes.len();
        }
    }

    /// The slot named `first`, when the ring holds it.
    pub fn slot(&self, first: u64) -> Option<Arc<EncodedSlot>> {
        let run = self.run();
        let front = run.slots.front()?.slot.first;
        if first < front {
            return None;
        }
        // Slots are contiguous, so the one named `first` is found by its sequence.
        let at = run.slots.partition_point(|s| s.slot.first < first);
        run.slots.get(at).filter(|s| s.slot.first == first).cloned()
    }

    /// Bytes `range` of the slot named `first`, when the ring holds it and the range lies
    /// inside it (an inline version's bytes).
    pub fn bytes(&self, first: u64, range: std::ops::Range<u64>) -> Option<bytes::Bytes> {
        let slot = self.slot(first)?;
        let end = usize::try_from(range.end).ok()?;
        let start = usize::try_from(range.start).ok()?;
        (start <= end && end <= slot.bytes.len()).then(|| slot.bytes.slice(start..end))
    }

    /// The last sequence of the newest slot held.
    pub fn newest(&self) -> Option<u64> {
        self.run().slots.back().map(|s| s.slot.last())
    }

    /// How many slots, and how many bytes of them, the ring holds.
    pub fn held(&self) -> (usize, usize) {
        let run = self.run();
        (run.slots.len(), run.bytes)
    }
}

impl Default for RecentSlots {
    fn default() -> Self {
        RecentSlots::new(DEFAULT_RECENT_SLOTS, DEFAULT_RECENT_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Hash, OperationId, StoreId, Timestamp, WorldId};
    use crate::path::DocPath;
    use crate::slot::{Entry, EntryOp, Slot};

    fn slot(first: u64, entries: u64) -> EncodedSlot {
        let entries = (0..entries)
            .map(|i| Entry {
                operation: OperationId([i as u8; 16]),
                op: EntryOp::Archive,
                agent: None,
                path: DocPath::parse(&format!("/d{}.md", first + i)).unwrap(),
                current: 1,
                first: 1,
                archived: true,
                body_hash: Hash::of(b""),
                modified: Timestamp(1),
                write: None,
            })
            .collect();
        let slot = Slot {
            world: WorldId([1; 16]),
            first,
            store: StoreId([2; 16]),
            prev: Hash::of(b"prev"),
            entries,
        };
        EncodedSlot::encode(slot, "log").unwrap()
    }

    #[test]
    fn keeps_one_contiguous_run_within_its_bounds() {
        let one = slot(2, 1).bytes.len();
        let ring = RecentSlots::new(3, 100 * one);
        for first in [2, 3, 5, 7] {
            ring.publish(&slot(first, if first == 3 { 2 } else { 1 }));
        }
        // 2, 3..=4, 5 are one run; 7 follows a gap and starts another.
        assert_eq!(ring.newest(), Some(7));
        assert_eq!(ring.held().0, 1);
        assert!(ring.slot(5).is_none());
        for first in 8..=11 {
            ring.publish(&slot(first, 1));
        }
        // Bounded to three slots: the oldest went.
        assert_eq!(ring.held().0, 3);
        assert!(ring.slot(8).is_none());
        assert_eq!(ring.slot(10).unwrap().slot.first, 10);
        // A slot the ring covers is ignored; the held copy stays.
        ring.publish(&slot(10, 1));
        assert_eq!(ring.held().0, 3);
        assert!(ring.slot(12).is_none());
        let held = ring.slot(11).unwrap();
        let len = held.bytes.len() as u64;
        assert_eq!(ring.bytes(11, 1..len).unwrap(), held.bytes.slice(1..));
        assert!(ring.bytes(11, 1..len + 1).is_none());
        assert!(ring.bytes(8, 0..1).is_none());

        let small = RecentSlots::new(100, 2 * one);
        for first in 2..=4 {
            small.publish(&slot(first, 1));
        }
        assert_eq!(small.held(), (2, 2 * one));
        // A slot over the byte bound is not kept, and the run after it starts afresh.
        small.publish(&slot(5, 40));
        assert_eq!(small.held(), (0, 0));
        small.publish(&slot(45, 1));
        assert_eq!(small.newest(), Some(45));
    }
}
