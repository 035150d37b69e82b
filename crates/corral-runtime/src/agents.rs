//! The agents host's ops: `agents.<a>.install` (the adapter's CLI per `install: {mode}`),
//! `agents.<a>.sessions.create`, `agents.<a>.sessions.send_event` and `agents.<a>.run` (one
//! task to completion). Each is decided by the guard chain first (both gates for a session
//! create, the agent scope's model/workdir checks); the handlers build the session from the
//! grant's [`AgentGrant`], keep it in the store (sessions, their events, numbered and capped),
//! and run its turns in the `linux` backend through [`corral_agents::Session`], whose model
//! traffic reaches only the LLM proxy through a per-turn link ([`AgentLinksFor`], served by
//! the HTTP crate). Each step the agent takes lands in the audit as `agents.<a>.model`,
//! `.exec` or `.write`, with its shape only (never a command, a path or a message).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use corral_agents::{
    Adapter, InstallMode, Installed, Installer, ProxyLinks, Session, SessionConfig, SessionEvent,
    SessionLimits, TurnReport,
};
use corral_config::Loaded;
use corral_guard::Caller;
use corral_guard::audit::{AttestationRecord, AuditEvent, AuditSink, Outcome};
use corral_ops::{Op, OpCtx, OpError, OpOutput};
use corral_policy::scope::agent::AgentGrant;
use corral_policy::{ArgValue, OpSpec, codes};
use corral_store::Store;
use corral_store::agents::{AgentStoreError, NewSession, Session as StoredSession, TurnEnd};
use serde_json::{Value, json};
use tokio::sync::mpsc;

mod holds;

/// The installer of a deployment: its state directory, its `install:` mode.
pub fn installer(loaded: &Loaded) -> Arc<Installer> {
    let mode = InstallMode::parse(loaded.config.install.mode.as_str()).unwrap_or(InstallMode::Lazy);
    Arc::new(Installer::new(&loaded.state_dir, mode))
}

/// The links of the sessions one owner runs: the HTTP crate serves each turn's LLM proxy
/// link as that owner, in the session's run (set once the server is built).
pub trait AgentLinksFor: Send + Sync + std::fmt::Debug {
    /// The links of the sessions `owner` starts, whose turns may ask for `model` only.
    fn links(&self, owner: Caller, model: &str) -> Arc<dyn ProxyLinks>;
}

/// The model an adapter's CLI gets when neither the caller nor the scope names one.
pub fn default_model(adapter: Adapter) -> &'static str {
    match adapter {
        Adapter::Codex => "gpt-5-codex",
        Adapter::ClaudeCode => "claude-sonnet-4-5",
    }
}

/// The most turns one owner runs at once (each a sandbox of up to its memory cap); past it a
/// new turn is refused `limit.concurrency` until one ends.
pub const MAX_TURNS_PER_OWNER: u32 = 4;

/// The most session event streams one owner holds open at once (each a task following the
/// store); past it a new stream is refused `limit.concurrency` until one closes.
pub const MAX_STREAMS_PER_OWNER: u32 = 16;
/// Sessions one owner keeps (stored, idle or not); deleting one frees its place. Counted in
/// the statement that stores a session, so replicas share it (concurrent creates on several
/// replicas may each pass at the last place).
pub const MAX_SESSIONS_PER_OWNER: u64 = 256;
/// Saved agents (`POST /v1/agents`) one owner keeps.
pub const MAX_AGENTS_PER_OWNER: u64 = 64;

/// Per owner (tenant and principal), how many of something they hold at once, at most `max`:
/// a running turn, an open event stream.
#[derive(Debug)]
struct OwnerSlots {
    max: u32,
    held: Arc<Mutex<HashMap<(String, String), u32>>>,
}

/// One slot of an owner's, held until dropped (a turn's task, a stream's task: an aborted
/// task drops it too, so a slot is freed exactly once).
#[derive(Debug)]
pub struct OwnerSlot {
    key: (String, String),
    held: Arc<Mutex<HashMap<(String, String), u32>>>,
}

impl OwnerSlots {
    fn new(max: u32) -> Self {
        Self {
            max,
            held: Arc::default(),
        }
    }

    /// Whether `owner` holds fewer than `max` (a failing lock: no room).
    fn has_room(&self, owner: &(String, String)) -> bool {
        self.held
            .lock()
            .is_ok_and(|m| m.get(owner).copied().unwrap_or(0) < self.max)
    }

    /// One more slot of `owner`'s; `None` at `max`.
    fn take(&self, owner: (String, String)) -> Option<OwnerSlot> {
        let mut m = self.held.lock().ok()?;
        let n = m.entry(owner.clone()).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(OwnerSlot {
            key: owner,
            held: Arc::clone(&self.held),
        })
    }
}

