//! The web console (`/ui`, issue 19) over HTTP: sign-in and its cookie, the security headers,
//! CSRF and origin checks, who sees an approve button and what a forged POST gets (the
//! guard's own refusals), sign-out and revocation, hostile arguments shown escaped, expiry,
//! and sessions shared by replicas on PostgreSQL. `browser.rs` drives the same pages in
//! headless Chromium.

mod attacks;
mod browser;
mod explain;
mod paging;

use std::sync::Arc;

use corral_config::Loaded;
use corral_server::AppState;
use corral_store::Store;
use reqwest::Client;
use reqwest::redirect::Policy;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::common::{Reply, send};
use crate::guard_fixture::{Fixture, action_id, delegated, human, service};

/// The CSP every console answer carries.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A real server whose state the test keeps (to reload its config).
pub struct Ui {
    pub base: String,
    pub state: AppState,
    pub store: Arc<Store>,
    client: Client,
    task: JoinHandle<()>,
}

impl Drop for Ui {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A signed-in browser, as far as the server can tell: its session cookie.
pub struct Session<'a> {
    ui: &'a Ui,
    pub cookie: String,
}

impl Ui {
    pub async fn start(loaded: &Loaded) -> Ui {
        Self::start_with(loaded, None).await
    }

    /// In learning mode when `learning` is given.
    pub async fn start_with(
        loaded: &Loaded,
        learning: Option<corral_server::learning::LearningSetup>,
    ) -> Ui {
        let activation = learning.map(|setup| corral_server::serve::Activation {
            setup,
            allow_open: false,
        });
        let (state, store) = corral_server::serve::build_state_with(loaded, 1 << 20, activation)
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // As `corral serve` does: the peer address reaches the sign-in limiter.
        let app = corral_server::app(state.clone())
            .into_make_service_with_connect_info::<std::net::SocketAddr>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Ui {
            base: format!("http://{addr}"),
            state,
            store,
            client: Client::builder()
                .no_proxy()
                .redirect(Policy::none())
                .build()
                .unwrap(),
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `POST /ui/login` with `token` and `headers`.
    pub async fn login(&self, token: &str, headers: &[(&str, &str)]) -> Reply {
        let mut rb = self
            .client
            .post(self.url("/ui/login"))
            .form(&[("token", token)]);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        send(rb).await
    }

    /// Signs in (asserting the redirect to the inbox).
    pub async fn sign_in(&self, token: &str) -> Session<'_> {
        let r = self.login(token, &[]).await;
        assert_eq!(r.status, 303, "{}", r.text);
        assert_eq!(header(&r, "location"), "/ui/inbox");
        let set = header(&r, "set-cookie");
        let cookie = set.split(';').next().unwrap().to_owned();
        assert!(cookie.starts_with("corral_ui="), "{set}");
        Session { ui: self, cookie }
    }

    pub async fn get(&self, path: &str) -> Reply {
        send(self.client.get(self.url(path))).await
    }

    /// Creates ada's agent session `id` in the store, as the agents host would.
    pub async fn ada_session(&self, id: &str) {
        let new = corral_store::agents::NewSession {
            // A session belongs to its owner's full identity: ada's JWT (no issuer), a person.
            owner: "jwt::person:ada".to_owned(),
            adapter: "codex".to_owned(),
            model: "gpt-5-codex".to_owned(),
            agent_id: None,
            workdir: "/workspace".to_owned(),
            metadata: Default::default(),
        };
        self.store
            .create_session("default", id, &new, 1_000, 1_000)
            .await
            .unwrap();
    }

    /// Stores an `agent.message` event of session `id` at `at_ms`, as a turn would.
    pub async fn say(&self, id: &str, body: serde_json::Value, at_ms: i64) {
        self.store
            .append_session_events("default", id, &[("agent.message".to_owned(), body)], at_ms)
            .await
            .unwrap();
    }
}

impl Session<'_> {
    pub async fn get(&self, path: &str) -> Reply {
        send(
            self.ui
                .client
                .get(self.ui.url(path))
                .header("cookie", &self.cookie),
        )
        .await
    }

