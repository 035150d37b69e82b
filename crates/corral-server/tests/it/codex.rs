//! The real codex CLI (`@openai/codex`, `codex exec`) against the LLM proxy's Responses route
//! and the scripted provider, with no sandbox of corral's around it (issue 17 adds that): a
//! turn the model answers with a message, then a turn where the model calls codex's shell tool
//! (`exec_command`) to write a file in the workdir and codex runs it (its own
//! `--sandbox danger-full-access`). The binary is `CORRAL_TEST_CODEX` (`.ci/run` installs it
//! with npm); under `CI=true` a missing one is a failure, elsewhere the test says why it
//! skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::sync::Arc;

use corral_server::routes::llm::{AssistantReply, ReplyCtx, ReplyHook};
use serde_json::Value;

use crate::common::{AGENT_TOKEN, Server, Workspace, in_ci, token_env};
use crate::scripted_llm::{ANSWER, LLM_YAML, SHELL_COMMAND, SHELL_DONE, ScriptedLlm};

/// The codex binary, or `None` (after saying why) outside CI.
fn codex() -> Option<PathBuf> {
    match std::env::var_os("CORRAL_TEST_CODEX") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            assert!(
                p.exists(),
                "CORRAL_TEST_CODEX names {}, which does not exist",
                p.display()
            );
            Some(p)
        }
        _ if in_ci() => panic!(
            "CORRAL_TEST_CODEX is not set under CI=true: .ci/run installs @openai/codex with npm and sets it"
        ),
        _ => {
            eprintln!(
                "skipped: CORRAL_TEST_CODEX is not set (`npm install --prefix target/ci-npm @openai/codex@0.171.0`, then CORRAL_TEST_CODEX=$PWD/target/ci-npm/node_modules/.bin/codex)"
            );
            None
        }
    }
}

/// A proxy over the scripted provider that lets the agent's token ask the model.
async fn proxy() -> (Server, ScriptedLlm, Workspace) {
    proxy_hooked(None).await
}

/// As [`proxy`], with a reply hook when given.
async fn proxy_hooked(hook: Option<Arc<dyn ReplyHook>>) -> (Server, ScriptedLlm, Workspace) {
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let loaded = ws.load(
        &ws.jail_yaml(&format!("{LLM_YAML}rules:\n  - allow: [llm.chat]\n")),
        &env,
    );
    (
        Server::start_hooked(&loaded, 1 << 20, hook).await,
        upstream,
        ws,
    )
}

/// Runs `codex exec --json` with `model` against the proxy at `base` in `workdir`; returns its
/// JSON events (stdout) and what it said on stderr.
async fn codex_exec(
    bin: PathBuf,
    base: String,
    workdir: &Path,
    model: &str,
) -> (Vec<Value>, String) {
    let home = tempfile::tempdir().unwrap();
    let provider = format!(
        "model_providers.corral={{name=\"corral\", base_url=\"{base}/v1\", env_key=\"CORRAL_TOKEN\", wire_api=\"responses\", http_headers={{\"X-Corral-Run\"=\"codex-run\", \"X-Corral-Agent\"=\"root\"}}}}"
    );
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CODEX_HOME", home.path())
        .env("SHELL", "/bin/bash")
        .env("CORRAL_TOKEN", AGENT_TOKEN)
        .env("NO_PROXY", "127.0.0.1")
        .args(["exec", "--json", "--skip-git-repo-check"])
        .args(["--sandbox", "danger-full-access", "-m", model])
        .arg("-C")
        .arg(workdir)
        .args(["-c", &provider, "-c", "model_provider=\"corral\""])
        .args(["-c", "analytics.enabled=false"])
        .arg("Write corral into corral-was-here.txt.")
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
        "codex exec failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let events = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    (events, stderr)
}

/// The completed items of a type.
fn items<'e>(events: &'e [Value], kind: &str) -> Vec<&'e Value> {
    events
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == kind)
        .map(|e| &e["item"])
        .collect()
}

