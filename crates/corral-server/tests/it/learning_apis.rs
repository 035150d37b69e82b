//! Learning mode's answer guard (the real reply hook) on the LLM proxy's other APIs, against
//! the scripted provider: a Responses reply and an Anthropic message that state a target's
//! value (`5100`) reach the learner without it, streamed or not, with their function call or
//! tool use kept; and the learner's level line goes where each API keeps its system prompt
//! (`instructions`, Anthropic's `system`), never as a message the API would refuse.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{AGENT_TOKEN, Reply, Server, Workspace, send, token_env};
use crate::learning::{learning_yaml, manifest, setup};
use crate::scripted_llm::{ANTHROPIC_YAML, LLM_YAML, ScriptedLlm, sse_data};

async fn learning_proxy(llm: &str) -> (Server, ScriptedLlm, Workspace) {
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let yaml = format!("{}{llm}rules:\n  - allow: [llm.chat]\n", learning_yaml(&ws));
    let loaded = ws.load(&yaml, &env);
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    (s, upstream, ws)
}

async fn post(s: &Server, path: &str, body: Value) -> Reply {
    send(
        s.client()
            .post(s.url(path))
            .bearer_auth(AGENT_TOKEN)
            .json(&body),
    )
    .await
}

fn level_0() -> &'static str {
    corral_learn::levels::level_line(corral_learn::levels::Level::ZERO)
}

#[tokio::test]
async fn the_guard_withholds_the_value_in_a_responses_reply_and_keeps_its_function_call() {
    let (s, upstream, _ws) = learning_proxy(LLM_YAML).await;
    let ask = json!({"model": "tools", "input": "What is the lag?", "instructions": "You help."});
    let r = post(&s, "/v1/responses", ask.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("5100"), "{}", r.text);
    let output = r.json()["output"].clone();
    let call = output
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap()
        .clone();
    assert_eq!(call["name"], "files_read");
    let mut streamed = ask;
    streamed["stream"] = json!(true);
    let r = post(&s, "/v1/responses", streamed).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        !r.text.contains("5100") && !r.text.contains("51\""),
        "{}",
        r.text
    );
    assert!(sse_data(&r.text).iter().any(|d| d.contains("files_read")));
    // The level line went to `instructions`, after the client's own.
    assert_eq!(
        upstream.seen()[0].body["instructions"],
        json!(format!("You help.\n\n{}", level_0()))
    );
}

#[tokio::test]
async fn the_guard_withholds_the_value_in_an_anthropic_message_and_keeps_its_tool_use() {
    let (s, upstream, _ws) = learning_proxy(ANTHROPIC_YAML).await;
    let ask = json!({"model": "tools", "max_tokens": 100, "system": [{"type": "text", "text": "You help."}],
        "messages": [{"role": "user", "content": "What is the lag?"}]});
    let r = post(&s, "/v1/messages", ask.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("5100"), "{}", r.text);
    let content = r.json()["content"].clone();
    assert!(
        content
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["type"] == "tool_use" && b["name"] == "files_read"),
        "{content}"
    );
    let mut streamed = ask;
    streamed["stream"] = json!(true);
    let r = post(&s, "/v1/messages", streamed).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        !r.text.contains("5100") && !r.text.contains("51\""),
        "{}",
        r.text
    );
    // The level line is a text block of `system`; the messages hold no `system` role.
    let body = &upstream.seen()[0].body;
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You help."}, {"type": "text", "text": level_0()}])
    );
    assert!(
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["role"] != "system")
    );
}

/// The reply's text after the guard, as the API returns it.
fn said(r: &Reply, path: &str) -> String {
    let v = r.json();
    let parts = if path == "/v1/responses" {
        v["output"][0]["content"].clone()
    } else {
        v["content"].clone()
    };
    parts
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_value_completed_across_two_replies_is_withheld_on_the_responses_and_anthropic_apis() {
    for (llm, path) in [
        (LLM_YAML, "/v1/responses"),
        (ANTHROPIC_YAML, "/v1/messages"),
    ] {
        let (s, _upstream, _ws) = learning_proxy(llm).await;
        // What the learner saw before: an assistant reply that ended in the value's start.
        let ask = |before: &str| {
            if path == "/v1/responses" {
                json!({"model": "tail", "input": [
                    {"role": "user", "content": "What is the lag?"},
                    {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": before}]},
                    {"role": "user", "content": "Go on."}]})
            } else {
                json!({"model": "tail", "max_tokens": 100, "messages": [
                    {"role": "user", "content": "What is the lag?"},
                    {"role": "assistant", "content": [{"type": "text", "text": before}]},
                    {"role": "user", "content": "Go on."}]})
            }
        };
        let joined = post(&s, path, ask("The answer is 51")).await;
        assert_eq!(joined.status, 200, "{}", joined.text);
        let text = said(&joined, path);
        assert!(!text.is_empty() && text != "00.", "{path}: {text}");
        // A history the reply does not complete leaves it as the model wrote it.
        let apart = post(&s, path, ask("The answer is 7")).await;
        assert_eq!(said(&apart, path), "00.", "{path}: {}", apart.text);
    }
}

#[tokio::test]
async fn the_coachs_prompt_gets_the_level_line_and_its_reply_is_not_rewritten_a_specialists_gets_neither()
 {
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let mut env = upstream.env(&token_env());
    env.push(("CORRAL_IT_HOST_TOKEN", "host-token-0123456789abcdef"));
    let yaml = format!("{}{LLM_YAML}rules:\n  - allow: [llm.chat]\n", learning_yaml(&ws)).replace(
        "token_env: CORRAL_IT_ADMIN_TOKEN}\n",
        "token_env: CORRAL_IT_ADMIN_TOKEN}\n    - {id: host, roles: [operator], kind: service, token_env: CORRAL_IT_HOST_TOKEN}\n",
    );
    let loaded = ws.load(&yaml, &env);
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    let ask = json!({"model": "ok", "messages": [
        {"role": "system", "content": "You coach."},
        {"role": "user", "content": "A hint, please."}]});
    for (agent, coached) in [("lab_coach", true), ("researcher", false)] {
        let r = send(
            s.client()
                .post(s.url("/v1/chat/completions"))
                .bearer_auth("host-token-0123456789abcdef")
                .header("x-corral-agent", agent)
                .json(&ask),
        )
        .await;
        assert_eq!(r.status, 200, "{agent}: {}", r.text);
        // Neither is the learner's text: both reach the root as the model wrote them.
        assert!(r.text.contains("5100"), "{agent}: {}", r.text);
        let seen = upstream.seen();
        let system = seen.last().unwrap().body["messages"][0]["content"].clone();
        assert_eq!(
            system.as_str().unwrap().contains(level_0()),
            coached,
            "{agent}: {system}"
        );
    }
}
