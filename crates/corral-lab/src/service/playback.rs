//! `LabService::replay`: deterministic replay of a recorded run (issue 15 item 2,
//! `corral sandbox replay RUN_ID [--variant V]`, `POST /v1/sandbox/recordings/{run}/replay`).
//!
//! The recording is read with the same access as reading it (the `admin` role or the run's own
//! principal), and the action needs the `operator` role, like any run. A timeline that cannot
//! be put in order is answered `degraded` with zero steps and the reason, and no run is made.
//! Otherwise one lab run (purpose `replay`) is executed in a playback world (the recording's
//! responses answer every call; `crate::playback`):
//! - without a variant, the recording's trajectory: step `n` re-issues its `n`-th call through
//!   the current deployment's guard chain, on a scenario made of those steps; the answer says
//!   whether every output equals the recorded one byte for byte, and which steps differ;
//! - with a variant (a workflow, a program, or `identity`), the recorded task input (the
//!   recording's `input`) on its scenario; each call the recording lacks is a divergence,
//!   reported with its step, op, arguments hash and what the recording expected there, and the
//!   run goes on.

use std::sync::Arc;

use corral_guard::{Caller, now_ms};
use corral_policy::codes;
use corral_store::lab::{self as store_lab, ScenarioDraft};
use serde::{Deserialize, Serialize};
use serde_json::json;

use corral_guard::runs::RunPurpose;

use super::{
    Action, LabError, LabService, RecordingView, Runnable, audited_id, check_variant, clip,
    recording_error,
};
use crate::playback::{Expected, Playback, Trajectory, recorded_output};
use crate::scenario::Scenario;
use crate::task::{RecordedTask, Timeline, timeline};
use crate::variant::{self, Resolved};
use corral_guard::recording::RecordingKey;
use corral_store::recording::Recording;

pub(super) const REPLAY: Action = Action {
    op: "sandbox.replay",
    role: corral_policy::Role::Operator,
};

// Access is the recording's own principal (or an admin, for a recording that exists): the role
// is what a refusal is audited with.
const SET_INPUT: Action = Action {
    op: "sandbox.recordings.input",
    role: corral_policy::Role::Viewer,
};

/// A live session's task input, as `PUT /v1/sandbox/recordings/{run}/input` takes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputBody {
    /// `[{input, expected?}]`: the task, as a scenario's steps.
    pub steps: serde_json::Value,
}

/// A deterministic replay to make.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// The label of the variant to re-run the recorded task with; absent (with no `workflow` or
    /// `program`): the recording's own trajectory.
    #[serde(default)]
    pub variant: Option<String>,
    /// The variant's workflow YAML.
    #[serde(default)]
    pub workflow: Option<String>,
    /// The variant's external program (a name under `sandbox.programs`).
    #[serde(default)]
    pub program: Option<String>,
    /// The seed (default 0).
    #[serde(default)]
    pub seed: Option<u64>,
}

/// Whether a replay ran, or why it could not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayStatus {
    /// The run was made.
    Replayed,
    /// The recording's timeline cannot be put in order: zero steps, no run.
    Degraded,
}

/// A call a replayed run made that its recording lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// The step, from 1.
    pub step: usize,
    /// The op called.
    pub op: String,
    /// SHA-256 of its canonical arguments.
    pub args_hash: String,
    /// The recording's next call not yet taken there; `null` when it was used up.
    pub expected: Option<Expected>,
}

/// What a deterministic replay answers.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The recorded run's id.
    pub recording: String,
    /// `replayed` or `degraded`.
    pub status: ReplayStatus,
    /// Why it is degraded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Steps executed (0 when degraded).
    pub steps: u64,
    /// The replay's run (purpose `replay`); `null` when degraded.
    pub run: Option<store_lab::Run>,
    /// The calls the recording lacked, in order.
    pub divergences: Vec<Divergence>,
    /// A trajectory replay: whether every step's output equals the recorded one byte for
    /// byte. `null` for a variant (its outputs are its own).
    pub identical: Option<bool>,
    /// A trajectory replay: the steps whose output differs from the recorded one.
    pub differing_steps: Vec<usize>,
}

