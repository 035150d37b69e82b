//! The agents host over HTTP (`/v1/agents/*`, also under `/agents/{adapter}`), in the wire
//! format of the `openai` SDK's `client.beta.agents`: both session gates, the adapter's
//! selection order, owner-only reads, bad input, a fresh session's events and saved agents.
//!
//! No sandbox runs here (the sandbox helper of an in-process server is the test binary), so every
//! session is created without `input`; the only turns are ones whose prompt is blank, which the
//! session refuses before it starts a sandbox (they claim the turn and end it failed, at once:
//! enough to show how cancels and callers that go away meet a turn's start and end). The
//! adapters' CLIs are "installed" by seeding the install records under the state directory
//! (`install: {mode: offline}` never downloads).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{Reply, Server, Workspace, send};

const ALICE: &str = "alice-token-0123456789abcdef0123";
const ALICE_ENV: &str = "CORRAL_IT_AGENTS_ALICE";
const BOB: &str = "bob-token-fedcba9876543210fedcba";
const BOB_ENV: &str = "CORRAL_IT_AGENTS_BOB";

/// Every adapter op a session needs, plus the generic gate.
const ALL_SESSION_OPS: &str = "[agents.codex.sessions.create, agents.claude_code.sessions.create, agents.sessions.create, agents.codex.sessions.send_event, agents.claude_code.sessions.send_event]";

/// A workspace whose root holds the agent scope's workdir (`<root>/work`).
struct Host {
    ws: Workspace,
    workdir: PathBuf,
}

impl Host {
    fn new() -> Self {
        let ws = Workspace::new();
        let workdir = ws.root.join("work");
        std::fs::create_dir_all(&workdir).unwrap();
        Self { ws, workdir }
    }

    /// Pretends `corral agents prepare <adapter>` ran: the install record and the CLI's binary.
    fn seed(&self, adapter: &str) {
        let (version, package, exe) = match adapter {
            "codex" => (
                "0.171.0",
                "@openai/codex",
                "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
            ),
            "claude_code" => (
                "2.1.328",
                "@anthropic-ai/claude-code",
                "node_modules/@anthropic-ai/claude-code-linux-x64/claude",
            ),
            other => panic!("no adapter {other}"),
        };
        let dir = self.ws.state.join("agents").join(adapter).join(version);
        let exe = dir.join(exe);
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        std::fs::write(&exe, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::write(
            dir.join("corral-install.json"),
            json!({"package": package, "version": version}).to_string(),
        )
        .unwrap();
    }

    /// A config mounting `agents` (the value of the top-level `agents:`), in offline install
    /// mode, with `rules` (YAML list items) and the two tokens `alice` and `bob`.
    fn yaml(&self, agents: &str, rules: &str) -> String {
        format!(
            "version: 1
state_dir: {state}
agents: {agents}
install: {{mode: offline}}
rules:
{rules}auth:
  tokens:
    - {{id: alice, roles: [operator], token_env: {ALICE_ENV}}}
    - {{id: bob, roles: [operator], token_env: {BOB_ENV}}}
  jwt: {{hs256_secret_env: {jwt_env}, service_claim: {{name: typ, value: service}}}}
",
            jwt_env = crate::guard_fixture::JWT_ENV,
            state = self.ws.state.display(),
        )
    }

    /// One allow rule of `ops` (a YAML flow list) with the agent scope over the workdir, run
    /// unattended.
    fn rule(&self, name: &str, ops: &str) -> String {
        format!(
            "  - name: {name}\n    allow: {ops}\n    confirm: never\n    agents: {{workdir: {}, permissions: workspace-write}}\n",
            self.workdir.display()
        )
    }

    async fn start(&self, yaml: &str) -> Server {
        Server::start(&self.loaded(yaml)).await
    }

    fn loaded(&self, yaml: &str) -> corral_config::Loaded {
        self.ws.load(
            yaml,
            &[
                (ALICE_ENV, ALICE),
                (BOB_ENV, BOB),
                (
                    crate::guard_fixture::JWT_ENV,
                    crate::guard_fixture::JWT_SECRET,
                ),
            ],
        )
    }

    /// A server mounting `agents` with every session op allowed to everyone.
    async fn open(&self, agents: &str) -> Server {
        self.start(&self.yaml(agents, &self.rule("host", ALL_SESSION_OPS)))
            .await
    }
}

/// `POST <path>` with a JSON body as `token` (`None`: no credentials) and extra headers.
async fn post(
    s: &Server,
    token: Option<&str>,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Reply {
    let mut rb = s.client().post(s.url(path)).json(body);
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    send(rb).await
}

async fn get(s: &Server, token: &str, path: &str) -> Reply {
    s.get_as(token, path).await
}

async fn delete(s: &Server, token: &str, path: &str) -> Reply {
    send(s.client().delete(s.url(path)).bearer_auth(token)).await
}

/// The body of a session create over the workdir `dir`, without `input` (no turn starts).
fn session_body(dir: &Path) -> Value {
    json!({"environment": {"type": "self_hosted", "workspace_directory": dir.display().to_string()}})
}

/// A session of alice's in the host's workdir (no turn).
async fn new_session(s: &Server, h: &Host) -> Value {
    session(
        &post(
            s,
            Some(ALICE),
            "/v1/agents/sessions",
            &session_body(&h.workdir),
            &[],
        )
        .await,
    )
}

/// Asserts the refusal `status` `code` whose message contains `needle`.
#[track_caller]
fn refused_naming(r: &Reply, status: u16, code: &str, needle: &str) {
    r.assert_error(status, code);
    let message = r.json()["error"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains(needle), "{}", r.text);
}

/// Asserts `token`'s principal has no session.
async fn assert_no_sessions(s: &Server, token: &str) {
    let listed = get(s, token, "/v1/agents/sessions").await;
    assert_eq!(listed.json()["data"], json!([]), "{}", listed.text);
}

/// Asserts a 200 `agent.session` and returns it.
#[track_caller]
fn session(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "body: {}", r.text);
    let v = r.json();
    assert_eq!(v["object"], "agent.session", "{v}");
    assert!(
        v["id"].as_str().is_some_and(|i| i.starts_with("sess_")),
        "{v}"
    );
    v
}

// ---------------------------------------------------------------- the two gates

/// A server mounting codex (installed) whose one rule allows `ops`; alice's session create
/// over the workdir, and the sessions she has afterwards.
async fn create_with(ops: &str) -> (Reply, Value) {
    let h = Host::new();
    h.seed("codex");
    let s = h.start(&h.yaml("[codex]", &h.rule("r", ops))).await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents/sessions",
        &session_body(&h.workdir),
        &[],
    )
    .await;
    let listed = get(&s, ALICE, "/v1/agents/sessions").await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    (r, listed.json()["data"].clone())
}

