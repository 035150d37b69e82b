//! The lab over HTTP (`/v1/sandbox/*`, issue 14 item 7): spec 003's worked example, determinism,
//! tenancy, roles, the off switch, restarts, the synthetic limits, comparisons and the audit,
//! all through a real server on a socket with JWT callers (roles and tenants from claims).

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Reply, Server, Workspace, send};
use crate::pg::Schema;

const SECRET_ENV: &str = "CORRAL_IT_LAB_JWT_SECRET";
const SECRET: &str = "0123456789abcdef0123456789abcdef-lab";

/// Spec 003's template and the response of its one mock.
const TEMPLATE: &str = "{{subject_kind}}:user{{index}}@example.test";
const MOCKED: &str = "first synthetic account";

fn yaml(ws: &Workspace, enabled: bool, storage: Option<&str>) -> String {
    let storage = storage
        .map(|u| format!("storage: {{url: \"{u}\"}}\n"))
        .unwrap_or_default();
    format!(
        "version: 1\npreset: workspace_jail\nroot: {}\nstate_dir: {}\nauth:\n  jwt: {{hs256_secret_env: {SECRET_ENV}}}\nsandbox: {{enabled: {enabled}}}\n{storage}",
        ws.root.display(),
        ws.state.display()
    )
}

async fn server(ws: &Workspace, enabled: bool) -> Server {
    server_on(ws, enabled, None).await
}

/// A server whose store is `storage` (a PostgreSQL url), or SQLite in the state dir.
async fn server_on(ws: &Workspace, enabled: bool, storage: Option<&str>) -> Server {
    Server::start(&ws.load(&yaml(ws, enabled, storage), &[(SECRET_ENV, SECRET)])).await
}

/// A JWT for `sub` with `roles` in `tenant` (none: the default tenant).
fn token(sub: &str, roles: &[&str], tenant: Option<&str>) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let mut claims = json!({"sub": sub, "roles": roles, "exp": exp});
    if let Some(t) = tenant {
        claims["tenant"] = json!(t);
    }
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn operator() -> String {
    token("olga", &["operator"], None)
}

async fn req(s: &Server, token: &str, method: Method, path: &str, body: Option<Value>) -> Reply {
    let mut rb = s.client().request(method, s.url(path)).bearer_auth(token);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    send(rb).await
}

async fn post(s: &Server, token: &str, path: &str, body: Value) -> Reply {
    req(s, token, Method::POST, path, Some(body)).await
}

async fn get(s: &Server, token: &str, path: &str) -> Reply {
    req(s, token, Method::GET, path, None).await
}

#[track_caller]
fn created(r: &Reply) -> Value {
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()
}

#[track_caller]
fn ok(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

/// Spec 003's steps 1 and 2: the synthetic inputs, then the scenario with the one mock.
async fn worked_scenario(s: &Server, t: &str) -> String {
    let samples = ok(&post(
        s,
        t,
        "/v1/sandbox/synthetic-data",
        json!({"subject_kind": "agent", "count": 2, "seed": TEMPLATE}),
    )
    .await);
    assert_eq!(
        samples,
        json!({"samples": [
            {"key": "sample-1", "input": "agent:user1@example.test"},
            {"key": "sample-2", "input": "agent:user2@example.test"}
        ]})
    );
    let scenario = created(
        &post(
            s,
            t,
            "/v1/sandbox/scenarios",
            json!({
                "name": "worked example",
                "samples": samples["samples"],
                "mocks": [{"resource": "agent:user1@example.test", "response": MOCKED}]
            }),
        )
        .await,
    );
    assert_eq!(scenario["version"], 1);
    assert_eq!(scenario["steps"].as_array().unwrap().len(), 2);
    scenario["id"].as_str().unwrap().to_owned()
}

fn outputs_of(v: &Value) -> Vec<String> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["output"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn spec_003s_worked_example_runs_through_http_with_its_counts_and_miss_marker() {
    let ws = Workspace::new();
    worked_example(&server(&ws, true).await).await;
}

#[tokio::test]
async fn spec_003s_worked_example_runs_through_http_on_postgres() {
    let Some(schema) = Schema::create("lab_worked").await else {
        return;
    };
    let ws = Workspace::new();
    worked_example(&server_on(&ws, true, Some(&schema.url)).await).await;
    schema.drop().await;
}

async fn worked_example(s: &Server) {
    let t = operator();
    let id = worked_scenario(s, &t).await;
    let run = created(
        &post(
            s,
            &t,
            &format!("/v1/sandbox/scenarios/{id}/runs"),
            json!({"variant": "candidate"}),
        )
        .await,
    );
    let run_id = run["id"].as_str().unwrap();
    let got = ok(&get(s, &t, &format!("/v1/sandbox/runs/{run_id}")).await);
    assert_eq!(got["status"], "completed");
    assert_eq!(
        (&got["steps_total"], &got["steps_ok"], &got["steps_error"]),
        (&json!(2), &json!(1), &json!(1))
    );
    assert_eq!(
        (&got["isolated"], &got["destroyed"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(
        (&got["runner"], &got["backend"], &got["purpose"]),
        (
            &json!("inproc"),
            &json!("inproc-mock"),
            &json!("simulation")
        )
    );
    assert_eq!(got["variant"], "candidate");
    assert_eq!(got["verdict"], "not_scored");
    assert_eq!(got["infra_errors"], 0);
    let misses = got["mock_misses"].as_array().unwrap();
    assert_eq!(misses.len(), 1);
    assert_eq!(
        (&misses[0]["step"], &misses[0]["op"]),
        (&json!(2), &json!("scenario.resource"))
    );
    let outs = ok(&get(s, &t, &format!("/v1/sandbox/runs/{run_id}/outputs")).await);
    assert_eq!(
        outputs_of(&outs),
        [MOCKED, "[[mock-miss:agent:user2@example.test]]"]
    );
    assert_eq!(outs["items"][1]["error_code"], "lab.mock_miss");
    // The run is listed under its scenario.
    let runs = ok(&get(s, &t, &format!("/v1/sandbox/runs?scenario={id}")).await);
    assert_eq!(runs["items"][0]["id"], run_id);
}

#[tokio::test]
async fn the_same_run_twice_gives_identical_outputs() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let id = worked_scenario(&s, &t).await;
    let mut all = Vec::new();
    for _ in 0..2 {
        let run = created(
            &post(
                &s,
                &t,
                &format!("/v1/sandbox/scenarios/{id}/runs"),
                json!({"variant": "candidate", "seed": 7, "trials": 2}),
            )
            .await,
        );
        let outs = ok(&get(
            &s,
            &t,
            &format!("/v1/sandbox/runs/{}/outputs", run["id"].as_str().unwrap()),
        )
        .await);
        let items: Vec<Value> = outs["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                json!([
                    o["trial"],
                    o["step"],
                    o["input"],
                    o["output"],
                    o["ok"],
                    o["error_code"]
                ])
            })
            .collect();
        assert_eq!(items.len(), 4);
        all.push(items);
    }
    assert_eq!(all[0], all[1]);
}

#[tokio::test]
async fn another_tenant_cannot_read_or_run_a_scenario_it_gets_404_not_403() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let a = token("ann", &["operator"], Some("tenant-a"));
    let b = token("bob", &["admin"], Some("tenant-b"));
    let id = worked_scenario(&s, &a).await;
    let run = created(
        &post(
            &s,
            &a,
            &format!("/v1/sandbox/scenarios/{id}/runs"),
            json!({"variant": "v"}),
        )
        .await,
    );
    let run_id = run["id"].as_str().unwrap();
    get(&s, &b, &format!("/v1/sandbox/scenarios/{id}"))
        .await
        .assert_error(404, "lab.not_found");
    post(
        &s,
        &b,
        &format!("/v1/sandbox/scenarios/{id}/runs"),
        json!({"variant": "v"}),
    )
    .await
    .assert_error(404, "lab.not_found");
    req(
        &s,
        &b,
        Method::PUT,
        &format!("/v1/sandbox/scenarios/{id}"),
        Some(json!({"name": "x", "steps": [{"input": "y"}]})),
    )
    .await
    .assert_error(404, "lab.not_found");
    get(&s, &b, &format!("/v1/sandbox/runs/{run_id}"))
        .await
        .assert_error(404, "lab.not_found");
    get(&s, &b, &format!("/v1/sandbox/runs/{run_id}/outputs"))
        .await
        .assert_error(404, "lab.not_found");
    post(
        &s,
        &b,
        "/v1/sandbox/comparisons",
        json!({"baseline": {"variant": "x"}, "candidate": {"variant": "y"}, "scenarios": [id]}),
    )
    .await
    .assert_error(404, "lab.not_found");
    let listed = ok(&get(&s, &b, "/v1/sandbox/scenarios").await);
    assert_eq!(listed["items"], json!([]));
    let listed = ok(&get(&s, &b, "/v1/sandbox/runs").await);
    assert_eq!(listed["items"], json!([]));
    // The owner still sees both.
    ok(&get(&s, &a, &format!("/v1/sandbox/scenarios/{id}")).await);
    ok(&get(&s, &a, &format!("/v1/sandbox/runs/{run_id}")).await);
}

