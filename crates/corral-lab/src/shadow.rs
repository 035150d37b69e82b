//! Shadow evaluation (issue 15 items 3-5, spec 001): M recorded tasks re-run under N agent
//! variants, N*M replay runs with the real tools inside the isolation backend (the
//! [`ReplayLab`]: unsafe ops structurally absent), each a normal lab run of purpose `replay`.
//!
//! **Before anything runs**, in this order: every variant passes the load-time check (a
//! workflow's steps, an external program's `tools:` list: the first unsafe or unknown op is
//! named, `replay.unsafe_op` / `replay.unknown_op`; a program without a `tools:` list is
//! `replay.tools_undeclared`); the cost is announced (N*M over [`CONFIRM_THRESHOLD`] needs
//! `expected_runs` equal to it, else `replay.confirm_needed` with the count); the caller must be
//! allowed to read every task's recording (admin, or its own principal), and every recording must
//! hold a task input. A refusal at any of these leaves no run, no shadow row, nothing metered.
//!
//! **Re-execution is of the task input, never the recorded trajectory.** Each run executes the
//! task's steps (`LabService::task_scenario`) with the variant's agent against the real tools.
//! Its calls are compared with the recorded timeline afterwards: the first divergence (its step
//! in the call timeline, the op and args hash called there, and what the recording has there) is
//! reported, and the run itself went on past it to a complete episode (every step has an output).
//! A recording whose timeline cannot be put in order is reported `degraded` with no divergence.
//!
//! **Ceilings** (`budgets.replay`: `max_runs`, `max_calls`, per evaluation) count replay runs
//! and their gateway calls only, never the judge's ceiling (`budgets.judge`, handed to the
//! tournament through `LabService::max_judge_calls`). When the next run would pass `max_runs`,
//! or the calls reach `max_calls`, scheduling stops: the pairs that did not run are listed in
//! `not_run` and the status is `stopped_by_ceiling`, never a silent truncation. A run's own calls
//! are capped at what is left of `max_calls` (its gateway's per-run budget), so one run cannot
//! pass the ceiling either. The metering is per purpose; model tokens and spend are not known to
//! corral yet and are `null` (unknown), never 0.
//!
//! Runs execute one at a time, variant by variant, task by task (the order of the request): the
//! call ceiling is checked between runs, so it is exact.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use corral_exec::BoxFuture;
use corral_guard::args::args_hash;
use corral_guard::recording::{Recorded, RecordedCall, Recorder, RecorderError, RecordingKey};
use corral_guard::runs::RunPurpose;
use corral_guard::{Caller, Deployment, now_ms};
use corral_policy::{Engine, Role, codes};
use corral_store::recording::RecordingEvent;
use corral_store::shadow::{Shadow, ShadowProgress};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::replay::{self, ReplayLab};
use crate::service::{
    Action, LabError, LabService, PageQuery, Runnable, VariantBody, audited_id, check_variant,
    clip, not_found,
};
use crate::task::{RecordedTask, Timeline, timeline};
use crate::variant::{self, Resolved};
use crate::workflow::Workflow;
use crate::world::World;

/// Above this many runs (N variants x M tasks) the request must announce the count
/// (`expected_runs`), and the CLI asks for confirmation.
pub const CONFIRM_THRESHOLD: u64 = 10;
/// The most recorded tasks one evaluation may name.
pub const MAX_SHADOW_TASKS: usize = 100;
/// The most variants one evaluation may name.
pub const MAX_SHADOW_VARIANTS: usize = 20;

pub(crate) const SHADOW_RUN: Action = Action {
    op: "sandbox.shadows.run",
    role: Role::Operator,
};
pub(crate) const SHADOWS_LIST: Action = Action {
    op: "sandbox.shadows.list",
    role: Role::Viewer,
};
pub(crate) const SHADOWS_GET: Action = Action {
    op: "sandbox.shadows.get",
    role: Role::Viewer,
};

