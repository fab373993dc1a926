//! The blob suite: what every [`BlobStore`] driver must do, case by case.
//!
//! Run it with [`run_blob_suite`] on a store and a root prefix nobody else writes under (a
//! fresh random prefix for shared buckets). Each case works under `<root><case>/`, so one
//! bucket can hold many runs. A case either passes, fails with the reason, or reports a
//! *gap*: a behaviour the target cannot show (an emulator that ignores a precondition), which
//! is neither a pass nor hidden.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use crate::report::{CaseError, CaseResult, Outcome, SuiteReport};
use bytes::Bytes;
use futures::StreamExt;
use quire_blob::{
    Attributes, BlobStore, Cancelable, Error, ErrorKind, Generation, MAX_KEY_LEN, MAX_LIST_PAGE,
    MUTATION_DATE_SLACK, Op, list_all,
};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

/// What the target under test can and cannot show.
#[derive(Clone, Copy, Debug)]
pub struct Capabilities {
    /// The target enforces the generation condition on delete. fake-gcs-server does not (it
    /// deletes whatever generation is named), so cases relying on it report a gap there.
    pub conditional_delete: bool,
    /// How many writers race in the concurrency cases.
    pub racers: usize,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            conditional_delete: true,
            racers: 20,
        }
    }
}

impl Capabilities {
    /// What the GCS emulator (fake-gcs-server) can show: it deletes whatever generation a
    /// DELETE names, so the cases that rely on a conditional delete report a gap there.
    pub fn fake_gcs() -> Self {
        Capabilities {
            conditional_delete: false,
            ..Capabilities::default()
        }
    }
}

/// The names of the blob suite's cases, in order.
pub fn blob_case_names() -> Vec<&'static str> {
    CASES.iter().map(|(name, _)| *name).collect()
}

/// Runs every case of the blob suite against `store` under `root` (which should end in `/`).
pub async fn run_blob_suite(
    store: Arc<dyn BlobStore>,
    root: &str,
    capabilities: Capabilities,
) -> SuiteReport {
    let mut outcomes = Vec::new();
    for (name, case) in CASES {
        let ctx = Ctx {
            store: store.clone(),
            root: format!("{root}{name}/"),
            capabilities,
        };
        outcomes.push((*name, Outcome::from(case(ctx).await)));
    }
    SuiteReport { outcomes }
}

type CaseFn = fn(Ctx) -> Pin<Box<dyn Future<Output = CaseResult> + Send>>;

#[derive(Clone)]
struct Ctx {
    store: Arc<dyn BlobStore>,
    root: String,
    capabilities: Capabilities,
}

impl Ctx {
    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.root)
    }
}

macro_rules! case {
    ($name:literal, $f:ident) => {
        ($name, (|ctx| Box::pin($f(ctx))) as CaseFn)
    };
}

const CASES: &[(&str, CaseFn)] = &[
    case!("round_trips", round_trips),
    case!("no_aliasing", no_aliasing),
    case!("duplicate_create", duplicate_create),
    case!("replace_cas", replace_cas),
    case!("delete_cas", delete_cas),
    case!("delete_recreate_aba", delete_recreate_aba),
    case!("concurrent_create", concurrent_create),
    case!("concurrent_replace", concurrent_replace),
    case!("list", list),
    case!("list_start_after", list_start_after),
    case!("list_pages", list_pages),
    case!("range_reads", range_reads),
    case!("validation", validation),
    case!("canceled", canceled),
    case!("missing_keys", missing_keys),
];

fn ensure(condition: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(why()) }
}

fn ok<T>(result: quire_blob::Result<T>, what: &str) -> Result<T, String> {
    result.map_err(|e| format!("{what}: unexpected error: {e}"))
}

/// Checks that `result` failed with `kind`, naming `op` and `key`.
fn expect_error<T: std::fmt::Debug>(
    result: quire_blob::Result<T>,
    kind: ErrorKind,
    op: Op,
    key: &str,
    what: &str,
) -> Result<Error, String> {
    match result {
        Ok(value) => Err(format!(
            "{what}: expected {kind} but succeeded with {value:?}"
        )),
        Err(err) if err.kind() == kind && err.op() == op && err.key() == key => Ok(err),
        Err(err) => Err(format!(
            "{what}: expected {kind} from {op} {key:?}, got {:?} from {} {:?}: {err}",
            err.kind(),
            err.op(),
            err.key()
        )),
    }
}

