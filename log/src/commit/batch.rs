//! Batches and their members: building each member on the state before it, rebuilding
//! after a lost race, sealing a batch into its slot and staging its blobs.

use bytes::Bytes;

use super::create::create_blob;
use super::pipeline::Actor;
use super::shared::Pending;
use super::{Outcome, PendingVersions};
use crate::build::{self, BuildLimits, Built, Change, Mutation};
use crate::error::{Error, Op, Result};
use crate::ids::Hash;
use crate::keys;
use crate::model::DocSummary;
use crate::path::DocPath;
use crate::slot::{EncodedSlot, Slot};
use crate::state::WorldState;
use crate::version::StoredVersion;
use crate::version::read_version;

/// What one member of a batch came to.
pub(super) enum MemberOutcome {
    /// An entry of the batch's slot.
    Write {
        change: Box<Change>,
        summary: DocSummary,
    },
    /// Answered without a change of its own (failure or no-op).
    Answer(Result<Outcome>),
}

pub(super) struct Member {
    pub(super) pending: Pending,
    pub(super) path: Option<DocPath>,
    pub(super) result: MemberOutcome,
}

/// A batch's slot, settled when the batch reaches the front of the pipeline.
pub(super) struct Sealed {
    /// `None` when no member writes.
    pub(super) slot: Option<EncodedSlot>,
    pub(super) result: WorldState,
}

/// Members committed together. A batch stays open, taking newly queued members, until it
/// reaches the front with nothing in flight; then it is sealed into its slot.
pub(super) struct Batch {
    pub(super) members: Vec<Member>,
    /// The most members the batch takes.
    pub(super) cap: usize,
    /// The state after every member, with provisional version locations: what later
    /// members and batches build on.
    pub(super) working: WorldState,
    inline_used: usize,
    /// Blobs the batch's versions need created before its slot.
    pub(super) blobs: Vec<(Hash, Bytes)>,
    pub(super) sealed: Option<Sealed>,
}

impl Batch {
    pub(super) fn open(working: WorldState, cap: usize) -> Batch {
        Batch {
            members: Vec::new(),
            cap,
            working,
            inline_used: 0,
            blobs: Vec::new(),
            sealed: None,
        }
    }

    pub(super) fn has_room(&self) -> bool {
        self.sealed.is_none() && self.members.len() < self.cap
    }
}

/// A written member's version: its hash and stored bytes.
pub(super) fn version_of(result: &MemberOutcome) -> Option<(Hash, Bytes)> {
    match result {
        MemberOutcome::Write { change, .. } => change
            .entry
            .write
            .as_ref()
            .map(|w| w.hash)
            .zip(change.version_bytes.clone()),
        MemberOutcome::Answer(_) => None,
    }
}

/// The blob a member's version needs, if it is not inline.
fn blob_of(result: &MemberOutcome) -> Option<(Hash, Bytes)> {
    match result {
        MemberOutcome::Write { change, .. } => {
            let write = change.entry.write.as_ref()?;
            match (&write.inline, &change.version_bytes) {
                (None, Some(bytes)) => Some((write.hash, bytes.clone())),
                _ => None,
            }
        }
        MemberOutcome::Answer(_) => None,
    }
}

/// Whether a member's write creates a document (and so counts against the quota).
fn creates_document(result: &MemberOutcome) -> bool {
    matches!(result, MemberOutcome::Write { change, .. }
        if change.entry.write.as_ref().is_some_and(|w| w.previous.is_none()))
}

/// Whether no member of `batch` writes: its slot would be empty.
pub(super) fn writes_nothing(batch: &Batch) -> bool {
    batch
        .members
        .iter()
        .all(|m| matches!(m.result, MemberOutcome::Answer(_)))
}

/// The paths a winning slot touched, for deciding which members to rebuild.
#[derive(Default)]
pub(super) struct Touched {
    pub(super) paths: Vec<DocPath>,
    pub(super) policy: bool,
}

impl Touched {
    pub(super) fn add(&mut self, slot: &EncodedSlot, policy: Option<&DocPath>) {
        for entry in &slot.slot.entries {
            self.policy |= policy == Some(&entry.path);
            self.paths.push(entry.path.clone());
        }
    }

