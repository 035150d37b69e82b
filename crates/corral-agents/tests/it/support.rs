//! What the session tests share: a scripted Responses upstream served on the session's link
//! (standing in for corral's LLM proxy), the fake agent as an installed CLI, a session maker.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use corral_agents::{
    Adapter, Installed, Permissions, ProxyLinks, Session, SessionConfig, SessionEvent,
    SessionLimits, TokenDigest, TurnReport,
};
use corral_exec::CorralLink;
use corral_exec::linux::LinuxBackend;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the scripted upstream answers, in order (a function call or a message item each), and
/// what it was asked.
#[derive(Debug, Default)]
pub struct Script {
    pub answers: Mutex<VecDeque<Value>>,
    /// Each request's body, and whether its token was the turn's.
    pub asked: Mutex<Vec<(Value, bool)>>,
}

impl Script {
    pub fn new(answers: Vec<Value>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into()),
            asked: Mutex::default(),
        })
    }
}

/// A function call item.
pub fn call(name: &str, args: Value) -> Value {
    json!({"type": "function_call", "id": "fc", "call_id": format!("call_{name}"), "name": name,
           "arguments": args.to_string()})
}

/// An assistant message item.
pub fn message(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
}

/// Serves `/v1/responses` from the script on every turn's link, checking each turn's token.
#[derive(Debug)]
pub struct ScriptedProxy(pub Arc<Script>);

impl ProxyLinks for ScriptedProxy {
    fn link(&self, _session: &str, token: TokenDigest) -> CorralLink {
        let script = Arc::clone(&self.0);
        let token = Arc::new(token);
        CorralLink::new(move |conn| {
            let (script, token) = (Arc::clone(&script), Arc::clone(&token));
            Box::pin(async move { serve(conn, &script, &token).await })
        })
    }
}

async fn serve(mut conn: tokio::net::TcpStream, script: &Script, token: &TokenDigest) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let (head, body) = loop {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..i]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            while raw.len() < i + 4 + len {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => raw.extend_from_slice(&buf[..n]),
                }
            }
            break (head, raw[i + 4..i + 4 + len].to_vec());
        }
    };
    let authorized = head.lines().any(|l| {
        l.to_lowercase().starts_with("authorization:")
            && l.split_once("Bearer ")
                .is_some_and(|(_, t)| token.accepts(t.trim()))
    });
    let is_messages = head.starts_with("POST /v1/messages");
    if is_messages && !head.contains("count_tokens") {
        let authorized = head.lines().any(|l| {
            l.to_lowercase().starts_with("x-api-key:")
                && l.split_once(':')
                    .is_some_and(|(_, t)| token.accepts(t.trim()))
        });
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let stream = body["stream"] == true;
        script.asked.lock().unwrap().push((body, authorized));
        let item = script
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| message("done"));
        let _ = conn
            .write_all(anthropic(&item, authorized, stream).as_bytes())
            .await;
        let _ = conn.shutdown().await;
        return;
    }
    let is_responses = head.starts_with("POST /v1/responses ");
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if is_responses {
        script.asked.lock().unwrap().push((body, authorized));
    }
    let reply = if !is_responses {
        let b = r#"{"error":{"message":"not scripted"}}"#;
        format!(
            "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        )
    } else if !authorized {
        let b = r#"{"error":{"message":"bad token"}}"#;
        format!(
            "HTTP/1.1 401 Unauthorized\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        )
    } else {
        let item = script
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| message("done"));
        let usage = json!({"input_tokens": 10, "output_tokens": 5, "total_tokens": 15});
        let mut b = String::new();
        for ev in [
            json!({"type": "response.created", "response": {"id": "r"}}),
            json!({"type": "response.output_item.done", "item": item}),
            json!({"type": "response.completed", "response": {"id": "r", "usage": usage}}),
        ] {
            b.push_str(&format!(
                "event: {}\ndata: {ev}\n\n",
                ev["type"].as_str().unwrap()
            ));
        }
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        )
    };
    let _ = conn.write_all(reply.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// The fake agent CLI, as an installed codex.
pub fn fake_codex() -> Installed {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_corral-fake-agent"));
    let dir = exe.parent().unwrap().to_path_buf();
    Installed::at(
        Adapter::Codex,
        "fake",
        dir,
        vec![exe.to_string_lossy().into_owned()],
    )
}

pub fn backend() -> Arc<LinuxBackend> {
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_corral-agents-sandbox-helper"));
    // As the server makes it (`corral_runtime`'s `agents_backend`): a turn writes through the
    // copy-on-write layer, applied when it ends.
    Arc::new(
        LinuxBackend::new(helper)
            .with_warm_pool(0)
            .with_attached_write_layer(),
    )
}

/// A workdir, a place outside it, and the agent's home, in one temporary directory.
pub struct Dirs {
    _tmp: tempfile::TempDir,
    pub workdir: PathBuf,
    pub outside: PathBuf,
    pub home: PathBuf,
}

pub fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let (workdir, outside, home) = (
        tmp.path().join("work"),
        tmp.path().join("outside"),
        tmp.path().join("home"),
    );
    for d in [&workdir, &outside, &home] {
        std::fs::create_dir(d).unwrap();
    }
    Dirs {
        _tmp: tmp,
        workdir,
        outside,
        home,
    }
}