/// Whether `read` (what a get or head shows) is the object a mutation answered with
/// `written`: the same key, size and generation, and a modification time the mutation
/// reported at or up to [`MUTATION_DATE_SLACK`] after the stored one, never before.
fn same_object(read: &Attributes, written: &Attributes) -> bool {
    read.key == written.key
        && read.size == written.size
        && read.generation == written.generation
        && written
            .modified
            .duration_since(read.modified)
            .is_ok_and(|later| later <= MUTATION_DATE_SLACK)
}

fn check_attributes(attrs: &Attributes, key: &str, size: usize, what: &str) -> Result<(), String> {
    ensure(attrs.key == key, || {
        format!("{what}: key {:?} != {key:?}", attrs.key)
    })?;
    ensure(attrs.size == size as u64, || {
        format!("{what}: size {} != {size}", attrs.size)
    })?;
    ensure(!attrs.generation.as_str().is_empty(), || {
        format!("{what}: empty generation")
    })?;
    ensure(attrs.modified > SystemTime::UNIX_EPOCH, || {
        format!("{what}: modified time unset")
    })
}

async fn expect_data(ctx: &Ctx, key: &str, data: &[u8], what: &str) -> Result<Attributes, String> {
    let object = ok(ctx.store.get(key).await, what)?;
    ensure(object.data.as_ref() == data, || {
        format!(
            "{what}: stored bytes differ ({} bytes read)",
            object.data.len()
        )
    })?;
    Ok(object.attributes)
}

async fn round_trips(ctx: Ctx) -> CaseResult {
    for (name, data) in [("empty", Vec::new()), ("bytes", (0..=255u8).collect())] {
        let key = ctx.key(name);
        let created = ok(
            ctx.store.create(&key, Bytes::from(data.clone())).await,
            "create",
        )?;
        check_attributes(&created, &key, data.len(), "create")?;
        let got = expect_data(&ctx, &key, &data, "get").await?;
        ensure(same_object(&got, &created), || {
            format!("get attributes {got:?} != create {created:?}")
        })?;
        let head = ok(ctx.store.head(&key).await, "head")?;
        ensure(same_object(&head, &created), || {
            format!("head {head:?} != create {created:?}")
        })?;
    }
    Ok(())
}

async fn no_aliasing(ctx: Ctx) -> CaseResult {
    let key = ctx.key("object");
    let mut input = b"original".to_vec();
    let created = ok(
        ctx.store.create(&key, Bytes::copy_from_slice(&input)).await,
        "create",
    )?;
    input.copy_from_slice(b"mutated!");
    let first = expect_data(&ctx, &key, b"original", "get after mutating the input").await?;
    ensure(same_object(&first, &created), || {
        "attributes changed without a write".into()
    })?;
    let replaced = ok(
        ctx.store
            .replace(&key, &created.generation, Bytes::from_static(b"second"))
            .await,
        "replace",
    )?;
    let listed = ok(ctx.store.list(&ctx.root, "", None).await, "list")?;
    ensure(listed.objects == vec![replaced.clone()], || {
        format!(
            "list shows {:?}, want the replaced {replaced:?}",
            listed.objects
        )
    })?;
    expect_data(&ctx, &key, b"second", "get after replace").await?;
    Ok(())
}

async fn duplicate_create(ctx: Ctx) -> CaseResult {
    let key = ctx.key("object");
    let created = ok(
        ctx.store.create(&key, Bytes::from_static(b"first")).await,
        "create",
    )?;
    expect_error(
        ctx.store.create(&key, Bytes::from_static(b"second")).await,
        ErrorKind::Precondition,
        Op::Create,
        &key,
        "second create",
    )?;
    let got = expect_data(&ctx, &key, b"first", "get after duplicate").await?;
    ensure(same_object(&got, &created), || {
        "attributes changed by a failed create".into()
    })?;
    Ok(())
}

