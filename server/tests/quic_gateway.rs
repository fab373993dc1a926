//! The Mark protocol over QUIC on real UDP sockets on 127.0.0.1: every verb's success and
//! error paths, malformed requests on a connection that survives them, SNI routing (unknown
//! names refused at the handshake), auth denial, rate limiting, metrics, certificate and
//! token reloads while connections stay open, and a shutdown that drains open streams.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quire_backend::file::{FileOptions, FileStore};
use quire_server::auth::{Authorizer, Operation, TokenEntrySpec, TokenHash, TokenRegistry};
use quire_server::handlers::World;
use quire_server::limits::LimitSettings;
use quire_server::mark::client::{self as mark_client, Client, MarkConnection, Trust};
use quire_server::mark::{MAX_BODY, MAX_REQUEST_LINE, Request, Response, Status, Verb, WatchBlock};
use quire_server::metrics::Metrics;
use quire_server::quic::{self, QuicSettings};
use quire_server::reload::{ReloadFailure, reload};
use quire_server::tls::{self, ServerCertificates};
use quire_server::worlds::Worlds;

mod common;

use common::{READER, WRITER};

struct Server {
    address: SocketAddr,
    trust: Trust,
    certificates: Arc<ServerCertificates>,
    worlds: Arc<Worlds>,
    metrics: Arc<Metrics>,
    dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
}

impl Server {
    fn client(&self) -> Client {
        Client::for_server(self.address, &self.trust).unwrap()
    }

    async fn connect(&self, name: &str) -> MarkConnection {
        self.client().connect(self.address, name).await.unwrap()
    }

    /// Asks the server to shut down and waits until it has drained and closed.
    async fn shut_down(mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.served).await.unwrap();
    }
}

fn fixed_tokens() -> Authorizer {
    common::writer_and_reader(&["/docs/**"])
}

async fn world(name: &str, root: &Path, auth: Authorizer, limits: LimitSettings) -> World {
    common::file_world(name, &root.join(name), FileOptions::default(), auth, limits).await
}

/// Serves `worlds` (each under its name) with a development certificate for their names.
async fn serve(dir: tempfile::TempDir, worlds: Vec<World>) -> Server {
    let names: Vec<String> = worlds.iter().map(|w| w.name.clone()).collect();
    let certificates =
        Arc::new(ServerCertificates::development(&dir.path().join("tls"), &names).unwrap());
    serve_with(dir, worlds, certificates).await
}

async fn serve_with(
    dir: tempfile::TempDir,
    worlds: Vec<World>,
    certificates: Arc<ServerCertificates>,
) -> Server {
    let trust = Trust::from_pem_file(certificates.cert_path()).unwrap();
    let worlds = Arc::new(Worlds::from_worlds(worlds));
    let metrics = Arc::new(Metrics::default());
    let settings = QuicSettings {
        address: "127.0.0.1:0".parse().unwrap(),
        max_incoming_streams: 16,
        idle_timeout: Duration::from_secs(30),
        shutdown_timeout: Duration::from_secs(10),
        max_connections: 64,
    };
    let endpoint = quic::bind(&settings, &certificates, worlds.clone()).unwrap();
    let address = endpoint.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(quic::serve(
        endpoint,
        worlds.clone(),
        metrics.clone(),
        settings.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    Server {
        address,
        trust,
        certificates,
        worlds,
        metrics,
        dir,
        stop: Some(stop),
        served,
    }
}

async fn start(limits: LimitSettings) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let test = world("test", dir.path(), fixed_tokens(), limits).await;
    serve(dir, vec![test]).await
}

fn meta<'a>(response: &'a Response, key: &str) -> &'a str {
    response.metadata.get(key).map_or("", String::as_str)
}

fn body(response: &Response) -> &str {
    std::str::from_utf8(&response.body).unwrap()
}

async fn send(connection: &MarkConnection, request: Request) -> Response {
    connection.request(&request).await.unwrap()
}

