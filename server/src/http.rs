//! The HTTP gateway: the same handlers as the Mark protocol, mapped onto HTTP methods,
//! headers and status codes (docs/SPEC.md, "HTTP gateway"), plus `/livez`, `/readyz` and
//! `/metrics`. The Host header chooses the world.
//!
//! WATCH is `GET /path?watch`: a refusal is an ordinary response; an open watch is a `200`
//! whose streamed body is the Mark block stream itself, block by block. When the server
//! shuts down, open watches end with `closing` so the drain can finish.
//!
//! Transport: HTTP/1.1, and HTTP/2 in cleartext only when configured (`[listen] http2`, then
//! with the `H2_*` stream, window and reset limits), served by [`serve_with`]'s own
//! accept loop so every connection has the limits of [`HttpSettings`]: a header-read
//! timeout (which also closes an idle keep-alive connection), a body-read timeout, and a
//! cap on open connections. A request is admitted by its world's limits before its body is
//! read, and a body announced over the limit is refused unread.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::get;
use futures::StreamExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use quire_log::metadata::CONTROL_KEYS;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::handlers::{self, RETRY_AFTER_KEY, WatchContext};
use crate::mark::{MAX_BODY, Request, Response, Status, Verb};
use crate::metrics::Metrics;
use crate::worlds::Worlds;

/// Request headers carrying publisher metadata: `Meta-<key>: <value>`.
pub const META_HEADER_PREFIX: &str = "meta-";
/// Response headers carrying response metadata: `Mark-<key>: <value>`.
pub const MARK_HEADER_PREFIX: &str = "mark-";
/// The request header giving PUBLISH and APPEND their expected version.
pub const EXPECTED_VERSION_HEADER: &str = "expected-version";
/// The content type of a WATCH response body: Mark blocks, one after another.
pub const WATCH_CONTENT_TYPE: &str = "application/x-mark-watch";

/// The most a connection buffers while reading a request's headers.
pub const MAX_HEADER_BUFFER: usize = 64 * 1024;

/// The gateway's transport limits (`[listen]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSettings {
    /// How long a client may take to send a request's headers, counted from the end of the
    /// previous response on a kept-alive connection: an idle connection is closed after it.
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body once it is admitted.
    pub body_timeout: Duration,
    /// Connections open at once; a connection beyond is closed as soon as it is accepted.
    pub max_connections: usize,
    /// How long a shutdown waits for requests in flight.
    pub shutdown_timeout: Duration,
    /// Also serve HTTP/2 in cleartext (prior knowledge) on connections that open with its
    /// preface, under the `H2_*` limits. Off unless configured.
    pub http2: bool,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 4096,
            shutdown_timeout: Duration::from_secs(10),
            http2: false,
        }
    }
}

/// HTTP/2 (when configured): requests one connection may have open at once.
pub const H2_MAX_STREAMS: u32 = 32;
/// HTTP/2: unread request data one stream may have in flight (flow control).
pub const H2_STREAM_WINDOW: u32 = 256 * 1024;
/// HTTP/2: unread request data one connection may have in flight over all its streams.
pub const H2_CONNECTION_WINDOW: u32 = 1024 * 1024;
/// HTTP/2: streams a client may reset before the server has accepted them, then the
/// connection is closed (the rapid-reset flood).
const H2_PENDING_RESETS: usize = 32;
/// What an HTTP/2 connection opens with.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Query parameters passed to the handlers of read verbs and WATCH as request metadata
/// (never to writes: publisher metadata comes only from `Meta-*` headers). Clients that
/// speak to the gateway (`crate::remote`) send these keys in the query string.
pub const QUERY_KEYS: [&str; 9] = [
    "page-size",
    "cursor",
    "include-archived",
    "query",
    "filter",
    "limit",
    "match",
    "since",
    "coalesce",
];

#[derive(Clone, Debug)]
struct Gateway {
    worlds: Arc<Worlds>,
    metrics: Arc<Metrics>,
    /// Cancelled when the server shuts down: open watches end.
    draining: CancellationToken,
    body_timeout: Duration,
}

/// The gateway's routes over `worlds`, with their own metrics.
pub fn router(worlds: Arc<Worlds>) -> Router {
    let metrics = Arc::new(Metrics::for_worlds(worlds.clone()));
    gateway_router(worlds, metrics, CancellationToken::new())
}

