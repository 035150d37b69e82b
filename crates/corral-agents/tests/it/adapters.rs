//! The adapters: the launch of a turn (argv, environment, codex's config) and the parsing of
//! real recorded output, and of any bytes at all.

use std::path::Path;

use corral_agents::adapter::{Adapter, TurnSpec};
use corral_agents::events::{ChangeKind, MAX_TEXT, SessionEvent, Usage};

fn spec<'a>(program: &'a [String], resume: Option<&'a str>) -> TurnSpec<'a> {
    TurnSpec {
        program,
        model: "gpt-5.1-codex",
        home: Path::new("/state/agents/sessions/s1"),
        proxy_url: "http://127.0.0.1:3128",
        token: "corral-agent-TOKEN",
        resume,
        max_model_turns: 7,
    }
}

#[test]
fn codex_runs_with_its_own_sandbox_off_its_prompt_on_stdin_and_only_the_turns_token() {
    let program = vec!["/opt/codex".to_owned()];
    let l = Adapter::Codex.launch(&spec(&program, None));
    assert_eq!(
        l.argv,
        [
            "/opt/codex",
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "-m",
            "gpt-5.1-codex",
            "--",
            "-"
        ]
    );
    let names: Vec<&str> = l.env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "PATH",
            "HOME",
            "LANG",
            "TMPDIR",
            "CORRAL_AGENT_TOKEN",
            "CODEX_HOME"
        ]
    );
    assert!(
        l.env
            .contains(&("CORRAL_AGENT_TOKEN".into(), "corral-agent-TOKEN".into()))
    );
    let (path, config) = &l.files[0];
    assert_eq!(path, Path::new("/state/agents/sessions/s1/config.toml"));
    for line in [
        "model_provider = \"corral\"",
        "[model_providers.corral]",
        "base_url = \"http://127.0.0.1:3128/v1\"",
        "env_key = \"CORRAL_AGENT_TOKEN\"",
        "wire_api = \"responses\"",
        "[analytics]",
    ] {
        assert!(
            config.lines().any(|l| l == line),
            "{line} missing from:\n{config}"
        );
    }
}

#[test]
fn a_later_codex_turn_resumes_the_clis_own_session() {
    let program = vec!["/opt/codex".to_owned()];
    let l = Adapter::Codex.launch(&spec(&program, Some("01a237ac-b65a")));
    assert_eq!(&l.argv[1..3], ["exec", "resume"]);
    assert_eq!(&l.argv[l.argv.len() - 3..], ["--", "01a237ac-b65a", "-"]);
}

#[test]
fn claude_code_talks_to_corral_as_its_anthropic_base_url_with_the_token_as_its_key() {
    let program = vec!["/opt/claude".to_owned()];
    let l = Adapter::ClaudeCode.launch(&spec(&program, Some("abc")));
    let env = |k: &str| l.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(env("ANTHROPIC_BASE_URL"), Some("http://127.0.0.1:3128"));
    assert_eq!(env("ANTHROPIC_API_KEY"), Some("corral-agent-TOKEN"));
    let argv = l.argv.join(" ");
    assert!(
        argv.starts_with("/opt/claude -p --output-format stream-json"),
        "{argv}"
    );
    assert!(
        argv.contains("--max-turns 7") && argv.ends_with("--resume abc"),
        "{argv}"
    );
    assert!(l.files.is_empty());
}

#[test]
fn real_codex_output_becomes_model_turn_command_message_and_usage() {
    // `codex exec --json` 0.171.0, recorded against a scripted Responses upstream answering two
    // exec_command calls (one writing in its cwd, one writing to /etc) and a message.
    let recorded = include_bytes!("fixtures/codex-0.171.0-exec.jsonl");
    let mut p = Adapter::Codex.parser(1);
    let events: Vec<SessionEvent> = recorded
        .split(|&b| b == b'\n')
        .flat_map(|l| p.line(l))
        .collect();
    let kinds: Vec<&str> = events.iter().map(SessionEvent::kind).collect();
    assert_eq!(
        kinds,
        [
            "error",
            "model_turn",
            "command",
            "command",
            "command",
            "command",
            "message"
        ]
    );
    assert_eq!(
        events[3],
        SessionEvent::Command {
            argv: vec![
                "/bin/bash".into(),
                "-lc".into(),
                "echo in > inside.txt".into()
            ],
            exit: Some(0),
            done: true
        }
    );
    assert_eq!(
        events[6],
        SessionEvent::Message {
            text: "All done.".into()
        }
    );
    assert_eq!(p.thread(), Some("01a237ac-d190-7cd1-b75b-137b90955844"));
    assert_eq!(p.ok(), Some(true));
    assert_eq!(
        p.usage(),
        Usage {
            input_tokens: 30,
            cached_input_tokens: 0,
            output_tokens: 15
        }
    );
}

