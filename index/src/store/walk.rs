//! The walk over one segment's postings: the sections every term meets (in text, trail or
//! entry), each scored and offered to the kept rows, or passed over before its columns are
//! read when its best possible score misses them. The walk steps through the shortest lists
//! that hold every section able to reach the kept rows (`reaches`), so the higher those
//! score, the fewer sections it visits.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tantivy::postings::{Postings, SegmentPostings};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocId, DocSet, SegmentReader, TERMINATED, Term as TantivyTerm};

use super::driver::Driver;
use super::kept::{Candidate, MAX_PRIOR, Top, below};
use super::{Base, Kind, List, Need, Pass, StoreResult};
use crate::body::{Ranking, catalog_score, term_score};
use crate::tokens::Term;

/// Moves `list` to `doc` (if it is behind) and tells whether it holds it.
fn at(list: &mut List, doc: DocId) -> bool {
    if list.postings.doc() < doc {
        list.postings.seek(doc);
    }
    list.postings.doc() == doc
}

/// What one term found in one candidate section.
#[derive(Clone, Copy, Default)]
struct Met {
    count: u32,
    trail: bool,
    entry: bool,
}

/// The most occurrences of a term a section is counted with.
const MAX_COUNT: u32 = 255;

/// How often the words of `lists` (a phrase's, in order) stand one after another in `doc`.
fn phrase_at(lists: &mut [SegmentPostings], doc: DocId, positions: &mut Vec<Vec<u32>>) -> u32 {
    positions.resize_with(lists.len(), Vec::new);
    for (list, at) in lists.iter_mut().zip(positions.iter_mut()) {
        if list.doc() < doc {
            list.seek(doc);
        }
        if list.doc() != doc {
            return 0;
        }
        at.clear();
        list.positions(at);
    }
    let (first, rest) = positions.split_first().expect("a phrase has words");
    first
        .iter()
        .filter(|p| {
            rest.iter()
                .enumerate()
                .all(|(i, at)| at.binary_search(&(**p + i as u32 + 1)).is_ok())
        })
        .count() as u32
}

/// The most a section met as `met` says can score before its prior, at length `len` (0:
/// any length). With `loose` (phrases counted by their words), a section every term meets
/// in its entry may still be no catalog answer, so the bound is the better of both.
fn best_score(met: &[Met], stats: &Ranking, loose: bool, len: u32) -> f64 {
    let catalog = met.iter().all(|m| m.entry);
    let ranked = || {
        met.iter()
            .zip(&stats.idf)
            .map(|(m, idf)| term_score(*idf, m.count, m.trail, m.entry, len, stats.average))
            .sum::<f64>()
    };
    match (catalog, loose) {
        (true, false) => catalog_score(&stats.idf),
        (true, true) => catalog_score(&stats.idf).max(ranked()),
        (false, _) => ranked(),
    }
}

/// Where a term must meet a section for the section to reach the kept rows: anywhere, or
/// (once the rows kept score high enough) in a trail or an entry, or in an entry alone; or,
/// in the pass over sections only text meets, in its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    Anywhere,
    TrailOrEntry,
    Entry,
    Text,
}

impl Reach {
    fn admits(self, kind: Kind) -> bool {
        match self {
            Reach::Anywhere => true,
            Reach::TrailOrEntry => kind != Kind::Text,
            Reach::Entry => kind == Kind::Entry,
            Reach::Text => kind == Kind::Text,
        }
    }
}

/// Where a section of one pass must be met to reach the kept rows.
struct Reaches {
    /// Per term, where it must meet the section.
    each: Vec<Reach>,
    /// The shortest union of lists one of which holds every section that may reach the
    /// kept rows, if any does.
    union: Option<Union>,
}

/// Lists of one kind (trail and entry, or entry) of some terms.
struct Union {
    kind: Reach,
    /// Per term, whether its lists are in the union.
    terms: Vec<bool>,
    /// Their summed lengths.
    cost: u64,
}

/// The lengths of one term's lists in a segment.
#[derive(Clone, Copy)]
struct Lengths {
    trail_or_entry: u64,
    entry: u64,
}

/// Beyond this many terms, no term is spared from a union (the sets tried double per term).
const MAX_SPARED_TERMS: usize = 12;

