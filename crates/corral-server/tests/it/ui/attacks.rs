//! The console attacked (issue 19's review): each test is one attempt to approve what one
//! should not, run script in a reader's page, forge or outlive a session, or exhaust the
//! server through `/ui`; each asserts the attack fails.

use serde_json::json;

use super::{Session, Ui, assert_refused, header, plain_ui};
use crate::common::send;
use crate::guard_fixture::{Fixture, JWT_SECRET, action_id, human};

fn sign(claims: serde_json::Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Attack: arguments that carry invisible characters outside the bidi and zero-width set
/// (variation selectors, which can smuggle any bytes; Hangul fillers; the combining grapheme
/// joiner; the line separator) so the approver reads `a.txt` while something else runs. Each
/// must be shown as a marked `\u{...}`, never as itself.
#[tokio::test]
async fn every_default_ignorable_character_in_the_arguments_is_shown_marked() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let agent = crate::guard_fixture::delegated("ada", "planner", &["operator"]);
    let hidden = [
        '\u{034F}',
        '\u{115F}',
        '\u{1160}',
        '\u{17B4}',
        '\u{180B}',
        '\u{2028}',
        '\u{2029}',
        '\u{3164}',
        '\u{FE0F}',
        '\u{FFA0}',
        '\u{1D173}',
        '\u{E0100}',
        '\u{E01EF}',
    ];
    let content: String = std::iter::once('a')
        .chain(hidden.iter().copied())
        .chain("b".chars())
        .collect();
    let r = send(
        ui.client
            .post(ui.url("/ops/files.write"))
            .bearer_auth(&agent)
            .json(&json!({"path": f.ws.at("a.txt"), "content": content})),
    )
    .await;
    let id = action_id(&r);
    let s = ui.sign_in(&human("ada", &["operator"])).await;
    let items = s.get("/ui/inbox/items").await.text;
    assert!(items.contains(&format!("id=\"action-{id}\"")), "{items}");
    for c in hidden {
        assert!(!items.contains(c), "{:04X} shown as itself", u32::from(c));
        assert!(
            items.contains(&format!("\\u{{{:04X}}}</span>", u32::from(c))),
            "{:04X} not marked: {items}",
            u32::from(c)
        );
    }
}

/// Attack: a JWT whose `nbf` is tomorrow (minted ahead for a later window, or stolen before
/// it is valid) signs in today. Refused, at the console as at the API.
#[tokio::test]
async fn a_jwt_not_valid_yet_signs_in_nowhere() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let early = sign(json!({
        "sub": "ada", "roles": ["operator"], "exp": now_secs() + 7200, "nbf": now_secs() + 3600,
    }));
    let r = ui.login(&early, &[]).await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(
        r.text.contains("<code class=\"code\">auth.invalid</code>"),
        "{}",
        r.text
    );
    assert!(r.headers.get("set-cookie").is_none());
    let api = send(ui.client.get(ui.url("/ops")).bearer_auth(&early)).await;
    assert_eq!(api.status, 401, "{}", api.text);
    // A JWT valid since a minute ago still signs in.
    let now = sign(json!({
        "sub": "ada", "roles": ["operator"], "exp": now_secs() + 7200, "nbf": now_secs() - 60,
    }));
    ui.sign_in(&now).await;
}

/// Attack: an admin of another tenant (and a viewer of this one) decides an action by its id,
/// with its own valid session and CSRF token. Someone else's action is no action.
#[tokio::test]
async fn another_tenants_admin_neither_sees_nor_decides_an_action() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let agent = sign(json!({
        "sub": "ada", "act": {"sub": "planner"}, "roles": ["operator"], "tenant": "t1",
        "exp": now_secs() + 3600,
    }));
    let id = action_id(&plain_ui(&ui, &agent, json!({"word": "tenant"})).await);
    let other = ui
        .sign_in(&sign(json!({
            "sub": "root", "roles": ["admin"], "tenant": "t2", "exp": now_secs() + 3600,
        })))
        .await;
    assert!(!other.get("/ui/inbox/items").await.text.contains(&id));
    let csrf = other.csrf().await;
    for decision in ["approve", "deny"] {
        assert_refused(
            &other.decide(&id, decision, &csrf).await,
            404,
            "confirmation.not_found",
        );
    }
    // The same person's name in another tenant is another person.
    let ada_t2 = ui
        .sign_in(&sign(json!({
            "sub": "ada", "roles": ["operator"], "tenant": "t2", "exp": now_secs() + 3600,
        })))
        .await;
    let csrf = ada_t2.csrf().await;
    assert_refused(
        &ada_t2.decide(&id, "approve", &csrf).await,
        404,
        "confirmation.not_found",
    );
    // Still pending for ada of t1.
    let ada = ui
        .sign_in(&sign(json!({
            "sub": "ada", "roles": ["operator"], "tenant": "t1", "exp": now_secs() + 3600,
        })))
        .await;
    let items = ada.get("/ui/inbox/items").await.text;
    assert!(items.contains(&format!("id=\"action-{id}\"")), "{items}");
    assert!(items.contains("class=\"approve\""), "{items}");
    assert!(f.ledger_lines().is_empty());
}

