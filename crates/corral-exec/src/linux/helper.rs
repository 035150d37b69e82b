//! The sandbox helper: `corral __sandbox-exec <status-fd>`, a fresh single-threaded process that
//! reads a `Prep` and then a `Spec` on stdin, builds the sandbox and `execve`s the target. Three
//! processes:
//!
//! 1. **helper** (host pid namespace): on the `Prep`, drops supplementary groups, unshares the
//!    user, mount, pid, net, ipc and uts namespaces, writes the uid/gid maps (`setgroups` denied
//!    first) and forks the init; then reads the `Spec`, hands it to the init on a private pipe,
//!    enforces the wall-clock timeout (from that moment) by killing the init (which kills the
//!    whole pid namespace), waits for it; then, nothing of the sandbox running any more, applies
//!    the run's copy-on-write layer to the host (`apply.rs`; the init handed it the layer's
//!    descriptors over a private socket), reports the `Changes` and `Done`.
//! 2. **init** (pid 1 of the new pid namespace): builds the request-independent part of the root
//!    view (system directories, `/etc`, `/proc`, `/dev`) and the network while the helper waits
//!    for the `Spec` (a warm sandbox waits here), then binds the request's paths, mounts `/tmp`,
//!    pivots into the view, forks the target, reports its exit status, kills everything left in
//!    the namespace and reaps it.
//! 3. **target**: `setsid`, `PR_SET_PDEATHSIG`, landlock, `no_new_privs`, seccomp, drops every
//!    capability, rlimits, `chdir`, then reports `Ready` and `execve`s the program with exactly
//!    the spec's environment.
//!
//! The status pipe is close-on-exec in all three, so the target program never holds it. Nothing
//! of the request reaches the sandbox before the `Spec`, and the `Spec` reaches only the init.

use std::ffi::OsString;
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};
use rustix::thread::{CapabilitySet, CapabilitySets, UnshareFlags};

use super::apply;
use super::egress_bridge;
use super::idmap::{self, Assistant};
use super::landlock_rules::{self, Rules};
use super::mounts::{self, CowLayer, Ids, StepError};
use super::seccomp;
use super::spec::{FailKind, MAX_SPEC_BYTES, Network, Prep, Spec, Status};

/// argv[1] of the helper.
pub const HELPER_ARG: &str = "__sandbox-exec";

/// Set in every helper's environment (which is otherwise empty; the target gets only its
/// spec's): a process that finds it in its own environment and is about to start a helper is a
/// binary that failed to dispatch [`HELPER_ARG`], and refuses instead of recursing.
pub(crate) const HELPER_MARKER_ENV: &str = "CORRAL_SANDBOX_HELPER";

/// The attestation of `RLIMIT_NPROC` applied to a caller it binds (not host uid 0), inside the
/// run's fresh user namespace, where it counts only the sandbox's processes.
pub(crate) const NPROC_USERNS: &str = "rlimit:nproc-userns";

/// Exit code of a helper whose set-up failed.
const EXIT_SETUP: i32 = 125;
/// Exit code of a target that could not be executed.
const EXIT_EXEC: i32 = 127;
/// Largest status line; one `write` of at most `PIPE_BUF` bytes is atomic.
const MAX_STATUS_LINE: usize = 4000;

/// The status pipe's write end.
struct StatusPipe(OwnedFd);

