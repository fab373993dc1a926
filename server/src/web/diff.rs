//! The difference between two versions of a document as an HTML table: `diffy`'s line diff,
//! hunk by hunk with three lines of context, each line numbered in the older and the newer
//! version, removed lines marked `del` and added lines `ins`.

use diffy::{DiffOptions, Line};

use super::render::escape;

/// The diff of `old` to `new` as HTML; a note when they are the same.
pub(crate) fn table(old: &str, new: &str) -> String {
    let patch = DiffOptions::new().set_context_len(3).create_patch(old, new);
    if patch.hunks().is_empty() {
        return "<p class=\"same\">The two versions have the same text.</p>\n".to_owned();
    }
    let mut html = String::from("<table class=\"diff\">\n");
    for hunk in patch.hunks() {
        let (mut old_line, mut new_line) = (hunk.old_range().start(), hunk.new_range().start());
        html.push_str(&format!(
            "<tbody><tr class=\"hunk\"><td colspan=\"3\">@@ -{},{} +{},{} @@</td></tr>\n",
            hunk.old_range().start(),
            hunk.old_range().len(),
            hunk.new_range().start(),
            hunk.new_range().len()
        ));
        for line in hunk.lines() {
            let (class, old_no, new_no, text) = match line {
                Line::Context(text) => {
                    old_line += 1;
                    new_line += 1;
                    ("ctx", Some(old_line - 1), Some(new_line - 1), *text)
                }
                Line::Delete(text) => {
                    old_line += 1;
                    ("del", Some(old_line - 1), None, *text)
                }
                Line::Insert(text) => {
                    new_line += 1;
                    ("ins", None, Some(new_line - 1), *text)
                }
            };
            let number = |n: Option<usize>| n.map(|n| n.to_string()).unwrap_or_default();
            html.push_str(&format!(
                "<tr class=\"{class}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td><code>{}</code></td></tr>\n",
                number(old_no),
                number(new_no),
                escape(text.strip_suffix('\n').unwrap_or(text))
            ));
        }
        html.push_str("</tbody>\n");
    }
    html.push_str("</table>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_lines_are_marked_and_numbered() {
        let html = table("# T\none\ntwo\n", "# T\none\n<b>2</b>\n");
        assert!(
            html.contains(
                "<tr class=\"del\"><td class=\"n\">3</td><td class=\"n\"></td><td><code>two</code>"
            ),
            "{html}"
        );
        assert!(html.contains("<tr class=\"ins\"><td class=\"n\"></td><td class=\"n\">3</td><td><code>&lt;b&gt;2&lt;/b&gt;</code>"), "{html}");
        assert!(
            html.contains("<tr class=\"ctx\"><td class=\"n\">2</td><td class=\"n\">2</td>"),
            "{html}"
        );
        assert!(table("same\n", "same\n").contains("same text"));
    }
}
