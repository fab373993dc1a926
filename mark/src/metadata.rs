//! The metadata block: the flat string map a request, a response and a WATCH block carry,
//! its parser (a strict subset of YAML) and its encoder (the reference encoder's key order
//! and quoting), so `parse(encode(x)) == x`.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Metadata: a flat map of strings, in key order.
pub type Metadata = BTreeMap<String, String>;

pub(crate) const FENCE: &[u8] = b"---\n";
pub(crate) const CLOSING_FENCE: &[u8] = b"\n---\n";
pub(crate) const CLOSING_FENCE_AT_END: &[u8] = b"\n---";

/// Where `needle` first occurs in `haystack`: how the closing fences are found.
pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The metadata block for `metadata`, fences included: what a WATCH event block is.
pub fn encode_metadata_block(metadata: &Metadata) -> String {
    encode_entries(metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

// ---------------------------------------------------------------------------------------
// The metadata block parser.

/// Whether `c` may appear raw in a metadata block (YAML's printable set, minus the
/// characters YAML 1.1 readers treat as line breaks, minus the byte-order mark).
fn allowed_raw(c: char) -> bool {
    matches!(c, '\t' | ' '..='~' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
        && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}')
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Parses the text between the fences. Errors name the line (1 = first line of the block).
pub(crate) fn parse_block(text: &str) -> Result<Metadata, String> {
    let mut metadata = Metadata::new();
    if text.is_empty() {
        return Ok(metadata);
    }
    for (index, line) in text.split('\n').enumerate() {
        let number = index + 1;
        if let Some(bad) = line.chars().find(|&c| !allowed_raw(c)) {
            return Err(format!(
                "line {number}: character U+{:04X} must be escaped in a double-quoted value",
                u32::from(bad)
            ));
        }
        let content = line.trim_start_matches(is_blank);
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if content.len() != line.len() {
            return Err(format!(
                "line {number}: indented line (metadata is a flat map of strings)"
            ));
        }
        let (key, rest) = parse_key(line).map_err(|e| format!("line {number}: {e}"))?;
        let value = parse_value(rest).map_err(|e| format!("line {number}: {e}"))?;
        if metadata.contains_key(&key) {
            return Err(format!("line {number}: key {key:?} given twice"));
        }
        metadata.insert(key, value);
    }
    Ok(metadata)
}

/// Splits `key: rest`, returning the decoded key and what follows the colon.
fn parse_key(line: &str) -> Result<(String, &str), String> {
    let (key, after) = match line.chars().next() {
        Some('"') => parse_double_quoted(line)?,
        Some('\'') => parse_single_quoted(line)?,
        _ => {
            let colon = line
                .char_indices()
                .find(|&(at, c)| c == ':' && line[at + 1..].chars().next().is_none_or(is_blank))
                .map(|(at, _)| at)
                .ok_or("expected `key: value`")?;
            let key = line[..colon].trim_end_matches(is_blank);
            if key.is_empty() {
                return Err("empty key".to_owned());
            }
            check_plain(key).map_err(|e| format!("key {key:?}: {e}"))?;
            (key.to_owned(), &line[colon..])
        }
    };
    let after = after.trim_start_matches(is_blank);
    let Some(rest) = after.strip_prefix(':') else {
        return Err(format!("expected `:` after the key {key:?}"));
    };
    if !rest.chars().next().is_none_or(is_blank) {
        return Err(format!("expected a space after `{key}:`"));
    }
    Ok((key, rest))
}

fn parse_value(rest: &str) -> Result<String, String> {
    let value = rest.trim_start_matches(is_blank);
    match value.chars().next() {
        None | Some('#') => Ok(String::new()),
        Some('"') => {
            let (decoded, after) = parse_double_quoted(value)?;
            check_trailing(after)?;
            Ok(decoded)
        }
        Some('\'') => {
            let (decoded, after) = parse_single_quoted(value)?;
            check_trailing(after)?;
            Ok(decoded)
        }
        Some(_) => {
            let end = value
                .char_indices()
                .find(|&(at, c)| c == '#' && at > 0 && value[..at].ends_with(is_blank))
                .map_or(value.len(), |(at, _)| at);
            let plain = value[..end].trim_end_matches(is_blank);
            check_plain(plain).map_err(|e| format!("value {plain:?}: {e}"))?;
            Ok(match plain {
                "~" | "null" | "Null" | "NULL" => String::new(),
                _ => plain.to_owned(),
            })
        }
    }
}

/// Refuses a plain scalar that a YAML reader would not read as this same string.
fn check_plain(plain: &str) -> Result<(), &'static str> {
    let mut chars = plain.chars();
    let first = chars.next().ok_or("empty")?;
    let second = chars.next();
    if matches!(
        first,
        ',' | '['
            | ']'
            | '{'
            | '}'
            | '#'
            | '&'
            | '*'
            | '!'
            | '|'
            | '>'
            | '%'
            | '@'
            | '`'
            | '"'
            | '\''
    ) {
        return Err("starts with a YAML indicator: quote it");
    }
    if matches!(first, '-' | '?' | ':') && second.is_none_or(is_blank) {
        return Err("starts with a YAML indicator: quote it");
    }
    if plain.ends_with(':') || plain.contains(": ") || plain.contains(":\t") {
        return Err("contains `: `: quote it");
    }
    if plain.contains(" #") || plain.contains("\t#") {
        return Err("contains ` #`: quote it");
    }
    Ok(())
}

/// After a quoted value only blanks and a comment may follow.
fn check_trailing(after: &str) -> Result<(), String> {
    let trimmed = after.trim_start_matches(is_blank);
    if trimmed.is_empty() || (trimmed.starts_with('#') && trimmed.len() < after.len()) {
        Ok(())
    } else {
        Err(format!("unexpected {trimmed:?} after a quoted value"))
    }
}

/// Decodes a double-quoted scalar at the start of `text`; returns it and what follows.
fn parse_double_quoted(text: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &text[at + 1..])),
            '\\' => {
                let (_, escape) = chars
                    .next()
                    .ok_or("double-quoted value is not closed on its line")?;
                let decoded = match escape {
                    '0' => '\0',
                    'a' => '\u{7}',
                    'b' => '\u{8}',
                    't' | '\t' => '\t',
                    'n' => '\n',
                    'v' => '\u{b}',
                    'f' => '\u{c}',
                    'r' => '\r',
                    'e' => '\u{1b}',
                    ' ' => ' ',
                    '"' => '"',
                    '/' => '/',
                    '\\' => '\\',
                    'N' => '\u{85}',
                    '_' => '\u{a0}',
                    'L' => '\u{2028}',
                    'P' => '\u{2029}',
                    'x' | 'u' | 'U' => {
                        let width = match escape {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let mut code = 0u32;
                        for _ in 0..width {
                            let digit = chars
                                .next()
                                .and_then(|(_, d)| d.to_digit(16))
                                .ok_or_else(|| format!("bad \\{escape} escape"))?;
                            code = code * 16 + digit;
                        }
                        char::from_u32(code)
                            .ok_or_else(|| format!("\\{escape} escape names no character"))?
                    }
                    other => return Err(format!("unknown escape \\{other}")),
                };
                out.push(decoded);
            }
            other => out.push(other),
        }
    }
    Err("double-quoted value is not closed on its line".to_owned())
}