#[tokio::test]
async fn a_viewer_reads_but_cannot_create_or_run_and_a_deploy_comparison_needs_admin() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let op = operator();
    let viewer = token("vera", &["viewer"], None);
    let nobody = token("nora", &["dev"], None);
    let admin = token("adam", &["admin"], None);
    let id = worked_scenario(&s, &op).await;
    let run = created(
        &post(
            &s,
            &op,
            &format!("/v1/sandbox/scenarios/{id}/runs"),
            json!({"variant": "v"}),
        )
        .await,
    );
    // Reads.
    ok(&get(&s, &viewer, "/v1/sandbox/scenarios").await);
    ok(&get(&s, &viewer, &format!("/v1/sandbox/scenarios/{id}")).await);
    ok(&get(
        &s,
        &viewer,
        &format!("/v1/sandbox/runs/{}/outputs", run["id"].as_str().unwrap()),
    )
    .await);
    ok(&get(&s, &viewer, "/v1/sandbox/comparisons").await);
    // Writes.
    let r = post(
        &s,
        &viewer,
        "/v1/sandbox/scenarios",
        json!({"name": "n", "steps": [{"input": "i"}]}),
    )
    .await;
    r.assert_error(403, "rbac.denied");
    let msg = r.json()["error"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("`operator`") && msg.contains("`viewer`"),
        "{msg}"
    );
    post(
        &s,
        &viewer,
        &format!("/v1/sandbox/scenarios/{id}/runs"),
        json!({"variant": "v"}),
    )
    .await
    .assert_error(403, "rbac.denied");
    post(&s, &viewer, "/v1/sandbox/synthetic-data", json!({}))
        .await
        .assert_error(403, "rbac.denied");
    let r = get(&s, &nobody, "/v1/sandbox/scenarios").await;
    r.assert_error(403, "rbac.denied");
    assert!(r.text.contains("no tier role"), "{}", r.text);
    // A deploy comparison: admin only; a plain one: operator.
    let body = |deploy: bool| json!({"baseline": {"variant": "a"}, "candidate": {"variant": "b"}, "scenarios": [id], "deploy": deploy});
    let r = post(&s, &op, "/v1/sandbox/comparisons", body(true)).await;
    r.assert_error(403, "rbac.denied");
    assert!(r.text.contains("`admin`"), "{}", r.text);
    let plain = created(&post(&s, &op, "/v1/sandbox/comparisons", body(false)).await);
    assert_eq!(plain["deploy"], false);
    let deploy = created(&post(&s, &admin, "/v1/sandbox/comparisons", body(true)).await);
    assert_eq!(deploy["deploy"], true);
    ok(&get(
        &s,
        &viewer,
        &format!("/v1/sandbox/comparisons/{}", deploy["id"].as_str().unwrap()),
    )
    .await);
}

#[tokio::test]
async fn a_linux_isolation_request_for_a_mock_run_is_refused_and_nothing_is_recorded() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let id = worked_scenario(&s, &t).await;
    post(
        &s,
        &t,
        &format!("/v1/sandbox/scenarios/{id}/runs"),
        json!({"variant": "v", "isolation": "linux"}),
    )
    .await
    .assert_error(422, "lab.isolation_unsupported");
    assert_eq!(
        ok(&get(&s, &t, "/v1/sandbox/runs").await)["items"],
        json!([])
    );
}

/// Every lab route, with a body where it takes one.
fn lab_routes(id: &str, run: &str, cmp: &str) -> Vec<(Method, String, Option<Value>)> {
    vec![
        (
            Method::POST,
            "/v1/sandbox/synthetic-data".into(),
            Some(json!({})),
        ),
        (
            Method::POST,
            "/v1/sandbox/scenarios".into(),
            Some(json!({"name": "n", "steps": [{"input": "i"}]})),
        ),
        (Method::GET, "/v1/sandbox/scenarios".into(), None),
        (Method::GET, format!("/v1/sandbox/scenarios/{id}"), None),
        (
            Method::PUT,
            format!("/v1/sandbox/scenarios/{id}"),
            Some(json!({"name": "n", "steps": [{"input": "i"}]})),
        ),
        (
            Method::POST,
            format!("/v1/sandbox/scenarios/{id}/runs"),
            Some(json!({"variant": "v"})),
        ),
        (Method::GET, "/v1/sandbox/runs".into(), None),
        (Method::GET, format!("/v1/sandbox/runs/{run}"), None),
        (Method::GET, format!("/v1/sandbox/runs/{run}/outputs"), None),
        (
            Method::POST,
            "/v1/sandbox/comparisons".into(),
            Some(
                json!({"baseline": {"variant": "a"}, "candidate": {"variant": "b"}, "scenarios": [id]}),
            ),
        ),
        (Method::GET, "/v1/sandbox/comparisons".into(), None),
        (Method::GET, format!("/v1/sandbox/comparisons/{cmp}"), None),
        (
            Method::POST,
            "/v1/sandbox/tournaments".into(),
            Some(json!({"runs": [run, run], "judge": "command:j"})),
        ),
        (Method::GET, format!("/v1/sandbox/tournaments/{cmp}"), None),
        (
            Method::POST,
            "/v1/sandbox/shadows".into(),
            Some(json!({"tasks": [run], "variants": [{"variant": "v", "workflow": "x"}]})),
        ),
        (Method::GET, "/v1/sandbox/shadows".into(), None),
        (Method::GET, format!("/v1/sandbox/shadows/{cmp}"), None),
        (Method::GET, "/v1/sandbox/recordings".into(), None),
        (Method::GET, format!("/v1/sandbox/recordings/{run}"), None),
        (
            Method::GET,
            format!("/v1/sandbox/recordings/{run}/export"),
            None,
        ),
    ]
}

