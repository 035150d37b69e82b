//! `corral call --local commands.run` runs in the linux backend (the default): the result says
//! so, and the rule's path scope decides whether the sandbox may write the workspace.

use std::process::Command;

use crate::workspace;

fn ci_runner(writable: bool) -> String {
    format!(
        "version: 1\npreset: {{name: ci_runner, commands: [\"touch ...\"], writable: {writable}, confirm: never}}\nroot: $WS\nstate_dir: .corral\nauth:\n  tokens:\n    - {{id: agent, roles: [operator], token_env: CORRAL_IT_AGENT_TOKEN}}\n"
    )
}

/// Runs `corral call --local commands.run argv=[touch <ws>/made] --format json` as `agent`.
fn touch(dir: &std::path::Path) -> (i32, serde_json::Value, String) {
    let target = dir.join("ws").join("made");
    let argv = serde_json::json!(["touch", target]).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["call", "--local", "commands.run", &format!("argv={argv}")])
        .args(["--principal", "agent", "--format", "json"])
        .current_dir(dir)
        .env_remove("CORRAL_CONFIG")
        .env("CORRAL_IT_AGENT_TOKEN", "it-agent-secret-0123456789")
        .output();
    let Ok(out) = out else {
        unreachable!("the corral binary runs")
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        format!("{stdout}{stderr}"),
    )
}

#[test]
fn commands_run_in_the_linux_backend_and_a_read_only_workspace_stays_unwritten() {
    let dir = workspace(Some(&ci_runner(false)));
    let (code, v, all) = touch(dir.path());
    assert_eq!(code, 0, "the call itself succeeds: {all}");
    let result = &v["result"];
    assert_eq!(result["attestation"]["backend"], "linux", "{all}");
    assert_eq!(result["attestation"]["isolated"], true, "{all}");
    assert_ne!(
        result["exit_code"], 0,
        "touch fails on the read-only workspace: {all}"
    );
    assert!(!dir.path().join("ws").join("made").exists());
}

#[test]
fn a_writable_workspace_can_be_written_from_the_sandbox() {
    let dir = workspace(Some(&ci_runner(true)));
    let (code, v, all) = touch(dir.path());
    assert_eq!(code, 0, "{all}");
    assert_eq!(v["result"]["exit_code"], 0, "{all}");
    assert!(dir.path().join("ws").join("made").exists());
    // The run wrote into its copy-on-write layer; the result says what reached the host.
    assert_eq!(v["result"]["changes"]["applied"], 1, "{all}");
    assert_eq!(
        v["result"]["changes"]["refused"],
        serde_json::json!([]),
        "{all}"
    );
}

// issue 11 item 5: with no `limits.memory` in the config, a command still has a memory cap (1 GiB),
// attested as what enforced it: the memory cgroup where corral has one, else RLIMIT_AS, never both
// names for one limit.
#[test]
fn a_command_without_a_configured_memory_limit_gets_the_default_cap() {
    let dir = workspace(Some(&ci_runner(true)));
    let (code, v, all) = touch(dir.path());
    assert_eq!(code, 0, "{all}");
    let primitives: Vec<&str> = v["result"]["attestation"]["primitives"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p.as_str()).collect())
        .unwrap_or_default();
    let cgroup = primitives.contains(&"cgroup:memory");
    let rlimit = primitives.contains(&"rlimit:as");
    assert!(
        cgroup != rlimit,
        "exactly one of cgroup:memory and rlimit:as: {primitives:?}"
    );
}
