//! Markdown sections: the units body search indexes and answers with.
//!
//! - **Headings** are every ATX and setext heading the CommonMark parser finds (never a `#`
//!   line inside a fence or indented code); a heading whose text is empty is no heading. Its
//!   text is the concatenated text of its inline content (markup stripped).
//! - **Anchors** are GitHub-style slugs: lowercased; letters, digits, `_` and `-` kept;
//!   whitespace becomes `-`; anything else is dropped. A slug already taken gets `-1`, `-2`, …,
//!   and generated anchors count as taken (`Notes`, `Notes`, `Notes-1` → `notes`, `notes-1`,
//!   `notes-1-1`).
//! - **Sections**: the text before the first heading (the whole body when there is none) is
//!   the *bare* section, empty anchor and heading, kept when it holds text; then one section per
//!   heading whose **own text** runs from the line after the heading to the next heading of any
//!   level. A heading with no own text is still a section (its trail can match).
//! - **Trail**: the texts of a section's ancestor headings (by level) and its own heading.
//! - **Text** keeps one line per source line after [`clean_line`]: blank lines, fence lines,
//!   setext underlines and table separator rows go; blockquote and list markers (with task
//!   boxes), HTML tags, backticks, `*` and `~~` are stripped; images and links become their
//!   text; `|` becomes a space; whitespace collapses.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// One section of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// Empty for the bare section.
    pub anchor: String,
    /// The heading's text; empty for the bare section.
    pub heading: String,
    /// 1–6; 0 for the bare section.
    pub level: u8,
    /// The section's own text, cleaned, one line per kept source line.
    pub text: String,
    /// Ancestor heading texts, outermost first, then the section's own heading.
    pub trail: Vec<String>,
}

/// One heading found in a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heading {
    pub level: u8,
    pub text: String,
    /// Byte offset of the start of the heading's first line.
    pub line_start: usize,
    /// Byte offset just past the heading (after its last line's newline).
    pub end: usize,
}

