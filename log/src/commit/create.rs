//! Deciding a slot create: retries with backoff, reading an ambiguous create back, the
//! latencies its pauses are measured in, and taking turns with peers (the rotation, reads
//! ahead of hinted slots, peeks at the owner's name).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use quire_blob::BlobStore;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::batch::Touched;
use super::pipeline::Actor;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::ids::StoreId;
use crate::slot::{EncodedSlot, MAX_SLOT_ENTRIES};
use crate::state::WorldState;
use crate::tip;

pub(super) enum CreateOutcome {
    Won,
    Lost(Box<EncodedSlot>),
    Failed(Error),
}

#[derive(Clone, Copy)]
pub(super) struct RetryPolicy {
    attempts: u32,
    pub(super) base: Duration,
    pub(super) cap: Duration,
    pub(super) seed: u64,
}

impl RetryPolicy {
    pub(super) fn pause(&self, attempt: u32, rng: &mut SmallRng) -> Duration {
        let step = self.base.saturating_mul(1 << attempt.min(6)).min(self.cap);
        let jitter = step.as_micros() as u64 / 2;
        step + Duration::from_micros(if jitter == 0 {
            0
        } else {
            rng.random_range(0..=jitter)
        })
    }
}

/// Observed latencies of this store's slot creates and slot reads (moving averages), for
/// timing reads behind creates.
#[derive(Default)]
pub(super) struct Latencies {
    pub(super) create: Option<Duration>,
    pub(super) read: Option<Duration>,
}

impl Latencies {
    fn note(average: &mut Option<Duration>, sample: Duration) {
        *average = Some(match *average {
            None => sample,
            Some(old) => (old * 7 + sample) / 8,
        });
    }

    /// How long after starting a slot create to start reading the same name, so the read
    /// reaches the bucket just after the create would have: a peer's slot that beat it is
    /// then in hand about when the create's refusal would arrive, instead of one read later.
    pub(super) fn read_behind(&self) -> Option<Duration> {
        let (create, read) = (self.create?, self.read?);
        Some(create.saturating_sub(read) + create / 10)
    }
}

/// How many of the log's newest slots name the stores in the rotation of turns: a store
/// that wrote none of them has stopped contending and is skipped.
pub(super) const ROTATION_SLOTS: usize = 8;

/// How many sequences past its tail a peer hint may name for a store to read the slots by
/// name (a read each) rather than list the log.
const READ_AHEAD_BY_NAME: u64 = MAX_SLOT_ENTRIES as u64 * 4;

/// Applies the slots after `state` by name until it reaches `target` (or a name is absent).
/// Returns whether it found the log's end (an absent name); reaching `target` proves
/// nothing about later slots.
async fn read_up_to(
    store: &dyn BlobStore,
    prefix: &str,
    state: &mut WorldState,
    target: u64,
    observe: &mut impl FnMut(&EncodedSlot),
) -> Result<bool> {
    while state.sequence() < target {
        let Some(slot) = tip::read_slot(store, prefix, state.sequence() + 1).await? else {
            return Ok(true);
        };
        state.apply_in_place(&slot)?;
        observe(&slot);
    }
    Ok(false)
}

/// Reads slot name `sequence` from `first` on, a new read every `every` while reads
/// started before `until` find it absent: the first that finds the slot answers. `None`
/// when none did (or the last failed).
async fn peek_slot(
    store: Arc<dyn BlobStore>,
    prefix: String,
    sequence: u64,
    first: Instant,
    every: Duration,
    until: Instant,
) -> Result<Option<EncodedSlot>> {
    let mut reads = futures::stream::FuturesUnordered::new();
    let mut next = first;
    let mut last = Ok(None);
    loop {
        let more = next <= until;
        tokio::select! {
            biased;
            Some(read) = futures::StreamExt::next(&mut reads), if !reads.is_empty() => match read {
                Ok(Some(slot)) => return Ok(Some(slot)),
                other => last = other,
            },
            () = tokio::time::sleep_until(next), if more => {
                let (store, prefix) = (store.clone(), prefix.clone());
                reads.push(async move { tip::read_slot(store.as_ref(), &prefix, sequence).await });
                next += every;
            }
            else => return last,
        }
    }
}

