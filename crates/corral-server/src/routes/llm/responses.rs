//! The OpenAI Responses API (`POST /v1/responses`) as the reply hook sees it: a response's
//! `message` items' text (`output_text` parts, a `refusal` checked as text) in order, and its
//! tool items (`function_call`, `local_shell_call`, `custom_tool_call`, every `*_call`) kept as
//! the model made them; a stream's events assembled into the final response and rendered back
//! as one valid Responses SSE sequence (the streaming hold).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::reply::{MAX_HELD_CHOICES, echoed};
use super::{AssistantReply, ReplyCtx, ReplyHook};

/// The most output items a held stream keeps (a turn of a coding agent is a few reasoning,
/// message and tool items; more is refused, as a chat stream's choices are).
pub(super) const MAX_HELD_ITEMS: usize = 4 * MAX_HELD_CHOICES;

/// The response fields a hooked answer keeps besides its `output` (the rest, `output_text`
/// included, is the provider's and is not sent: only checked text reaches the client).
const KEPT_FIELDS: &[&str] = &[
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "model",
    "usage",
    "parallel_tool_calls",
    "tool_choice",
    "tools",
    "previous_response_id",
    "max_output_tokens",
    "temperature",
    "top_p",
    "truncation",
    "store",
    "incomplete_details",
    "error",
];

/// Whether an output item is a tool call (kept as made, shown to the hook).
fn is_tool_item(item: &Value) -> bool {
    item.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.ends_with("_call"))
}

/// The tool calls the client runs (the model's call, kept whole, as a chat reply's tool calls
/// are). Every other `*_call` is a hosted tool the provider ran (code interpreter, web search,
/// file search, a hosted MCP server, ...), whose outputs are text the learner would read
/// unchecked: under a hook it keeps only its `id`, `type` and `status`.
const CLIENT_CALLS: &[&str] = &[
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "computer_call",
];

/// A hosted tool's item reduced to what says it ran (see [`CLIENT_CALLS`]).
fn strip_hosted(item: &mut Value) {
    let hosted = item_type(item).is_some_and(|t| !CLIENT_CALLS.contains(&t));
    if let Some(o) = item.as_object_mut()
        && hosted
    {
        o.retain(|k, v| matches!(k.as_str(), "id" | "type" | "status") && v.is_string());
    }
}

