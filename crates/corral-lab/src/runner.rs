//! The in-process runner: feeds a scenario's steps to an agent in a world, `trials` times, and
//! reports per-step outputs, counters, misses and failures. It stores nothing (the store keeps
//! runs); it holds no clock and draws no random id, so the same scenario, variant and seed give
//! byte-identical outputs (`RunReport::outputs_digest`).
//!
//! Failures are kept in two lists: the agent's (a policy refusal, a budget, a miss, a mocked
//! error, a bad template: what the variant is judged on) and the infrastructure's (a `server.*`
//! or `store.*` code: the audit, the run store or the server failed, so the step says nothing
//! about the agent). Any infrastructure failure makes the run `failed`. A run is attested
//! `backend: inproc-mock, isolated: true, destroyed: true`: its world answers only from mocks
//! and is dropped, with everything it held, before the report is returned.

use corral_guard::canonical::digest;
use serde::Serialize;

use crate::agent::{Agent, StepCtx, StepOutcome};
use crate::scenario::is_infrastructure;
use crate::world::{BACKEND, World};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Every step was judged (passed or failed on the agent's account).
    Completed,
    /// Corral's own infrastructure failed at some step.
    Failed,
}

/// One step of one trial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepOutput {
    /// The step, from 1.
    pub step: usize,
    /// The trial, from 1.
    pub trial: u32,
    /// The step's input.
    pub input: String,
    /// What the agent answered (the miss marker on a miss; empty on another failure).
    pub output: String,
    /// Whether the step succeeded.
    pub ok: bool,
    /// The failure's code, when it failed.
    pub error: Option<&'static str>,
}

/// A mock miss: the step, the op and the hash of its canonical arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MockMiss {
    /// The step, from 1.
    pub step: usize,
    /// The trial, from 1.
    pub trial: u32,
    /// The op (`scenario.resource` for the identity agent).
    pub op: String,
    /// SHA-256 of the canonical arguments (as the call's audit event has it).
    pub args_hash: String,
}

/// A failed step's code and message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The step, from 1.
    pub step: usize,
    /// The trial, from 1.
    pub trial: u32,
    /// The catalog code.
    pub code: &'static str,
    /// The message.
    pub message: String,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// The run's id.
    pub run_id: String,
    /// The scenario's name.
    pub scenario: String,
    /// The agent's variant.
    pub variant: String,
    /// The runner (`inproc`).
    pub runner: &'static str,
    /// The backend that answered its calls (`inproc-mock`).
    pub backend: &'static str,
    /// Whether the runner was isolated (attested: the world reaches nothing real).
    pub isolated: bool,
    /// Whether the run's state was destroyed when it ended.
    pub destroyed: bool,
    /// The run purpose its calls were metered under.
    pub purpose: &'static str,
    /// The seed.
    pub seed: u64,
    /// Trials.
    pub trials: u32,
    /// How it ended.
    pub status: RunStatus,
    /// Steps run (steps x trials).
    pub steps_total: usize,
    /// Steps that succeeded.
    pub steps_ok: usize,
    /// Steps that failed (the agent's failures and the infrastructure's).
    pub steps_error: usize,
    /// Per step and trial, in order (trial-major).
    pub outputs: Vec<StepOutput>,
    /// Every mock miss, in order.
    pub mock_misses: Vec<MockMiss>,
    /// The agent's failures.
    pub agent_errors: Vec<Failure>,
    /// Corral's own failures (not the agent's).
    pub infra_errors: Vec<Failure>,
    /// The scorer verdict: no scorer is attached here, so "executed, not scored".
    pub verdict: &'static str,
    /// What the isolation backend applied to the programs the run started (an external
    /// program's steps), distinct ones in the order first seen; empty for an in-process agent.
    pub attestations: Vec<Attested>,
}

/// What an isolation backend applied to a program a run started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attested {
    /// The backend (`linux`).
    pub backend: &'static str,
    /// Whether the program ran isolated.
    pub isolated: bool,
    /// Whether its sandbox was destroyed and the removal checked.
    pub destroyed: bool,
    /// The primitives applied (`userns`, `netns:corral-link`, `landlock:abi6`, ...).
    pub primitives: Vec<String>,
}

impl From<corral_exec::Attestation> for Attested {
    fn from(a: corral_exec::Attestation) -> Self {
        Self {
            backend: a.backend,
            isolated: a.isolated,
            destroyed: a.destroyed,
            primitives: a.primitives,
        }
    }
}

/// The verdict of a run no scorer judged: never a pass.
pub const NOT_SCORED: &str = "executed, not scored";

impl RunReport {
    /// SHA-256 of the canonical JSON of the outputs: equal for byte-identical outputs.
    pub fn outputs_digest(&self) -> String {
        digest(&serde_json::to_value(&self.outputs).unwrap_or_default())
    }
}

