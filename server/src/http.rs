//! The HTTP gateway: the same handlers as the Mark protocol, mapped onto HTTP methods,
//! headers and status codes (docs/SPEC.md, "HTTP gateway"), plus `/livez`, `/readyz` and
//! `/metrics`. The Host header chooses the world.
//!
//! WATCH is `GET /path?watch`: a refusal is an ordinary response; an open watch is a `200`
//! whose streamed body is the Mark block stream itself, block by block. When the server
//! shuts down, open watches end with `closing` so the drain can finish.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::get;
use futures::StreamExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::handlers::{self, RETRY_AFTER_KEY, WatchContext};
use crate::mark::{MAX_BODY, Request, Response, Status, Verb};
use crate::store_metrics::StoreCollector;
use crate::worlds::Worlds;

/// Request headers carrying publisher metadata: `Meta-<key>: <value>`.
pub const META_HEADER_PREFIX: &str = "meta-";
/// Response headers carrying response metadata: `Mark-<key>: <value>`.
pub const MARK_HEADER_PREFIX: &str = "mark-";
/// The request header giving PUBLISH and APPEND their expected version.
pub const EXPECTED_VERSION_HEADER: &str = "expected-version";
/// The content type of a WATCH response body: Mark blocks, one after another.
pub const WATCH_CONTENT_TYPE: &str = "application/x-mark-watch";

/// Query parameters passed to the handlers as request metadata.
const QUERY_KEYS: [&str; 9] = [
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    world: String,
    verb: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
}

type LatencyFamily = Family<VerbLabels, Histogram, fn() -> Histogram>;

/// The gateway's Prometheus metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        fn latency_histogram() -> Histogram {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        }
        let latency: LatencyFamily = Family::new_with_constructor(latency_histogram);
        registry.register(
            "quire_requests",
            "Requests answered, by world, verb and status",
            requests.clone(),
        );
        registry.register(
            "quire_request_duration_seconds",
            "Time to answer a request, by verb",
            latency.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
        }
    }
}

impl Metrics {
    /// The request metrics plus every world's store metrics (`crate::store_metrics`).
    pub fn for_worlds(worlds: Arc<Worlds>) -> Metrics {
        let mut metrics = Metrics::default();
        metrics
            .registry
            .register_collector(Box::new(StoreCollector::new(worlds)));
        metrics
    }