/// The gateway's routes, recording into `metrics` (shared with the QUIC listener);
/// cancelling `draining` ends every open watch with `closing`.
pub fn gateway_router(
    worlds: Arc<Worlds>,
    recorder: Arc<Metrics>,
    draining: CancellationToken,
) -> Router {
    routes(Gateway {
        metrics: recorder,
        worlds,
        draining,
        body_timeout: HttpSettings::default().body_timeout,
    })
}

fn routes(gateway: Gateway) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(serve_request)
        .with_state(gateway)
}

/// The operational endpoints answer only a bare `GET`: with a query (`/metrics?list`,
/// `/livez?watch`) the request is the world's, so a directory of that name stays reachable
/// (as does `/metrics/`, which no route takes).
fn for_the_world(request: &HttpRequest) -> bool {
    request.uri().query().is_some()
}

async fn livez(State(gateway): State<Gateway>, request: HttpRequest) -> HttpResponse {
    if for_the_world(&request) {
        return serve_request(State(gateway), request).await;
    }
    (StatusCode::OK, "ok\n").into_response()
}

/// Serves the gateway on `listener` with the default [`HttpSettings`] until `shutdown`
/// completes, then ends open watches and drains open requests.
pub async fn serve(
    listener: TcpListener,
    worlds: Arc<Worlds>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = Arc::new(Metrics::for_worlds(worlds.clone()));
    serve_with(listener, worlds, metrics, HttpSettings::default(), shutdown).await
}

/// [`serve`] with `settings`, recording into `metrics` (shared with the QUIC listener).
pub async fn serve_with(
    listener: TcpListener,
    worlds: Arc<Worlds>,
    metrics: Arc<Metrics>,
    settings: HttpSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let draining = CancellationToken::new();
    let router = routes(Gateway {
        worlds,
        metrics,
        draining: draining.clone(),
        body_timeout: settings.body_timeout,
    });
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a connection reset before it was accepted: the
                    // listener itself is fine, and the cap frees descriptors as
                    // connections end.
                    tracing::warn!(%error, "HTTP accept failed");
                    tokio::task::yield_now().await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "HTTP connection refused: at the connection cap");
            drop(stream);
            continue;
        };
        connections.spawn(serve_connection(
            stream,
            peer,
            router.clone(),
            settings.clone(),
            draining.clone(),
            slot,
        ));
    }
    draining.cancel();
    connections.close();
    if tokio::time::timeout(settings.shutdown_timeout, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout = ?settings.shutdown_timeout,
            "HTTP connections still open at the end of the shutdown timeout"
        );
    }
    Ok(())
}

/// Whether the client opens with the HTTP/2 preface, read (not consumed) within `timeout`.
async fn opens_with_h2_preface(stream: &tokio::net::TcpStream, timeout: Duration) -> bool {
    let mut seen = [0u8; H2_PREFACE.len()];
    let peek = async {
        loop {
            let n = stream.peek(&mut seen).await.unwrap_or(0);
            if n == 0 || seen[..n] != H2_PREFACE[..n] {
                return false;
            }
            if n == H2_PREFACE.len() {
                return true;
            }
            // Part of the preface so far: wait for more bytes than these.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(timeout, peek).await.unwrap_or(false)
}

/// One connection (HTTP/1.1, or HTTP/2 when configured and the client opens with its
/// preface), until the client closes it, a timeout does, or the drain finishes its last
/// response.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    settings: HttpSettings,
    draining: CancellationToken,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    let header_timeout = settings.header_timeout;
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        router.clone().oneshot(request)
    });
    if settings.http2 && opens_with_h2_preface(&stream, header_timeout).await {
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .max_concurrent_streams(H2_MAX_STREAMS)
            .initial_stream_window_size(H2_STREAM_WINDOW)
            .initial_connection_window_size(H2_CONNECTION_WINDOW)
            .max_header_list_size(MAX_HEADER_BUFFER as u32)
            .max_pending_accept_reset_streams(H2_PENDING_RESETS)
            // A peer that stops answering pings is closed, as an idle HTTP/1.1 one is.
            .keep_alive_interval(header_timeout)
            .keep_alive_timeout(header_timeout);
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        let ended = tokio::select! {
            ended = connection.as_mut() => ended,
            () = draining.cancelled() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(error) = ended {
            tracing::debug!(%error, %peer, "HTTP/2 connection ended");
        }
        return;
    }
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEADER_BUFFER)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = draining.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = ended {
        tracing::debug!(%error, %peer, "HTTP connection ended");
    }
}

