//! The sandbox's root view, built by its init process (inside the new user, mount and pid
//! namespaces, before `pivot_root`):
//!
//! - `/` is a fresh tmpfs, remounted read-only once built;
//! - `/usr`, `/bin`, `/sbin`, `/lib*`: read-only binds (or the host's symlinks, on merged-usr
//!   systems);
//! - `/etc`: only a fixed list of harmless entries of the host's (`ld.so.cache`, `resolv.conf`,
//!   `alternatives`, `ssl/certs`, ...) and a generated `passwd`/`group` that name only the
//!   sandbox's own user: never `shadow`, `ssh/`, `ssl/private` or anything else of the host's.
//!   Usually one read-only bind of the backend's prepared copy of them (see `etc.rs`); for a run
//!   that binds a path of its own under `/etc`, a tmpfs holding a read-only bind of each;
//! - `/proc`: a fresh procfs of the sandbox's pid namespace;
//! - `/dev`: a read-only tmpfs with binds of `null`, `zero`, `full`, `random`, `urandom`, the
//!   `fd`/`stdin`/`stdout`/`stderr` symlinks and a per-run tmpfs `shm`;
//! - `/tmp`: a per-run tmpfs;
//! - the request's `read_paths` (read-only) and `write_paths` at their own absolute paths,
//!   sources opened with `openat2(RESOLVE_NO_SYMLINKS)` and targets resolved with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, so a symlink swapped in mid-way fails the run
//!   instead of redirecting a bind. A write path is an overlay (the run's copy-on-write layer,
//!   [`CowLayer`]: lower the host directory, upper and work directories in a per-run tmpfs the
//!   target never sees, `userxattr`), or for an attached run a read-write bind; either way the
//!   protected metadata that exists in it is bound read-only on top.
//!
//! Every bind is non-recursive (no host submount is carried in) and remounted with
//! `MS_NOSUID | MS_NODEV` (and `MS_RDONLY` unless writable), keeping the flags the kernel locks.
//!
//! Built in two steps: [`build_base`], the same for every run (a warm sandbox does it before
//! its run is known), and [`finish`], the run's own binds, `/tmp`, and the `pivot_root`.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags, StatVfsMountFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use super::landlock_rules::SYSTEM_DIRS;
use super::spec::{CowSpec, EtcSource, FailKind, Prep, Spec, cow_inodes};

/// A set-up step that failed.
#[derive(Debug)]
pub(crate) struct StepError {
    pub(crate) kind: FailKind,
    pub(crate) step: String,
    pub(crate) error: String,
}

impl StepError {
    pub(crate) fn unavailable(step: impl Into<String>, error: impl ToString) -> Self {
        StepError {
            kind: FailKind::Unavailable,
            step: step.into(),
            error: error.to_string(),
        }
    }

    pub(crate) fn invalid(step: impl Into<String>, error: impl ToString) -> Self {
        StepError {
            kind: FailKind::Invalid,
            step: step.into(),
            error: error.to_string(),
        }
    }
}

type Result<T> = std::result::Result<T, StepError>;

/// Files and directories of the host's `/etc` the sandbox may see (read-only). Everything else
/// of `/etc` is absent.
pub(crate) const ETC_ALLOW: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "host.conf",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "locale.alias",
    "login.defs",
    "lsb-release",
    "magic",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "shells",
    "ssl/certs",
    "ssl/openssl.cnf",
    "terminfo",
    "timezone",
];

/// Metadata directories (or files) inside a writable root that stay read-only: whatever is
/// written there runs on the host later (git hooks, `core.fsmonitor`, corral's own config).
/// Each one that exists is bound read-only over itself, so it can be neither written, renamed
/// nor removed (a mount point), nor hard-linked out (a different mount).
pub(crate) const PROTECTED_NAMES: &[&str] = &[".git", ".hg", ".jj", ".svn", ".corral"];

/// Device nodes bound from the host.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// `/proc/self/fd/N`: a path that mount(2) resolves to exactly the object `fd` refers to.
fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

fn mount_err(step: &str, target: &Path, e: impl ToString) -> StepError {
    StepError::unavailable(format!("{step} `{}`", target.display()), e.to_string())
}

/// The mount flags the kernel locks on `fd`'s mount (a remount in a user namespace must keep
/// them).
fn locked_flags(fd: &OwnedFd) -> MountFlags {
    let Ok(st) = rustix::fs::fstatvfs(fd) else {
        return MountFlags::empty();
    };
    let mut flags = MountFlags::empty();
    let map = [
        (StatVfsMountFlags::RDONLY, MountFlags::RDONLY),
        (StatVfsMountFlags::NOSUID, MountFlags::NOSUID),
        (StatVfsMountFlags::NODEV, MountFlags::NODEV),
        (StatVfsMountFlags::NOEXEC, MountFlags::NOEXEC),
        (StatVfsMountFlags::NOATIME, MountFlags::NOATIME),
        (StatVfsMountFlags::NODIRATIME, MountFlags::NODIRATIME),
        (StatVfsMountFlags::RELATIME, MountFlags::RELATIME),
    ];
    for (st_flag, flag) in map {
        if st.f_flag.contains(st_flag) {
            flags |= flag;
        }
    }
    flags
}

