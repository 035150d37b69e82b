//! Authorize hooks (deny, narrow, fail, panic), presets, and the explain trace.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use corral_policy::presets::{PRESET_NAMES, Preset, PresetOptions, build};
use corral_policy::{
    Args, Decision, FnHook, HookCtx, HookOutcome, Limits, Policy, Request, Rule, RuleEffect,
    TraceOutcome, codes,
};

use crate::support::{
    alice, argv_args, decide, engine, jailed, path_args, path_scope, sels, write_args,
};

type HookFn = fn(&HookCtx<'_>) -> Result<HookOutcome, String>;

fn read_policy() -> Policy {
    Policy::new().rule(
        Rule::allow("read", sels(&["files.read"]))
            .paths(path_scope(&["/data"], &[], false))
            .limits(Limits {
                max_bytes: Some(100),
                timeout: Some(Duration::from_secs(30)),
                ..Limits::NONE
            }),
    )
}

fn read_with_global_hook(hook: HookFn, path: &str) -> Decision {
    let e = engine(read_policy().authorize(Arc::new(FnHook(hook))));
    decide(&e, "files.read", &alice(), &path_args(path))
}

#[test]
fn a_hook_returning_deny_denies_with_its_policy_code_or_hook_denied() {
    let d = read_with_global_hook(
        |_| {
            Ok(HookOutcome::Deny {
                reason: "not today".to_owned(),
                code: codes::POLICY_READONLY.to_owned(),
            })
        },
        "/data/x",
    );
    assert!(
        matches!(&d, Decision::Denied { code, reason, rule } if *code == codes::POLICY_READONLY && reason == "not today" && &*rule.name == "read"),
        "{d:?}"
    );
    // A code outside `policy.*`, or one not in the catalog, becomes `policy.hook_denied`.
    for code in ["op.not_enabled", "policy.made_up", ""] {
        let e = engine(
            read_policy().authorize(Arc::new(FnHook(move |_: &HookCtx<'_>| {
                Ok(HookOutcome::Deny {
                    reason: "no".to_owned(),
                    code: code.to_owned(),
                })
            }))),
        );
        let d = decide(&e, "files.read", &alice(), &path_args("/data/x"));
        assert!(
            matches!(&d, Decision::Denied { code, .. } if *code == codes::POLICY_HOOK_DENIED),
            "{code:?}: {d:?}"
        );
    }
}

#[test]
fn a_hook_that_narrows_lowers_each_limit_to_the_minimum_and_never_raises_one() {
    let d = read_with_global_hook(
        |_| {
            Ok(HookOutcome::Narrow(Limits {
                max_bytes: Some(10),
                timeout: Some(Duration::from_secs(60)),
                max_entries: Some(5),
                ..Limits::NONE
            }))
        },
        "/data/x",
    );
    let Decision::Allowed(a) = &d else {
        unreachable!("narrowing keeps the call allowed: {d:?}")
    };
    assert_eq!(a.limits.max_bytes, Some(10));
    assert_eq!(a.limits.timeout, Some(Duration::from_secs(30)));
    assert_eq!(a.limits.max_entries, Some(5));
    assert_eq!(a.limits.memory, None);
}

#[test]
fn a_hook_returning_err_denies_as_hook_failed() {
    let d = read_with_global_hook(|_| Err("backend down".to_owned()), "/data/x");
    assert!(
        matches!(&d, Decision::Denied { code, reason, .. } if *code == codes::POLICY_HOOK_FAILED && reason.contains("backend down")),
        "{d:?}"
    );
}

#[test]
fn a_hook_that_panics_denies_as_hook_failed() {
    let d = read_with_global_hook(|_| panic!("hook bug"), "/data/x");
    assert!(
        matches!(&d, Decision::Denied { code, .. } if *code == codes::POLICY_HOOK_FAILED),
        "{d:?}"
    );
}