async fn readyz(State(gateway): State<Gateway>, request: HttpRequest) -> HttpResponse {
    if for_the_world(&request) {
        return serve_request(State(gateway), request).await;
    }
    if gateway.worlds.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn metrics(State(gateway): State<Gateway>, request: HttpRequest) -> HttpResponse {
    if for_the_world(&request) {
        return serve_request(State(gateway), request).await;
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gateway.metrics.render(),
    )
        .into_response()
}

async fn serve_request(State(gateway): State<Gateway>, request: HttpRequest) -> HttpResponse {
    // tokio's clock: real time in a server, paused time in a test.
    let started = tokio::time::Instant::now();
    let (parts, body) = request.into_parts();
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let host = host_name(&parts.headers, parts.uri.authority().map(|a| a.host()));
    let Some(world) = gateway.worlds.for_host(&host) else {
        return plain(
            StatusCode::MISDIRECTED_REQUEST,
            "no world is served at this host\n",
        );
    };
    let query = match parts.uri.query().map(url_pairs).transpose() {
        Ok(query) => query.unwrap_or_default(),
        Err(why) => return refuse(Status::BadRequest, &why),
    };
    // Browsers (`Accept: text/html`, the event stream, the page's assets): see `crate::web`.
    if let Some(page) = crate::web::respond(
        &world,
        &parts.method,
        parts.uri.path(),
        &parts.headers,
        &query,
        &gateway.draining,
        peer,
    )
    .await
    {
        return page;
    }
    let verb = match verb_for(&parts.method, &query) {
        Ok(verb) => verb,
        Err(refusal) => return plain(refusal.code, refusal.message),
    };
    let answer = |response: Response, code: StatusCode| {
        gateway
            .metrics
            .observe(&world.name, verb, response.status, started);
        to_http(response, code)
    };
    let mark = match mark_request(verb, parts.uri.path(), &query, &parts.headers) {
        Ok(mark) => mark,
        Err(why) => {
            return answer(
                Response::error(Status::BadRequest, &why),
                StatusCode::BAD_REQUEST,
            );
        }
    };
    if verb == Verb::Watch {
        let context = WatchContext {
            connection: None,
            peer,
            draining: gateway.draining.clone(),
        };
        return match handlers::open_watch(world.clone(), mark, &context).await {
            Ok(watch) => {
                gateway
                    .metrics
                    .observe(&world.name, verb, Status::Ok, started);
                watch_response(watch)
            }
            Err(response) => {
                let code = status_code(&response);
                answer(response, code)
            }
        };
    }
    if announced_length(&parts.headers).is_some_and(|length| length > MAX_BODY as u64) {
        return answer(too_large(), StatusCode::PAYLOAD_TOO_LARGE);
    }
    // Admitted before the body is read: a refused request costs no buffering.
    let admission = match handlers::admit(&world, &mark, peer).await {
        Ok(admission) => admission,
        Err(response) => {
            let code = status_code(&response);
            return answer(response, code);
        }
    };
    // Only writes carry a body; any other request's is left unread (the connection is
    // then not reused).
    let mark = if verb.is_write() {
        match read_body(body, gateway.body_timeout).await {
            Ok(bytes) => mark.with_body(bytes),
            Err(BodyError::TooLarge) => return answer(too_large(), StatusCode::PAYLOAD_TOO_LARGE),
            Err(BodyError::TimedOut) => {
                let response = Response::error(
                    Status::BadRequest,
                    "the request body did not arrive in time",
                );
                return answer(response, StatusCode::REQUEST_TIMEOUT);
            }
            Err(BodyError::Failed) => {
                let response =
                    Response::error(Status::BadRequest, "the request body could not be read");
                return answer(response, StatusCode::BAD_REQUEST);
            }
        }
    } else {
        mark
    };
    let response = handlers::handle_admitted(&world, mark, admission).await;
    let code = status_code(&response);
    answer(response, code)
}

/// Why an HTTP method and query name no verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoVerb {
    pub code: StatusCode,
    pub message: &'static str,
}

