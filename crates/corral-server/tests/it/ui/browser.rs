//! The console in a real browser: Debian's headless Chromium driven over WebDriver
//! (chromedriver, through `fantoccini`) against a real server. A person signs in, sees an
//! action an agent raised appear without a reload, approves it with the keyboard, and the
//! agent's retry runs once; an agent session's new event appears without a reload; the page reads at 320 px; a viewer and a service get no approve
//! button; sign-out ends the session. Every page is saved as a screenshot under
//! `target/ui-screenshots/`.
//!
//! Chromium and chromedriver come from Debian (`apt-get install -y chromium chromium-driver`,
//! as `.ci/run` does). Without them the test prints why it skips; under `CI=true` it fails.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use super::{Ui, header};
use crate::common::in_ci;
use crate::guard_fixture::{Fixture, action_id, delegated, human, service};

/// Where a program is, on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Chromium and chromedriver, or `None` after saying why (a failure under `CI=true`).
fn browser() -> Option<(PathBuf, PathBuf)> {
    let chromium = which("chromium").or_else(|| which("chromium-browser"));
    let driver = which("chromedriver");
    match (chromium, driver) {
        (Some(c), Some(d)) => Some((c, d)),
        (c, d) => {
            let how = format!(
                "the web console's browser test needs Debian's Chromium and its WebDriver \
                 (missing: {}{}); install them with `apt-get install -y chromium chromium-driver`",
                if c.is_none() { "chromium " } else { "" },
                if d.is_none() { "chromedriver" } else { "" },
            );
            assert!(!in_ci(), "{how}");
            eprintln!("notice: skipping a browser test: {how}");
            None
        }
    }
}