/// Every non-empty heading of `body`, in order.
pub fn headings(body: &str) -> Vec<Heading> {
    let mut out = Vec::new();
    let mut open: Option<(u8, usize, String)> = None;
    for (event, range) in Parser::new_ext(body, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                open = Some((level as u8, range.start, String::new()));
            }
            Event::Text(text) | Event::Code(text) => {
                if let Some((_, _, collected)) = open.as_mut() {
                    collected.push_str(&text);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some((_, _, collected)) = open.as_mut() {
                    collected.push(' ');
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((level, start, collected)) = open.take() {
                    let text = collected.split_whitespace().collect::<Vec<_>>().join(" ");
                    if text.is_empty() {
                        continue;
                    }
                    let line_start = body[..start].rfind('\n').map_or(0, |i| i + 1);
                    let mut end = range.end.max(start);
                    if end > 0 && body.as_bytes()[end - 1] != b'\n' {
                        end = body[end..].find('\n').map_or(body.len(), |i| end + i + 1);
                    }
                    out.push(Heading {
                        level,
                        text,
                        line_start,
                        end,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// The GitHub-style slug of a heading's text.
pub fn slug(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_whitespace() {
            out.push('-');
        } else if c.is_alphanumeric() || c == '_' || c == '-' {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Assigns anchors in heading order, suffixing duplicates.
#[derive(Debug, Default)]
pub struct Anchors {
    taken: std::collections::HashSet<String>,
}

impl Anchors {
    /// The anchor of the next heading whose text is `text`.
    pub fn next(&mut self, text: &str) -> String {
        let base = slug(text);
        let mut anchor = base.clone();
        let mut n = 0;
        while self.taken.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        self.taken.insert(anchor.clone());
        anchor
    }
}

/// The sections of `body`, bare section first.
pub fn sections(body: &str) -> Vec<Section> {
    let found = headings(body);
    let mut out = Vec::with_capacity(found.len() + 1);
    let bare_end = found.first().map_or(body.len(), |h| h.line_start);
    let bare = clean_text(&body[..bare_end]);
    if !bare.is_empty() {
        out.push(Section {
            anchor: String::new(),
            heading: String::new(),
            level: 0,
            text: bare,
            trail: Vec::new(),
        });
    }
    let mut anchors = Anchors::default();
    let mut stack: Vec<(u8, String)> = Vec::new();
    for (i, heading) in found.iter().enumerate() {
        let own_end = found
            .get(i + 1)
            .map_or(body.len(), |next| next.line_start)
            .max(heading.end);
        let own = body.get(heading.end..own_end).unwrap_or("");
        while stack
            .last()
            .is_some_and(|(level, _)| *level >= heading.level)
        {
            stack.pop();
        }
        stack.push((heading.level, heading.text.clone()));
        out.push(Section {
            anchor: anchors.next(&heading.text),
            heading: heading.text.clone(),
            level: heading.level,
            text: clean_text(own),
            trail: stack.iter().map(|(_, t)| t.clone()).collect(),
        });
    }
    out
}

/// `text` cleaned line by line (see [`clean_line`]), kept lines joined by `\n`.
pub fn clean_text(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if let Some(clean) = clean_line(line) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&clean);
        }
    }
    out
}

fn is_table_separator(line: &str) -> bool {
    line.contains('-')
        && line.contains('|')
        && line
            .chars()
            .all(|c| matches!(c, '|' | '-' | ':' | ' ' | '\t'))
}

fn strip_list_marker(line: &str) -> &str {
    let rest = if let Some(rest) = line
        .strip_prefix(['-', '*', '+'])
        .filter(|r| r.starts_with([' ', '\t']))
    {
        rest
    } else {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        match line[digits..].strip_prefix(['.', ')']) {
            Some(rest)
                if digits > 0
                    && digits <= 9
                    && (rest.is_empty() || rest.starts_with([' ', '\t'])) =>
            {
                rest
            }
            _ => return line,
        }
    };
    let rest = rest.trim_start();
    for task in ["[ ]", "[x]", "[X]"] {
        if let Some(after) = rest.strip_prefix(task) {
            return after.trim_start();
        }
    }
    rest
}

/// Links and images become their text; HTML tags go.
fn strip_inline(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let bracket = if c == '!' && chars.get(i + 1) == Some(&'[') {
            Some(i + 1)
        } else if c == '[' {
            Some(i)
        } else {
            None
        };
        if let Some(open) = bracket
            && let Some(close) = (open + 1..chars.len()).find(|&j| chars[j] == ']')
        {
            let text: String = chars[open + 1..close].iter().collect();
            let mut next = close + 1;
            if chars.get(next) == Some(&'(')
                && let Some(end) = (next + 1..chars.len()).find(|&j| chars[j] == ')')
            {
                next = end + 1;
            }
            out.push_str(&strip_inline(&text));
            i = next;
            continue;
        }
        if c == '<'
            && chars
                .get(i + 1)
                .is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?'))
            && let Some(end) = (i + 1..chars.len()).find(|&j| chars[j] == '>')
        {
            i = end + 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// One source line as section text, or `None` when the line carries no text.
pub fn clean_line(line: &str) -> Option<String> {
    let mut s = line.trim();
    if s.is_empty() || s.starts_with("```") || s.starts_with("~~~") {
        return None;
    }
    if s.chars().all(|c| c == '=') || s.chars().all(|c| c == '-') || is_table_separator(s) {
        return None;
    }
    while let Some(rest) = s.strip_prefix('>') {
        s = rest.trim_start();
    }
    let s = strip_list_marker(s);
    let s = strip_inline(s)
        .replace("~~", "")
        .replace(['`', '*'], "")
        .replace('|', " ");
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    (!collapsed.is_empty()).then_some(collapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outline(body: &str) -> Vec<(String, String, String, Vec<String>)> {
        sections(body)
            .into_iter()
            .map(|s| (s.anchor, s.heading, s.text, s.trail))
            .collect()
    }

    #[test]
    fn atx_and_setext_headings_outside_code() {
        let body = "# Top\n\nintro\n\nSub *one*\n---------\n\n```\n# not a heading\n```\n\n    # indented code\n\n## `code` head ##\n#\n";
        let found: Vec<(u8, String)> = headings(body)
            .into_iter()
            .map(|h| (h.level, h.text))
            .collect();
        assert_eq!(
            found,
            [
                (1, "Top".into()),
                (2, "Sub one".into()),
                (2, "code head".into())
            ]
        );
    }

    #[test]
    fn anchors_slug_and_dedup_with_generated_suffixes_taken() {
        let mut anchors = Anchors::default();
        let got: Vec<String> = ["Notes", "Notes", "Notes-1", "Hello, World!", "a_b  C"]
            .iter()
            .map(|t| anchors.next(t))
            .collect();
        assert_eq!(
            got,
            ["notes", "notes-1", "notes-1-1", "hello-world", "a_b--c"]
        );
    }

    #[test]
    fn bare_section_own_text_and_trails() {
        let body = "preamble line\n\n# Debugging\n\nsee below\n\n## QUIC\n\nUDP buffer sysctl\n\n### Workaround\n\nraise it\n\n## Other\n## Empty\n";
        let got = outline(body);
        let trail = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            [
                ("".into(), "".into(), "preamble line".into(), vec![]),
                (
                    "debugging".into(),
                    "Debugging".into(),
                    "see below".into(),
                    trail(&["Debugging"])
                ),
                (
                    "quic".into(),
                    "QUIC".into(),
                    "UDP buffer sysctl".into(),
                    trail(&["Debugging", "QUIC"])
                ),
                (
                    "workaround".into(),
                    "Workaround".into(),
                    "raise it".into(),
                    trail(&["Debugging", "QUIC", "Workaround"])
                ),
                (
                    "other".into(),
                    "Other".into(),
                    "".into(),
                    trail(&["Debugging", "Other"])
                ),
                (
                    "empty".into(),
                    "Empty".into(),
                    "".into(),
                    trail(&["Debugging", "Empty"])
                ),
            ]
        );
        assert_eq!(outline("just text\nmore\n")[0].2, "just text\nmore");
        assert!(sections("# Only\n").iter().all(|s| s.level == 1));
    }

    #[test]
    fn lines_lose_markup() {
        let cases = [
            ("  - [ ] task `code` item  ", Some("task code item")),
            ("> > quoted **bold** ~~gone~~", Some("quoted bold gone")),
            ("12) twelve", Some("twelve")),
            ("| a | b |", Some("a b")),
            ("|---|:--:|", None),
            ("```rust", None),
            ("~~~", None),
            ("=====", None),
            ("---", None),
            ("   ", None),
            (
                "see [the docs](http://x.y/z) and ![a cat](cat.png)",
                Some("see the docs and a cat"),
            ),
            ("<b>bold</b> <!-- c --> 1 < 2", Some("bold 1 < 2")),
            ("-notalist", Some("-notalist")),
        ];
        for (line, want) in cases {
            assert_eq!(clean_line(line).as_deref(), want, "{line:?}");
        }
    }

    #[test]
    fn fenced_code_text_is_kept_without_fences() {
        let got = outline("# Code\n\n```sh\nsysctl -w rmem_max=1\n```\n");
        assert_eq!(got[0].2, "sysctl -w rmem_max=1");
    }
}
