//! A session: one agent CLI, one workdir, turns run one at a time in the `linux` backend.
//!
//! Each turn is a fresh sandbox ([`corral_exec::Backend::run_attached`], so its output streams
//! as it comes): the workdir bound read-write (`workspace-write`, `full`) or read-only
//! (`read-only`), and with `full` the host's top-level directories writable too
//! ([`corral_exec::ExecRequest::host_writes`]: every write through the same copy-on-write layer
//! and checks, corral's state kept out, attested `fs:unconfined`); the agent's home (its config,
//! the CLI's own session files that the next turn
//! resumes from) read-write; the CLI's install read-only; everything else the backend's
//! read-only system view or absent. Its only network is a link
//! ([`corral_exec::RunNetwork::Corral`]) that the HTTP crate serves with the LLM proxy's routes
//! ([`ProxyLinks`]), authenticated by a token minted for the turn: the CLI's API key, worth
//! nothing anywhere else, never the upstream key. Memory, process and time limits apply; the
//! attestation of every turn is kept.
//!
//! What the CLI prints is hostile: read in lines of at most [`crate::events::MAX_LINE`] bytes,
//! parsed by the adapter into events whose text is cleaned, at most
//! [`crate::events::MAX_EVENTS`] a turn (past it, the turn is killed).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use corral_exec::linux::CORRAL_LINK_URL;
use corral_exec::{
    Attestation, Backend, CorralLink, DEFAULT_MEMORY, Egress, EgressLog, EgressRecord, ExecOutput,
    ExecRequest, Hold, HostWrites, ResourceLimits, RunNetwork,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::adapter::{Permissions, TurnSpec};
use crate::events::{Line, LineSplitter, MAX_EVENTS, SessionEvent, Usage};
use crate::install::Installed;
use crate::{AgentError, codes};

/// The longest prompt (a task or a user message), bytes.
pub const MAX_PROMPT: usize = 256 * 1024;
/// The most bytes of a CLI's stderr kept (quoted, cut, in a failed turn's error).
const MAX_STDERR: u64 = 64 * 1024;
/// The most characters of stderr quoted in a failed turn's error.
const STDERR_QUOTED: usize = 500;
/// The egress records of one turn waiting to become events; more are dropped, counted (an
/// error event), and written to the server's log one by one (host, port, allowed).
const MAX_PENDING_CONNECTIONS: usize = 1024;
/// How long the output of a CLI that exited is still read, and how long its last events wait
/// for a consumer that stopped reading (then they are dropped, and counted).
const DRAIN: Duration = Duration::from_secs(2);

/// The digest of a token: corral-exec's, beside the link that uses it.
pub use corral_exec::TokenDigest;

/// Serves the LLM proxy to one turn of a session (implemented by the HTTP crate): its
/// `/v1/responses`, `/v1/chat/completions`, `/v1/messages` and `/v1/models`, as the session's
/// run (budgets, audit), accepting only requests whose bearer token (or `x-api-key`) `token`
/// accepts.
pub trait ProxyLinks: Send + Sync + fmt::Debug {
    /// The link of one turn of session `session`.
    fn link(&self, session: &str, token: TokenDigest) -> CorralLink;
}

/// A fresh token for one turn (244 random bits: two v4 UUIDs), and its digest.
fn mint() -> (String, TokenDigest) {
    let token = format!(
        "corral-agent-{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let digest = TokenDigest::of(&token);
    (token, digest)
}

/// A session's limits, per turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// An explicit memory limit, bytes: a memory cgroup enforces it, and a host without one
    /// refuses the session (as every explicit limit of corral's).
    pub memory: Option<u64>,
    /// The cap when `memory` is `None`: the memory cgroup where there is one, else
    /// `RLIMIT_AS`, attested as whichever applied.
    pub default_memory: u64,
    /// Processes.
    pub processes: u32,
    /// Wall-clock time of one turn.
    pub turn_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            memory: None,
            default_memory: DEFAULT_MEMORY,
            processes: 256,
            turn_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// What a session is, as the op built it from the caller's request and the scope.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The session's id (given to the link, in events' audit).
    pub id: String,
    /// The CLI.
    pub cli: Installed,
    /// The real model name (one the scope's `models` allows).
    pub model: String,
    /// The workdir (absolute; the scope's).
    pub workdir: PathBuf,
    /// The scope's `permissions`.
    pub permissions: Permissions,
    /// The most turns: the task and each `send_event` count one.
    pub max_turns: u32,
    /// The most model turns within one turn, for CLIs that take such a limit.
    pub max_model_turns: u32,
    /// The agent's home on the host, kept across turns (absolute; in corral's state directory,
    /// out of the workdir).
    pub home: PathBuf,
    /// The limits.
    pub limits: SessionLimits,
    /// What no change of a turn may make (`.git` and `.corral` at any depth, the config's
    /// `protected:` globs) and corral's own files, hidden from the sandbox: a turn writes
    /// through the backend's copy-on-write layer, checked against it when applied.
    pub protected: corral_policy::Protected,
    /// What the agent may reach beside the LLM proxy (the scope's `network: {allow: [...]}`),
    /// through corral's egress proxy on the same socket; `None`: the LLM proxy only.
    pub network: Option<corral_policy::scope::EgressAllowList>,
    /// The programs the agent may execute besides its CLI and its shell (the scope's
    /// `commands`: names looked up on the sandbox's `PATH`, or absolute paths); empty: any
    /// program the sandbox shows.
    pub commands: Vec<String>,
    /// With the scope's `confirm_writes_outside` (and a scope that writes): where a turn's
    /// changes outside those directories wait for a person; `None`: every change applies.
    pub confirm_writes: Option<ConfirmWrites>,
    /// corral's trees that hold the session's own paths (the state directory, holding its home
    /// and the CLI's install), absolute: with `permissions: full`, whose turns may change the
    /// host beyond the workdir, the sandbox hides them but for those paths and applies no change
    /// in them but the home's ([`corral_exec::HostWrites::keep_out`]).
    pub keep_out: Vec<PathBuf>,
}

/// The scope's `confirm_writes_outside`, for one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmWrites {
    /// Directories beneath the workdir whose changes apply as usual (absolute).
    pub free: Vec<PathBuf>,
    /// Where a turn's hold is written: one directory per turn that held something, in
    /// corral's state directory, outside every path of the sandbox (the runtime keeps it in
    /// the store, [`crate::hold::HoldReader`], and removes it).
    pub holds: PathBuf,
}