/// docs/llm-proxy.md's codex example (its `sh codex` block).
fn doc_example() -> String {
    let text = include_str!("../../../../docs/llm-proxy.md");
    let start = text
        .find("```sh codex\n")
        .expect("docs/llm-proxy.md has a ```sh codex block");
    let body = &text[start + "```sh codex\n".len()..];
    body[..body.find("```").unwrap()].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_codex_example_gets_its_answer_through_the_proxy_and_the_run_is_charged() {
    let Some(bin) = codex() else { return };
    let (server, upstream, _ws) = proxy().await;
    let home = tempfile::tempdir().unwrap();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-euc", &doc_example()])
        .env_clear()
        .env("PATH", path)
        .env("HOME", home.path())
        .env("TMPDIR", home.path())
        .env("CORRAL_URL", &server.base)
        .env("CORRAL_TOKEN", AGENT_TOKEN)
        .env("NO_PROXY", "127.0.0.1")
        .current_dir(home.path())
        .stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the example failed:\n{stdout}\n{stderr}"
    );
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let said: Vec<&str> = items(&events, "agent_message")
        .iter()
        .filter_map(|i| i["text"].as_str())
        .collect();
    assert_eq!(said, [ANSWER], "{events:?}\n{stderr}");
    let usage = &events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap()["usage"];
    assert_eq!(
        (
            usage["input_tokens"].as_u64(),
            usage["output_tokens"].as_u64()
        ),
        (Some(11), Some(7))
    );
    // Codex streamed one Responses request (it asks for no model list), with corral's token
    // only on the way in: the provider got its own key.
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/v1/responses");
    assert_eq!(seen[0].body["stream"], true);
    assert!(!format!("{seen:?}").contains(AGENT_TOKEN));
    // The run its `http_headers` named was charged.
    let events = server.store.audit_recent(None, 100).await.unwrap();
    let llm: Vec<_> = events.iter().filter(|e| e.op == "llm.chat").collect();
    assert_eq!(llm.len(), 1);
    assert_eq!(llm[0].run_id.as_deref(), Some("task-42"));
    assert!(
        llm[0]
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("11 prompt + 7 completion"),
        "{:?}",
        llm[0].detail
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_runs_the_shell_call_the_model_makes_through_the_proxy() {
    let Some(bin) = codex() else { return };
    let (server, upstream, ws) = proxy().await;
    let (events, stderr) = codex_exec(bin, server.base.clone(), &ws.root, "shell").await;
    let written = std::fs::read_to_string(ws.root.join("corral-was-here.txt"))
        .unwrap_or_else(|e| panic!("no file ({e}):\n{events:#?}\n{stderr}"));
    assert_eq!(written, "corral\n");
    let ran = items(&events, "command_execution");
    assert_eq!(ran.len(), 1, "{events:#?}");
    assert!(
        ran[0]["command"].as_str().unwrap().contains(SHELL_COMMAND),
        "{}",
        ran[0]
    );
    assert_eq!(ran[0]["exit_code"], 0);
    let said: Vec<&str> = items(&events, "agent_message")
        .iter()
        .filter_map(|i| i["text"].as_str())
        .collect();
    assert_eq!(said, [SHELL_DONE]);
    // Two model requests: the call, then the call's output sent back for the closing message.
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let back = seen[1].body["input"].as_array().unwrap();
    assert!(
        back.iter()
            .any(|i| i["type"] == "function_call_output" && i["call_id"] == "call_shell_1"),
        "{back:?}"
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
async fn codex_accepts_a_held_and_checked_responses_stream_and_still_runs_its_shell_call() {
    let Some(bin) = codex() else { return };
    let (server, _upstream, ws) = proxy_hooked(Some(Arc::new(Redact))).await;
    let (events, stderr) = codex_exec(bin.clone(), server.base.clone(), &ws.root, "ok").await;
    let said: Vec<&str> = items(&events, "agent_message")
        .iter()
        .filter_map(|i| i["text"].as_str())
        .collect();
    assert_eq!(said, ["The answer is [withheld]."], "{events:?}\n{stderr}");
    let (events, stderr) = codex_exec(bin, server.base.clone(), &ws.root, "shell").await;
    assert_eq!(
        items(&events, "command_execution").len(),
        1,
        "{events:#?}\n{stderr}"
    );
    assert!(ws.root.join("corral-was-here.txt").exists());
}
