//! The S3 driver: [`S3Store`] speaks the S3 API (AWS or any compatible server that enforces
//! conditional writes) through `aws-sdk-s3`.
//!
//! # Requests
//!
//! | operation | request |
//! | --- | --- |
//! | `create` | `PutObject` with `If-None-Match: *` |
//! | `replace` | `PutObject` with `If-Match: <etag>` |
//! | `delete` | `DeleteObject` with `If-Match: <etag>` |
//! | `get`, `get_range`, `head` | `GetObject` (with `Range` for a range), `HeadObject` |
//! | `list` | `ListObjectsV2` with the prefix, `StartAfter` = the page's position, `MaxKeys` = [`MAX_LIST_PAGE`] |
//!
//! A page the server lists out of byte order is refused as [`ErrorKind::Integrity`] rather
//! than passed on: SeaweedFS, for one, lists per path component, so `a/b` comes before `a-b`.
//! Fixed-width key names (as the log's) never meet that.
//!
//! S3's `PutObject` answer carries no modification time, so a successful `create` or `replace`
//! reports the answer's `Date`: the bucket's clock as it answered, at or just after the
//! `Last-Modified` that `head`, `get` and `list` will show (the same second or the next for a
//! small object, within [`MUTATION_DATE_SLACK`](crate::MUTATION_DATE_SLACK)), never before it. That keeps a mutation to one request (reading the attributes
//! back cost a second round trip on every slot create) and keeps age fences on the safe side:
//! an object reads as no older than it is. An answer without a date reports the local clock.
//! Times are cut to whole seconds, as S3's headers carry them.
//!
//! # Generations and the ETag caveat
//!
//! A [`Generation`] is the object's ETag, quotes included (a server that omits them gets them
//! added, so every operation spells one ETag alike). A single-part upload's ETag is the MD5 of
//! its bytes: **a key deleted and re-created with identical bytes gets its old generation
//! back**, and a replace with identical bytes keeps it, so a delete or replace aimed at the
//! old incarnation succeeds against the new one. The store says so
//! ([`BlobStore::unique_generations`] is false), and callers that delete objects which may
//! come back with identical bytes must not rely on the generation alone (see the crate docs). A generation that cannot be an ETag (empty, or holding characters an
//! entity tag cannot hold) is refused as [`ErrorKind::Precondition`] without a request; a
//! well-formed but stale one goes to the server and meets its 412.
//!
//! # Status mapping
//!
//! | answer | reads (`get`, `get_range`, `head`, `list`) | `create` | `replace`, `delete` |
//! | --- | --- | --- | --- |
//! | 404 / `NoSuchKey` | [`NotFound`](ErrorKind::NotFound) | [`Unavailable`](ErrorKind::Unavailable) | [`Precondition`](ErrorKind::Precondition) (AWS's answer for `If-Match` on a missing key) |
//! | 412 `PreconditionFailed` | [`Precondition`](ErrorKind::Precondition) | [`Precondition`](ErrorKind::Precondition) | [`Precondition`](ErrorKind::Precondition) (also SeaweedFS's answer for a missing key) |
//! | 416 `InvalidRange` | [`Precondition`](ErrorKind::Precondition) | — | — |
//! | 409 (`ConditionalRequestConflict`: a concurrent conditional write won the moment) | [`Throttled`](ErrorKind::Throttled) | [`Throttled`](ErrorKind::Throttled) | [`Throttled`](ErrorKind::Throttled) |
//! | 429, 503 `SlowDown` | [`Throttled`](ErrorKind::Throttled) | [`Throttled`](ErrorKind::Throttled) | [`Throttled`](ErrorKind::Throttled) |
//! | `NoSuchBucket`, other 4xx, 501 | [`Unavailable`](ErrorKind::Unavailable) | [`Unavailable`](ErrorKind::Unavailable) | [`Unavailable`](ErrorKind::Unavailable) |
//! | other 5xx, timeout, connection lost, unreadable answer | [`Unavailable`](ErrorKind::Unavailable) | [`Ambiguous`](ErrorKind::Ambiguous) | [`Ambiguous`](ErrorKind::Ambiguous) |
//! | connection refused, request not built | [`Unavailable`](ErrorKind::Unavailable) | [`Unavailable`](ErrorKind::Unavailable) | [`Unavailable`](ErrorKind::Unavailable) |
//!
//! 4xx answers are refusals, so a refused mutation did not apply. A 5xx, a timeout or a lost
//! connection after the request left may hide a write that landed, so mutations report those as
//! ambiguous. For the same reason mutations go through a client whose SDK retries are off: a
//! retried conditional `PUT` whose first attempt landed would meet its own write and report a
//! clean loss. Reads retry inside the SDK ([`S3Config::read_attempts`]).
//!
//! # Timeouts
//!
//! [`S3Timeouts`] defaults to at least 10 s everywhere: servers that serialise conditional
//! writes (SeaweedFS) can hold a losing racer for seconds before answering 412.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    SharedHttpClient,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::date_time::Format as DateFormat;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use bytes::Bytes;

