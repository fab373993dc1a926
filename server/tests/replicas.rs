//! Three real `quire serve` processes on one bucket (the file driver; and S3 when the local
//! S3 server of `cargo xtask servers` is in the environment, `QUIRE_TEST_S3_*`), over HTTP:
//! replicas started at once on an empty bucket serve one world; a replica that was only
//! behind judges writes at the tip (a stale republish is a change, a stale blind PUT is no
//! conflict); and concurrent writers, with one replica SIGKILLed mid-stream and restarted,
//! lose nothing: every acknowledged write reads back exactly from every process at the
//! version it was answered with, versions are contiguous, no version holds a refused write,
//! and `quire world verify` passes.
#![allow(
    clippy::disallowed_methods,
    reason = "real processes over real sockets: real time"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use quire_backend::{ChangeSource, Follower, Store};
use quire_server::auth::{Operation, TokenEntrySpec, TokenSecret};
use reqwest::StatusCode;

mod common;

use common::process::{Server, Starting};

/// Where the world's bucket is.
#[derive(Clone, Debug)]
enum Driver {
    File,
    S3 {
        endpoint: String,
        bucket: String,
        region: String,
    },
}

impl Driver {
    /// The local S3 server from the environment; `None` (the case is skipped) without one,
    /// unless `QUIRE_TEST_REQUIRE_SERVERS=1`.
    fn s3() -> Option<Driver> {
        let Ok(endpoint) = std::env::var("QUIRE_TEST_S3_ENDPOINT") else {
            assert!(
                std::env::var("QUIRE_TEST_REQUIRE_SERVERS").as_deref() != Ok("1"),
                "QUIRE_TEST_S3_ENDPOINT is unset but QUIRE_TEST_REQUIRE_SERVERS=1"
            );
            eprintln!(
                "skipped: QUIRE_TEST_S3_ENDPOINT is unset (`cargo xtask servers` starts one)"
            );
            return None;
        };
        Some(Driver::S3 {
            endpoint,
            bucket: std::env::var("QUIRE_TEST_S3_BUCKET").expect("QUIRE_TEST_S3_BUCKET is unset"),
            region: std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()),
        })
    }

    fn backend(&self, name: &str) -> String {
        match self {
            Driver::File => "driver = \"file\"\nlocation = \"bucket\"\n".into(),
            Driver::S3 {
                endpoint,
                bucket,
                region,
            } => {
                // A fresh, empty prefix per run.
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos();
                format!(
                    "driver = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"replicas/{name}-{nanos}-{}\"\nendpoint = \"{endpoint}\"\nregion = \"{region}\"\n",
                    std::process::id()
                )
            }
        }
    }
}

/// One bucket, a tokens file and a configuration every process uses (no world id: the
/// replicas agree on the world through the bucket alone).
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    token: String,
}

impl Setup {
    fn new(driver: &Driver, name: &str) -> Setup {
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
                "[listen]\nhttp = \"127.0.0.1:0\"\nquic = \"127.0.0.1:0\"\n\n[[worlds]]\nname = \"shared\"\n\n[worlds.backend]\nkind = \"bucket\"\n{}\n[worlds.auth]\ntokens_file = \"tokens.toml\"\n",
                driver.backend(name)
            ),
        )
        .unwrap();
        Setup {
            dir,
            config,
            token: secret.as_str().to_owned(),
        }
    }

    /// Starts a process; [`Starting::ready`] waits for it to serve.
    fn spawn(&self, name: &str) -> Starting {
        Server::spawn(self.dir.path(), &self.config, name)
    }

    fn start(&self, name: &str) -> Server {
        self.spawn(name).ready()
    }

    /// `quire world verify` on the bucket: its exit status and output.
    fn verify(&self) -> (bool, String) {
        let output = Command::new(env!("CARGO_BIN_EXE_quire"))
            .args(["world", "verify", "--config"])
            .arg(&self.config)
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    }
}

/// The answer to a PUT: its status and the version it names (0 when none).
#[derive(Debug)]
struct Put {
    status: StatusCode,
    version: u64,
    text: String,
}

