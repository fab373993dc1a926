//! The document-store suite: what every backend's [`Store`](quire_backend::Store) must do,
//! one case per contract rule, each on a fresh world.
//!
//! Long because it is one list of cases, each short and standing alone; it splits by
//! verb (publish, read, list, watch) when a case needs helpers of its own.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use quire_backend::{
    ArchiveRequest, CatalogQuery, Ctx, Error, ErrorKind, Hash, ListOptions, Op, Precondition,
    PreparedWrite, Reader,
};
use quire_log::metadata;
use quire_log::version::StoredVersion;

use crate::harness::{
    BackendFactory, CaseCtx, CaseFn, CaseResult, case, ensure, expect_kind, gap, meta, names, ok,
    request, run_cases,
};
use crate::report::SuiteReport;

const CASES: &[(&str, CaseFn)] = &[
    case!("write_get_roundtrip", write_get_roundtrip),
    case!("document_owned_frontmatter", document_owned_frontmatter),
    case!("version_history", version_history),
    case!("conflict_semantics", conflict_semantics),
    case!("not_modified_dedup", not_modified_dedup),
    case!("archive_lifecycle", archive_lifecycle),
    case!("append_semantics", append_semantics),
    case!("append_metadata_merge", append_metadata_merge),
    case!("list_dir_semantics", list_dir_semantics),
    case!("is_dir_semantics", is_dir_semantics),
    case!("retention", retention),
    case!("missing_document", missing_document),
    case!("path_collisions", path_collisions),
    case!("rejects_binary_body", rejects_binary_body),
    case!("shared_body_hash", shared_body_hash),
    case!("body_size_limit", body_size_limit),
    case!("invalid_metadata", invalid_metadata),
    case!("canceled_context", canceled_context),
    case!("list_paging", list_paging),
    case!("precondition", precondition),
    case!("archive_precondition", archive_precondition),
    case!("closed_view", closed_view),
    case!("verify_chain_tampered", verify_chain_tampered),
    case!("verify_chain_tampered_tip", verify_chain_tampered_tip),
    case!("closed_store", closed_store),
];

/// The names of the document-store suite's cases, in order.
pub fn store_case_names() -> Vec<&'static str> {
    CASES.iter().map(|(name, _)| *name).collect()
}

/// Runs every document-store case, each on a fresh world from `factory`.
pub async fn run_store_suite(factory: &dyn BackendFactory) -> SuiteReport {
    run_cases(factory, CASES).await
}

/// The stored bytes' hash every backend must report as the ETag.
fn expected_etag(version: u64, previous: Option<Hash>, pairs: &[(&str, &str)], body: &str) -> Hash {
    let stored = StoredVersion {
        version,
        previous,
        metadata: metadata::normalize(&meta(pairs)).expect("valid test metadata"),
        body: body.to_owned(),
    };
    Hash::of(&stored.encode())
}

async fn write_get_roundtrip(c: CaseCtx) -> CaseResult {
    let pairs = [("tags", "a, b"), ("importance", "0.5")];
    let body = "# Hello\n\nbody text\n";
    let written = ok(
        c.direct.write("/rt/doc.md", None, body, &pairs).await,
        "write",
    )?;
    let etag = expected_etag(1, None, &pairs, body);
    ensure(written.content == body, || {
        format!("write returned content {:?}", written.content)
    })?;
    ensure(written.version == 1 && !written.archived, || {
        format!(
            "write returned version {} archived {}",
            written.version, written.archived
        )
    })?;
    ensure(written.etag == etag, || {
        "write's ETag is not the hash of the stored bytes".into()
    })?;
    ensure(written.content_hash == Hash::of(body.as_bytes()), || {
        "wrong content hash".into()
    })?;
    let got = ok(c.direct.get("/rt/doc.md", 0).await, "get")?;
    ensure(
        got.content == body && got.version == 1 && !got.archived,
        || format!("get returned {got:?}"),
    )?;
    ensure(got.etag == etag, || {
        "get's ETag differs from the write's".into()
    })?;
    ensure(got.modified == written.modified, || {
        "modified differs".into()
    })?;
    let want = meta(&[("tags", "a,b"), ("importance", "0.5")]);
    ensure(got.metadata.as_ref() == Some(&want), || {
        format!("metadata reads back as {:?}", got.metadata)
    })?;
    let bare = ok(
        c.direct.write("/rt/bare.md", None, "plain", &[]).await,
        "bare write",
    )?;
    ensure(bare.metadata.is_none(), || {
        format!("bare write metadata {:?}", bare.metadata)
    })?;
    let bare = ok(c.direct.get("/rt/bare.md", 0).await, "bare get")?;
    ensure(bare.metadata.is_none(), || {
        format!("bare get metadata {:?}", bare.metadata)
    })?;
    Ok(())
}

async fn document_owned_frontmatter(c: CaseCtx) -> CaseResult {
    let body = "---\ntitle: mine\nversion: 99\n---\n# Own frontmatter\n";
    ok(c.direct.write("/fm.md", None, body, &[]).await, "write")?;
    let got = ok(c.direct.get("/fm.md", 0).await, "get")?;
    ensure(got.content == body, || {
        format!("body came back as {:?}", got.content)
    })?;
    ensure(got.metadata.is_none(), || {
        "a body's frontmatter became metadata".into()
    })?;
    Ok(())
}

