//! `isolation.host_uids`: when corral runs as host root, the sandboxed program runs as an
//! unprivileged host uid instead (uid 0 of the sandbox's user namespace is `start` on the host),
//! and the run's own paths are idmapped mounts, so their files keep their owner.
//!
//! - The sandbox's user namespace maps inside `0..count` to the host's `start..start+count`
//!   (gids likewise), but for one id, [`ROOT_INSIDE`] (65534, `nobody`), which is host root: only
//!   the helper and the sandbox's init ever hold it (the init builds the root view with it, so host directories
//!   only root can traverse stay reachable while it does), and the init leaves it for inside 0
//!   before it forks the target. The target, and everything it forks, is host uid `start`: not
//!   root, so `RLIMIT_NPROC` binds it (per user namespace since Linux 5.14), and a kernel bug in
//!   the namespace code reaches no root-owned process.
//! - Writing a map other than one's own id needs `CAP_SETUID` in the parent namespace, and an
//!   idmapped mount needs `CAP_SYS_ADMIN` over the filesystem's (the host's) namespace: neither
//!   is left once the helper unshared. So the helper forks an **assistant** first, which stays
//!   in the host's namespaces as root, writes the maps when the helper asks, and then makes each
//!   of the run's binds for the init: `open_tree(OPEN_TREE_CLONE)` of the host path (opened
//!   without following symlinks), `mount_setattr(MOUNT_ATTR_IDMAP)` with the sandbox's user
//!   namespace (plus `nosuid`, `nodev`, and `rdonly` unless writable), handed over as a
//!   descriptor the init attaches with `move_mount`. With that idmapping a file of host owner X
//!   is owned by inside X (host root's are inside root's, the program's own), and what the
//!   program creates as inside X is X on the host: host root for inside root, exactly as
//!   without the mode. The assistant serves only the init, which closes its end before the
//!   target exists, and exits with it.
//! - System directories (`/usr`, ...) are plain read-only binds: root's files there show as
//!   `nobody` inside and stay readable through their mode bits.
//! - A write path of a one-shot run is an overlay whose lower is the idmapped bind; its upper
//!   directory takes the lower's owner and mode, as overlayfs gives every directory it copies
//!   up (the program could not create anything at its top otherwise).

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};

use super::mounts::StepError;

/// The inside id of host root (uid and gid) in the sandbox's user namespace: 65534, `nobody`,
/// the id the kernel shows for every unmapped one. So host root's files (`/usr`, ...) show as
/// `nobody` inside, as unmapped ids would; only the helper and the init hold it, and the init
/// leaves it before the target exists. A host file owned by 65534 shows as `nobody` through an
/// idmapped bind too (it is host root's to the kernel there, which gives the program nothing).
pub(crate) const ROOT_INSIDE: u32 = 65534;

/// The attestation that the program runs as an unprivileged host uid (inside root mapped to
/// the start of a subordinate range), never host root.
pub(crate) const PRIMITIVE: &str = "uid:host-unprivileged";

/// Largest request or reply on the assistant's socket.
const MAX_MESSAGE: usize = 8192;

/// The host ids a sandbox's user namespace maps inside `0..count` to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRange {
    /// First host uid (inside uid 0).
    pub uid: u32,
    /// First host gid (inside gid 0).
    pub gid: u32,
    /// How many ids; inside uid 0 to `count - 1`.
    pub count: u32,
}

impl HostRange {
    /// Checks the range: it may not include host id 0, must hold inside 0..65534 (65534 is
    /// [`ROOT_INSIDE`]) and must not wrap around.
    pub fn checked(uid: u32, gid: u32, count: u32) -> Result<Self, String> {
        let fits = |start: u32| start > 0 && start.checked_add(count).is_some();
        if count < 65535 {
            return Err(format!(
                "a host id range of {count} ids is too small: the sandbox needs inside ids 0 to 65534 (at least 65535)"
            ));
        }
        if !fits(uid) || !fits(gid) {
            return Err(format!(
                "the host id range starting at uid {uid}, gid {gid} with {count} ids includes host id 0 or passes 2^32"
            ));
        }
        Ok(HostRange { uid, gid, count })
    }

    /// `/proc/<pid>/uid_map` or `gid_map` for this range: inside `0..count` to the range,
    /// except [`ROOT_INSIDE`], host root's.
    fn map(self, start: u32) -> String {
        let mut map = format!("0 {start} {ROOT_INSIDE}\n{ROOT_INSIDE} 0 1\n");
        let above = ROOT_INSIDE + 1;
        if self.count > above {
            map.push_str(&format!(
                "{above} {} {}\n",
                u64::from(start) + u64::from(above),
                self.count - above
            ));
        }
        map
    }
}

