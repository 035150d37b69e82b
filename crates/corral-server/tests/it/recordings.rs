//! Recordings over HTTP (issue 15 step 1): a run recorded by its token (`record: true`) or by
//! `X-Corral-Record: on` from an operator, read back by its principal or an admin as JSON and as
//! JSON lines, and unreadable to a viewer who is not its principal (403) and to another tenant
//! (404). The audit stays value-free.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

use crate::common::{Reply, Server, Workspace, send};

const BOT_ENV: &str = "CORRAL_IT_REC_BOT";
const BOT: &str = "recording-bot-token-0123456789";
const OLGA_ENV: &str = "CORRAL_IT_REC_OLGA";
const OLGA: &str = "operator-olga-token-0123456789";
const ROOT_ENV: &str = "CORRAL_IT_REC_ROOT";
const ROOT: &str = "admin-root-token-0123456789ab";
const VIC_ENV: &str = "CORRAL_IT_REC_VIC";
const VIC: &str = "viewer-vic-token-0123456789abc";
const JWT_ENV: &str = "CORRAL_IT_REC_JWT";
const JWT: &str = "0123456789abcdef0123456789abcdef-rec";

/// The file the recorded run reads: its content is a value, never audited.
const CONTENT: &str = "the quarterly numbers: 42";

async fn server(ws: &Workspace) -> Server {
    ws.write("notes.txt", CONTENT);
    let yaml = format!(
        "version: 1
preset: {{name: workspace_jail, confirm: never}}
root: {}
state_dir: {}
auth:
  tokens:
    - {{id: bot, roles: [viewer], token_env: {BOT_ENV}, run: task-1, record: true}}
    - {{id: olga, roles: [operator], token_env: {OLGA_ENV}}}
    - {{id: root, roles: [admin], token_env: {ROOT_ENV}}}
    - {{id: vic, roles: [viewer], token_env: {VIC_ENV}}}
  jwt: {{hs256_secret_env: {JWT_ENV}}}
",
        ws.root.display(),
        ws.state.display()
    );
    let env = [
        (BOT_ENV, BOT),
        (OLGA_ENV, OLGA),
        (ROOT_ENV, ROOT),
        (VIC_ENV, VIC),
        (JWT_ENV, JWT),
    ];
    Server::start(&ws.load(&yaml, &env)).await
}

/// An admin of another tenant.
fn other_tenant_admin() -> String {
    jwt(json!({"sub": "mallory", "roles": ["admin"], "tenant": "globex"}))
}

/// A JWT of the server's secret with `claims` and an expiry an hour away.
fn jwt(mut claims: Value) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    claims["exp"] = json!(exp);
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(JWT.as_bytes()),
    )
    .unwrap()
}

async fn get(s: &Server, token: &str, path: &str) -> Reply {
    send(s.client().get(s.url(path)).bearer_auth(token)).await
}

async fn call(s: &Server, token: &str, op: &str, args: Value, headers: &[(&str, &str)]) -> Reply {
    let mut rb = s
        .client()
        .post(s.url(&format!("/ops/{op}")))
        .bearer_auth(token)
        .json(&args);
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    send(rb).await
}

