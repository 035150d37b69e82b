//! Sessions in the real `linux` backend, with the fake agent CLI whose model is the test's
//! scripted upstream on the session's link: what the agent may write, reach and use, and what
//! its output can (not) do to the host. They run as root and as a normal user.

use std::time::Duration;

use corral_agents::events::{ChangeKind, MAX_EVENTS};
use corral_agents::{Permissions, SessionEvent, SessionLimits, codes};
use serde_json::json;

use crate::support::{
    Script, call, config, dirs, fake_codex, message, path_str, session, session_from, session_with,
    turn,
};

fn limits() -> SessionLimits {
    SessionLimits {
        turn_timeout: Duration::from_secs(60),
        ..SessionLimits::default()
    }
}

fn errors(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Error { code, .. } => Some(code.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_agents_write_in_the_workdir_lands_and_one_outside_is_refused_by_the_sandbox() {
    let d = dirs();
    let inside = d.workdir.join("inside.txt");
    let outside = d.outside.join("outside.txt");
    let script = Script::new(vec![
        call(
            "write_file",
            json!({"path": path_str(&inside), "content": "in"}),
        ),
        call(
            "write_file",
            json!({"path": path_str(&outside), "content": "out"}),
        ),
        call("exec_command", json!({"cmd": "echo ran > by-command.txt"})),
        message("All done."),
    ]);
    let s = session(&d, &script, Permissions::WorkspaceWrite, limits(), 5);
    let (report, events) = turn(&s, "write two files").await;
    assert!(report.ok, "{report:?} {events:?}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "in");
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("by-command.txt")).unwrap(),
        "ran\n"
    );
    assert!(!outside.exists(), "the agent wrote outside its workdir");
    let changes: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::FileChange {
                path,
                kind: ChangeKind::Add,
                applied,
            } => Some((path.clone(), *applied)),
            _ => None,
        })
        .collect();
    assert_eq!(
        changes,
        [(path_str(&inside), true), (path_str(&outside), false)]
    );
    assert!(events.contains(&SessionEvent::Command {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "echo ran > by-command.txt".into()
        ],
        exit: Some(0),
        done: true
    }));
    assert!(events.contains(&SessionEvent::Message {
        text: "All done.".into()
    }));
    assert!(
        matches!(events.first(), Some(SessionEvent::ModelTurn { turn: 1 })),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some(SessionEvent::Done { turn: 1, ok: true, usage }) if usage.input_tokens == 40),
        "{events:?}"
    );
    // Every model call carried the turn's token, and the turn is attested.
    let asked = script.asked.lock().unwrap();
    assert_eq!(asked.len(), 4);
    assert!(asked.iter().all(|(_, authorized)| *authorized));
    assert_eq!(asked[0].0["model"], "gpt-test");
    assert!(report.attestation.isolated, "{:?}", report.attestation);
    assert!(
        report
            .attestation
            .primitives
            .iter()
            .any(|p| p == "netns:corral-link"),
        "{:?}",
        report.attestation.primitives
    );
    assert_eq!(s.attestations().len(), 1);
}

#[tokio::test]
async fn a_read_only_session_cannot_change_its_workdir() {
    let d = dirs();
    let target = d.workdir.join("new.txt");
    let script = Script::new(vec![call(
        "write_file",
        json!({"path": path_str(&target), "content": "x"}),
    )]);
    let s = session(&d, &script, Permissions::ReadOnly, limits(), 5);
    let (_, events) = turn(&s, "try to write").await;
    assert!(!target.exists());
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SessionEvent::FileChange { applied: false, .. })),
        "{events:?}"
    );
}

/// The exit status of each finished command of `events`, in order.
fn exits(events: &[SessionEvent]) -> Vec<Option<i32>> {
    events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Command {
                exit, done: true, ..
            } => Some(*exit),
            _ => None,
        })
        .collect()
}

