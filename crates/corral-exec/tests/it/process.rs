//! The `process` backend.

use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_exec::process::ProcessBackend;
use corral_exec::{Backend, ExecError, ExecOutput, ExecRequest};

use crate::{request, shell};

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
const SIGXCPU: i32 = 24;

async fn run(req: ExecRequest) -> ExecOutput {
    ProcessBackend::new()
        .run(req)
        .await
        .expect("the command runs")
}

async fn run_err(req: ExecRequest) -> ExecError {
    match ProcessBackend::new().run(req).await {
        Ok(out) => panic!("expected an error, got {out:?}"),
        Err(e) => e,
    }
}

fn stdout(out: &ExecOutput) -> &str {
    std::str::from_utf8(&out.stdout).expect("utf-8 stdout")
}

/// Whether `pid` is gone: `kill -0` fails, or it is a zombie nobody reaped yet.
fn is_dead(pid: u32) -> bool {
    let alive = std::process::Command::new("/bin/sh")
        .args(["-c", &format!("kill -0 {pid} 2>/dev/null")])
        .status()
        .expect("sh runs")
        .success();
    if !alive {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(_) => true,
    }
}

/// Waits up to 5 s for `pid` to die (a SIGKILL is delivered asynchronously).
fn dies_soon(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if is_dead(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[tokio::test]
async fn the_backend_is_named_process_and_its_preflight_always_passes() {
    let backend = ProcessBackend::new();
    assert_eq!(backend.name(), "process");
    assert_eq!(backend.preflight(), Ok(()));
}

#[tokio::test]
async fn echo_runs_and_its_stdout_is_captured() {
    let out = run(request(&["/bin/echo", "hello", "world"])).await;
    assert_eq!(stdout(&out), "hello world\n");
    assert!(out.stderr.is_empty());
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.signal, None);
    assert!(!out.timed_out && !out.stdout_truncated && !out.stderr_truncated);
}

#[tokio::test]
async fn arguments_reach_the_program_verbatim_without_a_shell() {
    let out = run(request(&["/bin/echo", "$HOME", "a b", "*", ";", "|"])).await;
    assert_eq!(stdout(&out), "$HOME a b * ; |\n");
}

#[tokio::test]
async fn a_nonzero_exit_code_and_stderr_are_reported() {
    let out = run(shell("echo oops >&2; exit 3")).await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.signal, None);
    assert_eq!(out.stderr, b"oops\n");
    assert!(!out.timed_out);
}

#[tokio::test]
async fn the_signal_that_ended_the_command_is_reported() {
    let out = run(shell("kill -TERM $$")).await;
    assert_eq!(out.exit_code, None);
    assert_eq!(out.signal, Some(SIGTERM));
    assert!(!out.timed_out);
}

