//! A crash loses no audited call: `corral serve` (SQLite default) is killed with SIGKILL in the
//! middle of a burst of calls, and every call that had been answered has its audit event in the
//! file; the server then starts again on the same file.

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use corral_client::{Client, Reply};
use serde_json::json;

use crate::call::serve_with;
use crate::workspace;

const TOKEN: &str = "crash-test-token-0123456789";

const CONFIG: &str = "version: 1
preset: workspace_jail
root: $WS
state_dir: .corral
auth:
  tokens:
    - {id: agent, token_env: CORRAL_IT_CRASH_TOKEN}
";

/// Calls `files.list` until `stop`; the request ids of the calls that were answered (each also
/// counted in `answered_so_far`).
async fn caller(
    url: String,
    stop: Arc<AtomicBool>,
    answered_so_far: Arc<AtomicUsize>,
) -> Vec<String> {
    let Ok(client) = Client::new(&url, Some(TOKEN.to_owned())) else {
        unreachable!("the client builds")
    };
    let mut answered = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match client.call_reply("files.list", json!({"path": "."})).await {
            Ok(Reply::Json { request_id, .. }) => {
                answered.push(request_id);
                answered_so_far.fetch_add(1, Ordering::SeqCst);
            }
            Ok(Reply::Bytes { .. }) => unreachable!("files.list answers JSON"),
            // The server is gone (killed mid-call): that call was never answered.
            Err(_) => break,
        }
    }
    answered
}

/// The request ids in the store's audit table.
async fn audited(db: &std::path::Path) -> HashSet<String> {
    let url = format!("sqlite://{}", db.display());
    let store = match corral_store::Store::connect(&url).await {
        Ok(s) => s,
        Err(e) => unreachable!("the store opens after the crash: {e}"),
    };
    let events = match store.audit_recent(None, u32::MAX).await {
        Ok(e) => e,
        Err(e) => unreachable!("the audit table reads: {e}"),
    };
    store.close().await;
    events.into_iter().map(|e| e.request_id).collect()
}

