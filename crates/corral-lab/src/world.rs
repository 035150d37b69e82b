//! The lab world: the running deployment's guard chain, with every op answered from one
//! scenario's mocks.
//!
//! **Two levels, so a world per run is cheap.** [`Lab::new`] does the expensive part once per
//! base deployment: it copies the catalog and adds the lab-only op `scenario.resource`
//! (`{resource: string}` -> `{"response": "<mocked string>"}`, explicit-only), appends one rule
//! allowing it (named `lab:scenario.resource`; it reads the scenario's own mocks and nothing
//! else), and compiles the engine; the result is one shared `Arc<Deployment>` with the base's
//! guard settings (autonomy, RBAC, budgets, confirmation) and no handlers at all. [`Lab::world`]
//! then costs a few allocations: a `Gateway::shared` over that deployment, metering its run under
//! purpose `simulation`, auditing to the lab's sinks, whose execute step asks
//! `Gateway::simulated`'s port instead of a handler: this world's [`MockTable`] (the scenario's,
//! behind the `Arc` validation built, never copied) plus the list of its misses.
//!
//! So every call a run makes goes through `Gateway::call_with` and every check of the
//! deployment's policy (default deny, scopes, RBAC, limits, budgets, confirmation) and is
//! audited, and what answers it can reach nothing real: no handler, backend (an empty
//! `inproc-mock` one), network or file. A policy refusal happens before the mocks are asked,
//! exactly as in production. The purpose is set here, by the composition root; no surface or
//! header can change it. A base config cannot name `scenario.resource` (it is not in the
//! config's catalog, and wildcards never reach an explicit-only op), so the lab's rule is the
//! only one that reaches it, and it reaches nothing else.

use std::sync::{Arc, Mutex};

use corral_exec::Attestation;
use corral_exec::mock::MockBackend;
use corral_guard::args::args_hash;
use corral_guard::audit::AuditSink;
use corral_guard::metering::Meter;
use corral_guard::recording::Recorder;
use corral_guard::runs::{RunLedger, RunPurpose};
use corral_guard::{Call, CallOptions, Caller, Deployment, Gateway, Reply, SimulatedOps};
use corral_ops::{OpError, OpOutput, Registry};
use corral_policy::{Effect, Engine, OpId, OpSpec, ParamKind, Principal, Rule, Selector, codes};
use serde_json::{Value, json};

use crate::playback::{Expected, Playback};
use crate::scenario::{MockAnswer, MockTable, Scenario, op_resource};

/// The lab-only op of the identity agent: a resource's mocked string.
pub const RESOURCE_OP: &str = "scenario.resource";

/// The name of the rule the lab adds to allow [`RESOURCE_OP`].
pub const LAB_RULE: &str = "lab:scenario.resource";

/// The backend every simulated run attests.
pub const BACKEND: &str = "inproc-mock";

/// Why a lab or a world could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WorldError {
    /// A catalog code.
    pub code: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// The lab of one running deployment: its catalog and engine with the lab's op and rule, built
/// once; worlds are made from it per run.
#[derive(Debug, Clone)]
pub struct Lab {
    deployment: Arc<Deployment>,
    sinks: Vec<Arc<dyn AuditSink>>,
    tenant: String,
    runs: Arc<RunLedger>,
    /// Where its worlds record every call (`sandbox.record_runs`), if anywhere.
    recorder: Option<Arc<dyn Recorder>>,
    /// Where its worlds' calls are metered (`metered`; a fresh one by default).
    meter: Arc<Meter>,
}

