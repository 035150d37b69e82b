//! Shared fixtures: a workspace in a tempdir, a config loaded from YAML, and a real server on a
//! TCP port of 127.0.0.1.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use corral_config::Loaded;
use corral_store::Store;
use reqwest::header::HeaderMap;
use reqwest::{Client, RequestBuilder};
use serde_json::Value;
use tempfile::TempDir;
use tokio::task::JoinHandle;

/// The agent's static token, and the variable it is read from.
pub const AGENT_TOKEN: &str = "agent-token-0123456789abcdef";
pub const AGENT_ENV: &str = "CORRAL_IT_AGENT_TOKEN";
/// A second principal's token.
pub const ADMIN_TOKEN: &str = "admin-token-fedcba9876543210";
pub const ADMIN_ENV: &str = "CORRAL_IT_ADMIN_TOKEN";

/// The `auth:` block for the two static tokens (agent: role `operator`, admin: role `admin`).
/// A tier role on a token turns RBAC by tier on (issue 11 item 7), so each carries one.
pub const TOKENS_YAML: &str = "auth:
  tokens:
    - {id: agent, roles: [operator], token_env: CORRAL_IT_AGENT_TOKEN}
    - {id: admin, roles: [admin], token_env: CORRAL_IT_ADMIN_TOKEN}
";

/// The environment holding both tokens' secrets.
pub fn token_env() -> Vec<(&'static str, &'static str)> {
    vec![(AGENT_ENV, AGENT_TOKEN), (ADMIN_ENV, ADMIN_TOKEN)]
}

/// Whether this is a CI run (`CI=true`), where missing prerequisites fail instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A tempdir with a workspace root (`<dir>/root`) and a state directory (`<dir>/state`).
pub struct Workspace {
    pub dir: TempDir,
    pub root: PathBuf,
    pub state: PathBuf,
}

impl Workspace {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Canonical, so the paths the server reports match the ones written here.
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("root");
        std::fs::create_dir(&root).unwrap();
        Self {
            dir,
            root,
            state: base.join("state"),
        }
    }

    /// The tempdir itself (canonical).
    pub fn base(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    /// `<root>/<rel>` as a string.
    pub fn at(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }

    /// Writes `<root>/<rel>`.
    pub fn write(&self, rel: &str, content: &str) {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, content).unwrap();
    }

    /// A `workspace_jail` config over the root, with the state directory outside it, the two
    /// static tokens and `extra` appended (more top-level keys). Its confirm-tier calls
    /// (`files.write`) run unattended (`confirm: never`), so tests of other layers need no
    /// approval; its destructive ones (`files.delete`) still wait for one (`call_approved`).
    pub fn jail_yaml(&self, extra: &str) -> String {
        format!(
            "version: 1\npreset: {{name: workspace_jail, confirm: never}}\nroot: {}\nstate_dir: {}\n{TOKENS_YAML}{extra}",
            self.root.display(),
            self.state.display()
        )
    }

    /// Loads `yaml` with `env` as the environment, relative paths anchored in the tempdir.
    pub fn load(&self, yaml: &str, env: &[(&str, &str)]) -> Loaded {
        load(yaml, &self.base(), env)
    }
}

/// Loads a config or panics with its rendered diagnostics.
pub fn load(yaml: &str, base: &Path, env: &[(&str, &str)]) -> Loaded {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    corral_config::load_str("corral.yaml", yaml, base, &env).unwrap_or_else(|e| {
        panic!(
            "the test config does not load:\n{}\n---\n{yaml}",
            e.render()
        )
    })
}

/// A real server on 127.0.0.1, in a task of the test's runtime.
pub struct Server {
    pub base: String,
    pub store: Arc<Store>,
    client: Client,
    token: Option<String>,
    task: Option<JoinHandle<()>>,
}

/// One answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    /// The body as JSON (panics with the text if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {}", self.text))
    }

    /// The body's `code`.
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }

    /// Asserts the status, the code and the error body's shape (`error`, `type`, `code`,
    /// `request_id`, the `x-request-id` header equal to the body's).
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code().as_str()),
            (status, code),
            "body: {}",
            self.text
        );
        let v = self.json();
        assert!(
            v["error"].as_str().is_some_and(|s| !s.is_empty()),
            "no error message: {v}"
        );
        assert_eq!(
            v["type"].as_str(),
            code.split('.').next(),
            "type is the code's family: {v}"
        );
        let rid = v["request_id"].as_str().unwrap_or_default();
        assert_eq!(rid.len(), 36, "request_id is a uuid: {v}");
        assert_eq!(
            self.headers
                .get("x-request-id")
                .and_then(|h| h.to_str().ok()),
            Some(rid),
            "x-request-id header"
        );
        assert!(
            self.headers
                .get("content-type")
                .and_then(|h| h.to_str().ok())
                .is_some_and(|c| c.starts_with("application/json")),
            "content-type: {:?}",
            self.headers.get("content-type")
        );
    }

    /// Asserts a 200 with `ok: true` and returns `result`.
    #[track_caller]
    pub fn ok(&self) -> Value {
        assert_eq!(self.status, 200, "body: {}", self.text);
        let v = self.json();
        assert_eq!(v["ok"], Value::Bool(true), "{v}");
        v["result"].clone()
    }
}

