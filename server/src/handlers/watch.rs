//! WATCH: a world's change feed as a stream of Mark blocks, for any transport.
//!
//! [`open_watch`] runs the checks a WATCH answers with an ordinary response (`..` segment,
//! admission, no change feed, content-addressed path, `coalesce`, `since`, read auth on the
//! scope); past them it returns a [`Watch`] whose blocks are already encoded. The first block
//! is the acknowledgement (`status: ok` with the newest change the caller may read, or the
//! client's `since` on a resume)
//! or a lone `resync` when the feed cannot resume there. Then come event blocks in commit
//! order, a heartbeat (`status: ok` with the cursor) after [`HEARTBEAT`] without a block,
//! and at most one terminal: `resync` (the ring was lapped), `closing` (the store closed or
//! the server drains), or `unauthorized` / `not-permitted` (a heartbeat found the token no
//! longer reads the scope). A transport forwards the blocks as they come
//! ([`Watch::next_block`], [`Watch::into_stream`], [`Watch::write_to`]) and ends the stream
//! after the last; dropping the [`Watch`] releases its slots.
//!
//! The scope is the raw request path: `/` is the whole world, a path ending in `/` every
//! document below it at any depth, anything else one document (it need not exist). Each
//! event is shown only if the caller may read its path; others are skipped silently.
//! `coalesce: path` collapses consecutive changes of one path to the newest.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use quire_backend::{ChangeEvent, ChangeHub, Resync};
use quire_log::EntryOp;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    RETRY_AFTER_KEY, World, bad_request, canonical, denied, has_dot_dot, is_hash_shaped, not_found,
};
use crate::limits::{ConnectionWatchAdmission, ConnectionWatches, WatchAdmission};
use crate::mark::{Request, Response, Status, WatchBlock, WatchCursor, WatchEvent};

/// How long a watch stays silent before it sends a heartbeat (and re-checks the token).
pub const HEARTBEAT: Duration = Duration::from_secs(20);
/// How long a resume from a cursor this replica has not reached yet waits for it to catch
/// up (the client last watched a replica that was ahead) before answering `resync`.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(2);

/// Where a watch runs: its connection's WATCH slots, its peer and the server's drain
/// signal.
#[derive(Clone, Debug, Default)]
pub struct WatchContext {
    /// The connection's slots; `None` when the transport bounds connections itself.
    pub connection: Option<ConnectionWatches>,
    /// The peer's address (the client a watch without a valid token counts against).
    pub peer: Option<std::net::IpAddr>,
    /// Cancelled when the server drains: open watches end with `closing`.
    pub draining: CancellationToken,
}

/// What a watch follows.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Scope {
    World,
    Prefix(String),
    Document(String),
}

impl Scope {
    /// The scope a raw WATCH path names, in canonical form: `/` (however spelled) the world,
    /// a path ending in `/` every document below it, anything else one document. `None`
    /// when the path cannot name anything.
    fn of(raw: &str) -> Option<Scope> {
        let clean = canonical(raw)?;
        Some(if clean == "/" {
            Scope::World
        } else if raw.ends_with('/') {
            Scope::Prefix(format!("{clean}/"))
        } else {
            Scope::Document(clean)
        })
    }

    /// The path read auth judges: a prefix as a directory, a document as itself.
    fn auth_path(&self) -> &str {
        match self {
            Scope::World => "/",
            Scope::Prefix(prefix) => prefix,
            Scope::Document(document) => document,
        }
    }

    fn covers(&self, path: &str) -> bool {
        match self {
            Scope::World => true,
            Scope::Prefix(prefix) => path.starts_with(prefix.as_str()),
            Scope::Document(document) => path == document,
        }
    }
}

/// Checks a WATCH request and subscribes it; a refusal is the ordinary response to send.
pub async fn open_watch(
    world: Arc<World>,
    request: Request,
    context: &WatchContext,
) -> Result<Watch, Response> {
    let raw = request.path.as_str();
    if has_dot_dot(raw) {
        return Err(not_found(raw));
    }
    let refused = |refusal: crate::limits::Refusal| {
        Response::error(refusal.status(), &refusal.message())
            .with_meta(RETRY_AFTER_KEY, refusal.retry_after_secs().to_string())
    };
    let connection_slot = match &context.connection {
        Some(connection) => Some(connection.try_admit().map_err(refused)?),
        None => None,
    };
    let client = super::client_of(&world, &request, context.peer);
    let world_slot = world.limiter.try_admit_watch(&client).map_err(refused)?;
    let Some(hub) = world.store.changes() else {
        return Err(bad_request("unsupported verb"));
    };
    if canonical(raw).is_some_and(|path| is_hash_shaped(&path)) {
        return Err(bad_request("content-addressed paths cannot be watched"));
    }
    let coalesce = match request.metadata.get("coalesce").map(String::as_str) {
        None => false,
        Some("path") => true,
        Some(other) => {
            return Err(bad_request(&format!(
                "invalid coalesce {other:?} (only \"path\")"
            )));
        }
    };
    let since = match request.metadata.get("since") {
        None => None,
        Some(text) => {
            Some(WatchCursor::parse(text).ok_or_else(|| bad_request("invalid since cursor"))?)
        }
    };
    let Some(scope) = Scope::of(raw) else {
        return Err(bad_request("the path cannot be watched"));
    };
    let secret = request.metadata.get("auth").cloned();
    world
        .auth
        .authorize_read(secret.as_deref(), scope.auth_path(), world.now())
        .map_err(denied)?;

    let heads = hub.watch_head();
    let closed = hub.watch_closed();
    let head = hub.head();
    let mut watch = Watch {
        scope,
        secret,
        coalesce,
        position: head,
        // Set below: the caller may not count changes it cannot read.
        shown_position: head,
        ready: VecDeque::new(),
        heads,
        closed,
        draining: context.draining.clone(),
        heartbeat_at: Instant::now() + HEARTBEAT,
        done: false,
        hub,
        world,
        _slots: (world_slot, connection_slot),
    };
    match since {
        None => {
            watch.shown_position = watch.newest_readable();
            watch.ready.push_back(watch.control(Status::Ok));
        }
        Some(since) => match watch.resume(&since).await {
            Ok(()) => {
                watch.position = since.sequence;
                watch.shown_position = since.sequence;
                watch.ready.push_back(watch.control(Status::Ok));
            }
            Err(Resync { .. }) => watch.resync(),
        },
    }
    Ok(watch)
}

