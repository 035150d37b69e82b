//! The client against a real corral server, started in-process on `127.0.0.1:0` with a config
//! written to a temporary directory (policy, tokens, SQLite audit: the full guard chain).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::PathBuf;

use corral_client::{Client, ClientError};
use serde_json::json;

const AGENT_TOKEN: &str = "agent-secret-0123456789abcdef";
const READER_TOKEN: &str = "reader-secret-0123456789abcdef";

/// A server running in this test's runtime; dropped with the test.
struct Server {
    base: String,
    ws: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts a server over a workspace_jail config; with `auth`, two static tokens.
async fn start(auth: bool) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello corral\n").unwrap();
    std::fs::write(ws.join(".env"), "SECRET=1\n").unwrap();
    let mut text = format!(
        "version: 1\npreset: workspace_jail\nroot: {ws}\nstate_dir: {state}\n",
        ws = serde_json::to_string(&ws.to_string_lossy()).unwrap(),
        state = serde_json::to_string(&dir.path().join("state").to_string_lossy()).unwrap(),
    );
    let mut env = HashMap::new();
    if auth {
        text.push_str(concat!(
            "rules:\n",
            "  - deny: [files.write, files.delete]\n",
            "    principals: [id:reader]\n",
            "    reason: readers do not write\n",
            "auth:\n",
            "  tokens:\n",
            "    - {id: agent, roles: [agent], token_env: T_AGENT}\n",
            "    - {id: reader, token_env: T_READER}\n",
        ));
        env.insert("T_AGENT".to_owned(), AGENT_TOKEN.to_owned());
        env.insert("T_READER".to_owned(), READER_TOKEN.to_owned());
    }
    let loaded = match corral_config::load_str("corral.yaml", &text, dir.path(), &env) {
        Ok(l) => l,
        Err(e) => panic!("config does not load:\n{}", e.render()),
    };
    let (state, _store) = corral_server::serve::build_state(&loaded, 1 << 20)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, corral_server::app(state)).await;
    });
    Server {
        base: format!("http://{addr}"),
        ws,
        _dir: dir,
    }
}

fn client(s: &Server, token: Option<&str>) -> Client {
    Client::new(&s.base, token.map(str::to_owned)).unwrap()
}

