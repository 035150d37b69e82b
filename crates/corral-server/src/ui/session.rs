//! Console sessions: sign-in exchanges a token (static or JWT) for a random 256-bit session id
//! in an `HttpOnly`, `SameSite=Strict` cookie scoped to `/ui`; the store keeps only the id's
//! SHA-256 and the [`SessionProof`] that authenticates the principal again on every request,
//! so a token removed from the config stops a session at its next request. Sign-out deletes
//! the row (every replica sees it). CSRF: each session's token is derived from its secret id
//! (only the cookie holder can compute it), compared in constant time; every POST must also
//! come from this origin (`Sec-Fetch-Site`, `Origin`). Neither a token nor a session id is
//! ever logged, stored or shown.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use corral_guard::Caller;
use corral_policy::{Principal, PrincipalKind, PrincipalOrigin, Role, codes};
use corral_runtime::auth::SessionProof;
use corral_store::ui_sessions::UiSession;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{html, see_other};
use crate::AppState;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "corral_ui";
/// A session ends after this long without a request.
pub(crate) const IDLE_MS: i64 = 30 * 60 * 1000;
/// A session ends this long after sign-in, however used.
pub(crate) const ABSOLUTE_MS: i64 = 8 * 60 * 60 * 1000;
/// A session's last use is written at most this often (each poll need not write).
const TOUCH_EVERY_MS: i64 = 60 * 1000;

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    s
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let digit = |c: u8| {
            char::from(c)
                .to_digit(16)
                .and_then(|d| u8::try_from(d).ok())
        };
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// A session's secret id: 32 bytes from the operating system's CSPRNG.
fn new_id() -> Option<[u8; 32]> {
    let mut id = [0u8; 32];
    getrandom::fill(&mut id).ok()?;
    Some(id)
}

/// What the store keys a session by: the SHA-256 of its id, hex.
fn id_hash(id: &[u8; 32]) -> String {
    hex(&Sha256::digest(id))
}

/// The session's CSRF token: derived from its secret id, so only the cookie's holder knows it.
fn csrf_of(id: &[u8; 32]) -> String {
    let mut h = Sha256::new();
    h.update(b"corral-ui-csrf\0");
    h.update(id);
    hex(&h.finalize())
}

/// The session id the request's cookies carry: `None` without one; `Err` when they carry
/// several different ones (a cookie planted by a sibling site must not pick the session).
fn cookie_id(headers: &HeaderMap) -> Result<Option<[u8; 32]>, ()> {
    let mut found: Option<[u8; 32]> = None;
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for pair in v.split(';') {
            let Some((name, value)) = pair.trim().split_once('=') else {
                continue;
            };
            if name.trim() != COOKIE {
                continue;
            }
            let Some(id) = unhex(value.trim()) else {
                return Err(());
            };
            match found {
                Some(f) if f != id => return Err(()),
                _ => found = Some(id),
            }
        }
    }
    Ok(found)
}

/// Whether the request reached corral over TLS (terminated by a proxy in front of it): the
/// cookie is then `Secure`. A client that lies here only makes its own cookie unusable.
fn over_tls(headers: &HeaderMap) -> bool {
    let text = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    text("x-forwarded-proto").eq_ignore_ascii_case("https")
        || text("forwarded")
            .to_ascii_lowercase()
            .contains("proto=https")
        || text("origin").starts_with("https://")
}

/// The `Set-Cookie` of a new session, or of its removal (`id: None`).
fn set_cookie(id: Option<&[u8; 32]>, headers: &HeaderMap) -> Option<HeaderValue> {
    let secure = if over_tls(headers) { "; Secure" } else { "" };
    let v = match id {
        Some(id) => format!(
            "{COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            hex(id),
            ABSOLUTE_MS / 1000
        ),
        None => format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&v).ok()
}

