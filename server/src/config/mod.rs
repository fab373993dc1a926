//! The server's configuration: a strict TOML file, and the default used when there is none.
//!
//! Strict means every unknown key, wrong type, bad value, duplicate or contradiction is
//! refused, and every error names its line. Relative paths in a file are taken relative to
//! the file's directory ([`Config::load`]); in the default, relative to the working
//! directory.
//!
//! ```toml
//! version = 1                          # optional; 1 is the only version
//!
//! [listen]                             # optional, every key defaulted
//! quic = "127.0.0.1:6309"              # Mark protocol over QUIC (UDP)
//! http = "127.0.0.1:6309"              # HTTP gateway (TCP)
//! max_incoming_streams = 128           # concurrent QUIC streams per connection
//! idle_timeout = "30s"                 # QUIC: close a connection this long without traffic
//! shutdown_timeout = "10s"             # how long a shutdown drains requests
//! max_quic_connections = 4096          # QUIC connections open at once
//! max_http_connections = 4096          # HTTP connections open at once
//! http_header_timeout = "10s"          # to send a request's headers; closes idle keep-alives
//! http_body_timeout = "30s"            # to send a request's body once admitted
//! http2 = false                        # also serve cleartext HTTP/2 (prior knowledge)
//!
//! [tls]                                # optional: without it, a self-signed development
//! cert = "cert.pem"                    # certificate is generated at start
//! key = "key.pem"
//!
//! [peers]                             # optional: hint replicas of the same worlds
//! listen = "0.0.0.0:6310"              # the hint listener (UDP, ALPN mark-peer)
//! addresses = ["10.0.0.7:6310"]        # static peers, host:port
//! dns = "quire-peers.internal:6310"    # optional: every address of this name is a peer
//! resolve_every = "30s"                # how often the names are resolved again
//! cert = "replica-cert.pem"            # the one certificate every replica presents and
//! key = "replica-key.pem"              # accepts (PEM)
//!
//! [[worlds]]
//! name = "docs"                        # [a-z0-9][a-z0-9_-]*, at most 63 characters
//! authorities = ["docs.example.com"]   # SNI / Host names routed to this world: lowercase
//!                                      # DNS names, no wildcard, port, trailing dot or IP
//! read_only = false
//! max_documents = 100000               # optional quota on distinct paths
//!
//! [worlds.backend]                     # a bucket store on one of four drivers …
//! kind = "bucket"
//! driver = "s3"                        # memory | file (location) | s3 | gcs (bucket)
//! bucket = "my-bucket"
//! prefix = "worlds/docs"               # optional, file/s3/gcs
//! endpoint = "http://127.0.0.1:9000"   # optional, s3/gcs
//! region = "us-east-1"                 # optional, s3
//! world_id = "2f0c…"                   # optional: checked against the bucket's marker
//! hedge = true                         # s3/gcs (default true): re-send a slow read or create
//! # simulate_latency = "real-gcs"       # benchmarks only: every blob request waits as on GCS
//! # … or a plain directory of markdown files:
//! # kind = "file"
//! # root = "./notes"
//!
//! [worlds.auth]
//! tokens_file = "tokens.toml"          # reloadable; without tokens every write is refused
//! # development_token = true           # instead: print a publish-everywhere token at start
//!
//! [worlds.limits]                      # see `crate::limits::LimitSettings`
//! requests_per_second = 5000           # the world's; client_requests_per_second: each client's
//!
//! [worlds.policy]                      # the world's publish policy document
//! enforce = true                       # judge writes against it when it exists
//! required = false                     # refuse writes while it is missing or invalid
//! seed_file = "policy.md"              # published as its first version when absent
//!
//! [worlds.search]                      # body search (LOOKUP match: body), every key defaulted
//! cache_dir = "search-cache/docs"      # the section index's local files (default: this,
//!                                      # search-cache/<world name> beside the data)
//! evict_after = "30m"                  # drop the index after this long without a body search
//! fold_every = "2s"                    # fold recent writes into the stored index this often
//! fold_documents = 4096                # … or once this many documents changed
//! ```
//!
//! Listeners default to the loopback address on the reference's port 6309 (UDP for QUIC,
//! TCP for HTTP): the configuration-less mode is writable with a development token, so
//! serving beyond this machine must be asked for by naming an address.
//!
//! With several worlds each must list its authorities, and no name may route to two
//! worlds; a single world may list none and then serves whatever name a client uses.
//!
//! This file is long (over 1,500 lines) because every section's schema, defaults and
//! validation live here with their tests; one module per section is the planned split.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use quire_blob::DriverConfig;
pub use quire_log::WorldId;
use serde::Deserialize;
use toml::Spanned;