/// Where a section of `pass` in a segment whose priors are at most `prior_bound` must be met
/// to score `threshold` or more, given each term's list `lengths`. Scores are bounded as
/// [`best_score`] bounds them.
///
/// A section some term misses in its entry is no catalog answer: it scores at most that
/// term without its entry (or without its trail and entry) beside every other term at its
/// best. A section whose trail and entry (or entry) meet only the terms of a set scores at
/// most those at their best beside the others' text (or text and trail) at its best: when
/// that misses the kept rows, every section that may reach them is in another term's such
/// lists, and the set is spared from their union. Every section of the boosted pass is in
/// some term's trail or entry lists.
fn reaches(
    stats: &Ranking,
    pass: Pass,
    prior_bound: f64,
    threshold: Option<f64>,
    lengths: &[Lengths],
) -> Reaches {
    let terms = stats.idf.len();
    let every = vec![true; terms];
    let mut reaches = Reaches {
        each: vec![Reach::Anywhere; terms],
        union: None,
    };
    if pass == Pass::TextOnly {
        reaches.each.fill(Reach::Text);
        return reaches;
    }
    let union = |kind: Reach, read: &[bool]| Union {
        kind,
        terms: read.to_vec(),
        cost: (lengths.iter().zip(read))
            .filter(|(_, read)| **read)
            .map(|(l, _)| match kind {
                Reach::Entry => l.entry,
                _ => l.trail_or_entry,
            })
            .sum(),
    };
    reaches.union = Some(union(Reach::TrailOrEntry, &every));
    let Some(threshold) = threshold else {
        return reaches;
    };
    let part = |idf: f64, trail: bool, entry: bool| {
        term_score(idf, MAX_COUNT, trail, entry, 0, stats.average)
    };
    let misses = |score: f64| below(score * prior_bound, threshold);
    for (i, idf) in stats.idf.iter().enumerate() {
        let others: f64 = (stats.idf.iter().enumerate())
            .filter(|(o, _)| *o != i)
            .map(|(_, idf)| part(*idf, true, true))
            .sum();
        reaches.each[i] = if misses(others + part(*idf, true, false)) {
            Reach::Entry
        } else if misses(others + part(*idf, false, false)) {
            Reach::TrailOrEntry
        } else {
            Reach::Anywhere
        };
    }
    let sets: u32 = if terms <= MAX_SPARED_TERMS {
        1 << terms
    } else {
        1
    };
    for kind in [Reach::TrailOrEntry, Reach::Entry] {
        for spared in 0..sets {
            let read: Vec<bool> = (0..terms).map(|i| spared >> i & 1 == 0).collect();
            let best: f64 = (stats.idf.iter().zip(&read))
                .map(|(idf, read)| match (read, kind) {
                    (false, _) => part(*idf, true, true),
                    (true, Reach::Entry) => part(*idf, true, false),
                    (true, _) => part(*idf, false, false),
                })
                .sum();
            // The boosted pass needs no bound to read trail and entry lists alone.
            let whole_boosted = kind == Reach::TrailOrEntry && spared == 0;
            if !whole_boosted && !misses(best) {
                continue;
            }
            let candidate = union(kind, &read);
            if reaches
                .union
                .as_ref()
                .is_none_or(|u| candidate.cost < u.cost)
            {
                reaches.union = Some(candidate);
            }
        }
    }
    reaches
}

/// The summed lengths of the lists of `lists` that `reach` admits.
fn length(lists: &[List], reach: Reach) -> u64 {
    lists
        .iter()
        .filter(|l| reach.admits(l.kind))
        .map(|l| u64::from(l.postings.doc_freq()))
        .sum()
}

/// The lists that drive one walk.
struct Drive {
    lists: Vec<List>,
    /// The term and group whose lists these are, taken out of the needs (the walk reads
    /// them for that group), when a whole group drives.
    taken: Option<(usize, usize)>,
    /// Whether the lists are one word's, its text among them: what they count bounds how
    /// often that word stands in a section.
    counts_text: bool,
}

fn record(m: &mut Met, list: &List) {
    match list.kind {
        Kind::Text => m.count = (m.count + list.postings.term_freq()).min(MAX_COUNT),
        Kind::Trail => m.trail = true,
        Kind::Entry => m.entry = true,
    }
}

