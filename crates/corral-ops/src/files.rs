//! The built-in file ops. Every open goes through `openat2` beneath the grant's root, so a
//! symlink swapped in after the policy check still cannot lead outside it.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use corral_exec::BoxFuture;
use corral_policy::codes;
use corral_policy::scope::{JailedPath, SymlinkMode};
use corral_policy::{ArgValue, OpSpec};
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
        Errno::NOENT => OpError::new(
            codes::FILES_NOT_FOUND,
            404,
            format!("`{what}` does not exist"),
        ),
        Errno::XDEV => OpError::new(
            codes::POLICY_PATH_ESCAPE,
            403,
            format!("`{what}` resolves outside its root"),
        ),
        Errno::LOOP => OpError::new(
            codes::POLICY_SYMLINK_DENIED,
            403,
            format!("`{what}` goes through a symlink, which this scope refuses"),
        ),
        Errno::ACCESS | Errno::PERM | Errno::ROFS => OpError::new(
            codes::FILES_PERMISSION_DENIED,
            403,
            format!("the system refused access to `{what}`"),
        ),
        Errno::ISDIR => OpError::new(
            codes::FILES_NOT_A_FILE,
            400,
            format!("`{what}` is a directory"),
        ),
        Errno::NOTDIR => OpError::new(
            codes::FILES_NOT_A_DIRECTORY,
            400,
            format!("a component of `{what}` is not a directory"),
        ),
        Errno::NOTEMPTY | Errno::EXIST => OpError::new(
            codes::FILES_NOT_EMPTY,
            409,
            format!("`{what}` is a directory that is not empty"),
        ),
        // Opening a FIFO or socket without blocking: not a regular file.
        Errno::NXIO | Errno::AGAIN => OpError::new(
            codes::FILES_NOT_A_FILE,
            400,
            format!("`{what}` is not a regular file"),
        ),
        Errno::FBIG => OpError::new(
            codes::LIMIT_TOO_LARGE,
            413,
            format!("`{what}` is too large"),
        ),
        Errno::NOSYS => OpError::new(
            codes::FILES_IO,
            500,
            "this kernel lacks openat2; corral refuses file ops rather than open paths unsafely",
        ),
        other => OpError::new(codes::FILES_IO, 500, format!("`{what}`: {other}")),
    }
}

/// A path opened beneath its root, with the display form used in messages.
struct Opened {
    fd: OwnedFd,
    shown: String,
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
            500,
            format!("cannot confirm where the opened file lives: {e}"),
        )
    })
}

/// Opens `jp` beneath its root. Refuses anything that ends up under a protected directory.
fn open_beneath(
    jp: &JailedPath,
    flags: OFlags,
    mode: Mode,
    symlinks: SymlinkMode,
    protected: &[PathBuf],
) -> Result<Opened, OpError> {
    let shown = jp.absolute();
    let root = rustix::fs::open(
        jp.root(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_error(e, jp.root()))?;
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
        resolve_flags(symlinks),
    )
    .map_err(|e| errno_error(e, &shown))?;
    let real = real_path(&fd)?;
    if under_any(&real, protected) {
        return Err(OpError::new(
            codes::POLICY_PATH_DENIED,
            403,
            format!("`{shown}` leads into a protected location"),
        ));
    }
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
                403,
                "the policy grant holds no path for this call",
            )
        })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, OpError> + Send + 'static,
) -> Result<T, OpError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        OpError::new(
            codes::SERVER_INTERNAL,
            500,
            format!("file task failed: {e}"),
        )
    })?
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
            let symlinks = ctx.grant.symlinks;
            let protected = ctx.protected.clone();
            let limit = max_bytes(&ctx);
            match kind {
                FileOpKind::List => {
                    let max = ctx.grant.limits.max_entries.unwrap_or(DEFAULT_MAX_ENTRIES);
                    blocking(move || list(&jp, symlinks, &protected, max)).await
                }
                FileOpKind::Stat => blocking(move || stat(&jp, symlinks, &protected)).await,
                FileOpKind::Read => blocking(move || read(&jp, symlinks, &protected, limit)).await,
                FileOpKind::Write => {
                    let content = match ctx.args.get("content") {
                        Some(ArgValue::Str(s)) => s.clone(),
                        _ => String::new(),
                    };
                    let append = matches!(ctx.args.get("append"), Some(ArgValue::Bool(true)));
                    blocking(move || write(&jp, symlinks, &protected, limit, &content, append))
                        .await
                }
                FileOpKind::Delete => blocking(move || delete(&jp, symlinks, &protected)).await,
                FileOpKind::Download => download(&jp, symlinks, &protected, limit).await,
            }
        })
    }
}

fn list(
    jp: &JailedPath,
    symlinks: SymlinkMode,
    protected: &[PathBuf],
    max: u64,
) -> Result<OpOutput, OpError> {
    let o = open_beneath(
        jp,
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
        symlinks,
        protected,
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

fn stat(
    jp: &JailedPath,
    symlinks: SymlinkMode,
    protected: &[PathBuf],
) -> Result<OpOutput, OpError> {
    let o = open_beneath(jp, OFlags::PATH, Mode::empty(), symlinks, protected)?;
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
            400,
            format!("`{}` is not a regular file", o.shown),
        ));
    }
    Ok(u64::try_from(st.st_size).unwrap_or(0))
}