/// What applying a hold did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HoldApplied {
    /// The hold.
    pub hold: String,
    /// Entries created, changed or deleted in the workdir.
    pub applied: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Changes refused on the way (a protected path, a git repository, a symlink in the way).
    pub refused: Vec<corral_exec::RefusedChange>,
    /// Whether all of it reached the workdir: no refusal (a protected path, the write quota, a
    /// helper that stopped mid-apply). A hold goes only then; else it is kept for a person.
    pub whole: bool,
}

/// The longest an apply of held changes runs (its sandbox's time limit).
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// How a held change is applied once approved, in a sandbox whose only writable path is the
/// workdir (`$1`), the hold (`$2`) read-only: the hold's `delete/` tree marks entries that go
/// (a marker for each, at the entry's path), its `content/` tree holds what is written. The
/// sandbox's copy-on-write layer then goes through the same checks as every run's (protected
/// paths, git repositories, set-id bits, symlinks on the host side).
/// An entry whose kind changes (a directory held as a file, a file as a directory) is
/// removed from the workdir first, so the copy never meets the old one.
const APPLY_HOLD: &str = r#"set -eu
w=$1; h=$2
if [ -d "$h/delete" ]; then
  cd "$h/delete"
  find . -mindepth 1 \( -type f -o -type l \) -exec sh -c 'w=$1; shift; for f; do rm -rf -- "$w/$f"; done' sh "$w" {} +
fi
if [ -d "$h/content" ]; then
  cd "$h/content"
  find . -mindepth 1 ! -type d -exec sh -c 'w=$1; shift; for f; do if [ -d "$w/$f" ] && [ ! -L "$w/$f" ]; then rm -rf -- "$w/$f"; fi; done' sh "$w" {} +
  find . -mindepth 1 -type d -exec sh -c 'w=$1; shift; for f; do if [ -e "$w/$f" ] || [ -L "$w/$f" ]; then if [ ! -d "$w/$f" ] || [ -L "$w/$f" ]; then rm -f -- "$w/$f"; fi; fi; done' sh "$w" {} +
  cp -R -P --preserve=mode,timestamps -- "$h/content/." "$w/"
