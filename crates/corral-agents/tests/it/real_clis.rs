//! The real CLIs (npm `@openai/codex`, `@anthropic-ai/claude-code`) in a session in the
//! `linux` backend, their model the test's scripted upstream on the session's link (the
//! Responses API for codex, the Messages API for claude). Their native binaries come from
//! `CORRAL_TEST_CODEX` and `CORRAL_TEST_CLAUDE`; unset, the tests are skipped with a notice
//! (codex's fails under `CI=true`).

use std::path::PathBuf;
use std::time::Duration;

use corral_agents::{Adapter, Installed, Permissions, SessionEvent, SessionLimits};
use serde_json::json;

use crate::support::{Script, call, dirs, message, path_str, session_of, turn};

/// A real agent CLI's native binary from `var` (`.ci/run` installs both; skipped when unset, a
/// failure under `CI=true`), with its npm install bound read-only (four levels up: codex's
/// `.../@openai/codex-linux-x64/vendor/<triple>/bin/codex` keeps its vendored `rg`; claude's
/// `.../node_modules/@anthropic-ai/claude-code-linux-x64/claude` its install).
fn real_cli(var: &str, adapter: Adapter, package: &str) -> Option<Installed> {
    let Ok(bin) = std::env::var(var) else {
        assert!(
            std::env::var("CI").is_ok_and(|v| v != "true") || std::env::var("CI").is_err(),
            "{var} is unset and CI=true: the real {} tests need the path of the native binary of an `npm install {package}@{}`",
            adapter.name(),
            corral_agents::install::pin(adapter).version
        );
        eprintln!("notice: {var} is unset; skipping (this fails under CI=true)");
        return None;
    };
    let bin = PathBuf::from(bin);
    assert!(bin.is_file(), "{var}={} is not a file", bin.display());
    let dir = bin.ancestors().nth(4).unwrap_or(&bin).to_path_buf();
    Some(Installed::at(adapter, "test", dir, vec![path_str(&bin)]))
}

fn real_codex() -> Option<Installed> {
    real_cli("CORRAL_TEST_CODEX", Adapter::Codex, "@openai/codex")
}

fn has_command(events: &[SessionEvent], needle: &str) -> Option<Option<i32>> {
    events.iter().find_map(|e| match e {
        SessionEvent::Command {
            argv,
            exit,
            done: true,
        } if argv.iter().any(|a| a.contains(needle)) => Some(*exit),
        _ => None,
    })
}

#[tokio::test]
async fn real_codex_writes_in_its_workdir_and_is_refused_outside_both_in_the_events() {
    let Some(cli) = real_codex() else { return };
    let d = dirs();
    let outside = d.outside.join("outside.txt");
    let script = Script::new(vec![
        call(
            "exec_command",
            json!({"cmd": "echo in > inside.txt", "yield_time_ms": 5000}),
        ),
        call(
            "exec_command",
            json!({"cmd": format!("echo out > {}", path_str(&outside)), "yield_time_ms": 5000}),
        ),
        message("Both tried."),
    ]);
    let limits = SessionLimits {
        turn_timeout: Duration::from_secs(120),
        ..SessionLimits::default()
    };
    let s = session_of(cli, &d, &script, Permissions::WorkspaceWrite, limits, 3);
    let (report, events) = turn(&s, "write the two files").await;
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("inside.txt"))
            .ok()
            .as_deref(),
        Some("in\n"),
        "{report:?} {events:?}"
    );
    assert!(!outside.exists(), "codex wrote outside its workdir");
    assert_eq!(
        has_command(&events, "echo in > inside.txt"),
        Some(Some(0)),
        "{events:?}"
    );
    let refused = has_command(&events, "echo out >");
    assert!(matches!(refused, Some(Some(c)) if c != 0), "{events:?}");
    assert!(
        events.contains(&SessionEvent::Message {
            text: "Both tried.".into()
        }),
        "{events:?}"
    );
    assert!(report.ok, "{report:?} {events:?}");
    let asked = script.asked.lock().unwrap();
    assert!(
        asked.iter().all(|(_, authorized)| *authorized),
        "codex used another key"
    );
    assert_eq!(asked[0].0["model"], "gpt-test");
    assert!(
        report
            .attestation
            .primitives
            .iter()
            .any(|p| p == "netns:corral-link")
    );
}

fn real_claude() -> Option<Installed> {
    real_cli(
        "CORRAL_TEST_CLAUDE",
        Adapter::ClaudeCode,
        "@anthropic-ai/claude-code",
    )
}

#[tokio::test]
async fn real_claude_code_writes_in_its_workdir_and_is_refused_outside_both_in_the_events() {
    let Some(cli) = real_claude() else { return };
    let d = dirs();
    let outside = d.outside.join("outside.txt");
    let script = Script::new(vec![
        call(
            "Bash",
            json!({"command": "echo in > inside.txt", "description": "inside"}),
        ),
        call(
            "Bash",
            json!({"command": format!("echo out > {}", path_str(&outside)), "description": "outside"}),
        ),
        message("Both tried."),
    ]);
    let limits = SessionLimits {
        turn_timeout: Duration::from_secs(120),
        ..SessionLimits::default()
    };
    let s = session_of(cli, &d, &script, Permissions::WorkspaceWrite, limits, 3);
    let (report, events) = turn(&s, "write the two files").await;
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("inside.txt"))
            .ok()
            .as_deref(),
        Some("in\n"),
        "{report:?} {events:?}"
    );
    assert!(!outside.exists(), "claude wrote outside its workdir");
    assert_eq!(
        has_command(&events, "echo in > inside.txt"),
        Some(Some(0)),
        "{events:?}"
    );
    // Claude reports a failed tool call as an error result: exit 1 in the event.
    assert_eq!(
        has_command(&events, "echo out >"),
        Some(Some(1)),
        "{events:?}"
    );
    assert!(
        events.contains(&SessionEvent::Message {
            text: "Both tried.".into()
        }),
        "{events:?}"
    );
    assert!(report.ok, "{report:?} {events:?}");
    let asked = script.asked.lock().unwrap();
    assert!(
        !asked.is_empty() && asked.iter().all(|(_, authorized)| *authorized),
        "claude used another key"
    );
}
