//! Deny beats allow, whatever the shape of either and whatever their order.

use corral_policy::{
    Catalog, Decision, Effect, Engine, OpId, OpSpec, ParamKind, Policy, Principal, Request, Rule,
    Selector, codes,
};

use crate::support::{alice, allowed_by, path_args, path_scope, sels, unsafe_path_scope};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AllowKind {
    /// `*` with no scope: the op's own root (`/data`) is all that guards the path.
    Global,
    /// `app.cat` with `paths: [/data]`.
    Scoped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DenyKind {
    /// A deny rule with no scope.
    Global,
    /// A deny rule whose path scope covers `/data/private`.
    Scoped,
    /// A deny glob `private` in an allow rule's path scope.
    GlobInAllowScope,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    DenyFirst,
    AllowFirst,
}

/// The builtin catalog plus `app.cat`, a read op whose path must lie under its own root.
fn catalog() -> Catalog {
    let mut c = Catalog::builtin();
    let Ok(id) = OpId::parse("app.cat") else {
        unreachable!("`app.cat` is a valid id")
    };
    let spec = OpSpec::new(id, &[Effect::Read], "print a file").param(
        "path",
        ParamKind::Path {
            root: Some("/data".to_owned()),
        },
        true,
    );
    assert!(c.add_custom(spec).is_ok());
    c
}

fn policy(allow: AllowKind, deny: DenyKind, order: Order) -> Policy {
    let allow_rule = match allow {
        AllowKind::Global => Rule::allow("allow", vec![Selector::All]),
        AllowKind::Scoped => {
            Rule::allow("allow", sels(&["files.read"])).paths(path_scope(&["/data"], &[], false))
        }
    };
    let allow_rule = match allow {
        AllowKind::Global => allow_rule,
        AllowKind::Scoped => {
            let Ok(cat) = OpId::parse("app.cat") else {
                unreachable!()
            };
            let mut r = allow_rule;
            r.selectors.push(Selector::Exact(cat));
            r
        }
    };
    let deny_rule = match deny {
        DenyKind::Global => Rule::deny("deny", vec![Selector::Effect(Effect::Read)]),
        DenyKind::Scoped => Rule::deny("deny", vec![Selector::Effect(Effect::Read)])
            .paths(path_scope(&["/data/private"], &[], false)),
        // The glob lives in the scope of another allow rule that reaches the op: a global allow
        // has no scope to carry it, and a glob in the only allow rule's own scope leaves no rule
        // that passes (see `a_lone_allow_whose_own_glob_matches_...`).
        DenyKind::GlobInAllowScope => Rule::allow("guard", vec![Selector::Effect(Effect::Read)])
            .paths(path_scope(&["/data"], &["private"], false)),
    };
    match order {
        Order::DenyFirst => Policy::new().rule(deny_rule).rule(allow_rule),
        Order::AllowFirst => Policy::new().rule(allow_rule).rule(deny_rule),
    }
}

const COVERED: [&str; 5] = [
    "/data/private/key",
    "/data/./private//key",
    "/data/public/../private/key",
    "private/key",
    "/data/private",
];

const OUTSIDE: [&str; 3] = ["/data/public/readme", "public/readme", "/data/privateer"];

fn ops(allow: AllowKind) -> &'static [&'static str] {
    match allow {
        AllowKind::Global => &["app.cat"],
        AllowKind::Scoped => &["app.cat", "files.read"],
    }
}

fn is_refused_by_a_deny(d: &Decision) -> bool {
    matches!(d, Decision::Denied { code, .. }
        if *code == codes::POLICY_DENIED || *code == codes::POLICY_PATH_DENIED)
}

