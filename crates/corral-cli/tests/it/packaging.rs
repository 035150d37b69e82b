//! Packaging (issue 21 item 5): `corral --version` names the version and the git revision the
//! binary was built from (crates/corral-cli/build.rs).

/// `corral --version` is `corral <semver> (<revision>)`, the revision a short commit id (with
/// `-dirty` for a build with uncommitted changes) that this checkout knows, or `unknown` when the
/// binary was not built in a git checkout.
#[test]
fn corral_version_names_the_version_and_the_git_revision() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("--version")
        .output()
        .unwrap_or_else(|e| unreachable!("corral runs: {e}"));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.trim_end();
    assert_eq!(text.lines().count(), 1, "{text}");
    let Some(rest) = line.strip_prefix("corral ") else {
        unreachable!("`corral --version` starts with the name: {line}")
    };
    let Some((version, revision)) = rest.split_once(" (") else {
        unreachable!("`corral --version` has the revision in parentheses: {line}")
    };
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "{line}");
    let Some(revision) = revision.strip_suffix(')') else {
        unreachable!("{line}")
    };
    if revision == "unknown" {
        return;
    }
    let commit = revision.strip_suffix("-dirty").unwrap_or(revision);
    assert!(
        commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "a short commit id: {line}"
    );
    // The commit is one this checkout has (when git is here to ask).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if let Ok(known) = std::process::Command::new("git")
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .current_dir(&root)
        .output()
    {
        assert!(known.status.success(), "{commit} is a commit here: {line}");
    }
}
