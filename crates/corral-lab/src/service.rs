//! The lab's use cases, shared by every surface (HTTP routes, `corral sandbox --local`, MCP
//! tools): [`LabService`] over the store's lab tables, the runner, the synthetic generator, the
//! scorers and the verdict.
//!
//! Every method takes the caller and the request id and, in this order: checks the lab is on
//! (`lab.disabled` if not, data kept), checks the caller's role (`rbac.denied`: viewer reads,
//! operator generates, creates, updates, runs and compares, admin records deploy comparisons;
//! the anonymous caller of an open-mode server has no role, so it can use no lab action), does
//! the work in the caller's tenant (the principal's, else the gateway's default: another
//! tenant's id is `lab.not_found`, never a 403), and writes ONE audit event through the
//! gateway's sinks: op `sandbox.<action>`, outcome, principal, tenant, and never a value (no
//! input, output or mock; `sandbox.generate`'s event holds only the sample count, in `detail`).
//!
//! A run is executed before the method returns: the run record is created (`running`), the
//! scenario runs in a world of the current base deployment (a reload takes effect for the next
//! run), the outputs are scored when a scorer is attached and appended, and the run is finished
//! with the attestation's `isolated`/`destroyed`, the counts, the misses, the infrastructure
//! errors and, when it was scored, its trials passed with pass@k and pass^k (k = its trials). An infrastructure failure on the way finishes the run `failed` (it
//! never stays `running` because of the lab).
//!
//! A comparison executes its runs on up to `workers` tokio tasks at once, all on the lab of the
//! deployment current when it starts, and reads them back in request order: the runs, seeds
//! and verdict are the same whatever `workers` is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use corral_guard::audit::{AuditEvent, Outcome};
use corral_guard::recording::RecordingKey;
use corral_guard::runs::RunPurpose;
use corral_guard::{Caller, Deployment, Gateway, Refusal, now_ms};
use corral_policy::{Role, codes};
use corral_store::Store;
use corral_store::lab::{
    self as store_lab, ComparisonVerdict, LabStoreError, NewComparison, NewOutput, NewRun, Page,
    PageCursor, Paged, RunResult, RunStatus, RunVerdict, ScenarioDraft, TrialPasses, VariantRuns,
    WilsonIntervals,
};
use corral_store::recording::{Recording, RecordingError, RecordingEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::pool;

mod playback;
use crate::program::{ProgramLinks, Programs};
use crate::runner::{RunReport, run_scenario};
use crate::scenario::Scenario;
use crate::score::{RunScore, Scored, StepScore, TrialStats, score_step};
use crate::synthetic::{self, MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS};
use crate::variant::{self, Resolved, RunScorer};
use crate::verdict::{self, Forced, Observed, ScoredTrials, Verdict};
use crate::world::Lab;
pub use playback::{Divergence, InputBody, ReplayBody, ReplayReport, ReplayStatus};

mod metering;
mod tournament;
pub use tournament::{
    JUDGE_CONCURRENCY, JudgeFailure, MAX_TOURNAMENT_RUNS, NotJudged, RankedRun, TopTwo, Tournament,
    TournamentBody,
};

/// The runner every run of this service records.
pub const RUNNER: &str = "inproc";
/// The most trials a run or comparison may ask for.
pub const MAX_TRIALS: u32 = 100;
/// The most scenarios one comparison may run.
pub const MAX_COMPARE_SCENARIOS: usize = 200;
/// The longest variant label, in characters.
pub const MAX_VARIANT_CHARS: usize = 200;
/// The most step executions one request may cause (steps x trials, summed over a comparison's
/// scenarios and both sides): the scenario's size bounds its steps only loosely (tens of
/// thousands of small steps fit in it), and every execution is an output held in memory and a
/// stored row, so the product is bounded, not each factor alone.
pub const MAX_STEP_EXECUTIONS: usize = 10_000;
/// The most runs one comparison executes at once (its `workers`).
pub const MAX_COMPARE_WORKERS: u32 = 8;

/// The workers of a comparison that names none: the machine's CPUs, at most
/// [`MAX_COMPARE_WORKERS`] (1 when the count cannot be read).
pub fn default_workers() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| u32::try_from(n.get()).unwrap_or(MAX_COMPARE_WORKERS))
        .clamp(1, MAX_COMPARE_WORKERS)
}

/// Why a lab action was refused or failed: a catalog code (its status is the catalog's) and a
/// message saying what is wrong, where, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LabError {
    /// The catalog code.
    pub code: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl LabError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(codes::ARGS_INVALID, message)
    }
}

impl From<LabStoreError> for LabError {
    fn from(e: LabStoreError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<Refusal> for LabError {
    fn from(r: Refusal) -> Self {
        Self::new(r.code, r.message)
    }
}

/// Reads a request body (JSON) as `T`; the message names the field and how to fix it. A number
/// with a zero fraction (`75.0`) is the integer it equals, as JSON Schema's `integer` says.
pub fn parse<T: for<'de> Deserialize<'de>>(what: &str, mut body: Value) -> Result<T, LabError> {
    integral_numbers(&mut body);
    serde_json::from_value(body).map_err(|e| {
        LabError::new(
            codes::ARGS_INVALID,
            format!("the body of {what} is not valid: {e}; see /openapi.json for its shape"),
        )
    })
}

/// Rewrites every number with a zero fraction (`75.0`) as the integer it is, within 2^53 (past
/// it a double is not the integer written: `-9223372036854775809` reads as `i64::MIN`).
fn integral_numbers(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(i) = corral_guard::args::integer_of(n) {
                *v = Value::from(i);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        Value::Object(m) => m.values_mut().for_each(integral_numbers),
        _ => {}
    }
}

/// A scenario to create or update: `steps` or `samples` (what `generate` answers), not both.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioBody {
    /// A short name (1-200 bytes).
    pub name: String,
    /// What it checks (up to 4096 bytes).
    #[serde(default)]
    pub description: Option<String>,
    /// `[{input, expected?}]`.
    #[serde(default)]
    pub steps: Option<Value>,
    /// `[{key, input}]`, as `POST /v1/sandbox/synthetic-data` answers: one step per sample.
    #[serde(default)]
    pub samples: Option<Vec<synthetic::Sample>>,
    /// The mocks.
    #[serde(default)]
    pub mocks: Option<Value>,
    /// For an update: the version read (optimistic concurrency); absent, the update is
    /// unconditional.
    #[serde(default)]
    pub version: Option<i64>,
}

/// One variant of an agent under test: a label and, optionally, a declarative workflow (YAML
/// text); without one the agent is the identity agent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantBody {
    /// The label (spec 003: `--variant candidate`).
    pub variant: String,
    /// The workflow's YAML text.
    #[serde(default)]
    pub workflow: Option<String>,
    /// An external program's name under `sandbox.programs` (run in the `linux` backend).
    #[serde(default)]
    pub program: Option<String>,
}

/// A run to make.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    /// The label.
    pub variant: String,
    /// The workflow's YAML text; absent (and no `program`): the identity agent.
    #[serde(default)]
    pub workflow: Option<String>,
    /// An external program's name under `sandbox.programs` (run in the `linux` backend).
    #[serde(default)]
    pub program: Option<String>,
    /// The seed (default 0).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Trials (1-100, default 1).
    #[serde(default)]
    pub trials: Option<u32>,
    /// `exact`, `regex`, `json_path` or `command:<name>` (a scorer under `sandbox.scorers`);
    /// absent: executed, not scored.
    #[serde(default)]
    pub scorer: Option<String>,
    /// `inproc-mock` (the identity agent and workflows) or `linux` (a program); absent: the
    /// one the variant runs under.
    #[serde(default)]
    pub isolation: Option<String>,
}

/// A comparison to make.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareBody {
    /// The variant compared against.
    pub baseline: VariantBody,
    /// The variant judged.
    pub candidate: VariantBody,
    /// The scenario ids (each run by both sides).
    pub scenarios: Vec<String>,
    /// Trials per scenario and side (1-100, default 1).
    #[serde(default)]
    pub trials: Option<u32>,
    /// The seed of every run and of the bootstrap (default 0).
    #[serde(default)]
    pub seed: Option<u64>,
    /// The scorer (default `exact`).
    #[serde(default)]
    pub scorer: Option<String>,
    /// The margin of `unchanged` (default 0.05).
    #[serde(default)]
    pub margin: Option<f64>,
    /// A deploy comparison (needs admin); absent or `null`: not one.
    #[serde(default)]
    pub deploy: Option<bool>,
    /// How many runs execute at once (1 to [`MAX_COMPARE_WORKERS`]; default
    /// [`default_workers`]). The result does not depend on it: the same runs, seeds and verdict.
    #[serde(default)]
    pub workers: Option<u32>,
}

/// The external programs a deployment declares, by name (what `program`, `scorer:
/// command:<name>` and a tournament's `judge` may name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    /// `sandbox.programs`.
    pub programs: Vec<String>,
    /// `sandbox.scorers`.
    pub scorers: Vec<String>,
    /// `sandbox.judges`.
    pub judges: Vec<String>,
}

