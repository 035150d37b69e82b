//! The audit log: one row per call, allowed or refused, under concurrency, on SQLite and on
//! PostgreSQL; rows outlive the server; no row holds an argument value.

use std::collections::{HashMap, HashSet};

use corral_config::Loaded;
use serde_json::json;

use crate::common::{AGENT_TOKEN, Server, Workspace, send, token_env};
use crate::pg::Schema;

const CALLS: usize = 10_000;
const CLIENTS: usize = 32;
const SECRET: &str = "SECRET-VALUE-123";

/// The config: the jail over `ws`, and `storage` when given.
fn config(ws: &Workspace, storage_url: Option<&str>) -> Loaded {
    let storage = storage_url
        .map(|u| format!("storage: {{url: \"{u}\"}}\n"))
        .unwrap_or_default();
    ws.load(&ws.jail_yaml(&storage), &token_env())
}

/// What call `i` is, and the status it must get: allowed reads and four kinds of refusal.
fn call_kind(i: usize) -> (&'static str, u16, &'static str) {
    match i % 5 {
        0 => ("files.read", 200, "ok"),
        1 => ("files.read", 403, "denied"),
        2 => ("no.such_op", 404, "not_enabled"),
        3 => ("files.read", 401, "unauthenticated"),
        _ => ("files.read", 400, "invalid_args"),
    }
}