fn api_code(e: &ClientError) -> (u16, &str) {
    match e {
        ClientError::Api { status, code, .. } => (*status, code.as_str()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn lists_and_reads_with_a_token() {
    let s = start(true).await;
    let c = client(&s, Some(AGENT_TOKEN));

    let listing = c.call("files.list", json!({"path": "."})).await.unwrap();
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(names.contains(&"notes.txt"), "{listing}");
    assert!(names.contains(&"sub"), "{listing}");

    let read = c
        .call("files.read", json!({"path": "notes.txt"}))
        .await
        .unwrap();
    assert_eq!(read["content"], "hello corral\n", "{read}");

    let abs = s.ws.join("notes.txt");
    let read = c
        .call("files.read", json!({"path": abs.to_string_lossy()}))
        .await
        .unwrap();
    assert_eq!(read["content"], "hello corral\n", "{read}");
}

#[tokio::test]
async fn call_reply_carries_the_envelope() {
    let s = start(true).await;
    let c = client(&s, Some(AGENT_TOKEN));
    match c.call_reply("core.health", json!({})).await.unwrap() {
        corral_client::Reply::Json {
            op,
            request_id,
            result,
            replayed,
        } => {
            assert!(!replayed, "a call that ran is not marked replayed");
            assert_eq!(op, "core.health");
            assert!(!request_id.is_empty());
            assert_eq!(result["status"], "ok");
        }
        other => panic!("expected JSON, got {other:?}"),
    }
}

#[tokio::test]
async fn download_returns_the_bytes() {
    let s = start(true).await;
    let c = client(&s, Some(AGENT_TOKEN));
    let bytes = c
        .download("files.download", json!({"path": "notes.txt"}))
        .await
        .unwrap();
    assert_eq!(bytes, b"hello corral\n");
    // `call` refuses a stream rather than pretending it is JSON.
    let e = c
        .call("files.download", json!({"path": "notes.txt"}))
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Protocol { .. }), "{e:?}");
}

#[tokio::test]
async fn a_denied_call_is_a_403_with_a_policy_code() {
    let s = start(true).await;
    let c = client(&s, Some(AGENT_TOKEN));

    let e = c
        .call("files.read", json!({"path": "/etc/passwd"}))
        .await
        .unwrap_err();
    let (status, code) = api_code(&e);
    assert_eq!(status, 403, "{e:?}");
    assert!(code.starts_with("policy."), "{e:?}");
    match &e {
        ClientError::Api {
            message,
            request_id,
            retry_after,
            ..
        } => {
            assert!(!message.is_empty());
            assert!(request_id.as_deref().is_some_and(|r| !r.is_empty()));
            assert_eq!(*retry_after, None);
        }
        _ => unreachable!(),
    }
    assert_eq!(e.kind(), Some("policy"));
    assert_eq!(e.status(), Some(403));

    let e = c
        .call("files.read", json!({"path": ".env"}))
        .await
        .unwrap_err();
    let (status, code) = api_code(&e);
    assert_eq!(status, 403, "{e:?}");
    assert!(code.starts_with("policy."), "{e:?}");

    // A deny rule for one principal only; with no scope it unmounts the op for them, so they
    // get the same 404 as for an op that does not exist.
    let reader = client(&s, Some(READER_TOKEN));
    let e = reader
        .call("files.write", json!({"path": "x.txt", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (404, "op.not_enabled"), "{e:?}");
    assert!(!s.ws.join("x.txt").exists());
}

#[tokio::test]
async fn a_2xx_wire_error_is_an_api_error() {
    // E.g. `202 confirmation.required`: not a result, so not `Ok`.
    use axum::http::StatusCode;
    let app = axum::Router::new().route(
        "/ops/{id}",
        axum::routing::post(|| async {
            (
                StatusCode::ACCEPTED,
                [("x-request-id", "rid-1")],
                axum::Json(json!({
                    "error": "waits for a person to approve this exact call",
                    "type": "confirmation",
                    "code": "confirmation.required",
                    "op": "files.write",
                    "request_id": "rid-1",
                    "action_id": "a-1",
                })),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let c = Client::new(&format!("http://{addr}"), None).unwrap();
    let e = c.call("files.write", json!({})).await.unwrap_err();
    assert_eq!(api_code(&e), (202, "confirmation.required"), "{e:?}");
    assert!(matches!(&e, ClientError::Api { request_id: Some(r), .. } if r == "rid-1"));
}

#[tokio::test]
async fn an_unknown_op_is_a_404_op_not_enabled() {
    let s = start(true).await;
    let c = client(&s, Some(AGENT_TOKEN));
    for op in ["no.such_op", "commands.run"] {
        let e = c.call(op, json!({})).await.unwrap_err();
        assert_eq!(api_code(&e), (404, "op.not_enabled"), "{op}: {e:?}");
    }
    // An id that tries to walk to another route stays inside `/ops/`.
    let e = c.call("../metrics", json!({})).await.unwrap_err();
    assert_eq!(api_code(&e), (404, "op.not_enabled"), "{e:?}");
}

#[tokio::test]
async fn no_token_is_401_auth_missing_and_a_wrong_one_401_auth_invalid() {
    let s = start(true).await;

    let anon = client(&s, None);
    for e in [
        anon.call("files.list", json!({"path": "."}))
            .await
            .unwrap_err(),
        anon.ops().await.unwrap_err(),
        anon.me().await.map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(api_code(&e), (401, "auth.missing"), "{e:?}");
    }

    let wrong = client(&s, Some("not-the-token-0123456789"));
    for e in [
        wrong
            .call("files.list", json!({"path": "."}))
            .await
            .unwrap_err(),
        wrong.capabilities().await.map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(api_code(&e), (401, "auth.invalid"), "{e:?}");
    }

    // /healthz needs no token.
    let h = anon.healthz().await.unwrap();
    assert_eq!(h.status, "ok");
    assert_eq!(h.mode, "auth");
}

#[tokio::test]
async fn listings_me_and_capabilities_are_typed() {
    let s = start(true).await;
    let c = client(&s, Some(AGENT_TOKEN));

    let ops = c.ops().await.unwrap();
    let ids: Vec<&str> = ops.iter().map(|o| o.id.as_str()).collect();
    assert!(ids.contains(&"files.read"), "{ids:?}");
    assert!(ids.contains(&"core.health"), "{ids:?}");
    let read = ops.iter().find(|o| o.id == "files.read").unwrap();
    assert!(read.params.iter().any(|p| p.name == "path" && p.required));

    let me = c.me().await.unwrap();
    assert_eq!(me.id, "agent");
    assert_eq!(me.roles, vec!["agent".to_owned()]);
    assert!(me.authenticated);

    let caps = c.capabilities().await.unwrap();
    assert_eq!(caps.principal, "agent");
    assert!(caps.ops.iter().any(|o| o.op.id == "files.list"));
}

#[tokio::test]
async fn open_mode_needs_no_token() {
    let s = start(false).await;
    let c = client(&s, None);
    assert_eq!(c.healthz().await.unwrap().mode, "open");
    assert_eq!(c.me().await.unwrap().id, "anonymous");
    let listing = c.call("files.list", json!({"path": "."})).await.unwrap();
    assert!(listing["entries"].as_array().is_some_and(|a| !a.is_empty()));
}

#[tokio::test]
async fn nothing_listening_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let c = Client::new(&format!("http://{addr}"), None).unwrap();
    let e = c.healthz().await.unwrap_err();
    assert!(matches!(e, ClientError::Transport { .. }), "{e:?}");
}
