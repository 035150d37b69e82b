//! The built-in file ops. Every open goes through `openat2` beneath the grant's root, so a
//! symlink swapped in after the policy check still cannot lead outside it.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use corral_exec::BoxFuture;
use corral_policy::codes;
use corral_policy::protect::Access;
use corral_policy::scope::{JailedPath, SymlinkMode};
use corral_policy::{ArgValue, OpSpec, ResolvedCheck};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use serde_json::json;

use crate::{Op, OpCtx, OpError, OpOutput, Stream};

/// Size cap when neither the rule nor the config sets `max_bytes`.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 20;
/// Entry cap when neither the rule nor the config sets `max_entries`.
pub const DEFAULT_MAX_ENTRIES: u64 = 10_000;

/// Trees no file op reaches, whatever the root (checked on the real path after opening).
const ALWAYS_DENIED: &[&str] = &["/proc", "/sys", "/dev"];

fn errno_error(e: Errno, what: &str) -> OpError {
    match e {
        Errno::NOENT => OpError::new(codes::FILES_NOT_FOUND, format!("`{what}` does not exist")),
        Errno::XDEV => OpError::new(
            codes::POLICY_PATH_ESCAPE,
            format!("`{what}` resolves outside its root"),
        ),
        Errno::LOOP => OpError::new(
            codes::POLICY_SYMLINK_DENIED,
            format!("`{what}` goes through a symlink, which this scope refuses"),
        ),
        Errno::ACCESS | Errno::PERM | Errno::ROFS => OpError::new(
            codes::FILES_PERMISSION_DENIED,
            format!("the system refused access to `{what}`"),
        ),
        Errno::ISDIR => OpError::new(codes::FILES_NOT_A_FILE, format!("`{what}` is a directory")),
        Errno::NOTDIR => OpError::new(
            codes::FILES_NOT_A_DIRECTORY,
            format!("a component of `{what}` is not a directory"),
        ),
        Errno::NOTEMPTY | Errno::EXIST => OpError::new(
            codes::FILES_NOT_EMPTY,
            format!("`{what}` is a directory that is not empty"),
        ),
        // Opening a FIFO or socket without blocking: not a regular file.
        Errno::NXIO | Errno::AGAIN => OpError::new(
            codes::FILES_NOT_A_FILE,
            format!("`{what}` is not a regular file"),
        ),
        Errno::FBIG => OpError::new(codes::LIMIT_TOO_LARGE, format!("`{what}` is too large")),
        Errno::NOSYS => OpError::new(
            codes::FILES_IO,
            "this kernel lacks openat2; corral refuses file ops rather than open paths unsafely",
        ),
        other => OpError::new(codes::FILES_IO, format!("`{what}`: {other}")),
    }
}

/// A path opened beneath its root, with the display form used in messages.
struct Opened {
    fd: OwnedFd,
    shown: String,
}

/// Entries `files.delete` looks at beneath a directory before removing it; a bigger tree is
/// refused (fails closed) rather than removed unchecked.
pub const MAX_DELETE_WALK: usize = 10_000;

/// What every open re-checks on the real path the kernel resolved (issue 11 items 2, 3, 9):
/// the symlink mode, corral's protected directories, and the grant's checks (protected
/// locations, deny patterns, deny rules) for this kind of access.
#[derive(Clone)]
struct Checks {
    symlinks: SymlinkMode,
    protected: Vec<PathBuf>,
    resolved: ResolvedCheck,
    access: Access,
}

impl Checks {
    /// Refuses `real` (where `shown` really leads, `real_root` the real path of the jail's
    /// root) when it is protected or a deny pattern or deny rule covers it. The forms judged:
    /// the real path, and the same path re-anchored at the root as configured (the config's
    /// patterns are written against that one).
    fn verify(
        &self,
        jp: &JailedPath,
        shown: &str,
        real: &Path,
        real_root: &Path,
    ) -> Result<(), OpError> {
        if under_any(real, &self.protected) {
            return Err(OpError::new(
                codes::POLICY_PATH_DENIED,
                format!(
                    "`{shown}` leads into a protected location (/proc, /sys, /dev or corral's \
                     state directory); call with another path"
                ),
            ));
        }
        let forms = corral_policy::resolved::resolved_forms(real, Some(real_root), jp.root());
        let forms: Vec<&str> = forms.iter().map(String::as_str).collect();
        self.resolved
            .check(shown, &forms, self.access)
            .map_err(|r| OpError::new(r.code, r.message))
    }
}

