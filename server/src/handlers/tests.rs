//! Handler rules over a file store: statuses and metadata of every verb.

use std::sync::Arc;

use quire_backend::file::{FileOptions, FileStore};

use super::*;
use crate::auth::{Operation, PathPattern, Token, TokenRegistry, TokenStore};
use crate::limits::LimitSettings;

const SECRET: &str = "quire_test-secret";

async fn world(dir: &std::path::Path, tokens: Vec<Token>) -> World {
    let options = FileOptions {
        durable: false,
        ..FileOptions::default()
    };
    let store = FileStore::open(dir, options).await.unwrap();
    let auth = if tokens.is_empty() {
        Authorizer::without_tokens()
    } else {
        let store = TokenStore::new(tokens).unwrap();
        Authorizer::new(Some(Arc::new(TokenRegistry::fixed(store))))
    };
    World::new("test", Arc::new(store), auth)
}

fn writer() -> Token {
    Token::new(
        "writer",
        crate::auth::TokenHash::of_secret(SECRET),
        vec![Operation::Publish],
        vec![PathPattern::parse("/**").unwrap()],
        None,
    )
}

fn req(verb: Verb, path: &str) -> Request {
    Request::new(verb, path).with_meta("auth", SECRET)
}

#[tokio::test]
async fn publish_fetch_versions_and_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path(), vec![writer()]).await;
    let created = handle(&w, req(Verb::Publish, "/docs/a.md").with_body("# A\n")).await;
    assert_eq!(created.status, Status::Created, "{created:?}");
    assert_eq!(created.metadata["version"], "1");

    let again = handle(&w, req(Verb::Publish, "/docs/a.md").with_body("# A\n")).await;
    assert_eq!(
        (again.status, again.metadata["version"].as_str()),
        (Status::Ok, "1")
    );

    let conflict = handle(
        &w,
        req(Verb::Publish, "/docs/a.md")
            .with_meta("expected-version", "0")
            .with_body("x"),
    )
    .await;
    assert_eq!(conflict.status, Status::Conflict);
    assert_eq!(conflict.metadata["server-version"], "1");
    assert_eq!(conflict.metadata["your-version"], "0");

    let fetched = handle(&w, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(fetched.status, Status::Ok);
    assert_eq!(&fetched.body[..], b"# A\n");
    assert_eq!(fetched.metadata["type"], "Document");
    let etag = fetched.metadata["etag"].clone();
    let cached = handle(
        &w,
        Request::new(Verb::Fetch, "/docs/a.md").with_meta("if-none-match", etag),
    )
    .await;
    assert_eq!(cached.status, Status::NotModified);

    let current_hash = fetched.metadata["content-hash"].replacen("blake3-", "/blake3-", 1);
    let resolved = handle(&w, Request::new(Verb::Fetch, &current_hash)).await;
    assert_eq!(
        (resolved.status, &resolved.body[..]),
        (Status::Ok, &b"# A\n"[..])
    );
    let reserved = handle(&w, req(Verb::Publish, &current_hash).with_body("x")).await;
    assert_eq!(reserved.status, Status::BadRequest);

    let appended = handle(
        &w,
        req(Verb::Append, "/docs/a.md")
            .with_meta("expected-version", "1")
            .with_body("more"),
    )
    .await;
    assert_eq!(appended.status, Status::Created, "{appended:?}");
    let v1 = handle(&w, Request::new(Verb::Fetch, "/docs/a.md/v1")).await;
    assert_eq!(
        (v1.status, v1.metadata["current-version"].as_str()),
        (Status::Ok, "2")
    );

    let history = handle(&w, Request::new(Verb::Versions, "/docs/a.md")).await;
    assert_eq!(history.metadata["total"], "2");
    assert_eq!(history.metadata["chain-valid"], "true");

    let by_hash = fetched.metadata["content-hash"].replacen("blake3-", "/blake3-", 1);
    assert_eq!(
        handle(&w, Request::new(Verb::Fetch, &by_hash)).await.status,
        Status::NotFound
    );

    let archived = handle(&w, req(Verb::Archive, "/docs/a.md")).await;
    assert_eq!(archived.metadata["archived"], "true");
    let gone = handle(&w, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(gone.status, Status::Archived);
    let blocked = handle(&w, req(Verb::Publish, "/docs/a.md").with_body("y")).await;
    assert_eq!(blocked.status, Status::Archived);
    let unarchived = handle(&w, req(Verb::Publish, "/docs/a.md")).await;
    assert_eq!(unarchived.status, Status::Ok);
    assert_eq!(
        handle(&w, Request::new(Verb::Fetch, "/docs/a.md"))
            .await
            .status,
        Status::Ok
    );
}

#[tokio::test]
async fn prelude_rules() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path(), vec![writer()]).await;
    let dotdot = handle(&w, Request::new(Verb::Publish, "/a/../b.md")).await;
    assert_eq!(dotdot.status, Status::NotFound);
    let health = handle(&w, Request::new(Verb::Fetch, "/health")).await;
    assert_eq!(&health.body[..], HEALTH_BODY.as_bytes());
    let anonymous = handle(&w, Request::new(Verb::Publish, "/a.md").with_body("x")).await;
    assert_eq!(anonymous.status, Status::Unauthorized);
    let not_md = handle(&w, req(Verb::Publish, "/a.txt").with_body("x")).await;
    assert_eq!(not_md.status, Status::BadRequest);
    let reserved = handle(
        &w,
        req(Verb::Publish, "/a.md")
            .with_meta("version", "3")
            .with_body("x"),
    )
    .await;
    assert_eq!(reserved.status, Status::BadRequest);
    let no_expected = handle(&w, req(Verb::Append, "/a.md").with_body("x")).await;
    assert_eq!(no_expected.status, Status::BadRequest);
    let missing = handle(&w, req(Verb::Archive, "/nope.md")).await;
    assert_eq!(missing.status, Status::NotFound);

    let tokenless = world(tempfile::tempdir().unwrap().path(), vec![]).await;
    let refused = handle(&tokenless, req(Verb::Publish, "/a.md").with_body("x")).await;
    assert_eq!(refused.status, Status::NotPermitted);
}