    /// A form POST with this session's cookie and `headers`.
    pub async fn post(&self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> Reply {
        let mut rb = self
            .ui
            .client
            .post(self.ui.url(path))
            .header("cookie", &self.cookie)
            .form(form);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        send(rb).await
    }

    /// The session's CSRF token, as its pages carry it.
    pub async fn csrf(&self) -> String {
        let page = self.get("/ui/ops").await;
        assert_eq!(page.status, 200, "{}", page.text);
        let at = page.text.find("name=\"csrf\" value=\"").unwrap() + 19;
        page.text[at..at + 64].to_owned()
    }

    /// Decides `id` from the console (as a browser on this origin would post it).
    pub async fn decide(&self, id: &str, decision: &str, csrf: &str) -> Reply {
        self.post(
            &format!("/ui/actions/{id}/decision"),
            &[("csrf", csrf), ("decision", decision)],
            &[("sec-fetch-site", "same-origin"), ("origin", "null")],
        )
        .await
    }
}

pub fn header(r: &Reply, name: &str) -> String {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Asserts a console refusal: the status, the code in the page and in `X-Corral-Code`.
#[track_caller]
pub fn assert_refused(r: &Reply, status: u16, code: &str) {
    assert_eq!(
        (r.status, header(r, "x-corral-code").as_str()),
        (status, code),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains(&format!("<code class=\"code\">{code}</code>")),
        "{}",
        r.text
    );
    assert_eq!(header(r, "x-request-id").len(), 36);
}

#[track_caller]
fn assert_console_headers(r: &Reply) {
    assert_eq!(header(r, "content-security-policy"), CSP, "{}", r.text);
    assert_eq!(header(r, "x-frame-options"), "DENY");
    assert_eq!(header(r, "x-content-type-options"), "nosniff");
    assert_eq!(header(r, "referrer-policy"), "no-referrer");
    assert_eq!(header(r, "cache-control"), "no-store");
}

/// No inline script, style or handler: the CSP would block them, so a page must not need one.
#[track_caller]
pub fn assert_no_inline_code(html: &str) {
    let lower = html.to_ascii_lowercase();
    assert!(!lower.contains("<style"), "inline style element");
    assert!(!lower.contains(" style="), "style attribute");
    for (i, _) in lower.match_indices("<script") {
        let tag_end = lower[i..].find('>').unwrap() + i;
        assert!(
            lower[i..tag_end].contains(" src=\"/ui/static/"),
            "inline script"
        );
        assert!(
            lower[tag_end + 1..].starts_with("</script>"),
            "script with a body"
        );
    }
    assert!(
        !lower.contains(" onclick=") && !lower.contains(" onload="),
        "handler attribute"
    );
    assert!(!lower.contains("javascript:"), "javascript: url");
}

/// The guard fixture's config (JWT people, agents and services; the ledger ops).
pub fn fixture() -> (Fixture, String) {
    let f = Fixture::new();
    let yaml = f.yaml("", "");
    (f, yaml)
}

#[tokio::test]
async fn every_console_answer_carries_the_csp_and_no_page_has_inline_code() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let admin = human("root", &["admin"]);
    for path in [
        "/ui/login",
        "/ui/static/console.css",
        "/ui/static/console.js",
        "/ui",
        "/ui/inbox",
    ] {
        let r = ui.get(path).await;
        assert_console_headers(&r);
    }
    let login = ui.get("/ui/login").await;
    assert_eq!(login.status, 200);
    assert_no_inline_code(&login.text);
    // Signed out, a page sends the browser to the sign-in (a fixed path, no `next=`).
    assert_eq!(header(&ui.get("/ui/inbox").await, "location"), "/ui/login");
    let s = ui.sign_in(&admin).await;
    for path in ["/ui/inbox", "/ui/inbox/items", "/ui/ops", "/ui/audit"] {
        let r = s.get(path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        assert_console_headers(&r);
        assert_no_inline_code(&r.text);
    }
    let refused = s.post("/ui/logout", &[], &[]).await;
    assert_refused(&refused, 403, "ui.csrf_failed");
    assert_console_headers(&refused);
    assert_eq!(
        header(&ui.get("/ui/static/console.js").await, "content-type"),
        "text/javascript; charset=utf-8"
    );
}

#[tokio::test]
async fn sign_in_sets_a_strict_cookie_and_stores_neither_the_token_nor_the_session_id() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let ada = human("ada", &["operator"]);

    // A bad token: the form again with the code, and an audit event; no cookie.
    let bad = ui.login("not-a-token", &[]).await;
    assert_refused_form(&bad, 401, "auth.invalid");
    assert!(bad.headers.get("set-cookie").is_none());
    let empty = ui.login("", &[]).await;
    assert_refused_form(&empty, 401, "auth.missing");
    let audited = ui.store.audit_recent(None, 100).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|e| e.op == "POST /ui/login" && e.code.as_deref() == Some("auth.invalid"))
    );
    // From another site: refused before the token is even looked at.
    let cross = ui.login(&ada, &[("sec-fetch-site", "cross-site")]).await;
    assert_refused(&cross, 403, "ui.csrf_failed");
    let other = ui.login(&ada, &[("origin", "http://evil.example")]).await;
    assert_refused(&other, 403, "ui.csrf_failed");

    let r = ui.login(&ada, &[]).await;
    let set = header(&r, "set-cookie");
    let attrs: Vec<&str> = set.split("; ").collect();
    let id = attrs[0].strip_prefix("corral_ui=").unwrap();
    assert_eq!(id.len(), 64, "256 bits, hex: {set}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    for want in ["Path=/ui", "HttpOnly", "SameSite=Strict", "Max-Age=28800"] {
        assert!(attrs.contains(&want), "{want} missing: {set}");
    }
    assert!(!attrs.contains(&"Secure"), "plain HTTP: {set}");
    // Behind a TLS-terminating proxy the cookie is Secure.
    let tls = ui.login(&ada, &[("x-forwarded-proto", "https")]).await;
    assert!(header(&tls, "set-cookie").ends_with("; Secure"));
    // Two sign-ins, two different ids.
    let again = ui.sign_in(&ada).await;
    assert_ne!(again.cookie, attrs[0]);

    // Nothing in the state directory holds the token or a session id.
    ui.store.close().await;
    for entry in std::fs::read_dir(&f.ws.state).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(&ada), "the token is stored");
        assert!(!text.contains(id), "a session id is stored");
        assert!(!text.contains(again.cookie.trim_start_matches("corral_ui=")));
    }
}

