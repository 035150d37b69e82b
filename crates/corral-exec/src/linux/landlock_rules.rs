//! The landlock ruleset of the sandboxed target: a pinned ABI, every access right of that ABI
//! handled, full enforcement required (a partially enforced ruleset is an error, never a
//! best-effort run).
//!
//! Listing (`ReadDir` only) on `/`, whose entries are the view's own mount points; read (and
//! execute) rights on the system directories, `/proc`, `/dev` and the request's
//! `read_paths`; read-write rights on `/tmp`, `/dev/shm` and the request's `write_paths`; write
//! on `/dev/null`, `/dev/zero`, `/dev/full`. With `network: none`, TCP bind and connect are
//! handled with no rule (denied) on top of the empty network namespace. Abstract unix sockets and
//! signals are scoped to the sandbox's own landlock domain. With an execute allow-list
//! ([`crate::ExecRequest::exec_only`]) no group carries the execute right; only the listed
//! files (and what starting them needs) do.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::spec::Network;

/// The landlock ABI the ruleset is written for. Every access right it defines is handled, and
/// the kernel must support all of them (Linux 6.12+; this machine has ABI 7, whose additions
/// are logging flags only).
pub(crate) const ABI_PINNED: ABI = ABI::V6;
/// The attestation's name for it.
pub(crate) const PRIMITIVE: &str = "landlock:abi6";

/// System directories, read and execute.
pub(crate) const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc",
];

/// The ruleset for one run, as paths inside the sandbox's root view.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    pub(crate) read: Vec<PathBuf>,
    pub(crate) write: Vec<PathBuf>,
    pub(crate) write_files: Vec<PathBuf>,
    /// Directories that may be listed (and only listed): `/`, whose entries are the view's own
    /// mount points.
    pub(crate) list: Vec<PathBuf>,
    pub(crate) deny_tcp: bool,
    /// The only files (or directories) that may be executed; `None`: anything readable.
    pub(crate) exec: Option<Vec<PathBuf>>,
}

impl Rules {
    /// The rules for a run with these user paths.
    pub(crate) fn for_run(
        read_paths: &[PathBuf],
        write_paths: &[PathBuf],
        net: Network,
        exec: Option<&[PathBuf]>,
    ) -> Self {
        let mut read: Vec<PathBuf> = SYSTEM_DIRS.iter().map(PathBuf::from).collect();
        read.extend(["/proc", "/dev"].map(PathBuf::from));
        read.extend(read_paths.iter().cloned());
        let mut write: Vec<PathBuf> = ["/tmp", "/dev/shm"].map(PathBuf::from).to_vec();
        write.extend(write_paths.iter().cloned());
        Rules {
            read,
            write,
            write_files: ["/dev/null", "/dev/zero", "/dev/full"]
                .map(PathBuf::from)
                .to_vec(),
            list: vec![PathBuf::from("/")],
            deny_tcp: net == Network::None,
            exec: exec.map(<[PathBuf]>::to_vec),
        }
    }
}

fn read_access() -> BitFlags<AccessFs> {
    AccessFs::from_read(ABI_PINNED)
}

fn write_access() -> BitFlags<AccessFs> {
    // Everything but making device nodes.
    AccessFs::from_all(ABI_PINNED)
        & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev)
}

/// A rule for `path` (skipped when the path does not exist in the view), with the rights a
/// file can carry when it is not a directory.
fn rule(path: &Path, access: BitFlags<AccessFs>) -> Result<Option<PathBeneath<PathFd>>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("`{}`: {e}", path.display())),
    };
    let access = if meta.is_dir() {
        access
    } else {
        access & AccessFs::from_file(ABI_PINNED)
    };
    let fd = PathFd::new(path).map_err(|e| format!("`{}`: {e}", path.display()))?;
    Ok(Some(PathBeneath::new(fd, access)))
}

/// Restricts the calling thread. Errors unless the ruleset is fully enforced.
pub(crate) fn restrict(rules: &Rules) -> Result<(), String> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI_PINNED))
        .map_err(|e| e.to_string())?;
    if rules.deny_tcp {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI_PINNED))
            .map_err(|e| e.to_string())?;
    }
    let ruleset = ruleset
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|e| e.to_string())?;
    let mut created = ruleset.create().map_err(|e| e.to_string())?;
    // With an allow-list, execution is granted by its own rules only.
    let strip = |a: BitFlags<AccessFs>| match rules.exec {
        Some(_) => a & !AccessFs::Execute,
        None => a,
    };
    let no_exec = Vec::new();
    let groups = [
        (&rules.read, strip(read_access())),
        (&rules.write, strip(read_access() | write_access())),
        (&rules.write_files, AccessFs::ReadFile | AccessFs::WriteFile),
        (&rules.list, BitFlags::from(AccessFs::ReadDir)),
        (rules.exec.as_ref().unwrap_or(&no_exec), read_access()),
    ];
    for (paths, access) in groups {
        for path in paths {
            if let Some(r) = rule(path, access)? {
                created = created.add_rule(r).map_err(|e| e.to_string())?;
            }
        }
    }
    let status = created.restrict_self().map_err(|e| e.to_string())?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!(
            "the landlock ruleset is {:?}, not fully enforced",
            status.ruleset
        ));
    }
    if !status.no_new_privs {
        return Err("no_new_privs was not set with the landlock ruleset".into());
    }
    Ok(())
}

/// The kernel's landlock ABI version (0 when landlock is off).
pub(crate) fn kernel_abi() -> i32 {
    // `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
    #[expect(
        unsafe_code,
        reason = "the landlock version query has no safe wrapper in the landlock crate"
    )]
    // SAFETY: a null attribute pointer with size 0 and the VERSION flag is the documented way to
    // query the ABI; the kernel reads no memory and the call has no side effect.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}
