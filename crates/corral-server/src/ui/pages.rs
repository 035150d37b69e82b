//! The console's pages: the approvals inbox (and its fragment, polled by `console.js`), the
//! decision form's handler, the audit tail and the ops view. Each reads through the same
//! functions as its API route (`Gateway::list_confirmations`, `Gateway::decide_confirmation`,
//! `Store::audit_matching`, `Deployment::callable_ops`), so the console can never let someone
//! do what the API would refuse them.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use corral_guard::confirm::Cursor;
use corral_guard::runs::RunPurpose;
use corral_policy::{PrincipalKind, codes, valid_run_id};
use corral_store::{AuditCursor, AuditFilter};
use serde_json::{Value, json};

use super::html::{esc, exact, page, pager, utc};
use super::{Signed, field, form, html_response, refuse};
use crate::AppState;

/// The most actions a page of the inbox shows (it is polled every 3 s, so it stays small).
const INBOX_LIMIT: u32 = 50;
/// The most audit events a page of the tail shows.
const AUDIT_LIMIT: u32 = 100;
/// The longest value of an audit filter, in bytes (as `GET /audit`).
const MAX_FILTER: usize = 256;

/// Whether the signed-in principal may approve `action`: the guard's own rule (the requester's
/// full identity, a person, no `act` chain), used only to leave the button out; the guard
/// decides again on every POST.
fn may_approve(s: &Signed, action: &Value) -> bool {
    let p = &s.caller.principal;
    action["requester_identity"].as_str() == Some(p.identity().as_str())
        && p.kind == PrincipalKind::Human
        && s.caller.act_chain.is_empty()
}

/// The inbox's list: one article per live action, with its decision forms, from `after` (the
/// API's cursor; `None`: the newest), and the link to the older ones.
async fn items(
    state: &AppState,
    s: &Signed,
    after: Option<&Cursor>,
) -> Result<String, Box<Response>> {
    let page = state
        .gateway()
        .list_confirmations(&s.caller, &s.request_id, after, INBOX_LIMIT)
        .await
        .map_err(|r| Box::new(refuse(r.code, &r.message, &s.request_id)))?;
    let mut out = String::new();
    if page.confirmations.is_empty() {
        out.push_str("<p class=\"empty\">No action waits for a decision.</p>");
    }
    for a in &page.confirmations {
        action_html(&mut out, s, a);
    }
    out.push_str(&pager("/ui/inbox", &[], page.next.as_deref(), None));
    Ok(out)
}

/// The inbox's `after` cursor, as `GET /confirmations` takes it; `Err` is the refusal.
fn inbox_after(q: &HashMap<String, String>, rid: &str) -> Result<Option<Cursor>, Box<Response>> {
    match q.get("after").filter(|a| !a.is_empty()) {
        None => Ok(None),
        Some(a) => Cursor::parse(a).map(Some).ok_or_else(|| {
            Box::new(refuse(
                codes::ARGS_INVALID,
                "`after` is not a cursor of this listing; follow the Older link as it is, or \
                 drop `after` for the newest actions",
                rid,
            ))
        }),
    }
}