use crate::BlobStore;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::list::{ListRequest, MAX_LIST_PAGE};
use crate::range;
use crate::types::{
    Attributes, Generation, ListPage, Object, cut_range, validate_key, validate_range,
};

/// Client-side time limits. Keep them at 10 s or more (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct S3Timeouts {
    /// Establishing a connection.
    pub connect: Duration,
    /// One attempt, from sending the request to the end of the answer.
    pub attempt: Duration,
    /// A whole operation, across the SDK's retries of a read.
    pub operation: Duration,
}

impl Default for S3Timeouts {
    fn default() -> Self {
        S3Timeouts {
            connect: Duration::from_secs(10),
            attempt: Duration::from_secs(30),
            operation: Duration::from_secs(120),
        }
    }
}

/// Where and how [`S3Store`] reaches its bucket. Keys are used as given: there is no prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Config {
    pub bucket: String,
    /// A custom endpoint (`http://127.0.0.1:8333`); `None` for AWS itself.
    pub endpoint: Option<String>,
    /// The signing region; `None` takes it from the standard AWS configuration chain.
    pub region: Option<String>,
    /// Address the bucket in the path (`endpoint/bucket/key`) rather than the host name; most
    /// S3-compatible servers need it.
    pub force_path_style: bool,
    pub timeouts: S3Timeouts,
    /// How many times the SDK tries a read (1 = no retry). Mutations are tried exactly once.
    pub read_attempts: u32,
}

impl S3Config {
    /// A configuration for `bucket` on AWS with default timeouts and 3 read attempts.
    pub fn new(bucket: impl Into<String>) -> Self {
        S3Config {
            bucket: bucket.into(),
            endpoint: None,
            region: None,
            force_path_style: false,
            timeouts: S3Timeouts::default(),
            read_attempts: 3,
        }
    }
}

/// Why an [`S3Store`] could not be set up, or its bucket not created.
#[derive(Debug, thiserror::Error)]
#[error("s3 bucket {bucket:?}: {detail}")]
pub struct S3SetupError {
    bucket: String,
    detail: String,
}

