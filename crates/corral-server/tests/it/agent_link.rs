//! The link of an agent session's turn: the LLM proxy only, authenticated by the turn's token
//! alone (`Authorization: Bearer` or `x-api-key`), forwarded with the provider's key, as the
//! session's owner in the session's run (its token budget applies).

use axum::http::HeaderMap;
use corral_agents::TokenDigest;
use serde_json::{Value, json};

use crate::common::{AGENT_TOKEN, Workspace, token_env};
use crate::llm::ALLOW_LLM;
use crate::scripted_llm::{ANSWER, LLM_YAML, ScriptedLlm, UPSTREAM_KEY};

const TURN_TOKEN: &str = "corral-agent-turn-token-0123456789abcdef";

struct Linked {
    base: String,
    client: reqwest::Client,
    upstream: ScriptedLlm,
    store: std::sync::Arc<corral_store::Store>,
    _ws: Workspace,
}

/// A server state with the scripted provider, and the link of session `session` (owned by the
/// agent token's principal) served on a local port, as the sandbox's link would be.
async fn linked(extra: &str, session: &str) -> Linked {
    linked_hooked(extra, session, None, None).await
}

/// [`linked`] with `hook` on the root agent's replies.
async fn linked_hooked(
    extra: &str,
    session: &str,
    hook: Option<std::sync::Arc<dyn corral_server::routes::llm::ReplyHook>>,
    model: Option<&str>,
) -> Linked {
    let upstream = ScriptedLlm::start().await;
    let ws = Workspace::new();
    let env = upstream.env(&token_env());
    let loaded = ws.load(
        &ws.jail_yaml(&format!("{LLM_YAML}{ALLOW_LLM}{extra}")),
        &env,
    );
    let (state, store) = corral_server::serve::build_state(&loaded, 1 << 20)
        .await
        .unwrap();
    if let Some(h) = hook {
        assert!(state.install_reply_hook(h));
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        format!("Bearer {AGENT_TOKEN}").parse().unwrap(),
    );
    let owner = corral_server::auth::authenticate(&state.authenticator(), &headers).unwrap();
    let link = state
        .agent_links(owner, model)
        .link(session, TokenDigest::of(TURN_TOKEN));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // Keep the state alive as long as the link serves.
        let _state = state;
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(link.serve(conn));
        }
    });
    Linked {
        base: format!("http://{addr}"),
        client: reqwest::Client::builder().no_proxy().build().unwrap(),
        upstream,
        store,
        _ws: ws,
    }
}

fn chat() -> Value {
    json!({"model": "ok", "messages": [{"role": "user", "content": "What is the secret number?"}]})
}

impl Linked {
    async fn post(&self, path: &str, auth: &[(&str, &str)]) -> crate::common::Reply {
        let mut rb = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&chat());
        for (k, v) in auth {
            rb = rb.header(*k, *v);
        }
        crate::common::send(rb).await
    }
}

#[tokio::test]
async fn a_turns_model_call_is_forwarded_with_the_providers_key_never_the_turns_token() {
    let l = linked("", "sess-1").await;
    let bearer = format!("Bearer {TURN_TOKEN}");
    let r = l
        .post("/v1/chat/completions", &[("authorization", &bearer)])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], ANSWER);
    // The Anthropic SDKs send the key as `x-api-key`: the same token is accepted there.
    let r = l
        .post("/v1/chat/completions", &[("x-api-key", TURN_TOKEN)])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let seen = l.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    assert!(!format!("{seen:?}").contains(TURN_TOKEN));
    // Audited as the owner's model call in the session's run.
    let events: Vec<_> = l
        .store
        .audit_recent(None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.op == "llm.chat")
        .collect();
    assert_eq!(events.len(), 2);
    let text = serde_json::to_string(&events[0]).unwrap();
    assert!(text.contains("sess-1"), "the run is the session: {text}");
    assert!(!text.contains(TURN_TOKEN));
}

#[tokio::test]
async fn a_turns_link_refuses_another_token_no_token_and_the_deployments_tokens() {
    let l = linked("", "sess-2").await;
    let cases: [&[(&str, &str)]; 4] = [
        &[("authorization", "Bearer corral-agent-not-the-turns-token")],
        &[("x-api-key", "wrong")],
        &[],
        // The deployment's own token reaches nothing through a turn's link.
        &[("authorization", &format!("Bearer {AGENT_TOKEN}"))],
    ];
    for auth in cases {
        let r = l.post("/v1/chat/completions", auth).await;
        assert_eq!(r.status, 401, "{auth:?}: {}", r.text);
        assert!(r.code().starts_with("auth."), "{}", r.text);
    }
    assert!(l.upstream.seen().is_empty());
}

