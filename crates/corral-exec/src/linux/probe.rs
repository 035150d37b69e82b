//! What this host offers the linux backend: each primitive tried for real (a forked child
//! unshares each namespace; a throwaway thread enforces a landlock ruleset and loads the seccomp
//! filters; a cgroup is made and removed; RLIMIT_NPROC is tried in a fresh user namespace), with
//! the fix for each one that is missing.

use std::path::Path;

use rustix::thread::UnshareFlags;

use super::cgroup;
use super::landlock_rules;
use super::seccomp;

/// One primitive and whether this host has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primitive {
    /// Its name, e.g. `userns`, `landlock`, `cgroup:pids`.
    pub name: &'static str,
    /// Whether the backend can use it here.
    pub available: bool,
    /// Whether the backend refuses to run without it. Everything is, but `cgroup` (the layout),
    /// `cgroup:memory` (only runs with an explicit memory limit need it, and those are refused
    /// without it), and one of `cgroup:pids` and `rlimit:nproc-userns` (a process limit).
    pub required: bool,
    /// What was found.
    pub detail: String,
    /// How to get it, when missing.
    pub fix: String,
}

impl Primitive {
    fn new(name: &'static str, required: bool, result: Result<String, String>, fix: &str) -> Self {
        match result {
            Ok(detail) => Primitive {
                name,
                available: true,
                required,
                detail,
                fix: String::new(),
            },
            Err(detail) => Primitive {
                name,
                available: false,
                required,
                detail,
                fix: fix.to_owned(),
            },
        }
    }
}

const USERNS_FIX: &str = "allow unprivileged user namespaces: `sysctl -w user.max_user_namespaces=15000`; on Debian `sysctl -w kernel.unprivileged_userns_clone=1`; on Ubuntu 23.10+ `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile granting `userns` to corral); in a container, run it with `--security-opt seccomp=unconfined` or a profile allowing unshare/mount";

/// The namespace steps the probe child tries, in order.
const NS_STEPS: [(&str, &str); 6] = [
    ("userns", "unshare(CLONE_NEWUSER)"),
    ("mountns", "unshare(CLONE_NEWNS) and making / private"),
    ("pidns", "unshare(CLONE_NEWPID)"),
    ("netns", "unshare(CLONE_NEWNET)"),
    ("ipcns", "unshare(CLONE_NEWIPC)"),
    ("utsns", "unshare(CLONE_NEWUTS)"),
];

/// Forks a child that tries every namespace step; returns the index of the first failure
/// (`NS_STEPS.len()` when all passed), or why the probe itself failed.
fn namespace_steps() -> Result<usize, String> {
    #[expect(
        unsafe_code,
        reason = "fork to try unshare without touching this process"
    )]
    // SAFETY: the child only makes raw system calls (unshare, mount, _exit) through rustix and
    // libc: no allocation, no lock, so it is sound even when this process has other threads.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = child_steps();
        #[expect(unsafe_code, reason = "_exit in a forked child")]
        // SAFETY: `_exit` ends the child without running this process's atexit handlers.
        unsafe {
            libc::_exit(code)
        };
    }
    let pid = rustix::process::Pid::from_raw(pid).ok_or("fork returned no pid")?;
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => {
                let code = status.exit_status().ok_or("the probe child was killed")?;
                return usize::try_from(code).map_err(|e| e.to_string());
            }
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("waitpid: {e}")),
        }
    }
}

/// In the forked child: the index of the first step that fails.
fn child_steps() -> i32 {
    let unshare = |flags: UnshareFlags| {
        #[expect(
            unsafe_code,
            reason = "rustix marks unshare unsafe because of CLONE_FILES"
        )]
        // SAFETY: `CLONE_FILES` is never passed.
        unsafe {
            rustix::thread::unshare_unsafe(flags)
        }
    };
    if unshare(UnshareFlags::NEWUSER).is_err() {
        return 0;
    }
    if unshare(UnshareFlags::NEWNS).is_err()
        || rustix::mount::mount_change(
            c"/",
            rustix::mount::MountPropagationFlags::PRIVATE
                | rustix::mount::MountPropagationFlags::REC,
        )
        .is_err()
    {
        return 1;
    }
    let rest = [
        UnshareFlags::NEWPID,
        UnshareFlags::NEWNET,
        UnshareFlags::NEWIPC,
        UnshareFlags::NEWUTS,
    ];
    for (i, flags) in rest.into_iter().enumerate() {
        if unshare(flags).is_err() {
            return i32::try_from(i + 2).unwrap_or(99);
        }
    }
    6
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn landlock() -> Result<String, String> {
    let abi = landlock_rules::kernel_abi();
    if abi == 0 {
        return Err("landlock is not enabled in this kernel".into());
    }
    let pinned = landlock_rules::ABI_PINNED as i32;
    if abi < pinned {
        return Err(format!(
            "the kernel has landlock ABI {abi}; corral's ruleset needs ABI {pinned}"
        ));
    }
    // Enforce the real ruleset (no paths) on a throwaway thread.
    let rules = landlock_rules::Rules::default();
    let enforced = std::thread::spawn(move || landlock_rules::restrict(&rules))
        .join()
        .map_err(|_| "the landlock probe thread panicked".to_owned())?;
    enforced.map(|()| format!("kernel ABI {abi}; ruleset ABI {pinned} fully enforced"))
}

