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
