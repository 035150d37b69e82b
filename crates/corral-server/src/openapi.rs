//! The OpenAPI 3.1 document, generated from the ops a caller may call: one `POST /ops/{id}`
//! path per op, its parameters as a JSON schema (and the guardrail headers), the shared error
//! schema, the `202 confirmation.required` answer of guarded ops, and every other route of the
//! server (`routes::router`): the listings, `/confirmations`, `/audit`, the lab's and the agents
//! host's routes (also under `/agents/{adapter}`), the LLM proxy, `/mcp`, `/healthz`,
//! `/metrics`, `/llms.txt` and this document. Every operation that needs a token answers 401
//! without one, and every request body is required.

use corral_policy::{OpSpec, Tier};
use serde_json::{Value, json};

/// The pattern of `X-Corral-Run` (and of a run id anywhere).
const RUN_PATTERN: &str = "^[A-Za-z0-9_.:-]{1,128}$";

/// An op's arguments: its input schema, and what the MCP tool list leaves out (hosts refuse
/// `anyOf` at a tool schema's root; the call says what is wrong): a command is `argv` or
/// `command`, exactly one.
fn op_body(op: &OpSpec) -> serde_json::Map<String, Value> {
    let mut schema = corral_mcp::schema::input_schema(op);
    let has = |name: &str| op.params.iter().any(|p| p.name == name);
    if has("argv") && has("command") {
        schema.insert(
            "anyOf".to_owned(),
            json!([{"required": ["argv"]}, {"required": ["command"]}]),
        );
        schema.insert("not".to_owned(), json!({"required": ["argv", "command"]}));
    }
    schema
}

/// A query text of 1 to `max` characters with no control character.
fn text_param(name: &str, max: u32, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description,
           "schema": {"type": "string", "minLength": 1, "maxLength": max, "pattern": NO_CONTROL}})
}

/// Text with no control character (Unicode's `Cc`: U+0000-U+001F and U+007F-U+009F).
const NO_CONTROL: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

/// A label (a variant, a scenario's name): 1 to 200 characters, no control character, not
/// only spaces.
fn label_schema(description: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 200, "description": description,
           "pattern": "^[^\\u0000-\\u001F\\u007F-\\u009F]*[^\\u0000-\\u0020\\u007F-\\u009F][^\\u0000-\\u001F\\u007F-\\u009F]*$"})
}

/// What of the deployment decides which routes answer, and what they take: the LLM proxy's
/// routes only with a provider (`llm:`), `POST /learning/hint` only in learning mode, the
/// agent sessions' routes only with an adapter mounted, a tournament only with a judge, and the
/// lab's `program`, `scorer` and `judge` names only as declared.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    /// Learning mode is on.
    pub learning: bool,
    /// The LLM proxy has a provider.
    pub llm: bool,
    /// The agent adapters mounted (`agents:`).
    pub adapters: Vec<String>,
    /// `sandbox.programs`, by name.
    pub programs: Vec<String>,
    /// `sandbox.scorers`, by name.
    pub scorers: Vec<String>,
    /// `sandbox.judges`, by name.
    pub judges: Vec<String>,
}

/// The pattern of a lab listing's page cursor (`<ms>.<id>`), or empty (the first page).
const LAB_CURSOR: &str = "^([0-9]{1,15}\\.[A-Za-z0-9_-]{1,64})?$";

/// The document.
pub fn document(ops: &[&OpSpec], routes: &Routes) -> Value {
    let mut paths = serde_json::Map::new();
    for op in ops {
        let schema = op_body(op);
        let err = json!({"$ref": "#/components/schemas/Error"});
        let mut responses = json!({
            "200": {"description": "the op's result", "content": {"application/json": {"schema": {"type": "object"}}}},
            "400": {"description": "args.*, run.invalid_header", "content": {"application/json": {"schema": err}}},
            "401": {"description": "auth.*", "content": {"application/json": {"schema": err}}},
            "403": {"description": "autonomy.blocked, rbac.denied, policy.*, confirmation.denied", "content": {"application/json": {"schema": err}}},
            "404": {"description": "op.not_enabled", "content": {"application/json": {"schema": err}}},
            "413": {"description": "limit.*", "content": {"application/json": {"schema": err}}},
            "409": {"description": "the op met the world in another state than it needs: files.exists, files.not_a_file, files.not_a_directory, files.not_empty, files.not_text", "content": {"application/json": {"schema": err}}},
            "429": {"description": "limit.*, budget.exhausted", "content": {"application/json": {"schema": err}}}
        });
        if op.id.as_str() == "files.download" {
            responses["200"] = json!({"description": "the file's bytes, with the content type its name implies (`application/octet-stream` when none)",
                                      "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}});
        }
        if op.tier() != Tier::Read {
            responses["202"] = json!({
                "description": "confirmation.required: a person approves the action, then the same call is retried",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConfirmationRequired"}}}
            });
            responses["409"] = json!({"description": "files.exists, files.not_a_file, files.not_a_directory, files.not_empty, files.not_text, confirmation.in_progress, confirmation.not_replayable", "content": {"application/json": {"schema": err}}});
            responses["413"] = json!({"description": "limit.*, confirmation.args_too_large", "content": {"application/json": {"schema": err}}});
            responses["429"] = json!({"description": "limit.*, budget.exhausted, confirmation.too_many_pending", "content": {"application/json": {"schema": err}}});
        }
        paths.insert(
            format!("/ops/{}", op.id),
            json!({"post": {
                "operationId": op.id.as_str(),
                "summary": op.summary,
                "x-corral-effects": op.effective_effects().iter().map(|e| e.as_str()).collect::<Vec<_>>(),
                "x-corral-tier": op.tier().as_str(),
                "requestBody": {"content": {"application/json": {"schema": schema}}},
                "parameters": [
                    {"name": "X-Corral-Run", "in": "header", "required": false, "schema": {"type": "string", "pattern": RUN_PATTERN}, "description": "the run the call belongs to (budgets; the run's own level and dry-run); with it, `X-Corral-Record: on` records the call in the run's recording (the role `operator` or `admin`: 403 recording.not_allowed otherwise; without a run: 400 recording.header_invalid)"},
                    {"name": "X-Corral-Autonomy", "in": "header", "required": false, "schema": {"type": "string", "enum": ["L0", "L1", "L2", "L3", "L4"]}, "description": "lower the autonomy level (of the run, for good)"},
                    {"name": "X-Corral-Dry-Run", "in": "header", "required": false, "schema": {"type": "boolean"}, "description": "describe guarded calls instead of running them (for the run, for good)"}
                ],
                "responses": responses,
                "security": [{"bearer": []}]
            }}),
        );
    }
    let err = json!({"$ref": "#/components/schemas/Error"});
    audit_path(&mut paths, &err);
    paths.insert(
        "/confirmations".to_owned(),
        json!({"get": {
            "operationId": "confirmations.list",
            "summary": "a page of the caller's live actions (an admin: the tenant's), newest first, with their canonical arguments (each at most 64 KiB); a page is at most `limit` actions and about 4 MiB",
            "parameters": [
                {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}},
                {"name": "after", "in": "query", "required": false, "description": "the `next` of the previous page (empty: the first page)", "schema": {"type": "string", "pattern": "^([0-9]{1,15}\\.[A-Za-z0-9-]{1,64})?$"}}
            ],
            "responses": {
                "200": {"description": "`{confirmations: [...], next}`: `next` is the `after` of the next page, `null` on the last", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["confirmations", "next"],
                    "properties": {"confirmations": {"type": "array", "items": {"type": "object"}}, "next": {"type": ["string", "null"]}}
                }}}},
                "400": {"description": "args.unknown, args.invalid: a bad `limit` or `after`", "content": {"application/json": {"schema": err}}}
            },
            "security": [{"bearer": []}]
        }}),
    );
    paths.insert(
        "/confirmations/{action_id}/decision".to_owned(),
        json!({"post": {
            "operationId": "confirmations.decide",
            "summary": "approve (the requester, as a person) or deny (anyone in the tenant) a pending action",
            "parameters": [{"name": "action_id", "in": "path", "required": true, "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/json": {"schema": {
                "type": "object", "required": ["decision"], "additionalProperties": false,
                "properties": {"decision": {"type": "string", "enum": ["approve", "deny"]}, "decided_at_ms": {"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX}}
            }}}},
            "responses": {
                "200": {"description": "the decided action", "content": {"application/json": {"schema": {"type": "object"}}}},
                "400": {"description": "confirmation.invalid_decision, confirmation.future_decision", "content": {"application/json": {"schema": err}}},
                "403": {"description": "confirmation.approver_refused", "content": {"application/json": {"schema": err}}},
                "404": {"description": "confirmation.not_found", "content": {"application/json": {"schema": err}}},
                "409": {"description": "confirmation.stale_decision, confirmation.already_decided", "content": {"application/json": {"schema": err}}}
            },
            "security": [{"bearer": []}]
        }}),
    );
    sandbox_paths(&mut paths, &err, routes);
    agent_paths(&mut paths, &err, routes);
    platform_paths(&mut paths, &err, routes);
    finish(&mut paths, &err);
    json!({
        "openapi": "3.1.0",
        "info": {"title": "corral", "version": env!("CARGO_PKG_VERSION")},
        "servers": [{"url": "/", "description": "this server"}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {"type": "object", "required": ["error", "type", "code", "request_id"], "properties": {
                "error": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"},
                "op": {"type": ["string", "null"]}, "request_id": {"type": "string"}
            }}, "ConfirmationRequired": {"type": "object", "required": ["error", "type", "code", "request_id", "action_id", "tier", "reason", "args", "args_canonical", "approve"], "properties": {
                "error": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"},
                "op": {"type": "string"}, "request_id": {"type": "string"}, "action_id": {"type": "string"},
                "tier": {"type": "string"}, "reason": {"type": "string"}, "args": {"type": "object"},
                "args_canonical": {"type": "string"}, "op_version": {"type": "string"},
                "requester": {"type": "string"}, "created_at_ms": {"type": "integer"},
                "expires_at_ms": {"type": "integer"}, "approve": {"type": "object"}, "deny": {"type": "object"}
            }}}
        }
    })
}

