//! The backend's prepared `/etc`: a private host directory holding a copy of the allowed files
//! and symlinks of the host's `/etc` (`mounts::ETC_ALLOW`; symlinks copied as symlinks, nothing
//! followed), an empty mount point for each allowed directory, and the sandbox's own
//! `passwd`/`group`. Each sandbox binds it read-only at `/etc` in one mount, then binds each
//! allowed host directory (`alternatives`, `ssl/certs`, ...) on its mount point, instead of one
//! bind and one remount per allowed entry.
//!
//! The copy stays the host's: before each run the backend re-checks the `lstat` of every allowed
//! name, and makes a new copy when any of them changed. The directories are the host's own,
//! bound when a sandbox is built; one that changed (an entry added, removed or renamed) makes a
//! new copy too, so that no warm sandbox built before the change is used.
//!
//! The copy is shared by this user's corral processes ([`Snapshot::shared`]): a one-shot
//! `corral run` finds the copy an earlier process made from the same host entries (the stamps
//! it recorded) and makes none. A copy is made in a directory of its maker's and renamed into
//! place; every process using one holds a shared `flock` on it, and a copy no longer current is
//! removed only by a process that can lock it exclusively. A private copy (made when the shared
//! copy's name holds one that cannot be used) is removed when the last run (or warm sandbox)
//! using it is gone.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::mounts::{self, ETC_ALLOW, Ids};

/// The host's `/etc`.
const HOST_ETC: &str = "/etc";
/// Most bytes a copy may hold: an `/etc` past it is refused rather than copied without bound.
const MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Most bytes of a shared copy's `stamps` read.
const MAX_STAMPS_BYTES: u64 = 64 * 1024;

/// Numbers the copies made by this process.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// What `lstat` says about an entry, enough to notice a change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Self {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::symlink_metadata(path).ok().map(|m| Stamp::of(&m))
}

/// One copy of the allowed `/etc`.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The copy (canonical).
    dir: PathBuf,
    /// Which copy of this process it is.
    generation: u64,
    /// The host entries it was made from, as they were.
    stamps: Vec<(PathBuf, Option<Stamp>)>,
    /// The allowed directories (relative to `/etc`), each bound live on its mount point.
    dirs: Vec<PathBuf>,
    /// What is removed with the copy: `dir` itself for a private copy; for a shared one its
    /// `etc-s-<key>` directory, once no process uses it and it is no longer current.
    top: PathBuf,
    /// A shared copy's `top`, open and locked shared while this process uses it.
    lock: Option<OwnedFd>,
}

impl Snapshot {
    /// Copies the allowed entries of the host's `/etc` into a new directory under `base` (a
    /// private directory of corral's user), removed with the snapshot.
    #[cfg(test)]
    pub(crate) fn build(base: &Path, ids: Ids) -> Result<Self, String> {
        Self::build_from(Path::new(HOST_ETC), base, ids)
    }

    /// [`Snapshot::build`] from `etc` instead of the host's `/etc`.
    #[cfg(test)]
    fn build_from(etc: &Path, base: &Path, ids: Ids) -> Result<Self, String> {
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("etc-{}-{generation}", std::process::id()));
        let made = fill(etc, &dir, ids).and_then(|(stamps, dirs)| {
            std::fs::canonicalize(&dir)
                .map(|canonical| (canonical, stamps, dirs))
                .map_err(|e| format!("{}: {e}", dir.display()))
        });
        match made {
            Ok((canonical, stamps, dirs)) => Ok(Snapshot {
                top: canonical.clone(),
                dir: canonical,
                generation,
                stamps,
                dirs,
                lock: None,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(format!("cannot prepare the sandbox's /etc: {e}"))
            }
        }
    }