/// One slot create: its name, bytes and how to pursue it.
pub(super) struct SlotCreate {
    pub(super) key: String,
    pub(super) first: u64,
    pub(super) bytes: Bytes,
    pub(super) retry: RetryPolicy,
    /// When contending: start reading the name this long after the create starts.
    pub(super) read_behind: Option<Duration>,
    pub(super) latencies: Arc<Mutex<Latencies>>,
}

/// Creates a slot and decides the outcome. With a read behind the create, whichever
/// settles the name first decides: other bytes under the name mean the create cannot win
/// (names are create-if-absent and slots are never replaced), our bytes mean it did.
pub(super) async fn create_slot(store: Arc<dyn BlobStore>, create: SlotCreate) -> CreateOutcome {
    let Some(offset) = create.read_behind else {
        return decide_create(store, &create).await;
    };
    let read = read_behind(store.clone(), &create, offset);
    let decide = decide_create(store.clone(), &create);
    tokio::pin!(read, decide);
    tokio::select! {
        biased;
        outcome = &mut decide => outcome,
        Some(outcome) = &mut read => outcome,
    }
}

/// Reads the name `offset` after a create started; `None` when that settles nothing.
pub(super) async fn read_behind(
    store: Arc<dyn BlobStore>,
    create: &SlotCreate,
    offset: Duration,
) -> Option<CreateOutcome> {
    tokio::time::sleep(offset).await;
    let started = Instant::now();
    let object = store.get(&create.key).await.ok()?;
    Latencies::note(
        &mut create.latencies.lock().expect("latency lock poisoned").read,
        started.elapsed(),
    );
    if object.data == create.bytes {
        return Some(CreateOutcome::Won);
    }
    let winner = EncodedSlot::decode(&create.key, create.first, object.data).ok()?;
    Some(CreateOutcome::Lost(Box::new(winner)))
}

/// Creates a slot and decides the outcome, reading the name back whenever the create's
/// answer does not settle it.
async fn decide_create(store: Arc<dyn BlobStore>, create: &SlotCreate) -> CreateOutcome {
    let SlotCreate {
        key,
        first,
        bytes,
        retry,
        latencies,
        ..
    } = create;
    let (first, retry) = (*first, *retry);
    let note = |which: fn(&mut Latencies) -> &mut Option<Duration>, started: Instant| {
        let mut latencies = latencies.lock().expect("latency lock poisoned");
        Latencies::note(which(&mut latencies), started.elapsed());
    };
    let mut rng = SmallRng::seed_from_u64(retry.seed);
    let mut last_error = None;
    for attempt in 0..retry.attempts {
        if attempt > 0 {
            tokio::time::sleep(retry.pause(attempt - 1, &mut rng)).await;
        }
        let started = Instant::now();
        let created = store.create(key, bytes.clone()).await;
        if created
            .as_ref()
            .map_or_else(|e| e.is_precondition(), |_| true)
        {
            note(|l| &mut l.create, started);
        }
        match created {
            Ok(_) => return CreateOutcome::Won,
            // Every failure is read back: even one that looks definite may have come after
            // the create landed (an answer that could not be read, say).
            Err(e) => {
                let started = Instant::now();
                let read = store.get(key).await;
                if read.is_ok() {
                    note(|l| &mut l.read, started);
                }
                match read {
                    Ok(object) if object.data == *bytes => return CreateOutcome::Won,
                    Ok(object) => {
                        return match EncodedSlot::decode(key, first, object.data) {
                            Ok(winner) => CreateOutcome::Lost(Box::new(winner)),
                            Err(err) => CreateOutcome::Failed(err),
                        };
                    }
                    // Absent after a definite refusal: it did not land, and trying again
                    // would be refused the same way.
                    Err(read)
                        if read.is_not_found()
                            && !(e.is_precondition() || e.kind().is_retryable()) =>
                    {
                        return CreateOutcome::Failed(Error::storage(Op::Commit, e));
                    }
                    // Absent: the create did not land; retry the identical create. Any other
                    // failure leaves the outcome open: retry, and read back again.
                    Err(read) => last_error = Some(if read.is_not_found() { e } else { read }),
                }
            }
        }
    }
    let err = last_error.map_or_else(
        || {
            Error::new(
                Op::Commit,
                key.clone(),
                ErrorKind::Storage,
                "no attempt made",
            )
        },
        |e| Error::storage(Op::Commit, e),
    );
    CreateOutcome::Failed(Error::new(
        Op::Commit,
        key,
        ErrorKind::OutcomeUnknown,
        format!(
            "slot create undecided after {} attempts: {err}",
            retry.attempts
        ),
    ))
}

