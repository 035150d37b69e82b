//! What this host offers the linux backend: each primitive tried for real (a forked child
//! unshares each namespace; a throwaway thread enforces a landlock ruleset and loads the seccomp
//! filters; a cgroup is made and removed), with the fix for each one that is missing.

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
    /// Whether the backend refuses to run without it. Everything is, but `cgroup:memory` (only
    /// runs with a memory limit need it, and those are refused without it) and `cgroup:v2`.
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

/// Tries every primitive the linux backend uses.
pub fn probe() -> Vec<Primitive> {
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
    let cg = cgroup::detect();
    let v1 = |base: &Option<std::path::PathBuf>, file: &str, controller: &str| match base {
        Some(base) => cgroup::try_create(base, file)
            .map(|()| format!("v1, per-run cgroups under {}", base.display())),
        None if cg.v2.is_some() => Err(format!(
            "only a unified (v2) hierarchy is mounted; corral uses the v1 `{controller}` controller"
        )),
        None => Err(format!(
            "no cgroup hierarchy with the `{controller}` controller is mounted"
        )),
    };
    out.push(Primitive::new(
        "cgroup:pids",
        true,
        v1(&cg.pids, "pids.max", "pids"),
        "mount the v1 `pids` controller (`mount -t cgroup -o pids cgroup /sys/fs/cgroup/pids`) and run corral with write access to its own cgroup there; every run has a process limit and the pids cgroup enforces it (RLIMIT_NPROC does not bind a host-root caller), so without it the linux backend refuses every run",
    ));
    out.push(Primitive::new(
        "cgroup:memory",
        false,
        v1(&cg.memory, "memory.limit_in_bytes", "memory"),
        "mount the v1 `memory` controller (`mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory`) and run corral with write access to its own cgroup there; without it, runs with a memory limit are refused",
    ));
    out.push(Primitive {
        name: "cgroup:v2",
        available: cg.v2.is_some(),
        required: false,
        detail: match &cg.v2 {
            Some(p) => format!("unified hierarchy at {} (not used yet)", p.display()),
            None => "no unified hierarchy mounted".into(),
        },
        fix: String::new(),
    });
    out
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