/// A page request: `limit` and the `next` cursor of the previous page.
#[derive(Debug, Clone, Default)]
pub struct PageQuery {
    /// Rows per page (0: the store's maximum).
    pub limit: u32,
    /// The `next` cursor of the previous page, as text.
    pub after: Option<String>,
}

impl PageQuery {
    pub(crate) fn page(&self) -> Result<Page, LabError> {
        // `?after=` (empty) is the first page, as no `after` is.
        let after = match self.after.as_deref() {
            None | Some("") => None,
            Some(s) => Some(s.parse::<PageCursor>().map_err(LabError::from)?),
        };
        Ok(Page {
            limit: self.limit,
            after,
        })
    }
}

/// A recording with its events, as `GET /v1/sandbox/recordings/{run}` answers it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordingView {
    /// The recording: owner, counts, `capped`, `gapped`, expiry.
    pub recording: Recording,
    /// Its events, by `seq`.
    pub events: Vec<RecordingEvent>,
}

impl RecordingView {
    /// The export: a `{"kind": "recording", ...}` line, then a `{"kind": "event", ...}` line per
    /// event; every line ends with a newline.
    pub fn json_lines(&self) -> String {
        let line = |kind: &str, v: Value| {
            let mut m = serde_json::Map::new();
            m.insert("kind".to_owned(), Value::String(kind.to_owned()));
            if let Value::Object(o) = v {
                m.extend(o);
            }
            let mut text = Value::Object(m).to_string();
            text.push('\n');
            text
        };
        let mut out = line(
            "recording",
            serde_json::to_value(&self.recording).unwrap_or(Value::Null),
        );
        for e in &self.events {
            out.push_str(&line(
                "event",
                serde_json::to_value(e).unwrap_or(Value::Null),
            ));
        }
        out
    }
}

/// What an action is audited as, and what it needs.
pub(crate) struct Action {
    pub(crate) op: &'static str,
    pub(crate) role: Role,
}

const GENERATE: Action = Action {
    op: "sandbox.generate",
    role: Role::Operator,
};
const SCENARIOS_CREATE: Action = Action {
    op: "sandbox.scenarios.create",
    role: Role::Operator,
};
const SCENARIOS_UPDATE: Action = Action {
    op: "sandbox.scenarios.update",
    role: Role::Operator,
};
const SCENARIOS_LIST: Action = Action {
    op: "sandbox.scenarios.list",
    role: Role::Viewer,
};
const SCENARIOS_GET: Action = Action {
    op: "sandbox.scenarios.get",
    role: Role::Viewer,
};
const SCENARIOS_RUN: Action = Action {
    op: "sandbox.scenarios.run",
    role: Role::Operator,
};
const RUNS_LIST: Action = Action {
    op: "sandbox.runs.list",
    role: Role::Viewer,
};
const RUNS_GET: Action = Action {
    op: "sandbox.runs.get",
    role: Role::Viewer,
};
const RUNS_OUTPUTS: Action = Action {
    op: "sandbox.runs.outputs",
    role: Role::Viewer,
};
const COMPARE: Action = Action {
    op: "sandbox.compare",
    role: Role::Operator,
};
const COMPARE_DEPLOY: Action = Action {
    op: "sandbox.compare",
    role: Role::Admin,
};
const COMPARISONS_LIST: Action = Action {
    op: "sandbox.comparisons.list",
    role: Role::Viewer,
};
const COMPARISONS_GET: Action = Action {
    op: "sandbox.comparisons.get",
    role: Role::Viewer,
};

// Recordings hold call values: the role is what a refusal is audited with; access is the
// `admin` role or the run's own principal (`recording_access`).
const RECORDINGS_LIST: Action = Action {
    op: "sandbox.recordings.list",
    role: Role::Viewer,
};
const RECORDINGS_GET: Action = Action {
    op: "sandbox.recordings.get",
    role: Role::Viewer,
};
const RECORDINGS_EXPORT: Action = Action {
    op: "sandbox.recordings.export",
    role: Role::Viewer,
};
const RECORDINGS_DELETE: Action = Action {
    op: "sandbox.recordings.delete",
    role: Role::Admin,
};

/// The role each lab tool (and route) needs, by its audited op name: what MCP filters its
/// tool list by.
pub fn role_needed(op: &str) -> Option<Role> {
    [
        GENERATE,
        SCENARIOS_CREATE,
        SCENARIOS_UPDATE,
        SCENARIOS_LIST,
        SCENARIOS_GET,
        SCENARIOS_RUN,
        RUNS_LIST,
        RUNS_GET,
        RUNS_OUTPUTS,
        COMPARE,
        COMPARISONS_LIST,
        COMPARISONS_GET,
        RECORDINGS_DELETE,
        playback::REPLAY,
        tournament::TOURNAMENT,
        tournament::TOURNAMENTS_GET,
        tournament::TOURNAMENTS_LIST,
        crate::shadow::SHADOW_RUN,
        crate::shadow::SHADOWS_LIST,
        crate::shadow::SHADOWS_GET,
        metering::METERING,
    ]
    .into_iter()
    .find(|a| a.op == op)
    .map(|a| a.role)
}

/// The lab of the current base deployment, rebuilt when the gateway's deployment changes.
#[derive(Debug, Default)]
struct LabCache(Mutex<Option<(Arc<Deployment>, Lab)>>);

/// The lab's use cases. Built once by the runtime; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct LabService {
    store: Arc<Store>,
    gateway: Arc<Gateway>,
    enabled: AtomicBool,
    lab: LabCache,
    /// The declared programs and scorers (replaced on reload).
    programs: RwLock<Programs>,
    /// The API served to programs, once the HTTP crate handed it over.
    links: OnceLock<Arc<dyn ProgramLinks>>,
    /// Whether every run is recorded, with its task input (`sandbox.record_runs`).
    record_runs: AtomicBool,
    /// The replay and judge ceilings (`budgets.replay`, `budgets.judge`; replaced on reload).
    ceilings: RwLock<crate::shadow::Ceilings>,
}

/// What one executed run gives a comparison: the record and each trial's score.
pub(crate) struct Executed {
    pub(crate) run: store_lab::Run,
    /// Per trial: `None` when the trial hit an infrastructure error, else its run score.
    trials: Vec<Option<RunScore>>,
    /// The misses (in a playback, the divergences, with what was expected).
    pub(crate) misses: Vec<crate::runner::MockMiss>,
    /// The step outputs, in order.
    pub(crate) outputs: Vec<crate::runner::StepOutput>,
}

impl LabService {
    /// The service over `store`, running its worlds over `gateway`'s current deployment and
    /// auditing to its sinks; `enabled` is the config's `sandbox.enabled`.
    pub fn new(store: Arc<Store>, gateway: Arc<Gateway>, enabled: bool) -> Self {
        Self {
            store,
            gateway,
            enabled: AtomicBool::new(enabled),
            lab: LabCache::default(),
            programs: RwLock::new(Programs::default()),
            links: OnceLock::new(),
            record_runs: AtomicBool::new(false),
            ceilings: RwLock::new(crate::shadow::Ceilings::default()),
        }
    }

    /// Replaces the replay and judge ceilings (`budgets.replay`, `budgets.judge`): at start-up
    /// and on each reload.
    pub fn set_ceilings(&self, ceilings: crate::shadow::Ceilings) {
        match self.ceilings.write() {
            Ok(mut c) => *c = ceilings,
            Err(poisoned) => *poisoned.into_inner() = ceilings,
        }
    }