#[tokio::test]
async fn a_successful_sign_in_is_audited_with_who_and_how_and_never_the_token() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let ada = human("ada", &["operator"]);
    ui.sign_in(&ada).await;
    let audited = ui.store.audit_recent(None, 100).await.unwrap();
    let signed: Vec<_> = audited
        .iter()
        .filter(|e| e.op == "POST /ui/login" && e.code.is_none())
        .collect();
    assert_eq!(signed.len(), 1, "{audited:?}");
    let e = signed[0];
    assert_eq!(
        (e.principal_id.as_str(), e.principal_kind.as_str(), e.status),
        ("ada", "human", 303)
    );
    assert_eq!(e.outcome.as_str(), "ok");
    assert_eq!(e.detail.as_deref(), Some("signed in with a JWT"));
    let text = serde_json::to_string(&audited).unwrap();
    assert!(!text.contains(&ada), "the token is in the audit");
}

#[tokio::test]
async fn the_eleventh_sign_in_attempt_in_a_minute_is_refused_with_retry_after() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let ada = human("ada", &["operator"]);
    for i in 0..10 {
        let r = ui.login(&format!("wrong-{i}"), &[]).await;
        assert_refused_form(&r, 401, "auth.invalid");
    }
    // From this address the eleventh is refused, even with a good token, and says when to retry.
    let r = ui.login(&ada, &[]).await;
    assert_refused_form(&r, 429, "ui.sign_in_rate_limited");
    assert_eq!(header(&r, "x-corral-code"), "ui.sign_in_rate_limited");
    let wait: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert!(r.headers.get("set-cookie").is_none());
    assert_console_headers(&r);
    let audited = ui.store.audit_recent(None, 100).await.unwrap();
    assert_eq!(
        audited
            .iter()
            .filter(|e| e.code.as_deref() == Some("ui.sign_in_rate_limited"))
            .count(),
        1
    );
}

/// A wrong token (`wrong-<i>`, a new identity each time) from `ip`, as `X-Forwarded-For` says.
async fn wrong(ui: &Ui, i: usize, ip: &str) -> Reply {
    ui.login(&format!("wrong-{i}"), &[("x-forwarded-for", ip)])
        .await
}

/// `console.sign_in_rate` raises (or lowers) the limit; `X-Forwarded-For` names the client only
/// when the connection comes from a `console.trusted_proxies` network (these tests connect from
/// 127.0.0.1), so a client that is not behind one gains nothing by writing the header.
#[tokio::test]
async fn the_sign_in_limit_is_configured_and_forwarded_clients_count_only_behind_a_trusted_proxy() {
    let (f, _) = fixture();
    // Raised: 15 wrong tokens from one address, and the right one still signs in.
    let ui = Ui::start(&f.load(&f.yaml("", "console: {sign_in_rate: 20/min}\n"))).await;
    for i in 0..15 {
        assert_refused_form(&wrong(&ui, i, "192.0.2.1").await, 401, "auth.invalid");
    }
    assert_eq!(
        ui.login(&human("ada", &["operator"]), &[]).await.status,
        303
    );

    // Behind a trusted proxy: each forwarded client has its own count.
    let ui = Ui::start(&f.load(&f.yaml(
        "",
        "console: {sign_in_rate: 3/min, trusted_proxies: [127.0.0.0/8]}\n",
    )))
    .await;
    for i in 0..3 {
        assert_refused_form(&wrong(&ui, i, "203.0.113.1").await, 401, "auth.invalid");
    }
    assert_refused_form(
        &wrong(&ui, 3, "203.0.113.1").await,
        429,
        "ui.sign_in_rate_limited",
    );
    let other = ui
        .login(
            &human("ada", &["operator"]),
            &[("x-forwarded-for", "203.0.113.2")],
        )
        .await;
    assert_eq!(other.status, 303, "{}", other.text);

    // No trusted proxy: the header is never read, so a new one each time gains nothing.
    let ui = Ui::start(&f.load(&f.yaml("", "console: {sign_in_rate: 3/min}\n"))).await;
    for (i, ip) in ["198.51.100.1", "198.51.100.2", "198.51.100.3"]
        .into_iter()
        .enumerate()
    {
        assert_refused_form(&wrong(&ui, i, ip).await, 401, "auth.invalid");
    }
    assert_refused_form(
        &wrong(&ui, 3, "198.51.100.4").await,
        429,
        "ui.sign_in_rate_limited",
    );
}