/// The most bytes of answers one run keeps (its steps' outputs, summed over every trial): they are
/// held in memory until the run is recorded, then stored. Past it, a step's answer is not kept
/// and the step is the agent's failure, `lab.output_too_large`.
pub const MAX_RUN_OUTPUT_BYTES: usize = 32 * 1024 * 1024;

/// The most outputs a run reserves room for up front.
const RESERVE_OUTPUTS: usize = 4096;

/// Runs the world's scenario with `agent`, `trials` times (at least once), and drops the world.
pub async fn run_scenario(world: World, agent: &dyn Agent, seed: u64, trials: u32) -> RunReport {
    let trials = trials.max(1);
    let scenario = world.scenario().clone();
    let mut r = RunReport {
        run_id: world.run_id().to_owned(),
        scenario: scenario.name().to_owned(),
        variant: agent.variant(),
        runner: "inproc",
        backend: BACKEND,
        isolated: true,
        destroyed: false,
        purpose: world.gateway().purpose().as_str(),
        seed,
        trials,
        status: RunStatus::Completed,
        steps_total: 0,
        steps_ok: 0,
        steps_error: 0,
        // Reserved for at most a few thousand outputs: `trials` comes from a caller, and a huge
        // value must cost time the surface bounds, never one allocation that aborts.
        outputs: Vec::with_capacity(
            scenario
                .steps()
                .len()
                .saturating_mul(trials as usize)
                .min(RESERVE_OUTPUTS),
        ),
        mock_misses: Vec::new(),
        agent_errors: Vec::new(),
        infra_errors: Vec::new(),
        verdict: NOT_SCORED,
        attestations: Vec::new(),
    };
    let mut kept: usize = 0;
    for trial in 1..=trials {
        for (i, s) in scenario.steps().iter().enumerate() {
            let step = i + 1;
            let ctx = StepCtx { trial, step, seed };
            let outcome = over_budget(agent.step(&world, ctx, &s.input).await, &mut kept);
            for m in world.take_misses() {
                r.mock_misses.push(MockMiss {
                    step,
                    trial,
                    op: m.op,
                    args_hash: m.args_hash,
                });
            }
            r.steps_total += 1;
            let (output, error) = match outcome {
                StepOutcome::Ok(out) => {
                    r.steps_ok += 1;
                    (out, None)
                }
                StepOutcome::Failed {
                    output,
                    code,
                    message,
                } => {
                    r.steps_error += 1;
                    let f = Failure {
                        step,
                        trial,
                        code,
                        message,
                    };
                    if is_infrastructure(code) {
                        r.status = RunStatus::Failed;
                        r.infra_errors.push(f);
                    } else {
                        r.agent_errors.push(f);
                    }
                    (output, Some(code))
                }
            };
            r.outputs.push(StepOutput {
                step,
                trial,
                input: s.input.clone(),
                output,
                ok: error.is_none(),
                error,
            });
        }
    }
    // The programs' sandboxes: the run is isolated and destroyed only if every one was, and a
    // program the backend could not isolate (an `isolation.*`/`exec.*` failure) leaves it
    // not isolated, whatever the others attested.
    let attested: Vec<Attested> = world
        .attestations()
        .into_iter()
        .map(Attested::from)
        .collect();
    // The world and everything it held (its gateway, limiter, mock table handle, misses) end
    // here, before the report says so.
    drop(world);
    r.destroyed = attested.iter().all(|a| a.destroyed);
    if let Some(first) = attested.first() {
        r.backend = first.backend;
        r.isolated = attested.iter().all(|a| a.isolated);
    }
    if r.infra_errors
        .iter()
        .any(|f| f.code.starts_with("isolation.") || f.code.starts_with("exec."))
    {
        r.isolated = false;
    }
    r.attestations = attested;
    r
}

/// `outcome`, unless its answer would take the run's answers past [`MAX_RUN_OUTPUT_BYTES`]
/// (`kept` so far): then the agent's failure `lab.output_too_large`, the answer dropped.
fn over_budget(outcome: StepOutcome, kept: &mut usize) -> StepOutcome {
    let len = match &outcome {
        StepOutcome::Ok(out) | StepOutcome::Failed { output: out, .. } => out.len(),
    };
    match kept.checked_add(len) {
        Some(total) if total <= MAX_RUN_OUTPUT_BYTES => {
            *kept = total;
            outcome
        }
        _ => StepOutcome::Failed {
            output: String::new(),
            code: corral_policy::codes::LAB_OUTPUT_TOO_LARGE,
            message: format!(
                "the answer ({len} bytes) would take the run's answers past {MAX_RUN_OUTPUT_BYTES} bytes; not kept"
            ),
        },
    }
}
