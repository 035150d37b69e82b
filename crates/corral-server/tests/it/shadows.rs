//! Shadow evaluations over HTTP (issue 15 items 3-5): `POST /v1/sandbox/shadows` checks every
//! variant and the announced count before anything runs, answers 202 with the evaluation
//! `running`, and `GET /v1/sandbox/shadows/{id}` shows it finished with its report.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

use crate::common::{Reply, Server, Workspace, send};

const SECRET_ENV: &str = "CORRAL_IT_SHADOW_JWT";
const SECRET: &str = "0123456789abcdef0123456789abcdef-shd";

async fn server(ws: &Workspace) -> Server {
    ws.write("notes.txt", "the real notes");
    let yaml = format!(
        "version: 1\npreset: {{name: workspace_jail, confirm: never}}\nroot: {}\nstate_dir: {}\nauth:\n  jwt: {{hs256_secret_env: {SECRET_ENV}}}\nsandbox: {{record_runs: true}}\n",
        ws.root.display(),
        ws.state.display()
    );
    Server::start(&ws.load(&yaml, &[(SECRET_ENV, SECRET)])).await
}

fn olga() -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let claims = json!({"sub": "olga", "roles": ["operator"], "exp": exp});
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

async fn post(s: &Server, path: &str, body: Value) -> Reply {
    send(s.client().post(s.url(path)).bearer_auth(olga()).json(&body)).await
}

async fn get(s: &Server, path: &str) -> Value {
    let r = send(s.client().get(s.url(path)).bearer_auth(olga())).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

/// A recorded lab run (the identity agent on one step, `notes`): its run id.
async fn recorded_task(s: &Server) -> String {
    let sc = post(
        s,
        "/v1/sandbox/scenarios",
        json!({"name": "task", "steps": [{"input": "notes"}]}),
    )
    .await;
    assert_eq!(sc.status, 201, "{}", sc.text);
    let id = sc.json()["id"].as_str().unwrap().to_owned();
    let run = post(
        s,
        &format!("/v1/sandbox/scenarios/{id}/runs"),
        json!({"variant": "recorded"}),
    )
    .await;
    assert_eq!(run.status, 201, "{}", run.text);
    run.json()["id"].as_str().unwrap().to_owned()
}

fn reader(ws: &Workspace, label: &str) -> Value {
    json!({
        "variant": label,
        "workflow": format!(
            "name: r\nversion: 1\nsteps:\n  - op: files.read\n    args: {{path: \"{}/{{{{input}}}}.txt\"}}\n    as: s0\noutput: \"{{{{steps.s0.content}}}}\"\n",
            ws.root.display()
        ),
    })
}

#[tokio::test]
async fn a_shadow_evaluation_is_accepted_running_and_reads_back_completed_with_its_report() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let task = recorded_task(&s).await;
    let r = post(
        &s,
        "/v1/sandbox/shadows",
        json!({"tasks": [task], "variants": [reader(&ws, "reader")]}),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let accepted = r.json();
    assert_eq!(
        (&accepted["status"], &accepted["planned"]),
        (&json!("running"), &json!(1))
    );
    let path = format!("/v1/sandbox/shadows/{}", accepted["id"].as_str().unwrap());
    // Poll until it ends (the runs execute in the background).
    let mut shadow = get(&s, &path).await;
    for _ in 0..600 {
        if shadow["status"] != "running" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        shadow = get(&s, &path).await;
    }
    assert_eq!(shadow["status"], "completed", "{shadow}");
    assert_eq!((&shadow["planned"], &shadow["ran"]), (&json!(1), &json!(1)));
    let run = &shadow["report"]["runs"][0];
    // The recorded run was the identity agent's `scenario.resource`; the replay read the file.
    assert_eq!(run["divergence"]["step"], 1, "{run}");
    assert_eq!(run["divergence"]["op"], "files.read");
    assert_eq!(run["divergence"]["recorded"]["op"], "scenario.resource");
    let run_id = run["run_id"].as_str().unwrap();
    assert_eq!(shadow["runs"][&task]["runs"]["reader"], run_id);
    let got = get(&s, &format!("/v1/sandbox/runs/{run_id}")).await;
    assert_eq!(got["purpose"], "replay");
    let outs = get(&s, &format!("/v1/sandbox/runs/{run_id}/outputs")).await;
    assert_eq!(outs["items"][0]["output"], "the real notes");
    assert_eq!(
        shadow["report"]["metering"]["replay"]["tokens"],
        Value::Null
    );
    let list = get(&s, "/v1/sandbox/shadows").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn an_unsafe_variant_is_400_naming_the_tool_and_an_unannounced_n_m_is_409_and_nothing_runs() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let task = recorded_task(&s).await;
    let writer = json!({
        "variant": "writer",
        "workflow": format!(
            "name: w\nversion: 1\nsteps:\n  - op: files.write\n    args: {{path: \"{}/x.txt\", content: x}}\n    as: s0\noutput: done\n",
            ws.root.display()
        ),
    });
    let r = post(
        &s,
        "/v1/sandbox/shadows",
        json!({"tasks": [task], "variants": [reader(&ws, "reader"), writer]}),
    )
    .await;
    r.assert_error(422, "replay.unsafe_op");
    assert!(r.text.contains("`files.write`"), "{}", r.text);
    let variants: Vec<Value> = (1..=11).map(|i| reader(&ws, &format!("v{i}"))).collect();
    let r = post(
        &s,
        "/v1/sandbox/shadows",
        json!({"tasks": [task], "variants": variants}),
    )
    .await;
    r.assert_error(409, "replay.confirm_needed");
    assert!(r.text.contains("11 full agent runs"), "{}", r.text);
    assert!(!std::path::Path::new(&ws.at("x.txt")).exists());
    let list = get(&s, "/v1/sandbox/shadows").await;
    assert!(list["items"].as_array().unwrap().is_empty());
    let runs = get(&s, "/v1/sandbox/runs").await;
    assert_eq!(
        runs["items"].as_array().unwrap().len(),
        1,
        "only the recorded run"
    );
}

fn token(sub: &str, role: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let claims = json!({"sub": sub, "roles": [role], "exp": exp});
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// `{purpose: (runs, calls, tokens, spend)}` of `GET /v1/sandbox/metering`.
fn by_purpose(m: &Value) -> std::collections::BTreeMap<String, (u64, u64, Value, Value)> {
    m["purposes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["purpose"].as_str().unwrap().to_owned(),
                (
                    p["runs"].as_u64().unwrap(),
                    p["calls"].as_u64().unwrap(),
                    p["tokens"].clone(),
                    p["spend"].clone(),
                ),
            )
        })
        .collect()
}