fi
"#;

/// The shells an agent CLI runs its commands with: always executable when the scope lists
/// `commands` (without one the agent runs nothing at all).
pub const AGENT_SHELLS: [&str; 2] = ["/bin/sh", "/bin/bash"];

/// How one turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnReport {
    /// The turn (1 for the task).
    pub turn: u32,
    /// Whether it ended well.
    pub ok: bool,
    /// The tokens the CLI reported.
    pub usage: Usage,
    /// What the sandbox applied.
    pub attestation: Attestation,
    /// The CLI's exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Whether its time limit ended it.
    pub timed_out: bool,
    /// Whether corral killed it for its output (over [`MAX_EVENTS`]).
    pub killed_for_output: bool,
    /// Events dropped because the consumer stopped reading them after the sandbox ended.
    pub events_dropped: u64,
    /// The CLI's own session id after the turn (what the next turn resumes), if it reported
    /// one.
    pub thread: Option<String>,
    /// The hold of the turn's changes that wait for a person (a `writes_held` event named
    /// it), if it held any.
    pub held: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    turns: u32,
    busy: bool,
    thread: Option<String>,
    attestations: Vec<Attestation>,
}

/// One session.
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    backend: std::sync::Arc<dyn Backend>,
    links: std::sync::Arc<dyn ProxyLinks>,
    state: Mutex<State>,
}

/// Frees the session's turn when the turn ends (or its future is dropped).
struct Busy<'a>(&'a Mutex<State>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.lock() {
            s.busy = false;
        }
    }
}

fn invalid(message: String) -> AgentError {
    AgentError::new(codes::AGENTS_INVALID, message)
}

impl Session {
    /// A session run by `backend` (the `linux` one), its proxy served by `links`.
    pub fn new(
        cfg: SessionConfig,
        backend: std::sync::Arc<dyn Backend>,
        links: std::sync::Arc<dyn ProxyLinks>,
    ) -> Result<Self, AgentError> {
        for (what, p) in [("workdir", &cfg.workdir), ("home", &cfg.home)] {
            if !p.is_absolute() {
                return Err(invalid(format!(
                    "the session's {what} `{}` is not an absolute path",
                    p.display()
                )));
            }
        }
        if cfg.home.starts_with(&cfg.workdir) || cfg.workdir.starts_with(&cfg.home) {
            return Err(invalid(format!(
                "the agent's home `{}` and the workdir `{}` must not contain each other",
                cfg.home.display(),
                cfg.workdir.display()
            )));
        }
        std::fs::create_dir_all(&cfg.home).map_err(|e| {
            invalid(format!(
                "cannot create the agent's home `{}`: {e}",
                cfg.home.display()
            ))
        })?;
        Ok(Self {
            cfg,
            backend,
            links,
            state: Mutex::new(State::default()),
        })
    }

    /// Makes the next turn resume the CLI's own session `thread` (kept in the store from an
    /// earlier turn, maybe of another process); an id the CLI could not have made
    /// (anything but letters, digits, `-` and `_`) is ignored.
    pub fn resume_from(&self, thread: Option<&str>) {
        if let Some(t) = thread.filter(|t| crate::adapter::is_thread_id(t))
            && let Ok(mut s) = self.state.lock()
        {
            s.thread = Some(t.to_owned());
        }
    }

    /// The session's config.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// Turns used so far.
    pub fn turns(&self) -> u32 {
        self.state.lock().map(|s| s.turns).unwrap_or(0)
    }

    /// The attestation of every turn run so far.
    pub fn attestations(&self) -> Vec<Attestation> {
        self.state
            .lock()
            .map(|s| s.attestations.clone())
            .unwrap_or_default()
    }

