//! The web page: what the HTTP gateway answers a browser (`Accept: text/html`) at every
//! path, built from the same handlers as every other answer, so a page shows exactly what
//! the caller may read. Markdown and other clients never reach this module.
//!
//! - A document: rendered from markdown and sanitised ([`render`]), its metadata, a form to
//!   publish a new body (with the version it read as the expected version) and one to
//!   append; a pinned version (`/doc.md/vN`) likewise, read-only.
//! - A directory: its listing (paged through LIST cursors) or its `index.md`, and a form to
//!   create a document in it.
//! - `?versions`: the history, chain validity, and a form comparing any two versions;
//!   `?diff&from=A&to=B` shows their line diff ([`diff`]).
//! - `?lookup&query=Q[&match=body]`: search under the directory; body matches (where the
//!   world has body search) with their snippets, the query's terms marked.
//! - `?watch` with `Accept: text/event-stream`: the change feed as Server-Sent Events
//!   ([`sse`]), which the page follows to show changes as they are committed.
//!
//! Every page has breadcrumbs, a search box and a token field. The token stays in the tab
//! (`sessionStorage`) and is sent as an `Authorization: Bearer` header by the page's script,
//! never in a URL. The script and style sheet are embedded in the binary and served at
//! [`ASSET_SCRIPT`] and [`ASSET_STYLE`]; each page's Content-Security-Policy allows nothing
//! else (no inline script, no other origin), so nothing loads from the network at run time
//! and a document can never run script.

pub(crate) mod diff;
pub(crate) mod render;
pub(crate) mod sse;

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response as HttpResponse;
use tokio_util::sync::CancellationToken;

use crate::handlers::{self, World};
use crate::mark::{Request, Response, Status, Verb};
use render::{escape, href};

/// Where the page's script is served.
pub(crate) const ASSET_SCRIPT: &str = "/.quire/web/app.js";
/// Where the page's style sheet is served.
pub(crate) const ASSET_STYLE: &str = "/.quire/web/app.css";
/// What a page may load: its own script, style sheet, images and requests, nothing else.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");
/// Entries per listing page.
const LIST_PAGE: usize = 200;
/// Rows a search page asks for.
const SEARCH_LIMIT: usize = 50;

/// The gateway's hook: the answer for a browser (a page, an asset, the event stream), or
/// `None` when the request is not a browser's and the gateway answers it as always.
pub(crate) async fn respond(
    world: &Arc<World>,
    method: &Method,
    raw_path: &str,
    headers: &HeaderMap,
    query: &[(String, String)],
    draining: &CancellationToken,
    peer: Option<IpAddr>,
) -> Option<HttpResponse> {
    if *method != Method::GET && *method != Method::HEAD {
        return None;
    }
    let path = percent_encoding::percent_decode_str(raw_path)
        .decode_utf8()
        .ok()?
        .into_owned();
    match path.as_str() {
        ASSET_SCRIPT => return Some(asset(SCRIPT, "text/javascript; charset=utf-8")),
        ASSET_STYLE => return Some(asset(STYLE, "text/css; charset=utf-8")),
        _ => {}
    }
    crate::mark::validate_path(&path).ok()?;
    let watching = has(query, "watch");
    if watching && accepts(headers, sse::EVENT_STREAM) && *method == Method::GET {
        return Some(
            sse::stream(world.clone(), path, headers, query, draining.clone(), peer).await,
        );
    }
    if watching || !accepts(headers, "text/html") {
        return None;
    }
    Some(page(world, &path, headers, query, peer).await)
}

/// Whether the Accept header names `kind`.
fn accepts(headers: &HeaderMap, kind: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|item| item.trim().starts_with(kind)))
}

fn has(query: &[(String, String)], key: &str) -> bool {
    query.iter().any(|(k, _)| k == key)
}

/// The first non-empty value of `key` in the query.
fn query_value(query: &[(String, String)], key: &str) -> Option<String> {
    query
        .iter()
        .find(|(k, v)| k == key && !v.is_empty())
        .map(|(_, v)| v.clone())
}

/// The bearer token of the request, if any.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or(value.strip_prefix("bearer "))?;
    Some(token.trim().to_owned())
}

