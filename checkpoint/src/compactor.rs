//! The compactor: when a store writes a checkpoint, and what it does instead.
//!
//! Any store may write a checkpoint once the newest lags its state by [`CompactionPolicy::slots`]
//! slots or the first slot after it is [`CompactionPolicy::age`] old, after a random delay (so peers
//! rarely race; when they do, they write identical bytes). Each step first lists the
//! checkpoints: a newer one written by a peer is adopted (reading only the shards whose
//! references changed) and nothing is written; a newest checkpoint written by a peer less
//! than [`CompactionPolicy::defer`] ago means that peer is compacting, so this store defers. Its age is
//! the longer of what the bucket's `modified` time says and how long ago this compactor
//! first listed it, so a bucket clock ahead of the local one (a checkpoint stamped in the
//! future) defers a store for at most [`CompactionPolicy::defer`] after it sees that checkpoint. After
//! a checkpoint is written, old ones are dropped.
//!
//! A checkpoint that fails verification or is incomplete costs only replay: the compactor
//! remembers it as unadoptable, adopts the next older one if that is newer than its base,
//! neither defers to it nor names its sequence again, and writes a checkpoint past it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quire_log::Clock;
use rand::{Rng, SeedableRng};

use crate::drop::{DropReport, drop_old};
use crate::error::{Op, Result};
use crate::replica::{Replica, list_checkpoints};
use crate::write::WriteStats;

/// When and how the compactor runs.
#[derive(Clone, Debug)]
pub struct CompactionPolicy {
    /// Write once this many slots were applied since the newest checkpoint.
    pub slots: u64,
    /// Or once the first of them is this old.
    pub age: Duration,
    /// The longest random delay before a step.
    pub max_delay: Duration,
    /// Defer to a peer whose checkpoint is younger than this.
    pub defer: Duration,
    /// Checkpoints always kept.
    pub keep: usize,
    /// How long a superseded checkpoint is kept; the generation fence rewrites reused
    /// objects older than half of it.
    pub grace: Duration,
    /// The longest a checkpoint run may take; the fence's margin (half the grace) must
    /// cover it and the clocks' skew.
    pub run_cap: Duration,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            slots: 1024,
            age: Duration::from_secs(60),
            max_delay: Duration::from_secs(10),
            defer: Duration::from_secs(300),
            keep: 3,
            grace: Duration::from_secs(3600),
            run_cap: crate::write::RUN_CAP,
        }
    }
}

/// What one step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing was due.
    Idle,
    /// A peer's newer checkpoint was adopted.
    Adopted(u64),
    /// A peer wrote the newest checkpoint recently; it is left to compact.
    Deferred(u64),
    /// This store wrote a checkpoint at the sequence, then dropped old ones.
    Written {
        sequence: u64,
        stats: WriteStats,
        dropped: DropReport,
    },
}

/// A store's compactor.
#[derive(Debug)]
pub struct Compactor {
    policy: CompactionPolicy,
    clock: Arc<dyn Clock>,
    own: HashSet<u64>,
    unadoptable: BTreeSet<u64>,
    /// When (on the local clock) the newest checkpoint was first listed, by sequence.
    first_seen: BTreeMap<u64, SystemTime>,
    rng: rand::rngs::StdRng,
}

impl Compactor {
    pub fn new(policy: CompactionPolicy, clock: Arc<dyn Clock>, seed: u64) -> Self {
        Compactor {
            policy,
            clock,
            own: HashSet::new(),
            unadoptable: BTreeSet::new(),
            first_seen: BTreeMap::new(),
            rng: rand::rngs::StdRng::seed_from_u64(seed),
        }
    }

    pub fn policy(&self) -> &CompactionPolicy {
        &self.policy
    }

    fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.clock.now().0)
    }

    /// Whether the replica's newest checkpoint lags enough to write one.
    pub fn due(&self, replica: &Replica) -> bool {
        replica.slots_since_base() >= self.policy.slots
            || replica
                .pending_for()
                .is_some_and(|age| age >= self.policy.age)
    }

    /// The random delay to wait before the next step.
    pub fn delay(&mut self) -> Duration {
        let max = self.policy.max_delay.as_millis() as u64;
        Duration::from_millis(if max == 0 {
            0
        } else {
            self.rng.random_range(0..=max)
        })
    }

    /// How old the newest checkpoint `sequence` (stored at `modified` by the bucket's clock)
    /// is: the longer of its stored age and the time since this compactor first listed it.
    fn age(&self, sequence: u64, modified: SystemTime) -> Duration {
        let now = self.now();
        let seen = self.first_seen.get(&sequence).copied().unwrap_or(now);
        let stored = now.duration_since(modified).unwrap_or_default();
        stored.max(now.duration_since(seen).unwrap_or_default())
    }

    /// Notes when the newest checkpoint was first listed; older sightings are dropped.
    fn sighted(&mut self, sequence: u64) {
        let now = self.now();
        self.first_seen.entry(sequence).or_insert(now);
        self.first_seen.retain(|s, _| *s >= sequence);
    }

    /// Checkpoints this compactor found it cannot adopt (they failed verification or were
    /// incomplete); it writes past them.
    pub fn unadoptable(&self) -> &BTreeSet<u64> {
        &self.unadoptable
    }

    /// One step: adopt a newer checkpoint, or defer to a peer, or write one if due. A newer
    /// checkpoint that cannot be adopted (an integrity error) is remembered and passed over:
    /// the next older one is tried, and once due this store writes a checkpoint at a later
    /// sequence than any it passed over.
    pub async fn step(&mut self, replica: &mut Replica) -> Result<Step> {
        self.unadoptable.extend(replica.skipped().iter().copied());
        let listed = list_checkpoints(&**replica.store(), replica.prefix(), Op::Adopt).await?;
        let mut newest = None;
        for (sequence, attrs) in listed.into_iter().rev() {
            if self.unadoptable.contains(&sequence) {
                continue;
            }
            if sequence <= replica.base().sequence() {
                self.sighted(sequence);
                newest = Some((sequence, attrs));
                break;
            }
            match replica.adopt(sequence).await {
                Ok(_) => {
                    self.sighted(sequence);
                    return Ok(Step::Adopted(sequence));
                }
                Err(e) if e.is_integrity() => {
                    tracing::warn!(sequence, error = %e, "checkpoint cannot be adopted; passing over it");
                    self.unadoptable.insert(sequence);
                }
                Err(e) => return Err(e),
            }
        }
        if !self.due(replica) {
            return Ok(Step::Idle);
        }
        if self
            .unadoptable
            .last()
            .is_some_and(|bad| *bad >= replica.state().sequence())
        {
            // Only a sequence past every unadoptable checkpoint gets a name of its own.
            return Ok(Step::Idle);
        }
        if let Some((sequence, attrs)) = &newest
            && !self.own.contains(sequence)
            && *sequence > quire_log::marker::GENESIS_SEQUENCE
            && self.age(*sequence, attrs.modified) < self.policy.defer
        {
            return Ok(Step::Deferred(*sequence));
        }
        let past = self.unadoptable.last().copied().unwrap_or(0);
        let job = replica
            .prepare_sealed(self.policy.grace / 2, past)
            .with_cap(self.policy.run_cap);
        let Some(written) = job.run().await? else {
            return Ok(Step::Idle);
        };
        let stats = written.stats;
        replica.install(written)?;
        let sequence = replica.base().sequence();
        if stats.own {
            self.own.insert(sequence);
        }
        // Ages are judged by the bucket's clock where the run saw it: a local clock ahead of
        // the bucket's must not make young objects look old.
        let now = match stats.bucket_time {
            Some(bucket) => self.now().min(bucket),
            None => self.now(),
        };
        let dropped = match drop_old(
            &**replica.store(),
            replica.prefix(),
            replica.state().world(),
            self.policy.keep,
            self.policy.grace,
            now,
        )
        .await
        {
            Ok(report) => report,
            Err(e) => {
                tracing::warn!(error = %e, "dropping old checkpoints failed");
                DropReport::default()
            }
        };
        Ok(Step::Written {
            sequence,
            stats,
            dropped,
        })
    }
}