fn action_html(out: &mut String, s: &Signed, a: &Value) {
    let text = |k: &str| a[k].as_str().unwrap_or_default();
    let id = text("action_id");
    let expires = a["expires_at_ms"].as_i64().unwrap_or(0);
    let _ = write!(
        out,
        "<article class=\"action\" id=\"action-{id}\" data-expires=\"{expires}\">\
         <h2><code>{op}</code> <span class=\"tier tier-{tier_class}\">{tier}</span></h2><dl>\
         <dt>Requested by</dt><dd><code>{requester}</code> ({kind})</dd>\
         <dt>Reason</dt><dd>{reason}</dd>\
         <dt>Expires</dt><dd><time>{exp}</time></dd>\
         <dt>Action</dt><dd><code>{id}</code></dd></dl>\
         <p class=\"label\" id=\"args-{id}\">Exact arguments (canonical JSON, RFC 8785: what runs)</p>\
         <pre class=\"args\" aria-labelledby=\"args-{id}\"><code>{args}</code></pre>\
         <div class=\"decide\">",
        id = esc(id),
        op = exact(text("op")),
        tier = esc(text("tier")),
        tier_class = if text("tier") == "destructive" {
            "destructive"
        } else {
            "confirm"
        },
        requester = exact(text("requester")),
        kind = esc(text("requester_kind")),
        reason = exact(text("reason")),
        exp = esc(&utc(expires)),
        args = exact(text("args_canonical")),
    );
    let form = |out: &mut String, decision: &str, label: &str| {
        let _ = write!(
            out,
            "<form method=\"post\" action=\"/ui/actions/{id}/decision\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"hidden\" name=\"decision\" value=\"{decision}\">\
             <button type=\"submit\" class=\"{decision}\">{label}</button></form>",
            id = esc(id),
            csrf = esc(&s.csrf),
        );
    };
    if may_approve(s, a) {
        form(out, "approve", "Approve");
    } else {
        out.push_str(
            "<p class=\"muted\">Only the person who raised it approves it, with their own \
             token (kind human, no <code>act</code> claim).</p>",
        );
    }
    form(out, "deny", "Deny");
    out.push_str("</div></article>");
}

/// A note for `?done=approved|denied` (any other value shows nothing).
fn done_note(query: &HashMap<String, String>) -> &'static str {
    match query.get("done").map(String::as_str) {
        Some("approved") => {
            "<p class=\"note\" role=\"status\">Approved. The requester's next call with the same arguments runs it, once.</p>"
        }
        Some("denied") => "<p class=\"note\" role=\"status\">Denied.</p>",
        Some("hint") => {
            "<p class=\"note\" role=\"status\">Hint taken: your level went up by one (the badge shows it).</p>"
        }
        _ => "",
    }
}

/// `GET /ui/inbox`: the caller's live actions (an admin: the tenant's), refreshed in place.
pub(crate) async fn inbox(
    State(state): State<AppState>,
    s: Signed,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let query = match super::query(query, &["done", "after"], &s.request_id) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let after = match inbox_after(&query, &s.request_id) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let list = match items(&state, &s, after.as_ref()).await {
        Ok(l) => l,
        Err(r) => return *r,
    };
    let src = match &after {
        None => "/ui/inbox/items".to_owned(),
        Some(c) => pager_src(c),
    };
    let body = format!(
        "{note}<p class=\"muted\">Actions raised by calls that wait for a person, newest \
         first. New ones appear here by themselves.</p>\
         <section id=\"inbox-items\" aria-live=\"polite\" data-src=\"{src}\">{list}</section>",
        note = done_note(&query),
        src = esc(&src),
    );
    html_response(
        StatusCode::OK,
        page("Approvals", Some(&s.frame(&state)), "/ui/inbox", &body),
    )
}

/// The fragment an older page of the inbox polls: its list, from the same cursor.
fn pager_src(after: &Cursor) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("after", &after.to_string());
    format!("/ui/inbox/items?{}", q.finish())
}

/// `GET /ui/inbox/items?after=`: the inbox's list alone, for `console.js`.
pub(crate) async fn inbox_items(
    State(state): State<AppState>,
    s: Signed,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let after = match super::query(query, &["after"], &s.request_id)
        .and_then(|q| inbox_after(&q, &s.request_id))
    {
        Ok(a) => a,
        Err(r) => return *r,
    };
    match items(&state, &s, after.as_ref()).await {
        Ok(l) => html_response(StatusCode::OK, l),
        Err(r) => *r,
    }
}

/// `POST /ui/actions/{action_id}/decision` with `csrf` and `decision` (`approve` or `deny`):
/// this origin, the session's CSRF token, then the gateway's decision (which refuses what the
/// API refuses, and audits it), then back to the inbox.
pub(crate) async fn decide(
    State(state): State<AppState>,
    s: Signed,
    action_id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = s.request_id.clone();
    let Ok(Path(action_id)) = action_id else {
        return refuse(
            codes::CONFIRMATION_NOT_FOUND,
            "the action id in the path is not UTF-8 text, so it names no action",
            &rid,
        );
    };
    if !super::session::same_origin(&headers) {
        return refuse(
            codes::UI_CSRF_FAILED,
            "the decision was posted from another site",
            &rid,
        );
    }
    let fields = match form(&headers, body, &["csrf", "decision"], &rid).await {
        Ok(f) => f,
        Err(r) => return *r,
    };
    if let Err(r) = s.check_csrf(field(&fields, "csrf")) {
        return *r;
    }
    let decision = field(&fields, "decision").unwrap_or_default();
    match state
        .gateway()
        .decide_confirmation(&s.caller, &action_id, &json!({"decision": decision}), &rid)
        .await
    {
        Ok(_) if decision == "approve" => super::see_other("/ui/inbox?done=approved"),
        Ok(_) => super::see_other("/ui/inbox?done=denied"),
        Err(r) => refuse(r.code, &r.message, &rid),
    }
}