#[test]
fn every_combination_of_allow_deny_and_order_denies_a_covered_path() {
    let who = alice();
    for allow in [AllowKind::Global, AllowKind::Scoped] {
        for deny in [
            DenyKind::Global,
            DenyKind::Scoped,
            DenyKind::GlobInAllowScope,
        ] {
            for order in [Order::DenyFirst, Order::AllowFirst] {
                let engine = Engine::new(catalog(), policy(allow, deny, order));
                for op in ops(allow) {
                    for path in COVERED {
                        let args = path_args(path);
                        let d = engine.decide(&Request {
                            op,
                            principal: &who,
                            args: &args,
                        });
                        assert!(
                            is_refused_by_a_deny(&d),
                            "{allow:?} x {deny:?} x {order:?}: {op} {path} gave {d:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_combination_still_allows_a_path_outside_the_deny_scope() {
    let who = alice();
    for allow in [AllowKind::Global, AllowKind::Scoped] {
        for deny in [DenyKind::Scoped, DenyKind::GlobInAllowScope] {
            for order in [Order::DenyFirst, Order::AllowFirst] {
                let engine = Engine::new(catalog(), policy(allow, deny, order));
                for op in ops(allow) {
                    for path in OUTSIDE {
                        let args = path_args(path);
                        let d = engine.decide(&Request {
                            op,
                            principal: &who,
                            args: &args,
                        });
                        assert!(
                            d.is_allowed(),
                            "{allow:?} x {deny:?} x {order:?}: {op} {path} gave {d:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_global_deny_refuses_even_paths_every_allow_covers_and_unmounts_the_op() {
    let who = alice();
    for allow in [AllowKind::Global, AllowKind::Scoped] {
        for order in [Order::DenyFirst, Order::AllowFirst] {
            let engine = Engine::new(catalog(), policy(allow, DenyKind::Global, order));
            for op in ops(allow) {
                let d = engine.decide(&Request {
                    op,
                    principal: &who,
                    args: &path_args("/data/public/readme"),
                });
                assert!(
                    matches!(&d, Decision::Denied { code, .. } if *code == codes::POLICY_DENIED),
                    "{allow:?} x {order:?}: {op} gave {d:?}"
                );
                assert!(!engine.is_mounted(op, &who), "{op} is wholly denied");
            }
        }
    }
}

#[test]
fn the_deny_names_the_rule_that_denied_whatever_the_order() {
    let who = alice();
    for order in [Order::DenyFirst, Order::AllowFirst] {
        let engine = Engine::new(
            catalog(),
            policy(AllowKind::Scoped, DenyKind::Scoped, order),
        );
        let d = engine.decide(&Request {
            op: "files.read",
            principal: &who,
            args: &path_args("/data/private/key"),
        });
        let Decision::Denied { rule, code, .. } = d else {
            unreachable!("a covered path is denied: {d:?}")
        };
        assert_eq!(&*rule.name, "deny");
        assert_eq!(code, codes::POLICY_DENIED);
    }
}

#[test]
fn a_lone_allow_whose_own_glob_matches_refuses_with_the_path_denied_code() {
    let engine = Engine::new(
        catalog(),
        Policy::new().rule(Rule::allow("only", sels(&["files.read"])).paths(path_scope(
            &["/data"],
            &["private"],
            false,
        ))),
    );
    let d = engine.decide(&Request {
        op: "files.read",
        principal: &alice(),
        args: &path_args("/data/private/key"),
    });
    assert!(!d.is_allowed());
    assert_eq!(d.code(), Some(codes::POLICY_PATH_DENIED));
}

#[test]
fn a_deny_scoped_to_other_principals_does_not_deny_this_one() {
    let engine = Engine::new(
        catalog(),
        Policy::new()
            .rule(
                Rule::deny("deny-bob", sels(&["files.read"]))
                    .principals(vec![corral_policy::PrincipalSelector::Id("bob".to_owned())]),
            )
            .rule(
                Rule::allow("allow", sels(&["files.read"])).paths(path_scope(
                    &["/data"],
                    &[],
                    false,
                )),
            ),
    );
    let args = path_args("/data/x");
    let ask = |who: &Principal| {
        engine.decide(&Request {
            op: "files.read",
            principal: who,
            args: &args,
        })
    };
    assert_eq!(allowed_by(&ask(&alice())), Some(1));
    assert!(matches!(
        ask(&Principal::new("bob", &[])),
        Decision::Denied { .. }
    ));
}

/// Deno's CVE-2025-48888: with `--allow-read` given alongside `--deny-read`, a read of a denied
/// path ended up allowed. Here a blanket read allow (root `/`) plus a read deny of `/etc` must
/// deny `/etc/passwd` however it is spelled and in either rule order.
#[test]
fn deno_cve_2025_48888_a_blanket_read_allow_with_a_read_deny_still_denies_the_denied_path() {
    let who = alice();
    for deny_first in [true, false] {
        let allow = Rule::allow("allow-read", vec![Selector::Effect(Effect::Read)])
            .paths(unsafe_path_scope(&["/"]));
        let deny = Rule::deny("deny-read", vec![Selector::Effect(Effect::Read)]).paths(path_scope(
            &["/etc"],
            &[],
            false,
        ));
        let policy = if deny_first {
            Policy::new().rule(deny).rule(allow)
        } else {
            Policy::new().rule(allow).rule(deny)
        };
        let engine = Engine::new(Catalog::builtin(), policy);
        for op in ["files.read", "files.stat", "files.list", "files.download"] {
            for path in [
                "/etc/passwd",
                "/etc",
                "/tmp/../etc/passwd",
                "etc/passwd",
                "//etc//passwd",
            ] {
                let args = path_args(path);
                let d = engine.decide(&Request {
                    op,
                    principal: &who,
                    args: &args,
                });
                assert!(
                    matches!(&d, Decision::Denied { code, .. } if *code == codes::POLICY_DENIED),
                    "deny_first={deny_first}: {op} {path} gave {d:?}"
                );
            }
            let args = path_args("/tmp/notes");
            let d = engine.decide(&Request {
                op,
                principal: &who,
                args: &args,
            });
            assert!(
                d.is_allowed(),
                "deny_first={deny_first}: {op} /tmp/notes gave {d:?}"
            );
        }
    }
}

#[test]
fn an_op_root_that_cannot_be_compiled_refuses_every_path_even_under_the_rules_own_scope() {
    let mut c = Catalog::builtin();
    let Ok(id) = OpId::parse("app.peek") else {
        unreachable!("`app.peek` is a valid id")
    };
    let spec = OpSpec::new(id, &[Effect::Read], "peek at a file").param(
        "path",
        ParamKind::Path {
            root: Some("relative/root".to_owned()),
        },
        true,
    );
    assert!(c.add_custom(spec).is_ok());
    let with_scope = Engine::new(
        c.clone(),
        Policy::new()
            .rule(Rule::allow("all", vec![Selector::All]).paths(unsafe_path_scope(&["/"]))),
    );
    let without_scope = Engine::new(
        c,
        Policy::new().rule(Rule::allow("all", vec![Selector::All])),
    );
    for engine in [&with_scope, &without_scope] {
        for path in ["/etc/passwd", "/relative/root/x", "x"] {
            let args = path_args(path);
            let d = engine.decide(&Request {
                op: "app.peek",
                principal: &alice(),
                args: &args,
            });
            assert!(
                matches!(&d, Decision::NotPermitted { .. })
                    && d.code() == Some(codes::POLICY_PATH_OUTSIDE_SCOPE),
                "{path}: {d:?}"
            );
        }
    }
}

#[test]
fn an_op_root_and_a_rule_scope_must_both_admit_the_path() {
    let engine = Engine::new(
        catalog(),
        Policy::new().rule(Rule::allow("cat", vec![Selector::All]).paths(path_scope(
            &["/data/sub", "/etc"],
            &[],
            false,
        ))),
    );
    let who = alice();
    let ask = |path: &str| {
        let args = path_args(path);
        engine.decide(&Request {
            op: "app.cat",
            principal: &who,
            args: &args,
        })
    };
    assert!(ask("/data/sub/x").is_allowed());
    assert_eq!(
        ask("/etc/passwd").code(),
        Some(codes::POLICY_PATH_OUTSIDE_SCOPE)
    );
    assert_eq!(
        ask("/data/x").code(),
        Some(codes::POLICY_PATH_OUTSIDE_SCOPE)
    );
}