    /// Runs one turn to its end: the task (first call) or a user message (`send_event`: the
    /// CLI resumes its session), streaming its events to `events` as they come and ending them
    /// with `done`. Refused while another turn runs (`agents.session_busy`) and once `max_turns`
    /// turns ran (`agents.max_turns`).
    pub async fn run_turn(
        &self,
        prompt: &str,
        events: mpsc::Sender<SessionEvent>,
    ) -> Result<TurnReport, AgentError> {
        if prompt.trim().is_empty() || prompt.len() > MAX_PROMPT {
            return Err(invalid(format!(
                "a prompt must be 1 to {MAX_PROMPT} bytes of text; this one is {} bytes",
                prompt.len()
            )));
        }
        let (turn, resume) = {
            let mut s = self.idle_state("send the next message")?;
            if s.turns >= self.cfg.max_turns {
                return Err(AgentError::new(
                    codes::AGENTS_MAX_TURNS,
                    format!(
                        "session `{}` used its {} turns (`max_turns` of its scope); start a new session, or raise `max_turns`",
                        self.cfg.id, self.cfg.max_turns
                    ),
                ));
            }
            s.busy = true;
            s.turns += 1;
            (s.turns, s.thread.clone())
        };
        let _busy = Busy(&self.state);
        let (log, connections) = Connections::channel();
        let (req, token_prompt) = self.request(prompt, resume.as_deref(), log)?;
        let hold = req.hold.as_ref().map(|h| h.into.clone());
        let report = self
            .drive(req, token_prompt, turn, connections, &events)
            .await;
        // A hold that holds nothing (or whose turn never ran) goes.
        if let Some(dir) = hold
            && report.as_ref().map_or(true, |r| r.held.is_none())
        {
            let _ = std::fs::remove_dir_all(dir);
        }
        let report = report?;
        if let Ok(mut s) = self.state.lock() {
            if let Some(t) = &report.thread {
                s.thread = Some(t.clone());
            }
            s.attestations.push(report.attestation.clone());
        }
        Ok(report)
    }