/// The replay and judge ceilings (`budgets.replay`, `budgets.judge`): separate, so replay
/// runs, which dominate the cost, can never spend the grading budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceilings {
    /// Replay runs per shadow evaluation.
    pub replay_max_runs: u64,
    /// Gateway calls of replay runs, summed over one shadow evaluation.
    pub replay_max_calls: u64,
    /// Judge calls per tournament.
    pub judge_max_calls: u64,
}

impl Default for Ceilings {
    /// The safe defaults: 100 replay runs and 10,000 of their calls; 1,000 judge calls.
    fn default() -> Self {
        Self {
            replay_max_runs: 100,
            replay_max_calls: 10_000,
            judge_max_calls: 1_000,
        }
    }
}

/// A shadow evaluation to run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowBody {
    /// The recorded tasks: run ids of recordings that kept their task input.
    pub tasks: Vec<String>,
    /// The variants: each a label and a `workflow` (YAML) or a `program` (declared).
    pub variants: Vec<VariantBody>,
    /// The seed of every run (default 0).
    #[serde(default)]
    pub seed: Option<u64>,
    /// The scorer of every run (`exact`, `regex`, `json_path`, `command:<name>`); absent:
    /// executed, not scored.
    #[serde(default)]
    pub scorer: Option<String>,
    /// N*M, the runs this will make, as the caller read it: required when it is over
    /// [`CONFIRM_THRESHOLD`], and when given it must be exact.
    #[serde(default)]
    pub expected_runs: Option<u64>,
    /// Whose recording of each task (its identity, or the principal's id), when several
    /// principals recorded under a run id: an admin's pick, as `?principal=` on reads
    /// (`recording.ambiguous` without it).
    #[serde(default)]
    pub principal: Option<String>,
}

/// Where a replay run first left the recorded timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The place in the call timeline, from 1 (the recording's `seq`).
    pub step: u64,
    /// The op the replay called there; `null`: it made no call there (the recording has more).
    pub op: Option<String>,
    /// The SHA-256 of that call's canonical arguments.
    pub args_hash: Option<String>,
    /// What the recording has there; `null`: nothing (the replay made more calls).
    pub recorded: Option<CallAt>,
}

/// One call of a timeline: its op and args hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallAt {
    /// The op.
    pub op: String,
    /// The SHA-256 of its canonical arguments.
    pub args_hash: String,
}

/// One replay run of a shadow evaluation, as its report lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowRun {
    /// The variant's label.
    pub variant: String,
    /// The recorded task (its run id).
    pub task: String,
    /// The lab run (purpose `replay`).
    pub run_id: String,
    /// The lab scenario it ran (the task's).
    pub scenario_id: String,
    /// The run's status (`completed` or `failed`).
    pub status: String,
    /// Steps executed, and how many succeeded: a complete episode has every step.
    pub steps_total: u64,
    /// Steps that succeeded.
    pub steps_ok: u64,
    /// The gateway calls it made.
    pub calls: u64,
    /// `ordered` (compared call by call) or `degraded` (the recording's timeline cannot be put
    /// in order, so there is nothing to compare with).
    pub timeline: String,
    /// Why the timeline is degraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// The first divergence from the recorded timeline; `null`: none, degraded, or withheld.
    pub divergence: Option<Divergence>,
    /// Whether it left the recorded timeline: what everyone who reads the evaluation sees.
    #[serde(default)]
    pub diverged: bool,
    /// The identity of the task's recording's principal: only it or an admin sees the
    /// divergence (its op and args hash are drawn from the recording's values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The divergence is withheld from this reader (neither the recording's principal nor an
    /// admin): `divergence` is `null`, `diverged` says whether there was one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withheld: bool,
}

