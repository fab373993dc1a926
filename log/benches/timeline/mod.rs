//! Where the slowest writes' time goes when stores contend: every call each store's link
//! makes on the log (slot creates, reads, listings), and for each store's slowest writes,
//! what that store and its peers were doing between the write's offer and its answer.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use quire_blob::{Attributes, BlobStore, Generation, ListPage, Object, Result};
use tokio::time::Instant;

/// One call on the log, from its start to its answer (or to its cancellation: a create
/// whose outcome a read behind it decided first is dropped).
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub store: usize,
    pub key: String,
    pub start: Instant,
    pub end: Instant,
    /// The bytes of a create; `None` for reads and listings.
    pub created: Option<Bytes>,
}

pub(crate) type Calls = Arc<Mutex<Vec<Call>>>;

/// A store's link that records its calls on keys under `log/`.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub inner: Arc<dyn BlobStore>,
    pub store: usize,
    pub calls: Calls,
}

/// Records its call when dropped, answered or cancelled.
struct InFlight<'a> {
    recorder: &'a Recorder,
    key: String,
    start: Instant,
    created: Option<Bytes>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.recorder.calls.lock().unwrap().push(Call {
            store: self.recorder.store,
            key: std::mem::take(&mut self.key),
            start: self.start,
            end: Instant::now(),
            created: self.created.take(),
        });
    }
}

impl Recorder {
    fn track(&self, key: &str, created: Option<Bytes>) -> Option<InFlight<'_>> {
        key.contains("log/").then(|| InFlight {
            recorder: self,
            key: key.to_owned(),
            start: Instant::now(),
            created,
        })
    }
}

#[async_trait]
impl BlobStore for Recorder {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        let _call = self.track(key, Some(data.clone()));
        self.inner.create(key, data).await
    }

    async fn get(&self, key: &str) -> Result<Object> {
        let _call = self.track(key, None);
        self.inner.get(key).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.inner.get_range(key, range).await
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        let _call = self.track(key, None);
        self.inner.head(key).await
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        self.inner.replace(key, generation, data).await
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        self.inner.delete(key, generation).await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        let _call = self.track(prefix, None);
        self.inner.list(prefix, start_after, cursor).await
    }
}

/// One write: its store, when it was offered and when it was answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Write {
    pub store: usize,
    pub offered: Instant,
    pub answered: Instant,
}

/// What a store was doing at one moment, as seen from one of its waiting writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Doing {
    /// Creating a slot it won.
    CreateWon,
    /// Creating a slot a peer's slot beat.
    CreateLost,
    /// Reading the log (a peer's slot, a probe, a listing).
    Reading,
    /// Nothing in flight of its own while a peer has a call on the log in flight.
    PeerBusy,
    /// Nothing in flight on the log at all, anywhere: pauses and holds that waited on nothing.
    Dead,
}

const DOINGS: [Doing; 5] = [
    Doing::CreateWon,
    Doing::CreateLost,
    Doing::Reading,
    Doing::PeerBusy,
    Doing::Dead,
];

/// Prints, per store, how the time of its slowest writes (at or above its p99) divides
/// between what the store and its peers were doing, and the timeline of its slowest write.
/// `bucket` is the bucket behind every link, read to learn which store won each slot.
pub(crate) async fn explain(
    bucket: &dyn BlobStore,
    calls: &[Call],
    writes: &[Write],
    stores: usize,
) {
    let mut winner = std::collections::HashMap::new();
    for call in calls {
        if let Some(bytes) = &call.created
            && !winner.contains_key(&call.key)
            && let Ok(object) = bucket.get(&call.key).await
            && object.data == *bytes
        {
            winner.insert(call.key.clone(), call.store);
        }
    }
    let won = |call: &Call| winner.get(&call.key) == Some(&call.store);
    for store in 0..stores {
        let mut own: Vec<&Write> = writes.iter().filter(|w| w.store == store).collect();
        own.sort_by_key(|w| w.answered - w.offered);
        let tail = &own[own.len() * 99 / 100..];
        let mut totals = [Duration::ZERO; DOINGS.len()];
        let mut lost_creates = 0usize;
        for write in tail {
            let window: Vec<&Call> = calls
                .iter()
                .filter(|c| c.end > write.offered && c.start < write.answered)
                .collect();
            lost_creates += window
                .iter()
                .filter(|c| c.store == store && c.created.is_some() && !won(c))
                .count();
            let mut edges: Vec<Instant> = window
                .iter()
                .flat_map(|c| [c.start, c.end])
                .chain([write.offered, write.answered])
                .filter(|t| (write.offered..=write.answered).contains(t))
                .collect();
            edges.sort_unstable();
            edges.dedup();
            for span in edges.windows(2) {
                let (from, to) = (span[0], span[1]);
                let live: Vec<&&Call> = window
                    .iter()
                    .filter(|c| c.start <= from && c.end >= to)
                    .collect();
                let mine = |c: &&&Call| c.store == store;
                let doing = if live
                    .iter()
                    .any(|c| mine(c) && c.created.is_some() && won(c))
                {
                    Doing::CreateWon
                } else if live.iter().any(|c| mine(c) && c.created.is_some()) {
                    Doing::CreateLost
                } else if live.iter().any(mine) {
                    Doing::Reading
                } else if !live.is_empty() {
                    Doing::PeerBusy
                } else {
                    Doing::Dead
                };
                let at = DOINGS.iter().position(|d| *d == doing).expect("listed");
                totals[at] += to - from;
            }
        }
        let n = tail.len().max(1) as u32;
        let parts: Vec<String> = DOINGS
            .iter()
            .zip(totals)
            .map(|(doing, total)| format!("{doing:?} {:.1} ms", ms(total / n)))
            .collect();
        eprintln!(
            "  store {store}: its {} slowest writes (from {:.1} ms) spent on average {}; {:.2} lost creates each",
            tail.len(),
            tail.first().map_or(0.0, |w| ms(w.answered - w.offered)),
            parts.join(", "),
            lost_creates as f64 / f64::from(n),
        );
        if let Some(worst) = tail.last() {
            eprintln!(
                "    slowest: {:.1} ms; calls on the log meanwhile (ms from its offer):",
                ms(worst.answered - worst.offered)
            );
            let mut window: Vec<&Call> = calls
                .iter()
                .filter(|c| c.end > worst.offered && c.start < worst.answered)
                .collect();
            window.sort_by_key(|c| c.start);
            for c in window {
                let what = match (&c.created, won(c)) {
                    (Some(_), true) => "create won",
                    (Some(_), false) => "create lost",
                    (None, _) => "read",
                };
                let at = |t: Instant| {
                    if t >= worst.offered {
                        ms(t - worst.offered)
                    } else {
                        -ms(worst.offered - t)
                    }
                };
                eprintln!(
                    "      store {} {what} {} {:.1}..{:.1}",
                    c.store,
                    c.key
                        .rsplit('/')
                        .next()
                        .unwrap_or_default()
                        .trim_start_matches('0'),
                    at(c.start),
                    at(c.end),
                );
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
