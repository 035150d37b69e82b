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
    touch_at(dir, "made")
}

/// Runs `corral call --local commands.run argv=[touch <ws>/<name>] --format json` as `agent`.
fn touch_at(dir: &std::path::Path, name: &str) -> (i32, serde_json::Value, String) {
    touch_with_env(dir, name, &[])
}

/// [`touch_at`] with extra environment variables for the `corral` process.
fn touch_with_env(
    dir: &std::path::Path,
    name: &str,
    env: &[(&str, &str)],
) -> (i32, serde_json::Value, String) {
    touch_with_env_args(dir, name, env, &[])
}

/// [`touch_with_env`] with extra arguments to `corral call`.
fn touch_with_env_args(
    dir: &std::path::Path,
    name: &str,
    env: &[(&str, &str)],
    extra: &[&str],
) -> (i32, serde_json::Value, String) {
    let target = dir.join("ws").join(name);
    let argv = serde_json::json!(["touch", target]).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["call", "--local", "commands.run", &format!("argv={argv}")])
        .args(["--principal", "agent", "--format", "json"])
        .args(extra)
        .current_dir(dir)
        .env_remove("CORRAL_CONFIG")
        .env("CORRAL_IT_AGENT_TOKEN", "it-agent-secret-0123456789")
        .envs(env.iter().copied())
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
    // The call ran; the program it ran failed: exit 3, its result printed.
    assert_eq!(code, 3, "the call ran, the program failed: {all}");
    let result = &v["result"];
    assert_eq!(result["attestation"]["backend"], "linux", "{all}");
    assert_eq!(result["attestation"]["isolated"], true, "{all}");
    assert_ne!(
        result["exit_code"], 0,
        "touch fails on the read-only workspace: {all}"
    );
    assert!(!dir.path().join("ws").join("made").exists());
    // `--exit-zero` keeps 0 for a failed program (the result says how it failed).
    let (code, v, all) = touch_with_env_args(dir.path(), "made", &[], &["--exit-zero"]);
    assert_eq!(code, 0, "{all}");
    assert_ne!(v["result"]["exit_code"], 0, "{all}");
}

