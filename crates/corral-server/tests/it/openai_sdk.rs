//! The official `openai` Python SDK against the LLM proxy and the scripted provider
//! (`tests/reference/openai_client.py`, run with the Python in `CORRAL_TEST_PYTHON`; `.ci/run`
//! makes the venv from `.ci/requirements.txt`). Under `CI=true` a missing Python or SDK is a
//! failure; elsewhere the test says why it skipped.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use corral_server::routes::llm::{AssistantReply, ReplyCtx, ReplyHook};
use serde_json::{Value, json};

use crate::common::{AGENT_TOKEN, Server, Workspace, in_ci, token_env};
use crate::scripted_llm::{ANSWER, LLM_YAML, ScriptedLlm};

/// The Python with the `openai` SDK, or `None` (after saying why) outside CI.
pub(crate) fn python() -> Option<PathBuf> {
    match std::env::var_os("CORRAL_TEST_PYTHON") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ if in_ci() => panic!(
            "CORRAL_TEST_PYTHON is not set under CI=true: .ci/run makes the venv (.ci/requirements.txt) and sets it"
        ),
        _ => {
            eprintln!(
                "skipped: CORRAL_TEST_PYTHON is not set (a Python with the openai SDK: `python3 -m venv target/ci-venv && target/ci-venv/bin/pip install -r .ci/requirements.txt`)"
            );
            None
        }
    }
}

