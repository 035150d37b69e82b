//! The assistant's reply as the reply hook sees it, taken from and put back into the OpenAI
//! shapes: a non-streaming completion's `choices[].message`, and a stream's chunks assembled
//! into one message per choice (content deltas joined, tool-call deltas merged by index) and
//! rendered back as one valid SSE stream (the streaming hold).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// Who asked for a reply: what a [`super::ReplyHook`] may decide by (never the prompt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyCtx {
    /// The caller's principal id.
    pub principal: String,
    /// The caller's tenant, if any.
    pub tenant: Option<String>,
    /// The run the request belongs to (`X-Corral-Run`, or the token's run).
    pub run: Option<String>,
    /// The agent that asked (`X-Corral-Agent`; the configured root agent's name when absent).
    pub agent: String,
    /// The request's id (its audit events carry it).
    pub request_id: String,
    /// The caller's whole principal (learning mode reads its level by it: a delegated caller
    /// shares its human's).
    pub caller: corral_policy::Principal,
}

/// One assistant message: its text parts in order (what a hook may rewrite) and its tool calls
/// (shown to the hook, always forwarded as the model made them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssistantReply {
    /// The text parts, in order (one for a plain string `content`).
    pub text: Vec<String>,
    /// The tool calls, as the model made them (`[{id, type, function: {name, arguments}}]`).
    pub tool_calls: Vec<Value>,
}

impl AssistantReply {
    /// The reply in a completion's `message` object.
    pub(super) fn from_message(message: &Value) -> Self {
        let text = match message.get("content") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(parts)) => parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        // A refusal is text the model wrote for the reader too: with no text content it is
        // checked as the text (and sent as the content); other fields are not sent at all.
        let mut text = text;
        if text.is_empty()
            && let Some(r) = message.get("refusal").and_then(Value::as_str)
            && !r.is_empty()
        {
            text.push(r.to_owned());
        }
        let tool_calls = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Self { text, tool_calls }
    }

    /// Puts the (hooked) text back into `message`: a string `content` becomes the parts joined;
    /// in a list of parts, the text parts are replaced in order (when the hook changed their
    /// number, by one text part holding them joined). Tool calls are left as they are. The hook
    /// saw only text and tool calls, so nothing else is sent: every other field (`refusal`,
    /// `reasoning_content`, `audio`, ...) and every part that is not text is dropped, so no
    /// unchecked text of the model reaches the client beside the checked one.
    pub(super) fn write_text(&self, message: &mut Value) {
        let Some(m) = message.as_object_mut() else {
            return;
        };
        m.retain(|k, _| matches!(k.as_str(), "role" | "content" | "tool_calls"));
        if let Some(Value::Array(parts)) = m.get_mut("content") {
            parts.retain(|p| p.get("type").and_then(Value::as_str) == Some("text"));
        }
        if !m
            .get("content")
            .is_some_and(|c| c.is_string() || c.is_array())
        {
            // No content, or a refusal checked as the text: the text is the content.
            m.insert("content".to_owned(), Value::Null);
        }
        match m.get_mut("content") {
            Some(Value::Array(parts)) => {
                let slots: Vec<usize> = parts
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.get("type").and_then(Value::as_str) == Some("text"))
                    .map(|(i, _)| i)
                    .collect();
                if slots.len() == self.text.len() {
                    for (i, t) in slots.into_iter().zip(&self.text) {
                        if let Some(p) = parts.get_mut(i).and_then(Value::as_object_mut) {
                            p.insert("text".to_owned(), Value::String(t.clone()));
                        }
                    }
                } else {
                    parts.retain(|p| p.get("type").and_then(Value::as_str) != Some("text"));
                    if !self.text.is_empty() {
                        parts.insert(0, json!({"type": "text", "text": self.text.concat()}));
                    }
                }
            }
            Some(Value::String(_)) | Some(Value::Null) | None => {
                if self.text.is_empty() {
                    // Text removed entirely (a hook kept only the tool calls): no content.
                    if m.get("content").is_some_and(Value::is_string) {
                        m.insert("content".to_owned(), Value::Null);
                    }
                } else {
                    m.insert("content".to_owned(), Value::String(self.text.concat()));
                }
            }
            Some(_) => {}
        }
    }
}

/// The most bytes of a request's earlier assistant messages handed to the reply hook, read
/// from the newest back (the guard reads a far shorter tail; this bounds the copy).
pub const MAX_HISTORY_BYTES: usize = 64 * 1024;

