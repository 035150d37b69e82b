//! The agents host's policy: the catalog's agent ops, `AgentScope`, the required scope, the two
//! session gates and the `agent_host` preset.

use corral_policy::presets::{Preset, PresetOptions, build};
use corral_policy::scope::{
    AgentAsk, AgentPermissions, AgentRefusal, AgentScope, AgentScopeSpec, NetworkSpec,
};
use corral_policy::{
    Args, Catalog, Decision, Effect, Engine, OpId, OpSpec, Policy, Principal, Request, Rule,
    RuleEffect, Tier, TraceOutcome, codes,
};

use crate::support::{alice, decide, engine, path_scope, sels};

fn scope(spec: AgentScopeSpec) -> AgentScope {
    match AgentScope::compile(spec.clone()) {
        Ok(s) => s,
        Err(e) => unreachable!("agent scope {spec:?} should compile: {e}"),
    }
}

fn ws_scope() -> AgentScope {
    scope(AgentScopeSpec {
        workdir: "/workspace".to_owned(),
        ..AgentScopeSpec::default()
    })
}

fn run_args(workdir: Option<&str>, model: Option<&str>) -> Args {
    let mut a = Args::new().str("task", "fix the failing test");
    if let Some(w) = workdir {
        a = a.str("workdir", w);
    }
    if let Some(m) = model {
        a = a.str("model", m);
    }
    a
}

fn codex_session_args() -> Args {
    Args::new()
}

const CODEX_OPS: [&str; 3] = [
    "agents.codex.run",
    "agents.codex.sessions.create",
    "agents.codex.sessions.send_event",
];

/// [`CODEX_OPS`] and the generic gate every op that opens a session needs.
const CODEX_OPS_AND_GATE: [&str; 4] = [
    "agents.codex.run",
    "agents.codex.sessions.create",
    "agents.codex.sessions.send_event",
    "agents.sessions.create",
];

// ---------------------------------------------------------------- the catalog

#[test]
fn every_adapter_has_run_install_session_create_and_send_event_and_there_is_one_generic_gate() {
    let c = Catalog::builtin();
    for a in ["codex", "claude_code"] {
        for op in ["run", "install", "sessions.create", "sessions.send_event"] {
            let id = format!("agents.{a}.{op}");
            assert!(c.get(&id).is_some(), "{id} is in the catalog");
        }
    }
    let gate = c.get("agents.sessions.create");
    assert!(gate.is_some_and(|g| g.explicit_only));
}

#[test]
fn install_and_session_create_are_explicit_only_and_run_and_send_event_are_not() {
    let c = Catalog::builtin();
    let spec = |id: &str| c.get(id).cloned();
    for (id, explicit) in [
        ("agents.codex.install", true),
        ("agents.codex.sessions.create", true),
        ("agents.claude_code.sessions.create", true),
        ("agents.codex.run", false),
        ("agents.codex.sessions.send_event", false),
    ] {
        assert_eq!(spec(id).map(|s| s.explicit_only), Some(explicit), "{id}");
    }
    assert_eq!(
        spec("agents.codex.install").map(|s| s.tier()),
        Some(Tier::Destructive)
    );
    let run = spec("agents.codex.run");
    assert!(
        run.as_ref()
            .is_some_and(|s| s.effects.contains(Effect::Exec))
    );
    assert_eq!(run.map(|s| s.tier()), Some(Tier::Confirm));
}

#[test]
fn a_custom_op_may_not_use_the_agents_namespace() {
    let mut c = Catalog::builtin();
    let Ok(id) = OpId::parse("agents.mine.run") else {
        unreachable!("a valid id")
    };
    let err = c.add_custom(OpSpec::new(id, &[Effect::Exec], "mine"));
    assert!(err.is_err_and(|e| e.code() == codes::CONFIG_INVALID_OP));
}

// ---------------------------------------------------------------- mounting and the scope

#[test]
fn wildcards_without_an_agents_scope_never_mount_a_coding_agent() {
    let e = engine(
        Policy::new()
            .rule(Rule::allow("all", sels(&["*"])).paths(path_scope(&["/ws"], &[], false)))
            .rule(Rule::allow("exec", sels(&["effect:exec", "group:agents"]))),
    );
    for op in CODEX_OPS {
        assert!(!e.is_mounted(op, &alice()), "{op} is not mounted");
    }
    let d = decide(&e, "agents.codex.run", &alice(), &run_args(None, None));
    assert!(matches!(d, Decision::NotMounted), "{d:?}");
}

