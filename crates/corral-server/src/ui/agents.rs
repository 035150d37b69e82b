//! The agents host's sessions (issue 17) for their owner: `/ui/sessions` lists the signed-in
//! principal's sessions, `/ui/sessions/{id}` shows one with its newest events, and
//! `/ui/sessions/{id}/items?after=<seq>` the events after one (what `console.js` polls to add
//! new events while the session lives). Owner-only, as `/v1/agents/sessions` is (another's
//! session is the same `404 agents.not_found` as an unknown one); read straight from the store,
//! as those routes read it, and paged with their cursors. Events are shown as stored, each cut
//! at 4 KiB and through `exact`.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use corral_policy::codes;
use corral_store::agents::{Session, SessionEvent};
use corral_store::lab::Page;

use super::html::{esc, exact, page, pager, utc};
use super::{Signed, html_response, refuse};
use crate::AppState;

/// Sessions listed per page.
const LISTED: u32 = 100;
/// Events shown per page of a session (the newest, on its first).
const EVENTS_SHOWN: u64 = 200;
/// The most bytes of an event's body shown.
const EVENT_BYTES: usize = 4096;
/// The header of `/ui/sessions/{id}/items` that carries the session's status, so the script
/// stops polling a failed session.
const STATUS_HEADER: &str = "x-corral-session-status";

fn tenant(state: &AppState, s: &Signed) -> String {
    state.runtime().agents().tenant_of(&s.caller.principal)
}

fn store_refusal(e: &corral_store::agents::AgentStoreError, rid: &str) -> Response {
    tracing::error!(request_id = %rid, error = %e, "agent session read failed");
    refuse(e.code(), "the session store failed; retry", rid)
}

/// `GET /ui/sessions?after=`: a page of the signed-in principal's agent sessions, newest
/// first, paged with `GET /v1/agents/sessions`'s cursor.
pub(crate) async fn sessions(
    State(state): State<AppState>,
    s: Signed,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let rid = s.request_id.clone();
    let q = match super::query(query, &["after"], &rid) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let after = match q.get("after").filter(|a| !a.is_empty()).map(|a| a.parse()) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(_)) => {
            return refuse(
                codes::AGENTS_INVALID,
                "`after` must be the `next` cursor of a previous page (the Older link's), or \
                 none for the newest sessions",
                &rid,
            );
        }
    };
    let listed = match state
        .store()
        .list_sessions(
            &tenant(&state, &s),
            Some(&s.caller.principal.identity()),
            &Page {
                limit: LISTED,
                after,
            },
        )
        .await
    {
        Ok(p) => p,
        Err(e) => return store_refusal(&e, &rid),
    };
    let mut body = String::from(
        "<div class=\"scroll\"><table><caption class=\"sr-only\">Your agent sessions, newest first</caption>\
         <thead><tr><th scope=\"col\">Session</th><th scope=\"col\">Agent</th>\
         <th scope=\"col\">Status</th><th scope=\"col\">Turns</th><th scope=\"col\">Events</th>\
         <th scope=\"col\">Started</th><th scope=\"col\">Last active</th></tr></thead><tbody>",
    );
    for x in &listed.items {
        let _ = write!(
            body,
            "<tr><td><a href=\"/ui/sessions/{id}\"><code>{id}</code></a></td>\
             <td><code>{}</code> (<code>{}</code>)</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            exact(&x.adapter),
            exact(&x.model),
            exact(&x.status),
            x.turns,
            x.events,
            esc(&utc(x.created_ms)),
            esc(&utc(x.last_active_ms)),
            id = esc(&x.id),
        );
    }
    body.push_str("</tbody></table></div>");
    if listed.items.is_empty() {
        body.push_str("<p class=\"empty\">You have no agent session.</p>");
    }
    let next = listed.next.map(|n| n.to_string());
    body.push_str(&pager("/ui/sessions", &[], next.as_deref(), None));
    html_response(
        StatusCode::OK,
        page(
            "Agent sessions",
            Some(&s.frame(&state)),
            "/ui/sessions",
            &body,
        ),
    )
}

fn session_facts(x: &Session) -> String {
    let mut body = format!(
        "<dl class=\"facts\"><dt>Agent</dt><dd><code>{}</code></dd><dt>Model</dt><dd><code>{}</code></dd>\
         <dt>Working directory</dt><dd><code>{}</code></dd><dt>Status</dt><dd id=\"session-status\">{}</dd>\
         <dt>Turns</dt><dd>{}</dd><dt>Tokens</dt><dd>{}</dd><dt>Last attestation</dt><dd><code>{}</code></dd>\
         <dt>Started</dt><dd>{}</dd><dt>Last active</dt><dd>{}</dd></dl>",
        exact(&x.adapter),
        exact(&x.model),
        exact(&x.workdir),
        exact(&x.status),
        x.turns,
        x.usage["total_tokens"]
            .as_u64()
            .map_or_else(|| "–".to_owned(), |t| t.to_string()),
        exact(&x.attestation.to_string()),
        esc(&utc(x.created_ms)),
        esc(&utc(x.last_active_ms)),
    );
    if let Some((code, message)) = &x.error {
        let _ = write!(
            body,
            "<div class=\"error\"><p><code>{}</code></p><p>{}</p></div>",
            exact(code),
            exact(message)
        );
    }
    body
}