impl StatusPipe {
    fn send(&self, status: &Status) {
        let mut status = status.clone();
        if let Status::Failed { error, .. } = &mut status
            && error.len() > MAX_STATUS_LINE / 2
        {
            let mut cut = MAX_STATUS_LINE / 2;
            while !error.is_char_boundary(cut) {
                cut -= 1;
            }
            error.truncate(cut);
        }
        let Ok(mut line) = serde_json::to_vec(&status) else {
            return;
        };
        line.push(b'\n');
        let mut buf = line.as_slice();
        while !buf.is_empty() {
            match rustix::io::write(&self.0, buf) {
                Ok(n) => buf = buf.get(n..).unwrap_or_default(),
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }

    fn fail(&self, e: &StepError) {
        self.send(&Status::Failed {
            kind: e.kind,
            step: e.step.clone(),
            error: e.error.clone(),
        });
    }
}

/// The helper's entry point: `corral __sandbox-exec <status-fd>` (argv[1] already matched).
/// Never returns.
pub fn helper_main() -> ! {
    std::process::exit(helper())
}

fn helper() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    let status_fd: Option<RawFd> = args
        .get(2)
        .and_then(|a| a.to_str())
        .and_then(|s| s.parse().ok())
        .filter(|fd| *fd > 2);
    let Some(status_fd) = status_fd.filter(|fd| fd_is_open(*fd)) else {
        eprintln!(
            "corral: `{HELPER_ARG}` is internal: corral's linux backend starts it with a spec"
        );
        return 2;
    };
    #[expect(unsafe_code, reason = "taking ownership of the inherited status pipe")]
    // SAFETY: `status_fd` was checked open just above, and nothing else in this process owns it
    // (it was inherited from the parent, which passes its number in argv and nothing else).
    let status = StatusPipe(unsafe { OwnedFd::from_raw_fd(status_fd) });
    // No inherited descriptor reaches the target (stdin, stdout and stderr excepted).
    close_range_cloexec();

    let stdin = std::io::stdin();
    let prep: Prep = match read_message(&stdin).and_then(|m| parse(&m)) {
        Ok(prep) => prep,
        Err(e) => {
            status.fail(&StepError::invalid("read the prep", e));
            return EXIT_SETUP;
        }
    };
    match sandbox(&prep, &status) {
        Ok(()) => 0,
        Err(e) => {
            status.fail(&e);
            EXIT_SETUP
        }
    }
}

fn fd_is_open(fd: RawFd) -> bool {
    #[expect(unsafe_code, reason = "checking that a descriptor number is open")]
    // SAFETY: `F_GETFD` only reads the descriptor table entry; any number is valid input.
    let r = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    r >= 0
}

fn close_range_cloexec() {
    #[expect(unsafe_code, reason = "close_range has no safe wrapper in rustix")]
    // SAFETY: `CLOSE_RANGE_CLOEXEC` only sets the close-on-exec flag on descriptors >= 3; it
    // closes nothing, so no owned descriptor of this process is invalidated.
    let _ = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
}

/// One message: an 8-byte little-endian length, then that much JSON, read without buffering
/// past it (what follows the spec on stdin is the target's). Returns the JSON.
fn read_message(fd: &impl AsFd) -> Result<Vec<u8>, String> {
    let mut len = [0u8; 8];
    read_exact(fd, &mut len)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_SPEC_BYTES {
        return Err(format!("a {len}-byte message is too large"));
    }
    let mut buf = vec![0u8; usize::try_from(len).map_err(|e| e.to_string())?];
    read_exact(fd, &mut buf)?;
    Ok(buf)
}

fn parse<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, String> {
    serde_json::from_slice(json).map_err(|e| format!("bad message: {e}"))
}

fn write_all(fd: &impl AsFd, mut buf: &[u8]) -> rustix::io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::write(fd, buf) {
            Ok(n) => buf = buf.get(n..).unwrap_or_default(),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn read_exact(fd: &impl AsFd, mut buf: &mut [u8]) -> Result<(), String> {
    while !buf.is_empty() {
        match rustix::io::read(fd, &mut *buf) {
            Ok(0) => return Err("the input ended before the message did".into()),
            Ok(n) => buf = buf.get_mut(n..).unwrap_or_default(),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("reading the message: {e}")),
        }
    }
    Ok(())
}

fn unavailable(step: &str) -> impl Fn(rustix::io::Errno) -> StepError + '_ {
    move |e| StepError::unavailable(step, e)
}

fn write_proc(path: &str, contents: &str) -> Result<(), StepError> {
    std::fs::write(path, contents).map_err(|e| StepError::unavailable(format!("write {path}"), e))
}

/// The connection to the egress proxy's hand-over socket, for a run with egress: reached by its
/// host path, so before the unshare.
fn egress_connection(prep: &Prep) -> Result<Option<std::os::unix::net::UnixStream>, StepError> {
    match (prep.network, &prep.egress_socket) {
        (Network::Egress | Network::CorralLink | Network::CorralLinkAndEgress, Some(path)) => {
            Ok(Some(egress_bridge::connect(path)?))
        }
        (Network::Egress | Network::CorralLink | Network::CorralLinkAndEgress, None) => Err(
            StepError::invalid("egress", "no hand-over socket in the prep"),
        ),
        (Network::None | Network::Loopback, _) => Ok(None),
    }
}