use crate::limits::{LimitSettings, duration};
use crate::{describe_toml_error, line_of};

/// The reference's port, on loopback.
pub const DEFAULT_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 6309);

/// The configuration `quire serve` uses when given none: one world named `local`, a bucket
/// store on the file driver under `./data`, writable with a development token.
pub const DEFAULT_CONFIG: &str = r#"# The configuration used when none is given.
[[worlds]]
name = "local"

[worlds.backend]
kind = "bucket"
driver = "file"
location = "./data"

[worlds.auth]
development_token = true
"#;

quire_failure::names! {
    /// The operation an [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        Load => "load",
        Parse => "parse",
    }
}

/// What went wrong: the file breaks its rules, or could not be read or written.
pub use quire_failure::FileKind as ErrorKind;

/// A configuration failure: `config <op> "<file>": <kind>: line N: <detail>`.
pub type Error = quire_failure::Failure<Op, ErrorKind>;

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "config";
}

/// A world's name: `[a-z0-9][a-z0-9_-]*`, at most 63 characters.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorldName(String);

impl WorldName {
    pub fn parse(text: &str) -> Result<WorldName, String> {
        let mut chars = text.chars();
        let valid_first = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let valid_rest =
            chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !valid_first || !valid_rest || text.len() > 63 {
            return Err(format!(
                "world name {text:?} must be [a-z0-9][a-z0-9_-]* and at most 63 characters"
            ));
        }
        Ok(WorldName(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A name a client reaches a world by (TLS SNI or HTTP Host): a lowercase ASCII DNS name
/// without wildcard, trailing dot or port, and not an IP address.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Authority(String);

impl Authority {
    pub fn parse(text: &str) -> Result<Authority, String> {
        let refuse = |why: &str| Err(format!("authority {text:?} {why}"));
        if text.is_empty() {
            return refuse("is empty");
        }
        if text.len() > 253 {
            return refuse("is longer than 253 characters");
        }
        if !text.is_ascii() {
            return refuse("is not ASCII: write an internationalised name in its xn-- form");
        }
        if text.parse::<IpAddr>().is_ok() {
            return refuse("is an IP address: authorities are DNS names");
        }
        if text.contains(':') {
            return refuse("holds a `:`: give the name without a port");
        }
        if text.contains('*') {
            return refuse("holds a wildcard: name each host");
        }
        if text.ends_with('.') {
            return refuse("ends with a dot: drop the trailing dot");
        }
        if text.bytes().any(|b| b.is_ascii_uppercase()) {
            return refuse("holds upper-case letters: authorities are lower case");
        }
        for label in text.split('.') {
            if label.is_empty() {
                return refuse("has an empty label");
            }
            if label.len() > 63 {
                return refuse("has a label longer than 63 characters");
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return refuse("may hold only a-z, 0-9, `-` and `.`");
            }
            if label.starts_with('-') || label.ends_with('-') {
                return refuse("has a label starting or ending with `-`");
            }
        }
        let last = text.rsplit('.').next().unwrap_or(text);
        if last.bytes().all(|b| b.is_ascii_digit()) {
            return refuse("ends in an all-numeric label, like an IP address");
        }
        Ok(Authority(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! deserialize_by_parse {
    ($($kind:ty),*) => {$(
        impl<'de> Deserialize<'de> for $kind {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                <$kind>::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

deserialize_by_parse!(WorldName, Authority);

/// The listeners (`[listen]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// The Mark protocol over QUIC (UDP).
    pub quic: SocketAddr,
    /// The HTTP gateway (TCP).
    pub http: SocketAddr,
    /// Concurrent bidirectional streams per QUIC connection.
    pub max_incoming_streams: NonZeroU32,
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// How long a shutdown waits for requests in flight.
    #[serde(deserialize_with = "duration")]
    pub shutdown_timeout: Duration,
    /// QUIC connections open at once.
    pub max_quic_connections: NonZeroU32,
    /// HTTP connections open at once.
    pub max_http_connections: NonZeroU32,
    /// How long an HTTP client may take to send a request's headers (and how long an idle
    /// keep-alive connection stays open).
    #[serde(deserialize_with = "duration")]
    pub http_header_timeout: Duration,
    /// How long an HTTP client may take to send an admitted request's body.
    #[serde(deserialize_with = "duration")]
    pub http_body_timeout: Duration,
    /// Serve HTTP/2 in cleartext (prior knowledge) too, with its own limits.
    pub http2: bool,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            quic: DEFAULT_ADDRESS,
            http: DEFAULT_ADDRESS,
            max_incoming_streams: NonZeroU32::new(128).expect("non-zero"),
            idle_timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(10),
            max_quic_connections: NonZeroU32::new(4096).expect("non-zero"),
            max_http_connections: NonZeroU32::new(4096).expect("non-zero"),
            http_header_timeout: Duration::from_secs(10),
            http_body_timeout: Duration::from_secs(30),
            http2: false,
        }
    }
}

impl ListenConfig {
    /// Checks the durations: none may be zero (`idle_timeout = "0s"` would turn QUIC idle
    /// timeouts off) or beyond [`crate::limits::MAX_WAIT`].
    fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("idle_timeout", self.idle_timeout),
            ("shutdown_timeout", self.shutdown_timeout),
            ("http_header_timeout", self.http_header_timeout),
            ("http_body_timeout", self.http_body_timeout),
        ] {
            if value.is_zero() || value > crate::limits::MAX_WAIT {
                return Err(format!(
                    "[listen] {name} {value:?} must be above zero and at most a day"
                ));
            }
        }
        Ok(())
    }

    /// The listeners that serve beyond this machine (not on a loopback address), by
    /// transport: where a world with a development token must not go unnoticed.
    pub fn beyond_loopback(&self) -> Vec<(&'static str, SocketAddr)> {
        [("HTTP", self.http), ("QUIC", self.quic)]
            .into_iter()
            .filter(|(_, address)| !address.ip().is_loopback())
            .collect()
    }

    /// The HTTP gateway's transport settings.
    pub fn http_settings(&self) -> crate::http::HttpSettings {
        crate::http::HttpSettings {
            header_timeout: self.http_header_timeout,
            body_timeout: self.http_body_timeout,
            max_connections: usize::try_from(self.max_http_connections.get()).unwrap_or(usize::MAX),
            shutdown_timeout: self.shutdown_timeout,
            http2: self.http2,
        }
    }
}

/// A certificate chain and its key, PEM files (`[tls]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Peer hints (`[peers]`): where this replica listens for hints, where its peers are, and
/// the replica certificate all of them share (see `crate::peers`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeersConfig {
    #[serde(default = "default_peer_listen")]
    pub listen: SocketAddr,
    /// Static peers, `host:port`.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// A `name:port` whose every address is a peer, re-resolved every `resolve_every`.
    pub dns: Option<String>,
    #[serde(default = "default_resolve_every", deserialize_with = "duration")]
    pub resolve_every: Duration,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The reference's hint port, on every address.
pub const DEFAULT_PEER_ADDRESS: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 6310);

fn default_peer_listen() -> SocketAddr {
    DEFAULT_PEER_ADDRESS
}

fn default_resolve_every() -> Duration {
    Duration::from_secs(30)
}

impl PeersConfig {
    fn validate(&self) -> Result<(), String> {
        for entry in self.addresses.iter().chain(self.dns.iter()) {
            let port = entry
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            match port {
                Some((host, Ok(port))) if !host.is_empty() && port != 0 => {}
                _ => {
                    return Err(format!(
                        "[peers] {entry:?} is not host:port with a port above zero"
                    ));
                }
            }
        }
        if self.resolve_every.is_zero() || self.resolve_every > crate::limits::MAX_WAIT {
            return Err(format!(
                "[peers] resolve_every {:?} must be above zero and at most a day",
                self.resolve_every
            ));
        }
        Ok(())
    }
}

/// Where a world lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendConfig {
    /// The bucket store over a blob driver.
    Bucket {
        driver: DriverConfig,
        /// When set, opening checks the bucket's marker carries this id.
        world_id: Option<WorldId>,
        /// Send a second attempt for a read or create that runs past its recent p95
        /// (`quire_blob::Hedged`); on by default on the network drivers.
        hedge: bool,
        /// For benchmarks: every blob request waits a delay drawn from this profile first.
        simulate_latency: Option<SimulatedLatency>,
    },
    /// A plain directory of markdown files.
    File { root: PathBuf },
}

/// Latency a bucket world adds in front of its driver (`simulate_latency`), so benchmarks
/// on a local server see a remote bucket's round trips. Never for serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SimulatedLatency {
    /// The real-GCS figures of ADR 0036 (`quire_blob::real_gcs_latency`): creates about
    /// 40 ms, reads about 30 ms, metadata reads 11-14 ms.
    RealGcs,
}

/// A world's tokens (`[worlds.auth]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// A tokens file (reloadable). Without tokens every write is refused.
    pub tokens_file: Option<PathBuf>,
    /// Generate a token at start, print it once, and let it publish everywhere (it grants no
    /// `read`, so reads stay public).
    pub development_token: bool,
}

/// A world's publish policy (`[worlds.policy]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Judge writes against the world's policy document when it exists.
    pub enforce: bool,
    /// Refuse writes while the policy document is missing or invalid.
    pub required: bool,
    /// A local markdown file published as the policy document when the world has none.
    pub seed_file: Option<PathBuf>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            enforce: true,
            required: false,
            seed_file: None,
        }
    }
}

