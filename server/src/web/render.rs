//! Markdown to HTML a browser may show: pulldown-cmark renders, then `ammonia` keeps only
//! inert markup (no script, no event handlers, no styles, no forms, no frames), so a
//! document can never run code in the reader's page. Links are resolved to world paths
//! (relative ones against the page's directory); images keep only same-origin sources, so a
//! document never makes the reader's browser load anything from elsewhere (the page's
//! Content-Security-Policy says the same). Headings get their `#anchor` as `id`.

use std::collections::HashMap;
use std::sync::OnceLock;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use pulldown_cmark::{CowStr, Event, Parser, Tag, TagEnd, TextMergeStream};

use crate::links;
use crate::outline::{self, markdown_options};

/// What a path keeps unescaped in an `href`.
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A world path as an `href` (percent-encoded, `/` kept).
pub(crate) fn href(path: &str) -> String {
    utf8_percent_encode(path, PATH).to_string()
}

/// Text for HTML (element content and quoted attribute values).
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

fn sanitizer() -> &'static ammonia::Builder<'static> {
    static BUILDER: OnceLock<ammonia::Builder<'static>> = OnceLock::new();
    BUILDER.get_or_init(|| {
        let mut builder = ammonia::Builder::default();
        builder
            .url_schemes(["http", "https", "mailto"].into())
            .link_rel(Some("noopener noreferrer nofollow"))
            .url_relative(ammonia::UrlRelative::PassThrough)
            .strip_comments(true)
            .add_tag_attributes("h1", ["id"])
            .add_tag_attributes("h2", ["id"])
            .add_tag_attributes("h3", ["id"])
            .add_tag_attributes("h4", ["id"])
            .add_tag_attributes("h5", ["id"])
            .add_tag_attributes("h6", ["id"])
            .attribute_filter(|element, attribute, value| match (element, attribute) {
                // Only same-origin images: nothing is fetched from elsewhere.
                ("img", "src") if links::is_external(value) => None,
                _ => Some(value.into()),
            });
        builder
    })
}

/// Rewrites a link target for a page at `base`: a world path stays a world path (resolved
/// and escaped, its fragment kept); anything else is left for the sanitizer to judge.
fn rewrite_target(base: &str, target: &str) -> String {
    if target.starts_with('#') || links::is_external(target) {
        return target.to_owned();
    }
    let fragment = target.find('#').map(|at| &target[at..]).unwrap_or("");
    match links::resolve(base, target) {
        Some(path) => format!("{}{fragment}", href(&path)),
        None => target.to_owned(),
    }
}

/// A document (or any markdown answer) as safe HTML; relative links resolve against `base`.
pub(crate) fn markdown(text: &str, base: &str) -> String {
    let anchors: HashMap<usize, String> = outline::headings(text)
        .into_iter()
        .map(|heading| (heading.start, heading.anchor))
        .collect();
    let events = Parser::new_ext(text, markdown_options())
        .into_offset_iter()
        .map(|(event, range)| match event {
            Event::Start(Tag::Heading {
                level,
                id: _,
                classes,
                attrs,
            }) => Event::Start(Tag::Heading {
                level,
                id: anchors.get(&range.start).cloned().map(CowStr::from),
                classes,
                attrs,
            }),
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            }) => Event::Start(Tag::Link {
                link_type,
                dest_url: rewrite_target(base, &dest_url).into(),
                title,
                id,
            }),
            Event::Start(Tag::Image {
                link_type,
                dest_url,
                title,
                id,
            }) => Event::Start(Tag::Image {
                link_type,
                dest_url: rewrite_target(base, &dest_url).into(),
                title,
                id,
            }),
            other => other,
        });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    sanitizer().clean(&html).to_string()
}

