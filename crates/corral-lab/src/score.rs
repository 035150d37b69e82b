//! The scoring port: a [`Scorer`] turns a step's input, output and expected value into a score
//! in [0, 1] and a pass, and the built-ins `exact`, `regex` and `json_path` implement it. A step
//! with no expected value, or a run with no scorer, is "executed, not scored"
//! ([`StepScore::NotScored`]): a distinct value, never a pass. [`TrialStats`] gives pass@k and
//! pass^k over k trials.
//!
//! The built-ins, decided:
//! - `exact`: an expected string must equal the output byte for byte (newlines included); any
//!   other expected JSON value must equal the output parsed as JSON (`serde_json::Value`
//!   equality, so `1` and `1.0` differ).
//! - `regex`: the expected string is a pattern of the `regex` crate (linear time, no
//!   backreferences, so a hostile output cannot make it slow) and must match the WHOLE output:
//!   it is anchored at both ends (`\A(?:pattern)\z`). An unanchored `yes` would pass
//!   `yes, and also no`; a search is spelled explicitly as `(?s).*yes.*`.
//! - `json_path`: the expected value is `{"path": P, "value": V}`; the output is parsed as JSON
//!   and the one value at `P` must equal `V`. `P` is either an RFC 9535 *singular query* (`$`,
//!   then `.name`, `['name']`, `["name"]` or `[index]` segments, a negative index counting from
//!   the end) or an RFC 6901 JSON Pointer (`/a/0`, or `` for the whole document). Singular
//!   queries are the part of JSONPath that selects at most one value, which is what equality
//!   needs (a wildcard or filter selects a list, and "equal" over a list has no single meaning);
//!   they map onto `serde_json`'s JSON Pointer lookup, so no JSONPath crate is needed. A path
//!   that selects nothing, or an output that is not JSON, scores 0.
//!
//! Each built-in scores 1 (pass) or 0 (fail). A malformed expected value (a pattern that does
//! not compile, a `json_path` expectation without `path`) is an error with the code
//! `lab.expected_invalid`, never a fail: it is the scenario's fault, not the agent's.

use corral_policy::codes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A scored step: a score in [0, 1] and whether it passes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ScoredWire")]
pub struct Scored {
    /// In [0, 1], finite.
    // INVARIANT (score in range): `Scored::new` is the only constructor outside this module's
    // built-ins, and it refuses a score outside [0, 1] or NaN; deserializing goes through it.
    score: f64,
    /// Whether the step passes.
    pass: bool,
}

/// [`Scored`] as it arrives, before its range is checked.
#[derive(Deserialize)]
struct ScoredWire {
    score: f64,
    pass: bool,
}

impl TryFrom<ScoredWire> for Scored {
    type Error = String;
    fn try_from(w: ScoredWire) -> Result<Self, Self::Error> {
        Scored::new(w.score, w.pass)
            .ok_or_else(|| format!("the score {} is outside [0, 1]", w.score))
    }
}

impl Scored {
    /// A score, if it is finite and in [0, 1] (an external scorer's answer goes through here).
    pub fn new(score: f64, pass: bool) -> Option<Self> {
        (score.is_finite() && (0.0..=1.0).contains(&score)).then_some(Scored { score, pass })
    }

    /// A pass (1) or a fail (0).
    pub fn binary(pass: bool) -> Self {
        Scored {
            score: if pass { 1.0 } else { 0.0 },
            pass,
        }
    }

    /// The score, in [0, 1].
    pub fn score(&self) -> f64 {
        self.score
    }

    /// Whether the step passes.
    pub fn pass(&self) -> bool {
        self.pass
    }
}

/// Why a step or run was executed but not scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotScored {
    /// No scorer is attached to the run.
    NoScorer,
    /// The step has no expected value.
    NoExpected,
}

/// A step's score: scored, or executed and not scored (never a pass).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StepScore {
    /// Scored by the run's scorer.
    Scored(Scored),
    /// Executed, not scored.
    NotScored {
        /// Why.
        reason: NotScored,
    },
}

