//! The S3 driver beyond the blob suite (in drivers.rs): the standard credential chain, how
//! the driver reports mutations whose answer never came back, and that a mutation is one
//! request. The first two need the S3 server that `cargo xtask servers` starts
//! (QUIRE_TEST_S3_* variables); without one they are skipped, unless
//! QUIRE_TEST_REQUIRE_SERVERS=1. The others run against stand-ins on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quire_blob::s3::{S3Config, S3Store, S3Timeouts};
use quire_blob::{BlobStore, Bytes, ErrorKind, Op};
use quire_blob::{Credentials, DriverConfig};
use quire_conformance::{driver_target_from_env, fresh_root};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The S3 server under test, from the environment.
struct Target {
    endpoint: String,
    bucket: String,
    access_key_id: String,
    secret_access_key: String,
    region: String,
}

fn target() -> Option<Target> {
    let scratch = std::env::temp_dir();
    let driver = driver_target_from_env("s3", &scratch)?.driver;
    let DriverConfig::S3 {
        bucket,
        endpoint: Some(endpoint),
        region: Some(region),
        credentials:
            Credentials::S3Keys {
                access_key_id,
                secret_access_key,
            },
        ..
    } = driver
    else {
        panic!("the s3 target is a local server with keys: {driver:?}");
    };
    Some(Target {
        endpoint,
        bucket,
        access_key_id,
        secret_access_key,
        region,
    })
}

impl Target {
    /// A store reaching the bucket at `endpoint` (the server itself, or a proxy before it).
    fn store_at(&self, endpoint: &str, timeouts: S3Timeouts) -> S3Store {
        let config = S3Config {
            endpoint: Some(endpoint.to_owned()),
            region: Some(self.region.clone()),
            force_path_style: true,
            timeouts,
            ..S3Config::new(&self.bucket)
        };
        S3Store::with_static_credentials(config, &self.access_key_id, &self.secret_access_key)
            .expect("valid S3 configuration")
    }

    fn store(&self) -> S3Store {
        self.store_at(&self.endpoint, S3Timeouts::default())
    }

    fn upstream(&self) -> String {
        self.endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned()
    }
}

#[tokio::test]
async fn the_standard_credential_chain_reaches_the_server() {
    let Some(target) = target() else { return };
    // Credentials and region come from AWS_* variables, as `cargo xtask servers` sets them,
    // opened as the server opens a configured world.
    let store = DriverConfig::S3 {
        bucket: target.bucket.clone(),
        prefix: None,
        endpoint: Some(target.endpoint.clone()),
        region: None,
        credentials: Credentials::Standard,
    }
    .open()
    .await
    .unwrap();
    let key = format!("{}object", fresh_root("s3-env"));
    let created = store.create(&key, Bytes::from_static(b"v")).await.unwrap();
    assert_eq!(store.head(&key).await.unwrap(), created);
}

/// What the proxy does once the server has answered a request.
#[derive(Clone, Copy)]
enum AfterAnswer {
    /// Close the client's connection without relaying a byte of the answer.
    Drop,
    /// Relay nothing and keep the connection open until the client gives up.
    Withhold,
}

/// A TCP proxy on 127.0.0.1 that forwards every request to the server and loses the answer.
struct LosingProxy {
    endpoint: String,
    connections: Arc<AtomicUsize>,
    /// How many answers the server has begun to send (each request decided).
    answered: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl LosingProxy {
    async fn start(upstream: String, after: AfterAnswer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        let (decided, answered) = tokio::sync::watch::channel(0);
        let decided = Arc::new(decided);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(relay(client, upstream.clone(), after, decided.clone()));
            }
        });
        LosingProxy {
            endpoint,
            connections,
            answered,
            task,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Waits until the server has decided `n` requests: a client that gave up before the
    /// server answered must not be checked against a store that has not applied it yet.
    async fn decided(&self, n: usize) {
        let mut answered = self.answered.clone();
        answered
            .wait_for(|seen| *seen >= n)
            .await
            .expect("the proxy outlives its relays' counter");
    }
}

