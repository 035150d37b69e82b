//! The agents under test (variants), behind one trait: a step's input and where it is in the
//! run go in, an output comes out, and every op call goes through the world's gateway.
//!
//! Two variants live here: the identity agent (a step's input is the resource it asks for,
//! spec 003's worked example) and, in `workflow`, the declarative workflow. The external
//! program (issue 14 item 2c) is another `Agent`: its `step` starts the program in an isolation
//! backend with `CORRAL_URL` of a surface over `World::gateway()` and a token scoped to
//! `World::run_id()`, writes the input on its stdin and returns what it prints; its calls reach
//! the same gateway, so the world records its misses the same way.

use corral_exec::BoxFuture;
use corral_exec::mock::miss_marker;
use corral_guard::{Refusal, Reply};
use corral_policy::codes;
use serde_json::{Value, json};

use crate::world::{CallAt, RESOURCE_OP, World};

/// Where a step is in its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCtx {
    /// The trial, from 1.
    pub trial: u32,
    /// The step, from 1.
    pub step: usize,
    /// The run's seed (for agents that draw anything: the same seed, the same draws).
    pub seed: u64,
}

impl StepCtx {
    /// The position of the step's `n`-th call (from 1).
    pub fn call(&self, n: usize) -> CallAt {
        CallAt {
            trial: self.trial,
            step: self.step,
            n,
        }
    }
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// The agent answered.
    Ok(String),
    /// The step failed: a refusal, a miss (`output` is then the miss marker), a bad template,
    /// or corral's own infrastructure (a `server.*` or `store.*` code).
    Failed {
        /// What the step printed anyway (the miss marker, or nothing).
        output: String,
        /// The catalog code.
        code: &'static str,
        /// The message.
        message: String,
    },
}

impl StepOutcome {
    /// A failed step from a refusal of the gateway: a miss prints the marker of `resource`.
    pub fn refused(r: &Refusal, resource: impl FnOnce() -> String) -> Self {
        let output = if r.code == codes::LAB_MOCK_MISS {
            miss_marker(&resource())
        } else {
            String::new()
        };
        Self::Failed {
            output,
            code: r.code,
            message: r.message.clone(),
        }
    }
}

/// An agent under test.
pub trait Agent: Send + Sync {
    /// The variant's name, as a run records it (`identity`, `workflow:<name>@<version>`).
    fn variant(&self) -> String;

    /// Answers one step. Every op call goes through `world` (`World::call`).
    fn step<'a>(
        &'a self,
        world: &'a World,
        ctx: StepCtx,
        input: &'a str,
    ) -> BoxFuture<'a, StepOutcome>;
}

/// The identity agent: asks `scenario.resource` for the step's input, and answers the mocked
/// string, or `[[mock-miss:<input>]]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl Agent for Identity {
    fn variant(&self) -> String {
        "identity".to_owned()
    }

    fn step<'a>(
        &'a self,
        world: &'a World,
        ctx: StepCtx,
        input: &'a str,
    ) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            let reply = world
                .call(ctx.call(1), RESOURCE_OP, json!({ "resource": input }))
                .await;
            match reply {
                Reply::Json(v) => match v.get("response").and_then(Value::as_str) {
                    Some(s) => StepOutcome::Ok(s.to_owned()),
                    None => StepOutcome::Failed {
                        output: String::new(),
                        code: codes::SERVER_INTERNAL,
                        message: format!("`{RESOURCE_OP}` answered without a `response` string"),
                    },
                },
                Reply::Refused(r) => StepOutcome::refused(&r, || input.to_owned()),
                Reply::Stream(_) => StepOutcome::Failed {
                    output: String::new(),
                    code: codes::SERVER_INTERNAL,
                    message: format!("`{RESOURCE_OP}` answered a stream"),
                },
            }
        })
    }
}
