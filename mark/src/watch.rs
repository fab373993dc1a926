//! WATCH blocks: a response stream of fenced metadata blocks without bodies, their cursors,
//! and the decoder that splits a byte stream into blocks however it is chunked.

use std::fmt;
use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::metadata::{CLOSING_FENCE, FENCE, find, is_break, parse_block};
use crate::{Error, ErrorKind, Metadata, Op, Status, encode_metadata_block};

/// The longest WATCH block, fences included.
pub const MAX_WATCH_BLOCK: usize = 8192;
/// The longest cursor epoch.
pub const MAX_EPOCH: usize = 64;

/// A position in a world's change feed: `<epoch>:<sequence>`. The epoch (1 to
/// [`MAX_EPOCH`] characters of `[A-Za-z0-9._-]`) names the sequence space; the sequence is
/// decimal without leading zeros, so every cursor reads back as the text it was written as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WatchCursor {
    epoch: String,
    pub sequence: u64,
}

impl WatchCursor {
    /// A cursor; `None` when the epoch breaks the grammar.
    pub fn new(epoch: impl Into<String>, sequence: u64) -> Option<WatchCursor> {
        let epoch = epoch.into();
        valid_epoch(&epoch).then_some(WatchCursor { epoch, sequence })
    }

    /// The cursor written as `text`, if it is one.
    pub fn parse(text: &str) -> Option<WatchCursor> {
        let (epoch, sequence) = text.rsplit_once(':')?;
        let canonical = sequence == "0"
            || (!sequence.is_empty()
                && !sequence.starts_with('0')
                && sequence.bytes().all(|b| b.is_ascii_digit()));
        if !canonical {
            return None;
        }
        WatchCursor::new(epoch, sequence.parse().ok()?)
    }

    pub fn epoch(&self) -> &str {
        &self.epoch
    }
}

impl fmt::Display for WatchCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.epoch, self.sequence)
    }
}

fn valid_epoch(epoch: &str) -> bool {
    (1..=MAX_EPOCH).contains(&epoch.len())
        && epoch
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// One committed change as a WATCH event block carries it (no `status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// Resume after this event with it.
    pub cursor: WatchCursor,
    pub path: String,
    /// The version created (for an archive: the current one).
    pub version: u64,
    /// `publish`, `append` or `archive`; clients skip operations they do not know.
    pub op: String,
    /// The content hash of that version.
    pub hash: Option<String>,
    pub agent: Option<String>,
}

/// One block of a WATCH stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchBlock {
    /// A block with a `status`: the acknowledgement and heartbeats (`ok`), or a terminal
    /// (`resync`, `closing`, `unauthorized`, `not-permitted`, …) ending the stream.
    Control {
        status: Status,
        cursor: Option<WatchCursor>,
    },
    /// A change.
    Event(WatchEvent),
}

impl WatchBlock {
    pub fn control(status: Status, cursor: WatchCursor) -> WatchBlock {
        WatchBlock::Control {
            status,
            cursor: Some(cursor),
        }
    }

    /// Whether the stream ends after this block: a control block whose status is not `ok`.
    pub fn is_terminal(&self) -> bool {
        matches!(self, WatchBlock::Control { status, .. } if *status != Status::Ok)
    }

    /// The block's cursor, if it carries one.
    pub fn cursor(&self) -> Option<&WatchCursor> {
        match self {
            WatchBlock::Control { cursor, .. } => cursor.as_ref(),
            WatchBlock::Event(event) => Some(&event.cursor),
        }
    }

    fn key(&self) -> String {
        match self {
            WatchBlock::Event(event) => event.path.clone(),
            WatchBlock::Control { cursor, .. } => {
                cursor.as_ref().map(ToString::to_string).unwrap_or_default()
            }
        }
    }