    /// The sandbox request of one turn (and its stdin), its files written.
    fn request(
        &self,
        prompt: &str,
        resume: Option<&str>,
        egress_log: EgressLog,
    ) -> Result<(ExecRequest, Vec<u8>), AgentError> {
        let (token, digest) = mint();
        let link = self.links.link(&self.cfg.id, digest);
        let launch = self.cfg.cli.adapter.launch(&TurnSpec {
            program: &self.cfg.cli.program,
            model: &self.cfg.model,
            home: &self.cfg.home,
            proxy_url: CORRAL_LINK_URL,
            token: &token,
            resume,
            max_model_turns: self.cfg.max_model_turns,
        });
        for (path, content) in &launch.files {
            // The home is the agent's: a symlink (or anything) it left there is removed, never
            // followed, and the file is created afresh (refused if something reappeared).
            let _ = std::fs::remove_file(path);
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, content.as_bytes()))
                .map_err(|e| {
                    AgentError::new(
                        codes::AGENTS_SANDBOX,
                        format!("cannot write the agent's `{}`: {e}", path.display()),
                    )
                })?;
        }
        let mut read_paths = vec![self.cfg.cli.dir.clone()];
        let mut write_paths = vec![self.cfg.home.clone()];
        if self.cfg.permissions.writes() {
            write_paths.push(self.cfg.workdir.clone());
        } else {
            read_paths.push(self.cfg.workdir.clone());
        }
        let protected = self.cfg.protected.clone();
        let req = ExecRequest {
            argv: launch.argv,
            cwd: self.cfg.workdir.clone(),
            env: launch.env,
            stdin: None,
            timeout: self.cfg.limits.turn_timeout,
            max_output_bytes: MAX_STDERR,
            limits: ResourceLimits {
                memory: self.cfg.limits.memory,
                default_memory: Some(self.cfg.limits.default_memory),
                processes: Some(self.cfg.limits.processes),
                ..ResourceLimits::default()
            },
            read_paths,
            write_paths,
            protected,
            network: Some(match &self.cfg.network {
                None => RunNetwork::Corral(link),
                Some(allow) => RunNetwork::CorralAndEgress(
                    link,
                    Egress {
                        allow: allow.clone(),
                        log: egress_log,
                    },
                ),
            }),
            exec_only: self.exec_only(),
            hold: self.new_hold()?,
            apply_only_if_ok: false,
            host_writes: self.host_writes(),
        };
        Ok((req, prompt.as_bytes().to_vec()))
    }

    /// With `permissions: full`: the turn may change the host beyond its workdir (through the
    /// same copy-on-write layer and checks), corral's trees kept out; `None` otherwise.
    fn host_writes(&self) -> Option<HostWrites> {
        (self.cfg.permissions == Permissions::Full).then(|| HostWrites {
            keep_out: self.cfg.keep_out.clone(),
        })
    }

    /// The session's state, locked, when no turn runs (`agents.session_busy` otherwise, saying
    /// when to `then` do what was asked).
    fn idle_state(&self, then: &str) -> Result<std::sync::MutexGuard<'_, State>, AgentError> {
        let s = self.state.lock().map_err(|_| {
            AgentError::new(codes::AGENTS_SANDBOX, "the session's state is unusable")
        })?;
        if s.busy {
            return Err(AgentError::new(
                codes::AGENTS_TURN_BUSY,
                format!(
                    "session `{}` is running a turn; {then} when its `done` event came",
                    self.cfg.id
                ),
            ));
        }
        Ok(s)
    }

    /// A fresh, empty hold for a turn whose changes outside the scope's
    /// `confirm_writes_outside` directories wait for a person (`None`: every change applies).
    fn new_hold(&self) -> Result<Option<Hold>, AgentError> {
        let Some(c) = self
            .cfg
            .confirm_writes
            .as_ref()
            .filter(|_| self.cfg.permissions.writes())
        else {
            return Ok(None);
        };
        let fail = |e: std::io::Error| {
            AgentError::new(
                codes::AGENTS_SANDBOX,
                format!(
                    "cannot make the turn's hold in `{}`: {e}",
                    c.holds.display()
                ),
            )
        };
        std::fs::create_dir_all(&c.holds).map_err(fail)?;
        let into = c.holds.join(uuid::Uuid::new_v4().simple().to_string());
        std::fs::create_dir(&into).map_err(fail)?;
        Ok(Some(Hold {
            within: self.cfg.workdir.clone(),
            free: c.free.clone(),
            into,
        }))
    }

    /// Applies the held changes in `dir` (the hold `hold`, a person approved it: a tree of
    /// the turn's hold's shape, `content/` and `delete/`, outside every path of the sandbox,
    /// such as [`crate::hold::HoldBuilder`] makes): in a sandbox whose only writable path is
    /// the workdir, through the same copy-on-write checks as a turn. `dir` is left as it was:
    /// whether the hold is kept is the caller's ([`HoldApplied::whole`]). Refused while a turn
    /// of this process runs (`agents.session_busy`).
    pub async fn apply_hold(&self, hold: &str, dir: &Path) -> Result<HoldApplied, AgentError> {
        let dir = dir.to_owned();
        self.idle_state("apply its held changes")?.busy = true;
        let _busy = Busy(&self.state);
        let req = ExecRequest {
            argv: ["/bin/sh", "-c", APPLY_HOLD, "sh"]
                .into_iter()
                .map(str::to_owned)
                .chain([&self.cfg.workdir, &dir].map(|p| p.to_string_lossy().into_owned()))
                .collect(),
            cwd: PathBuf::from("/"),
            env: vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
            stdin: None,
            timeout: APPLY_TIMEOUT,
            max_output_bytes: MAX_STDERR,
            limits: ResourceLimits {
                default_memory: Some(self.cfg.limits.default_memory),
                processes: Some(64),
                ..ResourceLimits::default()
            },
            read_paths: vec![dir.clone()],
            write_paths: vec![self.cfg.workdir.clone()],
            protected: self.cfg.protected.clone(),
            network: Some(RunNetwork::None),
            exec_only: None,
            hold: None,
            // All or nothing: a failing apply leaves the workdir as it was.
            apply_only_if_ok: true,
            host_writes: None,
        };
        let out = self.backend.run(req).await.map_err(|e| {
            AgentError::new(
                codes::AGENTS_SANDBOX,
                format!("the held changes could not be applied: {e} ({})", e.code()),
            )
        })?;
        if out.exit_code != Some(0) || out.changes.as_ref().is_none_or(|c| c.discarded) {
            // Nothing reached the workdir; the hold is kept for a person to look at.
            return Err(AgentError::new(
                codes::AGENTS_SANDBOX,
                format!(
                    "applying the held changes ended with {} (stderr ends: {:?}); nothing was applied, and the hold is kept",
                    ending(&out),
                    stderr_tail(&out)
                ),
            ));
        }
        let changes = out.changes.unwrap_or_default();
        Ok(HoldApplied {
            hold: hold.to_owned(),
            applied: changes.applied,
            bytes: changes.bytes,
            whole: changes.refused.is_empty() && changes.refused_unlisted == 0,
            refused: changes.refused,
        })
    }

    /// With the scope's `commands`: the CLI's install (and its program), the shells and each
    /// listed program found; a name found nowhere on the `PATH` adds nothing (nothing by that
    /// name could run anyway). `None`: no `commands`, any program the sandbox shows.
    fn exec_only(&self) -> Option<Vec<PathBuf>> {
        if self.cfg.commands.is_empty() {
            return None;
        }
        let mut exec = vec![self.cfg.cli.dir.clone()];
        exec.extend(self.cfg.cli.program.first().map(PathBuf::from));
        exec.extend(AGENT_SHELLS.map(PathBuf::from));
        exec.extend(
            self.cfg
                .commands
                .iter()
                .filter_map(|c| corral_exec::linux::find_program(c)),
        );
        Some(exec)
    }

    /// Runs the turn's sandbox, streaming its events; the CLI's session id and the report.
    async fn drive(
        &self,
        req: ExecRequest,
        stdin: Vec<u8>,
        turn: u32,
        mut connections: Connections,
        events: &mpsc::Sender<SessionEvent>,
    ) -> Result<TurnReport, AgentError> {
        let sandbox = sandbox_error;
        let hold = req.hold.as_ref().map(|h| h.into.clone());
        let (atx, arx) = tokio::sync::oneshot::channel();
        let run = self.backend.run_attached(req, atx);
        tokio::pin!(run);
        // The run future drives the sandbox: polled while waiting for its pipes.
        let attached = tokio::select! {
            a = arx => a.ok(),
            r = &mut run => {
                return Err(match r {
                    Err(e) => sandbox(e),
                    Ok(out) => AgentError::new(
                        codes::AGENTS_SANDBOX,
                        format!("the agent's sandbox ended before it started ({})", ending(&out)),
                    ),
                });
            }
        };
        let Some(attached) = attached else {
            return Err(match run.await {
                Err(e) => sandbox(e),
                Ok(out) => AgentError::new(
                    codes::AGENTS_SANDBOX,
                    format!(
                        "the agent's sandbox ended before it started ({})",
                        ending(&out)
                    ),
                ),
            });
        };
        let initial = attached.attestation.clone();
        let mut stdin_pipe = attached.stdin;
        // Written aside: a CLI that does not read its stdin must not stall its output's reading.
        tokio::spawn(async move {
            let _ = stdin_pipe.write_all(&stdin).await;
            let _ = stdin_pipe.shutdown().await;
        });
        let mut stdout = attached.stdout;
        let mut parser = self.cfg.cli.adapter.parser(turn);
        let mut split = LineSplitter::default();
        let mut sent = 0usize;
        let mut over = false;
        let mut buf = vec![0u8; 64 * 1024];
        let mut out: Option<Result<ExecOutput, corral_exec::ExecError>> = None;
        let mut eof = false;
        // Once the sandbox ended: until when its last events may wait for the consumer.
        let mut deadline: Option<tokio::time::Instant> = None;
        let mut dropped = 0u64;
        let mut net_open = true;
        while !(over || eof && out.is_some()) {
            let (evs, net) = tokio::select! {
                r = stdout.read(&mut buf), if !eof => match r {
                    Ok(0) | Err(_) => { eof = true; (parse(split.finish().into_iter().collect(), &mut parser), None) }
                    Ok(n) => (parse(split.feed(&buf[..n]), &mut parser), None),
                },
                r = connections.records.recv(), if net_open => {
                    net_open = r.is_some();
                    (Vec::new(), r.map(|r| SessionEvent::network(&r)))
                },
                o = &mut run, if out.is_none() => { out = Some(o); (Vec::new(), None) }
                () = tokio::time::sleep(DRAIN), if out.is_some() => { eof = true; (Vec::new(), None) }
            };
            // A connection is not counted against the event limit (its channel bounds them):
            // output that runs over it never hides one.
            let mut evs = limit(evs, &mut sent, &mut over);
            evs.extend(net);
            for ev in evs {
                // A consumer that stops reading holds the agent back (its output pipe fills),
                // never its limits: the sandbox's future keeps being polled while waiting.
                let send = events.send(ev);
                tokio::pin!(send);
                loop {
                    let until = deadline.unwrap_or_else(|| {
                        tokio::time::Instant::now() + self.cfg.limits.turn_timeout + DRAIN
                    });
                    tokio::select! {
                        _ = &mut send => break,
                        o = &mut run, if out.is_none() => {
                            out = Some(o);
                            deadline = Some(tokio::time::Instant::now() + DRAIN);
                        }
                        () = tokio::time::sleep_until(until), if deadline.is_some() => {
                            dropped += 1;
                            break;
                        }
                    }
                }
            }
        }
        // Over the event limit the sandbox is dropped: its process killed, the sandbox gone.
        let out = match out {
            Some(r) => Some(r.map_err(sandbox)?),
            None => None,
        };
        let deadline = deadline.unwrap_or_else(|| tokio::time::Instant::now() + DRAIN);
        let mut outbox = Outbox {
            events,
            deadline,
            dropped,
        };
        // Outside the event limit: output that ran over it never hides a connection.
        outbox.send_all(connections.last()).await;
        let held = held_event(out.as_ref(), hold, &mut outbox).await;
        refused_event(out.as_ref(), &mut outbox).await;
        let mut report = self.finish(turn, out, initial, &parser, over, outbox).await;
        report.held = held;
        report.thread = parser.thread().map(str::to_owned);
        Ok(report)
    }

    /// The report of a turn, and its last events (an error if it ended badly, then `done`).
    async fn finish(
        &self,
        turn: u32,
        out: Option<ExecOutput>,
        initial: Attestation,
        parser: &crate::adapter::OutputParser,
        over: bool,
        mut outbox: Outbox<'_>,
    ) -> TurnReport {
        let (attestation, exit_code, signal, timed_out) = match &out {
            Some(o) => (o.attestation.clone(), o.exit_code, o.signal, o.timed_out),
            None => (initial, None, None, false),
        };
        let ok = !over && parser.ok() == Some(true) && exit_code == Some(0) && !timed_out;
        if let Some(o) = &out {
            let err = if timed_out {
                Some(SessionEvent::error(
                    codes::AGENTS_TIMEOUT,
                    format!(
                        "the agent was killed at its time limit of {} s",
                        self.cfg.limits.turn_timeout.as_secs_f64()
                    ),
                ))
            } else if exit_code != Some(0) {
                Some(SessionEvent::error(
                    codes::AGENTS_TURN_FAILED,
                    format!(
                        "the agent ended with {}; stderr ends: {:?}",
                        ending(o),
                        stderr_tail(o)
                    ),
                ))
            } else {
                None
            };
            if let Some(e) = err {
                outbox.send(e).await;
            }
        }
        let usage = parser.usage();
        outbox.send(SessionEvent::Done { turn, ok, usage }).await;
        TurnReport {
            turn,
            ok,
            usage,
            attestation,
            exit_code,
            signal,
            timed_out,
            killed_for_output: over,
            events_dropped: outbox.dropped,
            thread: None,
            held: None,
        }
    }
}