#[test]
fn a_rule_naming_an_agent_op_without_an_agents_scope_refuses_every_call_with_scope_required() {
    let e = engine(Policy::new().rule(Rule::allow("codex", sels(&["agents.codex.run"]))));
    let d = decide(&e, "agents.codex.run", &alice(), &run_args(None, None));
    assert_eq!(d.code(), Some(codes::POLICY_SCOPE_REQUIRED), "{d:?}");
    let Decision::NotPermitted { candidates } = d else {
        unreachable!("not permitted")
    };
    assert!(candidates[0].clause.contains("`agents:`"), "{candidates:?}");
}

#[test]
fn a_namespace_selector_with_an_agents_scope_mounts_run_and_send_event_but_not_the_explicit_ops() {
    let e = engine(Policy::new().rule(Rule::allow("a", sels(&["agents.**"])).agents(ws_scope())));
    assert!(e.is_mounted("agents.claude_code.sessions.send_event", &alice()));
    assert!(!e.is_mounted("agents.codex.sessions.create", &alice()));
    assert!(!e.is_mounted("agents.codex.install", &alice()));
    // `run` opens a session: it needs the generic gate, which only its exact id mounts.
    assert!(!e.is_mounted("agents.codex.run", &alice()));
    let d = decide(&e, "agents.codex.run", &alice(), &run_args(None, None));
    assert_eq!(d.code(), Some(codes::AGENTS_SESSION_GATE), "{d:?}");
    let e = engine(
        Policy::new()
            .rule(Rule::allow("a", sels(&["agents.**"])).agents(ws_scope()))
            .rule(Rule::allow("gate", sels(&["agents.sessions.create"]))),
    );
    assert!(e.is_mounted("agents.codex.run", &alice()));
    assert!(decide(&e, "agents.codex.run", &alice(), &run_args(None, None)).is_allowed());
}

#[test]
fn every_deny_selector_reaches_the_explicit_only_session_create() {
    let e = engine(
        Policy::new()
            .rule(
                Rule::allow(
                    "a",
                    sels(&["agents.codex.sessions.create", "agents.sessions.create"]),
                )
                .agents(ws_scope()),
            )
            .rule(Rule::deny("no", sels(&["agents.**"]))),
    );
    let d = decide(
        &e,
        "agents.codex.sessions.create",
        &alice(),
        &codex_session_args(),
    );
    assert_eq!(d.code(), Some(codes::POLICY_DENIED), "{d:?}");
}

#[test]
fn the_agent_scope_refuses_a_model_it_does_not_list_and_a_workdir_outside_its_own() {
    let s = scope(AgentScopeSpec {
        workdir: "/workspace".to_owned(),
        models: vec!["gpt-5-codex".to_owned()],
        ..AgentScopeSpec::default()
    });
    let e = engine(Policy::new().rule(Rule::allow("codex", sels(&CODEX_OPS_AND_GATE)).agents(s)));
    let who = alice();
    let ok = decide(
        &e,
        "agents.codex.run",
        &who,
        &run_args(Some("sub/dir"), Some("gpt-5-codex")),
    );
    assert!(ok.is_allowed(), "{ok:?}");
    let d = decide(&e, "agents.codex.run", &who, &run_args(None, Some("o3")));
    assert_eq!(d.code(), Some(codes::AGENTS_MODEL_NOT_ALLOWED), "{d:?}");
    let Decision::NotPermitted { candidates } = &d else {
        unreachable!("not permitted")
    };
    assert!(
        candidates[0].clause.contains("gpt-5-codex"),
        "{candidates:?}"
    );
    for w in ["/etc", "../escape", "/workspace/../etc", "/workspacex"] {
        let d = decide(&e, "agents.codex.run", &who, &run_args(Some(w), None));
        assert_eq!(d.code(), Some(codes::AGENTS_WORKDIR_OUTSIDE), "{w}: {d:?}");
    }
}

