//! The change feed as Server-Sent Events (`GET /path?watch` with `Accept:
//! text/event-stream`), for the web page and any EventSource client. The watch is the
//! WATCH handler's ([`handlers::open_watch`]): the same scope, auth, limits and order. Each
//! block becomes one event whose `id` is its cursor, so a client that reconnects with
//! `Last-Event-ID` resumes after the last event it saw:
//!
//! | event | data (JSON) |
//! | --- | --- |
//! | `ready` (first) | `{"cursor"}` |
//! | `change` | `{"cursor","path","version","op","hash","agent"}` |
//! | `heartbeat` | `{"cursor"}` |
//! | `resync`, `closing`, `unauthorized`, `not-permitted` (last) | `{"cursor"}` |
//!
//! After `resync` the stream ends and an EventSource reconnects from the cursor it was given
//! (the head), which is what a resync asks for.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response as HttpResponse;
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::handlers::{self, WatchContext, World};
use crate::mark::{Request, Status, Verb, WatchBlock};

/// The content type of the event stream.
pub(crate) const EVENT_STREAM: &str = "text/event-stream";
/// How long an EventSource waits before reconnecting, in milliseconds.
const RETRY_MS: u32 = 1000;

/// Opens the feed for `path` and streams it; a refusal is a plain response with the mapped
/// status.
pub(crate) async fn stream(
    world: Arc<World>,
    path: String,
    headers: &HeaderMap,
    query: &[(String, String)],
    draining: CancellationToken,
    peer: Option<std::net::IpAddr>,
) -> HttpResponse {
    let mut request = Request::new(Verb::Watch, path);
    if let Some(token) = super::bearer(headers) {
        request.metadata.insert("auth".into(), token);
    }
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| super::query_value(query, "since"));
    if let Some(cursor) = resume.filter(|c| !c.is_empty()) {
        request.metadata.insert("since".into(), cursor);
    }
    if let Some(coalesce) = super::query_value(query, "coalesce") {
        request.metadata.insert("coalesce".into(), coalesce);
    }
    let context = WatchContext {
        connection: None,
        peer,
        draining,
    };
    let watch = match handlers::open_watch(world, request, &context).await {
        Ok(watch) => watch,
        Err(response) => {
            let code = crate::http::status_code(&response);
            let mut http = HttpResponse::new(Body::from(response.body));
            *http.status_mut() = code;
            http.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            return http;
        }
    };
    let mut first = true;
    let events = watch.into_stream().map(move |bytes| {
        let frame = match WatchBlock::parse(&bytes) {
            Ok(block) => {
                let frame = frame(&block, first);
                first = false;
                frame
            }
            Err(error) => format!(": unreadable block: {error}\n\n"),
        };
        Ok::<_, std::convert::Infallible>(frame)
    });
    let opening = futures::stream::once(async { Ok(format!("retry: {RETRY_MS}\n\n")) });
    let mut http = HttpResponse::new(Body::from_stream(opening.chain(events)));
    *http.status_mut() = StatusCode::OK;
    let headers = http.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    http
}

/// One block as an SSE frame.
pub(crate) fn frame(block: &WatchBlock, first: bool) -> String {
    let (id, event, data) = match block {
        WatchBlock::Event(event) => (
            Some(event.cursor.to_string()),
            "change".to_owned(),
            json!({
                "cursor": event.cursor.to_string(),
                "path": event.path,
                "version": event.version,
                "op": event.op,
                "hash": event.hash,
                "agent": event.agent,
            }),
        ),
        WatchBlock::Control { status, cursor } => {
            let name = match status {
                Status::Ok if first => "ready".to_owned(),
                Status::Ok => "heartbeat".to_owned(),
                other => other.as_str().to_owned(),
            };
            let cursor = cursor.as_ref().map(ToString::to_string);
            (cursor.clone(), name, json!({ "cursor": cursor }))
        }
    };
    let mut frame = String::new();
    if let Some(id) = id {
        frame.push_str(&format!("id: {id}\n"));
    }
    frame.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mark::{WatchCursor, WatchEvent};

    #[test]
    fn blocks_become_events_whose_id_is_the_cursor() {
        let cursor = WatchCursor::new("w", 7).unwrap();
        assert_eq!(
            frame(&WatchBlock::control(Status::Ok, cursor.clone()), true),
            "id: w:7\nevent: ready\ndata: {\"cursor\":\"w:7\"}\n\n"
        );
        assert!(
            frame(&WatchBlock::control(Status::Ok, cursor.clone()), false)
                .contains("event: heartbeat")
        );
        assert!(
            frame(&WatchBlock::control(Status::Resync, cursor.clone()), false)
                .contains("event: resync")
        );
        let change = WatchBlock::Event(WatchEvent {
            cursor,
            path: "/a.md".into(),
            version: 2,
            op: "publish".into(),
            hash: None,
            agent: Some("bot".into()),
        });
        let text = frame(&change, false);
        assert!(
            text.starts_with("id: w:7\nevent: change\ndata: {"),
            "{text}"
        );
        assert!(text.contains("\"agent\":\"bot\""), "{text}");
        assert!(text.ends_with("}\n\n"));
    }
}