/// The range `auto` takes when `/etc/subuid` and `/etc/subgid` have no `corral` entry: 65536 ids
/// from 0x7000_0000 (1879048192). That is past every range `useradd` hands out
/// (`SUB_UID_MAX` defaults to 600100000), past the range systemd-nspawn picks from
/// (524288 to 1879048191), and below systemd's foreign range (from 2147352576) and ids that
/// read as negative in 32 bits: in systemd's table of uid ranges, 1879048192 to 2147352575 is
/// unused. No login user has such a uid.
pub const DEFAULT_HOST_RANGE: HostRange = HostRange {
    uid: 0x7000_0000,
    gid: 0x7000_0000,
    count: 65536,
};

/// `isolation.host_uids`: which host ids a sandbox runs as when corral is host root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostUids {
    /// A range for corral: its `corral` entries in `/etc/subuid` and `/etc/subgid`, else
    /// [`DEFAULT_HOST_RANGE`].
    #[default]
    Auto,
    /// Map host root itself (the program is host root, without capabilities).
    Root,
    /// This range.
    Range(HostRange),
}

impl HostUids {
    /// `auto`, `root`, or `START:COUNT` (the same START for uids and gids).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(HostUids::Auto),
            "root" => Ok(HostUids::Root),
            _ => {
                let parsed = s
                    .split_once(':')
                    .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
                let Some((start, count)) = parsed else {
                    return Err(format!(
                        "`{s}` is not a host id mode: write `auto`, `root` or `START:COUNT` (e.g. `1879048192:65536`)"
                    ));
                };
                HostRange::checked(start, start, count).map(HostUids::Range)
            }
        }
    }

    /// `isolation.host_uids` as the config gives it: [`Self::parse`], `auto` when absent.
    pub fn from_setting(written: Option<&str>) -> Result<Self, String> {
        written.map_or(Ok(HostUids::Auto), Self::parse)
    }

    /// The range it names on this host, read from `/etc/subuid` and `/etc/subgid` for `auto`.
    /// `None` for `root`.
    pub fn resolve(self) -> Result<Option<HostRange>, String> {
        self.resolve_from(Path::new("/etc/subuid"), Path::new("/etc/subgid"))
    }

    /// [`Self::resolve`] with the files given.
    pub fn resolve_from(self, subuid: &Path, subgid: &Path) -> Result<Option<HostRange>, String> {
        match self {
            HostUids::Root => Ok(None),
            HostUids::Range(r) => Ok(Some(r)),
            HostUids::Auto => {
                let (uid, gid) = (sub_entry(subuid), sub_entry(subgid));
                match (uid, gid) {
                    (Some((uid, ucount)), Some((gid, gcount))) => {
                        HostRange::checked(uid, gid, ucount.min(gcount))
                            .map(Some)
                            .map_err(|e| {
                                format!(
                                    "the `corral` entries of {} and {}: {e}; fix them, or set `isolation.host_uids` to a range",
                                    subuid.display(),
                                    subgid.display()
                                )
                            })
                    }
                    _ => Ok(Some(DEFAULT_HOST_RANGE)),
                }
            }
        }
    }
}

/// The `corral:START:COUNT` line of a subordinate id file.
fn sub_entry(file: &Path) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.trim().split(':');
        (f.next()? == "corral").then_some(())?;
        Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
    })
}

/// The helper's end of its assistant.
#[derive(Debug)]
pub(crate) struct Assistant {
    pid: Pid,
    sock: OwnedFd,
}

impl Assistant {
    /// Forks the assistant. Called by the (single-threaded) helper before it unshares anything
    /// or joins the run's cgroups: the assistant stays in the host's namespaces and cgroup.
    pub(crate) fn start(range: HostRange) -> Result<Self, StepError> {
        let err = |e| StepError::unavailable("start the host-uid assistant", e);
        let (mine, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(err)?;
        let helper = rustix::process::getpid();
        #[expect(unsafe_code, reason = "fork of the single-threaded helper")]
        // SAFETY: the helper is single-threaded (no runtime, no thread was started), so the
        // child may run any code after `fork`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(err(rustix::io::Errno::from_raw_os_error(
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            )));
        }
        if pid == 0 {
            drop(mine);
            serve(theirs, range, helper);
        }
        let pid = Pid::from_raw(pid).ok_or_else(|| err(rustix::io::Errno::SRCH))?;
        Ok(Assistant { pid, sock: mine })
    }

    /// Has the assistant write this process's (just unshared) uid and gid maps.
    pub(crate) fn write_maps(&self) -> Result<(), StepError> {
        request(&self.sock, b"M").map(drop)
    }

    /// The socket, for the init (it asks for its binds on it).
    pub(crate) fn socket(&self) -> Result<OwnedFd, StepError> {
        rustix::io::dup(&self.sock)
            .map_err(|e| StepError::unavailable("hand the host-uid assistant to the init", e))
    }

    /// Closes the helper's end (the assistant ends once the init closed its own); its pid, to
    /// [`reap`].
    pub(crate) fn detach(self) -> Pid {
        self.pid
    }
}

