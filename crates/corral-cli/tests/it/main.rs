//! End-to-end tests of the `corral` binary: real processes, real files.

mod agents;
mod api_contract;
mod call;
mod cookbook;
mod crash;
mod custom_ops;
mod deploy;
mod docs;
mod doctor;
#[path = "sandbox_lab.rs"]
mod lab;
mod lab_program;
mod learning;
mod mcp;
mod offline;
mod packaging;
mod reliability;
mod reload;
mod replicas;
mod run;
mod sandbox;
mod shadow_lab;
mod telemetry;
mod upstream;

use std::path::Path;
use std::process::Command;

/// Runs `corral` in `dir` with `args`; returns (exit code, stdout, stderr).
pub fn corral(dir: &Path, args: &[&str]) -> (i32, String, String) {
    corral_with_env(dir, args, &[])
}

/// Runs `corral` in `dir` with `args` and `env` added; returns (exit code, stdout, stderr).
pub fn corral_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(args)
        .current_dir(dir)
        .env_remove("CORRAL_CONFIG")
        .envs(env.iter().copied())
        .output();
    let Ok(out) = out else {
        unreachable!("the corral binary runs")
    };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The Python that `.ci/run` makes (`CORRAL_TEST_PYTHON`, with the SDKs of
/// `.ci/requirements.txt`), or `None` after saying why outside CI; unset under `CI=true` is a
/// failure.
#[expect(
    clippy::panic,
    reason = "a missing prerequisite under CI fails the test that needs it"
)]
pub fn python(what: &str) -> Option<std::path::PathBuf> {
    match std::env::var_os("CORRAL_TEST_PYTHON") {
        Some(p) if !p.is_empty() => Some(std::path::PathBuf::from(p)),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "CORRAL_TEST_PYTHON is not set under CI=true: .ci/run makes the venv and sets it"
            )
        }
        _ => {
            eprintln!("skipped: CORRAL_TEST_PYTHON is not set (a Python with {what})");
            None
        }
    }
}

/// A temporary directory holding `ws/` and, when given, a `corral.yaml`.
pub fn workspace(config: Option<&str>) -> tempfile::TempDir {
    let Ok(dir) = tempfile::tempdir() else {
        unreachable!("a temp dir can be made")
    };
    let _ = std::fs::create_dir(dir.path().join("ws"));
    if let Some(c) = config {
        let text = c.replace("$WS", &dir.path().join("ws").to_string_lossy());
        let _ = std::fs::write(dir.path().join("corral.yaml"), text);
    }
    dir
}
