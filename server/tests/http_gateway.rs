//! The HTTP gateway over real sockets on 127.0.0.1: every verb's success and error paths,
//! auth denial, rate limiting, a world served from a store that is not a bucket store, and
//! WATCH streams (events, resume, resync, read auth, limits, drain, and a write on one
//! replica of a bucket world seen by a watch on the other).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use quire_backend::file::FileOptions;
use quire_server::auth::{
    Authorizer, Operation, PathPattern, Token, TokenHash, TokenRegistry, TokenStore,
};
use quire_server::config::Config;
use quire_server::handlers::World;
use quire_server::limits::LimitSettings;
use quire_server::mark::{Status, WatchBlock, WatchDecoder};
use quire_server::worlds::Worlds;
use quire_server::{http, wiring};
use reqwest::StatusCode;

mod common;

use common::{READER, WRITER};

struct Server {
    base: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

async fn start(limits: LimitSettings) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let options = FileOptions {
        change_ring: 4,
        ..FileOptions::default()
    };
    let auth = common::writer_and_reader(&["/docs/**", "/private/**"]);
    let world = common::file_world("test", dir.path(), options, auth, limits).await;
    serve(Worlds::from_worlds([world]), dir).await
}

async fn serve(worlds: Worlds, dir: tempfile::TempDir) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(http::serve(listener, Arc::new(worlds), async {
        let _ = stopped.await;
    }));
    Server {
        base,
        client: reqwest::Client::new(),
        _dir: dir,
        _stop: stop,
    }
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .map_or("", |v| v.to_str().unwrap())
}