/// Ends the assistant `pid` (it has ended already when the init closed its end) and reaps it.
pub(crate) fn reap(pid: Pid) {
    let _ = rustix::process::kill_process(pid, Signal::KILL);
    let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
}

/// Asks the assistant for an idmapped, detached copy of the host's `path` (read-only unless
/// `writable`), on `sock` (the init's end). The tree is `nosuid`, `nodev`.
pub(crate) fn tree(sock: &OwnedFd, path: &Path, writable: bool) -> Result<OwnedFd, StepError> {
    let mut msg = vec![if writable { b'W' } else { b'R' }];
    msg.extend_from_slice(path.as_os_str().as_bytes());
    request(sock, &msg)?.ok_or_else(|| {
        StepError::unavailable(
            format!("idmap `{}`", path.display()),
            "the assistant sent no mount",
        )
    })
}

/// Sends `msg`, returns the descriptor of a `+` reply (if it came with one), or the error of a
/// `-` reply.
fn request(sock: &OwnedFd, msg: &[u8]) -> Result<Option<OwnedFd>, StepError> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags, recvmsg};
    let what = match msg.first() {
        Some(b'M') => "write the uid and gid maps".to_owned(),
        _ => format!(
            "idmap `{}`",
            Path::new(OsStr::from_bytes(msg.get(1..).unwrap_or_default())).display()
        ),
    };
    rustix::net::send(sock, msg, SendFlags::empty())
        .map_err(|e| StepError::unavailable(&what, format!("the host-uid assistant: {e}")))?;
    let mut space = vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut reply = vec![0u8; MAX_MESSAGE];
    let got = loop {
        match recvmsg(
            sock,
            &mut [std::io::IoSliceMut::new(&mut reply)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => {}
            r => break r,
        }
    }
    .map_err(|e| StepError::unavailable(&what, format!("the host-uid assistant: {e}")))?;
    let mut fd = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            for r in rights {
                fd.get_or_insert(r);
            }
        }
    }
    match reply.get(..got.bytes) {
        Some([b'+']) => Ok(fd),
        Some([b'-', error @ ..]) => Err(StepError::unavailable(
            what,
            String::from_utf8_lossy(error).into_owned(),
        )),
        _ => Err(StepError::unavailable(
            what,
            "the host-uid assistant is gone",
        )),
    }
}

/// The assistant: serves the helper (the maps) and then the init (the binds) until both closed
/// their ends. Never returns.
fn serve(sock: OwnedFd, range: HostRange, helper: Pid) -> ! {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    if rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).is_err()
        || rustix::process::getppid() != Some(helper)
    {
        std::process::exit(0);
    }
    // Holds none of the helper's descriptors: its stdio and the status pipe would keep their
    // readers waiting for it.
    keep_only(&sock);
    let mut userns: Option<OwnedFd> = None;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let n = match rustix::net::recv(&sock, &mut buf, rustix::net::RecvFlags::empty()) {
            Ok((0, _)) => std::process::exit(0),
            Ok((n, _)) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => std::process::exit(0),
        };
        let msg = buf.get(..n).unwrap_or_default();
        let result: Result<Option<OwnedFd>, String> = match msg.split_first() {
            Some((b'M', [])) => write_maps(helper, range).and_then(|()| {
                let ns = rustix::fs::open(
                    format!("/proc/{}/ns/user", helper.as_raw_nonzero()),
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| format!("open the sandbox's user namespace: {e}"))?;
                userns = Some(ns);
                Ok(None)
            }),
            Some((kind @ (b'R' | b'W'), path)) => match &userns {
                Some(ns) => {
                    make_tree(Path::new(OsStr::from_bytes(path)), *kind == b'W', ns).map(Some)
                }
                None => Err("the maps are not written yet".into()),
            },
            _ => Err("unknown request".into()),
        };
        let _ = match result {
            Ok(None) => rustix::net::send(&sock, b"+", SendFlags::empty()),
            Ok(Some(fd)) => {
                let fds = [fd.as_fd()];
                let mut space =
                    vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
                let mut control = SendAncillaryBuffer::new(&mut space);
                control.push(SendAncillaryMessage::ScmRights(&fds));
                sendmsg(
                    &sock,
                    &[std::io::IoSlice::new(b"+")],
                    &mut control,
                    SendFlags::empty(),
                )
            }
            Err(e) => {
                let mut reply = b"-".to_vec();
                reply.extend_from_slice(e.as_bytes());
                reply.truncate(MAX_MESSAGE);
                rustix::net::send(&sock, &reply, SendFlags::empty())
            }
        };
    }
}

