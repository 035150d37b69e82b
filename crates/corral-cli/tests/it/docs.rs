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