    /// The replay and judge ceilings in force.
    pub fn ceilings(&self) -> crate::shadow::Ceilings {
        match self.ceilings.read() {
            Ok(c) => *c,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    /// The most judge calls one tournament may make (`budgets.judge.max_calls`): what the
    /// tournament is handed; replay runs never count against it.
    pub fn max_judge_calls(&self) -> u64 {
        self.ceilings().judge_max_calls
    }

    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub(crate) fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    pub(crate) fn program_links(&self) -> Option<&Arc<dyn ProgramLinks>> {
        self.links.get()
    }

    /// Records every run from now on, or stops (`sandbox.record_runs`, at start-up and on each
    /// reload): its calls and its task input, under the run's id.
    pub fn set_record_runs(&self, on: bool) {
        self.record_runs.store(on, Ordering::Relaxed);
    }

    /// Replaces the declared programs and scorers (`sandbox.programs`, `sandbox.scorers`) and
    /// the backend that runs them: at start-up and on each reload.
    pub fn set_programs(&self, programs: Programs) {
        match self.programs.write() {
            Ok(mut p) => *p = programs,
            Err(poisoned) => *poisoned.into_inner() = programs,
        }
    }

    /// Hands the lab the API it serves to external programs (the HTTP crate's, once); a later
    /// call is ignored.
    pub fn set_program_links(&self, links: Arc<dyn ProgramLinks>) {
        let _ = self.links.set(links);
    }

    /// The names declared under `sandbox.programs`, `sandbox.scorers` and `sandbox.judges`.
    pub fn declared(&self) -> Declared {
        let p = self.programs();
        Declared {
            programs: p.agents.keys().cloned().collect(),
            scorers: p.scorers.keys().cloned().collect(),
            judges: p.judges.keys().cloned().collect(),
        }
    }

    pub(crate) fn programs(&self) -> Programs {
        match self.programs.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Whether the lab answers (`sandbox.enabled`).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Turns the lab on or off (a reload of `sandbox.enabled`); nothing stored is touched.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// The tenant of `caller`, exactly as the gateway picks it.
    pub fn tenant_of(&self, caller: &Caller) -> String {
        caller
            .principal
            .tenant
            .clone()
            .unwrap_or_else(|| self.gateway.tenant().to_owned())
    }

    /// `lab.disabled` when the lab is off.
    pub fn check_enabled(&self) -> Result<(), LabError> {
        if self.enabled() {
            Ok(())
        } else {
            Err(disabled())
        }
    }

    // --- the actions ---

    /// Generates synthetic inputs (operator). Stores nothing; the audit holds only the count.
    pub async fn generate(
        &self,
        caller: &Caller,
        rid: &str,
        request: &synthetic::Request,
    ) -> Result<synthetic::Batch, LabError> {
        let r = self.start(&GENERATE, caller);
        let r = match r {
            Ok(()) => {
                synthetic::generate(request).map_err(|e| LabError::new(e.code(), e.to_string()))
            }
            Err(e) => Err(e),
        };
        let detail = r
            .as_ref()
            .ok()
            .map(|b| format!("samples={}", b.samples.len()));
        self.finish(&GENERATE, caller, rid, r, detail, None).await
    }

    /// Creates a scenario (operator).
    pub async fn create_scenario(
        &self,
        caller: &Caller,
        rid: &str,
        body: ScenarioBody,
    ) -> Result<store_lab::Scenario, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&SCENARIOS_CREATE, caller)?;
            let draft = draft_of(&body)?;
            Ok(self
                .store
                .create_scenario(&tenant, &draft, now_ms())
                .await?)
        }
        .await;
        let detail = r.as_ref().ok().map(|s| format!("scenario={}", s.id));
        self.finish(&SCENARIOS_CREATE, caller, rid, r, detail, None)
            .await
    }

