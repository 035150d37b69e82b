//! The agents host's ops over HTTP: `agents.<a>.install` has a handler (destructive tier: a
//! person approves it), and answers per `install: {mode}`.

use serde_json::json;

use crate::guard_fixture::{Fixture, approve, human, pending, plain};

fn yaml(f: &Fixture, mode: &str) -> String {
    f.yaml(
        "  - name: agents\n    allow: [agents.codex.install]\n    agents: {workdir: /tmp}\n",
        &format!("agents: [codex]\ninstall: {{mode: {mode}}}\n"),
    )
}

#[tokio::test]
async fn an_approved_install_in_offline_mode_downloads_nothing_and_names_corral_agents_prepare() {
    let f = Fixture::new();
    let s = f.start(&yaml(&f, "offline")).await;
    let ada = human("ada", &["admin"]);
    let r = plain(&s, &ada, "agents.codex.install", json!({})).await;
    let id = pending(&r)["action_id"].as_str().unwrap().to_owned();
    approve(&s, &ada, &id).await;
    let r = plain(&s, &ada, "agents.codex.install", json!({})).await;
    r.assert_error(503, "agents.not_installed");
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("corral agents prepare codex"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn an_approved_install_with_agents_off_is_refused_install_off() {
    let f = Fixture::new();
    let s = f.start(&yaml(&f, "off")).await;
    let ada = human("ada", &["admin"]);
    let r = plain(&s, &ada, "agents.codex.install", json!({})).await;
    let id = pending(&r)["action_id"].as_str().unwrap().to_owned();
    approve(&s, &ada, &id).await;
    plain(&s, &ada, "agents.codex.install", json!({}))
        .await
        .assert_error(503, "agents.install_off");
}

#[test]
fn an_install_in_progress_answers_202_with_retry_after() {
    use axum::response::IntoResponse;
    let wire = corral_server::error::ApiError::new(
        corral_policy::codes::AGENTS_INSTALLING,
        "`codex` is being installed",
        Some("agents.codex.install"),
        "rid-1",
    )
    .into_response();
    assert_eq!(wire.status().as_u16(), 202);
    assert_eq!(
        wire.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("30")
    );
}
