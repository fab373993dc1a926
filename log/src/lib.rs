//! `quire-log`: the world model, the slot log and its hash chain, applying slots to a world
//! state, tip probing and replay, and the group committer.
//!
//! # What this crate owns
//!
//! A *world* is a tree of versioned markdown documents whose only durable state is objects
//! under one key prefix of a [`BlobStore`](quire_blob::BlobStore). Its history is a log of
//! *slots* at `log/<first sequence as 16 lowercase hex digits>`; each slot holds one batch of
//! changes, is created with create-if-absent and is never rewritten. **The successful create
//! of a slot is the commit.**
//!
//! | module | owns |
//! | --- | --- |
//! | [`path`] | canonical document paths, ancestors, hidden names |
//! | [`metadata`] | publisher metadata rules, normal form, the catalog record |
//! | [`version`] | the stored version bytes (store frontmatter + verbatim body) |
//! | [`model`] | document state, version records and where their bytes live |
//! | [`state`] | the persistent world state and [`WorldState::apply`] |
//! | [`build`] | judging one write against a state and building its entry |
//! | [`slot`] | the slot object: canonical CBOR, strict decoding |
//! | [`marker`] | the world marker and the genesis tip |
//! | [`tip`] | probing the next slot name, listing fallback, replay |
//! | [`commit`] | the group committer |
//! | [`recent`] | the ring of slots a store created or read, which its other readers take first |
//! | `testing` | test support behind the `testing` feature: fixtures and a slot writer |
//!
//! # Formats, and where they differ from the reference implementation
//!
//! - Every log object is canonical CBOR (`ciborium`): fixed field order, shortest integers,
//!   no floats; decoding refuses unknown fields, trailing bytes and any non-canonical spelling
//!   as an integrity error. The reference uses canonical JSON.
//! - Every hash is blake3 (the reference uses SHA-256). A version's **ETag is the blake3 hash
//!   of its stored version bytes** (frontmatter included); its content hash is the blake3 of
//!   the body, shown as `blake3-<hex>`.
//! - Slot keys are `log/<16 hex>` without a `.json` suffix; version blobs are `blobs/<hex>`.
//! - Version bytes up to an inline limit (default 8 KiB) travel inside the slot, so a small
//!   write creates one object; larger ones are content-addressed blobs created first.
//!
//! # Invariants
//!
//! - Slot `first` names are contiguous: slot `n` covers `first..=last` and the next slot is
//!   `last + 1`. Each slot names the blake3 hash of its predecessor's bytes (the
//!   [genesis tip](marker::genesis_tip) for the first), so the log is a verifiable chain.
//! - [`WorldState::apply`] accepts only transitions a correct writer could have committed and
//!   is the single path by which any state advances: commit, refresh and replay alike.
//! - The committer answers a write only after the slot holding it is confirmed; an ambiguous
//!   create is decided by reading the slot back, never guessed.
//! - A slot taken from memory ([`recent::RecentSlots`]) is byte for byte the stored one: a
//!   store publishes only slots whose create it confirmed and slots it read.
//! - Time and randomness come from injected sources ([`Clock`], a seed), so tests are
//!   deterministic; [`SystemClock`] and [`clock::seed`] are the only reads of the real ones
//!   (the workspace `clippy.toml` enforces it).

pub mod build;
pub mod cbor;
pub mod clock;
pub mod commit;
mod error;
pub mod ids;
pub mod keys;
pub mod marker;
pub mod metadata;
pub mod model;
pub mod path;
pub mod recent;
pub mod slot;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tip;
pub mod version;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Carried, Error, ErrorKind, Op, Result};
pub use ids::{Hash, OperationId, StoreId, Timestamp, WorldId};
pub use model::{DocState, DocSummary, Location, RecentVersions, VersionRecord};
pub use path::DocPath;
pub use slot::{EncodedSlot, Entry, EntryOp, EntryWrite, Slot};
pub use state::WorldState;
