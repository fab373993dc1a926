//! A markdown document's headings and their anchors, the rule `path#anchor` names a section
//! by: every ATX or setext heading (never a `#` line inside code), its text without inline
//! markup, and a GitHub-style slug (lower case; letters, digits, `_` and `-` kept; white
//! space to `-`; everything else dropped), a repeated slug taking `-1`, `-2`, … (generated
//! names count as taken). A heading's section runs to the next heading of the same or a
//! higher level. The web page gives each heading its anchor as `id`; the MCP `fetch` tool
//! cuts a section out by it.

use std::collections::HashSet;
use std::ops::Range;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// One heading of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Heading {
    /// 1 to 6.
    pub level: u8,
    /// The heading's text, inline markup removed.
    pub text: String,
    pub anchor: String,
    /// Where the heading starts in the source, in bytes.
    pub start: usize,
}

/// The parser options every reader of Quire markdown uses.
pub(crate) fn markdown_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
}

/// The headings of `markdown`, in order, with unique anchors. Headings with no text are
/// skipped.
pub(crate) fn headings(markdown: &str) -> Vec<Heading> {
    let mut found = Vec::new();
    let mut taken = HashSet::new();
    let mut open: Option<(u8, usize, String)> = None;
    for (event, range) in Parser::new_ext(markdown, markdown_options()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                open = Some((level as u8, range.start, String::new()));
            }
            Event::Text(text) | Event::Code(text) => {
                if let Some((_, _, heading)) = open.as_mut() {
                    heading.push_str(&text);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((level, start, text)) = open.take() {
                    let text = text.trim().to_owned();
                    if text.is_empty() {
                        continue;
                    }
                    let anchor = unique(slug(&text), &mut taken);
                    found.push(Heading {
                        level,
                        text,
                        anchor,
                        start,
                    });
                }
            }
            _ => {}
        }
    }
    found
}

/// The GitHub-style slug of a heading's text.
pub(crate) fn slug(text: &str) -> String {
    let mut slug = String::with_capacity(text.len());
    for c in text.trim().chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() || c == '_' || c == '-' {
            slug.push(c);
        } else if c.is_whitespace() {
            slug.push('-');
        }
    }
    slug
}

fn unique(base: String, taken: &mut HashSet<String>) -> String {
    let mut candidate = base.clone();
    let mut n = 1;
    while taken.contains(&candidate) {
        candidate = format!("{base}-{n}");
        n += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

/// The byte range of the section `anchor` names: from its heading to the next heading of the
/// same or a higher level. The anchor is matched case-insensitively, and raw heading text is
/// accepted too (it is slugged first).
pub(crate) fn section(markdown: &str, anchor: &str) -> Option<Range<usize>> {
    let all = headings(markdown);
    let wanted = anchor.trim().to_lowercase();
    let slugged = slug(anchor);
    let at = all
        .iter()
        .position(|h| h.anchor == wanted)
        .or_else(|| all.iter().position(|h| h.anchor == slugged))?;
    let level = all[at].level;
    let end = all[at + 1..]
        .iter()
        .find(|h| h.level <= level)
        .map_or(markdown.len(), |h| h.start);
    Some(all[at].start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_github_slugs_made_unique() {
        let text = "# Notes\n\n## Notes\n\n## Notes-1\n\nSetext *Title*\n===\n\n```\n# not a heading\n```\n#\n";
        let anchors: Vec<_> = headings(text).into_iter().map(|h| h.anchor).collect();
        assert_eq!(anchors, ["notes", "notes-1", "notes-1-1", "setext-title"]);
        assert_eq!(slug("Hello, World! (2026)"), "hello-world-2026");
        assert_eq!(slug("snake_case and-dash"), "snake_case-and-dash");
    }

    #[test]
    fn a_section_runs_to_the_next_heading_of_its_level_or_higher() {
        let text = "# Top\nintro\n## A\na text\n### A1\ndeep\n## B\nb text\n";
        let range = section(text, "a").unwrap();
        assert_eq!(&text[range], "## A\na text\n### A1\ndeep\n");
        let range = section(text, "B").unwrap();
        assert_eq!(&text[range], "## B\nb text\n");
        assert_eq!(
            section(text, "A1").map(|r| &text[r]),
            Some("### A1\ndeep\n")
        );
        assert!(section(text, "missing").is_none());
    }
}
