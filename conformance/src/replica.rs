//! The replica suite: several stores serving one world must keep the freshness promises of
//! the contract — path reads exact, catalog reads within [`SEARCH_FRESHNESS`], own writes at
//! once, one snapshot per view — and lose no acknowledged write under concurrent writers.
//!
//! The catalog-bound case does not wait out [`SEARCH_FRESHNESS`]: it moves the world's
//! freshness clock past the window ([`ReplicaWorld::lapse`]).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use quire_backend::{CatalogQuery, Ctx, ErrorKind, Hash, ListOptions, SEARCH_FRESHNESS, Store};
use quire_log::ManualClock;

use crate::harness::{
    ReplicaFactory, ReplicaWorld, SUITE_EPOCH, ViewPerCall, ensure, expect_kind, names, ok,
    overran, paths, within_deadline,
};
use crate::report::{Outcome, SuiteReport};

/// How many replicas, writers per replica and rounds the concurrent-writers case runs.
#[derive(Clone, Copy, Debug)]
pub struct ReplicaLoad {
    pub replicas: usize,
    pub writers: usize,
    pub rounds: usize,
}

impl Default for ReplicaLoad {
    fn default() -> Self {
        ReplicaLoad {
            replicas: 3,
            writers: 4,
            rounds: 6,
        }
    }
}

type ReplicaCase = fn(
    Box<dyn ReplicaWorld>,
    ReplicaLoad,
) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

macro_rules! replica_case {
    ($name:literal, $f:ident) => {
        (
            $name,
            (|world, load| Box::pin($f(world, load))) as ReplicaCase,
        )
    };
}

const CASES: &[(&str, ReplicaCase)] = &[
    replica_case!("path_reads_are_exact", path_reads_are_exact),
    replica_case!(
        "stale_writes_are_judged_at_the_tip",
        stale_writes_are_judged_at_the_tip
    ),
    replica_case!("catalog_reads_within_bound", catalog_reads_within_bound),
    replica_case!("own_writes_at_once", own_writes_at_once),
    replica_case!("one_snapshot_per_view", one_snapshot_per_view),
    replica_case!(
        "concurrent_writers_lose_nothing",
        concurrent_writers_lose_nothing
    ),
];

/// The names of the replica suite's cases, in order.
pub fn replica_case_names() -> Vec<&'static str> {
    CASES.iter().map(|(name, _)| *name).collect()
}

/// Runs every replica case, each on a fresh world from `factory`, closing every replica the
/// case opened after it (so no committer of one case runs on beside the next).
pub async fn run_replica_suite(factory: &dyn ReplicaFactory, load: ReplicaLoad) -> SuiteReport {
    let mut outcomes = Vec::new();
    for (name, case) in CASES {
        let clock = Arc::new(ManualClock::new(SUITE_EPOCH));
        let outcome = match factory.open_world(clock).await {
            Err(why) => Outcome::Failed(format!("opening a world: {why}")),
            Ok(world) => {
                let opened = Opened::default();
                let world = Box::new(Tracked {
                    world,
                    opened: opened.clone(),
                });
                let result = within_deadline(case(world, load), || Err(overran())).await;
                opened.close_all().await;
                match result {
                    Ok(()) => Outcome::Passed,
                    Err(why) => Outcome::Failed(why),
                }
            }
        };
        outcomes.push((*name, outcome));
    }
    SuiteReport { outcomes }
}

/// The replicas a case opened.
#[derive(Clone, Default)]
struct Opened(Arc<Mutex<Vec<Arc<dyn Store>>>>);

impl Opened {
    async fn close_all(&self) {
        let stores = std::mem::take(&mut *self.0.lock().expect("replica list poisoned"));
        // Closing is idempotent: a single-writer world's one store, handed out many times,
        // may be closed many times.
        for store in stores {
            store.close().await;
        }
    }
}

/// A world that remembers every replica it hands out.
struct Tracked {
    world: Box<dyn ReplicaWorld>,
    opened: Opened,
}