    /// The copy shared by this user's corral processes: one made from the same host entries
    /// (the same `lstat` stamps and the same sandbox `passwd` and `group`, recorded in its
    /// `stamps`) is reused; otherwise one is made in a directory of this process's and renamed
    /// into place, unless another process was first. `base` is the runtime directory: this
    /// user's own and 0700 (see `ensure_dir`), so no other user can have written what is found
    /// there. Each user of a copy holds a shared `flock` on it; a copy that is no longer current
    /// is removed by whoever can then lock it exclusively (the process that makes the next copy,
    /// or its last user), after renaming it away, so a process that waited for the lock sees
    /// that the name no longer holds it.
    pub(crate) fn shared(base: &Path, ids: Ids) -> Result<Self, String> {
        Self::shared_from(Path::new(HOST_ETC), base, ids)
    }

    /// [`Snapshot::shared`] from `etc` instead of the host's `/etc`.
    fn shared_from(etc: &Path, base: &Path, ids: Ids) -> Result<Self, String> {
        let stamps = host_stamps(etc);
        let text = stamps_text(&stamps, ids);
        if let Some(snap) = open_shared(&shared_dir(base, &text), stamps, &text)? {
            return Ok(snap);
        }
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        let tmp = base.join(format!("etc-{}-t{generation}", std::process::id()));
        let made = (|| {
            make_dir(&tmp, 0o700)?;
            let (stamps, dirs) = fill(etc, &tmp.join("etc"), ids)?;
            let text = stamps_text(&stamps, ids);
            write_new(&tmp.join("stamps"), text.as_bytes(), 0o600)?;
            let lock = open_dir(&tmp).map_err(|e| format!("open {}: {e}", tmp.display()))?;
            flock(&lock, rustix::fs::FlockOperation::LockShared)
                .map_err(|e| format!("flock {}: {e}", tmp.display()))?;
            Ok::<_, String>((stamps, dirs, text, lock))
        })();
        let (stamps, dirs, text, lock) = match made {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(format!("cannot prepare the sandbox's /etc: {e}"));
            }
        };
        let outer = shared_dir(base, &text);
        let rename = || {
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &tmp,
                rustix::fs::CWD,
                &outer,
                rustix::fs::RenameFlags::NOREPLACE,
            )
        };
        let mut renamed = rename().is_ok();
        if !renamed {
            // Another process was first: its copy, when it was made from the same entries.
            if let Some(snap) = open_shared(&outer, stamps.clone(), &text)? {
                drop(lock);
                let _ = std::fs::remove_dir_all(&tmp);
                return Ok(snap);
            }
            // A copy at that name that does not match goes once no process uses it.
            if let Ok(fd) = open_dir(&outer) {
                remove_if_unused(base, &outer, &fd);
            }
            renamed = rename().is_ok();
        }
        // Else this copy stays private to this process.
        let (outer, shared) = if renamed {
            sweep_shared(base, &outer);
            (outer, true)
        } else {
            (tmp, false)
        };
        let copy = outer.join("etc");
        let dir = match std::fs::canonicalize(&copy) {
            Ok(d) => d,
            Err(e) => {
                if !shared {
                    let _ = std::fs::remove_dir_all(&outer);
                }
                return Err(format!(
                    "cannot prepare the sandbox's /etc: {}: {e}",
                    copy.display()
                ));
            }
        };
        Ok(Snapshot {
            dir,
            generation,
            stamps,
            dirs,
            top: outer,
            lock: shared.then_some(lock),
        })
    }

    /// Whether every host entry it was made from is unchanged.
    pub(crate) fn is_current(&self) -> bool {
        self.stamps.iter().all(|(path, st)| stamp(path) == *st)
    }

    /// The directory bound at `/etc`.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Which copy of this process it is.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The allowed directories, relative to `/etc`: each is bound from the host on its (empty)
    /// mount point in the copy.
    pub(crate) fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        match &self.lock {
            // A shared copy stays for the next process while it is current.
            Some(fd) => {
                if !self.is_current()
                    && let Some(base) = self.top.parent()
                {
                    remove_if_unused(base, &self.top, fd);
                }
            }
            None => {
                if let Err(e) = std::fs::remove_dir_all(&self.top) {
                    tracing::warn!(dir = %self.top.display(), error = %e, "cannot remove a copy of /etc");
                }
            }
        }
    }
}