    /// Records one answered request (any transport).
    pub fn observe(&self, world: &str, verb: Verb, status: Status, started: Instant) {
        self.requests
            .get_or_create(&RequestLabels {
                world: world.to_owned(),
                verb: verb.as_str().to_owned(),
                status: status.as_str().to_owned(),
            })
            .inc();
        self.latency
            .get_or_create(&VerbLabels {
                verb: verb.as_str().to_owned(),
            })
            .observe(started.elapsed().as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[derive(Clone, Debug)]
struct Gateway {
    worlds: Arc<Worlds>,
    metrics: Arc<Metrics>,
    /// Cancelled when the server shuts down: open watches end.
    draining: CancellationToken,
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
    let gateway = Gateway {
        metrics: recorder,
        worlds,
        draining,
    };
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(serve_request)
        .with_state(gateway)
}

/// Serves the gateway on `listener` until `shutdown` completes, then ends open watches and
/// drains open requests.
pub async fn serve(
    listener: TcpListener,
    worlds: Arc<Worlds>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = Arc::new(Metrics::for_worlds(worlds.clone()));
    serve_with_metrics(listener, worlds, metrics, shutdown).await
}

/// [`serve`], recording into `metrics` (shared with the QUIC listener).
pub async fn serve_with_metrics(
    listener: TcpListener,
    worlds: Arc<Worlds>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let draining = CancellationToken::new();
    let signal = {
        let draining = draining.clone();
        async move {
            shutdown.await;
            draining.cancel();
        }
    };
    axum::serve(listener, gateway_router(worlds, metrics, draining))
        .with_graceful_shutdown(signal)
        .await
}

async fn readyz(State(gateway): State<Gateway>) -> HttpResponse {
    if gateway.worlds.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn metrics(State(gateway): State<Gateway>) -> HttpResponse {
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
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let host = host_name(&parts.headers, parts.uri.authority().map(|a| a.host()));
    let Some(world) = gateway.worlds.for_host(&host) else {
        return plain(
            StatusCode::MISDIRECTED_REQUEST,
            "no world is served at this host\n",
        );
    };
    let query: Vec<(String, String)> = parts.uri.query().map(url_pairs).unwrap_or_default();
    // Browsers (`Accept: text/html`, the event stream, the page's assets): see `crate::web`.
    if let Some(page) = crate::web::respond(
        &world,
        &parts.method,
        parts.uri.path(),
        &parts.headers,
        &query,
        &gateway.draining,
    )
    .await
    {
        return page;
    }
    let has = |key: &str| query.iter().any(|(k, _)| k == key);
    let verb = match parts.method {
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
            return plain(StatusCode::BAD_REQUEST, "POST needs ?append or ?archive\n");
        }
        _ => return plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"),
    };
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(_) => {
            let response = Response::error(Status::ServerError, "content exceeds size limit");
            gateway
                .metrics
                .observe(&world.name, verb, response.status, started);
            return to_http(response, StatusCode::PAYLOAD_TOO_LARGE);
        }
    };
    let path = percent_encoding::percent_decode_str(parts.uri.path())
        .decode_utf8_lossy()
        .into_owned();
    if let Err(why) = crate::mark::wire::validate_path(&path) {
        return plain(StatusCode::BAD_REQUEST, &format!("{why}\n"));
    }
    let mut mark = Request::new(verb, path).with_body(body);
    for (key, value) in &query {
        if QUERY_KEYS.contains(&key.as_str()) {
            mark.metadata.insert(key.clone(), value.clone());
        }
    }
    copy_headers(&parts.headers, &mut mark);
    if verb == Verb::Watch {
        let context = WatchContext {
            connection: None,
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
                gateway
                    .metrics
                    .observe(&world.name, verb, response.status, started);
                let code = status_code(&response);
                to_http(response, code)
            }
        };
    }
    let response = handlers::handle(&world, mark).await;
    gateway
        .metrics
        .observe(&world.name, verb, response.status, started);
    let code = status_code(&response);
    to_http(response, code)
}

fn url_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode_component(key), decode_component(value))
        })
        .collect()
}

fn decode_component(text: &str) -> String {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
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

/// Auth, conditionals, expected version and publisher metadata from the headers.
fn copy_headers(headers: &HeaderMap, mark: &mut Request) {
    let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(token) = text(&header::AUTHORIZATION)
        .and_then(|v| v.strip_prefix("Bearer ").or(v.strip_prefix("bearer ")))
    {
        mark.metadata.insert("auth".into(), token.trim().to_owned());
    }
    let writes = matches!(mark.verb, Verb::Publish | Verb::Append);
    if let Some(tag) = text(&header::IF_NONE_MATCH) {
        if writes && tag.trim() == "*" {
            mark.metadata.insert("expected-version".into(), "0".into());
        } else if !writes {
            mark.metadata.insert("if-none-match".into(), unquote(tag));
        }
    }
    if let Some(since) = text(&header::IF_MODIFIED_SINCE) {
        mark.metadata
            .insert("if-modified-since".into(), since.trim().to_owned());
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
            if let Some(key) = name.as_str().strip_prefix(META_HEADER_PREFIX)
                && let Ok(value) = value.to_str()
            {
                mark.metadata.insert(key.to_owned(), value.to_owned());
            }
        }
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
    put(
        format!("{MARK_HEADER_PREFIX}status"),
        response.status.as_str(),
    );
    for (key, value) in &response.metadata {
        put(format!("{MARK_HEADER_PREFIX}{key}"), value);
    }
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
