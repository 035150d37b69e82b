//! Pieces the `process` and `linux` backends share: request validation, rlimit plans, stdin
//! feeding and capped output capture.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::{Pid, Resource, Rlimit, Signal};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::Child;

use crate::{ExecError, ExecRequest, ResourceLimits};

/// Read buffer size for stdout and stderr.
const READ_CHUNK: usize = 64 * 1024;

/// Most entries of [`ExecRequest::exec_only`].
const MAX_EXEC_ONLY: usize = 256;

/// Rejects requests `exec` could not represent faithfully.
pub(crate) fn validate(req: &ExecRequest) -> Result<(), ExecError> {
    let Some(program) = req.argv.first() else {
        return Err(ExecError::Invalid("argv is empty".into()));
    };
    if program.is_empty() {
        return Err(ExecError::Invalid("argv[0] is empty".into()));
    }
    if let Some(i) = req.argv.iter().position(|a| a.contains('\0')) {
        return Err(ExecError::Invalid(format!("argv[{i}] contains a NUL byte")));
    }
    if let Some(exec) = &req.exec_only {
        if exec.len() > MAX_EXEC_ONLY {
            return Err(ExecError::Invalid(format!(
                "{} programs may be executed; at most {MAX_EXEC_ONLY}",
                exec.len()
            )));
        }
        if let Some(p) = exec.iter().find(|p| !p.is_absolute()) {
            return Err(ExecError::Invalid(format!(
                "program `{}` allowed to execute is not an absolute path",
                p.display()
            )));
        }
    }
    for (key, value) in &req.env {
        if key.is_empty() {
            return Err(ExecError::Invalid(
                "an environment variable has an empty name".into(),
            ));
        }
        if key.contains('\0') || value.contains('\0') {
            return Err(ExecError::Invalid(format!(
                "environment variable `{}` contains a NUL byte",
                key.escape_debug()
            )));
        }
        if key.contains('=') {
            return Err(ExecError::Invalid(format!(
                "environment variable name `{key}` contains `=`"
            )));
        }
    }
    if req.cwd.as_os_str().as_bytes().contains(&0) {
        return Err(ExecError::Invalid(
            "the working directory contains a NUL byte".into(),
        ));
    }
    Ok(())
}

/// Which rlimit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RlimitKind {
    Cpu,
    As,
    Nproc,
    Fsize,
    Nofile,
}

impl RlimitKind {
    fn resource(self) -> Resource {
        match self {
            RlimitKind::Cpu => Resource::Cpu,
            RlimitKind::As => Resource::As,
            RlimitKind::Nproc => Resource::Nproc,
            RlimitKind::Fsize => Resource::Fsize,
            RlimitKind::Nofile => Resource::Nofile,
        }
    }

    /// The attestation's name.
    pub(crate) fn primitive(self) -> &'static str {
        match self {
            RlimitKind::Cpu => "rlimit:cpu",
            RlimitKind::As => "rlimit:as",
            RlimitKind::Nproc => "rlimit:nproc",
            RlimitKind::Fsize => "rlimit:fsize",
            RlimitKind::Nofile => "rlimit:nofile",
        }
    }
}

/// One rlimit to set: plain `Copy` data, so applying it neither allocates nor frees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RlimitSpec {
    pub(crate) kind: RlimitKind,
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

impl RlimitSpec {
    /// `setrlimit` (a raw system call: async-signal-safe, no allocation).
    pub(crate) fn apply(&self) -> io::Result<()> {
        let rlimit = Rlimit {
            current: Some(self.soft),
            maximum: Some(self.hard),
        };
        rustix::process::setrlimit(self.kind.resource(), rlimit)?;
        Ok(())
    }
}

/// The rlimits for `limits`, clamped to the hard limits corral itself runs under (computed in
/// the parent, where failing is cheap and reportable).
pub(crate) fn rlimit_plan(limits: &ResourceLimits) -> [Option<RlimitSpec>; 5] {
    let soft_hard = |kind: RlimitKind, soft: u64, hard: u64| {
        // Asking for more than corral's own hard limit would fail with EPERM; the child
        // inherits that hard limit anyway, so the tighter one is what applies.
        let ceiling = rustix::process::getrlimit(kind.resource())
            .maximum
            .unwrap_or(u64::MAX);
        Some(RlimitSpec {
            kind,
            soft: soft.min(ceiling),
            hard: hard.min(ceiling),
        })
    };
    let same = |kind: RlimitKind, value: u64| soft_hard(kind, value, value);
    [
        // One second between SIGXCPU (soft) and SIGKILL (hard): a chance to exit cleanly.
        limits
            .cpu_seconds
            .and_then(|s| soft_hard(RlimitKind::Cpu, s, s.saturating_add(1))),
        limits
            .memory
            .or(limits.default_memory)
            .and_then(|m| same(RlimitKind::As, m)),
        limits
            .processes
            .and_then(|p| same(RlimitKind::Nproc, u64::from(p))),
        limits.file_size.and_then(|f| same(RlimitKind::Fsize, f)),
        limits.open_files.and_then(|n| same(RlimitKind::Nofile, n)),
    ]
}