#[tokio::test]
async fn gates_both_allowed_make_a_session() {
    let (r, data) = create_with("[agents.codex.sessions.create, agents.sessions.create]").await;
    let v = session(&r);
    assert_eq!(v["corral"]["adapter"], "codex", "{v}");
    assert_eq!(v["status"], "idle", "{v}");
    assert_eq!(v["agent"]["model"], "gpt-5-codex", "{v}");
    assert_eq!(data.as_array().map(Vec::len), Some(1), "{data}");
    assert_eq!(data[0]["id"], v["id"], "{data}");
}

/// The adapter's op is allowed, the generic gate is not: the caller is told which gate is
/// missing (`403 agents.session_gate`, whose fix names `agents.sessions.create`), as
/// `corral explain` and the engine decide it.
#[tokio::test]
async fn gates_adapter_op_without_the_generic_gate_is_403_session_gate() {
    let (r, data) = create_with("[agents.codex.sessions.create]").await;
    refused_naming(&r, 403, "agents.session_gate", "agents.sessions.create");
    assert_eq!(r.json()["op"], "agents.codex.sessions.create", "{}", r.text);
    assert_eq!(data, json!([]), "nothing stored");
}

#[tokio::test]
async fn gates_generic_gate_without_the_adapter_op_is_404_not_enabled() {
    let (r, data) = create_with("[agents.sessions.create]").await;
    r.assert_error(404, "op.not_enabled");
    assert_eq!(r.json()["op"], "agents.codex.sessions.create", "{}", r.text);
    assert_eq!(data, json!([]), "nothing stored");
}

#[tokio::test]
async fn gates_neither_allowed_is_404_not_enabled() {
    // Only an unrelated agents op is allowed.
    let (r, data) = create_with("[agents.codex.sessions.send_event]").await;
    r.assert_error(404, "op.not_enabled");
    assert_eq!(data, json!([]), "nothing stored");
}

#[tokio::test]
async fn a_session_create_without_the_cli_installed_is_503_not_installed() {
    let h = Host::new();
    let s = h.open("[codex]").await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents/sessions",
        &session_body(&h.workdir),
        &[],
    )
    .await;
    refused_naming(
        &r,
        503,
        "agents.not_installed",
        "corral agents prepare codex",
    );
    assert_no_sessions(&s, ALICE).await;
}

// ---------------------------------------------------------------- adapter selection

#[tokio::test]
async fn the_path_picks_the_adapter() {
    let h = Host::new();
    h.seed("codex");
    h.seed("claude_code");
    let s = h.open("[codex, claude_code]").await;
    let v = session(
        &post(
            &s,
            Some(ALICE),
            "/agents/claude_code/v1/agents/sessions",
            &session_body(&h.workdir),
            &[],
        )
        .await,
    );
    assert_eq!(v["corral"]["adapter"], "claude_code", "{v}");
    assert_eq!(v["agent"]["model"], "claude-sonnet-4-5", "{v}");
    assert_eq!(v["agent"]["id"], "adapter:claude_code", "{v}");
    // The session is read back under either mount.
    let id = v["id"].as_str().unwrap();
    let again = get(&s, ALICE, &format!("/v1/agents/sessions/{id}")).await;
    assert_eq!(session(&again)["corral"]["adapter"], "claude_code");
}

#[tokio::test]
async fn the_x_corral_adapter_header_picks_the_adapter() {
    let h = Host::new();
    h.seed("codex");
    h.seed("claude_code");
    let s = h.open("[codex, claude_code]").await;
    let v = session(
        &post(
            &s,
            Some(ALICE),
            "/v1/agents/sessions",
            &session_body(&h.workdir),
            &[("X-Corral-Adapter", "claude_code")],
        )
        .await,
    );
    assert_eq!(v["corral"]["adapter"], "claude_code", "{v}");
}

