//! The LLM proxy over real HTTP, against a scripted provider (`scripted_llm`): forwarding with
//! the provider's key (never the caller's token), default deny through the guard chain,
//! errors in corral's shape, streams passed through or held, tokens metered and budgeted,
//! and the reply hook on the root agent's replies only.

use std::sync::Arc;

use corral_server::routes::llm::{AssistantReply, ReplyCtx, ReplyHook};
use serde_json::{Value, json};

use crate::common::{AGENT_TOKEN, Reply, Server, Workspace, send, token_env};
use crate::scripted_llm::{ANSWER, LLM_YAML, ScriptedLlm, UPSTREAM_KEY, sse_data};

/// A rule that lets every caller ask the model.
pub(crate) const ALLOW_LLM: &str = "rules:\n  - allow: [llm.chat]\n";

/// A hook that replaces `5100` in the root's text (and records who it saw).
#[derive(Debug, Default)]
pub(crate) struct Redact {
    pub(crate) seen: std::sync::Mutex<Vec<(ReplyCtx, Vec<Value>)>>,
}

impl ReplyHook for Redact {
    fn on_root_reply(&self, ctx: &ReplyCtx, reply: &mut AssistantReply) {
        for t in &mut reply.text {
            *t = t.replace("5100", "[withheld]");
        }
        self.seen
            .lock()
            .unwrap()
            .push((ctx.clone(), reply.tool_calls.clone()));
    }
}

pub(crate) struct Proxy {
    pub(crate) server: Server,
    pub(crate) upstream: ScriptedLlm,
    _ws: Workspace,
}

pub(crate) async fn proxy_with(extra: &str, hook: Option<Arc<dyn ReplyHook>>) -> Proxy {
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let loaded = ws.load(&ws.jail_yaml(extra), &env);
    let server = Server::start_hooked(&loaded, 1 << 20, hook)
        .await
        .with_token(AGENT_TOKEN);
    Proxy {
        server,
        upstream,
        _ws: ws,
    }
}

pub(crate) async fn proxy() -> Proxy {
    proxy_with(&format!("{LLM_YAML}{ALLOW_LLM}"), None).await
}

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "What is the secret number?"}]})
}

impl Proxy {
    async fn post(&self, body: Value, headers: &[(&str, &str)]) -> Reply {
        self.post_to("/v1/chat/completions", body, headers).await
    }

