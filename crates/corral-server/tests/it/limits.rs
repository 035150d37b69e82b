//! Limits through the API (rate, size), and open mode's bounds at start-up.

use std::net::SocketAddr;
use std::time::Duration;

use corral_server::serve::ServeError;
use corral_server::{ServeOptions, serve};
use serde_json::json;

use crate::common::{ADMIN_TOKEN, AGENT_TOKEN, Server, TOKENS_YAML, Workspace, send, token_env};

/// A config with the two tokens and `rules` (no preset).
fn rules_yaml(ws: &Workspace, rules: &str) -> String {
    format!(
        "version: 1\nstate_dir: {}\n{TOKENS_YAML}rules:\n{rules}",
        ws.state.display()
    )
}

#[tokio::test]
async fn the_third_call_under_a_rate_of_two_per_minute_is_429_with_retry_after() {
    let ws = Workspace::new();
    ws.write("notes.txt", "hello");
    let yaml = rules_yaml(
        &ws,
        &format!(
            "  - allow: [files.read]
    paths: [{}]
    limits: {{rate: 2/min}}
",
            ws.root.display()
        ),
    );
    let s = Server::start(&ws.load(&yaml, &token_env()))
        .await
        .with_token(AGENT_TOKEN);
    let args = json!({"path": ws.at("notes.txt")});
    for _ in 0..2 {
        s.call("files.read", args.clone()).await.ok();
    }
    let r = s.call("files.read", args.clone()).await;
    r.assert_error(429, "limit.rate");
    let retry: u64 = r
        .headers
        .get("retry-after")
        .expect("a Retry-After header")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "Retry-After: {retry}");
    assert!(!r.text.contains("hello"), "{}", r.text);
    // Still limited right after; another principal has its own budget.
    s.call("files.read", args.clone())
        .await
        .assert_error(429, "limit.rate");
    s.call_as(ADMIN_TOKEN, "files.read", args).await.ok();
    // Every one of them was audited, the limited ones as `limited`.
    let events = s.store.audit_recent(None, 100).await.unwrap();
    assert_eq!(events.len(), 5);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.outcome.as_str() == "limited" && e.status == 429)
            .count(),
        2
    );
}

#[tokio::test]
async fn a_file_over_the_rules_max_bytes_is_413() {
    let ws = Workspace::new();
    ws.write("ten.txt", "0123456789");
    ws.write("eleven.txt", "0123456789A");
    let yaml = rules_yaml(
        &ws,
        &format!(
            "  - allow: [files.read, files.download, files.write]
    paths: [{}]
    limits: {{max_bytes: 10B}}
    confirm: never
",
            ws.root.display()
        ),
    );
    let s = Server::start(&ws.load(&yaml, &token_env()))
        .await
        .with_token(AGENT_TOKEN);
    let read = s
        .call("files.read", json!({"path": ws.at("ten.txt")}))
        .await
        .ok();
    assert_eq!(read["content"], "0123456789");
    for op in ["files.read", "files.download"] {
        let r = s.call(op, json!({"path": ws.at("eleven.txt")})).await;
        r.assert_error(413, "limit.too_large");
        assert!(!r.text.contains("0123456789A"), "{}", r.text);
    }
    let w = s
        .call(
            "files.write",
            json!({"path": ws.at("new.txt"), "content": "0123456789A"}),
        )
        .await;
    w.assert_error(413, "limit.too_large");
    assert!(!ws.root.join("new.txt").exists());
}

fn open_yaml(ws: &Workspace, preset: &str) -> String {
    format!(
        "version: 1\nstate_dir: {}\npreset: {preset}\n",
        ws.state.display()
    )
}

fn options(ws: &Workspace, preset: &str, listen: SocketAddr, allow_open: bool) -> ServeOptions {
    ServeOptions {
        loaded: ws.load(&open_yaml(ws, preset), &[]),
        config_path: None,
        listen,
        allow_open,
        max_body_bytes: 1 << 20,
        learning: None,
    }
}

fn commands_only(ws: &Workspace) -> String {
    format!(
        "{{name: commands_only, root: {}, commands: [\"echo {{word}}\"]}}",
        ws.root.display()
    )
}

fn files_readonly(ws: &Workspace) -> String {
    format!("{{name: files_readonly, root: {}}}", ws.root.display())
}

/// A port that was free a moment ago.
fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[track_caller]
fn assert_open_mode_refused(r: Result<(), ServeError>, mentions: &str) {
    match r {
        Err(e @ ServeError::OpenMode(_)) => {
            assert_eq!(e.code(), "config.open_mode_refused");
            let msg = e.to_string();
            assert!(msg.contains(mentions), "{msg}");
            assert!(
                msg.contains("auth.tokens"),
                "the message says what to change: {msg}"
            );
        }
        other => panic!("expected an open-mode refusal, got {other:?}"),
    }
}

/// Runs `serve(opts)` until `/healthz` answers and `then` has run against the address, then
/// drops (cancels) it. `serve`'s future is not `Send` (sqlx), so it runs in this task, next to
/// the checks, rather than in a spawned one.
async fn while_serving<F, Fut>(opts: ServeOptions, then: F)
where
    F: FnOnce(SocketAddr, serde_json::Value) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let addr = opts.listen;
    let serving = serve(opts);
    tokio::pin!(serving);
    let check = async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        for _ in 0..200 {
            if let Ok(r) = client.get(format!("http://{addr}/healthz")).send().await {
                let health: serde_json::Value = r.json().await.unwrap();
                then(addr, health).await;
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("serve did not answer on {addr}");
    };
    tokio::select! {
        r = &mut serving => panic!("serve stopped: {r:?}"),
        () = check => {}
    }
}

#[tokio::test]
async fn open_mode_with_an_exec_op_on_loopback_is_refused() {
    let ws = Workspace::new();
    let r = serve(options(
        &ws,
        &commands_only(&ws),
        "127.0.0.1:0".parse().unwrap(),
        false,
    ))
    .await;
    assert_open_mode_refused(r, "`commands.run`");
}

#[tokio::test]
async fn open_mode_on_a_non_loopback_address_is_refused() {
    let ws = Workspace::new();
    let r = serve(options(
        &ws,
        &files_readonly(&ws),
        "0.0.0.0:0".parse().unwrap(),
        false,
    ))
    .await;
    assert_open_mode_refused(r, "0.0.0.0");
    let r = serve(options(
        &ws,
        &commands_only(&ws),
        "0.0.0.0:0".parse().unwrap(),
        false,
    ))
    .await;
    assert_open_mode_refused(r, "0.0.0.0");
}

#[tokio::test]
async fn open_mode_with_read_only_ops_on_loopback_starts() {
    let ws = Workspace::new();
    ws.write("notes.txt", "hello");
    let opts = options(&ws, &files_readonly(&ws), free_port(), false);
    let path = ws.at("notes.txt");
    while_serving(opts, |addr, health| async move {
        assert_eq!(health["mode"], "open");
        let r = send(
            reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap()
                .post(format!("http://{addr}/ops/files.read"))
                .json(&json!({"path": path})),
        )
        .await;
        assert_eq!(r.ok()["content"], "hello");
    })
    .await;
}

#[tokio::test]
async fn allow_open_starts_what_open_mode_would_refuse() {
    let ws = Workspace::new();
    let opts = options(&ws, &commands_only(&ws), free_port(), true);
    while_serving(opts, |_, health| async move {
        assert_eq!(health["mode"], "open");
    })
    .await;
}