impl Drop for OwnerSlot {
    fn drop(&mut self) {
        if let Ok(mut m) = self.held.lock()
            && let Some(n) = m.get_mut(&self.key)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

/// How often a running turn's task asks the store whether a cancel was asked on another
/// replica (this process's own cancels reach it at once).
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a cancel on the replica running the turn waits for the turn's end to be recorded
/// before it answers (the turn's sandbox is ending; its events follow).
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A turn this process runs: its number in its session (a cancel names the turn it ends, so
/// it never reaches an earlier or a later one), how to end it, and whether it has ended.
#[derive(Debug)]
struct RunningTurn {
    turn: u64,
    /// Wakes the turn's task, which ends the turn and records it as cancelled.
    cancel: Arc<tokio::sync::Notify>,
    /// Closed when the turn's task is done (its sender dropped).
    ended: tokio::sync::watch::Receiver<()>,
}

/// The most model turns within one turn, for CLIs that take such a limit.
const MAX_MODEL_TURNS: u32 = 50;
/// Live sessions one process keeps between turns before dropping the idle ones.
const MAX_LIVE_SESSIONS: usize = 1024;

/// The agents host of a runtime: the store its sessions live in, the installer, the live
/// sessions of this process (their CLI's resume state), the turns running, and where the
/// audit goes. Kept across reloads.
#[derive(Debug)]
pub struct AgentHost {
    store: Arc<Store>,
    installer: RwLock<Arc<Installer>>,
    sinks: Vec<Arc<dyn AuditSink>>,
    links: OnceLock<Arc<dyn AgentLinksFor>>,
    homes: PathBuf,
    /// Per session: the live session and what it was built from (permissions, limits, owner);
    /// a turn whose grant differs rebuilds it.
    live: Mutex<HashMap<String, (String, Arc<Session>)>>,
    /// Per session, the turn this process runs in it (registered by the turn's own task once
    /// its claim holds, removed by that task when the turn ends).
    running: Mutex<HashMap<String, RunningTurn>>,
    /// Turns running per owner, at most [`MAX_TURNS_PER_OWNER`].
    turns: OwnerSlots,
    /// Event streams open per owner, at most [`MAX_STREAMS_PER_OWNER`].
    streams: OwnerSlots,
    /// The tenant of a caller without one (the gateway's).
    default_tenant: String,
    /// The adapters `agents:` mounts, and its `default`.
    mounted: RwLock<(Vec<String>, Option<String>)>,
    /// The backend turns run in: the `linux` one with a copy-on-write layer for attached runs
    /// (a turn's writes are checked against the protection, then applied, when it ends);
    /// `None` when the deployment does not use the `linux` backend (agents are refused).
    backend: Option<Arc<dyn corral_exec::Backend>>,
}

fn mounted_of(loaded: &Loaded) -> (Vec<String>, Option<String>) {
    match &loaded.config.agents {
        Some(a) => (a.names(), a.default.as_ref().map(|d| d.value.clone())),
        None => (Vec::new(), None),
    }
}

fn op_err(code: &'static str, message: impl Into<String>) -> OpError {
    OpError::new(code, message)
}

fn store_err(e: AgentStoreError) -> OpError {
    // The store's own codes, but an infrastructure failure, which an op reports as its own.
    let code = match &e {
        AgentStoreError::Store(_) => codes::AGENTS_NO_STORE,
        other => other.code(),
    };
    OpError::new(code, e.to_string())
}

fn now_ms() -> i64 {
    corral_guard::now_ms()
}

fn text_arg<'a>(ctx: &'a OpCtx, name: &str) -> Option<&'a str> {
    match ctx.args.get(name) {
        Some(ArgValue::Str(s)) => Some(s.as_str()),
        _ => None,
    }
}

/// A JSON argument (`ParamKind::Json`, kept as its text), parsed.
fn json_arg(ctx: &OpCtx, name: &str) -> Option<Value> {
    match ctx.args.get(name) {
        Some(ArgValue::Json(text)) => serde_json::from_str(text).ok(),
        _ => None,
    }
}

/// The session's workdir as the sandbox will bind it: the granted path resolved (symlinks
/// followed), which must be an existing directory still beneath the scope's resolved
/// workdir; a symlink out of it is refused (`agents.workdir_outside`).
fn resolved_workdir(grant: &AgentGrant) -> Result<String, OpError> {
    let asked = grant.workdir.absolute();
    let outside = |why: String| {
        op_err(
            codes::AGENTS_WORKDIR_OUTSIDE,
            format!(
                "the session's workdir `{asked}` {why}; create it beneath the agent scope's workdir `{}` (no symlink out of it)",
                grant.workdir.root()
            ),
        )
    };
    let root = std::fs::canonicalize(grant.workdir.root())
        .map_err(|e| outside(format!("has a scope workdir that cannot be resolved ({e})")))?;
    let real =
        std::fs::canonicalize(&asked).map_err(|e| outside(format!("cannot be resolved ({e})")))?;
    if !real.starts_with(&root) {
        return Err(outside(format!(
            "resolves to `{}`, outside it",
            real.display()
        )));
    }
    if !real.is_dir() {
        return Err(outside("is not a directory".to_owned()));
    }
    real.to_str()
        .map(str::to_owned)
        .ok_or_else(|| outside("is not valid UTF-8".to_owned()))
}

/// The session's workdir ([`resolved_workdir`]) unless it is protected: a `.git` (or other
/// protected name) among its components, corral's own files, a `protected:` glob. A workdir
/// such as `<repo>/.git` would let the agent plant hooks the host's git runs.
fn session_workdir(
    grant: &AgentGrant,
    rules: &corral_policy::Protected,
) -> Result<String, OpError> {
    let workdir = resolved_workdir(grant)?;
    match rules.hit(&workdir) {
        None => Ok(workdir),
        Some(hit) => Err(op_err(
            codes::AGENTS_WORKDIR_OUTSIDE,
            format!(
                "the session's workdir `{workdir}` is protected ({}); no agent works there: pick a directory beneath the agent scope's workdir outside corral's files and any repository's metadata",
                hit.describe()
            ),
        )),
    }
}

/// A session as the ops answer it (the HTTP crate shapes it for its API).
pub fn session_json(s: &StoredSession) -> Value {
    json!({
        "id": s.id,
        "adapter": s.adapter,
        "model": s.model,
        "agent_id": s.agent_id,
        "workdir": s.workdir,
        "owner": s.owner,
        "metadata": s.metadata,
        "status": s.status,
        "error": s.error.as_ref().map(|(code, message)| json!({"code": code, "message": message})),
        "turns": s.turns,
        "events": s.events,
        "usage": s.usage,
        "attestation": s.attestation,
        "created_ms": s.created_ms,
        "last_active_ms": s.last_active_ms,
    })
}

/// What one turn needs besides its prompt.
struct TurnStart {
    tenant: String,
    owner: Caller,
    adapter: Adapter,
    record: StoredSession,
    grant: AgentGrant,
    limits: SessionLimits,
    backend: Arc<dyn corral_exec::Backend>,
    protected: Vec<PathBuf>,
    /// The policy's protection of this call (names, corral's files, `protected:` globs).
    rules: corral_policy::Protected,
}

/// How a turn ended, as `agents.<a>.run` answers it.
struct TurnDone {
    report: Option<TurnReport>,
    error: Option<(&'static str, String)>,
    message: Option<String>,
    events: u64,
}

impl AgentHost {
    /// The host of a runtime over `store`, auditing to `sinks`; agents' homes live under
    /// `<state_dir>/agents/homes`.
    pub fn new(
        loaded: &Loaded,
        store: Arc<Store>,
        sinks: Vec<Arc<dyn AuditSink>>,
        backend: Option<Arc<dyn corral_exec::Backend>>,
        default_tenant: &str,
    ) -> Self {
        Self {
            store,
            installer: RwLock::new(installer(loaded)),
            sinks,
            links: OnceLock::new(),
            homes: loaded.state_dir.join("agents").join("homes"),
            live: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            turns: OwnerSlots::new(MAX_TURNS_PER_OWNER),
            streams: OwnerSlots::new(MAX_STREAMS_PER_OWNER),
            default_tenant: default_tenant.to_owned(),
            mounted: RwLock::new(mounted_of(loaded)),
            backend,
        }
    }

