//! The guardrails tests' fixture: a server with JWT auth (so people, their agents and services
//! can share one subject), a file rule, and custom ops that append to a ledger file, so a test
//! can count how many times a guarded op really ran.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use corral_config::Loaded;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use reqwest::RequestBuilder;
use serde_json::{Value, json};

use crate::common::{Reply, Server, Workspace, send};

pub const JWT_ENV: &str = "CORRAL_IT_GUARD_JWT";
pub const JWT_SECRET: &str = "guard-0123456789abcdef0123456789abcdef";

/// A workspace and its ledger file.
pub struct Fixture {
    pub ws: Workspace,
    pub ledger: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let ws = Workspace::new();
        let ledger = ws.base().join("ledger");
        Self { ws, ledger }
    }

    /// The config: JWT auth (`typ: service` marks a service), the process backend, a rule for
    /// `files.*` over the root, the ledger ops (`ledger.append`: confirm tier, `ledger.drop`:
    /// destructive, `ledger.peek`: read tier) and `extra` (more top-level keys; `rules_extra`
    /// more rules).
    pub fn yaml(&self, rules_extra: &str, extra: &str) -> String {
        let ledger = self.ledger.display();
        format!(
            "version: 1
state_dir: {state}
isolation: {{backend: process}}
rules:
  - name: files
    allow: [\"files.*\"]
    paths: {{roots: [{root}], readonly: false}}
  - name: ledger
    allow: [\"ledger.*\"]
{rules_extra}custom:
  ledger.append:
    argv: [/bin/sh, -c, \"echo \\\"$0\\\" >> {ledger}\", \"{{word}}\"]
    params: {{word: {{type: word}}}}
    effects: [write]
    summary: append a word to the ledger
  ledger.drop:
    argv: [/bin/sh, -c, \"echo \\\"drop $0\\\" >> {ledger}\", \"{{word}}\"]
    params: {{word: {{type: word}}}}
    effects: [delete]
    summary: drop a word from the ledger
  ledger.peek:
    argv: [/bin/sh, -c, \"cat {ledger} 2>/dev/null; true\"]
    effects: [read]
    summary: show the ledger
auth:
  jwt: {{hs256_secret_env: {JWT_ENV}, service_claim: {{name: typ, value: service}}}}
{extra}",
            state = self.ws.state.display(),
            root = self.ws.root.display(),
        )
    }

    /// Loads a config.
    pub fn load(&self, yaml: &str) -> Loaded {
        self.ws.load(yaml, &[(JWT_ENV, JWT_SECRET)])
    }

    /// Starts a server on `yaml`.
    pub async fn start(&self, yaml: &str) -> Server {
        Server::start(&self.load(yaml)).await
    }

    /// The ledger's lines (none when it does not exist).
    pub fn ledger_lines(&self) -> Vec<String> {
        match std::fs::read_to_string(&self.ledger) {
            Ok(s) => s.lines().map(str::to_owned).collect(),
            Err(_) => Vec::new(),
        }
    }
}

fn exp() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600
}

fn sign(claims: Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap()
}

/// A person's token.
pub fn human(sub: &str, roles: &[&str]) -> String {
    sign(json!({"sub": sub, "roles": roles, "exp": exp()}))
}

/// An agent acting for `sub` (RFC 8693 `act`).
pub fn delegated(sub: &str, actor: &str, roles: &[&str]) -> String {
    sign(json!({"sub": sub, "act": {"sub": actor}, "roles": roles, "exp": exp()}))
}

/// A service's token.
pub fn service(sub: &str, roles: &[&str]) -> String {
    sign(json!({"sub": sub, "typ": "service", "roles": roles, "exp": exp()}))
}

/// Request headers of an op call.
#[derive(Default, Clone, Copy)]
pub struct Opts<'a> {
    pub run: Option<&'a str>,
    pub autonomy: Option<&'a str>,
    pub dry_run: Option<&'a str>,
}

/// `POST /ops/<op>` as `token` with the guardrail headers.
pub async fn call(s: &Server, token: &str, op: &str, args: Value, o: Opts<'_>) -> Reply {
    let mut rb: RequestBuilder = s
        .client()
        .post(s.url(&format!("/ops/{op}")))
        .bearer_auth(token)
        .json(&args);
    if let Some(r) = o.run {
        rb = rb.header("x-corral-run", r);
    }
    if let Some(a) = o.autonomy {
        rb = rb.header("x-corral-autonomy", a);
    }
    if let Some(d) = o.dry_run {
        rb = rb.header("x-corral-dry-run", d);
    }
    send(rb).await
}

/// `POST /ops/<op>` as `token`, no headers.
pub async fn plain(s: &Server, token: &str, op: &str, args: Value) -> Reply {
    call(s, token, op, args, Opts::default()).await
}

/// Asserts a `202 confirmation.required` with the wire error's shape plus the action, and
/// returns the body.
#[track_caller]
pub fn pending(r: &Reply) -> Value {
    r.assert_error(202, "confirmation.required");
    let v = r.json();
    let id = v["action_id"].as_str().unwrap_or_default();
    assert_eq!(id.len(), 36, "an action id: {v}");
    assert_eq!(
        v["approve"]["path"],
        format!("/confirmations/{id}/decision"),
        "{v}"
    );
    assert_eq!(v["approve"]["body"], json!({"decision": "approve"}), "{v}");
    assert!(v["reason"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    assert!(v["args_canonical"].is_string(), "{v}");
    v
}

/// The action id of a 202.
#[track_caller]
pub fn action_id(r: &Reply) -> String {
    pending(r)["action_id"].as_str().unwrap().to_owned()
}

/// `POST /confirmations/<id>/decision` as `token`.
pub async fn decide(s: &Server, token: &str, id: &str, body: Value) -> Reply {
    s.decide_as(Some(token), id, body).await
}

/// Approves as `token`, asserting a 200.
pub async fn approve(s: &Server, token: &str, id: &str) {
    let r = decide(s, token, id, json!({"decision": "approve"})).await;
    assert_eq!(r.status, 200, "approve {id}: {}", r.text);
    assert_eq!(r.json()["action"]["state"], "approved", "{}", r.text);
}

/// How many stored audit events have each outcome.
pub async fn outcomes(s: &Server) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for e in s.store.audit_recent(None, 100_000).await.unwrap() {
        *counts.entry(e.outcome.as_str().to_owned()).or_insert(0) += 1;
    }
    counts
}

/// A count map from pairs, for comparing with `outcomes`.
pub fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}