/// A [`BlobStore`] over one S3 bucket. See the module docs for the request and error mapping.
#[derive(Clone)]
pub struct S3Store {
    bucket: String,
    region: String,
    /// SDK retries on: reads are safe to repeat.
    reads: Client,
    /// SDK retries off: a repeated conditional write could meet itself.
    mutations: Client,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// The HTTP client: rustls over ring, so no second crypto library is built.
fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

impl S3Store {
    /// Connects with credentials (and, when [`S3Config::region`] is `None`, the region) from the
    /// standard AWS chain: environment, profile files, SSO, web identity, container and
    /// instance metadata.
    pub async fn from_env(config: S3Config) -> Result<Self, S3SetupError> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http_client());
        if let Some(region) = &config.region {
            loader = loader.region(Region::new(region.clone()));
        }
        let shared = loader.load().await;
        let region = shared.region().map(|r| r.to_string());
        Self::build(aws_sdk_s3::config::Builder::from(&shared), config, region)
    }

    /// Connects with fixed credentials and touches no other configuration source.
    /// [`S3Config::region`] must be set.
    pub fn with_static_credentials(
        config: S3Config,
        access_key_id: &str,
        secret_access_key: &str,
    ) -> Result<Self, S3SetupError> {
        let credentials = Credentials::new(access_key_id, secret_access_key, None, None, "static");
        let builder = aws_sdk_s3::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .http_client(http_client())
            .credentials_provider(credentials);
        let region = config.region.clone();
        Self::build(builder, config, region)
    }

    fn build(
        mut builder: aws_sdk_s3::config::Builder,
        config: S3Config,
        region: Option<String>,
    ) -> Result<Self, S3SetupError> {
        let setup_error = |detail: &str| S3SetupError {
            bucket: config.bucket.clone(),
            detail: detail.to_owned(),
        };
        if config.bucket.is_empty() {
            return Err(setup_error("no bucket named"));
        }
        let region =
            region.ok_or_else(|| setup_error("no region: set S3Config::region or AWS_REGION"))?;
        builder = builder.region(Region::new(region.clone()));
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(config.timeouts.connect)
            .operation_attempt_timeout(config.timeouts.attempt)
            .operation_timeout(config.timeouts.operation)
            .build();
        let builder = builder
            .force_path_style(config.force_path_style)
            .timeout_config(timeouts)
            // Checksum headers and trailers only where S3 demands them: many compatible servers
            // reject the newer ones, and SigV4 already covers the payload.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        let reads = builder
            .clone()
            .retry_config(RetryConfig::standard().with_max_attempts(config.read_attempts.max(1)))
            .build();
        let mutations = builder.retry_config(RetryConfig::disabled()).build();
        Ok(S3Store {
            bucket: config.bucket,
            region,
            reads: Client::from_conf(reads),
            mutations: Client::from_conf(mutations),
        })
    }

    /// The bucket this store reads and writes.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Creates the bucket, succeeding when it already exists (for tests and tools).
    pub async fn ensure_bucket(&self) -> Result<(), S3SetupError> {
        let mut request = self.mutations.create_bucket().bucket(&self.bucket);
        // us-east-1 is the one region that refuses an explicit location constraint.
        if self.region != "us-east-1" {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(self.region.as_str()))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(err)
                if matches!(
                    err.code(),
                    Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")
                ) =>
            {
                Ok(())
            }
            Err(err) => Err(S3SetupError {
                bucket: self.bucket.clone(),
                detail: format!("creating the bucket: {}", describe(&err)),
            }),
        }
    }

    async fn put(
        &self,
        op: Op,
        key: &str,
        condition: Condition<'_>,
        data: Bytes,
    ) -> Result<Attributes> {
        let size = data.len() as u64;
        let answered_at = AnswerDate::default();
        let request = self
            .mutations
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_length(size as i64)
            .body(ByteStream::from(data));
        let request = match condition {
            Condition::Absent => request.if_none_match("*"),
            Condition::Matches(etag) => request.if_match(etag),
        };
        let output = request
            .customize()
            .interceptor(answered_at.clone())
            .send()
            .await
            .map_err(|e| sdk_error(op, key, e))?;
        let etag = output.e_tag().filter(|e| !e.is_empty()).ok_or_else(|| {
            // The write landed, but without its ETag nobody can tell it from a later one.
            Error::new(
                op,
                key,
                ErrorKind::Ambiguous,
                "the store accepted the write but returned no ETag",
            )
        })?;
        Ok(Attributes {
            key: key.to_owned(),
            size,
            generation: Generation::new(quoted_etag(etag)),
            modified: whole_seconds(answered_at.time()),
        })
    }

    async fn head_attributes(&self, op: Op, key: &str) -> Result<Attributes> {
        let head = self
            .reads
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk_error(op, key, e))?;
        attributes(
            op,
            key,
            head.e_tag(),
            head.content_length(),
            head.last_modified(),
        )
    }
}

/// The `Date` of a mutation's answer, kept by an interceptor on that one request: the time
/// the bucket's clock showed as it answered, at or a moment after the object's own
/// modification time, so an age fence reading it errs toward the object being younger.
#[derive(Clone, Debug, Default)]
struct AnswerDate(Arc<Mutex<Option<SystemTime>>>);

