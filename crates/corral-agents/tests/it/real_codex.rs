//! The real `codex` CLI (npm `@openai/codex`, the pinned version) in a session in the `linux`
//! backend, its model the test's scripted Responses upstream on the session's link. Its binary
//! comes from `CORRAL_TEST_CODEX` (the path of the native `codex` binary of an install); unset,
//! the tests are skipped with a notice, and fail under `CI=true`.

use std::path::PathBuf;
use std::time::Duration;

use corral_agents::{Adapter, Installed, Permissions, SessionEvent, SessionLimits};
use serde_json::json;

use crate::support::{Script, call, dirs, message, path_str, session_of, turn};

fn real_codex() -> Option<Installed> {
    let Ok(bin) = std::env::var("CORRAL_TEST_CODEX") else {
        assert!(
            std::env::var("CI").is_err_and(|_| true)
                || std::env::var("CI").is_ok_and(|v| v != "true"),
            "CORRAL_TEST_CODEX is unset and CI=true: the real codex tests need the path of the codex binary of an `npm install @openai/codex@{}`",
            corral_agents::install::pin(Adapter::Codex).version
        );
        eprintln!("notice: CORRAL_TEST_CODEX is unset; skipping (this fails under CI=true)");
        return None;
    };
    let bin = PathBuf::from(bin);
    assert!(
        bin.is_file(),
        "CORRAL_TEST_CODEX={} is not a file",
        bin.display()
    );
    // The whole npm install (`.../node_modules/@openai/codex-linux-x64/vendor/<triple>/bin/codex`)
    // is bound read-only: its vendored `rg` and the like too.
    let dir = bin.ancestors().nth(4).unwrap_or(&bin).to_path_buf();
    Some(Installed::at(
        Adapter::Codex,
        "test",
        dir,
        vec![path_str(&bin)],
    ))
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
