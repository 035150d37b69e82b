//! Command scopes: argv patterns, placeholders, deny patterns, shell, cwd and the required
//! scope.

use corral_policy::scope::{CommandScope, CommandScopeSpec};
use corral_policy::{ArgValue, Args, Decision, Engine, Policy, Rule, codes};

use crate::support::{alice, argv_args, command_scope, decide, engine, path_scope, sels, strings};

fn spec(allow: &[&str], deny: &[&str]) -> CommandScopeSpec {
    CommandScopeSpec {
        allow: strings(allow),
        deny: strings(deny),
        cwd: Some("/ws".to_owned()),
        ..CommandScopeSpec::default()
    }
}

fn runner(spec: CommandScopeSpec) -> Engine {
    engine(
        Policy::new()
            .rule(Rule::allow("run", sels(&["commands.run"])).commands(command_scope(spec))),
    )
}

fn run(e: &Engine, argv: &[&str]) -> Decision {
    decide(e, "commands.run", &alice(), &argv_args(argv))
}

fn refused_with(d: &Decision, code: &str) -> bool {
    !d.is_allowed() && d.code() == Some(code)
}

#[test]
fn a_literal_pattern_admits_exactly_that_argv() {
    let e = runner(spec(&["git status"], &[]));
    assert!(run(&e, &["git", "status"]).is_allowed());
    for argv in [
        &["git", "push"][..],
        &["git"],
        &["git", "status", "--porcelain"],
        &["gitx", "status"],
        &["git", "Status"],
    ] {
        let d = run(&e, argv);
        assert!(
            refused_with(&d, codes::POLICY_COMMAND_NOT_ALLOWED),
            "{argv:?}: {d:?}"
        );
    }
}

#[test]
fn a_glob_token_matches_exactly_one_argument_without_crossing_a_slash_or_climbing() {
    let e = runner(spec(&["pytest tests/*.py"], &[]));
    assert!(run(&e, &["pytest", "tests/test_a.py"]).is_allowed());
    for argv in [
        &["pytest", "tests/sub/test_a.py"][..],
        &["pytest", "tests/../secrets.py"],
        &["pytest", "tests/a.py", "tests/b.py"],
        &["pytest"],
        &["pytest", "other/a.py"],
    ] {
        let d = run(&e, argv);
        assert!(
            refused_with(&d, codes::POLICY_COMMAND_NOT_ALLOWED),
            "{argv:?}: {d:?}"
        );
    }
}

#[test]
fn three_dots_match_any_number_of_arguments_including_none() {
    let e = runner(spec(&["ls ...", "make ... install"], &[]));
    assert!(run(&e, &["ls"]).is_allowed());
    assert!(run(&e, &["ls", "-la", "/etc"]).is_allowed());
    assert!(run(&e, &["make", "install"]).is_allowed());
    assert!(run(&e, &["make", "-j4", "all", "install"]).is_allowed());
    let d = run(&e, &["make", "install", "extra"]);
    assert!(refused_with(&d, codes::POLICY_COMMAND_NOT_ALLOWED), "{d:?}");
}

#[test]
fn a_path_placeholder_is_jailed_under_the_cwd() {
    let e = runner(spec(&["cat {path}"], &[]));
    for ok in [
        "notes.txt",
        "sub/notes.txt",
        "sub/../notes.txt",
        "./notes.txt",
        "/ws/notes.txt",
        "/ws",
    ] {
        assert!(run(&e, &["cat", ok]).is_allowed(), "{ok}");
    }
    for bad in [
        "../etc/passwd",
        "/etc/passwd",
        "..",
        "sub/../../etc",
        "/ws/../etc/passwd",
        "/wsx/notes",
        "",
        "a\0b",
    ] {
        let d = run(&e, &["cat", bad]);
        assert!(
            refused_with(&d, codes::POLICY_COMMAND_NOT_ALLOWED),
            "{bad:?}: {d:?}"
        );
    }
}

#[test]
fn a_path_placeholder_without_a_cwd_admits_nothing() {
    let e = runner(CommandScopeSpec {
        cwd: None,
        ..spec(&["cat {path}"], &[])
    });
    let d = run(&e, &["cat", "notes.txt"]);
    assert!(refused_with(&d, codes::POLICY_COMMAND_NOT_ALLOWED), "{d:?}");
}

