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

// issue 12 item 5 (issue 11 item 2 follow-up): `corral run` writes through the copy-on-write
// layer. Before it, its writes were live, so a program could make a new `.git` anywhere in the
// current directory (the class "protected metadata inside a writable root").
#[test]
fn a_new_git_directory_at_any_depth_never_reaches_the_host_and_corral_says_so() {
    let dir = tempdir();
    let script = "mkdir -p sub/.git/hooks && echo '[core] fsmonitor = evil' > sub/.git/config && echo kept > ok.txt";
    let (code, _, err) = corral_run(dir.path(), &["--", "sh", "-c", script], b"", &[]);
    assert_eq!(code, 125, "a refused change is exit 125: {err}");
    assert!(!dir.path().join("sub/.git").exists(), "no .git on the host");
    let refused: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("error[policy.path_denied]"))
        .collect();
    assert_eq!(refused.len(), 1, "one line for the refused `.git`: {err}");
    assert!(
        refused
            .iter()
            .any(|l| l.contains("sub/.git`") && l.contains("protected")),
        "{err}"
    );
    assert!(err.contains("the program exited with 0"), "{err}");
    let ok = std::fs::read_to_string(dir.path().join("ok.txt")).unwrap_or_default();
    assert_eq!(ok, "kept\n", "the ordinary write still lands: {err}");
    assert!(dir.path().join("sub").is_dir(), "{err}");
}

#[test]
fn an_embedded_git_repository_without_a_git_directory_never_reaches_the_host() {
    // A valid `HEAD` beside `objects/` and `refs/` is a bare repository whose `config` git on
    // the host trusts: the apply refuses the `HEAD`.
    let dir = tempdir();
    let script = "mkdir -p src/objects src/refs && echo 'ref: refs/heads/main' > src/HEAD && echo '[core] fsmonitor = evil' > src/config";
    let (code, _, err) = corral_run(dir.path(), &["--", "sh", "-c", script], b"", &[]);
    assert_eq!(code, 125, "{err}");
    assert!(!dir.path().join("src/HEAD").exists(), "{err}");
    assert!(
        err.contains("error[policy.path_denied]") && err.contains("src/HEAD`"),
        "{err}"
    );
}

#[test]
fn a_bare_repository_already_in_the_workspace_keeps_its_config_and_hooks() {
    // Attack class: protected metadata inside a writable root (session-3 attack on the layer).
    // A bare repository (a test fixture, a mirror) has no `.git` in its path; its `config` and
    // hooks run commands in the host's git. Before the fix the program's changes to them landed.
    let dir = tempdir();
    let bare = dir.path().join("fixture.git");
    for d in ["objects", "refs/heads", "hooks"] {
        let _ = std::fs::create_dir_all(bare.join(d));
    }
    let _ = std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n");
    let _ = std::fs::write(bare.join("config"), "[core]\n\tbare = true\n");
    let script = "printf '[core]\\n\\tpager = touch /tmp/pwned\\n' >> fixture.git/config; \
        printf '#!/bin/sh\\n' > fixture.git/hooks/post-update; echo kept > ok.txt";
    let (code, _, err) = corral_run(dir.path(), &["--", "sh", "-c", script], b"", &[]);
    assert_eq!(code, 125, "{err}");
    assert_eq!(
        std::fs::read_to_string(bare.join("config")).unwrap_or_default(),
        "[core]\n\tbare = true\n",
        "{err}"
    );
    assert!(!bare.join("hooks/post-update").exists(), "{err}");
    assert!(
        err.contains("error[policy.path_denied]")
            && err.contains("fixture.git/config`")
            && err.contains("git repository on the host"),
        "{err}"
    );
    let ok = std::fs::read_to_string(dir.path().join("ok.txt")).unwrap_or_default();
    assert_eq!(ok, "kept\n", "ordinary writes still land: {err}");
}

#[test]
fn a_refused_path_with_terminal_escape_sequences_is_printed_escaped() {
    // Attack class: hostile bytes reaching the user's terminal (holds). The refused path is a
    // name the program chose: an OSC title change and a screen clear in it must reach stderr as
    // text, never as the control characters themselves.
    let dir = tempdir();
    let script = "d=$(printf 'x\\033]0;pwned\\007\\033[2Jy'); mkdir -p \"$d/.git\" && echo made";
    let (code, out, err) = corral_run(dir.path(), &["--", "sh", "-c", script], b"", &[]);
    assert_eq!(code, 125, "{err}");
    assert_eq!(out, "made\n", "{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    assert!(err.contains("\\u{1b}]0;pwned\\u{7}"), "{err}");
}

