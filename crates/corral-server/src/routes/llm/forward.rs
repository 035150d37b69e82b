//! One model request forwarded, whatever API it speaks (chat completions, Responses, Anthropic
//! Messages): sent
//! with the provider's key, its usage read and charged, its root replies hooked, a stream
//! passed through or held. What differs by API is in [`Api`] and [`Assembly`].

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::response::IntoResponse;
use corral_guard::{ProxiedOutcome, Refusal};
use corral_policy::codes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{
    Answer, Answered, AssistantReply, ChannelBody, MAX_EVENT_BYTES, MAX_UPSTREAM_BYTES, ReplyCtx,
    ReplyHook, Upstream, failed, messages, outcome_of, read_json, reply, responses, send_error,
    sse_response, upstream_error,
};
use corral_config::model::LlmApi;

/// The API a model request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1/messages` (Anthropic).
    Messages,
}

impl Api {
    /// The provider's path, under its base url.
    pub(super) fn path(self) -> &'static str {
        match self {
            Self::Chat => "/chat/completions",
            Self::Responses => "/responses",
            Self::Messages => "/messages",
        }
    }

    /// The provider API the route needs.
    pub(super) fn provider(self) -> LlmApi {
        match self {
            Self::Chat | Self::Responses => LlmApi::OpenAi,
            Self::Messages => LlmApi::Anthropic,
        }
    }

    /// What is wrong with a body that has a `model`, if anything: the conversation field the
    /// API needs, said with the shape to send.
    pub(super) fn body_error(self, body: &serde_json::Map<String, Value>) -> Option<&'static str> {
        match self {
            Self::Chat | Self::Messages if !body.get("messages").is_some_and(Value::is_array) => {
                Some(
                    "the body has no `messages` list; send the conversation as `messages: [{\"role\": \"user\", \"content\": \"...\"}]`",
                )
            }
            Self::Responses
                if !body
                    .get("input")
                    .is_some_and(|i| i.is_array() || i.is_string()) =>
            {
                Some(
                    "the body has no `input`; send the conversation as `input: \"...\"` or `input: [{\"role\": \"user\", \"content\": \"...\"}]`",
                )
            }
            _ => None,
        }
    }

    /// A whole answer with its root replies hooked, read after `history` (what the learner
    /// saw before it).
    fn hook_whole(self, v: &mut Value, hook: &dyn ReplyHook, ctx: &ReplyCtx, history: &[String]) {
        match self {
            Self::Chat => {
                let mut messages: Vec<&mut Value> = v
                    .get_mut("choices")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get_mut("message"))
                    .collect();
                let mut replies: Vec<AssistantReply> = messages
                    .iter()
                    .map(|m| AssistantReply::from_message(m))
                    .collect();
                hook.on_root_replies(ctx, history, &mut replies);
                for (m, reply) in messages.iter_mut().zip(&replies) {
                    reply.write_text(m);
                }
            }
            Self::Responses => responses::hook_response(v, hook, ctx, history),
            Self::Messages => messages::hook_message(v, hook, ctx, history),
        }
    }

    fn assembly(self) -> Assembly {
        match self {
            Self::Chat => Assembly::Chat(reply::Assembled::default()),
            Self::Responses => Assembly::Responses(responses::Assembled::default()),
            Self::Messages => Assembly::Messages(messages::Assembled::default()),
        }
    }
}

/// A stream's events assembled (for its usage, and for the hold).
enum Assembly {
    Chat(reply::Assembled),
    Responses(responses::Assembled),
    Messages(messages::Assembled),
}

impl Assembly {
    fn add(&mut self, v: &Value) {
        match self {
            Self::Chat(a) => a.add(v),
            Self::Responses(a) => a.add(v),
            Self::Messages(a) => a.add(v),
        }
    }

    fn usage(&self) -> Option<&Value> {
        match self {
            Self::Chat(a) => a.usage.as_ref(),
            Self::Responses(a) => a.usage.as_ref(),
            Self::Messages(a) => a.usage.as_ref(),
        }
    }

    /// Why a held stream cannot be rendered already (more than it holds), if so.
    fn overflow(&self) -> Option<Refusal> {
        let (what, max) = match self {
            Self::Chat(a) if a.too_many_choices => (
                "choices; ask for fewer choices (`n`)",
                reply::MAX_HELD_CHOICES,
            ),
            Self::Responses(a) if a.too_many_items => ("output items", responses::MAX_HELD_ITEMS),
            Self::Messages(a) if a.too_many_blocks => ("content blocks", messages::MAX_HELD_BLOCKS),
            _ => return None,
        };
        Some(Refusal::new(
            codes::LLM_UPSTREAM,
            format!(
                "the model provider's stream has more than {max} {what}, more than corral holds for the reply hook"
            ),
        ))
    }

    /// Whether an event is not passed through: a chat stream's usage chunk the client did not
    /// ask for.
    fn skipped(&self, v: Option<&Value>, usage_asked: bool) -> bool {
        match self {
            Self::Chat(_) => {
                !usage_asked
                    && v.is_some_and(|v| {
                        v.get("usage").is_some_and(Value::is_object)
                            && v.get("choices")
                                .and_then(Value::as_array)
                                .is_none_or(Vec::is_empty)
                    })
            }
            Self::Responses(_) | Self::Messages(_) => false,
        }
    }