/// The root of `jp`, opened as a path, and its real path.
fn open_root(jp: &JailedPath) -> Result<(OwnedFd, PathBuf), OpError> {
    let root = rustix::fs::open(
        jp.root(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_error(e, jp.root()))?;
    let real = real_path(&root)?;
    Ok((root, real))
}

/// A path the kernel cannot take (too long in all or in one component), refused before any
/// syscall with the limit named.
fn check_length(jp: &JailedPath) -> Result<(), OpError> {
    match corral_policy::path_too_long(&jp.absolute()) {
        Some(why) => Err(OpError::new(
            codes::ARGS_PATH_TOO_LONG,
            format!("the path `{}...` {why}", prefix(&jp.absolute(), 64)),
        )),
        None => Ok(()),
    }
}

/// The first `n` characters of `s` (for messages about very long paths).
fn prefix(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

fn resolve_flags(mode: SymlinkMode) -> ResolveFlags {
    match mode {
        SymlinkMode::Within => ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        SymlinkMode::Deny => {
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_SYMLINKS
        }
        SymlinkMode::Follow => ResolveFlags::NO_MAGICLINKS,
    }
}

/// Whether `real` is under any of `dirs` (component-wise).
fn under_any(real: &Path, dirs: &[PathBuf]) -> bool {
    ALWAYS_DENIED.iter().any(|d| real.starts_with(d)) || dirs.iter().any(|d| real.starts_with(d))
}

/// The real path of an open file, from `/proc/self/fd`.
fn real_path(fd: &OwnedFd) -> Result<PathBuf, OpError> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|e| {
        OpError::new(
            codes::FILES_IO,
            format!("cannot confirm where the opened file lives: {e}"),
        )
    })
}

/// Opens `jp` beneath its root. Refuses anything whose real path is protected or denied.
fn open_beneath(
    jp: &JailedPath,
    flags: OFlags,
    mode: Mode,
    checks: &Checks,
) -> Result<Opened, OpError> {
    let shown = jp.absolute();
    let (root, real_root) = open_root(jp)?;
    let rel = if jp.relative().is_empty() {
        "."
    } else {
        jp.relative()
    };
    let fd = openat2_retrying(
        &root,
        rel,
        flags | OFlags::CLOEXEC,
        mode,
        resolve_flags(checks.symlinks),
    )
    .map_err(|e| errno_error(e, &shown))?;
    let real = real_path(&fd)?;
    checks.verify(jp, &shown, &real, &real_root)?;
    Ok(Opened { fd, shown })
}

/// `openat2`, retried while it answers `EAGAIN`: with `RESOLVE_BENEATH` the kernel refuses a
/// lookup through `..` that raced *any* rename or mount on the system, and asks the caller to
/// try again (openat2(2)). A handful of retries absorb that; a lookup that keeps racing still
/// fails closed.
fn openat2_retrying<Fd: rustix::fd::AsFd>(
    dir: Fd,
    path: &str,
    flags: OFlags,
    mode: Mode,
    resolve: rustix::fs::ResolveFlags,
) -> Result<rustix::fd::OwnedFd, Errno> {
    const ATTEMPTS: usize = 16;
    let mut last = Errno::AGAIN;
    for _ in 0..ATTEMPTS {
        match rustix::fs::openat2(dir.as_fd(), path, flags, mode, resolve) {
            Err(Errno::AGAIN) => last = Errno::AGAIN,
            other => return other,
        }
    }
    Err(last)
}

fn file_type_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "char_device",
        FileType::BlockDevice => "block_device",
        FileType::Unknown => "unknown",
    }
}

fn the_path(ctx: &OpCtx) -> Result<&JailedPath, OpError> {
    ctx.grant
        .paths
        .iter()
        .find(|(n, _)| n == "path")
        .map(|(_, p)| p)
        .ok_or_else(|| {
            OpError::new(
                codes::POLICY_ARG_INVALID,
                "the policy grant holds no path for this call",
            )
        })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, OpError> + Send + 'static,
) -> Result<T, OpError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| OpError::new(codes::SERVER_INTERNAL, format!("file task failed: {e}")))?
}