/// A body LOOKUP answers ranked sections with snippets (asking again while the section index
/// of the request's snapshot is not ready, when the server answers from the catalog).
#[tokio::test]
async fn body_lookup_over_http() {
    let server = start(LimitSettings::default()).await;
    let c = &server.client;
    let put = c
        .put(server.url("/docs/notes.md"))
        .bearer_auth(WRITER)
        .header("meta-title", "Notes")
        .body("# Notes\n\nintro\n\n## Setup\n\nraise the UDP buffer\n")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let mut answered = None;
    for _ in 0..30 {
        let found = c
            .get(server.url("/?lookup&query=udp%20buffer&match=body"))
            .send()
            .await
            .unwrap();
        assert_eq!(found.status(), StatusCode::OK);
        if header(&found, "mark-match") == "body" {
            answered = Some(found);
            break;
        }
        assert_eq!(header(&found, "mark-match"), "catalog");
    }
    let found = answered.expect("a body answer");
    assert_eq!(header(&found, "mark-matches"), "1");
    let text = found.text().await.unwrap();
    assert!(
        text.contains("| Path | Importance | Title | Tags | Snippet |"),
        "{text}"
    );
    assert!(
        text.contains(
            "| /docs/notes.md#setup | 0.50 | Notes › Setup |  | raise the **UDP** **buffer** |"
        ),
        "{text}"
    );
    let catalog = c
        .get(server.url("/?lookup&query=udp&match=catalog"))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&catalog, "mark-match"), "catalog");
    assert_eq!(header(&catalog, "mark-matches"), "0");
    let unknown = c
        .get(server.url("/?lookup&query=udp&match=fuzzy"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn every_verb_over_http() {
    let server = start(LimitSettings::default()).await;
    let c = &server.client;
    let put = c
        .put(server.url("/docs/a.md"))
        .bearer_auth(WRITER)
        .header("meta-tags", "alpha,wire")
        .body("# Alpha\n")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    assert_eq!(header(&put, "mark-version"), "1");

    let create_only = c
        .put(server.url("/docs/a.md"))
        .bearer_auth(WRITER)
        .header("if-none-match", "*")
        .body("other")
        .send()
        .await
        .unwrap();
    assert_eq!(create_only.status(), StatusCode::CONFLICT);
    assert_eq!(header(&create_only, "mark-server-version"), "1");
    assert_eq!(header(&create_only, "mark-your-version"), "0");

    let get = c.get(server.url("/docs/a.md")).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::OK);
    let etag = header(&get, "etag").to_owned();
    assert_eq!(get.text().await.unwrap(), "# Alpha\n");
    let cached = c
        .get(server.url("/docs/a.md"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);

    let stale = c
        .post(server.url("/docs/a.md?append"))
        .bearer_auth(WRITER)
        .header("if-match", "\"7\"")
        .body("more")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    let append = c
        .post(server.url("/docs/a.md?append"))
        .bearer_auth(WRITER)
        .header(http::EXPECTED_VERSION_HEADER, "1")
        .body("more")
        .send()
        .await
        .unwrap();
    assert_eq!(append.status(), StatusCode::CREATED);
    let pinned = c.get(server.url("/docs/a.md/v1")).send().await.unwrap();
    assert_eq!(header(&pinned, "mark-current-version"), "2");

    let versions = c
        .get(server.url("/docs/a.md?versions"))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&versions, "mark-total"), "2");
    assert_eq!(header(&versions, "mark-chain-valid"), "true");

    let list = c
        .get(server.url("/docs?list&page-size=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);
    assert_eq!(header(&list, "mark-complete"), "true");
    let bad_page = c
        .get(server.url("/docs?list&page-size=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_page.status(), StatusCode::BAD_REQUEST);

    let lookup = c
        .get(server.url("/?lookup&query=alpha&filter=tag%3Dwire"))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&lookup, "mark-matches"), "1");
    assert!(lookup.text().await.unwrap().contains("/docs/a.md"));
    let no_query = c.get(server.url("/?lookup")).send().await.unwrap();
    assert_eq!(no_query.status(), StatusCode::BAD_REQUEST);

    let archive = c
        .post(server.url("/docs/a.md?archive"))
        .bearer_auth(WRITER)
        .send()
        .await
        .unwrap();
    assert_eq!(header(&archive, "mark-archived"), "true");
    let gone = c.get(server.url("/docs/a.md")).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::GONE);
    let missing = c.get(server.url("/docs/none.md")).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let missing_archive = c
        .post(server.url("/docs/none.md?archive"))
        .bearer_auth(WRITER)
        .send()
        .await
        .unwrap();
    assert_eq!(missing_archive.status(), StatusCode::NOT_FOUND);

    let too_big = c
        .put(server.url("/docs/big.md"))
        .bearer_auth(WRITER)
        .body(vec![b'a'; quire_server::mark::MAX_BODY + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE);

    assert_eq!(
        c.get(server.url("/livez")).send().await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        c.get(server.url("/readyz")).send().await.unwrap().status(),
        StatusCode::OK
    );
    let metrics = c
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("quire_requests_total{"), "{metrics}");
    assert!(metrics.contains("quire_request_duration_seconds_bucket"));
}

#[tokio::test]
async fn auth_denials() {
    let server = start(LimitSettings::default()).await;
    let c = &server.client;
    let anonymous = c
        .put(server.url("/docs/a.md"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&anonymous, "www-authenticate"), "Bearer");
    let unknown = c
        .put(server.url("/docs/a.md"))
        .bearer_auth("quire_nobody")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::UNAUTHORIZED);
    let outside = c
        .put(server.url("/other/a.md"))
        .bearer_auth(WRITER)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), StatusCode::FORBIDDEN);
    let protected = c.get(server.url("/private/x.md")).send().await.unwrap();
    assert_eq!(protected.status(), StatusCode::UNAUTHORIZED);
    let wrong_grant = c
        .get(server.url("/private/x.md"))
        .bearer_auth(WRITER)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_grant.status(), StatusCode::FORBIDDEN);
    let granted = c
        .get(server.url("/private/x.md"))
        .bearer_auth(READER)
        .send()
        .await
        .unwrap();
    assert_eq!(granted.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn rate_limited_with_retry_after() {
    let limits = LimitSettings {
        requests_per_second: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(1).unwrap(),
        queue_wait: Duration::ZERO,
        ..LimitSettings::default()
    };
    let server = start(limits).await;
    let c = &server.client;
    let first = c.get(server.url("/docs/a.md")).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::NOT_FOUND);
    let second = c.get(server.url("/docs/a.md")).send().await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&second, "retry-after"), "1");
}

