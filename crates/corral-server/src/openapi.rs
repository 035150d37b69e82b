//! The OpenAPI 3.1 document, generated from the ops a caller may call: one `POST /ops/{id}`
//! path per op, its parameters as a JSON schema (and the guardrail headers), the shared error
//! schema, the `202 confirmation.required` answer of guarded ops, and the `/confirmations`
//! routes.

use corral_policy::{OpSpec, Tier};
use serde_json::{Value, json};

/// The document.
pub fn document(ops: &[&OpSpec]) -> Value {
    let mut paths = serde_json::Map::new();
    for op in ops {
        let schema = corral_mcp::schema::input_schema(op);
        let err = json!({"$ref": "#/components/schemas/Error"});
        let mut responses = json!({
            "200": {"description": "the op's result", "content": {"application/json": {"schema": {"type": "object"}}}},
            "400": {"description": "args.*, run.invalid_header", "content": {"application/json": {"schema": err}}},
            "401": {"description": "auth.*", "content": {"application/json": {"schema": err}}},
            "403": {"description": "autonomy.blocked, rbac.denied, policy.*, confirmation.denied", "content": {"application/json": {"schema": err}}},
            "404": {"description": "op.not_enabled", "content": {"application/json": {"schema": err}}},
            "413": {"description": "limit.*", "content": {"application/json": {"schema": err}}},
            "429": {"description": "limit.*, budget.exhausted", "content": {"application/json": {"schema": err}}}
        });
        if op.tier() != Tier::Read {
            responses["202"] = json!({
                "description": "confirmation.required: a person approves the action, then the same call is retried",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConfirmationRequired"}}}
            });
            responses["409"] = json!({"description": "confirmation.in_progress, confirmation.not_replayable", "content": {"application/json": {"schema": err}}});
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
                    {"name": "X-Corral-Run", "in": "header", "required": false, "schema": {"type": "string"}, "description": "the run the call belongs to (budgets; the run's own level and dry-run)"},
                    {"name": "X-Corral-Autonomy", "in": "header", "required": false, "schema": {"type": "string", "enum": ["L0", "L1", "L2", "L3", "L4"]}, "description": "lower the autonomy level (of the run, for good)"},
                    {"name": "X-Corral-Dry-Run", "in": "header", "required": false, "schema": {"type": "boolean"}, "description": "describe guarded calls instead of running them (for the run, for good)"}
                ],
                "responses": responses,
                "security": [{"bearer": []}]
            }}),
        );
    }
    let err = json!({"$ref": "#/components/schemas/Error"});
    paths.insert(
        "/audit".to_owned(),
        json!({"get": {
            "operationId": "audit.list",
            "summary": "the most recent audit events of the caller's tenant, newest first (role admin)",
            "parameters": [{"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}}],
            "responses": {
                "200": {"description": "`{tenant, events: [...]}`", "content": {"application/json": {"schema": {"type": "object"}}}},
                "403": {"description": "`audit.not_permitted`: the caller is not an admin", "content": {"application/json": {"schema": err}}}
            },
            "security": [{"bearer": []}]
        }}),
    );
    paths.insert(
        "/confirmations".to_owned(),
        json!({"get": {
            "operationId": "confirmations.list",
            "summary": "a page of the caller's live actions (an admin: the tenant's), newest first, with their canonical arguments (each at most 64 KiB); a page is at most `limit` actions and about 4 MiB",
            "parameters": [
                {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}},
                {"name": "after", "in": "query", "required": false, "description": "the `next` of the previous page", "schema": {"type": "string"}}
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
                "properties": {"decision": {"type": "string", "enum": ["approve", "deny"]}, "decided_at_ms": {"type": "integer"}}
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
    json!({
        "openapi": "3.1.0",
        "info": {"title": "corral", "version": env!("CARGO_PKG_VERSION")},
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
