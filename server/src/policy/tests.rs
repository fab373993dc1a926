//! The publish policy through the handlers: strictness modes, tags and fields, appends
//! judged on final metadata, the policy document's own rules, required policies, seeding,
//! and a rebased commit judged by a policy that changed meanwhile.

use std::sync::Arc;

use quire_backend::bucket::{BucketOptions, BucketStore};
use quire_backend::file::{FileOptions, FileStore};
use quire_blob::memory::MemoryStore;

use super::*;
use crate::auth::{Authorizer, Operation, Token, TokenHash, TokenRegistry, TokenStore};
use crate::handlers::{World, handle};
use crate::mark::{Request, Response, Status, Verb};

const SECRET: &str = "quire_policy-secret";

fn world(store: Arc<dyn Store>) -> World {
    let token = Token::new(
        "writer",
        TokenHash::of_secret(SECRET),
        [Operation::Publish],
        [PathPattern::parse("/**").unwrap()],
        None,
    );
    let tokens = TokenStore::new([token]).unwrap();
    World::new(
        "test",
        store,
        Authorizer::new(Some(Arc::new(TokenRegistry::fixed(tokens)))),
    )
}

async fn file_store(dir: &Path) -> Arc<dyn Store> {
    let options = FileOptions {
        durable: false,
        ..FileOptions::default()
    };
    Arc::new(FileStore::open(dir, options).await.unwrap())
}

/// A world enforcing its policy over a fresh file store, and the bare store under it.
async fn enforced(dir: &Path, required: bool) -> (World, Arc<dyn Store>) {
    let bare = file_store(dir).await;
    let enforce: Arc<dyn Store> = Arc::new(Enforce::new(bare.clone(), required));
    (world(enforce), bare)
}

async fn publish(world: &World, path: &str, meta: &[(&str, &str)], body: &str) -> Response {
    let mut request = Request::new(Verb::Publish, path)
        .with_meta("auth", SECRET)
        .with_body(body.to_owned());
    for (key, value) in meta {
        request = request.with_meta(*key, *value);
    }
    handle(world, request).await
}

async fn append(world: &World, path: &str, expected: u64, meta: &[(&str, &str)]) -> Response {
    let mut request = Request::new(Verb::Append, path)
        .with_meta("auth", SECRET)
        .with_meta("expected-version", expected.to_string())
        .with_body("more\n");
    for (key, value) in meta {
        request = request.with_meta(*key, *value);
    }
    handle(world, request).await
}

async fn set_policy(world: &World, directives: &str) -> Response {
    publish(
        world,
        POLICY_PATH,
        &[],
        &format!("---\n{directives}\n---\n# Publish policy\n"),
    )
    .await
}

fn body(response: &Response) -> String {
    String::from_utf8_lossy(&response.body).into_owned()
}

#[track_caller]
fn assert_status(response: &Response, status: Status) {
    assert_eq!(response.status, status, "{}", body(response));
}

#[tokio::test]
async fn warn_lets_violations_through() {
    let dir = tempfile::tempdir().unwrap();
    let (w, _) = enforced(dir.path(), false).await;
    assert_status(
        &set_policy(&w, "strictness: warn\nrequire_tags: domain").await,
        Status::Created,
    );
    assert_status(&publish(&w, "/a.md", &[], "# A\n").await, Status::Created);
}

#[tokio::test]
async fn block_refuses_untagged_writes_with_the_violations() {
    let dir = tempfile::tempdir().unwrap();
    let (w, _) = enforced(dir.path(), false).await;
    assert_status(
        &set_policy(&w, "strictness: block\nrequire_tags: domain").await,
        Status::Created,
    );
    let refused = publish(&w, "/a.md", &[("tags", "alpha")], "# A\n").await;
    assert_status(&refused, Status::BadRequest);
    assert!(
        body(&refused)
            .contains("publish policy (block) refused this write:\n- missing-tag: domain"),
        "{}",
        body(&refused)
    );
    assert_eq!(
        handle(&w, Request::new(Verb::Fetch, "/a.md")).await.status,
        Status::NotFound,
        "nothing stored"
    );
    let tagged = publish(&w, "/a.md", &[("tags", "alpha, domain:storage")], "# A\n").await;
    assert_status(&tagged, Status::Created);
    let empty_value = publish(&w, "/b.md", &[("tags", "domain:")], "# B\n").await;
    assert_status(&empty_value, Status::BadRequest);
}

#[tokio::test]
async fn ask_refuses_until_approved_out_of_band() {
    let dir = tempfile::tempdir().unwrap();
    let (w, _) = enforced(dir.path(), false).await;
    set_policy(&w, "strictness: ask\nrequire_fields: [title, owner]").await;
    let refused = publish(&w, "/a.md", &[("title", "A")], "# A\n").await;
    assert_status(&refused, Status::BadRequest);
    assert!(
        body(&refused).contains("publish policy (ask) refused this write:\n- missing-field: owner"),
        "{}",
        body(&refused)
    );
    assert!(!body(&refused).contains("missing-field: title"));
    let complete = publish(&w, "/a.md", &[("title", "A"), ("owner", "ops")], "# A\n").await;
    assert_status(&complete, Status::Created);
}