/// One world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldConfig {
    pub name: WorldName,
    pub authorities: Vec<Authority>,
    pub backend: BackendConfig,
    pub auth: AuthConfig,
    pub limits: LimitSettings,
    pub read_only: bool,
    /// A quota on distinct document paths; `None` is unlimited.
    pub max_documents: Option<NonZeroU64>,
    pub policy: PolicyConfig,
    pub search: SearchConfig,
}

/// `[worlds.search]`: how the world's body search keeps its section index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchConfig {
    /// The section index's local files (a fresh directory inside per build).
    pub cache_dir: PathBuf,
    /// Idle time after which the index is dropped.
    pub evict_after: Duration,
    /// Delta age at which recent writes are folded into the stored index.
    pub fold_every: Duration,
    /// Delta size at which recent writes are folded into the stored index.
    pub fold_documents: NonZeroU32,
}

/// Where a world's section index lives when its configuration names no place: beside the
/// data (relative paths resolve against the configuration file's directory).
pub const DEFAULT_SEARCH_CACHE: &str = "search-cache";

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub listen: ListenConfig,
    /// `None`: generate a self-signed development certificate.
    pub tls: Option<TlsConfig>,
    /// `None`: no peer hints.
    pub peers: Option<PeersConfig>,
    pub worlds: Vec<WorldConfig>,
}

