//! The Anthropic Messages API (`POST /v1/messages`) as the reply hook sees it: a message's
//! `text` content blocks in order, and its `tool_use` blocks (and `server_tool_use`) kept as
//! the model made them; a stream's events assembled into the final message and rendered back
//! as one valid Messages SSE sequence (the streaming hold).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::reply::{MAX_HELD_CHOICES, echoed};
use super::{AssistantReply, ReplyCtx, ReplyHook};

/// The most content blocks a held stream keeps.
pub(super) const MAX_HELD_BLOCKS: usize = 4 * MAX_HELD_CHOICES;

/// The message fields a hooked answer keeps besides its `content`.
const KEPT_FIELDS: &[&str] = &[
    "id",
    "type",
    "role",
    "model",
    "stop_reason",
    "stop_sequence",
    "usage",
];

fn block_type(b: &Value) -> Option<&str> {
    b.get("type").and_then(Value::as_str)
}

fn is_tool_block(b: &Value) -> bool {
    matches!(block_type(b), Some("tool_use" | "server_tool_use"))
}

/// Runs `hook` on a whole message (a non-streaming answer, or a held stream's final message)
/// and keeps only what the hook saw: its text blocks (rewritten), its tool blocks, its
/// `redacted_thinking` blocks (opaque to the client), and the fields in [`KEPT_FIELDS`].
/// `thinking` blocks hold the model's readable reasoning, which the hook does not check: they
/// are not sent.
pub(super) fn hook_message(
    message: &mut Value,
    hook: &dyn ReplyHook,
    ctx: &ReplyCtx,
    history: &[String],
) {
    let Some(m) = message.as_object_mut() else {
        return;
    };
    m.retain(|k, _| KEPT_FIELDS.contains(&k.as_str()) || k == "content");
    for key in ["id", "model", "stop_reason"] {
        if let Some(v) = m.get(key).map(|v| echoed(v).unwrap_or(Value::Null)) {
            m.insert(key.to_owned(), v);
        }
    }
    let mut content = match m.remove("content") {
        Some(Value::Array(blocks)) => blocks,
        _ => Vec::new(),
    };
    content.retain(|b| {
        matches!(block_type(b), Some("text" | "redacted_thinking")) || is_tool_block(b)
    });
    let mut reply = AssistantReply::default();
    for b in &content {
        if is_tool_block(b) {
            reply.tool_calls.push(b.clone());
        } else if let Some(t) = b.get("text").and_then(Value::as_str) {
            reply.text.push(t.to_owned());
        }
    }
    let slots = reply.text.len();
    hook.on_root_replies(ctx, history, std::slice::from_mut(&mut reply));
    let same = reply.text.len() == slots;
    let mut next = 0usize;
    let mut out = Vec::new();
    for b in content {
        if block_type(&b) != Some("text") {
            out.push(b);
            continue;
        }
        let t = if same {
            reply.text.get(next).cloned()
        } else if next == 0 {
            Some(reply.text.concat())
        } else {
            None
        };
        next += 1;
        if let Some(t) = t {
            // Citations are dropped with the rest of what the hook did not see.
            out.push(json!({"type": "text", "text": t}));
        }
    }
    m.insert("content".to_owned(), Value::Array(out));
}

/// One content block of a stream: its start, and its deltas joined.
#[derive(Debug, Default)]
struct Block {
    start: Value,
    text: String,
    json: String,
    has_json: bool,
}

/// A Messages stream, assembled.
#[derive(Debug, Default)]
pub(super) struct Assembled {
    message: Option<Value>,
    blocks: BTreeMap<u64, Block>,
    stop: Map<String, Value>,
    stopped: bool,
    /// The stream's usage: `message_start`'s, updated by each `message_delta`'s.
    pub(super) usage: Option<Value>,
    /// The stream opened more than [`MAX_HELD_BLOCKS`] blocks.
    pub(super) too_many_blocks: bool,
    /// The stream's `error` event, if any (its message).
    pub(super) error: Option<String>,
}

