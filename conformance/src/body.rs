//! The body lookup suite: LOOKUP `match: body` on every backend — recall over sections,
//! headingless documents, the importance prior, the cap, the match modes, scope and filters,
//! the index following archives and updates, catalog mode untouched, and the fallback rule.
//!
//! A store may answer a body lookup with `BodyMatchUnavailable` while its index of the view's
//! snapshot is not ready (the caller then answers from the catalog). Cases that check what a
//! body answer holds ask again, a bounded number of times, until one comes; the
//! `fallback_is_never_stale` case checks that any body answer given covers every write
//! acknowledged before it.

use quire_backend::{CatalogMatch, CatalogQuery, ErrorKind, Filter, MatchMode};

use crate::harness::{BackendFactory, CaseCtx, CaseFn, CaseResult, case, ensure, ok, run_cases};
use crate::report::SuiteReport;

const CASES: &[(&str, CaseFn)] = &[
    case!("body_recall_over_sections", recall_over_sections),
    case!("body_headingless_document", headingless_document),
    case!("body_importance_prior", importance_prior),
    case!("body_limit", limit),
    case!("body_unknown_mode_refused", unknown_mode_refused),
    case!("body_scope_and_filter", scope_and_filter),
    case!("body_archive_and_update", archive_and_update),
    case!("body_catalog_mode_unchanged", catalog_mode_unchanged),
    case!("body_fallback_is_never_stale", fallback_is_never_stale),
];

/// How often a case asks again while the store answers `BodyMatchUnavailable` (each ask
/// waits up to the store's freshness bound for its index).
const ASKS: usize = 30;

/// The names of the body suite's cases, in order.
pub fn body_case_names() -> Vec<&'static str> {
    CASES.iter().map(|(name, _)| *name).collect()
}

/// Runs every body case, each on a fresh world from `factory`.
pub async fn run_body_suite(factory: &dyn BackendFactory) -> SuiteReport {
    run_cases(factory, CASES).await
}

/// A body answer (asking again while the index is not ready).
async fn body(c: &CaseCtx, query: CatalogQuery) -> Result<Vec<CatalogMatch>, String> {
    let query = query.mode(MatchMode::Body);
    for _ in 0..ASKS {
        match c.direct.lookup(query.clone()).await {
            Err(e) if e.kind() == ErrorKind::BodyMatchUnavailable => continue,
            found => return ok(found, &format!("body lookup {:?}", query.query)),
        }
    }
    Err(format!(
        "body lookup {:?}: no body answer after {ASKS} asks",
        query.query
    ))
}

/// `path#anchor` (the bare path for a bare section or a catalog answer).
fn row(m: &CatalogMatch) -> String {
    match &m.section {
        Some(hit) if !hit.anchor.is_empty() => format!("{}#{}", m.path, hit.anchor),
        _ => m.path.to_string(),
    }
}

async fn rows(c: &CaseCtx, query: CatalogQuery) -> Result<Vec<String>, String> {
    Ok(body(c, query).await?.iter().map(row).collect())
}

async fn sorted_rows(c: &CaseCtx, text: &str) -> Result<Vec<String>, String> {
    let mut found = rows(c, CatalogQuery::new(text)).await?;
    found.sort();
    Ok(found)
}

fn expect(got: Vec<String>, want: &[&str], what: &str) -> CaseResult {
    ensure(got == want, || {
        format!("{what}: found {got:?}, want {want:?}")
    })?;
    Ok(())
}

const DEBUGGING: &str = "# Debugging\n\nGeneral notes on failures.\n\n## QUIC UDP buffer\n\nThe receive queue is too small: raise it with sysctl.\nWARNING: needs root.\n\n### Workaround\n\nSet rmem_max and restart. Warning: reboots.\n\n## Poison lock\n\nA panic in path.Match poisons the lock.\n";