/// A malformed expected value (the scenario's fault, not the agent's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScoreError {
    /// The scorer named is not a built-in.
    #[error(
        "there is no scorer `{name}` (the run's scorer); use `exact`, `regex`, `json_path` or `command:<name>` of a scorer under `sandbox.scorers`"
    )]
    UnknownScorer {
        /// The name asked for.
        name: String,
    },
    /// The expected value does not fit the scorer.
    #[error(
        "the expected value does not fit the `{scorer}` scorer: {why}; fix the step's `expected`"
    )]
    Expected {
        /// The scorer.
        scorer: &'static str,
        /// What is wrong.
        why: String,
    },
    /// An external command scorer failed (`lab.scorer_failed`) or printed something else
    /// (`lab.program_output`).
    #[error("{1}")]
    Program(&'static str, String),
}

impl ScoreError {
    /// The stable code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            ScoreError::UnknownScorer { .. } => codes::LAB_SCORER_UNKNOWN,
            ScoreError::Expected { .. } => codes::LAB_EXPECTED_INVALID,
            ScoreError::Program(code, _) => code,
        }
    }
}

/// The scoring port: one step's input, output and expected value to a score and a pass.
pub trait Scorer: Send + Sync + std::fmt::Debug {
    /// The scorer's name, as a run records it (its suite).
    fn name(&self) -> &str;
    /// Scores one step that has an expected value.
    fn score(&self, input: &str, output: &str, expected: &Value) -> Result<Scored, ScoreError>;
}

/// Scores a step: "executed, not scored" without a scorer or without an expected value.
pub fn score_step(
    scorer: Option<&dyn Scorer>,
    input: &str,
    output: &str,
    expected: Option<&Value>,
) -> Result<StepScore, ScoreError> {
    match (scorer, expected) {
        (None, _) => Ok(StepScore::NotScored {
            reason: NotScored::NoScorer,
        }),
        (Some(_), None) => Ok(StepScore::NotScored {
            reason: NotScored::NoExpected,
        }),
        (Some(s), Some(e)) => s.score(input, output, e).map(StepScore::Scored),
    }
}

/// A run's verdict from its steps' scores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum RunScore {
    /// Every step was scored: the mean score, and a pass iff every step passed.
    Scored(Scored),
    /// At least one step (or the run) was not scored: "executed, not scored". A run is never
    /// given a pass on the strength of some of its steps.
    NotScored {
        /// How many steps were not scored.
        steps_not_scored: usize,
    },
}

impl RunScore {
    /// Folds the steps' scores into the run's: scored only when every step was (and there was at
    /// least one step).
    pub fn of_steps(steps: &[StepScore]) -> RunScore {
        let mut sum = 0.0;
        let mut pass = true;
        let mut not_scored = 0;
        for s in steps {
            match s {
                StepScore::Scored(x) => {
                    sum += x.score;
                    pass &= x.pass;
                }
                StepScore::NotScored { .. } => not_scored += 1,
            }
        }
        if not_scored > 0 || steps.is_empty() {
            return RunScore::NotScored {
                steps_not_scored: not_scored,
            };
        }
        let mean = (sum / steps.len() as f64).clamp(0.0, 1.0);
        RunScore::Scored(Scored { score: mean, pass })
    }

    /// `passed`, `failed` or `not_scored`, as a run record stores it.
    pub fn verdict(&self) -> &'static str {
        match self {
            RunScore::Scored(s) if s.pass => "passed",
            RunScore::Scored(_) => "failed",
            RunScore::NotScored { .. } => "not_scored",
        }
    }
}

/// A built-in scorer by name (`exact`, `regex`, `json_path`).
pub fn builtin(name: &str) -> Result<Box<dyn Scorer>, ScoreError> {
    match name {
        "exact" => Ok(Box::new(Exact)),
        "regex" => Ok(Box::new(Regex)),
        "json_path" => Ok(Box::new(JsonPath)),
        _ => Err(ScoreError::UnknownScorer {
            name: name.to_owned(),
        }),
    }
}

