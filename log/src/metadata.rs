//! Publisher metadata: the rules a write's metadata must meet, its normal form, the append
//! merge, and the catalog record derived from metadata and body.
//!
//! Rules (normal form is what gets stored; two writes are equal when their normal forms are):
//! - keys are non-empty, start with a lowercase letter or digit and continue with lowercase
//!   letters, digits, `-` or `.`; the store's own names ([`RESERVED_KEYS`]) are refused;
//! - values hold no control character other than tab (so no line breaks);
//! - `tags` is a comma list: each tag trimmed, empty tags dropped, joined with `,`
//!   (`" alpha, beta "` → `alpha,beta`); a list with no tag drops the key;
//! - `retention` is a positive decimal without sign or leading zeros, at most `u32::MAX`;
//! - at most [`MAX_KEYS`] keys and [`MAX_BYTES`] bytes, counted in the stored form (a bare or
//!   `meta.`-prefixed key plus its value, tags as a `[a, b]` list), so what is accepted
//!   always fits the stored frontmatter.
//!
//! `importance` and `title` are stored as given and only interpreted for the catalog.
//!
//! A new write meets one rule more ([`check_new`]): its values hold none of the characters
//! that readers of the stored frontmatter or of the wire take as a line break or as
//! invisible (C1 controls, NEL, U+2028, U+2029, U+FEFF), so every value stored from now on
//! reads back on every transport as written. The rule applies at write time only: a value
//! stored before it keeps reading back.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::path::DocPath;

/// Publisher metadata: a flat map of string keys to string values.
pub type Metadata = BTreeMap<String, String>;

/// The most keys a version's metadata may hold.
pub const MAX_KEYS: usize = 50;
/// The most bytes a version's metadata may take in its stored form.
pub const MAX_BYTES: usize = 1024;
/// Keys the store writes itself; publishers may not set them.
pub const RESERVED_KEYS: [&str; 3] = ["version", "archived", "previous-hash"];
/// Request keys that steer a request and are never stored (the handler strips them).
pub const CONTROL_KEYS: [&str; 4] = [
    "auth",
    "expected-version",
    "if-none-match",
    "if-modified-since",
];
/// Metadata names stored bare in the frontmatter, in this order; every other key is stored
/// with a `meta.` prefix.
pub const OKF_KEYS: [&str; 6] = [
    "type",
    "title",
    "description",
    "resource",
    "tags",
    "timestamp",
];
/// The importance of a document that declares none (or an unusable one).
pub const DEFAULT_IMPORTANCE: &str = "0.5";

