//! Document paths: the one canonical spelling of every document, and the tree relations
//! (ancestors, parent directory, hidden names) that topology and listings rest on.
//!
//! A canonical document path starts with `/`, is not `/` itself, has no empty, `.` or `..`
//! segment, no trailing `/`, no control character (tab aside) or DEL, and is at most
//! [`MAX_PATH_LEN`] bytes. Whether it ends in `.md` is the handler's rule, not the store's.
//!
//! A path written from now on also meets [`check_new`]: no C1 control, NEL, U+2028, U+2029
//! or U+FEFF (see [`crate::metadata::is_writable_char`]), so it reads back as one line on
//! every transport; no bidirectional override; Unicode normalisation form C. Paths stored
//! before keep reading back.

use std::fmt;
use std::sync::Arc;

/// The longest document path, in bytes.
pub const MAX_PATH_LEN: usize = 1024;

/// Why a path is not a canonical document path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathError(pub &'static str);

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A canonical document path. Cheap to clone; ordered by its bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DocPath(Arc<str>);

fn check_chars(raw: &str) -> Result<(), PathError> {
    if raw.len() > MAX_PATH_LEN {
        return Err(PathError("path too long"));
    }
    if raw.chars().any(|c| (c < ' ' && c != '\t') || c == '\u{7f}') {
        return Err(PathError("control character in path"));
    }
    Ok(())
}

/// The write-time rule for a new document's path: only characters
/// [`crate::metadata::is_writable_char`] allows, no bidirectional embedding, override or
/// isolate control (U+202A–U+202E, U+2066–U+2069: they make a name display as another),
/// and in Unicode normalisation form C, so two spellings that look alike never name two
/// documents.
pub fn check_new(path: &str) -> Result<(), PathError> {
    if !path.chars().all(crate::metadata::is_writable_char) {
        return Err(PathError(
            "path holds a line separator, C1 control or byte-order mark",
        ));
    }
    if path.chars().any(is_bidi_control) {
        return Err(PathError(
            "path holds a bidirectional override, embedding or isolate control",
        ));
    }
    if !unicode_normalization::is_nfc(path) {
        return Err(PathError(
            "path is not in Unicode normalisation form C (compose it first)",
        ));
    }
    Ok(())
}

/// The bidirectional formatting controls that reorder what follows them.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Cleans a request path into canonical form: leading `/` added, empty and `.` segments and
/// a trailing `/` dropped. A `..` segment is refused rather than resolved. The root is `/`.
pub fn clean(raw: &str) -> Result<String, PathError> {
    check_chars(raw)?;
    let mut out = String::with_capacity(raw.len() + 1);
    for segment in raw.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(PathError("path contains a .. segment")),
            s => {
                out.push('/');
                out.push_str(s);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Whether a single name is hidden from listings: a leading `.`, or the name `versions`.
pub fn is_hidden_name(name: &str) -> bool {
    name.starts_with('.') || name == "versions"
}

impl DocPath {
    /// Canonicalises `raw` (see [`clean`]) into a document path; `/` is not a document.
    pub fn parse(raw: &str) -> Result<DocPath, PathError> {
        let cleaned = clean(raw)?;
        if cleaned == "/" {
            return Err(PathError("the root is not a document"));
        }
        Ok(DocPath(cleaned.into()))
    }

    /// Accepts `raw` only if it is already canonical (stored paths must be).
    pub fn canonical(raw: &str) -> Result<DocPath, PathError> {
        // The common case checked in place: a leading `/` and segments that are neither
        // empty nor `.` nor `..` are exactly what `clean` leaves unchanged.
        let in_place = raw.len() > 1
            && raw.starts_with('/')
            && raw[1..]
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != "..");
        if in_place {
            check_chars(raw)?;
            return Ok(DocPath(raw.into()));
        }
        let path = DocPath::parse(raw)?;
        if &*path.0 != raw {
            return Err(PathError("path is not in canonical form"));
        }
        Ok(path)
    }

    /// A value sorting before every document path (a range bound, never a document).
    pub(crate) fn min_bound() -> DocPath {
        DocPath(Arc::from(""))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The directory holding the document (`/` for a top-level document).
    pub fn parent(&self) -> &str {
        match self.0.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &self.0[..i],
        }
    }

    /// The last segment.
    pub fn name(&self) -> &str {
        match self.0.rfind('/') {
            Some(i) => &self.0[i + 1..],
            None => &self.0,
        }
    }

    /// Every proper ancestor directory except `/`, outermost first: `/a/b/c` → `/a`, `/a/b`.
    pub fn ancestors(&self) -> impl Iterator<Item = &str> {
        let path: &str = &self.0;
        path.match_indices('/')
            .map(|(i, _)| i)
            .filter(|&i| i > 0)
            .map(move |i| &path[..i])
    }

    /// `(directory, child name)` pairs from the root down to the document itself:
    /// `/a/b.md` → (`/`, `a`), (`/a`, `b.md`).
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str)> {
        let path: &str = &self.0;
        let starts: Vec<usize> = path.match_indices('/').map(|(i, _)| i).collect();
        (0..starts.len()).map(move |k| {
            let dir = if k == 0 { "/" } else { &path[..starts[k]] };
            let end = starts.get(k + 1).copied().unwrap_or(path.len());
            (dir, &path[starts[k] + 1..end])
        })
    }

    /// Whether `other` lies strictly beneath this path (this path as a directory).
    pub fn is_ancestor_of(&self, other: &DocPath) -> bool {
        other.0.len() > self.0.len()
            && other.0.starts_with(&*self.0)
            && other.0.as_bytes()[self.0.len()] == b'/'
    }

    /// Whether the two paths are the same, or one lies beneath the other: the relation under
    /// which one write can change another's outcome (topology and the document itself).
    pub fn overlaps(&self, other: &DocPath) -> bool {
        self == other || self.is_ancestor_of(other) || other.is_ancestor_of(self)
    }
}