/// Maps the new user namespace's ids: through the assistant (host ids), else the caller's own
/// uid and gid to `ids`, with `setgroups` denied.
fn write_id_maps(
    assistant: Option<&Assistant>,
    ids: Ids,
    uid: rustix::process::Uid,
    gid: rustix::process::Gid,
) -> Result<(), StepError> {
    match assistant {
        Some(a) => a.write_maps(),
        None => {
            write_proc("/proc/self/setgroups", "deny")?;
            write_proc(
                "/proc/self/uid_map",
                &format!("{} {} 1\n", ids.uid, uid.as_raw()),
            )?;
            write_proc(
                "/proc/self/gid_map",
                &format!("{} {} 1\n", ids.gid, gid.as_raw()),
            )
        }
    }
}

/// Kills the sandbox's init (and so its pid namespace) and reaps it.
fn kill_init(init_pid: Pid) {
    let _ = rustix::process::kill_process(init_pid, Signal::KILL);
    let _ = rustix::process::waitpid(Some(init_pid), WaitOptions::empty());
}

/// Step 1, in the helper: namespaces, id maps, the init; then the spec, the timeout.
fn sandbox(prep: &Prep, status: &StatusPipe) -> Result<(), StepError> {
    die_with(prep.parent_pid)?;
    // Before the cgroups and the unshare: the assistant stays in the host's (see `idmap.rs`).
    let assistant = prep.host_ids.map(Assistant::start).transpose()?;
    join_cgroups(&prep.cgroups)?;
    let uid = rustix::process::getuid();
    let gid = rustix::process::getgid();
    if uid.is_root() {
        // Root's supplementary groups would otherwise follow it into the namespace (as
        // `nogroup`, but with their access on the host). Without CAP_SETGID this fails, and
        // there are none to drop that the caller could not already use.
        let _ = rustix::thread::set_thread_groups(&[]);
    }
    // Egress: the hand-over socket is reached by its host path, so before the unshare.
    let egress = egress_connection(prep)?;
    // Inside, the caller is never uid 0: an `execve` by uid 0 would regain capabilities. With
    // `isolation.host_uids` the program is inside root, an unprivileged host uid, and execs
    // under `SECBIT_NOROOT` (locked) with an empty bounding set.
    let ids = match assistant {
        Some(_) => Ids::host_unprivileged(),
        None => Ids::of_caller(),
    };
    let flags = UnshareFlags::NEWUSER
        | UnshareFlags::NEWNS
        | UnshareFlags::NEWPID
        | UnshareFlags::NEWNET
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS;
    #[expect(
        unsafe_code,
        reason = "rustix marks unshare unsafe because of CLONE_FILES"
    )]
    // SAFETY: `CLONE_FILES` is not among the flags, and this process has a single thread.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(unavailable("unshare"))?;
    write_id_maps(assistant.as_ref(), ids, uid, gid)?;
    // The init's end of the assistant, for the run's binds.
    let idmap_sock = assistant.as_ref().map(Assistant::socket).transpose()?;

    // The spec goes to the init on this pipe, never through the target's stdin.
    let (spec_read, spec_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(unavailable("spec pipe"))?;
    // The copy-on-write layer's descriptors come back from the init on this socket.
    let (layer_rx, layer_tx) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(unavailable("layer socket"))?;
    #[expect(unsafe_code, reason = "fork of the single-threaded helper")]
    // SAFETY: the helper is single-threaded (no runtime, no thread was started), so the child
    // may run any code after `fork`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(StepError::unavailable(
            "fork the sandbox's init",
            std::io::Error::last_os_error(),
        ));
    }
    if pid == 0 {
        drop(spec_write);
        drop(egress);
        drop(layer_rx);
        drop(assistant);
        init(prep, ids, status, spec_read, layer_tx, idmap_sock);
    }
    drop(spec_read);
    drop(layer_tx);
    drop(idmap_sock);
    // Only the init talks to the assistant now; it ends when the init closes its end.
    let assistant = assistant.map(Assistant::detach);
    let Some(init_pid) = Pid::from_raw(pid) else {
        return Err(StepError::unavailable("fork", "no pid"));
    };
    // Before the spec, so before the target exists: its proxy address is listening.
    if let Some(conn) = egress
        && let Err(e) = egress_bridge::hand_over(conn)
    {
        kill_init(init_pid);
        return Err(e);
    }

    // A warm sandbox waits here until corral has a run for it.
    let spec = read_message(&std::io::stdin()).and_then(|json| {
        let spec: Spec = parse(&json)?;
        Ok((json, spec))
    });
    let (json, spec) = match spec {
        Ok(s) => s,
        Err(e) => {
            // No run (a warm sandbox discarded, or a bad spec): the namespace goes.
            kill_init(init_pid);
            return Err(StepError::invalid("read the spec", e));
        }
    };
    let deadline = Instant::now() + Duration::from_millis(spec.timeout_ms);
    let len = u64::try_from(json.len()).unwrap_or(u64::MAX).to_le_bytes();
    // An init that already failed has reported why; its closed pipe is no error of ours.
    let _ = write_all(&spec_write, &len).and_then(|()| write_all(&spec_write, &json));
    drop(spec_write);
    let (timed_out, target_ok) = wait_until(init_pid, deadline);
    // The pid namespace is gone: nothing changes the layer any more.
    apply_layer(&spec, &layer_rx, status, target_ok && !timed_out);
    if let Some(pid) = assistant {
        idmap::reap(pid);
    }
    status.send(&Status::Done { timed_out });
    Ok(())
}

