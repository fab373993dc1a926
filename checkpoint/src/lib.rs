//! `quire-checkpoint`: deterministic checkpoints (root, tiered shards, history blocks and the
//! packs of ended history epochs), cold start, the compactor, adoption of peers' checkpoints
//! and dropping old checkpoints.
//!
//! # What this crate owns
//!
//! A checkpoint at sequence `S` is a deterministic function of the log through `S`: any store
//! may write one, racing writers produce byte-identical objects through create-if-absent,
//! and a checkpoint that was never finished costs only replay. Nothing on the commit path
//! waits for one. What one write costs a checkpoint follows the runs: its document's entry is
//! uploaded in one run (and the top tier while its run is open), not once per rebuild.
//!
//! | module | owns |
//! | --- | --- |
//! | [`format`](mod@format) | the objects, their canonical CBOR and the checks on each one |
//! | [`keys`] | object keys under the world prefix |
//! | [`history`] | folding versions into absolute 256-version blocks, reading ahead what the next checkpoint folds, reading versions (blocks stored alone or by range from a pack) |
//! | [`replica`] | cold start, applying slots, adopting a peer's checkpoint, keeping each ended history epoch's and run's documents (and reading blocks ahead once it writes checkpoints) |
//! | [`write`](mod@write) | writing a checkpoint from a prepared state: the tiers (a run written once, named unchanged after), packing ended epochs, placing every block |
//! | [`pace`] | how many of a checkpoint's uploads run at once, as the store's commits allow |
//! | [`compactor`] | when to write, deferring to a peer, adopting first |
//! | [`drop`](mod@drop) | dropping old checkpoints under the generation fence |
//! | [`export`] | every document and version of a world |
//! | [`genesis`] | a new world's checkpoint zero and marker |
//!
//! The byte layout, and why shards come in tiers, is in `docs/FORMAT.md`.

pub mod compactor;
pub mod digest;
pub mod drop;
mod error;
pub mod export;
pub mod format;
pub mod genesis;
pub mod history;
pub mod keys;
pub mod objects;
pub mod pace;
pub mod replica;
mod strict;
pub mod write;

pub use compactor::{CompactionPolicy, Compactor, Step};
pub use digest::state_digest;
pub use error::{Error, ErrorKind, Op, Result};
pub use objects::{Fence, Put};
pub use pace::UploadPace;
pub use replica::{Base, OpenOptions, Replica};
pub use write::{CheckpointJob, WriteStats, Written};