#[tokio::test]
async fn an_adapters_name_as_model_picks_it_and_gets_its_default_model() {
    let h = Host::new();
    h.seed("codex");
    h.seed("claude_code");
    let s = h.open("[codex, claude_code]").await;
    let mut body = session_body(&h.workdir);
    body["agent"] = json!({"model": "claude_code"});
    let v = session(&post(&s, Some(ALICE), "/v1/agents/sessions", &body, &[]).await);
    assert_eq!(v["corral"]["adapter"], "claude_code", "{v}");
    assert_eq!(v["agent"]["model"], "claude-sonnet-4-5", "{v}");
    assert_ne!(v["agent"]["model"], "claude_code", "{v}");
}

#[tokio::test]
async fn the_configs_default_picks_the_adapter_and_a_real_model_is_kept() {
    let h = Host::new();
    h.seed("codex");
    h.seed("claude_code");
    let s = h
        .open("{adapters: [codex, claude_code], default: claude_code}")
        .await;
    let mut body = session_body(&h.workdir);
    body["agent"] = json!({"model": "claude-opus-4-1"});
    let v = session(&post(&s, Some(ALICE), "/v1/agents/sessions", &body, &[]).await);
    assert_eq!(v["corral"]["adapter"], "claude_code", "{v}");
    assert_eq!(v["agent"]["model"], "claude-opus-4-1", "{v}");
}

#[tokio::test]
async fn the_only_mounted_adapter_is_picked() {
    let h = Host::new();
    h.seed("claude_code");
    let s = h.open("[claude_code]").await;
    let v = new_session(&s, &h).await;
    assert_eq!(v["corral"]["adapter"], "claude_code", "{v}");
}

#[tokio::test]
async fn two_adapters_no_default_and_no_hint_is_400_adapter_required() {
    let h = Host::new();
    h.seed("codex");
    h.seed("claude_code");
    let s = h.open("[codex, claude_code]").await;
    let mut body = session_body(&h.workdir);
    body["agent"] = json!({"model": "gpt-5"});
    let r = post(&s, Some(ALICE), "/v1/agents/sessions", &body, &[]).await;
    refused_naming(&r, 400, "agents.adapter_required", "X-Corral-Adapter");
    assert_no_sessions(&s, ALICE).await;
}

// ---------------------------------------------------------------- owner-only

#[tokio::test]
async fn a_session_is_its_owners_only() {
    let h = Host::new();
    h.seed("codex");
    let s = h.open("[codex]").await;
    let mut body = session_body(&h.workdir);
    body["metadata"] = json!({"ticket": "T-1"});
    let v = session(&post(&s, Some(ALICE), "/v1/agents/sessions", &body, &[]).await);
    let id = v["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/agents/sessions/{id}");

    // Bob sees nothing of it: as if it did not exist.
    get(&s, BOB, &path)
        .await
        .assert_error(404, "agents.not_found");
    let bobs = get(&s, BOB, "/v1/agents/sessions").await;
    assert_eq!(bobs.status, 200, "{}", bobs.text);
    assert_eq!(bobs.json()["object"], "list", "{}", bobs.text);
    assert_eq!(bobs.json()["data"], json!([]), "{}", bobs.text);
    let r = post(
        &s,
        Some(BOB),
        &format!("{path}/events"),
        &json!({"events": [{"type": "agent.session.input.message", "input": "hi"}]}),
        &[],
    )
    .await;
    r.assert_error(404, "agents.not_found");
    get(&s, BOB, &format!("{path}/events"))
        .await
        .assert_error(404, "agents.not_found");

    // Alice sees it as the SDK's `AgentSession`.
    let mine = session(&get(&s, ALICE, &path).await);
    assert_eq!(mine["id"], id.as_str(), "{mine}");
    assert_eq!(mine["status"], "idle", "{mine}");
    assert_eq!(mine["environment"]["type"], "self_hosted", "{mine}");
    assert_eq!(
        mine["environment"]["workspace_directory"],
        h.workdir.display().to_string(),
        "{mine}"
    );
    assert_eq!(mine["metadata"], json!({"ticket": "T-1"}), "{mine}");
    assert_eq!(mine["corral"]["turns"], 0, "{mine}");
    let alices = get(&s, ALICE, "/v1/agents/sessions").await;
    let data = alices.json()["data"].clone();
    assert_eq!(data.as_array().map(Vec::len), Some(1), "{data}");
    assert_eq!(data[0]["id"], id.as_str(), "{data}");
    assert_eq!(alices.json()["first_id"], id.as_str());
}

// ---------------------------------------------------------------- bad input