async fn version_history(c: CaseCtx) -> CaseResult {
    let mut etags = Vec::new();
    for n in 1..=3u64 {
        let doc = ok(
            c.direct
                .write("/vh.md", None, &format!("body {n}"), &[])
                .await,
            "write",
        )?;
        ensure(doc.version == n, || {
            format!("write {n} made version {}", doc.version)
        })?;
        etags.push(doc.etag);
    }
    ensure(
        ok(c.direct.current_version("/vh.md").await, "current")? == 3,
        || "current is not 3".into(),
    )?;
    let first = ok(c.direct.get("/vh.md", 1).await, "get v1")?;
    ensure(
        first.content == "body 1" && first.etag == etags[0] && first.version == 1,
        || format!("v1 reads back as {first:?}"),
    )?;
    let versions: Vec<u64> = ok(c.direct.versions("/vh.md").await, "versions")?
        .iter()
        .map(|v| v.version)
        .collect();
    ensure(versions == [3, 2, 1], || format!("versions {versions:?}"))?;
    let listed = ok(c.direct.versions("/vh.md").await, "versions")?;
    ensure(
        listed
            .iter()
            .rev()
            .map(|v| v.etag)
            .eq(etags.iter().copied()),
        || "versions list other ETags".into(),
    )?;
    ok(c.direct.verify_chain("/vh.md").await, "verify chain")?;
    Ok(())
}

async fn conflict_semantics(c: CaseCtx) -> CaseResult {
    ok(
        c.direct.write("/cf.md", Some(0), "one", &[]).await,
        "create",
    )?;
    let err = expect_kind(
        c.direct.write("/cf.md", Some(0), "again", &[]).await,
        ErrorKind::Conflict,
        "create-only on an existing doc",
    )?;
    ensure(err.current().map(|d| d.version) == Some(1), || {
        "conflict does not carry version 1".into()
    })?;
    ok(
        c.direct.write("/cf.md", Some(1), "two", &[]).await,
        "write at 1",
    )?;
    let err = expect_kind(
        c.direct.write("/cf.md", Some(1), "stale", &[]).await,
        ErrorKind::Conflict,
        "stale expected",
    )?;
    ensure(err.current().map(|d| d.version) == Some(2), || {
        "conflict does not carry version 2".into()
    })?;
    expect_kind(
        c.direct.write("/cf-missing.md", Some(3), "x", &[]).await,
        ErrorKind::Conflict,
        "expected on a missing doc",
    )?;
    let blind = ok(
        c.direct.write("/cf.md", None, "blind", &[]).await,
        "blind write",
    )?;
    ensure(blind.version == 3, || {
        format!("blind write made version {}", blind.version)
    })?;
    Ok(())
}

async fn not_modified_dedup(c: CaseCtx) -> CaseResult {
    let first = ok(
        c.direct.write("/nm.md", None, "same", &[("k", "v")]).await,
        "write",
    )?;
    let err = expect_kind(
        c.direct.write("/nm.md", None, "same", &[("k", "v")]).await,
        ErrorKind::NotModified,
        "identical write",
    )?;
    let current = err
        .current()
        .ok_or("not-modified without the current document")?;
    ensure(current.version == 1 && current.etag == first.etag, || {
        format!("not-modified carries {current:?}")
    })?;
    ensure(
        ok(c.direct.current_version("/nm.md").await, "current")? == 1,
        || "a no-op made a version".into(),
    )?;
    let second = ok(
        c.direct.write("/nm.md", None, "same", &[("k", "w")]).await,
        "new metadata",
    )?;
    ensure(second.version == 2 && second.etag != first.etag, || {
        "new metadata is not a new version".into()
    })?;
    let third = ok(
        c.direct.write("/nm.md", None, "same", &[]).await,
        "dropped metadata",
    )?;
    ensure(
        third.version == 3 && third.metadata.is_none() && third.etag != second.etag,
        || format!("dropping metadata gave {third:?}"),
    )?;
    ok(
        c.direct
            .write("/nm-tags.md", None, "t", &[("tags", "alpha, beta")])
            .await,
        "tags",
    )?;
    expect_kind(
        c.direct
            .write("/nm-tags.md", None, "t", &[("tags", " alpha,beta ")])
            .await,
        ErrorKind::NotModified,
        "same tags spelled differently",
    )?;
    let got = ok(c.direct.get("/nm-tags.md", 0).await, "get")?;
    ensure(
        got.metadata == Some(meta(&[("tags", "alpha,beta")])),
        || format!("tags stored as {:?}", got.metadata),
    )?;
    Ok(())
}

