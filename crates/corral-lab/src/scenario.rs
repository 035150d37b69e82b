//! Scenarios: the steps a run feeds the agent under test and the mocks that answer its calls,
//! validated once into a lookup table the lab's worlds share.
//!
//! A scenario is `{name, description?, steps: [{input, expected?}], mocks: [...]}`. A mock is one
//! of:
//! - `{resource, response}`: the identity agent's lookup; `response` is a string, matched on the
//!   exact resource text (newlines included);
//! - `{op, args, response}`: any op, keyed by its id and the canonical JSON (RFC 8785,
//!   `corral_guard::canonical`) of its arguments (`args` absent or `null` is `{}`); `response`
//!   is the op's JSON answer;
//! - `{op, args, error: {code, message}}`: the op fails with a code of corral's catalog (not a
//!   `server.*` or `store.*` one: those mean corral's own infrastructure failed, and a run keeps
//!   them apart from the agent's failures), nor one only corral's guard chain or the lab answers
//!   (`policy.denied`, `budget.exhausted`, `lab.mock_miss`, ...: a mock may not forge a refusal
//!   or a miss the run did not have).
//!
//! No mocked answer may contain `[[mock-miss:`, the opening of the marker a miss prints (a hit
//! would print what a miss prints). These hold however the scenario was built.
//!
//! Validation refuses, each with its own code: no steps (`lab.scenario_no_steps`), a mock with
//! both `resource` and `op` (`lab.mock_ambiguous`), a malformed mock (`lab.mock_invalid`), two
//! mocks with one key (`lab.mock_duplicate`), anything else malformed (`lab.scenario_invalid`).

use std::collections::HashMap;
use std::sync::Arc;

use corral_guard::canonical::canonical;
use corral_policy::codes;
use serde_json::{Map, Value, json};

/// One step: the input the agent gets, and optionally what it should answer (for scorers).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The step's input (for the identity agent, the resource it asks for).
    pub input: String,
    /// The expected output, for scorers; the runner does not read it.
    pub expected: Option<Value>,
}

/// What an op mock answers.
#[derive(Debug, Clone, PartialEq)]
pub enum MockAnswer {
    /// The op's JSON answer.
    Response(Value),
    /// The op fails with a catalog code and a message.
    Error {
        /// A code of corral's catalog.
        code: &'static str,
        /// The message the caller sees.
        message: String,
    },
}

/// One mock, as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Mock {
    /// The identity agent's lookup of `resource`.
    Resource {
        /// The exact resource text.
        resource: String,
        /// The mocked string.
        response: String,
    },
    /// A call of `op` with `args`.
    Op {
        /// The op id.
        op: String,
        /// The arguments (`{}` when absent).
        args: Value,
        /// Its answer or error.
        answer: MockAnswer,
    },
}

/// The mocks of a scenario as lookups: by resource, and by op then canonical arguments.
#[derive(Debug, Default)]
pub struct MockTable {
    resources: HashMap<String, String>,
    ops: HashMap<String, HashMap<String, MockAnswer>>,
}

impl MockTable {
    /// The mocked string for a resource (exact text).
    pub fn resource(&self, resource: &str) -> Option<&str> {
        self.resources.get(resource).map(String::as_str)
    }

    /// The mocked answer for `op` called with `args` (`null` is `{}`).
    pub fn op(&self, op: &str, args: &Value) -> Option<&MockAnswer> {
        let by_args = self.ops.get(op)?;
        by_args.get(&canonical_args(args))
    }
}

/// The canonical JSON of a call's arguments, `null` read as `{}`.
pub fn canonical_args(args: &Value) -> String {
    match args {
        Value::Null => "{}".to_owned(),
        other => canonical(other),
    }
}

/// The resource text of an op call, as a miss marker shows it: `<op> <canonical args JSON>`.
pub fn op_resource(op: &str, args: &Value) -> String {
    format!("{op} {}", canonical_args(args))
}

/// Why a scenario was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ScenarioError {
    /// A `lab.*` code of the catalog.
    pub code: &'static str,
    /// What is wrong, where (`mocks[2]`), and how to fix it.
    pub message: String,
}

