//! The route table: every route but `/healthz` and `/llms.txt` authenticates first; credentials are read from
//! headers only; unknown and not-allowed ops look the same.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{ADMIN_TOKEN, AGENT_TOKEN, Reply, Server, Workspace, send};

/// The jail, plus `http.fetch` mounted for role `admin` only.
async fn server(ws: &Workspace) -> Server {
    ws.write("notes.txt", "hello");
    let yaml = ws.jail_yaml(
        "rules:
  - allow: [http.fetch]
    principals: [role:admin]
    urls: {hosts: [example.com]}
",
    );
    Server::start(&ws.load(&yaml, &crate::common::token_env())).await
}

/// Every route of the table, and some that are not in it.
fn route_table(ws: &Workspace) -> Vec<(Method, &'static str, Option<Value>)> {
    let read = json!({"path": ws.at("notes.txt")});
    vec![
        (Method::POST, "/ops/core.health", None),
        (Method::POST, "/ops/files.read", Some(read)),
        (Method::POST, "/ops/nope", Some(json!({}))),
        (Method::GET, "/ops", None),
        (Method::GET, "/capabilities", None),
        (Method::GET, "/me", None),
        (Method::GET, "/audit", None),
        (Method::GET, "/metrics", None),
        (Method::GET, "/openapi.json", None),
        (Method::GET, "/v1/sandbox/scenarios", None),
        (
            Method::POST,
            "/v1/sandbox/scenarios/s1/runs",
            Some(json!({"variant": "v"})),
        ),
        (
            Method::POST,
            "/mcp",
            Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        ),
        (Method::GET, "/random", None),
        (Method::PUT, "/ops/x", None),
        (Method::GET, "/ops/files.read", None),
        (Method::POST, "/healthz", None),
        (Method::DELETE, "/me", None),
    ]
}

async fn request(s: &Server, method: Method, path: &str, body: Option<&Value>) -> Reply {
    let mut rb = s.client().request(method, s.url(path));
    if let Some(b) = body {
        rb = rb.json(b);
    }
    send(rb).await
}

#[tokio::test]
async fn every_route_but_healthz_refuses_a_request_without_credentials() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    for (method, path, body) in route_table(&ws) {
        let r = request(&s, method.clone(), path, body.as_ref()).await;
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
        if path == "/mcp" {
            // For MCP clients, corral's error travels as a JSON-RPC error's data.
            assert_eq!(
                r.json()["error"]["data"]["code"],
                "auth.missing",
                "{}",
                r.text
            );
        } else {
            r.assert_error(401, "auth.missing");
        }
        assert_eq!(
            r.headers
                .get("www-authenticate")
                .and_then(|h| h.to_str().ok()),
            Some("Bearer"),
            "{method} {path}"
        );
    }
    let health = s.get("/healthz").await;
    assert_eq!(health.status, 200, "{}", health.text);
    assert_eq!(health.json()["mode"], "auth");
}

/// `GET /llms.txt`: the reference card as the binary carries it, without credentials (it is
/// the product's documentation, nothing of the deployment), as plain text.
#[tokio::test]
async fn llms_txt_serves_the_reference_card_without_credentials() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let r = send(s.client().get(s.url("/llms.txt"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.headers.get("content-type").and_then(|h| h.to_str().ok()),
        Some("text/plain; charset=utf-8")
    );
    let card = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/REFERENCE.md"),
    )
    .unwrap_or_default();
    assert!(card.starts_with("# corral reference card"), "{card}");
    assert_eq!(r.text, card);
}

#[tokio::test]
async fn the_same_routes_answer_past_authentication_with_a_token() {
    let ws = Workspace::new();
    let s = server(&ws).await.with_token(AGENT_TOKEN);
    for (method, path, body) in route_table(&ws) {
        let r = send(
            s.client()
                .request(method.clone(), s.url(path))
                .bearer_auth(AGENT_TOKEN)
                .json(body.as_ref().unwrap_or(&json!({}))),
        )
        .await;
        assert_ne!(r.status, 401, "{method} {path}: {}", r.text);
    }
    assert_eq!(s.get("/me").await.json()["id"], "agent");
    s.get("/random").await.assert_error(404, "route.not_found");
    send(s.client().put(s.url("/ops/x")).bearer_auth(AGENT_TOKEN))
        .await
        .assert_error(405, "route.method_not_allowed");
    let read = s
        .call("files.read", json!({"path": ws.at("notes.txt")}))
        .await
        .ok();
    assert_eq!(read["content"], "hello");
}

