//! What this host offers the linux backend: each primitive tried for real (a forked child
//! unshares each namespace, and its child mounts a fresh /proc; a throwaway thread enforces a
//! landlock ruleset and loads the seccomp filters; a cgroup is made and removed; RLIMIT_NPROC is
//! tried in a fresh user namespace), with the fix for each one that is missing. In a container
//! (`container()`), a missing namespace or /proc gets the container's fix (corral's seccomp
//! profile, an unmasked /proc) rather than the host's.

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

/// The fix for a namespace step or /proc refused inside a container: what Docker's and the
/// container runtimes' defaults withhold (docs/DEPLOY.md).
const CONTAINER_FIX: &str = "load corral's seccomp profile, which allows unshare, mount and pivot_root (`docker run --security-opt seccomp=deploy/seccomp-corral.json`, the same for podman; Kubernetes: `seccompProfile: {type: Localhost, localhostProfile: profiles/corral.json}`), and where the node runs AppArmor, no profile that denies mount (`--security-opt apparmor=unconfined`; Kubernetes: `appArmorProfile: {type: Unconfined}`); see docs/DEPLOY.md";

/// The fix for a fresh /proc that the kernel refuses because parts of the container's /proc are
/// masked (it will not mount a procfs that would reveal them).
const PROC_FIX: &str = "unmask /proc: the kernel refuses a new procfs while parts of the container's are hidden (`docker run --security-opt systempaths=unconfined`, podman `--security-opt unmask=/proc/*`; Kubernetes: `securityContext.procMount: Unmasked`, which needs `hostUsers: false`); see docs/DEPLOY.md";

/// The namespace steps the probe child tries, in order (the last one in its own child, the
/// first process of the new pid namespace).
const NS_STEPS: [(&str, &str); 7] = [
    ("userns", "unshare(CLONE_NEWUSER)"),
    ("mountns", "unshare(CLONE_NEWNS) and making / private"),
    ("pidns", "unshare(CLONE_NEWPID)"),
    ("netns", "unshare(CLONE_NEWNET)"),
    ("ipcns", "unshare(CLONE_NEWIPC)"),
    ("utsns", "unshare(CLONE_NEWUTS)"),
    ("procfs", "mounting a fresh /proc for the new pid namespace"),
];

/// The errnos a step's failure is told by, as the probe child reports them (its exit code is
/// the step's index plus ten times the errno's place here, plus one; 0: another errno).
const STEP_ERRNOS: [(rustix::io::Errno, &str); 5] = [
    (
        rustix::io::Errno::PERM,
        "EPERM: not permitted (a seccomp profile that answers EPERM, as Docker's default does, an LSM such as AppArmor, or a masked /proc)",
    ),
    (
        rustix::io::Errno::NOSYS,
        "ENOSYS: refused by a seccomp filter (the call exists in every kernel corral supports)",
    ),
    (
        rustix::io::Errno::NOSPC,
        "ENOSPC: the user namespace limit is 0 or reached (user.max_user_namespaces)",
    ),
    (rustix::io::Errno::INVAL, "EINVAL: invalid argument"),
    (rustix::io::Errno::ACCESS, "EACCES: access denied"),
];

/// The probe child's exit code for a failure of step `step` with `e`.
fn step_failure(step: usize, e: rustix::io::Errno) -> i32 {
    let class = STEP_ERRNOS
        .iter()
        .position(|(errno, _)| *errno == e)
        .map_or(0, |i| i + 1);
    i32::try_from(step + 10 * class).unwrap_or(99)
}

/// A failed step as the probe child reported it: its index and the errno's words, if known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failed {
    step: usize,
    errno: Option<&'static str>,
}

impl Failed {
    fn of(code: usize) -> Failed {
        Failed {
            step: code % 10,
            errno: (code / 10)
                .checked_sub(1)
                .and_then(|i| STEP_ERRNOS.get(i))
                .map(|(_, words)| *words),
        }
    }
}

/// Forks a child that tries every namespace step; returns the first failure (step
/// `NS_STEPS.len()` when all passed), or why the probe itself failed.
fn namespace_steps() -> Result<Failed, String> {
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
                return usize::try_from(code)
                    .map(Failed::of)
                    .map_err(|e| e.to_string());
            }
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("waitpid: {e}")),
        }
    }
}

