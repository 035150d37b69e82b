//! `isolation.host_uids` (issue 12 item 2): as host root, the sandboxed program runs as an
//! unprivileged host uid, and the run's paths are idmapped so their files keep their owner. As a
//! normal user the mode does not apply: these tests say so and check that nothing changed.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use corral_exec::linux::{DEFAULT_HOST_RANGE, HostRange, HostUids, LinuxBackend};
use corral_exec::{Backend, ExecOutput, ExecRequest};

use crate::{request, shell};

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_corral-sandbox-helper"))
}

fn root() -> bool {
    rustix::process::getuid().is_root()
}

/// A backend with the default range (which applies only to host root).
fn backend() -> LinuxBackend {
    crate::with_test_pool(LinuxBackend::new(helper())).with_host_ids(Some(DEFAULT_HOST_RANGE))
}

async fn run(req: ExecRequest) -> ExecOutput {
    match backend().run(req).await {
        Ok(out) => out,
        Err(e) => panic!("the command should run: {e} ({e:?})"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::fs::canonicalize(dir.path()).expect("canonical");
    (dir, path)
}

fn not_root_notice() -> bool {
    if root() {
        return false;
    }
    eprintln!(
        "notice: `isolation.host_uids` applies only when corral is host root; as a normal user the program is already an unprivileged uid"
    );
    true
}

#[test]
fn the_backend_applies_the_range_only_as_host_root() {
    assert_eq!(backend().host_ids(), root().then_some(DEFAULT_HOST_RANGE));
}

#[tokio::test]
async fn the_program_runs_as_the_first_id_of_the_range_and_attests_it() {
    let out = run(shell("cat /proc/self/uid_map; id -u; sleep 0")).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", text(&out.stderr));
    let a = &out.attestation.primitives;
    if not_root_notice() {
        assert!(!a.iter().any(|p| p == "uid:host-unprivileged"), "{a:?}");
        return;
    }
    assert!(a.iter().any(|p| p == "uid:host-unprivileged"), "{a:?}");
    assert!(a.iter().any(|p| p == "rlimit:nproc-userns"), "{a:?}");
    let stdout = text(&out.stdout);
    let map: Vec<Vec<String>> = stdout
        .lines()
        .take(3)
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    let (start, above) = (DEFAULT_HOST_RANGE.uid, DEFAULT_HOST_RANGE.uid + 65535);
    let want: Vec<Vec<String>> = [
        ["0".to_owned(), start.to_string(), "65534".to_owned()],
        ["65534".to_owned(), "0".to_owned(), "1".to_owned()],
        ["65535".to_owned(), above.to_string(), "1".to_owned()],
    ]
    .map(Vec::from)
    .into();
    assert_eq!(
        map, want,
        "inside 0.. is the range, but for 65534 (nobody), host root's for the helper and the init only: {stdout}"
    );
    assert!(stdout.ends_with("0\n"), "inside root: {stdout}");
}

/// A workspace with `secret` (owner root when run as root, mode 0600) and `other` (owned by
/// host uid 4242, mode 0644).
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let (keep, dir) = tempdir();
    let secret = dir.join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    if root() {
        let other = dir.join("other");
        std::fs::write(&other, "theirs\n").unwrap();
        std::os::unix::fs::chown(&other, Some(4242), Some(4242)).unwrap();
    }
    (keep, dir)
}

const OWNERSHIP_SCRIPT: &str = "cat secret && echo more >> secret && echo new > created \
    && mkdir made && stat -c '%u %n' secret created made; \
    [ -e other ] && stat -c '%u %n' other; \
    (echo nope >> other) 2>/dev/null && echo other-WRITTEN || echo other-refused; \
    stat -c '%u %n' /usr/bin";

/// What the ownership script printed, as a user sees it, and the host's side.
fn check_ownership(out: &ExecOutput, dir: &std::path::Path) {
    assert_eq!(out.exit_code, Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("s3cret\n"),
        "the 0600 file is readable: {stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("secret")).unwrap(),
        "s3cret\nmore\n",
        "and writable"
    );
    let me = rustix::process::getuid().as_raw();
    for name in ["created", "made", "secret"] {
        let meta = std::fs::symlink_metadata(dir.join(name)).expect("on the host");
        assert_eq!(
            meta.uid(),
            me,
            "`{name}` is owned on the host by corral's user, as without the mode"
        );
    }
    if root() {
        // Inside, every file keeps its host owner: root's are inside root's (the program's own).
        for line in [
            "0 secret",
            "0 created",
            "0 made",
            "4242 other",
            "other-refused",
        ] {
            assert!(stdout.lines().any(|l| l == line), "`{line}` in {stdout}");
        }
        assert!(
            stdout.lines().any(|l| l == "65534 /usr/bin"),
            "host root's system directories show as nobody: {stdout}"
        );
    }
}

#[tokio::test]
async fn a_root_owned_0600_file_is_readable_and_writable_and_new_files_keep_the_host_owner() {
    let (_keep, dir) = workspace();
    let mut req = shell(OWNERSHIP_SCRIPT);
    req.cwd = dir.clone();
    req.write_paths = vec![dir.clone()];
    let out = run(req).await;
    check_ownership(&out, &dir);
    let a = &out.attestation.primitives;
    assert!(a.iter().any(|p| p == "cow:overlay"), "{a:?}");
    assert_eq!(
        a.iter().any(|p| p == "uid:host-unprivileged"),
        root(),
        "{a:?}"
    );
}

#[tokio::test]
async fn an_attached_run_writes_live_files_owned_as_before_and_runs_as_the_range() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let (_keep, dir) = workspace();
    let mut req = shell(&format!("{OWNERSHIP_SCRIPT}; echo ready; read x || true"));
    req.cwd = dir.clone();
    req.write_paths = vec![dir.clone()];
    let backend = std::sync::Arc::new(backend());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let b = std::sync::Arc::clone(&backend);
    let run = tokio::spawn(async move { b.run_attached(req, tx).await });
    let attached = rx.await.expect("the pipes are handed over");
    let mut lines = BufReader::new(attached.stdout).lines();
    let mut seen = String::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line == "ready" {
            break;
        }
        seen.push_str(&line);
        seen.push('\n');
    }
    // Live, while the program runs: seen from the host, its processes are the range's first
    // uid, never root.
    let created = std::fs::symlink_metadata(dir.join("created")).expect("live on the host");
    assert_eq!(created.uid(), rustix::process::getuid().as_raw());
    let holders = processes_with_cwd(&dir);
    assert!(!holders.is_empty(), "the program's shell has its cwd there");
    let want = if root() {
        DEFAULT_HOST_RANGE.uid
    } else {
        rustix::process::getuid().as_raw()
    };
    for (pid, uid) in &holders {
        assert_eq!(*uid, want, "host uid of sandboxed pid {pid}");
    }
    drop(attached.stdin);
    let out = run.await.unwrap().expect("the attached run ends");
    let out = ExecOutput {
        stdout: seen.into_bytes(),
        ..out
    };
    check_ownership(&out, &dir);
}