#[tokio::test]
async fn every_violation_is_listed_tags_first() {
    let dir = tempfile::tempdir().unwrap();
    let (w, _) = enforced(dir.path(), false).await;
    set_policy(
        &w,
        "strictness: block  # refuse\nrequire_tags:\n  - domain\n  - team\nrequire_fields: title",
    )
    .await;
    let refused = publish(&w, "/a.md", &[("tags", "team:core")], "# A\n").await;
    assert!(
        body(&refused).contains(
            "publish policy (block) refused this write:\n- missing-tag: domain\n- missing-field: title"
        ),
        "{}",
        body(&refused)
    );
}

#[tokio::test]
async fn the_policy_judges_only_the_paths_it_applies_to() {
    let dir = tempfile::tempdir().unwrap();
    let (w, _) = enforced(dir.path(), false).await;
    set_policy(
        &w,
        "strictness: block\nrequire_tags: domain\napplies_to: /docs/**",
    )
    .await;
    assert_status(
        &publish(&w, "/notes/a.md", &[], "n\n").await,
        Status::Created,
    );
    assert_status(
        &publish(&w, "/docs/a.md", &[], "d\n").await,
        Status::BadRequest,
    );
}

#[tokio::test]
async fn append_is_judged_on_the_final_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let (w, _) = enforced(dir.path(), false).await;
    assert_status(
        &publish(&w, "/a.md", &[("tags", "domain:storage")], "# A\n").await,
        Status::Created,
    );
    set_policy(&w, "strictness: block\nrequire_tags: domain").await;
    // Inherits the compliant tags.
    assert_status(&append(&w, "/a.md", 1, &[]).await, Status::Created);
    // Overrides them with non-compliant ones.
    let refused = append(&w, "/a.md", 2, &[("tags", "alpha")]).await;
    assert_status(&refused, Status::BadRequest);
    assert!(body(&refused).contains("- missing-tag: domain"));
}

#[tokio::test]
async fn an_invalid_policy_document_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (w, _) = enforced(dir.path(), false).await;
    for directives in [
        "strictness: sometimes",
        "require_tags: domain",
        "strictness: block\nrequire_tag: domain",
        "strictness: block\nstrictness: warn",
        "strictness: block\napplies_to: docs",
    ] {
        let refused = set_policy(&w, directives).await;
        assert_status(&refused, Status::BadRequest);
        assert!(
            body(&refused).contains("invalid publish policy"),
            "{directives}: {}",
            body(&refused)
        );
    }
    let prose = publish(&w, POLICY_PATH, &[], "# No directives\n").await;
    assert_status(&prose, Status::BadRequest);
    assert_status(&publish(&w, "/a.md", &[], "a\n").await, Status::Created);
}

#[tokio::test]
async fn a_required_policy_that_is_missing_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (w, _) = enforced(dir.path(), true).await;
    let refused = publish(&w, "/a.md", &[], "a\n").await;
    assert_status(&refused, Status::BadRequest);
    assert!(body(&refused).contains("requires a publish policy"));
    assert_status(
        &set_policy(&w, "strictness: block\nrequire_fields: title").await,
        Status::Created,
    );
    assert_status(
        &publish(&w, "/a.md", &[("title", "A")], "a\n").await,
        Status::Created,
    );
}

#[tokio::test]
async fn a_required_policy_cannot_be_archived_and_an_archived_one_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (w, bare) = enforced(dir.path(), true).await;
    set_policy(&w, "strictness: warn").await;
    let archive = handle(
        &w,
        Request::new(Verb::Archive, POLICY_PATH).with_meta("auth", SECRET),
    )
    .await;
    assert_status(&archive, Status::BadRequest);
    assert!(body(&archive).contains("cannot be archived"));

    // Archived where the policy is optional (another server), the required one refuses.
    let optional = world(Arc::new(Enforce::new(bare.clone(), false)));
    let archived = handle(
        &optional,
        Request::new(Verb::Archive, POLICY_PATH).with_meta("auth", SECRET),
    )
    .await;
    assert_status(&archived, Status::Ok);
    assert_status(
        &publish(&optional, "/a.md", &[], "a\n").await,
        Status::Created,
    );
    let refused = publish(&w, "/b.md", &[], "b\n").await;
    assert_status(&refused, Status::BadRequest);
    assert!(body(&refused).contains("is archived"), "{}", body(&refused));
    // Unarchiving it (PUBLISH with an empty body) restores writes.
    assert_status(&publish(&w, POLICY_PATH, &[], "").await, Status::Ok);
    assert_status(&publish(&w, "/b.md", &[], "b\n").await, Status::Created);
}