    pub(super) fn reaches(&self, member: &Member) -> bool {
        if self.policy && member.pending.request.precondition.is_some() {
            return true;
        }
        match &member.path {
            Some(path) => self.paths.iter().any(|t| t.overlaps(path)),
            None => false,
        }
    }
}

/// Answers every member of a confirmed batch (`first`: its slot's first sequence), and
/// returns its working state for the caller to free.
pub(super) fn answer_batch(batch: Batch, first: Option<u64>) -> WorldState {
    let mut index = 0u64;
    for member in batch.members {
        let answer = match member.result {
            MemberOutcome::Write { change, summary } => {
                let sequence = first.map(|f| f + index);
                index += 1;
                Ok(Outcome {
                    doc: summary,
                    changed: true,
                    sequence,
                    prune: change.prune,
                })
            }
            MemberOutcome::Answer(answer) => answer,
        };
        let _ = member.pending.reply.send(answer);
    }
    batch.working
}

impl Actor {
    /// The most members a batch may grow to now.
    pub(super) fn batch_ceiling(&self) -> usize {
        let config = &self.shared.config;
        if self.shared.peer_active() {
            config.contended_batch_max
        } else {
            config.batch_max
        }
    }

    /// Builds `pending` on the batch's working state and adds it.
    pub(super) async fn add_member(&mut self, batch: &mut Batch, mut pending: Pending) {
        let path = pending.request.mutation.path().ok();
        let result = self.build_member(batch, &mut pending).await;
        if let Some((hash, bytes)) = version_of(&result) {
            self.built.insert(hash, bytes);
            let held = self.built.len();
            let mut stats = self.shared.stats();
            stats.pipeline_versions_most = stats.pipeline_versions_most.max(held);
        }
        if let Some(blob) = blob_of(&result) {
            self.stage_blob(&blob);
            batch.blobs.push(blob);
        }
        batch.members.push(Member {
            pending,
            path,
            result,
        });
    }

    /// Rebuilds `members` on `base` after a lost race. A member whose dependencies the
    /// touched paths do not reach keeps its result (its preconditions are not run again);
    /// the others are rebuilt, and what they touch counts for the members after them.
    pub(super) async fn rebuild(
        &mut self,
        base: WorldState,
        members: Vec<Member>,
        cap: usize,
        mut touched: Touched,
    ) -> Batch {
        let mut batch = Batch::open(base, cap);
        let mut kept = 0u64;
        let mut rebuilt = 0u64;
        let quota = self.shared.config.max_documents != 0;
        for member in members {
            // A kept create of a new path was counted against the quota on the old base; the
            // winner may have filled the world since, so it is judged again.
            let recount = quota && creates_document(&member.result);
            if !recount && !touched.reaches(&member) {
                let applies = match &member.result {
                    MemberOutcome::Write { change, .. } => batch
                        .working
                        .apply_entry(&change.entry, Some(change.provisional_record()))
                        .is_ok(),
                    MemberOutcome::Answer(_) => true,
                };
                if applies {
                    kept += 1;
                    let mut member = member;
                    if let MemberOutcome::Write { change, summary } = &mut member.result {
                        let inline = change.entry.write.as_ref().and_then(|w| w.inline.as_ref());
                        batch.inline_used += inline.map_or(0, Bytes::len);
                        if let Some(doc) = batch.working.doc(&change.entry.path) {
                            *summary = doc.summary();
                        }
                    }
                    if let Some(blob) = blob_of(&member.result) {
                        self.stage_blob(&blob);
                        batch.blobs.push(blob);
                    }
                    batch.members.push(member);
                    continue;
                }
                // Cannot happen while the dependency rule holds; rebuild to be safe.
                tracing::warn!("a kept member no longer applies; rebuilding it");
            }
            rebuilt += 1;
            if let Some(path) = &member.path {
                touched.paths.push(path.clone());
            }
            self.add_member(&mut batch, member.pending).await;
        }
        let mut stats = self.shared.stats();
        stats.members_kept += kept;
        stats.members_rebuilt += rebuilt;
        batch
    }

