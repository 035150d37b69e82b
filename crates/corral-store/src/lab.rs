//! The lab's entities (issue 14, migrations 0005 and 0007): scenarios, runs, per-step outputs
//! and comparisons, every one owned by a tenant, in SQLite and PostgreSQL alike.
//!
//! The types here are plain serde data; `corral-lab` builds on them and the store never imports
//! the lab. Every method takes the caller's tenant and every statement says `WHERE tenant = $1`:
//! a row of another tenant is never returned, changed or referred to (the keys start with the
//! tenant and every reference carries it, so the schema itself refuses a run of another
//! tenant's scenario or an output of another tenant's run).
//!
//! - **Scenario**: mutable. [`Store::update_scenario`] replaces name, description, steps and
//!   mocks and bumps `version` (optionally only if the version is still the one read: a lost
//!   update is `lab.version_conflict`). The stored JSON is clamped to [`MAX_SCENARIO_BYTES`]
//!   (`lab.scenario_too_large`, saying the size and the limit). A scenario **with runs cannot be
//!   deleted** (`lab.scenario_in_use`): runs, their outputs and the comparisons built on them
//!   are the evidence of a decision, and a run names the scenario and the version it ran. A
//!   foreign key backs this against a delete racing a new run.
//! - **Run**: `running` until it finishes once. [`Store::finish_run`] and [`Store::cancel_run`]
//!   are one compare-and-set statement, `UPDATE ... WHERE status = 'running'`: of two finishes,
//!   concurrent or not, exactly one changes the row and the other is `lab.run_finished`. A run
//!   starts with `isolated` and `destroyed` false and only its finish, from the backend's
//!   attestation, may set them, so a run that never finished never claims either. A pass or
//!   fail verdict needs a scorer suite on the run (checked in the same statement): no scorer
//!   is "executed, not scored", never a pass. A scored run also records its trials that passed,
//!   pass@k and pass^k (k = its `trials`; migration 0007); a run not scored has none of them.
//! - **Output**: append-only (no update or delete exists), one row per (run, trial, step); a
//!   batch is one transaction that first checks the run is still `running` (PostgreSQL: the run
//!   row is read `FOR SHARE`, so a concurrent finish waits; SQLite: `BEGIN IMMEDIATE`), so a
//!   finished run's outputs never change. A duplicate is `lab.duplicate_output` and the whole
//!   batch is rolled back. Each row is clamped to [`MAX_OUTPUT_BYTES`]: the text comes from the
//!   agent under test, which is hostile.
//! - **Comparison**: append-only; the statistics result is kept whole as JSON (`details`) beside
//!   the columns listings show. The runs it cites must be finished runs of the same tenant.
//!
//! Encoding: free text (name, description, input, output, error message) is a JSON string
//! literal, so any text round-trips on both backends (PostgreSQL's `TEXT` refuses a NUL, and an
//! agent's output may hold one); a NUL in a short identifier is refused. Counters are `BIGINT`;
//! booleans `INTEGER` 0/1; a `f64` is `TEXT` in Rust's shortest round-trip form (exact both
//! ways; a non-finite number is refused, JSON cannot carry it); a `u64` seed is `TEXT` in
//! decimal. Ids are UUID v7 strings. Listings are newest first, paged by a keyset cursor
//! ([`PageCursor`]).

use std::fmt;
use std::str::FromStr;

use corral_policy::codes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Pool, Store, StoreError};

/// The most a scenario may take as stored: the JSON of its name, description, steps and mocks,
/// in bytes (1 MiB, the request limit of the scenario API).
pub const MAX_SCENARIO_BYTES: usize = 1024 * 1024;
/// The most one output row may take: its input and output text, in bytes (1 MiB).
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// The largest page a listing returns, whatever the caller asks.
pub const MAX_PAGE: u32 = 500;

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

/// What a caller gives to create or update a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioDraft {
    /// A short name.
    pub name: String,
    /// What the scenario checks.
    pub description: String,
    /// The steps, `[{input, expected?}]` (the lab validates their shape).
    pub steps: Value,
    /// The mocks, `[{resource, response}]` or `[{op, args, response | error}]`.
    pub mocks: Value,
}

impl ScenarioDraft {
    /// The bytes the scenario takes as stored: the JSON of its name, description, steps and
    /// mocks (escapes included).
    pub fn stored_bytes(&self) -> usize {
        json_text(&self.name).len()
            + json_text(&self.description).len()
            + json_text(&self.steps).len()
            + json_text(&self.mocks).len()
    }
}

/// A stored scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Its id (UUID v7).
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// A short name.
    pub name: String,
    /// What the scenario checks.
    pub description: String,
    /// The steps (JSON).
    pub steps: Value,
    /// The mocks (JSON).
    pub mocks: Value,
    /// When it was created (ms since the epoch).
    pub created_ms: i64,
    /// When it was last changed.
    pub updated_ms: i64,
    /// 1 when created, +1 at each update.
    pub version: i64,
    /// The identity (`Principal::identity()`) of the recording's principal, when a replay made
    /// it of a recorded task: only that principal or an admin reads it. `None`: a scenario of
    /// the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A scenario in a listing: everything but its steps and mocks (up to 1 MiB each).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioSummary {
    /// Its id.
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// A short name.
    pub name: String,
    /// What the scenario checks.
    pub description: String,
    /// When it was created.
    pub created_ms: i64,
    /// When it was last changed.
    pub updated_ms: i64,
    /// Its version.
    pub version: i64,
    /// The identity of the recording's principal, for a scenario a replay made; `None`: the
    /// tenant's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Where a run is in its life: `running`, then one terminal state, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Started, not finished.
    Running,
    /// Every step was executed (agent failures included).
    Completed,
    /// The run could not be carried out (infrastructure, isolation unavailable, ...).
    Failed,
    /// Stopped by a person or a deadline before it finished.
    Cancelled,
}

impl RunStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// The status stored as `s`.
    pub fn parse(s: &str) -> Option<RunStatus> {
        match s {
            "running" => Some(RunStatus::Running),
            "completed" => Some(RunStatus::Completed),
            "failed" => Some(RunStatus::Failed),
            "cancelled" => Some(RunStatus::Cancelled),
            _ => None,
        }
    }

    /// Whether the run has finished.
    pub fn is_terminal(self) -> bool {
        self != RunStatus::Running
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's pass verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunVerdict {
    /// The scorer suite passed the run.
    Passed,
    /// The scorer suite failed the run.
    Failed,
    /// Executed, not scored: no scorer was attached (or the run did not complete). Never a pass.
    NotScored,
}

impl RunVerdict {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunVerdict::Passed => "passed",
            RunVerdict::Failed => "failed",
            RunVerdict::NotScored => "not_scored",
        }
    }

    /// The verdict stored as `s`.
    pub fn parse(s: &str) -> Option<RunVerdict> {
        match s {
            "passed" => Some(RunVerdict::Passed),
            "failed" => Some(RunVerdict::Failed),
            "not_scored" => Some(RunVerdict::NotScored),
            _ => None,
        }
    }
}

/// An infrastructure error that ended or marred a run (server, audit, store, isolation), apart
/// from the agent's own failures (refusals, mock misses, wrong answers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// Its stable code, e.g. `store.unavailable`.
    pub code: String,
    /// What happened.
    pub message: String,
}

/// What an isolation backend applied to a program a run started (an external program's step,
/// a command scorer's scoring).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RunAttestation {
    /// The backend (`linux`).
    pub backend: String,
    /// Whether the program ran isolated.
    pub isolated: bool,
    /// Whether its sandbox was destroyed and the removal checked.
    pub destroyed: bool,
    /// The primitives applied (`userns`, `netns:corral-link`, `landlock:abi6`, ...).
    pub primitives: Vec<String>,
}

/// A step that asked for something the scenario does not mock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MockMiss {
    /// The step, from 1.
    pub step: u32,
    /// The op it called (`scenario.resource` for the identity agent).
    pub op: String,
    /// The hash of the call's canonical arguments.
    pub args_hash: String,
}

/// What a caller gives to start a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewRun {
    /// The scenario it runs (of the same tenant).
    pub scenario_id: String,
    /// The runner that executes it, e.g. `lab`.
    pub runner: String,
    /// The backend the steps run in, e.g. `inproc-mock` or `linux`.
    pub backend: String,
    /// The purpose its calls are metered under, e.g. `simulation`.
    pub purpose: String,
    /// The agent under test.
    pub variant: String,
    /// The seed.
    pub seed: u64,
    /// Trials per step, when more than one is asked for.
    pub trials: Option<u32>,
    /// The scorer suite attached, if any.
    pub scorer_suite: Option<String>,
    /// Who started it.
    pub principal: String,
    /// Its identity (`Principal::identity()`): who reads a replay run's outputs.
    pub identity: String,
}

