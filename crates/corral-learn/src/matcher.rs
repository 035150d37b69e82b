//! The answer matcher: one automaton over every form of every numeric target, one over every
//! string target and the number words, never one per target; deterministic (see [`Matcher`]).
//!
//! What matches a **number** (its absolute value; a sign is ignored):
//!
//! - its digits on token boundaries, plain or grouped by thousands with `,` `.` ` ` `_` `'`
//!   (`5100`, `5,100`, `5.100`, `5 100`, `5_100`, `5'100`); a decimal with `.` or `,` as its
//!   decimal mark (`5100.25`, `5,100.25`, `5.100,25`, `5 100,25`), trailing zeros allowed
//!   (`5100.0`, `5100.250`);
//! - k/M/B abbreviations within the value's rounding: `x` thousand (million, billion) written
//!   with 0-3 decimals matches when it is the value truncated or rounded half-up to those
//!   decimals, and shows at least two significant digits unless it is exact: 5100 matches
//!   `5.1k`, `5.10K`, `5,1 k`, `5.1 thousand`, not `5k` (an approximation, like "about five
//!   thousand", a residual risk the spec accepts); 5000 matches `5k`; 5149 matches `5.1k` and
//!   `5.15k`, not `5.2k`. Suffixes: `k`, `thousand`; `m`, `mn`, `million`; `b`, `bn`, `billion`;
//!   with or without a space;
//! - the integer in English words, hyphens, commas and "and" allowed: "five thousand one
//!   hundred", "fifty-one hundred", "Five Thousand, One Hundred". The words that can begin a number are
//!   found by the string automaton and parsed from there; the value is compared with the
//!   integer targets (integers only: a decimal in words is not matched).
//!
//! What does not match (near misses): `51000`, `510`, `51001`, `abc5100`, `x5100`, `0.5100`,
//! `15,100`, `5,1000`, a version `5.100.2`, `5100k` / `5100m` (another magnitude), `5100_000`,
//! `5100e3`, `5100abc123`. Left of the digits must not be a letter, digit or `_` (nor `.` or `,`
//! after a digit); right of them must not be a digit, `_`, a magnitude letter (`k`, `m`, `b`,
//! `bn`, `mn`, `g`, `t`) or a letter run followed by a digit, nor `.`/`,` followed by digits
//! other than trailing zeros (three digits after a mark read as a thousands group: `5.100.000`
//! and `5100.000` do not match 5100). A unit written straight after the digits (`5100msgs`,
//! `5100ms`) matches. A space is a boundary, so a space-grouped larger number (`5 100 000`)
//! matches 5100: the ambiguity is resolved toward withholding. Abbreviations are not
//! thousands-grouped (`2340k` matches 2,340,000; `2,340k` does not).
//!
//! What matches a **string**: the value as a substring, ASCII-case-insensitive (a non-ASCII
//! value also in its full lowercase and uppercase forms), no boundaries.
//!
//! Before matching, text that is not pure ASCII is normalized (so is every pattern): zero-width
//! and format characters (U+200B-U+200F, U+2060-U+2064, U+FEFF, U+00AD) are removed, every
//! Unicode space becomes ` `, fullwidth forms become ASCII, U+2018/U+2019 become `'` and Unicode
//! dashes and minus become `-`. Other encodings (digits of other scripts, digits spelled one by
//! one, hex, arithmetic, reversed digits) are the residual risks the spec names; the eval
//! measures them. A value split across two responses is the guard's to join
//! (`guard::check_after`), not the matcher's.

use std::borrow::Cow;
use std::fmt;

use aho_corasick::automaton::Automaton;
use aho_corasick::{AhoCorasick, Anchored, Input, MatchKind, StartKind, dfa};

use crate::manifest::Value;

/// Group separators a thousands-grouped number may use.
const GROUP_SEPARATORS: [&str; 5] = [",", ".", " ", "_", "'"];
/// (group separator, decimal mark) pairs a decimal may use.
const DECIMAL_STYLES: [(&str, &str); 8] = [
    ("", "."),
    (",", "."),
    (" ", "."),
    ("_", "."),
    ("'", "."),
    ("", ","),
    (".", ","),
    (" ", ","),
];
/// Magnitudes and the suffixes that write them.
const MAGNITUDES: [(u64, &[&str]); 3] = [
    (1_000, &["k", " k", " thousand"]),
    (1_000_000, &["m", " m", "mn", " mn", " million"]),
    (1_000_000_000, &["b", " b", "bn", " bn", " billion"]),
];
/// Letter runs right after digits that make them another magnitude, not a unit.
const MAGNITUDE_LETTERS: [&[u8]; 7] = [b"k", b"m", b"b", b"bn", b"mn", b"g", b"t"];

