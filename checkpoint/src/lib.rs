//! `quire-checkpoint`: deterministic checkpoints (root, shards, history blocks), cold start,
//! the compactor, adoption of peers' checkpoints and dropping old checkpoints.
//!
//! Not built yet: this crate holds only its charter until the checkpoint work lands.