/// Whether a state-changing request comes from this origin: `Sec-Fetch-Site` (sent by every
/// current browser) must be `same-origin`; an `Origin` other than `null` (the console's
/// `Referrer-Policy: no-referrer` makes a browser send `null`) must name this host. A client
/// that sends neither is not a browser, so no other site can have made it send the request.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let text = |n: &str| headers.get(n).map(|v| v.to_str().unwrap_or("\u{0}"));
    let site = text("sec-fetch-site");
    if site.is_some_and(|s| s != "same-origin") {
        return false;
    }
    match text("origin") {
        None => true,
        Some("null") => site.is_some(),
        Some(origin) => {
            let Some((_, authority)) = origin.split_once("://") else {
                return false;
            };
            ["host", "x-forwarded-host"]
                .iter()
                .any(|h| text(h).is_some_and(|host| host.eq_ignore_ascii_case(authority)))
        }
    }
}

/// A proof as the store keeps it (JSON text; never a token).
fn proof_text(proof: &SessionProof) -> String {
    match proof {
        SessionProof::StaticToken(b) => json!({"kind": "token", "proof": hex(b)}).to_string(),
        SessionProof::Jwt { caller, exp, key } => {
            let p = &caller.principal;
            let issuer = match &p.origin {
                PrincipalOrigin::Jwt { issuer } => issuer.as_str(),
                PrincipalOrigin::StaticToken
                | PrincipalOrigin::Local
                | PrincipalOrigin::Anonymous => "",
            };
            json!({"kind": "jwt", "exp": exp, "key": hex(key), "caller": {
                "id": p.id, "roles": p.roles, "kind": p.kind.as_str(), "tenant": p.tenant,
                "issuer": issuer, "act_chain": caller.act_chain, "run": caller.run,
            }})
            .to_string()
        }
    }
}

/// A stored proof read back; `None` if it is not one this version writes.
fn proof_of(text: &str) -> Option<SessionProof> {
    let v: Value = serde_json::from_str(text).ok()?;
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    match v["kind"].as_str()? {
        "token" => Some(SessionProof::StaticToken(unhex(v["proof"].as_str()?)?)),
        "jwt" => {
            let c = &v["caller"];
            let mut p = Principal::new(c["id"].as_str()?, &[])
                .with_kind(PrincipalKind::parse(c["kind"].as_str()?)?)
                .with_origin(PrincipalOrigin::Jwt {
                    issuer: c["issuer"].as_str()?.to_owned(),
                });
            p.roles = strings(&c["roles"])?;
            p.tenant = c["tenant"].as_str().map(str::to_owned);
            Some(SessionProof::Jwt {
                caller: Caller {
                    principal: p,
                    act_chain: strings(&c["act_chain"])?,
                    run: c["run"].as_str().map(str::to_owned),
                    record: false,
                },
                exp: v["exp"].as_u64()?,
                key: unhex(v["key"].as_str()?)?,
            })
        }
        _ => None,
    }
}

/// A signed-in request: the caller its session stands for now, and the session's CSRF token.
#[derive(Debug)]
pub(crate) struct Signed {
    /// Who is signed in (authenticated again for this request).
    pub caller: Caller,
    /// The session's CSRF token.
    pub csrf: String,
    /// The session's key in the store.
    id_hash: String,
    /// This request's id.
    pub request_id: String,
}

impl Signed {
    /// Whether the signed-in principal has the role `admin` (the audit's readers).
    pub(crate) fn admin(&self) -> bool {
        Role::highest_of(&self.caller.principal.roles) == Some(Role::Admin)
    }

