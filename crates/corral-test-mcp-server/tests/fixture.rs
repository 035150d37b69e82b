//! The fixture answers as an MCP server over stdio: lists its tools and runs one. (This test
//! also makes `cargo test` build the fixture's binary, which corral-cli's upstream tests mount.)

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

#[tokio::test]
async fn the_fixture_lists_its_tools_and_reads_a_file() {
    let dir = std::env::temp_dir().join(format!("corral-fixture-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("note.txt");
    let _ = std::fs::write(&file, "fixture text");
    let cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_corral-test-mcp-server"));
    let Ok(transport) = TokioChildProcess::new(cmd) else {
        unreachable!("the fixture starts")
    };
    let client = match ().serve(transport).await {
        Ok(c) => c,
        Err(e) => unreachable!("handshake: {e}"),
    };
    let tools = client.list_all_tools().await.unwrap_or_default();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "read_file",
            "write_note",
            "whoami",
            "crash",
            "undeclared_tool",
            "grow",
            "shrink"
        ]
    );
    let mut args = serde_json::Map::new();
    args.insert("path".into(), file.to_string_lossy().into_owned().into());
    let read = client
        .call_tool(CallToolRequestParams::new("read_file").with_arguments(args))
        .await;
    let Ok(read) = read else {
        unreachable!("tools/call: {read:?}")
    };
    let text: Vec<String> = read
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_eq!(text, ["fixture text"]);
    let _ = client.cancel().await;
    let _ = std::fs::remove_dir_all(&dir);
}