fn seccomp_probe() -> Result<String, String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !status.lines().any(|l| l.starts_with("Seccomp:")) {
        return Err("the kernel has no seccomp (CONFIG_SECCOMP)".into());
    }
    let programs = seccomp::filters()?;
    let n = programs.len();
    // Load the real filters on a throwaway thread (no_new_privs and seccomp are per thread).
    std::thread::spawn(move || {
        rustix::thread::set_no_new_privs(true).map_err(|e| format!("no_new_privs: {e}"))?;
        seccomp::install(&programs)
    })
    .join()
    .map_err(|_| "the seccomp probe thread panicked".to_owned())??;
    Ok(format!("{n} filters for {} load", std::env::consts::ARCH))
}

/// Tries every primitive the linux backend uses, with per-run cgroups under corral's own.
pub fn probe() -> Vec<Primitive> {
    probe_for(None)
}

/// [`probe`], with per-run cgroups under `cgroup_parent` (`isolation.cgroup_parent`) when set.
pub fn probe_for(cgroup_parent: Option<&Path>) -> Vec<Primitive> {
    let mut out = Vec::new();
    let ns = namespace_steps();
    for (i, (name, what)) in NS_STEPS.iter().enumerate() {
        let result = match &ns {
            Err(e) => Err(format!("cannot probe: {e}")),
            Ok(failed) if *failed > i => Ok(format!("{what} works")),
            Ok(failed) if *failed == i => Err(format!("{what} failed{}", userns_detail())),
            Ok(_) => Err("not tried: an earlier namespace failed".into()),
        };
        let fix = if i == 0 {
            USERNS_FIX
        } else {
            "a kernel with this namespace type (CONFIG_*_NS), and a container or seccomp profile that allows creating it"
        };
        out.push(Primitive::new(name, true, result, fix));
    }
    out.push(Primitive::new(
        "landlock",
        true,
        landlock(),
        "Linux 6.12+ with landlock enabled: add `landlock` to the `lsm=` kernel parameter (CONFIG_SECURITY_LANDLOCK=y)",
    ));
    out.push(Primitive::new(
        "seccomp",
        true,
        seccomp_probe(),
        "a kernel with CONFIG_SECCOMP_FILTER on x86_64 or aarch64",
    ));
    out.extend(limits(cgroup_parent));
    out
}

/// The process and memory limits: `cgroup` (the layout, informational), `cgroup:pids`,
/// `cgroup:memory`, and `rlimit:nproc-userns`. Every run needs a process limit: the pids cgroup
/// is required unless `RLIMIT_NPROC` binds corral's runs (a normal user).
fn limits(cgroup_parent: Option<&Path>) -> Vec<Primitive> {
    use cgroup::{Controller, Place};
    let cg = cgroup::detect(cgroup_parent);
    let made = |c: Controller| match cg.place(c) {
        Some(place) => {
            let file = match (c, place) {
                (Controller::Pids, _) => "pids.max",
                (Controller::Memory, Place::V1(_)) => "memory.limit_in_bytes",
                (Controller::Memory, Place::V2(_)) => "memory.max",
            };
            cgroup::try_create(place.dir(), file).map(|()| place.describe())
        }
        None => Err(format!(
            "no cgroup with the `{}` controller that corral may use (cgroups: {})",
            c.name(),
            cg.describe()
        )),
    };
    let nproc = nproc_userns();
    let pids = made(Controller::Pids);
    let memory = made(Controller::Memory);
    let layout = Primitive {
        name: "cgroup",
        available: pids.is_ok() || memory.is_ok(),
        required: false,
        detail: cg.describe(),
        // The fixes are on `cgroup:pids` and `cgroup:memory`.
        fix: String::new(),
    };
    vec![
        layout,
        Primitive::new(
            "cgroup:pids",
            nproc.is_err(),
            pids,
            &format!(
                "{}; without it {}",
                cgroup::fix(Controller::Pids, &cg),
                if rustix::process::getuid().is_root() {
                    "the linux backend refuses every run: as host root nothing else bounds a run's processes (RLIMIT_NPROC never binds uid 0)"
                } else {
                    "a run's processes are bounded by RLIMIT_NPROC in its user namespace"
                }
            ),
        ),
        Primitive::new(
            "cgroup:memory",
            false,
            memory,
            &format!(
                "{}; without it a run with an explicit `limits.memory` is refused, and the default memory cap is RLIMIT_AS only",
                cgroup::fix(Controller::Memory, &cg)
            ),
        ),
        Primitive::new(
            "rlimit:nproc-userns",
            false,
            nproc,
            "run corral as a normal user (RLIMIT_NPROC never binds host uid 0), on Linux 5.14+; as root, the pids cgroup bounds a run's processes",
        ),
    ]
}

