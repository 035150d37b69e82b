//! An upstream MCP server (the workspace's `corral-test-mcp-server` fixture) mounted under
//! `mcp_servers:` and reached through `corral mcp` over stdio: its declared tools appear as
//! `mcp.fx.*`, the read tool works, the write tool needs a person's confirmation, the tool the
//! config does not declare is not offered, it runs inside the linux backend (it cannot read
//! outside its scope, it sees its own pid namespace), and a crash is `upstream.unavailable`
//! until corral has started it again.

use std::path::PathBuf;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::NotificationContext;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::mcp::text;
use crate::workspace;

/// The fixture binary, built by `cargo test` next to `corral` (its package has a test of its own).
pub(crate) fn fixture() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_corral")).with_file_name("corral-test-mcp-server");
    assert!(
        path.exists(),
        "{} is missing: run the workspace's tests (`cargo test`), or `cargo build -p corral-test-mcp-server` first",
        path.display()
    );
    path
}

/// The fixture's path, and its directory (which a sandboxed server must be able to read).
pub(crate) fn fixture_and_dir() -> (String, String) {
    let fx = fixture();
    let dir = fx
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    (fx.display().to_string(), dir)
}

fn config() -> String {
    let (fx, bin_dir) = fixture_and_dir();
    format!(
        r#"version: 1
state_dir: .corral
auth:
  tokens:
    - {{id: agent, roles: [operator], token_env: CORRAL_IT_AGENT_TOKEN}}
mcp_servers:
  fx:
    command: ["{fx}"]
    read_paths: ["{bin_dir}", "$WS"]
    memory: 512MB
    processes: 64
    tools:
      read_file: {{effects: [read], idempotent: true}}
      write_note: {{effects: [write]}}
      whoami: {{effects: [read]}}
      crash: {{effects: [read]}}
rules:
  - allow: [mcp.fx.read_file, mcp.fx.write_note, mcp.fx.whoami, mcp.fx.crash]
"#,
        fx = fx
    )
}

async fn call<H: ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else {
        unreachable!("arguments are an object")
    };
    let r = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await;
    match r {
        Ok(r) => r,
        Err(e) => unreachable!("tools/call {tool}: {e}"),
    }
}

/// `corral mcp` in `dir` as a child, with `env` added; the connected rmcp client.
async fn corral_mcp(dir: &std::path::Path, env: &[(&str, &str)]) -> RunningService<RoleClient, ()> {
    corral_mcp_with(dir, env, ()).await
}

/// `corral mcp` in `dir` as a child, with `env` added, and `handler` as the client's side.
async fn corral_mcp_with<H: ClientHandler>(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    handler: H,
) -> RunningService<RoleClient, H> {
    match handler.serve(corral_mcp_process(dir, env)).await {
        Ok(c) => c,
        Err(e) => unreachable!("the MCP handshake: {e}"),
    }
}

/// `corral mcp` in `dir` as a child with `env` added: the transport to its stdio.
pub(crate) fn corral_mcp_process(dir: &std::path::Path, env: &[(&str, &str)]) -> TokioChildProcess {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corral"));
    cmd.arg("mcp").current_dir(dir).env_remove("CORRAL_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    match TokioChildProcess::new(cmd) {
        Ok(t) => t,
        Err(e) => unreachable!("`corral mcp` starts: {e}"),
    }
}

/// A client that notes corral's `notifications/tools/list_changed`.
#[derive(Debug, Clone, Default)]
struct Told(std::sync::Arc<tokio::sync::Notify>);

impl ClientHandler for Told {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.notify_one();
    }
}

/// Calls `mcp.fx.read_file` on `path` every 100 ms until it succeeds (at most 10 s).
async fn read_once_up(
    client: &RunningService<RoleClient, ()>,
    path: &std::path::Path,
) -> Option<CallToolResult> {
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = call(client, "mcp.fx.read_file", json!({"path": path})).await;
        if r.is_error == Some(false) {
            return Some(r);
        }
    }
    None
}