pub fn session(
    d: &Dirs,
    script: &Arc<Script>,
    permissions: Permissions,
    limits: SessionLimits,
    max_turns: u32,
) -> Session {
    session_of(fake_codex(), d, script, permissions, limits, max_turns)
}

/// A session of `cli` (the fake agent, or the real codex).
pub fn session_of(
    cli: Installed,
    d: &Dirs,
    script: &Arc<Script>,
    permissions: Permissions,
    limits: SessionLimits,
    max_turns: u32,
) -> Session {
    session_with(cli, d, script, permissions, limits, max_turns, None)
}

/// A session of `cli` that may also reach `network` through corral's egress proxy.
pub fn session_with(
    cli: Installed,
    d: &Dirs,
    script: &Arc<Script>,
    permissions: Permissions,
    limits: SessionLimits,
    max_turns: u32,
    network: Option<corral_policy::scope::EgressAllowList>,
) -> Session {
    let mut cfg = config(cli, d, permissions, limits, max_turns);
    cfg.network = network;
    session_from(cfg, script)
}

/// The config of a test session (no network beyond the link, no `commands`).
pub fn config(
    cli: Installed,
    d: &Dirs,
    permissions: Permissions,
    limits: SessionLimits,
    max_turns: u32,
) -> SessionConfig {
    SessionConfig {
        id: "s1".into(),
        cli,
        model: "gpt-test".into(),
        workdir: d.workdir.clone(),
        permissions,
        max_turns,
        max_model_turns: 10,
        home: d.home.clone(),
        limits,
        protected: corral_policy::Protected::default(),
        network: None,
        commands: Vec::new(),
        confirm_writes: None,
        keep_out: Vec::new(),
    }
}

/// The session of `cfg`, its model answers from `script`.
pub fn session_from(cfg: SessionConfig, script: &Arc<Script>) -> Session {
    Session::new(cfg, backend(), Arc::new(ScriptedProxy(Arc::clone(script)))).unwrap()
}

/// Runs one turn, returning its report and every event it streamed.
pub async fn turn(s: &Session, prompt: &str) -> (TurnReport, Vec<SessionEvent>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let collect = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(e) = rx.recv().await {
            all.push(e);
        }
        all
    });
    let report = match s.run_turn(prompt, tx).await {
        Ok(r) => r,
        Err(e) => panic!("the turn should run: {e}"),
    };
    (report, collect.await.unwrap())
}

pub fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A Messages API answer holding the script's `item` (a `function_call` becomes a `tool_use`
/// of the tool it names, its arguments the tool's input; a message a text).
fn anthropic(item: &Value, authorized: bool, stream: bool) -> String {
    if !authorized {
        let b = r#"{"type":"error","error":{"type":"authentication_error","message":"bad token"}}"#;
        return format!(
            "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        );
    }
    let (block, delta, stop) = if item["type"] == "function_call" {
        (
            json!({"type": "tool_use", "id": format!("toolu_{}", item["name"].as_str().unwrap()), "name": item["name"], "input": {}}),
            json!({"type": "input_json_delta", "partial_json": item["arguments"]}),
            "tool_use",
        )
    } else {
        let text = item["content"][0]["text"].clone();
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
            "end_turn",
        )
    };
    if !stream {
        let b = json!({"id": "m", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "ok"}],
                       "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}).to_string();
        return format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        );
    }
    let mut b = String::new();
    for ev in [
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": block}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ] {
        b.push_str(&format!(
            "event: {}\ndata: {ev}\n\n",
            ev["type"].as_str().unwrap()
        ));
    }
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
        b.len()
    )
}