/// How a run ended: what [`Store::finish_run`] records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// `completed` or `failed` (`cancelled` is [`Store::cancel_run`]'s, but accepted here too).
    pub status: RunStatus,
    /// The backend's attestation: the steps ran isolated.
    pub isolated: bool,
    /// The backend's attestation: the run's ephemeral state was destroyed.
    pub destroyed: bool,
    /// Steps executed (over all trials).
    pub steps_total: u64,
    /// Steps that answered.
    pub steps_ok: u64,
    /// Steps that ended in an agent failure (refusal, mock miss, error).
    pub steps_error: u64,
    /// Infrastructure errors met.
    pub infra_errors: u64,
    /// The suite's score, when scored.
    pub score: Option<f64>,
    /// The pass verdict.
    pub verdict: RunVerdict,
    /// A scored run's trials that passed and its pass@k and pass^k; `None` when not scored.
    pub passes: Option<TrialPasses>,
    /// The infrastructure error that failed the run, if any.
    pub error: Option<RunError>,
    /// The steps that missed the mocks.
    pub mock_misses: Vec<MockMiss>,
    /// What the isolation backend applied to each program the run started (distinct ones);
    /// empty for an in-process run.
    pub attestations: Vec<RunAttestation>,
}

/// A scored run's trial counts and estimates, with k = the run's `trials` (pass@k: at least one
/// of k trials passes; pass^k: all k pass; with k = n they are 1 or 0). A run that was not
/// scored has none of them: "executed, not scored" is never a pass.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrialPasses {
    /// Trials that passed (every step scored and passed, and no infrastructure error).
    pub trials_passed: u32,
    /// pass@k, in [0, 1].
    pub pass_at_k: f64,
    /// pass^k, in [0, 1], at most `pass_at_k`.
    pub pass_hat_k: f64,
}

/// A stored run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Its id (UUID v7; also the run id of its calls in the audit).
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// The scenario it ran.
    pub scenario_id: String,
    /// The scenario's version when the run started.
    pub scenario_version: i64,
    /// Where it is in its life.
    pub status: RunStatus,
    /// The runner that executed it.
    pub runner: String,
    /// The backend the steps ran in.
    pub backend: String,
    /// Attested at finish: the steps ran isolated.
    pub isolated: bool,
    /// Attested at finish: the ephemeral state was destroyed.
    pub destroyed: bool,
    /// Steps executed.
    pub steps_total: u64,
    /// Steps that answered.
    pub steps_ok: u64,
    /// Steps that ended in an agent failure.
    pub steps_error: u64,
    /// Infrastructure errors met.
    pub infra_errors: u64,
    /// The purpose its calls were metered under.
    pub purpose: String,
    /// The agent under test.
    pub variant: String,
    /// The seed.
    pub seed: u64,
    /// Trials per step, when more than one was asked for.
    pub trials: Option<u32>,
    /// The scorer suite attached, if any.
    pub scorer_suite: Option<String>,
    /// The suite's score, when scored.
    pub score: Option<f64>,
    /// The pass verdict (`not_scored` until finished, and without a scorer).
    pub verdict: RunVerdict,
    /// Of a scored run: the trials that passed. `None` when not scored.
    pub trials_passed: Option<u32>,
    /// Of a scored run: pass@k, k = `trials`. `None` when not scored.
    pub pass_at_k: Option<f64>,
    /// Of a scored run: pass^k, k = `trials`. `None` when not scored.
    pub pass_hat_k: Option<f64>,
    /// The infrastructure error that failed it, if any.
    pub error: Option<RunError>,
    /// The steps that missed the mocks.
    pub mock_misses: Vec<MockMiss>,
    /// What the isolation backend applied to each program the run started (distinct ones);
    /// empty for an in-process run.
    pub attestations: Vec<RunAttestation>,
    /// Who started it.
    pub principal: String,
    /// Its identity (`Principal::identity()`); `None` for a run made before identities were
    /// kept (its replay outputs are then an admin's to read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// When it started.
    pub started_ms: i64,
    /// When it finished.
    pub finished_ms: Option<i64>,
}

/// One step's answer to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewOutput {
    /// The step, from 1.
    pub step: u32,
    /// The trial, from 1.
    pub trial: u32,
    /// The step's input.
    pub input: String,
    /// What the agent answered (a mock-miss marker included).
    pub output: String,
    /// Whether the step answered (false: a refusal, a miss, an error).
    pub ok: bool,
    /// The code of the step's failure, if it failed.
    pub error_code: Option<String>,
    /// The scorer's score, when scored.
    pub score: Option<f64>,
    /// The scorer's pass, when scored.
    pub pass: Option<bool>,
}

/// A stored output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// The run it belongs to.
    pub run_id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// The step, from 1.
    pub step: u32,
    /// The trial, from 1.
    pub trial: u32,
    /// The step's input.
    pub input: String,
    /// What the agent answered.
    pub output: String,
    /// Whether the step answered.
    pub ok: bool,
    /// The code of the step's failure.
    pub error_code: Option<String>,
    /// The scorer's score.
    pub score: Option<f64>,
    /// The scorer's pass.
    pub pass: Option<bool>,
    /// When it was recorded.
    pub created_ms: i64,
}

/// One side of a comparison: a variant and the runs that stand for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantRuns {
    /// The variant's name.
    pub variant: String,
    /// Its runs (finished runs of the same tenant; empty for a comparison of imported logs).
    pub run_ids: Vec<String>,
}

/// A comparison's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComparisonVerdict {
    /// The interval lies above 0.
    Improved,
    /// The interval lies below 0.
    Regressed,
    /// The interval lies inside +/- margin.
    Unchanged,
    /// None of the above, or forced (see `forced_by`).
    Inconclusive,
}

impl ComparisonVerdict {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ComparisonVerdict::Improved => "improved",
            ComparisonVerdict::Regressed => "regressed",
            ComparisonVerdict::Unchanged => "unchanged",
            ComparisonVerdict::Inconclusive => "inconclusive",
        }
    }

    /// The verdict stored as `s`.
    pub fn parse(s: &str) -> Option<ComparisonVerdict> {
        match s {
            "improved" => Some(ComparisonVerdict::Improved),
            "regressed" => Some(ComparisonVerdict::Regressed),
            "unchanged" => Some(ComparisonVerdict::Unchanged),
            "inconclusive" => Some(ComparisonVerdict::Inconclusive),
            _ => None,
        }
    }
}

/// A closed interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The lower bound.
    pub lower: f64,
    /// The upper bound.
    pub upper: f64,
}

/// The per-variant Wilson 95% intervals of the pass rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WilsonIntervals {
    /// The baseline's.
    pub baseline: Interval,
    /// The candidate's.
    pub candidate: Interval,
}

/// What a caller gives to record a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewComparison {
    /// The baseline.
    pub baseline: VariantRuns,
    /// The candidate.
    pub candidate: VariantRuns,
    /// The scenario set compared (scenario ids, or sample ids of imported logs).
    pub scenarios: Vec<String>,
    /// The verdict.
    pub verdict: ComparisonVerdict,
    /// The mean paired difference, candidate - baseline.
    pub delta: f64,
    /// The interval's lower bound.
    pub lower: f64,
    /// The interval's upper bound.
    pub upper: f64,
    /// The margin of `unchanged`.
    pub margin: f64,
    /// The bootstrap's seed.
    pub seed: u64,
    /// The bootstrap's resamples.
    pub resamples: u32,
    /// The rule that forced `inconclusive`, if one did.
    pub forced_by: Option<String>,
    /// The exact McNemar p-value, for single-trial pass/fail data.
    pub mcnemar_p: Option<f64>,
    /// The per-variant Wilson intervals, for pass/fail data.
    pub wilson: Option<WilsonIntervals>,
    /// The whole statistics result.
    pub details: Value,
    /// Who recorded it.
    pub recorded_by: String,
    /// Whether it is a deploy comparison (an admin's decision).
    pub deploy: bool,
}

/// A stored comparison: its id, tenant and time around the fields it was recorded with (one
/// list of fields, [`NewComparison`], flattened: the JSON is one flat object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Its id (UUID v7).
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// What was recorded: variants, runs, verdict, statistics, who and whether for a deploy.
    #[serde(flatten)]
    pub record: NewComparison,
    /// When it was recorded.
    pub created_ms: i64,
}

/// Where a page of a listing starts: after the row with this time and id (newest first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageCursor {
    /// The last row's creation (or start) time.
    pub created_ms: i64,
    /// The last row's id.
    pub id: String,
}

/// The text form is `<created_ms>.<id>`, for `?cursor=` and `--cursor`.
impl fmt::Display for PageCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.created_ms, self.id)
    }
}

impl FromStr for PageCursor {
    type Err = LabStoreError;

    fn from_str(s: &str) -> Result<Self, LabStoreError> {
        let bad = || LabStoreError::BadCursor {
            reason: format!(
                "the page cursor {s:?} is not of the form `<ms>.<id>`; pass the `next` cursor of \
                 the previous page unchanged, or none for the first page"
            ),
        };
        let (ms, id) = s.split_once('.').ok_or_else(bad)?;
        // As the listings' `next` writes it (and `/openapi.json` states): 1-15 digits, then an
        // id of 1-64 letters, digits, `_` and `-`.
        let digits = !ms.is_empty() && ms.len() <= 15 && ms.bytes().all(|b| b.is_ascii_digit());
        let id_ok = !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !digits || !id_ok {
            return Err(bad());
        }
        let created_ms = ms.parse().map_err(|_| bad())?;
        Ok(PageCursor {
            created_ms,
            id: id.to_owned(),
        })
    }
}