    /// The block's bytes, fences included. Refused: a value holding a line break
    /// ([`ErrorKind::Malformed`]) and a block over [`MAX_WATCH_BLOCK`] bytes
    /// ([`ErrorKind::TooLarge`]).
    pub fn encode(&self) -> Result<Bytes, Error> {
        let mut metadata = Metadata::new();
        match self {
            WatchBlock::Control { status, cursor } => {
                metadata.insert("status".into(), status.as_str().into());
                if let Some(cursor) = cursor {
                    metadata.insert("cursor".into(), cursor.to_string());
                }
            }
            WatchBlock::Event(event) => {
                metadata.insert("cursor".into(), event.cursor.to_string());
                metadata.insert("path".into(), event.path.clone());
                metadata.insert("version".into(), event.version.to_string());
                metadata.insert("op".into(), event.op.clone());
                if let Some(hash) = &event.hash {
                    metadata.insert("hash".into(), hash.clone());
                }
                if let Some(agent) = &event.agent {
                    metadata.insert("agent".into(), agent.clone());
                }
            }
        }
        let fail =
            |kind, detail: String| Error::new(Op::EncodeWatchBlock, self.key(), kind, detail);
        if let Some((key, _)) = metadata.iter().find(|(_, v)| v.chars().any(is_break)) {
            return Err(fail(
                ErrorKind::Malformed,
                format!("value of {key:?} holds a line break"),
            ));
        }
        let block = encode_metadata_block(&metadata);
        if block.len() > MAX_WATCH_BLOCK {
            return Err(fail(
                ErrorKind::TooLarge,
                format!("block of {} bytes exceeds {MAX_WATCH_BLOCK}", block.len()),
            ));
        }
        Ok(Bytes::from(block))
    }

    /// Reads one whole block (fences included). Unknown keys are ignored; a block with a
    /// `status` is a control block, any other needs `cursor`, `path`, `version` and `op`.
    pub fn parse(bytes: &[u8]) -> Result<WatchBlock, Error> {
        let fail =
            |detail: String| Error::new(Op::ParseWatchBlock, "", ErrorKind::Malformed, detail);
        if bytes.len() > MAX_WATCH_BLOCK {
            return Err(Error::new(
                Op::ParseWatchBlock,
                "",
                ErrorKind::TooLarge,
                format!("block of {} bytes exceeds {MAX_WATCH_BLOCK}", bytes.len()),
            ));
        }
        let text = bytes
            .strip_prefix(FENCE)
            .and_then(|rest| {
                if rest == FENCE {
                    Some(&rest[..0])
                } else {
                    rest.strip_suffix(CLOSING_FENCE)
                }
            })
            .ok_or_else(|| fail("a block is `---` lines around metadata".into()))?;
        let text =
            std::str::from_utf8(text).map_err(|_| fail("block is not valid UTF-8".into()))?;
        let mut metadata = parse_block(text).map_err(|detail| fail(format!("block {detail}")))?;
        let cursor = match metadata.remove("cursor") {
            None => None,
            Some(text) => Some(
                WatchCursor::parse(&text)
                    .ok_or_else(|| fail(format!("invalid cursor {text:?}")))?,
            ),
        };
        if let Some(status) = metadata.remove("status") {
            let status = Status::from_name(&status)
                .ok_or_else(|| fail(format!("unknown status {status:?}")))?;
            return Ok(WatchBlock::Control { status, cursor });
        }
        let mut take = |key: &str| {
            metadata
                .remove(key)
                .ok_or_else(|| fail(format!("event block has no {key}")))
        };
        let cursor = cursor.ok_or_else(|| fail("event block has no cursor".into()))?;
        let path = take("path")?;
        let version = take("version")?;
        let op = take("op")?;
        let version = version
            .parse()
            .map_err(|_| fail(format!("invalid version {version:?}")))?;
        Ok(WatchBlock::Event(WatchEvent {
            cursor,
            path,
            version,
            op,
            hash: metadata.remove("hash"),
            agent: metadata.remove("agent"),
        }))
    }
}

