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

/// Splits a value into its words; keeps one buffer of tokens between values.
#[derive(Clone, Default)]
pub(super) struct WordsTokenizer {
    tokens: Vec<Token>,
}

pub(super) struct Words<'a> {
    tokens: &'a mut [Token],
    /// How many tokens have been handed out; the current one is the last of them.
    at: usize,
    /// What a stream not yet advanced, or past its end, lends.
    none: Token,
}

impl Tokenizer for WordsTokenizer {
    type TokenStream<'a> = Words<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Words<'a> {
        self.tokens.clear();
        let mut position = 0;
        for field in tokens::fields(text) {
            let first = position;
            for (range, run) in field.runs {
                self.tokens.push(word(run, range, position));
                position += 1;
            }
            if let Some(compound) = field.compound {
                self.tokens.push(word(compound, 0..0, first));
            }
        }
        Words {
            tokens: &mut self.tokens,
            at: 0,
            none: Token::default(),
        }
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
        if self.at < self.tokens.len() {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn token(&self) -> &Token {
        self.at
            .checked_sub(1)
            .and_then(|i| self.tokens.get(i))
            .unwrap_or(&self.none)
    }

    fn token_mut(&mut self) -> &mut Token {
        match self.at.checked_sub(1) {
            Some(i) if i < self.tokens.len() => &mut self.tokens[i],
            _ => &mut self.none,
        }
    }
}