fn version_of(response: &reqwest::Response) -> u64 {
    response
        .headers()
        .get("mark-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// PUBLISH `body` to `url`, blind or with an expected version; `Err` when the process gave
/// no answer (the outcome is unknown).
async fn put(
    client: &reqwest::Client,
    token: &str,
    url: &str,
    body: &str,
    expected: Option<u64>,
) -> Result<Put, reqwest::Error> {
    let mut request = client.put(url).bearer_auth(token).body(body.to_owned());
    if let Some(expected) = expected {
        request = request.header("expected-version", expected.to_string());
    }
    let response = request.send().await?;
    let status = response.status();
    let version = version_of(&response);
    let text = response.text().await?;
    Ok(Put {
        status,
        version,
        text,
    })
}

/// The status, body and version a process shows for `path` (a version path: `/a.md/v2`).
async fn read(client: &reqwest::Client, base: &str, path: &str) -> (StatusCode, String, u64) {
    let response = client.get(format!("{base}{path}")).send().await.unwrap();
    let status = response.status();
    let version = version_of(&response);
    (status, response.text().await.unwrap(), version)
}

async fn stale_replicas_judge_writes_at_the_tip(driver: Driver) {
    let setup = Setup::new(&driver, "stale");
    let (a, b) = (setup.spawn("a"), setup.spawn("b"));
    let (a, b) = (a.ready(), b.ready());
    let client = reqwest::Client::new();
    let token = setup.token.as_str();
    let put_on = |server: &Server, path: &str, body: &str| {
        let url = server.url(path);
        let client = client.clone();
        let body = body.to_owned();
        async move { put(&client, token, &url, &body, None).await.unwrap() }
    };

    // A publishes X; B reads it and publishes Y; A, idle since, receives X again.
    let first = put_on(&a, "/a.md", "X\n").await;
    assert_eq!((first.status, first.version), (StatusCode::CREATED, 1));
    assert_eq!(read(&client, &b.base, "/a.md").await.1, "X\n");
    let over = put_on(&b, "/a.md", "Y\n").await;
    assert_eq!((over.status, over.version), (StatusCode::CREATED, 2));
    let again = put_on(&a, "/a.md", "X\n").await;
    assert_eq!(
        (again.status, again.version),
        (StatusCode::CREATED, 3),
        "a stale republish was answered from a stale tip: {}",
        again.text
    );
    for server in [&a, &b] {
        assert_eq!(
            read(&client, &server.base, "/a.md").await,
            (StatusCode::OK, "X\n".into(), 3)
        );
    }

    // B writes /c.md twice; A, which never saw it, overwrites it blind: no race, no 409.
    for body in ["c1\n", "c2\n"] {
        assert_eq!(put_on(&b, "/c.md", body).await.status, StatusCode::CREATED);
    }
    let blind = put_on(&a, "/c.md", "c3\n").await;
    assert_eq!(
        (blind.status, blind.version),
        (StatusCode::CREATED, 3),
        "a stale blind PUT: {}",
        blind.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_replicas_judge_writes_at_the_tip_on_the_file_driver() {
    stale_replicas_judge_writes_at_the_tip(Driver::File).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_replicas_judge_writes_at_the_tip_on_s3() {
    if let Some(driver) = Driver::s3() {
        stale_replicas_judge_writes_at_the_tip(driver).await;
    }
}

/// What writers learned, per path: bodies acknowledged at a version, bodies refused, and
/// bodies whose outcome is unknown (the process died holding them).
#[derive(Default)]
struct Ledger {
    acked: BTreeMap<String, Vec<(String, u64)>>,
    refused: BTreeMap<String, BTreeSet<String>>,
    unknown: BTreeMap<String, BTreeSet<String>>,
}

impl Ledger {
    fn paths(&self) -> BTreeSet<String> {
        self.acked
            .keys()
            .chain(self.refused.keys())
            .chain(self.unknown.keys())
            .cloned()
            .collect()
    }
}

/// One writer on one process: per round a private create, its identical republish, a blind
/// write to a shared path, an expected-version write to another shared path (at the version
/// this process reads), and an identical republish of its last shared body. Stops at the
/// first request the process does not answer.
async fn writer(
    client: reqwest::Client,
    token: String,
    base: String,
    side: String,
    rounds: usize,
    ledger: Arc<Mutex<Ledger>>,
    acks: tokio::sync::watch::Sender<usize>,
) {
    let mut last_shared: Option<String> = None;
    for i in 0..rounds {
        let private = format!("/private/{side}/{i}.md");
        let body = format!("{side} private {i}\n");
        let mut steps: Vec<(String, String, Option<u64>)> = vec![
            (private.clone(), body.clone(), None),
            (private, body, None),
            (
                "/shared/blind.md".into(),
                format!("{side} blind {i}\n"),
                None,
            ),
        ];
        // The process may be the one being killed: an unanswered read ends this writer too.
        let Ok(response) = client.get(format!("{base}/shared/cas.md")).send().await else {
            return;
        };
        let current = if response.status() == StatusCode::OK {
            version_of(&response)
        } else {
            0
        };
        steps.push((
            "/shared/cas.md".into(),
            format!("{side} cas {i}\n"),
            Some(current),
        ));
        if let Some(body) = &last_shared {
            steps.push(("/shared/blind.md".into(), body.clone(), None));
        }
        for (path, body, expected) in steps {
            let answer = put(&client, &token, &format!("{base}{path}"), &body, expected).await;
            let mut ledger = ledger.lock().unwrap();
            let Ok(answer) = answer else {
                ledger.unknown.entry(path).or_default().insert(body);
                return;
            };
            match answer.status {
                StatusCode::CREATED | StatusCode::OK => {
                    assert!(answer.version > 0, "{path}: {answer:?}");
                    if path == "/shared/blind.md" {
                        last_shared = Some(body.clone());
                    }
                    ledger
                        .acked
                        .entry(path)
                        .or_default()
                        .push((body, answer.version));
                    acks.send_modify(|n| *n += 1);
                }
                StatusCode::CONFLICT => {
                    ledger.refused.entry(path).or_default().insert(body);
                }
                // A process being killed may answer a request it can no longer finish.
                status if status.is_server_error() => {
                    ledger.unknown.entry(path).or_default().insert(body);
                }
                _ => panic!("{path} on {base}: {answer:?}"),
            }
        }
    }
}

async fn replicas_under_concurrent_writers_and_a_kill_lose_nothing(driver: Driver) {
    const ROUNDS: usize = 8;
    let setup = Setup::new(&driver, "writers");
    // Three replicas started at once on an empty bucket.
    let starting: Vec<Starting> = ["r0", "r1", "r2"].iter().map(|n| setup.spawn(n)).collect();
    let mut servers: Vec<Server> = starting.into_iter().map(Starting::ready).collect();
    let client = reqwest::Client::new();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let spawn_writer = |base: &str, side: &str, rounds: usize| {
        let (acks, acked) = tokio::sync::watch::channel(0);
        let task = tokio::spawn(writer(
            client.clone(),
            setup.token.clone(),
            base.to_owned(),
            side.to_owned(),
            rounds,
            ledger.clone(),
            acks,
        ));
        (task, acked)
    };
    let (writers, mut acked): (Vec<_>, Vec<_>) = servers
        .iter()
        .enumerate()
        .map(|(i, s)| spawn_writer(&s.base, &format!("w{i}"), ROUNDS))
        .unzip();
    // SIGKILL the middle replica once its writer is under way, then restart it.
    acked[1].wait_for(|n| *n >= 8).await.unwrap();
    servers[1].kill();
    servers[1] = setup.start("r1-again");
    let (late, _) = spawn_writer(&servers[1].base, "w1-again", ROUNDS / 2);
    for writer in writers {
        writer.await.unwrap();
    }
    late.await.unwrap();

    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    for path in ledger.paths() {
        // Every process shows the same versions 1..=current, each readable.
        let mut shown: Option<Vec<String>> = None;
        for server in &servers {
            let (status, _, current) = read(&client, &server.base, &path).await;
            // A path only ever written by a request whose outcome is unknown may be absent.
            let absent = status == StatusCode::NOT_FOUND && !ledger.acked.contains_key(&path);
            assert!(
                status == StatusCode::OK || absent,
                "{path} on {}",
                server.base
            );
            let mut bodies = Vec::new();
            for v in 1..=current {
                let (status, body, version) =
                    read(&client, &server.base, &format!("{path}/v{v}")).await;
                assert_eq!((status, version), (StatusCode::OK, v), "{path} v{v}");
                bodies.push(body);
            }
            match &shown {
                None => shown = Some(bodies),
                Some(first) => assert_eq!(first, &bodies, "{path} differs on {}", server.base),
            }
        }
        let bodies = shown.unwrap();
        // Every acknowledged write is there at the version it was answered with.
        for (body, version) in ledger.acked.get(&path).into_iter().flatten() {
            assert_eq!(
                bodies.get(*version as usize - 1),
                Some(body),
                "{path}: acknowledged {body:?} at v{version}"
            );
        }
        // Every version holds a write that was acknowledged or whose outcome is unknown.
        let acked: BTreeSet<&String> = ledger
            .acked
            .get(&path)
            .into_iter()
            .flatten()
            .map(|(b, _)| b)
            .collect();
        let unknown = ledger.unknown.get(&path);
        for (i, body) in bodies.iter().enumerate() {
            let refused = ledger.refused.get(&path).is_some_and(|r| r.contains(body));
            assert!(
                !refused || acked.contains(body),
                "{path} v{} holds a refused write {body:?}",
                i + 1
            );
            assert!(
                acked.contains(body) || unknown.is_some_and(|u| u.contains(body)),
                "{path} v{} holds {body:?}, never written",
                i + 1
            );
        }
    }
    drop(ledger);
    for server in &mut servers {
        server.kill();
    }
    let (clean, report) = setup.verify();
    assert!(clean, "world verify: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_under_concurrent_writers_and_a_kill_lose_nothing_on_the_file_driver() {
    replicas_under_concurrent_writers_and_a_kill_lose_nothing(Driver::File).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_under_concurrent_writers_and_a_kill_lose_nothing_on_s3() {
    if let Some(driver) = Driver::s3() {
        replicas_under_concurrent_writers_and_a_kill_lose_nothing(driver).await;
    }
}

/// A store that records the peer hints it is given.
#[derive(Debug)]
struct Hinted {
    inner: quire_backend::bucket::BucketStore,
    hints: Mutex<Vec<u64>>,
}

#[async_trait::async_trait]
impl Store for Hinted {
    async fn open_view(
        &self,
        ctx: &quire_backend::Ctx,
    ) -> quire_backend::Result<Box<dyn quire_backend::ReadView>> {
        self.inner.open_view(ctx).await
    }
    async fn publish(
        &self,
        ctx: &quire_backend::Ctx,
        request: quire_backend::WriteRequest,
    ) -> quire_backend::Result<quire_backend::Document> {
        self.inner.publish(ctx, request).await
    }
    async fn append(
        &self,
        ctx: &quire_backend::Ctx,
        request: quire_backend::WriteRequest,
    ) -> quire_backend::Result<quire_backend::Document> {
        self.inner.append(ctx, request).await
    }
    async fn set_archived(
        &self,
        ctx: &quire_backend::Ctx,
        request: quire_backend::ArchiveRequest,
    ) -> quire_backend::Result<quire_backend::ArchiveResult> {
        self.inner.set_archived(ctx, request).await
    }
    async fn close(&self) {
        self.inner.close().await;
    }
}

impl ChangeSource for Hinted {
    fn changes(&self) -> Option<Arc<quire_backend::ChangeHub>> {
        self.inner.changes()
    }
}

impl Follower for Hinted {
    fn follow(&self, sequence: u64) {
        self.hints.lock().unwrap().push(sequence);
        self.inner.follow(sequence);
    }
}

#[tokio::test]
async fn a_watch_cursor_beyond_the_head_probes_the_log_and_is_no_peer_hint() {
    use quire_backend::bucket::{BucketOptions, BucketStore};
    use quire_backend::{Ctx, WriteRequest};
    let blobs: Arc<dyn quire_blob::BlobStore> = Arc::new(quire_blob::memory::MemoryStore::new());
    let options = |ring| BucketOptions {
        compaction: None,
        change_ring: ring,
        ..BucketOptions::default()
    };
    let watched = BucketStore::open(blobs.clone(), options(64)).await.unwrap();
    let peer = BucketStore::open(blobs, options(0)).await.unwrap();
    for i in 0..3 {
        let request = WriteRequest::new(format!("/p/{i}.md"), "x".to_owned());
        peer.publish(&Ctx::new(), request).await.unwrap();
    }
    let head = watched.changes().unwrap().head();
    let store = Arc::new(Hinted {
        inner: watched.clone(),
        hints: Mutex::default(),
    });
    let world = Arc::new(quire_server::handlers::World::new(
        "w",
        store.clone(),
        quire_server::auth::Authorizer::new(None),
    ));
    // A client saw the peer's commits elsewhere and resumes here beyond this head.
    let since = format!("{}:{}", watched.world(), head + 3);
    let request = quire_server::mark::Request::new(quire_server::mark::Verb::Watch, "/")
        .with_meta("since", since);
    let opened = quire_server::handlers::open_watch(
        world,
        request,
        &quire_server::handlers::WatchContext::default(),
    )
    .await;
    assert!(opened.is_ok(), "{:?}", opened.err());
    assert!(
        store.hints.lock().unwrap().is_empty(),
        "the cursor was taken for a hint"
    );
    assert!(
        watched.changes().unwrap().head() >= head + 3,
        "the log was not probed"
    );
    watched.close().await;
    peer.close().await;
}
