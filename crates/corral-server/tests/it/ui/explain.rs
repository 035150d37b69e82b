//! The console's explain page (`/ui/explain`, issue 19 item 5): what the server would answer
//! the signed-in principal for a call, as `corral explain` decides it: allowed with its rule,
//! allowed after confirmation, refused with the deny rule and the fix; hostile op ids and
//! arguments shown as text; only for the signed-in principal; linked from the ops view.

use super::{Session, Ui, assert_refused, fixture, header};
use crate::guard_fixture::{Fixture, human};

/// The fixture's config plus a deny rule (with a hostile reason) over a secret directory.
fn with_deny(f: &Fixture) -> String {
    let secret = f.ws.root.join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    f.yaml(
        &format!(
            "  - name: no-secrets\n    deny: [files.read]\n    paths: {{roots: [{}]}}\n    reason: \"the <b>secret</b> dir\"\n",
            secret.display()
        ),
        "",
    )
}

/// Posts the explain form as the console's own page would.
async fn explain(s: &Session<'_>, op: &str, args: &str) -> super::Reply {
    let csrf = s.csrf().await;
    s.post(
        "/ui/explain",
        &[("csrf", &csrf), ("op", op), ("args", args)],
        &[("sec-fetch-site", "same-origin"), ("origin", "null")],
    )
    .await
}

