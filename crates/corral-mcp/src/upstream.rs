//! Upstream MCP servers: each one runs inside the configured isolation backend, supervised
//! (restarted with backoff when it dies), and its tools are mounted as ops
//! `mcp.<server>.<tool>` governed by corral's policy like its own.
//!
//! Trust: everything an upstream says is data. Its tools' effects and tier come from corral's
//! config (`mcp_servers.<name>.tools`); a tool the config does not declare is `admin` and
//! explicit-only. The upstream's annotations may only *raise* a tier (`destructiveHint: true`,
//! `readOnlyHint: false`), never lower it. Its input schema becomes the op's params (top-level
//! properties; anything that is not a string, integer or boolean is passed on as JSON).
//!
//! Liveness: a call to an upstream that is not running is `upstream.unavailable` at once (with
//! the reason and when the next start is due), never a hang; a call that outlives the server's
//! `call_timeout` is `upstream.failed`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_exec::{Attestation, Backend, BoxFuture, ExecOutput, ExecRequest};
use corral_ops::{Op, OpCtx, OpError, OpOutput};
use corral_policy::{ArgValue, Catalog, OpId, OpSpec, ParamKind, Tier, codes};
use rmcp::model::{CallToolRequestParams, PaginatedRequestParams, Tool};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot, watch};

/// How long an upstream has to start and answer `initialize` and `tools/list`.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// First restart delay; doubled after each quick failure up to `MAX_BACKOFF`.
const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// Longest restart delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A run that lasted this long resets the backoff.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// The most an upstream process lives before corral starts a fresh one.
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Bytes of the upstream's stderr kept (its last lines go to corral's log when it stops).
const STDERR_CAP: u64 = 64 * 1024;
/// Default time one tool call may take.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// After an upstream says its tool list changed, corral waits this long for more of the same
/// before it lists the tools again, and lists them at most once per `RELIST_EVERY`: a server
/// that floods `tools/list_changed` costs one `tools/list` a second, not one per notification.
const RELIST_SETTLE: Duration = Duration::from_millis(200);
/// See `RELIST_SETTLE`.
const RELIST_EVERY: Duration = Duration::from_secs(1);
/// The most tools of one server corral mounts; the rest of its list is ignored (and logged).
const MAX_TOOLS: usize = 1024;
/// The most parameters one upstream tool gets from its input schema.
const MAX_PARAMS: usize = 128;
/// The longest summary taken from a tool's description, in characters.
const MAX_SUMMARY: usize = 200;

/// How to run one upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    /// Its name (`mcp.<name>.<tool>`).
    pub name: String,
    /// Program and arguments, no shell.
    pub argv: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Directories it may read.
    pub read_paths: Vec<PathBuf>,
    /// Directories it may write.
    pub write_paths: Vec<PathBuf>,
    /// How long one tool call may take.
    pub call_timeout: Duration,
    /// The process's limits (memory, processes).
    pub limits: corral_exec::ResourceLimits,
    /// Its network; `None`: the backend's. Egress records go to the server's log.
    pub network: Option<corral_policy::scope::NetworkSpec>,
    /// corral's own files and directories (state, config, keys), absolute: hidden from the
    /// server where its paths would show them, and never writable.
    pub protected: Vec<PathBuf>,
}

/// What the supervisor knows right now.
#[derive(Debug, Clone)]
enum State {
    /// Being started (the first time, or again after a stop).
    Starting,
    /// Running and listed.
    Up {
        peer: Peer<RoleClient>,
        tools: Arc<Vec<Tool>>,
        attestation: Attestation,
    },
    /// Stopped; the next start is due at `retry_at`.
    Down { reason: String, retry_at: Instant },
}

impl State {
    /// The tools listed, when it is up.
    fn listed_tools(&self) -> Option<&Arc<Vec<Tool>>> {
        match self {
            State::Up { tools, .. } => Some(tools),
            _ => None,
        }
    }
}

/// One supervised upstream server.
#[derive(Debug)]
pub struct Upstream {
    spec: UpstreamSpec,
    state: watch::Receiver<State>,
    supervisor: tokio::task::JoinHandle<()>,
}

/// Bumped each time any upstream (re)starts and lists its tools.
type Listings = Arc<watch::Sender<u64>>;