    /// Deletes the caller's session `id` of `tenant` (its owner checked by the caller): its
    /// record and events, then this process's live session and the agent's home (its config,
    /// the CLI's own session files). Refused while a turn runs (`agents.session_busy`).
    pub async fn delete_session(&self, tenant: &str, id: &str) -> Result<(), OpError> {
        self.store
            .delete_session(tenant, id)
            .await
            .map_err(store_err)?;
        if let Ok(mut l) = self.live.lock() {
            l.remove(id);
        }
        // The id is one the store made (it had the row); a single plain name all the same.
        let plain = !id.is_empty() && id != "." && id != ".." && !id.contains(['/', '\0']);
        if plain {
            // Neither follows a symlink the agent left in its home (or a hold).
            for (dir, removed) in [
                (
                    self.homes.join(id),
                    std::fs::remove_dir_all(self.homes.join(id)),
                ),
                (
                    self.holds_of(id),
                    corral_agents::hold::remove_hold_dir(&self.holds_of(id)),
                ),
            ] {
                if let Err(e) = removed
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(
                        session = id,
                        "the deleted session's `{}` was not removed: {e}",
                        dir.display()
                    );
                }
            }
        }
        Ok(())
    }

    /// Where session `id`'s turns write their holds, and where an apply builds one again from
    /// the store: `<state_dir>/agents/holds/<id>`, beside the homes (corral's state directory,
    /// hidden from every sandbox). Only passing through: the store keeps holds.
    fn holds_of(&self, id: &str) -> PathBuf {
        self.homes
            .parent()
            .unwrap_or(&self.homes)
            .join("holds")
            .join(id)
    }

    /// Sets the links' source (the HTTP crate, once its app exists); `false` when set already.
    pub fn set_links(&self, links: Arc<dyn AgentLinksFor>) -> bool {
        self.links.set(links).is_ok()
    }

    /// The installer in force.
    pub fn installer(&self) -> Arc<Installer> {
        self.installer
            .read()
            .map(|i| Arc::clone(&i))
            .unwrap_or_else(|e| Arc::clone(&e.into_inner()))
    }

    /// On reload: a new `install:` mode replaces the installer; the same mode keeps it (and
    /// any install it is running).
    pub fn reload(&self, loaded: &Loaded) {
        if let Ok(mut m) = self.mounted.write() {
            *m = mounted_of(loaded);
        }
        let next = installer(loaded);
        if let Ok(mut cur) = self.installer.write()
            && cur.mode() != next.mode()
        {
            *cur = next;
        }
    }

    /// A slot for one more event stream of `principal` in `tenant`, held until dropped;
    /// `None` past [`MAX_STREAMS_PER_OWNER`] open at once.
    pub fn open_stream(&self, tenant: &str, principal: &str) -> Option<OwnerSlot> {
        self.streams.take((tenant.to_owned(), principal.to_owned()))
    }

    /// The tenant of `principal`, as the gateway picks it (its own, else the deployment's).
    pub fn tenant_of(&self, principal: &corral_policy::Principal) -> String {
        principal
            .tenant
            .clone()
            .unwrap_or_else(|| self.default_tenant.clone())
    }

    /// The adapters `agents:` mounts, and its `default`.
    pub fn mounted(&self) -> (Vec<String>, Option<String>) {
        self.mounted.read().map(|m| m.clone()).unwrap_or_default()
    }

    fn ensure_cli(&self, adapter: Adapter) -> Result<Installed, OpError> {
        self.installer()
            .ensure(adapter)
            .map_err(|e| OpError::new(e.code, e.message))
    }

    async fn append(&self, tenant: &str, id: &str, events: Vec<(String, Value)>) -> u64 {
        match self
            .store
            .append_session_events(tenant, id, &events, now_ms())
            .await
        {
            Ok(seqs) => seqs.len() as u64,
            Err(e) => {
                tracing::warn!(
                    session = id,
                    code = e.code(),
                    "session events not kept: {e}"
                );
                0
            }
        }
    }

    /// Audits one step of a session as its op (`agents.<a>.exec`, ...), shape only.
    async fn audit_step(&self, t: &TurnStart, op: String, event: &SessionEvent) {
        let body = serde_json::to_value(event).unwrap_or(Value::Null);
        // Whether the step went through, and the code of one that did not (when it has one).
        let (ok, code) = match event {
            SessionEvent::Command { exit, .. } => (exit.unwrap_or(0) == 0, None),
            SessionEvent::FileChange { applied, .. } => (*applied, None),
            SessionEvent::ChangesRefused { changes, .. } => {
                (false, changes.first().map(|c| c.code.clone()))
            }
            SessionEvent::Network { allowed, .. } => (*allowed, None),
            _ => (true, None),
        };
        let audit = AuditEvent {
            request_id: format!("{}-{}", t.record.id, uuid::Uuid::now_v7().simple()),
            tenant: t.tenant.clone(),
            ts_ms: now_ms(),
            principal_id: t.owner.principal.id.clone(),
            principal_kind: t.owner.principal.kind.as_str().to_owned(),
            act_chain: t.owner.act_chain.clone(),
            op,
            outcome: if ok { Outcome::Ok } else { Outcome::OpError },
            code,
            rule: None,
            args_hash: corral_guard::args::args_hash(&body),
            args_shape: json!({"step": event.kind()}),
            status: 200,
            duration_us: 0,
            attestation: None,
            action_id: None,
            run_id: Some(t.record.id.clone()),
            detail: None,
            purpose: Default::default(),
            // A turn's steps happen after the request that started it: no call span is open.
            trace_id: None,
        };
        for sink in &self.sinks {
            if let Err(e) = sink.append(&audit).await {
                tracing::warn!(session = %t.record.id, "a session step was not audited: {e}");
            }
        }
    }

