//! Learning mode in the server: it starts only when every precondition holds (each missing one
//! named), adds `/learning/hint` and the learning blocks only when on, and hints raise a
//! verified human's level by one, audited and counted.

use std::time::Duration;

use corral_server::learning::LearningSetup;
use corral_server::serve::ServeError;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{ADMIN_TOKEN, AGENT_TOKEN, Server, TOKENS_YAML, Workspace, send, token_env};

/// A valid manifest: a number and a string target.
pub fn manifest() -> Value {
    json!({
        "schema_version": 1,
        "scenario_id": "kafka-lag-7f3a",
        "seeded_at": "2026-10-30T10:00:00Z",
        "default_disclosure": 0,
        "targets": [
            {"id": "total_lag", "descriptor": "total lag of group orders-processor",
             "value": 5100, "unit": "messages"},
            {"id": "bad_partition", "descriptor": "name of the stuck partition",
             "value": "orders-7"}
        ]
    })
}

/// The jail with both tokens, autonomy L2 and the audit in the store: every precondition.
pub fn learning_yaml(ws: &Workspace) -> String {
    ws.jail_yaml("autonomy: L2\n")
}

/// A setup over `ws/manifest.json` (written from `m`), hints at most every `interval`.
pub fn setup(ws: &Workspace, m: &Value, interval: Duration) -> LearningSetup {
    let path = ws.dir.path().join("manifest.json");
    std::fs::write(&path, m.to_string()).unwrap();
    let mut s = LearningSetup::new(path);
    s.hint_interval = interval;
    s
}

pub async fn learning_server(ws: &Workspace, interval: Duration) -> Server {
    let loaded = ws.load(&learning_yaml(ws), &token_env());
    match Server::start_learning(&loaded, setup(ws, &manifest(), interval), false).await {
        Ok(s) => s,
        Err(e) => panic!("learning mode did not start: {e}"),
    }
}

/// The codes of the preconditions learning mode names for `yaml` (and `--allow-open`).
async fn refused(ws: &Workspace, yaml: &str, m: &Value, allow_open: bool) -> (Vec<String>, String) {
    let loaded = ws.load(yaml, &token_env());
    match Server::start_learning(&loaded, setup(ws, m, Duration::ZERO), allow_open).await {
        Ok(_) => panic!("learning mode started with {yaml}"),
        Err(ServeError::Learning(r)) => (
            r.missing.iter().map(|p| p.code().to_owned()).collect(),
            r.to_string(),
        ),
        Err(e) => panic!("refused for another reason: {e}"),
    }
}

fn no_auth_yaml(ws: &Workspace) -> String {
    learning_yaml(ws).replace(TOKENS_YAML, "")
}

#[tokio::test]
async fn learning_mode_without_auth_names_only_the_auth_precondition() {
    let ws = Workspace::new();
    let (codes, text) = refused(&ws, &no_auth_yaml(&ws), &manifest(), false).await;
    assert_eq!(codes, ["learning.precondition_auth"], "{text}");
    assert!(text.contains("auth.tokens"), "{text}");
}

#[tokio::test]
async fn learning_mode_with_allow_open_names_only_the_open_mode_precondition() {
    let ws = Workspace::new();
    let (codes, text) = refused(&ws, &learning_yaml(&ws), &manifest(), true).await;
    assert_eq!(codes, ["learning.precondition_open_mode"], "{text}");
}

#[tokio::test]
async fn learning_mode_with_an_invalid_manifest_names_it_without_any_value() {
    let ws = Workspace::new();
    let mut m = manifest();
    m["targets"][0]["descriptor"] = json!("total lag is 5100");
    let (codes, text) = refused(&ws, &learning_yaml(&ws), &m, false).await;
    assert_eq!(codes, ["learning.precondition_manifest"], "{text}");
    assert!(text.contains("targets[0]"), "{text}");
    assert!(
        !text.contains("5100") && !text.contains("orders-7"),
        "{text}"
    );
}

