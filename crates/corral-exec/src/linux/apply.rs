//! Applies a run's copy-on-write layer to the host, in the helper, once the run's pid namespace
//! is gone (nothing of the sandbox runs any more, so nothing changes the layer meanwhile).
//!
//! The layer (an overlay upper directory per write path) is hostile data: every name, mode and
//! symlink in it was chosen by the sandboxed program. So, for each entry of the upper:
//!
//! - the host path it stands for is checked against the run's [`Protected`] first; a refused
//!   entry (and, for a directory, everything beneath it) is skipped and reported;
//! - a regular file is written to a temporary name in the same host directory and renamed over
//!   the target: a hard link that already existed in the workspace is replaced, never written
//!   through. Its mode keeps only the `0o777` bits (no setuid, setgid or sticky bit ever reaches
//!   the host); no extended attribute is copied (so no file capability either);
//! - a directory is made with its mode `& 0o777`; a symlink is made again as a symlink with the
//!   target string as written (never followed);
//! - a whiteout (a character device 0/0) deletes the host entry, and an opaque directory
//!   (`user.overlay.opaque`) replaces the host directory's contents; a deletion that would take
//!   a protected entry along (a protected name or glob met while walking the host subtree, or a
//!   protected path beneath it) is refused whole;
//! - fifos, sockets and device nodes are refused.
//!
//! The host is only ever reached through the write path's directory, opened before `pivot_root`
//! without following symlinks, and `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)` one component at a time from there: a symlink on
//! the host side is never followed, it fails that entry, and so does a filesystem mounted
//! beneath the write path (the overlay showed the program the directory under it, not what is
//! mounted there: a change there is for a place it never saw). With host writes, corral's trees
//! kept out (`HostSpec::keep_out`) are refused like protected paths, but through a write path
//! inside one (an agent's home in the state directory). Each entry is applied on its own: a
//! refusal or an error skips it, the rest is applied.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use corral_policy::Protected;
use corral_policy::codes;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat, Timespec, Timestamps};
use rustix::io::Errno;

use super::mounts::CowLayer;
use crate::{Changes, HeldChange, Hold, MAX_REFUSED_LISTED, RefusedChange};

/// Deepest directory nesting applied; deeper entries are refused.
const MAX_DEPTH: usize = 256;
/// Most host entries walked to check that a deletion takes nothing protected along.
const MAX_DELETE_WALK: usize = 200_000;
/// Longest path reported in a refusal, bytes.
const MAX_REPORTED_PATH: usize = 1024;
/// Why a git `HEAD` is refused.
const GIT_HEAD_REFUSED: &str = "a git `HEAD` would make its directory a repository that git on the host trusts (its config runs commands)";
/// Why a change inside a directory that already is a git repository on the host is refused.
const GIT_DIR_REFUSED: &str = "its directory is a git repository on the host (it holds a git `HEAD`), whose `config` and hooks git trusts (they run commands), so no command may change anything in it; work on a clone of it instead";
/// The xattr overlayfs (mounted with `userxattr`) marks an opaque directory with.
const OPAQUE_XATTR: &str = "user.overlay.opaque";

/// Why one change was not applied: a stable code (see [`RefusedChange::code`]) and the reason.
struct Refusal {
    code: &'static str,
    reason: String,
}

impl Refusal {
    /// A protected location (or one that cannot be checked, which fails closed the same way).
    fn protected(reason: impl Into<String>) -> Self {
        Refusal {
            code: codes::POLICY_PATH_DENIED,
            reason: reason.into(),
        }
    }
}

/// Anything else that kept a change from the host.
impl From<String> for Refusal {
    fn from(reason: String) -> Self {
        Refusal {
            code: codes::EXEC_CHANGE_REFUSED,
            reason,
        }
    }
}

