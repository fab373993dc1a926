//! The GCS driver: the requests and error mapping the emulator cannot show, checked against
//! a recording stub server on 127.0.0.1 (the blob suite on the emulator is in drivers.rs).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use quire_blob::gcs::{GcsAuth, GcsConfig, GcsStore};
use quire_blob::{BlobStore, ErrorKind, Generation, Op};

const STUB_BUCKET: &str = "quire-stub";
const STUB_TOKEN: &str = "stub-token";

// ---- a recording HTTP stub ----

/// One request the stub received.
#[derive(Clone, Debug)]
struct Recorded {
    method: String,
    /// Path and query, as sent.
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

enum Reply {
    Respond {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// Close the connection without answering (a lost response).
    HangUp,
    /// Keep the connection open without answering until the client gives up.
    Stall,
}

fn json_reply(status: u16, body: serde_json::Value) -> Reply {
    Reply::Respond {
        status,
        headers: vec![("Content-Type", "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

fn error_reply(status: u16) -> Reply {
    json_reply(
        status,
        serde_json::json!({"error": {"code": status, "message": "stub says no"}}),
    )
}

struct Stub {
    endpoint: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Stub {
    /// Serves every connection on its own thread, answering with `handler`.
    fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler = Arc::new(handler);
        let recorded = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (handler, recorded) = (handler.clone(), recorded.clone());
                std::thread::spawn(move || serve(stream, handler.as_ref(), &recorded));
            }
        });
        Stub { endpoint, requests }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    fn store(&self) -> GcsStore {
        self.store_with(GcsAuth::StaticToken(STUB_TOKEN.into()))
    }

    fn store_with(&self, auth: GcsAuth) -> GcsStore {
        let mut config = GcsConfig::new(STUB_BUCKET, auth).with_endpoint(&self.endpoint);
        config.timeout = Duration::from_secs(10);
        GcsStore::new(config).unwrap()
    }
}

fn serve(
    stream: TcpStream,
    handler: &(dyn Fn(&Recorded) -> Reply + Sync),
    log: &Mutex<Vec<Recorded>>,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    // One request per connection: every answer says `Connection: close`.
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':').unwrap();
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse::<usize>().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request = Recorded {
        method,
        target,
        headers,
        body,
    };
    log.lock().unwrap().push(request.clone());
    let mut stream = stream;
    match handler(&request) {
        Reply::Respond {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} Stub\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
        Reply::HangUp => {}
        Reply::Stall => {
            // Returns when the client closes the connection.
            let _ = reader.read(&mut [0; 1]);
        }
    }
}

/// The object resource GCS answers with; "hello world" has CRC32C `yZRlqg==`.
fn resource(name: &str, generation: &str, size: usize, crc32c: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "storage#object",
        "name": name,
        "bucket": STUB_BUCKET,
        "size": size.to_string(),
        "generation": generation,
        "updated": "2026-01-02T03:04:05.678Z",
        "crc32c": crc32c,
    })
}

// ---- what the emulator cannot show ----

#[tokio::test]
async fn delete_sends_the_generation_condition_and_maps_412_to_precondition() {
    let stub = Stub::start(|request| match request.target.as_str() {
        t if t.ends_with("ifGenerationMatch=1111") => error_reply(412),
        t if t.ends_with("ifGenerationMatch=2222") => Reply::Respond {
            status: 204,
            headers: vec![],
            body: vec![],
        },
        _ => error_reply(404),
    });
    let store = stub.store();
    let key = "dir/a b?c";
    let err = store
        .delete(key, &Generation::new("1111"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.op(), err.key()),
        (ErrorKind::Precondition, Op::Delete, key),
        "{err}"
    );
    store.delete(key, &Generation::new("2222")).await.unwrap();
    let err = store
        .delete("missing", &Generation::new("3333"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Precondition, "{err}");

    let requests = stub.requests();
    let targets: Vec<(&str, &str)> = requests
        .iter()
        .map(|r| (r.method.as_str(), r.target.as_str()))
        .collect();
    assert_eq!(
        targets,
        [
            (
                "DELETE",
                "/storage/v1/b/quire-stub/o/dir%2Fa%20b%3Fc?ifGenerationMatch=1111"
            ),
            (
                "DELETE",
                "/storage/v1/b/quire-stub/o/dir%2Fa%20b%3Fc?ifGenerationMatch=2222"
            ),
            (
                "DELETE",
                "/storage/v1/b/quire-stub/o/missing?ifGenerationMatch=3333"
            ),
        ]
    );
    for request in &requests {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {STUB_TOKEN}").as_str())
        );
    }
}

#[tokio::test]
async fn a_lost_create_response_is_ambiguous_and_not_retried() {
    let stub = Stub::start(|_| Reply::HangUp);
    let err = stub
        .store()
        .create("log/0001", Bytes::from_static(b"hello world"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.op(), err.key()),
        (ErrorKind::Ambiguous, Op::Create, "log/0001"),
        "{err}"
    );
    let requests = stub.requests();
    assert_eq!(requests.len(), 1, "the create was retried");
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(
        request.target,
        "/upload/storage/v1/b/quire-stub/o?uploadType=multipart&ifGenerationMatch=0"
    );
    let content_type = request.header("content-type").unwrap();
    let boundary = content_type
        .strip_prefix("multipart/related; boundary=")
        .unwrap();
    let body = String::from_utf8(request.body.clone()).unwrap();
    let parts: Vec<&str> = body.split(&format!("--{boundary}")).collect();
    assert_eq!(parts.len(), 4, "{body:?}");
    let (meta_head, meta) = parts[1].split_once("\r\n\r\n").unwrap();
    assert!(meta_head.contains("application/json"), "{meta_head}");
    let meta: serde_json::Value = serde_json::from_str(meta.trim_end()).unwrap();
    assert_eq!(meta["name"], "log/0001");
    assert_eq!(meta["crc32c"], "yZRlqg==");
    let (_, data) = parts[2].split_once("\r\n\r\n").unwrap();
    assert_eq!(data, "hello world\r\n");
    assert_eq!(parts[3], "--\r\n");
}

#[tokio::test]
async fn a_read_is_resent_once_after_a_dropped_connection() {
    let stub = Stub::start(|request| {
        if request.path().ends_with("/o/flaky") {
            Reply::HangUp
        } else {
            json_reply(200, resource("k", "9", 11, "yZRlqg=="))
        }
    });
    let store = stub.store();
    let err = store.head("flaky").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(stub.requests().len(), 2, "one read, re-sent once");
    let err = store
        .delete("flaky", &Generation::new("9"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    assert_eq!(stub.requests().len(), 3, "the delete was re-sent");
}

#[tokio::test]
async fn a_timed_out_replace_is_ambiguous_and_a_timed_out_read_unavailable() {
    let stub = Stub::start(|_| Reply::Stall);
    let mut config = GcsConfig::new(STUB_BUCKET, GcsAuth::StaticToken(STUB_TOKEN.into()))
        .with_endpoint(&stub.endpoint);
    config.timeout = Duration::from_millis(300);
    let store = GcsStore::new(config).unwrap();
    let err = store
        .replace("k", &Generation::new("5"), Bytes::from_static(b"v"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    let err = store.head("k").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(stub.requests()[0].target.ends_with("ifGenerationMatch=5"));
}

#[tokio::test]
async fn server_errors_are_ambiguous_for_mutations_and_unavailable_for_reads() {
    let stub = Stub::start(|_| error_reply(503));
    let store = stub.store();
    let generation = Generation::new("7");
    let data = Bytes::from_static(b"v");
    let mutations = [
        store.create("k", data.clone()).await.unwrap_err(),
        store.replace("k", &generation, data).await.unwrap_err(),
        store.delete("k", &generation).await.unwrap_err(),
    ];
    for err in mutations {
        assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    }
    let reads = [
        store.get("k").await.unwrap_err(),
        store.get_range("k", 0..4).await.unwrap_err(),
        store.head("k").await.unwrap_err(),
        store.list("p/", "", None).await.unwrap_err(),
    ];
    for err in reads {
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    }
    assert_eq!(stub.requests().len(), 7, "something was retried");
}

#[tokio::test]
async fn throttling_is_reported_as_such() {
    let stub = Stub::start(|_| error_reply(429));
    let store = stub.store();
    let err = store
        .create("k", Bytes::from_static(b"v"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Throttled, "{err}");
    let err = store.head("k").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Throttled, "{err}");
}

#[tokio::test]
async fn a_refused_connection_is_unavailable_even_for_a_create() {
    // A port that was free a moment ago and has no listener now: nothing can be sent.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = GcsConfig::new(STUB_BUCKET, GcsAuth::StaticToken(STUB_TOKEN.into()))
        .with_endpoint(format!("http://127.0.0.1:{port}"));
    let err = GcsStore::new(config)
        .unwrap()
        .create("k", Bytes::from_static(b"v"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn bogus_generations_are_refused_without_a_request() {
    let stub = Stub::start(|_| error_reply(500));
    let store = stub.store();
    for bogus in ["0", "-3", "abc", "", "012"] {
        let generation = Generation::new(bogus);
        let err = store.delete("k", &generation).await.unwrap_err();
        assert_eq!(
            (err.kind(), err.op()),
            (ErrorKind::Precondition, Op::Delete)
        );
        let err = store
            .replace("k", &generation, Bytes::from_static(b"v"))
            .await
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.op()),
            (ErrorKind::Precondition, Op::Replace)
        );
    }
    assert!(stub.requests().is_empty());
}

#[tokio::test]
async fn whole_reads_verify_the_checksum_and_pin_the_generation() {
    let stub = Stub::start(|request| {
        let good = request.path().ends_with("/o/good");
        if request.target.contains("alt=media") {
            Reply::Respond {
                status: 200,
                headers: vec![],
                body: b"hello world".to_vec(),
            }
        } else {
            let crc = if good { "yZRlqg==" } else { "AAAAAA==" };
            let name = if good { "good" } else { "corrupt" };
            json_reply(200, resource(name, "42", 11, crc))
        }
    });
    let store = stub.store();
    let object = store.get("good").await.unwrap();
    assert_eq!(object.data, Bytes::from_static(b"hello world"));
    assert_eq!(object.attributes.generation, Generation::new("42"));
    let err = store.get("corrupt").await.unwrap_err();
    assert_eq!(
        (err.kind(), err.op(), err.key()),
        (ErrorKind::Integrity, Op::Get, "corrupt"),
        "{err}"
    );
    let media: Vec<String> = stub
        .requests()
        .into_iter()
        .filter(|r| r.target.contains("alt=media"))
        .map(|r| r.target)
        .collect();
    assert_eq!(
        media[0],
        "/storage/v1/b/quire-stub/o/good?alt=media&generation=42"
    );
}

#[tokio::test]
async fn listing_drops_the_inclusive_start_and_rejects_disorder() {
    let stub = Stub::start(|request| {
        let items = if request.target.contains("prefix=bad%2F") {
            vec![
                resource("bad/b", "1", 1, "AAAAAA=="),
                resource("bad/a", "2", 1, "AAAAAA=="),
            ]
        } else {
            vec![
                resource("p/b", "1", 1, "AAAAAA=="),
                resource("p/c", "2", 1, "AAAAAA=="),
            ]
        };
        json_reply(
            200,
            serde_json::json!({"items": items, "nextPageToken": "opaque"}),
        )
    });
    let store = stub.store();
    let page = store.list("p/", "p/b", None).await.unwrap();
    let keys: Vec<&str> = page.objects.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, ["p/c"]);
    assert!(page.next_cursor.is_some(), "a page token means more keys");
    let err = store.list("bad/", "", None).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.op(), err.key()),
        (ErrorKind::Integrity, Op::List, "bad/"),
        "{err}"
    );
    let first = &stub.requests()[0];
    assert_eq!(
        first.target,
        "/storage/v1/b/quire-stub/o?prefix=p%2F&startOffset=p%2Fb&maxResults=1000\
         &fields=items%28name%2Csize%2Cgeneration%2Cupdated%29%2CnextPageToken"
    );
}

// ---- authentication ----

const TEST_KEY: &str = include_str!("fixtures/throwaway-rsa-key.pem");
const TEST_PUBLIC_KEY: &str = include_str!("fixtures/throwaway-rsa-key.pub.pem");

#[tokio::test]
async fn service_account_tokens_are_signed_exchanged_and_cached() {
    let token_uri = Arc::new(Mutex::new(String::new()));
    let expected_aud = token_uri.clone();
    let stub = Stub::start(move |request| {
        if request.path() == "/token" {
            let form = String::from_utf8(request.body.clone()).unwrap();
            let mut fields = form.split('&').filter_map(|pair| pair.split_once('='));
            let grant = fields.next().unwrap();
            assert_eq!(
                grant,
                (
                    "grant_type",
                    "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
                )
            );
            let (_, assertion) = fields.next().unwrap();
            let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
            validation.set_audience(&[expected_aud.lock().unwrap().as_str()]);
            let key = jsonwebtoken::DecodingKey::from_rsa_pem(TEST_PUBLIC_KEY.as_bytes()).unwrap();
            let claims = jsonwebtoken::decode::<serde_json::Value>(assertion, &key, &validation)
                .expect("a valid assertion")
                .claims;
            assert_eq!(claims["iss"], "quire@test.iam.example");
            assert!(
                claims["scope"]
                    .as_str()
                    .unwrap()
                    .ends_with("devstorage.read_write")
            );
            return json_reply(
                200,
                serde_json::json!({"access_token": "sa-token", "expires_in": 3600, "token_type": "Bearer"}),
            );
        }
        assert_eq!(request.header("authorization"), Some("Bearer sa-token"));
        json_reply(200, resource("k", "9", 11, "yZRlqg=="))
    });
    *token_uri.lock().unwrap() = format!("{}/token", stub.endpoint);
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("key.json");
    let key_file = serde_json::json!({
        "type": "service_account",
        "client_email": "quire@test.iam.example",
        "private_key_id": "test-key-1",
        "private_key": TEST_KEY,
        "token_uri": token_uri.lock().unwrap().clone(),
    });
    std::fs::write(&key_path, key_file.to_string()).unwrap();
    let store = stub.store_with(GcsAuth::ServiceAccountKey(key_path));
    for _ in 0..3 {
        assert_eq!(
            store.head("k").await.unwrap().generation,
            Generation::new("9")
        );
    }
    let token_requests = stub
        .requests()
        .iter()
        .filter(|r| r.path() == "/token")
        .count();
    assert_eq!(token_requests, 1, "the token was not cached");
}

#[tokio::test]
async fn metadata_server_tokens_are_used_when_configured() {
    let stub = Stub::start(|request| {
        if request.path() == "/computeMetadata/v1/instance/service-accounts/default/token" {
            if request.header("metadata-flavor") != Some("Google") {
                return error_reply(403);
            }
            return json_reply(
                200,
                serde_json::json!({"access_token": "md-token", "expires_in": 3599}),
            );
        }
        if request.header("authorization") != Some("Bearer md-token") {
            return error_reply(401);
        }
        json_reply(200, resource("k", "9", 11, "yZRlqg=="))
    });
    let store = stub.store_with(GcsAuth::MetadataServer {
        base_url: stub.endpoint.clone(),
    });
    store.head("k").await.unwrap();
    store.head("k").await.unwrap();
    assert_eq!(stub.requests().len(), 3, "one token fetch, two reads");
}

#[tokio::test]
async fn a_failed_token_fetch_sends_nothing_and_is_unavailable() {
    let stub = Stub::start(|request| {
        if request.path().starts_with("/computeMetadata/") {
            error_reply(500)
        } else {
            json_reply(200, resource("k", "9", 11, "yZRlqg=="))
        }
    });
    let store = stub.store_with(GcsAuth::MetadataServer {
        base_url: stub.endpoint.clone(),
    });
    let err = store
        .create("k", Bytes::from_static(b"v"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.op()),
        (ErrorKind::Unavailable, Op::Create),
        "{err}"
    );
    assert_eq!(stub.requests().len(), 1, "only the token request");
}