/// `GET /audit`.
fn audit_path(paths: &mut serde_json::Map<String, Value>, err: &Value) {
    let purposes: Vec<&str> = corral_guard::runs::RunPurpose::ALL
        .iter()
        .map(|p| p.as_str())
        .collect();
    paths.insert(
        "/audit".to_owned(),
        json!({"get": {
            "operationId": "audit.list",
            "summary": "the most recent audit events of the caller's tenant, newest first (role admin); each filter given must match exactly",
            "parameters": [
                {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}},
                {"name": "run", "in": "query", "required": false, "description": "only the calls of this run (`X-Corral-Run`)", "schema": {"type": "string", "pattern": RUN_PATTERN}},
                text_param("op", 256, "only the calls of this op"),
                text_param("principal", 256, "only the calls of this principal id"),
                {"name": "purpose", "in": "query", "required": false, "description": "only the calls of this purpose: `live` (they act on the world) or `simulation` (a lab run's calls, answered by its mocks)", "schema": {"type": "string", "enum": purposes}},
                {"name": "after", "in": "query", "required": false, "description": "the `next` of the previous page, as it is (`<ts_ms>.<request_id>`); none (or empty) for the newest events", "schema": {"type": "string", "pattern": "^([0-9]{1,15}\\.[^\\u0000-\\u001f\\u007f-\\u009f]{1,256})?$"}}
            ],
            "responses": {
                "200": {"description": "`{tenant, events: [...], next}` (`next`: the cursor of the following page, `null` on the last); an event: `{request_id, tenant, ts_ms, principal_id, principal_kind, act_chain, op, outcome, code, rule, args_hash, args_shape, status, duration_us, attestation, purpose, trace_id, ...}`, `purpose` being `live` or `simulation`, `trace_id` (present when `telemetry:` exported the call's spans) the OpenTelemetry trace of the call", "content": {"application/json": {"schema": {"type": "object"}}}},
                "400": {"description": "args.unknown, args.invalid: an unknown parameter, or a bad `limit`, filter (`purpose` not one of the enum) or `after`", "content": {"application/json": {"schema": err}}},
                "403": {"description": "`audit.not_permitted`: the caller is not an admin", "content": {"application/json": {"schema": err}}}
            },
            "security": [{"bearer": []}]
        }}),
    );
}

