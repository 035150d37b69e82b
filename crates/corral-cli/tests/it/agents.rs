//! `corral agents prepare` and the agent lines of `corral doctor`: each mounted adapter's CLI,
//! installed (its version) or missing (and the command that fixes it).

use crate::{corral, workspace};

const OFFLINE: &str = "version: 1\nroot: $WS\nagents: [codex]\ninstall: {mode: offline}\n";

#[test]
fn doctor_shows_a_mounted_adapter_that_is_not_installed_and_the_command_that_fixes_it() {
    let dir = workspace(Some(
        "version: 1\nroot: $WS\nagents: [codex, claude_code]\ninstall: {mode: build}\n",
    ));
    let (_, out, err) = corral(dir.path(), &["doctor"]);
    assert!(out.contains("agents:"), "{out}\n{err}");
    assert!(
        out.contains("codex        MISSING    fix: corral agents prepare codex"),
        "{out}"
    );
    assert!(out.contains("claude_code  MISSING"), "{out}");
    let (_, json, _) = corral(dir.path(), &["doctor", "--format", "json"]);
    let parsed = serde_json::from_str::<serde_json::Value>(&json);
    let Ok(v) = parsed else {
        unreachable!("doctor prints JSON: {parsed:?}: {json}")
    };
    assert_eq!(v["agents"][0]["adapter"], "codex");
    assert_eq!(v["agents"][0]["installed"], false);
    assert_eq!(v["agents"][0]["fix"], "corral agents prepare codex");
}

#[test]
fn doctor_without_agents_in_the_config_prints_no_agent_lines() {
    let dir = workspace(Some("version: 1\nroot: $WS\n"));
    let (_, out, _) = corral(dir.path(), &["doctor"]);
    assert!(!out.contains("agents:"), "{out}");
}

#[test]
fn prepare_in_offline_mode_downloads_nothing_and_says_how_to_prepare() {
    let dir = workspace(Some(OFFLINE));
    let (code, out, err) = corral(dir.path(), &["agents", "prepare", "codex"]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("error[agents.not_installed]"), "{err}");
    assert!(err.contains("install: {mode: build}"), "{err}");
    assert!(!dir.path().join(".corral/agents/codex").exists());
}