    async fn build_member(&mut self, batch: &mut Batch, pending: &mut Pending) -> MemberOutcome {
        let mutation = &pending.request.mutation;
        let base = match mutation {
            Mutation::Append { .. } => match self.append_base(batch, mutation).await {
                Ok(base) => base,
                Err(e) => return MemberOutcome::Answer(Err(e)),
            },
            _ => None,
        };
        let config = &self.shared.config;
        let limits = BuildLimits {
            max_documents: config.max_documents,
        };
        let versions = pending
            .request
            .precondition
            .as_ref()
            .map(|_| self.pending_versions());
        let working = &mut batch.working;
        let built = build::build(
            working,
            mutation,
            pending.id,
            self.shared.clock.now(),
            limits,
            &mut pending.blind_seen,
            base.as_ref(),
        );
        let mut change = match built {
            Err(e) => return MemberOutcome::Answer(Err(e)),
            Ok(Built::Unchanged(doc)) => {
                return MemberOutcome::Answer(Ok(Outcome {
                    doc,
                    changed: false,
                    sequence: None,
                    prune: None,
                }));
            }
            Ok(Built::Change(change)) => change,
        };
        if let (Some(precondition), Some(versions)) = (&pending.request.precondition, &versions)
            && let Err(e) = precondition
                .check(working, &change.prepared, versions)
                .await
        {
            return MemberOutcome::Answer(Err(e));
        }
        if let (Some(write), Some(bytes)) = (change.entry.write.as_mut(), &change.version_bytes)
            && bytes.len() <= config.inline_limit
            && batch.inline_used + bytes.len() <= config.slot_inline_budget
        {
            batch.inline_used += bytes.len();
            write.inline = Some(bytes.clone());
        }
        if let Err(why) = working.apply_built(&change.entry, Some(change.provisional_record())) {
            return MemberOutcome::Answer(Err(Error::integrity(
                mutation.op(),
                mutation.raw_path(),
                format!("a built write does not apply: {why}"),
            )));
        }
        let summary = working
            .doc(&change.entry.path)
            .map(|d| d.summary())
            .expect("a document just written exists");
        MemberOutcome::Write { change, summary }
    }

    /// What a precondition may read before the bucket holds it: the versions built in the
    /// pipeline, then the version cache.
    fn pending_versions(&self) -> PendingVersions {
        PendingVersions {
            pipeline: self.built.clone(),
            cache: Some(self.cache.clone()),
        }
    }

    /// The current version of an append's document: built in the pipeline, cached, being
    /// read ahead, or read now.
    async fn append_base(
        &mut self,
        batch: &Batch,
        mutation: &Mutation,
    ) -> Result<Option<StoredVersion>> {
        let Ok(path) = mutation.path() else {
            return Ok(None);
        };
        let Some(doc) = batch.working.doc(&path) else {
            return Ok(None);
        };
        let record = doc.head.clone();
        let built = |b: &Batch| {
            b.members.iter().find_map(|m| match &m.result {
                MemberOutcome::Write { change, .. } => change
                    .entry
                    .write
                    .as_ref()
                    .filter(|w| w.hash == record.hash)
                    .and(change.version_bytes.clone()),
                MemberOutcome::Answer(_) => None,
            })
        };
        let mut cached = built(batch)
            .or_else(|| self.batches.iter().find_map(built))
            .or_else(|| {
                self.cache
                    .lock()
                    .expect("cache lock poisoned")
                    .get(&record.hash)
            });
        if cached.is_none() {
            let warming = self
                .warming
                .lock()
                .expect("warming lock poisoned")
                .get(&record.hash)
                .cloned();
            if let Some(read) = warming {
                cached = read.await;
            }
        }
        let bytes = match cached {
            Some(bytes) => bytes,
            None => {
                let bytes = read_version(
                    self.shared.store.as_ref(),
                    &self.shared.config.prefix,
                    &record,
                )
                .await
                .map_err(|e| Error::new(mutation.op(), path.as_str(), e.kind(), e.to_string()))?;
                self.cache_insert(record.hash, bytes.clone());
                bytes
            }
        };
        StoredVersion::decode(&bytes)
            .map(Some)
            .map_err(|why| Error::integrity(Op::Read, path.as_str(), why))
    }