impl Drop for LosingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(
    client: TcpStream,
    upstream: String,
    after: AfterAnswer,
    decided: Arc<tokio::sync::watch::Sender<usize>>,
) {
    let server = TcpStream::connect(&upstream)
        .await
        .expect("S3 server reachable");
    let (mut from_client, to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let forward =
        tokio::spawn(async move { tokio::io::copy(&mut from_client, &mut to_server).await });
    // The first byte of the answer means the server has decided the request.
    let mut first = [0u8; 1];
    let _ = from_server.read(&mut first).await;
    decided.send_modify(|n| *n += 1);
    match after {
        AfterAnswer::Drop => {
            forward.abort();
            drop(to_client);
        }
        AfterAnswer::Withhold => {
            // Returns when the client closes its side.
            let _ = forward.await;
            drop(to_client);
        }
    }
}

/// Creates, replaces and deletes through `proxy`, checking each is reported ambiguous and each
/// really landed.
async fn mutations_through(target: &Target, proxy: &LosingProxy, timeouts: S3Timeouts) {
    let lossy = target.store_at(&proxy.endpoint, timeouts);
    let direct = target.store();
    let root = fresh_root("s3-lost-answer");

    let created = format!("{root}created");
    let err = lossy
        .create(&created, Bytes::from_static(b"landed"))
        .await
        .expect_err("a create whose answer was lost cannot succeed");
    assert_eq!(
        (err.kind(), err.op(), err.key()),
        (ErrorKind::Ambiguous, Op::Create, created.as_str()),
        "{err}"
    );
    proxy.decided(1).await;
    let stored = direct.get(&created).await.expect("the create landed");
    assert_eq!(stored.data, Bytes::from_static(b"landed"));

    let replaced = format!("{root}replaced");
    let base = direct
        .create(&replaced, Bytes::from_static(b"base"))
        .await
        .unwrap();
    let err = lossy
        .replace(&replaced, &base.generation, Bytes::from_static(b"new"))
        .await
        .expect_err("a replace whose answer was lost cannot succeed");
    assert_eq!(
        (err.kind(), err.op()),
        (ErrorKind::Ambiguous, Op::Replace),
        "{err}"
    );
    proxy.decided(2).await;
    let stored = direct.get(&replaced).await.expect("the key still exists");
    assert_eq!(
        stored.data,
        Bytes::from_static(b"new"),
        "the replace landed"
    );

    let deleted = format!("{root}deleted");
    let doomed = direct
        .create(&deleted, Bytes::from_static(b"doomed"))
        .await
        .unwrap();
    let err = lossy
        .delete(&deleted, &doomed.generation)
        .await
        .expect_err("a delete whose answer was lost cannot succeed");
    assert_eq!(
        (err.kind(), err.op()),
        (ErrorKind::Ambiguous, Op::Delete),
        "{err}"
    );
    proxy.decided(3).await;
    let gone = direct.head(&deleted).await.unwrap_err();
    assert!(gone.is_not_found(), "the delete landed: {gone}");

    // One connection per mutation: the SDK did not retry, so no retried conditional request
    // could meet its own landed write and report a clean loss.
    assert_eq!(proxy.connections(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_whose_answer_is_dropped_is_ambiguous() {
    let Some(target) = target() else { return };
    let proxy = LosingProxy::start(target.upstream(), AfterAnswer::Drop).await;
    mutations_through(&target, &proxy, S3Timeouts::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_that_times_out_after_landing_is_ambiguous() {
    let Some(target) = target() else { return };
    let proxy = LosingProxy::start(target.upstream(), AfterAnswer::Withhold).await;
    let impatient = S3Timeouts {
        attempt: Duration::from_secs(2),
        ..S3Timeouts::default()
    };
    mutations_through(&target, &proxy, impatient).await;
}

/// A refused connection proves the request never left: nothing changed, so not ambiguous.
#[tokio::test]
async fn an_unreachable_store_reports_unavailable_not_ambiguous() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let config = S3Config {
        endpoint: Some(format!("http://{closed}")),
        region: Some("us-east-1".into()),
        force_path_style: true,
        read_attempts: 1,
        ..S3Config::new("quire-test")
    };
    let store = S3Store::with_static_credentials(config, "quire-test", "quire-test").unwrap();
    let err = store
        .create("k", Bytes::from_static(b"v"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.op()),
        (ErrorKind::Unavailable, Op::Create),
        "{err}"
    );
    let err = store.get("k").await.unwrap_err();
    assert_eq!(
        (err.kind(), err.op()),
        (ErrorKind::Unavailable, Op::Get),
        "{err}"
    );
}

/// A stand-in S3 server on 127.0.0.1 that answers every request `200` with a fixed ETag and
/// `date`, and records each request's first line.
async fn dated_server(date: &'static str) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(connection);
                loop {
                    let mut head = String::new();
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if head.is_empty() {
                            head = line.trim_end().to_owned();
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    log.lock().unwrap().push(head);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nETag: \"0123\"\r\nDate: {date}\r\nContent-Length: 0\r\n\r\n"
                    );
                    if reader.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (endpoint, seen)
}

/// A create or replace is one request, and reports the time the bucket answered it: S3's
/// `PutObject` answer carries no `Last-Modified`, and reading it back cost a second round trip
/// on every slot create.
#[tokio::test]
async fn a_mutation_is_one_request_dated_by_the_buckets_answer() {
    let (endpoint, seen) = dated_server("Sun, 06 Nov 1994 08:49:37 GMT").await;
    let config = S3Config {
        endpoint: Some(endpoint),
        region: Some("us-east-1".into()),
        force_path_style: true,
        read_attempts: 1,
        ..S3Config::new("quire-test")
    };
    let store = S3Store::with_static_credentials(config, "quire-test", "quire-test").unwrap();
    let answered = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);

    let created = store.create("k", Bytes::from_static(b"v")).await.unwrap();
    assert_eq!(created.modified, answered);
    assert_eq!(created.generation.as_str(), "\"0123\"");
    assert_eq!(created.size, 1);
    let replaced = store
        .replace("k", &created.generation, Bytes::from_static(b"vv"))
        .await
        .unwrap();
    assert_eq!(replaced.modified, answered);

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "one request per mutation: {seen:?}");
    assert!(seen.iter().all(|line| line.starts_with("PUT ")), "{seen:?}");
}