#[async_trait]
impl ReplicaWorld for Tracked {
    async fn replica(&self) -> Result<Arc<dyn Store>, String> {
        let store = self.world.replica().await?;
        self.opened
            .0
            .lock()
            .expect("replica list poisoned")
            .push(store.clone());
        Ok(store)
    }

    fn lapse(&self, by: Duration) {
        self.world.lapse(by);
    }
}

async fn pair(world: &dyn ReplicaWorld) -> Result<(ViewPerCall, ViewPerCall), String> {
    let writer = world.replica().await?;
    let reader = world.replica().await?;
    Ok((ViewPerCall::new(writer), ViewPerCall::new(reader)))
}

async fn path_reads_are_exact(world: Box<dyn ReplicaWorld>, _: ReplicaLoad) -> Result<(), String> {
    let (writer, reader) = pair(world.as_ref()).await?;
    // A catalog read first, so a replica that caches snapshots has one to (wrongly) reuse.
    ok(
        reader.lookup(CatalogQuery::new("*")).await,
        "warm-up lookup",
    )?;
    ok(
        writer.write("/rep/doc.md", None, "one", &[]).await,
        "write v1",
    )?;
    ok(
        writer.write("/rep/doc.md", Some(1), "two", &[]).await,
        "write v2",
    )?;
    ensure(ok(reader.is_dir("/rep").await, "is_dir")?, || {
        "the reader has no /rep".into()
    })?;
    let current = ok(reader.current_version("/rep/doc.md").await, "current")?;
    ensure(current == 2, || {
        format!("the reader sees version {current}")
    })?;
    let got = ok(reader.get("/rep/doc.md", 2).await, "get v2")?;
    ensure(got.content == "two", || {
        "the reader read other bytes".into()
    })?;
    ok(reader.verify_chain("/rep/doc.md").await, "verify chain")?;
    expect_kind(
        reader.write("/rep/doc.md", Some(1), "stale", &[]).await,
        ErrorKind::Conflict,
        "a stale write on the reader",
    )?;
    Ok(())
}

/// Writes on a replica that has not read since a peer wrote: each is judged on every write
/// acknowledged before it, never on what the replica last saw (a republish of an old body
/// is a change, an archive of what the peer unarchived is a change, an append finds the
/// document the peer created, an expected version matching the peer's write commits, and a
/// blind publish supersedes instead of conflicting).
async fn stale_writes_are_judged_at_the_tip(
    world: Box<dyn ReplicaWorld>,
    _: ReplicaLoad,
) -> Result<(), String> {
    let (writer, stale) = pair(world.as_ref()).await?;
    ok(stale.write("/stale/a.md", None, "X", &[]).await, "write X")?;
    ok(stale.write("/stale/z.md", None, "z", &[]).await, "write z")?;
    ok(stale.archive("/stale/z.md", true).await, "archive z")?;
    ok(stale.write("/stale/e.md", None, "e1", &[]).await, "write e")?;
    // The writer reads what the stale replica wrote, then changes all of it.
    ok(writer.get("/stale/a.md", 0).await, "writer reads a")?;
    ok(writer.write("/stale/a.md", None, "Y", &[]).await, "write Y")?;
    ok(writer.archive("/stale/z.md", false).await, "unarchive z")?;
    ok(
        writer.write("/stale/e.md", Some(1), "e2", &[]).await,
        "write e2",
    )?;
    ok(
        writer.write("/stale/n.md", None, "n1", &[]).await,
        "create n",
    )?;
    ok(
        writer.write("/stale/m.md", None, "m", &[]).await,
        "create m",
    )?;

    let again = ok(
        stale.write("/stale/a.md", None, "X", &[]).await,
        "republishing X on the stale replica",
    )?;
    ensure(again.version == 3, || {
        format!("republishing X answered version {}", again.version)
    })?;
    let archived = ok(stale.archive("/stale/z.md", true).await, "archive z again")?;
    ensure(archived.changed && archived.document.archived, || {
        "archiving what a peer unarchived changed nothing".into()
    })?;
    let appended = ok(
        stale.append("/stale/n.md", 1, "n2", &[]).await,
        "append to a peer's document",
    )?;
    ensure(appended.version == 2, || {
        format!("the append answered version {}", appended.version)
    })?;
    let set = ok(
        stale.archive("/stale/m.md", true).await,
        "archive a peer's document",
    )?;
    ensure(set.changed, || {
        "archiving a peer's document changed nothing".into()
    })?;
    let matched = ok(
        stale.write("/stale/e.md", Some(2), "e3", &[]).await,
        "an expected version matching the peer's write",
    )?;
    ensure(matched.version == 3, || {
        format!("the expected-version write answered {}", matched.version)
    })?;
    let got = ok(writer.get("/stale/a.md", 0).await, "writer reads a")?;
    ensure(got.content == "X" && got.version == 3, || {
        format!("/stale/a.md is {:?} at v{}", got.content, got.version)
    })
}