impl LabService {
    /// Keeps `body` as the task input of the recording of `run_id` (once): by a run-scoped
    /// caller of that run (creating its recording if its first call has not come yet), or by
    /// whoever may read the recording (its principal, an admin) once it exists. What a variant replay re-runs the task from.
    pub async fn set_recording_input(
        &self,
        caller: &Caller,
        rid: &str,
        run_id: &str,
        body: InputBody,
    ) -> Result<Recording, LabError> {
        let r = async {
            self.start(&SET_INPUT, caller)?;
            let tenant = self.tenant_of(caller);
            let steps = Scenario::from_json(&json!({"name": "input", "steps": body.steps}))
                .map_err(|e| LabError::new(e.code, e.message))?
                .to_json()["steps"]
                .clone();
            // A run-scoped caller sets its own run's input (creating its recording); anyone
            // else only that of a recording they may read (their own, or an admin's pick), so
            // no one can claim a run id another principal has not recorded yet.
            let key = if caller.run.as_deref() == Some(run_id) {
                RecordingKey {
                    tenant: tenant.clone(),
                    run_id: run_id.to_owned(),
                    identity: caller.principal.identity(),
                    principal: caller.principal.id.clone(),
                    purpose: corral_guard::runs::RunPurpose::Live,
                }
            } else {
                let r = self.read_recording(caller, run_id, None).await?.recording;
                RecordingKey {
                    tenant: tenant.clone(),
                    run_id: run_id.to_owned(),
                    identity: r.identity,
                    principal: r.principal,
                    purpose: r.purpose,
                }
            };
            self.store
                .set_recording_input(&key, &json!({"steps": steps}), now_ms())
                .await
                .map_err(recording_error)?;
            self.store
                .get_recording(&tenant, run_id, &key.identity)
                .await
                .map_err(recording_error)?
                .ok_or_else(|| {
                    LabError::new(
                        codes::RECORDING_NOT_FOUND,
                        "the recording was deleted while its input was set",
                    )
                })
        }
        .await;
        let detail = Some(format!("recording={}", audited_id(run_id)));
        self.finish(&SET_INPUT, caller, rid, r, detail, super::run_of(run_id))
            .await
    }

    /// Replays the recording of `run_id` deterministically (operator, and the recording's own
    /// principal or an admin).
    pub async fn replay(
        &self,
        caller: &Caller,
        rid: &str,
        run_id: &str,
        body: ReplayBody,
    ) -> Result<ReplayReport, LabError> {
        let r = async {
            self.start(&REPLAY, caller)?;
            let view = self.read_recording(caller, run_id, None).await?;
            let agent = self.replay_agent(&body)?;
            self.replay_inner(caller, &view, agent, body.seed.unwrap_or(0))
                .await
        }
        .await;
        let made = r
            .as_ref()
            .ok()
            .and_then(|x| x.run.as_ref())
            .map(|run| run.id.clone());
        let detail = Some(format!("recording={}", audited_id(run_id)));
        self.finish(&REPLAY, caller, rid, r, detail, made).await
    }

    /// The variant a replay re-runs the task with (label and agent), or `None` for the
    /// recording's trajectory.
    fn replay_agent(&self, body: &ReplayBody) -> Result<Option<(String, Resolved)>, LabError> {
        if body.variant.is_none() && body.workflow.is_none() && body.program.is_none() {
            return Ok(None);
        }
        let label = check_variant(body.variant.as_deref().unwrap_or("identity"), "variant")?;
        let resolved = variant::agent_of(
            body.workflow.as_deref(),
            body.program.as_deref(),
            None,
            &self.programs(),
            self.links.get(),
        )?;
        Ok(Some((label, resolved)))
    }

