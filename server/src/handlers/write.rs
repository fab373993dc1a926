//! PUBLISH, APPEND and ARCHIVE: the write prelude (read-only, reserved hash paths, size,
//! tokens), the document contract (`.md`, UTF-8, a path and metadata every reader can read
//! back, no protocol keys), expected versions and the answers for created, no-op, conflict
//! and archived.
//!
//! Audit: the `agent` of a PUBLISH or APPEND is the label of the token that authorised it
//! (stored with the version and shown on its WATCH event); a publisher's own `agent`
//! value is replaced.

use quire_backend::{ArchiveRequest, Document, ErrorKind, Metadata, WriteRequest};
use quire_log::DocPath;
use quire_log::metadata::{CONTROL_KEYS, apply_default_type, check_new};

use super::{
    Call, PROTOCOL_KEYS, World, backend_error, bad_request, canonical, denied, is_hash_shaped,
    not_found,
};
use crate::mark::{MAX_BODY, Request, Response, Status};

/// The metadata key the authorising token's label (and what the writer says of itself) is
/// stored under.
pub(super) const AGENT_KEY: &str = "agent";

/// A write that passed the prelude: its canonical path and the label of its token.
struct Authorised {
    path: String,
    label: std::sync::Arc<str>,
}

/// The checks every write makes first; the canonical path and the token's label when they
/// pass.
/// The auth part of [`prelude`] on a request's line and metadata alone (what admission
/// sees before the body): the same answers, for the same reasons.
pub(super) fn authorize_head(world: &World, request: &Request) -> Result<(), Response> {
    if world.read_only {
        return Err(Response::error(Status::NotPermitted, "server is read-only"));
    }
    let Some(path) = canonical(&request.path) else {
        return Err(not_found(&request.path));
    };
    let secret = request.metadata.get("auth").map(String::as_str);
    world
        .auth
        .authorize_write(secret, &path, world.now())
        .map(drop)
        .map_err(denied)
}

fn prelude(call: &Call<'_>) -> Result<Authorised, Response> {
    let raw = call.request.path.as_str();
    if call.world.read_only {
        return Err(Response::error(Status::NotPermitted, "server is read-only"));
    }
    let path = canonical(raw).ok_or_else(|| not_found(raw))?;
    if is_hash_shaped(&path) {
        return Err(bad_request(&format!(
            "{path} is a reserved content-address path"
        )));
    }
    if call.request.body.len() > MAX_BODY {
        return Err(Response::error(
            Status::ServerError,
            "content exceeds size limit",
        ));
    }
    let label = call
        .world
        .auth
        .authorize_write(call.secret.as_deref(), &path, call.world.now())
        .map_err(denied)?;
    Ok(Authorised { path, label })
}

/// The document contract of PUBLISH and APPEND.
fn document_contract(call: &Call<'_>, path: &str) -> Result<(), Response> {
    if path == "/" || !path.ends_with(".md") {
        return Err(bad_request(&format!("{path}: a document path ends in .md")));
    }
    if let Err(why) = quire_log::path::check_new(path) {
        return Err(bad_request(&why.to_string()));
    }
    if std::str::from_utf8(&call.request.body).is_err() {
        return Err(bad_request("the body is not valid UTF-8"));
    }
    Ok(())
}

fn expected_version(call: &Call<'_>) -> Result<Option<u64>, Response> {
    match call.meta("expected-version") {
        None => Ok(None),
        Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => text
            .parse()
            .map(Some)
            .map_err(|_| bad_request("expected-version is out of range")),
        Some(_) => Err(bad_request(
            "expected-version must be a non-negative integer",
        )),
    }
}

/// The request's publisher metadata: control keys stripped, protocol keys and values no
/// reader could read back refused (naming the key), `agent` set to the token's label.
fn publisher_metadata(call: &Call<'_>, label: &str) -> Result<Metadata, Response> {
    let mut metadata: Metadata = Metadata::new();
    for (key, value) in &call.request.metadata {
        if CONTROL_KEYS.contains(&key.as_str()) || key == AGENT_KEY {
            continue;
        }
        if PROTOCOL_KEYS.contains(&key.as_str()) {
            return Err(bad_request(&format!(
                "metadata key {key:?} is set by the protocol, not by publishers"
            )));
        }
        metadata.insert(key.clone(), value.clone());
    }
    // The token's label leads, so what a writer says of itself (an MCP client's name, say)
    // is kept without ever standing in for who was authorised.
    let declared = call
        .request
        .metadata
        .get(AGENT_KEY)
        .map(|name| name.trim())
        .filter(|name| !name.is_empty() && *name != label);
    let agent = match declared {
        Some(name) => format!("{label} ({name})"),
        None => label.to_owned(),
    };
    metadata.insert(AGENT_KEY.to_owned(), agent);
    check_new(&metadata).map_err(|why| bad_request(&why))?;
    Ok(metadata)
}

