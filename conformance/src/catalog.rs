//! The catalog lookup suite: LOOKUP in catalog mode on every backend — matching, ranking,
//! titles, scope, filters, and the index following writes and archives.

use quire_backend::{CatalogQuery, Filter, Timestamp};

use crate::harness::{
    BackendFactory, CaseCtx, CaseFn, CaseResult, SUITE_EPOCH, case, ensure, ok, paths, run_cases,
};
use crate::report::SuiteReport;

const CASES: &[(&str, CaseFn)] = &[
    case!("matching", matching),
    case!("ranking", ranking),
    case!("tiebreaks", tiebreaks),
    case!("title_fallback", title_fallback),
    case!("wildcard_literal_terms", wildcard_literal_terms),
    case!("match_all", match_all),
    case!("scope", scope),
    case!("filters", filters),
    case!("archive_lifecycle", archive_lifecycle),
    case!("update_replaces_entry", update_replaces_entry),
    case!("max_cap", max_cap),
];

/// The names of the catalog suite's cases, in order.
pub fn catalog_case_names() -> Vec<&'static str> {
    CASES.iter().map(|(name, _)| *name).collect()
}

/// Runs every catalog case, each on a fresh world from `factory`.
pub async fn run_catalog_suite(factory: &dyn BackendFactory) -> SuiteReport {
    run_cases(factory, CASES).await
}

async fn find(c: &CaseCtx, query: CatalogQuery) -> Result<Vec<String>, String> {
    let what = format!("lookup {:?}", query.query);
    Ok(paths(&ok(c.direct.lookup(query).await, &what)?))
}

fn expect(got: Vec<String>, want: &[&str], what: &str) -> CaseResult {
    ensure(got == want, || {
        format!("{what}: found {got:?}, want {want:?}")
    })?;
    Ok(())
}

async fn matching(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write(
                "/m/a.md",
                None,
                "# Concurrency patterns\n",
                &[("tags", "Golang, Web")],
            )
            .await,
        "write a",
    )?;
    ok(
        c.direct.write("/m/b.md", None, "# Go tips\n", &[]).await,
        "write b",
    )?;
    expect(
        find(&c, CatalogQuery::new("golang")).await?,
        &["/m/a.md"],
        "tag term",
    )?;
    expect(
        find(&c, CatalogQuery::new("GOLANG")).await?,
        &["/m/a.md"],
        "tag term in capitals",
    )?;
    expect(
        find(&c, CatalogQuery::new("go")).await?,
        &["/m/b.md"],
        "a tag prefix is no tag match",
    )?;
    expect(
        find(&c, CatalogQuery::new("patter")).await?,
        &["/m/a.md"],
        "title substring",
    )?;
    expect(find(&c, CatalogQuery::new("")).await?, &[], "empty query")?;
    expect(
        find(&c, CatalogQuery::new("   ")).await?,
        &[],
        "blank query",
    )?;
    let found = ok(
        c.direct.lookup(CatalogQuery::new("golang web")).await,
        "lookup",
    )?;
    ensure(found.len() == 1 && found[0].score == 2, || {
        format!("two terms scored {found:?}")
    })?;
    ensure(found[0].tags == ["Golang", "Web"], || {
        format!("tags returned as {:?}", found[0].tags)
    })?;
    ensure(found[0].title == "Concurrency patterns", || {
        format!("title {:?}", found[0].title)
    })?;
    let both = ok(
        c.direct.lookup(CatalogQuery::new("web tips")).await,
        "lookup",
    )?;
    ensure(both.len() == 2 && both.iter().all(|m| m.score == 1), || {
        format!("one term each scored {both:?}")
    })?;
    Ok(())
}

async fn ranking(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write(
                "/r/low.md",
                None,
                "low",
                &[("tags", "x,y"), ("importance", "0.1")],
            )
            .await,
        "write",
    )?;
    ok(
        c.direct
            .write(
                "/r/high.md",
                None,
                "high",
                &[("tags", "x"), ("importance", "0.9")],
            )
            .await,
        "write",
    )?;
    expect(
        find(&c, CatalogQuery::new("x y")).await?,
        &["/r/low.md", "/r/high.md"],
        "score beats importance",
    )?;
    expect(
        find(&c, CatalogQuery::new("x x")).await?,
        &["/r/high.md", "/r/low.md"],
        "a repeated term counts once",
    )
}

async fn tiebreaks(c: CaseCtx) -> CaseResult {
    for path in ["/t/b.md", "/t/a.md", "/t/old.md"] {
        ok(
            c.direct.write(path, None, path, &[("tags", "tie")]).await,
            "write",
        )?;
    }
    c.clock.advance(10);
    ok(
        c.direct
            .write("/t/new.md", None, "new", &[("tags", "tie")])
            .await,
        "write",
    )?;
    c.clock.advance(10);
    ok(
        c.direct
            .write(
                "/t/old.md",
                None,
                "old again",
                &[("tags", "tie"), ("importance", "0.5")],
            )
            .await,
        "rewrite",
    )?;
    let found = ok(c.direct.lookup(CatalogQuery::new("tie")).await, "lookup")?;
    ensure(found[0].modified == Timestamp(SUITE_EPOCH.0 + 20), || {
        "modified not reported".into()
    })?;
    expect(
        paths(&found),
        &["/t/old.md", "/t/new.md", "/t/a.md", "/t/b.md"],
        "newer first, then path",
    )
}