/// A 200's JSON body.
#[track_caller]
fn body(r: Reply) -> Value {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

fn runs(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_run_recorded_by_its_token_is_read_by_its_principal_and_an_admin_as_json_and_json_lines()
{
    let ws = Workspace::new();
    let s = server(&ws).await;
    let path = ws.at("notes.txt");
    let read = call(&s, BOT, "files.read", json!({"path": path}), &[]).await;
    let answer = read.ok();
    assert!(answer.to_string().contains(CONTENT), "{answer}");
    // Refused (no rule lets the bot, a viewer, write): recorded with its code.
    let denied = call(
        &s,
        BOT,
        "files.write",
        json!({"path": path, "content": "x"}),
        &[],
    )
    .await;
    let denied_code = denied.code();
    assert_eq!(denied.status, 403, "{}", denied.text);

    for who in [BOT, ROOT] {
        let r = body(get(&s, who, "/v1/sandbox/recordings/task-1").await);
        let rec = &r["recording"];
        assert_eq!(rec["run_id"], "task-1");
        assert_eq!(rec["principal"], "bot");
        assert_eq!(rec["events"], 2);
        assert_eq!(
            (rec["capped"].clone(), rec["gapped"].clone()),
            (json!(false), json!(false))
        );
        let events = r["events"].as_array().unwrap();
        assert_eq!(events[0]["seq"], 1);
        assert_eq!(events[0]["op"], "files.read");
        assert_eq!(events[0]["args"], json!({"path": path}));
        assert_eq!(events[0]["response"], answer, "the response the caller got");
        assert_eq!(events[0]["error_code"], Value::Null);
        assert_eq!(events[1]["seq"], 2);
        assert_eq!(events[1]["op"], "files.write");
        assert_eq!(events[1]["response"], Value::Null);
        assert_eq!(events[1]["error_code"], json!(denied_code));
    }

    let export = get(&s, BOT, "/v1/sandbox/recordings/task-1/export").await;
    assert_eq!(export.status, 200, "{}", export.text);
    assert_eq!(
        export.headers.get("content-type").unwrap(),
        "application/x-ndjson"
    );
    let lines: Vec<Value> = export
        .text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["recording", "event", "event"]);
    assert_eq!(lines[0]["run_id"], "task-1");
    assert_eq!(lines[1]["response"], answer);
    assert!(export.text.ends_with('\n'));

    // The listing: an admin sees every recording, anyone else only their own runs.
    assert_eq!(
        runs(&body(get(&s, ROOT, "/v1/sandbox/recordings").await)),
        ["task-1"]
    );
    assert_eq!(
        runs(&body(get(&s, BOT, "/v1/sandbox/recordings").await)),
        ["task-1"]
    );
    assert!(runs(&body(get(&s, VIC, "/v1/sandbox/recordings").await)).is_empty());

    // The audit holds the calls and the reads, never a value.
    let audit = body(get(&s, ROOT, "/audit?limit=100").await);
    let text = audit.to_string();
    assert!(text.contains("sandbox.recordings.get"), "{text}");
    assert!(!text.contains("quarterly"), "{text}");
}

#[tokio::test]
async fn a_recording_is_403_to_a_viewer_who_is_not_its_principal_and_404_to_another_tenant() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    call(
        &s,
        BOT,
        "files.read",
        json!({"path": ws.at("notes.txt")}),
        &[],
    )
    .await
    .ok();
    for path in [
        "/v1/sandbox/recordings/task-1",
        "/v1/sandbox/recordings/task-1/export",
    ] {
        let r = get(&s, VIC, path).await;
        r.assert_error(403, "recording.forbidden");
        assert!(
            r.text.contains("admin or the run's own principal"),
            "{}",
            r.text
        );
        assert!(!r.text.contains("quarterly"), "{}", r.text);
        // An operator is no admin either.
        get(&s, OLGA, path)
            .await
            .assert_error(403, "recording.forbidden");
        let r = get(&s, &other_tenant_admin(), path).await;
        r.assert_error(404, "recording.not_found");
        assert!(!r.text.contains("quarterly"), "{}", r.text);
    }
    assert!(
        runs(&body(
            get(&s, &other_tenant_admin(), "/v1/sandbox/recordings").await
        ))
        .is_empty()
    );
    get(&s, ROOT, "/v1/sandbox/recordings/never-recorded")
        .await
        .assert_error(404, "recording.not_found");
}