#[tokio::test]
async fn world_manager_serves_a_file_store_world() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[worlds]]\nname = \"notes\"\nauthorities = [\"notes.example\"]\n\n[worlds.backend]\nkind = \"file\"\nroot = {:?}\n\n[worlds.auth]\ndevelopment_token = true\n",
        dir.path().join("notes")
    );
    let config = Config::parse(&text, "test").unwrap();
    let (worlds, tokens) = Worlds::open(&config, &wiring::Backends).await.unwrap();
    assert_eq!(tokens.len(), 1);
    let secret = tokens[0].secret.as_str().to_owned();
    let server = serve(worlds, dir).await;
    let c = &server.client;
    let put = c
        .put(server.url("/a.md"))
        .header("host", "notes.example")
        .bearer_auth(&secret)
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let get = c.get(server.url("/a.md")).send().await.unwrap();
    assert_eq!(get.text().await.unwrap(), "hello");
}

/// The value of the sample `name{labels}` in a Prometheus text exposition, where `labels`
/// must all appear in the sample's label set.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, label_text) = series.split_once('{').unwrap_or((series, "}"));
        let label_text = label_text.strip_suffix('}')?;
        let has_all = labels.iter().all(|(k, v)| {
            label_text
                .split(',')
                .any(|pair| pair == format!("{k}=\"{v}\""))
        });
        (metric == name && has_all).then(|| value.parse().ok())?
    })
}

#[tokio::test]
async fn a_bucket_world_enforces_its_seeded_policy_and_reports_store_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("policy.md");
    std::fs::write(
        &seed,
        "---\nstrictness: block\nrequire_tags: domain\n---\n# Publish policy\n",
    )
    .unwrap();
    let text = format!(
        "[[worlds]]\nname = \"kb\"\n\n[worlds.backend]\nkind = \"bucket\"\ndriver = \"memory\"\n\n\
         [worlds.auth]\ndevelopment_token = true\n\n[worlds.policy]\nrequired = true\nseed_file = {seed:?}\n"
    );
    let config = Config::parse(&text, "test").unwrap();
    let (worlds, tokens) = Worlds::open(&config, &wiring::Backends).await.unwrap();
    let secret = tokens[0].secret.as_str().to_owned();
    let server = serve(worlds, dir).await;
    let c = &server.client;

    let seeded = c
        .get(server.url("/.well-known/demarkus/policy.md"))
        .send()
        .await
        .unwrap();
    assert_eq!(seeded.status(), StatusCode::OK);
    assert_eq!(header(&seeded, "mark-version"), "1");

    let untagged = c
        .put(server.url("/docs/a.md"))
        .bearer_auth(&secret)
        .body("# A\n")
        .send()
        .await
        .unwrap();
    assert_eq!(untagged.status(), StatusCode::BAD_REQUEST);
    let refusal = untagged.text().await.unwrap();
    assert!(
        refusal.contains("publish policy (block) refused this write:\n- missing-tag: domain"),
        "{refusal}"
    );
    for i in 0..3 {
        let tagged = c
            .put(server.url(&format!("/docs/{i}.md")))
            .bearer_auth(&secret)
            .header("meta-tags", "domain:storage")
            .body(format!("# Doc {i}\n"))
            .send()
            .await
            .unwrap();
        assert_eq!(tagged.status(), StatusCode::CREATED);
    }

    let metrics = c
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let world = [("world", "kb")];
    // The seed and three tagged documents: at least one slot, four writes in all.
    let batches = sample(&metrics, "quire_commit_batch_size_count", &world).unwrap();
    let written = sample(&metrics, "quire_commit_batch_size_sum", &world).unwrap();
    assert!(batches >= 1.0, "{metrics}");
    assert_eq!(written, 4.0, "{metrics}");
    let infinite = [("world", "kb"), ("le", "+Inf")];
    assert_eq!(
        sample(&metrics, "quire_commit_batch_size_bucket", &infinite),
        Some(batches)
    );
    let won = sample(&metrics, "quire_commit_slots_won_total", &world).unwrap();
    assert_eq!(won, batches, "{metrics}");
    assert_eq!(
        sample(&metrics, "quire_commit_slot_races_lost_total", &world),
        Some(0.0)
    );
    let creates = [("world", "kb"), ("op", "create")];
    assert!(sample(&metrics, "quire_blob_requests_total", &creates).unwrap() >= batches);
    let up = [("world", "kb"), ("direction", "up")];
    assert!(sample(&metrics, "quire_blob_bytes_total", &up).unwrap() > 0.0);
    let down = [("world", "kb"), ("direction", "down")];
    assert!(sample(&metrics, "quire_blob_bytes_total", &down).is_some());
}