    /// The page frame for this principal (with learning mode's badge when it is on).
    pub(crate) fn frame(&self, state: &AppState) -> html::Frame<'_> {
        let p = &self.caller.principal;
        let roles = if p.roles.is_empty() {
            "no role".to_owned()
        } else {
            format!("roles {}", p.roles.join(", "))
        };
        html::Frame {
            who: &p.id,
            what: format!("{}, {roles}", p.kind.as_str()),
            admin: self.admin(),
            csrf: &self.csrf,
            learning: state
                .learning()
                .map(|l| (l.scenario().0, l.level_of(&self.caller).get())),
        }
    }

    /// Checks a posted form's CSRF token (constant time); `Err` is the refusal to answer.
    pub(crate) fn check_csrf(&self, posted: Option<&str>) -> Result<(), Box<Response>> {
        let ok = posted.is_some_and(|t| bool::from(t.as_bytes().ct_eq(self.csrf.as_bytes())));
        if ok {
            Ok(())
        } else {
            Err(Box::new(super::refuse(
                codes::UI_CSRF_FAILED,
                "this form did not carry the session's CSRF token, so it may not come from the console's own page",
                &self.request_id,
            )))
        }
    }
}

/// Why a request has no session (answered by the extractor).
#[derive(Debug)]
pub(crate) struct NoSession(Response);

impl IntoResponse for NoSession {
    fn into_response(self) -> Response {
        self.0
    }
}

impl FromRequestParts<AppState> for Signed {
    type Rejection = NoSession;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, NoSession> {
        let rid = crate::routes::request_id();
        let refused = |why: &str| {
            // A page is sent to the sign-in; anything else hears the code.
            let page = parts.method == Method::GET && !parts.uri.path().ends_with("/items");
            NoSession(if page {
                see_other("/ui/login")
            } else {
                super::refuse(codes::UI_SESSION_INVALID, why, &rid)
            })
        };
        let id = match cookie_id(&parts.headers) {
            Ok(Some(id)) => id,
            Ok(None) => return Err(refused("this browser is not signed in to the console")),
            Err(()) => {
                return Err(refused(
                    "the request carries more than one console session cookie (or a malformed one)",
                ));
            }
        };
        let hash = id_hash(&id);
        let now = now_ms();
        let stored = match state.store().ui_session(&hash, now, IDLE_MS).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(refused(
                    "the console session has ended (signed out, or expired)",
                ));
            }
            Err(e) => {
                tracing::error!(request_id = %rid, error = %e, "console session store failed");
                return Err(NoSession(super::refuse(
                    codes::STORE_QUERY_FAILED,
                    "the session store failed; retry",
                    &rid,
                )));
            }
        };
        let now_secs = u64::try_from(now / 1000).unwrap_or(0);
        let caller = proof_of(&stored.proof)
            .and_then(|p| state.authenticator().session_caller(&p, &id, now_secs))
            // The identity it was opened for, still: a config that moved the token to
            // another principal does not move the session with it.
            .filter(|c| c.principal.identity() == stored.identity);
        let Some(caller) = caller else {
            let _ = state.store().delete_ui_session(&hash).await;
            return Err(refused(
                "the token this console session was opened with no longer authenticates",
            ));
        };
        if now.saturating_sub(stored.seen_ms) > TOUCH_EVERY_MS
            && let Err(e) = state.store().touch_ui_session(&hash, now).await
        {
            tracing::warn!(request_id = %rid, error = %e, "console session not touched");
        }
        Ok(Signed {
            caller,
            csrf: csrf_of(&id),
            id_hash: hash,
            request_id: rid,
        })
    }
}

/// The sign-in form, with `error` (already HTML) above it.
pub(crate) fn login_page(error: &str) -> String {
    let body = format!(
        "{error}<form class=\"signin\" method=\"post\" action=\"/ui/login\">\
         <p>Sign in with your corral token (a static token or a JWT). The console keeps a \
         session cookie; it never stores the token.</p>\
         <label for=\"token\">Token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required \
         spellcheck=\"false\" autofocus>\
         <button type=\"submit\">Sign in</button></form>"
    );
    html::page("Sign in", None, "/ui/login", &body)
}

