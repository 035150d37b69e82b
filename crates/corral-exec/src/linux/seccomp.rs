//! The seccomp filters the sandboxed target runs under, built with `seccompiler` (pure Rust BPF).
//!
//! A deny list (everything else is allowed), per architecture: x86_64 and aarch64. Any other
//! architecture is refused, so the backend fails closed there.
//!
//! - `EPERM` for: ptrace, process_vm_readv/writev, io_uring_*, bpf, keyctl/add_key/request_key,
//!   perf_event_open, userfaultfd, the mount family (mount, umount2, pivot_root, move_mount,
//!   open_tree, fsopen, fsconfig, fsmount, fspick, mount_setattr), unshare, setns, kexec_*,
//!   (f)init_module/delete_module, open_by_handle_at, and a few host-wide knobs (acct, swapon/off,
//!   reboot, syslog); `socket` with `AF_UNIX` (named unix sockets are reachable by path across
//!   namespaces; `socketpair` stays allowed), `AF_VSOCK`, `AF_PACKET` or a `SOCK_RAW` type; `ioctl` with
//!   `TIOCSTI` or `TIOCLINUX` compared on the low 32 bits only, so the high-bit variants
//!   (CVE-2019-10063) are caught too; `clone` with any namespace flag.
//! - `EPERM` for a mode with `S_ISUID` or `S_ISGID` (issue 11 item 1: a setuid file left in a
//!   writable root is a setuid file on the host, owned by corral's user) in `chmod`, `fchmod`,
//!   `fchmodat`, `fchmodat2`, `open`, `openat`, `creat`, `mknod` and `mknodat`. `mkdir` and
//!   `mkdirat` are left alone: the kernel drops both bits from their mode (a directory only
//!   inherits `S_ISGID` from its parent, and `S_ISUID` means nothing on one).
//! - `ENOSYS` for `clone3` (its flags live behind a pointer seccomp cannot read), so libc falls
//!   back to `clone`, whose flags are checked; and for `openat2` (its mode too), so libc and
//!   runtimes fall back to `openat`.
//! - `EOPNOTSUPP` for every `setxattr` (`setxattr`, `lsetxattr`, `fsetxattr`, `setxattrat`):
//!   file capabilities live in `security.capability`, and programs treat "no xattrs here" as
//!   normal.
//! - With an execute allow-list ([`crate::ExecRequest::exec_only`]) only: `EPERM` for
//!   `memfd_create` and `memfd_secret`, whose files live on the kernel's internal mount (never
//!   `noexec`, never under landlock), so code written into one could otherwise be executed.
//! - x86_64 only: every x32 system call number (`nr >= 0x40000000`) gets `ENOSYS`, so the deny
//!   list cannot be sidestepped through the x32 ABI's numbers.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The system calls denied outright on this architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn denied() -> Vec<i64> {
    let mut nrs = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_bpf,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_open_by_handle_at,
        libc::SYS_acct,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_syslog,
    ];
    #[cfg(target_arch = "x86_64")]
    nrs.extend([libc::SYS_uselib, libc::SYS_iopl, libc::SYS_ioperm]);
    nrs.sort_unstable();
    nrs.dedup();
    nrs
}

/// `TIOCSTI`: push a byte into a terminal's input queue.
const TIOCSTI: u64 = 0x5412;
/// `TIOCLINUX`: console selection paste (CVE-2023-1523).
const TIOCLINUX: u64 = 0x541C;
/// `SOCK_RAW`, and the mask that strips `SOCK_NONBLOCK`/`SOCK_CLOEXEC` from a socket type.
const SOCK_RAW: u64 = 3;
const SOCK_TYPE_MASK: u64 = 0xf;
const AF_UNIX: u64 = 1;
const AF_PACKET: u64 = 17;
const AF_VSOCK: u64 = 40;
/// `clone` flags that make a namespace.
const CLONE_NS_FLAGS: [u64; 7] = [
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

/// `S_ISUID` and `S_ISGID`: a mode with either is refused.
const SET_ID_BITS: [u64; 2] = [0o4000, 0o2000];
/// `fchmodat2` (Linux 6.6), `setxattrat` (6.13), `openat2` (5.6): the same number on x86_64 and
/// aarch64 (the unified table from 424 on).
const SYS_FCHMODAT2: i64 = 452;
const SYS_SETXATTRAT: i64 = 463;
const SYS_OPENAT2: i64 = 437;
/// `memfd_secret` (5.14): 447 on both.
const SYS_MEMFD_SECRET: i64 = 447;

/// Each system call that takes a file mode, and the index of its mode argument.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn mode_args() -> Vec<(i64, u8)> {
    let mut calls = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
    ]);
    calls
}

/// The system calls that set an extended attribute.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn setxattr_calls() -> [i64; 4] {
    [
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        SYS_SETXATTRAT,
    ]
}

