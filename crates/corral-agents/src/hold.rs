//! A hold's directory as entries, and back: [`HoldReader`] reads the tree a turn's
//! copy-on-write layer wrote (`content/`: what is written, `delete/`: a marker per entry that
//! goes) into [`HeldEntry`]s, so the store keeps it; [`HoldBuilder`] writes entries back into a
//! fresh tree of the same shape, which [`crate::Session::apply_hold`] applies in its sandbox.
//!
//! The bytes are the agent's: reading never follows a symlink (an entry's own or a parent's)
//! and never opens anything but a regular file (a fifo would block, a device would lie); a
//! name that is not UTF-8 or an entry of another kind refuses the whole hold
//! (`agents.hold_invalid`), and past [`MAX_HOLD_BYTES`] or [`MAX_HOLD_ENTRIES`] it is refused
//! before more is read (`agents.hold_too_large`). Building checks each path again (a
//! [`HeldPath`] is plain and relative by construction), creates every entry afresh in a
//! directory only this process writes (mode 0700), and refuses an entry beneath anything that
//! is not a directory it made, so a held symlink is never a way out.

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use corral_ports::holds::{HeldEntry, HeldKind, HeldPath, MAX_HOLD_BYTES, MAX_HOLD_ENTRIES};

/// Whether an id is a hold's, as corral makes them (the store's and this crate's rule).
pub use corral_ports::holds::is_hold_id;

use crate::{AgentError, codes};

/// The tree of a hold that holds what is written.
const CONTENT: &str = "content";
/// The tree of a hold that marks what goes.
const DELETE: &str = "delete";

fn invalid(message: String) -> AgentError {
    AgentError::new(codes::AGENTS_HOLD_INVALID, message)
}

fn too_large() -> AgentError {
    AgentError::new(
        codes::AGENTS_HOLD_TOO_LARGE,
        format!(
            "the turn's held changes are over what one hold keeps ({MAX_HOLD_BYTES} bytes of content, {MAX_HOLD_ENTRIES} entries): they were not applied and are not kept; have the agent make smaller changes per turn, or list the directory in `confirm_writes_outside`"
        ),
    )
}

fn io_error(what: &str, rel: &str, e: &std::io::Error) -> AgentError {
    AgentError::new(
        codes::AGENTS_SANDBOX,
        format!("cannot {what} the held entry `{rel}`: {e}"),
    )
}

/// One entry still to visit: its path on the host, its path in the hold, and its tree.
#[derive(Debug)]
struct Pending {
    abs: PathBuf,
    rel: String,
    delete: bool,
}

/// The entries of a hold's directory, parents before their children (`content/` first, then
/// `delete/`), read one at a time: a file's bytes are read only when its entry is asked for.
/// After an error it yields nothing more.
#[derive(Debug)]
pub struct HoldReader {
    pending: Vec<Pending>,
    /// Names seen so far, at most [`MAX_HOLD_ENTRIES`] (what bounds `pending`).
    seen: u64,
    /// Content bytes read so far, at most [`MAX_HOLD_BYTES`].
    bytes: u64,
    /// What went wrong listing a tree's top, yielded first.
    error: Option<AgentError>,
}

impl HoldReader {
    /// A reader of the hold in `dir` (a directory corral made; a missing tree holds nothing).
    pub fn new(dir: &Path) -> Self {
        let mut reader = Self {
            pending: Vec::new(),
            seen: 0,
            bytes: 0,
            error: None,
        };
        // Visited in pop order: `content` first.
        for (tree, delete) in [(DELETE, true), (CONTENT, false)] {
            let abs = dir.join(tree);
            if std::fs::symlink_metadata(&abs).is_ok_and(|m| m.is_dir())
                && let Err(e) = reader.children(&abs, "", delete)
            {
                reader.error = Some(e);
            }
        }
        reader
    }