    /// The held stream, hooked: the SSE text to send, or why there is none.
    fn render(&self, f: &Forward, usage_asked: bool) -> Result<String, Refusal> {
        let (hook, ctx, history, upstream) =
            (f.hook.as_deref(), &f.ctx, f.history.as_slice(), &f.upstream);
        match self {
            Self::Chat(a) => {
                let mut replies = a.replies();
                if let Some(hook) = hook {
                    let mut rs: Vec<AssistantReply> =
                        replies.iter_mut().map(|(_, r)| std::mem::take(r)).collect();
                    hook.on_root_replies(ctx, history, &mut rs);
                    for ((_, r), hooked) in replies.iter_mut().zip(rs) {
                        *r = hooked;
                    }
                }
                Ok(a.render(&replies, usage_asked))
            }
            Self::Responses(a) => {
                if let Some(m) = &a.error {
                    return Err(stream_error(m, upstream));
                }
                let Some(mut r) = a.final_response() else {
                    return Err(unfinished(
                        "a final response (`response.completed`)",
                        responses::MAX_HELD_ITEMS,
                    ));
                };
                if let Some(hook) = hook {
                    responses::hook_response(&mut r, hook, ctx, history);
                }
                Ok(responses::render(&r, a.terminal()))
            }
            Self::Messages(a) => {
                if let Some(m) = &a.error {
                    return Err(stream_error(m, upstream));
                }
                let Some(mut m) = a.final_message() else {
                    return Err(unfinished("`message_stop`", messages::MAX_HELD_BLOCKS));
                };
                if let Some(hook) = hook {
                    messages::hook_message(&mut m, hook, ctx, history);
                }
                Ok(messages::render(&m))
            }
        }
    }
}

/// `llm.upstream` for a stream's `error` event: its message, bounded, printable, without the
/// key.
fn stream_error(message: &str, upstream: &Upstream) -> Refusal {
    let clean: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(500)
        .collect();
    Refusal::new(
        codes::LLM_UPSTREAM,
        format!(
            "the model provider's stream failed: {}",
            upstream.scrub(&clean)
        ),
    )
}

/// `llm.upstream` for a held stream that did not end as it should.
fn unfinished(end: &str, max: usize) -> Refusal {
    Refusal::new(
        codes::LLM_UPSTREAM,
        format!(
            "the model provider's stream ended without {end}, or with more than {max} items; corral holds only a whole answer for the reply hook"
        ),
    )
}