#[test]
fn a_hook_cannot_allow_what_the_rules_refuse() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let e = engine(
        read_policy().authorize(Arc::new(FnHook(move |_: &HookCtx<'_>| {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok(HookOutcome::Allow)
        }))),
    );
    let d = decide(&e, "files.read", &alice(), &path_args("/etc/passwd"));
    assert!(matches!(d, Decision::NotPermitted { .. }), "{d:?}");
    let d = decide(&e, "files.write", &alice(), &write_args("/data/x"));
    assert!(matches!(d, Decision::NotMounted), "{d:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "hooks run only on allowed calls"
    );
    assert!(decide(&e, "files.read", &alice(), &path_args("/data/x")).is_allowed());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_rule_hook_runs_only_when_its_rule_decides_and_sees_the_jailed_path() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let hook = FnHook(move |ctx: &HookCtx<'_>| {
        seen.fetch_add(1, Ordering::SeqCst);
        match ctx.paths.first() {
            Some((_, p)) if p.relative() == "blocked" => Ok(HookOutcome::Deny {
                reason: "blocked by hook".to_owned(),
                code: String::new(),
            }),
            _ => Ok(HookOutcome::NoOpinion),
        }
    });
    let e = engine(
        Policy::new()
            .rule(Rule::allow("data", sels(&["files.read"])).paths(path_scope(
                &["/data"],
                &[],
                false,
            )))
            .rule(
                Rule::allow("data2", sels(&["files.read"]))
                    .paths(path_scope(&["/data2"], &[], false))
                    .hook(Arc::new(hook)),
            ),
    );
    assert!(decide(&e, "files.read", &alice(), &path_args("/data/blocked")).is_allowed());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let d = decide(
        &e,
        "files.read",
        &alice(),
        &path_args("/data2/x/../blocked"),
    );
    assert!(
        matches!(&d, Decision::Denied { code, rule, .. } if *code == codes::POLICY_HOOK_DENIED && &*rule.name == "data2"),
        "{d:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(decide(&e, "files.read", &alice(), &path_args("/data2/ok")).is_allowed());
}

