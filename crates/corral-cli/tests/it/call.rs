//! `corral call` and `corral healthcheck`: in-process (`--local`) and against a real
//! `corral serve` child process.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{corral, corral_with_env, workspace};

const JAIL: &str = "version: 1\npreset: workspace_jail\nroot: $WS\n";

fn write_notes(dir: &Path) {
    let _ = std::fs::write(dir.join("ws/notes.txt"), "hello from the jail\n");
    let _ = std::fs::create_dir(dir.join("ws/sub"));
}

#[test]
fn local_call_lists_files_through_the_guard_chain() {
    let dir = workspace(Some(JAIL));
    write_notes(dir.path());
    let (code, out, err) = corral(dir.path(), &["call", "--local", "files.list", "path=."]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"notes.txt\""), "{out}");
    assert!(out.contains("\"sub\""), "{out}");
    // The call was audited to the config's SQLite store.
    assert!(dir.path().join(".corral/corral.db").exists());

    let (code, out, err) = corral(
        dir.path(),
        &[
            "call",
            "--local",
            "files.read",
            "path=notes.txt",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
        unreachable!("--format json prints JSON: {out}")
    };
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["result"]["content"], "hello from the jail\n", "{v}");
}

/// A config whose upstream server, if it starts while `ws/marker` exists, removes it and exits
/// (the fixture's `--fail-if-exists`); else it serves.
fn upstream_marking_its_start() -> String {
    let (fx, bin_dir) = crate::upstream::fixture_and_dir();
    format!(
        r#"version: 1
preset: workspace_jail
root: $WS
mcp_servers:
  fx:
    command: ["{fx}", --fail-if-exists, "$WS/marker"]
    read_paths: ["{bin_dir}"]
    write_paths: ["$WS"]
    tools:
      read_file: {{effects: [read]}}
  gx:
    command: ["{fx}", --fail-if-exists, "$WS/marker-gx"]
    read_paths: ["{bin_dir}"]
    write_paths: ["$WS"]
rules:
  - allow: [mcp.fx.read_file]
"#
    )
}

