//! Transport-neutral handlers: one Mark [`Request`] in, one [`Response`] out, for every verb
//! but WATCH, whose handler ([`watch`]) answers a stream of encoded blocks instead. A handler
//! sees its world only through the backend contract ([`quire_backend::Store`]) plus the
//! world's authorizer and limiter, so the QUIC listener, the HTTP gateway and tests share
//! every status and metadata rule.
//!
//! Order of checks (the reference's): a `..` segment answers `not-found` before anything
//! else; `FETCH /health` answers at once; then admission (limits), then the verb. Each read
//! verb opens one read view for the whole request and closes it after.
//!
//! Paths: every verb works on the request path's one canonical form
//! ([`quire_log::path::clean`]): what read auth judges is what is served. A document is
//! judged by its canonical path, a directory (a listing, a LOOKUP or WATCH scope) by its
//! canonical path with a trailing `/` ([`directory_form`]). Read auth is decided before the
//! store is asked whether anything exists there, and a content-addressed path whose
//! document the caller may not read answers `not-found`, so a caller who may not read a
//! path cannot tell a protected document from an absent one.
//!
//! Documents never become protocol: a response's own keys ([`PROTOCOL_KEYS`]) are refused
//! as publisher metadata and never copied from a document into a response.

mod fetch;
mod list;
mod lookup;
pub mod watch;
mod write;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use quire_backend::{Ctx, ErrorKind, ReadView, Store};
use quire_log::Hash;

use crate::auth::{Access, Authorizer, Denial};
use crate::limits::{Admission, ClientKey, LimitSettings, Limiter};
use crate::mark::{Request, Response, Status, Verb};

pub use list::MAX_EXAMINED;
pub use watch::{Watch, WatchContext, open_watch, serve_watch};

/// The body `FETCH /health` answers with.
pub const HEALTH_BODY: &str = "# Health Check\n\nServer is healthy.\n";
/// The prefix of a content-addressed path (`/blake3-<64 hex>`).
pub const HASH_PATH_PREFIX: &str = "/blake3-";
/// The response key carrying a rate-limited answer's retry hint, in whole seconds.
pub const RETRY_AFTER_KEY: &str = "retry-after";
/// Response keys the protocol sets itself. A publisher may not store them as metadata, and
/// a document's metadata never fills them in a response (on HTTP each becomes a
/// `Mark-<key>` header, `retry-after` a `Retry-After`).
pub const PROTOCOL_KEYS: [&str; 21] = [
    "status",
    RETRY_AFTER_KEY,
    "modified",
    "etag",
    "version",
    "content-hash",
    "current-version",
    "entries",
    "complete",
    "next-cursor",
    "total",
    "current",
    "chain-valid",
    "chain-error",
    "matches",
    "match",
    "your-version",
    "server-version",
    "archived",
    "cursor",
    "previous-hash",
];

/// One world as the handlers see it: the store behind the contract, its tokens, its limits.
pub struct World {
    pub name: String,
    pub store: Arc<dyn Store>,
    pub auth: Authorizer,
    pub limiter: Limiter,
    pub read_only: bool,
    /// The wall clock tokens expire by (the system clock in a server; tests set their own).
    pub clock: Arc<dyn quire_log::Clock>,
}

impl World {
    /// A world named `name` over `store` admitting callers through `auth`, with the default
    /// limits, writable, its tokens expiring by the system clock.
    pub fn new(name: impl Into<String>, store: Arc<dyn Store>, auth: Authorizer) -> World {
        World {
            name: name.into(),
            store,
            auth,
            limiter: Limiter::new(LimitSettings::default()),
            read_only: false,
            clock: Arc::new(quire_log::SystemClock),
        }
    }

    /// The same world under `limits`.
    pub fn with_limits(mut self, limits: LimitSettings) -> World {
        self.limiter = Limiter::new(limits);
        self
    }

    /// The same world, refusing writes when `read_only`.
    pub fn with_read_only(mut self, read_only: bool) -> World {
        self.read_only = read_only;
        self
    }