/// In the forked child: the first step that fails, as [`step_failure`] encodes it, or
/// `NS_STEPS.len()` when every step passed.
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
    if let Err(e) = unshare(UnshareFlags::NEWUSER) {
        return step_failure(0, e);
    }
    if let Err(e) = unshare(UnshareFlags::NEWNS).and_then(|()| {
        rustix::mount::mount_change(
            c"/",
            rustix::mount::MountPropagationFlags::PRIVATE
                | rustix::mount::MountPropagationFlags::REC,
        )
    }) {
        return step_failure(1, e);
    }
    let rest = [
        UnshareFlags::NEWPID,
        UnshareFlags::NEWNET,
        UnshareFlags::NEWIPC,
        UnshareFlags::NEWUTS,
    ];
    for (i, flags) in rest.into_iter().enumerate() {
        if let Err(e) = unshare(flags) {
            return step_failure(i + 2, e);
        }
    }
    fresh_proc()
}

/// In the probe child, after its unshares: forks the first process of the new pid namespace,
/// which mounts a procfs over /proc in the child's private mount namespace (what the sandbox's
/// init does on its new root); `NS_STEPS.len()` when it could.
fn fresh_proc() -> i32 {
    const STEP: usize = NS_STEPS.len() - 1;
    #[expect(unsafe_code, reason = "fork into the new pid namespace")]
    // SAFETY: the grandchild only makes raw system calls (mount, _exit).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return step_failure(
            STEP,
            rustix::io::Errno::from_io_error(&std::io::Error::last_os_error())
                .unwrap_or(rustix::io::Errno::INVAL),
        );
    }
    if pid == 0 {
        let code = match rustix::mount::mount(
            c"proc",
            c"/proc",
            c"proc",
            rustix::mount::MountFlags::NOSUID
                | rustix::mount::MountFlags::NODEV
                | rustix::mount::MountFlags::NOEXEC,
            None,
        ) {
            Ok(()) => 0,
            Err(e) => step_failure(STEP, e),
        };
        #[expect(unsafe_code, reason = "_exit in a forked child")]
        // SAFETY: `_exit` ends the grandchild without running any atexit handler.
        unsafe {
            libc::_exit(code)
        };
    }
    let mut status = 0;
    #[expect(unsafe_code, reason = "reaping the probe's grandchild")]
    // SAFETY: a plain system call on our own child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    if waited != pid || !libc::WIFEXITED(status) {
        return step_failure(STEP, rustix::io::Errno::INVAL);
    }
    match libc::WEXITSTATUS(status) {
        0 => i32::try_from(NS_STEPS.len()).unwrap_or(99),
        code => code,
    }
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

/// The fix for a failed namespace step (`NS_STEPS[step]`), in a container or on a host, given
/// why it failed (`errno`, as [`STEP_ERRNOS`] says it). A user namespace limit of 0 (`ENOSPC`)
/// is the sysctl's to raise, in a container too: no seccomp profile changes it.
fn step_fix(step: usize, in_container: bool, errno: Option<&str>) -> String {
    let (name, _) = NS_STEPS[step.min(NS_STEPS.len() - 1)];
    if name == "userns" && errno.is_some_and(|e| e.starts_with("ENOSPC")) {
        return USERNS_FIX.to_owned();
    }
    match (name, in_container) {
        ("procfs", true) => PROC_FIX.to_owned(),
        ("procfs", false) => "a /proc that is not masked or read-only in part: corral's sandbox mounts a fresh one for its pid namespace, which the kernel refuses while parts of the current one are hidden".to_owned(),
        (_, true) => CONTAINER_FIX.to_owned(),
        ("userns", false) => USERNS_FIX.to_owned(),
        _ => "a kernel with this namespace type (CONFIG_*_NS), and a container or seccomp profile that allows creating it".to_owned(),
    }
}

/// Whether corral runs in a container, and how that was told: the `container` variable (podman,
/// systemd-nspawn, LXC), a pod's `KUBERNETES_SERVICE_HOST`, Podman's `/run/.containerenv`,
/// Docker's `/.dockerenv`, or PID 1's cgroup naming a container runtime.
pub fn container() -> Option<String> {
    let cgroup = std::fs::read_to_string("/proc/1/cgroup").unwrap_or_default();
    container_from(
        std::env::var("container").ok().as_deref(),
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        &|p| Path::new(p).exists(),
        &cgroup,
    )
}