#[tokio::test]
async fn the_record_header_records_an_operators_run_and_is_403_for_a_viewer() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let args = json!({"path": ws.at("notes.txt")});
    let on = [("X-Corral-Record", "on"), ("X-Corral-Run", "olga-1")];
    call(&s, OLGA, "files.read", args.clone(), &on).await.ok();
    // Without the header the same run's call is not recorded.
    call(
        &s,
        OLGA,
        "files.read",
        args.clone(),
        &[("X-Corral-Run", "olga-1")],
    )
    .await
    .ok();
    let r = body(get(&s, OLGA, "/v1/sandbox/recordings/olga-1").await);
    assert_eq!(r["recording"]["principal"], "olga");
    assert_eq!(r["events"].as_array().unwrap().len(), 1);

    let r = call(
        &s,
        VIC,
        "files.read",
        args.clone(),
        &[("X-Corral-Record", "on"), ("X-Corral-Run", "vic-1")],
    )
    .await;
    r.assert_error(403, "recording.not_allowed");
    get(&s, ROOT, "/v1/sandbox/recordings/vic-1")
        .await
        .assert_error(404, "recording.not_found");
    let r = call(
        &s,
        OLGA,
        "files.read",
        args.clone(),
        &[("X-Corral-Record", "on")],
    )
    .await;
    r.assert_error(400, "recording.header_invalid");
    let r = call(&s, OLGA, "files.read", args, &[("X-Corral-Record", "yes")]).await;
    r.assert_error(400, "run.invalid_header");
    assert!(
        r.text.contains("`x-corral-record` must be `on` or `off`"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn a_recorded_download_keeps_its_type_and_length_never_its_bytes() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let r = call(
        &s,
        BOT,
        "files.download",
        json!({"path": ws.at("notes.txt")}),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.text, CONTENT, "the caller gets the bytes");
    let export = get(&s, BOT, "/v1/sandbox/recordings/task-1/export").await;
    assert_eq!(export.status, 200, "{}", export.text);
    assert!(!export.text.contains("quarterly"), "{}", export.text);
    let detail = body(get(&s, BOT, "/v1/sandbox/recordings/task-1").await);
    let event = &detail["events"][0];
    assert_eq!(event["op"], "files.download");
    assert_eq!(event["response"]["stream"]["bytes"], CONTENT.len());
    assert!(
        event["response"]["stream"]["content_type"].is_string(),
        "{event}"
    );
}

/// Attack finding F-2: an operator who records a run id first (`X-Corral-Record: on` +
/// `X-Corral-Run: task-1`) once made every later call of the token recorded for `task-1`
/// answered and silently unrecorded. Each principal now has its own recording of the run id.
#[tokio::test]
async fn an_operator_who_records_a_run_id_first_never_hides_the_calls_of_a_token_recorded_for_it() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let squat = [("X-Corral-Record", "on"), ("X-Corral-Run", "task-1")];
    body(call(&s, OLGA, "files.list", json!({"path": ws.root}), &squat).await);
    let read = call(
        &s,
        BOT,
        "files.read",
        json!({"path": ws.at("notes.txt")}),
        &[],
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.text);

    // The token reads its own recording, which holds its call and nothing of the operator's.
    let mine = body(get(&s, BOT, "/v1/sandbox/recordings/task-1").await);
    assert_eq!(mine["recording"]["identity"], "token:person:bot");
    let ops: Vec<&str> = mine["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["files.read"]);
    assert_eq!(mine["recording"]["gapped"], false);

    // An admin sees both recordings of the run id and names the one to read.
    let listed = body(get(&s, ROOT, "/v1/sandbox/recordings").await);
    let mut owners: Vec<String> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["run_id"], r["identity"]))
        .collect();
    owners.sort();
    assert_eq!(
        owners,
        [
            "\"task-1\" \"token:person:bot\"",
            "\"task-1\" \"token:person:olga\""
        ]
    );
    let r = get(&s, ROOT, "/v1/sandbox/recordings/task-1").await;
    r.assert_error(409, "recording.ambiguous");
    assert!(
        r.text.contains("token:person:bot") && r.text.contains("?principal="),
        "{}",
        r.text
    );
    let bots = body(get(&s, ROOT, "/v1/sandbox/recordings/task-1?principal=bot").await);
    assert_eq!(bots["events"][0]["op"], "files.read");
    let export = get(
        &s,
        ROOT,
        "/v1/sandbox/recordings/task-1/export?principal=token:person:olga",
    )
    .await;
    assert_eq!(export.status, 200, "{}", export.text);
    assert!(export.text.contains("files.list"), "{}", export.text);
    assert!(!export.text.contains("files.read"), "{}", export.text);
}

/// Attack finding F-3: a recording was owned by `principal.id` alone, so a JWT whose `sub` is
/// `bot` read the static token `bot`'s recording. It is owned by the full identity now.
#[tokio::test]
async fn a_jwt_whose_sub_names_a_static_token_cannot_read_that_tokens_recording() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    call(
        &s,
        BOT,
        "files.read",
        json!({"path": ws.at("notes.txt")}),
        &[],
    )
    .await
    .ok();
    let jwt = jwt(json!({"sub": "bot", "roles": ["viewer"]}));
    for path in [
        "/v1/sandbox/recordings/task-1",
        "/v1/sandbox/recordings/task-1?principal=bot",
        "/v1/sandbox/recordings/task-1/export",
    ] {
        let r = get(&s, &jwt, path).await;
        assert!(
            !r.text.contains("quarterly"),
            "a JWT `sub: bot` read the static token bot's recording: {}",
            r.text
        );
        r.assert_error(403, "recording.forbidden");
    }
    assert!(runs(&body(get(&s, &jwt, "/v1/sandbox/recordings").await)).is_empty());
    // The token itself still reads it.
    let own = body(get(&s, BOT, "/v1/sandbox/recordings/task-1").await);
    assert_eq!(own["events"][0]["op"], "files.read");
}

