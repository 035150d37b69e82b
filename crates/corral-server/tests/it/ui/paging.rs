//! The console past its first page, and an agent session's live events, over HTTP: the Older
//! links carry the API's own cursors (and the page's filters), a bad cursor is the API's `400`
//! as a page, and the events fragment `console.js` polls gives the events after a number to
//! the session's owner only, with the session's status.

use serde_json::json;

use super::{Session, Ui, assert_no_inline_code, assert_refused, header};
use crate::common::send;
use crate::guard_fixture::{Fixture, delegated, human};

/// The href of the page's `rel` link (`next`: Older, `prev`: Newer), unescaped.
fn link(html: &str, rel: &str) -> Option<String> {
    let end = html.find(&format!("\" rel=\"{rel}\">"))?;
    let start = html[..end].rfind("href=\"")? + 6;
    Some(html[start..end].replace("&amp;", "&"))
}

/// Ada's agent session `id`, with `events` events stored.
async fn session_with(ui: &Ui, id: &str, events: usize) {
    ui.ada_session(id).await;
    append(ui, id, events).await;
}

async fn append(ui: &Ui, id: &str, n: usize) {
    for i in 0..n {
        ui.say(id, json!({"text": format!("m{i}")}), 2_000).await;
    }
}

#[tokio::test]
async fn a_sessions_new_events_come_from_its_fragment_to_its_owner_only_until_it_fails() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let id = "0199ab00-0000-7000-8000-0000000000b1";
    session_with(&ui, id, 2).await;
    let ada = ui.sign_in(&human("ada", &["operator"])).await;
    let page = ada.get(&format!("/ui/sessions/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_no_inline_code(&page.text);
    // The page is live: the script polls the fragment for what comes after the last shown.
    assert!(
        page.text.contains(&format!(
            "id=\"session-events\" data-src=\"/ui/sessions/{id}/items\" data-after=\"2\""
        )),
        "{}",
        page.text
    );
    append(&ui, id, 1).await;
    let items = ada.get(&format!("/ui/sessions/{id}/items?after=2")).await;
    assert_eq!(items.status, 200, "{}", items.text);
    assert_eq!(header(&items, "x-corral-session-status"), "idle");
    assert!(items.text.starts_with("<li value=\"3\">"), "{}", items.text);
    assert!(items.text.contains("m0"), "{}", items.text);
    assert!(!items.text.contains("value=\"2\""), "{}", items.text);
    let none = ada.get(&format!("/ui/sessions/{id}/items?after=3")).await;
    assert_eq!((none.status, none.text.as_str()), (200, ""));
    // The script reads it so.
    let js = ui.get("/ui/static/console.js").await.text;
    for wired in [
        "session-events",
        "data-after",
        "x-corral-session-status",
        "insertAdjacentHTML",
    ] {
        assert!(js.contains(wired), "console.js lacks {wired}");
    }

    // Someone else's session is the page's 404; bad queries the API's 400s.
    let bo = ui.sign_in(&human("bo", &["admin"])).await;
    assert_refused(
        &bo.get(&format!("/ui/sessions/{id}/items?after=0")).await,
        404,
        "agents.not_found",
    );
    assert_refused(
        &ada.get("/ui/sessions/nope/items").await,
        404,
        "agents.not_found",
    );
    assert_refused(
        &ada.get(&format!("/ui/sessions/{id}/items?after=x")).await,
        400,
        "agents.invalid",
    );
    assert_refused(
        &ada.get(&format!("/ui/sessions/{id}?after=-1")).await,
        400,
        "agents.invalid",
    );
    assert_refused(
        &ada.get(&format!("/ui/sessions/{id}/items?limit=5")).await,
        400,
        "args.unknown",
    );

    // A failed session: the fragment says so (the script stops), and the page is not live.
    ui.store.claim_turn("default", id, 3_000).await.unwrap();
    let end = corral_store::agents::TurnEnd {
        status: "failed".to_owned(),
        error: Some(("agents.cancelled".to_owned(), "stopped".to_owned())),
        usage: json!(null),
        attestation: json!(null),
        cli_thread: None,
    };
    ui.store
        .end_turn("default", id, 1, &end, 4_000)
        .await
        .unwrap();
    let items = ada.get(&format!("/ui/sessions/{id}/items?after=3")).await;
    assert_eq!(header(&items, "x-corral-session-status"), "failed");
    let page = ada.get(&format!("/ui/sessions/{id}")).await;
    assert!(!page.text.contains("data-src="), "{}", page.text);
    assert!(!page.text.contains("session-live"), "{}", page.text);
}

#[tokio::test]
async fn a_sessions_events_and_the_sessions_list_page_with_the_apis_cursors() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let id = "0199ab00-0000-7000-8000-0000000000b2";
    session_with(&ui, id, 250).await;
    let ada = ui.sign_in(&human("ada", &["operator"])).await;
    let newest = ada.get(&format!("/ui/sessions/{id}")).await;
    assert!(newest.text.contains("<li value=\"51\">"), "{}", newest.text);
    assert!(newest.text.contains("<li value=\"250\">"));
    assert!(!newest.text.contains("<li value=\"50\">"));
    assert_eq!(link(&newest.text, "prev"), None, "the newest page");
    let older = link(&newest.text, "next").unwrap();
    assert_eq!(older, format!("/ui/sessions/{id}?after=0"));
    let first = ada.get(&older).await;
    assert!(first.text.contains("<li value=\"1\">"), "{}", first.text);
    assert!(first.text.contains("<li value=\"200\">"));
    assert!(!first.text.contains("<li value=\"201\">"));
    assert!(!first.text.contains("data-src="), "an old page is not live");
    assert_eq!(link(&first.text, "next"), None, "the oldest page");
    let newer = link(&first.text, "prev").unwrap();
    let last = ada.get(&newer).await;
    assert!(last.text.contains("<li value=\"201\">"), "{}", last.text);
    assert!(last.text.contains("data-after=\"250\""), "{}", last.text);

    // 101 sessions: the list's Older link carries `GET /v1/agents/sessions`'s cursor.
    for i in 0..100 {
        session_with(&ui, &format!("0199ab00-0000-7000-8000-{i:012}"), 0).await;
    }
    let list = ada.get("/ui/sessions").await;
    assert_eq!(list.text.matches("<tr><td><a href=").count(), 100);
    let older = link(&list.text, "next").unwrap();
    assert!(older.starts_with("/ui/sessions?after="), "{older}");
    let rest = ada.get(&older).await;
    assert_eq!(rest.status, 200, "{}", rest.text);
    assert_eq!(rest.text.matches("<tr><td><a href=").count(), 1);
    assert_eq!(link(&rest.text, "next"), None);
    assert_refused(
        &ada.get("/ui/sessions?after=garbage").await,
        400,
        "agents.invalid",
    );
    assert_refused(&ada.get("/ui/sessions?x=1").await, 400, "args.unknown");
}