/// Closes every descriptor but `sock`, and points stdin, stdout and stderr at `/dev/null`.
fn keep_only(sock: &OwnedFd) {
    let keep = u32::try_from(sock.as_raw_fd()).unwrap_or(u32::MAX);
    if let Ok(null) = rustix::fs::open("/dev/null", OFlags::RDWR, Mode::empty()) {
        for fd in 0..3 {
            #[expect(unsafe_code, reason = "dup2 onto the standard descriptors")]
            // SAFETY: `null` is open; replacing 0, 1 and 2 invalidates no owned descriptor of
            // this process (none is held for them).
            let _ = unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    for (first, last) in [
        (3, keep.saturating_sub(1)),
        (keep.saturating_add(1), u32::MAX),
    ] {
        if first > last {
            continue;
        }
        #[expect(unsafe_code, reason = "close_range has no safe wrapper in rustix")]
        // SAFETY: closes descriptors other than `sock`; the assistant only ever uses `sock` and
        // what it opens afterwards (the `/dev/null` above is closed too, its copies stay).
        let _ = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    }
}

/// Writes `helper`'s `setgroups` (`deny`), `uid_map` and `gid_map`.
fn write_maps(helper: Pid, range: HostRange) -> Result<(), String> {
    let pid = helper.as_raw_nonzero();
    for (file, contents) in [
        ("setgroups", "deny".to_owned()),
        ("uid_map", range.map(range.uid)),
        ("gid_map", range.map(range.gid)),
    ] {
        std::fs::write(format!("/proc/{pid}/{file}"), contents)
            .map_err(|e| format!("write /proc/{pid}/{file}: {e}"))?;
    }
    Ok(())
}

/// `mount_setattr(2)`'s argument.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// An idmapped (with `userns`), detached, non-recursive copy of the host's `path`, opened
/// without following symlinks.
fn make_tree(path: &Path, writable: bool, userns: &OwnedFd) -> Result<OwnedFd, String> {
    use rustix::mount::OpenTreeFlags;
    let src = rustix::fs::openat2(
        CWD,
        path,
        OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| {
        format!(
            "cannot open `{}` without following symlinks: {e}",
            path.display()
        )
    })?;
    let tree = rustix::mount::open_tree(
        &src,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )
    .map_err(|e| format!("open_tree: {e}"))?;
    let mut set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if !writable {
        set |= MOUNT_ATTR_RDONLY;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: u64::try_from(userns.as_raw_fd()).unwrap_or(u64::MAX),
    };
    #[expect(unsafe_code, reason = "mount_setattr has no wrapper in rustix")]
    // SAFETY: `tree` is an open mount descriptor, the path is a NUL-terminated empty string, and
    // `attr` is a properly laid out `struct mount_attr` of the size passed, alive for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "the filesystem of `{}` cannot be idmapped (mount_setattr: {e}); move the path to one that can (ext4, xfs, btrfs, tmpfs, overlayfs), or set `isolation.host_uids: root` to run as host root there",
            path.display()
        ));
    }
    Ok(tree)
}

/// In the init, once the view is built: leaves host root for inside root (host `range.uid`),
/// and checks it. Drops the parent-death signal's reset by the change.
pub(crate) fn become_unprivileged(range: HostRange) -> Result<(), StepError> {
    let step = "switch to the unprivileged host uid";
    let err = |e: rustix::io::Errno| StepError::unavailable(step, e);
    let zero_gid = rustix::process::Gid::ROOT;
    let zero_uid = rustix::process::Uid::ROOT;
    rustix::thread::set_thread_res_gid(zero_gid, zero_gid, zero_gid).map_err(err)?;
    rustix::thread::set_thread_res_uid(zero_uid, zero_uid, zero_uid).map_err(err)?;
    // A credential change resets it.
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(err)?;
    let map = std::fs::read_to_string("/proc/self/uid_map")
        .map_err(|e| StepError::unavailable(step, e))?;
    let want = (0u64, u64::from(range.uid), u64::from(ROOT_INSIDE));
    let mapped = map.lines().any(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        f.as_slice() == [want.0, want.1, want.2]
    });
    if !mapped
        || !rustix::process::getuid().is_root()
        || !rustix::process::geteuid().is_root()
        || !rustix::process::getgid().is_root()
    {
        return Err(StepError::unavailable(
            step,
            format!("the ids are not the range's: uid_map is `{}`", map.trim()),
        ));
    }
    Ok(())
}
