//! An MCP client of `CorralMcp::for_caller` (what `corral mcp` serves on stdio) sees only the
//! ops its principal may call, with corral's annotations; an allowed call returns the op's
//! result, a refused one is a tool error carrying corral's code, and nothing ran for it.

use std::sync::Arc;

use corral_exec::mock::{MockBackend, MockResponse};
use corral_guard::guardrails::GuardPolicy;
use corral_guard::{Caller, Deployment, Gateway};
use corral_mcp::CorralMcp;
use corral_mcp::rmcp::ServiceExt;
use corral_mcp::rmcp::model::{CallToolRequestParams, CallToolResult};
use corral_mcp::rmcp::service::{RoleClient, RunningService};
use corral_ops::exec::{CustomOp, CustomRun};
use corral_ops::{Op, Registry};
use corral_policy::{
    Catalog, Effect, Engine, OpId, OpSpec, ParamKind, Policy, Principal, Rule, Selector,
};
use serde_json::{Value, json};

/// A gateway with `ledger.peek` (read tier) and `ledger.drop {word}` (destructive tier), both
/// allowed by the policy and run by the mock backend, with RBAC on.
fn gateway() -> Arc<Gateway> {
    let peek = OpSpec::new(
        OpId::parse("ledger.peek").unwrap(),
        &[Effect::Read],
        "show the ledger",
    );
    let drop = OpSpec::new(
        OpId::parse("ledger.drop").unwrap(),
        &[Effect::Delete],
        "drop a word from the ledger",
    )
    .param("word", ParamKind::Word, true);
    let mut catalog = Catalog::empty();
    catalog.add_custom(peek.clone()).unwrap();
    catalog.add_custom(drop.clone()).unwrap();
    let policy = Policy::new().rule(Rule::allow(
        "ledger",
        vec![Selector::parse("ledger.*", &catalog).unwrap()],
    ));
    let custom = |spec: &OpSpec, argv: &[&str]| -> Arc<dyn Op> {
        let run = CustomRun {
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            ..CustomRun::default()
        };
        Arc::new(CustomOp::new(spec.clone(), run, Vec::new()))
    };
    let ops = vec![
        custom(&peek, &["ledger", "peek"]),
        custom(&drop, &["ledger", "drop", "{word}"]),
    ];
    let mut guard = GuardPolicy::new();
    guard.rbac = Some(Default::default());
    let deployment = Deployment {
        engine: Engine::new(catalog.clone(), policy),
        registry: Registry::new(catalog, ops),
        protected: Vec::new(),
        guard,
    };
    let backend = MockBackend::new([("ledger peek".to_owned(), MockResponse::ok("w1\nw2\n"))]);
    Arc::new(Gateway::new(
        deployment,
        Arc::new(backend),
        Vec::new(),
        "default",
    ))
}

/// A client connected over an in-memory pipe to a handler serving `caller`.
async fn client(gateway: Arc<Gateway>, caller: Principal) -> RunningService<RoleClient, ()> {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let handler = CorralMcp::for_caller(gateway, Caller::new(caller));
    tokio::spawn(async move {
        if let Ok(running) = handler.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io).await.unwrap()
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
async fn a_viewer_is_offered_only_the_read_op_with_its_annotations_and_an_admin_both() {
    let gw = gateway();
    let viewer = client(gw.clone(), Principal::new("ada", &["viewer"])).await;
    let admin = client(gw, Principal::new("ada", &["admin"])).await;
    let names = |tools: &[corral_mcp::rmcp::model::Tool]| {
        let mut n: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
        n.sort();
        n
    };
    let tools = viewer.list_all_tools().await.unwrap();
    assert_eq!(names(&tools), ["ledger.peek"]);
    let a = tools[0].annotations.as_ref().unwrap();
    assert_eq!(
        (a.read_only_hint, a.destructive_hint),
        (Some(true), Some(false))
    );
    let tools = admin.list_all_tools().await.unwrap();
    assert_eq!(names(&tools), ["ledger.drop", "ledger.peek"]);
    let drop = tools.iter().find(|t| t.name == "ledger.drop").unwrap();
    assert_eq!(
        drop.annotations.as_ref().unwrap().destructive_hint,
        Some(true)
    );
    assert!(
        drop.input_schema["required"]
            .as_array()
            .unwrap()
            .contains(&json!("word")),
        "{:?}",
        drop.input_schema
    );
    viewer.cancel().await.unwrap();
    admin.cancel().await.unwrap();
}

#[tokio::test]
async fn an_allowed_call_returns_the_ops_result_and_a_refused_one_is_a_tool_error_with_its_code() {
    let gw = gateway();
    let viewer = client(gw, Principal::new("ada", &["viewer"])).await;
    let r = call(&viewer, "ledger.peek", json!({})).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    assert!(text(&r).contains("w1\\nw2"), "{}", text(&r));

    // Not offered, and refused when called anyway: RBAC, with the role it needs.
    let r = call(&viewer, "ledger.drop", json!({"word": "w1"})).await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    let t = text(&r);
    assert!(t.starts_with("rbac.denied: "), "{t}");
    assert!(t.contains("needs the role `admin`"), "{t}");
    let s = r.structured_content.as_ref().unwrap();
    assert_eq!(
        (&s["code"], &s["status"]),
        (&json!("rbac.denied"), &json!(403))
    );

    // An unknown op: the same answer as one the caller may not see.
    let r = call(&viewer, "ledger.nope", json!({})).await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(text(&r).starts_with("op.not_enabled: "), "{}", text(&r));
    viewer.cancel().await.unwrap();
}
