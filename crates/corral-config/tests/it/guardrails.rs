//! The guardrails' config: `autonomy`, `roles`, `guardrails`, `budgets`, `disabled_ops` and the
//! rule key `confirm: never`; what loads, what does not (with its code, place and fix), and the
//! lint findings they bring.

use std::time::Duration;

use corral_config::model::{ConfirmationBackend, GuardrailsMode};
use corral_config::{Diagnostic, RbacCause, Severity, lint};
use corral_policy::{AutonomyLevel, Principal, PrincipalKind, PrincipalSelector, Role, codes};

use crate::{list, load, load_err, span_line, the};

/// The one error with `code` of a config that must not load.
fn error(yaml: &str, code: &str) -> Diagnostic {
    let e = load_err("corral.yaml", yaml);
    the(&e.diagnostics, code, Severity::Error).clone()
}

const RULE: &str = "version: 1
rules:
  - allow: [files.read, files.write]
    paths: {roots: [/workspace]}
";

// ---------------------------------------------------------------- autonomy

#[test]
fn autonomy_as_a_bare_level_sets_the_process_level_and_no_pins() {
    let l = load("version: 1\nautonomy: L2\n");
    let a = l.config.autonomy.unwrap();
    assert_eq!(a.level, Some(AutonomyLevel::L2));
    assert!(a.pins.is_empty());
    assert!(load("version: 1\n").config.autonomy.is_none());
}