#[tokio::test]
async fn list_pages_with_cursor_and_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path(), vec![writer()]).await;
    for name in ["a", "b", "c"] {
        let body = format!("# Title {name}\n");
        let r = handle(
            &w,
            req(Verb::Publish, &format!("/docs/{name}.md"))
                .with_meta("tags", "wire")
                .with_body(body),
        )
        .await;
        assert_eq!(r.status, Status::Created);
    }
    let first = handle(
        &w,
        Request::new(Verb::List, "/docs").with_meta("page-size", "2"),
    )
    .await;
    assert_eq!(first.metadata["entries"], "2");
    assert_eq!(first.metadata["complete"], "false");
    let cursor = first.metadata["next-cursor"].clone();
    let second = handle(
        &w,
        Request::new(Verb::List, "/docs")
            .with_meta("page-size", "2")
            .with_meta("cursor", cursor.clone()),
    )
    .await;
    assert_eq!(second.metadata["complete"], "true");
    assert!(
        std::str::from_utf8(&second.body)
            .unwrap()
            .contains("- [c.md](c.md)")
    );
    let other_dir = handle(
        &w,
        Request::new(Verb::List, "/").with_meta("cursor", cursor),
    )
    .await;
    assert_eq!(other_dir.status, Status::BadRequest);
    let listing = handle(&w, Request::new(Verb::Fetch, "/docs")).await;
    assert_eq!(listing.metadata["entries"], "3");

    let found = handle(
        &w,
        Request::new(Verb::Lookup, "/").with_meta("query", "title"),
    )
    .await;
    assert_eq!(found.metadata["matches"], "3", "{found:?}");
    let limited = handle(
        &w,
        Request::new(Verb::Lookup, "/docs")
            .with_meta("query", "*")
            .with_meta("limit", "1"),
    )
    .await;
    assert_eq!(limited.metadata["matches"], "1");
    let short = handle(&w, Request::new(Verb::Lookup, "/").with_meta("query", "x")).await;
    assert_eq!(short.status, Status::BadRequest);
    let no_scope = handle(
        &w,
        Request::new(Verb::Lookup, "/nope").with_meta("query", "*"),
    )
    .await;
    assert_eq!(no_scope.status, Status::NotFound);
}

