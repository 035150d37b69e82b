//! Two `corral serve` processes on one PostgreSQL, no balancer: the client alternates (issue 21
//! item 3, beside corral-server's in-process `guard_replicas` tests and the cookbook's replicas
//! recipe). An action raised on one replica and approved on the other runs exactly once,
//! whichever replica the retries reach; a run's budget is shared by both; and a SIGHUP reload
//! of one replica (a new policy) neither stops nor changes the other, nor loses a pending
//! action or a run's count.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::call::{Served, serve_with};
use crate::cookbook::pg_schema;
use crate::corral_with_env;

const ALICE: &str = "replicas-alice-token-0123456789";
const BOT: &str = "replicas-bot-token-0123456789";

fn config(url: &str, ws: &Path, deny: &str) -> String {
    format!(
        "version: 1\nstate_dir: .corral\nstorage: {{url: \"{url}\"}}\n\
         guardrails: {{confirmations: store, replicas: 2}}\nbudgets: {{max_calls: 4}}\n\
         preset: {{name: workspace_jail, root: {ws}, deny: [{deny}]}}\n\
         auth:\n  tokens:\n\
         \x20   - {{id: alice, roles: [operator], token_env: ALICE_TOKEN}}\n\
         \x20   - {{id: bot, roles: [operator], kind: service, token_env: BOT_TOKEN, run: nightly}}\n",
        ws = ws.display()
    )
}

/// `corral <args> --server <url>` with both tokens in the environment: (exit code, all output).
fn at(dir: &Path, s: &Served, args: &[&str]) -> (i32, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--server", &s.url]);
    let (code, out, err) =
        corral_with_env(dir, &all, &[("ALICE_TOKEN", ALICE), ("BOT_TOKEN", BOT)]);
    (code, format!("{out}{err}"))
}

fn action_id(text: &str) -> Option<String> {
    let at = text.find("/confirmations/")? + "/confirmations/".len();
    let id: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    (!id.is_empty()).then_some(id)
}

fn sighup(s: &Served) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &s.child.id().to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()), "kill -HUP failed");
}

#[test]
fn two_serve_processes_share_approvals_and_budgets_and_a_reload_of_one_leaves_the_other_be() {
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| unreachable!("a runtime: {e}"));
    let Some(schema) = rt.block_on(pg_schema::Schema::create("cli_replicas")) else {
        return; // Outside CI without a server: said why, skipped.
    };
    let dir = crate::workspace(None);
    let root = dir.path();
    let ws = root.join("ws");
    let _ = std::fs::write(ws.join("notes.txt"), "notes\n");
    let _ = std::fs::write(ws.join("secret.txt"), "secret\n");
    let _ = std::fs::write(
        root.join("corral.yaml"),
        config(&schema.url, &ws, "\"*.key\""),
    );
    let env = [("ALICE_TOKEN", ALICE), ("BOT_TOKEN", BOT)];
    let mut a = serve_with(root, &["--config", "corral.yaml"], &env, Stdio::null());
    let mut b = serve_with(root, &["--config", "corral.yaml"], &env, Stdio::null());
    let write = [
        "call",
        "files.write",
        "path=log.txt",
        "content=once\n",
        "append=true",
        "--token-env",
        "ALICE_TOKEN",
    ];

    // Raised on A.
    let (_, raised) = at(root, &a, &write);
    let Some(id) = action_id(&raised) else {
        unreachable!("a confirmation is required: {raised}")
    };

    // A reloads a policy that denies secret.txt; B keeps its own, and answers all along.
    let _ = std::fs::write(
        root.join("corral.yaml"),
        config(&schema.url, &ws, "\"*.key\", secret.txt"),
    );
    let a_pid = a.child.id();
    sighup(&a);
    let read_secret = [
        "call",
        "files.read",
        "path=secret.txt",
        "--token-env",
        "ALICE_TOKEN",
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, out) = at(root, &b, &read_secret);
        assert_eq!(code, 0, "B answers while A reloads: {out}");
        let (code, out) = at(root, &a, &read_secret);
        if code != 0 && out.contains("policy.path_denied") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A never applied its reload: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(a.child.try_wait().ok().flatten().is_none(), "A still runs");
    assert_eq!(a.child.id(), a_pid);
    let (code, out) = at(root, &b, &read_secret);
    assert_eq!(code, 0, "B's policy is its own until it reloads: {out}");

    // Approved on B; the retries alternate: one runs it, every other gets the stored outcome.
    let (code, out) = at(root, &b, &["confirm", &id, "--token-env", "ALICE_TOKEN"]);
    assert_eq!(code, 0, "{out}");
    let mut ran = 0;
    for i in 0..6 {
        let s = if i % 2 == 0 { &a } else { &b };
        let (code, out) = at(root, s, &write);
        if out.contains("did not run again") {
            continue;
        }
        assert_eq!(code, 0, "retry {i}: {out}");
        ran += 1;
    }
    assert_eq!(ran, 1, "the approved call ran once");
    let log = std::fs::read_to_string(ws.join("log.txt")).unwrap_or_default();
    assert_eq!(log, "once\n", "written exactly once");

    // The bot's run `nightly` has 4 calls, shared by both replicas; B reloads in the middle.
    let read = [
        "call",
        "files.read",
        "path=notes.txt",
        "--token-env",
        "BOT_TOKEN",
    ];
    let mut outcomes = Vec::new();
    for i in 0..6 {
        if i == 2 {
            sighup(&b);
        }
        let s = if i % 2 == 0 { &a } else { &b };
        let (code, out) = at(root, s, &read);
        outcomes.push(if code == 0 {
            "ok".to_owned()
        } else if out.contains("budget.exhausted") {
            "budget.exhausted".to_owned()
        } else {
            format!("{code}: {out}")
        });
    }
    assert_eq!(
        outcomes,
        [
            "ok",
            "ok",
            "ok",
            "ok",
            "budget.exhausted",
            "budget.exhausted"
        ],
        "one budget of 4 across both replicas"
    );
    for s in [&mut a, &mut b] {
        assert!(
            s.child.try_wait().ok().flatten().is_none(),
            "both still run"
        );
    }
    drop((a, b));
    rt.block_on(schema.drop());
}
