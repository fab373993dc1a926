//! The differential suite: seeded random operations applied to two backends (a reference and
//! a candidate) in lockstep. Every operation's answer must match, and every few operations a
//! full observable snapshot of both worlds must match line by line.
//!
//! Operations: writes (50 %), appends (25 %), archives (13 %) and unarchives (12 %) over a
//! path pool with collisions (`/a` and `/a/x.md`), hidden and reserved names, non-ASCII,
//! non-`.md` and unnormalised spellings, a body pool (empty, own frontmatter, binary, one
//! byte over the limit, shared bodies) and a metadata pool (tags, importance, retention,
//! reserved and malformed keys, line breaks, oversize), under every expected-version mode
//! (current, any, create-only, stale, ahead, far).
//!
//! The snapshot: per path, the current document, the version list, every retained version,
//! the next version, chain verification; per directory, `is_dir` and both listing modes; per
//! body, the hash lookup; LOOKUP over queries × scopes × filters.

use std::sync::Arc;

use bytes::Bytes;
use quire_backend::{
    ArchiveRequest, CatalogQuery, Ctx, Document, Error, Filter, Hash, ListOptions, Store,
};
use quire_log::ManualClock;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::harness::{BackendFactory, SUITE_EPOCH, ViewPerCall, request};
use crate::report::{Outcome, SuiteReport};

/// How much the differential suite runs.
#[derive(Clone, Debug)]
pub struct DifferentialPlan {
    pub seeds: Vec<u64>,
    /// Operations per seed.
    pub ops: usize,
    /// A full snapshot comparison after every this many operations (and at the end).
    pub snapshot_every: usize,
}

impl Default for DifferentialPlan {
    fn default() -> Self {
        DifferentialPlan {
            seeds: (1..=12).collect(),
            ops: 200,
            snapshot_every: 10,
        }
    }
}

/// Paths the operations touch, some colliding, some not canonical, some invalid.
pub const PATHS: &[&str] = &[
    "/a.md",
    "/b.md",
    "/a",
    "/a/x.md",
    "/a/x.md/y.md",
    "/dir/one.md",
    "/dir/sub/two.md",
    "/dir",
    "/.hidden.md",
    "/dir/.dot.md",
    "/versions/v.md",
    "/dir/versions",
    "/ünï/cödé.md",
    "/no-ext",
    "/sp ace.md",
    "/%pct.md",
    "/.quire/x.md",
    "dir/one.md",
    "//dir//one.md/",
    "/a/../b.md",
];

/// Directories the snapshot lists.
pub const DIRS: &[&str] = &[
    "/",
    "/a",
    "/dir",
    "/dir/sub",
    "/a/x.md",
    "/missing",
    "/versions",
    "/ünï",
    "/.quire",
];

const QUERIES: &[&str] = &[
    "*", "hello", "title", "a", "b custom", "note", "%", "ünï", "two",
];
const SCOPES: &[&str] = &["/", "/dir", "/a"];

/// Valid bodies (every one a publishable document).
fn bodies() -> Vec<Bytes> {
    vec![
        Bytes::from_static(b""),
        Bytes::from_static(b"hello"),
        Bytes::from_static(b"hello\n"),
        Bytes::from_static(b"# Title Two\nbody"),
        Bytes::from_static(b"---\nown: frontmatter\n---\nbody"),
        Bytes::from_static("ünïcödé text\n".as_bytes()),
        Bytes::from_static(b"a note about % signs"),
    ]
}

/// Bodies every write refuses.
fn bad_bodies() -> Vec<Bytes> {
    vec![
        Bytes::from_static(&[0xff, 0xfe, 0x00]),
        Bytes::from(vec![b'o'; (1 << 20) + 1]),
    ]
}