#[tokio::test]
async fn an_environment_other_than_self_hosted_is_400_environment_unsupported() {
    let h = Host::new();
    h.seed("codex");
    let s = h.open("[codex]").await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents/sessions",
        &json!({"environment": {"type": "cloud"}}),
        &[],
    )
    .await;
    r.assert_error(400, "agents.environment_unsupported");
    assert!(
        r.json()["error"].as_str().unwrap().contains("self_hosted"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn a_workspace_directory_outside_the_scopes_workdir_is_403_workdir_outside() {
    let h = Host::new();
    h.seed("codex");
    let outside = h.ws.base().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let s = h.open("[codex]").await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents/sessions",
        &session_body(&outside),
        &[],
    )
    .await;
    r.assert_error(403, "agents.workdir_outside");
    assert_no_sessions(&s, ALICE).await;
}

#[tokio::test]
async fn a_symlink_in_the_workdir_pointing_out_of_it_is_403_workdir_outside() {
    let h = Host::new();
    h.seed("codex");
    let outside = h.ws.base().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let link = h.workdir.join("escape");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let s = h.open("[codex]").await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents/sessions",
        &session_body(&link),
        &[],
    )
    .await;
    r.assert_error(403, "agents.workdir_outside");
    assert_no_sessions(&s, ALICE).await;
    // A real subdirectory of the workdir is fine.
    let sub = h.workdir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let v = session(
        &post(
            &s,
            Some(ALICE),
            "/v1/agents/sessions",
            &session_body(&sub),
            &[],
        )
        .await,
    );
    assert_eq!(
        v["environment"]["workspace_directory"],
        sub.display().to_string(),
        "{v}"
    );
}

#[tokio::test]
async fn an_empty_events_list_is_400_invalid_and_no_credentials_is_401() {
    let h = Host::new();
    h.seed("codex");
    let s = h.open("[codex]").await;
    let v = new_session(&s, &h).await;
    let id = v["id"].as_str().unwrap();
    let events = format!("/v1/agents/sessions/{id}/events");
    post(&s, Some(ALICE), &events, &json!({"events": []}), &[])
        .await
        .assert_error(400, "agents.invalid");
    // Nothing was recorded by the refused post: the session is still idle with no turn.
    let after = session(&get(&s, ALICE, &format!("/v1/agents/sessions/{id}")).await);
    assert_eq!(
        (after["status"].clone(), after["corral"]["turns"].clone()),
        (json!("idle"), json!(0)),
        "{after}"
    );

    // No credentials, on each route.
    for (method, path) in [
        ("POST", "/v1/agents/sessions".to_owned()),
        ("GET", "/v1/agents/sessions".to_owned()),
        ("GET", format!("/v1/agents/sessions/{id}")),
        ("POST", events.clone()),
        ("GET", events.clone()),
        ("POST", "/v1/agents".to_owned()),
        ("GET", "/v1/agents".to_owned()),
        ("POST", "/agents/codex/v1/agents/sessions".to_owned()),
    ] {
        let rb = match method {
            "POST" => s
                .client()
                .post(s.url(&path))
                .json(&session_body(&h.workdir)),
            _ => s.client().get(s.url(&path)),
        };
        let r = send(rb).await;
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
        assert!(r.code().starts_with("auth."), "{method} {path}: {}", r.text);
    }
    let listed = get(&s, ALICE, "/v1/agents/sessions").await;
    assert_eq!(
        listed.json()["data"].as_array().map(Vec::len),
        Some(1),
        "{}",
        listed.text
    );
}

// ---------------------------------------------------------------- events

