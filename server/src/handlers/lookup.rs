//! LOOKUP in catalog mode: query, filter, scope and limit, rows the caller may not read
//! dropped before the limit.

use quire_backend::{CatalogQuery, ErrorKind, Filter, MatchMode};
use quire_index::query::{DEFAULT_LIMIT, MAX_LIMIT, validate_query_text};

use super::{Call, backend_error, bad_request, canonical, denied, escape_markdown, not_found};
use crate::mark::{Response, Status};

pub(super) async fn lookup(call: &Call<'_>) -> Response {
    let raw = call.request.path.as_str();
    let Some(scope) = canonical(raw) else {
        return not_found(raw);
    };
    let Some(query) = call.meta("query").map(str::trim) else {
        return bad_request("lookup requires a query");
    };
    if let Err(why) = validate_query_text(query) {
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
    let mode = match call.meta("match") {
        None | Some("catalog") => MatchMode::Catalog,
        Some("body") => MatchMode::Body,
        Some(other) => return bad_request(&format!("match {other:?} must be catalog or body")),
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
        .max(MAX_LIMIT)
        .mode(mode);
    request.filters = filters;
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
    let visible: Vec<_> = found
        .into_iter()
        .filter(|row| call.may_read(row.path.as_str()).is_ok())
        .take(limit)
        .collect();
    let mut body = format!(
        "\n# Lookup matches for \"{}\" in {}\n\n| Path | Importance | Title | Tags |\n|------|------------|-------|------|\n",
        escape_markdown(query),
        escape_markdown(&scope)
    );
    for row in &visible {
        let importance = row
            .importance
            .parse::<f64>()
            .map_or_else(|_| row.importance.clone(), |v| format!("{v:.2}"));
        body.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            cell(row.path.as_str()),
            importance,
            cell(&row.title),
            cell(&row.tags.join(", "))
        ));
    }
    let mut response = Response::new(Status::Ok)
        .with_meta("matches", visible.len().to_string())
        .with_body(body);
    if call.meta("match").is_some() {
        let echoed = match answered_mode {
            MatchMode::Catalog => "catalog",
            MatchMode::Body => "body",
        };
        response = response.with_meta("match", echoed);
    }
    response
}

/// A table cell: markup escaped (a `|` never ends the cell early).
fn cell(text: &str) -> String {
    escape_markdown(text)
}
