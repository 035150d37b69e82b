//! Path scopes: escapes, anchoring, look-alikes, protected trees, templates, read-only scopes
//! and root validation.

use corral_policy::scope::{PathScope, PathScopeSpec, SymlinkMode};
use corral_policy::{ArgValue, Args, Decision, Policy, Principal, Rule, codes};

use crate::support::{
    alice, decide, engine, jailed, path_args, path_scope, sels, unsafe_path_scope, write_args,
};

/// `files.*` for everyone under `roots`.
fn files_under(roots: &[&str]) -> corral_policy::Engine {
    engine(
        Policy::new().rule(Rule::allow("files", sels(&["files.*"])).paths(path_scope(
            roots,
            &[],
            false,
        ))),
    )
}

fn read(e: &corral_policy::Engine, path: &str) -> Decision {
    decide(e, "files.read", &alice(), &path_args(path))
}

fn refused_with(d: &Decision, code: &str) -> bool {
    !d.is_allowed() && d.code() == Some(code)
}

#[test]
fn dot_dot_cannot_climb_out_of_a_root() {
    let e = files_under(&["/data"]);
    for path in [
        "/data/../etc/passwd",
        "/data/sub/../../etc",
        "/data/./../etc",
        "/data/sub/../../../../../etc/shadow",
        "/data/..",
    ] {
        let d = read(&e, path);
        assert!(
            refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE),
            "{path}: {d:?}"
        );
    }
}

#[test]
fn dot_dot_that_stays_inside_the_root_is_allowed_and_jailed_without_it() {
    let e = files_under(&["/data"]);
    let d = read(&e, "/data/sub/../x");
    assert_eq!(jailed(&d).as_deref(), Some("/data/x"));
    let Decision::Allowed(a) = &d else {
        unreachable!("allowed above")
    };
    assert_eq!(a.paths[0].1.root(), "/data");
    assert_eq!(a.paths[0].1.relative(), "x");
}

#[test]
fn a_relative_path_is_anchored_at_the_first_root() {
    let e = files_under(&["/data", "/data2"]);
    assert_eq!(jailed(&read(&e, "x")).as_deref(), Some("/data/x"));
    assert_eq!(jailed(&read(&e, "./sub/x")).as_deref(), Some("/data/sub/x"));
    assert_eq!(jailed(&read(&e, "sub/../x")).as_deref(), Some("/data/x"));
    let d = read(&e, "../x");
    assert!(refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
    let d = read(&e, "../../etc/passwd");
    assert!(refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
}

#[test]
fn an_absolute_path_outside_every_root_is_refused() {
    let e = files_under(&["/data"]);
    for path in ["/etc/passwd", "/", "/root/.ssh/id_rsa", "/tmp"] {
        let d = read(&e, path);
        assert!(
            refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE),
            "{path}: {d:?}"
        );
    }
}

#[test]
fn a_sibling_that_shares_a_prefix_is_not_under_the_root() {
    let e = files_under(&["/data"]);
    for path in ["/data2", "/data2/x", "/database", "/data-old/x"] {
        let d = read(&e, path);
        assert!(
            refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE),
            "{path}: {d:?}"
        );
    }
}

#[test]
fn trailing_and_doubled_slashes_normalize_to_the_same_path() {
    let e = files_under(&["/data"]);
    assert_eq!(jailed(&read(&e, "/data/")).as_deref(), Some("/data"));
    assert_eq!(jailed(&read(&e, "/data//x/")).as_deref(), Some("/data/x"));
    assert_eq!(
        jailed(&read(&e, "//data///sub//x")).as_deref(),
        Some("/data/sub/x")
    );
}

#[test]
fn a_root_written_with_a_trailing_slash_works_like_one_without() {
    let e = files_under(&["/data/"]);
    assert_eq!(jailed(&read(&e, "/data/x")).as_deref(), Some("/data/x"));
    let d = read(&e, "/data2/x");
    assert!(refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
}

#[test]
fn unicode_look_alikes_of_the_root_are_not_the_root() {
    let e = files_under(&["/data"]);
    for path in [
        "/d\u{430}ta/x",   // Cyrillic а
        "/\u{0501}ata/x",  // Cyrillic ԁ
        "/data\u{2215}x",  // division slash, not a separator
        "/data\u{ff0f}x",  // fullwidth solidus
        "/Data/x",         // case matters
        "/data\u{200b}/x", // zero-width space
    ] {
        let d = read(&e, path);
        assert!(
            refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE),
            "{path:?}: {d:?}"
        );
    }
}

#[test]
fn a_nul_byte_or_an_empty_path_is_refused_as_invalid() {
    let e = files_under(&["/data"]);
    for path in ["/data/x\0", "/data/\0/x", "x\0", ""] {
        let d = read(&e, path);
        assert!(
            refused_with(&d, codes::POLICY_PATH_INVALID),
            "{path:?}: {d:?}"
        );
    }
}