impl ScenarioError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// A validated scenario. Cheap to share: its mock table is behind an `Arc`.
#[derive(Debug, Clone)]
pub struct Scenario {
    name: String,
    description: String,
    steps: Vec<Step>,
    mocks: Vec<Mock>,
    table: Arc<MockTable>,
}

fn invalid(message: String) -> ScenarioError {
    ScenarioError::new(codes::LAB_SCENARIO_INVALID, message)
}

fn only_keys(obj: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), ScenarioError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(invalid(format!(
            "{at}: unknown key `{k}`; a {at} has {}",
            allowed
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

impl Scenario {
    /// Validates a scenario from its parts.
    pub fn new(
        name: &str,
        description: &str,
        steps: Vec<Step>,
        mocks: Vec<Mock>,
    ) -> Result<Self, ScenarioError> {
        if name.trim().is_empty() {
            return Err(invalid(
                "the scenario has an empty `name`; give it one".to_owned(),
            ));
        }
        if steps.is_empty() {
            return Err(ScenarioError::new(
                codes::LAB_SCENARIO_NO_STEPS,
                format!(
                    "scenario `{name}` has no steps, so a run of it would judge nothing; add at least one `{{\"input\": \"...\"}}`"
                ),
            ));
        }
        let table = table_of(&mocks)?;
        Ok(Self {
            name: name.to_owned(),
            description: description.to_owned(),
            steps,
            mocks,
            table: Arc::new(table),
        })
    }

    /// Reads and validates a scenario's JSON.
    pub fn from_json(v: &Value) -> Result<Self, ScenarioError> {
        let Some(obj) = v.as_object() else {
            return Err(invalid(
                "a scenario is a JSON object `{name, description?, steps, mocks?}`".to_owned(),
            ));
        };
        only_keys(obj, &["name", "description", "steps", "mocks"], "scenario")?;
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("the scenario needs a string `name`".to_owned()))?;
        let description = match obj.get("description") {
            None | Some(Value::Null) => "",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(invalid("`description` must be a string".to_owned())),
        };
        let steps = match obj.get("steps") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, s)| step_of(i, s))
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(invalid(
                    "`steps` must be a list of `{input, expected?}`".to_owned(),
                ));
            }
        };
        let mocks = match obj.get("mocks") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, m)| mock_of(i, m))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid("`mocks` must be a list".to_owned())),
        };
        Self::new(name, description, steps, mocks)
    }

    /// The scenario as JSON, in the form `from_json` reads.
    pub fn to_json(&self) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| match &s.expected {
                None => json!({"input": s.input}),
                Some(e) => json!({"input": s.input, "expected": e}),
            })
            .collect();
        let mocks: Vec<Value> = self
            .mocks
            .iter()
            .map(|m| match m {
                Mock::Resource { resource, response } => {
                    json!({"resource": resource, "response": response})
                }
                Mock::Op {
                    op,
                    args,
                    answer: MockAnswer::Response(r),
                } => json!({"op": op, "args": args, "response": r}),
                Mock::Op {
                    op,
                    args,
                    answer: MockAnswer::Error { code, message },
                } => json!({"op": op, "args": args, "error": {"code": code, "message": message}}),
            })
            .collect();
        json!({"name": self.name, "description": self.description, "steps": steps, "mocks": mocks})
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Its steps, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Its mocks, as written.
    pub fn mocks(&self) -> &[Mock] {
        &self.mocks
    }

    /// Its mocks as lookups (shared, never copied per run).
    pub fn table(&self) -> &Arc<MockTable> {
        &self.table
    }
}

fn step_of(i: usize, v: &Value) -> Result<Step, ScenarioError> {
    let at = format!("steps[{i}]");
    let Some(obj) = v.as_object() else {
        return Err(invalid(format!(
            "{at}: a step is an object `{{\"input\": \"...\"}}`"
        )));
    };
    only_keys(obj, &["input", "expected"], &at)?;
    let input = obj
        .get("input")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{at}: a step needs a string `input`")))?;
    Ok(Step {
        input: input.to_owned(),
        expected: obj.get("expected").cloned(),
    })
}

fn mock_invalid(at: &str, why: &str) -> ScenarioError {
    ScenarioError::new(codes::LAB_MOCK_INVALID, format!("{at}: {why}"))
}