/// A body LOOKUP answers ranked sections with snippets over the Mark protocol (asking again
/// while the section index of the request's snapshot is not ready).
#[tokio::test]
async fn body_lookup_over_quic() {
    let server = start(LimitSettings::default()).await;
    let c = server.connect("localhost").await;
    let put = send(
        &c,
        Request::new(Verb::Publish, "/docs/notes.md")
            .with_meta("auth", WRITER)
            .with_meta("title", "Notes")
            .with_body("# Notes\n\nintro\n\n## Setup\n\nraise the UDP buffer\n"),
    )
    .await;
    assert_eq!(put.status, Status::Created, "{}", body(&put));
    let ask = || {
        Request::new(Verb::Lookup, "/")
            .with_meta("query", "\"udp buffer\"")
            .with_meta("match", "body")
    };
    let mut answered = None;
    for _ in 0..30 {
        let found = send(&c, ask()).await;
        assert_eq!(found.status, Status::Ok, "{}", body(&found));
        if meta(&found, "match") == "body" {
            answered = Some(found);
            break;
        }
        assert_eq!(meta(&found, "match"), "catalog");
    }
    let found = answered.expect("a body answer");
    assert_eq!(meta(&found, "matches"), "1");
    assert!(
        body(&found).contains(
            "| /docs/notes.md#setup | 0.50 | Notes › Setup |  | raise the **UDP buffer** |"
        ),
        "{}",
        body(&found)
    );
}