async fn recall_over_sections(c: CaseCtx) -> CaseResult {
    let meta = [
        ("tags", "network,ops"),
        ("importance", "0.7"),
        ("title", "Debugging notes"),
    ];
    ok(
        c.direct
            .write("/kb/debugging.md", None, DEBUGGING, &meta)
            .await,
        "write",
    )?;
    let quic = "/kb/debugging.md#quic-udp-buffer";
    let workaround = "/kb/debugging.md#workaround";
    let lock = "/kb/debugging.md#poison-lock";
    expect(
        sorted_rows(&c, "udp buffer").await?,
        &[quic, workaround],
        "terms via the trail",
    )?;
    expect(
        sorted_rows(&c, "SYSCTL").await?,
        &[quic],
        "case-insensitive",
    )?;
    expect(
        sorted_rows(&c, "udp poison").await?,
        &[],
        "terms in different sections",
    )?;
    expect(
        sorted_rows(&c, "warning").await?,
        &[quic, workaround],
        "own text",
    )?;
    expect(
        sorted_rows(&c, "network sysctl").await?,
        &[quic],
        "a tag meets a term",
    )?;
    expect(
        sorted_rows(&c, "network debugging").await?,
        &["/kb/debugging.md"],
        "catalog answer",
    )?;
    expect(
        sorted_rows(&c, "path.Match").await?,
        &[lock],
        "dotted field",
    )?;
    expect(sorted_rows(&c, "match").await?, &[lock], "word run")?;
    expect(
        sorted_rows(&c, "rmem_max").await?,
        &[workaround],
        "underscore word",
    )?;
    expect(
        sorted_rows(&c, "rmem_max x").await?,
        &[workaround],
        "single characters dropped",
    )?;
    expect(
        sorted_rows(&c, "\"receive queue\"").await?,
        &[quic],
        "phrase",
    )?;
    expect(
        sorted_rows(&c, "\"queue receive\"").await?,
        &[],
        "phrase order",
    )?;
    expect(sorted_rows(&c, "sysc*").await?, &[quic], "prefix")?;
    let found = body(&c, CatalogQuery::new("sysctl")).await?;
    let first = found.first().ok_or("no row for sysctl")?;
    ensure(
        first.title == "Debugging notes" && first.importance == "0.7" && first.tags.len() == 2,
        || format!("row fields {first:?}"),
    )?;
    let hit = first
        .section
        .as_ref()
        .ok_or("a body row without its section")?;
    ensure(hit.heading == "QUIC UDP buffer", || {
        format!("heading {:?}", hit.heading)
    })?;
    ensure(hit.snippet.contains("sysctl"), || {
        format!("snippet {:?}", hit.snippet)
    })?;
    ensure(
        hit.highlights
            .iter()
            .any(|&(s, e)| hit.snippet.get(s..e) == Some("sysctl")),
        || format!("highlights {:?} of {:?}", hit.highlights, hit.snippet),
    )?;
    Ok(())
}

async fn headingless_document(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write("/h/plain.md", None, "just plain words\n", &[])
            .await,
        "write",
    )?;
    ok(
        c.direct
            .write(
                "/h/mixed.md",
                None,
                "opening words\n\n# Later\n\nclosing words\n",
                &[],
            )
            .await,
        "write",
    )?;
    expect(
        sorted_rows(&c, "plain").await?,
        &["/h/plain.md"],
        "headingless body",
    )?;
    expect(
        sorted_rows(&c, "opening").await?,
        &["/h/mixed.md"],
        "preamble is bare",
    )?;
    expect(
        sorted_rows(&c, "closing").await?,
        &["/h/mixed.md#later"],
        "under a heading",
    )?;
    let found = body(&c, CatalogQuery::new("plain")).await?;
    let hit = found[0].section.as_ref().ok_or("no section")?;
    ensure(hit.anchor.is_empty() && hit.heading.is_empty(), || {
        format!("bare row {hit:?}")
    })?;
    Ok(())
}

async fn importance_prior(c: CaseCtx) -> CaseResult {
    for (path, importance, body) in [
        ("/p/lo.md", "0.1", "shared words\n"),
        ("/p/hi.md", "0.9", "shared words\n"),
        ("/p/top.md", "1", "unrelated text\n"),
        ("/p/b.md", "0.5", "tied words\n"),
        ("/p/a.md", "0.5", "tied words\n"),
    ] {
        ok(
            c.direct
                .write(path, None, body, &[("importance", importance)])
                .await,
            "write",
        )?;
    }
    expect(
        rows(&c, CatalogQuery::new("shared")).await?,
        &["/p/hi.md", "/p/lo.md"],
        "prior",
    )?;
    expect(
        rows(&c, CatalogQuery::new("tied")).await?,
        &["/p/a.md", "/p/b.md"],
        "ties by path",
    )
}

async fn limit(c: CaseCtx) -> CaseResult {
    let text = "# One\nkey\n# Two\nkey key\n# Three\nkey words\n# Four\nkey more words here\n";
    ok(c.direct.write("/l/doc.md", None, text, &[]).await, "write")?;
    let all = rows(&c, CatalogQuery::new("key")).await?;
    ensure(all.len() == 4, || {
        format!("four section rows, found {all:?}")
    })?;
    let two = rows(&c, CatalogQuery::new("key").max(2)).await?;
    ensure(two == all[..2], || {
        format!("max 2 found {two:?}, unlimited {all:?}")
    })?;
    Ok(())
}

async fn unknown_mode_refused(c: CaseCtx) -> CaseResult {
    ensure(MatchMode::parse("fuzzy").is_err(), || {
        "mode fuzzy accepted".into()
    })?;
    ensure(MatchMode::parse("Body").is_err(), || {
        "mode Body accepted".into()
    })?;
    ensure(MatchMode::parse("body") == Ok(MatchMode::Body), || {
        "body refused".into()
    })?;
    ok(
        c.direct.write("/u/a.md", None, "known words\n", &[]).await,
        "write",
    )?;
    expect(sorted_rows(&c, "known").await?, &["/u/a.md"], "body mode")
}