#[tokio::test]
async fn a_required_policy_stored_invalid_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (w, bare) = enforced(dir.path(), true).await;
    // Written past the policy (a server that does not enforce it).
    bare.publish(
        &Ctx::new(),
        WriteRequest::new(POLICY_PATH, "---\nstrictness: never\n---\n"),
    )
    .await
    .unwrap();
    let refused = publish(&w, "/a.md", &[], "a\n").await;
    assert_status(&refused, Status::BadRequest);
    assert!(body(&refused).contains("is invalid"), "{}", body(&refused));

    // Optional: an invalid stored policy imposes nothing.
    let optional = world(Arc::new(Enforce::new(bare, false)));
    assert_status(
        &publish(&optional, "/a.md", &[], "a\n").await,
        Status::Created,
    );
}

#[tokio::test]
async fn the_seed_file_becomes_version_one_once() {
    let dir = tempfile::tempdir().unwrap();
    let seed_file = dir.path().join("policy.md");
    std::fs::write(
        &seed_file,
        "---\nstrictness: block\nrequire_tags: domain\n---\n",
    )
    .unwrap();
    let config = PolicyConfig {
        enforce: true,
        required: true,
        seed_file: Some(seed_file.clone()),
    };
    let bare = file_store(&dir.path().join("world")).await;
    let store = open(bare.clone(), &config, false).await.unwrap();
    let w = world(store);
    let fetched = handle(&w, Request::new(Verb::Fetch, POLICY_PATH)).await;
    assert_status(&fetched, Status::Ok);
    assert_eq!(fetched.metadata["version"], "1");
    assert_status(&publish(&w, "/a.md", &[], "a\n").await, Status::BadRequest);

    // A world that has one keeps it.
    set_policy(&w, "strictness: warn").await;
    let again = open(bare.clone(), &config, false).await.unwrap();
    assert_eq!(
        handle(&world(again), Request::new(Verb::Fetch, POLICY_PATH))
            .await
            .metadata["version"],
        "2"
    );

    std::fs::write(&seed_file, "# not a policy\n").unwrap();
    let fresh = file_store(&dir.path().join("other")).await;
    let invalid = open(fresh, &config, false).await.unwrap_err();
    assert!(invalid.contains("policy seed file"), "{invalid}");
}

#[tokio::test]
async fn a_stale_replica_judges_a_write_by_the_policy_that_won_meanwhile() {
    let blobs = Arc::new(MemoryStore::new());
    let options = || BucketOptions {
        compaction: None,
        policy_path: Some(policy_path()),
        ..BucketOptions::default()
    };
    let first = BucketStore::open(blobs.clone(), options()).await.unwrap();
    let second = BucketStore::open(blobs.clone(), options()).await.unwrap();
    let here = world(Arc::new(Enforce::new(Arc::new(first.clone()), false)));
    let there = world(Arc::new(Enforce::new(Arc::new(second), false)));
    assert_status(&publish(&here, "/a.md", &[], "a\n").await, Status::Created);

    // The other replica installs a blocking policy; this one has not seen it.
    assert_status(
        &set_policy(&there, "strictness: block\nrequire_tags: domain").await,
        Status::Created,
    );
    let refused = publish(&here, "/b.md", &[], "b\n").await;
    assert_status(&refused, Status::BadRequest);
    assert!(body(&refused).contains("- missing-tag: domain"));
    // The refusal was judged at the tip: nothing of it was committed anywhere.
    assert_status(
        &handle(&there, Request::new(Verb::Fetch, "/b.md")).await,
        Status::NotFound,
    );
}

#[test]
fn policy_documents_parse() {
    let policy = Policy::parse(
        "---\nstrictness: 'block'\nrequire_tags: [domain, \"team:\"]\nrequire_fields:\n- title\napplies_to: /docs/**, /notes/ # both\n---\nprose: not a directive\n",
    )
    .unwrap();
    assert_eq!(policy.strictness, Strictness::Block);
    assert_eq!(policy.require_tags, ["domain", "team"]);
    assert_eq!(policy.require_fields, ["title"]);
    assert!(policy.applies_to(&DocPath::parse("/notes/x.md").unwrap()));
    assert!(!policy.applies_to(&DocPath::parse("/other.md").unwrap()));
    assert!(!policy.applies_to(&policy_path()));
    for invalid in [
        "",
        "---\nstrictness: block\n",
        "---\nstrictness:\n---\n",
        "---\n  strictness: block\n---\n",
        "---\n- block\n---\n",
        "---\nstrictness: block\nrequire_fields: Title\n---\n",
        "---\nstrictness: block\nrequire_tags: a,:\n---\n",
    ] {
        assert!(Policy::parse(invalid).is_err(), "{invalid:?}");
    }
}