/// Guards against a hang when an expected block never comes; never reached when green.
const GUARD: Duration = Duration::from_secs(60);

/// A WATCH response read block by block.
struct Blocks {
    response: reqwest::Response,
    decoder: WatchDecoder,
}

impl Blocks {
    async fn open(server: &Server, path_and_query: &str, token: Option<&str>) -> Blocks {
        let mut request = server.client.get(server.url(path_and_query));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path_and_query}");
        assert_eq!(header(&response, "content-type"), http::WATCH_CONTENT_TYPE);
        Blocks {
            response,
            decoder: WatchDecoder::new(),
        }
    }

    async fn next(&mut self) -> Option<WatchBlock> {
        tokio::time::timeout(GUARD, async {
            loop {
                if let Some(block) = self.decoder.next_block().unwrap() {
                    return Some(block);
                }
                match self.response.chunk().await.unwrap() {
                    Some(chunk) => self.decoder.push(&chunk),
                    None => {
                        assert!(
                            !self.decoder.has_partial(),
                            "the stream ended inside a block"
                        );
                        return None;
                    }
                }
            }
        })
        .await
        .expect("a block within the guard")
    }

    /// The next block as `status cursor` or `op path vN cursor`.
    async fn next_described(&mut self) -> String {
        match self.next().await.expect("another block") {
            WatchBlock::Control { status, cursor } => {
                format!(
                    "{status} {}",
                    cursor.map(|c| c.to_string()).unwrap_or_default()
                )
            }
            WatchBlock::Event(event) => format!(
                "{} {} v{} {}",
                event.op, event.path, event.version, event.cursor
            ),
        }
    }
}

async fn put(server: &Server, path: &str, body: &str) {
    let put = server
        .client
        .put(server.url(path))
        .bearer_auth(WRITER)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED, "{path}");
}

#[tokio::test]
async fn watch_streams_events_resumes_and_resyncs() {
    let server = start(LimitSettings::default()).await;
    let mut prefix = Blocks::open(&server, "/docs/?watch", None).await;
    let ack = prefix.next_described().await;
    let (status, cursor) = ack.split_once(' ').unwrap();
    assert_eq!(status, "ok");
    let (epoch, head) = cursor.split_once(':').unwrap();
    let head: u64 = head.parse().unwrap();
    let at = |n: u64| format!("{epoch}:{}", head + n);
    let mut document = Blocks::open(&server, "/docs/b.md?watch", None).await;
    assert_eq!(document.next_described().await, format!("ok {}", at(0)));

    put(&server, "/docs/a.md", "# A\n").await;
    put(&server, "/docs/b.md", "# B\n").await;
    put(&server, "/docs/a.md", "# A again\n").await;
    assert_eq!(
        prefix.next_described().await,
        format!("publish /docs/a.md v1 {}", at(1))
    );
    assert_eq!(
        prefix.next_described().await,
        format!("publish /docs/b.md v1 {}", at(2))
    );
    assert_eq!(
        prefix.next_described().await,
        format!("publish /docs/a.md v2 {}", at(3))
    );
    assert_eq!(
        document.next_described().await,
        format!("publish /docs/b.md v1 {}", at(2))
    );

    let mut resumed = Blocks::open(&server, &format!("/docs/?watch&since={}", at(1)), None).await;
    assert_eq!(resumed.next_described().await, format!("ok {}", at(1)));
    assert_eq!(
        resumed.next_described().await,
        format!("publish /docs/b.md v1 {}", at(2))
    );
    assert_eq!(
        resumed.next_described().await,
        format!("publish /docs/a.md v2 {}", at(3))
    );

    // The ring holds four events: two more writes lap the cursor at the head before them.
    put(&server, "/docs/c.md", "c").await;
    put(&server, "/docs/d.md", "d").await;
    let mut lapped = Blocks::open(&server, &format!("/docs/?watch&since={}", at(0)), None).await;
    assert_eq!(lapped.next_described().await, format!("resync {}", at(5)));
    assert!(lapped.next().await.is_none(), "resync ends the stream");

    let bad = server
        .client
        .get(server.url("/docs/?watch&since=bogus"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(bad.text().await.unwrap().contains("invalid since cursor"));
}

#[tokio::test]
async fn watch_read_auth_and_the_watch_limit() {
    let limits = LimitSettings {
        max_watches: NonZeroU32::new(2).unwrap(),
        ..LimitSettings::default()
    };
    let server = start(limits).await;
    let c = &server.client;
    let anonymous = c.get(server.url("/private/?watch")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let wrong_grant = c
        .get(server.url("/private/?watch"))
        .bearer_auth(WRITER)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_grant.status(), StatusCode::FORBIDDEN);

    let mut public = Blocks::open(&server, "/?watch", None).await;
    let mut reader = Blocks::open(&server, "/?watch", Some(READER)).await;
    assert!(public.next_described().await.starts_with("ok "));
    assert!(reader.next_described().await.starts_with("ok "));
    let full = c.get(server.url("/?watch")).send().await.unwrap();
    assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&full, "retry-after"), "1");
    assert_eq!(header(&full, "mark-status"), "rate-limited");

    // Each event is shown only to a watcher who may read it.
    put(&server, "/private/secret.md", "s").await;
    put(&server, "/docs/one.md", "1").await;
    assert!(
        public
            .next_described()
            .await
            .starts_with("publish /docs/one.md v1 ")
    );
    assert!(
        reader
            .next_described()
            .await
            .starts_with("publish /private/secret.md v1 ")
    );
    assert!(
        reader
            .next_described()
            .await
            .starts_with("publish /docs/one.md v1 ")
    );
}

