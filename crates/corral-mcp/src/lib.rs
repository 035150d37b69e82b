//! Corral's own ops as MCP tools, with the official Rust SDK (`rmcp`).
//!
//! `tools/list` shows only the ops the caller may call (`Deployment::callable_ops`, the same
//! evaluator as `GET /ops`); `tools/call` goes through `corral_guard::Gateway::call` like
//! `POST /ops/{id}`. A refusal is a tool error (`isError: true`) whose text carries corral's
//! code and message; `confirmation.required` carries the action id, the arguments and how a
//! person approves.
//!
//! The caller is fixed for stdio (`corral mcp`); over HTTP the server authenticates each
//! request and puts the `Caller` in the request's extensions, which `rmcp` hands to the handler.

pub mod lab;
pub mod schema;
pub mod upstream;

use std::sync::Arc;

use corral_guard::{Call, CallOptions, Caller, Gateway, Refusal, Reply};
use corral_lab::service::LabService;
use corral_policy::{Effect, OpSpec, Tier};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, SubscriptionFilter,
    Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

pub use rmcp;

/// The `_meta` key of a tool result that is an approved call's stored outcome (it did not run
/// again), as `POST /ops` says with `"replayed": true`.
pub const REPLAYED_META: &str = "dev.corral/replayed";

/// Largest download returned as tool text; bigger ones are refused (use `POST /ops/{id}`).
const MAX_STREAM_BYTES: u64 = 1 << 20;

/// The MCP server handler.
#[derive(Debug, Clone)]
pub struct CorralMcp {
    gateway: Arc<Gateway>,
    /// The lab, whose `sandbox_*` tools are offered beside the ops (`with_lab`).
    lab: Option<Arc<LabService>>,
    /// `Some` for stdio; `None` over HTTP, where each request carries its own `Caller`.
    caller: Option<Caller>,
    /// Tools named with `__` for each `.` of the op id (`mcp.tool_names: underscored`).
    underscored: bool,
}

/// The most characters of a tool name hosts with a strict pattern take.
const MAX_SAFE_NAME: usize = 64;

/// The tool name of op `id` with underscored names: `__` for each `.`; `None` when the id
/// already holds `__` (the name could not be read back) or the name would be too long.
pub fn underscored_name(id: &str) -> Option<String> {
    if id.contains("__") {
        return None;
    }
    let name = id.replace('.', "__");
    let safe = name.len() <= MAX_SAFE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    safe.then_some(name)
}

impl CorralMcp {
    /// A handler serving one fixed caller (stdio).
    pub fn for_caller(gateway: Arc<Gateway>, caller: Caller) -> Self {
        Self {
            gateway,
            lab: None,
            caller: Some(caller),
            underscored: false,
        }
    }

    /// A handler whose caller comes from each HTTP request's extensions (put there by the
    /// server's authentication).
    pub fn per_request(gateway: Arc<Gateway>) -> Self {
        Self {
            gateway,
            lab: None,
            caller: None,
            underscored: false,
        }
    }

    /// Names the tools with `__` for each `.` of their op ids (`mcp.tool_names: underscored`),
    /// and reads such names back on `tools/call`.
    #[must_use]
    pub fn with_underscored_names(mut self, on: bool) -> Self {
        self.underscored = on;
        self
    }

    /// Also offers the lab's `sandbox_*` tools (to the roles they need, while the lab is on).
    #[must_use]
    pub fn with_lab(mut self, lab: Arc<LabService>) -> Self {
        self.lab = Some(lab);
        self
    }

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        if let Some(c) = &self.caller {
            return Ok(c.clone());
        }
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("the request is not authenticated", None))
    }
}

/// One op as an MCP tool.
pub fn tool(op: &OpSpec) -> Tool {
    let tier = op.tier();
    let effects = op.effective_effects();
    let net = effects.iter().any(|e| e == Effect::Net);
    let annotations = ToolAnnotations::new()
        .read_only(tier == Tier::Read)
        .destructive(tier == Tier::Destructive)
        .open_world(net)
        .idempotent(op.idempotent);
    let mut t = Tool::new(
        op.id.as_str().to_owned(),
        op.summary.clone(),
        Arc::new(schema::input_schema(op)),
    )
    .with_annotations(annotations);
    t.title = Some(op.summary.clone());
    t
}