#[tokio::test]
async fn a_fresh_sessions_events_are_one_session_created() {
    let h = Host::new();
    h.seed("codex");
    let s = h.open("[codex]").await;
    let v = new_session(&s, &h).await;
    let id = v["id"].as_str().unwrap();
    let r = get(&s, ALICE, &format!("/v1/agents/sessions/{id}/events")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.headers
            .get("content-type")
            .and_then(|h| h.to_str().ok())
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    let list = r.json();
    assert_eq!(list["object"], "list", "{list}");
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{list}");
    assert_eq!(data[0]["type"], "agent.session.created", "{list}");
    assert_eq!(data[0]["event_id"], "1", "{list}");
    assert_eq!(data[0]["session"]["id"], id, "{list}");
    assert_eq!(data[0]["session"]["object"], "agent.session", "{list}");
    // After the last event: nothing more.
    let r = get(
        &s,
        ALICE,
        &format!("/v1/agents/sessions/{id}/events?after=1"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"], json!([]), "{}", r.text);
}

// ---------------------------------------------------------------- saved agents

#[tokio::test]
async fn the_name_lab_coach_is_reserved() {
    let h = Host::new();
    let s = h.open("[codex]").await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents",
        &json!({"model": "gpt-5-codex", "name": "lab_coach"}),
        &[],
    )
    .await;
    r.assert_error(400, "agents.invalid");
    assert!(
        r.json()["error"].as_str().unwrap().contains("lab_coach"),
        "{}",
        r.text
    );
    let listed = get(&s, ALICE, "/v1/agents").await;
    assert_eq!(listed.json()["data"], json!([]), "{}", listed.text);
}

#[tokio::test]
async fn a_saved_agent_is_its_owners_only_and_the_owner_deletes_it() {
    let h = Host::new();
    let s = h.open("[codex]").await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents",
        &json!({"model": "gpt-5-codex", "name": "fixer", "instructions": "fix tests", "metadata": {"team": "core"}}),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let a = r.json();
    assert_eq!(a["object"], "agent", "{a}");
    assert_eq!(a["model"], "gpt-5-codex", "{a}");
    assert_eq!(a["name"], "fixer", "{a}");
    let id = a["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/agents/{id}");

    // Bob: not found, not listed, not deletable.
    get(&s, BOB, &path)
        .await
        .assert_error(404, "agents.not_found");
    let bobs = get(&s, BOB, "/v1/agents").await;
    assert_eq!(bobs.status, 200, "{}", bobs.text);
    assert_eq!(bobs.json()["data"], json!([]), "{}", bobs.text);
    // Nor does a page of one tell bob alice has one (the owner filter is in the query).
    let page = get(&s, BOB, "/v1/agents?limit=1").await;
    assert_eq!(
        (page.json()["has_more"].clone(), page.json()["next"].clone()),
        (json!(false), Value::Null),
        "{}",
        page.text
    );
    delete(&s, BOB, &path)
        .await
        .assert_error(404, "agents.not_found");

    // Alice: sees it, lists it, deletes it.
    let mine = get(&s, ALICE, &path).await;
    assert_eq!(mine.status, 200, "{}", mine.text);
    assert_eq!(mine.json()["id"], id.as_str());
    let alices = get(&s, ALICE, "/v1/agents").await;
    assert_eq!(
        alices.json()["data"].as_array().map(Vec::len),
        Some(1),
        "{}",
        alices.text
    );
    let d = delete(&s, ALICE, &path).await;
    assert_eq!(d.status, 200, "{}", d.text);
    assert_eq!(
        d.json(),
        json!({"id": id, "object": "agent.deleted", "deleted": true})
    );
    get(&s, ALICE, &path)
        .await
        .assert_error(404, "agents.not_found");
    let alices = get(&s, ALICE, "/v1/agents").await;
    assert_eq!(alices.json()["data"], json!([]), "{}", alices.text);
}

/// A saved agent and a session belong to their owner's full identity, not the bare id: a
/// service JWT, or a person's JWT, whose `sub` is the static token's id (`alice`) neither lists
/// nor reads what that token made (console attack review).
#[tokio::test]
async fn the_same_id_from_another_credential_is_not_the_owner() {
    let h = Host::new();
    let s = h.open("[codex]").await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents",
        &json!({"model": "gpt-5-codex"}),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let path = format!("/v1/agents/{}", r.json()["id"].as_str().unwrap());
    for other in [
        crate::guard_fixture::service("alice", &["operator"]),
        crate::guard_fixture::human("alice", &["operator"]),
    ] {
        get(&s, &other, &path)
            .await
            .assert_error(404, "agents.not_found");
        let listed = get(&s, &other, "/v1/agents").await;
        assert_eq!(listed.json()["data"], json!([]), "{}", listed.text);
        let sessions = get(&s, &other, "/v1/agents/sessions").await;
        assert_eq!(sessions.json()["data"], json!([]), "{}", sessions.text);
    }
    let mine = get(&s, ALICE, &path).await;
    assert_eq!(mine.status, 200, "{}", mine.text);
}

/// `DELETE /v1/agents/sessions/{id}`: the owner's only (bob gets 404 and it stays); gone
/// afterwards, with its events.
#[tokio::test]
async fn a_session_is_deleted_by_its_owner_only() {
    let h = Host::new();
    h.seed("codex");
    let s = h.open("[codex]").await;
    let v = new_session(&s, &h).await;
    let path = format!("/v1/agents/sessions/{}", v["id"].as_str().unwrap());
    delete(&s, BOB, &path)
        .await
        .assert_error(404, "agents.not_found");
    assert_eq!(get(&s, ALICE, &path).await.status, 200);
    let r = delete(&s, ALICE, &path).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        (r.json()["object"].clone(), r.json()["deleted"].clone()),
        (json!("agent.session.deleted"), json!(true)),
        "{}",
        r.text
    );
    get(&s, ALICE, &path)
        .await
        .assert_error(404, "agents.not_found");
    get(&s, ALICE, &format!("{path}/events"))
        .await
        .assert_error(404, "agents.not_found");
    assert_no_sessions(&s, ALICE).await;
}

/// One owner keeps at most `MAX_AGENTS_PER_OWNER` saved agents: the next is `429
/// agents.quota`, saying how to free a place; another owner is not held back, and a deleted
/// agent frees its place.
#[tokio::test]
async fn saved_agents_are_capped_per_owner() {
    let h = Host::new();
    let s = h.open("[codex]").await;
    let save = |token: &'static str| {
        let s = &s;
        async move {
            post(
                s,
                Some(token),
                "/v1/agents",
                &json!({"model": "gpt-5-codex"}),
                &[],
            )
            .await
        }
    };
    let mut first = None;
    for _ in 0..corral_runtime::agents::MAX_AGENTS_PER_OWNER {
        let r = save(ALICE).await;
        assert_eq!(r.status, 200, "{}", r.text);
        first.get_or_insert(r.json()["id"].as_str().unwrap().to_owned());
    }
    refused_naming(
        &save(ALICE).await,
        429,
        "agents.quota",
        "DELETE /v1/agents/{id}",
    );
    assert_eq!(save(BOB).await.status, 200);
    let first = first.unwrap();
    assert_eq!(
        delete(&s, ALICE, &format!("/v1/agents/{first}"))
            .await
            .status,
        200
    );
    assert_eq!(save(ALICE).await.status, 200);
}