#[test]
fn codex_file_changes_and_a_failed_turn_are_events() {
    let mut p = Adapter::Codex.parser(2);
    let ev = p.line(br#"{"type":"item.completed","item":{"id":"i","type":"file_change","changes":[{"path":"/w/a.rs","kind":"update"},{"path":"/etc/x","kind":"add"}],"status":"failed"}}"#);
    assert_eq!(
        ev,
        [
            SessionEvent::FileChange {
                path: "/w/a.rs".into(),
                kind: ChangeKind::Update,
                applied: false
            },
            SessionEvent::FileChange {
                path: "/etc/x".into(),
                kind: ChangeKind::Add,
                applied: false
            },
        ]
    );
    let ev = p.line(br#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#);
    assert!(
        matches!(&ev[0], SessionEvent::Error { code, message } if code == "agents.turn_failed" && message == "stream disconnected")
    );
    assert_eq!(p.ok(), Some(false));
}

#[test]
fn claude_code_stream_json_becomes_commands_and_file_changes_once_their_results_come() {
    let mut p = Adapter::ClaudeCode.parser(1);
    let lines: [&[u8]; 4] = [
        br#"{"type":"system","subtype":"init","session_id":"5f1c-aa"}"#,
        br#"{"type":"assistant","message":{"content":[{"type":"text","text":"On it."},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}},{"type":"tool_use","id":"t2","name":"Write","input":{"file_path":"/w/new.txt","content":"x"}}]}}"#,
        br#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"a"},{"type":"tool_result","tool_use_id":"t2","is_error":true,"content":"EROFS"}]}}"#,
        br#"{"type":"result","subtype":"success","is_error":false,"session_id":"5f1c-aa","usage":{"input_tokens":12,"cache_read_input_tokens":3,"output_tokens":4}}"#,
    ];
    let events: Vec<SessionEvent> = lines.iter().flat_map(|l| p.line(l)).collect();
    assert_eq!(
        events,
        [
            SessionEvent::ModelTurn { turn: 1 },
            SessionEvent::Message {
                text: "On it.".into()
            },
            SessionEvent::Command {
                argv: vec!["bash".into(), "-c".into(), "ls".into()],
                exit: None,
                done: false
            },
            SessionEvent::Command {
                argv: vec!["bash".into(), "-c".into(), "ls".into()],
                exit: Some(0),
                done: true
            },
            SessionEvent::FileChange {
                path: "/w/new.txt".into(),
                kind: ChangeKind::Add,
                applied: false
            },
        ]
    );
    assert_eq!(p.thread(), Some("5f1c-aa"));
    assert_eq!(
        p.usage(),
        Usage {
            input_tokens: 12,
            cached_input_tokens: 3,
            output_tokens: 4
        }
    );
}

#[test]
fn any_bytes_at_all_parse_to_bounded_clean_events_without_a_panic() {
    // A small xorshift stream: garbage, truncated JSON, and JSON with hostile strings.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let shapes: [&[u8]; 4] = [
        br#"{"type":"item.completed","item":{"type":"agent_message","text":"#,
        br#"{"type":"item.started","item":{"type":"command_execution","command":"#,
        br#"{"type":"assistant","message":{"content":[{"type":"text","text":"#,
        br#"{"type":"thread.started","thread_id":"#,
    ];
    for adapter in Adapter::ALL {
        let mut p = adapter.parser(1);
        for i in 0..2000 {
            let mut line = shapes[i % 4].to_vec();
            let n = (next() % 300) as usize;
            line.extend((0..n).map(|_| (next() % 256) as u8));
            for ev in p.line(&line) {
                let text = serde_json::to_string(&ev).unwrap();
                assert!(!text.contains('\u{1b}'), "{text}");
            }
        }
    }
    let esc = format!(
        r#"{{"type":"item.completed","item":{{"type":"agent_message","text":"\u001b]0;pwned\u0007{}"}}}}"#,
        "y".repeat(MAX_TEXT * 2)
    );
    let ev = Adapter::Codex.parser(1).line(esc.as_bytes());
    let SessionEvent::Message { text } = &ev[0] else {
        panic!("{ev:?}")
    };
    assert!(text.starts_with("?]0;pwned?y"), "{}", &text[..20]);
    assert_eq!(text.chars().count(), MAX_TEXT + 1);
}

#[test]
fn real_claude_code_output_becomes_model_turns_a_finished_command_a_message_and_usage() {
    // `claude -p --output-format stream-json --verbose` 2.1.328 (its native binary), its
    // ANTHROPIC_BASE_URL a scripted Messages upstream answering a Bash tool call writing a file
    // in its cwd, then a text.
    let recorded = include_bytes!("fixtures/claude-code-2.1.328-print.jsonl");
    let mut p = Adapter::ClaudeCode.parser(1);
    let events: Vec<SessionEvent> = recorded
        .split(|&b| b == b'\n')
        .flat_map(|l| p.line(l))
        .collect();
    let argv = vec![
        "bash".to_owned(),
        "-c".to_owned(),
        "echo in > inside.txt".to_owned(),
    ];
    assert_eq!(
        events,
        [
            SessionEvent::ModelTurn { turn: 1 },
            SessionEvent::Command {
                argv: argv.clone(),
                exit: None,
                done: false
            },
            SessionEvent::Command {
                argv,
                exit: Some(0),
                done: true
            },
            SessionEvent::ModelTurn { turn: 1 },
            SessionEvent::Message {
                text: "All done.".into()
            },
        ]
    );
    assert_eq!(p.thread(), Some("ede8d63f-12b7-42a8-9884-407afec88555"));
    assert_eq!(p.ok(), Some(true));
    assert_eq!(
        p.usage(),
        Usage {
            input_tokens: 20,
            cached_input_tokens: 0,
            output_tokens: 10
        }
    );
}