/// Decodes a single-quoted scalar at the start of `text`; returns it and what follows.
fn parse_single_quoted(text: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((at, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().is_some_and(|&(_, next)| next == '\'') {
                chars.next();
                out.push('\'');
            } else {
                return Ok((out, &text[at + 1..]));
            }
        } else {
            out.push(c);
        }
    }
    Err("single-quoted value is not closed on its line".to_owned())
}

// ---------------------------------------------------------------------------------------
// The metadata block encoder: the reference encoder's (go-yaml v3) key order and quoting.

pub(crate) fn encode_entries<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut entries: Vec<(&str, &str)> = entries.collect();
    sort_tolerating(&mut entries, |a, b| reference_key_order(a.0, b.0));
    let mut out = String::from("---\n");
    for (key, value) in entries {
        write_scalar(&mut out, key);
        out.push_str(": ");
        write_scalar(&mut out, value);
        out.push('\n');
    }
    out.push_str("---\n");
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
}

fn write_scalar(out: &mut String, text: &str) {
    match scalar_style(text) {
        Style::Plain => out.push_str(text),
        Style::SingleQuoted => {
            out.push('\'');
            out.push_str(&text.replace('\'', "''"));
            out.push('\'');
        }
        Style::DoubleQuoted => write_double_quoted(out, text),
    }
}