#[tokio::test]
async fn with_the_lab_off_every_route_is_404_lab_disabled_and_turning_it_on_brings_the_data_back() {
    off_and_on(None).await;
}

#[tokio::test]
async fn on_postgres_a_restart_and_the_off_switch_keep_every_scenario_run_and_comparison() {
    let Some(schema) = Schema::create("lab_restart").await else {
        return;
    };
    off_and_on(Some(&schema.url)).await;
    schema.drop().await;
}

async fn off_and_on(storage: Option<&str>) {
    let ws = Workspace::new();
    let t = token("adam", &["admin"], None);
    let s = server_on(&ws, true, storage).await;
    let id = worked_scenario(&s, &t).await;
    let run = created(
        &post(
            &s,
            &t,
            &format!("/v1/sandbox/scenarios/{id}/runs"),
            json!({"variant": "v"}),
        )
        .await,
    );
    let run_id = run["id"].as_str().unwrap().to_owned();
    let cmp = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/comparisons",
            json!({"baseline": {"variant": "a"}, "candidate": {"variant": "b"}, "scenarios": [id]}),
        )
        .await,
    );
    let cmp_id = cmp["id"].as_str().unwrap().to_owned();
    s.stop().await.close().await;

    let off = server_on(&ws, false, storage).await;
    for (method, path, body) in lab_routes(&id, &run_id, &cmp_id) {
        let r = req(&off, &t, method.clone(), &path, body).await;
        r.assert_error(404, "lab.disabled");
        assert!(
            r.text.contains("sandbox.enabled: false"),
            "{method} {path}: {}",
            r.text
        );
    }
    // Still authenticated first.
    let r = send(off.client().get(off.url("/v1/sandbox/scenarios"))).await;
    r.assert_error(401, "auth.missing");
    off.stop().await.close().await;

    // On again (a restart on the same state dir): everything is back.
    let on = server_on(&ws, true, storage).await;
    let sc = ok(&get(&on, &t, &format!("/v1/sandbox/scenarios/{id}")).await);
    assert_eq!(sc["name"], "worked example");
    let got = ok(&get(&on, &t, &format!("/v1/sandbox/runs/{run_id}")).await);
    assert_eq!(got["status"], "completed");
    let outs = ok(&get(&on, &t, &format!("/v1/sandbox/runs/{run_id}/outputs")).await);
    assert_eq!(
        outputs_of(&outs),
        [MOCKED, "[[mock-miss:agent:user2@example.test]]"]
    );
    let c = ok(&get(&on, &t, &format!("/v1/sandbox/comparisons/{cmp_id}")).await);
    assert_eq!(c["id"], cmp_id.as_str());
    assert_eq!(
        ok(&get(&on, &t, "/v1/sandbox/comparisons").await)["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn synthetic_requests_over_a_limit_are_rejected_whole_and_store_nothing() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let path = "/v1/sandbox/synthetic-data";
    post(&s, &t, path, json!({"count": 101}))
        .await
        .assert_error(400, "lab.synthetic_count");
    post(&s, &t, path, json!({"count": 0}))
        .await
        .assert_error(400, "lab.synthetic_count");
    post(&s, &t, path, json!({"subject_kind": "s".repeat(201)}))
        .await
        .assert_error(400, "lab.synthetic_subject_too_long");
    post(&s, &t, path, json!({"seed": "t".repeat(8193)}))
        .await
        .assert_error(400, "lab.synthetic_template_too_long");
    // Each input is within 8192 bytes, but 100 of them, escaped as JSON, are over 1 MiB.
    post(
        &s,
        &t,
        path,
        json!({"count": 100, "seed": "\"".repeat(8000)}),
    )
    .await
    .assert_error(422, "lab.synthetic_batch_too_large");
    // At the limits it is accepted.
    let ok200 = ok(&post(
        &s,
        &t,
        path,
        json!({"count": 100, "subject_kind": "s".repeat(200)}),
    )
    .await);
    assert_eq!(ok200["samples"].as_array().unwrap().len(), 100);
    // A scenario whose request is over 1 MiB is refused before it is read.
    let big = json!({"name": "big", "steps": [{"input": "x".repeat(1 << 20)}]});
    post(&s, &t, "/v1/sandbox/scenarios", big)
        .await
        .assert_error(413, "limit.body_too_large");
    // A name over 200 bytes is refused whole too.
    post(
        &s,
        &t,
        "/v1/sandbox/scenarios",
        json!({"name": "n".repeat(201), "steps": [{"input": "i"}]}),
    )
    .await
    .assert_error(422, "lab.scenario_invalid");
    assert_eq!(
        ok(&get(&s, &t, "/v1/sandbox/scenarios").await)["items"],
        json!([])
    );
}

/// A workflow that asks for `user:<input>`, where the scenarios' mocks are.
const FIXED: &str = "name: prefixed\nversion: 2\nsteps:\n  - op: scenario.resource\n    args: {resource: \"user:{{input}}\"}\n    as: r\noutput: \"{{steps.r.response}}\"\n";

#[tokio::test]
async fn a_candidate_workflow_that_fixes_the_misses_is_improved_and_the_same_variant_twice_is_not()
{
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let mut ids = Vec::new();
    for i in 0..12 {
        let sc = created(
            &post(
                &s,
                &t,
                "/v1/sandbox/scenarios",
                json!({
                    "name": format!("lookup {i}"),
                    "steps": [{"input": format!("k{i}"), "expected": format!("value {i}")}],
                    "mocks": [{"resource": format!("user:k{i}"), "response": format!("value {i}")}]
                }),
            )
            .await,
        );
        ids.push(sc["id"].as_str().unwrap().to_owned());
    }
    let c = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/comparisons",
            json!({"baseline": {"variant": "identity"}, "candidate": {"variant": "prefixed", "workflow": FIXED},
                   "scenarios": ids, "seed": 3, "scorer": "exact"}),
        )
        .await,
    );
    assert_eq!(c["verdict"], "improved", "{c}");
    assert_eq!(c["forced_by"], Value::Null);
    assert_eq!(c["delta"], 1.0);
    assert_eq!(c["baseline"]["run_ids"].as_array().unwrap().len(), 12);
    // Each side's runs are scored runs of the same scenarios.
    let b0 = ok(&get(
        &s,
        &t,
        &format!(
            "/v1/sandbox/runs/{}",
            c["baseline"]["run_ids"][0].as_str().unwrap()
        ),
    )
    .await);
    let c0 = ok(&get(
        &s,
        &t,
        &format!(
            "/v1/sandbox/runs/{}",
            c["candidate"]["run_ids"][0].as_str().unwrap()
        ),
    )
    .await);
    assert_eq!(
        (&b0["verdict"], &c0["verdict"]),
        (&json!("failed"), &json!("passed"))
    );
    assert_eq!(b0["scenario_id"], c0["scenario_id"]);

    let same = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/comparisons",
            json!({"baseline": {"variant": "a", "workflow": FIXED}, "candidate": {"variant": "b", "workflow": FIXED},
                   "scenarios": ids, "seed": 3}),
        )
        .await,
    );
    // No discordant pair: the verdict is forced inconclusive by the rule it names.
    assert_eq!(same["verdict"], "inconclusive", "{same}");
    assert_eq!(same["forced_by"], "too_few_discordant");
    assert_eq!(same["delta"], 0.0);
}