async fn archive_lifecycle(c: CaseCtx) -> CaseResult {
    let body = "archive me";
    let hash = Hash::of(body.as_bytes());
    let doc = ok(c.direct.write("/ar.md", None, body, &[]).await, "write")?;
    ensure(
        ok(c.direct.lookup_hash(&hash).await, "hash lookup")?.as_str() == "/ar.md",
        || "hash lookup missed".into(),
    )?;
    let archived = ok(c.direct.archive("/ar.md", true).await, "archive")?;
    ensure(archived.changed, || "archive did not change".into())?;
    let d = &archived.document;
    ensure(
        d.archived && d.version == 1 && d.etag == doc.etag && d.modified == doc.modified,
        || format!("archive answered {d:?}"),
    )?;
    let current = ok(c.direct.get("/ar.md", 0).await, "get current")?;
    ensure(current.archived && current.etag == doc.etag, || {
        "current does not read archived".into()
    })?;
    let pinned = ok(c.direct.get("/ar.md", 1).await, "get v1")?;
    ensure(!pinned.archived && pinned.content == body, || {
        "a pinned version reads archived".into()
    })?;
    let versions = ok(c.direct.versions("/ar.md").await, "versions")?;
    ensure(versions.len() == 1 && versions[0].version == 1, || {
        "archive changed the versions".into()
    })?;
    let again = ok(c.direct.archive("/ar.md", true).await, "archive again")?;
    ensure(
        !again.changed && again.document == archived.document,
        || "repeated archive changed something".into(),
    )?;
    expect_kind(
        c.direct.lookup_hash(&hash).await,
        ErrorKind::NotFound,
        "hash lookup while archived",
    )?;
    expect_kind(
        c.direct.write("/ar.md", None, "new", &[]).await,
        ErrorKind::Archived,
        "write while archived",
    )?;
    expect_kind(
        c.direct.append("/ar.md", 1, "new", &[]).await,
        ErrorKind::Archived,
        "append while archived",
    )?;
    ok(
        c.direct.verify_chain("/ar.md").await,
        "verify chain while archived",
    )?;
    let back = ok(c.direct.archive("/ar.md", false).await, "unarchive")?;
    ensure(back.changed && !back.document.archived, || {
        "unarchive did not change".into()
    })?;
    ensure(
        ok(
            c.direct.lookup_hash(&hash).await,
            "hash lookup after unarchive",
        )?
        .as_str()
            == "/ar.md",
        || "hash lookup missed".into(),
    )?;
    let v2 = ok(
        c.direct.write("/ar.md", None, "new", &[]).await,
        "write after unarchive",
    )?;
    ensure(v2.version == 2, || "write after unarchive is not v2".into())?;
    expect_kind(
        c.direct.archive("/ar-missing.md", true).await,
        ErrorKind::NotFound,
        "archive a missing doc",
    )?;
    Ok(())
}

async fn append_semantics(c: CaseCtx) -> CaseResult {
    ok(c.direct.write("/ap.md", None, "line1", &[]).await, "write")?;
    let appended = ok(c.direct.append("/ap.md", 1, "line2", &[]).await, "append")?;
    ensure(
        appended.version == 2 && appended.content == "line1\nline2",
        || format!("append returned {:?}", appended.content),
    )?;
    let got = ok(c.direct.get("/ap.md", 0).await, "get")?;
    ensure(got.content == "line1\nline2", || {
        format!("appended body reads {:?}", got.content)
    })?;
    ok(
        c.direct.write("/ap-nl.md", None, "one\n", &[]).await,
        "write",
    )?;
    let nl = ok(
        c.direct.append("/ap-nl.md", 1, "more\n", &[]).await,
        "append",
    )?;
    ensure(nl.content == "one\nmore\n", || {
        format!("newline join gave {:?}", nl.content)
    })?;
    let err = expect_kind(
        c.direct.append("/ap.md", 1, "stale", &[]).await,
        ErrorKind::Conflict,
        "stale append",
    )?;
    ensure(err.current().map(|d| d.version) == Some(2), || {
        "stale append does not carry version 2".into()
    })?;
    expect_kind(
        c.direct.append("/ap-missing.md", 1, "x", &[]).await,
        ErrorKind::NotFound,
        "append to a missing doc",
    )?;
    expect_kind(
        c.direct.append("/ap.md", 2, "", &[]).await,
        ErrorKind::InvalidContent,
        "empty append",
    )?;
    Ok(())
}

async fn append_metadata_merge(c: CaseCtx) -> CaseResult {
    let base = [
        ("tags", "a,b"),
        ("importance", "0.7"),
        ("type", "Note"),
        ("title", "Base"),
        ("retention", "5"),
    ];
    ok(c.direct.write("/mm.md", None, "base", &base).await, "write")?;
    let merged = ok(
        c.direct
            .append("/mm.md", 1, "more", &[("title", "New")])
            .await,
        "append",
    )?;
    let want = meta(&[
        ("tags", "a,b"),
        ("importance", "0.7"),
        ("type", "Note"),
        ("title", "New"),
    ]);
    ensure(merged.metadata.as_ref() == Some(&want), || {
        format!("merged metadata {:?}", merged.metadata)
    })?;
    let reread = ok(c.direct.get("/mm.md", 0).await, "get")?;
    ensure(reread.metadata.as_ref() == Some(&want), || {
        "merged metadata reads back differently".into()
    })?;
    let first = ok(c.direct.get("/mm.md", 1).await, "get v1")?;
    ensure(first.metadata == Some(meta(&base)), || {
        "the base version's metadata changed".into()
    })?;
    ok(
        c.direct.write("/mm-plain.md", None, "x", &[]).await,
        "write untagged",
    )?;
    let plain = ok(
        c.direct.append("/mm-plain.md", 1, "y", &[]).await,
        "append untagged",
    )?;
    ensure(plain.metadata.is_none(), || {
        format!("untagged append gained {:?}", plain.metadata)
    })?;
    let half = "x".repeat(600);
    ok(
        c.direct
            .write("/mm-big.md", None, "x", &[("note", &half)])
            .await,
        "write big",
    )?;
    expect_kind(
        c.direct
            .append("/mm-big.md", 1, "y", &[("other", &half)])
            .await,
        ErrorKind::InvalidMetadata,
        "merge over the cap",
    )?;
    ensure(
        ok(c.direct.current_version("/mm-big.md").await, "current")? == 1,
        || "a refused merge made a version".into(),
    )?;
    Ok(())
}