/// Which page of a listing to read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Page {
    /// Rows per page (0 or over [`MAX_PAGE`] reads [`MAX_PAGE`]).
    pub limit: u32,
    /// Start after this row; `None` from the newest.
    pub after: Option<PageCursor>,
}

impl Page {
    /// The first page of `limit` rows.
    pub fn first(limit: u32) -> Page {
        Page { limit, after: None }
    }

    pub(crate) fn rows(&self) -> u32 {
        if self.limit == 0 || self.limit > MAX_PAGE {
            MAX_PAGE
        } else {
            self.limit
        }
    }
}

/// A page of a listing, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paged<T> {
    /// The rows.
    pub items: Vec<T>,
    /// The cursor of the next page; `None` on the last page.
    pub next: Option<PageCursor>,
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a lab store operation was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabStoreError {
    /// The store failed (an infrastructure error).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No row of that kind has the id in the caller's tenant.
    #[error(
        "no lab {what} {id:?} in tenant {tenant:?}: it does not exist or belongs to another \
         tenant; list yours to find its id"
    )]
    NotFound {
        /// `scenario`, `run` or `comparison`.
        what: &'static str,
        /// The id asked for.
        id: String,
        /// The caller's tenant.
        tenant: String,
    },
    /// The scenario is over [`MAX_SCENARIO_BYTES`].
    #[error(
        "the scenario is {bytes} bytes as stored (its name, description, steps and mocks as \
         JSON); the limit is {limit} bytes (1 MiB): split it into smaller scenarios or shorten \
         its mocked responses"
    )]
    ScenarioTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// An output row is over [`MAX_OUTPUT_BYTES`].
    #[error(
        "the output of run {run_id:?} trial {trial} step {step} is {bytes} bytes (input and \
         output); the limit is {limit} bytes (1 MiB): nothing of the batch was recorded; record \
         the step as an error, or a shortened answer"
    )]
    OutputTooLarge {
        /// The run.
        run_id: String,
        /// The trial.
        trial: u32,
        /// The step.
        step: u32,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The scenario has runs.
    #[error(
        "scenario {id:?} has {runs} run(s), so it cannot be deleted (runs and comparisons refer \
         to it): keep it, or create a new scenario and stop using this one"
    )]
    ScenarioInUse {
        /// The scenario.
        id: String,
        /// How many runs it has.
        runs: u64,
    },
    /// The scenario's version is not the one the update was based on.
    #[error(
        "scenario {id:?} is at version {actual}, not {expected}: someone changed it since you \
         read it; read it again, reapply your change and update with version {actual}"
    )]
    VersionConflict {
        /// The scenario.
        id: String,
        /// The version the update expected.
        expected: i64,
        /// The version stored.
        actual: i64,
    },
    /// The run already finished.
    #[error(
        "run {id:?} has already finished ({status}); a run finishes once and then takes no more \
         outputs: start a new run"
    )]
    RunFinished {
        /// The run.
        id: String,
        /// Its terminal status.
        status: RunStatus,
    },
    /// An output of this (run, trial, step) is already recorded.
    #[error(
        "run {run_id:?} already has an output for trial {trial} step {step}; outputs are \
         append-only: nothing of the batch was recorded; record each (trial, step) once"
    )]
    DuplicateOutput {
        /// The run.
        run_id: String,
        /// The trial.
        trial: u32,
        /// The step.
        step: u32,
    },
    /// A page cursor the caller sent is not one a page gave (a request error, `args.invalid`).
    #[error("{reason}")]
    BadCursor {
        /// What is wrong, and how to fix it.
        reason: String,
    },
    /// The record is inconsistent (a bug in the caller).
    #[error("inconsistent lab record: {reason}")]
    Invalid {
        /// What is wrong, where, and how to fix it.
        reason: String,
    },
}

impl LabStoreError {
    /// The stable code (`lab.*`, or the store's `store.*`).
    pub fn code(&self) -> &'static str {
        match self {
            LabStoreError::Store(e) => e.code(),
            LabStoreError::NotFound { .. } => codes::LAB_NOT_FOUND,
            LabStoreError::ScenarioTooLarge { .. } => codes::LAB_SCENARIO_TOO_LARGE,
            LabStoreError::OutputTooLarge { .. } => codes::LAB_OUTPUT_TOO_LARGE,
            LabStoreError::ScenarioInUse { .. } => codes::LAB_SCENARIO_IN_USE,
            LabStoreError::VersionConflict { .. } => codes::LAB_VERSION_CONFLICT,
            LabStoreError::RunFinished { .. } => codes::LAB_RUN_FINISHED,
            LabStoreError::DuplicateOutput { .. } => codes::LAB_DUPLICATE_OUTPUT,
            LabStoreError::BadCursor { .. } => codes::ARGS_INVALID,
            LabStoreError::Invalid { .. } => codes::LAB_INVALID_RECORD,
        }
    }

    /// Whether it is an infrastructure failure (the store), rather than a refusal.
    pub fn is_infrastructure(&self) -> bool {
        matches!(self, LabStoreError::Store(_))
    }
}

pub(crate) fn invalid(reason: impl Into<String>) -> LabStoreError {
    LabStoreError::Invalid {
        reason: reason.into(),
    }
}

/// A stored value that cannot be read back (a row written by something else, or damaged).
fn corrupt(what: &str, id: &str, detail: impl fmt::Display) -> LabStoreError {
    LabStoreError::Store(StoreError::QueryFailed {
        what: "read a lab row",
        reason: format!("stored {what} {id:?} cannot be read: {detail}"),
    })
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

pub(crate) fn json_text<T: Serialize + ?Sized>(v: &T) -> String {
    // Serializing plain data (strings, numbers, maps with string keys) cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

pub(crate) fn from_json<T: for<'de> Deserialize<'de>>(
    what: &str,
    id: &str,
    text: &str,
) -> Result<T, LabStoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(what, id, e))
}

/// A finite `f64` as text that parses back to the same bits.
fn f64_text(what: &str, x: f64) -> Result<String, LabStoreError> {
    if x.is_finite() {
        Ok(format!("{x:?}"))
    } else {
        Err(invalid(format!(
            "{what} is {x}, not a finite number; JSON cannot carry it: compute it from data \
             that has at least one value"
        )))
    }
}

fn opt_f64_text(what: &str, x: Option<f64>) -> Result<Option<String>, LabStoreError> {
    x.map(|x| f64_text(what, x)).transpose()
}

fn f64_of(what: &str, id: &str, text: &str) -> Result<f64, LabStoreError> {
    text.parse().map_err(|e| corrupt(what, id, e))
}

fn opt_f64_of(what: &str, id: &str, text: Option<&str>) -> Result<Option<f64>, LabStoreError> {
    text.map(|t| f64_of(what, id, t)).transpose()
}

fn u64_of(what: &str, id: &str, text: &str) -> Result<u64, LabStoreError> {
    text.parse().map_err(|e| corrupt(what, id, e))
}

fn count(what: &str, n: u64) -> Result<i64, LabStoreError> {
    i64::try_from(n).map_err(|_| invalid(format!("{what} is {n}, over the largest storable")))
}

fn count_of(what: &str, id: &str, n: i64) -> Result<u64, LabStoreError> {
    u64::try_from(n).map_err(|e| corrupt(what, id, e))
}

fn small_of(what: &str, id: &str, n: i64) -> Result<u32, LabStoreError> {
    u32::try_from(n).map_err(|e| corrupt(what, id, e))
}

fn flag(b: bool) -> i32 {
    i32::from(b)
}

/// A scenario's free text as stored: JSON of its name, description, steps and mocks.
fn scenario_texts(d: &ScenarioDraft) -> [String; 4] {
    [
        json_text(&d.name),
        json_text(&d.description),
        json_text(&d.steps),
        json_text(&d.mocks),
    ]
}

/// Refuses a NUL in a short identifier (PostgreSQL's `TEXT` cannot hold one, SQLite's can: the
/// backends must agree). Free text is stored as JSON, which escapes it.
pub(crate) fn check_plain(fields: &[(&str, &str)]) -> Result<(), LabStoreError> {
    match fields.iter().find(|(_, v)| v.contains('\0')) {
        Some((name, _)) => Err(invalid(format!(
            "{name} contains a NUL character; identifiers are plain text: remove it"
        ))),
        None => Ok(()),
    }
}

pub(crate) fn uuid7() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The page, and the cursor of the next one, from `rows + 1` fetched rows.
pub(crate) fn paged<T>(mut items: Vec<T>, page: &Page, key: impl Fn(&T) -> PageCursor) -> Paged<T> {
    let rows = page.rows() as usize;
    let next = if items.len() > rows {
        items.truncate(rows);
        items.last().map(key)
    } else {
        None
    };
    Paged { items, next }
}

