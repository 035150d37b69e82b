//! An agent session's held writes (issue 17, `confirm_writes_outside`) as plain data: the
//! entries of one hold, each at a path relative to the session's workdir. corral-agents reads
//! a hold's directory into entries and rebuilds one from them; corral-store keeps them, so a
//! hold made by one replica is applied by any.
//!
//! Every byte here was written by a sandboxed agent: a [`HeldPath`] can only be made by
//! [`HeldPath::new`], which refuses anything but plain relative names, and a [`HeldEntry`] only
//! by [`HeldEntry::new`], which keeps permission bits only (never a set-id or sticky bit). Both
//! are checked again on the way out of the store: a row is as hostile as the agent.

/// The most bytes of content one hold keeps (files and symlink targets together). Past it the
/// turn's held changes are refused (`agents.hold_too_large`), never kept in part.
pub const MAX_HOLD_BYTES: u64 = 64 * 1024 * 1024;
/// The most entries (files, directories, symlinks, deletions) one hold keeps.
pub const MAX_HOLD_ENTRIES: u64 = 20_000;
/// The longest path of one entry, bytes (Linux's `PATH_MAX`).
pub const MAX_HELD_PATH: usize = 4096;
/// The longest symlink target, bytes.
pub const MAX_LINK_TARGET: usize = 4096;

/// Whether `id` is a hold's id as corral makes them: 32 lowercase hex digits (a v4 UUID's).
pub fn is_hold_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What one entry of a hold is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeldKind {
    /// A regular file: its content and permission bits.
    File,
    /// A directory (made or replaced): its permission bits.
    Dir,
    /// A symlink: its target (never followed by corral).
    Symlink,
    /// The entry at the path goes (a marker in the hold's `delete` tree).
    Delete,
}

impl HeldKind {
    /// Every kind, in the order of [`HeldKind::as_str`]'s names.
    pub const ALL: [HeldKind; 4] = [
        HeldKind::File,
        HeldKind::Dir,
        HeldKind::Symlink,
        HeldKind::Delete,
    ];

    /// Its name as stored: `file`, `dir`, `symlink` or `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            HeldKind::File => "file",
            HeldKind::Dir => "dir",
            HeldKind::Symlink => "symlink",
            HeldKind::Delete => "delete",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// Why a held entry cannot be kept or rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HeldEntryError(pub String);

/// A path beneath the workdir, as a hold names it.
///
/// INVARIANT (plain relative path): 1 to [`MAX_HELD_PATH`] bytes of UTF-8; `/`-separated
/// components, each non-empty, neither `.` nor `..`, without NUL; no leading or trailing `/`.
/// So joined to a directory it names an entry beneath that directory, and nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HeldPath(String);

impl HeldPath {
    /// `path` if it is a plain relative path (see the type's invariant).
    pub fn new(path: &str) -> Result<Self, HeldEntryError> {
        let bad = |why: &str| {
            HeldEntryError(format!(
                "a held path {why}; a hold names entries beneath the workdir by plain relative paths"
            ))
        };
        if path.is_empty() || path.len() > MAX_HELD_PATH {
            return Err(bad(&format!("is empty or over {MAX_HELD_PATH} bytes")));
        }
        if path.contains('\0') {
            return Err(bad("holds a NUL character"));
        }
        if path.starts_with('/') {
            return Err(bad("is absolute"));
        }
        if path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(bad("has an empty, `.` or `..` component"));
        }
        // INVARIANT (plain relative path): every rule checked above.
        Ok(Self(path.to_owned()))
    }

    /// The path, `/`-separated.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its components, outermost first.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl std::fmt::Display for HeldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One entry of a hold.
///
/// INVARIANT (plain entry): `mode` holds permission bits only (`0o777`); a file's `content` is
/// its bytes; a symlink's is its target (1 to [`MAX_LINK_TARGET`] bytes, no NUL); a directory
/// and a deletion have none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldEntry {
    kind: HeldKind,
    path: HeldPath,
    mode: u32,
    content: Vec<u8>,
}

impl HeldEntry {
    /// An entry; `mode` is cut to its permission bits (a set-id or sticky bit never survives).
    pub fn new(
        kind: HeldKind,
        path: HeldPath,
        mode: u32,
        content: Vec<u8>,
    ) -> Result<Self, HeldEntryError> {
        match kind {
            HeldKind::File => {}
            HeldKind::Symlink => {
                if content.is_empty() || content.len() > MAX_LINK_TARGET || content.contains(&0) {
                    return Err(HeldEntryError(format!(
                        "the held symlink `{path}` has a target that is empty, over {MAX_LINK_TARGET} bytes or holds a NUL byte"
                    )));
                }
            }
            HeldKind::Dir | HeldKind::Delete => {
                if !content.is_empty() {
                    return Err(HeldEntryError(format!(
                        "the held {} `{path}` carries content, which it cannot have",
                        kind.as_str()
                    )));
                }
            }
        }
        // INVARIANT (plain entry): checked above; the mode cut here.
        Ok(Self {
            kind,
            path,
            mode: mode & 0o777,
            content,
        })
    }

    /// What it is.
    pub fn kind(&self) -> HeldKind {
        self.kind
    }

    /// Where it is, beneath the workdir.
    pub fn path(&self) -> &HeldPath {
        &self.path
    }

    /// Its permission bits.
    pub fn mode(&self) -> u32 {
        self.mode
    }

    /// A file's bytes, a symlink's target; empty for the other kinds.
    pub fn content(&self) -> &[u8] {
        &self.content
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_held_paths() {
        for ok in ["a", "src/a.txt", "a b/ü/.hidden", "...", "a/..b"] {
            assert_eq!(HeldPath::new(ok).map(|p| p.to_string()), Ok(ok.to_owned()));
        }
        let long = "a/".repeat(MAX_HELD_PATH);
        for bad in [
            "",
            "/etc/passwd",
            "..",
            "a/../../b",
            "./a",
            "a//b",
            "a/",
            "a/.",
            "a\0b",
            long.as_str(),
        ] {
            assert!(HeldPath::new(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn an_entry_keeps_permission_bits_only_and_its_kinds_content_rules() {
        let p = |s: &str| HeldPath::new(s).unwrap_or_else(|e| unreachable!("{e}"));
        let e = HeldEntry::new(HeldKind::File, p("run.sh"), 0o104_755, b"x".to_vec());
        assert_eq!(e.map(|e| e.mode()), Ok(0o755));
        assert!(HeldEntry::new(HeldKind::Symlink, p("l"), 0o777, Vec::new()).is_err());
        assert!(HeldEntry::new(HeldKind::Symlink, p("l"), 0o777, b"a\0b".to_vec()).is_err());
        assert!(HeldEntry::new(HeldKind::Dir, p("d"), 0o755, b"x".to_vec()).is_err());
        assert!(HeldEntry::new(HeldKind::Delete, p("d"), 0, b"x".to_vec()).is_err());
        for k in HeldKind::ALL {
            assert_eq!(HeldKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(HeldKind::parse("fifo"), None);
    }
}