/// A workspace-write session of the fake codex whose changes outside `<workdir>/src` are held
/// in `<outside>/holds`.
fn holding_session(
    d: &crate::support::Dirs,
    script: &std::sync::Arc<Script>,
) -> corral_agents::Session {
    let mut cfg = config(fake_codex(), d, Permissions::WorkspaceWrite, limits(), 5);
    cfg.confirm_writes = Some(corral_agents::ConfirmWrites {
        free: vec![d.workdir.join("src")],
        holds: d.outside.join("holds"),
    });
    session_from(cfg, script)
}

#[tokio::test]
async fn writes_outside_the_free_directories_wait_for_a_person_and_apply_once_approved() {
    let d = dirs();
    std::fs::create_dir_all(d.workdir.join("src")).unwrap();
    std::fs::write(d.workdir.join("old.txt"), "old").unwrap();
    let script = Script::new(vec![
        call(
            "write_file",
            json!({"path": path_str(&d.workdir.join("src/a.rs")), "content": "free"}),
        ),
        call(
            "write_file",
            json!({"path": path_str(&d.workdir.join("README.md")), "content": "held"}),
        ),
        call("exec_command", json!({"cmd": "rm old.txt"})),
        message("done"),
    ]);
    let s = holding_session(&d, &script);
    let (report, events) = turn(&s, "edit").await;
    assert!(report.ok, "{report:?} {events:?}");
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("src/a.rs")).unwrap(),
        "free"
    );
    assert!(!d.workdir.join("README.md").exists(), "held, not applied");
    assert!(
        d.workdir.join("old.txt").exists(),
        "the deletion is held too"
    );
    let hold = report.held.clone().expect("the turn held changes");
    let held = events.iter().find_map(|e| match e {
        SessionEvent::WritesHeld {
            hold: h, changes, ..
        } if *h == hold => Some(changes.clone()),
        _ => None,
    });
    let held: Vec<(String, String)> = held
        .expect("a writes_held event")
        .into_iter()
        .map(|c| (c.path, c.kind))
        .collect();
    assert_eq!(
        held.len(),
        2,
        "README.md written, old.txt deleted: {held:?}"
    );
    assert!(held.contains(&(path_str(&d.workdir.join("README.md")), "write".into())));
    assert!(held.contains(&(path_str(&d.workdir.join("old.txt")), "delete".into())));
    // The events end with `done`, after the hold.
    assert!(matches!(events.last(), Some(SessionEvent::Done { .. })));

    let applied = s
        .apply_hold(&hold, &rebuilt(&d, &hold))
        .await
        .expect("applied");
    assert_eq!(applied.applied, 2, "{applied:?}");
    assert!(applied.whole, "{applied:?}");
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("README.md")).unwrap(),
        "held"
    );
    assert!(!d.workdir.join("old.txt").exists());
}

/// The turn's hold `hold` as the runtime applies it: read into entries (as the store keeps
/// them), then built again in a fresh directory.
fn rebuilt(d: &crate::support::Dirs, hold: &str) -> std::path::PathBuf {
    let reader = corral_agents::hold::HoldReader::new(&d.outside.join("holds").join(hold));
    let mut b = corral_agents::hold::HoldBuilder::new(&d.outside.join("rebuilt")).unwrap();
    for entry in reader {
        b.push(&entry.unwrap()).unwrap();
    }
    b.finish().unwrap()
}

#[tokio::test]
async fn a_hold_whose_entries_change_kind_applies_whole() {
    let d = dirs();
    for dir in ["d/inner", "h/sub", "f"] {
        std::fs::create_dir_all(d.workdir.join(dir)).unwrap();
    }
    std::fs::write(d.workdir.join("h/sub/old"), "old").unwrap();
    std::fs::write(d.workdir.join("plain"), "plain").unwrap();
    std::fs::write(d.workdir.join("old.txt"), "old").unwrap();
    let script = Script::new(vec![
        call(
            "exec_command",
            json!({"cmd": "rm old.txt && rm -rf d && echo file > d && rm -rf h/sub && mkdir h/sub && echo new > h/sub/new && rm plain && mkdir plain && echo in > plain/x"}),
        ),
        message("done"),
    ]);
    let s = holding_session(&d, &script);
    let (report, events) = turn(&s, "reshape").await;
    assert!(report.ok, "{report:?} {events:?}");
    assert!(d.workdir.join("d/inner").is_dir(), "nothing applied yet");
    let hold = report.held.expect("held");
    let applied = s
        .apply_hold(&hold, &rebuilt(&d, &hold))
        .await
        .expect("the whole hold applies");
    assert!(applied.refused.is_empty(), "{applied:?}");
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("d")).unwrap(),
        "file\n"
    );
    assert!(
        !d.workdir.join("h/sub/old").exists(),
        "the replaced directory's old entry went"
    );
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("h/sub/new")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("plain/x")).unwrap(),
        "in\n"
    );
    assert!(!d.workdir.join("old.txt").exists());
}