#[track_caller]
fn assert_refused_form(r: &Reply, status: u16, code: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert!(
        r.text
            .contains(&format!("<code class=\"code\">{code}</code>")),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("name=\"token\""),
        "the form again: {}",
        r.text
    );
    assert!(!r.text.contains("not-a-token"), "the token is not echoed");
}

#[tokio::test]
async fn a_post_without_the_sessions_csrf_token_or_from_another_site_is_refused() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let ada = human("ada", &["operator"]);
    let agent = delegated("ada", "planner", &["operator"]);
    let id = action_id(&plain_ui(&ui, &agent, json!({"word": "csrf"})).await);
    let s = ui.sign_in(&ada).await;
    let csrf = s.csrf().await;
    let path = format!("/ui/actions/{id}/decision");
    let same = [("sec-fetch-site", "same-origin")];
    // No token, another session's token, a wrong one: refused, nothing decided.
    let other = ui.sign_in(&ada).await.csrf().await;
    assert_ne!(other, csrf);
    for form in [
        vec![("decision", "approve")],
        vec![("decision", "approve"), ("csrf", "")],
        vec![("decision", "approve"), ("csrf", other.as_str())],
        vec![("decision", "approve"), ("csrf", &csrf[..63])],
    ] {
        let r = s.post(&path, &form, &same).await;
        assert_refused(&r, 403, "ui.csrf_failed");
    }
    // The right token from another site: refused too.
    for headers in [
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
        vec![("origin", "http://evil.example")],
        vec![("origin", "null")],
    ] {
        let r = s
            .post(&path, &[("decision", "approve"), ("csrf", &csrf)], &headers)
            .await;
        assert_refused(&r, 403, "ui.csrf_failed");
    }
    // A form that is not a form, or has fields the console does not send.
    let r = s
        .post(
            &path,
            &[("decision", "approve"), ("csrf", &csrf), ("x", "1")],
            &same,
        )
        .await;
    assert_refused(&r, 400, "ui.form_invalid");
    let r = s
        .post(&path, &[("decision", "maybe"), ("csrf", &csrf)], &same)
        .await;
    assert_refused(&r, 400, "confirmation.invalid_decision");
    let listed = s.get("/ui/inbox/items").await;
    assert!(
        listed.text.contains(&format!("id=\"action-{id}\"")),
        "still pending"
    );
    // Without a session at all.
    let r = send(
        ui.client
            .post(ui.url(&path))
            .form(&[("decision", "approve"), ("csrf", csrf.as_str())]),
    )
    .await;
    assert_refused(&r, 401, "ui.session_invalid");
    // With both: decided.
    let r = s.decide(&id, "approve", &csrf).await;
    assert_eq!(
        (r.status, header(&r, "location").as_str()),
        (303, "/ui/inbox?done=approved"),
        "{}",
        r.text
    );
}

/// `POST /ops/ledger.append` as `token`.
async fn plain_ui(ui: &Ui, token: &str, args: serde_json::Value) -> Reply {
    send(
        ui.client
            .post(ui.url("/ops/ledger.append"))
            .bearer_auth(token)
            .json(&args),
    )
    .await
}