async fn catalog_reads_within_bound(
    world: Box<dyn ReplicaWorld>,
    _: ReplicaLoad,
) -> Result<(), String> {
    let (writer, reader) = pair(world.as_ref()).await?;
    ok(
        reader.lookup(CatalogQuery::new("*")).await,
        "warm-up lookup",
    )?;
    let doc = ok(
        writer
            .write("/bound/doc.md", None, "bound body", &[("tags", "fresh")])
            .await,
        "write",
    )?;
    world.lapse(SEARCH_FRESHNESS);
    let found = paths(&ok(
        reader.lookup(CatalogQuery::new("fresh")).await,
        "lookup",
    )?);
    ensure(found == ["/bound/doc.md"], || {
        format!("lookup after the bound found {found:?}")
    })?;
    let listed = names(&ok(
        reader.list("/bound", ListOptions::default()).await,
        "list",
    )?);
    ensure(listed == ["doc.md"], || {
        format!("listing after the bound {listed:?}")
    })?;
    ensure(ok(reader.is_dir("/bound").await, "is_dir")?, || {
        "no /bound after the bound".into()
    })?;
    let owner = ok(reader.lookup_hash(&doc.content_hash).await, "hash lookup")?;
    ensure(owner.as_str() == "/bound/doc.md", || {
        format!("hash lookup found {owner}")
    })
}

async fn own_writes_at_once(world: Box<dyn ReplicaWorld>, _: ReplicaLoad) -> Result<(), String> {
    let writer = ViewPerCall::new(world.replica().await?);
    ok(
        writer.lookup(CatalogQuery::new("*")).await,
        "warm-up lookup",
    )?;
    ok(
        writer
            .write("/own/doc.md", None, "mine", &[("tags", "own")])
            .await,
        "write",
    )?;
    let found = paths(&ok(
        writer.lookup(CatalogQuery::new("own")).await,
        "lookup",
    )?);
    ensure(found == ["/own/doc.md"], || {
        format!("own lookup found {found:?}")
    })?;
    let listed = names(&ok(
        writer.list("/own", ListOptions::default()).await,
        "list",
    )?);
    ensure(listed == ["doc.md"], || format!("own listing {listed:?}"))?;
    let owner = ok(writer.lookup_hash(&Hash::of(b"mine")).await, "hash lookup")?;
    ensure(owner.as_str() == "/own/doc.md", || {
        "own hash lookup missed".into()
    })
}