/// What the learner saw before this reply, as the client sends it: the text of the request's
/// assistant messages (a string `content`, its text parts, or a `refusal`), oldest first, the
/// newest [`MAX_HISTORY_BYTES`] of them (a message cut at its start). Tool calls and the other
/// roles are not text the learner read from the model.
pub fn history_of(body: &Value) -> Vec<String> {
    // Chat completions and Anthropic messages: `messages`; Responses: `input` (a list of items,
    // the assistant's `message` items among them; a string input has no history).
    let Some(messages) = body
        .get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut left = MAX_HISTORY_BYTES;
    for m in messages.iter().rev() {
        if left == 0 {
            break;
        }
        if m.get("role").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        let text = said(m);
        if text.is_empty() {
            continue;
        }
        let mut start = text.len().saturating_sub(left);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        left -= text.len() - start;
        out.push(text.get(start..).unwrap_or_default().to_owned());
    }
    out.reverse();
    out
}

/// The text of an earlier assistant message, whatever API wrote it: a string `content`, its
/// `text` (chat, Anthropic) or `output_text` (Responses) parts, else its `refusal`.
fn said(m: &Value) -> String {
    let text = match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| {
                matches!(
                    p.get("type").and_then(Value::as_str),
                    Some("text" | "output_text")
                )
            })
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    };
    if text.is_empty() {
        return m
            .get("refusal")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
    }
    text
}

/// One choice of a stream, assembled from its deltas.
#[derive(Debug, Default)]
struct Choice {
    role: Option<String>,
    content: String,
    has_content: bool,
    /// Tool-call deltas merged by their `index`.
    tool_calls: BTreeMap<u64, Map<String, Value>>,
    finish_reason: Option<Value>,
}

/// The most choices a held stream renders: each is sent as two chunks repeating the stream's
/// header, so the held answer stays a small multiple of what was read; more is refused.
pub(super) const MAX_HELD_CHOICES: usize = 16;

/// The most bytes of a string the held stream echoes from the provider's header fields (`id`,
/// `model`, `system_fingerprint`), which it repeats in every chunk it renders.
const MAX_ECHOED_BYTES: usize = 256;

/// A header field as the held stream echoes it: a string clipped to [`MAX_ECHOED_BYTES`] (at a
/// character boundary), a number or boolean as is; anything else is dropped.
pub(super) fn echoed(v: &Value) -> Option<Value> {
    match v {
        Value::String(s) => {
            let mut end = s.len().min(MAX_ECHOED_BYTES);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            Some(Value::String(s[..end].to_owned()))
        }
        Value::Number(_) | Value::Bool(_) => Some(v.clone()),
        _ => None,
    }
}

/// A whole stream, assembled: what the streaming hold sends as one message.
#[derive(Debug, Default)]
pub(super) struct Assembled {
    id: Option<Value>,
    model: Option<Value>,
    created: Option<Value>,
    system_fingerprint: Option<Value>,
    choices: BTreeMap<u64, Choice>,
    /// The stream's `usage` (from the last chunk, with `include_usage`).
    pub(super) usage: Option<Value>,
    /// The stream opened more than [`MAX_HELD_CHOICES`] choices (those past it were dropped).
    pub(super) too_many_choices: bool,
}

impl Assembled {
    /// Adds one chunk (`data:` JSON of a `chat.completion.chunk`).
    pub(super) fn add(&mut self, chunk: &Value) {
        for (slot, key) in [
            (&mut self.id, "id"),
            (&mut self.model, "model"),
            (&mut self.created, "created"),
            (&mut self.system_fingerprint, "system_fingerprint"),
        ] {
            if slot.is_none()
                && let Some(v) = chunk.get(key).and_then(echoed)
            {
                *slot = Some(v);
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return;
        };
        for c in choices {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            if !self.choices.contains_key(&index) && self.choices.len() >= MAX_HELD_CHOICES {
                self.too_many_choices = true;
                continue;
            }
            let choice = self.choices.entry(index).or_default();
            if let Some(f) = c.get("finish_reason").and_then(echoed) {
                choice.finish_reason = Some(f);
            }
            let Some(delta) = c.get("delta") else {
                continue;
            };
            if let Some(r) = delta.get("role").and_then(Value::as_str) {
                choice.role = Some(r.to_owned());
            }
            if let Some(t) = delta.get("content").and_then(Value::as_str) {
                choice.content.push_str(t);
                choice.has_content = true;
            }
            for tc in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let i = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
                merge_tool_call(choice.tool_calls.entry(i).or_default(), tc);
            }
        }
    }

    /// Each choice's message as the hook sees it, by choice index.
    pub(super) fn replies(&self) -> Vec<(u64, AssistantReply)> {
        self.choices
            .iter()
            .map(|(i, c)| {
                (
                    *i,
                    AssistantReply {
                        text: if c.has_content {
                            vec![c.content.clone()]
                        } else {
                            Vec::new()
                        },
                        tool_calls: tool_calls(c),
                    },
                )
            })
            .collect()
    }