type Pairs = Vec<(&'static str, String)>;

/// Valid metadata.
fn metadata_pool() -> Vec<Pairs> {
    vec![
        vec![],
        vec![],
        vec![("tags", "a, b".into())],
        vec![("tags", "B,a".into()), ("importance", "0.8".into())],
        vec![("title", "Custom".into())],
        vec![("retention", "2".into())],
        vec![("retention", "1".into()), ("tags", "a".into())],
        vec![("type", "Note".into())],
        vec![("agent", "bot".into())],
        vec![("importance", "2".into())],
    ]
}

/// Metadata every write refuses.
fn bad_metadata() -> Vec<Pairs> {
    vec![
        vec![("version", "1".into())],
        vec![("Bad", "x".into())],
        vec![("note", "line\nbreak".into())],
        vec![("note", "x".repeat(1100))],
        vec![("retention", "0".into())],
    ]
}

/// One generated operation.
#[derive(Clone, Debug)]
enum Operation {
    Write {
        path: &'static str,
        expected: Expect,
        body: Bytes,
        meta: Pairs,
    },
    Append {
        path: &'static str,
        expected: Expect,
        body: Bytes,
        meta: Pairs,
    },
    Archive {
        path: &'static str,
        archived: bool,
    },
}

#[derive(Clone, Copy, Debug)]
enum Expect {
    Current,
    Any,
    Create,
    Stale,
    Ahead,
    Far,
}

impl Expect {
    fn resolve(self, current: u64) -> Option<u64> {
        match self {
            Expect::Current => Some(current),
            Expect::Any => None,
            Expect::Create => Some(0),
            Expect::Stale => Some(current.saturating_sub(1)),
            Expect::Ahead => Some(current + 1),
            Expect::Far => Some(99),
        }
    }
}

/// One of `items`, each as likely as its weight.
fn pick<T: Clone>(rng: &mut SmallRng, items: &[(u32, T)]) -> T {
    let total: u32 = items.iter().map(|(w, _)| w).sum();
    let mut roll = rng.random_range(0..total);
    for (weight, item) in items {
        if roll < *weight {
            return item.clone();
        }
        roll -= weight;
    }
    unreachable!("the roll falls inside the total weight")
}

fn one_of<T: Clone>(rng: &mut SmallRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())].clone()
}

fn generate(rng: &mut SmallRng) -> Operation {
    // Valid canonical paths most of the time; the odd spellings and invalid paths at the end.
    let path = if rng.random_range(0..10) < 8 {
        PATHS[rng.random_range(0..PATHS.len() - 3)]
    } else {
        one_of(rng, PATHS)
    };
    let expected = pick(
        rng,
        &[
            (35, Expect::Current),
            (30, Expect::Any),
            (10, Expect::Create),
            (10, Expect::Stale),
            (10, Expect::Ahead),
            (5, Expect::Far),
        ],
    );
    let body = if rng.random_range(0..20) == 0 {
        one_of(rng, &bad_bodies())
    } else {
        one_of(rng, &bodies())
    };
    let meta = if rng.random_range(0..10) == 0 {
        one_of(rng, &bad_metadata())
    } else {
        one_of(rng, &metadata_pool())
    };
    match rng.random_range(0..100) {
        0..50 => Operation::Write {
            path,
            expected,
            body,
            meta,
        },
        50..75 => {
            // Appends need the current version; the other modes stay, less often.
            let expected = if rng.random_range(0..2) == 0 {
                Expect::Current
            } else {
                expected
            };
            Operation::Append {
                path,
                expected,
                body,
                meta,
            }
        }
        75..88 => Operation::Archive {
            path,
            archived: true,
        },
        _ => Operation::Archive {
            path,
            archived: false,
        },
    }
}

fn show_doc(doc: &Document) -> String {
    format!(
        "{} v{} etag {} body {} modified {} archived {} meta {:?} prune {:?}",
        doc.path,
        doc.version,
        doc.etag,
        doc.content_hash,
        doc.modified,
        doc.archived,
        doc.metadata,
        doc.prune
    )
}

fn show_err(e: &Error) -> String {
    match e.current() {
        Some(c) => format!(
            "error {:?} (current v{} etag {})",
            e.kind(),
            c.version,
            c.etag
        ),
        None => format!("error {:?}", e.kind()),
    }
}

fn show<T>(result: &Result<T, Error>, ok: impl FnOnce(&T) -> String) -> String {
    match result {
        Ok(value) => ok(value),
        Err(e) => show_err(e),
    }
}

