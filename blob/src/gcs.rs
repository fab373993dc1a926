//! The GCS driver: [`GcsStore`], a [`BlobStore`] over the Cloud Storage JSON API.
//!
//! # Requests
//!
//! | operation | request |
//! | --- | --- |
//! | create | `POST /upload/storage/v1/b/B/o?uploadType=multipart&ifGenerationMatch=0`: JSON metadata (name, CRC32C) then the bytes |
//! | replace | the same upload with `ifGenerationMatch=<generation>` |
//! | delete | `DELETE /storage/v1/b/B/o/<key>?ifGenerationMatch=<generation>` |
//! | head | `GET /storage/v1/b/B/o/<key>` (the metadata) |
//! | get | the metadata, then `GET …?alt=media&generation=<g>`, so bytes and attributes belong to one generation; the bytes' CRC32C (Castagnoli) must match the metadata's |
//! | get_range | `GET …?alt=media` with a `Range` header (an empty range reads only the metadata) |
//! | list | `GET /storage/v1/b/B/o?prefix=P&startOffset=<after>&maxResults=1000` |
//!
//! The generation is the GCS object generation in decimal, unique per key for the life of the
//! bucket. A generation that is not a positive decimal integer (without leading zeros) cannot
//! name any object: replace and delete refuse it as [`ErrorKind::Precondition`] without a
//! request. `startOffset` is inclusive, so a key equal to the position is dropped; whether
//! more keys follow is taken from `nextPageToken`, and the page is checked by
//! [`ListRequest::page`] (keys out of order or outside the prefix are
//! [`ErrorKind::Integrity`]).
//!
//! # Errors
//!
//! | answer | reads (get, get_range, head, list) | mutations (create, replace, delete) |
//! | --- | --- | --- |
//! | 404 | get/get_range/head: [`NotFound`](ErrorKind::NotFound); list: [`Unavailable`](ErrorKind::Unavailable) (no bucket) | replace/delete: [`Precondition`](ErrorKind::Precondition); create: [`Unavailable`](ErrorKind::Unavailable) (no bucket) |
//! | 412, 416 | [`Precondition`](ErrorKind::Precondition) | [`Precondition`](ErrorKind::Precondition) |
//! | 400 | [`Precondition`](ErrorKind::Precondition) | [`Integrity`](ErrorKind::Integrity) (refused as invalid, such as a CRC32C mismatch: nothing changed, and it is no lost race) |
//! | 429 | [`Throttled`](ErrorKind::Throttled) | [`Throttled`](ErrorKind::Throttled) (refused before applying) |
//! | 408, 5xx, timeout, connection lost after sending | [`Unavailable`](ErrorKind::Unavailable) | [`Ambiguous`](ErrorKind::Ambiguous) |
//! | connection refused / TLS failure (nothing sent), no token | [`Unavailable`](ErrorKind::Unavailable) | [`Unavailable`](ErrorKind::Unavailable) |
//! | other statuses (401, 403, 3xx, …) | [`Unavailable`](ErrorKind::Unavailable) | [`Unavailable`](ErrorKind::Unavailable) (a definite refusal) |
//! | unreadable JSON, wrong size or checksum, inconsistent metadata | [`Integrity`](ErrorKind::Integrity) | [`Ambiguous`](ErrorKind::Ambiguous): the success status says it applied, the answer cannot confirm what |
//!
//! A 404 on create or list means the bucket is missing, which is not a lost race, so it is
//! never reported as a precondition failure. Mutations are never retried: a mutation's retry
//! is the caller's decision, after reading the key back when the outcome was ambiguous. A read
//! whose connection failed without any answer (not a timeout) is re-sent once, as HTTP clients
//! do for idempotent requests on a kept-alive connection the server has just closed.
//!
//! # Authentication
//!
//! Every request carries a bearer token from [`GcsAuth`]:
//! - [`GcsAuth::StaticToken`]: used as is; tests and emulators use this, so no token service
//!   is ever contacted;
//! - [`GcsAuth::ServiceAccountKey`]: a service-account key file; the driver signs an RS256 JWT
//!   (scope `devstorage.read_write`) and exchanges it at the key's `token_uri`, caching the
//!   token until a minute before it expires;
//! - [`GcsAuth::MetadataServer`]: the GCE/GKE metadata server, only when configured.
//!
//! # Emulator gaps (fake-gcs-server 1.54)
//!
//! - DELETE ignores `ifGenerationMatch`: a stale conditional delete succeeds. The conformance
//!   suite reports the affected cases as gaps there, and the driver's request is checked
//!   against a recording stub instead.
//! - Only multipart uploads check `ifGenerationMatch` (which is why this driver uses them).
//! - After answering 416 to a range read, the emulator closes the connection without saying
//!   so; the next request on it fails (a read is re-sent, see above; a mutation would be
//!   ambiguous).
//! - The CRC32C sent with an upload is not verified by the emulator (real GCS refuses a
//!   mismatch with 400); `fields` is ignored; media reads ignore `ifGenerationMatch` (this
//!   driver pins reads with `generation`, which the emulator honours).