#[tokio::test]
async fn a_turn_that_writes_only_in_the_free_directories_holds_nothing() {
    let d = dirs();
    let script = Script::new(vec![
        call(
            "exec_command",
            json!({"cmd": "mkdir -p src && echo x > src/x"}),
        ),
        message("done"),
    ]);
    let holds = d.outside.join("holds");
    let s = holding_session(&d, &script);
    let (report, events) = turn(&s, "edit").await;
    assert!(report.ok, "{report:?} {events:?}");
    assert_eq!(report.held, None);
    assert_eq!(
        std::fs::read_to_string(d.workdir.join("src/x")).unwrap(),
        "x\n"
    );
    assert_eq!(
        std::fs::read_dir(&holds).unwrap().count(),
        0,
        "an empty hold is removed"
    );
}

#[tokio::test]
async fn an_agent_with_commands_executes_only_those_programs_and_its_shell() {
    let d = dirs();
    let script = Script::new(vec![
        call("exec_command", json!({"cmd": "ls /"})),
        call("exec_command", json!({"cmd": "cat /etc/hostname"})),
        call("exec_command", json!({"cmd": "echo built in; exit 7"})),
    ]);
    let mut cfg = config(fake_codex(), &d, Permissions::WorkspaceWrite, limits(), 5);
    cfg.commands = vec!["ls".into(), "no-such-program-anywhere".into()];
    let s = session_from(cfg, &script);
    let (report, events) = turn(&s, "look around").await;
    assert!(report.ok, "{report:?} {events:?}");
    assert!(
        report
            .attestation
            .primitives
            .iter()
            .any(|p| p.starts_with("landlock:exec-only(")),
        "{:?}",
        report.attestation.primitives
    );
    let exits = exits(&events);
    assert_eq!(exits[0], Some(0), "`ls` is listed: {events:?}");
    assert_eq!(
        exits[1],
        Some(127),
        "`cat` is not (not even in view): {events:?}"
    );
    assert_eq!(exits[2], Some(7), "the shell itself runs: {events:?}");
    let told: String = script
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|(b, _)| b.to_string())
        .collect();
    assert!(told.contains("cat: not found"), "{told}");
}

#[tokio::test]
async fn the_agent_reaches_only_corrals_link_never_the_hosts_network() {
    let host = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = host.local_addr().unwrap().port();
    // A host server that answers whoever reaches it.
    tokio::spawn(async move {
        while let Ok((mut c, _)) = host.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = c
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nHOST")
                .await;
        }
    });
    let d = dirs();
    let script = Script::new(vec![
        call(
            "exec_command",
            json!({"cmd": format!("curl -sS -m 5 http://127.0.0.1:{port}/")}),
        ),
        call(
            "exec_command",
            json!({"cmd": "curl -sS -m 5 http://1.1.1.1/"}),
        ),
        call(
            "exec_command",
            json!({"cmd": "env | grep -c -i -e proxy -e OPENAI -e ANTHROPIC"}),
        ),
    ]);
    let s = session(&d, &script, Permissions::WorkspaceWrite, limits(), 5);
    let (report, events) = turn(&s, "reach out").await;
    let exits = exits(&events);
    assert_ne!(
        exits[0],
        Some(0),
        "the agent reached the host's loopback: {events:?}"
    );
    assert_ne!(
        exits[1],
        Some(0),
        "the agent reached the internet: {events:?}"
    );
    // No proxy variable, no upstream key: `grep -c` finds nothing and exits 1.
    assert_eq!(exits[2], Some(1), "{events:?}");
    assert!(report.ok, "{report:?}");
}