/// The verb an HTTP method and query ask for.
pub fn verb_for(method: &Method, query: &[(String, String)]) -> Result<Verb, NoVerb> {
    let has = |key: &str| query.iter().any(|(k, _)| k == key);
    Ok(match *method {
        Method::GET if has("watch") => Verb::Watch,
        Method::GET | Method::HEAD => {
            if has("versions") {
                Verb::Versions
            } else if has("list") {
                Verb::List
            } else if has("lookup") || has("query") {
                Verb::Lookup
            } else {
                Verb::Fetch
            }
        }
        Method::PUT => Verb::Publish,
        Method::POST if has("append") => Verb::Append,
        Method::POST if has("archive") => Verb::Archive,
        Method::POST => {
            return Err(NoVerb {
                code: StatusCode::BAD_REQUEST,
                message: "POST needs ?append or ?archive\n",
            });
        }
        _ => {
            return Err(NoVerb {
                code: StatusCode::METHOD_NOT_ALLOWED,
                message: "method not allowed\n",
            });
        }
    })
}

/// The Mark request an HTTP request maps to, without its body; the error says what is
/// wrong with it. `raw_path` is the request target's path, still percent-encoded.
pub fn mark_request(
    verb: Verb,
    raw_path: &str,
    query: &[(String, String)],
    headers: &HeaderMap,
) -> Result<Request, String> {
    let path = percent_encoding::percent_decode_str(raw_path)
        .decode_utf8()
        .map_err(|_| "the path is not valid UTF-8 once percent-decoded".to_owned())?
        .into_owned();
    crate::mark::validate_path(&path)?;
    let mut mark = Request::new(verb, path);
    if !verb.is_write() {
        for (key, value) in query {
            if QUERY_KEYS.contains(&key.as_str()) {
                mark.metadata.insert(key.clone(), value.clone());
            }
        }
    }
    copy_headers(headers, &mut mark)?;
    Ok(mark)
}

fn too_large() -> Response {
    Response::error(Status::ServerError, "content exceeds size limit")
}

/// A refusal before any world is involved.
fn refuse(status: Status, why: &str) -> HttpResponse {
    let response = Response::error(status, why);
    let code = status_code(&response);
    to_http(response, code)
}

/// The `Content-Length` a request announces, if any.
fn announced_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Why a request body was not read.
#[derive(Debug)]
enum BodyError {
    TooLarge,
    TimedOut,
    /// The client went away or sent a broken body.
    Failed,
}

/// The whole body, at most [`MAX_BODY`] bytes, within `timeout`.
async fn read_body(body: Body, timeout: Duration) -> Result<bytes::Bytes, BodyError> {
    let limited = Limited::new(body, MAX_BODY);
    match tokio::time::timeout(timeout, limited.collect()).await {
        Err(_elapsed) => Err(BodyError::TimedOut),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<LengthLimitError>() => Err(BodyError::TooLarge),
        Ok(Err(_)) => Err(BodyError::Failed),
    }
}

/// The query's pairs, percent-decoded (`+` is a space); invalid UTF-8 is refused, never
/// replaced, so two spellings never name one thing.
pub fn url_pairs(query: &str) -> Result<Vec<(String, String)>, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode_component(key)?, decode_component(value)?))
        })
        .collect()
}

fn decode_component(text: &str) -> Result<String, String> {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| "the query is not valid UTF-8 once percent-decoded".to_owned())
}

/// The host name (no port) from the Host header, or the request target's authority.
fn host_name(headers: &HeaderMap, authority: Option<&str>) -> String {
    let raw = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or(authority)
        .unwrap_or("");
    let without_port = if let Some(rest) = raw.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        raw.rsplit_once(':').map_or(raw, |(host, _port)| host)
    };
    without_port.to_ascii_lowercase()
}