impl fmt::Display for DocPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DocPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl std::borrow::Borrow<str> for DocPath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_canonicalises() {
        for (raw, want) in [
            ("/a.md", "/a.md"),
            ("a.md", "/a.md"),
            ("//docs/./a.md/", "/docs/a.md"),
            ("/docs//sub/x.md", "/docs/sub/x.md"),
            ("/with\ttab.md", "/with\ttab.md"),
        ] {
            assert_eq!(DocPath::parse(raw).unwrap().as_str(), want, "{raw}");
        }
        for bad in ["/", "", "/a/../b.md", "..", "/a\nb", "/nul\0", "/del\u{7f}"] {
            assert!(DocPath::parse(bad).is_err(), "{bad:?}");
        }
        assert!(DocPath::parse(&format!("/{}", "a".repeat(MAX_PATH_LEN))).is_err());
        assert!(DocPath::canonical("a.md").is_err());
        assert!(DocPath::canonical("/a.md").is_ok());
        // Accepted exactly when parsing leaves the spelling unchanged.
        for raw in [
            "/", "", "/a/", "//a", "/a//b", "/./a", "/a/.", "/a/../b", "/..", "/a\u{1}", "/a b/.c",
            "/a\tb", "a/b", "/a/b.md",
        ] {
            let same = DocPath::parse(raw).is_ok_and(|p| p.as_str() == raw);
            assert_eq!(DocPath::canonical(raw).is_ok(), same, "{raw:?}");
        }
    }

    #[test]
    fn new_paths_refuse_separators() {
        for bad in [
            "/a\u{2028}b.md",
            "/a\u{2029}.md",
            "/n\u{85}.md",
            "/b\u{feff}.md",
            "/c\u{80}.md",
        ] {
            assert!(check_new(bad).is_err(), "{bad:?}");
            // Still a canonical path to read.
            assert!(DocPath::canonical(bad).is_ok(), "{bad:?}");
        }
        assert_eq!(check_new("/notes/é ✓.md"), Ok(()));
    }

    #[test]
    fn relations() {
        let p = DocPath::parse("/a/b/c.md").unwrap();
        assert_eq!(p.parent(), "/a/b");
        assert_eq!(p.name(), "c.md");
        assert_eq!(p.ancestors().collect::<Vec<_>>(), ["/a", "/a/b"]);
        assert_eq!(
            p.edges().collect::<Vec<_>>(),
            [("/", "a"), ("/a", "b"), ("/a/b", "c.md")]
        );
        let top = DocPath::parse("/x.md").unwrap();
        assert_eq!(top.parent(), "/");
        assert_eq!(top.ancestors().count(), 0);
        assert_eq!(top.edges().collect::<Vec<_>>(), [("/", "x.md")]);

        let a = DocPath::parse("/a").unwrap();
        let ab = DocPath::parse("/a/b").unwrap();
        let abc = DocPath::parse("/abc").unwrap();
        assert!(a.is_ancestor_of(&ab));
        assert!(!a.is_ancestor_of(&abc));
        assert!(!ab.is_ancestor_of(&a));
        assert!(a.overlaps(&ab) && ab.overlaps(&a) && a.overlaps(&a));
        assert!(!a.overlaps(&abc));
    }

    #[test]
    fn hidden_names() {
        assert!(is_hidden_name(".scratch.md"));
        assert!(is_hidden_name("versions"));
        assert!(!is_hidden_name("version"));
        assert!(!is_hidden_name("a.md"));
    }
}
