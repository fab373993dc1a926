//! A real `quire serve` process, for the tests that need several: started from a
//! configuration file, ready once it prints the line naming its HTTP address, SIGKILLed when
//! dropped (a failing test leaves none behind), its stderr shown when the test fails.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

/// What a server prints before its HTTP base URL once it serves.
pub(crate) const READY_PREFIX: &str = "serving HTTP on ";

/// A running server process.
pub(crate) struct Server {
    child: Option<Child>,
    /// Its HTTP base URL (`http://127.0.0.1:PORT`).
    pub(crate) base: String,
    /// Kept open so the process never writes to a closed pipe.
    _stdout: Option<BufReader<ChildStdout>>,
    log: PathBuf,
}

/// A process started but not yet known to serve.
pub(crate) struct Starting {
    server: Server,
    stdout: ChildStdout,
    name: String,
}

impl Server {
    /// Starts `quire serve --config <config>` in `dir`, its stderr in `dir/<name>.log`;
    /// [`Starting::ready`] waits for it to serve (so several can start at once).
    pub(crate) fn spawn(dir: &Path, config: &Path, name: &str) -> Starting {
        let log = dir.join(format!("{name}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_quire"))
            .arg("serve")
            .arg("--config")
            .arg(config)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        Starting {
            server: Server {
                child: Some(child),
                base: String::new(),
                _stdout: None,
                log,
            },
            stdout,
            name: name.to_owned(),
        }
    }

    /// [`spawn`](Self::spawn), then wait for it to serve.
    pub(crate) fn start(dir: &Path, config: &Path, name: &str) -> Server {
        Server::spawn(dir, config, name).ready()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGKILL, and wait for the process to be gone.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- {} ---\n{log}", self.log.display());
        }
    }
}

impl Starting {
    /// Waits for the line naming its HTTP address; panics with its log if it exits first.
    pub(crate) fn ready(self) -> Server {
        let Starting {
            mut server,
            stdout,
            name,
        } = self;
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            let read = lines.read_line(&mut line).unwrap();
            assert!(
                read > 0,
                "{name} exited before it served: {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
            if let Some(base) = line.trim_end().strip_prefix(READY_PREFIX) {
                server.base = base.to_owned();
                break;
            }
        }
        server._stdout = Some(lines);
        server
    }
}