#[tokio::test]
async fn authorization_and_x_access_token_with_different_values_conflict() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    for path in ["/me", "/ops"] {
        let r = send(
            s.client()
                .get(s.url(path))
                .bearer_auth(AGENT_TOKEN)
                .header("x-access-token", ADMIN_TOKEN),
        )
        .await;
        r.assert_error(401, "auth.conflicting_credentials");
    }
    // Even when one of them is not a token at all.
    let r = send(
        s.client()
            .post(s.url("/ops/files.read"))
            .bearer_auth(AGENT_TOKEN)
            .header("x-access-token", "whatever")
            .json(&json!({"path": ws.at("notes.txt")})),
    )
    .await;
    r.assert_error(401, "auth.conflicting_credentials");

    // The same value twice is one credential; X-Access-Token alone is accepted.
    let same = send(
        s.client()
            .get(s.url("/me"))
            .bearer_auth(AGENT_TOKEN)
            .header("x-access-token", AGENT_TOKEN),
    )
    .await;
    assert_eq!(
        (same.status, same.json()["id"].clone()),
        (200, json!("agent"))
    );
    let legacy = send(
        s.client()
            .get(s.url("/me"))
            .header("x-access-token", ADMIN_TOKEN),
    )
    .await;
    assert_eq!(
        (legacy.status, legacy.json()["id"].clone()),
        (200, json!("admin"))
    );
}

#[tokio::test]
async fn a_token_in_the_query_string_is_not_accepted() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    for name in ["token", "access_token"] {
        let r = send(s.client().get(s.url(&format!("/me?{name}={AGENT_TOKEN}")))).await;
        r.assert_error(401, "auth.missing");
        let r = send(
            s.client()
                .post(s.url(&format!("/ops/files.read?{name}={AGENT_TOKEN}")))
                .json(&json!({"path": ws.at("notes.txt")})),
        )
        .await;
        r.assert_error(401, "auth.missing");
        assert!(!r.text.contains("hello"), "{}", r.text);
    }
}

#[tokio::test]
async fn a_wrong_token_or_a_malformed_authorization_header_is_invalid() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    for auth in [
        "Bearer not-a-configured-token-xyz",
        "Basic YWdlbnQ6cGFzcw==",
        "Bearer ",
        AGENT_TOKEN,
    ] {
        let r = send(s.client().get(s.url("/me")).header("authorization", auth)).await;
        r.assert_error(401, "auth.invalid");
    }
}

/// The body with the request id removed and the echoed op id replaced.
fn normalized(r: &Reply, op: &str) -> Value {
    let text = r.text.replace(op, "<op>");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("request_id");
    v
}

#[tokio::test]
async fn an_unknown_op_and_a_not_allowed_op_get_the_same_404() {
    let ws = Workspace::new();
    let s = server(&ws).await.with_token(AGENT_TOKEN);
    // `http.fetch` exists and is mounted for role:admin only; `http.fetcx` does not exist;
    // `commands.run` exists and is mounted for nobody. Same length, so the bodies are too.
    let cases = [
        (
            "http.fetch",
            "http.fetcx",
            json!({"url": "https://example.com/"}),
        ),
        ("commands.run", "commands.rum", json!({"argv": ["true"]})),
        // Arguments are not even looked at before the op is resolved.
        ("http.fetch", "http.fetcx", json!({"bogus": 1})),
        ("commands.run", "commands.rum", json!([1, 2, 3])),
    ];
    for (real, unknown, args) in cases {
        let a = s.call(real, args.clone()).await;
        let b = s.call(unknown, args).await;
        a.assert_error(404, "op.not_enabled");
        b.assert_error(404, "op.not_enabled");
        assert_eq!(
            normalized(&a, real),
            normalized(&b, unknown),
            "{real} vs {unknown}"
        );
        assert_ne!(a.json()["request_id"], b.json()["request_id"]);
        assert_eq!(a.text.len(), b.text.len(), "{} vs {}", a.text, b.text);
        let mut ha: Vec<_> = a
            .headers
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "x-request-id" | "date"))
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let mut hb: Vec<_> = b
            .headers
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "x-request-id" | "date"))
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        ha.sort();
        hb.sort();
        assert_eq!(ha, hb, "headers of {real} vs {unknown}");
    }
    // The op is mounted for the admin: it is the caller that makes the difference.
    let admin = s
        .call_as(ADMIN_TOKEN, "http.fetch", json!({"bogus": 1}))
        .await;
    admin.assert_error(400, "args.unknown");
}

