//! Deterministic replay (issue 15 item 2): a recording's responses answer a run's calls, so the
//! same input gives the same output, and a call the recording lacks is a typed divergence.
//!
//! [`Playback`] is the answering side of a playback world (`Lab::playback`): a call of `op`
//! with arguments `a` takes the first recorded event of that op and those canonical arguments
//! not yet taken, in `seq` order (so a session that read one file twice and got two answers
//! gets them again, in order), and answers its response or its recorded error. A call no
//! event is left for is a divergence: it answers `replay.divergence` (nothing real is reached)
//! and is reported with its step, op and arguments hash, and with what the recording expected
//! next (the first event not yet taken: its `seq`, op and arguments hash), or nothing when the
//! recording was used up.
//!
//! [`Trajectory`] is the agent of a replay without a variant: step `n` re-issues the recording's
//! `n`-th call (the step's input is `"<seq> <op>"`) through the guard chain of the current
//! deployment, and its output is the answer's JSON text, so a replay of an unchanged session
//! reproduces every response byte for byte, and a policy that now refuses a call shows as that
//! step's refusal.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use corral_exec::BoxFuture;
use corral_guard::Reply;
use corral_guard::args::args_hash;
use corral_ops::{OpError, OpOutput};
use corral_policy::codes;
use corral_store::recording::RecordingEvent;
use serde::Serialize;
use serde_json::Value;

use crate::agent::{Agent, StepCtx, StepOutcome};
use crate::scenario::canonical_args;
use crate::world::World;

/// What the recording held where a run diverged: its next event not yet taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Expected {
    /// The event's place in the recording, from 1.
    pub seq: u64,
    /// Its op.
    pub op: String,
    /// SHA-256 of its canonical arguments.
    pub args_hash: String,
}

/// One recorded event, as a playback matches it.
#[derive(Debug)]
struct Event {
    seq: u64,
    op: String,
    args: String,
    args_hash: String,
    response: Option<Value>,
    error: Option<(&'static str, String)>,
    /// Whether the event holds no answer of the op (see `Playback::new`).
    unanswerable: bool,
}

/// A recording's events answering the calls of one run: `Ok` the recorded answer (a response
/// or the recorded error), `Err` a divergence.
#[derive(Debug)]
pub struct Playback {
    events: Vec<Event>,
    state: Mutex<Taken>,
}

/// Which events are taken, indexed: per op, per canonical arguments, the events not yet taken
/// in `seq` order (a call finds its event in O(1), not by a scan of the recording), and the
/// first event not taken (what a divergence reports as expected; it only moves forward).
#[derive(Debug)]
struct Taken {
    taken: Vec<bool>,
    untaken: HashMap<String, HashMap<String, VecDeque<usize>>>,
    first: usize,
}

impl Playback {
    /// The playback of `events` (an ordered timeline: see `crate::task::timeline`).
    pub fn new(events: &[RecordingEvent]) -> Self {
        let events: Vec<Event> = events
            .iter()
            .map(|e| Event {
                seq: e.seq,
                op: e.op.clone(),
                args: canonical_args(&e.args),
                args_hash: args_hash(&e.args),
                response: e.response.clone(),
                error: e.error_code.as_deref().map(recorded_error),
                unanswerable: e
                    .error_code
                    .as_deref()
                    .is_some_and(|c| codes::lookup(c).is_none() || decided_before_the_op(c)),
            })
            .collect();
        // An event without a recorded answer of the op (a refusal the guard chain decided
        // before the op ran, or a code this corral does not know) answers nothing: if today's
        // chain lets that call through, it is a divergence, never the old refusal replayed.
        let taken: Vec<bool> = events.iter().map(|e| e.unanswerable).collect();
        let mut untaken: HashMap<String, HashMap<String, VecDeque<usize>>> = HashMap::new();
        for (i, e) in events.iter().enumerate().filter(|(_, e)| !e.unanswerable) {
            untaken
                .entry(e.op.clone())
                .or_default()
                .entry(e.args.clone())
                .or_default()
                .push_back(i);
        }
        let first = taken.iter().take_while(|t| **t).count();
        Self {
            events,
            state: Mutex::new(Taken {
                taken,
                untaken,
                first,
            }),
        }
    }

