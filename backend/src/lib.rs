//! `quire-backend`: the backend contract (`Store`, `ReadView`, `ChangeSource`, `Follower`) and
//! its implementations, the bucket store and the file store.
//!
//! Not built yet: this crate holds only its charter until the backend work lands.
