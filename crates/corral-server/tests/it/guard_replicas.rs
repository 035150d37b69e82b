//! Confirmations shared by replicas and kept across restarts: two servers on one PostgreSQL,
//! an approval given on one, 1,000 concurrent retries spread over both: one execution, every
//! other retry gets the stored outcome. And a restart between the approval and the retry
//! (SQLite and PostgreSQL) still runs the approved call, once. A run's budget is shared by
//! the replicas: its calls spread over both, exactly the budget's number pass.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::common::{Server, send};
use crate::guard_fixture::{Fixture, Opts, action_id, approve, call, human, plain};
use crate::pg::Schema;

const RETRIES: usize = 1_000;

/// Enough file descriptors for `RETRIES` client and server sockets in this process.
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    let want = 8_192;
    if l.current.is_some_and(|c| c < want) {
        l.current = Some(l.maximum.map_or(want, |m| m.min(want)));
        let _ = setrlimit(Resource::Nofile, l);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_one_postgres_run_an_approved_call_once_under_1000_retries() {
    let Some(schema) = Schema::create("replicas").await else {
        return;
    };
    raise_fd_limit();
    let f = Fixture::new();
    let yaml = f.yaml(
        "",
        &format!(
            "storage: {{url: \"{}\"}}\nguardrails: {{replicas: 2}}\n",
            schema.url
        ),
    );
    let loaded = f.load(&yaml);
    let a = Server::start(&loaded).await;
    let b = Server::start(&loaded).await;
    assert_eq!(a.store.backend_name(), "postgres");
    let ada = human("ada", &["operator"]);
    let args = json!({"word": "once"});

    // Raised on A; B sees it and takes the approval.
    let id = action_id(&plain(&a, &ada, "ledger.append", args.clone()).await);
    let listed = send(b.client().get(b.url("/confirmations")).bearer_auth(&ada)).await;
    assert_eq!(
        listed.json()["confirmations"][0]["action_id"],
        id,
        "{}",
        listed.text
    );
    approve(&b, &ada, &id).await;
    assert!(f.ledger_lines().is_empty());

    // 1,000 concurrent retries, alternating between the replicas.
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let bases = Arc::new([a.base.clone(), b.base.clone()]);
    let started = std::time::Instant::now();
    let mut tasks = Vec::with_capacity(RETRIES);
    for i in 0..RETRIES {
        let client = client.clone();
        let bases = Arc::clone(&bases);
        let token = ada.clone();
        let args = args.clone();
        tasks.push(tokio::spawn(async move {
            let r = send(
                client
                    .post(format!("{}/ops/ledger.append", bases[i % 2]))
                    .bearer_auth(token)
                    .json(&args),
            )
            .await;
            (r.status, r.text)
        }));
    }
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let mut results: Vec<Value> = Vec::new();
    for t in tasks {
        let (status, text) = t.await.unwrap();
        *statuses.entry(status).or_default() += 1;
        assert_eq!(status, 200, "{text}");
        results.push(serde_json::from_str::<Value>(&text).unwrap()["result"].clone());
    }
    eprintln!(
        "{RETRIES} retries over 2 replicas: {:?} ({statuses:?})",
        started.elapsed()
    );
    assert_eq!(statuses, BTreeMap::from([(200, RETRIES)]));
    // Exactly one execution; every answer is that execution's outcome.
    assert_eq!(f.ledger_lines(), ["once"]);
    assert!(results.iter().all(|r| *r == results[0]), "{results:?}");

    // The shared audit table: one consumption, one run, and the rest replayed.
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for e in a.store.audit_recent(None, 100_000).await.unwrap() {
        if e.op == "ledger.append" {
            *outcomes.entry(e.outcome.as_str().to_owned()).or_default() += 1;
        }
    }
    assert_eq!(
        outcomes.get("confirmation_consumed"),
        Some(&1),
        "{outcomes:?}"
    );
    assert_eq!(outcomes.get("ok"), Some(&1), "{outcomes:?}");
    assert_eq!(
        outcomes.get("replayed"),
        Some(&(RETRIES - 1)),
        "{outcomes:?}"
    );
    for s in [a, b] {
        s.stop().await.close().await;
    }
    schema.drop().await;
}

/// Raised and approved on one server; that server stopped and its store closed; a new server
/// on the same storage: the approved call runs once.
async fn restart_between_approval_and_retry(f: &Fixture, yaml: &str) {
    let loaded = f.load(yaml);
    let ada = human("ada", &["operator"]);
    let args = json!({"word": "after-restart"});
    let s = Server::start(&loaded).await;
    let id = action_id(&plain(&s, &ada, "ledger.append", args.clone()).await);
    approve(&s, &ada, &id).await;
    let store = s.stop().await;
    store.close().await;
    drop(store);

    let s = Server::start(&loaded).await;
    let listed = send(s.client().get(s.url("/confirmations")).bearer_auth(&ada)).await;
    assert_eq!(listed.json()["confirmations"][0]["state"], "approved");
    let first = plain(&s, &ada, "ledger.append", args.clone()).await.ok();
    assert_eq!(f.ledger_lines(), ["after-restart"]);
    // And once more across another restart: the stored outcome, not a second run.
    s.stop().await.close().await;
    let s = Server::start(&loaded).await;
    let again = plain(&s, &ada, "ledger.append", args).await.ok();
    assert_eq!(again, first);
    assert_eq!(f.ledger_lines(), ["after-restart"]);
    s.stop().await.close().await;
}

#[tokio::test]
async fn a_restart_between_approval_and_retry_loses_nothing_on_sqlite() {
    let f = Fixture::new();
    let yaml = f.yaml("", "");
    restart_between_approval_and_retry(&f, &yaml).await;
}

#[tokio::test]
async fn a_restart_between_approval_and_retry_loses_nothing_on_postgres() {
    let Some(schema) = Schema::create("restart").await else {
        return;
    };
    let f = Fixture::new();
    let yaml = f.yaml("", &format!("storage: {{url: \"{}\"}}\n", schema.url));
    restart_between_approval_and_retry(&f, &yaml).await;
    schema.drop().await;
}

#[tokio::test]
async fn memory_confirmations_are_lost_on_restart_so_nothing_runs_without_a_new_approval() {
    let f = Fixture::new();
    let loaded = f.load(&f.yaml("", "guardrails: {confirmations: memory}\n"));
    let ada = human("ada", &["operator"]);
    let args = json!({"word": "w"});
    let s = Server::start(&loaded).await;
    let health = send(s.client().get(s.url("/healthz"))).await;
    assert_eq!(health.json()["confirmations"], "memory");
    let id = action_id(&plain(&s, &ada, "ledger.append", args.clone()).await);
    approve(&s, &ada, &id).await;
    s.stop().await.close().await;
    let s = Server::start(&loaded).await;
    let again = action_id(&plain(&s, &ada, "ledger.append", args).await);
    assert_ne!(again, id);
    assert!(f.ledger_lines().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runs_budget_is_shared_by_two_replicas_on_one_postgres() {
    let Some(schema) = Schema::create("runbudget").await else {
        return;
    };
    let f = Fixture::new();
    let yaml = f.yaml(
        "",
        &format!(
            "storage: {{url: \"{}\"}}\nbudgets: {{max_calls: 5}}\n",
            schema.url
        ),
    );
    let loaded = f.load(&yaml);
    let a = Arc::new(Server::start(&loaded).await);
    let b = Arc::new(Server::start(&loaded).await);
    let ada = human("ada", &["operator"]);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let s = Arc::clone(if i % 2 == 0 { &a } else { &b });
        let token = ada.clone();
        tasks.push(tokio::spawn(async move {
            let o = Opts {
                run: Some("shared-run"),
                ..Opts::default()
            };
            let r = call(&s, &token, "ledger.peek", json!({}), o).await;
            (r.status, r.code())
        }));
    }
    let mut by: BTreeMap<(u16, String), usize> = BTreeMap::new();
    for t in tasks {
        let (status, code) = t.await.unwrap();
        *by.entry((status, code)).or_default() += 1;
    }
    assert_eq!(by.get(&(200, String::new())), Some(&5), "{by:?}");
    assert_eq!(
        by.get(&(429, "budget.exhausted".to_owned())),
        Some(&35),
        "{by:?}"
    );
    drop((a, b));
    schema.drop().await;
}