#[test]
fn a_local_call_of_a_built_in_op_starts_no_upstream_server_and_an_upstream_tool_starts_its_own() {
    let dir = workspace(Some(&upstream_marking_its_start()));
    write_notes(dir.path());
    let marker = dir.path().join("ws/marker");
    let _ = std::fs::write(&marker, "");
    let (code, out, err) = corral(
        dir.path(),
        &["call", "--local", "files.read", "path=notes.txt"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("hello from the jail"), "{out}");
    // The call is over and its process gone: had it started the upstream server, the marker
    // would be gone too.
    assert!(marker.exists(), "files.read started the upstream server");

    // An upstream tool is answered by its server, which the call started (without the marker,
    // the server serves at once).
    let _ = std::fs::remove_file(&marker);
    let marker_gx = dir.path().join("ws/marker-gx");
    let _ = std::fs::write(&marker_gx, "");
    let notes = dir.path().join("ws/notes.txt");
    let path = format!("path={}", notes.display());
    let (code, out, err) = corral(dir.path(), &["call", "--local", "mcp.fx.read_file", &path]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("hello from the jail"), "{out}");
    // And only its own: the other server was not started.
    assert!(marker_gx.exists(), "mcp.fx.read_file started the server gx");
}

#[test]
fn a_refused_local_call_exits_1_with_its_code() {
    let dir = workspace(Some(JAIL));
    let (code, out, err) = corral(
        dir.path(),
        &["call", "--local", "files.read", "path=/etc/passwd"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("error[policy.path_outside_scope]"), "{err}");
    assert!(err.contains("(request "), "{err}");
    assert!(!out.contains("root:"), "{out}");

    let (code, _, err) = corral(dir.path(), &["call", "--local", "commands.run", "argv=ls"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[op.not_enabled]"), "{err}");

    let (code, out, _) = corral(
        dir.path(),
        &[
            "call",
            "--local",
            "files.read",
            "path=/etc/passwd",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        out.contains("\"code\": \"policy.path_outside_scope\""),
        "{out}"
    );
}

#[test]
fn local_call_usage_errors_exit_2() {
    let dir = workspace(Some(JAIL));
    // Not `name=value`.
    let (code, _, err) = corral(dir.path(), &["call", "--local", "files.list", "path"]);
    assert_eq!(code, 2, "{err}");
    // A principal the config does not have.
    let (code, _, err) = corral(
        dir.path(),
        &[
            "call",
            "--local",
            "files.list",
            "path=.",
            "--principal",
            "bob",
        ],
    );
    assert_eq!(code, 2, "{err}");
    // No config.
    let empty = workspace(None);
    let (code, _, _) = corral(empty.path(), &["call", "--local", "files.list", "path=."]);
    assert_eq!(code, 2);
}

#[test]
fn local_call_as_a_token_principal() {
    let config = "version: 1\npreset: workspace_jail\nroot: $WS\nauth:\n  tokens:\n    - {id: agent, token_env: CORRAL_IT_AGENT_TOKEN}\n";
    let dir = workspace(Some(config));
    write_notes(dir.path());
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_corral"))
            .args(args)
            .current_dir(dir.path())
            .env_remove("CORRAL_CONFIG")
            .env("CORRAL_IT_AGENT_TOKEN", "it-agent-secret-0123456789")
            .output();
        let Ok(out) = out else {
            unreachable!("the corral binary runs")
        };
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&[
        "call",
        "--local",
        "files.list",
        "path=.",
        "--principal",
        "agent",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("notes.txt"), "{out}");
    // With tokens there is no anonymous caller.
    let (code, _, err) = run(&["call", "--local", "files.list", "path=."]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--principal"), "{err}");
}

/// A `corral serve` child process, killed on drop.
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port of 127.0.0.1 free right now.
pub(crate) fn free_port() -> u16 {
    let Ok(l) = std::net::TcpListener::bind("127.0.0.1:0") else {
        unreachable!("loopback can bind")
    };
    let Ok(a) = l.local_addr() else {
        unreachable!("a bound socket has an address")
    };
    a.port()
}

fn serve(dir: &Path) -> Served {
    let ws = dir.join("ws").to_string_lossy().into_owned();
    serve_with(
        dir,
        &["--preset", "workspace_jail", "--root", &ws],
        &[],
        Stdio::null(),
    )
}

/// `corral serve ARGS --listen 127.0.0.1:<free port>` in `dir` with `env` added and its log to
/// `stderr`, once `/healthz` answers (at most 30 s).
pub(crate) fn serve_with(dir: &Path, args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Served {
    let listen = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("serve")
        .args(args)
        .args(["--listen", &listen])
        .current_dir(dir)
        .env_remove("CORRAL_CONFIG")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn();
    let Ok(child) = child else {
        unreachable!("corral serve starts")
    };
    let served = Served {
        child,
        url: format!("http://{listen}"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, _, _) = corral(
            dir,
            &[
                "healthcheck",
                "--server",
                &served.url,
                "--timeout-ms",
                "1000",
            ],
        );
        if code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "corral serve did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    served
}

#[test]
fn call_and_healthcheck_against_a_running_server() {
    let dir = workspace(None);
    write_notes(dir.path());
    let served = serve(dir.path());
    let url = served.url.clone();

    let (code, out, err) = corral(
        dir.path(),
        &["call", "files.list", "path=.", "--server", &url],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"notes.txt\""), "{out}");

    let (code, out, err) = corral(
        dir.path(),
        &[
            "call",
            "--server",
            &url,
            "files.read",
            "path=notes.txt",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("hello from the jail"), "{out}");
    assert!(out.contains("\"request_id\""), "{out}");

    let (code, out, err) = corral(
        dir.path(),
        &["call", "--server", &url, "files.download", "path=notes.txt"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hello from the jail\n");

    let (code, _, err) = corral(
        dir.path(),
        &[
            "call",
            "--server",
            &url,
            "files.read",
            "path=../../etc/passwd",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[policy."), "{err}");

    let (code, _, err) = corral(dir.path(), &["call", "--server", &url, "no.such_op"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[op.not_enabled]"), "{err}");

    let (code, out, err) = corral(dir.path(), &["healthcheck", "--server", &url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ok"), "{out}");

    drop(served);
    let (code, _, err) = corral(dir.path(), &["healthcheck", "--server", &url]);
    assert!(code == 1 || code == 2, "{code}: {err}");
    let (code, _, err) = corral(
        dir.path(),
        &["call", "--server", &url, "files.list", "path=."],
    );
    assert_eq!(code, 2, "{err}");
}

#[test]
fn a_write_waits_for_corral_confirm_then_runs_once() {
    let dir = workspace(None);
    let served = serve(dir.path());
    let url = served.url.clone();
    let write = [
        "call",
        "--server",
        &url,
        "files.write",
        "path=approved.txt",
        "content=hi",
    ];

    // As JSON, the 202 carries the action and how to approve it, like the server's body.
    let json_args = [&write[..], &["--format", "json"]].concat();
    let (code, out, err) = corral(dir.path(), &json_args);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert_eq!(v["code"], "confirmation.required", "{out}");
    assert_eq!(v["status"], 202, "{out}");
    let json_action = v["action_id"].as_str().unwrap_or_default().to_owned();
    assert!(!json_action.is_empty(), "{out}");
    assert_eq!(v["approve"]["body"]["decision"], "approve", "{out}");

    let (code, _, err) = corral(dir.path(), &write);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("confirmation.required"), "{err}");
    assert!(!dir.path().join("ws").join("approved.txt").exists());
    let Some(action_id) = err
        .split("/confirmations/")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
    else {
        unreachable!("the refusal names the action: {err}")
    };

    let (code, out, err) = corral(dir.path(), &["confirm", action_id, "--server", &url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("approved action"), "{out}");

    let (code, out, err) = corral(dir.path(), &write);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws").join("approved.txt")).unwrap_or_default(),
        "hi"
    );
    assert!(!err.contains("did not run again"), "{err}");
    // The same call again: the stored outcome, and corral call says it did not run again.
    let (code, again, err) = corral(dir.path(), &write);
    assert_eq!(code, 0, "{again}{err}");
    assert_eq!(again, out);
    assert!(
        err.contains("had run already; this is its stored outcome (it did not run again)"),
        "{err}"
    );

    // In-process (`--local`, the same state directory and requester): the same stored
    // outcome, and the same note.
    let ws = dir.path().join("ws");
    let _ = std::fs::write(
        dir.path().join("corral.yaml"),
        format!(
            "version: 1\npreset: {{name: workspace_jail, root: {}}}\n",
            ws.display()
        ),
    );
    let local = [
        "call",
        "--local",
        "files.write",
        "path=approved.txt",
        "content=hi",
    ];
    let (code, _, err) = corral(dir.path(), &local);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("did not run again"), "{err}");

    // An unknown action is refused with its code, and exits 1.
    let (code, _, err) = corral(dir.path(), &["confirm", "no-such-action", "--server", &url]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("confirmation."), "{err}");
}

#[test]
fn corral_audit_shows_an_admin_the_newest_events_and_refuses_anyone_else() {
    let config = "version: 1
preset: workspace_jail
root: $WS
state_dir: .corral
auth:
  tokens:
    - {id: agent, roles: [operator], token_env: CORRAL_IT_AGENT}
    - {id: boss, roles: [admin], token_env: CORRAL_IT_BOSS}
";
    let dir = workspace(Some(config));
    write_notes(dir.path());
    let env = [
        ("CORRAL_IT_AGENT", "agent-token-0123456789abcdef"),
        ("CORRAL_IT_BOSS", "boss-token-0123456789abcdef"),
    ];
    let served = serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &env,
        Stdio::null(),
    );
    let run = |args: &[&str]| {
        let mut args = args.to_vec();
        args.extend(["--server", &served.url]);
        corral_with_env(dir.path(), &args, &env)
    };
    // `corral audit ARGS` as the boss; the agent's `corral call files.list path=.`.
    let audit = |args: &[&str]| {
        let mut args = [&["audit"][..], args].concat();
        args.extend(["--token-env", "CORRAL_IT_BOSS"]);
        run(&args)
    };
    let agent_lists = || {
        run(&[
            "call",
            "files.list",
            "path=.",
            "--token-env",
            "CORRAL_IT_AGENT",
        ])
    };
    let (code, _, err) = agent_lists();
    assert_eq!(code, 0, "{err}");

    let (code, out, err) = audit(&["--limit", "5"]);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.contains("  agent  files.list  ok  200  "),
        "the newest event is the agent's call: {out}"
    );

    let (code, out, _) = audit(&["--limit", "1", "--format", "json"]);
    assert_eq!(code, 0);
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
        unreachable!("--format json prints JSON: {out}")
    };
    assert_eq!(v["events"][0]["op"], "files.list");

    let (code, out, err) = audit(&["--op", "files.read"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("no audit events"),
        "only files.list was called: {out}"
    );

    // The agent's call acted on the world: it is `live`, and no lab run made a `simulation` one.
    let (code, out, err) = audit(&["--purpose", "live", "--limit", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  files.list  ok  200  "), "{out}");
    assert!(out.contains("  run=-  live  "), "{out}");
    let (code, out, err) = audit(&["--purpose", "simulation"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("no audit events"), "{out}");
    let (code, _, err) = audit(&["--purpose", "sim"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("live, simulation"), "{err}");

    // Paging: a full page ends with the `--after` of the next one, which lists the older
    // events and nothing of the first page.
    for _ in 0..2 {
        let (code, _, err) = agent_lists();
        assert_eq!(code, 0, "{err}");
    }
    let (code, page1, err) = audit(&["--limit", "2"]);
    assert_eq!(code, 0, "{err}");
    let Some(after) = page1
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("more: --after "))
    else {
        unreachable!("a full page says how to get the next: {page1}")
    };
    let (code, page2, err) = audit(&["--limit", "2", "--after", after]);
    assert_eq!(code, 0, "{err}");
    let ids = |page: &str| -> Vec<String> {
        page.lines()
            .filter(|l| !l.starts_with("more:"))
            .filter_map(|l| l.split("  ").nth(8).map(str::to_owned))
            .collect()
    };
    let (first, second) = (ids(&page1), ids(&page2));
    assert_eq!(first.len(), 2, "{page1}");
    assert!(!second.is_empty(), "{page2}");
    assert!(
        second.iter().all(|id| !first.contains(id)),
        "{page1}\n{page2}"
    );
    let (code, _, err) = audit(&["--after", "not-a-cursor"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("args.invalid"), "{err}");

    let (code, _, err) = run(&["audit", "--token-env", "CORRAL_IT_AGENT"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("audit.not_permitted"), "{err}");
}

#[test]
fn a_closed_stdout_ends_a_call_quietly_with_141_instead_of_a_panic() {
    // `corral call ... | head -c0`: the reader is gone before corral prints its result.
    let dir = workspace(Some(JAIL));
    write_notes(dir.path());
    let Ok((reader, writer)) = std::io::pipe() else {
        unreachable!("a pipe can be made")
    };
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["call", "--local", "files.list", "path=."])
        .current_dir(dir.path())
        .env_remove("CORRAL_CONFIG")
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output();
    let Ok(out) = out else {
        unreachable!("the corral binary runs")
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(err.is_empty(), "nothing to say on stderr: {err}");
}

#[test]
fn a_hostile_servers_error_cannot_drive_the_terminal() {
    // A server (anyone's) answers a refusal whose code, message and request id carry
    // terminal escapes: `corral call` prints them escaped, never raw.
    let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
        unreachable!("loopback can bind")
    };
    let Ok(addr) = listener.local_addr() else {
        unreachable!("a bound socket has an address")
    };
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut conn, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = r#"{"error":"denied\u001b]0;PWNED\u0007\u001b[2K\rall good","type":"x","code":"x\u001b[31mRED","request_id":"r\u001b[8mhidden"}"#;
            let reply = format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    let dir = workspace(None);
    let url = format!("http://{addr}");
    let (code, out, err) = corral(dir.path(), &["call", "--server", &url, "files.list"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    assert!(
        err.contains("\\u{1b}"),
        "the escapes are shown, escaped: {err:?}"
    );
}
