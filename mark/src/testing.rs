//! Helpers the unit tests of every module share.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use proptest::prelude::*;
use tokio::io::{AsyncRead, ReadBuf};

use crate::*;

/// 512 cases unless PROPTEST_CASES asks for another count.
pub(crate) fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(512),
        ..ProptestConfig::default()
    }
}

pub(crate) fn parse_err(bytes: &[u8]) -> Error {
    Request::parse(bytes).expect_err("request should be refused")
}

pub(crate) fn assert_malformed(bytes: &[u8], detail_contains: &str) {
    let error = parse_err(bytes);
    assert_eq!(error.kind(), ErrorKind::Malformed, "{error}");
    assert_eq!(error.status(), Status::BadRequest);
    assert!(
        error.detail().contains(detail_contains),
        "{:?} should mention {detail_contains:?}",
        error.detail()
    );
}

pub(crate) fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(crate) fn block_of(line: &str) -> Result<Metadata, Error> {
    Request::parse(format!("PUBLISH /a.md\n---\n{line}\n---\n").as_bytes())
        .map(|request| request.metadata)
}

/// Hands out at most `chunk` bytes per read.
pub(crate) struct Chunked {
    pub(crate) data: Vec<u8>,
    pub(crate) at: usize,
    pub(crate) chunk: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let take = this
            .chunk
            .min(this.data.len() - this.at)
            .min(buf.remaining());
        buf.put_slice(&this.data[this.at..this.at + take]);
        this.at += take;
        Poll::Ready(Ok(()))
    }
}

/// Yields its bytes, then fails.
pub(crate) struct FailsAfter(pub(crate) Vec<u8>);

impl AsyncRead for FailsAfter {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.0.is_empty() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset")));
        }
        buf.put_slice(&std::mem::take(&mut this.0));
        Poll::Ready(Ok(()))
    }
}

pub(crate) fn any_text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
}

pub(crate) fn any_path() -> impl Strategy<Value = String> {
    // Characters the path grammar refuses become `x` (mapping, not filtering, so long
    // runs never exhaust proptest's reject budget).
    proptest::collection::vec(
        any::<char>().prop_map(|c| {
            if (c < ' ' && c != '\t') || c == '\u{7f}' {
                'x'
            } else {
                c
            }
        }),
        0..40,
    )
    .prop_map(|chars| format!("/{}", String::from_iter(chars)))
}

pub(crate) fn any_body() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(fenced, mut body)| {
            if fenced {
                let mut with_fence = b"---\n".to_vec();
                with_fence.append(&mut body);
                with_fence
            } else {
                body
            }
        })
}

pub(crate) fn any_request() -> impl Strategy<Value = Request> {
    (
        proptest::sample::select(Verb::ALL.to_vec()),
        any_path(),
        proptest::collection::btree_map(any_text(12), any_text(24), 0..8),
        any_body(),
    )
        .prop_map(|(verb, path, metadata, body)| Request {
            verb,
            path,
            metadata,
            body: Bytes::from(body),
        })
}