mod auth;

use std::ops::Range;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{CONTENT_RANGE, CONTENT_TYPE, RANGE};
use reqwest::{Client, RequestBuilder, Response, StatusCode, Url};
use serde::Deserialize;

use crate::BlobStore;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::list::{ListRequest, MAX_LIST_PAGE};
use crate::range;
use crate::types::{
    Attributes, Generation, ListPage, Object, cut_range, validate_key, validate_range,
};

pub use auth::{DEFAULT_METADATA_URL, GcsAuth};

/// The public Cloud Storage endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";
/// The default limit on one request, from connecting to the last byte of the answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times `get` re-reads when the object changes between its metadata and media reads.
const GET_ATTEMPTS: usize = 3;
/// How many empty pages (with a page token) `list` follows before giving up.
const LIST_EMPTY_PAGE_LIMIT: usize = 16;
/// RFC 3986 unreserved characters stay; everything else in a path segment is escaped.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Where and how to reach a bucket.
#[derive(Clone, Debug)]
pub struct GcsConfig {
    pub bucket: String,
    /// The API's base URL: [`DEFAULT_ENDPOINT`], or an emulator's `http://127.0.0.1:PORT`.
    pub endpoint: String,
    pub auth: GcsAuth,
    /// The limit on one request, from connecting to the last byte of the answer.
    pub timeout: Duration,
}

impl GcsConfig {
    /// A bucket on the public endpoint with the default timeout.
    pub fn new(bucket: impl Into<String>, auth: GcsAuth) -> Self {
        GcsConfig {
            bucket: bucket.into(),
            endpoint: DEFAULT_ENDPOINT.to_owned(),
            auth,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same configuration against another endpoint (an emulator).
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = endpoint.into();
        self
    }
}

/// A store could not be set up (bad configuration, unreadable key, bucket not creatable).
#[derive(Debug, thiserror::Error)]
#[error("gcs: {message}")]
pub struct GcsSetupError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl GcsSetupError {
    fn new(message: impl Into<String>) -> Self {
        GcsSetupError {
            message: message.into(),
            source: None,
        }
    }

    fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }
}

/// A [`BlobStore`] over one GCS bucket; see the module docs for the request and error mapping.
#[derive(Debug)]
pub struct GcsStore {
    http: Client,
    endpoint: String,
    bucket: String,
    auth: auth::Auth,
}

/// The object resource fields the driver reads.
#[derive(Deserialize)]
struct ObjectResource {
    name: String,
    size: String,
    generation: String,
    updated: String,
    #[serde(default)]
    crc32c: Option<String>,
}

#[derive(Deserialize)]
struct ObjectList {
    #[serde(default)]
    items: Vec<ObjectResource>,
    #[serde(rename = "nextPageToken", default)]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    message: String,
}