/// Whether `RLIMIT_NPROC` binds inside a fresh user namespace: a forked child unshares one,
/// sets the limit to 1 (itself) and tries to fork.
pub(crate) fn nproc_userns() -> Result<String, String> {
    if rustix::process::getuid().is_root() {
        return Err(
            "corral runs as host uid 0, which RLIMIT_NPROC never binds (namespace or not)".into(),
        );
    }
    #[expect(
        unsafe_code,
        reason = "fork to try RLIMIT_NPROC without touching this process"
    )]
    // SAFETY: the child only makes raw system calls (unshare, setrlimit, fork, wait4, _exit):
    // no allocation, no lock, so it is sound even when this process has other threads.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = nproc_child();
        #[expect(unsafe_code, reason = "_exit in a forked child")]
        // SAFETY: `_exit` ends the child without running this process's atexit handlers.
        unsafe {
            libc::_exit(code)
        };
    }
    let pid = rustix::process::Pid::from_raw(pid).ok_or("fork returned no pid")?;
    let code = loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => break status.exit_status(),
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("waitpid: {e}")),
        }
    };
    match code {
        Some(0) => Ok("RLIMIT_NPROC binds in a fresh user namespace and counts only its processes: a process limit without a cgroup".into()),
        Some(1) => Err("RLIMIT_NPROC did not stop a fork inside a fresh user namespace (Linux 5.14+ counts it per namespace)".into()),
        Some(2) => Err("cannot make a user namespace to try it in".into()),
        other => Err(format!("the probe child failed ({other:?})")),
    }
}

/// In the forked child: 0 when a fork beyond `RLIMIT_NPROC` = 1 fails inside a fresh user
/// namespace, 1 when it succeeds.
fn nproc_child() -> i32 {
    #[expect(
        unsafe_code,
        reason = "rustix marks unshare unsafe because of CLONE_FILES"
    )]
    // SAFETY: `CLONE_FILES` is not passed.
    if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }.is_err() {
        return 2;
    }
    let one = rustix::process::Rlimit {
        current: Some(1),
        maximum: Some(1),
    };
    if rustix::process::setrlimit(rustix::process::Resource::Nproc, one).is_err() {
        return 3;
    }
    #[expect(unsafe_code, reason = "fork in the probe child")]
    // SAFETY: the grandchild only calls `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        #[expect(unsafe_code, reason = "_exit in a forked child")]
        // SAFETY: as above.
        unsafe {
            libc::_exit(0)
        };
    }
    if pid > 0 {
        let mut status = 0;
        #[expect(unsafe_code, reason = "reaping the probe's grandchild")]
        // SAFETY: a plain system call on our own child.
        let _ = unsafe { libc::waitpid(pid, &mut status, 0) };
        return 1;
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
        0
    } else {
        4
    }
}

/// Sysctls that explain a user namespace failure.
fn userns_detail() -> String {
    let mut notes = Vec::new();
    for path in [
        "/proc/sys/user/max_user_namespaces",
        "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    ] {
        if let Some(v) = read_trimmed(path) {
            let name = Path::new(path)
                .strip_prefix("/proc/sys")
                .map(|p| p.display().to_string().replace('/', "."))
                .unwrap_or_default();
            notes.push(format!("{name}={v}"));
        }
    }
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join(", "))
    }
}