#[test]
fn autonomy_pins_name_a_principal_and_a_level() {
    let l = load(
        "version: 1
autonomy:
  level: L3
  pins:
    - {principal: \"kind:service\", level: L4}
    - {principal: \"id:bot\", level: L1}
    - {principal: \"role:intern\", level: L0}
",
    );
    let a = l.config.autonomy.unwrap();
    assert_eq!(a.level, Some(AutonomyLevel::L3));
    let pins: Vec<(PrincipalSelector, AutonomyLevel)> = a
        .pins
        .iter()
        .map(|p| (p.principal.clone(), p.level))
        .collect();
    assert_eq!(
        pins,
        vec![
            (
                PrincipalSelector::Kind(PrincipalKind::Service),
                AutonomyLevel::L4
            ),
            (PrincipalSelector::Id("bot".to_owned()), AutonomyLevel::L1),
            (
                PrincipalSelector::Role("intern".to_owned()),
                AutonomyLevel::L0
            ),
        ]
    );
    // Pins without a process-wide level are fine: no level means no restriction but the pins.
    let l = load("version: 1\nautonomy: {pins: [{principal: \"id:bot\", level: L1}]}\n");
    assert_eq!(l.config.autonomy.unwrap().level, None);
}

#[test]
fn a_misspelt_level_is_refused_with_the_closest_level() {
    let d = error("version: 1\nautonomy: l2\n", codes::CONFIG_INVALID_VALUE);
    assert_eq!(d.location, "autonomy");
    assert!(d.fix.contains("did you mean `L2`?"), "{d}");
    let d = error(
        "version: 1\nautonomy: {level: L9}\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "autonomy.level");
    assert!(d.message.contains("L0, L1, L2, L3, L4"), "{d}");
}

#[test]
fn bad_pins_are_refused_each_with_its_place() {
    let d = error(
        "version: 1\nautonomy: {pins: [{principal: \"*\", level: L1}]}\n",
        codes::CONFIG_INVALID_PRINCIPAL,
    );
    assert_eq!(d.location, "autonomy.pins[0].principal");
    assert!(d.fix.contains("autonomy.level"), "{d}");
    let d = error(
        "version: 1\nautonomy: {pins: [{principal: \"team:x\", level: L1}]}\n",
        codes::CONFIG_INVALID_PRINCIPAL,
    );
    assert_eq!(d.location, "autonomy.pins[0].principal");
    let d = error(
        "version: 1\nautonomy: {pins: [{principal: \"id:x\"}]}\n",
        codes::CONFIG_MISSING_KEY,
    );
    assert_eq!(d.location, "autonomy.pins[0]");
    let d = error(
        "version: 1\nautonomy: {pins: [{principal: \"id:x\", levl: L1}]}\n",
        codes::CONFIG_UNKNOWN_KEY,
    );
    assert_eq!(d.fix, "did you mean `level`?");
}

// ---------------------------------------------------------------- roles

#[test]
fn roles_overrides_map_op_ids_to_roles() {
    let l = load(
        "version: 1
roles:
  overrides:
    files.read: operator
    files.delete: operator
    files.write: admin
",
    );
    let r = l.config.roles.unwrap();
    let got: Vec<(&str, Role)> = r
        .overrides
        .iter()
        .map(|(op, role)| (op.value.as_str(), *role))
        .collect();
    assert_eq!(
        got,
        vec![
            ("files.read", Role::Operator),
            ("files.delete", Role::Operator),
            ("files.write", Role::Admin),
        ]
    );
}

#[test]
fn an_empty_roles_block_is_present_and_no_roles_block_is_absent() {
    assert!(load("version: 1\nroles: {}\n").config.roles.is_some());
    assert!(load("version: 1\nroles:\n").config.roles.is_some());
    assert!(load("version: 1\n").config.roles.is_none());
}

#[test]
fn an_override_for_an_unknown_op_or_role_is_refused_with_did_you_mean() {
    let yaml = "version: 1\nroles:\n  overrides:\n    files.reed: viewer\n";
    let d = error(yaml, codes::CONFIG_UNKNOWN_OP);
    assert_eq!(d.location, "roles.overrides.files.reed");
    assert!(d.fix.contains("`files.read`"), "{d}");
    assert_eq!(span_line(&d), 4);
    let d = error(
        "version: 1\nroles:\n  overrides:\n    files.read: operater\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "roles.overrides.files.read");
    assert!(d.fix.contains("did you mean `operator`?"), "{d}");
    let d = error(
        "version: 1\nroles: {overides: {}}\n",
        codes::CONFIG_UNKNOWN_KEY,
    );
    assert_eq!(d.fix, "did you mean `overrides`?");
}

// ---------------------------------------------------------------- guardrails

#[test]
fn guardrails_default_to_enforce_300s_store_and_one_replica() {
    let g = load("version: 1\n").config.guardrails;
    assert_eq!(g.mode, GuardrailsMode::Enforce);
    assert_eq!(g.confirmation_ttl, Duration::from_secs(300));
    assert_eq!(g.confirmations, ConfirmationBackend::Store);
    assert_eq!(g.replicas, 1);
}

#[test]
fn guardrails_take_mode_ttl_backend_and_replicas() {
    let g = load(
        "version: 1
guardrails: {mode: dry_run, confirmation_ttl: 2m, confirmations: memory, replicas: 1}
",
    )
    .config
    .guardrails;
    assert_eq!(g.mode, GuardrailsMode::DryRun);
    assert_eq!(g.confirmation_ttl, Duration::from_secs(120));
    assert_eq!(g.confirmations, ConfirmationBackend::Memory);
    let g = load("version: 1\nguardrails: {confirmations: store, replicas: 3}\n")
        .config
        .guardrails;
    assert_eq!(g.replicas, 3);
}

// issue 11 item 6: the pending actions a requester may have at once are capped (20 by
// default), a setting; a cap of 0 would ask nobody and does not load.
#[test]
fn max_pending_defaults_to_20_is_a_setting_and_zero_does_not_load() {
    assert_eq!(load("version: 1\n").config.guardrails.max_pending, 20);
    let g = load("version: 1\nguardrails: {max_pending: 3}\n")
        .config
        .guardrails;
    assert_eq!(g.max_pending, 3);
    let d = error(
        "version: 1\nguardrails: {max_pending: 0}\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "guardrails.max_pending");
    assert!(d.fix.contains("`20`"), "{d}");
    error(
        "version: 1\nguardrails: {max_pending: many}\n",
        codes::CONFIG_INVALID_VALUE,
    );
}

#[test]
fn memory_confirmations_with_more_than_one_replica_do_not_load() {
    let yaml = "version: 1\nguardrails:\n  replicas: 2\n  confirmations: memory\n";
    let d = error(yaml, codes::CONFIG_INVALID_VALUE);
    assert_eq!(d.location, "guardrails.confirmations");
    assert_eq!(span_line(&d), 4);
    assert!(d.message.contains("`replicas` is 2"), "{d}");
    assert!(d.fix.contains("confirmations: store"), "{d}");
}

#[test]
fn bad_guardrails_values_are_refused() {
    let d = error(
        "version: 1\nguardrails: {mode: dry-run}\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert!(d.fix.contains("did you mean `dry_run`?"), "{d}");
    let d = error(
        "version: 1\nguardrails: {confirmation_ttl: 500ms}\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "guardrails.confirmation_ttl");
    error(
        "version: 1\nguardrails: {confirmation_ttl: 300}\n",
        codes::CONFIG_INVALID_DURATION,
    );
    let d = error(
        "version: 1\nguardrails: {replicas: 0}\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "guardrails.replicas");
    let d = error(
        "version: 1\nguardrails: {confirmation_tll: 5s}\n",
        codes::CONFIG_UNKNOWN_KEY,
    );
    assert_eq!(d.fix, "did you mean `confirmation_ttl`?");
    assert_eq!(d.location, "guardrails.confirmation_tll");
}

// ---------------------------------------------------------------- budgets

#[test]
fn budgets_take_counts_a_per_op_map_a_duration_and_a_size() {
    let b = load(
        "version: 1
budgets:
  max_calls: 100
  max_calls_per_op: {files.write: 5, files.read: 0}
  max_wall_time: 10m
  max_output_bytes: 1MB
",
    )
    .config
    .budgets;
    assert_eq!(b.max_calls, 100);
    let per_op: Vec<(&str, u64)> = b
        .max_calls_per_op
        .iter()
        .map(|(op, n)| (op.value.as_str(), *n))
        .collect();
    assert_eq!(per_op, vec![("files.write", 5), ("files.read", 0)]);
    assert_eq!(b.max_wall_time, Duration::from_secs(600));
    assert_eq!(b.max_output_bytes, 1_000_000);
}

#[test]
fn zero_disables_a_budget_and_absent_budgets_are_zero() {
    for zero in ["0", "0s", "\"0\""] {
        let b = load(&format!(
            "version: 1\nbudgets: {{max_calls: 0, max_wall_time: {zero}, max_output_bytes: {}}}\n",
            zero.replace('s', "B")
        ))
        .config
        .budgets;
        assert_eq!(b.max_calls, 0);
        assert_eq!(b.max_wall_time, Duration::ZERO);
        assert_eq!(b.max_output_bytes, 0);
    }
    assert_eq!(
        load("version: 1\n").config.budgets,
        corral_config::model::BudgetsConfig::default()
    );
}

#[test]
fn bad_budgets_are_refused_with_their_place() {
    let d = error(
        "version: 1\nbudgets:\n  max_calls_per_op: {files.wirte: 3}\n",
        codes::CONFIG_UNKNOWN_OP,
    );
    assert_eq!(d.location, "budgets.max_calls_per_op.files.wirte");
    assert!(d.fix.contains("`files.write`"), "{d}");
    let d = error(
        "version: 1\nbudgets: {max_calls: -1}\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "budgets.max_calls");
    error(
        "version: 1\nbudgets: {max_wall_time: 10 minutes}\n",
        codes::CONFIG_INVALID_DURATION,
    );
    let d = error(
        "version: 1\nbudgets: {max_call: 3}\n",
        codes::CONFIG_UNKNOWN_KEY,
    );
    assert_eq!(d.fix, "did you mean `max_calls`?");
}

#[test]
fn a_token_may_be_scoped_to_a_run_and_a_malformed_run_is_refused_where_it_is() {
    let l = load(
        "version: 1
auth:
  tokens:
    - {id: agent, token_env: CORRAL_AGENT_TOKEN, run: \"eval-7:task.1\"}
    - {id: admin, token_env: CORRAL_ADMIN_TOKEN}
  jwt: {hs256_secret_env: CORRAL_JWT_SECRET, run_claim: corral_run}
",
    );
    let runs: Vec<_> = l.tokens.iter().map(|t| t.run.as_deref()).collect();
    assert_eq!(runs, [Some("eval-7:task.1"), None]);
    let jwt = l.config.auth.jwt.as_ref().map(|j| j.run_claim.as_str());
    assert_eq!(jwt, Some("corral_run"));
    let default_claim = load("version: 1\nauth:\n  jwt: {hs256_secret_env: CORRAL_JWT_SECRET}\n");
    let jwt = default_claim
        .config
        .auth
        .jwt
        .as_ref()
        .map(|j| j.run_claim.as_str());
    assert_eq!(jwt, Some("run"));

    let yaml = "version: 1
auth:
  tokens:
    - {id: agent, token_env: CORRAL_AGENT_TOKEN, run: \"two words\"}
";
    let d = error(yaml, codes::CONFIG_INVALID_VALUE);
    assert_eq!(d.location, "auth.tokens[0].run");
    assert!(d.message.contains("two words"), "{d}");
    assert!(d.fix.contains("1-128 characters"), "{d}");
    assert_eq!(span_line(&d), 4);
}

#[test]
fn a_run_scoped_token_may_record_its_run_and_record_without_a_run_is_refused_where_it_is() {
    let l = load(
        "version: 1
auth:
  tokens:
    - {id: agent, token_env: CORRAL_AGENT_TOKEN, run: task-1, record: true}
    - {id: viewer, token_env: CORRAL_VIEWER_TOKEN, run: task-2}
    - {id: admin, token_env: CORRAL_ADMIN_TOKEN, record: false}
",
    );
    let record: Vec<_> = l
        .tokens
        .iter()
        .map(|t| (t.principal.id.as_str(), t.record))
        .collect();
    assert_eq!(
        record,
        [("agent", true), ("viewer", false), ("admin", false)]
    );

    let yaml = "version: 1
auth:
  tokens:
    - {id: admin, token_env: CORRAL_ADMIN_TOKEN}
    - {id: agent, token_env: CORRAL_AGENT_TOKEN, record: true}
";
    let d = error(yaml, codes::CONFIG_INVALID_VALUE);
    assert_eq!(d.location, "auth.tokens[1].record");
    assert!(d.message.contains("not scoped to one"), "{d}");
    assert!(d.fix.contains("add `run: <id>`"), "{d}");
    assert!(d.fix.contains("X-Corral-Record: on"), "{d}");
    assert_eq!(span_line(&d), 5);
    let d = error(
        "version: 1\nauth:\n  tokens:\n    - {id: a, token_env: A_TOKEN, run: r, record: yes}\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "auth.tokens[0].record");
}

// ---------------------------------------------------------------- disabled_ops

#[test]
fn a_disabled_op_is_gone_from_the_catalog_and_the_engine() {
    let l = load(
        "version: 1
preset: workspace_jail
root: /workspace
disabled_ops: [files.delete, files.write]
",
    );
    assert!(l.catalog.get("files.delete").is_none());
    assert!(l.catalog.get("files.write").is_none());
    assert!(l.catalog.get("files.read").is_some());
    let engine = l.engine();
    let mounted: Vec<String> = engine
        .mounted_ops(&Principal::anonymous())
        .into_iter()
        .map(|o| o.id.to_string())
        .collect();
    assert!(mounted.contains(&"files.read".to_owned()), "{mounted:?}");
    assert!(
        !mounted
            .iter()
            .any(|o| o == "files.delete" || o == "files.write")
    );
}

#[test]
fn no_disabled_ops_changes_nothing() {
    let plain = load("version: 1\npreset: workspace_jail\nroot: /workspace\n");
    let empty = load("version: 1\npreset: workspace_jail\nroot: /workspace\ndisabled_ops: []\n");
    let ids = |l: &corral_config::Loaded| l.catalog.ids().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(ids(&plain), ids(&empty));
    assert_eq!(ids(&plain).len(), corral_policy::Catalog::builtin().len());
}

#[test]
fn an_unknown_disabled_op_stops_loading_with_did_you_mean() {
    let d = error(
        "version: 1\ndisabled_ops: [files.delet]\n",
        codes::CONFIG_UNKNOWN_OP,
    );
    assert_eq!(d.location, "disabled_ops[0]");
    assert!(d.fix.contains("`files.delete`"), "{d}");
    // A pattern is not an op id: it only removes by exact id.
    let d = error(
        "version: 1\ndisabled_ops: [\"files.*\"]\n",
        codes::CONFIG_UNKNOWN_OP,
    );
    assert_eq!(d.location, "disabled_ops[0]");
}

#[test]
fn a_reference_to_a_disabled_op_stops_loading() {
    let yaml = "version: 1
disabled_ops: [files.write]
rules:
  - allow: [files.read, files.write]
    paths: {roots: [/workspace]}
";
    let d = error(yaml, codes::CONFIG_UNKNOWN_OP);
    assert_eq!(d.location, "rules[0].allow[1]");
    assert!(d.message.contains("`disabled_ops`"), "{d}");
    assert!(d.fix.contains("remove"), "{d}");
    let d = error(
        "version: 1\ndisabled_ops: [files.write]\nroles: {overrides: {files.write: admin}}\n",
        codes::CONFIG_UNKNOWN_OP,
    );
    assert!(d.message.contains("`disabled_ops`"), "{d}");
    // A pattern that reaches the removed op is fine: it just no longer reaches it.
    load(
        "version: 1\ndisabled_ops: [files.write]\nrules:\n  - allow: [\"files.*\"]\n    paths: {roots: [/workspace]}\n",
    );
}

// ---------------------------------------------------------------- confirm: never

#[test]
fn confirm_never_on_confirm_tier_ops_loads_with_a_lint_warning() {
    let yaml = format!("{RULE}    confirm: never\n");
    let l = load(&yaml);
    assert!(l.config.rules[0].confirm_never.is_some());
    let findings = lint::lint(&l);
    let d = the(&findings, codes::LINT_CONFIRM_NEVER, Severity::Warning);
    assert_eq!(d.location, "rules[0].confirm");
    assert_eq!(span_line(d), 5);
    assert!(d.message.contains("`files.write`"), "{d}");
    assert!(!d.message.contains("`files.read`"), "{d}");
    // `always` is the default and says nothing.
    let l = load(&format!("{RULE}    confirm: always\n"));
    assert!(l.config.rules[0].confirm_never.is_none());
    assert!(
        lint::lint(&l)
            .iter()
            .all(|d| d.code != codes::LINT_CONFIRM_NEVER),
        "{}",
        list(&lint::lint(&l))
    );
}

/// An unattended rule or preset on purpose: `confirm: never` with a `reason:` is a note that
/// quotes it, so `check-config --strict` passes; without one the warning says how to state it.
#[test]
fn confirm_never_with_a_reason_is_a_note_and_without_one_the_warning_says_how() {
    let l = load(&format!(
        "{RULE}    confirm: never\n    reason: nightly CI runs unattended\n"
    ));
    let findings = lint::lint(&l);
    let d = the(&findings, codes::LINT_CONFIRM_NEVER, Severity::Note);
    assert!(d.message.contains("\"nightly CI runs unattended\""), "{d}");
    assert!(d.message.contains("`files.write`"), "{d}");
    let preset = load(
        "version: 1\npreset: {name: workspace_jail, confirm: never, reason: the ci job}\nroot: /workspace\n",
    );
    let findings = lint::lint(&preset);
    let d = the(&findings, codes::LINT_CONFIRM_NEVER, Severity::Note);
    assert!(d.message.contains("\"the ci job\""), "{d}");
    // A blank reason says nothing: still a warning, whose fix names `reason:`.
    let l = load(&format!("{RULE}    confirm: never\n    reason: \"  \"\n"));
    let findings = lint::lint(&l);
    let d = the(&findings, codes::LINT_CONFIRM_NEVER, Severity::Warning);
    assert!(d.fix.contains("`reason:`"), "{d:?}");
}

#[test]
fn confirm_never_on_a_rule_with_only_read_ops_is_a_warning_that_it_does_nothing() {
    let l = load(
        "version: 1
rules:
  - allow: [files.read]
    paths: {roots: [/workspace]}
    confirm: never
",
    );
    let findings = lint::lint(&l);
    let d = the(&findings, codes::LINT_CONFIRM_NEVER, Severity::Warning);
    assert!(d.message.contains("no effect"), "{d}");
}

#[test]
fn confirm_never_on_a_destructive_op_does_not_load() {
    let yaml = "version: 1
rules:
  - allow: [\"files.*\"]
    paths: {roots: [/workspace]}
    confirm: never
";
    let d = error(yaml, codes::CONFIG_INVALID_VALUE);
    assert_eq!(d.location, "rules[0].confirm");
    assert!(d.message.contains("`files.delete`"), "{d}");
    assert!(d.message.contains("always confirmed"), "{d}");
    assert_eq!(span_line(&d), 5);
    // A tier raised to destructive counts too.
    let yaml = "version: 1
tiers: {files.write: destructive}
rules:
  - allow: [files.write]
    paths: {roots: [/workspace]}
    confirm: never
";
    let d = error(yaml, codes::CONFIG_INVALID_VALUE);
    assert!(d.message.contains("`files.write`"), "{d}");
}

#[test]
fn confirm_never_on_a_deny_rule_or_with_a_typo_does_not_load() {
    let d = error(
        "version: 1\nrules:\n  - deny: [files.write]\n    confirm: never\n",
        codes::CONFIG_INVALID_VALUE,
    );
    assert_eq!(d.location, "rules[0].confirm");
    let d = error(
        &format!("{RULE}    confirm: nevr\n"),
        codes::CONFIG_INVALID_VALUE,
    );
    assert!(d.fix.contains("did you mean `never`?"), "{d}");
    let d = error(
        &format!("{RULE}    confrim: never\n"),
        codes::CONFIG_UNKNOWN_KEY,
    );
    assert_eq!(d.fix, "did you mean `confirm`?");
}

// ---------------------------------------------------------------- RBAC activation

#[test]
fn rbac_by_tier_is_on_whenever_a_principal_can_carry_a_tier_role() {
    // issue 11 item 7: a `viewer` token could delete files because RBAC was off without a
    // `roles:` block. Now a tier role anywhere (a token's, a `roles:` block, any JWT) turns it on.
    let grader = "version: 1
auth:
  tokens:
    - {id: grader, roles: [grader], token_env: CORRAL_AGENT_TOKEN}
";
    let cause = |yaml: &str| load(yaml).rbac_cause();
    // Only rule roles anywhere: off, and nothing to say about it.
    assert_eq!(cause(grader), None);
    assert!(
        lint::lint(&load(grader))
            .iter()
            .all(|d| d.code != codes::LINT_RBAC_NO_TIER_ROLE)
    );
    let with_admin =
        format!("{grader}    - {{id: ada, roles: [dev, admin], token_env: CORRAL_ADMIN_TOKEN}}\n");
    assert_eq!(
        cause(&with_admin),
        Some(RbacCause::TokenTierRole {
            token: "ada".to_owned(),
            role: Role::Admin
        })
    );
    assert_eq!(
        cause(&format!("{grader}roles: {{}}\n")),
        Some(RbacCause::RolesBlock)
    );
    assert_eq!(
        cause(&format!(
            "{grader}  jwt: {{hs256_secret_env: CORRAL_JWT_SECRET}}\n"
        )),
        Some(RbacCause::Jwt)
    );
    // On: the token without a tier role is refused every call, and the lint says so.
    let findings = lint::lint(&load(&with_admin));
    let d = the(&findings, codes::LINT_RBAC_NO_TIER_ROLE, Severity::Warning);
    assert_eq!(d.location, "auth.tokens[0]");
    assert!(d.message.contains("token `grader` has no tier role"), "{d}");
    assert!(
        d.message
            .contains("token `ada` carries the tier role `admin`"),
        "{d}"
    );
}

#[test]
fn the_isolation_block_loads() {
    let l = load("version: 1\nisolation: {backend: process, network: loopback}\n");
    assert_eq!(
        l.config.isolation.backend,
        corral_config::model::BackendKind::Process
    );
}

#[test]
fn confirm_never_on_a_preset_marks_its_rules_and_warns() {
    let yaml = "version: 1
preset: {name: workspace_jail, confirm: never}
root: /workspace
rules:
  - allow: [files.read]
    paths: {roots: [/data]}
";
    let l = load(yaml);
    let marked: Vec<bool> = l.origins.iter().map(|o| o.confirm_never).collect();
    assert!(!marked.is_empty());
    for (o, m) in l.origins.iter().zip(&marked) {
        assert_eq!(*m, o.preset.is_some(), "{o:?}");
    }
    let findings = lint::lint(&l);
    let d = the(&findings, codes::LINT_CONFIRM_NEVER, Severity::Warning);
    assert_eq!(span_line(d), 2);
    assert!(d.message.contains("`files.write`"), "{d}");
    assert!(!d.message.contains("`files.delete`"), "{d}");
    assert!(d.message.contains("destructive ops stay confirmed"), "{d}");
    // The plain form and `confirm: always` mark nothing.
    for plain in [
        "version: 1\npreset: workspace_jail\nroot: /workspace\n",
        "version: 1\npreset: {name: workspace_jail, confirm: always}\nroot: /workspace\n",
    ] {
        assert!(load(plain).origins.iter().all(|o| !o.confirm_never));
    }
}