/// The `changes_refused` event of a turn some of whose changes the sandbox's apply refused,
/// sent (nothing when every change reached the host).
async fn refused_event(out: Option<&ExecOutput>, outbox: &mut Outbox<'_>) {
    let Some(c) = out.and_then(|o| o.changes.as_ref()) else {
        return;
    };
    if c.refused.is_empty() && c.refused_unlisted == 0 {
        return;
    }
    let changes = c
        .refused
        .iter()
        .map(|r| corral_exec::RefusedChange {
            path: crate::events::clean(&r.path),
            code: r.code.clone(),
            reason: crate::events::clean(&r.reason),
        })
        .collect();
    outbox
        .send(SessionEvent::ChangesRefused {
            changes,
            more: c.refused_unlisted,
        })
        .await;
}

/// The `writes_held` event of a turn whose hold (its directory `hold`) holds changes, sent;
/// the hold's id, or `None` when it holds nothing.
async fn held_event(
    out: Option<&ExecOutput>,
    hold: Option<PathBuf>,
    outbox: &mut Outbox<'_>,
) -> Option<String> {
    let c = out.and_then(|o| o.changes.as_ref())?;
    let dir = hold?;
    if c.held.is_empty() && c.held_unlisted == 0 {
        return None;
    }
    let id = dir.file_name()?.to_string_lossy().into_owned();
    outbox
        .send(SessionEvent::WritesHeld {
            hold: id.clone(),
            changes: c.held.clone(),
            more: c.held_unlisted,
        })
        .await;
    Some(id)
}