/// A host server answering `body` to whoever reaches it; its port.
async fn host_server(body: &'static str) -> u16 {
    let host = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = host.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = host.accept().await {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf).await;
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = c.write_all(reply.as_bytes()).await;
        }
    });
    port
}

/// A scope's `network: {allow: [...]}`: the agent reaches the listed host through corral's
/// egress proxy (its proxy variables point there), nothing else, and its model calls still go
/// to corral's link; each connection, allowed or refused, is a `network` event.
#[tokio::test]
async fn an_agent_with_an_allow_list_reaches_the_listed_host_and_nothing_else() {
    let allowed = host_server("PACKAGE INDEX").await;
    let other = host_server("SECRET").await;
    let d = dirs();
    // curl's `--noproxy ''`: these test hosts are on loopback, which `NO_PROXY` exempts (for
    // the link); a real host name goes through the proxy as it is.
    let script = Script::new(vec![
        call(
            "exec_command",
            json!({"cmd": format!("curl -sS -m 5 --noproxy '' http://127.0.0.1:{allowed}/simple/")}),
        ),
        call(
            "exec_command",
            json!({"cmd": format!("curl -sS -m 5 --noproxy '' http://127.0.0.1:{other}/")}),
        ),
        call(
            "exec_command",
            json!({"cmd": format!("curl -sS -m 5 http://127.0.0.1:{other}/")}),
        ),
    ]);
    let allow =
        corral_policy::scope::EgressAllowList::parse(&[format!("127.0.0.1:{allowed}")]).unwrap();
    let s = session_with(
        fake_codex(),
        &d,
        &script,
        Permissions::WorkspaceWrite,
        limits(),
        5,
        Some(allow),
    );
    let (report, events) = turn(&s, "fetch the index").await;
    assert!(
        report.ok,
        "the model calls went through the link: {report:?} {events:?}"
    );
    assert!(
        report
            .attestation
            .primitives
            .iter()
            .any(|p| p == "netns:corral-link+egress-proxy"),
        "{:?}",
        report.attestation.primitives
    );
    let exits = exits(&events);
    assert_eq!(exits[0], Some(0), "the listed host: {events:?}");
    assert_ne!(
        exits[2],
        Some(0),
        "loopback, straight: nothing listens in the sandbox"
    );
    let answers = script.asked.lock().unwrap().clone();
    let told: String = answers.iter().map(|(b, _)| b.to_string()).collect();
    assert!(told.contains("PACKAGE INDEX"), "{told}");
    assert!(!told.contains("SECRET"), "{told}");
    assert!(told.contains("egress.denied"), "{told}");
    let network: Vec<(u16, bool)> = events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Network { port, allowed, .. } => Some((*port, *allowed)),
            _ => None,
        })
        .collect();
    assert_eq!(network, vec![(allowed, true), (other, false)], "{events:?}");
    let refused = events.iter().find_map(|e| match e {
        SessionEvent::Network {
            allowed: false,
            reason,
            ..
        } => reason.clone(),
        _ => None,
    });
    assert!(
        refused.as_deref().is_some_and(|r| r.contains("allow")),
        "the refusal says why: {refused:?}"
    );
}

#[tokio::test]
async fn a_memory_hog_is_killed_and_its_turn_ends_failed() {
    let d = dirs();
    let script = Script::new(vec![call("hog", json!({"mb": 400}))]);
    let lim = SessionLimits {
        default_memory: 64 * 1024 * 1024,
        ..limits()
    };
    let s = session(&d, &script, Permissions::WorkspaceWrite, lim, 5);
    let (report, events) = turn(&s, "eat memory").await;
    assert!(!report.ok && !report.timed_out, "{report:?}");
    assert!(
        errors(&events).contains(&codes::AGENTS_TURN_FAILED.to_owned()),
        "{events:?}"
    );
    assert!(matches!(
        events.last(),
        Some(SessionEvent::Done { ok: false, .. })
    ));
}

