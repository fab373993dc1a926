//! Hostile clients and hostile documents, on both transports (the HTTP gateway and the Mark
//! protocol over QUIC, real sockets on 127.0.0.1, one world behind both): every spelling of
//! a path is judged as the path it serves, protected and absent paths answer alike,
//! documents never become protocol, values are refused at write when a reader could not
//! read them back, limits are per client, and slow or half-sent requests are closed by their
//! timeouts while a normal client is still served.
//!
//! Long because it is one finding per test, each with its own trigger (the shared tokens and
//! world come from `server/tests/common`); it splits into paths, documents and limits when a
//! group needs helpers of its own.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use quire_backend::file::FileOptions;
use quire_backend::{Ctx, Store, WriteRequest};
use quire_log::Hash;
use quire_server::auth::{Authorizer, Operation, PathPattern};
use quire_server::http::{self, HttpSettings};
use quire_server::limits::LimitSettings;
use quire_server::mark::client::{Client, MarkConnection, Trust};
use quire_server::mark::{Request, Response, Status, Verb, WatchBlock};
use quire_server::metrics::Metrics;
use quire_server::quic::{self, QuicSettings};
use quire_server::tls::ServerCertificates;
use quire_server::worlds::Worlds;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WRITER: &str = "quire_writer-secret";
const NOTES_READER: &str = "quire_notes-reader-secret";
const PRIVATE_READER: &str = "quire_private-reader-secret";
const OTHER_WRITER: &str = "quire_other-writer-secret";
/// Guards against a hang when an expected event never comes; never reached when green.
const GUARD: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Http,
    Quic,
}

const BOTH: [Transport; 2] = [Transport::Http, Transport::Quic];

/// What a request got back, whichever transport carried it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: Status,
    meta: BTreeMap<String, String>,
    body: String,
}

impl Answer {
    fn meta(&self, key: &str) -> &str {
        self.meta.get(key).map_or("", String::as_str)
    }
}

mod common;

struct Server {
    http: SocketAddr,
    quic: SocketAddr,
    store: Arc<dyn Store>,
    client: Client,
    connection: MarkConnection,
    web: reqwest::Client,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

fn tokens() -> Authorizer {
    common::authorizer([
        common::token("writer", WRITER, &[Operation::Publish], &["/**"]),
        common::token(
            "other-writer",
            OTHER_WRITER,
            &[Operation::Publish],
            &["/**"],
        ),
        common::token(
            "notes-reader",
            NOTES_READER,
            &[Operation::Read],
            &["/notes/*.md"],
        ),
        common::token(
            "private-reader",
            PRIVATE_READER,
            &[Operation::Read],
            &["/private/**"],
        ),
    ])
}

async fn start(limits: LimitSettings, http_settings: HttpSettings) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let options = FileOptions {
        change_ring: 64,
        ..FileOptions::default()
    };
    let world =
        common::file_world("test", &dir.path().join("world"), options, tokens(), limits).await;
    let store = world.store.clone();
    let worlds = Arc::new(Worlds::from_worlds([world]));
    let metrics = Arc::new(Metrics::default());
    let certificates = Arc::new(
        ServerCertificates::development(&dir.path().join("tls"), &["test".to_owned()]).unwrap(),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = listener.local_addr().unwrap();
    tokio::spawn(http::serve_with(
        listener,
        worlds.clone(),
        metrics.clone(),
        http_settings,
        until_stopped(stopped.clone()),
    ));

    let settings = QuicSettings {
        address: "127.0.0.1:0".parse().unwrap(),
        max_incoming_streams: 16,
        idle_timeout: Duration::from_secs(30),
        shutdown_timeout: Duration::from_secs(10),
        max_connections: 8,
    };
    let endpoint = quic::bind(&settings, &certificates, worlds.clone()).unwrap();
    let quic = endpoint.local_addr().unwrap();
    tokio::spawn(quic::serve(
        endpoint,
        worlds,
        metrics,
        settings,
        until_stopped(stopped),
    ));
    let trust = Trust::from_pem_file(certificates.cert_path()).unwrap();
    let client = Client::for_server(quic, &trust).unwrap();
    let connection = client.connect(quic, "localhost").await.unwrap();
    Server {
        http,
        quic,
        store,
        client,
        connection,
        web: reqwest::Client::new(),
        _dir: dir,
        _stop: stop,
    }
}

async fn default_server() -> Server {
    start(LimitSettings::default(), HttpSettings::default()).await
}

/// Characters a test path keeps as they are in an HTTP request target.
const PATH_KEEP: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

impl Server {
    fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.http)
    }

    /// `request` over `transport`: on HTTP mapped as docs/SPEC.md says (auth as a bearer
    /// token, query keys as parameters, every other key of a write as `Meta-<key>`).
    async fn ask(&self, transport: Transport, request: &Request) -> Answer {
        match transport {
            Transport::Quic => {
                let response = self.connection.request(request).await.unwrap();
                answer_of(&response)
            }
            Transport::Http => self.ask_http(request).await,
        }
    }

    async fn ask_http(&self, request: &Request) -> Answer {
        let (method, flag) = match request.verb {
            Verb::Fetch => (reqwest::Method::GET, None),
            Verb::Versions => (reqwest::Method::GET, Some("versions")),
            Verb::List => (reqwest::Method::GET, Some("list")),
            Verb::Lookup => (reqwest::Method::GET, Some("lookup")),
            Verb::Publish => (reqwest::Method::PUT, None),
            Verb::Append => (reqwest::Method::POST, Some("append")),
            Verb::Archive => (reqwest::Method::POST, Some("archive")),
            other => panic!("{other} is not mapped here"),
        };
        let mut query: Vec<String> = flag.into_iter().map(str::to_owned).collect();
        let mut headers = reqwest::header::HeaderMap::new();
        for (key, value) in &request.metadata {
            let value_bytes = value.as_bytes();
            match key.as_str() {
                "auth" => {
                    headers.insert(
                        reqwest::header::AUTHORIZATION,
                        format!("Bearer {value}").parse().unwrap(),
                    );
                }
                "expected-version" => {
                    headers.insert("expected-version", value.parse().unwrap());
                }
                "if-none-match" => {
                    headers.insert(
                        reqwest::header::IF_NONE_MATCH,
                        format!("\"{value}\"").parse().unwrap(),
                    );
                }
                key if quire_server::http::QUERY_KEYS.contains(&key) => query.push(format!(
                    "{key}={}",
                    percent_encoding::utf8_percent_encode(
                        value,
                        percent_encoding::NON_ALPHANUMERIC
                    )
                )),
                key => {
                    headers.insert(
                        reqwest::header::HeaderName::try_from(format!("meta-{key}")).unwrap(),
                        reqwest::header::HeaderValue::from_bytes(value_bytes).unwrap(),
                    );
                }
            }
        }
        let path = percent_encoding::utf8_percent_encode(&request.path, PATH_KEEP).to_string();
        let target = if query.is_empty() {
            path
        } else {
            format!("{path}?{}", query.join("&"))
        };
        let response = self
            .web
            .request(method, self.url(&target))
            .headers(headers)
            .body(request.body.to_vec())
            .send()
            .await
            .unwrap();
        answer_of_http(response).await
    }
}