/// Remounts the bind mount at `fd` with `flags` added to the locked ones.
fn remount_bind(fd: &OwnedFd, flags: MountFlags, what: &Path) -> Result<()> {
    let flags = MountFlags::BIND | flags | locked_flags(fd);
    rustix::mount::mount_remount(fd_path(fd), flags, "").map_err(|e| mount_err("remount", what, e))
}

/// Opens `rel` beneath `root` without following any symlink.
fn open_beneath(root: &OwnedFd, rel: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        rel,
        flags | OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// `/a/b/c` as `a/b/c`, refusing anything but plain components.
fn relative(path: &Path) -> Result<PathBuf> {
    let mut rel = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => rel.push(n),
            _ => {
                return Err(StepError::invalid(
                    "bind",
                    format!("`{}` is not a normalized absolute path", path.display()),
                ));
            }
        }
    }
    Ok(rel)
}

/// Makes every directory of `rel` beneath `root` (without following symlinks), and the last
/// component as a directory or, when `file`, an empty file. Returns it opened `O_PATH`.
fn make_beneath(root: &OwnedFd, rel: &Path, file: bool) -> Result<OwnedFd> {
    let err = |e: rustix::io::Errno| {
        StepError::invalid(
            "mount point",
            format!("`/{}`: {e} (a symlink in the way?)", rel.display()),
        )
    };
    let mut so_far = PathBuf::new();
    let mut comps = rel.components().peekable();
    while let Some(c) = comps.next() {
        so_far.push(c);
        let last = comps.peek().is_none();
        let want_file = last && file;
        match open_beneath(root, &so_far, OFlags::empty()) {
            Ok(fd) if !last => {
                drop(fd);
            }
            Ok(fd) => return Ok(fd),
            Err(rustix::io::Errno::NOENT) => {
                let parent = match so_far.parent() {
                    Some(p) if !p.as_os_str().is_empty() => {
                        open_beneath(root, p, OFlags::DIRECTORY).map_err(err)?
                    }
                    _ => rustix::io::dup(root).map_err(err)?,
                };
                let name = so_far.file_name().unwrap_or(OsStr::new("."));
                if want_file {
                    let f = rustix::fs::openat(
                        &parent,
                        name,
                        OFlags::CREATE
                            | OFlags::EXCL
                            | OFlags::WRONLY
                            | OFlags::CLOEXEC
                            | OFlags::NOFOLLOW,
                        Mode::from_raw_mode(0o644),
                    )
                    .map_err(err)?;
                    drop(f);
                } else {
                    rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755)).map_err(err)?;
                }
                if last {
                    return open_beneath(root, &so_far, OFlags::empty()).map_err(err);
                }
            }
            Err(e) => return Err(err(e)),
        }
    }
    // `rel` was empty: the root itself.
    rustix::io::dup(root).map_err(err)
}

/// Binds the host's `source` at the same path beneath `root`, then remounts it with `flags`.
/// `source` is opened without following symlinks.
fn bind(root: &OwnedFd, source: &Path, flags: MountFlags) -> Result<()> {
    bind_to(root, source, &relative(source)?, flags)
}

/// Binds the host's `source` at `rel` beneath `root`, then remounts it with `flags`. `source` is
/// opened without following symlinks.
fn bind_to(root: &OwnedFd, source: &Path, rel: &Path, flags: MountFlags) -> Result<()> {
    let src = rustix::fs::openat2(
        CWD,
        source,
        OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| {
        StepError::invalid(
            "bind",
            format!(
                "cannot open `{}` without following symlinks: {e}",
                source.display()
            ),
        )
    })?;
    let is_dir = rustix::fs::fstat(&src)
        .map(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
        })
        .map_err(|e| StepError::invalid("bind", e))?;
    let target = make_beneath(root, rel, !is_dir)?;
    rustix::mount::mount_bind(fd_path(&src), fd_path(&target))
        .map_err(|e| mount_err("bind", source, e))?;
    drop(target);
    // Re-open: the new mount's root, not the directory under it.
    let mounted =
        open_beneath(root, rel, OFlags::empty()).map_err(|e| mount_err("reopen", source, e))?;
    remount_bind(&mounted, flags, source)
}

/// Attaches the assistant's idmapped copy of the host's `source` (read-only unless `writable`,
/// always `nosuid`, `nodev`) at the same path beneath `root`.
fn bind_idmapped(root: &OwnedFd, sock: &OwnedFd, source: &Path, writable: bool) -> Result<()> {
    use rustix::mount::MoveMountFlags;
    let rel = relative(source)?;
    let tree = super::idmap::tree(sock, source, writable)?;
    let is_dir = rustix::fs::fstat(&tree)
        .map(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
        })
        .map_err(|e| StepError::invalid("bind", e))?;
    let target = make_beneath(root, &rel, !is_dir)?;
    rustix::mount::move_mount(
        &tree,
        "",
        &target,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| mount_err("attach the idmapped bind", source, e))
}

fn mount_tmpfs(target: &Path, flags: MountFlags, options: &str) -> Result<()> {
    let data = std::ffi::CString::new(options).map_err(|e| StepError::invalid("tmpfs", e))?;
    rustix::mount::mount("tmpfs", target, "tmpfs", flags, data.as_c_str())
        .map_err(|e| mount_err("tmpfs", target, e))
}