/// The lab's routes (`/v1/sandbox/*`): every one needs a tier role (viewer reads, operator
/// writes and runs, admin records deploy comparisons) and answers `404 lab.disabled` when the
/// lab is off.
fn sandbox_paths(paths: &mut serde_json::Map<String, Value>, err: &Value, routes: &Routes) {
    let obj = json!({"type": "object"});
    let json_of =
        |d: &str| json!({"description": d, "content": {"application/json": {"schema": obj}}});
    let e = |d: &str| json!({"description": d, "content": {"application/json": {"schema": err}}});
    let common = |mut r: serde_json::Map<String, Value>| {
        r.insert("401".to_owned(), e("auth.missing, auth.invalid"));
        r.insert("403".to_owned(), e("rbac.denied: the caller lacks the role the action needs (the message names it and the one it has)"));
        r.insert("404".to_owned(), e("lab.disabled (`sandbox.enabled: false`), lab.not_found (no such id in the caller's tenant)"));
        Value::Object(r)
    };
    let map = |pairs: Vec<(&str, Value)>| {
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<serde_json::Map<String, Value>>()
    };
    let op = |id: &str,
              summary: &str,
              params: Value,
              body: Option<Value>,
              ok: (&str, Value),
              more: Vec<(&str, Value)>| {
        let mut responses = map(more);
        responses.insert(ok.0.to_owned(), ok.1);
        let mut o = map(vec![
            ("operationId", json!(id)),
            ("summary", json!(summary)),
            ("parameters", params),
            ("responses", common(responses)),
            ("security", json!([{"bearer": []}])),
        ]);
        if let Some(mut b) = body {
            nullable_optionals(&mut b);
            o.insert(
                "requestBody".to_owned(),
                json!({"required": true, "content": {"application/json": {"schema": b}}}),
            );
        }
        Value::Object(o)
    };
    let id_param = id_param();
    let page_params = page_params(corral_store::lab::MAX_PAGE);
    let scenario_body = scenario_body();
    let variant = variant_schema(routes);
    let mut scorers = vec![
        "exact".to_owned(),
        "regex".to_owned(),
        "json_path".to_owned(),
    ];
    scorers.extend(routes.scorers.iter().map(|s| format!("command:{s}")));
    let scorer = json!({"type": "string", "description": "`exact`, `regex`, `json_path`, or `command:<name>` of a scorer declared under `sandbox.scorers`", "enum": scorers});
    let bad = |d: &str| e(d);
    paths.insert("/v1/sandbox/synthetic-data".to_owned(), json!({"post": op(
        "sandbox.generate", "synthetic inputs from a template (spec 003): `{{index}}` and `{{subject_kind}}`; stores nothing (operator)", json!([]),
        Some(json!({"type": "object", "additionalProperties": false, "properties": {"subject_kind": {"type": ["string", "null"], "maxLength": 200}, "count": {"type": ["integer", "null"], "minimum": 1, "maximum": 100, "default": 10}, "seed": {"type": ["string", "null"], "maxLength": 8192, "description": "the template (at most 8192 characters)"}}})),
        ("200", json_of("`{samples: [{key, input}]}`")),
        vec![("400", bad("lab.synthetic_count, lab.synthetic_subject_too_long, lab.synthetic_template_too_long, args.invalid")), ("413", bad("limit.body_too_large")), ("422", bad("lab.synthetic_input_too_long, lab.synthetic_batch_too_large: what the template makes is too large; rejected whole"))],
    )}));
    paths.insert("/v1/sandbox/scenarios".to_owned(), json!({
        "post": op("sandbox.scenarios.create", "creates a scenario: steps (or the samples of synthetic-data) and mocks (operator)", json!([]), Some(scenario_body.clone()),
            ("201", json_of("the scenario `{id, name, description, steps, mocks, version, created_ms, updated_ms}`")),
            vec![("400", bad("args.invalid, args.malformed")), ("413", bad("lab.scenario_too_large, limit.body_too_large")), ("422", bad("lab.scenario_invalid, lab.scenario_no_steps, lab.mock_*: what the schema cannot say (a repeated mock, an error code no op answers, the miss marker in an answer)"))]),
        "get": op("sandbox.scenarios.list", "a page of the tenant's scenarios, newest first (viewer)", page_params.clone(), None,
            ("200", json_of("`{items: [summary], next}`")), vec![("400", bad("args.invalid, args.unknown"))]),
    }));
    paths.insert("/v1/sandbox/scenarios/{id}".to_owned(), json!({
        "get": op("sandbox.scenarios.get", "a scenario of the tenant (viewer)", id_param.clone(), None, ("200", json_of("the scenario")), vec![]),
        "put": op("sandbox.scenarios.update", "replaces a scenario; with `version`, only if unchanged since read (operator)", id_param.clone(), Some(scenario_body),
            ("200", json_of("the scenario, its version bumped")), vec![("400", bad("args.invalid, args.malformed")), ("409", bad("lab.version_conflict")), ("413", bad("lab.scenario_too_large, limit.body_too_large")), ("422", bad("lab.scenario_invalid, lab.scenario_no_steps, lab.mock_*"))]),
    }));
    paths.insert("/v1/sandbox/scenarios/{id}/runs".to_owned(), json!({"post": op(
        "sandbox.scenarios.run", "runs the scenario against its mocks, synchronously, and records it (operator)", id_param.clone(),
        Some(run_body(&variant, &scorer, routes)),
        ("201", json_of("the run `{id, scenario_id, status, runner, backend, isolated, destroyed, steps_total, steps_ok, steps_error, infra_errors, purpose, variant, seed, trials, scorer_suite, score, verdict, trials_passed, pass_at_k, pass_hat_k, error, mock_misses, ...}`: `trials_passed`, `pass_at_k` and `pass_hat_k` (k = `trials`; pass@k: at least one of the k trials passed, pass^k: all did) are numbers for a scored run and null for one not scored; a run whose outputs reach 64 MiB stops, `failed` with `error.code` lab.run_output_too_large")),
        vec![("400", bad("args.invalid")), ("422", bad("lab.program_unknown, lab.scorer_unknown, lab.isolation_unsupported, lab.expected_invalid, lab.workflow_invalid, lab.workflow_template")), ("503", bad("isolation.unavailable (a program or command scorer on a host without the linux backend)"))],
    )}));
    paths.insert("/v1/sandbox/runs".to_owned(), json!({"get": op(
        "sandbox.runs.list", "a page of the tenant's runs, of one scenario or all, newest first (viewer)",
        json!([{"name": "scenario", "in": "query", "required": false, "schema": {"type": "string"}}, page_params[0], page_params[1]]), None,
        ("200", json_of("`{items: [run], next}`")), vec![("400", bad("args.invalid, args.unknown"))],
    )}));
    paths.insert("/v1/sandbox/runs/{id}".to_owned(), json!({"get": op("sandbox.runs.get", "a run of the tenant (viewer)", id_param.clone(), None, ("200", json_of("the run, as `POST /v1/sandbox/scenarios/{id}/runs` answers it")), vec![])}));
    paths.insert("/v1/sandbox/runs/{id}/outputs".to_owned(), json!({"get": op("sandbox.runs.outputs", "a run's outputs by trial then step (viewer)", id_param.clone(), None, ("200", json_of("`{items: [{step, trial, input, output, ok, error_code, score, pass}]}`")), vec![])}));
    paths.insert("/v1/sandbox/comparisons".to_owned(), json!({
        "post": op("sandbox.compare", "runs both variants on the same scenarios, mocks and seeds, and records the verdict (operator; `deploy: true` needs admin)", json!([]),
            Some(json!({"type": "object", "required": ["baseline", "candidate", "scenarios"], "additionalProperties": false, "properties": {
                "baseline": variant, "candidate": variant, "scenarios": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 200, "uniqueItems": true},
                "trials": {"type": "integer", "minimum": 1, "maximum": 100, "default": 1}, "seed": {"type": "integer", "minimum": 0, "maximum": U64_MAX},
                "scorer": scorer, "margin": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.05}, "deploy": {"type": "boolean", "default": false},
                "workers": {"type": "integer", "minimum": 1, "maximum": corral_lab::service::MAX_COMPARE_WORKERS, "description": "runs executed at once; default: the server's CPUs, at most the maximum. The verdict, runs and seeds do not depend on it"}
            }})),
            ("201", json_of("the comparison `{id, baseline, candidate, scenarios, verdict, delta, lower, upper, margin, seed, resamples, forced_by, mcnemar_p, wilson, details, recorded_by, deploy, created_ms}`")),
            vec![("400", bad("args.invalid")), ("422", bad("lab.scorer_unknown, lab.program_unknown, lab.compare_invalid, lab.workflow_invalid, lab.workflow_template, lab.expected_invalid"))]),
        "get": op("sandbox.comparisons.list", "a page of the tenant's comparisons, newest first (viewer)", page_params.clone(), None,
            ("200", json_of("`{items: [comparison], next}`")), vec![("400", bad("args.invalid, args.unknown"))]),
    }));
    paths.insert("/v1/sandbox/comparisons/{id}".to_owned(), json!({"get": op("sandbox.comparisons.get", "a comparison of the tenant (viewer)", id_param.clone(), None, ("200", json_of("the comparison")), vec![])}));
    tournament_paths(paths, &op, &e, routes);
    shadow_paths(paths, &op, &variant, &scorer, &e);
    recording_paths(paths, err, routes);
}

