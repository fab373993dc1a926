//! LOOKUP in catalog and body mode: query, filter, scope and limit, rows the caller may not
//! read dropped before the limit. Body rows add a Snippet column (query terms in bold) and
//! name their section: `path#anchor`, title `Title › Heading`. A body request the store
//! cannot answer from an index of its snapshot is answered from the catalog, echoing
//! `match: catalog`.

use quire_backend::{CatalogQuery, ErrorKind, Filter, MatchMode, SectionHit};
use quire_index::query::{DEFAULT_LIMIT, MAX_LIMIT, Terms, validate_query_text};

use super::{Call, backend_error, bad_request, canonical, denied, escape_markdown, not_found};
use crate::mark::{Response, Status};

/// Terms shorter than this match by prefix over every indexed gram (the costly kind).
const SHORT_TERM_CHARS: usize = 3;
/// The most short terms one query may hold: each scans every gram it prefixes, so a query
/// of many one-letter terms would cost a scan of the catalog per term.
pub(super) const MAX_SHORT_TERMS: usize = 2;
/// How much a lookup's cap grows when rows the caller may not read left too few.
const WIDENING: usize = 8;

/// Refuses a query holding more than [`MAX_SHORT_TERMS`] short terms.
fn check_short_terms(query: &str) -> Result<(), String> {
    let Terms::Words(words) = CatalogQuery::new(query).terms() else {
        return Ok(());
    };
    let short = words
        .iter()
        .filter(|word| word.chars().count() < SHORT_TERM_CHARS)
        .count();
    if short > MAX_SHORT_TERMS {
        return Err(format!(
            "{short} terms of fewer than {SHORT_TERM_CHARS} characters exceed the limit of {MAX_SHORT_TERMS}"
        ));
    }
    Ok(())
}

pub(super) async fn lookup(call: &Call<'_>) -> Response {
    let raw = call.request.path.as_str();
    let Some(scope) = canonical(raw) else {
        return not_found(raw);
    };
    let Some(query) = call.meta("query").map(str::trim) else {
        return bad_request("lookup requires a query");
    };
    if let Err(why) = validate_query_text(query).and_then(|()| check_short_terms(query)) {
        return bad_request(&why);
    }
    let limit = match call.meta("limit") {
        None => DEFAULT_LIMIT,
        Some(text) => match text.parse::<usize>() {
            Ok(limit) if limit >= 1 => limit.min(MAX_LIMIT),
            _ => return bad_request("limit must be a positive integer"),
        },
    };
    let filters = match call.meta("filter") {
        None => Vec::new(),
        Some(text) => match Filter::parse_list(text) {
            Ok(filters) => filters,
            Err(why) => return bad_request(&why),
        },
    };
    let mode = match call.meta("match").map(MatchMode::parse) {
        None => MatchMode::Catalog,
        Some(Ok(mode)) => mode,
        Some(Err(why)) => return bad_request(&why),
    };
    // The scope is judged as a directory before the store is asked whether it is one.
    if let Err(denial) = call.may_read_directory(&scope) {
        return denied(denial);
    }
    let view = match call.open_view().await {
        Ok(view) => view,
        Err(response) => return response,
    };
    match view.is_dir(&call.ctx, &scope).await {
        Ok(true) => {}
        Ok(false) => return not_found(&scope),
        Err(error) => return backend_error(&error, &scope),
    }
    let mut request = CatalogQuery::new(query)
        .scope(scope.clone())
        .max(limit)
        .mode(mode);
    request.filters = filters;
    let (visible, answered_mode) = loop {
        let (found, answered_mode) = match view.lookup(&call.ctx, &request).await {
            Ok(found) => (found, mode),
            Err(error) if error.kind() == ErrorKind::BodyMatchUnavailable => {
                // The section index is not ready: answer from the catalog and say so.
                let catalog = request.clone().mode(MatchMode::Catalog);
                match view.lookup(&call.ctx, &catalog).await {
                    Ok(found) => (found, MatchMode::Catalog),
                    Err(error) => return backend_error(&error, &scope),
                }
            }
            Err(error) => return backend_error(&error, &scope),
        };
        let complete = found.len() < request.max;
        let visible: Vec<_> = found
            .into_iter()
            .filter(|row| call.may_read(row.path.as_str()).is_ok())
            .take(limit)
            .collect();
        // Rows the caller may not read are dropped before the limit: when they left fewer
        // than asked, ask the same view for more (a bigger cap answers the same order, longer).
        if visible.len() >= limit || complete || request.max >= MAX_LIMIT {
            break (visible, answered_mode);
        }
        request.max = request.max.saturating_mul(WIDENING).min(MAX_LIMIT);
    };
    let body_rows = answered_mode == MatchMode::Body;
    let mut body = format!(
        "\n# Lookup matches for \"{}\" in {}\n\n| Path | Importance | Title | Tags |",
        escape_markdown(query),
        escape_markdown(&scope)
    );
    body.push_str(if body_rows {
        " Snippet |\n|------|------------|-------|------|---------|\n"
    } else {
        "\n|------|------------|-------|------|\n"
    });
    for row in &visible {
        let importance = row
            .importance
            .parse::<f64>()
            .map_or_else(|_| row.importance.clone(), |v| format!("{v:.2}"));
        // The anchor's `#` is the link's own, so only the parts around it are escaped.
        let (path, title) = match &row.section {
            Some(hit) if !hit.anchor.is_empty() => (
                format!("{}#{}", cell(row.path.as_str()), cell(&hit.anchor)),
                cell(&format!("{} › {}", row.title, hit.heading)),
            ),
            _ => (cell(row.path.as_str()), cell(&row.title)),
        };
        body.push_str(&format!(
            "| {} | {} | {} | {} |",
            path,
            importance,
            title,
            cell(&row.tags.join(", "))
        ));
        if body_rows {
            let snippet = row.section.as_ref().map(marked).unwrap_or_default();
            body.push_str(&format!(" {snippet} |"));
        }
        body.push('\n');
    }
    let mut response = Response::new(Status::Ok)
        .with_meta("matches", visible.len().to_string())
        .with_body(body);
    if call.meta("match").is_some() {
        response = response.with_meta("match", answered_mode.as_str());
    }
    response
}

/// A snippet as a table cell: its text escaped, its query terms in bold.
fn marked(hit: &SectionHit) -> String {
    let mut out = String::with_capacity(hit.snippet.len() + 4 * hit.highlights.len());
    let mut at = 0;
    for &(start, end) in &hit.highlights {
        let (Some(before), Some(term)) = (hit.snippet.get(at..start), hit.snippet.get(start..end))
        else {
            continue;
        };
        out.push_str(&cell(before));
        out.push_str("**");
        out.push_str(&cell(term));
        out.push_str("**");
        at = end;
    }
    out.push_str(&cell(hit.snippet.get(at..).unwrap_or("")));
    out
}

/// A table cell: markup escaped (a `|` never ends the cell early).
fn cell(text: &str) -> String {
    escape_markdown(text)
}