fn write_file(root: &OwnedFd, rel: &str, contents: &str) -> Result<()> {
    let err = |e: rustix::io::Errno| StepError::unavailable(format!("write /{rel}"), e);
    let fd = rustix::fs::openat(
        root,
        rel,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o644),
    )
    .map_err(err)?;
    let mut buf = contents.as_bytes();
    while !buf.is_empty() {
        let n = rustix::io::write(&fd, buf).map_err(err)?;
        buf = buf.get(n..).unwrap_or_default();
    }
    Ok(())
}

/// Replicates the host's symlink `host` (e.g. `/bin -> usr/bin`) beneath `root`.
fn copy_symlink(root: &OwnedFd, host: &Path) -> Result<()> {
    let target = std::fs::read_link(host).map_err(|e| StepError::unavailable("readlink", e))?;
    let rel = relative(host)?;
    if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        make_beneath(root, parent, false)?;
    }
    rustix::fs::symlinkat(target.as_os_str(), root, &rel).map_err(|e| mount_err("symlink", host, e))
}

/// The uid and gid the target runs as inside the user namespace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ids {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Whether the caller is uid 0 on the host: the kernel never applies `RLIMIT_NPROC` to it.
    pub(crate) host_root: bool,
}

impl Ids {
    /// The ids of this process's user inside a sandbox: its own, but never 0 (an `execve` by
    /// uid 0 would regain capabilities), which becomes 1000.
    pub(crate) fn of_caller() -> Self {
        let uid = rustix::process::getuid();
        let gid = rustix::process::getgid();
        Ids {
            uid: if uid.is_root() { 1000 } else { uid.as_raw() },
            gid: if gid.is_root() { 1000 } else { gid.as_raw() },
            host_root: uid.is_root(),
        }
    }

    /// With `isolation.host_uids`: the program is inside root, which is an unprivileged host
    /// uid (the range's first).
    pub(crate) fn host_unprivileged() -> Self {
        Ids {
            uid: 0,
            gid: 0,
            host_root: false,
        }
    }
}