/// A chromedriver process, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_driver(driver: &PathBuf) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let d = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = http.get(format!("{}/status", d.url)).send().await
            && r.status().is_success()
        {
            return d;
        }
        assert!(
            Instant::now() < until,
            "chromedriver did not start on {}",
            d.url
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn open_browser(chromium: &PathBuf, driver: &Driver, profile: &std::path::Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .unwrap_or_else(|e| panic!("chromium did not start through chromedriver: {e}"))
}

/// `target/ui-screenshots/<name>.png`.
async fn screenshot(c: &Client, name: &str) {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    let dir = target.join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

async fn sign_in(c: &Client, ui: &Ui, token: &str, shot: Option<&str>) {
    c.goto(&ui.url("/ui/login")).await.unwrap();
    let field = c.find(Locator::Css("input#token")).await.unwrap();
    // The field is labelled, and focused on load.
    let label = c.find(Locator::Css("label[for=token]")).await.unwrap();
    assert_eq!(label.text().await.unwrap(), "Token");
    field.send_keys(token).await.unwrap();
    if let Some(name) = shot {
        screenshot(c, name).await;
    }
    c.find(Locator::Css("form.signin button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(c, "/ui/inbox").await;
}

async fn wait_path(c: &Client, path: &str) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let url = c.current_url().await.unwrap();
        if url.path() == path {
            return;
        }
        assert!(Instant::now() < until, "still at {url}, expected {path}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Presses Tab until the focused element matches `css` (at most 40 times): proof that a
/// keyboard reaches it.
async fn tab_to(c: &Client, css: &str) {
    let tab: char = Key::Tab.into();
    for _ in 0..40 {
        let hit = c
            .execute(
                "return document.activeElement && document.activeElement.matches(arguments[0]);",
                vec![json!(css)],
            )
            .await
            .unwrap();
        if hit == json!(true) {
            return;
        }
        c.active_element()
            .await
            .unwrap()
            .send_keys(&tab.to_string())
            .await
            .unwrap();
    }
    panic!("Tab never reached {css}");
}

async fn sign_out(c: &Client) {
    c.find(Locator::Css(".who form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(c, "/ui/login").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approves_in_chromium_and_the_agents_retry_runs_once() {
    let Some((chromium, driver_bin)) = browser() else {
        return;
    };
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", "sandbox: {enabled: true}\n"))).await;
    let agent = delegated("ada", "planner", &["operator"]);
    let call = |word: &'static str| {
        let agent = agent.clone();
        let url = ui.url("/ops/ledger.append");
        async move {
            crate::common::send(
                reqwest::Client::new()
                    .post(url)
                    .bearer_auth(agent)
                    .json(&json!({"word": word})),
            )
            .await
        }
    };
    let driver = start_driver(&driver_bin).await;
    let profile = tempfile::tempdir().unwrap();
    let c = open_browser(&chromium, &driver, profile.path()).await;

    // Signed in as ada (admin: she reads the audit too); the inbox is empty.
    sign_in(&c, &ui, &human("ada", &["admin"]), Some("01-sign-in")).await;
    let cookie = c.get_named_cookie("corral_ui").await.unwrap();
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(cookie.path(), Some("/ui"));
    let page = c.source().await.unwrap();
    assert!(page.contains("No action waits"), "{page}");

    // The agent raises an action: it appears without a reload.
    let id = action_id(&call("hello").await);
    let card = format!("article#action-{id}");
    c.wait()
        .at_most(Duration::from_secs(15))
        .for_element(Locator::Css(&card))
        .await
        .unwrap_or_else(|e| panic!("the new action did not appear without a reload: {e}"));
    let args = c
        .find(Locator::Css(&format!("{card} pre.args")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(args, "{\"word\":\"hello\"}");
    screenshot(&c, "02-inbox-pending").await;

    // Approved with the keyboard alone.
    let approve = format!("{card} button.approve");
    tab_to(&c, &approve).await;
    let enter: char = Key::Enter.into();
    c.active_element()
        .await
        .unwrap()
        .send_keys(&enter.to_string())
        .await
        .unwrap();
    wait_path(&c, "/ui/inbox").await;
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("p.note"))
        .await
        .unwrap();
    screenshot(&c, "03-inbox-approved").await;

    // The agent's retry runs, once; a second retry hears the stored outcome.
    let first = call("hello").await;
    assert_eq!(first.status, 200, "{}", first.text);
    let second = call("hello").await;
    assert_eq!(second.json()["replayed"], true, "{}", second.text);
    assert_eq!(f.ledger_lines(), vec!["hello"]);

    // Ops and audit pages (the audit filtered by op, typed in and submitted with Enter).
    c.goto(&ui.url("/ui/ops")).await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//td/a/code[text()='ledger.append']"))
        .await
        .unwrap_or_else(|e| panic!("no ledger.append on the ops page ({e})"));
    screenshot(&c, "04-ops").await;
    // Explain a call from the ops view: the op's link fills the form; the arguments typed in.
    c.find(Locator::XPath("//td/a[code[text()='ledger.append']]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let args = c.find(Locator::Css("textarea#args")).await.unwrap();
    args.clear().await.unwrap();
    args.send_keys(r#"{"word": "again"}"#).await.unwrap();
    c.find(Locator::Css("form.explain button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let decided = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("h2#decision"))
        .await
        .unwrap_or_else(|e| panic!("no decision on the explain page ({e})"));
    let text = decided.text().await.unwrap();
    assert!(text.starts_with("Allowed, after confirmation"), "{text}");
    screenshot(&c, "04b-explain").await;
    c.goto(&ui.url("/ui/audit")).await.unwrap();
    let op = c.find(Locator::Css("input#f-op")).await.unwrap();
    op.send_keys(&format!("ledger.append{enter}"))
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_url(&url::Url::parse(&ui.url("/ui/audit?run=&op=ledger.append&principal=")).unwrap())
        .await
        .unwrap();
    let rows = c.find_all(Locator::Css("tbody tr")).await.unwrap();
    assert!(rows.len() >= 2, "the call's raise and its run");
    screenshot(&c, "05-audit").await;

    // The lab: a scored comparison over three scenarios, its page with both charts.
    let ada_op = human("ada", &["admin"]);
    let mut scenarios = Vec::new();
    for (i, expected) in ["yes", "no", "yes"].iter().enumerate() {
        let r = crate::common::send(
            reqwest::Client::new()
                .post(ui.url("/v1/sandbox/scenarios"))
                .bearer_auth(&ada_op)
                .json(&json!({"name": format!("s{i}"), "steps": [{"input": "a", "expected": expected}],
                              "mocks": [{"resource": "a", "response": "yes"}]})),
        )
        .await;
        scenarios.push(r.json()["id"].as_str().unwrap().to_owned());
    }
    let cmp = crate::common::send(
        reqwest::Client::new()
            .post(ui.url("/v1/sandbox/comparisons"))
            .bearer_auth(&ada_op)
            .json(&json!({"baseline": {"variant": "a"}, "candidate": {"variant": "b"}, "scenarios": scenarios})),
    )
    .await;
    let cmp_id = cmp.json()["id"].as_str().unwrap().to_owned();
    c.goto(&ui.url("/ui/runs")).await.unwrap();
    assert_eq!(c.find_all(Locator::Css("tbody tr")).await.unwrap().len(), 6);
    screenshot(&c, "05b-runs").await;
    c.goto(&ui.url(&format!("/ui/comparisons/{cmp_id}")))
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("svg.chart"))
        .await
        .unwrap();
    screenshot(&c, "05c-comparison").await;

    // Agent sessions: ada's one session and its events.
    let sid = "0199ab00-0000-7000-8000-0000000000aa";
    ui.ada_session(sid).await;
    ui.say(sid, json!({"type": "message", "text": "done"}), 2_000)
        .await;
    c.goto(&ui.url("/ui/sessions")).await.unwrap();
    c.find(Locator::Css(&format!("a[href='/ui/sessions/{sid}']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&c, &format!("/ui/sessions/{sid}")).await;
    screenshot(&c, "05d-agent-session").await;
    // A turn's new event appears without a reload, after the one shown, and is announced.
    ui.say(
        sid,
        json!({"type": "message", "text": "a new turn's <b>reply</b>"}),
        3_000,
    )
    .await;
    let fresh = c
        .wait()
        .at_most(Duration::from_secs(15))
        .for_element(Locator::Css("#session-events li[value='2']"))
        .await
        .unwrap();
    assert!(
        fresh
            .text()
            .await
            .unwrap()
            .contains("a new turn's <b>reply</b>"),
        "shown as text"
    );
    let order = c
        .execute(
            "return Array.from(document.querySelectorAll('#session-events li')).map(function (l) { return l.value; });",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(order, json!([1, 2]), "appended once, in order");
    assert_eq!(
        c.find(Locator::Css("#session-live"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "1 new event(s)."
    );
    screenshot(&c, "05e-agent-session-live").await;

    // At 320 px: nothing wider than the screen, the buttons still there.
    let late = action_id(&call("narrow").await);
    c.set_window_size(320, 800).await.unwrap();
    for (path, shot) in [
        (format!("/ui/sessions/{sid}"), "06b-agent-session-320px"),
        ("/ui/inbox".to_owned(), "06-inbox-320px"),
    ] {
        c.goto(&ui.url(&path)).await.unwrap();
        let fits = c
            .execute(
                "return [document.documentElement.scrollWidth, window.innerWidth];",
                vec![],
            )
            .await
            .unwrap();
        assert!(
            fits[0].as_u64().unwrap() <= fits[1].as_u64().unwrap(),
            "{path} scrolls sideways at 320 px: {fits}"
        );
        screenshot(&c, shot).await;
    }
    c.find(Locator::Css(&format!("article#action-{late} button.deny")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("p.note"))
        .await
        .unwrap();
    assert!(call("narrow").await.text.contains("confirmation.denied"));
    c.set_window_size(1280, 900).await.unwrap();

    // Sign-out: back to the sign-in, and the inbox is out of reach.
    sign_out(&c).await;
    c.goto(&ui.url("/ui/inbox")).await.unwrap();
    wait_path(&c, "/ui/login").await;

    // A viewer: no action, no approve button.
    let pending = action_id(&call("again").await);
    sign_in(&c, &ui, &human("vic", &["viewer"]), None).await;
    assert!(
        c.find_all(Locator::Css("button.approve"))
            .await
            .unwrap()
            .is_empty()
    );
    screenshot(&c, "07-viewer").await;
    sign_out(&c).await;
    // An admin service: sees ada's action, can deny, cannot approve.
    sign_in(&c, &ui, &service("ops-bot", &["admin"]), None).await;
    c.find(Locator::Css(&format!(
        "article#action-{pending} button.deny"
    )))
    .await
    .unwrap();
    assert!(
        c.find_all(Locator::Css("button.approve"))
            .await
            .unwrap()
            .is_empty()
    );
    screenshot(&c, "08-service-admin").await;
    sign_out(&c).await;
    assert_eq!(
        header(&ui.get("/ui/login").await, "x-frame-options"),
        "DENY"
    );
    c.close().await.unwrap();
}

/// Attack (a moving target): ada reaches for the Approve of an action she has read; just
/// before her click, her agent raises another, the inbox refreshes in place, and the new
/// action (newest first) is now under the pointer, so her click approves arguments she never
/// saw. A decision posted within a moment of the list changing is ignored; once the list has
/// been still that long, the same click goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_an_action_that_just_moved_under_the_pointer_decides_nothing() {
    let Some((chromium, driver_bin)) = browser() else {
        return;
    };
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let agent = delegated("ada", "planner", &["operator"]);
    let call = |word: &'static str| {
        let agent = agent.clone();
        let url = ui.url("/ops/ledger.append");
        async move {
            crate::common::send(
                reqwest::Client::new()
                    .post(url)
                    .bearer_auth(agent)
                    .json(&json!({"word": word})),
            )
            .await
        }
    };
    let driver = start_driver(&driver_bin).await;
    let profile = tempfile::tempdir().unwrap();
    let c = open_browser(&chromium, &driver, profile.path()).await;
    let read = action_id(&call("harmless").await);
    sign_in(&c, &ui, &human("ada", &["operator"]), None).await;
    c.find(Locator::Css(&format!(
        "article#action-{read} button.approve"
    )))
    .await
    .unwrap();
    let unseen = action_id(&call("unseen").await);
    let card = format!("article#action-{unseen}");
    let until = Instant::now() + Duration::from_secs(15);
    while c.find(Locator::Css(&card)).await.is_err() {
        assert!(Instant::now() < until, "the new action never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first Approve of the list (where the read one was) is now the unseen action's.
    let top = c
        .find(Locator::Css("#inbox-items button.approve"))
        .await
        .unwrap();
    let form = top.find(Locator::XPath("..")).await.unwrap();
    assert_eq!(
        form.attr("action").await.unwrap().as_deref(),
        Some(format!("/ui/actions/{unseen}/decision").as_str())
    );
    top.click().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let url = c.current_url().await.unwrap();
    assert_eq!(url.query(), None, "the click decided something: {url}");
    assert_eq!(call("unseen").await.status, 202, "still pending");
    // The list has been still for a while: the same click approves.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    c.find(Locator::Css(&format!("{card} button.approve")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&c, "/ui/inbox").await;
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("p.note"))
        .await
        .unwrap();
    assert_eq!(call("unseen").await.status, 200);
    assert_eq!(f.ledger_lines(), vec!["unseen"]);
    c.close().await.unwrap();
}