impl Assembled {
    /// Adds one event (its `data:` JSON).
    pub(super) fn add(&mut self, event: &Value) {
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "message_start" => {
                if let Some(m) = event.get("message") {
                    self.message = Some(m.clone());
                    if let Some(u) = m.get("usage").filter(|u| u.is_object()) {
                        self.usage = Some(u.clone());
                    }
                }
            }
            "content_block_start" => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                if !self.blocks.contains_key(&index) && self.blocks.len() >= MAX_HELD_BLOCKS {
                    self.too_many_blocks = true;
                    return;
                }
                let start = event.get("content_block").cloned().unwrap_or(Value::Null);
                self.blocks.insert(
                    index,
                    Block {
                        start,
                        ..Block::default()
                    },
                );
            }
            "content_block_delta" => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                let (Some(b), Some(d)) = (self.blocks.get_mut(&index), event.get("delta")) else {
                    return;
                };
                if let Some(t) = d.get("text").and_then(Value::as_str) {
                    b.text.push_str(t);
                }
                if let Some(j) = d.get("partial_json").and_then(Value::as_str) {
                    b.json.push_str(j);
                    b.has_json = true;
                }
            }
            "message_delta" => {
                if let Some(d) = event.get("delta").and_then(Value::as_object) {
                    for (k, v) in d {
                        self.stop.insert(k.clone(), v.clone());
                    }
                }
                if let Some(u) = event.get("usage").and_then(Value::as_object) {
                    let usage = self.usage.get_or_insert_with(|| json!({}));
                    if let Some(o) = usage.as_object_mut() {
                        for (k, v) in u {
                            if !v.is_null() {
                                o.insert(k.clone(), v.clone());
                            }
                        }
                    }
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let m = event
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("an error event");
                self.error = Some(m.to_owned());
            }
            _ => {}
        }
    }

    /// The final message, or `None` when the stream did not end one (`message_stop`).
    pub(super) fn final_message(&self) -> Option<Value> {
        if !self.stopped {
            return None;
        }
        let mut m = self.message.clone()?;
        let content: Vec<Value> = self
            .blocks
            .values()
            .map(|b| {
                let mut block = b.start.clone();
                if let Some(o) = block.as_object_mut() {
                    if o.contains_key("text") || block_type(&b.start) == Some("text") {
                        let mut t = o
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned();
                        t.push_str(&b.text);
                        o.insert("text".to_owned(), Value::String(t));
                    }
                    if b.has_json {
                        let input = serde_json::from_str(&b.json).unwrap_or_else(|_| json!({}));
                        o.insert("input".to_owned(), input);
                    }
                }
                block
            })
            .collect();
        if let Some(o) = m.as_object_mut() {
            o.insert("content".to_owned(), Value::Array(content));
            for (k, v) in &self.stop {
                o.insert(k.clone(), v.clone());
            }
            if let Some(u) = &self.usage {
                o.insert("usage".to_owned(), u.clone());
            }
        }
        Some(m)
    }
}

/// The held stream of a (hooked) final message: `message_start` (no content, the input usage),
/// per block `content_block_start`, one delta with the whole text (`text_delta`) or input
/// (`input_json_delta`), `content_block_stop`; then `message_delta` (stop reason, usage) and
/// `message_stop`.
pub(super) fn render(message: &Value) -> String {
    let mut out = String::new();
    let mut event = |kind: &str, mut data: Map<String, Value>| {
        data.insert("type".to_owned(), json!(kind));
        out.push_str("event: ");
        out.push_str(kind);
        out.push_str("\ndata: ");
        out.push_str(&Value::Object(data).to_string());
        out.push_str("\n\n");
    };
    let obj = |pairs: Vec<(&str, Value)>| -> Map<String, Value> {
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    };
    let mut start = message.clone();
    if let Some(o) = start.as_object_mut() {
        o.insert("content".to_owned(), json!([]));
        o.insert("stop_reason".to_owned(), Value::Null);
        o.insert("stop_sequence".to_owned(), Value::Null);
    }
    event("message_start", obj(vec![("message", start)]));
    let blocks = message
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (index, block) in blocks.iter().enumerate() {
        let mut first = block.clone();
        let delta = match block_type(block) {
            Some("text") => {
                first["text"] = json!("");
                Some(
                    json!({"type": "text_delta", "text": block.get("text").cloned().unwrap_or(json!(""))}),
                )
            }
            Some("tool_use" | "server_tool_use") => {
                first["input"] = json!({});
                let input = block.get("input").cloned().unwrap_or(json!({}));
                Some(json!({"type": "input_json_delta", "partial_json": input.to_string()}))
            }
            _ => None,
        };
        event(
            "content_block_start",
            obj(vec![("index", json!(index)), ("content_block", first)]),
        );
        if let Some(d) = delta {
            event(
                "content_block_delta",
                obj(vec![("index", json!(index)), ("delta", d)]),
            );
        }
        event("content_block_stop", obj(vec![("index", json!(index))]));
    }
    let stop = json!({
        "stop_reason": message.get("stop_reason").cloned().unwrap_or(Value::Null),
        "stop_sequence": message.get("stop_sequence").cloned().unwrap_or(Value::Null),
    });
    let usage = message.get("usage").cloned().unwrap_or_else(|| json!({}));
    event(
        "message_delta",
        obj(vec![("delta", stop), ("usage", usage)]),
    );
    event("message_stop", Map::new());
    out
}