/// Auth, conditionals, expected version and publisher metadata from the headers. A
/// `Meta-*` header naming a control key, or whose value is not UTF-8, is refused: metadata
/// never steers the request.
fn copy_headers(headers: &HeaderMap, mark: &mut Request) -> Result<(), String> {
    let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(token) = text(&header::AUTHORIZATION).and_then(bearer_token) {
        mark.metadata.insert("auth".into(), token.to_owned());
    }
    let writes = matches!(mark.verb, Verb::Publish | Verb::Append);
    if let Some(tag) = text(&header::IF_NONE_MATCH) {
        if writes && tag.trim() == "*" {
            mark.metadata.insert("expected-version".into(), "0".into());
        } else if !writes {
            // A list of tags (`"a", W/"b"`) is passed as the tags joined with `,`; `*`
            // matches any current version.
            let tags: Vec<String> = tag.split(',').map(unquote).collect();
            mark.metadata.insert("if-none-match".into(), tags.join(","));
        }
    }
    if let Some(since) = text(&header::IF_MODIFIED_SINCE) {
        mark.metadata
            .insert("if-modified-since".into(), modified_since(since));
    }
    if writes {
        let expected = headers
            .get(EXPECTED_VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| text(&header::IF_MATCH).map(unquote));
        if let Some(expected) = expected {
            mark.metadata.insert("expected-version".into(), expected);
        }
        for (name, value) in headers {
            let Some(key) = name.as_str().strip_prefix(META_HEADER_PREFIX) else {
                continue;
            };
            if CONTROL_KEYS.contains(&key) {
                return Err(format!(
                    "Meta-{key}: {key} steers the request and is not metadata"
                ));
            }
            let value = std::str::from_utf8(value.as_bytes())
                .map_err(|_| format!("the value of Meta-{key} is not UTF-8"))?;
            mark.metadata.insert(key.to_owned(), value.to_owned());
        }
    }
    Ok(())
}

/// The token of an `Authorization: Bearer <token>` value (the scheme in any case).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// An `If-Modified-Since` value as the Mark key takes it: an HTTP date (`Tue, 01 Dec 2026
/// 10:00:00 GMT`, or the two obsolete forms) as RFC 3339; anything else as written.
fn modified_since(value: &str) -> String {
    let value = value.trim();
    match httpdate::parse_http_date(value) {
        Ok(at) => humantime::format_rfc3339_seconds(at).to_string(),
        Err(_) => value.to_owned(),
    }
}

fn unquote(tag: &str) -> String {
    let tag = tag.trim();
    let tag = tag.strip_prefix("W/").unwrap_or(tag);
    tag.trim_matches('"').to_owned()
}

/// The HTTP status for a Mark status.
pub fn status_code(response: &Response) -> StatusCode {
    match response.status {
        Status::Ok => StatusCode::OK,
        Status::Created => StatusCode::CREATED,
        Status::NotModified => StatusCode::NOT_MODIFIED,
        Status::NotFound => StatusCode::NOT_FOUND,
        Status::Archived => StatusCode::GONE,
        Status::Unauthorized => StatusCode::UNAUTHORIZED,
        Status::NotPermitted => StatusCode::FORBIDDEN,
        Status::Conflict => StatusCode::CONFLICT,
        Status::BadRequest => StatusCode::BAD_REQUEST,
        Status::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        Status::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Status::Unavailable | Status::Closing => StatusCode::SERVICE_UNAVAILABLE,
        _ if response
            .body
            .starts_with(b"\n# Server error\n\ncontent exceeds size limit") =>
        {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn to_http(response: Response, code: StatusCode) -> HttpResponse {
    let mut headers = HeaderMap::new();
    let mut put = |name: String, value: &str| {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::from_str(value)) {
            headers.insert(name, value);
        }
    };
    // The status comes only from the response's status, never from a metadata key.
    for (key, value) in &response.metadata {
        if key != "status" {
            put(format!("{MARK_HEADER_PREFIX}{key}"), value);
        }
    }
    put(
        format!("{MARK_HEADER_PREFIX}status"),
        response.status.as_str(),
    );
    if let Some(etag) = response.metadata.get("etag") {
        put("etag".into(), &format!("\"{etag}\""));
    }
    if let Some(wait) = response.metadata.get(RETRY_AFTER_KEY) {
        put("retry-after".into(), wait);
    }
    if code == StatusCode::UNAUTHORIZED {
        put("www-authenticate".into(), "Bearer");
    }
    put("content-type".into(), "text/markdown; charset=utf-8");
    let mut http = HttpResponse::new(Body::from(response.body));
    *http.status_mut() = code;
    *http.headers_mut() = headers;
    http
}

/// An open watch as a streamed `200`: each Mark block is sent as soon as it is ready.
fn watch_response(watch: handlers::Watch) -> HttpResponse {
    let body = Body::from_stream(watch.into_stream().map(Ok::<_, std::convert::Infallible>));
    let mut http = HttpResponse::new(body);
    let headers = http.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(WATCH_CONTENT_TYPE),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    http
}

fn plain(code: StatusCode, message: &str) -> HttpResponse {
    (code, message.to_owned()).into_response()
}