    /// Replaces a scenario (operator); with `version`, only if it is still that one
    /// (`lab.version_conflict`).
    pub async fn update_scenario(
        &self,
        caller: &Caller,
        rid: &str,
        id: &str,
        body: ScenarioBody,
    ) -> Result<store_lab::Scenario, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&SCENARIOS_UPDATE, caller)?;
            let draft = draft_of(&body)?;
            // An owned scenario (a recorded task's) is changed only by who may read it.
            self.scenario(caller, &tenant, id).await?;
            Ok(self
                .store
                .update_scenario(&tenant, id, &draft, body.version, now_ms())
                .await?)
        }
        .await;
        let detail = Some(format!("scenario={}", audited_id(id)));
        self.finish(&SCENARIOS_UPDATE, caller, rid, r, detail, None)
            .await
    }

    /// A page of the tenant's scenarios (viewer).
    pub async fn list_scenarios(
        &self,
        caller: &Caller,
        rid: &str,
        page: &PageQuery,
    ) -> Result<Paged<store_lab::ScenarioSummary>, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&SCENARIOS_LIST, caller)?;
            // The tenant's scenarios, and the owned ones (a recorded task's) the caller may read.
            let visible_to = (!is_admin(caller)).then(|| caller.principal.identity());
            Ok(self
                .store
                .list_scenarios(&tenant, visible_to.as_deref(), &page.page()?)
                .await?)
        }
        .await;
        self.finish(&SCENARIOS_LIST, caller, rid, r, None, None)
            .await
    }

    /// A scenario of the tenant (viewer).
    pub async fn get_scenario(
        &self,
        caller: &Caller,
        rid: &str,
        id: &str,
    ) -> Result<store_lab::Scenario, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&SCENARIOS_GET, caller)?;
            self.scenario(caller, &tenant, id).await
        }
        .await;
        let detail = Some(format!("scenario={}", audited_id(id)));
        self.finish(&SCENARIOS_GET, caller, rid, r, detail, None)
            .await
    }

    /// Runs a scenario (operator), synchronously; the finished run record.
    pub async fn run(
        &self,
        caller: &Caller,
        rid: &str,
        scenario_id: &str,
        body: RunBody,
    ) -> Result<store_lab::Run, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&SCENARIOS_RUN, caller)?;
            let variant = check_variant(&body.variant, "variant")?;
            let programs = self.programs();
            let resolved = variant::agent_of(
                body.workflow.as_deref(),
                body.program.as_deref(),
                body.isolation.as_deref(),
                &programs,
                self.links.get(),
            )?;
            let scorer = variant::scorer_of(body.scorer.as_deref(), &programs)?;
            let trials = check_trials(body.trials)?;
            let stored = self.scenario(caller, &tenant, scenario_id).await?;
            let scenario = scenario_of(&stored)?;
            if let Some(s) = &scorer {
                s.check_expected(&scenario)?;
            }
            check_executions(scenario.steps().len().saturating_mul(trials as usize))?;
            let x = self
                .executor()
                .execute(
                    caller,
                    &tenant,
                    &stored,
                    &scenario,
                    &variant,
                    &resolved,
                    scorer.as_ref(),
                    body.seed.unwrap_or(0),
                    trials,
                )
                .await?;
            Ok(x.run)
        }
        .await;
        let run_id = r.as_ref().ok().map(|run| run.id.clone());
        let detail = Some(format!("scenario={}", audited_id(scenario_id)));
        self.finish(&SCENARIOS_RUN, caller, rid, r, detail, run_id)
            .await
    }

    /// A page of the tenant's runs, of one scenario or all (viewer).
    pub async fn list_runs(
        &self,
        caller: &Caller,
        rid: &str,
        scenario: Option<&str>,
        page: &PageQuery,
    ) -> Result<Paged<store_lab::Run>, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&RUNS_LIST, caller)?;
            Ok(self
                .store
                .list_runs(&tenant, scenario, &page.page()?)
                .await?)
        }
        .await;
        self.finish(&RUNS_LIST, caller, rid, r, None, None).await
    }

    /// A run of the tenant (viewer).
    pub async fn get_run(
        &self,
        caller: &Caller,
        rid: &str,
        id: &str,
    ) -> Result<store_lab::Run, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&RUNS_GET, caller)?;
            self.store
                .get_run(&tenant, id)
                .await?
                .ok_or_else(|| not_found("run", &tenant, id))
        }
        .await;
        self.finish(&RUNS_GET, caller, rid, r, None, run_of(id))
            .await
    }

    /// A run's outputs, by trial then step (viewer).
    pub async fn outputs(
        &self,
        caller: &Caller,
        rid: &str,
        id: &str,
    ) -> Result<Vec<store_lab::Output>, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&RUNS_OUTPUTS, caller)?;
            if let Some(run) = self.store.get_run(&tenant, id).await? {
                self.check_outputs_access(caller, &tenant, &run).await?;
            }
            Ok(self.store.list_outputs(&tenant, id).await?)
        }
        .await;
        self.finish(&RUNS_OUTPUTS, caller, rid, r, None, run_of(id))
            .await
    }

    /// Runs both variants over every scenario with the same seeds and trials, computes the
    /// verdict and records it (operator; a deploy comparison needs admin).
    pub async fn compare(
        &self,
        caller: &Caller,
        rid: &str,
        body: CompareBody,
    ) -> Result<store_lab::Comparison, LabError> {
        let action = if body.deploy == Some(true) {
            &COMPARE_DEPLOY
        } else {
            &COMPARE
        };
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(action, caller)?;
            self.compare_inner(caller, &tenant, &body).await
        }
        .await;
        let detail = r
            .as_ref()
            .ok()
            .map(|c| format!("comparison={} deploy={}", c.id, c.record.deploy));
        self.finish(action, caller, rid, r, detail, None).await
    }

    /// A page of the tenant's comparisons (viewer).
    pub async fn list_comparisons(
        &self,
        caller: &Caller,
        rid: &str,
        page: &PageQuery,
    ) -> Result<Paged<store_lab::Comparison>, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&COMPARISONS_LIST, caller)?;
            Ok(self.store.list_comparisons(&tenant, &page.page()?).await?)
        }
        .await;
        self.finish(&COMPARISONS_LIST, caller, rid, r, None, None)
            .await
    }

    /// A comparison of the tenant (viewer).
    pub async fn get_comparison(
        &self,
        caller: &Caller,
        rid: &str,
        id: &str,
    ) -> Result<store_lab::Comparison, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&COMPARISONS_GET, caller)?;
            self.store
                .get_comparison(&tenant, id)
                .await?
                .ok_or_else(|| not_found("comparison", &tenant, id))
        }
        .await;
        let detail = Some(format!("comparison={}", audited_id(id)));
        self.finish(&COMPARISONS_GET, caller, rid, r, detail, None)
            .await
    }

    /// A page of the tenant's recordings: every one for an admin, the caller's own runs for
    /// anyone else.
    pub async fn list_recordings(
        &self,
        caller: &Caller,
        rid: &str,
        page: &PageQuery,
    ) -> Result<Paged<Recording>, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.check_enabled()?;
            let own = (!is_admin(caller)).then(|| caller.principal.identity());
            if own.is_some() && !caller.principal.authenticated {
                return Err(forbidden_recording(caller));
            }
            self.store
                .list_recordings(&tenant, own.as_deref(), &page.page()?)
                .await
                .map_err(recording_error)
        }
        .await;
        self.finish(&RECORDINGS_LIST, caller, rid, r, None, None)
            .await
    }

    /// A recording of the tenant and its events, by `seq` (admin, or the run's own principal).
    /// `owner` names the principal (its identity, or its id) when several recorded under
    /// `run_id` (`recording.ambiguous` otherwise, for an admin).
    pub async fn get_recording(
        &self,
        caller: &Caller,
        rid: &str,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<RecordingView, LabError> {
        let r = self.read_recording(caller, run_id, owner).await;
        self.finish(&RECORDINGS_GET, caller, rid, r, None, run_of(run_id))
            .await
    }

    /// A recording as JSON lines: one `{"kind": "recording", ...}` line, then one
    /// `{"kind": "event", ...}` line per event, by `seq` (admin, or the run's own principal).
    pub async fn export_recording(
        &self,
        caller: &Caller,
        rid: &str,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<String, LabError> {
        let r = self
            .read_recording(caller, run_id, owner)
            .await
            .map(|v| v.json_lines());
        self.finish(&RECORDINGS_EXPORT, caller, rid, r, None, run_of(run_id))
            .await
    }

    /// Deletes a recording of the tenant with its events (admin): what frees a principal's share
    /// (`recordings.max_per_principal`) and the tenant's before retention does. `owner` names
    /// the principal when several recorded under `run_id`. Answers the recording as it was;
    /// audited (`sandbox.recordings.delete`, no value).
    pub async fn delete_recording(
        &self,
        caller: &Caller,
        rid: &str,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<Recording, LabError> {
        let r = async {
            self.start(&RECORDINGS_DELETE, caller)?;
            let recording = self.read_recording(caller, run_id, owner).await?.recording;
            let tenant = self.tenant_of(caller);
            if !self
                .store
                .delete_recording(&tenant, run_id, &recording.identity)
                .await
                .map_err(recording_error)?
            {
                return Err(LabError::new(
                    codes::RECORDING_NOT_FOUND,
                    format!(
                        "the recording of run {:?} by `{}` was deleted meanwhile (retention, or \
                         another admin)",
                        clip(run_id),
                        clip(&recording.identity)
                    ),
                ));
            }
            Ok(recording)
        }
        .await;
        let detail = r
            .as_ref()
            .ok()
            .map(|x| format!("events={} principal={}", x.events, audited_id(&x.principal)));
        self.finish(&RECORDINGS_DELETE, caller, rid, r, detail, run_of(run_id))
            .await
    }

    /// The recording of `run_id` the caller may read: its own (by identity, never the bare
    /// id), or, for an admin, the only one of the run or the one `owner` names.
    pub(crate) async fn read_recording(
        &self,
        caller: &Caller,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<RecordingView, LabError> {
        self.check_enabled()?;
        let tenant = self.tenant_of(caller);
        let of_run = self
            .store
            .recordings_of_run(&tenant, run_id, RUN_RECORDINGS_SHOWN)
            .await
            .map_err(recording_error)?;
        let not_found = || {
            LabError::new(
                codes::RECORDING_NOT_FOUND,
                format!(
                    "no recording of run {:?} in tenant {tenant:?}: it was never recorded, \
                     has expired, or belongs to another tenant; `corral sandbox recordings \
                     list` shows yours",
                    clip(run_id)
                ),
            )
        };
        if of_run.is_empty() {
            return Err(not_found());
        }
        let recording = if is_admin(caller) {
            let mut named: Vec<Recording> = of_run
                .iter()
                .filter(|r| owner.is_none_or(|o| r.identity == o || r.principal == o))
                .cloned()
                .collect();
            match named.len() {
                0 => {
                    return Err(LabError::new(
                        codes::RECORDING_NOT_FOUND,
                        format!(
                            "run {:?} has no recording by {:?}; its recordings are by: {}",
                            clip(run_id),
                            clip(owner.unwrap_or_default()),
                            identities(&of_run)
                        ),
                    ));
                }
                1 => named.remove(0),
                _ => {
                    return Err(LabError::new(
                        codes::RECORDING_AMBIGUOUS,
                        format!(
                            "several principals recorded run {:?}, each in a recording of its \
                             own: {}; name one with `?principal=IDENTITY` (`--owner IDENTITY`)",
                            clip(run_id),
                            identities(&named)
                        ),
                    ));
                }
            }
        } else {
            // Only the caller's own identity: a JWT `sub: bot` is not the static token `bot`,
            // and a `legacy:` recording (no identity kept) is an admin's to read.
            let me = caller.principal.identity();
            let mine = caller.principal.authenticated
                && owner.is_none_or(|o| o == me || o == caller.principal.id);
            match of_run.into_iter().find(|r| mine && r.identity == me) {
                Some(r) => r,
                None => return Err(forbidden_recording(caller)),
            }
        };
        let events = self
            .store
            .recording_events(&tenant, run_id, &recording.identity)
            .await
            .map_err(recording_error)?;
        Ok(RecordingView { recording, events })
    }

    /// Audits a lab request the surface refused before it reached an action (the lab is off,
    /// the body is not JSON), as `op`, and gives the error back.
    pub async fn rejected(
        &self,
        caller: &Caller,
        rid: &str,
        op: &'static str,
        e: LabError,
    ) -> LabError {
        let role = role_needed(op).unwrap_or(Role::Admin);
        match self
            .finish::<()>(&Action { op, role }, caller, rid, Err(e), None, None)
            .await
        {
            Err(e) => e,
            Ok(()) => LabError::new(codes::SERVER_INTERNAL, "a refusal was audited as a success"),
        }
    }

    // --- the parts ---

    /// The checks every action starts with: the lab is on, the caller has the role.
    pub(crate) fn start(&self, action: &Action, caller: &Caller) -> Result<(), LabError> {
        self.check_enabled()?;
        check_role(action, caller)
    }

    /// Audits the action (one event, no values) and answers its result; an audit failure is
    /// the action's failure (`server.audit_unavailable`), so nothing unaudited is reported done.
    pub(crate) async fn finish<T>(
        &self,
        action: &Action,
        caller: &Caller,
        rid: &str,
        r: Result<T, LabError>,
        detail: Option<String>,
        run_id: Option<String>,
    ) -> Result<T, LabError> {
        let (outcome, code, status) = match &r {
            Ok(_) => (Outcome::Ok, None, 200),
            Err(e) => {
                let status = Refusal::new(e.code, "").status();
                let outcome = if e.code == codes::RBAC_DENIED {
                    Outcome::RbacDenied
                } else if e.code == codes::LAB_DISABLED {
                    Outcome::NotEnabled
                } else if status == 413 || e.code.starts_with("limit.") {
                    Outcome::Limited
                } else if status >= 500 {
                    Outcome::OpError
                } else {
                    Outcome::InvalidArgs
                };
                (outcome, Some(e.code.to_owned()), status)
            }
        };
        let event = AuditEvent {
            request_id: rid.to_owned(),
            tenant: self.tenant_of(caller),
            ts_ms: now_ms(),
            principal_id: caller.principal.id.clone(),
            principal_kind: caller.principal.kind.as_str().to_owned(),
            act_chain: caller.act_chain.clone(),
            op: action.op.to_owned(),
            outcome,
            code,
            rule: None,
            args_hash: String::new(),
            args_shape: Value::Null,
            status,
            duration_us: 0,
            attestation: None,
            action_id: None,
            run_id,
            detail,
            purpose: corral_guard::runs::RunPurpose::Live,
            trace_id: corral_guard::gateway::current_trace_id(),
        };
        self.gateway.record(&event).await?;
        r
    }

    /// A scenario of the tenant the caller may use: the tenant's, or an owned one (a recorded
    /// task's) when the caller is its owner or an admin (`recording.forbidden` otherwise).
    async fn scenario(
        &self,
        caller: &Caller,
        tenant: &str,
        id: &str,
    ) -> Result<store_lab::Scenario, LabError> {
        let s = self
            .store
            .get_scenario(tenant, id)
            .await?
            .ok_or_else(|| not_found("scenario", tenant, id))?;
        if !may_read_owned(caller, s.owner.as_deref()) {
            return Err(LabError::new(
                codes::RECORDING_FORBIDDEN,
                format!(
                    "scenario {} holds a recorded task (a replay made it of a recording's task                      input), so only an admin or the recording's own principal may read or run                      it, and `{}` is neither; ask an admin, or use the credentials of the                      recording's principal",
                    s.id, caller.principal.id
                ),
            ));
        }
        Ok(s)
    }

    /// Whether `caller` may read the outputs of `run`: a replay run's outputs are the values
    /// of a recording (its recorded responses, or what the real tools of a shadow run
    /// answered), and a run of an owned scenario answers a recorded task: the recording's
    /// access (an admin, or the same identity), not a viewer's. `recording.forbidden` if not.
    pub(crate) async fn check_outputs_access(
        &self,
        caller: &Caller,
        tenant: &str,
        run: &store_lab::Run,
    ) -> Result<(), LabError> {
        if run.purpose == RunPurpose::Replay.as_str()
            && !(is_admin(caller)
                || (caller.principal.authenticated
                    && run.identity.as_deref() == Some(caller.principal.identity().as_str())))
        {
            return Err(forbidden_recording(caller));
        }
        if let Some(s) = self.store.get_scenario(tenant, &run.scenario_id).await?
            && !may_read_owned(caller, s.owner.as_deref())
        {
            return Err(forbidden_recording(caller));
        }
        Ok(())
    }

    /// The lab of the gateway's current deployment (rebuilt after a reload).
    fn lab(&self) -> Result<Lab, LabError> {
        let current = self.gateway.deployment();
        let mut cache = match self.lab.0.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if let Some((d, lab)) = cache.as_ref()
            && Arc::ptr_eq(d, &current)
        {
            return Ok(lab.clone());
        }
        let lab = Lab::new(
            &current,
            self.gateway.sinks().to_vec(),
            self.gateway.tenant(),
        )
        .map_err(|e| LabError::new(e.code, e.message))?;
        *cache = Some((current, lab.clone()));
        Ok(lab)
    }

    /// The lab scenario a replay of `task` runs as: the one it was a run of, if the tenant still
    /// has it at the same version; else one scenario per (recording, task input digest)
    /// ([`LabService::replay_scenario`]), owned by the recording's principal (`owner`, its
    /// identity): the task input is a recording's value, so only that principal or an admin
    /// reads the scenario.
    pub async fn task_scenario(
        &self,
        tenant: &str,
        task: &crate::task::RecordedTask,
        owner: &str,
    ) -> Result<store_lab::Scenario, LabError> {
        if let Some((id, version)) = &task.from
            && let Some(s) = self.store.get_scenario(tenant, id).await?
            && s.version == *version
        {
            return Ok(s);
        }
        let steps = task.scenario.to_json()["steps"].clone();
        let run = clip(&task.run_id);
        self.replay_scenario(
            tenant,
            &format!("task of recording {run}"),
            &format!("the task input kept by recording {run}, for replay"),
            steps,
            owner,
        )
        .await
    }

    /// The scenario of a replay's `steps` (no mocks), one per (name, steps digest): named
    /// `<name> (<digest>)`, created by the first replay and reused by every later one (when its
    /// steps are still these and it has no mocks; else a new one is made), so replays do not
    /// add a scenario each. It is owned by `owner` (the recording's principal); one that
    /// anyone else owns, or the tenant (a scenario an operator named alike), is never reused:
    /// the replay's runs and outputs must stay the recording principal's.
    pub(crate) async fn replay_scenario(
        &self,
        tenant: &str,
        name: &str,
        description: &str,
        steps: Value,
        owner: &str,
    ) -> Result<store_lab::Scenario, LabError> {
        let digest = corral_guard::args::args_hash(&steps);
        let name = format!("{name} ({})", digest.get(..16).unwrap_or(&digest));
        if let Some(s) = self.store.find_scenario(tenant, &name, owner).await?
            && s.owner.as_deref() == Some(owner)
            && s.steps == steps
            && s.mocks.as_array().is_some_and(Vec::is_empty)
        {
            return Ok(s);
        }
        let draft = ScenarioDraft {
            name,
            description: format!("{description} (steps sha256:{digest})"),
            steps,
            mocks: json!([]),
        };
        Ok(self
            .store
            .create_owned_scenario(tenant, &draft, Some(owner), now_ms())
            .await?)
    }

    /// What runs need from the service, owned (a comparison's runs are tokio tasks): the store
    /// and the lab of the current deployment, or why it could not be built.
    pub(crate) fn executor(&self) -> Executor {
        let record = self.record_runs.load(Ordering::Relaxed);
        let lab = match (record, self.gateway.recorder()) {
            (false, _) => self.lab(),
            (true, Some(r)) => self.lab().map(|lab| lab.recording_to(Arc::clone(r))),
            (true, None) => Err(LabError::new(
                codes::RECORDING_UNAVAILABLE,
                "`sandbox.record_runs` is on and this corral keeps no recordings (no store), so \
                 no run is made; turn it off, or run the server with its store",
            )),
        };
        Executor {
            store: self.store.clone(),
            lab: lab.map(|l| l.metered(Arc::clone(self.gateway.meter()))),
            record,
            meter: Arc::clone(self.gateway.meter()),
        }
    }

    async fn compare_inner(
        &self,
        caller: &Caller,
        tenant: &str,
        body: &CompareBody,
    ) -> Result<store_lab::Comparison, LabError> {
        let plan = compare_plan(body, &self.programs(), self.links.get())?;
        // Every scenario is read and validated before anything runs.
        let mut scenarios = Vec::with_capacity(body.scenarios.len());
        for id in &body.scenarios {
            let stored = self.scenario(caller, tenant, id).await?;
            let scenario = scenario_of(&stored)?;
            if let Some(s) = &plan.scorer {
                s.check_expected(&scenario)?;
            }
            scenarios.push((stored, scenario));
        }
        check_executions(scenarios.iter().fold(0usize, |n, (_, s)| {
            n.saturating_add(
                s.steps()
                    .len()
                    .saturating_mul(plan.trials as usize)
                    .saturating_mul(2),
            )
        }))?;
        let executed =
            run_compare_jobs(self.executor(), &plan, caller, tenant, Arc::new(scenarios)).await?;
        let (mut base_runs, mut base_obs) = (Vec::new(), Vec::new());
        let (mut cand_runs, mut cand_obs) = (Vec::new(), Vec::new());
        // The jobs come back in request order: scenario by scenario, baseline then candidate.
        for ((id, side), x) in executed {
            let (runs, observed) = match side {
                Side::Baseline => (&mut base_runs, &mut base_obs),
                Side::Candidate => (&mut cand_runs, &mut cand_obs),
            };
            observed.push(observed_of(&id, plan.trials, &x.trials));
            runs.push(x.run.id);
        }
        let (base_label, cand_label) = (plan.base_label, plan.cand_label);
        let mut input = verdict::Input::new(
            base_label.clone(),
            base_obs,
            cand_label.clone(),
            cand_obs,
            plan.seed,
        );
        input.margin = plan.margin;
        let c = verdict::compare(&input).map_err(|e| LabError::new(e.code(), e.to_string()))?;
        let new = comparison_record(
            &c,
            VariantRuns {
                variant: base_label,
                run_ids: base_runs,
            },
            VariantRuns {
                variant: cand_label,
                run_ids: cand_runs,
            },
            body,
            caller,
        );
        Ok(self.store.append_comparison(tenant, &new, now_ms()).await?)
    }
}

/// One run to execute: its scenario, its agent, how it is scored.
#[derive(Clone, Copy)]
pub(crate) struct Runnable<'a> {
    pub(crate) stored: &'a store_lab::Scenario,
    pub(crate) scenario: &'a Scenario,
    pub(crate) variant: &'a str,
    pub(crate) agent: &'a Resolved,
    pub(crate) scorer: Option<&'a RunScorer>,
    pub(crate) seed: u64,
    pub(crate) trials: u32,
}

/// The store and the lab a run is executed with, owned, so that a comparison's runs can be
/// tokio tasks that finish (and record) their run even when the request is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Executor {
    store: Arc<Store>,
    lab: Result<Lab, LabError>,
    /// Whether the run is recorded (its lab's worlds record their calls): its task input is
    /// kept first.
    record: bool,
    /// Where each run it starts is counted (the gateway's meter).
    meter: Arc<corral_guard::metering::Meter>,
}

impl Executor {
    /// Creates, executes, scores, records and finishes one run in a world of the lab (purpose
    /// `simulation`).
    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        caller: &Caller,
        tenant: &str,
        stored: &store_lab::Scenario,
        scenario: &Scenario,
        variant: &str,
        agent: &Resolved,
        scorer: Option<&RunScorer>,
        seed: u64,
        trials: u32,
    ) -> Result<Executed, LabError> {
        let lab = self.lab.clone();
        let principal = caller.principal.clone();
        let world = move |run_id: &str| {
            lab.and_then(|lab| {
                lab.world(scenario, run_id, principal)
                    .map_err(|e| LabError::new(e.code, e.message))
            })
        };
        let run = Runnable {
            stored,
            scenario,
            variant,
            agent,
            scorer,
            seed,
            trials,
        };
        self.execute_in(
            caller,
            tenant,
            &run,
            RunPurpose::Simulation,
            agent.backend,
            world,
        )
        .await
    }

    /// Creates, executes (in the world `world` makes for the run's id), scores, records and
    /// finishes one run of `purpose`, attested as run on `backend`.
    pub(crate) async fn execute_in(
        &self,
        caller: &Caller,
        tenant: &str,
        run: &Runnable<'_>,
        purpose: RunPurpose,
        backend: &str,
        world: impl FnOnce(&str) -> Result<crate::world::World, LabError>,
    ) -> Result<Executed, LabError> {
        let Runnable {
            stored,
            scenario,
            variant,
            agent,
            scorer,
            seed,
            trials,
        } = *run;
        let new = NewRun {
            scenario_id: stored.id.clone(),
            runner: RUNNER.to_owned(),
            backend: backend.to_owned(),
            purpose: purpose.as_str().to_owned(),
            variant: variant.to_owned(),
            seed,
            trials: Some(trials),
            scorer_suite: scorer.map(|s| s.name().to_owned()),
            principal: caller.principal.id.clone(),
            identity: caller.principal.identity(),
        };
        let run = self.store.create_run(tenant, &new, now_ms()).await?;
        self.meter.run(tenant, purpose);
        if self.record
            && purpose == RunPurpose::Simulation
            && let Err(e) = self
                .keep_input(tenant, caller, stored, scenario, &run.id)
                .await
        {
            self.fail_run(tenant, &run.id, &e).await;
            return Err(e);
        }
        let world = match world(&run.id) {
            Ok(w) => w,
            Err(e) => {
                self.fail_run(tenant, &run.id, &e).await;
                return Err(e);
            }
        };
        let mut report = run_scenario(world, agent.agent.as_ref(), seed, trials).await;
        let scores = score_outputs(&mut report, scenario, scorer).await;
        let (outputs, trial_scores) = scored_outputs(&report, scenario, &scores);
        if let Err(e) = self
            .store
            .append_outputs(tenant, &run.id, &outputs, now_ms())
            .await
        {
            let e = LabError::from(e);
            self.fail_run(tenant, &run.id, &e).await;
            return Err(e);
        }
        let result = run_result(&report, &outputs, &trial_scores, scorer.is_some());
        let run = self
            .store
            .finish_run(tenant, &run.id, &result, now_ms())
            .await?;
        Ok(Executed {
            run,
            trials: trial_scores,
            misses: std::mem::take(&mut report.mock_misses),
            outputs: std::mem::take(&mut report.outputs),
        })
    }

    /// Keeps the task input of a recorded run (its scenario's steps, with their expected
    /// values) in the run's recording, before any call: what replay re-runs the task from.
    async fn keep_input(
        &self,
        tenant: &str,
        caller: &Caller,
        stored: &store_lab::Scenario,
        scenario: &Scenario,
        run_id: &str,
    ) -> Result<(), LabError> {
        let key = RecordingKey {
            tenant: tenant.to_owned(),
            run_id: run_id.to_owned(),
            identity: caller.principal.identity(),
            principal: caller.principal.id.clone(),
            purpose: RunPurpose::Simulation,
        };
        let input = json!({
            "scenario": {"id": stored.id, "version": stored.version, "name": scenario.name()},
            "steps": scenario.to_json()["steps"],
        });
        self.store
            .set_recording_input(&key, &input, now_ms())
            .await
            .map_err(|e| LabError::new(e.code(), e.to_string()))
    }

    /// Finishes a run `failed` after an error on the lab's side (best effort: the error that
    /// caused it is what the caller sees).
    async fn fail_run(&self, tenant: &str, id: &str, e: &LabError) {
        let result = RunResult {
            status: RunStatus::Failed,
            isolated: false,
            destroyed: false,
            steps_total: 0,
            steps_ok: 0,
            steps_error: 0,
            infra_errors: 1,
            score: None,
            verdict: RunVerdict::NotScored,
            passes: None,
            error: Some(store_lab::RunError {
                code: e.code.to_owned(),
                message: e.message.clone(),
            }),
            mock_misses: Vec::new(),
            attestations: Vec::new(),
        };
        let _ = self.store.finish_run(tenant, id, &result, now_ms()).await;
    }
}

