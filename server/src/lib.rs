//! `quire-server`: the knowledge server (handlers, the Mark protocol over QUIC, the HTTP
//! gateway, auth, limits, config, the world manager) and the `quire` CLI.
//!
//! Not built yet: this crate holds only its charter until the server work lands.