#[tokio::test]
async fn a_turns_link_reaches_only_the_llm_proxy_not_corrals_ops() {
    let l = linked("", "sess-3").await;
    let bearer = format!("Bearer {TURN_TOKEN}");
    for path in ["/ops/files.read", "/mcp", "/v1/agents/sessions"] {
        let r = l.post(path, &[("authorization", &bearer)]).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
    }
    let r = l
        .client
        .get(format!("{}/ops", l.base))
        .bearer_auth(TURN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert!(l.upstream.seen().is_empty());
}

#[tokio::test]
async fn a_sessions_model_calls_count_against_its_runs_token_budget() {
    let l = linked("budgets: {tokens: 30}\n", "sess-4").await;
    let bearer = format!("Bearer {TURN_TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    // 18 tokens, then 36: the third call finds the session's budget used up.
    assert_eq!(l.post("/v1/chat/completions", &auth).await.status, 200);
    assert_eq!(l.post("/v1/chat/completions", &auth).await.status, 200);
    let r = l.post("/v1/chat/completions", &auth).await;
    r.assert_error(429, "budget.tokens_exhausted");
    assert_eq!(l.upstream.seen().len(), 2);
}

#[tokio::test]
async fn a_turns_cli_is_the_root_agent_whatever_x_corral_agent_it_sends() {
    // In learning mode the root's replies are checked; a specialist's are not. The agent's
    // CLI is hostile: naming a specialist must not take its replies out of the check.
    let hook = std::sync::Arc::new(crate::llm::Redact::default());
    let l = linked_hooked("", "sess-5", Some(hook.clone()), None).await;
    let bearer = format!("Bearer {TURN_TOKEN}");
    let r = l
        .post(
            "/v1/chat/completions",
            &[("authorization", &bearer), ("x-corral-agent", "researcher")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "The answer is [withheld].",
        "{}",
        r.text
    );
    assert_eq!(hook.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_turn_may_ask_only_for_its_sessions_model() {
    // The agent scope's `models` decided the session's model; the CLI (hostile) may not ask
    // the proxy for another through its link.
    let l = linked_hooked("", "sess-6", None, Some("session-model")).await;
    let bearer = format!("Bearer {TURN_TOKEN}");
    let r = l
        .post("/v1/chat/completions", &[("authorization", &bearer)])
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.code(), "agents.model_not_allowed", "{}", r.text);
    assert!(l.upstream.seen().is_empty());
    let ok = l
        .client
        .post(format!("{}/v1/chat/completions", l.base))
        .header("authorization", &bearer)
        .json(&json!({"model": "session-model", "messages": [{"role": "user", "content": "hi"}]}));
    let r = crate::common::send(ok).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn a_turn_names_no_other_model_through_routing_fields_or_a_tools_model() {
    let l = linked_hooked("", "sess-7", None, Some("session-model")).await;
    let bearer = format!("Bearer {TURN_TOKEN}");
    let base = json!({"model": "session-model", "messages": [{"role": "user", "content": "hi"}]});
    let mut cases = Vec::new();
    for (k, v) in [
        ("models", json!(["o3-pro"])),
        ("fallbacks", json!(["o3-pro"])),
        ("route", json!("fallback")),
        ("provider", json!({"order": ["x"]})),
        (
            "tools",
            json!([{"type": "image_generation", "model": "gpt-image-1"}]),
        ),
    ] {
        let mut body = base.clone();
        body[k] = v;
        cases.push((k, body));
    }
    for (k, body) in cases {
        let rb = l
            .client
            .post(format!("{}/v1/chat/completions", l.base))
            .header("authorization", &bearer)
            .json(&body);
        let r = crate::common::send(rb).await;
        assert_eq!(r.status, 403, "{k}: {}", r.text);
        assert_eq!(r.code(), "agents.model_not_allowed", "{k}: {}", r.text);
    }
    assert!(l.upstream.seen().is_empty(), "nothing reached the provider");
}
