//! The install manager: each adapter's CLI comes from its npm package, at the version pinned in
//! [`PINS`], installed with `npm install --prefix` (never globally) into
//! `<state_dir>/agents/<adapter>/<version>`: into a temporary directory first, renamed into
//! place once complete, with `corral-install.json` recording what it is. One install at a time
//! per adapter. npm runs with `--ignore-scripts`: no package script runs on the host (the
//! packages' own postinstall steps only link a launcher; corral runs each package's native
//! binary directly, see [`program`]).
//!
//! The modes (`install: {mode: ...}`): `lazy` installs on first use, in the background (the
//! caller gets `agents.installing` with a retry time instead of waiting); `build` uses only what
//! `corral agents prepare` installed ahead (missing: `agents.not_installed`); `offline` never
//! downloads, using what is there; `off` refuses every agent (`agents.install_off`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::adapter::Adapter;
use crate::{AgentError, codes};

/// One adapter's pinned package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    /// The adapter.
    pub adapter: Adapter,
    /// Its npm package.
    pub package: &'static str,
    /// The version installed.
    pub version: &'static str,
}

/// The packages and versions corral installs: the one table to change on an upgrade.
pub const PINS: [Pin; 2] = [
    Pin {
        adapter: Adapter::Codex,
        package: "@openai/codex",
        version: "0.171.0",
    },
    Pin {
        adapter: Adapter::ClaudeCode,
        package: "@anthropic-ai/claude-code",
        version: "2.1.328",
    },
];

/// How long a caller is told to wait for a lazy install before retrying.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);
/// How long one `npm install` may take.
pub const INSTALL_TIMEOUT: Duration = Duration::from_secs(900);
/// The record of an install, in its directory.
pub const RECORD: &str = "corral-install.json";
/// The most bytes of npm's output quoted in a failure.
const NPM_QUOTED: usize = 2000;

/// The pin of `adapter`.
pub fn pin(adapter: Adapter) -> Pin {
    match adapter {
        Adapter::Codex => PINS[0],
        Adapter::ClaudeCode => PINS[1],
    }
}

/// The CLI's command in an install at `dir`: each package's native binary for this machine
/// (npm installs the one optional dependency that matches its os, cpu and libc), so no `node`
/// is needed in the sandbox. The first that exists; the glibc one when none does yet.
pub fn program(adapter: Adapter, dir: &Path) -> Vec<String> {
    let modules = dir.join("node_modules");
    let arm = cfg!(target_arch = "aarch64");
    let candidates: Vec<PathBuf> = match adapter {
        Adapter::Codex => {
            let (pkg, triple) = if arm {
                ("codex-linux-arm64", "aarch64-unknown-linux-musl")
            } else {
                ("codex-linux-x64", "x86_64-unknown-linux-musl")
            };
            vec![
                modules
                    .join("@openai")
                    .join(pkg)
                    .join("vendor")
                    .join(triple)
                    .join("bin")
                    .join("codex"),
            ]
        }
        Adapter::ClaudeCode => {
            let cpu = if arm { "arm64" } else { "x64" };
            ["", "-musl"]
                .iter()
                .map(|libc| {
                    modules
                        .join("@anthropic-ai")
                        .join(format!("claude-code-linux-{cpu}{libc}"))
                        .join("claude")
                })
                .collect()
        }
    };
    let found = candidates
        .iter()
        .find(|p| p.is_file())
        .or(candidates.first());
    found
        .map(|p| vec![p.to_string_lossy().into_owned()])
        .unwrap_or_default()
}

/// `install: {mode: ...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallMode {
    /// Install on first use, in the background.
    Lazy,
    /// Only what `corral agents prepare` installed.
    Build,
    /// Never download.
    Offline,
    /// No agent runs.
    Off,
}

impl InstallMode {
    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "lazy" => Some(Self::Lazy),
            "build" => Some(Self::Build),
            "offline" => Some(Self::Offline),
            "off" => Some(Self::Off),
            _ => None,
        }
    }
}

/// An installed CLI, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The adapter.
    pub adapter: Adapter,
    /// Its version.
    pub version: String,
    /// The install's directory: bound read-only in the sandbox.
    pub dir: PathBuf,
    /// The command that runs it.
    pub program: Vec<String>,
}

impl Installed {
    /// A CLI at `dir` run by `program` (an install corral did not make: a test's fake CLI, a
    /// CLI an image ships).
    pub fn at(adapter: Adapter, version: &str, dir: PathBuf, program: Vec<String>) -> Self {
        Self {
            adapter,
            version: version.to_owned(),
            dir,
            program,
        }
    }
}