/// Attacks on the decision form: a GET with the fields in the query (a link or an image),
/// a cross-site form's `text/plain` and `multipart/form-data` bodies (no preflight), a method
/// override field or header, the session's token in the query instead of the body. None
/// decides anything.
#[tokio::test]
async fn no_method_override_content_type_or_get_decides_an_action() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let agent = crate::guard_fixture::delegated("ada", "planner", &["operator"]);
    let id = action_id(&plain_ui(&ui, &agent, json!({"word": "forged"})).await);
    let s = ui.sign_in(&human("ada", &["operator"])).await;
    let csrf = s.csrf().await;
    let path = format!("/ui/actions/{id}/decision");
    let get = s.get(&format!("{path}?csrf={csrf}&decision=approve")).await;
    assert!(matches!(get.status, 401 | 405), "{}", get.text);
    let with = |ct: &'static str, body: String, extra: Option<(&'static str, &'static str)>| {
        let mut rb = ui
            .client
            .post(ui.url(&path))
            .header("cookie", &s.cookie)
            .header("sec-fetch-site", "same-origin")
            .header("content-type", ct)
            .body(body);
        if let Some((k, v)) = extra {
            rb = rb.header(k, v);
        }
        send(rb)
    };
    let fields = format!("csrf={csrf}&decision=approve");
    assert_refused(
        &with("text/plain", fields.clone(), None).await,
        400,
        "ui.form_invalid",
    );
    let multipart = format!(
        "--b\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n{csrf}\r\n--b\r\n\
         Content-Disposition: form-data; name=\"decision\"\r\n\r\napprove\r\n--b--\r\n"
    );
    assert_refused(
        &with("multipart/form-data; boundary=b", multipart, None).await,
        400,
        "ui.form_invalid",
    );
    assert_refused(
        &with(
            "application/x-www-form-urlencoded",
            format!("{fields}&_method=POST"),
            None,
        )
        .await,
        400,
        "ui.form_invalid",
    );
    // The token in the query, not the form.
    let q = send(
        ui.client
            .post(ui.url(&format!("{path}?csrf={csrf}")))
            .header("cookie", &s.cookie)
            .header("sec-fetch-site", "same-origin")
            .form(&[("decision", "approve")]),
    )
    .await;
    assert_refused(&q, 403, "ui.csrf_failed");
    // A header override on a GET of the inbox changes nothing either.
    let o = send(
        ui.client
            .get(ui.url(&format!("{path}?csrf={csrf}&decision=approve")))
            .header("cookie", &s.cookie)
            .header("x-http-method-override", "POST"),
    )
    .await;
    assert!(matches!(o.status, 401 | 405), "{}", o.text);
    // An origin that only starts like this host's.
    let host = ui.base.trim_start_matches("http://").to_owned();
    let lookalike = format!("http://{host}.evil.example");
    let r = s
        .post(
            &path,
            &[("csrf", &csrf), ("decision", "approve")],
            &[("origin", &lookalike)],
        )
        .await;
    assert_refused(&r, 403, "ui.csrf_failed");
    let items = s.get("/ui/inbox/items").await.text;
    assert!(
        items.contains(&format!("id=\"action-{id}\"")),
        "still pending: {items}"
    );
    assert!(f.ledger_lines().is_empty());
}