#[tokio::test]
async fn only_the_person_who_raised_an_action_gets_an_approve_button_and_a_forged_post_is_refused_by_the_guard()
 {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let agent = delegated("ada", "planner", &["operator"]);
    let id = action_id(&plain_ui(&ui, &agent, json!({"word": "guarded"})).await);

    // A viewer: lists nothing of ada's, has no button; a forged approval with its own valid
    // CSRF token is the guard's 404 (someone else's action looks like none).
    let viewer = ui.sign_in(&human("vic", &["viewer"])).await;
    let inbox = viewer.get("/ui/inbox").await;
    assert!(!inbox.text.contains("class=\"approve\""), "{}", inbox.text);
    assert!(inbox.text.contains("No action waits"), "{}", inbox.text);
    let csrf = viewer.csrf().await;
    assert_refused(
        &viewer.decide(&id, "approve", &csrf).await,
        404,
        "confirmation.not_found",
    );

    // An admin service: sees the tenant's action, may deny it, but gets no approve button, and
    // its forged approval is refused.
    let svc = ui.sign_in(&service("ops-bot", &["admin"])).await;
    let items = svc.get("/ui/inbox/items").await;
    assert!(
        items.text.contains(&format!("id=\"action-{id}\"")),
        "{}",
        items.text
    );
    assert!(!items.text.contains("class=\"approve\""), "{}", items.text);
    assert!(items.text.contains("class=\"deny\""), "{}", items.text);
    let csrf = svc.csrf().await;
    assert_refused(
        &svc.decide(&id, "approve", &csrf).await,
        404,
        "confirmation.not_found",
    );

    // The agent itself (ada's delegate: the same person, with an `act` chain): sees it, no
    // button, and the guard's `approver_refused`.
    let delegate = ui.sign_in(&agent).await;
    let items = delegate.get("/ui/inbox/items").await;
    assert!(
        items.text.contains(&format!("id=\"action-{id}\"")),
        "{}",
        items.text
    );
    assert!(!items.text.contains("class=\"approve\""), "{}", items.text);
    let csrf = delegate.csrf().await;
    assert_refused(
        &delegate.decide(&id, "approve", &csrf).await,
        403,
        "confirmation.approver_refused",
    );

    // Ada herself: the button, and the approval goes through, audited like the API's.
    let ada = ui.sign_in(&human("ada", &["operator"])).await;
    let items = ada.get("/ui/inbox/items").await;
    assert!(
        items
            .text
            .contains(&format!("action=\"/ui/actions/{id}/decision\""))
    );
    assert!(items.text.contains("class=\"approve\""), "{}", items.text);
    let csrf = ada.csrf().await;
    assert_eq!(ada.decide(&id, "approve", &csrf).await.status, 303);
    let decided = ui.store.audit_recent(None, 100).await.unwrap();
    let refusals = decided
        .iter()
        .filter(|e| e.action_id.as_deref() == Some(id.as_str()) && e.outcome.as_str() == "denied")
        .count();
    assert_eq!(refusals, 3, "each forged approval is audited");
    assert!(
        decided
            .iter()
            .any(|e| e.action_id.as_deref() == Some(id.as_str())
                && e.outcome.as_str() == "confirmation_decided")
    );
    // The agent's retry runs, once.
    let run = plain_ui(&ui, &agent, json!({"word": "guarded"})).await;
    assert_eq!(run.status, 200, "{}", run.text);
    let again = plain_ui(&ui, &agent, json!({"word": "guarded"})).await;
    assert_eq!(again.json()["replayed"], true, "{}", again.text);
    assert_eq!(f.ledger_lines(), vec!["guarded"]);
}