#[tokio::test]
async fn learning_mode_above_autonomy_l2_names_only_the_autonomy_precondition() {
    let ws = Workspace::new();
    for yaml in [
        learning_yaml(&ws).replace("autonomy: L2\n", ""),
        learning_yaml(&ws).replace("autonomy: L2\n", "autonomy: L3\n"),
    ] {
        let (codes, text) = refused(&ws, &yaml, &manifest(), false).await;
        assert_eq!(codes, ["learning.precondition_autonomy"], "{text}");
    }
}

#[tokio::test]
async fn learning_mode_with_the_audit_off_names_only_the_audit_precondition() {
    let ws = Workspace::new();
    let yaml = format!("{}audit: {{sink: off}}\n", learning_yaml(&ws));
    let (codes, text) = refused(&ws, &yaml, &manifest(), false).await;
    assert_eq!(codes, ["learning.precondition_audit"], "{text}");
}

#[tokio::test]
async fn learning_mode_names_every_missing_precondition_at_once() {
    let ws = Workspace::new();
    let yaml = format!(
        "{}audit: {{sink: off}}\n",
        no_auth_yaml(&ws).replace("autonomy: L2\n", "")
    );
    let (codes, text) = refused(&ws, &yaml, &json!({}), true).await;
    assert_eq!(
        codes,
        [
            "learning.precondition_auth",
            "learning.precondition_open_mode",
            "learning.precondition_manifest",
            "learning.precondition_autonomy",
            "learning.precondition_audit"
        ]
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("error[learning.precondition_"))
            .count(),
        5,
        "{text}"
    );
}

/// What the route table answers an admin on the learning routes.
async fn learning_routes(s: &Server) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    for (method, path) in [
        (Method::POST, "/learning/hint"),
        (Method::GET, "/learning/hint"),
        (Method::POST, "/learning"),
    ] {
        let r = send(
            s.client()
                .request(method, s.url(path))
                .bearer_auth(ADMIN_TOKEN),
        )
        .await;
        out.push((r.status, r.code()));
    }
    out
}

#[tokio::test]
async fn with_learning_mode_off_the_route_table_healthz_and_me_are_unchanged() {
    let ws = Workspace::new();
    let off = Server::start(&ws.load(&learning_yaml(&ws), &token_env())).await;
    assert_eq!(
        learning_routes(&off).await,
        [
            (404, "route.not_found".to_owned()),
            (404, "route.not_found".to_owned()),
            (404, "route.not_found".to_owned())
        ]
    );
    let health = off.get("/healthz").await.json();
    assert_eq!(health["mode"], "auth");
    assert!(health.get("scenario_id").is_none(), "{health}");
    let me = off.get_as(AGENT_TOKEN, "/me").await.json();
    assert!(me.get("learning").is_none(), "{me}");
    let metrics = off.get_as(ADMIN_TOKEN, "/metrics").await.text;
    assert!(!metrics.contains("corral_learning"), "{metrics}");

    let ws2 = Workspace::new();
    let on = learning_server(&ws2, Duration::ZERO).await;
    let routes = learning_routes(&on).await;
    assert_eq!(routes[0].0, 200, "{routes:?}");
    assert_eq!(routes[1], (405, "route.method_not_allowed".to_owned()));
    assert_eq!(routes[2], (404, "route.not_found".to_owned()));
}

#[tokio::test]
async fn healthz_in_learning_mode_reports_the_mode_and_the_scenario_id_but_no_value() {
    let ws = Workspace::new();
    let s = learning_server(&ws, Duration::ZERO).await;
    let r = s.get("/healthz").await;
    assert_eq!(r.json()["mode"], "learning");
    assert_eq!(r.json()["scenario_id"], "kafka-lag-7f3a");
    assert!(
        !r.text.contains("5100") && !r.text.contains("orders-7"),
        "{}",
        r.text
    );
}