#[tokio::test]
async fn an_upstream_mcp_server_runs_sandboxed_behind_the_policy() {
    let dir = workspace(Some(&config()));
    let ws = dir.path().join("ws");
    let _ = std::fs::write(ws.join("notes.txt"), "upstream can read this\n");
    let secret = dir.path().join("secret.txt");
    let _ = std::fs::write(&secret, "outside-the-scope\n");

    // The principal comes from the agent's own token in the environment, as for a local agent.
    let client = corral_mcp(
        dir.path(),
        &[
            ("CORRAL_IT_AGENT_TOKEN", "it-agent-secret-0123456789"),
            ("CORRAL_TOKEN", "it-agent-secret-0123456789"),
        ],
    )
    .await;

    let tools = client.list_all_tools().await.unwrap_or_default();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for want in ["mcp.fx.read_file", "mcp.fx.write_note", "mcp.fx.whoami"] {
        assert!(names.contains(&want), "{want} listed: {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.contains("undeclared_tool")),
        "an undeclared tool is admin and explicit-only: {names:?}"
    );
    let write = tools.iter().find(|t| t.name == "mcp.fx.write_note");
    let write_hints = write.and_then(|t| t.annotations.clone());
    assert_eq!(
        write_hints.and_then(|a| a.read_only_hint),
        Some(false),
        "the upstream claims write_note is read-only; corral's config says write"
    );
    let read_hints = tools
        .iter()
        .find(|t| t.name == "mcp.fx.read_file")
        .and_then(|t| t.annotations.clone());
    assert_eq!(
        read_hints.and_then(|a| a.idempotent_hint),
        Some(true),
        "idempotent because the config says so"
    );
    let read_schema = tools
        .iter()
        .find(|t| t.name == "mcp.fx.read_file")
        .map(|t| Value::Object((*t.input_schema).clone()))
        .unwrap_or_default();
    assert_eq!(
        read_schema["properties"]["path"]["type"], "string",
        "{read_schema}"
    );

    let read = call(
        &client,
        "mcp.fx.read_file",
        json!({"path": ws.join("notes.txt")}),
    )
    .await;
    assert_eq!(read.is_error, Some(false), "{read:?}");
    assert!(
        text(&read).contains("upstream can read this"),
        "{}",
        text(&read)
    );

    let escape = call(&client, "mcp.fx.read_file", json!({"path": secret})).await;
    assert!(
        !text(&escape).contains("outside-the-scope"),
        "the sandbox keeps the upstream out of the rest of the host: {}",
        text(&escape)
    );
    assert!(text(&escape).contains("cannot read"), "{}", text(&escape));

    let who = call(&client, "mcp.fx.whoami", json!({})).await;
    let pid: u32 = text(&who)
        .split('"')
        .flat_map(|s| s.split_whitespace())
        .skip_while(|w| *w != "pid")
        .nth(1)
        .and_then(|p| p.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
        .unwrap_or(u32::MAX);
    assert!(
        pid < 10,
        "the upstream runs in its own pid namespace: {}",
        text(&who)
    );
    assert!(
        text(&who).contains("address-space 512000000"),
        "`memory: 512MB` limits it: {}",
        text(&who)
    );

    let note = call(
        &client,
        "mcp.fx.write_note",
        json!({"path": ws.join("note.txt"), "text": "hi"}),
    )
    .await;
    assert_eq!(note.is_error, Some(true), "{note:?}");
    assert!(
        text(&note).starts_with("confirmation.required"),
        "{}",
        text(&note)
    );
    assert!(!ws.join("note.txt").exists());

    let crash = call(&client, "mcp.fx.crash", json!({})).await;
    assert_eq!(crash.is_error, Some(true), "{crash:?}");
    assert!(
        text(&crash).starts_with("upstream.unavailable"),
        "{}",
        text(&crash)
    );
    let down = call(
        &client,
        "mcp.fx.read_file",
        json!({"path": ws.join("notes.txt")}),
    )
    .await;
    assert!(
        text(&down).starts_with("upstream.unavailable"),
        "{}",
        text(&down)
    );

    // Restarted with backoff (1 s after a quick failure): it answers again.
    let back = read_once_up(&client, &ws.join("notes.txt")).await;
    let Some(back) = back else {
        unreachable!("the upstream was not restarted within 10 s")
    };
    assert!(
        text(&back).contains("upstream can read this"),
        "{}",
        text(&back)
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn an_upstream_that_is_down_at_start_up_gets_its_tools_once_it_comes_up() {
    let (fx, bin_dir) = fixture_and_dir();
    let config = format!(
        r#"version: 1
state_dir: .corral
mcp_servers:
  fx:
    command: ["{fx}", --fail-if-exists, "$WS/down"]
    read_paths: ["{bin_dir}"]
    write_paths: ["$WS"]
    tools:
      read_file: {{effects: [read]}}
rules:
  - allow: [mcp.fx.read_file]
"#,
        fx = fx
    );
    let dir = workspace(Some(&config));
    let ws = dir.path().join("ws");
    let _ = std::fs::write(ws.join("down"), "");
    let _ = std::fs::write(ws.join("notes.txt"), "after the restart\n");

    let client = corral_mcp(dir.path(), &[]).await;
    // Declared, so listed, but its params are unknown until the server has listed them.
    let tools = client.list_all_tools().await.unwrap_or_default();
    let read = tools.iter().find(|t| t.name == "mcp.fx.read_file");
    let props = read.and_then(|t| t.input_schema.get("properties").cloned());
    assert_eq!(props, Some(json!({})), "{tools:?}");
    assert!(
        !ws.join("down").exists(),
        "the first start failed and took the marker"
    );

    let answered = read_once_up(&client, &ws.join("notes.txt")).await;
    let Some(answered) = answered else {
        unreachable!("the upstream's tools were not completed within 10 s of its restart")
    };
    assert!(
        text(&answered).contains("after the restart"),
        "{}",
        text(&answered)
    );
    let tools = client.list_all_tools().await.unwrap_or_default();
    let read = tools.iter().find(|t| t.name == "mcp.fx.read_file");
    let props = read.and_then(|t| t.input_schema.get("properties").cloned());
    assert_eq!(
        props,
        // The upstream's string param, described as every param of a tool is.
        Some(
            json!({"path": {"type": "string", "description": "text", "pattern": "^[^\\u0000]*$"}})
        ),
        "{tools:?}"
    );
    let _ = client.cancel().await;
}

/// The fixture as server `fx`, its `grow`, `shrink` and `late` tools declared and allowed.
fn grow_config() -> String {
    let (fx, bin_dir) = fixture_and_dir();
    format!(
        r#"version: 1
state_dir: .corral
mcp_servers:
  fx:
    command: ["{fx}"]
    read_paths: ["{bin_dir}"]
    tools:
      grow: {{effects: [read]}}
      shrink: {{effects: [read]}}
      late: {{effects: [read]}}
rules:
  - allow: [mcp.fx.grow, mcp.fx.shrink, mcp.fx.late]
"#,
        fx = fx
    )
}

#[tokio::test]
async fn a_changed_tool_list_is_followed_without_a_restart() {
    let config = grow_config();
    let dir = workspace(Some(&config));
    let told = Told::default();
    let client = corral_mcp_with(dir.path(), &[], told.clone()).await;
    let late_props = |tools: &[rmcp::model::Tool]| {
        tools
            .iter()
            .find(|t| t.name == "mcp.fx.late")
            .and_then(|t| t.input_schema.get("properties").cloned())
    };
    // Declared but not listed by the server yet: no params known.
    let tools = client.list_all_tools().await.unwrap_or_default();
    assert_eq!(late_props(&tools), Some(json!({})), "{tools:?}");

    let grown = call(&client, "mcp.fx.grow", json!({})).await;
    assert_eq!(grown.is_error, Some(false), "{}", text(&grown));
    // corral tells its own client that its tools changed, as the upstream told corral.
    let notified = tokio::time::timeout(Duration::from_secs(10), told.0.notified()).await;
    assert!(
        notified.is_ok(),
        "corral mcp sent no tools/list_changed within 10 s"
    );

    // The server announced the change: corral lists its tools again, without a restart.
    let mut props = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tools = client.list_all_tools().await.unwrap_or_default();
        props = late_props(&tools);
        if props != Some(json!({})) {
            break;
        }
    }
    assert_eq!(
        props,
        Some(
            json!({"word": {"type": "string", "description": "text", "pattern": "^[^\\u0000]*$"}})
        ),
        "the new tool list was not followed within 10 s"
    );
    let late = call(&client, "mcp.fx.late", json!({"word": "hi"})).await;
    assert_eq!(late.is_error, Some(false), "{}", text(&late));
    assert!(text(&late).contains("late hi"), "{}", text(&late));

    // The server stops listing it: what corral took from the old list goes away again.
    let shrunk = call(&client, "mcp.fx.shrink", json!({})).await;
    assert_eq!(shrunk.is_error, Some(false), "{}", text(&shrunk));
    let mut props = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tools = client.list_all_tools().await.unwrap_or_default();
        props = late_props(&tools);
        if props == Some(json!({})) {
            break;
        }
    }
    assert_eq!(
        props,
        Some(json!({})),
        "the tool the server no longer lists kept its old params"
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_client_on_the_subscription_protocol_hears_of_changed_tools_on_its_subscription() {
    use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
    use rmcp::{ClientLifecycleMode, ClientServiceExt};
    let config = grow_config();
    let dir = workspace(Some(&config));
    let transport = corral_mcp_process(dir.path(), &[]);
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = match ().serve_with_lifecycle(transport, lifecycle).await {
        Ok(c) => c,
        Err(e) => unreachable!("the discover handshake: {e}"),
    };
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = match client.peer().listen(filter).await {
        Ok(s) => s,
        Err(e) => unreachable!("corral accepts a tools/list_changed subscription: {e}"),
    };
    assert_eq!(subscription.acknowledged().tools_list_changed, Some(true));

    let grown = call(&client, "mcp.fx.grow", json!({})).await;
    assert_eq!(grown.is_error, Some(false), "{}", text(&grown));
    let heard = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match subscription.next().await {
                Ok(Some(ServerNotification::ToolListChangedNotification(_))) => return true,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(
        heard,
        Ok(true),
        "no tools/list_changed on the subscription within 10 s"
    );
    let _ = client.cancel().await;
}