#[tokio::test]
async fn a_request_without_credentials_is_audited_under_its_routes_name() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let read = json!({"path": ws.at("notes.txt")});
    let cases = [
        (Method::POST, "/ops/files.read", Some(read), "files.read"),
        (Method::GET, "/ops", None, "GET /ops"),
        (Method::GET, "/capabilities", None, "GET /capabilities"),
        (Method::GET, "/me", None, "GET /me"),
        (Method::GET, "/audit", None, "GET /audit"),
        (Method::GET, "/metrics", None, "GET /metrics"),
        (Method::GET, "/openapi.json", None, "GET /openapi.json"),
        (Method::GET, "/confirmations", None, "GET /confirmations"),
        (
            Method::POST,
            "/confirmations/act_0/decision",
            Some(json!({"decision": "approve"})),
            "POST /confirmations",
        ),
        (
            Method::POST,
            "/mcp",
            Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
            "/mcp",
        ),
        (
            Method::POST,
            "/v1/sandbox/synthetic-data",
            Some(json!({})),
            "/v1/sandbox",
        ),
        (Method::GET, "/random", None, "unknown route"),
        (Method::DELETE, "/me", None, "wrong method"),
    ];
    for (method, path, body, audited_as) in cases {
        let r = request(&s, method.clone(), path, body.as_ref()).await;
        // `/mcp` answers a JSON-RPC error whose data is corral's error.
        let error = if path == "/mcp" {
            r.json()["error"]["data"].clone()
        } else {
            r.assert_error(401, "auth.missing");
            r.json()
        };
        assert_eq!(
            (r.status, error["code"].clone()),
            (401, json!("auth.missing"))
        );
        let rid = error["request_id"].as_str().unwrap().to_owned();
        let events = s.store.audit_recent(None, u32::MAX).await.unwrap();
        let event = events.iter().find(|e| e.request_id == rid).unwrap();
        assert_eq!(event.outcome.as_str(), "unauthenticated", "{method} {path}");
        assert_eq!(event.op, audited_as, "{method} {path}");
        assert_eq!(event.status, 401, "{method} {path}");
    }
}

#[tokio::test]
async fn a_path_or_query_that_does_not_decode_is_refused_for_credentials_first_and_audited() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let cases = [
        (Method::POST, "/ops/%FF%FE", Some(json!({}))),
        (Method::POST, "/ops/files.read%00", Some(json!({}))),
        (
            Method::POST,
            "/confirmations/%FF/decision",
            Some(json!({"decision": "approve"})),
        ),
        (Method::GET, "/audit?%FF=%FE&limit=%FF", None),
        (Method::GET, "/audit?limit=1&limit=2&=&&x", None),
        (Method::GET, "/confirmations?after=%FF&%zz", None),
    ];
    for (method, path, body) in cases {
        let r = request(&s, method.clone(), path, body.as_ref()).await;
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
        r.assert_error(401, "auth.missing");
        let rid = r.json()["request_id"].as_str().unwrap().to_owned();
        let events = s.store.audit_recent(None, u32::MAX).await.unwrap();
        let event = events.iter().find(|e| e.request_id == rid);
        assert!(event.is_some(), "{method} {path}: not audited");
    }
    // Past authentication, such a path is answered in corral's error shape, with a code.
    let post = |path: &str, body: Value| {
        s.client()
            .post(s.url(path))
            .bearer_auth(AGENT_TOKEN)
            .json(&body)
    };
    send(post("/ops/%FF%FE", json!({})))
        .await
        .assert_error(400, "op.invalid_id");
    let decide = json!({"decision": "approve"});
    send(post("/confirmations/%FF/decision", decide))
        .await
        .assert_error(404, "confirmation.not_found");
}