impl GcsStore {
    /// A store for `config`. Reads a service-account key now; contacts nothing.
    pub fn new(config: GcsConfig) -> Result<Self, GcsSetupError> {
        let endpoint = config.endpoint.trim_end_matches('/').to_owned();
        let parsed = Url::parse(&endpoint).map_err(|e| {
            GcsSetupError::new(format!("invalid endpoint {endpoint:?}")).with_source(e)
        })?;
        if config.bucket.is_empty() {
            return Err(GcsSetupError::new("empty bucket name"));
        }
        let mut builder = Client::builder()
            .use_rustls_tls()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            // A redirect on this API is unexpected; following it could re-send a mutation.
            .redirect(reqwest::redirect::Policy::none());
        if is_loopback(&parsed) {
            // An emulator on this machine is never reached through a proxy.
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| GcsSetupError::new("building the HTTP client").with_source(e))?;
        Ok(GcsStore {
            http,
            endpoint,
            bucket: config.bucket,
            auth: auth::Auth::new(&config.auth)?,
        })
    }

    /// Creates the bucket in `project` unless it exists (for tests and tools).
    pub async fn ensure_bucket(&self, project: &str) -> Result<(), GcsSetupError> {
        let failed = |what: &str, e: reqwest::Error| {
            GcsSetupError::new(format!("{what} bucket {:?}", self.bucket)).with_source(e)
        };
        let token = self.auth.bearer(&self.http).await.map_err(|why| {
            GcsSetupError::new(format!("no access token for bucket setup: {why}"))
        })?;
        let bucket_url = format!("{}/storage/v1/b/{}", self.endpoint, segment(&self.bucket));
        let found = self
            .http
            .get(&bucket_url)
            .bearer_auth(&token)
            .send()
            .await
            .map_err(|e| failed("looking up", e))?;
        if found.status().is_success() {
            return Ok(());
        }
        let mut url = Url::parse(&format!("{}/storage/v1/b", self.endpoint))
            .map_err(|e| GcsSetupError::new("invalid endpoint").with_source(e))?;
        url.query_pairs_mut().append_pair("project", project);
        let created = self
            .http
            .post(url)
            .bearer_auth(&token)
            .json(&serde_json::json!({ "name": self.bucket }))
            .send()
            .await
            .map_err(|e| failed("creating", e))?;
        let status = created.status();
        // 409: someone created it between the lookup and now.
        if status.is_success() || status == StatusCode::CONFLICT {
            return Ok(());
        }
        let body = created.text().await.unwrap_or_default();
        Err(GcsSetupError::new(format!(
            "creating bucket {:?} in project {project:?}: {status}: {}",
            self.bucket,
            error_message(body.as_bytes())
        )))
    }

    fn object_url(&self, op: Op, key: &str) -> Result<Url> {
        self.url(
            op,
            key,
            &format!(
                "{}/storage/v1/b/{}/o/{}",
                self.endpoint,
                segment(&self.bucket),
                segment(key)
            ),
        )
    }

    fn url(&self, op: Op, key: &str, text: &str) -> Result<Url> {
        Url::parse(text).map_err(|e| {
            Error::new(
                op,
                key,
                ErrorKind::Precondition,
                format!("invalid URL: {e}"),
            )
        })
    }

