//! Peer hints: replicas serving one world tell each other how far its log reached, so a
//! follower reads ahead (and a catalog read sees a peer's write) without waiting for its own
//! refresh, and contending committers take turns (`quire_log::commit`). Correctness never
//! depends on a hint: a lost one costs only freshness.
//!
//! - **Wire.** A QUIC listener of its own (`[peers] listen`), ALPN `mark-peer`, TLS 1.3 with
//!   a client certificate required. One unidirectional stream per hint carrying one line,
//!   `v1 commit <world id> <sequence>\n` (at most [`MAX_HINT_BYTES`]), and nothing else.
//!   The line opens with the format's version ([`HINT_VERSION`]); a hint of another version
//!   is dropped and counted, so the format can change while replicas of both kinds run.
//! - **Identity** ([`identity`]): every replica presents the one replica certificate and
//!   accepts only it, on both ends.
//! - **Sending** ([`sender`]): after each commit its store reports ([`Peers::committed`]), the
//!   newest sequence per world waits in an outbox; one task per peer sends each world's
//!   newest sequence, read when its stream opens, so hints reported while a send is in flight
//!   coalesce into one. A peer that cannot be reached costs a failed send and a backoff.
//!   The peer set is the static addresses plus a DNS name re-resolved periodically, minus
//!   this replica's own listener.
//! - **Receiving** ([`listener`]): a hint goes to its world's follower
//!   ([`quire_backend::Follower::follow`]) and nothing else; an unknown world, a malformed
//!   hint, a hint of an unknown version or a foreign certificate is dropped and counted (`quire_peer_hints_total` in
//!   /metrics).

pub mod identity;
pub mod listener;
pub mod sender;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::watch;

pub use identity::ReplicaIdentity;

/// The ALPN protocol id of peer hints.
pub const ALPN_PEER: &[u8] = b"mark-peer";
/// The longest hint line, newline included.
pub const MAX_HINT_BYTES: usize = 256;
/// The longest world id a hint may carry.
pub const MAX_WORLD_ID: usize = 64;

/// The hint format this replica writes and reads. A hint opens with its version (`v1`), so
/// the format can grow: a replica drops (and counts) a hint of a version it does not know,
/// and a newer replica keeps sending versions its older peers read while they remain.
pub const HINT_VERSION: u32 = 1;

/// Encodes a hint line.
pub fn encode_hint(world: &str, sequence: u64) -> String {
    format!("v{HINT_VERSION} commit {world} {sequence}\n")
}

/// Why a received hint was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintError {
    /// Not a hint of any version.
    Malformed,
    /// A well-formed version this replica does not read.
    UnknownVersion,
}

/// A decimal number ≥ 1 of at most `max_digits` digits without leading zeros.
fn positive_decimal(text: &str, max_digits: usize) -> Option<u64> {
    let ok = !text.is_empty()
        && text.len() <= max_digits
        && text.bytes().all(|b| b.is_ascii_digit())
        && !text.starts_with('0');
    if ok { text.parse().ok() } else { None }
}

/// Parses a hint: `v<version> ` then, for version 1, `commit <world id> <sequence>\n`, the
/// world id 1..=64 characters of `[0-9a-z-]`, the sequence a decimal number ≥ 1 without
/// leading zeros; at most [`MAX_HINT_BYTES`] bytes. The version is a decimal number ≥ 1
/// without leading zeros; any other version is [`HintError::UnknownVersion`], whatever
/// follows it.
pub fn parse_hint(bytes: &[u8]) -> Result<(&str, u64), HintError> {
    if bytes.len() > MAX_HINT_BYTES {
        return Err(HintError::Malformed);
    }
    let version = bytes
        .strip_prefix(b"v")
        .and_then(|rest| rest.split(|b| *b == b' ').next())
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| positive_decimal(digits, 9))
        .ok_or(HintError::Malformed)?;
    if version != u64::from(HINT_VERSION) {
        return Err(HintError::UnknownVersion);
    }
    let line = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.strip_suffix('\n'))
        .ok_or(HintError::Malformed)?;
    let rest = line
        .strip_prefix(&format!("v{HINT_VERSION} commit "))
        .ok_or(HintError::Malformed)?;
    let (world, sequence) = rest.split_once(' ').ok_or(HintError::Malformed)?;
    let world_ok = !world.is_empty()
        && world.len() <= MAX_WORLD_ID
        && world
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-');
    if !world_ok {
        return Err(HintError::Malformed);
    }
    let sequence = positive_decimal(sequence, 20).ok_or(HintError::Malformed)?;
    Ok((world, sequence))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HintLabels {
    direction: &'static str,
    outcome: &'static str,
}