/// Applies the run's copy-on-write layer (if it has one and the init sent it) and reports its
/// changes.
fn apply_layer(spec: &Spec, layer_rx: &OwnedFd, status: &StatusPipe, target_ok: bool) {
    let Some(cow) = &spec.cow else {
        return;
    };
    let paths = mounts::cow_paths(spec);
    if let Some(layer) = receive_layer(layer_rx, paths.len(), cow.hold.is_some()) {
        if cow.apply_only_if_ok && !target_ok {
            drop(layer);
            let changes = crate::Changes {
                discarded: true,
                ..crate::Changes::default()
            };
            status.send(&Status::Changes { changes });
            return;
        }
        let keep_out = spec.host.as_ref().map(|h| h.keep_out.as_slice());
        let changes = apply::apply(
            layer,
            &paths,
            cow.protected.compile(),
            cow.quota,
            cow.hold.as_ref(),
            keep_out.unwrap_or_default(),
        );
        status.send(&Status::Changes { changes });
    }
}

/// The attestation of a run that could change the host beyond its write paths
/// (`ExecRequest::host_writes`): its filesystem was not confined to them.
pub(crate) const FS_UNCONFINED: &str = "fs:unconfined";

/// Most write paths a run may have: their descriptors pass in one `SCM_RIGHTS` message (the
/// kernel takes at most 253), with the layer's tmpfs.
pub(crate) const MAX_WRITE_PATHS: usize = 200;

/// Sends the layer's descriptors (the tmpfs first, then each host directory, then the hold's)
/// to the helper.
fn send_layer(sock: &OwnedFd, layer: &CowLayer) -> Result<(), String> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let fds: Vec<_> = std::iter::once(layer.tmpfs.as_fd())
        .chain(layer.hosts.iter().map(AsFd::as_fd))
        .chain(layer.hold.iter().map(AsFd::as_fd))
        .collect();
    let mut space =
        vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err("too many descriptors".into());
    }
    let count = u32::try_from(fds.len()).map_err(|e| e.to_string())?;
    let payload = count.to_le_bytes();
    sendmsg(
        sock,
        &[std::io::IoSlice::new(&payload)],
        &mut control,
        SendFlags::empty(),
    )
    .map(drop)
    .map_err(|e| e.to_string())
}

/// The layer the init sent, if it sent one (a run that failed before its target started did
/// not). Never blocks: the init is gone, and what it sent waits in the socket.
fn receive_layer(sock: &OwnedFd, paths: usize, hold: bool) -> Option<CowLayer> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let want = paths.checked_add(1 + usize::from(hold))?;
    let mut space = vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(want))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut payload = [0u8; 4];
    let msg = recvmsg(
        sock,
        &mut [std::io::IoSliceMut::new(&mut payload)],
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if msg.bytes != 4 || u32::from_le_bytes(payload) as usize != want || fds.len() != want {
        return None;
    }
    let hold = if hold { fds.pop() } else { None };
    let mut fds = fds.into_iter();
    let tmpfs = fds.next()?;
    Some(CowLayer {
        tmpfs,
        hosts: fds.collect(),
        hold,
    })
}

