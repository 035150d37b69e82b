//! The policy a config builds, checked by deciding calls with the engine.

use corral_config::Loaded;
use corral_policy::{Args, Decision, Principal, Request, codes};

use crate::load;

/// Decides `op` on `path` for `principal`.
fn decide(l: &Loaded, principal: &Principal, op: &str, path: &str) -> Decision {
    let args = Args::new().str("path", path);
    l.engine().decide(&Request {
        op,
        principal,
        args: &args,
    })
}

/// The principal a configured token authenticates as.
fn token(l: &Loaded, id: &str) -> Principal {
    l.tokens
        .iter()
        .find(|t| t.principal.id == id)
        .unwrap_or_else(|| panic!("no token `{id}`"))
        .principal
        .clone()
}

fn anyone() -> Principal {
    Principal::anonymous()
}

#[test]
fn enable_with_a_root_mounts_files_read_under_the_root_only() {
    let l = load("version: 1\nroot: /workspace\nenable: [files.read]\n");
    let d = decide(&l, &anyone(), "files.read", "/workspace/src/main.rs");
    assert!(d.is_allowed(), "{d:?}");
    let d = decide(&l, &anyone(), "files.read", "src/main.rs");
    assert!(d.is_allowed(), "a relative path anchors at the root: {d:?}");
    let d = decide(&l, &anyone(), "files.read", "/etc/passwd");
    assert_eq!(d.code(), Some(codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
    let d = decide(&l, &anyone(), "files.read", "/workspace/../etc/passwd");
    assert!(!d.is_allowed(), "{d:?}");
    let d = decide(&l, &anyone(), "files.write", "/workspace/a.txt");
    assert_eq!(d, Decision::NotMounted);
}

#[test]
fn enable_keeps_the_default_secret_denies() {
    let l = load("version: 1\nroot: /workspace\nenable: [files.read]\n");
    for secret in [
        "/workspace/.env",
        "/workspace/deploy/server.pem",
        "/workspace/.ssh/id_rsa",
    ] {
        let d = decide(&l, &anyone(), "files.read", secret);
        assert_eq!(d.code(), Some(codes::POLICY_PATH_DENIED), "{secret}: {d:?}");
    }
}

#[test]
fn disable_denies_an_op_the_preset_allows() {
    let l = load(
        "version: 1
root: /workspace
preset: workspace_jail
disable: [files.delete]
",
    );
    let d = decide(&l, &anyone(), "files.write", "/workspace/a.txt");
    assert!(d.is_allowed(), "{d:?}");
    let d = decide(&l, &anyone(), "files.delete", "/workspace/a.txt");
    match d {
        Decision::Denied { code, reason, rule } => {
            assert_eq!(code, codes::POLICY_DENIED);
            assert_eq!(reason, "disabled in the config");
            assert_eq!(&*rule.name, "disable");
        }
        other => panic!("files.delete should be denied: {other:?}"),
    }
}

#[test]
fn a_rule_for_a_role_reaches_only_tokens_with_that_role() {
    let l = load(
        "version: 1
rules:
  - name: viewers-read
    allow: [files.read]
    principals: [\"role:viewer\"]
    paths: {roots: [/workspace]}
auth:
  tokens:
    - {id: dashboard, roles: [viewer], token_env: CORRAL_VIEWER_TOKEN}
    - {id: agent, roles: [operator], token_env: CORRAL_AGENT_TOKEN}
",
    );
    assert_eq!(l.tokens.len(), 2);
    assert_eq!(token(&l, "dashboard").roles, ["viewer"]);
    assert_eq!(
        l.tokens
            .iter()
            .find(|t| t.principal.id == "dashboard")
            .unwrap()
            .secret
            .expose(),
        crate::VIEWER_SECRET
    );
    let d = decide(
        &l,
        &token(&l, "dashboard"),
        "files.read",
        "/workspace/a.txt",
    );
    assert!(d.is_allowed(), "{d:?}");
    let d = decide(&l, &token(&l, "agent"), "files.read", "/workspace/a.txt");
    assert_eq!(d, Decision::NotMounted);
    let d = decide(&l, &anyone(), "files.read", "/workspace/a.txt");
    assert_eq!(d, Decision::NotMounted);
}

#[test]
fn a_token_kind_and_id_selector_reach_the_token_they_name() {
    let l = load(
        "version: 1
rules:
  - allow: [files.read]
    principals: [\"kind:service\"]
    paths: {roots: [/srv/data]}
  - allow: [files.stat]
    principals: [\"id:agent\"]
    paths: {roots: [/workspace]}
auth:
  tokens:
    - {id: ci, roles: [], kind: service, token_env: CORRAL_ADMIN_TOKEN}
    - {id: agent, token_env: CORRAL_AGENT_TOKEN}
",
    );
    assert!(decide(&l, &token(&l, "ci"), "files.read", "/srv/data/x").is_allowed());
    assert_eq!(
        decide(&l, &token(&l, "agent"), "files.read", "/srv/data/x"),
        Decision::NotMounted
    );
    assert!(decide(&l, &token(&l, "agent"), "files.stat", "/workspace/x").is_allowed());
    assert_eq!(
        decide(&l, &token(&l, "ci"), "files.stat", "/workspace/x"),
        Decision::NotMounted
    );
}

#[test]
fn a_deny_path_rule_beats_a_preset_allow() {
    let l = load(
        "version: 1
root: /workspace
preset: workspace_jail
rules:
  - name: keep-out-of-secrets
    deny: [\"files.*\"]
    paths: {roots: [/workspace/secrets]}
    reason: secrets are off limits
",
    );
    let d = decide(&l, &anyone(), "files.read", "/workspace/secrets/db.txt");
    match d {
        Decision::Denied { rule, reason, .. } => {
            assert_eq!(&*rule.name, "keep-out-of-secrets");
            assert_eq!(reason, "secrets are off limits");
        }
        other => panic!("the deny rule should decide: {other:?}"),
    }
    let d = decide(&l, &anyone(), "files.read", "/workspace/src/lib.rs");
    assert!(d.is_allowed(), "{d:?}");
}

#[test]
fn the_default_state_dir_under_the_root_is_refused() {
    let base = crate::BASE;
    let l = load(&format!("version: 1\nroot: {base}\nenable: [files.read]\n"));
    assert_eq!(l.state_dir, std::path::Path::new(base).join(".corral"));
    let d = decide(&l, &anyone(), "files.read", &format!("{base}/README.md"));
    assert!(d.is_allowed(), "{d:?}");
    for p in [
        format!("{base}/.corral"),
        format!("{base}/.corral/corral.db"),
        format!("{base}/sub/../.corral/corral.db"),
        ".corral/corral.db".to_owned(),
    ] {
        let d = decide(&l, &anyone(), "files.read", &p);
        assert!(!d.is_allowed(), "{p}: {d:?}");
        assert_eq!(d.code(), Some(codes::POLICY_PATH_DENIED), "{p}: {d:?}");
    }
}

#[test]
fn a_state_dir_inside_a_writable_root_does_not_load() {
    // issue 11 item 3: the store refuses to start inside a root a rule lets callers write.
    let base = crate::BASE;
    for extra in [
        "enable: [files.read, files.write]\n",
        "enable: [files.delete]\n",
        "preset: {name: ci_runner, commands: [\"make ...\"], writable: true}\n",
    ] {
        let e = crate::load_err("corral.yaml", &format!("version: 1\nroot: {base}\n{extra}"));
        let d = e
            .diagnostics
            .iter()
            .find(|d| d.code == codes::CONFIG_PROTECTED_WRITABLE);
        assert!(d.is_some(), "{extra}: {:?}", e.diagnostics);
        let text = d.map(ToString::to_string).unwrap_or_default();
        assert!(text.contains("the state directory"), "{text}");
        assert!(text.contains("state_dir"), "{text}");
    }
    // Read-only, or the state dir elsewhere: loads.
    load(&format!(
        "version: 1\nroot: {base}/ws\nenable: [files.read, files.write]\n"
    ));
    load(&format!(
        "version: 1\nroot: {base}\npreset: files_readonly\n"
    ));
}

#[test]
fn a_relative_state_dir_is_anchored_at_the_config_directory_and_refused() {
    let base = crate::BASE;
    let l = load(&format!(
        "version: 1\nroot: {base}\nstate_dir: var/../state\nenable: [files.read]\n"
    ));
    assert_eq!(l.state_dir, std::path::Path::new(base).join("state"));
    let d = decide(&l, &anyone(), "files.read", &format!("{base}/state/x"));
    assert_eq!(d.code(), Some(codes::POLICY_PATH_DENIED), "{d:?}");
    let d = decide(&l, &anyone(), "files.read", &format!("{base}/.corral/x"));
    assert!(
        d.is_allowed(),
        "only the configured state dir is protected: {d:?}"
    );
}

#[test]
fn an_absolute_state_dir_is_refused_inside_a_preset_root() {
    let l = load(
        "version: 1
root: /workspace
preset: files_readonly
state_dir: /workspace/.state
",
    );
    let d = decide(&l, &anyone(), "files.read", "/workspace/.state/audit.db");
    assert_eq!(d.code(), Some(codes::POLICY_PATH_DENIED), "{d:?}");
    assert!(decide(&l, &anyone(), "files.read", "/workspace/a").is_allowed());
}

#[test]
fn rules_keep_their_origins_in_order() {
    let l = load(
        "version: 1
root: /workspace
preset: files_readonly
enable: [files.stat]
rules:
  - deny: [files.read]
    paths: {roots: [/workspace/private]}
disable: [files.delete]
",
    );
    let locations: Vec<&str> = l.origins.iter().map(|o| o.location.as_str()).collect();
    assert_eq!(locations, ["preset", "enable", "rules[0]", "disable"]);
    assert_eq!(l.origins.len(), l.policy.rules.len());
    assert_eq!(l.origins[0].preset, Some("files_readonly"));
    assert_eq!(l.origins[2].config_rule, Some(0));
    assert_eq!(l.origins[2].span.map(|s| s.line), Some(6));
}

#[test]
fn a_custom_op_is_mounted_by_its_exact_id_and_checks_its_params() {
    let l = load(
        "version: 1
custom:
  kafka.describe_topic:
    argv: [/usr/bin/kafka-topics, --describe, --topic, \"{topic}\"]
    params: {topic: word}
    effects: [read]
rules:
  - allow: [kafka.describe_topic]
",
    );
    let op = l.catalog.get("kafka.describe_topic").unwrap();
    assert!(op.groups.iter().any(|g| g == "custom"));
    let ok = Args::new().str("topic", "orders");
    let d = l.engine().decide(&Request {
        op: "kafka.describe_topic",
        principal: &anyone(),
        args: &ok,
    });
    assert!(d.is_allowed(), "{d:?}");
}

#[test]
fn a_custom_ops_path_outside_its_declared_root_names_that_root() {
    // A rule without a `paths:` scope: the op's own `root:` is what the argument is checked
    // against, and the refusal names it (it once said "outside the roots []").
    let l = load(
        "version: 1\ncustom:\n  grader.run:\n    argv: [/bin/true, \"{submission}\"]\n    params: {submission: {type: path, root: /workspace/submissions}}\n    effects: [exec]\nrules:\n  - allow: [grader.run]\n    confirm: never\n",
    );
    let args = Args::new().str("submission", "/etc/passwd");
    let d = l.engine().decide(&Request {
        op: "grader.run",
        principal: &anyone(),
        args: &args,
    });
    let Decision::NotPermitted { candidates } = &d else {
        unreachable!("refused: {d:?}")
    };
    assert!(
        candidates[0]
            .clause
            .contains("is outside the roots [/workspace/submissions]"),
        "{candidates:?}"
    );
}