/// `POST /ui/login` with `token`: a new session (a fresh id whatever cookie came with the
/// request, so no one can fix a victim's session id), then the inbox. A refused token is
/// audited like any failed authentication.
pub(crate) async fn sign_in(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<std::net::SocketAddr>,
    token: Option<&str>,
) -> Response {
    let rid = crate::routes::request_id();
    if !same_origin(headers) {
        return super::refuse(
            codes::UI_CSRF_FAILED,
            "the sign-in form was posted from another site",
            &rid,
        );
    }
    let token = token.map(str::trim).unwrap_or_default();
    // Counted before the token is checked: a guess costs an attempt whether it is right or not.
    let client = state.sign_in_limiter().client(peer, headers);
    let keys = super::throttle::keys(client, token);
    if let Err(secs) = state.sign_in_limiter().attempt(&keys, now_ms()) {
        return throttled(state, &rid, secs).await;
    }
    let Some(id) = new_id() else {
        tracing::error!(request_id = %rid, "no randomness for a console session id");
        return super::refuse(codes::SERVER_INTERNAL, "internal error", &rid);
    };
    let auth = state.authenticator();
    let signed = if token.is_empty() {
        Err(corral_runtime::AuthError {
            code: codes::AUTH_MISSING,
            message: "enter your token to sign in".to_owned(),
        })
    } else {
        auth.authenticate_session(token, &id)
    };
    let (caller, proof) = match signed {
        Ok(ok) => ok,
        Err(e) => {
            state
                .gateway()
                .audit_unauthenticated("POST /ui/login", &rid, e.code, 401)
                .await;
            let status =
                StatusCode::from_u16(codes::status(e.code)).unwrap_or(StatusCode::UNAUTHORIZED);
            return super::html_response(
                status,
                login_page(&html::refusal(e.code, &e.message, &rid)),
            );
        }
    };
    let now = now_ms();
    let expires = match &proof {
        SessionProof::StaticToken(_) => now.saturating_add(ABSOLUTE_MS),
        SessionProof::Jwt { exp, .. } => now
            .saturating_add(ABSOLUTE_MS)
            .min(i64::try_from(exp.saturating_mul(1000)).unwrap_or(i64::MAX)),
    };
    // The session presented with this sign-in, if any, ends: one browser, one session.
    if let Ok(Some(old)) = cookie_id(headers) {
        let _ = state.store().delete_ui_session(&id_hash(&old)).await;
    }
    let _ = state.store().purge_ui_sessions(now, IDLE_MS).await;
    let session = UiSession {
        id_hash: id_hash(&id),
        identity: caller.principal.identity(),
        proof: proof_text(&proof),
        created_ms: now,
        seen_ms: now,
        expires_ms: expires,
    };
    if let Err(e) = state.store().create_ui_session(&session).await {
        tracing::error!(request_id = %rid, error = %e, "console session not stored");
        return super::refuse(
            codes::STORE_QUERY_FAILED,
            "the session store failed; retry",
            &rid,
        );
    }
    audit_sign_in(state, &caller, &proof, &rid).await;
    let mut resp = see_other("/ui/inbox");
    if let Some(c) = set_cookie(Some(&id), headers) {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

/// The answer to a sign-in past the limiter: the form again with `429 ui.sign_in_rate_limited`
/// and `Retry-After`, audited like a refused token.
async fn throttled(state: &AppState, rid: &str, secs: u64) -> Response {
    let code = codes::UI_SIGN_IN_RATE_LIMITED;
    state
        .gateway()
        .audit_unauthenticated("POST /ui/login", rid, code, codes::status(code))
        .await;
    let message = format!("too many sign-in attempts; try again in {secs} s");
    let status = StatusCode::from_u16(codes::status(code)).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let mut resp = super::html_response(status, login_page(&html::refusal(code, &message, rid)));
    let h = resp.headers_mut();
    h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    h.insert("x-corral-code", HeaderValue::from_static(code));
    resp
}

/// Audits a sign-in that opened a session: who (the principal, its kind and act chain, as
/// every event names them) and how (a static token or a JWT), never the token.
async fn audit_sign_in(state: &AppState, caller: &Caller, proof: &SessionProof, rid: &str) {
    let how = match proof {
        SessionProof::StaticToken(_) => "signed in with a static token",
        SessionProof::Jwt { .. } => "signed in with a JWT",
    };
    let mut event = crate::learning::audit_event(
        caller,
        state.gateway().tenant(),
        rid,
        "POST /ui/login",
        how.to_owned(),
    );
    event.status = 303;
    for sink in state.gateway().sinks() {
        if let Err(e) = sink.append(&event).await {
            tracing::error!(request_id = %rid, error = %e, "console sign-in: audit append failed");
        }
    }
}

/// `POST /ui/logout`: the session is deleted from the store (so the cookie is worthless on
/// every replica, even if a copy of it survives) and the cookie cleared.
pub(crate) async fn sign_out(state: &AppState, s: &Signed, headers: &HeaderMap) -> Response {
    if let Err(e) = state.store().delete_ui_session(&s.id_hash).await {
        tracing::error!(request_id = %s.request_id, error = %e, "console session not deleted");
        return super::refuse(
            codes::STORE_QUERY_FAILED,
            "the session store failed, so the session may still be live; retry",
            &s.request_id,
        );
    }
    let mut resp = see_other("/ui/login");
    if let Some(c) = set_cookie(None, headers) {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_hex_and_a_malformed_cookie_is_refused() {
        let id = [0xA5u8; 32];
        assert_eq!(unhex(&hex(&id)), Some(id));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(&"g".repeat(64)), None);
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; corral_ui=xyz"),
        );
        assert_eq!(cookie_id(&h), Err(()));
        let two = format!("corral_ui={}; corral_ui={}", hex(&[1; 32]), hex(&[2; 32]));
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&two).unwrap_or(HeaderValue::from_static("")),
        );
        assert_eq!(cookie_id(&h), Err(()));
    }

    #[test]
    fn a_jwt_proof_round_trips_and_a_token_is_never_in_it() {
        let mut p = Principal::new("ada", &["operator"]).with_origin(PrincipalOrigin::Jwt {
            issuer: "https://idp".to_owned(),
        });
        p.tenant = Some("t1".to_owned());
        let proof = SessionProof::Jwt {
            caller: Caller::new(p),
            exp: 42,
            key: [9; 32],
        };
        let again = |p: &SessionProof| proof_of(&proof_text(p)).map(|p| proof_text(&p));
        assert_eq!(again(&proof), Some(proof_text(&proof)));
        let SessionProof::Jwt { caller, exp, .. } =
            proof_of(&proof_text(&proof)).unwrap_or(SessionProof::StaticToken([0; 32]))
        else {
            unreachable!("a JWT proof reads back as one")
        };
        assert_eq!(
            (caller.principal.identity(), exp),
            ("jwt:https%3A//idp:person:ada".to_owned(), 42)
        );
        assert_eq!(caller.principal.tenant.as_deref(), Some("t1"));
        let b = SessionProof::StaticToken([7; 32]);
        assert_eq!(again(&b), Some(proof_text(&b)));
        assert!(proof_of("{\"kind\":\"other\"}").is_none());
        assert!(proof_of("not json").is_none());
    }

    #[test]
    fn only_this_origin_may_post() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, HeaderValue::from_static(v));
            }
            m
        };
        assert!(same_origin(&h(&[("host", "c:9")])));
        assert!(same_origin(&h(&[
            ("host", "c:9"),
            ("sec-fetch-site", "same-origin"),
            ("origin", "null")
        ])));
        assert!(same_origin(&h(&[
            ("host", "c:9"),
            ("origin", "http://c:9")
        ])));
        assert!(!same_origin(&h(&[
            ("host", "c:9"),
            ("origin", "http://evil:9")
        ])));
        assert!(!same_origin(&h(&[("host", "c:9"), ("origin", "null")])));
        assert!(!same_origin(&h(&[
            ("host", "c:9"),
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(!same_origin(&h(&[
            ("host", "c:9"),
            ("sec-fetch-site", "same-site")
        ])));
    }
}