#[test]
fn a_deny_rule_with_a_path_scope_covers_the_agents_workdir() {
    let e = engine(
        Policy::new()
            .rule(Rule::allow("codex", sels(&CODEX_OPS_AND_GATE)).agents(ws_scope()))
            .rule(Rule::deny("secret", sels(&["agents.**"])).paths(path_scope(
                &["/workspace/secret"],
                &[],
                false,
            ))),
    );
    let d = decide(
        &e,
        "agents.codex.run",
        &alice(),
        &run_args(Some("secret"), None),
    );
    assert_eq!(d.code(), Some(codes::POLICY_DENIED), "{d:?}");
    let d = decide(
        &e,
        "agents.codex.run",
        &alice(),
        &run_args(Some("src"), None),
    );
    assert!(d.is_allowed(), "{d:?}");
}

#[test]
fn the_engine_hands_the_deciding_rules_agent_scope_to_the_runtime() {
    let e = engine(
        Policy::new().rule(Rule::allow("codex", sels(&CODEX_OPS_AND_GATE)).agents(ws_scope())),
    );
    let Decision::Allowed(a) = decide(&e, "agents.codex.run", &alice(), &run_args(None, None))
    else {
        unreachable!("allowed")
    };
    let s = e.agent_scope(&a);
    assert_eq!(s.map(|s| s.spec().workdir.as_str()), Some("/workspace"));
    assert_eq!(
        s.map(AgentScope::permissions),
        Some(AgentPermissions::ReadOnly)
    );
}

// ---------------------------------------------------------------- AgentScope itself

#[test]
fn full_permissions_without_unconfined_ok_do_not_compile() {
    let spec = AgentScopeSpec {
        workdir: "/workspace".to_owned(),
        permissions: Some(AgentPermissions::Full),
        ..AgentScopeSpec::default()
    };
    let Err(e) = AgentScope::compile(spec.clone()) else {
        unreachable!("full without unconfined_ok is refused")
    };
    assert_eq!(e.code(), codes::CONFIG_INVALID_SCOPE);
    assert!(e.fix().contains("unconfined_ok: true"), "{}", e.fix());
    let ok = AgentScope::compile(AgentScopeSpec {
        unconfined_ok: true,
        ..spec
    });
    assert!(ok.is_ok_and(|s| s.unconfined()));
}

#[test]
fn full_permissions_with_confirm_writes_outside_do_not_compile() {
    // The hold covers the workdir only: a `full` agent's writes beyond it would apply unasked.
    let Err(e) = AgentScope::compile(AgentScopeSpec {
        workdir: "/workspace".to_owned(),
        permissions: Some(AgentPermissions::Full),
        unconfined_ok: true,
        confirm_writes_outside: vec!["/workspace/src".to_owned()],
        ..AgentScopeSpec::default()
    }) else {
        unreachable!("full with confirm_writes_outside is refused")
    };
    assert_eq!(e.code(), codes::CONFIG_INVALID_SCOPE);
    assert!(e.to_string().contains("confirm_writes_outside"), "{e}");
}

#[test]
fn a_workdir_of_slash_or_a_relative_workdir_does_not_compile() {
    for w in ["/", "workspace", "", "/ws/*"] {
        let r = AgentScope::compile(AgentScopeSpec {
            workdir: w.to_owned(),
            ..AgentScopeSpec::default()
        });
        assert!(r.is_err(), "{w}");
    }
}

#[test]
fn the_check_grants_a_session_its_workdir_permissions_and_turns_left_or_refuses_with_a_code() {
    let s = scope(AgentScopeSpec {
        workdir: "/home/{principal.id}".to_owned(),
        permissions: Some(AgentPermissions::WorkspaceWrite),
        models: vec!["gpt-5-codex".to_owned()],
        max_turns: Some(3),
        network: Some(NetworkSpec::Loopback),
        ..AgentScopeSpec::default()
    });
    let who = alice();
    let ask = AgentAsk {
        model: Some("gpt-5-codex"),
        workdir: Some("proj"),
        turns: 1,
    };
    let Ok(g) = s.check(ask, &who) else {
        unreachable!("granted")
    };
    assert_eq!(g.workdir.absolute(), "/home/alice/proj");
    assert_eq!(g.permissions, AgentPermissions::WorkspaceWrite);
    assert_eq!(g.turns_left, Some(2));
    assert_eq!(g.network, Some(NetworkSpec::Loopback));
    let refused = |ask: AgentAsk<'_>| s.check(ask, &who).err().map(AgentRefusal::code);
    assert_eq!(
        refused(AgentAsk { turns: 3, ..ask }),
        Some(codes::AGENTS_MAX_TURNS)
    );
    assert_eq!(
        refused(AgentAsk {
            model: Some("other"),
            ..ask
        }),
        Some(codes::AGENTS_MODEL_NOT_ALLOWED)
    );
    assert_eq!(
        refused(AgentAsk {
            workdir: Some("/home/bob"),
            ..ask
        }),
        Some(codes::AGENTS_WORKDIR_OUTSIDE)
    );
}