/// Serves one WATCH request on a transport stream: the refusal as an ordinary response, or
/// every block until the watch ends. An error is the writer's (the client went away).
pub async fn serve_watch<W>(
    world: Arc<World>,
    request: Request,
    context: &WatchContext,
    writer: &mut W,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    match open_watch(world, request, context).await {
        Ok(watch) => watch.write_to(writer).await,
        Err(response) => {
            writer.write_all(&response.encode()).await?;
            writer.flush().await
        }
    }
}

/// One open WATCH: the blocks still to send and the subscription behind them.
pub struct Watch {
    world: Arc<World>,
    hub: Arc<ChangeHub>,
    scope: Scope,
    secret: Option<String>,
    coalesce: bool,
    /// Every change through this sequence has been sent or skipped.
    position: u64,
    /// The cursor control blocks carry: the last change the caller may read (in the scope
    /// or not), so heartbeats do not advance on changes hidden from the caller. Resuming
    /// from it replays only changes that are skipped again.
    shown_position: u64,
    ready: VecDeque<Bytes>,
    heads: watch::Receiver<u64>,
    closed: watch::Receiver<bool>,
    draining: CancellationToken,
    heartbeat_at: Instant,
    /// No block follows those in `ready`.
    done: bool,
    _slots: (WatchAdmission, Option<ConnectionWatchAdmission>),
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("world", &self.world.name)
            .field("scope", &self.scope)
            .field("position", &self.position)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// The next block to send, encoded; `None` once the stream is over.
    pub async fn next_block(&mut self) -> Option<Bytes> {
        loop {
            if let Some(block) = self.ready.pop_front() {
                self.heartbeat_at = Instant::now() + HEARTBEAT;
                return Some(block);
            }
            if self.done {
                return None;
            }
            self.pump().await;
        }
    }