/// `exact`: the output equals the expected string (or, for other JSON, the output parsed as JSON
/// equals it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Exact;

impl Scorer for Exact {
    fn name(&self) -> &str {
        "exact"
    }
    fn score(&self, _input: &str, output: &str, expected: &Value) -> Result<Scored, ScoreError> {
        Ok(Scored::binary(match expected {
            Value::String(s) => s == output,
            other => serde_json::from_str::<Value>(output).is_ok_and(|v| &v == other),
        }))
    }
}

/// `regex`: the expected pattern matches the whole output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Regex;

/// The compiled size a pattern may take (the `regex` crate's default is 10 MiB; a scenario's
/// pattern needs far less).
const REGEX_SIZE_LIMIT: usize = 1024 * 1024;

impl Scorer for Regex {
    fn name(&self) -> &str {
        "regex"
    }
    fn score(&self, _input: &str, output: &str, expected: &Value) -> Result<Scored, ScoreError> {
        let Value::String(pattern) = expected else {
            return Err(ScoreError::Expected {
                scorer: "regex",
                why: "the expected value must be a pattern string".into(),
            });
        };
        let compile = |p: &str| {
            regex::RegexBuilder::new(p)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| ScoreError::Expected {
                    scorer: "regex",
                    why: format!("the pattern `{pattern}` does not compile ({e})"),
                })
        };
        // The pattern alone first: one that closes the anchoring group itself (`no)|(?:.*`)
        // does not compile alone, and would otherwise match any output once wrapped.
        compile(pattern)?;
        let re = compile(&format!(r"\A(?:{pattern})\z"))?;
        Ok(Scored::binary(re.is_match(output)))
    }
}

/// `json_path`: the output's value at `path` equals `value`.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonPath;

impl Scorer for JsonPath {
    fn name(&self) -> &str {
        "json_path"
    }
    fn score(&self, _input: &str, output: &str, expected: &Value) -> Result<Scored, ScoreError> {
        let bad = |why: &str| ScoreError::Expected {
            scorer: "json_path",
            why: why.to_owned(),
        };
        let Value::Object(map) = expected else {
            return Err(bad(
                "the expected value must be `{\"path\": ..., \"value\": ...}`",
            ));
        };
        if let Some(k) = map.keys().find(|k| *k != "path" && *k != "value") {
            return Err(bad(&format!(
                "the expectation has an unknown key `{k}` (keys: `path`, `value`)"
            )));
        }
        let Some(Value::String(path)) = map.get("path") else {
            return Err(bad("the expectation needs a string `path`"));
        };
        let Some(value) = map.get("value") else {
            return Err(bad("the expectation needs a `value`"));
        };
        let path = Path::parse(path).map_err(|why| ScoreError::Expected {
            scorer: "json_path",
            why: format!("the path `{path}` is not a JSON Pointer or a singular JSONPath: {why}"),
        })?;
        let Ok(doc) = serde_json::from_str::<Value>(output) else {
            return Ok(Scored::binary(false));
        };
        Ok(Scored::binary(path.select(&doc) == Some(value)))
    }
}

/// One step of a singular path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A member of an object.
    Name(String),
    /// An element of an array; a negative index counts from the end.
    Index(i64),
}

/// A path to one value: a singular JSONPath query or a JSON Pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Path {
    /// An RFC 9535 singular query, as its segments.
    Query(Vec<Segment>),
    /// An RFC 6901 JSON Pointer (checked: every `~` is `~0` or `~1`).
    Pointer(String),
}