/// Printable as YAML emitters judge it (TAB is not: it is escaped).
fn is_printable(c: char) -> bool {
    matches!(c, '\n' | ' '..='~' | '\u{85}' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
        && c != '\u{FEFF}'
}

pub(crate) fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn scalar_style(text: &str) -> Style {
    // The reference writes multi-line strings as block scalars; one double-quoted line reads
    // back the same and keeps every entry on one line.
    if text.chars().any(|c| !is_printable(c) || is_break(c)) {
        return Style::DoubleQuoted;
    }
    if resolves_to_non_string(text) || is_base60_float(text) || is_yaml11_bool(text) {
        return Style::DoubleQuoted;
    }
    if plain_allowed(text) {
        Style::Plain
    } else {
        Style::SingleQuoted
    }
}

/// Whether an emitter may write `text` as a plain scalar in a block mapping.
fn plain_allowed(text: &str) -> bool {
    if text.is_empty() || text.starts_with("---") || text.starts_with("...") {
        return false;
    }
    if text.starts_with(' ') || text.ends_with(' ') {
        return false;
    }
    let chars: Vec<char> = text.chars().collect();
    for (index, &c) in chars.iter().enumerate() {
        let followed_by_blank = chars.get(index + 1).is_none_or(|&next| next == ' ');
        let preceded_by_blank = index == 0 || chars[index - 1] == ' ';
        let indicator = if index == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => true,
                '?' | ':' | '-' => followed_by_blank,
                _ => false,
            }
        } else {
            match c {
                ':' => followed_by_blank,
                '#' => preceded_by_blank,
                _ => false,
            }
        };
        if indicator {
            return false;
        }
    }
    true
}

fn write_double_quoted(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        let escape = match c {
            '\0' => Some('0'),
            '\u{7}' => Some('a'),
            '\u{8}' => Some('b'),
            '\t' => Some('t'),
            '\n' => Some('n'),
            '\u{b}' => Some('v'),
            '\u{c}' => Some('f'),
            '\r' => Some('r'),
            '\u{1b}' => Some('e'),
            '"' => Some('"'),
            '\\' => Some('\\'),
            '\u{85}' => Some('N'),
            '\u{2028}' => Some('L'),
            '\u{2029}' => Some('P'),
            _ => None,
        };
        match escape {
            Some(letter) => {
                out.push('\\');
                out.push(letter);
            }
            None if is_printable(c) => out.push(c),
            None => {
                let code = u32::from(c);
                let _ = match code {
                    0..=0xFF => write!(out, "\\x{code:02X}"),
                    0x100..=0xFFFF => write!(out, "\\u{code:04X}"),
                    _ => write!(out, "\\U{code:08X}"),
                };
            }
        }
    }
    out.push('"');
}

