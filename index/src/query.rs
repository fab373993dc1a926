//! What a LOOKUP asks of the catalog: the query text and its terms, the scope, the filters
//! (with the `filter` grammar a request spells them in) and the result cap.

use quire_log::Timestamp;
use quire_log::path;

/// The fewest characters a query other than `*` may hold.
pub const MIN_QUERY_CHARS: usize = 2;
/// The most distinct terms a query may hold.
pub const MAX_TERMS: usize = 32;
/// Results a LOOKUP returns when it names no limit.
pub const DEFAULT_LIMIT: usize = 10;
/// The most results a LOOKUP returns.
pub const MAX_LIMIT: usize = 1000;

/// Checks a request's query text: trimmed, it must be `*` or hold at least
/// [`MIN_QUERY_CHARS`] characters and at most [`MAX_TERMS`] distinct terms. (The catalog
/// itself answers any text; an empty one matches nothing.)
pub fn validate_query_text(text: &str) -> Result<(), String> {
    let trimmed = text.trim();
    if trimmed == "*" {
        return Ok(());
    }
    if trimmed.chars().count() < MIN_QUERY_CHARS {
        return Err(format!(
            "a query needs at least {MIN_QUERY_CHARS} characters, or *"
        ));
    }
    if let Terms::Words(words) = CatalogQuery::new(trimmed).terms()
        && words.len() > MAX_TERMS
    {
        return Err(format!(
            "{} terms exceed the limit of {MAX_TERMS}",
            words.len()
        ));
    }
    Ok(())
}

/// Which index a lookup consults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatchMode {
    /// Titles and tags (the default).
    #[default]
    Catalog,
    /// Section bodies (the section index).
    Body,
}

impl MatchMode {
    /// Parses a request's `match` value: `catalog` or `body`; anything else is refused.
    pub fn parse(text: &str) -> Result<MatchMode, String> {
        match text {
            "catalog" => Ok(MatchMode::Catalog),
            "body" => Ok(MatchMode::Body),
            other => Err(format!("match {other:?} must be catalog or body")),
        }
    }

    /// The value a response echoes.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchMode::Catalog => "catalog",
            MatchMode::Body => "body",
        }
    }
}

/// One LOOKUP against the catalog.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogQuery {
    /// The query text: `*` for every document, else whitespace-separated terms.
    pub query: String,
    /// The directory to search under: `/` or empty for the whole world; a trailing `/` is
    /// ignored. Only documents strictly beneath it match.
    pub scope: String,
    /// Every filter must hold.
    pub filters: Vec<Filter>,
    /// The most results (0: no cap).
    pub max: usize,
    pub mode: MatchMode,
}

impl CatalogQuery {
    /// A catalog query over the whole world without filters or cap.
    pub fn new(query: impl Into<String>) -> Self {
        CatalogQuery {
            query: query.into(),
            scope: "/".into(),
            ..CatalogQuery::default()
        }
    }

    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    pub fn filter(mut self, filter: Filter) -> Self {
        self.filters.push(filter);
        self
    }

    pub fn max(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    pub fn mode(mut self, mode: MatchMode) -> Self {
        self.mode = mode;
        self
    }

    /// The terms the query text holds.
    pub fn terms(&self) -> Terms {
        let trimmed = self.query.trim();
        if trimmed == "*" {
            return Terms::All;
        }
        let mut words: Vec<String> = Vec::new();
        for word in trimmed.split_whitespace() {
            let lower = word.to_lowercase();
            if !words.contains(&lower) {
                words.push(lower);
            }
        }
        Terms::Words(words)
    }

    /// The scope in canonical form (`/` for the whole world), or `None` when the scope can
    /// name no directory (a `..` segment, a control character).
    pub fn canonical_scope(&self) -> Option<String> {
        path::clean(&self.scope).ok()
    }
}

/// The terms of a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Terms {
    /// `*`: every document, ranked by importance.
    All,
    /// Distinct lowercased words, in query order (none: no results).
    Words(Vec<String>),
}

/// One filter clause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Filter {
    /// The document carries this tag (compared case-insensitively; held lowercased).
    Tag(String),
    /// Modified strictly after this instant.
    ModifiedAfter(Timestamp),
    /// Modified strictly before this instant.
    ModifiedBefore(Timestamp),
    /// The declared metadata holds exactly this value under this key.
    Equals(String, String),
}

impl Filter {
    /// A tag filter.
    pub fn tag(tag: &str) -> Filter {
        Filter::Tag(tag.trim().to_lowercase())
    }

