//! `corral-fake-agent`: a stand-in for `codex exec --json` in corral-agents' tests. It has no
//! model of its own: it reads codex's `config.toml` (`base_url`, `env_key`) from
//! `$CODEX_HOME`, reads its prompt on stdin (`-`), and calls `<base_url>/responses` (streamed,
//! as codex does) until the answer holds no function call, doing what each call says and
//! printing codex-style JSONL:
//!
//! - `exec_command {cmd}`: runs `/bin/sh -c cmd` (a `command_execution` item);
//! - `write_file {path, content}`: writes the file (a `file_change` item, `failed` if refused);
//! - `emit_raw {hex, times}`: prints those bytes `times` times, raw (a hostile stream);
//! - `hog {mb}`: touches that much memory, then sleeps.
//!
//! `exec resume ... -- <id> -` resumes session `<id>`: the prompts of its earlier turns (kept
//! in `$CODEX_HOME/sessions/<id>`) go before the new one.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(e) = run() {
        println!(
            "{}",
            json!({"type": "turn.failed", "error": {"message": e.to_string()}})
        );
        std::process::exit(1);
    }
}

fn config_value(config: &str, key: &str) -> Option<String> {
    config.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
    })
}

fn say(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn run() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let home = std::env::var("CODEX_HOME")?;
    let config = std::fs::read_to_string(format!("{home}/config.toml"))?;
    let base = config_value(&config, "base_url").ok_or("no base_url")?;
    let key = config_value(&config, "env_key").ok_or("no env_key")?;
    let token = std::env::var(&key).unwrap_or_default();
    let model = config_value(&config, "model").unwrap_or_default();
    let after: Vec<&String> = args
        .iter()
        .skip_while(|a| a.as_str() != "--")
        .skip(1)
        .collect();
    let resume = args.iter().any(|a| a == "resume");
    let thread = match (resume, after.first()) {
        (true, Some(id)) => (*id).clone(),
        // Not the pid: in a fresh pid namespace every run has the same few.
        _ => format!(
            "fake-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ),
    };
    let mut prompt = String::new();
    std::io::stdin().read_to_string(&mut prompt)?;
    let sessions = format!("{home}/sessions");
    std::fs::create_dir_all(&sessions)?;
    let log = format!("{sessions}/{thread}");
    let mut prompts: Vec<String> = std::fs::read_to_string(&log)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    prompts.push(prompt);
    std::fs::write(&log, serde_json::to_string(&prompts)?)?;

    say(&json!({"type": "thread.started", "thread_id": thread}));
    say(&json!({"type": "turn.started"}));
    let mut input: Vec<Value> = prompts
        .iter()
        .map(|p| json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": p}]}))
        .collect();
    let (mut tokens_in, mut tokens_out) = (0u64, 0u64);
    let mut item = 0u32;
    for _ in 0..50 {
        let body = json!({"model": model, "input": input, "stream": true});
        let events = post(&base, "/responses", &token, &body)?;
        let mut calls = 0;
        for ev in events {
            if ev["type"] == "response.completed" {
                tokens_in += ev["response"]["usage"]["input_tokens"]
                    .as_u64()
                    .unwrap_or(0);
                tokens_out += ev["response"]["usage"]["output_tokens"]
                    .as_u64()
                    .unwrap_or(0);
            }
            if ev["type"] != "response.output_item.done" {
                continue;
            }
            let it = &ev["item"];
            item += 1;
            let id = format!("item_{item}");
            if it["type"] == "message" {
                let text = it["content"][0]["text"].as_str().unwrap_or("");
                say(
                    &json!({"type": "item.completed", "item": {"id": id, "type": "agent_message", "text": text}}),
                );
                continue;
            }
            if it["type"] != "function_call" {
                continue;
            }
            calls += 1;
            let a: Value = serde_json::from_str(it["arguments"].as_str().unwrap_or("{}"))?;
            let output = call(it["name"].as_str().unwrap_or(""), &a, &id)?;
            input.push(it.clone());
            input.push(
                json!({"type": "function_call_output", "call_id": it["call_id"], "output": output}),
            );
        }
        if calls == 0 {
            say(
                &json!({"type": "turn.completed", "usage": {"input_tokens": tokens_in, "cached_input_tokens": 0, "output_tokens": tokens_out}}),
            );
            return Ok(());
        }
    }
    Err("too many rounds".into())
}

/// Does one function call, printing its items; what goes back to the model.
fn call(name: &str, a: &Value, id: &str) -> Res<String> {
    match name {
        "exec_command" => {
            let cmd = a["cmd"].as_str().unwrap_or("");
            let line = format!("/bin/sh -c '{}'", cmd.replace('\'', "'\\''"));
            say(
                &json!({"type": "item.started", "item": {"id": id, "type": "command_execution", "command": line, "aggregated_output": "", "exit_code": null, "status": "in_progress"}}),
            );
            let out = std::process::Command::new("/bin/sh")
                .args(["-c", cmd])
                .output()?;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let code = out.status.code().unwrap_or(-1);
            let status = if code == 0 { "completed" } else { "failed" };
            say(
                &json!({"type": "item.completed", "item": {"id": id, "type": "command_execution", "command": line, "aggregated_output": text, "exit_code": code, "status": status}}),
            );
            Ok(format!("exit {code}: {text}"))
        }
        "write_file" => {
            let path = a["path"].as_str().unwrap_or("");
            let r = std::fs::write(path, a["content"].as_str().unwrap_or(""));
            let status = if r.is_ok() { "completed" } else { "failed" };
            say(
                &json!({"type": "item.completed", "item": {"id": id, "type": "file_change", "changes": [{"path": path, "kind": "add"}], "status": status}}),
            );
            Ok(match r {
                Ok(()) => "written".to_owned(),
                Err(e) => format!("error: {e}"),
            })
        }
        "emit_raw" => {
            let hex = a["hex"].as_str().unwrap_or("");
            let bytes: Vec<u8> = (0..hex.len() / 2)
                .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
                .collect();
            let mut out = std::io::stdout().lock();
            for _ in 0..a["times"].as_u64().unwrap_or(1) {
                out.write_all(&bytes)?;
            }
            out.flush()?;
            Ok("emitted".to_owned())
        }
        "hog" => {
            let mb = a["mb"].as_u64().unwrap_or(0);
            let mut held = Vec::new();
            for _ in 0..mb {
                held.push(vec![1u8; 1024 * 1024]);
            }
            std::thread::sleep(std::time::Duration::from_secs(30));
            Ok(format!("held {}", held.len()))
        }
        other => Ok(format!("unknown function {other}")),
    }
}

/// POSTs `body` to `base` + `path` (plain HTTP/1.1), returning the SSE events of the answer.
fn post(base: &str, path: &str, token: &str, body: &Value) -> Res<Vec<Value>> {
    let rest = base
        .strip_prefix("http://")
        .ok_or("base_url is not http://")?;
    let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let body = body.to_string();
    let mut conn = TcpStream::connect(authority)?;
    write!(
        conn,
        "POST /{prefix}{path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no HTTP head")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let mut payload = raw[split + 4..].to_vec();
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!(
            "the model answered {status}: {}",
            String::from_utf8_lossy(&payload)
        )
        .into());
    }
    if head.contains("transfer-encoding: chunked") {
        payload = dechunk(&payload);
    }
    Ok(String::from_utf8_lossy(&payload)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect())
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
        if size == 0 || b.len() < i + 2 + size {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + size]);
        b = &b[(i + 4 + size).min(b.len())..];
    }
    out
}