/// Splits a WATCH byte stream into blocks, whatever the transport's chunking.
#[derive(Debug, Default)]
pub struct WatchDecoder {
    buf: Vec<u8>,
}

impl WatchDecoder {
    pub fn new() -> WatchDecoder {
        WatchDecoder::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole block, or `None` until more bytes arrive.
    pub fn next_block(&mut self) -> Result<Option<WatchBlock>, Error> {
        let shown = FENCE.len().min(self.buf.len());
        if self.buf[..shown] != FENCE[..shown] {
            return Err(Error::new(
                Op::ParseWatchBlock,
                "",
                ErrorKind::Malformed,
                "a block does not start with a `---` line",
            ));
        }
        let end = if self.buf.len() < FENCE.len() {
            None
        } else {
            find(&self.buf[FENCE.len() - 1..], CLOSING_FENCE)
                .map(|at| FENCE.len() - 1 + at + CLOSING_FENCE.len())
        };
        match end {
            Some(end) => {
                let block = WatchBlock::parse(&self.buf[..end]);
                self.buf.drain(..end);
                block.map(Some)
            }
            None if self.buf.len() >= MAX_WATCH_BLOCK => Err(Error::new(
                Op::ParseWatchBlock,
                "",
                ErrorKind::TooLarge,
                format!("block exceeds {MAX_WATCH_BLOCK} bytes"),
            )),
            None => Ok(None),
        }
    }

    /// Whether bytes of an unfinished block are held (a stream ending now was cut short).
    pub fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// Reads the next block from `reader` (client side); `None` at a clean end of the stream.
pub async fn read_watch_block<R>(
    reader: &mut R,
    decoder: &mut WatchDecoder,
) -> Result<Option<WatchBlock>, Error>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let mut chunk = vec![0u8; 1024];
    loop {
        if let Some(block) = decoder.next_block()? {
            return Ok(Some(block));
        }
        let read = match reader.read(&mut chunk).await {
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(Error::read(Op::ReadWatchBlock, "", error)),
        };
        if read == 0 {
            if decoder.has_partial() {
                return Err(Error::new(
                    Op::ReadWatchBlock,
                    "",
                    ErrorKind::Malformed,
                    "the stream ended inside a block",
                ));
            }
            return Ok(None);
        }
        decoder.push(&chunk[..read]);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::*;

    /// The blocks of a WATCH stream pushed `chunk` bytes at a time, and whether it failed.
    fn watch_blocks(bytes: &[u8], chunk: usize) -> (Vec<WatchBlock>, bool) {
        let mut decoder = WatchDecoder::new();
        let mut blocks = Vec::new();
        for piece in bytes.chunks(chunk.max(1)) {
            decoder.push(piece);
            loop {
                match decoder.next_block() {
                    Ok(Some(block)) => blocks.push(block),
                    Ok(None) => break,
                    Err(_) => return (blocks, true),
                }
            }
        }
        (blocks, false)
    }

    fn event(sequence: u64, path: &str) -> WatchBlock {
        WatchBlock::Event(WatchEvent {
            cursor: WatchCursor::new("w1", sequence).unwrap(),
            path: path.into(),
            version: 3,
            op: "publish".into(),
            hash: Some(format!("blake3-{}", "ab".repeat(32))),
            agent: None,
        })
    }

    #[test]
    fn watch_blocks_encode_as_sorted_fenced_metadata_and_read_back() {
        let block = event(12, "/docs/a.md");
        let bytes = block.encode().unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert_eq!(
            text,
            format!(
                "---\ncursor: w1:12\nhash: blake3-{}\nop: publish\npath: /docs/a.md\nversion: \"3\"\n---\n",
                "ab".repeat(32)
            )
        );
        assert_eq!(WatchBlock::parse(&bytes).unwrap(), block);
        assert!(!block.is_terminal());

        let ack = WatchBlock::control(Status::Ok, WatchCursor::new("w1", 0).unwrap());
        assert_eq!(
            &ack.encode().unwrap()[..],
            b"---\ncursor: w1:0\nstatus: ok\n---\n"
        );
        let resync = WatchBlock::control(Status::Resync, WatchCursor::new("w1", 9).unwrap());
        assert!(resync.is_terminal() && !ack.is_terminal());
        assert_eq!(
            WatchBlock::parse(&resync.encode().unwrap()).unwrap(),
            resync
        );
    }

    #[test]
    fn watch_blocks_ignore_unknown_keys_and_refuse_what_is_not_a_block() {
        let parsed = WatchBlock::parse(
            b"---\ncursor: e:4\nop: rename\npath: /a.md\nversion: \"1\"\nnew-key: x\n---\n",
        )
        .unwrap();
        let WatchBlock::Event(parsed) = parsed else {
            panic!("an event: {parsed:?}")
        };
        assert_eq!((parsed.op.as_str(), parsed.hash), ("rename", None));
        let control = WatchBlock::parse(b"---\nstatus: closing\nretry: soon\n---\n").unwrap();
        assert_eq!(
            control,
            WatchBlock::Control {
                status: Status::Closing,
                cursor: None
            }
        );
        for bad in [
            &b"cursor: e:1\n"[..],
            b"---\npath: /a.md\nversion: \"1\"\nop: publish\n---\n",
            b"---\ncursor: e:1\npath: /a.md\nop: publish\n---\n",
            b"---\ncursor: e:01\npath: /a.md\nversion: \"1\"\nop: publish\n---\n",
            b"---\ncursor: e:1\npath: /a.md\nversion: one\nop: publish\n---\n",
            b"---\nstatus: fine\n---\n",
        ] {
            let error = WatchBlock::parse(bad).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Malformed, "{error}");
            assert_eq!(error.op(), Op::ParseWatchBlock);
        }
    }

    #[test]
    fn watch_blocks_over_the_limit_or_with_line_breaks_are_refused() {
        let mut big = event(1, "/a.md");
        if let WatchBlock::Event(event) = &mut big {
            event.agent = Some("x".repeat(MAX_WATCH_BLOCK));
        }
        let error = big.encode().unwrap_err();
        assert_eq!(
            (error.kind(), error.op(), error.key()),
            (ErrorKind::TooLarge, Op::EncodeWatchBlock, "/a.md")
        );
        let mut broken = event(1, "/a.md");
        if let WatchBlock::Event(event) = &mut broken {
            event.agent = Some("two\nlines".into());
        }
        assert_eq!(broken.encode().unwrap_err().kind(), ErrorKind::Malformed);

        let mut fits = event(1, "/a.md");
        let overhead = fits.encode().unwrap().len() + "agent: \n".len();
        if let WatchBlock::Event(event) = &mut fits {
            event.agent = Some("y".repeat(MAX_WATCH_BLOCK - overhead));
        }
        assert_eq!(fits.encode().unwrap().len(), MAX_WATCH_BLOCK);
    }

    #[test]
    fn watch_cursors_round_trip_and_follow_the_grammar() {
        for good in ["e:0", "e:7", "A.b_c-9:18446744073709551615"] {
            assert_eq!(WatchCursor::parse(good).unwrap().to_string(), good);
        }
        let longest = format!("{}:1", "e".repeat(MAX_EPOCH));
        assert!(WatchCursor::parse(&longest).is_some());
        for bad in [
            "",
            "e",
            ":1",
            "e:",
            "e:01",
            "e:+1",
            "e:-1",
            "e: 1",
            "a b:1",
            "é:1",
            "e:18446744073709551616",
        ] {
            assert_eq!(WatchCursor::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            WatchCursor::parse(&format!("{}:1", "e".repeat(MAX_EPOCH + 1))),
            None
        );
        assert_eq!(WatchCursor::new("", 1), None);
    }

    #[test]
    fn the_watch_decoder_splits_any_chunking_into_the_same_blocks() {
        let blocks = vec![
            WatchBlock::control(Status::Ok, WatchCursor::new("w", 2).unwrap()),
            event(3, "/a.md"),
            event(4, "/docs/b.md"),
            WatchBlock::control(Status::Closing, WatchCursor::new("w", 4).unwrap()),
        ];
        let stream: Vec<u8> = blocks
            .iter()
            .flat_map(|block| block.encode().unwrap().to_vec())
            .collect();
        for chunk in 1..=stream.len() {
            let mut decoder = WatchDecoder::new();
            let mut seen = Vec::new();
            for piece in stream.chunks(chunk) {
                decoder.push(piece);
                while let Some(block) = decoder.next_block().unwrap() {
                    seen.push(block);
                }
            }
            assert!(!decoder.has_partial());
            assert_eq!(seen, blocks, "chunks of {chunk}");
        }
        let mut decoder = WatchDecoder::new();
        decoder.push(b"status: ok\n");
        assert_eq!(
            decoder.next_block().unwrap_err().kind(),
            ErrorKind::Malformed
        );
        let mut decoder = WatchDecoder::new();
        decoder.push(b"---\n");
        decoder.push(&vec![b'a'; MAX_WATCH_BLOCK]);
        assert_eq!(
            decoder.next_block().unwrap_err().kind(),
            ErrorKind::TooLarge
        );
    }

    #[tokio::test]
    async fn read_watch_block_reads_blocks_until_the_stream_ends() {
        let mut stream: Vec<u8> = event(5, "/a.md").encode().unwrap().to_vec();
        stream.extend_from_slice(&event(6, "/b.md").encode().unwrap());
        let mut reader = &stream[..];
        let mut decoder = WatchDecoder::new();
        let first = read_watch_block(&mut reader, &mut decoder).await.unwrap();
        assert_eq!(first, Some(event(5, "/a.md")));
        let second = read_watch_block(&mut reader, &mut decoder).await.unwrap();
        assert_eq!(second, Some(event(6, "/b.md")));
        assert_eq!(
            read_watch_block(&mut reader, &mut decoder).await.unwrap(),
            None
        );
        let cut = &stream[..10];
        let mut reader = cut;
        let error = read_watch_block(&mut reader, &mut WatchDecoder::new())
            .await
            .unwrap_err();
        assert_eq!(
            (error.kind(), error.op()),
            (ErrorKind::Malformed, Op::ReadWatchBlock)
        );
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config())]

        #[test]
        fn watch_streams_decode_alike_in_any_chunking_and_blocks_read_back(
            bytes in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..256),
                (any_path(), 0u64..1000, proptest::option::of("[ -~]{0,16}")).prop_map(
                    |(path, sequence, agent)| {
                        let block = WatchBlock::Event(WatchEvent {
                            cursor: WatchCursor::new("e1", sequence).unwrap(),
                            path,
                            version: 1,
                            op: "publish".into(),
                            hash: None,
                            agent,
                        });
                        let mut stream = block.encode().map(|b| b.to_vec()).unwrap_or_default();
                        stream.extend_from_slice(
                            &WatchBlock::control(Status::Ok, WatchCursor::new("e1", 9).unwrap())
                                .encode()
                                .unwrap(),
                        );
                        stream
                    },
                ),
            ],
            chunk in 1usize..64,
        ) {
            let (chunked, chunked_failed) = watch_blocks(&bytes, chunk);
            let (whole, whole_failed) = watch_blocks(&bytes, bytes.len().max(1));
            prop_assert_eq!(&chunked, &whole);
            prop_assert_eq!(chunked_failed, whole_failed);
            for block in whole {
                let encoded = block.encode().unwrap();
                prop_assert_eq!(WatchBlock::parse(&encoded).unwrap(), block);
            }
        }
    }
}
