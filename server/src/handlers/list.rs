//! LIST: one page of a directory's children, read-authorised per entry before paging, with a
//! cursor bound to the directory and the archive mode.
//!
//! A page examines at most [`MAX_EXAMINED`] entries, so a directory full of entries the
//! caller may not read costs a bounded amount per request. A page that stops there continues
//! after an entry the caller may not see: its cursor is sealed (encrypted and authenticated
//! with a key this process drew at random), so it names nothing to the caller.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use quire_backend::{DirEntry, ErrorKind, ListOptions};

use super::{
    Call, ViewGuard, backend_error, bad_request, canonical, denied, escape_link, escape_markdown,
    hash_path, not_found,
};
use crate::mark::{MAX_BODY, Response, Status};

/// The largest page, and the default.
pub(super) const MAX_PAGE_SIZE: usize = 1000;
/// The most directory entries one page examines, readable or not.
pub const MAX_EXAMINED: usize = 10_000;
/// The fewest entries one store read asks for (a page of one still reads a useful window).
const MIN_WINDOW: usize = 256;
const CURSOR_VERSION: u8 = 1;
const SEALED_CURSOR_VERSION: u8 = 2;
const FLAG_INCLUDE_ARCHIVED: u8 = 1;
const NONCE_LEN: usize = 16;
const TAG_LEN: usize = 16;
const TRUNCATED_NOTE: &str = "\n*...truncated, too many entries*\n";

pub(super) async fn list(call: &Call<'_>) -> Response {
    let raw = call.request.path.as_str();
    let Some(dir) = canonical(raw) else {
        return not_found(raw);
    };
    let page_size = match call.meta("page-size") {
        None => MAX_PAGE_SIZE,
        Some(text) => match text.parse::<usize>() {
            Ok(size) if (1..=MAX_PAGE_SIZE).contains(&size) => size,
            _ => return bad_request(&format!("page-size must be 1..{MAX_PAGE_SIZE}")),
        },
    };
    let include_archived = match call.meta("include-archived") {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return bad_request("include-archived must be true or false"),
    };
    let after = match call.meta("cursor") {
        None => String::new(),
        Some(cursor) => match decode_cursor(cursor, &dir, include_archived) {
            Some(after) => after,
            None => return bad_request("invalid cursor"),
        },
    };
    // A directory is judged as one (`/dir/`) however the request spells it.
    if let Err(denial) = call.may_read_directory(&dir) {
        return denied(denial);
    }
    if hash_path(&dir).is_some() {
        return not_found(&dir);
    }
    let view = match call.open_view().await {
        Ok(view) => view,
        Err(response) => return response,
    };
    match view.is_dir(&call.ctx, &dir).await {
        Ok(true) => {}
        Ok(false) => return not_found(&dir),
        Err(error) => return backend_error(&error, &dir),
    }
    let page = match read_page(call, &view, &dir, &after, page_size, include_archived).await {
        Ok(page) => page,
        Err(response) => return response,
    };
    let mut response = Response::new(Status::Ok)
        .with_meta("entries", page.entries.to_string())
        .with_meta("complete", page.next_after.is_none().to_string());
    match &page.next_after {
        None => {}
        Some(Continue::After(last)) => {
            response =
                response.with_meta("next-cursor", encode_cursor(&dir, include_archived, last));
        }
        Some(Continue::Hidden(last)) => {
            response = response.with_meta("next-cursor", seal_cursor(&dir, include_archived, last));
        }
    }
    response.with_body(page.body)
}

/// One generated page.
pub(super) struct ListPage {
    pub body: String,
    pub entries: usize,
    /// Where the next page starts, when more entries follow.
    pub next_after: Option<Continue>,
}

/// Where a next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Continue {
    /// After the last name shown.
    After(String),
    /// After an entry the caller may not see (the page examined [`MAX_EXAMINED`] entries).
    Hidden(String),
}

