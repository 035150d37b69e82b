//! Inspect AI eval logs: read the `.eval` files `inspect eval` writes (a zip archive of JSON, one
//! `samples/<id>_epoch_<n>.json` entry per sample and epoch) and compare two of them with the
//! lab's verdict ([`crate::verdict`]), paired by sample id and epoch, so a team gets the verdict
//! without moving its evals (`corral sandbox compare --inspect BASE.eval CAND.eval`).
//!
//! Decided:
//! - Every `samples/*.json` entry is read (the entry names are not trusted: the id and epoch come
//!   from the sample's own `id` and `epoch`). A sample id may be a string or an integer; both
//!   sides must hold the same (id, epoch) pairs, or the comparison is refused.
//! - The score is one scorer's value: the one named, or the only one the log has (two or more
//!   and none named is refused). Values map to [0, 1] as Inspect's `value_to_float` does:
//!   numbers and booleans as they are, `C` 1, `P` 0.5, `I` and `N` 0, `yes`/`true` 1,
//!   `no`/`false` 0, a numeric string its number. Unlike `value_to_float`, a value it cannot map
//!   (a list, a dict, other text) or a number outside [0, 1] is refused, never read as 0. A
//!   sample passes when its score is 1.
//! - A sample with an `error` is an infrastructure error (Inspect records a sample's runtime
//!   failure there), not the model's failure; a sample without the scorer's score is executed
//!   and not scored. Both feed the verdict's forcing rules.
//! - The archive is hostile input: at most 100,000 entries, each sample entry inflated to at
//!   most 64 MiB and all of them to at most 1 GiB, read through bounded readers, so a zip bomb
//!   stops at the limit; of each sample only `id`, `epoch`, `scores` and `error` are kept (the
//!   messages and events are skipped while parsing).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use corral_policy::codes;
use serde_json::Value;

use crate::verdict::{self, Observed, ScoredTrials};

/// The most entries an archive may have.
const MAX_ENTRIES: usize = 100_000;
/// The most bytes one sample entry may inflate to.
const MAX_SAMPLE_BYTES: u64 = 64 * 1024 * 1024;
/// The most bytes all sample entries together may inflate to.
const MAX_TOTAL_BYTES: u64 = 1024 * 1024 * 1024;

/// The part of a sample entry the comparison reads; serde skips the rest.
#[derive(Debug, serde::Deserialize)]
struct RawSample {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    epoch: Value,
    #[serde(default)]
    scores: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    error: Value,
}

/// One sample of one epoch, as read from a log.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's id (an integer id in its decimal form).
    pub id: String,
    /// The epoch, from 1.
    pub epoch: u64,
    /// The outcome.
    pub outcome: Outcome,
}

/// What happened to a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Scored: the score in [0, 1] (a pass when it is 1).
    Scored(f64),
    /// Executed, not scored by the scorer.
    NotScored,
    /// The sample hit an error (an infrastructure error to the verdict).
    Error,
}

/// A log's samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    /// The scorer whose values were read.
    pub scorer: String,
    /// The samples, by (id, epoch).
    pub samples: BTreeMap<(String, u64), Sample>,
}

/// Why a log cannot be read or compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} ({at}); pass `.eval` files written by `inspect eval` whose samples were scored")]
pub struct InspectError {
    /// What is wrong.
    pub what: String,
    /// Where: the file, and the entry when there is one.
    pub at: String,
}

impl InspectError {
    fn new(what: impl Into<String>, at: impl Into<String>) -> InspectError {
        InspectError {
            what: what.into(),
            at: at.into(),
        }
    }

    /// The stable code of the error.
    pub fn code(&self) -> &'static str {
        codes::LAB_INSPECT_LOG_INVALID
    }
}

