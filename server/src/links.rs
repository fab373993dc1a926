//! Links between documents: where a link in a document points, as a world path. A target
//! with a scheme (`https:`, `mailto:`) or a host (`//host/…`) leaves the world; a fragment
//! or query is dropped; a relative target resolves against the directory holding the
//! document, `.` and `..` segments folded (a `..` above the root stays at the root, as a
//! browser does); percent escapes are decoded.

use pulldown_cmark::{Event, Parser, Tag};

use crate::outline::markdown_options;

/// Whether a link target leaves the world (it names a scheme or a host).
pub(crate) fn is_external(target: &str) -> bool {
    if target.starts_with("//") {
        return true;
    }
    let scheme_end = target.find(':');
    let path_end = target.find(['/', '?', '#']).unwrap_or(target.len());
    matches!(scheme_end, Some(at) if at > 0 && at < path_end
        && target[..at].chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
}

/// The world path `target` names from a page at `base` (a document path, or a directory path
/// ending in `/`); `None` for an external target or one that is only a fragment.
pub(crate) fn resolve(base: &str, target: &str) -> Option<String> {
    let target = target.trim();
    if is_external(target) {
        return None;
    }
    let without = target.split(['#', '?']).next().unwrap_or("");
    if without.is_empty() {
        return None;
    }
    let joined = if without.starts_with('/') {
        without.to_owned()
    } else {
        let dir = match base.rfind('/') {
            Some(at) => &base[..=at],
            None => "/",
        };
        format!("{dir}{without}")
    };
    let decoded = percent_encoding::percent_decode_str(&joined)
        .decode_utf8()
        .ok()?
        .into_owned();
    let trailing = decoded.ends_with('/');
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    let mut path = format!("/{}", segments.join("/"));
    if trailing && path != "/" {
        path.push('/');
    }
    Some(path)
}

/// Every link and image target in `markdown`, as written, in order.
pub(crate) fn targets(markdown: &str) -> Vec<String> {
    Parser::new_ext(markdown, markdown_options())
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some(dest_url.into_string())
            }
            _ => None,
        })
        .collect()
}

/// Whether the document at `from` holding `markdown` links to the document `to`.
pub(crate) fn links_to(from: &str, markdown: &str, to: &str) -> bool {
    targets(markdown)
        .iter()
        .filter_map(|target| resolve(from, target))
        .any(|path| path == to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_against_the_documents_directory() {
        let from = "/notes/daily/today.md";
        assert_eq!(
            resolve(from, "plan.md").as_deref(),
            Some("/notes/daily/plan.md")
        );
        assert_eq!(
            resolve(from, "../hello.md#intro").as_deref(),
            Some("/notes/hello.md")
        );
        assert_eq!(resolve(from, "/a%20b.md?x").as_deref(), Some("/a b.md"));
        assert_eq!(resolve(from, "./../../../up.md").as_deref(), Some("/up.md"));
        assert_eq!(resolve("/notes/", "sub/").as_deref(), Some("/notes/sub/"));
        assert_eq!(resolve(from, "#only-a-fragment"), None);
        for external in [
            "https://example.com/a.md",
            "mailto:x@y",
            "//host/a.md",
            "javascript:x",
        ] {
            assert_eq!(resolve(from, external), None, "{external}");
        }
    }

    #[test]
    fn links_to_finds_links_and_images_but_not_code() {
        let body = "See [hello](../hello.md) and ![i](/img/x.md).\n\n`[no](/other.md)`\n";
        assert!(links_to("/notes/a/b.md", body, "/notes/hello.md"));
        assert!(links_to("/notes/a/b.md", body, "/img/x.md"));
        assert!(!links_to("/notes/a/b.md", body, "/other.md"));
    }
}