/// `/openapi.json` describes every route of the server (those of the table above, the agents
/// routes under `/agents/{adapter}` too), has `servers`, a 401 on every operation that needs a
/// token, and required bodies; the LLM proxy's routes only with a provider.
#[tokio::test]
async fn the_openapi_document_describes_every_route_with_its_401_and_required_bodies() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let r = send(
        s.client()
            .get(s.url("/openapi.json"))
            .bearer_auth(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let doc = r.json();
    assert!(doc["servers"][0]["url"].is_string(), "{doc}");
    for (method, path) in [
        ("get", "/healthz"),
        ("get", "/llms.txt"),
        ("get", "/ops"),
        ("post", "/ops/core.health"),
        ("get", "/capabilities"),
        ("get", "/me"),
        ("get", "/audit"),
        ("get", "/metrics"),
        ("get", "/openapi.json"),
        ("post", "/mcp"),
        ("get", "/confirmations"),
        ("post", "/confirmations/{action_id}/decision"),
        ("get", "/v1/sandbox/scenarios"),
        ("post", "/v1/sandbox/tournaments"),
        ("post", "/v1/agents"),
    ] {
        assert!(
            doc["paths"][path][method]["operationId"].is_string(),
            "{method} {path} is not documented"
        );
    }
    assert!(
        doc["paths"].get("/v1/chat/completions").is_none(),
        "no provider: the LLM proxy's routes answer 503 and are not listed"
    );
    assert!(
        doc["paths"].get("/v1/agents/sessions").is_none(),
        "no adapter mounted: no session can start, and the sessions' routes are not listed"
    );
    // `/mcp` is stateless: GET and DELETE answer 405 (with `Allow: POST`), so only POST is
    // listed; its 401 is a JSON-RPC error.
    assert_eq!(doc["paths"]["/mcp"].as_object().map(|m| m.len()), Some(1));
    assert_eq!(
        doc["paths"]["/mcp"]["post"]["responses"]["401"]["content"]["application/json"]["schema"]["required"],
        serde_json::json!(["jsonrpc", "error"])
    );
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let open = op["security"].as_array().is_some_and(Vec::is_empty);
            assert!(
                open || op["responses"]["401"].is_object(),
                "{method} {path} has no 401"
            );
            if let Some(body) = op.get("requestBody") {
                assert_eq!(body["required"], true, "{method} {path}");
            }
        }
    }
    let run = &doc["paths"]["/ops/core.health"]["post"]["parameters"][0];
    assert_eq!(run["name"], "X-Corral-Run");
    assert_eq!(run["schema"]["pattern"], "^[A-Za-z0-9_.:-]{1,128}$");
}

/// What `/openapi.json` states holds on the wire: a body is required (an empty one is `400
/// args.malformed` on the ops, the lab and the agents alike), `limit` has its range, an empty
/// `after` is the first page, and a `run` filter has the header's pattern.
#[tokio::test]
async fn bodies_are_required_and_the_documented_ranges_and_patterns_hold() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    for path in [
        "/ops/core.health",
        "/v1/sandbox/synthetic-data",
        "/v1/agents",
    ] {
        let r = send(
            s.client()
                .post(s.url(path))
                .bearer_auth(ADMIN_TOKEN)
                .header("content-type", "application/json"),
        )
        .await;
        r.assert_error(400, "args.malformed");
        assert!(
            r.text.contains("empty") || r.text.contains("no body"),
            "{path}: {}",
            r.text
        );
    }
    for path in [
        "/v1/agents?limit=0",
        "/v1/agents?limit=101",
        "/v1/sandbox/scenarios?limit=0",
    ] {
        let r = send(s.client().get(s.url(path)).bearer_auth(ADMIN_TOKEN)).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text);
    }
    for path in [
        "/confirmations?after=",
        "/v1/sandbox/scenarios?after=",
        "/v1/agents?after=",
    ] {
        let r = send(s.client().get(s.url(path)).bearer_auth(ADMIN_TOKEN)).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
    }
    let long_run = format!("/audit?run={}", "r".repeat(129));
    for path in [
        "/audit?run=a%20b",
        long_run.as_str(),
        "/confirmations?after=1.a.b",
    ] {
        let r = send(s.client().get(s.url(path)).bearer_auth(ADMIN_TOKEN)).await;
        r.assert_error(400, "args.invalid");
    }
    // 75.0 is the integer 75, as JSON Schema's `integer` says.
    let r = send(
        s.client()
            .post(s.url("/v1/sandbox/synthetic-data"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"count": 3.0})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["samples"].as_array().map(Vec::len), Some(3));
}