fn answer_of(response: &Response) -> Answer {
    Answer {
        status: response.status,
        meta: response.metadata.clone(),
        body: String::from_utf8_lossy(&response.body).into_owned(),
    }
}

async fn answer_of_http(response: reqwest::Response) -> Answer {
    let mut meta = BTreeMap::new();
    let mut status = None;
    for (name, value) in response.headers() {
        if let Some(key) = name.as_str().strip_prefix("mark-") {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            if key == "status" {
                status = Status::from_name(&value);
            } else {
                meta.insert(key.to_owned(), value);
            }
        }
    }
    let code = response.status();
    let body = response.text().await.unwrap();
    Answer {
        status: status.unwrap_or_else(|| panic!("no Mark-Status on {code}: {body}")),
        meta,
        body,
    }
}

fn fetch(path: &str) -> Request {
    Request::new(Verb::Fetch, path)
}

fn publish(path: &str, body: &str) -> Request {
    Request::new(Verb::Publish, path)
        .with_meta("auth", WRITER)
        .with_body(body.to_owned())
}

async fn published(server: &Server, path: &str, body: &str) {
    let answer = server.ask(Transport::Quic, &publish(path, body)).await;
    assert!(
        matches!(answer.status, Status::Created | Status::Ok),
        "{path}: {answer:?}"
    );
}

// -- 1. one canonical path ------------------------------------------------------------------

#[tokio::test]
async fn every_spelling_of_a_protected_path_is_judged_as_the_path_it_serves() {
    let server = default_server().await;
    published(&server, "/notes/s.md", "top secret").await;
    for transport in BOTH {
        for spelling in [
            "/notes/s.md",
            "/notes/s.md/",
            "//notes/s.md",
            "/notes//s.md",
            "/notes/s.md//",
        ] {
            let denied = server.ask(transport, &fetch(spelling)).await;
            assert_eq!(
                denied.status,
                Status::Unauthorized,
                "{transport:?} {spelling}"
            );
            assert!(!denied.body.contains("top secret"));
            let read = server
                .ask(transport, &fetch(spelling).with_meta("auth", NOTES_READER))
                .await;
            assert_eq!(read.status, Status::Ok, "{transport:?} {spelling}");
            assert_eq!(read.body, "top secret");
            let versions = server
                .ask(transport, &Request::new(Verb::Versions, spelling))
                .await;
            assert_eq!(
                versions.status,
                Status::Unauthorized,
                "{transport:?} {spelling}"
            );
        }
    }
    // Mark carries `.` segments as written; HTTP clients resolve them before sending.
    let dotted = server.ask(Transport::Quic, &fetch("/notes/./s.md/.")).await;
    assert_eq!(dotted.status, Status::Unauthorized);
    // HTTP: an encoded `/` is a `/`.
    let encoded = server
        .web
        .get(server.url("/notes%2Fs.md%2F"))
        .send()
        .await
        .unwrap();
    assert_eq!(encoded.status(), reqwest::StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn invalid_utf8_in_an_http_path_or_query_is_refused_not_replaced() {
    let server = default_server().await;
    for target in ["/notes/%FF.md", "/notes/%FE.md", "/?lookup&query=%FF"] {
        let response = server.web.get(server.url(target)).send().await.unwrap();
        assert_eq!(
            response.status(),
            reqwest::StatusCode::BAD_REQUEST,
            "{target}"
        );
        assert_eq!(
            response.headers()["mark-status"],
            "bad-request",
            "{target}: a Mark status on every answer"
        );
    }
    let put = server
        .web
        .put(server.url("/notes/%FF.md"))
        .bearer_auth(WRITER)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), reqwest::StatusCode::BAD_REQUEST);
    // Nothing was stored under U+FFFD.
    let replaced = server
        .ask(
            Transport::Quic,
            &fetch("/notes/\u{FFFD}.md").with_meta("auth", NOTES_READER),
        )
        .await;
    assert_eq!(replaced.status, Status::NotFound);
}