    /// The held stream: per choice one chunk with the role, the (hooked) content and the tool
    /// calls, then one chunk with its finish reason; the usage chunk when the client asked for
    /// it; `data: [DONE]`.
    pub(super) fn render(&self, replies: &[(u64, AssistantReply)], with_usage: bool) -> String {
        let base = |choices: Value| {
            let mut m = Map::new();
            m.insert(
                "id".to_owned(),
                self.id.clone().unwrap_or_else(|| json!("chatcmpl-corral")),
            );
            m.insert("object".to_owned(), json!("chat.completion.chunk"));
            m.insert(
                "created".to_owned(),
                self.created.clone().unwrap_or_else(|| json!(0)),
            );
            m.insert(
                "model".to_owned(),
                self.model.clone().unwrap_or_else(|| json!("")),
            );
            if let Some(f) = &self.system_fingerprint {
                m.insert("system_fingerprint".to_owned(), f.clone());
            }
            m.insert("choices".to_owned(), choices);
            Value::Object(m)
        };
        let mut out = String::new();
        let mut event = |v: &Value| {
            out.push_str("data: ");
            out.push_str(&v.to_string());
            out.push_str("\n\n");
        };
        for (index, reply) in replies {
            let Some(c) = self.choices.get(index) else {
                continue;
            };
            let mut delta = Map::new();
            delta.insert(
                "role".to_owned(),
                json!(c.role.clone().unwrap_or_else(|| "assistant".to_owned())),
            );
            if c.has_content || !reply.text.is_empty() {
                delta.insert("content".to_owned(), json!(reply.text.concat()));
            }
            if !reply.tool_calls.is_empty() {
                let calls: Vec<Value> = reply
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, tc)| {
                        let mut tc = tc.clone();
                        if let Some(o) = tc.as_object_mut() {
                            o.insert("index".to_owned(), json!(i));
                        }
                        tc
                    })
                    .collect();
                delta.insert("tool_calls".to_owned(), Value::Array(calls));
            }
            event(&base(json!([{
                "index": index, "delta": Value::Object(delta), "finish_reason": null,
            }])));
            event(&base(json!([{
                "index": index, "delta": {},
                "finish_reason": c.finish_reason.clone().unwrap_or_else(|| json!("stop")),
            }])));
        }
        if with_usage && let Some(u) = &self.usage {
            let mut v = base(json!([]));
            if let Some(o) = v.as_object_mut() {
                o.insert("usage".to_owned(), u.clone());
            }
            event(&v);
        }
        out.push_str("data: [DONE]\n\n");
        out
    }
}

/// Merges one tool-call delta into the call assembled so far: `id`, `type` and the function's
/// `name` are kept once given; `function.arguments` fragments are joined.
fn merge_tool_call(into: &mut Map<String, Value>, delta: &Value) {
    for key in ["id", "type"] {
        if let Some(v) = delta.get(key).filter(|v| !v.is_null()) {
            into.entry(key.to_owned()).or_insert_with(|| v.clone());
        }
    }
    let Some(f) = delta.get("function") else {
        return;
    };
    let func = into
        .entry("function".to_owned())
        .or_insert_with(|| json!({}));
    let Some(func) = func.as_object_mut() else {
        return;
    };
    if let Some(n) = f.get("name").and_then(Value::as_str) {
        let name = func.entry("name".to_owned()).or_insert_with(|| json!(""));
        if let Value::String(s) = name {
            s.push_str(n);
        }
    }
    if let Some(a) = f.get("arguments").and_then(Value::as_str) {
        let args = func
            .entry("arguments".to_owned())
            .or_insert_with(|| json!(""));
        if let Value::String(s) = args {
            s.push_str(a);
        }
    }
}

/// A choice's tool calls, in index order, as a completion's message holds them.
fn tool_calls(c: &Choice) -> Vec<Value> {
    c.tool_calls
        .values()
        .map(|m| {
            let mut m = m.clone();
            m.entry("type".to_owned())
                .or_insert_with(|| json!("function"));
            Value::Object(m)
        })
        .collect()
}

/// Splits complete SSE events off the front of `buf` (carriage returns already removed): the
/// `data:` payload of each (lines joined by `\n`), and the raw event text to forward. Events
/// are cut as bytes, so a character split between two reads is whole again.
pub(super) fn take_events(buf: &mut Vec<u8>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
        let bytes: Vec<u8> = buf.drain(..end + 2).collect();
        let raw = String::from_utf8_lossy(&bytes).into_owned();
        let data: Vec<&str> = raw
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        out.push((data.join("\n"), raw));
    }
    out
}