#[tokio::test]
async fn stdin_is_delivered_and_then_closed() {
    let mut req = request(&["/bin/cat"]);
    req.stdin = Some(b"line one\nline two\n".to_vec());
    let out = run(req).await;
    assert_eq!(stdout(&out), "line one\nline two\n");
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn a_large_stdin_is_delivered_while_stdout_is_drained() {
    // cat echoes as it reads: neither side may wait for the other to finish.
    let data: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let mut req = request(&["/bin/cat"]);
    req.stdin = Some(data.clone());
    req.max_output_bytes = 8 * 1024 * 1024;
    let out = run(req).await;
    assert_eq!(out.stdout, data);
    assert!(!out.stdout_truncated);
}

#[tokio::test]
async fn without_stdin_the_child_reads_end_of_file() {
    let out = run(request(&["/bin/cat"])).await;
    assert!(out.stdout.is_empty());
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn a_child_that_ignores_its_stdin_still_finishes() {
    let mut req = request(&["/bin/true"]);
    req.stdin = Some(vec![b'x'; 4 * 1024 * 1024]);
    let out = run(req).await;
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn the_environment_is_exactly_the_one_given() {
    assert!(
        std::env::var_os("PATH").is_some(),
        "the test needs a PATH to not inherit"
    );
    let mut req = request(&["/usr/bin/env"]);
    req.env = vec![
        ("FOO".into(), "bar baz".into()),
        ("EMPTY".into(), String::new()),
    ];
    let out = run(req).await;
    let mut lines: Vec<&str> = stdout(&out).lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["EMPTY=", "FOO=bar baz"]);
}

#[tokio::test]
async fn an_empty_environment_inherits_nothing() {
    let out = run(request(&["/usr/bin/env"])).await;
    assert_eq!(stdout(&out), "");
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn the_working_directory_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = request(&["/bin/pwd"]);
    req.cwd = dir.path().to_path_buf();
    let out = run(req).await;
    let expected = dir.path().canonicalize().unwrap();
    assert_eq!(stdout(&out).trim_end(), expected.to_str().unwrap());
}

#[tokio::test]
async fn output_over_the_cap_is_truncated_while_the_child_runs_to_the_end() {
    let mut req = request(&["/usr/bin/head", "-c", "10000000", "/dev/zero"]);
    req.max_output_bytes = 1024;
    let out = run(req).await;
    assert_eq!(out.stdout.len(), 1024);
    assert!(out.stdout_truncated);
    assert!(!out.stderr_truncated);
    assert_eq!(
        out.exit_code,
        Some(0),
        "head was not blocked on a full pipe"
    );
    assert!(!out.timed_out);
}

#[tokio::test]
async fn stderr_is_capped_independently_of_stdout() {
    let mut req = shell("echo short; head -c 5000 /dev/zero >&2");
    req.max_output_bytes = 100;
    let out = run(req).await;
    assert_eq!(stdout(&out), "short\n");
    assert!(!out.stdout_truncated);
    assert_eq!(out.stderr.len(), 100);
    assert!(out.stderr_truncated);
}

#[tokio::test]
async fn output_exactly_at_the_cap_is_not_marked_truncated() {
    let mut req = request(&["/usr/bin/head", "-c", "1024", "/dev/zero"]);
    req.max_output_bytes = 1024;
    let out = run(req).await;
    assert_eq!(out.stdout.len(), 1024);
    assert!(!out.stdout_truncated);
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed() {
    let mut req = request(&["/bin/sleep", "30"]);
    req.timeout = Duration::from_secs(1);
    let started = Instant::now();
    let out = run(req).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(out.timed_out);
    assert_eq!(out.signal, Some(SIGKILL));
    assert_eq!(out.exit_code, None);
    assert!(out.duration >= Duration::from_secs(1));
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let mut req = shell("sleep 30 & echo $!; wait");
    req.timeout = Duration::from_secs(1);
    let started = Instant::now();
    let out = run(req).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(out.timed_out);
    let pid: u32 = stdout(&out)
        .trim()
        .parse()
        .expect("the script printed a pid");
    assert!(dies_soon(pid), "the grandchild {pid} survived the timeout");
}

#[tokio::test]
async fn a_background_grandchild_dies_with_the_group_after_a_normal_exit() {
    let started = Instant::now();
    let out = run(shell("sleep 30 & echo $!")).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(out.exit_code, Some(0));
    assert!(!out.timed_out);
    let pid: u32 = stdout(&out)
        .trim()
        .parse()
        .expect("the script printed a pid");
    assert!(dies_soon(pid), "the grandchild {pid} outlived the run");
}

#[tokio::test]
async fn a_grandchild_that_left_the_group_cannot_hang_the_call_on_its_pipe() {
    // `setsid` puts the sleep in a new session (outside the group), still holding stdout.
    let started = Instant::now();
    let out = run(shell("setsid sleep 30 & echo $!")).await;
    let elapsed = started.elapsed();
    let pid: u32 = stdout(&out)
        .trim()
        .parse()
        .expect("the script printed a pid");
    // Not ours to leave behind: the process backend cannot kill what escaped its group.
    let _ = std::process::Command::new("/bin/kill")
        .args(["-9", &pid.to_string()])
        .status();
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test]
async fn a_file_size_limit_makes_a_big_write_fail() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = shell("head -c 1000000 /dev/zero > big");
    req.cwd = dir.path().to_path_buf();
    req.limits.file_size = Some(4096);
    let out = run(req).await;
    assert_ne!(out.exit_code, Some(0), "the write should fail: {out:?}");
    let written = std::fs::metadata(dir.path().join("big")).unwrap().len();
    assert!(written <= 4096, "wrote {written} bytes");
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p == "rlimit:fsize")
    );
}

