//! The web console at `/ui` (issue 19): server-rendered pages over the same use cases as the
//! API (the gateway's confirmation listing and decision, the store's audit query, the
//! deployment's callable ops and `corral_guard::explain`, the lab's runs and comparisons, the agents host's sessions), a session cookie instead of a bearer token, and two static
//! assets compiled into the binary. No page carries inline script or style, and every
//! response under `/ui` has the headers of [`security_headers`].

mod agents;
mod explain;
mod html;
mod lab;
mod pages;
mod session;
mod throttle;

use axum::Router;
use axum::body::Body;
use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use corral_policy::codes;

use crate::AppState;

pub(crate) use session::Signed;
pub(crate) use throttle::SignInLimiter;

/// The Content-Security-Policy of every console response: nothing but this origin's own
/// script, style and images, forms only to this origin, never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's stylesheet.
const CSS: &str = include_str!("assets/console.css");
/// The console's script: the live lists' polling (the inbox, an agent session's events),
/// nothing else.
const JS: &str = include_str!("assets/console.js");

/// The console's routes, each answer with [`security_headers`].
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(root))
        .route("/ui/", get(root))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/learning/hint", post(hint))
        .route("/ui/inbox", get(pages::inbox))
        .route("/ui/inbox/items", get(pages::inbox_items))
        .route("/ui/actions/{action_id}/decision", post(pages::decide))
        .route("/ui/audit", get(pages::audit))
        .route("/ui/ops", get(pages::ops))
        .route(
            "/ui/explain",
            get(explain::form_page).post(explain::evaluate),
        )
        .route("/ui/runs", get(lab::listing::<lab::Runs>))
        .route("/ui/runs/{id}", get(lab::run))
        .route("/ui/comparisons", get(lab::listing::<lab::Comparisons>))
        .route("/ui/comparisons/{id}", get(lab::comparison))
        .route("/ui/sessions", get(agents::sessions))
        .route("/ui/sessions/{id}", get(agents::session))
        .route("/ui/sessions/{id}/items", get(agents::session_items))
        .route("/ui/static/console.css", get(css))
        .route("/ui/static/console.js", get(js))
        .route("/ui/{*rest}", axum::routing::any(not_found))
        .layer(axum::middleware::map_response(security_headers))
}

/// Adds the console's headers to a response: the CSP, no framing, no sniffing, no referrer,
/// no caching.
async fn security_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}

/// A `303 See Other` to a fixed path of the console (never one a request names: no open
/// redirect).
pub(crate) fn see_other(path: &'static str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    resp.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(path));
    resp
}

/// An HTML answer.
pub(crate) fn html_response(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}

/// A refusal as a page: the code's status from the catalog, the code, the message and its
/// fix, and the request id (also in `X-Request-Id`; the code in `X-Corral-Code`).
pub(crate) fn refuse(code: &'static str, message: &str, request_id: &str) -> Response {
    let status =
        StatusCode::from_u16(codes::status(code)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = format!(
        "{}<p><a href=\"/ui/inbox\">Back to the console</a></p>",
        html::refusal(code, message, request_id)
    );
    let mut resp = html_response(status, html::page("Refused", None, "", &body));
    let h = resp.headers_mut();
    h.insert("x-corral-code", HeaderValue::from_static(code));
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert("x-request-id", v);
    }
    resp
}

/// A page's query string: UTF-8 form data (else `400 args.invalid`) with only the keys in
/// `allowed` (else `400 args.unknown`), as the API's listings refuse them.
pub(crate) fn query(
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    allowed: &[&str],
    request_id: &str,
) -> Result<HashMap<String, String>, Box<Response>> {
    let Ok(Query(q)) = query else {
        return Err(Box::new(refuse(
            codes::ARGS_INVALID,
            "the query string is not valid `application/x-www-form-urlencoded` UTF-8",
            request_id,
        )));
    };
    if q.keys().any(|k| !allowed.contains(&k.as_str())) {
        let names: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
        return Err(Box::new(refuse(
            codes::ARGS_UNKNOWN,
            &format!("this page takes only {}", names.join(", ")),
            request_id,
        )));
    }
    Ok(q)
}