/// A filter of the audit form: empty is none; otherwise as `GET /audit` takes it.
fn filter_value(query: &HashMap<String, String>, name: &str) -> Result<Option<String>, String> {
    match query.get(name).map(|v| v.trim()) {
        None | Some("") => Ok(None),
        Some(v) if v.len() <= MAX_FILTER && !v.chars().any(char::is_control) => {
            Ok(Some(v.to_owned()))
        }
        Some(_) => Err(format!(
            "`{name}` must be 1 to {MAX_FILTER} bytes with no control characters"
        )),
    }
}

/// The audit page's query as `GET /audit`'s filter; `Err` is what is wrong
/// (`args.invalid`).
fn audit_filter(query: &HashMap<String, String>) -> Result<AuditFilter, String> {
    let run_id = filter_value(query, "run")?;
    if run_id.as_deref().is_some_and(|r| !valid_run_id(r)) {
        return Err(
            "`run` must be 1-128 characters of letters, digits, `_`, `-`, `.` and `:`".to_owned(),
        );
    }
    Ok(AuditFilter {
        run_id,
        op: filter_value(query, "op")?,
        principal_id: filter_value(query, "principal")?,
        purpose: None::<RunPurpose>,
    })
}

/// `GET /ui/audit?run=&op=&principal=`: the tenant's newest events (admins only, as `GET
/// /audit`); shapes and outcomes, never values (the audit holds none).
pub(crate) async fn audit(
    State(state): State<AppState>,
    s: Signed,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let rid = s.request_id.clone();
    let query = match super::query(query, &["run", "op", "principal", "after"], &rid) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    if !s.admin() {
        return refuse(
            codes::AUDIT_NOT_PERMITTED,
            "reading the audit log needs role admin",
            &rid,
        );
    }
    let filter = match audit_filter(&query) {
        Ok(f) => f,
        Err(m) => return refuse(codes::ARGS_INVALID, &m, &rid),
    };
    let after = match query.get("after").filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => match AuditCursor::parse(a) {
            Some(c) => Some(c),
            None => return refuse(codes::ARGS_INVALID, crate::routes::audit::BAD_CURSOR, &rid),
        },
    };
    let tenant = s
        .caller
        .principal
        .tenant
        .clone()
        .unwrap_or_else(|| state.gateway().tenant().to_owned());
    let (events, next) =
        match crate::routes::audit::page(&state, &tenant, &filter, after.as_ref(), AUDIT_LIMIT)
            .await
        {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(request_id = %rid, error = %e, "audit read failed");
                return refuse(e.code(), "the audit store failed; retry", &rid);
            }
        };
    // Learning mode narrows `GET /audit` below level 3 to ids, op, outcome, codes and times
    // (`routes::learning::narrow`); the page shows only those, and withholds the action id
    // (which the narrowing drops) for such a reader too.
    let narrowed = state.learning().is_some_and(|l| l.narrows_for(&s.caller));
    let input = |name: &str, label: &str, value: &Option<String>| {
        format!(
            "<div><label for=\"f-{name}\">{label}</label><input id=\"f-{name}\" name=\"{name}\" \
             value=\"{}\" spellcheck=\"false\"></div>",
            esc(value.as_deref().unwrap_or(""))
        )
    };
    let mut body = format!(
        "<form class=\"filters\" method=\"get\" action=\"/ui/audit\">{}{}{}\
         <button type=\"submit\">Filter</button></form>\
         <p class=\"muted\">Events of tenant <code>{}</code>, newest first, {AUDIT_LIMIT} a \
         page: argument shapes and hashes only; the audit keeps no value.</p>",
        input("run", "Run", &filter.run_id),
        input("op", "Op", &filter.op),
        input("principal", "Principal", &filter.principal_id),
        exact(&tenant),
    );
    audit_rows(&mut body, &events, narrowed);
    body.push_str("</tbody></table></div>");
    if events.is_empty() {
        body.push_str("<p class=\"empty\">No event matches.</p>");
    }
    let keep = |v: &Option<String>| v.clone().unwrap_or_default();
    let (run, op, principal) = (
        keep(&filter.run_id),
        keep(&filter.op),
        keep(&filter.principal_id),
    );
    body.push_str(&pager(
        "/ui/audit",
        &[("run", &run), ("op", &op), ("principal", &principal)],
        next.as_deref(),
        None,
    ));
    html_response(
        StatusCode::OK,
        page("Audit", Some(&s.frame(&state)), "/ui/audit", &body),
    )
}