/// The architecture's seccompiler target, or why there is none.
fn target_arch() -> Result<TargetArch, String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(TargetArch::x86_64),
        "aarch64" => Ok(TargetArch::aarch64),
        other => Err(format!(
            "no seccomp table for the `{other}` architecture (only x86_64 and aarch64)"
        )),
    }
}

fn cond(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompRule, String> {
    let c = SeccompCondition::new(arg, len, op, value).map_err(|e| e.to_string())?;
    SeccompRule::new(vec![c]).map_err(|e| e.to_string())
}

/// The filters, in the order they are to be installed.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn filters() -> Result<Vec<BpfProgram>, String> {
    use SeccompCmpArgLen::{Dword, Qword};
    use SeccompCmpOp::{Eq, MaskedEq};

    let arch = target_arch()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in denied() {
        // An empty rule list matches the system call whatever its arguments.
        rules.insert(nr, Vec::new());
    }
    rules.insert(
        libc::SYS_socket,
        vec![
            // A named unix socket is reached by its path alone, across the network namespace:
            // a host listener's socket file in a bound root would be a way out (landlock only
            // controls that from ABI 9). `socketpair` stays allowed.
            cond(0, Dword, Eq, AF_UNIX)?,
            cond(0, Dword, Eq, AF_VSOCK)?,
            cond(0, Dword, Eq, AF_PACKET)?,
            cond(1, Dword, MaskedEq(SOCK_TYPE_MASK), SOCK_RAW)?,
        ],
    );
    rules.insert(
        libc::SYS_socketpair,
        vec![
            cond(0, Dword, Eq, AF_VSOCK)?,
            cond(0, Dword, Eq, AF_PACKET)?,
        ],
    );
    // `Dword` compares the low 32 bits only: the kernel truncates the command to an int.
    rules.insert(
        libc::SYS_ioctl,
        vec![cond(1, Dword, Eq, TIOCSTI)?, cond(1, Dword, Eq, TIOCLINUX)?],
    );
    let clone_rules = CLONE_NS_FLAGS
        .iter()
        .map(|&flag| cond(0, Qword, MaskedEq(flag), flag))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    // Masked on the low 32 bits (a mode is an unsigned int): either set-id bit refuses the call.
    for (nr, arg) in mode_args() {
        let set_id = SET_ID_BITS
            .iter()
            .map(|&bit| cond(arg, Dword, MaskedEq(bit), bit))
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(nr, set_id);
    }

    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new()), (SYS_OPENAT2, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let xattrs = SeccompFilter::new(
        setxattr_calls()
            .into_iter()
            .map(|nr| (nr, Vec::new()))
            .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EOPNOTSUPP as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let mut programs = vec![
        BpfProgram::try_from(deny).map_err(|e| e.to_string())?,
        BpfProgram::try_from(clone3).map_err(|e| e.to_string())?,
        BpfProgram::try_from(xattrs).map_err(|e| e.to_string())?,
    ];
    #[cfg(target_arch = "x86_64")]
    programs.push(no_x32());
    Ok(programs)
}

/// The filter a run with an execute allow-list adds: no anonymous memory files.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn no_memfd() -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        BTreeMap::from([
            (libc::SYS_memfd_create, Vec::new()),
            (SYS_MEMFD_SECRET, Vec::new()),
        ]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target_arch()?,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// Other architectures: no table, so the backend refuses to run.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn no_memfd() -> Result<BpfProgram, String> {
    let _ = SYS_MEMFD_SECRET;
    filters().map(|_| Vec::new())
}

/// Other architectures: no table, so the backend refuses to run.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn filters() -> Result<Vec<BpfProgram>, String> {
    let _ = (
        target_arch,
        cond,
        SET_ID_BITS,
        SYS_FCHMODAT2,
        SYS_SETXATTRAT,
        SYS_OPENAT2,
    );
    Err(format!(
        "no seccomp table for the `{}` architecture (only x86_64 and aarch64)",
        std::env::consts::ARCH
    ))
}

/// x86_64: kill anything that is not the x86_64 audit arch, and refuse every x32 number.
#[cfg(target_arch = "x86_64")]
fn no_x32() -> BpfProgram {
    use seccompiler::sock_filter;
    // BPF_LD | BPF_W | BPF_ABS (BPF_LD and BPF_W are 0).
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
    const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
    const BPF_RET_K: u16 = 0x06;
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        ins(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ins(BPF_JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
        ins(BPF_RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
        ins(BPF_RET_K, 0, 0, RET_ALLOW),
    ]
}

/// Installs `programs` on the calling thread. `no_new_privs` must already be set.
pub(crate) fn install(programs: &[BpfProgram]) -> Result<(), String> {
    for p in programs {
        seccompiler::apply_filter(p).map_err(|e| e.to_string())?;
    }
    Ok(())
}