/// The text of an event's body, cut at [`EVENT_BYTES`] on a char boundary.
fn cut(text: &str) -> String {
    if text.len() <= EVENT_BYTES {
        return text.to_owned();
    }
    let mut end = EVENT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} … ({} bytes in all)", &text[..end], text.len())
}

/// The events as list items, numbered by their `seq` (the API's `event_id`).
fn event_items(events: &[SessionEvent]) -> String {
    let mut out = String::new();
    for e in events {
        let _ = write!(
            out,
            "<li value=\"{}\"><p><code>{}</code> <span class=\"muted\">{}</span></p>\
             <pre class=\"args\"><code>{}</code></pre></li>",
            e.seq,
            exact(&e.kind),
            esc(&utc(e.created_ms)),
            exact(&cut(&e.body.to_string())),
        );
    }
    out
}

/// Whether no more events will come: a failed session takes no turn.
fn ended(x: &Session) -> bool {
    x.status == "failed"
}

/// One of the signed-in principal's sessions (any other id, someone else's included, is the
/// same `404 agents.not_found`), where its page of events starts (the query's `after`, an event
/// number; without one, `newest`'s page or the first event) and up to [`EVENTS_SHOWN`] events
/// from there, in order; or the refusal.
async fn own_events(
    state: &AppState,
    s: &Signed,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    newest: bool,
) -> Result<(Session, u64, Vec<SessionEvent>), Box<Response>> {
    let rid = &s.request_id;
    let not_found = || {
        Box::new(refuse(
            codes::AGENTS_NOT_FOUND,
            "you have no agent session with this id; the list shows yours",
            rid,
        ))
    };
    let Ok(Path(id)) = id else {
        return Err(not_found());
    };
    let t = tenant(state, s);
    // The session is read before its events: one seen failed has stored its last event.
    let x = match state.store().get_session(&t, &id).await {
        Ok(Some(x)) if x.owner == s.caller.principal.identity() => x,
        Ok(_) => return Err(not_found()),
        Err(e) => return Err(Box::new(store_refusal(&e, rid))),
    };
    let q = super::query(query, &["after"], rid)?;
    let start = match q.get("after").filter(|a| !a.is_empty()) {
        None if newest => x.events.saturating_sub(EVENTS_SHOWN),
        None => 0,
        Some(a) => a.trim().parse::<u64>().map_err(|_| {
            Box::new(refuse(
                codes::AGENTS_INVALID,
                "`after` must be an event's number (`event_id`), or none for the newest events",
                rid,
            ))
        })?,
    };
    let events = state
        .store()
        .session_events(&t, &x.id, start, u32::try_from(EVENTS_SHOWN).unwrap_or(200))
        .await
        .map_err(|e| Box::new(store_refusal(&e, rid)))?;
    Ok((x, start, events))
}

/// `GET /ui/sessions/{id}?after=`: one of the principal's sessions and a page of its events:
/// the newest, or those after event `after` (the API's `event_id` cursor). The newest page of
/// a session that can still change is live: `console.js` adds new events as they come.
pub(crate) async fn session(
    State(state): State<AppState>,
    s: Signed,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let (x, start, events) = match own_events(&state, &s, id, query, true).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let last = events.last().map_or(start, |e| e.seq);
    let newest = last >= x.events;
    let path = format!("/ui/sessions/{}", x.id);
    let live = if newest && !ended(&x) {
        format!(" data-src=\"{}/items\" data-after=\"{last}\"", esc(&path))
    } else {
        String::new()
    };
    let mut body = session_facts(&x);
    let _ = write!(
        body,
        "<h2>Events</h2><p class=\"muted\">As stored, oldest first, {EVENTS_SHOWN} a page; \
         <code>GET /v1/agents/sessions/{}/events</code> streams them.{}</p>\
         <ol class=\"events\" id=\"session-events\"{live}>{}</ol>",
        esc(&x.id),
        if live.is_empty() {
            ""
        } else {
            " New events appear here by themselves."
        },
        event_items(&events),
    );
    if !live.is_empty() {
        body.push_str("<p class=\"muted\" id=\"session-live\" role=\"status\"></p>");
    }
    if events.is_empty() {
        body.push_str("<p class=\"empty\">No event on this page.</p>");
    }
    let older = (start > 0).then(|| start.saturating_sub(EVENTS_SHOWN).to_string());
    let newer = (!newest).then(|| last.to_string());
    body.push_str(&pager(&path, &[], older.as_deref(), newer.as_deref()));
    html_response(
        StatusCode::OK,
        page(
            &format!("Session {}", x.id),
            Some(&s.frame(&state)),
            "/ui/sessions",
            &body,
        ),
    )
}

/// `GET /ui/sessions/{id}/items?after=<seq>`: the session's events after event `seq` (at most
/// [`EVENTS_SHOWN`]), as list items for `console.js` to append, and its status in
/// `X-Corral-Session-Status`. Owner-only as the page.
pub(crate) async fn session_items(
    State(state): State<AppState>,
    s: Signed,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let (x, _, events) = match own_events(&state, &s, id, query, false).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let mut resp = html_response(StatusCode::OK, event_items(&events));
    if let Ok(v) = HeaderValue::from_str(&x.status) {
        resp.headers_mut().insert(STATUS_HEADER, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_cut_on_a_char_boundary() {
        let long = "é".repeat(EVENT_BYTES);
        let c = cut(&long);
        assert!(c.ends_with(&format!("({} bytes in all)", long.len())));
        assert_eq!(cut("short"), "short");
    }
}
