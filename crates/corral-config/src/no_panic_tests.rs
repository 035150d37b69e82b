//! Hostile input never panics the loader or the lint, and every diagnostic it returns has a
//! catalog code and a span inside the source. (Stands in for a fuzz target: it runs in CI.)

use std::collections::HashMap;
use std::path::Path;

use proptest::prelude::*;

use crate::{Diagnostic, lint, load_str};

/// The decoder's keys, plus a few it does not know (so unknown-key paths are hit too).
pub(crate) fn keys() -> Vec<&'static str> {
    let mut k: Vec<&'static str> = crate::decode::all_tables()
        .into_iter()
        .flat_map(|(_, keys)| keys)
        .collect();
    k.extend(["token", "rot", "allwo"]);
    k.sort_unstable();
    k.dedup();
    k
}

const SCALARS: &[&str] = &[
    "1",
    "2",
    "0",
    "-1",
    "true",
    "false",
    "null",
    "~",
    "\"\"",
    "/",
    "/ws",
    "/ws/{principal.id}",
    "..",
    "files.read",
    "files.*",
    "agents.**",
    "*",
    "group:file_ops",
    "effect:read",
    "tier:confirm",
    "role:x",
    "id:a",
    "kind:human",
    "10MB",
    "10 MB",
    "5m",
    "90s",
    "10/min",
    "0/min",
    "workspace_jail",
    "download-only",
    "full_access",
    "python3 ...",
    "{path}",
    "\"sh -c 'x\"",
    "within",
    "follow",
    "deny",
    "exec",
    "read",
    "admin",
    "path",
    "enum",
    "CORRAL_T",
    "*.example.com",
    "https",
    "65536",
    "1.5",
    "\"\\0\"",
    "[]",
    "{}",
    "ghp_0123456789012345678901234567890123",
    "ops.files.dowload",
    "codex",
    "claude_code",
    "codec",
    "agent_host",
    "agents.codex.run",
    "agents.codex.sessions.create",
    "agents.sessions.create",
    "read-only",
    "workspace-write",
    "full",
    "lazy",
    "offline",
];

pub(crate) fn yaml_value(depth: u32) -> BoxedStrategy<String> {
    // Most scalars are quoted when YAML would read them as syntax, so documents get past the
    // parser and reach the decoder, the builder and the lint; some stay raw to probe the parser.
    let scalar = (
        proptest::sample::select(SCALARS),
        proptest::bool::weighted(0.85),
    )
        .prop_map(|(s, quote)| {
            if quote && s.contains(['*', '{', '}', '[', ']', ':', ',', '&', '!', '~']) {
                format!("{s:?}")
            } else {
                s.to_owned()
            }
        });
    if depth == 0 {
        return scalar.boxed();
    }
    prop_oneof![
        3 => scalar,
        1 => proptest::collection::vec(yaml_value(depth - 1), 0..4)
            .prop_map(|items| format!("[{}]", items.join(", "))),
        2 => proptest::collection::vec(
            (proptest::sample::select(keys()), yaml_value(depth - 1)),
            0..5,
        )
        .prop_map(|entries| {
            let body: Vec<String> = entries.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("{{{}}}", body.join(", "))
        }),
    ]
    .boxed()
}

fn check_diagnostics(source: &str, diags: &[Diagnostic]) {
    for d in diags {
        assert!(
            corral_policy::codes::lookup(d.code).is_some(),
            "code `{}` is not in the catalog",
            d.code
        );
        if let Some(s) = d.span {
            assert!(
                s.offset + s.len <= source.len(),
                "span {s:?} outside the source"
            );
        }
    }
}

fn run(source: &str) -> bool {
    let mut env = HashMap::new();
    env.insert("CORRAL_T".to_owned(), "0123456789abcdef".to_owned());
    match load_str("fuzz.yaml", source, Path::new("/tmp"), &env) {
        Ok(loaded) => {
            let findings = lint::lint(&loaded);
            check_diagnostics(source, &findings);
            let _ = loaded.render(&findings);
            true
        }
        Err(e) => {
            assert!(!e.diagnostics.is_empty(), "a failed load says why");
            check_diagnostics(source, &e.diagnostics);
            let _ = e.render();
            false
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn arbitrary_text_never_panics(source in any::<String>()) {
        let _ = run(&source);
    }

    #[test]
    fn config_shaped_documents_never_panic(doc in proptest::collection::vec(
        (proptest::sample::select(keys()), yaml_value(3)), 0..8)
    ) {
        let mut source = String::from("version: 1\n");
        for (k, v) in doc {
            source.push_str(&format!("{k}: {v}\n"));
        }
        let _ = run(&source);
    }
}

#[test]
fn the_structured_generator_reaches_the_lint() {
    // Guards the generator above: a document it can produce loads and is linted.
    assert!(run(
        "version: 1\npreset: {name: \"ci_runner\", commands: [\"python3 ...\"], root: /ws}\n"
    ));
}