#[tokio::test]
async fn metering_counts_runs_and_calls_per_purpose_for_an_admin_and_on_metrics() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let admin = token("ada", "admin");
    // A live run of two calls (one refused: it is still a call).
    for path in ["notes.txt", "../outside.txt"] {
        let r = send(
            s.client()
                .post(s.url("/ops/files.read"))
                .bearer_auth(olga())
                .header("x-corral-run", "live-1")
                .json(&json!({"path": ws.at(path)})),
        )
        .await;
        assert!(r.status == 200 || r.status == 403, "{}", r.text);
    }
    // A simulation run (one call: the identity agent's), then its task replayed once.
    let task = recorded_task(&s).await;
    let r = post(
        &s,
        "/v1/sandbox/shadows",
        json!({"tasks": [task], "variants": [reader(&ws, "reader")]}),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let path = format!("/v1/sandbox/shadows/{}", r.json()["id"].as_str().unwrap());
    for _ in 0..600 {
        if get(&s, &path).await["status"] != "running" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let m = send(
        s.client()
            .get(s.url("/v1/sandbox/metering"))
            .bearer_auth(&admin),
    )
    .await;
    assert_eq!(m.status, 200, "{}", m.text);
    let m = m.json();
    assert_eq!(m["tenant"], "default");
    let p = by_purpose(&m);
    assert_eq!(p["live"], (1, 2, Value::Null, Value::Null), "{m}");
    assert_eq!(p["simulation"], (1, 1, Value::Null, Value::Null), "{m}");
    assert_eq!(p["replay"], (1, 1, Value::Null, Value::Null), "{m}");
    assert_eq!(p["judge"], (0, 0, Value::Null, Value::Null), "{m}");
    // An operator does not read the tenant's metering.
    let refused = send(
        s.client()
            .get(s.url("/v1/sandbox/metering"))
            .bearer_auth(olga()),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert_eq!(refused.json()["code"], "rbac.denied", "{}", refused.text);
    // `/metrics` sums them per purpose.
    let text = send(s.client().get(s.url("/metrics")).bearer_auth(&admin))
        .await
        .text;
    for line in [
        "corral_runs_total{purpose=\"live\"} 1",
        "corral_runs_total{purpose=\"replay\"} 1",
        "corral_runs_total{purpose=\"judge\"} 0",
        "corral_purpose_calls_total{purpose=\"live\"} 2",
        "corral_purpose_calls_total{purpose=\"simulation\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
}