/// The egress proxy's records of one turn's connections, and how many did not fit.
struct Connections {
    records: mpsc::Receiver<EgressRecord>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Connections {
    /// The log a turn's egress proxy writes to, and the records it gathers: at most
    /// [`MAX_PENDING_CONNECTIONS`] waiting; past that a record goes to the server's log and is
    /// counted.
    fn channel() -> (EgressLog, Self) {
        let (tx, records) = mpsc::channel(MAX_PENDING_CONNECTIONS);
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = std::sync::Arc::clone(&dropped);
        let log = EgressLog::new(move |r: EgressRecord| {
            if let Err(e) = tx.try_send(r) {
                let (mpsc::error::TrySendError::Full(r) | mpsc::error::TrySendError::Closed(r)) = e;
                tracing::warn!(
                    host = %crate::events::clean(&r.host),
                    port = r.port,
                    allowed = r.allowed,
                    "an agent's connection came faster than its events; not in the session's events"
                );
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        (log, Self { records, dropped })
    }

    /// The events of the connections that ended with the sandbox (the proxy recorded them as
    /// it finished), and an error if some records were dropped.
    fn last(&mut self) -> Vec<SessionEvent> {
        let mut last = Vec::new();
        while let Ok(r) = self.records.try_recv() {
            last.push(SessionEvent::network(&r));
        }
        let lost = self.dropped.load(std::sync::atomic::Ordering::Relaxed);
        if lost > 0 {
            last.push(SessionEvent::error(
                codes::AGENTS_OUTPUT,
                format!("{lost} of the agent's connections came faster than corral could report them; their events were dropped"),
            ));
        }
        last
    }
}

/// Where a turn's last events go once its sandbox ended: each waits for the consumer until
/// the deadline, then is dropped (and counted).
struct Outbox<'a> {
    events: &'a mpsc::Sender<SessionEvent>,
    deadline: tokio::time::Instant,
    dropped: u64,
}

impl Outbox<'_> {
    async fn send(&mut self, ev: SessionEvent) {
        match tokio::time::timeout_at(self.deadline, self.events.send(ev)).await {
            Ok(_) => {}
            Err(_) => self.dropped += 1,
        }
    }

    async fn send_all(&mut self, evs: Vec<SessionEvent>) {
        for ev in evs {
            self.send(ev).await;
        }
    }
}

/// A turn whose sandbox did not start.
fn sandbox_error(e: corral_exec::ExecError) -> AgentError {
    AgentError::new(
        codes::AGENTS_SANDBOX,
        format!("the agent's sandbox did not start: {e} ({})", e.code()),
    )
}

/// The events of `lines`, as the adapter's parser reads them.
fn parse(lines: Vec<Line>, parser: &mut crate::adapter::OutputParser) -> Vec<SessionEvent> {
    let mut evs = Vec::new();
    for line in lines {
        match line {
            Line::Text(b) => evs.extend(parser.line(&b)),
            Line::TooLong => evs.push(SessionEvent::error(
                codes::AGENTS_OUTPUT,
                format!(
                    "a line of the agent's output is over {} bytes; dropped",
                    crate::events::MAX_LINE
                ),
            )),
        }
    }
    evs
}

/// `evs` counted against [`MAX_EVENTS`]: past it, `over` is set and an error is the last.
fn limit(evs: Vec<SessionEvent>, sent: &mut usize, over: &mut bool) -> Vec<SessionEvent> {
    let mut out = Vec::new();
    for ev in evs {
        if *over {
            break;
        }
        if *sent + 1 >= MAX_EVENTS {
            *over = true;
            out.push(SessionEvent::error(
                codes::AGENTS_OUTPUT,
                format!(
                    "the agent printed over {MAX_EVENTS} events in one turn; corral ended the turn"
                ),
            ));
            break;
        }
        *sent += 1;
        out.push(ev);
    }
    out
}

/// How a run ended, as text.
fn ending(out: &ExecOutput) -> String {
    match (out.exit_code, out.signal) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(9)) => "signal 9 (killed: a memory or process limit, or corral)".to_owned(),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "no exit status".to_owned(),
    }
}

/// The end of a run's stderr, cleaned.
fn stderr_tail(out: &ExecOutput) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    let n = text.chars().count();
    let tail: String = text.chars().skip(n.saturating_sub(STDERR_QUOTED)).collect();
    crate::events::clean(tail.trim())
}