#[tokio::test]
async fn sign_out_revokes_the_session_so_the_old_cookie_no_longer_works() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let s = ui.sign_in(&human("ada", &["operator"])).await;
    let csrf = s.csrf().await;
    let out = s
        .post(
            "/ui/logout",
            &[("csrf", &csrf)],
            &[("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_eq!(
        (out.status, header(&out, "location").as_str()),
        (303, "/ui/login")
    );
    assert!(header(&out, "set-cookie").contains("Max-Age=0"));
    // The same cookie, replayed: a page sends it to the sign-in, the fragment and a POST hear
    // the code.
    assert_eq!(header(&s.get("/ui/inbox").await, "location"), "/ui/login");
    assert_refused(&s.get("/ui/inbox/items").await, 401, "ui.session_invalid");
    let r = s
        .post(
            "/ui/logout",
            &[("csrf", &csrf)],
            &[("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_refused(&r, 401, "ui.session_invalid");
    // A made-up or malformed cookie is no session either.
    let forged = Session {
        ui: &ui,
        cookie: format!("corral_ui={}", "ab".repeat(32)),
    };
    assert_refused(
        &forged.get("/ui/inbox/items").await,
        401,
        "ui.session_invalid",
    );
    let bad = Session {
        ui: &ui,
        cookie: "corral_ui=<script>".to_owned(),
    };
    assert_refused(&bad.get("/ui/inbox/items").await, 401, "ui.session_invalid");
}

#[tokio::test]
async fn a_token_removed_from_the_config_ends_its_sessions_at_the_next_request() {
    let ws = crate::common::Workspace::new();
    let env = crate::common::token_env();
    let yaml = ws.jail_yaml("");
    let ui = Ui::start(&ws.load(&yaml, &env)).await;
    let s = ui.sign_in(crate::common::ADMIN_TOKEN).await;
    let page = s.get("/ui/ops").await;
    assert!(
        page.text.contains("Signed in as <strong>admin</strong>"),
        "{}",
        page.text
    );
    // The admin token goes; the agent's stays.
    let without = yaml.replace(
        "    - {id: admin, roles: [admin], token_env: CORRAL_IT_ADMIN_TOKEN}\n",
        "",
    );
    assert_ne!(without, yaml);
    let loaded = ws.load(&without, &env);
    let auth = corral_runtime::compose::authenticator(&loaded).unwrap();
    ui.state.runtime().reload(&loaded, auth).await.unwrap();
    assert_eq!(header(&s.get("/ui/ops").await, "location"), "/ui/login");
    assert_refused(&s.get("/ui/inbox/items").await, 401, "ui.session_invalid");
    // And it cannot sign in again.
    assert_eq!(ui.login(crate::common::ADMIN_TOKEN, &[]).await.status, 401);
    let agent = ui.sign_in(crate::common::AGENT_TOKEN).await;
    assert_eq!(agent.get("/ui/ops").await.status, 200);
}

#[tokio::test]
async fn a_jwt_session_ends_when_the_jwt_expires() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 2;
    let short = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": "ada", "roles": ["operator"], "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(crate::guard_fixture::JWT_SECRET.as_bytes()),
    )
    .unwrap();
    let s = ui.sign_in(&short).await;
    assert_eq!(s.get("/ui/inbox/items").await.status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(2_600)).await;
    assert_refused(&s.get("/ui/inbox/items").await, 401, "ui.session_invalid");
}

#[tokio::test]
async fn hostile_arguments_op_ids_and_principals_are_shown_escaped_and_exactly() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let sub = "<img src=x onerror=alert(1)>\u{202E}";
    let agent = delegated(sub, "planner", &["operator", "admin"]);
    let hostile = "</code></pre><script>alert(1)</script>\"'&\u{202E}txt.exe\u{200B}";
    let r = send(
        ui.client
            .post(ui.url("/ops/files.write"))
            .bearer_auth(&agent)
            .json(&json!({"path": f.ws.at("x.txt"), "content": hostile})),
    )
    .await;
    let id = action_id(&r);
    let canonical = r.json()["args_canonical"].as_str().unwrap().to_owned();
    let s = ui.sign_in(&human(sub, &["admin"])).await;
    for page in [s.get("/ui/inbox").await, s.get("/ui/audit").await] {
        assert_eq!(page.status, 200, "{}", page.text);
        assert_no_inline_code(&page.text);
        assert!(!page.text.contains("<script>alert"), "{}", page.text);
        assert!(!page.text.contains("<img src=x"), "{}", page.text);
        assert!(
            !page.text.contains('\u{202E}'),
            "a bidi override reaches the page"
        );
        assert!(page.text.contains("&lt;img src=x onerror=alert(1)&gt;"));
    }
    let inbox = s.get("/ui/inbox/items").await.text;
    assert!(inbox.contains(&format!("id=\"action-{id}\"")));
    // Outside learning mode the audit shows the action ids.
    assert!(s.get("/ui/audit").await.text.contains(&id));
    // The canonical arguments, byte for byte once the escapes are read back.
    let shown = inbox
        .split("<pre class=\"args\"")
        .nth(1)
        .and_then(|p| p.split("<code>").nth(1))
        .and_then(|p| p.split("</code></pre>").next())
        .unwrap();
    let read_back = shown
        .replace(
            "<span class=\"hidden-char\" title=\"an invisible character\">\\u{202E}</span>",
            "\u{202E}",
        )
        .replace(
            "<span class=\"hidden-char\" title=\"an invisible character\">\\u{200B}</span>",
            "\u{200B}",
        )
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    assert_eq!(read_back, canonical);
    // A hostile audit filter is echoed escaped, and a bad one refused with the API's code.
    let q = s.get("/ui/audit?op=%22%3E%3Cscript%3E").await;
    assert!(
        q.text.contains("value=\"&quot;&gt;&lt;script&gt;\""),
        "{}",
        q.text
    );
    assert_refused(&s.get("/ui/audit?run=a%20b").await, 400, "args.invalid");
    assert_refused(&s.get("/ui/audit?value=1").await, 400, "args.unknown");
    assert_refused(&s.get("/ui/audit?op=a%01b").await, 400, "args.invalid");
    let csrf = s.csrf().await;
    assert_refused(
        &s.decide("%FF", "deny", &csrf).await,
        404,
        "confirmation.not_found",
    );
    // A non-admin does not read the audit.
    let op = ui.sign_in(&human("ada", &["operator"])).await;
    assert_refused(&op.get("/ui/audit").await, 403, "audit.not_permitted");
    assert!(
        !op.get("/ui/inbox")
            .await
            .text
            .contains("href=\"/ui/audit\"")
    );
}

#[tokio::test]
async fn an_expired_action_leaves_the_inbox_and_cannot_be_approved() {
    let f = Fixture::new();
    let yaml = f.yaml("", "guardrails: {confirmation_ttl: 1s}\n");
    let ui = Ui::start(&f.load(&yaml)).await;
    let agent = delegated("ada", "planner", &["operator"]);
    let id = action_id(&plain_ui(&ui, &agent, json!({"word": "late"})).await);
    let s = ui.sign_in(&human("ada", &["operator"])).await;
    let items = s.get("/ui/inbox/items").await;
    assert!(items.text.contains("data-expires="), "{}", items.text);
    let csrf = s.csrf().await;
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    assert!(!s.get("/ui/inbox/items").await.text.contains(&id));
    assert_refused(
        &s.decide(&id, "approve", &csrf).await,
        404,
        "confirmation.not_found",
    );
    assert!(f.ledger_lines().is_empty());
}

#[tokio::test]
async fn the_ops_view_lists_what_the_principal_may_call() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let s = ui.sign_in(&human("ada", &["operator"])).await;
    let page = s.get("/ui/ops").await.text;
    for op in ["ledger.append", "ledger.peek", "files.read"] {
        assert!(page.contains(&format!("<code>{op}</code>")), "{op}: {page}");
    }
    // `ledger.drop` is destructive: an operator's tier does not reach it.
    assert!(!page.contains("<code>ledger.drop</code>"), "{page}");
}