    /// The blocks as a stream (an HTTP body, a channel, a test).
    pub fn into_stream(self) -> impl Stream<Item = Bytes> + Send + 'static {
        futures::stream::unfold(self, |mut watch| async move {
            watch.next_block().await.map(|block| (block, watch))
        })
    }

    /// Writes every block to `writer`, flushing each, until the watch ends or a write fails.
    pub async fn write_to<W>(mut self, writer: &mut W) -> io::Result<()>
    where
        W: AsyncWrite + Unpin + ?Sized,
    {
        while let Some(block) = self.next_block().await {
            writer.write_all(&block).await?;
            writer.flush().await?;
        }
        Ok(())
    }

    /// Whether the feed can resume after `since`; a cursor of this epoch a little beyond the
    /// head first gives this replica [`CATCH_UP_WAIT`] to learn of it. A cursor further ahead
    /// than the ring holds could not be resumed even after a catch-up, so it is answered
    /// `resync` at once, without a log read (the epoch is public: anyone can write one).
    async fn resume(&mut self, since: &WatchCursor) -> Result<(), Resync> {
        let head = self.hub.head();
        if since.epoch() != self.hub.epoch()
            || since.sequence - head.min(since.sequence) > self.hub.capacity() as u64
        {
            return Err(Resync { head });
        }
        if since.sequence > head {
            // A client's cursor is not a peer hint (a client could make a lone store act as
            // if it contended): an exact read probes the log instead, and what it installs
            // reaches the hub.
            let ctx = quire_backend::Ctx::with_timeout(CATCH_UP_WAIT);
            if let Ok(view) = self.world.store.open_view(&ctx).await {
                let _ = view.is_dir(&ctx, "/").await;
                view.close();
            }
            let reached = self.heads.wait_for(|head| *head >= since.sequence);
            let _ = tokio::time::timeout(CATCH_UP_WAIT, reached).await;
        }
        self.hub.since(since.sequence).map(drop)
    }

    fn cursor(&self, sequence: u64) -> WatchCursor {
        WatchCursor::new(self.hub.epoch(), sequence).unwrap_or_else(|| {
            // Stores name epochs from the cursor grammar; anything else is a store bug the
            // client can only survive by resyncing.
            WatchCursor::new("invalid-epoch", sequence).expect("a valid epoch")
        })
    }

    fn control(&self, status: Status) -> Bytes {
        self.control_at(status, self.shown_position)
    }

    fn control_at(&self, status: Status, sequence: u64) -> Bytes {
        WatchBlock::control(status, self.cursor(sequence))
            .encode()
            .expect("a control block always fits")
    }

    fn finish_at(&mut self, status: Status, sequence: u64) {
        let block = self.control_at(status, sequence);
        self.ready.push_back(block);
        self.done = true;
    }

    fn finish(&mut self, status: Status) {
        self.finish_at(status, self.shown_position);
    }

    /// Ends the watch with `resync` at the newest change the caller may read (not the
    /// head, which would count hidden changes): the client re-reads and resumes there.
    fn resync(&mut self) {
        let sequence = self.newest_readable();
        self.finish_at(Status::Resync, sequence);
    }

    /// The newest change in the hub's ring the caller may read, else the ring's floor.
    fn newest_readable(&self) -> u64 {
        let now = self.world.now();
        self.hub.newest_shown(|event| {
            self.world
                .auth
                .authorize_read(self.secret.as_deref(), event.path.as_str(), now)
                .is_ok()
        })
    }

    /// Moves the watch on by one step: queues the changes after the position, or a
    /// terminal, or waits for a change, a close, the drain or the heartbeat.
    async fn pump(&mut self) {
        if self.draining.is_cancelled() {
            return self.finish(Status::Closing);
        }
        self.heads.borrow_and_update();
        match self.hub.since(self.position) {
            Err(Resync { .. }) => return self.resync(),
            Ok(events) if !events.is_empty() => return self.queue(events),
            Ok(_) => {}
        }
        if self.hub.is_closed() {
            return self.finish(Status::Closing);
        }
        tokio::select! {
            biased;
            () = self.draining.cancelled() => {}
            changed = self.closed.changed() => if changed.is_err() { self.finish(Status::Closing) },
            changed = self.heads.changed() => if changed.is_err() { self.finish(Status::Closing) },
            () = tokio::time::sleep_until(self.heartbeat_at) => self.heartbeat(),
        }
    }

    /// Re-checks the token on the scope, then says the watch is alive (or ends it).
    fn heartbeat(&mut self) {
        let allowed = self.world.auth.authorize_read(
            self.secret.as_deref(),
            self.scope.auth_path(),
            self.world.now(),
        );
        match allowed {
            Ok(_) => {
                let block = self.control(Status::Ok);
                self.ready.push_back(block);
            }
            Err(denial) => self.finish(denial.status()),
        }
    }

    /// Queues the events the scope covers and the caller may read, in commit order.
    fn queue(&mut self, events: Vec<ChangeEvent>) {
        if let Some(last) = events.last() {
            self.position = last.sequence;
        }
        let now = self.world.now();
        let mut shown: Vec<ChangeEvent> = Vec::with_capacity(events.len());
        for event in events {
            let path = event.path.as_str();
            if self
                .world
                .auth
                .authorize_read(self.secret.as_deref(), path, now)
                .is_err()
            {
                continue;
            }
            self.shown_position = event.sequence;
            if !self.scope.covers(path) {
                continue;
            }
            if self.coalesce
                && let Some(previous) = shown.last_mut()
                && previous.path == event.path
            {
                *previous = event;
                continue;
            }
            shown.push(event);
        }
        for event in shown {
            let block = WatchBlock::Event(WatchEvent {
                cursor: self.cursor(event.sequence),
                path: event.path.as_str().to_owned(),
                version: event.version,
                op: op_name(event.op).to_owned(),
                hash: Some(event.body_hash.content_hash()),
                agent: event.agent.clone(),
            });
            match block.encode() {
                Ok(bytes) => self.ready.push_back(bytes),
                Err(error) => {
                    // Stored before write-time checks refused such values: the event
                    // cannot be sent, and skipping it silently would break "at least
                    // once", so the client is told to resync; it resumes after the event
                    // (its re-read of the world covers it), never meeting it again.
                    tracing::warn!(%error, "watch event cannot be encoded; ending with resync");
                    return self.finish_at(Status::Resync, event.sequence);
                }
            }
        }
    }
}