/// A scenario to create or update: `steps`, or `samples` as `POST /v1/sandbox/synthetic-data`
/// answers them (one of the two). What the schema cannot say (mocks that repeat a key, an
/// error code an op cannot answer) is `422`.
fn scenario_body() -> Value {
    json!({"type": "object", "required": ["name"], "additionalProperties": false,
        "oneOf": [{"required": ["steps"], "not": {"required": ["samples"]}}, {"required": ["samples"], "not": {"required": ["steps"]}}],
        "properties": {
        "name": label_schema("a short name"), "description": {"type": "string", "maxLength": 4096},
        "steps": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["input"], "additionalProperties": false, "properties": {"input": {"type": "string"}, "expected": {}}}},
        "samples": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["key", "input"], "properties": {"key": {"type": "string"}, "input": {"type": "string"}}}},
        "mocks": {"type": "array", "items": {"oneOf": [
            {"type": "object", "required": ["resource", "response"], "additionalProperties": false, "properties": {"resource": {"type": "string"}, "response": {"type": "string"}}},
            {"type": "object", "required": ["op", "response"], "additionalProperties": false, "properties": {"op": {"type": "string", "maxLength": 128, "pattern": OP_ID}, "args": {"type": "object"}, "response": {}}},
            {"type": "object", "required": ["op", "error"], "additionalProperties": false, "properties": {"op": {"type": "string", "maxLength": 128, "pattern": OP_ID}, "args": {"type": "object"}, "error": {"type": "object", "required": ["code"], "additionalProperties": false, "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}}
        ]}},
        "version": {"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX, "description": "PUT only: the version read (409 lab.version_conflict if it changed)"}
    }})
}

/// An op id: dotted segments of letters, digits, `_` and `-`.
const OP_ID: &str = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$";

/// The largest unsigned integer of a body (a seed): `u64::MAX`.
const U64_MAX: u64 = u64::MAX;

/// A variant: a label and its agent, a `workflow` (YAML text), a declared `program`, or
/// neither (the identity agent).
fn variant_schema(routes: &Routes) -> Value {
    let mut v = json!({"type": "object", "required": ["variant"], "additionalProperties": false, "properties": {
        "variant": label_schema("a label such as `candidate`"),
        "workflow": {"type": "string", "description": "a declarative workflow (YAML text); absent (and no `program`): the identity agent"}}});
    if !routes.programs.is_empty() {
        v["properties"]["program"] = json!({"type": "string", "enum": routes.programs, "description": "an external program declared under `sandbox.programs`, run in the `linux` backend"});
        v["not"] = json!({"required": ["program", "workflow"]});
    }
    v
}

/// Every optional property of a request body's object schemas may be `null`, as absent is.
fn nullable_optionals(schema: &mut Value) {
    let required: Vec<String> = schema["required"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, p) in props.iter_mut() {
            nullable_optionals(p);
            if required.contains(name) {
                continue;
            }
            if let Some(t) = p.get("type").and_then(Value::as_str).map(str::to_owned) {
                p["type"] = json!([t, "null"]);
                if let Some(e) = p.get_mut("enum").and_then(Value::as_array_mut) {
                    e.push(Value::Null);
                }
            }
        }
    }
    if let Some(items) = schema.get_mut("items") {
        nullable_optionals(items);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(list) = schema.get_mut(key).and_then(Value::as_array_mut) {
            list.iter_mut().for_each(nullable_optionals);
        }
    }
}

/// The body of a scenario run: a variant, and how to run and score it.
fn run_body(variant: &Value, scorer: &Value, routes: &Routes) -> Value {
    let mut body = variant.clone();
    let isolation = if routes.programs.is_empty() {
        json!(["inproc-mock"])
    } else {
        json!(["inproc-mock", "linux"])
    };
    let props = &mut body["properties"];
    props["seed"] = json!({"type": "integer", "minimum": 0, "maximum": U64_MAX});
    props["trials"] = json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 1});
    props["scorer"] = scorer.clone();
    props["isolation"] = json!({"type": "string", "enum": isolation, "description": "the variant's own when absent: `inproc-mock` for the identity agent and workflows, `linux` for a program; another is refused (422 lab.isolation_unsupported)"});
    body
}

/// The body of a replay: none of its fields (the recorded trajectory), or a variant's agent
/// (and a label for it).
fn replay_body(routes: &Routes) -> Value {
    let mut body = variant_schema(routes);
    body["required"] = json!([]);
    body["properties"]["variant"]["description"] =
        json!("a label for the variant run (default `replay`)");
    body["properties"]["seed"] = json!({"type": "integer", "minimum": 0, "maximum": U64_MAX});
    body
}

/// The `{id}` path parameter of the sandbox routes.
fn id_param() -> Value {
    json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}])
}