impl Lab {
    /// The lab of `base` (the running deployment), auditing to `sinks` (the deployment's: the
    /// first one's failure is the call's), for callers whose principal names no tenant `tenant`.
    pub fn new(
        base: &Deployment,
        sinks: Vec<Arc<dyn AuditSink>>,
        tenant: &str,
    ) -> Result<Self, WorldError> {
        let reserved = || WorldError {
            code: codes::LAB_RESERVED_OP,
            message: format!(
                "the deployment already has an op `{RESOURCE_OP}`, which the lab adds to its worlds; rename or remove it in the config"
            ),
        };
        let mut catalog = base.engine.catalog().clone();
        let id = OpId::parse(RESOURCE_OP).map_err(|_| reserved())?;
        let mut spec = OpSpec::new(
            id,
            &[Effect::Read],
            "the scenario's mocked answer for a resource (lab worlds only)",
        )
        .param("resource", ParamKind::String, true);
        spec.explicit_only = true;
        catalog.add_custom(spec).map_err(|_| reserved())?;
        let selector = Selector::parse(RESOURCE_OP, &catalog).map_err(|_| reserved())?;
        let policy = base
            .engine
            .policy()
            .clone()
            .rule(Rule::allow(LAB_RULE, vec![selector]));
        let deployment = Deployment {
            engine: Engine::new(catalog.clone(), policy),
            registry: Registry::new(catalog, Vec::new()),
            protected: base.protected.clone(),
            guard: base.guard.clone(),
        };
        Ok(Self {
            deployment: Arc::new(deployment),
            sinks,
            tenant: tenant.to_owned(),
            runs: Arc::new(RunLedger::default()),
            recorder: None,
            meter: Arc::new(Meter::default()),
        })
    }

    /// This lab, its worlds' calls metered in `meter` (the runtime's).
    pub fn metered(mut self, meter: Arc<Meter>) -> Self {
        self.meter = meter;
        self
    }

    /// This lab, its worlds recording every call they make to `recorder` (under the run's id,
    /// purpose `simulation`).
    pub fn recording_to(mut self, recorder: Arc<dyn Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// A mocked world over `gateway`, its every call recorded when the lab records its runs.
    fn recorded(
        &self,
        gateway: Gateway,
        mocks: Arc<Mocks>,
        scenario: &Scenario,
        run_id: &str,
        principal: Principal,
    ) -> World {
        match &self.recorder {
            Some(r) => World::of(
                gateway.with_recorder(Arc::clone(r)),
                mocks,
                true,
                scenario,
                run_id,
                principal,
            )
            .recorded(),
            None => World::of(gateway, mocks, true, scenario, run_id, principal),
        }
    }

    /// The lab's deployment (the base's, with the lab's op and rule).
    pub fn deployment(&self) -> &Arc<Deployment> {
        &self.deployment
    }

    /// A world for one run of `scenario`: `run_id` (the lab run's id, 1-128 characters of
    /// letters, digits, `_`, `-`, `.`, `:`) is every call's run, `principal` the caller.
    pub fn world(
        &self,
        scenario: &Scenario,
        run_id: &str,
        principal: Principal,
    ) -> Result<World, WorldError> {
        check_run_id(run_id)?;
        let mocks = Mocks::new(Answers::Table(Arc::clone(scenario.table())));
        let gateway = Gateway::shared(
            Arc::clone(&self.deployment),
            Arc::new(MockBackend::default()),
            self.sinks.clone(),
            &self.tenant,
        )
        .with_runs(self.runs.clone())
        .with_meter(Arc::clone(&self.meter))
        .with_purpose(RunPurpose::Simulation)
        .simulated(mocks.clone());
        Ok(self.recorded(gateway, mocks, scenario, run_id, principal))
    }
}

impl Lab {
    /// A world for one deterministic replay of `scenario` (a recorded task, or a recording's
    /// trajectory): `playback` (the recording) answers every call, purpose `replay`; a call it
    /// has no event left for is a divergence, noted as a miss with what was expected.
    pub fn playback(
        &self,
        scenario: &Scenario,
        run_id: &str,
        principal: Principal,
        playback: Arc<Playback>,
    ) -> Result<World, WorldError> {
        check_run_id(run_id)?;
        let mocks = Mocks::new(Answers::Recorded(playback));
        let gateway = Gateway::shared(
            Arc::clone(&self.deployment),
            Arc::new(MockBackend::default()),
            self.sinks.clone(),
            &self.tenant,
        )
        .with_runs(self.runs.clone())
        .with_meter(Arc::clone(&self.meter))
        .with_purpose(RunPurpose::Replay)
        .simulated(mocks.clone());
        Ok(self.recorded(gateway, mocks, scenario, run_id, principal))
    }
}

/// `run_id` as a lab run's id: 1-128 characters of letters, digits, `_`, `-`, `.`, `:`.
fn check_run_id(run_id: &str) -> Result<(), WorldError> {
    if corral_guard::valid_run_id(run_id) {
        return Ok(());
    }
    Err(WorldError {
        code: codes::RUN_INVALID_HEADER,
        message: format!(
            "run id `{}` is not valid; use 1-128 characters of letters, digits, `_`, `-`, `.` and `:`",
            run_id.chars().take(140).collect::<String>()
        ),
    })
}

impl World {
    /// A world over `gateway` (a replay's: real handlers, safe ops only; see `crate::replay`)
    /// for one run of `scenario`'s inputs: no mocks answer, so nothing is ever a miss.
    pub fn over(
        gateway: Gateway,
        scenario: &Scenario,
        run_id: &str,
        principal: Principal,
    ) -> Result<World, WorldError> {
        check_run_id(run_id)?;
        let mocks = Mocks::new(Answers::Table(Arc::new(MockTable::default())));
        Ok(World::of(
            gateway, mocks, false, scenario, run_id, principal,
        ))
    }

