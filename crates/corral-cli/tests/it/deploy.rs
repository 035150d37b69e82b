//! Deploying beyond one machine (issue 21): the container image and Kubernetes manifests are
//! checked offline by `scripts/check-deploy` (hadolint, the seccomp profile, kubernetes-validate,
//! the ConfigMap's config through this `corral`); docs/DEPLOY.md's commands run as written or
//! are marked as needing what CI lacks; and the Secret's libpq variables are all a replica needs
//! to reach PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cookbook::pg_schema;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `PATH` with the tested `corral` first, then the CI venv's tools (hadolint, kubernetes-validate).
fn path_with_corral() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_corral"))
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let venv = std::env::var("CORRAL_TEST_PYTHON")
        .ok()
        .and_then(|p| Path::new(&p).parent().map(|d| format!("{}:", d.display())))
        .unwrap_or_default();
    format!(
        "{bin}:{venv}{}",
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    )
}

fn sh(line: &str) -> (bool, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(root())
        .env("PATH", path_with_corral())
        .output()
        .unwrap_or_else(|e| unreachable!("sh runs: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `scripts/check-deploy --corral <this corral>`: every offline check of the image and the
/// manifests passes. Under CI=true a tool it needs that is missing fails it (the script says
/// so); .ci/run installs them.
#[test]
fn the_deployment_files_pass_check_deploy() {
    let (ok, out) = sh(&format!(
        "scripts/check-deploy --corral {}",
        env!("CARGO_BIN_EXE_corral")
    ));
    assert!(ok, "scripts/check-deploy failed:\n{out}");
    assert!(
        out.contains("ok: the ConfigMap's corral.yaml passes check-config --strict"),
        "{out}"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        assert!(
            !out.contains("skipped:"),
            "nothing is skipped in CI:\n{out}"
        );
    }
}

/// Both deploy scripts print their usage with `--help` and refuse an unknown argument (2).
#[test]
fn the_deploy_scripts_print_their_usage() {
    for script in ["scripts/check-deploy", "scripts/build-image"] {
        let (ok, out) = sh(&format!("{script} --help"));
        assert!(ok, "{out}");
        assert!(out.starts_with(&format!("Usage: {script}")), "{out}");
        let bad = Command::new(root().join(script))
            .arg("--nope")
            .output()
            .unwrap_or_else(|e| unreachable!("{script} runs: {e}"));
        assert_eq!(bad.status.code(), Some(2), "{script}");
    }
}

/// What a command line of docs/DEPLOY.md may end with: `# -> ok` (the test runs it) or
/// `# needs: <what>` with one of these (a thing CI has not got; the paths it names must exist).
const NEEDS: [&str; 4] = [
    "a container engine",
    "a cluster",
    "a release build",
    "a PostgreSQL server",
];

/// docs/DEPLOY.md's `sh` blocks: each command runs here and succeeds (`# -> ok`), or says what
/// it needs that CI has not got (`# needs: ...`), and every repository path it names exists.
#[test]
fn every_command_in_deploy_md_runs_or_says_what_it_needs() {
    let text = std::fs::read_to_string(root().join("docs/DEPLOY.md")).unwrap_or_default();
    let mut in_sh = false;
    let (mut ran, mut marked) = (0, 0);
    let mut failures = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match (in_sh, line.trim_end()) {
            (false, "```sh") => in_sh = true,
            (true, "```") => in_sh = false,
            (true, l) if !l.trim().is_empty() && !l.trim_start().starts_with('#') => {
                let at = format!("docs/DEPLOY.md:{}", i + 1);
                if let Some((cmd, _)) = l.rsplit_once("# -> ok") {
                    ran += 1;
                    let (ok, out) = sh(cmd.trim());
                    if !ok {
                        failures.push(format!("{at}: `{}` failed:\n{out}", cmd.trim()));
                    }
                } else if let Some((cmd, what)) = l.rsplit_once("# needs: ") {
                    marked += 1;
                    if !NEEDS.contains(&what.trim()) {
                        failures.push(format!("{at}: `needs: {what}` is not one of {NEEDS:?}"));
                    }
                    for word in cmd.split_whitespace() {
                        let word = word.trim_matches(|c| "\"'`(),=".contains(c));
                        let word = word.rsplit_once('=').map_or(word, |(_, w)| w);
                        if ["deploy/", "scripts/", "docs/", "crates/"]
                            .iter()
                            .any(|p| word.starts_with(p))
                            && !root().join(word).exists()
                        {
                            failures.push(format!("{at}: `{word}` does not exist"));
                        }
                    }
                } else {
                    failures.push(format!(
                        "{at}: `{l}` ends neither `# -> ok` nor `# needs: ...`"
                    ));
                }
            }
            _ => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran >= 3 && marked >= 5, "ran {ran}, marked {marked}");
}

/// The Secret `corral-postgres` holds libpq's variables (PGHOST, PGPORT, PGUSER, PGPASSWORD,
/// PGDATABASE) and the config only `postgres://`: a replica reaches the database with them.
#[test]
fn a_replica_reaches_postgres_through_the_libpq_variables_alone() {
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| unreachable!("a runtime: {e}"));
    let Some(schema) = rt.block_on(pg_schema::Schema::create("deploy")) else {
        return; // Outside CI without a server: said why, skipped.
    };
    let url = url::Url::parse(&schema.url).unwrap_or_else(|e| unreachable!("{e}"));
    let search_path = url
        .query_pairs()
        .find(|(k, _)| k == "options[search_path]")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
    let ws = dir.path().join("ws");
    let _ = std::fs::create_dir(&ws);
    let config = format!(
        "version: 1\nstorage: {{url: \"postgres://\"}}\nguardrails: {{confirmations: store, replicas: 2}}\n\
         preset: {{name: workspace_jail, root: {}}}\n\
         auth: {{tokens: [{{id: alice, roles: [operator], token_env: ALICE_TOKEN}}]}}\n",
        ws.display()
    );
    let _ = std::fs::write(dir.path().join("corral.yaml"), config);
    let port = crate::call::free_port();
    let decoded = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let mut server = Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["serve", "--config", "corral.yaml", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("ALICE_TOKEN", "alice-token-0123456789abcdef")
        .env("PGHOST", url.host_str().unwrap_or("127.0.0.1"))
        .env("PGPORT", url.port().unwrap_or(5432).to_string())
        .env("PGUSER", decoded(url.username()))
        .env("PGPASSWORD", decoded(url.password().unwrap_or_default()))
        .env("PGDATABASE", url.path().trim_start_matches('/'))
        .env("PGOPTIONS", format!("-c search_path={search_path}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| unreachable!("corral serve starts: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let health = loop {
        let (code, out, err) = crate::corral(
            dir.path(),
            &[
                "healthcheck",
                "--server",
                &format!("http://127.0.0.1:{port}"),
                "--format",
                "json",
            ],
        );
        if code == 0 || Instant::now() > deadline || server.try_wait().ok().flatten().is_some() {
            break format!("{code} {out}{err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = server.kill();
    let log = server
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    assert!(
        health.starts_with("0 ") && health.contains("\"storage\": \"postgres\""),
        "{health}\n{log}"
    );
    rt.block_on(schema.drop());
}