    /// Sends `request` with a bearer token; a non-success answer becomes the mapped error.
    async fn send(&self, op: Op, key: &str, request: RequestBuilder) -> Result<Response> {
        let token = self.auth.bearer(&self.http).await.map_err(|why| {
            Error::new(
                op,
                key,
                ErrorKind::Unavailable,
                format!("no access token: {why}"),
            )
        })?;
        let request = request.bearer_auth(token);
        // A read is re-sent once when its connection failed without an answer (typically a
        // kept-alive connection the server had just closed); a mutation never is.
        let spare = if op.is_mutation() {
            None
        } else {
            request.try_clone()
        };
        let response = match (request.send().await, spare) {
            (Err(err), Some(spare)) if !err.is_timeout() => spare.send().await,
            (result, _) => result,
        }
        .map_err(|e| transport_error(op, key, e))?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(status_error(op, key, response).await)
        }
    }

    /// Reads a success answer's body.
    async fn body(&self, op: Op, key: &str, response: Response) -> Result<Bytes> {
        response.bytes().await.map_err(|e| {
            // The status said the call succeeded; only the rest of the answer was lost.
            let kind = if op.is_mutation() {
                ErrorKind::Ambiguous
            } else {
                ErrorKind::Unavailable
            };
            Error::new(op, key, kind, format!("answer lost: {e}")).with_source(e)
        })
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        op: Op,
        key: &str,
        response: Response,
    ) -> Result<T> {
        let body = self.body(op, key, response).await?;
        serde_json::from_slice(&body).map_err(|e| {
            Error::new(
                op,
                key,
                ErrorKind::Integrity,
                format!("unreadable answer: {e}"),
            )
        })
    }

    /// The object's metadata as attributes, with its CRC32C when the store gave one.
    async fn metadata(&self, op: Op, key: &str) -> Result<(Attributes, Option<u32>)> {
        let url = self.object_url(op, key)?;
        let response = self.send(op, key, self.http.get(url)).await?;
        let resource: ObjectResource = self.json(op, key, response).await?;
        let crc = resource
            .crc32c
            .as_deref()
            .map(|text| decode_crc32c(op, key, text))
            .transpose()?;
        let attributes = attributes(op, key, resource)?;
        expect_name(op, key, &attributes)?;
        Ok((attributes, crc))
    }

    /// One multipart upload conditioned on `if_generation_match` (0: the key must be absent).
    async fn upload(
        &self,
        op: Op,
        key: &str,
        if_generation_match: u64,
        data: Bytes,
    ) -> Result<Attributes> {
        let crc = crc32c::crc32c(&data);
        let metadata = serde_json::json!({
            "name": key,
            "crc32c": encode_crc32c(crc),
            "contentType": "application/octet-stream",
        });
        let (content_type, body) = multipart_related(&metadata.to_string(), &data);
        let mut url = self.url(
            op,
            key,
            &format!(
                "{}/upload/storage/v1/b/{}/o",
                self.endpoint,
                segment(&self.bucket)
            ),
        )?;
        url.query_pairs_mut()
            .append_pair("uploadType", "multipart")
            .append_pair("ifGenerationMatch", &if_generation_match.to_string());
        let request = self
            .http
            .post(url)
            .header(CONTENT_TYPE, content_type)
            .body(body);
        let response = self.send(op, key, request).await?;
        // The status said the upload applied: an answer that cannot be read or does not
        // describe these bytes leaves the outcome open (the caller reads the key back).
        self.uploaded(op, key, response, &data, crc)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::Integrity => e.with_kind(ErrorKind::Ambiguous),
                _ => e,
            })
    }

    /// Checks a successful upload's answer against the bytes sent.
    async fn uploaded(
        &self,
        op: Op,
        key: &str,
        response: Response,
        data: &Bytes,
        crc: u32,
    ) -> Result<Attributes> {
        let resource: ObjectResource = self.json(op, key, response).await?;
        let stored_crc = resource.crc32c.clone();
        let attributes = attributes(op, key, resource)?;
        expect_name(op, key, &attributes)?;
        let integrity = |why: String| Error::new(op, key, ErrorKind::Integrity, why);
        if attributes.size != data.len() as u64 {
            return Err(integrity(format!(
                "stored {} bytes of {}",
                attributes.size,
                data.len()
            )));
        }
        if let Some(text) = stored_crc
            && decode_crc32c(op, key, &text)? != crc
        {
            return Err(integrity("stored bytes have another CRC32C".into()));
        }
        Ok(attributes)
    }
}