    /// The world of one run: its gateway, the mocks it answers from (`mocked`: only them).
    fn of(
        gateway: Gateway,
        mocks: Arc<Mocks>,
        mocked: bool,
        scenario: &Scenario,
        run_id: &str,
        principal: Principal,
    ) -> World {
        World {
            gateway: Arc::new(gateway),
            mocked,
            attested: Mutex::new(Vec::new()),
            caller: Caller::new(principal).with_run(Some(run_id.to_owned())),
            run_id: run_id.to_owned(),
            mocks,
            scenario: scenario.clone(),
        }
    }
}

/// A miss the world saw: the op and the hash of its arguments (as the audit records it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// The op called (`scenario.resource` for the identity agent).
    pub op: String,
    /// SHA-256 of the canonical arguments, as in the call's audit event.
    pub args_hash: String,
    /// In a playback, what the recording expected there (its next call not yet taken; `None`
    /// when it was used up); `None` for a scenario's mock miss.
    pub expected: Option<Expected>,
}

/// What answers a world's calls: a scenario's mock table, or a recording (a playback).
#[derive(Debug)]
enum Answers {
    Table(Arc<MockTable>),
    Recorded(Arc<Playback>),
}

/// The mocks of one world, and the misses they answered.
#[derive(Debug)]
struct Mocks {
    answers: Answers,
    misses: Mutex<Vec<Miss>>,
}

/// What a mocked answer attests: the in-process mock backend, and what answered
/// (`mock:table` or `mock:recording`).
fn attestation(answered_by: &str) -> Attestation {
    Attestation {
        backend: BACKEND,
        isolated: true,
        destroyed: true,
        primitives: vec![answered_by.to_owned()],
    }
}

impl Mocks {
    fn new(answers: Answers) -> Arc<Self> {
        Arc::new(Self {
            answers,
            misses: Mutex::new(Vec::new()),
        })
    }

    fn note(&self, op: &str, args: &Value, expected: Option<Expected>) {
        if let Ok(mut m) = self.misses.lock() {
            m.push(Miss {
                op: op.to_owned(),
                args_hash: args_hash(args),
                expected,
            });
        }
    }

    fn miss(&self, op: &str, args: &Value, resource: &str) -> OpError {
        self.note(op, args, None);
        OpError::new(
            codes::LAB_MOCK_MISS,
            format!(
                "no mock of the scenario answers {}; nothing real was reached: {}",
                if op == RESOURCE_OP {
                    "this resource"
                } else {
                    "this op with these arguments"
                },
                corral_exec::mock::miss_marker(resource)
            ),
        )
    }
}

