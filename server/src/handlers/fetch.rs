//! FETCH (current, pinned `/doc.md/vN`, content-addressed, directory index or listing,
//! conditional) and VERSIONS (history with chain verification).

use quire_backend::{Document, ErrorKind};
use quire_log::Hash;
use quire_log::metadata::{CONTROL_KEYS, RESERVED_KEYS};

use super::list::{self, ListPage};
use super::{
    Call, PROTOCOL_KEYS, ViewGuard, backend_error, canonical, denied, escape_link, hash_path,
    not_found,
};
use crate::mark::{Response, Status};

/// The most entries a generated directory listing shows.
const LISTING_ENTRIES: usize = 1000;

pub(super) async fn fetch(call: &Call<'_>) -> Response {
    let raw = call.request.path.as_str();
    let Some(path) = canonical(raw) else {
        return not_found(raw);
    };
    if let Some(hash) = hash_path(&path) {
        let view = match call.open_view().await {
            Ok(view) => view,
            Err(response) => return response,
        };
        return fetch_by_hash(call, &view, &path, hash).await;
    }
    // Authorised before the store is asked anything, so a denial says nothing about what
    // exists. `/a/v1` is a version of `/a` or a child of the directory `/a`: only the store
    // knows which, so the caller must read both.
    let pinned = split_version(&path);
    if let Err(denial) = call.may_read(&path) {
        return denied(denial);
    }
    if let Some((base, _)) = pinned
        && let Err(denial) = call.may_read(base)
    {
        return denied(denial);
    }
    let view = match call.open_view().await {
        Ok(view) => view,
        Err(response) => return response,
    };
    if let Some((base, version)) = pinned {
        match view.is_dir(&call.ctx, base).await {
            Ok(true) => {}
            Ok(false) => return fetch_pinned(call, &view, base, version).await,
            Err(error) if error.kind() == ErrorKind::NotFound => return not_found(&path),
            Err(error) => return backend_error(&error, &path),
        }
    }
    match view.get(&call.ctx, &path, 0).await {
        Ok(document) if document.archived => {
            Response::error(Status::Archived, &format!("{path} is archived"))
        }
        Ok(document) => serve(call, &document),
        Err(error) if error.kind() == ErrorKind::NotFound => {
            fetch_directory(call, &view, &path).await
        }
        Err(error) => backend_error(&error, &path),
    }
}

/// A content-addressed FETCH: a document the caller may not read answers as an absent one,
/// so the path cannot confirm a guess at a protected document's body.
async fn fetch_by_hash(call: &Call<'_>, view: &ViewGuard, path: &str, hash: Hash) -> Response {
    let resolved = match view.lookup_hash(&call.ctx, &hash).await {
        Ok(resolved) => resolved,
        Err(error) => return backend_error(&error, path),
    };
    if call.may_read(resolved.as_str()).is_err() {
        return not_found(path);
    }
    match view.get(&call.ctx, resolved.as_str(), 0).await {
        Ok(document) if document.archived => not_found(path),
        Ok(document) => serve(call, &document),
        Err(error) => backend_error(&error, path),
    }
}

/// A pinned version; the caller may read `base` (checked before).
async fn fetch_pinned(call: &Call<'_>, view: &ViewGuard, base: &str, version: u64) -> Response {
    let document = match view.get(&call.ctx, base, version).await {
        Ok(document) => document,
        Err(error) => return backend_error(&error, &format!("{base}/v{version}")),
    };
    let current = match view.versions(&call.ctx, base).await {
        Ok(versions) => versions.first().map_or(version, |info| info.version),
        Err(error) => return backend_error(&error, base),
    };
    let mut response = serve(call, &document);
    if response.status == Status::Ok {
        response = response.with_meta("current-version", current.to_string());
    }
    response
}