/// Applies one operation; returns the answer as a line.
async fn apply(
    store: &Arc<dyn Store>,
    direct: &ViewPerCall,
    op: &Operation,
) -> Result<String, String> {
    let ctx = Ctx::new();
    Ok(match op {
        Operation::Write {
            path,
            expected,
            body,
            meta,
        } => {
            let current = direct
                .current_version(path)
                .await
                .map_err(|e| e.to_string())?;
            let pairs: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let result = store
                .publish(&ctx, request(path, expected.resolve(current), body, &pairs))
                .await;
            format!("write {path}: {}", show(&result, show_doc))
        }
        Operation::Append {
            path,
            expected,
            body,
            meta,
        } => {
            let current = direct
                .current_version(path)
                .await
                .map_err(|e| e.to_string())?;
            let pairs: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let result = store
                .append(&ctx, request(path, expected.resolve(current), body, &pairs))
                .await;
            format!("append {path}: {}", show(&result, show_doc))
        }
        Operation::Archive { path, archived } => {
            let result = store
                .set_archived(&ctx, ArchiveRequest::new(*path, *archived))
                .await;
            format!(
                "archive({archived}) {path}: {}",
                show(&result, |r| format!(
                    "changed {} {:?}",
                    r.changed, r.document
                ))
            )
        }
    })
}

/// Every observable fact of a world over the pools, one per line: what the differential
/// suite compares, and what a persistent backend must show again after reopening.
pub async fn observe(direct: &ViewPerCall) -> Vec<String> {
    let mut lines = Vec::new();
    for path in PATHS {
        let current = direct.get(path, 0).await;
        lines.push(format!("get {path}: {}", show(&current, show_doc)));
        let versions = direct.versions(path).await;
        lines.push(format!(
            "versions {path}: {}",
            show(&versions, |vs| format!(
                "{:?}",
                vs.iter()
                    .map(|v| (v.version, v.etag, v.modified.0))
                    .collect::<Vec<_>>()
            ))
        ));
        if let Ok(versions) = &versions {
            for v in versions {
                let got = direct.get(path, v.version).await;
                lines.push(format!(
                    "get {path} v{}: {}",
                    v.version,
                    show(&got, show_doc)
                ));
            }
            let next = versions.first().map_or(1, |v| v.version + 1);
            let got = direct.get(path, next).await;
            lines.push(format!("get {path} v{next}: {}", show(&got, show_doc)));
        }
        let chain = direct.verify_chain(path).await;
        lines.push(format!("chain {path}: {}", show(&chain, |_| "ok".into())));
    }
    for dir in DIRS {
        let is_dir = direct.is_dir(dir).await;
        lines.push(format!(
            "is_dir {dir}: {}",
            show(&is_dir, |b| b.to_string())
        ));
        for include_archived in [false, true] {
            let listed = direct
                .list(
                    dir,
                    ListOptions {
                        include_archived,
                        ..ListOptions::default()
                    },
                )
                .await;
            lines.push(format!(
                "list({include_archived}) {dir}: {}",
                show(&listed, |es| format!("{es:?}"))
            ));
        }
    }
    for body in bodies().iter().chain(&bad_bodies()[..1]) {
        let hash = Hash::of(body);
        let found = direct.lookup_hash(&hash).await;
        lines.push(format!(
            "hash {}: {}",
            hash,
            show(&found, |p| p.to_string())
        ));
    }
    for query in QUERIES {
        for scope in SCOPES {
            for filter in [
                None,
                Some(Filter::tag("a")),
                Some(Filter::Equals("type".into(), "Note".into())),
            ] {
                let mut q = CatalogQuery::new(*query).scope(*scope);
                q.filters.extend(filter.clone());
                let found = direct.lookup(q).await;
                lines.push(format!(
                    "lookup {query:?} in {scope} {filter:?}: {}",
                    show(&found, |ms| format!(
                        "{:?}",
                        ms.iter()
                            .map(|m| (
                                m.path.to_string(),
                                m.score,
                                m.title.clone(),
                                m.tags.clone(),
                                m.importance.clone(),
                                m.modified.0
                            ))
                            .collect::<Vec<_>>()
                    ))
                ));
            }
        }
    }
    lines
}