impl Config {
    /// The configuration used when none is given ([`DEFAULT_CONFIG`]).
    pub fn embedded_default() -> Config {
        Config::parse(DEFAULT_CONFIG, "<default>").expect("the embedded default is valid")
    }

    /// Parses a configuration; paths stay as written. `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, Error> {
        let invalid = |detail: String| Error::new(Op::Parse, origin, ErrorKind::Invalid, detail);
        let file: ConfigFile =
            toml::from_str(text).map_err(|error| invalid(describe_toml_error(text, &error)))?;
        file.validate(text).map_err(invalid)
    }

    /// Reads and parses a configuration file; relative paths in it are resolved against the
    /// file's directory.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|error| Error::new(Op::Load, &origin, ErrorKind::Io, error.to_string()))?;
        let mut config = Config::parse(&text, &origin)?;
        config.resolve_paths(path.parent().unwrap_or(Path::new("")));
        Ok(config)
    }

    /// Makes every relative path relative to `base`.
    pub fn resolve_paths(&mut self, base: &Path) {
        let resolve = |path: &mut PathBuf| {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        };
        if let Some(tls) = &mut self.tls {
            resolve(&mut tls.cert);
            resolve(&mut tls.key);
        }
        if let Some(peers) = &mut self.peers {
            resolve(&mut peers.cert);
            resolve(&mut peers.key);
        }
        for world in &mut self.worlds {
            match &mut world.backend {
                BackendConfig::File { root } => resolve(root),
                BackendConfig::Bucket {
                    driver: DriverConfig::File { location, .. },
                    ..
                } => resolve(location),
                BackendConfig::Bucket { .. } => {}
            }
            if let Some(tokens) = &mut world.auth.tokens_file {
                resolve(tokens);
            }
            if let Some(seed) = &mut world.policy.seed_file {
                resolve(seed);
            }
            resolve(&mut world.search.cache_dir);
        }
    }

    pub fn world(&self, name: &str) -> Option<&WorldConfig> {
        self.worlds.iter().find(|world| world.name.as_str() == name)
    }

    /// The world a client reaches by `name` (SNI or Host without port), compared without
    /// regard to case. A lone world without authorities answers to every name; otherwise
    /// an unknown name reaches nothing.
    pub fn world_for_authority(&self, name: &str) -> Option<&WorldConfig> {
        if let [only] = self.worlds.as_slice()
            && only.authorities.is_empty()
        {
            return Some(only);
        }
        self.worlds.iter().find(|world| {
            world
                .authorities
                .iter()
                .any(|authority| authority.as_str().eq_ignore_ascii_case(name))
        })
    }
}

mod raw;
#[cfg(test)]
mod tests;

use raw::ConfigFile;