/// A value the provider chose that is kept under a hook only when it is a short identifier
/// (`max_output_tokens`, `server_error`, `final_answer`): free text could state a value.
fn identifier(v: Option<&Value>) -> Option<Value> {
    let s = v?.as_str()?;
    (!s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'))
    .then(|| Value::String(s.to_owned()))
}

/// `incomplete_details` and `error` under a hook: their identifiers only, the provider's words
/// replaced by fixed ones.
fn strip_details(r: &mut Map<String, Value>) {
    if let Some(d) = r.get_mut("incomplete_details")
        && !d.is_null()
    {
        *d = json!({"reason": identifier(d.get("reason"))});
    }
    if let Some(e) = r.get_mut("error")
        && !e.is_null()
    {
        *e = json!({
            "code": identifier(e.get("code")).unwrap_or_else(|| json!("server_error")),
            "message": "the model provider reported an error; its words are withheld in learning mode",
        });
    }
}

fn item_type(item: &Value) -> Option<&str> {
    item.get("type").and_then(Value::as_str)
}

/// The checked text of one content part of a `message` item (`output_text`'s `text`, a
/// `refusal`'s `refusal`), or `None` for a part that is not text (dropped under a hook).
fn part_text(part: &Value) -> Option<&str> {
    match part.get("type").and_then(Value::as_str) {
        Some("output_text") => part.get("text").and_then(Value::as_str),
        Some("refusal") => part.get("refusal").and_then(Value::as_str),
        _ => None,
    }
}

/// Runs `hook` on a whole response object (a non-streaming answer, or a held stream's final
/// response) and keeps only what the hook saw: the message items' text parts (rewritten),
/// the tool items, reasoning items without their readable text (`encrypted_content` kept, for
/// the provider), and the response fields in [`KEPT_FIELDS`].
pub(super) fn hook_response(
    response: &mut Value,
    hook: &dyn ReplyHook,
    ctx: &ReplyCtx,
    history: &[String],
) {
    let Some(r) = response.as_object_mut() else {
        return;
    };
    r.retain(|k, _| KEPT_FIELDS.contains(&k.as_str()) || k == "output");
    for key in ["id", "model"] {
        if let Some(v) = r.get(key).map(|v| echoed(v).unwrap_or(Value::Null)) {
            r.insert(key.to_owned(), v);
        }
    }
    let mut output = match r.remove("output") {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    output.retain(|i| matches!(item_type(i), Some("message" | "reasoning")) || is_tool_item(i));
    output
        .iter_mut()
        .filter(|i| is_tool_item(i))
        .for_each(strip_hosted);
    strip_details(r);
    let mut reply = AssistantReply::default();
    for item in &output {
        if is_tool_item(item) {
            reply.tool_calls.push(item.clone());
        } else if item_type(item) == Some("message") {
            for p in item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(t) = part_text(p) {
                    reply.text.push(t.to_owned());
                }
            }
        }
    }
    let slots = reply.text.len();
    hook.on_root_replies(ctx, history, std::slice::from_mut(&mut reply));
    write_text(&mut output, &reply.text, slots);
    r.insert("output".to_owned(), Value::Array(output));
}

/// Puts the hooked text back: the text parts, in order, get the hook's parts when their number
/// did not change; else the first text part holds them joined and the others go. Every part
/// becomes `{type: output_text, text, annotations: []}`; a message left without text goes.
fn write_text(output: &mut Vec<Value>, text: &[String], slots: usize) {
    let same = text.len() == slots;
    let mut next = 0usize;
    for item in output.iter_mut() {
        let Some(o) = item.as_object_mut() else {
            continue;
        };
        match o.get("type").and_then(Value::as_str) {
            Some("reasoning") => {
                o.retain(|k, _| matches!(k.as_str(), "id" | "type" | "encrypted_content"));
                o.insert("summary".to_owned(), json!([]));
                continue;
            }
            Some("message") => {}
            _ => continue,
        }
        let phase = identifier(o.get("phase"));
        o.retain(|k, _| matches!(k.as_str(), "id" | "type" | "role" | "status" | "content"));
        if let Some(phase) = phase {
            o.insert("phase".to_owned(), phase);
        }
        let parts = match o.get("content") {
            Some(Value::Array(p)) => p.iter().filter(|p| part_text(p).is_some()).count(),
            _ => 0,
        };
        let mut content = Vec::new();
        for _ in 0..parts {
            let t = if same {
                text.get(next).cloned()
            } else if next == 0 {
                Some(text.concat())
            } else {
                None
            };
            next += 1;
            if let Some(t) = t {
                content.push(json!({"type": "output_text", "text": t, "annotations": []}));
            }
        }
        o.insert("content".to_owned(), Value::Array(content));
    }
    output.retain(|i| {
        item_type(i) != Some("message")
            || i.get("content")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty())
    });
}

/// A Responses stream, assembled: its lifecycle response (from `response.created`, replaced by
/// the terminal `response.completed`, `.incomplete` or `.failed`), its finished output items by
/// index, and an `error` event's message.
#[derive(Debug, Default)]
pub(super) struct Assembled {
    response: Option<Value>,
    terminal: Option<String>,
    items: BTreeMap<u64, Value>,
    /// The stream's usage (the terminal response's).
    pub(super) usage: Option<Value>,
    /// The stream finished more than [`MAX_HELD_ITEMS`] items.
    pub(super) too_many_items: bool,
    /// The stream's `error` event, if any (its message).
    pub(super) error: Option<String>,
}