/// The sandbox's `/etc/passwd`: root, the sandbox's own user and nobody.
pub(crate) fn passwd(ids: Ids) -> String {
    let sandbox = match ids.uid {
        0 => String::new(),
        uid => format!("sandbox:x:{uid}:{}:corral sandbox:/tmp:/bin/sh\n", ids.gid),
    };
    format!(
        "root:x:0:0:root:/root:/bin/sh\n{sandbox}\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
}

/// The sandbox's `/etc/group`.
pub(crate) fn group(ids: Ids) -> String {
    let sandbox = match ids.gid {
        0 => String::new(),
        gid => format!("sandbox:x:{gid}:\n"),
    };
    format!("root:x:0:\n{sandbox}nogroup:x:65534:\n")
}

/// The write paths of the run's copy-on-write layer, in the order of its `<i>` directories.
pub(crate) fn cow_paths(spec: &Spec) -> Vec<PathBuf> {
    user_binds(spec)
        .into_iter()
        .filter_map(|(p, writable)| writable.then_some(p))
        .collect()
}

/// The user paths to bind, write winning over read for the same path, parents before children.
fn user_binds(spec: &Spec) -> Vec<(PathBuf, bool)> {
    let mut binds: Vec<(PathBuf, bool)> =
        spec.write_paths.iter().map(|p| (p.clone(), true)).collect();
    for p in &spec.read_paths {
        if !spec.write_paths.contains(p) {
            binds.push((p.clone(), false));
        }
    }
    // Stable: for one path, its write entry (pushed first) stays first and wins the dedup.
    binds.sort_by(|a, b| (a.0.components().count(), &a.0).cmp(&(b.0.components().count(), &b.0)));
    binds.dedup_by(|a, b| a.0 == b.0);
    binds
}

/// Most directories a writable root may hold: finding every nested `.git` means walking it,
/// and a root too large to walk is refused rather than run with its metadata unprotected.
const MAX_SCAN_DIRS: usize = 50_000;

/// Every entry named in `PROTECTED_NAMES` under `root` (nested repositories and vendored
/// checkouts included), without following symlinks or descending into the entries themselves.
fn protected_entries(root: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0usize;
    while let Some(dir) = stack.pop() {
        visited += 1;
        if visited > MAX_SCAN_DIRS {
            return Err(StepError::invalid(
                "protect metadata",
                format!(
                    "the writable root `{}` holds more than {MAX_SCAN_DIRS} directories; corral cannot check it for nested `.git`/`.corral` metadata, so it refuses to bind it writable (narrow the root)",
                    root.display()
                ),
            ));
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let path = entry.path();
            if PROTECTED_NAMES.iter().any(|p| OsStr::new(p) == name) {
                found.push(path);
            } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    Ok(found)
}

/// Covers each of corral's own files and directories (`spec.hidden`: its state directory,
/// config and key files) that lies beneath one of the run's binds with an empty read-only
/// mount (a directory gets an empty tmpfs, a file `/dev/null` on a `nodev` mount, which cannot be
/// opened), so a read path that holds them shows the program nothing of corral's database,
/// audit or keys. A bind inside one of them is refused.
fn hide_own_files(root: &OwnedFd, spec: &Spec, covered: &[(PathBuf, OwnedFd)]) -> Result<()> {
    let ro = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    let binds = user_binds(spec);
    let hidden = spec
        .hidden
        .iter()
        .filter(|p| p.is_absolute() && !covered.iter().any(|(c, _)| p.starts_with(c)));
    for own in hidden {
        if let Some((b, _)) = binds.iter().find(|(b, _)| b.starts_with(own)) {
            return Err(StepError::invalid(
                "hide corral's files",
                format!(
                    "`{}` lies inside corral's own `{}` (its state, config or keys), which no run may see; bind another directory",
                    b.display(),
                    own.display()
                ),
            ));
        }
        if !binds.iter().any(|(b, _)| own.starts_with(b)) {
            continue;
        }
        let rel = relative(own)?;
        match std::fs::symlink_metadata(own) {
            Ok(m) if m.is_dir() => {
                let target = open_beneath(root, &rel, OFlags::DIRECTORY)
                    .map_err(|e| mount_err("hide", own, e))?;
                mount_tmpfs(
                    Path::new(&fd_path(&target)),
                    ro,
                    "mode=000,size=4096,nr_inodes=1",
                )?;
            }
            Ok(m) if m.is_file() => bind_to(root, Path::new("/dev/null"), &rel, ro)?,
            // A symlink's target is hidden by its resolved form, which `hidden` holds too;
            // what does not exist cannot be shown.
            _ => {}
        }
    }
    Ok(())
}

/// With host writes ([`super::spec::HostSpec`]), covers each of corral's trees kept out that
/// the view shows (it lies beneath a bind already made, `done`) before the first bind inside
/// it (`next`; `None`: every one left): a directory with an empty tmpfs (made read-only once
/// the binds inside it are in: [`finish`] remounts each of `covered`), a file with `/dev/null`.
/// So the view holds nothing of it but the run's own paths inside it (an agent's home and its
/// CLI's install in corral's state directory), whatever is made there meanwhile.
fn cover_kept_out(
    root: &OwnedFd,
    spec: &Spec,
    done: &[(PathBuf, bool)],
    next: Option<&Path>,
    covered: &mut Vec<(PathBuf, OwnedFd)>,
) -> Result<()> {
    let Some(host) = &spec.host else {
        return Ok(());
    };
    for k in &host.keep_out {
        let due = next.is_none_or(|n| n.starts_with(k) && n != k);
        let shown = done.iter().any(|(b, _)| k.starts_with(b) && k != b);
        let already = covered.iter().any(|(c, _)| k.starts_with(c));
        if !due || !shown || already {
            continue;
        }
        let rel = relative(k)?;
        match std::fs::symlink_metadata(k) {
            Ok(m) if m.is_dir() => {
                let target = open_beneath(root, &rel, OFlags::DIRECTORY)
                    .map_err(|e| mount_err("keep out", k, e))?;
                mount_tmpfs(
                    Path::new(&fd_path(&target)),
                    MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                    "mode=0711,size=64k,nr_inodes=1024",
                )?;
                let mounted = open_beneath(root, &rel, OFlags::DIRECTORY)
                    .map_err(|e| mount_err("keep out", k, e))?;
                covered.push((k.clone(), mounted));
            }
            Ok(m) if m.is_file() => bind_to(
                root,
                Path::new("/dev/null"),
                &rel,
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            )?,
            // What does not exist cannot be shown (the apply refuses making it); a symlink's
            // target is kept out by its resolved form.
            _ => {}
        }
    }
    Ok(())
}

/// Mounts the host's symlink `host` over itself beneath `root` (the new mount API attaches to
/// the symlink without following it): it still resolves, but can be neither removed nor
/// replaced.
fn pin_symlink(root: &OwnedFd, host: &Path) -> Result<()> {
    use rustix::mount::{MoveMountFlags, OpenTreeFlags};
    let err = |e: rustix::io::Errno| mount_err("pin symlink", host, e);
    let (Some(parent), Some(name)) = (host.parent(), host.file_name()) else {
        return Err(StepError::invalid("pin symlink", "no parent"));
    };
    let src_parent = rustix::fs::openat2(
        CWD,
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(err)?;
    let tree = rustix::mount::open_tree(
        &src_parent,
        name,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(err)?;
    let target_parent = open_beneath(root, &relative(parent)?, OFlags::DIRECTORY).map_err(err)?;
    rustix::mount::move_mount(
        &tree,
        "",
        &target_parent,
        name,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(err)
}

/// The view being built: its root tmpfs, not yet pivoted into.
#[derive(Debug)]
pub(crate) struct View {
    root: OwnedFd,
    root_dir: PathBuf,
    /// With `isolation.host_uids`: the host-uid assistant (`idmap.rs`), which makes the run's
    /// binds idmapped. Closed when the view is finished, before the target exists.
    idmap: Option<OwnedFd>,
}

impl View {
    /// The run's binds are idmapped ones made by the assistant at the end of `sock`.
    pub(crate) fn with_idmap(mut self, sock: Option<OwnedFd>) -> Self {
        self.idmap = sock;
        self
    }
}

/// Builds the request-independent part of the root view: the root tmpfs, the system
/// directories, `/etc`, `/proc` and `/dev` (without its `shm`). Runs in the sandbox's init (pid 1
/// of the new pid namespace, full capabilities in the new user namespace).
pub(crate) fn build_base(prep: &Prep, ids: Ids) -> Result<View> {
    let ro = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
    let root_dir = &prep.root_dir;

    // Nothing mounted here propagates back to the host.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| StepError::unavailable("make / private", e))?;
    mount_tmpfs(
        root_dir,
        MountFlags::NOSUID | MountFlags::NODEV,
        "mode=0755,size=16m,nr_inodes=4096",
    )?;
    let root = rustix::fs::open(
        root_dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| mount_err("open", root_dir, e))?;

    // System directories.
    for dir in SYSTEM_DIRS.iter().filter(|d| **d != "/etc") {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => copy_symlink(&root, path)?,
            Ok(m) if m.is_dir() => bind(&root, path, ro)?,
            _ => {}
        }
    }

    // /etc: the allow list and a passwd/group of our own.
    match &prep.etc {
        EtcSource::Snapshot { dir, dirs } => {
            bind_to(&root, dir, Path::new("etc"), ro)?;
            for name in dirs {
                let rel = relative(name)?;
                bind_to(
                    &root,
                    &Path::new("/etc").join(&rel),
                    &Path::new("etc").join(&rel),
                    ro,
                )?;
            }
        }
        EtcSource::AllowList => {
            make_beneath(&root, Path::new("etc"), false)?;
            for name in ETC_ALLOW {
                let path = Path::new("/etc").join(name);
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.file_type().is_symlink() => copy_symlink(&root, &path)?,
                    Ok(m) if m.is_dir() || m.is_file() => bind(&root, &path, ro)?,
                    _ => {}
                }
            }
            write_file(&root, "etc/passwd", &passwd(ids))?;
            write_file(&root, "etc/group", &group(ids))?;
        }
    }

    // /proc: the sandbox's own pid namespace (mounted while the host's /proc is still visible,
    // which the kernel requires inside a user namespace).
    let proc_dir = make_beneath(&root, Path::new("proc"), false)?;
    rustix::mount::mount(
        "proc",
        fd_path(&proc_dir),
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )
    .map_err(|e| mount_err("mount", Path::new("/proc"), e))?;
    drop(proc_dir);

    // /dev, read-only; its `shm` is a mount point for the run's tmpfs.
    let dev = root_dir.join("dev");
    make_beneath(&root, Path::new("dev"), false)?;
    mount_tmpfs(
        &dev,
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "mode=0755,size=64k,nr_inodes=64",
    )?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if std::fs::symlink_metadata(&host).is_ok() {
            bind(&root, &host, MountFlags::NOSUID | MountFlags::NOEXEC)?;
        }
    }
    for (link, target) in [
        ("dev/fd", "/proc/self/fd"),
        ("dev/stdin", "/proc/self/fd/0"),
        ("dev/stdout", "/proc/self/fd/1"),
        ("dev/stderr", "/proc/self/fd/2"),
    ] {
        rustix::fs::symlinkat(target, &root, link)
            .map_err(|e| mount_err("symlink", Path::new(link), e))?;
    }
    make_beneath(&root, Path::new("dev/shm"), false)?;
    let dev_fd = open_beneath(&root, Path::new("dev"), OFlags::DIRECTORY)
        .map_err(|e| mount_err("open", &dev, e))?;
    remount_bind(
        &dev_fd,
        MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NOEXEC,
        &dev,
    )?;
    drop(dev_fd);

    // /tmp's mount point.
    make_beneath(&root, Path::new("tmp"), false)?;
    Ok(View {
        root,
        root_dir: root_dir.clone(),
        idmap: None,
    })
}

/// A run's copy-on-write layer, as the helper needs it to apply the run's changes: the root of
/// its tmpfs (holding `<i>/upper` and `<i>/work` for the `i`-th write path) and each write
/// path's host directory, opened before `pivot_root` without following symlinks.
#[derive(Debug)]
pub(crate) struct CowLayer {
    pub(crate) tmpfs: OwnedFd,
    pub(crate) hosts: Vec<OwnedFd>,
    /// The directory held changes go to ([`crate::Hold::into`]), opened before `pivot_root`
    /// (the helper does not see the host's paths).
    pub(crate) hold: Option<OwnedFd>,
}

/// Makes the layer's tmpfs (`size=quota`, `nr_inodes` from it) and attaches it over `parent` in
/// the sandbox's mount namespace: the old root, detached at `pivot_root`, so the target never
/// sees it (and kernels before 6.15 refuse overlay layers on a mount that is not attached).
fn cow_tmpfs(cow: &CowSpec, parent: &Path) -> Result<OwnedFd> {
    use rustix::mount::{
        FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, fsconfig_create,
        fsconfig_set_string, fsmount, fsopen, move_mount,
    };
    let err = |e: rustix::io::Errno| StepError::unavailable("the copy-on-write tmpfs", e);
    let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).map_err(err)?;
    fsconfig_set_string(&fs, "size", cow.quota.max(4096).to_string()).map_err(err)?;
    fsconfig_set_string(&fs, "nr_inodes", cow_inodes(cow.quota).to_string()).map_err(err)?;
    fsconfig_set_string(&fs, "mode", "0700").map_err(err)?;
    fsconfig_create(&fs).map_err(err)?;
    let mnt = fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )
    .map_err(err)?;
    move_mount(
        &mnt,
        "",
        CWD,
        parent,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(err)?;
    Ok(mnt)
}

/// Mounts the `index`-th write path `path` as an overlay beneath `root`: lower the host
/// directory (opened without following symlinks), upper and work in the layer's tmpfs. Returns
/// the host directory.
///
/// With the host-uid assistant `idmap`, the lower is an idmapped read-only bind of the host
/// directory, mounted where the overlay then goes on top of it.
fn overlay(
    root: &OwnedFd,
    tmpfs: &OwnedFd,
    index: usize,
    path: &Path,
    idmap: Option<&OwnedFd>,
) -> Result<OwnedFd> {
    let step = |e: rustix::io::Errno| mount_err("overlay", path, e);
    let host = rustix::fs::openat2(
        CWD,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| {
        StepError::invalid(
            "overlay",
            format!(
                "cannot open the write path `{}` as a directory without following symlinks: {e}",
                path.display()
            ),
        )
    })?;
    let dir = index.to_string();
    rustix::fs::mkdirat(tmpfs, dir.as_str(), Mode::from_raw_mode(0o700)).map_err(step)?;
    for sub in ["upper", "work"] {
        rustix::fs::mkdirat(tmpfs, format!("{dir}/{sub}"), Mode::from_raw_mode(0o755))
            .map_err(step)?;
    }
    let rel = relative(path)?;
    let target = match idmap {
        Some(sock) => {
            bind_idmapped(root, sock, path, false)?;
            let lower = open_beneath(root, &rel, OFlags::DIRECTORY).map_err(step)?;
            // The top of the overlay is the upper directory: the lower's owner and mode.
            let st = rustix::fs::fstat(&lower).map_err(step)?;
            let upper = format!("{dir}/upper");
            rustix::fs::chownat(
                tmpfs,
                upper.as_str(),
                Some(rustix::fs::Uid::from_raw(st.st_uid)),
                Some(rustix::fs::Gid::from_raw(st.st_gid)),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(step)?;
            rustix::fs::chmodat(
                tmpfs,
                upper.as_str(),
                Mode::from_raw_mode(st.st_mode & 0o7777),
                rustix::fs::AtFlags::empty(),
            )
            .map_err(step)?;
            lower
        }
        None => make_beneath(root, &rel, false)?,
    };
    let lower = match idmap {
        Some(_) => fd_path(&target),
        None => fd_path(&host),
    };
    let layers = format!(
        "lowerdir={lower},upperdir={t}/{dir}/upper,workdir={t}/{dir}/work,userxattr",
        t = fd_path(tmpfs),
    );
    let data = std::ffi::CString::new(layers).map_err(|e| StepError::invalid("overlay", e))?;
    rustix::mount::mount(
        "overlay",
        fd_path(&target),
        "overlay",
        MountFlags::NOSUID | MountFlags::NODEV,
        data.as_c_str(),
    )
    .map_err(step)?;
    Ok(host)
}

/// The directories that hold programs. With an execute allow-list each is a fresh tmpfs
/// holding only the listed programs (and the symlinks that lead to them): landlock's execute
/// right governs `execve`, not the dynamic loader's `mmap`, so a readable program could
/// otherwise still be started as `ld.so /usr/bin/x`. One that is not in the view cannot be.
pub(crate) const PROGRAM_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/libexec",
    "/usr/games",
    "/usr/local/games",
    "/bin",
    "/sbin",
];

/// Directories outside [`PROGRAM_DIRS`] known to hold programs (a compiler's passes, git's
/// helpers, an interpreter such as LLVM's `lli`, whole toolchains): with an execute allow-list
/// each is hidden (an empty read-only tmpfs) unless a listed program lives in it, since the
/// dynamic loader could start one. `/usr/lib/llvm-*` is found by listing `/usr/lib`. What
/// stays in view elsewhere is the documented residual (docs/agents.md).
pub(crate) const PROGRAM_TREES: &[&str] = &[
    "/usr/local/libexec",
    "/usr/lib/git-core",
    "/usr/lib/gcc",
    "/usr/lib/jvm",
    "/usr/lib/postgresql",
    "/usr/lib/google-cloud-sdk",
    "/usr/lib/node_modules",
    "/usr/local/lib/node_modules",
    "/opt",
];

/// Hides each of [`PROGRAM_TREES`] (and `/usr/lib/llvm-*`) that holds none of `exec`.
fn hide_program_trees(root: &OwnedFd, exec: &[PathBuf]) -> Result<()> {
    let real: Vec<PathBuf> = exec
        .iter()
        .filter_map(|e| std::fs::canonicalize(e).ok())
        .chain(exec.iter().cloned())
        .collect();
    let llvm = std::fs::read_dir("/usr/lib")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("llvm-"))
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let trees = PROGRAM_TREES.iter().map(PathBuf::from).chain(llvm);
    for tree in trees {
        let is_dir = std::fs::symlink_metadata(&tree).is_ok_and(|m| m.is_dir());
        if !is_dir || real.iter().any(|e| e.starts_with(&tree)) {
            continue;
        }
        let Ok(under) = open_beneath(root, &relative(&tree)?, OFlags::DIRECTORY) else {
            continue; // Not in this view.
        };
        mount_tmpfs(
            Path::new(&fd_path(&under)),
            MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            "mode=0755,size=4k,nr_inodes=16",
        )?;
    }
    Ok(())
}

/// Most symlinks followed from one listed program to its file.
const MAX_PROGRAM_LINKS: usize = 16;

/// Replaces each of [`PROGRAM_DIRS`] in the view with a read-only tmpfs holding the programs of
/// `exec` that live there: each symlink on the way to one made again, its file bound read-only.
fn only_these_programs(root: &OwnedFd, exec: &[PathBuf]) -> Result<()> {
    let masked: Vec<&Path> = PROGRAM_DIRS
        .iter()
        .map(Path::new)
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .collect();
    // By descriptor: the view's root is no longer reachable by its path (the copy-on-write
    // tmpfs is attached over its parent).
    for dir in &masked {
        let under = open_beneath(root, &relative(dir)?, OFlags::DIRECTORY)
            .map_err(|e| mount_err("open", dir, e))?;
        mount_tmpfs(
            Path::new(&fd_path(&under)),
            MountFlags::NOSUID | MountFlags::NODEV,
            "mode=0755,size=64k,nr_inodes=4096",
        )?;
    }
    let ro = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
    for program in exec {
        let mut path = program.clone();
        for _ in 0..MAX_PROGRAM_LINKS {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                break;
            };
            let Ok(dir) = std::fs::canonicalize(parent) else {
                break;
            };
            if !masked.contains(&dir.as_path()) {
                break; // Outside the program directories: in the view as it is.
            }
            let host = dir.join(name);
            let rel = relative(&host)?;
            let present = open_beneath(root, &rel, OFlags::empty()).is_ok();
            match std::fs::symlink_metadata(&host) {
                Ok(m) if m.file_type().is_symlink() => {
                    if !present {
                        copy_symlink(root, &host)?;
                    }
                    let target = std::fs::read_link(&host)
                        .map_err(|e| StepError::unavailable("readlink", e))?;
                    path = dir.join(target);
                }
                Ok(m) if m.is_file() => {
                    if !present {
                        bind(root, &host, ro)?;
                    }
                    break;
                }
                _ => break,
            }
        }
    }
    for dir in &masked {
        let mounted = open_beneath(root, &relative(dir)?, OFlags::DIRECTORY)
            .map_err(|e| mount_err("reopen", dir, e))?;
        remount_bind(&mounted, ro, dir)?;
    }
    Ok(())
}