fn asset(text: &'static str, content_type: &'static str) -> HttpResponse {
    let mut http = HttpResponse::new(Body::from(text));
    let headers = http.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    http
}

/// One page's content before it is put in the frame.
struct Page {
    status: Status,
    code: StatusCode,
    title: String,
    main: String,
    /// The WATCH scope the page follows (a document, or a directory ending in `/`).
    watch: Option<String>,
}

impl Page {
    fn from_error(path: &str, response: &Response) -> Page {
        let message = String::from_utf8_lossy(&response.body);
        Page {
            status: response.status,
            code: crate::http::status_code(response),
            title: format!("{} · {path}", response.status.title()),
            main: format!(
                "<section class=\"error\" data-q=\"error\">{}</section>",
                render::markdown(&message, path)
            ),
            watch: None,
        }
    }
}

/// Who a page asks for: the tab's token and the browser's address (its client share).
#[derive(Clone, Copy, Debug)]
struct Caller<'a> {
    auth: Option<&'a str>,
    peer: Option<IpAddr>,
}

/// Runs one Mark request through the handlers, as the caller.
async fn mark(
    world: &World,
    verb: Verb,
    path: &str,
    caller: Caller<'_>,
    metadata: &[(&str, String)],
) -> Response {
    let mut request = Request::new(verb, path);
    if let Some(token) = caller.auth {
        request.metadata.insert("auth".into(), token.to_owned());
    }
    for (key, value) in metadata {
        request.metadata.insert((*key).to_owned(), value.clone());
    }
    handlers::handle_from(world, request, caller.peer).await
}

async fn page(
    world: &Arc<World>,
    path: &str,
    headers: &HeaderMap,
    query: &[(String, String)],
    peer: Option<IpAddr>,
) -> HttpResponse {
    let auth = bearer(headers);
    let caller = Caller {
        auth: auth.as_deref(),
        peer,
    };
    let page = if has(query, "diff") {
        diff_page(world, path, caller, query).await
    } else if has(query, "versions") {
        history_page(world, path, caller).await
    } else if has(query, "lookup") || has(query, "query") {
        search_page(world, path, caller, query).await
    } else if has(query, "list") || has(query, "cursor") {
        listing_page(world, path, caller, query_value(query, "cursor")).await
    } else {
        browse_page(world, path, caller).await
    };
    frame(world, path, page)
}

/// Whether a path names a document or one of its versions (`/a.md`, `/a.md/v2`).
fn is_document_path(path: &str) -> bool {
    path.ends_with(".md")
        || path
            .rsplit_once('/')
            .is_some_and(|(base, last)| base.ends_with(".md") && last.starts_with('v'))
}

/// The directory a path's relative links and searches belong to, ending in `/`.
fn directory_of(path: &str, is_directory: bool) -> String {
    if is_directory {
        if path.ends_with('/') {
            path.to_owned()
        } else {
            format!("{path}/")
        }
    } else {
        match path.rfind('/') {
            Some(at) => path[..=at].to_owned(),
            None => "/".to_owned(),
        }
    }
}

async fn browse_page(world: &World, path: &str, caller: Caller<'_>) -> Page {
    let response = mark(world, Verb::Fetch, path, caller, &[]).await;
    if response.status != Status::Ok {
        return Page::from_error(path, &response);
    }
    if response.metadata.contains_key("entries") {
        // A generated listing: show it through LIST, which pages.
        return listing_page(world, path, caller, None).await;
    }
    document_page(path, &response)
}