/// Rows the caller may not read do not count towards the limit: the store is asked for the
/// limit first and for more on the same view when hidden rows left too few.
#[tokio::test]
async fn lookup_limit_counts_only_rows_the_caller_may_read() {
    let dir = tempfile::tempdir().unwrap();
    let secret_reader = Token::new(
        "secret-reader",
        crate::auth::TokenHash::of_secret("quire_test-other"),
        vec![Operation::Read],
        vec![PathPattern::parse("/secret/**").unwrap()],
        None,
    );
    let w = world(dir.path(), vec![writer(), secret_reader]).await;
    // The hidden documents rank first (higher importance), more of them than the limit. The
    // open ones rank by importance alone (their modified times may differ), n00 first.
    for (dir, count, importance) in [("secret", 20, 90), ("open", 3, 30)] {
        for i in 0..count {
            let r = handle(
                &w,
                req(Verb::Publish, &format!("/{dir}/n{i:02}.md"))
                    .with_meta("tags", "widen")
                    .with_meta("importance", format!("0.{}", importance - i))
                    .with_body("# Note\n"),
            )
            .await;
            assert_eq!(r.status, Status::Created, "{r:?}");
        }
    }
    let found = handle(
        &w,
        Request::new(Verb::Lookup, "/")
            .with_meta("query", "widen")
            .with_meta("limit", "2"),
    )
    .await;
    assert_eq!(found.status, Status::Ok, "{found:?}");
    assert_eq!(found.metadata["matches"], "2", "{found:?}");
    let text = std::str::from_utf8(&found.body).unwrap();
    assert!(
        text.contains("| /open/n00.md |") && text.contains("| /open/n01.md |"),
        "{text}"
    );
    assert!(!text.contains("/secret/"), "{text}");
    let all = handle(
        &w,
        Request::new(Verb::Lookup, "/")
            .with_meta("query", "widen")
            .with_meta("limit", "50"),
    )
    .await;
    assert_eq!(all.metadata["matches"], "3", "{all:?}");
}

#[test]
fn cursor_round_trip_matches_reference() {
    assert_eq!(
        list::encode_cursor("/docs", false, "a.md"),
        "AQAABS9kb2NzYS5tZA"
    );
    assert_eq!(
        list::decode_cursor("AQAABS9kb2NzYS5tZA", "/docs", false).as_deref(),
        Some("a.md")
    );
    assert_eq!(
        list::decode_cursor("AQAABS9kb2NzYS5tZA", "/docs", true),
        None
    );
}