/// Moves this (single-threaded) process into each of the run's cgroups, and checks it is
/// there: nothing it forks afterwards can be outside them. A v1 cgroup is joined through
/// `tasks`, a v2 one (which has no `tasks`) through `cgroup.procs`.
fn join_cgroups(dirs: &[std::path::PathBuf]) -> Result<(), StepError> {
    let me = rustix::process::getpid().as_raw_nonzero().get().to_string();
    for dir in dirs {
        let v1 = dir.join("tasks");
        let tasks = if v1.exists() {
            v1
        } else {
            dir.join("cgroup.procs")
        };
        let step = format!("join the cgroup {}", dir.display());
        // `0` is the writing task itself: in v1 no global lock, unlike moving a pid from outside.
        std::fs::write(&tasks, "0").map_err(|e| StepError::unavailable(&step, e))?;
        let members =
            std::fs::read_to_string(&tasks).map_err(|e| StepError::unavailable(&step, e))?;
        if !members.lines().any(|l| l.trim() == me) {
            return Err(StepError::unavailable(step, "the helper is not in it"));
        }
    }
    Ok(())
}

/// `PR_SET_PDEATHSIG(SIGKILL)`, then checks the parent is still `parent`.
fn die_with(parent: i32) -> Result<(), StepError> {
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(unavailable("PR_SET_PDEATHSIG"))?;
    if rustix::process::getppid()
        .map(Pid::as_raw_nonzero)
        .map(|p| p.get())
        != Some(parent)
    {
        return Err(StepError::unavailable(
            "PR_SET_PDEATHSIG",
            "the parent is gone",
        ));
    }
    Ok(())
}

/// Waits for the init; kills it (and so its whole pid namespace) when `deadline` passes. Returns
/// whether it timed out. On return the init is reaped, which the kernel reports only once every
/// process of its namespace is gone.
fn wait_until(init: Pid, deadline: Instant) -> (bool, bool) {
    let pidfd = rustix::process::pidfd_open(init, rustix::process::PidfdFlags::empty()).ok();
    loop {
        match rustix::process::waitpid(Some(init), WaitOptions::NOHANG) {
            Ok(Some((_, st))) => return (false, st.exit_status() == Some(0)),
            Err(rustix::io::Errno::CHILD) => return (false, false),
            Ok(None) | Err(_) => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = rustix::process::kill_process(init, Signal::KILL);
            // Now block: the kernel reaps the namespace, then reports the init.
            loop {
                match rustix::process::waitpid(Some(init), WaitOptions::empty()) {
                    Err(rustix::io::Errno::INTR) => continue,
                    _ => return (true, false),
                }
            }
        }
        match &pidfd {
            Some(fd) => {
                let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                let ts = rustix::event::Timespec {
                    tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: i64::from(left.subsec_nanos()),
                };
                let _ = rustix::event::poll(&mut fds, Some(&ts));
            }
            None => std::thread::sleep(left.min(Duration::from_millis(5))),
        }
    }
}