#[tokio::test]
async fn each_lab_action_leaves_one_audit_event_with_its_name_and_no_values() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let viewer = token("vera", &["viewer"], None);
    let id = worked_scenario(&s, &t).await;
    let run = created(
        &post(
            &s,
            &t,
            &format!("/v1/sandbox/scenarios/{id}/runs"),
            json!({"variant": "v"}),
        )
        .await,
    );
    let run_id = run["id"].as_str().unwrap();
    let actions = [
        (
            get(&s, &t, &format!("/v1/sandbox/scenarios/{id}")).await,
            "sandbox.scenarios.get",
            "ok",
        ),
        (
            get(&s, &t, "/v1/sandbox/scenarios").await,
            "sandbox.scenarios.list",
            "ok",
        ),
        (
            get(&s, &t, &format!("/v1/sandbox/runs/{run_id}/outputs")).await,
            "sandbox.runs.outputs",
            "ok",
        ),
        (
            get(&s, &t, &format!("/v1/sandbox/runs/{run_id}")).await,
            "sandbox.runs.get",
            "ok",
        ),
        (
            post(&s, &t, "/v1/sandbox/synthetic-data", json!({"count": 3})).await,
            "sandbox.generate",
            "ok",
        ),
        (
            post(&s, &viewer, "/v1/sandbox/synthetic-data", json!({})).await,
            "sandbox.generate",
            "rbac_denied",
        ),
    ];
    let events = s.store.audit_recent(None, u32::MAX).await.unwrap();
    for (reply, op, outcome) in &actions {
        let rid = reply.headers["x-request-id"].to_str().unwrap();
        let mine: Vec<_> = events.iter().filter(|e| e.request_id == rid).collect();
        assert_eq!(mine.len(), 1, "{op}: {mine:?}");
        assert_eq!(
            (mine[0].op.as_str(), mine[0].outcome.as_str()),
            (*op, *outcome)
        );
        assert_eq!(mine[0].args_shape, Value::Null);
    }
    let generated = events
        .iter()
        .find(|e| e.op == "sandbox.generate" && e.outcome.as_str() == "ok")
        .unwrap();
    assert_eq!(generated.detail.as_deref(), Some("samples=3"));
    for op in ["sandbox.scenarios.create", "sandbox.scenarios.run"] {
        assert_eq!(events.iter().filter(|e| e.op == op).count(), 1, "{op}");
    }
    // The run's own calls are audited too, under the run's id, as simulation calls; the lab's
    // actions are a person's requests, so live.
    assert!(events.iter().any(|e| e.op == "scenario.resource"
        && e.run_id.as_deref() == Some(run_id)
        && e.purpose.as_str() == "simulation"));
    for e in events.iter().filter(|e| e.op.starts_with("sandbox.")) {
        assert_eq!(e.purpose.as_str(), "live", "{e:?}");
    }
    // No value reached the audit: not the mocked response, not an input.
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(MOCKED), "a mocked response is in the audit");
    assert!(
        !all.contains("user2@example.test"),
        "an input is in the audit"
    );
}