fn mock_of(i: usize, v: &Value) -> Result<Mock, ScenarioError> {
    let at = format!("mocks[{i}]");
    let Some(obj) = v.as_object() else {
        return Err(mock_invalid(
            &at,
            "a mock is an object `{resource, response}` or `{op, args, response}`",
        ));
    };
    match (obj.get("resource"), obj.get("op")) {
        (Some(_), Some(_)) => Err(ScenarioError::new(
            codes::LAB_MOCK_AMBIGUOUS,
            format!(
                "{at} names both `resource` and `op`; split it in two mocks: `{{resource, response}}` for the identity agent, `{{op, args, response}}` for an op"
            ),
        )),
        (None, None) => Err(mock_invalid(
            &at,
            "a mock needs `resource` (the identity agent's lookup) or `op` (an op call)",
        )),
        (Some(resource), None) => {
            only_keys(obj, &["resource", "response"], &at)?;
            let resource = resource
                .as_str()
                .ok_or_else(|| mock_invalid(&at, "`resource` must be a string"))?;
            let response = match obj.get("response") {
                Some(Value::String(s)) => s.clone(),
                Some(_) => {
                    return Err(mock_invalid(
                        &at,
                        "a resource mock's `response` must be a string (the text the step answers)",
                    ));
                }
                None => return Err(mock_invalid(&at, "a resource mock needs a `response`")),
            };
            Ok(Mock::Resource {
                resource: resource.to_owned(),
                response,
            })
        }
        (None, Some(op)) => {
            only_keys(obj, &["op", "args", "response", "error"], &at)?;
            let op = op
                .as_str()
                .ok_or_else(|| mock_invalid(&at, "`op` must be a string (an op id)"))?;
            corral_policy::OpId::parse(op).map_err(|e| mock_invalid(&at, &e.to_string()))?;
            let args = match obj.get("args") {
                None | Some(Value::Null) => json!({}),
                Some(a @ Value::Object(_)) => a.clone(),
                Some(_) => {
                    return Err(mock_invalid(
                        &at,
                        "`args` must be an object (the call's arguments)",
                    ));
                }
            };
            let answer = match (obj.get("response"), obj.get("error")) {
                (Some(_), Some(_)) => {
                    return Err(mock_invalid(
                        &at,
                        "a mock has `response` or `error`, not both",
                    ));
                }
                (None, None) => {
                    return Err(mock_invalid(
                        &at,
                        "an op mock needs a `response` (the op's JSON answer) or an `error`",
                    ));
                }
                (Some(r), None) => MockAnswer::Response(r.clone()),
                (None, Some(e)) => error_of(&at, e)?,
            };
            Ok(Mock::Op {
                op: op.to_owned(),
                args,
                answer,
            })
        }
    }
}

fn error_of(at: &str, e: &Value) -> Result<MockAnswer, ScenarioError> {
    let shape = "`error` is `{code, message}` with a code from docs/errors.md";
    let Some(obj) = e.as_object() else {
        return Err(mock_invalid(at, shape));
    };
    only_keys(obj, &["code", "message"], &format!("{at}.error"))?;
    let code = obj
        .get("code")
        .and_then(Value::as_str)
        .ok_or_else(|| mock_invalid(at, shape))?;
    let info = error_code(at, code)?;
    let message = match obj.get("message") {
        None => info.title.to_owned(),
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(mock_invalid(at, "`error.message` must be a string")),
    };
    Ok(MockAnswer::Error {
        code: info.code,
        message,
    })
}

/// Whether a code is one only corral's guard chain, its surfaces, its config or the lab answer
/// (never an op's handler): a mocked op error may not forge one, or a run would count a policy
/// refusal, a spent budget or a mock miss that never happened.
pub fn is_gate_or_lab(code: &str) -> bool {
    const FAMILIES: &[&str] = &[
        "lab.",
        "auth.",
        "autonomy.",
        "rbac.",
        "budget.",
        "run.",
        "confirmation.",
        "audit.",
        "route.",
        "config.",
        "lint.",
    ];
    const CODES: &[&str] = &[
        codes::OP_NOT_ENABLED,
        codes::POLICY_DENIED,
        codes::LIMIT_RATE,
        codes::LIMIT_CONCURRENCY,
    ];
    FAMILIES.iter().any(|f| code.starts_with(f)) || CODES.contains(&code)
}

