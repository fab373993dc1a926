//! The tokenizer of the words fields: every word run of a value at its position (for
//! phrases) and every compound token (`path.match`) at its first run's position, so a token's
//! frequency in the field is its count under [`crate::tokens`]'s rule (see
//! [`tokens::fields`]) and one field serves both words and phrases. A section's trail
//! headings, and an entry's title and each tag, are separate values of their field, which
//! tantivy lays a position apart, so no phrase spans two.

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

use crate::tokens;

/// The name the words fields' tokenizer is registered under.
pub(super) const WORDS_TOKENIZER: &str = "quire_words";

/// Registered once per index; holds nothing between values.
#[derive(Clone)]
pub(super) struct WordsTokenizer;

/// The words of one value, a whitespace field at a time: only that field's tokens are held,
/// however long the value.
pub(super) struct Words<'a> {
    fields: Box<dyn Iterator<Item = tokens::Field> + 'a>,
    /// The current field's tokens not yet handed out.
    pending: std::vec::IntoIter<Token>,
    token: Token,
    /// The position of the next run.
    position: usize,
}

impl Tokenizer for WordsTokenizer {
    type TokenStream<'a> = Words<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Words<'a> {
        Words {
            fields: Box::new(tokens::fields(text)),
            pending: Vec::new().into_iter(),
            token: Token::default(),
            position: 0,
        }
    }
}

impl Words<'_> {
    /// The tokens of `field`: its runs from the next position, then its compound at its
    /// first run's.
    fn tokens_of(&mut self, field: tokens::Field) -> Vec<Token> {
        let first = self.position;
        let span = match (field.runs.first(), field.runs.last()) {
            (Some((first, _)), Some((last, _))) => first.start..last.end,
            _ => 0..0,
        };
        let mut out = Vec::with_capacity(field.runs.len() + 1);
        for (range, run) in field.runs {
            out.push(word(run, range, self.position));
            self.position += 1;
        }
        if let Some(compound) = field.compound {
            out.push(word(compound, span, first));
        }
        out
    }
}

fn word(text: String, range: std::ops::Range<usize>, position: usize) -> Token {
    Token {
        offset_from: range.start,
        offset_to: range.end,
        position,
        text,
        position_length: 1,
    }
}

impl TokenStream for Words<'_> {
    fn advance(&mut self) -> bool {
        loop {
            if let Some(token) = self.pending.next() {
                self.token = token;
                return true;
            }
            let Some(field) = self.fields.next() else {
                return false;
            };
            self.pending = self.tokens_of(field).into_iter();
        }
    }

    fn token(&self) -> &Token {
        &self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<(String, usize)> {
        let mut tokenizer = WordsTokenizer;
        let mut stream = tokenizer.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push((stream.token().text.clone(), stream.token().position));
        }
        out
    }

    #[test]
    fn runs_take_positions_in_order_and_a_compound_its_first_runs() {
        assert_eq!(
            words("See Path.Match, a b"),
            [
                ("see".to_owned(), 0),
                ("path".to_owned(), 1),
                ("match".to_owned(), 2),
                ("path.match".to_owned(), 1),
                ("a".to_owned(), 3),
                ("b".to_owned(), 4),
            ]
        );
        assert!(words(" \n ").is_empty());
    }
}