/// What happened to hints, by direction and outcome (`quire_peer_hints_total`).
#[derive(Clone, Debug, Default)]
pub struct PeerCounters {
    family: Family<HintLabels, Counter>,
}

/// Outcomes of a received hint.
pub const RECEIVED_FOLLOWED: &str = "followed";
pub const RECEIVED_UNKNOWN_WORLD: &str = "unknown_world";
pub const RECEIVED_MALFORMED: &str = "malformed";
pub const RECEIVED_UNKNOWN_VERSION: &str = "unknown_version";
pub const RECEIVED_FOREIGN_CERTIFICATE: &str = "foreign_certificate";
/// Outcomes of a sent hint.
pub const SENT_DELIVERED: &str = "delivered";
pub const SENT_FAILED: &str = "failed";

impl PeerCounters {
    fn add(&self, direction: &'static str, outcome: &'static str) {
        self.family
            .get_or_create(&HintLabels { direction, outcome })
            .inc();
    }

    pub fn received(&self, outcome: &'static str) {
        self.add("received", outcome);
    }

    pub fn sent(&self, outcome: &'static str) {
        self.add("sent", outcome);
    }

    pub(crate) fn refused_certificate(&self) {
        self.received(RECEIVED_FOREIGN_CERTIFICATE);
    }

    /// The count of one direction (`"received"` or `"sent"`) and outcome.
    pub fn count(&self, direction: &'static str, outcome: &'static str) -> u64 {
        self.family
            .get_or_create(&HintLabels { direction, outcome })
            .get()
    }

    /// Registers the counters in a Prometheus registry.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "quire_peer_hints",
            "Peer hints, by direction (sent, received) and outcome",
            self.family.clone(),
        );
    }
}

/// A world's follower, as the receiving side sees it.
pub type FollowFn = Arc<dyn Fn(u64) + Send + Sync>;

/// The hint hub of one server: the worlds that take hints (by world id), the outbox the
/// senders drain, and the counters.
pub struct Peers {
    followers: RwLock<HashMap<String, FollowFn>>,
    outbox: Mutex<BTreeMap<String, u64>>,
    /// Bumped whenever the outbox changes, so senders wake.
    changed: watch::Sender<u64>,
    counters: PeerCounters,
}

impl fmt::Debug for Peers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peers").finish_non_exhaustive()
    }
}

impl Default for Peers {
    fn default() -> Self {
        Peers {
            followers: RwLock::default(),
            outbox: Mutex::default(),
            changed: watch::channel(0).0,
            counters: PeerCounters::default(),
        }
    }
}

/// What a received hint came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    Followed,
    UnknownWorld,
    Malformed,
    UnknownVersion,
}

impl Peers {
    pub fn new() -> Arc<Peers> {
        Arc::new(Peers::default())
    }

    pub fn counters(&self) -> &PeerCounters {
        &self.counters
    }

    /// Hints for `world` go to `follow` from now on.
    pub fn register(&self, world: String, follow: FollowFn) {
        self.followers
            .write()
            .expect("followers lock poisoned")
            .insert(world, follow);
    }

    /// This replica's store learned `world`'s log reached `sequence`: tell every peer
    /// (only the newest sequence per world waits).
    pub fn committed(&self, world: &str, sequence: u64) {
        let newer = {
            let mut outbox = self.outbox.lock().expect("outbox lock poisoned");
            match outbox.get_mut(world) {
                Some(current) if *current >= sequence => false,
                Some(current) => {
                    *current = sequence;
                    true
                }
                None => {
                    outbox.insert(world.to_owned(), sequence);
                    true
                }
            }
        };
        if newer {
            self.changed.send_modify(|generation| *generation += 1);
        }
    }

    /// The newest sequence waiting for `world`.
    fn newest(&self, world: &str) -> Option<u64> {
        self.outbox
            .lock()
            .expect("outbox lock poisoned")
            .get(world)
            .copied()
    }

