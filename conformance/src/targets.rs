//! The drivers a run can reach, declared once. A [`DriverTarget`] is a driver's
//! configuration (`quire_blob::DriverConfig`, opened the way the server opens it) with what
//! its server can show ([`Capabilities`]). Memory and file are always reachable; S3 and GCS
//! when the environment names the local servers `cargo xtask servers` starts:
//!
//! | driver | variables | capabilities |
//! | --- | --- | --- |
//! | `memory`, `file` | none | all |
//! | `s3` | `QUIRE_TEST_S3_ENDPOINT`, `QUIRE_TEST_S3_BUCKET`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION` (default `us-east-1`) | all |
//! | `gcs` | `QUIRE_TEST_GCS_ENDPOINT`, `QUIRE_TEST_GCS_BUCKET` (default `quire-test`) | [`Capabilities::fake_gcs`]: the emulator ignores the generation on delete |
//!
//! The driver tests, xtask's conformance table and the emulator's self-test all build their
//! stores here, so a new driver adds a row to [`DRIVERS`] and an arm to [`driver_target`].

use std::path::Path;
use std::sync::Arc;

use quire_blob::{BlobStore, Credentials, DriverConfig, OpenError};

use crate::Capabilities;

/// Every driver, in the order tables print them.
pub const DRIVERS: [&str; 4] = ["memory", "file", "s3", "gcs"];

/// The environment variable a run sets to fail, not skip, when a server is not named.
pub const REQUIRE_SERVERS: &str = "QUIRE_TEST_REQUIRE_SERVERS";

/// One driver to run suites on.
#[derive(Clone, Debug)]
pub struct DriverTarget {
    pub driver: DriverConfig,
    pub capabilities: Capabilities,
}

impl DriverTarget {
    /// The driver's name (`"s3"`).
    pub fn name(&self) -> &'static str {
        self.driver.name()
    }

    /// Opens the driver as the server does.
    pub async fn open(&self) -> Result<Arc<dyn BlobStore>, OpenError> {
        self.driver.open().await
    }
}

/// The target for driver `name`, reading variables through `lookup`; a file driver keeps its
/// objects under `scratch`. `Ok(None)`: the driver's server is not named. `Err`: an unknown
/// driver, or a server named without the rest of what reaching it needs.
pub fn driver_target(
    name: &str,
    scratch: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<DriverTarget>, String> {
    let required = |var: &str| lookup(var).ok_or_else(|| format!("{var} is unset"));
    let all = Capabilities::default();
    let (driver, capabilities) = match name {
        "memory" => (DriverConfig::Memory, all),
        "file" => (
            DriverConfig::File {
                location: scratch.join("file-driver"),
                prefix: None,
            },
            all,
        ),
        "s3" => {
            let Some(endpoint) = lookup("QUIRE_TEST_S3_ENDPOINT") else {
                return Ok(None);
            };
            let driver = DriverConfig::S3 {
                bucket: required("QUIRE_TEST_S3_BUCKET")?,
                prefix: None,
                endpoint: Some(endpoint),
                region: Some(lookup("AWS_REGION").unwrap_or_else(|| "us-east-1".into())),
                credentials: Credentials::S3Keys {
                    access_key_id: required("AWS_ACCESS_KEY_ID")?,
                    secret_access_key: required("AWS_SECRET_ACCESS_KEY")?,
                },
            };
            (driver, all)
        }
        "gcs" => {
            let Some(endpoint) = lookup("QUIRE_TEST_GCS_ENDPOINT") else {
                return Ok(None);
            };
            let driver = DriverConfig::Gcs {
                bucket: lookup("QUIRE_TEST_GCS_BUCKET").unwrap_or_else(|| "quire-test".into()),
                prefix: None,
                endpoint: Some(endpoint),
                // The emulator accepts any token.
                credentials: Credentials::Token("test".into()),
            };
            (driver, Capabilities::fake_gcs())
        }
        other => return Err(format!("no driver is called {other:?}")),
    };
    Ok(Some(DriverTarget {
        driver,
        capabilities,
    }))
}

/// [`driver_target`] from the process environment, for tests: `None` (the caller skips,
/// saying so) when the driver's server is not named, unless [`REQUIRE_SERVERS`] is `1`.
///
/// # Panics
/// When the environment names a server only in part, or requires servers it lacks.
pub fn driver_target_from_env(name: &str, scratch: &Path) -> Option<DriverTarget> {
    let lookup = |var: &str| std::env::var(var).ok();
    match driver_target(name, scratch, &lookup) {
        Ok(Some(target)) => Some(target),
        Ok(None) => {
            assert!(
                lookup(REQUIRE_SERVERS).as_deref() != Some("1"),
                "{REQUIRE_SERVERS}=1 but no {name} server is named \
                 (`cargo xtask servers` starts one and prints its variables)"
            );
            eprintln!("skipped: no {name} server is named (`cargo xtask servers` starts one)");
            None
        }
        Err(why) => panic!("the {name} target: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup_in(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn local_drivers_are_always_there_and_servers_only_when_named() {
        let none = lookup_in(&[]);
        for name in DRIVERS {
            let target = driver_target(name, Path::new("/scratch"), &none).unwrap();
            assert_eq!(
                target.is_some(),
                matches!(name, "memory" | "file"),
                "{name}"
            );
        }
        assert!(driver_target("ftp", Path::new("/s"), &none).is_err());
    }

    #[test]
    fn a_named_server_becomes_its_drivers_configuration() {
        let vars = lookup_in(&[
            ("QUIRE_TEST_S3_ENDPOINT", "http://127.0.0.1:1"),
            ("QUIRE_TEST_S3_BUCKET", "b"),
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("QUIRE_TEST_GCS_ENDPOINT", "http://127.0.0.1:2"),
        ]);
        let s3 = driver_target("s3", Path::new("/s"), &vars)
            .unwrap()
            .unwrap();
        assert_eq!(
            s3.driver,
            DriverConfig::S3 {
                bucket: "b".into(),
                prefix: None,
                endpoint: Some("http://127.0.0.1:1".into()),
                region: Some("us-east-1".into()),
                credentials: Credentials::S3Keys {
                    access_key_id: "id".into(),
                    secret_access_key: "secret".into(),
                },
            }
        );
        assert!(s3.capabilities.conditional_delete);
        let gcs = driver_target("gcs", Path::new("/s"), &vars)
            .unwrap()
            .unwrap();
        assert_eq!(gcs.name(), "gcs");
        assert!(!gcs.capabilities.conditional_delete);
    }

    #[test]
    fn a_server_named_in_part_is_an_error_not_a_skip() {
        let vars = lookup_in(&[("QUIRE_TEST_S3_ENDPOINT", "http://127.0.0.1:1")]);
        let error = driver_target("s3", Path::new("/s"), &vars).unwrap_err();
        assert!(error.contains("QUIRE_TEST_S3_BUCKET"), "{error}");
    }
}