fn max_bytes(ctx: &OpCtx) -> u64 {
    ctx.grant.limits.max_bytes.unwrap_or(DEFAULT_MAX_BYTES)
}

/// Which file op a `FileOp` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOpKind {
    /// `files.list`
    List,
    /// `files.stat`
    Stat,
    /// `files.read`
    Read,
    /// `files.write`
    Write,
    /// `files.delete`
    Delete,
    /// `files.download`
    Download,
}

/// One of the built-in file ops.
#[derive(Debug)]
pub struct FileOp {
    spec: OpSpec,
    kind: FileOpKind,
}

impl FileOp {
    /// A file op for `spec`.
    pub fn new(spec: OpSpec, kind: FileOpKind) -> Self {
        Self { spec, kind }
    }
}

impl Op for FileOp {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>> {
        let kind = self.kind;
        Box::pin(async move {
            let jp = the_path(&ctx)?.clone();
            check_length(&jp)?;
            let access = match kind {
                FileOpKind::List | FileOpKind::Stat | FileOpKind::Read | FileOpKind::Download => {
                    Access::Read
                }
                FileOpKind::Write | FileOpKind::Delete => Access::Change,
            };
            let checks = Checks {
                symlinks: ctx.grant.symlinks,
                protected: ctx.protected.clone(),
                resolved: ctx.grant.resolved.clone(),
                access,
            };
            let limit = max_bytes(&ctx);
            match kind {
                FileOpKind::List => {
                    let max = ctx.grant.limits.max_entries.unwrap_or(DEFAULT_MAX_ENTRIES);
                    blocking(move || list(&jp, &checks, max)).await
                }
                FileOpKind::Stat => blocking(move || stat(&jp, &checks)).await,
                FileOpKind::Read => blocking(move || read(&jp, &checks, limit)).await,
                FileOpKind::Write => {
                    let content = match ctx.args.get("content") {
                        Some(ArgValue::Str(s)) => s.clone(),
                        _ => String::new(),
                    };
                    let append = matches!(ctx.args.get("append"), Some(ArgValue::Bool(true)));
                    blocking(move || write(&jp, &checks, limit, &content, append)).await
                }
                FileOpKind::Delete => blocking(move || delete(&jp, &checks)).await,
                FileOpKind::Download => download(&jp, checks, limit).await,
            }
        })
    }
}

fn list(jp: &JailedPath, checks: &Checks, max: u64) -> Result<OpOutput, OpError> {
    let o = open_beneath(
        jp,
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
        checks,
    )?;
    let dir = rustix::fs::Dir::read_from(&o.fd).map_err(|e| errno_error(e, &o.shown))?;
    let mut entries = Vec::new();
    let mut truncated = false;
    for entry in dir {
        let entry = entry.map_err(|e| errno_error(e, &o.shown))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if entries.len() as u64 >= max {
            truncated = true;
            break;
        }
        let name_str = String::from_utf8_lossy(name).into_owned();
        let st = rustix::fs::statat(&o.fd, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW).ok();
        let (ty, size) = match st {
            Some(st) => (
                file_type_name(FileType::from_raw_mode(st.st_mode)),
                u64::try_from(st.st_size).unwrap_or(0),
            ),
            None => (file_type_name(entry.file_type()), 0),
        };
        entries.push(json!({"name": name_str, "type": ty, "size": size}));
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(OpOutput::Json {
        value: json!({"path": o.shown, "entries": entries, "truncated": truncated}),
        attestation: None,
    })
}

fn stat(jp: &JailedPath, checks: &Checks) -> Result<OpOutput, OpError> {
    let o = open_beneath(jp, OFlags::PATH, Mode::empty(), checks)?;
    let st = rustix::fs::fstat(&o.fd).map_err(|e| errno_error(e, &o.shown))?;
    Ok(OpOutput::Json {
        value: json!({
            "path": o.shown,
            "type": file_type_name(FileType::from_raw_mode(st.st_mode)),
            "size": u64::try_from(st.st_size).unwrap_or(0),
            "mode": format!("{:o}", st.st_mode & 0o7777),
            "modified": st.st_mtime,
        }),
        attestation: None,
    })
}

fn regular_size(o: &Opened) -> Result<u64, OpError> {
    let st = rustix::fs::fstat(&o.fd).map_err(|e| errno_error(e, &o.shown))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(OpError::new(
            codes::FILES_NOT_A_FILE,
            format!("`{}` is not a regular file", o.shown),
        ));
    }
    Ok(u64::try_from(st.st_size).unwrap_or(0))
}

