//! The real Claude Code CLI (`@anthropic-ai/claude-code`, `claude -p`) against the LLM proxy's
//! `/v1/messages` (`llm.api: anthropic`) and the scripted provider, with no sandbox of corral's
//! around it (issue 17 adds that) and no login: the corral token goes in
//! `ANTHROPIC_AUTH_TOKEN`. A turn the model answers with text, then one where the model calls
//! Claude Code's `Bash` tool to write a file in the workdir. The binary is `CORRAL_TEST_CLAUDE`
//! (`.ci/run` installs it with npm); under `CI=true` a missing one is a failure, elsewhere the
//! test says why it skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use corral_server::routes::llm::{AssistantReply, ReplyCtx, ReplyHook};
use serde_json::Value;

use crate::common::{AGENT_TOKEN, Server, Workspace, in_ci, token_env};
use crate::scripted_llm::{ANSWER, ANTHROPIC_YAML, SHELL_COMMAND, SHELL_DONE, ScriptedLlm};

/// The claude binary, or `None` (after saying why) outside CI.
fn claude() -> Option<PathBuf> {
    match std::env::var_os("CORRAL_TEST_CLAUDE") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            assert!(
                p.exists(),
                "CORRAL_TEST_CLAUDE names {}, which does not exist",
                p.display()
            );
            Some(p)
        }
        _ if in_ci() => panic!(
            "CORRAL_TEST_CLAUDE is not set under CI=true: .ci/run installs @anthropic-ai/claude-code with npm and sets it"
        ),
        _ => {
            eprintln!(
                "skipped: CORRAL_TEST_CLAUDE is not set (`npm install --prefix target/ci-npm @anthropic-ai/claude-code@2.1.197`, then CORRAL_TEST_CLAUDE=$PWD/target/ci-npm/node_modules/.bin/claude)"
            );
            None
        }
    }
}

async fn proxy() -> (Server, ScriptedLlm, Workspace) {
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let loaded = ws.load(
        &ws.jail_yaml(&format!("{ANTHROPIC_YAML}rules:\n  - allow: [llm.chat]\n")),
        &env,
    );
    (Server::start(&loaded).await, upstream, ws)
}

/// Runs `claude -p --output-format stream-json` with `model` against the proxy at `base` in
/// `workdir`, allowed its `Bash` tool; returns its JSON events and its stderr.
async fn claude_p(bin: PathBuf, base: String, workdir: &Path, model: &str) -> (Vec<Value>, String) {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("SHELL", "/bin/bash")
        .env("ANTHROPIC_BASE_URL", &base)
        .env("ANTHROPIC_AUTH_TOKEN", AGENT_TOKEN)
        .env("ANTHROPIC_CUSTOM_HEADERS", "X-Corral-Run: claude-run")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("NO_PROXY", "127.0.0.1")
        // The prompt right after `-p`: `--allowedTools` takes every word after it.
        .args(["-p", "Write corral into corral-was-here.txt."])
        .args(["--output-format", "stream-json", "--verbose"])
        .args(["--model", model, "--allowedTools", "Bash"])
        .current_dir(workdir)
        .stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    drop(home);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "claude -p failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let events = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    (events, stderr)
}

fn result(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["type"] == "result")
        .unwrap_or_else(|| panic!("no result event: {events:#?}"))
}

/// docs/llm-proxy.md's Claude Code example (its `sh claude` block), run with `claude` on the
/// PATH against a proxy (hooked when `hook` is given); its JSON events.
async fn doc_example(
    hook: Option<Arc<dyn ReplyHook>>,
) -> Option<(Vec<Value>, ScriptedLlm, Server)> {
    let bin = claude()?;
    let text = include_str!("../../../../docs/llm-proxy.md");
    let start = text
        .find("```sh claude\n")
        .expect("docs/llm-proxy.md has a ```sh claude block");
    let body = &text[start + "```sh claude\n".len()..];
    let script = body[..body.find("```").unwrap()].to_owned();
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let loaded = ws.load(
        &ws.jail_yaml(&format!("{ANTHROPIC_YAML}rules:\n  - allow: [llm.chat]\n")),
        &env,
    );
    let server = Server::start_hooked(&loaded, 1 << 20, hook).await;
    let home = tempfile::tempdir().unwrap();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-euc", &script])
        .env_clear()
        .env("PATH", path)
        .env("HOME", home.path())
        .env("CORRAL_URL", &server.base)
        .env("CORRAL_TOKEN", AGENT_TOKEN)
        .env("NO_PROXY", "127.0.0.1")
        .current_dir(&ws.root)
        .stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the example failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Some((events, upstream, server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_claude_example_gets_its_answer_through_the_proxy_without_a_login() {
    let Some((events, upstream, server)) = doc_example(None).await else {
        return;
    };
    let r = result(&events);
    assert_eq!(r["result"], ANSWER, "{events:#?}");
    assert_eq!(r["is_error"], false);
    let seen = upstream.seen();
    assert!(seen.iter().all(|s| s.path == "/v1/messages"), "{seen:?}");
    assert!(!format!("{seen:?}").contains(AGENT_TOKEN));
    let audited = server.store.audit_recent(None, 100).await.unwrap();
    let llm: Vec<_> = audited.iter().filter(|e| e.op == "llm.chat").collect();
    assert!(!llm.is_empty());
    assert!(
        llm.iter().all(|e| e.run_id.as_deref() == Some("task-42")),
        "{llm:?}"
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
async fn claude_code_accepts_a_held_and_checked_stream() {
    let Some((events, _upstream, _server)) = doc_example(Some(Arc::new(Redact))).await else {
        return;
    };
    assert_eq!(
        result(&events)["result"],
        "The answer is [withheld].",
        "{events:#?}"
    );
    assert!(!format!("{events:?}").contains("5100"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_p_runs_the_bash_call_the_model_makes_through_the_proxy() {
    let Some(bin) = claude() else { return };
    let (server, upstream, ws) = proxy().await;
    let (events, stderr) = claude_p(bin, server.base.clone(), &ws.root, "shell").await;
    let written = std::fs::read_to_string(ws.root.join("corral-was-here.txt"))
        .unwrap_or_else(|e| panic!("no file ({e}):\n{events:#?}\n{stderr}"));
    assert_eq!(written, "corral\n");
    // Its stream shows the tool use and the tool's result, then the closing text.
    let uses: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "assistant")
        .flat_map(|e| e["message"]["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_use")
        .collect();
    assert_eq!(uses.len(), 1, "{events:#?}");
    assert_eq!(uses[0]["input"]["command"], SHELL_COMMAND);
    assert_eq!(result(&events)["result"], SHELL_DONE);
    let back = upstream.seen().last().unwrap().body["messages"].to_string();
    assert!(back.contains("toolu_shell_1"), "{back}");
}