#[test]
fn prepare_refuses_an_adapter_corral_does_not_host_and_a_config_that_mounts_none() {
    let dir = workspace(Some(OFFLINE));
    let (code, _, err) = corral(dir.path(), &["agents", "prepare", "gemini"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("codex, claude_code"), "{err}");
    let none = workspace(Some("version: 1\nroot: $WS\n"));
    let (code, _, err) = corral(none.path(), &["agents", "prepare"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("corral agents prepare codex"), "{err}");
}

/// The fake agent CLI (corral-agents' `corral-fake-agent`), built beside `corral` by the
/// workspace's `cargo test`.
fn fake_agent() -> std::path::PathBuf {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_corral"));
    let fake = exe.with_file_name("corral-fake-agent");
    assert!(
        fake.is_file(),
        "{} is missing: run the workspace's tests (`cargo test`), or `cargo build -p corral-agents --bins` first",
        fake.display()
    );
    fake
}

/// Runs `tests/reference/agents_sdk.py` with `args` after the corral binary; what it printed.
fn agents_sdk(python: std::path::PathBuf, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/reference/agents_sdk.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_corral"))
        .args(args)
        .env("NO_PROXY", "127.0.0.1")
        .output()
        .unwrap_or_else(|e| unreachable!("python runs: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the SDK script failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| unreachable!("the script prints JSON ({e}): {stdout}"))
}

/// The native binary of a real agent CLI from `var` (`.ci/run` installs both), or `None`
/// outside CI after saying why; unset under `CI=true` is a failure.
fn real_cli(var: &str) -> Option<std::ffi::OsString> {
    match std::env::var_os(var) {
        Some(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "{var} is unset under CI=true: .ci/run installs the agent CLIs and sets it"
            );
            eprintln!("skipped: {var} is not set (a real agent CLI's native binary)");
            None
        }
    }
}

/// What the SDK script saw of one real CLI's session: the write in the workdir landed, the
/// one outside failed in the sandbox, both as `command_execution` items, the turn ended idle,
/// and the provider got only corral's key (`key`: how it was sent).
fn assert_real_cli_session(v: &serde_json::Value, key: &str) {
    assert_eq!(v["made"], "in\n", "{v}");
    assert_eq!(v["escaped"], false, "{v}");
    let commands: Vec<&serde_json::Value> = v["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|i| i["type"] == "command_execution")
                .collect()
        })
        .unwrap_or_default();
    let status_of = |needle: &str| {
        commands
            .iter()
            .find(|i| i["command"].as_str().is_some_and(|c| c.contains(needle)))
            .map(|i| i["status"].clone())
    };
    assert_eq!(status_of("made.txt"), Some("completed".into()), "{v}");
    assert_eq!(status_of("escaped.txt"), Some("failed".into()), "{v}");
    assert_eq!(
        v["types"].as_array().and_then(|t| t.last()).cloned(),
        Some("agent.session.idle".into()),
        "{v}"
    );
    assert_eq!(v["upstream_keys"], serde_json::json!([key]), "{v}");
}

#[test]
fn the_real_codex_cli_runs_a_session_through_corral_serve_writing_only_its_workdir() {
    let Some(python) = crate::python("the openai SDK") else {
        return;
    };
    let Some(codex) = real_cli("CORRAL_TEST_CODEX") else {
        return;
    };
    let v = agents_sdk(python, &[&codex, std::ffi::OsStr::new("--real-codex")]);
    assert_real_cli_session(&v, "Bearer sk-upstream-secret-agents-sdk");
}

#[test]
fn the_real_claude_code_cli_runs_a_session_through_corral_serve_writing_only_its_workdir() {
    let Some(python) = crate::python("the openai SDK") else {
        return;
    };
    let Some(claude) = real_cli("CORRAL_TEST_CLAUDE") else {
        return;
    };
    let v = agents_sdk(python, &[&claude, std::ffi::OsStr::new("--real-claude")]);
    assert_real_cli_session(&v, "x-api-key sk-upstream-secret-agents-sdk");
}

#[test]
fn the_openai_sdk_runs_a_codex_session_in_the_sandbox_through_corral_serve() {
    let Some(python) = crate::python("the openai SDK") else {
        return;
    };
    let fake = fake_agent();
    let v = agents_sdk(python, &[fake.as_os_str()]);
    // The saved agent's model is the session's; the turn started with the session.
    assert_eq!(v["agent_listed"], true, "{v}");
    assert_eq!(v["session_model"], "gpt-5-codex", "{v}");
    assert_eq!(v["session_status"], "in_progress", "{v}");
    // One turn at a time.
    assert_eq!(
        v["busy"],
        serde_json::json!([409, "agents.session_busy"]),
        "{v}"
    );
    // One owner runs at most 4 turns at once.
    assert_eq!(
        v["fifth"],
        serde_json::json!([429, "limit.concurrency"]),
        "{v}"
    );
    assert_eq!(
        v["sessions_after_fifth"], 4,
        "the refused one left no session: {v}"
    );
    // The saved agent's instructions open the session's first prompt.
    assert_eq!(v["instructions_sent"], true, "{v}");
    // The write in the workdir landed; the one outside was refused by the sandbox; both show.
    assert_eq!(v["made"], "from the agent", "{v}");
    assert_eq!(v["escaped"], false, "{v}");
    let items = v["items"].as_array().cloned().unwrap_or_default();
    let change = |needle: &str| {
        items
            .iter()
            .find(|i| {
                i["type"] == "file_change"
                    && i["path"].as_str().is_some_and(|p| p.ends_with(needle))
            })
            .map(|i| i["status"].clone())
    };
    assert_eq!(change("made.txt"), Some("completed".into()), "{v}");
    assert_eq!(change("escaped.txt"), Some("failed".into()), "{v}");
    assert!(
        items.iter().any(|i| i["type"] == "message"),
        "the agent's answer is an item: {v}"
    );
    let types: Vec<&str> = v["types"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(types.first(), Some(&"agent.session.created"), "{v}");
    assert!(types.contains(&"agent.session.turn.created"), "{v}");
    assert!(types.contains(&"agent.session.turn.completed"), "{v}");
    assert_eq!(types.last(), Some(&"agent.session.idle"), "{v}");
    assert_eq!(v["after_status"], "idle", "{v}");
    // The second turn's stream, resumed after the first's last event, holds only its own.
    let second: Vec<&str> = v["second"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(second.first(), Some(&"agent.session.turn.created"), "{v}");
    assert!(!second.contains(&"agent.session.created"), "{v}");
    // Inside its workdir the agent changed neither a repository's `.git` nor a `protected:`
    // file (its turn writes through the copy-on-write layer, checked when applied), and a
    // workdir inside `.git` is refused.
    assert_eq!(v["hook_planted"], false, "{v}");
    assert_eq!(v["lock"], "original", "{v}");
    // The agent wrote the lock in its sandbox (its CLI said so; `.git` is read-only there, so
    // the hook failed at once): the stream says it never landed, with its code.
    assert_eq!(
        v["refused"],
        serde_json::json!([["Cargo.lock", "policy.path_denied"]]),
        "{v}"
    );
    // An answer over the cap on one event is in the stream, cut (never dropped).
    assert_eq!(
        v["long_answer"],
        serde_json::json!([true, true, true]),
        "{v}"
    );
    assert_eq!(
        v["gitdir"],
        serde_json::json!([403, "agents.workdir_outside"]),
        "{v}"
    );
    // `agents.codex.run` over `POST /ops`: the task ran to completion in its own session.
    assert_eq!(
        v["run"],
        serde_json::json!([200, true, "ran to completion", "idle"]),
        "{v}"
    );
    // Owner-only: bob neither reads nor lists alice's session.
    assert_eq!(
        v["bob"],
        serde_json::json!([404, "agents.not_found"]),
        "{v}"
    );
    assert_eq!(v["bob_list"], serde_json::json!([]), "{v}");
    // README's example, run as written: its session ran, and its printed events end idle.
    assert_eq!(v["readme"]["notes"], true, "{v}");
    let printed = v["readme"]["printed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        printed.first(),
        Some(&"agent.session.created".into()),
        "{v}"
    );
    assert_eq!(printed.last(), Some(&"agent.session.idle".into()), "{v}");
    // The provider saw only corral's key; the CLI never had it, and no log printed it.
    assert_eq!(
        v["upstream_keys"],
        serde_json::json!(["Bearer sk-upstream-secret-agents-sdk"]),
        "{v}"
    );
    assert_eq!(v["log_has_upstream_key"], false, "{v}");
    // A restart finds the turn the killed server was running, and fails it as interrupted.
    assert_eq!(
        v["interrupted"],
        serde_json::json!(["failed", "agents.interrupted"]),
        "{v}"
    );
}

#[test]
fn a_write_outside_the_free_directories_waits_for_a_person_then_applies_through_corral_serve() {
    let Some(python) = crate::python("the openai SDK") else {
        return;
    };
    let fake = fake_agent();
    let v = agents_sdk(python, &[fake.as_os_str(), std::ffi::OsStr::new("--held")]);
    // `src/` is free: applied at the turn's end. README.md waits, listed with its kind.
    assert_eq!(v["free"], "free", "{v}");
    assert_eq!(v["held_on_disk"], false, "{v}");
    let item = &v["held_item"];
    assert_eq!(item["status"], "pending_confirmation", "{v}");
    assert_eq!(
        item["apply"]["op"], "agents.codex.sessions.apply_writes",
        "{v}"
    );
    let changes = item["changes"].as_array().cloned().unwrap_or_default();
    assert_eq!(changes.len(), 1, "{v}");
    assert!(
        changes[0]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("/README.md")),
        "{v}"
    );
    assert_eq!(changes[0]["kind"], "write", "{v}");
    // The rule says `confirm: never`; applying a hold waits for a person all the same.
    assert_eq!(
        v["first"],
        serde_json::json!([202, "confirmation.required"]),
        "{v}"
    );
    assert_eq!(v["decided"], 200, "{v}");
    assert_eq!(v["second"], serde_json::json!([200, 1]), "{v}");
    assert_eq!(v["applied_on_disk"], "held", "{v}");
    // The approved call's outcome is stored: a retry does not apply anything again.
    assert_eq!(v["again"], serde_json::json!([200, "true"]), "{v}");
}

/// Issue 17: with two `corral serve` replicas on one PostgreSQL, a cancel posted to the replica
/// that does not run the turn ends it (the running replica finds the cancel in the store); the
/// session's events show the cancel once, the session takes its next turn, and a cancel of the
/// idle session, on either replica, records nothing.
#[test]
fn a_cancel_posted_to_another_replica_ends_the_turn_once() {
    let Some(python) = crate::python("the openai SDK") else {
        return;
    };
    let Some(v) = on_two_replicas(python, "cli_agent_cancel", &[]) else {
        return; // Outside CI without a server: said why, skipped.
    };
    assert_eq!(v["reached_model"], true, "{v}");
    assert_eq!(v["status_on_b"], "in_progress", "{v}");
    assert_eq!(v["cancel"], 202, "{v}");
    let events = v["cancelled_events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ends: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| {
            e[0].as_str().is_some_and(|t| {
                t.starts_with("agent.session.turn.")
                    && t != "agent.session.turn.created"
                    && t != "agent.session.turn.in_progress"
            })
        })
        .collect();
    assert_eq!(
        ends,
        [&serde_json::json!([
            "agent.session.turn.failed",
            "agents.cancelled"
        ])],
        "{v}"
    );
    let idles = events
        .iter()
        .filter(|e| e[0] == "agent.session.idle")
        .count();
    assert_eq!(idles, 1, "{v}");
    assert_eq!(
        v["after"],
        serde_json::json!(["idle", "agents.cancelled"]),
        "{v}"
    );
    let next = v["next_events"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        next.first(),
        Some(&"agent.session.turn.created".into()),
        "{v}"
    );
    assert!(next.contains(&"agent.session.turn.completed".into()), "{v}");
    assert_eq!(v["idle_cancel_added"], serde_json::json!([]), "{v}");
    assert_eq!(v["idle_after"], serde_json::json!(["idle", null]), "{v}");
}

/// What `tests/reference/agents_sdk.py FAKE --replicas <url> ARGS` printed, its two replicas
/// on a fresh PostgreSQL schema named after `test` (dropped after); `None` (skipped, said why)
/// with no server outside CI.
fn on_two_replicas(
    python: std::path::PathBuf,
    test: &str,
    args: &[&str],
) -> Option<serde_json::Value> {
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| unreachable!("a runtime: {e}"));
    let schema = rt.block_on(crate::cookbook::pg_schema::Schema::create(test))?;
    let fake = fake_agent();
    let mut argv = vec![
        fake.as_os_str(),
        std::ffi::OsStr::new("--replicas"),
        std::ffi::OsStr::new(&schema.url),
    ];
    argv.extend(args.iter().map(std::ffi::OsStr::new));
    let v = agents_sdk(python, &argv);
    rt.block_on(schema.drop());
    Some(v)
}

/// Issue 17: with two `corral serve` replicas on one PostgreSQL, a write held by a turn on
/// replica A is applied through replica B (a person approves the call there): the hold is the
/// store's, not A's disk. The file lands once; the same call again gets the stored outcome; a
/// new apply of the hold answers `agents.hold_not_found`; the session's events and the audit
/// show one hold and one apply. A later turn's held changes over the store's cap are neither
/// kept nor announced.
#[test]
fn a_write_held_on_one_replica_is_applied_through_another_once() {
    let Some(python) = crate::python("the openai SDK") else {
        return;
    };
    let Some(v) = on_two_replicas(python, "cli_agent_hold", &["--held"]) else {
        return; // Outside CI without a server: said why, skipped.
    };
    assert_eq!(v["held_status"], "pending_confirmation", "{v}");
    assert_eq!(v["held_on_disk"], false, "{v}");
    assert_eq!(v["holds_left_on_a"], serde_json::json!([]), "{v}");
    assert_eq!(
        v["on_b"],
        serde_json::json!([[202, "confirmation.required"], 200, 1]),
        "{v}"
    );
    assert_eq!(v["applied_on_disk"], "held", "{v}");
    assert_eq!(v["again_on_a"], serde_json::json!([200, "true"]), "{v}");
    assert_eq!(
        v["second_on_a"],
        serde_json::json!([[202, "confirmation.required"], 404, "agents.hold_not_found"]),
        "{v}"
    );
    assert_eq!(
        v["hold_items"],
        serde_json::json!(["pending_confirmation", "completed"]),
        "{v}"
    );
    // A turn's held changes over the store's cap: not kept, not announced, the error says so.
    assert_eq!(
        v["too_large"],
        serde_json::json!([null, ["agents.hold_too_large"], false]),
        "{v}"
    );
    // One apply ran (`ok`), its retry was answered from the store (`replayed`), the later
    // apply found nothing (`op_error`), each approved by a person.
    assert_eq!(
        v["audit"],
        serde_json::json!([
            ["confirmation_consumed", null],
            ["confirmation_consumed", null],
            ["confirmation_decided", null],
            ["confirmation_decided", null],
            ["confirmation_raised", "confirmation.required"],
            ["confirmation_raised", "confirmation.required"],
            ["ok", null],
            ["op_error", "agents.hold_not_found"],
            ["replayed", null]
        ]),
        "{v}"
    );
}