/// Whether a YAML reader resolves the plain scalar `text` to something other than a string
/// (null, bool, int, float, timestamp, merge key), following the reference encoder's rules.
fn resolves_to_non_string(text: &str) -> bool {
    const SPECIAL: [&str; 24] = [
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", ".nan",
        ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
        "-.INF", "<<",
    ];
    if SPECIAL.contains(&text) {
        return true;
    }
    match text.as_bytes()[0] {
        b'.' => is_float_syntax(text) && finite(text),
        b'+' | b'-' | b'0'..=b'9' => {
            if is_timestamp(text) {
                return true;
            }
            let plain: String = text.chars().filter(|&c| c != '_').collect();
            fits_int(&plain) || (is_float_syntax(&plain) && finite(&plain))
        }
        _ => false,
    }
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_float_syntax(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    let digits = |from: usize| {
        bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let integer = digits(at);
    at += integer;
    if bytes.get(at) == Some(&b'.') {
        let fraction = digits(at + 1);
        if integer == 0 && fraction == 0 {
            return false;
        }
        at += 1 + fraction;
    } else if integer == 0 {
        return false;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let exponent = digits(at);
        if exponent == 0 {
            return false;
        }
        at += exponent;
    }
    at == bytes.len()
}

/// A float that overflows is not a float to the reference reader: it stays a string.
fn finite(text: &str) -> bool {
    text.parse::<f64>().is_ok_and(f64::is_finite)
}

/// Whether `text` is an integer (optional sign; `0x`, `0o`, `0b` or leading-`0` octal
/// prefixes) that fits 64 bits, signed or unsigned.
fn fits_int(text: &str) -> bool {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = unsigned.to_ascii_lowercase();
    let (radix, digits) = if let Some(hex) = lower.strip_prefix("0x") {
        (16, hex)
    } else if let Some(octal) = lower.strip_prefix("0o") {
        (8, octal)
    } else if let Some(binary) = lower.strip_prefix("0b") {
        (2, binary)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return false;
    }
    match u128::from_str_radix(digits, radix) {
        Ok(value) if negative => value <= 1u128 << 63,
        Ok(value) => value <= u128::from(u64::MAX),
        Err(_) => false,
    }
}

/// `YYYY-M-D`, `YYYY-M-D[Tt]h:m:s[.frac](Z|±hh:mm)` or `YYYY-M-D h:m:s[.frac]`, with the
/// calendar checked, as the reference reader recognises timestamps.
fn is_timestamp(text: &str) -> bool {
    struct Cursor<'a> {
        bytes: &'a [u8],
        at: usize,
    }
    impl Cursor<'_> {
        fn number(&mut self, min: usize, max: usize) -> Option<u32> {
            let count = self.bytes[self.at..]
                .iter()
                .take(max)
                .take_while(|b| b.is_ascii_digit())
                .count();
            if count < min {
                return None;
            }
            // Saturating: a fraction may have any number of digits, and only small fields
            // (year, month, day, time, zone) are ever compared.
            let value = self.bytes[self.at..self.at + count]
                .iter()
                .fold(0u32, |acc, b| {
                    acc.saturating_mul(10).saturating_add(u32::from(b - b'0'))
                });
            self.at += count;
            Some(value)
        }
        fn eat(&mut self, byte: u8) -> bool {
            let found = self.bytes.get(self.at) == Some(&byte);
            self.at += usize::from(found);
            found
        }
        fn done(&self) -> bool {
            self.at == self.bytes.len()
        }
    }

    let mut cursor = Cursor {
        bytes: text.as_bytes(),
        at: 0,
    };
    let Some(year) = cursor.number(4, 4) else {
        return false;
    };
    if !cursor.eat(b'-') {
        return false;
    }
    let (Some(month), true, Some(day)) =
        (cursor.number(1, 2), cursor.eat(b'-'), cursor.number(1, 2))
    else {
        return false;
    };
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return false;
    }
    if cursor.done() {
        return true;
    }
    let zoned = match cursor.bytes[cursor.at] {
        b'T' | b't' => true,
        b' ' => false,
        _ => return false,
    };
    cursor.at += 1;
    let time = (
        cursor.number(1, 2),
        cursor.eat(b':'),
        cursor.number(1, 2),
        cursor.eat(b':'),
        cursor.number(1, 2),
    );
    let (Some(hour), true, Some(minute), true, Some(second)) = time else {
        return false;
    };
    if hour > 23 || minute > 59 || second > 59 {
        return false;
    }
    if cursor.eat(b'.') && cursor.number(1, usize::MAX).is_none() {
        return false;
    }
    if !zoned {
        return cursor.done();
    }
    if cursor.eat(b'Z') {
        return cursor.done();
    }
    if !(cursor.eat(b'+') || cursor.eat(b'-')) {
        return false;
    }
    let zone = (cursor.number(2, 2), cursor.eat(b':'), cursor.number(2, 2));
    matches!(zone, (Some(hours), true, Some(minutes)) if hours <= 24 && minutes <= 60)
        && cursor.done()
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// YAML 1.1 sexagesimal numbers (`1:20`, `-3:25:45.5`), which older readers take as floats.
fn is_base60_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    if !bytes.get(at).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    at += 1;
    while bytes
        .get(at)
        .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
    {
        at += 1;
    }
    let mut groups = 0;
    while bytes.get(at) == Some(&b':') {
        at += 1;
        match (bytes.get(at), bytes.get(at + 1)) {
            (Some(b'0'..=b'5'), Some(b'0'..=b'9')) => at += 2,
            (Some(b'0'..=b'9'), _) => at += 1,
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        while bytes
            .get(at)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
        {
            at += 1;
        }
    }
    at == bytes.len()
}

