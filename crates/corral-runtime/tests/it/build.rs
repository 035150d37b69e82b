//! `Runtime::build` with each set of options: what it starts, what its gateway answers, and a
//! reload.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use corral_config::Loaded;
use corral_guard::{Call, Caller, Reply};
use corral_policy::Principal;
use corral_runtime::{BackgroundTask, Runtime, RuntimeError, RuntimeOptions};
use serde_json::json;

/// A workspace jail over `dir/ws` with one upstream server (`notes`, which is `/bin/true`: it
/// never lists a tool), run by the `process` backend; `extra` is appended.
fn config(dir: &Path, extra: &str) -> String {
    format!(
        r#"version: 1
preset: workspace_jail
root: {ws}
state_dir: .corral
isolation: {{backend: process}}
mcp_servers:
  notes:
    command: [/bin/true]
    tools:
      lookup: {{effects: [read]}}
rules:
  - allow: [mcp.notes.lookup]
{extra}"#,
        ws = dir.join("ws").display()
    )
}

fn load(dir: &Path, text: &str) -> Loaded {
    let env: HashMap<String, String> =
        HashMap::from([("RT_TOKEN".to_owned(), "a-long-enough-secret-123".to_owned())]);
    corral_config::load_str("corral.yaml", text, dir, &env)
        .unwrap_or_else(|e| panic!("{}", e.render()))
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    std::fs::write(dir.path().join("ws/notes.txt"), "hello\n").unwrap();
    dir
}

async fn call(runtime: &Runtime, op: &str, args: serde_json::Value) -> Reply {
    runtime
        .gateway()
        .call(Call {
            caller: Caller::new(Principal::anonymous()),
            op: op.to_owned(),
            args,
            // The audit table's key: one per call.
            request_id: format!("r-{op}"),
        })
        .await
}

#[tokio::test]
async fn a_one_shot_runtime_starts_no_background_task_and_no_upstream_server() {
    let dir = workspace();
    let loaded = load(dir.path(), &config(dir.path(), ""));
    let runtime = Runtime::build(&loaded, RuntimeOptions::one_shot())
        .await
        .unwrap();
    assert_eq!(runtime.background_tasks(), &[] as &[BackgroundTask]);
    assert!(runtime.upstreams().is_empty());
    // A built-in op answers.
    let notes = dir.path().join("ws/notes.txt");
    let Reply::Json(v) = call(&runtime, "files.read", json!({"path": notes})).await else {
        panic!("files.read is answered")
    };
    assert_eq!(v["content"], "hello\n", "{v}");
    // The upstream tool is in the catalog, and says its server was not started.
    let Reply::Refused(r) = call(&runtime, "mcp.notes.lookup", json!({})).await else {
        panic!("an upstream tool without its server is refused")
    };
    assert_eq!(r.code, "upstream.unavailable", "{}", r.message);
    assert!(r.message.contains("did not start"), "{}", r.message);
    runtime.close().await;
}

#[tokio::test]
async fn a_long_lived_runtime_starts_the_upstreams_their_refresher_and_the_confirmation_and_recording_purgers()
 {
    let dir = workspace();
    let loaded = load(dir.path(), &config(dir.path(), ""));
    let options = RuntimeOptions {
        upstream_wait: Duration::ZERO,
        ..RuntimeOptions::long_lived()
    };
    let runtime = Runtime::build(&loaded, options).await.unwrap();
    // No run purger: with SQLite, runs are metered in memory.
    assert_eq!(
        runtime.background_tasks(),
        &[
            BackgroundTask::UpstreamSupervisors,
            BackgroundTask::ConfirmationPurger,
            BackgroundTask::RecordingPurger,
            BackgroundTask::UpstreamRefresher,
        ]
    );
    assert!(runtime.upstreams().spec("notes").is_some());
    runtime.close().await;
}

#[tokio::test]
async fn a_one_shot_runtime_for_an_upstream_tool_starts_its_server_and_nothing_else() {
    let dir = workspace();
    let loaded = load(dir.path(), &config(dir.path(), ""));
    let options = RuntimeOptions {
        upstream_wait: Duration::ZERO,
        ..RuntimeOptions::one_shot().with_upstreams()
    };
    let runtime = Runtime::build(&loaded, options).await.unwrap();
    assert_eq!(
        runtime.background_tasks(),
        &[
            BackgroundTask::UpstreamSupervisors,
            BackgroundTask::UpstreamRefresher
        ]
    );
    runtime.close().await;
}