#[test]
fn an_int_placeholder_takes_only_a_signed_decimal_integer() {
    let e = runner(spec(&["head -n {int} {path}"], &[]));
    for ok in ["5", "-5", "0", "9223372036854775807"] {
        assert!(run(&e, &["head", "-n", ok, "f"]).is_allowed(), "{ok}");
    }
    for bad in [
        "ten",
        "",
        "-",
        "5.0",
        "0x10",
        "+5",
        "5 ",
        "99999999999999999999",
    ] {
        let d = run(&e, &["head", "-n", bad, "f"]);
        assert!(
            refused_with(&d, codes::POLICY_COMMAND_NOT_ALLOWED),
            "{bad:?}: {d:?}"
        );
    }
}

#[test]
fn a_word_placeholder_rejects_options_and_odd_characters() {
    let e = runner(spec(&["git checkout {word}"], &[]));
    for ok in ["main", "feature-1", "v1.2.3", "_x"] {
        assert!(run(&e, &["git", "checkout", ok]).is_allowed(), "{ok}");
    }
    for bad in ["--force", "-b", "", "a b", "a/b", ".hidden", "$(id)", "a;b"] {
        let d = run(&e, &["git", "checkout", bad]);
        assert!(
            refused_with(&d, codes::POLICY_COMMAND_NOT_ALLOWED),
            "{bad:?}: {d:?}"
        );
    }
}

#[test]
fn a_deny_pattern_in_the_scope_beats_its_allow_patterns() {
    let e = runner(spec(&["git ..."], &["git push ...", "git * --force"]));
    assert!(run(&e, &["git", "status"]).is_allowed());
    for argv in [
        &["git", "push"][..],
        &["git", "push", "origin", "main"],
        &["git", "reset", "--force"],
    ] {
        let d = run(&e, argv);
        assert!(
            refused_with(&d, codes::POLICY_COMMAND_DENIED),
            "{argv:?}: {d:?}"
        );
    }
}

#[test]
fn a_deny_rule_with_a_command_scope_beats_an_allow_rule_in_either_order() {
    let allow = || {
        Rule::allow("run", sels(&["commands.run"])).commands(command_scope(spec(&["git ..."], &[])))
    };
    let deny = || {
        Rule::deny("no-push", sels(&["commands.run"])).commands(command_scope(CommandScopeSpec {
            allow: strings(&["git push ..."]),
            ..CommandScopeSpec::default()
        }))
    };
    for policy in [
        Policy::new().rule(allow()).rule(deny()),
        Policy::new().rule(deny()).rule(allow()),
    ] {
        let e = engine(policy);
        assert!(run(&e, &["git", "status"]).is_allowed());
        let d = run(&e, &["git", "push", "--force"]);
        assert!(
            matches!(&d, Decision::Denied { rule, code, .. } if &*rule.name == "no-push" && *code == codes::POLICY_DENIED),
            "{d:?}"
        );
    }
}

#[test]
fn a_deny_rule_with_a_path_scope_covers_absolute_paths_in_the_argv_and_the_cwd() {
    let e = engine(
        Policy::new()
            .rule(
                Rule::allow("run", sels(&["commands.run"])).commands(command_scope(
                    CommandScopeSpec {
                        allow: strings(&["cat ..."]),
                        cwd: Some("/ws".to_owned()),
                        ..CommandScopeSpec::default()
                    },
                )),
            )
            .rule(
                Rule::deny("no-secrets", sels(&["commands.run"])).paths(path_scope(
                    &["/ws/secrets"],
                    &[],
                    false,
                )),
            ),
    );
    assert!(run(&e, &["cat", "/ws/notes"]).is_allowed());
    let d = run(&e, &["cat", "/ws/x/../secrets/key"]);
    assert!(
        matches!(&d, Decision::Denied { code, .. } if *code == codes::POLICY_DENIED),
        "{d:?}"
    );
    let args = argv_args(&["cat", "key"]).str("cwd", "/ws/secrets");
    let d = decide(&e, "commands.run", &alice(), &args);
    assert!(
        matches!(&d, Decision::Denied { code, .. } if *code == codes::POLICY_DENIED),
        "{d:?}"
    );
}

