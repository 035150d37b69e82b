//! The official `anthropic` Python SDK against the LLM proxy's `/v1/messages` and the scripted
//! provider (`tests/reference/anthropic_client.py`, run with the Python in
//! `CORRAL_TEST_PYTHON`; `.ci/run` makes the venv from `.ci/requirements.txt`). Under `CI=true`
//! a missing Python or SDK is a failure; elsewhere the test says why it skipped.

use std::process::Command;
use std::sync::Arc;

use corral_server::routes::llm::{AssistantReply, ReplyCtx, ReplyHook};
use serde_json::{Value, json};

use crate::common::{AGENT_TOKEN, Server, Workspace, token_env};
use crate::openai_sdk::python;
use crate::scripted_llm::{ANSWER, ANTHROPIC_YAML, ScriptedLlm};

/// Runs the SDK script against an Anthropic proxy (with `hook`, if given).
async fn sdk_against(hook: Option<Arc<dyn ReplyHook>>) -> Option<Value> {
    let python = python()?;
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let loaded = ws.load(
        &ws.jail_yaml(&format!("{ANTHROPIC_YAML}rules:\n  - allow: [llm.chat]\n")),
        &env,
    );
    let server = Server::start_hooked(&loaded, 1 << 20, hook).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/reference/anthropic_client.py"
    );
    let base = server.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(base)
            .arg(AGENT_TOKEN)
            .env("NO_PROXY", "127.0.0.1")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        out.status.success(),
        "the SDK script failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the SDK script printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_sdk_creates_streams_and_sees_provider_errors_through_the_proxy() {
    let Some(v) = sdk_against(None).await else {
        return;
    };
    assert_eq!(
        v["complete"],
        json!({"text": ANSWER, "input_tokens": 9, "output_tokens": 7})
    );
    assert_eq!(v["stream"]["text"], ANSWER);
    assert_eq!(v["stream"]["first"], "message_start");
    assert_eq!(v["stream"]["last"], "message_stop");
    assert_eq!(v["stream"]["output_tokens"], 7);
    assert_eq!(v["tools"]["types"], json!(["thinking", "text", "tool_use"]));
    assert_eq!(
        v["tools"]["calls"],
        json!([{"name": "files_read", "input": {"path": "notes.txt"}}])
    );
    assert_eq!(v["error"]["class"], "BadRequestError");
    assert_eq!(v["error"]["status"], 400);
    assert_eq!(v["error"]["code"], "llm.upstream");
}

/// Replaces `5100` in the root's text.
#[derive(Debug)]
struct Redact;

impl ReplyHook for Redact {
    fn on_root_reply(&self, _: &ReplyCtx, reply: &mut AssistantReply) {
        for t in &mut reply.text {
            *t = t.replace("5100", "[withheld]");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_sdks_stream_helper_accepts_a_held_stream() {
    let Some(v) = sdk_against(Some(Arc::new(Redact))).await else {
        return;
    };
    let withheld = "The answer is [withheld].";
    assert_eq!(v["complete"]["text"], withheld);
    assert_eq!(v["stream"]["text"], withheld);
    assert_eq!(v["stream"]["deltas"], 1, "one whole text delta");
    assert_eq!(v["stream"]["output_tokens"], 7);
    assert_eq!(v["tools"]["types"], json!(["text", "tool_use"]));
    assert_eq!(v["tools"]["text"], withheld);
    assert_eq!(
        v["tools"]["calls"],
        json!([{"name": "files_read", "input": {"path": "notes.txt"}}])
    );
    assert_eq!(v["tools"]["stop_reason"], "tool_use");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_llm_proxy_md_anthropic_example_runs_as_written() {
    let blocks = crate::openai_sdk::doc_blocks("python anthropic");
    assert_eq!(
        blocks.len(),
        1,
        "docs/llm-proxy.md's python anthropic blocks"
    );
    let Some(python) = python() else { return };
    let (server, upstream, _ws) = crate::openai_sdk::docs_proxy_of(ANTHROPIC_YAML).await;
    let script = blocks[0].clone();
    let base = server.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        crate::openai_sdk::run(
            Command::new(python)
                .args(["-c", &script])
                .env("CORRAL_URL", base)
                .env("CORRAL_TOKEN", AGENT_TOKEN)
                .env("NO_PROXY", "127.0.0.1")
                .env_remove("ANTHROPIC_API_KEY"),
        )
    })
    .await
    .unwrap();
    assert_eq!(out, format!("{ANSWER}\n{ANSWER}\n"));
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].body["stream"], true);
}