    /// The recorded answer of `op` called with `args`, or (a divergence) what the recording
    /// expected next.
    pub fn answer(
        &self,
        op: &str,
        args: &Value,
    ) -> Result<Result<OpOutput, OpError>, Option<Expected>> {
        let canonical = canonical_args(args);
        let mut state = match self.state.lock() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        let found = state
            .untaken
            .get_mut(op)
            .and_then(|by_args| by_args.get_mut(&canonical))
            .and_then(VecDeque::pop_front);
        let Some((i, e)) = found.and_then(|i| Some((i, self.events.get(i)?))) else {
            let next = self.events.get(state.first).map(|e| Expected {
                seq: e.seq,
                op: e.op.clone(),
                args_hash: e.args_hash.clone(),
            });
            return Err(next);
        };
        let Taken { taken, first, .. } = &mut *state;
        if let Some(t) = taken.get_mut(i) {
            *t = true;
        }
        while taken.get(*first).copied() == Some(true) {
            *first += 1;
        }
        Ok(match &e.error {
            Some((code, message)) => Err(OpError::new(code, message.clone())),
            None => Ok(OpOutput::Json {
                value: e.response.clone().unwrap_or(Value::Null),
                attestation: None,
            }),
        })
    }
}

/// Whether a refusal with `code` was decided by the guard chain before the op ran (policy,
/// scopes, authentication, autonomy, RBAC, budgets, limits, arguments, confirmation, recording):
/// not an answer of the op, so not one a playback gives.
fn decided_before_the_op(code: &str) -> bool {
    const FAMILIES: &[&str] = &[
        "policy.",
        "auth.",
        "autonomy.",
        "rbac.",
        "budget.",
        "run.",
        "confirmation.",
        "audit.",
        "route.",
        "limit.",
        "args.",
        "recording.",
    ];
    FAMILIES.iter().any(|f| code.starts_with(f)) || code == codes::OP_NOT_ENABLED
}

/// A recorded error code as the catalog's (`&'static`), with the message a replayed call gets.
fn recorded_error(code: &str) -> (&'static str, String) {
    match codes::lookup(code) {
        Some(c) => (
            c.code,
            format!("the recorded call failed with `{}`; replayed as recorded", c.code),
        ),
        None => (
            codes::REPLAY_DIVERGENCE,
            "the recorded call failed with a code this corral does not know; replayed as a divergence".to_owned(),
        ),
    }
}

/// The agent of a replay without a variant: step `n` re-issues the recording's `n`-th call.
#[derive(Debug, Clone)]
pub struct Trajectory {
    calls: Arc<Vec<(String, Value)>>,
}

impl Trajectory {
    /// The trajectory of `events` (an ordered timeline).
    pub fn new(events: &[RecordingEvent]) -> Self {
        Self {
            calls: Arc::new(
                events
                    .iter()
                    .map(|e| (e.op.clone(), e.args.clone()))
                    .collect(),
            ),
        }
    }

    /// The input of the step that re-issues `event`: `"<seq> <op>"`.
    pub fn step_input(event: &RecordingEvent) -> String {
        format!("{} {}", event.seq, event.op)
    }
}

/// What a recorded call printed, as a trajectory step prints it: the response's JSON text
/// (`Ok`), or the code it failed with (`Err`).
pub fn recorded_output(event: &RecordingEvent) -> Result<String, String> {
    match &event.error_code {
        Some(code) => Err(code.clone()),
        None => Ok(event.response.as_ref().unwrap_or(&Value::Null).to_string()),
    }
}

impl Agent for Trajectory {
    fn variant(&self) -> String {
        "recorded".to_owned()
    }

    fn step<'a>(
        &'a self,
        world: &'a World,
        ctx: StepCtx,
        input: &'a str,
    ) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            let call = input
                .split_once(' ')
                .and_then(|(seq, _)| seq.parse::<usize>().ok())
                .and_then(|seq| seq.checked_sub(1))
                .and_then(|i| self.calls.get(i));
            let Some((op, args)) = call else {
                return StepOutcome::Failed {
                    output: String::new(),
                    code: codes::SERVER_INTERNAL,
                    message: format!("step input {input:?} names no recorded call"),
                };
            };
            match world.call(ctx.call(1), op, args.clone()).await {
                Reply::Json(v) => StepOutcome::Ok(v.to_string()),
                Reply::Refused(r) => StepOutcome::Failed {
                    output: String::new(),
                    code: r.code,
                    message: r.message,
                },
                Reply::Stream(_) => StepOutcome::Failed {
                    output: String::new(),
                    code: codes::SERVER_INTERNAL,
                    message: format!("`{op}` answered a stream in a playback"),
                },
            }
        })
    }
}
