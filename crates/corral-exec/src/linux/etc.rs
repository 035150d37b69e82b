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
//! new copy too, so that no warm sandbox built before the change is used. A copy is removed when
//! the last run (or warm sandbox) using it is gone.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::mounts::{self, ETC_ALLOW, Ids};

/// The host's `/etc`.
const HOST_ETC: &str = "/etc";
/// Most bytes a copy may hold: an `/etc` past it is refused rather than copied without bound.
const MAX_BYTES: u64 = 64 * 1024 * 1024;

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
}

impl Snapshot {
    /// Copies the allowed entries of the host's `/etc` into a new directory under `base` (a
    /// private directory of corral's user).
    pub(crate) fn build(base: &Path, ids: Ids) -> Result<Self, String> {
        Self::build_from(Path::new(HOST_ETC), base, ids)
    }

    /// [`Snapshot::build`] from `etc` instead of the host's `/etc`.
    fn build_from(etc: &Path, base: &Path, ids: Ids) -> Result<Self, String> {
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("etc-{}-{generation}", std::process::id()));
        let mut stamps = Vec::new();
        let mut dirs = Vec::new();
        let mut bytes = 0u64;
        let made = (|| {
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(&dir)
                .map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            set_mode(&dir, 0o755)?;
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
                    let target =
                        std::fs::read_link(&src).map_err(|e| format!("{}: {e}", src.display()))?;
                    std::os::unix::fs::symlink(&target, &dst)
                        .map_err(|e| format!("symlink {}: {e}", dst.display()))?;
                } else if kind.is_dir() {
                    std::fs::DirBuilder::new()
                        .mode(0o755)
                        .create(&dst)
                        .map_err(|e| format!("mkdir {}: {e}", dst.display()))?;
                    set_mode(&dst, meta.mode() & 0o777)?;
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
            std::fs::canonicalize(&dir).map_err(|e| format!("{}: {e}", dir.display()))
        })();
        match made {
            Ok(canonical) => Ok(Snapshot {
                dir: canonical,
                generation,
                stamps,
                dirs,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(format!("cannot prepare the sandbox's /etc: {e}"))
            }
        }
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
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove a copy of /etc");
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
}