/// The largest lowercased-text buffer a thread keeps between scans.
const MAX_KEPT_BUFFER: usize = 256 * 1024;

thread_local! {
    /// The text a scan reads, ASCII-lowercased: reused by every scan on this thread.
    static LOWERED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The matcher could not be built (more patterns than the automaton holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatcherError(String);

impl fmt::Display for MatcherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the answer matcher cannot be built: {}", self.0)
    }
}

impl std::error::Error for MatcherError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Digits (grouped or not); `fraction`: the pattern ends in fractional digits.
    Digits { fraction: bool },
    /// A k/M/B abbreviation, suffix included.
    Abbrev,
}

#[derive(Debug, Clone, Copy)]
struct Pattern {
    target: usize,
    kind: Kind,
}

/// Finds target values in text. Build it once per manifest; `find` is `&self` and allocation
/// free on ASCII text that matches nothing (once its thread's lowercasing buffer is warm).
///
/// Two automata, each over every target at once (never one per target):
///
/// - `numbers`: an anchored DFA over every number form (digits, abbreviations; each starts with
///   a digit). A number starts only at a digit whose left neighbour is not a letter, digit or
///   `_`, so the scan skips 32-byte blocks without a digit and walks the DFA from each such
///   start until it dies;
/// - `texts`: an unanchored automaton over the string values (a substring may start anywhere)
///   and the 27 number words that can begin a number (`one` ... `ninety`), all lowercase, run
///   case-sensitively over the text ASCII-lowercased (so its SIMD prefilter applies: a
///   case-insensitive automaton gets none, and walks every byte of prose), leftmost-first; at
///   each hit every string value is compared, a number word at a token start is read as a number in words and looked up among the
///   integer targets (a sorted table), and the search goes on from the next byte, so every
///   target is reported.
#[derive(Clone)]
pub struct Matcher {
    numbers: Option<dfa::DFA>,
    /// What each pattern of `numbers` is.
    number_patterns: Vec<Pattern>,
    texts: Option<AhoCorasick>,
    /// The string values' patterns (normalized; the first patterns of `texts`) and the target
    /// of each.
    string_patterns: Vec<Vec<u8>>,
    string_targets: Vec<usize>,
    /// (absolute integer value, target index), for numbers in words.
    integers: Vec<(u64, usize)>,
    /// The longest digit, abbreviation or string pattern, in bytes.
    longest: usize,
    targets: usize,
}

impl fmt::Debug for Matcher {
    // The patterns are the values: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matcher")
            .field("targets", &self.targets)
            .field("number_patterns", &self.number_patterns.len())
            .field("string_patterns", &self.string_targets.len())
            .finish()
    }
}

