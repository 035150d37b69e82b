//! SIGHUP reloads `corral serve`'s config file: a new policy and new `mcp_servers` apply
//! without a restart (a removed upstream server stops, an added one starts and is mounted), and
//! an invalid file keeps the last good config and logs why.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::call::{Served, serve_with};
use crate::upstream::fixture_and_dir;
use crate::{corral, corral_with_env, workspace};

const TOKEN: &str = "reload-test-token-0123456789";

/// A config with one upstream server `name` (the fixture), whose `read_file` is allowed.
/// `marker` is a path that never exists, passed to the fixture so its process can be found.
fn config(name: &str, marker: &Path) -> String {
    let (fx, bin_dir) = fixture_and_dir();
    format!(
        r#"version: 1
state_dir: .corral
auth:
  tokens:
    - {{id: agent, roles: [operator], token_env: CORRAL_IT_RELOAD_TOKEN}}
mcp_servers:
  {name}:
    command: ["{fx}", --fail-if-exists, "{marker}"]
    read_paths: ["{bin_dir}", "$WS"]
    tools:
      read_file: {{effects: [read], idempotent: true}}
rules:
  - allow: [mcp.{name}.read_file]
"#,
        fx = fx,
        marker = marker.display(),
    )
}

/// `corral call OP path=PATH --server URL` with the agent's token: (exit code, stdout, stderr).
fn read_file(dir: &Path, url: &str, op: &str, path: &Path) -> (i32, String, String) {
    let arg = format!("path={}", path.display());
    let args = [
        "call",
        op,
        &arg,
        "--server",
        url,
        "--token-env",
        "CORRAL_IT_RELOAD_TOKEN",
    ];
    corral_with_env(dir, &args, &[("CORRAL_IT_RELOAD_TOKEN", TOKEN)])
}

/// Whether a process whose command line contains `marker` is running.
fn running(marker: &Path) -> bool {
    let marker = marker.to_string_lossy();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        unreachable!("/proc is readable")
    };
    procs.flatten().any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(&*marker))
            .unwrap_or(false)
    })
}

/// Polls `check` every 100 ms for at most `secs` seconds.
fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn sighup(served: &Served) {
    let status = Command::new("kill")
        .args(["-HUP", &served.child.id().to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()), "kill -HUP failed");
}

#[test]
fn sighup_applies_a_new_policy_and_new_mcp_servers_and_keeps_the_last_good_config() {
    let dir = workspace(None);
    let root = dir.path();
    let ws = root.join("ws");
    let notes = ws.join("notes.txt");
    let _ = std::fs::write(&notes, "reloaded notes\n");
    // Never created: only a way to find each server's process by its command line.
    let fx_marker: PathBuf = root.join("never-fx");
    let fy_marker: PathBuf = root.join("never-fy");
    let write_config = |text: &str| {
        let text = text.replace("$WS", &ws.to_string_lossy());
        assert!(std::fs::write(root.join("corral.yaml"), text).is_ok());
    };
    write_config(&config("fx", &fx_marker));
    let Ok(log) = std::fs::File::create(root.join("serve.log")) else {
        unreachable!("the log file can be made")
    };
    let served = serve_with(
        root,
        &["--config", "corral.yaml"],
        &[("CORRAL_IT_RELOAD_TOKEN", TOKEN), ("CORRAL_LOG", "info")],
        Stdio::from(log),
    );
    let url = served.url.clone();

    let up = eventually(15, || {
        read_file(root, &url, "mcp.fx.read_file", &notes).0 == 0
    });
    assert!(up, "mcp.fx.read_file never worked before the reload");
    assert!(running(&fx_marker), "the fx server runs");

    // Rename the server: fx must stop and vanish from the API, fy must start and be callable.
    write_config(&config("fy", &fy_marker));
    sighup(&served);
    let fy_up = eventually(15, || {
        let (code, out, _) = read_file(root, &url, "mcp.fy.read_file", &notes);
        code == 0 && out.contains("reloaded notes")
    });
    assert!(
        fy_up,
        "mcp.fy.read_file did not work within 15 s of the reload"
    );
    let (code, _, err) = read_file(root, &url, "mcp.fx.read_file", &notes);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("op.not_enabled"), "{err}");
    assert!(
        eventually(10, || !running(&fx_marker)),
        "the removed server's process still runs 10 s after the reload"
    );
    assert!(running(&fy_marker), "the added server runs");

    // A file that would leave the server open with an op that runs programs: refused like
    // start-up would refuse it, and the tokens stay required.
    write_config(
        "version: 1
custom:
  tools.hello:
    argv: [/bin/echo, hello]
    effects: [exec]
rules:
  - allow: [tools.hello]
",
    );
    sighup(&served);
    let log = || std::fs::read_to_string(root.join("serve.log")).unwrap_or_default();
    let refused_open = eventually(10, || log().contains("no auth is configured"));
    assert!(
        refused_open,
        "the reload to open mode was not refused: {}",
        log()
    );
    let (code, _, err) = corral(root, &["call", "tools.hello", "--server", &url]);
    assert_eq!(
        code, 1,
        "a call without a token must still be refused: {err}"
    );
    assert!(err.contains("auth.missing"), "{err}");

    // Moving the state dir: refused (the running store stays where it is, and protected).
    write_config(&config("fy", &fy_marker).replace("state_dir: .corral", "state_dir: .corral2"));
    sighup(&served);
    let refused_move = eventually(10, || log().contains("`state_dir` changed"));
    assert!(
        refused_move,
        "the state_dir change was not refused: {}",
        log()
    );

    // An invalid file: refused, logged with its reason, and the last good config stays.
    let refusals = log().matches("config reload refused").count();
    write_config("version: 1\nrules:\n  - allow: 42\n");
    sighup(&served);
    let logged = eventually(10, || {
        log().matches("config reload refused").count() > refusals
    });
    assert!(logged, "no second `config reload refused` in the log");
    let (code, out, err) = read_file(root, &url, "mcp.fy.read_file", &notes);
    assert_eq!(code, 0, "the last good config was not kept: {err}");
    assert!(out.contains("reloaded notes"), "{out}");
    assert!(
        running(&fy_marker),
        "the last good config's server still runs"
    );
    drop(served);
}

#[test]
fn sighup_does_not_stop_a_server_started_from_flags() {
    let dir = workspace(None);
    let ws = dir.path().join("ws").to_string_lossy().into_owned();
    let served = serve_with(
        dir.path(),
        &["--preset", "workspace_jail", "--root", &ws],
        &[],
        Stdio::null(),
    );
    sighup(&served);
    std::thread::sleep(Duration::from_millis(500));
    let (code, _, err) = corral(dir.path(), &["healthcheck", "--server", &served.url]);
    assert_eq!(
        code, 0,
        "SIGHUP stopped a server that has no config file to reload: {err}"
    );
}