/// YAML 1.1 booleans that YAML 1.2 readers take as strings; quoted so both agree.
fn is_yaml11_bool(text: &str) -> bool {
    matches!(
        text,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "on"
            | "On"
            | "ON"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "off"
            | "Off"
            | "OFF"
    )
}

/// Sorts `items` by `order`, stably, in O(n log n), without assuming `order` is a total
/// order: the reference's key order is not one for some keys (long digit runs overflow,
/// leading zeros), and the standard sorts may panic on such an order, which a document's
/// keys must never make an encoder do. Where `order` is total the result is the standard
/// sort's. A bottom-up merge sort: the standard library has no sort that tolerates this.
fn sort_tolerating<T: Copy>(items: &mut Vec<T>, order: impl Fn(&T, &T) -> Ordering) {
    let n = items.len();
    let mut from = items.clone();
    let mut to = Vec::with_capacity(n);
    let mut width = 1;
    while width < n {
        to.clear();
        for start in (0..n).step_by(2 * width) {
            let middle = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut left, mut right) = (start, middle);
            while left < middle && right < end {
                // The left run wins ties, which keeps the sort stable.
                if order(&from[right], &from[left]) == Ordering::Less {
                    to.push(from[right]);
                    right += 1;
                } else {
                    to.push(from[left]);
                    left += 1;
                }
            }
            to.extend_from_slice(&from[left..middle]);
            to.extend_from_slice(&from[right..end]);
        }
        std::mem::swap(&mut from, &mut to);
        width *= 2;
    }
    *items = from;
}