fn key_is_valid(key: &str) -> bool {
    let mut chars = key.chars();
    match chars.next() {
        Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit() => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

pub(crate) fn value_is_valid(value: &str) -> bool {
    !value
        .chars()
        .any(|c| (c < ' ' && c != '\t') || c == '\u{7f}')
}

/// Whether `c` may appear in a newly written value or path (see [`check_new`]): no control
/// character (tab aside), no DEL, no C1 control (NEL included), no line or paragraph
/// separator and no byte-order mark.
pub fn is_writable_char(c: char) -> bool {
    !((c < ' ' && c != '\t')
        || ('\u{7f}'..='\u{9f}').contains(&c)
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}'))
}

/// The write-time rule beyond [`normalize`]: every value holds only characters
/// [`is_writable_char`] allows. The error names the key and the character.
pub fn check_new(meta: &Metadata) -> Result<(), String> {
    for (key, value) in meta {
        if let Some(bad) = value.chars().find(|&c| !is_writable_char(c)) {
            return Err(format!(
                "metadata value of {key:?} holds the character U+{:04X}, which is not allowed",
                u32::from(bad)
            ));
        }
    }
    Ok(())
}

/// Normalises a tag list: trimmed, empties dropped, joined with `,`.
pub fn normalize_tags(raw: &str) -> String {
    split_tags(raw).collect::<Vec<_>>().join(",")
}

/// The tags of a (normalised or raw) tag list.
pub fn split_tags(raw: &str) -> impl Iterator<Item = &str> {
    raw.split(',').map(str::trim).filter(|t| !t.is_empty())
}

/// Whether `key` is stored bare (an OKF name) rather than with the `meta.` prefix.
pub fn is_okf_key(key: &str) -> bool {
    OKF_KEYS.contains(&key)
}

/// The stored value of `key`: tags as a `[a, b]` list, everything else verbatim.
pub(crate) fn stored_value(key: &str, value: &str) -> String {
    if key == "tags" {
        format!("[{}]", split_tags(value).collect::<Vec<_>>().join(", "))
    } else {
        value.to_owned()
    }
}

/// How many bytes `meta` takes in the stored frontmatter (keys and values, no punctuation).
pub fn stored_size(meta: &Metadata) -> usize {
    meta.iter()
        .map(|(k, v)| {
            let prefix = if is_okf_key(k) { 0 } else { "meta.".len() };
            prefix + k.len() + stored_value(k, v).len()
        })
        .sum()
}

/// Parses a retention value: a positive decimal with no sign or leading zero.
pub fn parse_retention(value: &str) -> Option<u32> {
    if value.is_empty() || value.starts_with('0') || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse::<u32>().ok().filter(|r| *r > 0)
}

/// Checks and normalises publisher metadata; the error says what is wrong.
pub fn normalize(meta: &Metadata) -> Result<Metadata, String> {
    let mut out = Metadata::new();
    for (key, value) in meta {
        if !key_is_valid(key) {
            return Err(format!("invalid metadata key {key:?}"));
        }
        if RESERVED_KEYS.contains(&key.as_str()) {
            return Err(format!("metadata key {key:?} is reserved"));
        }
        if !value_is_valid(value) {
            return Err(format!(
                "metadata value of {key:?} holds a control character"
            ));
        }
        match key.as_str() {
            "tags" => {
                let tags = normalize_tags(value);
                if !tags.is_empty() {
                    out.insert(key.clone(), tags);
                }
            }
            "retention" => {
                if parse_retention(value).is_none() {
                    return Err(format!("retention {value:?} is not a positive integer"));
                }
                out.insert(key.clone(), value.clone());
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if out.len() > MAX_KEYS {
        return Err(format!(
            "{} metadata keys exceed the limit of {MAX_KEYS}",
            out.len()
        ));
    }
    let size = stored_size(&out);
    if size > MAX_BYTES {
        return Err(format!(
            "metadata of {size} bytes exceeds the limit of {MAX_BYTES}"
        ));
    }
    Ok(out)
}

/// Whether `meta` is already in normal form and within the caps (stored metadata must be).
pub fn is_normal(meta: &Metadata) -> bool {
    normalize(meta).is_ok_and(|n| &n == meta)
}

/// [`is_normal`] for metadata given as pairs (keys must strictly increase), without building
/// a map: what a checkpoint reader checks for every document.
pub fn pairs_are_normal<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    let (mut keys, mut size) = (0usize, 0usize);
    let mut previous: Option<&str> = None;
    for (key, value) in pairs {
        if previous.is_some_and(|p| p >= key)
            || !key_is_valid(key)
            || RESERVED_KEYS.contains(&key)
            || !value_is_valid(value)
        {
            return false;
        }
        let value_ok = match key {
            "tags" => !value.is_empty() && normalize_tags(value) == value,
            "retention" => parse_retention(value).is_some(),
            _ => true,
        };
        if !value_ok {
            return false;
        }
        previous = Some(key);
        keys += 1;
        let prefix = if is_okf_key(key) { 0 } else { "meta.".len() };
        size += prefix + key.len() + stored_value(key, value).len();
    }
    keys <= MAX_KEYS && size <= MAX_BYTES
}

/// The metadata of an append: the base version's overlaid by the request's, except that
/// `retention` is never inherited (it applies to the write that carries it).
pub fn merge_for_append(base: &Metadata, request: &Metadata) -> Metadata {
    let mut out: Metadata = base
        .iter()
        .filter(|(k, _)| k.as_str() != "retention")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.extend(request.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

/// Sets `type: Document` when no type is declared, except for `index.md` and `log.md`
/// (the knowledge format's default, applied by writers that want it).
pub fn apply_default_type(path: &DocPath, meta: &mut Metadata) {
    if !meta.contains_key("type") && !matches!(path.name(), "index.md" | "log.md") {
        meta.insert("type".into(), "Document".into());
    }
}

/// Parses an importance into its canonical decimal form, if it is a number in [0, 1].
pub fn canonical_importance(value: &str) -> Option<String> {
    let trimmed = value.trim();
    if trimmed.is_empty()
        || !trimmed
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'+')
    {
        return None;
    }
    let parsed: f64 = trimmed.parse().ok()?;
    if !(0.0..=1.0).contains(&parsed) {
        return None;
    }
    // Rust prints the shortest decimal that reads back as the same f64: 0.7 → "0.7", 1 → "1".
    Some(format!("{parsed}"))
}

/// What the catalog knows about a document's current version, beside its path and time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// The declared title, else the first level-1 heading, else the path's last segment.
    pub title: String,
    /// The tags in declared order (original case).
    pub tags: Vec<String>,
    /// Canonical decimal in [0, 1].
    pub importance: String,
    /// The stored publisher metadata (normal form).
    pub metadata: Metadata,
}

impl Catalog {
    /// Derives the catalog record of a version from its metadata and body.
    pub fn derive(path: &DocPath, metadata: &Metadata, body: &str) -> Catalog {
        let title = metadata
            .get("title")
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .or_else(|| first_heading(body))
            .unwrap_or_else(|| path.name().to_owned());
        let tags = metadata
            .get("tags")
            .map(|t| split_tags(t).map(str::to_owned).collect())
            .unwrap_or_default();
        let importance = importance_of(metadata.get("importance").map(String::as_str));
        Catalog {
            title,
            tags,
            importance,
            metadata: metadata.clone(),
        }
    }
}

impl Catalog {
    /// Whether the tags and importance are the ones [`Catalog::derive`] gives the metadata
    /// (the only catalog records a correct writer produces, and the only ones a
    /// [`DocCatalog`] can hold).
    pub fn derives_from_metadata(&self) -> bool {
        let tags = self.metadata.get("tags").map(String::as_str).unwrap_or("");
        split_tags(tags).eq(self.tags.iter().map(String::as_str))
            && self.importance == importance_of(self.metadata.get("importance").map(String::as_str))
    }
}

/// The catalog importance of a stored `importance` value (or of none).
fn importance_of(value: Option<&str>) -> String {
    value
        .and_then(canonical_importance)
        .unwrap_or_else(|| DEFAULT_IMPORTANCE.to_owned())
}

/// A document's catalog record as the world state holds it: the title and the stored
/// metadata in one shared string, tags and importance derived from the metadata on demand.
///
/// A million documents each hold one, so it is one allocation of the record's own bytes
/// rather than a map, a list and four strings. Clones share the string.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DocCatalog {
    /// Each metadata key and then its value, in key order, as `<byte length>:<text>`;
    /// then the title.
    text: Arc<str>,
    /// Where the title starts in `text`.
    title_at: usize,
}

impl DocCatalog {
    /// The record of `title` and `metadata` (pairs in strictly increasing key order, as a
    /// [`Metadata`] map iterates).
    pub fn new<'a, I>(title: &str, metadata: I) -> Self
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
        I::IntoIter: Clone,
    {
        let metadata = metadata.into_iter();
        let digits = |n: usize| n.checked_ilog10().unwrap_or(0) as usize + 1;
        let size: usize = metadata
            .clone()
            .map(|(k, v)| digits(k.len()) + digits(v.len()) + 2 + k.len() + v.len())
            .sum();
        // Built in a reused buffer, so the record costs one allocation (its own).
        thread_local! {
            static SCRATCH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        SCRATCH.with_borrow_mut(|text| {
            text.clear();
            text.reserve(size + title.len());
            for (key, value) in metadata {
                for part in [key, value] {
                    text.push_str(itoa(part.len(), &mut [0; 20]));
                    text.push(':');
                    text.push_str(part);
                }
            }
            let title_at = text.len();
            text.push_str(title);
            DocCatalog {
                text: Arc::from(text.as_str()),
                title_at,
            }
        })
    }

    /// The declared title, else the first level-1 heading, else the path's last segment.
    pub fn title(&self) -> &str {
        &self.text[self.title_at..]
    }

    /// The stored publisher metadata (normal form), in key order.
    pub fn metadata(&self) -> MetadataIter<'_> {
        MetadataIter {
            rest: &self.text[..self.title_at],
        }
    }

    /// The stored value of metadata `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.metadata().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Whether the stored metadata is exactly `metadata`.
    pub fn metadata_is(&self, metadata: &Metadata) -> bool {
        self.metadata()
            .eq(metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// The stored metadata as a map.
    pub fn metadata_map(&self) -> Metadata {
        self.metadata()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// The tags in declared order (original case).
    pub fn tags(&self) -> impl Iterator<Item = &str> {
        split_tags(self.get("tags").unwrap_or(""))
    }

    /// Canonical decimal in [0, 1].
    pub fn importance(&self) -> String {
        importance_of(self.get("importance"))
    }

    /// The full catalog record.
    pub fn to_catalog(&self) -> Catalog {
        Catalog {
            title: self.title().to_owned(),
            tags: self.tags().map(str::to_owned).collect(),
            importance: self.importance(),
            metadata: self.metadata_map(),
        }
    }
}

impl From<&Catalog> for DocCatalog {
    /// The compact form of `catalog`, whose tags and importance must derive from its
    /// metadata ([`Catalog::derives_from_metadata`]); they are not kept.
    fn from(catalog: &Catalog) -> DocCatalog {
        DocCatalog::new(
            &catalog.title,
            catalog
                .metadata
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
    }
}

impl std::fmt::Debug for DocCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocCatalog")
            .field("title", &self.title())
            .field("metadata", &self.metadata().collect::<Vec<_>>())
            .finish()
    }
}

/// `n` in decimal, written into `buf` without allocating.
fn itoa(mut n: usize, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).expect("ASCII digits")
}

/// The metadata pairs of a [`DocCatalog`], in key order.
#[derive(Clone, Debug)]
pub struct MetadataIter<'a> {
    rest: &'a str,
}

impl<'a> MetadataIter<'a> {
    fn part(&mut self) -> Option<&'a str> {
        let (len, rest) = self.rest.split_once(':')?;
        let len: usize = len.parse().ok()?;
        let (part, rest) = rest.split_at_checked(len)?;
        self.rest = rest;
        Some(part)
    }
}

impl<'a> Iterator for MetadataIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        Some((self.part()?, self.part()?))
    }
}