/// The `request_id`, `op` and `purpose` of each event of a `GET /audit` answer, newest first.
fn audited(r: &Reply) -> Vec<(String, String, String)> {
    ok(r)["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_else(|| panic!("no `{k}` in {e}"));
            (
                s("request_id").to_owned(),
                s("op").to_owned(),
                s("purpose").to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn get_audit_shows_a_lab_runs_calls_as_simulation_and_a_live_call_as_live_and_filters_on_it()
{
    let ws = Workspace::new();
    ws.write("notes.txt", "hello");
    let s = server(&ws, true).await;
    let t = operator();
    let admin = token("ada", &["admin"], None);
    let id = worked_scenario(&s, &t).await;
    let run = created(
        &post(
            &s,
            &t,
            &format!("/v1/sandbox/scenarios/{id}/runs"),
            json!({"variant": "v"}),
        )
        .await,
    );
    let run_id = run["id"].as_str().unwrap().to_owned();
    let live = post(
        &s,
        &t,
        "/ops/files.read",
        json!({"path": ws.at("notes.txt")}),
    )
    .await;
    assert_eq!(ok(&live)["result"]["content"], "hello", "{}", live.text);
    let live_rid = live.headers["x-request-id"].to_str().unwrap().to_owned();

    // Unfiltered: every event says its purpose. The run's two op calls (one answered by the
    // mock, one a miss) are simulation; the live call and the lab's own actions are live.
    let all = audited(&get(&s, &admin, "/audit?limit=1000").await);
    let simulated: Vec<_> = all
        .iter()
        .filter(|(_, op, _)| op == "scenario.resource")
        .collect();
    assert_eq!(simulated.len(), 2, "{all:?}");
    for (_, _, purpose) in &simulated {
        assert_eq!(purpose, "simulation", "{all:?}");
    }
    let live_event = all.iter().find(|(rid, _, _)| *rid == live_rid).unwrap();
    assert_eq!(
        (live_event.1.as_str(), live_event.2.as_str()),
        ("files.read", "live")
    );
    for (_, op, purpose) in &all {
        if op.starts_with("sandbox.") {
            assert_eq!(purpose, "live", "{op}");
        }
    }

    // `purpose=simulation`: only the run's calls; `purpose=live`: everything else.
    let sim = audited(&get(&s, &admin, "/audit?limit=1000&purpose=simulation").await);
    assert_eq!(sim.iter().collect::<Vec<_>>(), simulated);
    let run_sim = audited(
        &get(
            &s,
            &admin,
            &format!("/audit?purpose=simulation&run={run_id}"),
        )
        .await,
    );
    assert_eq!(run_sim, sim);
    let lives = audited(&get(&s, &admin, "/audit?limit=1000&purpose=live").await);
    assert_eq!(lives.len() + sim.len(), all.len(), "{lives:?}");
    assert!(
        lives
            .iter()
            .all(|(_, op, p)| p == "live" && op != "scenario.resource")
    );
    assert!(lives.iter().any(|(rid, _, _)| *rid == live_rid));
    assert!(lives.iter().any(|(_, op, _)| op == "sandbox.scenarios.run"));
    let read = audited(&get(&s, &admin, "/audit?purpose=live&op=files.read").await);
    assert_eq!(
        read,
        [(live_rid, "files.read".to_owned(), "live".to_owned())]
    );

    // Anything but a purpose's exact name is refused, and the answer names the allowed ones.
    for bad in ["Live", "sim", "", "live,simulation"] {
        let r = get(&s, &admin, &format!("/audit?purpose={bad}")).await;
        r.assert_error(400, "args.invalid");
        assert!(r.text.contains("live, simulation"), "{bad:?}: {}", r.text);
    }
}

mod over_mcp {
    use rmcp::ServiceExt;
    use rmcp::model::{CallToolRequestParams, CallToolResult};
    use rmcp::service::{RoleClient, RunningService};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use serde_json::{Value, json};

    use super::{MOCKED, created, operator, post, server, token, worked_scenario};
    use crate::common::{Server, Workspace};

    async fn client(s: &Server, token: &str) -> RunningService<RoleClient, ()> {
        let config =
            StreamableHttpClientTransportConfig::with_uri(s.url("/mcp")).auth_header(token);
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .unwrap()
    }

    async fn lab_tools(c: &RunningService<RoleClient, ()>) -> Vec<String> {
        let mut names: Vec<String> = c
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .filter(|n| n.starts_with("sandbox_"))
            .collect();
        names.sort();
        names
    }

    async fn call(c: &RunningService<RoleClient, ()>, name: &str, args: Value) -> CallToolResult {
        let Value::Object(args) = args else {
            panic!("args are an object")
        };
        c.call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn an_agent_sees_the_lab_tools_its_role_allows_and_runs_the_worked_example_through_them()
    {
        let ws = Workspace::new();
        let s = server(&ws, true).await;
        let op = client(&s, &token("olga", &["operator"], None)).await;
        let viewer = client(&s, &token("vera", &["viewer"], None)).await;
        assert_eq!(
            lab_tools(&op).await,
            [
                "sandbox_compare",
                "sandbox_generate",
                "sandbox_replay",
                "sandbox_runs_get",
                "sandbox_runs_outputs",
                "sandbox_scenarios_create",
                "sandbox_scenarios_get",
                "sandbox_scenarios_list",
                "sandbox_scenarios_run",
                "sandbox_shadow_run",
                "sandbox_shadows_get",
                "sandbox_tournament",
                "sandbox_tournaments_list"
            ]
        );
        assert_eq!(
            lab_tools(&viewer).await,
            [
                "sandbox_runs_get",
                "sandbox_runs_outputs",
                "sandbox_scenarios_get",
                "sandbox_scenarios_list",
                "sandbox_shadows_get",
                "sandbox_tournaments_list"
            ]
        );
        let samples = call(
            &op,
            "sandbox_generate",
            json!({"count": 2, "seed": super::TEMPLATE}),
        )
        .await;
        assert_eq!(samples.is_error, Some(false), "{samples:?}");
        let samples = samples.structured_content.unwrap()["samples"].clone();
        let sc = call(
            &op,
            "sandbox_scenarios_create",
            json!({"name": "via mcp", "samples": samples,
                   "mocks": [{"resource": "agent:user1@example.test", "response": MOCKED}]}),
        )
        .await;
        let id = sc.structured_content.unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let run = call(
            &op,
            "sandbox_scenarios_run",
            json!({"id": id, "variant": "candidate"}),
        )
        .await;
        let run = run.structured_content.unwrap();
        assert_eq!(
            (&run["steps_total"], &run["steps_ok"], &run["steps_error"]),
            (&json!(2), &json!(1), &json!(1))
        );
        // A shadow evaluation through MCP: an unsafe variant is named before anything runs.
        let shadow = call(
            &op,
            "sandbox_shadow_run",
            json!({"tasks": [run["id"]], "variants": [{"variant": "writer", "workflow":
                "name: w\nversion: 1\nsteps:\n  - op: files.write\n    args: {path: x.txt, content: x}\n    as: s0\noutput: done\n"}]}),
        )
        .await;
        assert_eq!(shadow.is_error, Some(true), "{shadow:?}");
        let refusal = shadow.structured_content.unwrap();
        assert_eq!(refusal["code"], "replay.unsafe_op");
        assert!(refusal["error"].as_str().unwrap().contains("`files.write`"));
        let outs = call(&viewer, "sandbox_runs_outputs", json!({"id": run["id"]})).await;
        let outs = outs.structured_content.unwrap();
        assert_eq!(outs["items"][0]["output"], MOCKED);
        assert_eq!(
            outs["items"][1]["output"],
            "[[mock-miss:agent:user2@example.test]]"
        );
        // Not listed to a viewer, and refused if called anyway.
        let refused = call(
            &viewer,
            "sandbox_scenarios_run",
            json!({"id": id, "variant": "v"}),
        )
        .await;
        assert_eq!(refused.is_error, Some(true));
        assert_eq!(refused.structured_content.unwrap()["code"], "rbac.denied");
        // A replay of a run nobody recorded says so, with the recording's code.
        let none = call(&op, "sandbox_replay", json!({"id": run["id"]})).await;
        assert_eq!(none.is_error, Some(true));
        assert_eq!(
            none.structured_content.unwrap()["code"],
            "recording.not_found"
        );
        // The tool calls are audited like the routes: one event each, under the action's name.
        let events = s.store.audit_recent(None, u32::MAX).await.unwrap();
        assert_eq!(
            events
                .iter()
                .filter(|e| e.op == "sandbox.scenarios.run")
                .count(),
            2
        );
        let _ = op.cancel().await;
        let _ = viewer.cancel().await;
    }

    #[tokio::test]
    async fn a_run_through_the_tools_shows_its_trials_passed_pass_at_k_and_pass_hat_k() {
        let ws = Workspace::new();
        let s = server(&ws, true).await;
        let op = client(&s, &token("olga", &["operator"], None)).await;
        let sc = call(
            &op,
            "sandbox_scenarios_create",
            json!({"name": "scored via mcp", "steps": [{"input": "a", "expected": "yes"}],
                   "mocks": [{"resource": "a", "response": "yes"}]}),
        )
        .await;
        let id = sc.structured_content.unwrap()["id"].clone();
        let fields = |run: &Value| {
            [
                run["trials_passed"].clone(),
                run["pass_at_k"].clone(),
                run["pass_hat_k"].clone(),
            ]
        };
        let scored = call(
            &op,
            "sandbox_scenarios_run",
            json!({"id": id, "variant": "v", "trials": 2, "scorer": "exact"}),
        )
        .await
        .structured_content
        .unwrap();
        assert_eq!(scored["verdict"], "passed");
        assert_eq!(fields(&scored), [json!(2), json!(1.0), json!(1.0)]);
        let got = call(&op, "sandbox_runs_get", json!({"id": scored["id"]}))
            .await
            .structured_content
            .unwrap();
        assert_eq!(fields(&got), fields(&scored));
        let unscored = call(
            &op,
            "sandbox_scenarios_run",
            json!({"id": id, "variant": "v", "trials": 2}),
        )
        .await
        .structured_content
        .unwrap();
        assert_eq!(unscored["verdict"], "not_scored");
        assert_eq!(fields(&unscored), [Value::Null, Value::Null, Value::Null]);
        let _ = op.cancel().await;
    }

    #[tokio::test]
    async fn the_tournament_tool_answers_as_the_route_does_an_undeclared_judge_refused_by_its_code()
    {
        let ws = Workspace::new();
        let s = server(&ws, true).await;
        let t = operator();
        let id = worked_scenario(&s, &t).await;
        let mut runs = Vec::new();
        for _ in 0..2 {
            let r = created(
                &post(
                    &s,
                    &t,
                    &format!("/v1/sandbox/scenarios/{id}/runs"),
                    json!({"variant": "v"}),
                )
                .await,
            );
            runs.push(r["id"].clone());
        }
        let op = client(&s, &token("olga", &["operator"], None)).await;
        let r = call(
            &op,
            "sandbox_tournament",
            json!({"runs": runs, "judge": "command:nope"}),
        )
        .await;
        assert_eq!(r.is_error, Some(true), "{r:?}");
        assert_eq!(r.structured_content.unwrap()["code"], "lab.program_unknown");
    }

    #[tokio::test]
    async fn with_the_lab_off_no_lab_tool_is_listed_or_answered() {
        let ws = Workspace::new();
        let s = server(&ws, false).await;
        let admin = client(&s, &token("adam", &["admin"], None)).await;
        assert!(lab_tools(&admin).await.is_empty());
        let r = call(&admin, "sandbox_scenarios_list", json!({})).await;
        assert_eq!(r.is_error, Some(true));
        assert_eq!(r.structured_content.unwrap()["code"], "lab.disabled");
        let _ = admin.cancel().await;
    }
}

#[tokio::test]
async fn a_tournament_over_http_is_refused_for_a_viewer_or_an_undeclared_judge_and_each_refusal_is_audited()
 {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let op = operator();
    let viewer = token("vera", &["viewer"], None);
    let id = worked_scenario(&s, &op).await;
    let run = |scenario: String| {
        let s = &s;
        let op = op.clone();
        async move {
            created(
                &post(
                    s,
                    &op,
                    &format!("/v1/sandbox/scenarios/{scenario}/runs"),
                    json!({"variant": "v"}),
                )
                .await,
            )["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let (a, b) = (run(id.clone()).await, run(id).await);
    let path = "/v1/sandbox/tournaments";
    post(
        &s,
        &viewer,
        path,
        json!({"runs": [a, b], "judge": "command:j"}),
    )
    .await
    .assert_error(403, "rbac.denied");
    let r = post(&s, &op, path, json!({"runs": [a, b], "judge": "command:j"})).await;
    r.assert_error(422, "lab.program_unknown");
    assert!(r.text.contains("sandbox.judges"), "{}", r.text);
    // (A real judge's tournament runs in corral-cli's `lab_program` tests.)
    post(
        &s,
        &op,
        path,
        json!({"runs": [a, b], "judge": "command:j", "extra": 1}),
    )
    .await
    .assert_error(400, "args.invalid");
    post(&s, &op, path, json!({"runs": [a], "judge": "command:j"}))
        .await
        .assert_error(400, "args.invalid");
    get(&s, &viewer, "/v1/sandbox/tournaments/no-such-id")
        .await
        .assert_error(404, "lab.not_found");
    let admin = token("adam", &["admin"], None);
    let audit = ok(&get(&s, &admin, "/audit?limit=500").await);
    let refused = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["op"] == "sandbox.tournament")
        .count();
    assert_eq!(refused, 4);
}

#[tokio::test]
async fn every_lab_route_is_in_the_openapi_document_with_its_method() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let doc = ok(&get(&s, &operator(), "/openapi.json").await);
    for (method, path, _) in lab_routes("{id}", "{id}", "{id}") {
        let m = method.as_str().to_lowercase();
        assert!(
            doc["paths"][&path][&m]["operationId"].is_string(),
            "{method} {path} is not in /openapi.json"
        );
    }
}

#[tokio::test]
async fn an_update_based_on_an_old_version_is_409_and_the_newer_one_is_kept() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let id = worked_scenario(&s, &t).await;
    let path = format!("/v1/sandbox/scenarios/{id}");
    let v2 = ok(&req(
        &s,
        &t,
        Method::PUT,
        &path,
        Some(json!({"name": "renamed", "steps": [{"input": "a"}], "version": 1})),
    )
    .await);
    assert_eq!(
        (&v2["version"], &v2["name"]),
        (&json!(2), &json!("renamed"))
    );
    req(
        &s,
        &t,
        Method::PUT,
        &path,
        Some(json!({"name": "lost", "steps": [{"input": "b"}], "version": 1})),
    )
    .await
    .assert_error(409, "lab.version_conflict");
    assert_eq!(ok(&get(&s, &t, &path).await)["name"], "renamed");
}

#[tokio::test]
async fn a_scorer_judges_only_steps_with_an_expected_value_and_a_run_with_none_is_not_scored() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let mocks = json!([{"resource": "a", "response": "yes"}, {"resource": "b", "response": "no"}]);
    let scenario = |steps: Value| json!({"name": "scored", "steps": steps, "mocks": mocks});
    let run = |id: String, scorer: Option<&str>| {
        let mut body = json!({"variant": "v"});
        if let Some(sc) = scorer {
            body["scorer"] = json!(sc);
        }
        (format!("/v1/sandbox/scenarios/{id}/runs"), body)
    };
    // Every step has an expected value: scored; one fails, so the run fails.
    let all = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/scenarios",
            scenario(json!([{"input": "a", "expected": "yes"}, {"input": "b", "expected": "yes"}])),
        )
        .await,
    );
    let (p, b) = run(all["id"].as_str().unwrap().to_owned(), Some("exact"));
    let r = created(&post(&s, &t, &p, b).await);
    assert_eq!(
        (&r["verdict"], &r["score"], &r["scorer_suite"]),
        (&json!("failed"), &json!(0.5), &json!("exact"))
    );
    let outs = ok(&get(
        &s,
        &t,
        &format!("/v1/sandbox/runs/{}/outputs", r["id"].as_str().unwrap()),
    )
    .await);
    assert_eq!(
        (&outs["items"][0]["pass"], &outs["items"][1]["pass"]),
        (&json!(true), &json!(false))
    );
    // No expected value anywhere: executed, not scored, never a pass.
    let none = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/scenarios",
            scenario(json!([{"input": "a"}, {"input": "b"}])),
        )
        .await,
    );
    let (p, b) = run(none["id"].as_str().unwrap().to_owned(), Some("exact"));
    let r = created(&post(&s, &t, &p, b).await);
    assert_eq!(
        (&r["verdict"], &r["score"]),
        (&json!("not_scored"), &Value::Null)
    );
    // An unknown scorer is refused before anything runs.
    let (p, b) = run(none["id"].as_str().unwrap().to_owned(), Some("fuzzy"));
    post(&s, &t, &p, b)
        .await
        .assert_error(422, "lab.scorer_unknown");
}

