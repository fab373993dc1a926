//! What the backend suites stand on: the factories a backend provides, the [`ViewPerCall`]
//! adapter (one view per call), and the checks the cases share.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use quire_backend::{
    ArchiveRequest, ArchiveResult, CatalogMatch, CatalogQuery, Ctx, DirEntry, DocPath, Document,
    Error, ErrorKind, Hash, ListOptions, Metadata, Store, Timestamp, VersionInfo, WriteRequest,
};
use quire_log::{Clock, ManualClock};

use crate::report::{CaseError, Outcome, SuiteReport};

/// Where every suite's clock starts: 2026-01-01T00:00:00Z.
pub const SUITE_EPOCH: Timestamp = Timestamp(1_767_225_600);

/// The longest one case may take: a case that outlives it fails, naming itself, and the suite
/// goes on, so a hang is a finding with its place rather than a run held to its limit.
pub(crate) const CASE_DEADLINE: Duration = Duration::from_secs(120);

/// Runs one case under [`CASE_DEADLINE`].
pub(crate) async fn within_deadline<T>(
    case: impl Future<Output = T>,
    timed_out: impl FnOnce() -> T,
) -> T {
    tokio::time::timeout(CASE_DEADLINE, case)
        .await
        .unwrap_or_else(|_| timed_out())
}

pub(crate) fn overran() -> String {
    format!("did not finish within {CASE_DEADLINE:?}")
}

/// Overwrites the stored bytes of one version behind the store's back (to prove that reads
/// and chain verification notice).
pub type Tamper =
    Arc<dyn Fn(DocPath, u64, Bytes) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// One fresh world opened for one case.
pub struct FreshWorld {
    pub store: Arc<dyn Store>,
    /// Used by the two tampering cases; `None` reports them as gaps (a backend that keeps
    /// bytes where nothing can reach them, like the reference model).
    pub tamper: Option<Tamper>,
}

impl fmt::Debug for FreshWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreshWorld")
            .field("store", &self.store)
            .field("tamper", &self.tamper.is_some())
            .finish()
    }
}

/// Opens fresh, empty worlds of one backend.
#[async_trait]
pub trait BackendFactory: Send + Sync {
    /// A store over a new empty world whose `modified` times come from `clock`.
    async fn open(&self, clock: Arc<dyn Clock>) -> Result<FreshWorld, String>;
}

/// Opens worlds served by several replicas (stores over one shared world).
#[async_trait]
pub trait ReplicaFactory: Send + Sync {
    /// A new empty world; its `modified` times come from `clock`.
    async fn open_world(&self, clock: Arc<dyn Clock>) -> Result<Box<dyn ReplicaWorld>, String>;
}

/// One world that replicas join.
#[async_trait]
pub trait ReplicaWorld: Send + Sync {
    /// One more replica serving the world. A single-writer backend (the file store) returns
    /// the same store every time: it is one replica shared by every caller.
    async fn replica(&self) -> Result<Arc<dyn Store>, String>;

    /// Lets `by` pass on the clock every replica measures its catalog freshness window
    /// with, so a case can pass the window without waiting for it. A world whose replicas
    /// read the current state on every call has no window and ignores this.
    fn lapse(&self, by: Duration);
}

/// Opens a view, runs one read on it, closes it.
macro_rules! via_view {
    ($direct:expr, |$view:ident, $ctx:ident| $read:expr) => {{
        let owned = Ctx::new();
        let $ctx = &owned;
        let $view = $direct.store.open_view($ctx).await?;
        let result = $read.await;
        $view.close();
        result
    }};
}

/// A store read one view per call, written one request per call.
#[derive(Clone, Debug)]
pub struct ViewPerCall {
    pub store: Arc<dyn Store>,
}

impl ViewPerCall {
    pub fn new(store: Arc<dyn Store>) -> ViewPerCall {
        ViewPerCall { store }
    }

    pub async fn get(&self, path: &str, version: u64) -> Result<Document, Error> {
        via_view!(self, |view, ctx| view.get(ctx, path, version))
    }

    pub async fn list(&self, dir: &str, options: ListOptions) -> Result<Vec<DirEntry>, Error> {
        via_view!(self, |view, ctx| view.list_entries(ctx, dir, &options))
    }

    pub async fn is_dir(&self, path: &str) -> Result<bool, Error> {
        via_view!(self, |view, ctx| view.is_dir(ctx, path))
    }

    pub async fn versions(&self, path: &str) -> Result<Vec<VersionInfo>, Error> {
        via_view!(self, |view, ctx| view.versions(ctx, path))
    }

    pub async fn lookup_hash(&self, hash: &Hash) -> Result<DocPath, Error> {
        via_view!(self, |view, ctx| view.lookup_hash(ctx, hash))
    }