/// The `limit` (1 to `max`) and `after` query parameters of a paged list.
fn page_params(max: u32) -> Value {
    json!([
        {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": max, "default": 50.min(max)}},
        {"name": "after", "in": "query", "required": false, "description": "the `next` of the previous page (empty: the first page)", "schema": {"type": "string", "pattern": LAB_CURSOR}}
    ])
}

/// A route's operation, as `sandbox_paths` builds it: id, summary, parameters, body, the
/// success answer and the other answers.
type OpOf<'a> =
    &'a dyn Fn(&str, &str, Value, Option<Value>, (&str, Value), Vec<(&str, Value)>) -> Value;

/// The tournaments' routes (`/v1/sandbox/tournaments*`, issue 15 item 6).
fn tournament_paths(
    paths: &mut serde_json::Map<String, Value>,
    op: OpOf<'_>,
    e: &dyn Fn(&str) -> Value,
    routes: &Routes,
) {
    let json_of = |d: &str| json!({"description": d, "content": {"application/json": {"schema": {"type": "object"}}}});
    let bad = |d: &str| e(d);
    let id_param = id_param();
    let page_params = page_params(corral_store::lab::MAX_PAGE);
    let judges: Vec<String> = routes
        .judges
        .iter()
        .map(|j| format!("command:{j}"))
        .collect();
    let mut judge = json!({"type": "string", "description": "`command:<name>` of a judge declared under `sandbox.judges` (none is: 422 lab.program_unknown)", "pattern": "^command:[A-Za-z][A-Za-z0-9_-]*$"});
    if !judges.is_empty() {
        judge = json!({"type": "string", "description": "`command:<name>` of a judge declared under `sandbox.judges`", "enum": judges});
    }
    paths.insert("/v1/sandbox/tournaments".to_owned(), json!({"post": op(
        "sandbox.tournament", "grades finished runs of one scenario and version (one per variant) by a command judge asked about every task and pair in both orders: a Bradley-Terry ranking with bootstrap intervals, the judge's position bias, and the verdict between the top two; stores the answer (operator)", json!([]),
        Some(json!({"type": "object", "required": ["runs", "judge"], "additionalProperties": false, "properties": {
            "runs": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": corral_lab::service::MAX_TOURNAMENT_RUNS, "uniqueItems": true, "description": "finished runs of the same scenario and version"},
            "judge": judge,
            "seed": {"type": "integer", "minimum": 0, "maximum": U64_MAX, "description": "the bootstrap's seed (default 0): the same seed gives the same intervals"},
            "bootstrap": {"type": "integer", "minimum": 1, "maximum": corral_lab::tournament::MAX_BOOTSTRAP, "default": corral_lab::tournament::DEFAULT_BOOTSTRAP, "description": "the bootstrap's resamples"}
        }})),
        ("201", json_of("`{id, recorded_by, created_ms, scenario_id, scenario_version, judge, purpose, ranking: [{rank, variant, run_id, strength, interval: {lower, upper}, wins, judgments}], position_bias: {first_share, first_preferred, decisive, order_disagreement, pairs_both_orders, pairs_disagreeing}, judge_calls, max_judge_calls, judgments, errors: [{task, first, second, code, message}], not_judged: [{task, a, b, code}], bootstrap, seed, isolated, attestations, top_two: {baseline, candidate, comparison}}`: `errors` are judge calls that did not answer (lab.judge_failed, lab.judge_answer), `not_judged` the pairs past the ceiling of judge calls (lab.judge_ceiling)")),
        vec![("400", bad("args.invalid")), ("409", bad("lab.tournament_run_incomplete")), ("422", bad("lab.tournament_mismatch, lab.program_unknown")), ("503", bad("isolation.unavailable (a judge on a host without the linux backend)"))],
    ), "get": op("sandbox.tournaments.list", "a page of the tenant's stored tournaments, newest first (viewer)", page_params, None,
        ("200", json_of("`{items: [tournament], next}`")), vec![("400", bad("args.invalid, args.unknown"))])}));
    paths.insert("/v1/sandbox/tournaments/{id}".to_owned(), json!({"get": op("sandbox.tournaments.get", "a stored tournament of the tenant (viewer)", id_param, None, ("200", json_of("the tournament, as `POST /v1/sandbox/tournaments` answered it")), vec![])}));
}

/// The shadow evaluations' routes (`/v1/sandbox/shadows*`, issue 15 items 3-5).
fn shadow_paths(
    paths: &mut serde_json::Map<String, Value>,
    op: OpOf<'_>,
    variant: &Value,
    scorer: &Value,
    e: &dyn Fn(&str) -> Value,
) {
    let json_of = |d: &str| json!({"description": d, "content": {"application/json": {"schema": {"type": "object"}}}});
    let id_param = id_param();
    let page_params = page_params(corral_store::lab::MAX_PAGE);
    let shadow = "the shadow evaluation `{id, tenant, principal, status, planned, ran, tasks, variants, runs, not_run, report, created_ms, updated_ms, finished_ms}`: `status` is `running`, `completed`, `stopped_by_ceiling`, `failed` or `interrupted` (the process running it stopped first); `runs` maps each task to `{scenario_id, runs: {variant: run_id | null}}` (the run ids a tournament grades); `not_run` lists the `{variant, task}` pairs a ceiling stopped; `report` has `runs` (per run: `{variant, task, run_id, scenario_id, status, steps_total, steps_ok, calls, timeline, degraded?, diverged, divergence, owner, withheld?}`, `divergence` being `{step, op, args_hash, recorded: {op, args_hash} | null}` or null; it is drawn from the recording, so only its principal (`owner`) or an admin sees it: anyone else gets null and `withheld: true`), `metering` (`{replay: {runs, calls, tokens, spend}, judge: {...}}`; `tokens` and `spend` are null: not known), `ceilings`, `stopped_by` and `error`";
    paths.insert("/v1/sandbox/shadows".to_owned(), json!({
        "post": op("sandbox.shadows.run", "starts a shadow evaluation: the recorded tasks' inputs re-run under every variant (N*M replay runs, purpose `replay`, real tools, unsafe ops absent), in the background (operator, and the caller must be allowed to read every task's recording: admin or its principal). Every variant is checked first; N*M over 10 needs `expected_runs`", json!([]),
            Some(json!({"type": "object", "required": ["tasks", "variants"], "additionalProperties": false, "properties": {
                "tasks": {"type": "array", "items": {"type": "string"}, "uniqueItems": true, "minItems": 1, "maxItems": corral_lab::shadow::MAX_SHADOW_TASKS, "description": "run ids of recordings that kept their task input"},
                "variants": {"type": "array", "items": variant, "minItems": 1, "maxItems": corral_lab::shadow::MAX_SHADOW_VARIANTS, "description": "each a `workflow` or a `program` (with a `tools:` list in the config)"},
                "seed": {"type": "integer", "minimum": 0, "maximum": U64_MAX}, "scorer": scorer,
                "expected_runs": {"type": "integer", "minimum": 0, "maximum": U64_MAX, "description": "N variants x M tasks, as announced to the caller: required over 10 runs, and exact when given (409 replay.confirm_needed otherwise)"},
                "principal": {"type": "string", "description": "whose recording of each task (its `identity`, or the principal's id), when several principals recorded under a run id: an admin's pick, as `?principal=` on reads (409 recording.ambiguous without it)"}
            }})),
            ("202", json_of(&format!("{shadow}; answered `running`: poll `GET /v1/sandbox/shadows/{{id}}`"))),
            vec![("400", e("args.invalid; nothing was run")),
                 ("422", e("lab.program_unknown, lab.scorer_unknown, replay.unsafe_op, replay.unknown_op, replay.tools_undeclared, replay.variant_invalid (a variant is ineligible: the message names it and its first unsafe or unknown tool), lab.expected_invalid, lab.workflow_invalid, lab.workflow_template; nothing was run")),
                 ("409", e("replay.confirm_needed (N*M over 10 without the exact `expected_runs`), replay.no_input (a recording kept no task input); nothing was run")),
                 ("503", e("isolation.unavailable (a program variant on a host without the linux backend)"))]),
        "get": op("sandbox.shadows.list", "a page of the tenant's shadow evaluations, newest first (viewer)", page_params, None,
            ("200", json_of("`{items: [shadow evaluation], next}`")), vec![("400", e("args.invalid, args.unknown"))]),
    }));
    paths.insert("/v1/sandbox/shadows/{id}".to_owned(), json!({"get": op("sandbox.shadows.get", "a shadow evaluation of the tenant: its progress while it runs, its report when it ends (viewer)", id_param, None, ("200", json_of(shadow)), vec![])}));
    paths.insert("/v1/sandbox/metering".to_owned(), json!({"get": op("sandbox.metering.get", "the tenant's runs and calls per purpose, as this server process counted them since it started (admin)", json!([]), None,
        ("200", json_of("`{tenant, purposes: [{purpose, runs, calls, tokens, spend}]}`, one entry each for `live`, `simulation`, `replay` and `judge` (judge: one run per tournament, its judge calls); `tokens` and `spend` are null: not known")), vec![])}));
}

/// The recordings' routes (`/v1/sandbox/recordings*`, issue 15): a recording holds call values,
/// so no tier role reads one: an admin reads every recording of the tenant, anyone else only
/// their own runs.
fn recording_paths(paths: &mut serde_json::Map<String, Value>, err: &Value, routes: &Routes) {
    let e = |d: &str| json!({"description": d, "content": {"application/json": {"schema": err}}});
    let recording = "`{tenant, run_id, identity, principal, purpose, created_ms, updated_ms, events, bytes, capped, gapped, expires_ms}`";
    let run_param = json!([
        {"name": "id", "in": "path", "required": true, "description": "the run id", "schema": {"type": "string"}},
        {"name": "principal", "in": "query", "required": false, "description": "whose recording of the run id (its `identity`, or the principal's id), when several principals recorded under it", "schema": {"type": "string"}}
    ]);
    let page_params = page_params(corral_store::lab::MAX_PAGE);
    let op = |id: &str, summary: &str, params: Value, ok: Value| {
        json!({"get": {
            "operationId": id,
            "summary": summary,
            "parameters": params,
            "responses": {
                "200": ok,
                "400": e("args.invalid, args.unknown"),
                "401": e("auth.missing, auth.invalid"),
                "403": e("recording.forbidden: a recording holds call values; only an admin or the run's own principal reads it"),
                "404": e("recording.not_found (no recording of this run in your tenant: never recorded, expired, or another tenant's), lab.disabled"),
                "409": e("recording.ambiguous: several principals recorded under the run id; name one with `?principal=`"),
            },
            "security": [{"bearer": []}]
        }})
    };
    let json_of = |d: String| json!({"description": d, "content": {"application/json": {"schema": {"type": "object"}}}});
    paths.insert("/v1/sandbox/recordings".to_owned(), op(
        "sandbox.recordings.list", "a page of the tenant's recordings, newest first: every one for an admin, the caller's own runs for anyone else", page_params,
        json_of(format!("`{{items: [recording], next}}`; a recording: {recording}")),
    ));
    let mut one = op(
        "sandbox.recordings.get",
        "a recording and its events by `seq` (admin, or the run's own principal)",
        run_param.clone(),
        json_of(format!(
            "`{{recording, events: [{{seq, op, args, response, error_code, attestation, started_ms, duration_us}}]}}`; recording: {recording}; `capped`: the cap stopped it, `gapped`: an event could not be written"
        )),
    );
    one["delete"] = json!({
        "operationId": "sandbox.recordings.delete",
        "summary": "deletes a recording and its events (admin): frees its principal's share (`recordings.max_per_principal`) and the tenant's before retention; audited",
        "parameters": run_param.clone(),
        "responses": {
            "200": json_of(format!("the deleted recording: {recording}")),
            "401": e("auth.missing, auth.invalid"),
            "403": e("rbac.denied: deleting a recording needs the `admin` role"),
            "404": e("recording.not_found, lab.disabled"),
            "409": e("recording.ambiguous: several principals recorded under the run id; name one with `?principal=`"),
        },
        "security": [{"bearer": []}]
    });
    paths.insert("/v1/sandbox/recordings/{id}".to_owned(), one);
    let write = |id: &str,
                 summary: &str,
                 mut body: Value,
                 ok: (&str, Value),
                 more: Vec<(&str, Value)>| {
        nullable_optionals(&mut body);
        let mut responses = serde_json::Map::new();
        responses.insert(ok.0.to_owned(), ok.1);
        for (k, v) in more {
            responses.insert(k.to_owned(), v);
        }
        responses.insert("401".to_owned(), e("auth.missing, auth.invalid"));
        responses.insert(
            "403".to_owned(),
            e("recording.forbidden (not the run's principal nor an admin), rbac.denied"),
        );
        responses.insert("404".to_owned(), e("recording.not_found, lab.disabled"));
        json!({
            "operationId": id,
            "summary": summary,
            "parameters": run_param.clone(),
            "requestBody": {"required": true, "content": {"application/json": {"schema": body}}},
            "responses": responses,
            "security": [{"bearer": []}]
        })
    };
    let steps = json!({"type": "array", "minItems": 1, "items": {"type": "object", "required": ["input"], "additionalProperties": false, "properties": {"input": {"type": "string"}, "expected": {}}}});
    paths.insert("/v1/sandbox/recordings/{id}/input".to_owned(), json!({"put": write(
        "sandbox.recordings.input", "keeps a live session's task input in its recording, once (the run's own principal; an admin for a recording that exists): what a variant replay re-runs",
        json!({"type": "object", "required": ["steps"], "additionalProperties": false, "properties": {"steps": steps}}),
        ("200", json_of(format!("the recording {recording}, with `input`"))),
        vec![("400", e("args.invalid, args.malformed")), ("409", e("recording.input_set, recording.principal_mismatch")), ("413", e("recording.input_too_large, limit.body_too_large")), ("422", e("lab.scenario_invalid, lab.scenario_no_steps"))],
    )}));
    paths.insert("/v1/sandbox/recordings/{id}/replay".to_owned(), json!({"post": write(
        "sandbox.replay", "replays a recording deterministically: its responses answer every call (operator, and the run's own principal or an admin). No variant: its trajectory, every output compared byte for byte; a variant: the recorded task input, each call the recording lacks a typed divergence",
        replay_body(routes),
        ("201", json_of("`{recording, status: replayed, steps, run, divergences: [{step, op, args_hash, expected: {seq, op, args_hash} | null}], identical, differing_steps}`".to_owned())),
        vec![("200", json_of("`{recording, status: degraded, reason, steps: 0, run: null, ...}`: the recording's timeline cannot be put in order (gapped, capped, an event missing)".to_owned())), ("400", e("args.invalid, args.malformed")), ("409", e("replay.no_input")), ("422", e("lab.program_unknown, lab.workflow_invalid, lab.workflow_template, lab.scenario_no_steps"))],
    )}));
    paths.insert("/v1/sandbox/recordings/{id}/export".to_owned(), op(
        "sandbox.recordings.export", "a recording as JSON lines: a `{kind: recording, ...}` line, then a `{kind: event, ...}` line per event by `seq` (admin, or the run's own principal)", run_param,
        json!({"description": "JSON lines", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}),
    ));
}

/// The agents host's routes (`/v1/agents*`, issue 17), in the wire format of the `openai` SDK's
/// `client.beta.agents`; each is also served under `/agents/{adapter}` (the path names the
/// adapter). A session create and each input event are op calls through the guard chain.
fn agent_paths(paths: &mut serde_json::Map<String, Value>, err: &Value, routes: &Routes) {
    let e = |d: &str| json!({"description": d, "content": {"application/json": {"schema": err}}});
    let obj = |d: &str| json!({"description": d, "content": {"application/json": {"schema": {"type": "object"}}}});
    let id = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
    let page = page_params(crate::routes::agents::MAX_PAGE);
    let op = |op_id: &str,
              summary: &str,
              params: &Value,
              body: Option<Value>,
              ok: (&str, Value),
              errs: Vec<(&str, Value)>| {
        let mut responses = serde_json::Map::new();
        responses.insert(ok.0.to_owned(), ok.1);
        responses.insert("401".to_owned(), e("auth.missing, auth.invalid"));
        for (status, v) in errs {
            responses.insert(status.to_owned(), v);
        }
        let mut o = json!({"operationId": op_id, "summary": summary, "parameters": params, "responses": responses, "security": [{"bearer": []}]});
        if let Some(b) = body {
            o["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": b}}});
        }
        o
    };
    let session = "`AgentSession` `{id, object: agent.session, agent: {id, model}, created_at, last_active_at, environment: {type: self_hosted, workspace_directory}, status: idle | in_progress | failed, error, metadata, required_actions, usage, vault_ids, corral: {adapter, turns, events, error_code, attestation}}`";
    let not_found =
        || e("agents.not_found: no such id of yours (another principal's is not found either)");
    paths.insert("/v1/agents".to_owned(), json!({
        "post": op("agents.create", "saves an agent (`model`, `name`, `instructions`, `metadata`) for its owner; `lab_coach` is a reserved name", &json!([]),
            Some(json!({"type": "object", "required": ["model"], "properties": {"model": label_schema("a real model name, or an adapter's name"), "name": {"type": ["string", "null"], "not": {"type": "string", "pattern": "^ *lab_coach *$"}}, "instructions": {"type": ["string", "null"]}, "metadata": {"type": ["object", "null"], "additionalProperties": {"type": "string"}, "maxProperties": 16}}})),
            ("200", obj("the agent `{id, object: agent, model, name, instructions, metadata, created_at, tools}`")), vec![("400", e("agents.invalid, args.malformed")), ("429", e("agents.quota: the owner keeps 64 saved agents at most"))]),
        "get": op("agents.list", "the caller's saved agents", &page, None, ("200", obj("`{object: list, data, first_id, last_id, has_more, next}`")), vec![("400", e("agents.invalid"))]),
    }));
    paths.insert("/v1/agents/{id}".to_owned(), json!({
        "get": op("agents.get", "one of the caller's saved agents", &id, None, ("200", obj("the agent")), vec![("404", not_found())]),
        "delete": op("agents.delete", "deletes one of the caller's saved agents", &id, None, ("200", obj("`{id, object: agent.deleted, deleted: true}`")), vec![("404", not_found())]),
    }));
    // Without an adapter mounted no session can start: the sessions' routes are not served.
    if routes.adapters.is_empty() {
        return;
    }
    paths.insert("/v1/agents/sessions".to_owned(), json!({
        "post": op("agents.sessions.create", "starts a session: the op `agents.<a>.sessions.create` (and the generic gate `agents.sessions.create`), the adapter chosen by path, `X-Corral-Adapter`, a model naming an adapter, `agents.default`, or the only mounted one; `input` starts the first turn",
            &json!([{"name": "X-Corral-Adapter", "in": "header", "required": false, "schema": {"type": "string", "enum": routes.adapters}}]),
            Some(json!({"type": "object", "properties": {
                "agent": {"type": "object", "properties": {"model": {"type": "string"}}}, "agent_id": {"type": "string"},
                "environment": {"type": "object", "properties": {"type": {"type": "string", "enum": ["self_hosted"]}, "workspace_directory": {"type": "string"}}},
                "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
                "metadata": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 16}}})),
            ("200", obj(session)),
            vec![("202", e("confirmation.required (the confirm tier: a person approves this exact call), agents.installing (with Retry-After)")),
                 ("400", e("agents.adapter_required, agents.environment_unsupported, agents.invalid")),
                 ("403", e("agents.session_gate, agents.model_not_allowed, agents.workdir_outside, policy.denied")),
                 ("429", e("agents.quota: the owner keeps 256 sessions at most; limit.concurrency")),
                 ("503", e("agents.not_installed, agents.install_off"))]),
        "get": op("agents.sessions.list", "the caller's sessions, newest first", &page, None, ("200", obj("`{object: list, data: [AgentSession], ...}`")), vec![("400", e("agents.invalid"))]),
    }));
    paths.insert("/v1/agents/sessions/{id}".to_owned(), json!({
        "get": op("agents.sessions.get", "one of the caller's sessions", &id, None, ("200", obj(session)), vec![("404", not_found())]),
        "delete": op("agents.sessions.delete", "deletes one of the caller's sessions, its events and the agent's home (refused while a turn runs)", &id, None, ("200", obj("`{id, object: agent.session.deleted, deleted: true}`")), vec![("404", not_found()), ("409", e("agents.session_busy: a turn is running; cancel it first"))]),
    }));
    paths.insert("/v1/agents/sessions/{id}/events".to_owned(), json!({
        "post": op("agents.sessions.events.create", "input events: `agent.session.input.message` starts a turn (the op `agents.<a>.sessions.send_event`), `agent.session.input.cancel` ends the running one", &id,
            Some(json!({"type": "object", "required": ["events"], "properties": {"events": {"type": "array", "minItems": 1, "maxItems": 16, "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string", "enum": ["agent.session.input.message", "agent.session.input.cancel"]}, "input": {}}}}}})),
            ("202", json!({"description": "accepted; the turn's events follow on the event stream"})),
            vec![("400", e("agents.invalid")), ("404", not_found()), ("409", e("agents.session_busy: a turn is running")), ("429", e("agents.max_turns"))]),
        "get": op("agents.sessions.events.list", "with `Accept: text/event-stream`: the session's events as SSE (`id:` is the event's number; resume with `Last-Event-ID` or `?after=`), following new ones; else the events so far as `{object: list, data}`",
            &json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}, {"name": "after", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0}}, {"name": "Last-Event-ID", "in": "header", "required": false, "schema": {"type": "string"}}]),
            None,
            ("200", json!({"description": "`AgentSessionEvent`s: agent.session.created, agent.session.turn.created, agent.session.turn.in_progress, agent.session.turn.item.added / .item.done (command_execution, file_change, network_connection, refused_changes, held_writes, message), agent.session.turn.completed / .failed, agent.session.idle, error",
                "content": {"text/event-stream": {"schema": {"type": "string"}}, "application/json": {"schema": {"type": "object"}}}})),
            vec![("400", e("agents.invalid")), ("404", not_found())]),
    }));
}

