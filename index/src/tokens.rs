//! The token rule of body search, and the terms a body query holds.
//!
//! A **token** comes from a whitespace field: the whole field lowercased with its leading and
//! trailing non-word characters trimmed, and each run of word characters (letters, digits,
//! `_`) inside it when that run differs from the whole. A token is kept when it holds at least
//! [`MIN_TOKEN_CHARS`] characters and at most [`MAX_TOKEN_BYTES`] bytes. So `path.Match`
//! yields `path.match`, `path` and `match`, and `rmem_max` stays one token.
//!
//! A body **query** holds words (a field lowercased and trimmed like a token; a field longer
//! than [`MAX_TOKEN_BYTES`] is split into its word runs), prefixes (`term*`: every token
//! starting with `term`) and phrases (`"two words"`: the word runs in that order, adjacent).
//! Terms shorter than [`MIN_TOKEN_CHARS`] are dropped; repeated terms count once.

/// The fewest characters a token (and a query term) holds.
pub const MIN_TOKEN_CHARS: usize = 2;
/// The most bytes a token holds.
pub const MAX_TOKEN_BYTES: usize = 32;
/// The most tokens one prefix term expands to (the most frequent are kept).
pub const MAX_PREFIX_EXPANSION: usize = 64;

/// Whether `c` belongs to a word run.
pub fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn keep(token: &str) -> bool {
    token.len() <= MAX_TOKEN_BYTES && token.chars().nth(MIN_TOKEN_CHARS - 1).is_some()
}

/// Calls `emit` with every token of `text`, in order (a token may repeat).
pub fn for_each_token(text: &str, mut emit: impl FnMut(&str)) {
    for field in text.split_whitespace() {
        let lower = field.to_lowercase();
        let whole = lower.trim_matches(|c: char| !is_word_char(c));
        if keep(whole) {
            emit(whole);
        }
        for run in whole.split(|c: char| !is_word_char(c)) {
            if !run.is_empty() && run.len() != whole.len() && keep(run) {
                emit(run);
            }
        }
    }
}

/// Every token of `text`, in order.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_token(text, |t| out.push(t.to_owned()));
    out
}

/// The lowercased word runs of `text` with their byte ranges in `text`, in order (what a
/// phrase is matched against; every run, however short).
pub fn word_runs(text: &str) -> Vec<(std::ops::Range<usize>, String)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (is_word_char(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s..i, text[s..i].to_lowercase()));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s..text.len(), text[s..].to_lowercase()));
    }
    out
}

/// One term of a body query.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Term {
    /// A token, matched exactly.
    Word(String),
    /// `stem*`: any token starting with the stem.
    Prefix(String),
    /// `"a b c"`: these word runs, adjacent and in order.
    Phrase(Vec<String>),
}

impl Term {
    /// Whether this term is met by one token.
    pub fn matches_token(&self, token: &str) -> bool {
        match self {
            Term::Word(w) => w == token,
            Term::Prefix(p) => token.starts_with(p.as_str()),
            Term::Phrase(_) => false,
        }
    }
}

/// Whether the word runs `runs` hold `phrase` as adjacent runs, and how often.
pub fn phrase_count<'a>(runs: impl IntoIterator<Item = &'a str>, phrase: &[String]) -> usize {
    if phrase.is_empty() {
        return 0;
    }
    let runs: Vec<&str> = runs.into_iter().collect();
    if runs.len() < phrase.len() {
        return 0;
    }
    runs.windows(phrase.len())
        .filter(|w| w.iter().zip(phrase).all(|(a, b)| *a == b))
        .count()
}

fn word_terms(field: &str, out: &mut Vec<Term>) {
    let lower = field.to_lowercase();
    if let Some(stem) = lower.strip_suffix('*') {
        let stem = stem.trim_matches(|c: char| !is_word_char(c));
        if keep(stem) {
            out.push(Term::Prefix(stem.to_owned()));
        }
        return;
    }
    let whole = lower.trim_matches(|c: char| !is_word_char(c));
    if whole.len() > MAX_TOKEN_BYTES {
        for run in whole.split(|c: char| !is_word_char(c)) {
            if keep(run) {
                out.push(Term::Word(run.to_owned()));
            }
        }
    } else if keep(whole) {
        out.push(Term::Word(whole.to_owned()));
    }
}

/// The terms of a body query, distinct, in query order. A `"` opens a phrase that runs to
/// the next `"` (or the end); a phrase of one word run is that word.
pub fn query_terms(query: &str) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    for (i, part) in query.split('"').enumerate() {
        if i % 2 == 1 {
            let runs: Vec<String> = word_runs(part).into_iter().map(|(_, r)| r).collect();
            match runs.len() {
                0 => {}
                1 => word_terms(&runs[0], &mut out),
                _ => out.push(Term::Phrase(runs)),
            }
        } else {
            for field in part.split_whitespace() {
                word_terms(field, &mut out);
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|t| seen.insert(t.clone()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_yield_the_whole_field_and_its_word_runs() {
        assert_eq!(tokens("path.Match"), ["path.match", "path", "match"]);
        assert_eq!(tokens("rmem_max"), ["rmem_max"]);
        assert_eq!(tokens("(Hello), world!"), ["hello", "world"]);
        assert_eq!(tokens("a b c"), Vec::<String>::new());
        assert_eq!(tokens("x.yz"), ["x.yz", "yz"]);
        assert_eq!(tokens("ÉTÉ été"), ["été", "été"]);
    }

    #[test]
    fn tokens_keep_two_runes_to_32_bytes() {
        let long = "a".repeat(33);
        assert!(tokens(&long).is_empty());
        assert_eq!(tokens(&"b".repeat(32)).len(), 1);
        assert_eq!(tokens("日本"), ["日本"]);
        // A long field still yields its short runs.
        let field = format!("{}.net", "c".repeat(40));
        assert_eq!(tokens(&field), ["net"]);
    }

    #[test]
    fn query_terms_words_prefixes_and_phrases() {
        assert_eq!(
            query_terms("UDP udp Buffer, x"),
            [Term::Word("udp".into()), Term::Word("buffer".into())]
        );
        assert_eq!(
            query_terms("sys* \"UDP buffer\" \"one\""),
            [
                Term::Prefix("sys".into()),
                Term::Phrase(vec!["udp".into(), "buffer".into()]),
                Term::Word("one".into()),
            ]
        );
        assert_eq!(query_terms("a* * \"\""), Vec::<Term>::new());
        let long = format!("{}-alpha-beta", "q".repeat(30));
        assert_eq!(
            query_terms(&long),
            [
                Term::Word("q".repeat(30)),
                Term::Word("alpha".into()),
                Term::Word("beta".into())
            ]
        );
        assert_eq!(query_terms("path.Match"), [Term::Word("path.match".into())]);
    }

    #[test]
    fn phrases_count_adjacent_runs() {
        let runs = ["the", "udp", "buffer", "udp", "buffer"];
        let phrase = vec!["udp".to_owned(), "buffer".to_owned()];
        assert_eq!(phrase_count(runs, &phrase), 2);
        assert_eq!(phrase_count(["buffer", "udp"], &phrase), 0);
        let spans = word_runs("Hi, Bob_2!");
        assert_eq!(spans, [(0..2, "hi".into()), (4..9, "bob_2".into())]);
    }
}