/// The finished run's record: its status, attestation, counts, score and verdict (`scored`:
/// a scorer was attached), the pass@k figures of its trials, its misses and first error.
fn run_result(
    report: &RunReport,
    outputs: &[NewOutput],
    trial_scores: &[Option<RunScore>],
    scored: bool,
) -> RunResult {
    let all: Vec<StepScore> = outputs.iter().map(step_score_of).collect();
    let run_score = if scored {
        RunScore::of_steps(&all)
    } else {
        RunScore::NotScored {
            steps_not_scored: all.len(),
        }
    };
    let failed = !report.infra_errors.is_empty();
    let (score, verdict) = match run_score {
        RunScore::Scored(s) if !failed => (
            Some(s.score()),
            if s.pass() {
                RunVerdict::Passed
            } else {
                RunVerdict::Failed
            },
        ),
        RunScore::Scored(s) => (Some(s.score()), RunVerdict::Failed),
        RunScore::NotScored { .. } => (None, RunVerdict::NotScored),
    };
    RunResult {
        status: if failed {
            RunStatus::Failed
        } else {
            RunStatus::Completed
        },
        isolated: report.isolated,
        destroyed: report.destroyed,
        steps_total: report.steps_total as u64,
        steps_ok: report.steps_ok as u64,
        steps_error: report.steps_error as u64,
        infra_errors: report.infra_errors.len() as u64,
        score,
        verdict,
        passes: (verdict != RunVerdict::NotScored).then(|| trial_passes(trial_scores)),
        error: report.infra_errors.first().map(|f| store_lab::RunError {
            code: f.code.to_owned(),
            message: f.message.clone(),
        }),
        mock_misses: report
            .mock_misses
            .iter()
            .map(|m| store_lab::MockMiss {
                step: u32::try_from(m.step).unwrap_or(u32::MAX),
                op: m.op.clone(),
                args_hash: m.args_hash.clone(),
            })
            .collect(),
        attestations: report
            .attestations
            .iter()
            .map(|a| store_lab::RunAttestation {
                backend: a.backend.to_owned(),
                isolated: a.isolated,
                destroyed: a.destroyed,
                primitives: a.primitives.clone(),
            })
            .collect(),
    }
}