async fn scope_and_filter(c: CaseCtx) -> CaseResult {
    for (path, tags) in [
        ("/docs/a.md", "keep"),
        ("/docs/sub/b.md", "drop"),
        ("/other/c.md", "keep"),
    ] {
        ok(
            c.direct
                .write(path, None, "scoped words\n", &[("tags", tags)])
                .await,
            "write",
        )?;
    }
    let scoped = |scope: &str| CatalogQuery::new("scoped").scope(scope);
    let mut docs = rows(&c, scoped("/docs")).await?;
    docs.sort();
    expect(docs, &["/docs/a.md", "/docs/sub/b.md"], "scope /docs")?;
    expect(
        rows(&c, scoped("/docs/sub/")).await?,
        &["/docs/sub/b.md"],
        "scope /docs/sub/",
    )?;
    expect(
        rows(&c, scoped("/oth")).await?,
        &[],
        "scope is a directory, not a prefix",
    )?;
    let mut keep = rows(&c, scoped("/").filter(Filter::tag("KEEP"))).await?;
    keep.sort();
    expect(keep, &["/docs/a.md", "/other/c.md"], "tag filter")?;
    let filters = Filter::parse_list("tag=keep,modified-after=2099-01-01").expect("filter");
    let mut late = scoped("/docs");
    late.filters = filters;
    expect(rows(&c, late).await?, &[], "time filter")
}

async fn archive_and_update(c: CaseCtx) -> CaseResult {
    let written = ok(
        c.direct
            .write("/a/doc.md", None, "# First\n\nold words\n", &[])
            .await,
        "write",
    )?;
    expect(
        sorted_rows(&c, "old").await?,
        &["/a/doc.md#first"],
        "written",
    )?;
    ok(c.direct.archive("/a/doc.md", true).await, "archive")?;
    expect(sorted_rows(&c, "old").await?, &[], "archived")?;
    ok(c.direct.archive("/a/doc.md", false).await, "unarchive")?;
    expect(
        sorted_rows(&c, "old").await?,
        &["/a/doc.md#first"],
        "unarchived",
    )?;
    ok(
        c.direct
            .write(
                "/a/doc.md",
                Some(written.version),
                "# Second\n\nnew words\n",
                &[],
            )
            .await,
        "update",
    )?;
    expect(sorted_rows(&c, "old").await?, &[], "replaced sections")?;
    expect(sorted_rows(&c, "first").await?, &[], "replaced headings")?;
    expect(
        sorted_rows(&c, "new").await?,
        &["/a/doc.md#second"],
        "new sections",
    )
}

async fn catalog_mode_unchanged(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write(
                "/c/doc.md",
                None,
                "# Heading\n\nbodyonly words\n",
                &[("tags", "tagged")],
            )
            .await,
        "write",
    )?;
    expect(
        sorted_rows(&c, "bodyonly").await?,
        &["/c/doc.md#heading"],
        "body mode",
    )?;
    let found = ok(
        c.direct.lookup(CatalogQuery::new("bodyonly")).await,
        "catalog lookup",
    )?;
    ensure(found.is_empty(), || {
        format!("catalog mode matched body words: {found:?}")
    })?;
    let tagged = ok(
        c.direct.lookup(CatalogQuery::new("tagged")).await,
        "catalog lookup",
    )?;
    ensure(
        tagged.len() == 1 && tagged[0].section.is_none() && tagged[0].score == 1,
        || format!("catalog rows {tagged:?}"),
    )?;
    Ok(())
}

async fn fallback_is_never_stale(c: CaseCtx) -> CaseResult {
    let mut answered = 0;
    for round in 0..12u32 {
        let word = format!("round{round}");
        ok(
            c.direct
                .write("/f/doc.md", None, &format!("# Now\n\n{word} text\n"), &[])
                .await,
            "write",
        )?;
        let query = CatalogQuery::new(word.clone()).mode(MatchMode::Body);
        match c.direct.lookup(query).await {
            Err(e) if e.kind() == ErrorKind::BodyMatchUnavailable => {}
            Err(e) => return Err(format!("round {round}: unexpected error: {e}").into()),
            Ok(found) => {
                answered += 1;
                let got: Vec<String> = found.iter().map(row).collect();
                ensure(got == ["/f/doc.md#now"], || {
                    format!("round {round}: a body answer missed the write: {got:?}")
                })?;
                if round > 0 {
                    let stale = format!("round{}", round - 1);
                    let old = body(&c, CatalogQuery::new(stale)).await?;
                    ensure(old.is_empty(), || {
                        format!("round {round}: the replaced body still matches: {old:?}")
                    })?;
                }
            }
        }
    }
    ensure(answered > 0, || "no body lookup was ever answered".into())?;
    Ok(())
}