async fn hint(s: &Server, token: &str) -> crate::common::Reply {
    send(s.client().post(s.url("/learning/hint")).bearer_auth(token)).await
}

#[tokio::test]
async fn a_hint_raises_the_humans_level_by_one_up_to_3_and_me_shows_it() {
    let ws = Workspace::new();
    let s = learning_server(&ws, Duration::ZERO)
        .await
        .with_token(AGENT_TOKEN);
    let me = s.get("/me").await.json();
    assert_eq!(
        me["learning"],
        json!({"scenario_id": "kafka-lag-7f3a", "level": 0, "max_level": 3, "can_take_hint": true})
    );
    for level in 1..=3 {
        let r = hint(&s, AGENT_TOKEN).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json()["level"], level);
        assert_eq!(r.json()["old_level"], level - 1);
    }
    hint(&s, AGENT_TOKEN)
        .await
        .assert_error(409, "learning.hint_at_max");
    let me = s.get("/me").await.json();
    assert_eq!(me["learning"]["level"], 3);
    assert_eq!(me["learning"]["can_take_hint"], false);
    // Another learner is still at the default.
    let other = s.get_as(ADMIN_TOKEN, "/me").await.json();
    assert_eq!(other["learning"]["level"], 0);
}

#[tokio::test]
async fn a_second_hint_too_soon_is_refused_with_429_and_the_level_does_not_move() {
    let ws = Workspace::new();
    let s = learning_server(&ws, Duration::from_secs(3600))
        .await
        .with_token(AGENT_TOKEN);
    assert_eq!(hint(&s, AGENT_TOKEN).await.json()["level"], 1);
    let r = hint(&s, AGENT_TOKEN).await;
    r.assert_error(429, "learning.hint_rate_limited");
    assert!(r.headers.get("retry-after").is_some(), "{:?}", r.headers);
    assert_eq!(s.get("/me").await.json()["learning"]["level"], 1);
    assert_eq!(
        s.get("/me").await.json()["learning"]["can_take_hint"],
        false
    );
}

#[tokio::test]
async fn a_service_principal_cannot_take_a_hint() {
    let ws = Workspace::new();
    let yaml = learning_yaml(&ws).replace(
        "    - {id: admin, roles: [admin], token_env: CORRAL_IT_ADMIN_TOKEN}",
        "    - {id: admin, roles: [admin], kind: service, token_env: CORRAL_IT_ADMIN_TOKEN}",
    );
    let loaded = ws.load(&yaml, &token_env());
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    hint(&s, ADMIN_TOKEN)
        .await
        .assert_error(403, "learning.hint_not_human");
    let me = s.get_as(ADMIN_TOKEN, "/me").await.json();
    assert_eq!(me["learning"]["level"], 0);
    assert_eq!(me["learning"]["can_take_hint"], false);
}

