//! The diagnostics as people read them: rendered against the source, with no colour.

use corral_config::lint;

use crate::{load, load_err};

#[test]
fn a_misspelt_key_renders_with_its_line_and_the_suggestion() {
    let e = load_err(
        "corral.yaml",
        "version: 1\nrootz: /workspace\nenable: [files.read]\n",
    );
    insta::assert_snapshot!("misspelt_key", e.render());
}

#[test]
fn a_misspelt_op_id_renders_with_the_closest_id() {
    let e = load_err(
        "corral.yaml",
        "version: 1
rules:
  - name: downloads
    allow: [files.dowload]
    paths: {roots: [/workspace]}
",
    );
    insta::assert_snapshot!("misspelt_op_id", e.render());
}

#[test]
fn a_bad_size_renders_with_the_units_to_use() {
    let e = load_err(
        "corral.yaml",
        "version: 1
root: /workspace
preset:
  name: download_only
  max_bytes: 10 MB
",
    );
    insta::assert_snapshot!("bad_size", e.render());
}

#[test]
fn lint_findings_render_in_file_order_with_their_severities() {
    let l = load(
        "version: 1
rules:
  - name: grader
    allow: [commands.run]
    commands:
      allow: [\"python3 ...\"]
      cwd: /workspace
    principals: [\"role:grader\"]
custom:
  kafka.list_topics:
    argv: [/usr/bin/kafka-topics, --list]
    effects: [read]
auth:
  tokens:
    - id: agent
      roles: [operator]
      token_env: CORRAL_AGENT_TOKEN
    - id: ci
      roles: [ci]
      token_env: CORRAL_ADMIN_TOKEN
",
    );
    let findings = lint::lint(&l);
    assert_eq!(findings.len(), 4, "{findings:#?}");
    insta::assert_snapshot!("lint_findings", l.render(&findings));
}
