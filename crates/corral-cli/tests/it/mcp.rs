//! `corral mcp`: an rmcp client drives a `corral mcp` child process over stdio; tools are the
//! config's ops for the principal, calls go through the guard chain, refusals are tool errors.

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::json;

use crate::workspace;

const JAIL: &str = "version: 1\npreset: workspace_jail\nroot: $WS\n";

/// The text blocks of a tool result, joined by newlines.
pub(crate) fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn args(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

#[tokio::test]
async fn corral_mcp_serves_the_ops_over_stdio() {
    let dir = workspace(Some(JAIL));
    let _ = std::fs::write(dir.path().join("ws/notes.txt"), "hello over stdio\n");
    let transport = crate::upstream::corral_mcp_process(dir.path(), &[]);
    let client = match ().serve(transport).await {
        Ok(c) => c,
        Err(e) => unreachable!("the MCP handshake: {e}"),
    };
    let tools = match client.list_all_tools().await {
        Ok(t) => t,
        Err(e) => unreachable!("tools/list: {e}"),
    };
    assert!(tools.iter().any(|t| t.name == "files.read"), "{tools:?}");
    assert!(tools.iter().all(|t| t.name != "commands.run"), "{tools:?}");

    let ok = client
        .call_tool(
            CallToolRequestParams::new("files.read")
                .with_arguments(args(json!({"path": "notes.txt"}))),
        )
        .await;
    let Ok(ok) = ok else {
        unreachable!("tools/call: {ok:?}")
    };
    assert_eq!(ok.is_error, Some(false), "{ok:?}");
    assert!(text(&ok).contains("hello over stdio"), "{}", text(&ok));

    let refused = client
        .call_tool(
            CallToolRequestParams::new("files.read")
                .with_arguments(args(json!({"path": "/etc/passwd"}))),
        )
        .await;
    let Ok(refused) = refused else {
        unreachable!("tools/call: {refused:?}")
    };
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(!text(&refused).contains("root:"), "{}", text(&refused));
    let _ = client.cancel().await;
}

#[test]
fn corral_mcp_refuses_a_wrong_token_in_the_environment() {
    let dir = workspace(Some(
        "version: 1\npreset: workspace_jail\nroot: $WS\nauth:\n  tokens:\n    - {id: agent, token_env: CORRAL_IT_AGENT_TOKEN}\n",
    ));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("mcp")
        .current_dir(dir.path())
        .env_remove("CORRAL_CONFIG")
        .env("CORRAL_IT_AGENT_TOKEN", "it-agent-secret-0123456789")
        .env("CORRAL_TOKEN", "not-the-agent-token-at-all")
        .stdin(std::process::Stdio::null())
        .output();
    let Ok(out) = out else {
        unreachable!("the corral binary runs")
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("auth.invalid"), "{stderr}");
    assert!(stderr.contains("$CORRAL_TOKEN"), "{stderr}");
    assert!(
        !stderr.contains("not-the-agent-token"),
        "the token is never echoed: {stderr}"
    );
}

/// The official MCP Python SDK (`mcp`, `tests/reference/mcp_sdk.py`) over stdio (`corral mcp
/// --principal agent`) and over streamable HTTP (`corral serve`'s `/mcp` with a token): it sees
/// corral by name and version, the principal's tools with described parameters, a read's
/// result, and a refusal as a tool error that speaks of `tools/list`.
#[test]
fn the_official_mcp_python_sdk_uses_corral_over_stdio_and_http() {
    let Some(python) = crate::python("the official MCP SDK") else {
        return;
    };
    const TOKEN: &str = "it-mcp-sdk-agent-token-0123456789";
    let dir = workspace(Some(
        "version: 1\npreset: workspace_jail\nroot: $WS\nauth:\n  tokens:\n    - {id: agent, roles: [viewer], token_env: CORRAL_IT_MCP_SDK_TOKEN}\n",
    ));
    let _ = std::fs::write(dir.path().join("ws/notes.txt"), "hello from the sdk\n");
    let served = crate::call::serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &[("CORRAL_IT_MCP_SDK_TOKEN", TOKEN)],
        std::process::Stdio::null(),
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/reference/mcp_sdk.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_corral"))
        .arg(dir.path())
        .arg(&served.url)
        .arg(TOKEN)
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("CORRAL_CONFIG")
        .output();
    let Ok(out) = out else {
        unreachable!("python runs")
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| unreachable!("the script prints JSON ({e}): {stdout}"));
    for transport in ["stdio", "http"] {
        let t = &v[transport];
        assert_eq!(
            t["server"],
            json!(["corral", env!("CARGO_PKG_VERSION")]),
            "{transport}: {t}"
        );
        assert_eq!(t["has_read"], true, "{transport}: {t}");
        assert_eq!(t["described"], true, "{transport}: {t}");
        assert_eq!(t["read"][0], false, "{transport}: {t}");
        assert!(
            t["read"][1]
                .as_str()
                .is_some_and(|s| s.contains("hello from the sdk")),
            "{transport}: {t}"
        );
        assert_eq!(t["refused"][0], true, "{transport}: {t}");
        let refusal = t["refused"][1].as_str().unwrap_or_default();
        assert!(
            refusal.starts_with("op.not_enabled: "),
            "{transport}: {refusal}"
        );
        assert!(refusal.contains("`tools/list`"), "{transport}: {refusal}");
    }
}
