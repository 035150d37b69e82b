//! `http.fetch` through the API: an allowed host works; loopback, private, link-local and
//! metadata addresses are refused before any connection; so is a redirect to one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::common::{AGENT_TOKEN, Server, Workspace, token_env};

/// A local HTTP server that counts every request it sees.
struct Upstream {
    port: u16,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn upstream_handler(State(hits): State<Arc<AtomicUsize>>, req: Request) -> Response {
    hits.fetch_add(1, Ordering::SeqCst);
    let redirect =
        |to: &str| (StatusCode::FOUND, [(header::LOCATION, to.to_owned())]).into_response();
    match req.uri().path() {
        "/meta" => redirect("http://169.254.169.254/latest/meta-data"),
        "/ten" => redirect("http://10.0.0.1/"),
        "/away" => redirect("http://example.com/"),
        "/self" => redirect("/"),
        "/to-localhost" => {
            let port = req
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.rsplit(':').next())
                .unwrap_or_default()
                .to_owned();
            redirect(&format!("http://localhost:{port}/"))
        }
        _ => "hello from upstream".into_response(),
    }
}

async fn upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .fallback(upstream_handler)
        .with_state(hits.clone());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Upstream { port, hits, task }
}

async fn gateway(ws: &Workspace, rules: &str) -> Server {
    // `http.fetch` is confirm-tier; these tests are about the url checks, so it runs unattended.
    let rules = rules.replace(
        "  - allow: [http.fetch]\n",
        "  - allow: [http.fetch]\n    confirm: never\n",
    );
    let yaml = ws.jail_yaml(&format!("rules:\n{rules}"));
    Server::start(&ws.load(&yaml, &token_env()))
        .await
        .with_token(AGENT_TOKEN)
}

#[tokio::test]
async fn an_allowed_host_is_fetched_when_its_rule_lets_private_addresses_through() {
    let up = upstream().await;
    let ws = Workspace::new();
    let s = gateway(
        &ws,
        &format!(
            "  - allow: [http.fetch]
    urls: {{hosts: [127.0.0.1], schemes: [http], ports: [{}], block_private: false}}
",
            up.port
        ),
    )
    .await;
    let r = s
        .call(
            "http.fetch",
            json!({"url": format!("http://127.0.0.1:{}/", up.port)}),
        )
        .await
        .ok();
    assert_eq!(r["status"], 200);
    assert_eq!(r["body"], "hello from upstream");
    // A redirect that stays in scope is followed.
    let r = s
        .call(
            "http.fetch",
            json!({"url": format!("http://127.0.0.1:{}/self", up.port)}),
        )
        .await
        .ok();
    assert_eq!(r["body"], "hello from upstream");
    assert_eq!(up.hits.load(Ordering::SeqCst), 3);
    // Another port of the same host is not in scope.
    let r = s
        .call(
            "http.fetch",
            json!({"url": format!("http://127.0.0.1:{}/", up.port + 1)}),
        )
        .await;
    r.assert_error(403, "policy.url_not_allowed");
}

#[tokio::test]
async fn internal_addresses_are_refused_by_default_and_never_contacted() {
    let up = upstream().await;
    let ws = Workspace::new();
    // Every host is in scope: only `block_private` (on by default) stands in the way.
    let s = gateway(
        &ws,
        &format!(
            "  - allow: [http.fetch]
    urls:
      hosts: [127.0.0.1, localhost, 10.0.0.1, 169.254.169.254, \"[::1]\", \"[::ffff:127.0.0.1]\", 0.0.0.0]
      schemes: [http]
      ports: [80, {}]
",
            up.port
        ),
    )
    .await;
    let p = up.port;
    for url in [
        format!("http://127.0.0.1:{p}/"),
        "http://10.0.0.1/".to_owned(),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        format!("http://localhost:{p}/"),
        format!("http://LOCALHOST.:{p}/"),
        format!("http://0x7f.1:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://[::1]:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://0.0.0.0:{p}/"),
    ] {
        let r = s.call("http.fetch", json!({"url": url})).await;
        assert_eq!(r.status, 403, "{url}: {}", r.text);
        r.assert_error(403, "policy.private_address");
    }
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        0,
        "the upstream saw a request"
    );
}

#[tokio::test]
async fn a_redirect_to_an_internal_address_is_refused() {
    let up = upstream().await;
    let ws = Workspace::new();
    // The first hop may reach the local upstream; the metadata address and 10.0.0.1 are in a
    // second rule's scope, with private addresses blocked (the default).
    let s = gateway(
        &ws,
        &format!(
            "  - allow: [http.fetch]
    urls: {{hosts: [127.0.0.1], schemes: [http], ports: [{}], block_private: false}}
  - allow: [http.fetch]
    urls: {{hosts: [169.254.169.254, 10.0.0.1], schemes: [http]}}
",
            up.port
        ),
    )
    .await;
    for (path, code) in [
        ("/meta", "policy.private_address"),
        ("/ten", "policy.private_address"),
        ("/away", "policy.url_not_allowed"),
    ] {
        let before = up.hits.load(Ordering::SeqCst);
        let r = s
            .call(
                "http.fetch",
                json!({"url": format!("http://127.0.0.1:{}{path}", up.port)}),
            )
            .await;
        assert_eq!(r.status, 403, "{path}: {}", r.text);
        r.assert_error(403, code);
        assert!(!r.text.contains("hello from upstream"), "{}", r.text);
        assert_eq!(
            up.hits.load(Ordering::SeqCst),
            before + 1,
            "{path}: one hop only"
        );
    }
}

#[tokio::test]
async fn a_redirect_to_an_internal_address_is_refused_even_when_no_rule_names_it() {
    let up = upstream().await;
    let ws = Workspace::new();
    let s = gateway(
        &ws,
        &format!(
            "  - allow: [http.fetch]
    urls: {{hosts: [127.0.0.1], schemes: [http], ports: [{}], block_private: false}}
",
            up.port
        ),
    )
    .await;
    let r = s
        .call(
            "http.fetch",
            json!({"url": format!("http://127.0.0.1:{}/meta", up.port)}),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert!(r.code().starts_with("policy."), "{}", r.text);
    assert_eq!(up.hits.load(Ordering::SeqCst), 1);
}

/// A redirect to a url another rule allows is refused: the call has the limits and the
/// confirmation of the rule that allowed it, never that one's.
#[tokio::test]
async fn a_redirect_to_a_host_another_rule_allows_is_refused() {
    let up = upstream().await;
    let ws = Workspace::new();
    let s = gateway(
        &ws,
        &format!(
            "  - allow: [http.fetch]
    urls: {{hosts: [127.0.0.1], schemes: [http], ports: [{p}], block_private: false}}
  - allow: [http.fetch]
    urls: {{hosts: [localhost], schemes: [http], ports: [{p}], block_private: false}}
    limits: {{max_bytes: 10B}}
",
            p = up.port
        ),
    )
    .await;
    let r = s
        .call(
            "http.fetch",
            json!({"url": format!("http://127.0.0.1:{}/to-localhost", up.port)}),
        )
        .await;
    r.assert_error(403, "policy.url_not_allowed");
    assert!(r.text.contains("call `http://localhost"), "{}", r.text);
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        1,
        "the hop was never fetched"
    );
}