/// The most bytes of a console form.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// A posted form's fields (`application/x-www-form-urlencoded`, at most [`MAX_FORM_BYTES`],
/// each of `allowed` at most once, no other); `Err` is the refusal.
pub(crate) async fn form(
    headers: &HeaderMap,
    body: Body,
    allowed: &[&str],
    request_id: &str,
) -> Result<Vec<(String, String)>, Box<Response>> {
    let invalid = |why: &str| Box::new(refuse(codes::UI_FORM_INVALID, why, request_id));
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        return Err(invalid(
            "the form is not `application/x-www-form-urlencoded`",
        ));
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
        return Err(invalid("the form is over 16 KiB, or could not be read"));
    };
    let mut fields: Vec<(String, String)> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(&bytes) {
        if !allowed.contains(&k.as_ref()) {
            return Err(invalid("the form has a field the console does not send"));
        }
        if fields.iter().any(|(n, _)| *n == k) {
            return Err(invalid("the form repeats a field"));
        }
        fields.push((k.into_owned(), v.into_owned()));
    }
    Ok(fields)
}

/// A field of a parsed form.
pub(crate) fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `GET /ui`: the inbox when signed in, else the sign-in.
async fn root(signed: Result<Signed, session::NoSession>) -> Response {
    if signed.is_ok() {
        see_other("/ui/inbox")
    } else {
        see_other("/ui/login")
    }
}

/// `GET /ui/login`: the form (or the inbox, for a browser signed in already).
async fn login_form(signed: Result<Signed, session::NoSession>) -> Response {
    if signed.is_ok() {
        return see_other("/ui/inbox");
    }
    html_response(StatusCode::OK, session::login_page(""))
}

/// `POST /ui/login`.
async fn login(
    State(state): State<AppState>,
    throttle::Peer(peer): throttle::Peer,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = crate::routes::request_id();
    let fields = match form(&headers, body, &["token"], &rid).await {
        Ok(f) => f,
        Err(r) => return *r,
    };
    session::sign_in(&state, &headers, peer, field(&fields, "token")).await
}

/// `POST /ui/logout` with the session's `csrf`.
async fn logout(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !session::same_origin(&headers) {
        return refuse(
            codes::UI_CSRF_FAILED,
            "the sign-out form was posted from another site",
            &signed.request_id,
        );
    }
    let fields = match form(&headers, body, &["csrf"], &signed.request_id).await {
        Ok(f) => f,
        Err(r) => return *r,
    };
    if let Err(r) = signed.check_csrf(field(&fields, "csrf")) {
        return *r;
    }
    session::sign_out(&state, &signed, &headers).await
}

/// `POST /ui/learning/hint` with the session's `csrf`: learning mode's hint, taken by the same
/// function as `POST /learning/hint` (who may, how often, the audit event), then the inbox.
async fn hint(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = signed.request_id.clone();
    if !session::same_origin(&headers) {
        return refuse(
            codes::UI_CSRF_FAILED,
            "the hint was asked from another site",
            &rid,
        );
    }
    let fields = match form(&headers, body, &["csrf"], &rid).await {
        Ok(f) => f,
        Err(r) => return *r,
    };
    if let Err(r) = signed.check_csrf(field(&fields, "csrf")) {
        return *r;
    }
    match crate::routes::learning::take_hint(&state, &signed.caller, &rid).await {
        Ok(_) => see_other("/ui/inbox?done=hint"),
        Err(e) => refuse(
            codes::lookup(&e.body.code).map_or(codes::SERVER_INTERNAL, |c| c.code),
            &e.body.error,
            &rid,
        ),
    }
}

/// A path under `/ui` the console does not have.
async fn not_found() -> Response {
    refuse(
        codes::ROUTE_NOT_FOUND,
        "the console has no such page; start at `/ui`",
        &crate::routes::request_id(),
    )
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut resp = body.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