/// The host pids whose working directory is `dir`, with their real uid (from
/// `/proc/<pid>/status`).
fn processes_with_cwd(dir: &std::path::Path) -> Vec<(u32, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if std::fs::read_link(entry.path().join("cwd")).ok().as_deref() != Some(dir) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse().ok());
        if let Some(uid) = uid {
            found.push((pid, uid));
        }
    }
    found
}

#[tokio::test]
async fn rlimit_nproc_binds_the_program_of_host_root() {
    // The program lowers its own RLIMIT_NPROC and forks: the kernel exempts host uid 0 from it,
    // so without the mode all 20 forks succeed (only the pids cgroup's 1026 would stop them);
    // as an unprivileged host uid, the count of the run's user namespace stops them at 4.
    let out = run(request(&[
        "/usr/bin/python3",
        "-c",
        "import os, resource, time\n\
         resource.setrlimit(resource.RLIMIT_NPROC, (4, 4))\n\
         n = 0\n\
         for i in range(20):\n\
         \x20   try:\n\
         \x20       pid = os.fork()\n\
         \x20   except OSError:\n\
         \x20       break\n\
         \x20   if pid == 0:\n\
         \x20       time.sleep(5)\n\
         \x20       os._exit(0)\n\
         \x20   n += 1\n\
         print('forked', n)\n",
    ]))
    .await;
    let stdout = text(&out.stdout);
    let forked: u32 = stdout
        .trim()
        .strip_prefix("forked ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("stdout: {stdout} stderr: {}", text(&out.stderr)));
    assert!(forked < 4, "RLIMIT_NPROC stopped the forks: {forked} of 20");
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p == "rlimit:nproc-userns"),
        "{:?}",
        out.attestation.primitives
    );
}

#[test]
fn auto_takes_corrals_subordinate_ids_else_the_documented_default() {
    let (_keep, dir) = tempdir();
    let (subuid, subgid) = (dir.join("subuid"), dir.join("subgid"));
    std::fs::write(&subuid, "corral-ci:296608:65536\n").unwrap();
    std::fs::write(&subgid, "corral-ci:296608:65536\n").unwrap();
    assert_eq!(
        HostUids::Auto.resolve_from(&subuid, &subgid),
        Ok(Some(DEFAULT_HOST_RANGE)),
        "no `corral` entry: the default range"
    );
    std::fs::write(&subuid, "corral-ci:296608:65536\ncorral:500000:65536\n").unwrap();
    std::fs::write(&subgid, "corral:600000:70000\n").unwrap();
    assert_eq!(
        HostUids::Auto.resolve_from(&subuid, &subgid),
        HostRange::checked(500_000, 600_000, 65536).map(Some)
    );
    assert_eq!(
        HostUids::parse("root").and_then(HostUids::resolve),
        Ok(None)
    );
    assert_eq!(
        HostUids::parse("1879048192:65536"),
        Ok(HostUids::Range(DEFAULT_HOST_RANGE))
    );
    for bad in ["0:65536", "100000:10", "4294967000:65536", "sometimes"] {
        let e = HostUids::parse(bad).expect_err(bad);
        assert!(
            e.contains(bad.split(':').next().unwrap_or(bad)) || e.contains("65535"),
            "{bad}: {e}"
        );
    }
}