/// A body LOOKUP whose store has no section index of the request's snapshot in time is
/// answered from the catalog on the same view and says so; once the index is there, it
/// answers sections.
#[tokio::test(start_paused = true)]
async fn body_lookup_falls_back_to_the_catalog_while_the_index_is_not_ready() {
    use quire_backend::bucket::{BucketOptions, BucketStore};
    use quire_blob::memory::MemoryStore;
    use quire_blob::{BlobStore, Simulated};

    let simulated = Simulated::new(Arc::new(MemoryStore::new()), 5);
    let blobs: Arc<dyn BlobStore> = Arc::new(simulated.clone());
    let options = BucketOptions {
        compaction: None,
        ..BucketOptions::default()
    };
    let store = BucketStore::open(blobs, options).await.unwrap();
    let auth = Authorizer::new(Some(Arc::new(TokenRegistry::fixed(
        TokenStore::new(vec![writer()]).unwrap(),
    ))));
    let w = World::new("test", Arc::new(store), auth);
    let put = handle(
        &w,
        req(Verb::Publish, "/docs/a.md")
            .with_meta("tags", "alpha")
            .with_body("# Alpha\n\n## Body\n\nalpha words\n"),
    )
    .await;
    assert_eq!(put.status, Status::Created, "{put:?}");
    let lookup = || {
        Request::new(Verb::Lookup, "/")
            .with_meta("query", "alpha")
            .with_meta("match", "body")
    };
    // Inline bodies are read from their slot with a ranged get: park those reads.
    let hold = simulated.hold(quire_blob::Op::GetRange, "log/");
    let fallback = handle(&w, lookup()).await;
    assert_eq!(fallback.status, Status::Ok);
    assert_eq!(fallback.metadata["match"], "catalog");
    let text = std::str::from_utf8(&fallback.body).unwrap();
    assert!(
        text.contains("| /docs/a.md | 0.50 | Alpha | alpha |\n"),
        "{text}"
    );
    assert!(!text.contains("Snippet"), "{text}");
    hold.release();
    let mut answered = None;
    for _ in 0..30 {
        let found = handle(&w, lookup()).await;
        if found.metadata["match"] == "body" {
            answered = Some(found);
            break;
        }
    }
    let found = answered.expect("a body answer once the index is built");
    let text = std::str::from_utf8(&found.body).unwrap();
    // The tag meets the term, so the document is one catalog-answer row.
    assert!(text.contains("| Snippet |"), "{text}");
    assert!(
        text.contains("| /docs/a.md | 0.50 | Alpha | alpha |"),
        "{text}"
    );
}

#[tokio::test]
async fn a_request_out_of_time_is_unavailable_with_a_retry_hint() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path(), vec![writer()])
        .await
        .with_limits(LimitSettings {
            request_timeout: std::time::Duration::from_nanos(1),
            ..LimitSettings::default()
        });
    let answer = handle(&w, Request::new(Verb::Fetch, "/docs/a.md")).await;
    assert_eq!(answer.status, Status::Unavailable, "{answer:?}");
    assert_eq!(answer.metadata[RETRY_AFTER_KEY], "1");
    assert_eq!(
        crate::http::status_code(&answer),
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_token_expires_by_the_worlds_clock() {
    let dir = tempfile::tempdir().unwrap();
    let expiry = 2_000_000_000;
    let expiring = Token::new(
        "writer",
        crate::auth::TokenHash::of_secret(SECRET),
        vec![Operation::Publish],
        vec![PathPattern::parse("/**").unwrap()],
        Some(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(expiry)),
    );
    let clock = Arc::new(quire_log::ManualClock::new(quire_log::Timestamp(
        expiry - 1,
    )));
    let w = world(dir.path(), vec![expiring])
        .await
        .with_clock(clock.clone());
    let before = handle(&w, req(Verb::Publish, "/a.md").with_body("x")).await;
    assert_eq!(before.status, Status::Created, "{before:?}");
    clock.set(quire_log::Timestamp(expiry + 1));
    let after = handle(&w, req(Verb::Publish, "/b.md").with_body("x")).await;
    assert_eq!(after.status, Status::Unauthorized, "{after:?}");
}

/// A write whose commit outlived the request is answered as what it is, not as an internal
/// error: the caller learns it must read the document back before writing again.
#[test]
fn a_write_of_unknown_outcome_says_so() {
    let error = quire_backend::Error::new(
        quire_backend::Op::Publish,
        "/a.md",
        quire_backend::ErrorKind::OutcomeUnknown,
        "deadline passed during the commit",
    );
    let answer = super::backend_error(&error, "/a.md");
    assert_eq!(answer.status, Status::ServerError);
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    assert!(text.contains("may or may not have landed"), "{text}");
    assert!(text.contains("read /a.md"), "{text}");
    let storage = quire_backend::Error::new(
        quire_backend::Op::Publish,
        "/a.md",
        quire_backend::ErrorKind::Storage,
        "disk on fire",
    );
    let hidden =
        String::from_utf8_lossy(&super::backend_error(&storage, "/a.md").body).into_owned();
    assert!(
        hidden.contains("internal error") && !hidden.contains("disk"),
        "{hidden}"
    );
}
