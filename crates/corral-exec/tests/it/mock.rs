//! The `inproc-mock` backend answers only from its table; a miss is a deterministic marker.

use std::path::PathBuf;
use std::time::Duration;

use corral_exec::mock::{MockBackend, MockResponse, miss_marker};
use corral_exec::{Backend, ExecRequest, ResourceLimits};

fn req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        cwd: PathBuf::from("/"),
        env: Vec::new(),
        stdin: None,
        timeout: Duration::from_secs(1),
        max_output_bytes: 1024,
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

fn backend() -> MockBackend {
    MockBackend::new([(
        "agent user1@example.test".to_owned(),
        MockResponse::ok("first synthetic account"),
    )])
}

#[tokio::test]
async fn a_mocked_resource_returns_its_response_and_attests_isolation() {
    let out = backend()
        .run(req(&["agent", "user1@example.test"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"first synthetic account");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.attestation.backend, "inproc-mock");
    assert!(out.attestation.isolated && out.attestation.destroyed);
}

#[tokio::test]
async fn a_miss_never_runs_anything_and_prints_the_marker() {
    // `/bin/touch` would create the file if anything real ran.
    let dir = tempfile::tempdir().unwrap();
    let canary = dir.path().join("canary");
    let path = canary.to_string_lossy().into_owned();
    let out = backend().run(req(&["/bin/touch", &path])).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        miss_marker(&format!("/bin/touch {path}"))
    );
    assert_eq!(out.exit_code, Some(127));
    assert!(!canary.exists());
}

#[tokio::test]
async fn matching_is_exact_and_output_is_capped() {
    let b = MockBackend::new([("x".to_owned(), MockResponse::ok(&"y".repeat(4096)))]);
    let out = b.run(req(&["x"])).await.unwrap();
    assert_eq!(out.stdout.len(), 1024);
    assert!(out.stdout_truncated);
    let out = b.run(req(&["x", ""])).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), miss_marker("x "));
    assert!(b.run(req(&[])).await.is_err());
}