/// Attacks on the session: a session id planted in the victim's browser before sign-in
/// (fixation) is never adopted, and ends; more than 16 sign-ins of one identity end the
/// oldest; sign-in never redirects where the request says; an oversized form is refused
/// before it is parsed.
#[tokio::test]
async fn a_planted_session_is_never_adopted_and_one_identity_keeps_sixteen() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    // Nineteen sign-ins in a few seconds: past the sign-in limiter's default.
    ui.state.set_sign_in_limit(100);
    let mallory = ui.sign_in(&human("mallory", &["operator"])).await;
    let ada = human("ada", &["operator"]);
    let r = send(
        ui.client
            .post(ui.url("/ui/login?next=https://evil.example/"))
            .header("cookie", &mallory.cookie)
            .header("sec-fetch-site", "same-origin")
            .form(&[("token", ada.as_str())]),
    )
    .await;
    assert_eq!(
        (r.status, header(&r, "location").as_str()),
        (303, "/ui/inbox"),
        "{}",
        r.text
    );
    let set = header(&r, "set-cookie");
    let fresh = set.split(';').next().unwrap().to_owned();
    assert_ne!(fresh, mallory.cookie, "the planted id is not adopted");
    // The planted session ended with it: the victim's browser is not left signed in as
    // mallory anywhere, and mallory's copy is worthless.
    assert_refused(
        &mallory.get("/ui/inbox/items").await,
        401,
        "ui.session_invalid",
    );
    let page = Session {
        ui: &ui,
        cookie: fresh,
    }
    .get("/ui/ops")
    .await;
    assert!(
        page.text.contains("Signed in as <strong>ada</strong>"),
        "{}",
        page.text
    );

    // Sixteen live sessions per identity: the seventeenth sign-in ends the oldest.
    let first = ui.sign_in(&ada).await;
    let mut rest = Vec::new();
    for _ in 0..16 {
        rest.push(ui.sign_in(&ada).await);
    }
    assert_refused(
        &first.get("/ui/inbox/items").await,
        401,
        "ui.session_invalid",
    );
    for s in &rest {
        assert_eq!(s.get("/ui/inbox/items").await.status, 200);
    }

    // A 1 MiB sign-in form: refused, not parsed.
    let big = "a".repeat(1 << 20);
    let r = send(
        ui.client
            .post(ui.url("/ui/login"))
            .header("sec-fetch-site", "same-origin")
            .form(&[("token", big.as_str())]),
    )
    .await;
    assert_refused(&r, 400, "ui.form_invalid");
}

/// Attack: a JWT minted with a signing key that leaked keeps its console session after the
/// operator rotates the key (the JWT config's issuer is unchanged). The session is bound to
/// the key it was verified with, so it ends at its next request; a reload with the same key
/// keeps it.
#[tokio::test]
async fn a_jwt_session_ends_when_the_signing_key_is_rotated() {
    let f = Fixture::new();
    let yaml = f.yaml("", "");
    let ui = Ui::start(&f.load(&yaml)).await;
    let forged = ui.sign_in(&human("ada", &["admin"])).await;
    assert_eq!(forged.get("/ui/inbox/items").await.status, 200);
    let same = f.load(&yaml);
    let auth = corral_runtime::compose::authenticator(&same).unwrap();
    ui.state.runtime().reload(&same, auth).await.unwrap();
    assert_eq!(forged.get("/ui/inbox/items").await.status, 200);
    let rotated = f.ws.load(
        &yaml,
        &[(
            crate::guard_fixture::JWT_ENV,
            "rotated-0123456789abcdef0123456789abcdef",
        )],
    );
    let auth = corral_runtime::compose::authenticator(&rotated).unwrap();
    ui.state.runtime().reload(&rotated, auth).await.unwrap();
    assert_refused(
        &forged.get("/ui/inbox/items").await,
        401,
        "ui.session_invalid",
    );
    assert_eq!(
        header(&forged.get("/ui/ops").await, "location"),
        "/ui/login"
    );
}

/// Attack: an agent's delegated JWT whose `act` claim names its actor without a `sub` (RFC
/// 8693 lets the actor be identified by other claims, e.g. `client_id`), or is not an object at
/// all, passed for the person herself: no `act` chain, kind human, so it could approve its own
/// actions from the console. A token with any `act` claim is a delegate.
#[tokio::test]
async fn a_delegated_jwt_whose_act_has_no_sub_cannot_approve() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    for (word, act) in [
        ("one", json!({"client_id": "planner"})),
        ("two", json!("planner")),
        ("three", json!({})),
    ] {
        let agent = sign(json!({
            "sub": "ada", "act": act, "roles": ["operator"], "exp": now_secs() + 3600,
        }));
        let id = action_id(&plain_ui(&ui, &agent, json!({"word": word})).await);
        let s = ui.sign_in(&agent).await;
        let page = s.get("/ui/ops").await.text;
        assert!(page.contains("(delegated,"), "{act}: {page}");
        let items = s.get("/ui/inbox/items").await.text;
        assert!(items.contains(&format!("id=\"action-{id}\"")), "{items}");
        assert!(!items.contains("class=\"approve\""), "{act}: {items}");
        let csrf = s.csrf().await;
        assert_refused(
            &s.decide(&id, "approve", &csrf).await,
            403,
            "confirmation.approver_refused",
        );
        // The API refuses it the same way.
        let api = send(
            ui.client
                .post(ui.url(&format!("/confirmations/{id}/decision")))
                .bearer_auth(&agent)
                .json(&json!({"decision": "approve"})),
        )
        .await;
        assert_eq!(api.status, 403, "{}", api.text);
        let deny = s.decide(&id, "deny", &csrf).await;
        assert_eq!(deny.status, 303, "{}", deny.text);
    }
    assert!(f.ledger_lines().is_empty());
}