/// `GET /ui/ops`: what the signed-in principal may call (`GET /ops`).
pub(crate) async fn ops(State(state): State<AppState>, s: Signed) -> Response {
    let d = state.gateway().deployment();
    let callable = d.callable_ops(&s.caller.principal);
    let mut body = format!(
        "<p class=\"muted\">The {} ops <code>{}</code> may call: a call still goes through the \
         whole guard chain (scopes, limits, confirmation). \
         <a href=\"/ui/explain\">Explain a call</a>: what the server would answer to one, \
         with its arguments.</p>\
         <div class=\"scroll\"><table><caption class=\"sr-only\">Callable ops</caption><thead><tr>\
         <th scope=\"col\">Op</th><th scope=\"col\">Tier</th><th scope=\"col\">Effects</th>\
         <th scope=\"col\">Parameters</th><th scope=\"col\">Summary</th></tr></thead><tbody>",
        callable.len(),
        exact(&s.caller.principal.id),
    );
    for op in &callable {
        let effects: Vec<&str> = op.effective_effects().iter().map(|e| e.as_str()).collect();
        let params: Vec<String> = op
            .params
            .iter()
            .map(|p| {
                format!(
                    "{}: {}{}",
                    p.name,
                    p.kind.name(),
                    if p.required { "" } else { "?" }
                )
            })
            .collect();
        let _ = write!(
            body,
            "<tr><td><a href=\"/ui/explain?op={}\"><code>{}</code></a></td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            esc(
                &url::form_urlencoded::byte_serialize(op.id.as_str().as_bytes())
                    .collect::<String>()
            ),
            exact(op.id.as_str()),
            esc(op.tier().as_str()),
            esc(&effects.join(", ")),
            exact(&params.join(", ")),
            exact(&op.summary),
        );
    }
    body.push_str("</tbody></table></div>");
    html_response(
        StatusCode::OK,
        page("Ops", Some(&s.frame(&state)), "/ui/ops", &body),
    )
}

/// The audit table's header and rows (`narrowed`: without action ids).
fn audit_rows(body: &mut String, events: &[corral_guard::audit::AuditEvent], narrowed: bool) {
    body.push_str(
        "<div class=\"scroll\"><table><caption class=\"sr-only\">Audit events, newest first</caption>\
         <thead><tr><th scope=\"col\">Time</th><th scope=\"col\">Op</th><th scope=\"col\">Outcome</th>\
         <th scope=\"col\">Principal</th><th scope=\"col\">Code</th><th scope=\"col\">Status</th>\
         <th scope=\"col\">Run</th><th scope=\"col\">Action</th></tr></thead><tbody>",
    );
    for e in events {
        let _ = write!(
            body,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code> ({})</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&utc(e.ts_ms)),
            exact(&e.op),
            esc(e.outcome.as_str()),
            exact(&e.principal_id),
            esc(&e.principal_kind),
            exact(e.code.as_deref().unwrap_or("")),
            e.status,
            exact(e.run_id.as_deref().unwrap_or("")),
            if narrowed {
                String::new()
            } else {
                exact(e.action_id.as_deref().unwrap_or(""))
            },
        );
    }
}
