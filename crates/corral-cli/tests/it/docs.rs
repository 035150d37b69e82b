//! `docs/errors.md` is generated from the code catalog and must stay in step with it.

#[test]
fn docs_errors_md_matches_the_catalog() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
    let want = corral_policy::codes::markdown();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let _ = std::fs::write(&path, &want);
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/errors.md is out of date; run `UPDATE_DOCS=1 cargo test -p corral-cli docs_errors`"
    );
}

#[test]
fn every_code_has_a_section_in_the_docs() {
    let md = corral_policy::codes::markdown();
    for c in corral_policy::codes::CATALOG {
        assert!(
            md.contains(&format!("### {}\n", c.code)),
            "{} has no section",
            c.code
        );
    }
}

/// The fenced ```yaml blocks of README.md and docs/*.md, with where each comes from.
fn yaml_examples() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        let mut docs: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let mut block: Option<(usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            match &mut block {
                None if line.trim_start() == "```yaml" => block = Some((i + 1, String::new())),
                None => {}
                Some((start, body)) if line.trim_start() == "```" => {
                    out.push((format!("{}:{start}", f.display()), std::mem::take(body)));
                    block = None;
                }
                Some((_, body)) => {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// `corral <args>` on the example `body` as a config (a fragment gets `version: 1`), with
/// every `CORRAL_*` variable it names set to a long enough value: the exit code, stdout,
/// stderr, and the config as checked.
fn check_example(body: &str, args: &[&str]) -> (i32, String, String, String) {
    let Ok(dir) = tempfile::tempdir() else {
        unreachable!("a temp dir can be made")
    };
    let config = if body.contains("version:") {
        body.to_owned()
    } else {
        format!("version: 1\n{body}")
    };
    let _ = std::fs::write(dir.path().join("corral.yaml"), &config);
    let mut env: Vec<(String, String)> = Vec::new();
    for word in config.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.len() > 3
            && word.starts_with("CORRAL_")
            && word
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            // A variable named for a url (`llm.base_url_env`) holds one.
            let value = if word.ends_with("_URL") {
                "https://models.example.com/v1".to_owned()
            } else {
                format!("{word}-example-secret-0123456789abcdef")
            };
            env.push((word.to_owned(), value));
        }
    }
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, out, err) = crate::corral_with_env(dir.path(), args, &env_refs);
    (code, out, err, config)
}

/// The reference card's examples all pass `check-config --strict`; the unattended CI agent's
/// `confirm: never` says why (`reason:`), so its finding is a note.
#[test]
fn the_reference_cards_examples_pass_strict() {
    let card: Vec<(String, String)> = yaml_examples()
        .into_iter()
        .filter(|(at, _)| at.contains("REFERENCE.md"))
        .collect();
    assert_eq!(card.len(), 4, "{card:?}");
    for (at, body) in &card {
        let (code, out, err, _) = check_example(body, &["check-config", "--strict"]);
        assert_eq!(code, 0, "{at}:\n{out}{err}");
    }
    let (_, out, err, _) = check_example(&card[3].1, &["check-config", "--strict"]);
    let findings = format!("{out}{err}");
    assert!(findings.contains("lint.confirm_never"), "{findings}");
    assert!(findings.contains("unattended on purpose"), "{findings}");
}

/// README.md's YAML examples pass `check-config --strict` (as the cookbook's do, in
/// `cookbook.rs`).
#[test]
fn the_readmes_examples_pass_strict() {
    let readme: Vec<(String, String)> = yaml_examples()
        .into_iter()
        .filter(|(at, _)| at.contains("README.md"))
        .collect();
    assert!(readme.len() >= 3, "{readme:?}");
    for (at, body) in &readme {
        let (code, out, err, config) = check_example(body, &["check-config", "--strict"]);
        assert_eq!(code, 0, "{at}:\n{config}\n{out}{err}");
    }
}

/// Every YAML example in README.md and docs/ loads (a fragment is checked as a whole config
/// with `version: 1` added): the examples cannot rot.
#[test]
fn every_yaml_example_in_the_docs_loads() {
    let examples = yaml_examples();
    assert!(
        examples.len() >= 5,
        "found only {} examples",
        examples.len()
    );
    for (at, body) in examples {
        let (code, out, err, config) = check_example(&body, &["check-config"]);
        assert_ne!(
            code, 2,
            "the example at {at} does not load:\n{config}\n{out}{err}"
        );
    }
}

/// `scripts/postgres-test-server --help` prints its usage and starts nothing; an unknown
/// argument is a usage error.
#[test]
fn the_postgres_test_server_script_prints_its_usage() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres-test-server");
    let out = std::process::Command::new(&script)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| unreachable!("the script runs: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.starts_with("Usage: scripts/postgres-test-server"),
        "{stdout}"
    );
    assert!(stdout.contains("CORRAL_TEST_POSTGRES_URL"), "{stdout}");
    // The usage shows the line it would print, indented; a started server's is the last line.
    assert!(
        !stdout.lines().any(|l| l.starts_with("export ")),
        "{stdout}"
    );
    assert!(out.stderr.is_empty(), "no server was started");
    let bad = std::process::Command::new(&script)
        .arg("--port")
        .output()
        .unwrap_or_else(|e| unreachable!("the script runs: {e}"));
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--help"));
}

/// The reference card (`docs/REFERENCE.md`) is at most 200 lines of at most 100 columns, and
/// `corral help reference` prints it as it is; `corral help <subcommand>` still prints that
/// subcommand's help, and an unknown one is a usage error that names the card.
#[test]
fn the_reference_card_fits_its_bounds_and_corral_help_reference_prints_it() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/REFERENCE.md");
    let card = std::fs::read_to_string(&path).unwrap_or_default();
    let lines: Vec<&str> = card.lines().collect();
    assert!((50..=200).contains(&lines.len()), "{} lines", lines.len());
    for (i, l) in lines.iter().enumerate() {
        assert!(
            l.chars().count() <= 100,
            "line {} has {} columns",
            i + 1,
            l.chars().count()
        );
    }
    let corral = env!("CARGO_BIN_EXE_corral");
    let run = |args: &[&str]| {
        std::process::Command::new(corral)
            .args(args)
            .output()
            .unwrap_or_else(|e| unreachable!("corral runs: {e}"))
    };
    let out = run(&["help", "reference"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), card);
    let serve = run(&["help", "serve"]);
    assert!(serve.status.success());
    assert!(
        String::from_utf8_lossy(&serve.stdout).contains("Usage: corral serve"),
        "{}",
        String::from_utf8_lossy(&serve.stdout)
    );
    let nested = run(&["help", "sandbox", "scenarios"]);
    assert!(String::from_utf8_lossy(&nested.stdout).contains("Usage: corral sandbox scenarios"));
    let unknown = run(&["help", "sandbox", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        err.contains("`corral sandbox` has no subcommand `nope`")
            && err.contains("corral help reference"),
        "{err}"
    );
    let top = run(&["--help"]);
    assert!(String::from_utf8_lossy(&top.stdout).contains("corral help reference"));
}