/// A comparison request, checked: both agents, the scorer, trials, seed and margin.
struct ComparePlan {
    base_label: String,
    cand_label: String,
    base_agent: Arc<Resolved>,
    cand_agent: Arc<Resolved>,
    scorer: Option<Arc<RunScorer>>,
    trials: u32,
    seed: u64,
    margin: f64,
    workers: usize,
}

/// Checks a comparison request before anything is read or run.
fn compare_plan(
    body: &CompareBody,
    programs: &Programs,
    links: Option<&Arc<dyn ProgramLinks>>,
) -> Result<ComparePlan, LabError> {
    let base_label = check_variant(&body.baseline.variant, "baseline.variant")?;
    let cand_label = check_variant(&body.candidate.variant, "candidate.variant")?;
    let side = |v: &VariantBody| {
        variant::agent_of(
            v.workflow.as_deref(),
            v.program.as_deref(),
            None,
            programs,
            links,
        )
    };
    let base_agent = Arc::new(side(&body.baseline)?);
    let cand_agent = Arc::new(side(&body.candidate)?);
    let scorer = variant::scorer_of(Some(body.scorer.as_deref().unwrap_or("exact")), programs)?
        .map(Arc::new);
    let trials = check_trials(body.trials)?;
    let workers = check_workers(body.workers)?;
    let seed = body.seed.unwrap_or(0);
    let margin = body.margin.unwrap_or(verdict::DEFAULT_MARGIN);
    if !(margin.is_finite() && (0.0..=1.0).contains(&margin)) {
        return Err(LabError::invalid(format!(
            "`margin` is {margin}; give a number from 0 to 1 (default {})",
            verdict::DEFAULT_MARGIN
        )));
    }
    if body.scenarios.is_empty() || body.scenarios.len() > MAX_COMPARE_SCENARIOS {
        return Err(LabError::invalid(format!(
            "`scenarios` has {} ids; give 1 to {MAX_COMPARE_SCENARIOS} (at least {} for a verdict that is not forced inconclusive)",
            body.scenarios.len(),
            verdict::MIN_SCENARIOS
        )));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = body.scenarios.iter().find(|s| !seen.insert(s.as_str())) {
        return Err(LabError::invalid(format!(
            "scenario {:?} is listed twice in `scenarios`; list each once",
            clip(dup)
        )));
    }
    Ok(ComparePlan {
        base_label,
        cand_label,
        base_agent,
        cand_agent,
        scorer,
        trials,
        seed,
        margin,
        workers,
    })
}

/// A side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Baseline,
    Candidate,
}