/// [`container`] on given facts: the `container` variable, whether `KUBERNETES_SERVICE_HOST` is
/// set, which marker files exist, and PID 1's `/proc/1/cgroup`.
pub fn container_from(
    var: Option<&str>,
    kubernetes: bool,
    exists: &dyn Fn(&str) -> bool,
    pid1_cgroup: &str,
) -> Option<String> {
    if kubernetes {
        return Some("Kubernetes: KUBERNETES_SERVICE_HOST is set".to_owned());
    }
    if let Some(v) = var.map(str::trim).filter(|v| !v.is_empty()) {
        return Some(format!("{v}: the `container` variable says so"));
    }
    for (file, kind) in [("/run/.containerenv", "podman"), ("/.dockerenv", "docker")] {
        if exists(file) {
            return Some(format!("{kind}: {file} exists"));
        }
    }
    ["kubepods", "docker", "containerd", "libpod", "lxc"]
        .into_iter()
        .find(|k| pid1_cgroup.contains(k))
        .map(|k| format!("{k}: PID 1's cgroup names it"))
}

/// Tries every primitive the linux backend uses, with per-run cgroups under corral's own.
pub fn probe() -> Vec<Primitive> {
    probe_for(None)
}

/// [`probe`], with per-run cgroups under `cgroup_parent` (`isolation.cgroup_parent`) when set.
pub fn probe_for(cgroup_parent: Option<&Path>) -> Vec<Primitive> {
    let mut out = Vec::new();
    let ns = namespace_steps();
    let container = container();
    for (i, (name, what)) in NS_STEPS.iter().enumerate() {
        let result = match &ns {
            Err(e) => Err(format!("cannot probe: {e}")),
            Ok(failed) if failed.step > i => Ok(format!("{what} works")),
            Ok(failed) if failed.step == i => Err(format!(
                "{what} failed{}{}{}",
                failed.errno.map(|w| format!(": {w}")).unwrap_or_default(),
                if i == 0 {
                    userns_detail()
                } else {
                    String::new()
                },
                container
                    .as_ref()
                    .map(|c| format!("; in a container ({c})"))
                    .unwrap_or_default()
            )),
            Ok(_) => Err("not tried: an earlier step failed".into()),
        };
        let fix = match &ns {
            Ok(failed) if failed.step < i => "fix the first missing step above".to_owned(),
            Ok(failed) if failed.step == i => step_fix(i, container.is_some(), failed.errno),
            _ => step_fix(i, container.is_some(), None),
        };
        out.push(Primitive::new(name, true, result, &fix));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_step_carries_its_errno() {
        let f = Failed::of(usize::try_from(step_failure(0, rustix::io::Errno::NOSYS)).unwrap_or(0));
        assert_eq!(f.step, 0);
        assert!(f.errno.is_some_and(|w| w.starts_with("ENOSYS")), "{f:?}");
        let f = Failed::of(usize::try_from(step_failure(6, rustix::io::Errno::PERM)).unwrap_or(0));
        assert_eq!(f.step, 6);
        assert!(f.errno.is_some_and(|w| w.starts_with("EPERM")), "{f:?}");
        let other =
            Failed::of(usize::try_from(step_failure(3, rustix::io::Errno::BUSY)).unwrap_or(0));
        assert_eq!((other.step, other.errno), (3, None));
        assert_eq!(
            Failed::of(NS_STEPS.len()).step,
            NS_STEPS.len(),
            "all passed"
        );
    }

    #[test]
    fn a_container_is_told_by_its_markers() {
        let none = |_: &str| false;
        assert_eq!(container_from(None, false, &none, "0::/init.scope\n"), None);
        let k8s = container_from(Some("docker"), true, &none, "");
        assert!(k8s.is_some_and(|c| c.starts_with("Kubernetes")));
        let podman = container_from(Some("podman"), false, &none, "");
        assert!(podman.is_some_and(|c| c.starts_with("podman")));
        let docker = container_from(None, false, &|p| p == "/.dockerenv", "");
        assert!(docker.is_some_and(|c| c.starts_with("docker")));
        let cg = container_from(None, false, &none, "0::/kubepods/besteffort/pod1/abc\n");
        assert!(cg.is_some_and(|c| c.starts_with("kubepods")));
    }

    #[test]
    fn in_a_container_the_fix_names_the_seccomp_profile_and_proc() {
        assert!(step_fix(0, true, None).contains("deploy/seccomp-corral.json"));
        assert!(step_fix(0, true, Some("EPERM: not permitted")).contains("seccomp-corral.json"));
        assert!(step_fix(6, true, None).contains("procMount: Unmasked"));
        assert_eq!(step_fix(0, false, None), USERNS_FIX);
        // A limit of 0 is the sysctl's, in a container too.
        assert_eq!(
            step_fix(0, true, Some("ENOSPC: the user namespace limit")),
            USERNS_FIX
        );
    }
}