#[tokio::test]
async fn shutting_down_ends_open_watches_with_closing() {
    let server = start(LimitSettings::default()).await;
    let mut watch = Blocks::open(&server, "/?watch", None).await;
    let ack = watch.next_described().await;
    let cursor = ack.strip_prefix("ok ").unwrap().to_owned();
    drop(server._stop);
    assert_eq!(watch.next_described().await, format!("closing {cursor}"));
    assert!(watch.next().await.is_none());
    assert_eq!(
        WatchBlock::parse(b"---\nstatus: closing\n---\n").unwrap(),
        WatchBlock::Control {
            status: Status::Closing,
            cursor: None
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_one_bucket_replica_reaches_a_watch_on_the_other() {
    use std::sync::OnceLock;

    use quire_backend::Follower;
    use quire_backend::bucket::{BucketOptions, BucketStore};
    use quire_blob::BlobStore;
    use quire_blob::memory::MemoryStore;

    let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
    // The leader's committed hook is the peer hint a server forwards to the other replicas.
    let follower_cell: Arc<OnceLock<BucketStore>> = Arc::new(OnceLock::new());
    let hint = {
        let cell = follower_cell.clone();
        Arc::new(move |sequence: u64| {
            if let Some(follower) = cell.get() {
                follower.follow(sequence);
            }
        })
    };
    let options = || BucketOptions {
        compaction: None,
        change_ring: 64,
        ..BucketOptions::default()
    };
    let leader = BucketStore::open(
        blobs.clone(),
        BucketOptions {
            on_committed: Some(hint),
            ..options()
        },
    )
    .await
    .unwrap();
    let follower = BucketStore::open(blobs, options()).await.unwrap();
    follower_cell.set(follower.clone()).unwrap();
    let world = |store: BucketStore| {
        let tokens = TokenStore::new([Token::new(
            "writer",
            TokenHash::of_secret(WRITER),
            [Operation::Publish],
            [PathPattern::parse("/docs/**").unwrap()],
            None,
        )])
        .unwrap();
        World::new(
            "shared",
            Arc::new(store),
            Authorizer::new(Some(Arc::new(TokenRegistry::fixed(tokens)))),
        )
    };
    let leader = serve(
        Worlds::from_worlds([world(leader)]),
        tempfile::tempdir().unwrap(),
    )
    .await;
    let follower = serve(
        Worlds::from_worlds([world(follower)]),
        tempfile::tempdir().unwrap(),
    )
    .await;

    let mut watch = Blocks::open(&follower, "/docs/?watch", None).await;
    let ack = watch.next_described().await;
    let (epoch, head) = ack.strip_prefix("ok ").unwrap().split_once(':').unwrap();
    let head: u64 = head.parse().unwrap();
    put(&leader, "/docs/shared.md", "from the leader").await;
    assert_eq!(
        watch.next_described().await,
        format!("publish /docs/shared.md v1 {epoch}:{}", head + 1)
    );
}