/// Applies `layer` (its `i`-th upper directory over the host directory of `paths[i]`). When the
/// protection did not compile, every change is refused (fail closed).
pub(crate) fn apply(
    mut layer: CowLayer,
    paths: &[PathBuf],
    protected: Result<Protected, String>,
    quota: u64,
    hold: Option<&Hold>,
    keep_out: &[PathBuf],
) -> Changes {
    // Modes are set exactly, never through the helper's umask.
    rustix::process::umask(Mode::empty());
    let mut a = Applier {
        protected,
        changes: Changes::default(),
        seq: 0,
        quota,
        hold: None,
        holding: false,
        on_the_way: false,
        keep_out: keep_out.to_vec(),
        within: PathBuf::new(),
    };
    if let Some(h) = hold {
        match layer.hold.take().ok_or(Errno::BADF) {
            Ok(fd) => {
                a.hold = Some(HoldState {
                    within: h.within.clone(),
                    free: h.free.clone(),
                    into: fd,
                });
            }
            Err(e) => {
                // Nothing beneath `within` may be applied unheld: the whole layer is refused.
                for path in paths {
                    a.refuse(
                        path,
                        format!(
                            "the directory that holds changes for a person cannot be opened: {e}"
                        )
                        .into(),
                    );
                }
                return a.changes;
            }
        }
    }
    for (i, (host, path)) in layer.hosts.iter().zip(paths).enumerate() {
        let upper = match rustix::fs::openat(
            &layer.tmpfs,
            format!("{i}/upper"),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) => {
                a.refuse(
                    path,
                    format!("the run's layer for it cannot be read: {e}").into(),
                );
                continue;
            }
        };
        a.within.clone_from(path);
        a.dir(&upper, host, path, 0);
    }
    a.changes
}

/// The run's [`Hold`], its directory open.
struct HoldState {
    within: PathBuf,
    free: Vec<PathBuf>,
    into: OwnedFd,
}

impl HoldState {
    /// Whether a change of `abs` is held (beneath `within`, outside every free directory).
    fn holds(&self, abs: &Path) -> bool {
        abs.starts_with(&self.within) && !self.free.iter().any(|f| abs.starts_with(f))
    }

    /// Whether `abs` lies on the way to a free directory (its changes are then judged entry
    /// by entry).
    fn leads_to_free(&self, abs: &Path) -> bool {
        self.free.iter().any(|f| f.starts_with(abs) && f != abs)
    }

    /// The directory for the parent of `abs` in the hold's `tree` (`content` or `delete`),
    /// made as needed (the hold is corral's own, fresh for the run; the names are the
    /// program's, one component at a time, never through a symlink).
    fn parent_in_hold(&self, tree: &str, abs: &Path) -> Result<OwnedFd, Errno> {
        let rel = abs
            .parent()
            .and_then(|p| p.strip_prefix(&self.within).ok())
            .ok_or(Errno::INVAL)?;
        let mut dir = rustix::io::dup(&self.into)?;
        for part in Path::new(tree).components().chain(rel.components()) {
            let name = CString::new(part.as_os_str().as_bytes()).map_err(|_| Errno::INVAL)?;
            match rustix::fs::mkdirat(&dir, name.as_c_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e),
            }
            dir = open_host_dir(&dir, &name)?;
        }
        Ok(dir)
    }
}

struct Applier {
    protected: Result<Protected, String>,
    changes: Changes,
    seq: u64,
    /// The run's write quota, bytes: what the apply writes to the host counts against it at each
    /// file's full size (a sparse file's holes and every hard link included), so the layer's
    /// tmpfs, which counts only blocks, cannot be used to write more.
    quota: u64,
    /// Which changes are held for a person, and where.
    hold: Option<HoldState>,
    /// Whether the entries being walked are held (written into the hold, deletions listed).
    holding: bool,
    /// Set for the one directory being applied that only leads to a free directory: it is made
    /// if missing (mode 0755), never changed (its mode is the host's), never emptied.
    on_the_way: bool,
    /// corral's trees kept out of a run that may change the host (`HostSpec::keep_out`): no
    /// change in one is applied but through a write path inside it.
    keep_out: Vec<PathBuf>,
    /// The write path being applied.
    within: PathBuf,
}