#[tokio::test]
async fn a_cpu_limit_kills_a_busy_loop() {
    let mut req = shell("while :; do :; done");
    req.limits.cpu_seconds = Some(1);
    req.timeout = Duration::from_secs(60);
    let out = run(req).await;
    assert!(
        !out.timed_out,
        "the loop ran into the wall-clock timeout instead: {out:?}"
    );
    assert!(
        matches!(out.signal, Some(SIGXCPU | SIGKILL)),
        "ended by {:?}",
        out.signal
    );
    assert!(out.attestation.primitives.iter().any(|p| p == "rlimit:cpu"));
}

/// The soft and hard values of one line of `/proc/self/limits`.
fn limit_line<'a>(limits: &'a str, name: &str) -> (&'a str, &'a str) {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .unwrap_or_else(|| panic!("no `{name}` in {limits}"));
    let mut fields = line.split_whitespace();
    (fields.next().unwrap(), fields.next().unwrap())
}

#[tokio::test]
async fn the_requested_rlimits_are_in_force_in_the_child() {
    let mut req = request(&["/bin/cat", "/proc/self/limits"]);
    req.limits.cpu_seconds = Some(100);
    req.limits.memory = Some(1 << 30);
    req.limits.processes = Some(1000);
    req.limits.file_size = Some(1 << 20);
    req.limits.open_files = Some(64);
    let out = run(req).await;
    let limits = stdout(&out);
    // The CPU hard limit is one second above the soft one: SIGXCPU first, then SIGKILL.
    assert_eq!(limit_line(limits, "Max cpu time"), ("100", "101"));
    assert_eq!(
        limit_line(limits, "Max address space"),
        ("1073741824", "1073741824")
    );
    assert_eq!(limit_line(limits, "Max processes"), ("1000", "1000"));
    assert_eq!(limit_line(limits, "Max file size"), ("1048576", "1048576"));
    assert_eq!(limit_line(limits, "Max open files"), ("64", "64"));
}