#[test]
fn a_path_argument_that_is_not_a_string_is_refused() {
    let e = files_under(&["/data"]);
    let d = decide(
        &e,
        "files.read",
        &alice(),
        &Args::new().with("path", ArgValue::Int(3)),
    );
    assert!(refused_with(&d, codes::POLICY_PATH_INVALID), "{d:?}");
}

#[test]
fn a_missing_required_path_is_refused_and_a_missing_optional_one_is_the_root() {
    let e = files_under(&["/data"]);
    let d = decide(&e, "files.read", &alice(), &Args::new());
    assert!(refused_with(&d, codes::POLICY_ARG_INVALID), "{d:?}");
    let d = decide(&e, "files.list", &alice(), &Args::new());
    assert_eq!(jailed(&d).as_deref(), Some("/data"));
}

#[test]
fn proc_sys_and_dev_are_refused_even_under_an_unsafe_slash_root() {
    let e = engine(
        Policy::new().rule(Rule::allow("all", sels(&["files.*"])).paths(unsafe_path_scope(&["/"]))),
    );
    assert_eq!(
        jailed(&read(&e, "/etc/hostname")).as_deref(),
        Some("/etc/hostname")
    );
    for path in [
        "/proc/self/environ",
        "/proc",
        "/sys/kernel",
        "/dev/mem",
        "/etc/../proc/self/environ",
        "proc/self/environ",
        "//proc//self/environ",
    ] {
        let d = read(&e, path);
        assert!(refused_with(&d, codes::POLICY_PATH_DENIED), "{path}: {d:?}");
    }
    // A directory that merely starts like a protected one is fine.
    assert!(read(&e, "/procfs/x").is_allowed());
}

#[test]
fn a_protected_state_directory_is_refused_under_any_root() {
    let e = engine(
        Policy::new()
            .rule(Rule::allow("files", sels(&["files.*"])).paths(path_scope(&["/var"], &[], false)))
            .protect("/var/lib/corral"),
    );
    assert!(read(&e, "/var/log/x").is_allowed());
    for path in [
        "/var/lib/corral",
        "/var/lib/corral/tokens",
        "/var/lib/x/../corral/db",
    ] {
        let d = read(&e, path);
        assert!(refused_with(&d, codes::POLICY_PATH_DENIED), "{path}: {d:?}");
    }
}