/// Reads a `.eval` log, taking the values of `scorer` (or of the only scorer the log has).
pub fn read_log(path: &Path, scorer: Option<&str>) -> Result<Log, InspectError> {
    let file_at = path.display().to_string();
    let file = std::fs::File::open(path)
        .map_err(|e| InspectError::new(format!("the log cannot be opened: {e}"), &file_at))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| {
        InspectError::new(
            format!("the log is not a `.eval` zip archive: {e}"),
            &file_at,
        )
    })?;
    if zip.len() > MAX_ENTRIES {
        return Err(InspectError::new(
            format!("the archive has {} entries, over {MAX_ENTRIES}", zip.len()),
            &file_at,
        ));
    }
    let mut raw = Vec::new();
    let mut total = 0u64;
    for i in 0..zip.len() {
        let entry = zip
            .by_index(i)
            .map_err(|e| InspectError::new(format!("entry {i} cannot be read: {e}"), &file_at))?;
        let name = entry.name().to_owned();
        if !(name.starts_with("samples/") && name.ends_with(".json")) {
            continue;
        }
        let at = format!("{file_at}, entry `{name}`");
        let mut bytes = Vec::new();
        entry
            .take(MAX_SAMPLE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| InspectError::new(format!("the entry cannot be inflated: {e}"), &at))?;
        if bytes.len() as u64 > MAX_SAMPLE_BYTES {
            return Err(InspectError::new(
                format!("the entry inflates to over {MAX_SAMPLE_BYTES} bytes"),
                &at,
            ));
        }
        total += bytes.len() as u64;
        if total > MAX_TOTAL_BYTES {
            return Err(InspectError::new(
                format!("the samples inflate to over {MAX_TOTAL_BYTES} bytes in all"),
                &at,
            ));
        }
        let v: RawSample = serde_json::from_slice(&bytes).map_err(|e| {
            InspectError::new(format!("the entry is not a sample's JSON: {e}"), &at)
        })?;
        raw.push((at, v));
    }
    if raw.is_empty() {
        return Err(InspectError::new(
            "the log has no samples (no `samples/*.json` entry)",
            &file_at,
        ));
    }
    let scorer = pick_scorer(&raw, scorer, &file_at)?;
    let mut samples = BTreeMap::new();
    for (at, v) in &raw {
        let s = sample(v, &scorer, at)?;
        let key = (s.id.clone(), s.epoch);
        if samples.insert(key, s).is_some() {
            return Err(InspectError::new("the sample and epoch appear twice", at));
        }
    }
    Ok(Log { scorer, samples })
}