impl Met {
    /// What a term may meet before any of its words is read: `phrase_with` keeps whatever
    /// a word meets, and a term no word narrowed is bounded loosely, never below its score.
    const UNREAD: Met = Met {
        count: MAX_COUNT,
        trail: true,
        entry: true,
    };

    /// What a section may meet of a phrase whose words met it as `self` and `word` say: the
    /// phrase stands in a part only where every word does, and at most as often as its
    /// rarest word there.
    fn phrase_with(self, word: Met) -> Met {
        Met {
            count: self.count.min(word.count),
            trail: self.trail && word.trail,
            entry: self.entry && word.entry,
        }
    }
}

impl Base {
    /// The shortest of: a term's group (for a phrase, one word's) narrowed to the lists
    /// where `reach` says it must meet a section, and the shortest union holding every
    /// section that may reach the kept rows. The walk asks `needs` about the driver's
    /// sections. `None` when a term is not in the segment.
    fn drive(
        &self,
        s: &SegmentReader,
        terms: &[Term],
        expansions: &[Vec<Arc<str>>],
        needs: &mut [Need],
        reach: &Reaches,
    ) -> Option<Drive> {
        let ((term, group), narrowest) = needs
            .iter()
            .zip(&reach.each)
            .enumerate()
            .flat_map(|(i, (n, reach))| {
                n.groups
                    .iter()
                    .enumerate()
                    .map(move |(g, lists)| ((i, g), length(lists, *reach)))
            })
            .min_by_key(|(_, length)| *length)
            .unwrap_or(((0, 0), 0));
        let union = reach.union.as_ref().filter(|u| u.cost < narrowest);
        if union.is_none() && reach.each[term] == Reach::Anywhere {
            return Some(Drive {
                lists: std::mem::take(&mut needs[term].groups[group]),
                taken: Some((term, group)),
                counts_text: true,
            });
        }
        // Lists read apart from `needs`, which answers for every term.
        let mut lists = Vec::new();
        for (i, t) in terms.iter().enumerate() {
            let drives = match union {
                Some(union) => union.terms[i],
                None => i == term,
            };
            if !drives {
                continue;
            }
            let admits = union.map_or(reach.each[i], |u| u.kind);
            lists.extend(
                self.need(s, t, &expansions[i])?
                    .groups
                    .into_iter()
                    .enumerate()
                    .filter(|(g, _)| union.is_some() || *g == group)
                    .flat_map(|(_, group)| group)
                    .filter(|l| admits.admits(l.kind)),
            );
        }
        Some(Drive {
            lists,
            taken: None,
            counts_text: union.is_none() && reach.each[term].admits(Kind::Text),
        })
    }