#[async_trait]
impl BlobStore for GcsStore {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        validate_key(Op::Create, key)?;
        self.upload(Op::Create, key, 0, data).await
    }

    async fn get(&self, key: &str) -> Result<Object> {
        validate_key(Op::Get, key)?;
        for _ in 0..GET_ATTEMPTS {
            let (attributes, crc) = self.metadata(Op::Get, key).await?;
            let mut url = self.object_url(Op::Get, key)?;
            url.query_pairs_mut()
                .append_pair("alt", "media")
                .append_pair("generation", attributes.generation.as_str());
            let response = match self.send(Op::Get, key, self.http.get(url)).await {
                Ok(response) => response,
                // Replaced or deleted since the metadata read: start over.
                Err(err) if err.is_not_found() => continue,
                Err(err) => return Err(err),
            };
            let data = self.body(Op::Get, key, response).await?;
            let integrity = |why: String| Error::new(Op::Get, key, ErrorKind::Integrity, why);
            if data.len() as u64 != attributes.size {
                return Err(integrity(format!(
                    "read {} bytes of {}",
                    data.len(),
                    attributes.size
                )));
            }
            let want = crc.ok_or_else(|| integrity("the store gave no CRC32C".into()))?;
            let got = crc32c::crc32c(&data);
            if got != want {
                return Err(integrity(format!(
                    "CRC32C of the bytes read is {got:08x}, the store says {want:08x}"
                )));
            }
            return Ok(Object { data, attributes });
        }
        Err(Error::new(
            Op::Get,
            key,
            ErrorKind::Unavailable,
            format!("the object changed during each of {GET_ATTEMPTS} reads"),
        ))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let op = Op::GetRange;
        validate_key(op, key)?;
        validate_range(op, key, &range)?;
        if range.is_empty() {
            // HTTP cannot ask for zero bytes; the size alone decides.
            let (attributes, _) = self.metadata(op, key).await?;
            if range.start > attributes.size {
                return Err(Error::new(
                    op,
                    key,
                    ErrorKind::Precondition,
                    format!(
                        "range starts at {} past the end ({} bytes)",
                        range.start, attributes.size
                    ),
                ));
            }
            return Ok(Bytes::new());
        }
        let mut url = self.object_url(op, key)?;
        url.query_pairs_mut().append_pair("alt", "media");
        let request = self
            .http
            .get(url)
            .header(RANGE, format!("bytes={}-{}", range.start, range.end - 1));
        let response = self.send(op, key, request).await?;
        let status = response.status();
        let content_range = response
            .headers()
            .get(CONTENT_RANGE)
            .map(|v| v.to_str().unwrap_or("").to_owned());
        let data = self.body(op, key, response).await?;
        match status {
            StatusCode::PARTIAL_CONTENT => {
                range::check_partial(key, &range, content_range.as_deref(), data.len() as u64)?;
                Ok(data)
            }
            // The whole object (a store may ignore Range): cut it here.
            StatusCode::OK => cut_range(key, &data, range),
            other => Err(Error::new(
                op,
                key,
                ErrorKind::Integrity,
                format!("range read answered {other}"),
            )),
        }
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        validate_key(Op::Head, key)?;
        Ok(self.metadata(Op::Head, key).await?.0)
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        validate_key(Op::Replace, key)?;
        let generation = parse_generation(Op::Replace, key, generation)?;
        self.upload(Op::Replace, key, generation, data).await
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        validate_key(Op::Delete, key)?;
        let generation = parse_generation(Op::Delete, key, generation)?;
        let mut url = self.object_url(Op::Delete, key)?;
        url.query_pairs_mut()
            .append_pair("ifGenerationMatch", &generation.to_string());
        self.send(Op::Delete, key, self.http.delete(url)).await?;
        Ok(())
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        let request = ListRequest::parse(prefix, start_after, cursor)?;
        let after = request.effective_after().to_owned();
        // Below the prefix every listed key is already after the position.
        let start_offset = (after.as_str() >= prefix && !after.is_empty()).then_some(&after);
        let mut found = Vec::new();
        let mut first_item = true;
        let mut page_token: Option<String> = None;
        let mut empty_pages = 0;
        loop {
            let mut url = self.url(
                Op::List,
                prefix,
                &format!("{}/storage/v1/b/{}/o", self.endpoint, segment(&self.bucket)),
            )?;
            {
                let mut query = url.query_pairs_mut();
                if !prefix.is_empty() {
                    query.append_pair("prefix", prefix);
                }
                if let Some(offset) = start_offset {
                    query.append_pair("startOffset", offset);
                }
                query
                    .append_pair("maxResults", &MAX_LIST_PAGE.to_string())
                    .append_pair(
                        "fields",
                        "items(name,size,generation,updated),nextPageToken",
                    );
                if let Some(token) = &page_token {
                    query.append_pair("pageToken", token);
                }
            }
            let response = self.send(Op::List, prefix, self.http.get(url)).await?;
            let listing: ObjectList = self.json(Op::List, prefix, response).await?;
            for item in listing.items {
                // startOffset is inclusive; the position itself is not part of the page.
                let skip = first_item && item.name == after;
                first_item = false;
                if !skip {
                    found.push(attributes(Op::List, prefix, item)?);
                }
            }
            page_token = listing.next_page_token.filter(|token| !token.is_empty());
            if page_token.is_none() || !found.is_empty() {
                break;
            }
            // Only a page of nothing (or of the position alone) with a token gets here.
            empty_pages += 1;
            if empty_pages >= LIST_EMPTY_PAGE_LIMIT {
                return Err(Error::new(
                    Op::List,
                    prefix,
                    ErrorKind::Unavailable,
                    format!("the store returned {empty_pages} empty pages in a row"),
                ));
            }
        }
        let more = page_token.is_some();
        request.page(found, more)
    }
}