async fn list_dir_semantics(c: CaseCtx) -> CaseResult {
    for path in [
        "/ls/live.md",
        "/ls/gone.md",
        "/ls/nested/a/x.md",
        "/ls/attic/old.md",
        "/ls/.hidden.md",
        "/ls/work/.scratch.md",
        "/ls/versions/v.md",
    ] {
        ok(c.direct.write(path, None, "x", &[]).await, path)?;
    }
    ok(c.direct.archive("/ls/gone.md", true).await, "archive gone")?;
    ok(
        c.direct.archive("/ls/attic/old.md", true).await,
        "archive old",
    )?;
    let live = names(&ok(
        c.direct.list("/ls", ListOptions::default()).await,
        "list",
    )?);
    ensure(live == ["live.md", "nested/"], || {
        format!("default listing {live:?}")
    })?;
    let all = names(&ok(
        c.direct
            .list(
                "/ls/",
                ListOptions {
                    include_archived: true,
                    ..ListOptions::default()
                },
            )
            .await,
        "list archived",
    )?);
    ensure(all == ["attic/", "gone.md", "live.md", "nested/"], || {
        format!("include-archived listing {all:?}")
    })?;
    let nested = names(&ok(
        c.direct.list("/ls/nested", ListOptions::default()).await,
        "list nested",
    )?);
    ensure(nested == ["a/"], || format!("nested listing {nested:?}"))?;
    let root = names(&ok(
        c.direct.list("/", ListOptions::default()).await,
        "list root",
    )?);
    ensure(root == ["ls/"], || format!("root listing {root:?}"))?;
    expect_kind(
        c.direct.list("/ls/none", ListOptions::default()).await,
        ErrorKind::NotFound,
        "list a missing dir",
    )?;
    expect_kind(
        c.direct.list("/ls/live.md", ListOptions::default()).await,
        ErrorKind::NotFound,
        "list a document",
    )?;
    Ok(())
}

async fn is_dir_semantics(c: CaseCtx) -> CaseResult {
    ensure(ok(c.direct.is_dir("/").await, "is_dir /")?, || {
        "/ is not a directory".into()
    })?;
    ok(c.direct.write("/isd/doc.md", None, "x", &[]).await, "write")?;
    ensure(ok(c.direct.is_dir("/isd").await, "is_dir /isd")?, || {
        "/isd is not a directory".into()
    })?;
    ensure(
        !ok(c.direct.is_dir("/isd/doc.md").await, "is_dir doc")?,
        || "a document is a directory".into(),
    )?;
    expect_kind(
        c.direct.is_dir("/isd/missing").await,
        ErrorKind::NotFound,
        "is_dir missing",
    )?;
    Ok(())
}

async fn versions_of(c: &CaseCtx, path: &str) -> Result<Vec<u64>, String> {
    Ok(ok(c.direct.versions(path).await, "versions")?
        .iter()
        .map(|v| v.version)
        .collect())
}

async fn retention(c: CaseCtx) -> CaseResult {
    for n in 1..=3 {
        ok(
            c.direct
                .write("/ret/a.md", None, &format!("a{n}"), &[])
                .await,
            "write",
        )?;
    }
    let pruned = ok(
        c.direct
            .write("/ret/a.md", None, "a4", &[("retention", "2")])
            .await,
        "write with retention 2",
    )?;
    ensure(pruned.prune.map(|p| (p.from, p.to)) == Some((1, 2)), || {
        format!("prune {:?}", pruned.prune)
    })?;
    ensure(versions_of(&c, "/ret/a.md").await? == [4, 3], || {
        "survivors are not [4, 3]".into()
    })?;
    ok(
        c.direct.verify_chain("/ret/a.md").await,
        "chain after pruning",
    )?;
    expect_kind(
        c.direct.get("/ret/a.md", 1).await,
        ErrorKind::NotFound,
        "get a pruned version",
    )?;
    ensure(
        ok(c.direct.get("/ret/a.md", 0).await, "get")?.version == 4,
        || "current is not 4".into(),
    )?;
    ok(
        c.direct
            .write("/ret/a.md", None, "a5", &[("retention", "1")])
            .await,
        "write with retention 1",
    )?;
    ensure(versions_of(&c, "/ret/a.md").await? == [5], || {
        "retention 1 kept more than [5]".into()
    })?;
    for n in 1..=5 {
        ok(
            c.direct
                .write("/ret/b.md", None, &format!("b{n}"), &[])
                .await,
            "write",
        )?;
    }
    ensure(versions_of(&c, "/ret/b.md").await?.len() == 5, || {
        "no retention lost versions".into()
    })?;
    ok(c.direct.write("/ret/c.md", None, "c1", &[]).await, "write")?;
    ok(c.direct.write("/ret/c.md", None, "c2", &[]).await, "write")?;
    ok(
        c.direct
            .write("/ret/c.md", None, "c3", &[("retention", "2")])
            .await,
        "write",
    )?;
    ok(
        c.direct.write("/ret/c.md", None, "c4", &[]).await,
        "write without retention",
    )?;
    ensure(versions_of(&c, "/ret/c.md").await? == [4, 3, 2], || {
        "a write without retention pruned".into()
    })?;
    ok(c.direct.write("/ret/d.md", None, "d1", &[]).await, "write")?;
    let wide = ok(
        c.direct
            .write("/ret/d.md", None, "d2", &[("retention", "10")])
            .await,
        "wide retention",
    )?;
    ensure(
        wide.prune.is_none() && versions_of(&c, "/ret/d.md").await? == [2, 1],
        || "wide retention pruned".into(),
    )?;
    Ok(())
}