/// Executes a comparison's runs, (scenario, side) in request order (scenario by scenario,
/// baseline then candidate), on at most `plan.workers` tokio tasks at once ([`pool::in_order`]:
/// started in that order, answered in that order, the first error in that order; runs already
/// started are finished and recorded, never left `running`, even when the request is dropped).
async fn run_compare_jobs(
    executor: Executor,
    plan: &ComparePlan,
    caller: &Caller,
    tenant: &str,
    scenarios: Arc<Vec<(store_lab::Scenario, Scenario)>>,
) -> Result<Vec<((String, Side), Executed)>, LabError> {
    let jobs = (0..scenarios.len())
        .flat_map(|i| [(i, Side::Baseline), (i, Side::Candidate)])
        .collect::<Vec<_>>();
    let job = |(i, side): (usize, Side)| {
        let (label, agent) = match side {
            Side::Baseline => (plan.base_label.clone(), plan.base_agent.clone()),
            Side::Candidate => (plan.cand_label.clone(), plan.cand_agent.clone()),
        };
        let (executor, scenarios) = (executor.clone(), scenarios.clone());
        let (caller, tenant, scorer) = (caller.clone(), tenant.to_owned(), plan.scorer.clone());
        let (seed, trials) = (plan.seed, plan.trials);
        async move {
            let (stored, scenario) = scenarios.get(i).ok_or_else(|| {
                LabError::new(codes::SERVER_INTERNAL, "a comparison job lost its scenario")
            })?;
            let x = executor
                .execute(
                    &caller,
                    &tenant,
                    stored,
                    scenario,
                    &label,
                    agent.as_ref(),
                    scorer.as_deref(),
                    seed,
                    trials,
                )
                .await?;
            Ok(((stored.id.clone(), side), x))
        }
    };
    let lost = |e: tokio::task::JoinError| {
        LabError::new(
            codes::SERVER_INTERNAL,
            format!(
                "a run of this comparison stopped before it finished ({e}); see the server log, then retry the comparison"
            ),
        )
    };
    pool::in_order(jobs, plan.workers, job, lost).await
}

/// The stored form of a computed comparison.
fn comparison_record(
    c: &verdict::Comparison,
    baseline: VariantRuns,
    candidate: VariantRuns,
    body: &CompareBody,
    caller: &Caller,
) -> NewComparison {
    let interval = c.interval.unwrap_or(verdict::Interval {
        lower: 0.0,
        upper: 0.0,
    });
    NewComparison {
        baseline,
        candidate,
        scenarios: body.scenarios.clone(),
        verdict: match c.verdict {
            Verdict::Improved => ComparisonVerdict::Improved,
            Verdict::Regressed => ComparisonVerdict::Regressed,
            Verdict::Unchanged => ComparisonVerdict::Unchanged,
            Verdict::Inconclusive => ComparisonVerdict::Inconclusive,
        },
        delta: c.delta.unwrap_or(0.0),
        lower: interval.lower,
        upper: interval.upper,
        margin: c.margin,
        seed: c.seed,
        resamples: c.resamples,
        forced_by: c.forced_by.as_ref().map(|f: &Forced| f.as_str().to_owned()),
        mcnemar_p: c.mcnemar.as_ref().map(|m| m.p_value),
        wilson: match (c.baseline.wilson, c.candidate.wilson) {
            (Some(b), Some(w)) => Some(WilsonIntervals {
                baseline: store_lab::Interval {
                    lower: b.lower,
                    upper: b.upper,
                },
                candidate: store_lab::Interval {
                    lower: w.lower,
                    upper: w.upper,
                },
            }),
            _ => None,
        },
        details: serde_json::to_value(c).unwrap_or(Value::Null),
        recorded_by: caller.principal.id.clone(),
        deploy: body.deploy == Some(true),
    }
}

fn disabled() -> LabError {
    LabError::new(
        codes::LAB_DISABLED,
        "the lab is turned off in this deployment's config (`sandbox.enabled: false`); set it to true to turn it on: stored scenarios and runs are kept",
    )
}

pub(crate) fn not_found(what: &'static str, tenant: &str, id: &str) -> LabError {
    LabError::from(LabStoreError::NotFound {
        what,
        id: clip(id),
        tenant: tenant.to_owned(),
    })
}

/// An id as the audit records it: the caller's text only when it has the shape of an id (1-64
/// letters, digits, `-`, `_`, `.`, `:`), so no free text reaches the audit through a path.
pub(crate) fn audited_id(id: &str) -> String {
    if !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    {
        id.to_owned()
    } else {
        "(not an id)".to_owned()
    }
}

/// A run id as the audit's `run_id`, when it is one.
fn run_of(id: &str) -> Option<String> {
    corral_guard::valid_run_id(id).then(|| id.to_owned())
}

/// At most 128 characters of caller text, for messages.
pub(crate) fn clip(s: &str) -> String {
    s.chars().take(128).collect()
}

pub(crate) fn is_admin(caller: &Caller) -> bool {
    caller.principal.authenticated
        && Role::highest_of(&caller.principal.roles).is_some_and(|r| r >= Role::Admin)
}

/// Whether `caller` may read what is owned by the identity `owner` (`None`: the tenant's): an
/// admin, or that identity (never the bare id: a JWT `sub: bot` is not the static token `bot`).
pub(crate) fn may_read_owned(caller: &Caller, owner: Option<&str>) -> bool {
    match owner {
        None => true,
        Some(o) => {
            is_admin(caller) || (caller.principal.authenticated && caller.principal.identity() == o)
        }
    }
}

pub(crate) fn forbidden_recording(caller: &Caller) -> LabError {
    LabError::new(
        codes::RECORDING_FORBIDDEN,
        format!(
            "a recording holds the values of its run's calls, so only an admin or the run's own \
             principal may read it, and `{}` is neither; ask an admin, or read it with the \
             credentials of the run's principal",
            caller.principal.id
        ),
    )
}

/// The most recordings of one run id a read looks at (one per principal that recorded under it).
const RUN_RECORDINGS_SHOWN: u32 = 50;

/// The identities of recordings, for a message: `token:service:bot, jwt:...`.
fn identities(of: &[Recording]) -> String {
    of.iter()
        .map(|r| format!("`{}`", clip(&r.identity)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn recording_error(e: RecordingError) -> LabError {
    LabError::new(e.code(), e.to_string())
}

fn check_role(action: &Action, caller: &Caller) -> Result<(), LabError> {
    let need = action.role;
    let have = Role::highest_of(&caller.principal.roles);
    if have.is_some_and(|h| h >= need) {
        return Ok(());
    }
    let message = if !caller.principal.authenticated {
        format!(
            "`{}` needs the role `{need}`; the anonymous caller of an open-mode server has no role, so it can use no lab action: give the token a role (`auth.tokens` with `roles: [{need}]`) and call with it",
            action.op
        )
    } else {
        let has = have.map_or_else(
            || "no tier role (`viewer`, `operator` or `admin`)".to_owned(),
            |h| format!("the role `{h}`"),
        );
        format!(
            "`{}` needs the role `{need}`; `{}` has {has}; call as a principal with the role `{need}` or higher",
            action.op, caller.principal.id
        )
    };
    Err(LabError::new(codes::RBAC_DENIED, message))
}

/// A label (a variant, a scenario's name): 1 to 200 characters, no control character, not only
/// spaces.
pub fn is_label(v: &str) -> bool {
    let chars = v.chars().count();
    (1..=MAX_VARIANT_CHARS).contains(&chars)
        && !v.chars().any(char::is_control)
        && v.chars().any(|c| c != ' ')
}

pub(crate) fn check_variant(v: &str, field: &str) -> Result<String, LabError> {
    if !is_label(v) {
        return Err(LabError::invalid(format!(
            "`{field}` must be 1 to {MAX_VARIANT_CHARS} characters with no control characters, not only spaces (a label such as `candidate`)"
        )));
    }
    Ok(v.to_owned())
}

fn check_trials(t: Option<u32>) -> Result<u32, LabError> {
    match t.unwrap_or(1) {
        n @ 1..=MAX_TRIALS => Ok(n),
        n => Err(LabError::invalid(format!(
            "`trials` is {n}; ask for 1 to {MAX_TRIALS} (default 1)"
        ))),
    }
}

fn check_workers(w: Option<u32>) -> Result<usize, LabError> {
    match w {
        None => Ok(default_workers() as usize),
        Some(n @ 1..=MAX_COMPARE_WORKERS) => Ok(n as usize),
        Some(n) => Err(LabError::invalid(format!(
            "`workers` is {n}; ask for 1 to {MAX_COMPARE_WORKERS} runs at once, or omit it for the default (the number of CPUs, at most {MAX_COMPARE_WORKERS}); the verdict does not depend on it"
        ))),
    }
}

/// Refuses a request whose step executions would pass [`MAX_STEP_EXECUTIONS`].
pub(crate) fn check_executions(n: usize) -> Result<(), LabError> {
    if n > MAX_STEP_EXECUTIONS {
        return Err(LabError::invalid(format!(
            "this request would execute {n} steps (steps x trials, x2 sides and summed over the scenarios of a comparison); the limit is {MAX_STEP_EXECUTIONS}: ask for fewer `trials`, or split the scenarios. Nothing was run or recorded"
        )));
    }
    Ok(())
}

fn draft_of(body: &ScenarioBody) -> Result<ScenarioDraft, LabError> {
    let invalid = |m: String| LabError::new(codes::LAB_SCENARIO_INVALID, m);
    if body.name.chars().any(char::is_control) {
        return Err(invalid(
            "the scenario's `name` holds a control character; use a name of plain text".to_owned(),
        ));
    }
    if body.name.chars().count() > MAX_NAME_CHARS {
        return Err(invalid(format!(
            "the scenario's `name` is {} characters; the limit is {MAX_NAME_CHARS}: shorten it",
            body.name.chars().count()
        )));
    }
    let description = body.description.clone().unwrap_or_default();
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(invalid(format!(
            "the scenario's `description` is {} characters; the limit is {MAX_DESCRIPTION_CHARS}: shorten it",
            description.chars().count()
        )));
    }
    let steps = match (&body.steps, &body.samples) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "the scenario has both `steps` and `samples`; give one: `samples` (what generate answers) becomes one step per sample".to_owned(),
            ));
        }
        (Some(s), None) => s.clone(),
        (None, Some(samples)) => {
            Value::Array(samples.iter().map(|s| json!({"input": s.input})).collect())
        }
        (None, None) => Value::Array(Vec::new()),
    };
    let scenario = Scenario::from_json(&json!({
        "name": body.name,
        "description": description,
        "steps": steps,
        "mocks": body.mocks.clone().unwrap_or(Value::Array(Vec::new())),
    }))
    .map_err(|e| LabError::new(e.code, e.message))?;
    let v = scenario.to_json();
    Ok(ScenarioDraft {
        name: body.name.clone(),
        description,
        steps: v.get("steps").cloned().unwrap_or(Value::Null),
        mocks: v.get("mocks").cloned().unwrap_or(Value::Null),
    })
}