#[test]
fn a_process_marked_as_a_sandbox_helper_refuses_to_start_helpers_instead_of_recursing() {
    // What a binary that forgets to dispatch `__sandbox-exec` looks like from inside: its
    // "helper" runs main again with the marker set. It must not start a helper of its own.
    let dir = workspace(Some(&ci_runner(true)));
    let (_, _, all) = touch_with_env(dir.path(), "made", &[("CORRAL_SANDBOX_HELPER", "1")]);
    assert!(all.contains("did not dispatch it"), "{all}");
    assert!(all.contains("corral_exec::helper_main()"), "{all}");
    assert!(!dir.path().join("ws").join("made").exists(), "{all}");
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

#[test]
fn a_refused_change_is_listed_in_the_result_with_its_path_code_and_reason() {
    let dir = workspace(Some(&ci_runner(true)));
    let (code, v, all) = touch_at(dir.path(), ".git");
    assert_eq!(code, 0, "the call itself succeeds: {all}");
    assert!(!dir.path().join("ws").join(".git").exists(), "{all}");
    let refused = &v["result"]["changes"]["refused"][0];
    assert_eq!(refused["code"], "policy.path_denied", "{all}");
    assert!(
        refused["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("/ws/.git")),
        "{all}"
    );
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.contains("protected")),
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

/// A loopback HTTP server of the host answering every request with `body`; its port.
pub(crate) fn http_server(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
        unreachable!("a loopback port is free")
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    port
}

// issue 12 item 4: egress allow-list, through the whole call path (config -> rule -> sandbox ->
// proxy -> audit table).
#[test]
fn a_command_reaches_only_what_its_network_allow_list_names_and_each_connection_is_audited() {
    let allowed = http_server("allowed body");
    let other = http_server("other body");
    let config = format!(
        "version: 1\nroot: $WS\nstate_dir: .corral\nrules:\n  - allow: [commands.run]\n    principals: [\"id:agent\"]\n    confirm: never\n    commands:\n      allow: [\"curl ...\"]\n      cwd: $WS\n      network: {{allow: [\"127.0.0.1:{allowed}\"]}}\nauth:\n  tokens:\n    - {{id: agent, roles: [operator], token_env: CORRAL_IT_AGENT_TOKEN}}\n"
    );
    let dir = workspace(Some(&config));
    let argv = serde_json::json!([
        "curl",
        "-sS",
        format!("http://127.0.0.1:{allowed}/"),
        format!("http://127.0.0.1:{other}/"),
    ])
    .to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["call", "--local", "commands.run", &format!("argv={argv}")])
        .args(["--principal", "agent", "--format", "json"])
        .current_dir(dir.path())
        .env_remove("CORRAL_CONFIG")
        .env("CORRAL_IT_AGENT_TOKEN", "it-agent-secret-0123456789")
        .output();
    let Ok(out) = out else {
        unreachable!("the corral binary runs")
    };
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let result = &v["result"];
    let stdout = result["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("allowed body"), "{all}");
    assert!(!stdout.contains("other body"), "{all}");
    assert!(stdout.contains("egress.denied"), "{all}");
    let primitives = result["attestation"]["primitives"].to_string();
    assert!(primitives.contains("netns:egress-proxy"), "{all}");

    // `state_dir` is relative to the config's directory.
    let db = dir.path().join(".corral").join("corral.db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let Ok(rt) = rt else {
        unreachable!("a runtime starts")
    };
    let details: Vec<(String, Option<String>, String)> = rt.block_on(async {
        let url = format!("sqlite://{}", db.display());
        let Ok(store) = corral_store::Store::connect(&url).await else {
            unreachable!("the store at {} opens", db.display())
        };
        let events = store.audit_recent(None, 100).await.unwrap_or_default();
        store.close().await;
        events
            .into_iter()
            .filter(|e| e.request_id.contains("/egress/"))
            .map(|e| (e.detail.unwrap_or_default(), e.code, e.op))
            .collect()
    });
    assert_eq!(details.len(), 2, "{details:?}\n{all}");
    let allowed_event = details
        .iter()
        .find(|(d, ..)| d.contains(&format!("127.0.0.1:{allowed}")));
    assert!(
        allowed_event.is_some_and(|(d, code, op)| d.contains("allowed")
            && code.is_none()
            && op == "commands.run"),
        "{details:?}"
    );
    let refused = details
        .iter()
        .find(|(d, ..)| d.contains(&format!("127.0.0.1:{other}")));
    assert!(
        refused.is_some_and(
            |(d, code, _)| d.contains("refused") && code.as_deref() == Some("egress.denied")
        ),
        "{details:?}"
    );
    // Never a payload.
    assert!(
        !details.iter().any(|(d, ..)| d.contains("body")),
        "{details:?}"
    );
}

// issue 11 item 5 (safe limits by default), the config key: `limits.write_quota` on a rule
// lowers the write layer's quota from the default 1 GiB, and what goes over it never reaches
// the host.
#[test]
fn a_rules_write_quota_bounds_what_a_command_writes_to_the_host() {
    let config = "version: 1\nroot: $WS\nstate_dir: .corral\nrules:\n  - allow: [commands.run]\n    principals: [\"id:agent\"]\n    confirm: never\n    commands:\n      allow: [\"dd ...\"]\n      cwd: $WS\n    paths: {roots: [$WS]}\n    limits: {write_quota: 1MiB}\nauth:\n  tokens:\n    - {id: agent, roles: [operator], token_env: CORRAL_IT_AGENT_TOKEN}\n";
    let dir = workspace(Some(config));
    let argv = r#"["dd","if=/dev/zero","of=big","bs=1M","count=4"]"#;
    let out = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["call", "--local", "commands.run", &format!("argv={argv}")])
        .args(["--principal", "agent", "--format", "json"])
        .current_dir(dir.path())
        .env_remove("CORRAL_CONFIG")
        .env("CORRAL_IT_AGENT_TOKEN", "it-agent-secret-0123456789")
        .output();
    let Ok(out) = out else {
        unreachable!("the corral binary runs")
    };
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let primitives = v["result"]["attestation"]["primitives"].to_string();
    assert!(primitives.contains(&format!("quota:{}", 1 << 20)), "{all}");
    let on_host = std::fs::metadata(dir.path().join("ws/big")).map_or(0, |m| m.len());
    assert!(
        on_host <= 1 << 20,
        "{on_host} bytes reached the host: {all}"
    );
}