/// The names in the directory `fd` (without `.` and `..`).
fn names(fd: &impl AsFd) -> Result<Vec<CString>, Errno> {
    let mut dir = rustix::fs::Dir::read_from(fd)?;
    let mut out = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

fn stat_at(dir: &impl AsFd, name: &CStr) -> Result<Option<Stat>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn kind(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// Opens the host directory `name` in `parent`: one component, never through a symlink.
fn open_host_dir(parent: &impl AsFd, name: &CStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::NO_XDEV,
    )
}

/// Whether the host directory `fd` is a git repository already, as git decides it first: its
/// `HEAD` is a symlink or a file that reads as a git head. A bare repository (a test fixture,
/// a mirror) has no `.git` in its path, and one with only a `HEAD` and `refs/` is completed by
/// anyone who adds `objects/` and a `config`. A `HEAD` that cannot be checked counts as one.
fn holds_git_head(fd: &OwnedFd) -> bool {
    let head = c"HEAD";
    match stat_at(fd, head) {
        Ok(None) => false,
        Ok(Some(st)) if kind(&st) == FileType::Directory => false,
        Ok(Some(st)) if kind(&st) == FileType::RegularFile => {
            let Ok(file) = rustix::fs::openat(
                fd,
                head,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                return true;
            };
            let mut buf = [0u8; 128];
            match rustix::io::pread(&file, &mut buf, 0) {
                Ok(n) => {
                    corral_policy::protect::looks_like_git_head(buf.get(..n).unwrap_or_default())
                }
                Err(_) => true,
            }
        }
        // A symlink (git takes one into `refs/`), a fifo or a device: never read, refused.
        Ok(Some(_)) | Err(_) => true,
    }
}

/// What an errno means for an entry being applied.
fn describe(e: Errno) -> String {
    match e {
        Errno::LOOP | Errno::XDEV => {
            "a symlink (or a mount) on the host is in the way, and it is never followed".to_owned()
        }
        e => format!("it could not be applied: {e}"),
    }
}

impl Applier {
    fn refuse(&mut self, path: &Path, refusal: Refusal) {
        if self.changes.refused.len() >= MAX_REFUSED_LISTED {
            self.changes.refused_unlisted += 1;
            return;
        }
        self.changes.refused.push(RefusedChange {
            path: reported(path),
            code: refusal.code.to_owned(),
            reason: refusal.reason,
        });
    }

    /// The tree kept out that `abs` lies in (or beneath `abs`, with `beneath`), unless the
    /// write path being applied lies inside it.
    fn kept_out(&self, abs: &Path, beneath: bool) -> Option<&PathBuf> {
        self.keep_out.iter().find(|k| {
            let hit = match beneath {
                false => abs.starts_with(k),
                true => k.starts_with(abs) && k.as_path() != abs,
            };
            // A write path strictly inside the tree (an agent's home), never the tree itself.
            hit && !(self.within.starts_with(k) && self.within.as_path() != k.as_path())
        })
    }

    /// Why `abs` may not be changed, if it may not.
    fn protected_reason(&self, abs: &Path) -> Option<String> {
        if let Some(k) = self.kept_out(abs, false) {
            return Some(format!(
                "`{}` is corral's own (its state, or the sandbox's); no command may create, change or delete it",
                k.display()
            ));
        }
        let protected = match &self.protected {
            Ok(p) => p,
            Err(e) => return Some(format!("the run's protection list is unusable ({e})")),
        };
        let Some(text) = abs.to_str() else {
            return Some("the path is not UTF-8, so it cannot be checked".to_owned());
        };
        protected.hit(text).map(|hit| {
            format!(
                "{}; no command may create, change or delete it",
                hit.describe()
            )
        })
    }

    /// Why deleting the host directory `fd` (at `abs`) is refused: something protected lies
    /// beneath it, or it is too large to check.
    fn protected_beneath(&self, fd: &OwnedFd, abs: &Path) -> Option<String> {
        if let Some(k) = self.kept_out(abs, true) {
            return Some(format!(
                "deleting it would delete corral's own `{}`",
                k.display()
            ));
        }
        if let Ok(p) = &self.protected
            && let Some(below) = abs.to_str().and_then(|a| p.path_beneath(a))
        {
            return Some(format!("deleting it would delete the protected `{below}`"));
        }
        let mut budget = MAX_DELETE_WALK;
        self.walk_for_protected(fd, abs, &mut budget, 0)
    }

    fn walk_for_protected(
        &self,
        fd: &OwnedFd,
        abs: &Path,
        budget: &mut usize,
        depth: usize,
    ) -> Option<String> {
        let too_large =
            || Some("it holds too much to check that nothing protected lies beneath it".to_owned());
        if depth > MAX_DEPTH {
            return too_large();
        }
        let entries = match names(fd) {
            Ok(n) => n,
            Err(e) => return Some(format!("its contents cannot be checked: {e}")),
        };
        for name in entries {
            *budget = match budget.checked_sub(1) {
                Some(b) => b,
                None => return too_large(),
            };
            let child = abs.join(OsStr::from_bytes(name.to_bytes()));
            if let Some(reason) = self.protected_reason(&child) {
                return Some(format!(
                    "deleting it would delete `{}` ({reason})",
                    child.display()
                ));
            }
            match stat_at(fd, &name) {
                Ok(Some(st)) if kind(&st) == FileType::Directory => {
                    let sub = match open_host_dir(fd, &name) {
                        Ok(sub) => sub,
                        Err(e) => return Some(describe(e)),
                    };
                    if let Some(r) = self.walk_for_protected(&sub, &child, budget, depth + 1) {
                        return Some(r);
                    }
                }
                Ok(_) => {}
                Err(e) => return Some(describe(e)),
            }
        }
        None
    }

    /// Applies the upper directory `upper` to the host directory `host` (at `abs`).
    fn dir(&mut self, upper: &OwnedFd, host: &OwnedFd, abs: &Path, depth: usize) {
        if depth > MAX_DEPTH {
            self.refuse(
                abs,
                format!("it is nested deeper than {MAX_DEPTH} directories").into(),
            );
            return;
        }
        let entries = match names(upper) {
            Ok(n) => n,
            Err(e) => {
                self.refuse(abs, format!("the run's layer cannot be read: {e}").into());
                return;
            }
        };
        // A repository already on the host (a bare one has no `.git` in its path): its
        // `config` and hooks run commands in the host's git, so nothing in it changes.
        if !self.holding && !entries.is_empty() && holds_git_head(host) {
            for name in entries {
                let path = abs.join(OsStr::from_bytes(name.to_bytes()));
                self.refuse(&path, Refusal::protected(GIT_DIR_REFUSED));
            }
            return;
        }
        for name in entries {
            let path = abs.join(OsStr::from_bytes(name.to_bytes()));
            let st = match stat_at(upper, &name) {
                Ok(Some(st)) => st,
                Ok(None) => continue,
                Err(e) => {
                    self.refuse(&path, format!("the run's layer cannot be read: {e}").into());
                    continue;
                }
            };
            if let Some(reason) = self.protected_reason(&path) {
                self.refuse(&path, Refusal::protected(reason));
                continue;
            }
            if !self.holding
                && let Some(h) = &self.hold
                && h.holds(&path)
            {
                let on_the_way = kind(&st) == FileType::Directory
                    && h.leads_to_free(&path)
                    && !is_opaque(upper, &name);
                if !on_the_way {
                    if let Err(refusal) = self.hold_entry(upper, &name, &path, &st, depth) {
                        self.refuse(&path, refusal);
                    }
                    continue;
                }
                self.on_the_way = true;
            }
            let result = match kind(&st) {
                FileType::CharacterDevice if st.st_rdev == 0 && self.holding => {
                    self.hold_deletion(&name, &path, "delete")
                }
                FileType::CharacterDevice if st.st_rdev == 0 => self.delete(host, &name, &path),
                FileType::Directory => self.directory(upper, host, &name, &path, &st, depth),
                FileType::RegularFile => self.file(upper, host, &name, &path, &st),
                FileType::Symlink => self.symlink(upper, host, &name, &path),
                _ => Err(Refusal::from(
                    "a fifo, socket or device node is never copied to the host".to_owned(),
                )),
            };
            match result {
                Err(refusal) => self.refuse(&path, refusal),
                Ok(()) if self.holding && kind(&st) != FileType::Directory => {
                    if kind(&st) != FileType::CharacterDevice {
                        self.note_held(&path, "write");
                    }
                }
                Ok(()) => {}
            }
        }
    }

    /// Holds the entry `name` of `upper` (at `abs`) and everything beneath it: written into
    /// the hold, never to the host; listed in [`Changes::held`].
    fn hold_entry(
        &mut self,
        upper: &OwnedFd,
        name: &CStr,
        abs: &Path,
        st: &Stat,
        depth: usize,
    ) -> Result<(), Refusal> {
        let kind_of = match kind(st) {
            FileType::CharacterDevice if st.st_rdev == 0 => "delete",
            FileType::Directory if is_opaque(upper, name) => "replace",
            _ => "write",
        };
        // A replaced directory is marked by `directory`, which sees every opaque one (nested
        // ones too).
        match kind_of {
            "write" => self.note_held(abs, kind_of),
            "delete" => return self.hold_deletion(name, abs, kind_of),
            _ => {}
        }
        let dest = self
            .hold
            .as_ref()
            .ok_or_else(|| Refusal::from("no hold".to_owned()))?
            .parent_in_hold("content", abs)
            .map_err(|e| format!("it could not be held: {e}"))?;
        let applied = self.changes.applied;
        self.holding = true;
        let result = match kind(st) {
            FileType::Directory => self.directory(upper, &dest, name, abs, st, depth),
            FileType::RegularFile => self.file(upper, &dest, name, abs, st),
            FileType::Symlink => self.symlink(upper, &dest, name, abs),
            _ => Err(Refusal::from(
                "a fifo, socket or device node is never copied to the host".to_owned(),
            )),
        };
        self.holding = false;
        // What went into the hold is not on the host.
        self.changes.applied = applied;
        result
    }

    /// Holds the deletion of `abs` (named `name`): a marker at its path in the hold's
    /// `delete` tree, listed as `kind` (`delete`, or `replace` when a directory is made again
    /// there).
    fn hold_deletion(&mut self, name: &CStr, abs: &Path, kind: &str) -> Result<(), Refusal> {
        let dir = self
            .hold
            .as_ref()
            .ok_or_else(|| Refusal::from("no hold".to_owned()))?
            .parent_in_hold("delete", abs)
            .map_err(|e| format!("its deletion could not be held: {e}"))?;
        rustix::fs::openat(
            &dir,
            name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| format!("its deletion could not be held: {e}"))?;
        self.note_held(abs, kind);
        Ok(())
    }

    /// Lists one held change (past the cap, counts it).
    fn note_held(&mut self, abs: &Path, kind: &str) {
        if self.changes.held.len() >= MAX_REFUSED_LISTED {
            self.changes.held_unlisted += 1;
            return;
        }
        self.changes.held.push(HeldChange {
            path: reported(abs),
            kind: kind.to_owned(),
        });
    }

    /// A whiteout: the host entry `name` goes.
    fn delete(&mut self, host: &OwnedFd, name: &CStr, abs: &Path) -> Result<(), Refusal> {
        let Some(st) = stat_at(host, name).map_err(describe)? else {
            return Ok(());
        };
        self.remove(host, name, abs, &st)?;
        self.changes.applied += 1;
        Ok(())
    }

    /// Removes the host entry `name` (a directory with everything beneath it, unless something
    /// protected lies there).
    fn remove(
        &mut self,
        host: &OwnedFd,
        name: &CStr,
        abs: &Path,
        st: &Stat,
    ) -> Result<(), Refusal> {
        if kind(st) != FileType::Directory {
            return Ok(rustix::fs::unlinkat(host, name, AtFlags::empty()).map_err(describe)?);
        }
        let fd = open_host_dir(host, name).map_err(describe)?;
        if let Some(reason) = self.protected_beneath(&fd, abs) {
            return Err(Refusal::protected(reason));
        }
        empty_dir(&fd, 0).map_err(describe)?;
        Ok(rustix::fs::unlinkat(host, name, AtFlags::REMOVEDIR).map_err(describe)?)
    }

    fn directory(
        &mut self,
        upper: &OwnedFd,
        host: &OwnedFd,
        name: &CStr,
        abs: &Path,
        st: &Stat,
        depth: usize,
    ) -> Result<(), Refusal> {
        let sub_upper = rustix::fs::openat(
            upper,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("the run's layer cannot be read: {e}"))?;
        let is_opaque = opaque_dir(&sub_upper);
        let on_the_way = std::mem::take(&mut self.on_the_way);
        if self.holding && is_opaque {
            // Held: what the host has there goes first when the hold is applied.
            self.hold_deletion(name, abs, "replace")?;
        }
        let mode = if on_the_way {
            0o755
        } else {
            st.st_mode & 0o777
        };
        let sub_host = match stat_at(host, name).map_err(describe)? {
            Some(h) if kind(&h) == FileType::Directory => {
                let fd = open_host_dir(host, name).map_err(describe)?;
                let mut changed = false;
                if is_opaque {
                    // The program deleted the directory and made a new one: what was in it goes.
                    if let Some(reason) = self.protected_beneath(&fd, abs) {
                        return Err(Refusal::protected(reason));
                    }
                    empty_dir(&fd, 0).map_err(describe)?;
                    changed = true;
                }
                if !on_the_way && h.st_mode & 0o7777 != st.st_mode & 0o7777 {
                    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(describe)?;
                    changed = true;
                }
                if changed {
                    self.changes.applied += 1;
                }
                fd
            }
            existing => {
                if let Some(h) = existing {
                    if on_the_way {
                        return Err(Refusal::from(
                            "a directory on the way to a free directory would replace what the host has there, which is a change outside the free directories; make it by hand, or free a wider directory".to_owned(),
                        ));
                    }
                    self.remove(host, name, abs, &h)?;
                }
                rustix::fs::mkdirat(host, name, Mode::from_raw_mode(mode)).map_err(describe)?;
                self.changes.applied += 1;
                open_host_dir(host, name).map_err(describe)?
            }
        };
        self.dir(&sub_upper, &sub_host, abs, depth + 1);
        Ok(())
    }

    /// A temporary name in a host directory, for a file or symlink renamed over its target.
    fn temp_name(&mut self) -> CString {
        self.seq += 1;
        let name = format!(".corral-apply-{}-{}", std::process::id(), self.seq);
        CString::new(name).unwrap_or_default()
    }

    /// Makes way for a non-directory `name`: a host directory there is removed (unless
    /// something protected lies beneath it).
    fn clear_for_file(&mut self, host: &OwnedFd, name: &CStr, abs: &Path) -> Result<(), Refusal> {
        match stat_at(host, name).map_err(describe)? {
            Some(h) if kind(&h) == FileType::Directory => self.remove(host, name, abs, &h),
            _ => Ok(()),
        }
    }

    fn file(
        &mut self,
        upper: &OwnedFd,
        host: &OwnedFd,
        name: &CStr,
        abs: &Path,
        st: &Stat,
    ) -> Result<(), Refusal> {
        let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
        if self.changes.bytes.saturating_add(size) > self.quota {
            return Err(Refusal {
                code: codes::EXEC_WRITE_QUOTA,
                reason: format!(
                    "the run's changes are over its write quota of {} bytes (a sparse file or a hard link counts at its full size)",
                    self.quota
                ),
            });
        }
        let src = rustix::fs::openat(
            upper,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("the run's layer cannot be read: {e}"))?;
        if name.to_bytes() == corral_policy::protect::GIT_HEAD.as_bytes() {
            let mut head = [0u8; 128];
            let n = rustix::io::pread(&src, &mut head, 0)
                .map_err(|e| format!("the run's layer cannot be read: {e}"))?;
            if corral_policy::protect::looks_like_git_head(head.get(..n).unwrap_or_default()) {
                return Err(Refusal::protected(GIT_HEAD_REFUSED));
            }
        }
        self.clear_for_file(host, name, abs)?;
        let tmp = self.temp_name();
        let dst = rustix::fs::openat(
            host,
            &tmp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(describe)?;
        let written = (|| -> Result<u64, String> {
            let mut from = File::from(src).take(size);
            let mut to = File::from(dst);
            let n = std::io::copy(&mut from, &mut to).map_err(|e| e.to_string())?;
            rustix::fs::fchmod(&to, Mode::from_raw_mode(st.st_mode & 0o777))
                .map_err(|e| e.to_string())?;
            let times = Timestamps {
                last_access: Timespec {
                    tv_sec: st.st_atime,
                    tv_nsec: i64::try_from(st.st_atime_nsec).unwrap_or(0),
                },
                last_modification: Timespec {
                    tv_sec: st.st_mtime,
                    tv_nsec: i64::try_from(st.st_mtime_nsec).unwrap_or(0),
                },
            };
            let _ = rustix::fs::futimens(&to, &times);
            rustix::fs::renameat(host, &tmp, host, name).map_err(describe)?;
            Ok(n)
        })();
        match written {
            Ok(n) => {
                self.changes.applied += 1;
                self.changes.bytes = self.changes.bytes.saturating_add(n);
                Ok(())
            }
            Err(e) => {
                let _ = rustix::fs::unlinkat(host, &tmp, AtFlags::empty());
                Err(format!("it could not be applied: {e}").into())
            }
        }
    }

    fn symlink(
        &mut self,
        upper: &OwnedFd,
        host: &OwnedFd,
        name: &CStr,
        abs: &Path,
    ) -> Result<(), Refusal> {
        if name.to_bytes() == corral_policy::protect::GIT_HEAD.as_bytes() {
            return Err(Refusal::protected(GIT_HEAD_REFUSED));
        }
        self.clear_for_file(host, name, abs)?;
        let target = rustix::fs::readlinkat(upper, name, Vec::new())
            .map_err(|e| format!("the run's layer cannot be read: {e}"))?;
        let tmp = self.temp_name();
        rustix::fs::symlinkat(target.as_c_str(), host, &tmp).map_err(describe)?;
        if let Err(e) = rustix::fs::renameat(host, &tmp, host, name) {
            let _ = rustix::fs::unlinkat(host, &tmp, AtFlags::empty());
            return Err(describe(e).into());
        }
        self.changes.applied += 1;
        Ok(())
    }
}

/// A path as a report shows it: cut at [`MAX_REPORTED_PATH`] bytes.
fn reported(path: &Path) -> String {
    let mut path = path.to_string_lossy().into_owned();
    if path.len() > MAX_REPORTED_PATH {
        let mut cut = MAX_REPORTED_PATH;
        while !path.is_char_boundary(cut) {
            cut -= 1;
        }
        path.truncate(cut);
        path.push_str("...");
    }
    path
}

/// Whether the layer's directory `fd` is opaque (the program deleted the directory and made a
/// new one).
fn opaque_dir(fd: &OwnedFd) -> bool {
    let mut opaque = [0u8; 4];
    matches!(
        rustix::fs::fgetxattr(fd, OPAQUE_XATTR, &mut opaque),
        Ok(n) if opaque.get(..n) == Some(b"y")
    )
}

/// Whether the layer's entry `name` in `upper` is an opaque directory.
fn is_opaque(upper: &OwnedFd, name: &CStr) -> bool {
    rustix::fs::openat(
        upper,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .is_ok_and(|fd| opaque_dir(&fd))
}

/// Removes everything in the host directory `fd`, never following a symlink.
fn empty_dir(fd: &OwnedFd, depth: usize) -> Result<(), Errno> {
    if depth > MAX_DEPTH {
        return Err(Errno::LOOP);
    }
    for name in names(fd)? {
        match stat_at(fd, &name)? {
            Some(st) if kind(&st) == FileType::Directory => {
                let sub = open_host_dir(fd, &name)?;
                empty_dir(&sub, depth + 1)?;
                rustix::fs::unlinkat(fd, &name, AtFlags::REMOVEDIR)?;
            }
            Some(_) => rustix::fs::unlinkat(fd, &name, AtFlags::empty())?,
            None => {}
        }
    }
    Ok(())
}