impl ShadowRun {
    /// The run as `caller` may read it: the divergence (the recording's op and args hash there,
    /// and what the replay called) only for the recording's principal or an admin; anyone
    /// else sees whether it diverged. A run without an owner (an evaluation stored before
    /// owners were kept) is an admin's to read in full.
    fn read_by(mut self, caller: &Caller) -> Self {
        let may = match &self.owner {
            Some(o) => crate::service::may_read_owned(caller, Some(o)),
            None => crate::service::is_admin(caller),
        };
        if !may {
            self.diverged |= self.divergence.is_some();
            self.divergence = None;
            self.withheld = true;
        }
        self
    }
}

/// `shadow` as `caller` may read it: each run of its report through [`ShadowRun::read_by`]
/// (a run the report cannot parse is dropped for anyone but an admin: fail closed), and the
/// report's count of runs that diverged.
fn shadow_read_by(mut shadow: Shadow, caller: &Caller) -> Shadow {
    let Some(runs) = shadow.report.get_mut("runs").and_then(Value::as_array_mut) else {
        return shadow;
    };
    let read: Vec<Value> = runs
        .drain(..)
        .filter_map(|r| match serde_json::from_value::<ShadowRun>(r.clone()) {
            Ok(run) => serde_json::to_value(run.read_by(caller)).ok(),
            Err(_) => crate::service::is_admin(caller).then_some(r),
        })
        .collect();
    *runs = read;
    shadow
}

/// Runs, calls, model tokens and spend of one purpose (the metering's: tokens and spend `null`
/// while unknown).
pub use corral_guard::metering::Metered;

/// What a shadow evaluation's runs were metered as, per purpose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Metering {
    /// The replay runs (this evaluation's, all of them).
    pub replay: Metered,
    /// Judge calls (the tournament's, when it grades this group; 0 here).
    pub judge: Metered,
}

/// A progress report while an evaluation runs: runs finished of planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Runs finished (or stopped).
    pub done: u64,
    /// N*M.
    pub planned: u64,
}

/// A variant checked and resolved.
struct Checked {
    label: String,
    agent: Resolved,
}

/// An evaluation checked and stored, not yet run.
struct Accepted {
    shadow: Shadow,
    variants: Vec<Checked>,
    tasks: Vec<Task>,
    scorer: Option<variant::RunScorer>,
    seed: u64,
}

/// A task read and ready: its recording's timeline and its scenario.
struct Task {
    run_id: String,
    /// The identity of its recording's principal.
    owner: String,
    stored: corral_store::lab::Scenario,
    scenario: crate::scenario::Scenario,
    timeline: Result<Vec<RecordingEvent>, String>,
}

/// The calls one replay run made, as its gateway decided them (a [`Recorder`] in memory).
#[derive(Debug, Default)]
struct Capture(Mutex<Vec<RecordedCall>>);

