//! A scripted model provider for the LLM proxy's tests: a real axum server on 127.0.0.1 that
//! answers OpenAI-shaped completions by the requested `model`, streaming and not, and errors;
//! it records what it was sent (the `Authorization` header and the body).
//!
//! Models: `ok` (text "The answer is 5100." with usage 11 + 7), `tools` (text and a tool call
//! whose name and arguments arrive in pieces), `bad` (400 with an OpenAI error naming the key),
//! `boom` (500). `POST /v1/responses` answers the same models in the Responses shape (`tools`:
//! a reasoning item whose summary names the answer, the text, and a `function_call`), and
//! `shell` scripts a codex turn: a `function_call` to its shell tool (`exec_command`) writing
//! `corral-was-here.txt`, then, once the input holds that call's output, a closing message.
//! `POST /v1/messages` answers in Anthropic's shape (key in `x-api-key`): `ok` the text (usage
//! 9 input + 2 cache-read + 7 output), `tools` a thinking block naming the answer, the text and
//! a `tool_use`; `shell` a Claude Code turn (its `Bash` tool writing `corral-was-here.txt`,
//! then a closing text); `bad` and `boom` as above.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// The key the scripted provider expects, and the variable tests put it in.
pub const UPSTREAM_KEY: &str = "sk-scripted-upstream-key-0123456789";
pub const UPSTREAM_KEY_ENV: &str = "CORRAL_IT_LLM_KEY";
pub const UPSTREAM_URL_ENV: &str = "CORRAL_IT_LLM_URL";

/// The text of the `ok` and `tools` models' reply.
pub const ANSWER: &str = "The answer is 5100.";
/// Model `tail`'s answer (Responses, Anthropic): the end of [`ANSWER`]'s value, which states it
/// only after an earlier reply that ended in its start.
pub const TAIL: &str = "00.";

/// One request the provider got.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    /// Anthropic's key header, and its version header.
    pub x_api_key: Option<String>,
    pub anthropic_version: Option<String>,
    pub body: Value,
}

#[derive(Clone, Default)]
struct Script {
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A running scripted provider.
pub struct ScriptedLlm {
    /// Its base url (`http://127.0.0.1:PORT/v1`).
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedLlm {
    pub async fn start() -> Self {
        let script = Script::default();
        let seen = Arc::clone(&script.seen);
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .route("/v1/responses", post(responses))
            .route("/v1/messages", post(messages))
            .with_state(script);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url: format!("http://{addr}/v1"),
            seen,
            task,
        }
    }

    /// Every request it got, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The environment naming it (url and key), plus `extra`.
    pub fn env<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut e = vec![
            (UPSTREAM_URL_ENV, self.url.as_str()),
            (UPSTREAM_KEY_ENV, UPSTREAM_KEY),
        ];
        e.extend_from_slice(extra);
        e
    }
}

/// The `llm:` section naming the scripted provider as an Anthropic one.
pub const ANTHROPIC_YAML: &str =
    "llm: {base_url_env: CORRAL_IT_LLM_URL, api_key_env: CORRAL_IT_LLM_KEY, api: anthropic}\n";

/// The `llm:` section naming the scripted provider's variables.
pub const LLM_YAML: &str =
    "llm: {base_url_env: CORRAL_IT_LLM_URL, api_key_env: CORRAL_IT_LLM_KEY}\n";

fn record(s: &Script, path: &str, headers: &HeaderMap, body: Value) {
    let header = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    s.seen.lock().unwrap().push(Seen {
        path: path.to_owned(),
        authorization: header("authorization"),
        x_api_key: header("x-api-key"),
        anthropic_version: header("anthropic-version"),
        body,
    });
}

async fn models(State(s): State<Script>, headers: HeaderMap) -> Response {
    record(&s, "/v1/models", &headers, Value::Null);
    axum::Json(json!({
        "object": "list",
        "data": [
            {"id": "ok", "object": "model", "created": 0, "owned_by": "scripted"},
            {"id": "tools", "object": "model", "created": 0, "owned_by": "scripted"},
        ],
    }))
    .into_response()
}

const USAGE: (u64, u64) = (11, 7);

fn usage() -> Value {
    json!({"prompt_tokens": USAGE.0, "completion_tokens": USAGE.1, "total_tokens": USAGE.0 + USAGE.1})
}