#[tokio::test]
async fn a_turn_over_its_time_limit_is_ended() {
    let d = dirs();
    let script = Script::new(vec![call("exec_command", json!({"cmd": "sleep 60"}))]);
    let lim = SessionLimits {
        turn_timeout: Duration::from_secs(3),
        ..limits()
    };
    let s = session(&d, &script, Permissions::WorkspaceWrite, lim, 5);
    let (report, events) = turn(&s, "wait forever").await;
    assert!(report.timed_out && !report.ok, "{report:?}");
    assert!(
        errors(&events).contains(&codes::AGENTS_TIMEOUT.to_owned()),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_session_resumes_its_cli_session_each_turn_and_stops_at_max_turns() {
    let d = dirs();
    let script = Script::new(vec![message("first"), message("second")]);
    let s = session(&d, &script, Permissions::WorkspaceWrite, limits(), 2);
    let (r1, _) = turn(&s, "task one").await;
    let (r2, e2) = turn(&s, "then this").await;
    assert!(r1.ok && r2.ok);
    assert!(e2.contains(&SessionEvent::Message {
        text: "second".into()
    }));
    assert!(matches!(
        e2.last(),
        Some(SessionEvent::Done { turn: 2, .. })
    ));
    // The second model call saw both prompts: the CLI resumed its own session.
    let texts: Vec<String> = script.asked.lock().unwrap()[1].0["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"][0]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(texts, ["task one", "then this"]);
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let e = s.run_turn("a third", tx).await.unwrap_err();
    assert_eq!(e.code, codes::AGENTS_MAX_TURNS);
    assert!(e.message.contains("used its 2 turns"), "{}", e.message);
    assert_eq!(s.turns(), 2);
}

/// A session built afresh (another process, after a restart) resumes the CLI's own session
/// from the id the last turn reported, as the store keeps it; an id the CLI could not have
/// made (an option, say) is ignored and the turn starts a new CLI session.
#[tokio::test]
async fn a_fresh_session_resumes_the_cli_session_its_last_turn_reported() {
    let d = dirs();
    let script = Script::new(vec![message("first"), message("second"), message("third")]);
    let first = session(&d, &script, Permissions::WorkspaceWrite, limits(), 5);
    let (r1, _) = turn(&first, "task one").await;
    let thread = r1.thread.clone();
    assert!(thread.is_some(), "the CLI reported its session: {r1:?}");
    drop(first);
    let texts = |i: usize| -> Vec<String> {
        script.asked.lock().unwrap()[i].0["input"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["content"][0]["text"].as_str().map(str::to_owned))
            .collect()
    };
    let again = session(&d, &script, Permissions::WorkspaceWrite, limits(), 5);
    again.resume_from(thread.as_deref());
    let (r2, _) = turn(&again, "then this").await;
    assert!(r2.ok, "{r2:?}");
    assert_eq!(texts(1), ["task one", "then this"]);
    let hostile = session(&d, &script, Permissions::WorkspaceWrite, limits(), 5);
    hostile.resume_from(Some("--last"));
    let (r3, _) = turn(&hostile, "fresh start").await;
    assert!(r3.ok, "{r3:?}");
    assert_eq!(texts(2), ["fresh start"]);
}

#[tokio::test]
async fn a_second_message_while_a_turn_runs_is_refused() {
    let d = dirs();
    let script = Script::new(vec![call("exec_command", json!({"cmd": "sleep 2"}))]);
    let s = session(&d, &script, Permissions::WorkspaceWrite, limits(), 5);
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let first = s.run_turn("slow", tx);
    let second = async {
        // Once the first turn streams, it holds the session.
        let _ = rx.recv().await;
        let (tx2, _rx2) = tokio::sync::mpsc::channel(1);
        let r = s.run_turn("meanwhile", tx2).await;
        while rx.recv().await.is_some() {}
        r
    };
    let (a, b) = tokio::join!(first, second);
    assert!(a.is_ok());
    assert_eq!(b.unwrap_err().code, codes::AGENTS_TURN_BUSY);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_hostile_output_stream_is_cut_cleaned_and_reported_without_hurting_the_host() {
    let d = dirs();
    let escapes = br#"{"type":"item.completed","item":{"type":"agent_message","text":"\u001b[2J\u001b]0;owned\u0007hi"}}"#;
    let mut raw = escapes.to_vec();
    raw.push(b'\n');
    raw.extend_from_slice(b"\xff\xfe not utf-8 \x1b[31m\n");
    let script = Script::new(vec![
        call("emit_raw", json!({"hex": hex(&raw), "times": 1})),
        // A 3 MiB line, then a flood of valid events.
        call(
            "emit_raw",
            json!({"hex": hex(&[b'x'; 1024]), "times": 3 * 1024}),
        ),
        call(
            "emit_raw",
            json!({"hex": hex(b"\n{\"type\":\"turn.started\"}\n"), "times": MAX_EVENTS + 100}),
        ),
    ]);
    let s = session(&d, &script, Permissions::WorkspaceWrite, limits(), 5);
    let (report, events) = turn(&s, "be hostile").await;
    assert!(
        events.contains(&SessionEvent::Message {
            text: "?[2J?]0;owned?hi".into()
        }),
        "{:?}",
        &events[..3]
    );
    let outputs: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Error { code, message } if code == codes::AGENTS_OUTPUT => {
                Some(message.as_str())
            }
            _ => None,
        })
        .collect();
    assert!(
        outputs.iter().any(|m| m.contains("not UTF-8")),
        "{outputs:?}"
    );
    assert!(
        outputs.iter().any(|m| m.contains("over 1048576 bytes")),
        "{outputs:?}"
    );
    assert!(
        outputs.iter().any(|m| m.contains("corral ended the turn")),
        "{outputs:?}"
    );
    assert!(report.killed_for_output && !report.ok, "{report:?}");
    assert!(events.len() <= MAX_EVENTS + 2, "{}", events.len());
    assert!(matches!(
        events.last(),
        Some(SessionEvent::Done { ok: false, .. })
    ));
}

#[tokio::test]
async fn a_consumer_that_stops_reading_events_does_not_stop_the_time_limit() {
    let d = dirs();
    let flood = hex(b"{\"type\":\"turn.started\"}\n");
    let script = Script::new(vec![
        call("emit_raw", json!({"hex": flood, "times": 200})),
        call("exec_command", json!({"cmd": "sleep 60"})),
    ]);
    let lim = SessionLimits {
        turn_timeout: Duration::from_secs(3),
        ..limits()
    };
    let s = session(&d, &script, Permissions::WorkspaceWrite, lim, 5);
    // Room for one event, and nobody reads until the turn is over.
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let report = tokio::time::timeout(Duration::from_secs(60), s.run_turn("flood", tx))
        .await
        .expect("the turn ended at its time limit, not when its events were read")
        .unwrap();
    assert!(report.timed_out, "{report:?}");
    // What did not fit once the sandbox was gone is dropped and counted, never waited for.
    assert!(report.events_dropped > 0, "{report:?}");
    let mut n = 0;
    while rx.recv().await.is_some() {
        n += 1;
    }
    assert_eq!(n, 1);
}

/// `permissions: full`: the agent's write outside its workdir lands on the host; corral's state
/// (but for the agent's own home), its config file, a `protected:` glob and a set-id bit stay
/// out of reach; the network is still only corral's link; the turn attests `fs:unconfined`. A
/// `workspace-write` session of the same agent still writes nothing outside.
#[tokio::test]
async fn a_full_session_changes_the_host_beyond_its_workdir_but_never_corrals_own_places() {
    let port = host_server("HOST").await;
    let d = dirs();
    let tmp = d.workdir.parent().unwrap().to_path_buf();
    let state = tmp.join("state");
    let home = state.join("agents").join("homes").join("s1");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(state.join("corral.db"), "the database").unwrap();
    let config_file = tmp.join("corral.yaml");
    std::fs::write(&config_file, "tokens: []\n").unwrap();
    let (beyond, secret, tool) = (
        d.outside.join("beyond.txt"),
        d.outside.join("key.secret"),
        d.outside.join("tool"),
    );
    let script = Script::new(vec![
        call(
            "write_file",
            json!({"path": path_str(&beyond), "content": "beyond"}),
        ),
        call(
            "write_file",
            json!({"path": path_str(&state.join("corral.db")), "content": "owned"}),
        ),
        call(
            "write_file",
            json!({"path": path_str(&config_file), "content": "owned"}),
        ),
        call(
            "write_file",
            json!({"path": path_str(&secret), "content": "k"}),
        ),
        call(
            "exec_command",
            json!({"cmd": format!("printf x > {0}; chmod 4755 {0}", path_str(&tool))}),
        ),
        call(
            "exec_command",
            json!({"cmd": format!("curl -sS -m 5 http://127.0.0.1:{port}/")}),
        ),
        call(
            "exec_command",
            json!({"cmd": format!("cat {}", path_str(&state.join("corral.db")))}),
        ),
        message("Done."),
    ]);
    let mut cfg = config(fake_codex(), &d, Permissions::Full, limits(), 5);
    cfg.home = home.clone();
    cfg.keep_out = vec![state.clone()];
    cfg.protected = corral_policy::Protected::compile(corral_policy::ProtectedSpec {
        globs: vec!["*.secret".into()],
        paths: vec![path_str(&config_file)],
        ..Default::default()
    })
    .unwrap();
    let s = session_from(cfg, &script);
    let (report, events) = turn(&s, "change the machine").await;
    assert!(report.ok, "{report:?} {events:?}");
    assert_eq!(std::fs::read_to_string(&beyond).unwrap(), "beyond");
    assert_eq!(
        std::fs::read_to_string(state.join("corral.db")).unwrap(),
        "the database"
    );
    assert_eq!(
        std::fs::read_to_string(&config_file).unwrap(),
        "tokens: []\n"
    );
    assert!(!secret.exists(), "a protected glob was written");
    // The agent wrote it in its sandbox (and says so); the turn's events say it never landed.
    let refused: Vec<&corral_exec::RefusedChange> = events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::ChangesRefused { changes, .. } => Some(changes),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(
        refused
            .iter()
            .any(|c| c.path == path_str(&secret) && c.code == "policy.path_denied"),
        "{events:?}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&tool).unwrap().permissions().mode();
    assert_eq!(mode & 0o7000, 0, "a set-id bit reached the host: {mode:o}");
    let exits = exits(&events);
    assert_ne!(exits[0], Some(0), "chmod 4755 succeeded: {events:?}");
    assert_ne!(exits[1], Some(0), "the agent reached the host: {events:?}");
    assert_ne!(
        exits[2],
        Some(0),
        "the agent read corral's state: {events:?}"
    );
    let p = &report.attestation.primitives;
    assert!(p.iter().any(|x| x == "fs:unconfined"), "{p:?}");
    assert!(p.iter().any(|x| x == "netns:corral-link"), "{p:?}");
    // The agent's own files in its home (the CLI's session) did reach the host.
    assert!(std::fs::read_dir(&home).unwrap().next().is_some());

    // workspace-write: the same write outside its workdir does not land, nor is it attested.
    std::fs::remove_file(&beyond).unwrap();
    let script = Script::new(vec![call(
        "write_file",
        json!({"path": path_str(&beyond), "content": "beyond"}),
    )]);
    let s = session(&d, &script, Permissions::WorkspaceWrite, limits(), 5);
    let (report, events) = turn(&s, "write outside").await;
    assert!(report.ok, "{report:?} {events:?}");
    assert!(!beyond.exists(), "a workspace-write agent wrote outside");
    let p = &report.attestation.primitives;
    assert!(!p.iter().any(|x| x == "fs:unconfined"), "{p:?}");
}