/// The routes outside the ops, the lab and the agents host: the listings, `/me`, `/healthz`,
/// `/llms.txt`, `/metrics`, this document, `/mcp`, the LLM proxy and (in learning mode)
/// `POST /learning/hint`.
fn platform_paths(paths: &mut serde_json::Map<String, Value>, err: &Value, routes: &Routes) {
    let e = |d: &str| json!({"description": d, "content": {"application/json": {"schema": err}}});
    let obj = |d: &str| json!({"description": d, "content": {"application/json": {"schema": {"type": "object"}}}});
    let text = |d: &str, ct: &str| json!({"description": d, "content": {ct: {"schema": {"type": "string"}}}});
    let authed = |id: &str, summary: &str, ok: Value| json!({"operationId": id, "summary": summary, "parameters": [], "responses": {"200": ok}, "security": [{"bearer": []}]});
    let open = |id: &str, summary: &str, ok: Value| json!({"operationId": id, "summary": summary, "parameters": [], "responses": {"200": ok}, "security": []});
    paths.insert("/healthz".into(), json!({"get": open("healthz", "the server is up: `{status: ok, version, mode, backend, storage, confirmations}` (no token needed)", obj("`{status: ok, ...}`"))}));
    paths.insert("/llms.txt".into(), json!({"get": open("llms_txt", "the reference card (docs/REFERENCE.md), for people and agents (no token needed)", text("the card", "text/plain"))}));
    paths.insert("/ops".into(), json!({"get": authed("ops.list", "the ops the caller may call, with their parameters, effects and tier", obj("`{ops: [...]}`"))}));
    paths.insert("/capabilities".into(), json!({"get": authed("capabilities", "the caller's ops with the limits that apply to each", obj("`{principal, ops: [...]}`"))}));
    paths.insert("/me".into(), json!({"get": authed("me", "who the token is: id, roles, kind, tenant, run", obj("the principal"))}));
    paths.insert("/metrics".into(), json!({"get": authed("metrics", "OpenMetrics text for Prometheus (a token of the role `admin`, or the scrape token the config names)", text("the metrics", "application/openmetrics-text"))}));
    paths.insert("/openapi.json".into(), json!({"get": authed("openapi", "this document, for the caller's ops", obj("the OpenAPI document"))}));
    paths.insert("/mcp".into(), json!({"post": mcp_post(err)}));
    let llm = |id: &str, summary: &str, body: bool| {
        let mut o = json!({"operationId": id, "summary": summary, "parameters": [],
               "responses": {"200": obj("the provider's answer (or its SSE stream), as the provider's API shapes it"),
                             "400": e("llm.invalid"), "403": e("policy.*: `llm.chat` is not allowed"),
                             "429": e("budget.*, limit.*"), "502": e("llm.upstream_failed"), "503": e("llm.not_configured")},
               "security": [{"bearer": []}]});
        if body {
            o["requestBody"] = json!({"content": {"application/json": {"schema": {"type": "object", "required": ["model"], "properties": {"model": {"type": "string", "minLength": 1}}}}}});
        }
        o
    };
    // Without a provider these answer `503 llm.not_configured`, and are not listed.
    if routes.llm {
        paths.insert("/v1/chat/completions".into(), json!({"post": llm("llm.chat_completions", "the LLM proxy, OpenAI Chat Completions (the op `llm.chat`)", true)}));
        paths.insert("/v1/responses".into(), json!({"post": llm("llm.responses", "the LLM proxy, OpenAI Responses (the op `llm.chat`)", true)}));
        paths.insert("/v1/messages".into(), json!({"post": llm("llm.messages", "the LLM proxy, Anthropic Messages (the op `llm.chat`; `x-api-key` is read as the token too)", true)}));
        paths.insert(
            "/v1/models".into(),
            json!({"get": llm("llm.models", "the models the LLM proxy serves", false)}),
        );
    }
    if routes.learning {
        paths.insert("/learning/hint".into(), json!({"post": {"operationId": "learning.hint", "summary": "take a hint: the learner's level goes up one (a verified person only; every hint is recorded)", "parameters": [],
            "responses": {"200": obj("`{level, hints}`"), "403": e("learning.not_a_person"), "409": e("learning.no_more_hints"), "429": e("learning.too_soon")},
            "security": [{"bearer": []}]}}));
    }
    // The agents host's routes, also under `/agents/{adapter}` (the path names the adapter),
    // when one is mounted.
    if routes.adapters.is_empty() {
        return;
    }
    let adapter = json!({"name": "adapter", "in": "path", "required": true, "schema": {"type": "string", "enum": routes.adapters}});
    let nested: Vec<(String, Value)> = paths
        .iter()
        .filter(|(p, _)| p.starts_with("/v1/agents"))
        .map(|(p, item)| {
            let mut item = item.clone();
            if let Some(methods) = item.as_object_mut() {
                for op in methods.values_mut() {
                    if let Some(id) = op["operationId"].as_str() {
                        op["operationId"] = json!(format!("{id}.by_adapter"));
                    }
                    if let Some(params) = op["parameters"].as_array_mut() {
                        params.retain(|p| p["name"] != "X-Corral-Adapter");
                        params.insert(0, adapter.clone());
                    }
                }
            }
            (format!("/agents/{{adapter}}{p}"), item)
        })
        .collect();
    paths.extend(nested);
}