fn too_large(shown: &str, size: u64, limit: u64) -> OpError {
    OpError::new(
        codes::LIMIT_TOO_LARGE,
        format!("`{shown}` is {size} bytes; the limit is {limit}"),
    )
}

fn read(jp: &JailedPath, checks: &Checks, limit: u64) -> Result<OpOutput, OpError> {
    use std::io::Read;
    let o = open_beneath(
        jp,
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        checks,
    )?;
    let size = regular_size(&o)?;
    if size > limit {
        return Err(too_large(&o.shown, size, limit));
    }
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // Read one byte past the limit so a file that grew after fstat is still refused.
    std::fs::File::from(o.fd)
        .take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| OpError::new(codes::FILES_IO, format!("`{}`: {e}", o.shown)))?;
    if buf.len() as u64 > limit {
        return Err(too_large(&o.shown, buf.len() as u64, limit));
    }
    let content = String::from_utf8(buf).map_err(|_| {
        OpError::new(
            codes::FILES_NOT_TEXT,
            format!("`{}` is not UTF-8 text; use files.download", o.shown),
        )
    })?;
    Ok(OpOutput::Json {
        value: json!({"path": o.shown, "size": content.len(), "content": content}),
        attestation: None,
    })
}

/// Opens `jp` for writing, changing nothing before every check has passed: `O_TRUNC` and
/// `O_CREAT` would act before `open_beneath` can look at the real path, so a symlink (beneath
/// the root) into a protected directory could truncate corral's database or create files in
/// it. An existing file is opened as it is and truncated only once its real path and type are
/// checked; a new one is created with `O_EXCL` (which never follows a symlink) in a parent
/// directory whose real path was checked first.
fn open_for_write(jp: &JailedPath, checks: &Checks, append: bool) -> Result<Opened, OpError> {
    let append_flag = if append {
        OFlags::APPEND
    } else {
        OFlags::empty()
    };
    // The file may appear or vanish between the two attempts; a few rounds settle it.
    for _ in 0..3 {
        match open_beneath(
            jp,
            OFlags::WRONLY | OFlags::NOCTTY | OFlags::NONBLOCK | append_flag,
            Mode::empty(),
            checks,
        ) {
            Ok(o) => {
                regular_size(&o)?;
                if !append {
                    rustix::fs::ftruncate(&o.fd, 0).map_err(|e| errno_error(e, &o.shown))?;
                }
                return Ok(o);
            }
            Err(e) if e.code == codes::FILES_NOT_FOUND => {}
            Err(e) => return Err(e),
        }
        if let Some(o) = create_beneath(jp, checks)? {
            return Ok(o);
        }
    }
    Err(OpError::new(
        codes::FILES_IO,
        format!(
            "`{}` kept changing while it was opened; retry",
            jp.absolute()
        ),
    ))
}

/// The parent directory of `jp`, opened (`O_PATH`) beneath the root, once its real path joined
/// with `jp`'s last name passed the checks; and that name.
fn checked_parent<'j>(jp: &'j JailedPath, checks: &Checks) -> Result<(OwnedFd, &'j str), OpError> {
    let shown = jp.absolute();
    let rel = jp.relative();
    let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let (root, real_root) = open_root(jp)?;
    let dir = openat2_retrying(
        &root,
        if parent.is_empty() { "." } else { parent },
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve_flags(checks.symlinks),
    )
    .map_err(|e| errno_error(e, &shown))?;
    let real_parent = real_path(&dir)?;
    checks.verify(jp, &shown, &real_parent.join(name), &real_root)?;
    Ok((dir, name))
}