#[tokio::test]
async fn the_anonymous_caller_of_an_open_mode_server_can_use_no_lab_action_and_is_told_to_give_the_token_a_role()
 {
    let ws = Workspace::new();
    let yaml = format!(
        "version: 1\npreset: workspace_jail\nroot: {}\nstate_dir: {}\n",
        ws.root.display(),
        ws.state.display()
    );
    let s = Server::start(&ws.load(&yaml, &[])).await;
    let r = send(s.client().get(s.url("/v1/sandbox/scenarios"))).await;
    r.assert_error(403, "rbac.denied");
    assert!(r.text.contains("give the token a role"), "{}", r.text);
    let r = send(
        s.client()
            .post(s.url("/v1/sandbox/synthetic-data"))
            .json(&json!({})),
    )
    .await;
    r.assert_error(403, "rbac.denied");
}

#[tokio::test]
async fn a_run_or_comparison_over_the_step_execution_budget_is_refused_and_nothing_runs() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    // 200 small steps fit easily in a scenario; 100 trials of them is 20 000 executions.
    let steps: Vec<Value> = (0..200)
        .map(|i| json!({"input": format!("s{i}")}))
        .collect();
    let scenario = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/scenarios",
            json!({"name": "many steps", "steps": steps}),
        )
        .await,
    );
    let id = scenario["id"].as_str().unwrap().to_owned();
    let r = post(
        &s,
        &t,
        &format!("/v1/sandbox/scenarios/{id}/runs"),
        json!({"variant": "base", "trials": 100}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("would execute 20000 steps"), "{}", r.text);
    let r = post(
        &s,
        &t,
        "/v1/sandbox/comparisons",
        json!({
            "baseline": {"variant": "a"}, "candidate": {"variant": "b"},
            "scenarios": [id], "trials": 30, "scorer": "exact"
        }),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("would execute 12000 steps"), "{}", r.text);
    let runs = ok(&get(&s, &t, "/v1/sandbox/runs").await);
    assert_eq!(runs["items"], json!([]), "nothing was run");
    // Within the budget the same scenario runs.
    created(
        &post(
            &s,
            &t,
            &format!("/v1/sandbox/scenarios/{id}/runs"),
            json!({"variant": "base", "trials": 50}),
        )
        .await,
    );
}