    pub async fn verify_chain(&self, path: &str) -> Result<(), Error> {
        via_view!(self, |view, ctx| view.verify_chain(ctx, path))
    }

    pub async fn lookup(&self, query: CatalogQuery) -> Result<Vec<CatalogMatch>, Error> {
        via_view!(self, |view, ctx| view.lookup(ctx, &query))
    }

    /// The current version, 0 when there is no document.
    pub async fn current_version(&self, path: &str) -> Result<u64, Error> {
        match self.versions(path).await {
            Ok(versions) => Ok(versions.first().map_or(0, |v| v.version)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    pub async fn write(
        &self,
        path: &str,
        expected: Option<u64>,
        body: &str,
        meta: &[(&str, &str)],
    ) -> Result<Document, Error> {
        self.store
            .publish(&Ctx::new(), request(path, expected, body.as_bytes(), meta))
            .await
    }

    pub async fn append(
        &self,
        path: &str,
        expected: u64,
        body: &str,
        meta: &[(&str, &str)],
    ) -> Result<Document, Error> {
        self.store
            .append(
                &Ctx::new(),
                request(path, Some(expected), body.as_bytes(), meta),
            )
            .await
    }

    pub async fn archive(&self, path: &str, archived: bool) -> Result<ArchiveResult, Error> {
        self.store
            .set_archived(&Ctx::new(), ArchiveRequest::new(path, archived))
            .await
    }
}

/// Metadata from pairs.
pub(crate) fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A write request.
pub(crate) fn request(
    path: &str,
    expected: Option<u64>,
    body: &[u8],
    pairs: &[(&str, &str)],
) -> WriteRequest {
    let mut request = WriteRequest::new(path, Bytes::copy_from_slice(body)).metadata(meta(pairs));
    request.expected_version = expected;
    request
}

pub(crate) fn ensure(condition: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(why()) }
}

/// The value, or the unexpected error as the case's failure.
pub(crate) fn ok<T>(result: Result<T, Error>, what: &str) -> Result<T, String> {
    result.map_err(|e| format!("{what}: unexpected error: {e}"))
}

/// The error, which must be of `kind`.
pub(crate) fn expect_kind<T: fmt::Debug>(
    result: Result<T, Error>,
    kind: ErrorKind,
    what: &str,
) -> Result<Error, String> {
    match result {
        Ok(value) => Err(format!("{what}: expected {kind}, got {value:?}")),
        Err(e) if e.kind() == kind => Ok(e),
        Err(e) => Err(format!("{what}: expected {kind}, got {:?}: {e}", e.kind())),
    }
}

/// The names of listing entries, directories with a trailing `/`.
pub(crate) fn names(entries: &[DirEntry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            if e.is_dir {
                format!("{}/", e.name)
            } else {
                e.name.clone()
            }
        })
        .collect()
}

/// The paths of lookup results.
pub(crate) fn paths(found: &[CatalogMatch]) -> Vec<String> {
    found.iter().map(|m| m.path.to_string()).collect()
}

/// What every case is handed.
#[derive(Clone)]
pub(crate) struct CaseCtx {
    pub store: Arc<dyn Store>,
    pub direct: ViewPerCall,
    pub tamper: Option<Tamper>,
    pub clock: Arc<ManualClock>,
}

pub(crate) use crate::report::CaseResult;

/// The `Err` a case returns when the target cannot show the behaviour it checks.
pub(crate) fn gap(why: &str) -> CaseError {
    CaseError::Gap(why.to_owned())
}
pub(crate) type CaseFn = fn(CaseCtx) -> Pin<Box<dyn Future<Output = CaseResult> + Send>>;

macro_rules! case {
    ($name:literal, $f:ident) => {
        ($name, (|ctx| Box::pin($f(ctx))) as $crate::harness::CaseFn)
    };
}
pub(crate) use case;

/// Runs `cases`, each on a fresh world from `factory`, closing the store after it.
pub(crate) async fn run_cases(
    factory: &dyn BackendFactory,
    cases: &[(&'static str, CaseFn)],
) -> SuiteReport {
    let mut outcomes = Vec::new();
    for (name, case) in cases {
        let clock = Arc::new(ManualClock::new(SUITE_EPOCH));
        let outcome = match factory.open(clock.clone()).await {
            Err(why) => Outcome::Failed(format!("opening a world: {why}")),
            Ok(site) => {
                let store = site.store.clone();
                let ctx = CaseCtx {
                    direct: ViewPerCall::new(site.store.clone()),
                    store: site.store,
                    tamper: site.tamper,
                    clock,
                };
                let result = within_deadline(case(ctx), || Err(CaseError::Failed(overran()))).await;
                store.close().await;
                Outcome::from(result)
            }
        };
        outcomes.push((*name, outcome));
    }
    SuiteReport { outcomes }
}
