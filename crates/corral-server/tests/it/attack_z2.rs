//! Attacks on learning mode's answer guard over the Responses API (helper Z, second round):
//! a provider's reply carries a target's value (`5100`) outside the message text the guard
//! checks. Each test names the property that should hold; they fail on the code they were
//! written against.

use std::time::Duration;

use axum::Router;
use axum::extract::Json;
use axum::routing::post;
use serde_json::{Value, json};

use crate::common::{AGENT_TOKEN, Reply, Server, Workspace, send, token_env};
use crate::learning::{learning_yaml, manifest, setup};
use crate::scripted_llm::{LLM_YAML, UPSTREAM_KEY, UPSTREAM_KEY_ENV, UPSTREAM_URL_ENV};

/// A provider's Responses answer by `model`: `hosted` runs its code interpreter (whose logs
/// print the value) and then says a clean sentence; `fields` puts the value in the fields a
/// hooked answer keeps whole (a message's `phase`, `incomplete_details`, `error`).
async fn responses(Json(body): Json<Value>) -> Json<Value> {
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let clean = json!({"id": "msg_1", "type": "message", "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Let me work it out.", "annotations": []}]});
    let mut message = clean;
    let mut output = Vec::new();
    let mut extra = json!({});
    if model == "head" || model == "tail" {
        let text = if model == "head" {
            "It starts with 51"
        } else {
            "00."
        };
        message["content"][0]["text"] = json!(text);
    } else if model == "hosted" {
        output.push(
            json!({"id": "ci_1", "type": "code_interpreter_call", "status": "completed",
            "container_id": "cntr_1", "code": "print(lag())",
            "outputs": [{"type": "logs", "logs": "The lag is 5100."}]}),
        );
        output.push(
            json!({"id": "ws_1", "type": "web_search_call", "status": "completed",
            "action": {"type": "search", "query": "lag", "sources": [
                {"type": "url", "url": "https://example.com/the-lag-is-5100"}]}}),
        );
    } else {
        message["phase"] = json!("The lag is 5100.");
        extra = json!({"incomplete_details": {"reason": "The lag is 5100."},
            "error": {"code": "server_error", "message": "The lag is 5100."}});
    }
    output.push(message);
    let mut r = json!({"id": "resp_1", "object": "response", "created_at": 1700000000,
        "status": "completed", "model": model, "output": output,
        "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}});
    if let (Some(o), Some(e)) = (r.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    Json(r)
}

async fn learning_proxy() -> (Server, Workspace, tokio::task::JoinHandle<()>) {
    let app = Router::new().route("/v1/responses", post(responses));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let ws = Workspace::new();
    let mut env = vec![
        (UPSTREAM_URL_ENV, url.as_str()),
        (UPSTREAM_KEY_ENV, UPSTREAM_KEY),
    ];
    env.extend_from_slice(&token_env());
    let yaml = format!(
        "{}{LLM_YAML}rules:\n  - allow: [llm.chat]\n",
        learning_yaml(&ws)
    );
    let loaded = ws.load(&yaml, &env);
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    (s, ws, task)
}

async fn ask(s: &Server, model: &str, stream: bool) -> Reply {
    let body = json!({"model": model, "input": "What is the lag?", "stream": stream});
    send(
        s.client()
            .post(s.url("/v1/responses"))
            .bearer_auth(AGENT_TOKEN)
            .json(&body),
    )
    .await
}

#[tokio::test]
async fn a_hosted_tools_output_in_a_responses_reply_never_carries_the_value_to_the_learner() {
    let (s, _ws, task) = learning_proxy().await;
    let r = ask(&s, "hosted", false).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("5100"), "{}", r.text);
    task.abort();
}

#[tokio::test]
async fn the_fields_a_hooked_responses_reply_keeps_never_carry_the_value_to_the_learner() {
    let (s, _ws, task) = learning_proxy().await;
    let r = ask(&s, "fields", false).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("5100"), "{}", r.text);
    task.abort();
}

#[tokio::test]
async fn a_value_split_over_two_responses_chained_by_previous_response_id_is_withheld() {
    let (s, _ws, task) = learning_proxy().await;
    // The provider keeps the conversation (`previous_response_id`): the client sends no
    // history, so the guard could see each half alone. Such a request is refused, with the fix.
    let first = ask(&s, "head", false).await;
    assert_eq!(first.status, 200, "{}", first.text);
    for key in ["previous_response_id", "conversation"] {
        let body = json!({"model": "tail", "input": "and the rest?", key: "resp_1"});
        let second = send(
            s.client()
                .post(s.url("/v1/responses"))
                .bearer_auth(AGENT_TOKEN)
                .json(&body),
        )
        .await;
        assert_eq!(second.status, 400, "{}", second.text);
        assert_eq!(
            second.code(),
            "learning.provider_conversation",
            "{}",
            second.text
        );
        assert!(second.text.contains("`input`"), "{}", second.text);
    }
    task.abort();
}