async fn missing_document(c: CaseCtx) -> CaseResult {
    expect_kind(
        c.direct.get("/missing.md", 0).await,
        ErrorKind::NotFound,
        "get missing",
    )?;
    expect_kind(
        c.direct.versions("/missing.md").await,
        ErrorKind::NotFound,
        "versions missing",
    )?;
    expect_kind(
        c.direct.verify_chain("/missing.md").await,
        ErrorKind::NotFound,
        "verify missing",
    )?;
    ensure(
        ok(c.direct.current_version("/missing.md").await, "current")? == 0,
        || "missing doc has a version".into(),
    )?;
    ok(c.direct.write("/present.md", None, "x", &[]).await, "write")?;
    expect_kind(
        c.direct.get("/present.md", 5).await,
        ErrorKind::NotFound,
        "absent version",
    )?;
    expect_kind(
        c.direct.get("/a/../present.md", 0).await,
        ErrorKind::NotFound,
        "a path with ..",
    )?;
    Ok(())
}

async fn path_collisions(c: CaseCtx) -> CaseResult {
    ok(c.direct.write("/col/doc.md", None, "x", &[]).await, "write")?;
    expect_kind(
        c.direct.write("/col", None, "y", &[]).await,
        ErrorKind::PathCollision,
        "a document where a directory is",
    )?;
    expect_kind(
        c.direct.get("/col", 0).await,
        ErrorKind::NotFound,
        "the refused document",
    )?;
    expect_kind(
        c.direct.write("/col/doc.md/child.md", None, "y", &[]).await,
        ErrorKind::PathCollision,
        "a document beneath a document",
    )?;
    expect_kind(
        c.direct.get("/col/doc.md/child.md", 0).await,
        ErrorKind::NotFound,
        "the refused child",
    )?;
    ensure(!ok(c.direct.is_dir("/col/doc.md").await, "is_dir")?, || {
        "the document became a directory".into()
    })?;
    Ok(())
}

async fn rejects_binary_body(c: CaseCtx) -> CaseResult {
    let binary = [0xff, 0xfe, 0x00, 0x80];
    expect_kind(
        c.store
            .publish(&Ctx::new(), request("/bin.md", None, &binary, &[]))
            .await,
        ErrorKind::InvalidContent,
        "binary publish",
    )?;
    expect_kind(
        c.direct.get("/bin.md", 0).await,
        ErrorKind::NotFound,
        "the refused document",
    )?;
    ok(c.direct.write("/text.md", None, "text", &[]).await, "write")?;
    expect_kind(
        c.store
            .append(&Ctx::new(), request("/text.md", Some(1), &binary, &[]))
            .await,
        ErrorKind::InvalidContent,
        "binary append",
    )?;
    ensure(
        ok(c.direct.current_version("/text.md").await, "current")? == 1,
        || "a refused append made a version".into(),
    )?;
    Ok(())
}

async fn shared_body_hash(c: CaseCtx) -> CaseResult {
    let shared = Hash::of(b"shared body");
    let other = Hash::of(b"other body");
    for path in ["/c.md", "/a.md", "/b.md"] {
        ok(c.direct.write(path, None, "shared body", &[]).await, path)?;
    }
    let owner = |want: &'static str, hash: Hash| {
        let direct = c.direct.clone();
        async move {
            let got = ok(direct.lookup_hash(&hash).await, "hash lookup")?;
            ensure(got.as_str() == want, || {
                format!("hash lookup found {got}, want {want}")
            })
        }
    };
    owner("/a.md", shared).await?;
    ok(c.direct.archive("/a.md", true).await, "archive /a.md")?;
    owner("/b.md", shared).await?;
    ok(
        c.direct.write("/b.md", None, "other body", &[]).await,
        "rewrite /b.md",
    )?;
    owner("/c.md", shared).await?;
    owner("/b.md", other).await?;
    ok(c.direct.archive("/a.md", false).await, "unarchive /a.md")?;
    owner("/a.md", shared).await?;
    Ok(())
}