/// `POST /mcp`: MCP's streamable HTTP, stateless (`GET` and `DELETE` answer 405: there is no
/// session to stream or end). A 401 is a JSON-RPC error whose `data` is corral's error.
fn mcp_post(err: &Value) -> Value {
    let e = |d: &str| json!({"description": d, "content": {"application/json": {"schema": err}}});
    let id = json!({"oneOf": [{"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX}, {"type": "string"}]});
    let params = json!({"type": ["object", "null"]});
    let request = json!({"type": "object", "required": ["jsonrpc", "id", "method"],
        "properties": {"jsonrpc": {"const": "2.0"}, "id": id, "method": {"type": "string"}, "params": params}});
    let notification = json!({"type": "object", "required": ["jsonrpc", "method"], "not": {"required": ["id"]},
        "properties": {"jsonrpc": {"const": "2.0"}, "method": {"type": "string"}, "params": params}});
    let rpc_error = json!({"type": "object", "required": ["jsonrpc", "error"], "properties": {
        "jsonrpc": {"const": "2.0"}, "id": {},
        "error": {"type": "object", "required": ["code", "message"], "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": err}}}});
    json!({"operationId": "mcp.post",
        "summary": "MCP streamable HTTP (stateless): one JSON-RPC request (`initialize`, `tools/list`, `tools/call`, ...; an unknown method is a JSON-RPC error `-32601`) or notification",
        "parameters": [],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"oneOf": [request, notification]}}}},
        "responses": {
            "200": {"description": "the JSON-RPC answer (`result` or `error`)", "content": {"application/json": {"schema": {"type": "object", "required": ["jsonrpc"]}}}},
            "202": {"description": "a notification, accepted"},
            "400": e("args.malformed: not JSON, or not a JSON-RPC request or notification"),
            "401": {"description": "auth.missing, auth.invalid: a JSON-RPC error (`-32001`) whose `data` is corral's error", "content": {"application/json": {"schema": rpc_error}}},
            "403": e("mcp.host_not_allowed: the Host header is not in `mcp.allowed_hosts`"),
            "413": e("limit.body_too_large"),
            "406": e("mcp.not_acceptable: the `Accept` header admits no JSON"),
            "415": e("args.unsupported_media_type: send `Content-Type: application/json`")},
        "security": [{"bearer": []}]})
}