/// The text of a refusal: code, message, and for `confirmation.required` the action, its
/// arguments and how a person approves it.
pub fn refusal_text(r: &Refusal) -> String {
    // An MCP client lists what it may call with `tools/list`, not corral's HTTP route.
    let message = r.message.replace("`GET /ops`", "`tools/list`");
    let mut text = format!("{}: {message}", r.code);
    if let Some(d) = &r.details {
        if let Some(id) = d.get("action_id").and_then(Value::as_str) {
            text.push_str(&format!("\naction_id: {id}"));
            if let Some(args) = d.get("args") {
                text.push_str(&format!("\nargs: {args}"));
            }
            text.push_str(&format!(
                "\nto approve, a person (the requester, as a human principal) sends `POST /confirmations/{id}/decision` with {{\"decision\": \"approve\"}}, or runs `corral confirm {id}`; then retry the same call with the same arguments"
            ));
        }
        text.push_str(&format!("\ndetails: {d}"));
    }
    text
}

fn refused(r: &Refusal, request_id: &str) -> CallToolResult {
    let mut structured = json!({
        "code": r.code, "type": r.kind(), "error": r.message.replace("`GET /ops`", "`tools/list`"),
        "status": r.status(), "request_id": request_id,
    });
    if let (Some(Value::Object(d)), Some(s)) = (&r.details, structured.as_object_mut()) {
        for (k, v) in d {
            s.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let mut res = CallToolResult::error(vec![ContentBlock::text(refusal_text(r))]);
    res.structured_content = Some(structured);
    res
}

impl CorralMcp {
    /// Tells a stdio client each time the deployment is replaced (a reload, an upstream server's
    /// new tool list) that the tool list changed, until the session ends. For sessions that
    /// began with `initialize` (the notification is unscoped); a client on the subscription
    /// protocol asks with `subscriptions/listen` instead (see `listen`).
    pub async fn announce_changes(&self, peer: rmcp::Peer<RoleServer>) {
        let mut replaced = self.gateway.deployment_changes();
        replaced.borrow_and_update();
        while replaced.changed().await.is_ok() {
            if peer.notify_tool_list_changed().await.is_err() {
                return;
            }
        }
    }
}

impl ServerHandler for CorralMcp {
    fn get_info(&self) -> ServerConfig {
        let tools = ServerCapabilities::builder().enable_tools();
        // Only a stdio session lasts long enough to be told; over HTTP every request is its own.
        let capabilities = if self.caller.is_some() {
            tools.enable_tool_list_changed().build()
        } else {
            tools.build()
        };
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("corral", env!("CARGO_PKG_VERSION"))
                    .with_title("corral")
                    .with_description(
                        "a sandbox for AI agents: each tool is one op, checked by corral's policy and guardrails",
                    ),
            )
            .with_instructions(
                "corral: each tool is one op, checked by corral's policy and guardrails on every call",
            )
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        (self.caller.is_some() && requested.tools_list_changed == Some(true))
            .then(|| SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut replaced = self.gateway.deployment_changes();
        replaced.borrow_and_update();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = replaced.changed() => {
                    if changed.is_err() || context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&ctx)?;
        let d = self.gateway.deployment();
        let mut tools: Vec<Tool> = d
            .callable_ops(&caller.principal)
            .into_iter()
            .filter_map(|op| {
                let mut t = tool(op);
                if self.underscored {
                    t.name = underscored_name(op.id.as_str())?.into();
                }
                Some(t)
            })
            .collect();
        if self.underscored {
            // Two ids that read alike underscored (`a_.b`, `a._b`): neither is offered.
            let mut seen = std::collections::HashMap::<String, usize>::new();
            for t in &tools {
                *seen.entry(t.name.to_string()).or_default() += 1;
            }
            tools.retain(|t| seen.get(&*t.name) == Some(&1));
        }
        if let Some(lab) = &self.lab {
            tools.extend(lab::tools(lab, &caller.principal));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&ctx)?;
        if let Some(lab) = &self.lab
            && lab::is_lab_tool(&request.name)
        {
            let args = request.arguments.unwrap_or_default();
            return Ok(lab::call(lab, &caller, &request.name, args).await.into());
        }
        // Over HTTP, the request's guardrail headers (run, autonomy, dry-run); none on stdio.
        let opts = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<CallOptions>())
            .cloned()
            .unwrap_or_default();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let request_id = uuid::Uuid::now_v7().to_string();
        // An underscored name is read back to its op id; a dotted one is refused, as `tools/list`
        // never offered it.
        let op = if self.underscored {
            if request.name.contains('.') {
                let r = Refusal::new(
                    corral_policy::codes::OP_NOT_ENABLED,
                    format!(
                        "no tool `{}`: this server names tools with `__` for each `.` (`mcp.tool_names: underscored`); `tools/list` lists yours",
                        request.name
                    ),
                );
                return Ok(refused(&r, &request_id).into());
            }
            // The op `tools/list` offered under this name, never a guess at another id.
            let offered = self
                .gateway
                .deployment()
                .callable_ops(&caller.principal)
                .into_iter()
                .find(|op| underscored_name(op.id.as_str()).as_deref() == Some(&*request.name))
                .map(|op| op.id.as_str().to_owned());
            match offered {
                Some(id) => id,
                None => {
                    let r = Refusal::new(
                        corral_policy::codes::OP_NOT_ENABLED,
                        format!(
                            "no tool `{}` for you; `tools/list` lists yours",
                            request.name
                        ),
                    );
                    return Ok(refused(&r, &request_id).into());
                }
            }
        } else {
            request.name.to_string()
        };
        let (reply, outcome) = self
            .gateway
            .call_traced(
                Call {
                    caller,
                    op,
                    args,
                    request_id: request_id.clone(),
                },
                opts,
            )
            .await;
        let result = match reply {
            Reply::Json(v) => {
                let text = serde_json::to_string(&v).unwrap_or_default();
                let mut res = CallToolResult::success(vec![ContentBlock::text(text)]);
                if v.is_object() {
                    res.structured_content = Some(v);
                }
                res
            }
            Reply::Stream(s) => {
                if s.len > MAX_STREAM_BYTES {
                    CallToolResult::error(vec![ContentBlock::text(format!(
                        "the download is {} bytes, over the {MAX_STREAM_BYTES} bytes an MCP tool result carries; use `POST /ops/{}`",
                        s.len, request.name
                    ))])
                } else {
                    let mut buf = Vec::new();
                    let mut body = s.body.take(MAX_STREAM_BYTES);
                    match body.read_to_end(&mut buf).await {
                        Ok(_) => match String::from_utf8(buf) {
                            Ok(t) => CallToolResult::success(vec![ContentBlock::text(t)]),
                            Err(_) => CallToolResult::error(vec![ContentBlock::text(format!(
                                "the download is binary ({}); use `POST /ops/{}`",
                                s.content_type, request.name
                            ))]),
                        },
                        Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                            "the download failed: {e}"
                        ))]),
                    }
                }
            }
            Reply::Refused(r) => refused(&r, &request_id),
        };
        // An approved call that had run already: its stored outcome, marked in `_meta` so
        // nobody takes it for a new run.
        let mut result = result;
        if outcome == corral_guard::audit::Outcome::Replayed {
            let mut meta = result.meta.take().unwrap_or_default();
            meta.0.insert(REPLAYED_META.to_owned(), Value::Bool(true));
            result.meta = Some(meta);
        }
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_tool_error_with_its_code_and_message() {
        let r = Refusal::new("rbac.denied", "ask an operator");
        let res = refused(&r, "rid-1");
        assert_eq!(res.is_error, Some(true));
        let text = refusal_text(&r);
        assert_eq!(text, "rbac.denied: ask an operator");
        let s = res.structured_content.unwrap_or_default();
        assert_eq!(s["code"], json!("rbac.denied"));
        assert_eq!(s["request_id"], json!("rid-1"));
    }

    #[test]
    fn confirmation_required_says_which_action_and_how_to_approve() {
        let mut r = Refusal::new("confirmation.required", "a person must approve this");
        r.details = Some(json!({"action_id": "act-9", "args": {"path": "/w/x"}}));
        let text = refusal_text(&r);
        assert!(text.contains("action_id: act-9"), "{text}");
        assert!(text.contains(r#"args: {"path":"/w/x"}"#), "{text}");
        assert!(
            text.contains("POST /confirmations/act-9/decision"),
            "{text}"
        );
        assert!(text.contains("`corral confirm act-9`"), "{text}");
        let s = refused(&r, "rid").structured_content.unwrap_or_default();
        assert_eq!(s["action_id"], json!("act-9"));
    }
}
