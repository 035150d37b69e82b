//! The console's explain page (`/ui/explain`, issue 19 item 5): what the guard chain would
//! answer if the signed-in principal called an op with these arguments (`corral_guard::explain`,
//! the decision `corral explain` prints), never for another principal: the decision, the rule
//! that decided, each guard step, and the fix. Nothing runs and nothing is written.
//!
//! The evaluation is a POST with the session's CSRF token, not a GET with a query: the
//! arguments (paths, commands, amounts) stay out of URLs, so out of the browser's history and
//! any proxy's access log, and the form's 16 KiB limit applies. An op the principal cannot see
//! is `op.not_enabled` before its arguments are looked at, as `POST /ops/{id}` answers, so the
//! page tells nobody more about an op than calling it would; and it shows the decision, not
//! the policy's rule-by-rule trace (the operator's `corral explain` has that).

use std::fmt::Write as _;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::Response;
use corral_guard::explain::{Explained, Query, explain};
use corral_policy::codes;

use super::html::{esc, exact, page};
use super::{Signed, field, form, html_response, refuse};
use crate::AppState;

/// The longest op id the form takes (longer ones are no op's).
const MAX_OP: usize = 256;

/// `GET /ui/explain[?op=ID]`: the form, the op filled in when the ops view linked here.
pub(crate) async fn form_page(State(state): State<AppState>, s: Signed, uri: Uri) -> Response {
    let op: String = uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "op")
                .map(|(_, v)| v.chars().take(MAX_OP).collect())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    render(&state, &s, StatusCode::OK, &op, "{}", "")
}

/// `POST /ui/explain` with `csrf`, `op` and `args` (a JSON object; empty is `{}`).
pub(crate) async fn evaluate(
    State(state): State<AppState>,
    s: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = s.request_id.clone();
    if !super::session::same_origin(&headers) {
        return refuse(
            codes::UI_CSRF_FAILED,
            "the explain form was posted from another site",
            &rid,
        );
    }
    let fields = match form(&headers, body, &["csrf", "op", "args"], &rid).await {
        Ok(f) => f,
        Err(r) => return *r,
    };
    if let Err(r) = s.check_csrf(field(&fields, "csrf")) {
        return *r;
    }
    let op = field(&fields, "op").unwrap_or("").trim();
    let raw = field(&fields, "args").unwrap_or("");
    let (status, result) = match decide(&state, &s, op, raw) {
        Ok(html) => (StatusCode::OK, Ok(html)),
        Err((code, html)) => (
            StatusCode::from_u16(codes::status(code)).unwrap_or(StatusCode::BAD_REQUEST),
            Err((code, html)),
        ),
    };
    let shown = match &result {
        Ok(h) | Err((_, h)) => h.as_str(),
    };
    let mut resp = render(&state, &s, status, op, raw, shown);
    if let Err((code, _)) = result {
        let h = resp.headers_mut();
        h.insert("x-corral-code", HeaderValue::from_static(code));
        if let Ok(v) = HeaderValue::from_str(&rid) {
            h.insert("x-request-id", v);
        }
    }
    resp
}

/// The explanation of `op` with `raw` arguments for the signed-in principal, as HTML (any
/// decision, refusals included, is an explanation); `Err` with its code and HTML for a form it
/// cannot evaluate (no op, arguments that are not JSON or do not fit the op).
fn decide(
    state: &AppState,
    s: &Signed,
    op: &str,
    raw: &str,
) -> Result<String, (&'static str, String)> {
    let rid = &s.request_id;
    let refused =
        |code: &'static str, message: &str| Err((code, super::html::refusal(code, message, rid)));
    if op.is_empty() || op.len() > MAX_OP {
        return refused(
            codes::UI_FORM_INVALID,
            "name the op to explain (at most 256 bytes)",
        );
    }
    let d = state.gateway().deployment();
    let who = &s.caller.principal;
    // The gateway's first step: an op this caller cannot see is a 404 like an unknown one,
    // before its arguments are parsed (their errors would name its parameters).
    let spec = d
        .engine
        .catalog()
        .get(op)
        .filter(|_| d.engine.is_mounted_before_gate(op, who));
    let Some(spec) = spec else {
        return Ok(decision_html(&not_enabled(op), None));
    };
    let json: serde_json::Value = if raw.trim().is_empty() {
        serde_json::json!({})
    } else {
        match serde_json::from_str(raw) {
            Ok(v) => v,
            Err(e) => {
                return refused(
                    codes::ARGS_MALFORMED,
                    &format!("the arguments are not JSON: {e}"),
                );
            }
        }
    };
    let args = match corral_guard::args::parse_args(spec, &json) {
        Ok(a) => a,
        Err(e) => return refused(e.code, &e.message),
    };
    let out = explain(&Query {
        engine: &d.engine,
        guard: &d.guard,
        principal: who,
        op,
        args: &args,
        run_level: None,
        dry_run: false,
    });
    Ok(decision_html(&out, Some(spec.tier().as_str())))
}