#[test]
fn a_failing_global_hook_denies_even_after_a_rule_hook_agreed() {
    let e = engine(
        Policy::new()
            .rule(
                Rule::allow("read", sels(&["files.read"]))
                    .paths(path_scope(&["/data"], &[], false))
                    .hook(Arc::new(FnHook(|_: &HookCtx<'_>| Ok(HookOutcome::Allow)))),
            )
            .authorize(Arc::new(FnHook(|_: &HookCtx<'_>| {
                Err("audit log full".to_owned())
            }))),
    );
    let d = decide(&e, "files.read", &alice(), &path_args("/data/x"));
    assert!(
        matches!(&d, Decision::Denied { code, .. } if *code == codes::POLICY_HOOK_FAILED),
        "{d:?}"
    );
}

fn opts(root: Option<&str>, commands: &[&str]) -> PresetOptions {
    PresetOptions {
        root: root.map(str::to_owned),
        commands: commands.iter().map(|c| (*c).to_owned()).collect(),
        ..PresetOptions::default()
    }
}

fn preset(name: &str, o: &PresetOptions) -> Policy {
    let Ok(p) = Preset::parse(name) else {
        unreachable!("`{name}` is a preset")
    };
    match build(p, o) {
        Ok(policy) => policy,
        Err(e) => unreachable!("preset `{name}` builds: {e}"),
    }
}

#[test]
fn every_preset_name_parses_in_both_spellings_and_round_trips() {
    assert_eq!(PRESET_NAMES.len(), 9);
    for name in PRESET_NAMES {
        let Ok(p) = Preset::parse(name) else {
            unreachable!("`{name}` parses")
        };
        assert_eq!(p.name(), *name);
        let dashed = name.replace('_', "-");
        assert!(
            matches!(Preset::parse(&dashed), Ok(q) if q == p),
            "{dashed}"
        );
    }
    assert!(matches!(
        Preset::parse("download-only"),
        Ok(Preset::DownloadOnly)
    ));
    assert!(matches!(
        Preset::parse("download_only"),
        Ok(Preset::DownloadOnly)
    ));
    let Err(e) = Preset::parse("read-only") else {
        unreachable!("`read-only` is not a preset")
    };
    assert_eq!(e.code(), codes::CONFIG_UNKNOWN_PRESET);
    assert!(e.fix().contains("readonly"), "{}", e.fix());
}

#[test]
fn every_preset_builds_with_the_options_it_needs() {
    let full = opts(Some("/ws"), &["make ..."]);
    for name in PRESET_NAMES {
        let o = match *name {
            "full_access" => PresetOptions {
                unsafe_: true,
                ..full.clone()
            },
            _ => full.clone(),
        };
        let policy = preset(name, &o);
        assert!(!policy.rules.is_empty(), "{name}");
        for r in &policy.rules {
            assert!(
                r.name.starts_with(&format!("preset:{name}")),
                "{name}: {}",
                r.name
            );
            assert_eq!(r.effect, RuleEffect::Allow);
        }
    }
    assert!(build(Preset::Minimal, &PresetOptions::default()).is_ok());
}

#[test]
fn presets_refuse_missing_options_with_stable_codes() {
    let root_only = opts(Some("/ws"), &[]);
    for p in [Preset::CiRunner, Preset::CommandsOnly] {
        let Err(e) = build(p, &root_only) else {
            unreachable!("{p:?} needs commands")
        };
        assert_eq!(e.code(), codes::CONFIG_MISSING_KEY);
        assert!(e.to_string().contains("commands"), "{e}");
    }
    let Err(e) = build(Preset::FullAccess, &opts(Some("/ws"), &["make"])) else {
        unreachable!("full_access needs unsafe")
    };
    assert_eq!(e.code(), codes::CONFIG_UNSAFE_REQUIRED);
    for p in [
        Preset::Readonly,
        Preset::FilesReadonly,
        Preset::DownloadOnly,
        Preset::WorkspaceJail,
    ] {
        assert!(p.needs_root());
        let Err(e) = build(p, &PresetOptions::default()) else {
            unreachable!("{p:?} needs a root")
        };
        assert_eq!(e.code(), codes::CONFIG_MISSING_KEY);
    }
    let Err(e) = build(Preset::Readonly, &opts(Some("relative"), &[])) else {
        unreachable!("a relative root is refused")
    };
    assert_eq!(e.code(), codes::CONFIG_INVALID_SCOPE);
}

#[test]
fn presets_decide_as_their_names_say() {
    let who = alice();
    let o = opts(Some("/ws"), &["make ..."]);

    let minimal = engine(preset("minimal", &o));
    assert!(decide(&minimal, "core.health", &who, &Args::new()).is_allowed());
    assert!(matches!(
        decide(&minimal, "files.read", &who, &path_args("/ws/x")),
        Decision::NotMounted
    ));

    let readonly = engine(preset("readonly", &o));
    assert!(decide(&readonly, "files.read", &who, &path_args("/ws/x")).is_allowed());
    assert!(matches!(
        decide(&readonly, "files.write", &who, &write_args("/ws/x")),
        Decision::NotMounted
    ));
    let d = decide(&readonly, "files.read", &who, &path_args("/ws/.env"));
    assert_eq!(d.code(), Some(codes::POLICY_PATH_DENIED), "{d:?}");
    let d = decide(
        &readonly,
        "files.read",
        &who,
        &path_args("/ws/a/id_rsa.pub"),
    );
    assert_eq!(d.code(), Some(codes::POLICY_PATH_DENIED), "{d:?}");

    let download = engine(preset("download-only", &o));
    assert!(decide(&download, "files.download", &who, &path_args("/ws/x")).is_allowed());
    assert!(matches!(
        decide(&download, "files.read", &who, &path_args("/ws/x")),
        Decision::NotMounted
    ));

    let files_ro = engine(preset("files_readonly", &o));
    for op in ["files.list", "files.stat", "files.read", "files.download"] {
        assert!(
            decide(&files_ro, op, &who, &path_args("/ws/x")).is_allowed(),
            "{op}"
        );
    }
    assert!(matches!(
        decide(&files_ro, "files.delete", &who, &path_args("/ws/x")),
        Decision::NotMounted
    ));

    let jail = engine(preset("workspace_jail", &o));
    assert_eq!(
        jailed(&decide(&jail, "files.write", &who, &write_args("notes"))).as_deref(),
        Some("/ws/notes")
    );
    let d = decide(&jail, "files.write", &who, &write_args("/etc/passwd"));
    assert_eq!(d.code(), Some(codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
    let d = decide(&jail, "files.read", &who, &path_args("/ws/.ssh/id_ed25519"));
    assert_eq!(d.code(), Some(codes::POLICY_PATH_DENIED), "{d:?}");
    assert!(decide(&jail, "commands.run", &who, &argv_args(&["make", "test"])).is_allowed());
    let d = decide(&jail, "commands.run", &who, &argv_args(&["rm", "-rf", "/"]));
    assert_eq!(d.code(), Some(codes::POLICY_COMMAND_NOT_ALLOWED), "{d:?}");

    let commands = engine(preset("commands_only", &o));
    assert!(decide(&commands, "commands.run", &who, &argv_args(&["make"])).is_allowed());
    assert!(matches!(
        decide(&commands, "files.read", &who, &path_args("/ws/x")),
        Decision::NotMounted
    ));

    let ci = engine(preset("ci_runner", &o));
    let d = decide(&ci, "commands.run", &who, &argv_args(&["make"]));
    let Decision::Allowed(a) = &d else {
        unreachable!("ci_runner runs its commands: {d:?}")
    };
    assert_eq!(a.limits.timeout, Some(Duration::from_secs(600)));
    assert!(decide(&ci, "files.read", &who, &path_args("/ws/x")).is_allowed());
    assert!(matches!(
        decide(&ci, "files.write", &who, &write_args("/ws/x")),
        Decision::NotMounted
    ));

    let full = engine(preset(
        "full_access",
        &PresetOptions {
            unsafe_: true,
            ..o.clone()
        },
    ));
    assert!(decide(&full, "files.delete", &who, &path_args("/ws/x")).is_allowed());
    let d = decide(&full, "files.read", &who, &path_args("/etc/passwd"));
    assert_eq!(d.code(), Some(codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
}

#[test]
fn composing_presets_keeps_deny_winning() {
    let o = opts(Some("/ws"), &[]);
    let policy = preset("workspace_jail", &o).without(sels(&["files.delete"]), "no deletes here");
    let e = engine(policy);
    assert!(decide(&e, "files.write", &alice(), &write_args("/ws/x")).is_allowed());
    let d = decide(&e, "files.delete", &alice(), &path_args("/ws/x"));
    assert!(
        matches!(&d, Decision::Denied { reason, code, .. } if reason == "no deletes here" && *code == codes::POLICY_DENIED),
        "{d:?}"
    );
    let combined = engine(
        preset("readonly", &o) + preset("workspace_jail", &o).without(sels(&["files.read"]), "no"),
    );
    let d = decide(&combined, "files.read", &alice(), &path_args("/ws/x"));
    assert!(matches!(d, Decision::Denied { .. }), "{d:?}");
}

#[test]
fn explain_names_every_rule_in_policy_order_with_an_outcome() {
    let bob_only = corral_policy::PrincipalSelector::Id("bob".to_owned());
    let policy = Policy::new()
        .rule(
            Rule::allow("for-bob", sels(&["files.read"]))
                .principals(vec![bob_only])
                .paths(path_scope(&["/data"], &[], false)),
        )
        .rule(
            Rule::allow("writes", sels(&["files.write"])).paths(path_scope(&["/data"], &[], false)),
        )
        .rule(
            Rule::allow("elsewhere", sels(&["files.read"])).paths(path_scope(
                &["/srv"],
                &[],
                false,
            )),
        )
        .rule(Rule::allow("data", sels(&["files.read"])).paths(path_scope(&["/data"], &[], false)))
        .rule(Rule::allow("also", sels(&["effect:read"])).paths(path_scope(&["/data"], &[], false)))
        .rule(
            Rule::deny("secrets", sels(&["files.read"])).paths(path_scope(
                &["/data/secrets"],
                &[],
                false,
            )),
        );
    let e = engine(policy);
    let who = alice();
    let args = path_args("/data/x");
    let x = e.explain(&Request {
        op: "files.read",
        principal: &who,
        args: &args,
    });
    assert_eq!(x.decision, decide(&e, "files.read", &who, &args));
    assert!(matches!(&x.decision, Decision::Allowed(a) if &*a.rule.name == "data"));
    let names: Vec<&str> = x.trace.iter().map(|s| &*s.rule.name).collect();
    assert_eq!(
        names,
        ["for-bob", "writes", "elsewhere", "data", "also", "secrets"]
    );
    for (i, step) in x.trace.iter().enumerate() {
        assert_eq!(step.rule.index, i);
    }
    assert!(matches!(
        x.trace[0].outcome,
        TraceOutcome::PrincipalNotMatched(_)
    ));
    assert!(matches!(x.trace[1].outcome, TraceOutcome::OpNotSelected(_)));
    assert!(
        matches!(&x.trace[2].outcome, TraceOutcome::ScopeNotMatched { code, .. } if *code == codes::POLICY_PATH_OUTSIDE_SCOPE)
    );
    assert!(matches!(x.trace[3].outcome, TraceOutcome::Decided));
    assert!(matches!(x.trace[4].outcome, TraceOutcome::AlsoMatched));
    assert!(matches!(
        x.trace[5].outcome,
        TraceOutcome::ScopeNotMatched { .. }
    ));
    assert_eq!(x.trace[5].effect, RuleEffect::Deny);

    // When the deny hits, it decides and the allow that matched is shown as also matching.
    let args = path_args("/data/secrets/k");
    let x = e.explain(&Request {
        op: "files.read",
        principal: &who,
        args: &args,
    });
    assert!(matches!(&x.decision, Decision::Denied { rule, .. } if &*rule.name == "secrets"));
    assert!(matches!(x.trace[3].outcome, TraceOutcome::AlsoMatched));
    assert!(matches!(x.trace[5].outcome, TraceOutcome::Decided));

    // An op nobody mounts: every rule is still named, and a note says why.
    let x = e.explain(&Request {
        op: "files.delete",
        principal: &who,
        args: &args,
    });
    assert!(matches!(x.decision, Decision::NotMounted));
    assert_eq!(x.trace.len(), 6);
    assert!(!x.notes.is_empty());
}