#[tokio::test]
async fn the_program_cannot_take_host_roots_inside_id_or_give_a_live_file_to_another_host_id() {
    // Attack class: privilege, host ids as root (holds; session-3 attack). Inside 65534 is host
    // root (for the helper and the init only): the program may not take it with `setresuid`,
    // chown a file on a live (attached, idmapped) bind to it or to another id of the range, nor
    // reach the init's process (pid 1, host root until the view was built) through /proc.
    use tokio::io::AsyncReadExt;
    let (_keep, dir) = tempdir();
    let mut req = request(&[
        "/usr/bin/python3",
        "-I",
        "-c",
        "import os, errno\n\
         def t(name, f):\n\
         \x20   try:\n\
         \x20       f()\n\
         \x20       print(name, 'ALLOWED')\n\
         \x20   except OSError as e:\n\
         \x20       print(name, 'refused', errno.errorcode.get(e.errno, e.errno))\n\
         open('mine', 'w').write('x')\n\
         t('setresuid-nobody', lambda: os.setresuid(65534, 65534, 65534))\n\
         t('setresgid-nobody', lambda: os.setresgid(65534, 65534, 65534))\n\
         t('setuid-1', lambda: os.setuid(1))\n\
         t('chown-nobody', lambda: os.chown('mine', 65534, -1))\n\
         t('chgrp-nobody', lambda: os.chown('mine', -1, 65534))\n\
         t('chown-4242', lambda: os.chown('mine', 4242, 4242))\n\
         t('init-environ', lambda: open('/proc/1/environ').read())\n\
         t('init-fds', lambda: os.listdir('/proc/1/fd'))\n\
         t('init-root', lambda: os.listdir('/proc/1/root/'))\n\
         t('init-mem', lambda: open('/proc/1/mem', 'rb').read(1))\n\
         print('done')\n",
    ]);
    req.cwd = dir.clone();
    req.write_paths = vec![dir.clone()];
    let backend = std::sync::Arc::new(backend());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let b = std::sync::Arc::clone(&backend);
    let run = tokio::spawn(async move { b.run_attached(req, tx).await });
    let mut attached = rx.await.expect("the pipes are handed over");
    let mut stdout = String::new();
    attached
        .stdout
        .read_to_string(&mut stdout)
        .await
        .expect("stdout");
    drop(attached.stdin);
    let out = run.await.unwrap().expect("the attached run ends");
    assert_eq!(out.exit_code, Some(0), "{stdout} {}", text(&out.stderr));
    assert!(stdout.ends_with("done\n"), "{stdout}");
    for attempt in [
        "setresuid-nobody",
        "setresgid-nobody",
        "setuid-1",
        "chown-nobody",
        "chgrp-nobody",
        "chown-4242",
        "init-environ",
        "init-fds",
        "init-root",
        "init-mem",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("{attempt} refused"))),
            "{attempt} must be refused: {stdout}"
        );
    }
    let meta = std::fs::symlink_metadata(dir.join("mine")).expect("live on the host");
    let me = rustix::process::getuid().as_raw();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (me, rustix::process::getgid().as_raw())
    );
}

#[tokio::test]
async fn the_program_cannot_write_the_sysctls_of_its_namespaces_though_inside_root_owns_them() {
    // Attack class: privilege, host ids as root (holds; session-3 attack). As inside root the
    // program owns its network and ipc namespaces' sysctls (`/proc/sys/net/...`,
    // `/proc/sys/kernel/msgmnb`, `/proc/sys/fs/mqueue/...`), and the kernel lets their owner
    // write them without any capability: landlock is what keeps /proc/sys read-only.
    let out = run(shell(
        "for f in net/ipv4/ip_forward net/core/somaxconn net/ipv4/ping_group_range \
         kernel/msgmnb kernel/shmmax fs/mqueue/msg_max user/max_inotify_instances; do \
         v=$(cat /proc/sys/$f); (echo \"$v\" > /proc/sys/$f) 2>/dev/null \
         && echo \"$f WRITTEN\" || echo \"$f refused\"; done",
    ))
    .await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 7, "{stdout}");
    assert!(
        stdout.lines().all(|l| l.ends_with(" refused")),
        "a sysctl was written: {stdout}"
    );
}