    /// The live session of a stored one (made on its first turn in this process).
    fn live_session(&self, t: &TurnStart, cli: Installed) -> Result<Arc<Session>, OpError> {
        let built_from = format!(
            "{:?}",
            (
                t.grant.permissions,
                t.limits,
                &t.owner.principal,
                &t.owner.act_chain,
                t.rules.spec(),
                &t.protected,
                &cli.dir,
                &cli.version,
                t.grant.network.as_ref().map(|n| n.summary()),
            )
        );
        if let Some((from, s)) = self
            .live
            .lock()
            .ok()
            .and_then(|l| l.get(&t.record.id).cloned())
            && from == built_from
        {
            // The stored thread is the newest (a turn may have run on another replica since).
            s.resume_from(t.record.cli_thread.as_deref());
            return Ok(s);
        }
        let links = self.links.get().ok_or_else(|| {
            op_err(
                codes::AGENTS_SANDBOX,
                "this runtime serves no LLM proxy link for agents (it is not `corral serve`); run agents through the server",
            )
        })?;
        let home = self.homes.join(&t.record.id);
        let protected = session_protection(t, &[&cli.dir, &home])?;
        let keep_out = kept_out(t, &[&cli.dir, &home]);
        let cfg = SessionConfig {
            id: t.record.id.clone(),
            cli,
            model: t.record.model.clone(),
            workdir: PathBuf::from(&t.record.workdir),
            permissions: t.grant.permissions,
            max_turns: u32::MAX,
            max_model_turns: MAX_MODEL_TURNS,
            home,
            limits: t.limits,
            protected,
            network: match &t.grant.network {
                Some(corral_policy::scope::NetworkSpec::Allow(allow)) => Some(allow.clone()),
                // `none` and `loopback`: the sandbox's own loopback (where the link is) only.
                Some(_) | None => None,
            },
            commands: t.grant.commands.clone(),
            keep_out,
            confirm_writes: t.grant.confirm_writes_outside.as_ref().map(|free| {
                corral_agents::ConfirmWrites {
                    free: free.iter().map(PathBuf::from).collect(),
                    holds: self.holds_of(&t.record.id),
                }
            }),
        };
        let session = Session::new(
            cfg,
            Arc::clone(&t.backend),
            links.links(t.owner.clone(), &t.record.model),
        )
        .map_err(|e| OpError::new(e.code, e.message))?;
        session.resume_from(t.record.cli_thread.as_deref());
        let session = Arc::new(session);
        if let Ok(mut l) = self.live.lock() {
            // Past the cap, the sessions no turn holds are dropped (a later turn rebuilds one
            // from its record: the CLI's own session files stay in its home).
            if l.len() >= MAX_LIVE_SESSIONS {
                l.retain(|_, (_, s)| Arc::strong_count(s) > 1);
            }
            l.insert(t.record.id.clone(), (built_from, Arc::clone(&session)));
        }
        Ok(session)
    }

    /// Claims the session's next turn (refused while one runs, or past `max_turns`), and
    /// runs it in the background; its handle ends with the turn (`None`: the claim was
    /// refused, and this call answered why).
    ///
    /// The claim is made by the turn's own task, so a caller that goes away (its client
    /// disconnected, its future dropped) at any await point here either never claimed the
    /// turn or left it with a task that runs it and records its end: a session is never left
    /// `in_progress` with nothing driving it.
    async fn start_turn(
        self: &Arc<Self>,
        t: TurnStart,
        prompt: String,
    ) -> Result<tokio::task::JoinHandle<Option<TurnDone>>, OpError> {
        if let Some(left) = t.grant.turns_left
            && t.record.turns >= u64::from(left)
        {
            return Err(op_err(
                codes::AGENTS_MAX_TURNS,
                format!(
                    "session `{}` used its {} turns (`max_turns` of its agent scope); start a new session, or raise `max_turns`",
                    t.record.id, t.record.turns
                ),
            ));
        }
        // A session at its event cap takes no turn: its end could not be recorded, and a
        // client waiting for `idle` would wait in vain.
        if t.record.events + 8 > corral_store::agents::MAX_SESSION_EVENTS {
            return Err(op_err(
                codes::AGENTS_SESSION_FULL,
                format!(
                    "session `{}` holds {} events, at its cap: it takes no more turns; start a new session",
                    t.record.id, t.record.events
                ),
            ));
        }
        let cli = self.ensure_cli(t.adapter)?;
        let session = self.live_session(&t, cli)?;
        let slot = self
            .turns
            .take((t.tenant.clone(), t.owner.principal.identity()))
            .ok_or_else(|| slot_error(&t.owner.principal.id))?;
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let host = Arc::clone(self);
        // Nothing awaits between here and the spawn: from the claim on, the task owns the turn
        // (and the owner's slot, freed when the turn ends or the task is aborted).
        let handle = tokio::spawn(async move {
            let _slot = slot;
            let claimed = host
                .store
                .claim_turn(&t.tenant, &t.record.id, now_ms())
                .await
                .map_err(store_err);
            let turn = match claimed {
                Ok(s) => s.turns,
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                    return None;
                }
            };
            let (ended_tx, ended) = tokio::sync::watch::channel(());
            let cancel = Arc::new(tokio::sync::Notify::new());
            if let Ok(mut r) = host.running.lock() {
                r.insert(
                    t.record.id.clone(),
                    RunningTurn {
                        turn,
                        cancel: Arc::clone(&cancel),
                        ended,
                    },
                );
            }
            let prompt = host.with_instructions(&t, turn, prompt).await;
            host.append(
                &t.tenant,
                &t.record.id,
                vec![("turn_started".to_owned(), json!({"turn": turn}))],
            )
            .await;
            // The caller may be gone; the turn runs all the same.
            let _ = started_tx.send(Ok(()));
            let done = host.drive_turn(t, session, prompt, turn, cancel).await;
            drop(ended_tx);
            Some(done)
        });
        match started.await {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(op_err(
                codes::AGENTS_SANDBOX,
                "the turn's task ended before its turn started; see the server's log",
            )),
        }
    }

    /// A session's first prompt, after the `instructions` of the saved agent it was made from
    /// (if any): the CLI gets them as the start of its task.
    async fn with_instructions(&self, t: &TurnStart, turn: u64, prompt: String) -> String {
        let Some(agent_id) = t.record.agent_id.as_deref().filter(|_| turn == 1) else {
            return prompt;
        };
        match self.store.get_agent_def(&t.tenant, agent_id).await {
            Ok(Some(def)) => match def.instructions.filter(|i| !i.trim().is_empty()) {
                Some(i) => format!("{i}\n\n{prompt}"),
                None => prompt,
            },
            _ => prompt,
        }
    }