    /// Queues the entries of the directory `abs` (at `rel` in its tree), sorted by name.
    fn children(&mut self, abs: &Path, rel: &str, delete: bool) -> Result<(), AgentError> {
        let shown = if rel.is_empty() { "." } else { rel };
        let mut names = Vec::new();
        for entry in std::fs::read_dir(abs).map_err(|e| io_error("read", shown, &e))? {
            let name = entry.map_err(|e| io_error("read", shown, &e))?.file_name();
            self.seen += 1;
            if self.seen > MAX_HOLD_ENTRIES {
                return Err(too_large());
            }
            let name = name.into_string().map_err(|_| {
                invalid(format!(
                    "a held name beneath `{shown}` is not UTF-8; corral keeps holds whose names are text: have the agent use UTF-8 file names"
                ))
            })?;
            names.push(name);
        }
        names.sort_unstable_by(|a, b| b.cmp(a));
        self.pending.extend(names.into_iter().map(|name| Pending {
            abs: abs.join(&name),
            rel: if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            },
            delete,
        }));
        Ok(())
    }

    /// The entry of `p`, or `None` for a directory of the `delete` tree (only a way to its
    /// markers); its children queued.
    fn visit(&mut self, p: Pending) -> Result<Option<HeldEntry>, AgentError> {
        let path = HeldPath::new(&p.rel).map_err(|e| invalid(e.to_string()))?;
        let meta = std::fs::symlink_metadata(&p.abs).map_err(|e| io_error("read", &p.rel, &e))?;
        let mode = meta.permissions().mode();
        let ft = meta.file_type();
        let (kind, content) = if ft.is_dir() {
            self.children(&p.abs, &p.rel, p.delete)?;
            if p.delete {
                return Ok(None);
            }
            (HeldKind::Dir, Vec::new())
        } else if p.delete && (ft.is_file() || ft.is_symlink()) {
            (HeldKind::Delete, Vec::new())
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&p.abs).map_err(|e| io_error("read", &p.rel, &e))?;
            (HeldKind::Symlink, target.as_os_str().as_bytes().to_vec())
        } else if ft.is_file() {
            (HeldKind::File, self.file(&p.abs, &p.rel, meta.len())?)
        } else {
            return Err(invalid(format!(
                "the held entry `{}` is a fifo, socket or device node; a hold keeps files, directories and symlinks only",
                p.rel
            )));
        };
        if kind == HeldKind::Symlink {
            self.bytes = self.bytes.saturating_add(content.len() as u64);
            if self.bytes > MAX_HOLD_BYTES {
                return Err(too_large());
            }
        }
        HeldEntry::new(kind, path, mode, content)
            .map(Some)
            .map_err(|e| invalid(e.to_string()))
    }

    /// The bytes of the regular file `abs`, never through a symlink, within the budget.
    fn file(&mut self, abs: &Path, rel: &str, len: u64) -> Result<Vec<u8>, AgentError> {
        let room = MAX_HOLD_BYTES.saturating_sub(self.bytes);
        if len > room {
            return Err(too_large());
        }
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(abs)
            .map_err(|e| io_error("read", rel, &e))?;
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            return Err(invalid(format!(
                "the held entry `{rel}` changed while it was read"
            )));
        }
        let mut content = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        (&mut f)
            .take(room.saturating_add(1))
            .read_to_end(&mut content)
            .map_err(|e| io_error("read", rel, &e))?;
        self.bytes = self.bytes.saturating_add(content.len() as u64);
        if self.bytes > MAX_HOLD_BYTES {
            return Err(too_large());
        }
        Ok(content)
    }
}