    /// The same world with tokens expiring by `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn quire_log::Clock>) -> World {
        self.clock = clock;
        self
    }

    /// Now, by the world's clock, as token expiry compares it.
    pub fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(self.clock.now().seconds())
    }
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World")
            .field("name", &self.name)
            .field("store", &self.store)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// Answers one request against `world` from a caller in this process (no peer address):
/// [`handle_from`] without one.
pub async fn handle(world: &World, request: Request) -> Response {
    handle_from(world, request, None).await
}

/// Answers one request against `world` from `peer`: admission ([`admit`]), then the verb.
pub async fn handle_from(world: &World, request: Request, peer: Option<IpAddr>) -> Response {
    match admit(world, &request, peer).await {
        Ok(admission) => handle_admitted(world, request, admission).await,
        Err(response) => response,
    }
}

/// Who `request` counts against in the limits: the label of the valid token it presents,
/// else its peer address, else [`ClientKey::Local`].
pub fn client_of(world: &World, request: &Request, peer: Option<IpAddr>) -> ClientKey {
    let secret = request.metadata.get("auth").map(String::as_str);
    match world.auth.label_of(secret, world.now()) {
        Some(label) => ClientKey::Token(label),
        None => peer.map_or(ClientKey::Local, ClientKey::Peer),
    }
}

/// The checks before the verb: a `..` segment answers `not-found`, `FETCH /health` at once,
/// a write its token does not allow is refused, then the world's limits admit the request (it may wait in their short queue) or refuse
/// it. Needs only the request line and metadata, so a transport may call it before it
/// reads the body; `Err` is the answer to send.
pub async fn admit(
    world: &World,
    request: &Request,
    peer: Option<IpAddr>,
) -> Result<Admission, Response> {
    if has_dot_dot(&request.path) {
        return Err(not_found(&request.path));
    }
    if request.verb == Verb::Fetch && request.path == "/health" {
        return Err(Response::new(Status::Ok).with_body(HEALTH_BODY));
    }
    if request.verb.is_write() {
        // A write its token does not allow is refused before it takes a slot or has its
        // body read: without a write token, a slow body holds nothing.
        write::authorize_head(world, request)?;
    }
    let client = client_of(world, request, peer);
    world.limiter.admit(&client).await.map_err(|refusal| {
        Response::error(refusal.status(), &refusal.message())
            .with_meta(RETRY_AFTER_KEY, refusal.retry_after_secs().to_string())
    })
}

/// Answers an admitted request (the admission is held until the answer is ready).
pub async fn handle_admitted(world: &World, request: Request, admission: Admission) -> Response {
    let _admission = admission;
    let ctx = Ctx::with_timeout(world.limiter.request_timeout());
    let call = Call {
        world,
        ctx,
        secret: request.metadata.get("auth").cloned(),
        request,
    };
    match call.request.verb {
        Verb::Fetch => fetch::fetch(&call).await,
        Verb::List => list::list(&call).await,
        Verb::Versions => fetch::versions(&call).await,
        Verb::Lookup => lookup::lookup(&call).await,
        Verb::Publish => write::publish(&call).await,
        Verb::Append => write::append(&call).await,
        Verb::Archive => write::archive(&call).await,
        other => Response::error(
            Status::BadRequest,
            &format!("{} is not served here", other.as_str()),
        ),
    }
}

/// One request in progress.
struct Call<'a> {
    world: &'a World,
    ctx: Ctx,
    secret: Option<String>,
    request: Request,
}

impl Call<'_> {
    fn meta(&self, key: &str) -> Option<&str> {
        self.request.metadata.get(key).map(String::as_str)
    }

    /// Read authorisation of `path` exactly as given (an auth form: see [`directory_form`]).
    fn may_read(&self, path: &str) -> Result<Access, Denial> {
        self.world
            .auth
            .authorize_read(self.secret.as_deref(), path, self.world.now())
    }

    /// Read authorisation of the canonical `dir` as a directory.
    fn may_read_directory(&self, dir: &str) -> Result<Access, Denial> {
        self.may_read(&directory_form(dir))
    }

    async fn open_view(&self) -> Result<ViewGuard, Response> {
        match self.world.store.open_view(&self.ctx).await {
            Ok(view) => Ok(ViewGuard(view)),
            Err(error) => Err(backend_error(&error, &self.request.path)),
        }
    }
}