#[tokio::test]
async fn a_hint_is_audited_with_subject_scenario_and_levels_and_counted_in_metrics() {
    let ws = Workspace::new();
    let s = learning_server(&ws, Duration::ZERO)
        .await
        .with_token(ADMIN_TOKEN);
    assert_eq!(hint(&s, AGENT_TOKEN).await.status, 200);
    // The admin reads the whole audit at level 3 (below it, the view is narrowed).
    for _ in 0..3 {
        assert_eq!(hint(&s, ADMIN_TOKEN).await.status, 200);
    }
    let audit = s
        .get("/audit?op=learning_hint&principal=agent")
        .await
        .json();
    let events = audit["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{audit}");
    assert_eq!(events[0]["principal_id"], "agent");
    assert_eq!(
        events[0]["detail"],
        "subject token:person:agent; scenario kafka-lag-7f3a; level 0 -> 1"
    );
    let metrics = s.get("/metrics").await.text;
    assert!(
        metrics.contains("corral_learning_hints_total{level=\"1\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("corral_learning_manifest_errors_total 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_invalid_manifest_reload_keeps_the_scenario_and_counts_in_metrics() {
    let ws = Workspace::new();
    let s = learning_server(&ws, Duration::ZERO)
        .await
        .with_token(ADMIN_TOKEN);
    std::fs::write(ws.dir.path().join("manifest.json"), "{not json, and longer").unwrap();
    let health = s.get("/healthz").await.json();
    assert_eq!(health["scenario_id"], "kafka-lag-7f3a");
    let metrics = s.get("/metrics").await.text;
    assert!(
        metrics.contains("corral_learning_manifest_errors_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn no_op_or_mcp_tool_takes_a_hint() {
    let ws = Workspace::new();
    let s = learning_server(&ws, Duration::ZERO)
        .await
        .with_token(ADMIN_TOKEN);
    let ops = s.get("/ops").await;
    assert_eq!(ops.status, 200, "{}", ops.text);
    assert!(!ops.text.to_lowercase().contains("hint"), "{}", ops.text);
    let mcp = crate::mcp::client(&s, ADMIN_TOKEN).await;
    let tools = mcp.list_all_tools().await.unwrap();
    assert!(!tools.is_empty());
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert!(
        names.iter().all(|n| !n.to_lowercase().contains("hint")),
        "{names:?}"
    );
}

#[tokio::test]
async fn below_level_3_the_audit_view_shows_op_and_status_only_and_at_3_everything() {
    let ws = Workspace::new();
    ws.write("notes.txt", "hello");
    let s = learning_server(&ws, Duration::ZERO)
        .await
        .with_token(ADMIN_TOKEN);
    let read = s
        .call("files.read", json!({"path": ws.at("notes.txt")}))
        .await;
    assert_eq!(read.status, 200, "{}", read.text);
    let narrowed = s.get("/audit?op=files.read").await;
    assert_eq!(narrowed.status, 200, "{}", narrowed.text);
    let event = &narrowed.json()["events"][0];
    assert_eq!(event["op"], "files.read", "{}", narrowed.text);
    assert_eq!(event["outcome"], "ok");
    assert_eq!(event["status"], 200);
    for hidden in ["args_shape", "args_hash", "detail", "attestation", "rule"] {
        assert!(event.get(hidden).is_none(), "{hidden}: {event}");
    }
    for _ in 0..3 {
        assert_eq!(hint(&s, ADMIN_TOKEN).await.status, 200);
    }
    let full = s.get("/audit?op=files.read").await.json();
    assert_eq!(
        full["events"][0]["args_shape"],
        json!({"path": "string"}),
        "{full}"
    );
}

#[test]
fn the_root_agent_may_not_take_the_reserved_name_lab_coach() {
    let ws = Workspace::new();
    let yaml = format!(
        "{}llm: {{base_url_env: U, api_key_env: K, root_agent: {}}}\n",
        learning_yaml(&ws),
        corral_learn::levels::LAB_COACH
    );
    let env: std::collections::HashMap<String, String> = [
        ("U", "http://127.0.0.1:9/v1"),
        ("K", "sk-0123456789"),
        (crate::common::AGENT_ENV, AGENT_TOKEN),
        (crate::common::ADMIN_ENV, ADMIN_TOKEN),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    let Err(e) = corral_config::load_str("corral.yaml", &yaml, &ws.base(), &env) else {
        panic!("a root agent named lab_coach was accepted");
    };
    let text = e.render();
    assert!(
        text.contains("config.invalid_value") && text.contains("reserved"),
        "{text}"
    );
    let ok = yaml.replace("root_agent: lab_coach", "root_agent: coach");
    assert!(corral_config::load_str("corral.yaml", &ok, &ws.base(), &env).is_ok());
}

#[test]
fn the_manifest_example_in_docs_learning_md_loads_and_matches_the_tests_manifest() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/learning.md");
    let text = std::fs::read_to_string(path).unwrap();
    let block: String = text
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap()
        .to_owned();
    let m = corral_learn::manifest::parse(block.as_bytes()).unwrap();
    assert_eq!(m.scenario_id, "kafka-lag-7f3a");
    let doc: Value = serde_json::from_str(&block).unwrap();
    assert_eq!(doc, manifest());
}

#[tokio::test]
async fn a_delegated_agent_reads_at_its_humans_level_and_cannot_raise_it() {
    const SECRET: &str = "0123456789abcdef0123456789abcdef-jwt";
    let ws = Workspace::new();
    let yaml = learning_yaml(&ws).replace(
        TOKENS_YAML,
        "auth:\n  jwt: {hs256_secret_env: CORRAL_IT_JWT_SECRET}\n",
    );
    let loaded = ws.load(&yaml, &[("CORRAL_IT_JWT_SECRET", SECRET)]);
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let sign = |claims: Value| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    };
    let human = sign(json!({"sub": "ada", "exp": exp}));
    let agent = sign(json!({"sub": "ada", "exp": exp, "act": {"sub": "svc:planner"}}));
    assert_eq!(s.get_as(&agent, "/me").await.json()["kind"], "delegated");

    let r = hint(&s, &human).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let me = s.get_as(&agent, "/me").await.json();
    assert_eq!(me["learning"]["level"], 1, "{me}");
    assert_eq!(me["learning"]["can_take_hint"], false, "{me}");
    hint(&s, &agent)
        .await
        .assert_error(403, "learning.hint_not_human");
    assert_eq!(s.get_as(&human, "/me").await.json()["learning"]["level"], 1);
}

#[tokio::test]
async fn below_level_3_a_lab_runs_outputs_show_no_text_and_at_3_they_do() {
    const SECRET: &str = "0123456789abcdef0123456789abcdef-lab";
    const MOCKED: &str = "first synthetic account";
    let ws = Workspace::new();
    let yaml = learning_yaml(&ws).replace(
        TOKENS_YAML,
        "auth:\n  jwt: {hs256_secret_env: CORRAL_IT_LAB_JWT_SECRET}\n",
    );
    let loaded = ws.load(&yaml, &[("CORRAL_IT_LAB_JWT_SECRET", SECRET)]);
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let t = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": "olga", "roles": ["operator"], "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    let post =
        |path: &str, body: Value| send(s.client().post(s.url(path)).bearer_auth(&t).json(&body));
    let scenario = post(
        "/v1/sandbox/scenarios",
        json!({
            "name": "learning lab",
            "samples": [{"key": "sample-1", "input": "agent:user1@example.test"}],
            "mocks": [{"resource": "agent:user1@example.test", "response": MOCKED}]
        }),
    )
    .await;
    assert_eq!(scenario.status, 201, "{}", scenario.text);
    // Narrowed: the id is there, the name (written text) is not.
    assert!(scenario.json().get("name").is_none(), "{}", scenario.text);
    let id = scenario.json()["id"].as_str().unwrap().to_owned();
    let run = post(
        &format!("/v1/sandbox/scenarios/{id}/runs"),
        json!({"variant": "candidate"}),
    )
    .await;
    assert_eq!(run.status, 201, "{}", run.text);
    let run_id = run.json()["id"].as_str().unwrap().to_owned();
    let outputs = s
        .get_as(&t, &format!("/v1/sandbox/runs/{run_id}/outputs"))
        .await;
    assert_eq!(outputs.status, 200, "{}", outputs.text);
    assert!(!outputs.text.contains(MOCKED), "{}", outputs.text);
    assert!(
        outputs.json()["items"]
            .as_array()
            .is_some_and(|i| !i.is_empty()),
        "{}",
        outputs.text
    );
    for _ in 0..3 {
        assert_eq!(hint(&s, &t).await.status, 200);
    }
    let outputs = s
        .get_as(&t, &format!("/v1/sandbox/runs/{run_id}/outputs"))
        .await;
    assert!(outputs.text.contains(MOCKED), "{}", outputs.text);
}