/// Step 2, pid 1 of the new namespace. Never returns.
fn init(
    prep: &Prep,
    ids: Ids,
    status: &StatusPipe,
    spec_pipe: OwnedFd,
    layer_tx: OwnedFd,
    idmap_sock: Option<OwnedFd>,
) -> ! {
    // The helper is our parent; if it dies, so does the namespace. (Its death between `fork`
    // and here is covered by corral killing the helper's process group, which includes us.)
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    let fail = |e: &StepError| -> ! {
        status.fail(e);
        std::process::exit(EXIT_SETUP)
    };
    let mut primitives: Vec<String> = ["userns", "mountns", "pidns", "ipcns", "utsns"]
        .map(String::from)
        .to_vec();
    let view = mounts::build_base(prep, ids)
        .unwrap_or_else(|e| fail(&e))
        .with_idmap(idmap_sock);
    if prep.network == Network::Loopback
        && let Err(e) = mounts::loopback_up()
    {
        fail(&StepError::unavailable("bring lo up", e));
    }
    let _ = rustix::system::sethostname(b"corral");
    // Compiled now, installed by the target.
    let filters = seccomp::filters();

    // Everything above is the same for every run; what follows is this run's.
    let spec: Spec = read_message(&spec_pipe)
        .and_then(|json| parse(&json))
        .unwrap_or_else(|e| fail(&StepError::invalid("read the spec", e)));
    drop(spec_pipe);
    let layer = mounts::finish(view, &spec).unwrap_or_else(|e| fail(&e));
    primitives.extend(["pivot_root", "proc", "tmpfs:tmp"].map(String::from));
    // The layer's descriptors go to the helper and are closed here before the target exists:
    // nothing of the sandbox can ever reach them (the host directories least of all).
    if let (Some(layer), Some(cow)) = (layer, &spec.cow) {
        if let Err(e) = send_layer(&layer_tx, &layer) {
            fail(&StepError::unavailable(
                "hand the copy-on-write layer to the helper",
                e,
            ));
        }
        drop(layer);
        primitives.push("cow:overlay".into());
        primitives.push(format!("quota:{}", cow.quota));
        if spec.host.is_some() {
            // The host's top-level directories were write paths too.
            primitives.push(FS_UNCONFINED.into());
        }
    }
    drop(layer_tx);
    primitives.push(prep.network.primitive().into());
    // The view is built (and the assistant's end closed with it): host root is left for good.
    if let Some(range) = prep.host_ids {
        idmap::become_unprivileged(range).unwrap_or_else(|e| fail(&e));
        primitives.push(idmap::PRIMITIVE.into());
    }

    #[expect(unsafe_code, reason = "fork of the single-threaded sandbox init")]
    // SAFETY: the init is single-threaded (forked from the single-threaded helper).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        status.fail(&StepError::unavailable(
            "fork the target",
            std::io::Error::last_os_error(),
        ));
        std::process::exit(EXIT_SETUP);
    }
    if pid == 0 {
        target(&spec, prep.network, ids, status, primitives, &filters);
    }
    // The target cannot read our memory through /proc even with its capabilities gone.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    let target_pid = Pid::from_raw(pid);
    let mut exit: Option<(Option<i32>, Option<i32>)> = None;
    while exit.is_none() {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((p, st))) if Some(p) == target_pid => {
                exit = Some((st.exit_status(), st.terminating_signal()));
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => exit = Some((None, None)),
        }
    }
    let (code, signal) = exit.unwrap_or((None, None));
    status.send(&Status::Exited { code, signal });
    let ended = if code == Some(0) {
        0
    } else {
        EXIT_TARGET_FAILED
    };
    // Whatever the target left behind dies with it.
    #[expect(unsafe_code, reason = "kill(-1) has no wrapper in rustix")]
    // SAFETY: a plain system call; from pid 1 of a pid namespace, -1 means every other process
    // of that namespace.
    let _ = unsafe { libc::kill(-1, libc::SIGKILL) };
    while !matches!(
        rustix::process::wait(WaitOptions::empty()),
        Err(rustix::io::Errno::CHILD)
    ) {}
    // The helper learns from the init's own status whether the target succeeded.
    std::process::exit(ended)
}

/// The init's exit status when the target did not exit 0.
const EXIT_TARGET_FAILED: i32 = 3;

/// Installs the run's seccomp filters (and, with an execute allow-list, the one refusing memory
/// files), attesting each; the failing step's name and error.
fn install_seccomp(
    spec: &Spec,
    filters: &Result<Vec<seccompiler::BpfProgram>, String>,
    primitives: &mut Vec<String>,
) -> Result<(), (&'static str, String)> {
    filters
        .as_ref()
        .map_err(String::clone)
        .and_then(|f| seccomp::install(f))
        .map_err(|e| ("seccomp", e))?;
    primitives.push("seccomp".into());
    if spec.exec_only.is_some() {
        seccomp::no_memfd()
            .and_then(|p| seccomp::install(&[p]))
            .map_err(|e| ("seccomp (memfd)", e))?;
        primitives.push("seccomp:no-memfd".into());
    }
    Ok(())
}

