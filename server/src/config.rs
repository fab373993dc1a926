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
pub use crate::failure::FileKind as ErrorKind;

/// A configuration failure: `config <op> "<file>": <kind>: line N: <detail>`.
pub type Error = crate::failure::Failure<Op, ErrorKind>;

impl crate::failure::Subject for Op {
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

/// A world's identity in its bucket: 1–64 characters of `[A-Za-z0-9._-]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorldId(String);

impl WorldId {
    pub fn parse(text: &str) -> Result<WorldId, String> {
        let valid = !text.is_empty()
            && text.len() <= 64
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            return Err(format!(
                "world_id {text:?} must be 1 to 64 characters of A-Z, a-z, 0-9, `.`, `_`, `-`"
            ));
        }
        Ok(WorldId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
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

deserialize_by_parse!(WorldName, Authority, WorldId);

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
        driver: BucketDriver,
        /// When set, opening checks the bucket's marker carries this id.
        world_id: Option<WorldId>,
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

/// The blob driver under a bucket store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketDriver {
    /// In memory: gone when the process ends (tests, demonstrations).
    Memory,
    /// A local directory.
    File {
        location: PathBuf,
        prefix: Option<String>,
    },
    S3 {
        bucket: String,
        prefix: Option<String>,
        endpoint: Option<String>,
        region: Option<String>,
    },
    Gcs {
        bucket: String,
        prefix: Option<String>,
        endpoint: Option<String>,
    },
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
                    driver: BucketDriver::File { location, .. },
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

// ---------------------------------------------------------------------------------------
// The file as written: spans kept so cross-field rules can name their line.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default, deserialize_with = "version")]
    #[allow(dead_code)] // read only to be checked
    version: u32,
    #[serde(default)]
    listen: ListenConfig,
    tls: Option<TlsConfig>,
    peers: Option<PeersConfig>,
    #[serde(default)]
    worlds: Vec<Spanned<RawWorld>>,
}

fn version<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let version = u32::deserialize(deserializer)?;
    if version != 1 {
        return Err(serde::de::Error::custom(format!(
            "version {version} is not supported; this server reads version 1"
        )));
    }
    Ok(version)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorld {
    name: Spanned<WorldName>,
    /// Checked here rather than while deserialising: an error inside an array would only
    /// name the line the array starts on.
    #[serde(default)]
    authorities: Vec<Spanned<String>>,
    backend: RawBackend,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    limits: LimitSettings,
    #[serde(default)]
    read_only: bool,
    max_documents: Option<NonZeroU64>,
    #[serde(default)]
    policy: RawPolicy,
    #[serde(default)]
    search: RawSearch,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSearch {
    cache_dir: Option<PathBuf>,
    #[serde(default, deserialize_with = "optional_duration")]
    evict_after: Option<Spanned<Duration>>,
    #[serde(default, deserialize_with = "optional_duration")]
    fold_every: Option<Spanned<Duration>>,
    fold_documents: Option<NonZeroU32>,
}

fn optional_duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Spanned<Duration>>, D::Error> {
    let text = Spanned::<String>::deserialize(deserializer)?;
    let span = text.span();
    let parsed = humantime::parse_duration(text.get_ref()).map_err(|error| {
        serde::de::Error::custom(format!(
            "{:?} is not a duration such as \"10s\" or \"30m\": {error}",
            text.get_ref()
        ))
    })?;
    Ok(Some(Spanned::new(span, parsed)))
}

fn search(text: &str, name: &WorldName, raw: RawSearch) -> Result<SearchConfig, String> {
    let positive = |value: Option<Spanned<Duration>>, key: &str, default: Duration| match value {
        None => Ok(default),
        Some(d) if d.get_ref().is_zero() => Err(at(text, &d, format!("{key} must be above zero"))),
        Some(d) => Ok(d.into_inner()),
    };
    Ok(SearchConfig {
        cache_dir: raw
            .cache_dir
            .unwrap_or_else(|| Path::new(DEFAULT_SEARCH_CACHE).join(name.as_str())),
        evict_after: positive(raw.evict_after, "evict_after", Duration::from_secs(30 * 60))?,
        fold_every: positive(raw.fold_every, "fold_every", Duration::from_secs(2))?,
        fold_documents: raw
            .fold_documents
            .unwrap_or(NonZeroU32::new(4096).expect("nonzero")),
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum BackendKind {
    Bucket,
    File,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum DriverKind {
    Memory,
    File,
    S3,
    Gcs,
}

impl DriverKind {
    fn name(self) -> &'static str {
        match self {
            DriverKind::Memory => "memory",
            DriverKind::File => "file",
            DriverKind::S3 => "s3",
            DriverKind::Gcs => "gcs",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    kind: Spanned<BackendKind>,
    driver: Option<Spanned<DriverKind>>,
    world_id: Option<Spanned<WorldId>>,
    location: Option<Spanned<PathBuf>>,
    bucket: Option<Spanned<String>>,
    prefix: Option<Spanned<String>>,
    endpoint: Option<Spanned<String>>,
    region: Option<Spanned<String>>,
    root: Option<Spanned<PathBuf>>,
    simulate_latency: Option<Spanned<SimulatedLatency>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    tokens_file: Option<Spanned<PathBuf>>,
    development_token: Option<Spanned<bool>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    enforce: Option<Spanned<bool>>,
    required: Option<Spanned<bool>>,
    seed_file: Option<PathBuf>,
}

/// `line N: message` at the start of `span`.
fn at<T>(text: &str, spanned: &Spanned<T>, message: impl fmt::Display) -> String {
    format!("line {}: {message}", line_of(text, spanned.span().start))
}

impl ConfigFile {
    fn validate(self, text: &str) -> Result<Config, String> {
        if self.worlds.is_empty() {
            return Err("no [[worlds]]: configure at least one world".to_owned());
        }
        self.listen.validate()?;
        if let Some(peers) = &self.peers {
            peers.validate()?;
        }
        let several = self.worlds.len() > 1;
        let mut names: BTreeMap<WorldName, ()> = BTreeMap::new();
        let mut routes: BTreeMap<Authority, WorldName> = BTreeMap::new();
        let mut worlds = Vec::with_capacity(self.worlds.len());
        for spanned in self.worlds {
            let header = spanned.span();
            let raw = spanned.into_inner();
            let name = raw.name.get_ref().clone();
            if names.insert(name.clone(), ()).is_some() {
                return Err(at(
                    text,
                    &raw.name,
                    format!("world name {:?} is used twice", name.as_str()),
                ));
            }
            if several && raw.authorities.is_empty() {
                return Err(format!(
                    "line {}: world {:?} lists no authorities; with several worlds each must name the SNI / Host names it answers to",
                    line_of(text, header.start),
                    name.as_str()
                ));
            }
            let mut authorities = Vec::with_capacity(raw.authorities.len());
            for written in raw.authorities {
                let authority = Authority::parse(written.get_ref())
                    .map_err(|error| at(text, &written, error))?;
                if let Some(owner) = routes.insert(authority.clone(), name.clone()) {
                    return Err(at(
                        text,
                        &written,
                        format!(
                            "authority {:?} already routes to world {:?}",
                            authority.as_str(),
                            owner.as_str()
                        ),
                    ));
                }
                authorities.push(authority);
            }
            raw.limits.validate().map_err(|why| {
                format!(
                    "line {}: world {:?} [worlds.limits]: {why}",
                    line_of(text, header.start),
                    name.as_str()
                )
            })?;
            let search = search(text, &name, raw.search)?;
            worlds.push(WorldConfig {
                name,
                authorities,
                backend: backend(text, raw.backend)?,
                auth: auth(text, raw.auth)?,
                limits: raw.limits,
                read_only: raw.read_only,
                max_documents: raw.max_documents,
                policy: policy(text, raw.policy)?,
                search,
            });
        }
        // A world's name also routes to it (`Worlds::for_host`): it may not be another
        // world's authority, or which world a name chooses would depend on their order.
        for world in &worlds {
            if let Ok(as_authority) = Authority::parse(world.name.as_str())
                && let Some(owner) = routes.get(&as_authority)
                && owner != &world.name
            {
                return Err(format!(
                    "world name {:?} is also an authority of world {:?}; a world's name routes to it",
                    world.name.as_str(),
                    owner.as_str()
                ));
            }
        }
        Ok(Config {
            listen: self.listen,
            tls: self.tls,
            peers: self.peers,
            worlds,
        })
    }
}

fn backend(text: &str, raw: RawBackend) -> Result<BackendConfig, String> {
    let fields: [(&str, Option<std::ops::Range<usize>>); 9] = [
        ("driver", raw.driver.as_ref().map(Spanned::span)),
        ("world_id", raw.world_id.as_ref().map(Spanned::span)),
        ("location", raw.location.as_ref().map(Spanned::span)),
        ("bucket", raw.bucket.as_ref().map(Spanned::span)),
        ("prefix", raw.prefix.as_ref().map(Spanned::span)),
        ("endpoint", raw.endpoint.as_ref().map(Spanned::span)),
        ("region", raw.region.as_ref().map(Spanned::span)),
        ("root", raw.root.as_ref().map(Spanned::span)),
        (
            "simulate_latency",
            raw.simulate_latency.as_ref().map(Spanned::span),
        ),
    ];
    // Every key present must belong to the chosen kind and driver.
    let check_allowed = |what: &str, allowed: &[&str]| -> Result<(), String> {
        let stray = fields
            .iter()
            .filter(|(key, _)| !allowed.contains(key))
            .find_map(|(key, span)| span.as_ref().map(|span| (key, span)));
        if let Some((key, span)) = stray {
            return Err(format!(
                "line {}: `{key}` does not apply to {what} (it takes {})",
                line_of(text, span.start),
                allowed.join(", ")
            ));
        }
        Ok(())
    };
    let required = |key: &str, what: &str, anchor: &std::ops::Range<usize>| {
        format!("line {}: {what} needs `{key}`", line_of(text, anchor.start))
    };
    let text_value = |value: Option<Spanned<String>>,
                      key: &str|
     -> Result<Option<String>, String> {
        match value {
            None => Ok(None),
            Some(value)
                if value.get_ref().is_empty() || value.get_ref().chars().any(char::is_control) =>
            {
                Err(at(
                    text,
                    &value,
                    format!("`{key}` must be non-empty text without control characters"),
                ))
            }
            Some(value) => Ok(Some(value.into_inner())),
        }
    };

    match *raw.kind.get_ref() {
        BackendKind::File => {
            check_allowed("kind = \"file\"", &["root"])?;
            let root = raw
                .root
                .ok_or_else(|| required("root", "kind = \"file\"", &raw.kind.span()))?;
            Ok(BackendConfig::File {
                root: root.into_inner(),
            })
        }
        BackendKind::Bucket => {
            let driver = raw
                .driver
                .as_ref()
                .ok_or_else(|| required("driver", "kind = \"bucket\"", &raw.kind.span()))?;
            let kind = *driver.get_ref();
            let what = format!("the {} driver", kind.name());
            let anchor = driver.span();
            if let Some(endpoint) = &raw.endpoint {
                let url = endpoint.get_ref();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(at(
                        text,
                        endpoint,
                        format!("endpoint {url:?} must be an http:// or https:// URL"),
                    ));
                }
            }
            let endpoint = text_value(raw.endpoint, "endpoint")?;
            let bucket = match raw.bucket {
                Some(bucket) if bucket.get_ref().contains('/') => {
                    return Err(at(
                        text,
                        &bucket,
                        "`bucket` is the bucket's name alone: put a path in `prefix`",
                    ));
                }
                other => text_value(other, "bucket")?,
            };
            let prefix = text_value(raw.prefix, "prefix")?;
            let driver = match kind {
                DriverKind::Memory => {
                    check_allowed(&what, &["driver", "world_id", "simulate_latency"])?;
                    BucketDriver::Memory
                }
                DriverKind::File => {
                    check_allowed(
                        &what,
                        &[
                            "driver",
                            "world_id",
                            "location",
                            "prefix",
                            "simulate_latency",
                        ],
                    )?;
                    let location = raw
                        .location
                        .ok_or_else(|| required("location", &what, &anchor))?;
                    BucketDriver::File {
                        location: location.into_inner(),
                        prefix,
                    }
                }
                DriverKind::S3 => {
                    check_allowed(
                        &what,
                        &[
                            "driver",
                            "world_id",
                            "bucket",
                            "prefix",
                            "endpoint",
                            "region",
                            "simulate_latency",
                        ],
                    )?;
                    BucketDriver::S3 {
                        bucket: bucket.ok_or_else(|| required("bucket", &what, &anchor))?,
                        prefix,
                        endpoint,
                        region: text_value(raw.region, "region")?,
                    }
                }
                DriverKind::Gcs => {
                    check_allowed(
                        &what,
                        &[
                            "driver",
                            "world_id",
                            "bucket",
                            "prefix",
                            "endpoint",
                            "simulate_latency",
                        ],
                    )?;
                    BucketDriver::Gcs {
                        bucket: bucket.ok_or_else(|| required("bucket", &what, &anchor))?,
                        prefix,
                        endpoint,
                    }
                }
            };
            Ok(BackendConfig::Bucket {
                driver,
                world_id: raw.world_id.map(Spanned::into_inner),
                simulate_latency: raw.simulate_latency.map(Spanned::into_inner),
            })
        }
    }
}

fn auth(text: &str, raw: RawAuth) -> Result<AuthConfig, String> {
    let development_token = raw.development_token.as_ref().is_some_and(|d| *d.get_ref());
    if let (Some(tokens_file), true) = (&raw.tokens_file, development_token) {
        return Err(at(
            text,
            tokens_file,
            "`tokens_file` and `development_token = true` exclude each other",
        ));
    }
    Ok(AuthConfig {
        tokens_file: raw.tokens_file.map(Spanned::into_inner),
        development_token,
    })
}

fn policy(text: &str, raw: RawPolicy) -> Result<PolicyConfig, String> {
    let enforce = raw.enforce.as_ref().is_none_or(|e| *e.get_ref());
    let required = raw.required.as_ref().is_some_and(|r| *r.get_ref());
    if let (Some(spanned), true, false) = (&raw.required, required, enforce) {
        return Err(at(
            text,
            spanned,
            "`required = true` needs `enforce = true`: a required policy is enforced",
        ));
    }
    Ok(PolicyConfig {
        enforce,
        required,
        seed_file: raw.seed_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"version = 1

[listen]
quic = "0.0.0.0:6309"
http = "127.0.0.1:8080"
max_incoming_streams = 64
idle_timeout = "45s"
shutdown_timeout = "5s"
max_quic_connections = 100
max_http_connections = 200
http_header_timeout = "3s"
http_body_timeout = "7s"
http2 = true

[tls]
cert = "/etc/quire/cert.pem"
key = "key.pem"

[[worlds]]
name = "docs"
authorities = ["docs.example.com", "kb.example.com"]
read_only = true
max_documents = 100000

[worlds.backend]
kind = "bucket"
driver = "s3"
bucket = "my-bucket"
prefix = "worlds/docs"
endpoint = "http://127.0.0.1:9000"
region = "us-east-1"
world_id = "2f0c1d2e-aaaa-bbbb-cccc-0123456789ab"

[worlds.auth]
tokens_file = "tokens.toml"

[worlds.limits]
requests_per_second = 20
burst = 40
client_requests_per_second = 10

[worlds.policy]
required = true
seed_file = "policy.md"

[[worlds]]
name = "notes"
authorities = ["notes.example.com"]

[worlds.backend]
kind = "file"
root = "./notes"
"#;

    fn parse(text: &str) -> Result<Config, Error> {
        Config::parse(text, "quire.toml")
    }

    /// A one-world file with `backend` as the backend table's body.
    fn with_backend(backend: &str) -> String {
        format!("[[worlds]]\nname = \"w\"\n\n[worlds.backend]\n{backend}")
    }

    fn assert_refused(text: &str, line: usize, mentions: &str) {
        let error = parse(text).expect_err("configuration should be refused");
        assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
        assert_eq!(error.op(), Op::Parse);
        assert_eq!(error.key(), "quire.toml");
        assert!(
            error.detail().starts_with(&format!("line {line}: ")),
            "{:?} should name line {line}",
            error.detail()
        );
        assert!(
            error.detail().contains(mentions),
            "{:?} should mention {mentions:?}",
            error.detail()
        );
    }

    #[test]
    fn the_embedded_default_serves_one_local_world_from_the_file_driver() {
        let config = Config::embedded_default();
        assert_eq!(config.listen, ListenConfig::default());
        assert_eq!(config.listen.quic, "127.0.0.1:6309".parse().unwrap());
        assert_eq!(config.listen.http, "127.0.0.1:6309".parse().unwrap());
        assert_eq!(config.tls, None);
        let [world] = config.worlds.as_slice() else {
            panic!("one world expected");
        };
        assert_eq!(world.name.as_str(), "local");
        assert!(world.authorities.is_empty());
        assert_eq!(
            world.backend,
            BackendConfig::Bucket {
                driver: BucketDriver::File {
                    location: PathBuf::from("./data"),
                    prefix: None
                },
                world_id: None,
                simulate_latency: None,
            }
        );
        assert_eq!(
            world.auth,
            AuthConfig {
                tokens_file: None,
                development_token: true
            }
        );
        assert_eq!(world.limits, LimitSettings::default());
        assert!(!world.read_only);
        assert_eq!(world.max_documents, None);
        assert_eq!(world.policy, PolicyConfig::default());
        // A lone world without authorities answers to any name.
        assert_eq!(
            config
                .world_for_authority("localhost")
                .unwrap()
                .name
                .as_str(),
            "local"
        );
        assert_eq!(
            config
                .world_for_authority("127.0.0.1")
                .unwrap()
                .name
                .as_str(),
            "local"
        );
    }

    #[test]
    fn reads_every_setting() {
        let config = parse(FULL).unwrap();
        assert_eq!(
            config.listen,
            ListenConfig {
                quic: "0.0.0.0:6309".parse().unwrap(),
                http: "127.0.0.1:8080".parse().unwrap(),
                max_incoming_streams: NonZeroU32::new(64).unwrap(),
                idle_timeout: Duration::from_secs(45),
                shutdown_timeout: Duration::from_secs(5),
                max_quic_connections: NonZeroU32::new(100).unwrap(),
                max_http_connections: NonZeroU32::new(200).unwrap(),
                http_header_timeout: Duration::from_secs(3),
                http_body_timeout: Duration::from_secs(7),
                http2: true,
            }
        );
        assert_eq!(
            config.tls,
            Some(TlsConfig {
                cert: PathBuf::from("/etc/quire/cert.pem"),
                key: PathBuf::from("key.pem")
            })
        );
        let docs = config.world("docs").unwrap();
        assert_eq!(
            docs.authorities,
            [
                Authority::parse("docs.example.com").unwrap(),
                Authority::parse("kb.example.com").unwrap()
            ]
        );
        assert!(docs.read_only);
        assert_eq!(docs.max_documents, NonZeroU64::new(100_000));
        assert_eq!(
            docs.backend,
            BackendConfig::Bucket {
                driver: BucketDriver::S3 {
                    bucket: "my-bucket".into(),
                    prefix: Some("worlds/docs".into()),
                    endpoint: Some("http://127.0.0.1:9000".into()),
                    region: Some("us-east-1".into()),
                },
                world_id: Some(WorldId::parse("2f0c1d2e-aaaa-bbbb-cccc-0123456789ab").unwrap()),
                simulate_latency: None,
            }
        );
        assert_eq!(docs.auth.tokens_file, Some(PathBuf::from("tokens.toml")));
        assert!(!docs.auth.development_token);
        assert_eq!(docs.limits.requests_per_second.get(), 20);
        assert_eq!(docs.limits.burst.get(), 40);
        assert_eq!(docs.limits.client_requests_per_second.get(), 10);
        assert_eq!(docs.limits.max_concurrent_requests.get(), 256);
        assert_eq!(
            docs.policy,
            PolicyConfig {
                enforce: true,
                required: true,
                seed_file: Some(PathBuf::from("policy.md"))
            }
        );
        let notes = config.world("notes").unwrap();
        assert_eq!(
            notes.backend,
            BackendConfig::File {
                root: PathBuf::from("./notes")
            }
        );
        assert_eq!(notes.auth, AuthConfig::default());
        assert!(config.world("other").is_none());
    }

    #[test]
    fn routes_authorities_to_worlds_and_refuses_unknown_names() {
        let config = parse(FULL).unwrap();
        let route = |name: &str| config.world_for_authority(name).map(|w| w.name.as_str());
        assert_eq!(route("docs.example.com"), Some("docs"));
        assert_eq!(route("KB.example.com"), Some("docs"));
        assert_eq!(route("notes.example.com"), Some("notes"));
        assert_eq!(route("other.example.com"), None);
        assert_eq!(route(""), None);
        assert_eq!(route("127.0.0.1"), None);
    }

    #[test]
    fn reads_each_bucket_driver_and_the_file_backend() {
        let cases = [
            (
                "kind = \"bucket\"\ndriver = \"memory\"\n",
                BucketDriver::Memory,
            ),
            (
                "kind = \"bucket\"\ndriver = \"file\"\nlocation = \"/srv/quire\"\nprefix = \"w1\"\n",
                BucketDriver::File {
                    location: "/srv/quire".into(),
                    prefix: Some("w1".into()),
                },
            ),
            (
                "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\n",
                BucketDriver::S3 {
                    bucket: "b".into(),
                    prefix: None,
                    endpoint: None,
                    region: None,
                },
            ),
            (
                "kind = \"bucket\"\ndriver = \"gcs\"\nbucket = \"b\"\nendpoint = \"https://storage.example\"\n",
                BucketDriver::Gcs {
                    bucket: "b".into(),
                    prefix: None,
                    endpoint: Some("https://storage.example".into()),
                },
            ),
        ];
        for (body, driver) in cases {
            let config = parse(&with_backend(body)).unwrap();
            assert_eq!(
                config.worlds[0].backend,
                BackendConfig::Bucket {
                    driver,
                    world_id: None,
                    simulate_latency: None,
                },
                "{body}"
            );
        }
        let inline =
            parse("[[worlds]]\nname = \"w\"\nbackend = { kind = \"file\", root = \"/notes\" }\n")
                .unwrap();
        assert_eq!(
            inline.worlds[0].backend,
            BackendConfig::File {
                root: "/notes".into()
            }
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_their_line() {
        assert_refused("verison = 1\n", 1, "unknown field `verison`");
        assert_refused(
            "[listen]\nquik = \"127.0.0.1:1\"\n",
            2,
            "unknown field `quik`",
        );
        assert_refused(
            "[tls]\ncert = \"c\"\nkey = \"k\"\nchain = \"x\"\n",
            4,
            "unknown field `chain`",
        );
        let world = "[[worlds]]\nname = \"w\"\n\n[worlds.backend]\nkind = \"bucket\"\ndriver = \"memory\"\n";
        assert_refused(&format!("{world}nmae = \"x\"\n"), 7, "unknown field `nmae`");
        assert_refused(
            "[[worlds]]\nname = \"w\"\nreadonly = true\n[worlds.backend]\nkind = \"file\"\nroot = \"r\"\n",
            3,
            "unknown field `readonly`",
        );
        assert_refused(
            &format!("{world}\n[worlds.limits]\nburts = 3\n"),
            9,
            "unknown field `burts`",
        );
        assert_refused(
            &format!("{world}\n[worlds.auth]\ntoken_file = \"t\"\n"),
            9,
            "unknown field `token_file`",
        );
        assert_refused(
            &format!("{world}\n[worlds.policy]\nenfore = true\n"),
            9,
            "unknown field `enfore`",
        );
        assert_refused(
            &with_backend("kind = \"bucket\"\ndriver = \"file\"\nlocaton = \"x\"\n"),
            7,
            "unknown field `locaton`",
        );
    }

    #[test]
    fn refuses_backends_that_do_not_add_up() {
        let cases: &[(&str, usize, &str)] = &[
            ("driver = \"memory\"\n", 4, "missing field `kind`"),
            ("kind = \"tape\"\n", 5, "unknown variant `tape`"),
            ("kind = \"bucket\"\n", 5, "kind = \"bucket\" needs `driver`"),
            (
                "kind = \"bucket\"\ndriver = \"floppy\"\n",
                6,
                "unknown variant `floppy`",
            ),
            (
                "kind = \"bucket\"\ndriver = \"file\"\n",
                6,
                "the file driver needs `location`",
            ),
            (
                "kind = \"bucket\"\ndriver = \"s3\"\n",
                6,
                "the s3 driver needs `bucket`",
            ),
            (
                "kind = \"bucket\"\ndriver = \"gcs\"\nregion = \"eu\"\nbucket = \"b\"\n",
                7,
                "`region` does not apply to the gcs driver",
            ),
            (
                "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\nlocation = \"x\"\n",
                8,
                "`location` does not apply to the s3 driver",
            ),
            (
                "kind = \"bucket\"\ndriver = \"memory\"\nprefix = \"p\"\n",
                7,
                "`prefix` does not apply to the memory driver",
            ),
            (
                "kind = \"bucket\"\ndriver = \"memory\"\nroot = \"r\"\n",
                7,
                "`root` does not apply",
            ),
            ("kind = \"file\"\n", 5, "kind = \"file\" needs `root`"),
            (
                "kind = \"file\"\nroot = \"r\"\ndriver = \"file\"\n",
                7,
                "`driver` does not apply to kind = \"file\"",
            ),
            (
                "kind = \"file\"\nroot = \"r\"\nworld_id = \"x\"\n",
                7,
                "`world_id` does not apply",
            ),
            (
                "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b/path\"\n",
                7,
                "put a path in `prefix`",
            ),
            (
                "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"\"\n",
                7,
                "`bucket` must be non-empty",
            ),
            (
                "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\nendpoint = \"127.0.0.1:9000\"\n",
                8,
                "http:// or https://",
            ),
            (
                "kind = \"bucket\"\ndriver = \"file\"\nlocation = \"d\"\nprefix = \"\"\n",
                8,
                "`prefix` must be non-empty",
            ),
            (
                "kind = \"bucket\"\ndriver = \"memory\"\nworld_id = \"has space\"\n",
                7,
                "world_id \"has space\"",
            ),
            (
                "kind = \"bucket\"\ndriver = \"memory\"\nworld_id = \"\"\n",
                7,
                "world_id \"\"",
            ),
            (
                "kind = \"bucket\"\ndriver = \"file\"\nlocation = 5\n",
                7,
                "invalid type",
            ),
        ];
        for (body, line, mentions) in cases {
            assert_refused(&with_backend(body), *line, mentions);
        }
        assert_refused("[[worlds]]\nname = \"w\"\n", 1, "missing field `backend`");
    }

    #[test]
    fn authorities_must_be_lowercase_dns_names() {
        for good in [
            "localhost",
            "docs.example.com",
            "a-b.example",
            "xn--bcher-kva.example",
            "1password.com",
            "a.b.c.d.e",
        ] {
            assert!(Authority::parse(good).is_ok(), "{good}");
        }
        let long_label = format!("{}.example", "a".repeat(64));
        let long_name = format!("{}a", "abcdefghi.".repeat(26));
        let cases: &[(&str, &str)] = &[
            ("", "is empty"),
            ("Docs.example.com", "upper-case"),
            ("docs.example.com.", "trailing dot"),
            ("*.example.com", "wildcard"),
            ("docs.example.com:6309", "without a port"),
            ("127.0.0.1", "IP address"),
            ("::1", "IP address"),
            ("[::1]", "`:`"),
            ("10.0.0.300", "all-numeric label"),
            ("bücher.example", "not ASCII"),
            ("a..b", "empty label"),
            (&long_label, "longer than 63"),
            (&long_name, "longer than 253"),
            ("-a.example", "starting or ending with `-`"),
            ("a-.example", "starting or ending with `-`"),
            ("under_score.example", "only a-z"),
            ("with space", "only a-z"),
        ];
        for (bad, mentions) in cases {
            let error = Authority::parse(bad).expect_err(bad);
            assert!(
                error.contains(mentions),
                "{bad:?}: {error:?} should mention {mentions:?}"
            );
        }
        let text = "[[worlds]]\nname = \"w\"\nauthorities = [\n  \"ok.example\",\n  \"Bad.Example\",\n]\nbackend = { kind = \"file\", root = \"r\" }\n";
        assert_refused(text, 5, "upper-case");
    }

    #[test]
    fn several_worlds_must_route_distinctly() {
        let two = |a: &str, b: &str| {
            format!(
                "[[worlds]]\nname = \"one\"\n{a}backend = {{ kind = \"file\", root = \"a\" }}\n\n[[worlds]]\nname = \"two\"\n{b}backend = {{ kind = \"file\", root = \"b\" }}\n"
            )
        };
        assert!(
            parse(&two(
                "authorities = [\"a.example\"]\n",
                "authorities = [\"b.example\"]\n"
            ))
            .is_ok()
        );
        assert_refused(
            &two("authorities = [\"a.example\"]\n", ""),
            6,
            "world \"two\" lists no authorities",
        );
        assert_refused(
            &two(
                "authorities = [\"a.example\"]\n",
                "authorities = [\"b.example\", \"a.example\"]\n",
            ),
            8,
            "authority \"a.example\" already routes to world \"one\"",
        );
        assert_refused(
            "[[worlds]]\nname = \"w\"\nauthorities = [\"a.example\", \"a.example\"]\nbackend = { kind = \"file\", root = \"a\" }\n",
            3,
            "already routes to world \"w\"",
        );
        let same_name = "[[worlds]]\nname = \"w\"\nauthorities = [\"a.example\"]\nbackend = { kind = \"file\", root = \"a\" }\n\n[[worlds]]\nname = \"w\"\nauthorities = [\"b.example\"]\nbackend = { kind = \"file\", root = \"b\" }\n";
        assert_refused(same_name, 7, "world name \"w\" is used twice");
    }

    #[test]
    fn refuses_bad_values_naming_their_line() {
        assert_refused("version = 2\n", 1, "version 2 is not supported");
        assert!(
            parse(&format!(
                "version = 1\n{}",
                with_backend("kind = \"file\"\nroot = \"r\"\n")
            ))
            .is_ok()
        );
        assert_refused(
            "[listen]\nquic = \"localhost\"\n",
            2,
            "invalid socket address",
        );
        assert_refused(
            "[listen]\nidle_timeout = \"forever\"\n",
            2,
            "not a duration",
        );
        assert_refused("[listen]\nmax_incoming_streams = 0\n", 2, "nonzero");
        assert_refused("[tls]\ncert = \"c\"\n", 1, "missing field `key`");
        assert_refused(
            "[[worlds]]\nname = \"Docs\"\nbackend = { kind = \"file\", root = \"r\" }\n",
            2,
            "world name \"Docs\"",
        );
        assert_refused(
            "[[worlds]]\nname = \"w\"\nmax_documents = 0\nbackend = { kind = \"file\", root = \"r\" }\n",
            3,
            "nonzero",
        );
        assert_refused("[[worlds]\n", 1, "");
        let world = with_backend("kind = \"bucket\"\ndriver = \"memory\"\n");
        assert_refused(
            &format!(
                "{world}\n[worlds.auth]\ndevelopment_token = true\ntokens_file = \"t.toml\"\n"
            ),
            10,
            "exclude each other",
        );
        assert_refused(
            &format!("{world}\n[worlds.policy]\nenforce = false\nrequired = true\n"),
            10,
            "needs `enforce = true`",
        );
        let error = parse("").unwrap_err();
        assert_eq!(
            error.detail(),
            "no [[worlds]]: configure at least one world"
        );
    }

    #[test]
    fn a_world_name_may_not_be_another_worlds_authority() {
        let text = "[[worlds]]\nname = \"docs\"\nauthorities = [\"docs.example.com\"]\nbackend = { kind = \"file\", root = \"a\" }\n\n[[worlds]]\nname = \"notes\"\nauthorities = [\"docs\"]\nbackend = { kind = \"file\", root = \"b\" }\n";
        let error = parse(text).unwrap_err();
        assert!(
            error
                .detail()
                .contains("\"docs\" is also an authority of world \"notes\""),
            "{error}"
        );
    }

    #[test]
    fn listeners_beyond_loopback_are_named() {
        let mut listen = ListenConfig::default();
        assert!(listen.beyond_loopback().is_empty());
        listen.http = "0.0.0.0:6309".parse().unwrap();
        listen.quic = "[::1]:6309".parse().unwrap();
        assert_eq!(listen.beyond_loopback(), [("HTTP", listen.http)]);
    }

    #[test]
    fn refuses_durations_and_limits_that_cannot_work() {
        let world = with_backend("kind = \"bucket\"\ndriver = \"memory\"\n");
        for (listen, mentions) in [
            ("idle_timeout = \"0s\"", "idle_timeout"),
            ("http_header_timeout = \"0s\"", "http_header_timeout"),
            ("http_body_timeout = \"300000000000y\"", "http_body_timeout"),
            ("shutdown_timeout = \"0s\"", "shutdown_timeout"),
        ] {
            let error = parse(&format!("[listen]\n{listen}\n\n{world}")).unwrap_err();
            assert!(error.detail().contains(mentions), "{listen}: {error}");
        }
        for (limits, mentions) in [
            ("request_timeout = \"0s\"", "request_timeout"),
            ("request_timeout = \"300000000000y\"", "request_timeout"),
            (
                "max_concurrent_requests = 4\nclient_concurrent_requests = 4",
                "one client could take every slot",
            ),
        ] {
            assert_refused(
                &format!("{world}\n[worlds.limits]\n{limits}\n"),
                1,
                mentions,
            );
        }
        assert!(
            parse(&format!(
                "{world}\n[worlds.limits]\nrequest_timeout = \"1d\"\n"
            ))
            .is_ok()
        );
    }

    #[test]
    fn errors_name_the_file() {
        let error = parse("verison = 1\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "config parse \"quire.toml\": invalid: line 1: unknown field `verison`, expected one of `version`, `listen`, `tls`, `peers`, `worlds`"
        );
    }

    #[test]
    fn reads_the_search_section_and_defaults_it_beside_the_data() {
        let defaulted = Config::embedded_default();
        assert_eq!(
            defaulted.worlds[0].search,
            SearchConfig {
                cache_dir: PathBuf::from("search-cache/local"),
                evict_after: Duration::from_secs(1800),
                fold_every: Duration::from_secs(2),
                fold_documents: NonZeroU32::new(4096).unwrap(),
            }
        );
        let text = with_backend(
            "kind = \"file\"\nroot = \"r\"\n\n[worlds.search]\ncache_dir = \"idx\"\nevict_after = \"5m\"\nfold_every = \"250ms\"\nfold_documents = 10\n",
        );
        let mut config = parse(&text).unwrap();
        config.resolve_paths(Path::new("/srv"));
        assert_eq!(
            config.worlds[0].search,
            SearchConfig {
                cache_dir: PathBuf::from("/srv/idx"),
                evict_after: Duration::from_secs(300),
                fold_every: Duration::from_millis(250),
                fold_documents: NonZeroU32::new(10).unwrap(),
            }
        );
        let base = "kind = \"file\"\nroot = \"r\"\n\n[worlds.search]\n";
        assert_refused(
            &with_backend(&format!("{base}evict_after = \"0s\"\n")),
            9,
            "evict_after must be above zero",
        );
        assert_refused(
            &with_backend(&format!("{base}fold_every = \"soon\"\n")),
            9,
            "not a duration",
        );
        assert_refused(
            &with_backend(&format!("{base}fold_documents = 0\n")),
            9,
            "nonzero",
        );
        assert_refused(&with_backend(&format!("{base}cache = \"x\"\n")), 9, "cache");
    }

    #[test]
    fn load_resolves_relative_paths_against_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("quire.toml");
        std::fs::write(&path, FULL).unwrap();
        let config = Config::load(&path).unwrap();
        let tls = config.tls.as_ref().unwrap();
        assert_eq!(
            tls.cert,
            PathBuf::from("/etc/quire/cert.pem"),
            "absolute stays"
        );
        assert_eq!(tls.key, dir.path().join("key.pem"));
        let docs = config.world("docs").unwrap();
        assert_eq!(docs.auth.tokens_file, Some(dir.path().join("tokens.toml")));
        assert_eq!(docs.policy.seed_file, Some(dir.path().join("policy.md")));
        assert_eq!(
            config.world("notes").unwrap().backend,
            BackendConfig::File {
                root: dir.path().join("./notes")
            }
        );

        let mut default = Config::embedded_default();
        default.resolve_paths(Path::new("/srv"));
        assert_eq!(
            default.worlds[0].backend,
            BackendConfig::Bucket {
                driver: BucketDriver::File {
                    location: PathBuf::from("/srv/./data"),
                    prefix: None
                },
                world_id: None,
                simulate_latency: None,
            }
        );

        let missing = dir.path().join("absent.toml");
        let error = Config::load(&missing).unwrap_err();
        assert_eq!((error.op(), error.kind()), (Op::Load, ErrorKind::Io));
        assert_eq!(error.key(), missing.display().to_string());

        std::fs::write(&path, "verison = 1\n").unwrap();
        let error = Config::load(&path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Invalid);
        assert_eq!(error.key(), path.display().to_string());
    }

    #[test]
    fn world_names_and_ids_follow_their_grammar() {
        for good in ["local", "a", "docs-2", "my_world", "0"] {
            assert!(WorldName::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "Local", "-a", "_a", "a b", "a.b", &"a".repeat(64)] {
            assert!(WorldName::parse(bad).is_err(), "{bad}");
        }
        for good in ["x", "2f0c1d2e-aaaa", "A.b_c-9", &"a".repeat(64)] {
            assert!(WorldId::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "a/b", "a:b", &"a".repeat(65)] {
            assert!(WorldId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bucket_world_may_name_a_simulated_latency_for_benchmarks() {
        let world = |extra: &str| {
            format!(
                "[[worlds]]\nname = \"w\"\n\n[worlds.backend]\nkind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\n{extra}"
            )
        };
        let config = parse(&world("simulate_latency = \"real-gcs\"\n")).unwrap();
        assert!(matches!(
            config.worlds[0].backend,
            BackendConfig::Bucket {
                simulate_latency: Some(SimulatedLatency::RealGcs),
                ..
            }
        ));
        let error = parse(&world("simulate_latency = \"lunar\"\n")).expect_err("unknown");
        assert!(error.detail().contains("real-gcs"), "{error}");
        let file = "[[worlds]]\nname = \"w\"\n\n[worlds.backend]\nkind = \"file\"\nroot = \"/n\"\nsimulate_latency = \"real-gcs\"\n";
        let error = parse(file).expect_err("a file backend has no bucket");
        assert!(error.detail().contains("simulate_latency"), "{error}");
    }

    #[test]
    fn peers_parse_with_defaults_and_resolve_their_paths() {
        let text = format!(
            "[peers]\naddresses = [\"10.0.0.7:6310\", \"peer.example:7000\"]\ndns = \"quire-peers.internal:6310\"\ncert = \"replica.pem\"\nkey = \"/etc/replica-key.pem\"\n\n{}",
            with_backend("kind = \"file\"\nroot = \"notes\"\n")
        );
        let mut config = parse(&text).unwrap();
        let peers = config.peers.clone().expect("[peers] parsed");
        assert_eq!(peers.listen, DEFAULT_PEER_ADDRESS);
        assert_eq!(peers.addresses, ["10.0.0.7:6310", "peer.example:7000"]);
        assert_eq!(peers.dns.as_deref(), Some("quire-peers.internal:6310"));
        assert_eq!(peers.resolve_every, Duration::from_secs(30));
        config.resolve_paths(Path::new("/srv/quire"));
        let peers = config.peers.unwrap();
        assert_eq!(peers.cert, Path::new("/srv/quire/replica.pem"));
        assert_eq!(peers.key, Path::new("/etc/replica-key.pem"));
        assert_eq!(parse(FULL).unwrap().peers, None);
    }

    #[test]
    fn bad_peers_are_refused() {
        let world = with_backend("kind = \"file\"\nroot = \"notes\"\n");
        for (peers, mentions) in [
            (
                "addresses = [\"10.0.0.7\"]\ncert = \"c\"\nkey = \"k\"\n",
                "host:port",
            ),
            ("dns = \"name:0\"\ncert = \"c\"\nkey = \"k\"\n", "host:port"),
            (
                "resolve_every = \"0s\"\ncert = \"c\"\nkey = \"k\"\n",
                "resolve_every",
            ),
            ("cert = \"c\"\n", "missing field `key`"),
            ("cert = \"c\"\nkey = \"k\"\nport = 1\n", "unknown field"),
        ] {
            let error = parse(&format!("[peers]\n{peers}\n{world}")).expect_err(peers);
            assert!(error.detail().contains(mentions), "{peers}: {error}");
        }
    }
}