    /// Refuses at once when `ctx`'s caller already runs [`MAX_TURNS_PER_OWNER`] turns: checked
    /// before a session with a first task is stored, so a refused first turn leaves no idle
    /// session behind (the slot itself is taken when the turn starts).
    fn turn_slot_free(&self, ctx: &OpCtx) -> Result<(), OpError> {
        let owner = (self.tenant_of(&ctx.principal), ctx.principal.identity());
        if self.turns.has_room(&owner) {
            Ok(())
        } else {
            Err(slot_error(&ctx.principal.id))
        }
    }

    /// Runs one turn: its events stored and audited as they come, its end recorded; a cancel
    /// (`cancel` woken here, or asked in the store on another replica) ends its sandbox and
    /// records it as cancelled.
    async fn drive_turn(
        self: Arc<Self>,
        t: TurnStart,
        session: Arc<Session>,
        prompt: String,
        turn: u64,
        cancel: Arc<tokio::sync::Notify>,
    ) -> TurnDone {
        let (tx, mut rx) = mpsc::channel::<SessionEvent>(64);
        let adapter = t.adapter.name();
        // Room is kept for the turn's end (`turn_ended`, `idle`) and one notice, so a client
        // waiting for `idle` always gets it, however much the agent printed.
        let room = corral_store::agents::MAX_SESSION_EVENTS.saturating_sub(t.record.events + 8);
        let consume = async {
            let (mut events, mut message) = (0u64, None::<String>);
            let mut noticed = false;
            while let Some(e) = rx.recv().await {
                // A hold is announced only once the store keeps it.
                let e = self.announce_hold(&t, e).await;
                if let Some(op) = e.audit_op(adapter) {
                    self.audit_step(&t, op, &e).await;
                }
                if let SessionEvent::Message { text } = &e {
                    message = Some(text.clone());
                }
                if matches!(e, SessionEvent::Done { .. }) {
                    continue;
                }
                if events >= room {
                    if !noticed {
                        noticed = true;
                        let notice = SessionEvent::error(
                            codes::AGENTS_SESSION_FULL,
                            "the session's events are at their cap: this turn's further steps are not kept (they are still audited); start a new session",
                        );
                        let body = serde_json::to_value(&notice).unwrap_or(Value::Null);
                        self.append(&t.tenant, &t.record.id, vec![("error".to_owned(), body)])
                            .await;
                    }
                    continue;
                }
                let body = fit(serde_json::to_value(&e).unwrap_or(Value::Null));
                events += self
                    .append(&t.tenant, &t.record.id, vec![(e.kind().to_owned(), body)])
                    .await;
            }
            (events, message)
        };
        let run = async { tokio::join!(session.run_turn(&prompt, tx), consume) };
        let cancelled = async {
            tokio::select! {
                () = cancel.notified() => {}
                () = self.cancel_asked(&t, turn) => {}
            }
        };
        // A cancel drops the run (its sandbox destroyed, the agent killed) before the end is
        // recorded.
        let outcome = tokio::select! {
            done = run => Some(done),
            () = cancelled => None,
        };
        let Some((report, (events, message))) = outcome else {
            let error = (
                codes::AGENTS_CANCELLED,
                "the turn was cancelled by `agent.session.input.cancel`".to_owned(),
            );
            self.end_turn(&t, turn, None, Some(error.clone())).await;
            return TurnDone {
                report: None,
                error: Some(error),
                message: None,
                events: 0,
            };
        };
        let (report, error) = match report {
            Ok(r) if r.ok => (Some(r), None),
            Ok(r) => {
                let why = (
                    codes::AGENTS_TURN_FAILED,
                    format!("turn {turn} ended without success: {}", describe(&r)),
                );
                (Some(r), Some(why))
            }
            Err(e) => (None, Some((e.code, e.message))),
        };
        self.end_turn(&t, turn, report.as_ref(), error.clone())
            .await;
        TurnDone {
            report,
            error,
            message,
            events,
        }
    }

    async fn end_turn(
        &self,
        t: &TurnStart,
        turn: u64,
        report: Option<&TurnReport>,
        error: Option<(&'static str, String)>,
    ) {
        let usage = report.map_or(Value::Null, |r| json!(r.usage));
        let attestation = report.map_or(Value::Null, |r| {
            json!(AttestationRecord::from(&r.attestation))
        });
        // Off the running list first (only this turn's entry): a turn claimed once this one
        // is idle registers its own.
        if let Ok(mut r) = self.running.lock()
            && r.get(&t.record.id).is_some_and(|e| e.turn == turn)
        {
            r.remove(&t.record.id);
        }
        let ended = json!({
            "turn": turn,
            "ok": error.is_none(),
            "usage": usage,
            "error": error.as_ref().map(|(code, message)| json!({"code": code, "message": message})),
        });
        // The turn's end is stored before the session turns idle, so a turn claimed right
        // after never has its events before this one's end.
        self.append(
            &t.tenant,
            &t.record.id,
            vec![("turn_ended".to_owned(), ended)],
        )
        .await;
        let end = TurnEnd {
            status: "idle".to_owned(),
            error: error.map(|(c, m)| (c.to_owned(), m)),
            usage,
            attestation,
            cli_thread: report.and_then(|r| r.thread.clone()),
        };
        if let Err(e) = self
            .store
            .end_turn(&t.tenant, &t.record.id, turn, &end, now_ms())
            .await
        {
            tracing::warn!(session = %t.record.id, "a turn's end was not recorded: {e}");
        }
        self.append(
            &t.tenant,
            &t.record.id,
            vec![("idle".to_owned(), json!({}))],
        )
        .await;
    }

    /// Cancels the turn running in the session (nothing when none runs): the turn named by
    /// the session's record as this call read it, never another. The cancel is asked in the
    /// store, where the replica running the turn finds it within [`CANCEL_POLL`]; when this
    /// process runs it, its task is woken at once, and this waits (at most [`CANCEL_WAIT`])
    /// until the task recorded the turn's end. Only the turn's own task records that end, so
    /// a session's events show a cancel once, and an idle session's none.
    async fn cancel(&self, t: &TurnStart) {
        if t.record.status != "in_progress" {
            return;
        }
        let turn = t.record.turns;
        let local = self.running.lock().ok().and_then(|r| {
            r.get(&t.record.id)
                .filter(|e| e.turn == turn)
                .map(|e| (Arc::clone(&e.cancel), e.ended.clone()))
        });
        if let Err(e) = self
            .store
            .request_cancel(&t.tenant, &t.record.id, turn)
            .await
        {
            tracing::warn!(session = %t.record.id, code = e.code(), "a turn's cancel was not stored: {e}");
        }
        if let Some((cancel, mut ended)) = local {
            cancel.notify_one();
            // `changed` fails once the task dropped its sender: the end is recorded.
            let _ = tokio::time::timeout(CANCEL_WAIT, async {
                while ended.changed().await.is_ok() {}
            })
            .await;
        }
    }

    /// Resolves once a cancel of turn `turn` of the session was asked in the store (by any
    /// replica), asking every [`CANCEL_POLL`]; a failing store is asked again.
    async fn cancel_asked(&self, t: &TurnStart, turn: u64) {
        loop {
            tokio::time::sleep(CANCEL_POLL).await;
            match self.store.cancel_asked(&t.tenant, &t.record.id, turn).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(session = %t.record.id, code = e.code(), "a turn's cancel could not be read: {e}");
                }
            }
        }
    }
}