#[tokio::test]
async fn a_protected_path_and_an_absent_one_answer_alike() {
    let server = default_server().await;
    published(&server, "/notes/s.md", "top secret").await;
    published(&server, "/private/hr/pay.md", "salaries").await;
    for transport in BOTH {
        let alike = |present: Request, absent: Request| {
            let server = &server;
            async move {
                let (a, b) = (
                    server.ask(transport, &present).await,
                    server.ask(transport, &absent).await,
                );
                assert_eq!(
                    (a.status, &a.body),
                    (b.status, &b.body),
                    "{transport:?}: {} and {} must answer alike",
                    present.path,
                    absent.path
                );
                a.status
            }
        };
        // A pinned version of a protected document, and of an absent one.
        let status = alike(fetch("/notes/s.md/v1"), fetch("/notes/none.md/v1")).await;
        assert_eq!(status, Status::Unauthorized);
        // A pinned-looking child of a protected directory.
        alike(fetch("/private/hr/v1"), fetch("/private/none/v1")).await;
        // A protected directory as a LOOKUP scope.
        let lookup = |scope: &str| Request::new(Verb::Lookup, scope).with_meta("query", "*");
        let status = alike(lookup("/private/hr"), lookup("/private/none")).await;
        assert_eq!(status, Status::Unauthorized);
        // The bare top directory of a `/private/**` pattern, listed and fetched.
        let status = alike(
            Request::new(Verb::List, "/private"),
            Request::new(Verb::List, "/private/none"),
        )
        .await;
        assert_eq!(status, Status::Unauthorized);
        alike(fetch("/private"), fetch("/private/none")).await;
        alike(
            Request::new(Verb::Versions, "/notes/s.md"),
            Request::new(Verb::Versions, "/notes/none.md"),
        )
        .await;

        // A content hash: a protected document's body cannot be confirmed by its hash.
        let guessed = format!("/blake3-{}", Hash::of(b"top secret").to_hex());
        let nothing = format!("/blake3-{}", "0".repeat(64));
        let (a, b) = (
            server.ask(transport, &fetch(&guessed)).await,
            server.ask(transport, &fetch(&nothing)).await,
        );
        assert_eq!((a.status, b.status), (Status::NotFound, Status::NotFound));
        let reader = server
            .ask(transport, &fetch(&guessed).with_meta("auth", NOTES_READER))
            .await;
        assert_eq!(reader.status, Status::Ok, "{transport:?}");
        assert_eq!(reader.body, "top secret");

        // LIST and LOOKUP show only what the caller may read.
        let listed = server
            .ask(transport, &Request::new(Verb::List, "/notes"))
            .await;
        assert_eq!(listed.status, Status::Ok);
        assert!(!listed.body.contains("s.md"), "{}", listed.body);
        let found = server
            .ask(
                transport,
                &Request::new(Verb::Lookup, "/").with_meta("query", "*"),
            )
            .await;
        assert_eq!(found.status, Status::Ok);
        assert!(
            !found.body.contains("s.md") && !found.body.contains("pay.md"),
            "{}",
            found.body
        );
    }
}

#[tokio::test]
async fn names_in_generated_bodies_are_text_not_markup() {
    let server = default_server().await;
    published(&server, "/docs/x](javascript:alert(1)).md", "# x").await;
    for transport in BOTH {
        let listed = server
            .ask(transport, &Request::new(Verb::List, "/docs"))
            .await;
        assert_eq!(listed.status, Status::Ok);
        assert!(!listed.body.contains("](javascript"), "{}", listed.body);
        assert!(
            listed.body.contains(r"x\]\(javascript:alert\(1\)\).md"),
            "{}",
            listed.body
        );
        let found = server
            .ask(
                transport,
                &Request::new(Verb::Lookup, "/").with_meta("query", "x](evil)"),
            )
            .await;
        assert!(!found.body.contains("](evil)"), "{}", found.body);
    }
}

// -- 2. documents never become protocol -----------------------------------------------------