#[test]
fn a_shell_is_refused_unless_the_scope_allows_one() {
    let shell_call = Args::new()
        .str("command", "ls -la")
        .with("shell", ArgValue::Bool(true));
    let e = runner(spec(&["ls ..."], &[]));
    let d = decide(&e, "commands.run", &alice(), &shell_call);
    assert!(refused_with(&d, codes::POLICY_SHELL_NOT_ALLOWED), "{d:?}");
    // The same command line without a shell is split into an argv and admitted.
    let d = decide(
        &e,
        "commands.run",
        &alice(),
        &Args::new().str("command", "ls -la"),
    );
    assert!(d.is_allowed(), "{d:?}");

    let e = runner(CommandScopeSpec {
        shell: true,
        ..spec(&["ls ..."], &[])
    });
    let d = decide(&e, "commands.run", &alice(), &shell_call);
    let Decision::Allowed(a) = &d else {
        unreachable!("a shell scope admits a shell call: {d:?}")
    };
    assert!(a.command.as_ref().is_some_and(|c| c.shell));
}

#[test]
fn a_command_line_with_unbalanced_quotes_is_refused() {
    let e = runner(spec(&["echo ..."], &[]));
    let d = decide(
        &e,
        "commands.run",
        &alice(),
        &Args::new().str("command", "echo 'oops"),
    );
    assert!(refused_with(&d, codes::POLICY_ARG_INVALID), "{d:?}");
}

#[test]
fn a_cwd_outside_the_scope_is_refused_and_one_inside_is_jailed() {
    let e = runner(spec(&["make ..."], &[]));
    for bad in ["/etc", "/ws/../etc", "../etc", "/wsx", "sub/../../etc"] {
        let args = argv_args(&["make"]).str("cwd", bad);
        let d = decide(&e, "commands.run", &alice(), &args);
        assert!(
            refused_with(&d, codes::POLICY_CWD_OUTSIDE_SCOPE),
            "{bad}: {d:?}"
        );
    }
    let args = argv_args(&["make"]).str("cwd", "/ws/sub");
    let d = decide(&e, "commands.run", &alice(), &args);
    let Decision::Allowed(a) = &d else {
        unreachable!("a cwd under the scope is admitted: {d:?}")
    };
    let Some(cwd) = a.command.as_ref().and_then(|c| c.cwd.as_ref()) else {
        unreachable!("the grant carries the cwd")
    };
    assert_eq!(cwd.absolute(), "/ws/sub");
    assert_eq!(cwd.root(), "/ws");
    // No cwd given: the scope's own cwd is used.
    let d = run(&e, &["make"]);
    let Decision::Allowed(a) = &d else {
        unreachable!("admitted: {d:?}")
    };
    assert_eq!(
        a.command
            .as_ref()
            .and_then(|c| c.cwd.as_ref())
            .map(|c| c.absolute())
            .as_deref(),
        Some("/ws")
    );
}

#[test]
fn a_cwd_is_refused_when_the_scope_has_none() {
    let e = runner(CommandScopeSpec {
        cwd: None,
        ..spec(&["make ..."], &[])
    });
    let args = argv_args(&["make"]).str("cwd", "/tmp");
    let d = decide(&e, "commands.run", &alice(), &args);
    assert!(refused_with(&d, codes::POLICY_CWD_OUTSIDE_SCOPE), "{d:?}");
}

#[test]
fn allowing_commands_run_without_a_command_scope_is_scope_required() {
    let e = engine(Policy::new().rule(Rule::allow("run", sels(&["commands.run"]))));
    let d = run(&e, &["ls"]);
    assert!(refused_with(&d, codes::POLICY_SCOPE_REQUIRED), "{d:?}");
    // A path scope is not a command scope.
    let e =
        engine(Policy::new().rule(
            Rule::allow("run", sels(&["commands.run"])).paths(path_scope(&["/ws"], &[], false)),
        ));
    let d = run(&e, &["ls"]);
    assert!(refused_with(&d, codes::POLICY_SCOPE_REQUIRED), "{d:?}");
    // And the same holds for urls.
    let e = engine(Policy::new().rule(Rule::allow("net", sels(&["http.fetch"]))));
    let d = decide(
        &e,
        "http.fetch",
        &alice(),
        &Args::new().str("url", "https://example.com/"),
    );
    assert!(refused_with(&d, codes::POLICY_SCOPE_REQUIRED), "{d:?}");
}