/// The protection of a session's turns: the call's (names such as `.git` at any depth, the
/// config's `protected:` globs, corral's own files and the deployment's protected directories),
/// but not the trees that hold the two places a session binds itself (the CLI's install,
/// read-only; the agent's home), which the sandbox could not bind inside a hidden tree. The
/// sandbox binds nothing else of the state directory, so leaving such a tree off the list hides
/// the same; a workdir that would contain one of corral's files is refused instead.
fn session_protection(
    t: &TurnStart,
    binds: &[&std::path::Path],
) -> Result<corral_policy::Protected, OpError> {
    let workdir = std::path::Path::new(&t.record.workdir);
    if let Some(p) = t.protected.iter().find(|p| p.starts_with(workdir)) {
        return Err(op_err(
            codes::AGENTS_WORKDIR_OUTSIDE,
            format!(
                "the session's workdir `{}` contains corral's own `{}` (its state, config or keys), which no agent may see; pick a workdir that does not",
                workdir.display(),
                p.display()
            ),
        ));
    }
    let outside_binds = |p: &std::path::Path| !binds.iter().any(|b| b.starts_with(p));
    let mut spec = t.rules.spec().clone();
    spec.paths
        .retain(|p| outside_binds(std::path::Path::new(p)));
    let mut protected = corral_policy::Protected::compile(spec).map_err(|e| {
        op_err(
            codes::AGENTS_SANDBOX,
            format!("the session's protection: {e}"),
        )
    })?;
    for p in t.protected.iter().filter(|p| outside_binds(p)) {
        protected.add_path(&p.to_string_lossy());
    }
    Ok(protected)
}

/// corral's own trees that [`session_protection`] leaves off because they hold a session's own
/// paths (the state directory, holding the agent's home and the CLI's install): a `full` turn,
/// which may change the host beyond its workdir, keeps them out all the same
/// (`SessionConfig::keep_out`).
fn kept_out(t: &TurnStart, binds: &[&std::path::Path]) -> Vec<PathBuf> {
    t.protected
        .iter()
        .filter(|p| binds.iter().any(|b| b.starts_with(p)))
        .cloned()
        .collect()
}

/// An event's body cut to fit the store's cap on one event: when its JSON is over
/// [`FIT_BYTES`], every string in it is cut to an equal share of that (at a character
/// boundary, marked `…[cut]`), so a hostile agent's oversized step is kept, shortened, rather
/// than dropped from the session's record.
fn fit(v: Value) -> Value {
    fn count(v: &Value) -> usize {
        match v {
            Value::String(_) => 1,
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o.values().map(count).sum(),
            _ => 0,
        }
    }
    fn cut(v: &mut Value, share: usize) {
        match v {
            Value::String(text) if text.len() > share => {
                let mut end = share.saturating_sub(8);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str("…[cut]");
            }
            Value::Array(a) => a.iter_mut().for_each(|x| cut(x, share)),
            Value::Object(o) => o.values_mut().for_each(|x| cut(x, share)),
            _ => {}
        }
    }
    let mut v = v;
    if v.to_string().len() > FIT_BYTES {
        // JSON escapes can make a string's encoding six times its bytes.
        let share = FIT_BYTES / 6 / count(&v).max(1);
        cut(&mut v, share.max(16));
    }
    v
}

/// What [`fit`] keeps an event's JSON under: the store's cap on one event, less room.
const FIT_BYTES: usize = corral_store::agents::MAX_EVENT_BYTES - 4096;

/// `limit.concurrency`: `who` runs [`MAX_TURNS_PER_OWNER`] turns already.
fn slot_error(who: &str) -> OpError {
    op_err(
        codes::LIMIT_CONCURRENCY,
        format!(
            "`{who}` has {MAX_TURNS_PER_OWNER} agent turns running, the most at once; send this when one has ended (`agent.session.idle`)"
        ),
    )
}

fn describe(r: &TurnReport) -> String {
    if r.timed_out {
        "the turn timed out".to_owned()
    } else if r.killed_for_output {
        "the agent printed too much and was ended".to_owned()
    } else if let Some(sig) = r.signal {
        format!("the agent was ended by signal {sig}")
    } else {
        format!("the agent exited with {}", r.exit_code.unwrap_or(-1))
    }
}

/// Which of an adapter's session ops a handler serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Run,
    Create,
    SendEvent,
    ApplyWrites,
}

/// `agents.<a>.run`, `agents.<a>.sessions.create` and `agents.<a>.sessions.send_event`.
#[derive(Debug)]
pub struct AgentSessionOp {
    spec: OpSpec,
    adapter: Adapter,
    kind: Kind,
    host: Arc<AgentHost>,
}

impl AgentSessionOp {
    /// The handler of op `spec`; `None` when it is not an adapter's session op.
    pub fn new(spec: OpSpec, host: Arc<AgentHost>) -> Option<Self> {
        let rest = spec.id.as_str().strip_prefix("agents.")?;
        let (name, what) = rest.split_once('.')?;
        let kind = match what {
            "run" => Kind::Run,
            "sessions.create" => Kind::Create,
            "sessions.send_event" => Kind::SendEvent,
            "sessions.apply_writes" => Kind::ApplyWrites,
            _ => return None,
        };
        let adapter = Adapter::parse(name)?;
        Some(Self {
            spec,
            adapter,
            kind,
            host,
        })
    }

