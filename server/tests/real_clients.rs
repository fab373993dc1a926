//! Independent clients against a live `quire serve` (the embedded default world, on loopback
//! ports the system picks, in a scratch directory):
//! - the Python `mcp` SDK drives `quire mcp` over stdio, over both `http://` and `mark://`
//!   (`tests/mcp/drive.py`: every tool's success and failure, a merge on conflict, a
//!   resource change notification, the agent name recorded on writes);
//! - Playwright drives the web page in headless Chromium (`tests/web/drive.mjs`: browse, a
//!   document, comparing two versions, search, a change arriving live, publishing with a
//!   token, a document holding `<script>` rendered inert).
//!
//! `cargo xtask test` installs the clients (a pinned venv, `npm ci`, Debian's chromium) and
//! sets QUIRE_TEST_MCP_PYTHON, QUIRE_TEST_WEB_DIR and QUIRE_TEST_CHROMIUM; without them the
//! tests are skipped, unless QUIRE_TEST_REQUIRE_SERVERS=1.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A `quire serve` process in its own directory, killed when dropped.
struct Served {
    child: Child,
    dir: tempfile::TempDir,
    http: String,
    mark: String,
    token: String,
    cert: PathBuf,
    /// Kept open so the server never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the embedded default world, as the README's first command does, on free ports.
fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(["serve", "--http", "127.0.0.1:0", "--quic", "127.0.0.1:0"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let (mut http, mut mark, mut token, mut cert) = (None, None, None, None);
    let mut line = String::new();
    while http.is_none() {
        line.clear();
        let read = lines.read_line(&mut line).unwrap();
        assert!(
            read > 0,
            "quire serve exited early: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let line = line.trim_end();
        if let Some((_, secret)) = line.split_once("(shown once): ") {
            token = Some(secret.to_owned());
        } else if let Some(path) = line.strip_prefix("development certificate (pin it with --ca): ")
        {
            cert = Some(dir.path().join(path));
        } else if let Some(url) = line.strip_prefix("serving Mark over QUIC on ") {
            mark = Some(url.to_owned());
        } else if let Some(url) = line.strip_prefix("serving HTTP on ") {
            http = Some(url.to_owned());
        }
    }
    Served {
        child,
        dir,
        http: http.unwrap(),
        mark: mark.expect("a QUIC address"),
        token: token.expect("a development token"),
        cert: cert.expect("a development certificate"),
        _stdout: lines,
    }
}

/// The value of a client variable, or `None` to skip (refused when servers are required).
fn client_env(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                std::env::var("QUIRE_TEST_REQUIRE_SERVERS").as_deref() != Ok("1"),
                "{name} is unset but QUIRE_TEST_REQUIRE_SERVERS=1 (run `cargo xtask test`)"
            );
            eprintln!("skipped: {name} is unset (`cargo xtask test` sets it)");
            None
        }
    }
}

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// Runs a client script to its end, failing the test with its output when it fails.
fn run_client(mut command: Command, what: &str) {
    let output = command.stdin(Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{what} said:\n{stdout}");
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("all checks passed"), "{what}: {stdout}");
}

#[test]
fn the_python_mcp_sdk_drives_every_tool_over_http_and_mark() {
    let Some(python) = client_env("QUIRE_TEST_MCP_PYTHON") else {
        return;
    };
    let served = serve();
    for (transport, server) in [("http", &served.http), ("mark", &served.mark)] {
        let mut command = Command::new(&python);
        command
            .arg(tests_dir().join("mcp").join("drive.py"))
            .args(["--quire", env!("CARGO_BIN_EXE_quire")])
            .args(["--server", server])
            .args(["--token", &served.token])
            .args(["--prefix", &format!("/{transport}/")])
            .arg("--ca")
            .arg(&served.cert)
            .env("HTTP_URL", &served.http)
            .current_dir(served.dir.path());
        run_client(command, &format!("the MCP client over {transport}"));
    }
}

#[test]
fn chromium_browses_searches_compares_follows_and_publishes() {
    let (Some(web), Some(chromium)) = (
        client_env("QUIRE_TEST_WEB_DIR"),
        client_env("QUIRE_TEST_CHROMIUM"),
    ) else {
        return;
    };
    let served = serve();
    let shots = std::env::var("QUIRE_TEST_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| served.dir.path().join("screenshots"));
    std::fs::create_dir_all(&shots).unwrap();
    let node = std::env::var("QUIRE_TEST_NODE").unwrap_or_else(|_| "node".into());
    let mut command = Command::new(node);
    command
        .arg(Path::new(&web).join("drive.mjs"))
        .args(["--base", &served.http])
        .args(["--token", &served.token])
        .args(["--chromium", &chromium])
        .arg("--profile")
        .arg(served.dir.path().join("chromium-profile"))
        .arg("--screenshots")
        .arg(&shots)
        .current_dir(&web);
    run_client(command, "the web page in Chromium");
}