fn document_page(path: &str, response: &Response) -> Page {
    let body = String::from_utf8_lossy(&response.body).into_owned();
    let meta = |key: &str| response.metadata.get(key).map(String::as_str);
    let pinned = meta("current-version").is_some();
    let is_directory = !path.ends_with(".md") && !pinned;
    let base = if is_directory {
        directory_of(path, true)
    } else {
        path.to_owned()
    };
    let document = if pinned {
        path.rsplit_once('/').map_or(path, |(base, _)| base)
    } else {
        path
    };
    let version = meta("version").unwrap_or("?");
    let mut main = String::new();
    main.push_str("<div class=\"toolbar\">");
    if let Some(current) = meta("current-version") {
        main.push_str(&format!(
            "<span data-q=\"version\">Version {} of {}</span> · <a href=\"{}\">current</a>",
            escape(version),
            escape(current),
            href(document)
        ));
    } else {
        main.push_str(&format!(
            "<span data-q=\"version\">Version {}</span>",
            escape(version)
        ));
    }
    if let Some(modified) = meta("modified") {
        main.push_str(&format!(" · <time>{}</time>", escape(modified)));
    }
    main.push_str(&format!(
        " · <a data-q=\"history\" href=\"{}?versions\">History</a></div>\n",
        href(document)
    ));
    main.push_str("<details class=\"meta\"><summary>Metadata</summary><table>");
    for (key, value) in &response.metadata {
        main.push_str(&format!(
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(key),
            escape(value)
        ));
    }
    main.push_str("</table></details>\n");
    main.push_str(&format!(
        "<article class=\"doc\" data-q=\"document\">{}</article>\n",
        render::markdown(&body, &base)
    ));
    if !pinned && !is_directory {
        main.push_str(&format!(
            "<section class=\"write\"><details data-q=\"edit\"><summary>Edit</summary>\
             <form data-q=\"publish\" data-url=\"{url}\" data-version=\"{v}\">\
             <textarea name=\"body\" rows=\"14\" spellcheck=\"false\">{raw}</textarea>\
             <button type=\"submit\">Publish</button></form></details>\
             <details data-q=\"append-box\"><summary>Append</summary>\
             <form data-q=\"append\" data-url=\"{url}\" data-version=\"{v}\">\
             <textarea name=\"body\" rows=\"5\" spellcheck=\"false\"></textarea>\
             <button type=\"submit\">Append</button></form></details></section>\n",
            url = href(path),
            v = escape(version),
            raw = escape(&body),
        ));
    }
    let title = meta("title")
        .map(str::to_owned)
        .or_else(|| {
            crate::outline::headings(&body)
                .into_iter()
                .next()
                .map(|h| h.text)
        })
        .unwrap_or_else(|| path.to_owned());
    Page {
        status: Status::Ok,
        code: StatusCode::OK,
        title,
        main,
        watch: Some(if is_directory {
            base
        } else {
            document.to_owned()
        }),
    }
}

async fn listing_page(
    world: &World,
    path: &str,
    caller: Caller<'_>,
    cursor: Option<String>,
) -> Page {
    let mut metadata = vec![("page-size", LIST_PAGE.to_string())];
    if let Some(cursor) = cursor {
        metadata.push(("cursor", cursor));
    }
    let response = mark(world, Verb::List, path, caller, &metadata).await;
    if response.status != Status::Ok {
        return Page::from_error(path, &response);
    }
    let dir = directory_of(path, true);
    let body = String::from_utf8_lossy(&response.body);
    let mut main = format!(
        "<nav class=\"listing\" data-q=\"listing\">{}</nav>\n",
        render::markdown(&body, &dir)
    );
    if let Some(next) = response.metadata.get("next-cursor") {
        main.push_str(&format!(
            "<p><a data-q=\"next-page\" href=\"{}?list&amp;cursor={}\">Next page</a></p>\n",
            href(&dir),
            escape(&render::href(next))
        ));
    }
    main.push_str(&format!(
        "<section class=\"write\"><details data-q=\"create\"><summary>New document</summary>\
         <form data-q=\"create-form\" data-dir=\"{}\">\
         <label>Name <input name=\"name\" placeholder=\"name.md\" required></label>\
         <textarea name=\"body\" rows=\"10\" spellcheck=\"false\"># Title\n</textarea>\
         <button type=\"submit\">Create</button></form></details></section>\n",
        escape(&href(&dir))
    ));
    Page {
        status: Status::Ok,
        code: StatusCode::OK,
        title: format!("Index of {dir}"),
        main,
        watch: Some(dir),
    }
}