impl Assembled {
    /// Adds one event (its `data:` JSON).
    pub(super) fn add(&mut self, event: &Value) {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match kind {
            "response.created" | "response.in_progress" | "response.queued" => {
                if self.terminal.is_none()
                    && let Some(r) = event.get("response")
                {
                    self.response = Some(r.clone());
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                if let Some(r) = event.get("response") {
                    self.response = Some(r.clone());
                    self.terminal = Some(kind.to_owned());
                    if let Some(u) = r.get("usage").filter(|u| u.is_object()) {
                        self.usage = Some(u.clone());
                    }
                }
            }
            "response.output_item.done" => {
                let index = event
                    .get("output_index")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                if !self.items.contains_key(&index) && self.items.len() >= MAX_HELD_ITEMS {
                    self.too_many_items = true;
                } else if let Some(item) = event.get("item") {
                    self.items.insert(index, item.clone());
                }
            }
            "error" => {
                let m = event
                    .get("message")
                    .or_else(|| event.get("error").and_then(|e| e.get("message")))
                    .and_then(Value::as_str)
                    .unwrap_or("an error event");
                self.error = Some(m.to_owned());
            }
            _ => {}
        }
    }

    /// The final response (its output the terminal event's, or else the finished items), or
    /// `None` when the stream never ended a response.
    pub(super) fn final_response(&self) -> Option<Value> {
        self.terminal.as_ref()?;
        let mut r = self.response.clone()?;
        let has_output = r
            .get("output")
            .and_then(Value::as_array)
            .is_some_and(|o| !o.is_empty());
        if !has_output && let Some(o) = r.as_object_mut() {
            o.insert(
                "output".to_owned(),
                Value::Array(self.items.values().cloned().collect()),
            );
        }
        if r.get("output")
            .and_then(Value::as_array)
            .is_some_and(|o| o.len() > MAX_HELD_ITEMS)
        {
            return None;
        }
        Some(r)
    }

    /// The terminal event's type (`response.completed` unless the provider said otherwise).
    pub(super) fn terminal(&self) -> &str {
        self.terminal.as_deref().unwrap_or("response.completed")
    }
}

/// The held stream of a (hooked) final response: `response.created` and
/// `response.in_progress` (no output yet), then per output item `response.output_item.added`,
/// for a message per text part `response.content_part.added`, one
/// `response.output_text.delta` with the whole text, `response.output_text.done` and
/// `response.content_part.done`, then `response.output_item.done`; last the terminal event
/// with the whole response. Events are numbered by `sequence_number`.
pub(super) fn render(response: &Value, terminal: &str) -> String {
    let mut out = String::new();
    let mut seq = 0u64;
    let mut event = |kind: &str, mut data: Map<String, Value>| {
        data.insert("type".to_owned(), json!(kind));
        data.insert("sequence_number".to_owned(), json!(seq));
        seq += 1;
        out.push_str("event: ");
        out.push_str(kind);
        out.push_str("\ndata: ");
        out.push_str(&Value::Object(data).to_string());
        out.push_str("\n\n");
    };
    let obj = |pairs: Vec<(&str, Value)>| -> Map<String, Value> {
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    };
    let mut start = response.clone();
    if let Some(o) = start.as_object_mut() {
        o.insert("status".to_owned(), json!("in_progress"));
        o.insert("output".to_owned(), json!([]));
        o.insert("usage".to_owned(), Value::Null);
    }
    event("response.created", obj(vec![("response", start.clone())]));
    event("response.in_progress", obj(vec![("response", start)]));
    let items = response
        .get("output")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (index, item) in items.iter().enumerate() {
        let id = item.get("id").cloned().unwrap_or(Value::Null);
        let mut added = item.clone();
        let parts = match added.get_mut("content") {
            Some(c) if item_type(item) == Some("message") => std::mem::replace(c, json!([])),
            _ => json!([]),
        };
        if let Some(o) = added.as_object_mut()
            && o.contains_key("status")
        {
            o.insert("status".to_owned(), json!("in_progress"));
        }
        event(
            "response.output_item.added",
            obj(vec![("output_index", json!(index)), ("item", added)]),
        );
        for (ci, part) in parts.as_array().into_iter().flatten().enumerate() {
            let text = part.get("text").cloned().unwrap_or_else(|| json!(""));
            let at = |mut m: Map<String, Value>| {
                m.insert("item_id".to_owned(), id.clone());
                m.insert("output_index".to_owned(), json!(index));
                m.insert("content_index".to_owned(), json!(ci));
                m
            };
            let empty = json!({"type": "output_text", "text": "", "annotations": []});
            event(
                "response.content_part.added",
                at(obj(vec![("part", empty)])),
            );
            event(
                "response.output_text.delta",
                at(obj(vec![("delta", text.clone()), ("logprobs", json!([]))])),
            );
            event(
                "response.output_text.done",
                at(obj(vec![("text", text), ("logprobs", json!([]))])),
            );
            event(
                "response.content_part.done",
                at(obj(vec![("part", part.clone())])),
            );
        }
        event(
            "response.output_item.done",
            obj(vec![("output_index", json!(index)), ("item", item.clone())]),
        );
    }
    event(terminal, obj(vec![("response", response.clone())]));
    out
}
