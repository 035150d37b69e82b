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
//!
//! A run keeps at most [`MAX_RUN_OUTPUT_BYTES`] of outputs (each step's input and output, over
//! all trials): the step that would pass it is recorded as an error with nothing kept, the run
//! stops there and is `failed` with `lab.run_output_too_large`, an infrastructure failure (the
//! run's own limit, not the agent's answer being wrong).

use corral_guard::canonical::digest;
use corral_policy::codes;
use serde::Serialize;

use crate::agent::{Agent, StepCtx, StepOutcome};
use crate::scenario::is_infrastructure;
use crate::world::World;

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
    /// In a playback (a divergence), what the recording expected there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<crate::playback::Expected>,
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
    /// The bytes of outputs kept (inputs and outputs), at most [`MAX_RUN_OUTPUT_BYTES`].
    pub output_bytes: usize,
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

/// The most bytes of outputs one run keeps (the sum over its steps and trials of each input and
/// output, as held in memory and stored): 64 MiB.
///
/// Why this figure: a run may execute up to 10,000 steps (steps x trials) and each stored row
/// may hold 1 MiB, so without a cap one run could hold about 10 GiB, and the service keeps
/// roughly three copies while it scores and stores them (the report, the scored rows, the SQL
/// text). 64 MiB leaves room for what runs need (10,000 steps of 6 KiB each, or 100 trials of a
/// scenario whose steps answer 600 KiB) while one run's peak stays near 200 MiB, which a
/// two-core host running several runs survives. A comparison runs its runs one at a time and
/// drops each before the next, so the cap bounds it too.
pub const MAX_RUN_OUTPUT_BYTES: usize = 64 * 1024 * 1024;

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
        backend: world.backend(),
        isolated: world.mocked(),
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
        output_bytes: 0,
    };
    'trials: for trial in 1..=trials {
        for (i, s) in scenario.steps().iter().enumerate() {
            let step = i + 1;
            let ctx = StepCtx { trial, step, seed };
            let outcome = agent.step(&world, ctx, &s.input).await;
            for m in world.take_misses() {
                r.mock_misses.push(MockMiss {
                    step,
                    trial,
                    op: m.op,
                    args_hash: m.args_hash,
                    expected: m.expected,
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
            let bytes = s.input.len().saturating_add(output.len());
            if r.output_bytes.saturating_add(bytes) > MAX_RUN_OUTPUT_BYTES {
                over_the_cap(&mut r, step, trial, bytes, error);
                break 'trials;
            }
            r.output_bytes += bytes;
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

/// Stops a run whose step `step` of trial `trial` (`bytes` of input and output) would pass
/// [`MAX_RUN_OUTPUT_BYTES`]: the step is recorded as an error with nothing kept, and the run
/// fails with `lab.run_output_too_large`.
fn over_the_cap(
    r: &mut RunReport,
    step: usize,
    trial: u32,
    bytes: usize,
    error: Option<&'static str>,
) {
    if error.is_none() {
        // The step answered, but its answer is not kept: it counts as an error.
        r.steps_ok = r.steps_ok.saturating_sub(1);
        r.steps_error += 1;
    }
    r.status = RunStatus::Failed;
    r.infra_errors.push(Failure {
        step,
        trial,
        code: codes::LAB_RUN_OUTPUT_TOO_LARGE,
        message: format!(
            "the run's outputs reached the cap of {} MiB (every step's input and output over all trials) at trial {trial} step {step}: {} bytes were kept and this step's {bytes} bytes would pass it, so the run stopped there and its later steps and trials did not run. Ask for fewer `trials`, split the scenario into fewer steps, or mock smaller answers",
            MAX_RUN_OUTPUT_BYTES / (1024 * 1024),
            r.output_bytes
        ),
    });
    r.outputs.push(StepOutput {
        step,
        trial,
        input: String::new(),
        output: String::new(),
        ok: false,
        error: Some(codes::LAB_RUN_OUTPUT_TOO_LARGE),
    });
}