/// Maps a transport failure: nothing was sent when the connection could not be opened;
/// otherwise a mutation may have applied.
fn transport_error(op: Op, key: &str, err: reqwest::Error) -> Error {
    let kind = if op.is_mutation() && !err.is_connect() {
        ErrorKind::Ambiguous
    } else {
        ErrorKind::Unavailable
    };
    let what = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    Error::new(op, key, kind, format!("{what}: {err}")).with_source(err)
}

/// The kind for a non-success status (see the module docs' table).
fn status_kind(op: Op, status: StatusCode) -> ErrorKind {
    match status.as_u16() {
        404 => match op {
            Op::Get | Op::GetRange | Op::Head => ErrorKind::NotFound,
            Op::Replace | Op::Delete => ErrorKind::Precondition,
            _ => ErrorKind::Unavailable,
        },
        // A mutation refused as invalid did not apply, and no condition failed: a create
        // answered so must never pass for "the key exists".
        400 if op.is_mutation() => ErrorKind::Integrity,
        400 | 412 | 416 => ErrorKind::Precondition,
        429 => ErrorKind::Throttled,
        408 | 500..=599 if op.is_mutation() => ErrorKind::Ambiguous,
        _ => ErrorKind::Unavailable,
    }
}

async fn status_error(op: Op, key: &str, response: Response) -> Error {
    let status = response.status();
    let body = response.bytes().await.unwrap_or_default();
    Error::new(
        op,
        key,
        status_kind(op, status),
        format!("HTTP {status}: {}", error_message(&body)),
    )
}

/// The message of a GCS error answer, or the start of whatever else came back.
fn error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(parsed) => parsed.error.message,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

/// A generation the store could have issued: a positive decimal integer without leading zeros.
fn parse_generation(op: Op, key: &str, generation: &Generation) -> Result<u64> {
    let text = generation.as_str();
    let valid =
        !text.is_empty() && !text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<i64>() {
        Ok(value) if valid && value > 0 => Ok(value as u64),
        _ => Err(Error::new(
            op,
            key,
            ErrorKind::Precondition,
            format!("{text:?} is not a GCS generation"),
        )),
    }
}

fn attributes(op: Op, key: &str, resource: ObjectResource) -> Result<Attributes> {
    let integrity = |why: String| Error::new(op, key, ErrorKind::Integrity, why);
    let size = resource
        .size
        .parse::<u64>()
        .map_err(|_| integrity(format!("{:?}: bad size {:?}", resource.name, resource.size)))?;
    let generation = Generation::new(resource.generation);
    parse_generation(op, key, &generation)
        .map_err(|_| integrity(format!("{:?}: bad generation {generation}", resource.name)))?;
    let modified = time::OffsetDateTime::parse(
        &resource.updated,
        &time::format_description::well_known::Rfc3339,
    )
    .map(SystemTime::from)
    .map_err(|_| {
        integrity(format!(
            "{:?}: bad update time {:?}",
            resource.name, resource.updated
        ))
    })?;
    Ok(Attributes {
        key: resource.name,
        size,
        generation,
        modified,
    })
}