    /// Offers `out` the sections of segment `number` that `pass` reads and `terms` meet, in
    /// `scope`. With `text_too`, a boosted pass may read the text-only sections as well;
    /// returns whether the segment's text-only sections were read (or none can be a row).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn segment_candidates(
        &self,
        number: u32,
        s: &SegmentReader,
        terms: &[Term],
        expansions: &[Vec<Arc<str>>],
        stats: &Ranking,
        scope: &str,
        pass: Pass,
        text_too: bool,
        out: &mut Top,
    ) -> StoreResult<bool> {
        let mut needs = Vec::with_capacity(terms.len());
        for (i, term) in terms.iter().enumerate() {
            match self.need(s, term, &expansions[i]) {
                Some(need) => needs.push(need),
                None => return Ok(true),
            }
        }
        let mut scope_list = if scope == "/" {
            None
        } else {
            let inv = s.inverted_index(self.fields.dirs)?;
            let term = TantivyTerm::from_field_text(self.fields.dirs, scope);
            match inv.read_postings(&term, IndexRecordOption::Basic)? {
                Some(p) => Some(p),
                None => return Ok(true),
            }
        };
        let columns = &self.columns[number as usize];
        let (lens, priors) = (&columns.lens, &columns.priors);
        let prior_bound = columns.prior_bound();
        let path_ord = |doc: DocId| columns.paths.ords().first(doc).unwrap_or(u64::MAX);
        // Per phrase term, its words' positions in text, trail and entry.
        let mut phrases: Vec<Option<[Option<Vec<SegmentPostings>>; 3]>> = terms
            .iter()
            .map(|t| match t {
                Term::Phrase(words) => Some([
                    self.phrase_lists(s, self.fields.text_words, words),
                    self.phrase_lists(s, self.fields.trail_words, words),
                    self.phrase_lists(s, self.fields.entry_words, words),
                ]),
                _ => None,
            })
            .collect();
        let mut positions: Vec<Vec<u32>> = Vec::new();
        let lengths: Vec<Lengths> = needs
            .iter()
            .map(|n| Lengths {
                trail_or_entry: n
                    .groups
                    .iter()
                    .map(|g| length(g, Reach::TrailOrEntry))
                    .sum(),
                entry: n.groups.iter().map(|g| length(g, Reach::Entry)).sum(),
            })
            .collect();
        let reach = reaches(stats, pass, prior_bound, out.threshold(), &lengths);
        let Some(Drive {
            lists: driver,
            taken: drive,
            counts_text,
        }) = self.drive(s, terms, expansions, &mut needs, &reach)
        else {
            return Ok(true);
        };
        // A boosted pass driven by a whole group steps to that term's text-only sections
        // too: when those may still reach the kept rows, they are read on the way rather
        // than by walking the same lists again.
        let both = text_too && drive.is_some();
        // What the driver counts bounds a lone phrase.
        let phrase_alone = counts_text && matches!(terms, [Term::Phrase(_)]);
        // Terms are asked about a section rarest first: most sections are passed over because
        // one misses them, most often the rarest.
        let mut check_order: Vec<usize> = (0..needs.len()).collect();
        check_order.sort_by_cached_key(|i| {
            needs[*i]
                .groups
                .iter()
                .map(|g| length(g, Reach::Anywhere))
                .sum::<u64>()
        });
        let mut driver = Driver::new(driver);
        let single_word = matches!(terms, [Term::Word(_) | Term::Prefix(_)]);
        // When every term must meet a section in its entry, only catalog answers reach the
        // kept rows, and only a document's first section is one.
        let only_catalog = reach.each.iter().all(|r| *r == Reach::Entry);
        // Per term, what it met (for a phrase, until its positions are read, the most they
        // could show: its words' `phrase_with`).
        let mut met = vec![Met::default(); terms.len()];
        // Every term must meet a section, so when one misses `doc` no section before the
        // next it meets can be a row: the driver seeks there instead of stepping to it.
        let mut skip_to: DocId = 0;
        let phrased = phrases.iter().any(Option::is_some);
        let mut positions_read = 0;
        let mut walked = 0;
        loop {
            if skip_to == TERMINATED {
                break;
            }
            driver.seek(skip_to);
            let mut driven = Met::default();
            let doc = driver.next(|list| record(&mut driven, list));
            if doc == TERMINATED {
                break;
            }
            walked += 1;
            // One word met in an entry makes a catalog answer, whose only candidate is its
            // document's first section: the others are passed over before any list is asked.
            if (only_catalog || single_word && driven.entry)
                && columns.numbers.first(doc) != Some(0)
            {
                continue;
            }
            if s.is_deleted(doc) {
                continue;
            }
            if let Some(list) = scope_list.as_mut() {
                if list.doc() < doc {
                    list.seek(doc);
                }
                if list.doc() != doc {
                    skip_to = list.doc();
                    continue;
                }
            }
            // A lone phrase stands at most as often, and only in the parts, where its driving
            // word does: that bound at the section's own length and prior spares asking the
            // other words' lists about most sections.
            if phrase_alone && let Some(threshold) = out.threshold() {
                let len = lens.first(doc).unwrap_or(0) as u32;
                let prior = priors.first(doc).unwrap_or(MAX_PRIOR);
                if below(best_score(&[driven], stats, true, len) * prior, threshold) {
                    out.dropped = true;
                    continue;
                }
            }
            let mut all = true;
            // A section some word meets in a trail or an entry list is a row of the boosted
            // pass, and only such a section.
            let mut boosted = false;
            for &i in &check_order {
                let need = &mut needs[i];
                let mut m = match drive {
                    Some((t, _)) if t == i => driven,
                    _ => Met::UNREAD,
                };
                let mut groups_met = true;
                for (g, lists) in need.groups.iter_mut().enumerate() {
                    if drive == Some((i, g)) {
                        continue;
                    }
                    // Whether a list where the term must meet the section holds it.
                    let mut reached = false;
                    let mut word = Met::default();
                    // A catalog answer's score is its entry terms': nothing else is asked.
                    for list in lists
                        .iter_mut()
                        .filter(|l| !only_catalog || l.kind == Kind::Entry)
                    {
                        if at(list, doc) {
                            reached |= reach.each[i].admits(list.kind);
                            record(&mut word, list);
                        }
                    }
                    boosted |= word.trail || word.entry;
                    m = m.phrase_with(word);
                    if !reached {
                        // Each list it must be met in now stands past `doc`: the next
                        // section that can be a row.
                        skip_to = lists
                            .iter()
                            .filter(|l| reach.each[i].admits(l.kind))
                            .map(|l| l.postings.doc())
                            .min()
                            .unwrap_or(TERMINATED);
                        groups_met = false;
                        break;
                    }
                }
                if !groups_met {
                    all = false;
                    break;
                }
                met[i] = m;
            }
            if !all {
                continue;
            }
            // The driving group's lists were read by the driver.
            if drive.is_some() {
                boosted |= driven.trail || driven.entry;
            }
            if !both && boosted != (pass == Pass::Boosted) {
                continue;
            }
            // Before positions are read, the same bound with each phrase's words for the
            // phrase: it occurs at most as often as its rarest word, and only in the parts
            // where all of them are. Positions cost far more than two column values, so
            // this bound takes the section's own length and prior.
            if phrased && let Some(threshold) = out.threshold() {
                let len = lens.first(doc).unwrap_or(0) as u32;
                let prior = priors.first(doc).unwrap_or(MAX_PRIOR);
                if below(best_score(&met, stats, true, len) * prior, threshold) {
                    out.dropped = true;
                    continue;
                }
            }
            if phrased {
                positions_read += 1;
            }
            let mut gone = false;
            for (i, lists) in phrases.iter_mut().enumerate() {
                let Some([text, trail, entry]) = lists else {
                    continue;
                };
                let mut count = |lists: &mut Option<Vec<SegmentPostings>>| {
                    lists
                        .as_mut()
                        .map_or(0, |l| phrase_at(l, doc, &mut positions))
                };
                let m = if only_catalog {
                    Met {
                        entry: count(entry) > 0,
                        ..Met::default()
                    }
                } else {
                    Met {
                        count: count(text).min(MAX_COUNT),
                        trail: count(trail) > 0,
                        entry: count(entry) > 0,
                    }
                };
                gone |= m.count == 0 && !m.trail && !m.entry;
                met[i] = m;
            }
            if gone {
                continue;
            }
            // The best this section could score (shortest length, the segment's highest
            // prior): when that misses the kept rows, its columns are not read.
            if let Some(threshold) = out.threshold()
                && below(best_score(&met, stats, false, 0) * prior_bound, threshold)
            {
                out.dropped = true;
                continue;
            }
            if met.iter().all(|m| m.entry) {
                // A catalog answer is its document's: every section of it meets the same
                // entry terms (title and tags are indexed with each), scores the same and
                // names the same row, so only the first section is a candidate. At a
                // million documents a common word's catalog answers are millions of
                // sections otherwise, each kept as a tie.
                if columns.numbers.first(doc) != Some(0) {
                    continue;
                }
                let prior = priors.first(doc).unwrap_or(1.0);
                let raw = catalog_score(&stats.idf);
                // Its path is read only for a candidate kept.
                if out.refuses(raw * prior) {
                    continue;
                }
                out.push(Candidate {
                    score: raw * prior,
                    raw,
                    segment: number,
                    doc,
                    catalog: true,
                    path_ord: path_ord(doc),
                    ends_cut_run: false,
                });
                continue;
            }
            if !met.iter().any(|m| m.count > 0 || m.trail) {
                continue;
            }
            let prior = priors.first(doc).unwrap_or(1.0);
            let len = lens.first(doc).unwrap_or(0) as u32;
            let raw = met
                .iter()
                .zip(&stats.idf)
                .map(|(m, idf)| term_score(*idf, m.count, m.trail, m.entry, len, stats.average))
                .sum::<f64>();
            if out.refuses(raw * prior) {
                continue;
            }
            out.push(Candidate {
                score: raw * prior,
                raw,
                segment: number,
                doc,
                catalog: false,
                path_ord: path_ord(doc),
                ends_cut_run: false,
            });
        }
        self.positions_read
            .fetch_add(positions_read, Ordering::Relaxed);
        self.sections_walked.fetch_add(walked, Ordering::Relaxed);
        Ok(both)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three words of a million-document world (idf and mean length as measured there) with
    /// the lengths of their lists in its largest segment.
    fn three_words() -> (Ranking, Vec<Lengths>) {
        let stats = Ranking {
            idf: vec![1.7803, 0.5989, 1.3073],
            average: 48.98,
        };
        let lengths = [(182_908, 89_349), (1_077_956, 523_918), (333_414, 161_782)].map(
            |(trail_or_entry, entry)| Lengths {
                trail_or_entry,
                entry,
            },
        );
        (stats, lengths.to_vec())
    }

    fn union(reach: &Reaches) -> (Reach, Vec<bool>) {
        let union = reach.union.as_ref().expect("a union");
        (union.kind, union.terms.clone())
    }

    #[test]
    fn kept_rows_unknown_narrow_nothing() {
        let (stats, lengths) = three_words();
        let reach = reaches(&stats, Pass::Boosted, 0.65, None, &lengths);
        assert_eq!(reach.each, [Reach::Anywhere; 3]);
        assert_eq!(union(&reach), (Reach::TrailOrEntry, vec![true; 3]));
        let reach = reaches(&stats, Pass::TextOnly, 0.65, Some(100.0), &lengths);
        assert_eq!(reach.each, [Reach::Text; 3]);
        assert!(reach.union.is_none());
    }

    #[test]
    fn higher_kept_rows_spare_more_lists_from_the_union() {
        let (stats, lengths) = three_words();
        // Sections whose trail and entry meet only the common word score at most 6.6: it
        // is spared. With all three in text and trail at their best, 8.9.
        let reach = reaches(&stats, Pass::Boosted, 0.65, Some(8.5), &lengths);
        assert_eq!(
            union(&reach),
            (Reach::TrailOrEntry, vec![true, false, true])
        );
        // Now some term must meet an entry, but its entry lists are longer than the
        // first and third words' trail and entry lists.
        let reach = reaches(&stats, Pass::Boosted, 0.65, Some(9.3), &lengths);
        assert_eq!(
            union(&reach),
            (Reach::TrailOrEntry, vec![true, false, true])
        );
        // Trail and entry of the second and third at their best reach 9.6: both spared.
        let reach = reaches(&stats, Pass::Boosted, 0.65, Some(9.7), &lengths);
        assert_eq!(
            union(&reach),
            (Reach::TrailOrEntry, vec![true, false, false])
        );
        // The same said of the first word alone: it must meet its trail or entry.
        assert_eq!(
            reach.each,
            [Reach::TrailOrEntry, Reach::Anywhere, Reach::Anywhere]
        );
        // Without its entry the first word reaches 11.3 beside the others at their best:
        // its entry list alone holds every section that may reach rows of 12.
        let reach = reaches(&stats, Pass::Boosted, 0.65, Some(11.0), &lengths);
        assert_eq!(
            union(&reach),
            (Reach::TrailOrEntry, vec![true, false, false])
        );
        let reach = reaches(&stats, Pass::Boosted, 0.65, Some(12.0), &lengths);
        assert_eq!(union(&reach), (Reach::Entry, vec![true, false, false]));
        assert_eq!(reach.each[0], Reach::Entry);
    }

    #[test]
    fn one_word_behind_catalog_answers_must_meet_an_entry() {
        let stats = Ranking {
            idf: vec![0.13],
            average: 48.98,
        };
        let lengths = [Lengths {
            trail_or_entry: 30,
            entry: 10,
        }];
        let catalog = catalog_score(&stats.idf) * 0.65;
        let reach = reaches(&stats, Pass::Boosted, 0.65, Some(catalog), &lengths);
        assert_eq!(reach.each[0], Reach::Entry);
        assert_eq!(union(&reach), (Reach::Entry, vec![true]));
        // Text and trail at their best (3.7 idf) still reach rows just under them.
        let reach = reaches(&stats, Pass::Boosted, 0.65, Some(catalog * 0.9), &lengths);
        assert_eq!(reach.each[0], Reach::TrailOrEntry);
        assert_eq!(union(&reach), (Reach::TrailOrEntry, vec![true]));
    }
}
