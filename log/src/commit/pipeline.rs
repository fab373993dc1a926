//! The committer's actor: its loop, the pipeline of batches behind the front, and what a
//! won, lost or failed slot create does to them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::BATCH_SIZES_KEPT;
use super::batch::{Batch, MemberOutcome, Touched, answer_batch, version_of, writes_nothing};
use super::create::{CreateOutcome, SlotCreate, create_slot};
use super::shared::{ABANDONED, Msg, Pending, QUEUED, Shared, TAKEN, abandon};
use super::shed::Folded;
use super::warm::{VersionCache, Warming};
use crate::error::{Error, ErrorKind, Op, Result};
use crate::ids::{Hash, StoreId};
use crate::keys;
use crate::slot::EncodedSlot;
use crate::state::WorldState;
use crate::tip;

enum Event {
    Message(Option<Msg>),
    Created(CreateOutcome),
    Peeked(Result<Option<EncodedSlot>>),
    Staged(std::result::Result<(tokio::task::Id, (Hash, Result<()>)), tokio::task::JoinError>),
    Timer,
}

/// The most replaced states kept for freeing later (no-op batches answer without a create).
const RELEASED_KEPT: usize = 16;

/// How many versions of members no longer in the pipeline `Actor::built` may hold before it
/// is rebuilt from the pipeline.
const BUILT_SLACK: usize = 64;

pub(super) struct Actor {
    pub(super) shared: Arc<Shared>,
    pub(super) rx: mpsc::UnboundedReceiver<Msg>,
    rx_open: bool,
    pub(super) queue: VecDeque<Pending>,
    pub(super) batches: VecDeque<Batch>,
    /// The newest state this pipeline knows is committed: the base of the front's slot.
    pub(super) tail: WorldState,
    pub(super) creating: Option<JoinHandle<CreateOutcome>>,
    pub(super) staging: JoinSet<(Hash, Result<()>)>,
    /// The blob each staging task creates, so a task that panicked fails its blob.
    pub(super) staging_ids: HashMap<tokio::task::Id, Hash>,
    /// Requests that had arrived when the slot being created was sealed: its win settles
    /// its result for them.
    create_arrivals: u64,
    /// The front writes nothing and no probe since its members arrived confirmed its base:
    /// probe the tip before answering it.
    probe_front: bool,
    pub(super) staged: HashSet<Hash>,
    pub(super) staging_now: HashSet<Hash>,
    pub(super) stage_failed: HashMap<Hash, Error>,
    pub(super) limit: usize,
    yield_until: Option<Instant>,
    handoff_until: Option<Instant>,
    /// After a win: until when the next seal waits for this many members (see
    /// [`CommitterConfig::gather`](super::CommitterConfig::gather)).
    gather: Option<(Instant, usize)>,
    /// States replaced since the last create began, freed while the next one is in flight
    /// (or once idle, or past [`RELEASED_KEPT`]): freeing the nodes only they held is work
    /// the answers and the next seal need not wait for.
    released: Vec<WorldState>,
    /// The bytes of the versions built in the pipeline, by hash: what a member's check may
    /// read before the bucket holds it ([`PendingVersions`]). Versions of confirmed batches
    /// move to the version cache. Those of members that failed or were rebuilt stay until
    /// the map outgrows the pipeline by [`BUILT_SLACK`], which is harmless: a check asks
    /// only for versions its state holds.
    pub(super) built: imbl::HashMap<Hash, Bytes>,
    /// When a peer last contended for this store's names with hints flowing: lost a slot
    /// to it, beat it to one, or took a turn it was offered.
    pub(super) contended: Option<Instant>,
    /// The stores that wrote the newest slots of the tail, oldest first (at most
    /// [`ROTATION_SLOTS`](super::create::ROTATION_SLOTS)): with this store, the rotation contending stores take turns in.
    pub(super) writers: VecDeque<StoreId>,
    /// About when the tail's newest slot landed in the bucket.
    pub(super) tail_landed: Instant,
    /// While it is another store's turn in the rotation: hold the next create until then
    /// (or until the tail moves).
    pub(super) turn_until: Option<Instant>,
    /// A read of the next name, timed to land just after the store whose turn it is would
    /// have created it.
    pub(super) peek: Option<JoinHandle<Result<Option<EncodedSlot>>>>,
    /// When the hint that set `read_ahead` arrived.
    pub(super) hint_arrived: Instant,
    /// When this store last left a name free, or last saw a peer (see
    /// [`CommitterConfig::listen_every`](super::CommitterConfig::listen_every)).
    last_listened: Instant,
    /// `(first, last)` of this store's recent slots, oldest first.
    own_slots: VecDeque<(u64, u64)>,
    /// What checkpoints hold and the committer's states do not yet fold, oldest first.
    pub(super) shedding: VecDeque<Folded>,
    /// Answered once `shedding` is empty.
    pub(super) shed_waiters: Vec<oneshot::Sender<()>>,
    /// Races lost since the last win.
    lost_streak: u32,
    /// A peer hinted at slots this store has not read: read them before the next create
    /// rather than lose its name to them.
    pub(super) read_ahead: Option<u64>,
    /// Version bytes by hash, shared with warm-up reads.
    pub(super) cache: Arc<Mutex<VersionCache>>,
    /// Reads ahead for queued appends, by version hash; a build waits on one in flight.
    pub(super) warming: Arc<Mutex<HashMap<Hash, Warming>>>,
    closing: Option<Vec<oneshot::Sender<()>>>,
}