pub(super) async fn publish(call: &Call<'_>) -> Response {
    let Authorised { path, label } = match prelude(call) {
        Ok(authorised) => authorised,
        Err(response) => return response,
    };
    if let Err(response) = document_contract(call, &path) {
        return response;
    }
    let expected = match expected_version(call) {
        Ok(expected) => expected,
        Err(response) => return response,
    };
    if call.request.body.is_empty() {
        return unarchive(call, &path).await;
    }
    let mut metadata = match publisher_metadata(call, &label) {
        Ok(metadata) => metadata,
        Err(response) => return response,
    };
    if let Ok(doc_path) = DocPath::parse(&path) {
        apply_default_type(&doc_path, &mut metadata);
    }
    let mut request = WriteRequest::new(path.clone(), call.request.body.clone()).metadata(metadata);
    request.expected_version = expected;
    match call.world.store.publish(&call.ctx, request).await {
        Ok(document) => written(Status::Created, &document),
        Err(error) => write_error(&error, &path, expected, false),
    }
}

/// PUBLISH with an empty body: unarchive (a no-op on a live document).
async fn unarchive(call: &Call<'_>, path: &str) -> Response {
    match call
        .world
        .store
        .set_archived(&call.ctx, ArchiveRequest::new(path, false))
        .await
    {
        Ok(result) => Response::new(Status::Ok)
            .with_meta("version", result.document.version.to_string())
            .with_meta("modified", result.document.modified.to_string()),
        Err(error) => backend_error(&error, path),
    }
}

pub(super) async fn append(call: &Call<'_>) -> Response {
    let Authorised { path, label } = match prelude(call) {
        Ok(authorised) => authorised,
        Err(response) => return response,
    };
    if let Err(response) = document_contract(call, &path) {
        return response;
    }
    let expected = match expected_version(call) {
        Ok(Some(version)) if version >= 1 => version,
        Ok(_) => return bad_request("append requires expected-version of at least 1"),
        Err(response) => return response,
    };
    if call.request.body.is_empty() {
        return bad_request("append requires a body");
    }
    let metadata = match publisher_metadata(call, &label) {
        Ok(metadata) => metadata,
        Err(response) => return response,
    };
    let request = WriteRequest::new(path.clone(), call.request.body.clone())
        .metadata(metadata)
        .expected(expected);
    match call.world.store.append(&call.ctx, request).await {
        Ok(document) => written(Status::Created, &document),
        Err(error) => write_error(&error, &path, Some(expected), true),
    }
}

pub(super) async fn archive(call: &Call<'_>) -> Response {
    let Authorised { path, .. } = match prelude(call) {
        Ok(authorised) => authorised,
        Err(response) => return response,
    };
    match call
        .world
        .store
        .set_archived(&call.ctx, ArchiveRequest::new(path.clone(), true))
        .await
    {
        Ok(result) => Response::new(Status::Ok)
            .with_meta("version", result.document.version.to_string())
            .with_meta("archived", "true"),
        Err(error) => backend_error(&error, &path),
    }
}

fn written(status: Status, document: &Document) -> Response {
    Response::new(status)
        .with_meta("version", document.version.to_string())
        .with_meta("modified", document.modified.to_string())
}

fn write_error(
    error: &quire_backend::Error,
    path: &str,
    expected: Option<u64>,
    appending: bool,
) -> Response {
    match (error.kind(), error.current()) {
        (ErrorKind::NotModified, Some(current)) => Response::new(Status::Ok)
            .with_meta("version", current.version.to_string())
            .with_meta("modified", current.modified.to_string()),
        (ErrorKind::Conflict, current) => {
            let server = current.map_or(0, |c| c.version);
            let yours = expected.map_or_else(|| "none".to_owned(), |v| v.to_string());
            let message = if expected == Some(0) {
                format!("A document already exists at this path (version {server})")
            } else if appending {
                format!(
                    "{path} is at version {server}, not {yours}; check whether your append \
                     already landed before retrying"
                )
            } else {
                format!("{path} is at version {server}, not {yours}")
            };
            Response::error(Status::Conflict, &message)
                .with_meta("your-version", yours)
                .with_meta("server-version", server.to_string())
        }
        (ErrorKind::Archived, _) => {
            Response::error(Status::Archived, "document is archived; unarchive first")
        }
        (ErrorKind::NotFound, _) => not_found(path),
        _ => backend_error(error, path),
    }
}