    /// Parses a request's `filter` value: comma-separated `key=value` clauses; `tag=`,
    /// `modified-after=` and `modified-before=` (RFC 3339 or `YYYY-MM-DD`) are interpreted,
    /// any other key is exact equality on declared metadata. Empty clauses are skipped; a
    /// clause without `=`, or with an empty key or value, is refused (the error says which).
    pub fn parse_list(raw: &str) -> Result<Vec<Filter>, String> {
        let mut out = Vec::new();
        for clause in raw.split(',') {
            let clause = clause.trim();
            if clause.is_empty() {
                continue;
            }
            let (key, value) = clause
                .split_once('=')
                .ok_or_else(|| format!("filter clause {clause:?} has no '='"))?;
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() || value.is_empty() {
                return Err(format!("filter clause {clause:?} needs a key and a value"));
            }
            let time = |v: &str| {
                parse_time(v).ok_or_else(|| format!("filter {key}: {v:?} is not a date or time"))
            };
            out.push(match key {
                "tag" => Filter::tag(value),
                "modified-after" => Filter::ModifiedAfter(time(value)?),
                "modified-before" => Filter::ModifiedBefore(time(value)?),
                _ => Filter::Equals(key.to_owned(), value.to_owned()),
            });
        }
        Ok(out)
    }
}

fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: u64, day: u64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u64) -> u64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses an RFC 3339 instant (`2026-01-01T12:00:00Z`, `…+02:00`, fractional seconds
/// truncated) or a bare date (`2026-01-01`, meaning its midnight UTC) into whole seconds.
/// Instants before 1970 are refused.
pub fn parse_time(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    let (date, time) = match text.find(['T', 't', ' ']) {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let mut parts = date.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (year, month, day) = (digits(y)? as i64, digits(m)?, digits(d)?);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let mut seconds = days_from_civil(year, month, day) * 86_400;
    if let Some(time) = time {
        let (clock, offset) = if let Some(rest) = time.strip_suffix(['Z', 'z']) {
            (rest, 0i64)
        } else {
            let at = time.rfind(['+', '-'])?;
            let (clock, zone) = time.split_at(at);
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let (hh, mm) = zone[1..].split_once(':')?;
            if hh.len() != 2 || mm.len() != 2 {
                return None;
            }
            let (hh, mm) = (digits(hh)?, digits(mm)?);
            if hh > 23 || mm > 59 {
                return None;
            }
            (clock, sign * (hh * 3600 + mm * 60) as i64)
        };
        let clock = match clock.split_once('.') {
            Some((whole, fraction)) => {
                digits(fraction)?;
                whole
            }
            None => clock,
        };
        let mut fields = clock.split(':');
        let (h, mi, s) = (fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some() || h.len() != 2 || mi.len() != 2 || s.len() != 2 {
            return None;
        }
        let (h, mi, s) = (digits(h)?, digits(mi)?, digits(s)?);
        if h > 23 || mi > 59 || s > 60 {
            return None;
        }
        seconds += (h * 3600 + mi * 60 + s) as i64 - offset;
    }
    u64::try_from(seconds).ok().map(Timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_distinct_lowercase_words() {
        assert_eq!(CatalogQuery::new(" * ").terms(), Terms::All);
        assert_eq!(
            CatalogQuery::new("Go go  RUST").terms(),
            Terms::Words(vec!["go".into(), "rust".into()])
        );
        assert_eq!(
            CatalogQuery::new("* hub").terms(),
            Terms::Words(vec!["*".into(), "hub".into()])
        );
        assert_eq!(CatalogQuery::new("   ").terms(), Terms::Words(vec![]));
    }

    #[test]
    fn query_text_rules() {
        assert!(validate_query_text(" * ").is_ok());
        assert!(validate_query_text("go").is_ok());
        assert!(validate_query_text("ü").is_err());
        assert!(validate_query_text("  ").is_err());
        let many: Vec<String> = (0..=MAX_TERMS).map(|i| format!("t{i}")).collect();
        assert!(validate_query_text(&many.join(" ")).is_err());
        let repeated = vec!["same"; 40].join(" ");
        assert!(validate_query_text(&repeated).is_ok());
    }

    #[test]
    fn filter_grammar() {
        let parsed =
            Filter::parse_list("tag=Alpha, ,modified-after=2026-01-02,type = Note").unwrap();
        assert_eq!(
            parsed,
            vec![
                Filter::Tag("alpha".into()),
                Filter::ModifiedAfter(Timestamp(1_767_312_000)),
                Filter::Equals("type".into(), "Note".into()),
            ]
        );
        for bad in ["tag", "=x", "tag=", "modified-before=yesterday"] {
            assert!(Filter::parse_list(bad).is_err(), "{bad}");
        }
        assert!(Filter::parse_list("").unwrap().is_empty());
    }

    #[test]
    fn times_parse() {
        assert_eq!(
            parse_time("2026-01-01T00:00:00Z"),
            Some(Timestamp(1_767_225_600))
        );
        assert_eq!(parse_time("2026-01-01"), Some(Timestamp(1_767_225_600)));
        assert_eq!(
            parse_time("2026-01-01T02:00:00.75+02:00"),
            Some(Timestamp(1_767_225_600))
        );
        assert_eq!(
            parse_time("2000-02-29T12:01:01Z").map(|t| t.to_string()),
            Some("2000-02-29T12:01:01Z".into())
        );
        for bad in [
            "2026-13-01",
            "2026-02-30",
            "2026-1-01",
            "2026-01-01T25:00:00Z",
            "2026-01-01T00:00:00",
            "1969-12-31",
            "",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}