/// A row kind listed newest first: where a page ending at it stands.
pub(crate) trait Keyed {
    fn key(&self) -> PageCursor;
}

/// The page of `rows + 1` fetched rows, each read with `into`.
pub(crate) fn page_of<R, T: Keyed, E>(
    rows: Vec<R>,
    page: &Page,
    into: impl FnMut(R) -> Result<T, E>,
) -> Result<Paged<T>, E> {
    let items = rows.into_iter().map(into).collect::<Result<Vec<_>, E>>()?;
    Ok(paged(items, page, T::key))
}

macro_rules! keyed {
    ($($t:ty => $ms:ident),* $(,)?) => {$(
        impl $crate::lab::Keyed for $t {
            fn key(&self) -> $crate::lab::PageCursor {
                $crate::lab::PageCursor { created_ms: self.$ms, id: self.id.clone() }
            }
        }
    )*};
}
pub(crate) use keyed;

keyed!(ScenarioSummary => created_ms, Run => started_ms, Comparison => created_ms);

/// A driver error of a lab statement: its kind when the caller turns it into a refusal.
enum DbFailure {
    Unique,
    ForeignKey,
    Other(StoreError),
}

impl Store {
    fn lab_failure(&self, what: &'static str, e: sqlx::Error) -> DbFailure {
        match e.as_database_error() {
            Some(db) if db.is_unique_violation() => DbFailure::Unique,
            Some(db) if db.is_foreign_key_violation() => DbFailure::ForeignKey,
            _ => DbFailure::Other(self.redactor.query(what, e)),
        }
    }

    pub(crate) fn lab_err(&self, what: &'static str) -> impl Fn(sqlx::Error) -> LabStoreError + '_ {
        move |e| LabStoreError::Store(self.redactor.query(what, e))
    }
}

// ---------------------------------------------------------------------------------------------
// SQL
// ---------------------------------------------------------------------------------------------

macro_rules! scenario_columns {
    () => {
        "tenant, id, name, description, steps, mocks, created_ms, updated_ms, version, owner"
    };
}

const INSERT_SCENARIO: &str = concat!(
    "INSERT INTO lab_scenarios (",
    scenario_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $7, 1, $8)"
);
const GET_SCENARIO: &str = concat!(
    "SELECT ",
    scenario_columns!(),
    " FROM lab_scenarios WHERE tenant = $1 AND id = $2"
);
const FIND_SCENARIO: &str = concat!(
    "SELECT ",
    scenario_columns!(),
    " FROM lab_scenarios WHERE tenant = $1 AND name = $2 AND owner = $3 \
     ORDER BY created_ms DESC, id DESC LIMIT 1"
);
const UPDATE_SCENARIO: &str = concat!(
    "UPDATE lab_scenarios SET name = $3, description = $4, steps = $5, mocks = $6, \
     updated_ms = $7, version = version + 1 \
     WHERE tenant = $1 AND id = $2 AND ($8 IS NULL OR version = $8) RETURNING ",
    scenario_columns!()
);
/// `$5`: the identity whose owned scenarios are listed beside the tenant's (NULL: every one).
const LIST_SCENARIOS: &str = "SELECT tenant, id, name, description, created_ms, updated_ms, \
     version, owner FROM lab_scenarios WHERE tenant = $1 \
     AND ($2 IS NULL OR created_ms < $2 OR (created_ms = $2 AND id < $3)) \
     AND ($5 IS NULL OR owner IS NULL OR owner = $5) \
     ORDER BY created_ms DESC, id DESC LIMIT $4";
const DELETE_SCENARIO: &str = "DELETE FROM lab_scenarios WHERE tenant = $1 AND id = $2 \
     AND NOT EXISTS (SELECT 1 FROM lab_runs WHERE tenant = $1 AND scenario_id = $2)";
const SCENARIO_EXISTS: &str = "SELECT COUNT(*) FROM lab_scenarios WHERE tenant = $1 AND id = $2";
const RUNS_OF_SCENARIO: &str =
    "SELECT COUNT(*) FROM lab_runs WHERE tenant = $1 AND scenario_id = $2";

macro_rules! run_columns {
    () => {
        "tenant, id, scenario_id, scenario_version, status, runner, backend, isolated, \
         destroyed, steps_total, steps_ok, steps_error, infra_errors, purpose, variant, seed, \
         trials, scorer_suite, score, verdict, error_code, error_message, mock_misses, principal, \
         started_ms, finished_ms, trials_passed, pass_at_k, pass_hat_k, attestations, identity"
    };
}

/// A run of an existing scenario of the tenant, at its current version; no row when there is
/// none. Columns left out are NULL.
const INSERT_RUN: &str = "INSERT INTO lab_runs (tenant, id, scenario_id, scenario_version, \
     status, runner, backend, isolated, destroyed, steps_total, steps_ok, steps_error, \
     infra_errors, purpose, variant, seed, trials, scorer_suite, verdict, mock_misses, principal, \
     started_ms, identity, worker) \
     SELECT $1, $2, $3, s.version, 'running', $4, $5, 0, 0, 0, 0, 0, 0, $6, $7, $8, $9, $10, \
     'not_scored', '[]', $11, $12, $13, $14 FROM lab_scenarios s WHERE s.tenant = $1 AND s.id = $3 \
     RETURNING scenario_version";
const GET_RUN: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM lab_runs WHERE tenant = $1 AND id = $2"
);
/// The compare-and-set of a run's one finish; a pass or fail needs a scorer suite, and the
/// trials that passed are at most the run's trials.
const FINISH_RUN: &str = concat!(
    "UPDATE lab_runs SET worker = NULL, status = $3, isolated = $4, destroyed = $5, steps_total = $6, \
     steps_ok = $7, steps_error = $8, infra_errors = $9, score = $10, verdict = $11, \
     error_code = $12, error_message = $13, mock_misses = $14, finished_ms = $15, \
     trials_passed = $16, pass_at_k = $17, pass_hat_k = $18, attestations = $19 \
     WHERE tenant = $1 AND id = $2 AND status = 'running' \
     AND (scorer_suite IS NOT NULL OR $11 = 'not_scored') \
     AND ($16 IS NULL OR $16 <= COALESCE(trials, 1)) RETURNING ",
    run_columns!()
);
const CANCEL_RUN: &str = concat!(
    "UPDATE lab_runs SET status = 'cancelled', worker = NULL, finished_ms = $3 \
     WHERE tenant = $1 AND id = $2 AND status = 'running' RETURNING ",
    run_columns!()
);
const LIST_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM lab_runs WHERE tenant = $1 AND ($2 IS NULL OR scenario_id = $2) \
     AND ($3 IS NULL OR started_ms < $3 OR (started_ms = $3 AND id < $4)) \
     ORDER BY started_ms DESC, id DESC LIMIT $5"
);
const RUN_STATUS: &str = "SELECT status FROM lab_runs WHERE tenant = $1 AND id = $2";
const RUN_STATUS_LOCKED: &str =
    "SELECT status FROM lab_runs WHERE tenant = $1 AND id = $2 FOR SHARE";

macro_rules! output_columns {
    () => {
        "tenant, run_id, trial, step, input, output, ok, error_code, score, pass, created_ms"
    };
}

const INSERT_OUTPUT: &str = concat!(
    "INSERT INTO lab_outputs (",
    output_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
);
const LIST_OUTPUTS: &str = concat!(
    "SELECT ",
    output_columns!(),
    " FROM lab_outputs WHERE tenant = $1 AND run_id = $2 ORDER BY trial, step"
);

macro_rules! comparison_columns {
    () => {
        "tenant, id, baseline_variant, baseline_runs, candidate_variant, candidate_runs, \
         scenarios, verdict, delta, lower_bound, upper_bound, margin, seed, resamples, \
         forced_by, mcnemar_p, wilson, details, recorded_by, deploy, created_ms"
    };
}

const INSERT_COMPARISON: &str = concat!(
    "INSERT INTO lab_comparisons (",
    comparison_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
     $18, $19, $20, $21)"
);
const GET_COMPARISON: &str = concat!(
    "SELECT ",
    comparison_columns!(),
    " FROM lab_comparisons WHERE tenant = $1 AND id = $2"
);
const LIST_COMPARISONS: &str = concat!(
    "SELECT ",
    comparison_columns!(),
    " FROM lab_comparisons WHERE tenant = $1 \
     AND ($2 IS NULL OR created_ms < $2 OR (created_ms = $2 AND id < $3)) \
     ORDER BY created_ms DESC, id DESC LIMIT $4"
);

// ---------------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------------

#[derive(sqlx::FromRow)]
struct ScenarioRow {
    tenant: String,
    id: String,
    name: String,
    description: String,
    steps: String,
    mocks: String,
    created_ms: i64,
    updated_ms: i64,
    version: i64,
    owner: Option<String>,
}

