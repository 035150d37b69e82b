//! Integration tests for corral-exec's backends, against real processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod corral_link;
mod egress;
mod escapes;
mod host_uids;
mod linux;
mod mock;
mod process;

use std::path::PathBuf;
use std::time::Duration;

use corral_exec::linux::LinuxBackend;
use corral_exec::{ExecRequest, ResourceLimits};

/// `CORRAL_TEST_WARM_POOL=n` runs the linux backend's tests with `n` warm sandboxes (`0`: every
/// run starts its own sandbox); unset, the backend's default.
///
/// `CORRAL_TEST_HOST_UIDS=auto|root|START:COUNT` runs them with that `isolation.host_uids` (as
/// host root, the program is then an unprivileged host uid); unset, `root` (the caller's id).
pub fn with_test_pool(backend: LinuxBackend) -> LinuxBackend {
    let backend = match std::env::var("CORRAL_TEST_WARM_POOL") {
        Ok(n) => backend.with_warm_pool(n.parse().expect("CORRAL_TEST_WARM_POOL is a number")),
        Err(_) => backend,
    };
    match std::env::var("CORRAL_TEST_HOST_UIDS") {
        Ok(mode) => {
            let ids = corral_exec::linux::HostUids::parse(&mode)
                .and_then(|m| m.resolve())
                .expect("CORRAL_TEST_HOST_UIDS is a host id mode");
            backend.with_host_ids(ids)
        }
        Err(_) => backend,
    }
}

/// Whether `CORRAL_TEST_HOST_UIDS` makes the tests' programs an unprivileged host uid (it does
/// for host root, unless it says `root`).
pub fn host_uids_apply() -> bool {
    rustix::process::getuid().is_root()
        && std::env::var("CORRAL_TEST_HOST_UIDS").is_ok_and(|m| m != "root")
}

/// A request for `argv` in `/`, with an empty environment, a 10 s timeout and a 1 MiB cap.
pub fn request(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        cwd: PathBuf::from("/"),
        env: Vec::new(),
        stdin: None,
        timeout: Duration::from_secs(10),
        max_output_bytes: 1024 * 1024,
        limits: ResourceLimits::default(),
        read_paths: Vec::new(),
        write_paths: Vec::new(),
        protected: Default::default(),
        network: None,
        exec_only: None,
        hold: None,
        apply_only_if_ok: false,
        host_writes: None,
    }
}

/// A request for `sh -c script`.
pub fn shell(script: &str) -> ExecRequest {
    request(&["/bin/sh", "-c", script])
}