async fn one_snapshot_per_view(world: Box<dyn ReplicaWorld>, _: ReplicaLoad) -> Result<(), String> {
    let (writer, reader) = pair(world.as_ref()).await?;
    let ctx = Ctx::new();
    let view = ok(reader.store.open_view(&ctx).await, "open view")?;
    ok(view.is_dir(&ctx, "/").await, "first read")?;
    ok(
        writer.write("/snap/doc.md", None, "later", &[]).await,
        "write",
    )?;
    expect_kind(
        view.get(&ctx, "/snap/doc.md", 0).await,
        ErrorKind::NotFound,
        "the pinned view",
    )?;
    expect_kind(
        view.is_dir(&ctx, "/snap").await,
        ErrorKind::NotFound,
        "the pinned view's directories",
    )?;
    view.close();
    ok(reader.get("/snap/doc.md", 0).await, "a new view")?;
    Ok(())
}

/// One acknowledged write: (path, version) → body.
type Acks = BTreeMap<(String, u64), String>;

async fn writer_rounds(
    store: Arc<dyn Store>,
    replica: usize,
    writer: usize,
    rounds: usize,
) -> Result<Acks, String> {
    let direct = ViewPerCall::new(store);
    let mut acks = Acks::new();
    for round in 0..rounds {
        let tag = format!("r{replica}w{writer}n{round}");
        let current = ok(direct.current_version("/shared/cas.md").await, "read cas")?;
        let body = format!("cas {tag}");
        match direct
            .write("/shared/cas.md", Some(current), &body, &[])
            .await
        {
            Ok(doc) => {
                acks.insert(("/shared/cas.md".into(), doc.version), body);
            }
            Err(e) if e.kind() == ErrorKind::Conflict => {}
            Err(e) => return Err(format!("{tag} cas write: {e}")),
        }
        let body = format!("blind {tag}");
        match direct.write("/shared/blind.md", None, &body, &[]).await {
            Ok(doc) => {
                acks.insert(("/shared/blind.md".into(), doc.version), body);
            }
            Err(e) if e.kind() == ErrorKind::Conflict => {}
            Err(e) => return Err(format!("{tag} blind write: {e}")),
        }
        let path = format!("/own/{tag}.md");
        let body = format!("own {tag}");
        let doc = ok(
            direct.write(&path, Some(0), &body, &[]).await,
            &format!("{tag} create"),
        )?;
        acks.insert((path, doc.version), body);
    }
    Ok(acks)
}

async fn concurrent_writers_lose_nothing(
    world: Box<dyn ReplicaWorld>,
    load: ReplicaLoad,
) -> Result<(), String> {
    let mut tasks = Vec::new();
    for replica in 0..load.replicas {
        let store = world.replica().await?;
        for writer in 0..load.writers {
            tasks.push(tokio::spawn(writer_rounds(
                store.clone(),
                replica,
                writer,
                load.rounds,
            )));
        }
    }
    let mut acks = Acks::new();
    for task in tasks {
        let mine = task
            .await
            .map_err(|e| format!("a writer panicked: {e}"))??;
        for (key, body) in mine {
            if let Some(earlier) = acks.insert(key.clone(), body) {
                return Err(format!("{key:?} acknowledged twice (also as {earlier:?})"));
            }
        }
    }
    let checker = ViewPerCall::new(world.replica().await?);
    for ((path, version), body) in &acks {
        let got = ok(
            checker.get(path, *version).await,
            &format!("read back {path} v{version}"),
        )?;
        ensure(&got.content == body, || {
            format!(
                "{path} v{version} reads {:?}, acknowledged {body:?}",
                got.content
            )
        })?;
    }
    for shared in ["/shared/cas.md", "/shared/blind.md"] {
        let current = ok(checker.current_version(shared).await, "current")?;
        let acked: BTreeSet<u64> = acks
            .keys()
            .filter(|(p, _)| p == shared)
            .map(|(_, v)| *v)
            .collect();
        ensure(acked == (1..=current).collect(), || {
            format!("{shared}: acknowledged versions {acked:?}, current {current}")
        })?;
    }
    let own = acks.keys().filter(|(p, _)| p.starts_with("/own/")).count();
    let want = load.replicas * load.writers * load.rounds;
    ensure(own == want, || {
        format!("{own} own documents acknowledged, want {want}")
    })
}