async fn body_size_limit(c: CaseCtx) -> CaseResult {
    let limit = 1 << 20;
    let exact = "a".repeat(limit);
    ok(
        c.direct.write("/size/exact.md", None, &exact, &[]).await,
        "1 MiB body",
    )?;
    let got = ok(c.direct.get("/size/exact.md", 0).await, "get 1 MiB")?;
    ensure(got.content.len() == limit, || {
        "the 1 MiB body came back cut".into()
    })?;
    expect_kind(
        c.direct
            .write("/size/over.md", None, &"a".repeat(limit + 1), &[])
            .await,
        ErrorKind::SizeLimit,
        "1 MiB + 1",
    )?;
    expect_kind(
        c.direct.get("/size/over.md", 0).await,
        ErrorKind::NotFound,
        "the refused body",
    )?;
    ok(
        c.direct
            .write("/size/app.md", None, &"b".repeat(limit - 10), &[])
            .await,
        "near the limit",
    )?;
    expect_kind(
        c.direct
            .append("/size/app.md", 1, &"c".repeat(20), &[])
            .await,
        ErrorKind::SizeLimit,
        "append past the limit",
    )?;
    ensure(
        ok(c.direct.current_version("/size/app.md").await, "current")? == 1,
        || "a refused append made a version".into(),
    )?;
    Ok(())
}

async fn invalid_metadata(c: CaseCtx) -> CaseResult {
    let overflow: Vec<String> = (0..300).map(|i| format!("t{}", i % 10)).collect();
    let overflow = overflow.join(",");
    let bad: Vec<Vec<(&str, &str)>> = vec![
        vec![("version", "3")],
        vec![("archived", "true")],
        vec![("previous-hash", "x")],
        vec![("Type", "Note")],
        vec![("my_key", "x")],
        vec![("", "x")],
        vec![("note", "two\nlines")],
        vec![("retention", "0")],
        vec![("retention", "-3")],
        vec![("retention", "abc")],
        vec![("retention", "1.5")],
        vec![("retention", "")],
        vec![("tags", &overflow)],
    ];
    ok(
        c.direct.write("/meta/base.md", None, "base", &[]).await,
        "write base",
    )?;
    for pairs in &bad {
        expect_kind(
            c.direct.write("/meta/new.md", None, "x", pairs).await,
            ErrorKind::InvalidMetadata,
            &format!("publish {pairs:?}"),
        )?;
        expect_kind(
            c.direct.append("/meta/base.md", 1, "x", pairs).await,
            ErrorKind::InvalidMetadata,
            &format!("append {pairs:?}"),
        )?;
    }
    expect_kind(
        c.direct.get("/meta/new.md", 0).await,
        ErrorKind::NotFound,
        "nothing stored",
    )?;
    ensure(
        ok(c.direct.current_version("/meta/base.md").await, "current")? == 1,
        || "a refused append made a version".into(),
    )?;
    ok(
        c.direct
            .write("/meta/r1.md", None, "x", &[("retention", "1")])
            .await,
        "retention 1",
    )?;
    ok(
        c.direct
            .write("/meta/r20.md", None, "x", &[("retention", "20")])
            .await,
        "retention 20",
    )?;
    Ok(())
}

async fn canceled_context(c: CaseCtx) -> CaseResult {
    ok(c.direct.write("/cx.md", None, "x", &[]).await, "write")?;
    let live = Ctx::new();
    let view = ok(c.store.open_view(&live).await, "open view")?;
    let done = Ctx::canceled();
    expect_kind(
        view.get(&done, "/cx.md", 0).await,
        ErrorKind::Canceled,
        "get with a done context",
    )?;
    ok(
        view.get(&live, "/cx.md", 0).await,
        "get with a live context",
    )?;
    view.close();
    expect_kind(
        c.store.open_view(&done).await.map(|_| ()),
        ErrorKind::Canceled,
        "open a view with a done context",
    )?;
    expect_kind(
        c.store
            .publish(&done, request("/cx.md", None, b"y", &[]))
            .await,
        ErrorKind::Canceled,
        "publish",
    )?;
    expect_kind(
        c.store
            .append(&done, request("/cx.md", Some(1), b"y", &[]))
            .await,
        ErrorKind::Canceled,
        "append",
    )?;
    expect_kind(
        c.store
            .set_archived(&done, ArchiveRequest::new("/cx.md", true))
            .await,
        ErrorKind::Canceled,
        "archive",
    )?;
    let doc = ok(c.direct.get("/cx.md", 0).await, "get")?;
    ensure(doc.version == 1 && !doc.archived, || {
        "a canceled write changed the document".into()
    })?;
    Ok(())
}

async fn list_paging(c: CaseCtx) -> CaseResult {
    for name in ["a", "b", "c", "d", "e"] {
        ok(
            c.direct
                .write(&format!("/page/{name}.md"), None, name, &[])
                .await,
            "write",
        )?;
    }
    ok(
        c.direct.write("/page/sub/x.md", None, "x", &[]).await,
        "write",
    )?;
    ok(c.direct.archive("/page/b.md", true).await, "archive b")?;
    let page = |after: &str, limit: usize, include_archived: bool| ListOptions {
        after: after.into(),
        limit,
        include_archived,
        include_hidden: false,
    };
    let cases: [(ListOptions, &[&str]); 9] = [
        (
            page("", 0, false),
            &["a.md", "c.md", "d.md", "e.md", "sub/"],
        ),
        (page("", 2, false), &["a.md", "c.md"]),
        (page("c.md", 0, false), &["d.md", "e.md", "sub/"]),
        (page("a.md", 2, false), &["c.md", "d.md"]),
        (page("b.md", 1, false), &["c.md"]),
        (page("cc", 1, false), &["d.md"]),
        (page("sub", 0, false), &[]),
        (page("e.md", 5, false), &["sub/"]),
        (page("", 2, true), &["a.md", "b.md"]),
    ];
    for (options, want) in cases {
        let got = names(&ok(c.direct.list("/page", options.clone()).await, "list")?);
        ensure(got == want, || {
            format!("{options:?} listed {got:?}, want {want:?}")
        })?;
    }
    Ok(())
}