async fn history_page(world: &World, path: &str, caller: Caller<'_>) -> Page {
    let response = mark(world, Verb::Versions, path, caller, &[]).await;
    if response.status != Status::Ok {
        return Page::from_error(path, &response);
    }
    let body = String::from_utf8_lossy(&response.body).into_owned();
    let versions: Vec<u64> = body
        .lines()
        .filter_map(|line| line.strip_prefix("- [v"))
        .filter_map(|rest| rest.split(']').next())
        .filter_map(|digits| digits.parse().ok())
        .collect();
    let chain = match response.metadata.get("chain-valid").map(String::as_str) {
        Some("true") => {
            "<p class=\"chain ok\" data-q=\"chain\">Hash chain verified.</p>".to_owned()
        }
        _ => format!(
            "<p class=\"chain broken\" data-q=\"chain\">Hash chain broken: {}</p>",
            escape(
                response
                    .metadata
                    .get("chain-error")
                    .map_or("unknown", String::as_str)
            )
        ),
    };
    let options = |selected: Option<u64>| {
        versions
            .iter()
            .map(|v| {
                let chosen = if Some(*v) == selected {
                    " selected"
                } else {
                    ""
                };
                format!("<option value=\"{v}\"{chosen}>v{v}</option>")
            })
            .collect::<String>()
    };
    let mut main = chain;
    if versions.len() >= 2 {
        main.push_str(&format!(
            "<form class=\"compare\" data-q=\"compare\" method=\"get\" action=\"{}\">\
             <input type=\"hidden\" name=\"diff\" value=\"\">\
             <label>From <select name=\"from\">{}</select></label> \
             <label>to <select name=\"to\">{}</select></label> \
             <button type=\"submit\">Compare</button></form>\n",
            href(path),
            options(versions.get(1).copied()),
            options(versions.first().copied())
        ));
    }
    main.push_str(&format!(
        "<nav class=\"history\" data-q=\"versions\">{}</nav>\n",
        render::markdown(&body, path)
    ));
    Page {
        status: Status::Ok,
        code: StatusCode::OK,
        title: format!("History of {path}"),
        main,
        watch: Some(path.to_owned()),
    }
}

async fn diff_page(
    world: &World,
    path: &str,
    caller: Caller<'_>,
    query: &[(String, String)],
) -> Page {
    let version = |key: &str| query_value(query, key).and_then(|v| v.parse::<u64>().ok());
    let (Some(from), Some(to)) = (version("from"), version("to")) else {
        return Page::from_error(
            path,
            &Response::error(
                Status::BadRequest,
                "compare needs from and to version numbers",
            ),
        );
    };
    let mut texts = Vec::with_capacity(2);
    for v in [from, to] {
        let pinned = format!("{path}/v{v}");
        let response = mark(world, Verb::Fetch, &pinned, caller, &[]).await;
        if response.status != Status::Ok {
            return Page::from_error(&pinned, &response);
        }
        texts.push(String::from_utf8_lossy(&response.body).into_owned());
    }
    let main = format!(
        "<p class=\"toolbar\"><a href=\"{p}/v{from}\">v{from}</a> → <a href=\"{p}/v{to}\">v{to}</a> · \
         <a href=\"{p}?versions\">History</a></p>\n<div data-q=\"diff\">{}</div>\n",
        diff::table(&texts[0], &texts[1]),
        p = href(path),
    );
    Page {
        status: Status::Ok,
        code: StatusCode::OK,
        title: format!("{path}: v{from} → v{to}"),
        main,
        watch: None,
    }
}

async fn search_page(
    world: &World,
    path: &str,
    caller: Caller<'_>,
    query: &[(String, String)],
) -> Page {
    let text = query_value(query, "query").unwrap_or_default();
    let wanted = query_value(query, "match").unwrap_or_else(|| "body".into());
    let scope = directory_of(path, !is_document_path(path));
    let metadata = [
        ("query", text.clone()),
        ("match", wanted.clone()),
        ("limit", SEARCH_LIMIT.to_string()),
    ];
    let response = mark(world, Verb::Lookup, &scope, caller, &metadata).await;
    if response.status != Status::Ok {
        return Page::from_error(&scope, &response);
    }
    let body = String::from_utf8_lossy(&response.body);
    let matches = response.metadata.get("matches").map_or("0", String::as_str);
    let mut main = format!(
        "<p data-q=\"matches\">{} matches for “{}” in {}</p>\n",
        escape(matches),
        escape(&text),
        escape(&scope)
    );
    if wanted == "body" && response.metadata.get("match").map(String::as_str) == Some("catalog") {
        main.push_str(
            "<p class=\"note\" data-q=\"catalog-only\">Body search is not ready in this world: \
             these are catalog matches (titles, tags, metadata).</p>\n",
        );
    }
    main.push_str(&format!(
        "<div class=\"results\" data-q=\"results\">{}</div>\n",
        render::lookup_table(&body, &text)
    ));
    Page {
        status: Status::Ok,
        code: StatusCode::OK,
        title: format!("Search: {text}"),
        main,
        watch: None,
    }
}

