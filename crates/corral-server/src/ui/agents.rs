//! The agents host's sessions (issue 17) for their owner: `/ui/sessions` lists the signed-in
//! principal's sessions, `/ui/sessions/{id}` shows one with its newest events. Owner-only, as
//! `/v1/agents/sessions` is (another's session is the same `404 agents.not_found` as an unknown
//! one); read straight from the store, as those routes read it. Events are shown as stored, each
//! cut at 4 KiB and through `exact`.

use std::fmt::Write as _;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use corral_policy::codes;
use corral_store::agents::Session;
use corral_store::lab::Page;

use super::html::{esc, exact, page, utc};
use super::{Signed, html_response, refuse};
use crate::AppState;

/// Sessions listed.
const LISTED: u32 = 100;
/// Events shown of a session (the newest).
const EVENTS_SHOWN: u64 = 200;
/// The most bytes of an event's body shown.
const EVENT_BYTES: usize = 4096;

fn tenant(state: &AppState, s: &Signed) -> String {
    state.runtime().agents().tenant_of(&s.caller.principal)
}

fn store_refusal(e: &corral_store::agents::AgentStoreError, rid: &str) -> Response {
    tracing::error!(request_id = %rid, error = %e, "agent session read failed");
    refuse(e.code(), "the session store failed; retry", rid)
}

/// `GET /ui/sessions`: the signed-in principal's agent sessions, newest first.
pub(crate) async fn sessions(State(state): State<AppState>, s: Signed) -> Response {
    let rid = s.request_id.clone();
    let listed = match state
        .store()
        .list_sessions(
            &tenant(&state, &s),
            Some(&s.caller.principal.identity()),
            &Page {
                limit: LISTED,
                after: None,
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
    } else if listed.next.is_some() {
        let _ = write!(
            body,
            "<p class=\"muted\">The newest {LISTED} are shown; <code>GET /v1/agents/sessions</code> pages through the rest.</p>"
        );
    }
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
         <dt>Working directory</dt><dd><code>{}</code></dd><dt>Status</dt><dd>{}</dd>\
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

/// `GET /ui/sessions/{id}`: one of the principal's sessions and its newest events.
pub(crate) async fn session(
    State(state): State<AppState>,
    s: Signed,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let rid = s.request_id.clone();
    let not_found = || {
        refuse(
            codes::AGENTS_NOT_FOUND,
            "you have no agent session with this id; the list shows yours",
            &rid,
        )
    };
    let Ok(Path(id)) = id else {
        return not_found();
    };
    let t = tenant(&state, &s);
    let x = match state.store().get_session(&t, &id).await {
        Ok(Some(x)) if x.owner == s.caller.principal.identity() => x,
        Ok(_) => return not_found(),
        Err(e) => return store_refusal(&e, &rid),
    };
    let after = x.events.saturating_sub(EVENTS_SHOWN);
    let events = match state
        .store()
        .session_events(&t, &id, after, u32::try_from(EVENTS_SHOWN).unwrap_or(200))
        .await
    {
        Ok(e) => e,
        Err(e) => return store_refusal(&e, &rid),
    };
    let mut body = session_facts(&x);
    let _ = write!(
        body,
        "<h2>Events</h2><p class=\"muted\">{} event(s) in all; the newest {} are shown, as \
         stored (<code>GET /v1/agents/sessions/{}/events</code> streams them).</p><ol class=\"events\">",
        x.events,
        events.len(),
        esc(&x.id)
    );
    for e in &events {
        let _ = write!(
            body,
            "<li value=\"{}\"><p><code>{}</code> <span class=\"muted\">{}</span></p>\
             <pre class=\"args\"><code>{}</code></pre></li>",
            e.seq,
            exact(&e.kind),
            esc(&utc(e.created_ms)),
            exact(&cut(&e.body.to_string())),
        );
    }
    body.push_str("</ol>");
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