#[tokio::test]
async fn a_limit_above_corrals_own_hard_limit_is_clamped_not_refused() {
    let mut req = request(&["/bin/cat", "/proc/self/limits"]);
    req.limits.open_files = Some(u64::MAX - 1);
    let out = run(req).await;
    let (soft, hard) = limit_line(stdout(&out), "Max open files");
    assert_eq!(soft, hard);
    assert_ne!(soft, "unlimited");
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error_naming_it() {
    let err = run_err(request(&["/nonexistent/program", "x"])).await;
    match &err {
        ExecError::Spawn { program, reason } => {
            assert_eq!(program, "/nonexistent/program");
            assert!(reason.contains("no such program"), "{reason}");
        }
        other => panic!("expected Spawn, got {other:?}"),
    }
    assert_eq!(err.code(), "exec.spawn_failed");
}

#[tokio::test]
async fn a_program_that_is_not_executable_is_a_spawn_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("script");
    std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
    let err = run_err(request(&[file.to_str().unwrap()])).await;
    match err {
        ExecError::Spawn { reason, .. } => {
            assert!(reason.contains("permission denied"), "{reason}")
        }
        other => panic!("expected Spawn, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_working_directory_is_a_spawn_error_saying_so() {
    let mut req = request(&["/bin/true"]);
    req.cwd = "/nonexistent/dir".into();
    match run_err(req).await {
        ExecError::Spawn { reason, .. } => {
            assert!(reason.contains("working directory"), "{reason}")
        }
        other => panic!("expected Spawn, got {other:?}"),
    }
}

#[tokio::test]
async fn an_empty_argv_is_invalid() {
    let err = run_err(request(&[])).await;
    assert!(matches!(err, ExecError::Invalid(_)), "{err:?}");
    assert_eq!(err.code(), "exec.invalid");
}

#[tokio::test]
async fn nul_bytes_anywhere_are_invalid() {
    let err = run_err(request(&["/bin/echo", "a\0b"])).await;
    assert!(matches!(err, ExecError::Invalid(_)), "{err:?}");

    let err = run_err(request(&["/bin/ec\0ho"])).await;
    assert!(matches!(err, ExecError::Invalid(_)), "{err:?}");

    let mut req = request(&["/bin/true"]);
    req.env = vec![("A".into(), "x\0y".into())];
    assert!(matches!(run_err(req).await, ExecError::Invalid(_)));

    let mut req = request(&["/bin/true"]);
    req.env = vec![("A=B".into(), "x".into())];
    assert!(matches!(run_err(req).await, ExecError::Invalid(_)));
}

#[tokio::test]
async fn the_attestation_says_process_unisolated_and_lists_what_was_applied() {
    let mut req = request(&["/bin/true"]);
    req.limits.cpu_seconds = Some(10);
    req.limits.memory = Some(1 << 30);
    req.limits.processes = Some(1000);
    req.limits.file_size = Some(1 << 20);
    req.limits.open_files = Some(64);
    let out = run(req).await;
    let a = &out.attestation;
    assert_eq!(a.backend, "process");
    assert!(!a.isolated);
    assert!(!a.destroyed);
    for p in [
        "env:clear",
        "pgroup",
        "pdeathsig",
        "rlimit:cpu",
        "rlimit:as",
        "rlimit:nproc",
        "rlimit:fsize",
        "rlimit:nofile",
    ] {
        assert!(
            a.primitives.iter().any(|q| q == p),
            "{p} missing from {:?}",
            a.primitives
        );
    }
}

#[tokio::test]
async fn limits_that_were_not_asked_for_are_not_attested() {
    let out = run(request(&["/bin/true"])).await;
    assert!(
        !out.attestation
            .primitives
            .iter()
            .any(|p| p.starts_with("rlimit:")),
        "{:?}",
        out.attestation.primitives
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_in_parallel_do_not_mix_their_output() {
    let backend: Arc<dyn Backend> = Arc::new(ProcessBackend::new());
    let runs = (0..8).map(|i| {
        let backend = Arc::clone(&backend);
        tokio::spawn(async move {
            let out = backend
                .run(request(&["/bin/echo", &format!("run {i}")]))
                .await
                .unwrap();
            (i, out)
        })
    });
    for handle in runs.collect::<Vec<_>>() {
        let (i, out) = handle.await.unwrap();
        assert_eq!(stdout(&out), format!("run {i}\n"));
    }
}

/// `run_attached`: the caller talks to the process over its pipes; dropping the run's future
/// (a supervisor giving up on an upstream) kills its whole group, grandchildren included.
#[tokio::test]
async fn an_attached_run_talks_over_its_pipes_and_dropping_it_kills_the_group() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let backend = Arc::new(ProcessBackend::new());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let b = Arc::clone(&backend);
    // Echoes one line back, after naming a background grandchild.
    let req = shell("sleep 300 & echo \"grandchild $!\"; read line; echo \"got $line\"; wait");
    let run = tokio::spawn(async move { b.run_attached(req, tx).await });
    let attached = rx.await.expect("the pipes are handed over");
    assert!(!attached.attestation.isolated);
    let mut out = BufReader::new(attached.stdout).lines();
    let first = out.next_line().await.unwrap().unwrap_or_default();
    let pid: i32 = first
        .strip_prefix("grandchild ")
        .and_then(|p| p.parse().ok())
        .expect("the grandchild's pid");
    let mut stdin = attached.stdin;
    stdin.write_all(b"hello\n").await.unwrap();
    assert_eq!(out.next_line().await.unwrap().as_deref(), Some("got hello"));
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    run.abort();
    let _ = run.await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z'))
        })
    };
    while !gone(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone(pid), "the grandchild {pid} outlived the dropped run");
}

#[tokio::test]
async fn an_exec_allow_list_is_refused_never_ignored() {
    let mut req = request(&["/bin/true"]);
    req.exec_only = Some(vec![std::path::PathBuf::from("/bin/true")]);
    let e = run_err(req).await;
    assert!(
        matches!(&e, ExecError::Unavailable { missing, .. } if missing.contains("landlock")),
        "{e:?}"
    );
}