impl ScenarioRow {
    fn into_scenario(self) -> Result<Scenario, LabStoreError> {
        Ok(Scenario {
            name: from_json("scenario name", &self.id, &self.name)?,
            description: from_json("scenario description", &self.id, &self.description)?,
            steps: from_json("scenario steps", &self.id, &self.steps)?,
            mocks: from_json("scenario mocks", &self.id, &self.mocks)?,
            id: self.id,
            tenant: self.tenant,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            version: self.version,
            owner: self.owner,
        })
    }
}

#[derive(sqlx::FromRow)]
struct ScenarioSummaryRow {
    tenant: String,
    id: String,
    name: String,
    description: String,
    created_ms: i64,
    updated_ms: i64,
    version: i64,
    owner: Option<String>,
}

#[derive(sqlx::FromRow)]
struct RunRow {
    tenant: String,
    id: String,
    scenario_id: String,
    scenario_version: i64,
    status: String,
    runner: String,
    backend: String,
    isolated: i32,
    destroyed: i32,
    steps_total: i64,
    steps_ok: i64,
    steps_error: i64,
    infra_errors: i64,
    purpose: String,
    variant: String,
    seed: String,
    trials: Option<i64>,
    scorer_suite: Option<String>,
    score: Option<String>,
    verdict: String,
    error_code: Option<String>,
    error_message: Option<String>,
    mock_misses: String,
    principal: String,
    started_ms: i64,
    finished_ms: Option<i64>,
    trials_passed: Option<i64>,
    pass_at_k: Option<String>,
    pass_hat_k: Option<String>,
    attestations: String,
    identity: Option<String>,
}

impl RunRow {
    fn into_run(self) -> Result<Run, LabStoreError> {
        let id = self.id.as_str();
        let status = RunStatus::parse(&self.status)
            .ok_or_else(|| corrupt("run", id, format!("unknown status {:?}", self.status)))?;
        let verdict = RunVerdict::parse(&self.verdict)
            .ok_or_else(|| corrupt("run", id, format!("unknown verdict {:?}", self.verdict)))?;
        let error = match (self.error_code, self.error_message) {
            (Some(code), message) => Some(RunError {
                code,
                message: message
                    .map(|m| from_json("run error_message", id, &m))
                    .transpose()?
                    .unwrap_or_default(),
            }),
            (None, _) => None,
        };
        Ok(Run {
            scenario_version: self.scenario_version,
            status,
            isolated: self.isolated == 1,
            destroyed: self.destroyed == 1,
            steps_total: count_of("run steps_total", id, self.steps_total)?,
            steps_ok: count_of("run steps_ok", id, self.steps_ok)?,
            steps_error: count_of("run steps_error", id, self.steps_error)?,
            infra_errors: count_of("run infra_errors", id, self.infra_errors)?,
            seed: u64_of("run seed", id, &self.seed)?,
            trials: self
                .trials
                .map(|t| small_of("run trials", id, t))
                .transpose()?,
            score: opt_f64_of("run score", id, self.score.as_deref())?,
            verdict,
            trials_passed: self
                .trials_passed
                .map(|t| small_of("run trials_passed", id, t))
                .transpose()?,
            pass_at_k: opt_f64_of("run pass_at_k", id, self.pass_at_k.as_deref())?,
            pass_hat_k: opt_f64_of("run pass_hat_k", id, self.pass_hat_k.as_deref())?,
            error,
            mock_misses: from_json("run mock_misses", id, &self.mock_misses)?,
            attestations: from_json("run attestations", id, &self.attestations)?,
            tenant: self.tenant,
            scenario_id: self.scenario_id,
            runner: self.runner,
            backend: self.backend,
            purpose: self.purpose,
            variant: self.variant,
            scorer_suite: self.scorer_suite,
            principal: self.principal,
            identity: self.identity,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            id: self.id,
        })
    }
}

#[derive(sqlx::FromRow)]
struct OutputRow {
    tenant: String,
    run_id: String,
    trial: i64,
    step: i64,
    input: String,
    output: String,
    ok: i32,
    error_code: Option<String>,
    score: Option<String>,
    pass: Option<i32>,
    created_ms: i64,
}

impl OutputRow {
    fn into_output(self) -> Result<Output, LabStoreError> {
        let id = self.run_id.as_str();
        Ok(Output {
            step: small_of("output step", id, self.step)?,
            trial: small_of("output trial", id, self.trial)?,
            ok: self.ok == 1,
            score: opt_f64_of("output score", id, self.score.as_deref())?,
            pass: self.pass.map(|p| p == 1),
            input: from_json("output input", id, &self.input)?,
            output: from_json("output output", id, &self.output)?,
            run_id: self.run_id,
            tenant: self.tenant,
            error_code: self.error_code,
            created_ms: self.created_ms,
        })
    }
}

#[derive(sqlx::FromRow)]
struct ComparisonRow {
    tenant: String,
    id: String,
    baseline_variant: String,
    baseline_runs: String,
    candidate_variant: String,
    candidate_runs: String,
    scenarios: String,
    verdict: String,
    delta: String,
    lower_bound: String,
    upper_bound: String,
    margin: String,
    seed: String,
    resamples: i64,
    forced_by: Option<String>,
    mcnemar_p: Option<String>,
    wilson: Option<String>,
    details: String,
    recorded_by: String,
    deploy: i32,
    created_ms: i64,
}

