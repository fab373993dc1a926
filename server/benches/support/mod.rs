//! A real `quire serve` process for the server benchmarks: started as the README runs it
//! (no configuration: the embedded default, one world under `./data`) in a scratch folder,
//! on ephemeral ports, with the development token it prints and its resident memory.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) struct Served {
    pub child: Child,
    pub http: SocketAddr,
    pub quic: SocketAddr,
    pub token: String,
    pub cert: PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Starts `quire serve` on the embedded default and waits until it says where it
    /// listens.
    pub(crate) fn start() -> Served {
        Served::start_with(None)
    }

    /// Starts `quire serve`, with `files` (name, contents) written beside it and `--config`
    /// naming the first when there are any.
    pub(crate) fn start_with(files: Option<&[(&str, String)]>) -> Served {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let mut command = Command::new(env!("CARGO_BIN_EXE_quire"));
        command.args(["serve", "--http", "127.0.0.1:0", "--quic", "127.0.0.1:0"]);
        if let Some(files) = files {
            for (name, text) in files {
                std::fs::write(dir.path().join(name), text).expect("a scratch file");
            }
            command.arg("--config").arg(dir.path().join(files[0].0));
        }
        let development = files.is_none();
        let mut child = command
            .current_dir(dir.path())
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("quire serve starts");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let (mut http, mut quic, mut token) = (None, None, None);
        while http.is_none() || quic.is_none() || (development && token.is_none()) {
            let line = lines
                .next()
                .expect("quire serve says where it listens")
                .expect("readable stdout");
            if let Some(rest) = line.strip_prefix("serving HTTP on http://") {
                http = Some(rest.trim().parse().expect("an address"));
            } else if let Some(rest) = line.strip_prefix("serving Mark over QUIC on mark://") {
                quic = Some(rest.trim().parse().expect("an address"));
            } else if let Some((_, secret)) = line.split_once("(shown once): ") {
                token = Some(secret.trim().to_owned());
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Served {
            cert: dir.path().join("data/tls/dev-cert.pem"),
            child,
            http: http.unwrap(),
            quic: quic.unwrap(),
            token: token.unwrap_or_default(),
            _dir: dir,
        }
    }

    /// The process's resident memory and its peak so far, in bytes.
    pub(crate) fn rss(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
                .map_or(0, |kib| kib * 1024)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `q`-quantile of sorted `samples`.
pub(crate) fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at]
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The local S3 server the environment names (what `cargo xtask servers` prints).
pub(crate) struct S3 {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
}

/// The local S3 server for the `bench` benchmark; exits saying how to get one without it.
pub(crate) fn s3(bench: &str) -> S3 {
    let Ok(endpoint) = std::env::var("QUIRE_TEST_S3_ENDPOINT") else {
        eprintln!(
            "the {bench} benchmark needs the local S3 server: run it as `cargo xtask bench \
             {bench}`, or export what `cargo xtask servers` prints"
        );
        std::process::exit(2);
    };
    S3 {
        endpoint,
        bucket: std::env::var("QUIRE_TEST_S3_BUCKET").expect("QUIRE_TEST_S3_BUCKET is unset"),
        region: std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()),
    }
}

/// `[worlds.limits]` far above any offered load: a benchmark of commits measures commits, not
/// admission.
pub(crate) const LIMITS: &str = "[worlds.limits]
max_concurrent_requests = 8192
client_concurrent_requests = 8191
requests_per_second = 1000000
burst = 1000000
client_requests_per_second = 1000000
client_burst = 1000000
max_queued = 8192
queue_wait = \"10s\"
request_timeout = \"30s\"
";
