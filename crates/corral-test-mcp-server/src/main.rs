//! A small MCP server over stdio, used by corral's tests as an untrusted upstream: it does what
//! its tools say with no checks of its own, so whatever stops it is corral's sandbox and policy.
//!
//! Tools: `read_file {path}` (the file's text), `write_note {path, text}` (writes the file),
//! `whoami {}` (its pid and working directory), `crash {}` (exits at once with status 3, to test
//! corral's restart), `undeclared_tool {}` (which corral's test config does not declare),
//! `grow {}` (from then on it also lists `late {word}`, and sends
//! `notifications/tools/list_changed`), `shrink {}` (stops listing `late`, and says so).
//!
//! `--fail-if-exists PATH`: when PATH exists, remove it and exit with status 2 before serving
//! (a server that is down at corral's start-up and comes up on the restart).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy)]
struct Fixture;

/// Set by `grow`: `late` is listed from then on.
static GROWN: AtomicBool = AtomicBool::new(false);

fn schema(props: Value, required: &[&str]) -> Arc<serde_json::Map<String, Value>> {
    let v = json!({"type": "object", "properties": props, "required": required});
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    let mut tools = vec![
        Tool::new(
            "read_file",
            "Reads a text file",
            schema(json!({"path": {"type": "string"}}), &["path"]),
        )
        // A lie corral must not believe for its write tool; honest here.
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "write_note",
            "Writes a text file",
            schema(
                json!({"path": {"type": "string"}, "text": {"type": "string"}}),
                &["path", "text"],
            ),
        )
        // Claims to be read-only: corral takes the tier from its own config, never from this.
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "whoami",
            "Its pid and working directory",
            schema(json!({}), &[]),
        ),
        Tool::new(
            "crash",
            "Exits at once with status 3",
            schema(json!({}), &[]),
        ),
        Tool::new(
            "undeclared_tool",
            "A tool corral's config does not declare",
            schema(
                json!({"level": {"type": "integer"}, "opts": {"type": "object"}}),
                &[],
            ),
        )
        .with_annotations(ToolAnnotations::new().destructive(true)),
        Tool::new("grow", "Lists `late` from now on", schema(json!({}), &[])),
        Tool::new("shrink", "Stops listing `late`", schema(json!({}), &[])),
    ];
    if GROWN.load(Ordering::SeqCst) {
        tools.push(Tool::new(
            "late",
            "A tool listed only after `grow`",
            schema(json!({"word": {"type": "string"}}), &["word"]),
        ));
    }
    tools
}

/// The soft `Max address space` of `/proc/self/limits` (`unlimited` or bytes).
fn address_space_limit() -> String {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|x| x.starts_with("Max address space"))
                .and_then(|x| x.split_whitespace().nth(3).map(str::to_owned))
        })
        .unwrap_or_default()
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s.into())])
}

fn failed(s: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(s.into())])
}

fn arg<'a>(args: &'a serde_json::Map<String, Value>, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or_default()
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "read_file" => match std::fs::read_to_string(arg(&args, "path")) {
                Ok(t) => text(t),
                Err(e) => failed(format!("cannot read {}: {e}", arg(&args, "path"))),
            },
            "write_note" => match std::fs::write(arg(&args, "path"), arg(&args, "text")) {
                Ok(()) => text("written"),
                Err(e) => failed(format!("cannot write {}: {e}", arg(&args, "path"))),
            },
            "whoami" => text(format!(
                "pid {} cwd {} address-space {}",
                std::process::id(),
                std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default(),
                address_space_limit()
            )),
            "crash" => std::process::exit(3),
            "undeclared_tool" => text("ran"),
            "grow" | "shrink" => {
                GROWN.store(request.name == "grow", Ordering::SeqCst);
                let _ = ctx.peer.notify_tool_list_changed().await;
                text("done")
            }
            "late" if GROWN.load(Ordering::SeqCst) => text(format!("late {}", arg(&args, "word"))),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--fail-if-exists")
        && let Some(marker) = args.get(i + 1)
        && std::fs::remove_file(marker).is_ok()
    {
        eprintln!("fixture: {marker} existed; failing this start");
        std::process::exit(2);
    }
    let Ok(service) = Fixture.serve(rmcp::transport::io::stdio()).await else {
        std::process::exit(1);
    };
    let _ = service.waiting().await;
}
