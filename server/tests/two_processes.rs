//! Two `quire serve` processes serving one world from one bucket directory (a bucket store on
//! the file driver, same world id), over HTTP on loopback ports the system picks. A write on
//! one is seen by an exact read on the other at once; writes on both converge; a server
//! killed with SIGKILL in the middle of a stream of writes loses none it acknowledged.

use std::path::PathBuf;

use quire_server::auth::{Operation, TokenEntrySpec, TokenSecret};
use reqwest::StatusCode;
use tokio::sync::mpsc;

mod common;

use common::process::Server;

const WORLD_ID: &str = "5d2b9c1e-7a3f-4b6d-8e0c-1f9a2b3c4d5e";

/// The shared setup: one bucket directory, a tokens file and a configuration both servers use.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    token: String,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let secret = TokenSecret::generate().unwrap();
        let entry = TokenEntrySpec {
            hash: secret.hash().to_string(),
            operations: vec![Operation::Publish],
            paths: vec!["/**".to_owned()],
            expires: None,
        };
        std::fs::write(dir.path().join("tokens.toml"), entry.to_toml("writer")).unwrap();
        let config = dir.path().join("quire.toml");
        std::fs::write(
            &config,
            format!(
                r#"[listen]
http = "127.0.0.1:0"
quic = "127.0.0.1:0"

[[worlds]]
name = "shared"

[worlds.backend]
kind = "bucket"
driver = "file"
location = "bucket"
world_id = "{WORLD_ID}"

[worlds.auth]
tokens_file = "tokens.toml"
"#
            ),
        )
        .unwrap();
        Setup {
            dir,
            config,
            token: secret.as_str().to_owned(),
        }
    }

    /// Starts a server and waits for the line naming its HTTP address.
    fn start(&self, name: &str) -> Server {
        Server::start(self.dir.path(), &self.config, name)
    }
}

/// PUBLISH without an expected version: the status, and the answer's text.
async fn put(
    client: &reqwest::Client,
    token: &str,
    url: &str,
    body: String,
) -> (StatusCode, String) {
    let response = client
        .put(url)
        .bearer_auth(token)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let headers = format!("{:?}", response.headers());
    (
        status,
        format!("{headers} {}", response.text().await.unwrap()),
    )
}

/// The body and version a server shows for `path`.
async fn read(client: &reqwest::Client, server: &Server, path: &str) -> (StatusCode, String, u64) {
    let response = client.get(server.url(path)).send().await.unwrap();
    let status = response.status();
    let version = response
        .headers()
        .get("mark-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (status, response.text().await.unwrap(), version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_one_bucket_directory() {
    let setup = Setup::new();
    let first = setup.start("first");
    let second = setup.start("second");
    assert_ne!(first.base, second.base);
    let client = reqwest::Client::new();
    let token = setup.token.as_str();

    // A write on one is seen by an exact read on the other at once.
    let (created, answer) = put(
        &client,
        token,
        &first.url("/notes/hello.md"),
        "# Hello\n".into(),
    )
    .await;
    assert_eq!(created, StatusCode::CREATED, "{answer}");
    let (status, body, version) = read(&client, &second, "/notes/hello.md").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((body.as_str(), version), ("# Hello\n", 1));

    // Writes on both, interleaved and at once, converge: each server's own documents and a
    // document both write to (every landed write is one version, seen alike by both).
    const EACH: usize = 12;
    let writer = |server: &Server, side: &'static str| {
        let client = client.clone();
        let token = token.to_owned();
        let base = server.base.clone();
        async move {
            for i in 0..EACH {
                let own = format!("{base}/{side}/{i}.md");
                let (status, answer) = put(&client, &token, &own, format!("# {side} {i}\n")).await;
                assert_eq!(status, StatusCode::CREATED, "{own}: {answer}");
                // A blind write that raced another one on the same path may be refused
                // (exactly as on one server); the writer tries again until it lands.
                let shared = format!("{base}/shared.md");
                let mut attempts = 0;
                loop {
                    let (status, answer) =
                        put(&client, &token, &shared, format!("# {side} wrote {i}\n")).await;
                    attempts += 1;
                    if status == StatusCode::CREATED {
                        break;
                    }
                    assert_eq!(status, StatusCode::CONFLICT, "{shared}: {answer}");
                    assert!(attempts < 100, "{shared} never landed: {answer}");
                }
            }
        }
    };
    tokio::join!(writer(&first, "a"), writer(&second, "b"));
    for side in ["a", "b"] {
        for i in 0..EACH {
            let path = format!("/{side}/{i}.md");
            let on_first = read(&client, &first, &path).await;
            let on_second = read(&client, &second, &path).await;
            assert_eq!(on_first.0, StatusCode::OK, "{path}");
            assert_eq!(on_first.1, format!("# {side} {i}\n"));
            assert_eq!(on_first, on_second, "{path}");
        }
    }
    let shared_first = read(&client, &first, "/shared.md").await;
    let shared_second = read(&client, &second, "/shared.md").await;
    assert_eq!(shared_first, shared_second);
    assert_eq!(
        shared_first.2,
        2 * EACH as u64,
        "every write made one version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_loses_no_acknowledged_write() {
    let setup = Setup::new();
    let mut victim = setup.start("victim");
    let survivor = setup.start("survivor");
    let client = reqwest::Client::new();

    // A stream of writes to the victim; each acknowledged one is reported at once.
    let (acked_tx, mut acked_rx) = mpsc::unbounded_channel::<usize>();
    let stream = {
        let client = client.clone();
        let token = setup.token.clone();
        let base = victim.base.clone();
        tokio::spawn(async move {
            for i in 0.. {
                let sent = client
                    .put(format!("{base}/stream/{i}.md"))
                    .bearer_auth(&token)
                    .body(format!("# entry {i}\n"))
                    .send()
                    .await;
                match sent {
                    Ok(response) if response.status() == StatusCode::CREATED => {
                        let _ = acked_tx.send(i);
                    }
                    // The server is gone (connection refused or reset): the stream ends.
                    _ => return i,
                }
            }
            unreachable!()
        })
    };
    let mut acknowledged = Vec::new();
    while acknowledged.len() < 20 {
        acknowledged.push(acked_rx.recv().await.unwrap());
    }
    victim.kill();
    let stopped_at = stream.await.unwrap();
    while let Ok(i) = acked_rx.try_recv() {
        acknowledged.push(i);
    }
    assert!(acknowledged.len() >= 20);
    assert_eq!(acknowledged, (0..acknowledged.len()).collect::<Vec<_>>());
    assert!(stopped_at >= acknowledged.len());

    // Every acknowledged write is there, on the survivor at once and on the restarted victim.
    let restarted = setup.start("victim-again");
    for i in &acknowledged {
        let path = format!("/stream/{i}.md");
        for server in [&survivor, &restarted] {
            let (status, body, version) = read(&client, server, &path).await;
            assert_eq!(status, StatusCode::OK, "{path} on {}", server.base);
            assert_eq!((body, version), (format!("# entry {i}\n"), 1), "{path}");
        }
    }

    // The restarted server takes writes again, and the survivor sees them.
    let after = put(
        &client,
        &setup.token,
        &restarted.url("/stream/after.md"),
        "# after\n".into(),
    )
    .await;
    assert_eq!(after.0, StatusCode::CREATED, "{}", after.1);
    let (status, body, _) = read(&client, &survivor, "/stream/after.md").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "# after\n"));
}