#[test]
fn a_principal_id_template_gives_each_caller_their_own_directory() {
    let e = files_under(&["/ws/{principal.id}"]);
    let bob = Principal::new("bob", &[]);
    assert_eq!(
        jailed(&read(&e, "/ws/alice/notes")).as_deref(),
        Some("/ws/alice/notes")
    );
    assert_eq!(
        jailed(&read(&e, "notes")).as_deref(),
        Some("/ws/alice/notes")
    );
    let d = read(&e, "/ws/bob/notes");
    assert!(refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
    let d = read(&e, "../bob/notes");
    assert!(refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
    let d = decide(&e, "files.read", &bob, &path_args("/ws/bob/notes"));
    assert_eq!(jailed(&d).as_deref(), Some("/ws/bob/notes"));
    let d = decide(&e, "files.read", &bob, &path_args("/ws/alice/notes"));
    assert!(refused_with(&d, codes::POLICY_PATH_OUTSIDE_SCOPE), "{d:?}");
}

#[test]
fn a_principal_id_that_is_not_one_plain_component_gets_no_directory() {
    let e = files_under(&["/ws/{principal.id}"]);
    for id in ["..", ".", "a/b", "../alice", ""] {
        let who = Principal::new(id, &[]);
        for path in ["/ws/x", "/ws", "/ws/alice/x", "/ws/a/b/x", "/x", "/ws/../x"] {
            let d = decide(&e, "files.read", &who, &path_args(path));
            assert!(!d.is_allowed(), "id {id:?} reached {path}: {d:?}");
        }
        for path in ["x", ".", "../x"] {
            let d = decide(&e, "files.read", &who, &path_args(path));
            assert!(
                refused_with(&d, codes::POLICY_PATH_INVALID),
                "id {id:?} {path}: {d:?}"
            );
        }
    }
}

#[test]
fn a_readonly_scope_refuses_writes_and_deletes_but_not_reads() {
    let e = engine(
        Policy::new().rule(Rule::allow("files", sels(&["files.*"])).paths(path_scope(
            &["/data"],
            &[],
            true,
        ))),
    );
    assert!(read(&e, "/data/x").is_allowed());
    let d = decide(&e, "files.write", &alice(), &write_args("/data/x"));
    assert!(refused_with(&d, codes::POLICY_READONLY), "{d:?}");
    let d = decide(&e, "files.delete", &alice(), &path_args("/data/x"));
    assert!(refused_with(&d, codes::POLICY_READONLY), "{d:?}");
}

#[test]
fn a_writable_rule_after_a_readonly_one_still_decides_a_write() {
    let e = engine(
        Policy::new()
            .rule(Rule::allow("ro", sels(&["files.*"])).paths(path_scope(&["/data"], &[], true)))
            .rule(Rule::allow("rw", sels(&["files.write"])).paths(path_scope(
                &["/data/out"],
                &[],
                false,
            ))),
    );
    let d = decide(&e, "files.write", &alice(), &write_args("/data/out/x"));
    assert!(
        matches!(&d, Decision::Allowed(a) if &*a.rule.name == "rw"),
        "{d:?}"
    );
    let d = decide(&e, "files.write", &alice(), &write_args("/data/x"));
    assert!(!d.is_allowed());
}

#[test]
fn deny_globs_refuse_names_at_any_depth_and_everything_beneath_them() {
    let e = engine(
        Policy::new().rule(Rule::allow("files", sels(&["files.*"])).paths(path_scope(
            &["/data"],
            &["*.pem", ".ssh", "/data/private"],
            false,
        ))),
    );
    for path in [
        "/data/key.pem",
        "/data/a/b/key.pem",
        "/data/.ssh",
        "/data/home/.ssh/id_rsa",
        "/data/private",
        "/data/private/x",
        "private/x",
        "/data/x/../private/y",
    ] {
        let d = read(&e, path);
        assert!(refused_with(&d, codes::POLICY_PATH_DENIED), "{path}: {d:?}");
    }
    for path in [
        "/data/key.pem.txt",
        "/data/ssh",
        "/data/x/private",
        "/data/privateer",
    ] {
        assert!(read(&e, path).is_allowed(), "{path}");
    }
}

fn scope_error(spec: PathScopeSpec) -> Option<&'static str> {
    PathScope::compile(spec).err().map(|e| e.code())
}

fn roots(r: &[&str]) -> PathScopeSpec {
    PathScopeSpec {
        roots: r.iter().map(|s| (*s).to_owned()).collect(),
        ..PathScopeSpec::default()
    }
}

#[test]
fn root_validation_refuses_slash_relative_glob_dot_dot_and_protected_roots() {
    assert_eq!(
        scope_error(roots(&["/"])),
        Some(codes::CONFIG_UNSAFE_REQUIRED)
    );
    assert_eq!(
        scope_error(roots(&["//"])),
        Some(codes::CONFIG_UNSAFE_REQUIRED)
    );
    assert_eq!(
        scope_error(roots(&["/./"])),
        Some(codes::CONFIG_UNSAFE_REQUIRED)
    );
    for bad in [
        "data",
        "./data",
        "",
        "/data/*",
        "/data/**",
        "/dat?",
        "/data/[ab]",
        "/proc/x",
        "/proc",
        "/sys/fs",
        "/dev",
        "/data/../etc",
        "/..",
        "/ws/{user}",
        "/ws/{principal.id}x",
        "/data\0",
    ] {
        assert_eq!(
            scope_error(roots(&[bad])),
            Some(codes::CONFIG_INVALID_SCOPE),
            "root {bad:?}"
        );
    }
    assert_eq!(scope_error(roots(&[])), Some(codes::CONFIG_INVALID_SCOPE));
    assert_eq!(
        scope_error(roots(&["/data", "relative"])),
        Some(codes::CONFIG_INVALID_SCOPE)
    );
}

#[test]
fn root_validation_accepts_plain_roots_templates_and_an_unsafe_slash() {
    for ok in [
        "/data",
        "/data/",
        "/ws/{principal.id}",
        "/ws/{principal.id}/in",
        "/procfs",
    ] {
        assert_eq!(scope_error(roots(&[ok])), None, "root {ok:?}");
    }
    let slash = PathScopeSpec {
        unsafe_: true,
        ..roots(&["/"])
    };
    assert_eq!(scope_error(slash), None);
}

#[test]
fn following_symlinks_needs_unsafe_and_a_bad_deny_glob_is_refused() {
    let follow = PathScopeSpec {
        symlinks: SymlinkMode::Follow,
        ..roots(&["/data"])
    };
    assert_eq!(
        scope_error(follow.clone()),
        Some(codes::CONFIG_UNSAFE_REQUIRED)
    );
    assert_eq!(
        scope_error(PathScopeSpec {
            unsafe_: true,
            ..follow
        }),
        None
    );
    let bad_glob = PathScopeSpec {
        deny: vec!["[unclosed".to_owned()],
        ..roots(&["/data"])
    };
    assert_eq!(scope_error(bad_glob), Some(codes::CONFIG_INVALID_SCOPE));
}

#[test]
fn scope_errors_carry_a_fix() {
    let Err(e) = PathScope::compile(roots(&["data"])) else {
        unreachable!("a relative root is refused")
    };
    assert!(!e.fix().is_empty());
    assert!(e.to_string().contains("data"));
}