impl Path {
    /// Parses an RFC 9535 singular query (`$.a['b'][0]`) or an RFC 6901 JSON Pointer
    /// (`/a/b/0`, or the empty string for the whole document).
    pub fn parse(path: &str) -> Result<Path, String> {
        if path.is_empty() || path.starts_with('/') {
            let mut chars = path.chars();
            while let Some(c) = chars.next() {
                if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                    return Err("in a JSON Pointer `~` must be followed by `0` or `1`".into());
                }
            }
            return Ok(Path::Pointer(path.to_owned()));
        }
        parse_query(path).map(Path::Query)
    }

    /// The one value the path names in `doc`, if any.
    pub fn select<'a>(&self, doc: &'a Value) -> Option<&'a Value> {
        match self {
            Path::Query(segments) => select(doc, segments),
            Path::Pointer(p) => doc.pointer(p),
        }
    }
}

/// Selects the one value a singular query's segments name, if any.
fn select<'a>(doc: &'a Value, path: &[Segment]) -> Option<&'a Value> {
    let mut at = doc;
    for seg in path {
        at = match (seg, at) {
            (Segment::Name(n), Value::Object(m)) => m.get(n)?,
            (Segment::Index(i), Value::Array(a)) => {
                let len = i64::try_from(a.len()).ok()?;
                let i = if *i < 0 { len + *i } else { *i };
                a.get(usize::try_from(i).ok()?)?
            }
            (Segment::Name(_) | Segment::Index(_), _) => return None,
        };
    }
    Some(at)
}

/// Parses an RFC 9535 singular query (`$.a['b'][0]`).
fn parse_query(path: &str) -> Result<Vec<Segment>, String> {
    let Some(mut rest) = path.strip_prefix('$') else {
        return Err("it must start with `$` (JSONPath) or `/` (JSON Pointer)".into());
    };
    let mut out = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r
                .char_indices()
                .find(|&(i, c)| {
                    // RFC 9535 member-name-shorthand: ALPHA, `_` or non-ASCII, then digits too.
                    !(c == '_'
                        || c.is_ascii_alphabetic()
                        || !c.is_ascii()
                        || (i > 0 && c.is_ascii_digit()))
                })
                .map_or(r.len(), |(i, _)| i);
            if end == 0 {
                return Err("a `.` must be followed by a member name".into());
            }
            out.push(Segment::Name(r[..end].to_owned()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let (seg, r) = parse_bracket(r)?;
            out.push(seg);
            rest = r;
        } else {
            return Err(format!(
                "unexpected `{}`; use `.name`, `['name']` or `[index]` segments (no wildcards or filters)",
                rest.chars().next().unwrap_or(' ')
            ));
        }
    }
    Ok(out)
}

/// Parses `'name']`, `"name"]` or `index]` after a `[`.
fn parse_bracket(r: &str) -> Result<(Segment, &str), String> {
    if let Some(quote) = r.chars().next().filter(|c| *c == '\'' || *c == '"') {
        let mut name = String::new();
        let mut chars = r[1..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, e @ ('\\' | '\'' | '"' | '/'))) => name.push(e),
                    Some((_, 'n')) => name.push('\n'),
                    Some((_, 't')) => name.push('\t'),
                    Some((_, 'r')) => name.push('\r'),
                    _ => return Err("an unsupported escape in a quoted name".into()),
                },
                c if c == quote => {
                    let after = &r[1 + i + 1..];
                    let Some(after) = after.strip_prefix(']') else {
                        return Err("a quoted name must be followed by `]`".into());
                    };
                    return Ok((Segment::Name(name), after));
                }
                c => name.push(c),
            }
        }
        return Err("an unterminated quoted name".into());
    }
    let Some(end) = r.find(']') else {
        return Err("an unterminated `[`".into());
    };
    let digits = &r[..end];
    let valid = !digits.is_empty()
        && (digits == "0"
            || digits
                .strip_prefix('-')
                .unwrap_or(digits)
                .chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_digit() && !(i == 0 && c == '0')));
    match digits.parse::<i64>() {
        Ok(i) if valid && digits != "-0" => Ok((Segment::Index(i), &r[end + 1..])),
        _ => Err(format!(
            "`[{digits}]` is not an index or a quoted name (no wildcards, slices or filters)"
        )),
    }
}