    /// The turn's settings from the call's grant and a stored session.
    fn turn_start(&self, ctx: &OpCtx, record: StoredSession) -> Result<TurnStart, OpError> {
        let grant = ctx.grant.agent.clone().ok_or_else(|| {
            op_err(
                codes::AGENTS_INVALID,
                format!(
                    "`{}` was allowed by a rule without an agent scope; add `agents: {{workdir: ...}}` to the rule",
                    self.spec.id
                ),
            )
        })?;
        let defaults = SessionLimits::default();
        let limits = SessionLimits {
            memory: ctx.grant.limits.memory,
            processes: ctx.grant.limits.processes.unwrap_or(defaults.processes),
            turn_timeout: ctx.grant.limits.timeout.unwrap_or(defaults.turn_timeout),
            ..defaults
        };
        Ok(TurnStart {
            tenant: self.host.tenant_of(&ctx.principal),
            owner: {
                // The delegation chain goes with the turn: its link's model calls and its
                // steps' audit events say who acted through whom.
                let mut owner = Caller::new(ctx.principal.clone());
                owner.act_chain = ctx.act_chain.clone();
                owner
            },
            adapter: self.adapter,
            record,
            grant,
            limits,
            backend: match &self.host.backend {
                Some(b) => Arc::clone(b),
                None => {
                    return Err(op_err(
                        codes::AGENTS_SANDBOX,
                        "agents run only in the `linux` isolation backend (`isolation.backend: linux`, the default); this deployment uses another",
                    ));
                }
            },
            protected: ctx.protected.clone(),
            rules: ctx.grant.resolved.protected().clone(),
        })
    }

    /// Stores a new session of the grant's workdir and model (`agent`: a saved agent whose
    /// model applies when the call names none).
    async fn create(&self, ctx: &OpCtx) -> Result<StoredSession, OpError> {
        let tenant = self.host.tenant_of(&ctx.principal);
        let grant = ctx.grant.agent.as_ref().ok_or_else(|| {
            op_err(
                codes::AGENTS_INVALID,
                "the rule that allowed this has no agent scope; add `agents: {workdir: ...}` to it",
            )
        })?;
        // The CLI must be there (a lazy install starts now and answers `agents.installing`).
        self.host.ensure_cli(self.adapter)?;
        let saved = match text_arg(ctx, "agent") {
            Some(id) => Some(
                self.host
                    .store
                    .get_agent_def(&tenant, id)
                    .await
                    .map_err(store_err)?
                    .filter(|d| d.owner == ctx.principal.identity())
                    .ok_or_else(|| {
                        op_err(
                            codes::AGENTS_NOT_FOUND,
                            format!("no agent `{id}` of yours; list your agents to find its id"),
                        )
                    })?,
            ),
            None => None,
        };
        let model = match (&grant.model, &saved) {
            (Some(m), _) => m.clone(),
            (None, Some(d)) => d.model.clone(),
            (None, None) => default_model(self.adapter).to_owned(),
        };
        let metadata = match json_arg(ctx, "metadata") {
            Some(Value::Object(m)) => metadata_of(&m)?,
            Some(Value::Null) | None => Default::default(),
            Some(_) => {
                return Err(op_err(
                    codes::AGENTS_INVALID,
                    "`metadata` must be an object of strings (at most 16 keys)",
                ));
            }
        };
        let id = format!("sess_{}", uuid::Uuid::now_v7().simple());
        let new = NewSession {
            owner: ctx.principal.identity(),
            adapter: self.adapter.name().to_owned(),
            model,
            agent_id: saved.map(|d| d.id),
            workdir: session_workdir(grant, ctx.grant.resolved.protected())?,
            metadata,
        };
        let record = self
            .host
            .store
            .create_session(&tenant, &id, &new, MAX_SESSIONS_PER_OWNER, now_ms())
            .await
            .map_err(store_err)?;
        self.host
            .append(&tenant, &id, vec![("created".to_owned(), json!({}))])
            .await;
        Ok(record)
    }

    /// The caller's own session `id` of this adapter.
    async fn own_session(&self, ctx: &OpCtx, id: &str) -> Result<StoredSession, OpError> {
        let tenant = self.host.tenant_of(&ctx.principal);
        self.host
            .store
            .get_session(&tenant, id)
            .await
            .map_err(store_err)?
            .filter(|s| s.owner == ctx.principal.identity() && s.adapter == self.adapter.name())
            .ok_or_else(|| {
                op_err(
                    codes::AGENTS_NOT_FOUND,
                    format!(
                        "no {} session `{id}` of yours; list your sessions to find its id",
                        self.adapter.name()
                    ),
                )
            })
    }

    async fn reread(&self, ctx: &OpCtx, id: &str) -> Result<Value, OpError> {
        Ok(session_json(&self.own_session(ctx, id).await?))
    }

    async fn send_event(&self, ctx: &OpCtx) -> Result<Value, OpError> {
        let id = text_arg(ctx, "session").unwrap_or_default().to_owned();
        let record = self.own_session(ctx, &id).await?;
        let event = json_arg(ctx, "event").unwrap_or(Value::Null);
        let t = self.turn_start(ctx, record)?;
        same_session(&t)?;
        match event.get("type").and_then(Value::as_str) {
            Some("message") => {
                let text = event
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.host.start_turn(t, text.to_owned()).await?;
            }
            Some("cancel") => self.host.cancel(&t).await,
            _ => {
                return Err(op_err(
                    codes::AGENTS_INVALID,
                    "`event` must be `{\"type\": \"message\", \"text\": \"...\"}` or `{\"type\": \"cancel\"}`",
                ));
            }
        }
        self.reread(ctx, &id).await
    }