/// A plain bind of the host's `source`, or with `isolation.host_uids` an idmapped one (always
/// nosuid, nodev; and noexec when `flags` ask for it).
fn bind_user(
    root: &OwnedFd,
    idmap: Option<&OwnedFd>,
    source: &Path,
    flags: MountFlags,
) -> Result<()> {
    let Some(sock) = idmap else {
        return bind(root, source, flags);
    };
    bind_idmapped(root, sock, source, !flags.contains(MountFlags::RDONLY))?;
    if flags.contains(MountFlags::NOEXEC) {
        let mounted = open_beneath(root, &relative(source)?, OFlags::empty())
            .map_err(|e| mount_err("reopen", source, e))?;
        remount_bind(&mounted, flags, source)?;
    }
    Ok(())
}

/// The hold's directory ([`crate::Hold::into`]), opened on the host before `pivot_root`.
fn open_hold(h: &crate::Hold) -> Result<OwnedFd> {
    rustix::fs::openat2(
        CWD,
        &h.into,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| mount_err("open the hold", &h.into, e))
}

/// The run's copy-on-write layer, if it has one: its tmpfs, over the directory holding the
/// per-run directories (in this mount namespace only; the host sees nothing), and its hold.
fn new_layer(spec: &Spec, root_dir: &Path) -> Result<Option<CowLayer>> {
    match (&spec.cow, spec.write_paths.is_empty()) {
        (Some(cow), false) => {
            let parent = root_dir
                .parent()
                .ok_or_else(|| StepError::invalid("the copy-on-write tmpfs", "no parent"))?;
            Ok(Some(CowLayer {
                tmpfs: cow_tmpfs(cow, parent)?,
                hosts: Vec::new(),
                hold: cow.hold.as_ref().map(open_hold).transpose()?,
            }))
        }
        _ => Ok(None),
    }
}

