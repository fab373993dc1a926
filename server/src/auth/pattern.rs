//! Path patterns: the glob language of a token's `paths` (see the module docs of
//! [`crate::auth`]), compiled once and matched segment by segment.

use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;

/// One segment of a pattern.
#[derive(Clone, Debug)]
enum Segment {
    Literal(String),
    Glob(GlobMatcher),
}

impl Segment {
    fn compile(text: &str, pattern: &str) -> Result<Segment, String> {
        if text.contains(['{', '}']) {
            return Err(format!(
                "pattern {pattern:?}: braces are not pattern syntax; write [{{]"
            ));
        }
        if !text.contains(['*', '?', '[', '\\']) {
            return Ok(Segment::Literal(text.to_owned()));
        }
        let glob = GlobBuilder::new(text)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|error| format!("pattern {pattern:?}: {}", error.kind()))?;
        Ok(Segment::Glob(glob.compile_matcher()))
    }

    fn matches(&self, segment: &str) -> bool {
        match self {
            Segment::Literal(literal) => literal == segment,
            Segment::Glob(glob) => glob.is_match(segment),
        }
    }
}

/// What a pattern does after its leading segments.
#[derive(Clone, Debug)]
enum Shape {
    /// Exactly these segments.
    Exact,
    /// `prefix/**`: at least one more segment.
    Subtree,
    /// `prefix/**/suffix`: any number of segments, then the suffix.
    Infix(Vec<Segment>),
    /// `prefix/`: the bare name or anything below.
    Directory,
}

/// A compiled path pattern (see the module docs for the language).
#[derive(Clone, Debug)]
pub struct PathPattern {
    text: String,
    prefix: Vec<Segment>,
    shape: Shape,
}