/// `CALLS` calls from `CLIENTS` concurrent clients (each its own connection pool).
async fn hammer(s: &Server, ws: &Workspace) {
    let notes = ws.at("notes.txt");
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let base = s.base.clone();
        let notes = notes.clone();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let mut i = c;
            while i < CALLS {
                let (op, status, _) = call_kind(i);
                let args = match i % 5 {
                    1 => json!({"path": "/etc/passwd"}),
                    4 => json!({"path": 5}),
                    _ => json!({"path": notes}),
                };
                let mut rb = client.post(format!("{base}/ops/{op}")).json(&args);
                if i % 5 != 3 {
                    rb = rb.bearer_auth(AGENT_TOKEN);
                }
                let r = send(rb).await;
                assert_eq!(r.status, status, "call {i}: {}", r.text);
                i += CLIENTS;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// The whole check, on whatever storage `loaded` names.
async fn every_call_is_audited_once_and_survives_a_restart(ws: &Workspace, loaded: &Loaded) {
    ws.write("notes.txt", "hello");
    let s = Server::start(loaded).await;
    assert_eq!(s.store.audit_count(None).await.unwrap(), 0);
    let started = std::time::Instant::now();
    hammer(&s, ws).await;
    eprintln!(
        "{CALLS} calls from {CLIENTS} clients on {}: {:?}",
        s.store.backend_name(),
        started.elapsed()
    );
    assert_eq!(s.store.audit_count(None).await.unwrap(), CALLS as i64);

    let rows = s.store.audit_recent(None, u32::MAX).await.unwrap();
    assert_eq!(rows.len(), CALLS);
    let ids: HashSet<&str> = rows.iter().map(|e| e.request_id.as_str()).collect();
    assert_eq!(ids.len(), CALLS, "every row has its own request id");
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for e in &rows {
        *outcomes.entry(e.outcome.as_str()).or_default() += 1;
    }
    let mut expected: HashMap<&str, usize> = HashMap::new();
    for i in 0..CALLS {
        *expected.entry(call_kind(i).2).or_default() += 1;
    }
    assert_eq!(outcomes, expected);
    assert!(
        rows.iter()
            .filter(|e| e.outcome.as_str() == "unauthenticated")
            .all(|e| e.status == 401 && e.principal_id.is_empty())
    );
    assert!(
        rows.iter()
            .filter(|e| e.outcome.as_str() == "ok")
            .all(|e| e.status == 200 && e.principal_id == "agent" && e.op == "files.read")
    );

    // Stop the server, close and drop the store, then build everything again on the same
    // storage: the rows are still there, and new calls add to them.
    let store = s.stop().await;
    store.close().await;
    drop(store);
    let again = Server::start(loaded).await.with_token(AGENT_TOKEN);
    assert_eq!(again.store.audit_count(None).await.unwrap(), CALLS as i64);
    again
        .call("files.read", json!({"path": ws.at("notes.txt")}))
        .await
        .ok();
    assert_eq!(
        again.store.audit_count(None).await.unwrap(),
        CALLS as i64 + 1
    );
    let store = again.stop().await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_calls_from_32_clients_leave_ten_thousand_rows_on_sqlite() {
    let ws = Workspace::new();
    let loaded = config(&ws, None);
    every_call_is_audited_once_and_survives_a_restart(&ws, &loaded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_calls_from_32_clients_leave_ten_thousand_rows_on_postgres() {
    let Some(schema) = Schema::create("bulk").await else {
        return;
    };
    let ws = Workspace::new();
    let loaded = config(&ws, Some(&schema.url));
    every_call_is_audited_once_and_survives_a_restart(&ws, &loaded).await;
    schema.drop().await;
}

/// Calls that carry `SECRET` in their arguments (allowed, refused at every stage); returns how
/// many were made.
async fn calls_with_a_secret(s: &Server, ws: &Workspace) -> i64 {
    let target = ws.at("secret.txt");
    s.call("files.write", json!({"path": target, "content": SECRET}))
        .await
        .ok();
    assert_eq!(
        std::fs::read_to_string(ws.root.join("secret.txt")).unwrap(),
        SECRET
    );
    let refusals = [
        (
            "files.write",
            json!({"path": "/etc/x", "content": SECRET}),
            403,
        ),
        (
            "files.write",
            json!({"path": target, "content": SECRET, "mode": 1}),
            400,
        ),
        (
            "files.write",
            json!({"path": ws.at(SECRET), "content": 5}),
            400,
        ),
        (
            "files.write",
            json!({"path": ws.at(&format!("{SECRET}/a")), "content": SECRET}),
            404,
        ),
        ("commands.run", json!({"argv": ["echo", SECRET]}), 404),
        (
            "files.read",
            json!({"path": ws.at(&format!("{SECRET}.txt"))}),
            404,
        ),
    ];
    for (op, args, status) in &refusals {
        let r = s.call(op, args.clone()).await;
        assert_eq!(r.status, *status, "{op} {args}: {}", r.text);
    }
    // Malformed JSON and a refused credential, with the secret in the body.
    let r = send(
        s.client()
            .post(s.url("/ops/files.write"))
            .bearer_auth(AGENT_TOKEN)
            .header("content-type", "application/json")
            .body(format!(
                "{{\"path\": \"{target}\", \"content\": \"{SECRET}\""
            )),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = send(
        s.client()
            .post(s.url("/ops/files.write"))
            .json(&json!({"path": target, "content": SECRET})),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.text);
    1 + refusals.len() as i64 + 2
}

/// Asserts that no stored event, in any field, holds `SECRET`.
async fn assert_no_secret_in_events(s: &Server, calls: i64) {
    assert_eq!(s.store.audit_count(None).await.unwrap(), calls);
    let events = s.store.audit_recent(None, 1000).await.unwrap();
    assert_eq!(events.len() as i64, calls);
    for e in &events {
        let as_json = serde_json::to_string(e).unwrap();
        assert!(
            !as_json.contains(SECRET),
            "an audit row holds the secret: {as_json}"
        );
        assert!(!format!("{e:?}").contains(SECRET), "{e:?}");
    }
    let write = events
        .iter()
        .find(|e| e.op == "files.write" && e.status == 200)
        .unwrap();
    assert_eq!(
        write.args_shape,
        json!({"path": "string", "content": "string"}),
        "the shape keeps the keys and types only"
    );
    assert_eq!(write.args_hash.len(), 64);
}

#[tokio::test]
async fn an_audit_row_never_holds_an_argument_value_on_sqlite() {
    let ws = Workspace::new();
    let s = Server::start(&config(&ws, None))
        .await
        .with_token(AGENT_TOKEN);
    let calls = calls_with_a_secret(&s, &ws).await;
    assert_no_secret_in_events(&s, calls).await;
    // Nor anywhere in the database files, whatever the columns.
    let store = s.stop().await;
    store.close().await;
    // The audit writer's own connection closes when its last sender is gone; SQLite removes
    // the WAL once every connection closed (after checkpointing it into the database file).
    let wal = ws.state.join("corral.db-wal");
    for _ in 0..100 {
        if !wal.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let mut files = 0;
    for entry in std::fs::read_dir(&ws.state).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        files += 1;
        assert!(
            !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "{} holds the secret",
            path.display()
        );
    }
    assert!(files >= 1);
}

#[tokio::test]
async fn an_audit_row_never_holds_an_argument_value_on_postgres() {
    let Some(schema) = Schema::create("secret").await else {
        return;
    };
    let ws = Workspace::new();
    let s = Server::start(&config(&ws, Some(&schema.url)))
        .await
        .with_token(AGENT_TOKEN);
    let calls = calls_with_a_secret(&s, &ws).await;
    assert_no_secret_in_events(&s, calls).await;
    let rows = schema.audit_rows_as_json().await;
    assert_eq!(rows.len() as i64, calls);
    for row in rows {
        assert!(!row.contains(SECRET), "a row holds the secret: {row}");
    }
    let store = s.stop().await;
    store.close().await;
    schema.drop().await;
}

#[tokio::test]
async fn get_audit_shows_an_admin_the_tenants_newest_events_without_argument_values() {
    let ws = Workspace::new();
    ws.write("notes.txt", "value-that-must-not-show");
    let s = Server::start(&ws.load(&ws.jail_yaml(""), &token_env())).await;
    let read = s
        .call_as(
            AGENT_TOKEN,
            "files.read",
            json!({"path": ws.at("notes.txt")}),
        )
        .await;
    assert_eq!(read.status, 200, "{}", read.text);
    let refused = s
        .call_as(AGENT_TOKEN, "files.read", json!({"path": "/etc/hostname"}))
        .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let rid = |r: &crate::common::Reply| r.json()["request_id"].as_str().unwrap().to_owned();

    // Not an admin: refused, with its code.
    let r = send(s.client().get(s.url("/audit")).bearer_auth(AGENT_TOKEN)).await;
    r.assert_error(403, "audit.not_permitted");
    assert!(r.text.contains("role admin"), "{}", r.text);

    let r = send(
        s.client()
            .get(s.url("/audit?limit=2"))
            .bearer_auth(crate::common::ADMIN_TOKEN),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["tenant"], "default");
    let events = v["events"].as_array().unwrap();
    let ids: Vec<&str> = events
        .iter()
        .filter_map(|e| e["request_id"].as_str())
        .collect();
    assert_eq!(ids, [rid(&refused), rid(&read)], "newest first: {}", r.text);
    assert_eq!(events[0]["outcome"], "denied");
    assert_eq!(events[0]["principal_id"], "agent");
    assert_eq!(events[1]["outcome"], "ok");
    assert_eq!(events[1]["args_shape"], json!({"path": "string"}));
    for secret in ["value-that-must-not-show", "/etc/hostname", "notes.txt"] {
        assert!(!r.text.contains(secret), "`{secret}` in {}", r.text);
    }

    // One run's calls, one op's, one principal's.
    let in_run = send(
        s.client()
            .post(s.url("/ops/files.list"))
            .bearer_auth(AGENT_TOKEN)
            .header("X-Corral-Run", "eval-7")
            .json(&json!({"path": "."})),
    )
    .await;
    assert_eq!(in_run.status, 200, "{}", in_run.text);
    let admin_get = |q: &str| {
        send(
            s.client()
                .get(s.url(&format!("/audit?{q}")))
                .bearer_auth(crate::common::ADMIN_TOKEN),
        )
    };
    let only = |r: &crate::common::Reply| -> Vec<String> {
        r.json()["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["request_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(only(&admin_get("run=eval-7").await), [rid(&in_run)]);
    assert_eq!(
        only(&admin_get("op=files.read&principal=agent").await),
        [rid(&refused), rid(&read)]
    );
    assert!(only(&admin_get("principal=nobody").await).is_empty());

    for (query, code) in [
        ("limit=0", "args.invalid"),
        ("limit=1001", "args.invalid"),
        ("limit=ten", "args.invalid"),
        ("run=has%20space", "args.invalid"),
        ("op=", "args.invalid"),
        ("principal=a%0Ab", "args.invalid"),
        ("since=1", "args.unknown"),
    ] {
        let r = send(
            s.client()
                .get(s.url(&format!("/audit?{query}")))
                .bearer_auth(crate::common::ADMIN_TOKEN),
        )
        .await;
        r.assert_error(400, code);
    }
}