/// Copies the allowed entries of `etc` into the new directory `dir`, with the sandbox's own
/// `passwd` and `group`; returns the stamps of the host entries and the allowed directories.
#[expect(clippy::type_complexity, reason = "two lists, named at the call sites")]
fn fill(
    etc: &Path,
    dir: &Path,
    ids: Ids,
) -> Result<(Vec<(PathBuf, Option<Stamp>)>, Vec<PathBuf>), String> {
    let mut stamps = Vec::new();
    let mut dirs = Vec::new();
    let mut bytes = 0u64;
    make_dir(dir, 0o755)?;
    for name in ETC_ALLOW {
        let src = etc.join(name);
        let meta = std::fs::symlink_metadata(&src).ok();
        stamps.push((src.clone(), meta.as_ref().map(Stamp::of)));
        let Some(meta) = meta else {
            continue;
        };
        let dst = dir.join(name);
        if let Some(parent) = dst.parent().filter(|p| *p != dir) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|e| format!("mkdir {}: {e}", parent.display()))?;
            set_mode(parent, 0o755)?;
        }
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(|e| format!("{}: {e}", src.display()))?;
            std::os::unix::fs::symlink(&target, &dst)
                .map_err(|e| format!("symlink {}: {e}", dst.display()))?;
        } else if kind.is_dir() {
            make_dir(&dst, meta.mode() & 0o777)?;
            dirs.push(PathBuf::from(name));
        } else if kind.is_file() {
            bytes = bytes.saturating_add(meta.size());
            if bytes > MAX_BYTES {
                return Err(format!(
                    "/etc's allowed files hold more than {MAX_BYTES} bytes"
                ));
            }
            copy_file(&src, &dst, meta.mode() & 0o777)?;
        }
    }
    write_new(&dir.join("passwd"), mounts::passwd(ids).as_bytes(), 0o644)?;
    write_new(&dir.join("group"), mounts::group(ids).as_bytes(), 0o644)?;
    Ok((stamps, dirs))
}

/// Makes the new directory `dir` with `mode` (whatever the umask).
fn make_dir(dir: &Path, mode: u32) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    set_mode(dir, mode)
}

/// Prefix of a shared copy's directory in the runtime directory: `etc-s-<key>`, holding `etc`
/// (the copy bound at `/etc`) and `stamps` (what it was made from).
const SHARED_PREFIX: &str = "etc-s-";
/// The first line of a shared copy's `stamps`: a change of the copy's layout changes it.
const STAMPS_FORMAT: &str = "corral /etc copy, format 1";

/// The `lstat` stamp of each allowed entry of `etc`.
fn host_stamps(etc: &Path) -> Vec<(PathBuf, Option<Stamp>)> {
    ETC_ALLOW
        .iter()
        .map(|name| {
            let path = etc.join(name);
            let st = stamp(&path);
            (path, st)
        })
        .collect()
}

/// What a shared copy records it was made from: the format, the sandbox's `passwd` and `group`,
/// each allowed host entry's stamp or its absence.
fn stamps_text(stamps: &[(PathBuf, Option<Stamp>)], ids: Ids) -> String {
    let mut out = format!(
        "{STAMPS_FORMAT}\n{:?}\n{:?}\n",
        mounts::passwd(ids),
        mounts::group(ids)
    );
    for (path, st) in stamps {
        match st {
            Some(s) => out.push_str(&format!(
                "{}\t{} {} {:o} {} {}.{} {}.{}\n",
                path.display(),
                s.dev,
                s.ino,
                s.mode,
                s.size,
                s.mtime.0,
                s.mtime.1,
                s.ctime.0,
                s.ctime.1
            )),
            None => out.push_str(&format!("{}\t-\n", path.display())),
        }
    }
    out
}

