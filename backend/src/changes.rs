//! The change hub a store feeds and WATCH reads: every committed change, in commit order,
//! under a durable sequence and an epoch naming the sequence space.
//!
//! The hub keeps the newest `capacity` events in a ring. A reader resumes after a sequence it
//! saw; when the ring no longer holds what follows (lapped, another epoch, a gap), it must
//! resync. Publishing never waits for readers.

use std::collections::VecDeque;
use std::sync::Mutex;

use quire_log::{DocPath, EntryOp, Hash};
use tokio::sync::watch;

/// The events a hub keeps when the server enables WATCH (the reference's ring size).
pub const DEFAULT_RING: usize = 4096;

/// One committed change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeEvent {
    pub sequence: u64,
    pub path: DocPath,
    /// The version written (for archive changes: the current version).
    pub version: u64,
    /// The body hash of that version.
    pub body_hash: Hash,
    /// Unarchiving is reported as a publish.
    pub op: EntryOp,
    pub agent: Option<String>,
}

/// A reader cannot resume where it asked: start again from `head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resync {
    pub head: u64,
}

#[derive(Debug)]
struct Ring {
    events: VecDeque<ChangeEvent>,
    head: u64,
    /// Events after this sequence are all in the ring (or none happened).
    floor: u64,
}

/// The change hub of one store.
#[derive(Debug)]
pub struct ChangeHub {
    epoch: String,
    capacity: usize,
    ring: Mutex<Ring>,
    heads: watch::Sender<u64>,
    closed: watch::Sender<bool>,
}

impl ChangeHub {
    /// A hub whose sequence space is `epoch`, starting at `head`, keeping `capacity` events.
    pub fn new(epoch: impl Into<String>, head: u64, capacity: usize) -> ChangeHub {
        ChangeHub {
            epoch: epoch.into(),
            capacity: capacity.max(1),
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                head,
                floor: head,
            }),
            heads: watch::channel(head).0,
            closed: watch::channel(false).0,
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().expect("change ring poisoned")
    }

    /// How many events the ring keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The sequence of the newest change.
    pub fn head(&self) -> u64 {
        self.ring().head
    }

    /// Adds a change. Sequences at or below the head are dropped; a jump past `head + 1`
    /// leaves a gap no reader can resume across.
    pub fn publish(&self, event: ChangeEvent) {
        let mut ring = self.ring();
        if event.sequence <= ring.head {
            return;
        }
        if event.sequence != ring.head + 1 {
            ring.events.clear();
            ring.floor = event.sequence - 1;
        }
        ring.head = event.sequence;
        ring.events.push_back(event);
        while ring.events.len() > self.capacity {
            if let Some(dropped) = ring.events.pop_front() {
                ring.floor = dropped.sequence;
            }
        }
        let head = ring.head;
        drop(ring);
        self.heads.send_replace(head);
    }

    /// Moves the head to `sequence` without events (a store restarting from a checkpoint):
    /// readers behind it resync.
    pub fn skip(&self, sequence: u64) {
        let mut ring = self.ring();
        if sequence <= ring.head {
            return;
        }
        ring.events.clear();
        ring.head = sequence;
        ring.floor = sequence;
        drop(ring);
        self.heads.send_replace(sequence);
    }

    /// Every change after `after`, in order; [`Resync`] when the ring no longer holds them
    /// all or `after` is beyond the head.
    pub fn since(&self, after: u64) -> Result<Vec<ChangeEvent>, Resync> {
        let ring = self.ring();
        if after < ring.floor || after > ring.head {
            return Err(Resync { head: ring.head });
        }
        Ok(ring
            .events
            .iter()
            .filter(|e| e.sequence > after)
            .cloned()
            .collect())
    }

    /// The newest change `shown` admits, else the oldest sequence a reader can still resume
    /// from (the ring's floor). A cursor for a reader who may not see every change: it
    /// never counts the changes hidden from that reader, and resuming from it replays only
    /// changes that are hidden again.
    pub fn newest_shown(&self, shown: impl Fn(&ChangeEvent) -> bool) -> u64 {
        // Cloned out so the checks run without holding the ring against publishers.
        let (floor, events) = {
            let ring = self.ring();
            (ring.floor, ring.events.clone())
        };
        events
            .iter()
            .rev()
            .find(|event| shown(event))
            .map_or(floor, |event| event.sequence)
    }

    /// Follows the head (wakes on every publish).
    pub fn watch_head(&self) -> watch::Receiver<u64> {
        self.heads.subscribe()
    }

    /// How many readers follow the head right now (each open WATCH holds one): a replica
    /// polls the bucket for peers' commits only while someone waits.
    pub fn watchers(&self) -> usize {
        self.heads.receiver_count()
    }

    /// Follows the closed flag.
    pub fn watch_closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Ends every watch (later publishes still land in the ring).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: u64) -> ChangeEvent {
        ChangeEvent {
            sequence,
            path: DocPath::parse("/a.md").unwrap(),
            version: sequence,
            body_hash: Hash::of(b""),
            op: EntryOp::Publish,
            agent: None,
        }
    }

    #[test]
    fn resumes_inside_the_ring_and_resyncs_outside() {
        let hub = ChangeHub::new("e", 0, 2);
        for s in 1..=3 {
            hub.publish(event(s));
        }
        hub.publish(event(2));
        assert_eq!(hub.head(), 3);
        assert_eq!(hub.since(1).unwrap().len(), 2);
        assert_eq!(hub.since(3).unwrap().len(), 0);
        assert_eq!(hub.since(0), Err(Resync { head: 3 }));
        assert_eq!(hub.since(4), Err(Resync { head: 3 }));
        hub.publish(event(6));
        assert_eq!(hub.since(3), Err(Resync { head: 6 }));
        assert_eq!(hub.since(5).unwrap()[0].sequence, 6);
        hub.skip(9);
        assert_eq!(hub.since(6), Err(Resync { head: 9 }));
        assert_eq!(hub.watchers(), 0);
        let follower = hub.watch_head();
        assert_eq!(hub.watchers(), 1);
        drop(follower);
        assert_eq!(hub.watchers(), 0);
        assert!(!hub.is_closed());
        hub.close();
        assert!(*hub.watch_closed().borrow());
    }
}