    /// Encodes the front batch's slot on the tail and computes its result.
    ///
    /// A batch built on the tail itself is settled: its working state becomes the result,
    /// with the slot's versions located (tests check it against applying the slot to the
    /// tail). One built on a batch that has since committed holds that batch's provisional
    /// locations too, so its slot is applied to the tail instead.
    pub(super) fn seal(&self, batch: &mut Batch) -> Result<Sealed> {
        let entries: Vec<_> = batch
            .members
            .iter()
            .filter_map(|m| match &m.result {
                MemberOutcome::Write { change, .. } => Some(change.entry.clone()),
                MemberOutcome::Answer(_) => None,
            })
            .collect();
        if entries.is_empty() {
            return Ok(Sealed {
                slot: None,
                result: self.tail.clone(),
            });
        }
        let first = self.tail.sequence() + 1;
        let slot = Slot {
            world: self.tail.world(),
            first,
            store: self.shared.config.store,
            prev: self.tail.tip(),
            entries,
        };
        let key = keys::slot_key(&self.shared.config.prefix, first);
        let encoded = EncodedSlot::encode(slot, &key)?;
        let on_tail = batch.working.sequence() == self.tail.sequence()
            && batch.working.tip() == self.tail.tip();
        let result = if on_tail {
            let mut settled = std::mem::replace(&mut batch.working, self.tail.clone());
            settled.settle(&encoded)?;
            // Tests run every sealed batch both ways; a difference fails its writers.
            #[cfg(debug_assertions)]
            if self.tail.apply(&encoded).as_ref() != Ok(&settled) {
                return Err(Error::integrity(
                    Op::Apply,
                    key,
                    "a settled batch differs from its slot applied to the tail",
                ));
            }
            batch.working = settled.clone();
            settled
        } else {
            self.tail.apply(&encoded)?
        };
        Ok(Sealed {
            slot: Some(encoded),
            result,
        })
    }

    /// Starts creating a blob unless it is created or being created.
    fn stage_blob(&mut self, (hash, bytes): &(Hash, Bytes)) {
        if self.staged.contains(hash) || self.staging_now.contains(hash) {
            return;
        }
        self.stage_failed.remove(hash);
        self.staging_now.insert(*hash);
        let store = self.shared.store.clone();
        let key = keys::blob_key(&self.shared.config.prefix, hash);
        let bytes = bytes.clone();
        let hash = *hash;
        let retry = self.retry_policy();
        let task = self
            .staging
            .spawn(async move { (hash, create_blob(store, key, bytes, retry).await) });
        self.staging_ids.insert(task.id(), hash);
    }

    /// Moves the batches behind the front, about to be sealed, into it while the slot has
    /// room for them: each was built on the one before it, so the members stay in order on
    /// the same states. Writes that overflowed the front while it waited (on a create, or on
    /// a peer's turn) ride this slot instead of waiting for the next. Having to absorb means
    /// the limit is short of what arrives per slot: it doubles.
    pub(super) fn absorb_behind(&mut self) {
        let ceiling = self.batch_ceiling();
        let budget = self.shared.config.slot_inline_budget;
        let mut absorbed = false;
        while let [front, next, ..] = &self.batches.make_contiguous()[..] {
            let fits = front.members.len() + next.members.len() <= ceiling
                && front.inline_used + next.inline_used <= budget
                && next.blobs.iter().all(|(h, _)| self.staged.contains(h));
            if !fits {
                break;
            }
            let next = self.batches.remove(1).expect("a batch behind the front");
            let front = self.batches.front_mut().expect("front exists");
            front.members.extend(next.members);
            front.blobs.extend(next.blobs);
            front.inline_used += next.inline_used;
            front.working = next.working;
            front.cap = front.cap.max(next.cap);
            absorbed = true;
        }
        if absorbed {
            self.limit = (self.limit * 2).min(ceiling);
            self.shared.stats().batches_absorbed += 1;
        }
    }
}