/// The pass counts of k trials of a scenario, and the pass@k / pass^k estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialStats {
    /// Trials run (n).
    pub trials: u32,
    /// Trials that passed (c).
    pub passes: u32,
}

impl TrialStats {
    /// The counts of a list of trial passes.
    pub fn of(passes: &[bool]) -> TrialStats {
        TrialStats {
            trials: u32::try_from(passes.len()).unwrap_or(u32::MAX),
            passes: u32::try_from(passes.iter().filter(|p| **p).count()).unwrap_or(u32::MAX),
        }
    }

    /// The counts of a run's trials from each trial's score: a trial passes only when it was
    /// scored and passed; a trial not scored, or not judged (`None`: an infrastructure error, or
    /// never run), counts as a trial and not a pass.
    pub fn of_scores(trials: &[Option<RunScore>]) -> TrialStats {
        let passes: Vec<bool> = trials
            .iter()
            .map(|t| matches!(t, Some(RunScore::Scored(s)) if s.pass))
            .collect();
        TrialStats::of(&passes)
    }

    /// pass@k: the chance that at least one of k trials drawn from these n passes, by the
    /// unbiased estimator of Chen et al. 2021, `1 - C(n-c, k) / C(n, k)`. With k = n it is 1 iff
    /// any trial passed. `None` when k is 0 or over n.
    pub fn pass_at_k(&self, k: u32) -> Option<f64> {
        let (n, c) = (self.trials, self.passes.min(self.trials));
        if k == 0 || k > n {
            return None;
        }
        if n - c < k {
            return Some(1.0);
        }
        // 1 - prod_{i = n-c+1}^{n} (1 - k / i): Chen et al.'s numerically stable form.
        let mut prod = 1.0;
        for i in (n - c + 1)..=n {
            prod *= 1.0 - f64::from(k) / f64::from(i);
        }
        Some(1.0 - prod)
    }

    /// pass^k: the chance that all of k trials drawn from these n pass, by the unbiased
    /// estimator `C(c, k) / C(n, k)`. With k = n it is 1 iff every trial passed. `None` when k is
    /// 0 or over n.
    pub fn pass_hat_k(&self, k: u32) -> Option<f64> {
        let (n, c) = (self.trials, self.passes.min(self.trials));
        if k == 0 || k > n {
            return None;
        }
        if c < k {
            return Some(0.0);
        }
        // prod_{i=0}^{k-1} (c - i) / (n - i)
        let mut prod = 1.0;
        for i in 0..k {
            prod *= f64::from(c - i) / f64::from(n - i);
        }
        Some(prod)
    }
}

/// A suite's pass@k and pass^k over its scenarios: each scenario's estimate, and their means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteStats {
    /// k.
    pub k: u32,
    /// The mean pass@k over the scenarios; `None` when a scenario has fewer than k trials or
    /// there is none.
    pub pass_at_k: Option<f64>,
    /// The mean pass^k over the scenarios; `None` as for `pass_at_k`.
    pub pass_hat_k: Option<f64>,
    /// How many scenarios.
    pub scenarios: usize,
}

impl SuiteStats {
    /// The suite's estimates from each scenario's trial counts.
    pub fn of(k: u32, scenarios: &[TrialStats]) -> SuiteStats {
        let mean = |f: &dyn Fn(&TrialStats) -> Option<f64>| -> Option<f64> {
            if scenarios.is_empty() {
                return None;
            }
            let mut sum = 0.0;
            for s in scenarios {
                sum += f(s)?;
            }
            Some(sum / scenarios.len() as f64)
        };
        SuiteStats {
            k,
            pass_at_k: mean(&|s| s.pass_at_k(k)),
            pass_hat_k: mean(&|s| s.pass_hat_k(k)),
            scenarios: scenarios.len(),
        }
    }
}