#[test]
fn a_config_in_the_current_directory_or_in_corral_config_is_never_read_without_the_flag() {
    // Attack class: a hostile `run:` section in a cloned repository (holds). Only `--config`
    // reads a config: neither `./corral.yaml` nor `$CORRAL_CONFIG` widens the sandbox.
    let dir = tempdir();
    let cfg = config(
        dir.path(),
        "version: 1\nrun:\n  profile: none\n  network: loopback\n  env: [LEAK=1]\n  write: [/etc]\nisolation:\n  host_uids: root\n",
    );
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--attest",
            "--",
            "sh",
            "-c",
            "echo \"leak=$LEAK\"; pwd; touch here && echo wrote",
        ],
        b"",
        &[("CORRAL_CONFIG", &cfg)],
    );
    assert_eq!(code, 0, "{err}");
    let here = std::fs::canonicalize(dir.path()).unwrap_or_default();
    assert_eq!(out, format!("leak=\n{}\nwrote\n", here.display()), "{err}");
    assert!(
        err.contains("netns:none") && !err.contains("netns:loopback"),
        "{err}"
    );
    if std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0) {
        assert!(err.contains("uid:host-unprivileged"), "{err}");
    }
}

#[test]
fn a_setuid_or_setgid_bit_never_reaches_the_host() {
    let dir = tempdir();
    let script = "cp /bin/sh ./tool; chmod 6755 ./tool; chmod u+s ./tool; exit 0";
    let (_, _, err) = corral_run(dir.path(), &["--", "sh", "-c", script], b"", &[]);
    let mode = std::fs::metadata(dir.path().join("tool"))
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()))
        .unwrap_or(0);
    assert_ne!(mode, 0, "the copy landed: {err}");
    assert_eq!(mode & 0o7000, 0, "mode {mode:o} on the host: {err}");
}

#[test]
fn ordinary_writes_renames_and_deletions_land_after_the_run_with_a_write_path_too() {
    let dir = tempdir();
    let extra = tempdir();
    let _ = std::fs::write(dir.path().join("old.txt"), "old\n");
    let _ = std::fs::write(dir.path().join("gone.txt"), "gone\n");
    let _ = std::fs::create_dir(dir.path().join(".git"));
    let script = format!(
        "mkdir -p a/b && echo new > a/b/new.txt && mv old.txt renamed.txt && rm gone.txt && echo out > {}/out.txt && ls -A",
        extra.path().display()
    );
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--write",
            &extra.path().display().to_string(),
            "--",
            "sh",
            "-c",
            &script,
        ],
        b"",
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(err, "", "nothing refused, nothing printed");
    assert!(
        out.contains("renamed.txt"),
        "the program sees its own writes: {out}"
    );
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    assert_eq!(read(&dir.path().join("a/b/new.txt")), "new\n");
    assert_eq!(read(&dir.path().join("renamed.txt")), "old\n");
    assert!(!dir.path().join("old.txt").exists());
    assert!(!dir.path().join("gone.txt").exists());
    assert!(dir.path().join(".git").is_dir(), "the existing .git stays");
    assert_eq!(read(&extra.path().join("out.txt")), "out\n");
}

#[test]
fn writes_over_the_write_quota_fail_in_the_sandbox_and_a_sparse_file_over_it_is_refused() {
    let dir = tempdir();
    // Blocks: the layer's tmpfs is the quota, so the program's own write fails.
    let (code, _, err) = corral_run(
        dir.path(),
        &[
            "--write-quota",
            "1MiB",
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero of=big bs=64k count=64",
        ],
        b"",
        &[],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let big = std::fs::metadata(dir.path().join("big")).map_or(0, |m| m.len());
    assert!(big <= 1 << 20, "{big} bytes reached the host");
    // A sparse file takes no block in the layer but counts at its full size at the apply.
    let (code, _, err) = corral_run(
        dir.path(),
        &[
            "--write-quota",
            "1MiB",
            "--",
            "sh",
            "-c",
            "truncate -s 64M sparse",
        ],
        b"",
        &[],
    );
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("error[exec.write_quota]") && err.contains("sparse`"),
        "{err}"
    );
    assert!(!dir.path().join("sparse").exists());
}