fn chunk(model: &str, delta: Value, finish: Value) -> Value {
    json!({
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1700000000,
        "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

/// The OpenAI APIs' scripted failures: model `bad` (a 400 that quotes the key it was sent,
/// which corral must not pass on) and `boom` (a 500).
fn openai_failure(model: &str) -> Option<Response> {
    let (status, error) = match model {
        "bad" => (
            StatusCode::BAD_REQUEST,
            json!({"message": format!("The model `bad` does not exist (you sent key {UPSTREAM_KEY})"),
                "type": "invalid_request_error", "code": "model_not_found"}),
        ),
        "boom" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"message": "upstream fell over", "type": "server_error"}),
        ),
        _ => return None,
    };
    Some((status, axum::Json(json!({ "error": error }))).into_response())
}

async fn chat(State(s): State<Script>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&s, "/v1/chat/completions", &headers, body.clone());
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {UPSTREAM_KEY}"))
    {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": "bad key", "type": "auth"}})),
        )
            .into_response();
    }
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    if let Some(failed) = openai_failure(&model) {
        return failed;
    }
    let tools = model == "tools";
    if body["stream"] != Value::Bool(true) {
        let mut message = json!({"role": "assistant", "content": ANSWER});
        if model == "extras" {
            // Text beside the content: the model's reasoning and audio transcript.
            message["reasoning_content"] = json!("I read the lag: 5100.");
            message["audio"] = json!({"id": "a1", "transcript": "The lag is 5100."});
        }
        if model == "refusal" {
            message =
                json!({"role": "assistant", "content": null, "refusal": "I will not say 5100."});
        }
        if tools {
            message["tool_calls"] = json!([{
                "id": "call_1", "type": "function",
                "function": {"name": "files_read", "arguments": "{\"path\":\"notes.txt\"}"},
            }]);
        }
        return axum::Json(json!({
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": if tools { "tool_calls" } else { "stop" }}],
            "usage": usage(),
        }))
        .into_response();
    }
    let mut events = vec![
        chunk(
            &model,
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        ),
        chunk(&model, json!({"content": "The answer "}), Value::Null),
        chunk(&model, json!({"content": "is 51"}), Value::Null),
        chunk(&model, json!({"content": "00."}), Value::Null),
    ];
    if tools {
        events.push(chunk(
            &model,
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "files_", "arguments": ""}}]}),
            Value::Null,
        ));
        events.push(chunk(
            &model,
            json!({"tool_calls": [{"index": 0, "function": {"name": "read", "arguments": "{\"path\":"}}]}),
            Value::Null,
        ));
        events.push(chunk(
            &model,
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"notes.txt\"}"}}]}),
            Value::Null,
        ));
    }
    events.push(chunk(
        &model,
        json!({}),
        json!(if tools { "tool_calls" } else { "stop" }),
    ));
    if body["stream_options"]["include_usage"] == Value::Bool(true) {
        events.push(json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1700000000,
            "model": model, "choices": [], "usage": usage(),
        }));
    }
    let mut text = String::new();
    for e in events {
        text.push_str(&format!("data: {e}\r\n\r\n"));
    }
    text.push_str("data: [DONE]\r\n\r\n");
    ([("content-type", "text/event-stream")], text).into_response()
}

/// The `data:` payloads of an SSE body (`[DONE]` included).
pub fn sse_data(text: &str) -> Vec<String> {
    text.replace('\r', "")
        .split("\n\n")
        .filter_map(|e| {
            let d: Vec<&str> = e.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            (!d.is_empty()).then(|| d.join("\n"))
        })
        .collect()
}

/// The text of the `shell` model's closing message.
pub const SHELL_DONE: &str = "Wrote corral-was-here.txt.";

/// The command the `shell` model asks a coding agent to run.
pub const SHELL_COMMAND: &str = "echo corral > corral-was-here.txt";