/// The reference encoder's key order: letters compare by code point, a letter sorts after a
/// non-letter (before it right after a digit), and digit runs compare by numeric value.
fn reference_key_order(a: &str, b: &str) -> Ordering {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut after_digit = false;
    for index in 0..a.len().min(b.len()) {
        let (ca, cb) = (a[index], b[index]);
        if ca == cb {
            after_digit = ca.is_numeric();
            continue;
        }
        let (a_letter, b_letter) = (ca.is_alphabetic(), cb.is_alphabetic());
        if a_letter && b_letter {
            return ca.cmp(&cb);
        }
        if a_letter || b_letter {
            let a_first = if after_digit { a_letter } else { b_letter };
            return if a_first {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let leading_zero_run = if ca == '0' || cb == '0' {
            a[..index]
                .iter()
                .rev()
                .take_while(|c| c.is_ascii_digit())
                .any(|&c| c != '0')
        } else {
            false
        };
        let run = |s: &[char]| -> (i64, usize) {
            let mut value: i64 = i64::from(leading_zero_run);
            let mut end = index;
            while let Some(digit) = s.get(end).and_then(|c| c.to_digit(10)) {
                value = value.wrapping_mul(10).wrapping_add(i64::from(digit));
                end += 1;
            }
            (value, end)
        };
        let ((a_value, a_end), (b_value, b_end)) = (run(&a), run(&b));
        if a_value != b_value {
            return a_value.cmp(&b_value);
        }
        if a_end != b_end {
            return a_end.cmp(&b_end);
        }
        return ca.cmp(&cb);
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::*;
    use crate::*;

    // -- the metadata grammar -----------------------------------------------------------

    #[test]
    fn metadata_values_are_kept_as_written() {
        let parsed = block_of(
            "version: 3\nflag: true\nratio: 0.7\nwhen: 2026-01-01T00:00:00Z\nhex: 0x1F\nword: hello world\nurl: http://x/y?a=b#frag\ncolon: a:b\ndash: -x",
        )
        .unwrap();
        assert_eq!(
            parsed,
            meta(&[
                ("colon", "a:b"),
                ("dash", "-x"),
                ("flag", "true"),
                ("hex", "0x1F"),
                ("ratio", "0.7"),
                ("url", "http://x/y?a=b#frag"),
                ("version", "3"),
                ("when", "2026-01-01T00:00:00Z"),
                ("word", "hello world"),
            ])
        );
    }

    #[test]
    fn null_words_and_empty_values_decode_to_empty_strings() {
        let parsed =
            block_of("a:\nb: ~\nc: null\nd: Null\ne: NULL\nf: # only a comment\ng: nil").unwrap();
        assert_eq!(
            parsed,
            meta(&[
                ("a", ""),
                ("b", ""),
                ("c", ""),
                ("d", ""),
                ("e", ""),
                ("f", ""),
                ("g", "nil")
            ])
        );
    }

    #[test]
    fn quoted_values_comments_and_blank_lines() {
        let parsed = block_of(concat!(
            "# a comment line\n",
            "\n",
            "   \n",
            "  # an indented comment\n",
            "a: \"x: y # not a comment\"   # a comment\n",
            "b: 'it''s'\n",
            "c: \"tab\\there\\nnew \\\"q\\\" \\\\ \\x41\\u00e9\\U0001F600\\N\\_\\L\\P\\0\\a\\b\\v\\f\\r\\e\\ \\/\"\n",
            "d: plain # trailing comment\n",
            "e: a#b\n",
            "'quoted key': 1\n",
            "\"dq key\" : 2\n",
            "f:\tafter a tab",
        ))
        .unwrap();
        assert_eq!(parsed["a"], "x: y # not a comment");
        assert_eq!(parsed["b"], "it's");
        assert_eq!(
            parsed["c"],
            "tab\there\nnew \"q\" \\ Aé😀\u{85}\u{a0}\u{2028}\u{2029}\0\u{7}\u{8}\u{b}\u{c}\r\u{1b} /"
        );
        assert_eq!(parsed["d"], "plain");
        assert_eq!(parsed["e"], "a#b");
        assert_eq!(parsed["quoted key"], "1");
        assert_eq!(parsed["dq key"], "2");
        assert_eq!(parsed["f"], "after a tab");
        assert_eq!(parsed.len(), 8);
    }

    #[test]
    fn refuses_metadata_that_is_not_a_flat_string_map() {
        let cases: &[(&str, &str)] = &[
            ("a: b\n  c: d", "line 2: indented"),
            ("a:\n  - x", "indented"),
            ("- x", "expected `key: value`"),
            ("just text", "expected `key: value`"),
            ("key:value", "expected `key: value`"),
            ("...", "expected `key: value`"),
            (": v", "empty key"),
            ("a: 1\na: 2", "line 2: key \"a\" given twice"),
            ("a: [1, 2]", "indicator"),
            ("a: {b: c}", "indicator"),
            ("a: &anchor x", "indicator"),
            ("a: *alias", "indicator"),
            ("a: !tag x", "indicator"),
            ("a: |", "indicator"),
            ("a: >", "indicator"),
            ("a: %x", "indicator"),
            ("a: @x", "indicator"),
            ("a: `x", "indicator"),
            ("a: - x", "indicator"),
            ("a: ? x", "indicator"),
            ("a: -", "indicator"),
            ("a: b: c", "`: `"),
            ("a: b:", "`: `"),
            ("&k: v", "indicator"),
            ("a #b: v", "` #`"),
            ("a: \"open", "not closed"),
            ("a: 'open", "not closed"),
            ("a: \"bad \\q\"", "unknown escape \\q"),
            ("a: \"\\x4\"", "bad \\x escape"),
            ("a: \"\\uD800\"", "names no character"),
            ("a: \"x\" y", "after a quoted value"),
            ("a: \"x\"#c", "after a quoted value"),
            ("\"k\" v", "expected `:` after the key"),
            ("\"k\":v", "expected a space"),
            ("a: b\u{1}", "U+0001"),
            ("a: b\r", "U+000D"),
            ("a: \u{7f}", "U+007F"),
            ("a: \u{85}", "U+0085"),
            ("a: \u{2028}", "U+2028"),
            ("a: \u{feff}x", "U+FEFF"),
        ];
        for (line, expected) in cases {
            let error = block_of(line).expect_err(line);
            assert_eq!(error.kind(), ErrorKind::Malformed, "{line:?}");
            assert!(
                error.detail().contains(expected),
                "{line:?}: {:?} should mention {expected:?}",
                error.detail()
            );
            assert!(error.detail().starts_with("metadata line "), "{line:?}");
        }
    }

    #[test]
    fn refuses_a_block_that_is_not_utf8() {
        assert_malformed(b"PUBLISH /a.md\n---\nk: \xff\n---\n", "not valid UTF-8");
    }

    // -- the encoder's quoting ----------------------------------------------------------

    #[test]
    fn quotes_what_a_yaml_reader_would_type() {
        let cases: &[(&str, &str)] = &[
            ("ok", "ok"),
            ("alpha,wire", "alpha,wire"),
            ("AQAABS9kb2NzYS5tZA", "AQAABS9kb2NzYS5tZA"),
            ("hello world", "hello world"),
            ("it's", "it's"),
            ("a#b", "a#b"),
            ("-x", "-x"),
            ("a:b", "a:b"),
            ("1.2.3", "1.2.3"),
            ("v1", "v1"),
            ("2026-13-01", "2026-13-01"),
            ("2026-02-30", "2026-02-30"),
            ("9:61", "9:61"),
            ("1e400", "1e400"),
            ("0x", "0x"),
            ("é", "é"),
            ("3", "\"3\""),
            ("0", "\"0\""),
            ("-1", "\"-1\""),
            ("+1", "\"+1\""),
            ("0.7", "\"0.7\""),
            (".5", "\".5\""),
            ("1e5", "\"1e5\""),
            ("08", "\"08\""),
            ("0777", "\"0777\""),
            ("0x1F", "\"0x1F\""),
            ("0b101", "\"0b101\""),
            ("0o17", "\"0o17\""),
            ("1_000", "\"1_000\""),
            ("18446744073709551615", "\"18446744073709551615\""),
            ("99999999999999999999999", "\"99999999999999999999999\""),
            ("1:20", "\"1:20\""),
            ("-3:25:45.5", "\"-3:25:45.5\""),
            ("true", "\"true\""),
            ("False", "\"False\""),
            ("yes", "\"yes\""),
            ("off", "\"off\""),
            ("Y", "\"Y\""),
            ("null", "\"null\""),
            ("~", "\"~\""),
            ("", "\"\""),
            (".inf", "\".inf\""),
            ("-.Inf", "\"-.Inf\""),
            (".NaN", "\".NaN\""),
            ("<<", "\"<<\""),
            ("2026-01-01", "\"2026-01-01\""),
            ("2026-1-2", "\"2026-1-2\""),
            ("2024-02-29", "\"2024-02-29\""),
            ("2026-01-01T00:00:00Z", "\"2026-01-01T00:00:00Z\""),
            (
                "2026-01-01t10:20:30.5+02:00",
                "\"2026-01-01t10:20:30.5+02:00\"",
            ),
            ("2026-01-01 10:20:30", "\"2026-01-01 10:20:30\""),
            ("2023-02-29", "2023-02-29"),
            ("2026-01-01T00:00:00", "2026-01-01T00:00:00"),
            ("a: b", "'a: b'"),
            ("a:", "'a:'"),
            (" lead", "' lead'"),
            ("trail ", "'trail '"),
            ("'q", "'''q'"),
            ("\"q", "'\"q'"),
            ("#x", "'#x'"),
            ("a #x", "'a #x'"),
            ("- x", "'- x'"),
            ("-", "'-'"),
            ("? x", "'? x'"),
            (":x", ":x"),
            (": x", "': x'"),
            ("---x", "'---x'"),
            ("...", "'...'"),
            ("[a]", "'[a]'"),
            ("{a}", "'{a}'"),
            ("&a", "'&a'"),
            ("line\nbreak", "\"line\\nbreak\""),
            ("tab\there", "\"tab\\there\""),
            ("back\\slash", "back\\slash"),
            ("q\"uote\tx", "\"q\\\"uote\\tx\""),
            ("\u{7f}", "\"\\x7F\""),
            ("\u{80}", "\"\\x80\""),
            ("\u{85}", "\"\\N\""),
            ("\u{feff}", "\"\\uFEFF\""),
            ("\u{fffe}", "\"\\uFFFE\""),
            ("\u{2028}", "\"\\L\""),
            ("\0", "\"\\0\""),
        ];
        for (value, expected) in cases {
            let mut out = String::new();
            write_scalar(&mut out, value);
            assert_eq!(&out, expected, "encoding {value:?}");
            let parsed = block_of(&format!("k: {out}")).unwrap();
            assert_eq!(parsed["k"], *value, "reading back {out:?}");
        }
    }

    #[test]
    fn keys_sort_as_the_reference_encoder_sorts_them() {
        let mut keys = vec![
            "b", "a10", "a2", "a1b", "A", "a-b", "a_b", "ab", "v02", "v2",
        ];
        let mut by_std = keys.clone();
        by_std.sort_by(|a, b| reference_key_order(a, b));
        sort_tolerating(&mut keys, |a, b| reference_key_order(a, b));
        assert_eq!(
            keys,
            [
                "A", "a-b", "a_b", "a1b", "a2", "a10", "ab", "b", "v2", "v02"
            ]
        );
        assert_eq!(keys, by_std);
        let mut metadata = Metadata::new();
        for key in ["x10", "x9", "x1"] {
            metadata.insert(key.to_owned(), "v".to_owned());
        }
        assert_eq!(
            encode_metadata_block(&metadata),
            "---\nx1: v\nx9: v\nx10: v\n---\n"
        );
    }

    #[test]
    fn a_timestamp_with_a_long_fraction_is_quoted_and_never_overflows() {
        for value in [
            "2026-01-01T00:00:00.9999999999Z",
            "2026-01-01T00:00:00.99999999999999999999999999999999Z",
            "2026-01-01 00:00:00.4294967296",
        ] {
            let response = Response::new(Status::Ok).with_meta("agent", value);
            let encoded = String::from_utf8(response.encode()).unwrap();
            assert!(
                encoded.contains(&format!("agent: \"{value}\"")),
                "{encoded}"
            );
            assert_eq!(Response::parse(encoded.as_bytes()).unwrap(), response);
        }
    }

    /// overflow, leading zeros) make the reference order intransitive made the encoder's
    /// sort panic.
    #[test]
    fn keys_the_reference_order_cannot_rank_still_encode() {
        let request = Request::parse(include_bytes!("../testdata/unrankable-keys.mark"))
            .expect("the fuzzer's request parses");
        let encoded = request.encode().expect("encodes");
        assert_eq!(Request::parse(&encoded).unwrap(), request);
    }

    proptest! {
        #![proptest_config(crate::testing::proptest_config())]

        #[test]
        fn any_keys_of_digits_and_letters_encode_and_read_back(
            keys in proptest::collection::btree_set("[0-9a-zA]{1,24}", 0..40),
        ) {
            let mut metadata = Metadata::new();
            for key in &keys {
                metadata.insert(key.clone(), "v".to_owned());
            }
            let block = encode_metadata_block(&metadata);
            let request = Request::parse(format!("PUBLISH /a.md\n{block}").as_bytes()).unwrap();
            prop_assert_eq!(request.metadata, metadata);
        }

        #[test]
        fn timestamp_shaped_values_encode_and_read_back(
            date in "[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}",
            time in proptest::option::of("[Tt ][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}"),
            fraction in proptest::option::of("\\.[0-9]{1,40}"),
            zone in proptest::option::of("Z|[+-][0-9]{2}:[0-9]{2}"),
        ) {
            let value = format!(
                "{date}{}{}{}",
                time.unwrap_or_default(),
                fraction.unwrap_or_default(),
                zone.unwrap_or_default()
            );
            let response = Response::new(Status::Ok).with_meta("agent", value);
            prop_assert_eq!(Response::parse(&response.encode()).unwrap(), response);
        }

        #[test]
        fn arbitrary_blocks_never_panic_the_parser(
            verb in proptest::sample::select(Verb::ALL.to_vec()),
            lines in proptest::collection::vec(
                proptest::string::string_regex("[ \t#:'\"a-z0-9\\\\\\-\\[{&*!|>%@`?~.]{0,16}").unwrap(),
                0..6,
            ),
            closed in any::<bool>(),
        ) {
            let mut text = format!("{verb} /a.md\n---\n{}", lines.join("\n"));
            if closed {
                text.push_str("\n---\nbody");
            }
            if let Ok(request) = Request::parse(text.as_bytes()) {
                // Whatever was accepted encodes and reads back to the same request.
                prop_assert_eq!(Request::parse(&request.encode().unwrap()).unwrap(), request);
            }
        }
    }
}