async fn replace_cas(ctx: Ctx) -> CaseResult {
    let key = ctx.key("object");
    let first = ok(
        ctx.store.create(&key, Bytes::from_static(b"one")).await,
        "create",
    )?;
    let second = ok(
        ctx.store
            .replace(&key, &first.generation, Bytes::from_static(b"two"))
            .await,
        "replace at current generation",
    )?;
    check_attributes(&second, &key, 3, "replace")?;
    ensure(second.generation != first.generation, || {
        "replace kept the old generation".into()
    })?;
    expect_error(
        ctx.store
            .replace(&key, &first.generation, Bytes::from_static(b"three"))
            .await,
        ErrorKind::Precondition,
        Op::Replace,
        &key,
        "replace at stale generation",
    )?;
    let got = expect_data(&ctx, &key, b"two", "get after stale replace").await?;
    ensure(got == second, || {
        "a stale replace changed the attributes".into()
    })?;
    let missing = ctx.key("missing");
    expect_error(
        ctx.store
            .replace(&missing, &first.generation, Bytes::from_static(b"x"))
            .await,
        ErrorKind::Precondition,
        Op::Replace,
        &missing,
        "replace of a missing key",
    )?;
    expect_error(
        ctx.store.head(&missing).await,
        ErrorKind::NotFound,
        Op::Head,
        &missing,
        "head",
    )?;
    Ok(())
}

const DELETE_GAP: &str = "the target ignores the generation condition on delete";

async fn delete_cas(ctx: Ctx) -> CaseResult {
    let key = ctx.key("object");
    let first = ok(
        ctx.store.create(&key, Bytes::from_static(b"one")).await,
        "create",
    )?;
    let second = ok(
        ctx.store
            .replace(&key, &first.generation, Bytes::from_static(b"two"))
            .await,
        "replace",
    )?;
    if ctx.capabilities.conditional_delete {
        expect_error(
            ctx.store.delete(&key, &first.generation).await,
            ErrorKind::Precondition,
            Op::Delete,
            &key,
            "delete at stale generation",
        )?;
        expect_data(&ctx, &key, b"two", "get after stale delete").await?;
    }
    ok(
        ctx.store.delete(&key, &second.generation).await,
        "delete at current generation",
    )?;
    expect_error(
        ctx.store.get(&key).await,
        ErrorKind::NotFound,
        Op::Get,
        &key,
        "get after delete",
    )?;
    if !ctx.capabilities.conditional_delete {
        return Err(CaseError::Gap(DELETE_GAP.into()));
    }
    expect_error(
        ctx.store.delete(&key, &second.generation).await,
        ErrorKind::Precondition,
        Op::Delete,
        &key,
        "second delete",
    )?;
    Ok(())
}

async fn delete_recreate_aba(ctx: Ctx) -> CaseResult {
    let key = ctx.key("object");
    let first = ok(
        ctx.store
            .create(&key, Bytes::from_static(b"first life"))
            .await,
        "create",
    )?;
    ok(ctx.store.delete(&key, &first.generation).await, "delete")?;
    let second = ok(
        ctx.store
            .create(&key, Bytes::from_static(b"second life"))
            .await,
        "re-create",
    )?;
    ensure(second.generation != first.generation, || {
        format!("re-created object reuses generation {}", first.generation)
    })?;
    expect_error(
        ctx.store
            .replace(&key, &first.generation, Bytes::from_static(b"x"))
            .await,
        ErrorKind::Precondition,
        Op::Replace,
        &key,
        "replace with the first life's generation",
    )?;
    if !ctx.capabilities.conditional_delete {
        expect_data(&ctx, &key, b"second life", "get").await?;
        return Err(CaseError::Gap(DELETE_GAP.into()));
    }
    expect_error(
        ctx.store.delete(&key, &first.generation).await,
        ErrorKind::Precondition,
        Op::Delete,
        &key,
        "delete with the first life's generation",
    )?;
    let got = expect_data(&ctx, &key, b"second life", "get").await?;
    ensure(got == second, || {
        "attributes differ from the re-create".into()
    })?;
    Ok(())
}

/// Starts `racers` tasks at once (behind a barrier) and collects their results in order.
async fn race<T, F, Fut>(racers: usize, store: Arc<dyn BlobStore>, call: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Arc<dyn BlobStore>, usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(racers));
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let barrier = barrier.clone();
            let attempt = call(store.clone(), i);
            tokio::spawn(async move {
                barrier.wait().await;
                attempt.await
            })
        })
        .collect();
    let mut out = Vec::with_capacity(racers);
    for task in tasks {
        out.push(task.await.expect("racer panicked"));
    }
    out
}

async fn concurrent_create(ctx: Ctx) -> CaseResult {
    let key = ctx.key("contended");
    let results = race(ctx.capabilities.racers, ctx.store.clone(), |store, i| {
        let key = key.clone();
        async move { store.create(&key, Bytes::from(format!("racer {i}"))).await }
    })
    .await;
    expect_one_winner(&ctx, &key, results, "create").await
}