#[tokio::test]
async fn explain_shows_allowed_with_its_rule_after_confirmation_and_a_deny_rule_with_its_fix() {
    let f = Fixture::new();
    let ui = Ui::start(&f.load(&with_deny(&f))).await;
    let s = ui.sign_in(&human("ada", &["operator"])).await;

    let form = s.get("/ui/explain?op=ledger.peek").await;
    assert_eq!(form.status, 200, "{}", form.text);
    assert!(form.text.contains("value=\"ledger.peek\""), "{}", form.text);
    super::assert_no_inline_code(&form.text);

    let peek = explain(&s, "ledger.peek", "").await;
    assert_eq!(peek.status, 200, "{}", peek.text);
    assert!(
        peek.text.contains("<h2 id=\"decision\">Allowed</h2>"),
        "{}",
        peek.text
    );
    assert!(
        peek.text
            .contains("<dt>Rule</dt><dd><code>ledger</code></dd>"),
        "{}",
        peek.text
    );

    let append = explain(&s, "ledger.append", r#"{"word": "hi"}"#).await;
    assert_eq!(append.status, 200, "{}", append.text);
    assert!(
        append.text.contains("Allowed, after confirmation"),
        "{}",
        append.text
    );
    assert!(
        append.text.contains("<code>confirmation.required</code>"),
        "{}",
        append.text
    );
    assert!(
        append.text.contains("<code>ledger</code>"),
        "{}",
        append.text
    );
    // Nothing ran, nothing was raised.
    assert!(f.ledger_lines().is_empty());
    assert!(
        !s.get("/ui/inbox/items")
            .await
            .text
            .contains("ledger.append")
    );

    let path = f.ws.root.join("secret/key.txt");
    let args = format!(r#"{{"path": "{}"}}"#, path.display());
    let denied = explain(&s, "files.read", &args).await;
    assert_eq!(denied.status, 200, "{}", denied.text);
    assert!(
        denied.text.contains("Refused by a deny rule"),
        "{}",
        denied.text
    );
    assert!(
        denied.text.contains("<code>no-secrets</code>"),
        "{}",
        denied.text
    );
    assert!(
        denied.text.contains("<dt>How to fix</dt>"),
        "{}",
        denied.text
    );
    assert!(
        denied.text.contains("the &lt;b&gt;secret&lt;/b&gt; dir"),
        "{}",
        denied.text
    );
    assert!(!denied.text.contains("<b>secret"), "{}", denied.text);

    // A viewer: refused by RBAC before the policy, with the role it needs.
    let viewer = ui.sign_in(&human("vic", &["viewer"])).await;
    let rbac = explain(&viewer, "ledger.append", r#"{"word": "hi"}"#).await;
    assert!(
        rbac.text.contains("Refused by a guard step"),
        "{}",
        rbac.text
    );
    assert!(rbac.text.contains("rbac.denied"), "{}", rbac.text);
}

#[tokio::test]
async fn explain_escapes_hostile_op_ids_and_arguments_and_hides_ops_the_caller_cannot_see() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let s = ui.sign_in(&human("ada", &["operator"])).await;
    let evil = "<script>alert(1)</script>\u{202E}";

    let r = explain(&s, evil, r#"{"x": "</textarea><script>alert(2)</script>"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("not enabled for you"), "{}", r.text);
    assert!(r.text.contains("op.not_enabled"), "{}", r.text);
    assert!(!r.text.contains("<script>alert"), "{}", r.text);
    assert!(!r.text.contains("</textarea><script>"), "{}", r.text);
    assert!(r.text.contains("&lt;script&gt;alert(1)"), "{}", r.text);
    super::assert_no_inline_code(&r.text);
    // A reflected `?op=` is text too.
    let q = s
        .get("/ui/explain?op=%22%3E%3Cscript%3Ealert(3)%3C/script%3E")
        .await;
    assert!(!q.text.contains("<script>alert(3)"), "{}", q.text);

    // Arguments that do not fit: the API's codes, the hostile value escaped.
    let bad = explain(
        &s,
        "ledger.append",
        r#"{"word": "<img src=x onerror=alert(4)>"}"#,
    )
    .await;
    assert_refused(&bad, 400, "args.invalid");
    assert!(!bad.text.contains("<img src=x"), "{}", bad.text);
    assert_refused(
        &explain(&s, "ledger.append", "{not json").await,
        400,
        "args.malformed",
    );
    assert_refused(
        &explain(&s, "ledger.append", "[1]").await,
        400,
        "args.malformed",
    );
    let deep = format!("{}{}", "[".repeat(2_000), "]".repeat(2_000));
    assert_refused(
        &explain(&s, "ledger.append", &deep).await,
        400,
        "args.malformed",
    );

    // An op no rule mounts for the caller is not enabled, as the API's 404, and an arguments
    // error does not name its parameters. (A mounted op above the caller's tier is the API's
    // answer too: its arguments are parsed, then RBAC refuses it.)
    let hidden = explain(&s, "commands.run", r#"{"nope": 1}"#).await;
    assert_eq!(hidden.status, 200, "{}", hidden.text);
    assert!(hidden.text.contains("op.not_enabled"), "{}", hidden.text);
    assert!(!hidden.text.contains("args.unknown"), "{}", hidden.text);
    let drop = explain(&s, "ledger.drop", r#"{"word": "w"}"#).await;
    assert!(drop.text.contains("rbac.denied"), "{}", drop.text);

    // Only for the signed-in principal: the form has no principal, and one posted is refused.
    let csrf = s.csrf().await;
    let other = s
        .post(
            "/ui/explain",
            &[
                ("csrf", &csrf),
                ("op", "ledger.peek"),
                ("args", "{}"),
                ("principal", "root"),
            ],
            &[("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_refused(&other, 400, "ui.form_invalid");
    // No CSRF token, or from another site: refused.
    let forged = s.post("/ui/explain", &[("op", "ledger.peek")], &[]).await;
    assert_refused(&forged, 403, "ui.csrf_failed");
    let cross = s
        .post(
            "/ui/explain",
            &[("csrf", &csrf), ("op", "ledger.peek")],
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_refused(&cross, 403, "ui.csrf_failed");
    // Signed out: the sign-in.
    assert_eq!(
        header(&ui.get("/ui/explain").await, "location"),
        "/ui/login"
    );
}

#[tokio::test]
async fn the_ops_view_links_each_op_to_its_explanation() {
    let (f, yaml) = fixture();
    let ui = Ui::start(&f.load(&yaml)).await;
    let s = ui.sign_in(&human("ada", &["operator"])).await;
    let page = s.get("/ui/ops").await.text;
    assert!(page.contains("href=\"/ui/explain\""), "{page}");
    assert!(
        page.contains("href=\"/ui/explain?op=ledger.peek\""),
        "{page}"
    );
}
