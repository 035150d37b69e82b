//! `corral run -- CMD ARGS...` (issue 12 item 5): one command in the linux sandbox, with the
//! program's own stdio and exit code, the current directory writable or read-only by profile,
//! everything else of the host hidden, and a refusal (never an unsandboxed run) where the host
//! cannot isolate. These need a host where `corral doctor` says the linux backend can run (root
//! here; a normal user once per-run cgroups or `rlimit:nproc-userns` are available to it).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `corral run ARGS` in `dir` with `stdin` as its input; returns (exit code, stdout,
/// stderr).
fn corral_run(
    dir: &Path,
    args: &[&str],
    stdin: &[u8],
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("run")
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        unreachable!("the corral binary runs")
    };
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin);
    }
    let Ok(out) = child.wait_with_output() else {
        unreachable!("corral ends")
    };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tempdir() -> tempfile::TempDir {
    let Ok(dir) = tempfile::tempdir() else {
        unreachable!("a temp dir can be made")
    };
    dir
}

#[test]
fn the_programs_exit_code_is_corrals_and_a_signal_is_128_plus_its_number() {
    let dir = tempdir();
    let (code, _, err) = corral_run(dir.path(), &["--", "sh", "-c", "exit 7"], b"", &[]);
    assert_eq!(code, 7, "{err}");
    let (code, _, err) = corral_run(dir.path(), &["--", "sh", "-c", "kill -TERM $$"], b"", &[]);
    assert_eq!(code, 128 + 15, "{err}");
    let (code, out, err) = corral_run(dir.path(), &["--", "echo", "hello"], b"", &[]);
    assert_eq!((code, out.as_str()), (0, "hello\n"), "{err}");
    assert_eq!(err, "", "nothing of corral's on stderr after a good run");
}

#[test]
fn stdin_reaches_the_program_and_its_stdout_comes_back() {
    let dir = tempdir();
    let (code, out, err) = corral_run(
        dir.path(),
        &["--", "tr", "a-z", "A-Z"],
        b"piped through the sandbox\n",
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "PIPED THROUGH THE SANDBOX\n");
}

#[test]
fn stdout_is_streamed_while_the_program_runs_not_replayed_after_it() {
    // The program prints, then waits for a line that this test sends only after it read the
    // print: captured-and-replayed output would never arrive, and `--timeout` would end it.
    let dir = tempdir();
    let child = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["run", "--timeout", "60s", "--", "sh", "-c"])
        .arg("echo ready; read answer; echo got:$answer")
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        unreachable!("the corral binary runs")
    };
    let (Some(mut input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
        unreachable!("piped")
    };
    let mut lines = BufReader::new(output).lines();
    let first = lines.next().and_then(Result::ok);
    assert_eq!(first.as_deref(), Some("ready"));
    let _ = writeln!(input, "go");
    drop(input);
    let second = lines.next().and_then(Result::ok);
    assert_eq!(second.as_deref(), Some("got:go"));
    let status = child.wait().ok().and_then(|s| s.code());
    assert_eq!(status, Some(0));
}

#[test]
fn the_workspace_profile_writes_the_current_directory_on_the_host() {
    let dir = tempdir();
    let (code, _, err) = corral_run(
        dir.path(),
        &["--", "sh", "-c", "echo from-the-sandbox > made.txt"],
        b"",
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let made = std::fs::read_to_string(dir.path().join("made.txt")).unwrap_or_default();
    assert_eq!(made, "from-the-sandbox\n");
}

#[test]
fn the_readonly_profile_reads_the_current_directory_and_cannot_write_it() {
    let dir = tempdir();
    let _ = std::fs::write(dir.path().join("notes.txt"), "readable\n");
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--profile",
            "readonly",
            "--",
            "sh",
            "-c",
            "cat notes.txt; touch made.txt",
        ],
        b"",
        &[],
    );
    assert_eq!(out, "readable\n", "{err}");
    assert_ne!(code, 0, "touch fails: {err}");
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!dir.path().join("made.txt").exists());
}