fn scenario_of(s: &store_lab::Scenario) -> Result<Scenario, LabError> {
    Scenario::from_json(&json!({
        "name": s.name,
        "description": s.description,
        "steps": s.steps,
        "mocks": s.mocks,
    }))
    .map_err(|e| LabError::new(e.code, format!("stored scenario {:?}: {}", s.id, e.message)))
}

/// A step no scorer judged.
const NOT_SCORED_STEP: StepScore = StepScore::NotScored {
    reason: crate::score::NotScored::NoExpected,
};

/// Whether the agent failed the step otherwise than by a mock miss (a refusal, a crash, a
/// timeout, an unusable answer): such a step fails its expected value whatever its (empty)
/// output, and no scorer is asked. A miss is scored on its marker, spec 003's expected
/// synthetic result.
fn failed_step(o: &crate::runner::StepOutput) -> bool {
    !o.ok && o.error != Some(codes::LAB_MOCK_MISS)
}

/// Scores every output of `report`, in order: a built-in in place, a command scorer by running
/// it once per output with an expected value (in the `linux` backend, no network; each sandbox's
/// attestation joins the run's). A command scorer's failure makes the run `failed` with that
/// error (corral's side, not the agent's), and the outputs after it are not scored.
async fn score_outputs(
    report: &mut RunReport,
    scenario: &Scenario,
    scorer: Option<&RunScorer>,
) -> Vec<StepScore> {
    let expected = |step: usize| {
        scenario
            .steps()
            .get(step.saturating_sub(1))
            .and_then(|s| s.expected.as_ref())
    };
    let mut scores = Vec::with_capacity(report.outputs.len());
    match scorer {
        None => {
            for o in &report.outputs {
                scores.push(
                    score_step(None, &o.input, &o.output, expected(o.step))
                        .unwrap_or(NOT_SCORED_STEP),
                );
            }
        }
        Some(RunScorer::Builtin(b)) => {
            for o in &report.outputs {
                let s = match (failed_step(o), expected(o.step)) {
                    (true, Some(_)) => Ok(StepScore::Scored(Scored::binary(false))),
                    _ => score_step(Some(b.as_ref()), &o.input, &o.output, expected(o.step)),
                };
                scores.push(s.unwrap_or(NOT_SCORED_STEP));
            }
        }
        Some(RunScorer::Command(c)) => {
            let attested = Mutex::new(Vec::new());
            let attest = |a: corral_exec::Attestation| {
                if let Ok(mut v) = attested.lock() {
                    v.push(crate::runner::Attested::from(a));
                }
            };
            let mut failure = None;
            for o in &report.outputs {
                let s = match (expected(o.step), &failure) {
                    (Some(_), None) if failed_step(o) => StepScore::Scored(Scored::binary(false)),
                    (Some(e), None) => match c.score(&o.input, &o.output, e, &attest).await {
                        Ok(x) => StepScore::Scored(x),
                        Err(err) => {
                            failure = Some(crate::runner::Failure {
                                step: o.step,
                                trial: o.trial,
                                code: err.code(),
                                message: err.to_string(),
                            });
                            NOT_SCORED_STEP
                        }
                    },
                    _ => NOT_SCORED_STEP,
                };
                scores.push(s);
            }
            for a in attested.into_inner().unwrap_or_default() {
                if !report.attestations.contains(&a) {
                    report.attestations.push(a);
                }
            }
            report.isolated &= report.attestations.iter().all(|a| a.isolated);
            report.destroyed &= report.attestations.iter().all(|a| a.destroyed);
            if let Some(f) = failure {
                report.status = crate::runner::RunStatus::Failed;
                report.infra_errors.push(f);
            }
        }
    }
    scores
}

/// The outputs to record (an output over the store's row limit is recorded as an error, not
/// kept), and each trial's score (`None` for a trial with an infrastructure error).
fn scored_outputs(
    report: &RunReport,
    scenario: &Scenario,
    scores: &[StepScore],
) -> (Vec<NewOutput>, Vec<Option<RunScore>>) {
    let mut outputs = Vec::with_capacity(report.outputs.len());
    let mut per_trial: Vec<Vec<StepScore>> = vec![Vec::new(); report.trials as usize];
    let mut infra = vec![false; report.trials as usize];
    for (i, o) in report.outputs.iter().enumerate() {
        let t = (o.trial as usize).saturating_sub(1);
        let too_large = o.input.len() + o.output.len() > store_lab::MAX_OUTPUT_BYTES;
        let (output, ok, error_code) = if too_large {
            (
                String::new(),
                false,
                Some(codes::LAB_OUTPUT_TOO_LARGE.to_owned()),
            )
        } else {
            (o.output.clone(), o.ok, o.error.map(str::to_owned))
        };
        let input = if too_large && o.input.len() > store_lab::MAX_OUTPUT_BYTES / 2 {
            String::new()
        } else {
            o.input.clone()
        };
        let s = match scores.get(i) {
            Some(s) if !too_large => *s,
            _ => NOT_SCORED_STEP,
        };
        if let Some(v) = per_trial.get_mut(t) {
            v.push(s);
        }
        let (score, pass) = match s {
            StepScore::Scored(x) => (Some(x.score()), Some(x.pass())),
            StepScore::NotScored { .. } => (None, None),
        };
        outputs.push(NewOutput {
            step: u32::try_from(o.step).unwrap_or(u32::MAX),
            trial: o.trial,
            input,
            output,
            ok,
            error_code,
            score,
            pass,
        });
    }
    // A trial with an infrastructure error, or one the run stopped before finishing (its
    // output cap), was not judged.
    for f in &report.infra_errors {
        if let Some(x) = infra.get_mut((f.trial as usize).saturating_sub(1)) {
            *x = true;
        }
    }
    for (steps, x) in per_trial.iter().zip(infra.iter_mut()) {
        *x |= steps.len() < scenario.steps().len();
    }
    let trials = per_trial
        .iter()
        .zip(infra)
        .map(|(steps, infra)| (!infra).then(|| RunScore::of_steps(steps)))
        .collect();
    (outputs, trials)
}

/// A scored run's trials that passed, and its pass@k and pass^k with k = its trials (with k = n:
/// 1 when any trial passed, and 1 when every trial did).
fn trial_passes(trials: &[Option<RunScore>]) -> TrialPasses {
    let stats = TrialStats::of_scores(trials);
    let k = stats.trials;
    TrialPasses {
        trials_passed: stats.passes,
        pass_at_k: stats.pass_at_k(k).unwrap_or(0.0),
        pass_hat_k: stats.pass_hat_k(k).unwrap_or(0.0),
    }
}

fn step_score_of(o: &NewOutput) -> StepScore {
    match o
        .score
        .zip(o.pass)
        .and_then(|(s, p)| crate::score::Scored::new(s, p))
    {
        Some(s) => StepScore::Scored(s),
        None => StepScore::NotScored {
            reason: crate::score::NotScored::NoExpected,
        },
    }
}

/// One side's result on one scenario: per scenario the score is the mean over trials (and
/// steps, within a trial); `None` when a trial without an infrastructure error was not scored.
fn observed_of(scenario: &str, trials: u32, scores: &[Option<RunScore>]) -> Observed {
    let infra_errors = scores.iter().filter(|s| s.is_none()).count() as u32;
    let usable: Vec<&RunScore> = scores.iter().flatten().collect();
    let mut sum = 0.0;
    let mut passes = 0;
    let mut scored = !usable.is_empty();
    for s in &usable {
        match s {
            RunScore::Scored(x) => {
                sum += x.score();
                passes += u32::from(x.pass());
            }
            RunScore::NotScored { .. } => scored = false,
        }
    }
    Observed {
        scenario: scenario.to_owned(),
        trials,
        infra_errors,
        scored: scored.then(|| ScoredTrials {
            score: (sum / usable.len() as f64).clamp(0.0, 1.0),
            passes,
        }),
    }
}
