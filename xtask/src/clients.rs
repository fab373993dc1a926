//! The independent clients the end-to-end tests drive (server/tests/real_clients.rs),
//! installed idempotently on a fresh machine: the Python MCP SDK (pinned, in its own venv
//! under `.venv-servers/`), playwright-core (pinned by server/tests/web/package-lock.json,
//! installed with `npm ci`), and Debian's `chromium` (installed with apt-get when
//! /usr/bin/chromium is missing). [`install`] returns the environment the tests read.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::servers::{project_root, venv};

/// The MCP client SDK, pinned.
const MCP_SDK: &str = "mcp==2.3.0";
/// Where Debian's chromium package puts the browser.
const CHROMIUM: &str = "/usr/bin/chromium";
/// Written into node_modules after `npm ci`: the lock file it installed.
const NPM_STAMP: &str = ".quire-installed-lock.json";

/// Installs what is missing and returns the variables naming each client.
pub(crate) fn install() -> Result<Vec<(String, String)>> {
    let python = venv("mcp", &[MCP_SDK])?.join("python");
    let web = project_root().join("server").join("tests").join("web");
    npm_ci(&web)?;
    chromium()?;
    Ok(vec![
        ("QUIRE_TEST_MCP_PYTHON".into(), python.display().to_string()),
        ("QUIRE_TEST_WEB_DIR".into(), web.display().to_string()),
        ("QUIRE_TEST_CHROMIUM".into(), CHROMIUM.into()),
    ])
}

/// `npm ci` in `dir`, unless node_modules already holds what the lock file names.
fn npm_ci(dir: &Path) -> Result<()> {
    let lock = std::fs::read(dir.join("package-lock.json"))
        .with_context(|| format!("reading {}/package-lock.json", dir.display()))?;
    let stamp = dir.join("node_modules").join(NPM_STAMP);
    if std::fs::read(&stamp).ok().as_deref() == Some(lock.as_slice()) {
        return Ok(());
    }
    eprintln!("xtask: npm ci in {}", dir.display());
    run(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir))?;
    std::fs::write(&stamp, lock)?;
    Ok(())
}

/// Debian's chromium, installed with apt-get when it is missing.
fn chromium() -> Result<()> {
    if Path::new(CHROMIUM).exists() {
        return Ok(());
    }
    eprintln!("xtask: installing chromium with apt-get");
    run(Command::new("apt-get").arg("update"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "chromium"])
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    if !Path::new(CHROMIUM).exists() {
        bail!("apt-get installed chromium but {CHROMIUM} is missing");
    }
    Ok(())
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