#[test]
fn the_none_profile_shows_no_host_directory_and_runs_in_an_empty_tmp() {
    let dir = tempdir();
    let _ = std::fs::write(dir.path().join("notes.txt"), "secret\n");
    let notes = dir.path().join("notes.txt");
    let script = format!("pwd; ls -A; cat {} || echo hidden", notes.display());
    let (code, out, err) = corral_run(
        dir.path(),
        &["--profile", "none", "--", "sh", "-c", &script],
        b"",
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "/tmp\nhidden\n", "{err}");
}

#[test]
fn home_other_directories_and_tokens_in_the_environment_stay_hidden() {
    let work = tempdir();
    let other = tempdir();
    let secret = other.path().join("secret.txt");
    let _ = std::fs::write(&secret, "do not read\n");
    let Some(home) = std::env::var_os("HOME") else {
        unreachable!("the tests run with a HOME")
    };
    let home = Path::new(&home);
    assert!(
        home.is_dir() && home != Path::new("/"),
        "HOME is a directory: {}",
        home.display()
    );
    let script = format!(
        "cat {} 2>/dev/null || echo no-secret; test -e {} && echo home-visible || echo no-home; echo token=${{CORRAL_TOKEN:-unset}}; echo home=$HOME",
        secret.display(),
        home.display()
    );
    let (code, out, err) = corral_run(
        work.path(),
        &["--", "sh", "-c", &script],
        b"",
        &[("CORRAL_TOKEN", "agent-token-0123456789")],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "no-secret\nno-home\ntoken=unset\nhome=/tmp\n", "{err}");
}

#[test]
fn env_passes_a_named_variable_and_a_set_one() {
    let dir = tempdir();
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--env",
            "CORRAL_IT_PASSED",
            "--env",
            "GREETING=hi",
            "--",
            "sh",
            "-c",
            "echo $CORRAL_IT_PASSED $GREETING",
        ],
        b"",
        &[("CORRAL_IT_PASSED", "passed")],
    );
    assert_eq!((code, out.as_str()), (0, "passed hi\n"), "{err}");
}

#[test]
fn attest_prints_what_the_sandbox_applied_as_one_json_line_on_stderr() {
    let dir = tempdir();
    let (code, out, err) = corral_run(dir.path(), &["--attest", "--", "echo", "ok"], b"", &[]);
    assert_eq!((code, out.as_str()), (0, "ok\n"), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    let v: serde_json::Value =
        serde_json::from_str(lines.first().copied().unwrap_or("")).unwrap_or_default();
    assert_eq!(v["backend"], "linux", "{err}");
    assert_eq!(v["isolated"], true, "{err}");
    assert_eq!(v["destroyed"], true, "{err}");
    assert_eq!(v["exit_code"], 0, "{err}");
    let primitives: Vec<&str> = v["primitives"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p.as_str()).collect())
        .unwrap_or_default();
    for p in [
        "userns",
        "mountns",
        "pidns",
        "netns:none",
        "seccomp",
        "no_new_privs",
        "caps:none",
    ] {
        assert!(primitives.contains(&p), "{p} in {primitives:?}");
    }
    assert!(
        primitives.iter().any(|p| p.starts_with("landlock")),
        "{primitives:?}"
    );
}

#[test]
fn a_host_that_cannot_isolate_refuses_with_the_fix_and_runs_nothing() {
    // corral inside corral's own sandbox: its seccomp filter refuses new namespaces, so the
    // inner corral finds no user namespace and must refuse, never run the command unsandboxed.
    let dir = tempdir();
    let exe = env!("CARGO_BIN_EXE_corral");
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--read",
            exe,
            "--",
            exe,
            "run",
            "--",
            "sh",
            "-c",
            "echo ran-unsandboxed",
        ],
        b"",
        &[],
    );
    assert_eq!(code, 125, "{out}{err}");
    assert!(!out.contains("ran-unsandboxed"), "{out}");
    assert!(err.contains("error[isolation.unavailable]"), "{err}");
    assert!(err.contains("fix:"), "{err}");
    assert!(err.contains("corral doctor"), "{err}");
}