/// Creates `jp` exclusively, in its parent opened beneath the root, once the parent's real
/// path joined with the new name passed the checks. `None` when a file of that name appeared
/// in the meantime.
fn create_beneath(jp: &JailedPath, checks: &Checks) -> Result<Option<Opened>, OpError> {
    let shown = jp.absolute();
    let (dir, name) = checked_parent(jp, checks)?;
    match openat2_retrying(
        &dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
        resolve_flags(checks.symlinks),
    ) {
        Ok(fd) => Ok(Some(Opened { fd, shown })),
        Err(Errno::EXIST) => {
            let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| errno_error(e, &shown))?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                return Err(OpError::new(
                    codes::POLICY_SYMLINK_DENIED,
                    format!(
                        "`{shown}` is a symlink to a file that does not exist; files are never \
                         created through a symlink, write to its target's path instead"
                    ),
                ));
            }
            Ok(None)
        }
        Err(e) => Err(errno_error(e, &shown)),
    }
}

fn write(
    jp: &JailedPath,
    checks: &Checks,
    limit: u64,
    content: &str,
    append: bool,
) -> Result<OpOutput, OpError> {
    use std::io::Write;
    if content.len() as u64 > limit {
        return Err(too_large(&jp.absolute(), content.len() as u64, limit));
    }
    if jp.relative().is_empty() {
        return Err(OpError::new(
            codes::FILES_NOT_A_FILE,
            "the root itself is a directory",
        ));
    }
    // A valid git `HEAD` makes its directory a repository that the host's git trusts without
    // any `.git` in the path (issue 11 item 2): refused by content, and an append to a `HEAD`
    // that has content is refused too (it could complete one).
    if jp.relative().rsplit('/').next() == Some(corral_policy::protect::GIT_HEAD) {
        let has_content =
            append && std::fs::symlink_metadata(jp.absolute()).is_ok_and(|m| m.len() > 0);
        if has_content || corral_policy::protect::looks_like_git_head(content.as_bytes()) {
            return Err(OpError::new(
                codes::POLICY_PATH_DENIED,
                format!(
                    "`{}`: a git `HEAD` would make its directory a repository that git on the host trusts (and runs commands from its config); write it under another name",
                    jp.absolute()
                ),
            ));
        }
    }
    refuse_inside_repository(jp)?;
    let o = open_for_write(jp, checks, append)?;
    let mut f = std::fs::File::from(o.fd);
    f.write_all(content.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| OpError::new(codes::FILES_IO, format!("`{}`: {e}", o.shown)))?;
    Ok(OpOutput::Json {
        value: json!({"path": o.shown, "bytes_written": content.len(), "appended": append}),
        attestation: None,
    })
}

/// Refuses a change at `jp` inside a git repository (see
/// [`corral_exec::enclosing_repository`]: a directory, from `jp`'s parent up, holding a git
/// `HEAD`).
fn refuse_inside_repository(jp: &JailedPath) -> Result<(), OpError> {
    let abs = jp.absolute();
    let Some(parent) = Path::new(&abs).parent() else {
        return Ok(());
    };
    match corral_exec::enclosing_repository(parent) {
        None => Ok(()),
        Some(head) => Err(OpError::new(
            codes::POLICY_PATH_DENIED,
            format!(
                "`{}` lies inside a git repository (`{}`): git on the host runs what its config and hooks say, so nothing in it may change; work outside it",
                jp.absolute(),
                head.display()
            ),
        )),
    }
}

fn delete(jp: &JailedPath, checks: &Checks) -> Result<OpOutput, OpError> {
    refuse_inside_repository(jp)?;
    let rel = jp.relative();
    let Some((parent, name)) = (match rel.rsplit_once('/') {
        Some((p, n)) => Some((p, n)),
        None if !rel.is_empty() => Some(("", rel)),
        None => None,
    }) else {
        return Err(OpError::new(
            codes::FILES_NOT_A_FILE,
            "the root itself cannot be deleted",
        ));
    };
    let parent_jp_abs = if parent.is_empty() {
        jp.root().to_owned()
    } else {
        format!("{}/{parent}", jp.root().trim_end_matches('/'))
    };
    let (root, real_root) = open_root(jp)?;
    let parent_rel = if parent.is_empty() { "." } else { parent };
    let dir = openat2_retrying(
        &root,
        parent_rel,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve_flags(checks.symlinks),
    )
    .map_err(|e| errno_error(e, &parent_jp_abs))?;
    let real_parent = real_path(&dir)?;
    let shown = jp.absolute();
    let real = real_parent.join(name);
    checks.verify(jp, &shown, &real, &real_root)?;
    let st = rustix::fs::statat(dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| errno_error(e, &shown))?;
    let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
    if is_dir {
        if let Some(p) = checks
            .resolved
            .protected()
            .path_beneath(&real.to_string_lossy())
        {
            return Err(OpError::new(
                codes::POLICY_PATH_DENIED,
                format!(
                    "`{shown}` holds `{p}`, which is protected (corral's own state or config); \
                     it can't be deleted through corral"
                ),
            ));
        }
        let sub = rustix::fs::openat(
            dir.as_fd(),
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno_error(e, &shown))?;
        let mut seen = 0;
        walk_beneath(jp, checks, &sub, &real, &real_root, &shown, 0, &mut seen)?;
    }
    let flags = if is_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(dir.as_fd(), name, flags).map_err(|e| errno_error(e, &shown))?;
    Ok(OpOutput::Json {
        value: json!({"path": shown, "deleted": true, "type": if is_dir { "dir" } else { "file" }}),
        attestation: None,
    })
}