/// The answer for an op the caller cannot see (the API's 404).
fn not_enabled(op: &str) -> Explained {
    Explained {
        op: op.to_owned(),
        decision: "not_mounted",
        code: Some(codes::OP_NOT_ENABLED),
        ..Explained::default()
    }
}

/// The headline: what `POST /ops/{id}` would answer.
fn headline(e: &Explained) -> (&'static str, String) {
    if e.allowed {
        let text = match e.confirmation {
            Some("required") => {
                "Allowed, after confirmation: the call answers 202 <code>confirmation.required</code> and runs once you approve it".to_owned()
            }
            Some("dry_run") => "Allowed, as a dry-run: it would be described, never run".to_owned(),
            _ => "Allowed".to_owned(),
        };
        return ("allowed", text);
    }
    let what = match e.decision {
        "not_mounted" => {
            "Refused: this op is not enabled for you (the API answers 404, as for an unknown op)"
        }
        "denied" => "Refused by a deny rule",
        "not_permitted" => "Refused: no allow rule admits these arguments",
        _ => "Refused by a guard step",
    };
    ("refused", what.to_owned())
}

/// One explanation as HTML: the headline, the rule, the code with its reason and fix, and the
/// guard steps. Every caller-supplied or config-supplied text goes through `esc` or `exact`.
fn decision_html(e: &Explained, tier: Option<&str>) -> String {
    let (class, head) = headline(e);
    let mut out = format!(
        "<section class=\"explained {class}\" aria-labelledby=\"decision\"><h2 id=\"decision\">{head}</h2><dl>\
         <dt>Op</dt><dd><code>{}</code>{}</dd>",
        exact(&e.op),
        tier.map(|t| format!(" ({} tier)", esc(t)))
            .unwrap_or_default(),
    );
    let rule = e.rule.clone().or_else(|| {
        e.candidates
            .first()
            .map(|c| format!("{} (closest)", c.rule))
    });
    if let Some(r) = rule {
        let _ = write!(out, "<dt>Rule</dt><dd><code>{}</code></dd>", exact(&r));
    }
    if !e.allowed {
        let code = e.code.unwrap_or(codes::POLICY_NOT_PERMITTED);
        let reason = e
            .reason
            .clone()
            .or_else(|| e.candidates.first().map(|c| c.clause.clone()))
            .unwrap_or_default();
        let fix = codes::lookup(code).map_or("", |c| c.fix);
        let _ = write!(
            out,
            "<dt>Code</dt><dd><code class=\"code\">{}</code></dd>",
            esc(code)
        );
        if !reason.is_empty() {
            let _ = write!(out, "<dt>Why</dt><dd>{}</dd>", exact(&reason));
        }
        let _ = write!(out, "<dt>How to fix</dt><dd>{}</dd>", esc(fix));
    }
    out.push_str("</dl>");
    if !e.guard.is_empty() {
        out.push_str(
            "<div class=\"scroll\"><table><caption>The guard steps, in the gateway's order</caption>\
             <thead><tr><th scope=\"col\">Step</th><th scope=\"col\">Outcome</th>\
             <th scope=\"col\">Code</th><th scope=\"col\">Detail</th></tr></thead><tbody>",
        );
        for g in &e.guard {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(g.step),
                esc(&g.outcome.replace('_', " ")),
                g.code
                    .map(|c| format!("<code>{}</code>", esc(c)))
                    .unwrap_or_default(),
                exact(&g.detail),
            );
        }
        out.push_str("</tbody></table></div>");
    }
    out.push_str("</section>");
    out
}

/// The page: the form (filled with `op` and `raw`), then `result` (already HTML).
fn render(
    state: &AppState,
    s: &Signed,
    status: StatusCode,
    op: &str,
    raw: &str,
    result: &str,
) -> Response {
    let body = format!(
        "<p class=\"muted\">What the server would answer if <code>{}</code> called an op with \
         these arguments: autonomy, role, policy and confirmation, as <code>corral explain</code> \
         decides them. Nothing runs and nothing is written.</p>\
         <form class=\"explain\" method=\"post\" action=\"/ui/explain\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <label for=\"op\">Op</label>\
         <input id=\"op\" name=\"op\" required spellcheck=\"false\" autocomplete=\"off\" value=\"{}\">\
         <label for=\"args\">Arguments (a JSON object)</label>\
         <textarea id=\"args\" name=\"args\" rows=\"6\" spellcheck=\"false\">{}</textarea>\
         <button type=\"submit\">Explain</button></form>{result}\
         <p><a href=\"/ui/ops\">Back to the ops</a></p>",
        exact(&s.caller.principal.id),
        esc(&s.csrf),
        esc(op),
        esc(raw),
    );
    html_response(
        status,
        page("Explain a call", Some(&s.frame(state)), "/ui/ops", &body),
    )
}