/// What `corral doctor` shows of one adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallStatus {
    /// Installed: its version and where.
    Installed {
        /// The version.
        version: String,
        /// The install's directory.
        dir: PathBuf,
    },
    /// A lazy install is running.
    Installing,
    /// Not installed (or the mode is `off`), and the one command or setting that fixes it.
    Missing {
        /// The fix.
        fix: String,
    },
}

/// Installs and finds the adapters' CLIs under one state directory.
#[derive(Debug)]
pub struct Installer {
    root: PathBuf,
    mode: InstallMode,
    npm: PathBuf,
    busy: Mutex<BTreeSet<Adapter>>,
    failed: Mutex<BTreeMap<Adapter, String>>,
}

impl Installer {
    /// The installs under `<state_dir>/agents`, in `mode`, with the `npm` on `/usr/bin`.
    pub fn new(state_dir: &Path, mode: InstallMode) -> Self {
        Self {
            root: state_dir.join("agents"),
            mode,
            npm: PathBuf::from("/usr/bin/npm"),
            busy: Mutex::new(BTreeSet::new()),
            failed: Mutex::new(BTreeMap::new()),
        }
    }

    /// The same, installing with the `npm` at `npm`.
    pub fn with_npm(mut self, npm: PathBuf) -> Self {
        self.npm = npm;
        self
    }

    /// The mode.
    pub fn mode(&self) -> InstallMode {
        self.mode
    }

    /// Where `adapter`'s pinned version is (or would be) installed.
    pub fn dir(&self, adapter: Adapter) -> PathBuf {
        self.root.join(adapter.name()).join(pin(adapter).version)
    }