impl AnswerDate {
    /// The answer's date, or the local clock when the server sent none that parses (the write
    /// succeeded either way).
    #[allow(
        clippy::disallowed_methods,
        reason = "an answer without a date degrades to the local clock"
    )]
    fn time(&self) -> SystemTime {
        let date = *self.0.lock().unwrap_or_else(PoisonError::into_inner);
        date.unwrap_or_else(SystemTime::now)
    }
}

impl Intercept for AnswerDate {
    fn name(&self) -> &'static str {
        "AnswerDate"
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> std::result::Result<(), BoxError> {
        let date = context
            .response()
            .headers()
            .get("date")
            .and_then(|d| aws_smithy_types::DateTime::from_str(d, DateFormat::HttpDate).ok())
            .and_then(|t| SystemTime::try_from(t).ok());
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = date;
        Ok(())
    }
}

enum Condition<'a> {
    Absent,
    Matches(&'a str),
}

#[async_trait]
impl BlobStore for S3Store {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        validate_key(Op::Create, key)?;
        self.put(Op::Create, key, Condition::Absent, data).await
    }

    async fn get(&self, key: &str) -> Result<Object> {
        validate_key(Op::Get, key)?;
        let output = self
            .reads
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk_error(Op::Get, key, e))?;
        let attrs = attributes(
            Op::Get,
            key,
            output.e_tag(),
            output.content_length(),
            output.last_modified(),
        )?;
        let data = read_body(Op::Get, key, output.body).await?;
        if data.len() as u64 != attrs.size {
            return Err(Error::new(
                Op::Get,
                key,
                ErrorKind::Integrity,
                format!(
                    "read {} bytes of an object of {} bytes",
                    data.len(),
                    attrs.size
                ),
            ));
        }
        Ok(Object {
            data,
            attributes: attrs,
        })
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        validate_key(Op::GetRange, key)?;
        validate_range(Op::GetRange, key, &range)?;
        if range.is_empty() {
            // HTTP cannot ask for zero bytes; the size alone decides.
            let attrs = self.head_attributes(Op::GetRange, key).await?;
            check_empty_range(key, &range, attrs.size)?;
            return Ok(Bytes::new());
        }
        let output = self
            .reads
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await
            .map_err(|e| sdk_error(Op::GetRange, key, e))?;
        let content_range = output.content_range().map(str::to_owned);
        let data = read_body(Op::GetRange, key, output.body).await?;
        let Some(content_range) = content_range else {
            // The server ignored the range and sent the whole object.
            return cut_range(key, &data, range);
        };
        range::check_partial(key, &range, Some(&content_range), data.len() as u64)?;
        Ok(data)
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        validate_key(Op::Head, key)?;
        self.head_attributes(Op::Head, key).await
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        validate_key(Op::Replace, key)?;
        let etag = condition_etag(Op::Replace, key, generation)?;
        self.put(Op::Replace, key, Condition::Matches(&etag), data)
            .await
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        validate_key(Op::Delete, key)?;
        let etag = condition_etag(Op::Delete, key, generation)?;
        self.mutations
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .if_match(etag)
            .send()
            .await
            .map_err(|e| sdk_error(Op::Delete, key, e))?;
        Ok(())
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        let request = ListRequest::parse(prefix, start_after, cursor)?;
        let mut call = self
            .reads
            .list_objects_v2()
            .bucket(&self.bucket)
            .max_keys(MAX_LIST_PAGE as i32);
        if !prefix.is_empty() {
            call = call.prefix(prefix);
        }
        if !request.effective_after().is_empty() {
            call = call.start_after(request.effective_after());
        }
        let output = call
            .send()
            .await
            .map_err(|e| sdk_error(Op::List, prefix, e))?;
        let mut objects = Vec::with_capacity(output.contents().len());
        for object in output.contents() {
            let key = object.key().ok_or_else(|| {
                Error::new(
                    Op::List,
                    prefix,
                    ErrorKind::Integrity,
                    "listed an object without a key",
                )
            })?;
            let attrs = attributes(
                Op::List,
                key,
                object.e_tag(),
                object.size(),
                object.last_modified(),
            )
            .map_err(|e| Error::new(Op::List, prefix, e.kind(), e.to_string()))?;
            objects.push(attrs);
        }
        let more = output.is_truncated().unwrap_or(false);
        if more && objects.is_empty() {
            return Err(Error::new(
                Op::List,
                prefix,
                ErrorKind::Integrity,
                "the store said more keys follow but listed none",
            ));
        }
        request.page(objects, more)
    }

    /// An ETag is the MD5 of the bytes: an identical rewrite keeps it.
    fn unique_generations(&self) -> bool {
        false
    }
}