/// Checks everything beneath the directory `fd` (real path `real`) before it is deleted: a
/// protected name or a denied path anywhere below refuses the delete. Never follows a symlink
/// (a symlink is judged by its own path; only real directories are entered, opened with
/// `O_NOFOLLOW`), and refuses a tree of more than [`MAX_DELETE_WALK`] entries or deeper than
/// 256 levels.
#[expect(
    clippy::too_many_arguments,
    reason = "one recursive walk; the arguments are its state"
)]
fn walk_beneath(
    jp: &JailedPath,
    checks: &Checks,
    fd: &OwnedFd,
    real: &Path,
    real_root: &Path,
    shown: &str,
    depth: usize,
    seen: &mut usize,
) -> Result<(), OpError> {
    let too_big = || {
        OpError::new(
            codes::LIMIT_TOO_LARGE,
            format!(
                "`{shown}` holds more than {MAX_DELETE_WALK} entries (or 256 levels); corral \
                 checks every entry for protected names before deleting a directory: delete \
                 what it holds first"
            ),
        )
    };
    if depth >= 256 {
        return Err(too_big());
    }
    let dir = rustix::fs::Dir::read_from(fd).map_err(|e| errno_error(e, shown))?;
    for entry in dir {
        let entry = entry.map_err(|e| errno_error(e, shown))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        *seen += 1;
        if *seen > MAX_DELETE_WALK {
            return Err(too_big());
        }
        let child = real.join(OsStr::from_bytes(name));
        checks.verify(jp, shown, &child, real_root)?;
        let st = rustix::fs::statat(fd, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| errno_error(e, shown))?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let sub = rustix::fs::openat(
                fd,
                OsStr::from_bytes(name),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| errno_error(e, shown))?;
            walk_beneath(jp, checks, &sub, &child, real_root, shown, depth + 1, seen)?;
        }
    }
    Ok(())
}

/// The MIME type for a file name, by extension.
pub fn content_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map_or("", |(_, e)| e)
        .to_ascii_lowercase();
    match ext.as_str() {
        "txt" | "log" | "md" => "text/plain; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css",
        "csv" => "text/csv",
        "json" => "application/json",
        "js" => "text/javascript",
        "xml" => "application/xml",
        "yaml" | "yml" => "application/yaml",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "tar" => "application/x-tar",
        _ => "application/octet-stream",
    }
}

async fn download(jp: &JailedPath, checks: Checks, limit: u64) -> Result<OpOutput, OpError> {
    let jp2 = jp.clone();
    let (fd, size, shown) = blocking(move || {
        let o = open_beneath(
            &jp2,
            OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
            &checks,
        )?;
        let size = regular_size(&o)?;
        if size > limit {
            return Err(too_large(&o.shown, size, limit));
        }
        Ok((o.fd, size, o.shown))
    })
    .await?;
    let file = tokio::fs::File::from_std(std::fs::File::from(fd));
    use tokio::io::AsyncReadExt;
    Ok(OpOutput::Stream(Stream {
        content_type: content_type(&shown).to_owned(),
        len: size,
        body: Box::new(file.take(size)),
    }))
}