#[test]
fn writes_outside_the_listed_directories_need_confirmation() {
    let s = scope(AgentScopeSpec {
        workdir: "/workspace".to_owned(),
        permissions: Some(AgentPermissions::WorkspaceWrite),
        confirm_writes_outside: vec!["/workspace/src".to_owned()],
        ..AgentScopeSpec::default()
    });
    let who = alice();
    assert!(!s.write_needs_confirmation("/workspace/src/lib.rs", &who));
    assert!(s.write_needs_confirmation("/workspace/Cargo.toml", &who));
    assert!(s.write_needs_confirmation("/workspace/src/../build.rs", &who));
    let plain = ws_scope();
    assert!(!plain.write_needs_confirmation("/workspace/Cargo.toml", &who));
    let outside = AgentScope::compile(AgentScopeSpec {
        workdir: "/workspace".to_owned(),
        confirm_writes_outside: vec!["/etc".to_owned()],
        ..AgentScopeSpec::default()
    });
    assert!(outside.is_err_and(|e| e.to_string().contains("not beneath the workdir")));
}

// ---------------------------------------------------------------- the two gates

fn gates(adapter_gate: bool, generic_gate: bool) -> Engine {
    let mut ids = Vec::new();
    if adapter_gate {
        ids.push("agents.codex.sessions.create");
    }
    if generic_gate {
        ids.push("agents.sessions.create");
    }
    let mut p = Policy::new();
    for id in ids {
        p = p.rule(Rule::allow(id, sels(&[id])).agents(ws_scope()));
    }
    engine(p)
}

fn create(e: &Engine, who: &Principal) -> Decision {
    decide(
        e,
        "agents.codex.sessions.create",
        who,
        &codex_session_args(),
    )
}

#[test]
fn a_session_is_allowed_when_both_gates_are_allowed() {
    let e = gates(true, true);
    assert!(create(&e, &alice()).is_allowed());
    assert!(e.is_mounted("agents.codex.sessions.create", &alice()));
}

#[test]
fn a_session_is_refused_with_session_gate_when_only_the_adapters_gate_is_allowed() {
    let e = gates(true, false);
    let d = create(&e, &alice());
    assert_eq!(d.code(), Some(codes::AGENTS_SESSION_GATE), "{d:?}");
    let Decision::Denied { reason, .. } = d else {
        unreachable!("denied")
    };
    assert!(reason.contains("`agents.sessions.create`"), "{reason}");
    assert!(!e.is_mounted("agents.codex.sessions.create", &alice()));
}

#[test]
fn a_session_is_not_mounted_when_only_the_generic_gate_is_allowed() {
    let e = gates(false, true);
    assert!(matches!(create(&e, &alice()), Decision::NotMounted));
}

#[test]
fn a_session_is_not_mounted_when_neither_gate_is_allowed() {
    let e = gates(false, false);
    assert!(matches!(create(&e, &alice()), Decision::NotMounted));
}

#[test]
fn the_generic_gate_must_reach_the_same_caller() {
    let e = engine(
        Policy::new()
            .rule(Rule::allow("codex", sels(&["agents.codex.sessions.create"])).agents(ws_scope()))
            .rule(
                Rule::allow("gate", sels(&["agents.sessions.create"]))
                    .principals(vec![corral_policy::PrincipalSelector::Id("bob".to_owned())]),
            ),
    );
    let d = create(&e, &alice());
    assert_eq!(d.code(), Some(codes::AGENTS_SESSION_GATE), "{d:?}");
}