#[test]
fn stdio_stays_streamed_and_the_exit_code_passes_through_with_the_layer() {
    let dir = tempdir();
    let (code, out, err) = corral_run(
        dir.path(),
        &["--", "sh", "-c", "cat; echo written > f.txt; exit 9"],
        b"from stdin\n",
        &[],
    );
    assert_eq!((code, out.as_str()), (9, "from stdin\n"), "{err}");
    assert_eq!(err, "");
    assert!(dir.path().join("f.txt").exists());
}

/// Writes `text` as `corral.yaml` in `dir` and returns its path as a string.
fn config(dir: &Path, text: &str) -> String {
    let path = dir.join("corral.yaml");
    let _ = std::fs::write(&path, text);
    path.display().to_string()
}

#[test]
fn config_gives_the_profile_env_limits_and_network_of_its_run_section() {
    let dir = tempdir();
    let cfg = config(
        dir.path(),
        "version: 1\nrun:\n  profile: readonly\n  env: [GREETING=hi, CORRAL_IT_PASSED]\n  network: loopback\n  limits: {timeout: 2s, processes: 64}\n",
    );
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--attest",
            "--config",
            &cfg,
            "--",
            "sh",
            "-c",
            "echo $GREETING $CORRAL_IT_PASSED; touch x 2>/dev/null || echo read-only",
        ],
        b"",
        &[("CORRAL_IT_PASSED", "passed")],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hi passed\nread-only\n", "{err}");
    assert!(err.contains("netns:loopback"), "{err}");
    let (code, _, err) = corral_run(
        dir.path(),
        &["--config", &cfg, "--", "sleep", "60"],
        b"",
        &[],
    );
    assert_eq!(code, 124, "the file's timeout: {err}");
    assert!(err.contains("timed out after 2s"), "{err}");
}

#[test]
fn flags_win_over_the_config_and_add_to_its_lists() {
    let dir = tempdir();
    let cfg = config(
        dir.path(),
        "version: 1\nrun:\n  profile: readonly\n  env: [GREETING=file, OTHER=file]\n",
    );
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--config",
            &cfg,
            "--profile",
            "workspace",
            "--env",
            "GREETING=flag",
            "--",
            "sh",
            "-c",
            "echo $GREETING $OTHER; echo w > made.txt",
        ],
        b"",
        &[],
    );
    assert_eq!((code, out.as_str()), (0, "flag file\n"), "{err}");
    assert!(dir.path().join("made.txt").exists(), "{err}");
}

#[test]
fn the_configs_protected_globs_and_the_config_file_itself_are_refused_at_the_apply() {
    let dir = tempdir();
    let cfg = config(
        dir.path(),
        "version: 1\nprotected: [\"*.lock\"]\nrun: {profile: workspace}\n",
    );
    let (code, _, err) = corral_run(
        dir.path(),
        &[
            "--config",
            &cfg,
            "--",
            "sh",
            "-c",
            "echo pinned > deps.lock; echo 'run: {write: [/]}' >> corral.yaml; echo fine > ok.txt",
        ],
        b"",
        &[],
    );
    assert_eq!(code, 125, "{err}");
    assert!(!dir.path().join("deps.lock").exists(), "{err}");
    let text = std::fs::read_to_string(dir.path().join("corral.yaml")).unwrap_or_default();
    assert!(
        !text.contains("write: [/]"),
        "the config is unchanged: {text}"
    );
    // The glob's file is refused at the apply; the config file, one of corral's own files, is
    // not even visible to the program (an empty read-only mount hides it), so its write fails
    // in the sandbox.
    let denied: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("error[policy.path_denied]"))
        .collect();
    assert_eq!(denied.len(), 1, "{err}");
    assert!(denied[0].contains("deps.lock"), "{err}");
    assert!(err.contains("cannot create corral.yaml"), "{err}");
    assert!(dir.path().join("ok.txt").exists(), "{err}");
}