/// Where `http.download` saves a response: a fresh temporary file beside the call's `path`,
/// in its parent directory opened beneath the root after the checks `files.write` makes (the
/// real path, the deny patterns, protected locations, a repository, a file named `HEAD`).
/// Nothing at the path changes until [`SaveTarget::commit`] renames the finished file over
/// it (or, without `overwrite`, next to nothing: an existing entry is refused then); a target
/// dropped before that (a failure, a timeout, a cancelled call) unlinks its temporary file
/// through the same directory, whatever was renamed in the meantime.
pub(crate) struct SaveTarget {
    pub(crate) file: Option<std::fs::File>,
    pub(crate) shown: String,
    dir: OwnedFd,
    name: String,
    temp: String,
    overwrite: bool,
    committed: bool,
}

impl SaveTarget {
    /// Opens a temporary file for the call's `path` (`overwrite`: an existing file at the
    /// path may be replaced).
    pub(crate) async fn open(ctx: &OpCtx, overwrite: bool) -> Result<Self, OpError> {
        let jp = the_path(ctx)?.clone();
        check_length(&jp)?;
        let checks = Checks {
            symlinks: ctx.grant.symlinks,
            protected: ctx.protected.clone(),
            resolved: ctx.grant.resolved.clone(),
            access: Access::Change,
        };
        blocking(move || Self::open_blocking(&jp, &checks, overwrite)).await
    }

    fn open_blocking(jp: &JailedPath, checks: &Checks, overwrite: bool) -> Result<Self, OpError> {
        let shown = jp.absolute();
        let rel = jp.relative();
        if rel.is_empty() {
            return Err(OpError::new(
                codes::FILES_NOT_A_FILE,
                "the root itself is a directory; name a file beneath it",
            ));
        }
        let name = rel.rsplit('/').next().unwrap_or(rel);
        if name == corral_policy::protect::GIT_HEAD {
            return Err(OpError::new(
                codes::POLICY_PATH_DENIED,
                format!(
                    "`{shown}`: a file named `HEAD` could make its directory a repository that git on the host trusts; save it under another name"
                ),
            ));
        }
        refuse_inside_repository(jp)?;
        let (dir, name) = checked_parent(jp, checks)?;
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                return Err(OpError::new(
                    codes::FILES_NOT_A_FILE,
                    format!("`{shown}` is a directory; save to a file's path"),
                ));
            }
            Ok(_) if !overwrite => return Err(exists(&shown)),
            Ok(_) | Err(Errno::NOENT) => {}
            Err(e) => return Err(errno_error(e, &shown)),
        }
        let temp = format!(".corral-download-{}", uuid_like());
        let fd = rustix::fs::openat(
            &dir,
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| errno_error(e, &shown))?;
        Ok(Self {
            file: Some(std::fs::File::from(fd)),
            shown,
            dir,
            name: name.to_owned(),
            temp,
            overwrite,
            committed: false,
        })
    }

    /// Syncs the finished file and renames it to the path (never over a directory; without
    /// `overwrite`, never over anything).
    pub(crate) fn commit(mut self) -> Result<String, OpError> {
        if let Some(f) = self.file.take() {
            f.sync_data()
                .map_err(|e| OpError::new(codes::FILES_IO, format!("`{}`: {e}", self.shown)))?;
        }
        let flags = if self.overwrite {
            rustix::fs::RenameFlags::empty()
        } else {
            rustix::fs::RenameFlags::NOREPLACE
        };
        match rustix::fs::renameat_with(
            &self.dir,
            self.temp.as_str(),
            &self.dir,
            self.name.as_str(),
            flags,
        ) {
            Ok(()) => {
                self.committed = true;
                Ok(std::mem::take(&mut self.shown))
            }
            Err(Errno::EXIST) => Err(exists(&self.shown)),
            Err(Errno::ISDIR) => Err(OpError::new(
                codes::FILES_NOT_A_FILE,
                format!("`{}` became a directory; nothing was saved", self.shown),
            )),
            Err(e) => Err(errno_error(e, &self.shown)),
        }
    }
}

impl Drop for SaveTarget {
    fn drop(&mut self) {
        if !self.committed {
            drop(self.file.take());
            let _ = rustix::fs::unlinkat(&self.dir, self.temp.as_str(), AtFlags::empty());
        }
    }
}

/// A save that would replace a file without `overwrite: true`.
fn exists(shown: &str) -> OpError {
    OpError::new(
        codes::FILES_EXISTS,
        format!(
            "`{shown}` exists; pass `overwrite: true` to replace it, or save under another name"
        ),
    )
}

/// A name no other download picks: the process id, the time and a counter.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}