/// Creates a content-addressed blob. A create that did not plainly succeed is settled by
/// reading the key back: the blob is staged only when the object there holds exactly these
/// bytes (a refusal such as an invalid-request answer never counts as "already stored").
pub(super) async fn create_blob(
    store: Arc<dyn BlobStore>,
    key: String,
    bytes: Bytes,
    retry: RetryPolicy,
) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(retry.seed);
    let mut last = None;
    for attempt in 0..retry.attempts {
        if attempt > 0 {
            tokio::time::sleep(retry.pause(attempt - 1, &mut rng)).await;
        }
        let refused = match store.create(&key, bytes.clone()).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        match store.get(&key).await {
            Ok(found) if found.data == bytes => return Ok(()),
            Ok(_) => {
                return Err(Error::integrity(
                    Op::Stage,
                    key,
                    "the object under this blob's hash holds other bytes",
                ));
            }
            // Absent: the create did not land. A precondition answer for a key that is
            // not there, or a retryable failure, is tried again; other refusals are final.
            Err(read) if read.is_not_found() => {
                if !(refused.is_precondition() || refused.kind().is_retryable()) {
                    return Err(Error::storage(Op::Stage, refused));
                }
                last = Some(refused);
            }
            Err(read) => last = Some(read),
        }
    }
    Err(last.map_or_else(
        || Error::new(Op::Stage, key, ErrorKind::Storage, "no attempt made"),
        |e| Error::storage(Op::Stage, e),
    ))
}

impl Actor {
    pub(super) fn retry_policy(&self) -> RetryPolicy {
        let config = &self.shared.config;
        RetryPolicy {
            attempts: config.create_attempts.max(1),
            base: config.backoff_base,
            cap: config.backoff_cap,
            seed: self.shared.next_seed(),
        }
    }

    /// Reads the slots a peer hinted at and rebuilds the pipeline on them (as after a lost
    /// race, without the failed create), reporting how far the log got so the peer knows it
    /// is this store's turn after it.
    pub(super) async fn read_ahead(&mut self) {
        let Some(hinted) = self.read_ahead.take() else {
            return;
        };
        let arrivals = self.shared.arrivals_now();
        let mut next = self.tail.clone();
        let mut touched = Touched::default();
        let policy = self.shared.config.policy_path.clone();
        let own = self.shared.config.store;
        let mut peer = false;
        let store = self.shared.store.clone();
        let recent = &self.shared.recent;
        let mut writers = Vec::new();
        let mut observe = |slot: &EncodedSlot| {
            touched.add(slot, policy.as_ref());
            peer |= slot.slot.store != own;
            writers.push(slot.slot.store);
            recent.publish(slot);
        };
        // The hint names how far the log reached: read the slots up to it by name, one
        // read each, and no probe past it (the next create settles whether more came). Far
        // behind, a listing finds them all at once.
        let read = if hinted.saturating_sub(next.sequence()) > READ_AHEAD_BY_NAME {
            tip::catch_up_observed(
                store.as_ref(),
                &self.shared.config.prefix,
                &mut next,
                &mut observe,
            )
            .await
            .map(|_| true)
        } else {
            read_up_to(
                store.as_ref(),
                &self.shared.config.prefix,
                &mut next,
                hinted,
                &mut observe,
            )
            .await
        };
        match read {
            // Reached the tip: the next name was found absent.
            Ok(true) => self.shared.settle(next.sequence(), arrivals),
            Ok(false) => {}
            Err(e) => tracing::warn!("reading ahead after a peer hint stopped early: {e}"),
        }
        if next.sequence() == self.tail.sequence() {
            return;
        }
        if peer {
            self.shared.note_peer();
        }
        self.adopt(next, touched).await;
        self.tail_moved(writers, self.hint_arrived);
    }

