//! Transport-neutral handlers: one Mark [`Request`] in, one [`Response`] out, for every verb
//! but WATCH, whose handler ([`watch`]) answers a stream of encoded blocks instead. A handler
//! sees its world only through the backend contract ([`quire_backend::Store`]) plus the
//! world's authorizer and limiter, so the QUIC listener, the HTTP gateway and tests share
//! every status and metadata rule.
//!
//! Order of checks (the reference's): a `..` segment answers `not-found` before anything
//! else; `FETCH /health` answers at once; then admission (limits), then the verb. Each read
//! verb opens one read view for the whole request and closes it after.

mod fetch;
mod list;
mod lookup;
pub mod watch;
mod write;

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use quire_backend::{Ctx, ErrorKind, ReadView, Store};
use quire_log::Hash;

use crate::auth::{Access, Authorizer, Denial};
use crate::limits::Limiter;
use crate::mark::{Request, Response, Status, Verb};

pub use watch::{Watch, WatchContext, open_watch, serve_watch};

/// The body `FETCH /health` answers with.
pub const HEALTH_BODY: &str = "# Health Check\n\nServer is healthy.\n";
/// The prefix of a content-addressed path (`/blake3-<64 hex>`).
pub const HASH_PATH_PREFIX: &str = "/blake3-";
/// The response key carrying a rate-limited answer's retry hint, in whole seconds.
pub const RETRY_AFTER_KEY: &str = "retry-after";

/// One world as the handlers see it: the store behind the contract, its tokens, its limits.
pub struct World {
    pub name: String,
    pub store: Arc<dyn Store>,
    pub auth: Authorizer,
    pub limiter: Limiter,
    pub read_only: bool,
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

/// Answers one request against `world`.
pub async fn handle(world: &World, request: Request) -> Response {
    if has_dot_dot(&request.path) {
        return not_found(&request.path);
    }
    if request.verb == Verb::Fetch && request.path == "/health" {
        return Response::new(Status::Ok).with_body(HEALTH_BODY);
    }
    let _admission = match world.limiter.admit().await {
        Ok(admission) => admission,
        Err(refusal) => {
            return Response::error(refusal.status(), &refusal.message())
                .with_meta(RETRY_AFTER_KEY, refusal.retry_after_secs().to_string());
        }
    };
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

    /// Read authorisation of `path`.
    fn may_read(&self, path: &str) -> Result<Access, Denial> {
        self.world
            .auth
            .authorize_read(self.secret.as_deref(), path, SystemTime::now())
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
        ErrorKind::Canceled => (Status::ServerError, "the request timed out".into()),
        _ => {
            tracing::warn!(%error, "request failed");
            (Status::ServerError, "internal error".into())
        }
    };
    Response::error(status, &message)
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