impl Capture {
    fn calls(&self) -> Vec<RecordedCall> {
        self.0.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Recorder for Capture {
    fn admit<'a>(
        &'a self,
        _key: &'a RecordingKey,
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<(), corral_guard::recording::AdmitRefusal>> {
        // In memory, for one run: always room.
        Box::pin(async { Ok(()) })
    }

    fn record<'a>(
        &'a self,
        _key: &'a RecordingKey,
        call: &'a RecordedCall,
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<Recorded, RecorderError>> {
        Box::pin(async move {
            let mut c = self
                .0
                .lock()
                .map_err(|_| RecorderError("the call capture is poisoned".to_owned()))?;
            c.push(call.clone());
            Ok(Recorded::Stored {
                seq: c.len() as u64,
            })
        })
    }

    fn mark_gapped<'a>(
        &'a self,
        _key: &'a RecordingKey,
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<(), RecorderError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The first place where `replayed` leaves `recorded` (op or args hash), if any.
pub fn first_divergence(replayed: &[CallAt], recorded: &[CallAt]) -> Option<Divergence> {
    let n = replayed.len().max(recorded.len());
    (0..n).find_map(|i| {
        let (a, b) = (replayed.get(i), recorded.get(i));
        (a != b).then(|| Divergence {
            step: i as u64 + 1,
            op: a.map(|c| c.op.clone()),
            args_hash: a.map(|c| c.args_hash.clone()),
            recorded: b.cloned(),
        })
    })
}

fn call_of_event(e: &RecordingEvent) -> CallAt {
    CallAt {
        op: e.op.clone(),
        args_hash: args_hash(&e.args),
    }
}

fn call_of_recorded(c: &RecordedCall) -> CallAt {
    let args: Value = serde_json::from_str(&c.args).unwrap_or(Value::Null);
    CallAt {
        op: c.op.clone(),
        args_hash: args_hash(&args),
    }
}

/// The load-time check of one variant against the base deployment's catalog, before anything
/// runs; the variant's label is named with the tool.
fn eligible(
    v: &VariantBody,
    label: &str,
    catalog: &corral_policy::Catalog,
    programs: &crate::program::Programs,
) -> Result<(), LabError> {
    let named = |e: corral_ops::replay::Ineligible| {
        LabError::new(
            e.code,
            format!(
                "variant `{label}` is ineligible for shadow evaluation: {}. Nothing was run",
                e.message
            ),
        )
    };
    match (&v.workflow, &v.program) {
        (Some(_), Some(_)) => Err(LabError::invalid(format!(
            "variant `{label}` has both a `workflow` and a `program`; give one"
        ))),
        (Some(src), None) => {
            let wf = Workflow::from_yaml(src).map_err(|e| {
                LabError::new(
                    e.code,
                    format!("variant `{label}`'s workflow: {}", e.message),
                )
            })?;
            replay::eligible(catalog, wf.tools()).map_err(named)
        }
        (None, Some(name)) => {
            let Some(spec) = programs.agents.get(name) else {
                // The resolution that follows names what is declared.
                return Ok(());
            };
            let Some(tools) = &spec.tools else {
                return Err(LabError::new(
                    codes::REPLAY_TOOLS_UNDECLARED,
                    format!(
                        "variant `{label}` is ineligible for shadow evaluation: program `{}` declares no `tools:` list, so what it may call is unknown and cannot be checked before it runs; add `tools: [op, ...]` to `sandbox.programs.{}` in the config (every op replay-safe). Nothing was run",
                        clip(name),
                        clip(name)
                    ),
                ));
            };
            replay::eligible(catalog, tools.iter().map(String::as_str)).map_err(named)
        }
        (None, None) => Err(LabError::new(
            codes::REPLAY_VARIANT_INVALID,
            format!(
                "variant `{label}` names neither a `workflow` nor a `program`; the identity agent only answers from a scenario's mocks, which a replay does not have: give it a workflow (YAML) or a declared program. Nothing was run"
            ),
        )),
    }
}

/// A deployment like `base` whose per-run call budget is at most `cap` (what is left of the
/// replay ceiling), so one run cannot pass it.
fn capped(base: &Deployment, cap: u64) -> Deployment {
    let mut guard = base.guard.clone();
    let own = guard.budgets.max_calls;
    guard.budgets.max_calls = if own == 0 { cap } else { own.min(cap) };
    Deployment {
        engine: Engine::new(base.engine.catalog().clone(), base.engine.policy().clone()),
        registry: base.registry.clone(),
        protected: base.protected.clone(),
        guard,
    }
}

/// How many runs `body` plans, or why it cannot: the announcement check.
pub fn check_announced(planned: u64, expected: Option<u64>) -> Result<(), LabError> {
    let announced = expected == Some(planned);
    if announced || (expected.is_none() && planned <= CONFIRM_THRESHOLD) {
        return Ok(());
    }
    let why = match expected {
        Some(e) => format!("`expected_runs` is {e}, and"),
        None => format!("that is over {CONFIRM_THRESHOLD}, and no `expected_runs` was sent;"),
    };
    Err(LabError::new(
        codes::REPLAY_CONFIRM_NEEDED,
        format!(
            "this shadow evaluation is {planned} full agent runs (N variants x M tasks); {why} the count must be announced before anything runs: send `expected_runs: {planned}` (the CLI: pass `--yes` after reading the count). Nothing was run"
        ),
    ))
}

impl LabService {
    /// Runs a shadow evaluation (operator; the caller must be allowed to read every task's
    /// recording): N*M replay runs, stored and answered with their divergences and metering.
    pub async fn shadow(
        &self,
        caller: &Caller,
        rid: &str,
        body: ShadowBody,
    ) -> Result<Shadow, LabError> {
        self.shadow_with_progress(caller, rid, body, &|_| {}).await
    }

    /// [`LabService::shadow`], calling `progress` after each run (for a progress bar).
    pub async fn shadow_with_progress(
        &self,
        caller: &Caller,
        rid: &str,
        body: ShadowBody,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Shadow, LabError> {
        let r = async {
            self.start(&SHADOW_RUN, caller)?;
            let accepted = self.accept_shadow(caller, body).await?;
            self.run_shadow(caller, accepted, progress).await
        }
        .await;
        let detail = r.as_ref().ok().map(|s| {
            format!(
                "shadow={} planned={} ran={} status={}",
                s.id, s.planned, s.ran, s.status
            )
        });
        self.finish(&SHADOW_RUN, caller, rid, r, detail, None).await
    }

    /// Starts a shadow evaluation in the background (operator; what `POST /v1/sandbox/shadows`
    /// does): everything is checked, and the evaluation stored `running`, before this answers;
    /// its runs then execute on a tokio task and `GET /v1/sandbox/shadows/{id}` shows their
    /// progress (`ran` of `planned`) and, when it ends, the report. The audit event (one, as for
    /// every action) is written at acceptance, with the evaluation's id and planned count.
    pub async fn spawn_shadow(
        self: &Arc<Self>,
        caller: &Caller,
        rid: &str,
        body: ShadowBody,
    ) -> Result<Shadow, LabError> {
        let r = async {
            self.start(&SHADOW_RUN, caller)?;
            self.accept_shadow(caller, body).await
        }
        .await;
        let detail = r
            .as_ref()
            .ok()
            .map(|a| format!("shadow={} planned={}", a.shadow.id, a.shadow.planned));
        let accepted = self
            .finish(&SHADOW_RUN, caller, rid, r, detail, None)
            .await?;
        let shadow = accepted.shadow.clone();
        let (lab, caller) = (Arc::clone(self), caller.clone());
        tokio::spawn(async move {
            // The outcome is stored in the evaluation's row (`failed` with its error).
            let _ = lab.run_shadow(&caller, accepted, &|_| {}).await;
        });
        Ok(shadow)
    }

    /// A page of the tenant's shadow evaluations, newest first (viewer).
    pub async fn list_shadows(
        &self,
        caller: &Caller,
        rid: &str,
        page: &PageQuery,
    ) -> Result<corral_store::lab::Paged<Shadow>, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&SHADOWS_LIST, caller)?;
            let mut page = self.store().list_shadows(&tenant, &page.page()?).await?;
            page.items = page
                .items
                .into_iter()
                .map(|s| shadow_read_by(s, caller))
                .collect();
            Ok(page)
        }
        .await;
        self.finish(&SHADOWS_LIST, caller, rid, r, None, None).await
    }

    /// A shadow evaluation of the tenant (viewer): while it runs, its progress so far.
    pub async fn get_shadow(
        &self,
        caller: &Caller,
        rid: &str,
        id: &str,
    ) -> Result<Shadow, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&SHADOWS_GET, caller)?;
            self.store()
                .get_shadow(&tenant, id)
                .await?
                .map(|s| shadow_read_by(s, caller))
                .ok_or_else(|| not_found("shadow evaluation", &tenant, id))
        }
        .await;
        let detail = Some(format!("shadow={}", audited_id(id)));
        self.finish(&SHADOWS_GET, caller, rid, r, detail, None)
            .await
    }

    /// Everything checked before anything runs (the request's shape, every variant's
    /// eligibility and agent, the scorer, the announced count, every task's recording), then
    /// the evaluation stored `running`.
    async fn accept_shadow(&self, caller: &Caller, body: ShadowBody) -> Result<Accepted, LabError> {
        if body.tasks.is_empty() || body.tasks.len() > MAX_SHADOW_TASKS {
            return Err(LabError::invalid(format!(
                "`tasks` has {} run ids; give 1 to {MAX_SHADOW_TASKS} recorded runs (`corral sandbox recordings list`)",
                body.tasks.len()
            )));
        }
        if body.variants.is_empty() || body.variants.len() > MAX_SHADOW_VARIANTS {
            return Err(LabError::invalid(format!(
                "`variants` has {} entries; give 1 to {MAX_SHADOW_VARIANTS}",
                body.variants.len()
            )));
        }
        let mut seen = HashSet::new();
        if let Some(dup) = body.tasks.iter().find(|t| !seen.insert(t.as_str())) {
            return Err(LabError::invalid(format!(
                "task {:?} is listed twice in `tasks`; list each once",
                clip(dup)
            )));
        }
        let mut labels = Vec::with_capacity(body.variants.len());
        for (i, v) in body.variants.iter().enumerate() {
            let label = check_variant(&v.variant, &format!("variants[{i}].variant"))?;
            if labels.contains(&label) {
                return Err(LabError::new(
                    codes::REPLAY_VARIANT_INVALID,
                    format!(
                        "variant `{label}` is listed twice in `variants`; give each a distinct label"
                    ),
                ));
            }
            labels.push(label);
        }
        // Load-time eligibility of every variant, before anything else is read or run.
        let base = self.gateway().deployment();
        let programs = self.programs();
        for (v, label) in body.variants.iter().zip(&labels) {
            eligible(v, label, base.engine.catalog(), &programs)?;
        }
        let mut checked = Vec::with_capacity(labels.len());
        for (v, label) in body.variants.iter().zip(labels) {
            let agent = variant::agent_of(
                v.workflow.as_deref(),
                v.program.as_deref(),
                None,
                &programs,
                self.program_links(),
            )
            .map_err(|e| LabError::new(e.code, format!("variant `{label}`: {}", e.message)))?;
            checked.push(Checked { label, agent });
        }
        let scorer = variant::scorer_of(body.scorer.as_deref(), &programs)?;
        let planned = (checked.len() as u64).saturating_mul(body.tasks.len() as u64);
        check_announced(planned, body.expected_runs)?;
        let tenant = self.tenant_of(caller);
        // Every recording is read (and its access checked) before any scenario is written.
        let mut read = Vec::with_capacity(body.tasks.len());
        for run_id in &body.tasks {
            let view = self
                .read_recording(caller, run_id, body.principal.as_deref())
                .await?;
            let task = RecordedTask::of(&view)?;
            let timeline = match timeline(&view) {
                Timeline::Ordered(events) => Ok(events.to_vec()),
                Timeline::Degraded(why) => Err(why),
            };
            if let Some(s) = &scorer {
                s.check_expected(&task.scenario)?;
            }
            read.push((task, view.recording.identity, timeline));
        }
        let steps: usize = read.iter().map(|(t, _, _)| t.scenario.steps().len()).sum();
        let body = &body;
        crate::service::check_executions(steps.saturating_mul(checked.len()))?;
        let mut tasks = Vec::with_capacity(read.len());
        for (task, owner, timeline) in read {
            let stored = self.task_scenario(&tenant, &task, &owner).await?;
            tasks.push(Task {
                run_id: task.run_id,
                owner,
                stored,
                scenario: task.scenario,
                timeline,
            });
        }
        let labels: Vec<String> = checked.iter().map(|v| v.label.clone()).collect();
        let shadow = self
            .store()
            .create_shadow(
                &tenant,
                &caller.principal.id,
                &body.tasks,
                &labels,
                planned,
                now_ms(),
            )
            .await?;
        Ok(Accepted {
            shadow,
            variants: checked,
            tasks,
            scorer,
            seed: body.seed.unwrap_or(0),
        })
    }

    /// Executes the planned runs, variant by variant and task by task, within the ceilings.
    async fn run_shadow(
        &self,
        caller: &Caller,
        accepted: Accepted,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Shadow, LabError> {
        let Accepted {
            shadow,
            variants,
            tasks,
            scorer,
            seed,
        } = accepted;
        let tenant = self.tenant_of(caller);
        let ceilings = self.ceilings();
        let planned = shadow.planned;
        let labels = shadow.variants.clone();
        let mut runs = serde_json::Map::new();
        for t in &tasks {
            let per: serde_json::Map<String, Value> =
                labels.iter().map(|l| (l.clone(), Value::Null)).collect();
            runs.insert(
                t.run_id.clone(),
                json!({"scenario_id": t.stored.id, "runs": per}),
            );
        }
        let mut reported: Vec<ShadowRun> = Vec::new();
        let mut not_run: Vec<Value> = Vec::new();
        let mut metering = Metering::default();
        let mut stopped_by: Option<&'static str> = None;
        let mut failure: Option<LabError> = None;
        let executor = self.executor();
        let base = self.gateway().deployment();
        for v in &variants {
            for t in &tasks {
                if stopped_by.is_none() && failure.is_none() {
                    if metering.replay.runs.saturating_add(1) > ceilings.replay_max_runs {
                        stopped_by = Some("budgets.replay.max_runs");
                    } else if metering.replay.calls >= ceilings.replay_max_calls {
                        stopped_by = Some("budgets.replay.max_calls");
                    }
                }
                if stopped_by.is_some() || failure.is_some() {
                    not_run.push(json!({"variant": v.label, "task": t.run_id}));
                    continue;
                }
                let left = ceilings
                    .replay_max_calls
                    .saturating_sub(metering.replay.calls);
                let (run, charged) = match self
                    .replay_run(caller, &executor, &base, left, v, t, scorer.as_ref(), seed)
                    .await
                {
                    Ok(x) => x,
                    Err(e) => {
                        failure = Some(e);
                        not_run.push(json!({"variant": v.label, "task": t.run_id}));
                        continue;
                    }
                };
                metering.replay.runs += 1;
                metering.replay.calls = metering.replay.calls.saturating_add(charged);
                if let Some(per) = runs
                    .get_mut(&t.run_id)
                    .and_then(|e| e.get_mut("runs"))
                    .and_then(Value::as_object_mut)
                {
                    per.insert(v.label.clone(), Value::String(run.run_id.clone()));
                }
                reported.push(run);
                let p = progress_of(
                    "running", &metering, &runs, &not_run, &reported, &ceilings, None, false,
                );
                // Progress is best effort; the final write below is not.
                let _ = self
                    .store()
                    .update_shadow(&tenant, &shadow.id, &p, now_ms())
                    .await;
                progress(Progress {
                    done: metering.replay.runs,
                    planned,
                });
            }
        }
        let status = match (&failure, stopped_by) {
            (Some(_), _) => "failed",
            (None, Some(_)) => "stopped_by_ceiling",
            (None, None) => "completed",
        };
        let error = failure
            .as_ref()
            .map(|e| json!({"code": e.code, "message": e.message}));
        let p = progress_of(
            status,
            &metering,
            &runs,
            &not_run,
            &reported,
            &ceilings,
            stopped_by.map(|s| json!(s)).or(error),
            true,
        );
        self.store()
            .update_shadow(&tenant, &shadow.id, &p, now_ms())
            .await?;
        progress(Progress {
            done: planned,
            planned,
        });
        if let Some(e) = failure {
            return Err(e);
        }
        self.store()
            .get_shadow(&tenant, &shadow.id)
            .await?
            .ok_or_else(|| not_found("shadow evaluation", &tenant, &shadow.id))
    }

    /// One replay run of `t` by `v`, its calls capped at `left` (what is left of the replay
    /// call ceiling): the run as reported, and the calls it was charged (a call the budget
    /// refused is not).
    #[allow(clippy::too_many_arguments)]
    async fn replay_run(
        &self,
        caller: &Caller,
        executor: &crate::service::Executor,
        base: &Deployment,
        left: u64,
        v: &Checked,
        t: &Task,
        scorer: Option<&variant::RunScorer>,
        seed: u64,
    ) -> Result<(ShadowRun, u64), LabError> {
        let lab = ReplayLab::new(
            &capped(base, left),
            Arc::clone(self.gateway().backend()),
            self.gateway().sinks().to_vec(),
            self.gateway().tenant(),
        )
        .metered(Arc::clone(self.gateway().meter()));
        let capture = Arc::new(Capture::default());
        let gateway = lab.gateway().with_recorder(capture.clone());
        let backend = gateway.backend().name();
        let principal = caller.principal.clone();
        let scenario = &t.scenario;
        let world = move |run_id: &str| {
            World::over(gateway, scenario, run_id, principal)
                .map(World::recorded)
                .map_err(|e| LabError::new(e.code, e.message))
        };
        let run = Runnable {
            stored: &t.stored,
            scenario: &t.scenario,
            variant: &v.label,
            agent: &v.agent,
            scorer,
            seed,
            trials: 1,
        };
        let tenant = self.tenant_of(caller);
        let x = executor
            .execute_in(caller, &tenant, &run, RunPurpose::Replay, backend, world)
            .await?;
        let calls = capture.calls();
        let charged = calls
            .iter()
            .filter(|c| c.error_code.as_deref() != Some(codes::BUDGET_EXHAUSTED))
            .count() as u64;
        let replayed: Vec<CallAt> = calls.iter().map(call_of_recorded).collect();
        let (timeline, degraded, divergence) = match &t.timeline {
            Ok(events) => {
                let recorded: Vec<CallAt> = events.iter().map(call_of_event).collect();
                ("ordered", None, first_divergence(&replayed, &recorded))
            }
            Err(why) => ("degraded", Some(why.clone()), None),
        };
        let run = ShadowRun {
            variant: v.label.clone(),
            task: t.run_id.clone(),
            run_id: x.run.id.clone(),
            scenario_id: t.stored.id.clone(),
            status: x.run.status.as_str().to_owned(),
            steps_total: x.run.steps_total,
            steps_ok: x.run.steps_ok,
            calls: calls.len() as u64,
            timeline: timeline.to_owned(),
            degraded,
            diverged: divergence.is_some(),
            divergence,
            owner: Some(t.owner.clone()),
            withheld: false,
        };
        Ok((run, charged))
    }
}

/// The stored state of an evaluation: its status, runs, pairs not run and report.
#[allow(clippy::too_many_arguments)]
fn progress_of(
    status: &str,
    metering: &Metering,
    runs: &serde_json::Map<String, Value>,
    not_run: &[Value],
    reported: &[ShadowRun],
    ceilings: &Ceilings,
    stopped: Option<Value>,
    finished: bool,
) -> ShadowProgress {
    let (stopped_by, error) = match stopped {
        Some(Value::String(s)) => (Some(s), None),
        Some(other) => (None, Some(other)),
        None => (None, None),
    };
    ShadowProgress {
        status: status.to_owned(),
        ran: metering.replay.runs,
        runs: Value::Object(runs.clone()),
        not_run: Value::Array(not_run.to_vec()),
        report: json!({
            "runs": reported,
            "metering": metering,
            "ceilings": {
                "replay": {"max_runs": ceilings.replay_max_runs, "max_calls": ceilings.replay_max_calls},
                "judge": {"max_calls": ceilings.judge_max_calls},
            },
            "stopped_by": stopped_by,
            "error": error,
        }),
        finished,
    }
}
