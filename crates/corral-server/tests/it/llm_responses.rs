//! The LLM proxy's `POST /v1/responses` (the OpenAI Responses API) against the scripted
//! provider: forwarded with the provider's key, streaming and not, its usage charged to the
//! run's token budget, errors in corral's shape, and the reply hook on the root's replies (text
//! checked, function calls kept, reasoning text never sent, a stream held).

use std::sync::Arc;

use corral_server::routes::llm::ReplyHook;
use serde_json::{Value, json};

use crate::common::AGENT_TOKEN;
use crate::llm::{ALLOW_LLM, Proxy, Redact, proxy, proxy_with};
use crate::scripted_llm::{ANSWER, LLM_YAML, UPSTREAM_KEY, sse_data};

fn ask(model: &str) -> Value {
    json!({"model": model, "input": "What is the secret number?"})
}

fn streamed(model: &str) -> Value {
    let mut b = ask(model);
    b["stream"] = json!(true);
    b
}

impl Proxy {
    async fn respond(&self, body: Value, headers: &[(&str, &str)]) -> crate::common::Reply {
        self.post_to("/v1/responses", body, headers).await
    }
}

/// The `data:` objects of a Responses stream.
fn events(text: &str) -> Vec<Value> {
    sse_data(text)
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The text a Responses stream's deltas spell.
fn delta_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

async fn hooked() -> (Proxy, Arc<Redact>) {
    let hook = Arc::new(Redact::default());
    let p = proxy_with(
        &format!("{LLM_YAML}{ALLOW_LLM}"),
        Some(hook.clone() as Arc<dyn ReplyHook>),
    )
    .await;
    (p, hook)
}

#[tokio::test]
async fn a_response_is_forwarded_with_the_providers_key_and_audited_with_its_tokens() {
    let p = proxy().await;
    let r = p.respond(ask("ok"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["output"][0]["content"][0]["text"], ANSWER);
    assert_eq!(v["usage"]["input_tokens"], 11);
    let seen = p.upstream.seen();
    assert_eq!(seen[0].path, "/v1/responses");
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    assert!(!format!("{seen:?}").contains(AGENT_TOKEN));
    let events = p.llm_events().await;
    let detail = events[0].detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("model ok: 11 prompt + 7 completion tokens"),
        "{detail}"
    );
    assert!(!serde_json::to_string(&events[0]).unwrap().contains("5100"));
}

#[tokio::test]
async fn a_response_stream_passes_through_as_the_provider_sent_it() {
    let p = proxy().await;
    let r = p.respond(streamed("tools"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert!(r.text.contains("event: response.created"), "{}", r.text);
    let ev = events(&r.text);
    assert_eq!(delta_text(&ev), ANSWER);
    let last = ev.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["usage"]["output_tokens"], 7);
    let events = p.wait_for_events(1).await;
    assert!(
        events[0]
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("11 prompt + 7 completion tokens"),
        "{:?}",
        events[0].detail
    );
}

#[tokio::test]
async fn responses_are_charged_to_the_run_and_a_call_over_the_budget_is_refused() {
    let p = proxy_with(
        &format!("{LLM_YAML}{ALLOW_LLM}budgets: {{tokens: 30}}\n"),
        None,
    )
    .await;
    let run = [("x-corral-run", "r-responses")];
    // 18 tokens (non-streaming), then 36 (streamed): the third call finds the budget used up.
    assert_eq!(p.respond(ask("ok"), &run).await.status, 200);
    let r = p.respond(streamed("ok"), &run).await;
    assert_eq!(r.status, 200, "{}", r.text);
    p.wait_for_events(2).await;
    let r = p.respond(ask("ok"), &run).await;
    r.assert_error(429, "budget.tokens_exhausted");
    assert!(r.text.contains("budgets.tokens"), "{}", r.text);
    assert_eq!(
        p.upstream.seen().len(),
        2,
        "the refused call was not forwarded"
    );
}

#[tokio::test]
async fn a_responses_body_without_input_and_a_provider_error_are_refused_in_corrals_shape() {
    let p = proxy().await;
    p.respond(json!({"model": "ok"}), &[])
        .await
        .assert_error(400, "llm.bad_request");
    p.respond(json!({"input": "hi"}), &[])
        .await
        .assert_error(400, "llm.bad_request");
    assert!(p.upstream.seen().is_empty());
    let r = p.respond(ask("bad"), &[]).await;
    r.assert_error(400, "llm.upstream");
    assert!(r.text.contains("does not exist"), "{}", r.text);
    assert!(!r.text.contains(UPSTREAM_KEY), "{}", r.text);
    p.respond(streamed("boom"), &[])
        .await
        .assert_error(502, "llm.upstream");
}

#[tokio::test]
async fn the_hook_withholds_the_value_in_a_response_and_keeps_its_function_call() {
    let (p, hook) = hooked().await;
    let r = p.respond(ask("tools"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("5100"), "{}", r.text);
    let v = r.json();
    let output = v["output"].as_array().unwrap();
    // The reasoning item stays (its opaque content is the provider's) without its text.
    assert_eq!(output[0]["type"], "reasoning");
    assert_eq!(output[0]["summary"], json!([]));
    assert_eq!(output[0]["encrypted_content"], "opaque");
    assert_eq!(output[1]["content"][0]["text"], "The answer is [withheld].");
    assert_eq!(output[2]["type"], "function_call");
    assert_eq!(output[2]["name"], "files_read");
    assert_eq!(output[2]["arguments"], "{\"path\":\"notes.txt\"}");
    assert_eq!(v["usage"]["output_tokens"], 7);
    // The hook saw the function call; a specialist's response is not rewritten.
    assert_eq!(hook.seen.lock().unwrap()[0].1[0]["name"], "files_read");
    let r = p
        .respond(ask("tools"), &[("x-corral-agent", "researcher")])
        .await;
    assert_eq!(r.json()["output"][1]["content"][0]["text"], ANSWER);
}

#[tokio::test]
async fn a_hooked_response_stream_is_held_and_sent_as_one_checked_responses_sequence() {
    let (p, _hook) = hooked().await;
    let r = p.respond(streamed("tools"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // "5100" arrived split over two deltas; held, it never leaves, nor does the reasoning.
    assert!(
        !r.text.contains("5100") && !r.text.contains("51\""),
        "{}",
        r.text
    );
    let ev = events(&r.text);
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert_eq!(delta_text(&ev), "The answer is [withheld].");
    let seqs: Vec<u64> = ev
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..ev.len() as u64).collect::<Vec<_>>());
    let call = ev
        .iter()
        .find(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(call["item"]["arguments"], "{\"path\":\"notes.txt\"}");
    let done = &ev.last().unwrap()["response"];
    assert_eq!(done["usage"]["input_tokens"], 11);
    assert_eq!(done["output"].as_array().unwrap().len(), 3);
    // A specialist's stream passes through as it came.
    let r = p
        .respond(streamed("tools"), &[("x-corral-agent", "helper")])
        .await;
    assert!(r.text.contains("5100"));
}