/// The miss marker's opening, which no mocked answer may contain: a mocked answer carrying it
/// would print what a miss prints while the run counts a hit.
const MARKER_OPEN: &str = "[[mock-miss:";

/// Whether a mocked JSON answer holds the miss marker's opening in any string or key.
fn carries_marker(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains(MARKER_OPEN),
        Value::Array(items) => items.iter().any(carries_marker),
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.contains(MARKER_OPEN) || carries_marker(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn marker_refused(at: &str) -> ScenarioError {
    mock_invalid(
        at,
        &format!(
            "the mocked answer contains `{MARKER_OPEN}`, the opening of the marker a miss prints, so a hit would print what a miss prints; reword that text"
        ),
    )
}

/// Whether a code means corral's own infrastructure failed (the server, the audit, the store,
/// the isolation backend that runs a program, a command scorer), not the agent.
pub fn is_infrastructure(code: &str) -> bool {
    code.starts_with("server.")
        || code.starts_with("store.")
        || code.starts_with("isolation.")
        || code.starts_with("exec.")
        || code == corral_policy::codes::LAB_SCORER_FAILED
}

/// What every mock's answer must hold, however the scenario was built (`from_json` or `new`):
/// an error code of the catalog that an op can answer, and no miss marker in a mocked answer.
fn check_answer(at: &str, m: &Mock) -> Result<(), ScenarioError> {
    match m {
        Mock::Resource { response, .. } if response.contains(MARKER_OPEN) => {
            Err(marker_refused(at))
        }
        Mock::Op {
            answer: MockAnswer::Response(r),
            ..
        } if carries_marker(r) => Err(marker_refused(at)),
        Mock::Op {
            answer: MockAnswer::Error { code, .. },
            ..
        } => error_code(at, code).map(|_| ()),
        Mock::Resource { .. } | Mock::Op { .. } => Ok(()),
    }
}

/// A mocked error's code: in the catalog, and one an op can answer.
fn error_code(at: &str, code: &str) -> Result<&'static codes::CodeInfo, ScenarioError> {
    let info = codes::lookup(code).ok_or_else(|| {
        mock_invalid(
            at,
            &format!("`{code}` is not a code of corral's catalog; use one from docs/errors.md"),
        )
    })?;
    if is_gate_or_lab(info.code) {
        return Err(mock_invalid(
            at,
            &format!(
                "`{code}` is answered by corral's guard chain or the lab itself (a refusal, a budget, a miss), never by an op, so a mock answering it would report a refusal or a miss the run did not have; mock the op's own failure instead (e.g. `files.not_found`)"
            ),
        ));
    }
    if is_infrastructure(info.code) {
        return Err(mock_invalid(
            at,
            &format!(
                "`{code}` means corral's own infrastructure failed, and a run keeps those apart from the agent's failures; mock the op's own failure instead (e.g. `files.not_found`)"
            ),
        ));
    }
    Ok(info)
}

fn table_of(mocks: &[Mock]) -> Result<MockTable, ScenarioError> {
    let mut t = MockTable::default();
    // Where each key was first written, for the duplicate's message.
    let mut first: HashMap<String, usize> = HashMap::new();
    for (i, m) in mocks.iter().enumerate() {
        check_answer(&format!("mocks[{i}]"), m)?;
        let (key, shown) = match m {
            Mock::Resource { resource, response } => {
                t.resources.insert(resource.clone(), response.clone());
                (format!("r {resource}"), format!("resource `{resource}`"))
            }
            Mock::Op { op, args, answer } => {
                let canon = canonical_args(args);
                let shown = format!("`{op}` with arguments {canon}");
                t.ops
                    .entry(op.clone())
                    .or_default()
                    .insert(canon.clone(), answer.clone());
                (format!("o {op} {canon}"), shown)
            }
        };
        if let Some(j) = first.insert(key, i) {
            return Err(ScenarioError::new(
                codes::LAB_MOCK_DUPLICATE,
                format!(
                    "mocks[{j}] and mocks[{i}] both answer {shown}; keep one of them: a call has exactly one mocked answer"
                ),
            ));
        }
    }
    Ok(t)
}