/// The first level-1 ATX heading outside fenced and indented code, trimmed, if any.
pub fn first_heading(body: &str) -> Option<String> {
    let mut fence: Option<(char, usize)> = None;
    for line in body.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let rest = &line[indent..];
        if let Some((ch, len)) = fence {
            let run = rest.chars().take_while(|c| *c == ch).count();
            if indent < 4 && run >= len && rest[run * ch.len_utf8()..].trim().is_empty() {
                fence = None;
            }
            continue;
        }
        if indent >= 4 || line.starts_with('\t') {
            continue;
        }
        for ch in ['`', '~'] {
            let run = rest.chars().take_while(|c| *c == ch).count();
            if run >= 3 {
                fence = Some((ch, run));
            }
        }
        if fence.is_some() {
            continue;
        }
        let Some(after) = rest.strip_prefix('#') else {
            continue;
        };
        if !(after.is_empty() || after.starts_with([' ', '\t'])) {
            continue;
        }
        let mut text = after.trim();
        // An optional closing run of `#` preceded by a space is not part of the heading.
        let stripped = text.trim_end_matches('#');
        if stripped.len() != text.len() && (stripped.is_empty() || stripped.ends_with([' ', '\t']))
        {
            text = stripped.trim_end();
        }
        if !text.is_empty() {
            return Some(text.to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn tags_normalise() {
        let a = normalize(&meta(&[("tags", "alpha, beta")])).unwrap();
        let b = normalize(&meta(&[("tags", " alpha,beta ")])).unwrap();
        assert_eq!(a, b);
        assert_eq!(a["tags"], "alpha,beta");
        assert!(normalize(&meta(&[("tags", " , ")])).unwrap().is_empty());
    }

    #[test]
    fn refuses_what_the_rules_refuse() {
        for bad in [
            meta(&[("version", "1")]),
            meta(&[("archived", "true")]),
            meta(&[("previous-hash", "x")]),
            meta(&[("Type", "x")]),
            meta(&[("my_key", "x")]),
            meta(&[("", "x")]),
            meta(&[("-lead", "x")]),
            meta(&[("note", "two\nlines")]),
            meta(&[("retention", "0")]),
            meta(&[("retention", "-3")]),
            meta(&[("retention", "abc")]),
            meta(&[("retention", "1.5")]),
            meta(&[("retention", "")]),
            meta(&[("retention", "01")]),
        ] {
            assert!(normalize(&bad).is_err(), "{bad:?}");
        }
        for good in [meta(&[("retention", "1")]), meta(&[("retention", "20")])] {
            assert!(normalize(&good).is_ok());
        }
    }

    #[test]
    fn new_writes_refuse_separators_and_invisible_characters_naming_the_key() {
        for bad in [
            "a\u{2028}b",
            "a\u{2029}b",
            "a\u{85}b",
            "a\u{9b}b",
            "\u{feff}a",
            "a\u{7f}",
        ] {
            let error = check_new(&meta(&[("agent", bad)])).unwrap_err();
            assert!(error.contains("\"agent\""), "{error}");
        }
        for good in [
            "plain",
            "tab\there",
            "émoji ✓",
            "2026-01-01T00:00:00.9999999999Z",
        ] {
            assert_eq!(check_new(&meta(&[("agent", good)])), Ok(()), "{good:?}");
        }
        // Stored values keep reading back: the read-side rule is unchanged.
        assert!(is_normal(&meta(&[("agent", "a\u{2028}b")])));
    }

    #[test]
    fn caps_count_keys_and_stored_bytes() {
        let many: Metadata = (0..=MAX_KEYS)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        assert!(normalize(&many).is_err());
        let fifty: Metadata = (0..MAX_KEYS)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        assert!(normalize(&fifty).is_ok());
        // A comma list that fits the cap as text but not in its stored `[a, b]` form.
        let tags: Vec<String> = (0..300).map(|i| format!("t{}", i % 10)).collect();
        let csv = tags.join(",");
        assert!("tags".len() + csv.len() <= MAX_BYTES);
        assert!(normalize(&meta(&[("tags", &csv)])).is_err());
        let big = "x".repeat(MAX_BYTES);
        assert!(normalize(&meta(&[("note", &big)])).is_err());
    }

    #[test]
    fn append_merge_drops_retention() {
        let base = meta(&[("tags", "a"), ("retention", "2"), ("type", "Note")]);
        let merged = merge_for_append(&base, &meta(&[("type", "Log")]));
        assert_eq!(merged, meta(&[("tags", "a"), ("type", "Log")]));
    }

    #[test]
    fn default_type() {
        let mut m = Metadata::new();
        apply_default_type(&DocPath::parse("/a.md").unwrap(), &mut m);
        assert_eq!(m["type"], "Document");
        let mut m = Metadata::new();
        apply_default_type(&DocPath::parse("/d/index.md").unwrap(), &mut m);
        assert!(m.is_empty());
        let mut m = meta(&[("type", "Note")]);
        apply_default_type(&DocPath::parse("/a.md").unwrap(), &mut m);
        assert_eq!(m["type"], "Note");
    }

    #[test]
    fn importance_is_canonical() {
        assert_eq!(canonical_importance("0.70").as_deref(), Some("0.7"));
        assert_eq!(canonical_importance("1").as_deref(), Some("1"));
        assert_eq!(canonical_importance("1.0").as_deref(), Some("1"));
        assert_eq!(canonical_importance("0").as_deref(), Some("0"));
        for bad in ["1.5", "-0.1", "abc", "", "NaN", "inf", "1e-1"] {
            assert_eq!(canonical_importance(bad), None, "{bad}");
        }
    }

    #[test]
    fn pairs_are_normal_agrees_with_is_normal() {
        let long = "x".repeat(MAX_BYTES);
        let many: Metadata = (0..=MAX_KEYS)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        for m in [
            meta(&[("tags", "a,b"), ("type", "Note")]),
            meta(&[("tags", "a, b")]),
            meta(&[("tags", "")]),
            meta(&[("retention", "3")]),
            meta(&[("retention", "03")]),
            meta(&[("version", "1")]),
            meta(&[("Bad", "x")]),
            meta(&[("note", "tab\there")]),
            meta(&[("note", "line\nbreak")]),
            meta(&[("note", &long)]),
            many,
            Metadata::new(),
        ] {
            let pairs = m.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            assert_eq!(pairs_are_normal(pairs), is_normal(&m), "{m:?}");
        }
        assert!(!pairs_are_normal([("b", "1"), ("a", "2")]));
        assert!(!pairs_are_normal([("a", "1"), ("a", "2")]));
    }

    #[test]
    fn doc_catalog_holds_what_the_catalog_says() {
        let path = DocPath::parse("/d/n.md").unwrap();
        for (m, body) in [
            (
                meta(&[("tags", "B,a"), ("importance", "0.70"), ("x.y", "1:2:")]),
                "# T\n",
            ),
            (meta(&[("title", " Declared ")]), ""),
            (Metadata::new(), "no heading"),
            (meta(&[("importance", "2")]), "# 3:odd: title\n"),
        ] {
            let full = Catalog::derive(&path, &m, body);
            assert!(full.derives_from_metadata());
            let compact = DocCatalog::from(&full);
            assert_eq!(compact.to_catalog(), full);
            assert_eq!(compact.title(), full.title);
            assert!(compact.metadata_is(&m));
            assert_eq!(
                compact.get("importance"),
                m.get("importance").map(String::as_str)
            );
            assert_eq!(compact.get("missing"), None);
        }
        let mut odd = Catalog::derive(&path, &meta(&[("tags", "a")]), "");
        odd.tags.push("b".into());
        assert!(!odd.derives_from_metadata());
        let mut odd = Catalog::derive(&path, &Metadata::new(), "");
        odd.importance = "0.7".into();
        assert!(!odd.derives_from_metadata());
    }

    #[test]
    fn catalog_title_derivation() {
        let path = DocPath::parse("/docs/basename.md").unwrap();
        let declared = Catalog::derive(&path, &meta(&[("title", "  Declared ")]), "# Heading\n");
        assert_eq!(declared.title, "Declared");
        let heading = Catalog::derive(&path, &Metadata::new(), "intro\n\n# Heading #\n");
        assert_eq!(heading.title, "Heading");
        let fenced = Catalog::derive(&path, &Metadata::new(), "```\n# not\n```\n    # code\n");
        assert_eq!(fenced.title, "basename.md");
        assert_eq!(fenced.importance, DEFAULT_IMPORTANCE);
        let h2 = Catalog::derive(&path, &Metadata::new(), "## Two\n#NoSpace\n# One\n");
        assert_eq!(h2.title, "One");
        let tagged = Catalog::derive(&path, &meta(&[("tags", "B,a"), ("importance", "0.25")]), "");
        assert_eq!(tagged.tags, ["B", "a"]);
        assert_eq!(tagged.importance, "0.25");
    }
}
