//! Attacks on agent sessions (helper Z, second round): what a hostile turn can leave behind for
//! the host. Each test names the property that should hold; they fail on the code they were
//! written against.

use std::time::Duration;

use corral_agents::{Permissions, SessionLimits};
use serde_json::json;

use crate::support::{Script, call, dirs, message, path_str, session, turn};

#[tokio::test]
async fn a_turn_cannot_make_the_host_write_outside_the_agents_home_through_a_symlink() {
    let d = dirs();
    let victim = d.outside.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    // Turn 1: the agent replaces its config file (which the host rewrites before every turn)
    // with a symlink to a file outside its sandbox.
    let cmd = format!(
        "rm -f \"$CODEX_HOME/config.toml\" && ln -s '{}' \"$CODEX_HOME/config.toml\"",
        path_str(&victim)
    );
    let script = Script::new(vec![
        call("exec_command", json!({"cmd": cmd})),
        message("done"),
        message("second"),
    ]);
    let limits = SessionLimits {
        turn_timeout: Duration::from_secs(60),
        ..SessionLimits::default()
    };
    let s = session(&d, &script, Permissions::WorkspaceWrite, limits, 5);
    let (report, events) = turn(&s, "plant the link").await;
    assert!(report.ok, "{report:?} {events:?}");
    assert!(
        d.home
            .join("config.toml")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink(),
        "the setup planted no symlink: {events:?}"
    );
    // Turn 2: the host writes the CLI's config (with the turn's token) before it starts.
    let (tx, _rx) = tokio::sync::mpsc::channel(64);
    let _ = s.run_turn("again", tx).await;
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious",
        "the host followed the agent's symlink and overwrote a file outside the sandbox"
    );
}

#[tokio::test]
async fn an_agent_cannot_read_a_file_outside_its_workdir_and_home() {
    let d = dirs();
    let secret = d.outside.join("secret.txt");
    std::fs::write(&secret, "s3cr3t-outside").unwrap();
    let cmd = format!("cat '{}'", path_str(&secret));
    let script = Script::new(vec![
        call("exec_command", json!({"cmd": cmd})),
        message("done"),
    ]);
    let limits = SessionLimits {
        turn_timeout: Duration::from_secs(60),
        ..SessionLimits::default()
    };
    let s = session(&d, &script, Permissions::WorkspaceWrite, limits, 5);
    let (report, events) = turn(&s, "read outside").await;
    assert!(report.ok, "{report:?} {events:?}");
    // What the command printed went back to the model as the call's output.
    let all = format!("{events:?} {:?}", script.asked.lock().unwrap());
    assert!(all.contains("No such file"), "{all}");
    assert!(!all.contains("s3cr3t-outside"), "{all}");
}
