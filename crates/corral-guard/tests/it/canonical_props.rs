//! Canonical JSON (RFC 8785), the form a confirmation binds and the audit hashes, over generated
//! values: it is JSON that reads back to the same canonical form, the order in which an object's
//! members were written does not change it, and two values with one form are equal once read back.

use corral_guard::canonical::{canonical, digest};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// JSON values: every scalar kind (integers within 2^53 and beyond, doubles of every
/// magnitude, strings with controls, escapes and astral characters), nested arrays and objects.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}|[\\u{0}-\\u{1f}\"\\\\\\u{7f}\\u{2028}\\u{1F600}]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("\\PC{0,6}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn the_canonical_form_reads_back_to_itself(v in json()) {
        let c = canonical(&v);
        let back: Value = serde_json::from_str(&c).expect("the canonical form is JSON");
        prop_assert_eq!(canonical(&back), c.clone());
        prop_assert_eq!(digest(&back), digest(&v));
        // No insignificant whitespace outside strings: the form is compact.
        prop_assert!(!c.starts_with(' ') && !c.ends_with(' '));
    }

    #[test]
    fn member_order_does_not_change_the_form(members in prop::collection::btree_map("\\PC{0,6}", json(), 0..8)) {
        // The same members written in two orders, as a client would send them.
        let text = |pairs: Vec<(&String, &Value)>| {
            let body: Vec<String> = pairs
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), v))
                .collect();
            format!("{{{}}}", body.join(","))
        };
        let forward: Value = serde_json::from_str(&text(members.iter().collect())).expect("JSON");
        let backward: Value =
            serde_json::from_str(&text(members.iter().rev().collect())).expect("JSON");
        prop_assert_eq!(canonical(&forward), canonical(&backward));
    }

    #[test]
    fn one_form_means_one_value(a in json(), b in json()) {
        if canonical(&a) == canonical(&b) {
            let ra: Value = serde_json::from_str(&canonical(&a)).expect("JSON");
            let rb: Value = serde_json::from_str(&canonical(&b)).expect("JSON");
            prop_assert_eq!(ra, rb);
        }
    }
}
