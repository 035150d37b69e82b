//! The API contract: schemathesis (`--checks all`) against a live `corral serve` and its own
//! `/openapi.json`, bounded and with a fixed seed, must report no failure.

use std::process::{Command, Stdio};

use crate::workspace;

/// schemathesis (pinned in `.ci/requirements.txt`) runs every check it has against every route
/// the document lists, as an admin of a server with the lab on and `commands.run` mounted (`ls`,
/// `echo`, in the sandbox): responses match their schemas
/// and documented statuses, a schema-valid request is not refused with 400, a schema-violating
/// one is not accepted, an undeclared method answers 405 with `Allow`, a missing token 401.
#[test]
fn schemathesis_finds_no_failure_in_the_openapi_contract() {
    let Some(python) = crate::python("schemathesis") else {
        return;
    };
    const TOKEN: &str = "it-api-contract-admin-token-0123456789";
    let dir = workspace(Some(
        "version: 1\npreset: {name: workspace_jail, root: $WS, commands: [\"ls {path}\", \"echo {word}\"]}\nauth:\n  tokens:\n    - {id: alice, roles: [admin], token_env: CORRAL_IT_CONTRACT_TOKEN}\n",
    ));
    let _ = std::fs::write(dir.path().join("ws/notes.txt"), "hello\n");
    let served = crate::call::serve_with(
        dir.path(),
        &["--config", "corral.yaml"],
        &[("CORRAL_IT_CONTRACT_TOKEN", TOKEN)],
        Stdio::null(),
    );
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/reference/schemathesis.toml"
    );
    let schema = format!("{}/openapi.json", served.url);
    let auth = format!("Authorization: Bearer {TOKEN}");
    let out = Command::new(python)
        .args([
            "-m",
            "schemathesis.cli",
            "--config-file",
            config,
            "run",
            &schema,
        ])
        .args([
            "--checks",
            "all",
            "--max-examples",
            "25",
            "--seed",
            "20261203",
        ])
        .args(["--generation-database", "none", "--request-timeout", "30"])
        .args(["--header", &auth])
        // Its reports and caches stay in the test's directory.
        .current_dir(dir.path())
        .env("NO_PROXY", "127.0.0.1")
        .env("NO_COLOR", "1")
        .output();
    let Ok(out) = out else {
        unreachable!("python runs")
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{stdout}\n{stderr}"
    );
    // Every route the document lists was tested, and every case passed.
    let number_after = |label: &str| -> Option<u64> {
        let at = stdout.find(label)? + label.len();
        let digits: String = stdout[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let tested = number_after("Tested:").unwrap_or(0);
    assert!(
        tested >= 40,
        "only {tested} operations tested:
{stdout}"
    );
    assert!(
        stdout.contains(&format!("Selected: {tested}/{tested}")),
        "{stdout}"
    );
    let generated = number_after("Test cases:").unwrap_or(0);
    assert!(generated > 0, "{stdout}");
    assert!(
        stdout.contains(&format!("{generated} generated, {generated} passed")),
        "{stdout}"
    );
}