/// At most `cap` bytes of one output stream, and whether more came.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) bytes: Vec<u8>,
    pub(crate) truncated: bool,
}

/// Reads `pipe` to its end, keeping the first `cap` bytes in `out` and dropping the rest.
pub(crate) async fn capture(pipe: Option<impl AsyncRead + Unpin>, cap: u64, out: &mut Captured) {
    let Some(mut pipe) = pipe else { return };
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(error = %e, "reading the child's output failed");
                return;
            }
        };
        let room = cap.saturating_sub(out.bytes.len());
        let keep = n.min(room);
        if let Some(kept) = buf.get(..keep) {
            out.bytes.extend_from_slice(kept);
        }
        if keep < n {
            out.truncated = true;
        }
    }
}

/// Writes `prefix` then `data` to the child's stdin, then closes it. A child that exits without
/// reading it all is not an error (`EPIPE`).
pub(crate) async fn feed(
    stdin: Option<impl AsyncWrite + Unpin>,
    prefix: Option<Vec<u8>>,
    data: Option<Vec<u8>>,
) {
    let Some(mut stdin) = stdin else {
        return;
    };
    for chunk in [prefix, data].into_iter().flatten() {
        if let Err(e) = stdin.write_all(&chunk).await {
            tracing::debug!(error = %e, "writing the child's stdin stopped early");
            return;
        }
    }
    drop(stdin);
}

/// How the child's exit was noticed.
pub(crate) enum Exit {
    /// Exited and already reaped (fallback path): its pid may be reused now.
    Reaped(ExitStatus),
    /// Exited but not reaped (a zombie): its pid, hence its process group id, is still pinned.
    Zombie,
}

/// How often the child's state is re-checked even without a `SIGCHLD` (belt and braces).
const EXIT_POLL: Duration = Duration::from_millis(500);

/// Waits for the child to exit without reaping it, so that killing its process group afterwards
/// cannot hit a recycled id: `waitid(WEXITED | WNOWAIT | WNOHANG)` on every `SIGCHLD`. Falls
/// back to reaping it (`Child::wait`) when `SIGCHLD` cannot be watched.
pub(crate) async fn exited(child: &mut Child, pid: Pid) -> io::Result<Exit> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    use tokio::signal::unix::{SignalKind, signal};

    // Registered before the first check, so an exit in between is not missed.
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "cannot watch SIGCHLD; reaping before the group kill");
            return child.wait().await.map(Exit::Reaped);
        }
    };
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    loop {
        match waitid(WaitId::Pid(pid), options) {
            Ok(Some(_)) => return Ok(Exit::Zombie),
            Ok(None) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        tokio::select! {
            _ = sigchld.recv() => {}
            () = tokio::time::sleep(EXIT_POLL) => {}
        }
    }
}

/// `SIGKILL` to the whole process group led by the child. An empty group (`ESRCH`) is fine.
pub(crate) fn kill_group(pgid: Pid) {
    match rustix::process::kill_process_group(pgid, Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => {
            let pgid = pgid.as_raw_nonzero().get();
            tracing::warn!(pgid, error = %e, "killing the process group failed");
        }
    }
}

/// A reason that says what went wrong, not only the errno.
pub(crate) fn describe_spawn_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => format!("no such program (or its interpreter is missing): {e}"),
        io::ErrorKind::PermissionDenied => {
            format!(
                "permission denied (not executable, or a parent directory is not searchable): {e}"
            )
        }
        _ => e.to_string(),
    }
}

/// Why `cwd` cannot be a run's working directory, from what `metadata` said of it (checked on
/// the host so a bad directory is not reported as a missing program: both are ENOENT); `None`
/// when it is a directory, and absolute when `absolute` is asked.
pub(crate) fn cwd_problem(
    cwd: &std::path::Path,
    metadata: io::Result<std::fs::Metadata>,
    absolute: bool,
) -> Option<String> {
    let what = if absolute {
        "an absolute path to a directory"
    } else {
        "a directory"
    };
    match metadata {
        Ok(m) if m.is_dir() && (cwd.is_absolute() || !absolute) => None,
        Ok(_) => Some(format!(
            "the working directory `{}` is not {what}",
            cwd.display()
        )),
        Err(e) => Some(format!(
            "the working directory `{}` is not usable: {e}",
            cwd.display()
        )),
    }
}