    /// Every world with a sequence newer than `sent` holds.
    fn due(&self, sent: &HashMap<String, u64>) -> Vec<String> {
        self.outbox
            .lock()
            .expect("outbox lock poisoned")
            .iter()
            .filter(|(world, sequence)| sent.get(*world).is_none_or(|s| s < *sequence))
            .map(|(world, _)| world.clone())
            .collect()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Hands one received hint to its world's follower, counting the outcome.
    pub fn deliver(&self, bytes: &[u8]) -> Received {
        let received = match parse_hint(bytes) {
            Err(HintError::Malformed) => Received::Malformed,
            Err(HintError::UnknownVersion) => Received::UnknownVersion,
            Ok((world, sequence)) => {
                let follow = self
                    .followers
                    .read()
                    .expect("followers lock poisoned")
                    .get(world)
                    .cloned();
                match follow {
                    Some(follow) => {
                        follow(sequence);
                        Received::Followed
                    }
                    None => Received::UnknownWorld,
                }
            }
        };
        self.counters.received(match received {
            Received::Followed => RECEIVED_FOLLOWED,
            Received::UnknownWorld => RECEIVED_UNKNOWN_WORLD,
            Received::Malformed => RECEIVED_MALFORMED,
            Received::UnknownVersion => RECEIVED_UNKNOWN_VERSION,
        });
        received
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_parse_strictly() {
        let world = "2f0c6a1e-0000-4000-8000-000000000001";
        assert_eq!(encode_hint(world, 42), format!("v1 commit {world} 42\n"));
        assert_eq!(
            parse_hint(encode_hint(world, 42).as_bytes()),
            Ok((world, 42))
        );
        for bad in [
            "v1 commit w 0\n",
            "v1 commit w 01\n",
            "v1 commit w 1",
            "v1 commit  1\n",
            "v1 commit W 1\n",
            "v1 commit w 1 2\n",
            "v1 commit w +1\n",
            "v1 commit w 99999999999999999999\n",
            "v1 hint w 1\n",
            "v1 commit w 1\n\n",
            "v1commit w 1\n",
            "commit w 1\n",
            "v01 commit w 1\n",
            "v0 commit w 1\n",
            "v commit w 1\n",
            "v1x commit w 1\n",
            "V1 commit w 1\n",
            "",
        ] {
            assert_eq!(
                parse_hint(bad.as_bytes()),
                Err(HintError::Malformed),
                "{bad:?}"
            );
        }
        let long = format!("v1 commit {} 1\n", "a".repeat(65));
        assert_eq!(parse_hint(long.as_bytes()), Err(HintError::Malformed));
        assert_eq!(
            parse_hint(&[b'v', b'1', b' ', 0xff, b'\n']),
            Err(HintError::Malformed)
        );
        // A later format: its version is read, whatever follows.
        for newer in [
            "v2 commit w 1\n".as_bytes(),
            b"v2 something else entirely",
            b"v999999999 \xff",
        ] {
            assert_eq!(
                parse_hint(newer),
                Err(HintError::UnknownVersion),
                "{newer:?}"
            );
        }
        let too_long = format!("v2 {}", "x".repeat(MAX_HINT_BYTES));
        assert_eq!(parse_hint(too_long.as_bytes()), Err(HintError::Malformed));
    }

    #[test]
    fn the_outbox_keeps_the_newest_sequence_per_world() {
        let peers = Peers::default();
        let mut wake = peers.subscribe();
        peers.committed("a", 3);
        peers.committed("a", 2);
        peers.committed("b", 1);
        assert!(wake.has_changed().unwrap());
        assert_eq!(peers.newest("a"), Some(3));
        let mut sent = HashMap::new();
        assert_eq!(peers.due(&sent), vec!["a".to_owned(), "b".to_owned()]);
        sent.insert("a".to_owned(), 3);
        assert_eq!(peers.due(&sent), vec!["b".to_owned()]);
        wake.borrow_and_update();
        peers.committed("a", 3);
        assert!(
            !wake.has_changed().unwrap(),
            "nothing newer wakes no sender"
        );
    }

    #[test]
    fn delivery_counts_unknown_and_malformed_hints() {
        let peers = Peers::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        peers.register(
            "w".into(),
            Arc::new(move |s| record.lock().unwrap().push(s)),
        );
        assert_eq!(peers.deliver(b"v1 commit w 7\n"), Received::Followed);
        assert_eq!(peers.deliver(b"v1 commit x 7\n"), Received::UnknownWorld);
        assert_eq!(peers.deliver(b"v1 commit w x\n"), Received::Malformed);
        assert_eq!(peers.deliver(b"v2 commit w 8\n"), Received::UnknownVersion);
        assert_eq!(*seen.lock().unwrap(), vec![7]);
        let counters = peers.counters();
        assert_eq!(counters.count("received", RECEIVED_FOLLOWED), 1);
        assert_eq!(counters.count("received", RECEIVED_UNKNOWN_WORLD), 1);
        assert_eq!(counters.count("received", RECEIVED_MALFORMED), 1);
        assert_eq!(counters.count("received", RECEIVED_UNKNOWN_VERSION), 1);
    }
}
