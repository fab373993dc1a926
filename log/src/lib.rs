//! `quire-log`: the world model, the world marker, the slot format and hash chain, applying a
//! slot to a world state, tip probing, replay and the group committer.
//!
//! Not built yet: this crate holds only its charter until the slot-log work lands.
