//! What the fuzz targets share: a reader that hands an input over in the chunk sizes the
//! fuzzer chose, so the streaming decoders are judged against the whole-buffer ones.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Reads `data` at most `chunk` bytes at a time.
#[derive(Debug)]
pub struct Chunked<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl<'a> Chunked<'a> {
    pub fn new(data: &'a [u8], chunk: usize) -> Chunked<'a> {
        Chunked {
            data,
            chunk: chunk.max(1),
        }
    }
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.chunk.min(self.data.len()).min(buf.remaining());
        let (head, rest) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = rest;
        Poll::Ready(Ok(()))
    }
}

/// Splits off the first byte as a chunk size of 1 to 64.
pub fn chunk_and_rest(data: &[u8]) -> Option<(usize, &[u8])> {
    let (&first, rest) = data.split_first()?;
    Some((usize::from(first % 64) + 1, rest))
}

/// Splits off a big-endian u64 (missing bytes are zero).
pub fn take_u64(data: &[u8]) -> (u64, &[u8]) {
    let n = data.len().min(8);
    let mut word = [0u8; 8];
    word[8 - n..].copy_from_slice(&data[..n]);
    (u64::from_be_bytes(word), &data[n..])
}

/// The input as text split at NUL characters, or `None` when it is not UTF-8.
pub fn fields(data: &[u8]) -> Option<Vec<&str>> {
    std::str::from_utf8(data)
        .ok()
        .map(|text| text.split('\0').collect())
}