/// Breadcrumbs: the world, then each directory down to the page.
fn breadcrumbs(world: &str, path: &str) -> String {
    let mut html = format!("<a href=\"/\">{}</a>", escape(world));
    let mut walked = String::from("/");
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    for (at, segment) in segments.iter().enumerate() {
        walked.push_str(segment);
        let last = at + 1 == segments.len();
        if last && !path.ends_with('/') {
            html.push_str(&format!(
                " <span>/</span> <span aria-current=\"page\">{}</span>",
                escape(segment)
            ));
        } else {
            walked.push('/');
            html.push_str(&format!(
                " <span>/</span> <a href=\"{}\">{}</a>",
                href(&walked),
                escape(segment)
            ));
        }
    }
    html
}

/// The page around its content: head, breadcrumbs, search, token field, live panel.
fn frame(world: &World, path: &str, page: Page) -> HttpResponse {
    let scope = directory_of(path, !is_document_path(path));
    let watch = page
        .watch
        .as_deref()
        .map(|scope| format!(" data-watch=\"{}\"", escape(&href(scope))))
        .unwrap_or_default();
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · Quire</title>\
         <link rel=\"stylesheet\" href=\"{style}\"><script src=\"{script}\" defer></script></head>\n\
         <body data-status=\"{code}\" data-mark-status=\"{status}\"{watch}>\n\
         <header><nav class=\"crumbs\" data-q=\"crumbs\">{crumbs}</nav>\n\
         <form class=\"search\" data-q=\"search\" method=\"get\" action=\"{scope}\">\
         <input type=\"hidden\" name=\"lookup\" value=\"\">\
         <input type=\"search\" name=\"query\" placeholder=\"Search {scope_text}\" required minlength=\"1\">\
         <select name=\"match\"><option value=\"body\">text</option><option value=\"catalog\">catalog</option></select>\
         <button type=\"submit\">Search</button></form>\n\
         <form class=\"token\" data-q=\"token-form\"><input type=\"password\" name=\"token\" \
         autocomplete=\"off\" placeholder=\"token (kept in this tab)\" data-q=\"token\">\
         <button type=\"submit\">Use token</button>\
         <button type=\"button\" data-q=\"forget\">Forget</button></form></header>\n\
         <p class=\"message\" data-q=\"message\" role=\"status\"></p>\n\
         <main data-q=\"main\">{main}</main>\n\
         <aside class=\"live\" data-q=\"live\"><h2>Live</h2><p data-q=\"live-state\">not following</p>\
         <ol data-q=\"changes\"></ol></aside>\n</body></html>\n",
        title = escape(&page.title),
        style = ASSET_STYLE,
        script = ASSET_SCRIPT,
        code = page.code.as_u16(),
        status = page.status.as_str(),
        crumbs = breadcrumbs(&world.name, path),
        scope = escape(&href(&scope)),
        scope_text = escape(&scope),
        main = page.main,
    );
    let mut http = HttpResponse::new(Body::from(html));
    *http.status_mut() = page.code;
    let headers = http.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Authorization"),
    );
    http
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breadcrumbs_link_every_directory() {
        let html = breadcrumbs("local", "/notes/daily/today.md");
        assert!(html.starts_with("<a href=\"/\">local</a>"), "{html}");
        assert!(html.contains("<a href=\"/notes/\">notes</a>"), "{html}");
        assert!(
            html.contains("<a href=\"/notes/daily/\">daily</a>"),
            "{html}"
        );
        assert!(
            html.ends_with("<span aria-current=\"page\">today.md</span>"),
            "{html}"
        );
        assert!(breadcrumbs("w", "/notes/").ends_with("<a href=\"/notes/\">notes</a>"));
    }

    #[test]
    fn only_browsers_get_pages() {
        let mut headers = HeaderMap::new();
        assert!(!accepts(&headers, "text/html"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(!accepts(&headers, "text/html"));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"),
        );
        assert!(accepts(&headers, "text/html"));
    }
}