/// Step 3, the target. Never returns.
fn target(
    spec: &Spec,
    network: Network,
    ids: Ids,
    status: &StatusPipe,
    mut primitives: Vec<String>,
    filters: &Result<Vec<seccompiler::BpfProgram>, String>,
) -> ! {
    let fail = |kind: FailKind, step: &str, error: String| -> ! {
        status.send(&Status::Failed {
            kind,
            step: step.into(),
            error,
        });
        std::process::exit(EXIT_SETUP)
    };
    if let Err(e) = rustix::process::setsid() {
        fail(FailKind::Unavailable, "setsid", e.to_string());
    }
    primitives.push("setsid".into());
    if rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).is_err()
        || rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(1)
    {
        fail(
            FailKind::Unavailable,
            "PR_SET_PDEATHSIG",
            "the init is gone".into(),
        );
    }
    primitives.push("pdeathsig".into());

    let rules = Rules::for_run(
        &spec.read_paths,
        &spec.write_paths,
        network,
        spec.exec_only.as_deref(),
    );
    if let Err(e) = landlock_rules::restrict(&rules) {
        fail(FailKind::Unavailable, "landlock", e);
    }
    primitives.push(landlock_rules::PRIMITIVE.into());
    if let Some(exec) = &spec.exec_only {
        primitives.push(format!("landlock:exec-only({})", exec.len()));
    }
    if let Err(e) = rustix::thread::set_no_new_privs(true) {
        fail(FailKind::Unavailable, "no_new_privs", e.to_string());
    }
    match rustix::thread::no_new_privs() {
        Ok(true) => primitives.push("no_new_privs".into()),
        _ => fail(FailKind::Unavailable, "no_new_privs", "not set".into()),
    }
    if let Err((step, e)) = install_seccomp(spec, filters, &mut primitives) {
        fail(FailKind::Unavailable, step, e);
    }
    if ids.uid == 0 {
        // The program is inside root: no `execve` of it ever gains a capability.
        use rustix::thread::CapabilitiesSecureBits as B;
        if let Err(e) = rustix::thread::set_capabilities_secure_bits(
            B::NO_ROOT
                | B::NO_ROOT_LOCKED
                | B::NO_CAP_AMBIENT_RAISE
                | B::NO_CAP_AMBIENT_RAISE_LOCKED,
        ) {
            fail(FailKind::Unavailable, "securebits", e.to_string());
        }
    }
    if let Err(e) = drop_capabilities() {
        fail(FailKind::Unavailable, "drop capabilities", e);
    }
    primitives.push("caps:none".into());
    for r in &spec.rlimits {
        if let Err(e) = r.apply() {
            fail(FailKind::Unavailable, r.kind.primitive(), e.to_string());
        }
        // RLIMIT_NPROC is set, but not attested where the kernel ignores it (processes of host
        // uid 0 are exempt, namespace or not: the pids cgroup is what bounds them there). For
        // anyone else it counts, since Linux 5.14, the processes of this fresh user namespace
        // only: its own primitive, a process limit without any cgroup.
        match r.kind {
            crate::common::RlimitKind::Nproc if ids.host_root => {}
            crate::common::RlimitKind::Nproc => primitives.push(NPROC_USERNS.into()),
            _ => primitives.push(r.kind.primitive().into()),
        }
    }
    if let Err(e) = rustix::process::chdir(&spec.cwd) {
        fail(
            FailKind::Spawn,
            "chdir",
            format!(
                "the working directory `{}` is not usable in the sandbox: {e}",
                spec.cwd.display()
            ),
        );
    }
    let Some((program, args)) = spec.argv.split_first() else {
        fail(FailKind::Invalid, "argv", "argv is empty".into());
    };
    status.send(&Status::Ready { primitives });
    let err = std::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .exec();
    status.send(&Status::Failed {
        kind: FailKind::Spawn,
        step: "execve".into(),
        error: crate::common::describe_spawn_error(&err),
    });
    std::process::exit(EXIT_EXEC)
}

/// Empties the bounding, ambient, effective, permitted and inheritable capability sets, and
/// checks they are empty.
fn drop_capabilities() -> Result<(), String> {
    for cap in 0..64u32 {
        let set = CapabilitySet::from_bits_retain(1u64 << cap);
        match rustix::thread::remove_capability_from_bounding_set(set) {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(rustix::io::Errno::INVAL) => break,
            Err(e) => return Err(format!("PR_CAPBSET_DROP {cap}: {e}")),
        }
    }
    rustix::thread::clear_ambient_capability_set().map_err(|e| format!("ambient: {e}"))?;
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, none).map_err(|e| format!("capset: {e}"))?;
    let now = rustix::thread::capabilities(None).map_err(|e| format!("capget: {e}"))?;
    if !(now.effective.is_empty() && now.permitted.is_empty() && now.inheritable.is_empty()) {
        return Err("capabilities remain after capset".into());
    }
    // The bounding set is empty too.
    if rustix::thread::capability_is_in_bounding_set(CapabilitySet::from_bits_retain(1))
        .unwrap_or(true)
    {
        return Err("the bounding set still has CAP_DAC_OVERRIDE".into());
    }
    Ok(())
}