impl Server {
    /// Builds the state for `loaded` (1 MiB body limit) and serves it.
    pub async fn start(loaded: &Loaded) -> Self {
        Self::start_with(loaded, 1 << 20).await
    }

    /// Builds the state for `loaded` with a body limit and serves it.
    pub async fn start_with(loaded: &Loaded, max_body: usize) -> Self {
        Self::start_hooked(loaded, max_body, None).await
    }

    /// Builds the state for `loaded` (1 MiB body limit) and serves it; the state too, for a
    /// test that calls the gateway directly.
    pub async fn start_keeping_state(loaded: &Loaded) -> (Self, corral_server::AppState) {
        let (state, store) = corral_server::serve::build_state(loaded, 1 << 20)
            .await
            .unwrap();
        (Self::serve(state.clone(), store).await, state)
    }

    /// Builds the state for `loaded` with a body limit and, when given, a reply hook for the
    /// LLM proxy, and serves it.
    pub async fn start_hooked(
        loaded: &Loaded,
        max_body: usize,
        hook: Option<Arc<dyn corral_server::routes::llm::ReplyHook>>,
    ) -> Self {
        let (state, store) = corral_server::serve::build_state(loaded, max_body)
            .await
            .unwrap();
        if let Some(h) = hook {
            assert!(state.install_reply_hook(h));
        }
        Self::serve(state, store).await
    }

    /// Serves `loaded` in learning mode (`setup`), or the reason it refused to start.
    pub async fn start_learning(
        loaded: &Loaded,
        setup: corral_server::learning::LearningSetup,
        allow_open: bool,
    ) -> Result<Self, corral_server::serve::ServeError> {
        let activation = corral_server::serve::Activation { setup, allow_open };
        let (state, store) =
            corral_server::serve::build_state_with(loaded, 1 << 20, Some(activation)).await?;
        Ok(Self::serve(state, store).await)
    }

    async fn serve(state: corral_server::AppState, store: Arc<Store>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = corral_server::app(state);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base: format!("http://{addr}"),
            store,
            client: Client::builder().no_proxy().build().unwrap(),
            token: None,
            task: Some(task),
        }
    }

    /// Sends `Authorization: Bearer <token>` on every request made through `call`/`get`.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    /// The full url of a path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The client, for hand-made requests (no token attached).
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn authed(&self, rb: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// `POST /ops/<op>` with a JSON body, as the configured token.
    pub async fn call(&self, op: &str, args: Value) -> Reply {
        let rb = self
            .authed(self.client.post(self.url(&format!("/ops/{op}"))))
            .json(&args);
        send(rb).await
    }

    /// `POST /ops/<op>` with a JSON body, as `token`.
    pub async fn call_as(&self, token: &str, op: &str, args: Value) -> Reply {
        let rb = self
            .client
            .post(self.url(&format!("/ops/{op}")))
            .bearer_auth(token)
            .json(&args);
        send(rb).await
    }

    /// `POST /confirmations/<action_id>/decision` with `body`, as `token` (`None`: no
    /// credentials, the open-mode caller).
    pub async fn decide_as(&self, token: Option<&str>, action_id: &str, body: Value) -> Reply {
        let mut rb = self
            .client
            .post(self.url(&format!("/confirmations/{action_id}/decision")))
            .json(&body);
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        send(rb).await
    }

    /// `POST /ops/<op>` as `token`; a `202 confirmation.required` is approved by the same token
    /// and the call retried once. The retry's answer (or the first, when it was not a 202).
    pub async fn call_approved_as(&self, token: &str, op: &str, args: Value) -> Reply {
        let first = self.call_as(token, op, args.clone()).await;
        if first.status != 202 {
            return first;
        }
        let id = first.json()["action_id"].as_str().unwrap().to_owned();
        let d = self
            .decide_as(Some(token), &id, serde_json::json!({"decision": "approve"}))
            .await;
        assert_eq!(d.status, 200, "approving {id}: {}", d.text);
        self.call_as(token, op, args).await
    }

    /// `call_approved_as` with the configured token.
    pub async fn call_approved(&self, op: &str, args: Value) -> Reply {
        let token = self.token.clone().expect("a configured token");
        self.call_approved_as(&token, op, args).await
    }

    /// `GET <path>`, as `token`.
    pub async fn get_as(&self, token: &str, path: &str) -> Reply {
        send(self.client.get(self.url(path)).bearer_auth(token)).await
    }

    /// `GET <path>`, as the configured token.
    pub async fn get(&self, path: &str) -> Reply {
        send(self.authed(self.client.get(self.url(path)))).await
    }

    /// Stops serving: the listener task is aborted and the client dropped. Returns the store.
    pub async fn stop(mut self) -> Arc<Store> {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        self.store.clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Sends a request and reads the whole answer.
pub async fn send(rb: RequestBuilder) -> Reply {
    let resp = rb.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    Reply {
        status,
        headers,
        text,
    }
}