async fn concurrent_replace(ctx: Ctx) -> CaseResult {
    let key = ctx.key("contended");
    let base = ok(
        ctx.store.create(&key, Bytes::from_static(b"base")).await,
        "create",
    )?;
    let generation = base.generation.clone();
    let results = race(ctx.capabilities.racers, ctx.store.clone(), |store, i| {
        let (key, generation) = (key.clone(), generation.clone());
        async move {
            store
                .replace(&key, &generation, Bytes::from(format!("racer {i}")))
                .await
        }
    })
    .await;
    expect_one_winner(&ctx, &key, results, "replace").await
}

/// Checks that exactly one racer won (racer `i` wrote `racer {i}`), every other racer lost
/// with a precondition error, and the key holds the winner's bytes and attributes.
async fn expect_one_winner(
    ctx: &Ctx,
    key: &str,
    results: Vec<quire_blob::Result<Attributes>>,
    what: &str,
) -> CaseResult {
    let mut winner = None;
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Ok(attrs) if winner.is_none() => winner = Some((i, attrs)),
            Ok(_) => return Err(format!("two racing {what}s of one key both won").into()),
            Err(err) if err.kind() == ErrorKind::Precondition => {}
            Err(err) => return Err(format!("racer {i}: {err}").into()),
        }
    }
    let (i, attrs) = winner.ok_or_else(|| format!("no {what} won"))?;
    let got = expect_data(ctx, key, format!("racer {i}").as_bytes(), "winner's data").await?;
    ensure(same_object(&got, &attrs), || {
        "stored attributes differ from the winner's".into()
    })?;
    Ok(())
}

async fn list(ctx: Ctx) -> CaseResult {
    let mut want = Vec::new();
    for name in ["z", "a", "m"] {
        want.push(ok(
            ctx.store
                .create(&ctx.key(name), Bytes::from_static(b"v"))
                .await,
            "create",
        )?);
    }
    let m = want.pop().expect("m was created");
    want.push(ok(
        ctx.store
            .replace(&m.key, &m.generation, Bytes::from_static(b"replaced"))
            .await,
        "replace",
    )?);
    want.sort_by(|a, b| a.key.cmp(&b.key));
    // A key sharing the root's text but outside the prefix must not show up.
    let outside = format!("{}-outside", ctx.root.trim_end_matches('/'));
    ok(
        ctx.store.create(&outside, Bytes::from_static(b"v")).await,
        "create outside",
    )?;
    let page = ok(ctx.store.list(&ctx.root, "", None).await, "list")?;
    ensure(page.objects == want, || {
        format!("listed {:?}, want {want:?}", keys(&page.objects))
    })?;
    ensure(page.next_cursor.is_none(), || {
        "a complete listing has a cursor".into()
    })?;
    Ok(())
}

fn keys(objects: &[Attributes]) -> Vec<&str> {
    objects.iter().map(|a| a.key.as_str()).collect()
}

async fn list_start_after(ctx: Ctx) -> CaseResult {
    for name in ["a", "b", "c", "d"] {
        ok(
            ctx.store
                .create(&ctx.key(name), Bytes::from_static(b"v"))
                .await,
            "create",
        )?;
    }
    let cases: [(String, &[&str]); 6] = [
        (String::new(), &["a", "b", "c", "d"]),
        (ctx.key("b"), &["c", "d"]),
        (ctx.key("b0"), &["c", "d"]),
        (
            ctx.root[..ctx.root.len() - 1].to_owned(),
            &["a", "b", "c", "d"],
        ),
        (ctx.key("d"), &[]),
        (format!("{}\u{FFFF}", ctx.root), &[]),
    ];
    for (start_after, names) in cases {
        let page = ok(ctx.store.list(&ctx.root, &start_after, None).await, "list")?;
        let want: Vec<String> = names.iter().map(|n| ctx.key(n)).collect();
        ensure(keys(&page.objects) == want, || {
            format!(
                "start_after {start_after:?}: listed {:?}, want {want:?}",
                keys(&page.objects)
            )
        })?;
    }
    expect_error(
        ctx.store.list(&ctx.root, "bad\nstart", None).await,
        ErrorKind::Precondition,
        Op::List,
        &ctx.root,
        "start_after with a newline",
    )?;
    Ok(())
}