/// Where the shared copy made from `text` lives: named by its 64-bit FNV-1a hash (a name only;
/// a copy is used when its recorded `stamps` equal `text`).
fn shared_dir(base: &Path, text: &str) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    base.join(format!("{SHARED_PREFIX}{h:016x}"))
}

fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn flock(fd: &OwnedFd, op: rustix::fs::FlockOperation) -> rustix::io::Result<()> {
    loop {
        match rustix::fs::flock(fd, op) {
            Err(rustix::io::Errno::INTR) => {}
            r => return r,
        }
    }
}

/// Whether `path` still names the directory open as `fd`.
fn names(path: &Path, fd: &OwnedFd) -> bool {
    match (rustix::fs::lstat(path), rustix::fs::fstat(fd)) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

/// The shared copy at `outer`, locked shared, when it exists, is this user's and was made from
/// exactly `text`; `None` otherwise.
fn open_shared(
    outer: &Path,
    stamps: Vec<(PathBuf, Option<Stamp>)>,
    text: &str,
) -> Result<Option<Snapshot>, String> {
    let Ok(fd) = open_dir(outer) else {
        return Ok(None);
    };
    flock(&fd, rustix::fs::FlockOperation::LockShared)
        .map_err(|e| format!("flock {}: {e}", outer.display()))?;
    let ours = rustix::fs::fstat(&fd)
        .is_ok_and(|st| st.st_uid == rustix::process::getuid().as_raw() && st.st_mode & 0o077 == 0);
    // A copy being removed was renamed away first: the name then holds another or nothing.
    if !ours || !names(outer, &fd) {
        return Ok(None);
    }
    let recorded = rustix::fs::openat(
        &fd,
        "stamps",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
    .and_then(|f| {
        let mut s = String::new();
        std::fs::File::from(f)
            .take(MAX_STAMPS_BYTES)
            .read_to_string(&mut s)
            .ok()
            .map(|_| s)
    });
    if recorded.as_deref() != Some(text) {
        return Ok(None);
    }
    let copy = outer.join("etc");
    let dir = std::fs::canonicalize(&copy).map_err(|e| format!("{}: {e}", copy.display()))?;
    // The stamps are in `ETC_ALLOW`'s order (`host_stamps`), and so are a copy's directories.
    let dirs = ETC_ALLOW
        .iter()
        .zip(&stamps)
        .filter(|(_, (_, st))| {
            st.as_ref()
                .is_some_and(|s| s.mode & libc::S_IFMT == libc::S_IFDIR)
        })
        .map(|(name, _)| PathBuf::from(name))
        .collect();
    Ok(Some(Snapshot {
        dir,
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        stamps,
        dirs,
        top: outer.to_path_buf(),
        lock: Some(fd),
    }))
}

/// Removes the shared copy at `outer` (open as `fd`) if no process uses it: renamed away under
/// an exclusive lock, then deleted.
fn remove_if_unused(base: &Path, outer: &Path, fd: &OwnedFd) {
    use rustix::fs::FlockOperation;
    if flock(fd, FlockOperation::NonBlockingLockExclusive).is_err() || !names(outer, fd) {
        return;
    }
    let away = base.join(format!(
        "etc-{}-x{}",
        std::process::id(),
        GENERATION.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::rename(outer, &away).is_ok()
        && let Err(e) = std::fs::remove_dir_all(&away)
    {
        tracing::warn!(dir = %away.display(), error = %e, "cannot remove an old copy of /etc");
    }
}

/// Removes the shared copies in `base` other than `keep` that no process uses (made from an
/// `/etc` that has changed since).
fn sweep_shared(base: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let shared = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(SHARED_PREFIX));
        if shared
            && path != keep
            && let Ok(fd) = open_dir(&path)
        {
            remove_if_unused(base, &path, &fd);
        }
    }
}

/// Copies the regular file `src` (opened without following a symlink) to a new `dst`.
fn copy_file(src: &Path, dst: &Path, mode: u32) -> Result<(), String> {
    let mut from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(src)
        .map_err(|e| format!("{}: {e}", src.display()))?;
    let mut data = Vec::new();
    (&mut from)
        .take(MAX_BYTES.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| format!("{}: {e}", src.display()))?;
    if u64::try_from(data.len()).unwrap_or(u64::MAX) > MAX_BYTES {
        return Err(format!(
            "{} is larger than {MAX_BYTES} bytes",
            src.display()
        ));
    }
    write_new(dst, &data, mode)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", path.display()))
}

/// Writes a new file (never an existing one, never through a symlink) with `mode`.
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("create {}: {e}", path.display()))?;
    f.write_all(data)
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    drop(f);
    set_mode(path, mode)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_holds_only_allowed_entries_and_our_passwd() {
        let base = tempfile::tempdir().unwrap();
        let snap = Snapshot::build(base.path(), Ids::of_caller()).unwrap();
        assert!(snap.is_current());
        let names: Vec<String> = std::fs::read_dir(snap.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        for name in &names {
            assert!(
                ["passwd", "group", "ssl"].contains(&name.as_str())
                    || ETC_ALLOW.contains(&name.as_str()),
                "`{name}` is not allowed"
            );
        }
        assert!(!names.iter().any(|n| n == "shadow"));
        let passwd = std::fs::read_to_string(snap.dir().join("passwd")).unwrap();
        assert!(passwd.contains("sandbox:x:"), "{passwd}");
        if let Ok(host) = std::fs::read("/etc/ld.so.cache") {
            assert_eq!(std::fs::read(snap.dir().join("ld.so.cache")).unwrap(), host);
        }
        let dir = snap.dir().to_path_buf();
        drop(snap);
        assert!(!dir.exists(), "the copy is removed with its last user");
    }

    #[test]
    fn a_changed_allowed_entry_makes_the_copy_stale() {
        let etc = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        std::fs::write(etc.path().join("hosts"), "127.0.0.1 a\n").unwrap();
        std::fs::write(etc.path().join("shadow"), "secret").unwrap();
        std::fs::create_dir(etc.path().join("alternatives")).unwrap();
        std::fs::write(etc.path().join("alternatives/x"), "x").unwrap();
        std::os::unix::fs::symlink("/usr/share/zoneinfo/UTC", etc.path().join("localtime"))
            .unwrap();
        let snap = Snapshot::build_from(etc.path(), base.path(), Ids::of_caller()).unwrap();
        assert!(snap.is_current());
        assert_eq!(
            std::fs::read_to_string(snap.dir().join("hosts")).unwrap(),
            "127.0.0.1 a\n"
        );
        assert!(!snap.dir().join("shadow").exists());
        assert_eq!(
            std::fs::read_link(snap.dir().join("localtime")).unwrap(),
            Path::new("/usr/share/zoneinfo/UTC")
        );
        // A directory is a mount point for the host's own, which is bound live.
        assert_eq!(snap.dirs(), [PathBuf::from("alternatives")]);
        assert_eq!(
            std::fs::read_dir(snap.dir().join("alternatives"))
                .unwrap()
                .count(),
            0
        );
        // A file changed in place, an entry added to a directory, a file that appears, a
        // directory replaced: stale.
        std::fs::write(etc.path().join("hosts"), "127.0.0.1 b\n").unwrap();
        assert!(!snap.is_current());
        let snap = Snapshot::build_from(etc.path(), base.path(), Ids::of_caller()).unwrap();
        std::fs::write(etc.path().join("alternatives/y"), "y").unwrap();
        assert!(!snap.is_current());
        let snap = Snapshot::build_from(etc.path(), base.path(), Ids::of_caller()).unwrap();
        std::fs::write(etc.path().join("resolv.conf"), "nameserver 10.0.0.1\n").unwrap();
        assert!(!snap.is_current());
        let snap = Snapshot::build_from(etc.path(), base.path(), Ids::of_caller()).unwrap();
        std::fs::remove_dir_all(etc.path().join("alternatives")).unwrap();
        std::fs::create_dir(etc.path().join("alternatives")).unwrap();
        assert!(!snap.is_current());
    }

    #[test]
    fn the_shared_copy_is_reused_by_the_next_process_until_an_entry_changes() {
        let etc = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        std::fs::write(etc.path().join("hosts"), "127.0.0.1 a\n").unwrap();
        std::fs::write(etc.path().join("shadow"), "secret").unwrap();
        std::fs::create_dir_all(etc.path().join("ssl/certs")).unwrap();
        let ids = Ids::of_caller();
        let first = Snapshot::shared_from(etc.path(), base.path(), ids).unwrap();
        let second = Snapshot::shared_from(etc.path(), base.path(), ids).unwrap();
        assert_eq!(first.dir(), second.dir(), "the same copy, not a second one");
        assert_eq!(first.dirs(), second.dirs());
        assert_eq!(second.dirs(), [PathBuf::from("ssl/certs")]);
        assert!(first.dir().ends_with("etc"));
        assert!(!first.dir().join("shadow").exists());
        drop(first);
        drop(second);
        assert!(
            Snapshot::shared_from(etc.path(), base.path(), ids)
                .unwrap()
                .dir()
                .join("hosts")
                .exists(),
            "a current copy stays for the next process"
        );
        // An entry changes while a process uses the old copy: the old copy stays until it is
        // unused, then goes; the new one holds the new contents.
        let old = Snapshot::shared_from(etc.path(), base.path(), ids).unwrap();
        let old_dir = old.dir().to_path_buf();
        std::fs::write(etc.path().join("hosts"), "127.0.0.1 b\n").unwrap();
        assert!(!old.is_current());
        let new = Snapshot::shared_from(etc.path(), base.path(), ids).unwrap();
        assert_ne!(new.dir(), old_dir);
        assert_eq!(
            std::fs::read_to_string(new.dir().join("hosts")).unwrap(),
            "127.0.0.1 b\n"
        );
        assert!(old_dir.join("hosts").exists(), "in use: kept");
        drop(old);
        assert!(!old_dir.exists(), "stale and unused: removed");
        assert!(new.dir().exists());
    }

    #[test]
    fn a_shared_copy_whose_record_does_not_match_is_not_used() {
        let etc = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        std::fs::write(etc.path().join("hosts"), "127.0.0.1 a\n").unwrap();
        let ids = Ids::of_caller();
        let first = Snapshot::shared_from(etc.path(), base.path(), ids).unwrap();
        let top = first.dir().parent().unwrap().to_path_buf();
        drop(first);
        // Its record altered (as a copy made from other entries would read), while a process
        // uses it: not used; a private copy is made, with the host's contents.
        std::fs::write(top.join("stamps"), "something else").unwrap();
        std::fs::write(top.join("etc/hosts"), "6.6.6.6 a\n").unwrap();
        let user = open_dir(&top).unwrap();
        flock(&user, rustix::fs::FlockOperation::LockShared).unwrap();
        let snap = Snapshot::shared_from(etc.path(), base.path(), ids).unwrap();
        assert_ne!(snap.dir(), top.join("etc"));
        assert_eq!(
            std::fs::read_to_string(snap.dir().join("hosts")).unwrap(),
            "127.0.0.1 a\n"
        );
        let private = snap.dir().to_path_buf();
        drop(snap);
        assert!(!private.exists(), "a private copy goes with its last user");
        // Unused, it is replaced by a copy made from the host.
        drop(user);
        let snap = Snapshot::shared_from(etc.path(), base.path(), ids).unwrap();
        assert_eq!(snap.dir(), top.join("etc"));
        assert_eq!(
            std::fs::read_to_string(snap.dir().join("hosts")).unwrap(),
            "127.0.0.1 a\n"
        );
    }
}