async fn title_fallback(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write(
                "/tf/declared.md",
                None,
                "# Heading One\n",
                &[("title", "Declared Title")],
            )
            .await,
        "write",
    )?;
    ok(
        c.direct
            .write("/tf/heading.md", None, "intro\n\n# Heading Two\n", &[])
            .await,
        "write",
    )?;
    ok(
        c.direct
            .write("/tf/basename.md", None, "no heading here\n", &[])
            .await,
        "write",
    )?;
    let found = ok(
        c.direct.lookup(CatalogQuery::new("*").scope("/tf")).await,
        "lookup",
    )?;
    let mut titles: Vec<(String, String)> = found
        .iter()
        .map(|m| (m.path.to_string(), m.title.clone()))
        .collect();
    titles.sort();
    let want = [
        ("/tf/basename.md", "basename.md"),
        ("/tf/declared.md", "Declared Title"),
        ("/tf/heading.md", "Heading Two"),
    ];
    ensure(
        titles
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .eq(want),
        || format!("titles {titles:?}"),
    )?;
    expect(
        find(&c, CatalogQuery::new("declared")).await?,
        &["/tf/declared.md"],
        "declared title",
    )?;
    expect(
        find(&c, CatalogQuery::new("heading")).await?,
        &["/tf/heading.md"],
        "a declared title hides the heading",
    )
}

async fn wildcard_literal_terms(c: CaseCtx) -> CaseResult {
    for (path, title) in [
        ("/w/pct.md", "100% done"),
        ("/w/under.md", "under_score"),
        ("/w/back.md", "back\\slash"),
        ("/w/plain.md", "plain text"),
    ] {
        ok(
            c.direct.write(path, None, "x", &[("title", title)]).await,
            "write",
        )?;
    }
    expect(find(&c, CatalogQuery::new("%")).await?, &["/w/pct.md"], "%")?;
    expect(
        find(&c, CatalogQuery::new("100%")).await?,
        &["/w/pct.md"],
        "100%",
    )?;
    expect(
        find(&c, CatalogQuery::new("_")).await?,
        &["/w/under.md"],
        "_",
    )?;
    expect(
        find(&c, CatalogQuery::new("\\")).await?,
        &["/w/back.md"],
        "backslash",
    )
}

async fn match_all(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write(
                "/all/a.md",
                None,
                "# hub\n",
                &[("importance", "0.2"), ("tags", "k")],
            )
            .await,
        "write",
    )?;
    ok(
        c.direct
            .write("/all/b.md", None, "b", &[("importance", "0.9")])
            .await,
        "write",
    )?;
    ok(
        c.direct
            .write("/all/sub/c.md", None, "c", &[("tags", "k")])
            .await,
        "write",
    )?;
    ok(
        c.direct
            .write("/else.md", None, "e", &[("importance", "1")])
            .await,
        "write",
    )?;
    let all = ok(c.direct.lookup(CatalogQuery::new("*")).await, "lookup *")?;
    expect(
        paths(&all),
        &["/else.md", "/all/b.md", "/all/sub/c.md", "/all/a.md"],
        "* in importance order",
    )?;
    ensure(all.iter().all(|m| m.score == 0), || "* scored".into())?;
    expect(
        find(&c, CatalogQuery::new("*").scope("/all")).await?,
        &["/all/b.md", "/all/sub/c.md", "/all/a.md"],
        "* in a scope",
    )?;
    expect(
        find(&c, CatalogQuery::new("*").filter(Filter::tag("k"))).await?,
        &["/all/sub/c.md", "/all/a.md"],
        "* with a filter",
    )?;
    expect(
        find(&c, CatalogQuery::new("*").max(2)).await?,
        &["/else.md", "/all/b.md"],
        "* with a cap",
    )?;
    let hub = ok(
        c.direct.lookup(CatalogQuery::new("* hub")).await,
        "lookup * hub",
    )?;
    ensure(paths(&hub) == ["/all/a.md"] && hub[0].score == 1, || {
        format!("\"* hub\" found {hub:?}")
    })?;
    Ok(())
}

async fn scope(c: CaseCtx) -> CaseResult {
    for path in ["/docs/a.md", "/docs/sub/b.md", "/other/c.md"] {
        ok(
            c.direct.write(path, None, "x", &[("tags", "s")]).await,
            "write",
        )?;
    }
    let count = |scope: &'static str| {
        let c = c.clone();
        async move { Ok::<usize, String>(find(&c, CatalogQuery::new("s").scope(scope)).await?.len()) }
    };
    for (scope, want) in [
        ("/", 3),
        ("", 3),
        ("/docs/", 2),
        ("/docs", 2),
        ("/docs/sub", 1),
        ("/oth", 0),
        ("/docs/a.md", 0),
    ] {
        let got = count(scope).await?;
        ensure(got == want, || {
            format!("scope {scope:?} found {got}, want {want}")
        })?;
    }
    Ok(())
}