/// `(trials, trials_passed, pass_at_k, pass_hat_k)` of a run record.
fn passes(run: &Value) -> [Value; 4] {
    [
        run["trials"].clone(),
        run["trials_passed"].clone(),
        run["pass_at_k"].clone(),
        run["pass_hat_k"].clone(),
    ]
}

#[tokio::test]
async fn a_scored_run_of_k_trials_shows_trials_passed_pass_at_k_and_pass_hat_k_and_an_unscored_one_none()
 {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let scenario = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/scenarios",
            json!({
                "name": "k trials",
                "steps": [{"input": "a", "expected": "yes"}, {"input": "b", "expected": "no"}],
                "mocks": [{"resource": "a", "response": "yes"}, {"resource": "b", "response": "no"}]
            }),
        )
        .await,
    );
    let id = scenario["id"].as_str().unwrap().to_owned();
    let runs = format!("/v1/sandbox/scenarios/{id}/runs");
    let all = created(
        &post(
            &s,
            &t,
            &runs,
            json!({"variant": "v", "trials": 3, "scorer": "exact"}),
        )
        .await,
    );
    assert_eq!(all["verdict"], "passed");
    assert_eq!(passes(&all), [json!(3), json!(3), json!(1.0), json!(1.0)]);
    // The regex `n` fails step 2 in every trial: none passed, pass@3 and pass^3 are 0.
    let regex = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/scenarios",
            json!({
                "name": "k trials, failing",
                "steps": [{"input": "a", "expected": "y.."}, {"input": "b", "expected": "n"}],
                "mocks": [{"resource": "a", "response": "yes"}, {"resource": "b", "response": "no"}]
            }),
        )
        .await,
    );
    let failing = created(
        &post(
            &s,
            &t,
            &format!(
                "/v1/sandbox/scenarios/{}/runs",
                regex["id"].as_str().unwrap()
            ),
            json!({"variant": "v", "trials": 3, "scorer": "regex"}),
        )
        .await,
    );
    assert_eq!(failing["verdict"], "failed");
    assert_eq!(
        passes(&failing),
        [json!(3), json!(0), json!(0.0), json!(0.0)]
    );
    // No scorer: executed, not scored, and none of the three (never a pass).
    let unscored = created(&post(&s, &t, &runs, json!({"variant": "v", "trials": 3})).await);
    assert_eq!(unscored["verdict"], "not_scored");
    assert_eq!(
        passes(&unscored),
        [json!(3), Value::Null, Value::Null, Value::Null]
    );

    // Every response that shows a run says the same: the run, and the listing.
    for run in [&all, &failing, &unscored] {
        let got = ok(&get(
            &s,
            &t,
            &format!("/v1/sandbox/runs/{}", run["id"].as_str().unwrap()),
        )
        .await);
        assert_eq!(passes(&got), passes(run));
    }
    let listed = ok(&get(&s, &t, "/v1/sandbox/runs").await);
    let listed = listed["items"].as_array().unwrap();
    assert_eq!(listed.len(), 3);
    for run in listed {
        let id = &run["id"];
        let want = [&all, &failing, &unscored]
            .into_iter()
            .find(|r| &r["id"] == id)
            .unwrap();
        assert_eq!(passes(run), passes(want));
    }
    // The openapi document names the fields.
    let doc = ok(&get(&s, &t, "/openapi.json").await);
    let described =
        doc["paths"]["/v1/sandbox/scenarios/{id}/runs"]["post"]["responses"]["201"]["description"]
            .as_str()
            .unwrap();
    for field in ["trials_passed", "pass_at_k", "pass_hat_k"] {
        assert!(described.contains(field), "{field}: {described}");
    }
}

