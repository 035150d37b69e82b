//! `isolation.host_uids` (issue 12 item 2): as host root, the sandboxed program runs as an
//! unprivileged host uid, and the run's paths are idmapped so their files keep their owner. As a
//! normal user the mode does not apply: these tests say so and check that nothing changed.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

use corral_exec::linux::{DEFAULT_HOST_RANGE, HostRange, LinuxBackend};
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
    let first: Vec<&str> = stdout
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        first,
        ["0", &DEFAULT_HOST_RANGE.uid.to_string(), "65536"],
        "{stdout}"
    );
    assert!(stdout.ends_with("0\n"), "inside root: {stdout}");
}