/// Runs the SDK script against a proxy (with `hook`, if given) and returns what it printed.
async fn sdk_against(python: PathBuf, hook: Option<Arc<dyn ReplyHook>>) -> Value {
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let loaded = ws.load(
        &ws.jail_yaml(&format!("{LLM_YAML}rules:\n  - allow: [llm.chat]\n")),
        &env,
    );
    let server = Server::start_hooked(&loaded, 1 << 20, hook).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/reference/openai_client.py"
    );
    let base = server.url("/v1");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(base)
            .arg(AGENT_TOKEN)
            .env("NO_PROXY", "127.0.0.1")
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
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the SDK script printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_completes_streams_lists_models_and_sees_provider_errors() {
    let Some(python) = python() else { return };
    let v = sdk_against(python, None).await;
    assert_eq!(
        v["complete"],
        json!({"content": ANSWER, "prompt_tokens": 11, "completion_tokens": 7})
    );
    assert_eq!(v["stream"]["content"], ANSWER);
    assert_eq!(v["stream_usage"], 7);
    assert_eq!(v["tools"]["calls"][0]["name"], "files_read");
    assert_eq!(v["tools"]["finish"], "tool_calls");
    assert_eq!(v["models"], json!(["ok", "tools"]));
    assert_eq!(v["error"]["class"], "BadRequestError");
    assert_eq!(v["error"]["status"], 400);
    assert_eq!(v["error"]["code"], "llm.upstream");
    assert_eq!(v["error"]["request_id"].as_str().map(str::len), Some(36));
    assert_eq!(
        v["responses_complete"],
        json!({"text": ANSWER, "input_tokens": 11, "output_tokens": 7})
    );
    assert_eq!(v["responses_stream"]["text"], ANSWER);
    assert_eq!(v["responses_stream"]["first"], "response.created");
    assert_eq!(v["responses_stream"]["last"], "response.completed");
    assert_eq!(v["responses_stream"]["deltas"], 2);
    assert_eq!(v["responses_stream"]["output_tokens"], 7);
    assert_eq!(v["responses_tools"]["text"], ANSWER);
    assert_eq!(
        v["responses_tools"]["types"],
        json!(["reasoning", "message", "function_call"])
    );
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
async fn the_openai_sdks_streaming_client_accepts_a_held_stream() {
    let Some(python) = python() else { return };
    let v = sdk_against(python, Some(Arc::new(Redact))).await;
    let withheld = "The answer is [withheld].";
    assert_eq!(v["complete"]["content"], withheld);
    // One message chunk and one finish chunk, nothing streamed before the check.
    assert_eq!(v["stream"], json!({"content": withheld, "chunks": 2}));
    assert_eq!(v["stream_usage"], 7);
    assert_eq!(v["tools"]["content"], withheld);
    assert_eq!(
        v["tools"]["calls"],
        json!([{"name": "files_read", "arguments": "{\"path\":\"notes.txt\"}"}])
    );
    assert_eq!(v["tools"]["finish"], "tool_calls");
    // The Responses API: the same check, one whole text delta, the function call kept, and a
    // held sequence the SDK's accumulating `responses.stream` helper accepts.
    assert_eq!(v["responses_complete"]["text"], withheld);
    assert_eq!(v["responses_stream"]["text"], withheld);
    assert_eq!(v["responses_stream"]["deltas"], 1);
    assert_eq!(v["responses_stream"]["output_tokens"], 7);
    assert_eq!(v["responses_tools"]["text"], withheld);
    assert_eq!(
        v["responses_tools"]["calls"],
        json!([{"name": "files_read", "arguments": "{\"path\":\"notes.txt\"}"}])
    );
}

/// The fenced blocks of docs/llm-proxy.md with the given info string.
pub(crate) fn doc_blocks(info: &str) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/llm-proxy.md");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        match &mut cur {
            None if line.trim_start() == format!("```{info}") => cur = Some(String::new()),
            None => {}
            Some(body) if line.trim_start() == "```" => {
                out.push(std::mem::take(body));
                cur = None;
            }
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

/// A proxy over the scripted provider as docs/llm-proxy.md's examples expect it: `$CORRAL_URL`
/// and a token allowed `llm.chat` in `$CORRAL_TOKEN`.
async fn docs_proxy() -> (Server, ScriptedLlm, Workspace) {
    docs_proxy_of(LLM_YAML).await
}

/// As [`docs_proxy`], with the `llm:` section `llm`.
pub(crate) async fn docs_proxy_of(llm: &str) -> (Server, ScriptedLlm, Workspace) {
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let loaded = ws.load(
        &ws.jail_yaml(&format!("{llm}rules:\n  - allow: [llm.chat]\n")),
        &env,
    );
    (Server::start(&loaded).await, upstream, ws)
}

pub(crate) fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "the example failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_llm_proxy_md_shell_example_runs_as_written() {
    let blocks = doc_blocks("sh");
    assert_eq!(blocks.len(), 1, "docs/llm-proxy.md's sh blocks: {blocks:?}");
    let (server, upstream, _ws) = docs_proxy().await;
    let script = blocks[0].clone();
    let base = server.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(Command::new("bash")
            .args(["-euc", &script])
            .env("CORRAL_URL", base)
            .env("CORRAL_TOKEN", AGENT_TOKEN)
            .env("NO_PROXY", "127.0.0.1"))
    })
    .await
    .unwrap();
    assert!(out.contains(ANSWER), "{out}");
    assert!(out.contains("\"id\":\"ok\""), "{out}");
    assert!(out.contains("\"object\":\"response\""), "{out}");
    assert_eq!(upstream.seen().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_llm_proxy_md_python_example_runs_as_written() {
    let blocks = doc_blocks("python");
    assert_eq!(blocks.len(), 1, "docs/llm-proxy.md's python blocks");
    let Some(python) = python() else { return };
    let (server, upstream, _ws) = docs_proxy().await;
    let script = blocks[0].clone();
    let base = server.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(Command::new(python)
            .args(["-c", &script])
            .env("CORRAL_URL", base)
            .env("CORRAL_TOKEN", AGENT_TOKEN)
            .env("NO_PROXY", "127.0.0.1"))
    })
    .await
    .unwrap();
    assert_eq!(out, format!("{ANSWER}\n{ANSWER}\n"));
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].body["stream"], true);
}