async fn list_pages(ctx: Ctx) -> CaseResult {
    let total = MAX_LIST_PAGE * 2 + 37;
    let names: Vec<String> = (0..total).map(|i| ctx.key(&format!("{i:016x}"))).collect();
    let creates = futures::stream::iter(names.iter().cloned())
        .map(|key| {
            let store = ctx.store.clone();
            async move { store.create(&key, Bytes::from_static(b"p")).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    for result in creates {
        ok(result, "create")?;
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = ok(
            ctx.store.list(&ctx.root, "", cursor.as_deref()).await,
            "list page",
        )?;
        pages += 1;
        ensure(page.objects.len() <= MAX_LIST_PAGE, || {
            format!("page of {} keys", page.objects.len())
        })?;
        seen.extend(page.objects.into_iter().map(|a| a.key));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
        ensure(pages <= total, || "listing does not end".into())?;
    }
    ensure(seen == names, || {
        format!(
            "paged listing returned {} keys, want {total} in order",
            seen.len()
        )
    })?;
    ensure(pages >= 3, || {
        format!("{total} keys came in only {pages} pages")
    })?;
    // Cursors continue only the listing they came from.
    let first = ok(ctx.store.list(&ctx.root, "", None).await, "list")?;
    let cursor = first
        .next_cursor
        .ok_or("first page of many has no cursor")?;
    expect_error(
        ctx.store.list(&ctx.root, &names[5], Some(&cursor)).await,
        ErrorKind::Precondition,
        Op::List,
        &ctx.root,
        "cursor reused with another start_after",
    )?;
    let tail = ok(
        list_all(ctx.store.as_ref(), &ctx.root, &names[total - 3]).await,
        "list_all",
    )?;
    ensure(keys(&tail) == names[total - 2..], || {
        "list_all after a key".into()
    })?;
    Ok(())
}

async fn range_reads(ctx: Ctx) -> CaseResult {
    let key = ctx.key("object");
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    ok(
        ctx.store.create(&key, Bytes::from(data.clone())).await,
        "create",
    )?;
    for (range, want) in [
        (0..10, &data[0..10]),
        (990..1000, &data[990..1000]),
        (500..501, &data[500..501]),
        (995..2000, &data[995..]),
        (7..7, &data[7..7]),
    ] {
        let got = ok(ctx.store.get_range(&key, range.clone()).await, "get_range")?;
        ensure(got.as_ref() == want, || {
            format!("range {range:?} returned other bytes")
        })?;
    }
    expect_error(
        ctx.store.get_range(&key, 1001..1010).await,
        ErrorKind::Precondition,
        Op::GetRange,
        &key,
        "range past the end",
    )?;
    let missing = ctx.key("missing");
    expect_error(
        ctx.store.get_range(&missing, 0..1).await,
        ErrorKind::NotFound,
        Op::GetRange,
        &missing,
        "range of a missing key",
    )?;
    Ok(())
}

async fn validation(ctx: Ctx) -> CaseResult {
    let long_key = "k".repeat(MAX_KEY_LEN + 1);
    for bad in ["", ".", "..", "a\nb", "a\rb", long_key.as_str()] {
        expect_error(
            ctx.store.create(bad, Bytes::from_static(b"v")).await,
            ErrorKind::Precondition,
            Op::Create,
            bad,
            "create with an invalid key",
        )?;
    }
    let key = ctx.key("object");
    let created = ok(
        ctx.store.create(&key, Bytes::from_static(b"v")).await,
        "create",
    )?;
    for bogus in [
        Generation::new("0"),
        Generation::new("-1"),
        Generation::new("bogus"),
    ] {
        expect_error(
            ctx.store
                .replace(&key, &bogus, Bytes::from_static(b"w"))
                .await,
            ErrorKind::Precondition,
            Op::Replace,
            &key,
            "replace at a bogus generation",
        )?;
        if ctx.capabilities.conditional_delete {
            expect_error(
                ctx.store.delete(&key, &bogus).await,
                ErrorKind::Precondition,
                Op::Delete,
                &key,
                "delete at a bogus generation",
            )?;
        }
    }
    let got = expect_data(&ctx, &key, b"v", "get after refused mutations").await?;
    ensure(same_object(&got, &created), || {
        "refused mutations changed the object".into()
    })?;
    let long_prefix = "p".repeat(MAX_KEY_LEN + 1);
    for bad in ["a\rb", "a\nb", long_prefix.as_str()] {
        expect_error(
            ctx.store.list(bad, "", None).await,
            ErrorKind::Precondition,
            Op::List,
            bad,
            "list with an invalid prefix",
        )?;
    }
    for fine in [".", ".."] {
        ok(
            ctx.store.list(fine, "", None).await,
            "list with prefix . or ..",
        )?;
    }
    expect_error(
        ctx.store.list(&ctx.root, "", Some("not a cursor")).await,
        ErrorKind::Precondition,
        Op::List,
        &ctx.root,
        "garbage cursor",
    )?;
    Ok(())
}

async fn canceled(ctx: Ctx) -> CaseResult {
    let key = ctx.key("object");
    let existing = ctx.key("existing");
    let base = ok(
        ctx.store
            .create(&existing, Bytes::from_static(b"kept"))
            .await,
        "create",
    )?;
    let token = CancellationToken::new();
    token.cancel();
    let canceled = Cancelable::new(ctx.store.clone(), token);
    let kind = ErrorKind::Canceled;
    expect_error(
        canceled.create(&key, Bytes::from_static(b"v")).await,
        kind,
        Op::Create,
        &key,
        "create",
    )?;
    expect_error(
        canceled.get(&existing).await,
        kind,
        Op::Get,
        &existing,
        "get",
    )?;
    expect_error(
        canceled.get_range(&existing, 0..1).await,
        kind,
        Op::GetRange,
        &existing,
        "range",
    )?;
    expect_error(
        canceled.head(&existing).await,
        kind,
        Op::Head,
        &existing,
        "head",
    )?;
    expect_error(
        canceled
            .replace(&existing, &base.generation, Bytes::from_static(b"x"))
            .await,
        kind,
        Op::Replace,
        &existing,
        "replace",
    )?;
    expect_error(
        canceled.delete(&existing, &base.generation).await,
        kind,
        Op::Delete,
        &existing,
        "delete",
    )?;
    expect_error(
        canceled.list(&ctx.root, "", None).await,
        kind,
        Op::List,
        &ctx.root,
        "list",
    )?;
    expect_error(
        ctx.store.head(&key).await,
        ErrorKind::NotFound,
        Op::Head,
        &key,
        "head",
    )?;
    let got = expect_data(&ctx, &existing, b"kept", "get").await?;
    ensure(got == base, || "a canceled call changed the object".into())?;
    Ok(())
}

async fn missing_keys(ctx: Ctx) -> CaseResult {
    let key = ctx.key("never");
    expect_error(
        ctx.store.get(&key).await,
        ErrorKind::NotFound,
        Op::Get,
        &key,
        "get",
    )?;
    expect_error(
        ctx.store.head(&key).await,
        ErrorKind::NotFound,
        Op::Head,
        &key,
        "head",
    )?;
    let some_generation = Generation::new("1");
    expect_error(
        ctx.store
            .replace(&key, &some_generation, Bytes::from_static(b"v"))
            .await,
        ErrorKind::Precondition,
        Op::Replace,
        &key,
        "replace",
    )?;
    if ctx.capabilities.conditional_delete {
        expect_error(
            ctx.store.delete(&key, &some_generation).await,
            ErrorKind::Precondition,
            Op::Delete,
            &key,
            "delete",
        )?;
    }
    let page = ok(
        ctx.store.list(&ctx.root, "", None).await,
        "list of an empty prefix",
    )?;
    ensure(
        page.objects.is_empty() && page.next_cursor.is_none(),
        || "empty prefix listed something".into(),
    )?;
    expect_error(
        ctx.store.head(&key).await,
        ErrorKind::NotFound,
        Op::Head,
        &key,
        "head after",
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn attributes(generation: &str, modified_secs: u64) -> Attributes {
        Attributes {
            key: "k".into(),
            size: 3,
            generation: Generation::new(generation),
            modified: SystemTime::UNIX_EPOCH + Duration::from_secs(modified_secs),
        }
    }

    #[test]
    fn a_mutation_may_date_its_object_a_little_later_and_never_earlier() {
        let stored = attributes("g1", 1_000);
        assert!(same_object(&stored, &attributes("g1", 1_000)));
        assert!(same_object(&stored, &attributes("g1", 1_001)));
        assert!(same_object(&stored, &attributes("g1", 1_002)));
        assert!(!same_object(&stored, &attributes("g1", 1_003)));
        assert!(!same_object(&stored, &attributes("g1", 999)));
        assert!(!same_object(&stored, &attributes("g2", 1_000)));
        let mut bigger = attributes("g1", 1_000);
        bigger.size = 4;
        assert!(!same_object(&stored, &bigger));
    }
}