// ---------------------------------------------------------------- scope keys the host enforces

/// A server whose one rule's agent scope adds `extra` (`WORKDIR` stands for the host's
/// workdir), alice's session create under it, and `extra` as written (the host goes with the
/// server: its directories are the server's).
async fn create_under_scope(extra: &str) -> (Host, Server, Reply, String) {
    let h = Host::new();
    h.seed("codex");
    let extra = extra.replace("WORKDIR", &h.workdir.display().to_string());
    let rule = format!(
        "  - name: r\n    allow: {ALL_SESSION_OPS}\n    confirm: never\n    agents: {{workdir: {}, permissions: workspace-write, {extra}}}\n",
        h.workdir.display()
    );
    let s = h.start(&h.yaml("[codex]", &rule)).await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents/sessions",
        &session_body(&h.workdir),
        &[],
    )
    .await;
    (h, s, r, extra)
}

/// A scope's `network` (`none`, `loopback`, an allow-list: what the agent reaches beside the
/// LLM proxy, through corral's egress proxy) and `commands` are enforced on a hosted agent: the
/// session is made.
#[tokio::test]
async fn a_scope_with_a_network_setting_or_commands_makes_the_session() {
    for network in [
        "network: none",
        "network: loopback",
        "network: {allow: [\"pypi.org:443\", \"*.pythonhosted.org:443\"]}",
        // and `commands` (enforced by the kernel: `corral-agents --test it session::an_agent_with_commands`),
        "commands: [ls, git]",
        // and `confirm_writes_outside` (`corral-cli --test it agents::a_write_outside_the_free`).
        "confirm_writes_outside: [WORKDIR/src]",
    ] {
        let (_h, s, r, _) = create_under_scope(network).await;
        assert_eq!(r.status, 200, "{network}: {}", r.text);
        let listed = get(&s, ALICE, "/v1/agents/sessions").await;
        assert_eq!(
            listed.json()["data"].as_array().map(Vec::len),
            Some(1),
            "{network}"
        );
    }
}

// ---------------------------------------------------------------- a session's own rule

/// A session's input event is judged for the session's own workdir and model: calling
/// `send_event` directly with another workdir (one a more permissive rule admits) or none is
/// refused, so a read-only session never turns writable through another rule.
#[tokio::test]
async fn send_event_is_judged_for_the_sessions_own_workdir_never_another_rules() {
    let h = Host::new();
    h.seed("codex");
    let shared = h.ws.root.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let rules = format!(
        "{}  - name: shared-readonly\n    allow: {ALL_SESSION_OPS}\n    confirm: never\n    agents: {{workdir: {}, permissions: read-only}}\n",
        h.rule("alice-own", ALL_SESSION_OPS),
        shared.display()
    );
    let s = h.start(&h.yaml("[codex]", &rules)).await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents/sessions",
        &session_body(&shared),
        &[],
    )
    .await;
    let id = session(&r)["id"].as_str().unwrap().to_owned();
    let event = json!({"type": "message", "text": "write something"});
    for workdir in [Some(h.workdir.display().to_string()), None] {
        let mut args = json!({"session": id, "event": event, "model": "gpt-5-codex"});
        if let Some(w) = &workdir {
            args["workdir"] = json!(w);
        }
        let r = post(
            &s,
            Some(ALICE),
            "/ops/agents.codex.sessions.send_event",
            &args,
            &[],
        )
        .await;
        r.assert_error(403, "agents.workdir_outside");
        assert!(
            r.text.contains("pass the session's own `workdir`"),
            "{}",
            r.text
        );
    }
    let after = session(&get(&s, ALICE, &format!("/v1/agents/sessions/{id}")).await);
    assert_eq!(after["corral"]["turns"], 0, "no turn ran: {after}");
}

/// `agents.<a>.run` opens a session too: it needs the generic gate like a session create.
#[tokio::test]
async fn run_needs_the_generic_gate_too() {
    let h = Host::new();
    h.seed("codex");
    let s = h
        .start(&h.yaml(
            "[codex]",
            &h.rule("r", "[agents.codex.run, agents.codex.sessions.send_event]"),
        ))
        .await;
    let r = post(
        &s,
        Some(ALICE),
        "/ops/agents.codex.run",
        &json!({"task": "hello"}),
        &[],
    )
    .await;
    refused_naming(&r, 403, "agents.session_gate", "agents.sessions.create");
    assert_no_sessions(&s, ALICE).await;
}