/// Room for 101 pending actions.
const MANY_PENDING: &str = "guardrails: {max_pending: 200}\n";

/// 101 actions raised by ada's agent: the inbox and the audit page past their first page, the
/// audit's filters kept in its Older link, and `GET /audit`'s own cursor.
async fn inbox_and_audit_page_through(ui: &Ui) {
    let agent = delegated("ada", "planner", &["operator"]);
    let client = reqwest::Client::new();
    for i in 0..101 {
        let r = send(
            client
                .post(ui.url("/ops/ledger.append"))
                .bearer_auth(&agent)
                .json(&json!({"word": format!("w{i}")})),
        )
        .await;
        assert_eq!(r.status, 202, "{}", r.text);
    }
    let ada_token = human("ada", &["admin"]);
    let ada = ui.sign_in(&ada_token).await;
    let inbox = ada.get("/ui/inbox").await;
    assert_eq!(inbox.text.matches("<article class=\"action\"").count(), 50);
    let older = link(&inbox.text, "next").unwrap();
    assert!(older.starts_with("/ui/inbox?after="), "{older}");
    let second = ada.get(&older).await;
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(second.text.matches("<article class=\"action\"").count(), 50);
    // An older page polls its own list.
    let cursor = older.trim_start_matches("/ui/inbox?");
    assert!(
        second
            .text
            .contains(&format!("data-src=\"/ui/inbox/items?{cursor}\"")),
        "{}",
        second.text
    );
    let third = ada.get(&link(&second.text, "next").unwrap()).await;
    assert_eq!(third.text.matches("<article class=\"action\"").count(), 1);
    assert_eq!(link(&third.text, "next"), None);
    assert_refused(&ada.get("/ui/inbox?after=nope").await, 400, "args.invalid");
    assert_refused(
        &ada.get("/ui/inbox/items?after=nope").await,
        400,
        "args.invalid",
    );

    let audit = ada.get("/ui/audit?op=ledger.append").await;
    assert_eq!(audit.status, 200, "{}", audit.text);
    assert_eq!(
        audit.text.matches("<code>ledger.append</code>").count(),
        100
    );
    let older = link(&audit.text, "next").unwrap();
    assert!(
        older.starts_with("/ui/audit?op=ledger.append&after="),
        "the filter is kept: {older}"
    );
    let rest = ada.get(&older).await;
    assert_eq!(rest.status, 200, "{}", rest.text);
    assert_eq!(rest.text.matches("<code>ledger.append</code>").count(), 1);
    assert_eq!(link(&rest.text, "next"), None);
    assert_refused(
        &ada.get("/ui/audit?after=garbage").await,
        400,
        "args.invalid",
    );

    // The API pages the same way.
    let api = |q: String| {
        let (client, url, token) = (client.clone(), ui.url(&format!("/audit?{q}")), &ada_token);
        async move { send(client.get(url).bearer_auth(token)).await }
    };
    let page = api("op=ledger.append&limit=60".to_owned()).await.json();
    assert_eq!(page["events"].as_array().unwrap().len(), 60);
    let next = page["next"].as_str().unwrap().to_owned();
    let q = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("op", "ledger.append")
        .append_pair("limit", "60")
        .append_pair("after", &next)
        .finish();
    let page2 = api(q).await.json();
    assert_eq!(page2["events"].as_array().unwrap().len(), 41);
    assert_eq!(page2["next"], json!(null));
    let mut ids: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .chain(page2["events"].as_array().unwrap())
        .map(|e| e["request_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 101, "every event once");
    let bad = api("after=12".to_owned()).await;
    assert_eq!(
        (bad.status, bad.json()["code"].clone()),
        (400, json!("args.invalid"))
    );
}

#[tokio::test]
async fn the_inbox_and_the_audit_page_past_their_first_page() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", MANY_PENDING))).await;
    inbox_and_audit_page_through(&ui).await;
}

#[tokio::test]
async fn the_inbox_and_the_audit_page_past_their_first_page_on_postgres() {
    let Some(schema) = crate::pg::Schema::create("ui_paging").await else {
        return;
    };
    let f = Fixture::new();
    let yaml = f.yaml(
        "",
        &format!("storage: {{url: \"{}\"}}\n{MANY_PENDING}", schema.url),
    );
    let ui = Ui::start(&f.load(&yaml)).await;
    assert_eq!(ui.store.backend_name(), "postgres");
    inbox_and_audit_page_through(&ui).await;
    drop(ui);
    schema.drop().await;
}

/// The lab's listings keep their filter (`scenario`, as `/v1/sandbox/runs`) and refuse what
/// the API refuses.
#[tokio::test]
async fn the_lab_listings_take_the_apis_cursor_and_filter() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", "sandbox: {enabled: true}\n"))).await;
    let s: Session<'_> = ui.sign_in(&human("ada", &["operator"])).await;
    let runs = s.get("/ui/runs?scenario=nope").await;
    assert_eq!(runs.status, 200, "{}", runs.text);
    assert!(runs.text.contains("No run yet."), "{}", runs.text);
    assert_refused(
        &s.get("/ui/comparisons?scenario=x").await,
        400,
        "args.unknown",
    );
    assert_refused(&s.get("/ui/comparisons?after=x").await, 400, "args.invalid");
}