impl Drop for Upstream {
    fn drop(&mut self) {
        // Dropping the run's future kills the process and destroys its sandbox.
        self.supervisor.abort();
    }
}

impl Upstream {
    /// Starts supervising `spec` on the current tokio runtime.
    fn start(spec: UpstreamSpec, backend: Arc<dyn Backend>, listings: Listings) -> Arc<Self> {
        let (tx, rx) = watch::channel(State::Starting);
        let supervisor = tokio::spawn(supervise(spec.clone(), backend, tx, listings));
        Arc::new(Self {
            spec,
            state: rx,
            supervisor,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Waits until the first start succeeded or failed (at most `timeout`); the tools it
    /// listed, if it is up.
    pub async fn listed(&self, timeout: Duration) -> Option<Arc<Vec<Tool>>> {
        let mut rx = self.state.clone();
        let settled =
            tokio::time::timeout(timeout, rx.wait_for(|s| !matches!(s, State::Starting))).await;
        match settled {
            Ok(Ok(s)) => s.listed_tools().cloned(),
            _ => None,
        }
    }

    /// Calls one tool. `upstream.unavailable` when the server is not running (at once),
    /// `upstream.failed` when it broke the protocol or overran the call timeout.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<(Value, Attestation), OpError> {
        let (peer, attestation) = match &*self.state.borrow() {
            State::Up {
                peer, attestation, ..
            } => (peer.clone(), attestation.clone()),
            State::Starting => return Err(self.unavailable("it is starting", None)),
            State::Down { reason, retry_at } => {
                return Err(self.unavailable(reason, Some(*retry_at)));
            }
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let answer = tokio::time::timeout(self.spec.call_timeout, peer.call_tool(params)).await;
        match answer {
            Ok(Ok(result)) => {
                let value = json!({
                    "content": result.content,
                    "structured_content": result.structured_content,
                    "is_error": result.is_error.unwrap_or(false),
                });
                Ok((value, attestation))
            }
            Ok(Err(e)) if peer.is_transport_closed() => {
                Err(self.unavailable(&format!("it stopped during the call ({e})"), None))
            }
            Ok(Err(e)) => Err(OpError::new(
                codes::UPSTREAM_FAILED,
                format!(
                    "the upstream MCP server `{}` refused the call: {e}",
                    self.spec.name
                ),
            )),
            Err(_) => Err(OpError::new(
                codes::UPSTREAM_FAILED,
                format!(
                    "the upstream MCP server `{}` did not answer within {} s (`mcp_servers.{}.call_timeout`)",
                    self.spec.name,
                    self.spec.call_timeout.as_secs(),
                    self.spec.name
                ),
            )),
        }
    }

    fn unavailable(&self, reason: &str, retry_at: Option<Instant>) -> OpError {
        let retry = retry_at
            .map(|t| t.saturating_duration_since(Instant::now()))
            .map_or_else(
                || "retry in a few seconds".to_owned(),
                |d| format!("corral starts it again in {} s", d.as_secs().max(1)),
            );
        OpError::new(
            codes::UPSTREAM_UNAVAILABLE,
            format!(
                "the upstream MCP server `{}` is not running: {reason}; {retry}",
                self.spec.name
            ),
        )
    }
}

/// Starts the server, keeps it listed while it runs, and starts it again when it stops.
async fn supervise(
    spec: UpstreamSpec,
    backend: Arc<dyn Backend>,
    state: watch::Sender<State>,
    listings: Listings,
) {
    let mut backoff = MIN_BACKOFF;
    loop {
        state.send_replace(State::Starting);
        let started = Instant::now();
        let Stopped { reason, stderr } = run_once(&spec, &backend, &state, &listings).await;
        let lived = started.elapsed();
        if lived >= HEALTHY_RUN {
            backoff = MIN_BACKOFF;
        }
        // Its stderr goes to corral's log only (never to callers), with the values of the
        // variables it was given masked.
        let stderr = stderr.map(|line| redact(&line, &spec.env));
        tracing::warn!(
            upstream = %spec.name,
            reason = %reason,
            stderr = stderr.as_deref().unwrap_or(""),
            restart_in_s = backoff.as_secs(),
            "upstream MCP server stopped"
        );
        state.send_replace(State::Down {
            reason,
            retry_at: Instant::now() + backoff,
        });
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Why a life of the server ended: `reason` is safe to show callers; `stderr` (a line the
/// process wrote) is for corral's log only.
struct Stopped {
    reason: String,
    stderr: Option<String>,
}

impl From<String> for Stopped {
    fn from(reason: String) -> Self {
        Self {
            reason,
            stderr: None,
        }
    }
}

/// Masks the values of the variables an upstream was given (its secrets, often) in a line it
/// wrote, and caps the line's length.
fn redact(line: &str, env: &[(String, String)]) -> String {
    let mut out = line.to_owned();
    for (k, v) in env {
        if k != "PATH" && v.len() >= 6 {
            out = out.replace(v.as_str(), "[redacted]");
        }
    }
    if out.len() > 500 {
        let mut cut = 500;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// One life of the server: start it in the backend, initialize, list, serve until it stops
/// (the process ends, or its MCP session does). Returns why it stopped.
async fn run_once(
    spec: &UpstreamSpec,
    backend: &Arc<dyn Backend>,
    state: &watch::Sender<State>,
    listings: &Listings,
) -> Stopped {
    let req = ExecRequest {
        argv: spec.argv.clone(),
        cwd: spec.cwd.clone(),
        env: spec.env.clone(),
        stdin: None,
        timeout: MAX_LIFETIME,
        max_output_bytes: STDERR_CAP,
        limits: spec.limits,
        read_paths: spec.read_paths.clone(),
        write_paths: spec.write_paths.clone(),
        protected: {
            let mut p = corral_policy::Protected::default();
            for own in &spec.protected {
                p.add_path(&own.to_string_lossy());
            }
            p
        },
        network: corral_ops::exec::run_network(spec.network.as_ref(), None),
        exec_only: None,
        hold: None,
        apply_only_if_ok: false,
        host_writes: None,
    };
    let (attach_tx, attach_rx) = oneshot::channel();
    let run_backend = Arc::clone(backend);
    let run = tokio::spawn(async move { run_backend.run_attached(req, attach_tx).await });
    // Aborting the task drops the run's future, which kills the process.
    let mut run = AbortOnDrop(run);

    let attached = match tokio::time::timeout(START_TIMEOUT, attach_rx).await {
        Ok(Ok(a)) => a,
        Ok(Err(_)) => return ended(&mut run).await,
        Err(_) => {
            return format!("it did not start within {} s", START_TIMEOUT.as_secs()).into();
        }
    };
    let attestation = attached.attestation.clone();
    let transport = (attached.stdout, attached.stdin);
    let changed = Arc::new(Notify::new());
    let handler = ListChanged(Arc::clone(&changed));
    let client: RunningService<RoleClient, ListChanged> =
        match tokio::time::timeout(START_TIMEOUT, handler.serve(transport)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return format!("the MCP handshake failed: {e}").into(),
            Err(_) => return "it did not answer `initialize` in time".to_owned().into(),
        };
    let tools =
        match tokio::time::timeout(START_TIMEOUT, list_tools(client.peer(), &spec.name)).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return format!("`tools/list` failed: {e}").into(),
            Err(_) => return "it did not answer `tools/list` in time".to_owned().into(),
        };
    tracing::info!(
        upstream = %spec.name,
        tools = tools.len(),
        backend = attestation.backend,
        isolated = attestation.isolated,
        "upstream MCP server started"
    );
    let peer = client.peer().clone();
    state.send_replace(State::Up {
        peer: peer.clone(),
        tools: Arc::new(tools),
        attestation,
    });
    listings.send_modify(|n| *n = n.wrapping_add(1));
    // Whichever ends first: the process, or the MCP session on its pipes (a server that closed
    // its output but lingers is killed and started again, not left `Up` with a dead peer).
    // Meanwhile, a changed tool list is listed again.
    let session = client.waiting();
    tokio::pin!(session);
    let mut last_listed = Instant::now();
    loop {
        tokio::select! {
            stopped = ended(&mut run) => return stopped,
            _ = &mut session => {
                return "its MCP session ended (it closed its output or broke the protocol)".to_owned().into();
            }
            () = changed.notified() => {}
        }
        // Settle, and keep to one `tools/list` per `RELIST_EVERY`.
        let wait = RELIST_SETTLE.max(RELIST_EVERY.saturating_sub(last_listed.elapsed()));
        tokio::time::sleep(wait).await;
        last_listed = Instant::now();
        relist(spec, &peer, state, listings).await;
    }
}

/// corral's side of an upstream session: notes the server's `notifications/tools/list_changed`.
/// (corral starts each session with `initialize`, so the server sends them unscoped; the
/// `subscriptions/listen` of sessions without `initialize` does not apply.)
#[derive(Debug, Clone)]
struct ListChanged(Arc<Notify>);

impl ClientHandler for ListChanged {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.notify_one();
    }
}

/// The server's tools, page by page, at most `MAX_TOOLS` of them (a server that lists more,
/// or pages without end, gets the first `MAX_TOOLS` mounted and a warning).
async fn list_tools(peer: &Peer<RoleClient>, name: &str) -> Result<Vec<Tool>, rmcp::ServiceError> {
    let mut tools: Vec<Tool> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = peer.list_tools(Some(params)).await?;
        tools.extend(page.tools);
        if tools.len() > MAX_TOOLS {
            tracing::warn!(upstream = %name, max = MAX_TOOLS, "upstream MCP server lists more tools than corral mounts; the rest are ignored");
            tools.truncate(MAX_TOOLS);
            return Ok(tools);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
}

/// Lists the tools again and publishes them (the refresher completes the deployment from the
/// new list); on failure the last list stays.
async fn relist(
    spec: &UpstreamSpec,
    peer: &Peer<RoleClient>,
    state: &watch::Sender<State>,
    listings: &Listings,
) {
    match tokio::time::timeout(START_TIMEOUT, list_tools(peer, &spec.name)).await {
        Ok(Ok(tools)) if state.borrow().listed_tools().is_some_and(|t| **t == tools) => {
            tracing::debug!(upstream = %spec.name, "upstream MCP server announced a change but lists the same tools");
        }
        Ok(Ok(tools)) => {
            tracing::info!(upstream = %spec.name, tools = tools.len(), "upstream MCP server changed its tool list");
            state.send_modify(|s| {
                if let State::Up { tools: listed, .. } = s {
                    *listed = Arc::new(tools);
                }
            });
            listings.send_modify(|n| *n = n.wrapping_add(1));
        }
        Ok(Err(e)) => {
            tracing::warn!(upstream = %spec.name, error = %e, "listing the changed tools failed; keeping the last list");
        }
        Err(_) => {
            tracing::warn!(upstream = %spec.name, "listing the changed tools timed out; keeping the last list");
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<ExecOutput, corral_exec::ExecError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for the run to end and says how it ended.
async fn ended(run: &mut AbortOnDrop) -> Stopped {
    match (&mut run.0).await {
        Ok(Ok(out)) => {
            let reason = match (out.exit_code, out.signal, out.timed_out) {
                (_, _, true) => "it reached its maximum lifetime".to_owned(),
                (Some(c), _, _) => format!("it exited with status {c}"),
                (None, Some(s), _) => format!("it was killed by signal {s}"),
                (None, None, false) => "it ended".to_owned(),
            };
            // The last line of what was kept (the first `STDERR_CAP` bytes).
            let stderr = String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_owned());
            Stopped { reason, stderr }
        }
        Ok(Err(e)) => Stopped {
            reason: format!("it could not be started ({})", e.code()),
            stderr: Some(e.to_string()),
        },
        Err(e) => format!("its supervisor task failed: {e}").into(),
    }
}

/// What [`Upstreams::reconcile`] did, by server name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// Unchanged: still the same running server.
    pub kept: Vec<String>,
    /// New in the config: started.
    pub started: Vec<String>,
    /// Changed in the config: a new one started, the old one stops.
    pub restarted: Vec<String>,
    /// Gone from the config: stops.
    pub stopped: Vec<String>,
}

impl Reconciled {
    /// Whether anything started or stops.
    pub fn changed(&self) -> bool {
        !(self.started.is_empty() && self.restarted.is_empty() && self.stopped.is_empty())
    }
}

/// Every configured upstream, by name.
#[derive(Debug, Clone)]
pub struct Upstreams {
    servers: BTreeMap<String, Arc<Upstream>>,
    listings: Listings,
    /// Op ids `disabled_ops` removed: never mounted, declared or not.
    disabled: Vec<String>,
    /// The `mcp.*` ops the config declares, as the config has them: each completion starts
    /// from these, so a tool a server stopped listing does not linger.
    declared: Vec<OpSpec>,
}

impl Default for Upstreams {
    fn default() -> Self {
        Self {
            servers: BTreeMap::new(),
            listings: Arc::new(watch::channel(0).0),
            disabled: Vec::new(),
            declared: Vec::new(),
        }
    }
}

impl Upstreams {
    /// Starts supervising every spec; `disabled` are op ids never to mount, `declared` the
    /// `mcp.*` ops the config declares.
    pub fn start(
        specs: Vec<UpstreamSpec>,
        backend: &Arc<dyn Backend>,
        disabled: Vec<String>,
        declared: Vec<OpSpec>,
    ) -> Self {
        let listings: Listings = Arc::new(watch::channel(0).0);
        let servers = specs
            .into_iter()
            .map(|s| {
                let up = Upstream::start(s, Arc::clone(backend), Arc::clone(&listings));
                (up.spec.name.clone(), up)
            })
            .collect();
        Self {
            servers,
            listings,
            disabled,
            declared,
        }
    }

    /// Whether there is any upstream.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// How the server `name` is run, if it is one of these.
    pub fn spec(&self, name: &str) -> Option<&UpstreamSpec> {
        self.servers.get(name).map(|u| &u.spec)
    }

    /// Changes each time an upstream (re)started and listed its tools: the catalog built from
    /// the earlier lists may be incomplete (it was down at start-up) or stale.
    pub fn listings(&self) -> watch::Receiver<u64> {
        self.listings.subscribe()
    }

    /// The upstreams `specs` describe, for a reloaded config: a server whose spec is unchanged
    /// keeps running (the same process, the same supervisor); a new server starts; a removed or
    /// changed one is left out, and its process stops once nothing uses it any more (the
    /// deployment that mounted it has been replaced and its calls in flight have ended). The
    /// result shares this one's listing counter, so a refresher watching it keeps working.
    pub fn reconcile(
        &self,
        specs: Vec<UpstreamSpec>,
        backend: &Arc<dyn Backend>,
        disabled: Vec<String>,
        declared: Vec<OpSpec>,
    ) -> (Self, Reconciled) {
        let mut changes = Reconciled::default();
        let mut servers = BTreeMap::new();
        for spec in specs {
            let name = spec.name.clone();
            let kept = self.servers.get(&name).filter(|u| u.spec == spec);
            let upstream = match kept {
                Some(running) => {
                    changes.kept.push(name.clone());
                    Arc::clone(running)
                }
                None => {
                    if self.servers.contains_key(&name) {
                        changes.restarted.push(name.clone());
                    } else {
                        changes.started.push(name.clone());
                    }
                    Upstream::start(spec, Arc::clone(backend), Arc::clone(&self.listings))
                }
            };
            servers.insert(name, upstream);
        }
        changes.stopped = self
            .servers
            .keys()
            .filter(|n| !servers.contains_key(*n))
            .cloned()
            .collect();
        let next = Self {
            servers,
            listings: Arc::clone(&self.listings),
            disabled,
            declared,
        };
        (next, changes)
    }

    /// Completes the catalog from what the upstreams listed (waiting up to `timeout` for each
    /// first start): a declared tool gets its params and description, and a tier its
    /// annotations raise; a listed tool the config does not declare is added as `admin`,
    /// explicit-only.
    pub async fn complete_catalog(&self, catalog: &mut Catalog, timeout: Duration) {
        // The `mcp.*` part is rebuilt from the config's declarations each time: what a server
        // listed before and no longer lists goes away.
        let listed_before: Vec<String> = catalog
            .iter()
            .filter(|s| s.id.namespace() == "mcp")
            .map(|s| s.id.to_string())
            .collect();
        for id in listed_before {
            catalog.remove(&id);
        }
        for spec in &self.declared {
            let _ = catalog.add_upstream(spec.clone());
        }
        // One deadline for all: they start together, so waiting for each in turn costs at most
        // `timeout` in all.
        let deadline = Instant::now() + timeout;
        for (name, upstream) in &self.servers {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(tools) = upstream.listed(left).await else {
                if timeout.is_zero() {
                    // A reload's deployment: the refresher completes it once the server lists.
                    tracing::debug!(upstream = %name, "upstream MCP server not listed yet");
                } else {
                    tracing::warn!(
                        upstream = %name,
                        "upstream MCP server is not up; its declared tools answer `upstream.unavailable` until it is"
                    );
                }
                continue;
            };
            let mut undeclared = Vec::new();
            for tool in tools.iter() {
                let Ok(id) = OpId::parse(&format!("mcp.{name}.{}", tool.name)) else {
                    tracing::warn!(upstream = %name, tool = %tool.name, "tool name cannot be an op id; not mounted");
                    continue;
                };
                if self.disabled.iter().any(|d| d == id.as_str()) {
                    continue;
                }
                match catalog.get_mut(id.as_str()) {
                    Some(spec) => refine(spec, name, tool),
                    None => {
                        // No effects: admin, explicit-only. `refine` writes the summary.
                        let mut spec = OpSpec::new(id, &[], "");
                        spec.groups.push("mcp".to_owned());
                        refine(&mut spec, name, tool);
                        if catalog.add_upstream(spec).is_ok() {
                            undeclared.push(tool.name.to_string());
                        }
                    }
                }
            }
            if !undeclared.is_empty() {
                tracing::warn!(
                    upstream = %name,
                    tools = %undeclared.join(", "),
                    "upstream MCP server lists tools the config does not declare: they are admin and explicit-only; declare them under `mcp_servers.{name}.tools` with their effects to use them"
                );
            }
        }
    }

    /// The handler of an upstream tool's op, `mcp.<server>.<tool>`.
    pub fn handler(&self, spec: &OpSpec) -> Option<Arc<dyn Op>> {
        let rest = spec.id.as_str().strip_prefix("mcp.")?;
        let (server, tool) = rest.split_once('.')?;
        let upstream = self.servers.get(server)?;
        Some(Arc::new(UpstreamTool {
            spec: spec.clone(),
            upstream: Arc::clone(upstream),
            tool: tool.to_owned(),
        }))
    }
}

fn tool_summary(server: &str, tool: &Tool) -> String {
    match tool.description.as_deref().or(tool.title.as_deref()) {
        Some(d) if !d.trim().is_empty() => {
            let first = d.lines().next().unwrap_or_default().trim();
            let first = match first.char_indices().nth(MAX_SUMMARY) {
                Some((cut, _)) => format!("{}...", &first[..cut]),
                None => first.to_owned(),
            };
            format!(
                "{first} (tool `{}` of upstream MCP server `{server}`)",
                tool.name
            )
        }
        _ => format!("tool `{}` of upstream MCP server `{server}`", tool.name),
    }
}

/// Params from the tool's input schema, the summary from its description, and a tier the
/// annotations raise (never lower).
fn refine(spec: &mut OpSpec, server: &str, tool: &Tool) {
    spec.summary = tool_summary(server, tool);
    let schema = &tool.input_schema;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    spec.params = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .take(MAX_PARAMS)
                .map(|(name, p)| {
                    corral_policy::ParamSpec::new(
                        name,
                        param_kind(p),
                        required.contains(&name.as_str()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if let Some(a) = &tool.annotations {
        let mut raised = spec.tier();
        if a.destructive_hint == Some(true) && a.read_only_hint != Some(true) {
            raised = raised.max(Tier::Destructive);
        }
        if a.read_only_hint == Some(false) {
            raised = raised.max(Tier::Confirm);
        }
        if raised > spec.tier() {
            let _ = spec.raise_tier(raised);
        }
    }
}

fn param_kind(p: &Value) -> ParamKind {
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|x| x.as_str().map(str::to_owned))
            .collect()
    };
    match p.get("type").and_then(Value::as_str) {
        Some("string") => match p.get("enum").and_then(strings) {
            Some(values) if !values.is_empty() => ParamKind::Enum(values),
            _ => ParamKind::String,
        },
        Some("integer") => ParamKind::Int,
        Some("boolean") => ParamKind::Bool,
        _ => ParamKind::Json,
    }
}

/// An upstream tool as an op.
#[derive(Debug)]
struct UpstreamTool {
    spec: OpSpec,
    upstream: Arc<Upstream>,
    tool: String,
}

impl Op for UpstreamTool {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(async move {
            let mut arguments = serde_json::Map::new();
            for (name, value) in &ctx.args.0 {
                let v = match value {
                    ArgValue::Str(s) => Value::String(s.clone()),
                    ArgValue::Int(i) => json!(i),
                    ArgValue::Bool(b) => Value::Bool(*b),
                    ArgValue::List(l) => json!(l),
                    ArgValue::Json(text) => serde_json::from_str(text).unwrap_or(Value::Null),
                };
                arguments.insert(name.clone(), v);
            }
            let (value, attestation) = self.upstream.call(&self.tool, arguments).await?;
            Ok(OpOutput::Json {
                value,
                attestation: Some(attestation),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, argv: &str) -> UpstreamSpec {
        UpstreamSpec {
            name: name.to_owned(),
            argv: vec![argv.to_owned()],
            env: Vec::new(),
            cwd: PathBuf::from("/"),
            read_paths: Vec::new(),
            write_paths: Vec::new(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            limits: corral_exec::ResourceLimits::default(),
            network: None,
            protected: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_reload_keeps_unchanged_servers_and_replaces_changed_removed_and_new_ones() {
        let backend: Arc<dyn Backend> = Arc::new(corral_exec::mock::MockBackend::default());
        let first = Upstreams::start(
            vec![
                spec("a", "/bin/a"),
                spec("b", "/bin/b"),
                spec("gone", "/bin/g"),
            ],
            &backend,
            Vec::new(),
            Vec::new(),
        );
        let specs = vec![
            spec("a", "/bin/a"),
            spec("b", "/bin/b2"),
            spec("new", "/bin/n"),
        ];
        let (second, changes) =
            first.reconcile(specs, &backend, vec!["mcp.a.t".to_owned()], Vec::new());
        assert_eq!(
            changes,
            Reconciled {
                kept: vec!["a".to_owned()],
                started: vec!["new".to_owned()],
                restarted: vec!["b".to_owned()],
                stopped: vec!["gone".to_owned()],
            }
        );
        assert!(changes.changed());
        // The unchanged server is the same supervised process; the changed one is a new one.
        assert!(Arc::ptr_eq(&first.servers["a"], &second.servers["a"]));
        assert!(!Arc::ptr_eq(&first.servers["b"], &second.servers["b"]));
        assert_eq!(second.servers.keys().collect::<Vec<_>>(), ["a", "b", "new"]);
        assert_eq!(second.disabled, ["mcp.a.t"]);
        // One listing counter across reloads, so the refresher keeps following it.
        assert!(Arc::ptr_eq(&first.listings, &second.listings));
        let (same, changes) = second.reconcile(
            vec![
                spec("a", "/bin/a"),
                spec("b", "/bin/b2"),
                spec("new", "/bin/n"),
            ],
            &backend,
            Vec::new(),
            Vec::new(),
        );
        assert!(!changes.changed(), "{changes:?}");
        assert_eq!(same.servers.len(), 3);
    }

    #[test]
    fn an_upstreams_stderr_is_logged_with_its_variables_masked_and_capped() {
        let env = vec![
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("GITHUB_TOKEN".to_owned(), "ghp_secret123".to_owned()),
            ("SHORT".to_owned(), "ab".to_owned()),
        ];
        let line = redact("auth failed with ghp_secret123 on /usr/bin:/bin (ab)", &env);
        assert_eq!(line, "auth failed with [redacted] on /usr/bin:/bin (ab)");
        let long = redact(&"é".repeat(400), &env);
        assert!(long.ends_with("...") && long.len() <= 503, "{}", long.len());
    }

    #[test]
    fn a_tier_is_raised_by_annotations_never_lowered() {
        let id = OpId::parse("mcp.fx.t").unwrap_or_else(|_| unreachable!());
        let schema = Arc::new(serde_json::Map::new());
        let claims_read_only = Tool::new("t", "d", Arc::clone(&schema))
            .with_annotations(rmcp::model::ToolAnnotations::new().read_only(true));
        let mut write = OpSpec::new(id.clone(), &[corral_policy::Effect::Write], "s");
        refine(&mut write, "fx", &claims_read_only);
        assert_eq!(write.tier(), Tier::Confirm);
        let says_destructive = Tool::new("t", "d", schema)
            .with_annotations(rmcp::model::ToolAnnotations::new().destructive(true));
        let mut read = OpSpec::new(id, &[corral_policy::Effect::Read], "s");
        refine(&mut read, "fx", &says_destructive);
        assert_eq!(read.tier(), Tier::Destructive);
    }
}
