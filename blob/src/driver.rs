//! Every driver declared once: what opening one needs ([`DriverConfig`]) and the opening
//! ([`DriverConfig::open`]). The server's configuration parses into this type, the wiring
//! opens it, and the conformance harness builds its targets from it, so a new driver adds a
//! variant and an arm here rather than a type and a match in each of them.
//!
//! The network drivers exist only with their features (`s3`, `gcs`, or `drivers` for all);
//! a configuration naming one that was not built is refused when opened, not when parsed, so
//! every build reads the same files.

use std::path::PathBuf;
use std::sync::Arc;

use crate::BlobStore;
use crate::file::DirBlobStore;
use crate::memory::MemoryStore;

/// Which driver a bucket world lives on, and where in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverConfig {
    /// In memory: gone when the process ends (tests, demonstrations).
    Memory,
    /// A local directory.
    File {
        location: PathBuf,
        prefix: Option<String>,
    },
    /// An S3 bucket (AWS or a compatible server).
    S3 {
        bucket: String,
        prefix: Option<String>,
        /// A compatible server's URL; `None` is AWS itself.
        endpoint: Option<String>,
        region: Option<String>,
        credentials: Credentials,
    },
    /// A GCS bucket.
    Gcs {
        bucket: String,
        prefix: Option<String>,
        /// An emulator's URL; `None` is Google's API.
        endpoint: Option<String>,
        credentials: Credentials,
    },
}

/// How a network driver proves who it is. Configuration files only ever name
/// [`Standard`](Credentials::Standard): secrets stay in the environment the platform gives.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    /// The platform's chain. S3: environment, profile files, SSO, web identity, container and
    /// instance metadata. GCS: `QUIRE_GCS_TOKEN` (a bearer token, e.g. for emulators), else
    /// the key file `GOOGLE_APPLICATION_CREDENTIALS` names, else the machine's metadata server.
    #[default]
    Standard,
    /// Fixed S3 keys, touching no other configuration source (local test servers).
    S3Keys {
        access_key_id: String,
        secret_access_key: String,
    },
    /// A fixed GCS bearer token (emulators accept any).
    Token(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credentials::Standard => "Standard",
            Credentials::S3Keys { .. } => "S3Keys(<redacted>)",
            Credentials::Token(_) => "Token(<redacted>)",
        })
    }
}

/// Why a driver could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("opening the {driver} driver: {detail}")]
pub struct OpenError {
    driver: &'static str,
    detail: String,
}

impl OpenError {
    fn new(driver: &'static str, detail: impl ToString) -> Self {
        OpenError {
            driver,
            detail: detail.to_string(),
        }
    }
}