    /// Posts `body` to `path` with the agent's token and `headers`.
    pub(crate) async fn post_to(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> Reply {
        let mut rb = self
            .server
            .client()
            .post(self.server.url(path))
            .bearer_auth(AGENT_TOKEN)
            .json(&body);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        send(rb).await
    }

    /// The `llm.chat` events once there are `n` (a passed-through stream is audited when it
    /// ended); at most 10 s of waiting.
    pub(crate) async fn wait_for_events(&self, n: usize) -> Vec<corral_guard::audit::AuditEvent> {
        for _ in 0..200 {
            let events = self.llm_events().await;
            if events.len() >= n {
                return events;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        self.llm_events().await
    }

    /// The audit events of the op `llm.chat`, newest first.
    pub(crate) async fn llm_events(&self) -> Vec<corral_guard::audit::AuditEvent> {
        self.server
            .store
            .audit_recent(None, 1000)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.op == "llm.chat")
            .collect()
    }
}

#[tokio::test]
async fn a_completion_is_forwarded_with_the_providers_key_and_never_the_callers_token() {
    let p = proxy().await;
    let r = p.post(chat("ok"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], ANSWER);
    assert_eq!(v["usage"]["prompt_tokens"], 11);
    assert!(r.headers.get("x-request-id").is_some());
    let seen = p.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    assert!(!format!("{seen:?}").contains(AGENT_TOKEN));
    assert_eq!(
        seen[0].body["messages"][0]["content"],
        "What is the secret number?"
    );
}

#[tokio::test]
async fn a_model_call_no_rule_names_is_refused_and_nothing_reaches_the_provider() {
    // `workspace_jail` allows files; `llm.chat` is explicit-only: no preset opens it.
    let p = proxy_with(LLM_YAML, None).await;
    let r = p.post(chat("ok"), &[]).await;
    r.assert_error(404, "op.not_enabled");
    assert!(p.upstream.seen().is_empty());
    let models = p.server.get("/v1/models").await;
    models.assert_error(404, "op.not_enabled");
    assert!(p.upstream.seen().is_empty());
    let events = p.llm_events().await;
    assert_eq!(events.len(), 2, "each refusal is audited");
}

#[tokio::test]
async fn without_an_llm_section_the_routes_answer_503_with_the_fix() {
    let ws = Workspace::new();
    let loaded = ws.load(&ws.jail_yaml(ALLOW_LLM), &token_env());
    let s = Server::start(&loaded).await.with_token(AGENT_TOKEN);
    let r = send(
        s.client()
            .post(s.url("/v1/chat/completions"))
            .bearer_auth(AGENT_TOKEN)
            .json(&chat("ok")),
    )
    .await;
    r.assert_error(503, "llm.not_configured");
    assert!(r.json()["error"].as_str().unwrap().contains("base_url_env"));
    s.get("/v1/models")
        .await
        .assert_error(503, "llm.not_configured");
}

#[tokio::test]
async fn an_unauthenticated_model_call_is_refused_before_anything_is_read() {
    let p = proxy().await;
    let r = send(
        p.server
            .client()
            .post(p.server.url("/v1/chat/completions"))
            .json(&chat("ok")),
    )
    .await;
    r.assert_error(401, "auth.missing");
    assert!(p.upstream.seen().is_empty());
}

#[tokio::test]
async fn a_body_that_is_not_a_chat_request_is_refused_with_the_shape_to_send() {
    let p = proxy().await;
    p.post(json!({"messages": []}), &[])
        .await
        .assert_error(400, "llm.bad_request");
    p.post(json!({"model": "ok"}), &[])
        .await
        .assert_error(400, "llm.bad_request");
    p.post(json!([1, 2]), &[])
        .await
        .assert_error(400, "llm.bad_request");
    assert!(p.upstream.seen().is_empty());
}

#[tokio::test]
async fn a_providers_client_error_keeps_its_status_in_corrals_shape_without_the_key() {
    let p = proxy().await;
    let r = p.post(chat("bad"), &[]).await;
    r.assert_error(400, "llm.upstream");
    let v = r.json();
    assert!(
        v["error"].as_str().unwrap().contains("does not exist"),
        "{v}"
    );
    assert_eq!(v["upstream_status"], 400);
    assert_eq!(v["op"], "llm.chat");
    assert!(!r.text.contains(UPSTREAM_KEY), "{}", r.text);
}

#[tokio::test]
async fn a_providers_server_error_is_a_502_and_an_unreachable_one_is_named() {
    let p = proxy().await;
    p.post(chat("boom"), &[])
        .await
        .assert_error(502, "llm.upstream");
    // A provider on a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let ws = Workspace::new();
    let mut env = token_env();
    env.push(("CORRAL_IT_LLM_URL", &url));
    env.push(("CORRAL_IT_LLM_KEY", UPSTREAM_KEY));
    let loaded = ws.load(&ws.jail_yaml(&format!("{LLM_YAML}{ALLOW_LLM}")), &env);
    let s = Server::start(&loaded).await;
    let r = send(
        s.client()
            .post(s.url("/v1/chat/completions"))
            .bearer_auth(AGENT_TOKEN)
            .json(&chat("ok")),
    )
    .await;
    r.assert_error(502, "llm.unreachable");
    assert!(!r.text.contains(&url), "the url is not shown: {}", r.text);
}

#[tokio::test]
async fn a_stream_passes_through_and_the_usage_chunk_is_stripped_unless_asked_for() {
    let p = proxy().await;
    let mut body = chat("ok");
    body["stream"] = json!(true);
    let r = p.post(body.clone(), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let data = sse_data(&r.text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, ANSWER);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{data:?}");
    // corral asked the provider for the usage anyway (it meters tokens).
    assert_eq!(
        p.upstream.seen()[0].body["stream_options"]["include_usage"],
        true
    );
    // Asked for: the usage chunk is forwarded.
    body["stream_options"] = json!({"include_usage": true});
    let r = p.post(body, &[]).await;
    let data = sse_data(&r.text);
    let last: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(last["usage"]["completion_tokens"], 7);
}

#[tokio::test]
async fn tokens_are_audited_value_free_and_counted_in_metrics() {
    let p = proxy().await;
    assert_eq!(p.post(chat("ok"), &[]).await.status, 200);
    let mut streamed = chat("ok");
    streamed["stream"] = json!(true);
    // A non-streaming answer comes after its audit event is written.
    assert_eq!(p.llm_events().await.len(), 1);
    assert_eq!(p.post(streamed, &[]).await.status, 200);
    // A passed-through stream's event is written when it ended (just after the client read it).
    let events = p.wait_for_events(2).await;
    assert_eq!(events.len(), 2);
    for e in &events {
        let detail = e.detail.as_deref().unwrap_or_default();
        assert!(
            detail.contains("model ok: 11 prompt + 7 completion tokens"),
            "{detail}"
        );
        let all = serde_json::to_string(&e).unwrap();
        assert!(!all.contains("secret number"), "no prompt text: {all}");
        assert!(!all.contains("5100"), "no completion text: {all}");
    }
    let m = p.server.get("/metrics").await.text;
    assert!(
        m.contains("corral_llm_tokens_total{kind=\"prompt\"} 22"),
        "{m}"
    );
    assert!(
        m.contains("corral_llm_tokens_total{kind=\"completion\"} 14"),
        "{m}"
    );
    assert!(
        m.contains("corral_llm_requests_total{outcome=\"ok\"} 2"),
        "{m}"
    );
}

#[tokio::test]
async fn a_run_over_its_token_budget_is_refused_before_forwarding() {
    let p = proxy_with(
        &format!("{LLM_YAML}{ALLOW_LLM}budgets: {{tokens: 30}}\n"),
        None,
    )
    .await;
    let run = [("x-corral-run", "r-tokens")];
    // 18 tokens, then 36: the third call finds the budget used up.
    assert_eq!(p.post(chat("ok"), &run).await.status, 200);
    assert_eq!(p.post(chat("ok"), &run).await.status, 200);
    let r = p.post(chat("ok"), &run).await;
    r.assert_error(429, "budget.tokens_exhausted");
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("budgets.tokens")
    );
    assert_eq!(
        p.upstream.seen().len(),
        2,
        "the refused call was not forwarded"
    );
    // Another run has its own budget; a call with no run has none.
    assert_eq!(
        p.post(chat("ok"), &[("x-corral-run", "r-other")])
            .await
            .status,
        200
    );
    assert_eq!(p.post(chat("ok"), &[]).await.status, 200);
}

#[tokio::test]
async fn the_model_list_is_forwarded() {
    let p = proxy().await;
    let r = p.server.get("/v1/models").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"][0]["id"], "ok");
    assert_eq!(p.upstream.seen()[0].path, "/v1/models");
}

#[tokio::test]
async fn the_hook_rewrites_the_roots_replies_and_never_a_specialists() {
    let hook = Arc::new(Redact::default());
    let p = proxy_with(
        &format!("{LLM_YAML}{ALLOW_LLM}"),
        Some(hook.clone() as Arc<dyn ReplyHook>),
    )
    .await;
    // No agent header: the root's (fails safe).
    let r = p.post(chat("ok"), &[("x-corral-run", "r1")]).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "The answer is [withheld]."
    );
    // The root by name.
    let r = p.post(chat("ok"), &[("x-corral-agent", "root")]).await;
    assert!(!r.text.contains("5100"), "{}", r.text);
    // A specialist: untouched, and never shown to the hook.
    let r = p
        .post(chat("ok"), &[("x-corral-agent", "researcher")])
        .await;
    assert_eq!(r.json()["choices"][0]["message"]["content"], ANSWER);
    let seen = hook.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].0.agent, "root");
    assert_eq!(seen[0].0.principal, "agent");
    assert_eq!(seen[0].0.run.as_deref(), Some("r1"));
}

