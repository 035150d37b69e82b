//! The lab's tools for an admin agent (`sandbox_*`): the same `LabService` methods as the HTTP
//! routes, with the same role checks, tenancy and one audit event per call. A tool is listed
//! only to a caller whose role the action needs (viewer reads, operator writes and runs), and
//! none is listed, or answered, when the lab is off (`sandbox.enabled: false`).
//!
//! The names use `_` (`sandbox_scenarios_run`): MCP tool names allow letters, digits, `_`, `-`
//! and `.`, and op ids are dotted (`files.read`), so a lab tool can never shadow an op's tool.

use std::sync::Arc;

use corral_guard::{Caller, Refusal};
use corral_lab::service::{
    CompareBody, LabError, LabService, PageQuery, ReplayBody, RunBody, ScenarioBody,
    TournamentBody, parse, role_needed,
};
use corral_lab::synthetic;
use corral_policy::{Principal, Role, codes};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// One lab tool: its name, the service action it is (as audited), what it does, its schema.
struct LabTool {
    name: &'static str,
    action: &'static str,
    summary: &'static str,
    schema: fn() -> Value,
}

fn id_schema() -> Value {
    json!({"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}, "additionalProperties": false})
}

fn page_schema() -> Value {
    json!({"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 500}, "after": {"type": "string"}}, "additionalProperties": false})
}

const TOOLS: &[LabTool] = &[
    LabTool {
        name: "sandbox_generate",
        action: "sandbox.generate",
        summary: "synthetic inputs from a template (`{{index}}`, `{{subject_kind}}`); stores nothing",
        schema: || json!({"type": "object", "properties": {"subject_kind": {"type": "string"}, "count": {"type": "integer", "minimum": 1, "maximum": 100}, "seed": {"type": "string", "description": "the template"}}, "additionalProperties": false}),
    },
    LabTool {
        name: "sandbox_scenarios_list",
        action: "sandbox.scenarios.list",
        summary: "a page of the lab's scenarios, newest first",
        schema: page_schema,
    },
    LabTool {
        name: "sandbox_scenarios_get",
        action: "sandbox.scenarios.get",
        summary: "a lab scenario: its steps and mocks",
        schema: id_schema,
    },
    LabTool {
        name: "sandbox_scenarios_create",
        action: "sandbox.scenarios.create",
        summary: "creates a lab scenario: steps (or the samples of sandbox_generate) and mocks",
        schema: || json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "description": {"type": "string"}, "steps": {"type": "array"}, "samples": {"type": "array"}, "mocks": {"type": "array"}}, "additionalProperties": false}),
    },
    LabTool {
        name: "sandbox_scenarios_run",
        action: "sandbox.scenarios.run",
        summary: "runs a lab scenario against its mocks (nothing real is reached) and records the run; with a `scorer` and k `trials` the run has `trials_passed`, `pass_at_k` and `pass_hat_k` (null when not scored)",
        schema: || json!({"type": "object", "required": ["id", "variant"], "properties": {"id": {"type": "string"}, "variant": {"type": "string"}, "workflow": {"type": "string"}, "program": {"type": "string", "description": "an external program declared under `sandbox.programs`"}, "seed": {"type": "integer", "minimum": 0}, "trials": {"type": "integer", "minimum": 1, "maximum": 100}, "scorer": {"type": "string", "description": "exact, regex, json_path, or command:<name> of a scorer under `sandbox.scorers`"}, "isolation": {"type": "string", "enum": ["inproc-mock", "linux"]}}, "additionalProperties": false}),
    },
    LabTool {
        name: "sandbox_runs_get",
        action: "sandbox.runs.get",
        summary: "a lab run: status, counts, attestation, misses, verdict",
        schema: id_schema,
    },
    LabTool {
        name: "sandbox_runs_outputs",
        action: "sandbox.runs.outputs",
        summary: "a lab run's outputs, by trial then step",
        schema: id_schema,
    },
    LabTool {
        name: "sandbox_compare",
        action: "sandbox.compare",
        summary: "runs two variants on the same scenarios and seeds and records the before/after verdict (`deploy: true` needs admin)",
        schema: || json!({"type": "object", "required": ["baseline", "candidate", "scenarios"], "properties": {"baseline": {"type": "object"}, "candidate": {"type": "object"}, "scenarios": {"type": "array", "items": {"type": "string"}}, "trials": {"type": "integer"}, "seed": {"type": "integer"}, "scorer": {"type": "string"}, "margin": {"type": "number"}, "deploy": {"type": "boolean"}, "workers": {"type": "integer", "minimum": 1, "maximum": corral_lab::service::MAX_COMPARE_WORKERS, "description": "runs executed at once (default: the CPUs, at most the maximum); the verdict does not depend on it"}}, "additionalProperties": false}),
    },
    LabTool {
        name: "sandbox_replay",
        action: "sandbox.replay",
        summary: "replays a recorded run deterministically (the recording's responses answer every call; nothing real is reached): without a variant its calls, every output compared byte for byte; with one the recorded task input, each call the recording lacks a divergence; a gapped or capped recording is `degraded` with zero steps (the recording's own principal or an admin)",
        schema: || json!({"type": "object", "required": ["id"], "properties": {"id": {"type": "string", "description": "the recorded run's id"}, "variant": {"type": "string"}, "workflow": {"type": "string"}, "program": {"type": "string"}, "seed": {"type": "integer", "minimum": 0}}, "additionalProperties": false}),
    },
    LabTool {
        name: "sandbox_tournament",
        action: "sandbox.tournament",
        summary: "grades finished runs of one scenario (one per variant) by a command judge asked about every task and pair in both orders: a Bradley-Terry ranking with bootstrap intervals, the judge's position bias, and the verdict between the top two; the answer is stored",
        schema: || json!({"type": "object", "required": ["runs", "judge"], "properties": {"runs": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": corral_lab::service::MAX_TOURNAMENT_RUNS}, "judge": {"type": "string", "description": "command:<name> of a judge under `sandbox.judges`"}, "seed": {"type": "integer", "minimum": 0}, "bootstrap": {"type": "integer", "minimum": 1, "maximum": corral_lab::tournament::MAX_BOOTSTRAP}}, "additionalProperties": false}),
    },
    LabTool {
        name: "sandbox_shadow_run",
        action: "sandbox.shadows.run",
        summary: "shadow evaluation: re-runs recorded tasks (run ids of recordings with a task input) under each variant (a `workflow` or a declared `program`), N*M replay runs with the real tools and unsafe ops absent, and answers the report when they are done: per run its first divergence from the recording, the pairs a ceiling stopped, the metering. Every variant is checked first (its first unsafe or unknown op is named, nothing runs); over 10 runs `expected_runs` must be N*M",
        schema: || json!({"type": "object", "required": ["tasks", "variants"], "properties": {"tasks": {"type": "array", "items": {"type": "string"}, "minItems": 1}, "variants": {"type": "array", "items": {"type": "object", "required": ["variant"], "properties": {"variant": {"type": "string"}, "workflow": {"type": "string"}, "program": {"type": "string"}}, "additionalProperties": false}, "minItems": 1}, "seed": {"type": "integer", "minimum": 0}, "scorer": {"type": "string"}, "expected_runs": {"type": "integer", "minimum": 0, "description": "N variants x M tasks: required over 10 runs"}, "principal": {"type": "string", "description": "whose recording of each task (its `identity`, or the principal's id), when several principals recorded under a run id (an admin's pick)"}}, "additionalProperties": false}),
    },
    LabTool {
        name: "sandbox_shadows_get",
        action: "sandbox.shadows.get",
        summary: "a shadow evaluation: status, ran of planned, run ids per task and variant, not run pairs, report",
        schema: id_schema,
    },
];

/// Whether `name` is a lab tool's.
pub fn is_lab_tool(name: &str) -> bool {
    TOOLS.iter().any(|t| t.name == name)
}

/// The lab tools `principal` may use; none when the lab is off.
pub fn tools(lab: &LabService, principal: &Principal) -> Vec<Tool> {
    if !lab.enabled() {
        return Vec::new();
    }
    let have = Role::highest_of(&principal.roles);
    TOOLS
        .iter()
        .filter(|t| role_needed(t.action).is_some_and(|need| have.is_some_and(|h| h >= need)))
        .map(|t| {
            let schema = match (t.schema)() {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            let read_only = role_needed(t.action) == Some(Role::Viewer);
            Tool::new(t.name, t.summary, Arc::new(schema)).with_annotations(
                ToolAnnotations::new()
                    .read_only(read_only)
                    .destructive(false)
                    .open_world(false),
            )
        })
        .collect()
}

fn failed(e: &LabError, rid: &str) -> CallToolResult {
    let r = Refusal::new(e.code, e.message.clone());
    let mut res = CallToolResult::error(vec![ContentBlock::text(format!(
        "{}: {}",
        e.code, e.message
    ))]);
    res.structured_content = Some(json!({
        "code": e.code, "type": r.kind(), "error": e.message, "status": r.status(), "request_id": rid,
    }));
    res
}

fn done<T: Serialize>(v: &T) -> CallToolResult {
    let v = serde_json::to_value(v).unwrap_or(Value::Null);
    let mut res = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
    if v.is_object() {
        res.structured_content = Some(v);
    }
    res
}

fn take_id(args: &mut Map<String, Value>) -> Result<String, LabError> {
    match args.remove("id") {
        Some(Value::String(s)) => Ok(s),
        _ => Err(LabError {
            code: codes::ARGS_INVALID,
            message: "the tool needs a string `id`".to_owned(),
        }),
    }
}

fn page_of(args: &Map<String, Value>) -> PageQuery {
    PageQuery {
        limit: args
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(50, |l| u32::try_from(l).unwrap_or(u32::MAX)),
        after: args.get("after").and_then(Value::as_str).map(str::to_owned),
    }
}

/// A lab tool call, its arguments read.
enum Request {
    Generate(synthetic::Request),
    ScenariosList(PageQuery),
    ScenariosGet(String),
    ScenariosCreate(ScenarioBody),
    ScenariosRun(String, RunBody),
    RunsGet(String),
    RunsOutputs(String),
    Compare(CompareBody),
    Replay(String, ReplayBody),
    Tournament(TournamentBody),
    ShadowRun(corral_lab::shadow::ShadowBody),
    ShadowsGet(String),
}

fn request_of(name: &str, mut args: Map<String, Value>) -> Result<Request, LabError> {
    Ok(match name {
        "sandbox_generate" => Request::Generate(parse(name, Value::Object(args))?),
        "sandbox_scenarios_list" => Request::ScenariosList(page_of(&args)),
        "sandbox_scenarios_get" => Request::ScenariosGet(take_id(&mut args)?),
        "sandbox_scenarios_create" => Request::ScenariosCreate(parse(name, Value::Object(args))?),
        "sandbox_scenarios_run" => {
            let id = take_id(&mut args)?;
            Request::ScenariosRun(id, parse(name, Value::Object(args))?)
        }
        "sandbox_runs_get" => Request::RunsGet(take_id(&mut args)?),
        "sandbox_runs_outputs" => Request::RunsOutputs(take_id(&mut args)?),
        "sandbox_compare" => Request::Compare(parse(name, Value::Object(args))?),
        "sandbox_replay" => {
            let id = take_id(&mut args)?;
            Request::Replay(id, parse(name, Value::Object(args))?)
        }
        "sandbox_tournament" => Request::Tournament(parse(name, Value::Object(args))?),
        "sandbox_shadow_run" => Request::ShadowRun(parse(name, Value::Object(args))?),
        "sandbox_shadows_get" => Request::ShadowsGet(take_id(&mut args)?),
        _ => {
            return Err(LabError {
                code: codes::OP_NOT_ENABLED,
                message: format!("there is no lab tool `{name}`; `tools/list` lists yours"),
            });
        }
    })
}

/// Calls the lab tool `name` as `caller`: one audit event, as the route's.
pub async fn call(
    lab: &LabService,
    caller: &Caller,
    name: &str,
    args: Map<String, Value>,
) -> CallToolResult {
    let rid = uuid::Uuid::now_v7().to_string();
    let action = TOOLS
        .iter()
        .find(|t| t.name == name)
        .map_or("sandbox", |t| t.action);
    // Refused before the action (the lab is off, the arguments do not parse): audited here.
    let req = match lab.check_enabled().and_then(|()| request_of(name, args)) {
        Ok(r) => r,
        Err(e) => return failed(&lab.rejected(caller, &rid, action, e).await, &rid),
    };
    let r = match req {
        Request::Generate(q) => lab.generate(caller, &rid, &q).await.map(|b| done(&b)),
        Request::ScenariosList(p) => lab.list_scenarios(caller, &rid, &p).await.map(|p| {
            done(&json!({"items": p.items, "next": p.next.as_ref().map(ToString::to_string)}))
        }),
        Request::ScenariosGet(id) => lab.get_scenario(caller, &rid, &id).await.map(|s| done(&s)),
        Request::ScenariosCreate(b) => lab.create_scenario(caller, &rid, b).await.map(|s| done(&s)),
        Request::ScenariosRun(id, b) => lab.run(caller, &rid, &id, b).await.map(|r| done(&r)),
        Request::RunsGet(id) => lab.get_run(caller, &rid, &id).await.map(|r| done(&r)),
        Request::RunsOutputs(id) => lab
            .outputs(caller, &rid, &id)
            .await
            .map(|o| done(&json!({"items": o}))),
        Request::Compare(b) => lab.compare(caller, &rid, b).await.map(|c| done(&c)),
        Request::Replay(id, b) => lab.replay(caller, &rid, &id, b).await.map(|r| done(&r)),
        // The ceiling of judge calls: the config's `budgets.judge.max_calls`.
        Request::Tournament(b) => lab
            .tournament(caller, &rid, b, lab.max_judge_calls())
            .await
            .map(|t| done(&t)),
        Request::ShadowRun(b) => lab.shadow(caller, &rid, b).await.map(|s| done(&s)),
        Request::ShadowsGet(id) => lab.get_shadow(caller, &rid, &id).await.map(|s| done(&s)),
    };
    r.unwrap_or_else(|e| failed(&e, &rid))
}
