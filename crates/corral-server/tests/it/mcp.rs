//! `/mcp`: an rmcp client over real HTTP lists exactly the ops its principal may call, calls an
//! allowed one, gets a denied one as a tool error with corral's code, gets
//! `confirmation.required` with the action id and how to approve (and, once a person approved,
//! the retried call runs), and is refused without a
//! token like every route.

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::common::{ADMIN_TOKEN, AGENT_TOKEN, Server, Workspace};

/// The jail, plus `http.fetch` mounted for role `admin` only.
async fn server(ws: &Workspace) -> Server {
    ws.write("notes.txt", "hello from mcp");
    let yaml = ws.jail_yaml(
        "rules:
  - allow: [http.fetch]
    principals: [role:admin]
    urls: {hosts: [example.com]}
",
    );
    Server::start(&ws.load(&yaml, &crate::common::token_env())).await
}

pub(crate) async fn client(s: &Server, token: &str) -> RunningService<RoleClient, ()> {
    let config = StreamableHttpClientTransportConfig::with_uri(s.url("/mcp")).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config);
    ().serve(transport).await.unwrap()
}

fn find<'a>(tools: &'a [Tool], name: &str) -> Option<&'a Tool> {
    tools.iter().find(|t| t.name == name)
}

async fn call(c: &RunningService<RoleClient, ()>, op: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("args are an object")
    };
    c.call_tool(CallToolRequestParams::new(op.to_owned()).with_arguments(args))
        .await
        .unwrap()
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn tools_list_is_filtered_per_principal_with_corral_annotations() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let agent = client(&s, AGENT_TOKEN).await;
    let admin = client(&s, ADMIN_TOKEN).await;
    let agent_tools = agent.list_all_tools().await.unwrap();
    let admin_tools = admin.list_all_tools().await.unwrap();
    // The server names itself and its version, not the MCP library.
    let info = agent.peer_info().and_then(|i| i.server_info.clone());
    assert_eq!(
        info.as_ref().map(|i| (i.name.as_str(), i.version.as_str())),
        Some(("corral", env!("CARGO_PKG_VERSION"))),
        "{info:?}"
    );

    // Exactly what `GET /ops` shows each of them.
    for (token, tools) in [(AGENT_TOKEN, &agent_tools), (ADMIN_TOKEN, &admin_tools)] {
        let r: Value = s
            .client()
            .get(s.url("/ops"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut want: Vec<String> = r["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap().to_owned())
            .collect();
        // The lab's tools (`sandbox_*`, no op's name) come beside the ops: see sandbox.rs.
        let mut got: Vec<String> = tools
            .iter()
            .map(|t| t.name.to_string())
            .filter(|n| !n.starts_with("sandbox_"))
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }
    assert!(find(&agent_tools, "http.fetch").is_none());
    let fetch = find(&admin_tools, "http.fetch").unwrap();
    let a = fetch.annotations.as_ref().unwrap();
    assert_eq!(a.open_world_hint, Some(true));

    let read = find(&agent_tools, "files.read").unwrap();
    let a = read.annotations.as_ref().unwrap();
    assert_eq!(
        (a.read_only_hint, a.destructive_hint, a.open_world_hint),
        (Some(true), Some(false), Some(false))
    );
    assert_eq!(read.input_schema["type"], json!("object"));
    assert_eq!(
        read.input_schema["properties"]["path"]["type"],
        json!("string")
    );
    // Every parameter says what it takes.
    assert!(
        read.input_schema["properties"]["path"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("beneath the rule's roots")),
        "{:?}",
        read.input_schema
    );
    assert!(
        read.input_schema["required"]
            .as_array()
            .unwrap()
            .contains(&json!("path"))
    );
    let delete = find(&admin_tools, "files.delete").unwrap();
    assert_eq!(
        delete.annotations.as_ref().unwrap().destructive_hint,
        Some(true)
    );
    agent.cancel().await.unwrap();
    admin.cancel().await.unwrap();
}

#[tokio::test]
async fn an_allowed_call_returns_the_result_and_a_denied_one_is_a_tool_error_with_its_code() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let agent = client(&s, AGENT_TOKEN).await;

    let ok = call(&agent, "files.read", json!({"path": ws.at("notes.txt")})).await;
    assert_eq!(ok.is_error, Some(false), "{ok:?}");
    assert!(text(&ok).contains("hello from mcp"), "{}", text(&ok));

    // Not mounted for the agent: the same code as `POST /ops/http.fetch`.
    let denied = call(&agent, "http.fetch", json!({"url": "https://example.com/"})).await;
    assert_eq!(denied.is_error, Some(true));
    assert!(
        text(&denied).starts_with("op.not_enabled: "),
        "{}",
        text(&denied)
    );
    // The fix speaks of what an MCP client has: `tools/list`, not the HTTP route.
    assert!(text(&denied).contains("`tools/list`"), "{}", text(&denied));
    assert!(!text(&denied).contains("GET /ops"), "{}", text(&denied));

    // Outside the jail: a policy refusal, with its code.
    let outside = call(&agent, "files.read", json!({"path": "/etc/hostname"})).await;
    assert_eq!(outside.is_error, Some(true));
    let code = outside.structured_content.as_ref().unwrap()["code"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text(&outside).starts_with(&format!("{code}: ")),
        "{}",
        text(&outside)
    );
    assert!(!code.is_empty());
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_destructive_call_needs_confirmation_and_says_how_to_approve() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    ws.write("gone.txt", "bye");
    let admin = client(&s, ADMIN_TOKEN).await;
    let r = call(&admin, "files.delete", json!({"path": ws.at("gone.txt")})).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let t = text(&r);
    assert!(t.starts_with("confirmation.required: "), "{t}");
    let action_id = r.structured_content.as_ref().unwrap()["action_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(t.contains(&format!("action_id: {action_id}")), "{t}");
    assert!(
        t.contains(&format!("/confirmations/{action_id}/decision")),
        "{t}"
    );
    assert!(t.contains("gone.txt"), "the arguments: {t}");
    assert!(t.contains(&format!("corral confirm {action_id}")), "{t}");
    assert!(ws.root.join("gone.txt").exists());

    // A person (the requester) approves over HTTP; the agent retries the same call over MCP.
    let d = s
        .decide_as(
            Some(ADMIN_TOKEN),
            &action_id,
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(d.status, 200, "{}", d.text);
    let retried = call(&admin, "files.delete", json!({"path": ws.at("gone.txt")})).await;
    assert_eq!(retried.is_error, Some(false), "{retried:?}");
    assert!(!ws.root.join("gone.txt").exists());
    let replayed = |r: &CallToolResult| {
        r.meta
            .as_ref()
            .and_then(|m| m.0.get(corral_mcp::REPLAYED_META).cloned())
    };
    assert_eq!(replayed(&retried), None, "it ran: {retried:?}");
    // The approval was consumed once: a later retry gets the stored outcome, and the op does
    // not run again (the file written since stays).
    ws.write("gone.txt", "again");
    let again = call(&admin, "files.delete", json!({"path": ws.at("gone.txt")})).await;
    assert_eq!(again.is_error, Some(false), "{again:?}");
    assert_eq!(text(&again), text(&retried));
    assert_eq!(replayed(&again), Some(json!(true)), "marked: {again:?}");
    assert!(ws.root.join("gone.txt").exists());
    admin.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_without_credentials_is_refused_like_every_route() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let r = reqwest::Client::new()
        .post(s.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(
        r.headers()
            .get("www-authenticate")
            .and_then(|h| h.to_str().ok()),
        Some("Bearer")
    );
    // In the form an MCP client reads: a JSON-RPC error, corral's error as its data.
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["jsonrpc"], json!("2.0"), "{body}");
    assert_eq!(body["error"]["code"], json!(-32001), "{body}");
    assert_eq!(
        body["error"]["data"]["code"],
        json!("auth.missing"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );

    let r = reqwest::Client::new()
        .post(s.url("/mcp"))
        .bearer_auth("not-a-token")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
}

/// `tools/list` over raw HTTP with a chosen `Host` header; the status.
async fn list_with_host(s: &Server, host: &str) -> u16 {
    reqwest::Client::new()
        .post(s.url("/mcp"))
        .bearer_auth(AGENT_TOKEN)
        .header("host", host)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn mcp_answers_loopback_host_names_only_unless_the_config_lists_others() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    // A DNS-rebinding page reaches the server by the attacker's name: refused, even with a token,
    // and the refusal names the setting that admits a name.
    assert_eq!(list_with_host(&s, "evil.example.com").await, 403);
    let r = reqwest::Client::new()
        .post(s.url("/mcp"))
        .bearer_auth(AGENT_TOKEN)
        .header("host", "evil.example.com")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["error"]["data"]["code"],
        json!("mcp.host_not_allowed"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("mcp.allowed_hosts")),
        "{body}"
    );
    assert_eq!(list_with_host(&s, "localhost").await, 200);

    let yaml = ws.jail_yaml("mcp:\n  allowed_hosts: [corral.example.com]\n");
    let s = Server::start(&ws.load(&yaml, &crate::common::token_env())).await;
    assert_eq!(list_with_host(&s, "corral.example.com").await, 200);
    assert_eq!(list_with_host(&s, "evil.example.com").await, 403);
}

#[tokio::test]
async fn the_guardrail_headers_apply_to_mcp_calls_like_to_post_ops() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    ws.write("kept.txt", "stays");
    let mut headers = std::collections::HashMap::new();
    headers.insert(
        axum::http::HeaderName::from_static("x-corral-dry-run"),
        axum::http::HeaderValue::from_static("true"),
    );
    let config = StreamableHttpClientTransportConfig::with_uri(s.url("/mcp"))
        .auth_header(ADMIN_TOKEN)
        .custom_headers(headers);
    let dry = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let r = call(&dry, "files.delete", json!({"path": ws.at("kept.txt")})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let v = r.structured_content.clone().unwrap_or_default();
    assert_eq!(v["status"], "dry_run", "{v}");
    assert!(ws.root.join("kept.txt").exists(), "a dry run runs nothing");
    dry.cancel().await.unwrap();

    // A malformed guardrail header is a 400 for the whole request, as on `POST /ops`.
    let r = reqwest::Client::new()
        .post(s.url("/mcp"))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-corral-run", "not a run id!")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
}

/// `mcp: {tool_names: underscored}`: every tool name matches `^[a-zA-Z0-9_-]{1,64}$` (`__` for
/// each `.` of the op id), a call by that name runs the op, and a dotted name is refused.
#[tokio::test]
async fn underscored_tool_names_fit_strict_hosts_and_read_back_to_their_ops() {
    let ws = Workspace::new();
    ws.write("notes.txt", "hello underscored");
    let yaml = ws.jail_yaml("mcp:\n  tool_names: underscored\n");
    let s = Server::start(&ws.load(&yaml, &crate::common::token_env())).await;
    let agent = client(&s, AGENT_TOKEN).await;
    let tools = agent.list_all_tools().await.unwrap();
    assert!(!tools.is_empty());
    for t in &tools {
        let name = t.name.to_string();
        assert!(
            !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{name}"
        );
    }
    assert!(find(&tools, "files__read").is_some(), "{tools:?}");
    let ok = call(&agent, "files__read", json!({"path": ws.at("notes.txt")})).await;
    assert_eq!(ok.is_error, Some(false), "{ok:?}");
    assert!(text(&ok).contains("hello underscored"), "{}", text(&ok));
    let dotted = call(&agent, "files.read", json!({"path": ws.at("notes.txt")})).await;
    assert_eq!(dotted.is_error, Some(true));
    assert!(
        text(&dotted).contains("tool_names: underscored"),
        "{}",
        text(&dotted)
    );
    agent.cancel().await.unwrap();
}

/// The transport asks clients to accept JSON and an event stream; this server answers JSON, so
/// a client that accepts JSON in any form (no `Accept`, `*/*`, `application/json`) is served,
/// and one that accepts only an event stream gets corral's `406 mcp.not_acceptable`.
#[tokio::test]
async fn a_client_that_accepts_json_is_served_and_one_that_does_not_gets_406() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    for accept in [None, Some("*/*"), Some("application/json")] {
        let mut req = s
            .client()
            .post(s.url("/mcp"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&ping);
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200, "{accept:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["id"], 7, "{accept:?}: {v}");
        assert!(v["result"].is_object(), "{accept:?}: {v}");
    }
    let r = s
        .client()
        .post(s.url("/mcp"))
        .bearer_auth(ADMIN_TOKEN)
        .header("accept", "text/event-stream")
        .json(&ping)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["code"], "mcp.not_acceptable", "{v}");
    assert!(v["error"].as_str().unwrap_or("").contains("Accept:"), "{v}");
}