/// The scorer to read: the one named, or the only one any sample has.
fn pick_scorer(
    raw: &[(String, RawSample)],
    named: Option<&str>,
    file_at: &str,
) -> Result<String, InspectError> {
    if let Some(n) = named {
        return Ok(n.to_owned());
    }
    let mut names = std::collections::BTreeSet::new();
    for (_, v) in raw {
        if let Some(scores) = &v.scores {
            names.extend(scores.keys().cloned());
        }
    }
    let mut it = names.iter();
    match (it.next(), it.next()) {
        (Some(one), None) => Ok(one.clone()),
        (None, _) => Err(InspectError::new("no sample has a score", file_at)),
        (Some(_), Some(_)) => Err(InspectError::new(
            format!(
                "the log has several scorers ({}); name the one to compare",
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            file_at,
        )),
    }
}

/// One sample entry.
fn sample(v: &RawSample, scorer: &str, at: &str) -> Result<Sample, InspectError> {
    let id = match &v.id {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        _ => {
            return Err(InspectError::new(
                "the sample has no string or integer `id`",
                at,
            ));
        }
    };
    let epoch =
        v.epoch.as_u64().filter(|e| *e >= 1).ok_or_else(|| {
            InspectError::new("the sample has no `epoch` (an integer from 1)", at)
        })?;
    let outcome = if !v.error.is_null() {
        Outcome::Error
    } else {
        match v.scores.as_ref().and_then(|s| s.get(scorer)) {
            None | Some(Value::Null) => Outcome::NotScored,
            Some(score) => {
                let value = score.get("value").unwrap_or(&Value::Null);
                Outcome::Scored(to_unit(value).ok_or_else(|| {
                    InspectError::new(
                        format!(
                            "the `{scorer}` value {value} is not a score in [0, 1] (a number, a boolean, `C`, `P`, `I`, `N`, yes/no, true/false)"
                        ),
                        at,
                    )
                })?)
            }
        }
    };
    Ok(Sample { id, epoch, outcome })
}

/// Inspect's `value_to_float`, refusing what it would read as 0 by default.
fn to_unit(v: &Value) -> Option<f64> {
    let x = match v {
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => match s.as_str() {
            "C" => 1.0,
            "P" => 0.5,
            "I" | "N" => 0.0,
            other => match other.to_lowercase().as_str() {
                "yes" | "true" => 1.0,
                "no" | "false" => 0.0,
                num if !num.is_empty() && num.chars().all(|c| c.is_ascii_digit() || c == '.') => {
                    num.parse().ok()?
                }
                _ => return None,
            },
        },
        Value::Null | Value::Array(_) | Value::Object(_) => return None,
    };
    (x.is_finite() && (0.0..=1.0).contains(&x)).then_some(x)
}

/// The verdict's input from one log: one [`Observed`] per sample id over its epochs.
pub fn observed(log: &Log) -> Vec<Observed> {
    let mut by_id: BTreeMap<&str, Vec<Outcome>> = BTreeMap::new();
    for ((id, _), s) in &log.samples {
        by_id.entry(id.as_str()).or_default().push(s.outcome);
    }
    by_id
        .into_iter()
        .map(|(id, outcomes)| {
            let trials = u32::try_from(outcomes.len()).unwrap_or(u32::MAX);
            let infra_errors = u32::try_from(
                outcomes
                    .iter()
                    .filter(|o| matches!(o, Outcome::Error))
                    .count(),
            )
            .unwrap_or(u32::MAX);
            let mut sum = 0.0;
            let mut passes = 0u32;
            let mut scored = 0u32;
            let mut unscored = false;
            for o in &outcomes {
                match o {
                    Outcome::Scored(x) => {
                        sum += x;
                        scored += 1;
                        passes += u32::from(*x >= 1.0);
                    }
                    Outcome::NotScored => unscored = true,
                    Outcome::Error => {}
                }
            }
            Observed {
                scenario: id.to_owned(),
                trials,
                infra_errors,
                scored: (!unscored && scored > 0).then(|| ScoredTrials {
                    score: sum / f64::from(scored),
                    passes,
                }),
            }
        })
        .collect()
}

/// Compares two logs (baseline, candidate), paired by sample id and epoch.
pub fn compare(
    baseline: &Path,
    candidate: &Path,
    scorer: Option<&str>,
    seed: u64,
) -> Result<verdict::Comparison, InspectError> {
    let base = read_log(baseline, scorer)?;
    // The candidate is read with the baseline's scorer, so both sides score the same thing.
    let cand = read_log(candidate, Some(&base.scorer))?;
    let at = format!("{} and {}", baseline.display(), candidate.display());
    if let Some((id, epoch)) = base.samples.keys().find(|k| !cand.samples.contains_key(*k)) {
        return Err(InspectError::new(
            format!("sample `{id}` epoch {epoch} is in the baseline only"),
            at,
        ));
    }
    if let Some((id, epoch)) = cand.samples.keys().find(|k| !base.samples.contains_key(*k)) {
        return Err(InspectError::new(
            format!("sample `{id}` epoch {epoch} is in the candidate only"),
            at,
        ));
    }
    let name = |p: &Path| p.display().to_string();
    let input = verdict::Input::new(
        name(baseline),
        observed(&base),
        name(candidate),
        observed(&cand),
        seed,
    );
    verdict::compare(&input).map_err(|e| InspectError::new(e.to_string(), at))
}