/// Token counts of a `usage` object: (prompt, completion), from the chat names
/// (`prompt_tokens`, `completion_tokens`) or the Responses and Messages ones (`input_tokens`,
/// `output_tokens`; Anthropic's cache writes and reads, which its `input_tokens` leaves out,
/// are prompt tokens too).
pub(super) fn usage_of(usage: Option<&Value>) -> (u64, u64) {
    let n = |k: &str| {
        usage
            .and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let prompt = if usage.is_some_and(|u| u.get("prompt_tokens").is_some()) {
        n("prompt_tokens")
    } else {
        n("input_tokens")
            .saturating_add(n("cache_creation_input_tokens"))
            .saturating_add(n("cache_read_input_tokens"))
    };
    let completion = if usage.is_some_and(|u| u.get("completion_tokens").is_some()) {
        n("completion_tokens")
    } else {
        n("output_tokens")
    };
    (prompt, completion)
}

/// One model request to forward.
pub(super) struct Forward {
    pub(super) api: Api,
    pub(super) upstream: Arc<Upstream>,
    pub(super) metrics: Arc<crate::metrics::CallMetrics>,
    /// The model, as audited.
    pub(super) model: String,
    pub(super) body: Value,
    pub(super) hook: Option<Arc<dyn ReplyHook>>,
    pub(super) ctx: ReplyCtx,
    /// Headers of the client's passed on (Anthropic's `anthropic-version`, `anthropic-beta`).
    pub(super) headers: Vec<(&'static str, String)>,
    /// The request was `/v1/messages?beta=true` (passed on as it came).
    pub(super) beta: bool,
    /// The request's earlier assistant text, for the hook (empty without one).
    pub(super) history: Vec<String>,
}

impl Forward {
    async fn send(&self) -> Result<reqwest::Response, (Refusal, String)> {
        let resp = self
            .upstream
            .request_with(
                reqwest::Method::POST,
                if self.beta {
                    "/messages?beta=true"
                } else {
                    self.api.path()
                },
                &self.headers,
            )
            .json(&self.body)
            .send()
            .await
            .map_err(|e| send_error(&e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let r = upstream_error(&self.upstream, resp).await;
        Err((r, format!("model {}: upstream {status}", self.model)))
    }

    fn done(&self, status: u16, prompt: u64, completion: u64, note: &str) -> ProxiedOutcome {
        self.metrics.record_llm("ok", prompt, completion);
        ProxiedOutcome {
            result: Ok(json!({
                "model": self.model,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
            })),
            detail: Some(format!(
                "model {}: {prompt} prompt + {completion} completion tokens, upstream {status}{note}",
                self.model
            )),
            tokens: prompt.saturating_add(completion),
        }
    }

    fn fail(&self, r: Refusal, detail: String) -> ProxiedOutcome {
        self.metrics.record_llm(outcome_of(&r), 0, 0);
        failed(r, detail)
    }

    /// A non-streaming request: forwarded, its root replies hooked, answered whole.
    pub(super) async fn complete(self, tx: Answered) -> ProxiedOutcome {
        let resp = match self.send().await {
            Ok(r) => r,
            Err((r, d)) => return self.fail(r, d),
        };
        let status = resp.status().as_u16();
        let mut v = match read_json(resp).await {
            Ok(v) => v,
            Err(r) => {
                let d = format!("model {}: upstream {status}, unreadable", self.model);
                return self.fail(r, d);
            }
        };
        let (prompt, completion) = usage_of(v.get("usage"));
        if let Some(hook) = &self.hook {
            self.api
                .hook_whole(&mut v, hook.as_ref(), &self.ctx, &self.history);
        }
        let _ = tx.send(Answer::whole(axum::Json(&v).into_response()));
        self.done(status, prompt, completion, "")
    }

    /// A streaming request: passed through event by event (a chat stream's usage chunk
    /// stripped unless asked for), or, with a hook on a root reply, held and sent as one
    /// checked answer.
    pub(super) async fn stream(self, tx: Answered, usage_asked: bool) -> ProxiedOutcome {
        let mut resp = match self.send().await {
            Ok(r) => r,
            Err((r, d)) => return self.fail(r, d),
        };
        let status = resp.status().as_u16();
        let held = self.hook.is_some();
        let mut tx = Some(tx);
        let mut body_tx = None;
        if !held {
            let (btx, brx) = mpsc::channel::<Result<Bytes, std::io::Error>>(32);
            body_tx = Some(btx);
            if let Some(t) = tx.take() {
                let _ = t.send(Answer {
                    resp: sse_response(Body::from_stream(ChannelBody(brx))),
                    streaming: true,
                });
            }
        }
        let mut assembly = self.api.assembly();
        let mut buf: Vec<u8> = Vec::new();
        let mut total = 0usize;
        let mut note = "";
        // Once the client hung up, the provider's stream is still read (bounded by the size
        // limit of a held stream and the read timeout) for its usage: the provider bills the
        // whole answer, so the run is charged it.
        let mut gone = false;
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    let (r, _) = send_error(&e);
                    if held || tx.is_some() {
                        return self.fail(r, format!("model {}: stream broke", self.model));
                    }
                    note = ", stream broke";
                    break;
                }
            };
            total = total.saturating_add(chunk.len());
            buf.extend(chunk.iter().copied().filter(|b| *b != b'\r'));
            if buf.len() > MAX_EVENT_BYTES || ((held || gone) && total > MAX_UPSTREAM_BYTES) {
                let r = Refusal::new(
                    codes::LLM_UPSTREAM,
                    "the model provider's stream is over corral's size limits",
                );
                if held {
                    return self.fail(r, format!("model {}: stream too large", self.model));
                }
                note = ", stream too large";
                break;
            }
            for (data, raw) in reply::take_events(&mut buf) {
                let parsed = serde_json::from_str::<Value>(&data).ok();
                if let Some(v) = &parsed {
                    assembly.add(v);
                }
                if held && let Some(r) = assembly.overflow() {
                    return self.fail(r, format!("model {}: too much to hold", self.model));
                }
                let Some(btx) = &body_tx else {
                    continue;
                };
                if assembly.skipped(parsed.as_ref(), usage_asked) {
                    continue;
                }
                if btx.send(Ok(Bytes::from(raw))).await.is_err() {
                    gone = true;
                    note = ", client went away";
                    body_tx = None;
                }
            }
        }
        let (mut prompt, mut completion) = usage_of(assembly.usage());
        let estimated;
        if assembly.usage().is_none() && !held {
            // No usage (the stream broke, ran over a limit, or the provider sent none): an
            // estimate of ~4 bytes a token of what was sent and read, never 0.
            let sent = serde_json::to_vec(&self.body).map_or(0, |b| b.len());
            prompt = u64::try_from(sent / 4).unwrap_or(u64::MAX);
            completion = u64::try_from(total / 4).unwrap_or(u64::MAX);
            estimated = format!("{note}, no usage from the provider: tokens estimated from bytes");
            note = &estimated;
        }
        if held {
            let text = match assembly.render(&self, usage_asked) {
                Ok(t) => t,
                Err(r) => {
                    return self.fail(r, format!("model {}: stream unusable", self.model));
                }
            };
            if let Some(t) = tx.take() {
                let _ = t.send(Answer::whole(sse_response(Body::from(text))));
            }
            return self.done(status, prompt, completion, ", held");
        }
        self.done(status, prompt, completion, note)
    }
}