#[test]
fn explain_shows_the_rule_of_each_gate_in_one_trace() {
    let e = gates(true, true);
    let args = codex_session_args();
    let x = e.explain(&Request {
        op: "agents.codex.sessions.create",
        principal: &alice(),
        args: &args,
    });
    assert!(x.decision.is_allowed());
    assert_eq!(x.trace.len(), 2);
    for step in &x.trace {
        assert_eq!(step.effect, RuleEffect::Allow);
        assert_eq!(step.outcome, TraceOutcome::Decided, "{}", step.rule.name);
    }
    assert!(
        x.notes
            .iter()
            .any(|n| n.contains("second gate `agents.sessions.create`: allowed by rule")),
        "{:?}",
        x.notes
    );
    let closed = gates(true, false);
    let x = closed.explain(&Request {
        op: "agents.codex.sessions.create",
        principal: &alice(),
        args: &args,
    });
    assert_eq!(x.decision.code(), Some(codes::AGENTS_SESSION_GATE));
    assert!(
        x.notes.iter().any(|n| n.contains("not mounted")),
        "{:?}",
        x.notes
    );
}

// ---------------------------------------------------------------- the agent_host preset

fn host(opts: PresetOptions) -> Result<Engine, corral_policy::PolicyError> {
    build(Preset::AgentHost, &opts).map(engine)
}

#[test]
fn agent_host_mounts_each_listed_adapters_run_session_and_events_and_the_generic_gate() {
    let Ok(e) = host(PresetOptions {
        root: Some("/workspace".to_owned()),
        agents: vec!["codex".to_owned(), "claude_code".to_owned()],
        ..PresetOptions::default()
    }) else {
        unreachable!("builds")
    };
    let who = alice();
    for a in ["codex", "claude_code"] {
        for op in ["run", "sessions.create", "sessions.send_event"] {
            assert!(e.is_mounted(&format!("agents.{a}.{op}"), &who), "{a}.{op}");
        }
        assert!(!e.is_mounted(&format!("agents.{a}.install"), &who));
    }
    // The agents' model traffic is `llm.chat` as the session's owner: the preset allows it.
    assert!(e.is_mounted("llm.chat", &who));
    assert!(!e.is_mounted("files.read", &who));
    assert!(create(&e, &who).is_allowed());
    let Decision::Allowed(a) = decide(&e, "agents.codex.run", &who, &run_args(None, None)) else {
        unreachable!("allowed")
    };
    assert_eq!(
        e.agent_scope(&a).map(AgentScope::permissions),
        Some(AgentPermissions::ReadOnly)
    );
}

#[test]
fn agent_host_defaults_to_codex_and_takes_workspace_write() {
    let Ok(e) = host(PresetOptions {
        root: Some("/workspace".to_owned()),
        permissions: Some(AgentPermissions::WorkspaceWrite),
        ..PresetOptions::default()
    }) else {
        unreachable!("builds")
    };
    assert!(e.is_mounted("agents.codex.run", &alice()));
    assert!(!e.is_mounted("agents.claude_code.run", &alice()));
    let Decision::Allowed(a) = decide(&e, "agents.codex.run", &alice(), &run_args(None, None))
    else {
        unreachable!("allowed")
    };
    assert_eq!(
        e.agent_scope(&a).map(AgentScope::permissions),
        Some(AgentPermissions::WorkspaceWrite)
    );
}

#[test]
fn agent_host_refuses_full_permissions_an_unknown_adapter_and_a_missing_root() {
    let full = host(PresetOptions {
        root: Some("/workspace".to_owned()),
        permissions: Some(AgentPermissions::Full),
        ..PresetOptions::default()
    });
    assert!(full.is_err_and(|e| e.code() == codes::CONFIG_INVALID_SCOPE));
    let typo = host(PresetOptions {
        root: Some("/workspace".to_owned()),
        agents: vec!["codec".to_owned()],
        ..PresetOptions::default()
    });
    let Err(e) = typo else {
        unreachable!("an unknown adapter is refused")
    };
    assert_eq!(e.code(), codes::CONFIG_UNKNOWN_ADAPTER);
    assert!(e.fix().contains("`codex`"), "{}", e.fix());
    let no_root = host(PresetOptions::default());
    assert!(no_root.is_err_and(|e| e.code() == codes::CONFIG_MISSING_KEY));
}