/// A LOOKUP answer's table as safe HTML: each Path cell (`path` or `path#anchor`) becomes a
/// link, and the query's terms are marked in the other text cells.
pub(crate) fn lookup_table(text: &str, query: &str) -> String {
    let terms: Vec<String> = query
        .split_whitespace()
        .map(str::to_lowercase)
        .filter(|term| term.chars().count() >= 2 && term != "*")
        .collect();
    let mut head: Vec<String> = Vec::new();
    let mut in_head = false;
    let mut column = 0usize;
    let mut events: Vec<Event<'_>> = Vec::new();
    for event in TextMergeStream::new(Parser::new_ext(text, markdown_options())) {
        match event {
            Event::Start(Tag::TableHead) => {
                in_head = true;
                column = 0;
                events.push(event);
            }
            Event::End(TagEnd::TableHead) => {
                in_head = false;
                events.push(event);
            }
            Event::Start(Tag::TableRow) => {
                column = 0;
                events.push(event);
            }
            Event::End(TagEnd::TableCell) => {
                column += 1;
                events.push(event);
            }
            Event::Text(cell) if in_head => {
                head.push(cell.to_string());
                events.push(Event::Text(cell));
            }
            Event::Text(cell) => match head.get(column).map(String::as_str) {
                Some("Path") => {
                    let (path, anchor) = match cell.split_once('#') {
                        Some((path, anchor)) => (path, Some(anchor)),
                        None => (&*cell, None),
                    };
                    let target = match anchor {
                        Some(anchor) => format!("{}#{}", href(path), href(anchor)),
                        None => href(path),
                    };
                    events.push(Event::Html(
                        format!("<a href=\"{target}\">{}</a>", escape(&cell)).into(),
                    ));
                }
                Some("Importance") => events.push(Event::Text(cell)),
                _ => events.push(Event::Html(highlight(&cell, &terms).into())),
            },
            other => events.push(other),
        }
    }
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events.into_iter());
    sanitizer().clean(&html).to_string()
}

/// `text` escaped, each occurrence of a term (case-insensitive) wrapped in `<mark>`.
pub(crate) fn highlight(text: &str, terms: &[String]) -> String {
    let lower = text.to_lowercase();
    // Lower-casing may change byte lengths; then mark nothing rather than cut a character.
    if lower.len() != text.len() || terms.is_empty() {
        return escape(text);
    }
    let mut marked = vec![false; text.len()];
    for term in terms {
        let mut from = 0;
        while let Some(at) = lower[from..].find(term.as_str()) {
            let start = from + at;
            marked[start..start + term.len()].fill(true);
            from = start + term.len();
        }
    }
    let mut out = String::new();
    let mut open = false;
    for (at, c) in text.char_indices() {
        if marked[at] && !open {
            out.push_str("<mark>");
            open = true;
        } else if !marked[at] && open {
            out.push_str("</mark>");
            open = false;
        }
        out.push_str(&escape(c.encode_utf8(&mut [0; 4])));
    }
    if open {
        out.push_str("</mark>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_handlers_and_remote_loads_are_removed() {
        let hostile = "# Hi\n\n<script>alert(1)</script>\n\n<img src=\"https://evil.example/x.png\" onerror=\"alert(2)\">\n\n[js](javascript:alert(3)) <a href=\"#\" onclick=\"alert(4)\">x</a>\n\n<iframe src=\"https://evil.example\"></iframe><style>body{}</style>\n\n![local](pic.md)\n";
        let html = markdown(hostile, "/notes/a.md");
        for banned in [
            "<script",
            "onerror",
            "onclick",
            "javascript:",
            "evil.example",
            "<iframe",
            "<style",
            "alert(1)",
        ] {
            assert!(!html.contains(banned), "{banned} in {html}");
        }
        assert!(html.contains("<h1 id=\"hi\">Hi</h1>"), "{html}");
        assert!(html.contains("src=\"/notes/pic.md\""), "{html}");
    }

    #[test]
    fn links_resolve_against_the_page_directory() {
        let html = markdown(
            "[a](hello.md) [b](../up%20x.md#part) [c](#here) [d](https://example.com/)",
            "/notes/",
        );
        assert!(html.contains("href=\"/notes/hello.md\""), "{html}");
        assert!(html.contains("href=\"/up%20x.md#part\""), "{html}");
        assert!(html.contains("href=\"#here\""), "{html}");
        assert!(html.contains("href=\"https://example.com/\""), "{html}");
        assert!(
            html.contains("rel=\"noopener noreferrer nofollow\""),
            "{html}"
        );
    }

    #[test]
    fn lookup_rows_link_their_paths_and_mark_the_terms() {
        let table = "\n# Lookup\n\n| Path | Importance | Title | Tags | Snippet |\n|------|------------|-------|------|---------|\n| /notes/a.md#intro | 0.50 | A › Intro | x | the Quick brown fox |\n";
        let html = lookup_table(table, "quick fox");
        assert!(
            html.contains("<a href=\"/notes/a.md#intro\" rel=\"noopener noreferrer nofollow\">/notes/a.md#intro</a>"),
            "{html}"
        );
        assert!(
            html.contains("the <mark>Quick</mark> brown <mark>fox</mark>"),
            "{html}"
        );
    }
}