/// Reads up to `page_size` entries the caller may read after `after` and renders them.
pub(super) async fn read_page(
    call: &Call<'_>,
    view: &ViewGuard,
    dir: &str,
    after: &str,
    page_size: usize,
    include_archived: bool,
) -> Result<ListPage, Response> {
    let mut visible: Vec<DirEntry> = Vec::new();
    let mut cursor = after.to_owned();
    let mut exhausted = false;
    let mut examined = 0usize;
    // Ask for one more than the page so a full page knows whether more follow; keep reading
    // windows while auth filtering drops entries, up to MAX_EXAMINED entries.
    while visible.len() <= page_size && examined < MAX_EXAMINED {
        let options = ListOptions {
            after: cursor.clone(),
            limit: (page_size + 1).max(MIN_WINDOW).min(MAX_EXAMINED - examined),
            include_archived,
            include_hidden: false,
        };
        let window = match view.list_entries(&call.ctx, dir, &options).await {
            Ok(window) => window,
            Err(error) if error.kind() == ErrorKind::NotFound => return Err(not_found(dir)),
            Err(error) => return Err(backend_error(&error, dir)),
        };
        let short = window.len() < options.limit;
        examined += window.len();
        for entry in window {
            cursor = entry.name.clone();
            let child = child_path(dir, &entry);
            // A denied entry is dropped and does not count toward the page.
            if call.may_read(&child).is_ok() {
                visible.push(entry);
            }
        }
        if short {
            exhausted = true;
            break;
        }
    }
    let more = !exhausted || visible.len() > page_size;
    // Stopped by the examined cap, not by a full page: what follows the shown entries, up to
    // the last examined, is all unreadable.
    let capped = !exhausted && visible.len() <= page_size;
    visible.truncate(page_size);
    let shown_dir = if dir == "/" {
        "/".to_owned()
    } else {
        format!("{dir}/")
    };
    let mut body = format!("\n# Index of {}\n\n", escape_markdown(&shown_dir));
    let mut shown: usize = 0;
    let mut truncated = false;
    for entry in &visible {
        let shown_name = escape_markdown(&entry.name);
        let line = if entry.is_dir {
            format!("- [{shown_name}/]({}/)\n", escape_link(&entry.name, false))
        } else {
            format!("- [{shown_name}]({})\n", escape_link(&entry.name, false))
        };
        if shown > 0 && body.len() + line.len() + TRUNCATED_NOTE.len() > MAX_BODY {
            truncated = true;
            break;
        }
        body.push_str(&line);
        shown += 1;
    }
    if truncated {
        body.push_str(TRUNCATED_NOTE);
    }
    let next_after = if truncated {
        visible
            .get(shown.saturating_sub(1))
            .map(|e| Continue::After(e.name.clone()))
    } else if capped {
        Some(Continue::Hidden(cursor))
    } else if more {
        visible
            .get(shown.saturating_sub(1))
            .map(|e| Continue::After(e.name.clone()))
    } else {
        None
    };
    Ok(ListPage {
        body,
        entries: shown,
        next_after,
    })
}

/// The path read auth judges for an entry (a directory keeps a trailing `/`).
fn child_path(dir: &str, entry: &DirEntry) -> String {
    let base = if dir == "/" {
        format!("/{}", entry.name)
    } else {
        format!("{dir}/{}", entry.name)
    };
    if entry.is_dir {
        format!("{base}/")
    } else {
        base
    }
}

/// `base64url(version, flags, u16 dir length, dir, last name)`.
pub(super) fn encode_cursor(dir: &str, include_archived: bool, last: &str) -> String {
    let mut bytes = Vec::with_capacity(4 + dir.len() + last.len());
    bytes.push(CURSOR_VERSION);
    bytes.push(if include_archived {
        FLAG_INCLUDE_ARCHIVED
    } else {
        0
    });
    bytes.extend_from_slice(&(dir.len() as u16).to_be_bytes());
    bytes.extend_from_slice(dir.as_bytes());
    bytes.extend_from_slice(last.as_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The key this process seals cursors with, drawn once.
fn sealing_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        use rand::TryRngCore;
        let mut key = [0u8; 32];
        if rand::rngs::OsRng.try_fill_bytes(&mut key).is_err() {
            // No OS randomness: a key no client can know still (time and process).
            #[allow(
                clippy::disallowed_methods,
                reason = "key material when the OS has no randomness, not a clock read"
            )]
            let seed = format!("{:?} {}", std::time::SystemTime::now(), std::process::id());
            key = *blake3::hash(seed.as_bytes()).as_bytes();
        }
        key
    })
}