fn too_large(shown: &str, size: u64, limit: u64) -> OpError {
    OpError::new(
        codes::LIMIT_TOO_LARGE,
        413,
        format!("`{shown}` is {size} bytes; the limit is {limit}"),
    )
}

fn read(
    jp: &JailedPath,
    symlinks: SymlinkMode,
    protected: &[PathBuf],
    limit: u64,
) -> Result<OpOutput, OpError> {
    use std::io::Read;
    let o = open_beneath(
        jp,
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        symlinks,
        protected,
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
        .map_err(|e| OpError::new(codes::FILES_IO, 500, format!("`{}`: {e}", o.shown)))?;
    if buf.len() as u64 > limit {
        return Err(too_large(&o.shown, buf.len() as u64, limit));
    }
    let content = String::from_utf8(buf).map_err(|_| {
        OpError::new(
            codes::FILES_NOT_TEXT,
            415,
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
fn open_for_write(
    jp: &JailedPath,
    symlinks: SymlinkMode,
    protected: &[PathBuf],
    append: bool,
) -> Result<Opened, OpError> {
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
            symlinks,
            protected,
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
        if let Some(o) = create_beneath(jp, symlinks, protected)? {
            return Ok(o);
        }
    }
    Err(OpError::new(
        codes::FILES_IO,
        500,
        format!(
            "`{}` kept changing while it was opened; retry",
            jp.absolute()
        ),
    ))
}

/// Creates `jp` exclusively, in its parent opened beneath the root and checked against the
/// protected directories. `None` when a file of that name appeared in the meantime.
fn create_beneath(
    jp: &JailedPath,
    symlinks: SymlinkMode,
    protected: &[PathBuf],
) -> Result<Option<Opened>, OpError> {
    let shown = jp.absolute();
    let rel = jp.relative();
    let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let root = rustix::fs::open(
        jp.root(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_error(e, jp.root()))?;
    let dir = openat2_retrying(
        &root,
        if parent.is_empty() { "." } else { parent },
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve_flags(symlinks),
    )
    .map_err(|e| errno_error(e, &shown))?;
    let real_parent = real_path(&dir)?;
    if under_any(&real_parent, protected) || under_any(&real_parent.join(name), protected) {
        return Err(OpError::new(
            codes::POLICY_PATH_DENIED,
            403,
            format!("`{shown}` leads into a protected location"),
        ));
    }
    match openat2_retrying(
        &dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
        resolve_flags(symlinks),
    ) {
        Ok(fd) => Ok(Some(Opened { fd, shown })),
        Err(Errno::EXIST) => {
            let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| errno_error(e, &shown))?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                return Err(OpError::new(
                    codes::POLICY_SYMLINK_DENIED,
                    403,
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
    symlinks: SymlinkMode,
    protected: &[PathBuf],
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
            400,
            "the root itself is a directory",
        ));
    }
    let o = open_for_write(jp, symlinks, protected, append)?;
    let mut f = std::fs::File::from(o.fd);
    f.write_all(content.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| OpError::new(codes::FILES_IO, 500, format!("`{}`: {e}", o.shown)))?;
    Ok(OpOutput::Json {
        value: json!({"path": o.shown, "bytes_written": content.len(), "appended": append}),
        attestation: None,
    })
}

fn delete(
    jp: &JailedPath,
    symlinks: SymlinkMode,
    protected: &[PathBuf],
) -> Result<OpOutput, OpError> {
    let rel = jp.relative();
    let Some((parent, name)) = (match rel.rsplit_once('/') {
        Some((p, n)) => Some((p, n)),
        None if !rel.is_empty() => Some(("", rel)),
        None => None,
    }) else {
        return Err(OpError::new(
            codes::FILES_NOT_A_FILE,
            400,
            "the root itself cannot be deleted",
        ));
    };
    let parent_jp_abs = if parent.is_empty() {
        jp.root().to_owned()
    } else {
        format!("{}/{parent}", jp.root().trim_end_matches('/'))
    };
    let root = rustix::fs::open(
        jp.root(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_error(e, jp.root()))?;
    let parent_rel = if parent.is_empty() { "." } else { parent };
    let dir = openat2_retrying(
        &root,
        parent_rel,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve_flags(symlinks),
    )
    .map_err(|e| errno_error(e, &parent_jp_abs))?;
    let real_parent = real_path(&dir)?;
    let shown = jp.absolute();
    if under_any(&real_parent.join(name), protected) || under_any(&real_parent, protected) {
        return Err(OpError::new(
            codes::POLICY_PATH_DENIED,
            403,
            format!("`{shown}` is in a protected location"),
        ));
    }
    let st = rustix::fs::statat(dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| errno_error(e, &shown))?;
    let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
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

async fn download(
    jp: &JailedPath,
    symlinks: SymlinkMode,
    protected: &[PathBuf],
    limit: u64,
) -> Result<OpOutput, OpError> {
    let (jp2, protected) = (jp.clone(), protected.to_vec());
    let (fd, size, shown) = blocking(move || {
        let o = open_beneath(
            &jp2,
            OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
            symlinks,
            &protected,
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