/// Serves `root`, calls from 16 clients until `target` calls were answered (at most 30 s) and
/// `then` more, and kills the server with SIGKILL mid-burst; the request ids of the calls that
/// were answered.
async fn burst_then_kill(root: &std::path::Path, target: usize, then: Duration) -> Vec<String> {
    let env = [("CORRAL_IT_CRASH_TOKEN", TOKEN)];
    let mut served = serve_with(root, &["--config", "corral.yaml"], &env, Stdio::null());
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..16)
        .map(|_| {
            let url = served.url.clone();
            tokio::spawn(caller(url, Arc::clone(&stop), Arc::clone(&count)))
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while count.load(Ordering::SeqCst) < target && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(then).await;
    // SIGKILL: no drain, no shutdown hook, no final commit.
    assert!(served.child.kill().is_ok(), "the server could be killed");
    let _ = served.child.wait();
    stop.store(true, Ordering::SeqCst);
    let mut answered = Vec::new();
    for c in callers {
        match c.await {
            Ok(ids) => answered.extend(ids),
            Err(e) => unreachable!("a caller task failed: {e}"),
        }
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_burst_loses_no_answered_calls_audit_event() {
    let dir = workspace(Some(CONFIG));
    let root = dir.path();
    let db = root.join(".corral/corral.db");
    let mut answered = Vec::new();
    // Three crashes on the same file: each time the server starts again on what the last one
    // left, and every call answered so far is still audited.
    for (round, then_ms) in [(1, 300), (2, 37), (3, 120)] {
        let this_round = burst_then_kill(root, 200, Duration::from_millis(then_ms)).await;
        assert!(
            this_round.len() >= 50,
            "round {round}: only {} calls were answered before the kill",
            this_round.len()
        );
        answered.extend(this_round);
        let rows = audited(&db).await;
        let missing: Vec<&String> = answered.iter().filter(|id| !rows.contains(*id)).collect();
        assert!(
            missing.is_empty(),
            "round {round}: {} of {} answered calls have no audit event after the crash, e.g. {:?}",
            missing.len(),
            answered.len(),
            missing.first()
        );
    }
}

const REC_CONFIG: &str = "version: 1
preset: {name: workspace_jail, confirm: never}
root: $WS
state_dir: .corral
auth:
  tokens:
    - {id: calm, token_env: CORRAL_IT_REC_CALM, run: calm-1, record: true}
    - {id: doomed, token_env: CORRAL_IT_REC_DOOMED, run: doomed-1, record: true}
";
const CALM: &str = "recorded-calm-token-0123456789";
const DOOMED: &str = "recorded-doomed-token-012345678";

/// `n` recorded calls with `token`, all answered.
async fn recorded_calls(url: &str, token: &str, n: usize) {
    let Ok(client) = Client::new(url, Some(token.to_owned())) else {
        unreachable!("the client builds")
    };
    for _ in 0..n {
        let r = client.call_reply("files.list", json!({"path": "."})).await;
        assert!(matches!(r, Ok(Reply::Json { .. })), "{r:?}");
    }
}

/// The recording of the token's run, as its principal reads it: (events, gapped).
async fn recording(url: &str, token: &str, run: &str) -> (u64, bool) {
    let Ok(client) = Client::new(url, Some(token.to_owned())) else {
        unreachable!("the client builds")
    };
    match client.sandbox_recording(run, None).await {
        Ok(d) => (d.recording.events, d.recording.gapped),
        Err(e) => unreachable!("the recording of {run} reads: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_whose_server_was_killed_reads_gapped_and_one_shut_down_cleanly_does_not() {
    let dir = workspace(Some(REC_CONFIG));
    let root = dir.path();
    let env = [
        ("CORRAL_IT_REC_CALM", CALM),
        ("CORRAL_IT_REC_DOOMED", DOOMED),
    ];
    let serve = || serve_with(root, &["--config", "corral.yaml"], &env, Stdio::null());

    // A clean shutdown (SIGTERM): everything queued is committed and the recording is whole.
    let mut first = serve();
    recorded_calls(&first.url, CALM, 20).await;
    let pid = first.child.id().to_string();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(term.is_ok_and(|s| s.success()), "SIGTERM was sent");
    let _ = first.child.wait();

    // SIGKILL: no drain, no final commit; what the writer had queued may be lost.
    let mut second = serve();
    recorded_calls(&second.url, DOOMED, 20).await;
    assert!(second.child.kill().is_ok(), "the server could be killed");
    let _ = second.child.wait();

    let third = serve();
    assert_eq!(
        recording(&third.url, CALM, "calm-1").await,
        (20, false),
        "a recording whose server shut down cleanly is complete"
    );
    let (events, gapped) = recording(&third.url, DOOMED, "doomed-1").await;
    assert!(events <= 20, "{events}");
    assert!(
        gapped,
        "a recording whose server was killed must not look complete ({events} events)"
    );
}

const SHADOW_CONFIG: &str = "version: 1
preset: {name: workspace_jail, confirm: never}
root: $WS
state_dir: .corral
sandbox: {record_runs: true}
budgets: {replay: {max_runs: 1000}}
auth:
  tokens:
    - {id: olga, roles: [operator], token_env: CORRAL_IT_SHADOW_CRASH}
";
const OLGA: &str = "shadow-crash-token-0123456789ab";

/// A value of the client's type `T`, from JSON.
fn of<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    match serde_json::from_value(v) {
        Ok(t) => t,
        Err(e) => unreachable!("the request is well formed: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_evaluation_whose_server_was_killed_reads_interrupted_after_a_restart() {
    let dir = workspace(Some(SHADOW_CONFIG));
    let root = dir.path();
    std::fs::write(root.join("ws/notes.txt"), "the notes").unwrap_or_default();
    let env = [("CORRAL_IT_SHADOW_CRASH", OLGA)];
    let serve = || serve_with(root, &["--config", "corral.yaml"], &env, Stdio::null());
    let mut first = serve();
    let Ok(client) = Client::new(&first.url, Some(OLGA.to_owned())) else {
        unreachable!("the client builds")
    };
    // Ten recorded tasks, and 20 variants of each: 200 replay runs, far more than run before
    // the kill.
    let mut tasks = Vec::new();
    for i in 0..10 {
        let sc = client
            .sandbox_create_scenario(&of(
                json!({"name": format!("task {i}"), "steps": [{"input": "notes"}]}),
            ))
            .await;
        let Ok(sc) = sc else {
            unreachable!("the scenario is created: {sc:?}")
        };
        let run = client
            .sandbox_run(&sc.id, &of(json!({"variant": "recorded"})))
            .await;
        let Ok(run) = run else {
            unreachable!("the recorded run runs: {run:?}")
        };
        tasks.push(run.id);
    }
    let reader = "name: r\nversion: 1\nsteps:\n  - op: files.read\n    args: {path: \"{{input}}.txt\"}\n    as: s0\noutput: \"{{steps.s0.content}}\"\n";
    let variants: Vec<_> = (0..20)
        .map(|i| json!({"variant": format!("v{i}"), "workflow": reader}))
        .collect();
    let started = client
        .sandbox_start_shadow(&of(
            json!({"tasks": tasks, "variants": variants, "expected_runs": 200}),
        ))
        .await;
    let Ok(started) = started else {
        unreachable!("the shadow evaluation starts: {started:?}")
    };
    // Killed once its first run finished, while it is still running.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = client.sandbox_shadow(&started.id).await;
        let Ok(s) = s else {
            unreachable!("the evaluation reads: {s:?}")
        };
        assert_eq!(s.status, "running", "it ended before the kill: {s:?}");
        if s.ran >= 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run finished in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(first.child.kill().is_ok(), "the server could be killed");
    let _ = first.child.wait();

    // The next server finds the dead process's evaluation and marks it: never `running` again.
    let second = serve();
    let Ok(client) = Client::new(&second.url, Some(OLGA.to_owned())) else {
        unreachable!("the client builds")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let shadow = loop {
        let s = client.sandbox_shadow(&started.id).await;
        let Ok(s) = s else {
            unreachable!("the evaluation reads: {s:?}")
        };
        if s.status != "running" || tokio::time::Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(shadow.status, "interrupted", "{shadow:?}");
    assert!(shadow.ran >= 1 && shadow.ran < 200, "{shadow:?}");
    // No lab run of the dead process is left running either.
    let runs = client
        .sandbox_list_runs(
            None,
            &corral_client::sandbox::PageRequest {
                limit: Some(500),
                after: None,
            },
        )
        .await;
    let Ok(runs) = runs else {
        unreachable!("the runs list: {runs:?}")
    };
    for r in &runs.items {
        assert_ne!(r.status, "running", "{r:?}");
    }
}