/// Closes the view when the request is done, however it ends.
struct ViewGuard(Box<dyn ReadView>);

impl std::ops::Deref for ViewGuard {
    type Target = dyn ReadView;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl Drop for ViewGuard {
    fn drop(&mut self) {
        self.0.close();
    }
}

fn has_dot_dot(path: &str) -> bool {
    path.split('/').any(|segment| segment == "..")
}

/// The canonical form of a request path (`/` for the root); `None` when it cannot name
/// anything.
fn canonical(path: &str) -> Option<String> {
    quire_log::path::clean(path).ok()
}

/// The form read auth judges a canonical path in when it names a directory: a trailing `/`
/// (the root stays `/`), so directory patterns (`/team/`, `/team/**`) cover the bare name.
pub fn directory_form(canonical: &str) -> String {
    if canonical == "/" {
        "/".to_owned()
    } else {
        format!("{canonical}/")
    }
}

/// The hash a content-addressed path names, when the path has that shape.
fn hash_path(path: &str) -> Option<Hash> {
    path.strip_prefix(HASH_PATH_PREFIX).and_then(Hash::from_hex)
}

/// Whether a path has the reserved content-address shape (even with bad hex).
fn is_hash_shaped(path: &str) -> bool {
    path.starts_with(HASH_PATH_PREFIX) && !path[HASH_PATH_PREFIX.len()..].contains('/')
}

fn not_found(path: &str) -> Response {
    Response::error(Status::NotFound, &format!("{path} not found"))
}

fn bad_request(message: &str) -> Response {
    Response::error(Status::BadRequest, message)
}

fn denied(denial: Denial) -> Response {
    Response::error(denial.status(), denial.message())
}

/// The answer for a backend error the verb has no special rule for.
fn backend_error(error: &quire_backend::Error, path: &str) -> Response {
    let (status, message) = match error.kind() {
        ErrorKind::NotFound => return not_found(path),
        ErrorKind::Archived => (Status::Archived, format!("{path} is archived")),
        ErrorKind::PathCollision | ErrorKind::InvalidMetadata | ErrorKind::InvalidContent => {
            (Status::BadRequest, error.detail().to_owned())
        }
        ErrorKind::Rejected => (
            Status::BadRequest,
            error
                .rejection_message()
                .unwrap_or(error.detail())
                .to_owned(),
        ),
        ErrorKind::SizeLimit => (Status::ServerError, "content exceeds size limit".into()),
        ErrorKind::Quota => (Status::NotPermitted, "document quota exceeded".into()),
        ErrorKind::ReadOnly => (Status::NotPermitted, "server is read-only".into()),
        ErrorKind::Canceled => {
            return Response::error(Status::Unavailable, "the request timed out")
                .with_meta(RETRY_AFTER_KEY, "1");
        }
        ErrorKind::OutcomeUnknown => {
            tracing::warn!(%error, "write outcome unknown");
            (
                Status::ServerError,
                format!(
                    "the request timed out while the write to {path} was being committed: it \
                     may or may not have landed; read {path} before writing it again"
                ),
            )
        }
        _ => {
            tracing::warn!(%error, "request failed");
            (Status::ServerError, "internal error".into())
        }
    };
    Response::error(status, &message)
}

/// `text` with every character markdown could read as markup backslash-escaped, so a
/// name, title or query shown in a generated body is only ever text (no link, emphasis,
/// HTML or table cell of its own); line breaks become spaces.
fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '<' | '>' | '!' | '|' | '~' | '#'
            | '&' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes `text` for a markdown link target; `/` kept only when `keep_slash`.
fn escape_link(text: &str, keep_slash: bool) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    const PATH: &AsciiSet = &SEGMENT.remove(b'/');
    let set = if keep_slash { PATH } else { SEGMENT };
    utf8_percent_encode(text, set).to_string()
}

#[cfg(test)]
mod tests;
