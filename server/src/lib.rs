//! `quire-server`: the knowledge server and the `quire` CLI. It sees worlds only through the
//! backend contract (`quire_backend::Store`); [`wiring`] is the one module that names a
//! concrete backend or blob driver.
//!
//! - [`mark`]: the Mark protocol: the `quire-mark` wire codec (requests, responses, metadata
//!   blocks, WATCH block streams, limits) re-exported, and [`mark::client`], the QUIC client
//!   the CLI and tests use (`mark://` URLs, trust choices).
//! - [`handlers`]: transport-neutral handlers for every verb, one read view per request;
//!   WATCH answers a stream of encoded blocks (`handlers::watch`) any transport forwards.
//! - [`quic`]: the Mark protocol over QUIC (one request per stream, SNI chooses the world).
//! - [`http`]: the HTTP gateway over those handlers (WATCH as a streamed `GET ?watch`), with
//!   `/livez`, `/readyz`, `/metrics`.
//! - [`tls`]: the server certificate (configured or a generated development one), reloadable,
//!   and the TLS 1.3 / ALPN `mark` / SNI rules of the QUIC listener.
//! - [`peers`]: peer hints between replicas (QUIC `mark-peer`, the shared replica
//!   certificate, per-peer senders that coalesce per world, the listener that hands a hint
//!   to its world's follower).
//! - [`run`]: one server process assembled from its configuration (worlds, metrics,
//!   certificates, listeners, SIGHUP reload, drain), handed back as a [`Running`] server;
//!   `quire serve` is argument parsing plus this.
//! - [`reload`]: what SIGHUP reloads (certificates and tokens files).
//! - [`auth`]: capability tokens (generation, hashed storage, path patterns, the write and
//!   read rules) and the reloadable per-world token set.
//! - [`limits`]: per-world admission, per client (token label, else peer address) with the
//!   world's caps as a backstop (concurrent requests in a short queue, requests per second
//!   with burst, open watches) and per-connection watch slots, with retry hints.
//! - [`config`]: the strict TOML configuration (listeners, TLS, peers, worlds with their backend,
//!   authorities, tokens, limits and publish policy) and the embedded default.
//! - `policy`: the publish policy document and the store decorator that enforces it.
//! - [`metrics`]: the Prometheus metrics every transport records (requests, latency) and
//!   per-world store metrics (commit batches, slot races, blob traffic).
//! - the one error shape (op, key, kind, detail) of the modules above is `quire_failure`'s.
//! - [`worlds`]: the world manager, which opens every world through one store factory.
//! - `web`: the pages the HTTP gateway shows a browser (documents, listings, history and
//!   diffs, search, the change feed as Server-Sent Events, writes with a tab-kept token).
//! - [`mcp`]: `quire mcp`, a Model Context Protocol server for LLM agents over a
//!   `remote` server (one Mark request over `mark://` or `http://`).
//! - `outline` and `links`: a markdown document's headings with their `#anchor`s, and
//!   where its links point as world paths.
//! - [`world_tools`]: `quire world verify | export | import` over one configured world.
//!
//! Both transports serve every verb, WATCH included.
//!
//! Invariants against hostile input: every verb judges and serves one canonical path, and
//! decides read auth before asking the store whether anything exists there; a document's
//! metadata never fills a protocol key of a response; what a write stores reads back on
//! every transport; every connection and request is bounded in time and memory
//! (docs/SPEC.md, "Limits"), and nothing a client or a document sends panics the server.

pub mod auth;
pub mod config;
pub mod handlers;
pub mod http;
pub mod limits;
pub(crate) mod links;
pub mod mark;
pub mod mcp;
pub mod metrics;
pub(crate) mod outline;
pub mod peers;
pub(crate) mod policy;
mod process;
pub mod quic;
pub mod reload;
pub(crate) mod remote;
pub mod tls;
pub(crate) mod web;
pub mod wiring;
pub mod world_tools;
pub mod worlds;

pub use process::{Running, run};

/// `line N: message` for a TOML error, so every file error names its line.
pub(crate) fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    match error.span() {
        Some(span) => format!("line {}: {}", line_of(text, span.start), error.message()),
        None => error.message().to_owned(),
    }
}

/// The 1-based line holding byte `offset` of `text`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