#[test]
fn the_grant_names_the_pattern_and_carries_the_environment() {
    let e = runner(CommandScopeSpec {
        env_pass: strings(&["PATH"]),
        env_set: vec![("LANG".to_owned(), "C".to_owned())],
        ..spec(&["ls ...", "git status"], &[])
    });
    let d = run(&e, &["git", "status"]);
    let Decision::Allowed(a) = &d else {
        unreachable!("admitted: {d:?}")
    };
    let Some(c) = &a.command else {
        unreachable!("the grant carries the command")
    };
    assert_eq!(c.pattern, "git status");
    assert_eq!(c.argv, strings(&["git", "status"]));
    assert_eq!(c.env_pass, strings(&["PATH"]));
    assert_eq!(c.env_set, vec![("LANG".to_owned(), "C".to_owned())]);
    assert!(!c.shell);
}

#[test]
fn malformed_command_scopes_are_refused_when_compiled() {
    for bad in [
        spec(&["{path} x"], &[]),
        spec(&["... x"], &[]),
        spec(&["ls {file}"], &[]),
        spec(&["echo 'unbalanced"], &[]),
        spec(&["ls [unclosed"], &[]),
        spec(&[""], &[]),
        CommandScopeSpec {
            cwd: Some("relative".to_owned()),
            ..spec(&["ls"], &[])
        },
        CommandScopeSpec {
            cwd: Some("/".to_owned()),
            ..spec(&["ls"], &[])
        },
        CommandScopeSpec {
            cwd: Some("/ws/../etc".to_owned()),
            ..spec(&["ls"], &[])
        },
    ] {
        let r = CommandScope::compile(bad.clone());
        assert!(
            matches!(&r, Err(e) if e.code() == codes::CONFIG_INVALID_SCOPE),
            "{bad:?} gave {:?}",
            r.err()
        );
    }
}

#[test]
fn a_relative_cwd_or_argument_that_lands_in_a_denied_directory_is_denied_like_an_absolute_one() {
    let e = engine(
        Policy::new()
            .rule(
                Rule::allow("run", sels(&["commands.run"])).commands(command_scope(
                    CommandScopeSpec {
                        allow: strings(&["cat ..."]),
                        cwd: Some("/ws".to_owned()),
                        ..CommandScopeSpec::default()
                    },
                )),
            )
            .rule(
                Rule::deny("no-secrets", sels(&["commands.run"])).paths(path_scope(
                    &["/ws/secrets"],
                    &["*.pem"],
                    false,
                )),
            ),
    );
    let denied =
        |d: &Decision| matches!(d, Decision::Denied { rule, .. } if &*rule.name == "no-secrets");
    for (cwd, argv) in [
        (Some("secrets"), &["cat", "key"][..]),
        (Some("/ws/secrets"), &["cat", "key"]),
        (Some("sub/../secrets"), &["cat", "key"]),
        (None, &["cat", "secrets/key"]),
        (None, &["cat", "/ws/secrets/key"]),
        (Some("sub"), &["cat", "../secrets/key"]),
        (None, &["cat", "cert.pem"]),
        (None, &["cat", "/ws/cert.pem"]),
    ] {
        let mut args = argv_args(argv);
        if let Some(c) = cwd {
            args = args.str("cwd", c);
        }
        let d = decide(&e, "commands.run", &alice(), &args);
        assert!(denied(&d), "cwd {cwd:?} argv {argv:?}: {d:?}");
    }
    // Elsewhere in the workspace the command runs, and a bare program name is not a path.
    let d = decide(
        &e,
        "commands.run",
        &alice(),
        &argv_args(&["cat", "notes", "sub/x"]),
    );
    assert!(d.is_allowed(), "{d:?}");
    let e = engine(
        Policy::new()
            .rule(
                Rule::allow("run", sels(&["commands.run"]))
                    .commands(command_scope(spec(&["secrets ...", "./secrets ..."], &[]))),
            )
            .rule(
                Rule::deny("no-secrets", sels(&["commands.run"])).paths(path_scope(
                    &["/ws/secrets"],
                    &[],
                    false,
                )),
            ),
    );
    let d = run(&e, &["secrets", "--list"]);
    assert!(d.is_allowed(), "{d:?}");
    let d = run(&e, &["./secrets", "--list"]);
    assert!(denied(&d), "{d:?}");
}
