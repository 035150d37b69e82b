//! The LLM proxy's `POST /v1/messages` (the Anthropic Messages API, `llm.api: anthropic`)
//! against the scripted provider: the key sent as `x-api-key` with `anthropic-version`, never
//! the caller's token; streaming and not; usage (input, cache and output tokens) charged to the
//! run's budget; the wrong API's route refused; the reply hook on the root's text blocks
//! (tool_use kept, thinking never sent, a stream held).

use std::sync::Arc;

use corral_server::routes::llm::ReplyHook;
use serde_json::{Value, json};

use crate::common::AGENT_TOKEN;
use crate::llm::{ALLOW_LLM, Proxy, Redact, proxy, proxy_with};
use crate::scripted_llm::{ANSWER, ANTHROPIC_YAML, UPSTREAM_KEY, sse_data};

fn ask(model: &str) -> Value {
    json!({"model": model, "max_tokens": 100,
        "messages": [{"role": "user", "content": "What is the secret number?"}]})
}

fn streamed(model: &str) -> Value {
    let mut b = ask(model);
    b["stream"] = json!(true);
    b
}

async fn anthropic(extra: &str, hook: Option<Arc<dyn ReplyHook>>) -> Proxy {
    proxy_with(&format!("{ANTHROPIC_YAML}{ALLOW_LLM}{extra}"), hook).await
}

impl Proxy {
    async fn message(&self, body: Value, headers: &[(&str, &str)]) -> crate::common::Reply {
        self.post_to("/v1/messages", body, headers).await
    }
}

/// The `data:` objects of a Messages stream.
fn events(text: &str) -> Vec<Value> {
    sse_data(text)
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn delta_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "content_block_delta" && e["delta"]["type"] == "text_delta")
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_message_is_forwarded_with_the_key_as_x_api_key_and_its_tokens_audited() {
    let p = anthropic("", None).await;
    let r = p.message(ask("ok"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["content"][0]["text"], ANSWER);
    let seen = p.upstream.seen();
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].x_api_key.as_deref(), Some(UPSTREAM_KEY));
    assert_eq!(seen[0].authorization, None);
    assert_eq!(seen[0].anthropic_version.as_deref(), Some("2023-06-01"));
    assert!(!format!("{seen:?}").contains(AGENT_TOKEN));
    // The client's own version header is passed on.
    let r = p
        .message(ask("ok"), &[("anthropic-version", "2024-01-01")])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        p.upstream.seen()[1].anthropic_version.as_deref(),
        Some("2024-01-01")
    );
    // 9 input + 2 read from the cache + 7 output.
    let events = p.llm_events().await;
    let detail = events[0].detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("model ok: 11 prompt + 7 completion tokens"),
        "{detail}"
    );
}

#[tokio::test]
async fn messages_stream_through_and_are_charged_to_the_run_until_its_budget_is_used() {
    let p = anthropic("budgets: {tokens: 30}\n", None).await;
    let run = [("x-corral-run", "r-messages")];
    assert_eq!(p.message(ask("ok"), &run).await.status, 200);
    let r = p.message(streamed("ok"), &run).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("event: message_start"), "{}", r.text);
    let ev = events(&r.text);
    assert_eq!(delta_text(&ev), ANSWER);
    assert_eq!(ev.last().unwrap()["type"], "message_stop");
    let audited = p.wait_for_events(2).await;
    assert!(
        audited[0]
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("11 prompt + 7 completion tokens"),
        "{:?}",
        audited[0].detail
    );
    let r = p.message(ask("ok"), &run).await;
    r.assert_error(429, "budget.tokens_exhausted");
    assert_eq!(
        p.upstream.seen().len(),
        2,
        "the refused call was not forwarded"
    );
}

#[tokio::test]
async fn a_route_of_the_other_api_is_refused_with_the_route_to_use() {
    let p = anthropic("", None).await;
    let r = p
        .post_to(
            "/v1/chat/completions",
            json!({"model": "ok", "messages": []}),
            &[],
        )
        .await;
    r.assert_error(404, "llm.wrong_api");
    assert!(r.text.contains("/v1/messages"), "{}", r.text);
    let openai = proxy().await;
    let r = openai.message(ask("ok"), &[]).await;
    r.assert_error(404, "llm.wrong_api");
    assert!(r.text.contains("api: anthropic"), "{}", r.text);
    assert!(p.upstream.seen().is_empty() && openai.upstream.seen().is_empty());
    // The model list is Anthropic's too, asked with its key header.
    let r = p.server.get("/v1/models").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let seen = p.upstream.seen();
    assert_eq!(seen[0].path, "/v1/models");
    assert_eq!(seen[0].x_api_key.as_deref(), Some(UPSTREAM_KEY));
    assert_eq!(seen[0].authorization, None);
}

#[tokio::test]
async fn an_anthropic_error_keeps_its_status_and_message_without_the_key() {
    let p = anthropic("", None).await;
    let r = p.message(ask("bad"), &[]).await;
    r.assert_error(400, "llm.upstream");
    assert!(r.text.contains("does not exist"), "{}", r.text);
    assert!(!r.text.contains(UPSTREAM_KEY), "{}", r.text);
    p.message(streamed("boom"), &[])
        .await
        .assert_error(502, "llm.upstream");
}

#[tokio::test]
async fn the_hook_withholds_the_value_in_a_message_keeps_its_tool_use_and_drops_thinking() {
    let hook = Arc::new(Redact::default());
    let p = anthropic("", Some(hook.clone() as Arc<dyn ReplyHook>)).await;
    let r = p.message(ask("tools"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("5100"), "{}", r.text);
    let v = r.json();
    assert_eq!(
        v["content"],
        json!([
            {"type": "text", "text": "The answer is [withheld]."},
            {"type": "tool_use", "id": "toolu_1", "name": "files_read", "input": {"path": "notes.txt"}},
        ])
    );
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(hook.seen.lock().unwrap()[0].1[0]["name"], "files_read");
    // A specialist's message is not rewritten.
    let r = p
        .message(ask("tools"), &[("x-corral-agent", "researcher")])
        .await;
    assert!(r.text.contains("5100"));
}

#[tokio::test]
async fn a_hooked_message_stream_is_held_and_sent_as_one_checked_messages_sequence() {
    let hook = Arc::new(Redact::default());
    let p = anthropic("", Some(hook as Arc<dyn ReplyHook>)).await;
    let r = p.message(streamed("tools"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        !r.text.contains("5100") && !r.text.contains("51\""),
        "{}",
        r.text
    );
    let ev = events(&r.text);
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(delta_text(&ev), "The answer is [withheld].");
    assert_eq!(ev[4]["content_block"]["name"], "files_read");
    let input: Value =
        serde_json::from_str(ev[5]["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"path": "notes.txt"}));
    assert_eq!(ev[7]["delta"]["stop_reason"], "tool_use");
    assert_eq!(ev[7]["usage"]["output_tokens"], 7);
    assert_eq!(ev[0]["message"]["usage"]["input_tokens"], 9);
}