/// Two replicas on one PostgreSQL: a session opened on one works on the other, and a
/// sign-out on either ends it on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_is_shared_by_replicas_on_postgres() {
    let Some(schema) = crate::pg::Schema::create("ui").await else {
        return;
    };
    let f = Fixture::new();
    let yaml = f.yaml(
        "",
        &format!(
            "storage: {{url: \"{}\"}}\nguardrails: {{replicas: 2}}\n",
            schema.url
        ),
    );
    let loaded = f.load(&yaml);
    let a = Ui::start(&loaded).await;
    let b = Ui::start(&loaded).await;
    assert_eq!(a.store.backend_name(), "postgres");
    let on_a = a.sign_in(&human("ada", &["operator"])).await;
    let on_b = Session {
        ui: &b,
        cookie: on_a.cookie.clone(),
    };
    assert_eq!(on_b.get("/ui/inbox/items").await.status, 200);
    let csrf = on_b.csrf().await;
    assert_eq!(csrf, on_a.csrf().await, "one session, one CSRF token");
    let out = on_b
        .post(
            "/ui/logout",
            &[("csrf", &csrf)],
            &[("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_eq!(out.status, 303);
    assert_refused(
        &on_a.get("/ui/inbox/items").await,
        401,
        "ui.session_invalid",
    );
    drop((a, b));
    schema.drop().await;
}

/// `POST <path>` as `token` with a JSON body: the created object.
async fn created_as(
    ui: &Ui,
    token: &str,
    path: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let r = send(ui.client.post(ui.url(path)).bearer_auth(token).json(&body)).await;
    assert!(r.status == 200 || r.status == 201, "{path}: {}", r.text);
    r.json()
}

#[tokio::test]
async fn the_lab_pages_show_runs_and_a_comparisons_verdict_deltas_and_charts() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", "sandbox: {enabled: true}\n"))).await;
    let op = human("olga", &["operator"]);
    let mocks = json!([{"resource": "a", "response": "yes"}, {"resource": "b", "response": "no"}]);
    let scenario = created_as(
        &ui,
        &op,
        "/v1/sandbox/scenarios",
        json!({"name": "scored", "steps": [{"input": "a", "expected": "yes"}, {"input": "b", "expected": "yes"}], "mocks": mocks}),
    )
    .await;
    let sid = scenario["id"].as_str().unwrap().to_owned();
    let run = created_as(
        &ui,
        &op,
        &format!("/v1/sandbox/scenarios/{sid}/runs"),
        json!({"variant": "base<b>", "scorer": "exact"}),
    )
    .await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    let cmp = created_as(
        &ui,
        &op,
        "/v1/sandbox/comparisons",
        json!({"baseline": {"variant": "a"}, "candidate": {"variant": "b"}, "scenarios": [sid]}),
    )
    .await;
    let cmp_id = cmp["id"].as_str().unwrap().to_owned();

    // A viewer reads the lab (as on the API).
    let s = ui.sign_in(&human("vera", &["viewer"])).await;
    let runs = s.get("/ui/runs").await;
    assert_eq!(runs.status, 200, "{}", runs.text);
    assert_no_inline_code(&runs.text);
    assert!(
        runs.text.contains(&format!("href=\"/ui/runs/{run_id}\"")),
        "{}",
        runs.text
    );
    assert!(runs.text.contains("base&lt;b&gt;") && !runs.text.contains("base<b>"));
    assert!(
        runs.text.contains("1 / 0 / 2") || runs.text.contains("2 / 0 / 2"),
        "{}",
        runs.text
    );
    let one = s.get(&format!("/ui/runs/{run_id}")).await;
    assert_eq!(one.status, 200, "{}", one.text);
    assert!(
        one.text.contains("0.500") && one.text.contains("Attestations"),
        "{}",
        one.text
    );

    let list = s.get("/ui/comparisons").await;
    assert!(
        list.text
            .contains(&format!("href=\"/ui/comparisons/{cmp_id}\"")),
        "{}",
        list.text
    );
    let page = s.get(&format!("/ui/comparisons/{cmp_id}")).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_no_inline_code(&page.text);
    let verdict = cmp["verdict"].as_str().unwrap();
    assert!(
        page.text
            .contains(&format!("verdict-{verdict}\">{verdict}")),
        "{}",
        page.text
    );
    // One scenario: the rule that forced `inconclusive` is named.
    assert!(page.text.contains("too_few_scenarios"), "{}", page.text);
    assert!(
        page.text.contains("Per-scenario deltas") && page.text.contains("<svg class=\"chart\"")
    );
    assert_eq!(
        page.text.matches("<svg").count(),
        2,
        "the deltas and the scores"
    );

    // The lab's own refusals, as pages.
    assert_refused(&s.get("/ui/runs/nope").await, 404, "lab.not_found");
    assert_refused(&s.get("/ui/runs?after=garbage").await, 400, "args.invalid");
    assert_refused(&s.get("/ui/runs?limit=5").await, 400, "args.unknown");
    let nobody = ui.sign_in(&human("nora", &["dev"])).await;
    assert_refused(&nobody.get("/ui/comparisons").await, 403, "rbac.denied");
}

#[tokio::test]
async fn the_agents_pages_show_only_the_owners_sessions_and_their_events_escaped() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let id = "0199ab00-0000-7000-8000-000000000001";
    ui.ada_session(id).await;
    let hostile = json!({"type": "message", "text": "<script>alert(1)</script>\u{202E}"});
    ui.say(id, hostile, 2_000).await;
    let ada = ui.sign_in(&human("ada", &["operator"])).await;
    let list = ada.get("/ui/sessions").await;
    assert!(
        list.text.contains(&format!("href=\"/ui/sessions/{id}\"")),
        "{}",
        list.text
    );
    let one = ada.get(&format!("/ui/sessions/{id}")).await;
    assert_eq!(one.status, 200, "{}", one.text);
    assert_no_inline_code(&one.text);
    assert!(
        one.text.contains("<code>agent.message</code>"),
        "{}",
        one.text
    );
    assert!(
        one.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        one.text
    );
    assert!(!one.text.contains('\u{202E}'));
    // Someone else: not listed, and the page is the same 404 as an unknown id.
    let bo = ui.sign_in(&human("bo", &["admin"])).await;
    assert!(
        bo.get("/ui/sessions")
            .await
            .text
            .contains("You have no agent session")
    );
    assert_refused(
        &bo.get(&format!("/ui/sessions/{id}")).await,
        404,
        "agents.not_found",
    );
    assert_refused(&ada.get("/ui/sessions/nope").await, 404, "agents.not_found");
}