fn op_name(op: EntryOp) -> &'static str {
    match op {
        EntryOp::Publish => "publish",
        EntryOp::Append => "append",
        EntryOp::Archive => "archive",
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::sync::OnceLock;

    use quire_backend::bucket::{BucketOptions, BucketStore};
    use quire_backend::file::{FileOptions, FileStore};
    use quire_backend::{Follower, Store};
    use quire_blob::BlobStore;
    use quire_blob::memory::MemoryStore;

    use super::*;
    use crate::auth::{
        Authorizer, Operation, PathPattern, Token, TokenHash, TokenRegistry, TokenStore,
    };
    use crate::handlers::handle;
    use crate::limits::LimitSettings;
    use crate::mark::Verb;

    const WRITER: &str = "quire_writer-secret";
    const READER: &str = "quire_reader-secret";
    /// Guards against a hang when an expected block never comes; never reached when green.
    const GUARD: Duration = Duration::from_secs(60);

    fn tokens() -> TokenStore {
        TokenStore::new([
            Token::new(
                "writer",
                TokenHash::of_secret(WRITER),
                [Operation::Publish],
                [PathPattern::parse("/**").unwrap()],
                None,
            ),
            Token::new(
                "reader",
                TokenHash::of_secret(READER),
                [Operation::Read],
                [PathPattern::parse("/private/**").unwrap()],
                None,
            ),
        ])
        .unwrap()
    }

    fn world_over(
        store: Arc<dyn Store>,
        registry: Arc<TokenRegistry>,
        limits: LimitSettings,
    ) -> Arc<World> {
        Arc::new(World::new("test", store, Authorizer::new(Some(registry))).with_limits(limits))
    }

    async fn file_world(dir: &std::path::Path, ring: usize, limits: LimitSettings) -> Arc<World> {
        let options = FileOptions {
            durable: false,
            change_ring: ring,
            ..FileOptions::default()
        };
        let store = FileStore::open(dir, options).await.unwrap();
        world_over(
            Arc::new(store),
            Arc::new(TokenRegistry::fixed(tokens())),
            limits,
        )
    }

    fn bucket_options() -> BucketOptions {
        BucketOptions {
            compaction: None,
            change_ring: 64,
            seed: 3,
            ..BucketOptions::default()
        }
    }

    async fn bucket_world() -> Arc<World> {
        let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
        let store = BucketStore::open(blobs, bucket_options()).await.unwrap();
        world_over(
            Arc::new(store),
            Arc::new(TokenRegistry::fixed(tokens())),
            LimitSettings::default(),
        )
    }

    async fn write(world: &World, verb: Verb, path: &str, body: &str) -> Response {
        let mut request = Request::new(verb, path)
            .with_meta("auth", WRITER)
            .with_body(body.to_owned());
        if verb == Verb::Append {
            let current = handle(world, Request::new(Verb::Fetch, path)).await;
            request = request.with_meta("expected-version", current.metadata["version"].clone());
        }
        let response = handle(world, request).await;
        assert!(
            matches!(response.status, Status::Created | Status::Ok),
            "{verb} {path}: {response:?}"
        );
        response
    }

    async fn open(
        world: &Arc<World>,
        path: &str,
        meta: &[(&str, &str)],
    ) -> Result<Watch, Response> {
        let mut request = Request::new(Verb::Watch, path);
        for (key, value) in meta {
            request = request.with_meta(*key, *value);
        }
        open_watch(world.clone(), request, &WatchContext::default()).await
    }

    async fn next(watch: &mut Watch) -> Option<WatchBlock> {
        let bytes = tokio::time::timeout(GUARD, watch.next_block())
            .await
            .expect("a block within the guard")?;
        Some(WatchBlock::parse(&bytes).unwrap())
    }

    /// The next block, described relative to sequence `base`.
    async fn next_described(watch: &mut Watch, base: u64) -> Option<String> {
        next(watch).await.map(|b| describe(&b, base))
    }

    /// Every block to the end of the stream, described relative to sequence `base`.
    async fn rest(watch: &mut Watch, base: u64) -> Vec<String> {
        let mut seen = Vec::new();
        while let Some(block) = next(watch).await {
            seen.push(describe(&block, base));
        }
        seen
    }

    fn describe(block: &WatchBlock, base: u64) -> String {
        match block {
            WatchBlock::Control { status, cursor } => {
                format!("{status} @{}", cursor.as_ref().unwrap().sequence - base)
            }
            WatchBlock::Event(event) => format!(
                "{} {} v{} @{}",
                event.op,
                event.path,
                event.version,
                event.cursor.sequence - base
            ),
        }
    }

    fn hub(world: &World) -> Arc<ChangeHub> {
        world.store.changes().expect("a change hub")
    }

    /// Waits until the hub holds `sequence` (the bucket store publishes after the answer).
    async fn published(world: &World, sequence: u64) {
        let mut head = hub(world).watch_head();
        tokio::time::timeout(GUARD, head.wait_for(|h| *h >= sequence))
            .await
            .expect("published within the guard")
            .unwrap();
    }

    async fn scenario(world: &Arc<World>) {
        let base = hub(world).head();
        let mut document = open(world, "/docs/a.md", &[]).await.unwrap();
        let mut prefix = open(world, "/docs/", &[]).await.unwrap();
        let mut everything = open(world, "/", &[]).await.unwrap();
        write(world, Verb::Publish, "/docs/a.md", "# A\n").await;
        write(world, Verb::Publish, "/docs/sub/b.md", "# B\n").await;
        write(world, Verb::Publish, "/other.md", "# O\n").await;
        write(world, Verb::Append, "/docs/a.md", "more").await;
        let archived = handle(
            world,
            Request::new(Verb::Archive, "/docs/sub/b.md").with_meta("auth", WRITER),
        )
        .await;
        assert_eq!(archived.status, Status::Ok);
        write(world, Verb::Publish, "/docs/sub/b.md", "").await;
        published(world, base + 6).await;
        world.store.close().await;

        assert_eq!(
            rest(&mut document, base).await,
            [
                "ok @0",
                "publish /docs/a.md v1 @1",
                "append /docs/a.md v2 @4",
                "closing @6"
            ]
        );
        assert_eq!(
            rest(&mut prefix, base).await,
            [
                "ok @0",
                "publish /docs/a.md v1 @1",
                "publish /docs/sub/b.md v1 @2",
                "append /docs/a.md v2 @4",
                "archive /docs/sub/b.md v1 @5",
                "publish /docs/sub/b.md v1 @6",
                "closing @6"
            ]
        );
        let all = rest(&mut everything, base).await;
        assert_eq!(all.len(), 8, "{all:?}");
        assert_eq!(all[3], "publish /other.md v1 @3");
    }

    #[tokio::test]
    async fn a_file_store_feeds_documents_and_prefixes_in_commit_order() {
        let dir = tempfile::tempdir().unwrap();
        scenario(&file_world(dir.path(), 64, LimitSettings::default()).await).await;
    }

    #[tokio::test]
    async fn a_bucket_store_feeds_documents_and_prefixes_in_commit_order() {
        scenario(&bucket_world().await).await;
    }

    #[tokio::test]
    async fn events_carry_the_content_hash_and_the_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let world = file_world(dir.path(), 64, LimitSettings::default()).await;
        let mut watch = open(&world, "/docs/a.md", &[]).await.unwrap();
        let Some(WatchBlock::Control {
            status: Status::Ok,
            cursor: Some(ack),
        }) = next(&mut watch).await
        else {
            panic!("an acknowledgement first")
        };
        assert_eq!(ack.epoch(), hub(&world).epoch());
        write(&world, Verb::Publish, "/docs/a.md", "# A\n").await;
        let Some(WatchBlock::Event(event)) = next(&mut watch).await else {
            panic!("an event")
        };
        let fetched = handle(&world, Request::new(Verb::Fetch, "/docs/a.md")).await;
        assert_eq!(
            event.hash.as_deref(),
            Some(fetched.metadata["content-hash"].as_str())
        );
        assert_eq!(
            (event.cursor.epoch(), event.cursor.sequence),
            (ack.epoch(), ack.sequence + 1)
        );
    }

    #[tokio::test]
    async fn since_resumes_after_the_cursor_and_coalesce_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let world = file_world(dir.path(), 64, LimitSettings::default()).await;
        let hub = hub(&world);
        let base = hub.head();
        for body in ["1", "2", "3"] {
            write(&world, Verb::Publish, "/docs/a.md", body).await;
        }
        write(&world, Verb::Publish, "/docs/b.md", "b").await;
        let since = format!("{}:{}", hub.epoch(), base + 1);
        let mut resumed = open(&world, "/docs/", &[("since", &since)]).await.unwrap();
        let mut coalesced = open(&world, "/docs/", &[("since", &since), ("coalesce", "path")])
            .await
            .unwrap();
        world.store.close().await;
        assert_eq!(
            rest(&mut resumed, base).await,
            [
                "ok @1",
                "publish /docs/a.md v2 @2",
                "publish /docs/a.md v3 @3",
                "publish /docs/b.md v1 @4",
                "closing @4"
            ]
        );
        assert_eq!(
            rest(&mut coalesced, base).await,
            [
                "ok @1",
                "publish /docs/a.md v3 @3",
                "publish /docs/b.md v1 @4",
                "closing @4"
            ]
        );
    }

    #[tokio::test]
    async fn a_lapped_or_foreign_cursor_answers_resync_with_the_head() {
        let dir = tempfile::tempdir().unwrap();
        let world = file_world(dir.path(), 2, LimitSettings::default()).await;
        let hub = hub(&world);
        let base = hub.head();
        for n in 0..4 {
            write(&world, Verb::Publish, &format!("/docs/{n}.md"), "x").await;
        }
        let lapped = format!("{}:{}", hub.epoch(), base + 1);
        let mut watch = open(&world, "/", &[("since", &lapped)]).await.unwrap();
        assert_eq!(rest(&mut watch, base).await, ["resync @4"]);
        let inside = format!("{}:{}", hub.epoch(), base + 2);
        let mut watch = open(&world, "/", &[("since", &inside)]).await.unwrap();
        assert_eq!(
            next_described(&mut watch, base).await.as_deref(),
            Some("ok @2")
        );
        let mut watch = open(&world, "/", &[("since", "another-epoch:3")])
            .await
            .unwrap();
        assert_eq!(rest(&mut watch, base).await, ["resync @4"]);

        // A cursor this replica never reached: it waits for a catch-up that never comes.
        tokio::time::pause();
        let ahead = format!("{}:{}", hub.epoch(), base + 5);
        let started = Instant::now();
        let mut watch = open(&world, "/", &[("since", &ahead)]).await.unwrap();
        assert!(
            started.elapsed() >= CATCH_UP_WAIT,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(rest(&mut watch, base).await, ["resync @4"]);

        // A cursor further ahead than the ring holds (anyone can write one: the epoch is
        // public) costs no wait and no log read: resync at once.
        for far in [base + 4 + hub.capacity() as u64 + 1, u64::MAX] {
            let started = Instant::now();
            let far = format!("{}:{far}", hub.epoch());
            let mut watch = open(&world, "/", &[("since", &far)]).await.unwrap();
            assert_eq!(started.elapsed(), Duration::ZERO);
            assert_eq!(rest(&mut watch, base).await, ["resync @4"]);
        }

        // The ring laps a watch that is open but not read.
        tokio::time::resume();
        let mut slow = open(&world, "/", &[]).await.unwrap();
        assert_eq!(
            next_described(&mut slow, base).await.as_deref(),
            Some("ok @4")
        );
        for n in 4..7 {
            write(&world, Verb::Publish, &format!("/docs/{n}.md"), "x").await;
        }
        assert_eq!(rest(&mut slow, base).await, ["resync @7"]);
    }

    #[tokio::test]
    async fn requests_a_watch_refuses_before_subscribing() {
        let dir = tempfile::tempdir().unwrap();
        let world = file_world(dir.path(), 8, LimitSettings::default()).await;
        let refused = |result: Result<Watch, Response>| {
            let response = result.expect_err("refused");
            (
                response.status,
                String::from_utf8(response.body.to_vec()).unwrap(),
            )
        };
        let (status, body) = refused(open(&world, "/docs/../x.md", &[]).await);
        assert_eq!(status, Status::NotFound, "{body}");
        let (status, body) = refused(open(&world, "/docs/", &[("since", "nope")]).await);
        assert_eq!(
            (status, body.contains("invalid since cursor")),
            (Status::BadRequest, true)
        );
        let (status, _) = refused(open(&world, "/docs/", &[("since", "e:01")]).await);
        assert_eq!(status, Status::BadRequest);
        let (status, _) = refused(open(&world, "/docs/", &[("coalesce", "all")]).await);
        assert_eq!(status, Status::BadRequest);
        let hash_path = format!("/blake3-{}", "0".repeat(64));
        let (status, _) = refused(open(&world, &hash_path, &[]).await);
        assert_eq!(status, Status::BadRequest);

        let untracked_dir = tempfile::tempdir().unwrap();
        let untracked = file_world(untracked_dir.path(), 0, LimitSettings::default()).await;
        let (status, body) = refused(open(&untracked, "/", &[]).await);
        assert_eq!(
            (status, body.contains("unsupported verb")),
            (Status::BadRequest, true)
        );
    }

    #[tokio::test]
    async fn read_auth_guards_the_scope_and_filters_every_event() {
        let dir = tempfile::tempdir().unwrap();
        let world = file_world(dir.path(), 64, LimitSettings::default()).await;
        let base = hub(&world).head();
        assert_eq!(
            open(&world, "/private/", &[]).await.unwrap_err().status,
            Status::Unauthorized
        );
        assert_eq!(
            open(&world, "/private/", &[("auth", WRITER)])
                .await
                .unwrap_err()
                .status,
            Status::NotPermitted
        );
        assert_eq!(
            open(&world, "/private/a.md", &[("auth", "quire_unknown")])
                .await
                .unwrap_err()
                .status,
            Status::Unauthorized
        );
        let mut anonymous = open(&world, "/", &[]).await.unwrap();
        let mut reader = open(&world, "/", &[("auth", READER)]).await.unwrap();
        let mut private = open(&world, "/private/", &[("auth", READER)])
            .await
            .unwrap();
        write(&world, Verb::Publish, "/private/secret.md", "s").await;
        write(&world, Verb::Publish, "/public.md", "p").await;
        world.store.close().await;
        assert_eq!(
            rest(&mut anonymous, base).await,
            ["ok @0", "publish /public.md v1 @2", "closing @2"]
        );
        assert_eq!(
            rest(&mut reader, base).await,
            [
                "ok @0",
                "publish /private/secret.md v1 @1",
                "publish /public.md v1 @2",
                "closing @2"
            ]
        );
        assert_eq!(
            rest(&mut private, base).await,
            ["ok @0", "publish /private/secret.md v1 @1", "closing @2"]
        );
    }

    #[tokio::test]
    async fn an_event_that_cannot_be_encoded_ends_the_watch_with_resync_not_silence() {
        let dir = tempfile::tempdir().unwrap();
        let world = file_world(dir.path(), 64, LimitSettings::default()).await;
        let base = hub(&world).head();
        let mut watch = open(&world, "/", &[]).await.unwrap();
        write(&world, Verb::Publish, "/first.md", "1").await;
        // Stored straight through the store, as before paths were checked at write time.
        world
            .store
            .publish(
                &quire_backend::Ctx::new(),
                quire_backend::WriteRequest::new("/a\u{2028}b.md", "x"),
            )
            .await
            .unwrap();
        published(&world, base + 2).await;
        assert_eq!(
            rest(&mut watch, base).await,
            ["ok @0", "publish /first.md v1 @1", "resync @2"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_do_not_advance_past_changes_hidden_from_the_caller() {
        let world = bucket_world().await;
        let base = hub(&world).head();
        let mut anonymous = open(&world, "/", &[]).await.unwrap();
        let mut reader = open(&world, "/", &[("auth", READER)]).await.unwrap();
        assert_eq!(
            next_described(&mut anonymous, base).await.as_deref(),
            Some("ok @0")
        );
        assert_eq!(
            next_described(&mut reader, base).await.as_deref(),
            Some("ok @0")
        );
        write(&world, Verb::Publish, "/private/secret.md", "s").await;
        published(&world, base + 1).await;
        assert_eq!(
            next_described(&mut reader, base).await.as_deref(),
            Some("publish /private/secret.md v1 @1")
        );
        // The anonymous watcher cannot tell from its heartbeat that anything was written.
        assert_eq!(
            next_described(&mut anonymous, base).await.as_deref(),
            Some("ok @0")
        );
        assert_eq!(
            next_described(&mut reader, base).await.as_deref(),
            Some("ok @1")
        );
        // A readable change moves it on.
        write(&world, Verb::Publish, "/public.md", "p").await;
        published(&world, base + 2).await;
        assert_eq!(
            next_described(&mut anonymous, base).await.as_deref(),
            Some("publish /public.md v1 @2")
        );
        assert_eq!(
            next_described(&mut anonymous, base).await.as_deref(),
            Some("ok @2")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn opening_or_resyncing_a_watch_does_not_count_changes_hidden_from_the_caller() {
        let world = bucket_world().await;
        let base = hub(&world).head();
        write(&world, Verb::Publish, "/public.md", "p").await;
        write(&world, Verb::Publish, "/private/secret.md", "s").await;
        write(&world, Verb::Publish, "/private/secret.md", "t").await;
        published(&world, base + 3).await;
        let first = |watch: Watch| async move {
            let mut watch = watch;
            next_described(&mut watch, base).await
        };
        // A protected write and no write at all look the same to an anonymous watcher.
        let anonymous = open(&world, "/", &[]).await.unwrap();
        assert_eq!(first(anonymous).await.as_deref(), Some("ok @1"));
        let reader = open(&world, "/", &[("auth", READER)]).await.unwrap();
        assert_eq!(first(reader).await.as_deref(), Some("ok @3"));
        // A cursor from elsewhere is answered resync at the same place.
        let foreign = [("since", "other-epoch:2")];
        let anonymous = open(&world, "/", &foreign).await.unwrap();
        assert_eq!(first(anonymous).await.as_deref(), Some("resync @1"));
        let with_reader = [("since", "other-epoch:2"), ("auth", READER)];
        let reader = open(&world, "/", &with_reader).await.unwrap();
        assert_eq!(first(reader).await.as_deref(), Some("resync @3"));
        // Resuming from the anonymous cursor replays only the hidden changes, skipped again.
        let since = format!("{}:{}", hub(&world).epoch(), base + 1);
        let mut resumed = open(&world, "/", &[("since", &since)]).await.unwrap();
        write(&world, Verb::Publish, "/public.md", "q").await;
        published(&world, base + 4).await;
        assert_eq!(
            next_described(&mut resumed, base).await.as_deref(),
            Some("ok @1")
        );
        assert_eq!(
            next_described(&mut resumed, base).await.as_deref(),
            Some("publish /public.md v2 @4")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_recheck_the_token_and_end_a_revoked_watch() {
        let dir = tempfile::tempdir().unwrap();
        let tokens_file = dir.path().join("tokens.toml");
        let entry = |label: &str, secret: &str, paths: &str| {
            format!(
                "[tokens.{label}]\nhash = \"{}\"\npaths = [{paths}]\noperations = [\"read\"]\n",
                TokenHash::of_secret(secret)
            )
        };
        let both = entry("reader", READER, "\"/private/**\"")
            + &entry("other", "quire_other-secret", "\"/private/**\"");
        std::fs::write(&tokens_file, &both).unwrap();
        let registry = Arc::new(TokenRegistry::load(&tokens_file).unwrap());
        let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
        let store = BucketStore::open(blobs, bucket_options()).await.unwrap();
        let world = world_over(Arc::new(store), registry.clone(), LimitSettings::default());
        let base = hub(&world).head();
        let mut watch = open(&world, "/private/", &[("auth", READER)])
            .await
            .unwrap();
        let started = Instant::now();
        assert_eq!(
            next_described(&mut watch, base).await.as_deref(),
            Some("ok @0")
        );
        assert_eq!(
            next_described(&mut watch, base).await.as_deref(),
            Some("ok @0")
        );
        assert_eq!(
            started.elapsed(),
            HEARTBEAT,
            "a heartbeat after a silent interval"
        );

        std::fs::write(
            &tokens_file,
            entry("other", "quire_other-secret", "\"/private/**\""),
        )
        .unwrap();
        registry.reload().unwrap();
        assert_eq!(rest(&mut watch, base).await, ["unauthorized @0"]);
        assert_eq!(started.elapsed(), HEARTBEAT * 2);
    }

    #[tokio::test]
    async fn watches_are_capped_per_world_and_per_connection() {
        let dir = tempfile::tempdir().unwrap();
        let limits = LimitSettings {
            max_watches: NonZeroU32::new(2).unwrap(),
            ..LimitSettings::default()
        };
        let world = file_world(dir.path(), 8, limits).await;
        let connection = WatchContext {
            connection: Some(ConnectionWatches::for_stream_limit(2)),
            ..WatchContext::default()
        };
        let request = || Request::new(Verb::Watch, "/");
        let first = open_watch(world.clone(), request(), &connection)
            .await
            .unwrap();
        let refused = open_watch(world.clone(), request(), &connection)
            .await
            .unwrap_err();
        assert_eq!(refused.status, Status::RateLimited);
        assert!(String::from_utf8_lossy(&refused.body).contains("on this connection"));
        assert_eq!(refused.metadata[RETRY_AFTER_KEY], "1");

        let second = open(&world, "/", &[]).await.unwrap();
        let refused = open(&world, "/", &[]).await.unwrap_err();
        assert_eq!(refused.status, Status::RateLimited);
        assert!(String::from_utf8_lossy(&refused.body).contains("too many open watches"));
        drop(second);
        let third = open(&world, "/", &[]).await.unwrap();
        drop((first, third));
        assert!(
            open_watch(world.clone(), request(), &connection)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn draining_ends_open_watches_with_closing() {
        let dir = tempfile::tempdir().unwrap();
        let world = file_world(dir.path(), 8, LimitSettings::default()).await;
        let base = hub(&world).head();
        let context = WatchContext::default();
        let mut watch = open_watch(world.clone(), Request::new(Verb::Watch, "/"), &context)
            .await
            .unwrap();
        write(&world, Verb::Publish, "/a.md", "x").await;
        assert_eq!(
            next_described(&mut watch, base).await.as_deref(),
            Some("ok @0")
        );
        context.draining.cancel();
        assert_eq!(rest(&mut watch, base).await, ["closing @0"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_on_one_replica_reaches_a_watch_on_the_other() {
        let blobs: Arc<dyn BlobStore> = Arc::new(MemoryStore::new());
        let follower_cell: Arc<OnceLock<BucketStore>> = Arc::new(OnceLock::new());
        let hint = {
            let cell = follower_cell.clone();
            Arc::new(move |sequence: u64| {
                if let Some(follower) = cell.get() {
                    follower.follow(sequence);
                }
            })
        };
        let leader = BucketStore::open(
            blobs.clone(),
            BucketOptions {
                on_committed: Some(hint),
                ..bucket_options()
            },
        )
        .await
        .unwrap();
        let follower = BucketStore::open(blobs, bucket_options()).await.unwrap();
        follower_cell.set(follower.clone()).unwrap();
        let registry = Arc::new(TokenRegistry::fixed(tokens()));
        let leader = world_over(Arc::new(leader), registry.clone(), LimitSettings::default());
        let follower = world_over(Arc::new(follower), registry, LimitSettings::default());
        assert_eq!(
            hub(&leader).epoch(),
            hub(&follower).epoch(),
            "one world, one epoch"
        );
        let base = hub(&follower).head();

        let mut watch = open(&follower, "/docs/", &[]).await.unwrap();
        assert_eq!(
            next_described(&mut watch, base).await.as_deref(),
            Some("ok @0")
        );
        write(&leader, Verb::Publish, "/docs/a.md", "from the leader").await;
        write(&leader, Verb::Append, "/docs/a.md", "more").await;
        assert_eq!(
            next_described(&mut watch, base).await.as_deref(),
            Some("publish /docs/a.md v1 @1")
        );
        assert_eq!(
            next_described(&mut watch, base).await.as_deref(),
            Some("append /docs/a.md v2 @2")
        );

        // A cursor from the leader resumes on the follower.
        let since = format!("{}:{}", hub(&leader).epoch(), base + 1);
        let mut resumed = open(&follower, "/docs/a.md", &[("since", &since)])
            .await
            .unwrap();
        assert_eq!(
            next_described(&mut resumed, base).await.as_deref(),
            Some("ok @1")
        );
        assert_eq!(
            next_described(&mut resumed, base).await.as_deref(),
            Some("append /docs/a.md v2 @2")
        );
        leader.store.close().await;
        follower.store.close().await;
    }

    #[test]
    fn scopes_are_the_world_a_prefix_or_one_document() {
        assert!(Scope::of("/").unwrap().covers("/a/b.md"));
        let prefix = Scope::of("/docs/").unwrap();
        assert!(prefix.covers("/docs/a.md") && prefix.covers("/docs/x/y.md"));
        assert!(!prefix.covers("/docs.md") && !prefix.covers("/docsx/a.md"));
        let document = Scope::of("/docs/a.md").unwrap();
        assert!(document.covers("/docs/a.md") && !document.covers("/docs/a.md/v2"));
        // Every spelling of one scope is the same canonical scope.
        assert_eq!(Scope::of("//docs/./"), Some(prefix.clone()));
        assert_eq!(Scope::of("/docs//a.md"), Some(document.clone()));
        assert_eq!(Scope::of("//"), Some(Scope::World));
        assert_eq!(prefix.auth_path(), "/docs/");
        assert_eq!(Scope::World.auth_path(), "/");
        assert_eq!(document.auth_path(), "/docs/a.md");
    }
}