impl Iterator for HoldReader {
    type Item = Result<HeldEntry, AgentError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            self.pending.clear();
            return Some(Err(e));
        }
        while let Some(p) = self.pending.pop() {
            match self.visit(p) {
                Ok(Some(entry)) => return Some(Ok(entry)),
                Ok(None) => {}
                Err(e) => {
                    self.pending.clear();
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// A hold's tree written back from its entries ([`HoldBuilder::new`], [`HoldBuilder::push`]
/// each, then [`HoldBuilder::finish`]).
#[derive(Debug)]
pub struct HoldBuilder {
    root: PathBuf,
    /// Every directory made, and the mode it ends with (a held directory's own, else 0755 in
    /// `content/` as the copy-on-write layer makes them, 0700 in `delete/`): set once every
    /// entry is in, so a held read-only directory still takes its entries.
    dirs: std::collections::HashMap<PathBuf, u32>,
}

impl HoldBuilder {
    /// A builder of a hold at `root`, which it creates (mode 0700, as any missing parent; it
    /// must not exist).
    pub fn new(root: &Path) -> Result<Self, AgentError> {
        let make = |dir: &Path, parents: bool| {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(parents)
                .create(dir)
                .map_err(|e| {
                    AgentError::new(
                        codes::AGENTS_SANDBOX,
                        format!("cannot make the hold's directory `{}`: {e}", dir.display()),
                    )
                })
        };
        if let Some(parent) = root.parent() {
            make(parent, true)?;
        }
        make(root, false)?;
        Ok(Self {
            root: root.to_owned(),
            dirs: std::collections::HashMap::new(),
        })
    }

    /// The directory `path` of `tree` (the tree itself for an empty path), made as needed;
    /// refused when something that is not a directory this builder made is in the way.
    fn dir(&mut self, tree: &str, parts: &[&str], rel: &HeldPath) -> Result<PathBuf, AgentError> {
        let mut at = self.root.join(tree);
        let ends = if tree == CONTENT { 0o755 } else { 0o700 };
        for part in std::iter::once(None).chain(parts.iter().map(Some)) {
            if let Some(part) = part {
                at.push(part);
            }
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(invalid(format!(
                        "the held entry `{rel}` lies beneath an entry of the hold that is not a directory"
                    )));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&at)
                        .map_err(|e| io_error("rebuild", rel.as_str(), &e))?;
                    self.dirs.insert(at.clone(), ends);
                }
                Err(e) => return Err(io_error("rebuild", rel.as_str(), &e)),
            }
        }
        Ok(at)
    }

    /// Writes `entry` into the tree.
    pub fn push(&mut self, entry: &HeldEntry) -> Result<(), AgentError> {
        let rel = entry.path();
        let parts: Vec<&str> = rel.components().collect();
        let (name, parents) = parts
            .split_last()
            .ok_or_else(|| invalid("a held entry has an empty path".to_owned()))?;
        let tree = match entry.kind() {
            HeldKind::Delete => DELETE,
            HeldKind::File | HeldKind::Dir | HeldKind::Symlink => CONTENT,
        };
        let at = self.dir(tree, parents, rel)?.join(name);
        let twice = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                invalid(format!("the hold names `{rel}` twice"))
            } else {
                io_error("rebuild", rel.as_str(), &e)
            }
        };
        match entry.kind() {
            HeldKind::Dir => {
                // A directory made on the way to an earlier entry takes its own mode now.
                let made = self.dir(tree, &parts, rel)?;
                self.dirs.insert(made, entry.mode());
            }
            HeldKind::Symlink => {
                let target = std::ffi::OsStr::from_bytes(entry.content());
                std::os::unix::fs::symlink(target, &at).map_err(twice)?;
            }
            HeldKind::File | HeldKind::Delete => {
                // `create_new`: never through a symlink, never over an entry.
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&at)
                    .map_err(twice)?;
                f.write_all(entry.content())
                    .map_err(|e| io_error("rebuild", rel.as_str(), &e))?;
                f.set_permissions(std::fs::Permissions::from_mode(entry.mode()))
                    .map_err(|e| io_error("rebuild", rel.as_str(), &e))?;
            }
        }
        Ok(())
    }

    /// The tree, its directories' modes set (deepest first): where it is.
    pub fn finish(self) -> Result<PathBuf, AgentError> {
        let mut dirs: Vec<(PathBuf, u32)> = self.dirs.into_iter().collect();
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (dir, mode) in dirs {
            // A directory this builder made, in its own tree: never a symlink.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).map_err(|e| {
                AgentError::new(
                    codes::AGENTS_SANDBOX,
                    format!("cannot rebuild the hold's `{}`: {e}", dir.display()),
                )
            })?;
        }
        Ok(self.root)
    }
}

/// Removes the hold tree `dir` (a turn's, or one [`HoldBuilder`] made) and everything in it,
/// its read-only directories included (made writable first, never through a symlink); a
/// missing `dir` is no error.
pub fn remove_hold_dir(dir: &Path) -> std::io::Result<()> {
    fn writable(dir: &Path) -> std::io::Result<()> {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            // `file_type` is the entry's own: a symlink to a directory is not one.
            if entry.file_type()?.is_dir() {
                writable(&entry.path())?;
            }
        }
        Ok(())
    }
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if m.is_dir() => writable(dir)?,
        Ok(_) => {}
    }
    std::fs::remove_dir_all(dir)
}