fn check_empty_range(key: &str, range: &Range<u64>, size: u64) -> Result<()> {
    if range.start > size {
        return Err(Error::new(
            Op::GetRange,
            key,
            ErrorKind::Precondition,
            format!(
                "range starts at {} past the end ({size} bytes)",
                range.start
            ),
        ));
    }
    Ok(())
}

async fn read_body(op: Op, key: &str, body: ByteStream) -> Result<Bytes> {
    body.collect()
        .await
        .map(|aggregated| aggregated.into_bytes())
        .map_err(|e| {
            Error::new(
                op,
                key,
                ErrorKind::Unavailable,
                format!("reading the body: {e}"),
            )
            .with_source(e)
        })
}

fn attributes(
    op: Op,
    key: &str,
    etag: Option<&str>,
    size: Option<i64>,
    modified: Option<&aws_smithy_types::DateTime>,
) -> Result<Attributes> {
    let integrity = |what: &str| Error::new(op, key, ErrorKind::Integrity, what.to_owned());
    let etag = etag
        .filter(|e| !e.is_empty())
        .ok_or_else(|| integrity("the store returned no ETag"))?;
    let size = size
        .and_then(|s| u64::try_from(s).ok())
        .ok_or_else(|| integrity("the store returned no size"))?;
    let modified = modified
        .and_then(|t| SystemTime::try_from(*t).ok())
        .ok_or_else(|| integrity("the store returned no modification time"))?;
    Ok(Attributes {
        key: key.to_owned(),
        size,
        generation: Generation::new(quoted_etag(etag)),
        modified: whole_seconds(modified),
    })
}

/// S3 carries times in whole seconds in headers but sometimes with milliseconds in listings;
/// cutting to seconds makes every operation report one time.
fn whole_seconds(time: SystemTime) -> SystemTime {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => UNIX_EPOCH + Duration::from_secs(since.as_secs()),
        Err(_) => time,
    }
}

/// An ETag in its quoted form, whichever form the server sent.
fn quoted_etag(etag: &str) -> String {
    if etag.len() >= 2 && etag.starts_with('"') && etag.ends_with('"') {
        etag.to_owned()
    } else {
        format!("\"{etag}\"")
    }
}

/// The `If-Match` value for `generation`, or a precondition error when no ETag could match.
fn condition_etag(op: Op, key: &str, generation: &Generation) -> Result<String> {
    let quoted = quoted_etag(generation.as_str());
    let inner = &quoted[1..quoted.len() - 1];
    // RFC 9110 entity-tag characters: visible ASCII except the double quote.
    let well_formed = !inner.is_empty()
        && inner
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b));
    if !well_formed {
        return Err(Error::new(
            op,
            key,
            ErrorKind::Precondition,
            format!("generation {generation:?} cannot be an S3 ETag"),
        ));
    }
    Ok(quoted)
}

/// What became of a request that failed, as far as the client can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Failure {
    /// The request never reached the store (refused connection, request not built).
    NotSent,
    /// The request may have reached the store, and no answer came back (timeout, connection
    /// lost, dispatch failure).
    NoAnswer,
    /// The store answered with this status (and error code, when the body had one).
    Answered { status: u16, code: Option<String> },
}