impl Matcher {
    /// A matcher over `values`; `find` reports indices into it.
    pub fn new(values: &[Value]) -> Result<Self, MatcherError> {
        let mut number_texts: Vec<String> = Vec::new();
        let mut number_patterns: Vec<Pattern> = Vec::new();
        let mut string_texts: Vec<String> = Vec::new();
        let mut string_targets: Vec<usize> = Vec::new();
        let mut integers = Vec::new();
        let mut add = |text: String, target: usize, kind: Kind| {
            number_texts.push(text);
            number_patterns.push(Pattern { target, kind });
        };
        for (target, value) in values.iter().enumerate() {
            match value {
                Value::Integer(n) => {
                    let abs = n.unsigned_abs();
                    let digits = abs.to_string();
                    for form in integer_forms(&digits) {
                        add(form, target, Kind::Digits { fraction: false });
                    }
                    for form in abbreviations(u128::from(abs), 0) {
                        add(form, target, Kind::Abbrev);
                    }
                    integers.push((abs, target));
                }
                Value::Decimal(x) => {
                    let shown = format!("{}", x.abs());
                    let (int, frac) = shown.split_once('.').unwrap_or((shown.as_str(), ""));
                    let mut seen = Vec::new();
                    for (group, mark) in DECIMAL_STYLES {
                        let form = if frac.is_empty() {
                            group_digits(int, group)
                        } else {
                            format!("{}{mark}{frac}", group_digits(int, group))
                        };
                        if !seen.contains(&form) {
                            seen.push(form.clone());
                            add(
                                form,
                                target,
                                Kind::Digits {
                                    fraction: !frac.is_empty(),
                                },
                            );
                        }
                    }
                    let mantissa: Option<u128> = format!("{int}{frac}").parse().ok();
                    if let Some(m) = mantissa {
                        let exp = u32::try_from(frac.len()).unwrap_or(u32::MAX);
                        for form in abbreviations(m, exp) {
                            add(form, target, Kind::Abbrev);
                        }
                    }
                }
                Value::Text(s) => {
                    for f in string_forms(s) {
                        let known = string_texts
                            .iter()
                            .zip(&string_targets)
                            .any(|(t, g)| *t == f && *g == target);
                        if !known {
                            string_texts.push(f);
                            string_targets.push(target);
                        }
                    }
                }
            }
        }
        integers.sort_unstable();
        let longest = number_texts
            .iter()
            .chain(&string_texts)
            .map(String::len)
            .max()
            .unwrap_or(0);
        let numbers = if number_texts.is_empty() {
            None
        } else {
            Some(
                dfa::DFA::builder()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::Standard)
                    .start_kind(StartKind::Anchored)
                    .prefilter(false)
                    .build(&number_texts)
                    .map_err(|e| MatcherError(e.to_string()))?,
            )
        };
        if !integers.is_empty() {
            string_texts.extend(NUMBER_STARTERS.iter().map(|p| (*p).to_owned()));
        }
        let texts = if string_texts.is_empty() {
            None
        } else {
            // Case-sensitive over lowercase patterns, the text lowercased once per scan: the
            // same matches as `ascii_case_insensitive`, but a packed (SIMD) prefilter applies,
            // which case-insensitive patterns rule out, so prose is skipped, not walked.
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostFirst)
                    .build(&string_texts)
                    .map_err(|e| MatcherError(e.to_string()))?,
            )
        };
        Ok(Self {
            numbers,
            number_patterns,
            texts,
            string_patterns: string_texts
                .into_iter()
                .take(string_targets.len())
                .map(String::into_bytes)
                .collect(),
            string_targets,
            integers,
            longest,
            targets: values.len(),
        })
    }

    /// How many targets it was built over.
    pub fn len(&self) -> usize {
        self.targets
    }

    /// The longest form of any value it matches, in bytes (digits with separators, an
    /// abbreviation, a string; a number in words can be longer).
    pub fn longest_form(&self) -> usize {
        self.longest
    }

    /// Whether it was built over no target.
    pub fn is_empty(&self) -> bool {
        self.targets == 0
    }

    /// Whether any target's value is in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        let mut found = false;
        self.scan(text, &mut |_| {
            found = true;
            false
        });
        found
    }

    /// The indices of every target whose value is in `text`, ascending, once each.
    pub fn find(&self, text: &str) -> Vec<usize> {
        let mut hits = Vec::new();
        self.scan(text, &mut |t| {
            if !hits.contains(&t) {
                hits.push(t);
            }
            true
        });
        hits.sort_unstable();
        hits
    }

    /// Calls `hit` with each matching target index; stops when it returns false.
    fn scan(&self, text: &str, hit: &mut dyn FnMut(usize) -> bool) {
        let text = normalize(text);
        let bytes = text.as_bytes();
        if let Some(ac) = &self.texts {
            // The text ASCII-lowercased (same byte positions), in a buffer kept per thread so
            // a scan allocates nothing once warm.
            let go_on = LOWERED.with(|cell| match cell.try_borrow_mut() {
                Ok(mut buf) => {
                    buf.clear();
                    buf.extend(bytes.iter().map(u8::to_ascii_lowercase));
                    let go_on = self.scan_texts(ac, &buf, hit);
                    if buf.capacity() > MAX_KEPT_BUFFER {
                        // A rare large text (a held stream) does not stay resident.
                        *buf = Vec::new();
                    }
                    go_on
                }
                Err(_) => self.scan_texts(ac, &bytes.to_ascii_lowercase(), hit),
            });
            if !go_on {
                return;
            }
        }
        let Some(numbers) = &self.numbers else {
            return;
        };
        let Ok(start_state) = numbers.start_state(Anchored::Yes) else {
            return;
        };
        const BLOCK: usize = 32;
        for (block, chunk) in bytes.chunks(BLOCK).enumerate() {
            // Branch-free, so it vectorizes: most blocks of prose hold no digit.
            let any_digit = chunk
                .iter()
                .fold(0u8, |acc, b| acc | u8::from(b.wrapping_sub(b'0') < 10));
            if any_digit == 0 {
                continue;
            }
            for (offset, b) in chunk.iter().enumerate() {
                let start = block * BLOCK + offset;
                if !b.is_ascii_digit() || !left_ok(bytes, start) {
                    continue;
                }
                if !self.walk_number(numbers, start_state, bytes, start, hit) {
                    return;
                }
            }
        }
    }

    /// The string values and number words in `lower` (the text ASCII-lowercased): leftmost-
    /// first (prefiltered), restarting one byte after each hit's start; at a hit, every string
    /// value is compared there (so each target starting at that byte is reported, not only the
    /// first pattern's), and a number word at a token start is read as a number in words.
    /// False when `hit` says stop.
    fn scan_texts(
        &self,
        ac: &AhoCorasick,
        lower: &[u8],
        hit: &mut dyn FnMut(usize) -> bool,
    ) -> bool {
        let mut at = 0usize;
        // Number words already parsed: hits before this end are inside that number.
        let mut words_end = 0usize;
        while let Some(m) = ac.find(Input::new(lower).span(at..lower.len())) {
            let start = m.start();
            for (pattern, target) in self.string_patterns.iter().zip(&self.string_targets) {
                let here = lower.get(start..start + pattern.len());
                if here == Some(pattern.as_slice()) && !hit(*target) {
                    return false;
                }
            }
            let token_start = start
                .checked_sub(1)
                .and_then(|i| lower.get(i))
                .is_none_or(|b| !is_word_byte(*b));
            if !self.integers.is_empty()
                && token_start
                && start >= words_end
                && let Some((n, stop)) = parse_words(lower, start)
            {
                words_end = stop;
                if !self.hit_integer(n, hit) {
                    return false;
                }
            }
            at = start + 1;
        }
        true
    }

    /// Walks the number DFA from `start`; false when `hit` says stop.
    fn walk_number(
        &self,
        numbers: &dfa::DFA,
        start_state: aho_corasick::automaton::StateID,
        bytes: &[u8],
        start: usize,
        hit: &mut dyn FnMut(usize) -> bool,
    ) -> bool {
        let mut sid = start_state;
        for (offset, &byte) in bytes.get(start..).unwrap_or(&[]).iter().enumerate() {
            sid = numbers.next_state(Anchored::Yes, sid, byte);
            if numbers.is_dead(sid) {
                break;
            }
            if !numbers.is_match(sid) {
                continue;
            }
            let end = start + offset + 1;
            for i in 0..numbers.match_len(sid) {
                let id = numbers.match_pattern(sid, i).as_usize();
                let Some(p) = self.number_patterns.get(id) else {
                    continue;
                };
                let matched = match p.kind {
                    Kind::Digits { fraction } => digits_right_ok(bytes, end, fraction),
                    Kind::Abbrev => !bytes
                        .get(end)
                        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_'),
                };
                if matched && !hit(p.target) {
                    return false;
                }
            }
        }
        true
    }

    /// Reports every target whose integer value is `n`; false when `hit` says stop.
    fn hit_integer(&self, n: u64, hit: &mut dyn FnMut(usize) -> bool) -> bool {
        let i = self.integers.partition_point(|(v, _)| *v < n);
        for (v, t) in self.integers.get(i..).unwrap_or(&[]) {
            if *v != n {
                break;
            }
            if !hit(*t) {
                return false;
            }
        }
        true
    }
}