#[test]
fn a_config_that_does_not_load_is_125_with_the_diagnostic_and_runs_nothing() {
    let dir = tempdir();
    let cfg = config(
        dir.path(),
        "version: 1\nrun:\n  profil: readonly\n  network: {allow: [\"no-port\"]}\n",
    );
    let (code, out, err) = corral_run(
        dir.path(),
        &["--config", &cfg, "--", "echo", "ran"],
        b"",
        &[],
    );
    assert_eq!(code, 125, "{out}{err}");
    assert_eq!(out, "", "nothing ran");
    assert!(err.contains("error[config.unknown_key]"), "{err}");
    assert!(err.contains("did you mean `profile`?"), "{err}");
    assert!(err.contains("run.profil"), "{err}");
    assert!(err.contains("config.invalid_egress"), "{err}");
    let (code, _, err) = corral_run(
        dir.path(),
        &["--config", "/nonexistent/corral.yaml", "--", "true"],
        b"",
        &[],
    );
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("error[config.io]"), "{err}");
}

#[test]
fn a_config_with_tokens_whose_variables_are_unset_still_serves_corral_run() {
    let dir = tempdir();
    let cfg = config(
        dir.path(),
        "version: 1\nauth:\n  tokens:\n    - {id: agent, token_env: CORRAL_IT_UNSET_TOKEN}\nrun: {profile: none}\n",
    );
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--config",
            &cfg,
            "--",
            "sh",
            "-c",
            "pwd; echo ${CORRAL_IT_UNSET_TOKEN:-no-secret}",
        ],
        b"",
        &[],
    );
    assert_eq!((code, out.as_str()), (0, "/tmp\nno-secret\n"), "{err}");
}

#[test]
fn a_config_with_the_process_backend_is_refused_never_run_unsandboxed() {
    let dir = tempdir();
    let cfg = config(dir.path(), "version: 1\nisolation: {backend: process}\n");
    let (code, out, err) = corral_run(
        dir.path(),
        &["--config", &cfg, "--", "echo", "ran"],
        b"",
        &[],
    );
    assert_eq!((code, out.as_str()), (125, ""), "{err}");
    assert!(err.contains("isolation.backend: process"), "{err}");
}

#[test]
fn the_readme_run_section_example_runs_as_written() {
    // README's `run:` example, as `corral run --config` reads it: its network allow-list is
    // attested, its env sets `LANG`, and its `protected:` glob is refused at the apply.
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(readme).unwrap_or_default();
    let example = text
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("\nrun:\n"))
        .unwrap_or_default();
    assert!(example.contains("limits:"), "README has a `run:` example");
    let dir = tempdir();
    let cfg = config(dir.path(), &format!("version: 1\n{example}"));
    let (code, out, err) = corral_run(
        dir.path(),
        &[
            "--attest",
            "--config",
            &cfg,
            "--",
            "sh",
            "-c",
            "echo $LANG; echo built > out.txt; echo pinned > deps.lock",
        ],
        b"",
        &[],
    );
    assert_eq!((code, out.as_str()), (125, "C.UTF-8\n"), "{err}");
    assert!(err.contains("netns:egress-proxy"), "{err}");
    assert!(
        err.contains("error[policy.path_denied]") && err.contains("deps.lock`"),
        "{err}"
    );
    assert!(dir.path().join("out.txt").exists(), "{err}");
    assert!(!dir.path().join("deps.lock").exists(), "{err}");
}

// Found by the attack on issue 12: started inside a bare repository (`x.git/hooks`), a run's
// write path had the repository above it, which the apply does not look at, so a hook could be
// planted. Such a run never starts.
#[test]
fn a_run_whose_directory_lies_inside_a_bare_repository_never_starts() {
    let dir = tempdir();
    let repo = dir.path().join("x.git");
    for sub in ["hooks", "objects", "refs"] {
        let _ = std::fs::create_dir_all(repo.join(sub));
    }
    let _ = std::fs::write(repo.join("HEAD"), "ref: refs/heads/main\n");
    let hooks = repo.join("hooks");
    let (code, out, err) = corral_run(
        &hooks,
        &[
            "--",
            "sh",
            "-c",
            "echo 'touch /tmp/pwned' > post-checkout; echo ran",
        ],
        b"",
        &[],
    );
    assert_eq!(code, 125, "{out}{err}");
    assert!(!out.contains("ran"), "{out}");
    assert!(err.contains("inside a git repository"), "{err}");
    assert!(!hooks.join("post-checkout").exists(), "{err}");
    // Beside it, a run goes on as before.
    let (code, out, err) = corral_run(dir.path(), &["--", "echo", "ran"], b"", &[]);
    assert_eq!((code, out.as_str()), (0, "ran\n"), "{err}");
}