fn expect_name(op: Op, key: &str, attributes: &Attributes) -> Result<()> {
    if attributes.key == key {
        Ok(())
    } else {
        Err(Error::new(
            op,
            key,
            ErrorKind::Integrity,
            format!("the store answered for {:?}", attributes.key),
        ))
    }
}

fn encode_crc32c(crc: u32) -> String {
    STANDARD.encode(crc.to_be_bytes())
}

fn decode_crc32c(op: Op, key: &str, text: &str) -> Result<u32> {
    let raw = STANDARD.decode(text).ok();
    match raw.as_deref() {
        Some(&[a, b, c, d]) => Ok(u32::from_be_bytes([a, b, c, d])),
        _ => Err(Error::new(
            op,
            key,
            ErrorKind::Integrity,
            format!("unreadable CRC32C {text:?}"),
        )),
    }
}

fn segment(text: &str) -> String {
    utf8_percent_encode(text, PATH_SEGMENT).to_string()
}

fn is_loopback(url: &Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// A `multipart/related` body of JSON metadata then the bytes, and its content type. The
/// boundary is derived from the bytes and checked to be absent from them.
fn multipart_related(metadata: &str, data: &[u8]) -> (String, Bytes) {
    let digest = blake3::hash(data).to_hex();
    let mut boundary = format!("quire-{}", &digest[..32]);
    let mut extra = 0u32;
    while contains(data, boundary.as_bytes()) || metadata.contains(&boundary) {
        extra += 1;
        boundary = format!("quire-{}-{extra}", &digest[..32]);
    }
    let mut body = Vec::with_capacity(data.len() + metadata.len() + 4 * boundary.len() + 128);
    body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    body.extend_from_slice(b"Content-Type: application/json; charset=UTF-8\r\n\r\n");
    body.extend_from_slice(metadata.as_bytes());
    body.extend_from_slice(format!("\r\n--{boundary}\r\n").as_bytes());
    body.extend_from_slice(b"Content-Type: application/octet-stream\r\n\r\n");
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (
        format!("multipart/related; boundary={boundary}"),
        Bytes::from(body),
    )
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(name: &str, size: &str, generation: &str, updated: &str) -> ObjectResource {
        ObjectResource {
            name: name.into(),
            size: size.into(),
            generation: generation.into(),
            updated: updated.into(),
            crc32c: None,
        }
    }

    #[test]
    fn generations_must_be_positive_decimal_integers() {
        for good in ["1", "1795965812945294", "9223372036854775807"] {
            let parsed = parse_generation(Op::Replace, "k", &Generation::new(good)).unwrap();
            assert_eq!(parsed.to_string(), good);
        }
        for bad in [
            "",
            "0",
            "-1",
            "+5",
            "007",
            "bogus",
            "1.5",
            " 1",
            "9223372036854775808",
        ] {
            let err = parse_generation(Op::Delete, "k", &Generation::new(bad)).unwrap_err();
            assert!(err.is_precondition(), "{bad:?}: {err}");
            assert_eq!((err.op(), err.key()), (Op::Delete, "k"));
        }
    }

    #[test]
    fn resources_become_attributes() {
        let attrs = attributes(
            Op::Head,
            "a/b",
            resource(
                "a/b",
                "11",
                "1795965812945294",
                "2026-11-29T15:23:32.945287Z",
            ),
        )
        .unwrap();
        assert_eq!(attrs.size, 11);
        assert_eq!(attrs.generation, Generation::new("1795965812945294"));
        let since_epoch = attrs
            .modified
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        assert_eq!(since_epoch.as_micros(), 1_795_965_812_945_287);
        for bad in [
            resource("k", "-1", "1", "2026-11-29T15:23:32Z"),
            resource("k", "1", "0", "2026-11-29T15:23:32Z"),
            resource("k", "1", "1", "yesterday"),
        ] {
            let err = attributes(Op::Head, "k", bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
        }
    }

    #[test]
    fn crc32c_is_castagnoli_in_big_endian_base64() {
        // The value GCS reports for "hello world".
        assert_eq!(encode_crc32c(crc32c::crc32c(b"hello world")), "yZRlqg==");
        assert_eq!(
            decode_crc32c(Op::Get, "k", "yZRlqg==").unwrap(),
            crc32c::crc32c(b"hello world")
        );
        for bad in ["", "not base64!", "AAAAAAA="] {
            let err = decode_crc32c(Op::Get, "k", bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Integrity);
        }
    }

    #[test]
    fn multipart_body_frames_metadata_and_bytes() {
        let (content_type, body) = multipart_related(r#"{"name":"k"}"#, b"payload");
        let boundary = content_type
            .strip_prefix("multipart/related; boundary=")
            .unwrap();
        let want = format!(
            "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{{\"name\":\"k\"}}\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\npayload\r\n--{boundary}--\r\n"
        );
        assert_eq!(body, want.as_bytes());
    }

    #[test]
    fn multipart_boundary_never_occurs_in_the_bytes() {
        // Bytes that contain the boundary the first attempt would pick.
        let (first_type, _) = multipart_related("{}", b"x");
        let first = first_type
            .strip_prefix("multipart/related; boundary=")
            .unwrap();
        let mut data = b"x".to_vec();
        data.extend_from_slice(first.as_bytes());
        let (content_type, _) = multipart_related("{}", &data);
        let boundary = content_type
            .strip_prefix("multipart/related; boundary=")
            .unwrap();
        assert!(!contains(&data, boundary.as_bytes()));
    }

    #[test]
    fn statuses_map_by_operation() {
        let cases = [
            (Op::Get, 404, ErrorKind::NotFound),
            (Op::Head, 404, ErrorKind::NotFound),
            (Op::Replace, 404, ErrorKind::Precondition),
            (Op::Delete, 404, ErrorKind::Precondition),
            (Op::Create, 404, ErrorKind::Unavailable),
            (Op::List, 404, ErrorKind::Unavailable),
            (Op::Create, 412, ErrorKind::Precondition),
            (Op::List, 400, ErrorKind::Precondition),
            (Op::Get, 400, ErrorKind::Precondition),
            (Op::Create, 400, ErrorKind::Integrity),
            (Op::Replace, 400, ErrorKind::Integrity),
            (Op::GetRange, 416, ErrorKind::Precondition),
            (Op::Create, 429, ErrorKind::Throttled),
            (Op::Get, 429, ErrorKind::Throttled),
            (Op::Get, 503, ErrorKind::Unavailable),
            (Op::Get, 408, ErrorKind::Unavailable),
            (Op::Create, 503, ErrorKind::Ambiguous),
            (Op::Replace, 500, ErrorKind::Ambiguous),
            (Op::Delete, 408, ErrorKind::Ambiguous),
            (Op::Create, 403, ErrorKind::Unavailable),
            (Op::Get, 401, ErrorKind::Unavailable),
        ];
        for (op, status, kind) in cases {
            assert_eq!(
                status_kind(op, StatusCode::from_u16(status).unwrap()),
                kind,
                "{op} {status}"
            );
        }
    }

    #[test]
    fn object_names_are_escaped_as_one_path_segment() {
        assert_eq!(segment("a/b c?d#e%f+g"), "a%2Fb%20c%3Fd%23e%25f%2Bg");
        assert_eq!(segment("log/0001.x~y_z-w"), "log%2F0001.x~y_z-w");
        assert_eq!(segment("é"), "%C3%A9");
    }

    #[test]
    fn setup_refuses_bad_configuration() {
        let auth = GcsAuth::StaticToken("t".into());
        assert!(GcsStore::new(GcsConfig::new("", auth.clone())).is_err());
        assert!(GcsStore::new(GcsConfig::new("b", auth).with_endpoint("not a url")).is_err());
    }
}