impl PathPattern {
    pub fn parse(text: &str) -> Result<PathPattern, String> {
        let Some(body) = text.strip_prefix('/') else {
            return Err(format!("pattern {text:?} does not start with /"));
        };
        // A literal no new document's path can hold (not NFC, a bidi override, …) would
        // silently protect nothing.
        if let Err(why) = quire_log::path::check_new(text) {
            return Err(format!("pattern {text:?}: {why}"));
        }
        let directory = text.len() > 1 && text.ends_with('/');
        let body = if directory {
            &body[..body.len() - 1]
        } else {
            body
        };
        // `/` alone names the root directory: everything.
        if text == "/" {
            return Ok(PathPattern {
                text: text.to_owned(),
                prefix: Vec::new(),
                shape: Shape::Subtree,
            });
        }
        let segments: Vec<&str> = body.split('/').collect();
        // Canonical paths have none of these, so such a pattern would silently match nothing
        // (`/private//**` protecting nothing).
        if segments
            .iter()
            .any(|segment| segment.is_empty() || *segment == "." || *segment == "..")
        {
            return Err(format!(
                "pattern {text:?} has an empty, . or .. segment, so it could never match a path"
            ));
        }
        let doubles: Vec<usize> = segments
            .iter()
            .enumerate()
            .filter(|(_, segment)| segment.contains("**"))
            .map(|(index, _)| index)
            .collect();
        let misplaced = doubles.iter().any(|&index| segments[index] != "**");
        if misplaced || doubles.len() > 1 || (directory && !doubles.is_empty()) {
            return Err(format!(
                "pattern {text:?}: ** must be a whole segment, at most once, as /** at the end or /**/ inside, and not in a directory pattern"
            ));
        }
        let compile = |parts: &[&str]| -> Result<Vec<Segment>, String> {
            parts
                .iter()
                .map(|part| Segment::compile(part, text))
                .collect()
        };
        let (prefix, shape) = match doubles.first() {
            None => (
                compile(&segments)?,
                if directory {
                    Shape::Directory
                } else {
                    Shape::Exact
                },
            ),
            Some(&at) if at == segments.len() - 1 => (compile(&segments[..at])?, Shape::Subtree),
            Some(&at) => (
                compile(&segments[..at])?,
                Shape::Infix(compile(&segments[at + 1..])?),
            ),
        };
        Ok(PathPattern {
            text: text.to_owned(),
            prefix,
            shape,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern covers `path` (a path starting with `/`).
    pub fn matches(&self, path: &str) -> bool {
        let Some(body) = path.strip_prefix('/') else {
            return false;
        };
        let segments: Vec<&str> = body.split('/').collect();
        let prefix_len = self.prefix.len();
        let prefix_matches = |segments: &[&str]| {
            segments.len() >= prefix_len
                && self
                    .prefix
                    .iter()
                    .zip(segments)
                    .all(|(pattern, segment)| pattern.matches(segment))
        };
        if !prefix_matches(&segments) {
            return false;
        }
        match &self.shape {
            Shape::Exact => segments.len() == prefix_len,
            Shape::Subtree => segments.len() > prefix_len,
            Shape::Directory => true,
            Shape::Infix(suffix) => {
                segments.len() >= prefix_len + suffix.len()
                    && suffix
                        .iter()
                        .zip(&segments[segments.len() - suffix.len()..])
                        .all(|(pattern, segment)| pattern.matches(segment))
            }
        }
    }
}

impl<'de> Deserialize<'de> for PathPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        PathPattern::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // -- patterns -----------------------------------------------------------------------

    #[test]
    fn patterns_match_segment_by_segment() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "/docs/*.md",
                &["/docs/a.md", "/docs/.md"],
                &["/docs/x/a.md", "/docs/a.txt", "/docs", "/docs/a.md/"],
            ),
            (
                "/docs/a.md",
                &["/docs/a.md"],
                &["/docs/a.md/v2", "/docs/a.m", "/docs"],
            ),
            (
                "/docs/**",
                &["/docs/", "/docs/a", "/docs/a/b.md"],
                &["/docs", "/docsx/a", "/"],
            ),
            ("/**", &["/", "/a", "/a/b/c.md"], &[]),
            ("/", &["/", "/a", "/a/b/c.md"], &[]),
            (
                "/docs/**/a.md",
                &["/docs/a.md", "/docs/x/a.md", "/docs/x/y/a.md"],
                &["/a.md", "/docs/x/b.md", "/docsa.md", "/docs/a.md/x"],
            ),
            (
                "/docs/**/sub/*.md",
                &["/docs/a/sub/x.md", "/docs/sub/x.md", "/docs/a/b/sub/x.md"],
                &["/docs/a/sub/y/x.md", "/sub/x.md"],
            ),
            (
                "/**/index.md",
                &["/index.md", "/a/b/index.md"],
                &["/a/b/index.mdx"],
            ),
            (
                "/team/",
                &["/team", "/team/", "/team/x.md", "/team/a/b.md"],
                &["/teams", "/teamx/a", "/", "/other/team"],
            ),
            ("/t*/", &["/team", "/tools/x.md"], &["/other"]),
            ("/a?c", &["/abc"], &["/a/c", "/ac", "/abbc"]),
            ("/a[bc]d", &["/abd", "/acd"], &["/add", "/a/d"]),
            ("/a[!x]c", &["/abc"], &["/axc", "/a/c"]),
            ("/a[^x]c", &["/abc"], &["/axc", "/a/c"]),
            ("/a[--0]c", &["/a-c", "/a0c"], &["/a/c"]),
            ("/a\\*", &["/a*"], &["/ab"]),
            (
                "/notes/*",
                &["/notes/a", "/notes/"],
                &["/notes", "/notes/a/b"],
            ),
        ];
        for (pattern, matching, other) in cases {
            let compiled = PathPattern::parse(pattern).unwrap();
            assert_eq!(compiled.as_str(), *pattern);
            for path in *matching {
                assert!(compiled.matches(path), "{pattern} should match {path}");
            }
            for path in *other {
                assert!(!compiled.matches(path), "{pattern} should not match {path}");
            }
            assert!(!compiled.matches("relative/path"));
        }
    }

    #[test]
    fn refuses_malformed_patterns() {
        for pattern in [
            "/private//**",
            "//x.md",
            "/a/./b.md",
            "/a/../b.md",
            "/a//",
            "",
            "docs",
            "*",
            "/a**",
            "/**b",
            "/a/***",
            "/**/**",
            "/a/**/b/**",
            "/a/**/",
            "/**/",
            "/{a,b}",
            "/a}",
            "/[a",
        ] {
            assert!(
                PathPattern::parse(pattern).is_err(),
                "{pattern:?} should be refused"
            );
        }
    }
}