/// A string value's patterns: normalized, and for a non-ASCII value its full lowercase and
/// uppercase forms too, each ASCII-lowercased (the texts automaton reads the text so).
fn string_forms(value: &str) -> Vec<String> {
    let norm = normalize(value).into_owned();
    let mut forms = vec![norm.to_ascii_lowercase()];
    if !norm.is_ascii() {
        for f in [norm.to_lowercase(), norm.to_uppercase()] {
            let f = f.to_ascii_lowercase();
            if !forms.contains(&f) {
                forms.push(f);
            }
        }
    }
    forms
}

/// `digits` plain and grouped by thousands with each separator.
fn integer_forms(digits: &str) -> Vec<String> {
    let mut out = vec![digits.to_owned()];
    if digits.len() > 3 {
        for sep in GROUP_SEPARATORS {
            out.push(group_digits(digits, sep));
        }
    }
    out
}

fn group_digits(digits: &str, sep: &str) -> String {
    if sep.is_empty() || digits.len() <= 3 {
        return digits.to_owned();
    }
    let head = digits.len() % 3;
    let mut out = String::with_capacity(digits.len() * 2);
    out.push_str(&digits[..head]);
    let mut i = head;
    while i < digits.len() {
        if !out.is_empty() {
            out.push_str(sep);
        }
        out.push_str(&digits[i..i + 3]);
        i += 3;
    }
    out
}