#[tokio::test]
async fn every_verb_over_quic() {
    let server = start(LimitSettings::default()).await;
    let c = server.connect("localhost").await;

    let put = send(
        &c,
        Request::new(Verb::Publish, "/docs/a.md")
            .with_meta("auth", WRITER)
            .with_meta("tags", "alpha,wire")
            .with_body("# Alpha\n"),
    )
    .await;
    assert_eq!(put.status, Status::Created, "{}", body(&put));
    assert_eq!(meta(&put, "version"), "1");
    let create_only = send(
        &c,
        Request::new(Verb::Publish, "/docs/a.md")
            .with_meta("auth", WRITER)
            .with_meta("expected-version", "0")
            .with_body("other"),
    )
    .await;
    assert_eq!(create_only.status, Status::Conflict);
    assert_eq!(meta(&create_only, "server-version"), "1");

    let fetch = send(&c, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(fetch.status, Status::Ok);
    assert_eq!(body(&fetch), "# Alpha\n");
    let etag = meta(&fetch, "etag").to_owned();
    let cached = send(
        &c,
        Request::new(Verb::Fetch, "/docs/a.md").with_meta("if-none-match", etag),
    )
    .await;
    assert_eq!(cached.status, Status::NotModified);
    let missing = send(&c, Request::new(Verb::Fetch, "/docs/none.md")).await;
    assert_eq!(missing.status, Status::NotFound);
    assert_eq!(body(&missing), "\n# Not found\n\n/docs/none.md not found\n");

    let stale = send(
        &c,
        Request::new(Verb::Append, "/docs/a.md")
            .with_meta("auth", WRITER)
            .with_meta("expected-version", "7")
            .with_body("more"),
    )
    .await;
    assert_eq!(stale.status, Status::Conflict);
    let append = send(
        &c,
        Request::new(Verb::Append, "/docs/a.md")
            .with_meta("auth", WRITER)
            .with_meta("expected-version", "1")
            .with_body("more"),
    )
    .await;
    assert_eq!(append.status, Status::Created, "{}", body(&append));
    assert_eq!(meta(&append, "version"), "2");

    let versions = send(&c, Request::new(Verb::Versions, "/docs/a.md")).await;
    assert_eq!(versions.status, Status::Ok);
    assert_eq!(meta(&versions, "total"), "2");
    assert_eq!(meta(&versions, "chain-valid"), "true");
    let no_versions = send(&c, Request::new(Verb::Versions, "/docs/none.md")).await;
    assert_eq!(no_versions.status, Status::NotFound);

    let list = send(
        &c,
        Request::new(Verb::List, "/docs").with_meta("page-size", "1"),
    )
    .await;
    assert_eq!(list.status, Status::Ok);
    assert!(body(&list).contains("a.md"), "{}", body(&list));
    let bad_page = send(
        &c,
        Request::new(Verb::List, "/docs").with_meta("page-size", "0"),
    )
    .await;
    assert_eq!(bad_page.status, Status::BadRequest);

    let lookup = send(
        &c,
        Request::new(Verb::Lookup, "/")
            .with_meta("query", "alpha")
            .with_meta("filter", "tag=wire"),
    )
    .await;
    assert_eq!(lookup.status, Status::Ok, "{}", body(&lookup));
    assert_eq!(meta(&lookup, "matches"), "1");
    assert!(body(&lookup).contains("/docs/a.md"));
    let no_query = send(&c, Request::new(Verb::Lookup, "/")).await;
    assert_eq!(no_query.status, Status::BadRequest);

    let archive = send(
        &c,
        Request::new(Verb::Archive, "/docs/a.md").with_meta("auth", WRITER),
    )
    .await;
    assert_eq!(archive.status, Status::Ok, "{}", body(&archive));
    assert_eq!(meta(&archive, "archived"), "true");
    let gone = send(&c, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(gone.status, Status::Archived);
    let missing_archive = send(
        &c,
        Request::new(Verb::Archive, "/docs/none.md").with_meta("auth", WRITER),
    )
    .await;
    assert_eq!(missing_archive.status, Status::NotFound);

    let health = send(&c, Request::new(Verb::Fetch, "/health")).await;
    assert_eq!(health.status, Status::Ok);

    let metrics = server.metrics.render();
    assert!(
        metrics.contains(r#"quire_requests_total{world="test",verb="PUBLISH",status="created"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics
            .contains(r#"quire_requests_total{world="test",verb="LOOKUP",status="bad-request"} 1"#),
        "{metrics}"
    );
    server.shut_down().await;
}

#[tokio::test]
async fn malformed_requests_are_answered_and_the_connection_survives() {
    let server = start(LimitSettings::default()).await;
    let c = server.connect("localhost").await;

    let long_line = format!("FETCH /{}\n", "a".repeat(MAX_REQUEST_LINE));
    let answer = c.exchange(long_line.as_bytes(), "long line").await.unwrap();
    assert_eq!(answer.status, Status::ServerError);
    assert_eq!(
        body(&answer),
        "\n# Server error\n\ncould not read request: request line exceeds 4096 bytes\n"
    );

    let unknown_verb = c.exchange(b"STEAL /docs/a.md\n", "verb").await.unwrap();
    assert_eq!(unknown_verb.status, Status::BadRequest);

    let bad_metadata = c
        .exchange(b"FETCH /docs/a.md\n---\n  indented: x\n---\n", "metadata")
        .await
        .unwrap();
    assert_eq!(bad_metadata.status, Status::BadRequest);
    assert!(
        body(&bad_metadata).contains("metadata"),
        "{}",
        body(&bad_metadata)
    );

    let unclosed = c
        .exchange(b"FETCH /docs/a.md\n---\nkey: value\n", "unclosed")
        .await
        .unwrap();
    assert_eq!(unclosed.status, Status::BadRequest);

    // A writer's request, so the size is what refuses it: a write is authorised from its
    // line and metadata before its body is read.
    let mut oversize = format!("PUBLISH /docs/big.md\n---\nauth: {WRITER}\n---\n").into_bytes();
    oversize.extend(std::iter::repeat_n(b'a', MAX_BODY + 1));
    let too_big = c.exchange(&oversize, "body").await.unwrap();
    assert_eq!(too_big.status, Status::ServerError);
    assert!(
        body(&too_big).contains("body exceeds 1048576 bytes"),
        "{}",
        body(&too_big)
    );

    let empty = c.exchange(b"", "empty").await.unwrap();
    assert_eq!(empty.status, Status::BadRequest);

    // The same connection still serves.
    let fine = send(&c, Request::new(Verb::Fetch, "/health")).await;
    assert_eq!(fine.status, Status::Ok);
    let largest = send(
        &c,
        Request::new(Verb::Publish, "/docs/big.md")
            .with_meta("auth", WRITER)
            .with_body(vec![b'a'; MAX_BODY]),
    )
    .await;
    assert_eq!(largest.status, Status::Created, "{}", body(&largest));
    server.shut_down().await;
}

#[tokio::test]
async fn sni_chooses_the_world_and_unknown_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let alpha = world(
        "alpha",
        dir.path(),
        fixed_tokens(),
        LimitSettings::default(),
    )
    .await;
    let beta = world("beta", dir.path(), fixed_tokens(), LimitSettings::default()).await;
    let server = serve(dir, vec![alpha, beta]).await;

    let to_alpha = server.connect("alpha").await;
    let put = send(
        &to_alpha,
        Request::new(Verb::Publish, "/docs/a.md")
            .with_meta("auth", WRITER)
            .with_body("in alpha"),
    )
    .await;
    assert_eq!(put.status, Status::Created);
    let to_beta = server.connect("beta").await;
    let there = send(&to_beta, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(there.status, Status::NotFound, "beta is another world");
    let here = send(&to_alpha, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(body(&here), "in alpha");

    // Even a client that accepts any certificate is refused: the server has none to give.
    let careless = Client::for_server(server.address, &Trust::Insecure).unwrap();
    for name in ["gamma", "127.0.0.1"] {
        let refused = careless.connect(server.address, name).await.unwrap_err();
        assert_eq!(refused.kind(), mark_client::ErrorKind::Connection, "{name}");
        assert_eq!(refused.op(), mark_client::Op::Connect);
    }
    let fine = careless.connect(server.address, "beta").await.unwrap();
    assert_eq!(
        send(&fine, Request::new(Verb::Fetch, "/health"))
            .await
            .status,
        Status::Ok
    );

    // A client that trusts only other certificates refuses the server.
    let other = tempfile::tempdir().unwrap();
    let stranger = ServerCertificates::development(other.path(), &[]).unwrap();
    let wary = Client::for_server(
        server.address,
        &Trust::from_pem_file(stranger.cert_path()).unwrap(),
    )
    .unwrap();
    assert!(wary.connect(server.address, "alpha").await.is_err());
    server.shut_down().await;
}

#[tokio::test]
async fn auth_denials_over_quic() {
    let server = start(LimitSettings::default()).await;
    let c = server.connect("localhost").await;
    let anonymous = send(&c, Request::new(Verb::Publish, "/docs/a.md").with_body("x")).await;
    assert_eq!(anonymous.status, Status::Unauthorized);
    let unknown = send(
        &c,
        Request::new(Verb::Publish, "/docs/a.md")
            .with_meta("auth", "quire_nobody")
            .with_body("x"),
    )
    .await;
    assert_eq!(unknown.status, Status::Unauthorized);
    let outside = send(
        &c,
        Request::new(Verb::Publish, "/other/a.md")
            .with_meta("auth", WRITER)
            .with_body("x"),
    )
    .await;
    assert_eq!(outside.status, Status::NotPermitted);
    let protected = send(&c, Request::new(Verb::Fetch, "/private/x.md")).await;
    assert_eq!(protected.status, Status::Unauthorized);
    let wrong_grant = send(
        &c,
        Request::new(Verb::Fetch, "/private/x.md").with_meta("auth", WRITER),
    )
    .await;
    assert_eq!(wrong_grant.status, Status::NotPermitted);
    let granted = send(
        &c,
        Request::new(Verb::Fetch, "/private/x.md").with_meta("auth", READER),
    )
    .await;
    assert_eq!(granted.status, Status::NotFound);
    server.shut_down().await;
}

#[tokio::test]
async fn rate_limited_with_a_retry_hint() {
    let limits = LimitSettings {
        requests_per_second: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(1).unwrap(),
        queue_wait: Duration::ZERO,
        ..LimitSettings::default()
    };
    let server = start(limits).await;
    let c = server.connect("localhost").await;
    let first = send(&c, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(first.status, Status::NotFound);
    let second = send(&c, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(second.status, Status::RateLimited);
    assert_eq!(meta(&second, "retry-after"), "1");
    let metrics = server.metrics.render();
    assert!(
        metrics.contains(r#"verb="FETCH",status="rate-limited"} 1"#),
        "{metrics}"
    );
    server.shut_down().await;
}

fn copy_certificate(from: &ServerCertificates, cert: &Path, key: &Path) {
    std::fs::copy(from.cert_path(), cert).unwrap();
    std::fs::copy(from.key_path(), key).unwrap();
}

#[tokio::test]
async fn certificate_reload_keeps_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let first = ServerCertificates::development(&dir.path().join("first"), &[]).unwrap();
    let second = ServerCertificates::development(&dir.path().join("second"), &[]).unwrap();
    let first_leaf = first.current().cert[0].clone();
    let second_leaf = second.current().cert[0].clone();
    assert_ne!(first_leaf, second_leaf);
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    copy_certificate(&first, &cert, &key);
    let certificates = Arc::new(ServerCertificates::from_files(&cert, &key).unwrap());
    assert!(!certificates.is_development());
    let test = world("test", dir.path(), fixed_tokens(), LimitSettings::default()).await;
    let server = serve_with(dir, vec![test], certificates).await;

    let trusts_first = Trust::from_pem_file(first.cert_path()).unwrap();
    let trusts_second = Trust::from_pem_file(second.cert_path()).unwrap();
    let old_client = Client::for_server(server.address, &trusts_first).unwrap();
    let open = old_client
        .connect(server.address, "localhost")
        .await
        .unwrap();
    assert_eq!(open.peer_certificates(), vec![first_leaf.clone()]);

    copy_certificate(&second, &cert, &key);
    reload(&server.worlds, Some(&server.certificates)).unwrap();

    // The open connection keeps working on the certificate it started with.
    let still = send(&open, Request::new(Verb::Fetch, "/health")).await;
    assert_eq!(still.status, Status::Ok);
    assert_eq!(open.peer_certificates(), vec![first_leaf]);
    // New connections get the new certificate. (A fresh client: the old one may resume its
    // TLS session, which needs no certificate.)
    let fresh_old_trust = Client::for_server(server.address, &trusts_first).unwrap();
    assert!(
        fresh_old_trust
            .connect(server.address, "localhost")
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
    let new_client = Client::for_server(server.address, &trusts_second).unwrap();
    let fresh = new_client
        .connect(server.address, "localhost")
        .await
        .unwrap();
    assert_eq!(fresh.peer_certificates(), vec![second_leaf.clone()]);

    // A broken file is refused and the current certificate stays.
    std::fs::write(&cert, "garbage").unwrap();
    let failure = reload(&server.worlds, Some(&server.certificates)).unwrap_err();
    assert!(matches!(
        failure.0.as_slice(),
        [ReloadFailure::Certificates(error)] if error.op() == tls::Op::Reload
    ));
    let after = new_client
        .connect(server.address, "localhost")
        .await
        .unwrap();
    assert_eq!(after.peer_certificates(), vec![second_leaf]);
    server.shut_down().await;
}

fn write_tokens(path: &Path, secret: &str) {
    let entry = TokenEntrySpec {
        hash: TokenHash::of_secret(secret).to_string(),
        operations: vec![Operation::Publish],
        paths: vec!["/**".into()],
        expires: None,
    };
    std::fs::write(path, entry.to_toml("writer")).unwrap();
}

#[tokio::test]
async fn token_reload_swaps_the_tokens_of_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    write_tokens(&tokens, "quire_old-secret");
    let registry = Arc::new(TokenRegistry::load(tokens.clone()).unwrap());
    let auth = Authorizer::new(Some(registry));
    let test = world("test", dir.path(), auth, LimitSettings::default()).await;
    let server = serve(dir, vec![test]).await;
    let c = server.connect("localhost").await;
    let publish = |secret: &str, path: &str| {
        Request::new(Verb::Publish, path)
            .with_meta("auth", secret)
            .with_body("x")
    };
    assert_eq!(
        send(&c, publish("quire_old-secret", "/a.md")).await.status,
        Status::Created
    );

    write_tokens(&tokens, "quire_new-secret");
    reload(&server.worlds, Some(&server.certificates)).unwrap();
    assert_eq!(
        send(&c, publish("quire_old-secret", "/b.md")).await.status,
        Status::Unauthorized
    );
    assert_eq!(
        send(&c, publish("quire_new-secret", "/b.md")).await.status,
        Status::Created
    );

    std::fs::write(&tokens, "[tokens.broken]\nhash = \"\"\n").unwrap();
    let failure = reload(&server.worlds, Some(&server.certificates)).unwrap_err();
    assert!(
        matches!(failure.0.as_slice(), [ReloadFailure::Tokens { world, .. }] if world == "test"),
        "{failure}"
    );
    assert_eq!(
        send(&c, publish("quire_new-secret", "/c.md")).await.status,
        Status::Created,
        "a failed reload keeps the tokens it had"
    );
    assert!(
        server
            .dir
            .path()
            .join("tls")
            .join(tls::DEVELOPMENT_CERT_FILE)
            .is_file()
    );
    server.shut_down().await;
}

#[tokio::test]
async fn shutdown_drains_open_streams_then_closes() {
    let server = start(LimitSettings::default()).await;
    let c = server.connect("localhost").await;
    // A request half sent when the shutdown starts.
    let (mut send_half, mut recv_half) = c.quic().open_bi().await.unwrap();
    send_half.write_all(b"FETCH /hea").await.unwrap();
    // Streams are accepted in order, so once a later stream is answered the server holds
    // the half-sent one.
    let later = send(&c, Request::new(Verb::Fetch, "/health")).await;
    assert_eq!(later.status, Status::Ok);

    let Server { stop, served, .. } = server;
    let _ = stop.unwrap().send(());
    send_half.write_all(b"lth\n").await.unwrap();
    send_half.finish().unwrap();
    let answer = quire_server::mark::read_response(&mut recv_half, Default::default())
        .await
        .unwrap();
    assert_eq!(
        answer.status,
        Status::Ok,
        "the stream in flight is answered"
    );
    served.await.unwrap();
    // Then the endpoint closed the connection, saying why.
    match c.quic().closed().await {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(
                close.error_code,
                quinn::VarInt::from_u32(quic::CLOSE_SHUTDOWN)
            );
        }
        other => panic!("closed by {other}"),
    }
}

#[tokio::test]
async fn only_the_mark_alpn_is_spoken() {
    let server = start(LimitSettings::default()).await;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(server.certificates.current().cert[0].clone())
        .unwrap();
    let connect_with = |alpn: &[&[u8]]| {
        let mut tls = rustls::ClientConfig::builder_with_provider(tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
        let connecting = endpoint.connect(server.address, "localhost").unwrap();
        async move { (connecting.await, endpoint) }
    };
    let (refused, _endpoint) = connect_with(&[b"h3"]).await;
    assert!(refused.is_err(), "a client speaking only h3 is refused");
    let (accepted, _endpoint) = connect_with(&[b"h3", tls::ALPN_MARK]).await;
    let accepted = accepted.unwrap();
    let handshake = accepted
        .handshake_data()
        .unwrap()
        .downcast::<quinn::crypto::rustls::HandshakeData>()
        .unwrap();
    assert_eq!(handshake.protocol.as_deref(), Some(tls::ALPN_MARK));
    server.shut_down().await;
}

/// A world whose store keeps a change ring, so WATCH is served.
async fn watched_world(root: &Path) -> World {
    let options = FileOptions {
        durable: false,
        change_ring: 64,
        ..FileOptions::default()
    };
    let store = FileStore::open(root.join("test"), options).await.unwrap();
    World::new("test", Arc::new(store), fixed_tokens())
}

fn event(block: Option<WatchBlock>) -> (String, u64, String) {
    match block {
        Some(WatchBlock::Event(event)) => (event.path, event.version, event.op),
        other => panic!("expected an event, got {other:?}"),
    }
}

fn control(block: Option<WatchBlock>) -> Status {
    match block {
        Some(WatchBlock::Control { status, .. }) => status,
        other => panic!("expected a control block, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_streams_changes_in_commit_order_and_ends_with_closing_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let test = watched_world(dir.path()).await;
    let server = serve(dir, vec![test]).await;
    let c = server.connect("localhost").await;

    let mut docs = c.watch(&Request::new(Verb::Watch, "/docs/")).await.unwrap();
    assert_eq!(control(docs.next().await.unwrap()), Status::Ok);
    let mut one = c
        .watch(&Request::new(Verb::Watch, "/docs/b.md"))
        .await
        .unwrap();
    assert_eq!(control(one.next().await.unwrap()), Status::Ok);

    for (n, path) in ["/docs/a.md", "/docs/b.md", "/docs/a.md"]
        .iter()
        .enumerate()
    {
        let put = send(
            &c,
            Request::new(Verb::Publish, *path)
                .with_meta("auth", WRITER)
                .with_body(format!("# {path}\nwrite {n}\n")),
        )
        .await;
        assert_eq!(put.status, Status::Created, "{}", body(&put));
    }
    assert_eq!(
        event(docs.next().await.unwrap()),
        ("/docs/a.md".into(), 1, "publish".into())
    );
    assert_eq!(
        event(docs.next().await.unwrap()),
        ("/docs/b.md".into(), 1, "publish".into())
    );
    assert_eq!(
        event(docs.next().await.unwrap()),
        ("/docs/a.md".into(), 2, "publish".into())
    );
    assert_eq!(
        event(one.next().await.unwrap()),
        ("/docs/b.md".into(), 1, "publish".into()),
        "a document watch sees only its document"
    );

    // A refusal before subscription is an ordinary answer on the stream.
    let mut refused = c
        .watch(&Request::new(Verb::Watch, "/docs/../x.md"))
        .await
        .unwrap();
    assert_eq!(control(refused.next().await.unwrap()), Status::NotFound);

    // Shutdown ends open watches with `closing`, then the streams finish.
    let Server { stop, served, .. } = server;
    let _ = stop.unwrap().send(());
    assert_eq!(control(docs.next().await.unwrap()), Status::Closing);
    assert_eq!(docs.next().await.unwrap(), None);
    assert_eq!(control(one.next().await.unwrap()), Status::Closing);
    assert_eq!(one.next().await.unwrap(), None);
    served.await.unwrap();
}

#[tokio::test]
async fn a_connection_holds_watches_on_at_most_half_its_streams() {
    let dir = tempfile::tempdir().unwrap();
    let test = watched_world(dir.path()).await;
    // The test server allows 16 streams per connection: 8 may watch.
    let server = serve(dir, vec![test]).await;
    let c = server.connect("localhost").await;
    let mut open = Vec::new();
    for _ in 0..8 {
        let mut watch = c.watch(&Request::new(Verb::Watch, "/")).await.unwrap();
        assert_eq!(control(watch.next().await.unwrap()), Status::Ok);
        open.push(watch);
    }
    let mut ninth = c.watch(&Request::new(Verb::Watch, "/")).await.unwrap();
    assert_eq!(control(ninth.next().await.unwrap()), Status::RateLimited);
    // Another connection has its own slots.
    let other = server.connect("localhost").await;
    let mut elsewhere = other.watch(&Request::new(Verb::Watch, "/")).await.unwrap();
    assert_eq!(control(elsewhere.next().await.unwrap()), Status::Ok);
    // Ordinary requests still have their streams.
    let health = send(&c, Request::new(Verb::Fetch, "/health")).await;
    assert_eq!(health.status, Status::Ok);
    server.shut_down().await;
}