#[tokio::test]
async fn a_hooked_stream_is_held_and_sent_as_one_checked_message_with_its_tool_calls() {
    let hook = Arc::new(Redact::default());
    let p = proxy_with(
        &format!("{LLM_YAML}{ALLOW_LLM}"),
        Some(hook.clone() as Arc<dyn ReplyHook>),
    )
    .await;
    let mut body = chat("tools");
    body["stream"] = json!(true);
    let r = p.post(body.clone(), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // "5100" arrived split over two deltas ("is 51", "00."); held, it never leaves.
    assert!(
        !r.text.contains("5100") && !r.text.contains("51\""),
        "{}",
        r.text
    );
    let data = sse_data(&r.text);
    assert_eq!(data.len(), 3, "one message, one finish, [DONE]: {data:?}");
    let first: Value = serde_json::from_str(&data[0]).unwrap();
    let delta = &first["choices"][0]["delta"];
    assert_eq!(delta["role"], "assistant");
    assert_eq!(delta["content"], "The answer is [withheld].");
    assert_eq!(
        delta["tool_calls"],
        json!([{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "files_read", "arguments": "{\"path\":\"notes.txt\"}"}}])
    );
    let finish: Value = serde_json::from_str(&data[1]).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(data[2], "[DONE]");
    // The hook saw the merged tool call; the usage chunk comes only when asked for.
    assert_eq!(
        hook.seen.lock().unwrap()[0].1[0]["function"]["name"],
        "files_read"
    );
    body["stream_options"] = json!({"include_usage": true});
    let data = sse_data(&p.post(body, &[]).await.text);
    let usage: Value = serde_json::from_str(&data[2]).unwrap();
    assert_eq!(usage["usage"]["prompt_tokens"], 11);
    // A specialist's stream is passed through as it comes.
    let mut body = chat("ok");
    body["stream"] = json!(true);
    let r = p.post(body, &[("x-corral-agent", "helper")]).await;
    assert!(sse_data(&r.text).len() > 3);
}

#[tokio::test]
async fn a_hooked_reply_sends_only_its_checked_text_and_tool_calls_never_the_models_other_fields() {
    let hook = Arc::new(Redact::default());
    let p = proxy_with(
        &format!("{LLM_YAML}{ALLOW_LLM}"),
        Some(hook.clone() as Arc<dyn ReplyHook>),
    )
    .await;
    // Reasoning and an audio transcript beside the content: not checked, so never sent.
    let r = p.post(chat("extras"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("5100"), "{}", r.text);
    let m = &r.json()["choices"][0]["message"];
    assert_eq!(m["content"], "The answer is [withheld].");
    assert!(
        m.get("reasoning_content").is_none() && m.get("audio").is_none(),
        "{m}"
    );
    // A refusal with no content is checked as the text, and sent as the content.
    let r = p.post(chat("refusal"), &[]).await;
    assert!(!r.text.contains("5100"), "{}", r.text);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "I will not say [withheld]."
    );
    // A specialist's reply is not hooked: it reaches its caller as the provider sent it.
    let r = p
        .post(chat("extras"), &[("x-corral-agent", "researcher")])
        .await;
    assert_eq!(
        r.json()["choices"][0]["message"]["reasoning_content"],
        "I read the lag: 5100."
    );
}