    async fn replay_inner(
        &self,
        caller: &Caller,
        view: &RecordingView,
        agent: Option<(String, Resolved)>,
        seed: u64,
    ) -> Result<ReplayReport, LabError> {
        let recording = view.recording.run_id.clone();
        let events = match timeline(view) {
            Timeline::Ordered(events) => events,
            Timeline::Degraded(reason) => {
                return Ok(ReplayReport {
                    recording,
                    status: ReplayStatus::Degraded,
                    reason: Some(reason),
                    steps: 0,
                    run: None,
                    divergences: Vec::new(),
                    identical: None,
                    differing_steps: Vec::new(),
                });
            }
        };
        let tenant = self.tenant_of(caller);
        let trajectory = agent.is_none();
        // A trajectory has a step per recorded call; both are bounded like any run.
        super::check_executions(events.len())?;
        let (stored, scenario, label, resolved) = match agent {
            Some((label, resolved)) => {
                let task = RecordedTask::of(view)?;
                let stored = self
                    .task_scenario(&tenant, &task, &view.recording.identity)
                    .await?;
                (stored, task.scenario, label, resolved)
            }
            None => {
                let (stored, scenario) = self.trajectory_scenario(&tenant, view).await?;
                let agent = Resolved {
                    agent: Box::new(Trajectory::new(events)),
                    backend: crate::world::BACKEND,
                };
                (stored, scenario, "recorded".to_owned(), agent)
            }
        };
        super::check_executions(scenario.steps().len())?;
        let playback = Arc::new(Playback::new(events));
        let executor = self.executor();
        let lab = executor.lab.clone();
        let principal = caller.principal.clone();
        let played = &scenario;
        let world = move |run_id: &str| {
            lab.and_then(|lab| {
                lab.playback(played, run_id, principal, playback)
                    .map_err(|e| LabError::new(e.code, e.message))
            })
        };
        let run = Runnable {
            stored: &stored,
            scenario: &scenario,
            variant: &label,
            agent: &resolved,
            scorer: None,
            seed,
            trials: 1,
        };
        let x = executor
            .execute_in(
                caller,
                &tenant,
                &run,
                RunPurpose::Replay,
                resolved.backend,
                world,
            )
            .await?;
        let differing_steps: Vec<usize> = if trajectory {
            x.outputs
                .iter()
                .zip(events)
                .filter(|(o, e)| {
                    let got = match o.error {
                        None => Ok(o.output.clone()),
                        Some(code) => Err(code.to_owned()),
                    };
                    got != recorded_output(e)
                })
                .map(|(o, _)| o.step)
                .collect()
        } else {
            Vec::new()
        };
        Ok(ReplayReport {
            recording,
            status: ReplayStatus::Replayed,
            reason: None,
            steps: x.run.steps_total,
            identical: trajectory
                .then_some(differing_steps.is_empty() && x.outputs.len() == events.len()),
            differing_steps,
            divergences: x
                .misses
                .into_iter()
                .map(|m| Divergence {
                    step: m.step,
                    op: m.op,
                    args_hash: m.args_hash,
                    expected: m.expected,
                })
                .collect(),
            run: Some(x.run),
        })
    }

    /// The scenario of a recording's trajectory: step `n` is its `n`-th call (`"<seq> <op>"`),
    /// stored so the replay's run has one.
    async fn trajectory_scenario(
        &self,
        tenant: &str,
        view: &RecordingView,
    ) -> Result<(store_lab::Scenario, Scenario), LabError> {
        let run = clip(&view.recording.run_id);
        if view.events.is_empty() {
            return Err(LabError::new(
                codes::LAB_SCENARIO_NO_STEPS,
                format!("recording {run} holds no calls, so its trajectory has nothing to replay"),
            ));
        }
        let steps: Vec<serde_json::Value> = view
            .events
            .iter()
            .map(|e| json!({"input": Trajectory::step_input(e)}))
            .collect();
        let draft = ScenarioDraft {
            name: format!("trajectory of recording {run}"),
            description: format!("the calls of recording {run}, in order, for replay"),
            steps: serde_json::Value::Array(steps),
            mocks: json!([]),
        };
        let scenario = Scenario::from_json(&json!({"name": draft.name, "steps": draft.steps}))
            .map_err(|e| LabError::new(e.code, e.message))?;
        // The recording's principal's, like the recording: only it or an admin reads it.
        let stored = self
            .store
            .create_owned_scenario(tenant, &draft, Some(&view.recording.identity), now_ms())
            .await?;
        Ok((stored, scenario))
    }
}
