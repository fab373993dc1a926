//! The one reader of a ranged answer's `Content-Range`, for the drivers that speak HTTP.

use std::ops::Range;

use crate::{Error, ErrorKind, Op, Result};

/// Checks a 206 answer against the range asked for: `Content-Range: bytes A-B/T` (or `A-B/*`
/// when the total is unknown), cut at the object's end. A missing header is accepted (some
/// stores leave it out); the byte count is still checked.
pub(crate) fn check_partial(
    key: &str,
    range: &Range<u64>,
    content_range: Option<&str>,
    received: u64,
) -> Result<()> {
    let integrity = |why: String| Error::new(Op::GetRange, key, ErrorKind::Integrity, why);
    let asked = range.end - range.start;
    if received == 0 || received > asked {
        return Err(integrity(format!(
            "asked for {asked} bytes from {}, received {received}",
            range.start
        )));
    }
    let Some(text) = content_range else {
        return Ok(());
    };
    let parsed = text.strip_prefix("bytes ").and_then(|rest| {
        let (span, total) = rest.split_once('/')?;
        let (first, last) = span.split_once('-')?;
        let total = match total {
            "*" => None,
            number => Some(number.parse::<u64>().ok()?),
        };
        Some((first.parse::<u64>().ok()?, last.parse::<u64>().ok()?, total))
    });
    let Some((first, last, total)) = parsed else {
        return Err(integrity(format!("unreadable Content-Range {text:?}")));
    };
    // With the total known, the answer must reach the range's end or the object's.
    let reaches_end = total.is_none_or(|total| last + 1 == range.end.min(total));
    if first != range.start || last < first || last + 1 > range.end || !reaches_end {
        return Err(integrity(format!(
            "Content-Range {text:?} does not answer bytes {}..{}",
            range.start, range.end
        )));
    }
    if last - first + 1 != received {
        return Err(integrity(format!(
            "Content-Range {text:?} but {received} bytes received"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_answers_must_hold_the_asked_range() {
        check_partial("k", &(10..20), Some("bytes 10-19/100"), 10).unwrap();
        check_partial("k", &(95..200), Some("bytes 95-99/100"), 5).unwrap();
        check_partial("k", &(10..20), Some("bytes 10-19/*"), 10).unwrap();
        for (content_range, received) in [
            ("bytes 10-19/100", 9),
            ("bytes 11-20/100", 10),
            ("bytes 10-29/100", 20),
            ("garbage", 10),
        ] {
            let err = check_partial("k", &(10..20), Some(content_range), received).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Integrity, "{content_range}");
        }
    }

    #[test]
    fn partial_answers_must_match_the_range() {
        check_partial("k", &(2..5), Some("bytes 2-4/11"), 3).unwrap();
        check_partial("k", &(995..2000), Some("bytes 995-999/1000"), 5).unwrap();
        check_partial("k", &(0..10), None, 10).unwrap();
        for (range, header, received) in [
            (2..5, Some("bytes 3-5/11"), 3),
            (2..5, Some("bytes 2-4/11"), 2),
            (995..2000, Some("bytes 995-998/1000"), 4),
            (0..10, Some("garbage"), 10),
            (0..10, None, 11),
            (0..10, None, 0),
        ] {
            let err = check_partial("k", &range, header, received).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Integrity, "{range:?} {header:?}");
        }
    }
}