impl ComparisonRow {
    fn into_comparison(self) -> Result<Comparison, LabStoreError> {
        let id = self.id.as_str();
        let verdict = ComparisonVerdict::parse(&self.verdict).ok_or_else(|| {
            corrupt(
                "comparison",
                id,
                format!("unknown verdict {:?}", self.verdict),
            )
        })?;
        Ok(Comparison {
            record: NewComparison {
                baseline: VariantRuns {
                    variant: self.baseline_variant,
                    run_ids: from_json("comparison baseline_runs", id, &self.baseline_runs)?,
                },
                candidate: VariantRuns {
                    variant: self.candidate_variant,
                    run_ids: from_json("comparison candidate_runs", id, &self.candidate_runs)?,
                },
                scenarios: from_json("comparison scenarios", id, &self.scenarios)?,
                verdict,
                delta: f64_of("comparison delta", id, &self.delta)?,
                lower: f64_of("comparison lower_bound", id, &self.lower_bound)?,
                upper: f64_of("comparison upper_bound", id, &self.upper_bound)?,
                margin: f64_of("comparison margin", id, &self.margin)?,
                seed: u64_of("comparison seed", id, &self.seed)?,
                resamples: small_of("comparison resamples", id, self.resamples)?,
                mcnemar_p: opt_f64_of("comparison mcnemar_p", id, self.mcnemar_p.as_deref())?,
                wilson: self
                    .wilson
                    .as_deref()
                    .map(|w| from_json("comparison wilson", id, w))
                    .transpose()?,
                details: from_json("comparison details", id, &self.details)?,
                forced_by: self.forced_by,
                recorded_by: self.recorded_by,
                deploy: self.deploy == 1,
            },
            created_ms: self.created_ms,
            tenant: self.tenant,
            id: self.id,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

fn check_scenario(draft: &ScenarioDraft) -> Result<(), LabStoreError> {
    let bytes = draft.stored_bytes();
    if bytes > MAX_SCENARIO_BYTES {
        return Err(LabStoreError::ScenarioTooLarge {
            bytes,
            limit: MAX_SCENARIO_BYTES,
        });
    }
    Ok(())
}

fn check_result(id: &str, r: &RunResult) -> Result<(), LabStoreError> {
    if r.status == RunStatus::Running {
        return Err(invalid(format!(
            "finishing run {id:?} with status `running`; finish it `completed`, `failed` or \
             `cancelled`"
        )));
    }
    if r.verdict == RunVerdict::Passed && r.status != RunStatus::Completed {
        return Err(invalid(format!(
            "run {id:?} would pass while `{}`; only a completed run can pass: record `not_scored`",
            r.status
        )));
    }
    match (r.verdict, r.score) {
        (RunVerdict::NotScored, Some(_)) => {
            return Err(invalid(format!(
                "run {id:?} has a score but the verdict `not_scored`; record `passed` or `failed` \
                 with a score, or neither"
            )));
        }
        (RunVerdict::Passed | RunVerdict::Failed, None) => {
            return Err(invalid(format!(
                "run {id:?} has the verdict `{}` without a score; record the suite's score",
                r.verdict.as_str()
            )));
        }
        _ => {}
    }
    match (r.verdict, &r.passes) {
        (RunVerdict::NotScored, Some(_)) => {
            return Err(invalid(format!(
                "run {id:?} has trial passes but the verdict `not_scored`; a run that was not \
                 scored has no trials passed, pass@k or pass^k: record none"
            )));
        }
        (_, Some(p)) => check_passes(id, p)?,
        _ => {}
    }
    if r.steps_ok.saturating_add(r.steps_error) > r.steps_total {
        return Err(invalid(format!(
            "run {id:?} has {} ok and {} failed steps of {} in total; ok + error cannot exceed the \
             total",
            r.steps_ok, r.steps_error, r.steps_total
        )));
    }
    if let Some(e) = &r.error {
        check_plain(&[("the run's error code", &e.code)])?;
    }
    if let Some(m) = r.mock_misses.iter().find(|m| m.step == 0) {
        return Err(invalid(format!(
            "run {id:?} has a mock miss of op {:?} at step 0; steps count from 1",
            m.op
        )));
    }
    Ok(())
}

/// pass@k and pass^k are probabilities, and all k trials passing implies one did.
fn check_passes(id: &str, p: &TrialPasses) -> Result<(), LabStoreError> {
    for (what, x) in [("pass@k", p.pass_at_k), ("pass^k", p.pass_hat_k)] {
        if !(x.is_finite() && (0.0..=1.0).contains(&x)) {
            return Err(invalid(format!(
                "run {id:?} has {what} {x}, outside [0, 1]; record a probability"
            )));
        }
    }
    if p.pass_hat_k > p.pass_at_k {
        return Err(invalid(format!(
            "run {id:?} has pass^k {} above pass@k {}; all k trials passing implies one did",
            p.pass_hat_k, p.pass_at_k
        )));
    }
    Ok(())
}

fn check_output(run_id: &str, o: &NewOutput) -> Result<(), LabStoreError> {
    if o.step == 0 || o.trial == 0 {
        return Err(invalid(format!(
            "an output of run {run_id:?} has trial {} step {}; both count from 1",
            o.trial, o.step
        )));
    }
    if o.ok && o.error_code.is_some() {
        return Err(invalid(format!(
            "output trial {} step {} of run {run_id:?} is ok but has an error code; drop the code \
             or record it as not ok",
            o.trial, o.step
        )));
    }
    check_plain(&[(
        "an output's error code",
        o.error_code.as_deref().unwrap_or(""),
    )])?;
    let bytes = o.input.len() + o.output.len();
    if bytes > MAX_OUTPUT_BYTES {
        return Err(LabStoreError::OutputTooLarge {
            run_id: run_id.to_owned(),
            trial: o.trial,
            step: o.step,
            bytes,
            limit: MAX_OUTPUT_BYTES,
        });
    }
    Ok(())
}

fn check_comparison(c: &NewComparison) -> Result<(), LabStoreError> {
    check_plain(&[
        ("the baseline variant", &c.baseline.variant),
        ("the candidate variant", &c.candidate.variant),
        (
            "the rule that forced the verdict",
            c.forced_by.as_deref().unwrap_or(""),
        ),
        ("who recorded the comparison", &c.recorded_by),
    ])?;
    if c.lower > c.upper {
        return Err(invalid(format!(
            "the comparison's interval is [{}, {}]: its lower bound is above its upper bound",
            c.lower, c.upper
        )));
    }
    if let Some(p) = c.mcnemar_p.filter(|p| !(0.0..=1.0).contains(p)) {
        return Err(invalid(format!(
            "the comparison's McNemar p-value is {p}, outside [0, 1]"
        )));
    }
    if c.verdict != ComparisonVerdict::Inconclusive && c.forced_by.is_some() {
        return Err(invalid(format!(
            "the comparison is `{}` yet forced by {:?}; a forced verdict is `inconclusive`",
            c.verdict.as_str(),
            c.forced_by
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Store methods
// ---------------------------------------------------------------------------------------------

/// Appends a batch of outputs inside an open transaction `$tx`, after reading the run's status
/// with `$status` (which locks the run row where the begin did not).
macro_rules! append_in {
    ($store:expr, $tx:expr, $status:expr, $tenant:expr, $run_id:expr, $outputs:expr, $now:expr) => {{
        let what = "append lab outputs";
        let q = $store.lab_err(what);
        let mut tx = $tx.map_err(&q)?;
        let status: Option<String> = sqlx::query_scalar($status)
            .bind($tenant)
            .bind($run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(&q)?;
        match status.as_deref().map(RunStatus::parse) {
            None => {
                return Err(LabStoreError::NotFound {
                    what: "run",
                    id: $run_id.to_owned(),
                    tenant: $tenant.to_owned(),
                });
            }
            Some(Some(RunStatus::Running)) => {}
            Some(Some(status)) => {
                return Err(LabStoreError::RunFinished {
                    id: $run_id.to_owned(),
                    status,
                });
            }
            Some(None) => return Err(corrupt("run", $run_id, "unknown status")),
        }
        for o in $outputs {
            let score = opt_f64_text("an output's score", o.score)?;
            let inserted = sqlx::query(INSERT_OUTPUT)
                .bind($tenant)
                .bind($run_id)
                .bind(i64::from(o.trial))
                .bind(i64::from(o.step))
                .bind(json_text(&o.input))
                .bind(json_text(&o.output))
                .bind(flag(o.ok))
                .bind(o.error_code.as_deref())
                .bind(score)
                .bind(o.pass.map(flag))
                .bind($now)
                .execute(&mut *tx)
                .await;
            if let Err(e) = inserted {
                return Err(match $store.lab_failure(what, e) {
                    DbFailure::Unique => LabStoreError::DuplicateOutput {
                        run_id: $run_id.to_owned(),
                        trial: o.trial,
                        step: o.step,
                    },
                    DbFailure::ForeignKey => LabStoreError::NotFound {
                        what: "run",
                        id: $run_id.to_owned(),
                        tenant: $tenant.to_owned(),
                    },
                    DbFailure::Other(e) => LabStoreError::Store(e),
                });
            }
        }
        tx.commit().await.map_err(&q)?;
        Ok(())
    }};
}

impl Store {
    // --- scenarios ---

    /// Creates a scenario of `tenant` (version 1).
    pub async fn create_scenario(
        &self,
        tenant: &str,
        draft: &ScenarioDraft,
        now_ms: i64,
    ) -> Result<Scenario, LabStoreError> {
        self.create_owned_scenario(tenant, draft, None, now_ms)
            .await
    }

    /// Creates a scenario of `tenant` (version 1) owned by the identity `owner` (a scenario a
    /// replay makes of a recorded task: only `owner` or an admin reads it), or the tenant's.
    pub async fn create_owned_scenario(
        &self,
        tenant: &str,
        draft: &ScenarioDraft,
        owner: Option<&str>,
        now_ms: i64,
    ) -> Result<Scenario, LabStoreError> {
        check_scenario(draft)?;
        check_plain(&[("the tenant", tenant), ("the owner", owner.unwrap_or(""))])?;
        let id = uuid7();
        let q = self.lab_err("create a lab scenario");
        let [name, description, steps, mocks] = scenario_texts(draft);
        on_pool!(&self.pool, p => sqlx::query(INSERT_SCENARIO)
            .bind(tenant)
            .bind(id.as_str())
            .bind(name.as_str())
            .bind(description.as_str())
            .bind(steps.as_str())
            .bind(mocks.as_str())
            .bind(now_ms)
            .bind(owner)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(q)?);
        Ok(Scenario {
            id,
            tenant: tenant.to_owned(),
            name: draft.name.clone(),
            description: draft.description.clone(),
            steps: draft.steps.clone(),
            mocks: draft.mocks.clone(),
            created_ms: now_ms,
            updated_ms: now_ms,
            version: 1,
            owner: owner.map(str::to_owned),
        })
    }

    /// Replaces a scenario's name, description, steps and mocks, and bumps its version. With
    /// `if_version`, only when the stored version is that one (`lab.version_conflict` if not).
    pub async fn update_scenario(
        &self,
        tenant: &str,
        id: &str,
        draft: &ScenarioDraft,
        if_version: Option<i64>,
        now_ms: i64,
    ) -> Result<Scenario, LabStoreError> {
        check_scenario(draft)?;
        let q = self.lab_err("update a lab scenario");
        let [name, description, steps, mocks] = scenario_texts(draft);
        let row: Option<ScenarioRow> = on_pool!(&self.pool, p => sqlx::query_as(UPDATE_SCENARIO)
            .bind(tenant)
            .bind(id)
            .bind(name.as_str())
            .bind(description.as_str())
            .bind(steps.as_str())
            .bind(mocks.as_str())
            .bind(now_ms)
            .bind(if_version)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        match row {
            Some(row) => row.into_scenario(),
            None => match (self.get_scenario(tenant, id).await?, if_version) {
                (Some(s), Some(expected)) => Err(LabStoreError::VersionConflict {
                    id: id.to_owned(),
                    expected,
                    actual: s.version,
                }),
                _ => Err(not_found("scenario", tenant, id)),
            },
        }
    }

    /// A scenario of `tenant`; `None` if `tenant` has no scenario `id`.
    pub async fn get_scenario(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Scenario>, LabStoreError> {
        let q = self.lab_err("read a lab scenario");
        let row: Option<ScenarioRow> = on_pool!(&self.pool, p => sqlx::query_as(GET_SCENARIO)
            .bind(tenant)
            .bind(id)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        row.map(ScenarioRow::into_scenario).transpose()
    }

    /// The newest scenario of `tenant` named `name` that `owner` owns, if any.
    pub async fn find_scenario(
        &self,
        tenant: &str,
        name: &str,
        owner: &str,
    ) -> Result<Option<Scenario>, LabStoreError> {
        let q = self.lab_err("find a lab scenario");
        // Names are stored as JSON text, as every scenario text is.
        let name = json_text(name);
        let row: Option<ScenarioRow> = on_pool!(&self.pool, p => sqlx::query_as(FIND_SCENARIO)
            .bind(tenant)
            .bind(name.as_str())
            .bind(owner)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        row.map(ScenarioRow::into_scenario).transpose()
    }

    /// A page of `tenant`'s scenarios, newest first, without their steps and mocks: with
    /// `visible_to`, the tenant's and those that identity owns; without, every one (an admin).
    pub async fn list_scenarios(
        &self,
        tenant: &str,
        visible_to: Option<&str>,
        page: &Page,
    ) -> Result<Paged<ScenarioSummary>, LabStoreError> {
        let q = self.lab_err("list lab scenarios");
        let (after_ms, after_id) = cursor_binds(page);
        let rows: Vec<ScenarioSummaryRow> = on_pool!(&self.pool, p => sqlx::query_as(LIST_SCENARIOS)
            .bind(tenant)
            .bind(after_ms)
            .bind(after_id)
            .bind(i64::from(page.rows()) + 1)
            .bind(visible_to)
            .fetch_all(p)
            .await
            .map_err(q)?);
        page_of(rows, page, |r| {
            Ok::<_, LabStoreError>(ScenarioSummary {
                name: from_json("scenario name", &r.id, &r.name)?,
                description: from_json("scenario description", &r.id, &r.description)?,
                id: r.id,
                tenant: r.tenant,
                created_ms: r.created_ms,
                updated_ms: r.updated_ms,
                version: r.version,
                owner: r.owner,
            })
        })
    }

    /// Deletes a scenario of `tenant` that has no runs (`lab.scenario_in_use` if it has).
    pub async fn delete_scenario(&self, tenant: &str, id: &str) -> Result<(), LabStoreError> {
        let what = "delete a lab scenario";
        let q = self.lab_err(what);
        let deleted = on_pool!(&self.pool, p => sqlx::query(DELETE_SCENARIO)
            .bind(tenant)
            .bind(id)
            .execute(p)
            .await
            .map(|done| done.rows_affected()));
        match deleted {
            Ok(rows) if rows > 0 => return Ok(()),
            Ok(_) => {}
            Err(e) => match self.lab_failure(what, e) {
                // A run was started between the check and the delete: the foreign key refused.
                DbFailure::ForeignKey | DbFailure::Unique => {}
                DbFailure::Other(e) => return Err(e.into()),
            },
        }
        let (exists, runs): (i64, i64) = on_pool!(&self.pool, p => {
            let exists: i64 = sqlx::query_scalar(SCENARIO_EXISTS)
                .bind(tenant).bind(id).fetch_one(p).await.map_err(&q)?;
            let runs: i64 = sqlx::query_scalar(RUNS_OF_SCENARIO)
                .bind(tenant).bind(id).fetch_one(p).await.map_err(&q)?;
            (exists, runs)
        });
        if exists == 0 {
            Err(not_found("scenario", tenant, id))
        } else {
            Err(LabStoreError::ScenarioInUse {
                id: id.to_owned(),
                runs: u64::try_from(runs).unwrap_or(0),
            })
        }
    }

    // --- runs ---

    /// Starts a run of a scenario of `tenant` (at its current version): `running`, not isolated,
    /// not destroyed, no counts, `not_scored`.
    pub async fn create_run(
        &self,
        tenant: &str,
        new: &NewRun,
        now_ms: i64,
    ) -> Result<Run, LabStoreError> {
        let what = "start a lab run";
        check_plain(&[
            ("the tenant", tenant),
            ("the scenario id", &new.scenario_id),
            ("the runner", &new.runner),
            ("the backend", &new.backend),
            ("the purpose", &new.purpose),
            ("the variant", &new.variant),
            (
                "the scorer suite",
                new.scorer_suite.as_deref().unwrap_or(""),
            ),
            ("the principal", &new.principal),
            ("the identity", &new.identity),
        ])?;
        if new.trials == Some(0) {
            return Err(invalid(
                "a run of 0 trials; ask for at least 1, or leave `trials` unset for one",
            ));
        }
        let id = uuid7();
        let trials = new.trials.map(i64::from);
        let inserted = on_pool!(&self.pool, p => sqlx::query_scalar::<_, i64>(INSERT_RUN)
            .bind(tenant)
            .bind(id.as_str())
            .bind(new.scenario_id.as_str())
            .bind(new.runner.as_str())
            .bind(new.backend.as_str())
            .bind(new.purpose.as_str())
            .bind(new.variant.as_str())
            .bind(new.seed.to_string())
            .bind(trials)
            .bind(new.scorer_suite.as_deref())
            .bind(new.principal.as_str())
            .bind(now_ms)
            .bind(new.identity.as_str())
            .bind(self.worker())
            .fetch_optional(p)
            .await);
        let scenario_version = match inserted {
            Ok(Some(v)) => v,
            Ok(None) => return Err(not_found("scenario", tenant, &new.scenario_id)),
            Err(e) => {
                return Err(match self.lab_failure(what, e) {
                    // The scenario was deleted between the read and the insert.
                    DbFailure::ForeignKey => not_found("scenario", tenant, &new.scenario_id),
                    DbFailure::Unique => invalid(format!("run id {id:?} is already taken")),
                    DbFailure::Other(e) => e.into(),
                });
            }
        };
        Ok(Run {
            id,
            tenant: tenant.to_owned(),
            scenario_id: new.scenario_id.clone(),
            scenario_version,
            status: RunStatus::Running,
            runner: new.runner.clone(),
            backend: new.backend.clone(),
            isolated: false,
            destroyed: false,
            steps_total: 0,
            steps_ok: 0,
            steps_error: 0,
            infra_errors: 0,
            purpose: new.purpose.clone(),
            variant: new.variant.clone(),
            seed: new.seed,
            trials: new.trials,
            scorer_suite: new.scorer_suite.clone(),
            score: None,
            verdict: RunVerdict::NotScored,
            trials_passed: None,
            pass_at_k: None,
            pass_hat_k: None,
            error: None,
            mock_misses: Vec::new(),
            attestations: Vec::new(),
            principal: new.principal.clone(),
            identity: Some(new.identity.clone()),
            started_ms: now_ms,
            finished_ms: None,
        })
    }

    /// Finishes a running run of `tenant`, once: a second finish (or a finish after a cancel)
    /// is `lab.run_finished` and changes nothing.
    pub async fn finish_run(
        &self,
        tenant: &str,
        id: &str,
        result: &RunResult,
        now_ms: i64,
    ) -> Result<Run, LabStoreError> {
        check_result(id, result)?;
        let q = self.lab_err("finish a lab run");
        let score = opt_f64_text("the run's score", result.score)?;
        let misses = json_text(&result.mock_misses);
        let attestations = json_text(&result.attestations);
        let passes = result.passes.as_ref();
        let pass_at_k = opt_f64_text("the run's pass@k", passes.map(|p| p.pass_at_k))?;
        let pass_hat_k = opt_f64_text("the run's pass^k", passes.map(|p| p.pass_hat_k))?;
        let row: Option<RunRow> = on_pool!(&self.pool, p => sqlx::query_as(FINISH_RUN)
            .bind(tenant)
            .bind(id)
            .bind(result.status.as_str())
            .bind(flag(result.isolated))
            .bind(flag(result.destroyed))
            .bind(count("steps_total", result.steps_total)?)
            .bind(count("steps_ok", result.steps_ok)?)
            .bind(count("steps_error", result.steps_error)?)
            .bind(count("infra_errors", result.infra_errors)?)
            .bind(score.as_deref())
            .bind(result.verdict.as_str())
            .bind(result.error.as_ref().map(|e| e.code.as_str()))
            .bind(result.error.as_ref().map(|e| json_text(&e.message)))
            .bind(misses.as_str())
            .bind(now_ms)
            .bind(passes.map(|p| i64::from(p.trials_passed)))
            .bind(pass_at_k.as_deref())
            .bind(pass_hat_k.as_deref())
            .bind(attestations.as_str())
            .fetch_optional(p)
            .await
            .map_err(q)?);
        match row {
            Some(row) => row.into_run(),
            None => Err(match self.why_not_running(tenant, id).await? {
                Some(e) => e,
                None => self.why_not_finished(tenant, id, result).await?,
            }),
        }
    }

    /// Why a running run's finish was refused by the statement's own checks: a verdict without a
    /// scorer suite, or more trials passed than the run has.
    async fn why_not_finished(
        &self,
        tenant: &str,
        id: &str,
        result: &RunResult,
    ) -> Result<LabStoreError, LabStoreError> {
        let run = self.get_run(tenant, id).await?;
        Ok(match (run, &result.passes) {
            (Some(run), Some(p)) if run.scorer_suite.is_some() => invalid(format!(
                "run {id:?} has {} trial(s), so {} cannot have passed: record at most {} passed",
                run.trials.unwrap_or(1),
                p.trials_passed,
                run.trials.unwrap_or(1)
            )),
            _ => invalid(format!(
                "run {id:?} has no scorer suite, so it cannot be `{}`: record `not_scored` \
                 (executed, not scored)",
                result.verdict.as_str()
            )),
        })
    }

    /// Cancels a running run of `tenant`, once (`lab.run_finished` if it has finished).
    pub async fn cancel_run(
        &self,
        tenant: &str,
        id: &str,
        now_ms: i64,
    ) -> Result<Run, LabStoreError> {
        let q = self.lab_err("cancel a lab run");
        let row: Option<RunRow> = on_pool!(&self.pool, p => sqlx::query_as(CANCEL_RUN)
            .bind(tenant)
            .bind(id)
            .bind(now_ms)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        match row {
            Some(row) => row.into_run(),
            None => Err(self
                .why_not_running(tenant, id)
                .await?
                .unwrap_or_else(|| corrupt("run", id, "running, yet it could not be cancelled"))),
        }
    }

    /// Why a run cannot be finished: it is not there, or it has finished; `None` if it runs.
    async fn why_not_running(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<LabStoreError>, LabStoreError> {
        Ok(match self.get_run(tenant, id).await? {
            None => Some(not_found("run", tenant, id)),
            Some(run) if run.status.is_terminal() => Some(LabStoreError::RunFinished {
                id: id.to_owned(),
                status: run.status,
            }),
            Some(_) => None,
        })
    }

    /// A run of `tenant`; `None` if `tenant` has no run `id`.
    pub async fn get_run(&self, tenant: &str, id: &str) -> Result<Option<Run>, LabStoreError> {
        let q = self.lab_err("read a lab run");
        let row: Option<RunRow> = on_pool!(&self.pool, p => sqlx::query_as(GET_RUN)
            .bind(tenant)
            .bind(id)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        row.map(RunRow::into_run).transpose()
    }

    /// A page of `tenant`'s runs (of one scenario, or all), newest first.
    pub async fn list_runs(
        &self,
        tenant: &str,
        scenario_id: Option<&str>,
        page: &Page,
    ) -> Result<Paged<Run>, LabStoreError> {
        let q = self.lab_err("list lab runs");
        let (after_ms, after_id) = cursor_binds(page);
        let rows: Vec<RunRow> = on_pool!(&self.pool, p => sqlx::query_as(LIST_RUNS)
            .bind(tenant)
            .bind(scenario_id)
            .bind(after_ms)
            .bind(after_id)
            .bind(i64::from(page.rows()) + 1)
            .fetch_all(p)
            .await
            .map_err(q)?);
        page_of(rows, page, RunRow::into_run)
    }

    // --- outputs ---

    /// Appends a batch of outputs to a running run of `tenant`, in one transaction: all or
    /// nothing. A finished run takes none (`lab.run_finished`); a (trial, step) already recorded
    /// is `lab.duplicate_output`.
    pub async fn append_outputs(
        &self,
        tenant: &str,
        run_id: &str,
        outputs: &[NewOutput],
        now_ms: i64,
    ) -> Result<(), LabStoreError> {
        for o in outputs {
            check_output(run_id, o)?;
            opt_f64_text("an output's score", o.score)?;
        }
        match &self.pool {
            Pool::Postgres(p) => append_in!(
                self,
                p.begin().await,
                RUN_STATUS_LOCKED,
                tenant,
                run_id,
                outputs,
                now_ms
            ),
            Pool::Sqlite(p) => append_in!(
                self,
                p.begin_with("BEGIN IMMEDIATE").await,
                RUN_STATUS,
                tenant,
                run_id,
                outputs,
                now_ms
            ),
        }
    }

    /// The outputs of a run of `tenant`, by trial then step (`lab.not_found` if `tenant` has no
    /// such run).
    pub async fn list_outputs(
        &self,
        tenant: &str,
        run_id: &str,
    ) -> Result<Vec<Output>, LabStoreError> {
        let q = self.lab_err("list lab outputs");
        let rows: Vec<OutputRow> = on_pool!(&self.pool, p => sqlx::query_as(LIST_OUTPUTS)
            .bind(tenant)
            .bind(run_id)
            .fetch_all(p)
            .await
            .map_err(&q)?);
        if rows.is_empty() {
            let status: Option<String> = on_pool!(&self.pool, p => sqlx::query_scalar(RUN_STATUS)
                .bind(tenant)
                .bind(run_id)
                .fetch_optional(p)
                .await
                .map_err(&q)?);
            if status.is_none() {
                return Err(not_found("run", tenant, run_id));
            }
        }
        rows.into_iter().map(OutputRow::into_output).collect()
    }

    // --- comparisons ---

    /// Records a comparison of `tenant`. The runs it cites must be finished runs of `tenant`.
    pub async fn append_comparison(
        &self,
        tenant: &str,
        new: &NewComparison,
        now_ms: i64,
    ) -> Result<Comparison, LabStoreError> {
        check_comparison(new)?;
        check_plain(&[("the tenant", tenant)])?;
        let delta = f64_text("the comparison's delta", new.delta)?;
        let lower = f64_text("the comparison's lower bound", new.lower)?;
        let upper = f64_text("the comparison's upper bound", new.upper)?;
        let margin = f64_text("the comparison's margin", new.margin)?;
        let mcnemar_p = opt_f64_text("the comparison's McNemar p-value", new.mcnemar_p)?;
        if let Some(w) = &new.wilson {
            for (side, i) in [("baseline", w.baseline), ("candidate", w.candidate)] {
                f64_text(&format!("the {side}'s Wilson lower bound"), i.lower)?;
                f64_text(&format!("the {side}'s Wilson upper bound"), i.upper)?;
            }
        }
        for run_id in new.baseline.run_ids.iter().chain(&new.candidate.run_ids) {
            match self.get_run(tenant, run_id).await? {
                None => return Err(not_found("run", tenant, run_id)),
                Some(run) if !run.status.is_terminal() => {
                    return Err(invalid(format!(
                        "the comparison cites run {run_id:?}, which is still running; compare \
                         finished runs"
                    )));
                }
                Some(_) => {}
            }
        }
        let id = uuid7();
        let q = self.lab_err("record a lab comparison");
        let wilson = new.wilson.as_ref().map(json_text);
        on_pool!(&self.pool, p => sqlx::query(INSERT_COMPARISON)
            .bind(tenant)
            .bind(id.as_str())
            .bind(new.baseline.variant.as_str())
            .bind(json_text(&new.baseline.run_ids))
            .bind(new.candidate.variant.as_str())
            .bind(json_text(&new.candidate.run_ids))
            .bind(json_text(&new.scenarios))
            .bind(new.verdict.as_str())
            .bind(delta.as_str())
            .bind(lower.as_str())
            .bind(upper.as_str())
            .bind(margin.as_str())
            .bind(new.seed.to_string())
            .bind(i64::from(new.resamples))
            .bind(new.forced_by.as_deref())
            .bind(mcnemar_p.as_deref())
            .bind(wilson.as_deref())
            .bind(json_text(&new.details))
            .bind(new.recorded_by.as_str())
            .bind(flag(new.deploy))
            .bind(now_ms)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(q)?);
        Ok(Comparison {
            id,
            tenant: tenant.to_owned(),
            record: new.clone(),
            created_ms: now_ms,
        })
    }

    /// A comparison of `tenant`; `None` if `tenant` has no comparison `id`.
    pub async fn get_comparison(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Comparison>, LabStoreError> {
        let q = self.lab_err("read a lab comparison");
        let row: Option<ComparisonRow> = on_pool!(&self.pool, p => sqlx::query_as(GET_COMPARISON)
            .bind(tenant)
            .bind(id)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        row.map(ComparisonRow::into_comparison).transpose()
    }

    /// A page of `tenant`'s comparisons, newest first.
    pub async fn list_comparisons(
        &self,
        tenant: &str,
        page: &Page,
    ) -> Result<Paged<Comparison>, LabStoreError> {
        let q = self.lab_err("list lab comparisons");
        let (after_ms, after_id) = cursor_binds(page);
        let rows: Vec<ComparisonRow> = on_pool!(&self.pool, p => sqlx::query_as(LIST_COMPARISONS)
            .bind(tenant)
            .bind(after_ms)
            .bind(after_id)
            .bind(i64::from(page.rows()) + 1)
            .fetch_all(p)
            .await
            .map_err(q)?);
        page_of(rows, page, ComparisonRow::into_comparison)
    }
}

pub(crate) fn not_found(what: &'static str, tenant: &str, id: &str) -> LabStoreError {
    LabStoreError::NotFound {
        what,
        id: id.to_owned(),
        tenant: tenant.to_owned(),
    }
}

pub(crate) fn cursor_binds(page: &Page) -> (Option<i64>, Option<&str>) {
    match &page.after {
        Some(c) => (Some(c.created_ms), Some(c.id.as_str())),
        None => (None, None),
    }
}
