//! Temporary: the table-driven decoder against the hand-written one it replaces.

use proptest::prelude::*;

use crate::no_panic_tests::{keys, yaml_value};
use crate::yaml::parse;

fn old_keys() -> Vec<&'static str> {
    let mut k: Vec<&'static str> = crate::decode_old::ALL_KEYS
        .iter()
        .flat_map(|l| l.iter().copied())
        .collect();
    k.extend(keys());
    k.extend([
        "tokens",
        "jwt",
        "sink",
        "path",
        "url",
        "backend",
        "host_uids",
        "cgroup_parent",
        "allowed_hosts",
        "allowed_origins",
        "value",
    ]);
    k.sort_unstable();
    k.dedup();
    k
}

fn compare(source: &str) -> Result<(), TestCaseError> {
    let Ok(tree) = parse(source) else {
        return Ok(());
    };
    let mut old = crate::decode_old::Decoder::new();
    let oc = old.config(&tree);
    let mut new = super::Decoder::new();
    let nc = new.config(&tree);
    prop_assert_eq!(&oc, &nc, "config differs for {}", source);
    let mut o: Vec<String> = old.diags.iter().map(|d| format!("{d:?}")).collect();
    let mut n: Vec<String> = new.diags.iter().map(|d| format!("{d:?}")).collect();
    if o != n {
        o.sort();
        n.sort();
        prop_assert_eq!(o, n, "diagnostics differ for {}", source);
        eprintln!("ORDER-ONLY: {source}");
    }
    Ok(())
}

fn value(depth: u32) -> BoxedStrategy<String> {
    let scalar = yaml_value(0);
    if depth == 0 {
        return scalar;
    }
    prop_oneof![
        2 => scalar,
        1 => proptest::collection::vec(value(depth - 1), 0..3)
            .prop_map(|items| format!("[{}]", items.join(", "))),
        3 => proptest::collection::vec(
            (proptest::sample::select(old_keys()), value(depth - 1)),
            0..5,
        )
        .prop_map(|entries| {
            let body: Vec<String> = entries.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("{{{}}}", body.join(", "))
        }),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_new_decoder_says_what_the_old_one_said(
        version in proptest::bool::weighted(0.9),
        doc in proptest::collection::vec((proptest::sample::select(old_keys()), value(4)), 0..8)
    ) {
        let mut source = String::new();
        if version {
            source.push_str("version: 1\n");
        }
        let mut seen = std::collections::HashSet::new();
        for (k, v) in doc {
            if seen.insert(k) {
                source.push_str(&format!("{k}: {v}\n"));
            }
        }
        compare(&source)?;
    }
}

#[test]
fn the_test_corpora_decode_the_same() {
    for dir in [
        "tests/it",
        "../../docs",
        "../../examples",
        "../corral-cli/tests/it",
    ] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            // every string literal that looks like a config
            for chunk in text.split("version: 1").skip(1) {
                let src = format!("version: 1{}", chunk.split("\"#").next().unwrap_or(""));
                if let Err(e) = compare(&src) {
                    unreachable!("{e}");
                }
            }
        }
    }
}
