//! The embedded default configuration, opened through the real wiring: a bucket store on the
//! file driver, served over HTTP on 127.0.0.1. Two servers over one bucket directory act as
//! two replicas: a write acknowledged by one is seen at once by an exact read on the other,
//! and reaches a WATCH open on the other.

use quire_server::config::{BackendConfig, Config, DriverConfig};
use reqwest::StatusCode;

struct Replica {
    base: String,
    token: String,
    _server: quire_server::Running,
}

/// Opens the embedded default with its bucket directory moved to `dir` and serves it, as
/// `quire serve` does, on ports of 127.0.0.1 the system picks.
async fn replica(dir: &std::path::Path) -> Replica {
    let mut config = Config::embedded_default();
    for world in &mut config.worlds {
        match &mut world.backend {
            BackendConfig::Bucket {
                driver: DriverConfig::File { location, .. },
                ..
            } => *location = dir.to_path_buf(),
            other => {
                panic!("the embedded default is a bucket store on the file driver, not {other:?}")
            }
        }
    }
    config.listen.http = "127.0.0.1:0".parse().unwrap();
    config.listen.quic = "127.0.0.1:0".parse().unwrap();
    // The development certificate goes beside this (absent) file, inside `dir`.
    let server = quire_server::run(config, Some(&dir.join("quire.toml")))
        .await
        .unwrap();
    Replica {
        base: format!("http://{}", server.http),
        token: server.development_tokens[0].secret.as_str().to_owned(),
        _server: server,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_of_the_default_world_share_one_bucket_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = replica(dir.path()).await;
    let second = replica(dir.path()).await;
    let client = reqwest::Client::new();

    let put = client
        .put(format!("{}/notes/hello.md", first.base))
        .bearer_auth(&first.token)
        .body("# Hello\n")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);

    let read = client
        .get(format!("{}/notes/hello.md", second.base))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(read.text().await.unwrap(), "# Hello\n");

    let update = client
        .put(format!("{}/notes/hello.md", second.base))
        .bearer_auth(&second.token)
        .header("expected-version", "1")
        .body("# Hello again\n")
        .send()
        .await
        .unwrap();
    assert_eq!(update.status(), StatusCode::CREATED);
    assert_eq!(update.headers()["mark-version"].to_str().unwrap(), "2");
    let versions = client
        .get(format!("{}/notes/hello.md?versions", first.base))
        .send()
        .await
        .unwrap();
    assert_eq!(versions.status(), StatusCode::OK);
    assert_eq!(
        versions.headers()["mark-current"].to_str().unwrap(),
        "2",
        "the first replica sees the second's write at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_one_replica_reaches_a_watch_on_the_other() {
    use quire_server::mark::{WatchBlock, WatchDecoder};

    let dir = tempfile::tempdir().unwrap();
    let first = replica(dir.path()).await;
    let second = replica(dir.path()).await;
    let client = reqwest::Client::new();

    let mut watch = client
        .get(format!("{}/notes/?watch", second.base))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    let mut decoder = WatchDecoder::new();
    let mut blocks = Vec::new();
    let guard = std::time::Duration::from_secs(60);
    let mut next_block = async || -> WatchBlock {
        loop {
            if let Some(block) = decoder.next_block().unwrap() {
                return block;
            }
            let chunk = tokio::time::timeout(guard, watch.chunk())
                .await
                .expect("a block within the guard")
                .unwrap()
                .expect("the stream stays open");
            decoder.push(&chunk);
        }
    };
    blocks.push(next_block().await);

    let put = client
        .put(format!("{}/notes/hello.md", first.base))
        .bearer_auth(&first.token)
        .body("# Hello\n")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    // An exact read makes the second replica look at the log now (without it, its watched
    // change feed polls the log within five seconds).
    let read = client
        .get(format!("{}/notes/hello.md", second.base))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    blocks.push(next_block().await);

    let WatchBlock::Control {
        cursor: Some(ack), ..
    } = &blocks[0]
    else {
        panic!("an acknowledgement first: {blocks:?}")
    };
    let WatchBlock::Event(event) = &blocks[1] else {
        panic!("then the event: {blocks:?}")
    };
    assert_eq!(
        (event.path.as_str(), event.version, event.op.as_str()),
        ("/notes/hello.md", 1, "publish")
    );
    assert_eq!(event.cursor.epoch(), ack.epoch());
    assert_eq!(event.cursor.sequence, ack.sequence + 1);
}