impl SimulatedOps for Mocks {
    fn answer(&self, spec: &OpSpec, args: &Value) -> Result<OpOutput, OpError> {
        let op = spec.id.as_str();
        let table = match &self.answers {
            Answers::Table(t) => t,
            Answers::Recorded(p) => {
                return match p.answer(op, args) {
                    Ok(answer) => answer.map(|out| match out {
                        OpOutput::Json { value, .. } => OpOutput::Json {
                            value,
                            attestation: Some(attestation("mock:recording")),
                        },
                        other => other,
                    }),
                    Err(expected) => {
                        self.note(op, args, expected);
                        Err(OpError::new(
                            codes::REPLAY_DIVERGENCE,
                            "the recording has no such call left (another op, other arguments, or one call too many); nothing real was reached",
                        ))
                    }
                };
            }
        };
        if op == RESOURCE_OP {
            let resource = args.get("resource").and_then(Value::as_str).unwrap_or("");
            return match table.resource(resource) {
                Some(r) => Ok(OpOutput::Json {
                    value: json!({ "response": r }),
                    attestation: Some(attestation("mock:table")),
                }),
                None => Err(self.miss(op, args, resource)),
            };
        }
        match table.op(op, args) {
            Some(MockAnswer::Response(v)) => Ok(OpOutput::Json {
                value: v.clone(),
                attestation: Some(attestation("mock:table")),
            }),
            Some(MockAnswer::Error { code, message }) => Err(OpError::new(code, message.clone())),
            None => Err(self.miss(op, args, &op_resource(op, args))),
        }
    }
}

/// One run's world: a gateway over the lab's deployment answering from one scenario's mocks.
/// Dropped when the run ends, with everything it held (`destroyed`).
#[derive(Debug)]
pub struct World {
    gateway: Arc<Gateway>,
    /// Whether only mocks answer its calls (`Lab::world`), so the run reaches nothing real;
    /// `false` for a replay's world, whose real tools answer.
    mocked: bool,
    /// What the isolation backend attested for each program the run started (distinct ones).
    attested: Mutex<Vec<Attestation>>,
    caller: Caller,
    run_id: String,
    mocks: Arc<Mocks>,
    scenario: Scenario,
}

impl World {
    /// Calls `op` with `args` through the world's gateway, as the run's caller, with the
    /// deterministic request id `<run>:<trial>:<step>:<n>` (`n`: the step's n-th call, from 1).
    pub async fn call(&self, at: CallAt, op: &str, args: Value) -> Reply {
        let call = Call {
            caller: self.caller.clone(),
            op: op.to_owned(),
            args,
            request_id: format!("{}:{}:{}:{}", self.run_id, at.trial, at.step, at.n),
        };
        self.gateway.call_with(call, CallOptions::default()).await
    }

    /// This world, every call of its caller recorded (its gateway must have a recorder, or
    /// each call is refused `recording.unavailable`: never answered as if recorded).
    pub fn recorded(mut self) -> Self {
        self.caller = self.caller.with_record(true);
        self
    }

    /// The gateway (for an agent that reaches it through a surface: the external program).
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Records what an isolation backend applied to a program of this run (a variant's or a
    /// scorer's); equal attestations are kept once.
    pub fn attest(&self, a: Attestation) {
        if let Ok(mut v) = self.attested.lock()
            && !v.contains(&a)
        {
            v.push(a);
        }
    }

    /// The distinct attestations of the programs this run started, in the order first seen.
    pub fn attestations(&self) -> Vec<Attestation> {
        self.attested.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The run's caller (run-scoped).
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Whether only the scenario's mocks answer its calls (nothing real is reached).
    pub fn mocked(&self) -> bool {
        self.mocked
    }

    /// The backend that answers its calls (`inproc-mock` for a mocked world, else the
    /// gateway's).
    pub fn backend(&self) -> &'static str {
        if self.mocked {
            BACKEND
        } else {
            self.gateway.backend().name()
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The scenario whose mocks answer.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// The misses since the last call of this, in order.
    pub fn take_misses(&self) -> Vec<Miss> {
        self.mocks
            .misses
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }
}

/// Where a call is in a run: trial and step from 1, and the step's n-th call from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallAt {
    /// The trial, from 1.
    pub trial: u32,
    /// The step, from 1.
    pub step: usize,
    /// The call within the step, from 1.
    pub n: usize,
}
