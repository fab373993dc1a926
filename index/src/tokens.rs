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

/// Whether the token rule keeps `token` (by its length).
pub(crate) fn keep(token: &str) -> bool {
    token.len() <= MAX_TOKEN_BYTES && token.chars().nth(MIN_TOKEN_CHARS - 1).is_some()
}

/// Calls `emit` with every token of `text`, in order (a token may repeat). [`fields`] splits
/// alike, keeping the runs too; this walk allocates no run, as indexing calls it on every
/// section, and `fields_hold_the_tokens` holds the two together.
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

/// One whitespace field of a text, split as the token rule splits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's word runs: the runs of word characters of the field lowercased (so a
    /// character whose lowercase holds a non-word character splits a run, as in the token
    /// rule), each with the byte range in the text of the characters it came from.
    pub runs: Vec<(std::ops::Range<usize>, String)>,
    /// The field's whole token when it holds two runs or more (with one, the whole is that
    /// run) and the token rule keeps it: `path.match` for `Path.Match`.
    pub compound: Option<String>,
}

/// The whitespace fields of `text`, in order. Their runs and compounds hold exactly the
/// tokens [`for_each_token`] yields (each kept run, and each kept compound), and every run
/// besides.
pub fn fields(text: &str) -> impl Iterator<Item = Field> + '_ {
    text.split_whitespace().map(move |field| {
        // `field` is a slice of `text`: where it starts.
        let base = field.as_ptr() as usize - text.as_ptr() as usize;
        // `str::to_lowercase` differs from lowercasing each character only in the final
        // sigma, which is one character either way: the two walk in step.
        let lower = field.to_lowercase();
        let mut lowered = lower.chars();
        let mut runs = Vec::new();
        let mut run: Option<(usize, usize, String)> = None;
        for (i, c) in field.char_indices() {
            for _ in c.to_lowercase() {
                let Some(l) = lowered.next() else { break };
                if is_word_char(l) {
                    let (_, end, text) = run.get_or_insert_with(|| (base + i, 0, String::new()));
                    *end = base + i + c.len_utf8();
                    text.push(l);
                } else if let Some((start, end, text)) = run.take() {
                    runs.push((start..end, text));
                }
            }
        }
        if let Some((start, end, text)) = run {
            runs.push((start..end, text));
        }
        let compound = (runs.len() > 1)
            .then(|| lower.trim_matches(|c: char| !is_word_char(c)))
            .filter(|whole| keep(whole))
            .map(str::to_owned);
        Field { runs, compound }
    })
}

/// The word runs of `text` with their byte ranges in `text`, in order (what a phrase is
/// matched against; every run, however short).
pub fn word_runs(text: &str) -> Vec<(std::ops::Range<usize>, String)> {
    fields(text).flat_map(|f| f.runs).collect()
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

    #[test]
    fn runs_split_where_the_token_rule_splits() {
        // U+0130 lowercases to `i` and a combining dot, which is no word character: the
        // token rule splits there, so the runs do too, each naming the characters it came
        // from.
        let spans = word_runs("xİy-z");
        assert_eq!(
            spans,
            [(0..3, "xi".into()), (3..4, "y".into()), (5..6, "z".into())]
        );
        assert_eq!(tokens("xİy-z"), ["xi\u{307}y-z", "xi"]);
        // The final sigma is lowercased as the whole field is.
        assert_eq!(word_runs("ΟΔΟΣ")[0].1, "οδος");
        assert_eq!(tokens("ΟΔΟΣ"), ["οδος"]);
        let path = fields("Path.Match ok").collect::<Vec<_>>();
        assert_eq!(path[0].compound.as_deref(), Some("path.match"));
        assert_eq!(path[1].compound, None);
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    proptest::proptest! {
        /// The kept runs and compounds of the fields are the tokens, counted alike: what
        /// lets the stored index count a token's occurrences from its word postings.
        #[test]
        fn fields_hold_the_tokens(text in "(\\PC{0,6}[ .,İΣσ_-]?){0,12}") {
            let mut from_fields = Vec::new();
            for field in fields(&text) {
                from_fields.extend(field.compound);
                from_fields.extend(field.runs.into_iter().map(|(_, r)| r).filter(|r| keep(r)));
            }
            proptest::prop_assert_eq!(sorted(from_fields), sorted(tokens(&text)));
        }
    }
}