    /// Applies a hold of the session (a person approved this exact call: the op is always
    /// confirmed), in a sandbox whose only writable path is the session's workdir.
    async fn apply_writes(&self, ctx: &OpCtx) -> Result<Value, OpError> {
        let id = text_arg(ctx, "session").unwrap_or_default().to_owned();
        let hold = text_arg(ctx, "hold").unwrap_or_default().to_owned();
        let record = self.own_session(ctx, &id).await?;
        let t = self.turn_start(ctx, record)?;
        same_session(&t)?;
        // Judged now: a scope that became read-only since the turn held them applies nothing.
        if !t.grant.permissions.writes() {
            return Err(op_err(
                codes::AGENTS_READ_ONLY,
                format!(
                    "session `{id}`'s agent scope is now `permissions: {}`: its held changes cannot be applied under it",
                    t.grant.permissions.as_str()
                ),
            ));
        }
        if t.record.status == "in_progress" {
            return Err(op_err(
                codes::AGENTS_SESSION_BUSY,
                format!(
                    "session `{id}` is running a turn; apply its held changes once the turn's `agent.session.idle` came"
                ),
            ));
        }
        let cli = self.host.ensure_cli(self.adapter)?;
        let session = self.host.live_session(&t, cli)?;
        // Whichever replica ran the turn: the hold is the store's (the claim there decides).
        let applied = self.host.apply_stored_hold(&t, &session, &hold).await?;
        let event = SessionEvent::WritesApplied {
            hold: hold.clone(),
            applied: applied.applied,
            refused: applied.refused.len() as u64,
        };
        let body = serde_json::to_value(&event).unwrap_or(Value::Null);
        self.host
            .append(&t.tenant, &id, vec![(event.kind().to_owned(), body)])
            .await;
        Ok(json!({
            "session": id,
            "hold": applied.hold,
            "applied": applied.applied,
            "bytes": applied.bytes,
            "refused": applied.refused,
        }))
    }

    async fn run(&self, ctx: &OpCtx) -> Result<Value, OpError> {
        let task = text_arg(ctx, "task").unwrap_or_default().to_owned();
        self.host.turn_slot_free(ctx)?;
        let record = self.create(ctx).await?;
        let id = record.id.clone();
        let t = self.turn_start(ctx, record)?;
        let done = self
            .host
            .start_turn(t, task)
            .await?
            .await
            .map_err(|e| {
                op_err(
                    codes::AGENTS_SANDBOX,
                    format!("the turn's task failed: {e}"),
                )
            })?
            .ok_or_else(|| {
                op_err(
                    codes::AGENTS_SANDBOX,
                    "the turn's task ended before its turn started",
                )
            })?;
        let session = self.reread(ctx, &id).await?;
        if let Some((code, message)) = &done.error
            && done.report.is_none()
        {
            return Err(op_err(code, message.clone()));
        }
        Ok(json!({
            "session": session,
            "ok": done.error.is_none(),
            "error": done.error.map(|(code, message)| json!({"code": code, "message": message})),
            "final_message": done.message,
            "events": done.events,
            "usage": done.report.as_ref().map(|r| json!(r.usage)),
            "exit_code": done.report.as_ref().and_then(|r| r.exit_code),
        }))
    }
}

/// Refuses a `send_event` whose grant is not for the session's own workdir and model: the
/// engine judged the call's `workdir` and `model` arguments, which must be the session's (the
/// API passes them), so the rule that allowed it is one that admits the session as it is
/// (its permissions, turns and limits then apply, never another rule's).
fn same_session(t: &TurnStart) -> Result<(), OpError> {
    let workdir = session_workdir(&t.grant, &t.rules)?;
    if workdir != t.record.workdir {
        return Err(op_err(
            codes::AGENTS_WORKDIR_OUTSIDE,
            format!(
                "session `{}` works in `{}`, and this call was allowed for `{workdir}`; pass the session's own `workdir` (and `model`) with the event",
                t.record.id, t.record.workdir
            ),
        ));
    }
    if t.grant.model.as_deref() != Some(t.record.model.as_str()) {
        return Err(op_err(
            codes::AGENTS_MODEL_NOT_ALLOWED,
            format!(
                "session `{}` runs model `{}`, and this call was allowed for another; pass the session's own `model` (and `workdir`) with the event",
                t.record.id, t.record.model
            ),
        ));
    }
    Ok(())
}

/// `metadata`: at most 16 string values, keys up to 64 and values up to 512 characters.
fn metadata_of(
    m: &serde_json::Map<String, Value>,
) -> Result<std::collections::BTreeMap<String, String>, OpError> {
    if m.len() > 16 {
        return Err(op_err(
            codes::AGENTS_INVALID,
            format!("`metadata` has {} keys; at most 16", m.len()),
        ));
    }
    m.iter()
        .map(|(k, v)| match v.as_str() {
            Some(s) if k.chars().count() <= 64 && s.chars().count() <= 512 => {
                Ok((k.clone(), s.to_owned()))
            }
            _ => Err(op_err(
                codes::AGENTS_INVALID,
                "`metadata` values must be strings (keys up to 64, values up to 512 characters)",
            )),
        })
        .collect()
}

impl Op for AgentSessionOp {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, ctx: OpCtx) -> corral_exec::BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(async move {
            let value = match self.kind {
                Kind::Create => {
                    if ctx.args.get("task").is_some() {
                        self.host.turn_slot_free(&ctx)?;
                    }
                    let record = self.create(&ctx).await?;
                    let id = record.id.clone();
                    if let Some(task) = text_arg(&ctx, "task").map(str::to_owned) {
                        let t = self.turn_start(&ctx, record)?;
                        self.host.start_turn(t, task).await?;
                    }
                    self.reread(&ctx, &id).await?
                }
                Kind::SendEvent => self.send_event(&ctx).await?,
                Kind::ApplyWrites => self.apply_writes(&ctx).await?,
                Kind::Run => self.run(&ctx).await?,
            };
            Ok(OpOutput::Json {
                value,
                attestation: None,
            })
        })
    }
}

/// `agents.<a>.install`.
#[derive(Debug)]
pub struct AgentInstall {
    spec: OpSpec,
    adapter: Adapter,
    host: Arc<AgentHost>,
}

impl AgentInstall {
    /// The op `spec` installing its adapter with the host's installer; `None` when the op id
    /// names no adapter corral hosts.
    pub fn new(spec: OpSpec, host: Arc<AgentHost>) -> Option<Self> {
        let name = spec
            .id
            .as_str()
            .strip_prefix("agents.")?
            .strip_suffix(".install")?;
        let adapter = Adapter::parse(name)?;
        Some(Self {
            spec,
            adapter,
            host,
        })
    }
}

impl Op for AgentInstall {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, _ctx: OpCtx) -> corral_exec::BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(async move {
            let installed = self.host.ensure_cli(self.adapter)?;
            Ok(OpOutput::Json {
                value: json!({
                    "adapter": self.adapter.name(),
                    "version": installed.version,
                    "installed": true,
                }),
                attestation: None,
            })
        })
    }
}