    /// The pinned version of `adapter`, when it is installed (its record says so and its
    /// program is there).
    pub fn installed(&self, adapter: Adapter) -> Option<Installed> {
        let dir = self.dir(adapter);
        let record = std::fs::read(dir.join(RECORD)).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&record).ok()?;
        let p = pin(adapter);
        if v["package"] != p.package || v["version"] != p.version {
            return None;
        }
        let program = program(adapter, &dir);
        let exe = program.last()?;
        Path::new(exe).is_file().then(|| Installed {
            adapter,
            version: p.version.to_owned(),
            dir,
            program,
        })
    }

    fn is_busy(&self, adapter: Adapter) -> bool {
        self.busy.lock().is_ok_and(|b| b.contains(&adapter))
    }

    /// What `corral doctor` shows.
    pub fn status(&self, adapter: Adapter) -> InstallStatus {
        if let Some(i) = self.installed(adapter) {
            return InstallStatus::Installed {
                version: i.version,
                dir: i.dir,
            };
        }
        if self.is_busy(adapter) {
            return InstallStatus::Installing;
        }
        InstallStatus::Missing {
            fix: self.fix(adapter),
        }
    }

    fn fix(&self, adapter: Adapter) -> String {
        match self.mode {
            InstallMode::Off => "set `install: {mode: lazy}` (or `build` and run `corral agents prepare`) in the config".to_owned(),
            _ => format!("corral agents prepare {}", adapter.name()),
        }
    }

    /// The CLI of `adapter`, ready to run, per the mode: `lazy` starts an install in the
    /// background and answers `agents.installing` until it is done.
    pub fn ensure(self: &Arc<Self>, adapter: Adapter) -> Result<Installed, AgentError> {
        let name = adapter.name();
        if self.mode == InstallMode::Off {
            return Err(AgentError::new(
                codes::AGENTS_INSTALL_OFF,
                format!(
                    "agents are off here (`install: {{mode: off}}`), so `{name}` does not run; to fix: {}",
                    self.fix(adapter)
                ),
            ));
        }
        if let Some(i) = self.installed(adapter) {
            return Ok(i);
        }
        match self.mode {
            InstallMode::Lazy => {}
            InstallMode::Build | InstallMode::Offline => {
                return Err(AgentError::new(
                    codes::AGENTS_NOT_INSTALLED,
                    format!(
                        "`{name}` {} is not installed in {} and `install: {{mode: {}}}` does not download it; to fix: run `{}` (where the network reaches npm)",
                        pin(adapter).version,
                        self.dir(adapter).display(),
                        if self.mode == InstallMode::Build {
                            "build"
                        } else {
                            "offline"
                        },
                        self.fix(adapter)
                    ),
                ));
            }
            InstallMode::Off => {}
        }
        if let Some(why) = self.failed.lock().ok().and_then(|mut f| f.remove(&adapter)) {
            return Err(AgentError::new(
                codes::AGENTS_INSTALL_FAILED,
                format!("installing `{name}` failed: {why}; the next request tries again"),
            ));
        }
        if self.claim(adapter) {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                let r = me.install(adapter).await;
                if let Err(e) = r
                    && let Ok(mut f) = me.failed.lock()
                {
                    f.insert(adapter, e.message);
                }
                me.release(adapter);
            });
        }
        Err(AgentError::installing(adapter))
    }

    /// Installs `adapter` now (`corral agents prepare`), waiting for it; nothing to do when it
    /// is installed. Refused in modes `offline` and `off`, and while another install runs.
    pub async fn prepare(&self, adapter: Adapter) -> Result<Installed, AgentError> {
        if let Some(i) = self.installed(adapter) {
            return Ok(i);
        }
        if matches!(self.mode, InstallMode::Offline | InstallMode::Off) {
            return Err(AgentError::new(
                codes::AGENTS_NOT_INSTALLED,
                format!(
                    "`install: {{mode: offline|off}}` never downloads; prepare `{}` with `install: {{mode: build}}` and copy {} here",
                    adapter.name(),
                    self.dir(adapter).display()
                ),
            ));
        }
        if !self.claim(adapter) {
            return Err(AgentError::installing(adapter));
        }
        let r = self.install(adapter).await;
        self.release(adapter);
        r
    }

    fn claim(&self, adapter: Adapter) -> bool {
        self.busy.lock().is_ok_and(|mut b| b.insert(adapter))
    }

    fn release(&self, adapter: Adapter) {
        if let Ok(mut b) = self.busy.lock() {
            b.remove(&adapter);
        }
    }

    /// One `npm install` into a temporary directory, renamed into place when complete.
    async fn install(&self, adapter: Adapter) -> Result<Installed, AgentError> {
        let p = pin(adapter);
        let fail = |why: String| {
            AgentError::new(
                codes::AGENTS_INSTALL_FAILED,
                format!("installing {}@{}: {why}", p.package, p.version),
            )
        };
        let parent = self.root.join(adapter.name());
        std::fs::create_dir_all(&parent)
            .map_err(|e| fail(format!("cannot create {}: {e}", parent.display())))?;
        let tmp = parent.join(format!(".installing-{}", uuid::Uuid::new_v4().simple()));
        let r = self.npm_into(&tmp, p).await.and_then(|()| {
            let dir = self.dir(adapter);
            let exe = program(adapter, &tmp);
            let found = exe.last().is_some_and(|e| Path::new(e).is_file());
            if !found {
                return Err(format!(
                    "the package has no CLI at {} after installing",
                    exe.last().map(String::as_str).unwrap_or("")
                ));
            }
            let record = serde_json::json!({"package": p.package, "version": p.version});
            std::fs::write(tmp.join(RECORD), record.to_string())
                .map_err(|e| format!("cannot write its record: {e}"))?;
            if dir.exists() {
                // A stale or half-copied directory (no valid record): replaced.
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| format!("cannot replace {}: {e}", dir.display()))?;
            }
            std::fs::rename(&tmp, &dir)
                .map_err(|e| format!("cannot move it to {}: {e}", dir.display()))
        });
        if let Err(why) = r {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(fail(why));
        }
        self.installed(adapter)
            .ok_or_else(|| fail("its record does not read back".to_owned()))
    }

    async fn npm_into(&self, tmp: &Path, p: Pin) -> Result<(), String> {
        std::fs::create_dir_all(tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        let cache = self.root.join(".npm-cache");
        let mut cmd = tokio::process::Command::new(&self.npm);
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", tmp)
            .env("npm_config_cache", &cache)
            .env("npm_config_update_notifier", "false")
            .arg("install")
            .arg("--prefix")
            .arg(tmp)
            .args(["--no-audit", "--no-fund", "--no-save", "--ignore-scripts"])
            .arg(format!("{}@{}", p.package, p.version))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(INSTALL_TIMEOUT, cmd.output())
            .await
            .map_err(|_| format!("npm took over {} s", INSTALL_TIMEOUT.as_secs()))?
            .map_err(|e| format!("cannot run {}: {e}", self.npm.display()))?;
        if out.status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&out.stderr);
        let tail: String = text
            .chars()
            .rev()
            .take(NPM_QUOTED)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        Err(format!(
            "npm exited with {}: {}",
            out.status,
            crate::events::clean(tail.trim())
        ))
    }
}