#[tokio::test]
async fn a_reload_swaps_the_authenticator_and_refuses_to_move_the_state_directory() {
    let dir = workspace();
    let text = config(dir.path(), "");
    let runtime = Runtime::build(&load(dir.path(), &text), RuntimeOptions::one_shot())
        .await
        .unwrap();
    assert!(runtime.authenticator().is_open());

    let with_token = config(
        dir.path(),
        "auth:\n  tokens:\n    - {id: agent, roles: [operator], token_env: RT_TOKEN}\n",
    );
    let loaded = load(dir.path(), &with_token);
    let auth = corral_runtime::compose::authenticator(&loaded).unwrap();
    runtime.reload(&loaded, auth).await.unwrap();
    assert!(!runtime.authenticator().is_open());
    let caller = runtime
        .authenticator()
        .authenticate_token(Some("a-long-enough-secret-123"))
        .unwrap();
    assert_eq!(caller.principal.id, "agent");

    let moved = load(
        dir.path(),
        &text.replace("state_dir: .corral", "state_dir: .corral2"),
    );
    let auth = corral_runtime::compose::authenticator(&moved).unwrap();
    let refused = runtime.reload(&moved, auth).await;
    assert!(
        matches!(refused, Err(RuntimeError::StateDirChanged)),
        "{refused:?}"
    );
    // The refused reload changed nothing: the token still authenticates.
    assert!(!runtime.authenticator().is_open());
    runtime.close().await;
}

#[tokio::test]
async fn a_reload_turns_the_lab_off_and_on_and_its_scenarios_are_still_there() {
    let dir = workspace();
    let on = config(dir.path(), "");
    let runtime = Runtime::build(&load(dir.path(), &on), RuntimeOptions::one_shot())
        .await
        .unwrap();
    let lab = runtime.lab().clone();
    let caller = Caller::new(Principal::new("olga", &["operator"]));
    let body = corral_lab::service::ScenarioBody {
        name: "kept".to_owned(),
        steps: Some(json!([{"input": "a"}])),
        ..Default::default()
    };
    let created = lab.create_scenario(&caller, "rid-1", body).await.unwrap();

    let off = load(dir.path(), &format!("{on}sandbox: {{enabled: false}}\n"));
    let auth = corral_runtime::compose::authenticator(&off).unwrap();
    runtime.reload(&off, auth).await.unwrap();
    let refused = lab.get_scenario(&caller, "rid-2", &created.id).await;
    assert_eq!(refused.unwrap_err().code, "lab.disabled");

    let back = load(dir.path(), &on);
    let auth = corral_runtime::compose::authenticator(&back).unwrap();
    runtime.reload(&back, auth).await.unwrap();
    let got = lab
        .get_scenario(&caller, "rid-3", &created.id)
        .await
        .unwrap();
    assert_eq!(got.name, "kept");
    runtime.close().await;
}

/// corral's SQLite database named by `storage.url` outside the state directory, in a root
/// callers may read: the database is corral's own, and so are its WAL and shared-memory files
/// beside it (the store keeps it in WAL mode), which hold its latest pages (sessions, tokens'
/// hashes, the audit) and which SQLite trusts when it opens the database again.
#[tokio::test]
async fn the_sqlite_databases_wal_beside_it_is_as_protected_as_the_database() {
    let dir = workspace();
    let db = dir.path().join("ws/corral.db");
    let text = format!(
        "version: 1
preset: {{name: workspace_jail, readonly: true}}
root: {ws}
state_dir: .corral
storage: {{url: \"sqlite://{db}\"}}
isolation: {{backend: process}}
",
        ws = dir.path().join("ws").display(),
        db = db.display()
    );
    let loaded = load(dir.path(), &text);
    let runtime = Runtime::build(&loaded, RuntimeOptions::one_shot())
        .await
        .unwrap();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let path = format!("{}{suffix}", db.display());
        let reply = runtime
            .gateway()
            .call(Call {
                caller: Caller::new(Principal::anonymous()),
                op: "files.read".to_owned(),
                args: json!({"path": path}),
                request_id: format!("r-read{suffix}"),
            })
            .await;
        let Reply::Refused(r) = reply else {
            panic!("`{path}` was read: {reply:?}")
        };
        assert_eq!(r.code, "policy.path_denied", "{path}: {}", r.message);
    }
    runtime.close().await;
}