/// A precondition that records what it saw and then accepts or refuses.
#[derive(Debug)]
struct Recorder {
    refuse: Option<&'static str>,
    /// Each call: the prepared write and the version `state` showed for its path (0: none).
    seen: Mutex<Vec<(PreparedWrite, u64, bool)>>,
}

impl Recorder {
    fn new(refuse: Option<&'static str>) -> Arc<Recorder> {
        Arc::new(Recorder {
            refuse,
            seen: Mutex::default(),
        })
    }

    fn calls(&self) -> Vec<(PreparedWrite, u64, bool)> {
        self.seen.lock().expect("recorder poisoned").clone()
    }
}

#[async_trait]
impl Precondition for Recorder {
    async fn check(
        &self,
        ctx: &Ctx,
        state: &dyn Reader,
        write: &PreparedWrite,
    ) -> quire_backend::Result<()> {
        let (version, archived) = match state.get(ctx, write.path.as_str(), 0).await {
            Ok(doc) => (doc.version, doc.archived),
            Err(e) if e.is_not_found() => (0, false),
            Err(e) => return Err(e),
        };
        self.seen
            .lock()
            .expect("recorder poisoned")
            .push((write.clone(), version, archived));
        match self.refuse {
            Some(message) => Err(Error::rejected(Op::Publish, write.path.as_str(), message)),
            None => Ok(()),
        }
    }
}

async fn precondition(c: CaseCtx) -> CaseResult {
    ok(
        c.direct.write("/pre/doc.md", None, "base", &[]).await,
        "write base",
    )?;
    let refuse = Recorder::new(Some("policy says no"));
    let publish =
        request("pre/doc.md", None, b"next", &[("tags", " b, a")]).precondition(refuse.clone());
    let err = expect_kind(
        c.store.publish(&Ctx::new(), publish).await,
        ErrorKind::Rejected,
        "refused publish",
    )?;
    ensure(err.rejection_message() == Some("policy says no"), || {
        format!("the refusal changed: {err}")
    })?;
    let append = request("/pre/doc.md", Some(1), b"tail", &[]).precondition(refuse.clone());
    expect_kind(
        c.store.append(&Ctx::new(), append).await,
        ErrorKind::Rejected,
        "refused append",
    )?;
    ensure(
        ok(c.direct.current_version("/pre/doc.md").await, "current")? == 1,
        || "a refused write was stored".into(),
    )?;
    let calls = refuse.calls();
    ensure(calls.len() == 2, || {
        format!("the precondition ran {} times, want 2", calls.len())
    })?;
    let (published, seen, _) = &calls[0];
    ensure(published.path.as_str() == "/pre/doc.md", || {
        format!("prepared path {}", published.path)
    })?;
    ensure(
        published.content == Some(("next".into(), meta(&[("tags", "b,a")]))),
        || format!("prepared publish {:?}", published.content),
    )?;
    ensure(*seen == 1, || {
        format!("the precondition saw version {seen}, want 1")
    })?;
    let (appended, _, _) = &calls[1];
    ensure(
        appended.content.as_ref().map(|(b, _)| b.as_str()) == Some("base\ntail"),
        || format!("prepared append {:?}", appended.content),
    )?;
    let skipped = Recorder::new(Some("must not run"));
    expect_kind(
        c.store
            .publish(
                &Ctx::new(),
                request("/pre/doc.md", Some(5), b"x", &[]).precondition(skipped.clone()),
            )
            .await,
        ErrorKind::Conflict,
        "conflict before the precondition",
    )?;
    expect_kind(
        c.store
            .publish(
                &Ctx::new(),
                request("/pre/doc.md", None, b"base", &[]).precondition(skipped.clone()),
            )
            .await,
        ErrorKind::NotModified,
        "no-op before the precondition",
    )?;
    ensure(skipped.calls().is_empty(), || {
        "the precondition ran for a conflict or a no-op".into()
    })?;
    let accept = Recorder::new(None);
    let landed = ok(
        c.store
            .publish(
                &Ctx::new(),
                request("/pre/doc.md", None, b"next", &[]).precondition(accept.clone()),
            )
            .await,
        "accepted publish",
    )?;
    ensure(landed.version == 2 && accept.calls().len() == 1, || {
        "the accepted write did not land as v2".into()
    })?;
    Ok(())
}