/// A path that names nothing as a document: its `index.md`, else its listing. The caller
/// must read it as a directory, checked before the store is asked whether it is one.
async fn fetch_directory(call: &Call<'_>, view: &ViewGuard, path: &str) -> Response {
    if let Err(denial) = call.may_read_directory(path) {
        return denied(denial);
    }
    match view.is_dir(&call.ctx, path).await {
        Ok(true) => {}
        Ok(false) => return not_found(path),
        Err(error) if error.kind() == ErrorKind::NotFound => return not_found(path),
        Err(error) => return backend_error(&error, path),
    }
    let index = if path == "/" {
        "/index.md".to_owned()
    } else {
        format!("{path}/index.md")
    };
    match view.get(&call.ctx, &index, 0).await {
        Ok(document) if !document.archived && call.may_read(&index).is_ok() => {
            return serve(call, &document);
        }
        Ok(_) => {}
        Err(error) if error.kind() == ErrorKind::NotFound => {}
        Err(error) => return backend_error(&error, path),
    }
    let page = match list::read_page(call, view, path, "", LISTING_ENTRIES, false).await {
        Ok(page) => page,
        Err(response) => return response,
    };
    let ListPage { body, entries, .. } = page;
    let etag = Hash::of(body.as_bytes());
    if none_match(call, &etag.to_hex()) {
        return Response::new(Status::NotModified);
    }
    Response::new(Status::Ok)
        .with_meta("entries", entries.to_string())
        .with_meta("etag", etag.to_hex())
        .with_meta("content-hash", etag.content_hash())
        .with_body(body)
}

/// Whether the request's `if-none-match` (tags joined with `,`, or `*` for any) names
/// `etag`.
fn none_match(call: &Call<'_>, etag: &str) -> bool {
    call.meta("if-none-match")
        .is_some_and(|tags| tags.split(',').any(|tag| tag == "*" || tag == etag))
}

/// A document as FETCH shows it, or `not-modified` when the caller's copy is current.
fn serve(call: &Call<'_>, document: &Document) -> Response {
    let etag = document.etag.to_hex();
    if call.meta("if-none-match").is_some() {
        if none_match(call, &etag) {
            return Response::new(Status::NotModified);
        }
    } else if let Some(since) = call.meta("if-modified-since")
        && let Some(since) = quire_index::query::parse_time(since)
        && document.modified <= since
    {
        return Response::new(Status::NotModified);
    }
    let mut response = Response::new(Status::Ok);
    if let Some(metadata) = &document.metadata {
        for (key, value) in metadata {
            let key_str = key.as_str();
            if !RESERVED_KEYS.contains(&key_str)
                && !CONTROL_KEYS.contains(&key_str)
                && !PROTOCOL_KEYS.contains(&key_str)
            {
                response.metadata.insert(key.clone(), value.clone());
            }
        }
    }
    response
        .with_meta("modified", document.modified.to_string())
        .with_meta("etag", etag)
        .with_meta("version", document.version.to_string())
        .with_meta("content-hash", document.content_hash.content_hash())
        .with_body(document.content.clone())
}

pub(super) async fn versions(call: &Call<'_>) -> Response {
    let raw = call.request.path.as_str();
    let Some(path) = canonical(raw) else {
        return not_found(raw);
    };
    if hash_path(&path).is_some() || path == "/" {
        return not_found(&path);
    }
    if let Err(denial) = call.may_read(&path) {
        return denied(denial);
    }
    let view = match call.open_view().await {
        Ok(view) => view,
        Err(response) => return response,
    };
    let history = match view.versions(&call.ctx, &path).await {
        Ok(history) => history,
        Err(error) => return backend_error(&error, &path),
    };
    let chain = match view.verify_chain(&call.ctx, &path).await {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == ErrorKind::Integrity => {
            tracing::warn!(%error, "hash chain broken");
            Err(error.detail().to_owned())
        }
        Err(error) => return backend_error(&error, &path),
    };
    let mut body = format!("\n# Version History: {path}\n\n");
    // The path keeps its slashes: `/notes/a.md/v1` resolves to the version from any page.
    let escaped = escape_link(&path, true);
    for info in &history {
        body.push_str(&format!(
            "- [v{v}]({escaped}/v{v}) - {}\n",
            info.modified,
            v = info.version
        ));
    }
    let current = history.first().map_or(0, |info| info.version);
    let mut response = Response::new(Status::Ok)
        .with_meta("total", history.len().to_string())
        .with_meta("current", current.to_string())
        .with_meta("chain-valid", chain.is_ok().to_string())
        .with_body(body);
    if let Err(detail) = chain {
        response = response.with_meta("chain-error", detail);
    }
    response
}

/// `/doc.md/vN` → (`/doc.md`, N) for N ≥ 1.
fn split_version(path: &str) -> Option<(&str, u64)> {
    let (base, last) = path.rsplit_once('/')?;
    let digits = last.strip_prefix('v')?;
    if base.is_empty() || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let version: u64 = digits.parse().ok()?;
    (version >= 1 && !digits.starts_with('0')).then_some((base, version))
}