/// The abbreviations of the value `mantissa / 10^exp` (see the module docs).
fn abbreviations(mantissa: u128, exp: u32) -> Vec<String> {
    let mut out = Vec::new();
    let Some(denominator_base) = 10u128.checked_pow(exp) else {
        return out;
    };
    for (scale, suffixes) in MAGNITUDES {
        // Below a tenth of the magnitude, no abbreviation in it is written.
        let Some(value_tenths) = mantissa.checked_mul(10) else {
            continue;
        };
        if value_tenths < u128::from(scale) * denominator_base {
            continue;
        }
        for decimals in 0..=3u32 {
            let p = 10u128.pow(decimals);
            let (Some(num), Some(den)) = (
                mantissa.checked_mul(p),
                u128::from(scale).checked_mul(denominator_base),
            ) else {
                continue;
            };
            let floor = num / den;
            let exact = num % den == 0;
            let round = (num + den / 2) / den;
            let mut shown = vec![floor];
            if round != floor {
                shown.push(round);
            }
            for m in shown {
                if !(exact && m == floor) && m < 10 {
                    continue;
                }
                let int = m / p;
                let frac = m % p;
                for mark in [".", ","] {
                    let number = if decimals == 0 {
                        int.to_string()
                    } else {
                        format!("{int}{mark}{frac:0width$}", width = decimals as usize)
                    };
                    for suffix in suffixes {
                        let form = format!("{number}{suffix}");
                        if !out.contains(&form) {
                            out.push(form);
                        }
                    }
                    if decimals == 0 {
                        break;
                    }
                }
            }
        }
    }
    out
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Left of a number: not inside a token, not the fraction or tail of another number.
fn left_ok(bytes: &[u8], start: usize) -> bool {
    let Some(prev) = start.checked_sub(1).and_then(|i| bytes.get(i)) else {
        return true;
    };
    if is_word_byte(*prev) {
        return false;
    }
    if matches!(prev, b'.' | b',') {
        let before = start.checked_sub(2).and_then(|i| bytes.get(i));
        return !before.is_some_and(u8::is_ascii_digit);
    }
    true
}

/// Right of a number's digits.
fn digits_right_ok(bytes: &[u8], end: usize, fraction: bool) -> bool {
    let mut i = end;
    if fraction {
        while bytes.get(i) == Some(&b'0') {
            i += 1;
        }
    }
    let Some(&next) = bytes.get(i) else {
        return true;
    };
    if next.is_ascii_digit() || next == b'_' {
        return false;
    }
    if matches!(next, b'.' | b',') {
        let mut j = i + 1;
        while bytes.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        let run = &bytes[i + 1..j];
        if run.is_empty() {
            return true;
        }
        // `5100.00` is the value; `5100,000` and `5.100.000` are another number grouped by
        // thousands (so three zeros are read as a group, whichever the mark).
        return !fraction && run.len() != 3 && run.iter().all(|b| *b == b'0');
    }
    if next.is_ascii_alphabetic() {
        let mut j = i;
        while bytes.get(j).is_some_and(u8::is_ascii_alphabetic) {
            j += 1;
        }
        let run = bytes[i..j].to_ascii_lowercase();
        if MAGNITUDE_LETTERS.contains(&run.as_slice()) {
            return false;
        }
        return !bytes
            .get(j)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'_');
    }
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    Start,
    Unit,
    Teen,
    Tens,
    TensUnit,
    Hundred,
    Scale,
    And,
}

#[derive(Debug, Clone, Copy)]
enum Word {
    Unit(u64),
    Teen(u64),
    Tens(u64),
    Hundred,
    Scale(u64),
    And,
}