async fn archive_precondition(c: CaseCtx) -> CaseResult {
    ok(
        c.direct.write("/arch-pre.md", None, "x", &[]).await,
        "write",
    )?;
    let refuse = Recorder::new(Some("keep it"));
    let err = expect_kind(
        c.store
            .set_archived(
                &Ctx::new(),
                ArchiveRequest::new("arch-pre.md", true).precondition(refuse.clone()),
            )
            .await,
        ErrorKind::Rejected,
        "refused archive",
    )?;
    ensure(err.rejection_message() == Some("keep it"), || {
        "the refusal changed".into()
    })?;
    let calls = refuse.calls();
    ensure(calls.len() == 1, || format!("ran {} times", calls.len()))?;
    let (change, version, archived) = &calls[0];
    ensure(
        change.path.as_str() == "/arch-pre.md" && change.archived == Some(true),
        || format!("prepared change {change:?}"),
    )?;
    ensure(*version == 1 && !archived, || {
        "the precondition did not see the pre-change state".into()
    })?;
    ensure(
        !ok(c.direct.get("/arch-pre.md", 0).await, "get")?.archived,
        || "a refused archive archived".into(),
    )?;
    let skipped = Recorder::new(Some("must not run"));
    expect_kind(
        c.store
            .set_archived(
                &Ctx::new(),
                ArchiveRequest::new("/nope.md", true).precondition(skipped.clone()),
            )
            .await,
        ErrorKind::NotFound,
        "archive a missing doc",
    )?;
    let unchanged = ok(
        c.store
            .set_archived(
                &Ctx::new(),
                ArchiveRequest::new("/arch-pre.md", false).precondition(skipped.clone()),
            )
            .await,
        "unarchive a live doc",
    )?;
    ensure(!unchanged.changed && skipped.calls().is_empty(), || {
        "the precondition ran for a no-op".into()
    })?;
    let accept = Recorder::new(None);
    let done = ok(
        c.store
            .set_archived(
                &Ctx::new(),
                ArchiveRequest::new("/arch-pre.md", true).precondition(accept),
            )
            .await,
        "accepted archive",
    )?;
    ensure(done.changed && done.document.archived, || {
        "the accepted archive did not land".into()
    })?;
    Ok(())
}

async fn closed_view(c: CaseCtx) -> CaseResult {
    ok(c.direct.write("/cv.md", None, "x", &[]).await, "write")?;
    let ctx = Ctx::new();
    let view = ok(c.store.open_view(&ctx).await, "open view")?;
    ok(view.get(&ctx, "/cv.md", 0).await, "get")?;
    view.close();
    view.close();
    let closed = ErrorKind::ViewClosed;
    expect_kind(view.get(&ctx, "/cv.md", 0).await, closed, "get")?;
    expect_kind(
        view.list_entries(&ctx, "/", &ListOptions::default()).await,
        closed,
        "list_entries",
    )?;
    expect_kind(view.is_dir(&ctx, "/").await, closed, "is_dir")?;
    expect_kind(view.versions(&ctx, "/cv.md").await, closed, "versions")?;
    expect_kind(
        view.lookup_hash(&ctx, &Hash::of(b"x")).await,
        closed,
        "lookup_hash",
    )?;
    expect_kind(
        view.verify_chain(&ctx, "/cv.md").await,
        closed,
        "verify_chain",
    )?;
    expect_kind(
        view.lookup(&ctx, &CatalogQuery::new("*")).await,
        closed,
        "lookup",
    )?;
    ok(
        c.direct.write("/cv.md", None, "y", &[]).await,
        "write after closing a view",
    )?;
    Ok(())
}

async fn tamper_then_verify(
    c: &CaseCtx,
    version: u64,
    bytes: &'static [u8],
    want: &str,
) -> CaseResult {
    let tamper = c
        .tamper
        .clone()
        .ok_or_else(|| gap("the backend offers no tamper hook"))?;
    ok(
        c.direct.write("/tamper.md", None, "one", &[]).await,
        "write v1",
    )?;
    ok(
        c.direct.write("/tamper.md", None, "two", &[]).await,
        "write v2",
    )?;
    let path = quire_backend::DocPath::parse("/tamper.md").expect("valid path");
    tamper(path, version, Bytes::from_static(bytes)).await?;
    let err = expect_kind(
        c.direct.verify_chain("/tamper.md").await,
        ErrorKind::Integrity,
        "verify a tampered chain",
    )?;
    ensure(err.to_string().contains(want), || {
        format!("chain error {err} does not say {want:?}")
    })?;
    ensure(versions_of(c, "/tamper.md").await? == [2, 1], || {
        "tampering changed the versions".into()
    })?;
    Ok(())
}

async fn verify_chain_tampered(c: CaseCtx) -> CaseResult {
    tamper_then_verify(&c, 1, b"---\nversion: 1\n---\nforged", "chain broken").await
}

async fn verify_chain_tampered_tip(c: CaseCtx) -> CaseResult {
    tamper_then_verify(&c, 2, b"plain bytes", "missing previous-hash").await
}

async fn closed_store(c: CaseCtx) -> CaseResult {
    ok(c.direct.write("/closed.md", None, "x", &[]).await, "write")?;
    c.store.close().await;
    c.store.close().await;
    expect_kind(
        c.direct.write("/closed.md", None, "y", &[]).await,
        ErrorKind::Closed,
        "publish after close",
    )?;
    expect_kind(
        c.direct.append("/closed.md", 1, "y", &[]).await,
        ErrorKind::Closed,
        "append after close",
    )?;
    expect_kind(
        c.direct.archive("/closed.md", true).await,
        ErrorKind::Closed,
        "archive after close",
    )?;
    let doc = ok(c.direct.get("/closed.md", 0).await, "read after close")?;
    ensure(doc.version == 1, || {
        "a closed store lost the document".into()
    })?;
    if let Some(hub) = c.store.changes() {
        ensure(hub.is_closed(), || "close left the change hub open".into())?;
    }
    Ok(())
}