/// A principal holds at most 16 event streams open at once; a closed one frees its slot.
#[tokio::test]
async fn event_streams_are_capped_per_principal() {
    let h = Host::new();
    h.seed("codex");
    let s = h.open("[codex]").await;
    let id = new_session(&s, &h).await["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/agents/sessions/{id}/events");
    let open = || {
        s.client()
            .get(s.url(&path))
            .bearer_auth(ALICE)
            .header("accept", "text/event-stream")
            .send()
    };
    let mut held = Vec::new();
    for _ in 0..16 {
        let r = open().await.unwrap();
        assert_eq!(r.status(), 200);
        held.push(r);
    }
    let r = send(
        s.client()
            .get(s.url(&path))
            .bearer_auth(ALICE)
            .header("accept", "text/event-stream"),
    )
    .await;
    r.assert_error(429, "limit.concurrency");
    // Another principal's streams are counted apart (bob's read of alice's session is a 404,
    // before any stream is opened).
    get(&s, BOB, &path)
        .await
        .assert_error(404, "agents.not_found");
    // A stream closed: its slot is free again once the server notices (its next write fails).
    drop(held.pop());
    let mut reopened = None;
    for _ in 0..100 {
        let r = open().await.unwrap();
        if r.status() == 200 {
            reopened = Some(r);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(reopened.is_some(), "a closed stream's slot is freed");
}

/// A session create a person approved, sent again: the stored session, marked as a stored
/// outcome (`"replayed": true` and `X-Corral-Replayed`), never a second session.
#[tokio::test]
async fn an_approved_session_create_sent_again_is_marked_replayed() {
    let h = Host::new();
    h.seed("codex");
    let rule = h
        .rule("host", ALL_SESSION_OPS)
        .replace("    confirm: never\n", "");
    let s = h.start(&h.yaml("[codex]", &rule)).await;
    let body = session_body(&h.workdir);
    let first = post(&s, Some(ALICE), "/v1/agents/sessions", &body, &[]).await;
    assert_eq!(first.status, 202, "{}", first.text);
    let action = first.json()["action_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let decided = s
        .decide_as(Some(ALICE), &action, json!({"decision": "approve"}))
        .await;
    assert_eq!(decided.status, 200, "{}", decided.text);
    let made = post(&s, Some(ALICE), "/v1/agents/sessions", &body, &[]).await;
    assert_eq!(made.status, 200, "{}", made.text);
    assert!(made.json().get("replayed").is_none(), "{}", made.text);
    let again = post(&s, Some(ALICE), "/v1/agents/sessions", &body, &[]).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json()["replayed"], true, "{}", again.text);
    assert_eq!(again.json()["id"], made.json()["id"]);
    assert_eq!(
        again
            .headers
            .get("x-corral-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let listed = get(&s, ALICE, "/v1/agents/sessions").await;
    assert_eq!(
        listed.json()["data"].as_array().map(Vec::len),
        Some(1),
        "one session: {}",
        listed.text
    );
}

/// Saving and deleting an agent, and deleting a session, are changes outside the guard chain:
/// each is audited (who, the op, the record's id, never a value) before it is answered.
#[tokio::test]
async fn saving_and_deleting_an_agent_are_audited_without_values() {
    let h = Host::new();
    let s = h.open("[codex]").await;
    let r = post(
        &s,
        Some(ALICE),
        "/v1/agents",
        &json!({"model": "gpt-5-codex", "instructions": "SECRET-INSTRUCTIONS-42"}),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let d = delete(&s, ALICE, &format!("/v1/agents/{id}")).await;
    assert_eq!(d.status, 200, "{}", d.text);
    let events = s.store.audit_recent(None, 100).await.unwrap();
    let mine: Vec<_> = events
        .iter()
        .filter(|e| e.op.starts_with("agents.") && e.principal_id == "alice")
        .collect();
    let ops: Vec<&str> = mine.iter().map(|e| e.op.as_str()).collect();
    assert!(ops.contains(&"agents.create"), "{ops:?}");
    assert!(ops.contains(&"agents.delete"), "{ops:?}");
    for e in mine {
        let text = serde_json::to_string(e).unwrap();
        assert!(!text.contains("SECRET-INSTRUCTIONS-42"), "{text}");
        assert!(text.contains(&id), "{text}");
    }
}

// ---------------------------------------------------------------- turns' starts and ends

/// Posts `events` (the SDK's input events) to alice's session `id`: 202.
async fn post_events(s: &Server, id: &str, events: Value) {
    let r = post(
        s,
        Some(ALICE),
        &format!("/v1/agents/sessions/{id}/events"),
        &json!({"events": events}),
        &[],
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text);
}

/// A blank message: its turn is claimed, then ends failed (`agents.invalid`) before a sandbox.
fn blank_message() -> Value {
    json!([{"type": "agent.session.input.message", "input": " "}])
}

/// Alice's session `id` once no turn runs in it (polled until a deadline): the session and
/// its event types.
async fn settled(s: &Server, id: &str) -> (Value, Vec<String>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let v = session(&get(s, ALICE, &format!("/v1/agents/sessions/{id}")).await);
        let r = get(
            s,
            ALICE,
            &format!("/v1/agents/sessions/{id}/events?limit=1000"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let types: Vec<String> = r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
            .collect();
        // A turn's end is recorded, then its `idle` event appended.
        let ended =
            v["corral"]["turns"] == 0 || types.last().is_some_and(|t| t == "agent.session.idle");
        if v["status"] != "in_progress" && ended {
            return (v, types);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "session {id} stays running with nothing driving it: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A cancel reaches only the turn that runs: after turns that ended (each as fast as a turn
/// can, so its end may come before its start returned), a cancel finds an idle session and
/// changes nothing of it: no event, no "cancelled" error over the turn's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_an_idle_session_records_nothing() {
    let h = Host::new();
    h.seed("codex");
    let s = h.open("[codex]").await;
    let id = new_session(&s, &h).await["id"].as_str().unwrap().to_owned();
    let cancel = json!([{"type": "agent.session.input.cancel"}]);
    // Before any turn.
    post_events(&s, &id, cancel.clone()).await;
    let (v, types) = settled(&s, &id).await;
    assert_eq!(types, ["agent.session.created"], "{v}");
    for turn in 1..=8 {
        post_events(&s, &id, blank_message()).await;
        let (before, types) = settled(&s, &id).await;
        assert_eq!(before["corral"]["turns"], turn, "{before}");
        assert_eq!(types.last().map(String::as_str), Some("agent.session.idle"));
        assert_eq!(before["corral"]["error_code"], "agents.invalid", "{before}");
        post_events(&s, &id, cancel.clone()).await;
        let (after, again) = settled(&s, &id).await;
        assert_eq!(again, types, "a cancel of an idle session added events");
        assert_eq!(after["corral"]["error_code"], "agents.invalid", "{after}");
        assert_eq!(after["status"], before["status"], "{after}");
    }
}

/// Calls the gateway with `call`, dropping the call (as a client that went away) when it was
/// polled `polls` times without finishing; whether it finished.
async fn call_dropped_after(
    state: &corral_server::AppState,
    call: corral_guard::Call,
    polls: usize,
) -> bool {
    let mut fut = Box::pin(state.gateway().call(call));
    let mut left = polls;
    std::future::poll_fn(|cx| {
        if left == 0 {
            return std::task::Poll::Ready(false);
        }
        left -= 1;
        fut.as_mut().poll(cx).map(|_| true)
    })
    .await
}

/// Issue 17: a caller that goes away while its message starts a turn (at any await of the
/// call: before the turn is claimed, between the claim and the turn's task, after) never
/// leaves the session marked running with nothing driving it: the turn was not claimed, or
/// it ran to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_gone_while_its_turn_starts_never_leaves_the_session_running() {
    let h = Host::new();
    h.seed("codex");
    let (s, state) = Server::start_keeping_state(
        &h.loaded(&h.yaml("[codex]", &h.rule("host", ALL_SESSION_OPS))),
    )
    .await;
    let alice = state
        .authenticator()
        .authenticate_token(Some(ALICE))
        .unwrap();
    let v = new_session(&s, &h).await;
    let id = v["id"].as_str().unwrap().to_owned();
    let workdir = v["environment"]["workspace_directory"].clone();
    let mut turns = 0;
    for polls in 1.. {
        let call = corral_guard::Call {
            caller: alice.clone(),
            op: "agents.codex.sessions.send_event".to_owned(),
            args: json!({"session": id, "event": {"type": "message", "text": " "},
                         "workdir": workdir, "model": "gpt-5-codex"}),
            request_id: format!("gone-{polls}"),
        };
        let finished = call_dropped_after(&state, call, polls).await;
        let (v, types) = settled(&s, &id).await;
        let claimed = v["corral"]["turns"].as_u64().unwrap();
        assert!(claimed == turns || claimed == turns + 1, "{v}");
        if claimed > turns {
            turns = claimed;
            // The claimed turn ran to its end.
            assert_eq!(
                types.last().map(String::as_str),
                Some("agent.session.idle"),
                "{v}"
            );
            assert_eq!(v["corral"]["error_code"], "agents.invalid", "{v}");
        }
        if finished {
            assert!(polls > 1, "the call never waited: no point to drop it at");
            break;
        }
    }
}

/// Held changes are applied under the scope that judges the apply, now: a rule whose agent
/// scope is `read-only` (a config reloaded since the turn held them, say) applies nothing, even
/// once a person approved the call: `403 agents.read_only`, before any hold is looked at.
#[tokio::test]
async fn an_apply_under_a_read_only_scope_is_403_read_only_even_approved() {
    let h = Host::new();
    h.seed("codex");
    let apply = format!(
        "  - name: apply\n    allow: [agents.codex.sessions.apply_writes]\n    agents: {{workdir: {}, permissions: read-only}}\n",
        h.workdir.display()
    );
    let rules = h.rule("host", ALL_SESSION_OPS) + &apply;
    let s = h.start(&h.yaml("[codex]", &rules)).await;
    let made = new_session(&s, &h).await;
    let body = json!({
        "session": made["id"], "hold": "0123456789abcdef0123456789abcdef",
        "workdir": h.workdir.display().to_string(), "model": made["agent"]["model"],
    });
    let op = "agents.codex.sessions.apply_writes";
    let asked = s.call_as(ALICE, op, body.clone()).await;
    assert_eq!(asked.status, 202, "{}", asked.text);
    let action = asked.json()["action_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let decided = s
        .decide_as(Some(ALICE), &action, json!({"decision": "approve"}))
        .await;
    assert_eq!(decided.status, 200, "{}", decided.text);
    let r = s.call_as(ALICE, op, body).await;
    refused_naming(&r, 403, "agents.read_only", "permissions: read-only");
}