#[test]
fn a_run_on_a_host_without_user_namespaces_is_refused_by_the_sandbox_and_names_the_fix() {
    // `corral run` skips the preflight probe: here the sandbox itself meets the missing
    // primitive (a user namespace whose `user.max_user_namespaces` is 0, so no namespace can be
    // made inside it), refuses the run, and only then the probe names what is missing and how
    // to get it. The command never runs, sandboxed or not.
    let dir = tempdir();
    let exe = env!("CARGO_BIN_EXE_corral");
    let marker = dir.path().join("ran");
    let script = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces || exit 99; exec {exe} run -- sh -c 'echo ran; touch {}'",
        marker.display()
    );
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "sh", "-c", &script])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output();
    let Ok(out) = out else {
        unreachable!("unshare (util-linux) runs")
    };
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(125), "{stdout}{stderr}");
    assert!(!stdout.contains("ran"), "{stdout}");
    assert!(!marker.exists(), "the command ran");
    assert!(stderr.contains("error[isolation.unavailable]"), "{stderr}");
    assert!(stderr.contains("userns is missing"), "{stderr}");
    assert!(stderr.contains("user.max_user_namespaces=0"), "{stderr}");
    assert!(
        stderr.contains("fix: allow unprivileged user namespaces"),
        "{stderr}"
    );
}

#[test]
fn corrals_own_failures_are_125_126_127_and_124_and_name_the_problem() {
    let dir = tempdir();
    let (code, _, err) = corral_run(dir.path(), &["--", "no-such-program-here"], b"", &[]);
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("error[exec.spawn_failed]"), "{err}");
    let _ = std::fs::write(dir.path().join("script"), "#!/bin/sh\necho no\n");
    let (code, _, err) = corral_run(dir.path(), &["--", "./script"], b"", &[]);
    assert_eq!(code, 126, "not executable: {err}");
    assert!(err.contains("permission denied"), "{err}");
    let (code, _, err) = corral_run(dir.path(), &["--net", "everywhere", "--", "true"], b"", &[]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("`none`"), "{err}");
    let (code, _, err) = corral_run(
        dir.path(),
        &["--timeout", "1s", "--", "sleep", "60"],
        b"",
        &[],
    );
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("timed out after 1s"), "{err}");
}

#[test]
fn git_metadata_in_the_workspace_stays_read_only() {
    let dir = tempdir();
    let _ = std::fs::create_dir(dir.path().join(".git"));
    let (code, _, err) = corral_run(
        dir.path(),
        &[
            "--",
            "sh",
            "-c",
            "echo '[core] fsmonitor = evil' > .git/config",
        ],
        b"",
        &[],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!dir.path().join(".git").join("config").exists());
}

// issue 12 items 4 and 5: `corral run --net allow:HOST:PORT` reaches what it names, through
// corral's proxy, and nothing else; the refusal's code is in the program's stderr.
#[test]
fn net_allow_reaches_only_the_named_address() {
    let allowed = crate::sandbox::http_server("allowed body");
    let other = crate::sandbox::http_server("other body");
    let dir = tempdir();
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--attest",
            "--net",
            &format!("allow:127.0.0.1:{allowed}"),
            "--",
            "curl",
            "-sS",
            &format!("http://127.0.0.1:{allowed}/"),
            &format!("http://127.0.0.1:{other}/"),
        ],
        b"",
        &[],
    );
    assert!(out.contains("allowed body"), "{code} {out}{err}");
    assert!(!out.contains("other body"), "{out}{err}");
    assert!(out.contains("egress.denied"), "{out}{err}");
    assert!(err.contains("netns:egress-proxy"), "{err}");
    let (code, _, err) = corral_run(dir.path(), &["--net", "allow:", "--", "true"], b"", &[]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("names no host"), "{err}");
}