/// Attacks on a decision that has gone through: the same POST replayed (a double click, a
/// resent form, a copied request), a sibling site's tossed cookie beside the real one, and a
/// request a browser marks as typed in (`Sec-Fetch-Site: none`). The action is decided once;
/// the rest is refused.
#[tokio::test]
async fn a_replayed_decision_a_tossed_cookie_and_a_typed_in_post_decide_nothing_more() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let agent = crate::guard_fixture::delegated("ada", "planner", &["operator"]);
    let id = action_id(&plain_ui(&ui, &agent, json!({"word": "once"})).await);
    let s = ui.sign_in(&human("ada", &["operator"])).await;
    let csrf = s.csrf().await;
    let path = format!("/ui/actions/{id}/decision");
    let typed = s
        .post(
            &path,
            &[("csrf", &csrf), ("decision", "approve")],
            &[("sec-fetch-site", "none")],
        )
        .await;
    assert_refused(&typed, 403, "ui.csrf_failed");
    let mallory = ui.sign_in(&human("mallory", &["operator"])).await;
    let tossed = Session {
        ui: &ui,
        cookie: format!("{}; {}", mallory.cookie, s.cookie),
    };
    assert_refused(
        &tossed
            .post(
                &path,
                &[("csrf", &csrf), ("decision", "approve")],
                &[("sec-fetch-site", "same-origin")],
            )
            .await,
        401,
        "ui.session_invalid",
    );
    assert_eq!(s.decide(&id, "approve", &csrf).await.status, 303);
    for decision in ["approve", "deny"] {
        assert_refused(
            &s.decide(&id, decision, &csrf).await,
            409,
            "confirmation.already_decided",
        );
    }
    assert_eq!(
        plain_ui(&ui, &agent, json!({"word": "once"})).await.status,
        200
    );
    assert_eq!(f.ledger_lines(), vec!["once"]);
}

/// Attack: script in JWT claims the pages show (roles in the frame, the tenant on the audit
/// page, the `sub` everywhere) and in a query string a page reflects. All escaped; no page
/// carries markup from them.
#[tokio::test]
async fn hostile_jwt_claims_and_query_strings_are_shown_as_text() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&f.yaml("", ""))).await;
    let token = sign(json!({
        "sub": "<svg/onload=alert(1)>", "tenant": "\"><img src=x onerror=alert(2)>",
        "roles": ["admin", "'><script>alert(3)</script>"], "exp": now_secs() + 3600,
    }));
    let s = ui.sign_in(&token).await;
    for path in [
        "/ui/inbox?done=%3Cscript%3Ealert(4)%3C/script%3E",
        "/ui/ops",
        "/ui/audit?principal=%3Csvg/onload%3Dalert(5)%3E",
        "/ui/runs?after=%3Cscript%3E",
        "/ui/sessions/%3Cscript%3Ealert(6)%3C%2Fscript%3E",
        "/ui/runs/%3Cimg%20src%3Dx%20onerror%3Dalert(7)%3E",
        "/ui/nowhere%3Cscript%3E",
    ] {
        let r = s.get(path).await;
        super::assert_console_headers(&r);
        super::assert_no_inline_code(&r.text);
        for bad in ["<svg", "<img", "<script>alert"] {
            assert!(!r.text.contains(bad), "{path}: {bad} in {}", r.text);
        }
    }
    let ops = s.get("/ui/ops").await.text;
    assert!(ops.contains("&lt;svg/onload=alert(1)&gt;"), "{ops}");
    assert!(
        ops.contains("&#39;&gt;&lt;script&gt;alert(3)&lt;/script&gt;"),
        "{ops}"
    );
}