/// The whole Responses answer to `body` (by its `model`).
fn response_object(body: &Value) -> Value {
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let message = |id: &str, text: &str| {
        json!({"id": id, "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]})
    };
    let mut output = Vec::new();
    if model == "shell" {
        let answered = body["input"]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["type"] == "function_call_output"));
        if answered {
            output.push(message("msg_2", SHELL_DONE));
        } else {
            output.push(
                json!({"id": "fc_1", "type": "function_call", "status": "completed",
                "call_id": "call_shell_1", "name": "exec_command",
                "arguments": json!({"cmd": SHELL_COMMAND}).to_string()}),
            );
        }
    } else {
        if model == "tools" {
            output.push(
                json!({"id": "rs_1", "type": "reasoning", "encrypted_content": "opaque",
                "summary": [{"type": "summary_text", "text": "The lag is 5100."}]}),
            );
        }
        output.push(message(
            "msg_1",
            if model == "tail" { TAIL } else { ANSWER },
        ));
        if model == "tools" {
            output.push(json!({"id": "fc_1", "type": "function_call", "status": "completed",
                "call_id": "call_1", "name": "files_read", "arguments": "{\"path\":\"notes.txt\"}"}));
        }
    }
    json!({
        "id": "resp_scripted", "object": "response", "created_at": 1700000000,
        "status": "completed", "model": model, "output": output,
        "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": USAGE.0, "output_tokens": USAGE.1,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": USAGE.0 + USAGE.1},
    })
}

/// A Responses stream of `response`, as the provider sends it: lifecycle events, each item
/// added, its text in two deltas (the answer split inside `5100`), done, then completed.
fn response_events(response: &Value) -> Vec<Value> {
    let mut start = response.clone();
    start["status"] = json!("in_progress");
    start["output"] = json!([]);
    start["usage"] = Value::Null;
    let mut events = vec![
        json!({"type": "response.created", "response": start.clone()}),
        json!({"type": "response.in_progress", "response": start}),
    ];
    for (i, item) in response["output"].as_array().unwrap().iter().enumerate() {
        let mut added = item.clone();
        if item["type"] == "message" {
            added["content"] = json!([]);
        }
        if item["type"] == "function_call" {
            added["arguments"] = json!("");
        }
        events
            .push(json!({"type": "response.output_item.added", "output_index": i, "item": added}));
        if item["type"] == "message" {
            let text = item["content"][0]["text"].as_str().unwrap();
            let at = |mut v: Value| {
                v["item_id"] = item["id"].clone();
                v["output_index"] = json!(i);
                v["content_index"] = json!(0);
                v
            };
            events.push(at(json!({"type": "response.content_part.added",
                "part": {"type": "output_text", "text": "", "annotations": []}})));
            let cut = text.find("00").map_or(text.len(), |c| c);
            for d in [&text[..cut], &text[cut..]] {
                events.push(at(
                    json!({"type": "response.output_text.delta", "delta": d, "logprobs": []}),
                ));
            }
            events.push(at(
                json!({"type": "response.output_text.done", "text": text, "logprobs": []}),
            ));
            events.push(at(
                json!({"type": "response.content_part.done", "part": item["content"][0]}),
            ));
        }
        if item["type"] == "function_call" {
            events.push(json!({"type": "response.function_call_arguments.delta",
                "item_id": item["id"], "output_index": i, "delta": item["arguments"]}));
            events.push(json!({"type": "response.function_call_arguments.done",
                "item_id": item["id"], "output_index": i, "arguments": item["arguments"]}));
        }
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(json!({"type": "response.completed", "response": response}));
    for (n, e) in events.iter_mut().enumerate() {
        e["sequence_number"] = json!(n);
    }
    events
}

async fn responses(
    State(s): State<Script>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&s, "/v1/responses", &headers, body.clone());
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {UPSTREAM_KEY}"))
    {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": "bad key", "type": "auth"}})),
        )
            .into_response();
    }
    if let Some(failed) = openai_failure(body["model"].as_str().unwrap_or_default()) {
        return failed;
    }
    let response = response_object(&body);
    if body["stream"] != Value::Bool(true) {
        return axum::Json(response).into_response();
    }
    let mut text = String::new();
    for e in response_events(&response) {
        text.push_str(&format!(
            "event: {}\r\ndata: {e}\r\n\r\n",
            e["type"].as_str().unwrap()
        ));
    }
    ([("content-type", "text/event-stream")], text).into_response()
}