/// The error kind for `op` failing as `failure`. Pure: the whole status mapping lives here.
fn classify(op: Op, failure: &Failure) -> ErrorKind {
    let unsure = if op.is_mutation() {
        ErrorKind::Ambiguous
    } else {
        ErrorKind::Unavailable
    };
    let (status, code) = match failure {
        Failure::NotSent => return ErrorKind::Unavailable,
        Failure::NoAnswer => return unsure,
        Failure::Answered { status, code } => (*status, code.as_deref()),
    };
    if matches!(
        code,
        Some("SlowDown" | "Throttling" | "ThrottlingException" | "RequestLimitExceeded")
    ) {
        return ErrorKind::Throttled;
    }
    if code == Some("NoSuchBucket") {
        return ErrorKind::Unavailable;
    }
    match status {
        404 => match op {
            Op::Replace | Op::Delete => ErrorKind::Precondition,
            Op::Get | Op::GetRange | Op::Head => ErrorKind::NotFound,
            _ => ErrorKind::Unavailable,
        },
        412 => ErrorKind::Precondition,
        416 if op == Op::GetRange => ErrorKind::Precondition,
        // A conflicting conditional write was in flight; ours was refused and may be retried.
        409 | 429 => ErrorKind::Throttled,
        // 501 is a definite refusal (an unsupported request), not a failure midway.
        400..=499 | 501 => ErrorKind::Unavailable,
        // A 2xx or 3xx that could not be read, or a 5xx: the write may have landed.
        _ => unsure,
    }
}

/// How an SDK error failed, for [`classify`].
fn failure_of<E, R>(err: &SdkError<E, R>) -> Failure
where
    E: ProvideErrorMetadata,
    R: HasStatus,
{
    if let Some(status) = err.raw_response().map(HasStatus::status) {
        return Failure::Answered {
            status,
            code: err.code().map(str::to_owned),
        };
    }
    match err {
        SdkError::ConstructionFailure(_) => Failure::NotSent,
        SdkError::DispatchFailure(dispatch)
            if dispatch
                .as_connector_error()
                .is_some_and(|e| caused_by_refused_connection(e)) =>
        {
            Failure::NotSent
        }
        _ => Failure::NoAnswer,
    }
}

/// Whether an error chain holds a refused TCP connection: the one dispatch failure that proves
/// the request never left.
fn caused_by_refused_connection(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        current = e.source();
    }
    false
}

trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_smithy_runtime_api::http::Response {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

fn describe<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: HasStatus + fmt::Debug,
{
    let mut out = match err.raw_response() {
        Some(raw) => format!("status {}", raw.status()),
        None => match err {
            SdkError::ConstructionFailure(_) => "request not built".to_owned(),
            SdkError::TimeoutError(_) => "timed out".to_owned(),
            SdkError::DispatchFailure(_) => "request failed in transport".to_owned(),
            _ => "failed".to_owned(),
        },
    };
    if let Some(code) = err.code() {
        out.push_str(&format!(" {code}"));
    }
    if let Some(message) = err.message() {
        out.push_str(&format!(": {message}"));
    }
    // The SDK's own messages sit in the source chain; the innermost is the most telling.
    let mut source = std::error::Error::source(err);
    let mut innermost = None;
    while let Some(e) = source {
        innermost = Some(e.to_string());
        source = e.source();
    }
    if let Some(cause) = innermost {
        out.push_str(&format!(" ({cause})"));
    }
    out
}

fn sdk_error<E, R>(op: Op, key: &str, err: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: HasStatus + fmt::Debug + Send + Sync + 'static,
{
    let kind = classify(op, &failure_of(&err));
    Error::new(op, key, kind, describe(&err)).with_source(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16, code: Option<&str>) -> Failure {
        Failure::Answered {
            status,
            code: code.map(str::to_owned),
        }
    }

    const READS: [Op; 4] = [Op::Get, Op::GetRange, Op::Head, Op::List];
    const MUTATIONS: [Op; 3] = [Op::Create, Op::Replace, Op::Delete];

    #[test]
    fn missing_keys_are_not_found_on_reads_and_lost_conditions_on_writes() {
        for op in [Op::Get, Op::GetRange, Op::Head] {
            assert_eq!(
                classify(op, &answered(404, Some("NoSuchKey"))),
                ErrorKind::NotFound
            );
            assert_eq!(classify(op, &answered(404, None)), ErrorKind::NotFound);
        }
        for op in [Op::Replace, Op::Delete] {
            // AWS answers 404 to If-Match on a missing key, SeaweedFS 412.
            assert_eq!(
                classify(op, &answered(404, Some("NoSuchKey"))),
                ErrorKind::Precondition
            );
            assert_eq!(
                classify(op, &answered(412, Some("PreconditionFailed"))),
                ErrorKind::Precondition
            );
        }
        assert_eq!(
            classify(Op::Create, &answered(412, Some("PreconditionFailed"))),
            ErrorKind::Precondition
        );
    }

    #[test]
    fn a_missing_bucket_is_never_a_missing_key() {
        for op in READS.into_iter().chain(MUTATIONS) {
            assert_eq!(
                classify(op, &answered(404, Some("NoSuchBucket"))),
                ErrorKind::Unavailable,
                "{op}"
            );
        }
    }

    #[test]
    fn conflicts_and_slowdowns_are_throttled() {
        for op in READS.into_iter().chain(MUTATIONS) {
            for failure in [
                answered(409, Some("ConditionalRequestConflict")),
                answered(409, None),
                answered(429, None),
                answered(503, Some("SlowDown")),
            ] {
                assert_eq!(
                    classify(op, &failure),
                    ErrorKind::Throttled,
                    "{op} {failure:?}"
                );
            }
        }
    }

    #[test]
    fn unsure_outcomes_are_ambiguous_for_mutations_only() {
        for failure in [
            Failure::NoAnswer,
            answered(500, Some("InternalError")),
            answered(502, None),
            answered(503, None),
            answered(504, None),
            // An answer that said yes but could not be read.
            answered(200, None),
        ] {
            for op in MUTATIONS {
                assert_eq!(
                    classify(op, &failure),
                    ErrorKind::Ambiguous,
                    "{op} {failure:?}"
                );
            }
            for op in READS {
                assert_eq!(
                    classify(op, &failure),
                    ErrorKind::Unavailable,
                    "{op} {failure:?}"
                );
            }
        }
    }

    #[test]
    fn refusals_and_unsent_requests_changed_nothing() {
        for op in READS.into_iter().chain(MUTATIONS) {
            for failure in [
                Failure::NotSent,
                answered(400, Some("InvalidRequest")),
                answered(403, Some("AccessDenied")),
                answered(501, Some("NotImplemented")),
            ] {
                assert_eq!(
                    classify(op, &failure),
                    ErrorKind::Unavailable,
                    "{op} {failure:?}"
                );
            }
        }
    }

    #[test]
    fn ranges_past_the_end_are_preconditions() {
        assert_eq!(
            classify(Op::GetRange, &answered(416, Some("InvalidRange"))),
            ErrorKind::Precondition
        );
    }

    #[test]
    fn etags_are_kept_quoted_and_checked() {
        assert_eq!(quoted_etag("abc"), "\"abc\"");
        assert_eq!(quoted_etag("\"abc\""), "\"abc\"");
        let key = "k";
        assert_eq!(
            condition_etag(Op::Replace, key, &Generation::new("abc")).unwrap(),
            "\"abc\""
        );
        assert_eq!(
            condition_etag(Op::Delete, key, &Generation::new("\"abc-2\"")).unwrap(),
            "\"abc-2\""
        );
        for bogus in ["", "\"\"", "a b", "a\"b", "W/\"abc\"", "é", "a\nb"] {
            let err = condition_etag(Op::Replace, key, &Generation::new(bogus)).unwrap_err();
            assert!(err.is_precondition(), "{bogus:?}: {err}");
            assert_eq!((err.op(), err.key()), (Op::Replace, key));
        }
    }

    #[test]
    fn refused_connections_are_recognised_through_the_chain() {
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl fmt::Display for Wrapper {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("wrapped")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let refused = Wrapper(std::io::ErrorKind::ConnectionRefused.into());
        let reset = Wrapper(std::io::ErrorKind::ConnectionReset.into());
        assert!(caused_by_refused_connection(&refused));
        assert!(!caused_by_refused_connection(&reset));
    }

    #[test]
    fn times_are_cut_to_seconds() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(
            whole_seconds(t),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
    }
}
