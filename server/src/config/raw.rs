//! The configuration file as written: serde structs that keep spans, so that cross-field
//! rules can name their line, and the checks that turn them into the validated [`Config`].

use super::*;
use quire_blob::Credentials;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
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
    world_id: Option<Spanned<String>>,
    hedge: Option<Spanned<bool>>,
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
    pub(super) fn validate(self, text: &str) -> Result<Config, String> {
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
    let fields: [(&str, Option<std::ops::Range<usize>>); 10] = [
        ("driver", raw.driver.as_ref().map(Spanned::span)),
        ("world_id", raw.world_id.as_ref().map(Spanned::span)),
        ("location", raw.location.as_ref().map(Spanned::span)),
        ("bucket", raw.bucket.as_ref().map(Spanned::span)),
        ("prefix", raw.prefix.as_ref().map(Spanned::span)),
        ("endpoint", raw.endpoint.as_ref().map(Spanned::span)),
        ("region", raw.region.as_ref().map(Spanned::span)),
        ("root", raw.root.as_ref().map(Spanned::span)),
        ("hedge", raw.hedge.as_ref().map(Spanned::span)),
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
                    DriverConfig::Memory
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
                    DriverConfig::File {
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
                            "hedge",
                            "simulate_latency",
                        ],
                    )?;
                    DriverConfig::S3 {
                        bucket: bucket.ok_or_else(|| required("bucket", &what, &anchor))?,
                        prefix,
                        endpoint,
                        region: text_value(raw.region, "region")?,
                        credentials: Credentials::Standard,
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
                            "hedge",
                            "simulate_latency",
                        ],
                    )?;
                    DriverConfig::Gcs {
                        bucket: bucket.ok_or_else(|| required("bucket", &what, &anchor))?,
                        prefix,
                        endpoint,
                        credentials: Credentials::Standard,
                    }
                }
            };
            let world_id = match raw.world_id {
                None => None,
                Some(id) => Some(WorldId::parse(id.get_ref()).ok_or_else(|| {
                    at(
                        text,
                        &id,
                        format!(
                            "world_id {:?} is not a world id: the bucket marker's \
                             xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx in lowercase hex",
                            id.get_ref()
                        ),
                    )
                })?),
            };
            Ok(BackendConfig::Bucket {
                hedge: raw.hedge.map_or(driver.is_remote(), Spanned::into_inner),
                driver,
                world_id,
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