#[tokio::test]
async fn publisher_metadata_cannot_set_protocol_keys() {
    let server = default_server().await;
    for transport in BOTH {
        for key in [
            "status",
            "retry-after",
            "current-version",
            "etag",
            "next-cursor",
        ] {
            let answer = server
                .ask(
                    transport,
                    &publish("/docs/h.md", "x").with_meta(key, "not-found"),
                )
                .await;
            assert_eq!(answer.status, Status::BadRequest, "{transport:?} {key}");
            assert!(
                answer.body.contains(&format!("\"{key}\"")),
                "{}",
                answer.body
            );
        }
    }
    // A document stored before the rule (straight through the store) cannot shadow them.
    let mut metadata = quire_log::metadata::Metadata::new();
    metadata.insert("status".into(), "not-found".into());
    metadata.insert("retry-after".into(), "86400".into());
    metadata.insert("current-version".into(), "99".into());
    server
        .store
        .publish(
            &Ctx::new(),
            WriteRequest::new("/docs/old.md", "x").metadata(metadata),
        )
        .await
        .unwrap();
    for transport in BOTH {
        let answer = server.ask(transport, &fetch("/docs/old.md")).await;
        assert_eq!(answer.status, Status::Ok, "{transport:?}");
        assert_eq!(answer.meta("retry-after"), "");
        assert_eq!(answer.meta("current-version"), "");
    }
    let http = server
        .web
        .get(server.url("/docs/old.md"))
        .send()
        .await
        .unwrap();
    assert_eq!(http.status(), reqwest::StatusCode::OK);
    assert_eq!(http.headers()["mark-status"], "ok");
    assert!(http.headers().get("retry-after").is_none());
}

#[tokio::test]
async fn http_query_keys_and_meta_control_keys_never_become_metadata() {
    let server = default_server().await;
    let put = server
        .web
        .put(server.url("/docs/q.md?limit=5&since=x&query=y"))
        .bearer_auth(WRITER)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), reqwest::StatusCode::CREATED);
    let fetched = server.ask(Transport::Quic, &fetch("/docs/q.md")).await;
    for key in ["limit", "since", "query"] {
        assert_eq!(fetched.meta(key), "", "{key} was stored: {fetched:?}");
    }
    for header in ["meta-auth", "meta-expected-version", "meta-if-none-match"] {
        let put = server
            .web
            .put(server.url("/docs/m.md"))
            .bearer_auth(WRITER)
            .header(header, "x")
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), reqwest::StatusCode::BAD_REQUEST, "{header}");
    }
}

#[tokio::test]
async fn values_no_reader_could_read_back_are_refused_at_write_naming_the_key() {
    let server = default_server().await;
    for transport in BOTH {
        for value in [
            "a\u{2028}b",
            "a\u{2029}b",
            "a\u{85}b",
            "a\u{9b}b",
            "\u{feff}a",
        ] {
            let answer = server
                .ask(
                    transport,
                    &publish("/docs/v.md", "x").with_meta("note", value),
                )
                .await;
            assert_eq!(answer.status, Status::BadRequest, "{transport:?} {value:?}");
            assert!(answer.body.contains("\"note\""), "{}", answer.body);
        }
        let answer = server
            .ask(transport, &publish("/notes/a\u{2028}b.md", "x"))
            .await;
        assert_eq!(answer.status, Status::BadRequest, "{transport:?}");
        // A timestamp with a long fraction is stored and reads back on every transport.
        let long = "2026-01-01T00:00:00.9999999999Z";
        let answer = server
            .ask(
                transport,
                &publish("/docs/t.md", "x").with_meta("note", long),
            )
            .await;
        assert!(
            matches!(answer.status, Status::Created | Status::Ok),
            "{answer:?}"
        );
        for reader in BOTH {
            let fetched = server.ask(reader, &fetch("/docs/t.md")).await;
            assert_eq!(fetched.status, Status::Ok);
            assert_eq!(fetched.meta("note"), long);
        }
    }
}

#[tokio::test]
async fn the_token_label_that_authorised_a_write_leads_its_agent() {
    let server = default_server().await;
    let mut watch = server
        .connection
        .watch(&Request::new(Verb::Watch, "/docs/"))
        .await
        .unwrap();
    assert!(matches!(
        watch.next().await.unwrap(),
        Some(WatchBlock::Control {
            status: Status::Ok,
            ..
        })
    ));
    let spoofed = Request::new(Verb::Publish, "/docs/a.md")
        .with_meta("auth", OTHER_WRITER)
        .with_meta("agent", "2026-01-01T00:00:00.9999999999Z")
        .with_body("x");
    for transport in BOTH {
        let answer = server.ask(transport, &spoofed).await;
        assert!(matches!(answer.status, Status::Created | Status::Ok));
        let fetched = server.ask(transport, &fetch("/docs/a.md")).await;
        assert_eq!(
            fetched.meta("agent"),
            "other-writer (2026-01-01T00:00:00.9999999999Z)",
            "{transport:?}"
        );
    }
    let event = tokio::time::timeout(GUARD, watch.next())
        .await
        .unwrap()
        .unwrap();
    match event {
        Some(WatchBlock::Event(event)) => assert_eq!(
            event.agent.as_deref(),
            Some("other-writer (2026-01-01T00:00:00.9999999999Z)")
        ),
        other => panic!("expected an event, got {other:?}"),
    }
}

// -- status mapping -------------------------------------------------------------------------

