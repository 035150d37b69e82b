//! Confirmations shared by replicas and kept across restarts: two servers on one PostgreSQL,
//! an approval given on one, 1,000 concurrent retries spread over both: one execution, every
//! other retry gets the stored outcome. And a restart between the approval and the retry
//! (SQLite and PostgreSQL) still runs the approved call, once. A run's budget is shared by
//! the replicas: its calls spread over both, exactly the budget's number pass; and a run with
//! a token budget has one model call in flight between them.

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

/// A provider whose first completion waits for `release` (after telling `started`); the
/// others answer at once. Each answer uses 10 tokens.
async fn holding_provider(
    started: tokio::sync::oneshot::Sender<()>,
    release: tokio::sync::oneshot::Receiver<()>,
) -> (String, tokio::task::JoinHandle<()>) {
    use std::sync::Mutex;
    type Gate = Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::sync::oneshot::Receiver<()>,
    )>;
    let gate: Arc<Mutex<Gate>> = Arc::new(Mutex::new(Some((started, release))));
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let gate = Arc::clone(&gate);
            async move {
                let first = gate.lock().unwrap().take();
                if let Some((started, release)) = first {
                    let _ = started.send(());
                    let _ = release.await;
                }
                axum::Json(json!({
                    "id": "x", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"},
                        "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/v1"), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runs_model_call_in_flight_on_one_replica_refuses_the_runs_next_on_the_other_until_it_ends()
 {
    use crate::common::{AGENT_TOKEN, Workspace, token_env};
    use crate::scripted_llm::{LLM_YAML, UPSTREAM_KEY, UPSTREAM_KEY_ENV, UPSTREAM_URL_ENV};
    let Some(schema) = Schema::create("modelcalls").await else {
        return;
    };
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel();
    let (url, _provider) = holding_provider(started_tx, release_rx).await;
    let ws = Workspace::new();
    let mut env = token_env();
    env.push((UPSTREAM_URL_ENV, url.as_str()));
    env.push((UPSTREAM_KEY_ENV, UPSTREAM_KEY));
    let yaml = ws.jail_yaml(&format!(
        "storage: {{url: \"{}\"}}\nbudgets: {{tokens: 1000}}\n{LLM_YAML}rules:\n  - allow: [llm.chat]\n",
        schema.url
    ));
    let loaded = ws.load(&yaml, &env);
    let a = Arc::new(Server::start(&loaded).await);
    let b = Server::start(&loaded).await;
    assert_eq!(a.store.backend_name(), "postgres");
    let ask = |s: &Server| {
        s.client()
            .post(s.url("/v1/chat/completions"))
            .bearer_auth(AGENT_TOKEN)
            .header("x-corral-run", "one-at-a-time")
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
    };
    let first = {
        let a = Arc::clone(&a);
        tokio::spawn(async move { send(ask(&a)).await })
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), started)
        .await
        .unwrap()
        .unwrap();

    // Held on A: B refuses the run's second model call.
    let second = send(ask(&b)).await;
    second.assert_error(429, "budget.tokens_in_flight");
    assert!(second.text.contains("one-at-a-time"), "{}", second.text);

    release.send(()).unwrap();
    let first = first.await.unwrap();
    assert_eq!(first.status, 200, "{}", first.text);
    // Ended on A: B takes the run's next call.
    let third = send(ask(&b)).await;
    assert_eq!(third.status, 200, "{}", third.text);
    drop((a, b));
    schema.drop().await;
}