#[tokio::test]
async fn in_learning_mode_every_page_carries_the_badge_and_its_hint_button_takes_a_hint() {
    let ws = crate::common::Workspace::new();
    let loaded = ws.load(
        &crate::learning::learning_yaml(&ws),
        &crate::common::token_env(),
    );
    let setup = crate::learning::setup(
        &ws,
        &crate::learning::manifest(),
        std::time::Duration::from_secs(3600),
    );
    let ui = Ui::start_with(&loaded, Some(setup)).await;
    let s = ui.sign_in(crate::common::AGENT_TOKEN).await;
    for path in ["/ui/inbox", "/ui/ops", "/ui/runs"] {
        let page = s.get(path).await.text;
        assert!(
            page.contains("scenario <code>kafka-lag-7f3a</code>, level <strong>0</strong> of 3"),
            "{path}: {page}"
        );
        assert!(page.contains("action=\"/ui/learning/hint\""), "{page}");
    }
    // Without the CSRF token: refused, the level unchanged.
    let r = s
        .post(
            "/ui/learning/hint",
            &[],
            &[("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_refused(&r, 403, "ui.csrf_failed");
    let csrf = s.csrf().await;
    let hint = |csrf: String| {
        let s = &s;
        async move {
            s.post(
                "/ui/learning/hint",
                &[("csrf", csrf.as_str())],
                &[("sec-fetch-site", "same-origin")],
            )
            .await
        }
    };
    let r = hint(csrf.clone()).await;
    assert_eq!(
        (r.status, header(&r, "location").as_str()),
        (303, "/ui/inbox?done=hint"),
        "{}",
        r.text
    );
    assert!(
        s.get("/ui/ops")
            .await
            .text
            .contains("level <strong>1</strong> of 3")
    );
    // The API's rate limit, as a page.
    assert_refused(&hint(csrf).await, 429, "learning.hint_rate_limited");
    let audited = ui.store.audit_recent(None, 100).await.unwrap();
    assert_eq!(
        audited.iter().filter(|e| e.op == "learning_hint").count(),
        1
    );

    // Below level 3 the audit page withholds action ids, as the narrowed `GET /audit` does.
    // A decision about an action id nobody raised is audited with that id.
    let id = "feedface-0000-4000-8000-00000000c0de";
    let r = send(
        ui.client
            .post(ui.url(&format!("/confirmations/{id}/decision")))
            .bearer_auth(crate::common::AGENT_TOKEN)
            .json(&json!({"decision": "deny"})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(
        ui.store
            .audit_recent(None, 100)
            .await
            .unwrap()
            .iter()
            .any(|e| e.action_id.as_deref() == Some(id))
    );
    let admin = ui.sign_in(crate::common::ADMIN_TOKEN).await;
    let audit = admin.get("/ui/audit").await;
    assert_eq!(audit.status, 200, "{}", audit.text);
    assert!(audit.text.contains("POST /confirmations"), "{}", audit.text);
    assert!(!audit.text.contains(id), "{}", audit.text);
}