/// The Anthropic message answering `body` (by its `model`).
fn anthropic_message(body: &Value) -> Value {
    let model = body["model"].as_str().unwrap_or_default();
    let mut content = Vec::new();
    if model == "shell" {
        // Claude Code's turn: its `Bash` tool, then (given the tool's result) a closing text.
        let answered = body["messages"].as_array().is_some_and(|ms| {
            ms.iter().any(|m| {
                m["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
            })
        });
        let (content, stop) = if answered {
            (json!([{"type": "text", "text": SHELL_DONE}]), "end_turn")
        } else {
            (
                json!([{"type": "tool_use", "id": "toolu_shell_1", "name": "Bash",
                    "input": {"command": SHELL_COMMAND, "description": "Write the file"}}]),
                "tool_use",
            )
        };
        return json!({
            "id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": USAGE.0, "output_tokens": USAGE.1},
        });
    }
    if model == "tools" {
        content
            .push(json!({"type": "thinking", "thinking": "The lag is 5100.", "signature": "sig"}));
    }
    let text = if model == "tail" { TAIL } else { ANSWER };
    content.push(json!({"type": "text", "text": text}));
    if model == "tools" {
        content.push(
            json!({"type": "tool_use", "id": "toolu_1", "name": "files_read",
            "input": {"path": "notes.txt"}}),
        );
    }
    json!({
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
        "content": content,
        "stop_reason": if model == "tools" { "tool_use" } else { "end_turn" },
        "stop_sequence": null,
        "usage": {"input_tokens": 9, "cache_read_input_tokens": 2,
            "cache_creation_input_tokens": 0, "output_tokens": 7},
    })
}

/// The Messages stream of `message`: its text split inside `5100`, a tool's input in pieces.
fn anthropic_events(message: &Value) -> Vec<Value> {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let mut events = vec![
        json!({"type": "message_start", "message": start}),
        json!({"type": "ping"}),
    ];
    for (i, block) in message["content"].as_array().unwrap().iter().enumerate() {
        let mut first = block.clone();
        let mut deltas = Vec::new();
        match block["type"].as_str().unwrap() {
            "text" => {
                first["text"] = json!("");
                let text = block["text"].as_str().unwrap();
                let cut = text.find("00").unwrap_or(text.len());
                for d in [&text[..cut], &text[cut..]] {
                    deltas.push(json!({"type": "text_delta", "text": d}));
                }
            }
            "thinking" => {
                first["thinking"] = json!("");
                first["signature"] = json!("");
                deltas.push(json!({"type": "thinking_delta", "thinking": block["thinking"]}));
                deltas.push(json!({"type": "signature_delta", "signature": block["signature"]}));
            }
            _ => {
                first["input"] = json!({});
                let input = block["input"].to_string();
                let (a, b) = input.split_at(input.len() / 2);
                for d in [a, b] {
                    deltas.push(json!({"type": "input_json_delta", "partial_json": d}));
                }
            }
        }
        events.push(json!({"type": "content_block_start", "index": i, "content_block": first}));
        for d in deltas {
            events.push(json!({"type": "content_block_delta", "index": i, "delta": d}));
        }
        events.push(json!({"type": "content_block_stop", "index": i}));
    }
    events.push(json!({"type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
        "usage": {"output_tokens": 7}}));
    events.push(json!({"type": "message_stop"}));
    events
}

async fn messages(
    State(s): State<Script>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&s, "/v1/messages", &headers, body.clone());
    let header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
    if header("x-api-key") != Some(UPSTREAM_KEY) || header("anthropic-version").is_none() {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(
                json!({"type": "error", "error": {"type": "authentication_error",
                "message": "invalid x-api-key"}}),
            ),
        )
            .into_response();
    }
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    match model.as_str() {
        "bad" => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(
                    json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": format!("model: bad does not exist (key {UPSTREAM_KEY})")}}),
                ),
            )
                .into_response();
        }
        "boom" => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"type": "error", "error": {"type": "api_error",
                    "message": "upstream fell over"}})),
            )
                .into_response();
        }
        _ => {}
    }
    let message = anthropic_message(&body);
    if body["stream"] != Value::Bool(true) {
        return axum::Json(message).into_response();
    }
    let mut text = String::new();
    for e in anthropic_events(&message) {
        text.push_str(&format!(
            "event: {}\r\ndata: {e}\r\n\r\n",
            e["type"].as_str().unwrap()
        ));
    }
    ([("content-type", "text/event-stream")], text).into_response()
}
