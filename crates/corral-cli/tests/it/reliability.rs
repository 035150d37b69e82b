//! The reliability campaign's script (bench/reliability/campaign.py, docs/RELIABILITY.md) runs
//! and holds its invariants at a small size, so it cannot rot between campaigns.

use std::process::Command;

/// `load` (300 calls from 8 clients on SQLite: one audit row per answered request id) and
/// `faults --only kill9-consume` (3 rounds of `kill -9` while an approved call runs: never twice,
/// never lost), against this build's `corral`.
#[test]
fn the_campaign_holds_its_invariants_at_a_small_size() {
    let Some(python) = crate::python("httpx and PyJWT") else {
        return;
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/reliability/campaign.py"
    );
    let bin = env!("CARGO_BIN_EXE_corral");
    for args in [
        &[
            "load",
            "--calls",
            "300",
            "--clients",
            "8",
            "--backend",
            "sqlite",
        ][..],
        &["faults", "--only", "kill9-consume", "--rounds", "3"][..],
    ] {
        let out = Command::new(&python)
            .arg(script)
            .args(args)
            .args(["--bin", bin])
            .env("NO_PROXY", "127.0.0.1")
            .env_remove("CORRAL_CONFIG")
            .output();
        let Ok(out) = out else {
            unreachable!("python runs")
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("| True |"), "{args:?}:\n{stdout}");
    }
}