/// What every operation states: a 401 where a token is needed, a required body, and (the lab's)
/// a 422.
fn finish(paths: &mut serde_json::Map<String, Value>, err: &Value) {
    for (path, item) in paths.iter_mut() {
        let Some(methods) = item.as_object_mut() else {
            continue;
        };
        for op in methods.values_mut() {
            // The lab's bodies carry what no schema can check (a workflow's YAML, mocks that
            // must not repeat): refused with 422 when they match the schema and still fail.
            if path.starts_with("/v1/sandbox")
                && op.get("requestBody").is_some()
                && op["responses"].get("422").is_none()
            {
                op["responses"]["422"] = json!({"description": "the body matches the schema, but its content is refused (lab.*: the message says what and where)",
                                                "content": {"application/json": {"schema": err}}});
            }
            let needs_token = op["security"].as_array().is_none_or(|s| !s.is_empty());
            if needs_token && op["responses"].get("401").is_none() {
                op["responses"]["401"] = json!({"description": "auth.missing, auth.invalid: no token, or one the server does not accept",
                                                "content": {"application/json": {"schema": err}}});
            }
            if let Some(body) = op.get_mut("requestBody") {
                body["required"] = json!(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the deployment declares shapes the document: the sessions' routes with the mounted
    /// adapters only, and the lab's names as enums.
    #[test]
    fn the_document_follows_what_the_deployment_declares() {
        let routes = Routes {
            adapters: vec!["codex".to_owned()],
            programs: vec!["agent-v2".to_owned()],
            scorers: vec!["rubric".to_owned()],
            judges: vec!["pairwise".to_owned()],
            ..Routes::default()
        };
        let doc = document(&[], &routes);
        let paths = &doc["paths"];
        for p in [
            "/v1/agents/sessions",
            "/agents/{adapter}/v1/agents/sessions",
        ] {
            assert!(paths[p]["post"]["operationId"].is_string(), "{p}");
        }
        let adapter = &paths["/agents/{adapter}/v1/agents/sessions"]["post"]["parameters"][0];
        assert_eq!(adapter["schema"]["enum"], json!(["codex"]));
        let run = &paths["/v1/sandbox/scenarios/{id}/runs"]["post"]["requestBody"]["content"]["application/json"]
            ["schema"];
        assert_eq!(
            run["properties"]["program"]["enum"],
            json!(["agent-v2", null])
        );
        assert_eq!(
            run["properties"]["scorer"]["enum"],
            json!(["exact", "regex", "json_path", "command:rubric", null])
        );
        assert_eq!(
            run["properties"]["seed"]["type"],
            json!(["integer", "null"])
        );
        let t = &paths["/v1/sandbox/tournaments"]["post"]["requestBody"]["content"]["application/json"]
            ["schema"];
        assert_eq!(
            t["properties"]["judge"]["enum"],
            json!(["command:pairwise"])
        );
        // Nothing declared: no sessions' routes, no `program`, and a judge by pattern.
        let bare = document(&[], &Routes::default());
        assert!(bare["paths"].get("/v1/agents/sessions").is_none());
        let run = &bare["paths"]["/v1/sandbox/scenarios/{id}/runs"]["post"]["requestBody"]["content"]
            ["application/json"]["schema"];
        assert!(run["properties"].get("program").is_none());
        assert_eq!(
            run["properties"]["isolation"]["enum"],
            json!(["inproc-mock", null])
        );
    }
}