#[tokio::test]
async fn an_empty_append_is_a_bad_request() {
    let server = default_server().await;
    published(&server, "/docs/a.md", "x").await;
    for transport in BOTH {
        let answer = server
            .ask(
                transport,
                &Request::new(Verb::Append, "/docs/a.md")
                    .with_meta("auth", WRITER)
                    .with_meta("expected-version", "1"),
            )
            .await;
        assert_eq!(
            answer.status,
            Status::BadRequest,
            "{transport:?}: {answer:?}"
        );
    }
    let http = server
        .web
        .post(server.url("/docs/a.md?append"))
        .bearer_auth(WRITER)
        .header("expected-version", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(http.status(), reqwest::StatusCode::BAD_REQUEST);
}

// -- 3. limits per client -------------------------------------------------------------------

#[tokio::test]
async fn one_client_spending_its_rate_leaves_other_clients_served() {
    for transport in BOTH {
        let limits = LimitSettings {
            client_requests_per_second: NonZeroU32::new(1).unwrap(),
            client_burst: NonZeroU32::new(3).unwrap(),
            ..LimitSettings::default()
        };
        let server = start(limits, HttpSettings::default()).await;
        let as_writer = || fetch("/docs/none.md").with_meta("auth", WRITER);
        // Counted, not timed: a burst of three, then refused.
        for _ in 0..3 {
            let answer = server.ask(transport, &as_writer()).await;
            assert_eq!(answer.status, Status::NotFound, "{transport:?}");
        }
        let refused = server.ask(transport, &as_writer()).await;
        assert_eq!(refused.status, Status::RateLimited, "{transport:?}");
        assert_eq!(refused.meta("retry-after"), "1");
        // Another token's client, and an anonymous client (its peer address), are served.
        let other = server
            .ask(
                transport,
                &fetch("/docs/none.md").with_meta("auth", OTHER_WRITER),
            )
            .await;
        assert_eq!(other.status, Status::NotFound, "{transport:?}");
        let anonymous = server.ask(transport, &fetch("/docs/none.md")).await;
        assert_eq!(anonymous.status, Status::NotFound, "{transport:?}");
    }
}

// -- 4. transport hygiene -------------------------------------------------------------------

/// Reads until the server closes the connection; what it sent first.
async fn until_closed(stream: &mut tokio::net::TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout(GUARD, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(read)) => seen.extend_from_slice(&buffer[..read]),
            Err(_) => panic!("the server never closed the connection"),
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

async fn connect(server: &Server) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(server.http).await.unwrap()
}

#[tokio::test]
async fn slow_and_half_sent_requests_are_closed_by_their_timeouts_while_others_are_served() {
    let limits = LimitSettings {
        request_timeout: Duration::from_millis(500),
        ..LimitSettings::default()
    };
    let settings = HttpSettings {
        header_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        max_connections: 256,
        ..HttpSettings::default()
    };
    let server = start(limits, settings).await;
    published(&server, "/docs/a.md", "# A").await;

    // HTTP: connections that send nothing, half a header, or half a body.
    let mut silent = Vec::new();
    let mut half_headers = Vec::new();
    let mut half_bodies = Vec::new();
    for _ in 0..20 {
        silent.push(connect(&server).await);
        let mut stream = connect(&server).await;
        stream
            .write_all(b"GET /docs/a.md HTTP/1.1\r\nHost: test\r\nX-Slow: ")
            .await
            .unwrap();
        half_headers.push(stream);
        let mut stream = connect(&server).await;
        stream
            .write_all(
                format!(
                    "PUT /docs/b.md HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {WRITER}\r\nContent-Length: 1000\r\n\r\nonly a little"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        half_bodies.push(stream);
    }
    // QUIC: streams that send half a request and never finish, on a connection of their
    // own (a connection's own slow streams delay its later ones).
    let slow = server
        .client
        .connect(server.quic, "localhost")
        .await
        .unwrap();
    let mut half_streams = Vec::new();
    for _ in 0..8 {
        let (mut send, recv) = slow.quic().open_bi().await.unwrap();
        send.write_all(b"PUBLISH /docs/c.md\n---\nauth: x\n")
            .await
            .unwrap();
        half_streams.push((send, recv));
    }

    // A normal client is served on both transports meanwhile.
    for transport in BOTH {
        let answer = server.ask(transport, &fetch("/docs/a.md")).await;
        assert_eq!(answer.status, Status::Ok, "{transport:?}");
    }
    let other_connection = server
        .client
        .connect(server.quic, "localhost")
        .await
        .unwrap();
    assert_eq!(
        other_connection
            .request(&fetch("/docs/a.md"))
            .await
            .unwrap()
            .status,
        Status::Ok
    );

    // Every slow connection is closed by its timeout.
    for mut stream in silent {
        assert_eq!(until_closed(&mut stream).await, "");
    }
    for mut stream in half_headers {
        let seen = until_closed(&mut stream).await;
        assert!(!seen.starts_with("HTTP/1.1 200"), "{seen}");
    }
    for mut stream in half_bodies {
        let seen = until_closed(&mut stream).await;
        assert!(seen.starts_with("HTTP/1.1 408"), "{seen}");
    }
    for (_send, mut recv) in half_streams {
        let bytes = tokio::time::timeout(GUARD, recv.read_to_end(1 << 20))
            .await
            .unwrap()
            .unwrap();
        let response = Response::parse(&bytes).unwrap();
        assert_eq!(response.status, Status::ServerError);
        assert!(String::from_utf8_lossy(&response.body).contains("timed out"));
    }
    // An idle keep-alive connection is closed too, after its answer.
    let mut kept = connect(&server).await;
    kept.write_all(b"GET /docs/a.md HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let seen = until_closed(&mut kept).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
}

#[tokio::test]
async fn connections_beyond_the_cap_are_closed_at_once() {
    let settings = HttpSettings {
        max_connections: 4,
        header_timeout: Duration::from_secs(60),
        ..HttpSettings::default()
    };
    let server = start(LimitSettings::default(), settings).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = connect(&server).await;
        // Answered, so the connection is surely accepted before the next one comes.
        stream
            .write_all(b"GET /livez HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 256];
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
        held.push(stream);
    }
    let mut beyond = connect(&server).await;
    assert_eq!(until_closed(&mut beyond).await, "");
    // The four held connections still work.
    for stream in &mut held {
        stream
            .write_all(b"GET /livez HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 256];
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
    }
    drop(held);
    // QUIC: at most `max_connections` (8 here; one is the test's own first connection).
    // Past half of them, each handshake first proves the client's address (a Retry, which
    // the client answers by itself).
    let mut open = Vec::new();
    for _ in 0..7 {
        let connection = server
            .client
            .connect(server.quic, "localhost")
            .await
            .unwrap();
        assert_eq!(
            connection.request(&fetch("/health")).await.unwrap().status,
            Status::Ok
        );
        open.push(connection);
    }
    assert!(
        server
            .client
            .connect(server.quic, "localhost")
            .await
            .is_err(),
        "a ninth connection is refused"
    );
}

#[tokio::test]
async fn http2_is_not_served_and_an_oversized_body_is_refused_unread() {
    let server = default_server().await;
    let mut stream = connect(&server).await;
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let seen = until_closed(&mut stream).await;
    // An HTTP/2 server would answer with a SETTINGS frame (type 4) in binary.
    assert!(seen.is_empty() || seen.starts_with("HTTP/1.1 "), "{seen:?}");

    let mut stream = connect(&server).await;
    stream
        .write_all(
            format!(
                "PUT /docs/big.md HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {WRITER}\r\nContent-Length: 104857600\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let seen = until_closed(&mut stream).await;
    assert!(seen.starts_with("HTTP/1.1 413"), "{seen}");
}

/// Configured, HTTP/2 (prior knowledge) is served with its limits: the server's SETTINGS
/// announce the stream cap, the stream window and the header list size.
#[tokio::test]
async fn http2_when_configured_is_served_with_its_limits() {
    let settings = HttpSettings {
        http2: true,
        ..HttpSettings::default()
    };
    let server = start(LimitSettings::default(), settings).await;
    let mut stream = connect(&server).await;
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut header = [0u8; 9];
    tokio::time::timeout(GUARD, stream.read_exact(&mut header))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(header[3], 4, "the server's first frame is SETTINGS");
    let length =
        usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
    let mut payload = vec![0u8; length];
    stream.read_exact(&mut payload).await.unwrap();
    let settings: BTreeMap<u16, u32> = payload
        .chunks(6)
        .map(|e| {
            (
                u16::from_be_bytes([e[0], e[1]]),
                u32::from_be_bytes([e[2], e[3], e[4], e[5]]),
            )
        })
        .collect();
    assert_eq!(
        settings.get(&0x3),
        Some(&http::H2_MAX_STREAMS),
        "{settings:?}"
    );
    assert_eq!(
        settings.get(&0x4),
        Some(&http::H2_STREAM_WINDOW),
        "{settings:?}"
    );
    assert_eq!(
        settings.get(&0x6),
        Some(&(http::MAX_HEADER_BUFFER as u32)),
        "{settings:?}"
    );
}

#[tokio::test]
async fn a_client_holding_its_share_of_slots_leaves_the_others_served() {
    let limits = LimitSettings {
        client_concurrent_requests: NonZeroU32::new(2).unwrap(),
        max_concurrent_requests: NonZeroU32::new(3).unwrap(),
        queue_wait: Duration::ZERO,
        ..LimitSettings::default()
    };
    let server = start(limits, HttpSettings::default()).await;
    // Two PUTs of one client admitted and stalled in their bodies hold its two slots.
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut stream = connect(&server).await;
        stream
            .write_all(
                format!(
                    "PUT /docs/slow.md HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {WRITER}\r\nContent-Length: 100\r\n\r\nx"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        stalled.push(stream);
    }
    // Counted, not timed: the client's next request waits for nothing and is refused…
    let refused = loop {
        let answer = server
            .ask(
                Transport::Http,
                &fetch("/docs/none.md").with_meta("auth", WRITER),
            )
            .await;
        if answer.status == Status::RateLimited {
            break answer;
        }
        // Both stalled PUTs may not be admitted yet: this one then found a slot.
        assert_eq!(answer.status, Status::NotFound);
    };
    assert!(refused.body.contains("for this client"), "{}", refused.body);
    // …while another client is served, and the world's last slot stays for others.
    for secret in [OTHER_WRITER, NOTES_READER] {
        let answer = server
            .ask(
                Transport::Http,
                &fetch("/docs/none.md").with_meta("auth", secret),
            )
            .await;
        assert_eq!(answer.status, Status::NotFound, "{secret}");
    }
    drop(stalled);
}

// -- the review's smaller findings, continued -----------------------------------------------

/// `If-None-Match: *` matches any current version; an HTTP-date `If-Modified-Since` is
/// understood (review 16).
#[tokio::test]
async fn if_none_match_star_and_http_dates_are_honoured() {
    let server = default_server().await;
    published(&server, "/docs/a.md", "# A").await;
    published(&server, "/docs/sub/b.md", "# B").await;
    let get = |path: &str, header: &'static str, value: &str| {
        server
            .web
            .get(server.url(path))
            .header(header, value)
            .send()
    };
    for path in ["/docs/a.md", "/docs/"] {
        let star = get(path, "if-none-match", "*").await.unwrap();
        assert_eq!(star.status(), reqwest::StatusCode::NOT_MODIFIED, "{path}");
    }
    let absent = get("/docs/none.md", "if-none-match", "*").await.unwrap();
    assert_eq!(absent.status(), reqwest::StatusCode::NOT_FOUND);
    let etag = get("/docs/a.md", "x-none", "").await.unwrap().headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    let listed = get("/docs/a.md", "if-none-match", &format!("\"other\", {etag}"))
        .await
        .unwrap();
    assert_eq!(listed.status(), reqwest::StatusCode::NOT_MODIFIED);
    let future = "Fri, 01 Jan 2100 00:00:00 GMT";
    let past = "Sun, 06 Nov 1994 08:49:37 GMT";
    let later = get("/docs/a.md", "if-modified-since", future)
        .await
        .unwrap();
    assert_eq!(later.status(), reqwest::StatusCode::NOT_MODIFIED);
    let earlier = get("/docs/a.md", "if-modified-since", past).await.unwrap();
    assert_eq!(earlier.status(), reqwest::StatusCode::OK);
    // The same over Mark.
    let star = server
        .ask(
            Transport::Quic,
            &fetch("/docs/a.md").with_meta("if-none-match", "*"),
        )
        .await;
    assert_eq!(star.status, Status::NotModified);
}

/// Names that display as others are refused at write, and so are token patterns no such
/// write could match (review 13).
#[tokio::test]
async fn paths_that_display_as_other_paths_are_refused_at_write() {
    let server = default_server().await;
    for transport in BOTH {
        for (path, why) in [
            ("/docs/cafe\u{301}.md", "normalisation form C"),
            ("/docs/\u{202e}dm.txt\u{202c}.md", "bidirectional"),
            ("/docs/a\u{2067}b.md", "bidirectional"),
        ] {
            let answer = server.ask(transport, &publish(path, "x")).await;
            assert_eq!(answer.status, Status::BadRequest, "{transport:?} {path:?}");
            assert!(answer.body.contains(why), "{transport:?}: {}", answer.body);
        }
        let composed = server
            .ask(transport, &publish("/docs/caf\u{e9}.md", "x"))
            .await;
        assert!(
            matches!(composed.status, Status::Created | Status::Ok),
            "{composed:?}"
        );
    }
    assert!(PathPattern::parse("/docs/cafe\u{301}.md").is_err());
    assert!(PathPattern::parse("/docs/\u{202e}x/**").is_err());
}

/// `/metrics`, `/livez` and `/readyz` are the gateway's own only as a bare GET: a world
/// directory of that name stays reachable (review 13).
#[tokio::test]
async fn operational_endpoints_do_not_shadow_world_directories() {
    let server = default_server().await;
    for name in ["metrics", "livez", "readyz"] {
        published(&server, &format!("/{name}/a.md"), "# A").await;
        let listed = server
            .ask(
                Transport::Http,
                &Request::new(Verb::List, format!("/{name}")),
            )
            .await;
        assert_eq!(listed.status, Status::Ok, "{name}");
        assert!(listed.body.contains("a.md"), "{name}: {}", listed.body);
        let slash = server
            .web
            .get(server.url(&format!("/{name}/")))
            .send()
            .await
            .unwrap();
        assert!(slash.text().await.unwrap().contains("a.md"), "{name}");
        let quic = server
            .ask(
                Transport::Quic,
                &Request::new(Verb::List, format!("/{name}")),
            )
            .await;
        assert!(quic.body.contains("a.md"), "{name}: {}", quic.body);
    }
    let bare = server.web.get(server.url("/metrics")).send().await.unwrap();
    assert!(bare.text().await.unwrap().contains("quire_requests_total"));
    let live = server.web.get(server.url("/livez")).send().await.unwrap();
    assert_eq!(live.text().await.unwrap(), "ok\n");
}

/// A LOOKUP of many short terms (each a scan of every gram it prefixes) is refused before
/// it costs anything (review 9).
#[tokio::test]
async fn a_lookup_of_many_short_terms_is_refused() {
    let server = default_server().await;
    published(&server, "/docs/a.md", "# Alpha").await;
    let letters = "a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5";
    for transport in BOTH {
        let many = Request::new(Verb::Lookup, "/").with_meta("query", letters);
        let answer = server.ask(transport, &many).await;
        assert_eq!(answer.status, Status::BadRequest, "{transport:?}");
        assert!(
            answer.body.contains("fewer than 3 characters"),
            "{}",
            answer.body
        );
        let two = Request::new(Verb::Lookup, "/").with_meta("query", "al ph alpha");
        let answer = server.ask(transport, &two).await;
        assert_eq!(answer.status, Status::Ok, "{transport:?}: {}", answer.body);
    }
}

/// A listing over a directory of entries the caller may not read examines a bounded span
/// per page, and its cursors name none of those entries (review 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_denied_entries_costs_a_bounded_span_per_page() {
    let server = default_server().await;
    let denied = quire_server::handlers::MAX_EXAMINED + 5;
    let mut writes = tokio::task::JoinSet::new();
    for chunk in 0..8 {
        let store = server.store.clone();
        writes.spawn(async move {
            for n in (chunk..denied).step_by(8) {
                store
                    .publish(
                        &Ctx::new(),
                        WriteRequest::new(format!("/notes/secret-{n:05}.md"), "x"),
                    )
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(done) = writes.join_next().await {
        done.unwrap();
    }
    // The writes may outlast the QUIC connection's idle timeout: ask on a fresh one.
    let fresh = server
        .client
        .connect(server.quic, "localhost")
        .await
        .unwrap();
    let answer = fresh
        .request(&publish("/notes/zz/public.md", "# Public"))
        .await
        .unwrap();
    assert_eq!(answer.status, Status::Created);
    for transport in BOTH {
        let mut cursor: Option<String> = None;
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let mut request = Request::new(Verb::List, "/notes").with_meta("page-size", "5");
            if let Some(cursor) = &cursor {
                request = request.with_meta("cursor", cursor);
            }
            let answer = match transport {
                Transport::Quic => answer_of(&fresh.request(&request).await.unwrap()),
                Transport::Http => server.ask_http(&request).await,
            };
            assert_eq!(answer.status, Status::Ok, "{transport:?}: {}", answer.body);
            assert!(!answer.body.contains("secret"), "{}", answer.body);
            seen.extend(
                answer
                    .body
                    .lines()
                    .filter(|line| line.starts_with("- "))
                    .map(str::to_owned),
            );
            pages += 1;
            if answer.meta("complete") == "true" {
                break;
            }
            let next = answer.meta("next-cursor").to_owned();
            let decoded =
                base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &next)
                    .unwrap();
            assert!(
                !String::from_utf8_lossy(&decoded).contains("secret"),
                "a cursor names a denied entry"
            );
            cursor = Some(next);
        }
        assert_eq!(seen, ["- [zz/](zz/)"], "{transport:?}");
        assert_eq!(pages, 2, "{transport:?}: the first page stops at the cap");
    }
}

/// Over QUIC a request's body is read only once its client is admitted: a client over its
/// rate is answered at once, before its body has arrived.
#[tokio::test]
async fn a_quic_request_is_admitted_before_its_body_is_read() {
    let limits = LimitSettings {
        client_requests_per_second: NonZeroU32::new(1).unwrap(),
        client_burst: NonZeroU32::new(1).unwrap(),
        // Shorter than the guard: before, the server answered "timed out" at this point.
        request_timeout: Duration::from_secs(30),
        ..LimitSettings::default()
    };
    let server = start(limits, HttpSettings::default()).await;
    let spent = server
        .ask(
            Transport::Quic,
            &fetch("/docs/none.md").with_meta("auth", WRITER),
        )
        .await;
    assert_eq!(spent.status, Status::NotFound);
    let (mut send, mut recv) = server.connection.quic().open_bi().await.unwrap();
    send.write_all(
        format!("PUBLISH /docs/big.md\n---\nauth: {WRITER}\n---\nthe first part of a body")
            .as_bytes(),
    )
    .await
    .unwrap();
    // The stream is left open: before, the server waited for the rest until its timeout.
    let bytes = tokio::time::timeout(GUARD, recv.read_to_end(1 << 20))
        .await
        .expect("answered before the body ended")
        .unwrap();
    let response = Response::parse(&bytes).unwrap();
    assert_eq!(response.status, Status::RateLimited);
    drop(send);
}

/// A write its token does not allow is refused at its head, before it takes a slot or has
/// its body read, on both transports: a slow body without a write token holds nothing.
#[tokio::test]
async fn a_write_without_a_write_token_is_refused_before_its_body() {
    let limits = LimitSettings {
        request_timeout: Duration::from_secs(30),
        ..LimitSettings::default()
    };
    let settings = HttpSettings {
        body_timeout: Duration::from_secs(30),
        ..HttpSettings::default()
    };
    let server = start(limits, settings).await;
    for auth in ["", "Authorization: Bearer quire_unknown\r\n"] {
        let mut stream = connect(&server).await;
        stream
            .write_all(
                format!("PUT /docs/a.md HTTP/1.1\r\nHost: test\r\n{auth}Content-Length: 1000\r\n\r\nonly a little")
                    .as_bytes(),
            )
            .await
            .unwrap();
        let mut first = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(20), stream.read_exact(&mut first))
            .await
            .expect("answered before the body ended")
            .unwrap();
        assert_eq!(&first, b"HTTP/1.1 401", "{auth:?}");
    }
    for auth in ["", "---\nauth: quire_unknown\n---\n"] {
        let (mut send, mut recv) = server.connection.quic().open_bi().await.unwrap();
        let head = if auth.is_empty() {
            "PUBLISH /docs/a.md\n---\ntitle: t\n---\nthe first part".to_owned()
        } else {
            format!("PUBLISH /docs/a.md\n{auth}the first part")
        };
        send.write_all(head.as_bytes()).await.unwrap();
        let bytes = tokio::time::timeout(Duration::from_secs(20), recv.read_to_end(1 << 20))
            .await
            .expect("answered before the body ended")
            .unwrap();
        assert_eq!(
            Response::parse(&bytes).unwrap().status,
            Status::Unauthorized,
            "{auth:?}"
        );
        drop(send);
    }
}