fn word_at(bytes: &[u8], start: usize) -> Option<(Word, usize)> {
    let mut end = start;
    while bytes.get(end).is_some_and(u8::is_ascii_alphabetic) {
        end += 1;
    }
    if end == start || bytes.get(end).is_some_and(|b| is_word_byte(*b)) {
        return None;
    }
    // The longest word of the vocabulary has 9 letters.
    let mut buf = [0u8; 9];
    let w = buf.get_mut(..end - start)?;
    w.copy_from_slice(bytes.get(start..end)?);
    w.make_ascii_lowercase();
    let word = match &*w {
        b"one" => Word::Unit(1),
        b"two" => Word::Unit(2),
        b"three" => Word::Unit(3),
        b"four" => Word::Unit(4),
        b"five" => Word::Unit(5),
        b"six" => Word::Unit(6),
        b"seven" => Word::Unit(7),
        b"eight" => Word::Unit(8),
        b"nine" => Word::Unit(9),
        b"ten" => Word::Teen(10),
        b"eleven" => Word::Teen(11),
        b"twelve" => Word::Teen(12),
        b"thirteen" => Word::Teen(13),
        b"fourteen" => Word::Teen(14),
        b"fifteen" => Word::Teen(15),
        b"sixteen" => Word::Teen(16),
        b"seventeen" => Word::Teen(17),
        b"eighteen" => Word::Teen(18),
        b"nineteen" => Word::Teen(19),
        b"twenty" => Word::Tens(20),
        b"thirty" => Word::Tens(30),
        b"forty" => Word::Tens(40),
        b"fifty" => Word::Tens(50),
        b"sixty" => Word::Tens(60),
        b"seventy" => Word::Tens(70),
        b"eighty" => Word::Tens(80),
        b"ninety" => Word::Tens(90),
        b"hundred" => Word::Hundred,
        b"thousand" => Word::Scale(1_000),
        b"million" => Word::Scale(1_000_000),
        b"billion" => Word::Scale(1_000_000_000),
        b"trillion" => Word::Scale(1_000_000_000_000),
        b"and" => Word::And,
        _ => return None,
    };
    Some((word, end))
}

/// Every word that can begin a number in words.
const NUMBER_STARTERS: [&str; 27] = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "sixty",
    "seventy",
    "eighty",
    "ninety",
];

/// The integer written in words from `start`, and where it ends; the longest valid reading.
fn parse_words(bytes: &[u8], start: usize) -> Option<(u64, usize)> {
    let mut total: u64 = 0;
    let mut group: u64 = 0;
    let mut last = Last::Start;
    let mut last_scale = u64::MAX;
    let mut pos = start;
    let mut end = start;
    while let Some((word, word_end)) = word_at(bytes, pos) {
        let next = match (word, last) {
            (Word::Unit(n), Last::Start | Last::Tens | Last::Hundred | Last::Scale | Last::And) => {
                group += n;
                if last == Last::Tens {
                    Last::TensUnit
                } else {
                    Last::Unit
                }
            }
            (Word::Teen(n), Last::Start | Last::Hundred | Last::Scale | Last::And) => {
                group += n;
                Last::Teen
            }
            (Word::Tens(n), Last::Start | Last::Hundred | Last::Scale | Last::And) => {
                group += n;
                Last::Tens
            }
            (Word::Hundred, Last::Unit | Last::Teen | Last::Tens | Last::TensUnit)
                if !group.is_multiple_of(100) && group < 100 =>
            {
                group *= 100;
                Last::Hundred
            }
            (
                Word::Scale(s),
                Last::Unit | Last::Teen | Last::Tens | Last::TensUnit | Last::Hundred,
            ) if s < last_scale => {
                total = total.checked_add(group.checked_mul(s)?)?;
                group = 0;
                last_scale = s;
                Last::Scale
            }
            (Word::And, Last::Hundred | Last::Scale) => Last::And,
            _ => break,
        };
        last = next;
        if last != Last::And {
            end = word_end;
        }
        // Separators between words: spaces, hyphens, commas.
        pos = word_end;
        while bytes
            .get(pos)
            .is_some_and(|b| matches!(b, b' ' | b'-' | b',' | b'\n' | b'\t' | b'\r'))
        {
            pos += 1;
        }
        if pos == word_end {
            break;
        }
    }
    if last == Last::Start {
        return None;
    }
    Some((total + group, end))
}

fn is_removed(c: char) -> bool {
    matches!(c, '\u{00AD}' | '\u{200B}'..='\u{200F}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{180E}')
}

/// Text as the matcher reads it (see the module docs); ASCII text is borrowed unchanged.
pub fn normalize(text: &str) -> Cow<'_, str> {
    if text.is_ascii() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_removed(c) {
            continue;
        }
        let mapped = match c {
            '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            '\u{2018}' | '\u{2019}' | '\u{201B}' | '\u{2032}' => '\'',
            '\u{2010}'..='\u{2015}' | '\u{2212}' | '\u{FE63}' => '-',
            c if c.is_whitespace() => ' ',
            c => c,
        };
        out.push(mapped);
    }
    Cow::Owned(out)
}