#[tokio::test]
async fn a_call_that_would_start_a_recording_past_the_tenants_limit_is_refused_and_does_not_run() {
    let ws = Workspace::new();
    let yaml = format!(
        "version: 1
preset: {{name: workspace_jail, confirm: never}}
root: {}
state_dir: {}
recordings: {{max_per_tenant: 1}}
auth:
  tokens:
    - {{id: olga, roles: [operator], token_env: {OLGA_ENV}}}
",
        ws.root.display(),
        ws.state.display()
    );
    let s = Server::start(&ws.load(&yaml, &[(OLGA_ENV, OLGA)])).await;
    let write = |run: &'static str, name: &'static str| {
        let path = ws.at(name);
        let s = &s;
        async move {
            call(
                s,
                OLGA,
                "files.write",
                json!({"path": path, "content": "x"}),
                &[("X-Corral-Record", "on"), ("X-Corral-Run", run)],
            )
            .await
        }
    };
    body(write("first", "a.txt").await);
    // The same recording takes more calls.
    body(write("first", "b.txt").await);
    let r = write("second", "c.txt").await;
    r.assert_error(429, "recording.limit");
    assert!(r.text.contains("recordings.max_per_tenant"), "{}", r.text);
    assert!(
        !ws.root.join("c.txt").exists(),
        "a call that could not be recorded did not run"
    );
    // Unrecorded calls are not limited.
    let plain = call(
        &s,
        OLGA,
        "files.write",
        json!({"path": ws.at("d.txt"), "content": "x"}),
        &[("X-Corral-Run", "second")],
    )
    .await;
    assert_eq!(plain.status, 200, "{}", plain.text);
}

/// Regression (attack finding Y-3): one operator could fill the tenant's recordings, so no one
/// else in the tenant could record. Each principal has a share (`recordings.max_per_principal`);
/// an admin's `DELETE` frees it, audited; an operator cannot delete.
#[tokio::test]
async fn one_operator_cannot_fill_the_tenants_recordings_and_an_admin_delete_frees_her_share() {
    let ws = Workspace::new();
    let yaml = format!(
        "version: 1
preset: {{name: workspace_jail, confirm: never}}
root: {}
state_dir: {}
recordings: {{max_per_tenant: 3, max_per_principal: 1}}
auth:
  tokens:
    - {{id: olga, roles: [operator], token_env: {OLGA_ENV}}}
    - {{id: root, roles: [admin], token_env: {ROOT_ENV}}}
",
        ws.root.display(),
        ws.state.display()
    );
    let s = Server::start(&ws.load(&yaml, &[(OLGA_ENV, OLGA), (ROOT_ENV, ROOT)])).await;
    let write = |token: &'static str, run: &'static str, name: &'static str| {
        let path = ws.at(name);
        let s = &s;
        async move {
            call(
                s,
                token,
                "files.write",
                json!({"path": path, "content": "x"}),
                &[("X-Corral-Record", "on"), ("X-Corral-Run", run)],
            )
            .await
        }
    };
    body(write(OLGA, "first", "a.txt").await);
    let r = write(OLGA, "second", "b.txt").await;
    r.assert_error(429, "recording.limit");
    assert!(
        r.text.contains("recordings.max_per_principal"),
        "{}",
        r.text
    );
    assert!(!ws.root.join("b.txt").exists());
    // The tenant still has room for another principal.
    body(write(ROOT, "third", "c.txt").await);
    // Deleting is an admin's.
    let del = |token: &'static str| {
        send(
            s.client()
                .delete(s.url("/v1/sandbox/recordings/first?principal=olga"))
                .bearer_auth(token),
        )
    };
    del(OLGA).await.assert_error(403, "rbac.denied");
    let deleted = body(del(ROOT).await);
    assert_eq!(
        (deleted["run_id"].as_str(), deleted["principal"].as_str()),
        (Some("first"), Some("olga"))
    );
    get(&s, ROOT, "/v1/sandbox/recordings/first")
        .await
        .assert_error(404, "recording.not_found");
    let audit = body(get(&s, ROOT, "/audit?limit=100").await).to_string();
    assert!(audit.contains("sandbox.recordings.delete"), "{audit}");
}