impl DriverConfig {
    /// The driver's name as configuration spells it (`driver = "s3"`).
    pub fn name(&self) -> &'static str {
        match self {
            DriverConfig::Memory => "memory",
            DriverConfig::File { .. } => "file",
            DriverConfig::S3 { .. } => "s3",
            DriverConfig::Gcs { .. } => "gcs",
        }
    }

    /// Whether every request crosses a network (where slow requests are worth hedging).
    pub fn is_remote(&self) -> bool {
        matches!(self, DriverConfig::S3 { .. } | DriverConfig::Gcs { .. })
    }

    /// The key prefix a world on this driver lives under: empty, or ending in `/`.
    pub fn prefix(&self) -> String {
        let prefix = match self {
            DriverConfig::Memory => None,
            DriverConfig::File { prefix, .. }
            | DriverConfig::S3 { prefix, .. }
            | DriverConfig::Gcs { prefix, .. } => prefix.as_deref(),
        };
        match prefix {
            None | Some("") => String::new(),
            Some(p) if p.ends_with('/') => p.to_owned(),
            Some(p) => format!("{p}/"),
        }
    }

    /// Opens the driver. Keys are used as given: callers add [`prefix`](Self::prefix).
    pub async fn open(&self) -> Result<Arc<dyn BlobStore>, OpenError> {
        let name = self.name();
        match self {
            DriverConfig::Memory => Ok(Arc::new(MemoryStore::new())),
            DriverConfig::File { location, .. } => {
                let store = DirBlobStore::open(location.clone()).map_err(|e| {
                    OpenError::new(name, format_args!("{}: {e}", location.display()))
                })?;
                Ok(Arc::new(store))
            }
            #[cfg(feature = "s3")]
            DriverConfig::S3 {
                bucket,
                endpoint,
                region,
                credentials,
                ..
            } => {
                use crate::s3::{S3Config, S3Store};
                let config = S3Config {
                    endpoint: endpoint.clone(),
                    region: region.clone(),
                    // Custom endpoints (MinIO, SeaweedFS, …) rarely serve virtual-hosted names.
                    force_path_style: endpoint.is_some(),
                    ..S3Config::new(bucket)
                };
                let store = match credentials {
                    Credentials::Standard => S3Store::from_env(config).await,
                    Credentials::S3Keys {
                        access_key_id,
                        secret_access_key,
                    } => S3Store::with_static_credentials(config, access_key_id, secret_access_key),
                    Credentials::Token(_) => {
                        return Err(OpenError::new(name, "S3 takes keys, not a bearer token"));
                    }
                }
                .map_err(|e| OpenError::new(name, e))?;
                Ok(Arc::new(store))
            }
            #[cfg(feature = "gcs")]
            DriverConfig::Gcs {
                bucket,
                endpoint,
                credentials,
                ..
            } => {
                use crate::gcs::{GcsAuth, GcsConfig, GcsStore};
                let auth = match credentials {
                    Credentials::Standard => GcsAuth::from_env(),
                    Credentials::Token(token) => GcsAuth::StaticToken(token.clone()),
                    Credentials::S3Keys { .. } => {
                        return Err(OpenError::new(name, "GCS takes a token, not S3 keys"));
                    }
                };
                let mut config = GcsConfig::new(bucket, auth);
                if let Some(endpoint) = endpoint {
                    config = config.with_endpoint(endpoint);
                }
                let store = GcsStore::new(config).map_err(|e| OpenError::new(name, e))?;
                Ok(Arc::new(store))
            }
            #[allow(
                unreachable_patterns,
                reason = "reached only without a driver's feature"
            )]
            _ => Err(OpenError::new(
                name,
                format_args!("this build has no {name} driver (the `{name}` feature)"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_print_their_secrets() {
        let keys = Credentials::S3Keys {
            access_key_id: "AKIDSECRETID".into(),
            secret_access_key: "shh-secret".into(),
        };
        let token = Credentials::Token("tok-secret".into());
        let printed = format!("{keys:?} {token:?}");
        assert!(
            !printed.contains("SECRET") && !printed.contains("secret"),
            "{printed}"
        );
    }

    #[cfg(feature = "s3")]
    #[tokio::test]
    async fn a_driver_refuses_the_other_drivers_credentials() {
        let error = DriverConfig::S3 {
            bucket: "b".into(),
            prefix: None,
            endpoint: Some("http://127.0.0.1:1".into()),
            region: Some("us-east-1".into()),
            credentials: Credentials::Token("t".into()),
        }
        .open()
        .await
        .unwrap_err()
        .to_string();
        assert!(error.contains("not a bearer token"), "{error}");
    }

    #[test]
    fn a_prefix_is_empty_or_ends_in_a_slash() {
        let file = |prefix: Option<&str>| DriverConfig::File {
            location: PathBuf::from("d"),
            prefix: prefix.map(str::to_owned),
        };
        assert_eq!(DriverConfig::Memory.prefix(), "");
        assert_eq!(file(None).prefix(), "");
        assert_eq!(file(Some("")).prefix(), "");
        assert_eq!(file(Some("worlds/a")).prefix(), "worlds/a/");
        assert_eq!(file(Some("worlds/a/")).prefix(), "worlds/a/");
    }

    #[tokio::test]
    async fn the_local_drivers_open_and_store() {
        let dir = tempfile::tempdir().unwrap();
        for config in [
            DriverConfig::Memory,
            DriverConfig::File {
                location: dir.path().join("bucket"),
                prefix: None,
            },
        ] {
            let store = config.open().await.unwrap();
            store.create("k", "v".into()).await.unwrap();
            assert_eq!(store.get("k").await.unwrap().data, "v", "{}", config.name());
        }
    }

    #[tokio::test]
    async fn an_unopenable_location_names_the_driver_and_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("a-file");
        std::fs::write(&blocker, "not a directory").unwrap();
        let error = DriverConfig::File {
            location: blocker.join("bucket"),
            prefix: None,
        }
        .open()
        .await
        .unwrap_err()
        .to_string();
        assert!(error.starts_with("opening the file driver: "), "{error}");
        assert!(error.contains("a-file"), "{error}");
    }
}