#[tokio::test]
async fn a_run_whose_outputs_reach_the_per_run_cap_is_recorded_failed_with_the_trial_and_step() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    // Two steps answering 450 KiB each: 100 trials would keep about 88 MiB, over the 64 MiB
    // cap (the scenario itself stays under the 1 MiB request limit).
    let big = "z".repeat(450 * 1024);
    let scenario = created(
        &post(
            &s,
            &t,
            "/v1/sandbox/scenarios",
            json!({
                "name": "large answers",
                "steps": [{"input": "big", "expected": "z+"}, {"input": "big", "expected": "z+"}],
                "mocks": [{"resource": "big", "response": big}]
            }),
        )
        .await,
    );
    let id = scenario["id"].as_str().unwrap().to_owned();
    let run = created(
        &post(
            &s,
            &t,
            &format!("/v1/sandbox/scenarios/{id}/runs"),
            json!({"variant": "v", "trials": 100, "scorer": "regex"}),
        )
        .await,
    );
    // 64 MiB / (450 KiB + 3 bytes) = 145 steps kept: 72 whole trials and step 1 of trial 73;
    // step 2 of trial 73 would pass the cap.
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["code"], "lab.run_output_too_large", "{run}");
    let message = run["error"]["message"].as_str().unwrap();
    assert!(message.contains("at trial 73 step 2"), "{message}");
    assert!(message.contains("fewer `trials`"), "{message}");
    assert_eq!(
        (
            &run["steps_total"],
            &run["steps_ok"],
            &run["steps_error"],
            &run["infra_errors"]
        ),
        (&json!(146), &json!(145), &json!(1), &json!(1))
    );
    // A failed run never passes; the trials that ran whole and passed are counted.
    assert_eq!(run["verdict"], "failed");
    assert_eq!(
        passes(&run),
        [json!(100), json!(72), json!(1.0), json!(0.0)]
    );
    let got = ok(&get(
        &s,
        &t,
        &format!("/v1/sandbox/runs/{}", run["id"].as_str().unwrap()),
    )
    .await);
    assert_eq!(got["error"], run["error"]);
    assert_eq!(got["status"], "failed");
}

/// Every page of `path` (a listing) with `limit=2`, following `next` to the end: the ids.
async fn all_pages(s: &Server, t: &str, path: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = match &after {
            Some(a) => format!("{path}{sep}limit=2&after={a}"),
            None => format!("{path}{sep}limit=2"),
        };
        let page = ok(&get(s, t, &url).await);
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2, "{page}");
        ids.extend(items.iter().map(|i| i["id"].as_str().unwrap().to_owned()));
        pages += 1;
        assert!(pages <= 10, "paging does not end: {ids:?}");
        match &page["next"] {
            Value::Null => break,
            Value::String(n) => after = Some(n.clone()),
            other => panic!("`next` is {other}"),
        }
    }
    ids
}

#[tokio::test]
async fn following_next_with_limit_2_lists_every_scenario_and_run_exactly_once() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let mut scenarios = Vec::new();
    for i in 0..5 {
        let sc = created(
            &post(
                &s,
                &t,
                "/v1/sandbox/scenarios",
                json!({"name": format!("page {i}"), "steps": [{"input": "a"}]}),
            )
            .await,
        );
        scenarios.push(sc["id"].as_str().unwrap().to_owned());
    }
    let mut runs = Vec::new();
    for id in scenarios.iter().take(3) {
        for _ in 0..2 {
            let r = created(
                &post(
                    &s,
                    &t,
                    &format!("/v1/sandbox/scenarios/{id}/runs"),
                    json!({"variant": "v"}),
                )
                .await,
            );
            runs.push(r["id"].as_str().unwrap().to_owned());
        }
    }
    // Newest first, each exactly once, across 3 pages (2 + 2 + 1, and 2 + 2 + 2).
    let listed = all_pages(&s, &t, "/v1/sandbox/scenarios").await;
    assert_eq!(listed, scenarios.iter().rev().cloned().collect::<Vec<_>>());
    let listed = all_pages(&s, &t, "/v1/sandbox/runs").await;
    assert_eq!(listed, runs.iter().rev().cloned().collect::<Vec<_>>());
    // One scenario's runs page on their own.
    let listed = all_pages(
        &s,
        &t,
        &format!("/v1/sandbox/runs?scenario={}", scenarios[0]),
    )
    .await;
    assert_eq!(listed, [runs[1].clone(), runs[0].clone()]);
    // The last page says so: no `next`.
    let last = ok(&get(&s, &t, "/v1/sandbox/scenarios?limit=5").await);
    assert_eq!(last["items"].as_array().unwrap().len(), 5);
    assert_eq!(last["next"], Value::Null);
}

#[tokio::test]
async fn a_comparison_takes_its_workers_from_1_to_8_and_refuses_any_other_count_before_running() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = operator();
    let doc = ok(&get(&s, &t, "/openapi.json").await);
    let workers = &doc["paths"]["/v1/sandbox/comparisons"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"]["properties"]["workers"];
    assert_eq!(
        (&workers["minimum"], &workers["maximum"]),
        (&json!(1), &json!(8)),
        "{workers}"
    );
    let mut ids = Vec::new();
    for i in 0..3 {
        let sc = created(
            &post(
                &s,
                &t,
                "/v1/sandbox/scenarios",
                json!({"name": format!("w{i}"), "steps": [{"input": format!("k{i}"), "expected": "v"}],
                       "mocks": [{"resource": format!("k{i}"), "response": "v"}]}),
            )
            .await,
        );
        ids.push(sc["id"].as_str().unwrap().to_owned());
    }
    let body = |w: u32| {
        json!({"baseline": {"variant": "a"}, "candidate": {"variant": "b"}, "scenarios": ids,
               "scorer": "exact", "workers": w})
    };
    for w in [0, 9] {
        let r = post(&s, &t, "/v1/sandbox/comparisons", body(w)).await;
        r.assert_error(400, "args.invalid");
        assert!(r.text.contains(&format!("`workers` is {w}")), "{}", r.text);
    }
    let runs = ok(&get(&s, &t, "/v1/sandbox/runs").await);
    assert_eq!(runs["items"], json!([]), "nothing was run");
    let c = created(&post(&s, &t, "/v1/sandbox/comparisons", body(2)).await);
    assert_eq!(c["baseline"]["run_ids"].as_array().unwrap().len(), 3, "{c}");
    assert_eq!(
        c["candidate"]["run_ids"].as_array().unwrap().len(),
        3,
        "{c}"
    );
}

/// A listing's `?after=` is a cursor a page gave: empty is the first page, and anything else
/// that is not one is the caller's error (`400 args.invalid`), never a server error.
#[tokio::test]
async fn an_empty_cursor_is_the_first_page_and_a_bad_one_is_400() {
    let ws = Workspace::new();
    let s = server(&ws, true).await;
    let t = token("ada", &["viewer"], None);
    for list in [
        "scenarios",
        "runs",
        "comparisons",
        "tournaments",
        "shadows",
        "recordings",
    ] {
        let first = get(&s, &t, &format!("/v1/sandbox/{list}?after=")).await;
        assert_eq!(first.status, 200, "{list}: {}", first.text);
        let bad = get(&s, &t, &format!("/v1/sandbox/{list}?after=x")).await;
        assert_eq!(bad.status, 400, "{list}: {}", bad.text);
        assert_eq!(bad.json()["code"], "args.invalid", "{list}: {}", bad.text);
    }
}