fn closed_error(pending: &Pending) -> Error {
    Error::new(
        pending.request.mutation.op(),
        pending.request.mutation.raw_path(),
        ErrorKind::Closed,
        "the committer is closed",
    )
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// When a front held by pauses looks again, given the ends of the pauses it last saw: at the
/// latest end, or at once when every one has ended since. The front judged them with an
/// earlier reading of the clock than this one, so a pause it saw running may be over now: its
/// end must still wake the front, which waits for nothing else (no request, no create).
fn front_wakeup(ends: impl Iterator<Item = Instant>, now: Instant) -> Option<Instant> {
    ends.max().map(|end| end.max(now))
}

/// Races lost in a row after which a store takes itself to trail the log by more than a
/// slot and jumps to its end by listing. Under fair contention between three stores, losing
/// two in a row is common and a listing would only cost a turn.
const TRAILING_LOSSES: u32 = 4;

impl Actor {
    /// Starts the actor for `shared` on the current tokio runtime, taking requests from `rx`.
    pub(super) fn spawn(shared: Arc<Shared>, rx: mpsc::UnboundedReceiver<Msg>) {
        let limit = shared.config.batch_start;
        let tail = shared.served.borrow().clone();
        let actor = Actor {
            shared,
            rx,
            rx_open: true,
            queue: VecDeque::new(),
            batches: VecDeque::new(),
            tail,
            creating: None,
            staging: JoinSet::new(),
            staging_ids: HashMap::new(),
            create_arrivals: 0,
            probe_front: false,
            staged: HashSet::new(),
            staging_now: HashSet::new(),
            stage_failed: HashMap::new(),
            limit,
            yield_until: None,
            handoff_until: None,
            gather: None,
            released: Vec::new(),
            built: imbl::HashMap::new(),
            contended: None,
            writers: VecDeque::new(),
            tail_landed: Instant::now(),
            turn_until: None,
            peek: None,
            hint_arrived: Instant::now(),
            last_listened: Instant::now(),
            own_slots: VecDeque::new(),
            shedding: VecDeque::new(),
            shed_waiters: Vec::new(),
            lost_streak: 0,
            read_ahead: None,
            cache: Arc::default(),
            warming: Arc::default(),
            closing: None,
        };
        tokio::spawn(actor.run());
    }

    async fn run(mut self) {
        loop {
            while let Ok(msg) = self.rx.try_recv() {
                self.receive(msg);
            }
            if self.closing.is_some() {
                for pending in std::mem::take(&mut self.queue) {
                    let err = closed_error(&pending);
                    let _ = pending.reply.send(Err(err));
                }
            }
            self.expire_queue();
            self.shed_some();
            if self.closing.is_none() {
                self.fill_pipeline().await;
                // A peek in flight finds the next slot within half a read of its landing,
                // sooner than a read begun now: the hint waits for it.
                if self.read_ahead.is_some() && self.creating.is_none() && self.peek.is_none() {
                    self.read_ahead().await;
                    // Reading ahead returned the batches behind the front to the queue: they
                    // are rebuilt before the front is sealed, so it can take them in.
                    self.fill_pipeline().await;
                }
            }
            self.advance_front();
            while std::mem::take(&mut self.probe_front) && self.closing.is_none() {
                self.probe_front_batch().await;
                self.advance_front();
            }
            if self.closing.is_some() && self.creating.is_none() {
                for batch in std::mem::take(&mut self.batches) {
                    for member in batch.members {
                        let err = closed_error(&member.pending);
                        let _ = member.pending.reply.send(Err(err));
                    }
                }
                for done in self.closing.take().unwrap_or_default() {
                    let _ = done.send(());
                }
                return;
            }
            self.wait().await;
        }
    }

    fn receive(&mut self, msg: Msg) {
        match msg {
            Msg::Submit(pending) => {
                if self.closing.is_some() {
                    let err = closed_error(&pending);
                    let _ = pending.reply.send(Err(err));
                } else {
                    self.warm(&pending.request.mutation);
                    self.queue.push_back(pending);
                }
            }
            Msg::Shed(folded, done) => {
                self.shedding.extend(folded);
                self.shed_waiters.push(done);
            }
            Msg::Close(done) => self.closing.get_or_insert_with(Vec::new).push(done),
            Msg::Follow(sequence) => {
                self.shared.note_hint();
                let ours = self
                    .own_slots
                    .iter()
                    .any(|(first, last)| (*first..=*last).contains(&sequence));
                if ours {
                    self.shared.note_peer();
                    self.contended = Some(Instant::now());
                    if self.turn_position().is_some() {
                        // The rotation says whose turn the next name is.
                        self.decide_turn();
                        if self.turn_until.is_some() {
                            self.shared.stats().handoffs += 1;
                        }
                    } else {
                        self.handoff_until = Some(Instant::now() + self.shared.config.handoff_wait);
                        self.shared.stats().handoffs += 1;
                    }
                } else if sequence > self.shared.served.borrow().sequence() {
                    self.shared.note_peer();
                    if self.handoff_until.take().is_some() || self.turn_until.is_some() {
                        // The peer took the turn this store held for it.
                        self.contended = Some(Instant::now());
                    }
                    if self.read_ahead.is_none() {
                        self.hint_arrived = Instant::now();
                    }
                    self.read_ahead = self.read_ahead.max(Some(sequence));
                }
            }
        }
    }

    /// Waits for the next thing that can move the committer forward.
    pub(super) async fn wait(&mut self) {
        let idle = self.batches.is_empty() && self.queue.is_empty();
        if self.creating.is_some() || idle || self.released.len() > RELEASED_KEPT {
            // Nothing else to do until the create lands (or at all).
            self.released.clear();
        }
        let members: usize = self.batches.iter().map(|b| b.members.len()).sum();
        if self.built.len() > 2 * members + BUILT_SLACK {
            // Members that failed, were requeued or were rebuilt left versions no batch
            // holds: keep only the pipeline's.
            self.built = self
                .batches
                .iter()
                .flat_map(|b| &b.members)
                .filter_map(|m| version_of(&m.result))
                .collect();
        }
        let now = Instant::now();
        let pauses = [
            self.yield_until,
            self.handoff_until,
            self.turn_until,
            self.gather.map(|(until, _)| until),
        ];
        let hold_until = front_wakeup(pauses.into_iter().flatten(), now)
            .filter(|_| self.creating.is_none() && !self.batches.is_empty());
        // A pause that has passed must not stay armed: its timer would fire at once, forever,
        // while the front waits on something else (a paused clock would never advance).
        self.yield_until = self.yield_until.filter(|until| *until > now);
        self.handoff_until = self.handoff_until.filter(|until| *until > now);
        self.turn_until = self.turn_until.filter(|until| *until > now);
        self.gather = self.gather.filter(|(until, _)| *until > now);
        let next_deadline = self
            .queue
            .iter()
            .filter(|p| p.ticket.load(Ordering::SeqCst) == QUEUED)
            .filter_map(|p| p.request.deadline)
            .min();
        let mut creating = self.creating.take();
        let mut peek = self.peek.take();
        // Biased, so a run replays from its seed (tokio's random branch order is not
        // seeded); completions come first, as they are finite, then requests, then timers.
        let event = tokio::select! {
            biased;
            outcome = async { creating.as_mut().expect("guarded").await }, if creating.is_some() => {
                Event::Created(outcome.unwrap_or_else(|e| CreateOutcome::Failed(Error::new(
                    Op::Commit, "", ErrorKind::Storage, format!("slot create task failed: {e}"),
                ))))
            }
            Some(done) = self.staging.join_next_with_id(), if !self.staging.is_empty() => Event::Staged(done),
            read = async { peek.as_mut().expect("guarded").await }, if peek.is_some() => {
                Event::Peeked(read.unwrap_or_else(|e| Err(Error::new(
                    Op::Read, "", ErrorKind::Storage, format!("peek task failed: {e}"),
                ))))
            }
            msg = self.rx.recv(), if self.rx_open => Event::Message(msg),
            () = sleep_until_opt(hold_until), if hold_until.is_some() => Event::Timer,
            () = sleep_until_opt(next_deadline), if next_deadline.is_some() => Event::Timer,
            // More to shed: take another turn once nothing else is ready.
            () = std::future::ready(()), if !self.shedding.is_empty() => Event::Timer,
        };
        if !matches!(event, Event::Created(_)) {
            self.creating = creating;
        }
        if !matches!(event, Event::Peeked(_)) {
            self.peek = peek;
        }
        match event {
            Event::Message(Some(msg)) => self.receive(msg),
            Event::Message(None) => {
                self.rx_open = false;
                self.closing.get_or_insert_with(Vec::new);
            }
            Event::Created(outcome) => self.on_created(outcome).await,
            Event::Peeked(read) => self.on_peeked(read).await,
            Event::Staged(Ok((id, (hash, result)))) => {
                self.staging_ids.remove(&id);
                self.staging_now.remove(&hash);
                match result {
                    Ok(()) => {
                        self.staged.insert(hash);
                    }
                    Err(e) => {
                        self.stage_failed.insert(hash, e);
                    }
                }
            }
            Event::Staged(Err(e)) => {
                // A staging task that panicked fails its blob: the batches waiting on it are
                // answered instead of waiting for it forever.
                tracing::error!("blob staging task failed: {e}");
                if let Some(hash) = self.staging_ids.remove(&e.id()) {
                    self.staging_now.remove(&hash);
                    self.stage_failed.insert(
                        hash,
                        Error::new(
                            Op::Stage,
                            keys::blob_key(&self.shared.config.prefix, &hash),
                            ErrorKind::Storage,
                            format!("blob staging task failed: {e}"),
                        ),
                    );
                }
            }
            Event::Timer => {}
        }
    }

    /// Answers queued requests that were abandoned or whose deadline passed.
    fn expire_queue(&mut self) {
        let now = Instant::now();
        self.queue
            .retain(|p| p.ticket.load(Ordering::SeqCst) != ABANDONED);
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for pending in std::mem::take(&mut self.queue) {
            if pending.request.deadline.is_some_and(|d| d <= now) && abandon(&pending.ticket) {
                let err = Error::new(
                    pending.request.mutation.op(),
                    pending.request.mutation.raw_path(),
                    ErrorKind::Canceled,
                    "deadline passed while queued",
                );
                let _ = pending.reply.send(Err(err));
            } else {
                kept.push_back(pending);
            }
        }
        self.queue = kept;
    }

    /// Takes the next live request off the queue (abandoned ones are dropped).
    fn take_next(&mut self) -> Option<Pending> {
        while let Some(pending) = self.queue.pop_front() {
            let was =
                pending
                    .ticket
                    .compare_exchange(QUEUED, TAKEN, Ordering::SeqCst, Ordering::SeqCst);
            // A re-queued member was taken before and stays taken.
            if was.is_ok() || was == Err(TAKEN) {
                return Some(pending);
            }
        }
        None
    }

    /// Moves queued requests into open batches: the last batch while it has room, else a new
    /// batch while the pipeline has room.
    async fn fill_pipeline(&mut self) {
        loop {
            let joinable = self.batches.back().is_some_and(Batch::has_room);
            if !joinable && self.batches.len() >= self.shared.config.pipeline {
                return;
            }
            let Some(pending) = self.take_next() else {
                return;
            };
            if !joinable {
                let working = match self.batches.back() {
                    Some(last) => last.working.clone(),
                    None => {
                        // Nothing in flight: start from the newest state known, which a
                        // refresh may have moved past this pipeline's own.
                        let served = self.shared.served.borrow().clone();
                        if served.sequence() > self.tail.sequence() {
                            self.tail = served;
                            // Who wrote the slots a refresh applied is not known here.
                            self.writers.clear();
                            self.tail_moved([], Instant::now());
                        }
                        // The store was idle: the log may have moved since it last looked.
                        // One probe puts the tail at the tip for this request (and every
                        // one queued before it), so a replica that was only behind judges
                        // it on every write acknowledged before it arrived.
                        if !self
                            .shared
                            .settled()
                            .covers(self.tail.sequence(), pending.arrival)
                        {
                            // A failed probe was logged; the create or a later probe settles.
                            let _ = self.confirm_tip().await;
                        }
                        self.tail.clone()
                    }
                };
                self.limit = self.limit.min(self.batch_ceiling());
                self.batches.push_back(Batch::open(working, self.limit));
            }
            let mut batch = self.batches.pop_back().expect("a batch to join");
            self.add_member(&mut batch, pending).await;
            if batch.members.len() == batch.cap && !self.queue.is_empty() {
                self.limit = (self.limit * 2).min(self.batch_ceiling());
            }
            self.batches.push_back(batch);
        }
    }

    /// Probes the tip from the tail and catches up to it, settling the result for every
    /// request that arrived before the probe began; returns the slots it applied and what
    /// they touched. A failed probe keeps what it applied and settles nothing.
    async fn confirm_tip(&mut self) -> (usize, Touched, Result<()>) {
        let arrivals = self.shared.arrivals_now();
        let mut next = self.tail.clone();
        let mut touched = Touched::default();
        let policy = self.shared.config.policy_path.clone();
        let own = self.shared.config.store;
        let mut peer = false;
        let store = self.shared.store.clone();
        let recent = &self.shared.recent;
        let mut writers = Vec::new();
        let read = tip::catch_up_observed(
            store.as_ref(),
            &self.shared.config.prefix,
            &mut next,
            |slot| {
                touched.add(slot, policy.as_ref());
                peer |= slot.slot.store != own;
                writers.push(slot.slot.store);
                recent.publish(slot);
            },
        )
        .await;
        if peer {
            self.shared.note_peer();
        }
        let applied = (next.sequence() - self.tail.sequence()) as usize;
        if applied > 0 {
            self.tail = next;
            self.tail_moved(writers, Instant::now());
            self.shared.install(&self.tail);
        }
        match read {
            Ok(_) => {
                self.shared.settle(self.tail.sequence(), arrivals);
                (applied, touched, Ok(()))
            }
            Err(e) => {
                tracing::warn!("probing the log's tip failed: {e}");
                (applied, touched, Err(e))
            }
        }
    }

    /// Confirms the base of a front that writes nothing (see [`Actor::advance_front`]):
    /// when the tip moved, the front is rebuilt on it; when the probe fails, its members are
    /// answered with that failure (nothing was written).
    async fn probe_front_batch(&mut self) {
        let (applied, touched, read) = self.confirm_tip().await;
        if read.is_err() || applied > 0 {
            let Some(front) = self.batches.pop_front() else {
                return;
            };
            self.requeue_later_batches();
            if let Err(e) = read {
                for member in front.members {
                    let mutation = &member.pending.request.mutation;
                    let err = Error::new(
                        mutation.op(),
                        mutation.raw_path(),
                        e.kind(),
                        format!("could not confirm the log's tip: {e}"),
                    );
                    let _ = member.pending.reply.send(Err(err));
                }
                return;
            }
            let base = self.tail.clone();
            let rebuilt = self.rebuild(base, front.members, front.cap, touched).await;
            self.batches.push_front(rebuilt);
        }
    }

    /// Moves the front of the pipeline: fails a batch whose blobs could not be staged; once
    /// nothing is in flight, no pause is pending and its blobs are in, seals the front and
    /// answers it at once when it writes nothing, or starts creating its slot.
    fn advance_front(&mut self) {
        while self.creating.is_none() {
            let Some(front) = self.batches.front() else {
                return;
            };
            if let Some(err) = front
                .blobs
                .iter()
                .find_map(|(h, _)| self.stage_failed.get(h))
            {
                let err = err.duplicate();
                for (h, _) in &front.blobs {
                    self.stage_failed.remove(h);
                }
                let batch = self.batches.pop_front().expect("front exists");
                self.fail_front(batch, &err);
                continue;
            }
            if front.sealed.is_none() {
                if !front.blobs.iter().all(|(h, _)| self.staged.contains(h))
                    || self.closing.is_some()
                {
                    return;
                }
                let now = Instant::now();
                if self.yield_until.is_some_and(|until| now < until)
                    || self.handoff_until.is_some_and(|until| now < until)
                    || self.turn_until.is_some_and(|until| now < until)
                    || self.gathering(now)
                {
                    return;
                }
                self.absorb_behind();
                let front = self.batches.front().expect("front exists");
                if writes_nothing(front) {
                    let settled = self.shared.settled();
                    let sequence = self.tail.sequence();
                    let confirmed = front
                        .members
                        .iter()
                        .all(|m| settled.covers(sequence, m.pending.arrival));
                    if !confirmed {
                        // Its answers are judged on the tail, which no probe, listing or
                        // win since these requests arrived showed to be the tip. A batch
                        // behind that writes settles it with its slot: the answers join it.
                        // Alone, the front waits for a probe.
                        if self.batches.len() > 1 {
                            let front = self.batches.pop_front().expect("front exists");
                            let next = self.batches.front_mut().expect("a batch behind");
                            let mut members = front.members;
                            members.append(&mut next.members);
                            next.members = members;
                            continue;
                        }
                        self.probe_front = true;
                        return;
                    }
                }
                self.yield_until = None;
                self.handoff_until = None;
                self.turn_until = None;
                self.gather = None;
                let mut front = self.batches.pop_front().expect("front exists");
                let sealed = self.seal(&mut front);
                let size = front.members.len();
                let short = size < front.cap;
                self.batches.push_front(front);
                {
                    let mut stats = self.shared.stats();
                    stats.batch_sizes.push(size);
                    let slot = sealed.as_ref().ok().and_then(|s| s.slot.as_ref());
                    if let Some(slot) = slot {
                        *stats
                            .slots_by_entries
                            .entry(slot.slot.entries.len())
                            .or_default() += 1;
                    }
                    let excess = stats.batch_sizes.len().saturating_sub(BATCH_SIZES_KEPT);
                    // Trimmed in chunks, so each push stays O(1) amortized.
                    if excess >= BATCH_SIZES_KEPT / 4 {
                        stats.batch_sizes.drain(..excess);
                    }
                }
                if short {
                    self.limit = self.shared.config.batch_start;
                }
                match sealed {
                    Ok(sealed) => {
                        self.batches.front_mut().expect("front exists").sealed = Some(sealed);
                    }
                    Err(e) => {
                        // The committer built something apply refuses: answer its writers
                        // with that rather than commit it.
                        tracing::error!("refusing to commit a slot that does not apply: {e}");
                        let batch = self.batches.pop_front().expect("front exists");
                        self.fail_front(batch, &e);
                        continue;
                    }
                }
            }
            let front = self.batches.front().expect("front exists");
            let Some(slot) = front.sealed.as_ref().and_then(|s| s.slot.as_ref()) else {
                let batch = self.batches.pop_front().expect("front exists");
                self.released.push(answer_batch(batch, None));
                continue;
            };
            let store = self.shared.store.clone();
            let key = keys::slot_key(&self.shared.config.prefix, slot.slot.first);
            let bytes = slot.bytes.clone();
            let first = slot.slot.first;
            let retry = self.retry_policy();
            // A store alone never reads behind its creates: only contention makes them pay.
            let read_behind = if self.shared.peer_active() {
                self.shared
                    .latencies
                    .lock()
                    .expect("latency lock poisoned")
                    .read_behind()
            } else {
                None
            };
            let latencies = self.shared.latencies.clone();
            self.create_arrivals = self.shared.arrivals_now();
            self.creating = Some(tokio::spawn(create_slot(
                store,
                SlotCreate {
                    key,
                    first,
                    bytes,
                    retry,
                    read_behind,
                    latencies,
                },
            )));
            return;
        }
    }

    /// Whether the next seal still waits for writers after a win: the window is open and
    /// fewer members wait, queued or built, than the win answered.
    fn gathering(&self, now: Instant) -> bool {
        let Some((until, wanted)) = self.gather else {
            return false;
        };
        let waiting =
            self.queue.len() + self.batches.iter().map(|b| b.members.len()).sum::<usize>();
        now < until && waiting < wanted
    }

    async fn on_created(&mut self, outcome: CreateOutcome) {
        let Some(front) = self.batches.pop_front() else {
            return;
        };
        let Some(sealed) = front.sealed.as_ref() else {
            return;
        };
        match outcome {
            CreateOutcome::Won => {
                if let Some(slot) = &sealed.slot {
                    // The bytes the bucket now holds under its name.
                    self.shared.recent.publish(slot);
                }
                let old_tail = std::mem::replace(&mut self.tail, sealed.result.clone());
                // The name was absent when the create landed, after it was sent.
                self.shared
                    .settle(self.tail.sequence(), self.create_arrivals);
                let old_served = self.shared.install_keeping(&self.tail);
                self.released.push(old_tail);
                self.released.extend(old_served);
                self.shared.report(self.tail.sequence());
                self.shared.stats().slots_won += 1;
                self.lost_streak = 0;
                let first = sealed.slot.as_ref().map(|s| s.slot.first);
                if let Some(slot) = &sealed.slot {
                    self.own_slots
                        .push_back((slot.slot.first, slot.slot.last()));
                    if self.own_slots.len() > 64 {
                        self.own_slots.pop_front();
                    }
                }
                for member in &front.members {
                    if let MemberOutcome::Write { change, .. } = &member.result
                        && let (Some(write), Some(bytes)) =
                            (&change.entry.write, &change.version_bytes)
                    {
                        self.cache_insert(write.hash, bytes.clone());
                        self.built.remove(&write.hash);
                    }
                }
                // Forget staged blobs no batch still waits on, so the set stays small.
                for (hash, _) in &front.blobs {
                    let needed = self
                        .batches
                        .iter()
                        .any(|b| b.blobs.iter().any(|(h, _)| h == hash));
                    if !needed {
                        self.staged.remove(hash);
                    }
                }
                let answered = front.members.len();
                let working = answer_batch(front, first);
                self.released.push(working);
                let window = self.shared.gather_window();
                if !window.is_zero() {
                    self.gather =
                        Some((Instant::now() + window, answered.min(self.batch_ceiling())));
                }
                let me = self.shared.config.store;
                self.tail_moved([me], Instant::now());
                let contending = self
                    .contended
                    .is_some_and(|at| at.elapsed() <= self.shared.config.yield_window);
                if self.turn_until.is_some() {
                    // Peers take the next names in the rotation: hold until they did.
                    self.shared.stats().yields += 1;
                    self.last_listened = Instant::now();
                } else if self.shared.peer_active() && self.shared.hinted() && contending {
                    // Peers want names too and hints say when they took one: hold the next
                    // create for them (until a hint shows their slot, at most a hand-off
                    // wait) instead of racing them for it.
                    self.handoff_until = Some(Instant::now() + self.shared.config.handoff_wait);
                    self.shared.stats().yields += 1;
                    self.last_listened = Instant::now();
                } else if self.shared.peer_active() {
                    let jitter = self.shared.yield_ceiling().as_micros() as u64;
                    if jitter > 0 {
                        let pause = self
                            .shared
                            .rng
                            .lock()
                            .expect("rng lock poisoned")
                            .random_range(1..=jitter);
                        self.yield_until = Some(Instant::now() + Duration::from_micros(pause));
                        self.shared.stats().yields += 1;
                    }
                    self.last_listened = Instant::now();
                } else {
                    let every = self.shared.config.listen_every;
                    let busy = !self.batches.is_empty() || !self.queue.is_empty();
                    if busy && !every.is_zero() && self.last_listened.elapsed() >= every {
                        self.last_listened = Instant::now();
                        self.yield_until = Some(Instant::now() + self.shared.listening_pause());
                        self.shared.stats().listening_pauses += 1;
                    }
                }
            }
            CreateOutcome::Lost(winner) => {
                self.shared.stats().slots_lost += 1;
                if winner.slot.store != self.shared.config.store {
                    self.shared.note_peer();
                    self.contended = Some(Instant::now());
                }
                let mut next = match self.tail.apply(&winner) {
                    Ok(next) => next,
                    Err(e) => {
                        tracing::error!("the slot that won our name does not apply: {e}");
                        self.fail_front(front, &e);
                        return;
                    }
                };
                self.shared.recent.publish(&winner);
                let mut touched = Touched::default();
                touched.add(&winner, self.shared.config.policy_path.as_ref());
                self.lost_streak += 1;
                let mut writers = vec![winner.slot.store];
                if self.lost_streak.is_multiple_of(TRAILING_LOSSES) {
                    // Losing again means this store trails the log: jump to its end.
                    let store = self.shared.store.clone();
                    let policy = self.shared.config.policy_path.clone();
                    let own = self.shared.config.store;
                    let mut peer = false;
                    let recent = &self.shared.recent;
                    let replayed = tip::replay_observed(
                        store.as_ref(),
                        &self.shared.config.prefix,
                        &mut next,
                        |slot| {
                            touched.add(slot, policy.as_ref());
                            peer |= slot.slot.store != own;
                            writers.push(slot.slot.store);
                            recent.publish(slot);
                        },
                    )
                    .await;
                    if peer {
                        self.shared.note_peer();
                    }
                    if let Err(e) = replayed {
                        tracing::warn!("catching up after a lost race stopped early: {e}");
                    }
                }
                self.tail = next.clone();
                self.tail_moved(writers, Instant::now());
                self.shared.install(&next);
                self.shared.report(next.sequence());
                self.requeue_later_batches();
                let cap = front.cap;
                let rebuilt = self.rebuild(next, front.members, cap, touched).await;
                self.batches.push_front(rebuilt);
            }
            CreateOutcome::Failed(err) => self.fail_front(front, &err),
        }
    }

    /// Answers the writers of the (popped) front batch with `err`, and returns everything
    /// judged on its writes to the queue: its other members (their answers assumed writes
    /// that did not commit) and every batch behind it.
    fn fail_front(&mut self, batch: Batch, err: &Error) {
        let mut rejudge = Vec::new();
        for member in batch.members {
            match member.result {
                MemberOutcome::Write { .. } => {
                    let _ = member.pending.reply.send(Err(err.duplicate()));
                }
                MemberOutcome::Answer(_) => rejudge.push(member.pending),
            }
        }
        self.requeue_later_batches();
        for pending in rejudge.into_iter().rev() {
            self.queue.push_front(pending);
        }
    }

    /// Moves the tail to `next`, read from the log ahead of any race, and rebuilds the
    /// front on it (as after a lost race, without the failed create), reporting how far the
    /// log got so the peer knows this store saw its slot.
    pub(super) async fn adopt(&mut self, next: WorldState, touched: Touched) {
        self.tail = next.clone();
        self.shared.install(&next);
        self.shared.report(next.sequence());
        if let Some(front) = self.batches.pop_front() {
            self.requeue_later_batches();
            let rebuilt = self.rebuild(next, front.members, front.cap, touched).await;
            self.batches.push_front(rebuilt);
        }
    }

    /// Returns the members of every batch left in the pipeline (the caller has taken the
    /// front) to the head of the queue in queue order, to be rebuilt on the new front.
    fn requeue_later_batches(&mut self) {
        let later: Vec<Pending> = self
            .batches
            .drain(..)
            .flat_map(|b| b.members.into_iter().map(|m| m.pending))
            .collect();
        for pending in later.into_iter().rev() {
            self.queue.push_front(pending);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::front_wakeup;

    #[test]
    fn a_pause_that_ended_since_the_front_looked_still_wakes_it_at_once() {
        let now = Instant::now();
        let ended = now - Duration::from_micros(230);
        assert_eq!(front_wakeup([ended].into_iter(), now), Some(now));
    }

    #[test]
    fn the_front_wakes_when_its_last_pause_ends_and_never_without_one() {
        let now = Instant::now();
        let later = now + Duration::from_millis(5);
        let ended = now - Duration::from_millis(1);
        assert_eq!(front_wakeup([ended, later].into_iter(), now), Some(later));
        assert_eq!(front_wakeup(std::iter::empty(), now), None);
    }
}