/// `name` XOR a keystream for `nonce`: sealing and opening are the same operation.
fn keystream_xor(nonce: &[u8], name: &[u8]) -> Vec<u8> {
    let mut stream = blake3::Hasher::new_keyed(sealing_key());
    stream.update(b"quire list cursor stream");
    stream.update(nonce);
    let mut pad = vec![0u8; name.len()];
    stream.finalize_xof().fill(&mut pad);
    name.iter().zip(pad).map(|(a, b)| a ^ b).collect()
}

fn cursor_tag(sealed: &[u8]) -> [u8; TAG_LEN] {
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&blake3::keyed_hash(sealing_key(), sealed).as_bytes()[..TAG_LEN]);
    tag
}

/// A cursor continuing after `last`, a name the caller may not see:
/// `base64url(2, flags, u16 dir length, dir, nonce, name sealed, tag)`.
fn seal_cursor(dir: &str, include_archived: bool, last: &str) -> String {
    static NEXT_NONCE: AtomicU64 = AtomicU64::new(0);
    let mut nonce = [0u8; NONCE_LEN];
    nonce[..8].copy_from_slice(&NEXT_NONCE.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    let mut bytes = Vec::with_capacity(4 + dir.len() + NONCE_LEN + last.len() + TAG_LEN);
    bytes.push(SEALED_CURSOR_VERSION);
    bytes.push(if include_archived {
        FLAG_INCLUDE_ARCHIVED
    } else {
        0
    });
    bytes.extend_from_slice(&(dir.len() as u16).to_be_bytes());
    bytes.extend_from_slice(dir.as_bytes());
    bytes.extend_from_slice(&nonce);
    bytes.extend_from_slice(&keystream_xor(&nonce, last.as_bytes()));
    let tag = cursor_tag(&bytes);
    bytes.extend_from_slice(&tag);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The name a sealed cursor continues after, when this process sealed it (`sealed` is the
/// whole cursor; `rest` is what follows the directory).
fn open_sealed(sealed: &[u8], rest: &[u8]) -> Option<String> {
    use subtle::ConstantTimeEq;
    if rest.len() < NONCE_LEN + TAG_LEN {
        return None;
    }
    let (body, tag) = sealed.split_at(sealed.len() - TAG_LEN);
    if !bool::from(cursor_tag(body).ct_eq(tag)) {
        return None;
    }
    let (nonce, name) = rest[..rest.len() - TAG_LEN].split_at(NONCE_LEN);
    String::from_utf8(keystream_xor(nonce, name)).ok()
}

/// The name to continue after, when the cursor was made for this directory and mode (a
/// sealed one, by this process).
pub(super) fn decode_cursor(cursor: &str, dir: &str, include_archived: bool) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let (&version, rest) = bytes.split_first()?;
    let (&flags, rest) = rest.split_first()?;
    if !matches!(version, CURSOR_VERSION | SEALED_CURSOR_VERSION) || rest.len() < 2 {
        return None;
    }
    let length = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
    let rest = &rest[2..];
    if rest.len() < length || &rest[..length] != dir.as_bytes() {
        return None;
    }
    if (flags == FLAG_INCLUDE_ARCHIVED) != include_archived || flags > FLAG_INCLUDE_ARCHIVED {
        return None;
    }
    let last = if version == SEALED_CURSOR_VERSION {
        open_sealed(&bytes, &rest[length..])?
    } else {
        String::from_utf8(rest[length..].to_vec()).ok()?
    };
    (!last.is_empty()).then_some(last)
}