    /// A peek at the next name came back: a slot there is the turn it waited for, taken in
    /// as a read ahead would; an absent name or a failed read leaves the hint to bring it.
    pub(super) async fn on_peeked(&mut self, read: Result<Option<EncodedSlot>>) {
        let slot = match read {
            Ok(Some(slot)) => slot,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("peeking at the next slot name failed: {e}");
                return;
            }
        };
        if self.creating.is_some() || slot.slot.first != self.tail.sequence() + 1 {
            return;
        }
        let mut next = self.tail.clone();
        if let Err(e) = next.apply_in_place(&slot) {
            tracing::warn!("a peeked slot does not apply: {e}");
            return;
        }
        self.shared.recent.publish(&slot);
        let mut touched = Touched::default();
        touched.add(&slot, self.shared.config.policy_path.as_ref());
        if slot.slot.store != self.shared.config.store {
            self.shared.note_peer();
        }
        self.adopt(next, touched).await;
        self.tail_moved([slot.slot.store], Instant::now());
    }

    /// Records that the tail moved onto slots `writers` wrote (oldest first), the newest
    /// landing about `landed`, and decides whose turn the next name is.
    pub(super) fn tail_moved(
        &mut self,
        writers: impl IntoIterator<Item = StoreId>,
        landed: Instant,
    ) {
        for writer in writers {
            self.writers.push_back(writer);
            if self.writers.len() > ROTATION_SLOTS {
                self.writers.pop_front();
            }
        }
        self.tail_landed = landed;
        self.turn_until = None;
        if let Some(peek) = self.peek.take() {
            peek.abort();
        }
        self.decide_turn();
    }

    /// While hints flow and peers contend, contending stores take the log's names in a
    /// rotation: the stores that wrote its newest [`ROTATION_SLOTS`] slots, with this one,
    /// in store id order, each name going to the store after the one that wrote the slot
    /// before it. How many turns come before this store's: 0 when the next name is its
    /// turn, `None` when no rotation applies.
    pub(super) fn turn_position(&self) -> Option<usize> {
        let contending = self
            .contended
            .is_some_and(|at| at.elapsed() <= self.shared.config.yield_window);
        if !(contending && self.shared.peer_active() && self.shared.hinted()) {
            return None;
        }
        let last = *self.writers.back()?;
        let me = self.shared.config.store;
        let mut rotation: Vec<StoreId> = self.writers.iter().copied().chain([me]).collect();
        rotation.sort_unstable();
        rotation.dedup();
        let n = rotation.len();
        if n < 2 {
            return None;
        }
        let owner = (rotation.binary_search(&last).ok()? + 1) % n;
        let mine = rotation.binary_search(&me).ok()?;
        Some((mine + n - owner) % n)
    }

    /// Holds the next create while the next name is another store's turn: for `position`
    /// turns of one slot read and create each (at 1.5 times this store's own latencies),
    /// counted from when the tail's slot landed, or until the tail moves. The store right
    /// after the owner peeks at the name just after the owner's create would land, so it
    /// has the owner's slot about when it lands instead of one read after its hint.
    pub(super) fn decide_turn(&mut self) {
        let Some(position) = self.turn_position().filter(|p| *p > 0) else {
            self.turn_until = None;
            return;
        };
        let (create, read) = {
            let latencies = self.shared.latencies.lock().expect("latency lock poisoned");
            (latencies.create, latencies.read)
        };
        let turn = match (create, read) {
            (Some(create), Some(read)) => (create + read) * 3 / 2,
            _ => self.shared.config.handoff_wait,
        };
        let until = self.tail_landed + turn * position as u32;
        self.turn_until = Some(until);
        if position == 1
            && self.peek.is_none()
            && let (Some(create), Some(read)) = (create, read)
        {
            // The first read lands when the owner's create would if it started as the
            // tail's slot landed; later ones follow every half read until the turn ends.
            // A store that wrote none of the rotation's slots is not in its peers'
            // rotations: where their turns and its own collide, the first to have the
            // slot before wins, so it reads twice as often until its slot gets it in.
            let first = self.tail_landed + create.saturating_sub(read);
            let newcomer = !self.writers.contains(&self.shared.config.store);
            let every = (read / if newcomer { 4 } else { 2 }).max(Duration::from_millis(1));
            let store = self.shared.store.clone();
            let prefix = self.shared.config.prefix.clone();
            let sequence = self.tail.sequence() + 1;
            self.peek = Some(tokio::spawn(peek_slot(
                store, prefix, sequence, first, every, until,
            )));
        }
    }
}