async fn filters(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write(
                "/f/note.md",
                None,
                "x",
                &[("tags", "Alpha"), ("type", "Note")],
            )
            .await,
        "write",
    )?;
    c.clock.advance(86_400);
    ok(
        c.direct
            .write(
                "/f/task.md",
                None,
                "x",
                &[("tags", "alpha,beta"), ("type", "Task")],
            )
            .await,
        "write",
    )?;
    c.clock.advance(86_400);
    ok(
        c.direct
            .write(
                "/f/late.md",
                None,
                "x",
                &[("tags", "beta"), ("type", "Note")],
            )
            .await,
        "write",
    )?;
    let with = |filter: &str| {
        let c = c.clone();
        let filters = Filter::parse_list(filter).expect("valid filter");
        async move {
            let mut query = CatalogQuery::new("*");
            query.filters = filters;
            let mut found = find(&c, query).await?;
            found.sort();
            Ok::<Vec<String>, String>(found)
        }
    };
    expect(
        with("type=Note").await?,
        &["/f/late.md", "/f/note.md"],
        "exact key",
    )?;
    expect(with("type=note").await?, &[], "exact key is case-sensitive")?;
    expect(
        with("tag=ALPHA").await?,
        &["/f/note.md", "/f/task.md"],
        "tag, any case",
    )?;
    expect(
        with("tag=alpha,type=Task").await?,
        &["/f/task.md"],
        "two filters",
    )?;
    expect(
        with("modified-after=2026-01-01").await?,
        &["/f/late.md", "/f/task.md"],
        "modified-after a date",
    )?;
    expect(
        with("modified-before=2026-01-02T00:00:00Z").await?,
        &["/f/note.md"],
        "modified-before an instant",
    )?;
    expect(
        with("modified-after=2026-01-01T12:00:00Z, modified-before=2026-01-02T12:00:00Z").await?,
        &["/f/task.md"],
        "a window",
    )
}

async fn archive_lifecycle(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write("/al/doc.md", None, "# Archivable\n", &[("tags", "gone")])
            .await,
        "write",
    )?;
    expect(
        find(&c, CatalogQuery::new("gone")).await?,
        &["/al/doc.md"],
        "before archiving",
    )?;
    ok(c.direct.archive("/al/doc.md", true).await, "archive")?;
    expect(find(&c, CatalogQuery::new("gone")).await?, &[], "archived")?;
    expect(
        find(&c, CatalogQuery::new("archivable")).await?,
        &[],
        "archived, by title",
    )?;
    expect(
        find(&c, CatalogQuery::new("*")).await?,
        &[],
        "archived, by *",
    )?;
    ok(c.direct.archive("/al/doc.md", false).await, "unarchive")?;
    expect(
        find(&c, CatalogQuery::new("gone")).await?,
        &["/al/doc.md"],
        "after unarchiving",
    )
}

async fn update_replaces_entry(c: CaseCtx) -> CaseResult {
    ok(
        c.direct
            .write(
                "/u.md",
                None,
                "x",
                &[("title", "Old Title"), ("tags", "before")],
            )
            .await,
        "write",
    )?;
    ok(
        c.direct
            .write(
                "/u.md",
                None,
                "y",
                &[("title", "Fresh Title"), ("tags", "after")],
            )
            .await,
        "rewrite",
    )?;
    expect(find(&c, CatalogQuery::new("before")).await?, &[], "old tag")?;
    expect(find(&c, CatalogQuery::new("old")).await?, &[], "old title")?;
    expect(
        find(&c, CatalogQuery::new("after fresh")).await?,
        &["/u.md"],
        "new entry",
    )?;
    let all = ok(c.direct.lookup(CatalogQuery::new("*")).await, "lookup *")?;
    ensure(all.len() == 1 && all[0].title == "Fresh Title", || {
        format!("* found {all:?}")
    })?;
    Ok(())
}

async fn max_cap(c: CaseCtx) -> CaseResult {
    for (i, importance) in ["0.1", "0.2", "0.3", "0.4", "0.5"].iter().enumerate() {
        ok(
            c.direct
                .write(
                    &format!("/cap/{i}.md"),
                    None,
                    "x",
                    &[("tags", "cap"), ("importance", importance)],
                )
                .await,
            "write",
        )?;
    }
    expect(
        find(&c, CatalogQuery::new("cap").max(2)).await?,
        &["/cap/4.md", "/cap/3.md"],
        "max 2",
    )?;
    ensure(
        find(&c, CatalogQuery::new("cap").max(0)).await?.len() == 5,
        || "max 0 capped".into(),
    )?;
    Ok(())
}
