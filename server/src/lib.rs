//! `quire-server`: the knowledge server (handlers, the Mark protocol over QUIC, the HTTP
//! gateway, auth, limits, config, the world manager) and the `quire` CLI.
//!
//! What the crate owns so far, each independent of how worlds are stored:
//! - [`mark`]: the Mark protocol wire codec (requests, responses, metadata blocks, limits).

pub mod mark;