/// Binds each protected metadata entry ([`PROTECTED_NAMES`]) found in the writable root `path`
/// read-only over itself (a symlink pinned).
fn protect_metadata(
    root: &OwnedFd,
    idmap: Option<&OwnedFd>,
    path: &Path,
    flags: MountFlags,
) -> Result<()> {
    for meta in protected_entries(path)? {
        match std::fs::symlink_metadata(&meta) {
            Ok(m) if m.file_type().is_symlink() => pin_symlink(root, &meta)?,
            Ok(m) if m.is_dir() || m.is_file() => bind_user(root, idmap, &meta, flags)?,
            _ => {}
        }
    }
    Ok(())
}

/// Finishes the view for one run: its `/tmp` and `/dev/shm`, the request's paths, then pivots
/// into it and makes `/` read-only. Returns the run's copy-on-write layer, if it has one.
pub(crate) fn finish(view: View, spec: &Spec) -> Result<Option<CowLayer>> {
    let ro = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
    let View {
        root,
        root_dir,
        idmap,
    } = view;
    let idmap = idmap.as_ref();
    let bind_user = |source: &Path, flags: MountFlags| bind_user(&root, idmap, source, flags);
    // With an execute allow-list, a read path runs nothing either, unless it holds a listed
    // program (the agent CLI's install): landlock does not govern the loader's `mmap`.
    let read_flags = |path: &Path| match &spec.exec_only {
        Some(exec)
            if !exec
                .iter()
                .any(|e| e.starts_with(path) || path.starts_with(e)) =>
        {
            ro | MountFlags::NOEXEC
        }
        Some(_) | None => ro,
    };
    let meta_flags = match spec.exec_only {
        Some(_) => ro | MountFlags::NOEXEC,
        None => ro,
    };

    // With an execute allow-list nothing writable may hold code: landlock's execute right
    // covers `execve`, not the dynamic loader's `mmap` of a file it was handed
    // (`ld.so ./mine`), which `noexec` refuses.
    let writable_flags = match spec.exec_only {
        Some(_) => MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None => MountFlags::NOSUID | MountFlags::NODEV,
    };
    let tmpfs_opts = |mode: &str| format!("mode={mode},size={}", spec.tmp_bytes.max(4096));
    mount_tmpfs(
        &root_dir.join("dev/shm"),
        writable_flags,
        &tmpfs_opts("1777"),
    )?;
    mount_tmpfs(&root_dir.join("tmp"), writable_flags, &tmpfs_opts("1777"))?;

    let mut layer = new_layer(spec, &root_dir)?;

    // The request's paths (with host writes, corral's trees among them covered first).
    let binds = user_binds(spec);
    let mut covered = Vec::new();
    for (i, (path, writable)) in binds.iter().cloned().enumerate() {
        cover_kept_out(
            &root,
            spec,
            binds.get(..i).unwrap_or_default(),
            Some(&path),
            &mut covered,
        )?;
        let flags = if writable {
            writable_flags
        } else {
            read_flags(&path)
        };
        match (&mut layer, writable) {
            (Some(layer), true) => {
                // INVARIANT (layer-order): `hosts[i]` is the host directory of the overlay whose
                // upper is `<i>/upper`, in the order user_binds gives.
                let host = overlay(&root, &layer.tmpfs, layer.hosts.len(), &path, idmap)?;
                layer.hosts.push(host);
                if spec.exec_only.is_some() {
                    let mounted = open_beneath(&root, &relative(&path)?, OFlags::empty())
                        .map_err(|e| mount_err("reopen", &path, e))?;
                    remount_bind(&mounted, writable_flags, &path)?;
                }
            }
            _ => bind_user(&path, flags)?,
        }
        let host_root = spec.host.as_ref().is_some_and(|h| h.roots.contains(&path));
        if writable && !host_root {
            protect_metadata(&root, idmap, &path, meta_flags)?;
        }
    }

    cover_kept_out(&root, spec, &binds, None, &mut covered)?;
    hide_own_files(&root, spec, &covered)?;
    for (cover, fd) in &covered {
        remount_bind(fd, ro | MountFlags::NOEXEC, cover)?;
    }
    drop(covered);
    if let Some(exec) = &spec.exec_only {
        only_these_programs(&root, exec)?;
        hide_program_trees(&root, exec)?;
    }

    // Into the new root; the old one is detached, so nothing of the host is reachable.
    rustix::process::fchdir(&root).map_err(|e| StepError::unavailable("chdir new root", e))?;
    rustix::process::pivot_root(".", ".").map_err(|e| StepError::unavailable("pivot_root", e))?;
    rustix::mount::unmount(".", UnmountFlags::DETACH)
        .map_err(|e| StepError::unavailable("detach the old root", e))?;
    rustix::process::chdir("/").map_err(|e| StepError::unavailable("chdir /", e))?;
    drop(root);
    let new_root = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| StepError::unavailable("open /", e))?;
    remount_bind(&new_root, ro, Path::new("/"))?;
    Ok(layer)
}

/// Whether `path` is one the sandbox refuses to bind (`/`, or under `/proc`, `/sys`, `/dev`).
pub(crate) fn forbidden(path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    path == Path::new("/")
        || ["/proc", "/sys", "/dev"]
            .iter()
            .any(|p| path.starts_with(p))
        || bytes.is_empty()
}

/// Brings `lo` up in the sandbox's network namespace.
pub(crate) fn loopback_up() -> std::result::Result<(), String> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("socket: {e}"))?;
    let fd = sock.as_fd().as_raw_fd();
    #[expect(
        unsafe_code,
        reason = "SIOCGIFFLAGS/SIOCSIFFLAGS have no safe wrapper in rustix"
    )]
    // SAFETY: `ifr` is a zeroed, properly sized `ifreq` that lives across both calls; the name
    // is NUL-terminated within `IFNAMSIZ`; `fd` is an open socket owned by `sock`.
    unsafe {
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (dst, src) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            return Err(format!("SIOCGIFFLAGS: {}", std::io::Error::last_os_error()));
        }
        ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr) < 0 {
            return Err(format!("SIOCSIFFLAGS: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}
