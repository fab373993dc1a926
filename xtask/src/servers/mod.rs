//! Local object-store servers for tests: installed idempotently into project-local Python
//! virtual environments (pinned versions), started on 127.0.0.1 only, stopped on drop.
#![allow(clippy::disallowed_methods, reason = "waits for real server processes")]

pub(crate) mod fake_gcs;
pub(crate) mod seaweedfs;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A running server process, killed when dropped, and the environment its clients need.
#[derive(Debug)]
pub(crate) struct Server {
    pub name: &'static str,
    child: Child,
    /// Variables tests read to find the server (endpoint, bucket, credentials).
    pub env: Vec<(String, String)>,
    pub log: PathBuf,
}

impl Server {
    pub(crate) fn new(
        name: &'static str,
        child: Child,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> Self {
        Server {
            name,
            child,
            env,
            log,
        }
    }

    /// Whether the process is still alive (a server that died early has a log to show).
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); its log is {}",
                self.name,
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workspace root (xtask lives one level below it).
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits inside the workspace")
        .to_path_buf()
}

/// A Python virtual environment under `.venv-servers/<name>` holding exactly `requirements`
/// (pinned), created once and reused while the requirements are unchanged. Returns its `bin`.
pub(crate) fn venv(name: &str, requirements: &[&str]) -> Result<PathBuf> {
    let dir = project_root().join(".venv-servers").join(name);
    let bin = dir.join("bin");
    let stamp = dir.join("quire-requirements.txt");
    let wanted = requirements.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(bin);
    }
    eprintln!(
        "xtask: installing {} into {}",
        wanted.replace('\n', " "),
        dir.display()
    );
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    run(Command::new(&python)
        .args(["-m", "venv", "--clear"])
        .arg(&dir))?;
    run(Command::new(bin.join("pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(requirements))?;
    std::fs::write(&stamp, wanted)?;
    Ok(bin)
}

fn run(command: &mut Command) -> Result<()> {
    let status = command
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("starting {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub(crate) fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Polls `url` until it answers with a success status, the server dies, or `limit` passes.
pub(crate) async fn wait_until_ready(
    server: &mut Server,
    url: &str,
    limit: Duration,
) -> Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .no_proxy()
        .build()?;
    let start = Instant::now();
    loop {
        server.check_alive()?;
        if let Ok(response) = client.get(url).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!(
                "{} did not answer {url} within {limit:?}; its log is {}",
                server.name,
                server.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens a log file for a server under `dir`.
pub(crate) fn log_file(dir: &Path, name: &str) -> Result<(PathBuf, std::fs::File)> {
    let path = dir.join(format!("{name}.log"));
    let file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    Ok((path, file))
}
