//! Run-scoped tokens: a static token with `run:` (or a JWT with a `run` claim) puts every call
//! it makes in that run, so the run's budgets apply whether or not the agent sends
//! `X-Corral-Run`, and a header naming another run is refused.

use serde_json::{Value, json};

use crate::common::{Reply, Server, Workspace, send};

const SCOPED_ENV: &str = "CORRAL_IT_SCOPED_TOKEN";
const SCOPED: &str = "scoped-token-0123456789abcdef";
const FREE_ENV: &str = "CORRAL_IT_FREE_TOKEN";
const FREE: &str = "free-token-fedcba9876543210";

async fn list(s: &Server, token: &str, run_header: Option<&str>) -> Reply {
    let mut rb = s
        .client()
        .post(s.url("/ops/files.list"))
        .bearer_auth(token)
        .json(&json!({"path": "."}));
    if let Some(run) = run_header {
        rb = rb.header("X-Corral-Run", run);
    }
    send(rb).await
}

#[tokio::test]
async fn a_run_scoped_token_is_metered_by_its_run_with_or_without_the_header() {
    let ws = Workspace::new();
    let yaml = format!(
        "version: 1
preset: workspace_jail
root: {}
state_dir: {}
budgets: {{max_calls: 2}}
auth:
  tokens:
    - {{id: agent, token_env: {SCOPED_ENV}, run: eval-7}}
    - {{id: other, token_env: {FREE_ENV}}}
",
        ws.root.display(),
        ws.state.display()
    );
    let s = Server::start(&ws.load(&yaml, &[(SCOPED_ENV, SCOPED), (FREE_ENV, FREE)])).await;

    let me = send(s.client().get(s.url("/me")).bearer_auth(SCOPED)).await;
    assert_eq!(me.status, 200, "{}", me.text);
    assert_eq!(me.json()["run"], json!("eval-7"));

    // No header: still the run's calls. The header may repeat the run.
    list(&s, SCOPED, None).await.ok();
    list(&s, SCOPED, Some("eval-7")).await.ok();
    // Another run in the header is refused before anything runs or is metered.
    let r = list(&s, SCOPED, Some("fresh-run")).await;
    r.assert_error(403, "run.scope_mismatch");
    assert!(
        r.text.contains("eval-7") && r.text.contains("fresh-run"),
        "{}",
        r.text
    );
    // The run's budget is spent: dropping the header does not escape it.
    let r = list(&s, SCOPED, None).await;
    r.assert_error(429, "budget.exhausted");
    assert!(r.text.contains("budgets.max_calls"), "{}", r.text);

    // A token without a run is metered only when it names one.
    for _ in 0..3 {
        list(&s, FREE, None).await.ok();
    }
    let free_me = send(s.client().get(s.url("/me")).bearer_auth(FREE)).await;
    assert_eq!(free_me.json()["run"], Value::Null);

    let store = s.stop().await;
    let events = store.audit_recent(None, 100).await.unwrap();
    let scoped: Vec<_> = events
        .iter()
        .filter(|e| e.principal_id == "agent")
        .collect();
    assert_eq!(scoped.len(), 4, "{scoped:?}");
    assert!(
        scoped.iter().all(|e| e.run_id.as_deref() == Some("eval-7")),
        "every call of the scoped token is audited in its run: {scoped:?}"
    );
    let mismatch: Vec<_> = scoped
        .iter()
        .filter(|e| e.code.as_deref() == Some("run.scope_mismatch"))
        .collect();
    assert_eq!(mismatch.len(), 1, "{scoped:?}");
    assert_eq!(mismatch[0].status, 403);
}