fn first_difference(reference: &[String], candidate: &[String]) -> Option<String> {
    for (i, (r, c)) in reference.iter().zip(candidate).enumerate() {
        if r != c {
            return Some(format!("line {i}:\n    reference: {r}\n    candidate: {c}"));
        }
    }
    (reference.len() != candidate.len())
        .then(|| format!("{} lines against {}", reference.len(), candidate.len()))
}

/// Runs one seed; `Err` names the first difference.
async fn run_seed(
    reference: &dyn BackendFactory,
    candidate: &dyn BackendFactory,
    seed: u64,
    plan: &DifferentialPlan,
) -> Result<(), String> {
    let ref_clock = Arc::new(ManualClock::new(SUITE_EPOCH));
    let cand_clock = Arc::new(ManualClock::new(SUITE_EPOCH));
    let ref_store = reference
        .open(ref_clock.clone())
        .await
        .map_err(|e| format!("opening the reference: {e}"))?
        .store;
    let cand_store = candidate
        .open(cand_clock.clone())
        .await
        .map_err(|e| format!("opening the candidate: {e}"))?
        .store;
    let ref_direct = ViewPerCall::new(ref_store.clone());
    let cand_direct = ViewPerCall::new(cand_store.clone());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut log: Vec<String> = Vec::new();
    let result = async {
        for i in 0..plan.ops {
            let step = rng.random_range(0..3);
            ref_clock.advance(step);
            cand_clock.advance(step);
            let op = generate(&mut rng);
            let want = apply(&ref_store, &ref_direct, &op).await?;
            let got = apply(&cand_store, &cand_direct, &op).await?;
            log.push(want.clone());
            if want != got {
                return Err(format!(
                    "op {i} answers differ:\n    reference: {want}\n    candidate: {got}"
                ));
            }
            if (i + 1) % plan.snapshot_every.max(1) == 0 || i + 1 == plan.ops {
                let want = observe(&ref_direct).await;
                let got = observe(&cand_direct).await;
                if let Some(diff) = first_difference(&want, &got) {
                    return Err(format!("snapshot after op {i} differs at {diff}"));
                }
            }
        }
        Ok(())
    }
    .await;
    ref_store.close().await;
    cand_store.close().await;
    result.map_err(|why| {
        let tail: Vec<&String> = log.iter().rev().take(5).collect();
        format!("seed {seed}: {why}\n  last operations (newest first): {tail:#?}")
    })
}

/// Applies `ops` operations generated from `seed` to one store (advancing `clock` as the
/// suite does) and returns every answer, one line each: a way to bring any backend into a
/// varied state, e.g. to check that a persistent one shows the same [`observe`] lines after
/// reopening.
pub async fn run_operations(
    store: Arc<dyn Store>,
    clock: &ManualClock,
    seed: u64,
    ops: usize,
) -> Result<Vec<String>, String> {
    let direct = ViewPerCall::new(store.clone());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut answers = Vec::with_capacity(ops);
    for _ in 0..ops {
        clock.advance(rng.random_range(0..3));
        let op = generate(&mut rng);
        answers.push(apply(&store, &direct, &op).await?);
    }
    Ok(answers)
}

/// Runs the differential suite: one case per seed, reference against candidate.
pub async fn run_differential(
    reference: &dyn BackendFactory,
    candidate: &dyn BackendFactory,
    plan: &DifferentialPlan,
) -> SuiteReport {
    let mut outcomes = Vec::new();
    for seed in &plan.seeds {
        let outcome = match run_seed(reference, candidate, *seed, plan).await {
            Ok(()) => Outcome::Passed,
            Err(why) => Outcome::Failed(why),
        };
        // Reports name cases with static strings; a run holds a handful of seeds.
        let name: &'static str = Box::leak(format!("seed_{seed}").into_boxed_str());
        outcomes.push((name, outcome));
    }
    SuiteReport { outcomes }
}
